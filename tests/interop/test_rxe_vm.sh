#!/bin/bash
# SPDX-License-Identifier: MIT
#
# softrdma against the Linux kernel's SoftRoCE (rdma_rxe), on the wire, both directions.
#
# A qemu guest (TCG; Debian's own kernel from /boot with its rdma_rxe, booted from a busybox
# initramfs holding rdma-core's tools: tests/interop/rxe-vm/build-guest.sh, cached in the build
# directory) has its virtio-net on a tap device in a network namespace this test makes and
# removes. The guest adds rxe0 on its eth0; on the host, softrdma runs in the namespace bound to
# the tap (SOFTRDMA_NETDEV, UDP 4791). One boot runs every case of tests/interop/rxe-vm/cases,
# each in both directions (softrdma server + kernel client, and the reverse); the host hands
# the guest its half of each case through a 9p directory (rxe-vm/init). Per case: both exit
# statuses 0, the client's result line, and a capture of the tap (dumpcap) in which every
# RoCEv2 packet has a valid ICRC (`softrdma pcap`), packets flow both ways, and the case's
# opcodes appear. Cases that need the IB CM are listed as SKIPPED (see the table). Then a peer
# killed mid-run, both ways (rping_kill, below): the survivor must end with an error in time.
# The test bed's steps (image, namespace and tap, boot, stop) are tests/interop/rxe-vm/lib.sh.
#
# Env: RXEVM_CASES=ERE   only the cases whose name matches;
#      RXEVM_ALL=1       also run the cases waiting for the IB CM (reported, not judged);
#      RXEVM_ACCEL=tcg   qemu's accelerator (kvm works where it is available);
#      RXEVM_CASE_TIMEOUT=60 seconds per program;
#      RXEVM_DEADLINE=480    no case starts after this many seconds (CTest's TIMEOUT is 900);
#      RXEVM_KILL=0          no rping_kill cases; RXEVM_KILL_BOUND=20 their bound (s);
#      RXEVM_CM_GUARD=0      softrdma's killed server without its guardian (must fail);
#      SR_KEEP_TMP=1 keeps outputs, captures and the guest's console log.

. "$(dirname "$0")/../integration/lib.sh"
need_build
[ "$(id -u)" = 0 ] || sr_skip "needs root (a network namespace and a tap device for the guest)"
need_cmd qemu-system-x86_64 dumpcap ip cpio gzip modprobe depmod ldd timeout
sr_netns_usable || sr_skip "'ip netns add' does not work here"
[ -c /dev/net/tun ] || sr_skip "no /dev/net/tun (the guest's tap device)"

HERE=$SR_SOURCE_DIR/tests/interop/rxe-vm
GUEST=$SR_BUILD_DIR/rxe-vm-guest
CT=${RXEVM_CASE_TIMEOUT:-60}
DEADLINE=${RXEVM_DEADLINE:-480}
SHARE=$SR_TMP/jobs
mkdir -p "$SHARE"

. "$HERE/lib.sh"
rxevm_image "$GUEST"
rxevm_net rxevm
rxevm_boot "$SHARE" $((DEADLINE + 300))

# --- jobs for the guest
JOB=0
# guest_job SCRIPT: hands the guest a job; sets JID (its files: $SHARE/$JID.{out,rc,ready}).
guest_job() {
	JOB=$((JOB + 1))
	JID=$(printf 'job%03d' "$JOB")
	printf '%s\n' "$1" >"$SHARE/.$JID.tmp"
	mv "$SHARE/.$JID.tmp" "$SHARE/$JID.sh"
}
# guest_wait FILE SECONDS: until the guest writes FILE (0), or qemu ends or time runs out (1).
guest_wait() {
	local t0=$SECONDS
	while [ ! -e "$1" ]; do
		kill -0 "$QEMU" 2>/dev/null || return 1
		[ $((SECONDS - t0)) -lt "$2" ] || return 1
		sleep 0.1
	done
}
# host_cmd CMD...: CMD on softrdma in the namespace, bound to the tap, bounded in time. Its
# librdmacm speaks the IB CM (cm_wire=ibcm: CM MADs on QP1, the kernel's protocol); programs
# with perftest's TCP exchange or none do not use rdma_cm and are unaffected.
host_cmd() {
	ip netns exec "$NS" timeout -k 5 "$CT" env SOFTRDMA_NETDEV="$TAP" SOFTRDMA_CM_WIRE=ibcm \
		"$SR" run -- "$@"
}
# tap_dropped: packets the tap could not queue for qemu (the guest reads too slowly).
tap_dropped() { ip netns exec "$NS" cat "/sys/class/net/$TAP/statistics/tx_dropped" 2>/dev/null || echo 0; }
# uses_cm COMMAND: the program connects through rdma_cm (its server has no TCP listener to
# wait for: it gets a head start instead).
uses_cm() {
	case $1 in
	*" -R "* | rping* | ucmatose* | udaddy* | rdma_server* | rdma_client*) return 0 ;;
	*) return 1 ;;
	esac
}
# fill TEMPLATE GID ME SERVER PORT
fill() {
	local s=$1
	s=${s//@GID@/$2}
	s=${s//@ME@/$3}
	s=${s//@SERVER@/$4}
	s=${s//@PORT@/$5}
	printf '%s' "$s"
}

# guardians_done: until no softrdma CM guardian runs in the namespace (at most 5 s)
guardians_done() {
	local t0=$SECONDS
	while [ $((SECONDS - t0)) -lt 5 ]; do
		ip netns pids "$NS" 2>/dev/null | xargs -r ps -o comm= -p 2>/dev/null |
			grep -q '^softrdma-cm-gu' || return 0
		sleep 0.1
	done
}

# check_capture ID PCAP OPCODES: every ICRC valid, both directions, the opcodes present.
check_capture() {
	local id=$1 pcap=$2 ops=$3 dec=$SR_TMP/$1.pcap.txt op missing='' g2h h2g oneway=
	case $ops in oneway\ *) oneway=1 ops=${ops#oneway } ;; esac
	# dumpcap's last line: "Packets received/dropped on interface 'X': R/D (...)".
	grep -Eq "received/dropped on interface .*: [0-9]+/0 " "$SR_TMP/$id.dumpcap.out" ||
		CAPTURE_WHOLE="no: $id's capture lost packets or did not end cleanly"
	if ! "$SR" pcap -v "$pcap" >"$dec" 2>&1; then
		sr_fail "$id: capture: softrdma pcap found a bad ICRC, a malformed packet or no packet"
		grep -E 'BAD|malformed|RoCEv2 packets' "$dec" | head -5 | sed 's/^/  | /' >&2
		CAPTURE_WHOLE="no: $id's capture did not decode"
		return
	fi
	g2h=$(grep -c " $GUEST_IP:[0-9]* > $HOST_IP:" "$dec")
	h2g=$(grep -c " $HOST_IP:[0-9]* > $GUEST_IP:" "$dec")
	# softrdma->kernel packets after the kernel's last one on a data QP (its CM MADs on QP1 may
	# come later): they may find the kernel's QP in the error state or gone (rdma_disconnect
	# moves it to ERR before the DREQ leaves; its program ended) and be dropped, uncounted,
	# as rxe drops them for any stack (rxe_recv.c, check_type_state). Seen 2026-11-29: rping,
	# softrdma's two tail-loss resends of its last SEND and its DREP came after the kernel's
	# last ACK (the resends before the kernel's DREQ), and rcvd_pkts was 2 short of the
	# capture. None when the kernel sent nothing: a one-way case.
	local late
	late=$(awk -v g="^ *[0-9]+ $GUEST_IP:" -v h="^ *[0-9]+ $HOST_IP:" '$0 ~ g && $0 !~ / QP 0x000001 / { n = 0; seen = 1 } $0 ~ h { n++ } END { print seen ? n : 0 }' "$dec")
	CASE_PKTS="$g2h $h2g $late"
	# the capture holding the most packets from the kernel: the harness's own control below
	if [ "$g2h" -gt "${CONTROL_N:-0}" ]; then CONTROL_N=$g2h CONTROL_PCAP=$pcap; fi
	for op in $ops; do
		grep -q " > [0-9.:]* *${op/./ } " "$dec" || missing+=" $op"
	done
	# one-way (UC, UD perftest): only the client sends; the server's side is the other one
	local need_g2h=1 need_h2g=1
	if [ -n "$oneway" ]; then
		case $id in *.sr-server) need_h2g=0 ;; *) need_g2h=0 ;; esac
	fi
	if [ "$g2h" -ge "$need_g2h" ] && [ "$h2g" -ge "$need_h2g" ] && [ -z "$missing" ]; then
		sr_ok "$id: capture: $(tail -n1 "$dec" | sed 's/^[^:]*: //'); kernel->softrdma $g2h, softrdma->kernel $h2g"
	else
		sr_fail "$id: capture: kernel->softrdma $g2h, softrdma->kernel $h2g packets, missing opcodes:${missing:- none}"
		tail -n1 "$dec" | sed 's/^/  | /' >&2
	fi
}

# run_case NAME DIRECTION SERVER CLIENT EXPECT OPCODES
run_case() {
	local name=$1 dir=$2 srv=$3 cli=$4 want=$5 ops=$6
	local id=$name.$dir port pcap cap srv_rc=none cli_rc=none hpid t0 hout gout argv tapd0 tapd1
	t0=$(date +%s.%N)
	tapd0=$(tap_dropped)
	port=$(sr_free_port "$NS") || { sr_fail "$id: no free port"; return; }
	pcap=$SR_TMP/$id.pcap
	ip netns exec "$NS" timeout -s INT $((CT * 2 + 60)) dumpcap -i "$TAP" -B 64 -P -w "$pcap" \
		-f "udp port 4791" >"$SR_TMP/$id.dumpcap.out" 2>&1 &
	cap=$!
	SR_BG+=("$cap")
	for _ in $(seq 100); do
		grep -q "^Capturing on" "$SR_TMP/$id.dumpcap.out" && break
		sleep 0.1
	done
	if [ "$dir" = sr-server ]; then
		hout=$SR_TMP/$id.srv.out
		read -ra argv <<<"$(fill "$srv" 0 "$HOST_IP" "$HOST_IP" "$port")"
		host_cmd "${argv[@]}" >"$hout" 2>&1 &
		hpid=$!
		SR_BG+=("$hpid")
		if uses_cm "$srv"; then sleep 2; else sr_wait_listen "$port" "$hpid" "$NS" 30; fi
		guest_job "timeout $CT $(fill "$cli" 1 "$GUEST_IP" "$HOST_IP" "$port")"
		gout=$SHARE/$JID.out
		guest_wait "$SHARE/$JID.rc" $((CT + 30)) && cli_rc=$(cat "$SHARE/$JID.rc")
		sr_wait_pid "$hpid" 30
		srv_rc=$?
		[ "$srv_rc" = 255 ] && srv_rc="none (still running: killed)"
		sr_forget_pid "$hpid"
		cp "$gout" "$SR_TMP/$id.cli.out" 2>/dev/null
	else
		local hex
		hex=$(printf '%04X' "$port")
		# The guest's half: start the server, say when it listens (TCP; an rdma_cm server
		# gets 3 s), then wait for it.
		local listen="i=0; while ! grep -q ':$hex 00000000:0000 0A' /proc/net/tcp && kill -0 \$p 2>/dev/null && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i + 1)); done"
		uses_cm "$srv" && listen="sleep 3"
		guest_job "timeout $CT $(fill "$srv" 1 "$GUEST_IP" "$GUEST_IP" "$port") &
p=\$!
$listen
touch \${0%.run}.ready
wait \$p"
		gout=$SHARE/$JID.out
		if guest_wait "$SHARE/$JID.ready" 60; then
			hout=$SR_TMP/$id.cli.out
			read -ra argv <<<"$(fill "$cli" 0 "$HOST_IP" "$GUEST_IP" "$port")"
			host_cmd "${argv[@]}" >"$hout" 2>&1
			cli_rc=$?
		fi
		guest_wait "$SHARE/$JID.rc" $((CT + 30)) && srv_rc=$(cat "$SHARE/$JID.rc")
		cp "$gout" "$SR_TMP/$id.srv.out" 2>/dev/null
	fi
	# a softrdma program that ended with a connection up (perftest -R after its
	# rdma_disconnect) leaves its guardian sending the DREQ for 1 s (docs/cm.md): in the
	# case's capture, so that the kernel's counters match it
	guardians_done
	sleep 0.5
	kill -INT "$cap" 2>/dev/null
	sr_wait_pid "$cap" 15 >/dev/null
	sr_forget_pid "$cap"
	local secs
	secs=$(sr_elapsed "$t0")
	if [ "$srv_rc" = 0 ] && [ "$cli_rc" = 0 ]; then
		sr_ok "$id: server and client exit 0 ($secs s)"
	else
		sr_fail "$id: server exit $srv_rc, client exit $cli_rc ($secs s)"
		sr_tail "$SR_TMP/$id.srv.out" 10 >&2
		sr_tail "$SR_TMP/$id.cli.out" 10 >&2
	fi
	sr_expect_grep "$id: client result" "$want" "$SR_TMP/$id.cli.out"
	CAPTURE_WHOLE=yes CASE_PKTS=
	check_capture "$id" "$pcap" "$ops"
	tapd1=$(tap_dropped)
	[ -z "$CASE_PKTS" ] || ACCOUNT+=("$id $JID $CASE_PKTS $((tapd1 - tapd0)) ${CAPTURE_WHOLE// /_}")
	TIMES+="  $id: $secs s"$'\n'
}

CAPTURE_WHOLE=yes CONTROL_PCAP=
ACCOUNT=()	# per case run: "ID JOB G2H H2G TAP_TX_DROPPED_DELTA WHOLE" (see the end)
trim() { sed 's/^[[:space:]]*//; s/[[:space:]]*$//' <<<"$1"; }
TIMES=
SKIPPED=
while IFS='|' read -r name status srv cli want ops; do
	name=$(trim "$name")
	case $name in '' | '#'*) continue ;; esac
	[ -z "${RXEVM_CASES:-}" ] || [[ $name =~ $RXEVM_CASES ]] || continue
	srv=$(trim "$srv") cli=$(trim "$cli") ops=$(trim "$ops") status=$(trim "$status")
	want=$(trim "$want")
	failures_before=$SR_FAILURES
	dirs="sr-server rxe-server"
	case $status in
	run) ;;
	run-sr-server)
		dirs=sr-server
		SKIPPED+=" $name.rxe-server"
		;;
	wait-ibcm)
		if [ "${RXEVM_ALL:-0}" != 1 ]; then
			SKIPPED+=" $name"
			continue
		fi
		;;
	*) sr_fail "case $name: unknown status '$status'"; continue ;;
	esac
	for dir in $dirs; do
		if [ "$(awk -v a="$SR_T0" -v b="$(date +%s.%N)" -v d="$DEADLINE" 'BEGIN { print (b - a > d) }')" = 1 ]; then
			sr_fail "$name.$dir: not run: the test's time budget (RXEVM_DEADLINE=$DEADLINE s) is spent"
			continue
		fi
		run_case "$name" "$dir" "$srv" "$cli" "$want" "$ops"
	done
	if [ "$status" = wait-ibcm ]; then
		# Reported, not judged: these fail until softrdma speaks the IB CM.
		echo "note: $name (waits for the IB CM) ran: $((SR_FAILURES - failures_before)) failed check(s), not counted"
		SR_FAILURES=$failures_before
	fi
done <"$HERE/cases"

# --- a peer that dies mid-run (docs/interop.md, "A peer that dies"): rping with every echo
# checked, one side SIGKILLed after the client's KILL_AFTER-th echo; the survivor must end
# with an error (rping's message, or a non-zero exit status that is not its `timeout`'s)
# within KILL_BOUND seconds.
#  rping_kill.sr-server   the kernel's rping -c against softrdma's rping -s, which is killed:
#                         softrdma's guardian (docs/cm.md, "A process that dies") sends the
#                         DREQ the process can no longer send; the kernel's rping gets
#                         DISCONNECTED. (Without it the kernel client waits for a receive
#                         for ever: its QP has nothing outstanding to retry.)
#  rping_kill.rxe-server  softrdma's rping -c against the kernel's rping -s, killed in the
#                         guest: the kernel destroys the dead process's ids and sends a DREQ.
# RXEVM_KILL=0 skips them; RXEVM_KILL_BOUND (s, default 20) is the bound; RXEVM_CM_GUARD=0
# runs softrdma's server without its guardian (the control: rping_kill.sr-server must fail).
KILL_BOUND=${RXEVM_KILL_BOUND:-20}
KILL_AFTER=5
KT=$((KILL_BOUND + 40))	# the survivor's own timeout: a hang ends as 124, a failure
# judge ID RC SECS PINGS OUT: the survivor's end
kill_judge() {
	local id=$1 rc=$2 secs=$3 pings=$4 out=$5
	if [ "$pings" -lt "$KILL_AFTER" ]; then
		sr_fail "$id: the run never got going ($pings echoes before the kill)"
		sr_tail "$out" 10 >&2
		return
	fi
	# rping reports the end of its connection ("wait for RDMA_WRITE_ADV state 10", 10 being
	# its ERROR state) and still exits 0: that message, or a non-zero status, is the error
	local err
	err=$(grep -m1 -oE "$SR_RPING_ERR" "$out")
	[ "$rc" = 0 ] && [ -n "$err" ] && rc="0 with an error message"
	case $rc in
	none) sr_fail "$id: the survivor still runs $secs s after its peer was killed (a hang)" ;;
	0) sr_fail "$id: the survivor exited 0 with no error after its peer was killed mid-run ($secs s)" ;;
	124 | 137 | 143) sr_fail "$id: the survivor hung until its timeout (exit $rc, $secs s)" ;;
	*)
		if [ "$(awk -v s="$secs" -v b="$KILL_BOUND" 'BEGIN { print (s <= b) }')" = 1 ]; then
			sr_ok "$id: peer killed after $pings echoes; the survivor ended (exit $rc) in $secs s (bound $KILL_BOUND s): $err"
		else
			sr_fail "$id: the survivor ended with exit $rc, but only $secs s after the kill (bound $KILL_BOUND s)"
		fi
		;;
	esac
	KILL_TIMES+="  $id: $secs s"$'\n'
}
KILL_TIMES=
AFTER_CASES=final	# the job after the table's cases: the last case's counters end there
if [ "${RXEVM_KILL:-1}" != 0 ] &&
	[ "$(awk -v a="$SR_T0" -v b="$(date +%s.%N)" -v d="$DEADLINE" 'BEGIN { print (b - a > d) }')" = 1 ]; then
	sr_fail "rping_kill: not run: the test's time budget (RXEVM_DEADLINE=$DEADLINE s) is spent"
elif [ "${RXEVM_KILL:-1}" != 0 ]; then
	AFTER_CASES=$(printf 'job%03d' $((JOB + 1)))
	# (a) softrdma's server killed
	id=rping_kill.sr-server
	port=$(sr_free_port "$NS")
	# exec chain (ip netns exec, env, softrdma run): $! is rping itself
	ip netns exec "$NS" env SOFTRDMA_NETDEV="$TAP" SOFTRDMA_CM_WIRE=ibcm SOFTRDMA_CM_GUARD="${RXEVM_CM_GUARD:-log}" \
		"$SR" run -- rping -s -a "$HOST_IP" -p "$port" -v >"$SR_TMP/$id.srv.out" 2>&1 &
	hpid=$!
	SR_BG+=("$hpid")
	sleep 2
	guest_job "timeout $KT rping -c -a $HOST_IP -p $port -v -V -C 1000000"
	gout=$SHARE/$JID.out
	sr_wait_echoes "$gout" "$KILL_AFTER" "$hpid" "$SHARE/$JID.rc"
	pings=$(sr_rping_echoes "$gout")
	kill -KILL "$hpid" 2>/dev/null
	tk=$(date +%s.%N)
	rc=none
	while [ ! -e "$SHARE/$JID.rc" ] && kill -0 "$QEMU" 2>/dev/null &&
		[ "$(awk -v a="$tk" -v b="$(date +%s.%N)" -v k="$KT" 'BEGIN { print (b - a < k + 15) }')" = 1 ]; do
		sleep 0.05
	done
	secs=$(sr_elapsed "$tk")
	[ -e "$SHARE/$JID.rc" ] && rc=$(cat "$SHARE/$JID.rc")
	wait "$hpid" 2>/dev/null
	sr_forget_pid "$hpid"
	cp "$gout" "$SR_TMP/$id.cli.out" 2>/dev/null
	kill_judge "$id" "$rc" "$secs" "$pings" "$SR_TMP/$id.cli.out"
	# the guardian's own account (SOFTRDMA_CM_GUARD=log: on the server's standard error);
	# the kernel answers with its DREP once its rping destroys the id
	if [ "${RXEVM_CM_GUARD:-log}" = log ]; then
		for _ in $(seq 50); do
			grep -q 'DREQ(s) answered' "$SR_TMP/$id.srv.out" && break
			sleep 0.1
		done
		sr_expect_grep "$id: softrdma's guardian sent the DREQ of the connection" \
			'softrdma-cm-guard.*: the process ended with 1 connection\(s\) up' "$SR_TMP/$id.srv.out"
		sr_expect_grep "$id: the kernel's rping was told (DISCONNECTED)" 'DISCONNECT' "$SR_TMP/$id.cli.out"
		echo "$id: $(grep -m1 'DREQ(s) answered' "$SR_TMP/$id.srv.out")"
	fi

	# (b) the kernel's server killed
	id=rping_kill.rxe-server
	port=$(sr_free_port "$NS")
	guest_job "rping -s -a $GUEST_IP -p $port -v &
p=\$!
sleep 3
touch \${0%.run}.ready
i=0; while [ ! -e \${0%.run}.kill ] && [ \$i -lt $((KT * 10)) ]; do sleep 0.1; i=\$((i + 1)); done
kill -KILL \$p
wait \$p
echo \"rping -s: exit \$? (killed)\""
	gout=$SHARE/$JID.out
	if guest_wait "$SHARE/$JID.ready" 60; then
		ip netns exec "$NS" env SOFTRDMA_NETDEV="$TAP" SOFTRDMA_CM_WIRE=ibcm timeout -s KILL $((KT + 60)) \
			"$SR" run -- rping -c -a "$GUEST_IP" -p "$port" -v -V -C 1000000 >"$SR_TMP/$id.cli.out" 2>&1 &
		cpid=$!
		SR_BG+=("$cpid")
		sr_wait_echoes "$SR_TMP/$id.cli.out" "$KILL_AFTER" "$cpid"
		pings=$(sr_rping_echoes "$SR_TMP/$id.cli.out")
		touch "$SHARE/$JID.kill"
		tk=$(date +%s.%N)
		rc=none
		sr_wait_gone "$cpid" "$tk" "$KT"
		secs=$(sr_elapsed "$tk")
		if kill -0 "$cpid" 2>/dev/null; then
			kill -KILL "$cpid" 2>/dev/null
			wait "$cpid" 2>/dev/null
		else
			wait "$cpid"
			rc=$?
		fi
		sr_forget_pid "$cpid"
		kill_judge "$id" "$rc" "$secs" "$pings" "$SR_TMP/$id.cli.out"
	else
		sr_fail "$id: the guest's rping -s did not start"
		touch "$SHARE/$JID.kill"
	fi
	guest_wait "$SHARE/$JID.rc" 30
	cp "$gout" "$SR_TMP/$id.srv.out" 2>/dev/null
fi

# --- stop the guest
rxevm_stop
if [ -s "$SHARE/guest-counters.txt" ]; then
	echo "kernel rxe0 counters: $(grep -v ' 0$' "$SHARE/guest-counters.txt" | tr '\n' ' ')"
fi
# The kernel's own view of the same packets, case by case (the guest's counters before each
# job, and at the end): rxe counts a packet in rcvd_pkts only once its headers and its ICRC
# checked out (rxe_rcv), so every packet softrdma sent in a case must be counted there, unless
# the tap dropped it before the guest read it or the guest's eth0 did (both counted: a UC or UD
# sender outruns the emulated guest); and all the kernel sent must be in the capture.
counters() { [ -s "$SHARE/$1.counters" ] && cat "$SHARE/$1.counters"; }
for ((i = 0; i < ${#ACCOUNT[@]}; i++)); do
	read -r id job g2h h2g late tapd whole <<<"${ACCOUNT[i]}"
	next=$AFTER_CASES
	[ $((i + 1)) -lt ${#ACCOUNT[@]} ] && next=$(awk '{ print $2 }' <<<"${ACCOUNT[i + 1]}")
	if [ "$whole" != yes ]; then
		echo "note: $id: kernel counters not compared (${whole//_/ })"
		continue
	fi
	if ! a=$(counters "$job") || ! b=$(counters "$next"); then
		sr_fail "$id: the guest's counters before $job or $next are missing"
		continue
	fi
	read -r r0 s0 d0 <<<"$a"
	read -r r1 s1 d1 <<<"$b"
	rcvd=$((r1 - r0)) sent=$((s1 - s0)) gdrop=$((d1 - d0))
	# Exact when nothing was dropped; the drop counters also count packets that are not
	# RoCE (ARP, IPv6 neighbour discovery), so with drops the captured count lies between.
	if { [ $((tapd + gdrop)) = 0 ] && [ "$rcvd" -le "$h2g" ] && [ $((rcvd + late)) -ge "$h2g" ] ||
		{ [ $((tapd + gdrop)) != 0 ] && [ "$rcvd" -le "$h2g" ] && [ $((rcvd + tapd + gdrop + late)) -ge "$h2g" ]; }; } &&
		[ "$sent" = "$g2h" ]; then
		drops=
		[ "$rcvd" = "$h2g" ] || drops=" ($late sent after the kernel's last data packet; dropped before rxe: tap $tapd, guest eth0 $gdrop, any packet)"
		sr_ok "$id: kernel accepted what softrdma sent: rcvd_pkts +$rcvd of $h2g captured$drops; sent_pkts +$sent = $g2h captured"
	else
		sr_fail "$id: kernel rcvd_pkts +$rcvd (tap dropped $tapd, guest eth0 $gdrop; $late sent after the kernel's last data packet) for $h2g softrdma->kernel packets captured; sent_pkts +$sent for $g2h captured (a difference: packets the kernel refused, e.g. for a bad ICRC)"
	fi
done
# A control of the ICRC check itself: one payload bit of a kernel packet flipped in a copy of
# a capture must make `softrdma pcap` report exactly one bad ICRC.
if [ -n "$CONTROL_PCAP" ]; then
	if python3 - "$CONTROL_PCAP" "$SR_TMP/control.pcap" "$GUEST_IP" <<'PY'
import socket, struct, sys
src, dst, guest = sys.argv[1], sys.argv[2], socket.inet_aton(sys.argv[3])
d = bytearray(open(src, "rb").read())
end = "<" if d[:4] == b"\xd4\xc3\xb2\xa1" else ">"
off = 24
while off + 16 <= len(d):
    incl = struct.unpack(end + "I", d[off + 8:off + 12])[0]
    pkt = off + 16
    # Ethernet (14) + IPv4 (20, no options) + UDP (8) + BTH (12) + some payload + ICRC (4)
    if incl > 14 + 20 + 8 + 12 + 8 and d[pkt + 12:pkt + 14] == b"\x08\x00" and d[pkt + 26:pkt + 30] == guest:
        d[pkt + 14 + 20 + 8 + 12 + 2] ^= 0x10
        open(dst, "wb").write(d)
        sys.exit(0)
    off = pkt + incl
sys.exit(1)
PY
	then
		"$SR" pcap "$SR_TMP/control.pcap" >"$SR_TMP/control.txt" 2>&1
		rc=$?
		if [ "$rc" != 0 ] && grep -q " bad=1 " "$SR_TMP/control.txt"; then
			sr_ok "control: one flipped bit in a kernel packet is caught (softrdma pcap exit $rc, bad=1)"
		else
			sr_fail "control: one flipped bit in a kernel packet was not caught (exit $rc): $(tail -n1 "$SR_TMP/control.txt")"
		fi
	else
		sr_fail "control: no kernel packet with a payload in $CONTROL_PCAP"
	fi
fi
if grep -Eq 'Oops|BUG:|Call Trace|panic' "$SR_TMP/console.log"; then
	sr_fail "guest console shows a kernel Oops/BUG/panic"
	grep -E -m5 'Oops|BUG:|Call Trace|panic' "$SR_TMP/console.log" | sed 's/^/  | /' >&2
fi
echo "times (shared machine; guest boot $BOOT_S s, $RXEVM_ACCEL):"
printf '%s' "$TIMES"
[ -z "$KILL_TIMES" ] || printf 'a peer killed mid-run, the survivor ended after:\n%s' "$KILL_TIMES"
[ -z "$SKIPPED" ] || echo "SKIPPED (see their status in tests/interop/rxe-vm/cases; RXEVM_ALL=1 runs the wait-ibcm ones):$SKIPPED"
sr_finish
