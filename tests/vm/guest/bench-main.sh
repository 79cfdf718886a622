#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# bench-main.sh: the guest side of the benchmark run (meson suite "bench"):
# the common preamble, then bench.sh.
. "$(dirname "$0")/preamble.sh"
if [ "${BENCH_FILES:-0}" -gt 0 ]; then
	. "$GUEST_DIR/bench.sh"
else
	todo "benchmark: BENCH_FILES is 0"
fi
finish
