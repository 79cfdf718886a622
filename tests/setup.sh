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
        # from bookworm-backports: wanted at a backports version (~bpo)
        mapfile -t bpo < <(grep -v '^[[:space:]]*\(#\|$\)' "$top/.ci/packages-backports")
        bpo_missing=()
        if grep -qx 'VERSION_CODENAME=bookworm' /etc/os-release; then
                for p in "${bpo[@]}"; do
                        dpkg-query -W -f='${Version}' "$p" 2>/dev/null | grep -q '~bpo' || bpo_missing+=("$p")
                done
        fi
        export DEBIAN_FRONTEND=noninteractive
        if [ ${#bpo_missing[@]} -gt 0 ] &&
           ! grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
                echo 'deb http://deb.debian.org/debian bookworm-backports main' \
                        > /etc/apt/sources.list.d/fcache-bookworm-backports.list
        fi
        if [ ${#missing[@]} -gt 0 ] || [ ${#bpo_missing[@]} -gt 0 ]; then
                apt-get update -qq >/dev/null
        fi
        if [ ${#missing[@]} -gt 0 ]; then
                echo "setup: installing ${missing[*]}"
                apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
        fi
        if [ ${#bpo_missing[@]} -gt 0 ]; then
                # the backports meta-packages replace Debian's: keep what
                # those pulled in (the 6.1 kernel, the default) as wanted
                mapfile -t keep < <(apt-cache depends --installed "${bpo_missing[@]}" 2>/dev/null |
                        awk '$1 == "Depends:" { print $2 }')
                [ ${#keep[@]} -eq 0 ] || apt-mark manual "${keep[@]}" >/dev/null
                echo "setup: installing from bookworm-backports ${bpo_missing[*]}"
                apt-get install -y -qq --no-install-recommends -t bookworm-backports \
                        "${bpo_missing[@]}" >/dev/null ||
                        echo "setup: bookworm-backports packages not installed: vm-newest and vm-afs-newest will skip" >&2
        fi
fi
cd "$top"
if [ -d "$builddir" ]; then
        meson configure "$builddir" "$@" >/dev/null
else
        meson setup "$builddir" "$@" >/dev/null
fi
ninja -C "$builddir" >/dev/null
