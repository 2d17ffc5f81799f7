#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The device view of `softrdma run` (docs/view.md), as root and as an ordinary user (nobody):
# the program sees /dev/infiniband/uverbs0 as a character device it can open, the sysfs
# attributes middleware reads (node type and GUID, port state, link layer, GID, GID type
# "RoCE v2", the GID's net device, NUMA node, CPUs, infiniband_verbs/uverbs0), agreeing with
# what ibv_devinfo says in the same view; ibv_devices still lists softrdma0; the rest of /dev
# and /sys/class is as it was; nothing outside the program's view changes; --no-view shows
# nothing. Between network namespaces, the GID's net device is the veth. A device that took
# another port than 4791 shows gids/1 and its LID only while a process holds it there.

. "$(dirname "$0")/lib.sh"
need_build
need_cmd ibv_devinfo ibv_devices python3

T=30

# What the program sees, as key=value lines, after ibv_devinfo -v ran in the same view (the
# sysfs files naming the GID and GUID are those of the last process that opened the device).
PROBE='
ibv_devinfo -v >"$OUT.devinfo" 2>&1 || echo "devinfo_rc=$?"
ibv_devices >"$OUT.devices" 2>&1
S=/sys/class/infiniband/softrdma0
[ -c /dev/infiniband/uverbs0 ] && echo uverbs0=chardev
(exec 3<>/dev/infiniband/uverbs0) 2>/dev/null && echo uverbs0_open=ok
[ -c /dev/infiniband/rdma_cm ] && echo rdma_cm=chardev
for f in node_type node_guid ports/1/state ports/1/phys_state ports/1/link_layer ports/1/gids/0 \
	 ports/1/gid_attrs/types/0 ports/1/gid_attrs/ndevs/0 device/numa_node device/local_cpus; do
	echo "$f=$(cat $S/$f 2>/dev/null)"
done
echo "ibdev=$(cat /sys/class/infiniband_verbs/uverbs0/ibdev 2>/dev/null)"
echo "verbs_abi=$(cat /sys/class/infiniband_verbs/abi_version 2>/dev/null)"
ls -A /dev | grep -vx infiniband >"$OUT.dev"
ls -A /sys/class | grep -vx -e infiniband -e infiniband_verbs >"$OUT.class"
ls /sys/class/net/lo/address >/dev/null 2>&1 && echo class_net=ok
'

# probe TAG [RUNAS...]: the probe in a view; results in $SR_TMP/TAG.*
probe() {
	local tag=$1
	shift
	OUT=$SR_TMP/$tag timeout -k 5 $T "$@" "$SR" run -- sh -c "$PROBE" >"$SR_TMP/$tag.kv" \
		2>"$SR_TMP/$tag.err"
	echo $? >"$SR_TMP/$tag.rc"
}
kv() { sed -n "s|^$2=||p" "$SR_TMP/$1.kv" | head -n1; }

# gid_full TEXT: a GID as ibv_devinfo prints it, in sysfs's eight groups of four.
gid_full() {
	python3 -c 'import ipaddress,sys; print(ipaddress.IPv6Address(sys.argv[1]).exploded)' "$1"
}

check_view() {
	local tag=$1 who=$2 g
	sr_expect_eq "$who: softrdma run exit" 0 "$(cat "$SR_TMP/$tag.rc")"
	[ -s "$SR_TMP/$tag.err" ] && sr_tail "$SR_TMP/$tag.err" >&2
	sr_expect_eq "$who: /dev/infiniband/uverbs0" chardev "$(kv "$tag" uverbs0)"
	sr_expect_eq "$who: open uverbs0 read-write" ok "$(kv "$tag" uverbs0_open)"
	sr_expect_eq "$who: /dev/infiniband/rdma_cm" chardev "$(kv "$tag" rdma_cm)"
	sr_expect_eq "$who: node_type" "1: CA" "$(kv "$tag" node_type)"
	sr_expect_eq "$who: port state" "4: ACTIVE" "$(kv "$tag" ports/1/state)"
	sr_expect_eq "$who: phys_state" "5: LinkUp" "$(kv "$tag" ports/1/phys_state)"
	sr_expect_eq "$who: link_layer" Ethernet "$(kv "$tag" ports/1/link_layer)"
	sr_expect_eq "$who: GID 0 type" "RoCE v2" "$(kv "$tag" ports/1/gid_attrs/types/0)"
	sr_expect_eq "$who: GID 0 net device" "${3:-lo}" "$(kv "$tag" ports/1/gid_attrs/ndevs/0)"
	sr_expect_eq "$who: numa_node" -1 "$(kv "$tag" device/numa_node)"
	[ -n "$(kv "$tag" device/local_cpus)" ] && sr_ok "$who: local_cpus $(kv "$tag" device/local_cpus)" ||
		sr_fail "$who: no device/local_cpus"
	sr_expect_eq "$who: infiniband_verbs/uverbs0/ibdev" softrdma0 "$(kv "$tag" ibdev)"
	sr_expect_eq "$who: infiniband_verbs/abi_version" 6 "$(kv "$tag" verbs_abi)"
	sr_expect_eq "$who: /sys/class/net visible" ok "$(kv "$tag" class_net)"
	sr_expect_grep "$who: ibv_devices lists softrdma0" 'softrdma0' "$SR_TMP/$tag.devices"
	# sysfs agrees with ibv_query_*: the same GUID and GID as ibv_devinfo in the view.
	sr_expect_eq "$who: node_guid as ibv_devinfo's" \
		"$(awk '$1 == "node_guid:" { print $2; exit }' "$SR_TMP/$tag.devinfo")" \
		"$(kv "$tag" node_guid)"
	g=$(sed -n 's/.*GID\[ *0\]:[[:space:]]*\([^,]*\),.*/\1/p' "$SR_TMP/$tag.devinfo" | head -n1)
	sr_expect_eq "$who: gids/0 as ibv_devinfo's GID[0] ($g)" "$(gid_full "${g:-::}")" \
		"$(kv "$tag" ports/1/gids/0)"
	# The rest of /dev and /sys/class is what it is outside the view.
	if diff "$SR_TMP/host.dev" "$SR_TMP/$tag.dev" >"$SR_TMP/$tag.devdiff"; then
		sr_ok "$who: /dev has every other entry of the host's"
	else
		sr_fail "$who: /dev differs from the host's"; sr_tail "$SR_TMP/$tag.devdiff" >&2
	fi
	if diff "$SR_TMP/host.class" "$SR_TMP/$tag.class" >"$SR_TMP/$tag.classdiff"; then
		sr_ok "$who: /sys/class has every other entry of the host's"
	else
		sr_fail "$who: /sys/class differs from the host's"; sr_tail "$SR_TMP/$tag.classdiff" >&2
	fi
}

ls -A /dev | grep -vx infiniband >"$SR_TMP/host.dev"
ls -A /sys/class | grep -vx -e infiniband -e infiniband_verbs >"$SR_TMP/host.class"
host_ib=$(ls /dev/infiniband /sys/class/infiniband 2>&1 | md5sum)
# The host's mount table without /run/netns: `ip netns add` and `del` of tests running beside
# this one (ctest -j) mount and unmount there; anything else softrdma run changed would show.
mounts() { awk '$5 !~ "^/run/netns(/|$)"' /proc/self/mountinfo | sort | md5sum; }
mounts_before=$(mounts)

probe root
check_view root "$(id -un)"

# An ordinary user: nobody, when it can reach the build (and setpriv exists).
if [ "$(id -u)" != 0 ]; then
	echo "(not root: the ordinary-user run above is the one)"
elif ! command -v setpriv >/dev/null; then
	sr_fail "no setpriv (util-linux): cannot check the view as an ordinary user"
elif ! setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$SR"; then
	echo "(nobody cannot reach $SR: ordinary-user half not run here)"
else
	chmod 0777 "$SR_TMP"
	probe nobody setpriv --reuid=65534 --regid=65534 --clear-groups
	check_view nobody nobody
fi

# The GID table's life (docs/view.md): on a fixed address whose 4791 another process holds,
# the device takes another port, and the view shows gids/1 (the port GID) and the port as LID
# only while a process of the program holds the device there. Run's own device is closed before
# the program starts; a closed device leaves none; others opening the device on 4791 leave a
# running process's; a process killed with the device open leaves its gids/1 until the next
# one opens the device on 4791.
LIFE='
S=/sys/class/infiniband/softrdma0/ports/1
show() { echo "$1_gid1=$(cat $S/gids/1 2>/dev/null || echo none)"; echo "$1_lid=$(cat $S/lid)"
	echo "$1_type1=$(cat $S/gid_attrs/types/1 2>/dev/null || echo none)"; }
show run
ibv_devinfo >/dev/null 2>&1
show closed
ibv_rc_pingpong -p $PP >/dev/null 2>&1 &
pp=$!
# ndevs/1 is the last file the library writes when it opens the device (engine/nic.c)
for i in $(seq 100); do [ -e $S/gid_attrs/ndevs/1 ] && break; sleep 0.1; done
show open
# Another process of the program opens the device on 4791 (the holder gone), twice, as UCX
# re-opens it: the port GID of the one still running off 4791 stays.
kill $HOLDER; while kill -0 $HOLDER 2>/dev/null; do sleep 0.05; done
ibv_devinfo >/dev/null 2>&1
ibv_devinfo >/dev/null 2>&1
kill -0 $pp 2>/dev/null && echo live_b=running
show live
kill -9 $pp; wait $pp 2>/dev/null
show killed
ibv_devinfo >/dev/null 2>&1
show moved
'
if command -v ibv_rc_pingpong >/dev/null; then
	LA=127.94.$((RANDOM % 250 + 1)).$((RANDOM % 250 + 1))
	timeout -k 5 $T python3 -c 'import socket,sys,time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 4791))
open(sys.argv[2], "w").close(); time.sleep(60)' "$LA" "$SR_TMP/held" &
	holder=$!
	for _ in $(seq 100); do [ -e "$SR_TMP/held" ] && break; sleep 0.05; done
	HOLDER=$holder PP=$((20000 + RANDOM % 10000)) SOFTRDMA_ADDR=$LA timeout -k 5 $T "$SR" run -- \
		sh -c "$LIFE" >"$SR_TMP/life.kv" 2>"$SR_TMP/life.err"
	kill $holder 2>/dev/null; wait $holder 2>/dev/null
	cat "$SR_TMP/life.kv"
	og=$(kv life open_gid1)
	sr_expect_eq "life: run's own device, closed, leaves no gids/1" none "$(kv life run_gid1)"
	sr_expect_eq "life: ... nor its port as LID" 0x0 "$(kv life run_lid)"
	sr_expect_eq "life: a closed device leaves no gids/1" none "$(kv life closed_gid1)"
	sr_expect_eq "life: ... nor gid_attrs/types/1" none "$(kv life closed_type1)"
	sr_expect_eq "life: ... nor its LID" 0x0 "$(kv life closed_lid)"
	case "$og" in
	0000:0000:0000:0000:????:ffff:*) sr_ok "life: an open device off 4791 shows its port GID ($og)" ;;
	*) sr_fail "life: an open device off 4791 shows gids/1 '$og', not a port GID" ;;
	esac
	sr_expect_eq "life: ... and its port as LID" "0x$(echo "$og" | cut -d: -f5 | sed 's/^0*//')" \
		"$(kv life open_lid)"
	sr_expect_eq "life: ... of type RoCE v2" "RoCE v2" "$(kv life open_type1)"
	sr_expect_eq "life: the process off 4791 still runs" running "$(kv life live_b)"
	sr_expect_eq "life: others opening the device on 4791 leave a running process's gids/1" \
		"$og" "$(kv life live_gid1)"
	sr_expect_eq "life: ... its gid_attrs/types/1" "RoCE v2" "$(kv life live_type1)"
	sr_expect_eq "life: ... and its LID" "$(kv life open_lid)" "$(kv life live_lid)"
	sr_expect_eq "life: a process killed with the device open leaves its gids/1" "$og" \
		"$(kv life killed_gid1)"
	sr_expect_eq "life: on 4791 (the holder gone), the killed process's gids/1 is gone" none \
		"$(kv life moved_gid1)"
	sr_expect_eq "life: ... and gid_attrs/types/1" none "$(kv life moved_type1)"
	sr_expect_eq "life: ... and the LID is 0" 0x0 "$(kv life moved_lid)"
else
	echo "(no ibv_rc_pingpong: the GID table's life not checked)"
fi

# --no-view: the program sees the host's /dev and /sys (no softrdma device in them).
OUT=$SR_TMP/noview timeout -k 5 $T "$SR" run --no-view -- sh -c \
	'ls /sys/class/infiniband/softrdma0 /dev/infiniband/uverbs0 2>&1 | md5sum; echo "v=${SOFTRDMA_VIEW-unset}"' \
	>"$SR_TMP/noview.out" 2>&1
sr_expect_grep "--no-view: SOFTRDMA_VIEW not set" '^v=unset$' "$SR_TMP/noview.out"
timeout -k 5 $T "$SR" run --no-view -- test -e /sys/class/infiniband/softrdma0 &&
	sr_fail "--no-view: /sys/class/infiniband/softrdma0 exists" ||
	sr_ok "--no-view: no /sys/class/infiniband/softrdma0"

# Nothing changed outside: our mounts and the host's directories are as they were.
sr_expect_eq "mounts of the test's namespace unchanged" "$mounts_before" \
	"$(mounts)"
sr_expect_eq "host /dev/infiniband and /sys/class/infiniband unchanged" "$host_ib" \
	"$(ls /dev/infiniband /sys/class/infiniband 2>&1 | md5sum)"

# Start-up cost, informational (not asserted: the machine is shared).
t0=$(date +%s%N); for _ in 1 2 3 4 5; do "$SR" run -- true; done; t1=$(date +%s%N)
for _ in 1 2 3 4 5; do "$SR" run --no-view -- true; done; t2=$(date +%s%N)
echo "start-up: $(((t1 - t0) / 5000)) us with the view, $(((t2 - t1) / 5000)) us without"

# Between network namespaces: the device on the veth shows the veth as its net device.
if [ "$(id -u)" = 0 ] && sr_netns_usable && sr_netns_pair vw; then
	probe netns ip netns exec "$SR_NSA" env SOFTRDMA_NETDEV="$SR_VA"
	sr_expect_eq "netns: GID 0 net device" "$SR_VA" "$(kv netns ports/1/gid_attrs/ndevs/0)"
	sr_expect_grep "netns: gids/0 is the veth's address" \
		"^ports/1/gids/0=0000:0000:0000:0000:0000:ffff:" "$SR_TMP/netns.kv"
else
	echo "(network namespaces not usable here: that half not run)"
fi
sr_finish
