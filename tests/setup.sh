#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# setup.sh BUILDDIR [MESON-OPTIONS...]: install what the build and tests need (Debian 12,
# as root, packages from .ci/packages), then configure and build into BUILDDIR.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
builddir=$1; shift

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        mapfile -t pkgs < <(grep -v '^[[:space:]]*\(#\|$\)' "$top/.ci/packages")
        missing=()
        for p in "${pkgs[@]}"; do
                dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
        done
        if [ ${#missing[@]} -gt 0 ]; then
                echo "setup: installing ${missing[*]}"
                export DEBIAN_FRONTEND=noninteractive
                apt-get update -qq >/dev/null
                apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
        fi
fi
cd "$top"
if [ -d "$builddir" ]; then
        meson configure "$builddir" "$@" >/dev/null
else
        meson setup "$builddir" "$@" >/dev/null
fi
ninja -C "$builddir" >/dev/null
