#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# daemon-pins.sh: fcached drives fcache.ko for the pins of a plain mount.
# fcached runs on a private system bus with polkitd; a recursive pin made
# through it (fcachectl goes to fcached when it runs) on NFSv4.2 shows in
# the module's own pin list, takes in a file created later, survives an
# fcached restart, comes back after rmmod + insmod, and KmodLoaded follows
# the module; without the module fcached holds the pin itself.
. "$(dirname "$0")/preamble.sh"
SRC=$(cd "$GUEST_DIR/../../.." && pwd)
B=/run/fcd
BUS=org.fcache.Manager1
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$B/system_bus_socket
export ASAN_OPTIONS=detect_leaks=0
setup_nfs

# wait_for SECONDS CMD...: until CMD succeeds (the module is polled, the
# new file is pinned from an inotify event: no fixed delay can be trusted
# under TCG)
wait_for() { _n=$(( $1 * 5 )); shift; while [ $_n -gt 0 ]; do "$@" && return 0; sleep 0.2; _n=$((_n - 1)); done; return 1; }
has_name() { busctl --system status "$1" >/dev/null 2>&1; }
kmod_prop() { busctl --system get-property $BUS /org/fcache/Manager1 $BUS KmodLoaded 2>&1; }
listed() { $FCNL pin-list | grep -q "^path=$1\$"; }
nlisted() { $FCNL pin-list | grep -c "^path=/mnt/nfs/pins/"; }
ctl() { LAST=$("$FCACHECTL" "$@" 2>&1); }
start_fcached() {
	"$FCACHED" --state-dir=$B/state --operation-linger=5 >> $B/fcached.log 2>&1 &
	fpid=$!
	wait_for 60 has_name $BUS
}
stop_fcached() { kill $fpid; wait $fpid; }

mkdir -p $B/services $B/polkit $B/state
sed -e "s|@DIR@|$B|g" -e "s|@SRCDIR@|$SRC|g" "$SRC/tests/dbus/system-bus.conf.in" > $B/bus.conf
dbus-daemon --config-file=$B/bus.conf --nofork --nopidfile 2> $B/bus.log &
bpid=$!
wait_for 30 test -S $B/system_bus_socket
# polkitd with the project's actions only (the guest's root is a tmpfs overlay)
cp "$SRC/dbus/org.fcache.policy" $B/polkit/
mount --bind $B/polkit /usr/share/polkit-1/actions
/usr/lib/polkit-1/polkitd --no-debug > $B/polkit.log 2>&1 &
ppid=$!
check "polkitd is on the private bus" wait_for 60 has_name org.freedesktop.PolicyKit1

insmod "$FCACHE_KO"
mkdir -p /mnt/nfs/pins/sub
mkfile /mnt/nfs/pins/a 1
mkfile /mnt/nfs/pins/sub/b 1
check "fcached starts" start_fcached
check "KmodLoaded is true with the module loaded" eq "$(kmod_prop)" "b true"

ctl pin recursive /mnt/nfs/pins
diag "$LAST"
check "fcachectl pin goes through fcached" eval 'echo "$LAST" | grep -q "^backend=fcached"'
check "the module's pin list has the pinned files" eval 'listed /mnt/nfs/pins/a && listed /mnt/nfs/pins/sub/b'
ctl query pinned /mnt/nfs/pins/a
check "query pinned answers from the module: pinned, memory" \
	eval 'echo "$LAST" | grep -q "^pinned=yes" && echo "$LAST" | grep -q "^pin_mode=memory"'
mkfile /mnt/nfs/pins/c 1
check "a file created later in the pinned tree is pinned in the kernel" \
	wait_for 60 listed /mnt/nfs/pins/c

ctl set cache-size 96M /mnt/nfs/pins
diag "$LAST"
fc limits
check "set cache-size sets the module's pin budget" eq "$(key pin_budget)" $((96 << 20))

stop_fcached
check "the kernel pins stay while fcached is stopped" eq "$(nlisted)" 3
check "fcached starts again" start_fcached
check "after the restart the pins are there once each" eq "$(nlisted)" 3
ctl query pinned /mnt/nfs/pins
check "query pinned counts the pins under the tree" eval 'echo "$LAST" | grep -q "^pins=[1-9]"'

rmmod fcache
check "rmmod with fcached's pins" eval '! test -e /sys/module/fcache'
check "KmodLoaded turns false" wait_for 60 eval '[ "$(kmod_prop)" = "b false" ]'
sync; echo 3 > /proc/sys/vm/drop_caches
check "without the module fcached holds the files resident itself" \
	wait_for 60 eval '[ "$(incore /mnt/nfs/pins/a)" = 256 ]'
insmod "$FCACHE_KO"
check "KmodLoaded turns true again" wait_for 60 eval '[ "$(kmod_prop)" = "b true" ]'
check "the pins are re-applied through the new module" \
	wait_for 60 eval '[ "$(nlisted)" = 3 ]'
fc limits
check "the budget set with set cache-size is the new module's too" \
	eq "$(key pin_budget)" $((96 << 20))

ctl unpin recursive /mnt/nfs/pins
check "fcachectl unpin goes through fcached" eval 'echo "$LAST" | grep -q "^backend=fcached"'
check "the kernel pins are gone" eq "$(nlisted)" 0
stop_fcached
check "fcached exits cleanly" true

kill $ppid $bpid 2>/dev/null
wait $ppid $bpid 2>/dev/null
umount /usr/share/polkit-1/actions
tail -n 30 $B/fcached.log | while IFS= read -r l; do diag "fcached: $l"; done
rmmod fcache
check "NFS unmounts (nothing held)" umount /mnt/nfs
finish
