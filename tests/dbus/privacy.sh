#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# privacy.sh: what fcached shows one user of another's work, and how it shows
# results. An operation started by user A: user B can neither read its
# properties (Path, Command, Result) nor receive its signals; A and root read
# them. A result key keeps its type whatever its values: one pin is still "as",
# and fcachectl --json keeps every pin in an array. Text output escapes control
# bytes in names. The files fcache writes are private: the state directory 0700,
# the pins file and a view's view.init 0600.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"

make_user A fcpa
make_user B fcpb
OPPY=$T/operation.py
cp "$SRCDIR/tests/dbus/operation.py" "$OPPY"; chmod 755 "$OPPY"
mkdir -p "$T/home-a/sub" "$T/srv/proj" "$T/mnt" "$T/volumes.d"
seq 1 1000 > "$T/home-a/sub/notes"
chown -R "$A:$A" "$T/home-a"; chmod 700 "$T/home-a"
echo data > "$T/srv/proj/f"; chmod 755 "$T/srv" "$T/srv/proj"
cat > "$T/volumes.d/v.conf" <<CONF
[Volume]
Backing=$T/srv
Mountpoint=$T/mnt
CacheDir=$T/cache
CacheSize=16M
CONF

start_bus || exit 1
# Operations linger long after they end: the test reads them when it gets there.
start_fcached --operation-linger=3600 --volumes-dir="$T/volumes.d" --view="$FCACHE_VIEW" || exit 1

# --- another user's operation ---
mkfifo "$T/b.in"; chmod 666 "$T/b.in"
as "$B" /usr/bin/python3 "$OPPY" listen < "$T/b.in" > "$T/b.out" 2>&1 & LISTENER=$!; PIDS+=($LISTENER)
exec 7>"$T/b.in"
for _ in $(seq 600); do grep -q '^ready' "$T/b.out" && break; kill -0 $LISTENER 2>/dev/null || break; sleep 0.1; done
grep -q '^ready' "$T/b.out" && ok "user B listens to fcached's signals" || { not_ok "user B listens"; diag < "$T/b.out"; }

as "$A" /usr/bin/python3 "$OPPY" start "$T/home-a/sub" "query cached recursive" > "$T/a.out" 2>&1
op=$(sed -n 's/^operation //p' "$T/a.out")
expect "A's operation is an operation object" "${op%/*}" = /org/fcache/Manager1/operation
expect "A receives Finished on the connection that started it" "$(sed -n 's/^finished //p' "$T/a.out")" = done
[ -n "$op" ] || { cat "$T/a.out" | diag; op=/org/fcache/Manager1/operation/0; }

echo go >&7; exec 7>&-
wait $LISTENER
expect "B received none of A's operation's signals" "$(sed -n 's/^signals //p' "$T/b.out")" = 0
grep '^signal' "$T/b.out" | diag

getp() { busctl --system get-property $BUS "$op" org.fcache.Operation1 "$1"; }
# gdbus prints the error's name, busctl only its message.
for p in Path Command Result State; do
        check_fails "B cannot read the operation's $p" "Error\.AccessDenied" as "$B" gdbus call --system \
                --dest $BUS --object-path "$op" --method org.freedesktop.DBus.Properties.Get org.fcache.Operation1 $p
done
check_fails "B cannot GetAll the operation's properties" "Error\.AccessDenied" as "$B" gdbus call --system \
        --dest $BUS --object-path "$op" --method org.freedesktop.DBus.Properties.GetAll org.fcache.Operation1
out=$(as "$B" gdbus call --system --dest $BUS --object-path "$op" --method org.freedesktop.DBus.Properties.GetAll org.fcache.Operation1 2>&1)
case $out in *"$T/home-a"*) not_ok "gdbus GetAll as B leaks the path"; echo "$out" | diag ;; *) ok "gdbus GetAll as B shows nothing of the operation" ;; esac
check_fails "B cannot cancel it" "Error\.NotAuthorized" as "$B" gdbus call --system \
        --dest $BUS --object-path "$op" --method org.fcache.Operation1.Cancel
check_fails "nobody sets an operation's property" "not writable|read-only" \
        busctl --system set-property $BUS "$op" org.fcache.Operation1 State s done
expect "A reads its operation's Path" "$(as "$A" busctl --system get-property $BUS "$op" org.fcache.Operation1 Path)" = "s \"$T/home-a/sub\""
expect "root reads A's operation's Command" "$(getp Command)" = 's "query cached recursive"'
out=$(as "$A" busctl --system call $BUS "$op" org.freedesktop.DBus.Properties GetAll s org.fcache.Operation1 2>&1)
echo "$out" | grep -q '"Result" a{sv}' && ok "A reads all its operation's properties" || { not_ok "GetAll as A"; echo "$out" | diag; }
expect "B sees no operation's State either" \
        "$(as "$B" busctl --system get-property $BUS "$op" org.fcache.Operation1 State 2>/dev/null || echo refused)" = refused

# --- result types do not change with the number of values ---
P=$T/pins
mkdir -p "$P"
for i in 1 2 3; do echo "$i" > "$P/f$i"; done
check "root pins one file" call Control 'ssa{sv}' "$P/f1" pin 0
ptype() { busctl --system --json=short call $BUS $OBJ org.fcache.Manager1 Query ssb "$1" pinned "$2" |
        /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0].get("pin", {}).get("type", "MISSING"))'; }
expect "one pin is still an array of strings (as)" "$(ptype "$P" true)" = as
expect "and so is the pin of a file queried by itself" "$(ptype "$P/f1" false)" = as
/usr/bin/python3 "$OPPY" start "$P" "query pinned recursive" > "$T/r.out" 2>&1
expect "an operation's Result has the same type for one pin" "$(sed -n 's/^type pin //p' "$T/r.out")" = as
if [ -x "${FCACHECTL:-}" ]; then
        out=$("$FCACHECTL" --json query pinned recursive "$P" 2>&1)
        cnt=$(echo "$out" | /usr/bin/python3 -c 'import json, sys; v = json.load(sys.stdin)["results"][0]["result"]["pin"]; print(len(v) if isinstance(v, list) else "not a list")' 2>&1)
        expect "fcachectl --json: one pin is a JSON array of one" "$cnt" = 1
        call Control 'ssa{sv}' "$P/f2" pin 0 >/dev/null; call Control 'ssa{sv}' "$P/f3" pin 0 >/dev/null
        out=$("$FCACHECTL" --json query pinned recursive "$P" 2>&1)
        cnt=$(echo "$out" | /usr/bin/python3 -c 'import json, sys; v = json.load(sys.stdin)["results"][0]["result"]["pin"]; print(len(v) if isinstance(v, list) else "not a list")' 2>&1)
        expect "fcachectl --json: three pins are three values" "$cnt" = 3
        expect "and the text output shows the same three" "$("$FCACHECTL" query pinned recursive "$P" | grep -c '^pin ')" = 3

        # --- text output escapes control bytes in names ---
        evil=$(printf '%s/new\nline\033[2J\tx' "$P")
        echo x > "$evil"
        check "root pins the file with a newline and ESC in its name" call Control 'ssa{sv}' "$evil" pin 0
        out=$("$FCACHECTL" query pinned recursive "$P" 2>&1)
        expect "no ESC byte reaches the terminal" "$(printf '%s' "$out" | grep -c $'\033')" = 0
        expect "each pin stays on one line" "$(printf '%s\n' "$out" | grep -c '^pin ')" = 4
        printf '%s\n' "$out" | grep -qF 'new\nline\x1b[2J\tx' && ok "the name is shown escaped" || { not_ok "escaped name"; echo "$out" | diag; }
        out=$("$FCACHECTL" query cached "$evil" "$P/f1" 2>&1)
        expect "the table has a header and one row per path" "$(printf '%s\n' "$out" | wc -l)" = 3
        expect "and no ESC byte" "$(printf '%s' "$out" | grep -c $'\033')" = 0
        out=$("$FCACHECTL" query cached "$evil.missing" 2>&1)
        expect "an error naming the file sends no ESC byte either" "$(printf '%s' "$out" | grep -c $'\033')" = 0
        expect "and stays on one line" "$(printf '%s\n' "$out" | wc -l)" = 1
fi

# --- the files fcache writes ---
expect "the state directory is 0700" "$(stat -c %a "$T/state")" = 700
expect "the pins file is 0600" "$(stat -c %a "$T/state"/pins*)" = 600
check "the volume is mounted" wait_mounted "$T/mnt" "$T/cache"
for _ in $(seq 200); do [ -e "$T/cache/view.init" ] && break; sleep 0.05; done
expect "the view's view.init is 0600" "$(stat -c %a "$T/cache/view.init" 2>&1)" = 600
expect "the view's cache directory is 0700" "$(stat -c %a "$T/cache")" = 700

finish
