# bench/cgroup.sh: --cgroup of bench/rtrs.sh, rtrs-ab.sh and mpi-ab.sh. Sourced; as root.
#
#   bench_cgroup TAG         moves this shell (and so every process it starts from now on) into
#                            a new CPU cgroup of high weight, CG (sr-TAG-PID): the machine's
#                            other work then takes little of the benchmark's CPU, while nice
#                            and time slices still act (under chrt -f they do not). Sets CG,
#                            CG_ROOT, CG_JOIN and CGINFO (a line for the results); exit 1 with
#                            a message when there is no CPU controller or the cgroup cannot be
#                            made. cgroup v1 (cpu.shares) or v2 (cpu.weight).
#                            The other side of that weight: a test suite run beside such a
#                            benchmark, whose processes spin on both CPUs, gets next to no CPU
#                            for the benchmark's length. On the 2-core Intel Xeon (2026-11-28)
#                            test_rsockets then failed (the rdma_cm liveness probe's 5 s of
#                            silence reset its connections), and test_ack_defer, test_read_pieces
#                            and test_perftest_pairs each failed once. Run tests beside a
#                            --cgroup benchmark only to see how they behave starved.
#   bench_cgroup_cleanup     moves this shell back out and removes the cgroup, empty by then
#                            (its processes ended): for the script's exit path.
bench_cgroup() {
	local me=${BENCH:-$(basename "$0")}
	local knob val

	if [ -f /sys/fs/cgroup/cpu/cpu.shares ]; then
		CG_ROOT=/sys/fs/cgroup/cpu knob=cpu.shares val=262144 CG_JOIN=tasks
	elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
		CG_ROOT=/sys/fs/cgroup knob=cpu.weight val=10000 CG_JOIN=cgroup.procs
		grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control ||
			echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
	else
		echo "$me: no CPU cgroup controller here (--cgroup)" >&2
		exit 1
	fi
	CG=$CG_ROOT/sr-$1-$$
	if ! { mkdir "$CG" && echo "$val" >"$CG/$knob" && echo $$ >"$CG/$CG_JOIN"; }; then
		echo "$me: could not make the cgroup $CG" >&2
		rmdir "$CG" 2>/dev/null
		CG=""
		exit 1
	fi
	CGINFO="every process in a CPU cgroup ($knob $val)"
}

bench_cgroup_cleanup() {
	[ -n "${CG:-}" ] && [ -d "$CG" ] || return 0
	echo $$ >"$CG_ROOT/$CG_JOIN"
	rmdir "$CG" 2>/dev/null || { sleep 1; rmdir "$CG" 2>/dev/null; } || true
}
