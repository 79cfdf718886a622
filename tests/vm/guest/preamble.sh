# SPDX-License-Identifier: LGPL-2.1-or-later
# preamble.sh (sourced first by main.sh and bench-main.sh): what every guest
# script needs after tests/vm/init's switch_root: proc, sys and dev, the
# run's env.sh, a results folder, lib.sh, scratch tmpfs mounts, loop and
# ext4.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
# env.sh comes through the read-only view of the host; the writable results
# share is mounted only at the end (lib.sh's finish), so that no 9p mount is
# visible while the tests run ("flush all" would flush every 9p superblock,
# the guest's own root among them)
. "$fcache_env"
# /tmp is the guest's own tmpfs; the directories of the host's /tmp that the
# run needs (a build or source tree there: run.sh lists them in GUEST_KEEP)
# are bound back at their own paths
mkdir -p /var/lib/fcache-keep
for k in $GUEST_KEEP; do
	h=/var/lib/fcache-keep/$(basename "$k")
	mkdir -p "$h" && mount --bind "$k" "$h"
done
mount -t tmpfs tmpfs /tmp
for k in $GUEST_KEEP; do
	mkdir -p "$k" && mount --bind "/var/lib/fcache-keep/$(basename "$k")" "$k" &&
		umount "/var/lib/fcache-keep/$(basename "$k")"
done
mkdir -p /tmp/results
RESULTS=/tmp/results
. "$GUEST_DIR/lib.sh"
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /srv
mount -t tmpfs tmpfs /mnt
modprobe loop
modprobe ext4
