#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# offline.sh: fcached follows NetworkManager (python3-dbusmock's template, the
# only stand-in) for a volume: NetworkManager going to DISCONNECTED takes the
# volume offline (its pinned subtree keeps working, edits are logged), back to
# CONNECTED_GLOBAL reintegrates them; VolumeStateChanged and VolumeStates follow
# on the bus, fcachectl shows the state; a manual disconnect is sticky across
# NetworkManager changes until a manual reconnect; a reconnect that would
# delete the pinned copy the server lost is refused until --force.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"
[ -x "${FCACHECTL:-}" ] || skip_all "FCACHECTL is not set to the fcachectl binary"
/usr/bin/python3 -c 'import dbusmock' 2>/dev/null || skip_all "python3-dbusmock is not installed"

V=$T/volumes.d
mkdir -p "$V" "$T/srv/proj/sub" "$T/mnt"
chmod 755 "$T/srv" "$T/srv/proj" "$T/srv/proj/sub"
echo "version 1" > "$T/srv/proj/doc"
seq 1 1000 > "$T/srv/proj/sub/notes"
volume_conf lap

nm_state() {
        gdbus call --system --dest org.freedesktop.NetworkManager --object-path /org/freedesktop/NetworkManager \
                --method org.freedesktop.DBus.Mock.SetGlobalConnectionState "$1" >/dev/null
}
# The volume's state as fcachectl reports it.

start_bus || exit 1
/usr/bin/python3 -m dbusmock --system --template networkmanager >"$T/nm.log" 2>&1 & PIDS+=($!)
wait_name org.freedesktop.NetworkManager || { diag < "$T/nm.log"; exit 1; }
gdbus monitor --system --dest "$BUS" > "$T/monitor.log" 2>&1 & PIDS+=($!)
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "the volume is mounted by fcached" wait_mounted "$T/mnt" "$T/cache"
check "pin recursive on the volume" "$FCACHECTL" pin recursive "$T/mnt/proj"
expect "fcachectl query state: online with NetworkManager connected" "$(vol_state)" = online

nm_state 20
check "NetworkManager DISCONNECTED takes the volume offline" wait_state offline
props=$(busctl get-property "$BUS" "$OBJ" org.fcache.Manager1 VolumeStates 2>&1)
expect "VolumeStates says offline" "$(echo "$props" | grep -c '"lap" "offline"')" -ge 1
expect "offline: the pinned file still reads" "$(cat "$T/mnt/proj/doc")" = "version 1"
echo "edited offline" > "$T/mnt/proj/doc"
seq 1 5 > "$T/mnt/proj/sub/new"
expect "offline: the edit reads back" "$(cat "$T/mnt/proj/doc")" = "edited offline"
expect "offline: the server is not touched" "$(cat "$T/srv/proj/doc")" = "version 1"
out=$("$FCACHECTL" query reintegration "$T/mnt/proj" 2>&1)
expect "query reintegration through fcached lists the pending records" \
        "$(echo "$out" | grep -c 'outcome=apply')" -ge 2

nm_state 70
check "NetworkManager CONNECTED_GLOBAL brings it back online" wait_state online
expect "after reintegration the server has the offline edit" "$(cat "$T/srv/proj/doc")" = "edited offline"
expect "and the file created offline" "$(cat "$T/srv/proj/sub/new" 2>&1)" = "$(seq 1 5)"
sleep 0.5
expect "VolumeStateChanged: offline because of the network" \
        "$(grep -c "VolumeStateChanged ('lap', 'offline', 'network')" "$T/monitor.log")" -ge 1
expect "VolumeStateChanged: reintegrating" \
        "$(grep -c "VolumeStateChanged ('lap', 'reintegrating'" "$T/monitor.log")" -ge 1
expect "VolumeStateChanged: online after reintegration" \
        "$(grep -c "VolumeStateChanged ('lap', 'online', 'reintegrated')" "$T/monitor.log")" -ge 1

# A manual disconnect holds while the network comes and goes.
check "fcachectl disconnect on the volume" "$FCACHECTL" disconnect "$T/mnt/proj"
expect "manual disconnect: offline" "$(vol_state)" = offline
nm_state 20; sleep 0.5; nm_state 70; sleep 1
expect "a manual disconnect is not undone by NetworkManager" "$(vol_state)" = offline
echo "second edit" > "$T/mnt/proj/doc"
check "fcachectl reconnect on the volume" "$FCACHECTL" reconnect "$T/mnt/proj"
check "manual reconnect: online" wait_state online
expect "the second edit reached the server" "$(cat "$T/srv/proj/doc")" = "second edit"
check_fails "an unprivileged user may not disconnect (polkit org.fcache.connection)" \
        "Not authorized for org.fcache.connection" \
        setpriv --reuid=65534 --regid=65534 --clear-groups "$FCACHECTL" disconnect "$T/mnt/proj"
expect "and the volume stays online" "$(vol_state)" = online

# The server's side of the pinned tree lost while offline (an export emptied
# on the same filesystem): the reconnect asks first; --force goes through.
check "fcachectl disconnect again" "$FCACHECTL" disconnect "$T/mnt/proj"
rm -rf "$T/srv/proj"
check_fails "reconnect refuses to delete the pinned copy the server lost" "would delete [0-9]+ of" \
        "$FCACHECTL" reconnect "$T/mnt/proj"
expect "refused: the volume stays offline" "$(vol_state)" = offline
expect "refused: the pinned copy still reads" "$(cat "$T/mnt/proj/doc")" = "second edit"
check "fcachectl reconnect --force" "$FCACHECTL" reconnect --force "$T/mnt/proj"
mnt_state() { "$FCACHECTL" query state "$T/mnt" 2>/dev/null | sed -n 's/^state[=: ]*//p' | head -1; }
for _ in $(seq 600); do [ "$(mnt_state)" = online ] && break; sleep 0.1; done
expect "forced: online" "$(mnt_state)" = online
[ "$(mnt_state)" = online ] || { "$FCACHECTL" query state "$T/mnt" 2>&1; tail -40 "$T/fcached.log"; } | diag
expect "forced: the tree the server lost is gone from the volume" "$(ls -A "$T/mnt")" = ""

stop_fcached
finish
