#!/bin/bash
# SPDX-License-Identifier: MIT
#
# rdma-core's own test suite (pyverbs, Debian's python3-pyverbs ships it under
# /usr/share/doc/rdma-core/tests, gzipped) run on softrdma under `softrdma run`: 0 errors,
# 0 failures, and its rdma_cm tests (tests.test_rdmacm.CMTestCase) run and pass rather than
# skip (they find the device's interface through the view's sysfs, docs/view.md). The counts
# are printed. Tests for other hardware (mlx5, efa, CUDA) skip, as they do on rxe.

. "$(dirname "$0")/lib.sh"
need_build

PY=/usr/bin/python3	# Debian's python, the one python3-pyverbs is installed for
SRC=/usr/share/doc/rdma-core/tests
[ -x $PY ] && $PY -c 'import pyverbs' 2>/dev/null || sr_skip "python3-pyverbs is not installed"
[ -f $SRC/run_tests.py ] || sr_skip "no $SRC/run_tests.py (python3-pyverbs without its tests)"

cp -r "$SRC" "$SR_TMP/tests"
gunzip -f "$SR_TMP"/tests/*.gz
OUT=$SR_TMP/pyverbs.out
(cd "$SR_TMP/tests" && timeout -k 5 400 "$SR" run -- $PY run_tests.py -v) >"$OUT" 2>&1
rc=$?

ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$OUT")
ok=$(grep -cE '\.\.\. ok$' "$OUT")
skipped=$(grep -cE '\.\.\. skipped' "$OUT")
errors=$(grep -c '^ERROR: ' "$OUT")
failures=$(grep -c '^FAIL: ' "$OUT")
echo "pyverbs: exit $rc, ran ${ran:-?}: $ok ok, $errors errors, $failures failures, $skipped skipped"
sr_expect_eq "suite exit status" 0 $rc
[ $rc = 124 ] && echo "(timed out after 400 s)"
sr_expect_ge "tests run" 100 "${ran:-0}"
sr_expect_eq "errors" 0 "$errors"
sr_expect_eq "failures" 0 "$failures"
grep -E '^(ERROR|FAIL): ' "$OUT" | sed 's/^/  | /' >&2
# The rdma_cm tests: every one of CMTestCase ran and passed (none skipped).
cm_ok=$(grep -cE 'tests\.test_rdmacm\.CMTestCase\.[a-z_]+\) \.\.\. ok$' "$OUT")
cm_all=$(grep -cE '^test_[a-z_]+ \(tests\.test_rdmacm\.CMTestCase\.' "$OUT")
sr_expect_ge "rdma_cm tests passed (test_rdmacm.CMTestCase)" 10 "$cm_ok"
sr_expect_eq "rdma_cm tests: all of CMTestCase passed" "$cm_all" "$cm_ok"
[ "$SR_FAILURES" = 0 ] || sr_tail "$OUT" 40 >&2
sr_finish
