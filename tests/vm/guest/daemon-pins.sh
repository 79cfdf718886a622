#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# daemon-pins.sh: fcached drives fcache.ko for the pins of a plain mount.
# fcached runs on a private system bus with polkitd; a recursive pin made
# through it (fcachectl goes to fcached when it runs, so polkit decides) on
# NFSv4.2 shows in the module's own pin list (and fcached's query pinned
# says what the module says), takes in a file created
# later, survives an fcached restart, is held by fcached itself (resident)
# after rmmod and comes back in the kernel after insmod; KmodLoaded and the
# budget set with set cache-size follow the module.  Without fcached,
# fcachectl pins through the module, whose own checks apply.
. "$(dirname "$0")/preamble.sh"
SRC=$(cd "$GUEST_DIR/../../.." && pwd)
B=/run/fcd
BUS=org.fcache.Manager1
D=/mnt/nfs/pins
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$B/system_bus_socket
export ASAN_OPTIONS=detect_leaks=0
# NFSv4's grace period (90 s) would stall the first opens: the server has no
# clients to wait for
modprobe nfsd
mkdir -p /proc/fs/nfsd && mount -t nfsd nfsd /proc/fs/nfsd &&
	echo 10 > /proc/fs/nfsd/nfsv4gracetime && umount /proc/fs/nfsd
setup_nfs

# wait_for SECONDS CMD...: poll CMD until it succeeds (the module is polled
# for by fcached, a new file is pinned from an inotify event)
wait_for() {
	_end=$(( $(date +%s) + $1 )); shift
	until "$@"; do [ "$(date +%s)" -lt $_end ] || return 1; sleep 0.1; done
}
has_name() {
	[ "$(busctl --system call org.freedesktop.DBus /org/freedesktop/DBus \
		org.freedesktop.DBus NameHasOwner s "$1" 2>/dev/null)" = "b true" ]
}
kmod_prop() { busctl --system get-property $BUS /org/fcache/Manager1 $BUS KmodLoaded 2>&1; }
kmod_is() { [ "$(kmod_prop)" = "b $1" ]; }
# the module's pins under $D: their paths, one a line
klist() { $FCNL pin-list | sed -n "s|^path=$D/||p" | sort; }
nlisted() { klist | grep -c .; }
listed() { klist | grep -qx "$1"; }
# ctl ARGS...: fcachectl as a script runs it (JSON, no password agent), the
# JSON in LAST and the exit status in CRC
ctl() { LAST=$("$FCACHECTL" --no-ask-password -q -j "$@" 2>/dev/null </dev/null); CRC=$?; }
ctl_user() {
	LAST=$(as_user "$FCACHECTL" --no-ask-password -q -j "$@" 2>/dev/null </dev/null); CRC=$?
}
ckey() {
	printf '%s\n' "$LAST" | sed -n "s/.*[{,]\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p" | head -n 1
}
# cerr: CRC:OK, or CRC:ERRNO-NAME of a failed result
cerr() {
	case $LAST in
	*'"ok":false'*) echo "$CRC:$(ckey name)" ;;
	*'"ok":true'*) echo "$CRC:OK" ;;
	*) echo "$CRC:no-result" ;;
	esac
}
# dq PATH: query pinned over D-Bus (fcached's answer), busctl's text in LAST;
# bkey KEY: KEY's value in it
dq() {
	LAST=$(busctl --system call $BUS /org/fcache/Manager1 $BUS Control 'ssa{sv}' \
		"$1" "query pinned" 0 2>&1)
}
bkey() { printf '%s\n' "$LAST" | grep -o "\"$1\" [a-z] [^ ]*" | head -n 1 | cut -d' ' -f3 | tr -d '"'; }
start_fcached() {
	"$FCACHED" --state-dir=$B/state --operation-linger=5 >> $B/fcached.log 2>&1 &
	fpid=$!
	wait_for 60 has_name $BUS
}
stop_fcached() { kill $fpid && wait $fpid; }
resident_bytes() { ctl query pinned $D; ckey resident_bytes; }

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
mkdir -p $D/sub
mkfile $D/a 1
mkfile $D/sub/b 1
mkfile /mnt/nfs/mine 1
chown 1000:1000 /mnt/nfs/mine
mkfile /mnt/nfs/secret 1
chmod 600 /mnt/nfs/secret
sync
check "fcached starts" start_fcached
check "KmodLoaded is true with the module loaded" kmod_is true

ctl pin recursive $D
check "fcachectl pin recursive goes through fcached" \
	eq "$(cerr):$(ckey backend):$(ckey files)" 0:OK:fcached:2
check "the module's pin list has the pinned files" eq "$(klist | tr '\n' ' ')" "a sub/b "
ctl query pinned $D/a
check "query pinned (the module's answer) sees fcached's pin: memory, 256 pages held" \
	eq "$(ckey backend):$(ckey pinned):$(ckey pin_mode):$(ckey pages_held)" kmod:yes:memory:256
dq $D/a
check "fcached's query pinned (D-Bus) gives the same answer: memory, 256 pages held" \
	eq "$(bkey backend):$(bkey pinned):$(bkey pin_mode):$(bkey pages_held)" fcached:yes:memory:256
mkfile $D/c 1
check "a file created later in the pinned tree is pinned in the kernel" wait_for 30 listed c
ctl_user pin /mnt/nfs/mine
check "uid 1000's pin through fcached: polkit refuses it (no session, no agent)" \
	eq "$(cerr):$(printf '%s' "$LAST" | grep -c 'Not authorized for org.fcache.pin')" 1:EPERM:1

ctl set cache-size 96M $D
check "set cache-size through fcached" eq "$(cerr):$(ckey kmod_pin_budget_bytes)" \
	0:OK:$((96 << 20))
fc limits
check "... sets the module's pin budget" eq "$(key pin_budget)" $((96 << 20))

check "fcached stops (exit status 0)" stop_fcached
check "the kernel pins stay while fcached is stopped" eq "$(nlisted)" 3
ctl_user pin /mnt/nfs/mine
check "without fcached uid 1000's pin goes to the module directly" \
	eq "$(cerr):$(ckey backend):$(ckey pinned)" 0:OK:kmod:yes
ctl_user pin /mnt/nfs/secret
check "... whose own checks apply: a file uid 1000 cannot read is EACCES" \
	eq "$(cerr)" 1:EACCES
check "fcached starts again" start_fcached
dq /mnt/nfs/mine
check "fcached's query pinned sees the module's pin of a direct caller" \
	eq "$(bkey pinned):$(bkey pin_mode)" yes:plain
fc unpin /mnt/nfs/mine
check "after the restart the kernel pins are there once each" eq "$(klist | tr '\n' ' ')" \
	"a c sub/b "
ctl query pinned $D
check "query pinned on the tree counts its 3 pins" eq "$(cerr):$(ckey pins)" 0:OK:3

rmmod fcache
check "rmmod with fcached's pins" eval '! test -e /sys/module/fcache'
check "KmodLoaded turns false" wait_for 30 kmod_is false
check "fcached holds the 3 files resident itself" \
	wait_for 30 eval '[ "$(resident_bytes)" = $((3 << 20)) ]'
drop_caches
check "... and their pages stay after drop_caches (fincore)" \
	eq "$(incore $D/a):$(incore $D/sub/b):$(incore $D/c)" 256:256:256
insmod "$FCACHE_KO"
check "KmodLoaded turns true again" wait_for 30 kmod_is true
check "the pins are re-applied through the new module" wait_for 30 eval '[ "$(nlisted)" = 3 ]'
fc limits
check "the budget set with set cache-size is the new module's too" \
	eq "$(key pin_budget)" $((96 << 20))
ctl query pinned $D/c
check "... memory pins again" eq "$(ckey pin_mode):$(ckey pages_held)" memory:256
ctl set cache-size 2M $D
check "set cache-size 2M, below the 3 MiB held: 1 MiB released" \
	eq "$(cerr):$(ckey released_bytes):$(ckey resident_bytes)" 0:OK:$((1 << 20)):$((2 << 20))
ctl query pinned $D
check "... the module keeps the 3 pins, 2 of them memory pins" \
	eq "$(ckey pins):$(ckey pins_memory)" 3:2

ctl unpin recursive $D
check "fcachectl unpin recursive goes through fcached" \
	eq "$(cerr):$(ckey backend):$(ckey unpinned)" 0:OK:fcached:1
check "the kernel pins are gone" eq "$(nlisted)" 0
check "fcached stops again (exit status 0)" stop_fcached

kill $ppid $bpid 2>/dev/null
wait $ppid $bpid 2>/dev/null
umount /usr/share/polkit-1/actions
grep -E 'fcache.ko|Re-applied|WARNING|CRITICAL|ERROR' $B/fcached.log | tail -n 20 |
	while IFS= read -r l; do diag "fcached: $l"; done
cp $B/fcached.log "$RESULTS/" 2>/dev/null
check "rmmod" rmmod fcache
check "NFS unmounts (nothing held)" umount /mnt/nfs
finish
