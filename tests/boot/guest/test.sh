#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# test.sh: the boot test in the guest, run by fcache-boot-test.service once per
# boot (systemd is PID 1; dbus-daemon, polkitd, nfs-kernel-server are the
# guest's own).  /xfer is the exchange disk made by the host: the packages, the
# module, this script; the TAP lines go to /xfer/tap and to the console.
#   boot 1: install the packages (their postinst starts fcached), D-Bus
#           activation, systemctl start/status, journalctl; write the volume
#           (Backing= on the fstab NFS mount); reboot.
#   boot 2: fcache.ko loaded by modules-load.d, the volume up after the mount,
#           polkit, restart keeps the view serving a reader; stop the NFS
#           server for the next boot; reboot.
#   boot 3: NFS server down: the boot is not held, the volume is up offline
#           from its store; apt-get remove fcache stops everything; power off.
set -u
X=/xfer
S=/var/lib/fcache-boot-test
mkdir -p "$S"
boot=$(( $(cat "$S/boot" 2>/dev/null || echo 0) + 1 ))
echo "$boot" > "$S/boot"
V=/mnt/vol
BUS=(org.fcache.Manager1 /org/fcache/Manager1 org.fcache.Manager1)
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

emit() { echo "$*" >> "$X/tap"; echo "$*" > /dev/ttyS0; }
ok() { emit "ok - boot $boot: $*"; }
not_ok() { emit "not ok - boot $boot: $*"; }
diag() { sed "s/^/# boot $boot: /" | while IFS= read -r l; do emit "$l"; done; }
check() { local what=$1; shift; if "$@" >"$S/out" 2>&1; then ok "$what"; else not_ok "$what"; diag < "$S/out"; return 1; fi; }
expect() { local what=$1; shift; if [ "$@" ]; then ok "$what"; else not_ok "$what"; echo "test: [ $* ]" | diag; fi; }
# up to 90 s (a busy TCG guest is slow)
wait_for() { local end=$((SECONDS + 90)); while [ $SECONDS -lt $end ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done; return 1; }
vol_state() { timeout 30 fcachectl query state "$V" 2>/dev/null | sed -n 's/^state[=: ]*//p' | head -1; }
is_view_mounted() { findmnt -n -t fuse.fcache "$V" >/dev/null; }
fcache_mounts() { awk '{ for (i = 7; $i != "-"; i++) ; if ($(i + 1) == "fuse.fcache") print $5 }' /proc/self/mountinfo; }
view_pids() { for e in /proc/[0-9]*/exe; do [ "$(readlink "$e" 2>/dev/null)" = /usr/libexec/fcache/fcache-view ] && { p=${e#/proc/}; echo "${p%/exe}"; }; done | sort; }
mono() { systemctl show -P "$2" "$1"; }
finish() { # reboot|poweroff
	journalctl -b --no-pager > "$X/journal-$boot.txt" 2>&1
	dmesg > "$X/dmesg-$boot.txt"
	[ "$1" = poweroff ] && { echo done > "$X/done"; emit "GUEST-DONE"; }
	sync
	systemctl --no-block "$1"
	exit 0
}

# A guard: a step that hangs must not hold the boot forever; the host sees what
# was done, the journal and the missing lines.
( sleep 600; emit "not ok - boot $boot: the test did not end within 600 s"; finish poweroff ) &
emit "# boot $boot: $(awk '{ print "test started " int($1) " s after the kernel" }' /proc/uptime)"
expect "systemd is PID 1" "$(cat /proc/1/comm)" = systemd
case $boot in
1)
	check "dbus-daemon is running" systemctl is-active dbus.service
	check "the NFS share from fstab is mounted (loopback nfs-kernel-server)" findmnt -n -t nfs4 /mnt/nfs
	# The module: built on the host for this kernel, installed where DKMS would put
	# it, loaded at boot by the modules-load.d file that fcache-dkms ships.
	mkdir -p "/lib/modules/$(uname -r)/updates/dkms" /usr/lib/modules-load.d
	cp "$X/fcache.ko" "/lib/modules/$(uname -r)/updates/dkms/"
	cp "$X/modules-load.conf" /usr/lib/modules-load.d/fcache.conf
	depmod -a
	check "modprobe fcache" modprobe fcache
	check "dpkg -i fcache libfcachectl0" dpkg -i "$X"/debs/fcache_*.deb "$X"/debs/libfcachectl0_*.deb
	check "the postinst enabled fcached" systemctl is-enabled fcached.service
	check "the postinst started fcached" systemctl is-active fcached.service
	check "the postinst made /var/lib/fcache and /var/cache/fcache (tmpfiles)" test -d /var/lib/fcache -a -d /var/cache/fcache

	# D-Bus activation: stopped, then a call on the bus starts it.
	check "systemctl stop fcached" systemctl stop fcached.service
	expect "fcached is stopped" "$(systemctl is-active fcached.service)" = inactive
	check "a call on org.fcache.Manager1 (busctl) is answered" busctl get-property "${BUS[@]}" Version
	check "D-Bus activation started fcached.service" systemctl is-active fcached.service
	check "dbus-daemon logged the activation through systemd" \
		sh -c "journalctl -b -u dbus.service | grep -q \"Activating via systemd: service name='org.fcache.Manager1'\""
	check "systemctl stop; systemctl start fcached" sh -c 'systemctl stop fcached && systemctl start fcached && systemctl is-active fcached'
	check "systemctl status fcached: active (running)" sh -c 'systemctl status --no-pager fcached | grep -q "Active: active (running)"'
	systemctl status --no-pager fcached 2>&1 | head -12 | diag
	check "journalctl -u fcached shows its starts" \
		sh -c 'test "$(journalctl -b -u fcached --no-pager | grep -c "Started fcached.service\|Started fcache daemon")" -ge 2'
	journalctl -b -u fcached --no-pager | tail -8 | diag

	# The volume, served from the NFS share; applies from the next boot.
	mkdir -p /srv/nfs/proj/sub
	echo "version 1" > /srv/nfs/proj/doc
	seq 1 20000 > /srv/nfs/proj/sub/big
	chmod -R a+rX /srv/nfs
	mkdir -p /etc/fcache/volumes.d "$V"
	cat > /etc/fcache/volumes.d/nfs.conf <<CONF
[Volume]
Backing=/mnt/nfs/proj
Mountpoint=$V
CacheDir=/var/cache/fcache/nfs
CacheSize=64M
Server=localhost
CONF
	# A second volume on the share's mountpoint itself.
	mkdir -p /mnt/vol2
	cat > /etc/fcache/volumes.d/nfsroot.conf <<CONF
[Volume]
Backing=/mnt/nfs
Mountpoint=/mnt/vol2
CacheDir=/var/cache/fcache/nfsroot
CacheSize=64M
Server=localhost
CONF
	finish reboot ;;
2)
	check "fcache.ko loaded at boot (modules-load.d)" grep -q '^fcache ' /proc/modules
	check "systemd-modules-load inserted it" sh -c "journalctl -b --no-pager | grep -q \"systemd-modules-load.*Inserted module 'fcache'\""
	check "fcached is active at boot (enabled)" systemctl is-active fcached.service
	expect "fcached sees the module (KmodLoaded)" "$(busctl get-property "${BUS[@]}" KmodLoaded)" = "b true"
	m=$(mono mnt-nfs.mount ActiveEnterTimestampMonotonic) f=$(mono fcached.service ExecMainStartTimestampMonotonic)
	expect "fcached started after the NFS mount ($m < $f us)" "$m" -gt 0 -a "$m" -lt "$f"
	check "the volume's view is mounted" wait_for is_view_mounted ||
		journalctl -b -u fcached --no-pager | tail -20 | diag
	check "the volume is online" wait_for sh -c "[ \"\$(timeout 30 fcachectl query state $V | sed -n 's/^state[=: ]*//p')\" = online ]"
	expect "the view serves the NFS file" "$(cat $V/doc 2>&1)" = "version 1"
	# polkit: queries are allowed to anyone, disconnect needs an administrator.
	check "polkit: uid 1000 may query the volume" sh -c "runuser -u tester -- fcachectl query state $V >$S/out 2>&1" ||
		diag < "$S/out"
	check "polkit: uid 1000 may not disconnect it" sh -c "! runuser -u tester -- fcachectl disconnect $V"
	check "polkitd answered (started by the bus)" systemctl is-active polkit.service
	check "pin recursive on the volume (root)" fcachectl pin recursive "$V"
	check "the second volume (Backing= the mountpoint) is mounted" wait_for findmnt -n -t fuse.fcache /mnt/vol2
	check "the second volume is online" wait_for sh -c "[ \"\$(timeout 30 fcachectl query state /mnt/vol2 | sed -n 's/^state[=: ]*//p')\" = online ]"
	check "pin recursive on the second volume" fcachectl pin recursive /mnt/vol2/proj

	# restart: the view keeps serving an open reader and new opens.
	views=$(view_pids) old=$(systemctl show -P MainPID fcached)
	exec 3< "$V/sub/big"
	head -n 100 <&3 >/dev/null
	( n=0; while [ ! -e "$S/stop-reader" ]; do
		[ "$(cat $V/doc 2>/dev/null)" = "version 1" ] || n=$((n + 1)); sleep 0.1
	  done; echo $n > "$S/reader-fails" ) &
	rpid=$!
	check "systemctl restart fcached" systemctl restart fcached.service
	check "fcached is active again" systemctl is-active fcached.service
	expect "a new fcached process" "$(systemctl show -P MainPID fcached)" != "$old"
	sleep 2
	touch "$S/stop-reader"; wait $rpid
	expect "a reader looping on the view saw no error across the restart" "$(cat "$S/reader-fails")" = 0
	expect "the file open across the restart reads to its end" "$(tail -n 1 <&3)" = 20000
	exec 3<&-
	expect "the same view processes serve (not restarted)" "$(view_pids)" = "$views"
	check "the new fcached adopted the view (query state through it)" wait_for sh -c "[ \"\$(timeout 30 fcachectl query state $V | sed -n 's/^state[=: ]*//p')\" = online ]"
	systemd-analyze security --no-pager fcached.service 2>&1 | tail -1 | diag

	# Next boot without the NFS server.
	check "stop and mask nfs-server for the next boot" systemctl mask nfs-server.service
	finish reboot ;;
3)
	expect "the NFS share is not mounted (server down)" "$(findmnt -n -t nfs4 /mnt/nfs | wc -l)" = 0
	systemctl --failed --no-pager 2>&1 | diag
	f=$(mono fcached.service ExecMainStartTimestampMonotonic)
	expect "fcached started within 180 s of boot ($f us)" "$f" -gt 0 -a "$f" -lt 180000000
	check "fcached is active" systemctl is-active fcached.service
	# The second volume, Backing= the share's mountpoint: an empty directory of the
	# root filesystem now, which the view tells from its server.
	check "the second volume's view is mounted" wait_for findmnt -n -t fuse.fcache /mnt/vol2
	check "the second volume is offline" wait_for sh -c "[ \"\$(timeout 30 fcachectl query state /mnt/vol2 | sed -n 's/^state[=: ]*//p')\" = offline ]"
	timeout 30 fcachectl query state /mnt/vol2 2>&1 | diag
	expect "its pinned file reads from the store" "$(cat /mnt/vol2/proj/doc 2>&1)" = "version 1"
	expect "its pinned big file too" "$(tail -n 1 /mnt/vol2/proj/sub/big 2>&1)" = 20000
	# The first, Backing= a directory of the share (fcache.volume(5)'s example):
	# the directory does not exist while the share is not mounted.
	# The view's worker cannot open Backing= (ENOENT): a stand-in directory, and it
	# starts offline from its store.
	if wait_for is_view_mounted && wait_for sh -c "[ \"\$(timeout 30 fcachectl query state $V | sed -n 's/^state[=: ]*//p')\" = offline ]" &&
	   [ "$(cat $V/doc 2>&1)" = "version 1" ]; then
		ok "the volume on a directory of the share is up offline, its pinned file reads from the store"
	else
		emit "not ok - boot $boot: the volume on a directory of the share is up offline, its pinned file reads from the store"
		journalctl -b -u fcached --no-pager | grep -m 3 "Backing" | diag
	fi

	check "apt-get remove fcache" env DEBIAN_FRONTEND=noninteractive apt-get remove -y fcache
	expect "no fcache mount is left" "$(fcache_mounts | wc -l)" = 0
	expect "no fcache-view process is left" "$(view_pids | wc -l)" = 0
	expect "fcached is not running" "$(pgrep -x fcached | wc -l)" = 0
	expect "the unit is gone or inactive" "$(systemctl is-active fcached.service)" != active
	finish poweroff ;;
*)
	not_ok "unexpected boot"; finish poweroff ;;
esac
