#!/usr/bin/env bash
# bench/rtrs.sh: RTRS (ulp/rtrs) IOPS and bandwidth next to perftest on the same softrdma, in
# one run; prints a markdown table of medians and ratios (docs: bench/README.md).
#
#   bench/rtrs.sh [-t SECS] [-n REPS] [--only "SCENARIOS"] [--link-mbit N] [--cgroup 1] [-o FILE.md]
#     -t SECS   seconds of each measurement (default 5; after a warm-up of min(1, SECS/5) s)
#     -n REPS   repetitions, interleaved (default 3); the table takes medians
#     --only    scenarios, of loopback, netns, netns-link (default: loopback, then netns;
#               the netns ones need root)
#     --link-mbit N   adds the scenario netns-link: the two veth pairs each shaped to a link of
#               N Mbit/s (tc tbf on both ends of each pair); 0 = not (the default; with
#               --only netns-link and no --link-mbit: 1000)
#     --cgroup 1  every process in a CPU cgroup of high weight made for the run (as
#               bench/rtrs-ab.sh --cgroup): on a machine shared with other work
#     -o FILE   also write the table there
#   Env: BUILD (default build), RESULTS (default bench/results: rtrs-<date>.md and .tsv)
#
# RTRS points (rtrs-test bench against rtrs-test server -z -c 262144: the server answers from
# its event thread without touching a disk, chunks of 256 KiB so that 128 KiB fits a request):
#   4 KiB WRITEs at queue depth 1, 32 and 128 (IOPS), 128 KiB WRITEs and READs at depth 32
#   (MiB/s), each with one path and with two, always_invalidate on and off (two servers).
# Ceiling, same softrdma, same place, same minutes: perftest ib_write_bw -s 4096 (MsgRate) and
# -s 131072 (BW average), ib_write_lat -s 4096 (t_typical). Scenarios: loopback (two paths =
# two ports of 127.0.0.1) and two network namespaces joined by two veth pairs (MTU 9000; made
# here with tests/integration/lib.sh's sr_netns_two_pairs and removed on exit, whatever happens).
# Unshaped veth has no link speed: between the namespaces a stream is bound by the CPU, and a
# second path adds threads, not capacity. netns-link (--link-mbit N) models what multipath is
# for, two hosts joined by two links of finite speed: namespaces of their own whose two veth
# pairs each carry a token bucket (tc tbf, rate N Mbit/s, both directions); there, with
# always_invalidate on, 128 KiB WRITE and READ and 4 KiB depth 32 with one path and two
# (min-inflight, and round-robin for WRITE and 4 KiB), perftest's 128 KiB ib_write_bw over one
# shaped link (what a plain RC stream gets from it), and per point each path's share of the
# requests, both sides' softrdma retransmissions, the server's duplicates (resends of packets
# that had arrived), the client's local ACK timeouts and the shapers' drops. Both scenarios
# are printed, and the last line gives two paths / one for each: the unshaped figures stay.
# One softrdma process pair at a time (perftest, then the always_invalidate-on server and its
# clients, then the off one): in the namespaces, processes on the same veth address would share
# its UDP port. Every program runs under timeout. A benchmark: nothing here fails on a slow figure.
set -uo pipefail

# ROOT BUILD SR RESULTS VETH_MTU, bench_args bench_root bench_build bench_need bench_have
. "$(dirname "$0")/lib.sh"
DUR=5
REPS=3
ONLY="loopback netns"
OUT=""
LINK_MBIT=""
CGROUP=0
bench_args 16 -t DUR --link-mbit LINK_MBIT --cgroup CGROUP -- "$@"
if [[ " $ONLY " == *" netns-link "* ]]; then
	[ -n "$LINK_MBIT" ] && [ "$LINK_MBIT" != 0 ] || LINK_MBIT=1000
elif [ -n "$LINK_MBIT" ] && [ "$LINK_MBIT" != 0 ]; then
	if [ "$(id -u)" = 0 ]; then ONLY+=" netns-link"
	else echo "bench/rtrs.sh: not root: no netns-link scenario" >&2; fi
fi
[[ -z "$LINK_MBIT" || "$LINK_MBIT" =~ ^[0-9]+$ ]] || bench_usage 16
TBF_BURST=${TBF_BURST:-65536}	# bytes of the token bucket (at least a GSO burst of jumbo frames)
TBF_LATENCY=${TBF_LATENCY:-20ms}	# the longest a packet may wait in the shaper's queue

RT=$BUILD/bin/rtrs-test
[ -x "$RT" ] || { echo "bench/rtrs.sh: no $RT (make build)" >&2; exit 1; }
for c in ib_write_bw ib_write_lat timeout ss ip python3 $([ -n "$LINK_MBIT" ] && echo tc); do
	command -v $c >/dev/null || { echo "bench/rtrs.sh: needs $c (perftest, iproute2, python3)" >&2; exit 1; }
done

# the test library: SR, SR_TMP, exit trap (every background timeout killed, namespaces removed),
# sr_free_port, sr_wait_listen, sr_netns_two_pairs
export SR_BUILD_DIR=$BUILD SR_SOURCE_DIR=$ROOT
# shellcheck source=../tests/integration/lib.sh
. "$ROOT/tests/integration/lib.sh"
SR_KEEP_TMP=${SR_KEEP_TMP:-0}
TO=$(awk -v d="$DUR" 'BEGIN { printf "%d", d + 30 }')	# timeout of one measurement

# --cgroup 1: this script moves into a CPU cgroup of high weight (its children follow) and back
# out at exit, so that the cgroup, empty, can be removed (the same as bench/rtrs-ab.sh's)
CGINFO=""
if [ "$CGROUP" = 1 ]; then
	bench_root "a cgroup"
	. "$ROOT/bench/cgroup.sh"
	bench_cgroup rtrs-bench
	sr_at_exit bench_cgroup_cleanup
fi

STAMP=$(date -u +%Y-%m-%d-%H%M)
mkdir -p "$RESULTS"
TSV=$RESULTS/rtrs-$STAMP.tsv
printf "scenario\tconfig\tmetric\trep\tvalue\n" >"$TSV"
rec() {	# CONFIG METRIC VALUE (empty: failed) [LOG]
	local v=${3:-NA}
	printf "%s\t%s\t%s\t%s\t%s\n" "$SCEN" "$1" "$2" "$REP" "$v" >>"$TSV"
	echo "  [$SCEN rep $REP] $1 $2: $v${4:+$([ "$v" = NA ] && echo " ($(tail -c 200 "$4" | tr '\n' ' '))")}" >&2
}

# --- places: how to run a server (side A) and a client (side B) --------------------------------
setup() {	# SCENARIO: sets A, B (command prefixes), EA, EB, HOST1, HOST2, SRC1, SRC2 (netns-link: LINKS)
	local scen=$1
	case $scen in
	loopback)
		A=() B=()
		EA=() EB=()
		HOST1=127.0.0.1 HOST2=127.0.0.1 SRC1="" SRC2=""
		;;
	netns | netns-link)
		sr_netns_two_pairs "$([ "$scen" = netns ] && echo rtb || echo rtl)" || return 1
		local d
		for d in "$SR_NSA $SR_VA" "$SR_NSA $SR_VA2" "$SR_NSB $SR_VB" "$SR_NSB $SR_VB2"; do
			set -- $d
			ip -n "$1" link set "$2" mtu 9000
		done
		A=(ip netns exec "$SR_NSA") B=(ip netns exec "$SR_NSB")
		EA=(SOFTRDMA_NETDEV="$SR_VA,$SR_VA2") EB=(SOFTRDMA_NETDEV="$SR_VB,$SR_VB2")
		HOST1=$SR_NET.1 HOST2=$SR_NET2.1 SRC1=@$SR_NET.2 SRC2=@$SR_NET2.2
		[ "$scen" = netns ] && return 0
		LINKS=("$SR_NSA $SR_VA" "$SR_NSA $SR_VA2" "$SR_NSB $SR_VB" "$SR_NSB $SR_VB2")
		for d in "${LINKS[@]}"; do
			set -- $d
			ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "${LINK_MBIT}mbit" \
				burst "$TBF_BURST" latency "$TBF_LATENCY" || return 1
		done
		echo "  [netns-link] every veth end: $(ip netns exec "$SR_NSA" tc qdisc show dev "$SR_VA")" >&2
		;;
	esac
}
ns_of_a() { [ ${#A[@]} -gt 0 ] && echo "$SR_NSA" || echo ""; }
srv_counts() {	# "DUPS REXMITS" of the RTRS server's softrdma so far (all devices): duplicate
	# request packets received (resends of packets that had arrived, not of lost ones), and
	# request packets it sent again (the data of READs, the answers)
	local p
	p=$(pgrep -f "^$RT server -l $HOST1:$PORT " | head -1)
	[ -n "$p" ] && "$SR" stat "$p" 2>/dev/null |
		awk '$1 == "dup_requests" { d += $2 } $1 == "retransmits" { r += $2 } END { print d + 0, r + 0 }'
}
shaper_drops() {	# the packets the shapers of netns-link dropped so far, all four ends
	local d n=0 x
	for d in "${LINKS[@]}"; do
		set -- $d
		x=$(ip netns exec "$1" tc -s qdisc show dev "$2" | sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' | head -1)
		n=$((n + ${x:-0}))
	done
	echo $n
}

# --- RTRS ---------------------------------------------------------------------------------------
start_rtrs_server() {	# AI: one server (always_invalidate AI) on both paths' addresses (loopback:
	# two ports of 127.0.0.1; netns: one port on each pair). One softrdma process per namespace
	# at a time: processes bound to the same veth address would share its UDP port.
	local ai=$1
	PORT=$(sr_free_port "$(ns_of_a)")
	PORT2=$PORT
	[ "$SCEN" = loopback ] && PORT2=$(sr_free_port)
	"${A[@]}" env "${EA[@]}" timeout -k 5 $((25 * (DUR + 8) + 60)) "$SR" run -- \
		"$RT" server -l "$HOST1:$PORT" -l "$HOST2:$PORT2" -z -c 262144 -i "$ai" \
		-t $((25 * (DUR + 8) + 40)) >"$SR_TMP/srv-$SCEN-$ai.log" 2>&1 </dev/null &
	SPID=$!
	SR_BG+=($SPID)
	sr_wait_listen "$PORT2" "$SPID" "$(ns_of_a)" 20 || { echo "rtrs server did not start" >&2; return 1; }
}
stop_rtrs_server() {
	kill -TERM "$SPID" 2>/dev/null
	wait "$SPID" 2>/dev/null
}
rtrs_point() {	# AI PATHS[:POLICY] NAME ARGS...: one rtrs-test bench run against the running server
	# (POLICY rr|mi|ml, default min-inflight). Records the point's figure and, under NAME_share0,
	# NAME_rexmit, NAME_dups, NAME_srexmit, NAME_ackto and NAME_drops, path 0's share of the
	# requests (two paths), the client's softrdma retransmissions, the server's duplicate
	# request packets (resent packets that had arrived) and the server's own retransmissions
	# per 1000 requests, the client's local ACK timeouts
	# (retry_timeouts: 67 ms and more without an ACK) and the shapers' drops (netns-link)
	local ai=$1 np=${2%%:*} pol= name=$3 port=$PORT port2=$PORT2 log=$SR_TMP/c.log st=$SR_TMP/c.stat
	[[ $2 == *:* ]] && pol=${2#*:}
	shift 3
	local paths=(-p "$HOST1:$port$SRC1") d0=0
	[ "$np" = 2 ] && paths+=(-p "$HOST2:$port2$SRC2")
	rm -f "$st"
	[ "$SCEN" = netns-link ] && d0=$(shaper_drops)
	local u0
	u0=$(srv_counts)
	"${B[@]}" env "${EB[@]}" SOFTRDMA_STATS_DUMP="$st" timeout -k 5 "$TO" "$SR" run -- "$RT" bench \
		"${paths[@]}" ${pol:+-P "$pol"} -T "$DUR" "$@" >"$log" 2>&1 </dev/null
	local cfg="rtrs ${np}p${pol:+ $pol} ai=$([ $ai = 1 ] && echo on || echo off)"
	case $name in
	bw*) rec "$cfg" "$name" "$(sed -n 's/.* mib_s=\([0-9.]*\) errors=0.*/\1/p' "$log")" "$log" ;;
	*) rec "$cfg" "$name" "$(sed -n 's/.* iops=\([0-9]*\) mib_s=.* errors=0.*/\1/p' "$log")" "$log" ;;
	esac
	local r0 r1 rx
	r0=$(sed -n 's/.* path0_reqs=\([0-9]*\).*/\1/p' "$log")
	r1=$(sed -n 's/.* path1_reqs=\([0-9]*\).*/\1/p' "$log")
	[ -n "$r1" ] && [ $((r0 + r1)) -gt 0 ] &&
		rec "$cfg" "${name}_share0" "$(awk -v a="$r0" -v b="$r1" 'BEGIN { printf "%.3f", a / (a + b) }')"
	rx=$(awk '$2 == "retransmits" { n += $3 } END { print n + 0 }' "$st" 2>/dev/null)
	rec "$cfg" "${name}_ackto" "$(awk '$2 == "retry_timeouts" { n += $3 } END { print n + 0 }' "$st" 2>/dev/null)"
	[ -n "$r0" ] && [ $((r0 + ${r1:-0})) -gt 0 ] &&
		rec "$cfg" "${name}_rexmit" "$(awk -v x="$rx" -v n=$((r0 + ${r1:-0})) 'BEGIN { printf "%.2f", 1000 * x / n }')"
	local u1
	u1=$(srv_counts)
	if [ -n "$u0" ] && [ -n "$u1" ] && [ -n "$r0" ] && [ $((r0 + ${r1:-0})) -gt 0 ]; then
		set -- $u0 $u1
		rec "$cfg" "${name}_dups" "$(awk -v x=$(($3 - $1)) -v n=$((r0 + ${r1:-0})) 'BEGIN { printf "%.2f", 1000 * x / n }')"
		rec "$cfg" "${name}_srexmit" "$(awk -v x=$(($4 - $2)) -v n=$((r0 + ${r1:-0})) 'BEGIN { printf "%.2f", 1000 * x / n }')"
	fi
	[ "$SCEN" = netns-link ] && rec "$cfg" "${name}_drops" $(($(shaper_drops) - d0))
}

# --- perftest -----------------------------------------------------------------------------------
PT=(-d softrdma0 -x 0 -F)
perftest() {	# TOOL NAME ARGS...: server in A on HOST1's device, client in B
	local tool=$1 name=$2 p log=$SR_TMP/pt-$SCEN-$2.log; shift 2
	p=$(sr_free_port "$(ns_of_a)")
	local ea=() eb=()
	[[ $SCEN == netns* ]] && ea=(SOFTRDMA_NETDEV="$SR_VA") eb=(SOFTRDMA_NETDEV="$SR_VB")
	"${A[@]}" env "${ea[@]}" timeout -k 5 "$TO" "$SR" run -- $tool "${PT[@]}" -p "$p" "$@" \
		>"$SR_TMP/pts-$SCEN-$name.log" 2>&1 </dev/null &
	local spid=$!
	SR_BG+=($spid)
	sr_wait_listen "$p" "$spid" "$(ns_of_a)" 20 || true
	"${B[@]}" env "${eb[@]}" timeout -k 5 "$TO" "$SR" run -- $tool "${PT[@]}" -p "$p" "$@" "$HOST1" \
		>"$log" 2>&1 </dev/null
	wait "$spid" 2>/dev/null
	local size=$2
	case $name in
	rate4k) rec perftest "$name" "$(awk -v s=4096 '$1 == s && NF >= 5 {printf "%.0f", $5 * 1e6}' "$log")" "$log" ;;
	bw*) rec perftest "$name" "$(awk -v s=131072 '$1 == s && NF >= 5 {print $4}' "$log")" "$log" ;;
	lat4k) rec perftest "$name" "$(awk -v s=4096 '$1 == s && NF >= 6 {print $5}' "$log")" "$log" ;;
	esac
	: "$size"
}

# --- the run ------------------------------------------------------------------------------------
T0=$SECONDS
LOAD0=$(cut -d' ' -f1 /proc/loadavg)
for SCEN in $ONLY; do
	REP=0
	setup "$SCEN" || { echo "bench/rtrs.sh: $SCEN: could not set up" >&2; continue; }
	for REP in $(seq "$REPS"); do
		if [ "$SCEN" = netns-link ]; then
			# links of LINK_MBIT: what one link gives a plain RC stream, then RTRS over
			# one link and two, always_invalidate on (the default)
			perftest ib_write_bw bw128k -s 131072 -D "$DUR"
			start_rtrs_server 1 || continue
			for np in 1 2 2:rr; do
				rtrs_point 1 $np bw128k_write -S 131072 -D 32
				[ $np = 2:rr ] || rtrs_point 1 $np bw128k_read -S 131072 -D 32 -r
				rtrs_point 1 $np iops4k_qd32 -S 4096 -D 32
			done
			stop_rtrs_server
			continue
		fi
		perftest ib_write_bw rate4k -s 4096 -D "$DUR"
		perftest ib_write_bw bw128k -s 131072 -D "$DUR"
		perftest ib_write_lat lat4k -s 4096 -n 2000
		for ai in 1 0; do
			start_rtrs_server $ai || continue
			for np in 1 2; do
				rtrs_point $ai $np iops4k_qd1 -S 4096 -D 1
				rtrs_point $ai $np iops4k_qd32 -S 4096 -D 32
				rtrs_point $ai $np iops4k_qd128 -S 4096 -D 128
				rtrs_point $ai $np bw128k_write -S 131072 -D 32
				rtrs_point $ai $np bw128k_read -S 131072 -D 32 -r
			done
			stop_rtrs_server
		done
	done
done
LOAD1=$(cut -d' ' -f1 /proc/loadavg)
echo "bench/rtrs.sh: $((SECONDS - T0)) s; every measurement in $TSV" >&2

python3 - "$TSV" "$DUR" "$REPS" "$LOAD0" "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)" "$LOAD1" \
	"${LINK_MBIT:-0}" "$TBF_BURST" "$TBF_LATENCY" "$(nproc)" \
	"$("$ROOT/bench/cpu.sh")" "$CGINFO" <<'EOF' | tee "$RESULTS/rtrs-$STAMP.md" ${OUT:+"$OUT"}
import csv, statistics as st, sys
tsv, dur, reps, load, commit, load1, mbit, burst, tbflat, ncpu, cpu, cginfo = sys.argv[1:13]
mbit = int(mbit)
rows = list(csv.DictReader(open(tsv), delimiter="\t"))
def med(scen, cfg, metric):
    v = [float(r["value"]) for r in rows
         if r["scenario"] == scen and r["config"] == cfg and r["metric"] == metric and r["value"] != "NA"]
    n = sum(1 for r in rows if r["scenario"] == scen and r["config"] == cfg and r["metric"] == metric)
    return (st.median(v) if v else None), len(v), n
def f(x):
    return "-" if x is None else (f"{x:.0f}" if x >= 100 else f"{x:.3g}")
def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"
print(f"RTRS benchmark at {commit}: {reps} repetition(s) of {dur} s per point; load average at the start {load}, "
      f"at the end {load1}; {ncpu} CPUs ({cpu}){'; ' + cginfo if cginfo else ''}.")
print("Medians; n = successful runs / runs. IOPS for 4 KiB, MiB/s for 128 KiB.")
two = []	# (scenario, 2p/1p at 128 KiB WRITE): the summary line
def link_table(scen):
    link_bw = mbit * 1e6 / 8 / 1048576	# MiB/s of payload at the link rate
    link = {"bw128k_write": link_bw, "bw128k_read": link_bw, "iops4k_qd32": mbit * 1e6 / 8 / 4096}
    pt_bw = med(scen, "perftest", "bw128k")[0]
    print()
    print(f"### {scen}: two links of {mbit} Mbit/s")
    print()
    print(f"Models two hosts joined by two links of {mbit} Mbit/s each (multipath's case): each veth "
          f"end shaped by `tc qdisc ... tbf rate {mbit}mbit burst {burst} latency {tbflat}`, both "
          f"directions; always_invalidate on. Link rate = {link_bw:.1f} MiB/s, "
          f"{link['iops4k_qd32']:.0f} 4 KiB requests/s of payload (headers not counted). "
          f"perftest ib_write_bw 128 KiB over one shaped link: {f(pt_bw)} MiB/s ({ratio(pt_bw, link_bw)} of the link).")
    print()
    print("| point | 1 path | 2 paths (min-inflight) | 2p / 1p | 1p / link | 2p / 2 links | "
          "2 paths round-robin | path 0's share (mi, rr) | client resends / 1000 req (1p, mi, rr) | "
          "of them duplicates at the server | server resends / 1000 req (1p, mi, rr) | client ACK timeouts (1p, mi, rr) | "
          "shaper drops (1p, mi, rr) | n (1p, mi, rr) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    cfgs = ("rtrs 1p ai=on", "rtrs 2p ai=on", "rtrs 2p rr ai=on")
    for metric in ("bw128k_write", "bw128k_read", "iops4k_qd32"):
        m = [med(scen, c, metric) for c in cfgs]
        one, two_, rr = (x[0] for x in m)
        share = ", ".join(f(med(scen, c, metric + "_share0")[0]) for c in cfgs[1:])
        rex = ", ".join(f(med(scen, c, metric + "_rexmit")[0]) for c in cfgs)
        dups = ", ".join(f(med(scen, c, metric + "_dups")[0]) for c in cfgs)
        ackto = ", ".join(f(med(scen, c, metric + "_ackto")[0]) for c in cfgs)
        srex = ", ".join(f(med(scen, c, metric + "_srexmit")[0]) for c in cfgs)
        drops = ", ".join(f(med(scen, c, metric + "_drops")[0]) for c in cfgs)
        n = ", ".join(f"{x[1]}/{x[2]}" for x in m)
        print(f"| {metric} | {f(one)} | {f(two_)} | {ratio(two_, one)} | {ratio(one, link[metric])} | "
              f"{ratio(two_, 2 * link[metric])} | {f(rr)} | {share} | {rex} | {dups} | {srex} | {ackto} | {drops} | {n} |")
    on1 = med(scen, "rtrs 1p ai=on", "bw128k_write")[0]
    on2 = med(scen, "rtrs 2p ai=on", "bw128k_write")[0]
    r1 = med(scen, "rtrs 1p ai=on", "bw128k_read")[0]
    r2 = med(scen, "rtrs 2p ai=on", "bw128k_read")[0]
    q1 = med(scen, "rtrs 1p ai=on", "iops4k_qd32")[0]
    q2 = med(scen, "rtrs 2p ai=on", "iops4k_qd32")[0]
    # a ratio over a collapsed single path flatters two: each with one path's share of its link
    said = (f"128 KiB WRITE {ratio(on2, on1)} (one path at {ratio(on1, link['bw128k_write'])} of its link), "
            f"READ {ratio(r2, r1)} ({ratio(r1, link['bw128k_read'])}), 4 KiB qd32 {ratio(q2, q1)} "
            f"({ratio(q1, link['iops4k_qd32'])})")
    two.append(f"two shaped links of {mbit} Mbit/s: {said}")
    print()
    print(f"Target (issue rtrs), over links of {mbit} Mbit/s: two paths > one: {said}.")
for scen in sorted({r["scenario"] for r in rows}):
    if scen == "netns-link":
        link_table(scen)
        continue
    pt_rate = med(scen, "perftest", "rate4k")[0]
    pt_bw = med(scen, "perftest", "bw128k")[0]
    pt_lat = med(scen, "perftest", "lat4k")[0]
    print()
    print(f"### {scen}")
    print()
    print(f"perftest on the same softrdma: ib_write_bw 4 KiB {f(pt_rate)} msg/s, 128 KiB {f(pt_bw)} MiB/s; "
          f"ib_write_lat 4 KiB {f(pt_lat)} us (1 / round trip = {f(1e6 / (2 * pt_lat)) if pt_lat else '-'} /s)")
    print()
    print("| point | paths | ai on | ai off | on / off | on / perftest | n (on, off) |")
    print("|---|---|---|---|---|---|---|")
    for metric, ceil in (("iops4k_qd1", pt_lat and 1e6 / (2 * pt_lat)), ("iops4k_qd32", pt_rate),
                         ("iops4k_qd128", pt_rate), ("bw128k_write", pt_bw), ("bw128k_read", pt_bw)):
        for np in ("1p", "2p"):
            on, non, ton = med(scen, f"rtrs {np} ai=on", metric)
            off, noff, toff = med(scen, f"rtrs {np} ai=off", metric)
            print(f"| {metric} | {np[0]} | {f(on)} | {f(off)} | {ratio(on, off)} | {ratio(on, ceil)} | {non}/{ton}, {noff}/{toff} |")
    on1 = med(scen, "rtrs 1p ai=on", "bw128k_write")[0]
    on2 = med(scen, "rtrs 2p ai=on", "bw128k_write")[0]
    nolink = " (unshaped veth: no link speed, the stream is bound by the CPU)" if scen == "netns" else ""
    q1, q2 = med(scen, "rtrs 1p ai=on", "iops4k_qd32")[0], med(scen, "rtrs 2p ai=on", "iops4k_qd32")[0]
    if scen == "netns":
        two.append(f"unshaped veth pairs (bound by the CPU): 128 KiB WRITE {ratio(on2, on1)}, 4 KiB qd32 {ratio(q2, q1)}")
    print()
    print(f"Targets (issue rtrs): 128 KiB WRITE >= 0.8x ib_write_bw: {ratio(on1, pt_bw)} (1 path, ai on); "
          f"always_invalidate costs <= 20%: 128 KiB WRITE on/off {ratio(on1, med(scen, 'rtrs 1p ai=off', 'bw128k_write')[0])}, "
          f"4 KiB qd32 {ratio(q1, med(scen, 'rtrs 1p ai=off', 'iops4k_qd32')[0])}; "
          f"two paths > one{nolink}: 128 KiB WRITE 2p/1p {ratio(on2, on1)}, 4 KiB qd32 {ratio(q2, q1)}.")
if two:
    print()
    print("Two paths between the namespaces / one (ai on; target: more than one): " + "; ".join(two) + ".")
EOF
