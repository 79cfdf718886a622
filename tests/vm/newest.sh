#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# newest.sh --kmod SRCDIR --work DIR [run.sh options]: the VM harness on the
# newest installed kernel (on Debian 12, bookworm-backports' linux-image-amd64
# beside Debian's 6.1), so that the module's interface drift shows up in a
# test: fcache.ko is built for that kernel here (a build failure is this
# test's failure, not the whole build's), then run.sh boots it.  Skips when
# no kernel newer than the default build's (kmod/find-kdir.sh) is installed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src= work= tap=0
for a in "$@"; do [ "$a" = --tap ] && tap=1; done
while [ $# -gt 0 ]; do
	case $1 in
	--kmod) src=$2; shift 2 ;;
	--work) work=$2; shift 2 ;;
	*) break ;;
	esac
done
[ -n "$src" ] && [ -n "$work" ] || { echo "newest.sh: --kmod SRCDIR --work DIR first" >&2; exit 2; }
skip() {
	[ $tap = 1 ] && { echo "1..0 # SKIP $*"; exit 0; }
	echo "SKIP: $*"; exit 77
}
kdir=$("$src/find-kdir.sh" --newest) || skip "no kernel headers installed"
default=$(KDIR= "$src/find-kdir.sh")
[ "$kdir" != "$default" ] ||
	skip "no kernel newer than $(basename "$(dirname "$default")") installed (bookworm-backports' linux-image-amd64 and linux-headers-amd64)"
kver=$(basename "$(dirname "$kdir")")
mkdir -p "$work"
if ! "$src/build.sh" "$kdir" "$src" "$work" "$work/fcache-$kver.ko" > "$work/build.log" 2>&1; then
	echo "not ok 1 - fcache.ko builds against $kver"
	sed 's/^/# /' "$work/build.log" | tail -n 40
	echo "1..1"
	[ $tap = 1 ] && exit 0
	exit 1
fi
[ $tap = 1 ] || echo "fcache.ko built for $kver"
exec "$here/run.sh" --ko "$work/fcache-$kver.ko" "$@"
