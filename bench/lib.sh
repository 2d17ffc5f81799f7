# bench/lib.sh: the start that bench/cmtime.sh, mpi.sh, rnbd.sh, rnbd-ab.sh, rtrs.sh and the A/B
# scripts lat-ab.sh, write-ab.sh and rtrs-ab.sh share. Sourced first thing, after `set`:
#   . "$(dirname "$0")/lib.sh"
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
#                           the usage (bench_usage LAST). Not as root, the netns scenarios (every
#                           word of ONLY that starts with netns) are then left out (with a note).
#   bench_netns TAG N       for a benchmark between two network namespaces (root): scratch
#                           directories tmp (/tmp) and exp (/dev/shm: tmpfs), namespaces NSA and
#                           NSB joined by N veth pairs srbv0..srbvN-1 (MTU VETH_MTU), the i-th on
#                           the /24 NETS[i] (.1 in A, .2 in B), and PIDS: background processes
#                           to end. On exit the processes are ended and all of it removed.
#   bench_rnbd_server LOG CMD...   runs CMD (rnbd-server, under softrdma run) in namespace A in
#                           the background, its output in LOG, and waits up to 10 s for it to
#                           export; exit 1 with its log if it does not
#   ab_setup TAG LINKS BUILD_A BUILD_B [BIN...]   the start of an A/B script after its options:
#                           BUILDS (the two build directories, each checked for bin/softrdma and
#                           bin/BIN), root, tests/integration/lib.sh sourced (SR_TMP, the exit
#                           trap that ends SR_BG and runs sr_at_exit's commands, sr_free_port,
#                           sr_wait_listen; SR_BUILD_DIR the B build) with its scratch directory
#                           always removed, the cgroup with --cgroup (CGROUP=1: bench/cgroup.sh,
#                           named after the script) and the namespaces (TAG, a few letters):
#                           LINKS 1, SR_NSA and SR_NSB joined by one veth pair (sr_netns_pair), 2
#                           by two (sr_netns_two_pairs), MTU VETH_MTU. Everything goes at exit.
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
	if [ "$(id -u)" != 0 ] && [[ " $ONLY " == *" netns"* ]]; then
		echo "$BENCH: not root: the namespaces scenarios are left out" >&2
		local s keep=""
		for s in $ONLY; do [[ $s == netns* ]] || keep+="$s "; done
		ONLY=$keep
		if [ -z "${ONLY// /}" ]; then
			echo "$BENCH: nothing left to run without root (run it as root)" >&2
			exit 1
		fi
	fi
}

bench_netns() {
	local tag=$1 n=$2 i net
	tmp=$(mktemp -d "/tmp/softrdma-bench-$tag.XXXXXX")
	exp=$(mktemp -d "/dev/shm/softrdma-bench-$tag.XXXXXX")
	NSA=sr$tag-a-$$
	NSB=sr$tag-b-$$
	PIDS=()
	NETS=()
	BENCH_LINKS=$n
	trap bench_netns_cleanup EXIT
	trap 'exit 130' INT TERM
	ip netns add "$NSA" && ip netns add "$NSB" || bench_netns_fail
	for ((i = 0; i < n; i++)); do
		net=10.$((100 + RANDOM % 100)).$((RANDOM % 256))
		while [[ " ${NETS[*]} " == *" $net "* ]]; do
			net=10.$((100 + RANDOM % 100)).$((RANDOM % 256))
		done
		NETS+=("$net")
		ip link add "bnA$i-$$" type veth peer name "bnB$i-$$" &&
			ip link set "bnA$i-$$" netns "$NSA" && ip link set "bnB$i-$$" netns "$NSB" &&
			ip -n "$NSA" link set "bnA$i-$$" name srbv$i &&
			ip -n "$NSB" link set "bnB$i-$$" name srbv$i &&
			ip -n "$NSA" addr add "$net.1/24" dev srbv$i &&
			ip -n "$NSB" addr add "$net.2/24" dev srbv$i &&
			ip -n "$NSA" link set srbv$i mtu "$VETH_MTU" &&
			ip -n "$NSB" link set srbv$i mtu "$VETH_MTU" &&
			ip -n "$NSA" link set srbv$i up && ip -n "$NSB" link set srbv$i up ||
			bench_netns_fail
	done
	ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up || bench_netns_fail
	for _ in $(seq 100); do
		[ "$(ip -n "$NSB" link show | grep -c LOWER_UP)" -gt "$n" ] &&
			[ "$(ip -n "$NSA" link show | grep -c LOWER_UP)" -gt "$n" ] && return 0
		sleep 0.05
	done
	bench_netns_fail
}
bench_netns_fail() {
	echo "$BENCH: could not set up network namespaces" >&2
	exit 1
}
bench_netns_cleanup() {
	local p i
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	ip netns del "$NSA" 2>/dev/null || true
	ip netns del "$NSB" 2>/dev/null || true
	for ((i = 0; i < BENCH_LINKS; i++)); do ip link del "bnA$i-$$" 2>/dev/null || true; done
	rm -rf "$tmp" "$exp"
}
ab_setup() {
	local tag=$1 links=$2 b bin d ns dev
	shift 2
	BUILDS=("$(cd "$1" && pwd -P)" "$(cd "$2" && pwd -P)")
	shift 2
	for b in "${BUILDS[@]}"; do
		for bin in softrdma "$@"; do
			[ -x "$b/bin/$bin" ] || { echo "$BENCH: $b has no bin/$bin" >&2; exit 1; }
		done
	done
	bench_root "network namespaces"
	ROOT=$(cd "$ROOT" && pwd -P)
	export SR_BUILD_DIR=${BUILDS[1]} SR_SOURCE_DIR=$ROOT
	# shellcheck source=../tests/integration/lib.sh
	. "$ROOT/tests/integration/lib.sh"
	# shellcheck disable=SC2034	# read by lib.sh's exit trap
	SR_KEEP_TMP=0
	if [ "${CGROUP:-0}" = 1 ]; then
		. "$ROOT/bench/cgroup.sh"
		bench_cgroup "$(basename "$0" .sh)"
		sr_at_exit bench_cgroup_cleanup
	fi
	if [ "$links" = 1 ]; then
		sr_netns_pair "$tag" "$VETH_MTU" || bench_netns_fail
		return
	fi
	sr_netns_two_pairs "$tag" || bench_netns_fail
	for d in "$SR_NSA $SR_VA" "$SR_NSA $SR_VA2" "$SR_NSB $SR_VB" "$SR_NSB $SR_VB2"; do
		read -r ns dev <<<"$d"
		ip -n "$ns" link set "$dev" mtu "$VETH_MTU"
	done
}
bench_rnbd_server() {
	local log=$1
	shift
	timeout -k 5 86400 ip netns exec "$NSA" "$@" >"$log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 100); do grep -q exporting "$log" && break; sleep 0.1; done
	grep -q exporting "$log" || { cat "$log" >&2; echo "$BENCH: rnbd-server did not start" >&2; exit 1; }
}
