#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The ABI of our librdmacm.so.1 against Debian's rdma-core 44 library it replaces: every
# version node (with its parent) and every (name, version) pair the system library exports is
# exported by ours, and nothing else is; then every rdmacm-utils program and librspreload start
# with LD_BIND_NOW=1 against ours (a missing name would kill them at start-up).
set -euo pipefail
: "${SR_BUILD_DIR:?SR_BUILD_DIR must point at the build directory}"

ours="$SR_BUILD_DIR/lib/librdmacm.so.1"
sys=""
for d in /usr/lib/x86_64-linux-gnu /usr/lib/"$(uname -m)"-linux-gnu /usr/lib64 /usr/lib; do
	[ -e "$d/librdmacm.so.1" ] && { sys="$d/librdmacm.so.1"; break; }
done
[ -n "$sys" ] || { echo "SKIP: no system librdmacm.so.1 to compare with"; exit 77; }
[ -e "$ours" ] || { echo "FAIL: $ours was not built" >&2; exit 1; }

exports() {	# "name@@VER" per line, version nodes as "NODE@@VER"
	readelf -W --dyn-syms "$1" | awk '$1 ~ /^[0-9]+:$/ && $7 != "UND" && $5 != "LOCAL" && $8 != "" {
		if ($7 == "ABS" && $8 !~ /@/) print "NODE@@" $8; else print $8 }' | sort -u
}
parents() {	# "NODE parent" per line ("NODE -" without one), from the version definitions
	readelf -W -V "$1" | awk '/Version definition section/ {on=1; next} /Version needs section/ {on=0}
		on && /Rev:/ { for (i = 1; i <= NF; i++) if ($i == "Cnt:") c = $(i + 1)
			       n = $NF; p = "-"; if (c > 1) { getline; p = $NF }
			       if ($0 !~ /BASE/) print n, p }' | grep -v '\.so' | sort -u
}

fail=0
missing=$(comm -23 <(exports "$sys") <(exports "$ours"))
extra=$(comm -13 <(exports "$sys") <(exports "$ours"))
[ -z "$missing" ] || { echo "FAIL: missing from ours:"; echo "$missing"; fail=1; }
[ -z "$extra" ] || { echo "FAIL: exported by ours only (leaked internals?):"; echo "$extra"; fail=1; }
if ! diff <(parents "$sys") <(parents "$ours") >/dev/null; then
	echo "FAIL: version node parents differ:"; diff <(parents "$sys") <(parents "$ours") || true
	fail=1
fi
echo "exports: $(exports "$sys" | wc -l) in the system library, $(exports "$ours" | wc -l) in ours"

export LD_LIBRARY_PATH="$SR_BUILD_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for prog in rping ucmatose udaddy cmtime rdma_server rdma_client mckey rstream riostream rcopy udpong; do
	command -v "$prog" >/dev/null || continue
	out=$(LD_BIND_NOW=1 timeout 10 "$prog" -h 2>&1 || true)
	if echo "$out" | grep -qiE "symbol lookup error|version .* not found|undefined symbol"; then
		echo "FAIL: $prog does not start against ours: $out"; fail=1
	fi
done
pre=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so.1
if [ -e "$pre" ]; then
	out=$(LD_BIND_NOW=1 LD_PRELOAD="$pre" timeout 10 true 2>&1 || true)
	if [ -n "$out" ]; then echo "FAIL: librspreload does not load against ours: $out"; fail=1; fi
fi
[ $fail = 0 ] && echo "PASS: librdmacm ABI matches Debian's"
exit $fail
