#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# mkdebs.sh DIR: build the Debian packages with `dpkg-buildpackage -b -uc -us` in a
# copy of the tree, DIR/fcache-UPSTREAM (the source tree stays clean); the .deb,
# .changes and .buildinfo files land in DIR, the build's log in DIR/build.log.
# Used by build-deb.sh (which then checks them) and by the boot test (which installs
# them in a Debian 12 guest).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$1
version=$(sed -n "s/^fcache (\([^)]*\)).*/\1/p;q" "$top/debian/changelog")
upstream=${version%-*}
# The copy: the files git knows and the new ones it does not ignore (no build dirs).
src=$out/fcache-$upstream
rm -rf "$src"
mkdir -p "$src"
(cd "$top" && git ls-files -z --cached --others --exclude-standard |
        tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$src"
(cd "$src" && DEB_BUILD_OPTIONS="parallel=2 ${DEB_BUILD_OPTIONS:-}" \
        nice dpkg-buildpackage -b -uc -us) >"$out/build.log" 2>&1
