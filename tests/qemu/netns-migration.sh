#!/bin/bash
# netns-migration.sh URI_SCHEME WORKLOAD -- one migration between two network namespaces joined
# by a veth pair (as two hosts): the source QEMU in qmig-a (10.77.0.1), the destination in
# qmig-b (10.77.0.2). Needs root (ip netns). For rdma, softrdma binds each side's device to its
# veth end (SOFTRDMA_NETDEV), as `rdma link add rxe0 type rxe netdev veth` would.
#   URI_SCHEME: tcp | rdma      WORKLOAD: as run-migration.sh
#   VETH_MTU (default 9000): the veth MTU; softrdma's RoCE MTU and large segment follow from it
#   (1500: RoCE MTU 1024 and no large segments; 9000: 4096 and 8192-byte segments).
#   Other knobs: those of run-migration.sh (the build's lib dir comes from LD_LIBRARY_PATH).
set -u
HERE=$(dirname "$(readlink -f "$0")")
[ $# -eq 2 ] || { sed -n '2,10p' "$0"; exit 2; }
[ "$(id -u)" = 0 ] || { echo "netns-migration.sh: needs root (ip netns)" >&2; exit 2; }
A=qmig-a B=qmig-b MTU=${VETH_MTU:-9000}
cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
cleanup
trap cleanup EXIT
ip netns add $A && ip netns add $B || exit 1
ip link add qmig-va netns $A type veth peer name qmig-vb netns $B || exit 1
ip -n $A addr add 10.77.0.1/24 dev qmig-va
ip -n $B addr add 10.77.0.2/24 dev qmig-vb
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set qmig-va mtu "$MTU" up
ip -n $B link set qmig-vb mtu "$MTU" up
port=$((20000 + RANDOM % 20000))
export SRC_WRAPPER="ip netns exec $A" DST_WRAPPER="ip netns exec $B"
export SRC_ENV="${SRC_ENV:-} SOFTRDMA_NETDEV=qmig-va" DST_ENV="${DST_ENV:-} SOFTRDMA_NETDEV=qmig-vb"
"$HERE/run-migration.sh" "$1:10.77.0.2:$port" "$2"
