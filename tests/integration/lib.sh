#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Shared helpers of the integration tests; sourced by each tests/integration/test_*.sh, never
# run (it has no test_ prefix, so CTest does not register it).
#
#   sr_run CMD [ARGS...]      CMD through `softrdma run --` (our libibverbs first)
#   sr_pair NAME PROG [ARGS]  a pingpong-style server + client pair, both bounded in time
#   sr_check_pingpong NAME SIZE ITERS   the "N bytes in" / "N iters in" lines of both sides
#   sr_check_stats NAME [ALLOWED]       counters dumped at exit: data crossed, no bad drops
#   sr_stat FILE COUNTER      a counter of a SOFTRDMA_STATS_DUMP file (0 when absent)
#   sr_free_port              a TCP port nobody uses
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
SR_PAIR_TIMEOUT=${SR_PAIR_TIMEOUT:-90}
SR_SRV_ENV=()
SR_CLI_ENV=()
SR_SRV_NS=
SR_CLI_NS=
SR_SERVER_HOST=localhost

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
	local probe=sr-probe-$$
	ip netns add "$probe" >/dev/null 2>&1 || sr_skip "'ip netns add' does not work here"
	ip netns del "$probe" >/dev/null 2>&1
}
need_build() {
	[ -x "$SR" ] || { echo "FAIL: no $SR (build first)" >&2; exit 1; }
	[ -e "$SR_BUILD_DIR/lib/libibverbs.so.1" ] ||
		{ echo "FAIL: no $SR_BUILD_DIR/lib/libibverbs.so.1 (build first)" >&2; exit 1; }
}

# --- running things

sr_run() { "$SR" run -- "$@"; }

# sr_free_port: a TCP port in 20000..49999 that no socket of this namespace uses (any state).
# Not atomic, but the range is wide, ports are random and CTest runs these tests serially.
SR_USED_PORTS=" "
sr_free_port() {
	local p i
	for i in $(seq 200); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 30000))
		case $SR_USED_PORTS in *" $p "*) continue ;; esac
		[ -z "$(ss -Htan "sport = :$p" 2>/dev/null)" ] || continue
		SR_USED_PORTS+="$p "
		echo "$p"
		return 0
	done
	echo "sr_free_port: no free TCP port found" >&2
	return 1
}

# sr_in_ns NS CMD...: CMD in network namespace NS (or here when NS is empty).
sr_in_ns() {
	local ns=$1
	shift
	if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi
}

# sr_wait_listen PORT PID NS SECONDS: until a TCP socket listens on PORT in NS, while PID lives.
sr_wait_listen() {
	local port=$1 pid=$2 ns=$3 secs=$4 t0=$SECONDS
	while [ $((SECONDS - t0)) -lt "$secs" ]; do
		[ -n "$(sr_in_ns "$ns" ss -Hltn "sport = :$port" 2>/dev/null)" ] && return 0
		kill -0 "$pid" 2>/dev/null || return 2
		sleep 0.05
	done
	return 1
}

# sr_wait_pid PID SECONDS: until PID ends (then reaps it and returns its status), else 255.
sr_wait_pid() {
	local pid=$1 secs=$2 t0=$SECONDS
	while kill -0 "$pid" 2>/dev/null; do
		if [ $((SECONDS - t0)) -ge "$secs" ]; then
			return 255
		fi
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
	124) echo "124 (timed out after ${SR_PAIR_TIMEOUT} s)" ;;
	137) echo "137 (killed)" ;;
	143) echo "143 (terminated)" ;;
	255) echo "none (still running; killed)" ;;
	*) echo "$1" ;;
	esac
}

# sr_pair NAME PROG [ARGS...]
#
# Runs "PROG ARGS -p PORT" as the server in the background and, once the server listens on
# its TCP port, "PROG ARGS -p PORT HOST" as the client; PORT is a free TCP port. Both are
# bounded by SR_PAIR_TIMEOUT seconds. Outputs (stdout and stderr together) go to
# $SR_TMP/NAME.{srv,cli}.out and the counters dumped at exit to $SR_TMP/NAME.{srv,cli}.stats.
# Knobs: SR_SRV_ENV / SR_CLI_ENV (arrays of VAR=VALUE for one side), SR_SRV_NS / SR_CLI_NS
# (network namespace of a side), SR_SERVER_HOST (what the client connects to: localhost).
# Returns 0 when both sides exit 0; otherwise records a failure that shows both outputs.
sr_pair() {
	local name=$1
	shift
	local port srv_pid srv_rc cli_rc t0 rc=0 w
	local srv_out=$SR_TMP/$name.srv.out cli_out=$SR_TMP/$name.cli.out
	local srv_stats=$SR_TMP/$name.srv.stats cli_stats=$SR_TMP/$name.cli.stats
	local to=$SR_PAIR_TIMEOUT
	rm -f "$srv_out" "$cli_out" "$srv_stats" "$cli_stats"
	port=$(sr_free_port) || { sr_fail "$name: no free TCP port"; return 1; }
	t0=$(date +%s.%N)
	echo "--- $name: $* (TCP port $port${SR_SRV_NS:+, server in $SR_SRV_NS}${SR_CLI_NS:+, client in $SR_CLI_NS})"

	timeout -k 5 "$to" ${SR_SRV_NS:+ip netns exec "$SR_SRV_NS"} \
		env "${SR_SRV_ENV[@]}" SOFTRDMA_STATS_DUMP="$srv_stats" \
		"$SR" run -- "$@" -p "$port" >"$srv_out" 2>&1 &
	srv_pid=$!
	SR_BG+=("$srv_pid")

	sr_wait_listen "$port" "$srv_pid" "$SR_SRV_NS" 30
	w=$?
	if [ $w -ne 0 ]; then
		if [ $w -eq 2 ]; then
			wait "$srv_pid"
			srv_rc=$?
			sr_fail "$name: the server exited $(sr_rc_text $srv_rc) before listening on TCP port $port"
		else
			sr_fail "$name: the server did not listen on TCP port $port within 30 s"
		fi
		sr_tail "$srv_out" >&2
		kill -TERM "$srv_pid" 2>/dev/null
		wait "$srv_pid" 2>/dev/null
		sr_forget_pid "$srv_pid"
		return 1
	fi

	timeout -k 5 "$to" ${SR_CLI_NS:+ip netns exec "$SR_CLI_NS"} \
		env "${SR_CLI_ENV[@]}" SOFTRDMA_STATS_DUMP="$cli_stats" \
		"$SR" run -- "$@" -p "$port" "$SR_SERVER_HOST" >"$cli_out" 2>&1
	cli_rc=$?

	# The server finishes with the client; give it a little longer only if the client did.
	if [ $cli_rc -eq 0 ]; then w=30; else w=5; fi
	sr_wait_pid "$srv_pid" "$w"
	srv_rc=$?
	if [ $srv_rc -eq 255 ]; then
		kill -TERM "$srv_pid" 2>/dev/null
		wait "$srv_pid" 2>/dev/null
	fi
	sr_forget_pid "$srv_pid"

	if [ $srv_rc -ne 0 ] || [ $cli_rc -ne 0 ]; then
		sr_fail "$name: server exit $(sr_rc_text $srv_rc), client exit $(sr_rc_text $cli_rc)" \
			"after $(sr_elapsed "$t0") s"
		{
			sr_tail "$srv_out"
			sr_tail "$cli_out"
		} >&2
		rc=1
	else
		sr_ok "$name: both sides exited 0 in $(sr_elapsed "$t0") s"
	fi
	return $rc
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
# sr_stat2 NAME COUNTER: COUNTER summed over both sides of pair NAME.
sr_stat2() {
	echo $(($(sr_stat "$SR_TMP/$1.srv.stats" "$2") + $(sr_stat "$SR_TMP/$1.cli.stats" "$2")))
}

# Counters that must stay zero in any run of these tests, whatever faults are injected: the
# transport recovers from loss silently, a program never sees an error.
SR_NEVER_COUNTERS="tx_errors retry_exceeded rnr_retry_exceeded naks_rcvd access_naks_sent
inv_req_naks_sent op_naks_sent cq_overflow drop_short drop_opcode drop_tver drop_pad drop_icrc
drop_qp_type drop_src drop_pkey drop_qkey drop_too_long"

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
			*) case " $(echo $SR_NEVER_COUNTERS) " in *" $c "*) bad+=" $c=$v" ;; esac ;;
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

# sr_show_stats NAME: both dumps, one line per side, for the log.
sr_show_stats() {
	local side
	for side in srv cli; do
		echo "  $1 $side counters: $(awk '$1 !~ /^#/ { printf "%s=%s ", $2, $3 }' \
			"$SR_TMP/$1.$side.stats" 2>/dev/null)"
	done
}
