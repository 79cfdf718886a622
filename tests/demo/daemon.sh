# SPDX-License-Identifier: LGPL-2.1-or-later
# daemon.sh: the fcached part of the demo (sourced by run.sh after its own steps;
# uses its $top, $demo, $mnt, $fc and step). This machine has no system bus, so the
# demo starts a private one with fcache's bus policy, polkitd with fcache's polkit
# actions (in a private mount namespace), and fcached on it; all three are stopped
# at the end.
fcached=$top/build/daemon/fcached/fcached
bus_dir=$demo/bus
mkdir -p "$bus_dir/services" "$bus_dir/polkit/actions" "$bus_dir/polkit/rules.d"
chmod 755 "$demo" "$bus_dir"
sed -e "s|@DIR@|$bus_dir|g" -e "s|@SRCDIR@|$top|g" "$top/tests/dbus/system-bus.conf.in" > "$bus_dir/bus.conf"
cp "$top/dbus/org.fcache.policy" "$bus_dir/polkit/actions/"
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$bus_dir/system_bus_socket
daemon_pids=()
stop_daemons() {
        for ((i = ${#daemon_pids[@]} - 1; i >= 0; i--)); do
                kill "${daemon_pids[i]}" 2>/dev/null && { wait "${daemon_pids[i]}" 2>/dev/null || true; }
        done
        daemon_pids=()
        # polkitd's private mount namespace holds a copy of the demo's FUSE mount until
        # the kernel has torn it down: unmount here, retrying, from outside the mount.
        cd "$demo"
        for _ in $(seq 20); do fusermount3 -u "$mnt" 2>/dev/null && break; sleep 0.1; done
}
dbus-daemon --config-file="$bus_dir/bus.conf" --nofork --nopidfile 2>/dev/null & daemon_pids+=($!)
for _ in $(seq 100); do [ -S "$bus_dir/system_bus_socket" ] && break; sleep 0.05; done
unshare -m --propagation private sh -c "mount --bind $bus_dir/polkit/actions /usr/share/polkit-1/actions &&
  mount --bind $bus_dir/polkit/rules.d /etc/polkit-1/rules.d && exec /usr/lib/polkit-1/polkitd --no-debug" \
        >/dev/null 2>&1 & daemon_pids+=($!)
for _ in $(seq 100); do busctl --system status org.freedesktop.PolicyKit1 >/dev/null 2>&1 && break; sleep 0.05; done
"$fcached" --state-dir="$demo/state" --volumes-dir="$demo/volumes.d" \
        --view="$top/build/daemon/fcache-view" 2>"$demo/fcached.log" & daemon_pids+=($!)
for _ in $(seq 100); do busctl --system status org.fcache.Manager1 >/dev/null 2>&1 && break; sleep 0.05; done
echo
echo "fcached is on a private system bus now; pins on this plain mount are held by it."
step "$fc" pin recursive proj/doc
step "$fc" query pinned proj/doc/notes2.txt
echo "new notes" > proj/doc/notes6.txt
sleep 0.5
step "$fc" query pinned proj/doc/notes6.txt
step busctl call org.fcache.Manager1 /org/fcache/Manager1 org.fcache.Manager1 Query ssb "$mnt/proj/doc" pinned false
step busctl get-property org.fcache.Manager1 /org/fcache/Manager1 org.fcache.Manager1 PinCount PinnedBytes
step "$fc" set cache-size 1G /
step "$fc" unpin recursive proj/doc
step "$fc" disconnect proj
# (fcached stays up for the volume part, volume.sh; run.sh stops it.)

