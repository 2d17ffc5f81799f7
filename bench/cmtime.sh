#!/usr/bin/env bash
# bench/cmtime.sh: rdma_cm connection setup and teardown rate, the private CM protocol against
# the IB CM (cm_wire=private / ibcm, docs/cm.md), rdma-core's cmtime between two softrdma
# processes, in one run; prints a markdown table of medians and ibcm/private ratios.
#
#   bench/cmtime.sh [-c CONNS] [-n REPS] [--only loopback|netns] [-o FILE.md]
#     -c CONNS  connections per cmtime run (default 500: all set up, then all torn down)
#     -n REPS   repetitions (default 5); each repetition runs private then ibcm, so a change of
#               load affects both alike; the table takes medians
#     --only    one scenario (default: loopback, then netns; netns needs root)
#     -o FILE   also write the table there
#   Env: BUILD (default build), RESULTS (default bench/results: cmtime-<date>.md and .tsv)
#
# Scenarios: loopback (two processes on one host, zero configuration: the server on
# 127.0.0.1, the client's device wherever it lands) and two network namespaces joined by a
# veth pair (each device on its veth, SOFTRDMA_NETDEV; made with tests/integration/lib.sh's
# sr_netns_pair and removed on exit). cmtime's client creates CONNS ids, resolves them,
# connects them all (asynchronously, one event channel), then disconnects them all; its
# "connect" and "disconnect" lines give the time from the first call to the last event. The
# rates below are CONNS / that time. A run that printed an error event (REJECTED,
# UNREACHABLE, ...) or failed counts as NA. Every program runs under timeout; servers are
# stopped by PID. A benchmark: nothing here fails on a slow figure.
set -uo pipefail

# ROOT BUILD RESULTS BENCH, bench_args bench_usage
. "$(dirname "$0")/lib.sh"
CONNS=500
REPS=5
ONLY="loopback netns"
OUT=""
bench_args 12 -c CONNS -- "$@"

for c in cmtime timeout ss ip python3; do
	command -v $c >/dev/null || { echo "bench/cmtime.sh: needs $c (rdmacm-utils, iproute2, python3)" >&2; exit 1; }
done
[ -e "$BUILD/lib/librdmacm.so.1" ] || { echo "bench/cmtime.sh: no $BUILD/lib (make build)" >&2; exit 1; }

export SR_BUILD_DIR=$BUILD SR_SOURCE_DIR=$ROOT
# shellcheck source=../tests/integration/lib.sh
. "$ROOT/tests/integration/lib.sh"
SR_KEEP_TMP=${SR_KEEP_TMP:-0}
export LD_LIBRARY_PATH=$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
TO=$((30 + CONNS / 10))

mkdir -p "$RESULTS"
STAMP=$(date -u +%Y-%m-%d-%H%M)
TSV=$RESULTS/cmtime-$STAMP.tsv
MD=$RESULTS/cmtime-$STAMP.md
LOAD0=$(uptime)
printf 'scenario\tmode\trep\tmetric\tvalue\n' >"$TSV"

if [[ " $ONLY " == *" netns "* ]]; then
	sr_netns_pair cmt 9000 || { echo "bench/cmtime.sh: could not build the namespaces" >&2; exit 1; }
fi

# one SCENARIO MODE REP: one cmtime pair; appends connect/s and disconnect/s (or NA) to the TSV
one() {
	local scen=$1 mode=$2 rep=$3 port spid srv_ip ns_s='' ns_c='' dev_s='' dev_c='' out
	if [ "$scen" = netns ]; then
		ns_s=$SR_NSA ns_c=$SR_NSB dev_s=$SR_VA dev_c=$SR_VB srv_ip=$SR_NET.1
	else
		srv_ip=127.0.0.1
	fi
	port=$(sr_free_port "$ns_s") || return
	out=$SR_TMP/$scen.$mode.$rep
	sr_serve "$port" "$ns_s" sr_exec_to "$out.srv" timeout -k 5 "$TO" \
		${ns_s:+ip netns exec "$ns_s"} env ${dev_s:+SOFTRDMA_NETDEV=$dev_s} \
		SOFTRDMA_CM_WIRE="$mode" cmtime -b "$srv_ip" -p "$port"
	spid=$SR_SERVE_PID
	timeout -k 5 "$TO" ${ns_c:+ip netns exec "$ns_c"} env ${dev_c:+SOFTRDMA_NETDEV=$dev_c} \
		SOFTRDMA_CM_WIRE="$mode" cmtime -s "$srv_ip" -p "$port" -c "$CONNS" >"$out.cli" 2>&1
	local rc=$?
	kill -TERM "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	sr_forget_pid "$spid"
	awk -v s="$scen" -v m="$mode" -v r="$rep" -v n="$CONNS" -v rc="$rc" '
		/^event:|error|fail/ { bad = 1 }
		$1 == "connect" { c = $3 }
		$1 == "disconnect" { d = $3 }
		END {
			ok = (rc == 0 && !bad)
			cv = "NA"; dv = "NA"
			if (ok && c + 0 > 0) cv = sprintf("%.0f", n / (c / 1000))
			if (ok && d + 0 > 0) dv = sprintf("%.0f", n / (d / 1000))
			printf "%s\t%s\t%s\tconnect_per_s\t%s\n", s, m, r, cv
			printf "%s\t%s\t%s\tdisconnect_per_s\t%s\n", s, m, r, dv
		}' "$out.cli" >>"$TSV"
	tail -n 2 "$TSV" | tr '\n' ' ' >&2
	echo >&2
}

for ((rep = 1; rep <= REPS; rep++)); do
	for scen in $ONLY; do
		for mode in private ibcm; do
			one "$scen" "$mode" "$rep"
		done
	done
done
LOAD1=$(uptime)

python3 - "$TSV" "$CONNS" "$REPS" "$LOAD0" "$LOAD1" >"$MD" <<'EOF'
import statistics, sys
tsv, conns, reps, load0, load1 = sys.argv[1:6]
rows = [l.rstrip('\n').split('\t') for l in open(tsv)][1:]
v = {}
for s, m, r, metric, val in rows:
    v.setdefault((s, metric, m), []).append(None if val == 'NA' else float(val))
def med(x):
    x = [a for a in x if a is not None]
    return (statistics.median(x), min(x), max(x), len(x)) if x else None
def fmt(t, n):
    return 'NA (0/%d runs)' % n if not t else '%.0f [%.0f..%.0f] (%d/%d)' % (t[0], t[1], t[2], t[3], n)
print('# cmtime: rdma_cm connections per second, private protocol vs IB CM\n')
print('`bench/cmtime.sh`, %s connections per run, %s repetitions (medians [min..max], runs that '
      'worked / runs). Load before: `%s`; after: `%s`.\n' % (conns, reps, load0.strip(), load1.strip()))
print('| scenario | step | private (/s) | ibcm (/s) | ibcm / private |')
print('|---|---|---|---|---|')
for s in dict.fromkeys(k[0] for k in v):
    for metric, name in (('connect_per_s', 'connect'), ('disconnect_per_s', 'disconnect')):
        p = v.get((s, metric, 'private'), [])
        i = v.get((s, metric, 'ibcm'), [])
        mp, mi = med(p), med(i)
        ratio = '%.2f' % (mi[0] / mp[0]) if mp and mi else 'NA'
        print('| %s | %s | %s | %s | %s |' % (s, name, fmt(mp, len(p)), fmt(mi, len(i)), ratio))
EOF
cat "$MD"
[ -z "$OUT" ] || cp "$MD" "$OUT"
echo "bench/cmtime.sh: $MD, $TSV" >&2
exit 0
