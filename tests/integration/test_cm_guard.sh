#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The CM's guardian (docs/cm.md, "A process that dies"): a softrdma process speaking the IB CM
# (SOFTRDMA_CM_WIRE=ibcm) that dies with a connection up still gets its DREQ sent, by the
# guardian process (softrdma-cm-guard) librdmacm started, however it died. Between two
# namespaces joined by a veth pair, rping -s in A, rping -c -v -V in B (its device captures:
# SOFTRDMA_PCAP); after the client's 5th checked echo the server is:
#
#   kill      SIGKILLed: the client receives a DREQ from A's address and ends with an error
#             (rping says "wait for RDMA_WRITE_ADV state 10" and exits 0 anyway); the
#             guardian's log (SOFTRDMA_CM_GUARD=log) says it had 1 connection to end
#   term      SIGTERMed (rping has no handler: no exit code of its own runs): the same
#   noguard   SIGKILLed with SOFTRDMA_CM_GUARD=0 (the control: no guardian): no DREQ from A
#             reaches the client, which ends through the liveness probe between softrdma
#             processes (5 s without an answer) instead
#   clean     nothing: rping -C 10 on both sides ends normally, both exit 0 and the guardian
#             finds no connection up (it sends nothing)
#
# Each survivor must end, with rping's error message or a non-zero status, within BOUND (20)
# seconds of the kill (the control: 60 s). No process may be left in the
# server's namespace afterwards (the guardian leaves once it is done). Needs root; skips (77)
# otherwise.

. "$(dirname "$0")/lib.sh"
need_build
need_root
need_cmd rping timeout ss
[ -x "$SR_BUILD_DIR/lib/softrdma-cm-guard" ] || sr_fail "no $SR_BUILD_DIR/lib/softrdma-cm-guard"
BOUND=20
AFTER=5

sr_ibcm_netns cmg

# ns_quiet: until no process is left in the server's namespace (the guardian of the case
# before has sent its DREQs, for 1 s, and left; its DREQs would land in the next case's
# capture), at most 10 s; prints what is left
ns_quiet() {
	local left=
	for _ in $(seq 100); do
		left=$(ip netns pids "$SR_NSA" 2>/dev/null | tr '\n' ' ')
		[ -z "$left" ] && break
		sleep 0.1
	done
	echo "$left"
}

# run NAME SIGNAL GUARD: one case (SIGNAL: KILL, TERM, or none for the clean one)
run() {
	local name=$1 sig=$2 guard=$3 port spid cpid tk secs rc pings err count=1000000
	[ "$sig" = none ] && count=10
	ns_quiet >/dev/null
	# the control ends through the probe between softrdma processes (5 s), which a machine
	# under heavy load may stretch: its bound only keeps the test bounded
	local bound=$BOUND
	[ "$guard" = 0 ] && bound=60
	port=$(sr_free_port "$SR_NSA")
	echo "--- $name"
	# exec chain (ip netns exec, env): $! is rping itself
	sr_serve "$port" "$SR_NSA" sr_exec_to "$SR_TMP/$name.srv.out" ip netns exec "$SR_NSA" \
		env SOFTRDMA_NETDEV="$SR_VA" SOFTRDMA_CM_GUARD="$guard" \
		rping -s -a "$SRV_IP" -p "$port" -v -C "$count"
	spid=$SR_SERVE_PID
	timeout -s KILL $((bound + 60)) ip netns exec "$SR_NSB" env SOFTRDMA_NETDEV="$SR_VB" \
		SOFTRDMA_PCAP="$SR_TMP/$name.pcap" SOFTRDMA_CM_GUARD=0 \
		rping -c -a "$SRV_IP" -p "$port" -v -V -C "$count" >"$SR_TMP/$name.cli.out" 2>&1 &
	cpid=$!
	SR_BG+=("$cpid")
	if [ "$sig" = none ]; then
		sr_wait_pid "$cpid" 60
		rc=$?
		sr_wait_pid "$spid" 20
		sr_expect_eq "$name: server exit status" 0 "$?"
		sr_expect_eq "$name: client exit status" 0 "$rc"
		sr_expect_eq "$name: echoes" 10 "$(sr_rping_echoes "$SR_TMP/$name.cli.out")"
	else
		sr_wait_echoes "$SR_TMP/$name.cli.out" "$AFTER" "$cpid"
		pings=$(sr_rping_echoes "$SR_TMP/$name.cli.out")
		kill -"$sig" "$spid"
		tk=$(date +%s.%N)
		sr_wait_pid "$spid" 10 >/dev/null
		sr_wait_gone "$cpid" "$tk" "$bound"
		secs=$(sr_elapsed "$tk")
		if kill -0 "$cpid" 2>/dev/null; then
			sr_fail "$name: the client still runs $secs s after the server's SIG$sig (after $pings echoes)"
			kill -KILL "$cpid" 2>/dev/null
			wait "$cpid" 2>/dev/null
		else
			wait "$cpid"
			rc=$?
			# rping reports the end of its connection ("wait for RDMA_WRITE_ADV state 10",
			# 10 being its ERROR state) and still exits 0: the message is the error
			err=$(grep -m1 -oE "$SR_RPING_ERR" "$SR_TMP/$name.cli.out")
			if [ "$pings" -ge "$AFTER" ] && [ "$rc" != 137 ] && { [ "$rc" != 0 ] || [ -n "$err" ]; }; then
				sr_ok "$name: server SIG$sig after $pings echoes; the client ended (exit $rc) $secs s later: $err"
			else
				sr_fail "$name: server SIG$sig after $pings echoes; the client exited $rc $secs s later"
				sr_tail "$SR_TMP/$name.cli.out" >&2
			fi
		fi
		KTIMES+="  $name: $secs s"$'\n'
	fi
	sr_forget_pid "$spid"
	sr_forget_pid "$cpid"
	"$SR" pcap -v "$SR_TMP/$name.pcap" >"$SR_TMP/$name.pcap.txt" 2>&1
	local dreqs
	dreqs=$(grep -c " $SRV_IP:[0-9]* > .*CM DREQ" "$SR_TMP/$name.pcap.txt")
	case $name in
	kill | term)
		sr_expect_ge "$name: DREQs from the dead server's address in the client's capture" 1 "$dreqs"
		sr_expect_grep "$name: the guardian sent the DREQ of the connection" \
			'softrdma-cm-guard.*: the process ended with 1 connection\(s\) up' "$SR_TMP/$name.srv.out"
		;;
	noguard)
		sr_expect_eq "$name: DREQs from the dead server's address (no guardian)" 0 "$dreqs"
		sr_expect_no_grep "$name: no guardian ran" 'softrdma-cm-guard' "$SR_TMP/$name.srv.out"
		;;
	clean)
		for _ in $(seq 50); do
			grep -q 'softrdma-cm-guard' "$SR_TMP/$name.srv.out" && break
			sleep 0.1
		done
		sr_expect_grep "$name: the guardian found no connection up" \
			'softrdma-cm-guard.*: the process ended with no connection up' "$SR_TMP/$name.srv.out"
		;;
	esac
}

KTIMES=
run kill KILL log
run term TERM log
run noguard KILL 0
run clean none log
# The guardians are gone once done: nothing is left in the server's namespace.
left=$(ns_quiet)
sr_expect_eq "processes left in the server's namespace" "" "$left"
[ -z "$left" ] || ps -o pid,args -p "${left// /,}" >&2
printf 'the client ended after the server died:\n%s' "$KTIMES"
sr_finish
