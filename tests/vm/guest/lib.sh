# SPDX-License-Identifier: LGPL-2.1-or-later
# lib.sh: TAP helpers and fcnl wrappers for the guest tests (sourced).
TAP=$RESULTS/tap
tn=0
ok() { tn=$((tn + 1)); echo "ok $tn - $*" >> $TAP; echo "ok $tn - $*"; }
notok() {
	tn=$((tn + 1)); echo "not ok $tn - $*" >> $TAP; echo "not ok $tn - $*"
	[ -n "${LAST:-}" ] && echo "$LAST" | sed 's/^/#   /' | tee -a $TAP
}
todo() { tn=$((tn + 1)); echo "not ok $tn - $* # TODO" >> $TAP; echo "not ok $tn - $* # TODO"; }
diag() { echo "# $*" >> $TAP; echo "# $*"; }
# check DESCRIPTION COMMAND...: ok if the command succeeds
check() { _cd=$1; shift; if "$@"; then ok "$_cd"; else notok "$_cd"; fi; }

# fc ARGS...: run fcnl, keep its output in LAST, return its status
fc() { LAST=$($FCNL "$@" 2>&1); }
# key KEY: the value of KEY in LAST
key() { echo "$LAST" | sed -n "s/^$1=//p" | head -n 1; }
# fc_key KEY ARGS...: run fcnl and print KEY of its output
fc_key() { _k=$1; shift; fc "$@"; key "$_k"; }
cached() { fc_key pages_cached query "$1"; }
total() { fc_key pages_total query "$1"; }
# expect_err ERRNO ARGS...: fcnl fails with ERRNO
expect_err() { _e=$1; shift; fc "$@" && return 1; [ "$(key error)" = "$_e" ]; }
eq() { [ "$1" = "$2" ] || { LAST="${LAST:-}
expected [$2], got [$1]"; return 1; }; }
ge() { [ "${1:-0}" -ge "$2" ] 2>/dev/null || { LAST="${LAST:-}
expected >= $2, got [$1]"; return 1; }; }
# as_user CMD...: run as uid/gid 1000 without capabilities
as_user() { setpriv --reuid=1000 --regid=1000 --clear-groups --inh-caps=-all "$@"; }
fc_user() { LAST=$(as_user $FCNL "$@" 2>&1); }
expect_user_err() { _e=$1; shift; fc_user "$@" && return 1; [ "$(key error)" = "$_e" ]; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# wait_for SECONDS CMD...: runs CMD until it succeeds, for at most SECONDS (the
# guest is emulated and the host loaded: what the kernel does in the background
# is waited for, never assumed done after a fixed sleep).
wait_for() {
	_end=$(( $(date +%s) + $1 )); shift
	until "$@"; do [ "$(date +%s)" -lt $_end ] || return 1; sleep 0.3; done
}
mkfile() { dd if=/dev/urandom of="$1" bs=1M count="$2" status=none; }
# start_writer FILE: write 4 MiB into FILE and keep it open (on NFS every
# close writes back) until stop_writer
start_writer() {
	rm -f /tmp/writer.done /tmp/writer.ready
	/usr/bin/python3 -c '
import os, sys, time
f = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(f, os.urandom(4 << 20))
open("/tmp/writer.ready", "w").close()
while not os.path.exists("/tmp/writer.done"):
    time.sleep(0.05)
os.close(f)' "$1" &
	wpid=$!
	while [ ! -e /tmp/writer.ready ] && kill -0 $wpid 2>/dev/null; do sleep 0.05; done
}
stop_writer() { touch /tmp/writer.done; wait $wpid; }
# term_wait PID TENTHS: SIGTERM to PID (a background job of this shell), then
# up to TENTHS tenths of a second for it to end (a hang guard, not a time
# limit), SIGKILL if it did not; sets TERM_GONE (yes|no), TERM_RC (its exit
# status) and TERM_MS (from the signal until it was reaped)
term_wait() {
	_tt=$(ms)
	kill -TERM "$1" 2>/dev/null
	_ti=0
	while [ $_ti -lt "$2" ] && kill -0 "$1" 2>/dev/null; do sleep 0.1; _ti=$((_ti + 1)); done
	TERM_GONE=yes
	kill -0 "$1" 2>/dev/null && { TERM_GONE=no; kill -KILL "$1"; }
	wait "$1"
	TERM_RC=$?
	TERM_MS=$(( $(ms) - _tt ))
}
# incore FILE: its pages in the page cache, as fincore(1) (mincore) sees them
incore() { fincore -n -o PAGES "$1" | tr -d ' '; }

# setup_nfs: the kernel NFS server exporting a tmpfs (/srv/export), mounted
# over NFSv4.2 on 127.0.0.1 at /mnt/nfs
setup_nfs() {
	mount -t tmpfs tmpfs /var/lib/nfs
	mkdir -p /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery /srv/export /mnt/nfs
	ip link set lo up
	modprobe nfsd
	modprobe nfsv4
	mount -t nfsd nfsd /proc/fs/nfsd
	echo "/srv/export 127.0.0.1(rw,no_root_squash,insecure,fsid=0,no_subtree_check)" > /etc/exports
	exportfs -ra
	rpc.mountd -N 2 -N 3 --no-udp
	rpc.nfsd -N 3 4
	mount -t nfs4 -o vers=4.2,actimeo=1 127.0.0.1:/ /mnt/nfs
	grep -q ' /mnt/nfs nfs4 ' /proc/mounts || diag "NFS mount failed"
	chmod 1777 /srv/export
}

# ms: milliseconds since the epoch (for per-command times reported as diag)
ms() { echo $(( $(date +%s%N) / 1000000 )); }

t0=$(date +%s.%N)
ts() { echo "T+$(echo "$(date +%s.%N) - $t0" | bc) $*"; }

# copy the results to the writable share, then power off
finish() {
	mkdir -p /results
	mount -t 9p -o trans=virtio,version=9p2000.L results /results
	dmesg > /results/dmesg.txt
	cp $RESULTS/* /results/
	echo "GUEST-DONE"
	touch /results/done
	sync
	umount /results
	echo o > /proc/sysrq-trigger
	sleep 10
}
