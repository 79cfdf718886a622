#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# conflicts.sh: the conflict objects of Manager1 on a real volume (FUSE view,
# private bus, polkitd, dbusmock NetworkManager, as offline.sh). A manual
# disconnect, edits through the mountpoint, colliding edits on the backing and
# a reconnect leave content conflicts and an edit/delete conflict; then
# ListConflicts, GetConflictVersion (a sealed memfd), ResolveConflict (local,
# both), ResolveConflictMerged (a file and a pipe), polkit and the caller's own
# access, bad words, and ConflictsChanged on the bus.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"
[ -x "${FCACHECTL:-}" ] || skip_all "FCACHECTL is not set to the fcachectl binary"
/usr/bin/python3 -c 'import dbusmock' 2>/dev/null || skip_all "python3-dbusmock is not installed"
/usr/bin/python3 -c 'from gi.repository import Gio' 2>/dev/null || skip_all "python3-gi is not installed"
FD=(/usr/bin/python3 "$SRCDIR/tests/dbus/conflict-fd.py")

V=$T/volumes.d
mkdir -p "$V" "$T/srv/proj" "$T/mnt"
chmod 755 "$T/srv" "$T/srv/proj"
for f in doc doc2 doc3 doc4 doc5 doc6; do printf 'one\ntwo\nthree\n' > "$T/srv/proj/$f"; done
echo "to be deleted on the server" > "$T/srv/proj/gone"
chmod 644 "$T/srv/proj/"*
mkdir -m 700 "$T/srv/proj/private"
echo "secret base" > "$T/srv/proj/private/secret"
volume_conf lap

# wait_monitor PATTERN: the monitor log shows PATTERN (signals arrive asynchronously).
wait_monitor() { for _ in $(seq 50); do grep -qF -- "$1" "$T/monitor.log" && return 0; sleep 0.1; done; return 1; }
list() { busctl --system call "$BUS" "$OBJ" org.fcache.Manager1 ListConflicts s "$1"; }

start_bus || exit 1
/usr/bin/python3 -m dbusmock --system --template networkmanager >"$T/nm.log" 2>&1 & PIDS+=($!)
wait_name org.freedesktop.NetworkManager || { diag < "$T/nm.log"; exit 1; }
gdbus monitor --system --dest "$BUS" > "$T/monitor.log" 2>&1 & PIDS+=($!)
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "the volume is mounted by fcached" wait_mounted "$T/mnt" "$T/cache"
# The view must be serving before the manual disconnect. (Before fead50b the
# volume link's first drive, still waiting for the view, could undo a
# disconnect landing meanwhile; the short wait also keeps this test off that.)
check "the view answers query state" wait_state online
sleep 0.5
check "pin recursive on the volume" "$FCACHECTL" pin recursive "$T/mnt/proj"
out=$(list "$T/mnt" 2>&1)
expect "no conflicts before any offline edit" "$out" = "a(tsss) 0"

# Offline edits that collide with the server's.
check "disconnect" "$FCACHECTL" disconnect "$T/mnt/proj"
check "offline" wait_state offline
for f in doc doc2 doc3 doc4 doc5 doc6; do printf 'one\nLOCAL %s\nthree\n' $f > "$T/mnt/proj/$f"; done
echo "edited offline" > "$T/mnt/proj/gone"
echo "secret local" > "$T/mnt/proj/private/secret"
echo "secret remote" > "$T/srv/proj/private/secret"
for f in doc doc2 doc3 doc4 doc5 doc6; do printf 'one\nREMOTE %s\nthree\n' $f > "$T/srv/proj/$f"; done
rm "$T/srv/proj/gone"
"$FCACHECTL" query reintegration "$T/mnt/proj" 2>&1 | grep -E 'record=|^(records|conflict)' | diag
check "reconnect" "$FCACHECTL" reconnect "$T/mnt/proj"
echo "$out" | diag
check "online again" wait_state online

out=$(busctl --system --json=short call "$BUS" "$OBJ" org.fcache.Manager1 ListConflicts s "$T/mnt/proj" 2>&1)
rows=$(echo "$out" | /usr/bin/python3 -c '
import json, sys
for id, kind, path, detail in json.load(sys.stdin)["data"][0]:
    print(id, kind, path)' 2>&1)
echo "$rows" | diag
expect "ListConflicts lists eight conflicts" "$(echo "$rows" | grep -c "$T/mnt/proj/")" = 8
expect "doc is a content conflict, its path absolute under the mountpoint" \
        "$(echo "$rows" | grep -c "^[0-9]* content $T/mnt/proj/doc\$")" = 1
gone_kind=$(echo "$rows" | awk -v p="$T/mnt/proj/gone" '$3 == p { print $2 }')
expect "gone has an edit/delete conflict ($gone_kind)" "$(echo "$gone_kind" | grep -c delete)" = 1
expect "ListConflicts of one file lists just that file's" \
        "$(list "$T/mnt/proj/doc2" | grep -o "$T/mnt/proj/doc[0-9]*" | sort -u)" = "$T/mnt/proj/doc2"
wait_monitor "ConflictsChanged ('lap', uint32 8)"
check "ConflictsChanged ('lap', 8) after the reconnect" grep -qF "ConflictsChanged ('lap', uint32 8)" "$T/monitor.log"

# Versions through a sealed memfd.
local_v=$("${FD[@]}" version "$T/mnt/proj/doc" local 2>"$T/seal")
expect "GetConflictVersion local: the offline text" "$local_v" = "$(printf 'one\nLOCAL doc\nthree')"
expect "and the fd is a sealed memfd" "$(cat "$T/seal")" = sealed
expect "GetConflictVersion remote: the server's text" \
        "$("${FD[@]}" version "$T/mnt/proj/doc" remote 2>/dev/null)" = "$(printf 'one\nREMOTE doc\nthree')"
expect "GetConflictVersion base: the text before both" \
        "$("${FD[@]}" version "$T/mnt/proj/doc" base 2>/dev/null)" = "$(printf 'one\ntwo\nthree')"
expect "GetConflictVersion local of the edit/delete: the offline edit" \
        "$("${FD[@]}" version "$T/mnt/proj/gone" local 2>/dev/null)" = "edited offline"
check_fails "GetConflictVersion remote of the file the server deleted: no content" \
        "NoSuchPath|no remote content" "${FD[@]}" version "$T/mnt/proj/gone" remote
check_fails "a bad version word is refused, naming it" "InvalidArgument.*'newest'|'newest'.*base, local or remote" \
        call GetConflictVersion ss "$T/mnt/proj/doc" newest
check_fails "a bad how word is refused, naming it" "'mine'" \
        call ResolveConflict ss "$T/mnt/proj/doc" mine
check_fails "a path without a conflict: NoSuchPath" "no conflict on this path" \
        call ResolveConflict ss "$T/mnt/proj/nothing" local
check_fails "a relative path is refused" "must be absolute" call ListConflicts s "mnt/proj"

# polkit, then the caller's own access.
make_user user fcconf
check_fails "an unprivileged user without a rule: NotAuthorized for org.fcache.resolve" \
        "Not authorized for org.fcache.resolve" as "$user" busctl --system call "$BUS" "$OBJ" \
        org.fcache.Manager1 ResolveConflict ss "$T/mnt/proj/doc" local
cat > "$T/polkit/rules.d/50-fcache-conflicts.rules" <<RULE
polkit.addRule(function(action, subject) {
    if (action.id == "org.fcache.resolve" && subject.user == "$user")
        return polkit.Result.YES;
});
RULE
chmod 644 "$T/polkit/rules.d/50-fcache-conflicts.rules"
for _ in $(seq 50); do
        as "$user" "${FD[@]}" version "$T/mnt/proj/doc" local >/dev/null 2>&1 && break
        sleep 0.1
done
expect "with the rule the user reads a version of a file it can read" \
        "$(as "$user" "${FD[@]}" version "$T/mnt/proj/doc" remote 2>/dev/null)" = "$(printf 'one\nREMOTE doc\nthree')"
out=$(as "$user" busctl --system call "$BUS" "$OBJ" org.fcache.Manager1 ListConflicts s "$T/mnt/proj" 2>&1)
expect "the user's ListConflicts lists the seven it can reach" "$(echo "$out" | cut -d' ' -f2)" = 7
expect "but not the one in a directory it cannot enter" "$(echo "$out" | grep -c private)" = 0
check_fails "nor may it read a version there: AccessDenied" "AccessDenied|cannot reach" \
        as "$user" "${FD[@]}" version "$T/mnt/proj/private/secret" local
check_fails "but may not resolve a file it cannot write: AccessDenied" \
        "AccessDenied|cannot write" as "$user" busctl --system call "$BUS" "$OBJ" \
        org.fcache.Manager1 ResolveConflict ss "$T/mnt/proj/doc" local
check_fails "nor merge into it" "cannot write" as "$user" "${FD[@]}" merged "$T/mnt/proj/doc" /etc/hostname
expect "and the server's doc is unchanged" "$(cat "$T/srv/proj/doc")" = "$(printf 'one\nREMOTE doc\nthree')"

# Resolve.
check "ResolveConflict local" call ResolveConflict ss "$T/mnt/proj/doc" local
expect "the backing file holds the local text" "$(cat "$T/srv/proj/doc")" = "$(printf 'one\nLOCAL doc\nthree')"
expect "the view shows it" "$(cat "$T/mnt/proj/doc")" = "$(printf 'one\nLOCAL doc\nthree')"
check "ConflictsChanged ('lap', 7) after it" wait_monitor "ConflictsChanged ('lap', uint32 7)"
out=$(call ResolveConflict ss "$T/mnt/proj/doc2" both 2>&1)
echo "$out" | diag
kept=$(echo "$out" | grep -o '"kept" s "[^"]*"' | sed 's/.*s "\(.*\)"/\1/')
expect "ResolveConflict both names the kept local copy" "$kept" != ""
expect "the server's doc2 stays under its name" "$(cat "$T/srv/proj/doc2")" = "$(printf 'one\nREMOTE doc2\nthree')"
expect "the kept name is absolute under the mountpoint ($kept)" "$(dirname "$kept")" = "$T/mnt/proj"
expect "the local version exists on the server under the second name" \
        "$(cat "$T/srv/${kept#"$T/mnt/"}" 2>&1)" = "$(printf 'one\nLOCAL doc2\nthree')"
expect "and the view shows both names" \
        "$(cat "$T/mnt/proj/doc2" "$kept")" = "$(printf 'one\nREMOTE doc2\nthree\none\nLOCAL doc2\nthree')"
seq 1 5000 > "$T/merged"
check "ResolveConflictMerged from a file (longer than one request line)" \
        "${FD[@]}" merged "$T/mnt/proj/doc3" "$T/merged"
expect "the server has the merged file" "$(md5sum < "$T/srv/proj/doc3")" = "$(md5sum < "$T/merged")"
expect "the view shows it" "$(md5sum < "$T/mnt/proj/doc3")" = "$(md5sum < "$T/merged")"
check "ResolveConflictMerged from a pipe" sh -c "echo 'merged by hand' | ${FD[*]} merged $T/mnt/proj/doc4 -"
expect "the server has the piped content" "$(cat "$T/srv/proj/doc4")" = "merged by hand"
echo "merged with busctl" > "$T/plan.merged"
check "ResolveConflictMerged with gdbus (its fd 3, as the README shows)" \
        eval "gdbus call --system --dest $BUS --object-path $OBJ --method org.fcache.Manager1.ResolveConflictMerged $T/mnt/proj/doc5 'handle 3' 3<$T/plan.merged"
expect "the server has it" "$(cat "$T/srv/proj/doc5")" = "merged with busctl"
check_fails "merged content from a directory fd is refused" "regular file, a memfd, a pipe" \
        "${FD[@]}" merged "$T/mnt/proj/doc6" "$T/mnt/proj"
check "ResolveConflictMerged from a memfd left at its end" "${FD[@]}" merged "$T/mnt/proj/doc6" "memfd:from a memfd"
expect "the server has all of the memfd" "$(cat "$T/srv/proj/doc6")" = "from a memfd"
check "ResolveConflict remote of the edit/delete" call ResolveConflict ss "$T/mnt/proj/gone" remote
expect "the file stays deleted on the server" "$(ls "$T/srv/proj/gone" 2>&1 | grep -c 'No such')" = 1
check "root resolves the private one (remote)" call ResolveConflict ss "$T/mnt/proj/private/secret" remote
expect "the server keeps its text" "$(cat "$T/srv/proj/private/secret")" = "secret remote"
expect "no conflicts are left" "$(list "$T/mnt")" = "a(tsss) 0"
check "ConflictsChanged ('lap', 0) at the end" wait_monitor "ConflictsChanged ('lap', uint32 0)"
check_fails "resolving again: no conflict on the path" "no conflict on this path" \
        call ResolveConflict ss "$T/mnt/proj/doc" local
expect "fcached is alive" "$(fcached_alive && echo yes)" = yes

if stop_fcached; then ok "fcached exits with status 0 (no leak report under ASan)"
else not_ok "fcached exits with status 0"; tail -30 "$T/fcached.log" | diag; fi
finish
