#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# view.sh: fcache-view over an NFSv4.2 backing on this kernel, used by a
# user other than the files' owner.  NFSv4 has no POSIX ACLs: the view must
# answer "no ACL" (ENODATA) to the kernel's ACL lookups, which with
# FUSE_CAP_POSIX_ACL come with every permission check; 6.1 took the
# backing's EOPNOTSUPP for an error, and every access by uid 1000 failed
# with it (fcached's caller-access check first of all).
. "$(dirname "$0")/preamble.sh"
modprobe fuse
setup_nfs
mkdir -p /mnt/nfs/vol/proj /mnt/view /run/vcache
echo hi > /mnt/nfs/vol/proj/f
chmod 755 /mnt/nfs/vol /mnt/nfs/vol/proj
chmod 644 /mnt/nfs/vol/proj/f
"$FCACHE_VIEW" --backing /mnt/nfs/vol --mountpoint /mnt/view --cache-dir /run/vcache \
	--name vol --no-holder > /tmp/view.log 2>&1 &
vpid=$!
for i in $(seq 150); do grep -q " /mnt/view " /proc/mounts && break; sleep 0.2; done
check "the view is mounted" grep -q " /mnt/view fuse" /proc/mounts
check "uid 1000 lists a directory of the view" eq "$(as_user ls /mnt/view/proj 2>&1)" f
check "uid 1000 reads root's 0644 file through the view" \
	eq "$(as_user cat /mnt/view/proj/f 2>&1)" hi
LAST=$(as_user sh -c 'echo x >> /mnt/view/proj/f' 2>&1)
check "uid 1000 may not write it: permission denied (not EOPNOTSUPP)" \
	eval 'echo "$LAST" | grep -q "Permission denied"'
check "root reads it too" eq "$(cat /mnt/view/proj/f)" hi
umount /mnt/view
kill $vpid 2>/dev/null
wait $vpid 2>/dev/null
while IFS= read -r l; do diag "view: $l"; done < /tmp/view.log
check "NFS unmounts (nothing held)" umount /mnt/nfs
finish
