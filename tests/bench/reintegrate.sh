#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# reintegrate.sh TOOL [STEPS]: reintegration of STEPS (10,000) mixed offline
# changes (content 30%, create 15%, mkdir 5%, symlink 3%, link 3%, unlink
# 10%, rmdir 3%, rename 13% (a third over an existing file), chmod 8%,
# utimes 5%, setxattr 5%) of a 2,000-file tree, against applying the same
# changes directly to the backing, same run, same data; both results must be
# identical.  The log is on the local disk with its real fsyncs; the
# "server" is a tmpfs (no device latency: the worst case for the ratio) and
# then a directory on the local ext4 disk.  Reports the ratios; target 1.5x.
set -u
TOOL=${1:?usage: reintegrate.sh TOOL [STEPS]}
STEPS=${2:-10000}
[ "$(id -u)" = 0 ] || { echo "needs root (tmpfs mounts)"; exit 77; }
W=$(mktemp -d /var/tmp/fcache-bench-reint.XXXXXX)
cleanup() { umount "$W/t/srv" "$W/t/direct" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
rc=0
mkdir -p "$W/t/srv" "$W/t/direct"
mount -t tmpfs -o size=1g tmpfs "$W/t/srv" && mount -t tmpfs -o size=1g tmpfs "$W/t/direct" || exit 77
for run in 1 2 3; do
        out=$("$TOOL" bench "$W/t" "$STEPS" 2000) || rc=1
        echo "tmpfs server, run $run: $out"
        umount "$W/t/srv" "$W/t/direct"; rm -rf "$W/t/log" "$W/t/scratch" "$W/t/files" "$W/t/acks"
        mount -t tmpfs -o size=1g tmpfs "$W/t/srv"; mount -t tmpfs -o size=1g tmpfs "$W/t/direct"
done
for run in 1 2; do
        rm -rf "$W/e"
        out=$("$TOOL" bench "$W/e" "$STEPS" 2000) || rc=1
        echo "ext4 server, run $run: $out"
done
exit $rc
