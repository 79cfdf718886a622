#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# hostile.sh: a hostile local user against a volume (private bus, real
# polkitd, an unprivileged user). File names that hold LF, TAB, CR, ESC and
# other control bytes, or 255-byte components, go through every Manager1
# method that takes a path: the volume stays online and root's pins stay.
# Then the user swaps its own directory with a symlink to a root-only
# directory (RENAME_EXCHANGE in a loop) while calling Query, Pin, Flush,
# Unpin, SetCacheable, ListConflicts, GetConflictVersion and
# ResolveConflict on a path through it: no answer is about root's object and
# nothing is done to it (root's pins, cache state and conflict are checked
# after).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"
[ -x "${FCACHECTL:-}" ] || skip_all "FCACHECTL is not set to the fcachectl binary"
/usr/bin/python3 -c 'from gi.repository import Gio' 2>/dev/null || skip_all "python3-gi is not installed"
HOSTILE=(/usr/bin/python3 "$SRCDIR/tests/dbus/hostile.py")
ROUNDS=${FCACHE_HOSTILE_ROUNDS:-150}

grp=fch$$
make_user u1 fchu "$grp"
V=$T/volumes.d
mkdir -p "$V" "$T/srv/u/d" "$T/mnt"
chmod 755 "$T/srv"
mkdir -m 700 "$T/srv/private"
echo "root's secret" > "$T/srv/private/secret"
echo "the user's own" > "$T/srv/u/d/secret"
ln -s ../private "$T/srv/u/link"
chown -R "$u1:$u1" "$T/srv/u"
chown -h "$u1:$u1" "$T/srv/u/link"
volume_conf h

start_bus || exit 1
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "the volume is mounted by fcached" wait_mounted "$T/mnt" "$T/cache"
vol_state() { "$FCACHECTL" query state "$T/mnt" 2>/dev/null | sed -n 's/^state[=: ]*//p' | head -1; }
check "the view answers query state" wait_state online
check "root pins its private directory" "$FCACHECTL" pin recursive "$T/mnt/private"
check "root pins the user's tree" "$FCACHECTL" pin recursive "$T/mnt/u"

# A conflict on root's secret: edited offline and on the server.
check "disconnect" "$FCACHECTL" disconnect "$T/mnt"
check "offline" wait_state offline
echo "root's secret, edited offline" > "$T/mnt/private/secret"
echo "root's secret, edited on the server" > "$T/srv/private/secret"
check "reconnect" "$FCACHECTL" reconnect "$T/mnt"
check "online again" wait_state online
conflicts() { busctl --system call "$BUS" "$OBJ" org.fcache.Manager1 ListConflicts s "$T/mnt/private"; }
out=$(conflicts 2>&1)
expect "root's secret is in conflict" "$(echo "$out" | grep -c "private/secret")" = 1
secret_ino=$(stat -c %i "$T/mnt/private/secret")
pins_before=$("$FCACHECTL" query pinned "$T/mnt" 2>&1 | grep -c 'private')

# root's view of its own object, to compare after.
root_view() {
        "$FCACHECTL" query cached "$T/mnt/private/secret" 2>&1 | grep -E '^(cacheable|pinned|cached)[=: ]'
}
before=$(root_view)
secret_before=$(cat "$T/mnt/private/secret")

# polkit lets the user do everything: only the caller's own access to files stands
# between it and root's objects.
cat > "$T/polkit/rules.d/50-fcache-hostile.rules" <<RULE
polkit.addRule(function(action, subject) {
    if (action.id.indexOf("org.fcache.") == 0 && subject.isInGroup("$grp"))
        return polkit.Result.YES;
});
RULE
chmod 644 "$T/polkit/rules.d/50-fcache-hostile.rules"
for _ in $(seq 50); do
        as "$u1" busctl --system call $BUS $OBJ org.fcache.Manager1 Flush ss "$T/mnt/u/d/secret" "" >/dev/null 2>&1 && break
        sleep 0.2
done

# 1. Names that used to start another request.
out=$(as "$u1" "${HOSTILE[@]}" names "$T/mnt/u" 2>&1)
echo "$out" | diag
expect "every hostile name reached every method" "$(echo "$out" | grep -c '^[A-Za-z]* ')" -ge 90
expect "polkit let the user through" "$(echo "$out" | grep -c 'NotAuthorized')" = 0
expect "the volume is still online" "$(vol_state)" = online
expect "root's pins are all there" "$("$FCACHECTL" query pinned "$T/mnt" 2>&1 | grep -c 'private')" = "$pins_before"
out=$("$FCACHECTL" query pinned "$T/mnt" 2>&1)
expect "no pin named by a hostile name's tail" "$(echo "$out" | grep -c 'recursive')" = 0
check "root's conflict is still there after the names" sh -c "busctl --system call $BUS $OBJ org.fcache.Manager1 ListConflicts s $T/mnt/private | grep -q private/secret"

# 2. The check-then-use race.
out=$(as "$u1" "${HOSTILE[@]}" race "$T/mnt/u" "$secret_ino" "$ROUNDS" 2>&1)
echo "$out" | grep -v '^calls=' | head -20 | diag
expect "the race ran" "$(echo "$out" | sed -n 's/^calls=\([0-9]*\).*/\1/p')" -ge "$ROUNDS"
expect "no answer about root's object" "$(echo "$out" | sed -n 's/.*answers_about_root=\([0-9]*\).*/\1/p')" = 0
expect "the volume is still online after the race" "$(vol_state)" = online
expect "root's cache state of its secret is unchanged" "$(root_view)" = "$before"
out=$("$FCACHECTL" query pinned "$T/mnt" 2>&1)
expect "root's pins are all there after the race" "$(echo "$out" | grep -c 'private')" = "$pins_before"
check "root's conflict is still there after the race" sh -c "busctl --system call $BUS $OBJ org.fcache.Manager1 ListConflicts s $T/mnt/private | grep -q private/secret"
expect "root's secret holds what it held" "$(cat "$T/mnt/private/secret")" = "$secret_before"
check "fcached is alive" fcached_alive
[ "$failures" -gt 0 ] && tail -40 "$T/fcached.log" | diag
finish
