#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# smb.sh: every fcachectl command on SMB 3.1.1 (samba's smbd in the guest,
# mount.cifs over loopback), with fcache.ko loaded and after rmmod, on a
# share that grants leases and on one that grants none.  Each step's
# pages_cached is cross-checked with fincore(1), which opens the file as
# the next reader does: where cifs dropped the pages at that open, the
# result must have said so (kept_at_next_open=only-with-a-lease).  The two
# backends are compared step by step by compare-results.py (same outcome,
# keys and counts; differing figures are reported as TODO, since every open
# cifs makes without a lease may drop the pages).  With FCACHE_VM_LONG=1, a tree of a few
# hundred files: prefetch recursive under the module must finish and must
# honour SIGTERM, also after a flush all, with jobs, and during lease breaks.
. "$(dirname "$0")/preamble.sh"
. "$GUEST_DIR/ctl.sh"
. "$GUEST_DIR/smb-server.sh"

setup_smb
for s in lease nolease; do
	# made on the server's side: the client starts with nothing cached
	d=/srv/smb/$s/cmp
	mkdir -p $d/tree/sub
	mkfile $d/a 8
	mkfile $d/b 8
	for i in 1 2 3 4 5; do mkfile $d/tree/f$i 1; mkfile $d/tree/sub/f$i 1; done
	mkdir -p /srv/smb/$s/big
	for i in $(seq 1 10); do
		mkdir -p /srv/smb/$s/big/d$i
		for j in $(seq 1 30); do
			head -c 65536 /dev/urandom > /srv/smb/$s/big/d$i/f$j
		done
	done
done
if [ "${VM_LONG:-0}" = 1 ]; then
	mkdir -p /srv/smb/lease/huge
	for i in 1 2 3 4 5 6; do mkfile /srv/smb/lease/huge/f$i 16; done
fi
sync
ts setup

# fincore_of STEP-ARGS...: the pages fincore sees for the step's path (its
# last word): a file, a directory's files, or a tree's with "recursive"
fincore_of() {
	_p= _rec=
	for _a in "$@"; do
		case $_a in recursive) _rec=1 ;; /*) _p=$_a ;; esac
	done
	[ -n "$_p" ] || return 0
	if [ -f "$_p" ]; then
		incore "$_p"
	elif [ -n "$_rec" ]; then
		find "$_p" -type f -exec fincore -n -o PAGES {} + | awk '{s += $1} END {print s + 0}'
	else
		find "$_p" -maxdepth 1 -type f -exec fincore -n -o PAGES {} + |
			awk '{s += $1} END {print s + 0}'
	fi
}

# step ARGS...: fcachectl -j ARGS, saved as the next step of backend $be
# under $out, with what fincore sees next to it
step() {
	sn=$((sn + 1))
	_t=$(ms)
	ctl "$@"
	printf '%s\t%s\t%s\n%s\n' "$*" "$CRC" $(( $(ms) - _t )) "$LAST" > $out/$be/$sn
	printf '%s\t%s\t%s\t%s\n' "$*" "$(ckey pages_cached)" "$(fincore_of "$@")" \
		"$(ckey kept_at_next_open)" > $out/fincore-$be/$sn
}

# steps BACKEND SHARE: the command list on /mnt/SHARE-MOUNT's cmp folder
steps() {
	be=$1 d=$2/cmp out=/tmp/cmp-$3 sn=0
	mkdir -p $out/$be $out/fincore-$be
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
	step prefetch recursive $d/tree
	step query cached recursive $d/tree
	step flush $d/tree
	step prefetch recursive $d/tree
	step flush $d
	step prefetch $d/a
	step flush callbacks $d/a
	step flush callbacks $d/tree
}

# fincore_checks SHARE BACKEND: every step's pages_cached against fincore;
# where the next opener saw fewer, the result must have said it might
fincore_checks() {
	_bad= _dropped=0 _n=0
	for f in /tmp/cmp-$1/fincore-$2/*; do
		IFS='	' read -r name pc fc kept < "$f"
		[ -n "$pc" ] && [ -n "$fc" ] || continue
		_n=$((_n + 1))
		[ "$pc" = "$fc" ] && continue
		_dropped=$((_dropped + 1))
		diag "$2 $1: $name: pages_cached=$pc, the next opener (fincore) sees $fc, kept_at_next_open=$kept"
		if [ "$fc" -gt "$pc" ] || [ "$kept" != only-with-a-lease ]; then
			_bad="$_bad
$name: pages_cached=$pc, fincore=$fc, kept_at_next_open=[$kept]"
		fi
	done
	LAST=$_bad
	check "$2 $1: pages_cached agrees with fincore, or says the next open may drop them ($_n steps, $_dropped dropped at open)" \
		eq "$_bad" ""
}

# the share's server-side view of leases and oplocks it granted
leases() { smbstatus -s /run/samba/smb.conf -L 2>/dev/null | grep -c -E 'LEASE|OPLOCK'; }

# next_open SHARE MOUNT BACKEND: a prefetch, then what a new opener sees
next_open() {
	f=$2/cmp/b
	drop_caches
	ctl prefetch $f
	pc=$(ckey pages_cached) kept=$(ckey kept_at_next_open)
	cat $f > /dev/null
	seen=$(incore $f)
	diag "$3 $1: prefetch says pages_cached=$pc kept_at_next_open=$kept; the next opener sees $seen (server holds $(leases) leases/oplocks)"
	check "$3 $1: prefetch says kept_at_next_open=only-with-a-lease" eq "$kept" only-with-a-lease
	if [ $1 = lease ]; then
		check "$3 $1: with a lease the next opener sees all 2048 pages" eq "$seen" 2048
	else
		check "$3 $1: the note is true: the next opener (no lease) sees fewer than 2048 ($seen)" \
			eval '[ "$seen" -lt 2048 ]'
	fi
}

# big_tree SHARE MOUNT BACKEND: prefetch recursive of 300 files, then one
# stopped by SIGTERM (the guard is a hang, not a time limit)
big_tree() {
	drop_caches
	_t=$(ms)
	LAST=$(timeout -k 10 600 $FCACHECTL -q -j prefetch recursive $2/big 2>&1); CRC=$?
	diag "$3 $1: prefetch recursive of 300 files: exit $CRC in $(( $(ms) - _t )) ms, files=$(ckey files) pages_cached=$(ckey pages_cached)"
	check "$3 $1: prefetch recursive of 300 files finishes" eq "$(cerr)" 0:OK
	drop_caches
	$FCACHECTL -q -j prefetch recursive $2/big > /tmp/big.out 2>&1 &
	_pid=$!
	sleep 2
	term_wait $_pid 6000
	diag "$3 $1: prefetch recursive, SIGTERM after 2 s: gone in $TERM_MS ms, exit $TERM_RC"
	check "$3 $1: prefetch recursive honours SIGTERM" eq "$TERM_GONE" yes
}


# timed CMD...: run a command (a hang guard, not a time limit), say how long
timed() {
	_t=$(ms)
	LAST=$(timeout -k 10 300 "$@" 2>&1); CRC=$?
	_el=$(( $(ms) - _t ))
}

# stall_probe: prefetch recursive under the module where it was once seen
# to stall: right after a flush all, files big enough to run as jobs (and
# SIGTERM while they run), and while another SMB session writes the files
# (the server breaks this client's leases mid-walk)
stall_probe() {
	ctl flush all
	timed $FCACHECTL -q -j prefetch recursive /mnt/smb/big
	diag "kmod stall probe: prefetch recursive of 300 files right after flush all: exit $CRC in $_el ms"
	check "kmod stall probe: prefetch recursive after flush all finishes" eq "$(cerr)" 0:OK
	drop_caches
	timed $FCACHECTL -q -j prefetch recursive /mnt/smb/huge
	diag "kmod stall probe: prefetch recursive of 6 files of 16 MiB (jobs): exit $CRC in $_el ms, pages_cached=$(ckey pages_cached)"
	check "kmod stall probe: prefetch recursive of jobs finishes" eq "$(cerr)" 0:OK
	drop_caches
	$FCACHECTL -q -j prefetch recursive /mnt/smb/huge > /dev/null 2>&1 &
	_pid=$!
	sleep 3
	term_wait $_pid 3000
	diag "kmod stall probe: SIGTERM with jobs running: gone in $TERM_MS ms"
	check "kmod stall probe: SIGTERM with jobs running ends it" eq "$TERM_GONE" yes
	# a second session on the same share (its own lease keys) writes while
	# this one prefetches: each of its opens breaks this client's lease
	smb_mount lease /mnt/smb2 nosharesock || diag "second mount failed"
	drop_caches
	(
		while [ ! -e /run/writer.stop ]; do
			for j in 1 5 10 15 20 25 30; do
				for i in 1 4 7 10; do
					echo x >> /mnt/smb2/big/d$i/f$j
				done
			done
		done
	) &
	_w=$!
	timed $FCACHECTL -q -j prefetch recursive /mnt/smb/big
	diag "kmod stall probe: prefetch recursive of 300 files while another session writes 28 of them: exit $CRC in $_el ms, $(echo "$LAST" | grep -o '"files":[0-9]*' | head -1) $(echo "$LAST" | grep -o '"files_failed":[0-9]*' | head -1)"
	check "kmod stall probe: prefetch recursive during lease breaks finishes" \
		eval '[ $CRC -le 1 ] && [ $_el -ge 0 ]'
	drop_caches
	$FCACHECTL -q -j prefetch recursive /mnt/smb/big > /dev/null 2>&1 &
	_pid=$!
	sleep 2
	term_wait $_pid 3000
	diag "kmod stall probe: SIGTERM during lease breaks: gone in $TERM_MS ms"
	check "kmod stall probe: SIGTERM during lease breaks ends it" eq "$TERM_GONE" yes
	touch /run/writer.stop
	wait $_w
	umount /mnt/smb2
}

check "insmod fcache.ko" insmod "$FCACHE_KO"
steps kmod /mnt/smb lease
steps kmod /mnt/smb-nl nolease
for s in lease nolease; do fincore_checks $s kmod; done
next_open lease /mnt/smb kmod
next_open nolease /mnt/smb-nl kmod

# pin: a pinned file alone is EBUSY, a directory flush keeps and counts it
d=/mnt/smb/cmp
ctl pin $d/a
check "kmod lease: pin" eq "$(cerr)" 0:OK
ctl prefetch $d/a
ctl flush $d/a
check "kmod lease: flush of a pinned file: EBUSY" eq "$(cerr)" 1:EBUSY
ctl flush $d
check "kmod lease: flush of its directory keeps it and says so (files_pinned=1)" \
	eq "$(cerr):$(ckey files_pinned):$(incore $d/a)" 0:OK:1:2048
ctl flush volume $d
check "kmod lease: flush volume keeps it and says so (files_pinned=1)" \
	eq "$(cerr):$(ckey files_pinned):$(incore $d/a)" 0:OK:1:2048
ctl unpin $d/a
check "kmod lease: unpin" eq "$(cerr)" 0:OK
# a pinned file on the share without leases: does the next open keep it?
d=/mnt/smb-nl/cmp
ctl pin $d/a
ctl prefetch $d/a
cat $d/a > /dev/null
diag "kmod nolease: a pinned, prefetched file: the next opener sees $(incore $d/a) of 2048 pages"
ctl unpin $d/a

# flush callbacks: cifs.ko exports no way to give back a lease: say so
cat /mnt/smb/cmp/b > /dev/null
held=$(leases)
ctl flush callbacks /mnt/smb/cmp
check "kmod lease: flush callbacks says callbacks_released=no and why (cifs)" \
	eval '[ "$(cerr):$(ckey callbacks_released)" = 0:OK:no ] && echo "$LAST" | grep -q "cifs"'
diag "kmod lease: leases/oplocks samba holds: $held before flush callbacks, $(leases) after"

# the stall probe (a prefetch recursive of hundreds of files, SIGTERM during
# it, lease breaks meanwhile) takes minutes under TCG: FCACHE_VM_LONG=1
if [ "${VM_LONG:-0}" = 1 ]; then
	big_tree lease /mnt/smb kmod
	big_tree nolease /mnt/smb-nl kmod
	stall_probe
fi

ctl flush all
check "kmod: flush all names both SMB mounts" \
	eval '[ "$(cerr)" = 0:OK ] && echo "$LAST" | grep -q "/mnt/smb-nl" &&
		echo "$LAST" | grep -q "\"/mnt/smb\""'
check "rmmod fcache" rmmod fcache

steps user /mnt/smb lease
steps user /mnt/smb-nl nolease
for s in lease nolease; do fincore_checks $s user; done
next_open lease /mnt/smb user
next_open nolease /mnt/smb-nl user
[ "${VM_LONG:-0}" = 1 ] && big_tree lease /mnt/smb user

for s in lease nolease; do
	/usr/bin/python3 "$GUEST_DIR/compare-results.py" /tmp/cmp-$s > /tmp/cmp-$s/verdicts
	while IFS= read -r line; do
		case $line in
		PASS*) ok "SMB $s: same with and without fcache.ko: ${line#PASS }" ;;
		*outcome*) LAST=$line; notok "SMB $s: same with and without fcache.ko: $(echo "${line#FAIL }" | cut -d: -f1)" ;;
		*)
			# the same outcome, other figures: each open cifs makes
			# without a lease drops the pages, and the two backends
			# open the files a different number of times
			todo "SMB $s: same figures with and without fcache.ko: $(echo "${line#FAIL }" | cut -d: -f1)"
			diag "  ${line#FAIL }" ;;
		esac
	done < /tmp/cmp-$s/verdicts
	sed "s/^NFSv4.2: command/SMB3 $s: command/" /tmp/cmp-$s/matrix.txt |
		while IFS= read -r line; do diag "$line"; done
done
check "SMB unmounts (nothing held)" stop_smb
finish
