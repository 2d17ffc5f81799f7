#!/bin/bash
# SPDX-License-Identifier: MIT
#
# A shared bottleneck (issue udp-speed, "behave on a real network"): bench/bottleneck.sh for 8 s,
# two softrdma ib_write_bw flows and one iperf3 TCP flow from one namespace to another through a
# 1 Gbit/s token bucket (tc tbf; this kernel has no netem). The issue's targets -- total >= 80 %
# of the bottleneck, no flow below a third of its fair share -- are printed (measured on the
# middle half of the run from the receivers' byte counts); what is asserted holds on a loaded
# 2-core machine too, where CPU time, not the link, often decides the shares:
#   - every flow ran to its end (both softrdma QPs without an error, iperf3 with a result);
#   - the bottleneck dropped and each softrdma writer answered with its window (cwnd_halvings
#     or cwnd_cuts: the congestion response of docs/architecture.md), and did not collapse into
#     retransmission: fewer than 10 % of the packets it sent were resends;
#   - no flow starved: each got at least a sixth of its fair share (half the issue's third),
#     and the three together at least 30 % of the bottleneck.
# Skipped without root, namespaces, tc tbf, perftest or iperf3.

. "$(dirname "$0")/lib.sh"
need_build
need_root
need_cmd ib_write_bw iperf3 tc timeout python3
# Does this kernel have tbf? (A namespace of our own, removed at once.)
probe=sr-bnp-$$
ip netns add "$probe" 2>/dev/null || sr_skip "ip netns add failed"
sr_at_exit "ip netns del $probe 2>/dev/null"
ip netns exec "$probe" tc qdisc add dev lo root tbf rate 1gbit burst 64kb latency 10ms \
	>/dev/null 2>&1 || sr_skip "tc tbf is not available on this kernel"
ip netns del "$probe"

flows=$SR_TMP/flows
out=$SR_TMP/bottleneck.out
BN_FLOWS=$flows timeout 150 "$SR_SOURCE_DIR/bench/bottleneck.sh" -b "$SR_BUILD_DIR" -t 8 \
	>"$out" 2>&1
rc=$?
grep -E '^\||^bottleneck:' "$out"
sr_expect_eq "bench/bottleneck.sh ran every flow to its end" 0 "$rc"
[ "$rc" = 0 ] || sr_tail "$out" 30 >&2
[ -s "$flows" ] || { sr_fail "no per-flow figures"; sr_finish; }

fair=333	# 1000 Mbit/s shared by 3
total=0
while read -r name kind mbit own tx re hv cut rs; do
	total=$((total + mbit))
	sr_expect_ge "$name ($kind): at least a sixth of its fair share in Mbit/s" $((fair / 6)) "$mbit"
	[ "$kind" = sr ] || continue
	sr_expect_ge "$name: the writer's window answered the drops (halved $hv, cut $cut)" 1 \
		$((hv + cut))
	# resent < 10 % of sent  <=>  10 * resent < sent
	sr_expect_ge "$name: resends under 10 % of packets sent (10 x $re < $tx)" \
		$((10 * re + 1)) "$tx"
done <"$flows"
sr_expect_ge "all three together: at least 30 % of the 1000 Mbit/s bottleneck" 300 "$total"
echo "targets of the issue (reported, not asserted): total $total >= 800;" \
	"each flow >= $((fair / 3)): $(awk -v m=$((fair / 3)) '$3 < m { printf "%s %s below; ", $1, $3 }' "$flows")"
sr_finish
