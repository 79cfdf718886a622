#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# compare.sh: one command on one path means one thing whichever backend
# serves it.  On NFSv4.2 (and an overlay whose lower layer is on it, and a
# tmpfs), the same fcachectl steps run from the same cache state with
# fcache.ko loaded and after rmmod; compare-results.py compares outcome,
# keys and counts step by step and writes the matrix (shown as diag lines,
# with each command's time).  Then what flush all may reach: only the
# mounts of the caller's namespace, never the guest's 9p root under its
# overlay, nor another namespace's NFS superblock.  Last, a SIGTERM during
# a long prefetch recursive under the module ends fcachectl (interrupted),
# also while the module's read waits on a stalled device.
. "$(dirname "$0")/preamble.sh"
. "$GUEST_DIR/ctl.sh"

setup_nfs
d=/mnt/nfs/cmp
mkdir -p $d/tree/sub /mnt/nfs/ovl-lower
mkfile $d/a 8
mkfile $d/b 8
for i in 1 2 3 4 5; do mkfile $d/tree/f$i 1; mkfile $d/tree/sub/f$i 1; done
mkfile /mnt/nfs/ovl-lower/x 2
mkdir -p /run/ovl/u /run/ovl/w /mnt/ovl /mnt/tmpfs
mount -t overlay -o lowerdir=/mnt/nfs/ovl-lower,upperdir=/run/ovl/u,workdir=/run/ovl/w \
	overlay /mnt/ovl || diag "overlay mount failed"
mount -t tmpfs tmpfs /mnt/tmpfs
mkfile /mnt/tmpfs/t 1
sync
ts setup

# step ARGS...: fcachectl -j ARGS, saved as the next step of backend $be
step() {
	sn=$((sn + 1))
	_t=$(ms)
	ctl "$@"
	printf '%s\t%s\t%s\n%s\n' "$*" "$CRC" $(( $(ms) - _t )) "$LAST" > /tmp/cmp/$be/$sn
}

steps() {
	be=$1 sn=0
	mkdir -p /tmp/cmp/$be
	drop_caches
	step query cached $d/a
	step prefetch $d/a
	step query cached $d/a
	step flush $d/a
	step query cached $d/a
	step prefetch $d/tree
	step query cached $d/tree
	step prefetch recursive $d/tree
	step query cached recursive $d/tree
	step flush $d/tree
	step query cached recursive $d/tree
	step prefetch $d/a
	step prefetch $d/b
	step flush volume $d
	step query cached recursive $d
	step prefetch $d/a
	step prefetch recursive $d/tree
	step flush all
	step query cached $d/a
	# the directory commands right after a flush all
	step prefetch recursive $d/tree
	step query cached recursive $d/tree
	step flush $d/tree
	step prefetch recursive $d/tree
	step flush $d
	step prefetch $d/a
	step flush callbacks $d/a
	step flush callbacks $d/tree
	# an overlay with its lower layer on NFS: no superblock of its own to flush
	step prefetch /mnt/ovl/x
	step query cached /mnt/ovl/x
	step flush volume /mnt/ovl
	step query cached /mnt/ovl/x
	step flush /mnt/ovl/x
	# the pages of tmpfs are its data
	step flush /mnt/tmpfs/t
	step flush /mnt/tmpfs
	step flush volume /mnt/tmpfs
	step query cached /mnt/tmpfs/t
	# not regular files
	step query cached /dev/null
	step prefetch /dev/null
	step flush /dev/null
}

check "insmod fcache.ko" insmod "$FCACHE_KO"
steps kmod

# a pinned file alone is refused, and a directory flush says what it kept
ctl pin $d/a
ctl prefetch $d/a
ctl flush $d/a
check "kmod: flush of a pinned file: EBUSY" eq "$(cerr)" 1:EBUSY
ctl flush $d
check "kmod: flush of its directory keeps it and says so (files_pinned=1)" \
	eq "$(cerr):$(ckey files_pinned):$(incore $d/a)" 0:OK:1:2048
ctl flush volume $d
check "kmod: flush volume keeps it and says so (files_pinned=1)" \
	eq "$(cerr):$(ckey files_pinned):$(incore $d/a)" 0:OK:1:2048
ctl unpin $d/a

# flush callbacks gives NFSv4 delegations back (the server's view: nfsd's
# client states); a file in use, as the command's own target is, gives it
# back at its last close
delegs() { cat /proc/fs/nfsd/clients/*/states 2>/dev/null | grep -c "type: deleg"; }
cat $d/b > /dev/null
held=$(delegs)
diag "delegations nfsd granted after reading $d/b: $held"
if [ "$held" -ge 1 ]; then
	ctl flush callbacks $d
	ret=$(ckey delegations_returned)
	check "kmod: flush callbacks of the directory returns delegations now ($ret of $held)" \
		eval '[ "$(cerr):$(ckey callbacks_released)" = 0:OK:yes ] && ge "$ret" 1'
	check "kmod: ... the server holds that many fewer" eq "$(delegs)" $((held - ret))
	base=$(delegs)
	cat $d/b > /dev/null
	ctl flush callbacks $d/b
	check "kmod: flush callbacks of the file: returned at its last close, says why" \
		eval '[ "$(cerr):$(ckey callbacks_released):$(ckey delegations_returned_at_close)" = 0:OK:no:1 ] &&
			echo "$LAST" | grep -q "last user closes"'
	check "kmod: ... and once the command has closed it, the server has it back" \
		eq "$(delegs)" "$base"
else
	notok "kmod: nfsd granted no read delegation to test flush callbacks with"
fi
ctl flush callbacks /mnt/tmpfs/t
check "kmod: flush callbacks on tmpfs: nothing to give back, says so" \
	eval '[ "$(cerr):$(ckey callbacks_released)" = 0:OK:no ] &&
		echo "$LAST" | grep -q "grants no leases"'

# flush all reaches the caller's mounts only
mkdir -p /mnt/nfs2
unshare -m --propagation private sh -c '
	mount -t nfs4 -o vers=4.2,nosharecache 127.0.0.1:/ /mnt/nfs2 || exit 1
	cat /mnt/nfs2/cmp/b > /dev/null
	touch /run/ns.ready
	while [ ! -e /run/ns.done ]; do sleep 0.1; done
	fincore -n -o PAGES /mnt/nfs2/cmp/b | tr -d " " > /run/ns.pages
	umount /mnt/nfs2' &
nspid=$!
while [ ! -e /run/ns.ready ] && kill -0 $nspid 2>/dev/null; do sleep 0.1; done
# a visible 9p mount (the results share, this once) puts 9p among the types:
# the guest's root, 9p too, must still not be flushed (it was, and every
# command after it re-read its binaries over 9p: 11 s for fcachectl
# --version, 52 s for a prefetch recursive of 10 files)
mkdir -p /mnt/9p
mount -t 9p -o trans=virtio,version=9p2000.L results /mnt/9p
cat "$FCACHECTL" > /dev/null
root_pages=$(incore "$FCACHECTL")
ctl prefetch $d/a
ctl flush all
check "kmod: flush all names the mounts it flushed: /mnt/nfs and /mnt/9p, 2 superblocks" \
	eval '[ "$(cerr):$(ckey mounts):$(ckey supers)" = 0:OK:2:2 ] &&
		echo "$LAST" | grep -q "\"mount\":\[\"/mnt/nfs\",\"/mnt/9p\"\]"'
check "kmod: ... dropped the NFS file" eq "$(incore $d/a)" 0
check "kmod: ... not the guest's 9p root under its overlay ($root_pages pages of fcachectl)" \
	eq "$(incore "$FCACHECTL")" "$root_pages"
umount /mnt/9p
touch /run/ns.done
wait $nspid
check "kmod: ... nor another namespace's NFS superblock" eq "$(cat /run/ns.pages)" 2048

# SIGTERM during a long prefetch recursive: fcachectl catches it (so it is
# never fatal), and the module's reads must still let it go.  The tree,
# 4000 sparse files of 8 MiB (32 GiB, 16 times the guest's memory), cannot
# be read before the signal; the bound is a hang guard, not a time limit.
mkdir -p /srv/export/long
(cd /srv/export/long && truncate -s 8M $(seq -f f%g 1 4000))
drop_caches
$FCACHECTL -q -j prefetch recursive /mnt/nfs/long > /run/long.out 2> /run/long.err &
lpid=$!
# under way once it has its sockets to the module (its handler is set by then)
i=0
while [ $i -lt 600 ] && kill -0 $lpid 2>/dev/null &&
	! ls -l /proc/$lpid/fd 2>/dev/null | grep -q socket:; do sleep 0.1; i=$((i + 1)); done
sleep 1
term_wait $lpid 6000
diag "kmod: prefetch recursive of 32 GiB, SIGTERM: gone=$TERM_GONE in $TERM_MS ms, exit $TERM_RC, stderr: $(tail -n 1 /run/long.err)"
check "kmod: SIGTERM during a long prefetch recursive ends fcachectl (exit 130, says interrupted)" \
	eval '[ "$TERM_GONE:$TERM_RC" = yes:130 ] && grep -q "interrupted" /run/long.err'
rm -rf /srv/export/long
drop_caches

# A stalled server: dm-delay holds every read of an ext4 for 600 s (its
# files' data on the disk only, written with O_DIRECT; the metadata in
# memory).  The module's read waits killably, as on a stalled NFS or CIFS
# server; fcachectl must leave on SIGTERM while that read is still held,
# not once it returns.  A suspend of the device then lets the reads go.
# reads dm-delay holds now (its status: reads, writes, flushes held); the
# guest has no udev, so the device is named by its kernel name (dm-N)
stall_held() { dmsetup status fcstall | awk '{print $4}'; }
modprobe dm-delay
truncate -s 64M /run/stall.img
sdev=$(losetup -f --show /run/stall.img)
ssz=$(blockdev --getsz $sdev)
if dmsetup create --noudevsync fcstall --table "0 $ssz delay $sdev 0 0" &&
	sdm=$(dmsetup info -c --noheadings -o blkdevname fcstall) &&
	mkfs.ext4 -q -E lazy_itable_init=0,lazy_journal_init=0 /dev/$sdm &&
	mkdir -p /mnt/stall && mount -o noatime /dev/$sdm /mnt/stall; then
	mkdir -p /mnt/stall/t
	for i in 1 2 3 4; do
		dd if=/dev/urandom of=/mnt/stall/t/f$i bs=1M count=1 oflag=direct status=none
	done
	sync
	dmsetup suspend --noudevsync fcstall
	dmsetup reload fcstall --table "0 $ssz delay $sdev 0 600000 $sdev 0 0"
	dmsetup resume --noudevsync fcstall
	$FCACHECTL -q -j prefetch recursive /mnt/stall/t > /run/stall.out 2> /run/stall.err &
	spid=$!
	i=0
	while [ $i -lt 600 ] && kill -0 $spid 2>/dev/null && [ "$(stall_held)" = 0 ]; do
		sleep 0.1; i=$((i + 1))
	done
	held=$(stall_held)
	term_wait $spid 600
	still=$(stall_held)
	diag "kmod: prefetch recursive, reads held by dm-delay: $held, SIGTERM: gone=$TERM_GONE in $TERM_MS ms, exit $TERM_RC, reads still held: $still, stderr: $(tail -n 1 /run/stall.err)"
	check "kmod: SIGTERM while the module's read is held by a stalled device ends fcachectl (exit 130, says interrupted)" \
		eval '[ "$TERM_GONE:$TERM_RC" = yes:130 ] && grep -q "interrupted" /run/stall.err'
	check "kmod: ... before the held read came back" eval '[ "$held" -ge 1 ] && [ "$still" -ge 1 ]'
	# suspending dm-delay sends the held reads on; the cancelled jobs end
	dmsetup suspend --noudevsync --nolockfs fcstall
	dmsetup reload fcstall --table "0 $ssz delay $sdev 0 0"
	dmsetup resume --noudevsync fcstall
	i=0
	until umount /mnt/stall 2>/dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
	check "the stalled device unmounts (the module let go of its files)" \
		eval '! grep -q " /mnt/stall " /proc/mounts'
else
	notok "kmod: a dm-delay device to stall reads on"
fi
dmsetup remove --noudevsync fcstall
losetup -d $sdev
check "rmmod fcache" rmmod fcache

steps user
/usr/bin/python3 "$GUEST_DIR/compare-results.py" /tmp/cmp > /tmp/cmp/verdicts
while IFS= read -r line; do
	case $line in
	PASS*) ok "same with and without fcache.ko: ${line#PASS }" ;;
	*) LAST=$line; notok "same with and without fcache.ko: $(echo "${line#FAIL }" | cut -d: -f1)" ;;
	esac
done < /tmp/cmp/verdicts
while IFS= read -r line; do diag "$line"; done < /tmp/cmp/matrix.txt
umount /mnt/ovl
check "NFS unmounts (nothing held)" umount /mnt/nfs
finish
