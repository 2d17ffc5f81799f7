#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Debian's unmodified UCX (ucx-utils) on softrdma, with no UCX_* setting: `ucx_info -d` lists
# rc_verbs and ud_verbs on softrdma0:1 (the device view of `softrdma run`, docs/view.md), and
# `ucx_perftest` runs over rc_verbs (put_bw, put_lat, am_bw, add_lat: 64-bit atomics) and
# ud_verbs (am_lat) on loopback, and put_bw and am_lat between two network namespaces. Each
# run must complete its iterations, and softrdma's counters must show the traffic and no
# unexpected drop.

. "$(dirname "$0")/lib.sh"
need_build
need_cmd ucx_info ucx_perftest

# No UCX_* workaround may help: whatever the caller's environment has is dropped.
for v in ${!UCX_@}; do unset "$v"; done

ITERS=2000
SR_PAIR_TIMEOUT=90

timeout -k 5 60 "$SR" run -- ucx_info -d >"$SR_TMP/info.out" 2>&1 ||
	sr_fail "ucx_info -d exited $?"
# Transport/Device pairs, one a line: "rc_verbs softrdma0:1".
awk '/# *Transport:/ { t = $3 } /# *Device:/ && t { print t, $3; t = "" }' "$SR_TMP/info.out" \
	>"$SR_TMP/info.pairs"
for tl in rc_verbs ud_verbs; do
	sr_expect_grep "ucx_info -d: $tl on softrdma0:1" "^$tl softrdma0:1\$" "$SR_TMP/info.pairs"
done

# Loss recovery may see a duplicate (a tail-loss probe's answer) on a loaded machine.
RECOVERY="drop_psn drop_dup"

# perf NAME TL TEST SIZE MIN_RX [LAYOUT]: one ucx_perftest pair of SIZE-byte messages
# (LAYOUT: short, bcopy or zcopy; short by default, as ucx_perftest's); checks the
# client's final line and the counters (MIN_RX "direct": no packet is expected, the same-host
# direct path moves every put, docs/direct.md).
perf() {
	local name=$1 tl=$2 test=$3 size=$4 min=$5 layout=${6:-short} n f
	sr_pair "$name" ucx_perftest -d softrdma0:1 -x "$tl" -t "$test" -D "$layout" -s "$size" \
		-n "$ITERS" || return
	n=$(awk '$1 == "Final:" { print $2 }' "$SR_TMP/$name.cli.out")
	sr_expect_eq "$name: iterations completed" "$ITERS" "$n"
	if [ "$min" = direct ]; then
		f=$SR_TMP/$name.cli.stats
		sr_expect_ge "$name cli: direct_writes" "$ITERS" "$(sr_stat "$f" direct_writes)"
		sr_expect_ge "$name cli: direct_bytes" $((ITERS * size)) "$(sr_stat "$f" direct_bytes)"
	else
		# Both sides exchanged packets with no unexpected drop; the server (the target of
		# the puts and sends) received at least MIN_RX bytes.
		sr_check_stats "$name" 1 $RECOVERY
		sr_expect_ge "$name srv: rx_bytes" "$min" "$(sr_stat "$SR_TMP/$name.srv.stats" rx_bytes)"
	fi
}

perf put_bw rc_verbs put_bw 65536 direct zcopy
perf put_lat rc_verbs put_lat 8 direct
perf am_bw rc_verbs am_bw 1024 $((ITERS * 1024)) bcopy
perf add_lat rc_verbs add_lat 8 $((ITERS * 8))
perf ud_am_lat ud_verbs am_lat 8 $((ITERS * 8))

if sr_netns_usable && sr_netns_pair ux; then
	SR_SRV_NS=$SR_NSA SR_CLI_NS=$SR_NSB SR_SERVER_HOST=$SR_NET.1
	SR_SRV_ENV=("SOFTRDMA_NETDEV=$SR_VA") SR_CLI_ENV=("SOFTRDMA_NETDEV=$SR_VB")
		perf ns_put_bw rc_verbs put_bw 65536 $((ITERS * 65536)) zcopy
	perf ns_ud_am_lat ud_verbs am_lat 8 $((ITERS * 8))
	SR_SRV_NS= SR_CLI_NS= SR_SERVER_HOST=localhost SR_SRV_ENV=() SR_CLI_ENV=()
else
	echo "(network namespaces not usable here: the namespace half not run)"
fi
sr_finish
