#!/bin/bash
# SPDX-License-Identifier: MIT
#
# `make demo`, the README's first command, exactly as a newcomer runs it (against this build
# directory, so nothing is built twice): it must exit 0, both pingpong processes must report
# their transfer, the capture must decode with every ICRC verified, and the counters must be
# shown. It once failed every time after the pingpong (a `grep -v` under pipefail that selected
# nothing when every GID was on port 4791), and nothing noticed.

. "$(dirname "$0")/lib.sh"
need_cmd ibv_rc_pingpong
need_cmd make

out=$SR_TMP/demo.out
timeout 300 make -s -C "$SR_SOURCE_DIR" demo BUILD="$SR_BUILD_DIR" >"$out" 2>&1
rc=$?
sr_expect_eq "make demo exit status" 0 "$rc"
[ "$rc" = 0 ] || sr_tail "$out" 30 >&2

# Both sides of ibv_rc_pingpong: "N bytes in S seconds" and "500 iters in S seconds".
sr_expect_eq "pingpong sides reporting 65536000 bytes" 2 \
	"$(grep -cE '^65536000 bytes in [0-9.]+ seconds' "$out")"
sr_expect_eq "pingpong sides reporting 500 iters" 2 "$(grep -cE '^500 iters in' "$out")"
# The capture: both processes' pcaps decode, packets > 0, no bad ICRC, nothing malformed.
sr_expect_eq "captures decoded with every ICRC ok" 2 \
	"$(grep -cE '^[0-9]+\.pcap: [1-9][0-9]* RoCEv2 packets, ICRC ok=[1-9][0-9]* bad=0 malformed=0' "$out")"
sr_expect_grep "counters shown" '^softrdma0 tx_packets [1-9]' "$out"
sr_expect_grep "the demo's last line" '^.*Done: an unmodified RDMA program ran on softrdma' "$out"
sr_finish
