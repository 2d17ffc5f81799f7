#!/bin/bash
# SPDX-License-Identifier: MIT
#
# librdmacm over the IB CM (SOFTRDMA_CM_WIRE=ibcm, docs/cm.md) between two softrdma processes
# on one host with zero configuration: each process has its own soft device (the first on
# 127.0.0.1, the next on another 127.x.y.z, docs/gid.md), both sides name 127.0.0.1. The
# requester asks the listening process where its QP1 is (QP1 QUERY to the rdma_cm port's CM
# socket) and sends its REQ there as a MAD:
#
#   rping -v -V -C 100    every echo checked; the REQ reached the server's QP1 as a MAD
#   ucmatose -c 10        ten connections at once
#   udaddy                UD ids: SIDR_REQ / SIDR_REP
#   cmtime -c 100         100 connections set up and torn down
#   rstream               rsockets (65536 bytes x 100)
#   no listener           rping to a port nobody listens on: REJECTED at once (the QUERY's
#                         ICMP port unreachable), as with the private protocol
#
# No root needed.

. "$(dirname "$0")/lib.sh"
need_build
need_cmd rping ucmatose udaddy cmtime rstream timeout python3 ss
export LD_LIBRARY_PATH=$SR_BUILD_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export SOFTRDMA_CM_WIRE=ibcm
IP=127.0.0.1

# side NAME srv|cli SECS CMD...: output in NAME.SIDE.out, counters in NAME.SIDE.stats.
side() {
	local name=$1 s=$2 secs=$3
	shift 3
	timeout -k 5 "$secs" env SOFTRDMA_STATS_DUMP="$SR_TMP/$name.$s.stats" stdbuf -oL -eL "$@" \
		>"$SR_TMP/$name.$s.out" 2>&1
}

# pair NAME PORT "SERVER" "CLIENT": the server, once its rdma_cm port is bound, then the
# client; both must exit 0 (FOREVER=1: a server that never ends by itself, stopped after the
# client). Then: the REQ (SIDR_REQ) went as a MAD to the server's QP1, found by a QUERY.
pair() {
	local name=$1 port=$2 srv=$3 cli=$4 spid src crc
	echo "--- $name: server '$srv', client '$cli'"
	# shellcheck disable=SC2086
	sr_serve "$port" "" side "$name" srv 90 $srv
	spid=$SR_SERVE_PID
	# shellcheck disable=SC2086
	side "$name" cli 90 $cli
	crc=$?
	if [ "${FOREVER:-0}" = 1 ]; then
		kill -0 "$spid" 2>/dev/null
		src=$?
		kill -TERM "$spid" 2>/dev/null
		sr_wait_pid "$spid" 5
	else
		sr_wait_pid "$spid" $([ $crc -eq 0 ] && echo 20 || echo 3)
		src=$?
		kill -TERM "$spid" 2>/dev/null
	fi
	sr_forget_pid "$spid"
	if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
		sr_fail "$name: server exit $(sr_rc_text $src), client exit $(sr_rc_text $crc)"
		{ sr_tail "$SR_TMP/$name.srv.out"; sr_tail "$SR_TMP/$name.cli.out"; } >&2
		return 1
	fi
	sr_ok "$name: both sides exited 0"
	sr_expect_ge "$name: the client asked where the server's QP1 is" 1 \
		"$(sr_side_stat "$name" cli cm_qp1_queries)"
	# (a server stopped by a signal dumps no counters)
	[ "${FOREVER:-0}" = 1 ] ||
		sr_expect_ge "$name: REQs (SIDR_REQs) the server's QP1 received as MADs" 1 \
			"$(sr_side_stat "$name" srv cm_reqs_rcvd)"
	sr_expect_ge "$name: CM MADs received by the client (REP or SIDR_REP)" 1 \
		"$(sr_side_stat "$name" cli cm_mads_rcvd)"
}

port=$(sr_free_port)
pair rping "$port" "rping -s -a $IP -p $port -v -C 100" "rping -c -a $IP -p $port -v -V -C 100" &&
	if python3 "$SR_SOURCE_DIR/tests/integration/rping_echoes.py" "$SR_TMP/rping.cli.out" \
		"$SR_TMP/rping.srv.out" 100; then
		sr_ok "rping: 100 echoes printed by the client, each the server's line and rping's pattern"
	else
		sr_fail "rping: the client's echoes do not match what the server sent"
	fi

port=$(sr_free_port)
pair ucmatose "$port" "ucmatose -p $port -c 10" "ucmatose -s $IP -p $port -c 10" &&
	sr_expect_grep "ucmatose: client completed" '^test complete' "$SR_TMP/ucmatose.cli.out"

pair udaddy 7174 "udaddy -b $IP" "udaddy -s $IP" &&
	sr_expect_grep "udaddy: client completed" '^test complete' "$SR_TMP/udaddy.cli.out"

port=$(sr_free_port)
FOREVER=1 pair cmtime "$port" "cmtime -b $IP -p $port" "cmtime -s $IP -p $port -c 100" && {
	sr_expect_grep "cmtime: 100 connections timed" '^connect +: +[0-9.]+ ' "$SR_TMP/cmtime.cli.out"
	sr_expect_no_grep "cmtime: no error event" '^event:' "$SR_TMP/cmtime.cli.out"
	sr_expect_ge "cmtime: CM MADs the client's QP1 received (a REP each, then DREQs/DREPs)" 100 \
		"$(sr_side_stat cmtime cli cm_mads_rcvd)"
}

port=$(sr_free_port)
pair rstream "$port" "rstream -b $IP -p $port -S 65536 -C 100" \
	"rstream -s $IP -p $port -S 65536 -C 100" &&
	sr_expect_grep "rstream: the transfer line" '^custom +64k +100 ' "$SR_TMP/rstream.cli.out"

# Nobody on the port: the QUERY comes back ICMP port unreachable, REJECTED (invalid service ID).
port=$(sr_free_port)
echo "--- no listener: rping -c to port $port of $IP"
t0=$(date +%s.%N)
# (At nice -10 as root: the bound is on the CM, not on how soon a loaded machine runs rping.)
NICE=()
[ "$(id -u)" = 0 ] && NICE=(nice -n -10)
side nolisten cli 30 "${NICE[@]}" rping -c -a "$IP" -p "$port" -C 1
sr_expect_grep "no listener: rping saw REJECTED" 'RDMA_CM_EVENT_REJECTED' "$SR_TMP/nolisten.cli.out"
ms=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%d", (b - a) * 1000 }')
if [ "$ms" -le 3000 ]; then sr_ok "no listener: rping ended after $ms ms"; else
	sr_fail "no listener: rping took $ms ms (wanted at most 3000)"; fi
sr_finish
