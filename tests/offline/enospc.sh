#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# enospc.sh TOOL: the offline log on a small ext4 image (loop device) that
# fills up.  Offline changes are recorded until the log answers ENOSPC; every
# change acknowledged before that must be in the log, complete, after a
# reopen; once space is freed, recording works again.  Needs root and a loop
# device (exit 77 otherwise).
set -u
TOOL=${1:?usage: enospc.sh TOOL}
[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP needs root (loop mount)"; exit 77; }
command -v mkfs.ext4 >/dev/null || { echo "1..0 # SKIP needs mkfs.ext4 (e2fsprogs)"; exit 77; }
W=$(mktemp -d /tmp/fcache-enospc.XXXXXX)
MNT=$W/mnt
cleanup() { umount "$MNT" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
mkdir -p "$MNT"
truncate -s 24M "$W/img"
mkfs.ext4 -q -m 0 -F "$W/img" >/dev/null 2>&1 || { echo "1..0 # SKIP mkfs.ext4 failed"; exit 77; }
if ! mount -o loop "$W/img" "$MNT" 2>/dev/null; then
        echo "1..0 # SKIP cannot loop-mount (no loop devices here)"; exit 77
fi
echo "1..4"
# Ballast, freed later: the "space freed" step.
dd if=/dev/zero of="$MNT/ballast" bs=1M count=4 status=none
mkdir "$MNT/vol"
out=$("$TOOL" fill "$MNT/vol" 2>&1); rc=$?
echo "# $out"
[ $rc = 0 ] && echo "ok 1 - the writer got ENOSPC when the disk filled" || echo "not ok 1 - fill did not end in ENOSPC (rc=$rc)"
out=$("$TOOL" check-fill "$MNT/vol" 2>&1); rc=$?
echo "# $out"
[ $rc = 0 ] && echo "ok 2 - every acknowledged change is in the log after a reopen" || echo "not ok 2 - acknowledged changes lost"
rm -f "$MNT/ballast"
out=$("$TOOL" fill "$MNT/vol" 2>&1); rc=$?
echo "# after freeing space: $out"
steps=$(echo "$out" | sed -n 's/^fill: \([0-9]*\) steps.*/\1/p')
[ $rc = 0 ] && [ "${steps:-0}" -gt 0 ] && echo "ok 3 - recording works again once space is freed" \
        || echo "not ok 3 - no recording after space was freed"
out=$("$TOOL" check-fill "$MNT/vol" 2>&1); rc=$?
echo "# $out"
[ $rc = 0 ] && echo "ok 4 - still nothing acknowledged lost" || echo "not ok 4 - acknowledged changes lost"
