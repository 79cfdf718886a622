#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# run.sh: the fcache demo. A local directory plays the file server; a FUSE mount of it
# (bindfs) plays the network filesystem; fcachectl shows and changes what is cached.
# Run as root on Debian 12: it installs what it needs, builds, and cleans up after itself.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
"$top/tests/setup.sh" "$top/build"
fc="$top/build/cli/fcachectl"

demo=$(mktemp -d /tmp/fcache-demo-XXXXXX)
server=$demo/server mnt=$demo/mnt
cleanup() {
        cd /
        ! declare -F stop_daemons >/dev/null || stop_daemons
        fusermount3 -u "$mnt" 2>/dev/null || true
        umount "$demo/vol" 2>/dev/null || true
        rm -rf "$demo"
}
trap cleanup EXIT
mkdir -p "$server/proj/src" "$server/proj/doc" "$mnt"
for i in $(seq 1 30); do head -c $((i * 40000)) /dev/urandom > "$server/proj/src/file$i.o"; done
for i in $(seq 1 5); do seq 1 $((i * 20000)) > "$server/proj/doc/notes$i.txt"; done
bindfs -o kernel_cache "$server" "$mnt"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@" || true; }
cd "$mnt"
echo "The 'server' is $server, mounted over FUSE at $mnt."
step "$fc" flush proj
step "$fc" query cached recursive proj
step "$fc" prefetch recursive proj/src
step "$fc" query cached recursive proj proj/src proj/doc
step "$fc" query cached proj/doc/notes1.txt
echo "appended from the demo" >> "$server/proj/doc/notes1.txt"
step "$fc" flush callbacks proj/doc/notes1.txt
step "$fc" flush volume proj/src/file1.o
step "$fc" --json query cached proj/src/file2.o
step "$fc" flush all
step "$fc" query cache
step "$fc" query cachd proj
step "$fc" pin recursive proj
source "$top/tests/demo/daemon.sh"
source "$top/tests/demo/volume.sh"
stop_daemons
echo
echo "Done."
