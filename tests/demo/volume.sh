# SPDX-License-Identifier: LGPL-2.1-or-later
# volume.sh: the fcache-volume part of the demo (sourced by run.sh; uses its $top,
# $demo and step). A local directory plays the server; fcache-view serves it as an
# fcache volume: a FUSE view with a persistent local store that pins fill completely.
view=$top/build/daemon/fcache-view ctl=$top/build/daemon/fcache-view-ctl
srv=$demo/server2 vol=$demo/vol cache=$demo/cache
mkdir -p "$srv/report/data" "$vol"
seq -f 'line %g of the plan' 1 2000 > "$srv/report/plan.txt"
for i in $(seq 1 8); do head -c $((i * 100000)) /dev/urandom > "$srv/report/data/part$i.bin"; done
cat > "$demo/demo.conf" <<CONF
# An fcache volume, as /etc/fcache/volumes.d/demo.conf would hold it.
[Volume]
Backing=$srv
Mountpoint=$vol
CacheDir=$cache
CacheSize=64M
Reserve=8M
AttrLease=2s
CONF
echo
echo "An fcache volume: fcache-view serves $vol from the 'server' $srv, with its store in $cache."
step cat "$demo/demo.conf"
"$view" --config "$demo/demo.conf" 2>"$demo/view.log" & view_pid=$!
for _ in $(seq 200); do [ -S "$cache/control.sock" ] && mountpoint -q "$vol" && break; sleep 0.05; done
stop_view() {
        [ -n "${view_pid:-}" ] && kill "$view_pid" 2>/dev/null && { wait "$view_pid" 2>/dev/null || true; }
        view_pid=
}
step findmnt -no FSTYPE,OPTIONS "$vol"
step "$ctl" "$cache" 'pin recursive dry-run' report
step "$ctl" "$cache" 'pin recursive priority 500' report
step "$ctl" "$cache" 'query cached' report/data/part8.bin
step "$ctl" "$cache" 'query cache'
echo
echo "A write through the view goes through to the server and updates the store:"
echo "line 2001, written through the view" >> "$vol/report/plan.txt"
step tail -n 1 "$srv/report/plan.txt"
step "$ctl" "$cache" 'query cached' report/plan.txt
echo
echo "A pin that cannot fit in CacheSize minus Reserve fails at once, with the size it needs:"
head -c 60M /dev/zero > "$srv/big.img"
step "$ctl" "$cache" 'pin' big.img
echo
echo "kill -9 of the serving process: the holder keeps the FUSE connection, a new worker"
echo "takes it over, and a reader in the middle of a file sees a pause, not an error."
exec 7< "$vol/report/plan.txt"
head -n 1 <&7 >/dev/null
worker=$("$ctl" "$cache" 'query state' | sed -n 's/^pid=//p')
kill -9 "$worker"
step sh -c "tail -n 1 <&7"
exec 7<&-
step "$ctl" "$cache" 'query state'
stop_view
echo
echo "(Disconnected operation, offline edits, reintegration and conflict resolution are"
echo "built as libraries, libfcache-offline and merge/, with their own tests; wiring them"
echo "into the volume is the next step.)"
