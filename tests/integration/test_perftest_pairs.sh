#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Two ib_write_bw pairs at once between two hosts: two network namespaces joined by a veth,
# softrdma bound to the veth on each side (SOFTRDMA_NETDEV), two servers in A and two clients in
# B, each pair on its own perftest TCP port, 64 KiB WRITEs. Both processes of a side share the
# veth address, so only one of them can own UDP 4791 there; the other one's device takes
# another port (docs/gid.md, "Two processes on one host"). Which process of a side gets 4791
# is a race, so a pair may join the 4791 owner of one side to the other port's process of the
# other side.
#
# Such a mixed pair failed before the fix (3 rounds of 5 started at once, here): the other
# port's device had its port GID (0000:...:PPPP:ffff:a.b.c.d) at index 0; perftest compares the
# two sides' GIDs after its TCP exchange, counts that one as IPv6 and ::ffff:a.b.c.d as IPv4,
# and all four processes gave up with "Found Incompatibility issue with GID types". Now GID 0
# is ::ffff:a.b.c.d on every IPv4 device and the port travels in the LID (docs/gid.md, "The LID
# carries the port").
#
# Rounds 3 and 6 connect through rdma_cm (-R), the others through perftest's TCP exchange: a
# mixed -R pair meets through the IB CM's port redirect, which finds the other port's device by
# the GID the CM takes (the table's last, its port GID: with GID 0 the forced -R round timed out).
# Odd rounds force the mixed pairing (server 1 started first, so it owns 4791 in A; client 2
# started before client 1 in B), and check it from the LIDs perftest prints (0 for the 4791
# owner, the port for the other); even rounds start everything at once, as a user would. For
# every round (SR_PAIRS_ROUNDS, default 6): all four processes exit 0 within their bound, none
# prints perftest's GID complaint, each client prints a result row whose bandwidth is above 0
# and below 100 Gb/s, each server received the payload, and no side counted a packet for a QP
# it does not have (drop_qpn: a packet that reached the other process of its host) or any other
# unexpected drop or error. Nothing asserts a speed.

. "$(dirname "$0")/lib.sh"
need_build
need_root
need_cmd ib_write_bw ip timeout stdbuf awk ss
sr_netns_usable || sr_skip "network namespaces unavailable"

sr_netns_pair pp 9000 || { sr_fail "could not set up the namespaces and the veth pair"; sr_finish; }
SRV_IP=$SR_NET.1
ROUNDS=${SR_PAIRS_ROUNDS:-6}
BOUND=40	# seconds for one process, under `timeout` (a round takes 2-10 s)
ITERS=2000
SIZE=65536
MAX_MBS=$(awk 'BEGIN { printf "%.1f", 100e9 / 8 / 1048576 }')
ARGS=()
# As in test_perftest: a retransmission is recovery; a QP perftest destroyed may still get its
# peer's last packets.
ALLOWED="drop_psn drop_qp_gone drop_qp_state"

# start NAME NS NETDEV PORT [HOST]: one side in the background (pid in START_PID); its output
# and counters in $SR_TMP/NAME.{out,stats}.
start() {
	local name=$1 ns=$2 dev=$3 port=$4 host=${5:-}
	timeout -k 5 "$BOUND" ip netns exec "$ns" env SOFTRDMA_NETDEV="$dev" \
		SOFTRDMA_STATS_DUMP="$SR_TMP/$name.stats" \
		"$SR" run -- stdbuf -oL -eL "${ARGS[@]}" -p "$port" ${host:+"$host"} \
		>"$SR_TMP/$name.out" 2>&1 &
	START_PID=$!
	SR_BG+=("$START_PID")
}

# udp_4791 NS PID: until a UDP socket of NS is bound to port 4791 (a device is up), while PID
# lives; 20 s at most.
udp_4791() {
	local t0=$SECONDS
	while [ $((SECONDS - t0)) -lt 20 ] && kill -0 "$2" 2>/dev/null; do
		[ -n "$(ip netns exec "$1" ss -Hlun "sport = :4791" 2>/dev/null)" ] && return 0
		sleep 0.05
	done
	return 1
}

# lid NAME: the LID the side NAME printed for itself ("local address: LID 0x53c1 ...").
lid() { awk '/local address: LID/ { print $4; exit }' "$SR_TMP/$1.out"; }

# bw NAME: the BW average (MB/s) of the client's result row, if plausible.
bw() {
	awk -v max="$MAX_MBS" -v size=$SIZE '$1 == size && $2 ~ /^[0-9]+$/ && NF >= 5 { bw = $4 }
		END { if (bw > 0 && bw < max) { print bw; exit 0 } exit 1 }' "$SR_TMP/$1.out"
}

# quiet: until no process of the last round is left in either namespace (10 s at most): after
# an rdma_cm round, the CM guardian of a process that ended with its connection up sends DREQs
# for another second (docs/cm.md), which the next round's owner of 4791 would count as drops.
quiet() {
	local t0=$SECONDS
	while [ $((SECONDS - t0)) -lt 10 ]; do
		[ -z "$(ip netns pids "$SR_NSA")$(ip netns pids "$SR_NSB")" ] && return 0
		sleep 0.1
	done
	echo "note: processes still in the namespaces after 10 s:" \
		"$(ip netns pids "$SR_NSA") $(ip netns pids "$SR_NSB")"
}

for ((r = 1; r <= ROUNDS; r++)); do
	quiet
	forced=$((r % 2))
	# Every third round connects through rdma_cm (-R): the mixed pairs then meet through the
	# IB CM's port redirect (docs/cm.md), which must find the other port's device by its GID.
	ARGS=(ib_write_bw -x 0 -s "$SIZE" -n "$ITERS" -F)
	cm=$((r % 3 == 0))
	[ $cm = 1 ] && ARGS+=(-R)
	if ! p1=$(sr_free_port "$SR_NSA") || ! p2=$(sr_free_port "$SR_NSA"); then
		sr_fail "no free port"
		break
	fi
	n1=r$r.p1 n2=r$r.p2
	t0=$(date +%s.%N)
	start $n1.srv "$SR_NSA" "$SR_VA" "$p1"; s1=$START_PID
	# perftest opens its device before it listens: server 1 has 4791 once it listens.
	[ $forced = 1 ] && { sr_wait_listen "$p1" "$s1" "$SR_NSA" 30 ||
		sr_fail "round $r: server 1 did not listen"; }
	start $n2.srv "$SR_NSA" "$SR_VA" "$p2"; s2=$START_PID
	if ! sr_wait_listen "$p1" "$s1" "$SR_NSA" 30 || ! sr_wait_listen "$p2" "$s2" "$SR_NSA" 30; then
		sr_fail "round $r: a server did not listen"
	fi
	if [ $forced = 1 ]; then
		start $n2.cli "$SR_NSB" "$SR_VB" "$p2" "$SRV_IP"; c2=$START_PID
		udp_4791 "$SR_NSB" "$c2" || sr_fail "round $r: client 2 has no device on 4791"
		start $n1.cli "$SR_NSB" "$SR_VB" "$p1" "$SRV_IP"; c1=$START_PID
	else
		start $n1.cli "$SR_NSB" "$SR_VB" "$p1" "$SRV_IP"; c1=$START_PID
		start $n2.cli "$SR_NSB" "$SR_VB" "$p2" "$SRV_IP"; c2=$START_PID
	fi
	bad=
	: "$c1" "$c2" "$s1" "$s2"	# (read through ${!pv} below)
	for v in c1:$n1.cli c2:$n2.cli s1:$n1.srv s2:$n2.srv; do
		pv=${v%%:*}
		pid=${!pv}
		wait "$pid"
		rc=$?
		sr_forget_pid "$pid"
		[ "$rc" = 0 ] || bad+=" ${v#*:} exit $(SR_PAIR_TIMEOUT=$BOUND sr_rc_text "$rc");"
		grep -q 'Incompatibility issue with GID' "$SR_TMP/${v#*:}.out" &&
			bad+=" ${v#*:}: perftest's GID complaint;"
	done
	bw1=$(bw $n1.cli) || bad+=" $n1.cli: no plausible result row;"
	bw2=$(bw $n2.cli) || bad+=" $n2.cli: no plausible result row;"
	lids="LIDs srv/cli: pair 1 $(lid $n1.srv)/$(lid $n1.cli), pair 2 $(lid $n2.srv)/$(lid $n2.cli)"
	if [ $forced = 1 ]; then
		# Mixed pairs: the 4791 owner (LID 0) with the other port's device (LID = port).
		[ "$(lid $n1.srv)" = 0000 ] && [ "$(lid $n2.cli)" = 0000 ] &&
			[ -n "$(lid $n1.cli)" ] && [ "$(lid $n1.cli)" != 0000 ] &&
			[ -n "$(lid $n2.srv)" ] && [ "$(lid $n2.srv)" != 0000 ] ||
			bad+=" not the mixed pairing wanted ($lids);"
	fi
	if [ -n "$bad" ]; then
		sr_fail "round $r (ports $p1 $p2):$bad after $(sr_elapsed "$t0") s"
		for v in $n1.srv $n1.cli $n2.srv $n2.cli; do
			sr_tail "$SR_TMP/$v.out" 12 >&2
		done
		continue
	fi
	sr_ok "round $r ($([ $forced = 1 ] && echo "mixed, forced" || echo "started at once")$([ $cm = 1 ] && echo ", rdma_cm");" \
		"$lids): both pairs done in $(sr_elapsed "$t0") s, $bw1 + $bw2 MB/s"
	for n in $n1 $n2; do
		sr_expect_ge "$n srv: rx_bytes (the payload)" $((ITERS * SIZE)) \
			"$(sr_stat "$SR_TMP/$n.srv.stats" rx_bytes)"
		# shellcheck disable=SC2086
		sr_check_stats $n 1 $ALLOWED
	done
done
sr_finish
