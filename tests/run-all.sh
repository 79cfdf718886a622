#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# run-all.sh: set up (packages, build with AddressSanitizer + UBSan) and run every test
# suite, the fuzzers included; ends with "N passed, N failed[, N skipped]".
# Run as root on Debian 12: the integration tests mount filesystems.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

status=0
tests/setup.sh build-sanitize -Db_sanitize=address,undefined || { echo "0 passed, 1 failed"; exit 1; }
meson test -C build-sanitize --print-errorlogs --num-processes 2 || status=1

# The unit suites once more under valgrind, on a build without sanitizers.
tests/setup.sh build-valgrind || { echo "0 passed, 1 failed"; exit 1; }
meson test -C build-valgrind --setup valgrind --suite unit --print-errorlogs || status=1

# The fuzzers need clang's libFuzzer.
CC=clang tests/setup.sh build-fuzz -Dfuzz=true || { echo "0 passed, 1 failed"; exit 1; }
meson test -C build-fuzz --suite fuzz --print-errorlogs || status=1

/usr/bin/python3 - build-sanitize/meson-logs/testlog.json build-valgrind/meson-logs/testlog-valgrind.json \
        build-fuzz/meson-logs/testlog.json <<'PY'
import json, sys
passed = failed = skipped = 0
for log in sys.argv[1:]:
    for line in open(log):
        result = json.loads(line)["result"]
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
PY
exit $status
