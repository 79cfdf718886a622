#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# metered.sh: on a metered connection (python3-dbusmock's NetworkManager with
# Metered set to yes) the hoard walks of a volume with the default Metered=pause
# wait, while those of a volume with Metered=ignore go on; the Volume1 objects'
# Metered property and fcachectl status follow NetworkManager; writes still
# reach the server; once the connection is not metered the paused volume's walk
# fetches what changed. A bad Metered= value is refused, naming it. The walks'
# effect is seen in the store: a pinned file grown on the server is fetched.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"
[ -x "${FCACHECTL:-}" ] || skip_all "FCACHECTL is not set to the fcachectl binary"
/usr/bin/python3 -c 'import dbusmock' 2>/dev/null || skip_all "python3-dbusmock is not installed"
NMCALL=(gdbus call --system --dest org.freedesktop.NetworkManager --object-path /org/freedesktop/NetworkManager)
GROWN=$((2 * 1024 * 1024))

V=$T/volumes.d
mkdir -p "$V" "$T/srv/proj" "$T/mnt" "$T/srv2/proj" "$T/mnt2"
chmod 755 "$T/srv" "$T/srv/proj" "$T/srv2" "$T/srv2/proj"
echo small > "$T/srv/proj/f"
echo small > "$T/srv2/proj/f"
chmod 644 "$T/srv/proj/f" "$T/srv2/proj/f"
volume_conf lap "" HoardInterval=1s
volume_conf ign 2 HoardInterval=1s Metered=ignore
# used DIR: the bytes the volume's store holds (query cache, through fcached).
used() { "$FCACHECTL" --json query cache "$1" | /usr/bin/python3 -c '
import json, sys; print(json.load(sys.stdin)["results"][0]["result"]["used"])'; }
metered_prop() { busctl --system get-property "$BUS" "/org/fcache/volume/$1" org.fcache.Volume1 Metered | cut -d' ' -f2; }
wait_prop() { for _ in $(seq 150); do [ "$(metered_prop "$1")" = "$2" ] && return 0; sleep 0.1; done; return 1; }
wait_used() { for _ in $(seq 300); do [ "$(used "$1")" -ge "$2" ] 2>/dev/null && return 0; sleep 0.1; done; return 1; }

start_bus || exit 1
/usr/bin/python3 -m dbusmock --system --template networkmanager >"$T/nm.log" 2>&1 & PIDS+=($!)
wait_name org.freedesktop.NetworkManager || { diag < "$T/nm.log"; exit 1; }
# The template has no Metered: NM_METERED_NO (4) until the test says yes (1).
"${NMCALL[@]}" --method org.freedesktop.DBus.Mock.AddProperty org.freedesktop.NetworkManager Metered '<uint32 4>' >/dev/null
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "volume lap is mounted" wait_mounted "$T/mnt" "$T/cache"
check "volume ign is mounted" wait_mounted "$T/mnt2" "$T/cache2"
check "the view answers query state" wait_state online
check "pin lap's directory" "$FCACHECTL" pin recursive "$T/mnt/proj"
check "pin ign's directory" "$FCACHECTL" pin recursive "$T/mnt2/proj"
expect "not metered: Volume1.Metered false" "$(metered_prop lap)" = false

"${NMCALL[@]}" --method org.freedesktop.DBus.Mock.UpdateProperties org.freedesktop.NetworkManager \
        "{'Metered': <uint32 1>}" >/dev/null
check "NetworkManager Metered yes: lap's Volume1.Metered follows" wait_prop lap true
check "and ign's" wait_prop ign true
expect "fcachectl status shows it" "$("$FCACHECTL" status | grep -cE '^(lap|ign) .* yes +/')" = 2
# The views are told in a worker after the property changed: wait for fcached's word.
for _ in $(seq 100); do [ "$(grep -c 'is metered' "$T/fcached.log")" -ge 2 ] && break; sleep 0.1; done
sleep 1.5   # a hoard walk that began before the view was told may still end
before=$(used "$T/mnt")
head -c $GROWN /dev/zero > "$T/srv/proj/f"
head -c $GROWN /dev/zero > "$T/srv2/proj/f"
check "Metered=ignore: ign's hoard walk fetches the grown file" wait_used "$T/mnt2" $GROWN
# ign's walk ran (HoardInterval=1s): lap's, paused, fetched nothing meanwhile.
expect "Metered=pause: lap's store did not grow ($before)" "$(used "$T/mnt")" -lt $GROWN
echo "written while metered" > "$T/mnt/proj/new"
expect "writes still reach the server" "$(cat "$T/srv/proj/new" 2>&1)" = "written while metered"

"${NMCALL[@]}" --method org.freedesktop.DBus.Mock.UpdateProperties org.freedesktop.NetworkManager \
        "{'Metered': <uint32 4>}" >/dev/null
check "not metered again: Volume1.Metered false" wait_prop lap false
check "lap's hoard walk resumes and fetches the grown file" wait_used "$T/mnt" $GROWN
"${NMCALL[@]}" --method org.freedesktop.DBus.Mock.UpdateProperties org.freedesktop.NetworkManager \
        "{'Metered': <uint32 3>}" >/dev/null
check "Metered guessed yes counts as metered" wait_prop lap true

check_fails "Metered= with a bad value is refused, naming it" "Metered: 'sometimes' is neither pause" \
        "$FCACHECTL" volume add bad "Backing=$T/srv" "Mountpoint=$T/mnt3" "CacheDir=$T/cache3" Metered=sometimes
check "fcached is alive" fcached_alive
if stop_fcached; then ok "fcached exits with status 0"
else not_ok "fcached exits with status 0"; tail -30 "$T/fcached.log" | diag; fi
finish
