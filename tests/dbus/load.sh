#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# load.sh [CLIENTS CALLS]: CLIENTS clients making CALLS calls each (Query, through
# credentials, polkit, the caller-identity worker and the backend); nothing may
# fail or crash. Prints calls/s and latency percentiles (dbus-load).
source "$(dirname "$0")/lib.sh"
DBUS_LOAD=${DBUS_LOAD:?set DBUS_LOAD to the dbus-load binary}
clients=${1:-50} calls=${2:-200}
start_bus || exit 1
start_fcached || exit 1
echo data > "$T/f"
if out=$("$DBUS_LOAD" "$clients" "$calls" "$T/f" 2>&1); then ok "$out"; else not_ok "load"; fi
echo "$out" | sed 's/^/# /'
fds=$(ls /proc/$FCACHED_PID/fd | wc -l)
expect "descriptors stay bounded after the load ($fds)" "$fds" -lt 40
rss=$(awk '/VmRSS/ {print $2}' /proc/$FCACHED_PID/status)
echo "# fcached RSS after the load: $rss kB"
if fcached_alive; then ok "fcached is still running"; else not_ok "fcached died"; tail "$T/fcached.log" | diag; fi
if stop_fcached; then ok "fcached stops cleanly on SIGTERM"; else not_ok "fcached's exit status on SIGTERM"; fi
finish
