# SPDX-License-Identifier: LGPL-2.1-or-later
# lib.sh: the dbus suite's environment (sourced): a private system bus with the
# project's bus policy, the real polkitd with the project's actions (in a private
# mount namespace), test users, and fcached on that bus. TAP helpers as in
# tests/integration/lib.sh. Everything started is killed by its PID on exit, and
# the users and groups made are deleted.
#
# Needs: FCACHED (the daemon), SRCDIR (the source tree); FCACHECTL optional.

n=0
failures=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); failures=$((failures + 1)); echo "not ok $n - $*"; }
skip_all() { echo "1..0 # SKIP $*"; exit 77; }
finish() { echo "1..$n"; [ "$failures" -eq 0 ]; }
diag() { sed 's/^/# /'; }

# check DESCRIPTION COMMAND...: the command must succeed.
check() {
        local what=$1; shift
        if out=$("$@" 2>&1); then ok "$what"; else not_ok "$what"; echo "$out" | diag; fi
}
# check_fails DESCRIPTION PATTERN COMMAND...: the command must fail with output matching PATTERN.
check_fails() {
        local what=$1 pat=$2; shift 2
        if out=$("$@" 2>&1); then not_ok "$what (it succeeded)"; echo "$out" | diag
        elif echo "$out" | grep -qE -- "$pat"; then ok "$what"
        else not_ok "$what (wanted /$pat/)"; echo "$out" | diag; fi
}
# expect DESCRIPTION ACTUAL OP EXPECTED
expect() {
        local what=$1 a=$2 op=$3 b=$4
        case $op in
        =|!=) if [ "$a" "$op" "$b" ]; then ok "$what"; else not_ok "$what ($a $op $b)"; fi ;;
        *) if [ "$a" -eq "$a" ] 2>/dev/null && [ "$a" "$op" "$b" ]; then ok "$what"
           else not_ok "$what ($a $op $b)"; fi ;;
        esac
}

[ "$(id -u)" = 0 ] || skip_all "needs root (users, polkitd, a private mount namespace)"
for prog in dbus-daemon busctl gdbus setpriv unshare useradd systemd-analyze; do
        command -v $prog >/dev/null || skip_all "$prog is not installed"
done
[ -x /usr/lib/polkit-1/polkitd ] || skip_all "polkitd is not installed (apt-get install polkitd)"
[ -x "${FCACHED:-}" ] || skip_all "FCACHED is not set to the fcached binary"
SRCDIR=${SRCDIR:?set SRCDIR to the source tree}

T=$(mktemp -d /tmp/fcache-dbus-XXXXXX)
chmod 755 "$T"
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$T/system_bus_socket
PIDS=()
USERS=()
GROUPS_MADE=()
FCACHED_PID=
BUS="org.fcache.Manager1"
OBJ="/org/fcache/Manager1"

cleanup() {
        local i
        [ -n "$FCACHED_PID" ] && kill "$FCACHED_PID" 2>/dev/null
        for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null; done
        wait 2>/dev/null
        for u in "${USERS[@]}"; do userdel "$u" 2>/dev/null; groupdel "$u" 2>/dev/null; done
        for g in "${GROUPS_MADE[@]}"; do groupdel "$g" 2>/dev/null; done
        rm -rf "$T"
}
trap cleanup EXIT

wait_name() {
        for _ in $(seq 400); do busctl --system status "$1" >/dev/null 2>&1 && return 0; sleep 0.05; done
        echo "# timeout waiting for $1 on the bus"; return 1
}

# make_user VAR NAME [GROUP]: a test user NAME$$ (no home, own group), optionally
# also in GROUP; its name is stored in VAR. Not in a subshell: cleanup deletes it.
make_user() {
        local u="$2$$" g=${3:-}
        if [ -n "$g" ] && ! getent group "$g" >/dev/null; then groupadd "$g"; GROUPS_MADE+=("$g"); fi
        useradd -M -U ${g:+-G "$g"} "$u"
        USERS+=("$u")
        printf -v "$1" '%s' "$u"
}

start_bus() {
        mkdir -p "$T/services" "$T/polkit/actions" "$T/polkit/rules.d"
        sed -e "s|@DIR@|$T|g" -e "s|@SRCDIR@|$SRCDIR|g" "$SRCDIR/tests/dbus/system-bus.conf.in" > "$T/bus.conf"
        dbus-daemon --config-file="$T/bus.conf" --nofork --nopidfile 2>"$T/bus.log" & PIDS+=($!)
        for _ in $(seq 100); do [ -S "$T/system_bus_socket" ] && break; sleep 0.05; done
        [ -S "$T/system_bus_socket" ] || { cat "$T/bus.log" | diag; return 1; }
        cp "$SRCDIR/dbus/org.fcache.policy" "$T/polkit/actions/"
        chmod -R a+rX "$T/polkit"
        # polkitd sees only the project's actions and the test's rules: a private mount namespace.
        unshare -m --propagation private sh -c "mount --bind $T/polkit/actions /usr/share/polkit-1/actions &&
          mount --bind $T/polkit/rules.d /etc/polkit-1/rules.d && exec /usr/lib/polkit-1/polkitd --no-debug" \
                >"$T/polkit.log" 2>&1 & PIDS+=($!)
        wait_name org.freedesktop.PolicyKit1
}

# start_fcached [ARGS...]: fcached on the private bus, state in $T/state.
# FCACHED_WRAPPER (e.g. "valgrind --error-exitcode=1") runs it under a tool.
start_fcached() {
        ${FCACHED_WRAPPER:-} "$FCACHED" --state-dir="$T/state" --operation-linger=5 "$@" >>"$T/fcached.log" 2>&1 &
        FCACHED_PID=$!
        wait_name "$BUS" || { tail -20 "$T/fcached.log" | diag; return 1; }
}

# stop_fcached: SIGTERM, and its exit status must be 0.
stop_fcached() {
        local st=0
        [ -n "$FCACHED_PID" ] || return 0
        kill -TERM "$FCACHED_PID"
        wait "$FCACHED_PID" || st=$?
        FCACHED_PID=
        return $st
}

fcached_alive() { [ -n "$FCACHED_PID" ] && kill -0 "$FCACHED_PID" 2>/dev/null; }

# as USER COMMAND...: run as an unprivileged user, keeping the environment.
as() { local u=$1; shift; setpriv --reuid="$u" --regid="$u" --init-groups "$@"; }

# call [busctl args...]: busctl call on fcached.
call() { busctl --system call "$BUS" "$OBJ" org.fcache.Manager1 "$@"; }
# control PATH CMD: Control with no options, JSON output.
control() { busctl --system --json=short call "$BUS" "$OBJ" org.fcache.Manager1 Control 'ssa{sv}' "$1" "$2" 0; }
# prop NAME: a Manager1 property's value.
prop() { busctl --system get-property "$BUS" "$OBJ" org.fcache.Manager1 "$1" | cut -d' ' -f2-; }
# jget KEY: the value of KEY in a Control/Query JSON reply on stdin.
jget() { /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)["data"][0]
v = d.get(sys.argv[1], {}).get("data", "MISSING")
print(v if not isinstance(v, list) else " | ".join(v))' "$1"; }
