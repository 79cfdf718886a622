#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# units.sh: the unit and the tmpfiles entry are valid: `systemd-analyze verify` of
# fcached.service prints nothing (man pages are not installed here: --man=no),
# `systemd-analyze security --offline` rates it, and systemd-tmpfiles creates the
# state directory in a scratch root. The activation file names the bus name.
set -u
n=0; failures=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); failures=$((failures + 1)); echo "not ok $n - $*"; }
for prog in systemd-analyze systemd-tmpfiles; do
        command -v $prog >/dev/null || { echo "1..0 # SKIP $prog is not installed"; exit 77; }
done
SRCDIR=${SRCDIR:?}; FCACHED=${FCACHED:?}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
sed "s|@sbindir@/fcached|$FCACHED|" "$SRCDIR/units/fcached.service.in" > "$T/fcached.service"
# verify loads every installed unit and warns about any of them (another
# package's KillMode=none, say): only what it says of ours counts
out=$(systemd-analyze verify --man=no "$T/fcached.service" 2>&1 | grep -F fcached)
if [ -z "$out" ]; then ok "systemd-analyze verify fcached.service prints nothing"
else not_ok "systemd-analyze verify fcached.service"; echo "$out" | sed 's/^/# /'; fi
out=$(systemd-analyze security --offline=yes "$T/fcached.service" 2>&1 | tail -1)
echo "# $out"
case $out in *"exposure level"*) ok "systemd-analyze security rates it" ;; *) not_ok "systemd-analyze security" ;; esac
grep -q '^BusName=org.fcache.Manager1$' "$T/fcached.service" && ok "Type=dbus with BusName=" || not_ok "BusName="
if [ "$(id -u)" = 0 ]; then
        systemd-tmpfiles --create --root="$T/root" "$SRCDIR/units/tmpfiles.d/fcache.conf" 2>"$T/tmpfiles.err"
        if [ "$(stat -c %a "$T/root/var/lib/fcache" 2>/dev/null)" = 700 ]; then ok "tmpfiles.d makes /var/lib/fcache 0700"
        else not_ok "tmpfiles.d"; sed 's/^/# /' "$T/tmpfiles.err"; fi
fi
svc="$SRCDIR/dbus/org.fcache.Manager1.service.in"
grep -q '^Name=org.fcache.Manager1$' "$svc" && grep -q '^SystemdService=dbus-org.fcache.Manager1.service$' "$svc" \
        && grep -q '^Alias=dbus-org.fcache.Manager1.service$' "$T/fcached.service" \
        && ok "the activation file and the unit's alias agree" || not_ok "activation file"
if command -v xmllint >/dev/null; then
        xmllint --noout --dtdvalid /usr/share/polkit-1/policyconfig-1.dtd "$SRCDIR/dbus/org.fcache.policy" 2>&1 \
                && ok "org.fcache.policy is valid against polkit's DTD" || not_ok "org.fcache.policy DTD"
fi
echo "1..$n"
[ "$failures" -eq 0 ]
