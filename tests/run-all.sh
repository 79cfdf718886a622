#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# run-all.sh: set up (packages, build with AddressSanitizer + UBSan) and run every test
# suite, the fuzzers included; build once with Debian's hardening flags and build the
# Debian packages; ends with "N passed, N failed[, N skipped]".
# Run as root on Debian 12: the integration tests mount filesystems.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

status=0
tests/setup.sh build-sanitize -Db_sanitize=address,undefined || { echo "0 passed, 1 failed"; exit 1; }
# The boot suite runs below, with the packages that build-deb.sh builds.
meson test -C build-sanitize --print-errorlogs --num-processes 2 --no-suite boot || status=1

# Debian's hardening flags (hardening=+all: fortify, so an unused result of fchown is an
# error under the project's -Werror): build only. The module is not user space: left out.
steps_passed=0 steps_failed=0
if (eval "$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh)" &&
    tests/setup.sh build-hardened -Dkmod=disabled); then
        steps_passed=$((steps_passed + 1))
else
        echo "run-all: the build with dpkg-buildflags (hardening=+all) failed"
        steps_failed=$((steps_failed + 1)); status=1
fi

# The Debian packages: built in a copy of the tree, lintian, and where their files land.
rm -rf build-debs
if DEBS_OUT=build-debs tests/packaging/build-deb.sh; then
        steps_passed=$((steps_passed + 1))
else
        echo "run-all: tests/packaging/build-deb.sh failed"
        steps_failed=$((steps_failed + 1)); status=1
fi

# The real boot (tests/boot): systemd as PID 1 in a Debian 12 guest with those packages.
# The image is cached in /var/cache/fcache-vm: built once per machine (minutes).
if [ ! -f build-sanitize/kmod/fcache.ko ]; then
        echo "run-all: tests/boot skipped: no fcache.ko (kernel headers missing)"
elif ! ls build-debs/fcache_*.deb >/dev/null 2>&1; then
        echo "run-all: tests/boot not run: no packages"
        steps_failed=$((steps_failed + 1)); status=1
else
        tests/boot/run.sh --ko build-sanitize/kmod/fcache.ko --debs build-debs; rc=$?
        if [ $rc = 0 ]; then steps_passed=$((steps_passed + 1))
        elif [ $rc = 77 ]; then echo "run-all: tests/boot skipped"
        else echo "run-all: tests/boot/run.sh failed"; steps_failed=$((steps_failed + 1)); status=1
        fi
fi

# The unit suites once more under valgrind, on a build without sanitizers.
tests/setup.sh build-valgrind || { echo "0 passed, 1 failed"; exit 1; }
meson test -C build-valgrind --setup valgrind --suite unit --print-errorlogs || status=1

# The fuzzers need clang's libFuzzer.
CC=clang tests/setup.sh build-fuzz -Dfuzz=true || { echo "0 passed, 1 failed"; exit 1; }
meson test -C build-fuzz --suite fuzz --print-errorlogs || status=1

STEPS_PASSED=$steps_passed STEPS_FAILED=$steps_failed /usr/bin/python3 - build-sanitize/meson-logs/testlog.json build-valgrind/meson-logs/testlog-valgrind.json \
        build-fuzz/meson-logs/testlog.json <<'PY'
import json, os, sys
# The build steps that are not meson tests (the hardened build, the packages) count too.
passed, failed, skipped = int(os.environ["STEPS_PASSED"]), int(os.environ["STEPS_FAILED"]), 0
for log in sys.argv[1:]:
    for line in open(log):
        test = json.loads(line)
        result = test["result"]
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
            # Repeated here, next to the count, where a reader of only the end looks.
            print(f"run-all: {test['name']}: {result}")
            lines = (test.get("stdout") or "").splitlines()
            for i, out in enumerate(lines):
                if out.startswith(("not ok", "Bail out")):
                    why = [x for x in lines[i + 1:i + 6] if x.startswith("#")]
                    for x in [out] + why:
                        print(f"run-all:   {x[:300]}")
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
PY
exit $status
