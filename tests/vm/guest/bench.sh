# SPDX-License-Identifier: LGPL-2.1-or-later
# bench.sh (sourced by bench-main.sh when BENCH_FILES > 0): QUERY, PIN and FLUSH
# of every file of a BENCH_FILES-file tree on ext4, through fcache.ko and
# through the user-space backend (fcachectl with the module unloaded).
# Results go to the TAP stream as "# bench:" lines and to $RESULTS/bench.txt.
bench_log() { diag "bench: $*"; echo "$*" >> $RESULTS/bench.txt; }
now() { date +%s.%N; }
rate() { echo "$1 / ($3 - $2)" | bc; }	# files t0 t1 -> files per second

nfiles=$BENCH_FILES
mkdir -p /mnt/bench
if [ -n "${BENCH_IMG:-}" ]; then
	cp --sparse=always "$BENCH_IMG" /srv/bench.img
else
	truncate -s 192M /srv/bench.img
	mkfs.ext4 -q -F -N $((nfiles + 1000)) -I 256 -O inline_data /srv/bench.img
fi
mount -o loop /srv/bench.img /mnt/bench
[ -n "${BENCH_IMG:-}" ] || /usr/bin/python3 -c '
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for d in range((n + 999) // 1000):
    os.mkdir("%s/d%03d" % (root, d))
    for i in range(min(1000, n - d * 1000)):
        with open("%s/d%03d/f%04d" % (root, d, i), "wb") as f:
            f.write(b"x" * 64)' /mnt/bench $nfiles
sync
ts "bench tree of $nfiles files"

insmod "$FCACHE_KO"
$FCNL limits-set repin_ms=0 > /dev/null
run_ctl() { $FCACHECTL -q -w 1 "$@" > /tmp/ctl.out 2>&1; }

# the module, one request per file from one thread
LAST=$($FCNL -q bench-query /mnt/bench); kq=$(key ops_per_s)
LAST=$($FCNL -q bench-pin /mnt/bench); kp=$(key ops_per_s)
LAST=$($FCNL -q bench-unpin /mnt/bench); ku=$(key ops_per_s)
LAST=$($FCNL -q bench-flush /mnt/bench); kf=$(key ops_per_s)
bench_log "kmod per-file requests: query $kq/s, pin $kp/s, unpin $ku/s, flush $kf/s"

# the module through fcachectl, one walk of the tree (one worker)
if [ -n "${FCACHECTL:-}" ]; then
	t0=$(now); run_ctl query cached recursive /mnt/bench; t1=$(now); kcq=$(rate $nfiles $t0 $t1)
	$FCACHECTL -q -j query cached /mnt/bench/d000/f0000 | grep -q '"backend":"kmod"' ||
		kcq="$kcq(not via kmod)"
	t0=$(now); run_ctl pin recursive /mnt/bench; t1=$(now); kcp=$(rate $nfiles $t0 $t1)
	t0=$(now); run_ctl unpin recursive /mnt/bench; t1=$(now); kcu=$(rate $nfiles $t0 $t1)
	$FCACHECTL -q prefetch recursive /mnt/bench > /dev/null 2>&1
	t0=$(now); run_ctl flush /mnt/bench; t1=$(now); kcf=$(rate $nfiles $t0 $t1)
	bench_log "kmod via fcachectl: query recursive $kcq files/s, pin recursive $kcp/s, unpin recursive $kcu/s, flush tree $kcf/s"
fi
rmmod fcache

# the user-space backend, the same tree, one worker
if [ -n "${FCACHECTL:-}" ]; then
	t0=$(now); run_ctl query cached recursive /mnt/bench; t1=$(now); uq=$(rate $nfiles $t0 $t1)
	$FCACHECTL -q prefetch recursive /mnt/bench > /dev/null 2>&1
	t0=$(now); run_ctl flush /mnt/bench; t1=$(now); uf=$(rate $nfiles $t0 $t1)
	run_ctl pin recursive /mnt/bench && up=ok || up="unsupported ($(head -c 120 /tmp/ctl.out))"
	bench_log "user backend via fcachectl: query recursive $uq files/s, flush tree $uf/s, pin: $up"
	bench_log "ratio query: per-file kmod/user $(echo "scale=1; $kq / $uq" | bc), fcachectl kmod/user $(echo "scale=1; ${kcq%%(*} / $uq" | bc)"
	bench_log "ratio flush: per-file kmod/user $(echo "scale=1; $kf / $uf" | bc), fcachectl kmod/user $(echo "scale=1; $kcf / $uf" | bc)"
	r=$(echo "$kq / $uq >= 5" | bc)
	if [ "$r" = 1 ]; then ok "bench: module query at least 5x the user backend"
	else todo "bench: module query at least 5x the user backend"; fi
fi
umount /mnt/bench
ts "bench done"
