#!/usr/bin/env bash
# bench/rnbd-ab.sh: paired A/B of two builds of the RNBD path (rnbd-server, nbdkit + plugin,
# softrdma) on one or more fio points, for a loaded machine: the two builds' servers and clients
# run side by side between the same two namespaces, and each pair is one fio run through build A
# then one through build B (the order alternating pair by pair). Prints each pair's ratio B/A.
#
#   bench/rnbd-ab.sh [--pairs N] [--runtime S] [--size-mb N] [--point NAME:RW:BS:QD]...
#                    [--a-args "..."] [--b-args "..."] [--chrt] BUILD_A BUILD_B
#
# BUILD_A, BUILD_B: build directories (a copy of build/ made before a change, and build/).
# --point (repeatable): fio --rw, --bs, --iodepth (default randread-4k-qd1:randread:4k:1).
# --a-args / --b-args: extra rnbd-server options for that side. --chrt: every process under
# chrt -f 10. Environment: VETH_MTU (9000), SERVER_ARGS (both sides), CLIENT_ENV (both sides,
# e.g. RTRS_POLL_US=100), A_ENV / B_ENV (environment of that side's server and client, e.g.
# SOFTRDMA_CHAN_RX=0), A_PLUGIN / B_PLUGIN (extra plugin keys of that side), A_NBDKIT /
# B_NBDKIT (extra nbdkit options, e.g. "-t 32"). Root (namespaces). Writes nothing but a
# scratch directory, removed on exit; prints one line per pair: point, order, IOPS A, IOPS B,
# ratio B/A, median completion latency A and B (us).
set -euo pipefail

# VETH_MTU BENCH, bench_netns bench_rnbd_server
. "$(dirname "$0")/lib.sh"
PAIRS=4
RUNTIME=3
SIZE_MB=64
POINTS=()
A_ARGS=""
B_ARGS=""
CHRT=()
while [ $# -gt 0 ]; do
	case $1 in
	--pairs) PAIRS=$2; shift ;;
	--runtime) RUNTIME=$2; shift ;;
	--size-mb) SIZE_MB=$2; shift ;;
	--point) POINTS+=("$2"); shift ;;
	--a-args) A_ARGS=$2; shift ;;
	--b-args) B_ARGS=$2; shift ;;
	--chrt) CHRT=(chrt -f 10) ;;
	-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	-*) echo "rnbd-ab.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
[ $# = 2 ] || { echo "rnbd-ab.sh: BUILD_A BUILD_B" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "rnbd-ab.sh: run as root (network namespaces)" >&2; exit 1; }
[ ${#POINTS[@]} -gt 0 ] || POINTS=(randread-4k-qd1:randread:4k:1)
BA=$(cd "$1" && pwd)
BB=$(cd "$2" && pwd)
SERVER_ARGS=${SERVER_ARGS:-"--chunk-size 262144 --sess-queue-depth 128"}
CLIENT_ENV=${CLIENT_ENV:-}
A_PLUGIN=${A_PLUGIN:-}
B_PLUGIN=${B_PLUGIN:-}
A_NBDKIT=${A_NBDKIT:-}
B_NBDKIT=${B_NBDKIT:-}
for b in "$BA" "$BB"; do
	for f in bin/softrdma bin/rnbd-server lib/nbdkit-rnbd-plugin.so; do
		[ -e "$b/$f" ] || { echo "rnbd-ab.sh: no $b/$f" >&2; exit 1; }
	done
done

# Scratch, the namespaces and their veth pair srbv0, processes, cleanup (bench/lib.sh).
bench_netns ab 1
NET=${NETS[0]}
timeout 60 dd if=/dev/urandom of="$exp/disk.img" bs=1M count="$SIZE_MB" status=none

PORT=$((20000 + RANDOM % 10000))
start_side() {	# X BUILD PORT EXTRA_SERVER_ARGS EXTRA_PLUGIN_ARGS EXTRA_NBDKIT_OPTIONS EXTRA_ENV
	local x=$1 b=$2 port=$3 extra=$4 pextra=$5 nextra=$6 envx=$7
	# shellcheck disable=SC2086
	bench_rnbd_server "$tmp/srv-$x.log" env SOFTRDMA_NETDEV=srbv0 $envx "${CHRT[@]}" \
		"$b/bin/softrdma" run -- "$b/bin/rnbd-server" --search-path "$exp" --listen "$NET.1" \
		--port "$port" --no-direct $SERVER_ARGS $extra
	# shellcheck disable=SC2086
	timeout -k 5 7200 ip netns exec "$NSB" env SOFTRDMA_NETDEV=srbv0 $CLIENT_ENV $envx "${CHRT[@]}" \
		"$b/bin/softrdma" run -- nbdkit -f $nextra -U "$tmp/$x.sock" "$b/lib/nbdkit-rnbd-plugin.so" \
		device=disk.img session=ab$x path="$NET.2@$NET.1:$port" $pextra \
		>"$tmp/clt-$x.log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 300); do
		ip netns exec "$NSB" timeout 5 nbdinfo --size "nbd+unix:///?socket=$tmp/$x.sock" \
			>/dev/null 2>&1 && return 0
		sleep 0.1
	done
	tail -5 "$tmp/clt-$x.log" >&2
	exit 1
}
# B first: its processes then own UDP 4791 in each namespace. A build whose librdmacm speaks the
# IB CM (the default since 7fe6c16) reaches a second server on one address only through the
# 4791 owner's redirect, which a build before that does not make (docs/cm.md).
start_side B "$BB" "$((PORT + 1))" "$B_ARGS" "$B_PLUGIN" "$B_NBDKIT" "${B_ENV:-}"
start_side A "$BA" "$PORT" "$A_ARGS" "$A_PLUGIN" "$A_NBDKIT" "${A_ENV:-}"

# run X NAME RW BS QD: prints "iops p50_us"
run() {
	local x=$1 name=$2 rw=$3 bs=$4 qd=$5 out=$tmp/fio.json
	timeout -k 5 $((RUNTIME + 60)) ip netns exec "$NSB" "${CHRT[@]}" fio --name="$name" \
		--ioengine=nbd --uri="nbd+unix:///?socket=$tmp/$x.sock" --rw="$rw" --bs="$bs" \
		--iodepth="$qd" --size="${SIZE_MB}m" --time_based --runtime="$RUNTIME" \
		--output-format=json --output="$out" >/dev/null 2>"$tmp/fio.err" || {
		echo "rnbd-ab.sh: fio through $x failed:" >&2
		tail -n 3 "$tmp/fio.err" "$tmp/clt-$x.log" "$tmp/srv-$x.log" >&2
		echo "NA NA"
		return
	}
	python3 - "$out" <<'EOP'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
d = j["read"] if j["read"]["io_bytes"] else j["write"]
p50 = d["clat_ns"].get("percentile", {}).get("50.000000", 0)
print("%.0f %.1f" % (d["iops"], p50 / 1000))
EOP
}

echo "# load at start: $(cut -d' ' -f1-3 /proc/loadavg); A=$BA B=$BB"
echo "# point order iops_A iops_B B/A p50_A_us p50_B_us"
for pt in "${POINTS[@]}"; do
	IFS=: read -r name rw bs qd <<<"$pt"
	for i in $(seq "$PAIRS"); do
		if [ $((i % 2)) = 1 ]; then
			read -r ia la <<<"$(run A "$name" "$rw" "$bs" "$qd")"
			read -r ib lb <<<"$(run B "$name" "$rw" "$bs" "$qd")"
			o=AB
		else
			read -r ib lb <<<"$(run B "$name" "$rw" "$bs" "$qd")"
			read -r ia la <<<"$(run A "$name" "$rw" "$bs" "$qd")"
			o=BA
		fi
		r=$(python3 -c "import sys; a,b=sys.argv[1:]; print('%.2f' % (float(b)/float(a)) if a!='NA' and b!='NA' and float(a)>0 else 'NA')" "$ia" "$ib")
		echo "$name $o $ia $ib $r $la $lb"
	done
done
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
