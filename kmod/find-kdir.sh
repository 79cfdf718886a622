#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# find-kdir.sh [--newest]: print the kernel build directory to build
# fcache.ko against: $KDIR if set, else the running kernel's, else the
# newest installed one that is not a backport (a build host or container
# often runs another kernel than the target; Debian's own kernel stays the
# default when a newer one from bookworm-backports is installed beside it).
# --newest: the newest installed kernel's, backport or not.
backport() { # KVER: its image's Debian package version says ~bpo
	command -v dpkg-query >/dev/null || return 1
	pkg=$(dpkg-query -S "/boot/vmlinuz-$1" 2>/dev/null | cut -d: -f1)
	[ -n "$pkg" ] && dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null | grep -q '~bpo'
}
installed() { # build directories, newest first
	for v in $(ls /lib/modules 2>/dev/null | sort -rV); do
		[ -f "/lib/modules/$v/build/Makefile" ] && echo "$v"
	done
}
if [ "${1:-}" = --newest ]; then
	v=$(installed | head -n 1)
	[ -n "$v" ] && echo "/lib/modules/$v/build"
	exit
fi
if [ -n "${KDIR:-}" ]; then
	[ -f "$KDIR/Makefile" ] && echo "$KDIR" && exit 0
	exit 1
fi
d=/lib/modules/$(uname -r)/build
[ -f "$d/Makefile" ] && echo "$d" && exit 0
for v in $(installed); do
	backport "$v" || { echo "/lib/modules/$v/build"; exit 0; }
done
v=$(installed | head -n 1)
[ -n "$v" ] && echo "/lib/modules/$v/build"
