#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# resolve.sh: fcache-resolve run by an unprivileged user goes through fcached's
# D-Bus objects (the volume's control socket is root's). On a real volume
# (FUSE view, private bus, polkitd, dbusmock NetworkManager, as conflicts.sh)
# offline edits that collide with the server's leave conflicts on the user's
# files and on a file in a directory only root may enter; with polkit's
# org.fcache.resolve granted the user lists them (text and --json), shows one,
# settles them (take local, take remote, keep-both, edit), and is refused for
# the file it cannot read, whose server copy stays as it was; a second user
# sees none it cannot read. On a pseudo-terminal, with a rule answering
# AUTH_SELF_KEEP, pkttyagent asks the second user's password and show works;
# --no-ask-password refuses without asking. Volume1's reintegration counters
# follow the reconnect.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"
[ -x "${FCACHECTL:-}" ] || skip_all "FCACHECTL is not set to the fcachectl binary"
[ -x "${FCACHE_RESOLVE:-}" ] || skip_all "FCACHE_RESOLVE is not set to the fcache-resolve binary"
/usr/bin/python3 -c 'import dbusmock' 2>/dev/null || skip_all "python3-dbusmock is not installed"

V=$T/volumes.d
mkdir -p "$V" "$T/srv/proj" "$T/mnt"
chmod 755 "$T/srv" "$T/srv/proj"
make_user user fcres
make_user other fcres2
for f in doc1 doc2 doc3 doc4 doc5; do printf 'one\ntwo\nthree\n' > "$T/srv/proj/$f"; done
chown "$user:$user" "$T/srv/proj/"doc*
chmod 644 "$T/srv/proj/"*
mkdir -m 700 "$T/srv/proj/private"
echo "secret base" > "$T/srv/proj/private/secret"
volume_conf lap
# resolve USER ARGS...: fcache-resolve as USER (standard input not a terminal).
resolve() { local u=$1; shift; as "$u" "$FCACHE_RESOLVE" "$@" </dev/null; }

start_bus || exit 1
/usr/bin/python3 -m dbusmock --system --template networkmanager >"$T/nm.log" 2>&1 & PIDS+=($!)
wait_name org.freedesktop.NetworkManager || { diag < "$T/nm.log"; exit 1; }
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "the volume is mounted by fcached" wait_mounted "$T/mnt" "$T/cache"
check "the view answers query state" wait_state online
sleep 0.5
check "pin recursive on the volume" "$FCACHECTL" pin recursive "$T/mnt/proj"
check "disconnect" "$FCACHECTL" disconnect "$T/mnt/proj"
check "offline" wait_state offline
for f in doc1 doc2 doc3 doc4 doc5; do printf 'one\nLOCAL %s\nthree\n' $f > "$T/mnt/proj/$f"; done
echo "secret local" > "$T/mnt/proj/private/secret"
for f in doc1 doc2 doc3 doc4 doc5; do printf 'one\nREMOTE %s\nthree\n' $f > "$T/srv/proj/$f"; done
echo "secret remote" > "$T/srv/proj/private/secret"
check "reconnect" "$FCACHECTL" reconnect "$T/mnt/proj"
check "online again" wait_state online
vprop() { busctl --system get-property "$BUS" /org/fcache/volume/lap org.fcache.Volume1 "$1" | cut -d' ' -f2; }
for _ in $(seq 100); do [ "$(vprop ReintegrationTotal)" -gt 0 ] 2>/dev/null && break; sleep 0.1; done
total=$(vprop ReintegrationTotal)
expect "Volume1.ReintegrationTotal: the records the reconnect replayed ($total)" "$total" -ge 5
expect "Volume1.ReintegrationDone: all of them" "$(vprop ReintegrationDone)" = "$total"
check "Volume1.ReintegrationBytes: a count of bytes shipped" \
	eval '[[ "$(vprop ReintegrationBytes)" =~ ^[0-9]+$ ]]'
expect "fcachectl --json status has them" "$("$FCACHECTL" --json status | /usr/bin/python3 -c '
import json, sys; v = json.load(sys.stdin)["result"]["volumes"][0]
print(v["reintegration_done"] == v["reintegration_total"] > 0)')" = True
expect "root (the control socket) lists six conflicts" \
        "$("$FCACHE_RESOLVE" --json list | grep -o '"id"' | wc -l)" = 6

id1=$("$FCACHE_RESOLVE" --json list | /usr/bin/python3 -c '
import json, sys; print([c["id"] for c in json.load(sys.stdin) if c["path"] == "proj/doc1"][0])')
want=$(/usr/bin/python3 -c 'import os, sys; print(os.stat(sys.argv[1]).st_mtime_ns // 1000)' "$T/srv/proj/doc1")
cprop() { busctl --system get-property "$BUS" "/org/fcache/conflict/lap/$id1" org.fcache.Conflict1 RemoteChanged | cut -d' ' -f2; }
for _ in $(seq 100); do [ "$(cprop)" = "$want" ] && break; sleep 0.1; done
expect "Conflict1.RemoteChanged: the server's mtime of doc1 in µs" "$(cprop)" = "$want"
cget() { busctl --system get-property "$BUS" "/org/fcache/conflict/lap/$id1" org.fcache.Conflict1 "$1" | cut -d' ' -f2; }
now_us=$(/usr/bin/python3 -c 'import time; print(time.time_ns() // 1000)')
rec=$(cget Recorded)
expect "Conflict1.Recorded: when reintegration recorded it, in µs, not in the future ($rec)" \
        "$(( rec > 0 && rec <= now_us ))" = 1
loc=$(cget LocalChanged)
expect "Conflict1.LocalChanged: the local version's mtime, before the conflict was recorded ($loc)" \
        "$(( loc > 0 && loc <= rec ))" = 1
cat > "$T/polkit/rules.d/50-fcache-resolve.rules" <<RULE
polkit.addRule(function(action, subject) {
    if (action.id == "org.fcache.resolve" && subject.user == "$user")
        return polkit.Result.YES;
});
RULE
chmod 644 "$T/polkit/rules.d/50-fcache-resolve.rules"
# The objects follow the reconnect and polkitd reads the rule by itself: wait for both.
for _ in $(seq 100); do
        resolve "$user" show "$T/mnt/proj/doc1" >/dev/null 2>&1 && break
        sleep 0.1
done

out=$(resolve "$user" list "$T/mnt/proj" 2>&1); st=$?
echo "$out" | diag
expect "the user lists through fcached (exit $st)" "$st" = 0
expect "the five conflicts on its files" "$(echo "$out" | grep -cE '^[0-9]+ +content +proj/doc[1-5]$')" = 5
expect "not the one in the directory it cannot enter" "$(echo "$out" | grep -c private)" = 0
json=$(resolve "$user" --json list 2>&1)
expect "--json from the current directory's (the only) volume: five entries" \
        "$(echo "$json" | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' 2>&1)" = 5
out=$(resolve "$user" show "$T/mnt/proj/doc1" 2>&1)
echo "$out" | diag
expect "show gives the local and remote text (through GetVersion's memfd)" \
        "$(echo "$out" | grep -cE '^(LOCAL|REMOTE) doc1$')" = 2
expect "and the base" "$(echo "$out" | grep -c '^two$')" = 1

check "take local" resolve "$user" take local "$T/mnt/proj/doc1"
expect "the server has the local text" "$(cat "$T/srv/proj/doc1")" = "$(printf 'one\nLOCAL doc1\nthree')"
check "take remote (a path relative to the volume root)" resolve "$user" take remote proj/doc2
expect "the server keeps its text" "$(cat "$T/srv/proj/doc2")" = "$(printf 'one\nREMOTE doc2\nthree')"
expect "the view shows it" "$(cat "$T/mnt/proj/doc2")" = "$(printf 'one\nREMOTE doc2\nthree')"
out=$(resolve "$user" keep-both "$T/mnt/proj/doc3" 2>&1); st=$?
echo "$out" | diag
expect "keep-both ($st)" "$st" = 0
kept=$(echo "$out" | sed -n 's/.*the local version is kept as \([^;]*\);.*/\1/p')
expect "it names the kept copy relative to the volume root ($kept)" "$(dirname "$kept")" = proj
expect "the server keeps doc3 and has the local text beside it" \
        "$(cat "$T/srv/proj/doc3" "$T/srv/$kept" 2>&1)" = "$(printf 'one\nREMOTE doc3\nthree\none\nLOCAL doc3\nthree')"
printf '#!/bin/sh\nprintf "one\\nMERGED\\nthree\\n" > "$1"\n' > "$T/editor"
chmod 755 "$T/editor"
mkdir -m 700 "$T/tmp" && chown "$user" "$T/tmp"
out=$(as "$user" env VISUAL="$T/editor" TMPDIR="$T/tmp" "$FCACHE_RESOLVE" edit "$T/mnt/proj/doc4" </dev/null 2>&1); st=$?
echo "$out" | diag
expect "edit sends the edited text (ResolveMerged, $st)" "$st" = 0
expect "the server has it" "$(cat "$T/srv/proj/doc4")" = "$(printf 'one\nMERGED\nthree')"

check_fails "the user is refused for the file it cannot read" "no conflict on 'proj/private/secret' that you may read" \
        resolve "$user" take local "$T/mnt/proj/private/secret"
check_fails "and for its versions" "no conflict" resolve "$user" show proj/private/secret
expect "the server's secret is unchanged" "$(cat "$T/srv/proj/private/secret")" = "secret remote"

# On a terminal polkit asks (a rule answers AUTH_SELF_KEEP for the other user), as
# for fcachectl (askpass.sh): pkttyagent for the terminal, the password typed.
if [ -x /usr/bin/pkttyagent ] && [ -u /usr/lib/polkit-1/polkit-agent-helper-1 ] &&
   command -v chpasswd >/dev/null; then
        PASSWORD="fcache-Test-$$"
        echo "$other:$PASSWORD" | chpasswd
        cat > "$T/polkit/rules.d/51-fcache-resolve-ask.rules" <<RULE
polkit.addRule(function(action, subject) {
    if (action.id == "org.fcache.resolve" && subject.user == "$other")
        return polkit.Result.AUTH_SELF_KEEP;
});
RULE
        chmod 644 "$T/polkit/rules.d/51-fcache-resolve-ask.rules"
        # terminal PASSWORD ARGS...: fcache-resolve ARGS as the other user on a pseudo-terminal.
        terminal() {
                local pw=$1; shift
                unshare -m --propagation private sh -c '
                        mount -t tmpfs -o mode=755 none /run/dbus &&
                        ln -s "$1" /run/dbus/system_bus_socket && shift && exec "$@"' sh \
                        "$T/system_bus_socket" /usr/bin/python3 "$SRCDIR/tests/dbus/askpass.py" "$pw" \
                        setpriv --reuid="$other" --regid="$other" --init-groups "$FCACHE_RESOLVE" "$@"
        }
        for _ in $(seq 50); do
                terminal - --no-ask-password show "$T/mnt/proj/doc5" 2>&1 |
                        grep -q "authentication is required" && break
                sleep 0.1
        done
        out=$(terminal - --no-ask-password show "$T/mnt/proj/doc5" 2>&1); st=$?
        expect "--no-ask-password on a terminal: refused ($st), nothing asked" \
                "$st:$(echo "$out" | grep -c 'Password')" = 1:0
        out=$(terminal "$PASSWORD" --color=never show "$T/mnt/proj/doc5" 2>&1); st=$?
        echo "$out" | diag
        expect "on a terminal pkttyagent asks for the user's password" "$(echo "$out" | grep -c 'Password:')" -ge 1
        expect "and with it fcache-resolve shows the conflict ($st)" \
                "$st:$(echo "$out" | grep -cE '^(LOCAL|REMOTE) doc5')" = 0:2
else
        ok "# SKIP the password prompt: pkttyagent, a setuid polkit-agent-helper-1 and chpasswd are needed"
fi
check "the user settles the last of its own" resolve "$user" take remote "$T/mnt/proj/doc5"
expect "the user's list is empty now" "$(resolve "$user" list "$T/mnt/proj" 2>&1)" = "no conflicts under $T/mnt/proj"
expect "root still sees the one left" "$("$FCACHE_RESOLVE" list | grep -c 'proj/private/secret')" = 1
check_fails "another user sees no conflict it cannot read either" "no conflict" \
        resolve "$other" take remote "$T/mnt/proj/private/secret"
check_fails "a user not on the bus's side: fcache-resolve says fcached is needed" \
        "cannot reach fcached on the system bus" \
        env DBUS_SYSTEM_BUS_ADDRESS=unix:path=$T/nothing setpriv --reuid="$user" --regid="$user" \
        --init-groups "$FCACHE_RESOLVE" list "$T/mnt/proj"
check "root settles it through the socket" "$FCACHE_RESOLVE" take remote "$T/mnt/proj/private/secret"
check "fcached is alive" fcached_alive
if stop_fcached; then ok "fcached exits with status 0"
else not_ok "fcached exits with status 0"; tail -30 "$T/fcached.log" | diag; fi
finish
