#!/bin/bash
# SPDX-License-Identifier: MIT
#
# softrdma's RNBD against the Linux kernel's own RTRS and RNBD modules, on the wire, both ways.
#
# Debian's 6.1 kernel ships no RTRS/RNBD modules (its config leaves them unset): they are built
# out of tree for the guest's kernel from linux-source-6.1 and the guest kernel's headers
# (tests/interop/rxe-vm/build-rnbd-modules.sh, cached in the build directory, about 3 minutes
# the first time). The guest is test_rxe_vm's (tests/interop/rxe-vm/build-guest.sh, same
# cache): Debian's kernel with rdma_rxe under qemu, its virtio-net on a tap in a network
# namespace this test makes and removes; the modules and brd reach it through the 9p job
# directory and are loaded with insmod. softrdma runs in the namespace bound to the tap and
# speaks the IB CM (SOFTRDMA_CM_WIRE=ibcm), the kernel's rdma_cm protocol. Then:
#  (a) the kernel's rnbd-client maps our rnbd-server's export (/dev/rnbd0 in the guest): data
#      the host put in the file is read back through it, data written through it with O_DIRECT
#      is read back equal and is in the server's file after the unmap; our server's counters
#      show the kernel's FLUSH executed and no message refused; SIGTERM ends the server (0);
#  (b) our client (nbdkit + the rnbd plugin) opens the kernel rnbd-server's /dev/ram0: nbdcopy
#      reads what the guest wrote there, nbdcopy --flush writes what the guest then finds
#      there; the plugin's counters show its FLUSH answered and no IO error.
# Skips (exit 77) only when the modules cannot be built here: linux-source-6.1 or the guest
# kernel's headers are not installed (the Makefile's package list has both).
#
# Env: RXEVM_ACCEL=tcg (kvm where available); SR_KEEP_TMP=1 keeps outputs, capture, console.

. "$(dirname "$0")/../integration/lib.sh"
need_build
[ "$(id -u)" = 0 ] || sr_skip "needs root (a network namespace and a tap device for the guest)"
need_cmd qemu-system-x86_64 dumpcap ip cpio gzip modprobe depmod ldd timeout nbdkit nbdcopy nbdinfo cmp
sr_netns_usable || sr_skip "'ip netns add' does not work here"
[ -c /dev/net/tun ] || sr_skip "no /dev/net/tun (the guest's tap device)"
SERVER=$SR_BUILD_DIR/bin/rnbd-server
PLUGIN=$SR_BUILD_DIR/lib/nbdkit-rnbd-plugin.so
[ -x "$SERVER" ] && [ -e "$PLUGIN" ] || sr_skip "no $SERVER or $PLUGIN (RNBD over RTRS not built)"

HERE=$SR_SOURCE_DIR/tests/interop/rxe-vm
GUEST=$SR_BUILD_DIR/rxe-vm-guest
SHARE=$SR_TMP/jobs
mkdir -p "$SHARE/kmod"

K=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
[ -n "$K" ] || sr_skip "no /boot/vmlinuz-* (the guest's kernel: apt-get install linux-image-amd64)"
KVER=${K#/boot/vmlinuz-}
KMOD=$SR_BUILD_DIR/rnbd-kmod/$KVER

t=$(date +%s.%N)
timeout 600 "$HERE/build-rnbd-modules.sh" "$KMOD" "$KVER" >"$SR_TMP/build-modules.out" 2>&1
rc=$?
cat "$SR_TMP/build-modules.out"
[ "$rc" != 2 ] || sr_skip "the kernel's RTRS/RNBD modules cannot be built here: $(tail -n1 "$SR_TMP/build-modules.out")"
if [ "$rc" != 0 ]; then
	sr_fail "kernel modules: build-rnbd-modules.sh failed (exit $rc)"
	sr_finish
fi
sr_ok "kernel modules for $KVER ready in $(sr_elapsed "$t") s ($KMOD)"
cp "$KMOD"/*.ko "$SHARE/kmod/"
BRD=$(modinfo -k "$KVER" -n brd 2>/dev/null)
[ -n "$BRD" ] && [ -e "$BRD" ] || sr_skip "no brd module for $KVER (the kernel server's /dev/ram0)"
case $BRD in
*.ko) cp "$BRD" "$SHARE/kmod/brd.ko" ;;
*.ko.xz) xz -dc "$BRD" >"$SHARE/kmod/brd.ko" ;;
*) sr_skip "brd module $BRD: unknown compression" ;;
esac

. "$HERE/lib.sh"
rxevm_image "$GUEST"
rxevm_net rnbdk
ip netns exec "$NS" timeout -s INT 900 dumpcap -i "$TAP" -B 64 -P -w "$SR_TMP/tap.pcap" \
	-f "udp port 4791" >"$SR_TMP/dumpcap.out" 2>&1 &
CAP=$!
SR_BG+=("$CAP")
rxevm_boot "$SHARE" 800

# gjob NAME SECONDS SCRIPT: runs SCRIPT in the guest (tests/interop/rxe-vm/init's job
# protocol), waits for it; returns its exit status (124: no answer in time). Output: $SHARE/NAME.out
gjob() {
	local name=$1 secs=$2 t0=$SECONDS
	printf '%s\n' "$3" >"$SHARE/.$name.tmp"
	mv "$SHARE/.$name.tmp" "$SHARE/$name.sh"
	while [ ! -e "$SHARE/$name.rc" ]; do
		kill -0 "$QEMU" 2>/dev/null || return 124
		[ $((SECONDS - t0)) -lt "$secs" ] || return 124
		sleep 0.2
	done
	return "$(cat "$SHARE/$name.rc")"
}
# host_env CMD...: CMD in the namespace, softrdma on the tap speaking the IB CM (exec: a
# background call's $! is then the process itself, which the test signals)
host_env() {
	exec ip netns exec "$NS" env SOFTRDMA_NETDEV="$TAP" SOFTRDMA_CM_WIRE=ibcm "$@"
}

# --- the kernel's modules
if gjob load 120 "set -e
insmod /jobs/kmod/brd.ko rd_nr=1 rd_size=16384
for m in rtrs-core rtrs-client rtrs-server rnbd-server rnbd-client; do insmod /jobs/kmod/\$m.ko; done
ls -d /sys/module/rtrs_core /sys/module/rtrs_client /sys/module/rtrs_server /sys/module/rnbd_server /sys/module/rnbd_client /dev/ram0
dmesg | grep -E 'rtrs|rnbd' | tail -5"; then
	sr_ok "guest: brd and the five modules loaded ($(grep -m1 -o 'proto 2.0[^)]*)' "$SHARE/load.out" || echo 'no proto line'))"
else
	sr_fail "guest: loading the modules failed"
	sr_tail "$SHARE/load.out" 20 >&2
	sr_finish
fi

MB=8
head -c ${MB}M /dev/urandom >"$SHARE/a.bin"	# written by the kernel client through /dev/rnbd0
head -c ${MB}M /dev/urandom >"$SHARE/b.bin"	# put in our export by the host, read by the kernel
head -c 16M /dev/urandom >"$SHARE/c.bin"	# the kernel server's /dev/ram0, read by our client
head -c 16M /dev/urandom >"$SR_TMP/d.bin"	# written by our client into /dev/ram0

# --- (a) the kernel's rnbd-client maps our rnbd-server's export
EXP=$SR_TMP/export
mkdir -p "$EXP"
truncate -s 32M "$EXP/disk.img"
dd if="$SHARE/b.bin" of="$EXP/disk.img" bs=1M seek=16 conv=notrunc status=none
PORT=$(sr_free_port "$NS")
# The server's default always_invalidate (each chunk's key renewed per request, through a type
# 1 memory window: the kernel's client writes a chunk on any connection of the path).
host_env timeout 300 "$SR" run -- "$SERVER" --search-path "$EXP" --port "$PORT" \
	--stats "$SR_TMP/srv.stats" >"$SR_TMP/srv.log" 2>&1 &
SRV=$!
SR_BG+=("$SRV")
for _ in $(seq 100); do
	grep -q exporting "$SR_TMP/srv.log" 2>/dev/null && break
	sleep 0.1
done
t=$(date +%s.%N)
# The ping first: the guest's first map_device, with the host not yet in its neighbour table,
# sent nothing after the ARP exchange and failed with ETIMEDOUT after 30 s (rdma_resolve_ip
# then waits for its timeout, which RTRS sets to the same 30 s as its own wait; see
# docs/rnbd.md "Kernel interop"); with the neighbour known it connects at once.
gjob map 150 "set -e
ping -c 1 -W 5 $HOST_IP >/dev/null
echo 'sessname=srk1 dest_port=$PORT path=ip:$HOST_IP device_path=disk.img access_mode=rw' >/sys/devices/virtual/rnbd-client/ctl/map_device
i=0; while [ ! -b /dev/rnbd0 ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i + 1)); done
echo size_sectors \$(cat /sys/block/rnbd0/size)
dd if=/dev/rnbd0 of=/tmp/b.back bs=1M skip=16 count=$MB iflag=direct
cmp /tmp/b.back /jobs/b.bin && echo READ-OK
dd if=/jobs/a.bin of=/dev/rnbd0 bs=1M oflag=direct conv=fsync
dd if=/dev/rnbd0 of=/tmp/a.back bs=1M count=$MB iflag=direct
cmp /tmp/a.back /jobs/a.bin && echo WRITE-READBACK-OK"
rc=$?
secs=$(sr_elapsed "$t")
# our server's counters while the kernel's session is there (rewritten every 200 ms)
sleep 1
cp "$SR_TMP/srv.stats" "$SR_TMP/srv.mapped.stats" 2>/dev/null
gjob unmap 60 "echo normal >/sys/block/rnbd0/rnbd/unmap_device && echo UNMAPPED" || rc=$?
if [ "$rc" = 0 ]; then
	sr_ok "kernel rnbd-client -> our rnbd-server: mapped /dev/rnbd0 ($(grep -o 'size_sectors [0-9]*' "$SHARE/map.out")), read $MB MiB the host wrote, wrote $MB MiB O_DIRECT and read them back equal, unmapped ($secs s)"
	# the kernel's FLUSH (conv=fsync) arrives as an RTRS READ without descriptor: executed,
	# and no message of the kernel's client refused
	sr_expect_grep "our server: the kernel client's session, no message refused" \
		"^session srk1 .* bad_msgs 0 " "$SR_TMP/srv.mapped.stats"
	sr_expect_grep "our server: the kernel client's FLUSH executed" \
		"^device .*disk.img .* flushes [1-9]" "$SR_TMP/srv.mapped.stats"
else
	sr_fail "kernel rnbd-client -> our rnbd-server: guest job exit $rc ($secs s)"
	sr_tail "$SHARE/map.out" 20 >&2
	sr_tail "$SR_TMP/srv.log" 20 >&2
	gjob dmesg-a 30 "dmesg | tail -30" ; sr_tail "$SHARE/dmesg-a.out" 30 >&2
fi
sr_expect_grep "kernel client: what the host put in the export read back equal" READ-OK "$SHARE/map.out"
sr_expect_grep "kernel client: written data read back equal" WRITE-READBACK-OK "$SHARE/map.out"
if cmp -s -n $((MB << 20)) "$SHARE/a.bin" "$EXP/disk.img"; then
	sr_ok "our rnbd-server's file holds the $MB MiB the kernel client wrote"
else
	sr_fail "our rnbd-server's file does not hold what the kernel client wrote"
fi
kill -TERM "$SRV" 2>/dev/null
sr_wait_pid "$SRV" 20
rc=$?
if [ "$rc" = 255 ]; then
	sr_fail "our rnbd-server did not exit within 20 s of SIGTERM (killed)"
	pkill -KILL -P "$SRV" 2>/dev/null
	kill -KILL "$SRV" 2>/dev/null
	sr_wait_pid "$SRV" 10
else
	sr_expect_eq "our rnbd-server: exit status after SIGTERM" 0 "$rc"
fi
sr_forget_pid "$SRV"
# Our client must get UDP 4791 on the tap's address: a device that finds it taken picks another
# port and names it in its GID (docs/gid.md), which a kernel peer cannot use.
for _ in $(seq 100); do
	[ -z "$(ip netns exec "$NS" ss -Huan 'sport = :4791' 2>/dev/null)" ] && break
	sleep 0.1
done
echo "UDP sockets in $NS before our client starts:"; ip netns exec "$NS" ss -uanp | sed 's/^/  | /'

# --- (b) our client opens the kernel rnbd-server's /dev/ram0
if gjob fill 60 "dd if=/jobs/c.bin of=/dev/ram0 bs=1M conv=fsync && echo FILLED"; then
	SOCK=$SR_TMP/nbd.sock
	URI="nbd+unix:///?socket=$SOCK"
	host_env timeout 300 "$SR" run -- nbdkit -f -v -U "$SOCK" "$PLUGIN" session=srk2 \
		path="$GUEST_IP:1234" device=dev/ram0 stats="$SR_TMP/cli.stats" >"$SR_TMP/nbdkit.log" 2>&1 &
	CLI=$!
	SR_BG+=("$CLI")
	t=$(date +%s.%N)
	up=
	for _ in $(seq 600); do
		[ -S "$SOCK" ] && nbdinfo --size "$URI" >"$SR_TMP/size.out" 2>/dev/null && { up=1; break; }
		kill -0 "$CLI" 2>/dev/null || break
		sleep 0.1
	done
	if [ -n "$up" ]; then
		sr_ok "our client -> kernel rnbd-server: opened dev/ram0, size $(cat "$SR_TMP/size.out") ($(sr_elapsed "$t") s)"
		sr_expect_eq "our client: the device's size" $((16 << 20)) "$(cat "$SR_TMP/size.out")"
		t=$(date +%s.%N)
		if timeout 120 nbdcopy "$URI" "$SR_TMP/c.back" 2>"$SR_TMP/nbdcopy1.err" &&
			cmp -s "$SR_TMP/c.back" "$SHARE/c.bin"; then
			sr_ok "our client: nbdcopy of the kernel's /dev/ram0 (16 MiB) equals what the guest wrote ($(sr_elapsed "$t") s)"
		else
			sr_fail "our client: nbdcopy from the kernel's /dev/ram0 failed or differs"
			sr_tail "$SR_TMP/nbdcopy1.err" >&2
		fi
		t=$(date +%s.%N)
		if timeout 120 nbdcopy --flush "$SR_TMP/d.bin" "$URI" 2>"$SR_TMP/nbdcopy2.err"; then
			sr_ok "our client: nbdcopy --flush of 16 MiB into the kernel's /dev/ram0 ($(sr_elapsed "$t") s)"
		else
			sr_fail "our client: nbdcopy into the kernel's /dev/ram0 failed"
			sr_tail "$SR_TMP/nbdcopy2.err" >&2
		fi
		sleep 1.2	# the plugin's counters, rewritten while it runs
		sr_expect_grep "our client: its FLUSH answered by the kernel's server" "^flushes [1-9]" "$SR_TMP/cli.stats"
		sr_expect_grep "our client: no IO error" "^errors 0$" "$SR_TMP/cli.stats"
		kill -TERM "$CLI" 2>/dev/null
		sr_wait_pid "$CLI" 20 >/dev/null
		sr_forget_pid "$CLI"
		cp "$SR_TMP/d.bin" "$SHARE/d.bin"
		if gjob check 60 "cmp /dev/ram0 /jobs/d.bin && echo SAME"; then
			sr_ok "the kernel's /dev/ram0 holds the 16 MiB our client wrote"
		else
			sr_fail "the kernel's /dev/ram0 does not hold what our client wrote"
			sr_tail "$SHARE/check.out" >&2
		fi
	else
		sr_fail "our client -> kernel rnbd-server: nbdkit did not come up ($(sr_elapsed "$t") s)"
		sr_tail "$SR_TMP/nbdkit.log" 20 >&2
	fi
else
	sr_fail "guest: filling /dev/ram0 failed"
	sr_tail "$SHARE/fill.out" >&2
fi

gjob dmesg 30 "dmesg | grep -Ei 'rtrs|rnbd' | tail -40" || true
rxevm_stop
kill -INT "$CAP" 2>/dev/null
sr_wait_pid "$CAP" 15 >/dev/null
sr_forget_pid "$CAP"
echo "guest's RTRS/RNBD messages:"
sed 's/^/  | /' "$SHARE/dmesg.out" 2>/dev/null | tail -40
if grep -Eq 'Oops|BUG:|Call Trace|panic' "$SR_TMP/console.log"; then
	sr_fail "guest console shows a kernel Oops/BUG/panic"
	grep -E -m5 'Oops|BUG:|Call Trace|panic' "$SR_TMP/console.log" | sed 's/^/  | /' >&2
fi
sr_finish
