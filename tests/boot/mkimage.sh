#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# mkimage.sh KVER: print the path of the cached Debian 12 root image for the boot
# test, building it first when it is missing.
#
# The image (raw ext4, /var/cache/fcache-vm/bookworm-KEY.img, or $FCACHE_VM_CACHE) is
# a debootstrap of bookworm with systemd, dbus, polkitd, NFS client and server, fuse3
# and the libraries fcache links, the host's kernel modules for KVER, and the test's
# fixed part (fstab, NFS export, the unit that runs the test).  KEY hashes this
# script, KVER and the guest files it copies: a change rebuilds it, otherwise every
# run reuses it (the runs write to a snapshot, never to the image).
# No mount on the host: debootstrap runs in a private mount namespace and the
# filesystem is made from the directory with mkfs.ext4 -d.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kver=$1
cache=${FCACHE_VM_CACHE:-/var/cache/fcache-vm}
mirror=${FCACHE_VM_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(sed -n 's/^URIs: *\([^ ]*\/debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
	[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
	[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi
pkgs=systemd,systemd-sysv,udev,dbus,kmod,procps,iproute2,psmisc,e2fsprogs,nfs-common,nfs-kernel-server,fuse3,libfuse3-3,libglib2.0-0,libsystemd0,libgit2-1.5,libsqlite3-0,libpolkit-gobject-1-0,libdbus-1-3
# Two levels: the debootstrap tree (slow: minutes of downloads and unpacking) is
# kept in its own directory, keyed by the package list and the mirror; the image
# made from it (a minute) by this script, the kernel and the guest files.
# polkitd is installed after debootstrap, with apt in the new root: in debootstrap's
# own configure pass its postinst fails (the bus is not running), which aborts it.
later=polkitd
bkey=$(echo "$pkgs $later $mirror" | sha256sum | cut -c1-12)
base=$cache/debootstrap-$bkey
key=$( { cat "$0"; find "$here/guest/image" -type f | sort | xargs cat; echo "$kver $bkey"; } | sha256sum | cut -c1-12)
img=$cache/bookworm-$key.img
if [ -s "$img" ]; then echo "$img"; exit 0; fi

[ "$(id -u)" = 0 ] || { echo "mkimage.sh: building $img needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "mkimage.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -s "$img" ]; then echo "$img"; exit 0; fi
if [ ! -e "$base/.complete" ]; then
	rm -rf "$base"
	echo "mkimage.sh: debootstrap bookworm from $mirror into $base" >&2
	mkdir -p "$cache/debs"
	nice unshare --mount --propagation private \
		debootstrap --variant=minbase --cache-dir="$cache/debs" --include="$pkgs" bookworm "$base" "$mirror" \
		>"$cache/debootstrap.log" 2>&1 ||
		{ cp "$base/debootstrap/debootstrap.log" "$cache/debootstrap-failed.log" 2>/dev/null
		  tail -30 "$cache/debootstrap.log" >&2; rm -rf "$base"; exit 1; }
	cp /etc/resolv.conf "$base/etc/resolv.conf"
	nice unshare --mount --propagation private sh -c '
		mount -t proc proc "$1/proc" && mount --bind /dev "$1/dev" &&
		chroot "$1" apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive chroot "$1" apt-get install -y -qq $2' \
		sh "$base" "$later" >>"$cache/debootstrap.log" 2>&1 &&
	chroot "$base" dpkg -s $later >/dev/null 2>&1 ||
		{ tail -30 "$cache/debootstrap.log" >&2; rm -rf "$base"; exit 1; }
	: > "$base/etc/resolv.conf"
	rm -rf "$base"/var/cache/apt/archives/*.deb "$base"/var/cache/apt/*.bin "$base"/var/lib/apt/lists/*
	touch "$base/.complete"
	for old in "$cache"/debootstrap-*; do [ "$old" = "$base" ] || rm -rf "$old"; done
fi
root=$cache/root-$key
rm -rf "$root"
trap 'rm -rf "$root" "$img.tmp"' EXIT
cp -a "$base" "$root"
rm -f "$root/.complete"

# The host's kernel modules for KVER (the guest boots the host's /boot/vmlinuz-KVER).
mkdir -p "$root/lib/modules"
cp -a "/lib/modules/$kver" "$root/lib/modules/"
rm -rf "$root/lib/modules/$kver/build" "$root/lib/modules/$kver/source"
# The fixed part of the test.
cp -a "$here"/guest/image/. "$root/"
echo fcache-boot >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 fcache-boot\n' >"$root/etc/hosts"
mkdir -p "$root/srv/nfs" "$root/mnt/nfs" "$root/xfer" "$root/var/log/journal"
passwd -R "$root" -d root >/dev/null
# An unprivileged user, for the polkit checks.
chroot "$root" useradd -m -u 1000 -s /bin/bash tester
chroot "$root" systemctl enable fcache-boot-test.service serial-getty@ttyS0.service >/dev/null 2>&1 ||
	{ ln -sf /etc/systemd/system/fcache-boot-test.service "$root/etc/systemd/system/multi-user.target.wants/"; }
size=$(( $(du -sm "$root" | cut -f1) + 1024 ))
nice mkfs.ext4 -q -F -L fcache-root -d "$root" "$img.tmp" "${size}M" >&2
mv "$img.tmp" "$img"
# Older images of this cache are for another version of this script or kernel.
for old in "$cache"/bookworm-*.img; do [ "$old" = "$img" ] || rm -f "$old"; done
echo "$img"
