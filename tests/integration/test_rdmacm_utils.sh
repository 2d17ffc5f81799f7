#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Debian's unmodified rdmacm-utils on softrdma's librdmacm + libibverbs, server and client as
# separate processes, first on loopback, then (as root) between two network namespaces joined
# by a veth pair, each side's device bound to its veth (SOFTRDMA_NETDEV):
#
#   rping -C 1000 -v -V   the client validates every echo (-V) and prints it (-v); every line
#                         it printed must be the server's line for the same iteration, and
#                         must be rping's own pattern
#   rping -S 65535        the largest buffer Debian's rping takes (it refuses 65536), validated
#   ucmatose              default (1 connection, 10 messages) and -c 10 -C 100
#   udaddy                UD through rdma_cm (SIDR), ibv_create_ah_from_wc on the server
#   cmtime -c 200         200 connections set up and torn down
#   rdma_server/client    the synchronous rdma_create_ep API
#   rdma_xserver/xclient  the same in RC mode (-c r), and in XRC mode (-c x: RDMA_PS_IB, an
#                         XRC_SEND QP to an XRC_RECV QP, the SRQ number in the REP)
#   mckey                 two receivers and a sender on one multicast group; each receiver
#                         exits 0 only after receiving every message
#
# Each program is bounded by `timeout`; the counters each process dumps at exit show the
# traffic crossed softrdma. Failure cases (no listener, peer killed, reject with private data)
# are tests/cm/test_cm_conn.c.

. "$(dirname "$0")/lib.sh"
need_build
need_cmd rping ucmatose udaddy cmtime rdma_server rdma_client mckey ss timeout python3
export LD_LIBRARY_PATH=$SR_BUILD_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# Where the two sides run. Loopback: here, on 127.0.0.1. Namespaces: set by ns_setup.
SRV_NS='' CLI_NS='' SRV_IP=127.0.0.1 CLI_IP=127.0.0.1 SRV_DEV='' CLI_DEV=''
MODE=lo


# side_run SIDE NAME SECS CMD...: CMD on SIDE (srv|cli) with that side's namespace and device,
# output in NAME.SIDE.out, counters in NAME.SIDE.stats.
side_run() {
	local side=$1 name=$2 secs=$3 ns dev
	shift 3
	if [ "$side" = srv ]; then ns=$SRV_NS dev=$SRV_DEV; else ns=$CLI_NS dev=$CLI_DEV; fi
	timeout -k 5 "$secs" ${ns:+ip netns exec "$ns"} env ${dev:+SOFTRDMA_NETDEV=$dev} \
		SOFTRDMA_STATS_DUMP="$SR_TMP/$name.$side.stats" stdbuf -oL -eL "$@" \
		>"$SR_TMP/$name.$side.out" 2>&1
}

# wait_udp PORT PID SECS: until the server (PID) has a UDP socket on PORT: 0, 1 timeout, 2 ended.
wait_udp() {
	local t0=$SECONDS
	while [ $((SECONDS - t0)) -lt "$3" ]; do
		[ -n "$(sr_in_ns "$SRV_NS" ss -Hlun "sport = :$1" 2>/dev/null)" ] && return 0
		kill -0 "$2" 2>/dev/null || return 2
		sleep 0.05
	done
	return 1
}

# cm_pair NAME PORT SECS "SERVER ARGS" "CLIENT ARGS": both sides must exit 0 (the server
# ends by itself after the client; it gets 20 s for that). With SRV_FOREVER=1 the server is
# one that never ends by itself (cmtime): it must still be running when the client is done,
# and is then stopped.
cm_pair() {
	local name=$MODE.$1 port=$2 secs=$3 srv=$4 cli=$5 srv_pid srv_rc cli_rc t0 w
	echo "--- $name: server '$srv', client '$cli'"
	t0=$(date +%s.%N)
	# shellcheck disable=SC2086
	side_run srv "$name" "$secs" $srv &
	srv_pid=$!
	SR_BG+=("$srv_pid")
	wait_udp "$port" "$srv_pid" 30
	w=$?
	if [ $w -ne 0 ]; then
		sr_fail "$name: the server $([ $w = 2 ] && echo "exited" || echo "did not listen within 30 s")" \
			"(UDP port $port)"
		sr_tail "$SR_TMP/$name.srv.out" >&2
		kill -TERM "$srv_pid" 2>/dev/null
		wait "$srv_pid" 2>/dev/null
		sr_forget_pid "$srv_pid"
		return 1
	fi
	# shellcheck disable=SC2086
	side_run cli "$name" "$secs" $cli
	cli_rc=$?
	if [ "${SRV_FOREVER:-0}" = 1 ]; then
		srv_rc=0
		kill -0 "$srv_pid" 2>/dev/null || { wait "$srv_pid"; srv_rc=$?; [ $srv_rc = 0 ] && srv_rc=1; }
	else
		sr_wait_pid "$srv_pid" $([ $cli_rc -eq 0 ] && echo 20 || echo 3)
		srv_rc=$?
	fi
	if [ $srv_rc -eq 255 ] || kill -0 "$srv_pid" 2>/dev/null; then
		# srv_pid is side_run's background subshell: stop its `timeout` (which stops the
		# server) too, or the server lives on to its time limit beside the next one
		kill -TERM "$(sr_prog_pid "$srv_pid")" "$srv_pid" 2>/dev/null
		wait "$srv_pid" 2>/dev/null
	fi
	sr_forget_pid "$srv_pid"
	if [ $cli_rc -ne 0 ] || [ $srv_rc -ne 0 ]; then
		sr_fail "$name: server exit $(sr_rc_text $srv_rc), client exit $(sr_rc_text $cli_rc)"
		{ sr_tail "$SR_TMP/$name.srv.out"; sr_tail "$SR_TMP/$name.cli.out"; } >&2
		return 1
	fi
	sr_ok "$name: both sides exited 0 in $(sr_elapsed "$t0") s"
	# Each side's soft NIC carried the connection's data plane (or, for cmtime, nothing).
	return 0
}

# rx_packets NAME SIDE: packets that side's soft NIC received (from its exit dump).
rx_packets() { sr_stat "$SR_TMP/$1.$2.stats" rx_packets; }

# check_rping NAME COUNT: the client printed COUNT echoes, in order, each equal to the line
# the server printed for that iteration and to rping's pattern ("rdma-ping-N: " then letters
# from 'A'+N cycling through 'A'..'z', up to the 64-byte buffer's last byte).
check_rping() {
	local name=$MODE.$1
	if python3 "$SR_SOURCE_DIR/tests/integration/rping_echoes.py" "$SR_TMP/$name.cli.out" "$SR_TMP/$name.srv.out" "$2"; then
		sr_ok "$name: $2 echoes printed by the client, each the server's line and rping's pattern"
	else
		sr_fail "$name: the client's echoes do not match what the server sent"
	fi
}

run_all() {
	local port
	port=$(sr_free_port "$SRV_NS") || { sr_fail "no free UDP port"; return; }
	if cm_pair rping "$port" 120 "rping -s -a $SRV_IP -p $port -v -C 1000" \
		"rping -c -a $SRV_IP -p $port -v -V -C 1000"; then
		check_rping rping 1000
		# Each iteration brings the server two SENDs of the client's, and the ACKs of its
		# own two, which the client may coalesce (one ACK for several requests; a run saw
		# 3999). On loopback the RDMA READ and WRITE go the direct way, without packets.
		sr_expect_ge "$MODE.rping: packets the server's soft NIC received" 2000 \
			"$(rx_packets "$MODE.rping" srv)"
	fi

	port=$(sr_free_port "$SRV_NS")
	if cm_pair rping_64k "$port" 120 "rping -s -a $SRV_IP -p $port -S 65535 -C 100" \
		"rping -c -a $SRV_IP -p $port -S 65535 -V -C 100"; then
		sr_expect_no_grep "$MODE.rping_64k: no data mismatch" 'mismatch' "$SR_TMP/$MODE.rping_64k.cli.out"
		# 100 READs of 64 KiB reach the server: as READ responses (between namespaces) or
		# read by the server itself over the same-host direct path (loopback; docs/direct.md).
		f=$SR_TMP/$MODE.rping_64k.srv.stats
		sr_expect_ge "$MODE.rping_64k: bytes the server's soft NIC received or read directly" \
			$((100 * 65535)) $(($(sr_stat "$f" rx_bytes) + $(sr_stat "$f" direct_bytes)))
	fi

	port=$(sr_free_port "$SRV_NS")
	cm_pair ucmatose "$port" 60 "ucmatose -p $port" "ucmatose -s $SRV_IP -p $port" &&
		sr_expect_grep "$MODE.ucmatose: client completed" '^test complete' "$SR_TMP/$MODE.ucmatose.cli.out"
	port=$(sr_free_port "$SRV_NS")
	cm_pair ucmatose_10x100 "$port" 120 "ucmatose -p $port -c 10 -C 100" \
		"ucmatose -s $SRV_IP -p $port -c 10 -C 100" &&
		sr_expect_grep "$MODE.ucmatose_10x100: client completed" '^test complete' \
			"$SR_TMP/$MODE.ucmatose_10x100.cli.out"

	# udaddy has no port option: it always uses 7174.
	if [ -n "$(sr_in_ns "$SRV_NS" ss -Huan "sport = :7174" 2>/dev/null)" ]; then
		sr_fail "$MODE.udaddy: UDP port 7174 (udaddy's fixed port) is in use"
	else
		cm_pair udaddy 7174 60 "udaddy -b $SRV_IP" "udaddy -s $SRV_IP" &&
			sr_expect_grep "$MODE.udaddy: client completed" '^test complete' "$SR_TMP/$MODE.udaddy.cli.out"
	fi

	port=$(sr_free_port "$SRV_NS")
	SRV_FOREVER=1 cm_pair cmtime "$port" 120 "cmtime -b $SRV_IP -p $port -c 200" \
		"cmtime -s $SRV_IP -p $port -c 200" &&
		sr_expect_grep "$MODE.cmtime: 200 connections timed" '^connect +: +[0-9.]+ ' \
			"$SR_TMP/$MODE.cmtime.cli.out"

	port=$(sr_free_port "$SRV_NS")
	cm_pair rdma_server "$port" 60 "rdma_server -s $SRV_IP -p $port" "rdma_client -s $SRV_IP -p $port" &&
		sr_expect_grep "$MODE.rdma_client: completed" 'rdma_client: end 0' "$SR_TMP/$MODE.rdma_server.cli.out"

	# rdma_xserver/rdma_xclient in RC mode (-c r): the client posts 16 bytes inline on a QP
	# that asked for no inline data (accepted, as by rxe).
	port=$(sr_free_port "$SRV_NS")
	cm_pair rdma_xserver "$port" 60 "rdma_xserver -p $port -c r" "rdma_xclient -s $SRV_IP -p $port -c r" &&
		sr_expect_grep "$MODE.rdma_xclient: completed" 'rdma_xclient: end 0' \
			"$SR_TMP/$MODE.rdma_xserver.cli.out"
	# ... and in XRC mode (-c x, RDMA_PS_IB): an XRC_SEND QP connected to an XRC_RECV QP, the
	# server's XRC SRQ number in the REP's private data, one send naming it. The server exits
	# 0 only once the SRQ's receive completed.
	port=$(sr_free_port "$SRV_NS")
	cm_pair rdma_xserver_xrc "$port" 60 "rdma_xserver -p $port -c x" \
		"rdma_xclient -s $SRV_IP -p $port -c x" &&
		sr_expect_grep "$MODE.rdma_xclient_xrc: completed" 'rdma_xclient: end 0' \
			"$SR_TMP/$MODE.rdma_xserver_xrc.cli.out" &&
		sr_expect_grep "$MODE.rdma_xserver_xrc: received" 'rdma_xserver: end 0' \
			"$SR_TMP/$MODE.rdma_xserver_xrc.srv.out"

	run_mckey
}

# mckey: receivers on both sides (two receivers), the sender on the client side.
run_mckey() {
	local name=$MODE.mckey grp=239.$((RANDOM % 200 + 10)).$((RANDOM % 256)).$((RANDOM % 250 + 1))
	local r1 r2 rc1 rc2 src t0=$SECONDS
	echo "--- $name: group $grp, receivers on $SRV_IP and $CLI_IP"
	side_run srv "$name.r1" 60 mckey -m "$grp" -b "$SRV_IP" -C 20 &
	r1=$!
	SR_BG+=("$r1")
	side_run cli "$name.r2" 60 mckey -m "$grp" -b "$CLI_IP" -C 20 &
	r2=$!
	SR_BG+=("$r2")
	while [ $((SECONDS - t0)) -lt 30 ]; do
		grep -q '^receiving data transfers' "$SR_TMP/$name.r1.srv.out" 2>/dev/null &&
			grep -q '^receiving data transfers' "$SR_TMP/$name.r2.cli.out" 2>/dev/null && break
		sleep 0.05
	done
	sleep 0.2	# the joins' IGMP reports (the kernel joins synchronously; a margin)
	side_run cli "$name.s" 60 mckey -m "$grp" -b "$CLI_IP" -s -C 20
	src=$?
	sr_wait_pid "$r1" 15
	rc1=$?
	sr_wait_pid "$r2" 15
	rc2=$?
	for p in "$r1" "$r2"; do kill -TERM "$p" 2>/dev/null; sr_forget_pid "$p"; done
	if [ $src -eq 0 ] && [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]; then
		sr_ok "$name: sender and both receivers exited 0 (each receiver got all 20 messages)"
	else
		sr_fail "$name: sender $(sr_rc_text $src), receiver 1 $(sr_rc_text $rc1), receiver 2 $(sr_rc_text $rc2)"
		{ sr_tail "$SR_TMP/$name.s.cli.out"; sr_tail "$SR_TMP/$name.r1.srv.out"; sr_tail "$SR_TMP/$name.r2.cli.out"; } >&2
	fi
}

echo "=== loopback"
run_all

# ---- two network namespaces joined by a veth pair (root only) ------------------------------
if ! sr_netns_usable; then
	echo "NOTE: not root or no network namespaces here: the namespace half is skipped"
	sr_finish
fi
if sr_netns_pair sca &&
	ip -n "$SR_NSA" route add 224.0.0.0/4 dev "$SR_VA" &&
	ip -n "$SR_NSB" route add 224.0.0.0/4 dev "$SR_VB"
then
	echo "=== namespaces $SR_NSA ($SR_NET.1 on $SR_VA) and $SR_NSB ($SR_NET.2 on $SR_VB)"
	SRV_NS=$SR_NSA CLI_NS=$SR_NSB SRV_IP=$SR_NET.1 CLI_IP=$SR_NET.2 SRV_DEV=$SR_VA CLI_DEV=$SR_VB MODE=ns
	run_all
else
	sr_fail "could not set up the namespaces and the veth pair"
fi
sr_finish
