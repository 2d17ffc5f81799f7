#!/bin/bash
# SPDX-License-Identifier: MIT
#
# rsockets end to end: Debian's unmodified rsocket tools (rdmacm-utils) and librspreload, two
# processes each, on our librdmacm/libibverbs (LD_LIBRARY_PATH=$SR_BUILD_DIR/lib):
#
#   rstream       default size sweep, then -T b (blocking) and -T n (non-blocking); every
#                 line of the sweep must be printed (rstream ignores a failed size itself)
#   riostream     riomap/riowrite, custom latency and bandwidth runs with -T v (see below)
#   rcopy         a 64 MiB random file, compared byte for byte
#   udpong        datagrams over UD: one way (3 sizes), echoes, the default sweep (reported)
#   librspreload  an ordinary TCP program moving 64 MiB (nc -> nc.traditional), sha256 compared
#
# Every process is bounded by `timeout`; the counters each one dumps at exit
# (SOFTRDMA_STATS_DUMP) show the data really crossed softrdma.
#
# udpong's echo tests resend after 1 ms without an answer. A late answer then arrives while
# the client waits for the next one: the client copies that stale answer (and its sequence
# number) into the message it repeats, so from then on every message costs extra round trips,
# and a run may never finish (a livelock) or drop a size (run_test gives up quietly when an
# answer of the wrong length carries the right sequence number). One answer later than 1 ms
# starts it: on a loaded 2-core machine that happens with kernel UDP too (`udpong -T s`), and
# more often on softrdma, whose datagram round trip has a longer tail (docs/rsocket.md). So an
# echo run may stall, and udpong's default sweep is reported rather than required (rs_udpong).

. "$(dirname "$0")/lib.sh"

need_build
need_cmd rstream riostream rcopy udpong ss sha256sum cmp
PRELOAD=${SR_RSPRELOAD:-/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so.1}
export LD_LIBRARY_PATH=$SR_BUILD_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
HOST=127.0.0.1
# The network namespace and device of each side ('' on loopback), and a name prefix.
RS_SRV_NS='' RS_CLI_NS='' RS_SRV_DEV='' RS_CLI_DEV='' RS_MODE=''


# rs_wait_udp PORT PID SECONDS: until a UDP socket is bound to PORT (the rsocket listener's
# CM socket), while PID lives. 0, 1 (timeout) or 2 (PID ended).
rs_wait_udp() {
	local port=$1 pid=$2 secs=$3 t0=$SECONDS
	while [ $((SECONDS - t0)) -lt "$secs" ]; do
		[ -n "$(sr_in_ns "$RS_SRV_NS" ss -Hlun "sport = :$port" 2>/dev/null)" ] && return 0
		kill -0 "$pid" 2>/dev/null || return 2
		sleep 0.05
	done
	return 1
}

# rs_server NAME SECS CMD...: starts CMD in the background (output NAME.srv.out, counters
# NAME.srv.stats); RS_PID is its `timeout` process.
rs_server() {
	local name=$1 secs=$2
	shift 2
	timeout -k 5 "$secs" ${RS_SRV_NS:+ip netns exec "$RS_SRV_NS"} \
		env ${RS_SRV_DEV:+SOFTRDMA_NETDEV=$RS_SRV_DEV} SOFTRDMA_STATS_DUMP="$SR_TMP/$name.srv.stats" "$@" \
		>"$SR_TMP/$name.srv.out" 2>&1 &
	RS_PID=$!
	SR_BG+=("$RS_PID")
}

# rs_client_exec NAME SECS CMD...: becomes (exec) `timeout` running CMD on the client side
# (output NAME.cli.out, counters NAME.cli.stats). Call it in a subshell or in the background.
rs_client_exec() {
	local name=$1 secs=$2
	shift 2
	exec timeout -k 5 "$secs" ${RS_CLI_NS:+ip netns exec "$RS_CLI_NS"} \
		env ${RS_CLI_DEV:+SOFTRDMA_NETDEV=$RS_CLI_DEV} SOFTRDMA_STATS_DUMP="$SR_TMP/$name.cli.stats" "$@" \
		>"$SR_TMP/$name.cli.out" 2>&1
}

# rs_client NAME SECS CMD...: runs CMD in the foreground (NAME.cli.out, NAME.cli.stats);
# returns its status.
rs_client() { (rs_client_exec "$@"); }

# rs_stop PID: ends a server that does not end by itself (rcopy, udpong, nc) and reaps it.
rs_stop() {
	kill -TERM "$1" 2>/dev/null
	sr_wait_pid "$1" 10 >/dev/null 2>&1 || { kill -KILL "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
	sr_forget_pid "$1"
}

# rs_ready NAME PORT: the server of NAME listens; otherwise records why not.
rs_ready() {
	local w
	rs_wait_udp "$2" "$RS_PID" 30
	w=$?
	[ $w -eq 0 ] && return 0
	if [ $w -eq 2 ]; then
		sr_fail "$1: the server exited before listening on port $2"
	else
		sr_fail "$1: the server did not listen on port $2 within 30 s"
	fi
	sr_tail "$SR_TMP/$1.srv.out" >&2
	rs_stop "$RS_PID"
	return 1
}

# rs_sweep_lines NAME SIDE: every size of the default sweep of rstream/riostream was printed.
RS_SWEEP="64_lat 4k_lat 64k_lat 1m_lat 64_bw 4k_bw 64k_bw 1m_bw"
rs_sweep_lines() {
	local f=$SR_TMP/$1.$2.out n missing=
	for n in $RS_SWEEP; do
		grep -Eq "^$n +[0-9.]+[km]? +[0-9.]+[km]? +[0-9.]+[km]? +[0-9.]+[kmg]? +[0-9.]+s" "$f" ||
			missing+=" $n"
	done
	if [ -n "$missing" ]; then
		sr_fail "$1 $2: no result for:$missing"
		sr_tail "$f" 20 >&2
	else
		sr_ok "$1 $2: all $(echo $RS_SWEEP | wc -w) sizes"
	fi
}

# rs_stream_pair NAME TOOL [OPTIONS...]: TOOL as server and client (both end by themselves).
rs_stream_pair() {
	local name=$1 tool=$2 port cli_rc srv_rc t0
	shift 2
	port=$(sr_free_port "$RS_SRV_NS") || { sr_fail "$name: no free port"; return; }
	echo "--- $name: $tool $* (port $port)"
	t0=$(date +%s.%N)
	rs_server "$name" 240 "$tool" -p "$port" "$@"
	rs_ready "$name" "$port" || return
	rs_client "$name" 240 "$tool" -s "$HOST" -p "$port" "$@"
	cli_rc=$?
	sr_wait_pid "$RS_PID" $([ $cli_rc -eq 0 ] && echo 30 || echo 5)
	srv_rc=$?
	[ $srv_rc -eq 255 ] && rs_stop "$RS_PID"
	sr_forget_pid "$RS_PID"
	if [ $cli_rc -ne 0 ] || [ $srv_rc -ne 0 ]; then
		sr_fail "$name: server exit $(sr_rc_text $srv_rc), client exit $(sr_rc_text $cli_rc)"
		{ sr_tail "$SR_TMP/$name.srv.out"; sr_tail "$SR_TMP/$name.cli.out"; } >&2
		return
	fi
	sr_ok "$name: both sides exited 0 in $(sr_elapsed "$t0") s"
	rs_sweep_lines "$name" cli
	rs_sweep_lines "$name" srv
	grep -E "^(64_lat|1m_bw) " "$SR_TMP/$name.cli.out" | sed "s/^/  $name: /"
}

# ---- rstream, riostream ------------------------------------------------------------------
rs_stream_pair rstream rstream
rs_stream_pair rstream_blocking rstream -T b
rs_stream_pair rstream_nonblocking rstream -T n
# riostream's receiver waits for a riowrite by spinning on the last byte of its buffer without
# calling into the library, so the data must land through softrdma's progress thread alone.
# With both processes spinning on a 2-core machine that thread gets a CPU only at the
# scheduler's wake-up granularity (~0.4-1 ms per transfer), and the default sweep is 100000
# iterations per small size: hours. So riostream runs custom tests instead, each verifying the
# data it received (-T v): latency (64 B and 1 MiB, one transfer per turn) and bandwidth
# (300 transfers of 64 KiB per turn).
rs_rio() {
	local name=$1 port cli_rc srv_rc t0
	shift
	port=$(sr_free_port "$RS_SRV_NS") || { sr_fail "$name: no free port"; return; }
	echo "--- $name: riostream $* (port $port)"
	t0=$(date +%s.%N)
	rs_server "$name" 90 riostream -p "$port" "$@"
	rs_ready "$name" "$port" || return
	rs_client "$name" 60 riostream -s "$HOST" -p "$port" "$@"
	cli_rc=$?
	sr_wait_pid "$RS_PID" $([ $cli_rc -eq 0 ] && echo 30 || echo 5)
	srv_rc=$?
	[ $srv_rc -eq 255 ] && rs_stop "$RS_PID"
	sr_forget_pid "$RS_PID"
	if [ $cli_rc -ne 0 ] || [ $srv_rc -ne 0 ]; then
		sr_fail "$name: server exit $(sr_rc_text $srv_rc), client exit $(sr_rc_text $cli_rc)"
		{ sr_tail "$SR_TMP/$name.srv.out"; sr_tail "$SR_TMP/$name.cli.out"; } >&2
		return
	fi
	sr_ok "$name: both sides exited 0 in $(sr_elapsed "$t0") s"
	sr_expect_grep "$name: client result line" '^custom ' "$SR_TMP/$name.cli.out"
	sr_expect_grep "$name: server result line" '^custom ' "$SR_TMP/$name.srv.out"
	grep -E '^custom ' "$SR_TMP/$name.cli.out" | sed "s/^/  $name: /"
}
rs_rio riostream_lat64 -S 64 -C 1 -I 500 -T v
rs_rio riostream_lat1m -S 1048576 -C 1 -I 30 -T v
rs_rio riostream_bw64k -S 65536 -C 300 -I 2 -T v

# ---- rcopy: 64 MiB, byte for byte ----------------------------------------------------------
rs_rcopy() {
	local name=${RS_MODE}rcopy port src=$SR_TMP/rcopy.src dst=$SR_TMP/rcopy.dst rc t0
	port=$(sr_free_port "$RS_SRV_NS") || { sr_fail "$name: no free port"; return; }
	head -c $((64 << 20)) /dev/urandom >"$src"
	echo "--- $name: 64 MiB (port $port)"
	t0=$(date +%s.%N)
	rs_server "$name" 120 rcopy -p "$port"
	rs_ready "$name" "$port" || return
	rs_client "$name" 90 rcopy "$src" "$HOST:$dst" -p "$port"
	rc=$?
	rs_stop "$RS_PID"	# the rcopy server never ends by itself
	if [ $rc -ne 0 ]; then
		sr_fail "$name: client exit $(sr_rc_text $rc)"
		{ sr_tail "$SR_TMP/$name.srv.out"; sr_tail "$SR_TMP/$name.cli.out"; } >&2
		return
	fi
	sr_ok "$name: client exited 0 in $(sr_elapsed "$t0") s: $(grep -o '[0-9]* bytes in.*' "$SR_TMP/$name.cli.out")"
	if cmp -s "$src" "$dst"; then
		sr_ok "$name: the copy is identical ($(stat -c %s "$dst") bytes)"
	else
		sr_fail "$name: the copy differs: $(cmp "$src" "$dst" 2>&1 | head -1)"
	fi
	rm -f "$dst"
}
rs_rcopy

# ---- udpong ------------------------------------------------------------------------------------
# udpong prints through stdio: line-buffered, so a run cut short still shows how far it got.
#
# What must work: datagrams of 64, 1000 and 2048 bytes one way (udpong's server counts what
# it received and reports it back), and echoes (each client a new process, so that no stale
# answer carries over; see the header for why an echo run may stall: one of three must print
# its result).
# udpong's default sweep (18 sizes, 220000 echoes over one socket) is run once and reported;
# it fails the test only if udpong prints an error or ends any other way than whole, stalled
# or with a size skipped (the header: all three are udpong's timing, not rsockets).
rs_udpong() {
	local name=${RS_MODE}udpong port rc try ok= n out size
	port=$(sr_free_port "$RS_SRV_NS") || { sr_fail "$name: no free port"; return; }
	echo "--- $name: datagrams (port $port)"
	rs_server "$name" 300 udpong -p "$port" -b "$HOST"
	rs_ready "$name" "$port" || return
	# One way: 10000 datagrams of each size (UD drops what finds no buffer, as UDP).
	for size in 64 1000 2048; do
		rs_client "$name.bw$size" 60 stdbuf -oL udpong -s "$HOST" -p "$port" -C 10000 -S "$size"
		rc=$?
		out=$SR_TMP/$name.bw$size.cli.out
		if [ $rc -eq 0 ] && grep -Eq "^custom +[0-9.]+k? +[0-9.]+k? " "$out" && ! grep -vqE '^(name|custom) ' "$out"; then
			sr_ok "$name one way, $size B: $(grep -E '^custom' "$out" | tr -s ' ')"
		else
			sr_fail "$name one way, $size B: client exit $rc"
			sr_tail "$out" >&2
		fi
	done
	# Echoes: 2000 of 1024 bytes (-T e), up to three clients; one must print its result.
	for try in 1 2 3; do
		out=$SR_TMP/$name.echo$try.cli.out
		rs_udpong_client "$name.echo$try" "$port" -C 2000 -S 1024 -T e
		rc=$?
		if grep -vqE '^(name|custom) ' "$out" || { [ $rc -ne 0 ] && [ $rc -ne 124 ]; }; then
			sr_fail "$name echo: client $try ended with exit $rc"
			sr_tail "$out" >&2
			ok=fail
			break
		fi
		if [ $rc -eq 0 ] && grep -Eq '^custom +1k +4k ' "$out"; then
			sr_ok "$name echo (client $try): $(grep -E '^custom' "$out" | tr -s ' ')"
			ok=$try
			break
		fi
		if [ $rc -eq 124 ]; then
			echo "  $name: echo client $try stalled (udpong's livelock)"
		else
			echo "  $name: echo client $try ended without a result (a late answer)"
		fi
	done
	[ -z "$ok" ] && sr_fail "$name echo: none of three clients printed a result"
	# The default sweep, reported.
	out=$SR_TMP/$name.sweep.cli.out
	rs_udpong_client "$name.sweep" "$port"
	rc=$?
	n=$(grep -cE '^[0-9.]+k?_(lat|bw) ' "$out")
	if grep -vqE '^(name |[0-9.]+k?_(lat|bw) )' "$out" || { [ $rc -ne 0 ] && [ $rc -ne 124 ]; }; then
		sr_fail "$name sweep: ended with exit $rc after $n of 18 sizes"
		sr_tail "$out" >&2
	elif [ $rc -eq 124 ]; then
		echo "NOTE: $name sweep: stalled after $n of 18 sizes (udpong's livelock, see the header)"
	elif [ "$n" -ne 18 ]; then
		echo "NOTE: $name sweep: $((18 - n)) of 18 sizes skipped (a late answer, see the header)"
	else
		sr_ok "$name sweep: all 18 sizes"
	fi
	grep -E '^(64_lat|1.5k_lat|64_bw|1.5k_bw) ' "$out" | sed "s/^/  $name: /"
	rs_stop "$RS_PID"
}

# rs_udpong_client NAME PORT [OPTIONS...]: a udpong client (output NAME.cli.out). A client
# that prints nothing new for RS_STALL_S seconds is stalled (udpong's livelock) and is killed:
# returns 124 as for a timeout, otherwise the client's status. No size of the sweep takes more
# than 3 s.
RS_STALL_S=10
rs_udpong_client() {
	local name=$1 port=$2 pid last=-1 cur still=0 rc
	shift 2
	: >"$SR_TMP/$name.cli.out"	# (the client's own redirection may come after the first look)
	rs_client_exec "$name" 60 stdbuf -oL udpong -s "$HOST" -p "$port" "$@" &
	pid=$!			# timeout's, once the background shell has exec'd
	SR_BG+=("$pid")
	while kill -0 "$pid" 2>/dev/null; do
		cur=$(wc -l <"$SR_TMP/$name.cli.out")
		if [ "$cur" = "$last" ]; then
			still=$((still + 1))
			if [ $still -ge $((RS_STALL_S * 2)) ]; then
				kill -TERM "$pid" 2>/dev/null
				sr_wait_pid "$pid" 10 >/dev/null 2>&1
				sr_forget_pid "$pid"
				return 124
			fi
		else
			last=$cur still=0
		fi
		sleep 0.5
	done
	wait "$pid"
	rc=$?
	sr_forget_pid "$pid"
	return $rc
}
rs_udpong

# ---- librspreload: an ordinary TCP program ---------------------------------------------------
# Debian 12's librspreload (rdma-core 44) has no accept4() (netcat-openbsd's server uses it)
# and crashes in programs that call fcntl() before any socket call (socat): the client is
# netcat-openbsd, the server netcat-traditional.
# The server runs with -q -1: its stdin is /dev/null, so with -q N it would quit N seconds
# after the connection opened, cutting any transfer slower than that; it ends when the client's
# -N shuts its side down.
rs_preload() {
	local name=${RS_MODE}preload port src=$SR_TMP/preload.src dst=$SR_TMP/preload.dst rc srv_rc t0 rx
	if [ ! -r "$PRELOAD" ] || ! command -v nc >/dev/null || ! command -v nc.traditional >/dev/null; then
		sr_fail "$name: needs $PRELOAD, nc (netcat-openbsd) and nc.traditional (netcat-traditional)"
		return
	fi
	port=$(sr_free_port "$RS_SRV_NS") || { sr_fail "$name: no free port"; return; }
	head -c $((64 << 20)) /dev/urandom >"$src"
	echo "--- $name: 64 MiB through LD_PRELOAD=$(basename "$PRELOAD") (port $port)"
	t0=$(date +%s.%N)
	timeout -k 5 120 ${RS_SRV_NS:+ip netns exec "$RS_SRV_NS"} \
		env ${RS_SRV_DEV:+SOFTRDMA_NETDEV=$RS_SRV_DEV} LD_PRELOAD="$PRELOAD" SOFTRDMA_STATS_DUMP="$SR_TMP/$name.srv.stats" \
		nc.traditional -l -q -1 -s "$HOST" -p "$port" >"$dst" 2>"$SR_TMP/$name.srv.out" &
	RS_PID=$!
	SR_BG+=("$RS_PID")
	rs_ready "$name" "$port" || return
	timeout -k 5 90 ${RS_CLI_NS:+ip netns exec "$RS_CLI_NS"} \
		env ${RS_CLI_DEV:+SOFTRDMA_NETDEV=$RS_CLI_DEV} LD_PRELOAD="$PRELOAD" SOFTRDMA_STATS_DUMP="$SR_TMP/$name.cli.stats" \
		nc -N "$HOST" "$port" <"$src" >"$SR_TMP/$name.cli.out" 2>&1
	rc=$?
	sr_wait_pid "$RS_PID" 30
	srv_rc=$?
	[ $srv_rc -eq 255 ] && rs_stop "$RS_PID"
	sr_forget_pid "$RS_PID"
	if [ $rc -ne 0 ] || [ $srv_rc -ne 0 ]; then
		sr_fail "$name: server exit $(sr_rc_text $srv_rc), client exit $(sr_rc_text $rc)"
		{ sr_tail "$SR_TMP/$name.srv.out"; sr_tail "$SR_TMP/$name.cli.out"; } >&2
	else
		sr_ok "$name: both sides exited 0 in $(sr_elapsed "$t0") s"
	fi
	sr_expect_eq "$name: sha256 of the received file" \
		"$(sha256sum <"$src" | cut -d' ' -f1)" "$(sha256sum <"$dst" | cut -d' ' -f1)"
	# Through softrdma, not around it: the receiver's soft NIC took the bytes in as packets, or
	# (two processes of one host) the sender placed them by the direct path, WRITE with
	# immediate included since 683f611, where no packet carries them.
	rx=$(sr_stat "$SR_TMP/$name.srv.stats" rx_bytes)
	placed=$(sr_stat "$SR_TMP/$name.cli.stats" direct_bytes)
	sr_expect_ge "$name: bytes the receiver's soft NIC took in + bytes the sender placed directly" \
		$((64 << 20)) $((rx + placed))
	rm -f "$dst"
}
rs_preload

# ---- the same between two network namespaces joined by a veth pair (root only) --------------
# rstream's sweep, rcopy, udpong and librspreload, each side's device bound to its veth.
if ! sr_netns_usable; then
	echo "NOTE: not root or no network namespaces here: the namespace half is skipped"
	sr_finish
fi
if sr_netns_pair rss 9000
then
	# MTU 9000: a RoCE MTU of 4096 as on loopback, so udpong's datagrams up to 1.5 KiB fit
	# (at 1500 the RoCE MTU is 1024 and rsend rightly says EMSGSIZE, as over UD on rxe).
	echo "=== namespaces $SR_NSA ($SR_NET.1 on $SR_VA) and $SR_NSB ($SR_NET.2 on $SR_VB)"
	RS_SRV_NS=$SR_NSA RS_CLI_NS=$SR_NSB RS_SRV_DEV=$SR_VA RS_CLI_DEV=$SR_VB RS_MODE=ns. HOST=$SR_NET.1
	rs_stream_pair ns.rstream rstream
	rs_rcopy
	rs_udpong
	rs_preload
else
	sr_fail "could not set up the namespaces and the veth pair"
fi
sr_finish
