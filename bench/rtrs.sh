#!/usr/bin/env bash
# bench/rtrs.sh: RTRS (ulp/rtrs) IOPS and bandwidth next to perftest on the same softrdma, in
# one run; prints a markdown table of medians and ratios (docs: bench/README.md).
#
#   bench/rtrs.sh [-t SECS] [-n REPS] [--only loopback|netns] [-o FILE.md]
#     -t SECS   seconds of each measurement (default 5; after a warm-up of min(1, SECS/5) s)
#     -n REPS   repetitions, interleaved (default 3); the table takes medians
#     --only    one scenario (default: loopback, then netns; netns needs root)
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
bench_args 11 -t DUR -- "$@"

RT=$BUILD/bin/rtrs-test
[ -x "$RT" ] || { echo "bench/rtrs.sh: no $RT (make build)" >&2; exit 1; }
for c in ib_write_bw ib_write_lat timeout ss ip python3; do
	command -v $c >/dev/null || { echo "bench/rtrs.sh: needs $c (perftest, iproute2, python3)" >&2; exit 1; }
done

# the test library: SR, SR_TMP, exit trap (every background timeout killed, namespaces removed),
# sr_free_port, sr_wait_listen, sr_netns_two_pairs
export SR_BUILD_DIR=$BUILD SR_SOURCE_DIR=$ROOT
# shellcheck source=../tests/integration/lib.sh
. "$ROOT/tests/integration/lib.sh"
SR_KEEP_TMP=${SR_KEEP_TMP:-0}
TO=$(awk -v d="$DUR" 'BEGIN { printf "%d", d + 30 }')	# timeout of one measurement

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
setup() {	# SCENARIO: sets A, B (command prefixes), EA, EB, HOST1, HOST2, SRC1, SRC2
	case $1 in
	loopback)
		A=() B=()
		EA=() EB=()
		HOST1=127.0.0.1 HOST2=127.0.0.1 SRC1="" SRC2=""
		;;
	netns)
		sr_netns_two_pairs rtb || return 1
		local d
		for d in "$SR_NSA $SR_VA" "$SR_NSA $SR_VA2" "$SR_NSB $SR_VB" "$SR_NSB $SR_VB2"; do
			set -- $d
			ip -n "$1" link set "$2" mtu 9000
		done
		A=(ip netns exec "$SR_NSA") B=(ip netns exec "$SR_NSB")
		EA=(SOFTRDMA_NETDEV="$SR_VA,$SR_VA2") EB=(SOFTRDMA_NETDEV="$SR_VB,$SR_VB2")
		HOST1=$SR_NET.1 HOST2=$SR_NET2.1 SRC1=@$SR_NET.2 SRC2=@$SR_NET2.2
		;;
	esac
}
ns_of_a() { [ ${#A[@]} -gt 0 ] && echo "$SR_NSA" || echo ""; }

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
rtrs_point() {	# AI PATHS NAME ARGS...: one rtrs-test bench run against the running server
	local ai=$1 np=$2 name=$3 port=$PORT port2=$PORT2 log=$SR_TMP/c.log; shift 3
	local paths=(-p "$HOST1:$port$SRC1")
	[ "$np" = 2 ] && paths+=(-p "$HOST2:$port2$SRC2")
	"${B[@]}" env "${EB[@]}" timeout -k 5 "$TO" "$SR" run -- "$RT" bench "${paths[@]}" -T "$DUR" "$@" \
		>"$log" 2>&1 </dev/null
	local cfg="rtrs ${np}p ai=$([ $ai = 1 ] && echo on || echo off)"
	case $name in
	bw*) rec "$cfg" "$name" "$(sed -n 's/.* mib_s=\([0-9.]*\) errors=0.*/\1/p' "$log")" "$log" ;;
	*) rec "$cfg" "$name" "$(sed -n 's/.* iops=\([0-9]*\) mib_s=.* errors=0.*/\1/p' "$log")" "$log" ;;
	esac
}

# --- perftest -----------------------------------------------------------------------------------
PT=(-d softrdma0 -x 0 -F)
perftest() {	# TOOL NAME ARGS...: server in A on HOST1's device, client in B
	local tool=$1 name=$2 p log=$SR_TMP/c.log; shift 2
	p=$(sr_free_port "$(ns_of_a)")
	local ea=() eb=()
	[ "$SCEN" = netns ] && ea=(SOFTRDMA_NETDEV="$SR_VA") eb=(SOFTRDMA_NETDEV="$SR_VB")
	"${A[@]}" env "${ea[@]}" timeout -k 5 "$TO" "$SR" run -- $tool "${PT[@]}" -p "$p" "$@" \
		>"$SR_TMP/s.log" 2>&1 </dev/null &
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
echo "bench/rtrs.sh: $((SECONDS - T0)) s; every measurement in $TSV" >&2

python3 - "$TSV" "$DUR" "$REPS" "$LOAD0" "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)" <<'EOF' | tee "$RESULTS/rtrs-$STAMP.md" ${OUT:+"$OUT"}
import csv, statistics as st, sys
tsv, dur, reps, load, commit = sys.argv[1:6]
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
print(f"RTRS benchmark at {commit}: {reps} repetition(s) of {dur} s per point; load average at the start {load}.")
print("Medians; n = successful runs / runs. IOPS for 4 KiB, MiB/s for 128 KiB.")
for scen in sorted({r["scenario"] for r in rows}):
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
    print()
    print(f"Targets (issue rtrs): 128 KiB WRITE >= 0.8x ib_write_bw: {ratio(on1, pt_bw)} (1 path, ai on); "
          f"always_invalidate costs <= 20%: 128 KiB WRITE on/off {ratio(on1, med(scen, 'rtrs 1p ai=off', 'bw128k_write')[0])}, "
          f"4 KiB qd32 {ratio(med(scen, 'rtrs 1p ai=on', 'iops4k_qd32')[0], med(scen, 'rtrs 1p ai=off', 'iops4k_qd32')[0])}; "
          f"two paths > one: 128 KiB WRITE 2p/1p {ratio(on2, on1)}.")
EOF
