#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# askpass.sh: fcachectl on a terminal lets polkit ask for a password. A rule
# answers AUTH_SELF for org.fcache.pin to a test user with a password; on a
# pseudo-terminal fcachectl starts pkttyagent, which asks, and the test types
# the password: the pin is made. A wrong password, --no-ask-password and a
# standard input that is not a terminal are refused (the last two without
# asking). polkit's setuid helper ignores DBUS_SYSTEM_BUS_ADDRESS, so the
# terminal runs in a mount namespace where /run/dbus/system_bus_socket is the
# test's bus.
source "$(dirname "$0")/lib.sh"
[ -x "${FCACHECTL:-}" ] || skip_all "FCACHECTL is not set to the fcachectl binary"
[ -x /usr/bin/pkttyagent ] || skip_all "pkttyagent is not installed (apt-get install pkexec)"
[ -u /usr/lib/polkit-1/polkit-agent-helper-1 ] || skip_all "polkit-agent-helper-1 is not setuid"
command -v chpasswd >/dev/null || skip_all "chpasswd is not installed"
PTY=(/usr/bin/python3 "$SRCDIR/tests/dbus/askpass.py")
PASSWORD="fcache-Test-$$"

mkdir -p "$T/files"
echo data > "$T/files/f"
chmod -R a+rX "$T/files"
start_bus || exit 1
start_fcached || exit 1
make_user user fcask
echo "$user:$PASSWORD" | chpasswd
cat > "$T/polkit/rules.d/50-fcache-askpass.rules" <<RULE
polkit.addRule(function(action, subject) {
    if (action.id == "org.fcache.pin" && subject.user == "$user")
        return polkit.Result.AUTH_SELF;
});
RULE
chmod 644 "$T/polkit/rules.d/50-fcache-askpass.rules"

# terminal ARGS...: fcachectl ARGS as the user on a pseudo-terminal, the password typed
# when asked ("-" as the first argument: type nothing).
terminal() {
        local pw=$PASSWORD
        [ "$1" = "-" ] && { pw=-; shift; }
        [ "$1" = "--wrong" ] && { pw=wrong-password; shift; }
        unshare -m --propagation private sh -c '
                mount -t tmpfs -o mode=755 none /run/dbus &&
                ln -s "$1" /run/dbus/system_bus_socket && shift && exec "$@"' sh \
                "$T/system_bus_socket" "${PTY[@]}" "$pw" \
                setpriv --reuid="$user" --regid="$user" --init-groups "$FCACHECTL" "$@"
}
pinned() { "$FCACHECTL" query pinned "$T/files/f" 2>/dev/null | grep -cE '^pinned[= ]+yes'; }

# polkitd reads the rule by itself: wait until it asks instead of refusing outright.
for _ in $(seq 50); do
        out=$(as "$user" busctl --system call "$BUS" "$OBJ" org.fcache.Manager1 Pin sbub \
                "$T/files/f" false 0 true 2>&1)
        echo "$out" | grep -q "challenge\|Interactive authentication required\|Not authorized" && break
        sleep 0.1
done

out=$(as "$user" "$FCACHECTL" pin "$T/files/f" </dev/null 2>&1)
expect "standard input not a terminal: refused, nothing asked" \
        "$(echo "$out" | grep -c 'Password')$(echo "$out" | grep -ci 'not authorized')" = 01
out=$(terminal - --no-ask-password pin "$T/files/f" 2>&1); st=$?
expect "--no-ask-password on a terminal: refused ($st)" "$st" != 0
expect "and nothing asked" "$(echo "$out" | grep -c 'Password')" = 0
expect "nothing pinned" "$(pinned)" = 0
out=$(terminal --wrong pin "$T/files/f" 2>&1); st=$?
echo "$out" | diag
expect "a wrong password: asked ($st)" "$(echo "$out" | grep -c 'Password:')" -ge 1
expect "and refused at once (exit 1, not a timeout)" "$st" = 1
expect "nothing pinned" "$(pinned)" = 0
out=$(terminal pin "$T/files/f" 2>&1); st=$?
echo "$out" | diag
expect "on a terminal pkttyagent asks for the user's password" "$(echo "$out" | grep -c 'Password:')" = 1
expect "and polkit accepts it: fcachectl succeeds" "$st" = 0
expect "the file is pinned" "$(pinned)" = 1
out=$(terminal query pinned "$T/files/f" 2>&1); st=$?
expect "a query on a terminal asks nothing" "$st:$(echo "$out" | grep -c 'Password')" = 0:0
check "fcached is alive" fcached_alive
if stop_fcached; then ok "fcached stops cleanly"
else not_ok "fcached stops cleanly"; grep -B2 -A40 -E "ERROR|runtime error" "$T/fcached.log" | head -80 | diag; fi
finish
