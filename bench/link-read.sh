#!/usr/bin/env bash
# bench/link-read.sh: spurious resends of RTRS over one shaped link, builds side by side.
#
#   bench/link-read.sh [-t SECS] [-n PAIRS] [-m MBIT] [-o "RTRS-TEST BENCH ARGS"] BUILD...
#
# Two namespaces of its own joined by one veth pair (MTU 9000), both ends shaped as
# bench/rtrs.sh's netns-link scenario (tc tbf rate MBIT burst 65536 latency 20ms); for each
# round and each BUILD in turn (rotated each round): rtrs-test server -z -c 262144 in A,
# rtrs-test bench (default -S 131072 -D 32 -r: 128 KiB READ at depth 32) in B for SECS seconds.
# Prints one line per run: build, MiB/s, requests, the client's retransmits per 1000 requests
# and its tail-loss probes, fast go-back-Ns, local ACK timeouts, early probe ACKs, round-trip
# bounds (rtt_bounds), RTT samples and mean sample, the server's duplicates and retransmits per 1000
# requests, the shapers' drops, and the load average. Needs root. Everything is removed on exit.
# Env: CLI_ENV ("NAME=VALUE ..." for the client, e.g. SOFTRDMA_LOG=debug), LOGDIR (keep each
# client's output there). Docs: bench/README.md; figures: docs/reliability.md.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
DUR=4 PAIRS=3 MBIT=1000 ARGS="-S 131072 -D 32 -r"
while getopts "t:n:m:o:" o; do
	case $o in
	t) DUR=$OPTARG ;; n) PAIRS=$OPTARG ;; m) MBIT=$OPTARG ;; o) ARGS=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-t SECS] [-n PAIRS] [-m MBIT] [-o ARGS] BUILD..." >&2; exit 2; }
BUILDS=()
for b in "$@"; do BUILDS+=("$(cd "$b" && pwd -P)"); done
[ "$(id -u)" = 0 ] || { echo "bench/link-read.sh: needs root" >&2; exit 1; }

export SR_BUILD_DIR=${BUILDS[0]} SR_SOURCE_DIR=$ROOT
# shellcheck source=../tests/integration/lib.sh
. "$ROOT/tests/integration/lib.sh"
# shellcheck disable=SC2034	# (read by lib.sh's exit trap)
SR_KEEP_TMP=0
sr_netns_pair rdl 9000 || exit 1
for d in "$SR_NSA $SR_VA" "$SR_NSB $SR_VB"; do
	set -- $d
	ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "${MBIT}mbit" burst 65536 \
		latency 20ms || exit 1
done
drops() {
	local n=0 x d
	for d in "$SR_NSA $SR_VA" "$SR_NSB $SR_VB"; do
		set -- $d
		x=$(ip netns exec "$1" tc -s qdisc show dev "$2" | sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' | head -1)
		n=$((n + ${x:-0}))
	done
	echo $n
}
cnt() { awk -v c="$2" '$2 == c { s += $3 } END { print s + 0 }' "$1"; }

printf "%-28s %7s %6s %8s %6s %6s %5s %6s %5s %6s %7s %7s %7s %5s %5s\n" build MiB/s reqs \
	rexmit/k tlp fast ackto early bound rtts rtt_us dups/k srx/k drops load
for ((r = 0; r < PAIRS; r++)); do
	n=${#BUILDS[@]}
	for ((k = 0; k < n; k++)); do
		b=${BUILDS[$(((k + r) % n))]}
		port=$(sr_free_port "$SR_NSA")
		st=$SR_TMP/c.stat ss=$SR_TMP/s.stat log=$SR_TMP/c.log
		rm -f "$st" "$ss"
		ip netns exec "$SR_NSA" env SOFTRDMA_NETDEV="$SR_VA" \
			timeout -k 5 $((DUR + 40)) "$b/bin/softrdma" run -- "$b/bin/rtrs-test" server \
			-l "$SR_NET.1:$port" -z -c 262144 -i 1 -t $((DUR + 30)) >"$SR_TMP/s.log" 2>&1 </dev/null &
		spid=$!
		SR_BG+=("$spid")
		sr_wait_listen "$port" "$spid" "$SR_NSA" 20 || { echo "server did not start" >&2; exit 1; }
		d0=$(drops)
		# shellcheck disable=SC2086
		ip netns exec "$SR_NSB" env SOFTRDMA_NETDEV="$SR_VB" SOFTRDMA_STATS_DUMP="$st" ${CLI_ENV:-} \
			timeout -k 5 $((DUR + 30)) "$b/bin/softrdma" run -- "$b/bin/rtrs-test" bench \
			-p "$SR_NET.1:$port@$SR_NET.2" -T "$DUR" $ARGS >"$log" 2>&1 </dev/null
		sp=$(pgrep -f "^$b/bin/rtrs-test server -l $SR_NET.1:$port " | head -1)
		[ -n "$sp" ] && "$b/bin/softrdma" stat "$sp" 2>/dev/null | awk 'NF == 2 { print "x", $1, $2 }' >"$ss"
		kill -TERM "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
		[ -n "${LOGDIR:-}" ] && cp "$log" "$LOGDIR/c-$r-$k.log"
		reqs=$(sed -n 's/.* path0_reqs=\([0-9]*\).*/\1/p' "$log")
		mib=$(sed -n 's/.* mib_s=\([0-9.]*\).*/\1/p' "$log")
		[ -n "$reqs" ] && [ "$reqs" -gt 0 ] || { echo "$(basename "$b"): no result"; tail -3 "$log"; continue; }
		per() { awk -v x="$1" -v n="$reqs" 'BEGIN { printf "%.1f", 1000 * x / n }'; }
		rs=$(cnt "$st" rtt_samples)
		printf "%-28s %7s %6s %8s %6s %6s %5s %6s %5s %6s %7s %7s %7s %5s %5s\n" \
			"$(basename "$(dirname "$b")")/$(basename "$b")" "$mib" "$reqs" \
			"$(per "$(cnt "$st" retransmits)")" "$(cnt "$st" tail_probes)" \
			"$(cnt "$st" fast_retransmits)" "$(cnt "$st" retry_timeouts)" \
			"$(cnt "$st" probe_acks_early)" "$(cnt "$st" rtt_bounds)" "$rs" \
			"$(awk -v s="$(cnt "$st" rtt_sample_us)" -v n="$rs" 'BEGIN { printf "%.0f", n ? s / n : 0 }')" \
			"$(per "$(cnt "$ss" dup_requests)")" "$(per "$(cnt "$ss" retransmits)")" \
			$(($(drops) - d0)) "$(cut -d' ' -f1 /proc/loadavg)"
	done
done
