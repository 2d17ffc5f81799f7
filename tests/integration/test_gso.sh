#!/bin/bash
# SPDX-License-Identifier: MIT
#
# UDP GSO/GRO on the packet path (parameter gso, src/net/udp.c), between two network
# namespaces joined by a veth (MTU 9000). ibv_rc_pingpong -m 1024 -s 65536 -c: each message is
# 64 packets of 1024 bytes, which the sender gathers into GSO sends. Root only.
#
#   gro:  the veth carries each GSO send whole and the receiving socket takes it in one datagram
#         (UDP_GRO): data checked by the program, GSO sends counted on both sides, and no IP ID
#         had to be recovered (packet i of a batch verified with ID i, as expected);
#   cut:  with tx-udp-segmentation off on both veths (ethtool), the kernel cuts every GSO send
#         into datagrams in software, as a NIC without UDP segmentation offload would, and the
#         receiver gets them one by one. A capture of those datagrams must show IPv4 IDs other
#         than 0 (the batches really were cut) and every ICRC must verify against the real IP
#         header (`softrdma pcap`): what leaves is exactly what separate sends would be. The
#         receivers recover the IDs from the ICRC (rx_id_recovered > 0) and the data is intact;
#   off:  SOFTRDMA_GSO=0: no GSO send at all.

. "$(dirname "$0")/lib.sh"
need_build
need_root
need_cmd ibv_rc_pingpong ethtool dumpcap tshark timeout

if ! sr_netns_pair srg 9000; then
	sr_fail "could not set up the namespaces and the veth pair"
	sr_finish
fi
NSA=$SR_NSA NSB=$SR_NSB VA=$SR_VA VB=$SR_VB IPA=$SR_NET.1
SR_SRV_NS=$NSA
SR_CLI_NS=$NSB
SR_SERVER_HOST=$IPA
RC_OK="drop_psn drop_qp_gone"	# see test_pingpong_loopback.sh
SIZE=65536 ITERS=300
PP=(ibv_rc_pingpong -g 0 -m 1024 -s $SIZE -n $ITERS -c)

# run NAME [ENV...]: the pingpong with ENV on both sides; data and counters checked.
run() {
	local name=$1
	shift
	SR_SRV_ENV=("SOFTRDMA_NETDEV=$VA" "$@") SR_CLI_ENV=("SOFTRDMA_NETDEV=$VB" "$@")
	if sr_pair "$name" "${PP[@]}"; then
		sr_check_pingpong "$name" $SIZE $ITERS
		sr_check_stats "$name" $((SIZE * ITERS)) $RC_OK
		sr_expect_no_grep "$name srv: no invalid data reported" 'invalid data' "$SR_TMP/$name.srv.out"
		sr_expect_no_grep "$name cli: no invalid data reported" 'invalid data' "$SR_TMP/$name.cli.out"
	fi
	sr_show_stats "$name"
}

# --- whole batches, GRO at the receiver
run gro
for side in srv cli; do
	sr_expect_ge "gro $side: GSO sends" 10 "$(sr_side_stat gro $side tx_gso_sends)"
	sr_expect_eq "gro $side: no IP ID recovered (batches verified with IDs 0, 1, ...)" 0 \
		"$(sr_side_stat gro $side rx_id_recovered)"
done

# --- batches cut in software before the veth, captured as they cross it
if ip netns exec "$NSA" ethtool -K "$VA" tx-udp-segmentation off >/dev/null 2>&1 &&
	ip netns exec "$NSB" ethtool -K "$VB" tx-udp-segmentation off >/dev/null 2>&1; then
	cap=$SR_TMP/capture.pcap	# not cut.*: sr_pair cut removes those
	ip netns exec "$NSA" timeout -k 5 120 dumpcap -q -P -i "$VA" -w "$cap" \
		-f "udp port 4791" >"$SR_TMP/dumpcap.out" 2>&1 &
	dpid=$!
	SR_BG+=("$dpid")
	for ((i = 0; i < 100; i++)); do	# until it captures (it creates the file then)
		[ -s "$cap" ] && break
		sleep 0.05
	done
	run cut
	sleep 0.5
	kill -INT "$dpid" 2>/dev/null
	wait "$dpid" 2>/dev/null
	sr_forget_pid "$dpid"
	for side in srv cli; do
		sr_expect_ge "cut $side: GSO sends" 10 "$(sr_side_stat cut $side tx_gso_sends)"
		sr_expect_ge "cut $side: IP IDs recovered from the ICRC" 10 \
			"$(sr_side_stat cut $side rx_id_recovered)"
	done
	ids=$(tshark -r "$cap" -T fields -e ip.id 2>/dev/null | sort -u | wc -l)
	sr_expect_ge "cut: the capture holds several IPv4 IDs (batches cut into 0, 1, ...)" 8 "$ids"
	big=$(tshark -r "$cap" -Y "ip.len > 1500" -T fields -e ip.len 2>/dev/null | wc -l)
	sr_expect_eq "cut: no uncut GSO send in the capture" 0 "$big"
	"$SR" pcap "$cap" >"$SR_TMP/capture.check" 2>&1
	summary=$(tail -n1 "$SR_TMP/capture.check")
	echo "$summary"
	ok=$(sed -n 's/.*ICRC ok=\([0-9]*\) bad=\([0-9]*\) malformed=\([0-9]*\).*/\1/p' <<<"$summary")
	bad=$(sed -n 's/.*ICRC ok=\([0-9]*\) bad=\([0-9]*\) malformed=\([0-9]*\).*/\2 \3/p' <<<"$summary")
	sr_expect_ge "cut: ICRCs verified against the captured IP headers" \
		$((SIZE / 1024 * ITERS)) "${ok:-0}"
	sr_expect_eq "cut: no bad ICRC, nothing malformed" "0 0" "$bad"
else
	sr_fail "ethtool could not turn tx-udp-segmentation off on the veths"
fi

# --- the parameter turns it off
run off SOFTRDMA_GSO=0
for side in srv cli; do
	sr_expect_eq "off $side: no GSO send" 0 "$(sr_side_stat off $side tx_gso_sends)"
done

sr_finish
