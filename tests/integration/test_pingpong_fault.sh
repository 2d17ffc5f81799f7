#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Recovery under injected faults (SOFTRDMA_FAULT, src/net/fault.c), with Debian's unmodified
# pingpongs as two processes on loopback. Faults are injected on transmit, on both sides.
#
# RC recovers from anything: the program must complete as if nothing happened, and the
# counters must show that faults were injected and repaired (retransmissions, duplicates
# answered, corrupted packets caught by the ICRC check), and no RETRY_EXC_ERR.
#
# UC and UD do not recover, and ibv_{uc,ud}_pingpong wait forever for a message that is lost,
# so only faults that keep every message can be used there (checked by hand, 2025-11):
#   drop     loses a message: the program hangs by design.
#   corrupt  the ICRC check drops the packet: lost, same.
#   dup      a duplicated UD datagram, or a duplicated UC SEND ONLY (IBA: a UC packet with an
#            unexpected PSN that starts a message starts a new one), is delivered twice; the
#            extra receive completion breaks the programs' lock step (one side finishes early,
#            the other waits for a message that never comes). A duplicated UC middle packet
#            breaks the whole message (drop_uc_msg). Not usable.
#   reorder  holds a packet back until the next one is sent, or 1 ms. A pingpong has one
#            single-packet message in flight per direction, so this is only a delay and the
#            program must complete. UC uses -s 1024 (= its default path MTU 1024), UD -s 2048
#            (loopback MTU 4096): single-packet messages, as reordering the packets of one UC
#            message would lose it.
#
# Seeds: each side gets seed=S (server) and S+1 (client), S random unless SR_FAULT_SEED is
# set; the seed is printed, but thread timing still varies the packets the faults fall on.

. "$(dirname "$0")/lib.sh"
need_build
need_cmd ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ss timeout

SEED=${SR_FAULT_SEED:-$((RANDOM * 32768 + RANDOM))}
echo "fault seeds: server $SEED, client $((SEED + 1)) (SR_FAULT_SEED=$SEED to reuse)"

# faulty NAME TIMEOUT SPEC PROG ARGS...: sr_pair with SPEC injected on both sides.
faulty() {
	local name=$1 to=$2 spec=$3
	shift 3
	SR_SRV_ENV=("SOFTRDMA_FAULT=$spec,seed=$SEED")
	SR_CLI_ENV=("SOFTRDMA_FAULT=$spec,seed=$((SEED + 1))")
	SR_PAIR_TIMEOUT=$to sr_pair "$name" "$@"
	local rc=$?
	SR_SRV_ENV=()
	SR_CLI_ENV=()
	[ $rc -ne 0 ] || sr_show_stats "$name"	# (a failure has shown them already)
	return $rc
}

# expect_sum NAME COUNTER MIN: COUNTER summed over both sides of NAME is at least MIN.
expect_sum() { sr_expect_ge "$1: $2 (both sides)" "$3" "$(sr_stat2 "$1" "$2")"; }

# After a go-back-N the responder drops the rest of the window (drop_psn); a duplicate or
# late packet may reach a QP its program already destroyed at exit (drop_qp_gone).
RC_OK="drop_psn drop_qp_gone"

# --- RC, 1 MiB x 200 (1024 packets a message) under loss, duplication and reordering. On an
# idle 2-core machine this took about 12 s; the pair gets 10 times that.
name=rc_1m_faults
if faulty $name 120 drop=0.05,dup=0.02,reorder=0.05 ibv_rc_pingpong -g 0 -s 1048576 -n 200 -c; then
	sr_check_pingpong $name 1048576 200
	sr_check_stats $name $((1048576 * 200)) $RC_OK
	sr_expect_no_grep "$name: no invalid data reported" 'invalid data' "$SR_TMP/$name.srv.out"
fi
# Whatever the outcome, the counters say what happened (live ones if a side was killed).
expect_sum $name fault_drop 1
expect_sum $name fault_dup 1
expect_sum $name fault_reorder 1
expect_sum $name retransmits 1
expect_sum $name dup_requests 1
expect_sum $name seq_naks_sent 1

# --- RC, 4 KiB x 1000 (4 packets a message): many short messages, so many tail losses that
# only the retransmission timer can repair.
name=rc_4k_faults
if faulty $name 45 drop=0.05,dup=0.02,reorder=0.05 ibv_rc_pingpong -g 0 -s 4096 -n 1000; then
	sr_check_pingpong $name 4096 1000
	sr_check_stats $name $((4096 * 1000)) $RC_OK
fi
expect_sum $name fault_drop 1
expect_sum $name retransmits 1

# --- RC under corruption: one flipped bit per corrupted packet. The receiver must drop a
# corrupted packet (the header checks or the ICRC catch it: drop_opcode, drop_tver,
# drop_pad, drop_short, drop_icrc; drop_ride when the flip sets the carried-ACK bit of a
# softrdma request, which the parser checks before the ICRC) and the sender must resend it.
# Exception: the ICRC does not cover BTH byte 4 (FECN, BECN and resv6, where softrdma's
# in-band offer rides; RoCEv2 masks it as a variant field), so a flip there is accepted,
# harmlessly: FECN and BECN are not acted on, and a receiver keeps the offer it holds until two
# packets in a row change it (offer_kept). That is 8 bits of a 20-byte ACK (5%), far fewer of
# a data packet. Hence: dropped <= corrupted, and dropped >= 90% of corrupted; anything lower
# would mean corrupted packets got through.
name=rc_corrupt
CORRUPT_DROPS="drop_icrc drop_opcode drop_tver drop_pad drop_short drop_ride"
if faulty $name 45 corrupt=0.02 ibv_rc_pingpong -g 0 -s 65536 -n 200 -c; then
	sr_check_pingpong $name 65536 200
	sr_check_stats $name $((65536 * 200)) $RC_OK $CORRUPT_DROPS
	sr_expect_no_grep "$name: no invalid data reported" 'invalid data' "$SR_TMP/$name.srv.out"
	corrupted=$(sr_stat2 $name fault_corrupt)
	caught=0
	for c in $CORRUPT_DROPS; do caught=$((caught + $(sr_stat2 $name "$c"))); done
	sr_expect_ge "$name: corrupted packets injected" 1 "$corrupted"
	sr_expect_ge "$name: drop_icrc (both sides)" 1 "$(sr_stat2 $name drop_icrc)"
	if [ "$caught" -le "$corrupted" ] && [ $((caught * 10)) -ge $((corrupted * 9)) ]; then
		sr_ok "$name: $caught of $corrupted corrupted packets dropped on receipt"
	else
		sr_fail "$name: $corrupted corrupted packets sent, $caught dropped for a header or" \
			"ICRC error ($CORRUPT_DROPS): wanted between 90% and 100%"
	fi
fi

# --- UC and UD: reordering only, single-packet messages (see the top of this file).
name=uc_reorder
if faulty $name 60 reorder=0.05 ibv_uc_pingpong -g 0 -s 1024 -c; then
	sr_check_pingpong $name 1024 1000
	sr_check_stats $name $((1024 * 1000))
fi
expect_sum $name fault_reorder 1

name=ud_reorder
if faulty $name 60 reorder=0.05 ibv_ud_pingpong -g 0 -s 2048 -c; then
	sr_check_pingpong $name 2048 1000
	sr_check_stats $name $((2048 * 1000))
fi
expect_sum $name fault_reorder 1

sr_finish
