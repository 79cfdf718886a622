#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# agent.sh: fcache-agent as a user in its session (a private session bus with
# dbusmock's notification daemon) against fcached on the private system bus
# with two real volumes, one the user may read and one it may not: a
# notification when the readable volume goes offline (and why) and comes
# back (reintegration ended, conflicts), one per conflict on a file the user
# may read (none for the others, none for the other volume), and the
# notification's actions settle the conflict through its object.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"
[ -x "${FCACHECTL:-}" ] || skip_all "FCACHECTL is not set to the fcachectl binary"
[ -x "${FCACHE_AGENT:-}" ] || skip_all "FCACHE_AGENT is not set to the fcache-agent binary"
/usr/bin/python3 -c 'import dbusmock' 2>/dev/null || skip_all "python3-dbusmock is not installed"

V=$T/volumes.d
mkdir -p "$V" "$T/srv/proj" "$T/mnt" "$T/srv2" "$T/mnt2"
chmod 755 "$T/srv" "$T/srv/proj"
chmod 700 "$T/srv2"
for f in doc doc2; do printf 'one\ntwo\nthree\n' > "$T/srv/proj/$f"; done
chmod 666 "$T/srv/proj/"*
mkdir -m 700 "$T/srv/proj/private"
printf 'secret base\n' > "$T/srv/proj/private/secret"
echo hidden > "$T/srv2/file"
volume_conf lap
volume_conf hid 2

wait_line() { for _ in $(seq 150); do grep -qE -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# notify_id PATTERN: the id the mock gave the notification whose Notify call matches PATTERN
# (it counts from 1 and the agent never replaces one).
notify_id() { grep ' Notify ' "$T/sess/notify.log" | grep -n -- "$1" | head -1 | cut -d: -f1; }
state_of() { "$FCACHECTL" query state "$1" 2>/dev/null | sed -n 's/^state[=: ]*//p' | head -1; }
wait_state_of() { for _ in $(seq 100); do [ "$(state_of "$1")" = "$2" ] && return 0; sleep 0.1; done; return 1; }

start_bus || exit 1
/usr/bin/python3 -m dbusmock --system --template networkmanager >"$T/nm.log" 2>&1 & PIDS+=($!)
wait_name org.freedesktop.NetworkManager || { diag < "$T/nm.log"; exit 1; }
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "volume lap is mounted" wait_mounted "$T/mnt" "$T/cache"
check "volume hid is mounted" wait_mounted "$T/mnt2" "$T/cache2"
check "the view answers query state" wait_state online
check "pin recursive on lap" "$FCACHECTL" pin recursive "$T/mnt/proj"
check "pin recursive on hid" "$FCACHECTL" pin recursive "$T/mnt2"
make_user user fcagent

# The user's session: its own bus, the notification daemon, the agent.
mkdir -m 777 "$T/sess"
SESSION="unix:path=$T/sess/bus"
# Not through a shell function in the background: $! must be the process itself (setpriv and
# env exec it), or killing it would leave the program running.
ases() { setpriv --reuid="$user" --regid="$user" --init-groups env DBUS_SESSION_BUS_ADDRESS="$SESSION" "$@"; }
setpriv --reuid="$user" --regid="$user" --init-groups dbus-daemon --session --nofork --nopidfile \
        --address="$SESSION" >/dev/null 2>"$T/sess/bus.log" & PIDS+=($!)
for _ in $(seq 100); do [ -S "$T/sess/bus" ] && break; sleep 0.05; done
setpriv --reuid="$user" --regid="$user" --init-groups env DBUS_SESSION_BUS_ADDRESS="$SESSION" \
        /usr/bin/python3 -m dbusmock --session --template notification_daemon -l "$T/sess/notify.log" \
        >"$T/sess/mock.log" 2>&1 & PIDS+=($!)
for _ in $(seq 100); do
        ases gdbus call --session --dest org.freedesktop.Notifications --object-path \
                /org/freedesktop/Notifications --method org.freedesktop.Notifications.GetServerInformation \
                >/dev/null 2>&1 && break
        sleep 0.1
done
setpriv --reuid="$user" --regid="$user" --init-groups env DBUS_SESSION_BUS_ADDRESS="$SESSION" \
        "$FCACHE_AGENT" >/dev/null 2>"$T/sess/agent.log" & PIDS+=($!)
check "the agent follows the one volume the user may read" wait_line "$T/sess/agent.log" "Following 1 volume and 0 conflicts"

# Offline: hid first (the user must hear nothing of it), then lap.
check "disconnect hid" "$FCACHECTL" disconnect "$T/mnt2"
check "hid is offline" wait_state_of "$T/mnt2" offline
check "disconnect lap" "$FCACHECTL" disconnect "$T/mnt/proj"
check "a notification: lap is offline" wait_line "$T/sess/notify.log" ' Notify .*"lap is offline"'
expect "it says why: by hand" "$(grep ' Notify .*lap is offline' "$T/sess/notify.log" | grep -c 'by hand')" = 1
expect "nothing about hid" "$(grep -c 'hid' "$T/sess/notify.log")" = 0

# Offline edits that collide with the server's, then back online.
for f in doc doc2; do printf 'one\nLOCAL %s\nthree\n' $f > "$T/mnt/proj/$f"; done
printf 'secret local\n' > "$T/mnt/proj/private/secret"
for f in doc doc2; do printf 'one\nREMOTE %s\nthree\n' $f > "$T/srv/proj/$f"; done
printf 'secret remote\n' > "$T/srv/proj/private/secret"
check "reconnect lap" "$FCACHECTL" reconnect "$T/mnt/proj"
check "a notification: lap is back online" wait_line "$T/sess/notify.log" ' Notify .*"lap is back online"'
expect "it says the reintegration ended" \
        "$(grep ' Notify .*lap is back online' "$T/sess/notify.log" | grep -c 'Reintegration ended')" = 1
check "a notification for doc's conflict" wait_line "$T/sess/notify.log" " Notify .*Conflict in $T/mnt/proj/doc\""
check "and for doc2's" wait_line "$T/sess/notify.log" " Notify .*Conflict in $T/mnt/proj/doc2\""
expect "with the actions" \
        "$(grep " Notify .*Conflict in $T/mnt/proj/doc\"" "$T/sess/notify.log" | grep -c "Take mine.*Take the server's.*Keep both")" = 1
expect "none for the file in a directory the user may not enter" "$(grep -c secret "$T/sess/notify.log")" = 0
grep ' Notify ' "$T/sess/notify.log" | cut -c1-200 | diag

# The actions settle through the conflict objects (polkit org.fcache.resolve for the user).
cat > "$T/polkit/rules.d/50-fcache-agent.rules" <<RULE
polkit.addRule(function(action, subject) {
    if (action.id == "org.fcache.resolve" && subject.user == "$user")
        return polkit.Result.YES;
});
RULE
chmod 644 "$T/polkit/rules.d/50-fcache-agent.rules"
invoke() {
        ases gdbus call --session --dest org.freedesktop.Notifications --object-path \
                /org/freedesktop/Notifications --method org.freedesktop.DBus.Mock.EmitSignal \
                org.freedesktop.Notifications ActionInvoked us "[<uint32 $1>, <'$2'>]"
}
# polkitd picks the rule up by itself: wait until it answers the user yes (a path with
# no conflict then gets past polkit to NoSuchPath).
for _ in $(seq 100); do
        as "$user" busctl --system call "$BUS" "$OBJ" org.fcache.Manager1 ResolveConflict ss \
                "$T/mnt/proj/nothing" local 2>&1 | grep -q "Not authorized" || break
        sleep 0.1
done
id=$(notify_id "Conflict in $T/mnt/proj/doc\"")
check "Take mine" invoke "$id" local
check "Take mine: settled" wait_line "$T/sess/notify.log" " Notify .*\"Conflict settled\".*doc: your version kept"
expect "the file is the local version" "$(cat "$T/mnt/proj/doc")" = "$(printf 'one\nLOCAL doc\nthree')"
check "its notification is closed" wait_line "$T/sess/notify.log" "CloseNotification $id\$"
id2=$(notify_id "Conflict in $T/mnt/proj/doc2\"")
check "Keep both" invoke "$id2" both
check "Keep both: settled, both kept" wait_line "$T/sess/notify.log" " Notify .*\"Conflict settled\".*doc2: both kept"
expect "doc2 is the server's version" "$(cat "$T/mnt/proj/doc2")" = "$(printf 'one\nREMOTE doc2\nthree')"
grep -E ' (Notify|CloseNotification) ' "$T/sess/notify.log" | sed -n '5,$p' | cut -c1-200 | diag
expect "nothing was ever said about hid" "$(grep -c 'hid' "$T/sess/notify.log")" = 0
check "fcached is alive" fcached_alive
if stop_fcached; then ok "fcached stops cleanly"
else not_ok "fcached stops cleanly"; grep -B2 -A40 -E "ERROR|runtime error" "$T/fcached.log" | head -80 | diag; fi
finish
