#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# status.sh: fcachectl status and fcachectl volume list|add|remove against fcached
# on the private bus (polkitd, dbusmock NetworkManager, real FUSE views). status
# says when fcached is not running; with two volumes root's overview (text and
# --json) shows both with state, pending, conflicts, cache use and pins, and
# follows a disconnect; a user's shows only the volume it may read. volume add
# (KEY=VALUE words, and a NAME.conf on standard input) starts a volume that list
# and status show, volume remove stops it; a user is refused by polkit; bad
# words and a bad configuration are refused, naming what is wrong.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"
[ -x "${FCACHECTL:-}" ] || skip_all "FCACHECTL is not set to the fcachectl binary"
/usr/bin/python3 -c 'import dbusmock' 2>/dev/null || skip_all "python3-dbusmock is not installed"
JQ=(/usr/bin/python3 -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1]))')

V=$T/volumes.d
mkdir -p "$V" "$T/srv/proj" "$T/mnt" "$T/srv2" "$T/mnt2" "$T/srv3" "$T/mnt3"
chmod 755 "$T/srv" "$T/srv/proj" "$T/srv3"
chmod 700 "$T/srv2"
echo data > "$T/srv/proj/f"
chmod 644 "$T/srv/proj/f"
volume_conf lap
volume_conf hid 2

start_bus || exit 1
out=$("$FCACHECTL" status 2>&1); st=$?
expect "status without fcached: exit 0 ($st)" "$st" = 0
expect "it says fcached is not running" "$(echo "$out" | grep -c '^fcached: *not running')" = 1
expect "and whether fcache.ko is loaded" "$(echo "$out" | grep -cE '^fcache.ko: *(not )?loaded$')" = 1
expect "--json too" "$("$FCACHECTL" --json status | "${JQ[@]}" 'd["result"]["fcached"]["running"]')" = False
/usr/bin/python3 -m dbusmock --system --template networkmanager >"$T/nm.log" 2>&1 & PIDS+=($!)
wait_name org.freedesktop.NetworkManager || { diag < "$T/nm.log"; exit 1; }
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "volume lap is mounted" wait_mounted "$T/mnt" "$T/cache"
check "volume hid is mounted" wait_mounted "$T/mnt2" "$T/cache2"
check "the view answers query state" wait_state online
check "pin a file" "$FCACHECTL" pin "$T/mnt/proj/f"
make_user user fcstat

# status_of WHO: --json status as WHO (root when empty).
status_json() { if [ -n "${1:-}" ]; then as "$1" "$FCACHECTL" --json status; else "$FCACHECTL" --json status; fi; }
for _ in $(seq 100); do
        [ "$(status_json | "${JQ[@]}" 'd["result"]["volumes"][1]["cache_pinned"] > 0' 2>/dev/null)" = True ] && break
        sleep 0.1
done
out=$("$FCACHECTL" status 2>&1)
echo "$out" | diag
expect "status: fcached running" "$(echo "$out" | grep -c '^fcached: *running, version ')" = 1
expect "fcached's pins and their memory" "$(echo "$out" | grep -cE '^pins: *[0-9]+ \(.* resident in memory\)$')" = 1
expect "a table row per volume" "$(echo "$out" | grep -cE '^(hid|lap) +online ')" = 2
expect "with its size and mountpoint" "$(echo "$out" | grep -E '^lap ' | grep -c "64.0 MiB.*$T/mnt\$")" = 1
j=$(status_json)
expect "--json: the volumes by name" "$(echo "$j" | "${JQ[@]}" '[v["name"] for v in d["result"]["volumes"]]')" = "['hid', 'lap']"
expect "--json: state, pending, conflicts, metered" \
        "$(echo "$j" | "${JQ[@]}" '[(v["state"], v["pending"], v["conflicts"], v["metered"]) for v in d["result"]["volumes"]][1]')" \
        = "('online', 0, 0, False)"
expect "--json: pins" "$(echo "$j" | "${JQ[@]}" 'sorted(d["result"]["pins"])')" = \
        "['budget_bytes', 'bytes', 'count', 'resident_bytes']"
expect "--json: cache_pinned counts the pinned file" \
        "$(echo "$j" | "${JQ[@]}" 'd["result"]["volumes"][1]["cache_pinned"] > 0')" = True
expect "--json: kmod_loaded is a boolean" "$(echo "$j" | "${JQ[@]}" 'type(d["result"]["kmod_loaded"]).__name__')" = bool
expect "a user's status shows only the volume it may read" \
        "$(status_json "$user" | "${JQ[@]}" '[v["name"] for v in d["result"]["volumes"]]')" = "['lap']"
check "disconnect lap" "$FCACHECTL" disconnect "$T/mnt/proj"
for _ in $(seq 100); do "$FCACHECTL" status | grep -qE '^lap +offline +manual ' && break; sleep 0.1; done
expect "status follows: lap offline, by hand" "$("$FCACHECTL" status | grep -cE '^lap +offline +manual ')" = 1
check "reconnect lap" "$FCACHECTL" reconnect "$T/mnt/proj"

# volume list|add|remove
out=$("$FCACHECTL" volume list 2>&1)
echo "$out" | diag
expect "volume list: a header and two volumes" "$(echo "$out" | grep -cE '^(VOLUME|hid|lap) ')" = 3
expect "volume list --json" "$("$FCACHECTL" --json volume list | "${JQ[@]}" '[(v["name"], v["mountpoint"]) for v in d["result"]][0]')" \
        = "('hid', '$T/mnt2')"
expect "volume list --no-legend --output VOLUME: the names alone" \
        "$("$FCACHECTL" --no-legend --output VOLUME volume list | tr '\n' ' ')" = "hid lap "
expect "--output takes names in any case, in its order" \
        "$("$FCACHECTL" -o state,volume volume list | head -2 | tr -s ' \n' ' ')" = "STATE VOLUME online hid "
check_fails "--output with a column the table lacks: refused, naming it and the columns" \
        "'SPEED' is not a column of this table \(it has: VOLUME, STATE, MOUNTPOINT, BACKING\)" \
        "$FCACHECTL" -o VOLUME,SPEED volume list
expect "status --no-legend: the table without its header" \
        "$("$FCACHECTL" --no-legend -o VOLUME,STATE status | grep -cE '^(VOLUME|hid|lap) ')" = 2
check "volume add with KEY=VALUE words" "$FCACHECTL" volume add third "Backing=$T/srv3" \
        "Mountpoint=$T/mnt3" "CacheDir=$T/cache3" CacheSize=32M Reserve=4M
check "the new volume is mounted" wait_mounted "$T/mnt3" "$T/cache3"
expect "its NAME.conf is written" "$(grep -c "^Backing=$T/srv3\$" "$V/third.conf" 2>&1)" = 1
expect "volume list shows it" "$("$FCACHECTL" volume list | grep -c "^third .*$T/mnt3 *$T/srv3\$")" = 1
for _ in $(seq 100); do "$FCACHECTL" status | grep -q '^third ' && break; sleep 0.1; done
expect "and status" "$("$FCACHECTL" status | grep -c '^third ')" = 1
check_fails "adding it again: refused, exists" "exist" "$FCACHECTL" volume add third "Backing=$T/srv3" \
        "Mountpoint=$T/mnt3" "CacheDir=$T/cache3"
check_fails "a user may not add a volume (polkit)" "[Nn]ot authorized|org.fcache.volumes" \
        as "$user" "$FCACHECTL" volume add mine "Backing=$T/srv3" "Mountpoint=$T/mnt3" "CacheDir=$T/c4"
check_fails "nor remove one" "[Nn]ot authorized|org.fcache.volumes" as "$user" "$FCACHECTL" volume remove third
check "volume remove" "$FCACHECTL" volume remove third
for _ in $(seq 100); do mountpoint -q "$T/mnt3" || break; sleep 0.1; done
expect "it is unmounted" "$(mountpoint -q "$T/mnt3" && echo mounted)" = ""
expect "and gone from the list" "$("$FCACHECTL" volume list | grep -c '^third ')" = 0
printf '[Volume]\nBacking=%s\nMountpoint=%s\nCacheDir=%s\nCacheSize=lots\n' "$T/srv3" "$T/mnt3" "$T/cache3" > "$T/bad.conf"
check_fails "a bad NAME.conf on standard input: refused, naming the key" "CacheSize" \
        sh -c "'$FCACHECTL' volume add third - < '$T/bad.conf'"
check_fails "a word that is not KEY=VALUE: refused" "'Backing' is not KEY=VALUE" \
        "$FCACHECTL" volume add x Backing "Mountpoint=/m"
check_fails "volume with an unknown word" "unknown word 'delete'" "$FCACHECTL" volume delete x
check_fails "volume remove of no volume" "nothere|no volume|No such" "$FCACHECTL" volume remove nothere
check_fails "status takes no path" "takes no PATH" "$FCACHECTL" status /
check "fcached is alive" fcached_alive
if stop_fcached; then ok "fcached exits with status 0"
else not_ok "fcached exits with status 0"; tail -30 "$T/fcached.log" | diag; fi
finish
