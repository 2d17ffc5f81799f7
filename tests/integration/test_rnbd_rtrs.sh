#!/bin/bash
# SPDX-License-Identifier: MIT
#
# RNBD over RTRS, server and client as separate processes on softrdma, on loopback: rnbd-server
# exports a directory; nbdkit with the plugin opens an RTRS session to it, and real NBD programs
# use it: qemu-img convert + compare, nbdcopy both ways (128 MiB by default: RNBD_TEST_MB),
# fio with crc32c verification, the access rules between clients of one server (second RW
# refused, migration allowed, RO refuses writes and changes nothing), a FUA write present in the
# server's file after SIGKILL of rnbd-server right after the answer. Then (as root) between two
# network namespaces joined by two veth pairs, a session of two paths: nbdcopy both ways, and
# fio with crc32c verification while one path is cut and restored: zero errors.
. "$(dirname "$0")/lib.sh"

need_cmd nbdkit nbdcopy nbdinfo qemu-img qemu-io fio cmp
need_build
SERVER=$SR_BUILD_DIR/bin/rnbd-server
PLUGIN=$SR_BUILD_DIR/lib/nbdkit-rnbd-plugin.so
[ -x "$SERVER" ] || sr_skip "no $SERVER (configure with -DRNBD_WITH_RTRS=ON, which needs ulp/rtrs)"
MB=${RNBD_TEST_MB:-128}

EXP=$SR_TMP/export
mkdir -p "$EXP"
truncate -s $((MB * 2))M "$EXP/disk.img"

# start_server NS PORT: rnbd-server in namespace NS (empty: here); sets SRV_PID
start_server() {
	local ns=$1 port=$2 dev=${3:-} i
	timeout 600 ${ns:+ip netns exec "$ns"} env ${dev:+SOFTRDMA_NETDEV=$dev} "$SR" run -- \
		"$SERVER" --search-path "$EXP" --port "$port" --stats "$SR_TMP/srv.stats" \
		>"$SR_TMP/srv.log" 2>&1 &
	SRV_PID=$!
	SR_BG+=($!)
	for ((i = 0; i < 100; i++)); do
		grep -q "exporting" "$SR_TMP/srv.log" 2>/dev/null && return 0
		kill -0 "$SRV_PID" 2>/dev/null || break
		sleep 0.1
	done
	sr_fail "rnbd-server did not start"; sr_tail "$SR_TMP/srv.log" >&2
	return 1
}

# start_client NAME NS DEV ARGS...: nbdkit + plugin in NS on a Unix socket; sets URI, CLI_PID
start_client() {
	local name=$1 ns=$2 dev=$3 i
	shift 3
	SOCK=$SR_TMP/$name.sock
	URI="nbd+unix:///?socket=$SOCK"
	timeout 600 ${ns:+ip netns exec "$ns"} env ${dev:+SOFTRDMA_NETDEV=$dev} "$SR" run -- \
		nbdkit -f -v -U "$SOCK" "$PLUGIN" "$@" >"$SR_TMP/$name.log" 2>&1 &
	CLI_PID=$!
	SR_BG+=($!)
	for ((i = 0; i < 200; i++)); do
		[ -S "$SOCK" ] && nbdinfo --size "$URI" >/dev/null 2>&1 && return 0
		kill -0 "$CLI_PID" 2>/dev/null || break
		sleep 0.1
	done
	return 1
}
stop_pid() { kill -TERM "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# checks NAME: the data acceptance against the running client $URI
data_checks() {
	local name=$1
	head -c $((MB / 4))M /dev/urandom >"$SR_TMP/a.raw"
	truncate -s $((MB / 2))M "$SR_TMP/a.raw"
	qemu-img convert -f raw -O qcow2 "$SR_TMP/a.raw" "$SR_TMP/a.qcow2"
	timeout 300 qemu-img convert -n -f qcow2 -O raw "$SR_TMP/a.qcow2" "$URI" 2>"$SR_TMP/convert.err" &&
		sr_ok "$name: qemu-img convert" || { sr_fail "$name: qemu-img convert"; sr_tail "$SR_TMP/convert.err" >&2; }
	timeout 300 qemu-img compare -f qcow2 -F raw "$SR_TMP/a.qcow2" "$URI" >"$SR_TMP/compare.out" 2>&1 &&
		sr_ok "$name: qemu-img compare" || { sr_fail "$name: qemu-img compare"; sr_tail "$SR_TMP/compare.out" >&2; }
	head -c ${MB}M /dev/urandom >"$SR_TMP/src"
	timeout 300 nbdcopy "$SR_TMP/src" "$URI" && sr_ok "$name: nbdcopy $MB MiB in" || sr_fail "$name: nbdcopy in"
	timeout 300 nbdcopy "$URI" "$SR_TMP/back" && sr_ok "$name: nbdcopy $MB MiB out" || sr_fail "$name: nbdcopy out"
	cmp -n $((MB << 20)) "$SR_TMP/src" "$SR_TMP/back" && sr_ok "$name: read back = written" || sr_fail "$name: read back differs"
	cmp -n $((MB << 20)) "$SR_TMP/src" "$EXP/disk.img" && sr_ok "$name: server's file = written" || sr_fail "$name: file differs"
}

run_fio() {	# NAME SECONDS
	timeout 300 fio --name=rnbd --ioengine=nbd --uri="$URI" --rw=randwrite --bs=4k --iodepth=16 \
		--size=$((MB / 2))m --offset=${MB}m --verify=crc32c --verify_backlog=128 --verify_fatal=1 \
		--verify_state_save=0 --runtime="$2" --time_based --output="$SR_TMP/fio-$1.out" >/dev/null 2>&1 &&
		grep -q "err= 0" "$SR_TMP/fio-$1.out" && sr_ok "$1: fio randwrite + crc32c verify, no error" ||
		{ sr_fail "$1: fio"; sr_tail "$SR_TMP/fio-$1.out" >&2; }
}

# ---- loopback
PORT=$(sr_free_port)
start_server "" "$PORT" || sr_finish
start_client lo "" "" path=127.0.0.1:$PORT device=disk.img session=lo1 stats="$SR_TMP/lo.stats" ||
	{ sr_fail "client did not come up"; sr_tail "$SR_TMP/lo.log" >&2; sr_finish; }
LO_PID=$CLI_PID
sr_expect_eq "loopback: export size" $((MB * 2 << 20)) "$(nbdinfo --size "$URI")"
data_checks loopback
run_fio loopback 8

# access rules between clients of one server
start_client rw2 "" "" path=127.0.0.1:$PORT device=disk.img session=lo2 &&
	sr_fail "a second RW open was allowed" || sr_ok "second RW open refused"
sr_expect_grep "refusal says why" "Operation not permitted" "$SR_TMP/rw2.log"
start_client mig "" "" path=127.0.0.1:$PORT device=disk.img session=lo3 access=migration &&
	sr_ok "migration open allowed next to the RW one" || sr_fail "migration open refused"
MIG_PID=$CLI_PID
start_client ro "" "" path=127.0.0.1:$PORT device=disk.img session=lo4 access=ro &&
	sr_ok "RO open allowed" || sr_fail "RO open refused"
sum=$(md5sum <"$EXP/disk.img")
timeout 60 qemu-io -f raw -c 'write 0 4096' "$URI" >"$SR_TMP/ro-write.out" 2>&1 &&
	sr_fail "RO: a write succeeded" || sr_ok "RO: write refused"
stop_pid "$CLI_PID"; stop_pid "$MIG_PID"
sr_expect_eq "RO attempt changed nothing" "$sum" "$(md5sum <"$EXP/disk.img")"

# FUA: on the server's file after SIGKILL of the server right after the answer
SOCK=$SR_TMP/lo.sock URI="nbd+unix:///?socket=$SOCK"
timeout 60 qemu-io -f raw -c 'write -f -P 0xcd 9437184 65536' "$URI" >"$SR_TMP/fua.out" 2>&1
# (SRV_PID is the `timeout` wrapper: its child is rnbd-server itself)
SRV_REAL=$(pgrep -P "$SRV_PID" | head -1)
kill -KILL "${SRV_REAL:-$SRV_PID}"
python3 -c 'import sys; d=open(sys.argv[1],"rb"); d.seek(9437184); sys.exit(0 if d.read(65536)==b"\xcd"*65536 else 1)' \
	"$EXP/disk.img" && sr_ok "FUA write present after SIGKILL of rnbd-server" || sr_fail "FUA write lost"
stop_pid "$LO_PID"
wait "$SRV_PID" 2>/dev/null

# ---- two namespaces, two paths
sr_netns_usable || { echo "note: no network namespaces here: the two-path half is not run"; sr_finish; }
sr_netns_two_pairs rn || { sr_fail "two veth pairs"; sr_finish; }
PORT=$(sr_free_port "$SR_NSA")
: >"$SR_TMP/srv.log"
timeout 600 ip netns exec "$SR_NSA" env SOFTRDMA_NETDEV="$SR_VA,$SR_VA2" "$SR" run -- \
	"$SERVER" --search-path "$EXP" --listen "$SR_NET.1" --listen "$SR_NET2.1" --port "$PORT" \
	--hb-interval-ms 200 --stats "$SR_TMP/srv2.stats" >"$SR_TMP/srv.log" 2>&1 &
SRV_PID=$!
SR_BG+=($!)
for ((i = 0; i < 100; i++)); do grep -q exporting "$SR_TMP/srv.log" && break; sleep 0.1; done
start_client ns "$SR_NSB" "$SR_VB,$SR_VB2" device=disk.img session=ns1 stats="$SR_TMP/ns.stats" \
	path="$SR_NET.2@$SR_NET.1:$PORT" path="$SR_NET2.2@$SR_NET2.1:$PORT" \
	hb_interval_ms=200 hb_missed=5 reconnect_delay_ms=500 rtrs_stats_dir="$SR_TMP/rtrs" ||
	{ sr_fail "netns: client did not come up"; sr_tail "$SR_TMP/ns.log" >&2; sr_tail "$SR_TMP/srv.log" >&2; sr_finish; }
NS_PID=$CLI_PID
mkdir -p "$SR_TMP/rtrs"
head -c ${MB}M /dev/urandom >"$SR_TMP/src"
timeout 300 nbdcopy "$SR_TMP/src" "$URI" && sr_ok "netns: nbdcopy $MB MiB in over two paths" || sr_fail "netns: nbdcopy in"
timeout 300 nbdcopy "$URI" "$SR_TMP/back" && sr_ok "netns: nbdcopy $MB MiB out" || sr_fail "netns: nbdcopy out"
cmp -n $((MB << 20)) "$SR_TMP/src" "$SR_TMP/back" && sr_ok "netns: read back = written" || sr_fail "netns: read back differs"
cmp -n $((MB << 20)) "$SR_TMP/src" "$EXP/disk.img" && sr_ok "netns: server's file = written" || sr_fail "netns: file differs"
# fio while path 2 is cut and restored
run_fio netns-cut 14 &
FIO_PID=$!
sleep 4
ip -n "$SR_NSB" link set "$SR_VB2" down
sleep 4
ip -n "$SR_NSB" link set "$SR_VB2" up
wait "$FIO_PID"
sleep 1.2
sr_expect_grep "netns: no IO error in the client's counters" "^errors 0$" "$SR_TMP/ns.stats"
cat "$SR_TMP"/rtrs/rtrs-*-clt-* >"$SR_TMP/rtrs-paths.txt" 2>/dev/null
sed 's/^/  /' "$SR_TMP/rtrs-paths.txt"
fo=$(grep -o 'failovers=[0-9]*' "$SR_TMP/rtrs-paths.txt" | cut -d= -f2 | awk '{s += $1} END {print s + 0}')
sr_expect_ge "netns: RTRS moved requests off the cut path (fail-overs)" 1 "$fo"
sr_expect_grep "netns: the cut path reconnected" "reconnects=[1-9]" "$SR_TMP/rtrs-paths.txt"
stop_pid "$NS_PID"

sr_finish
