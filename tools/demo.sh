#!/usr/bin/env bash
# The demo behind `make demo`: Debian's unmodified ibv_rc_pingpong, as two processes, moving
# data over softrdma on loopback; then the capture of what crossed the "wire" is decoded and
# every ICRC verified, and the soft NIC's counters are shown.
set -euo pipefail

BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac	# relative to the repository root
SR="$BUILD/bin/softrdma"
WORK=$(mktemp -d /tmp/softrdma-demo.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

PORT=$(( 20000 + RANDOM % 10000 ))
SIZE=65536
ITERS=500

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "softrdma devices (no RDMA hardware, no kernel module, no root needed)"
"$SR" devices

say "ibv_rc_pingpong: server and client as two processes, $ITERS round trips of $SIZE bytes (RC SEND/RECV)"
common=(-o "pcap=$WORK/%p.pcap" -o "stats_dump=$WORK/stats.txt")
"$SR" run "${common[@]}" -- timeout 60 ibv_rc_pingpong -g 0 -p "$PORT" -s "$SIZE" -n "$ITERS" \
	> "$WORK/server.txt" 2>&1 &
server=$!
for _ in $(seq 100); do
	ss -ltn 2>/dev/null | grep -q ":$PORT " && break
	sleep 0.05
done
"$SR" run "${common[@]}" -- timeout 60 ibv_rc_pingpong -g 0 -p "$PORT" -s "$SIZE" -n "$ITERS" \
	localhost > "$WORK/client.txt" 2>&1
wait "$server"
echo "--- server:"; cat "$WORK/server.txt"
echo "--- client:"; cat "$WORK/client.txt"

say "What crossed the wire: RoCEv2 packets captured by the pcap tap, every ICRC verified"
# The UDP ports the two devices used, other than RoCEv2's 4791 (which tshark knows), as
# `-p PORT` options. Every GID may be on 4791: then the list is empty, which is no error (awk,
# unlike `grep -v`, does not fail when it selects nothing, so pipefail leaves the demo alone).
ports=$(grep -ho 'GID [^ ]*' "$WORK/client.txt" | awk '{print $2}' | xargs -n1 "$SR" gid 2>/dev/null |
	grep -o 'port [0-9]*' | awk '$2 != 4791 && !seen[$2]++ { printf "-p %s ", $2 }')
# shellcheck disable=SC2086
"$SR" pcap $ports "$WORK"/*.pcap | sed "s|$WORK/||"

say "The soft NICs' counters (softrdma stat, as dumped at exit)"
cat "$WORK/stats.txt"

say "Done: an unmodified RDMA program ran on softrdma. Try: $SR run -- ibv_rc_pingpong -g 0"
