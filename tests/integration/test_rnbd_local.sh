#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The RNBD client (nbdkit plugin) and server in one process (local=DIR: the messages go by
# function call, not RTRS), driven by real NBD programs: qemu-img convert + compare, nbdcopy
# both ways, fio's nbd engine with crc32c verification, trim/zero, and a read-only open that
# refuses writes and leaves the file as it was. The RTRS-carried runs are test_rnbd_rtrs.
. "$(dirname "$0")/lib.sh"

need_cmd nbdkit nbdcopy nbdinfo qemu-img fio cmp
PLUGIN=$SR_BUILD_DIR/lib/nbdkit-rnbd-plugin.so
[ -e "$PLUGIN" ] || { echo "FAIL: no $PLUGIN (build first)" >&2; exit 1; }
MB=${RNBD_TEST_MB:-128}

EXP=$SR_TMP/export
mkdir -p "$EXP"
truncate -s $((MB * 2))M "$EXP/disk.img"

# start_nbdkit NAME ARGS...: an nbdkit on a Unix socket in the background; sets SOCK, URI.
start_nbdkit() {
	local name=$1 i
	shift
	SOCK=$SR_TMP/$name.sock
	URI="nbd+unix:///?socket=$SOCK"
	timeout 300 nbdkit -f -v -U "$SOCK" "$PLUGIN" "$@" >"$SR_TMP/$name.log" 2>&1 &
	SR_BG+=($!)
	NBDKIT_PID=$!
	for ((i = 0; i < 100; i++)); do
		[ -S "$SOCK" ] && nbdinfo --size "$URI" >/dev/null 2>&1 && return 0
		kill -0 "$NBDKIT_PID" 2>/dev/null || break
		sleep 0.1
	done
	sr_fail "$name: nbdkit did not come up"
	sr_tail "$SR_TMP/$name.log" >&2
	return 1
}
stop_nbdkit() {
	kill -TERM "$NBDKIT_PID" 2>/dev/null
	wait "$NBDKIT_PID" 2>/dev/null
}

start_nbdkit rw local="$EXP" device=disk.img session=t1 stats="$SR_TMP/rw.stats" || sr_finish
sr_expect_eq "export size" $((MB * 2 * 1048576)) "$(nbdinfo --size "$URI")"
nbdinfo "$URI" >"$SR_TMP/info.out" 2>&1
sr_expect_grep "multi-conn" "can_multi_conn: true" "$SR_TMP/info.out"
sr_expect_grep "FUA" "can_fua: true" "$SR_TMP/info.out"
sr_expect_grep "minimum block size" "block_size_minimum: 512" "$SR_TMP/info.out"

# qemu-img convert of a qcow2 image with data and holes into the export, compare back
head -c $((MB / 4))M /dev/urandom >"$SR_TMP/a.raw"
truncate -s $((MB / 2))M "$SR_TMP/a.raw"
head -c 3M /dev/urandom | dd of="$SR_TMP/a.raw" bs=1M seek=$((MB / 2 - 4)) conv=notrunc status=none
qemu-img convert -f raw -O qcow2 "$SR_TMP/a.raw" "$SR_TMP/a.qcow2"
if timeout 120 qemu-img convert -n -f qcow2 -O raw "$SR_TMP/a.qcow2" "$URI" 2>"$SR_TMP/convert.err"; then
	sr_ok "qemu-img convert into the export"
else
	sr_fail "qemu-img convert"; sr_tail "$SR_TMP/convert.err" >&2
fi
if timeout 120 qemu-img compare -f qcow2 -F raw "$SR_TMP/a.qcow2" "$URI" >"$SR_TMP/compare.out" 2>&1; then
	sr_ok "qemu-img compare: identical"
else
	sr_fail "qemu-img compare"; sr_tail "$SR_TMP/compare.out" >&2
fi

# nbdcopy both ways, checked (and the file behind the export is the same bytes)
head -c ${MB}M /dev/urandom >"$SR_TMP/src"
timeout 120 nbdcopy "$SR_TMP/src" "$URI" && sr_ok "nbdcopy $MB MiB into the export" || sr_fail "nbdcopy in"
timeout 120 nbdcopy "$URI" "$SR_TMP/back" && sr_ok "nbdcopy $MB MiB out" || sr_fail "nbdcopy out"
cmp -n $((MB * 1048576)) "$SR_TMP/src" "$SR_TMP/back" && sr_ok "read back = written" || sr_fail "read back differs"
cmp -n $((MB * 1048576)) "$SR_TMP/src" "$EXP/disk.img" && sr_ok "server's file = written" || sr_fail "server's file differs"

# trim and zero: zeroes where asked, the rest kept
if timeout 60 qemu-io -f raw -c 'write -z 1048576 4096' -c 'discard 1048576 1052672' \
	-c 'write -z 1000 3000000' -c 'write -f -P 0xab 5000001 777' -c 'flush' "$URI" \
	>"$SR_TMP/qemu-io.out" 2>&1; then
	python3 - "$SR_TMP/src" "$EXP/disk.img" <<'PY' && sr_ok "zero/discard/FUA write landed" || sr_fail "zero/discard/FUA write"
import sys
src = open(sys.argv[1], "rb").read(8 << 20)
disk = open(sys.argv[2], "rb").read(8 << 20)
want = bytearray(src)
want[1000:3001000] = bytes(3000000)
want[5000001:5000778] = b"\xab" * 777
# the discarded range lies inside the zeroed one: it reads as zeroes either way
sys.exit(0 if disk == bytes(want) else 1)
PY
else
	sr_fail "qemu-io zero/discard/write"; sr_tail "$SR_TMP/qemu-io.out" >&2
fi

# fio's nbd engine: random writes with crc32c verification interleaved, bounded in time
if timeout 120 fio --name=rnbd --ioengine=nbd --uri="$URI" --rw=randwrite --bs=4k \
	--iodepth=16 --size=$((MB / 2))m --offset=$((MB))m --verify=crc32c --verify_backlog=128 \
	--verify_fatal=1 --verify_state_save=0 --runtime=8 --time_based --output="$SR_TMP/fio.out" >/dev/null 2>&1; then
	sr_ok "fio randwrite + crc32c verify"
else
	sr_fail "fio"; sr_tail "$SR_TMP/fio.out" >&2
fi
sr_expect_grep "fio saw no error" "err= 0" "$SR_TMP/fio.out"
sleep 1.2	# the counters, read while nbdkit runs
sr_expect_grep "live counters: writes" "^writes [1-9]" "$SR_TMP/rw.stats"
sr_expect_grep "live counters: bytes read" "^bytes_read [1-9]" "$SR_TMP/rw.stats"
sr_expect_grep "live counters: no errors" "^errors 0$" "$SR_TMP/rw.stats"

# FUA and FLUSH: the data is in the server's file when the server dies (SIGKILL) right after
# the answer. (A killed process loses no page cache, so this checks that the answer comes after
# the write; that FUA is RWF_DSYNC and FLUSH fdatasync is test_rnbd_dev's and docs/rnbd.md's.)
timeout 30 qemu-io -f raw -c 'write -f -P 0xcd 9437184 65536' "$URI" >"$SR_TMP/fua.out" 2>&1
kill -KILL "$NBDKIT_PID"; wait "$NBDKIT_PID" 2>/dev/null
python3 -c 'import sys; d=open(sys.argv[1],"rb"); d.seek(9437184); sys.exit(0 if d.read(65536)==b"\xcd"*65536 else 1)' \
	"$EXP/disk.img" && sr_ok "FUA write present after SIGKILL" || { sr_fail "FUA write lost"; sr_tail "$SR_TMP/fua.out" >&2; }
start_nbdkit rw2 local="$EXP" device=disk.img session=t3 || sr_finish
timeout 30 qemu-io -f raw -c 'write -P 0xce 10485760 65536' -c 'flush' "$URI" >"$SR_TMP/flush.out" 2>&1
kill -KILL "$NBDKIT_PID"; wait "$NBDKIT_PID" 2>/dev/null
python3 -c 'import sys; d=open(sys.argv[1],"rb"); d.seek(10485760); sys.exit(0 if d.read(65536)==b"\xce"*65536 else 1)' \
	"$EXP/disk.img" && sr_ok "write + FLUSH present after SIGKILL" || { sr_fail "flushed write lost"; sr_tail "$SR_TMP/flush.out" >&2; }


# read-only: the export is read-only, a write is refused, the file is unchanged
sum=$(md5sum <"$EXP/disk.img")
start_nbdkit ro local="$EXP" device=disk.img access=ro session=t2 || sr_finish
nbdinfo "$URI" >"$SR_TMP/info-ro.out" 2>&1
sr_expect_grep "RO export" "is_read_only: true" "$SR_TMP/info-ro.out"
if timeout 60 nbdcopy "$SR_TMP/src" "$URI" 2>"$SR_TMP/ro.err"; then
	sr_fail "a write into a read-only open succeeded"
else
	sr_ok "write into the RO open refused: $(head -c 120 "$SR_TMP/ro.err")"
fi
timeout 60 nbdcopy "$URI" "$SR_TMP/back-ro" && cmp -s "$SR_TMP/back-ro" "$EXP/disk.img" &&
	sr_ok "RO open reads" || sr_fail "RO read"
stop_nbdkit
sr_expect_eq "file unchanged by the RO attempt" "$sum" "$(md5sum <"$EXP/disk.img")"

# a block device (a loop device over a file, when we may make one): the same path with
# BLKGETSIZE64 and the device's block sizes
if [ "$(id -u)" = 0 ] && command -v losetup >/dev/null &&
	truncate -s 16M "$SR_TMP/loop.img" && LOOPDEV=$(losetup -f --show "$SR_TMP/loop.img" 2>/dev/null); then
	sr_at_exit "losetup -d $LOOPDEV 2>/dev/null"
	start_nbdkit blk local=/dev device="$(basename "$LOOPDEV")" session=t4 || sr_finish
	sr_expect_eq "block device size" 16777216 "$(nbdinfo --size "$URI")"
	head -c 16M /dev/urandom >"$SR_TMP/src16"
	timeout 60 nbdcopy "$SR_TMP/src16" "$URI" && timeout 60 nbdcopy "$URI" "$SR_TMP/back16" &&
		cmp -s "$SR_TMP/src16" "$SR_TMP/back16" && sr_ok "block device: nbdcopy 16 MiB both ways" ||
		sr_fail "block device copy"
	stop_nbdkit
	cmp -s "$SR_TMP/src16" "$SR_TMP/loop.img" && sr_ok "block device: the loop file holds it" ||
		sr_fail "block device: loop file differs"
else
	echo "note: no loop device here (needs root and losetup): block-device export not run"
fi

# a device the search path does not have, or outside it: nbdkit refuses to start
timeout 30 nbdkit -f -U "$SR_TMP/x.sock" "$PLUGIN" local="$EXP" device=../etc/passwd \
	>"$SR_TMP/bad.log" 2>&1 && sr_fail "'..' accepted" || sr_ok "device=../etc/passwd refused"
sr_expect_grep "server's answer" "Invalid argument" "$SR_TMP/bad.log"

sr_finish
