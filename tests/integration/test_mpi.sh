#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Open MPI (pml ucx) and MPICH (ch4:ucx), Debian's unmodified packages, on softrdma: a 2-rank
# ping-pong (tests/integration/mpi_pingpong.c, compiled here with each one's mpicc) with every
# byte checked, 8 bytes to 2 MiB, both ranks on this host under one `softrdma run` (its device
# view, docs/view.md, is what lets UCX find the device). UCX_TLS=rc_verbs,ud_verbs,self and
# each MPI's own shared memory off, so every byte crosses softrdma (as packets, or for large
# RDMA transfers through the same-host direct path, docs/direct.md): the ranks' counters must
# show each rank's share of the bytes received.
#
# Then the same between two network namespaces, one rank in each, each device on its veth:
# mpiexec/mpirun runs in namespace A, and starts the other rank's daemon in namespace B through
# a launcher script given as its ssh (the script runs it under `softrdma run` there).

. "$(dirname "$0")/lib.sh"
need_build

T=240
ITERS=50
ran=0

# build NAME MPICC: the ping-pong for one MPI; false (and a message) when it cannot be built.
build() {
	if ! command -v "$2" >/dev/null; then
		echo "($2 not installed: $1 not run)"
		return 1
	fi
	if ! "$2" -O2 -o "$SR_TMP/pp-$1" "$SR_SOURCE_DIR/tests/integration/mpi_pingpong.c" \
		>"$SR_TMP/$1.cc.out" 2>&1; then
		sr_fail "$1: $2 could not build mpi_pingpong.c (its -dev package missing?)"
		sr_tail "$SR_TMP/$1.cc.out" >&2
		return 1
	fi
}

# run NAME MPIRUN-ARGS...: the ping-pong under softrdma run; checks output and counters.
# NS (set: the namespace half) runs it in namespace A on its veth.
NS=
run() {
	local name=$1 rc want got what
	shift
	echo "--- $name: $*"
	rm -f "$SR_TMP/$name".*.stats
	timeout -k 5 $T ${NS:+ip netns exec "$SR_NSA"} env UCX_TLS=rc_verbs,ud_verbs,self \
		${NS:+SOFTRDMA_NETDEV="$SR_VA"} SOFTRDMA_STATS_DUMP="$SR_TMP/$name.%p.stats" \
		"$SR" run -- "$@" >"$SR_TMP/$name.out" 2>&1
	rc=$?
	sr_expect_eq "$name: exit" 0 $rc
	[ $rc = 0 ] || sr_tail "$SR_TMP/$name.out" 30 >&2
	sr_expect_grep "$name: every byte checked (PASS)" '^PASS$' "$SR_TMP/$name.out"
	sr_expect_grep "$name: 2 MiB done" "^2097152 " "$SR_TMP/$name.out"
	sr_expect_grep "$name: 8 B latency (us, half round trip)" '^8 ' "$SR_TMP/$name.out"
	# Each rank received what the lines say (SIZE ITERS): softrdma moved it.
	want=$(awk 'NF == 3 && $1 ~ /^[0-9]+$/ { s += $1 * $2 } END { print 2 * s + 0 }' \
		"$SR_TMP/$name.out")
	got=0
	for f in "$SR_TMP/$name".*.stats; do
		[ -e "$f" ] || continue
		got=$((got + $(sr_stat "$f" rx_bytes)))
		[ -n "$NS" ] || got=$((got + $(sr_stat "$f" direct_bytes)))
	done
	if [ -n "$NS" ]; then what="received as packets"; else what="rx + direct"; fi
	sr_expect_ge "$name: bytes softrdma moved ($what, both ranks)" "$want" "$got"
	ran=1
}

root=()
if build openmpi mpicc.openmpi; then
	[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
	# pml ucx; no BTL but self, UCX's one-sided component off (not needed by the test).
	run openmpi mpirun.openmpi "${root[@]}" --oversubscribe -np 2 --mca pml ucx \
		--mca btl self --mca osc ^ucx -x UCX_TLS "$SR_TMP/pp-openmpi" $ITERS
fi
if build mpich mpicc.mpich; then
	# MPIR_CVAR_NOLOCAL=1: no shared memory between the ranks, the network module (UCX) only.
	run mpich env MPIR_CVAR_NOLOCAL=1 mpiexec.mpich -n 2 "$SR_TMP/pp-mpich" $ITERS
fi
# Between two network namespaces: the launcher script maps each host (its veth address) to
# its namespace and runs the daemon there under softrdma run, its device on that veth.
if [ $ran = 1 ] && sr_netns_usable && sr_netns_pair mp; then
	cat >"$SR_TMP/nsexec" <<EOS
#!/bin/bash
# ssh stand-in for mpiexec/mpirun: [OPTIONS] HOST COMMAND...
while [ "\${1#-}" != "\$1" ]; do shift; done
case \$1 in
$SR_NET.1) ns=$SR_NSA dev=$SR_VA ;;
$SR_NET.2) ns=$SR_NSB dev=$SR_VB ;;
*) echo "nsexec: unknown host \$1" >&2; exit 1 ;;
esac
shift
exec ip netns exec \$ns env SOFTRDMA_NETDEV=\$dev "$SR" run -- sh -c "\$*"
EOS
	chmod +x "$SR_TMP/nsexec"
	NS=1
	hosts=$SR_NET.1,$SR_NET.2
	if [ -x "$SR_TMP/pp-openmpi" ]; then
		run ns_openmpi mpirun.openmpi "${root[@]}" --mca plm_rsh_agent "$SR_TMP/nsexec" \
			--host "$hosts" -np 2 --mca pml ucx --mca btl self --mca osc ^ucx \
			--mca oob_tcp_if_include "$SR_VA,$SR_VB" -x UCX_TLS -x SOFTRDMA_STATS_DUMP \
			"$SR_TMP/pp-openmpi" $ITERS
	fi
	if [ -x "$SR_TMP/pp-mpich" ]; then
		# Only these variables go to the ranks: each keeps its own SOFTRDMA_NETDEV.
		run ns_mpich env MPIR_CVAR_NOLOCAL=1 mpiexec.mpich -launcher ssh \
			-launcher-exec "$SR_TMP/nsexec" -iface "$SR_VA" \
			-genvlist UCX_TLS,MPIR_CVAR_NOLOCAL,SOFTRDMA_STATS_DUMP -hosts "$hosts" \
			-n 2 -ppn 1 "$SR_TMP/pp-mpich" $ITERS
	fi
	NS=
else
	echo "(network namespaces not usable here: the namespace half not run)"
fi
[ $ran = 1 ] || sr_skip "neither Open MPI nor MPICH (with its mpicc) is installed"
sr_finish
