#!/bin/bash
# SPDX-License-Identifier: MIT
#
# librdmacm over the IB CM (SOFTRDMA_CM_WIRE=ibcm, docs/cm.md): unmodified Debian programs
# between two softrdma processes in two network namespaces joined by a veth pair, each
# device on its veth, the connection set up with CM MADs on QP1 as the kernel's rdma_cm does:
#
#   rping -v -V -C 100    every echo checked (-V) and printed; each printed line must be the
#                         server's line for that iteration and rping's own pattern
#   ucmatose              1 connection, 10 messages each way
#   rdma_server/client    the synchronous rdma_create_ep API
#   ib_write_bw -R        perftest's rdma_cm mode (two connections, a listener replaced)
#   rdma_xserver -c x     XRC (RDMA_PS_IB): an XRC_SEND QP to an XRC_RECV QP and its SRQ
#   rstream               rsockets (65536 bytes x 100)
#   udaddy                UD ids: SIDR_REQ / SIDR_REP
#   no listener           rping to a port nobody listens on: REJECTED (invalid service ID) at once
#   nobody there          rping to an address no host has: UNREACHABLE after the REQ's retries
#
# The server side captures its packets (SOFTRDMA_PCAP): tshark must decode the CM MADs of the
# rping run (ConnectRequest, ConnectReply, ReadyToUse, DisconnectRequest, DisconnectReply),
# nothing malformed, and no private CM datagram may have been received (counter cm_msgs_rcvd).
# Needs root (namespaces); skips (77) otherwise.

. "$(dirname "$0")/lib.sh"
need_build
need_root
need_cmd rping ucmatose udaddy rstream rdma_xserver rdma_server rdma_client ib_write_bw tshark timeout python3 ss
sr_ibcm_netns ibc

# side NAME srv|cli SECS CMD...: CMD in that side's namespace on its veth, output in
# NAME.SIDE.out, counters in NAME.SIDE.stats; the server side also captures (NAME.pcap).
side() {
	local name=$1 s=$2 secs=$3 ns dev cap=()
	shift 3
	if [ "$s" = srv ]; then
		ns=$SR_NSA dev=$SR_VA cap=(SOFTRDMA_PCAP="$SR_TMP/$name.pcap")
	else
		ns=$SR_NSB dev=$SR_VB
	fi
	timeout -k 5 "$secs" ip netns exec "$ns" env SOFTRDMA_NETDEV="$dev" "${cap[@]}" \
		SOFTRDMA_STATS_DUMP="$SR_TMP/$name.$s.stats" stdbuf -oL -eL "$@" \
		>"$SR_TMP/$name.$s.out" 2>&1
}

# pair NAME PORT "SERVER" "CLIENT": the server, once its rdma_cm port is bound (a UDP socket
# of that port: the port space; sr_serve), then the client; both must exit 0.
pair() {
	local name=$1 port=$2 srv=$3 cli=$4 spid src crc
	echo "--- $name: server '$srv', client '$cli'"
	# shellcheck disable=SC2086
	sr_serve "$port" "$SR_NSA" side "$name" srv 90 $srv
	spid=$SR_SERVE_PID
	# shellcheck disable=SC2086
	side "$name" cli 90 $cli
	crc=$?
	sr_wait_pid "$spid" $([ $crc -eq 0 ] && echo 20 || echo 3)
	src=$?
	kill -TERM "$spid" 2>/dev/null
	sr_forget_pid "$spid"
	if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
		sr_fail "$name: server exit $(sr_rc_text $src), client exit $(sr_rc_text $crc)"
		{ sr_tail "$SR_TMP/$name.srv.out"; sr_tail "$SR_TMP/$name.cli.out"; } >&2
		return 1
	fi
	sr_ok "$name: both sides exited 0"
	# The IB CM, not the private protocol, set the connections up on both sides.
	sr_expect_eq "$name: private CM datagrams received by the server" 0 \
		"$(sr_stat "$SR_TMP/$name.srv.stats" cm_msgs_rcvd)"
	sr_expect_eq "$name: private CM datagrams received by the client" 0 \
		"$(sr_stat "$SR_TMP/$name.cli.stats" cm_msgs_rcvd)"
	sr_expect_ge "$name: CM MADs received by the server (REQ and RTU, or the SIDR_REQ)" \
		"${SRV_MADS:-2}" \
		"$(sr_stat "$SR_TMP/$name.srv.stats" cm_mads_rcvd)"
	sr_expect_ge "$name: CM MADs received by the client (the REP or SIDR_REP)" 1 \
		"$(sr_stat "$SR_TMP/$name.cli.stats" cm_mads_rcvd)"
}

port=$(sr_free_port "$SR_NSA")
if pair rping "$port" "rping -s -a $SRV_IP -p $port -v -C 100" \
	"rping -c -a $SRV_IP -p $port -v -V -C 100"; then
	if python3 "$SR_SOURCE_DIR/tests/integration/rping_echoes.py" "$SR_TMP/rping.cli.out" "$SR_TMP/rping.srv.out" 100; then
		sr_ok "rping: 100 echoes printed by the client, each the server's line and rping's pattern"
	else
		sr_fail "rping: the client's echoes do not match what the server sent"
	fi
	# Wireshark's InfiniBand dissector on the server's capture.
	f=$SR_TMP/rping.pcap
	tshark -r "$f" -Y infiniband.mad >"$SR_TMP/rping.mads.txt" 2>/dev/null
	tshark -r "$f" -V >"$SR_TMP/rping.pcap.v" 2>/dev/null
	for m in ConnectRequest ConnectReply ReadyToUse DisconnectRequest DisconnectReply; do
		sr_expect_ge "rping capture: tshark's CM $m" 1 "$(grep -c "CM: $m" "$SR_TMP/rping.mads.txt")"
	done
	sr_expect_no_grep "rping capture: nothing malformed for tshark" 'Malformed|Expert Info \(Error' \
		"$SR_TMP/rping.pcap.v"
	sr_expect_grep "rping capture: the REQ names rdma_cm's IP service ID" 'IP CM ServiceID' \
		"$SR_TMP/rping.pcap.v"
	sr_expect_grep "rping capture: ... for the port rping listens on" \
		"Destination Port: $(printf '0x%04x' "$port")" "$SR_TMP/rping.pcap.v"
	"$SR" pcap "$f" >"$SR_TMP/rping.pcap.sr" 2>&1
	sr_expect_grep "rping capture: softrdma pcap names the CM MADs" 'CM REQ x[0-9]+.*CM REP x[0-9]+' \
		"$SR_TMP/rping.pcap.sr"
fi

port=$(sr_free_port "$SR_NSA")
pair ucmatose "$port" "ucmatose -p $port" "ucmatose -s $SRV_IP -p $port" &&
	sr_expect_grep "ucmatose: client completed" '^test complete' "$SR_TMP/ucmatose.cli.out"

port=$(sr_free_port "$SR_NSA")
pair rdma_server "$port" "rdma_server -s $SRV_IP -p $port" "rdma_client -s $SRV_IP -p $port" &&
	sr_expect_grep "rdma_client: completed" 'rdma_client: end 0' "$SR_TMP/rdma_server.cli.out"

port=$(sr_free_port "$SR_NSA")
pair write_bw_R "$port" "ib_write_bw -R -x 0 -F -p $port -n 200 -s 65536" \
	"ib_write_bw -R -x 0 -F -p $port -n 200 -s 65536 $SRV_IP" &&
	sr_expect_grep "ib_write_bw -R: the result row" '^ *65536 +200 +[0-9.]+' \
		"$SR_TMP/write_bw_R.cli.out"

# XRC over rdma_cm (RDMA_PS_IB, the REQ's extended transport type), and rsockets.
port=$(sr_free_port "$SR_NSA")
pair rdma_xserver_xrc "$port" "rdma_xserver -p $port -c x" "rdma_xclient -s $SRV_IP -p $port -c x" &&
	sr_expect_grep "rdma_xserver -c x: the server's XRC SRQ received" 'rdma_xserver: end 0' \
		"$SR_TMP/rdma_xserver_xrc.srv.out"
port=$(sr_free_port "$SR_NSA")
pair rstream "$port" "rstream -b $SRV_IP -p $port -S 65536 -C 100" \
	"rstream -s $SRV_IP -p $port -S 65536 -C 100" &&
	sr_expect_grep "rstream: the transfer line" '^custom +64k +100 ' "$SR_TMP/rstream.cli.out"

# udaddy: UD through rdma_cm (SIDR_REQ / SIDR_REP; its fixed port 7174), the server answering
# each datagram through ibv_create_ah_from_wc.
SRV_MADS=1 pair udaddy 7174 "udaddy -b $SRV_IP" "udaddy -s $SRV_IP" &&
	sr_expect_grep "udaddy: client completed" '^test complete' "$SR_TMP/udaddy.cli.out" && {
	tshark -r "$SR_TMP/udaddy.pcap" -Y infiniband.mad >"$SR_TMP/udaddy.mads.txt" 2>/dev/null
	sr_expect_grep "udaddy capture: tshark's CM SIDR_REQ" 'CM: ServiceIDResReq$' "$SR_TMP/udaddy.mads.txt"
	sr_expect_grep "udaddy capture: tshark's CM SIDR_REP" 'CM: ServiceIDResReqResp' "$SR_TMP/udaddy.mads.txt"
}

# No listener on the port: the QP1 of the server's process (an rping server on another port)
# answers the REQ with a REJ (invalid service ID), and rping gives up at once.
port=$(sr_free_port "$SR_NSA")
port2=$(sr_free_port "$SR_NSA")
echo "--- no listener: rping -c to port $port2 of $SRV_IP, where a softrdma process listens on $port"
sr_serve "$port" "$SR_NSA" side nolisten srv 60 rping -s -a "$SRV_IP" -p "$port" -C 1
spid=$SR_SERVE_PID
t0=$(date +%s.%N)
# (At nice -10: the bound is on the CM, not on how soon a loaded machine runs rping.)
side nolisten cli 30 nice -n -10 rping -c -a "$SRV_IP" -p "$port2" -C 1
# (The client's time alone: the server's shutdown below, up to 5 s, is no part of it.)
ms=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%d", (b - a) * 1000 }')
kill -TERM "$spid" 2>/dev/null
sr_wait_pid "$spid" 5
sr_forget_pid "$spid"
sr_expect_grep "no listener: rping saw REJECTED" 'RDMA_CM_EVENT_REJECTED' "$SR_TMP/nolisten.cli.out"
if [ "$ms" -le 3000 ]; then sr_ok "no listener: rping ended after $ms ms"; else
	sr_fail "no listener: rping took $ms ms (wanted at most 3000)"; fi

# Nobody at the address: the REQ is retransmitted, then the connection is UNREACHABLE.
echo "--- nobody there: rping -c to $SR_NET.77"
t0=$(date +%s.%N)
side nobody cli 60 rping -c -a "$SR_NET.77" -p 7000 -C 1
sr_expect_grep "nobody there: rping saw UNREACHABLE" 'RDMA_CM_EVENT_UNREACHABLE' "$SR_TMP/nobody.cli.out"
sr_expect_ge "nobody there: the REQ was retried (client's CM MADs sent)" 10 \
	"$(sr_stat "$SR_TMP/nobody.cli.stats" cm_mads_sent)"
sr_finish
