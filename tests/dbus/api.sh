#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# api.sh: the API as documented. busctl introspect shows every method, property and
# signal of dbus/org.fcache.Manager1.xml with its signature; the README's busctl and
# gdbus examples run; every typed method answers, as root; errors are the
# documented org.fcache.Manager1.Error.* names.
source "$(dirname "$0")/lib.sh"
start_bus || exit 1
start_fcached || exit 1
echo data > "$T/f"
mkdir -p "$T/d"; echo x > "$T/d/g"

# introspection against the XML
intro=$(busctl --system introspect $BUS $OBJ org.fcache.Manager1)
op=$(call Prefetch sb "$T/f" false | cut -d'"' -f2)
opintro=$(busctl --system introspect $BUS "$op" org.fcache.Operation1)
while read -r iface kind name sig; do
        if [ "$iface" = org.fcache.Manager1 ]; then text=$intro; else text=$opintro; fi
        if echo "$text" | grep -qE "^\.$name +$kind +${sig//\{/\\\{}( |$)"; then ok "introspect: $iface.$name ($kind ${sig})"
        else not_ok "introspect: $iface.$name ($kind $sig)"; fi
done < <(/usr/bin/python3 - "$SRCDIR/dbus/org.fcache.Manager1.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
for iface in ET.parse(sys.argv[1]).getroot().findall("interface"):
    for m in iface.findall("method"):
        ins = "".join(a.get("type") for a in m.findall("arg") if a.get("direction", "in") == "in")
        print(iface.get("name"), "method", m.get("name"), ins or "-")
    for p in iface.findall("property"):
        print(iface.get("name"), "property", p.get("name"), p.get("type"))
    for s in iface.findall("signal"):
        print(iface.get("name"), "signal", s.get("name"), "".join(a.get("type") for a in s.findall("arg")) or "-")
PY
)

# the README's examples, run as written
mapfile -t examples < <(grep -E '^    (busctl|gdbus) ' "$SRCDIR/README.md")
expect "the README has busctl and gdbus examples" "${#examples[@]}" -ge 2
for ex in "${examples[@]}"; do
        case $ex in
        # AddVolume needs the reader's own NAME.conf; tests/dbus/volumes.sh covers it
        *'$(cat '*) n=$((n + 1)); echo "ok $n - README: ${ex# *} # SKIP needs a local config file" ;;
        *) check "README: ${ex# *}" eval "$ex" ;;
        esac
done

# every typed method, as root
check "Query cached" call Query ssb "$T/f" cached false
check "Query cached recursive" call Query ssb "$T/d" cached true
check "Query cache" call Query ssb "$T/f" cache false
check "Query state" call Query ssb "$T/f" state false
check "Query pinned" call Query ssb "$T/f" pinned false
check "Pin (dry-run) returns an operation" call Pin sbub "$T/f" false 10 true
check "Pin returns an operation" call Pin sbub "$T/f" false 10 false
sleep 0.3
expect "Pin pinned the file" "$(prop PinCount)" = 1
check "Unpin" call Unpin sb "$T/f" false
check "SetCacheSize" call SetCacheSize st / 100000000
expect "Version is fcached's" "$(prop Version)" = "\"$("$FCACHED" --version | cut -d' ' -f2)\""
check "KmodLoaded is a boolean" sh -c "busctl --system get-property $BUS $OBJ org.fcache.Manager1 KmodLoaded | grep -qE '^b (true|false)$'"
for m in "SetCacheable sb $T/f false" "SetReserve st $T/f 1000" "SetCache ss $T/f other" \
         "Disconnect s $T/f" "Reconnect s $T/f" "Query ssb $T/f conflicts false" \
         "Query ssb $T/f reintegration false"; do
        check_fails "$m on a plain mount is NotSupported" "fcache volumes" call $m
done
check_fails "an error has its documented D-Bus name" "org.fcache.Manager1.Error.NotSupported" \
        gdbus call --system --dest $BUS --object-path $OBJ --method org.fcache.Manager1.Disconnect "$T/f"
check_fails "a bad command is InvalidCommand naming the word" "Error.InvalidCommand.*'bogus'" \
        gdbus call --system --dest $BUS --object-path $OBJ --method org.fcache.Manager1.Control "$T/f" "query bogus" '{}'
check_fails "a relative path is InvalidArgument" "Error.InvalidArgument" \
        gdbus call --system --dest $BUS --object-path $OBJ --method org.fcache.Manager1.Control "f" "query cached" '{}'
check_fails "a missing path is NoSuchPath" "Error.NoSuchPath" \
        gdbus call --system --dest $BUS --object-path $OBJ --method org.fcache.Manager1.Control "$T/none" "query cached" '{}'
check_fails "an unknown option is InvalidArgument" "Error.InvalidArgument.*Unknown option" \
        gdbus call --system --dest $BUS --object-path $OBJ --method org.fcache.Manager1.Control "$T/f" "query cached" "{'frobnicate': <true>}"
check_fails "an option of the wrong type is InvalidArgument" "Error.InvalidArgument" \
        gdbus call --system --dest $BUS --object-path $OBJ --method org.fcache.Manager1.Control "$T/f" "query cached" "{'no-follow': <'yes'>}"
check_fails "Pin with priority 5000 is refused" "out of range" call Pin sbub "$T/f" false 5000 false
out=$(gdbus call --system --dest $BUS --object-path $OBJ --method org.fcache.Manager1.Control "$T/f" "query cached" '{}')
echo "$out" | grep -q "'pages_cached': <uint64 " && ok "numbers are uint64 in a result" || { not_ok "uint64 values"; echo "$out" | diag; }
echo "$out" | grep -q "'type': <'regular'>" && ok "other values are strings" || not_ok "string values"
if fcached_alive; then ok "fcached is still running"; else not_ok "fcached died"; tail "$T/fcached.log" | diag; fi
if stop_fcached; then ok "fcached stops cleanly on SIGTERM"; else not_ok "fcached's exit status on SIGTERM"; fi
grep -q "Stopped" "$T/fcached.log" && ok "fcached logs its stop" || not_ok "stop log line"

# D-Bus activation: with fcached stopped, a call starts it from the activation file
sed -e "s|^Exec=.*|Exec=$FCACHED --state-dir=$T/state --operation-linger=5|" \
        "$SRCDIR/dbus/org.fcache.Manager1.service.in" > "$T/services/org.fcache.Manager1.service"
busctl --system call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >/dev/null
check "a call activates fcached from the activation file" call Query ssb "$T/f" cached false
apid=$(busctl --system call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
        GetConnectionUnixProcessID s $BUS 2>/dev/null | cut -d' ' -f2)
if [ -n "$apid" ]; then FCACHED_PID=$apid; ok "the activated fcached has pid $apid"; else not_ok "activated pid"; fi
kill -TERM "$apid" 2>/dev/null
for _ in $(seq 50); do kill -0 "$apid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$apid" 2>/dev/null && not_ok "the activated fcached stops on SIGTERM" || ok "the activated fcached stops on SIGTERM"
FCACHED_PID=
finish
