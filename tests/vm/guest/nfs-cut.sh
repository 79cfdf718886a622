#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# nfs-cut.sh: an fcache volume on NFSv4.2 (a hard mount) whose server is cut
# by nftables (every packet to and from port 2049 dropped): the pinned files
# stay readable and writable, `query state` and `query reintegration`
# answer, a worker killed meanwhile (and a view started meanwhile) comes up
# on its local copy, the volume reconnects by itself when the server is back
# and every acknowledged change is on the server; then the share unmounted
# (Backing= an empty directory) is refused at reconnect, not taken for a
# server on which everything was deleted.
#
# The bounds below (60-240 s) only stop a hung run: they are not what the
# test measures.
. "$(dirname "$0")/preamble.sh"
modprobe fuse
setup_nfs
CTL=$(dirname "$FCACHE_VIEW")/fcache-view-ctl
B=/mnt/nfs
M=/mnt/view
C=/run/vcache
mkdir -p $B/proj $M
for i in 1 2 3; do seq 1 $((i * 1000)) > $B/proj/f$i; done
echo "line 0" > $B/proj/log

ctl() { LAST=$(timeout 60 "$CTL" $C "$@" 2>&1); }
state() { timeout 60 "$CTL" $C 'query state' 2>/dev/null | sed -n 's/^state=//p'; }
pid_of() { timeout 60 "$CTL" $C 'query state' 2>/dev/null | sed -n 's/^pid=//p'; }
# wait_state STATE SECONDS
wait_state() {
	_n=$(($2 * 5))
	while [ $_n -gt 0 ]; do
		[ "$(state)" = "$1" ] && return 0
		sleep 0.2
		_n=$((_n - 1))
	done
	LAST="state is $(state), not $1"
	return 1
}
cut() {
	nft add table inet fcut
	nft add chain inet fcut out '{ type filter hook output priority 0; }'
	nft add rule inet fcut out tcp dport 2049 drop
	nft add rule inet fcut out tcp sport 2049 drop
}
uncut() { nft delete table inet fcut; }
start_view() {
	"$FCACHE_VIEW" --backing $B --mountpoint $M --cache-dir $C --name cut \
		--set BackingTimeout=2s --set AttrLease=1s >> /tmp/view.log 2>&1 &
	for _ in $(seq 300); do [ -S $C/control.sock ] && [ -n "$(state)" ] && return 0; sleep 0.2; done
	return 1
}

check "the view starts on NFSv4.2" start_view
check "pin recursive proj" ctl 'pin recursive' proj
old=$(pid_of)

cut
diag "server cut"
check "a pinned file reads right while the server is cut" \
	eval 'timeout 60 cat $M/proj/f2 | cmp -s - /srv/export/proj/f2'
check "an append to a pinned file is acknowledged" \
	timeout 60 sh -c "echo 'line 1' >> $M/proj/log"
check "the volume goes offline by itself" wait_state offline 120
check "query reintegration answers while the server is cut" ctl 'query reintegration'
check "... and lists the append" eval 'echo "$LAST" | grep -q "kind=content"'
check "an edit right after it is not held up" \
	timeout 60 sh -c "echo 'line 2' >> $M/proj/log"

kill -9 "$old"
diag "worker $old killed"
new=
for _ in $(seq 600); do
	new=$(pid_of)
	[ -n "$new" ] && [ "$new" != "$old" ] && break
	sleep 0.2
done
check "a new worker starts while the server is cut" eval '[ -n "$new" ] && [ "$new" != "$old" ]'
check "... offline" wait_state offline 60
check "... and serves the pinned files" eval 'timeout 60 cat $M/proj/f1 | cmp -s - /srv/export/proj/f1'
check "an edit made then is acknowledged" timeout 60 sh -c "echo 'line 3' >> $M/proj/log"
check "... and a new file" timeout 60 sh -c "echo new > $M/proj/made-offline"

uncut
diag "server back"
check "the volume reconnects by itself" wait_state online 240
check "every acknowledged append is on the server, in order, once" \
	eq "$(cat /srv/export/proj/log)" "$(printf 'line 0\nline 1\nline 2\nline 3')"
check "the file made offline is on the server" eq "$(cat /srv/export/proj/made-offline)" new

# An unmounted share: Backing= is then an empty local directory.
check "disconnect" ctl disconnect
umount -l $B
check "reconnect to an empty Backing= is refused" eval '! ctl reconnect'
check "... saying why" eval 'echo "$LAST" | grep -qi "backing"'
check "... the volume stays offline" wait_state offline 30
check "... and its pinned files are all there" eval 'timeout 60 cat $M/proj/f3 | cmp -s - /srv/export/proj/f3'
mount -t nfs4 -o vers=4.2,actimeo=1 127.0.0.1:/ $B
check "with the share mounted again, reconnect goes through" ctl reconnect
check "... online" wait_state online 60
check "nothing was deleted on the server" eq "$(ls /srv/export/proj | wc -l)" 5

umount $M 2>/dev/null || umount -l $M
sleep 1
while IFS= read -r l; do diag "view: $l"; done < /tmp/view.log
check "NFS unmounts (nothing held)" umount $B
finish
