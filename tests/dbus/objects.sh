#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# objects.sh: the object manager at /org/fcache with a Volume1 object per volume
# and a Conflict1 object per conflict, on two real volumes (FUSE views, private
# bus, polkitd, dbusmock NetworkManager): root sees both volumes, a user only
# the one whose mountpoint it may read; the user's watcher gets
# PropertiesChanged for a disconnect and a reconnect, InterfacesAdded for the
# conflict it may read (and nothing for the one it may not) and
# InterfacesRemoved when it is settled; the objects' methods are Manager1's.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"
[ -x "${FCACHECTL:-}" ] || skip_all "FCACHECTL is not set to the fcachectl binary"
/usr/bin/python3 -c 'import dbusmock' 2>/dev/null || skip_all "python3-dbusmock is not installed"
/usr/bin/python3 -c 'from gi.repository import Gio' 2>/dev/null || skip_all "python3-gi is not installed"
OBJS=(/usr/bin/python3 "$SRCDIR/tests/dbus/objects.py")
VLAP=/org/fcache/volume/lap
VHID=/org/fcache/volume/hid

V=$T/volumes.d
mkdir -p "$V" "$T/srv/proj" "$T/mnt" "$T/srv2" "$T/mnt2"
chmod 755 "$T/srv" "$T/srv/proj"
chmod 700 "$T/srv2"
for f in doc other; do printf 'one\ntwo\nthree\n' > "$T/srv/proj/$f"; done
chmod 644 "$T/srv/proj/"*
mkdir -m 700 "$T/srv/proj/private"
printf 'secret base\n' > "$T/srv/proj/private/secret"
echo hidden > "$T/srv2/file"
volume_conf lap
volume_conf hid 2

# wait_line FILE PATTERN: FILE gets a line matching PATTERN (signals arrive asynchronously).
wait_line() { for _ in $(seq 150); do grep -qE -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# prop_of LISTING PATH PROP: a property's value in an "objects.py list" output.
prop_of() { echo "$1" | sed -n "s|^$2 $3=||p"; }
vcall() { busctl --system call "$BUS" "$1" "$2" "${@:3}"; }

start_bus || exit 1
/usr/bin/python3 -m dbusmock --system --template networkmanager >"$T/nm.log" 2>&1 & PIDS+=($!)
wait_name org.freedesktop.NetworkManager || { diag < "$T/nm.log"; exit 1; }
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "volume lap is mounted" wait_mounted "$T/mnt" "$T/cache"
check "volume hid is mounted" wait_mounted "$T/mnt2" "$T/cache2"
check "the view answers query state" wait_state online
make_user user fcobj

# GetManagedObjects: everyone may ask; each sees what it may read.
out=$("${OBJS[@]}" list 2>&1)
echo "$out" | grep -v = | diag
expect "root sees the manager" "$(echo "$out" | grep -c "^/org/fcache/Manager1 org.fcache.Manager1$")" = 1
expect "root sees both volumes" "$(echo "$out" | grep -c "^/org/fcache/volume/[a-z]* org.fcache.Volume1$")" = 2
expect "Volume1.Mountpoint" "$(prop_of "$out" $VLAP Mountpoint)" = "$T/mnt"
expect "Volume1.Backing" "$(prop_of "$out" $VLAP Backing)" = "$T/srv"
expect "Volume1.State" "$(prop_of "$out" $VLAP State)" = online
expect "Volume1.CacheSize is the volume's CacheSize=64M" "$(prop_of "$out" $VLAP CacheSize)" = 67108864
expect "Volume1.Metered" "$(prop_of "$out" $VLAP Metered)" = False
uout=$(as "$user" "${OBJS[@]}" list 2>&1)
echo "$uout" | grep -v = | diag
expect "the user sees the manager" "$(echo "$uout" | grep -c "^/org/fcache/Manager1 org.fcache.Manager1$")" = 1
expect "the user sees the volume it may read" "$(echo "$uout" | grep -c "^$VLAP org.fcache.Volume1$")" = 1
expect "but not the one whose mountpoint it may not read" "$(echo "$uout" | grep -c "$VHID")" = 0
check_fails "its properties answer UnknownObject to the user" "UnknownObject|No such object" \
        as "$user" busctl --system get-property "$BUS" $VHID org.fcache.Volume1 Mountpoint
check_fails "and so do its methods" "UnknownObject|No such object" \
        as "$user" busctl --system call "$BUS" $VHID org.fcache.Volume1 QueryReintegration
expect "root reads them" "$(busctl --system get-property "$BUS" $VHID org.fcache.Volume1 Mountpoint)" \
        = "s \"$T/mnt2\""
check "a user's Properties.GetAll on the volume it may read" \
        as "$user" busctl --system call "$BUS" $VLAP org.freedesktop.DBus.Properties GetAll s org.fcache.Volume1
check_fails "properties are read-only" "read-only|not writable" \
        busctl --system call "$BUS" $VLAP org.freedesktop.DBus.Properties Set ssv org.fcache.Volume1 State s offline

# The user's watcher follows the volume it may see.
: > "$T/watch.log"; chmod 666 "$T/watch.log"
setpriv --reuid="$user" --regid="$user" --init-groups "${OBJS[@]}" watch "$T/watch.log" \
        >/dev/null 2>"$T/watch.err" & PIDS+=($!)
check "the watcher is ready" wait_line "$T/watch.log" '^ready$'
: > "$T/rwatch.log"
"${OBJS[@]}" watch "$T/rwatch.log" 2>"$T/rwatch.err" & PIDS+=($!)
check "root's watcher is ready" wait_line "$T/rwatch.log" '^ready$'

check "pin through Volume1.Pin (an operation)" vcall $VLAP org.fcache.Volume1 Pin sbub proj true 0 false
check "Volume1.Pin refuses '..'" sh -c "! busctl --system call $BUS $VLAP org.fcache.Volume1 Pin sbub ../x true 0 false 2>&1 | grep -q ok"
check_fails "Volume1.Pin refuses a path that leaves the volume" "relative to the volume" \
        vcall $VLAP org.fcache.Volume1 Pin sbub ../etc true 0 false
for _ in $(seq 100); do [ "$("$FCACHECTL" query pinned "$T/mnt/proj/doc" 2>/dev/null | grep -c 'pinned=yes')" = 1 ] && break; sleep 0.1; done
check "Volume1.CachePinned follows the pin" wait_line "$T/watch.log" "^changed $VLAP CachePinned=[1-9]"

check_fails "the user may not disconnect (org.fcache.connection)" "Not authorized|NotAuthorized" \
        as "$user" busctl --system call "$BUS" $VLAP org.fcache.Volume1 Disconnect
check "Volume1.Disconnect as root" vcall $VLAP org.fcache.Volume1 Disconnect
check "the user's watcher sees State offline" wait_line "$T/watch.log" "^changed $VLAP State=offline$"
check "and why: manual" wait_line "$T/watch.log" "^changed $VLAP StateReason=manual$"
printf 'one\nLOCAL\nthree\n' > "$T/mnt/proj/doc"
printf 'secret local\n' > "$T/mnt/proj/private/secret"
printf 'one\nREMOTE\nthree\n' > "$T/srv/proj/doc"
printf 'secret remote\n' > "$T/srv/proj/private/secret"
check "Pending follows offline edits" wait_line "$T/watch.log" "^changed $VLAP Pending=[1-9]"
out=$(vcall $VLAP org.fcache.Volume1 QueryReintegration 2>&1)
expect "Volume1.QueryReintegration is the dry run (records)" "$(echo "$out" | grep -c 'records')" = 1
check "Volume1.Reconnect" vcall $VLAP org.fcache.Volume1 Reconnect
check "the watcher sees State online again" wait_line "$T/watch.log" "^changed $VLAP State=online$"
check "root's watcher sees two conflict objects" \
        sh -c "for i in \$(seq 150); do [ \$(grep -c '^added /org/fcache/conflict/lap/[0-9]* org.fcache.Conflict1\$' $T/rwatch.log) -ge 2 ] && exit 0; sleep 0.1; done; exit 1"
check "the user's watcher sees one" wait_line "$T/watch.log" "^added /org/fcache/conflict/lap/[0-9]+ org.fcache.Conflict1$"
check "Conflicts=2 on the volume" wait_line "$T/watch.log" "^changed $VLAP Conflicts=2$"
out=$("${OBJS[@]}" list 2>&1)
echo "$out" | grep conflict | diag
cdoc=$(echo "$out" | sed -n "s|^\(/org/fcache/conflict/lap/[0-9]*\) Path=$T/mnt/proj/doc\$|\1|p")
csec=$(echo "$out" | sed -n "s|^\(/org/fcache/conflict/lap/[0-9]*\) Path=$T/mnt/proj/private/secret\$|\1|p")
expect "the conflict on doc has an object" "${cdoc:+yes}" = yes
expect "the conflict on private/secret has one" "${csec:+yes}" = yes
expect "Conflict1.Kind" "$(prop_of "$out" "$cdoc" Kind)" = content
expect "Conflict1.Volume" "$(prop_of "$out" "$cdoc" Volume)" = lap
expect "the user was told of doc's only" "$(grep -c "^added /org/fcache/conflict" "$T/watch.log")" = 1
expect "that is doc's" "$(grep -c "^added $cdoc " "$T/watch.log")" = 1
uout=$(as "$user" "${OBJS[@]}" list 2>&1)
expect "the user's GetManagedObjects lists doc's conflict" "$(echo "$uout" | grep -c "^$cdoc Path=")" = 1
expect "and not the one it may not read" "$(echo "$uout" | grep -c "$csec")" = 0
check_fails "the hidden conflict's properties: UnknownObject" "UnknownObject|No such object" \
        as "$user" busctl --system get-property "$BUS" "$csec" org.fcache.Conflict1 Path
out=$(as "$user" "${OBJS[@]}" version "$csec" local 2>&1)
expect "its GetVersion: UnknownObject, no path in the answer" \
        "$(echo "$out" | grep -c "No such object")$(echo "$out" | grep -c secret)" = 10
check_fails "the user without a rule: NotAuthorized for org.fcache.resolve (Manager1's check)" \
        "Not authorized for org.fcache.resolve" as "$user" "${OBJS[@]}" version "$cdoc" local
expect "Conflict1.GetVersion local" "$("${OBJS[@]}" version "$cdoc" local)" = "$(printf 'one\nLOCAL\nthree')"
expect "Conflict1.GetVersion remote" "$("${OBJS[@]}" version "$cdoc" remote)" = "$(printf 'one\nREMOTE\nthree')"
check_fails "Conflict1.Resolve refuses an unknown choice" "Unknown choice" \
        vcall "$cdoc" org.fcache.Conflict1 Resolve s mine
check "Conflict1.Resolve local" vcall "$cdoc" org.fcache.Conflict1 Resolve s local
expect "the file is the local version" "$(cat "$T/mnt/proj/doc")" = "$(printf 'one\nLOCAL\nthree')"
check "the user's watcher sees the conflict go" wait_line "$T/watch.log" "^removed $cdoc$"
check "Conflicts=1 on the volume" wait_line "$T/watch.log" "^changed $VLAP Conflicts=1$"
check "Conflict1.ResolveMerged" "${OBJS[@]}" merged "$csec" "secret merged"
expect "the file holds the merged bytes" "$(cat "$T/srv/proj/private/secret")" = "secret merged"
check "root's watcher sees it go" wait_line "$T/rwatch.log" "^removed $csec$"
expect "the user was never told about it" "$(grep -c "$csec" "$T/watch.log")" = 0
expect "no conflict objects are left" "$("${OBJS[@]}" list | grep -c '^/org/fcache/conflict/.* org.fcache.Conflict1$')" = 0

# A volume removed takes its object with it.
check "RemoveVolume hid" call RemoveVolume s hid
check "root's watcher sees the volume go" wait_line "$T/rwatch.log" "^removed $VHID$"
expect "the user's watcher heard nothing of it" "$(grep -c "$VHID" "$T/watch.log")" = 0
check "fcached is alive" fcached_alive
if stop_fcached; then ok "fcached stops cleanly"
else not_ok "fcached stops cleanly"; grep -B2 -A40 -E "ERROR|runtime error" "$T/fcached.log" | head -80 | diag; fi
finish
