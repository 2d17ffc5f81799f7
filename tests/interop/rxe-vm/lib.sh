#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The kernel-rxe test bed shared by the VM tests (tests/interop/test_rxe_vm.sh,
# test_rnbd_kernel.sh); sourced after tests/integration/lib.sh, never run. docs/interop.md.
#
#   rxevm_image GUEST          the guest image (build-guest.sh, cached in GUEST), or fail
#   rxevm_net PREFIX           a namespace sr-PREFIX-PID holding a tap srPREFIX-short + PID on
#                              a random 10.x.y.0/24: sets NS, TAP, HOST_IP, GUEST_IP; removed
#                              at exit (and a namespace of an earlier run whose PID is gone)
#   rxevm_boot SHARE DEADLINE  qemu (TCG by default: RXEVM_ACCEL) on the tap, the 9p job
#                              directory SHARE; the guest powers off after DEADLINE s of
#                              uptime, qemu is killed after DEADLINE + 100 s. Waits up to 180 s
#                              for guest-ready: sets QEMU (its pid) and BOOT_S, or fails
#   rxevm_stop                 asks the guest to power off (SHARE/stop) and waits for qemu
#
# A failure of these steps ends the test (sr_finish): nothing after them can run.

RXEVM_HERE=$SR_SOURCE_DIR/tests/interop/rxe-vm
RXEVM_ACCEL=${RXEVM_ACCEL:-tcg}

rxevm_image() {
	local t
	t=$(date +%s.%N)
	if ! timeout 300 env -u LD_LIBRARY_PATH "$RXEVM_HERE/build-guest.sh" "$1" >"$SR_TMP/build-guest.out" 2>&1; then
		sr_fail "guest image: build-guest.sh failed"
		sr_tail "$SR_TMP/build-guest.out" >&2
		sr_finish
	fi
	cat "$SR_TMP/build-guest.out"
	echo "guest image ready in $(sr_elapsed "$t") s ($1)"
	RXEVM_GUEST=$1
}

rxevm_net() {
	local prefix=$1 ns net
	# the namespace of an earlier run that was killed before its cleanup: its PID is gone
	for ns in $(ip netns list 2>/dev/null | awk -v p="^sr-$prefix-[0-9]+" '$1 ~ p { print $1 }'); do
		kill -0 "${ns#sr-"$prefix"-}" 2>/dev/null || ip netns del "$ns" 2>/dev/null
	done
	NS=sr-$prefix-$$
	TAP=sr${prefix:0:3}$$
	net=10.$((100 + RANDOM % 100)).$((RANDOM % 256))
	HOST_IP=$net.1 GUEST_IP=$net.2
	sr_at_exit "ip -n $NS link del $TAP 2>/dev/null; ip netns del $NS 2>/dev/null"
	if ! { ip netns add "$NS" && ip -n "$NS" link set lo up &&
		ip netns exec "$NS" ip tuntap add dev "$TAP" mode tap &&
		ip -n "$NS" addr add "$HOST_IP/24" dev "$TAP" && ip -n "$NS" link set "$TAP" up; } \
		>"$SR_TMP/netns.out" 2>&1; then
		sr_fail "namespace $NS with tap $TAP: setup failed"
		sr_tail "$SR_TMP/netns.out" >&2
		sr_finish
	fi
}

rxevm_boot() {
	local share=$1 deadline=$2 t_boot
	RXEVM_SHARE=$share
	t_boot=$(date +%s.%N)
	ip netns exec "$NS" timeout -s KILL $((deadline + 100)) qemu-system-x86_64 -accel "$RXEVM_ACCEL" -cpu max -smp 1 -m 512 \
		-nographic -no-reboot -kernel "$RXEVM_GUEST/vmlinuz" -initrd "$RXEVM_GUEST/initramfs.cpio.gz" \
		-append "console=ttyS0 quiet loglevel=4 panic=-1 mitigations=off tsc=reliable rxevm.ip=$GUEST_IP/24 rxevm.deadline=$deadline" \
		-virtfs "local,path=$share,mount_tag=jobs,security_model=none,id=jobs" \
		-netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no" \
		-device virtio-net-pci,netdev=n0,mac=52:54:00:5e:00:02 \
		</dev/null >"$SR_TMP/console.log" 2>&1 &
	QEMU=$!
	SR_BG+=("$QEMU")
	while [ ! -e "$share/guest-ready" ]; do
		if ! kill -0 "$QEMU" 2>/dev/null || [ -e "$share/guest-failed" ] ||
			[ "$(awk -v a="$t_boot" -v b="$(date +%s.%N)" 'BEGIN { print (b - a > 180) }')" = 1 ]; then
			sr_fail "guest: not ready (qemu $(kill -0 "$QEMU" 2>/dev/null && echo running || echo gone) after $(sr_elapsed "$t_boot") s)"
			sr_tail "$SR_TMP/console.log" 30 >&2
			sr_finish
		fi
		sleep 0.2
	done
	BOOT_S=$(sr_elapsed "$t_boot")
	sr_ok "guest ready in $BOOT_S s ($RXEVM_ACCEL): $(tr '\n' ' ' <"$share/guest-ready")"
}

rxevm_stop() {
	touch "$RXEVM_SHARE/stop"
	sr_wait_pid "$QEMU" 60 >/dev/null
	sr_forget_pid "$QEMU"
}
