#!/bin/bash
# SPDX-License-Identifier: MIT
# Chaos figures: verbs/test_fault_integrity's workload (two processes; WRITE, READ, SEND,
# FETCH_ADD, CMP_SWAP, 32 WRs in flight; every READ, atomic result and SEND checked as it
# completes and every byte of the target's 16 MiB compared with an independent model at the
# end) under softrdma's fault injection, once per fault spec, on loopback and, when root can make
# network namespaces, between two namespaces joined by a veth pair. Prints a markdown table
# (docs/reliability.md, Chaos). A measurement, not a test: the bounded cases are CTest's
# verbs/test_fault_integrity.* and integration/test_chaos_netns.
#
#   tools/chaos.sh [-m MIB] [-b BUILD] [-n] [SPEC...]
#
#   -m MIB    volume per run (default 64; each run stops after 120 s and says how far it got)
#   -b BUILD  the build directory (default build)
#   -n        loopback only
#   SPEC      SOFTRDMA_FAULT values (default: none, loss 1/5/20 %, dup 20 %, reorder 30 %,
#             corrupt 1/5 %, delay 2 ms +- 1 ms, the committed mix, the mix with delay)
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
mib=64 build=$src/build netns=1
while getopts m:b:n o; do
	case $o in
	m) mib=$OPTARG ;;
	b) build=$(cd "$OPTARG" && pwd) ;;
	n) netns=0 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(drop=0 drop=0.01 drop=0.05 drop=0.2 dup=0.2 reorder=0.3
	corrupt=0.01 corrupt=0.05 delay=2000,jitter=1000
	drop=0.05,dup=0.02,reorder=0.05,corrupt=0.01
	drop=0.05,dup=0.02,reorder=0.05,corrupt=0.01,delay=2000,jitter=1000)
bin=$build/tests/test_fault_integrity
[ -x "$bin" ] || { echo "chaos: no $bin (make build first)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sr-chaos.XXXXXX")
nsa= nsb=
cleanup() {
	[ -z "$nsa" ] || ip netns del "$nsa" 2>/dev/null
	[ -z "$nsb" ] || ip netns del "$nsb" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
where=(loopback)
if [ "$netns" = 1 ] && [ "$(id -u)" = 0 ] && ip netns add "sr-chx-$$" 2>/dev/null; then
	nsa=sr-chx-$$ nsb=sr-chy-$$ va=chx$$ vb=chy$$ net=10.$((100 + RANDOM % 100)).$((RANDOM % 256))
	ip netns add "$nsb" && ip link add "$va" type veth peer name "$vb" &&
		ip link set "$va" netns "$nsa" && ip link set "$vb" netns "$nsb" &&
		ip -n "$nsa" addr add "$net.1/24" dev "$va" && ip -n "$nsb" addr add "$net.2/24" dev "$vb" &&
		ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up &&
		ip -n "$nsa" link set "$va" up && ip -n "$nsb" link set "$vb" up &&
		where+=(netns) || echo "chaos: no namespaces (setup failed): loopback only" >&2
	sleep 1
fi
export SOFTRDMA_STATS_DIR=${SOFTRDMA_STATS_DIR:-$build/stats}

# field NAME LINE: the value of NAME=... in a figures line
field() { sed -nE "s/.* $1=([^ ]*).*/\\1/p" <<<"$2"; }
sum() { local a=${1%+*} b=${1#*+}; echo $((a + b)); }

echo "| where | faults (SOFTRDMA_FAULT, both sides) | MiB | WRs | seconds | MiB/s | packets sent | retransmitted | injected: dropped / duplicated / reordered / corrupted / delayed | bad ICRC dropped | duplicate requests answered | result |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for spec in "${specs[@]}"; do
	for w in "${where[@]}"; do
		out=$tmp/out
		env=(SR_FAULT_SPEC="$spec" SR_FAULT_MIB="$mib" SR_FAULT_BUDGET_S=120
		     SR_FAULT_SEED="${SR_FAULT_SEED:-1}")
		[ "$w" = loopback ] || env+=(SR_FAULT_NETNS="$nsa:$va,$nsb:$vb")
		env "${env[@]}" timeout 280 "$bin" >"$out" 2>&1
		rc=$?
		f=$(grep '^figures: ' "$out" | tail -n 1)
		if [ -z "$f" ]; then
			echo "| $w | \`$spec\` | | | | | | | | | | exit $rc, no figures (see below) |"
			tail -n 15 "$out" >&2
			continue
		fi
		ms=$(field ms "$f") m=$(field mib "$f")
		res=$(field result "$f")
		[ "$rc" = 0 ] || res="$res, exit $rc"
		grep -q '^NOTE: the' "$out" && res="$res (time budget ran out: $m MiB checked)"
		printf '| %s | `%s` | %s | %s | %s | %s | %s | %s | %s / %s / %s / %s / %s | %s | %s | %s |\n' \
			"$w" "$spec" "$m" "$(field wrs "$f")" \
			"$(awk -v t="$ms" 'BEGIN { printf "%.2f", t / 1000 }')" \
			"$(awk -v m="$m" -v t="$ms" 'BEGIN { printf "%.1f", t ? m / (t / 1000) : 0 }')" \
			"$(sum "$(field tx_packets "$f")")" "$(sum "$(field retransmits "$f")")" \
			"$(sum "$(field fault_drop "$f")")" "$(sum "$(field fault_dup "$f")")" \
			"$(sum "$(field fault_reorder "$f")")" "$(sum "$(field fault_corrupt "$f")")" \
			"$(sum "$(field fault_delayed "$f")")" "$(sum "$(field drop_icrc "$f")")" \
			"$(sum "$(field dup_requests "$f")")" "$res"
	done
done
