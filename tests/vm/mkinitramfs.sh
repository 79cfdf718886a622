#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# mkinitramfs.sh OUT.cpio.gz KVER: a busybox initramfs with the modules
# that /init needs to reach the host's root (virtio-pci, 9p, overlay).
set -eu
out=$1
kver=$2
here=$(cd "$(dirname "$0")" && pwd)
busybox=$(command -v busybox || echo /bin/busybox)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/mods" "$tmp/proc" "$tmp/sys" "$tmp/dev"
cp "$busybox" "$tmp/bin/busybox"
ln -s busybox "$tmp/bin/sh"
cp "$here/init" "$tmp/init"
chmod +x "$tmp/init"
: > "$tmp/mods/order"
for m in virtio_pci 9pnet_virtio 9p overlay; do
	modprobe -S "$kver" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r ko; do
	cp "$ko" "$tmp/mods/"
	basename "$ko" >> "$tmp/mods/order"
done
(cd "$tmp" && find . | cpio -o -H newc --quiet) | gzip -1 > "$out"
