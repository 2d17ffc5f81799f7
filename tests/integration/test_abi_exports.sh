#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The ABI of our libibverbs.so.1 against Debian's rdma-core 44 library it replaces.
#
# Unmodified binaries are linked BIND_NOW, and perftest also loads Debian's libmlx5/libefa,
# so one missing (name, version) pair kills a process at start-up. This checks, statically:
#   1. every version node of the system library exists in ours with the same parent, and our
#      SOFTRDMA_PRIVATE_1 and SOFTRDMA_1.0 nodes inherit nothing;
#   2. every symbol the system library exports exists in ours with the same version, the same
#      default (@@) or non-default (@) binding and the same kind (function or data; data also
#      of the same size: verbs_allow_disassociate_destroy is a 1-byte variable);
#   3. ours exports nothing else, except in SOFTRDMA_PRIVATE_1 (internal) and SOFTRDMA_1.0
#      (the public <softrdma/softrdma.h>, whose every name must be there): no leaked internals;
#   4. every IBVERBS_* / SOFTRDMA_* import of libmlx5, libefa, Debian's librdmacm and our own
#      librdmacm (when built) is satisfied by ours;
# and at run time:
#   5. `ib_write_bw -h` (perftest) starts with LD_BIND_NOW=1 against ours.
#
# Env: SR_BUILD_DIR (our build tree, set by CTest); SR_SYSTEM_LIBDIR to point at the Debian
# libraries if they are not in the usual multiarch directory. Exits 0 with a SKIP line when
# the system libibverbs is not installed (nothing to compare with), non-zero on any mismatch.
set -euo pipefail

: "${SR_BUILD_DIR:?SR_BUILD_DIR must point at the build directory}"
ours="$SR_BUILD_DIR/lib/libibverbs.so.1"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

err() { echo "FAIL: $*" >&2; fail=1; }

# The system (Debian) copy of a library, never ours: search fixed directories, not the loader
# path, which CTest or the user may have pointed at the build tree.
system_lib() {
	local d
	for d in ${SR_SYSTEM_LIBDIR:-} /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu \
		 /usr/lib/"$(uname -m)"-linux-gnu /usr/lib64 /usr/lib; do
		if [ -e "$d/$1" ]; then
			echo "$d/$1"
			return 0
		fi
	done
	return 1
}

# Exported symbols, one per line: "FUNC name@@VER", "FUNC name@VER" (non-default),
# "OBJECT/<size> name@@VER". readelf shows the default/non-default distinction as @@/@.
# The absolute symbol the linker emits for each version node is shown as "NODE n@@n".
exports() {
	readelf -W --dyn-syms "$1" | awk '
		$1 ~ /^[0-9]+:$/ && $7 != "UND" && $5 != "LOCAL" && $8 != "" {
			if ($7 == "ABS" && $8 !~ /@/) {
				print "NODE", $8 "@@" $8
				next
			}
			kind = $4
			if (kind == "OBJECT")
				kind = kind "/" $3
			print kind, $8
		}' | sort -u
}

# Imports from our nodes as "name@VER" (the loader matches a reference by name and version,
# whether the definition is the default or not).
imports() {
	readelf -W --dyn-syms "$1" | awk '
		$1 ~ /^[0-9]+:$/ && $7 == "UND" && $8 ~ /@(IBVERBS|SOFTRDMA)_/ { print $8 }' | sort -u
}

# Version definitions as "NODE PARENT" ("-" for none), the file's own base entry left out.
version_nodes() {
	readelf -V "$1" | awk '
		function flush() { if (cur != "") print cur, par; cur = "" }
		/Version definition section/ { indef = 1; next }
		/Version needs section/ { flush(); indef = 0 }
		indef && /Index:/ {
			flush()
			if ($0 !~ /Flags: BASE/) { cur = $NF; par = "-" }
		}
		indef && /Parent 1:/ { par = $NF }
		END { flush() }' | sort -u
}

if [ ! -e "$ours" ]; then
	echo "FAIL: $ours not built" >&2
	exit 1
fi
if ! sysverbs=$(system_lib libibverbs.so.1); then
	echo "SKIP: no system libibverbs.so.1 to compare with (set SR_SYSTEM_LIBDIR)"
	exit 0
fi
echo "comparing $ours"
echo "     with $sysverbs"

# 1. Version nodes and their inheritance.
version_nodes "$sysverbs" >"$tmp/sys.nodes"
version_nodes "$ours" >"$tmp/our.nodes"
while read -r node parent; do
	if ! grep -qx "$node $parent" "$tmp/our.nodes"; then
		got=$(awk -v n="$node" '$1 == n { print $2 }' "$tmp/our.nodes")
		err "version node $node (parent $parent) missing or wrong (ours: ${got:-absent})"
	fi
done <"$tmp/sys.nodes"
for node in SOFTRDMA_PRIVATE_1 SOFTRDMA_1.0; do
	grep -qx "$node -" "$tmp/our.nodes" ||
		err "version node $node missing or inherits a node"
done

# 2. Every system export, with its version, binding and kind.
exports "$sysverbs" >"$tmp/sys.exp"
exports "$ours" >"$tmp/our.exp"
missing=$(comm -23 "$tmp/sys.exp" "$tmp/our.exp")
if [ -n "$missing" ]; then
	err "$(wc -l <<<"$missing") exported symbol(s) missing or different (kind name@version):"
	while read -r kind sym; do
		name=${sym%%@*}
		have=$(awk -v n="$name" '{ s = $2; sub(/@.*/, "", s) } s == n { printf " %s %s", $1, $2 }' \
			"$tmp/our.exp")
		echo "    $kind $sym${have:+   (ours:$have)}" >&2
	done <<<"$missing"
fi

# 3. Nothing extra outside our own nodes; every function <softrdma/softrdma.h> declares is
# exported, under SOFTRDMA_1.0, and nothing else is there.
extra=$(comm -13 "$tmp/sys.exp" "$tmp/our.exp" | grep -Ev '@@?(SOFTRDMA_PRIVATE_1|SOFTRDMA_1\.0)$' || true)
if [ -n "$extra" ]; then
	err "exported but not by rdma-core 44 (only SOFTRDMA_PRIVATE_1 and SOFTRDMA_1.0 may add names):"
	sed 's/^/    /' <<<"$extra" >&2
fi
hdr="${SR_SOURCE_DIR:-$(dirname "$0")/../..}/include/softrdma/softrdma.h"
if [ -e "$hdr" ]; then
	# Declarations of exported functions (not the static inline helpers).
	sed -nE '/^static/d; s/^[a-z].*[ *](softrdma_[a-z0-9_]+)\(.*/\1/p' "$hdr" |
		sort -u >"$tmp/hdr.fns"
	awk '$1 != "NODE" && $2 ~ /@@?SOFTRDMA_1\.0$/ { s = $2; sub(/@.*/, "", s); print s }' "$tmp/our.exp" |
		sort -u >"$tmp/pub.fns"
	if ! cmp -s "$tmp/hdr.fns" "$tmp/pub.fns"; then
		err "softrdma.h functions and SOFTRDMA_1.0 exports differ (< header, > exports):"
		diff "$tmp/hdr.fns" "$tmp/pub.fns" | grep '^[<>]' | sed 's/^/    /' >&2
	else
		echo "ok: the $(wc -l <"$tmp/pub.fns") functions of softrdma.h are exported in SOFTRDMA_1.0"
	fi
fi

# 4. What the providers and librdmacm import from us.
sed -E 's/^[^ ]+ //; s/@@/@/' "$tmp/our.exp" | sort -u >"$tmp/our.defs"
consumers=()
for lib in libmlx5.so.1 libefa.so.1 librdmacm.so.1; do
	if path=$(system_lib "$lib"); then
		consumers+=("$path")
	else
		echo "note: system $lib not installed, its imports not checked"
	fi
done
[ -e "$SR_BUILD_DIR/lib/librdmacm.so.1" ] && consumers+=("$SR_BUILD_DIR/lib/librdmacm.so.1")
for lib in "${consumers[@]}"; do
	imports "$lib" >"$tmp/imp"
	unmet=$(comm -23 "$tmp/imp" "$tmp/our.defs")
	if [ -n "$unmet" ]; then
		err "$(wc -l <<<"$unmet") import(s) of $lib not exported by ours:"
		sed 's/^/    /' <<<"$unmet" >&2
	else
		echo "ok: all $(wc -l <"$tmp/imp") IBVERBS imports of $lib resolve"
	fi
done

# 5. The loader's verdict: perftest links libmlx5 and libefa, whose constructors register
# their drivers with us. "-h" prints usage (exit status 1) without opening a device.
if bw=$(command -v ib_write_bw); then
	out=$(LD_LIBRARY_PATH="$SR_BUILD_DIR/lib" LD_BIND_NOW=1 timeout 5 "$bw" -h 2>&1) && rc=0 || rc=$?
	if [ "$rc" -ge 124 ] ||
		grep -Eq 'symbol lookup error|not found|undefined symbol|error while loading' <<<"$out"; then
		err "ib_write_bw -h with LD_BIND_NOW=1 failed (exit $rc):"
		head -5 <<<"$out" | sed 's/^/    /' >&2
	elif ! grep -q 'Usage' <<<"$out"; then
		err "ib_write_bw -h printed no usage (exit $rc)"
	else
		echo "ok: ib_write_bw -h loads with LD_BIND_NOW=1"
	fi
else
	echo "note: perftest not installed, load check skipped"
fi

if [ "$fail" -ne 0 ]; then
	echo "test_abi_exports: FAILED" >&2
	exit 1
fi
echo "ok: $(wc -l <"$tmp/sys.exp") exports and $(wc -l <"$tmp/sys.nodes") version nodes match rdma-core 44"
