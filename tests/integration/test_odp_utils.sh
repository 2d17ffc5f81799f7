#!/bin/bash
# SPDX-License-Identifier: MIT
#
# On-Demand Paging through unmodified Debian programs, two processes on loopback:
#   ibv_rc_pingpong -o (ODP MR), -O (implicit ODP: the whole address space), each also with
#   -P (ibv_advise_mr prefetch); ib_write_bw --odp and ib_read_bw --odp.
# Each run must exit 0 on both sides and print its result, and the counters dumped at exit
# must show accesses through ODP MRs (odp_accesses) and none refused (odp_access_errors).

. "$(dirname "$0")/lib.sh"
need_build
need_cmd ibv_rc_pingpong ib_write_bw ib_read_bw ss timeout

# odp_counters NAME: both sides went through ODP MRs, and no access was refused.
odp_counters() {
	local side n e
	for side in srv cli; do
		n=$(sr_stat "$SR_TMP/$1.$side.stats" odp_accesses)
		e=$(sr_stat "$SR_TMP/$1.$side.stats" odp_access_errors)
		sr_expect_ge "$1 $side: accesses through ODP MRs" 1 "$n"
		sr_expect_eq "$1 $side: ODP accesses refused" 0 "$e"
	done
}

pp() {
	local name=$1
	shift
	if sr_pair "$name" ibv_rc_pingpong -g 0 -s 4096 -n 500 -c "$@"; then
		sr_check_pingpong "$name" 4096 500
		sr_expect_no_grep "$name: no invalid data reported" 'invalid data' "$SR_TMP/$name.srv.out"
		odp_counters "$name"
	fi
}
pp rc_odp -o
pp rc_implicit -O
pp rc_odp_prefetch -o -P
pp rc_implicit_prefetch -O -P

# perftest: the result row is "SIZE ITERS PEAK AVG MSGRATE". Each runs twice: with packets
# (SOFTRDMA_DIRECT=0: the responder's ODP path, pages faulted in by softrdma) and over the
# same-host direct path (the requester copies with process_vm_writev/readv, the kernel faults
# the target's ODP pages in; docs/direct.md).
pt() {
	local name=$1 counter=$2
	shift 2
	SR_SERVER_HOST=127.0.0.1
	if SOFTRDMA_DIRECT=0 sr_pair "$name" "$@" --odp -x 0 -s 65536 -n 300; then
		sr_expect_grep "$name: result row" '^ *65536 +300 +[0-9.]+ +[0-9.]+' "$SR_TMP/$name.cli.out"
		odp_counters "$name"
	fi
	if sr_pair "$name.direct" "$@" --odp -x 0 -s 65536 -n 300; then
		sr_expect_grep "$name.direct: result row" '^ *65536 +300 +[0-9.]+ +[0-9.]+' \
			"$SR_TMP/$name.direct.cli.out"
		sr_expect_ge "$name.direct cli: $counter" 300 \
			"$(sr_stat "$SR_TMP/$name.direct.cli.stats" "$counter")"
		sr_expect_ge "$name.direct cli: accesses through ODP MRs" 1 \
			"$(sr_stat "$SR_TMP/$name.direct.cli.stats" odp_accesses)"
	fi
	SR_SERVER_HOST=localhost
}
pt write_bw_odp direct_writes ib_write_bw
pt read_bw_odp direct_reads ib_read_bw

sr_finish
