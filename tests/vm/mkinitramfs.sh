#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# mkinitramfs.sh OUT.cpio.gz KVER [INIT MODULE...]: a busybox initramfs with the
# modules that /init needs to reach the host's root (virtio-pci, 9p, overlay);
# the boot test gives its own /init and modules (virtio-blk, ext4).
set -eu
out=$1
kver=$2
here=$(cd "$(dirname "$0")" && pwd)
init=${3:-$here/init}
[ $# -gt 3 ] && shift 3 && mods="$*" || mods="virtio_pci 9pnet_virtio 9p overlay"
busybox=$(command -v busybox || echo /bin/busybox)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/mods" "$tmp/proc" "$tmp/sys" "$tmp/dev"
cp "$busybox" "$tmp/bin/busybox"
ln -s busybox "$tmp/bin/sh"
cp "$init" "$tmp/init"
chmod +x "$tmp/init"
: > "$tmp/mods/order"
for m in $mods; do
	modprobe -S "$kver" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r ko; do
	cp "$ko" "$tmp/mods/"
	basename "$ko" >> "$tmp/mods/order"
done
(cd "$tmp" && find . | cpio -o -H newc --quiet) | gzip -1 > "$out"
