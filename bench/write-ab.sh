#!/usr/bin/env bash
# bench/write-ab.sh: paired A/B of two builds (or two settings of one build) of softrdma with
# perftest's bandwidth tools between two network namespaces joined by a veth pair (MTU 9000, as
# bench/run), for a loaded machine: each pair is one run through side A and one through side B,
# the order alternating pair by pair, one size after another. Prints each pair's figures, its
# ratio B/A and the load average, then per size the median ratio [min..max] and in how many
# pairs B was faster.
#
#   bench/write-ab.sh [--pairs N] [--secs S] [--op write|send|read] [--sizes "S1 S2 ..."]
#                     [--chrt | --cgroup] [--pin S,C] [--a-env "K=V ..."] [--b-env "K=V ..."]
#                     [--lo] [-o FILE] BUILD_A BUILD_B
#
# BUILD_A, BUILD_B: build directories (a copy of build/ made before a change, and build/; the
# same one twice to compare settings with --a-env/--b-env). --op: ib_write_bw (default),
# ib_send_bw or ib_read_bw. --sizes: message sizes (default "65536 1048576"). --secs: perftest's
# -D (default 3). --chrt: both processes under chrt -f 5. --cgroup: every process in a CPU
# cgroup of high weight (bench/cgroup.sh; the machine's other work then takes little of their
# CPU, while nice and time slices still act). --pin S,C: the server (with its progress thread)
# on CPU S and the client on CPU C (taskset). --lo: both processes on the loopback of one
# namespace (127.0.0.1, MTU 65536, the same-host direct path as the defaults have it) instead
# of across the veth pair. -o FILE: every run as a TSV line (pair, size, side, MiB/s, load).
# Root (namespaces). A run with no figure is printed as NA. Leaves nothing behind: the scratch
# directory, the namespaces and the cgroup go at exit; only a run with no figure or under 100
# MiB/s leaves both sides' output and counters in a directory it names on stderr.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

PAIRS=8
SECS=3
OP="write"
SIZES="65536 1048576"
CHRT=()
CGROUP=0
PIN=()
LO=0
A_ENV=""
B_ENV=""
OUT=""
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--pairs) PAIRS=$2; shift ;;
	--secs) SECS=$2; shift ;;
	--op) OP=$2; shift ;;
	--sizes) SIZES=$2; shift ;;
	--chrt) CHRT=(chrt -f 5) ;;
	--cgroup) CGROUP=1 ;;
	--pin) IFS=, read -r -a PIN <<<"$2"; shift ;;
	--lo) LO=1 ;;
	--a-env) A_ENV=$2; shift ;;
	--b-env) B_ENV=$2; shift ;;
	-o) OUT=$2; shift ;;
	-h | --help) usage ;;
	-*) echo "write-ab.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
[ $# -eq 2 ] || usage
case $OP in write | send | read) ;; *) echo "write-ab.sh: --op write, send or read" >&2; exit 2 ;; esac
bench_need "ib_${OP}_bw"
# BUILDS, SR_TMP, the exit trap (background timeouts killed, namespaces removed), sr_free_port,
# sr_wait_listen, the cgroup, the namespaces SR_NSA and SR_NSB (SR_VA, SR_VB, SR_NET)
ab_setup wab 1 "$1" "$2"
ENVS=("$A_ENV" "$B_ENV")
PT=(-d softrdma0 -x 0 -F -D "$SECS")
[ -n "$OUT" ] && printf "pair\tsize\tside\tmibs\tload\n" >"$OUT"

# one SIDE SIZE: one server/client run; prints the client's average MiB/s (NA if none)
one() {
	local side=$1 size=$2 b=${BUILDS[$1]} p spid log=$SR_TMP/run
	local nsc=$SR_NSB devs=$SR_VA devc=$SR_VB dst=$SR_NET.1
	[ "$LO" = 1 ] && nsc=$SR_NSA devs=lo devc=lo dst=127.0.0.1
	local -a env ts=() tc=()
	read -r -a env <<<"${ENVS[$side]}"
	[ ${#PIN[@]} = 2 ] && ts=(taskset -c "${PIN[0]}") tc=(taskset -c "${PIN[1]}")
	p=$(sr_free_port "$SR_NSA") || return 1
	rm -f "$log".*
	timeout -k 5 $((SECS + 30)) ip netns exec "$SR_NSA" env SOFTRDMA_NETDEV="$devs" \
		SOFTRDMA_STATS_DUMP="$log.srv.stats" "${env[@]}" \
		"${CHRT[@]}" "${ts[@]}" "$b/bin/softrdma" run -- "ib_${OP}_bw" "${PT[@]}" -p "$p" -s "$size" \
		>"$log.srv" 2>&1 </dev/null &
	spid=$!
	SR_BG+=("$spid")
	sr_wait_listen "$p" "$spid" "$SR_NSA" 20 >/dev/null
	timeout -k 5 $((SECS + 30)) ip netns exec "$nsc" env SOFTRDMA_NETDEV="$devc" \
		SOFTRDMA_STATS_DUMP="$log.cli.stats" "${env[@]}" \
		"${CHRT[@]}" "${tc[@]}" "$b/bin/softrdma" run -- "ib_${OP}_bw" "${PT[@]}" -p "$p" -s "$size" \
		"$dst" >"$log.cli" 2>&1 </dev/null
	wait "$spid" 2>/dev/null
	local v
	v=$(awk -v s="$size" '$1 == s && NF >= 5 { v = $4 } END { print (v == "" ? "NA" : v) }' "$log.cli")
	# A run with no figure or under 100 MiB/s (a stall; once 0.00 MiB/s at 1 MiB, 2026-11-29):
	# both sides' output and counters are kept for a look, outside the scratch directory.
	if [ "$v" = NA ] || awk -v v="$v" 'BEGIN { exit !(v < 100) }'; then
		local keep
		keep=$(mktemp -d "${TMPDIR:-/tmp}/write-ab-low.XXXXXX") && cp "$log".* "$keep"/ &&
			echo "write-ab: side $side, $size B: $v MiB/s; logs and counters kept in $keep" >&2
	fi
	echo "$v"
}

declare -A R	# R[size,side] = the figures, one a line
for ((i = 1; i <= PAIRS; i++)); do
	for size in $SIZES; do
		order=(0 1)
		[ $((i % 2)) = 0 ] && order=(1 0)
		declare -A v=()
		for side in "${order[@]}"; do
			v[$side]=$(one "$side" "$size")
			R[$size,$side]+="${v[$side]} "
			[ -n "$OUT" ] && printf "%s\t%s\t%s\t%s\t%s\n" "$i" "$size" "$side" "${v[$side]}" \
				"$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT"
		done
		ratio=NA
		[ "${v[0]}" != NA ] && [ "${v[1]}" != NA ] &&
			ratio=$(awk -v a="${v[0]}" -v b="${v[1]}" 'BEGIN { printf "%.3f", (a > 0 ? b / a : 0) }')
		R[$size,r]+="$ratio "
		printf "pair %2d  %7s B  A %8s  B %8s MiB/s  B/A %s  load %s\n" "$i" "$size" "${v[0]}" \
			"${v[1]}" "$ratio" "$(cut -d' ' -f1-3 /proc/loadavg)"
		unset v
	done
done

# median [min..max] of the numbers on stdin (NA skipped), and how many
stats() {
	tr ' ' '\n' | grep -v '^NA$' | grep . | sort -g |
		awk '{ x[NR] = $1 } END { if (!NR) { print "none"; exit }
			m = NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2
			printf "%.3f [%.3f..%.3f] n=%d", m, x[1], x[NR], NR }'
}
echo "CPU: $(sh "$ROOT/bench/cpu.sh")"
echo "ib_${OP}_bw -D $SECS$([ "$LO" = 1 ] && echo ", loopback")${CGINFO:+, $CGINFO}${PIN[0]:+, pinned ${PIN[0]},${PIN[1]}}, A=${BUILDS[0]}${A_ENV:+ ($A_ENV)}, B=${BUILDS[1]}${B_ENV:+ ($B_ENV)}"
for size in $SIZES; do
	faster=$(echo "${R[$size,r]}" | tr ' ' '\n' | grep -v NA | awk '$1 > 1 { n++ } END { print n + 0 }')
	printf "%7s B  A %s  B %s MiB/s\n          B/A %s, B faster in %s\n" "$size" \
		"$(echo "${R[$size,0]}" | stats)" "$(echo "${R[$size,1]}" | stats)" \
		"$(echo "${R[$size,r]}" | stats)" "$faster"
done
