#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Chaos between two hosts: verbs/test_fault_integrity's workload (WRITE, READ, SEND, FETCH_ADD,
# CMP_SWAP with up to 32 WRs in flight, every byte of the target's memory checked against an
# independent model at the end) with its initiator in one network namespace and its target in
# another, joined by a veth pair, softrdma's fault injection (SOFTRDMA_FAULT) on everything both
# send: the mix of the committed test, then 20 % loss. This kernel has no sch_netem, so the
# faults are softrdma's own, on transmit (docs/reliability.md, Chaos).
#
# Env: SR_FAULT_MIB (default 16) for a longer run by hand.

. "$(dirname "$0")/lib.sh"
need_build
need_root
need_cmd timeout
BIN=$SR_BUILD_DIR/tests/test_fault_integrity
[ -x "$BIN" ] || { echo "FAIL: no $BIN (build first)" >&2; exit 1; }
MIB=${SR_FAULT_MIB:-16}

if ! sr_netns_pair cha; then
	sr_fail "two namespaces joined by a veth pair"
	sr_finish
fi
i=0
for spec in drop=0.05,dup=0.02,reorder=0.05,corrupt=0.01 drop=0.2; do
	i=$((i + 1))
	out=$SR_TMP/chaos-$i.out
	if SR_FAULT_NETNS="$SR_NSA:$SR_VA,$SR_NSB:$SR_VB" SR_FAULT_SPEC=$spec SR_FAULT_MIB=$MIB \
		SR_FAULT_BUDGET_S=60 timeout 250 "$BIN" >"$out" 2>&1; then
		sr_ok "$spec: test_fault_integrity between $SR_NSA and $SR_NSB exits 0"
	else
		sr_fail "$spec: test_fault_integrity between $SR_NSA and $SR_NSB exits $?"
		sr_tail "$out"
	fi
	sr_expect_grep "$spec: the initiator ran in $SR_NSA" "^initiator: network namespace $SR_NSA, interface $SR_VA" "$out"
	sr_expect_grep "$spec: the target ran in $SR_NSB" "^target: network namespace $SR_NSB, interface $SR_VB" "$out"
	sr_expect_grep "$spec: every byte as the model says" "^figures: .* result=byte-exact" "$out"
	grep '^figures: ' "$out" || true
done
sr_finish
