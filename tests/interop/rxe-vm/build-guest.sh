#!/bin/bash
# build-guest.sh DIR -- the kernel-rxe test guest: DIR/vmlinuz (Debian's kernel from /boot) and
# DIR/initramfs.cpio.gz: busybox-static, the kernel's modules for virtio-net, 9p and rdma_rxe
# (with their dependencies, from /lib/modules), rdma-core's user space (libibverbs, the rxe
# provider, ibverbs-utils, rdmacm-utils, perftest, iproute2's `rdma`) with the shared libraries
# they load, and ./init. A cache: nothing is rebuilt while DIR/stamp matches the inputs.
# Needs (Debian): linux-image-amd64, busybox-static, cpio, ibverbs-utils, ibverbs-providers,
# rdmacm-utils, perftest, iproute2, kmod.
set -euo pipefail
unset LD_LIBRARY_PATH LD_PRELOAD	# ldd must list the libraries the guest will load: rdma-core's
HERE=$(dirname "$(readlink -f "$0")")
D=${1:?usage: build-guest.sh DIR}
fail() { echo "build-guest.sh: $*" >&2; exit 1; }

K=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
[ -n "$K" ] || fail "no /boot/vmlinuz-* (apt-get install linux-image-amd64)"
KVER=${K#/boot/vmlinuz-}
[ -f "/lib/modules/$KVER/modules.dep" ] || fail "no /lib/modules/$KVER/modules.dep"
[ -x /bin/busybox ] || fail "no /bin/busybox (apt-get install busybox-static)"
MODS="virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs rdma_ucm"
# The programs of the cases (tests/interop/rxe-vm/cases) and what the guest itself runs.
BINS="ibv_devinfo ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong
      ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat
      rping ucmatose udaddy rdma_server rdma_client rdma"
PROVIDER=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
DRIVER=/etc/libibverbs.d/rxe.driver
[ -e "$PROVIDER" ] && [ -e "$DRIVER" ] || fail "no rxe provider ($PROVIDER, $DRIVER: apt-get install ibverbs-providers)"
paths=()
for b in $BINS; do
	p=$(command -v "$b") || fail "'$b' is not installed"
	paths+=("$(readlink -f "$p")")
done

stamp="$(cat "$HERE/init" "$0" | md5sum | cut -c1-12) $KVER $(stat -c %s-%Y /bin/busybox "$K" "$PROVIDER" "${paths[@]}" | md5sum | cut -c1-12)"
if [ -f "$D/stamp" ] && [ "$(cat "$D/stamp")" = "$stamp" ] && [ -s "$D/initramfs.cpio.gz" ] && [ -s "$D/vmlinuz" ]; then
	exit 0
fi
mkdir -p "$D"
T=$(mktemp -d "$D/build.XXXXXX")
trap 'rm -rf "$T"' EXIT
R=$T/root
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,lib64,etc/libibverbs.d,proc,sys,dev,tmp,run,jobs}

cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do
	[ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"
done

# Modules and their dependencies, as the host's modules.dep lists them; busybox's modprobe
# reads the modules.dep that depmod writes for this subset.
while read -r verb path _; do
	[ "$verb" = insmod ] || continue
	mkdir -p "$R$(dirname "$path")"
	cp "$path" "$R$path"
done < <(for m in $MODS; do modprobe -S "$KVER" --show-depends "$m" || fail "module $m"; done)
cp /lib/modules/"$KVER"/modules.{builtin,builtin.modinfo,order} "$R/lib/modules/$KVER/"
depmod -b "$R" "$KVER"

# Programs, the provider, and every shared library they load (ldd), plus libgcc_s, which
# glibc dlopens for pthread_exit/cancellation (rping) so ldd does not list it.
copy_file() {
	[ -e "$R$1" ] && return 0
	mkdir -p "$R$(dirname "$1")"
	cp -L "$1" "$R$1"
}
for p in "${paths[@]}"; do
	copy_file "$p"
	[ -e "$R/usr/bin/$(basename "$p")" ] || ln -s "$p" "$R/usr/bin/$(basename "$p")"
done
libs=$(for f in "${paths[@]}" "$PROVIDER"; do ldd "$f"; done |
	awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
for l in $libs "$PROVIDER" /lib/x86_64-linux-gnu/libgcc_s.so.1; do copy_file "$l"; done
cp "$DRIVER" "$R/etc/libibverbs.d/"
printf 'root:x:0:0:root:/:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\n' >"$R/etc/group"
printf '127.0.0.1 localhost\n' >"$R/etc/hosts"
install -m 755 "$HERE/init" "$R/init"

(cd "$R" && find . | LC_ALL=C sort | timeout 120 cpio -o -H newc --quiet | gzip -1) >"$T/initramfs.cpio.gz"
cp "$K" "$T/vmlinuz"
chmod 644 "$T/vmlinuz" "$T/initramfs.cpio.gz"
mv "$T/vmlinuz" "$T/initramfs.cpio.gz" "$D/"
echo "$stamp" >"$D/stamp"
echo "build-guest.sh: kernel $KVER, initramfs $(stat -c %s "$D/initramfs.cpio.gz") bytes ($(du -sh "$R" | cut -f1) unpacked) in $D"
