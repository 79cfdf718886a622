#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# clock-skew.sh TOOL: conflict decisions do not depend on clocks.  The
# scripted conflict scenario runs with the client under libfaketime (-2d,
# +1h, and a jump between recording and reintegration) and the server's
# edits stamped with a skewed clock (older than the base versions, or in the
# future); the server and the conflict table must equal those of a run
# without skew.  Exit 77 without faketime.
set -u
TOOL=${1:?usage: clock-skew.sh TOOL}
command -v faketime >/dev/null || { echo "1..0 # SKIP needs faketime (apt install faketime)"; exit 77; }
# libfaketime is an LD_PRELOAD library; an ASan-built tool must accept it ahead of its runtime.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
W=$(mktemp -d /tmp/fcache-skew.XXXXXX)
trap 'rm -rf "$W"' EXIT
run() { # DIR CLIENT_RECORD CLIENT_REINT SERVER
        local d=$1
        "$TOOL" init "$d" 5 >/dev/null &&
        faketime -f "$2" "$TOOL" record "$d" 5 80 conflicts >/dev/null &&
        FCACHE_TEST_SERVER_CLOCK=1 faketime -f "$4" "$TOOL" server-edits "$d" &&
        faketime -f "$3" "$TOOL" reint "$d" >/dev/null &&
        "$TOOL" dump "$d" srv >"$d.dump"
}
run "$W/ref" "+0" "+0" "+0" || { echo "Bail out! reference run failed"; exit 1; }
[ "$(grep -c '^CONFLICT' "$W/ref.dump")" = 5 ] || { echo "Bail out! reference has no conflicts"; exit 1; }
cases=("-2d|-2d|-2d" "+1h|+1h|-3d" "-2d|+5d|+1y" "+0|-30d|-365d" "@2001-01-01 00:00:00|+0|@2000-01-01 00:00:00")
echo "1..${#cases[@]}"
i=0
for c in "${cases[@]}"; do
        i=$((i + 1))
        IFS='|' read -r rec reint srv <<<"$c"
        if run "$W/c$i" "$rec" "$reint" "$srv" && diff -u "$W/ref.dump" "$W/c$i.dump" >"$W/diff"; then
                echo "ok $i - client record '$rec', reintegrate '$reint', server clock '$srv': same merges and conflicts"
        else
                echo "not ok $i - client record '$rec', reintegrate '$reint', server clock '$srv'"
                sed 's/^/# /' "$W/diff" | head -20
        fi
done
