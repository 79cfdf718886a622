#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# pins.sh: pins held by fcached on a plain mount. They persist and are re-applied
# at start; a recursive pin follows its tree (new files pinned, removed ones
# released); an inotify queue overflow leads to a rescan; limits fail with
# LimitExceeded; long operations report Progress and can be cancelled, also by
# several clients at once; fcachectl pins through the daemon.
source "$(dirname "$0")/lib.sh"
start_bus || exit 1
start_fcached --pin-budget=64M --max-pins=8 || exit 1

pinned() { control "$1" "query pinned" | jget "${2:-pinned}"; }
files_of() { control "$1" "query pinned" | jget pin | sed -n 's/.* files=\([0-9]*\).*/\1/p'; }
wait_for() { # wait_for SECONDS COMMAND...: until the command succeeds
        local end=$((SECONDS + $1)); shift
        until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.1; done
}
D=$T/tree
mkdir -p "$D/a/b" "$D/c"
for i in 1 2 3; do head -c 100000 /dev/urandom > "$D/a/f$i"; done
seq 1 1000 > "$D/a/b/deep"; echo top > "$D/top"

# a recursive pin through the Pin method: an operation that finishes with Finished
op=$(call Pin sbub "$D" true 700 false | cut -d'"' -f2)
expect "Pin returns an operation object" "${op%/*}" = /org/fcache/Manager1/operation
wait_for 10 sh -c "busctl --system get-property $BUS $op org.fcache.Operation1 State | grep -qv running"
expect "the operation ends done" "$(busctl --system get-property $BUS "$op" org.fcache.Operation1 State)" = 's "done"'
res=$(busctl --system get-property $BUS "$op" org.fcache.Operation1 Result)
expect "its Result has the pin's files" "$(echo "$res" | grep -o '"files" t [0-9]*')" = '"files" t 5'
expect "PinCount is 1" "$(prop PinCount)" = 1
expect "a deep file is pinned" "$(pinned "$D/a/b/deep")" = yes
# (fcached locks with the system call: a sanitizer's mlock() is a no-op)
lck=$(awk '/VmLck/ {print $2}' /proc/$FCACHED_PID/status)
expect "the pinned pages are locked in memory (VmLck >= 290 kB)" "$lck" -ge 290
expect "fcached holds no descriptor per pinned file" "$(ls /proc/$FCACHED_PID/fd | wc -l)" -lt 30

# the tree is followed
seq 1 5000 > "$D/c/new"
wait_for 5 sh -c "[ \"\$(busctl --system --json=short call $BUS $OBJ org.fcache.Manager1 Query ssb $D/c/new pinned false | grep -o '\"pinned\":{[^}]*}')\" = '\"pinned\":{\"type\":\"s\",\"data\":\"yes\"}' ]"
expect "a file created in the pinned tree becomes pinned" "$(pinned "$D/c/new")" = yes
mkdir -p "$D/newdir/sub"; echo x > "$D/newdir/sub/g"
wait_for 5 sh -c "busctl --system --json=short call $BUS $OBJ org.fcache.Manager1 Query ssb $D/newdir/sub/g pinned false | grep -q '\"data\":\"yes\"'"
expect "a file in a new directory of the tree becomes pinned" "$(pinned "$D/newdir/sub/g")" = yes
mkdir -p "$T/outside/m"; echo y > "$T/outside/m/h"; mv "$T/outside/m" "$D/moved"
wait_for 5 sh -c "busctl --system --json=short call $BUS $OBJ org.fcache.Manager1 Query ssb $D/moved/h pinned false | grep -q '\"data\":\"yes\"'"
expect "a directory moved into the tree is pinned" "$(pinned "$D/moved/h")" = yes
rm "$D/a/f1"
wait_for 5 sh -c "[ \"\$(busctl --system --json=short call $BUS $OBJ org.fcache.Manager1 Query ssb $D pinned false | grep -o 'files=[0-9]*')\" = files=7 ]"
expect "a removed file is released (7 files left)" "$(files_of "$D")" = 7

# a single-file pin follows the file's own changes
seq 1 100 > "$T/single"
call Control 'ssa{sv}' "$T/single" pin 0 >/dev/null
seq 1 20000 >> "$T/single"
want=$(stat -c %s "$T/single")
wait_for 5 sh -c "busctl --system --json=short call $BUS $OBJ org.fcache.Manager1 Query ssb $T/single pinned false | grep -q 'bytes=$want '"
expect "a pinned file that grows is held at its new size" "$(control "$T/single" "query pinned" | jget pin | sed -n 's/.* bytes=\([0-9]*\).*/\1/p')" = "$want"
call Unpin sb "$T/single" false >/dev/null

# restart: the pin is re-applied from the state directory
stop_fcached || not_ok "fcached's exit status on SIGTERM"
grep -q '^\[pin ' "$T/state/pins.ini" && ok "the pin is persisted in pins.ini" || not_ok "pins.ini has the pin"
start_fcached --pin-budget=64M --max-pins=8 || exit 1
expect "after a restart PinCount is 1" "$(prop PinCount)" = 1
expect "after a restart the tree's files are held again" "$(files_of "$D")" = 7
expect "after a restart a deep file is pinned" "$(pinned "$D/a/b/deep")" = yes
grep -q "Re-applied 1 pins" "$T/fcached.log" && ok "the log says the pins were re-applied" || not_ok "re-apply log line"
echo later > "$D/a/later"
wait_for 5 sh -c "busctl --system --json=short call $BUS $OBJ org.fcache.Manager1 Query ssb $D/a/later pinned false | grep -q '\"data\":\"yes\"'"
expect "after a restart the tree is still followed" "$(pinned "$D/a/later")" = yes

# inotify overflow: stop fcached, make more events than the queue holds, resume
max=$(cat /proc/sys/fs/inotify/max_queued_events)
kill -STOP "$FCACHED_PID"
/usr/bin/python3 - "$D/c" $((max + 500)) <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    open(os.path.join(d, "burst%d" % i), "w").close()
PY
kill -CONT "$FCACHED_PID"
wait_for 60 sh -c "busctl --system --json=short call $BUS $OBJ org.fcache.Manager1 Control 'ssa{sv}' $D 'query pinned' 0 | grep -q '\"rescans\":{\"type\":\"t\",\"data\":[1-9]'"
expect "the overflow is counted as a rescan" "$(control "$D" "query pinned" | jget rescans)" -ge 1
grep -q "inotify queue overflowed" "$T/fcached.log" && ok "the log says the queue overflowed" || not_ok "overflow log line"
want=$((8 + max + 500))
wait_for 60 sh -c "[ \"\$(busctl --system --json=short call $BUS $OBJ org.fcache.Manager1 Query ssb $D pinned false | grep -o 'files=[0-9]*')\" = files=$want ]"
expect "after the rescan every burst file is pinned" "$(files_of "$D")" = "$want"
rm -f "$D"/c/burst*

# limits
head -c $((80 << 20)) /dev/zero > "$T/big"
check_fails "a pin bigger than the budget is LimitExceeded" "LimitExceeded|budget" \
        call Control 'ssa{sv}' "$T/big" pin 0
out=$(control "$T/big" "pin dry-run")
expect "pin dry-run reports the room it needs" "$(echo "$out" | jget bytes_needed)" = $((80 << 20))
expect "pin dry-run says it does not fit" "$(echo "$out" | jget fits)" = no
expect "a failed pin leaves nothing (PinCount 1)" "$(prop PinCount)" = 1
for i in 1 2 3 4 5 6 7; do echo $i > "$T/small$i"; call Control 'ssa{sv}' "$T/small$i" pin 0 >/dev/null; done
echo 8 > "$T/small8"
check_fails "a pin past --max-pins is LimitExceeded" "LimitExceeded|most it may" \
        call Control 'ssa{sv}' "$T/small8" pin 0
check "unpin recursive of the test directory" call Control 'ssa{sv}' "$T" "unpin recursive" 0
expect "every pin is gone" "$(prop PinCount)" = 0
expect "nothing is locked any more (VmLck 0 kB)" "$(awk '/VmLck/ {print $2}' /proc/$FCACHED_PID/status)" = 0
check "set cache-size lowers the budget" call SetCacheSize st / 150000
check_fails "then a pin of 2 x 100 kB does not fit" "LimitExceeded|budget" call Control 'ssa{sv}' "$D/a" pin 0
expect "and leaves nothing (PinCount 0)" "$(prop PinCount)" = 0
call SetCacheSize st / 67108864 >/dev/null

# progress and cancel of a long operation
mkdir -p "$T/many"
/usr/bin/python3 - "$T/many" <<'PY'
import os, sys
for d in range(40):
    os.makedirs(os.path.join(sys.argv[1], "d%d" % d))
    for f in range(100):
        with open(os.path.join(sys.argv[1], "d%d" % d, "f%d" % f), "wb") as fh:
            fh.write(b"x" * 8192)
PY
gdbus monitor --system --dest $BUS > "$T/monitor.log" 2>&1 & MON=$!; PIDS+=($MON)
sleep 0.3
# Finished goes to the caller's connection only (a monitor does not see it): wait on it there.
/usr/bin/python3 "$SRCDIR/tests/dbus/operation.py" start "$T/many" "pin recursive" > "$T/start.out" 2>&1
grep -q "^finished done" "$T/start.out" && ok "Finished is emitted" || { not_ok "Finished is emitted"; tail -5 "$T/start.out" | diag; }
sleep 0.3
grep -q "org.fcache.Manager1.PinsChanged" "$T/monitor.log" && ok "PinsChanged is emitted" || not_ok "PinsChanged is emitted"
call Unpin sb "$T/many" true >/dev/null
# cancel: several clients cancel one prefetch at once
op=$(call Start 'ssa{sv}' "$T/many" "prefetch recursive" 0 | cut -d'"' -f2)
cpids=()
for i in 1 2 3 4 5; do busctl --system call $BUS "$op" org.fcache.Operation1 Cancel >"$T/cancel$i" 2>&1 & cpids+=($!); done
cfail=0; for p in "${cpids[@]}"; do wait "$p" || cfail=$((cfail + 1)); done
expect "five concurrent Cancel calls all succeed" "$cfail" = 0
wait_for 30 sh -c "busctl --system get-property $BUS $op org.fcache.Operation1 State | grep -qv running"
st=$(busctl --system get-property $BUS "$op" org.fcache.Operation1 State)
case $st in *cancelled*|*done*) ok "the operation ends cancelled (or done first): $st" ;; *) not_ok "operation state $st" ;; esac
check "Cancel after the end does nothing and succeeds" busctl --system call $BUS "$op" org.fcache.Operation1 Cancel
sleep 6
check_fails "an ended operation goes away after the linger time" "nknown object|UnknownObject|does not exist" \
        busctl --system get-property $BUS "$op" org.fcache.Operation1 State

# fcachectl through the daemon, with progress and JSON
if [ -x "${FCACHECTL:-}" ]; then
        out=$("$FCACHECTL" --json pin recursive "$T/many" 2>&1)
        echo "$out" | grep -q '"backend": *"fcached"' && ok "fcachectl pin goes through fcached" || { not_ok "fcachectl pin"; echo "$out" | diag; }
        out=$("$FCACHECTL" query pinned "$T/many/d3/f7" 2>&1)
        echo "$out" | grep -q "yes" && ok "fcachectl query pinned says yes" || { not_ok "fcachectl query pinned"; echo "$out" | diag; }
        check "fcachectl unpin recursive" "$FCACHECTL" unpin recursive "$T/many"
        check "fcachectl set cache-size" "$FCACHECTL" set cache-size 128M /
        expect "the budget is 128 MiB" "$(prop BudgetBytes)" = $((128 << 20))
        check_fails "fcachectl disconnect on a plain mount says it is for volumes" "fcache volumes" \
                "$FCACHECTL" disconnect "$T"
        # progress: script(1) gives fcachectl a terminal so that it draws it
        if command -v script >/dev/null; then
                script -qec "$FCACHECTL pin recursive $T/many" /dev/null > "$T/progress.txt" 2>&1
                grep -q "files" "$T/progress.txt" && ok "fcachectl shows the operation's progress" || { not_ok "progress shown"; tail -c 300 "$T/progress.txt" | diag; }
                "$FCACHECTL" unpin recursive "$T/many" >/dev/null
        fi
fi
if fcached_alive; then ok "fcached is still running"; else not_ok "fcached died"; tail "$T/fcached.log" | diag; fi
call Start 'ssa{sv}' "$T/many" "pin recursive" 0 >/dev/null
call Start 'ssa{sv}' "$T/many" "prefetch recursive" 0 >/dev/null
if stop_fcached; then ok "fcached stops cleanly on SIGTERM with operations running"; else not_ok "fcached's exit status on SIGTERM"; fi
if [ -x "${FCACHECTL:-}" ]; then
        check_fails "with fcached stopped, fcachectl pin says it needs the daemon" "needs the fcache daemon" \
                "$FCACHECTL" pin "$D/top"
fi
finish
