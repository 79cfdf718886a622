# SPDX-License-Identifier: LGPL-2.1-or-later
# ctl.sh (sourced by main.sh): the path a user takes, the fcachectl CLI
# (fcachectl() of libfcachectl underneath) on tmpfs, ext4 and NFSv4.2.
#   ctl_checks kmod   with fcache.ko loaded: every result says backend=kmod
#   ctl_checks user   after rmmod: backend=user, the same figures where user
#                     space can give them, clear refusals where it cannot
# Page counts are checked against fincore(1) too, which asks mincore(2)
# and shares no code with either backend.

# ctl ARGS...: run fcachectl -j, keep its JSON in LAST and its status in CRC
ctl() { LAST=$($FCACHECTL -q -j "$@" 2>/dev/null); CRC=$?; }
ctl_user() { LAST=$(as_user $FCACHECTL -q -j "$@" 2>/dev/null); CRC=$?; }
# ckey KEY: KEY of the (single) result in LAST
ckey() {
	printf '%s\n' "$LAST" | sed -n "s/.*[{,]\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p" | head -n 1
}
# cerr: the errno name of a failed result, OK if it succeeded
cerr() {
	case $LAST in
	*'"ok":false'*) echo "$CRC:$(ckey name)" ;;
	*'"ok":true'*) echo "$CRC:OK" ;;
	*) echo "$CRC:no-result" ;;
	esac
}
# ctl_pages FILE: pages_cached of FILE through fcachectl (LAST is kept)
ctl_pages() {
	_l=$LAST; ctl query cached "$1"; _p=$(ckey pages_cached); LAST=$_l; echo "$_p"
}

# ctl_fs BACKEND FS: the file, directory and volume commands on /mnt/FS
ctl_fs() {
	be=$1 fs=$2 d=/mnt/$2/ctl
	p="fcachectl ($be) $fs"
	rm -rf $d
	mkdir -p $d/tree/sub
	chmod 1777 $d
	mkfile $d/a 8
	mkfile $d/b 8
	for i in 1 2 3 4 5; do mkfile $d/tree/f$i 1; mkfile $d/tree/sub/f$i 1; done
	sync

	# query, flush, prefetch of one file
	ctl query cached $d/a
	check "$p: query cached answers, backend=$be, pages_total=2048" \
		eq "$(cerr):$(ckey backend):$(ckey pages_total)" 0:OK:$be:2048
	if [ $fs = tmpfs ]; then
		check "$p: all 2048 pages cached (they are the data)" \
			eq "$(ckey pages_cached):$(incore $d/a)" 2048:2048
		ctl flush $d/a
		check "$p: flush is refused: EOPNOTSUPP, exit 1" eq "$(cerr)" 1:EOPNOTSUPP
		check "$p: ... and nothing was dropped" eq "$(incore $d/a)" 2048
	else
		ctl flush $d/a
		check "$p: flush: backend=$be, pages_cached=0" \
			eq "$(cerr):$(ckey backend):$(ckey pages_cached)" 0:OK:$be:0
		check "$p: ... fincore sees 0 pages" eq "$(incore $d/a)" 0
		ctl prefetch $d/a
		check "$p: prefetch: backend=$be, pages_fetched=2048, pages_cached=2048" \
			eq "$(ckey backend):$(ckey pages_fetched):$(ckey pages_cached)" \
			$be:2048:2048
		check "$p: ... fincore sees 2048 pages" eq "$(incore $d/a)" 2048
		check "$p: query cached after the prefetch: 2048" eq "$(ctl_pages $d/a)" 2048
	fi
	check "$p: the table says 100% cached" \
		eval '$FCACHECTL -q query cached $d/a | grep -q " 100% .*$d/a\$"'

	# dirty pages of a file being written (kept open: NFS writes back on
	# close), kept dirty meanwhile (no write-back by age; the written pages
	# are far below the background threshold)
	expire=$(cat /proc/sys/vm/dirty_expire_centisecs)
	echo 360000 > /proc/sys/vm/dirty_expire_centisecs
	start_writer $d/w
	ctl query dirty $d/w
	dirty=$(( $(ckey pages_dirty)0 / 10 + $(ckey pages_writeback)0 / 10 + $(ckey pages_unstable)0 / 10 ))
	if [ $be = user ] && [ "$(ckey method)" != cachestat ] && [ "$(cerr)" != 0:OK ]; then
		# 6.1 has no cachestat(2); mincore cannot tell dirty pages apart
		check "$p: query dirty without cachestat: EOPNOTSUPP, names fcache.ko" \
			eval '[ "$(cerr)" = 1:EOPNOTSUPP ] && echo "$LAST" | grep -q "fcache.ko"'
	elif [ $fs = tmpfs ]; then
		check "$p: query dirty of a written tmpfs file: 1024 cached" \
			eq "$(cerr):$(ckey pages_cached)" 0:OK:1024
	else
		check "$p: query dirty sees the written pages ($dirty dirty/writeback/unstable)" \
			ge "$dirty" 1
		[ $be = user ] && [ $fs = nfs ] &&
			check "$p: ... and says NFS's uncommitted pages are not in its figures" \
				eq "$(ckey unstable)" not-measured
	fi
	if [ $fs != tmpfs ]; then
		ctl flush $d/w
		check "$p: flush of the open, written file leaves 0 pages" \
			eq "$(cerr):$(ckey pages_cached):$(incore $d/w)" 0:OK:0:0
		[ $fs = nfs ] && check "$p: ... the server has the data" \
			cmp -s $d/w /srv/export/ctl/w
	fi
	stop_writer
	echo $expire > /proc/sys/vm/dirty_expire_centisecs

	# directories: flush takes the subtree, prefetch the directory's own
	# files, prefetch recursive the subtree
	if [ $fs != tmpfs ]; then
		ctl flush $d/tree
		check "$p: flush of a directory: backend=$be, 0 pages cached" \
			eq "$(cerr):$(ckey backend):$(ckey pages_cached)" 0:OK:$be:0
		check "$p: ... fincore agrees (tree/sub/f5)" eq "$(incore $d/tree/sub/f5)" 0
		ctl prefetch $d/tree
		check "$p: prefetch of a directory: its 5 files, 1280 pages" \
			eq "$(ckey files):$(ckey pages_cached)" 5:1280
		check "$p: ... not the subdirectory's" eq "$(incore $d/tree/sub/f1)" 0
	fi
	ctl prefetch recursive $d/tree
	check "$p: prefetch recursive: backend=$be, 10 files, 2560 pages" \
		eq "$(ckey backend):$(ckey files):$(ckey pages_cached)" $be:10:2560
	ctl query cached recursive $d/tree
	check "$p: query cached recursive: 2560 pages" \
		eq "$(ckey backend):$(ckey pages_cached)" $be:2560
	ctl query cached $d/tree
	check "$p: query cached of the directory: its 5 files, 1280 pages" \
		eq "$(ckey files):$(ckey pages_cached)" 5:1280

	# pins: the module holds them; without it fcached would, and it is not here
	if [ $be = kmod ]; then
		ctl pin $d/a
		check "$p: pin: backend=kmod, pinned=yes, pin_mode=plain" \
			eq "$(cerr):$(ckey backend):$(ckey pinned):$(ckey pin_mode)" \
			0:OK:kmod:yes:plain
		ctl query pinned $d/a
		check "$p: query pinned: yes" eq "$(ckey backend):$(ckey pinned)" kmod:yes
		check "$p: the module lists the pin" \
			eval '$FCNL pin-list | grep -q "^path=$d/a\$"'
		if [ $fs != tmpfs ]; then
			ctl flush $d/a
			check "$p: flush of a pinned file: EBUSY, exit 1" eq "$(cerr)" 1:EBUSY
			check "$p: ... its pages stay" eq "$(incore $d/a)" 2048
		fi
		ctl pin $d/b
		ctl query pinned $d
		check "$p: query pinned of the directory: 2 pins under it" \
			eq "$(ckey pinned):$(ckey pins)" no:2
		ctl unpin $d/a
		check "$p: unpin: pinned=no" eq "$(cerr):$(ckey pinned)" 0:OK:no
		ctl query pinned $d/a
		check "$p: query pinned after unpin: no" eq "$(ckey pinned)" no
		ctl unpin $d/a
		check "$p: a second unpin: ENOENT" eq "$(cerr)" 1:ENOENT
		ctl unpin $d/b
		ctl pin recursive $d/tree
		check "$p: pin recursive: 10 files" eq "$(cerr):$(ckey files)" 0:OK:10
		ctl query pinned $d/tree
		check "$p: query pinned of the tree: 10 pins" eq "$(ckey pins)" 10
		ctl unpin recursive $d/tree
		check "$p: unpin recursive: 10 files" eq "$(cerr):$(ckey files)" 0:OK:10
		ctl query pinned $d
		check "$p: no pins left under $d" eq "$(ckey pins)" 0
	else
		ctl pin $d/a
		check "$p: pin without the module needs fcached: EOPNOTSUPP, says so" \
			eval '[ "$(cerr)" = 1:EOPNOTSUPP ] && echo "$LAST" | grep -q "fcached"'
	fi

	# flush volume: every file of the mount
	ctl prefetch $d/a
	ctl prefetch $d/b
	ctl flush volume $d
	if [ $fs = tmpfs ]; then
		check "$p: flush volume is refused: EOPNOTSUPP" eq "$(cerr)" 1:EOPNOTSUPP
		check "$p: ... and nothing was dropped" eq "$(incore $d/b)" 2048
	else
		check "$p: flush volume: backend=$be, >= 4096 pages dropped" \
			eval '[ "$(cerr):$(ckey backend)" = 0:OK:$be ] && ge "$(ckey pages_dropped)" 4096'
		check "$p: ... a and b have 0 pages" eq "$(incore $d/a):$(incore $d/b)" 0:0
	fi

	# an unprivileged user
	mkfile $d/secret 1
	chmod 600 $d/secret
	ctl prefetch $d/secret
	ctl_user query cached $d/secret
	if [ $be = kmod ]; then
		check "$p: uid 1000 may not query a 0600 root file: EPERM" eq "$(cerr)" 1:EPERM
	else
		check "$p: uid 1000 may not query a 0600 root file: EACCES" eq "$(cerr)" 1:EACCES
	fi
	ctl_user prefetch $d/secret
	check "$p: uid 1000 may not prefetch it: EACCES" eq "$(cerr)" 1:EACCES
	if [ $fs != tmpfs ]; then
		ctl_user flush $d/secret
		check "$p: uid 1000 may not flush it: EACCES" eq "$(cerr)" 1:EACCES
		ctl_user flush volume $d
		if [ $be = kmod ]; then
			check "$p: uid 1000 may not flush the volume: EPERM" eq "$(cerr)" 1:EPERM
		else
			check "$p: uid 1000's flush volume skips what it cannot read" \
				ge "$(ckey errors)" 1
		fi
		check "$p: ... root's file keeps its 256 pages" eq "$(incore $d/secret)" 256
	fi
	as_user sh -c "dd if=/dev/zero of=$d/mine bs=4k count=4 status=none"
	ctl_user query cached $d/mine
	check "$p: uid 1000 may query its own file: 4 pages" \
		eq "$(cerr):$(ckey backend):$(ckey pages_total)" 0:OK:$be:4
	method=$(ckey method)
	chmod 644 $d/secret
	# what one may read one may prefetch and flush, seeing the pages or not
	[ $fs != tmpfs ] && ctl flush $d/secret
	ctl_user prefetch $d/secret
	check "$p: uid 1000 may prefetch a 0644 root file" \
		eq "$(cerr):$(ckey files):$(incore $d/secret)" 0:OK:1:256
	if [ $be = kmod ] || [ "$method" = cachestat ]; then
		check "$p: ... without its figures (files_unmeasured=1, cachestat's rule)" \
			eq "$(ckey files_unmeasured):$(ckey pages_cached)" 1:0
	fi
	if [ $fs != tmpfs ]; then
		ctl_user flush $d/secret
		check "$p: uid 1000 may flush a 0644 root file" \
			eq "$(cerr):$(incore $d/secret)" 0:OK:0
	fi
	ctl_user query cached $d/secret
	if [ $be = kmod ]; then
		check "$p: uid 1000 may not query a 0644 root file either (cachestat's rule)" \
			eq "$(cerr)" 1:EPERM
		ctl_user pin $d/secret
		check "$p: uid 1000 may pin a file it can read" eq "$(cerr):$(ckey pinned)" 0:OK:yes
		ctl_user unpin $d/secret
		check "$p: ... and unpin its pin" eq "$(cerr):$(ckey pinned)" 0:OK:no
		ctl pin $d/secret
		ctl_user unpin $d/secret
		check "$p: uid 1000 may not unpin root's pin: EPERM" eq "$(cerr)" 1:EPERM
		ctl unpin $d/secret
	elif [ "$method" = cachestat ]; then
		check "$p: uid 1000 may not query a 0644 root file (cachestat(2)'s rule)" \
			eq "$(cerr)" 1:EPERM
	else
		# mincore answers (for a file one may not write, that every page is
		# resident: its own side-channel rule)
		check "$p: uid 1000 may query a 0644 root file (mincore)" \
			eq "$(cerr):$(ckey pages_total)" 0:OK:256
	fi
}

# ctl_checks BACKEND: every filesystem, then flush all
ctl_checks() {
	if [ -z "${FCACHECTL:-}" ]; then
		notok "fcachectl ($1): the guest was given no fcachectl"
		return
	fi
	for fs in tmpfs ext4 nfs; do
		ctl_fs $1 $fs
	done
	p="fcachectl ($1)"
	ctl prefetch /mnt/nfs/ctl/a
	ctl prefetch /mnt/ext4/ctl/a
	ctl flush all
	check "$p: flush all: backend=$1, 1 network mount" \
		eq "$(cerr):$(ckey backend):$(ckey mounts)" 0:OK:$1:1
	check "$p: ... dropped the NFS file" eq "$(incore /mnt/nfs/ctl/a)" 0
	check "$p: ... left ext4 alone" eq "$(incore /mnt/ext4/ctl/a)" 2048
	if [ $1 = kmod ]; then
		check "$p: flush all: 1 superblock" eq "$(ckey supers)" 1
		ctl_user flush all
		check "$p: uid 1000 may not flush all: EPERM" eq "$(cerr)" 1:EPERM
		ctl query cache /mnt/nfs
		check "$p: query cache shows the module's pin budget" \
			ge "$(ckey kmod_pin_budget_bytes)" 1
		check "$p: no pins left in the module" eq "$(fc_key pin_count limits)" 0
	fi
	ts "fcachectl ($1) done"
}
