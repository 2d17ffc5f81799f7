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
# bench/results/<date>-mpi.md (also printed) and .tsv (every measurement). Root (namespaces).
# A benchmark, not a test: nothing here fails on a slow figure.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
SR="$BUILD/bin/softrdma"
REPS=3
ITERS=1000	# round trips per size below 1 MiB; ITERS / 10 + 1 from 1 MiB on
ONLY="loopback netns"
INSTALL=1
OUT=""
MAX=$((4 << 20))
VETH_MTU=${VETH_MTU:-9000}	# as bench/run: jumbo frames, as a RoCE network would have
RESULTS=${RESULTS:-$ROOT/bench/results}
RUN_TO=600			# timeout of one mpirun, seconds

usage() {
	sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}
while [ $# -gt 0 ]; do
	case $1 in
	--reps) REPS=$2; shift ;;
	--iters) ITERS=$2; shift ;;
	--only) ONLY=$2; shift ;;
	--no-install) INSTALL=0 ;;
	-o) OUT=$2; shift ;;
	-h | --help) usage ;;
	*) echo "bench/mpi.sh: unknown argument $1" >&2; usage ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { echo "bench/mpi.sh: run as root (network namespaces)" >&2; exit 1; }
[ "$INSTALL" = 1 ] && make -C "$ROOT" build >/dev/null
for c in mpicc.openmpi mpirun.openmpi python3; do
	command -v $c >/dev/null || { echo "bench/mpi.sh: $c missing (make deps)" >&2; exit 1; }
done
[ -x "$SR" ] || { echo "bench/mpi.sh: no $SR (make build)" >&2; exit 1; }

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

# one SCENARIO TRANSPORT REP: one mpirun; appends "scenario transport size rep usec" rows.
one() {
	local scen=$1 tl=$2 rep=$3 out=$tmp/$1.$2.$3.out rc=0
	local common=(--allow-run-as-root -np 2 --mca pml ucx --mca btl self --mca osc ^ucx)
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
		echo -e "$scen\t$tl\tall\t$rep\tNA" >>"$tmp/rows.tsv"
		return 0
	fi
	awk -v s="$scen" -v t="$tl" -v r="$rep" 'NF == 3 && $1 ~ /^[0-9]+$/ {
		printf "%s\t%s\t%s\t%s\t%s\n", s, t, $1, r, $3 }' "$out" >>"$tmp/rows.tsv"
}

date0=$(date -u +%Y-%m-%d-%H%M)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
echo -e "scenario\ttransport\tsize\trep\tusec" >"$tmp/rows.tsv"
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
base=$RESULTS/$date0-mpi
cp "$tmp/rows.tsv" "$base.tsv"
python3 - "$base.tsv" "$REPS" "$ITERS" "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)" \
	"$load0" "$load1" "$(($(date +%s) - t0))" "$(nproc)" >"$base.md" <<'EOP'
import sys, statistics
path, reps, iters, commit, load0, load1, secs, ncpu = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(path)][1:]
val = {}
for scen, tl, size, rep, us in rows:
    if us != "NA":
        val.setdefault((scen, tl, int(size)), []).append(float(us))

def med(v):
    return statistics.median(v) if v else None

def fmt(v):
    if not v:
        return "NA"
    return "%.3g [%.3g..%.3g]" % (statistics.median(v), min(v), max(v))

def mib_s(size, us):
    return size / (us * 1e-6) / 2**20

print("# MPI ping-pong over softrdma beside UCX tcp (bench/mpi.sh)\n")
print("Open MPI 2 ranks, pml ucx; softrdma: UCX_TLS=rc_verbs,ud_verbs,self under `softrdma run`;"
      " anchor: UCX_TLS=tcp,self. %s repetition(s), %s round trips per size (%s from 1 MiB),"
      " commit %s, %s CPUs, load average %s at the start, %s at the end, %s s."
      % (reps, iters, int(iters) // 10 + 1, commit, ncpu, load0, load1, secs))
print("Latency: half a round trip in us, median [min..max] of the repetitions. Bandwidth:"
      " size / half round trip, MiB/s. Ratio: softrdma / UCX tcp (latency: lower is better;"
      " bandwidth: higher is better).\n")
targets = []
for scen in ("loopback", "netns"):
    sizes = sorted({s for (sc, _, s) in val if sc == scen})
    if not sizes:
        continue
    print("## %s\n" % scen)
    print("| size | softrdma us | UCX tcp us | latency ratio | softrdma MiB/s | UCX tcp MiB/s | bandwidth ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in sizes:
        a, b = val.get((scen, "softrdma", s)), val.get((scen, "tcp", s))
        ma, mb = med(a), med(b)
        lr = "%.2fx" % (ma / mb) if ma and mb else "NA"
        ba = "%.4g" % mib_s(s, ma) if ma else "NA"
        bb = "%.4g" % mib_s(s, mb) if mb else "NA"
        br = "%.2fx" % (mb / ma) if ma and mb else "NA"
        label = "%d" % s if s < 1024 else ("%d KiB" % (s >> 10) if s < 2**20 else "%d MiB" % (s >> 20))
        print("| %s | %s | %s | %s | %s | %s | %s |" % (label, fmt(a), fmt(b), lr, ba, bb, br))
        if s == 8 and ma and mb:
            targets.append(("%s 8 B latency below UCX tcp" % scen, ma < mb, "%.2fx" % (ma / mb)))
        if scen == "netns" and s >= 2**20 and ma and mb:
            targets.append(("netns %s bandwidth >= 1.5x UCX tcp" % label, mb / ma >= 1.5,
                            "%.2fx" % (mb / ma)))
    print()
if targets:
    print("## Targets (issue ecosystem:)\n")
    print("| target | ratio | |")
    print("|---|---:|---|")
    for name, ok, r in targets:
        print("| %s | %s | %s |" % (name, r, "met" if ok else "**not met**"))
    print()
print("Every measurement: %s" % path.rsplit("/", 1)[-1])
EOP
cat "$base.md"
[ -n "$OUT" ] && cp "$base.md" "$OUT"
echo "bench/mpi.sh: wrote $base.md and $base.tsv" >&2
