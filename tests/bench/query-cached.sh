#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# query-cached.sh [FILES]: `fcachectl query cached recursive` over a tree of FILES files
# (default 20,000) against fincore (util-linux, fed by find | xargs) and vmtouch on the
# same tree in the same run, warm (all cached) and cold (pages flushed, and with root
# also dentries and inodes dropped). Prints the median of 5 runs and the ratios
# (peer time / fcachectl time: above 1 means fcachectl is faster).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
fc=${FCACHECTL:-$top/build/cli/fcachectl}
files=${1:-20000}
runs=5
command -v vmtouch >/dev/null || { echo "vmtouch missing (apt-get install vmtouch)"; exit 77; }
command -v fincore >/dev/null || { echo "fincore missing (util-linux)"; exit 77; }

tree=$(mktemp -d /var/tmp/fcache-bench-XXXXXX)
trap 'rm -rf "$tree"' EXIT
# 100 directories of 200 files, sizes 1 to 64 KiB.
/usr/bin/python3 - "$tree" "$files" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
random.seed(1)
for i in range(n):
    d = os.path.join(root, "d%03d" % (i // 200))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%05d" % i), "wb") as f:
        f.write(os.urandom(random.randint(1, 64) * 1024))
PY
sync

can_drop=0; [ -w /proc/sys/vm/drop_caches ] && can_drop=1
make_cold() {
        "$fc" -q flush "$tree" >/dev/null
        if [ $can_drop = 1 ]; then echo 2 > /proc/sys/vm/drop_caches; fi
}
make_warm() { "$fc" -q prefetch recursive "$tree" >/dev/null; }

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_it() { # time_it PREP COMMAND...: median wall seconds over $runs runs
        local prep=$1; shift
        for _ in $(seq $runs); do
                $prep
                local t0 t1
                t0=$(date +%s.%N)
                "$@" >/dev/null 2>&1
                t1=$(date +%s.%N)
                echo "$t1 - $t0" | bc
        done | median
}
run_fcachectl() { "$fc" -q query cached recursive "$tree"; }
run_fincore() { find "$tree" -type f -print0 | xargs -0 fincore; }
run_vmtouch() { vmtouch "$tree"; }

# Sanity: the three agree on what is cached, or the timing means nothing.
make_warm
ours=$("$fc" --json -q query cached recursive "$tree" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["result"]["pages_cached"])')
theirs=$(vmtouch "$tree" | awk '/Resident Pages/ {split($3, a, "/"); print a[1]}')
echo "pages cached: fcachectl $ours, vmtouch $theirs"
[ "$ours" = "$theirs" ] || { echo "fcachectl and vmtouch disagree"; exit 1; }

printf '%-6s %12s %12s %12s %10s %10s\n' state fcachectl fincore vmtouch fincore/fc vmtouch/fc
for state in warm cold; do
        prep=make_$state
        a=$(time_it $prep run_fcachectl)
        b=$(time_it $prep run_fincore)
        c=$(time_it $prep run_vmtouch)
        printf '%-6s %11.4fs %11.4fs %11.4fs %9.1fx %9.1fx\n' $state "$a" "$b" "$c" \
                "$(echo "$b / $a" | bc -l)" "$(echo "$c / $a" | bc -l)"
done
