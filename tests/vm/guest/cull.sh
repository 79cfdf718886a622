# SPDX-License-Identifier: LGPL-2.1-or-later
# cull.sh (sourced by main.sh): NFS with -o fsc and cachefilesd; a pinned
# file's FS-Cache object survives culling when the cache is filled past
# its cull limit with unpinned data.
nfsd_read() { awk '$1 == "io" { print $2 }' /proc/net/rpc/nfsd; }
# FS-Cache's reads and writes of the cache, and the writes refused for space
fsc_stats() { grep 'IO  \|NoSpace' /proc/fs/fscache/stats | tr -s ' \n' ' '; }
# the objects cachefilesd has culled so far
fsc_culls() { sed -n 's/.*[[:space:]]cull=\([0-9]*\).*/\1/p' /proc/fs/fscache/stats | head -n 1; }

modprobe cachefiles
truncate -s 96M /srv/fscache.img
mkfs.ext4 -q -F /srv/fscache.img
mkdir -p /mnt/fscache /mnt/nfsc
mount -o loop /srv/fscache.img /mnt/fscache
cat > /tmp/cachefilesd.conf <<CONF
dir /mnt/fscache
tag fctest
brun 25%
bcull 20%
bstop 10%
frun 25%
fcull 20%
fstop 10%
CONF
cachefilesd -n -s -f /tmp/cachefilesd.conf > /tmp/cachefilesd.log 2>&1 &
cfd=$!
# the cache bound before the mount asks for its volume
wait_for 30 grep -q fctest /proc/fs/fscache/caches
diag "fsc: caches: $(tr "\n" "|" < /proc/fs/fscache/caches)"
mkdir -p /srv/export/cull
mkfile /srv/export/cull/p 8
for i in 1 2 3 4 5 6 7 8 9 10; do mkfile /srv/export/cull/u$i 12; done
if ! kill -0 $cfd 2>/dev/null; then
	LAST=$(cat /tmp/cachefilesd.log)
	todo "cachefilesd runs (cull test not run)"
else
	mount -t nfs4 -o vers=4.2,fsc,nosharecache 127.0.0.1:/ /mnt/nfsc
	cache_used() { sync; df -k /mnt/fscache | awk 'NR == 2 { print $3 }'; }
	cache_used_ge() { [ "$(cache_used)" -ge "$1" ]; }
	used0=$(cache_used)
	fc pin /mnt/nfsc/cull/p
	cat /mnt/nfsc/cull/p > /dev/null
	# FS-Cache writes the read data to the cache in the background, and
	# drops a write that finds the cache below bstop: the pinned file's
	# 8 MiB must be in the cache before the unpinned files fill it
	wait_for 120 cache_used_ge $((used0 + 8192))
	diag "fsc: the pinned file in the cache: $(( $(cache_used) - used0 )) KiB"
	check "fsc: the pinned file's cookie is in use" \
		eq "$(fc_key cookie query /mnt/nfsc/cull/p)" 2
	culls0=$(fsc_culls)
	for i in 1 2 3 4 5 6 7; do cat /mnt/nfsc/cull/u$i > /dev/null; done
	# unused cookies go to fscache's LRU after ~10 s; only then cullable
	sleep 12
	for i in 8 9 10; do cat /mnt/nfsc/cull/u$i > /dev/null; done
	# cachefilesd culls in the background once the cache's free space falls
	# below bcull: wait for the cache's writes, then for free space >= bcull
	sleep 6
	sync
	cache_free_ge() { df -k /mnt/fscache | awk -v p="$1" 'NR == 2 { exit !($4 * 100 >= $2 * p) }'; }
	wait_for 120 cache_free_ge 20
	diag "fscache cache dir use: $(df -k /mnt/fscache | awk 'NR == 2 { print $3 " KiB of " $2 }')"
	drop_caches
	diag "fsc: before the re-read: $(fsc_stats)"
	r0=$(nfsd_read)
	cat /mnt/nfsc/cull/p > /dev/null
	r1=$(nfsd_read)
	diag "fsc: after the re-read: $(fsc_stats)"
	# An object in use is a tmpfile cachefilesd cannot even see, so culling
	# cannot take it: the cookie still in use is what the pin guarantees
	check "fsc: the pinned file's cookie is still in use after the fill" \
		eq "$(fc_key cookie query /mnt/nfsc/cull/p)" 2
	# Whether FS-Cache serves a read from the cache, and which objects
	# cachefilesd culls when, are FS-Cache's own (on 6.1 a first round after
	# cachefilesd started once read nothing from the cache, pinned or not,
	# and cached too little to reach the cull limit): reported, not failed.
	if [ $((r1 - r0)) -lt 1048576 ]; then
		ok "fsc: pinned file re-read from the cache after culling ($((r1 - r0)) bytes from the server)"
	else
		todo "fsc: pinned file re-read from the cache after culling ($((r1 - r0)) bytes from the server; FS-Cache's read counter above)"
	fi
	cat /mnt/nfsc/cull/u1 > /dev/null
	r2=$(nfsd_read)
	diag "fsc: unpinned u1 re-read took $((r2 - r1)) bytes from the server (culled if ~12 MiB)"
	culls1=$(fsc_culls)
	if [ "${culls1:-0}" -gt "${culls0:-0}" ]; then
		ok "fsc: cachefilesd culled unpinned objects meanwhile (culls $culls0 -> $culls1)"
	else
		todo "fsc: cachefilesd culled unpinned objects meanwhile (culls $culls0 -> $culls1: the fill did not reach the cull limit)"
	fi
	fc unpin /mnt/nfsc/cull/p
	umount /mnt/nfsc
fi
kill $cfd 2>/dev/null
wait $cfd 2>/dev/null
umount /mnt/fscache 2>/dev/null
rm -rf /srv/export/cull
ts "cull done"
