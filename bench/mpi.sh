#!/usr/bin/env bash
# bench/mpi.sh: an MPI ping-pong over softrdma beside the same over UCX's tcp transport.
#
#   bench/mpi.sh [--reps N] [--iters N] [--only loopback|netns] [--no-install] [-o FILE.md]
#
# Open MPI (pml ucx, 2 ranks) runs tests/integration/mpi_pingpong.c, 8 B .. 4 MiB by powers of
# 2, twice per scenario and repetition, in turn:
#   softrdma   UCX_TLS=rc_verbs,ud_verbs,self under `softrdma run` (UCX's shared-memory
#              transports off, so every byte crosses softrdma)
#   UCX tcp    UCX_TLS=tcp,self, UCX_NET_DEVICES = the scenario's interface (lo, or the veth)
# on loopback and between two network namespaces joined by a veth pair (made here, removed on
# exit). Repetition by repetition, so that a change of load weighs on both alike. Writes
# bench/results/mpi-<date>.md (also printed) and .tsv (every measurement). Root (namespaces).
# A benchmark, not a test: nothing here fails on a slow figure.
set -euo pipefail

# ROOT BUILD SR RESULTS VETH_MTU INSTALL, bench_root bench_build bench_need bench_have bench_usage
. "$(dirname "$0")/lib.sh"
REPS=3
ITERS=1000	# round trips per size below 1 MiB; ITERS / 10 + 1 from 1 MiB on
ONLY="loopback netns"
OUT=""
MAX=$((4 << 20))
RUN_TO=${RUN_TO:-300}		# timeout of one mpirun, seconds (one takes 10-60 s)

while [ $# -gt 0 ]; do
	case $1 in
	--reps) REPS=$2; shift ;;
	--iters) ITERS=$2; shift ;;
	--only) ONLY=$2; shift ;;
	--no-install) INSTALL=0 ;;
	-o) OUT=$2; shift ;;
	-h | --help) bench_usage 4 ;;
	*) echo "$BENCH: unknown argument $1" >&2; bench_usage 4 ;;
	esac
	shift
done
bench_root
bench_build
bench_need mpicc.openmpi mpirun.openmpi python3
bench_have "$SR"

# --- scratch, cleanup -------------------------------------------------------------------------
tmp=$(mktemp -d /tmp/softrdma-bench-mpi.XXXXXX)
NSA=srmpi-a-$$
NSB=srmpi-b-$$
cleanup() {
	ip netns del "$NSA" 2>/dev/null || true
	ip netns del "$NSB" 2>/dev/null || true
	ip link del "srmA$$" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

timeout 120 mpicc.openmpi -O2 -o "$tmp/pp" "$ROOT/tests/integration/mpi_pingpong.c"

VETH=srbv0
NET=10.$((100 + RANDOM % 100)).$((RANDOM % 256))
setup_netns() {
	ip netns add "$NSA" && ip netns add "$NSB" &&
		ip link add "srmA$$" type veth peer name "srmB$$" &&
		ip link set "srmA$$" netns "$NSA" && ip link set "srmB$$" netns "$NSB" &&
		ip -n "$NSA" link set "srmA$$" name $VETH && ip -n "$NSB" link set "srmB$$" name $VETH &&
		ip -n "$NSA" addr add "$NET.1/24" dev $VETH && ip -n "$NSB" addr add "$NET.2/24" dev $VETH &&
		ip -n "$NSA" link set $VETH mtu "$VETH_MTU" && ip -n "$NSB" link set $VETH mtu "$VETH_MTU" &&
		ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up &&
		ip -n "$NSA" link set $VETH up && ip -n "$NSB" link set $VETH up || return 1
	for _ in $(seq 100); do
		ip -n "$NSA" link show $VETH | grep -q LOWER_UP &&
			ip -n "$NSB" link show $VETH | grep -q LOWER_UP && return 0
		sleep 0.05
	done
	return 1
}
case " $ONLY " in *" netns "*)
	setup_netns || { echo "bench/mpi.sh: could not set up network namespaces" >&2; exit 1; } ;;
esac

# mpirun runs in namespace A and starts the rank of each "host" through an agent
# (plm_rsh_agent): rank 1 in namespace B; rank 0, on mpirun's own address, it starts itself
# (so for softrdma mpirun runs under `softrdma run` too). agent-sr runs the rank under
# `softrdma run`, bound to the veth.
for kind in sr tcp; do
	cat >"$tmp/agent-$kind" <<EOS
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
case \$1 in
$NET.1) ns=$NSA ;;
$NET.2) ns=$NSB ;;
*) echo "agent: unknown host \$1" >&2; exit 1 ;;
esac
shift
if [ $kind = sr ]; then
	exec ip netns exec \$ns env SOFTRDMA_NETDEV=$VETH "$SR" run -- sh -c "\$*"
fi
exec ip netns exec \$ns sh -c "\$*"
EOS
	chmod +x "$tmp/agent-$kind"
done

# one SCENARIO TRANSPORT REP: one mpirun; appends "scenario transport size rep mean median"
# rows (half round trips, us).
one() {
	local scen=$1 tl=$2 rep=$3 out=$tmp/$1.$2.$3.out rc=0
	# mpi_yield_when_idle 1 on every run, both transports: a rank that waits calls sched_yield
	# between polls. Without it, between the namespaces (one slot per "host", so Open MPI
	# does not see the oversubscription it sees on loopback) both ranks spin through whole
	# time slices on the 2 shared cores, and UCX tcp's 8 B half round trip took 12-17 ms
	# (the 2000-round-trip run never finished in 200 s).
	# --bind-to none, also for both: each namespace is a "host" of its own to Open MPI, which
	# bound each one's first rank to core 0, so both ranks (and softrdma's threads) shared
	# one core of the two (--report-bindings).
	local common=(--allow-run-as-root -np 2 --mca mpi_yield_when_idle 1 --bind-to none
		--mca pml ucx --mca btl self --mca osc ^ucx)
	# Open MPI selects pml ucx only over the transports and devices it knows for RDMA
	# (pml_ucx_tls, pml_ucx_devices) unless told to take any: UCX tcp needs that.
	[ "$tl" = tcp ] && common+=(--mca pml_ucx_tls any --mca pml_ucx_devices any)
	local app=("$tmp/pp" "$ITERS" "$MAX" 2 fast)
	case $scen/$tl in
	loopback/softrdma)
		timeout -k 5 $RUN_TO env UCX_TLS=rc_verbs,ud_verbs,self "$SR" run -- \
			mpirun.openmpi "${common[@]}" --oversubscribe -x UCX_TLS "${app[@]}" \
			>"$out" 2>&1 || rc=$? ;;
	loopback/tcp)
		timeout -k 5 $RUN_TO env UCX_TLS=tcp,self UCX_NET_DEVICES=lo \
			mpirun.openmpi "${common[@]}" --oversubscribe -x UCX_TLS -x UCX_NET_DEVICES \
			"${app[@]}" >"$out" 2>&1 || rc=$? ;;
	netns/softrdma)
		timeout -k 5 $RUN_TO ip netns exec "$NSA" env UCX_TLS=rc_verbs,ud_verbs,self \
			SOFTRDMA_NETDEV=$VETH "$SR" run -- mpirun.openmpi "${common[@]}" --mca plm_rsh_agent "$tmp/agent-sr" \
			--host "$NET.1,$NET.2" --mca oob_tcp_if_include $VETH -x UCX_TLS \
			"${app[@]}" >"$out" 2>&1 || rc=$? ;;
	netns/tcp)
		timeout -k 5 $RUN_TO ip netns exec "$NSA" env UCX_TLS=tcp,self UCX_NET_DEVICES=$VETH \
			mpirun.openmpi "${common[@]}" --mca plm_rsh_agent "$tmp/agent-tcp" \
			--host "$NET.1,$NET.2" --mca oob_tcp_if_include $VETH -x UCX_TLS \
			-x UCX_NET_DEVICES "${app[@]}" >"$out" 2>&1 || rc=$? ;;
	esac
	if [ $rc != 0 ] || ! grep -q '^PASS$' "$out"; then
		echo "bench/mpi.sh: $scen $tl rep $rep failed (exit $rc):" >&2
		grep -v "^ *$" "$out" | tail -15 >&2
		echo -e "$scen\t$tl\tall\t$rep\tNA\tNA" >>"$tmp/rows.tsv"
		return 0
	fi
	awk -v s="$scen" -v t="$tl" -v r="$rep" 'NF == 4 && $1 ~ /^[0-9]+$/ {
		printf "%s\t%s\t%s\t%s\t%s\t%s\n", s, t, $1, r, $3, $4 }' "$out" >>"$tmp/rows.tsv"
}

date0=$(date -u +%Y-%m-%d-%H%M)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
echo -e "scenario\ttransport\tsize\trep\tmean_us\tmedian_us" >"$tmp/rows.tsv"
for rep in $(seq "$REPS"); do
	for scen in $ONLY; do
		# Alternate which transport goes first.
		if [ $((rep % 2)) = 1 ]; then order="softrdma tcp"; else order="tcp softrdma"; fi
		for tl in $order; do
			echo "rep $rep/$REPS: $scen $tl" >&2
			one "$scen" "$tl" "$rep"
		done
	done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p "$RESULTS"
base=$RESULTS/mpi-$date0
cp "$tmp/rows.tsv" "$base.tsv"
cpu="$(nproc) CPUs, $("$ROOT/bench/cpu.sh")"
python3 - "$base.tsv" "$REPS" "$ITERS" "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)" \
	"$load0" "$load1" "$(($(date +%s) - t0))" "$cpu" >"$base.md" <<'EOP'
import sys, statistics
path, reps, iters, commit, load0, load1, secs, cpu = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(path)][1:]
val = {}	# (scenario, transport, size) -> {rep: median half round trip, us}
for scen, tl, size, rep, mean_us, us in rows:
    if us != "NA":
        val.setdefault((scen, tl, int(size)), {})[rep] = float(us)

def med(v):
    return statistics.median(v) if v else None

def fmt(v, f="%.3g"):
    if not v:
        return "NA"
    return (f + " [" + f + ".." + f + "]") % (statistics.median(v), min(v), max(v))

def mib_s(size, us):
    return size / (us * 1e-6) / 2**20

print("# MPI ping-pong over softrdma beside UCX tcp (bench/mpi.sh)\n")
print("Open MPI 2 ranks, pml ucx, `--mca mpi_yield_when_idle 1` for both; softrdma:"
      " UCX_TLS=rc_verbs,ud_verbs,self under `softrdma run`; anchor: UCX_TLS=tcp,self."
      " %s repetition(s), %s round trips per size (%s from 1 MiB), commit %s, %s,"
      " load average %s at the start, %s at the end, %s s."
      % (reps, iters, int(iters) // 10 + 1, commit, cpu, load0, load1, secs))
print("\nLatency: the median round trip of a run, halved, in us; median [min..max] over the"
      " repetitions. Bandwidth: size / that half round trip, MiB/s. Pair ratio: softrdma / UCX"
      " tcp latency of the two runs of one repetition (run one after the other), median"
      " [min..max] over the repetitions: below 1 softrdma is faster; its inverse is the"
      " bandwidth ratio.\n")
targets = []
for scen in ("loopback", "netns"):
    sizes = sorted({s for (sc, _, s) in val if sc == scen})
    if not sizes:
        continue
    print("## %s\n" % scen)
    print("| size | softrdma us | UCX tcp us | pair ratio (latency) | softrdma MiB/s | UCX tcp MiB/s | bandwidth ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in sizes:
        a, b = val.get((scen, "softrdma", s), {}), val.get((scen, "tcp", s), {})
        pr = [a[r] / b[r] for r in a if r in b]
        ma, mb, mr = med(list(a.values())), med(list(b.values())), med(pr)
        ba = "%.4g" % mib_s(s, ma) if ma else "NA"
        bb = "%.4g" % mib_s(s, mb) if mb else "NA"
        br = "%.2fx" % (1 / mr) if mr else "NA"
        label = "%d" % s if s < 1024 else ("%d KiB" % (s >> 10) if s < 2**20 else "%d MiB" % (s >> 20))
        print("| %s | %s | %s | %s | %s | %s | %s |" % (label, fmt(list(a.values())),
              fmt(list(b.values())), fmt(pr, "%.2f"), ba, bb, br))
        if s == 8 and mr:
            targets.append(("%s 8 B latency below UCX tcp" % scen, mr < 1, "%.2f" % mr))
        if scen == "netns" and s >= 2**20 and mr:
            targets.append(("netns %s bandwidth >= 1.5x UCX tcp" % label, 1 / mr >= 1.5,
                            "%.2fx" % (1 / mr)))
    print()
if targets:
    print("## Targets (issue ecosystem:)\n")
    print("| target | pair ratio (median) | |")
    print("|---|---:|---|")
    for name, ok, r in targets:
        print("| %s | %s | %s |" % (name, r, "met" if ok else "**not met**"))
    print()
print("Every measurement (mean and median half round trip of each run): %s" % path.rsplit("/", 1)[-1])
EOP
cat "$base.md"
[ -n "$OUT" ] && cp "$base.md" "$OUT"
echo "bench/mpi.sh: wrote $base.md and $base.tsv" >&2
