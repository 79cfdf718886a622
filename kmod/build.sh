#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# build.sh KDIR SRCDIR WORKDIR OUTPUT: build fcache.ko out of tree in a
# copy of the sources under WORKDIR (Kbuild writes next to its sources,
# and the source tree stays clean), then copy the module to OUTPUT.
set -eu
kdir=$1 src=$2 work=$3 out=$4
mkdir -p "$work/uapi"
for f in "$src"/*.c "$src"/*.h "$src"/Kbuild "$src"/Makefile; do
	cmp -s "$f" "$work/$(basename "$f")" || cp "$f" "$work/"
done
cmp -s "$src/uapi/fcache_netlink.h" "$work/uapi/fcache_netlink.h" ||
	cp "$src/uapi/fcache_netlink.h" "$work/uapi/"
make -s -C "$kdir" M="$work" modules 2>&1 | grep -v 'Skipping BTF generation' >&2 || true
[ -f "$work/fcache.ko" ] || { echo "build.sh: fcache.ko was not built" >&2; exit 1; }
cp "$work/fcache.ko" "$out"
