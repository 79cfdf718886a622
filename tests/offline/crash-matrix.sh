#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# crash-matrix.sh TOOL: kill -9 (FCACHE_FAULT=<point>:<n>) at every named
# point x n=1..3, while recording offline changes and while reintegrating,
# then resume and check the server against a model (TAP output):
#   A. server unchanged: the server must equal DIR/direct, the same changes
#      applied directly (no acknowledged edit lost, none applied twice, no
#      deleted file back, no temporaries left);
#   B. with scripted server-side edits: the server and the conflict table
#      (kinds, paths and the bytes of every kept version) must equal those of
#      an uninterrupted run, which must itself show the expected merge and
#      conflicts.
# A second reintegration after each must change nothing.  Then kill -9 at
# random moments of reintegration, repeatedly, and resume.
set -u
TOOL=${1:?usage: crash-matrix.sh TOOL}
STEPS=${STEPS:-150}
SEED=${SEED:-7}
WORK=$(mktemp -d /tmp/fcache-crash.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); fail=1; echo "not ok $n - $*"; }

RECORD_POINTS="oplog-before-data oplog-before-commit"
REINT_POINTS="reint-after-write reint-merge-output reint-conflict-record reint-in-place-write
              reint-linked-unlink"

# run_faulted SPEC CMD...: runs CMD with the fault armed; prints "killed" or "completed".
run_faulted() {
        local spec=$1; shift
        FCACHE_FAULT=$spec "$@" >"$WORK/out" 2>&1
        local rc=$?
        if [ $rc -eq 137 ]; then echo killed; elif [ $rc -eq 0 ]; then echo completed; else echo "failed($rc)"; cat "$WORK/out" >&2; fi
}

# scenario DIR WITH_CONFLICTS PHASE POINT N
scenario() {
        local d=$1 conflicts=$2 phase=$3 point=$4 k=$5 how=none
        rm -rf "$d"
        "$TOOL" init "$d" "$SEED" >/dev/null || return 1
        if [ "$phase" = record ]; then
                how=$(run_faulted "$point:$k" "$TOOL" record "$d" "$SEED" "$STEPS" $conflicts)
                "$TOOL" record "$d" "$SEED" "$STEPS" $conflicts >/dev/null || return 1
        else
                "$TOOL" record "$d" "$SEED" "$STEPS" $conflicts >/dev/null || return 1
        fi
        [ -n "$conflicts" ] && { "$TOOL" server-edits "$d" || return 1; }
        if [ "$phase" = reint ]; then
                how=$(run_faulted "$point:$k" "$TOOL" reint "$d")
        fi
        "$TOOL" reint "$d" >/dev/null || return 1
        echo "$how" >"$d/how"
}

# Reference for B: no faults.
ref="$WORK/ref"
scenario "$ref" conflicts none none 0 || { echo "Bail out! reference run failed"; exit 1; }
"$TOOL" dump "$ref" srv >"$WORK/ref.dump"
expect_ok=1
for pat in "^CONFLICT content /c1 " "^CONFLICT edit-delete /c2 " "^CONFLICT delete-edit /c3 " \
           "^CONFLICT mode /c4 " "^CONFLICT create-create /cc "; do
        grep -q "$pat" "$WORK/ref.dump" || { expect_ok=0; echo "# missing: $pat"; }
done
[ "$(grep -c '^CONFLICT' "$WORK/ref.dump")" = 5 ] || expect_ok=0
grep -q " MISSING" "$WORK/ref.dump" && expect_ok=0
for f in c0 c5 c6; do
        grep -q "$f Line 1" "$ref/srv/$f" && grep -q "$f Line 9" "$ref/srv/$f" || expect_ok=0
done
grep -q "c1 line %" "$ref/srv/c1" || expect_ok=0   # the server's side untouched
[ -e "$ref/srv/c2" ] && expect_ok=0                  # not resurrected
grep -q "^c3 edited on the server" "$ref/srv/c3" || expect_ok=0
[ $expect_ok = 1 ] && ok "reference run: clean merges of c0, c5, c6; exactly the five expected conflicts" \
        || not_ok "reference run: clean merges of c0, c5, c6; exactly the five expected conflicts"

for scen in A B; do
        for phase in record reint; do
                points=$RECORD_POINTS; [ $phase = reint ] && points=$REINT_POINTS
                for point in $points; do
                        for k in 1 2 3; do
                                d="$WORK/$scen-$point-$k"
                                c=""; [ $scen = B ] && c=conflicts
                                if ! scenario "$d" "$c" "$phase" "$point" "$k"; then
                                        not_ok "$scen $point:$k: a run failed"; continue
                                fi
                                how=$(cat "$d/how")
                                "$TOOL" dump "$d" srv >"$d.srv"
                                if [ $scen = A ]; then
                                        "$TOOL" dump "$d" direct >"$d.model"
                                else
                                        cp "$WORK/ref.dump" "$d.model"
                                fi
                                # Replaying again must change nothing.
                                "$TOOL" reint "$d" >"$d.again"
                                "$TOOL" dump "$d" srv >"$d.srv2"
                                if grep -q LEFTOVER "$d.srv"; then
                                        not_ok "$scen $point:$k ($how): temporaries left on the server"
                                elif ! diff -u "$d.model" "$d.srv" >"$d.diff"; then
                                        not_ok "$scen $point:$k ($how): server differs from the model"
                                        sed 's/^/# /' "$d.diff" | head -20
                                elif ! cmp -s "$d.srv" "$d.srv2" || ! grep -q "^total=0 " "$d.again"; then
                                        not_ok "$scen $point:$k ($how): a second replay changed something"
                                else
                                        ok "$scen $point:$k ($how): server and conflicts match the model; replaying twice equals once"
                                fi
                        done
                done
        done
done
# kill -9 during reintegration, then a resume after a reboot (another boot
# id, bind-mounted in a mount namespace of its own): the journal's marks
# after its last sync point are not trusted and their records settled by
# their checks.  No server file may be lost or wrong; a rename settled so
# may be kept as a conflict, so conflict lines are not compared.
boot="$WORK/boot_id"
echo 00000000-0000-4000-8000-000000000001 >"$boot"
if unshare -m sh -c "mount --bind '$boot' /proc/sys/kernel/random/boot_id" 2>/dev/null; then
        for scen in A B; do
                for k in 1 3 20; do
                        d="$WORK/boot-$scen-$k"
                        c=""; [ $scen = B ] && c=conflicts
                        rm -rf "$d"
                        "$TOOL" init "$d" "$SEED" >/dev/null && "$TOOL" record "$d" "$SEED" "$STEPS" $c >/dev/null ||
                                { not_ok "reboot $scen $k: setup failed"; continue; }
                        [ -n "$c" ] && "$TOOL" server-edits "$d"
                        how=$(run_faulted "reint-after-write:$k" "$TOOL" reint "$d")
                        unshare -m sh -c "mount --bind '$boot' /proc/sys/kernel/random/boot_id &&
                                          exec '$TOOL' reint '$d'" >/dev/null ||
                                { not_ok "reboot $scen $k: the resume failed"; continue; }
                        "$TOOL" dump "$d" srv | grep -v '^CONFLICT' >"$d.srv"
                        if [ $scen = A ]; then "$TOOL" dump "$d" direct; else cat "$WORK/ref.dump"; fi |
                                grep -v '^CONFLICT' >"$d.model"
                        if grep -q LEFTOVER "$d.srv"; then
                                not_ok "reboot $scen $k ($how): temporaries left on the server"
                        elif diff -u "$d.model" "$d.srv" >"$d.diff"; then
                                ok "reboot $scen $k ($how): after a reboot the server's files match the model"
                        else
                                not_ok "reboot $scen $k ($how): server differs from the model"
                                sed 's/^/# /' "$d.diff" | head -20
                        fi
                done
        done
else
        ok "# SKIP reboot: no mount namespace to give the resume another boot id"
fi
# Random kill -9 during reintegration (not at a named point), then resume.
for i in 1 2 3 4 5 6; do
        for scen in A B; do
                d="$WORK/R$scen-$i"
                c=""; [ $scen = B ] && c=conflicts
                rm -rf "$d"
                "$TOOL" init "$d" "$SEED" >/dev/null && "$TOOL" record "$d" "$SEED" "$STEPS" $c >/dev/null ||
                        { not_ok "random $scen $i: setup failed"; continue; }
                [ -n "$c" ] && "$TOOL" server-edits "$d"
                kills=0
                # Kill repeatedly at random moments until a run completes.
                for attempt in 1 2 3 4 5 6 7 8; do
                        "$TOOL" reint "$d" >/dev/null 2>&1 &
                        pid=$!
                        sleep "0.0$((RANDOM % 9 + 1))"
                        if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
                        wait "$pid" 2>/dev/null
                done
                "$TOOL" reint "$d" >/dev/null || { not_ok "random $scen $i: final run failed"; continue; }
                "$TOOL" dump "$d" srv >"$d.srv"
                if [ $scen = A ]; then "$TOOL" dump "$d" direct >"$d.model"; else cp "$WORK/ref.dump" "$d.model"; fi
                if grep -q LEFTOVER "$d.srv"; then
                        not_ok "random $scen $i ($kills kills): temporaries left on the server"
                elif diff -u "$d.model" "$d.srv" >"$d.diff"; then
                        ok "random $scen $i: kill -9 sent at $kills random moments of reintegration, then resume: server and conflicts match the model"
                else
                        not_ok "random $scen $i ($kills kills): server differs from the model"
                        sed 's/^/# /' "$d.diff" | head -20
                fi
        done
done
echo "1..$n"
exit $fail
