#!/bin/bash
# SPDX-License-Identifier: MIT
#
# softrdma on a real (virtual) network: two network namespaces joined by a veth pair, the
# server's device bound to the veth of namespace A (SOFTRDMA_NETDEV), the client's to the
# veth of namespace B, the client connecting to A's address. Root only (skipped otherwise).
#
#   - ibv_devinfo in each namespace: the GID names the veth's address, the active MTU follows
#     the interface MTU: 1500 gives RoCE 1024, 9000 gives 4096;
#   - the pingpongs (RC, UC, UD, SRQ) at MTU 1500, UD up to and just beyond the 1024 limit;
#   - after setting both veths to MTU 9000, RC with a 4096 path MTU and UD at 4096;
#   - a path MTU larger than the link allows (-m 4096 at MTU 1500) ends cleanly, never hangs.
# The namespaces (and with them the veths) are removed on exit, whatever happens.

. "$(dirname "$0")/lib.sh"
need_build
need_root
need_cmd ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong ibv_devinfo ss timeout

if ! sr_netns_pair srp; then
	sr_fail "could not set up the namespaces and the veth pair"
	sr_finish
fi
NSA=$SR_NSA NSB=$SR_NSB VA=$SR_VA VB=$SR_VB IPA=$SR_NET.1 IPB=$SR_NET.2
echo "namespaces $NSA ($VA $IPA) and $NSB ($VB $IPB)"

SR_SRV_NS=$NSA
SR_CLI_NS=$NSB
SR_SRV_ENV=("SOFTRDMA_NETDEV=$VA")
SR_CLI_ENV=("SOFTRDMA_NETDEV=$VB")
SR_SERVER_HOST=$IPA

# devinfo NS DEV IP MTU: ibv_devinfo -v in NS with the device bound to DEV.
devinfo() {
	local ns=$1 dev=$2 ip=$3 mtu=$4 f=$SR_TMP/devinfo.$1.$4 rc
	timeout -k 5 30 ip netns exec "$ns" env SOFTRDMA_NETDEV="$dev" "$SR" run -- ibv_devinfo -v \
		>"$f" 2>&1
	rc=$?
	if [ $rc -ne 0 ]; then
		sr_fail "ibv_devinfo -v in $ns on $dev exited $rc"
		sr_tail "$f" >&2
		return
	fi
	sr_expect_grep "devinfo in $ns: PORT_ACTIVE" 'state:[[:space:]]+PORT_ACTIVE' "$f"
	sr_expect_grep "devinfo in $ns: GID of $dev" "GID\\[ *0\\]:[[:space:]]+::ffff:${ip//./\\.}, RoCE v2\$" "$f"
	sr_expect_grep "devinfo in $ns: active_mtu $mtu" "active_mtu:[[:space:]]+$mtu \\(" "$f"
}

# run NAME SIZE ITERS ALLOWED_DROPS PROG ARGS... (as in test_pingpong_loopback.sh)
run() {
	local name=$1 size=$2 iters=$3 allowed=$4
	shift 4
	if sr_pair "$name" "$@"; then
		sr_check_pingpong "$name" "$size" "$iters"
		sr_check_stats "$name" $((size * iters)) $allowed
		sr_expect_no_grep "$name: no invalid data reported" 'invalid data' "$SR_TMP/$name.srv.out"
		# The server's device is bound to the veth, not loopback.
		sr_expect_grep "$name: client sees the server's GID on $VA" \
			"remote address: .*GID ::ffff:${IPA//./\\.}\$" "$SR_TMP/$name.cli.out"
	fi
	sr_show_stats "$name"
}
# A peer that saw loss sends its last ACK again when it destroys its QP (sr_resp_final_ack),
# and a tail-loss probe may cross the peer's exit: both reach a QP that is gone.
RC_OK="drop_psn drop_qp_gone"
SRQ_OK="drop_psn drop_qp_gone"	# see test_pingpong_loopback.sh

# --- veth MTU 1500: RoCE active MTU 1024
devinfo "$NSA" "$VA" "$IPA" 1024
devinfo "$NSB" "$VB" "$IPB" 1024
run rc_s4096   4096    1000 "$RC_OK" ibv_rc_pingpong -g 0 -s 4096 -c
run rc_s1m     1048576 100  "$RC_OK" ibv_rc_pingpong -g 0 -s 1048576 -n 100 -c
run rc_ev_new  65536   300  "$RC_OK" ibv_rc_pingpong -g 0 -s 65536 -n 300 -e -N
run uc_default 4096    1000 ""       ibv_uc_pingpong -g 0 -c
run ud_s1024   1024    1000 ""       ibv_ud_pingpong -g 0 -s 1024 -c
run srq        4096    500  "$SRQ_OK" ibv_srq_pingpong -g 0 -n 500 -c

# UD one byte beyond the active MTU: the program refuses, from the port attributes.
out=$SR_TMP/ud_s1025.out
timeout -k 5 30 ip netns exec "$NSA" env SOFTRDMA_NETDEV="$VA" "$SR" run -- \
	ibv_ud_pingpong -g 0 -s 1025 -p "$(sr_free_port)" >"$out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q 'Requested size larger than port MTU (1024)' "$out"; then
	sr_ok "ud -s 1025 at MTU 1500: refused by the program (port MTU 1024)"
else
	sr_fail "ud -s 1025 at MTU 1500: wanted a refusal naming port MTU 1024, got exit $rc"
	sr_tail "$out" >&2
fi

# A path MTU beyond what the link carries: 4096-byte packets cannot cross a 1500-byte link
# (the device sends with DF). Either the QP refuses the path MTU (the server prints "Failed
# to modify QP to RTR" and both sides exit non-zero at once) or the device clamps it to the
# active MTU and the run succeeds; hanging, or a transport error, is wrong.
name=rc_m4096_mtu1500
SR_PAIR_TIMEOUT=30 SR_PAIR_NOJUDGE=1 sr_pair $name ibv_rc_pingpong -g 0 -m 4096 -s 65536 -n 100
if [ "$SR_SRV_RC" -eq 0 ] && [ "$SR_CLI_RC" -eq 0 ]; then
	sr_ok "$name: path MTU 4096 on a 1500-byte link: clamped, the run succeeded"
	sr_check_pingpong $name 65536 100
elif grep -q 'Failed to modify QP to RTR' "$SR_TMP/$name.srv.out" "$SR_TMP/$name.cli.out" &&
	[ "$SR_SRV_RC" -lt 128 ] && [ "$SR_CLI_RC" -lt 128 ]; then
	sr_ok "$name: path MTU 4096 on a 1500-byte link: refused by ibv_modify_qp, both sides ended"
else
	sr_fail "$name: path MTU 4096 on a 1500-byte link neither refused nor clamped" \
		"(server exit $(sr_rc_text "$SR_SRV_RC"), client exit $(sr_rc_text "$SR_CLI_RC"))"
	sr_tail "$SR_TMP/$name.srv.out" >&2
	sr_tail "$SR_TMP/$name.cli.out" >&2
	sr_show_stats $name >&2
fi

# --- veth MTU 9000: RoCE active MTU 4096
if ! { ip -n "$NSA" link set "$VA" mtu 9000 && ip -n "$NSB" link set "$VB" mtu 9000; }; then
	sr_fail "could not set MTU 9000 on $VA/$VB"
fi
devinfo "$NSA" "$VA" "$IPA" 4096
devinfo "$NSB" "$VB" "$IPB" 4096
run rc_m4096   65536   500  "$RC_OK" ibv_rc_pingpong -g 0 -m 4096 -s 65536 -n 500 -c
run rc_s1m_9k  1048576 100  "$RC_OK" ibv_rc_pingpong -g 0 -m 4096 -s 1048576 -n 100
run uc_m4096   16384   500  ""       ibv_uc_pingpong -g 0 -m 4096 -s 16384 -n 500 -c
run ud_s4096   4096    1000 ""       ibv_ud_pingpong -g 0 -s 4096 -c

sr_finish
