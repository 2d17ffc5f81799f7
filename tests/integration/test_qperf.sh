#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Debian's unmodified qperf over softrdma's librdmacm + libibverbs, with rdma_cm connection
# setup (-cm1): rc_bw, rc_lat, rc_rdma_write_bw and rc_rdma_read_bw, server and client as
# separate processes, on loopback and (as root) between two network namespaces joined by a
# veth pair, each side's device on its veth (SOFTRDMA_NETDEV).
#
# qperf's server binds its rdma_cm id to port 0, reads the port with rdma_get_src_port and sends
# it to the client over its TCP control connection before it listens: this needs the port
# picked at bind time, as the kernel's rdma_cm does (before, "rdma_connect failed").
# Every test must report a rate or latency above 0; each qperf is bounded by `timeout`.

. "$(dirname "$0")/lib.sh"
need_build
need_cmd qperf ss timeout

TESTS="rc_bw rc_lat rc_rdma_write_bw rc_rdma_read_bw"

# run_qperf TAG SRV_NS CLI_NS SRV_DEV CLI_DEV HOST
run_qperf() {
	local tag=$1 sns=$2 cns=$3 sdev=$4 cdev=$5 host=$6 port spid rc t n out=$SR_TMP/$1.cli.out
	port=$(sr_free_port "$sns") || { sr_fail "$tag: no free port"; return; }
	timeout -k 5 120 ${sns:+ip netns exec "$sns"} env ${sdev:+SOFTRDMA_NETDEV=$sdev} \
		"$SR" run -- qperf -lp "$port" >"$SR_TMP/$tag.srv.out" 2>&1 &
	spid=$!
	SR_BG+=("$spid")
	if ! sr_wait_listen "$port" "$spid" "$sns" 20; then
		sr_fail "$tag: the qperf server does not listen on $port"
		sr_tail "$SR_TMP/$tag.srv.out" >&2
		return
	fi
	# shellcheck disable=SC2086	# (TESTS is a list)
	timeout -k 5 90 ${cns:+ip netns exec "$cns"} env ${cdev:+SOFTRDMA_NETDEV=$cdev} \
		"$SR" run -- qperf -cm1 -lp "$port" -t 2 "$host" $TESTS >"$out" 2>&1
	rc=$?
	kill -TERM "$spid" 2>/dev/null
	sr_wait_pid "$spid" 10 >/dev/null || true
	sr_forget_pid "$spid"
	if [ "$rc" -ne 0 ]; then
		sr_fail "$tag: qperf -cm1 exited $(sr_rc_text "$rc")"
		sr_tail "$out" >&2
		sr_tail "$SR_TMP/$tag.srv.out" >&2
	fi
	# Each test prints "<name>:" then "    bw  =  1.9 GB/sec" or "    latency  =  106 us".
	for t in $TESTS; do
		n=$(awk -v t="$t:" '$1 == t { getline; if ($1 == "bw" || $1 == "latency") print $3 }' "$out")
		if awk -v v="${n:-0}" 'BEGIN { exit !(v > 0) }'; then
			sr_ok "$tag: $t $(awk -v t="$t:" '$1 == t { getline; $1 = $1; print }' "$out")"
		else
			sr_fail "$tag: $t reported no rate above 0 ('${n}')"
			sr_tail "$out" >&2
		fi
	done
}

export LD_LIBRARY_PATH=$SR_BUILD_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
run_qperf lo '' '' '' '' localhost

if sr_netns_usable; then
	if sr_netns_pair qpf; then
		run_qperf netns "$SR_NSA" "$SR_NSB" "$SR_VA" "$SR_VB" "$SR_NET.1"
	else
		sr_fail "could not set up the namespaces and the veth pair"
	fi
else
	echo "(not root or no netns: the namespace half is skipped)"
fi
sr_finish
