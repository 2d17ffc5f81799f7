#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Debian's unmodified ibverbs-utils see the zero-configuration device: `ibv_devices` lists
# softrdma0; `ibv_devinfo` and `ibv_devinfo -v` exit 0 and show an active Ethernet port with a
# RoCE v2 GID, global atomics and sane limits.

. "$(dirname "$0")/lib.sh"
need_build
need_cmd ibv_devices ibv_devinfo

T=30	# seconds any one command may take (they open a device and query it: milliseconds)

# run_util NAME CMD...: CMD on softrdma, output in $SR_TMP/NAME.out; checks exit status 0.
run_util() {
	local name=$1 rc
	shift
	timeout -k 5 "$T" "$SR" run -- "$@" >"$SR_TMP/$name.out" 2>&1
	rc=$?
	if [ $rc -eq 0 ]; then
		sr_ok "'$*' exited 0"
	else
		sr_fail "'$*' exited $rc$([ $rc = 124 ] && echo " (timed out after $T s)")"
		sr_tail "$SR_TMP/$name.out" >&2
	fi
}

# field FILE NAME: the value of a "NAME: value" line of ibv_devinfo (first match).
field() {
	awk -v k="$2:" '$1 == k { $1 = ""; sub(/^[ \t]+/, ""); print; exit }' "$1"
}
# expect_field_ge FILE NAME MIN: a numeric (decimal or 0x) field is at least MIN.
expect_field_ge() {
	local v
	v=$(field "$1" "$2")
	case $v in
	0x*) # may exceed bash's signed 64-bit arithmetic (max_mr_size is 0xffffffffffffffff)
		[ ${#v} -gt 17 ] && v=${v:0:17}
		v=$(awk -v h="${v#0x}" 'BEGIN { n = 0; h = tolower(h)
			for (i = 1; i <= length(h); i++) n = n * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1
			printf "%.0f\n", (n > 9e18 ? 9e18 : n) }') ;;
	esac
	sr_expect_ge "devinfo -v: $2" "$3" "${v:-missing}"
}

# --- ibv_devices
run_util devices ibv_devices
sr_expect_grep "ibv_devices lists softrdma0" '^[[:space:]]+softrdma0[[:space:]]+[0-9a-f]{16}$' \
	"$SR_TMP/devices.out"

# --- ibv_devinfo
run_util devinfo ibv_devinfo
f=$SR_TMP/devinfo.out
sr_expect_grep "devinfo: hca_id" '^hca_id:[[:space:]]+softrdma0$' "$f"
sr_expect_grep "devinfo: port 1" '^[[:space:]]+port:[[:space:]]+1$' "$f"
sr_expect_grep "devinfo: PORT_ACTIVE" 'state:[[:space:]]+PORT_ACTIVE \(4\)' "$f"
sr_expect_grep "devinfo: link_layer" 'link_layer:[[:space:]]+Ethernet$' "$f"
sr_expect_grep "devinfo: active_mtu" 'active_mtu:[[:space:]]+(256|512|1024|2048|4096) \([1-5]\)' "$f"
sr_expect_eq "devinfo: phys_port_cnt" 1 "$(field "$f" phys_port_cnt)"

# --- ibv_devinfo -v (and -d naming the device)
run_util devinfo_v ibv_devinfo -v -d softrdma0
f=$SR_TMP/devinfo_v.out
sr_expect_grep "devinfo -v: hca_id" '^hca_id:[[:space:]]+softrdma0$' "$f"
sr_expect_grep "devinfo -v: PORT_ACTIVE" 'state:[[:space:]]+PORT_ACTIVE \(4\)' "$f"
sr_expect_grep "devinfo -v: link_layer" 'link_layer:[[:space:]]+Ethernet$' "$f"
sr_expect_grep "devinfo -v: phys_state" 'phys_state:[[:space:]]+LINK_UP \(5\)' "$f"
# The zero-config device is on loopback: its GID is ::ffff:127.0.0.1 (UDP 4791), or, when
# another process holds 127.0.0.1:4791, another 127.x.y.z address, or the port-encoding form
# (src/core/addr.h, src/net/udp.c).
sr_expect_grep "devinfo -v: GID[0] is a loopback RoCE v2 GID" \
	'GID\[ *0\]:[[:space:]]+::([0-9a-f]{1,4}:)?ffff:127\.[0-9]+\.[0-9]+\.[0-9]+, RoCE v2$' "$f"
sr_expect_eq "devinfo -v: atomic_cap" "ATOMIC_HCA (1)" "$(field "$f" atomic_cap)"
sr_expect_eq "devinfo -v: transport" "InfiniBand (0)" "$(field "$f" transport)"
sr_expect_eq "devinfo -v: max_pkeys" 1 "$(field "$f" max_pkeys)"
expect_field_ge "$f" gid_tbl_len 1
expect_field_ge "$f" pkey_tbl_len 1
# Limits an ordinary program relies on (rdma-core's rxe offers these orders of magnitude).
expect_field_ge "$f" max_qp 64
expect_field_ge "$f" max_qp_wr 1024
expect_field_ge "$f" max_sge 4
expect_field_ge "$f" max_sge_rd 1
expect_field_ge "$f" max_cq 64
expect_field_ge "$f" max_cqe 4096
expect_field_ge "$f" max_mr 64
expect_field_ge "$f" max_pd 64
expect_field_ge "$f" max_qp_rd_atom 1
expect_field_ge "$f" max_qp_init_rd_atom 1
expect_field_ge "$f" max_srq 1
expect_field_ge "$f" max_srq_wr 1024
expect_field_ge "$f" max_srq_sge 1
expect_field_ge "$f" max_ah 1
expect_field_ge "$f" max_mr_size $((1 << 30))
expect_field_ge "$f" max_msg_sz $((1 << 30))
# ibv_devinfo prints the MTUs as "4096 (5)": the value before the parenthesis.
max_mtu=$(field "$f" max_mtu)
active_mtu=$(field "$f" active_mtu)
sr_expect_eq "devinfo -v: max_mtu on loopback" "4096 (5)" "$max_mtu"
sr_expect_eq "devinfo -v: active_mtu on loopback" "4096 (5)" "$active_mtu"
# The CQ and QP limits are consistent with each other.
qp_wr=$(field "$f" max_qp_wr)
cqe=$(field "$f" max_cqe)
sr_expect_ge "devinfo -v: max_cqe >= max_qp_wr" "${qp_wr:-1}" "${cqe:-missing}"

# --- ibv_devinfo -d on an unknown device fails cleanly (a message, a non-zero exit, no crash)
timeout -k 5 "$T" "$SR" run -- ibv_devinfo -d no_such_device >"$SR_TMP/nodev.out" 2>&1
rc=$?
# (ibv_devinfo returns -1 there: 255; a signal would be 128+N.)
if { [ $rc -ge 1 ] && [ $rc -le 123 ] || [ $rc -eq 255 ]; } &&
	grep -q "no_such_device" "$SR_TMP/nodev.out"; then
	sr_ok "ibv_devinfo -d no_such_device fails cleanly (exit $rc)"
else
	sr_fail "ibv_devinfo -d no_such_device exited $rc, wanted a plain failure"
	sr_tail "$SR_TMP/nodev.out" >&2
fi

sr_finish
