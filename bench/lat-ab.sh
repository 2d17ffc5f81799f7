#!/usr/bin/env bash
# bench/lat-ab.sh: paired A/B of two builds (or two settings of one build) of softrdma with
# perftest's ib_write_lat between two network namespaces joined by a veth pair (MTU 9000, as
# bench/run), for a loaded machine: each pair is one run through side A and one through side B,
# the order alternating pair by pair, one mode after another. Modes: busy (busy-poll:
# SOFTRDMA_BUSY_POLL_US=1000, as bench/run's softrdma-busy) and default. With --probe, each pair
# also runs the spinning UDP ping-pong probe (bench/probes/udp_pingpong.c -m spin -l 8, as
# bench/run), and each side's ratio to it is printed. Prints each pair's typical (median) and
# mean latency, the ratio B/A of the medians and the load average, then per mode the median
# ratio [min..max] and in how many pairs B was faster (lower).
#
#   bench/lat-ab.sh [--pairs N] [--iters N] [--size B] [--modes "busy default"] [--probe]
#                   [--cgroup] [--pin S,C] [--a-env "K=V ..."] [--b-env "K=V ..."] [-o FILE]
#                   BUILD_A BUILD_B
#
# BUILD_A, BUILD_B: build directories (a copy of build/ made before a change, and build/; the
# same one twice to compare settings with --a-env/--b-env). --iters: ib_write_lat -n (default
# 200000). --size: message size (default 8). --cgroup: every process in a CPU cgroup of high
# weight (bench/cgroup.sh). --pin S,C: the server on CPU S, the client on CPU C (taskset).
# -o FILE: every run as a TSV line (pair, mode, side, median us, mean us, load). Root
# (namespaces). A run with no figure is printed as NA. Leaves nothing behind: the scratch
# directory, the namespaces and the cgroup go at exit.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

PAIRS=6
ITERS=200000
SIZE=8
MODES="busy default"
PROBE=0
CGROUP=0
PIN=()
A_ENV=""
B_ENV=""
OUT=""
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--pairs) PAIRS=$2; shift ;;
	--iters) ITERS=$2; shift ;;
	--size) SIZE=$2; shift ;;
	--modes) MODES=$2; shift ;;
	--probe) PROBE=1 ;;
	--cgroup) CGROUP=1 ;;
	--pin) IFS=, read -r -a PIN <<<"$2"; shift ;;
	--a-env) A_ENV=$2; shift ;;
	--b-env) B_ENV=$2; shift ;;
	-o) OUT=$2; shift ;;
	-h | --help) usage ;;
	-*) echo "lat-ab.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
[ $# -eq 2 ] || usage
bench_need ib_write_lat
# BUILDS, SR_TMP, the exit trap (background timeouts killed, namespaces removed), sr_free_port,
# sr_wait_listen, the cgroup, the namespaces SR_NSA and SR_NSB (SR_VA, SR_VB, SR_NET)
ab_setup lab 1 "$1" "$2"
if [ "$PROBE" = 1 ]; then
	timeout 120 gcc -O2 -Wall -o "$SR_TMP/udp_pingpong" "$ROOT/bench/probes/udp_pingpong.c" ||
		{ echo "lat-ab.sh: could not build the probe" >&2; exit 1; }
fi
ENVS=("$A_ENV" "$B_ENV")
PT=(-d softrdma0 -x 0 -F -s "$SIZE" -n "$ITERS")
[ -n "$OUT" ] && printf "pair\tmode\tside\tmedian_us\tmean_us\tload\n" >"$OUT"
TS=() TC=()
[ ${#PIN[@]} = 2 ] && TS=(taskset -c "${PIN[0]}") TC=(taskset -c "${PIN[1]}")
BOUND=$((ITERS / 2000 + 60))	# seconds: 200,000 round trips take 1-20 s here

# one SIDE MODE: one server/client run; prints "median mean" in us (NA NA if none)
one() {
	local side=$1 mode=$2 b=${BUILDS[$1]} p spid log=$SR_TMP/run
	local -a env
	read -r -a env <<<"${ENVS[$side]}"
	[ "$mode" = busy ] && env+=(SOFTRDMA_BUSY_POLL_US=1000)
	p=$(sr_free_port "$SR_NSA") || { echo "NA NA"; return; }
	timeout -k 5 "$BOUND" ip netns exec "$SR_NSA" env SOFTRDMA_NETDEV="$SR_VA" "${env[@]}" \
		"${TS[@]}" "$b/bin/softrdma" run -- ib_write_lat "${PT[@]}" -p "$p" \
		>"$log.srv" 2>&1 </dev/null &
	spid=$!
	SR_BG+=("$spid")
	sr_wait_listen "$p" "$spid" "$SR_NSA" 20 >/dev/null
	timeout -k 5 "$BOUND" ip netns exec "$SR_NSB" env SOFTRDMA_NETDEV="$SR_VB" "${env[@]}" \
		"${TC[@]}" "$b/bin/softrdma" run -- ib_write_lat "${PT[@]}" -p "$p" "$SR_NET.1" \
		>"$log.cli" 2>&1 </dev/null
	wait "$spid" 2>/dev/null
	# #bytes #iterations t_min t_max t_typical t_avg ...
	awk -v s="$SIZE" '$1 == s && NF >= 6 { m = $5; a = $6 }
		END { print (m == "" ? "NA NA" : m " " a) }' "$log.cli"
}

# the spinning probe, as bench/run's udp_lat spin: prints its median in us (NA if none)
probe() {
	local p spid log=$SR_TMP/probe
	p=$(sr_free_port "$SR_NSA") || { echo NA; return; }
	timeout -k 5 60 ip netns exec "$SR_NSA" "${TS[@]}" "$SR_TMP/udp_pingpong" -S -m spin \
		-p "$p" >"$log.srv" 2>&1 </dev/null &
	spid=$!
	SR_BG+=("$spid")
	sleep 0.2
	timeout -k 5 60 ip netns exec "$SR_NSB" "${TC[@]}" "$SR_TMP/udp_pingpong" -C "$SR_NET.1" \
		-m spin -p "$p" -l "$SIZE" -n "$ITERS" >"$log.cli" 2>&1 </dev/null
	wait "$spid" 2>/dev/null
	# size iters mean median min p99
	awk -v s="$SIZE" '$1 == s && NF == 6 { v = $4 } END { print (v == "" ? "NA" : v) }' "$log.cli"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "NA" || b == "NA" || a <= 0) print "NA"; else printf "%.3f", b / a }'; }

declare -A R	# R[mode,side] = medians, R[mode,r] = ratios B/A, R[mode,pa]/[mode,pb] = / probe
for ((i = 1; i <= PAIRS; i++)); do
	for mode in $MODES; do
		order=(0 1)
		[ $((i % 2)) = 0 ] && order=(1 0)
		declare -A v=() mean=()
		pr=NA
		[ "$PROBE" = 1 ] && pr=$(probe)
		for side in "${order[@]}"; do
			read -r v[$side] mean[$side] <<<"$(one "$side" "$mode")"
			R[$mode,$side]+="${v[$side]} "
			[ -n "$OUT" ] && printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$i" "$mode" "$side" \
				"${v[$side]}" "${mean[$side]}" "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT"
		done
		r=$(ratio "${v[0]}" "${v[1]}")
		R[$mode,r]+="$r "
		extra=""
		if [ "$PROBE" = 1 ]; then
			R[$mode,pa]+="$(ratio "$pr" "${v[0]}") "
			R[$mode,pb]+="$(ratio "$pr" "${v[1]}") "
			extra="  probe $pr (A/probe $(ratio "$pr" "${v[0]}"), B/probe $(ratio "$pr" "${v[1]}"))"
		fi
		printf "pair %2d %-7s A %6s (mean %6s)  B %6s (mean %6s) us  B/A %s%s  load %s\n" \
			"$i" "$mode" "${v[0]}" "${mean[0]}" "${v[1]}" "${mean[1]}" "$r" "$extra" \
			"$(cut -d' ' -f1-3 /proc/loadavg)"
		unset v mean
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
echo "ib_write_lat -s $SIZE -n $ITERS between two namespaces${CGINFO:+, $CGINFO}${PIN[0]:+, pinned ${PIN[0]},${PIN[1]}}, A=${BUILDS[0]}${A_ENV:+ ($A_ENV)}, B=${BUILDS[1]}${B_ENV:+ ($B_ENV)}"
for mode in $MODES; do
	faster=$(echo "${R[$mode,r]}" | tr ' ' '\n' | grep -v NA | awk 'NF && $1 < 1 { n++ } END { print n + 0 }')
	printf "%-7s median us  A %s  B %s\n        B/A %s, B faster in %s\n" "$mode" \
		"$(echo "${R[$mode,0]}" | stats)" "$(echo "${R[$mode,1]}" | stats)" \
		"$(echo "${R[$mode,r]}" | stats)" "$faster"
	if [ "$PROBE" = 1 ]; then
		printf "        A/probe %s  B/probe %s\n" "$(echo "${R[$mode,pa]}" | stats)" \
			"$(echo "${R[$mode,pb]}" | stats)"
	fi
done
