#!/usr/bin/env bash
# bench/mpi-ab.sh: builds side by side on bench/mpi.sh's netns ping-pong, for a loaded machine.
# Open MPI (pml ucx, UCX_TLS=rc_verbs,ud_verbs,self under `softrdma run`, the same command as
# bench/mpi.sh's netns/softrdma run) between two namespaces joined by a veth pair (--loopback:
# bench/mpi.sh's loopback/softrdma run, both ranks in this namespace), once per
# build and round, the builds in rotation (each in each place once every N-builds rounds, the
# order reversed in every other such block), so that a drift of the load weighs on all alike.
# Prints, per size, the first build's median half round trip and each other build's ratio to
# it, round by round: median [min..max] and the rounds where it was slower; then how many runs
# of each build were in the slow regime (a per-run median above twice the size's median over
# every run: on 2 shared cores a run is either fast or several times slower, whatever the
# build, and a few pairs are decided by which side drew the slow one).
#
#   bench/mpi-ab.sh [--rounds N] [--iters N] [--max BYTES] [--cgroup] [--tcp] [--loopback] NAME=BUILD...
#
# NAME=BUILD: a name for the report and a build directory (e.g. old=/tmp/wt-old/build
# new=build; a commit built in a worktree of its own: git worktree add /tmp/wt-X X, then cmake
# there; the targets softrdma, ibverbs, rdmacm and softrdma-cm-guard are enough). The same
# directory may appear under two names to compare settings: NAME=BUILD:K=V,K=V gives that
# name's processes the environment K=V (e.g. b=build:SOFTRDMA_NIC_NICE=-10). --rounds: rounds
# (10). --iters: round trips per size below 1 MiB (1000; from 1 MiB ITERS / 10 + 1). --max:
# largest size (4 MiB). --tcp: also one UCX tcp run per round (its ratio to the first build
# is printed too). --loopback: bench/mpi.sh's loopback runs (softrdma and, with --tcp, UCX tcp
# on lo) instead of the netns ones. --cgroup: every process in a CPU cgroup of high weight made for the run
# (cgroup v1 cpu.shares 262144 or v2 cpu.weight 10000, removed on exit): the other work takes
# little of their CPU, and inside it they are scheduled as on a quiet machine. Root
# (namespaces). Writes RESULTS/mpi-ab-<date>.tsv (every run's mean and median) and prints the
# report. A benchmark, not a test.
set -uo pipefail

# ROOT RESULTS VETH_MTU BENCH, bench_root bench_need bench_usage bench_netns
. "$(dirname "$0")/lib.sh"
ROUNDS=10
ITERS=1000
MAX=$((4 << 20))
CGROUP=0
TCP=0
LOOPBACK=0
SPECS=()
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2; shift ;;
	--iters) ITERS=$2; shift ;;
	--max) MAX=$2; shift ;;
	--cgroup) CGROUP=1 ;;
	--tcp) TCP=1 ;;
	--loopback) LOOPBACK=1 ;;
	-h | --help) bench_usage 26 ;;
	-*) echo "$BENCH: unknown option $1" >&2; bench_usage 26 ;;
	*=*) SPECS+=("$1") ;;
	*) echo "$BENCH: $1 is not NAME=BUILD" >&2; bench_usage 26 ;;
	esac
	shift
done
[ ${#SPECS[@]} -ge 2 ] || { echo "$BENCH: give two builds or more (NAME=BUILD)" >&2; bench_usage 26; }
bench_root
bench_need mpicc.openmpi mpirun.openmpi python3
declare -A DIR ENVS
NAMES=()
for s in "${SPECS[@]}"; do
	n=${s%%=*} rest=${s#*=}
	[[ $n =~ ^[A-Za-z0-9_.-]+$ ]] && [ "$n" != tcp ] && [ -z "${DIR[$n]:-}" ] ||
		{ echo "$BENCH: bad or repeated name '$n'" >&2; exit 2; }
	d=${rest%%:*}
	ENVS[$n]=""
	[ "$d" != "$rest" ] && ENVS[$n]=${rest#*:}
	ENVS[$n]=${ENVS[$n]//,/ }
	d=$(cd "$d" 2>/dev/null && pwd) && [ -x "$d/bin/softrdma" ] ||
		{ echo "$BENCH: no bin/softrdma in the build of $n ($rest)" >&2; exit 1; }
	DIR[$n]=$d
	NAMES+=("$n")
done

# tmp, NSA, NSB, NETS, the veth srbv0; removed on exit (bench_netns_cleanup)
bench_netns mab 1
VETH=srbv0
NET=${NETS[0]}
CG=""
. "$ROOT/bench/cgroup.sh"
trap 'bench_netns_cleanup; bench_cgroup_cleanup' EXIT
[ "$CGROUP" = 1 ] && bench_cgroup mpi-ab

timeout 120 mpicc.openmpi -O2 -o "$tmp/pp" "$ROOT/tests/integration/mpi_pingpong.c" || exit 1

# mpirun runs in namespace A and starts rank 1 in namespace B through an agent
# (plm_rsh_agent), as bench/mpi.sh does; one agent per build (its softrdma, its environment).
agent() {	# FILE SOFTRDMA-or-empty ENV
	cat >"$1" <<EOS
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
case \$1 in
$NET.1) ns=$NSA ;;
$NET.2) ns=$NSB ;;
*) echo "agent: unknown host \$1" >&2; exit 1 ;;
esac
shift
[ -n "$2" ] && exec ip netns exec \$ns env SOFTRDMA_NETDEV=$VETH $3 "$2" run -- sh -c "\$*"
exec ip netns exec \$ns sh -c "\$*"
EOS
	chmod +x "$1"
}
for n in "${NAMES[@]}"; do agent "$tmp/agent-$n" "${DIR[$n]}/bin/softrdma" "${ENVS[$n]}"; done
agent "$tmp/agent-tcp" "" ""

# The options of bench/mpi.sh's runs (see there for mpi_yield_when_idle and --bind-to none).
common=(--allow-run-as-root -np 2 --mca mpi_yield_when_idle 1 --bind-to none --mca pml ucx
	--mca btl self --mca osc ^ucx --host "$NET.1,$NET.2" --mca oob_tcp_if_include "$VETH")
local=(--allow-run-as-root -np 2 --mca mpi_yield_when_idle 1 --bind-to none --mca pml ucx
	--mca btl self --mca osc ^ucx --oversubscribe)
app=("$tmp/pp" "$ITERS" "$MAX" 2 fast)
rows=$tmp/rows.tsv
echo -e "name\tround\tsize\tmean_us\tmedian_us\tload1" >"$rows"

# one NAME ROUND: one mpirun; appends its rows
one() {
	local n=$1 r=$2 out=$tmp/$1.$2.out rc=0 c=("${common[@]}" --mca plm_rsh_agent "$tmp/agent-$1")
	if [ "$LOOPBACK" = 1 ] && [ "$n" = tcp ]; then
		timeout -k 5 300 env UCX_TLS=tcp,self UCX_NET_DEVICES=lo mpirun.openmpi "${local[@]}" \
			--mca pml_ucx_tls any --mca pml_ucx_devices any -x UCX_TLS -x UCX_NET_DEVICES \
			"${app[@]}" >"$out" 2>&1 || rc=$?
	elif [ "$LOOPBACK" = 1 ]; then
		# shellcheck disable=SC2086
		timeout -k 5 300 env UCX_TLS=rc_verbs,ud_verbs,self ${ENVS[$n]} \
			"${DIR[$n]}/bin/softrdma" run -- mpirun.openmpi "${local[@]}" -x UCX_TLS \
			"${app[@]}" >"$out" 2>&1 || rc=$?
	elif [ "$n" = tcp ]; then
		# shellcheck disable=SC2086
		timeout -k 5 300 ip netns exec "$NSA" env UCX_TLS=tcp,self UCX_NET_DEVICES=$VETH \
			mpirun.openmpi "${c[@]}" --mca pml_ucx_tls any --mca pml_ucx_devices any \
			-x UCX_TLS -x UCX_NET_DEVICES "${app[@]}" >"$out" 2>&1 || rc=$?
	else
		# shellcheck disable=SC2086
		timeout -k 5 300 ip netns exec "$NSA" env UCX_TLS=rc_verbs,ud_verbs,self \
			SOFTRDMA_NETDEV=$VETH ${ENVS[$n]} "${DIR[$n]}/bin/softrdma" run -- \
			mpirun.openmpi "${c[@]}" -x UCX_TLS "${app[@]}" >"$out" 2>&1 || rc=$?
	fi
	if [ $rc != 0 ] || ! grep -q '^PASS$' "$out"; then
		echo "$BENCH: $n round $r failed (exit $rc):" >&2
		grep -v "^ *$" "$out" | tail -5 >&2
		return 0
	fi
	awk -v n="$n" -v r="$r" -v l="$(cut -d' ' -f1 /proc/loadavg)" 'NF == 4 && $1 ~ /^[0-9]+$/ {
		printf "%s\t%s\t%s\t%s\t%s\t%s\n", n, r, $1, $3, $4, l }' "$out" >>"$rows"
}

date0=$(date -u +%Y-%m-%d-%H%M)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
k=${#NAMES[@]}
for r in $(seq "$ROUNDS"); do
	order=()
	# a rotation starting at build (r - 1) % k: each build takes each place once every k
	# rounds; reversed in every other k rounds, so that who follows whom changes too
	for ((i = 0; i < k; i++)); do
		j=$(((r - 1 + i) % k))
		if [ $((((r - 1) / k) % 2)) = 1 ]; then order=("${NAMES[$j]}" ${order[@]+"${order[@]}"}); else order+=("${NAMES[$j]}"); fi
	done
	[ "$TCP" = 1 ] && order+=(tcp)
	echo "round $r/$ROUNDS: ${order[*]}" >&2
	for n in "${order[@]}"; do one "$n" "$r"; done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
mkdir -p "$RESULTS"
cp "$rows" "$RESULTS/mpi-ab-$date0.tsv"

python3 - "$rows" "$ROUNDS" "$load0" "$load1" "$(($(date +%s) - t0))" "$CGROUP" "$LOOPBACK" "${NAMES[@]}" <<'EOP'
import sys, statistics as st
path, rounds, load0, load1, secs, cg, lo, *names = sys.argv[1:]
v = {}
for line in list(open(path))[1:]:
    n, r, s, mean, med, load = line.split("\t")
    v[(n, int(r), int(s))] = float(med)
if any(n == "tcp" for (n, _, _) in v):
    names.append("tcp")
base = names[0]
sizes = sorted({s for (_, _, s) in v})
rs = sorted({r for (_, r, _) in v})
print("MPI ping-pong %s, builds side by side: %s rounds, load average %s at"
      " the start, %s at the end, %s s%s. Half round trip: each run's median, us. Ratio: X / %s"
      " of the same round, median [min..max] (rounds X was slower / rounds)."
      % ("on loopback" if lo == "1" else "between two namespaces", rounds, load0, load1, secs, ", in a high-weight CPU cgroup" if cg == "1" else "", base))
def label(s):
    return "%d" % s if s < 1024 else ("%d KiB" % (s >> 10) if s < 2**20 else "%d MiB" % (s >> 20))
print("\n| size | %s us | %s |" % (base, " | ".join("%s / %s" % (n, base) for n in names[1:])))
print("|---:|---:|" + "---:|" * (len(names) - 1))
for s in sizes:
    a = [v[(base, r, s)] for r in rs if (base, r, s) in v]
    cells = []
    for n in names[1:]:
        q = [v[(n, r, s)] / v[(base, r, s)] for r in rs if (n, r, s) in v and (base, r, s) in v]
        cells.append("%.2f [%.2f..%.2f] (%d/%d)" % (st.median(q), min(q), max(q),
                     sum(x > 1 for x in q), len(q)) if q else "NA")
    print("| %s | %s | %s |" % (label(s), "%.3g" % st.median(a) if a else "NA", " | ".join(cells)))
print("\nRuns in the slow regime (median above twice the size's median over every run), per build:")
print("\n| size | %s |" % " | ".join(names))
print("|---:|" + "---:|" * len(names))
for s in sizes:
    every = [x for (n, r, ss), x in v.items() if ss == s]
    lim = 2 * st.median(every)
    cells = []
    for n in names:
        xs = [v[(n, r, s)] for r in rs if (n, r, s) in v]
        cells.append("%d/%d" % (sum(x > lim for x in xs), len(xs)))
    print("| %s | %s |" % (label(s), " | ".join(cells)))
EOP
echo "$BENCH: every run in $RESULTS/mpi-ab-$date0.tsv" >&2
