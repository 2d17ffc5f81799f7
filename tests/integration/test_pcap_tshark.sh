#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What softrdma puts on the wire is RoCEv2 that others decode: ibv_rc_pingpong and
# ibv_ud_pingpong run with the pcap tap on both sides (SOFTRDMA_PCAP), then every capture is
#   (a) checked by our own decoder, `softrdma pcap`: every ICRC verified, nothing malformed;
#   (b) decoded by Wireshark's tshark: every frame is InfiniBand (BTH), with no malformed
#       packet and no expert warning or error, and the BTH opcodes are exactly those the
#       program's traffic implies, in the numbers the device's own counters give.
# UDP ports: a device publishes its port in its GID; any port other than 4791 is given to
# both decoders (tshark: -d udp.port==PORT,infiniband).
#
# Env: TSHARK (default: tshark on PATH). Skipped (77) when tshark is not installed.

. "$(dirname "$0")/lib.sh"
need_build
need_cmd ibv_rc_pingpong ibv_ud_pingpong ss timeout
TSHARK=${TSHARK:-tshark}
need_cmd "$TSHARK"

# tshark warns on stderr when run as root; its stderr goes to a file, never into the data.
tshark_q() { "$TSHARK" "$@" 2>>"$SR_TMP/tshark.err"; }

# ports NAME: the UDP ports other than 4791 named by the GIDs both sides of NAME printed.
ports() {
	local g
	for g in $(sed -n 's/.*local address: .*GID \([0-9a-f:.]*\)$/\1/p' \
		"$SR_TMP/$1.srv.out" "$SR_TMP/$1.cli.out"); do
		"$SR" gid "$g" 2>/dev/null | sed -n 's/.*UDP port \([0-9]*\)$/\1/p'
	done | sort -u | grep -vx 4791
}

# opcode_count TXT OPCODE: frames of a tshark field dump (column 3) with that BTH opcode.
opcode_count() { awk -F'\t' -v o="$2" '$3 == o { n++ } END { print n + 0 }' "$1"; }

# check_capture NAME SIDE EXPECTED_OPCODES
# EXPECTED_OPCODES: "opcode:count ..." where count is a number, "acks" (= acks_sent +
# acks_rcvd - acks_rode_rcvd of that side: an ACK that rode in a request, param ack_ride, is
# no frame of its own) or "*" (any number); no other opcode may appear.
check_capture() {
	local name=$1 side=$2 expected=$3
	local pcap=$SR_TMP/$name.$side.pcap txt=$SR_TMP/$name.$side.txt
	local p decode=() pargs=() frames st tx rx n want op spec seen

	if [ ! -s "$pcap" ]; then
		sr_fail "$name $side: no capture written to $(basename "$pcap")"
		return
	fi
	for p in $(ports "$name"); do
		decode+=(-d "udp.port==$p,infiniband")
		pargs+=(-p "$p")
	done

	# (a) our decoder: every ICRC
	if [ -n "$(sr_pcap_cmd)" ]; then
		if "$SR" pcap "${pargs[@]}" "$pcap" >"$SR_TMP/$name.$side.srpcap" 2>&1; then
			sr_expect_grep "$name $side: softrdma pcap: every ICRC good, nothing malformed" \
				'bad=0 malformed=0' "$SR_TMP/$name.$side.srpcap"
		else
			sr_fail "$name $side: softrdma pcap ${pargs[*]} found bad packets:"
			sr_tail "$SR_TMP/$name.$side.srpcap" >&2
		fi
	fi

	# (b) tshark
	if ! tshark_q -r "$pcap" "${decode[@]}" -T fields -E separator=/t -e frame.number \
		-e frame.protocols -e infiniband.bth.opcode -e infiniband.bth.tver \
		-e infiniband.deth.q_key >"$txt"; then
		sr_fail "$name $side: tshark could not read $(basename "$pcap")"
		sr_tail "$SR_TMP/tshark.err" >&2
		return
	fi
	frames=$(wc -l <"$txt")
	st=$SR_TMP/$name.$side.stats
	tx=$(sr_stat "$st" tx_packets)
	rx=$(sr_stat "$st" rx_packets)
	sr_expect_eq "$name $side: frames captured = tx_packets + rx_packets" $((tx + rx)) "$frames"
	n=$(awk -F'\t' '$2 !~ /:infiniband(:|$)/' "$txt" | wc -l)
	sr_expect_eq "$name $side: frames not decoded as InfiniBand" 0 "$n"
	[ "$n" = 0 ] || awk -F'\t' '$2 !~ /:infiniband(:|$)/' "$txt" | head -3 | sed 's/^/  | /' >&2
	n=$(awk -F'\t' '$4 != "0"' "$txt" | wc -l)
	sr_expect_eq "$name $side: frames with BTH TVer other than 0" 0 "$n"
	tshark_q -r "$pcap" "${decode[@]}" -Y '_ws.malformed || _ws.expert.severity >= 0x600000' \
		-T fields -e frame.number -e _ws.expert.message >"$SR_TMP/$name.$side.expert"
	n=$(wc -l <"$SR_TMP/$name.$side.expert")
	sr_expect_eq "$name $side: malformed frames or expert warnings/errors" 0 "$n"
	[ "$n" = 0 ] || head -5 "$SR_TMP/$name.$side.expert" | sed 's/^/  | /' >&2

	# Opcodes: exactly the expected ones, in the expected numbers.
	seen=$(awk -F'\t' '{ print $3 }' "$txt" | sort -n | uniq -c | awk '{ printf "%s:%s ", $2, $1 }')
	echo "  $name $side: BTH opcodes (opcode:frames): $seen"
	set -f	# "*" is a count, not a glob
	for spec in $expected; do
		op=${spec%%:*}
		want=${spec#*:}
		[ "$want" = "*" ] && continue
		[ "$want" = acks ] && want=$(($(sr_stat "$st" acks_sent) + $(sr_stat "$st" acks_rcvd) -
			$(sr_stat "$st" acks_rode_rcvd)))
		sr_expect_eq "$name $side: frames with BTH opcode $op" "$want" "$(opcode_count "$txt" "$op")"
	done
	set +f
	n=$(awk -F'\t' -v e=" $expected " '{ if (index(e, " " $3 ":") == 0) n++ } END { print n + 0 }' "$txt")
	sr_expect_eq "$name $side: frames with an unexpected opcode" 0 "$n"
}
# The project's own decoder, when this build has it.
sr_pcap_cmd() { "$SR" help 2>&1 | grep -q '^  pcap ' && echo yes; }

# pp NAME PROG ARGS...: a pair with the pcap tap on both sides.
pp() {
	local name=$1
	shift
	SR_SRV_ENV=("SOFTRDMA_PCAP=$SR_TMP/$name.srv.pcap")
	SR_CLI_ENV=("SOFTRDMA_PCAP=$SR_TMP/$name.cli.pcap")
	sr_pair "$name" "$@"
	local rc=$?
	SR_SRV_ENV=()
	SR_CLI_ENV=()
	sr_show_stats "$name"
	return $rc
}

# retrans2 NAME: request packets both sides sent again. Loopback loses nothing, so a resend
# shows up in both captures (the sender's as sent, the receiver's as received) unless it
# arrived after the receiver had closed its socket.
retrans2() { sr_stat2 "$1" retransmits; }

# acks_bounds NAME SIDE: with retransmissions, stale responses are dropped and counted in
# drop_psn, not acks_rcvd: acks_sent + acks_rcvd <= ACK frames <= that + drop_psn, less the
# ACKs that rode in requests (acks_rode_rcvd, param ack_ride: counted in acks_rcvd, or in
# drop_psn when stale, and no frame of their own).
acks_bounds() {
	local st=$SR_TMP/$1.$2.stats n lo hi
	n=$(opcode_count "$SR_TMP/$1.$2.txt" 17)
	lo=$(($(sr_stat "$st" acks_sent) + $(sr_stat "$st" acks_rcvd) - $(sr_stat "$st" acks_rode_rcvd)))
	hi=$((lo + $(sr_stat "$st" drop_psn)))
	if [ "$n" -ge "$lo" ] && [ "$n" -le "$hi" ]; then
		sr_ok "$1 $2: $n ACK frames, within acks_sent + acks_rcvd [+ drop_psn] = $lo..$hi"
	else
		sr_fail "$1 $2: $n ACK frames, wanted acks_sent + acks_rcvd [+ drop_psn] = $lo..$hi"
	fi
}

# --- RC, 64-byte messages: one packet each, RC SEND ONLY (4) and RC ACKNOWLEDGE (17).
# Each capture holds both directions: 2 x 100 SEND ONLY, plus any resent. A side's own
# resends are in its capture; the peer's are too unless one arrived after this side had
# closed its socket (a tail probe answering the last message, seen in CI: 203 of 204).
name=rc_s64
if pp $name ibv_rc_pingpong -g 0 -s 64 -n 100; then
	sr_check_pingpong $name 64 100
	r=$(retrans2 $name)
	for side in srv cli; do
		if [ "$r" = 0 ]; then
			check_capture $name $side "4:200 17:acks"
		else
			echo "note: $name: $r retransmits (on a lossless loopback)"
			check_capture $name $side "4:* 17:*"
			sr_expect_range "$name $side: frames with BTH opcode 4 (200 + own resends .. 200 + all)" \
				$((200 + $(sr_side_stat $name $side retransmits))) $((200 + r)) \
				"$(opcode_count "$SR_TMP/$name.$side.txt" 4)"
			acks_bounds $name $side
		fi
	done
fi

# --- RC, 4 KiB messages at path MTU 1024: SEND FIRST (0), MIDDLE (1) x 2, LAST (2).
name=rc_s4096
if pp $name ibv_rc_pingpong -g 0 -s 4096 -n 20; then
	sr_check_pingpong $name 4096 20
	r=$(retrans2 $name)
	for side in srv cli; do
		if [ "$r" = 0 ]; then
			check_capture $name $side "0:40 1:80 2:40 17:acks"
		else
			# A resend restarts mid-message: only lower bounds then.
			echo "note: $name: $r retransmits (on a lossless loopback)"
			check_capture $name $side "0:* 1:* 2:* 17:*"
			acks_bounds $name $side
			for op in 0 2; do
				sr_expect_ge "$name $side: frames with BTH opcode $op" 40 \
					"$(opcode_count "$SR_TMP/$name.$side.txt" $op)"
			done
			sr_expect_ge "$name $side: frames with BTH opcode 1" 80 \
				"$(opcode_count "$SR_TMP/$name.$side.txt" 1)"
		fi
	done
fi

# --- UD, 64-byte datagrams: UD SEND ONLY (100), each with a DETH carrying the program's
# Q_Key 0x11111111; no ACKs.
name=ud_s64
if pp $name ibv_ud_pingpong -g 0 -s 64 -n 100; then
	sr_check_pingpong $name 64 100
	for side in srv cli; do
		check_capture $name $side "100:200"
		# (tshark 4.0 prints the 32-bit Q_Key with 16 hex digits)
		n=$(awk -F'\t' '$5 !~ /^0x0*11111111$/' "$SR_TMP/$name.$side.txt" | wc -l)
		sr_expect_eq "$name $side: UD frames without Q_Key 0x11111111 in their DETH" 0 "$n"
	done
fi

sr_finish
