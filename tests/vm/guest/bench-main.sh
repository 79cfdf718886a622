#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# bench-main.sh: the guest side of the benchmark run (meson suite "bench"):
# only what bench.sh needs, then bench.sh.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
. "$fcache_env"
# /tmp of the overlay root is writable already; a tmpfs over it would hide a
# source tree that lives under the host's /tmp (a CI clone, say)
case $GUEST_DIR in /tmp/*) ;; *) mount -t tmpfs tmpfs /tmp ;; esac
mkdir -p /tmp/results
RESULTS=/tmp/results
. "$GUEST_DIR/lib.sh"
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /srv
mount -t tmpfs tmpfs /mnt
modprobe loop
modprobe ext4
if [ "${BENCH_FILES:-0}" -gt 0 ]; then
	. "$GUEST_DIR/bench.sh"
else
	todo "benchmark: BENCH_FILES is 0"
fi
finish
