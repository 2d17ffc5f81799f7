#!/bin/bash
# SPDX-License-Identifier: MIT
#
# softrdma's CM MADs on the wire (issue interop:, item 4): tests/verbs/test_gsi sends REQ and
# REP MADs (src/wire/mad.c) from QP1 to QP1, within one process and between two processes of
# one host, with the capture tap on. Wireshark's InfiniBand dissector (tshark) must decode them
# as CM ConnectRequest / ConnectReply with nothing malformed, and `softrdma pcap` must name
# them and verify every ICRC.

. "$(dirname "$0")/lib.sh"
need_cmd tshark
need_build
[ -x "$SR_BUILD_DIR/tests/test_gsi" ] || { echo "FAIL: no tests/test_gsi (build first)" >&2; exit 1; }

cap=$SR_TMP/cap
mkdir -p "$cap"
SOFTRDMA_PCAP="$cap/%p.pcap" timeout -k 5 120 "$SR_BUILD_DIR/tests/test_gsi" >"$SR_TMP/test_gsi.out" 2>&1
sr_expect_eq "test_gsi with the capture on" 0 "$?"
sr_expect_eq "captures (two processes)" 2 "$(find "$cap" -name '*.pcap' | wc -l)"
for f in "$cap"/*.pcap; do
	n=$(basename "$f")
	tshark -r "$f" >"$SR_TMP/$n.txt" 2>/dev/null
	tshark -r "$f" -V >"$SR_TMP/$n.v" 2>/dev/null
	sr_expect_ge "$n: tshark's CM ConnectRequest" 1 "$(grep -c 'CM: ConnectRequest' "$SR_TMP/$n.txt")"
	sr_expect_ge "$n: tshark's CM ConnectReply" 1 "$(grep -c 'CM: ConnectReply' "$SR_TMP/$n.txt")"
	sr_expect_no_grep "$n: nothing malformed for tshark" 'Malformed|Expert Info \(Error' "$SR_TMP/$n.v"
	sr_expect_grep "$n: tshark sees QP1 and the GSI Q_Key" 'Queue Key: 0x0000000080010000' "$SR_TMP/$n.v"
	"$SR" pcap "$f" >"$SR_TMP/$n.sr" 2>&1
	sr_expect_eq "$n: softrdma pcap exit status" 0 "$?"
	sr_expect_grep "$n: softrdma pcap names the MADs" 'bad=0 malformed=0.* MADs to QP1 x[0-9]+: CM REQ x[0-9]+ CM REP x1$' "$SR_TMP/$n.sr"
done
sr_finish
