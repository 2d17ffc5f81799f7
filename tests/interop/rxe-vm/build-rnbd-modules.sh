#!/bin/bash
# build-rnbd-modules.sh DIR KVER -- the kernel's own RTRS and RNBD modules for kernel KVER (the
# kernel of the rxe-vm guest), built out of tree from Debian's kernel source into DIR:
# rtrs-core.ko rtrs-client.ko rtrs-server.ko rnbd-server.ko rnbd-client.ko. Debian's 6.1 config
# leaves CONFIG_INFINIBAND_RTRS_* and CONFIG_BLK_DEV_RNBD_* unset, so its kernel ships none of
# them; the headers package (its Module.symvers, CONFIG_MODVERSIONS) makes them loadable there.
# A cache: nothing is rebuilt while DIR/stamp matches the inputs.
# Needs (Debian): linux-source-6.1 (/usr/src/linux-source-6.1.tar.xz), linux-headers-KVER
# (linux-headers-amd64), the kernel's compiler (gcc-12), make, xz-utils.
# Exit 0: built (or cached); 2: an input is missing (the caller skips); else a build failure.
set -euo pipefail
D=${1:?usage: build-rnbd-modules.sh DIR KVER}
KVER=${2:?usage: build-rnbd-modules.sh DIR KVER}
missing() { echo "build-rnbd-modules.sh: $*" >&2; exit 2; }
fail() { echo "build-rnbd-modules.sh: $*" >&2; exit 1; }

TARBALL=/usr/src/linux-source-6.1.tar.xz
[ -s "$TARBALL" ] || missing "no /usr/src/linux-source-6.1.tar.xz (apt-get install linux-source-6.1)"
KD=/usr/src/linux-headers-$KVER
[ -f "$KD/Module.symvers" ] || missing "no $KD/Module.symvers (apt-get install linux-headers-$KVER)"
command -v make >/dev/null || missing "no make"
# The source must be the guest kernel's own release: the modules are built against its
# headers, and an in-kernel API of another 6.1.y may differ.
src_ver=$(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null || echo unknown)
img_ver=$(dpkg-query -W -f='${Version}' "linux-image-$KVER" 2>/dev/null || echo unknown)
[ "$src_ver" = "$img_ver" ] ||
	missing "linux-source-6.1 is $src_ver but the guest kernel linux-image-$KVER is $img_ver (install the same version)"

MODS="rtrs-core rtrs-client rtrs-server rnbd-server rnbd-client"
stamp="$(md5sum <"$0" | cut -c1-12) $KVER $src_ver $(stat -c %s-%Y "$TARBALL" "$KD/Module.symvers" | md5sum | cut -c1-12)"
ok=1
for m in $MODS; do [ -s "$D/$m.ko" ] || ok=; done
if [ -n "$ok" ] && [ -f "$D/stamp" ] && [ "$(cat "$D/stamp")" = "$stamp" ]; then
	exit 0
fi
mkdir -p "$D"
D=$(cd "$D" && pwd -P)
T=$(mktemp -d "$D/build.XXXXXX")
trap 'rm -rf "$T"' EXIT
t0=$SECONDS
# only the two directories (the tarball is read whole either way: xz is not seekable)
tar -xJf "$TARBALL" -C "$T" linux-source-6.1/drivers/infiniband/ulp/rtrs linux-source-6.1/drivers/block/rnbd
W=$T/linux-source-6.1
R=$W/drivers/infiniband/ulp/rtrs
B=$W/drivers/block/rnbd
J=$(nproc)
make -C "$KD" M="$R" -j"$J" CONFIG_INFINIBAND_RTRS=m CONFIG_INFINIBAND_RTRS_CLIENT=m \
	CONFIG_INFINIBAND_RTRS_SERVER=m modules >"$T/rtrs.log" 2>&1 ||
	{ tail -20 "$T/rtrs.log" >&2; fail "make of drivers/infiniband/ulp/rtrs failed"; }
# rnbd's Makefile adds -I$(srctree)/drivers/infiniband/ulp/rtrs, which the headers package does
# not have (KCFLAGS); modpost learns RTRS's symbols from its Module.symvers.
make -C "$KD" M="$B" -j"$J" CONFIG_BLK_DEV_RNBD_CLIENT=m CONFIG_BLK_DEV_RNBD_SERVER=m \
	KCFLAGS="-I$R" KBUILD_EXTRA_SYMBOLS="$R/Module.symvers" modules >"$T/rnbd.log" 2>&1 ||
	{ tail -20 "$T/rnbd.log" >&2; fail "make of drivers/block/rnbd failed"; }
for m in $MODS; do
	f=$R/$m.ko
	[ -s "$f" ] || f=$B/$m.ko
	[ -s "$f" ] || fail "$m.ko was not built"
	cp "$f" "$T/$m.ko.new"
done
for m in $MODS; do mv "$T/$m.ko.new" "$D/$m.ko"; done
echo "$stamp" >"$D/stamp"
echo "build-rnbd-modules.sh: $MODS for $KVER (linux-source-6.1 $src_ver) in $((SECONDS - t0)) s, in $D"
