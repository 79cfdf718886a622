#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# volumes.sh: fcached runs fcache volumes. A volume in the volumes directory is
# started at boot (a bad one is reported by file, line and key while the good one
# starts); commands on paths in a volume, through D-Bus and fcachectl, are served
# by its view as the caller; AddVolume/RemoveVolume are admin acts; an fcached
# killed with -9 and started again adopts the mounted view: a reader sees no error.
source "$(dirname "$0")/../own-mounts.sh"
own_mounts "$0" "$@"
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/volume-lib.sh"

V=$T/volumes.d
mkdir -p "$V" "$T/srv/proj/sub" "$T/mnt" "$T/srv2" "$T/mnt2"
chmod 755 "$T/srv" "$T/srv/proj" "$T/srv/proj/sub"
for i in 1 2 3; do head -c $((i * 200000)) /dev/urandom > "$T/srv/proj/f$i"; done
seq 1 5000 > "$T/srv/proj/sub/notes"
chmod 644 "$T/srv/proj"/f* "$T/srv/proj/sub/notes"
echo secret > "$T/srv/proj/private"; chmod 600 "$T/srv/proj/private"
cat > "$V/good.conf" <<CONF
[Volume]
Backing=$T/srv
Mountpoint=$T/mnt
CacheDir=$T/cache
CacheSize=64M
CONF
printf 'Backing=%s\nMountpoint=%s\nCacheDir=%s\nCacheSize=lots\n' "$T/srv2" "$T/mnt2" "$T/cache2" > "$V/bad.conf"

views() { pgrep -f "fcache-view --config $T/" || true; }

start_bus || exit 1
PIN_GATE=$T/pin-gate
export FCACHE_FAULT_PAUSE=view-pin-file:$PIN_GATE
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "the good volume is mounted by fcached" wait_mounted "$T/mnt" "$T/cache"
expect "it is an fcache view" "$(findmnt -no FSTYPE "$T/mnt")" = fuse.fcache
check "the bad volume is reported with its file, line and key" \
        grep -qE "bad.conf:4: CacheSize" "$T/fcached.log"
expect "the bad volume is not mounted" "$(mountpoint -q "$T/mnt2" && echo yes || echo no)" = no
expect "ListVolumes lists the good volume" "$(call ListVolumes | grep -o "\"good\" \"$T/mnt\"")" = "\"good\" \"$T/mnt\""

# commands on a volume path are the view's
res=$(control "$T/mnt/proj" "pin recursive")
expect "a recursive pin through Control fetches the tree into the store" "$(echo "$res" | jget files)" = 5
expect "its result names the volume" "$(echo "$res" | jget volume)" = good
res=$(control "$T/mnt/proj/f3" "query cached")
expect "query cached on a volume file is the store's view: complete" "$(echo "$res" | jget cached)" = complete
expect "... and pinned" "$(echo "$res" | jget pinned)" = yes
expect "... of the right size" "$(echo "$res" | jget cached_bytes)" = 600000
expect "query state is the view's" "$(control "$T/mnt" "query state" | jget mountpoint)" = "$T/mnt"
if [ -x "${FCACHECTL:-}" ]; then
        out=$("$FCACHECTL" query cached "$T/mnt/proj/sub/notes" 2>&1)
        expect "fcachectl on a volume path goes to fcached" "$(echo "$out" | grep -c 'fcached')" -ge 1
        expect "... and shows the store's copy" "$(echo "$out" | grep -cw complete)" -ge 1
fi

# a pin run as an operation: progress from the view, and Cancel undoes it
mkdir -p "$T/srv/many"; chmod 755 "$T/srv/many"
for i in $(seq 1 3000); do echo "small file $i" > "$T/srv/many/s$i"; done
opstate() { busctl --system get-property "$BUS" "$1" org.fcache.Operation1 State | cut -d'"' -f2; }
wait_op() { for _ in $(seq 600); do [ "$(opstate "$1")" != running ] && return 0; sleep 0.05; done; return 1; }
# The walk waits after its first file while the gate exists (fault.h).
touch "$PIN_GATE"
op=$(call Pin sbub "$T/mnt/many" true 100 false | cut -d'"' -f2)
expect "Pin on a volume returns an operation" "${op%/*}" = /org/fcache/Manager1/operation
for _ in $(seq 600); do [ -e "$PIN_GATE.reached" ] && break; sleep 0.05; done
check "the view's pin walk is held after a file" test -e "$PIN_GATE.reached"
for _ in $(seq 200); do
        done_n=$(busctl --system get-property "$BUS" "$op" org.fcache.Operation1 FilesDone | cut -d' ' -f2)
        [ "${done_n:-0}" -gt 0 ] && break; sleep 0.05
done
expect "its FilesDone grows while the view fetches" "${done_n:-0}" -gt 0
check "Cancel is accepted" busctl --system call "$BUS" "$op" org.fcache.Operation1 Cancel
rm -f "$PIN_GATE"
check "the operation ends" wait_op "$op"
expect "... cancelled" "$(opstate "$op")" = cancelled
expect "FilesSeen is the tree's file count, from the view's admission walk" \
        "$(busctl --system get-property "$BUS" "$op" org.fcache.Operation1 FilesSeen | cut -d' ' -f2)" = 3000
pinned_after=0
for i in 1 2 3 500 1500 3000; do
        [ "$(control "$T/mnt/many/s$i" "query cached" | jget pinned)" = yes ] && pinned_after=$((pinned_after + 1))
done
expect "a cancelled pin leaves none of its files pinned" "$pinned_after" = 0
expect "... and records no pin" "$(control "$T/mnt" "query pinned" | jget pin | grep -c many)" = 0
op=$(call Pin sbub "$T/mnt/many" true 100 false | cut -d'"' -f2)
check "the same pin, not cancelled, ends" wait_op "$op"
expect "... done" "$(opstate "$op")" = done
expect "... with every file done" "$(busctl --system get-property "$BUS" "$op" org.fcache.Operation1 FilesDone | cut -d' ' -f2)" = 3000
expect "... and its files pinned" "$(control "$T/mnt/many/s1500" "query cached" | jget pinned)" = yes

# flush all reaches every volume's store, and keeps pins
control "$T/mnt/proj" "unpin recursive" >/dev/null
res=$(control / "flush all")
expect "flush all names the volume" "$(echo "$res" | jget flushed_volume)" = good
expect "... and drops its unpinned store copies" "$(echo "$res" | jget volume_objects_flushed)" -ge 5
expect "... so an unpinned file is no longer in the store" "$(control "$T/mnt/proj/f3" "query cached" | jget cached)" = no
expect "... while a pinned one stays" "$(control "$T/mnt/many/s7" "query cached" | jget cached)" = complete
control "$T/mnt/proj" "pin recursive" >/dev/null

# the caller's own access: through the view, as the caller
make_user U fcvol
res=$(as "$U" busctl --system call "$BUS" "$OBJ" org.fcache.Manager1 Control 'ssa{sv}' "$T/mnt/proj/private" "query cached" 0 2>&1)
expect "another user cannot query a file they cannot read" "$(echo "$res" | grep -c 'AccessDenied\|ermission denied')" -ge 1
res=$(as "$U" busctl --system --json=short call "$BUS" "$OBJ" org.fcache.Manager1 Control 'ssa{sv}' "$T/mnt/proj/f1" "query cached" 0 2>&1)
expect "... but can query one they can read" "$(echo "$res" | jget cached)" = complete

# AddVolume and RemoveVolume: admin acts, checked configs
mkdir -p "$T/srv3" "$T/mnt3"; echo three > "$T/srv3/t"; chmod 755 "$T/srv3"; chmod 644 "$T/srv3/t"
conf3=$(printf '[Volume]\nBacking=%s\nMountpoint=%s\nCacheDir=%s\n' "$T/srv3" "$T/mnt3" "$T/cache3")
check_fails "an unprivileged user may not add a volume" "Not authorized" \
        as "$U" busctl --system call "$BUS" "$OBJ" org.fcache.Manager1 AddVolume ss three "$conf3"
check_fails "a bad config is refused, naming the key" "CacheSize" \
        call AddVolume ss three "$conf3
CacheSize=much"
expect "... and leaves no file behind" "$(ls "$V" | grep -c three)" = 0
check_fails "a bad volume name is refused" "not a volume name" call AddVolume ss "../x" "$conf3"
check "root adds a volume" call AddVolume ss three "$conf3"
check "... which fcached mounts" wait_mounted "$T/mnt3" "$T/cache3"
expect "... serving the backing" "$(cat "$T/mnt3/t")" = three
expect "... with its NAME.conf written" "$(ls "$V/three.conf")" = "$V/three.conf"
check_fails "a second volume of that name is refused" "exists" call AddVolume ss three "$conf3"
check_fails "an unprivileged user may not remove a volume" "Not authorized" \
        as "$U" busctl --system call "$BUS" "$OBJ" org.fcache.Manager1 RemoveVolume s three
check "root removes it" call RemoveVolume s three
for _ in $(seq 100); do mountpoint -q "$T/mnt3" || break; sleep 0.05; done
expect "... and its view unmounts" "$(mountpoint -q "$T/mnt3" && echo mounted || echo gone)" = gone
expect "... and its NAME.conf is gone" "$(ls "$V" | grep -c three)" = 0
check_fails "removing an unknown volume says so" "no volume named" call RemoveVolume s nosuch

# kill -9 of fcached: the view keeps serving; the next fcached adopts it
holder=$(pgrep -f "^$FCACHE_VIEW --config $V/good.conf" | head -1)
exec 8< "$T/mnt/proj/sub/notes"
read -r first <&8
kill -9 "$FCACHED_PID"; wait "$FCACHED_PID" 2>/dev/null; FCACHED_PID=
expect "with fcached dead the volume stays mounted" "$(mountpoint -q "$T/mnt" && echo yes)" = yes
expect "... and an open file keeps reading" "$(head -n 1 <&8)" = 2
start_fcached --volumes-dir="$V" --view="$FCACHE_VIEW" || exit 1
check "the new fcached adopts the running view" grep -q "Volume good: adopted" "$T/fcached.log"
expect "... the same holder serves it" "$(pgrep -f "^$FCACHE_VIEW --config $V/good.conf" | head -1)" = "$holder"
expect "... and the reader still reads" "$(tail -n 1 <&8)" = 5000
exec 8<&-
expect "... and commands reach it" "$(control "$T/mnt/proj/f2" "query cached" | jget cached)" = complete
check "RemoveVolume stops an adopted view" call RemoveVolume s good
for _ in $(seq 100); do mountpoint -q "$T/mnt" || break; sleep 0.05; done
expect "... which unmounts" "$(mountpoint -q "$T/mnt" && echo mounted || echo gone)" = gone
st=0; stop_fcached || st=$?
expect "fcached stops cleanly" "$st" = 0
[ "$st" = 0 ] || tail -20 "$T/fcached.log" | diag
finish
