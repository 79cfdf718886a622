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
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# Each round runs direct and reintegration back to back on the same data,
# so a shared machine's load falls on both alike; the medians are reported.
: >"$W/tmpfs.ratios"; : >"$W/ext4.ratios"
for run in 1 2 3 4 5; do
        mkdir -p "$W/t/srv" "$W/t/direct"
        mount -t tmpfs -o size=1g tmpfs "$W/t/srv" && mount -t tmpfs -o size=1g tmpfs "$W/t/direct" || exit 77
        out=$("$TOOL" bench "$W/t" "$STEPS" 2000) || rc=1
        echo "tmpfs server, round $run: $out"
        echo "$out" | sed -n 's/.*ratio=\([0-9.]*\).*/\1/p' >>"$W/tmpfs.ratios"
        umount "$W/t/srv" "$W/t/direct"; rm -rf "$W/t"
done
for run in 1 2 3; do
        out=$("$TOOL" bench "$W/e" "$STEPS" 2000) || rc=1
        echo "ext4 server, round $run: $out"
        echo "$out" | sed -n 's/.*ratio=\([0-9.]*\).*/\1/p' >>"$W/ext4.ratios"
        rm -rf "$W/e"
done
echo "median ratio reintegration/direct: tmpfs server $(median <"$W/tmpfs.ratios")," \
     "ext4 server $(median <"$W/ext4.ratios") (target 1.5)"
exit $rc
