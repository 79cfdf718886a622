#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# writeback.sh: fcachectl sync [PATH] end to end, through fcached to the
# views: on a volume in write-back (WriteBack=yes) `sync PATH` returns once
# that path's changes are on the server, with stable key=value and --json
# results; `sync` with no PATH syncs every volume; a path on a volume online
# or offline, and one on no volume, is an error that says why (the volume's
# state); offline, `sync` of every volume fails naming the volume.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"
[ -x "${FCACHECTL:-}" ] || skip_all "FCACHECTL is not set to the fcachectl binary"

V=$T/volumes.d
mkdir -p "$V" "$T/srv/proj" "$T/mnt" "$T/srv2/proj" "$T/mnt2"
chmod 755 "$T/srv" "$T/srv/proj" "$T/srv2" "$T/srv2/proj"
echo one > "$T/srv/proj/f"
echo one > "$T/srv2/proj/f"
chmod 644 "$T/srv/proj/f" "$T/srv2/proj/f"
volume_conf wb "" WriteBack=yes
volume_conf on 2
# jval KEY ARGS...: KEY of the first result of `fcachectl --json ARGS`.
jval() {
        local key=$1; shift
        "$FCACHECTL" --json -q "$@" 2>/dev/null | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)["results"][0]
v = r["result"].get(sys.argv[1], "MISSING") if r["ok"] else "ERROR"
print(" ".join(v) if isinstance(v, list) else v)' "$key"
}

start_bus || exit 1
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "volume wb is mounted" wait_mounted "$T/mnt" "$T/cache"
check "volume on is mounted" wait_mounted "$T/mnt2" "$T/cache2"
check "WriteBack=yes: the volume is in writeback" wait_state writeback
check "pin recursive in writeback, through fcached" "$FCACHECTL" pin recursive "$T/mnt/proj"

echo two > "$T/mnt/proj/f"
out=$("$FCACHECTL" sync "$T/mnt/proj/f" 2>&1)
expect "fcachectl sync PATH succeeds" "$?" = 0
expect "... and says what it waited for: synced N, state" \
        "$(echo "$out" | grep -cE '^(synced +[0-9]+|state +writeback)$')" = 2
expect "sync PATH: the change is on the server" "$(cat "$T/srv/proj/f")" = two
echo new > "$T/mnt/proj/g"
expect "fcachectl --json sync PATH: synced" "$(jval synced sync "$T/mnt/proj/g")" -ge 1
expect "... state" "$(jval state sync "$T/mnt/proj/g")" = writeback
expect "sync PATH: the new file is on the server" "$(cat "$T/srv/proj/g" 2>&1)" = new

echo three > "$T/mnt/proj/f"
expect "fcachectl sync with no PATH: every volume" "$(jval synced_volume sync)" = "on wb"
expect "... the change is on the server" "$(cat "$T/srv/proj/f")" = three
check_fails "sync of a path on a volume online says so" "online, not in write-back" \
        "$FCACHECTL" sync "$T/mnt2/proj/f"
check_fails "sync of a path on no volume says so" "plain mount; sync applies to fcache volumes" \
        "$FCACHECTL" sync "$T/srv/proj"

check "fcachectl disconnect" "$FCACHECTL" disconnect "$T/mnt/proj"
check "offline" wait_state offline
echo four > "$T/mnt/proj/f"
check_fails "sync of a path on a volume offline says so" "offline, not in write-back" \
        "$FCACHECTL" sync "$T/mnt/proj/f"
check_fails "sync of every volume names the one offline" "volume wb: .*offline" "$FCACHECTL" sync
check "fcachectl reconnect" "$FCACHECTL" reconnect "$T/mnt/proj"
check "back in writeback" wait_state writeback
check "sync PATH after the reconnect" "$FCACHECTL" sync "$T/mnt/proj/f"
expect "the change made offline is on the server" "$(cat "$T/srv/proj/f")" = four

check "fcached is alive" fcached_alive
if stop_fcached; then ok "fcached exits with status 0"
else not_ok "fcached exits with status 0"; tail -30 "$T/fcached.log" | diag; fi
finish
