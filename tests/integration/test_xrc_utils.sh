#!/bin/bash
# SPDX-License-Identifier: MIT
#
# XRC through unmodified Debian programs, two processes on loopback: ibv_xsrq_pingpong (XRC
# domain by file, XRC SRQ, XRC_SEND + XRC_RECV QPs), polling and with -e (CQ events), and
# perftest's ib_send_bw / ib_write_bw -c XRC. Each run must exit 0 on both sides and print its
# result; no counter may show a refused packet. Allowed: drop_psn (after a go-back-N
# retransmission, spurious on a loaded machine, the responder drops the rest of the window) and
# drop_qp_state / drop_qp_gone (a retransmission reaching a QP the peer is already tearing down).
XRC_OK="drop_psn drop_qp_state drop_qp_gone"

. "$(dirname "$0")/lib.sh"
need_build
need_cmd ibv_xsrq_pingpong ib_send_bw ib_write_bw ss timeout

xs() {
	local name=$1
	shift
	if sr_pair "$name" ibv_xsrq_pingpong -g 0 -m 1024 "$@"; then
		sr_expect_grep "$name srv: success" '^success' "$SR_TMP/$name.srv.out"
		sr_expect_grep "$name cli: success" '^success' "$SR_TMP/$name.cli.out"
		sr_check_stats "$name" 1 $XRC_OK
	fi
}
xs xsrq_default
xs xsrq_big -s 65536 -n 50
xs xsrq_events -e -n 20

# perftest: the result row is "SIZE ITERS PEAK AVG MSGRATE".
pt() {
	local name=$1
	shift
	SR_SERVER_HOST=127.0.0.1
	if sr_pair "$name" "$@" -c XRC -x 0 -s 65536 -n 300; then
		sr_expect_grep "$name: result row" '^ *65536 +300 +[0-9.]+ +[0-9.]+' "$SR_TMP/$name.cli.out"
		sr_check_stats "$name" 1 $XRC_OK
	fi
	SR_SERVER_HOST=localhost
}
pt send_bw_xrc ib_send_bw
pt write_bw_xrc ib_write_bw

sr_finish
