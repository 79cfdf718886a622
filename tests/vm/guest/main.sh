#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# main.sh: the guest side of the fcache VM tests (run by tests/vm/init as
# the process after switch_root).  Sets up tmpfs, an ext4 loop image and
# NFSv4.2 over loopback (kernel nfsd), loads fcache.ko, checks each command
# for its real effect, unloads, and leaves TAP lines and dmesg in /results.
. "$(dirname "$0")/preamble.sh"

# ---- setup ---------------------------------------------------------------
setup_nfs
mkdir -p /mnt/ext4 /mnt/tmpfs
mount -t tmpfs -o size=512m tmpfs /mnt/tmpfs
truncate -s 256M /srv/ext4.img
mkfs.ext4 -q -F /srv/ext4.img
mount -o loop /srv/ext4.img /mnt/ext4
chmod 1777 /mnt/tmpfs /mnt/ext4
diag "guest mounts: $(awk '{ print $3 }' /proc/self/mounts | sort -u | tr '\n' ' ')"
ts setup

check "insmod fcache.ko" insmod "$FCACHE_KO" repin_ms=300
check "family fcache resolves" fc family
mods_before=$(cut -d' ' -f1 /proc/modules | sort)

# ---- per filesystem ------------------------------------------------------
for fs in tmpfs ext4 nfs; do
	d=/mnt/$fs
	src=$d; [ $fs = nfs ] && src=/srv/export
	mkfile $d/a 8
	mkfile $d/b 8
	sync

	if [ $fs = tmpfs ]; then
		check "$fs: flush refuses (the pages are the data)" \
			expect_err 95 flush $d/a
		check "$fs: query sees the 2048 pages" eq "$(cached $d/a)" 2048
	else
		fc flush $d/a
		check "$fs: flush drops the pages" eq "$(cached $d/a)" 0
		fc prefetch $d/a
		check "$fs: prefetch caches the whole file" \
			eq "$(cached $d/a)" "$(total $d/a)"
		check "$fs: query says fs type" eq "$(fc_key fs_type query $d/a)" \
			"$(case $fs in nfs) echo nfs4 ;; *) echo $fs ;; esac)"
		fc flush $d/a
		check "$fs: flush drops them again" eq "$(cached $d/a)" 0
	fi

	# a file bigger than one chunk is prefetched by an asynchronous job
	mkfile $d/big 24
	[ $fs != tmpfs ] && fc flush $d/big
	fc prefetch $d/big
	check "$fs: async prefetch of 24 MiB completes (job)" \
		eq "$(key pages_cached)" 6144
	check "$fs: the 24 MiB prefetch ran as a job" ge "$(key async_job)" 1

	# dirty pages are visible while the writer keeps the file open
	start_writer $d/w
	fc query $d/w
	dirty=$(( $(key pages_dirty || :)0 / 10 + $(key pages_unstable)0 / 10 + $(key pages_writeback)0 / 10 ))
	if [ $fs = tmpfs ]; then
		check "$fs: written pages are cached" eq "$(key pages_cached)" 1024
	else
		check "$fs: dirty pages visible after a write ($dirty)" ge $dirty 1
		fc flush $d/w
		check "$fs: flush of the open, dirty file" eq "$(cached $d/w)" 0
		check "$fs: server copy matches after flush" cmp -s $d/w $src/w
	fi
	stop_writer

	# memory pins survive drop_caches, unpinned pages do not
	fc prefetch $d/a
	fc prefetch $d/b
	fc -m pin $d/a
	check "$fs: memory pin holds all pages" eq "$(key pages_held)" 2048
	drop_caches
	check "$fs: memory-pinned file survives drop_caches" eq "$(cached $d/a)" 2048
	if [ $fs != tmpfs ]; then
		check "$fs: unpinned file does not" eq "$(cached $d/b)" 0
	fi
	check "$fs: query reports pinned=3 (pinned|memory)" \
		eq "$(fc_key pinned query $d/a)" 3
	[ $fs != tmpfs ] && check "$fs: flush of a pinned file is refused (EBUSY)" \
		expect_err 16 flush $d/a
	check "$fs: unpin" fc unpin $d/a
	check "$fs: query reports pinned=0 after unpin" \
		eq "$(fc_key pinned query $d/a)" 0
	if [ $fs != tmpfs ]; then
		drop_caches
		check "$fs: after unpin drop_caches drops it" eq "$(cached $d/a)" 0
	fi

	# a plain pin keeps the open file, not the pages
	check "$fs: plain pin" fc pin $d/b
	check "$fs: plain pin shows pinned=1" eq "$(fc_key pinned query $d/b)" 1
	check "$fs: unpin of the plain pin" fc unpin $d/b
	check "$fs: unpin again is ENOENT" expect_err 2 unpin $d/b

	# over-budget memory pin fails with ENOSPC and says why
	fc limits
	budget=$(key pin_budget)
	fc limits-set pin_budget=4194304
	check "$fs: memory pin over the budget fails (ENOSPC)" \
		expect_err 28 -m pin $d/a
	check "$fs: ... with a reason" eval 'echo "$LAST" | grep -q "budget"'
	check "$fs: ... and pins nothing" eq "$(fc_key pinned query $d/a)" 0
	fc limits-set pin_budget=$budget

	# FLUSH on a directory takes its subtree
	if [ $fs != tmpfs ]; then
		mkdir -p $d/tree/x/y
		for i in 1 2 3 4 5 6 7 8 9 10; do
			mkfile $d/tree/x/y/f$i 1
			mkfile $d/tree/f$i 1
		done
		fc -r query $d/tree
		check "$fs: recursive query sums the subtree" ge "$(key pages_cached)" 5120
		fc flush $d/tree
		check "$fs: directory flush reports the files" ge "$(key files)" 20
		fc -r query $d/tree
		check "$fs: directory flush drops the subtree" eq "$(key pages_cached)" 0
	fi

	# FLUSH_VOLUME
	if [ $fs != tmpfs ]; then
		fc prefetch $d/a
		fc prefetch $d/b
		check "$fs: flush-volume" fc flush-volume $d
		check "$fs: flush-volume dropped a" eq "$(cached $d/a)" 0
		check "$fs: flush-volume dropped b" eq "$(cached $d/b)" 0
	fi

	# permissions for an unprivileged user
	mkfile $d/secret 1
	chmod 600 $d/secret
	chown 0:0 $d/secret
	fc prefetch $d/secret
	check "$fs: uid 1000 may not query a 0600 root file (EPERM)" \
		expect_user_err 1 query $d/secret
	check "$fs: uid 1000 may not prefetch it (EACCES)" \
		expect_user_err 13 prefetch $d/secret
	check "$fs: uid 1000 may not flush it (EACCES)" \
		expect_user_err 13 flush $d/secret
	check "$fs: uid 1000 may not pin it (EACCES)" \
		expect_user_err 13 pin $d/secret
	chmod 644 $d/secret
	check "$fs: uid 1000 may not query a 0644 root file either (cachestat rule)" \
		expect_user_err 1 query $d/secret
	check "$fs: uid 1000 may prefetch a readable file" fc_user prefetch $d/secret
	check "$fs: uid 1000 needs CAP_IPC_LOCK for memory pins (EPERM)" \
		expect_user_err 1 -m pin $d/secret
	check "$fs: uid 1000 may not flush the volume (EPERM)" \
		expect_user_err 1 flush-volume $d
	check "$fs: uid 1000 may not flush all (EPERM)" \
		expect_user_err 1 flush-all $d
	check "$fs: uid 1000 may not set limits (EPERM)" \
		expect_user_err 1 limits-set pin_budget=1
	check "$fs: uid 1000 may read limits" fc_user limits
	as_user sh -c "dd if=/dev/zero of=$d/mine bs=4k count=4 status=none"
	check "$fs: uid 1000 may query its own file" fc_user query $d/mine
	check "$fs: uid 1000 may pin its own file" fc_user pin $d/mine
	check "$fs: root's unpin of it is allowed" fc unpin $d/mine
	fc pin $d/secret
	check "$fs: uid 1000 may not unpin root's pin (EPERM)" \
		expect_user_err 1 unpin $d/secret
	fc unpin $d/secret

	# O_PATH targets that must not be opened for I/O
	ln -sf a $d/link
	check "$fs: query a symlink itself (O_PATH|O_NOFOLLOW)" \
		eq "$(fc_key files -h query $d/link)" 0
	check "$fs: prefetch on a symlink itself is EINVAL" \
		expect_err 22 -h prefetch $d/link
	check "$fs: query through the symlink follows it" \
		eq "$(fc_key pages_total query $d/link)" 2048
	ts "$fs done"
done

# ---- device nodes, flush all, sessions, pin list -------------------------
check "query /dev/null (O_PATH, not opened)" fc query /dev/null
check "prefetch /dev/null is EINVAL (device never opened)" \
	expect_err 22 prefetch /dev/null
check "memory pin of /dev/null is EINVAL" expect_err 22 -m pin /dev/null
check "plain pin of /dev/null keeps the node" fc pin /dev/null
check "unpin /dev/null" fc unpin /dev/null

fc prefetch /mnt/nfs/a
fc prefetch /mnt/ext4/a
check "flush-all with the NFS mount" fc flush-all /mnt/nfs
check "flush-all flushed one superblock" eq "$(key supers)" 1
check "flush-all dropped the NFS file" eq "$(cached /mnt/nfs/a)" 0
check "flush-all left ext4 alone" eq "$(cached /mnt/ext4/a)" 2048
check "flush-all of ext4 only is EOPNOTSUPP (not a network fs)" \
	expect_err 95 flush-all /mnt/ext4
check "flush-all with a mount list" fc flush-all /mnt/nfs /mnt/ext4 /mnt/tmpfs
mods_after=$(cut -d' ' -f1 /proc/modules | sort)
check "flush-all loaded no filesystem module" eq "$mods_after" "$mods_before"

fc -s pin /mnt/ext4/a
check "session pin is released when its socket closes" \
	eq "$(fc_key pinned query /mnt/ext4/a)" 0
fc pin /mnt/ext4/a
check "plain pin outlives its socket" eq "$(fc_key pinned query /mnt/ext4/a)" 1
fc pin-list
check "pin-list shows the pin's path" eval 'echo "$LAST" | grep -q "^path=/mnt/ext4/a$"'
id=$(key pin_id)
check "unpin by id" fc unpin id=$id
check "pin count back to 0" eq "$(fc_key pin_count limits)" 0

check "dry-run pin reports the room needed" \
	eq "$(fc_key bytes_read -m -n pin /mnt/ext4/a)" 8388608
check "dry-run pins nothing" eq "$(fc_key pinned query /mnt/ext4/a)" 0

# a pinned NFS file whose pages the server side replaced is re-pinned
fc -m pin /mnt/nfs/a
dd if=/dev/urandom of=/srv/export/a bs=1M count=8 conv=notrunc status=none
sleep 2
cat /mnt/nfs/a > /dev/null
# the module's periodic check (repin_ms) re-pins in the background
repinned() { fc query /mnt/nfs/a; [ "$(key pages_held):$(key pages_stale)" = 2048:0 ]; }
check "NFS: memory pin re-pinned after a server-side change" wait_for 120 repinned
check "NFS: the client sees the server's new data" cmp -s /mnt/nfs/a /srv/export/a
fc unpin /mnt/nfs/a

# a fatal signal to the client interrupts an asynchronous prefetch
mkfile /mnt/nfs/huge 64
fc flush /mnt/nfs/huge
$FCNL prefetch /mnt/nfs/huge > /dev/null &
ppid=$!
sleep 0.5
kill -9 $ppid
wait $ppid 2>/dev/null
sleep 1
check "module still answers after a killed prefetch" fc limits

# the path a user takes: the fcachectl CLI, routed to the module
. "$GUEST_DIR/ctl.sh"
ctl_checks kmod

. "$GUEST_DIR/cull.sh"

# ---- unload, and 20 load/use/unload cycles with no leak -------------------
filp() { awk '$1 == "filp" { print $2 }' /proc/slabinfo; }
check "rmmod fcache" rmmod fcache
ts "main done"
# the same through the user-space backend, now that the family is gone
ctl_checks user
drop_caches
filp0=$(filp)
for i in $(seq 20); do
	insmod "$FCACHE_KO" || break
	$FCNL -m pin /mnt/ext4/a /mnt/nfs/b > /dev/null
	$FCNL pin /mnt/ext4/tree/f1 /mnt/ext4/tree/f2 /mnt/ext4/tree/f3 /dev/null > /dev/null
	$FCNL prefetch /mnt/nfs/big > /dev/null
	$FCNL query /mnt/tmpfs/a > /dev/null
	[ "$(cat /sys/module/fcache/refcnt)" = 0 ] || break
	rmmod fcache || break
done
check "20 load/pin/unload cycles" eq "$i" 20
drop_caches
filp1=$(filp)
check "no leaked files after the cycles (filp $filp0 -> $filp1)" \
	[ $((filp1 - filp0)) -lt 60 ]
check "ext4 unmounts (no inode held)" umount /mnt/ext4
check "NFS unmounts (no inode held)" umount /mnt/nfs
ts "cycles done"

finish
