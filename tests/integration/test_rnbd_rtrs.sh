#!/bin/bash
# SPDX-License-Identifier: MIT
#
# RNBD over RTRS, server and client as separate processes on softrdma, on loopback: rnbd-server
# exports a directory; nbdkit with the plugin opens an RTRS session to it, and real NBD programs
# use it: qemu-img convert + compare, nbdcopy both ways (64 MiB here), fio with crc32c
# verification, the access rules between clients of one server (second RW refused, migration
# allowed, two RO opens at once, RO refuses writes and changes nothing), hostile messages from a
# raw RTRS client (rnbd-hostile: bad device id, bad op, past the end, ...) answered with errors
# and the file unchanged, data written before a FLUSH and with FUA present in the server's file
# after SIGKILL of rnbd-server right after the answer. Then (as root) between two network
# namespaces joined by two veth pairs, a session of two paths: qemu-img convert + compare,
# nbdcopy of 256 MiB both ways checked, fio with crc32c verification while one path is cut and
# restored (zero errors, fail-overs in the per-path counters while it runs), then every path
# cut: IO fails at once, and after the paths are back the client remaps (SESS_INFO + OPEN
# again, the server having dropped the session) and IO works again.
# RNBD_TEST_MB=N sets both sizes (loopback and namespaces) to N MiB.
. "$(dirname "$0")/lib.sh"

need_cmd nbdkit nbdcopy nbdinfo qemu-img qemu-io fio cmp
need_build
SERVER=$SR_BUILD_DIR/bin/rnbd-server
PLUGIN=$SR_BUILD_DIR/lib/nbdkit-rnbd-plugin.so
[ -x "$SERVER" ] || sr_skip "no $SERVER (configure with -DRNBD_WITH_RTRS=ON, which needs ulp/rtrs)"
LO_MB=${RNBD_TEST_MB:-64}	# loopback (not the acceptance: kept short)
NS_MB=${RNBD_TEST_MB:-256}	# two namespaces, two paths: the issue's 256 MiB
BIG=$((LO_MB > NS_MB ? LO_MB : NS_MB))

EXP=$SR_TMP/export
mkdir -p "$EXP"
truncate -s $((BIG * 2))M "$EXP/disk.img"	# [0, BIG): copies; [BIG, 1.5 BIG): fio

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

# data_checks NAME MB: the data acceptance against the running client $URI
data_checks() {
	local name=$1 MB=$2 t0
	head -c $((MB / 4))M /dev/urandom >"$SR_TMP/a.raw"
	truncate -s $((MB / 2))M "$SR_TMP/a.raw"
	qemu-img convert -f raw -O qcow2 "$SR_TMP/a.raw" "$SR_TMP/a.qcow2"
	timeout 300 qemu-img convert -n -f qcow2 -O raw "$SR_TMP/a.qcow2" "$URI" 2>"$SR_TMP/convert.err" &&
		sr_ok "$name: qemu-img convert" || { sr_fail "$name: qemu-img convert"; sr_tail "$SR_TMP/convert.err" >&2; }
	timeout 300 qemu-img compare -f qcow2 -F raw "$SR_TMP/a.qcow2" "$URI" >"$SR_TMP/compare.out" 2>&1 &&
		sr_ok "$name: qemu-img compare" || { sr_fail "$name: qemu-img compare"; sr_tail "$SR_TMP/compare.out" >&2; }
	head -c ${MB}M /dev/urandom >"$SR_TMP/src"
	t0=$(date +%s.%N)
	timeout 300 nbdcopy "$SR_TMP/src" "$URI" && sr_ok "$name: nbdcopy $MB MiB in ($(sr_elapsed "$t0") s)" ||
		sr_fail "$name: nbdcopy in"
	t0=$(date +%s.%N)
	timeout 300 nbdcopy "$URI" "$SR_TMP/back" && sr_ok "$name: nbdcopy $MB MiB out ($(sr_elapsed "$t0") s)" ||
		sr_fail "$name: nbdcopy out"
	cmp -n $((MB << 20)) "$SR_TMP/src" "$SR_TMP/back" && sr_ok "$name: read back = written" || sr_fail "$name: read back differs"
	cmp -n $((MB << 20)) "$SR_TMP/src" "$EXP/disk.img" && sr_ok "$name: server's file = written" || sr_fail "$name: file differs"
	rm -f "$SR_TMP/src" "$SR_TMP/back" "$SR_TMP/a.raw" "$SR_TMP/a.qcow2"
}

# file_has OFFSET LEN BYTE: the server's file holds LEN bytes of BYTE at OFFSET
file_has() {
	python3 -c 'import sys; d=open(sys.argv[1],"rb"); d.seek(int(sys.argv[2])); n=int(sys.argv[3]); sys.exit(0 if d.read(n)==bytes([int(sys.argv[4],0)])*n else 1)' \
		"$EXP/disk.img" "$@"
}

# wait_stat FILE REGEX SECONDS: until a line of the counters file matches
wait_stat() {
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		grep -Eq "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

run_fio() {	# NAME SECONDS
	timeout 300 fio --name=rnbd --ioengine=nbd --uri="$URI" --rw=randwrite --bs=4k --iodepth=16 \
		--size=$((BIG / 2))m --offset=${BIG}m --verify=crc32c --verify_backlog=128 --verify_fatal=1 \
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
sr_expect_eq "loopback: export size" $((BIG * 2 << 20)) "$(nbdinfo --size "$URI")"
data_checks loopback "$LO_MB"
run_fio loopback 8

# access rules between clients of one server
start_client rw2 "" "" path=127.0.0.1:$PORT device=disk.img session=lo2 &&
	sr_fail "a second RW open was allowed" || sr_ok "second RW open refused"
sr_expect_grep "refusal says why" "Operation not permitted" "$SR_TMP/rw2.log"
start_client mig "" "" path=127.0.0.1:$PORT device=disk.img session=lo3 access=migration &&
	sr_ok "migration open allowed next to the RW one" || sr_fail "migration open refused"
MIG_PID=$CLI_PID
start_client ro2 "" "" path=127.0.0.1:$PORT device=disk.img session=lo5 access=ro &&
	sr_ok "a second RO open allowed (any number)" || sr_fail "second RO open refused"
RO2_PID=$CLI_PID
start_client ro "" "" path=127.0.0.1:$PORT device=disk.img session=lo4 access=ro &&
	sr_ok "RO open allowed" || sr_fail "RO open refused"
sum=$(md5sum <"$EXP/disk.img")
timeout 60 qemu-io -f raw -c 'write 0 4096' "$URI" >"$SR_TMP/ro-write.out" 2>&1 &&
	sr_fail "RO: a write succeeded" || sr_ok "RO: write refused"
timeout 60 qemu-io -f raw -r -c 'read 0 4096' "$URI" >/dev/null 2>&1 && sr_ok "RO: read works" || sr_fail "RO: read"
stop_pid "$CLI_PID"; stop_pid "$MIG_PID"; stop_pid "$RO2_PID"
sr_expect_eq "RO attempt changed nothing" "$sum" "$(md5sum <"$EXP/disk.img")"

# hostile messages from a raw RTRS client: each answered with its error, the file unchanged
dev_refused() { sed -n 's/^device .* refused \([0-9]*\) .*/\1/p' "$SR_TMP/srv.stats" | head -1; }
sleep 0.5	# the server's counters file is rewritten every 200 ms
ref0=$(dev_refused)
# (in migration mode: the device has its RW writer; the second writer is the hostile one)
timeout 120 "$SR" run -- "$SR_BUILD_DIR/bin/rnbd-hostile" --session lo6 --path 127.0.0.1:$PORT \
	--device disk.img --access migration >"$SR_TMP/hostile.out" 2>&1 &&
	sr_ok "hostile messages: every one refused with the expected error" ||
	{ sr_fail "hostile messages"; sr_tail "$SR_TMP/hostile.out" >&2; }
sed 's/^/  /' "$SR_TMP/hostile.out"
sr_expect_eq "hostile messages changed nothing on disk" "$sum" "$(md5sum <"$EXP/disk.img")"
sleep 0.5
# (the 7 the device layer refuses: 6 ranges past the end, SECURE_ERASE of a file)
sr_expect_ge "server counted the refusals on the device" $((${ref0:-0} + 7)) "$(dev_refused)"

# FLUSH and FUA: on the server's file after SIGKILL of the server right after the answer
SOCK=$SR_TMP/lo.sock URI="nbd+unix:///?socket=$SOCK"
timeout 60 qemu-io -f raw -c 'write -P 0xab 8388608 65536' -c 'flush' \
	-c 'write -f -P 0xcd 9437184 65536' "$URI" >"$SR_TMP/fua.out" 2>&1
# (SRV_PID is the `timeout` wrapper: its child is rnbd-server itself)
SRV_REAL=$(pgrep -P "$SRV_PID" | head -1)
kill -KILL "${SRV_REAL:-$SRV_PID}"
file_has 8388608 65536 0xab && sr_ok "write + FLUSH present after SIGKILL of rnbd-server" ||
	sr_fail "write before FLUSH lost"
file_has 9437184 65536 0xcd && sr_ok "FUA write present after SIGKILL of rnbd-server" || sr_fail "FUA write lost"
stop_pid "$LO_PID"
wait "$SRV_PID" 2>/dev/null

# ---- two namespaces, two paths
sr_netns_usable || { echo "note: no network namespaces here: the two-path half is not run"; sr_finish; }
rm -f "$EXP/disk.img"	# a fresh export (fio's data of the loopback half would differ from qemu-img's zeroes)
truncate -s $((BIG * 2))M "$EXP/disk.img"
sr_netns_two_pairs rn || { sr_fail "two veth pairs"; sr_finish; }
PORT=$(sr_free_port "$SR_NSA")
: >"$SR_TMP/srv.log"
timeout 600 ip netns exec "$SR_NSA" env SOFTRDMA_NETDEV="$SR_VA,$SR_VA2" "$SR" run -- \
	"$SERVER" --search-path "$EXP" --listen "$SR_NET.1" --listen "$SR_NET2.1" --port "$PORT" \
	--hb-interval-ms 200 --stats "$SR_TMP/srv2.stats" >"$SR_TMP/srv.log" 2>&1 &
SRV_PID=$!
SR_BG+=($!)
for ((i = 0; i < 100; i++)); do grep -q exporting "$SR_TMP/srv.log" && break; sleep 0.1; done
# (RTRS's default fail timeout, 30 s: a request in flight when the server drops the session
# (under heavy load its heartbeats can miss on both paths at once) waits for the reconnect, is
# answered ENOTCONN by the new session and sent again after the remap, instead of failing)
start_client ns "$SR_NSB" "$SR_VB,$SR_VB2" device=disk.img session=ns1 stats="$SR_TMP/ns.stats" \
	path="$SR_NET.2@$SR_NET.1:$PORT" path="$SR_NET2.2@$SR_NET2.1:$PORT" \
	hb_interval_ms=200 hb_missed=5 reconnect_delay_ms=500 \
	rtrs_stats_dir="$SR_TMP/rtrs" ||
	{ sr_fail "netns: client did not come up"; sr_tail "$SR_TMP/ns.log" >&2; sr_tail "$SR_TMP/srv.log" >&2; sr_finish; }
NS_PID=$CLI_PID
mkdir -p "$SR_TMP/rtrs"
data_checks netns "$NS_MB"
# fio while path 2 is cut and restored; the per-path counters are read while it runs
run_fio netns-cut 14 &
FIO_PID=$!
sleep 4
ip -n "$SR_NSB" link set "$SR_VB2" down
sleep 4
ip -n "$SR_NSB" link set "$SR_VB2" up
sleep 1.2
cp "$SR_TMP/ns.stats" "$SR_TMP/ns-during.stats"
kill -0 "$FIO_PID" 2>/dev/null && sr_ok "netns: counters read while fio runs" || sr_fail "netns: fio ended early"
wait "$FIO_PID"
sed 's/^/  /' "$SR_TMP/ns-during.stats"
sr_expect_eq "netns: two paths in the client's counters" 2 "$(grep -c '^path ' "$SR_TMP/ns-during.stats")"
fo=$(grep '^path ' "$SR_TMP/ns-during.stats" | grep -o 'failovers [0-9]*' | awk '{s += $2} END {print s + 0}')
sr_expect_ge "netns: fail-overs off the cut path, counted while it runs" 1 "$fo"
sleep 1.2
sr_expect_grep "netns: no IO error in the client's counters" "^errors 0$" "$SR_TMP/ns.stats"
sr_expect_grep "netns: the cut path reconnected" "^path .*reconnects [1-9]" "$SR_TMP/ns.stats"
cat "$SR_TMP"/rtrs/rtrs-*-clt-* >"$SR_TMP/rtrs-paths.txt" 2>/dev/null
sr_expect_grep "netns: RTRS's own counters agree (reconnect)" "reconnects=[1-9]" "$SR_TMP/rtrs-paths.txt"

# every path down: IO fails at once; the server drops the session; paths back: the client
# sends SESS_INFO and OPEN again (remap) and IO works
remaps0=$(awk '/^remaps / {print $2}' "$SR_TMP/ns.stats")
ip -n "$SR_NSB" link set "$SR_VB" down
ip -n "$SR_NSB" link set "$SR_VB2" down
wait_stat "$SR_TMP/ns.stats" "^state disconnected$" 20 && sr_ok "netns: every path down: client disconnected" ||
	sr_fail "netns: client did not see the paths go"
t0=$(date +%s.%N)
timeout 60 qemu-io -f raw -c 'read 0 4096' "$URI" >"$SR_TMP/down-read.out" 2>&1 &&
	sr_fail "netns: a read succeeded with every path down" ||
	sr_ok "netns: every path down: a read fails ($(sr_elapsed "$t0") s)"
sr_expect_grep "netns: ... with an IO error" "Input/output error" "$SR_TMP/down-read.out"
wait_stat "$SR_TMP/srv.log" "session ns1 disconnected" 20 && sr_ok "netns: the server dropped the session" ||
	sr_fail "netns: the server kept the session"
ip -n "$SR_NSB" link set "$SR_VB" up
ip -n "$SR_NSB" link set "$SR_VB2" up
t0=$(date +%s.%N)
remapped() {	# the counters say: mapped, after one more remap than before the cut
	local i
	for ((i = 0; i < 600; i++)); do
		grep -q '^state mapped$' "$SR_TMP/ns.stats" 2>/dev/null &&
			[ "$(awk '/^remaps / {print $2}' "$SR_TMP/ns.stats")" -gt "$remaps0" ] && return 0
		sleep 0.1
	done
	return 1
}
remapped && sr_ok "netns: paths back: remapped ($(sr_elapsed "$t0") s)" ||
	{ sr_fail "netns: no remap"; sr_tail "$SR_TMP/ns.log" >&2; }
timeout 60 qemu-io -f raw -c 'write -P 0x5a 20971520 1048576' -c 'read -P 0x5a 20971520 1048576' \
	"$URI" >"$SR_TMP/after.out" 2>&1 && sr_ok "netns: write + read back after the remap" ||
	{ sr_fail "netns: IO after the remap"; sr_tail "$SR_TMP/after.out" >&2; }
file_has 20971520 1048576 0x5a && sr_ok "netns: ... and on the server's file" || sr_fail "netns: not on the file"
sleep 1.2
sed 's/^/  /' "$SR_TMP/ns.stats"
sr_expect_grep "netns: the client counted the disconnect" "^disconnects [1-9]" "$SR_TMP/ns.stats"
# Mapped at the end, within 30 s: with heartbeats of 200 ms x 5 a loaded machine can stall
# both sides' heartbeats past 1 s once more after the remap (beside busy loops at load 22-33:
# 1.2 s after the IO above, both paths reconnecting and a third disconnect), and the client
# then remaps on its own, as it just did; one left disconnected still fails here.
wait_stat "$SR_TMP/ns.stats" "^state mapped$" 30 && sr_ok "netns: state mapped again" ||
	{ sr_fail "netns: state not mapped again within 30 s"; sr_tail "$SR_TMP/ns.stats" >&2; }
grep -E '^(state|disconnects|remaps) ' "$SR_TMP/ns.stats" | tr '\n' ' '
echo
stop_pid "$NS_PID"

sr_finish
