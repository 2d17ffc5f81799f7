#!/usr/bin/env python3
"""bench/report.py: the markdown table and the PNG plot of one bench/run.

    report.py RAW.tsv [--png FILE.png --gnuplot-dir DIR] [--meta key=value ...]  > FILE.md

RAW.tsv has one line per single measurement: scenario, tool, metric, size, rep, value ("NA":
the run failed). Every figure reported is the median of the repetitions, with their spread
(min..max); a ratio is softrdma's median over the anchor's median. Standard library only.
"""
import argparse
import collections
import os
import statistics
import subprocess
import sys

TOOLS = {
    "softrdma": "softrdma (perftest ib_write_*)",
    "softrdma-busy": "softrdma busy-poll",
    "softrdma-read": "softrdma (perftest ib_read_bw)",
    "softrdma-send": "softrdma (perftest ib_send_bw)",
    "softrdma-1q": "softrdma, 1 QP, run right before the several-QP runs",
    "softrdma-q4": "softrdma, 4 QPs (ib_write_bw -q 4)",
    "softrdma-2p": "softrdma, two pairs of processes at once",
    "ucx-tcp": "UCX tcp",
    "ucx-cma": "UCX cma",
    "ucx-posix": "UCX posix",
    "fi-tcp": "libfabric tcp",
    "fi-udp-rxd": "libfabric udp;ofi_rxd",
    "iperf3": "iperf3 TCP",
    "memcpy": "memcpy",
    "udp-spin": "UDP ping-pong, spinning",
    "udp-block": "UDP ping-pong, blocking",
}
SCEN = {"loopback": "loopback (two processes, 127.x)",
        "netns": "two network namespaces, veth pair"}


def size_str(n):
    n = int(n)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return "%d MiB" % (n >> 20)
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return "%d KiB" % (n >> 10)
    return "%d B" % n


def num(v):
    if v is None:
        return "-"
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    if v >= 1:
        return "%.2f" % v
    return "%.3g" % v


class Stat:
    def __init__(self, values, fails):
        self.values = sorted(values)
        self.fails = fails

    @property
    def ok(self):
        return bool(self.values)

    @property
    def med(self):
        return statistics.median(self.values) if self.values else None

    def cell(self):
        """median [min..max], and how many runs failed."""
        if not self.values:
            return "failed" if self.fails else "-"
        s = num(self.med)
        if len(self.values) > 1:
            s += " [%s..%s]" % (num(self.values[0]), num(self.values[-1]))
        if self.fails:
            s += " (%d failed)" % self.fails
        return s


def load(path):
    data = collections.defaultdict(lambda: ([], 0))
    with open(path) as f:
        next(f)
        for line in f:
            scen, tool, metric, size, _rep, value = line.rstrip("\n").split("\t")
            vals, fails = data[(scen, tool, metric, int(size))]
            if value in ("NA", ""):
                data[(scen, tool, metric, int(size))] = (vals, fails + 1)
            else:
                vals.append(float(value))
    return {k: Stat(*v) for k, v in data.items()}


def ratio(a, b):
    if not a or not b or not a.ok or not b.ok or b.med == 0:
        return None
    return a.med / b.med


def rstr(r):
    return "-" if r is None else "%.2fx" % r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--png")
    ap.add_argument("--gnuplot-dir")
    ap.add_argument("--meta", action="append", default=[])
    args = ap.parse_args()
    meta = dict(m.split("=", 1) for m in args.meta)
    S = load(args.raw)
    scens = [s for s in ("loopback", "netns") if any(k[0] == s for k in S)]
    reps = max((len(v.values) + v.fails for v in S.values()), default=0)

    def get(scen, tool, metric, size):
        return S.get((scen, tool, metric, size))

    def sizes(scen, metric, tools):
        return sorted({k[3] for k in S if k[0] == scen and k[2] == metric and k[1] in tools})

    out = []
    w = out.append
    w("# softrdma side by side, %s" % meta.get("date", "?"))
    w("")
    w("`%s` at commit %s, %s, %s repetition(s) interleaved (every tool once per repetition);"
      " took %s." % (meta.get("command", "bench/run"), meta.get("commit", "?"),
                     meta.get("machine", "?"), reps, meta.get("duration", "?")))
    w("%s. %s." % (meta.get("load", ""), meta.get("versions", "")))
    try:
        load0 = float(meta.get("load", "").split()[2])
        cores = int(meta.get("machine", "0").split()[0])
    except (IndexError, ValueError):
        load0, cores = 0, 0
    if cores and load0 > 0.5 * cores:
        w("")
        w("**Measured on a loaded machine** (load average %.1f on %d cores when it started): "
          "other programs were competing for the CPUs, every figure is noisy, and tools that "
          "spin suffer most. The ratios compare tools measured in the same minutes." %
          (load0, cores))
    w("")
    w("Every figure: median of the repetitions [min..max]; a ratio is softrdma's median over"
      " the anchor's. Bandwidth in MiB/s (2^20 bytes, as perftest and ucx_perftest print it),"
      " latency in microseconds, half a round trip (as ib_write_lat, ucx_perftest put_lat and"
      " fi_pingpong print it). netns: veth MTU %s, softrdma bound to the veth"
      " (SOFTRDMA_NETDEV). Busy-poll mode: SOFTRDMA_BUSY_POLL_US=%s." %
      (meta.get("veth_mtu", "?"), meta.get("busy_poll_us", "?")))
    if meta.get("softrdma_env"):
        w("")
        w("softrdma's own settings for this run (every softrdma process had them): `%s`."
          % meta["softrdma_env"])
        if "SOFTRDMA_CRC_ENGINE=" in meta["softrdma_env"]:
            w("The ICRC's CRC engine is capped (`--crc-engine`): these figures stand for a CPU"
              " whose best engine is that one (same results, different speed), measured on the"
              " CPU named above.")
    if meta.get("fails", "0") != "0":
        w("")
        w("%s single run(s) failed (shown per cell); see the printed log of the run." %
          meta["fails"])

    # --- the targets of the perftest issue
    w("")
    w("## Targets")
    w("")
    w("| figure | softrdma | anchor | ratio | target | |")
    w("|---|---:|---:|---:|---|---|")
    MB = 1 << 20
    targets = []
    for scen in scens:
        sc = "netns" if scen == "netns" else "loopback"
        if scen == "loopback":
            targets += [
                ("1 MiB WRITE BW vs UCX tcp put_bw, " + sc, get(scen, "softrdma", "bw", MB),
                 get(scen, "ucx-tcp", "bw", MB), ">=", 2.0),
                ("1 MiB WRITE BW vs UCX cma put_bw, " + sc, get(scen, "softrdma", "bw", MB),
                 get(scen, "ucx-cma", "bw", MB), ">=", 1.0),
            ]
        else:
            # Between the namespaces the udp-speed issue's targets (1.5x one iperf3 stream
            # and 1.5x UCX tcp at 64 KiB and 1 MiB) replace the perftest issue's 1.0x.
            for size in (64 << 10, MB):
                targets += [
                    ("%s WRITE BW vs iperf3 TCP (one stream, same write size), same veth"
                     % size_str(size), get(scen, "softrdma", "bw", size),
                     get(scen, "iperf3", "bw", size), ">=", 1.5),
                    ("%s WRITE BW vs UCX tcp put_bw, %s" % (size_str(size), sc),
                     get(scen, "softrdma", "bw", size), get(scen, "ucx-tcp", "bw", size),
                     ">=", 1.5),
                ]
            q1 = get(scen, "softrdma-1q", "bw", 64 << 10)
            one_qp = ((q1, " (run right before)") if q1
                      else (get(scen, "softrdma", "bw", 64 << 10), ""))
            targets += [
                ("1 MiB READ BW (ib_read_bw) vs 1 MiB WRITE BW, " + sc,
                 get(scen, "softrdma-read", "bw", MB), get(scen, "softrdma", "bw", MB), ">=", 0.8),
                ("1 MiB SEND BW (ib_send_bw) vs 1 MiB WRITE BW, " + sc,
                 get(scen, "softrdma-send", "bw", MB), get(scen, "softrdma", "bw", MB), ">=", 0.8),
                # Several QPs together reach at least what one does (udp-speed), held against
                # one QP measured right before them (softrdma-1q; runs before it have only the
                # size sweep's): a stream here lands in a fast or a slow mode of the host for
                # minutes at a time (bench/README.md, "why one QP is the ceiling").
                ("64 KiB WRITE BW, 4 QPs (ib_write_bw -q 4) vs 1 QP%s, %s" % (one_qp[1], sc),
                 get(scen, "softrdma-q4", "bw", 64 << 10), one_qp[0], ">=", 1.0),
                ("64 KiB WRITE BW, two pairs of processes at once, each its own QP (sum) vs one "
                 "pair%s, %s" % (one_qp[1], sc), get(scen, "softrdma-2p", "bw", 64 << 10),
                 one_qp[0], ">=", 1.0),
            ]
        targets += [
            ("8 B WRITE latency, busy-poll (median) vs spinning UDP ping-pong (median), " + sc,
             get(scen, "softrdma-busy", "lat_median", 8), get(scen, "udp-spin", "lat_median", 8),
             "<=", 1.2),
            ("8 B WRITE latency, default mode (mean) vs UCX tcp put_lat (mean), " + sc,
             get(scen, "softrdma", "lat_mean", 8), get(scen, "ucx-tcp", "lat_mean", 8), "<", 1.0),
            ("64 B message rate (Mmsg/s) vs UCX tcp put_bw 64 B, " + sc,
             get(scen, "softrdma", "rate", 64), get(scen, "ucx-tcp", "rate", 64), ">=", 5.0),
        ]
        # No size from 4 KiB up slower than a smaller one (udp-speed): the worst size from
        # 4 KiB against the best smaller one of any size (at a path MTU of 1024, 1 KiB WRITEs
        # batch where 4 KiB ones did not), both softrdma's ib_write_bw medians.
        bw = [(n, get(scen, "softrdma", "bw", n)) for n in sizes(scen, "bw", ["softrdma"])]
        bw = [(n, st) for n, st in bw if st and st.ok]
        worst = None
        for i in range(1, len(bw)):
            n, st = bw[i]
            if n < 4096:
                continue
            m, best = max(bw[:i], key=lambda x: x[1].med)
            if worst is None or st.med / best.med < worst[0]:
                worst = (st.med / best.med, n, st, m, best)
        if worst:
            targets.append(("no dip: %s WRITE BW (the worst size from 4 KiB) vs %s (the best "
                            "smaller one), %s" % (size_str(worst[1]), size_str(worst[3]), sc),
                            worst[2], worst[4], ">=", 1.0))
    for name, a, b, op, goal in targets:
        r = ratio(a, b)
        if r is None:
            verdict = "not measured"
        else:
            cmp = {">=": lambda x: x >= goal, "<=": lambda x: x <= goal, "<": lambda x: x < goal}[op]
            verdict = "**met**" if cmp(r) else "**not met**"
            # Not met by the medians, but the spreads reach the goal: the pairing of the
            # repetitions most in softrdma's favour (its best against the anchor's worst) meets
            # it. Such a miss is not told apart from the goal by this run (a plateau of sizes,
            # two figures that should be equal); bench/README.md, "Reading the figures".
            if not cmp(r) and len(a.values) > 1 and len(b.values) > 1:
                # (a repetition that read 0, a stall, gives no best pairing: no division by it)
                den = b.values[0] if op == ">=" else b.values[-1]
                best = (a.values[-1] if op == ">=" else a.values[0]) / den if den else None
                if best is not None and cmp(best):
                    verdict += " (inside the spread: %.2fx at best)" % best
        w("| %s | %s | %s | %s | %s %.1fx | %s |" % (
            name, a.cell() if a else "-", b.cell() if b else "-", rstr(r), op, goal, verdict))

    # --- bandwidth
    bw_tools = ["softrdma", "ucx-tcp", "ucx-cma", "ucx-posix", "iperf3", "memcpy"]
    for scen in scens:
        present = [t for t in bw_tools if any(k[0] == scen and k[1] == t and k[2] == "bw" for k in S)]
        w("")
        w("## Bandwidth, MiB/s: %s" % SCEN[scen])
        w("")
        hdr = {"softrdma": "softrdma ib_write_bw", "ucx-tcp": "UCX tcp put_bw (zcopy)",
               "ucx-cma": "UCX cma put_bw (zcopy)", "ucx-posix": "UCX posix put_bw (bcopy)",
               "iperf3": "iperf3 TCP, 1 stream", "memcpy": "memcpy, out of cache"}
        w("| size | " + " | ".join(hdr[t] for t in present) + " |")
        w("|---:|" + "---:|" * len(present))
        for size in sizes(scen, "bw", present):
            sr = get(scen, "softrdma", "bw", size)
            cells = []
            for t in present:
                st = get(scen, t, "bw", size)
                if st is None:
                    cells.append("")
                elif t == "softrdma":
                    cells.append(st.cell())
                else:
                    r = ratio(sr, st)
                    cells.append(st.cell() + ("" if r is None else " (%s)" % rstr(r)))
            w("| %s | %s |" % (size_str(size), " | ".join(cells)))
        w("")
        w("In parentheses: softrdma / that anchor at the same size.")

    # --- message rate
    w("")
    w("## 64-byte message rate, million messages/s")
    w("")
    w("| scenario | softrdma ib_write_bw -s 64 | UCX tcp put_bw -s 64 | ratio |")
    w("|---|---:|---:|---:|")
    for scen in scens:
        a, b = get(scen, "softrdma", "rate", 64), get(scen, "ucx-tcp", "rate", 64)
        w("| %s | %s | %s | %s |" % (scen, a.cell() if a else "-", b.cell() if b else "-",
                                      rstr(ratio(a, b))))

    # --- latency
    lat_tools = ["softrdma", "softrdma-busy", "ucx-tcp", "ucx-cma", "ucx-posix", "fi-tcp",
                 "fi-udp-rxd", "udp-spin", "udp-block"]
    for scen in scens:
        w("")
        w("## Latency, microseconds (half round trip): %s" % SCEN[scen])
        w("")
        w("| tool | statistic | " + " | ".join(size_str(s) for s in sizes(scen, "lat_mean", lat_tools)) + " |")
        szs = sizes(scen, "lat_mean", lat_tools)
        w("|---|---|" + "---:|" * len(szs))
        for t in lat_tools:
            for metric, label in (("lat_median", "median"), ("lat_mean", "mean")):
                if not any(k[0] == scen and k[1] == t and k[2] == metric for k in S):
                    continue
                cells = []
                for size in szs:
                    st = get(scen, t, metric, size)
                    if st is None:
                        cells.append("")
                        continue
                    c = st.cell()
                    if not t.startswith("softrdma"):
                        r = ratio(get(scen, "softrdma", metric, size), st)
                        if r is not None:
                            c += " (%s)" % rstr(r)
                    cells.append(c)
                w("| %s | %s | %s |" % (TOOLS[t], label, " | ".join(cells)))
        w("")
        w("In parentheses: softrdma (default mode) / that anchor, same statistic and size."
          " UCX and fi_pingpong print only a mean.")

    w("")
    w("Tools: perftest `ib_write_bw -D %s`, `ib_write_lat`, `ib_read_bw` and `ib_send_bw` (1 MiB,"
      " netns); `ucx_perftest -t put_bw|put_lat -x tcp"
      "|cma|posix`; `fi_pingpong -p tcp -e msg`, `fi_pingpong -p 'udp;ofi_rxd' -e rdm`; `iperf3 -l"
      " SIZE`; bench/probes/udp_pingpong.c, bench/probes/memcpy_bw.c. Exact command lines:"
      " bench/README.md." % meta.get("dur", "?"))
    if args.png:
        w("")
        w("![bandwidth and latency vs message size](%s)" % os.path.basename(args.png))
    sys.stdout.write("\n".join(out) + "\n")

    if args.png:
        plot(S, scens, args.png, args.gnuplot_dir or os.path.dirname(args.png), meta)


def plot(S, scens, png, d, meta):
    """2 x N grid: bandwidth (top) and latency (bottom) against message size, one column per
    scenario; each point a median, bars min..max."""
    series = {
        "bw": [("softrdma", "bw", "softrdma ib\\_write\\_bw"), ("ucx-tcp", "bw", "UCX tcp put"),
               ("ucx-cma", "bw", "UCX cma put"), ("ucx-posix", "bw", "UCX posix put"),
               ("iperf3", "bw", "iperf3 TCP"), ("memcpy", "bw", "memcpy")],
        "lat": [("softrdma", "lat_mean", "softrdma ib\\_write\\_lat"),
                ("softrdma", "lat_median", "softrdma ib\\_write\\_lat, median"),
                ("softrdma-busy", "lat_mean", "softrdma busy-poll"),
                ("ucx-tcp", "lat_mean", "UCX tcp put"), ("ucx-cma", "lat_mean", "UCX cma put"),
                ("ucx-posix", "lat_mean", "UCX posix put"),
                ("fi-tcp", "lat_mean", "libfabric tcp"),
                ("fi-udp-rxd", "lat_mean", "libfabric udp;rxd"),
                ("udp-spin", "lat_mean", "UDP ping-pong spin"),
                ("udp-block", "lat_mean", "UDP ping-pong block")],
    }
    color = {"softrdma": "#d62728", "softrdma-busy": "#ff7f0e", "ucx-tcp": "#1f77b4",
             "ucx-cma": "#17becf", "ucx-posix": "#9467bd", "fi-tcp": "#2ca02c",
             "fi-udp-rxd": "#8c564b", "iperf3": "#2ca02c", "memcpy": "#7f7f7f",
             "udp-spin": "#7f7f7f", "udp-block": "#bcbd22"}
    gp = ["set terminal pngcairo size 1400,1000 font 'sans,10'",
          "set output '%s'" % png,
          "set multiplot layout 2,%d title 'softrdma side by side, %s (median, bars min..max)'"
          % (len(scens), meta.get("date", "")),
          "set logscale xy 2", "set logscale y 10", "set format y '10^{%L}'", "set grid",
          "set key outside right top vertical spacing 1.1 font ',9'",
          "set xlabel 'message size'"]
    for kind in ("bw", "lat"):
        metrics = {m for _, m, _ in series[kind]}
        allsz = sorted({k[3] for k in S if k[2] in metrics and S[k].ok})
        if allsz:
            gp.append("set xrange [%g:%g]" % (allsz[0] / 1.5, allsz[-1] * 2))
            gp.append("set xtics (%s)" % ", ".join(
                "'%s' %d" % (size_str(s).replace(" ", ""), s) for s in allsz))
        for scen in scens:
            plots = []
            single = 0
            for tool, metric, label in series[kind]:
                pts = sorted((k[3], v) for k, v in S.items()
                             if k[0] == scen and k[1] == tool and k[2] == metric and v.ok)
                if not pts:
                    continue
                fn = os.path.join(d, "plot.%s.%s.%s.%s.dat" % (scen, kind, tool, metric))
                # Tools measured at one size only are spread a little sideways, to be seen.
                dx = 1.0
                if len(pts) == 1:
                    dx = 1.12 ** single
                    single += 1
                with open(fn, "w") as f:
                    for size, st in pts:
                        f.write("%g %g %g %g\n" % (size * dx, st.med, st.values[0], st.values[-1]))
                style = "yerrorlines" if len(pts) > 1 else "yerrorbars"
                dash = " dt 2" if metric == "lat_median" else ""
                plots.append("'%s' using 1:2:3:4 with %s lw 2%s pt 7 ps 0.8 lc rgb '%s' title '%s'"
                             % (fn, style, dash, color[tool], label))
            if kind == "bw":
                gp.append("set ylabel 'MiB/s'")
                gp.append("set title 'bandwidth, %s'" % scen)
            else:
                gp.append("set ylabel 'microseconds, half round trip (mean; dashed: median)'")
                gp.append("set title 'latency, %s'" % scen)
            if plots:
                gp.append("plot " + ", \\\n  ".join(plots))
            else:
                gp.append("set multiplot next")
    gp.append("unset multiplot")
    script = os.path.join(d, "plot.gp")
    with open(script, "w") as f:
        f.write("\n".join(gp) + "\n")
    r = subprocess.run(["gnuplot", script], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.stderr.write("report.py: gnuplot failed:\n" + r.stderr)


if __name__ == "__main__":
    main()
