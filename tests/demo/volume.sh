# SPDX-License-Identifier: LGPL-2.1-or-later
# volume.sh: the fcache-volume part of the demo (sourced by run.sh with fcached up on
# the private bus; uses its $top, $demo, $fc and step). A local directory plays the
# server; fcached serves it as an fcache volume: a FUSE view (fcache-view) with a
# persistent local store that pins fill completely.
ctl=$top/build/daemon/fcache-view-ctl
srv=$demo/server2 vol=$demo/vol cache=$demo/cache
mkdir -p "$srv/report/data" "$vol"
chmod 755 "$srv" "$srv/report" "$srv/report/data"
seq -f 'line %g of the plan' 1 2000 > "$srv/report/plan.txt"
for i in $(seq 1 8); do head -c $((i * 100000)) /dev/urandom > "$srv/report/data/part$i.bin"; done
cat > "$demo/demo.conf" <<CONF
# An fcache volume, as /etc/fcache/volumes.d/demo.conf holds it.
[Volume]
Backing=$srv
Mountpoint=$vol
CacheDir=$cache
CacheSize=64M
Reserve=8M
AttrLease=2s
CONF
echo
echo "An fcache volume: fcached serves $vol from the 'server' $srv, with its store in $cache."
step cat "$demo/demo.conf"
step busctl call org.fcache.Manager1 /org/fcache/Manager1 org.fcache.Manager1 AddVolume ss demo "$(cat "$demo/demo.conf")"
for _ in $(seq 200); do [ -S "$cache/control.sock" ] && mountpoint -q "$vol" && break; sleep 0.05; done
step busctl call org.fcache.Manager1 /org/fcache/Manager1 org.fcache.Manager1 ListVolumes
step findmnt -no FSTYPE,OPTIONS "$vol"
step "$fc" pin recursive dry-run "$vol/report"
step "$fc" pin recursive priority 500 "$vol/report"
step "$fc" query cached "$vol/report/data/part8.bin"
step "$fc" query cache "$vol"
echo
echo "A write through the view goes through to the server and updates the store:"
echo "line 2001, written through the view" >> "$vol/report/plan.txt"
step tail -n 1 "$srv/report/plan.txt"
step "$fc" query cached "$vol/report/plan.txt"
echo
echo "A pin that cannot fit in CacheSize minus Reserve fails at once, with the size it needs:"
head -c 60M /dev/zero > "$srv/big.img"
step "$fc" pin "$vol/big.img"
echo
echo "kill -9 of the serving process: the view's holder keeps the FUSE connection, a new"
echo "worker takes it over, and a reader in the middle of a file sees a pause, not an error."
exec 7< "$vol/report/plan.txt"
head -n 1 <&7 >/dev/null
worker=$("$ctl" "$cache" 'query state' | sed -n 's/^pid=//p')
kill -9 "$worker"
step sh -c "tail -n 1 <&7"
exec 7<&-
step "$fc" query state "$vol"
source "$top/tests/demo/offline.sh"
step busctl call org.fcache.Manager1 /org/fcache/Manager1 org.fcache.Manager1 RemoveVolume s demo
for _ in $(seq 100); do mountpoint -q "$vol" || break; sleep 0.05; done
