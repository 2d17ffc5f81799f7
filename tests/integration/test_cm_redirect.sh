#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Several softrdma processes on one fixed address over the IB CM (SOFTRDMA_CM_WIRE=ibcm,
# docs/cm.md "Several processes on one address: port and CM redirect"). In namespace A two
# servers sit on the same veth address: the first one's device owns UDP 4791, the second's
# takes another UDP port and names it in its GID (docs/gid.md). A client in namespace B sends
# its REQ (SIDR_REQ) to the address's RoCEv2 GID, i.e. to the first process's QP1:
#
#   rping x 2     rping servers on ports P1 (4791 owner) and P2 (the other); a client for
#                 P2 first (the owner redirects it: REJ reason 24, the client's REQ goes again
#                 to the second server's QP1), then one for P1 (no redirect); both -v -V -C 20,
#                 every echo checked
#   udaddy        SIDR: an rping server owns 4791, udaddy's server (port 7174) is the other
#                 process; the SIDR_REQ is redirected (SIDR_REP status 4) and followed
#   no listener   a REQ for a port nobody of the address listens on: REJECTED at once (the
#                 owner's QUERY finds nobody: REJ reason 8)
#
# Counters prove the path: the owner's cm_redirects_sent, the redirected client's
# cm_redirects_followed, no refused redirect, no private CM datagram between the hosts (the
# QP1 QUERY and REPLY stay between the two servers, on their address); tshark decodes the
# owner's capture (a ConnectReject among the MADs, nothing malformed). Needs root; skips (77)
# otherwise. Every process is bounded by `timeout`.

. "$(dirname "$0")/lib.sh"
need_build
need_root
need_cmd rping udaddy tshark timeout python3 ss
sr_ibcm_netns rdr

# srv NAME SECS CMD...: a server in namespace A on its veth, in the background (SPID: the
# `timeout` in front of it); output NAME.out, counters NAME.stats, capture NAME.pcap.
srv() {
	local name=$1 secs=$2
	shift 2
	timeout -k 5 "$secs" ip netns exec "$SR_NSA" env SOFTRDMA_NETDEV="$SR_VA" \
		SOFTRDMA_PCAP="$SR_TMP/$name.pcap" SOFTRDMA_STATS_DUMP="$SR_TMP/$name.stats" \
		stdbuf -oL -eL "$@" >"$SR_TMP/$name.out" 2>&1 &
	SPID=$!
	SR_BG+=("$SPID")
}

# cli NAME SECS CMD...: a client in namespace B on its veth, in the foreground; its status.
cli() {
	local name=$1 secs=$2
	shift 2
	timeout -k 5 "$secs" ip netns exec "$SR_NSB" env SOFTRDMA_NETDEV="$SR_VB" \
		SOFTRDMA_STATS_DUMP="$SR_TMP/$name.stats" stdbuf -oL -eL "$@" >"$SR_TMP/$name.out" 2>&1
}

# wait_udp PORT PID: until namespace A has a UDP socket on PORT (an rdma_cm listener's CM
# socket, or a device's data port), while PID lives (sr_wait_listen, 30 s). 0, or not.
wait_udp() { sr_wait_listen "$1" "$2" "$SR_NSA" 30; }

# owns4791 PID: the program under `timeout` PID holds UDP 4791 in namespace A.
owns4791() {
	local p
	p=$(sr_prog_pid "$1")
	[ -n "$p" ] && ip netns exec "$SR_NSA" ss -Hlunp 'sport = :4791' 2>/dev/null | grep -q "pid=$p,"
}

# done_srv NAME PID: the server ended by itself within 20 s with status 0.
done_srv() {
	local rc
	sr_wait_pid "$2" 20
	rc=$?
	sr_forget_pid "$2"
	if [ $rc -eq 0 ]; then sr_ok "$1: server exited 0"; else
		kill -TERM "$2" 2>/dev/null
		sr_fail "$1: server exit $(sr_rc_text $rc)"
		sr_tail "$SR_TMP/$1.out" >&2
	fi
}

# expect_rc NAME RC: a client's status.
expect_rc() {
	if [ "$2" -eq 0 ]; then sr_ok "$1: client exited 0"; else
		sr_fail "$1: client exit $(sr_rc_text "$2")"
		sr_tail "$SR_TMP/$1.out" >&2
	fi
}

# --- rping x 2: the second server is reached through the first one's redirect
p1=$(sr_free_port "$SR_NSA")
p2=$(sr_free_port "$SR_NSA")
echo "--- rping: servers on $SRV_IP ports $p1 (first: owns 4791) and $p2"
srv own 90 rping -s -a "$SRV_IP" -p "$p1" -v -C 20
own=$SPID
wait_udp "$p1" "$own" && wait_udp 4791 "$own" || sr_fail "rping server 1 did not bind $p1 and 4791"
srv other 90 rping -s -a "$SRV_IP" -p "$p2" -v -C 20
other=$SPID
wait_udp "$p2" "$other" || sr_fail "rping server 2 did not bind $p2"
if owns4791 "$own" && ! owns4791 "$other"; then
	sr_ok "the first server's device owns UDP 4791 on $SRV_IP, the second's does not"
else
	sr_fail "UDP 4791 on $SRV_IP: wanted the first server's, not the second's"
	ip netns exec "$SR_NSA" ss -Hlunp >&2
fi

cli rping_other 60 rping -c -a "$SRV_IP" -p "$p2" -v -V -C 20
expect_rc rping_other $?
cli rping_own 60 rping -c -a "$SRV_IP" -p "$p1" -v -V -C 20
expect_rc rping_own $?
done_srv other "$other"
done_srv own "$own"
for s in other own; do
	if python3 "$SR_SOURCE_DIR/tests/integration/rping_echoes.py" "$SR_TMP/rping_$s.out" \
		"$SR_TMP/$s.out" 20; then
		sr_ok "rping to the $s server: 20 echoes, each the server's line and rping's pattern"
	else
		sr_fail "rping to the $s server: the client's echoes do not match what the server sent"
	fi
done
sr_expect_ge "the 4791 owner redirected the REQ for port $p2 (cm_redirects_sent)" 1 \
	"$(sr_stat "$SR_TMP/own.stats" cm_redirects_sent)"
sr_expect_eq "the client of port $p2 followed one redirect (cm_redirects_followed)" 1 \
	"$(sr_stat "$SR_TMP/rping_other.stats" cm_redirects_followed)"
sr_expect_eq "the client of port $p1 was not redirected" 0 \
	"$(sr_stat "$SR_TMP/rping_own.stats" cm_redirects_followed)"
sr_expect_ge "the second server took the REQ (cm_reqs_rcvd)" 1 \
	"$(sr_stat "$SR_TMP/other.stats" cm_reqs_rcvd)"
sr_expect_eq "the second server redirected nothing" 0 \
	"$(sr_stat "$SR_TMP/other.stats" cm_redirects_sent)"
for f in own other rping_own rping_other; do
	sr_expect_eq "$f: no redirect refused" 0 "$(sr_stat "$SR_TMP/$f.stats" cm_redirects_refused)"
done
# Between the hosts only MADs: the clients received no private CM datagram. (The two servers
# did: the owner's QP1 QUERY to the second server and its REPLY, on their own address.)
for f in rping_own rping_other; do
	sr_expect_eq "$f: no private CM datagram received" 0 "$(sr_stat "$SR_TMP/$f.stats" cm_msgs_rcvd)"
done
sr_expect_ge "own: the QP1 REPLY of the second server received" 1 "$(sr_stat "$SR_TMP/own.stats" cm_msgs_rcvd)"
sr_expect_ge "other: the owner's QP1 QUERY received" 1 "$(sr_stat "$SR_TMP/other.stats" cm_msgs_rcvd)"
tshark -r "$SR_TMP/own.pcap" -Y infiniband.mad >"$SR_TMP/own.mads.txt" 2>/dev/null
tshark -r "$SR_TMP/own.pcap" -V >"$SR_TMP/own.pcap.v" 2>/dev/null
sr_expect_grep "the owner's capture: tshark's CM ConnectReject (the redirect)" 'CM: ConnectReject' \
	"$SR_TMP/own.mads.txt"
sr_expect_no_grep "the owner's capture: nothing malformed for tshark" 'Malformed|Expert Info \(Error' \
	"$SR_TMP/own.pcap.v"

# --- udaddy (SIDR): an rping server owns 4791, udaddy's server is the other process
p3=$(sr_free_port "$SR_NSA")
echo "--- udaddy: rping server on $SRV_IP:$p3 owns 4791, udaddy's server on 7174"
srv uown 90 rping -s -a "$SRV_IP" -p "$p3" -C 1
uown=$SPID
wait_udp "$p3" "$uown" && wait_udp 4791 "$uown" || sr_fail "rping server did not bind $p3 and 4791"
srv udaddy_srv 90 udaddy -b "$SRV_IP"
usrv=$SPID
wait_udp 7174 "$usrv" || sr_fail "udaddy's server did not bind 7174"
owns4791 "$uown" && ! owns4791 "$usrv" && sr_ok "udaddy: the rping server owns 4791, udaddy's does not" ||
	sr_fail "udaddy: 4791 is not the rping server's alone"
cli udaddy_cli 60 udaddy -s "$SRV_IP"
expect_rc udaddy_cli $?
sr_expect_grep "udaddy: client completed" '^test complete' "$SR_TMP/udaddy_cli.out"
done_srv udaddy_srv "$usrv"
sr_expect_eq "udaddy: the client followed one redirect (SIDR_REP status 4)" 1 \
	"$(sr_stat "$SR_TMP/udaddy_cli.stats" cm_redirects_followed)"

# --- no listener: a REQ for a port nobody of the address listens on, while the owner lives
p4=$(sr_free_port "$SR_NSA")
echo "--- no listener: rping -c to $SRV_IP:$p4"
t0=$(date +%s.%N)
cli nolisten 30 rping -c -a "$SRV_IP" -p "$p4" -C 1
sr_expect_grep "no listener: rping saw REJECTED" 'RDMA_CM_EVENT_REJECTED' "$SR_TMP/nolisten.out"
ms=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%d", (b - a) * 1000 }')
if [ "$ms" -le 3000 ]; then sr_ok "no listener: rping ended after $ms ms"; else
	sr_fail "no listener: rping took $ms ms (wanted at most 3000)"; fi
sr_expect_eq "no listener: nothing to follow" 0 "$(sr_stat "$SR_TMP/nolisten.stats" cm_redirects_followed)"

# The 4791 owner serves its own port still (and exits, dumping its counters).
cli uown_cli 60 rping -c -a "$SRV_IP" -p "$p3" -C 1
expect_rc uown_cli $?
done_srv uown "$uown"
sr_expect_ge "udaddy: the 4791 owner redirected the SIDR_REQ (cm_redirects_sent)" 1 \
	"$(sr_stat "$SR_TMP/uown.stats" cm_redirects_sent)"
sr_finish
