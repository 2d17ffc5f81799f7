#!/usr/bin/env bash
# bench/rtrs-ab.sh: paired A/B of two builds (or two settings of one build) of RTRS, for a loaded
# machine: `rtrs-test bench` against `rtrs-test server -z -c 262144` between two network
# namespaces joined by two veth pairs (MTU 9000), each pair one run through side A then one
# through side B (the order alternating pair by pair). Prints each pair's ratio B/A and the CPU
# time per request of both processes together (a figure that moves less than the rate when
# other work takes the CPUs), then the medians.
#
#   bench/rtrs-ab.sh [--pairs N] [--secs S] [--chrt | --cgroup] [--paths A,B] [--ai A,B]
#                    [--a-env "K=V ..."] [--b-env "K=V ..."] BUILD_A BUILD_B [-- BENCH_ARGS...]
#
# BUILD_A, BUILD_B: build directories (a copy of build/ made before a change, and build/; the
# same one twice to compare settings). BENCH_ARGS: rtrs-test bench's (default -S 131072 -D 32:
# 128 KiB WRITEs at depth 32; e.g. -- -S 4096 -D 1, -- -S 131072 -D 32 -r). --paths: paths of
# side A and side B (default 1,1; 1,2 compares one path with two). --ai: always_invalidate of
# each side's server (default 1,1; 0,1 compares it off with on). --a-env / --b-env: environment
# of that side's processes (e.g. RTRS_POLL_US=0, SOFTRDMA_ACK_DEFER_US=0). --chrt: every
# process under chrt -f 10 (the other work on the machine then takes little of their CPU; both
# processes use both cores). --cgroup: every process in a CPU cgroup of high weight made for the
# run (cgroup v1 cpu.shares 262144, or v2 cpu.weight 10000; removed on exit): the other work
# then takes little of their CPU too, but inside the cgroup they are scheduled as at normal
# priority on a quiet machine (nice and time slices act, which under chrt they do not). Root
# (namespaces). Writes nothing but a scratch directory, removed on exit. A run that fails (no
# "errors=0" line) is printed as NA with its last words.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

PAIRS=4
SECS=3
CHRT=()
CGROUP=0
PATHS=(1 1)
AI=(1 1)
A_ENV=""
B_ENV=""
while [ $# -gt 0 ]; do
	case $1 in
	--pairs) PAIRS=$2; shift ;;
	--secs) SECS=$2; shift ;;
	--chrt) CHRT=(chrt -f 10) ;;
	--cgroup) CGROUP=1 ;;
	--paths) IFS=, read -r -a PATHS <<<"$2"; shift ;;
	--ai) IFS=, read -r -a AI <<<"$2"; shift ;;
	--a-env) A_ENV=$2; shift ;;
	--b-env) B_ENV=$2; shift ;;
	-h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	-*) echo "rtrs-ab.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
[ $# -ge 2 ] || { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
A=$1 B=$2
shift 2
[ "${1:-}" = -- ] && shift
BENCH_ARGS=("$@")
[ ${#BENCH_ARGS[@]} -gt 0 ] || BENCH_ARGS=(-S 131072 -D 32)
ENVS=("$A_ENV" "$B_ENV")
# BUILDS, SR_TMP, the exit trap (background timeouts killed, namespaces removed), sr_free_port,
# sr_wait_listen, the namespaces SR_NSA and SR_NSB joined by two veth pairs (MTU VETH_MTU);
# --cgroup: this script moves into the cgroup (its children follow) and back out at exit, so
# that the cgroup, empty, can be removed.
ab_setup rab 2 "$A" "$B" rtrs-test

# CPU seconds (user + system) of every live process under pid $1, itself included
tree_cpu() {
	local p t=0 hz
	hz=$(getconf CLK_TCK)
	for p in $1 $(pgrep -P "$1" 2>/dev/null); do
		[ "$p" = "$1" ] || { t=$(awk -v a="$t" -v b="$(tree_cpu "$p")" 'BEGIN { print a + b }'); continue; }
		[ -r /proc/$p/stat ] || continue
		t=$(awk -v a="$t" -v hz="$hz" '{ sub(/.*\) /, ""); print a + ($12 + $13) / hz }' /proc/$p/stat)
	done
	echo "$t"
}

# one run of side S (0: A, 1: B): prints "RATE IOS CPU_S" (RATE: MiB/s, or IOPS below 64 KiB)
run_side() {
	local s=$1 b=${BUILDS[$1]} port spid log=$SR_TMP/c.log
	local envs
	read -r -a envs <<<"${ENVS[$s]}"
	port=$(sr_free_port "$SR_NSA")
	ip netns exec "$SR_NSA" env SOFTRDMA_NETDEV="$SR_VA,$SR_VA2" "${envs[@]}" \
		timeout -k 5 $((SECS + 90)) "${CHRT[@]}" "$b/bin/softrdma" run -- "$b/bin/rtrs-test" server \
		-l "$SR_NET.1:$port" -l "$SR_NET2.1:$port" -z -c 262144 -i "${AI[$s]}" -t $((SECS + 80)) \
		>"$SR_TMP/s.log" 2>&1 </dev/null &
	spid=$!
	SR_BG+=("$spid")
	if ! sr_wait_listen "$port" "$spid" "$SR_NSA" 20; then
		kill -TERM "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
		echo "NA 0 0 server did not start"
		return
	fi
	local paths=(-p "$SR_NET.1:$port@$SR_NET.2")
	[ "${PATHS[$s]}" = 2 ] && paths+=(-p "$SR_NET2.1:$port@$SR_NET2.2")
	ip netns exec "$SR_NSB" env SOFTRDMA_NETDEV="$SR_VB,$SR_VB2" "${envs[@]}" \
		timeout -k 5 $((SECS + 40)) /usr/bin/time -f "CPU %U %S" "${CHRT[@]}" "$b/bin/softrdma" run -- \
		"$b/bin/rtrs-test" bench "${paths[@]}" -T "$SECS" "${BENCH_ARGS[@]}" >"$log" 2>&1 </dev/null
	local scpu ccpu line
	scpu=$(tree_cpu "$spid")
	kill -TERM "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	ccpu=$(awk '/^CPU/ { print $2 + $3 }' "$log")
	line=$(grep -m1 ' errors=0' "$log")
	if [ -z "$line" ]; then
		echo "NA 0 0 $(tail -c 160 "$log" | tr '\n' ' ')"
		return
	fi
	local size ios iops mib
	size=$(sed -n 's/.* size=\([0-9]*\) .*/\1/p' <<<"$line")
	ios=$(sed -n 's/.* ios=\([0-9]*\) .*/\1/p' <<<"$line")
	iops=$(sed -n 's/.* iops=\([0-9]*\) .*/\1/p' <<<"$line")
	mib=$(sed -n 's/.* mib_s=\([0-9.]*\) .*/\1/p' <<<"$line")
	[ "$size" -ge 65536 ] && echo "$mib $ios $(awk -v a="$ccpu" -v b="$scpu" 'BEGIN { print a + b }')" ||
		echo "$iops $ios $(awk -v a="$ccpu" -v b="$scpu" 'BEGIN { print a + b }')"
}

echo "rtrs-ab: A=${BUILDS[0]} (${A_ENV:-no env}, paths ${PATHS[0]}, ai ${AI[0]})"
echo "rtrs-ab: B=${BUILDS[1]} (${B_ENV:-no env}, paths ${PATHS[1]}, ai ${AI[1]})"
echo "rtrs-ab: bench ${BENCH_ARGS[*]}, $SECS s a run, $PAIRS pairs${CHRT:+, under chrt -f 10}; load $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$CGROUP" = 1 ] && echo "rtrs-ab: $CGINFO: $CG"
printf "%-5s %-5s %10s %10s %7s %10s %10s %6s\n" pair order A B B/A "A us/io" "B us/io" load
RATIOS=()
CPU_RATIOS=()
for ((i = 1; i <= PAIRS; i++)); do
	order=(0 1)
	[ $((i % 2)) = 0 ] && order=(1 0)
	declare -A R=() N=() C=() W=()
	for s in "${order[@]}"; do
		read -r R[$s] N[$s] C[$s] W[$s] <<<"$(run_side "$s")"
	done
	ratio=NA cr=NA ua=NA ub=NA
	if [ "${R[0]}" != NA ] && [ "${R[1]}" != NA ]; then
		ratio=$(awk -v a="${R[0]}" -v b="${R[1]}" 'BEGIN { printf "%.2f", b / a }')
		ua=$(awk -v c="${C[0]}" -v n="${N[0]}" 'BEGIN { printf "%.1f", c * 1e6 / n }')
		ub=$(awk -v c="${C[1]}" -v n="${N[1]}" 'BEGIN { printf "%.1f", c * 1e6 / n }')
		cr=$(awk -v a="$ua" -v b="$ub" 'BEGIN { printf "%.2f", b / a }')
		RATIOS+=("$ratio")
		CPU_RATIOS+=("$cr")
	fi
	printf "%-5s %-5s %10s %10s %7s %10s %10s %6s\n" "$i" "$([ "${order[0]}" = 0 ] && echo AB || echo BA)" \
		"${R[0]}" "${R[1]}" "$ratio" "$ua" "$ub" "$(cut -d' ' -f1 /proc/loadavg)"
	for s in 0 1; do
		[ "${R[$s]}" = NA ] && echo "  side $([ $s = 0 ] && echo A || echo B) failed: ${W[$s]:-}"
	done
	unset R N C W
done
med() { [ $# -gt 0 ] && printf "%s\n" "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }' || echo NA; }
echo "rtrs-ab: median B/A $(med "${RATIOS[@]}") over ${#RATIOS[@]} pairs (rate), CPU per request B/A $(med "${CPU_RATIOS[@]}"); load $(cut -d' ' -f1-3 /proc/loadavg)"
