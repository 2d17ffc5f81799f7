#!/bin/bash
# SPDX-License-Identifier: MIT
# A shared bottleneck: two softrdma flows (perftest ib_write_bw, each its own process pair and
# RC QP) and one iperf3 TCP flow at the same time, from one network namespace to another, through
# a token bucket (tc tbf) of RATE on the senders' side of the veth pair. Prints each flow's
# goodput, the total against the bottleneck, and the softrdma senders' retransmissions, as a
# markdown table row per run (docs/reliability.md, "Congestion").
#
#   bench/bottleneck.sh [-t SECONDS] [-r RATE] [-s SIZE] [-b BUILD] [-n RUNS] [-m MTU] [-1]
#
#   -t SECONDS  length of each flow (default 15)
#   -r RATE     tbf rate, tc syntax (default 1gbit)
#   -s SIZE     ib_write_bw message size (default 65536)
#   -b BUILD    build directory whose bin/softrdma runs perftest (default build)
#   -n RUNS     runs (default 1)
#   -m MTU      veth MTU (default 9000, as bench/run)
#   -1          also each flow alone through the same bottleneck, first
#   BN_FLOWS=FILE   also append one line per flow and run to FILE: NAME tcp MBITS OWN, or
#                   NAME sr MBITS OWN SENT RESENT HALVED CUT RESTARTED (MBITS: in the common window,
#                   the middle half of the run, from the receivers' byte counts; OWN: the
#                   tool's own average; the writer's counters)
#   BN_KEEP=1       keep the scratch directory (every side's output and counters)
#
# Needs root (namespaces, tc), perftest and iperf3. The kernel must have sch_tbf (tc qdisc add
# ... tbf; this project's machine has tbf and htb, not netem, red or codel: no ECN marking, so
# the only congestion signal is a full queue's drop). Exit 0 when every flow ran; the targets
# (total >= 80 % of RATE, no flow below a third of its fair share) are printed, not enforced:
# integration/test_bottleneck asserts a bounded version.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dur=15 rate=1gbit size=65536 build=$src/build runs=1 mtu=9000 alone=0
while getopts t:r:s:b:n:m:1 o; do
	case $o in
	t) dur=$OPTARG ;;
	r) rate=$OPTARG ;;
	s) size=$OPTARG ;;
	b) build=$(cd "$OPTARG" && pwd) ;;
	n) runs=$OPTARG ;;
	m) mtu=$OPTARG ;;
	1) alone=1 ;;
	*) exit 2 ;;
	esac
done
SR=$build/bin/softrdma
[ -x "$SR" ] || { echo "bottleneck: no $SR (make build first)" >&2; exit 1; }
for c in ib_write_bw iperf3 tc ip python3; do
	command -v $c >/dev/null || { echo "bottleneck: $c missing" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "bottleneck: needs root (namespaces, tc)" >&2; exit 1; }

# RATE in Mbit/s (tc units: bit, kbit, mbit, gbit; k/m/g are powers of 1000).
rate_mbit=$(python3 -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmg]?)(bit|bps)?", sys.argv[1].lower())
v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
print("%.1f" % ((v * 8 if m.group(3) == "bps" else v) / 1e6))' "$rate") || exit 2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sr-bottleneck.XXXXXX")
nsa=sr-bna-$$ nsb=sr-bnb-$$ va=bna$$ vb=bnb$$ pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	ip netns del "$nsa" 2>/dev/null
	ip netns del "$nsb" 2>/dev/null
	[ -n "${BN_KEEP:-}" ] && echo "bottleneck: kept $tmp" >&2 || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
net=10.$((100 + RANDOM % 100)).$((RANDOM % 256))
ip netns add "$nsa" && ip netns add "$nsb" && ip link add "$va" type veth peer name "$vb" &&
	ip link set "$va" netns "$nsa" && ip link set "$vb" netns "$nsb" &&
	ip -n "$nsa" addr add "$net.1/24" dev "$va" && ip -n "$nsb" addr add "$net.2/24" dev "$vb" &&
	ip -n "$nsa" addr add "$net.3/24" dev "$va" && ip -n "$nsb" addr add "$net.4/24" dev "$vb" &&
	ip -n "$nsa" link set "$va" mtu "$mtu" && ip -n "$nsb" link set "$vb" mtu "$mtu" &&
	ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up &&
	ip -n "$nsa" link set "$va" up && ip -n "$nsb" link set "$vb" up ||
	{ echo "bottleneck: namespace setup failed" >&2; exit 1; }
# The bottleneck: the senders' egress. A bucket of 4 jumbo frames and 10 ms of queue (at 1 Gbit/s
# 1.25 MB), about what a switch port buffer holds; beyond it, tail drop.
burst=$((4 * (mtu + 100)))
ip netns exec "$nsa" tc qdisc add dev "$va" root tbf rate "$rate" burst "$burst" latency 10ms ||
	{ echo "bottleneck: tc tbf not available on this kernel" >&2; exit 1; }
for _ in $(seq 100); do
	ip -n "$nsb" link show "$vb" | grep -q LOWER_UP && break
	sleep 0.05
done

A=(ip netns exec "$nsa") B=(ip netns exec "$nsb")
# flow_server / flow_client NAME KIND PORT: one flow's server (namespace B) or client (A), in the
# background; the client's output goes to $tmp/NAME.c, the softrdma client's counters to
# $tmp/NAME.stat. Each softrdma flow has its own address pair (a second soft NIC on the same
# address would take another UDP port and a GID perftest refuses): sr1 .1 -> .2, sr2 .3 -> .4.
host_a() { case $1 in sr2) echo "$net.3" ;; *) echo "$net.1" ;; esac; }
host_b() { case $1 in sr2) echo "$net.4" ;; *) echo "$net.2" ;; esac; }
flow_server() {
	local name=$1 kind=$2 port=$3
	if [ "$kind" = tcp ]; then
		timeout -k 5 $((dur + 60)) "${B[@]}" iperf3 -s -1 -p "$port" >"$tmp/$name.s" 2>&1 &
	else
		mkdir -p "$tmp/st-$name"
		timeout -k 5 $((dur + 60)) "${B[@]}" env SOFTRDMA_NETDEV="$vb" \
			SOFTRDMA_ADDR="$(host_b "$name")" SOFTRDMA_STATS_DIR="$tmp/st-$name" "$SR" run -- \
			ib_write_bw -d softrdma0 -x 0 -F -p "$port" -s "$size" -D "$dur" >"$tmp/$name.s" 2>&1 &
	fi
	pids+=($!)
}
flow_client() {
	local name=$1 kind=$2 port=$3
	if [ "$kind" = tcp ]; then
		# Longer than perftest's flows, which start a second or two later (QP set-up): the
		# TCP flow competes for the whole of their run.
		timeout -k 5 $((dur + 60)) "${A[@]}" iperf3 -c "$net.2" -p "$port" -t $((dur + 5)) -J \
			>"$tmp/$name.c" 2>&1 &
	else
		timeout -k 5 $((dur + 60)) "${A[@]}" env SOFTRDMA_NETDEV="$va" \
			SOFTRDMA_ADDR="$(host_a "$name")" SOFTRDMA_STATS_DUMP="$tmp/$name.stat" \
			"$SR" run -- ib_write_bw -d softrdma0 -x 0 -F -p "$port" -s "$size" -D "$dur" \
			"$(host_b "$name")" \
			>"$tmp/$name.c" 2>&1 &
	fi
	pids+=($!)
}
wait_port() {	# PORT: until something listens on TCP PORT in namespace B (at most 20 s)
	for _ in $(seq 400); do
		"${B[@]}" ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
		sleep 0.05
	done
	return 1
}
# rx_now NAME KIND PORT: bytes the flow's receiver has taken so far (softrdma: the server's UDP
# payload bytes received, live counter; TCP: the server's data socket's bytes_received, ss -ti:
# the larger of iperf3's two connections).
rx_now() {
	if [ "$2" = tcp ]; then
		"${B[@]}" ss -Htin "sport = :$3" 2>/dev/null |
			sed -nE 's/.*bytes_received:([0-9]+).*/\1/p' |
			awk '$1 > m { m = $1 } END { printf "%d", m }'	# the data connection
	else
		SOFTRDMA_STATS_DIR="$tmp/st-$1" "$SR" stat 2>/dev/null |
			awk '$1 == "rx_bytes" { s += $2 } END { printf "%d", s }'
	fi
}
# goodput NAME KIND: Mbit/s the receiver got (ib_write_bw: its BW average, MiB/s; iperf3: the
# receiver's sum), each over its own measuring window; empty when the flow failed.
goodput() {
	if [ "$2" = tcp ]; then
		python3 -c 'import json, sys
try:
    print("%.0f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e6))
except Exception:
    pass' "$tmp/$1.c"
	else
		awk -v s="$size" '$1 == s && NF >= 5 { printf "%.0f\n", $4 * 1048576 * 8 / 1e6 }' "$tmp/$1.c"
	fi
}
stat_of() {	# NAME COUNTER: the softrdma client's counter (0 when absent)
	local v
	v=$(awk -v c="$2" '$1 !~ /^#/ && $2 == c { s += $3 } END { printf "%d", s }' \
		"$tmp/$1.stat" 2>/dev/null)
	echo "${v:-0}"
}

# run NAME:KIND...: the flows at once; prints the table row. Returns 1 if a flow failed.
run() {
	local f name kind port=$((20000 + RANDOM % 20000)) names=() kinds=() ok=0
	for f in "$@"; do
		name=${f%%:*} kind=${f#*:}
		names+=("$name") kinds+=("$kind")
		rm -f "$tmp/$name".*
		flow_server "$name" "$kind" "$port"
		wait_port "$port" || { echo "bottleneck: $name's server did not listen" >&2; ok=1; }
		eval "port_$name=$port"
		port=$((port + 1))
	done
	for f in "$@"; do
		name=${f%%:*} kind=${f#*:}
		eval "flow_client $name $kind \$port_$name"
	done
	# The common window: every flow's receiver is read twice a second while they run; once
	# every softrdma flow moves data (perftest sets its QPs up first), the window is the middle
	# half of its run. (Reading at fixed times instead was thrown off by late wake-ups on a
	# loaded machine.)
	local b1=() b2=() t1=() t2=() win="" ser=$tmp/series
	: >"$ser"
	while :; do
		local alive=0
		for f in "$@"; do
			eval "echo \"\$(date +%s.%N) ${f%%:*} \$(rx_now ${f%%:*} ${f#*:} \$port_${f%%:*})\"" >>"$ser"
		done
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 1 ] || break
		sleep 0.5
	done
	# For each flow: the bytes at the sample nearest each end of the window, and its times.
	local w
	w=$(python3 - "$ser" "$dur" "${names[@]}" "${kinds[@]}" <<'PY'
import sys
ser, dur, rest = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
n = len(rest) // 2
names, kinds = rest[:n], rest[n:]
pts = {}
for line in open(ser):
    t, name, b = line.split()
    if int(b) > 0:  # 0: not started, or ended (a softrdma process's counters go with it)
        pts.setdefault(name, []).append((float(t), int(b)))
# From the first time every flow has received more than 1 MB to the last time all still ran.
t0 = max(next((t for t, b in pts.get(n, []) if b > 1000000), float("inf")) for n in names)
end = min(pts[n][-1][0] if n in pts else 0.0 for n in names)
a, z = t0 + dur / 4, min(t0 + 3 * dur / 4, end)
out = []
for name in names:
    p = [x for x in pts.get(name, []) if t0 <= x[0] <= end]
    if len(p) < 2:
        out.append("0 0 0 0")
        continue
    s1 = min(p, key=lambda x: abs(x[0] - a))
    s2 = min(p, key=lambda x: abs(x[0] - z))
    out.append("%d %.6f %d %.6f" % (s1[1], s1[0], s2[1], s2[0]))
print(";".join(out))
PY
)
	local i=0 item
	IFS=';' read -r -a items <<<"$w"
	for item in "${items[@]}"; do
		read -r "b1[i]" "t1[i]" "b2[i]" "t2[i]" <<<"$item"
		i=$((i + 1))
	done
	echo "samples: ${b1[*]} @ ${t1[*]} -> ${b2[*]} @ ${t2[*]}" >"$tmp/samples"	# (BN_KEEP=1 keeps it)
	wait "${pids[@]}" 2>/dev/null
	pids=()	# (all ended: the sampling loop above waited for them)
	local row="| $(date -u +%H:%M) | $(cut -d' ' -f1 /proc/loadavg) |" total=0 n=${#names[@]} fair low="" flows="" nowin=0
	fair=$(awk -v r="$rate_mbit" -v n="$n" 'BEGIN { printf "%.0f", r / n }')
	for i in "${!names[@]}"; do
		local g w
		g=$(goodput "${names[$i]}" "${kinds[$i]}")
		w=$(awk -v a="${b1[$i]}" -v b="${b2[$i]}" -v t1="${t1[$i]}" -v t2="${t2[$i]}" \
			'BEGIN { if (t2 - t1 < 1) print ""; else printf "%.0f", (b - a) * 8 / (t2 - t1) / 1e6 }')
		# No common window of a second (a flow starved of CPU at its start or end): the
		# tool's own figure, marked.
		[ -n "$w" ] || { w=${g:-0}; nowin=1; }
		win+="${win:+; }${names[$i]} $w"
		if [ -z "$g" ]; then
			flows+="${flows:+; }${names[$i]} failed"
			tail -n 8 "$tmp/${names[$i]}.c" "$tmp/${names[$i]}.s" >&2
			ok=1
			continue
		fi
		total=$((total + w))
		[ "$(awk -v g="$w" -v f="$fair" 'BEGIN { print (g < f / 3) }')" = 1 ] && low+=" ${names[$i]}"
		if [ "${kinds[$i]}" = tcp ]; then
			flows+="${flows:+; }${names[$i]} (TCP) $g"
			[ -z "${BN_FLOWS:-}" ] || echo "${names[$i]} tcp $w $g" >>"$BN_FLOWS"
		else
			local tx re cuts hv rs
			tx=$(stat_of "${names[$i]}" tx_packets) re=$(stat_of "${names[$i]}" retransmits)
			cuts=$(stat_of "${names[$i]}" cwnd_cuts) rs=$(stat_of "${names[$i]}" cwnd_restarts)
			hv=$(stat_of "${names[$i]}" cwnd_halvings)
			flows+="${flows:+; }${names[$i]} $g (sent $tx, resent $re; window halved $hv, cut $cuts, restarted $rs)"
			[ -z "${BN_FLOWS:-}" ] ||
				echo "${names[$i]} sr $w $g $tx $re $hv $cuts $rs" >>"$BN_FLOWS"
		fi
	done
	[ $nowin = 0 ] || win+=" (no common window of 1 s: own figures)"
	row+=" $win | $flows | $total of $rate_mbit ($(awk -v t="$total" -v r="$rate_mbit" 'BEGIN { printf "%.0f", 100 * t / r }') %) |"
	[ -n "$low" ] && row+=" below a third of the fair share ($fair):$low |" || row+=" every flow >= $((fair / 3)) |"
	echo "$row"
	return $ok
}

echo "bottleneck: tbf $rate ($rate_mbit Mbit/s), burst $burst B, latency 10 ms; veth MTU $mtu;" \
	"ib_write_bw -s $size; $dur s per run; $(nproc) CPUs" >&2
echo "| UTC | load | Mbit/s received in the common window (middle half of the run) | each tool's own figure, Mbit/s (softrdma: the writer's packets sent and resent, window halvings, cuts and restarts) | total in the window, Mbit/s | fairness (window) |"
echo "|---|---|---|---|---|---|"
rc=0
if [ "$alone" = 1 ]; then
	run sr1:sr || rc=1
	run tcp:tcp || rc=1
fi
for _ in $(seq "$runs"); do
	run sr1:sr sr2:sr tcp:tcp || rc=1
done
exit $rc
