#!/usr/bin/env bash
# bench/rtrs-threads.sh: where one `rtrs-test bench` run between the namespaces spends its
# requests, thread by thread: the server (`rtrs-test server -z -c 262144`) and the client in two
# namespaces joined by two veth pairs (as bench/rtrs-ab.sh), and over WINDOW seconds in the middle
# of the run:
#   - every thread of both processes: CPU ms, run-queue wait ms, time slices, voluntary and
#     involuntary context switches (/proc/PID/task/*/schedstat and status); the event threads
#     are named rtrs-clt / rtrs-srv, softrdma's progress threads carry the program's name;
#   - per request: the system calls that move packets and wake threads, and the context
#     switches, of each process (perf stat on the syscall tracepoints);
#   - per request: the softrdma counters of each process (`softrdma stat`, summed over its
#     devices) that changed.
# "Per request" divides by the run's average rate (rtrs-test's iops) times WINDOW: an estimate;
# on a loaded machine the rate inside the window may differ from the average by tens of
# percent (rx_bytes per request, about size + 100 for WRITEs on the server, shows by how much).
# Ratios of counters to each other (wake-ups per received packet) do not depend on it.
#
#   bench/rtrs-threads.sh [--paths 1|2] [--secs S] [--window W] [--ai 0|1] [--env "K=V ..."]
#                         [BUILD] [-- BENCH_ARGS...]
#
# BUILD: a build directory (default build/). BENCH_ARGS: rtrs-test bench's (default -S 4096
# -D 32). --env: environment of both processes (e.g. SOFTRDMA_NIC_NICE=0, RTRS_POLL_US=0).
# Root (namespaces) and perf. Writes nothing but a scratch directory, removed on exit.
set -uo pipefail

NP=1
SECS=8
WIN=2
AI=1
ENVS=""
while [ $# -gt 0 ]; do
	case $1 in
	--paths) NP=$2; shift ;;
	--secs) SECS=$2; shift ;;
	--window) WIN=$2; shift ;;
	--ai) AI=$2; shift ;;
	--env) ENVS=$2; shift ;;
	-h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	--) break ;;
	-*) echo "rtrs-threads.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
B=$ROOT/build
if [ $# -gt 0 ] && [ "$1" != -- ]; then B=$(cd "$1" && pwd -P); shift; fi
[ "${1:-}" = -- ] && shift
BENCH_ARGS=("$@")
[ ${#BENCH_ARGS[@]} -gt 0 ] || BENCH_ARGS=(-S 4096 -D 32)
[ -x "$B/bin/rtrs-test" ] && [ -x "$B/bin/softrdma" ] ||
	{ echo "rtrs-threads.sh: $B has no bin/rtrs-test or bin/softrdma" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "rtrs-threads.sh: needs root (network namespaces)" >&2; exit 1; }
command -v perf >/dev/null || { echo "rtrs-threads.sh: needs perf" >&2; exit 1; }
[ "$SECS" -ge $((WIN + 3)) ] || { echo "rtrs-threads.sh: --secs must be at least --window + 3" >&2; exit 2; }

export SR_BUILD_DIR=$B SR_SOURCE_DIR=$ROOT
# SR_TMP, the exit trap (background timeouts killed, namespaces removed), sr_free_port,
# sr_wait_listen, sr_netns_two_pairs
# shellcheck source=../tests/integration/lib.sh
. "$ROOT/tests/integration/lib.sh"
# shellcheck disable=SC2034	# read by lib.sh's exit trap
SR_KEEP_TMP=0
sr_netns_two_pairs rth || { echo "rtrs-threads.sh: could not make the namespaces" >&2; exit 1; }
for d in "$SR_NSA $SR_VA" "$SR_NSA $SR_VA2" "$SR_NSB $SR_VB" "$SR_NSB $SR_VB2"; do
	read -r ns dev <<<"$d"
	ip -n "$ns" link set "$dev" mtu "${VETH_MTU:-9000}"
done
read -r -a envs <<<"$ENVS"

port=$(sr_free_port "$SR_NSA")
ip netns exec "$SR_NSA" env SOFTRDMA_NETDEV="$SR_VA,$SR_VA2" "${envs[@]}" \
	timeout -k 5 $((SECS + 60)) "$B/bin/softrdma" run -- "$B/bin/rtrs-test" server \
	-l "$SR_NET.1:$port" -l "$SR_NET2.1:$port" -z -c 262144 -i "$AI" -t $((SECS + 50)) \
	>"$SR_TMP/s.log" 2>&1 </dev/null &
spid=$!
SR_BG+=("$spid")
sr_wait_listen "$port" "$spid" "$SR_NSA" 20 || { echo "rtrs-threads.sh: the server did not start" >&2; exit 1; }
paths=(-p "$SR_NET.1:$port@$SR_NET.2")
[ "$NP" = 2 ] && paths+=(-p "$SR_NET2.1:$port@$SR_NET2.2")
ip netns exec "$SR_NSB" env SOFTRDMA_NETDEV="$SR_VB,$SR_VB2" "${envs[@]}" \
	timeout -k 5 $((SECS + 40)) "$B/bin/softrdma" run -- \
	"$B/bin/rtrs-test" bench "${paths[@]}" -T "$SECS" "${BENCH_ARGS[@]}" >"$SR_TMP/c.log" 2>&1 </dev/null &
cpid=$!
SR_BG+=("$cpid")

# the rtrs-test process under pid $1 (softrdma run and timeout are its parents)
descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
program() {
	local p
	for p in $(descendants "$1"); do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" = rtrs-test ] && { echo "$p"; return; }
	done
}
sleep $(((SECS - WIN) / 2))
sp=$(program "$spid")
cp=$(program "$cpid")
[ -n "$sp" ] && [ -n "$cp" ] || { echo "rtrs-threads.sh: no rtrs-test process found" >&2; exit 1; }
threads() {
	local p t
	for p in "$sp" "$cp"; do
		for t in /proc/"$p"/task/*; do
			echo "$([ "$p" = "$sp" ] && echo srv || echo clt)/${t##*/}/$(cat "$t/comm" 2>/dev/null)" \
				"$(cat "$t/schedstat" 2>/dev/null)" \
				"$(awk '/^voluntary_ctxt/ { v = $2 } /^nonvoluntary_ctxt/ { n = $2 } END { print v + 0, n + 0 }' "$t/status" 2>/dev/null)"
		done
	done | sort
}
threads >"$SR_TMP/t0"
"$B/bin/softrdma" stat "$sp" >"$SR_TMP/s0" 2>&1
"$B/bin/softrdma" stat "$cp" >"$SR_TMP/c0" 2>&1
EV=context-switches
for s in recvmmsg recvmsg sendmsg sendmmsg epoll_pwait2 epoll_wait poll futex write read sched_yield; do
	EV+=",syscalls:sys_enter_$s"
done
perf stat -x, -e "$EV" -p "$sp" -o "$SR_TMP/ps" -- sleep "$WIN" 2>/dev/null &
pp=$!
perf stat -x, -e "$EV" -p "$cp" -o "$SR_TMP/pc" -- sleep "$WIN" 2>/dev/null
wait "$pp"
kill -0 "$cp" 2>/dev/null || { echo "rtrs-threads.sh: the client ended within the window: raise --secs" >&2; exit 1; }
threads >"$SR_TMP/t1"
"$B/bin/softrdma" stat "$sp" >"$SR_TMP/s1" 2>&1
"$B/bin/softrdma" stat "$cp" >"$SR_TMP/c1" 2>&1
wait "$cpid"
line=$(grep -m1 ' errors=0' "$SR_TMP/c.log")
[ -n "$line" ] || { echo "rtrs-threads.sh: the bench failed: $(tail -c 300 "$SR_TMP/c.log")" >&2; exit 1; }
echo "$line"
iops=$(sed -n 's/.* iops=\([0-9]*\) .*/\1/p' <<<"$line")
n=$((iops * WIN))
echo "load $(cut -d' ' -f1-3 /proc/loadavg); window ${WIN} s, ~$n requests (iops x window)${ENVS:+; env $ENVS}"
echo
printf "%-4s %-16s %9s %9s %8s %8s %8s\n" side thread "cpu ms" "wait ms" slices vol invol
join "$SR_TMP/t0" "$SR_TMP/t1" | awk -v win="$WIN" '
	{ split($1, a, "/"); c = ($7 - $2) / 1e6; if (c + ($8 - $3) / 1e6 < 1) next
	  printf "%-4s %-16s %9.1f %9.1f %8d %8d %8d\n", a[1], a[3], c, ($8 - $3) / 1e6, $9 - $4, $10 - $5, $11 - $6 }'
echo
for s in s c; do
	echo "$([ $s = s ] && echo server || echo client) per request:"
	grep -v '^#' "$SR_TMP/p$s" | awk -F, -v n="$n" 'NF > 2 && $1 ~ /^[0-9]+$/ && $1 > 0 {
		sub(/syscalls:sys_enter_/, "", $3); printf "  %s %.2f", $3, $1 / n } END { print "" }'
	awk -v n="$n" 'NR == FNR { if (NF == 2 && $2 ~ /^[0-9]+$/) a[$1] += $2; next }
		NF == 2 && $2 ~ /^[0-9]+$/ { b[$1] += $2 }
		END { for (k in b) if (b[k] > a[k]) printf "  %s %.3f\n", k, (b[k] - a[k]) / n }' \
		"$SR_TMP/${s}0" "$SR_TMP/${s}1" | sort | paste -d' ' - - - | column -t | sed 's/^/ /'
done
