#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# find-kdir.sh: print the kernel build directory to build fcache.ko against:
# $KDIR if set, else the running kernel's, else the newest installed one
# (a build host or container often runs another kernel than the target).
if [ -n "${KDIR:-}" ]; then
	[ -f "$KDIR/Makefile" ] && echo "$KDIR" && exit 0
	exit 1
fi
d=/lib/modules/$(uname -r)/build
[ -f "$d/Makefile" ] && echo "$d" && exit 0
for v in $(ls /lib/modules 2>/dev/null | sort -rV); do
	d=/lib/modules/$v/build
	[ -f "$d/Makefile" ] && echo "$d" && exit 0
done
exit 1
