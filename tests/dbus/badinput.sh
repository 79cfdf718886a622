#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# badinput.sh: bad input over the bus (badinput.py), then floods of concurrent
# calls and cancels; fcached must answer every one and stay up.
source "$(dirname "$0")/lib.sh"
/usr/bin/python3 -c 'import gi; gi.require_version("Gio", "2.0")' 2>/dev/null || skip_all "python3-gi is not installed"
start_bus || exit 1
start_fcached || exit 1
echo data > "$T/f"
out=$(/usr/bin/python3 "$SRCDIR/tests/dbus/badinput.py" 0 "$T" 2>&1)
echo "$out" | grep -v '^# next'
last=$(echo "$out" | sed -n 's/^# next \([0-9]*\) \([0-9]*\)$/\1 \2/p')
n=${last% *}; failures=${last#* }
[ -n "$n" ] || { not_ok "badinput.py ran to its end"; n=${n:-1}; failures=1; echo "$out" | tail -5 | diag; }

# concurrent clients starting and cancelling operations on one tree
mkdir -p "$T/tree"
for i in $(seq 200); do echo $i > "$T/tree/f$i"; done
pids=()
for i in $(seq 10); do
        ( op=$(call Start 'ssa{sv}' "$T/tree" "prefetch recursive" 0 | cut -d'"' -f2)
          busctl --system call $BUS "$op" org.fcache.Operation1 Cancel >/dev/null 2>&1 &
          busctl --system call $BUS "$op" org.fcache.Operation1 Cancel >/dev/null 2>&1
          wait ) & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
check "after concurrent starts and cancels, fcached answers" call Query ssb "$T/f" cached false
# clients that vanish mid-call
vpids=()
for i in $(seq 20); do
        ( timeout -s KILL 0.05 busctl --system call $BUS $OBJ org.fcache.Manager1 Control 'ssa{sv}' "$T/tree" "pin recursive" 0 ) >/dev/null 2>&1 & vpids+=($!)
done
{ for p in "${vpids[@]}"; do wait "$p"; done; } 2>/dev/null
sleep 0.5
check "after clients vanished mid-call, fcached answers" call Query ssb "$T/f" cached false
fds=$(ls /proc/$FCACHED_PID/fd | wc -l)
expect "fcached's descriptors stay bounded ($fds)" "$fds" -lt 40
if fcached_alive; then ok "fcached is still running"; else not_ok "fcached died"; tail "$T/fcached.log" | diag; fi
if stop_fcached; then ok "fcached stops cleanly on SIGTERM"; else not_ok "fcached's exit status on SIGTERM"; fi
finish
