#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Debian's unmodified ibv_{rc,uc,ud,srq}_pingpong, server and client as two processes on
# loopback (zero configuration: the first process gets UDP 4791, the second another port
# encoded in its GID). For every run:
#   - both sides exit 0 and print "SIZE*ITERS*2 bytes in" and "ITERS iters in";
#   - the counters dumped at exit show that the messages crossed the stack (each side
#     received at least SIZE*ITERS UDP payload bytes) and nothing was dropped for a reason a
#     clean loopback run cannot have (see sr_check_stats in lib.sh);
#   - with -c, the server checks the start of every page of the last message it received
#     (the program's own, weak, check: it prints "invalid data in page N").
# Retransmissions are allowed (they are recovery, not errors) but reported: loopback loses
# nothing, so any retransmit here is spurious.

. "$(dirname "$0")/lib.sh"
need_build
need_cmd ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong ss timeout

# As root the pairs run in a network namespace of their own (its loopback only, still zero
# configuration). On the host's loopback the server owns 127.0.0.1:4791, where other programs'
# packets land: the CM guardian of any rdma_cm client of 127.0.0.1 that ended with a connection
# up sends its DREQs there for 1 s (docs/cm.md), and rc_s1's and rc_s4096's servers counted
# such 280-byte MADs to QP1 as drop_qpn (their rx_bytes exceeded their clients' tx_bytes by
# 280 per drop) while other tests ran on the machine.
if sr_netns_usable; then
	sr_netns_lo pp || { sr_fail "could not make a network namespace"; sr_finish; }
	# shellcheck disable=SC2034 # read by sr_pair (lib.sh)
	SR_SRV_NS=$SR_NSL SR_CLI_NS=$SR_NSL
	echo "(the pairs run in network namespace $SR_NSL, on its loopback)"
fi

# run NAME SIZE ITERS ALLOWED_DROPS PROG ARGS...
# SIZE and ITERS are what the program was told (or its defaults), for the summary checks.
run() {
	local name=$1 size=$2 iters=$3 allowed=$4
	shift 4
	if sr_pair "$name" "$@"; then
		sr_check_pingpong "$name" "$size" "$iters"
		sr_check_stats "$name" $((size * iters)) $allowed
		sr_expect_no_grep "$name: no invalid data reported" 'invalid data' "$SR_TMP/$name.srv.out"
	fi
	local re
	re=$(sr_stat2 "$name" retransmits)
	[ "$re" = 0 ] || echo "note: $name: $re retransmits on loopback (lossless: spurious);" \
		"fast_retransmits $(sr_stat2 "$name" fast_retransmits)," \
		"retry_timeouts $(sr_stat2 "$name" retry_timeouts)"
	sr_show_stats "$name"
}

# After go-back-N (spurious or not) the responder drops the rest of the window: drop_psn.
# A peer that saw loss sends its last ACK again when it destroys its QP (sr_resp_final_ack),
# and a tail-loss probe may cross the peer's exit: both reach a QP that is gone.
RC_OK="drop_psn drop_qp_gone"

# --- RC: SEND/RECV of 1 byte .. 1 MiB (the program's path MTU is 1024 unless -m)
run rc_s1        1       1000 "$RC_OK" ibv_rc_pingpong -g 0 -s 1
run rc_s4096     4096    1000 "$RC_OK" ibv_rc_pingpong -g 0 -s 4096 -n 1000 -c
run rc_s65536    65536   1000 "$RC_OK" ibv_rc_pingpong -g 0 -s 65536 -c
run rc_s1m       1048576 200  "$RC_OK" ibv_rc_pingpong -g 0 -s 1048576 -n 200 -c
run rc_m4096     65536   500  "$RC_OK" ibv_rc_pingpong -g 0 -m 4096 -s 65536 -n 500 -c
# The ICRC's CRC engines agree on the wire (param crc_engine caps one side's): the server's at
# the slicing-by-8 tables, the client's at VPCLMULQDQ with AVX2 (or the best below it the CPU
# has). A packet whose ICRC one engine got wrong is dropped and counted (drop_icrc): the run
# stalls or sr_check_stats fails.
SR_SRV_ENV=(SOFTRDMA_CRC_ENGINE=tables) SR_CLI_ENV=(SOFTRDMA_CRC_ENGINE=vpclmul256)
run rc_crc_engines 65536 300  "$RC_OK" ibv_rc_pingpong -g 0 -m 4096 -s 65536 -n 300 -c
SR_SRV_ENV=() SR_CLI_ENV=()
out=$SR_TMP/crc_bogus.out
SOFTRDMA_CRC_ENGINE=bogus timeout -k 5 30 "$SR" run -- ibv_devices >"$out" 2>&1
sr_expect_grep "crc_engine=bogus: refused with a warning, the best engine used" \
	'SOFTRDMA_CRC_ENGINE="bogus" is not an engine' "$out"
run rc_n5000     64      5000 "$RC_OK" ibv_rc_pingpong -g 0 -s 64 -n 5000
# Completion channel (sleep on CQ events) and the new post-send API (ibv_wr_*).
run rc_events    4096    1000 "$RC_OK" ibv_rc_pingpong -g 0 -e
run rc_new_send  4096    1000 "$RC_OK" ibv_rc_pingpong -g 0 -N
run rc_ev_new    65536   300  "$RC_OK" ibv_rc_pingpong -g 0 -e -N -s 65536 -n 300

# --- UC: no ACKs, no retransmission; a lost packet would hang the program (none on loopback)
run uc_default   4096    1000 "" ibv_uc_pingpong -g 0 -c
run uc_s1        1       1000 "" ibv_uc_pingpong -g 0 -s 1
run uc_m4096     65536   300  "" ibv_uc_pingpong -g 0 -m 4096 -s 65536 -n 300 -c

# --- UD: one packet per message, so at most the port's active MTU (4096 on loopback); the
# receive buffer is SIZE + 40 for the GRH the receiver gets in front of the payload.
# (Debian's ibv_ud_pingpong says "default 2048" in its usage but uses 1024: sizes are explicit.)
run ud_s1        1       1000 "" ibv_ud_pingpong -g 0 -s 1
run ud_s2048     2048    1000 "" ibv_ud_pingpong -g 0 -s 2048 -c
run ud_s4096     4096    1000 "" ibv_ud_pingpong -g 0 -s 4096 -c
# One byte more than the MTU is refused by the program itself, from ibv_query_port's
# active_mtu, before it listens: checks that the port reports 4096.
out=$SR_TMP/ud_s4097.out
timeout -k 5 30 "$SR" run -- ibv_ud_pingpong -g 0 -s 4097 -p "$(sr_free_port)" >"$out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q 'Requested size larger than port MTU (4096)' "$out"; then
	sr_ok "ud -s 4097: refused by the program (port MTU 4096), exit $rc"
else
	sr_fail "ud -s 4097: wanted a refusal naming port MTU 4096, got exit $rc"
	sr_tail "$out" >&2
fi

# --- SRQ: 16 RC QPs sharing one receive queue. The program may post up to num_qp-1 sends
# more than ITERS (every QP whose previous exchange completed posts while the global count
# is below ITERS), and a peer that has finished destroys its QPs: those last messages land
# on QPs that are gone (drop_qp_gone) and are retransmitted until the sender exits too.
run srq_default  4096    1000 "$RC_OK" ibv_srq_pingpong -g 0 -c
run srq_q4_big   65536   200  "$RC_OK" ibv_srq_pingpong -g 0 -q 4 -s 65536 -n 200 -e

sr_finish
