#!/bin/bash
# SPDX-License-Identifier: MIT
#
# ulp/rtrs (docs/rtrs.md): the library's hygiene, then an RTRS server and client as two
# processes on loopback over softrdma, one session of two paths (the server listens on two
# ports), 10,000 random READs and WRITEs of 512 B .. max IO with every byte checked against the
# client's mirror, with each multipath policy; round-robin must use both paths about equally.
# Then a hostile client (rtrs-test hostile, through a raw test hook of the library): a chunk id
# >= the queue depth, an offset outside the chunk, a user header longer than its offset, a READ
# descriptor longer than a chunk, a READ with more descriptors than the server takes (none is
# valid: the kernel's client sends RNBD's FLUSH so): each closes the path (the server
# says which check), the client reconnects and a byte-checked WRITE+READ works after each.
# always_invalidate (the server's default): the policy runs above are with it on, one more
# round-robin run with it off (rtrs-test server -i 0); chunk keys renewed only when on. The
# min-latency run and the one with always_invalidate off register the client's buffers with
# the session (rtrs-test client -Z, rtrs_clt_reg_buf: WRITEs gathered from them, one-piece
# READs landing in them), the min-inflight run all of its memory (-O: implicit On-Demand
# Paging, the same zero copy for buffers allocated one by one); the others copy through the
# session's bounce buffers. Then
# `rtrs-test oldkey`: after a WRITE's response, a plain RDMA WRITE with the key that request
# used gets a remote access error and the chunk is unchanged (read back through the other
# path); against the server with it off, the same WRITE lands (the check can fail).
#   RTRS_TEST_IOS=N   fewer IOs by hand (the committed test does 10,000)
#   RTRS_TEST_ONLY=hostile   only the hostile client and the old-key check

. "$(dirname "$0")/lib.sh"
need_build
need_cmd timeout ss readelf
RT=$SR_BUILD_DIR/bin/rtrs-test
[ -x "$RT" ] || { echo "FAIL: no $RT (build first)" >&2; exit 1; }
IOS=${RTRS_TEST_IOS:-10000}
# The clients' connect timeout (rtrs-test client -C): a session of two paths to a server that
# has just started (its 64 MiB of chunks registered, at a load of 20) once took more than the
# default 10 s to come up, and rtrs_clt_open gave up ("Connection timed out"). What is tested
# here is the IO, not how fast a session comes up on a loaded machine.
CONNECT_MS=60000
ONLY=${RTRS_TEST_ONLY:-}

# --- hygiene: public headers only, public libraries only (the sanitizer build links its runtime)
if [ "$ONLY" != hostile ]; then
bad=$(grep -h '^#include' "$SR_SOURCE_DIR"/ulp/rtrs/*.[ch] | sort -u |
	grep -v -E '^#include (<(infiniband/verbs|rdma/rdma_cma|arpa/inet|dirent|errno|fcntl|netdb|poll|pthread|sched|signal|stddef|stdint|stdio|stdlib|string|time|unistd|sys/eventfd|sys/uio)\.h>|"rtrs(-proto|-common|-srv-check)?\.h")$')
sr_expect_eq "ulp/rtrs includes only libc, verbs, rdma_cm and its own headers" "" "$bad"
needed=$(readelf -d "$RT" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
extra=$(echo "$needed" | tr ' ' '\n' | grep -v -E '^(libibverbs\.so\.1|librdmacm\.so\.1|libc\.so\.6|libpthread\.so\.0|)$')
sr_expect_eq "rtrs-test NEEDED only libibverbs, librdmacm, libc, pthread ($needed)" "" "$extra"
[ -x "$SR_BUILD_DIR/bin/rtrs-stat" ] || sr_fail "no rtrs-stat"
needed=$(readelf -d "$SR_BUILD_DIR/bin/rtrs-stat" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
sr_expect_eq "rtrs-stat NEEDED only libc ($needed)" "libc.so.6 " "$needed"
fi

# --- the server: two ports = two paths
P1=$(sr_free_port) P2=$(sr_free_port)
timeout 200 "$SR" run -- "$RT" server -l 127.0.0.1:$P1 -l 127.0.0.1:$P2 -t 180 \
	>"$SR_TMP/srv.out" 2>&1 &
SR_BG+=($!)
SPID=$!
sr_wait_listen "$P2" "$SPID" "" 20 || { sr_tail "$SR_TMP/srv.out"; sr_fail "server listens"; sr_finish; }

[ "$ONLY" = hostile ] && POLICIES="" || POLICIES="rr mi ml"
for pol in $POLICIES; do
	out=$SR_TMP/cli-$pol.out
	# min-latency with the client's buffers registered (rtrs_clt_reg_buf: zero copy),
	# min-inflight with all of its memory registered (implicit ODP: zero copy too)
	zc=""
	[ $pol = ml ] && zc=-Z
	[ $pol = mi ] && zc=-O
	if timeout 120 "$SR" run -- "$RT" client -p 127.0.0.1:$P1 -p 127.0.0.1:$P2 -n "$IOS" \
		-P $pol -H 200 -C "$CONNECT_MS" -s $RANDOM $zc >"$out" 2>&1; then
		sr_ok "$pol: client exit 0"
	else
		sr_fail "$pol: client exit $?"
		sr_tail "$out"
	fi
	sr_expect_grep "$pol: $IOS IOs, none failed, every byte right" \
		"^ios=$IOS completed=$IOS failed=0 mismatches=0" "$out"
	r1=$(sed -n "s/^path 127.0.0.1:$P1 .*reqs=\([0-9]*\).*/\1/p" "$out")
	r2=$(sed -n "s/^path 127.0.0.1:$P2 .*reqs=\([0-9]*\).*/\1/p" "$out")
	echo "$pol: path 1 carried ${r1:-?}, path 2 ${r2:-?}"
	sr_expect_eq "$pol: the paths carried every request" "$IOS" "$(( ${r1:-0} + ${r2:-0} ))"
	if [ $pol = rr ]; then
		# round-robin: each path within 45..55 %
		sr_expect_ge "rr: path 1 share >= 45%" $((IOS * 45 / 100)) "${r1:-0}"
		sr_expect_ge "rr: path 2 share >= 45%" $((IOS * 45 / 100)) "${r2:-0}"
	fi
	k1=$(sed -n "s/^path 127.0.0.1:$P1 .*rkey_renewals=\([0-9]*\).*/\1/p" "$out")
	sr_expect_ge "$pol: always_invalidate on: chunk keys renewed on path 1" 1 "${k1:-0}"
done

# --- rtrs_clt_poll: the waiting thread polls for its own answer (RTRS_REQ_POLL, as RNBD's
# client); at depth 4 the polls mostly find others in flight (EBUSY) and the session's thread,
# woken for them, answers: no request may wait for its tick
if [ "$ONLY" != hostile ]; then
	n=$((IOS / 5))
	for d in 1 4; do
		out=$SR_TMP/cli-poll$d.out
		if timeout 120 "$SR" run -- "$RT" client -p 127.0.0.1:$P1 -p 127.0.0.1:$P2 -n $n -D $d \
			-W 1000 -H 200 -C "$CONNECT_MS" -s $RANDOM >"$out" 2>&1; then
			sr_ok "poll, depth $d: client exit 0"
		else
			sr_fail "poll, depth $d: client exit $?"
			sr_tail "$out"
		fi
		sr_expect_grep "poll, depth $d: $n IOs, none failed, every byte right" \
			"^ios=$n completed=$n failed=0 mismatches=0" "$out"
		polled=$(sed -n 's/.* polled=\([0-9]*\).*/\1/p' "$out")
		echo "poll, depth $d: $(grep -o 'seconds=[0-9]*' "$out"), polls that saw their answer: ${polled:-?}"
		[ $d = 1 ] && sr_expect_ge "poll, depth 1: polls saw their answer" 1 "${polled:-0}"
	done
fi

# hb_check NAME FILE: prints the heartbeat counters of the client's paths; fewer than a quarter
# may be missed (a loaded machine may miss one; a sleeper that answers none misses them all)
hb_check() {
	local sent missed
	sent=$(awk '/^path / { for (i = 1; i <= NF; i++) if ($i ~ /^hb_sent=/) { sub(/.*=/, "", $i); s += $i } } END { print s + 0 }' "$2")
	missed=$(awk '/^path / { for (i = 1; i <= NF; i++) if ($i ~ /^hb_missed_total=/) { sub(/.*=/, "", $i); s += $i } } END { print s + 0 }' "$2")
	echo "$1: heartbeats sent $sent, missed $missed"
	sr_expect_ge "$1: heartbeats sent" 1 "$sent"
	sr_expect_ge "$1: fewer than a quarter of the heartbeats missed" $((missed * 4 + 1)) "$sent"
}

# --- asleep (docs/rtrs.md, "Sleeping in ibv_get_cq_event"): a session idle for 1.5 s with
# heartbeats every 100 ms (3 missed fail a path) before its IO and again before its close,
# with each way of sleeping (RTRS_EVENT_SLEEP; the server's is the default, cq): every thread
# asleep, the heartbeats and their answers must wake them (no path lost), the IO must run,
# and the close must end threads asleep in ibv_get_cq_event (the timeout catches a hang)
if [ "$ONLY" != hostile ]; then
	for mode in cq poll; do
		out=$SR_TMP/cli-idle-$mode.out
		if RTRS_EVENT_SLEEP=$mode timeout 60 "$SR" run -- "$RT" client -p 127.0.0.1:$P1 \
			-p 127.0.0.1:$P2 -n 200 -D 4 -I 1500 -H 100 -M 3 -C "$CONNECT_MS" -s $RANDOM \
			>"$out" 2>&1; then
			sr_ok "idle, $mode: client exit 0"
		else
			sr_fail "idle, $mode: client exit $?"
			sr_tail "$out"
		fi
		sr_expect_grep "idle, $mode: 200 IOs, none failed, every byte right" \
			"^ios=200 completed=200 failed=0 mismatches=0" "$out"
		sr_expect_eq "idle, $mode: no path failed while asleep" 2 \
			"$(grep -c '^path .* state=1 .*failovers=0 reconnects=0 ' "$out")"
		hb_check "idle, $mode" "$out"
	done
	# the same idle session against a server whose thread sleeps in poll()
	P6=$(sr_free_port) P7=$(sr_free_port)
	RTRS_EVENT_SLEEP=poll timeout 60 "$SR" run -- "$RT" server -l 127.0.0.1:$P6 \
		-l 127.0.0.1:$P7 -t 40 >"$SR_TMP/srvp.out" 2>&1 &
	SR_BG+=($!)
	SRVP_PID=$!
	if sr_wait_listen "$P7" "$SRVP_PID" "" 20; then
		out=$SR_TMP/cli-idle-srvpoll.out
		if timeout 60 "$SR" run -- "$RT" client -p 127.0.0.1:$P6 -p 127.0.0.1:$P7 -n 200 \
			-D 4 -I 1500 -H 100 -M 3 -C "$CONNECT_MS" -s $RANDOM >"$out" 2>&1; then
			sr_ok "idle, server poll: client exit 0"
		else
			sr_fail "idle, server poll: client exit $?"
			sr_tail "$out"
		fi
		sr_expect_eq "idle, server poll: no path failed while asleep" 2 \
			"$(grep -c '^path .* state=1 .*failovers=0 reconnects=0 ' "$out")"
		hb_check "idle, server poll" "$out"
	else
		sr_tail "$SR_TMP/srvp.out"
		sr_fail "server RTRS_EVENT_SLEEP=poll listens"
	fi
	kill "$SRVP_PID" 2>/dev/null

	# A stalled completion thread (its callback blocks 1 s: the client's first one, -B) while
	# the heartbeats' answers wait in its CQ: the heartbeat timer (the CM thread, with cq)
	# takes them before it counts a miss, so no path fails (before, both did after 3 missed)
	for mode in cq poll; do
		out=$SR_TMP/cli-stall-$mode.out
		if RTRS_EVENT_SLEEP=$mode timeout 60 "$SR" run -- "$RT" client -p 127.0.0.1:$P1 \
			-p 127.0.0.1:$P2 -n 50 -D 1 -B 1000 -H 100 -M 3 -C "$CONNECT_MS" -s $RANDOM \
			>"$out" 2>&1; then
			sr_ok "stalled callback, $mode: client exit 0"
		else
			sr_fail "stalled callback, $mode: client exit $?"
			sr_tail "$out"
		fi
		sr_expect_eq "stalled callback, $mode: no path failed" 2 \
			"$(grep -c '^path .* state=1 .*failovers=0 reconnects=0 ' "$out")"
		grep '^path ' "$out" | sed 's/^/stalled callback, '$mode': /'
	done

	# A server whose channel thread never sleeps (RTRS_EVENT_SLEEP=cq RTRS_POLL_US=-1) and
	# answers from its callback (-z: no disk, READs come back unchecked): its CM thread, which
	# met a callback, must still get the lock from the spinning thread (before, it starved
	# there: the second client's connection was never accepted)
	P8=$(sr_free_port)
	RTRS_EVENT_SLEEP=cq RTRS_POLL_US=-1 timeout 60 "$SR" run -- "$RT" server -l 127.0.0.1:$P8 \
		-z -d 16 -t 40 >"$SR_TMP/srvspin.out" 2>&1 &
	SR_BG+=($!)
	SPIN_PID=$!
	if sr_wait_listen "$P8" "$SPIN_PID" "" 20; then
		for k in a b; do
			out=$SR_TMP/cli-spin-$k.out
			[ $k = a ] && args="-n 100 -D 16 -T 3" || args="-n 10 -D 1"
			timeout 90 "$SR" run -- "$RT" client -p 127.0.0.1:$P8 $args -d 16 \
				-C "$CONNECT_MS" -s $RANDOM >"$out" 2>&1
			sr_expect_grep "spinning server, client $k: connected, every request answered" \
				"^ios=([0-9]*) completed=\\1 failed=0 " "$out"
		done
	else
		sr_tail "$SR_TMP/srvspin.out"
		sr_fail "server RTRS_POLL_US=-1 listens"
	fi
	kill "$SPIN_PID" 2>/dev/null
fi

# --- always_invalidate off: a second server, the same 10,000 IOs round-robin
P4=$(sr_free_port) P5=$(sr_free_port)
timeout 200 "$SR" run -- "$RT" server -l 127.0.0.1:$P4 -l 127.0.0.1:$P5 -i 0 -t 150 \
	>"$SR_TMP/srv0.out" 2>&1 &
SR_BG+=($!)
sr_wait_listen "$P5" "$!" "" 20 || { sr_tail "$SR_TMP/srv0.out"; sr_fail "server -i 0 listens"; sr_finish; }
if [ "$ONLY" != hostile ]; then
# (with its counters under $SR_TMP/stats, which rtrs-stat reads while it runs)
out=$SR_TMP/cli-off.out
mkdir -p "$SR_TMP/stats"
RTRS_STATS_DIR=$SR_TMP/stats timeout 120 "$SR" run -- "$RT" client -p 127.0.0.1:$P4 \
	-p 127.0.0.1:$P5 -n "$IOS" -T 5 -P rr -H 200 -C "$CONNECT_MS" -s $RANDOM -Z >"$out" 2>&1 &
CPID=$!
sleep 1.5
timeout 20 "$SR_BUILD_DIR/bin/rtrs-stat" -w 1 -n 3 "$SR_TMP/stats" >"$SR_TMP/stat.out" 2>&1
cat "$SR_TMP/stat.out"
sr_wait_pid "$CPID" 110; rc=$?
sr_expect_eq "always_invalidate off, rr: client exit" 0 "$rc"
[ "$rc" = 0 ] || sr_tail "$out"
# rounds 1 and 3: the client's path 1 line (PID clt SESSION REMOTE STATE INFL READS WRITES ...)
reqs_round() { awk -v r="$1" -v d="127.0.0.1:$P4" '/^---/ { n++ } n == r && $2 == "clt" && $4 == d { print $7 + $8 }' "$SR_TMP/stat.out"; }
q1=$(reqs_round 1) q3=$(reqs_round 3)
echo "rtrs-stat: path 1 requests ${q1:-?} in round 1, ${q3:-?} in round 3"
sr_expect_ge "rtrs-stat: the live session's request count moves" $(( ${q1:-0} + 1 )) "${q3:-0}"
sr_expect_grep "rtrs-stat: the path's state and rate" "^[0-9]* *clt rtrs-test-[0-9]* *127.0.0.1:$P4 *connected .* [1-9][0-9]* *[0-9.]*\$" "$SR_TMP/stat.out"
sr_expect_grep "always_invalidate off, rr: none failed, every byte right" \
	"^ios=([0-9]*) completed=\\1 failed=0 mismatches=0" "$out"
sr_expect_ge "always_invalidate off, rr: at least $IOS IOs" "$IOS" \
	"$(sed -n 's/^ios=\([0-9]*\) .*/\1/p' "$out")"
sr_expect_grep "always_invalidate off: no chunk key renewed" \
	"^path 127.0.0.1:$P4 .*rkey_renewals=0$" "$out"
# all memory registered (-O) with no windows: READs bounce (no key to the whole process goes
# to the server), WRITEs go from the caller's memory; every byte still right
out=$SR_TMP/cli-off-odp.out
timeout 120 "$SR" run -- "$RT" client -p 127.0.0.1:$P4 -p 127.0.0.1:$P5 -n 2000 -T 5 -P rr \
	-H 200 -C "$CONNECT_MS" -s $RANDOM -O >"$out" 2>&1
rc=$?
sr_expect_eq "always_invalidate off, all memory registered (-O): client exit" 0 "$rc"
[ "$rc" = 0 ] || sr_tail "$out"
sr_expect_grep "always_invalidate off, -O: none failed, every byte right" \
	"^ios=([0-9]*) completed=\\1 failed=0 mismatches=0" "$out"
fi

# --- always_invalidate: the old key of a request is dead after its response
# The server's softrdma counts the remote access error NAK it answers the WRITE with; the
# client usually sees that NAK as its completion, unless the server's disconnect (its QP went to
# error) reaches the client first and the path is torn down before the NAK is read.
access_naks() { "$SR" stat "$(sr_prog_pid "$1")" 2>/dev/null | awk '$1 == "access_naks_sent" { s += $2 } END { print s + 0 }'; }
na0=$(access_naks "$SPID")
out=$SR_TMP/oldkey.out
timeout 60 "$SR" run -- "$RT" oldkey -p 127.0.0.1:$P1 -p 127.0.0.1:$P2 >"$out" 2>&1 ||
	{ sr_fail "oldkey (on): exit $?"; sr_tail "$out"; }
cat "$out" | grep '^oldkey'
sleep 1.5	# the counters file is written every second
na1=$(access_naks "$SPID")
sr_expect_grep "always_invalidate on: the chunk key was renewed by the response" "renewed=1 " "$out"
sr_expect_ge "always_invalidate on: the server refused the WRITE with the old key (access NAKs $na0 -> $na1)" \
	$((na0 + 1)) "$na1"
sr_expect_grep "always_invalidate on: the client saw the remote access error or the path closed by it" \
	"status=(remote access error|Connection timed out) " "$out"
sr_expect_grep "always_invalidate on: the chunk is unchanged" "untouched=1 overwritten=0" "$out"
out=$SR_TMP/oldkey0.out
timeout 60 "$SR" run -- "$RT" oldkey -p 127.0.0.1:$P4 -p 127.0.0.1:$P5 >"$out" 2>&1 ||
	{ sr_fail "oldkey (off): exit $?"; sr_tail "$out"; }
cat "$out" | grep '^oldkey'
sr_expect_grep "always_invalidate off (control): the same WRITE lands" \
	"renewed=0 status=success untouched=0 overwritten=1" "$out"

# --- hostile client (queue depth 500: chunk ids 500..511 fit the immediate's 9 id bits)
P3=$(sr_free_port)
timeout 60 "$SR" run -- "$RT" server -l 127.0.0.1:$P3 -q 500 -H 200 -t 45 >"$SR_TMP/srvh.out" 2>&1 &
SR_BG+=($!)
sr_wait_listen "$P3" "$!" "" 20 || { sr_tail "$SR_TMP/srvh.out"; sr_fail "hostile server listens"; sr_finish; }
if timeout 50 "$SR" run -- "$RT" hostile -p 127.0.0.1:$P3 >"$SR_TMP/hostile.out" 2>&1; then
	sr_ok "hostile: client exit 0"
else
	sr_fail "hostile: client exit $?"
	sr_tail "$SR_TMP/hostile.out"
fi
sr_expect_grep "hostile: every case closed the path, IO fine after" "^hostile cases=5 bad=0" \
	"$SR_TMP/hostile.out"
for why in "chunk id >= queue depth" "offset outside the chunk" "user header length" \
	"READ descriptor length > chunk" "READ descriptor count"; do
	sr_expect_grep "hostile: server refused: $why" "bad request \\($why\\): path closed" \
		"$SR_TMP/srvh.out"
done
# the servers stay alive through all of it (in the sanitizer build: no ASan/UBSan report)
for f in srv srv0 srvh srvp srvspin; do
	[ -f "$SR_TMP/$f.out" ] || continue
	sr_expect_eq "server $f: no sanitizer report" "" \
		"$(grep -m1 -E 'ERROR: AddressSanitizer|runtime error:' "$SR_TMP/$f.out")"
done
sr_finish
