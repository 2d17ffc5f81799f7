#!/usr/bin/env bash
# bench/qemu-migration.sh: QEMU 7.2 live migration over rdma: (on softrdma) against tcp:, per
# workload, with rdma-pin-all off and on, in one run; prints a markdown table of medians.
#
#   bench/qemu-migration.sh [-n REPS] [-o FILE] [WORKLOAD...]
#     WORKLOAD: idle static512 dirty256 part768 (the default: all four) or ALLOC:WRITE:RATE
#     -n REPS   runs of each (transport, workload) pair, interleaved (default 3)
#     -o FILE   also write the table there
#   Env: BUILD (default build), WORK (run directories; default $BUILD/qemu-bench), and the knobs
#   of tests/qemu/run-migration.sh (MAXBW, DOWNTIME_MS, ...), applied to every run.
#
# Each run is tests/qemu/run-migration.sh: two local QEMUs (TCG, -m 1048568K), QMP-driven, the
# guest checked on the destination afterwards. Runs are interleaved (tcp, rdma, rdma+pin-all
# for one workload, then the next) so that a machine shared with other work loads the three
# alike. Columns: total = QEMU's total-time; downtime = what the guest sees, source STOP to
# destination RESUME (QMP event timestamps); Mbit/s = QEMU's own figure (bytes / (total -
# setup)); ratio = median over medians against tcp. This is a benchmark: nothing is asserted.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=${WORK:-$BUILD/qemu-bench}
REPS=3
OUT=""
while getopts "n:o:" opt; do
	case $opt in
	n) REPS=$OPTARG ;;
	o) OUT=$OPTARG ;;
	*) sed -n '2,10p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
WORKLOADS=${*:-idle static512 dirty256 part768}

[ -e "$BUILD/lib/librdmacm.so.1" ] || { echo "bench/qemu-migration.sh: build first (make)" >&2; exit 1; }
command -v qemu-system-x86_64 >/dev/null ||
	{ echo "bench/qemu-migration.sh: needs qemu-system-x86 (make deps)" >&2; exit 1; }

export QEMU_MIG_WORK=$WORK GUEST_DIR=$BUILD/qemu-guest
export RUNROOT=$WORK/runs-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUNROOT"
"$ROOT/tests/qemu/build-guest.sh" "$GUEST_DIR" || exit 1

run() {	# run CONFIG WORKLOAD
	local cfg=$1 wl=$2 rc
	case $cfg in
	tcp) env TAG=$cfg "$ROOT/tests/qemu/run-migration.sh" tcp "$wl" ;;
	rdma) env TAG=$cfg LD_LIBRARY_PATH="$BUILD/lib" "$ROOT/tests/qemu/run-migration.sh" rdma "$wl" ;;
	rdma-pin-all) env TAG=$cfg CAPS=rdma-pin-all=on LD_LIBRARY_PATH="$BUILD/lib" \
		"$ROOT/tests/qemu/run-migration.sh" rdma "$wl" ;;
	esac >"$RUNROOT/last.out" 2>&1
	rc=$?
	echo "$(date +%T) $cfg $wl: exit $rc ($(sed -n 's/^run dir: //p' "$RUNROOT/last.out"))" >&2
}

t0=$SECONDS
for i in $(seq "$REPS"); do
	for wl in $WORKLOADS; do
		for cfg in tcp rdma rdma-pin-all; do
			run "$cfg" "$wl"
		done
	done
done
echo "bench/qemu-migration.sh: $((REPS * 3 * $(wc -w <<<"$WORKLOADS"))) runs in $((SECONDS - t0)) s" >&2

python3 - "$RUNROOT" "$WORKLOADS" <<'EOF' | tee ${OUT:+"$OUT"}
import glob, json, os, statistics as st, sys
root, wls = sys.argv[1], sys.argv[2].split()
runs = {}
for f in glob.glob(f"{root}/*/result.json"):
    r = json.load(open(f))
    runs.setdefault((r.get("tag"), r["workload"]), []).append(r)
def med(rs, key, sub="summary"):
    v = [(r.get(sub) or {}).get(key) for r in rs]
    v = [x for x in v if isinstance(x, (int, float))]
    return st.median(v) if v else None
def fmt(x, d=0):
    return "-" if x is None else f"{x:.{d}f}"
load = [r["loadavg_before"][0] for rs in runs.values() for r in rs]
print(f"{sum(len(v) for v in runs.values())} runs; host load average (1 min) before each run: "
      f"median {st.median(load):.1f}, max {max(load):.1f}" if load else "no runs")
print()
print("| workload | transport | runs ok | total ms | downtime ms | setup ms | MiB sent | Mbit/s | total vs tcp | downtime vs tcp |")
print("|---|---|---|---|---|---|---|---|---|---|")
for wl in wls:
    base = runs.get(("tcp", wl), [])
    bc = [r for r in base if r["status"] == "completed"]
    bt, bd = med(bc, "total_time_ms"), med(bc, "evt_downtime_ms")
    for cfg in ("tcp", "rdma", "rdma-pin-all"):
        rs = runs.get((cfg, wl), [])
        comp = [r for r in rs if r["status"] == "completed"]
        ok = sum(1 for r in comp if (r.get("verify") or {}).get("guest_ok"))
        t, d = med(comp, "total_time_ms"), med(comp, "evt_downtime_ms")
        rt = f"{t / bt:.2f}" if t and bt and cfg != "tcp" else "-"
        rd = f"{d / bd:.2f}" if d and bd and cfg != "tcp" else "-"
        print(f"| {wl} | {cfg} | {ok}/{len(rs)} | {fmt(t)} | {fmt(d)} | {fmt(med(comp, 'setup_time_ms'))} | "
              f"{fmt(med(comp, 'transferred_mib'))} | {fmt(med(comp, 'mbps'))} | {rt} | {rd} |")
EOF
echo "run directories: $RUNROOT" >&2
