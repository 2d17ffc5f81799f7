#!/usr/bin/env bash
# bench/rnbd-cpu.sh: where the CPU time and the context switches of an RNBD request go. One
# build's rnbd-server and nbdkit + plugin between two namespaces (bench/rnbd-ab.sh's set-up,
# one path), one fio run; prints per request: the CPU time of each process (all its threads,
# the fio run's whole length), a per-thread breakdown over 3 s in the middle of the run (CPU,
# voluntary and involuntary switches per request; softrdma's progress thread is the busiest
# thread named like its process), softrdma's counters of both processes per request (packets,
# progress-thread wake-ups, ACKs), and with --switches where each thread went to sleep (perf
# sched_switch with user stacks: heavy, slows the run several times; ratios between rows hold).
#
#   bench/rnbd-cpu.sh [--runtime S] [--point RW:BS:QD] [--switches] [BUILD]
#
# BUILD: a build directory (default build/). Environment: SERVER_ARGS (rnbd-server options
# beyond the bench's), PLUGIN (plugin keys), NBDKIT (nbdkit options, e.g. "-t 32"), SRV_ENV /
# CLT_ENV (environment of server / client). Root (namespaces). Figures from a loaded machine
# are per request and still depend on the load (fewer requests share a wake-up when CPU is
# short): compare settings run by run, alternating, never with a figure from another day.
set -euo pipefail

# bench_netns bench_rnbd_server
. "$(dirname "$0")/lib.sh"
RUNTIME=12
POINT=randread:4k:32
SWITCHES=0
while [ $# -gt 0 ]; do
	case $1 in
	--runtime) RUNTIME=$2; shift ;;
	--point) POINT=$2; shift ;;
	--switches) SWITCHES=1 ;;
	-h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	-*) echo "rnbd-cpu.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
B=$(cd "${1:-$BUILD}" && pwd)
IFS=: read -r RW BS QD <<<"$POINT"
[ "$RUNTIME" -ge 10 ] || { echo "rnbd-cpu.sh: --runtime 10 at least" >&2; exit 2; }
bench_root
bench_have "$B/bin/softrdma" "$B/bin/rnbd-server" "$B/lib/nbdkit-rnbd-plugin.so"
[ "$SWITCHES" = 0 ] || bench_need perf

bench_netns cpu 1
NET=${NETS[0]}
timeout 60 dd if=/dev/urandom of="$exp/disk.img" bs=1M count=64 status=none
PORT=$((20000 + RANDOM % 10000))
# shellcheck disable=SC2086
bench_rnbd_server "$tmp/srv.log" env SOFTRDMA_NETDEV=srbv0 ${SRV_ENV:-} "$B/bin/softrdma" run -- \
	"$B/bin/rnbd-server" --search-path "$exp" --listen "$NET.1" --port "$PORT" --no-direct \
	--chunk-size 262144 --sess-queue-depth 128 ${SERVER_ARGS:-}
# shellcheck disable=SC2086
timeout -k 5 7200 ip netns exec "$NSB" env SOFTRDMA_NETDEV=srbv0 ${CLT_ENV:-} "$B/bin/softrdma" run -- \
	nbdkit -f ${NBDKIT:-} -U "$tmp/c.sock" "$B/lib/nbdkit-rnbd-plugin.so" device=disk.img \
	session=cpu path="$NET.2@$NET.1:$PORT" ${PLUGIN:-} >"$tmp/clt.log" 2>&1 &
PIDS+=($!)
CLT=$!
for _ in $(seq 300); do
	kill -0 "$CLT" 2>/dev/null || { tail -n 5 "$tmp/clt.log" >&2; exit 1; }
	ip netns exec "$NSB" timeout 5 nbdinfo --size "nbd+unix:///?socket=$tmp/c.sock" \
		>/dev/null 2>&1 && break
	sleep 0.1
done
spid=$(pgrep -f "^$B/bin/rnbd-server .*$exp" | head -1 || true)
cpid=$(pgrep -f "^nbdkit .*$tmp/c.sock" | head -1 || true)
[ -n "$spid" ] && [ -n "$cpid" ] || { tail -n 5 "$tmp/clt.log" "$tmp/srv.log" >&2; exit 1; }

# snap KIND OUT PID...: per thread (comm, CPU ns, voluntary, involuntary switches) of each
# process; KIND proc: the process's own CPU ticks (its dead threads included) instead
snap() {
	python3 - "$@" <<'EOP'
import json, os, sys
import time
kind, out, pids = sys.argv[1], sys.argv[2], sys.argv[3:]
r = {"time": time.time()}
for pid in pids:
    if kind == "proc":
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        r[pid] = int(f[11]) + int(f[12])
        continue
    d = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = open(f"/proc/{pid}/task/{t}/comm").read().strip()
            ns = int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
            sw = {l.split(":")[0]: int(l.split()[1]) for l in open(f"/proc/{pid}/task/{t}/status")
                  if l.endswith("ctxt_switches\n") or "ctxt_switches:" in l}
            d[t] = [comm, ns, sw.get("voluntary_ctxt_switches", 0),
                    sw.get("nonvoluntary_ctxt_switches", 0)]
        except OSError:
            pass
    r[pid] = d
json.dump(r, open(out, "w"))
EOP
}
stat2() { "$B/bin/softrdma" stat -a "$spid" >"$1.s" 2>&1 || true; "$B/bin/softrdma" stat -a "$cpid" >"$1.c" 2>&1 || true; }

stat2 "$tmp/st0"
snap proc "$tmp/p0.json" "$spid" "$cpid"
if [ "$SWITCHES" = 1 ]; then
	perf record -e sched:sched_switch --call-graph dwarf,8192 -o "$tmp/perf.data" \
		-p "$spid,$cpid" >/dev/null 2>&1 &
	PERF=$!
	sleep 1
fi
ip netns exec "$NSB" fio --name=cpu --ioengine=nbd --uri="nbd+unix:///?socket=$tmp/c.sock" \
	--rw="$RW" --bs="$BS" --iodepth="$QD" --size=64m --time_based --runtime="$RUNTIME" \
	--output-format=json --output="$tmp/fio.json" >/dev/null 2>"$tmp/fio.err" &
FIO=$!
sleep 2
snap task "$tmp/t0.json" "$spid" "$cpid"
sleep 3
snap task "$tmp/t1.json" "$spid" "$cpid"
wait "$FIO" || { tail -n 3 "$tmp/fio.err" "$tmp/clt.log" >&2; exit 1; }
[ "$SWITCHES" = 0 ] || { kill -INT "$PERF"; wait "$PERF" || true; }
snap proc "$tmp/p1.json" "$spid" "$cpid"
stat2 "$tmp/st1"

python3 - "$tmp" "$spid" "$cpid" "$RW $BS depth $QD" <<'EOP'
import json, os, sys
tmp, spid, cpid, what = sys.argv[1:]
j = json.load(open(f"{tmp}/fio.json"))["jobs"][0]
d = j["read"] if j["read"]["io_bytes"] else j["write"]
nio, iops = d["total_ios"], d["iops"]
hz = os.sysconf("SC_CLK_TCK")
p0, p1 = json.load(open(f"{tmp}/p0.json")), json.load(open(f"{tmp}/p1.json"))
fio_cpu = (j["usr_cpu"] + j["sys_cpu"]) / 100 * j["elapsed"] * 1e6 / nio
print(f"# {what}: {nio} requests, {iops:.0f} IOPS; load {open('/proc/loadavg').read().split()[0]}")
print("CPU per request, whole run: fio %.1f us, server %.1f us, client %.1f us" % (
    fio_cpu, (p1[spid] - p0[spid]) / hz * 1e6 / nio, (p1[cpid] - p0[cpid]) / hz * 1e6 / nio))
a, b = json.load(open(f"{tmp}/t0.json")), json.load(open(f"{tmp}/t1.json"))
mid = iops * (b["time"] - a["time"])	# each snapshot's time is taken as it starts reading
print(f"per thread, 3 s mid-run (about {mid:.0f} requests): CPU us, voluntary, involuntary switches per request")
for pid, name in ((spid, "server"), (cpid, "client")):
    rows = []
    for t, v in b[pid].items():
        o = a[pid].get(t, [v[0], 0, 0, 0])
        rows.append((v[0], t, (v[1] - o[1]) / 1e3 / mid, (v[2] - o[2]) / mid, (v[3] - o[3]) / mid))
    rows.sort(key=lambda r: -r[2])
    big = [r for r in rows if r[2] >= 1.0]
    rest = [r for r in rows if r[2] < 1.0]
    for c, t, cpu, vol, inv in big:
        print(f"  {name:6s} {c:14s} {t:>7s}  {cpu:7.1f}  {vol:5.2f}  {inv:5.2f}")
    if rest:
        print(f"  {name:6s} {len(rest):3d} others      {sum(r[2] for r in rest):7.1f}  "
              f"{sum(r[3] for r in rest):5.2f}  {sum(r[4] for r in rest):5.2f}")
def load(f):
    r = {}
    for l in open(f):
        p = l.split()
        if len(p) == 2 and p[1].isdigit():
            r[p[0]] = r.get(p[0], 0) + int(p[1])
    return r
keys = ["tx_packets", "rx_packets", "tx_gso_sends", "rx_app_datagrams", "rx_thread_wakes",
        "thread_wakes", "acks_sent", "acks_deferred", "retransmits"]
for x, name in (("s", "server"), ("c", "client")):
    s0, s1 = load(f"{tmp}/st0.{x}"), load(f"{tmp}/st1.{x}")
    print(f"softrdma {name} per request: " +
          " ".join(f"{k} {(s1.get(k, 0) - s0.get(k, 0)) / nio:.2f}" for k in keys))
EOP
if [ "$SWITCHES" = 1 ]; then
	echo "where threads slept (sched_switch, state S/D), per request, top 20:"
	perf script -i "$tmp/perf.data" 2>/dev/null | python3 -c '
import collections, re, sys
nio = float(sys.argv[1]); cnt = collections.Counter(); cur = None; fr = []
def flush():
    if cur and cur[1] != "R":
        user = [f for f in fr if not f.endswith("[kernel.kallsyms])")]
        key = " <- ".join(re.sub(r"\+0x[0-9a-f]+", "", f.split(" ", 1)[1].rsplit(" (", 1)[0])
                          for f in user[:4])
        cnt[(cur[0], key)] += 1
for line in sys.stdin:
    line = line.rstrip("\n")
    if "sched:sched_switch" in line:
        flush(); fr = []
        m = re.search(r"prev_comm=(\S+) prev_pid=\d+ prev_prio=\d+ prev_state=(\S+)", line)
        cur = (m.group(1), m.group(2)[0]) if m else None
    elif line.strip():
        fr.append(line.strip())
flush()
for (c, k), n in cnt.most_common(20):
    print(f"  {n / nio:6.3f} {c:12s} {k}")
' "$(python3 -c "import json; j=json.load(open('$tmp/fio.json'))['jobs'][0]; d=j['read'] if j['read']['io_bytes'] else j['write']; print(d['total_ios'])")"
fi
