#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Debian's unmodified libfabric (libfabric-bin) on softrdma through its verbs provider:
# `fi_info -p verbs` offers an FI_EP_MSG domain on softrdma0, and `fi_pingpong -c` (data
# integrity checked on every message) passes over `-p verbs -e msg` and `-p "verbs;ofi_rxm"
# -e rdm`, every size from 64 bytes to 1 MiB, 100 iterations each.
#
# libfabric's verbs provider ignores loopback interfaces (as on a real host, where the NIC sits
# on eth0), so the device is bound to an interface that is not lo: the first IPv4 interface
# that is up (both processes on it). Skipped, with a message, when there is none.
#
# Not between two network namespaces: this fi_pingpong's msg server gives libfabric neither an
# address nor a port, so the verbs provider asks rdma_getaddrinfo for "localhost" (passive),
# binds its listener to 127.0.0.1 and the server sends 127.0.0.1:PORT to the client, which in
# another namespace (or on another host) is its own loopback: the connect is refused (an ICMP
# port unreachable, reported as a reject with reason 8, provider error -8). The kernel's
# rdma_cm binds 127.0.0.1 the same way (to the first device), so this is the program's limit,
# not softrdma's.

. "$(dirname "$0")/lib.sh"
need_build
need_cmd fi_info fi_pingpong

T=120
ITERS=100
ran=0

# pingpong NAME PROV EP SRV_NS SRV_IF CLI_NS CLI_IF SRV_ADDR
pingpong() {
	local name=$1 prov=$2 ep=$3 sns=$4 sif=$5 cns=$6 cif=$7 addr=$8 port spid rc
	port=$(sr_free_port) || { sr_fail "$name: no free port"; return; }
	echo "--- $name: fi_pingpong -p '$prov' -e $ep -c -I $ITERS (server on $sif${sns:+ in $sns}, client on $cif${cns:+ in $cns})"
	timeout -k 5 $T ${sns:+ip netns exec "$sns"} env SOFTRDMA_STATS_DUMP="$SR_TMP/$name.srv.stats" \
		"$SR" run --netdev "$sif" -- fi_pingpong -p "$prov" -e "$ep" -c -I $ITERS -B "$port" \
		>"$SR_TMP/$name.srv.out" 2>&1 &
	spid=$!
	SR_BG+=("$spid")
	if ! sr_wait_listen "$port" "$spid" "$sns" 30; then
		sr_fail "$name: the server did not listen on port $port"
		sr_tail "$SR_TMP/$name.srv.out" >&2
		return
	fi
	timeout -k 5 $T ${cns:+ip netns exec "$cns"} env SOFTRDMA_STATS_DUMP="$SR_TMP/$name.cli.stats" \
		"$SR" run --netdev "$cif" -- fi_pingpong -p "$prov" -e "$ep" -c -I $ITERS -P "$port" \
		"$addr" >"$SR_TMP/$name.cli.out" 2>&1
	rc=$?
	sr_expect_eq "$name: client exit" 0 $rc
	[ $rc = 0 ] || sr_tail "$SR_TMP/$name.cli.out" >&2
	wait "$spid"
	rc=$?
	sr_forget_pid "$spid"
	sr_expect_eq "$name: server exit" 0 $rc
	[ $rc = 0 ] || sr_tail "$SR_TMP/$name.srv.out" >&2
	# Every size ran its iterations, on both sides: "1m  100  =100 ..." is the last line.
	for side in srv cli; do
		sr_expect_grep "$name $side: 1 MiB x $ITERS, integrity checked" "^1m +$ITERS +=$ITERS " \
			"$SR_TMP/$name.$side.out"
	done
	sr_check_stats "$name" 1 drop_psn drop_dup drop_qp_gone
	# Each side received ITERS MiB of 1 MiB messages alone: as packets, or (ofi_rxm's
	# rendezvous READs) through the same-host direct path (docs/direct.md).
	for side in srv cli; do
		f=$SR_TMP/$name.$side.stats
		sr_expect_ge "$name $side: rx_bytes + direct_bytes" $((ITERS * 1048576)) \
			$(($(sr_stat "$f" rx_bytes) + $(sr_stat "$f" direct_bytes)))
	done
	ran=1
}

# fi_info NAME NS IF: the verbs provider offers an FI_EP_MSG endpoint on softrdma0.
check_info() {
	timeout -k 5 60 ${2:+ip netns exec "$2"} "$SR" run --netdev "$3" -- fi_info -p verbs \
		>"$SR_TMP/$1.info" 2>&1
	awk '/domain:/ { d = $2 } /type:/ { print d, $2 }' "$SR_TMP/$1.info" >"$SR_TMP/$1.pairs"
	sr_expect_grep "$1: fi_info -p verbs: FI_EP_MSG on softrdma0" '^softrdma0 FI_EP_MSG$' \
		"$SR_TMP/$1.pairs"
	sr_expect_grep "$1: fi_info -p verbs: verbs;ofi_rxm FI_EP_RDM" 'ofi_rxm' "$SR_TMP/$1.info"
}

# This host: the first IPv4 interface that is up and not loopback.
read -r IF ADDR < <(ip -o -4 addr show up 2>/dev/null |
	awk '$2 != "lo" { split($4, a, "/"); print $2, a[1]; exit }')
if [ -n "${IF:-}" ]; then
	check_info host "" "$IF"
	pingpong host_msg verbs msg "" "$IF" "" "$IF" "$ADDR"
	pingpong host_rdm "verbs;ofi_rxm" rdm "" "$IF" "" "$IF" "$ADDR"
fi

[ $ran = 1 ] || sr_skip "no IPv4 interface besides lo here (libfabric's verbs provider skips lo)"
sr_finish
