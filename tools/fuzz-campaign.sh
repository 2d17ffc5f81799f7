#!/bin/bash
# A fuzz campaign: every libFuzzer target of fuzz/ for a given time, one after the other, one
# job each; the table of what happened goes into docs/reliability.md (between the campaign
# markers), replacing the previous one. A benchmark, not a test: run it on a quiet machine.
#
#   tools/fuzz-campaign.sh [-t SECONDS] [-l LABEL] [TARGET...]
#
#   -t SECONDS  per target (default 60)
#   -l LABEL    what the table says about the run (default "campaign")
#   TARGET      fuzz_rx fuzz_rx_seq fuzz_cm fuzz_cm_state fuzz_rsocket (default: all), each
#               optionally with its own time: fuzz_rx:600
#
# Builds build-fuzz (make build-fuzz) if needed. The corpora grow in
# build-fuzz/fuzz/campaign/corpus/<target> and are reused by the next campaign; crash inputs
# land in build-fuzz/fuzz/campaign/artifacts/<target>/ (keep each one as fuzz/regress/<target>/
# once the bug it shows is fixed).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
secs=60 label=campaign
while getopts t:l: o; do
	case $o in
	t) secs=$OPTARG ;;
	l) label=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_rx fuzz_rx_seq fuzz_cm fuzz_cm_state fuzz_rsocket)
bf=${BUILD_FUZZ:-$src/build-fuzz}
make -C "$src" --no-print-directory build-fuzz BUILD_FUZZ="$bf" >/dev/null
camp=$bf/fuzz/campaign
"$src"/fuzz/run.sh seeds "$bf"/fuzz "$src"/tests/interop/rxe-pcaps/suite "$camp"/seeds >/dev/null
declare -A seeddir=([fuzz_rx]=rx [fuzz_rx_seq]=seq [fuzz_cm]=cm [fuzz_cm_state]=cmstate [fuzz_rsocket]=rs)
export SOFTRDMA_STATS_DIR=${SOFTRDMA_STATS_DIR:-$bf/stats}
rows=() total=0 crashes_all=0
for spec in "${targets[@]}"; do
	t=${spec%%:*} tsecs=$secs
	[ "$spec" = "$t" ] || tsecs=${spec#*:}
	corpus=$camp/corpus/$t art=$camp/artifacts/$t log=$camp/$t.log
	mkdir -p "$corpus" "$art"
	before=$(find "$art" -type f | wc -l)
	dictname=${t%_seq}
	dict=()
	[ -f "$src/fuzz/$dictname.dict" ] && dict=(-dict="$src/fuzz/$dictname.dict")
	echo "fuzz-campaign: $t for $tsecs s" >&2
	start=$(date +%s)
	# -fork=1 keeps going after a crash (each one is saved); -ignore_crashes counts them.
	timeout $((tsecs + 300)) "$bf"/fuzz/$t "${dict[@]}" -max_total_time="$tsecs" -timeout=10 \
		-rss_limit_mb=2048 -print_final_stats=1 -fork=1 -ignore_crashes=1 \
		-ignore_timeouts=1 -ignore_ooms=1 -artifact_prefix="$art"/ \
		"$corpus" "$camp"/seeds/"${seeddir[$t]}" >"$log" 2>&1 || true
	wall=$(($(date +%s) - start))
	# With -fork the parent prints "#N: cov: C ft: F corp: ... exec/s: E ..." lines; the
	# last one has the totals.
	last=$(grep -E '^#[0-9]+: cov: ' "$log" | tail -n 1 || true)
	execs=$(sed -nE 's/^#([0-9]+): cov:.*/\1/p' <<<"$last")
	cov=$(sed -nE 's/.* cov: ([0-9]+) .*/\1/p' <<<"$last")
	ft=$(sed -nE 's/.* ft: ([0-9]+) .*/\1/p' <<<"$last")
	corp=$(sed -nE 's/.* corp: ([0-9]+) .*/\1/p' <<<"$last")
	after=$(find "$art" -type f | wc -l)
	crashes=$((after - before))
	total=$((total + ${execs:-0}))
	crashes_all=$((crashes_all + crashes))
	rate=$(( ${execs:-0} / (wall > 0 ? wall : 1) ))
	rows+=("| \`$t\` | $wall | ${execs:-?} | $rate | ${cov:-?} | ${ft:-?} | ${corp:-?} | $crashes |")
done

table=$(
	echo "<!-- campaign:begin -->"
	echo "**$label**, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?'),"
	echo "\`tools/fuzz-campaign.sh -t $secs${label:+ -l \"$label\"} ${targets[*]}\` (one job per target, corpora carried over from earlier runs in the same build directory):"
	echo
	echo "| target | seconds | executions | exec/s | coverage (edges) | features | corpus | new crash inputs |"
	echo "|---|---|---|---|---|---|---|---|"
	printf '%s\n' "${rows[@]}"
	echo "| **total** | | **$total** | | | | | **$crashes_all** |"
	echo "<!-- campaign:end -->"
)
doc=$src/docs/reliability.md
if grep -q '<!-- campaign:begin -->' "$doc"; then
	python3 - "$doc" "$table" <<'PY'
import re, sys
p, t = sys.argv[1], sys.argv[2]
s = open(p).read()
s = re.sub(r'<!-- campaign:begin -->.*?<!-- campaign:end -->', lambda m: t, s, flags=re.S)
open(p, 'w').write(s)
PY
else
	printf '\n%s\n' "$table" >>"$doc"
fi
echo "$table"
[ "$crashes_all" -eq 0 ]
