#!/usr/bin/env bash
# bench/rnbd.sh: fio through the RNBD client (nbdkit + rnbd plugin over RTRS on softrdma)
# beside the same fio over plain NBD over TCP and over a local Unix socket.
#
#   bench/rnbd.sh [--reps N] [--runtime S] [--size-mb N] [--no-install] [-o FILE.md]
#
# Two network namespaces joined by two veth pairs (made here, removed on exit). In namespace A:
# rnbd-server exporting a file on tmpfs (both veths, one softrdma device each), and
# `nbdkit file` serving the same file over TCP on veth 1 and over a Unix socket. In namespace
# B: nbdkit with the rnbd plugin, once with one path and once with two, each on a Unix socket.
# fio's nbd engine (in B) runs every point against each of the four, in turn, the order
# rotating from point to point: 4 KiB random read and write at iodepth 1 and 32, 128 KiB
# sequential read and write at iodepth 16. Writes bench/results/<date>-rnbd.md (also printed)
# and .tsv (every measurement). Root (namespaces). A benchmark, not a test.
set -euo pipefail

# ROOT BUILD SR RESULTS VETH_MTU INSTALL, bench_root bench_build bench_need bench_have bench_usage
. "$(dirname "$0")/lib.sh"
SERVER="$BUILD/bin/rnbd-server"
PLUGIN="$BUILD/lib/nbdkit-rnbd-plugin.so"
REPS=3
RUNTIME=10		# seconds per point (after a ramp of RAMP seconds)
RAMP=1
SIZE_MB=256		# the exported file (on tmpfs); fio's region
OUT=""

while [ $# -gt 0 ]; do
	case $1 in
	--reps) REPS=$2; shift ;;
	--runtime) RUNTIME=$2; shift ;;
	--size-mb) SIZE_MB=$2; shift ;;
	--no-install) INSTALL=0 ;;
	-o) OUT=$2; shift ;;
	-h | --help) bench_usage 5 ;;
	*) echo "$BENCH: unknown argument $1" >&2; bench_usage 5 ;;
	esac
	shift
done
[ "$RUNTIME" -le 2 ] && RAMP=0
bench_root
bench_build
bench_need nbdkit nbdinfo fio python3 ip
bench_have "$SR" "$SERVER" "$PLUGIN"

# --- scratch, the namespaces and their two veth pairs, processes, cleanup (bench/lib.sh) ---------
bench_netns rnbd 2
NET1=${NETS[0]}
NET2=${NETS[1]}

# The export: written once with random bytes (reads return data, not holes).
timeout 120 dd if=/dev/urandom of="$exp/disk.img" bs=1M count="$SIZE_MB" status=none

# wait_nbd URI NS: until the NBD server answers (30 s)
wait_nbd() {
	for _ in $(seq 300); do
		ip netns exec "$2" timeout 5 nbdinfo --size "$1" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}
die() { echo "bench/rnbd.sh: $*" >&2; exit 1; }

PORT_R=$((20000 + RANDOM % 10000))
PORT_T=$((PORT_R + 1))
# A: rnbd-server on both veths (buffered IO: the same page cache as nbdkit file's; the file is
# on tmpfs, so the server does its IO on the RTRS event thread: --sync-io auto). 256 KiB RTRS
# chunks (128 per session, 32 MiB) so that a 128 KiB request is one RTRS request, not 124 KiB
# + 4 KiB as with the kernel's default 128 KiB chunk (docs/rnbd.md, "Performance").
bench_rnbd_server "$tmp/rnbd-server.log" env SOFTRDMA_NETDEV=srbv0,srbv1 "$SR" run -- \
	"$SERVER" --search-path "$exp" --listen "$NET1.1" --listen "$NET2.1" --port "$PORT_R" \
	--no-direct --chunk-size 262144 --sess-queue-depth 128
# A: nbdkit file over TCP on veth 1, and over a Unix socket
timeout -k 5 86400 ip netns exec "$NSA" nbdkit -f -p "$PORT_T" -i "$NET1.1" file "$exp/disk.img" \
	>"$tmp/nbd-tcp.log" 2>&1 &
PIDS+=($!)
timeout -k 5 86400 ip netns exec "$NSA" nbdkit -f -U "$tmp/nbd-unix.sock" file "$exp/disk.img" \
	>"$tmp/nbd-unix.log" 2>&1 &
PIDS+=($!)
# B: the RNBD client, one path and two (the second writer opens in migration mode)
timeout -k 5 86400 ip netns exec "$NSB" env SOFTRDMA_NETDEV=srbv0 "$SR" run -- \
	nbdkit -f -U "$tmp/rnbd1.sock" "$PLUGIN" device=disk.img session=bench1 \
	path="$NET1.2@$NET1.1:$PORT_R" >"$tmp/rnbd1.log" 2>&1 &
PIDS+=($!)
# The read-write open first: once the migration-mode writer holds the device, a plain
# read-write open is refused (the kernel's rule), so starting both at once was a race.
wait_nbd "nbd+unix:///?socket=$tmp/rnbd1.sock" "$NSB" ||
	{ tail -n 5 "$tmp"/*.log >&2 || true; die "rnbd-1path did not come up"; }
timeout -k 5 86400 ip netns exec "$NSB" env SOFTRDMA_NETDEV=srbv0,srbv1 "$SR" run -- \
	nbdkit -f -U "$tmp/rnbd2.sock" "$PLUGIN" device=disk.img session=bench2 access=migration \
	path="$NET1.2@$NET1.1:$PORT_R" path="$NET2.2@$NET2.1:$PORT_R" stats="$tmp/rnbd2.stats" \
	>"$tmp/rnbd2.log" 2>&1 &
PIDS+=($!)

declare -A URI=(
	[rnbd-2path]="nbd+unix:///?socket=$tmp/rnbd2.sock"
	[rnbd-1path]="nbd+unix:///?socket=$tmp/rnbd1.sock"
	[nbd-tcp]="nbd://$NET1.1:$PORT_T/"
	[nbd-unix]="nbd+unix:///?socket=$tmp/nbd-unix.sock"
)
TRANSPORTS=(rnbd-2path rnbd-1path nbd-tcp nbd-unix)
for t in "${TRANSPORTS[@]}"; do
	wait_nbd "${URI[$t]}" "$NSB" || { tail -n 5 "$tmp"/*.log >&2 || true; die "$t did not come up"; }
done
[ "$(grep -c '^path .*state connected' "$tmp/rnbd2.stats" 2>/dev/null)" = 2 ] ||
	sleep 2	# the second path of the two-path session may still be connecting

# point NAME RW BS QD
POINTS=("randread-4k-qd1 randread 4k 1" "randread-4k-qd32 randread 4k 32"
	"randwrite-4k-qd1 randwrite 4k 1" "randwrite-4k-qd32 randwrite 4k 32"
	"read-128k-qd16 read 128k 16" "write-128k-qd16 write 128k 16")

# one TRANSPORT POINT REP: one fio run; appends rows "transport point rep iops mibs lat_mean_us lat_p50_us"
one() {
	local t=$1 name=$2 rw=$3 bs=$4 qd=$5 rep=$6 out=$tmp/$1.$2.$6.json rc=0
	timeout -k 5 $((RUNTIME + RAMP + 60)) ip netns exec "$NSB" fio --name="$name" --ioengine=nbd \
		--uri="${URI[$t]}" --rw="$rw" --bs="$bs" --iodepth="$qd" --size="${SIZE_MB}m" \
		--time_based --runtime="$RUNTIME" --ramp_time="$RAMP" --output-format=json \
		--output="$out" >/dev/null 2>"$tmp/fio.err" || rc=$?
	if [ $rc != 0 ] || ! python3 - "$out" "$t" "$name" "$rep" >>"$tmp/rows.tsv" <<'EOP'
import json, sys
path, t, name, rep = sys.argv[1:]
j = json.load(open(path))["jobs"][0]
if j["error"]:
    sys.exit(1)
d = j["read"] if j["read"]["io_bytes"] else j["write"]
clat = d["clat_ns"]
p50 = clat.get("percentile", {}).get("50.000000")
print("%s\t%s\t%s\t%.1f\t%.2f\t%.2f\t%s" % (t, name, rep, d["iops"], d["bw_bytes"] / 2**20,
      clat["mean"] / 1000, "%.2f" % (p50 / 1000) if p50 else "NA"))
EOP
	then
		echo "bench/rnbd.sh: $t $name rep $rep failed (exit $rc)" >&2
		tail -3 "$tmp/fio.err" >&2 || true
		echo -e "$t\t$name\t$rep\tNA\tNA\tNA\tNA" >>"$tmp/rows.tsv"
	fi
}

date0=$(date -u +%Y-%m-%d-%H%M)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
echo -e "transport\tpoint\trep\tiops\tmibs\tlat_mean_us\tlat_p50_us" >"$tmp/rows.tsv"
k=0
for rep in $(seq "$REPS"); do
	for p in "${POINTS[@]}"; do
		read -r name rw bs qd <<<"$p"
		# rotate which transport goes first, point by point
		for i in 0 1 2 3; do
			t=${TRANSPORTS[$(((i + k) % 4))]}
			echo "rep $rep/$REPS: $name $t" >&2
			one "$t" "$name" "$rw" "$bs" "$qd" "$rep"
		done
		k=$((k + 1))
	done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
cp "$tmp/rnbd2.stats" "$tmp/rnbd2.final.stats" 2>/dev/null || true

mkdir -p "$RESULTS"
base=$RESULTS/$date0-rnbd
cp "$tmp/rows.tsv" "$base.tsv"
python3 - "$base.tsv" "$REPS" "$RUNTIME" "$SIZE_MB" \
	"$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)" "$load0" "$load1" \
	"$(($(date +%s) - t0))" "$(nproc)" "$("$ROOT/bench/cpu.sh")" >"$base.md" <<'EOP'
import sys, statistics
path, reps, runtime, size_mb, commit, load0, load1, secs, ncpu, cpu = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(path)][1:]
val = {}
for t, p, rep, iops, mibs, lat, p50 in rows:
    if iops == "NA":
        continue
    v = val.setdefault((t, p), {"iops": [], "mibs": [], "lat": [], "p50": []})
    v["iops"].append(float(iops)); v["mibs"].append(float(mibs)); v["lat"].append(float(lat))
    if p50 != "NA":
        v["p50"].append(float(p50))

def med(t, p, k):
    v = val.get((t, p), {}).get(k)
    return statistics.median(v) if v else None

def fmt(t, p, k):
    v = val.get((t, p), {}).get(k)
    if not v:
        return "NA"
    return "%.4g [%.4g..%.4g]" % (statistics.median(v), min(v), max(v))

def ratio(a, b, inv=False):
    if a is None or b is None or a == 0 or b == 0:
        return None
    return b / a if inv else a / b

T = ["rnbd-2path", "rnbd-1path", "nbd-tcp", "nbd-unix"]
print("# RNBD over softrdma beside NBD over TCP and a Unix socket (bench/rnbd.sh)\n")
print("fio --ioengine=nbd in namespace B. rnbd-2path / rnbd-1path: nbdkit + rnbd plugin, RTRS"
      " over softrdma on two veth pairs / the first, to rnbd-server in namespace A; nbd-tcp:"
      " `nbdkit file` in A over TCP on veth 1; nbd-unix: `nbdkit file` over a Unix socket (the"
      " ceiling: no network). The same %s MiB file on tmpfs under all of them."
      " %s repetition(s) of %s s per point, commit %s, %s CPUs (%s), load average %s at the start,"
      " %s at the end, %s s." % (size_mb, reps, runtime, commit, ncpu, cpu, load0, load1, secs))
print("Median [min..max] of the repetitions; ratio: RNBD / NBD over TCP (latency: lower is"
      " better).\n")
points = ["randread-4k-qd1", "randread-4k-qd32", "randwrite-4k-qd1", "randwrite-4k-qd32",
          "read-128k-qd16", "write-128k-qd16"]
print("## IOPS (4 KiB) and bandwidth (128 KiB, MiB/s)\n")
print("| point | " + " | ".join(T) + " | 2path/tcp | 1path/tcp |")
print("|---|" + "---:|" * (len(T) + 2))
for p in points:
    k = "mibs" if "128k" in p else "iops"
    r2 = ratio(med("rnbd-2path", p, k), med("nbd-tcp", p, k))
    r1 = ratio(med("rnbd-1path", p, k), med("nbd-tcp", p, k))
    print("| %s %s | %s | %s | %s |" % (p, "MiB/s" if k == "mibs" else "IOPS",
          " | ".join(fmt(t, p, k) for t in T), "%.2fx" % r2 if r2 else "NA",
          "%.2fx" % r1 if r1 else "NA"))
print("\n## Latency at iodepth 1 (completion latency, us)\n")
print("| point | " + " | ".join(T) + " | 2path/tcp | 1path/tcp |")
print("|---|" + "---:|" * (len(T) + 2))
for p in ["randread-4k-qd1", "randwrite-4k-qd1"]:
    for k, lab in (("p50", "median"), ("lat", "mean")):
        r2 = ratio(med("rnbd-2path", p, k), med("nbd-tcp", p, k))
        r1 = ratio(med("rnbd-1path", p, k), med("nbd-tcp", p, k))
        print("| %s %s | %s | %s | %s |" % (p, lab, " | ".join(fmt(t, p, k) for t in T),
              "%.2fx" % r2 if r2 else "NA", "%.2fx" % r1 if r1 else "NA"))
print("\n## Targets (issue rnbd:)\n")
print("| target | 2 paths | 1 path |")
print("|---|---:|---:|")
def verdict(r, ok):
    return "NA" if r is None else "%.2fx %s" % (r, "met" if ok(r) else "**not met**")
for p in ["randread-4k-qd32", "randwrite-4k-qd32"]:
    cells = [verdict(ratio(med(t, p, "iops"), med("nbd-tcp", p, "iops")), lambda r: r >= 1.5)
             for t in ("rnbd-2path", "rnbd-1path")]
    print("| %s IOPS >= 1.5x NBD over TCP | %s | %s |" % (p, cells[0], cells[1]))
for p in ["read-128k-qd16", "write-128k-qd16"]:
    cells = [verdict(ratio(med(t, p, "mibs"), med("nbd-tcp", p, "mibs")), lambda r: r >= 1.5)
             for t in ("rnbd-2path", "rnbd-1path")]
    print("| %s bandwidth >= 1.5x NBD over TCP | %s | %s |" % (p, cells[0], cells[1]))
for p in ["randread-4k-qd1", "randwrite-4k-qd1"]:
    cells = [verdict(ratio(med(t, p, "p50"), med("nbd-tcp", p, "p50")), lambda r: r < 1.0)
             for t in ("rnbd-2path", "rnbd-1path")]
    print("| %s median latency below NBD over TCP's | %s | %s |" % (p, cells[0], cells[1]))
print("\nEvery measurement: %s" % path.rsplit("/", 1)[-1])
EOP
cat "$base.md"
if [ -f "$tmp/rnbd2.final.stats" ]; then
	echo
	echo "rnbd-2path client counters at the end (requests per path):"
	grep -E '^(errors|disconnects|path) ' "$tmp/rnbd2.final.stats" | sed 's/^/  /'
fi
[ -n "$OUT" ] && cp "$base.md" "$OUT"
echo "bench/rnbd.sh: wrote $base.md and $base.tsv" >&2
