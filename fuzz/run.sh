#!/bin/bash
# Runs the fuzz targets for CTest (fuzz/CMakeLists.txt) and the campaign (tools/fuzz-campaign.sh).
#   run.sh seeds BINDIR PCAPDIR SEEDDIR    make the seed corpora into SEEDDIR/{rx,seq,cm,rs,cmstate,rtrs,rnbd,mad,ibcmstate}
#   run.sh smoke TARGET SEEDS SECONDS      run TARGET for SECONDS on a scratch corpus seeded
#                                          from SEEDS; fails on any crash, leak or timeout
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
seeds)
	bindir=$2 pcaps=$3 out=$4
	rm -rf "$out"
	mkdir -p "$out"/rx "$out"/seq "$out"/cm "$out"/rs "$out"/cmstate "$out"/rtrs "$out"/rnbd "$out"/mad \
		"$out"/ibcmstate
	timeout 50 "$bindir"/fuzz_mkseeds "$pcaps" "$out"/rx "$out"/seq "$out"/cm "$out"/rs \
		"$out"/cmstate "$out"/rtrs "$out"/rnbd "$out"/mad "$out"/ibcmstate
	;;
smoke)
	bin=$2 seeds=$3 secs=$4
	work=$(mktemp -d "${TMPDIR:-/tmp}/sr-fuzz-smoke.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	mkdir "$work"/corpus
	dict=()
	name=$(basename "$bin"); name=${name%_seq}
	[ -f "$here/$name.dict" ] && dict=(-dict="$here/$name.dict")
	# -rss_limit_mb and -timeout: a runaway input is a failure too.
	timeout $((secs + 90)) "$bin" "${dict[@]}" -max_total_time="$secs" -timeout=10 \
		-rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work"/ \
		"$work"/corpus "$seeds" 2>&1 | tail -n 25
	rc=${PIPESTATUS[0]}
	if ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* >/dev/null 2>&1; then
		echo "fuzz: $(basename "$bin") found a failing input (see above)"
		exit 1
	fi
	exit "$rc"
	;;
*)
	echo "usage: run.sh seeds BINDIR PCAPDIR SEEDDIR | smoke TARGET SEEDS SECONDS" >&2
	exit 2
	;;
esac
