#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Shared helpers of the integration tests; sourced by each tests/integration/test_*.sh, never
# run (it has no test_ prefix, so CTest does not register it).
#
#   sr_run CMD [ARGS...]      CMD through `softrdma run --` (our libibverbs first)
#   sr_pair NAME PROG [ARGS]  a pingpong-style server + client pair, both bounded in time,
#                             outputs and counters in $SR_TMP/NAME.{srv,cli}.{out,stats}
#   sr_check_pingpong NAME SIZE ITERS   the "N bytes in" / "N iters in" lines of both sides
#   sr_check_stats NAME MIN_RX [ALLOWED...]  counters at exit: data crossed, no bad drops
#   sr_stat FILE COUNTER      a counter of a SOFTRDMA_STATS_DUMP file (0 when absent)
#   sr_stat2 NAME COUNTER     a counter summed over both sides of a pair (live if killed)
#   sr_show_stats NAME        both sides' counters, one line each
#   sr_free_port              a port no TCP or UDP socket uses
#   sr_serve PORT NS CMD...   a server in the background, waited for until it listens
#   sr_exec_to FILE CMD...    CMD in place of its shell, its output in FILE
#   sr_ibcm_netns TAG         the IB CM tests' two namespaces (SRV_IP, SOFTRDMA_CM_WIRE=ibcm)
#   sr_rping_echoes, sr_wait_echoes, sr_wait_gone, SR_RPING_ERR   rping runs with a side killed
#   sr_netns_pair TAG, sr_netns_two_pairs TAG   two namespaces joined by one / two veth pairs
#   sr_netns_lo TAG           a namespace of its own with only loopback (a loopback test's)
#   sr_ok / sr_fail / sr_expect_* / sr_finish   assertions that say what was wanted and seen
#   sr_skip MSG, need_root, need_cmd   exit 77 (CTest SKIP_RETURN_CODE) with a message
#   sr_at_exit CMD            run CMD (a string) when the test exits, however it exits
#
# Every process a test starts is bounded by `timeout` and killed by the exit trap if it is
# still there. A failing test keeps its work directory (outputs, counters, captures) and
# prints its path; SR_KEEP_TMP=1 keeps it always.
#
# Env: SR_BUILD_DIR (set by CTest; required), SR_SOURCE_DIR (optional).

set -u

: "${SR_BUILD_DIR:?SR_BUILD_DIR must name the build directory}"
SR_BUILD_DIR=$(cd "$SR_BUILD_DIR" && pwd -P)
SR_SOURCE_DIR=${SR_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)}
SR=$SR_BUILD_DIR/bin/softrdma
SR_NAME=$(basename "$0" .sh)
SR_TMP=$(mktemp -d "${TMPDIR:-/tmp}/sr-$SR_NAME.XXXXXX")
SR_FAILURES=0
SR_CHECKS=0
SR_BG=()	# background pids (each a `timeout`, which forwards signals to its process group)
SR_AT_EXIT=()	# cleanup commands, run last-registered first
SR_T0=$(date +%s.%N)

# Knobs of sr_pair (a test may set them around a call; see sr_pair).
SR_PAIR_TIMEOUT=${SR_PAIR_TIMEOUT:-60}
SR_SRV_ENV=()
SR_CLI_ENV=()
SR_SRV_NS=
SR_CLI_NS=
SR_SERVER_HOST=localhost
# shellcheck disable=SC2034	# (read by the test scripts that source this file)
SR_SRV_RC='' SR_CLI_RC=''	# exit statuses of the last sr_pair, for a caller that judges them itself

sr_elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

sr_cleanup() {
	local rc=$? p i
	trap - EXIT INT TERM
	for p in "${SR_BG[@]}"; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in "${SR_BG[@]}"; do
		for i in $(seq 50); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	for ((i = ${#SR_AT_EXIT[@]} - 1; i >= 0; i--)); do
		eval "${SR_AT_EXIT[i]}" || true
	done
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] || [ "${SR_KEEP_TMP:-0}" = 1 ]; then
		echo "$SR_NAME: work files kept in $SR_TMP"
	else
		rm -rf "$SR_TMP"
	fi
	exit "$rc"
}
trap sr_cleanup EXIT
trap 'echo "$SR_NAME: interrupted" >&2; exit 130' INT
trap 'echo "$SR_NAME: terminated" >&2; exit 143' TERM

sr_at_exit() { SR_AT_EXIT+=("$1"); }

# --- verdicts

sr_ok() {
	SR_CHECKS=$((SR_CHECKS + 1))
	echo "ok: $*"
}
sr_fail() {
	SR_CHECKS=$((SR_CHECKS + 1))
	SR_FAILURES=$((SR_FAILURES + 1))
	echo "FAIL: $*" >&2
}
sr_skip() {
	echo "SKIP: $SR_NAME: $*"
	exit 77
}
# The last lines of a file, indented, for a failure message.
sr_tail() {
	local file=$1 n=${2:-15}
	echo "  --- last $n lines of $file:"
	if [ -s "$file" ]; then
		tail -n "$n" "$file" | sed 's/^/  | /'
	else
		echo "  | (empty or missing)"
	fi
}
# sr_finish: the verdict of the whole test (call last).
sr_finish() {
	local t
	t=$(sr_elapsed "$SR_T0")
	if [ "$SR_FAILURES" -ne 0 ]; then
		echo "$SR_NAME: $SR_FAILURES of $SR_CHECKS check(s) FAILED (${t} s)" >&2
		exit 1
	fi
	echo "$SR_NAME: all $SR_CHECKS checks ok (${t} s)"
	exit 0
}

# sr_expect_eq WHAT WANT GOT
sr_expect_eq() {
	if [ "$2" = "$3" ]; then sr_ok "$1: $3"; else sr_fail "$1: wanted '$2', saw '$3'"; fi
}
# sr_expect_ge WHAT MIN GOT (integers)
sr_expect_ge() {
	if [ "$3" -ge "$2" ] 2>/dev/null; then
		sr_ok "$1: $3 (>= $2)"
	else
		sr_fail "$1: wanted >= $2, saw '$3'"
	fi
}
# sr_expect_range WHAT MIN MAX GOT (integers)
sr_expect_range() {
	if [ "$4" -ge "$2" ] 2>/dev/null && [ "$4" -le "$3" ]; then
		sr_ok "$1: $4 (in $2..$3)"
	else
		sr_fail "$1: wanted $2..$3, saw '$4'"
	fi
}
# sr_expect_grep WHAT ERE FILE: some line of FILE matches ERE.
sr_expect_grep() {
	local line
	if line=$(grep -E -m1 -- "$2" "$3" 2>/dev/null); then
		sr_ok "$1: $line"
	else
		sr_fail "$1: no line of $(basename "$3") matches /$2/"
		sr_tail "$3" 20 >&2
	fi
}
# sr_expect_no_grep WHAT ERE FILE: no line of FILE matches ERE.
sr_expect_no_grep() {
	local lines
	if lines=$(grep -E -m3 -- "$2" "$3" 2>/dev/null); then
		sr_fail "$1: $(basename "$3") has lines matching /$2/:"
		sed 's/^/  | /' <<<"$lines" >&2
	else
		sr_ok "$1"
	fi
}

# --- prerequisites

need_cmd() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || sr_skip "'$c' is not installed"
	done
}
need_root() {
	[ "$(id -u)" = 0 ] || sr_skip "needs root (network namespaces, veth)"
	command -v ip >/dev/null 2>&1 || sr_skip "no 'ip' command (iproute2)"
	sr_netns_usable || sr_skip "'ip netns add' does not work here"
}
# sr_netns_usable: root, iproute2 and `ip netns add` work here (a test with a loopback half
# skips only its namespace half when not).
sr_netns_usable() {
	[ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1 || return 1
	ip netns add "sr-probe-$$" >/dev/null 2>&1 || return 1
	ip netns del "sr-probe-$$" >/dev/null 2>&1
}

# sr_netns_pair TAG [MTU]: two network namespaces joined by a veth pair, both ends up (carrier
# included), lo up in each, removed at exit whatever happens. Sets SR_NSA SR_NSB (namespaces),
# SR_VA SR_VB (the veth ends in them; at most 15 characters: TAG of 3), SR_NET (a random
# private /24; A is SR_NET.1, B is SR_NET.2). Non-zero, with the setup's output on stderr,
# when it could not be built.
sr_netns_pair() {
	local tag=$1 mtu=${2:-} i out=$SR_TMP/netns-$1.out
	SR_NSA=sr-${tag}a-$$ SR_NSB=sr-${tag}b-$$ SR_VA=${tag}a$$ SR_VB=${tag}b$$
	SR_NET=10.$((100 + RANDOM % 100)).$((RANDOM % 256))
	sr_at_exit "ip netns del $SR_NSA 2>/dev/null; ip netns del $SR_NSB 2>/dev/null"
	if ! { ip netns add "$SR_NSA" && ip netns add "$SR_NSB" &&
		ip link add "$SR_VA" type veth peer name "$SR_VB" &&
		ip link set "$SR_VA" netns "$SR_NSA" && ip link set "$SR_VB" netns "$SR_NSB" &&
		ip -n "$SR_NSA" addr add "$SR_NET.1/24" dev "$SR_VA" &&
		ip -n "$SR_NSB" addr add "$SR_NET.2/24" dev "$SR_VB" &&
		ip -n "$SR_NSA" link set lo up && ip -n "$SR_NSB" link set lo up &&
		{ [ -z "$mtu" ] || { ip -n "$SR_NSA" link set "$SR_VA" mtu "$mtu" &&
				     ip -n "$SR_NSB" link set "$SR_VB" mtu "$mtu"; }; } &&
		ip -n "$SR_NSA" link set "$SR_VA" up && ip -n "$SR_NSB" link set "$SR_VB" up; } \
		>"$out" 2>&1; then
		ip link del "$SR_VA" 2>/dev/null	# if it never reached its namespace
		sr_tail "$out" >&2
		return 1
	fi
	# veth reports LOWER_UP once both ends are up.
	for ((i = 0; i < 100; i++)); do
		ip -n "$SR_NSA" link show "$SR_VA" | grep -q LOWER_UP &&
			ip -n "$SR_NSB" link show "$SR_VB" | grep -q LOWER_UP && break
		sleep 0.05
	done
}

# sr_netns_lo TAG: one network namespace with nothing but its own loopback (up), removed at
# exit; sets SR_NSL. A loopback test whose processes run there sees no packet of any other
# process of the host: softrdma takes 127.0.0.1 and other 127.x.y.z on UDP 4791 with zero
# configuration, so on the host's loopback a new process can inherit an address whose previous
# owner's peer (another test, another user's program) still sends to it, and count those
# packets as drops. Non-zero when it could not be built.
sr_netns_lo() {
	SR_NSL=sr-${1}l-$$
	sr_at_exit "ip netns del $SR_NSL 2>/dev/null"
	ip netns add "$SR_NSL" 2>/dev/null && ip -n "$SR_NSL" link set lo up 2>/dev/null
}

# sr_netns_two_pairs TAG: sr_netns_pair TAG plus a second veth pair between the same two
# namespaces, on its own random /24 (SR_NET2: A is SR_NET2.1, B is SR_NET2.2), its ends SR_VA2
# in A and SR_VB2 in B, both up: two paths between two hosts. Non-zero when it could not be built.
sr_netns_two_pairs() {
	local tag=$1 i
	sr_netns_pair "$tag" || return 1
	SR_VA2=${tag}2a$$ SR_VB2=${tag}2b$$
	SR_NET2=10.$((200 + RANDOM % 50)).$((RANDOM % 256))
	ip link add "$SR_VA2" type veth peer name "$SR_VB2" &&
		ip link set "$SR_VA2" netns "$SR_NSA" && ip link set "$SR_VB2" netns "$SR_NSB" &&
		ip -n "$SR_NSA" addr add "$SR_NET2.1/24" dev "$SR_VA2" &&
		ip -n "$SR_NSB" addr add "$SR_NET2.2/24" dev "$SR_VB2" &&
		ip -n "$SR_NSA" link set "$SR_VA2" up && ip -n "$SR_NSB" link set "$SR_VB2" up ||
		{ ip link del "$SR_VA2" 2>/dev/null; return 1; }
	for ((i = 0; i < 100; i++)); do
		ip -n "$SR_NSB" link show "$SR_VB2" | grep -q LOWER_UP && break
		sleep 0.05
	done
}

need_build() {
	[ -x "$SR" ] || { echo "FAIL: no $SR (build first)" >&2; exit 1; }
	[ -e "$SR_BUILD_DIR/lib/libibverbs.so.1" ] ||
		{ echo "FAIL: no $SR_BUILD_DIR/lib/libibverbs.so.1 (build first)" >&2; exit 1; }
}

# --- running things

sr_run() { "$SR" run -- "$@"; }

# sr_free_port: a port in 20000..49999 that no TCP or UDP socket of this namespace uses (any
# state): a program may listen there over TCP, or over rdma_cm (a UDP socket of that port).
# Not atomic, but the range is wide, ports are random and CTest runs these tests serially.
SR_USED_PORTS=" "
# sr_free_port [NS]: the same, checked in network namespace NS (empty: this one).
sr_free_port() {
	local p i
	for i in $(seq 200); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 30000))
		case $SR_USED_PORTS in *" $p "*) continue ;; esac
		[ -z "$(sr_in_ns "${1:-}" ss -Htuan "sport = :$p" 2>/dev/null)" ] || continue
		SR_USED_PORTS+="$p "
		echo "$p"
		return 0
	done
	echo "sr_free_port: no free port found" >&2
	return 1
}

# sr_in_ns NS CMD...: CMD in network namespace NS (or here when NS is empty).
sr_in_ns() {
	local ns=$1
	shift
	if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi
}

# sr_wait_guardians NAME NS...: until no CM guardian (softrdma-cm-guard; the kernel keeps the
# first 15 characters of its name) runs in any of the namespaces NS, at most 10 s; a note if
# one is still there. Nothing without a namespace: on the host's network the guardians of
# other programs cannot be told from the pair's.
sr_wait_guardians() {
	local name=$1 ns pid left i
	shift
	[ $# -gt 0 ] || return 0
	for ((i = 0; i < 200; i++)); do
		left=
		for ns in "$@"; do
			for pid in $(ip netns pids "$ns" 2>/dev/null); do
				case $(cat "/proc/$pid/comm" 2>/dev/null) in
				softrdma-cm-gua*) left+=" $pid" ;;
				esac
			done
		done
		[ -z "$left" ] && return 0
		sleep 0.05
	done
	echo "note: $name: a CM guardian still runs after 10 s (pid$left)"
	return 0
}

# sr_wait_listen PORT PID NS SECONDS: until a TCP socket listens on PORT in NS, or a UDP socket is
# bound to it (an rdma_cm listener: softrdma's CM listens on the UDP port of the same number),
# while PID lives.
sr_wait_listen() {
	local port=$1 pid=$2 ns=$3 secs=$4 t0=$SECONDS
	while [ $((SECONDS - t0)) -lt "$secs" ]; do
		[ -n "$(sr_in_ns "$ns" ss -Hltun "sport = :$port" 2>/dev/null)" ] && return 0
		kill -0 "$pid" 2>/dev/null || return 2
		sleep 0.05
	done
	return 1
}

# sr_exec_to FILE CMD...: CMD with its output (stdout and stderr) in FILE, in place of the shell
# that runs it: `sr_exec_to F prog &` leaves prog itself in $! (with `ip netns exec` and `env`
# in front, which exec too).
sr_exec_to() {
	local f=$1
	shift
	exec "$@" >"$f" 2>&1
}

# sr_serve PORT NS CMD...: a server started in the background (SR_SERVE_PID: its $!, also in
# SR_BG, so the exit trap ends it), then waited for until a socket of namespace NS ('' here)
# listens on PORT over TCP or is bound to it over UDP (an rdma_cm listener), 30 s at most, or
# until it ends: sr_wait_listen's status (0 listening, 1 not in time, 2 ended).
sr_serve() {
	local port=$1 ns=$2
	shift 2
	"$@" &
	SR_SERVE_PID=$!
	SR_BG+=("$SR_SERVE_PID")
	sr_wait_listen "$port" "$SR_SERVE_PID" "$ns" 30
}

# sr_ibcm_netns TAG: the set-up of the IB CM tests between two hosts: librdmacm and libibverbs
# from the build (LD_LIBRARY_PATH), SOFTRDMA_CM_WIRE=ibcm, two namespaces joined by a veth
# pair (sr_netns_pair TAG; the server's side is A) and SRV_IP, A's address. A test that cannot
# have them ends there, failed.
sr_ibcm_netns() {
	export LD_LIBRARY_PATH=$SR_BUILD_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export SOFTRDMA_CM_WIRE=ibcm
	sr_netns_pair "$1" || sr_fail "could not set up the namespaces and the veth pair"
	[ "$SR_FAILURES" = 0 ] || sr_finish
	SRV_IP=$SR_NET.1
}

# rping -v -V: the echoes it printed so far, and waiting for them (the tests that kill one side
# of an rping mid-run: integration/test_cm_guard, interop/rxe_vm).
#   sr_rping_echoes FILE    the number of echoes in FILE
#   sr_wait_echoes FILE N PID [DONE]   until FILE shows N echoes, or PID ended, or the file
#                           DONE exists (a guest's job that ended), 60 s at most
#   sr_wait_gone PID T0 SECONDS   while PID runs, until SECONDS (a fraction) after T0 (date
#                           +%s.%N): the survivor of a kill, given its bound
#   SR_RPING_ERR            rping's messages when its connection ends under it (it exits 0
#                           all the same)
SR_RPING_ERR='(client|server) DISCONNECT EVENT|wait for RDMA_[A-Z_]+ state [0-9]+|cq completion failed.*|[^:]*(error|failed).*'
sr_rping_echoes() {
	local n
	n=$(grep -c '^ping data: rdma-ping-' "$1" 2>/dev/null)
	echo "${n:-0}"
}
sr_wait_echoes() {
	local file=$1 n=$2 pid=$3 done=${4:-} t0=$SECONDS
	while [ "$(sr_rping_echoes "$file")" -lt "$n" ] && [ $((SECONDS - t0)) -lt 60 ] &&
		kill -0 "$pid" 2>/dev/null && { [ -z "$done" ] || [ ! -e "$done" ]; }; do
		sleep 0.05
	done
}
sr_wait_gone() {
	local pid=$1 t0=$2 secs=$3
	while kill -0 "$pid" 2>/dev/null &&
		[ "$(awk -v a="$t0" -v b="$(date +%s.%N)" -v k="$secs" 'BEGIN { print (b - a < k) }')" = 1 ]; do
		sleep 0.05
	done
}

# sr_wait_pid PID SECONDS: until PID (a child of this shell) ends, then reaps it and returns
# its status; 255 if it still runs after SECONDS.
sr_wait_pid() {
	local pid=$1 secs=$2 t0=$SECONDS
	while kill -0 "$pid" 2>/dev/null; do
		[ $((SECONDS - t0)) -ge "$secs" ] && return 255
		sleep 0.05
	done
	wait "$pid"
}

sr_forget_pid() {
	local p keep=()
	for p in "${SR_BG[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	SR_BG=("${keep[@]}")
}

sr_rc_text() {
	case $1 in
	0) echo "0" ;;
	124 | 254) echo "$1 (timed out after ${SR_PAIR_TIMEOUT} s: killed)" ;;
	137) echo "137 (SIGKILL)" ;;
	143) echo "143 (SIGTERM)" ;;
	255) echo "none (still running after the other side ended: killed)" ;;
	*) if [ "$1" -gt 128 ]; then echo "$1 (signal $(($1 - 128)))"; else echo "$1"; fi ;;
	esac
}

# sr_prog_pid TIMEOUT_PID: the program under `timeout` (ip netns exec, env and softrdma run
# all exec, so it is timeout's only child).
sr_prog_pid() { pgrep -P "$1" 2>/dev/null | head -n1; }

# sr_snapshot PID FILE: the live counters of a process that is about to be killed (a killed
# process dumps nothing at exit), from the files `softrdma stat` reads.
sr_snapshot() {
	[ -n "$1" ] || return 0
	"$SR" stat "$1" >"$2" 2>&1 || true
}

# sr_pair NAME PROG [ARGS...]
#
# Runs "PROG ARGS -p PORT" as the server in the background and, once the server listens on
# its port (TCP, or UDP for rdma_cm), "PROG ARGS -p PORT HOST" as the client; PORT is a free
# port. The pair has SR_PAIR_TIMEOUT seconds; then whatever still runs is killed, after its
# live counters were saved in $SR_TMP/NAME.{srv,cli}.live. Outputs (stdout and stderr
# together, line-buffered so that a killed program's lines are kept) go to
# $SR_TMP/NAME.{srv,cli}.out and the counters dumped at exit to $SR_TMP/NAME.{srv,cli}.stats.
# Knobs: SR_SRV_ENV / SR_CLI_ENV (arrays of VAR=VALUE for one side), SR_SRV_NS / SR_CLI_NS
# (network namespace of a side), SR_SERVER_HOST (what the client connects to: localhost),
# SR_PAIR_NOJUDGE=1 (the caller judges: no ok/FAIL is recorded, only printed), SR_PAIR_NICE=N
# (both sides under `nice -n N`; as root, N < 0 shields a timing-sensitive pair from the load
# of other processes on the machine).
# Returns 0 when both sides exit 0; otherwise records a failure that shows both outputs.
# Either way SR_SRV_RC and SR_CLI_RC hold the exit statuses (254: killed at the deadline,
# 255: the server killed after the client had ended).
sr_pair() {
	local name=$1
	shift
	local port srv_pid cli_pid srv_rc='' cli_rc='' t0 w deadline grace_end now
	local srv_out=$SR_TMP/$name.srv.out cli_out=$SR_TMP/$name.cli.out
	local srv_stats=$SR_TMP/$name.srv.stats cli_stats=$SR_TMP/$name.cli.stats
	local to=$SR_PAIR_TIMEOUT nice=()
	[ -n "${SR_PAIR_NICE:-}" ] && nice=(nice -n "$SR_PAIR_NICE")
	rm -f "$SR_TMP/$name".*
	port=$(sr_free_port) || { sr_fail "$name: no free port"; return 1; }
	t0=$(date +%s.%N)
	echo "--- $name: $* (port $port${SR_SRV_NS:+, server in $SR_SRV_NS}${SR_CLI_NS:+, client in $SR_CLI_NS})"

	# `timeout` is only the backstop (the watchdog below acts first and saves the counters).
	timeout -k 5 $((to + 30)) ${SR_SRV_NS:+ip netns exec "$SR_SRV_NS"} \
		env "${SR_SRV_ENV[@]}" SOFTRDMA_STATS_DUMP="$srv_stats" "${nice[@]}" \
		"$SR" run -- stdbuf -oL -eL "$@" -p "$port" >"$srv_out" 2>&1 &
	srv_pid=$!
	SR_BG+=("$srv_pid")

	sr_wait_listen "$port" "$srv_pid" "$SR_SRV_NS" 30
	w=$?
	if [ $w -ne 0 ]; then
		if [ $w -eq 2 ]; then
			wait "$srv_pid"
			srv_rc=$?
			sr_fail "$name: the server exited $(sr_rc_text $srv_rc) before listening on port $port"
		else
			sr_fail "$name: the server did not listen on port $port within 30 s"
		fi
		sr_tail "$srv_out" >&2
		kill -TERM "$srv_pid" 2>/dev/null
		wait "$srv_pid" 2>/dev/null
		sr_forget_pid "$srv_pid"
		return 1
	fi

	timeout -k 5 $((to + 30)) ${SR_CLI_NS:+ip netns exec "$SR_CLI_NS"} \
		env "${SR_CLI_ENV[@]}" SOFTRDMA_STATS_DUMP="$cli_stats" "${nice[@]}" \
		"$SR" run -- stdbuf -oL -eL "$@" -p "$port" "$SR_SERVER_HOST" >"$cli_out" 2>&1 &
	cli_pid=$!
	SR_BG+=("$cli_pid")

	# Watchdog: until both ended, or the deadline; the server gets a grace period once the
	# client has ended (it finishes with the client: 30 s after a success, 5 s otherwise).
	deadline=$((SECONDS + to))
	grace_end=$deadline
	while :; do
		if [ -z "$cli_rc" ] && ! kill -0 "$cli_pid" 2>/dev/null; then
			wait "$cli_pid"
			cli_rc=$?
			if [ "$cli_rc" -eq 0 ]; then w=30; else w=5; fi
			[ $((SECONDS + w)) -lt "$grace_end" ] && grace_end=$((SECONDS + w))
		fi
		if [ -z "$srv_rc" ] && ! kill -0 "$srv_pid" 2>/dev/null; then
			wait "$srv_pid"
			srv_rc=$?
		fi
		[ -n "$cli_rc" ] && [ -n "$srv_rc" ] && break
		now=$SECONDS
		if [ "$now" -ge "$grace_end" ]; then
			if [ -z "$cli_rc" ]; then
				sr_snapshot "$(sr_prog_pid "$cli_pid")" "$SR_TMP/$name.cli.live"
				kill -TERM "$cli_pid" 2>/dev/null
				wait "$cli_pid" 2>/dev/null
				cli_rc=254
			fi
			if [ -z "$srv_rc" ]; then
				sr_snapshot "$(sr_prog_pid "$srv_pid")" "$SR_TMP/$name.srv.live"
				kill -TERM "$srv_pid" 2>/dev/null
				wait "$srv_pid" 2>/dev/null
				if [ "$now" -ge "$deadline" ]; then srv_rc=254; else srv_rc=255; fi
			fi
			break
		fi
		sleep 0.05
	done
	sr_forget_pid "$srv_pid"
	sr_forget_pid "$cli_pid"
	# shellcheck disable=SC2034
	SR_SRV_RC=$srv_rc SR_CLI_RC=$cli_rc
	# The pair is over only when its CM guardians are: a process that exits with an IB CM
	# connection up leaves one (docs/cm.md, "A process that dies"), which sends the DREQs to
	# the peer's QP1 for 1 s more. The client's go to the server's address and port 4791,
	# which the next pair's server owns by then: it counted them as drop_qpn (no GSI QP yet)
	# or cm_drop_unknown (test_perftest's rdma_cm pairs, seen in 3 of 4 runs at load 7-15).
	sr_wait_guardians "$name" ${SR_SRV_NS:+"$SR_SRV_NS"} ${SR_CLI_NS:+"$SR_CLI_NS"}

	if [ "${SR_PAIR_NOJUDGE:-0}" = 1 ]; then
		echo "$name: server exit $(sr_rc_text "$srv_rc"), client exit $(sr_rc_text "$cli_rc")" \
			"after $(sr_elapsed "$t0") s"
		[ "$srv_rc" -eq 0 ] && [ "$cli_rc" -eq 0 ]
		return
	fi
	if [ "$srv_rc" -ne 0 ] || [ "$cli_rc" -ne 0 ]; then
		sr_fail "$name: server exit $(sr_rc_text "$srv_rc"), client exit $(sr_rc_text "$cli_rc")" \
			"after $(sr_elapsed "$t0") s"
		{
			sr_tail "$srv_out"
			sr_tail "$cli_out"
			sr_show_stats "$name"
		} >&2
		return 1
	fi
	sr_ok "$name: both sides exited 0 in $(sr_elapsed "$t0") s"
	return 0
}

# sr_check_pingpong NAME SIZE ITERS: each side of sr_pair NAME printed
# "SIZE*ITERS*2 bytes in ..." and "ITERS iters in ..." (the rdma-core pingpong summary).
sr_check_pingpong() {
	local name=$1 size=$2 iters=$3 side f
	local bytes=$((size * iters * 2))
	for side in srv cli; do
		f=$SR_TMP/$name.$side.out
		sr_expect_grep "$name $side: $bytes bytes" "^$bytes bytes in [0-9.]+ seconds" "$f"
		sr_expect_grep "$name $side: $iters iters" "^$iters iters in [0-9.]+ seconds" "$f"
	done
}

# sr_stat FILE COUNTER: the sum of COUNTER over the device blocks of a dump file (0 if none).
sr_stat() {
	awk -v c="$2" '$1 !~ /^#/ && $2 == c { s += $3 } END { printf "%d\n", s }' "$1" 2>/dev/null ||
		echo 0
}
# sr_side_stat NAME SIDE COUNTER: COUNTER of one side (srv, cli) of pair NAME: from the dump
# at exit or, for a side that was killed, from the live counters saved before the kill.
sr_side_stat() {
	local f=$SR_TMP/$1.$2
	if [ -s "$f.stats" ]; then
		sr_stat "$f.stats" "$3"
	elif [ -s "$f.live" ]; then
		awk -v c="$3" 'NF == 2 && $1 == c { s += $2 } END { printf "%d\n", s }' "$f.live"
	else
		echo 0
	fi
}
# sr_stat2 NAME COUNTER: COUNTER summed over both sides of pair NAME.
sr_stat2() {
	echo $(($(sr_side_stat "$1" srv "$2") + $(sr_side_stat "$1" cli "$2")))
}

# Counters that must stay zero in any run of these tests, whatever faults are injected: the
# transport recovers from loss silently, a program never sees an error.
SR_NEVER_COUNTERS=" tx_errors retry_exceeded rnr_retry_exceeded naks_rcvd access_naks_sent \
inv_req_naks_sent op_naks_sent cq_overflow drop_short drop_opcode drop_tver drop_pad drop_icrc \
drop_qp_type drop_src drop_pkey drop_qkey drop_too_long "

# sr_check_stats NAME MIN_RX [ALLOWED...]
# Both sides of pair NAME dumped their counters, received at least MIN_RX UDP payload bytes
# (the messages really crossed the stack), sent something, and have no non-zero drop_*
# counter except the ALLOWED ones, nor any of SR_NEVER_COUNTERS.
sr_check_stats() {
	local name=$1 min_rx=$2
	shift 2
	local allowed=" $* " side f c v bad
	for side in srv cli; do
		f=$SR_TMP/$name.$side.stats
		if [ ! -s "$f" ]; then
			sr_fail "$name $side: no counters dumped to $(basename "$f") (SOFTRDMA_STATS_DUMP)"
			continue
		fi
		sr_expect_ge "$name $side: rx_bytes" "$min_rx" "$(sr_stat "$f" rx_bytes)"
		sr_expect_ge "$name $side: tx_packets" 1 "$(sr_stat "$f" tx_packets)"
		bad=
		while read -r c v; do
			case $allowed in *" $c "*) continue ;; esac
			case $c in
			drop_*) bad+=" $c=$v" ;;
			*) case $SR_NEVER_COUNTERS in *" $c "*) bad+=" $c=$v" ;; esac ;;
			esac
		done < <(awk '$1 !~ /^#/ && $3 != 0 { print $2, $3 }' "$f")
		if [ -n "$bad" ]; then
			sr_fail "$name $side: unexpected counters:$bad (allowed here:${allowed% })"
			sed 's/^/  | /' "$f" >&2
		else
			sr_ok "$name $side: no unexpected drop or error counter"
		fi
	done
}

# sr_show_stats NAME: the counters of both sides of pair NAME, one line each, for the log:
# dumped at exit, or else the live ones saved before the side was killed.
sr_show_stats() {
	local side f
	for side in srv cli; do
		f=$SR_TMP/$1.$side
		if [ -s "$f.stats" ]; then
			echo "  $1 $side counters: $(awk '$1 !~ /^#/ { printf "%s=%s ", $2, $3 }' "$f.stats")"
		elif [ -s "$f.live" ]; then
			echo "  $1 $side counters (live, before the kill): $(awk '/^pid / { next }
				NF == 2 { printf "%s=%s ", $1, $2; next } { printf "[%s] ", $0 }' "$f.live")"
		else
			echo "  $1 $side counters: none"
		fi
	done
}
