#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# build-deb.sh: build the Debian packages with `dpkg-buildpackage -b -uc -us` in a copy
# of the tree (the source tree stays clean), run lintian on them (any warning or error
# fails), and check where their files land: every package unpacked into one scratch
# root, the unit verified there, the maintainer scripts doing what they should. Then,
# when kernel headers are installed, DKMS builds the module from the unpacked
# /usr/src/fcache-VERSION in a private DKMS tree. Also checks that a default meson
# setup (prefix /usr/local) still installs the bus, polkit and systemd files where
# their daemons read them. TAP output; exits 77 when the Debian tools are missing.
# KEEP=1 keeps the scratch directory; DEBS_OUT=DIR copies the built .deb files there
# (tests/run-all.sh gives them to the boot test).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
n=0; failures=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); failures=$((failures + 1)); echo "not ok $n - $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }
for prog in dpkg-buildpackage dh lintian dpkg-deb fakeroot; do
        command -v $prog >/dev/null || { echo "1..0 # SKIP $prog is not installed (.ci/packages)"; exit 77; }
done
[ -e /usr/share/perl5/Debian/Debhelper/Sequence/dkms.pm ] ||
        { echo "1..0 # SKIP dh-dkms is not installed (.ci/packages)"; exit 77; }

T=$(mktemp -d /tmp/fcache-deb.XXXXXX)
[ "${KEEP:-}" ] && echo "# scratch: $T" || trap 'rm -rf "$T"' EXIT
version=$(sed -n "s/^fcache (\([^)]*\)).*/\1/p;q" "$top/debian/changelog")
upstream=${version%-*}
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

before=$(cd "$top" && git status --porcelain --ignored=matching -- debian | md5sum)
if "$top/tests/packaging/mkdebs.sh" "$T"; then
        ok "dpkg-buildpackage -b -uc -us"
else
        not_ok "dpkg-buildpackage -b -uc -us"; tail -40 "$T/build.log" | sed 's/^/# /'
        echo "1..$n"; exit 1
fi
[ -n "${DEBS_OUT:-}" ] && mkdir -p "$DEBS_OUT" && cp "$T"/*.deb "$DEBS_OUT/"
after=$(cd "$top" && git status --porcelain --ignored=matching -- debian | md5sum)
check "the source tree is untouched" [ "$before" = "$after" ]

changes=$T/fcache_${version}_${arch}.changes
deb() { echo "$T/${1}_${version}_${2:-$arch}.deb"; }
for p in fcache libfcachectl0 libfcachectl-dev; do check "$p is built" [ -f "$(deb $p)" ]; done
check "fcache-dkms is built" [ -f "$(deb fcache-dkms all)" ]

# lintian: no error, no warning; the info tags are listed.
lintian --fail-on error,warning --display-info "$changes" >"$T/lintian.log" 2>&1
rc=$?
sed 's/^/# lintian: /' "$T/lintian.log"
check "lintian: no error or warning" [ $rc = 0 ]

# Where the files land: every package unpacked into one root.
R=$T/root
for f in "$T"/*.deb; do dpkg-deb -x "$f" "$R"; done
unitdir=$(pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null || echo /lib/systemd/system)
for f in usr/sbin/fcached usr/bin/fcachectl usr/bin/fcache-resolve \
         usr/libexec/fcache/fcache-view usr/libexec/fcache/fcache-view-ctl \
         "${unitdir#/}/fcached.service" \
         usr/share/dbus-1/system.d/org.fcache.Manager1.conf \
         usr/share/dbus-1/system-services/org.fcache.Manager1.service \
         usr/share/dbus-1/interfaces/org.fcache.Manager1.xml \
         usr/share/dbus-1/interfaces/org.fcache.Volume1.xml \
         usr/share/dbus-1/interfaces/org.fcache.Conflict1.xml \
         usr/bin/fcache-agent usr/lib/systemd/user/fcache-agent.service \
         etc/xdg/autostart/fcache-agent.desktop \
         usr/share/polkit-1/actions/org.fcache.policy \
         usr/lib/tmpfiles.d/fcache.conf usr/lib/modules-load.d/fcache.conf \
         usr/share/man/man8/fcached.8.gz usr/share/man/man8/fcache-view.8.gz \
         usr/share/man/man5/fcache.volume.5.gz usr/share/man/man7/fcache-dbus.7.gz \
         usr/share/man/man1/fcachectl.1.gz usr/share/man/man3/fcachectl.3.gz \
         usr/share/bash-completion/completions/fcachectl \
         usr/share/bash-completion/completions/fcache-resolve \
         "usr/lib/$multiarch/libfcachectl.so.0" "usr/lib/$multiarch/libfcachectl.so" \
         "usr/lib/$multiarch/pkgconfig/fcachectl.pc" usr/include/fcachectl.h \
         "usr/src/fcache-$upstream/dkms.conf" "usr/src/fcache-$upstream/Kbuild" \
         "usr/src/fcache-$upstream/uapi/fcache_netlink.h"; do
        [ -e "$R/$f" ] || { missing=1; echo "# /$f is not in any package"; }
done
check "every expected file is in a package" [ -z "${missing:-}" ]
check "no file under /usr/local" [ ! -e "$R/usr/local" ]
check "fcache owns the daemon side" sh -c "dpkg-deb -c '$(deb fcache)' | grep ' ./usr/sbin/fcached$' >/dev/null"
check "fcache-dkms owns modules-load.d (no module, no load attempt)" \
        sh -c "dpkg-deb -c '$(deb fcache-dkms all)' | grep ' ./usr/lib/modules-load.d/fcache.conf$' >/dev/null"
check "dkms.conf carries the version" grep -qx "PACKAGE_VERSION=\"$upstream\"" "$R/usr/src/fcache-$upstream/dkms.conf"
check "the activation file starts fcached's alias" \
        grep -qx 'SystemdService=dbus-org.fcache.Manager1.service' "$R/usr/share/dbus-1/system-services/org.fcache.Manager1.service"
check "the activation file's Exec= is in the package" \
        sh -c "test -x '$R'\$(sed -n 's/^Exec=//p' '$R/usr/share/dbus-1/system-services/org.fcache.Manager1.service')"
check "the unit has the alias and is ordered after remote-fs.target" \
        sh -c "grep -qx 'Alias=dbus-org.fcache.Manager1.service' '$R/$unitdir/fcached.service' &&
               grep -qx 'After=remote-fs.target' '$R/$unitdir/fcached.service'"
if command -v systemd-analyze >/dev/null; then
        # As installed, its ExecStart= pointed into the scratch root.
        sed "s|^ExecStart=|ExecStart=$R|" "$R/$unitdir/fcached.service" >"$T/fcached.service"
        # verify loads every installed unit and warns about any of them (another
        # package's KillMode=none, say): only what it says of ours counts
        out=$(systemd-analyze verify --man=no "$T/fcached.service" 2>&1 | grep -F fcached)
        [ -z "$out" ] && ok "systemd-analyze verify: the unit as installed" ||
                { not_ok "systemd-analyze verify"; echo "$out" | sed 's/^/# /'; }
fi
if command -v xmllint >/dev/null && [ -e /usr/share/polkit-1/policyconfig-1.dtd ]; then
        check "the installed polkit actions are valid" \
                xmllint --noout --dtdvalid /usr/share/polkit-1/policyconfig-1.dtd "$R/usr/share/polkit-1/actions/org.fcache.policy"
fi

# Maintainer scripts.
ctl() { rm -rf "$T/ctl"; dpkg-deb -e "$1" "$T/ctl"; }
ctl "$(deb fcache)"
check "postinst enables and starts fcached (the alias comes with enable)" \
        sh -c "grep -q \"deb-systemd-helper enable 'fcached.service'\" '$T/ctl/postinst' &&
               grep -q '_dh_action=start' '$T/ctl/postinst' &&
               grep -q \"deb-systemd-invoke \\\$_dh_action 'fcached.service'\" '$T/ctl/postinst'"
check "postinst creates /var/lib/fcache (tmpfiles)" grep -q 'systemd-tmpfiles .*--create fcache.conf' "$T/ctl/postinst"
check "fcache's scripts do not run dkms" sh -c "! grep -q dkms '$T/ctl/postinst'"
check "prerm stops fcached, then the views' holders" \
        sh -c "grep -q 'deb-systemd-invoke stop.*fcached.service' '$T/ctl/prerm' && grep -q 'kill -TERM' '$T/ctl/prerm'"
check "prerm is valid sh" sh -n "$T/ctl/prerm"
# The prerm's own part on a real view: the packaged fcache-view serving a scratch
# volume is stopped and unmounted. The prerm acts on every fcache view of the
# system, so it runs in its own mount and PID namespaces: the host's views (other
# tests') are neither signalled nor unmounted. DPKG_ROOT keeps debhelper's part from
# stopping a host's fcached.
if [ "$(id -u)" = 0 ] && [ -c /dev/fuse ] && command -v unshare >/dev/null; then
        v=$T/vol; mkdir -p "$v/backing" "$v/mnt" "$v/cache"; echo hello >"$v/backing/f"
        sed "s|^view=.*|view=$R/usr/libexec/fcache/fcache-view|" "$T/ctl/prerm" >"$T/prerm"
        cat >"$T/prerm-test.sh" <<'SH'
set -u
v=$1 view=$2 prerm=$3
"$view" --backing "$v/backing" --mountpoint "$v/mnt" --cache-dir "$v/cache" --name pkgtest \
        >"$v/view.log" 2>&1 &
for _ in $(seq 100); do [ "$(cat "$v/mnt/f" 2>/dev/null)" = hello ] && break; sleep 0.1; done
[ "$(cat "$v/mnt/f" 2>/dev/null)" = hello ] || { echo "the view does not serve"; cat "$v/view.log"; exit 1; }
DPKG_ROOT=/nonexistent sh "$prerm" remove 2>&1
wait
if grep -q " $v/mnt " /proc/self/mountinfo; then echo "still mounted"; exit 1; fi
for exe in /proc/[0-9]*/exe; do
        [ "$(readlink "$exe" 2>/dev/null)" = "$view" ] && { echo "a view process is left"; exit 1; }
done
exit 0
SH
        if out=$(unshare --mount --propagation private --pid --fork --mount-proc \
                        bash "$T/prerm-test.sh" "$v" "$R/usr/libexec/fcache/fcache-view" "$T/prerm" 2>&1); then
                ok "prerm remove stops a running view (its holder and worker) and unmounts it"
        else
                not_ok "prerm remove stops a running view"
        fi
        echo "$out" | sed 's/^/# prerm-test: /'
else
        echo "ok $((n += 1)) - prerm stops views # SKIP needs root, /dev/fuse and unshare"
fi
ctl "$(deb fcache-dkms all)"
check "fcache-dkms's postinst builds the module with dkms" grep -q 'dkms' "$T/ctl/postinst"
ctl "$(deb libfcachectl0)"
check "libfcachectl0 has shlibs and symbols" sh -c "[ -s '$T/ctl/shlibs' ] && [ -s '$T/ctl/symbols' ]"

# DKMS builds the module from the package's source tree, in a private tree.
kdir=$("$top/kmod/find-kdir.sh" 2>/dev/null)
if [ -n "$kdir" ] && command -v dkms >/dev/null; then
        kver=$(basename "$(dirname "$kdir")")
        d=(--sourcetree "$R/usr/src" --dkmstree "$T/dkms" --installtree "$T/modules")
        mkdir -p "$T/dkms" "$T/modules"
        if nice dkms add -m fcache -v "$upstream" "${d[@]}" >"$T/dkms.log" 2>&1 &&
           nice dkms build -m fcache -v "$upstream" -k "$kver" "${d[@]}" >>"$T/dkms.log" 2>&1 &&
           [ -n "$(find "$T/dkms/fcache/$upstream/$kver" -name 'fcache.ko*' | head -1)" ]; then
                ok "dkms builds fcache.ko for $kver from /usr/src/fcache-$upstream"
        else
                not_ok "dkms build for $kver"; tail -20 "$T/dkms.log" | sed 's/^/# /'
        fi
else
        echo "ok $((n += 1)) - dkms build # SKIP no kernel headers (linux-headers-amd64) or no dkms"
fi

# A default meson setup (prefix /usr/local) installs the daemons' files where they read them.
if (cd "$top" && meson setup "$T/build-local" -Dkmod=disabled >"$T/meson.log" 2>&1); then
        installed=$(meson introspect "$T/build-local" --installed)
        for f in /usr/share/dbus-1/system.d/org.fcache.Manager1.conf \
                 /usr/share/dbus-1/system-services/org.fcache.Manager1.service \
                 /usr/share/polkit-1/actions/org.fcache.policy \
                 "$unitdir/fcached.service" /usr/lib/tmpfiles.d/fcache.conf \
                 /usr/lib/modules-load.d/fcache.conf; do
                grep -q "\"$f\"" <<<"$installed" || not_ok "prefix /usr/local: $f"
        done
        ok "prefix /usr/local: bus policy, activation, polkit, unit, tmpfiles, modules-load where read"
        grep -q '"/usr/local/sbin/fcached"' <<<"$installed" && ok "prefix /usr/local: programs under the prefix" ||
                not_ok "prefix /usr/local: programs"
else
        not_ok "meson setup --prefix=/usr/local"; tail -20 "$T/meson.log" | sed 's/^/# /'
fi

echo "1..$n"
[ "$failures" -eq 0 ]
