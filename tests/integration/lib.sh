# SPDX-License-Identifier: LGPL-2.1-or-later
# lib.sh: helpers shared by the integration tests (sourced).
# Tests print TAP ("ok N - what" / "not ok N - what") and exit 77 to skip.

FCACHECTL=${FCACHECTL:?set FCACHECTL to the fcachectl binary}
n=0
failures=0

ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); failures=$((failures + 1)); echo "not ok $n - $*"; }
skip_all() { echo "1..0 # SKIP $*"; exit 77; }
finish() { echo "1..$n"; [ "$failures" -eq 0 ]; }

# check DESCRIPTION COMMAND...: the command must succeed.
check() {
        local what=$1; shift
        if out=$("$@" 2>&1); then ok "$what"; else not_ok "$what"; echo "$out" | sed 's/^/# /'; fi
}

# val KEY ARGS...: the value of KEY in the first result of `fcachectl --json ARGS`.
val() {
        local key=$1; shift
        "$FCACHECTL" --json -q "$@" 2>/dev/null | /usr/bin/python3 -c '
import json, sys
doc = json.load(sys.stdin)
r = doc["results"][0]
print(r["result"].get(sys.argv[1], "MISSING") if r["ok"] else "ERROR:" + r["error"]["name"])
' "$key"
}

# expect DESCRIPTION ACTUAL OP EXPECTED, with OP one of = != -gt -ge -lt -eq.
expect() {
        local what=$1 a=$2 op=$3 b=$4
        case $op in
        =|!=) if [ "$a" "$op" "$b" ]; then ok "$what"; else not_ok "$what ($a $op $b)"; fi ;;
        *) if [ "$a" -eq "$a" ] 2>/dev/null && [ "$a" "$op" "$b" ]; then ok "$what"
           else not_ok "$what ($a $op $b)"; fi ;;
        esac
}
