#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The softrdma CLI: help and usage errors, `params` lists every parameter of param.h, `run`
# puts our library first and reports a missing command with 127, `stat --doc` lists every
# counter of stats.h, `stat` reads well-formed files (including a newer minor version) and
# rejects hostile ones without crashing, `gid` decodes the GID formats, the generated docs are
# in sync, `pcap` names the CM MADs of kernel rxe's captures, and (with ibv_rc_pingpong
# installed) a live process shows up in `stat`.
#
# Env: SR_BUILD_DIR (set by CTest), SR_SOURCE_DIR (else found from this script's place).

set -u
BUILD=${SR_BUILD_DIR:?SR_BUILD_DIR must name the build directory}
SRC=${SR_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
SR=$BUILD/bin/softrdma
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sr-test-cli.XXXXXX")
BG=()
cleanup() {
	for p in "${BG[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$TMP"
}
trap cleanup EXIT

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# expect_rc WANT CMD...: runs CMD (stdout/stderr into $TMP/out, $TMP/err), checks its status.
expect_rc() {
	local want=$1; shift
	"$@" >"$TMP/out" 2>"$TMP/err"
	local rc=$?
	[ "$rc" = "$want" ] || fail "'$*' exited $rc, wanted $want; stderr: $(head -c 400 "$TMP/err")"
}
# The names of an X-macro list: the first argument of every X(...) line.
xnames() { sed -n 's/^[[:space:]]*X(\([a-z0-9_]*\),.*/\1/p' "$1"; }

[ -x "$SR" ] || { echo "FAIL: no $SR (build first)" >&2; exit 1; }

# --- help and usage errors
expect_rc 0 "$SR" help
grep -q '^usage: softrdma' "$TMP/out" || fail "help prints no usage"
expect_rc 0 "$SR" --help
expect_rc 0 "$SR"
grep -q '^usage: softrdma' "$TMP/out" || fail "no arguments prints no usage"
expect_rc 2 "$SR" no-such-command
grep -q 'unknown command' "$TMP/err" || fail "unknown command not named"
expect_rc 2 "$SR" params --bogus
expect_rc 2 "$SR" stat --bogus
expect_rc 2 "$SR" stat not-a-pid
expect_rc 2 "$SR" run
expect_rc 2 "$SR" run -o no_such_param=1 -- true
expect_rc 2 "$SR" run -o max_inflight=lots -- true
expect_rc 0 "$SR" version

# --- params: every parameter of param.h, with its variable; current values from the env
params=$(xnames "$SRC/src/core/param.h")
[ -n "$params" ] || fail "no parameters found in param.h"
SOFTRDMA_MAX_INFLIGHT=2k SOFTRDMA_PIN=on expect_rc 0 "$SR" params
for p in $params; do
	env=SOFTRDMA_$(echo "$p" | tr a-z A-Z)
	grep -Eq "^$p +$env " "$TMP/out" || fail "params does not list $p ($env)"
done
grep -Eq '^max_inflight +SOFTRDMA_MAX_INFLIGHT +int +128 +2048$' "$TMP/out" ||
	fail "params: max_inflight default 128 / value 2048 not shown"
grep -Eq '^pin +SOFTRDMA_PIN +bool +0 +1$' "$TMP/out" || fail "params: pin value 1 not shown"
# A malformed value is reported once, naming the variable, and the default is shown.
SOFTRDMA_TICK_MS=soon expect_rc 0 "$SR" params
[ "$(grep -c SOFTRDMA_TICK_MS "$TMP/err")" = 1 ] || fail "malformed SOFTRDMA_TICK_MS not warned once"
grep -Eq '^tick_ms .* 10 +10$' "$TMP/out" || fail "malformed tick_ms does not show the default"

# --- docs generated from the tables are in sync
expect_rc 0 "$SR" params --markdown
diff -u "$SRC/docs/params.md" "$TMP/out" >"$TMP/diff" ||
	fail "docs/params.md is stale: regenerate with 'softrdma params --markdown > docs/params.md'"
expect_rc 0 "$SR" stat --doc --markdown
sed -n '/<!-- BEGIN softrdma stat --doc --markdown -->/,/<!-- END -->/p' "$SRC/docs/stats.md" |
	sed '1d;$d' >"$TMP/doc-table"
diff -u "$TMP/doc-table" "$TMP/out" >"$TMP/diff" ||
	fail "the counter table in docs/stats.md is stale (softrdma stat --doc --markdown)"

# --- stat --doc: every counter of stats.h, with a description
counters=$(xnames "$SRC/src/core/stats.h")
[ -n "$counters" ] || fail "no counters found in stats.h"
expect_rc 0 "$SR" stat --doc
for c in $counters; do
	grep -Eq "^$c +[^ ]" "$TMP/out" || fail "stat --doc does not list $c"
done

# --- run: our library directory first, the rest kept; parameters passed; 127 / 126
LIB=$(cd "$BUILD/lib" && pwd -P)
[ -e "$LIB/libibverbs.so.1" ] || fail "no $LIB/libibverbs.so.1"
LD_LIBRARY_PATH=/elsewhere expect_rc 0 "$SR" run -- sh -c 'echo $LD_LIBRARY_PATH'
[ "$(cat "$TMP/out")" = "$LIB:/elsewhere" ] || fail "run: LD_LIBRARY_PATH is '$(cat "$TMP/out")', wanted '$LIB:/elsewhere'"
env -u LD_LIBRARY_PATH "$SR" run -- sh -c 'echo $LD_LIBRARY_PATH' >"$TMP/out"
[ "$(cat "$TMP/out")" = "$LIB" ] || fail "run: LD_LIBRARY_PATH is '$(cat "$TMP/out")', wanted '$LIB'"
expect_rc 0 "$SR" run --netdev lo --fault drop=0.5 --pcap "$TMP/x-%p.pcap" -o max_inflight=0x20 -- \
	sh -c 'echo "$SOFTRDMA_NETDEV|$SOFTRDMA_FAULT|$SOFTRDMA_PCAP|$SOFTRDMA_MAX_INFLIGHT"'
[ "$(cat "$TMP/out")" = "lo|drop=0.5|$TMP/x-%p.pcap|0x20" ] || fail "run: parameters not passed: $(cat "$TMP/out")"
expect_rc 3 "$SR" run -- sh -c 'exit 3'
expect_rc 127 "$SR" run -- /nonexistent
grep -q 'not found' "$TMP/err" || fail "run: no clear message for a missing command"
expect_rc 127 "$SR" run -- no-such-command-anywhere
printf 'not a program\n' >"$TMP/noexec"
chmod 644 "$TMP/noexec"
expect_rc 126 "$SR" run -- "$TMP/noexec"
# Without "--" the command's own options stay its own.
expect_rc 0 "$SR" run ls -d /
[ "$(cat "$TMP/out")" = / ] || fail "run without --: ls -d / printed '$(cat "$TMP/out")'"

# --- gid: the three formats
expect_rc 0 "$SR" gid ::ffff:127.0.0.1 0000:0000:0000:0000:12b8:ffff:0a00:0007 fe80::1 10.1.2.3:5000 10.1.2.3
grep -q '^0000:0000:0000:0000:0000:ffff:7f00:0001  IPv4 127.0.0.1, UDP port 4791$' "$TMP/out" || fail "gid: v4-mapped"
grep -q '^0000:0000:0000:0000:12b8:ffff:0a00:0007  IPv4 10.0.0.7, UDP port 4792$' "$TMP/out" || fail "gid: port-encoded"
grep -q '^fe80:0000:0000:0000:0000:0000:0000:0001  IPv6 fe80::1, UDP port 4791$' "$TMP/out" || fail "gid: IPv6"
grep -q '^0000:0000:0000:0000:1388:ffff:0a01:0203  IPv4 10.1.2.3, UDP port 5000$' "$TMP/out" || fail "gid: encode port"
grep -q '^0000:0000:0000:0000:0000:ffff:0a01:0203  IPv4 10.1.2.3, UDP port 4791$' "$TMP/out" || fail "gid: encode 4791"
expect_rc 2 "$SR" gid nonsense
expect_rc 2 "$SR" gid 10.0.0.1:70000

# --- pcap: the kernel rxe's rdma_cm captures, CM MADs to QP1 named and counted by type
RXE=$SRC/tests/interop/rxe-pcaps/suite
expect_rc 0 "$SR" pcap "$RXE/rping_C5.pcap" "$RXE/udaddy.pcap"
grep -q 'rping_C5.pcap: 65 RoCEv2 packets, ICRC ok=65 bad=0 malformed=0.* | MADs to QP1 x5: CM REQ x1 CM REP x1 CM RTU x1 CM DREQ x1 CM DREP x1$' "$TMP/out" ||
	fail "pcap: rping's CM MADs not named: $(cat "$TMP/out")"
grep -q 'udaddy.pcap: .* | MADs to QP1 x2: CM SIDR_REQ x1 CM SIDR_REP x1$' "$TMP/out" ||
	fail "pcap: udaddy's SIDR MADs not named: $(cat "$TMP/out")"
expect_rc 0 "$SR" pcap -v "$RXE/ucmatose.pcap"
[ "$(grep -c '  UD SEND_ONLY .*QP 0x000001 .*ICRC ok  CM [A-Z]*$' "$TMP/out")" = 5 ] ||
	fail "pcap -v: ucmatose's five CM MADs not named per packet"

# --- stat on crafted files: a newer minor, a dead writer, and hostile garbage
STATS=$TMP/stats
DIR=$STATS/softrdma-$(id -u)
mkdir -p "$DIR" && chmod 700 "$DIR"
export SOFTRDMA_STATS_DIR=$STATS
if command -v python3 >/dev/null && command -v flock >/dev/null; then
	python3 - "$DIR" "$$" <<'EOF' || fail "python3 could not craft the stat files"
import os, struct, sys
d, pid = sys.argv[1], int(sys.argv[2])

def stat_file(name, counters, pid=pid, magic=b"SRDMASTA", major=1, minor=0, extra=b"",
              dev=b"softrdma0", ident=b"127.0.0.1:4791", name_len=32, n=None, names_off=None,
              truncate=None):
    hdr_size = 256 + len(extra)
    noff = hdr_size if names_off is None else names_off
    voff = (hdr_size + len(counters) * name_len + 7) & ~7
    size = voff + 8 * len(counters)
    h = struct.pack("<8sHHIQiIQIIII64s128sQ", magic, major, minor, hdr_size, size, pid,
                    len(counters) if n is None else n, 1700000000 * 10**9, name_len, noff,
                    voff, 0, dev, ident, 0) + extra
    body = bytearray(size)
    body[:len(h)] = h
    for i, (cn, v) in enumerate(counters):
        body[hdr_size + i * name_len:hdr_size + i * name_len + len(cn)] = cn
        body[voff + 8 * i:voff + 8 * i + 8] = struct.pack("<Q", v)
    if truncate is not None:
        body = body[:truncate]
    with open(os.path.join(d, name), "wb") as f:
        f.write(body)

# A newer minor: a longer header, a counter this CLI has never heard of, another order.
stat_file("live.stat", [(b"future_counter", 7), (b"tx_packets", 5), (b"rx_packets", 0)],
          minor=3, extra=b"\xee" * 16, dev=b"softrdma9")
stat_file("evil-names.stat", [(b"\x1b[31mred\x07", 1)], dev=b"dev\x1b]0;x\x07")
stat_file("dead.stat", [(b"tx_packets", 1)], pid=2**31 - 2)
stat_file("bad-magic.stat", [(b"tx_packets", 1)], magic=b"NOTSTATS")
stat_file("major2.stat", [(b"tx_packets", 1)], major=2)
stat_file("huge-count.stat", [(b"tx_packets", 1)], n=2**32 - 1)
stat_file("names-oob.stat", [(b"tx_packets", 1)], names_off=2**32 - 16)
stat_file("bad-namelen.stat", [(b"tx_packets", 1)], name_len=0)
stat_file("truncated.stat", [(b"tx_packets", 1)] * 10, truncate=300)
open(os.path.join(d, "empty.stat"), "wb").close()
os.mkfifo(os.path.join(d, "fifo.stat"))
os.symlink("/etc/passwd", os.path.join(d, "link.stat"))
EOF
	# Writers hold a shared flock while alive: this shell plays the writer of two files.
	exec 8<"$DIR/live.stat" 9<"$DIR/evil-names.stat"
	flock -s 8 && flock -s 9
	# Every garbage file is held too, so that only "dead.stat" is a dead writer's.
	held=()
	for f in bad-magic major2 huge-count names-oob bad-namelen truncated empty; do
		exec {fd}<"$DIR/$f.stat"
		flock -s "$fd"
		held+=("$fd")
	done
	timeout 20 "$SR" stat >"$TMP/out" 2>"$TMP/err"
	rc=$?
	[ $rc = 0 ] || fail "stat on crafted files exited $rc: $(head -c 600 "$TMP/err")"
	grep -Eq "^pid $$  softrdma9  127.0.0.1:4791  \(started .*, file format 1.3\)$" "$TMP/out" ||
		fail "stat: the v1.3 file's header line is missing: $(cat "$TMP/out")"
	grep -Eq '^    future_counter +7$' "$TMP/out" || fail "stat: unknown counter of a newer minor not shown"
	grep -Eq '^    tx_packets +5$' "$TMP/out" || fail "stat: tx_packets of the v1.3 file not shown"
	grep -Eq 'rx_packets' "$TMP/out" && fail "stat without -a shows a zero counter"
	grep -q $'\x1b' "$TMP/out" "$TMP/err" && fail "stat printed an escape character from a file"
	grep -Eq '^    \?\[31mred\? +1$' "$TMP/out" || fail "stat: unprintable name not sanitized"
	for f in bad-magic major2 huge-count names-oob bad-namelen truncated empty fifo link; do
		grep -q "skipping $f.stat: " "$TMP/err" || fail "stat: $f.stat not reported as skipped"
		[ -e "$DIR/$f.stat" ] || [ -L "$DIR/$f.stat" ] || fail "stat removed $f.stat, which is not its to remove"
	done
	grep -q 'bad magic' "$TMP/err" || fail "stat: wrong magic not named"
	grep -q 'format version 2.0' "$TMP/err" || fail "stat: unknown major not named"
	[ -e "$DIR/dead.stat" ] && fail "stat did not remove the dead writer's file"
	grep -q 'pid 2147483646' "$TMP/out" && fail "stat showed a dead writer"
	expect_rc 0 "$SR" stat -a
	grep -Eq '^    rx_packets +0$' "$TMP/out" || fail "stat -a does not show zero counters"
	expect_rc 0 "$SR" stat $$
	[ "$(grep -c '^pid ' "$TMP/out")" = 2 ] || fail "stat PID: wanted the 2 files of pid $$"
	expect_rc 1 "$SR" stat 2147483645
	exec 8<&- 9<&-
	for fd in "${held[@]}"; do exec {fd}<&-; done
	# Writers gone: both files are removed by the next reader.
	expect_rc 0 "$SR" stat
	[ -e "$DIR/live.stat" ] && fail "stat kept a file whose writer is gone"
	grep -q '^no softrdma device is open' "$TMP/out" || fail "stat with no live file: $(cat "$TMP/out")"
else
	echo "SKIP: crafted stat files (needs python3 and flock)"
fi

# --- devices, through the public verbs API (a zero-config device exists)
expect_rc 0 timeout 60 "$SR" devices
grep -q 'GID\[0\] .*UDP port' "$TMP/out" || fail "devices: no GID[0] with its meaning: $(head -c 600 "$TMP/out")"
grep -q 'node GUID' "$TMP/out" || fail "devices: no node GUID"

# --- a live process: it shows up in stat while it runs, and its file goes when it is killed
if command -v ibv_rc_pingpong >/dev/null; then
	port=$((20000 + RANDOM % 20000))
	"$SR" run -- ibv_rc_pingpong -g 0 -p "$port" >"$TMP/pp.out" 2>&1 &
	pp=$!
	BG+=($pp)
	found=
	for _ in $(seq 100); do
		"$SR" stat "$pp" >"$TMP/out" 2>/dev/null && { found=1; break; }
		kill -0 "$pp" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$found" ] || fail "stat never showed ibv_rc_pingpong (pid $pp): $(head -c 600 "$TMP/pp.out")"
	kill -9 "$pp" 2>/dev/null
	wait "$pp" 2>/dev/null
	"$SR" stat >/dev/null 2>&1
	ls "$DIR" | grep -q "^$pp-" && fail "the killed process's stat file was not removed"
else
	echo "SKIP: live stat (no ibv_rc_pingpong)"
fi

if [ $failures -ne 0 ]; then
	echo "test_cli: $failures check(s) failed" >&2
	exit 1
fi
echo "test_cli: ok"
