#!/bin/bash
# A fuzz campaign: every libFuzzer target of fuzz/ for a given time, one after the other, one
# job each; the table of what happened goes into docs/reliability.md (between the campaign
# markers), replacing the previous one. A benchmark, not a test: run it on a quiet machine.
#
#   tools/fuzz-campaign.sh [-t SECONDS] [-T SECONDS] [-l LABEL] [-a] [-n] [TARGET...]
#
#   -t SECONDS  per target (default 60)
#   -T SECONDS  libFuzzer's -timeout, per input, wall clock (default 10; on a loaded machine at
#               nice 19 an input may wait longer than that for the CPU)
#   -l LABEL    what the table says about the run (default "campaign")
#   -a          add this run's table to the campaign's (after the tables already between the
#               markers, with a line of the totals of all of them) instead of replacing it:
#               for one campaign run as several invocations (side by side on several cores,
#               or targets added later)
#   CAMPAIGN_DOC=FILE writes the table into FILE instead of docs/reliability.md (every table
#               is also kept in build-fuzz/fuzz/campaign/tables/)
#   -n          do not build (the binaries of BUILD_FUZZ as they are: a campaign that runs
#               while the source tree changes)
#   TARGET      fuzz_rx fuzz_rx_seq fuzz_cm fuzz_cm_state fuzz_rsocket fuzz_rtrs fuzz_rnbd fuzz_mad
#               fuzz_ibcm_state
#               (default: all), each optionally with its own time: fuzz_rx:600
#
# Builds build-fuzz (make build-fuzz) if needed. The corpora grow in
# build-fuzz/fuzz/campaign/corpus/<target> and are reused by the next campaign; crash inputs
# land in build-fuzz/fuzz/campaign/artifacts/<target>/ (keep each one as fuzz/regress/<target>/
# once the bug it shows is fixed).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
secs=60 label=campaign append=0 build=1 tmo=10
while getopts t:T:l:an o; do
	case $o in
	t) secs=$OPTARG ;;
	T) tmo=$OPTARG ;;
	l) label=$OPTARG ;;
	a) append=1 ;;
	n) build=0 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
targets=("$@")
[ ${#targets[@]} -gt 0 ] ||
	targets=(fuzz_rx fuzz_rx_seq fuzz_cm fuzz_cm_state fuzz_rsocket fuzz_rtrs fuzz_rnbd fuzz_mad
		 fuzz_ibcm_state)
bf=${BUILD_FUZZ:-$src/build-fuzz}
[ "$build" = 0 ] || make -C "$src" --no-print-directory build-fuzz BUILD_FUZZ="$bf" >/dev/null
camp=$bf/fuzz/campaign
"$src"/fuzz/run.sh seeds "$bf"/fuzz "$src"/tests/interop/rxe-pcaps/suite "$camp"/seeds >/dev/null
declare -A seeddir=([fuzz_rx]=rx [fuzz_rx_seq]=seq [fuzz_cm]=cm [fuzz_cm_state]=cmstate
		   [fuzz_rsocket]=rs [fuzz_rtrs]=rtrs [fuzz_rnbd]=rnbd [fuzz_mad]=mad
		   [fuzz_ibcm_state]=ibcmstate)
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
	timeout $((tsecs + 300)) "$bf"/fuzz/$t "${dict[@]}" -max_total_time="$tsecs" -timeout="$tmo" \
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
	echo "**$label**, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)), load average at the end $(cut -d' ' -f1-3 /proc/loadavg), commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?'),"
	echo "\`tools/fuzz-campaign.sh -t $secs${label:+ -l \"$label\"}$([ "$append" = 0 ] || echo ' -a') ${targets[*]}\` (one job per target, corpora carried over from earlier runs in the same build directory):"
	echo
	echo "| target | seconds | executions | exec/s | coverage (edges) | features | corpus | new crash inputs |"
	echo "|---|---|---|---|---|---|---|---|"
	printf '%s\n' "${rows[@]}"
	echo "| **total** | | **$total** | | | | | **$crashes_all** |"
	echo "<!-- campaign:end -->"
)
doc=${CAMPAIGN_DOC:-$src/docs/reliability.md}
mkdir -p "$camp"/tables
printf '%s\n' "$table" >"$camp/tables/$(date -u +%Y%m%d-%H%M%S)-$$.md"
# Several invocations may end at the same time (-a): one writes the document at a time.
exec 9<"$doc"
flock 9
if grep -q '<!-- campaign:begin -->' "$doc"; then
	python3 - "$doc" "$table" "$append" <<'PY'
import re, sys
p, t, append = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
s = open(p).read()
def merge(m):
    if not append:
        return t
    old = m.group(0)[len('<!-- campaign:begin -->'):-len('<!-- campaign:end -->')]
    old = re.sub(r'\n\*\*All the tables above\*\*.*\n', '\n', old)
    body = old.strip('\n') + '\n\n' + t[len('<!-- campaign:begin -->'):-len('<!-- campaign:end -->')].strip('\n')
    tot = sum(int(x) for x in re.findall(r'^\| \*\*total\*\* \| \| \*\*(\d+)\*\*', body, re.M))
    cr = sum(int(x) for x in re.findall(r'^\| \*\*total\*\* \|.*\*\*(\d+)\*\* \|$', body, re.M))
    return ('<!-- campaign:begin -->\n' + body + '\n\n**All the tables above**: ' +
            f'{tot:,} executions, {cr} new crash inputs.\n<!-- campaign:end -->')
s = re.sub(r'<!-- campaign:begin -->.*?<!-- campaign:end -->', merge, s, flags=re.S)
open(p, 'w').write(s)
PY
else
	printf '\n%s\n' "$table" >>"$doc"
fi
exec 9<&-
echo "$table"
[ "$crashes_all" -eq 0 ]
