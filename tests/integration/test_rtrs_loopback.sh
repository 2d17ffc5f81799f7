#!/bin/bash
# SPDX-License-Identifier: MIT
#
# ulp/rtrs (docs/rtrs.md): the library's hygiene, then an RTRS server and client as two
# processes on loopback over softrdma, one session of two paths (the server listens on two
# ports), 10,000 random READs and WRITEs of 512 B .. max IO with every byte checked against the
# client's mirror, with each multipath policy; round-robin must use both paths about equally.
# Then a hostile client (rtrs-test hostile, through a raw test hook of the library): a chunk id
# >= the queue depth, an offset outside the chunk, a user header longer than its offset, a READ
# descriptor longer than a chunk, a READ with no descriptor: each closes the path (the server
# says which check), the client reconnects and a byte-checked WRITE+READ works after each.
#   RTRS_TEST_IOS=N   fewer IOs by hand (the committed test does 10,000)

. "$(dirname "$0")/lib.sh"
need_build
need_cmd timeout ss readelf
RT=$SR_BUILD_DIR/bin/rtrs-test
[ -x "$RT" ] || { echo "FAIL: no $RT (build first)" >&2; exit 1; }
IOS=${RTRS_TEST_IOS:-10000}

# --- hygiene: public headers only, public libraries only
bad=$(grep -h '^#include' "$SR_SOURCE_DIR"/ulp/rtrs/*.[ch] | sort -u |
	grep -v -E '^#include (<(infiniband/verbs|rdma/rdma_cma|arpa/inet|errno|fcntl|netdb|poll|pthread|signal|stddef|stdint|stdio|stdlib|string|time|unistd|sys/eventfd|sys/uio)\.h>|"rtrs(-proto|-common|-srv-check)?\.h")$')
sr_expect_eq "ulp/rtrs includes only libc, verbs, rdma_cm and its own headers" "" "$bad"
needed=$(readelf -d "$RT" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
extra=$(echo "$needed" | tr ' ' '\n' | grep -v -E '^(libibverbs\.so\.1|librdmacm\.so\.1|libc\.so\.6|libpthread\.so\.0|)$')
sr_expect_eq "rtrs-test NEEDED only libibverbs, librdmacm, libc, pthread ($needed)" "" "$extra"

# --- the server: two ports = two paths
P1=$(sr_free_port) P2=$(sr_free_port)
timeout 200 "$SR" run -- "$RT" server -l 127.0.0.1:$P1 -l 127.0.0.1:$P2 -t 180 \
	>"$SR_TMP/srv.out" 2>&1 &
SR_BG+=($!)
SPID=$!
sr_wait_listen "$P2" "$SPID" "" 20 || { sr_tail "$SR_TMP/srv.out"; sr_fail "server listens"; sr_finish; }

for pol in rr mi ml; do
	out=$SR_TMP/cli-$pol.out
	if timeout 120 "$SR" run -- "$RT" client -p 127.0.0.1:$P1 -p 127.0.0.1:$P2 -n "$IOS" \
		-P $pol -H 200 -s $RANDOM >"$out" 2>&1; then
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
done

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
sr_finish
