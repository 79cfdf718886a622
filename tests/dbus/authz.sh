#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# authz.sh: who may do what. Root is allowed; an unprivileged user is denied the
# admin acts (NotAuthorized, and nothing changes), may query its own files, and is
# refused any act on a file it cannot read (AccessDenied), symlinks it planted
# included; a polkit rule granting a group changes that as the rule says.
source "$(dirname "$0")/lib.sh"
start_bus || exit 1
start_fcached || exit 1

grp=fcgrp$$
make_user u1 fcu1
make_user u2 fcu2 "$grp"
mkdir -p "$T/home1" "$T/home2" "$T/rootdir"
echo mine > "$T/home1/f"; chown -R "$u1:" "$T/home1"; chmod 700 "$T/home1"
echo theirs > "$T/home2/f"; chown -R "$u2:" "$T/home2"; chmod 700 "$T/home2"
echo secret > "$T/rootonly"; chmod 600 "$T/rootonly"
echo hidden > "$T/rootdir/file"; chmod 700 "$T/rootdir"
as "$u2" ln -s "$T/rootonly" "$T/home2/link"
as "$u2" ln -s "$T/rootdir/file" "$T/home2/link2"

# --- the actions polkitd loaded, with their defaults (any/inactive/active) ---
if command -v pkaction >/dev/null; then
        while read -r action want; do
                got=$(pkaction --action-id "org.fcache.$action" --verbose 2>&1 |
                      sed -n 's/^ *implicit \(any\|inactive\|active\): *//p' | paste -sd/)
                expect "polkit has org.fcache.$action with defaults $want" "$got" = "$want"
        done <<'ACTIONS'
query yes/yes/yes
prefetch auth_admin/auth_admin/yes
pin auth_admin/auth_admin/yes
flush auth_admin/auth_admin/yes
flush-volume auth_admin_keep/auth_admin_keep/auth_admin_keep
flush-all auth_admin_keep/auth_admin_keep/auth_admin_keep
set-parameters auth_admin_keep/auth_admin_keep/auth_admin_keep
connection auth_admin_keep/auth_admin_keep/auth_admin_keep
resolve auth_admin/auth_admin/yes
ACTIONS
fi

# --- root ---
check "root: query cached of a root-only file" control "$T/rootonly" "query cached"
check "root: pin a root-only file" call Control 'ssa{sv}' "$T/rootonly" "pin" 0
expect "root: the pin shows in PinCount" "$(prop PinCount)" = 1
check "root: unpin it" call Unpin sb "$T/rootonly" false
expect "root: PinCount back to 0" "$(prop PinCount)" = 0
check "root: set cache-size" call SetCacheSize st / 300000000
expect "root: BudgetBytes changed" "$(prop BudgetBytes)" = 300000000

# --- an unprivileged user without a rule ---
check "user: query cached of its own file" as "$u1" busctl --system call $BUS $OBJ org.fcache.Manager1 Query ssb "$T/home1/f" cached false
check "user: query pinned of its own file" as "$u1" busctl --system call $BUS $OBJ org.fcache.Manager1 Control 'ssa{sv}' "$T/home1/f" "query pinned" 0
check_fails "user: query of a root-only file is AccessDenied" "Error.AccessDenied|permission denied" \
        as "$u1" busctl --system call $BUS $OBJ org.fcache.Manager1 Query ssb "$T/rootonly" cached false
check_fails "user: query of another user's private file is AccessDenied" "permission denied" \
        as "$u1" busctl --system call $BUS $OBJ org.fcache.Manager1 Query ssb "$T/home2/f" cached false
e1=$(as "$u1" busctl --system call $BUS $OBJ org.fcache.Manager1 Query ssb "$T/rootdir/file" cached false 2>&1)
e2=$(as "$u1" busctl --system call $BUS $OBJ org.fcache.Manager1 Query ssb "$T/rootdir/nonexistent" cached false 2>&1)
expect "user: an existing and a missing name in an unreadable directory look the same" \
        "${e1//file/X}" = "${e2//nonexistent/X}"
echo root > "$T/home1/rootfile"; chmod 600 "$T/home1/rootfile"
out=$(as "$u1" busctl --system --json=short call $BUS $OBJ org.fcache.Manager1 Query ssb "$T/home1" cached true)
expect "user: a recursive query walks as the user (1 file counted)" "$(echo "$out" | jget files)" = 1
expect "user: the root-only file in its tree is an error, not counted" "$(echo "$out" | jget errors)" = 1
rm -f "$T/home1/rootfile"
budget=$(prop BudgetBytes)
for m in "Control ssa{sv} $T/home1/f pin 0" "Pin sbub $T/home1/f false 500 false" \
         "Prefetch sb $T/home1/f false" "Flush ss $T/home1/f volume" "Flush ss $T/home1/f all" \
         "Flush ss $T/home1/f ''" "SetCacheSize st $T/home1/f 1" "SetCacheable sb $T/home1/f false" \
         "SetReserve st $T/home1/f 1" "SetCache ss $T/home1/f other" "Disconnect s $T/home1/f" \
         "Reconnect s $T/home1/f" "Unpin sb $T/home1/f true" "Start ssa{sv} $T/home1/f prefetch 0"; do
        eval "set -- $m"
        check_fails "user: $1 ${3##*/} ${4:-} is NotAuthorized" "Error.NotAuthorized|Not authorized" \
                as "$u1" busctl --system call $BUS $OBJ org.fcache.Manager1 "$@"
done
for m in "Pin sbub $T/home1/f false 500 false" "SetCacheSize st / 1" "Flush ss / all" "Disconnect s /"; do
        eval "set -- $m"
        check_fails "nobody (65534): $1 is NotAuthorized" "Not authorized" \
                setpriv --reuid=65534 --regid=65534 --clear-groups busctl --system call $BUS $OBJ org.fcache.Manager1 "$@"
done
expect "user: denied acts changed nothing (PinCount)" "$(prop PinCount)" = 0
expect "user: denied acts changed nothing (BudgetBytes)" "$(prop BudgetBytes)" = "$budget"
expect "user: no pin was written to the state file" "$(grep -c '^\[pin' "$T/state/pins.ini" 2>/dev/null || true)" = 0

# --- a polkit rule grants the group pin and set-parameters ---
cat > "$T/polkit/rules.d/50-fcache-test.rules" <<RULE
polkit.addRule(function(action, subject) {
    if ((action.id == "org.fcache.pin" || action.id == "org.fcache.set-parameters") &&
        subject.isInGroup("$grp"))
        return polkit.Result.YES;
});
RULE
chmod 644 "$T/polkit/rules.d/50-fcache-test.rules"
for _ in $(seq 50); do
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 Control 'ssa{sv}' "$T/home2/f" "pin dry-run" 0 >/dev/null 2>&1 && break
        sleep 0.1
done
check "group member: pin of its own file (granted by the rule)" \
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 Control 'ssa{sv}' "$T/home2/f" pin 0
expect "group member: the pin is held" "$(prop PinCount)" = 1
check_fails "group member: pin of a root-only file is AccessDenied" "permission denied" \
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 Control 'ssa{sv}' "$T/rootonly" pin 0
check_fails "group member: pin through its symlink to a root-only file is AccessDenied" "permission denied" \
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 Control 'ssa{sv}' "$T/home2/link" pin 0
check_fails "group member: pin through its symlink into a root-only directory is AccessDenied" "permission denied" \
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 Control 'ssa{sv}' "$T/home2/link2" pin 0
check_fails "group member: no-follow pin of the symlink itself is refused" "only regular files" \
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 Control 'ssa{sv}' "$T/home2/link" pin 1 no-follow b true
check_fails "group member: query through the symlink is AccessDenied" "permission denied" \
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 Query ssb "$T/home2/link" cached false
check_fails "group member: /proc magic links are refused" "magic link|permission denied|ELOOP|levels" \
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 Query ssb "/proc/1/root/$T/rootonly" cached false
expect "group member: refused pins changed nothing" "$(prop PinCount)" = 1
check "group member: set cache-size (granted by the rule)" \
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 SetCacheSize st "$T/home2/f" 200000000
expect "group member: BudgetBytes changed" "$(prop BudgetBytes)" = 200000000
check_fails "group member: flush all is still NotAuthorized" "Not authorized" \
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 Flush ss "$T/home2/f" all
out=$(as "$u1" busctl --system --json=short call $BUS $OBJ org.fcache.Manager1 Query ssb "$T" pinned false | jget pins_below)
expect "another user does not see the group member's pin" "$out" = 0
out=$(control "$T" "query pinned" | jget pins_below)
expect "root sees it" "$out" = 1
check_fails "another user cannot unpin it (NotAuthorized)" "Not authorized" \
        as "$u1" busctl --system call $BUS $OBJ org.fcache.Manager1 Unpin sb "$T/home2/f" false
expect "the pin is still held" "$(prop PinCount)" = 1

# the CLI as the user, through the daemon
if [ -x "${FCACHECTL:-}" ]; then
        check "fcachectl query pinned as the group member" as "$u2" "$FCACHECTL" query pinned "$T/home2/f"
        check_fails "fcachectl pin as the plain user says why" "Not authorized for org.fcache.pin" \
                as "$u1" "$FCACHECTL" pin "$T/home1/f"
        check "fcachectl unpin as the group member" as "$u2" "$FCACHECTL" unpin "$T/home2/f"
        expect "the pin is gone" "$(prop PinCount)" = 0
fi

# removing the rule takes the grant away again
rm -f "$T/polkit/rules.d/50-fcache-test.rules"
for _ in $(seq 50); do
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 Control 'ssa{sv}' "$T/home2/f" pin 0 >/dev/null 2>&1 || break
        call Unpin sb "$T/home2/f" false >/dev/null 2>&1
        sleep 0.1
done
check_fails "without the rule the group member is NotAuthorized again" "Not authorized" \
        as "$u2" busctl --system call $BUS $OBJ org.fcache.Manager1 Control 'ssa{sv}' "$T/home2/f" pin 0
if fcached_alive; then ok "fcached is still running"; else not_ok "fcached died"; tail "$T/fcached.log" | diag; fi
if stop_fcached; then ok "fcached stops cleanly on SIGTERM"; else not_ok "fcached's exit status on SIGTERM"; fi
finish
