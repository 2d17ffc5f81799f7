# bench/lib.sh: the start that bench/cmtime.sh, mpi.sh, rnbd.sh and rtrs.sh share. Sourced
# first thing, after `set`:  . "$(dirname "$0")/lib.sh"
#
# Sets ROOT (the repository), BUILD (env, default build), SR (build/bin/softrdma), RESULTS (env,
# default bench/results), VETH_MTU (env, default 9000: jumbo frames, as a RoCE network would
# have, as bench/run), BENCH (the script's name, for messages) and INSTALL=1. Functions:
#   bench_usage LAST        print the script's header comment, lines 2..LAST; exit 2
#   bench_root [WHY]        exit 1 unless run as root
#   bench_build             `make build` unless INSTALL=0 (--no-install)
#   bench_need CMD...       exit 1 naming the first command not installed
#   bench_have FILE...      exit 1 naming the first file that is not there (make build)
#   bench_args LAST [OPT VAR]... -- ARGS...   the options of the scenario benchmarks (cmtime.sh,
#                           rtrs.sh): -n REPS, --only SCENARIOS, -o FILE, and the script's own
#                           OPTs, each taking a value stored in its VAR; anything else prints
#                           the usage (bench_usage LAST). Not as root, the netns scenario is then
#                           left out of ONLY (with a note).
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
SR="$BUILD/bin/softrdma"
RESULTS=${RESULTS:-$ROOT/bench/results}
VETH_MTU=${VETH_MTU:-9000}
BENCH=bench/$(basename "$0")
INSTALL=1

bench_usage() {
	sed -n "2,${1}p" "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}
bench_root() {
	[ "$(id -u)" = 0 ] || { echo "$BENCH: run as root (${1:-network namespaces})" >&2; exit 1; }
}
bench_build() {
	[ "$INSTALL" = 1 ] || return 0
	make -C "$ROOT" build >/dev/null || { echo "$BENCH: make build failed" >&2; exit 1; }
}
bench_need() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null || { echo "$BENCH: $c missing (make deps)" >&2; exit 1; }
	done
}
bench_have() {
	local f
	for f in "$@"; do
		[ -e "$f" ] || { echo "$BENCH: no $f (make build)" >&2; exit 1; }
	done
}
bench_args() {
	local last=$1 var
	local -A own=()
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		own[$1]=$2
		shift 2
	done
	shift
	while [ $# -gt 0 ]; do
		case $1 in
		-n) REPS=$2; shift ;;
		--only) ONLY=$2; shift ;;
		-o) OUT=$2; shift ;;
		*)
			var=${own[$1]:-}
			[ -n "$var" ] || bench_usage "$last"
			printf -v "$var" '%s' "$2"
			shift
			;;
		esac
		shift
	done
	if [ "$(id -u)" != 0 ] && [[ " $ONLY " == *" netns "* ]]; then
		echo "$BENCH: not root: the namespaces scenario is left out" >&2
		ONLY=${ONLY//netns/}
	fi
}
