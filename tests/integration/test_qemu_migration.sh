#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Debian's unmodified qemu-system-x86_64 (7.2) live-migrates a running TCG guest over `rdma:`
# on softrdma, between two QEMU processes on loopback (tests/qemu/: the guest, the QMP driver;
# docs/qemu-migration.md). Three migrations of a 1 GiB guest (-m 1048568K: see the doc for the
# QEMU 7.2 TCG bug that -m 1024 hits):
#   1. idle       as root;
#   2. dirty256   (the guest rewrites 256 MiB without pause) as the non-root user `nobody`,
#                 with an 8 MiB RLIMIT_MEMLOCK: softrdma pins nothing, so no memlock limit;
#                 over packets (UDP), where 1 takes the same-host direct path; with QEMU's
#                 auto-converge, so that converging is not a race against the vCPU;
#   3. dirty256   with the destination SIGKILLed after 200 MiB: the migration must fail
#                 (not hang) and the guest must run on, healthy, at the source.
# For 1 and 2 the migration must complete and the guest run on at the destination: status
# running, heartbeats and the workload's pass counter still rising, no CORRUPT page (each page
# carries a per-pass pattern that the guest checks), no Oops/panic, no reset.
# The guest (Debian's kernel + a busybox/dirtier initramfs) is cached in the build directory.

. "$(dirname "$0")/lib.sh"
need_build
need_cmd qemu-system-x86_64 python3 gcc cpio gzip setpriv prlimit pgrep timeout
ls /boot/vmlinuz-* >/dev/null 2>&1 || sr_skip "no /boot/vmlinuz-* (Debian package linux-image-amd64)"
[ -x /bin/busybox ] || sr_skip "no /bin/busybox (Debian package busybox-static)"
[ -e "$SR_BUILD_DIR/lib/librdmacm.so.1" ] || { echo "FAIL: no librdmacm.so.1 in the build" >&2; exit 1; }

QDIR=$SR_SOURCE_DIR/tests/qemu
export GUEST_DIR=$SR_BUILD_DIR/qemu-guest
export QEMU_MIG_WORK=$SR_TMP
export LD_LIBRARY_PATH=$SR_BUILD_DIR/lib
export MIG_TIMEOUT=${MIG_TIMEOUT:-120} VERIFY_S=${VERIFY_S:-5}
chmod 755 "$SR_TMP"	# the non-root QEMUs reach their run directory through it

t=$(date +%s.%N)
if ! timeout 300 "$QDIR/build-guest.sh" "$GUEST_DIR"; then
	sr_fail "guest image: build-guest.sh failed"
	sr_finish
fi
echo "guest image ready in $(sr_elapsed "$t") s ($GUEST_DIR)"

# migrate NAME EXPECT WORKLOAD [VAR=VALUE...]: one run of tests/qemu/run-migration.sh over rdma.
migrate() {
	local name=$1 expect=$2 wl=$3 out rc t0 run
	shift 3
	out=$SR_TMP/$name.out
	t0=$(date +%s.%N)
	echo "--- $name: rdma $wl $*"
	env "$@" timeout -k 10 $((MIG_TIMEOUT + 330)) "$QDIR/run-migration.sh" rdma "$wl" >"$out" 2>&1
	rc=$?
	run=$(sed -n 's/^run dir: //p' "$out")
	python3 - "$run/result.json" <<-'EOF' || true
		import json, sys
		try:
		    r = json.load(open(sys.argv[1]))
		except Exception as e:
		    sys.exit(f"  (no result.json: {e})")
		s, v = r.get("summary") or {}, r.get("verify") or {}
		print(f"  status {r.get('status')}; total {s.get('total_time_ms')} ms, downtime "
		      f"{s.get('evt_downtime_ms')} ms, setup {s.get('setup_time_ms')} ms, "
		      f"{s.get('transferred_mib')} MiB, {s.get('mbps')} Mbit/s, syncs {s.get('dirty_sync_count')}; "
		      f"guest ok: {v.get('guest_ok')}; QEMU ran as {r.get('qemu_user')}"
		      + (f"; destination killed at {r.get('fault_at_mib')} MiB, failure seen "
		         f"{r.get('fail_detect_s')} s later" if r.get("t_fault") is not None else ""))
	EOF
	if [ "$rc" -eq 0 ]; then
		sr_ok "$name: migration $expect, guest healthy ($(sr_elapsed "$t0") s)"
	else
		sr_fail "$name: run-migration.sh exit $(sr_rc_text "$rc") (wanted: migration $expect, guest healthy)"
		sr_tail "$out" 40 >&2
		[ -n "$run" ] && for f in "$run"/src-stdout.log "$run"/dst-stdout.log; do sr_tail "$f" 10 >&2; done
	fi
}

# The non-root QEMUs must read the guest and softrdma's libraries, but the checkout may sit in
# a directory only root can enter (a CI clone into `mktemp -d`): they get world-readable copies
# in the run directory.
NOBODY=$SR_TMP/nobody
mkdir -p "$NOBODY/lib" && cp -a "$GUEST_DIR" "$NOBODY/guest" &&
	cp -a "$SR_BUILD_DIR"/lib/lib*.so* "$NOBODY/lib/" && chmod -R a+rX "$NOBODY" ||
	sr_fail "could not stage the guest and the libraries for the non-root run"

migrate idle completed idle
# Over packets (SOFTRDMA_DIRECT=0; idle above takes the same-host direct path): with the direct
# path the destination uses no CPU, and on 2 cores dirty256's vCPU can then outrun QEMU's
# migration thread for minutes (docs/qemu-migration.md), so the outcome would be the
# scheduler's. (As nobody it went over packets before anyway: nobody cannot create its stats
# directory, where the direct path's key table lives, in a root-owned build/stats.)
# With auto-converge: whether dirty256 converges unthrottled is a race of the vCPU against the
# migration on 2 cores, and on a faster CPU (a Zen 5 EPYC, 2026-11-28) the vCPU won: 120 s at
# 5.2 Gbit/s, 340 passes. QEMU then slows the vCPU down a step per pass that redirtied more than
# half of what it sent, as a user migrating a busy guest asks it to; the guest still rewrites
# its 256 MiB all along. The test is about correct pages, as nobody, over packets; how fast
# softrdma migrates is the benchmarks' (docs/qemu-migration.md).
migrate dirty256-nobody completed dirty256 AS_USER=nobody MEMLOCK=$((8 << 20)) \
	GUEST_DIR="$NOBODY/guest" LD_LIBRARY_PATH="$NOBODY/lib" SOFTRDMA_DIRECT=0 \
	CAPS=auto-converge=on
migrate dirty256-kill-dst failed dirty256 FAIL=kill-dst:200 EXPECT=fail

sr_finish
