#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# run-fuzz.sh FUZZER SECONDS CORPUS: a bounded libFuzzer run of a merge/ target
# from its seed corpus (copied, so the source tree is not written); any crash,
# assertion, leak or UB report fails it.
set -eu
fuzzer=$1 seconds=$2 corpus=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$corpus"/* "$work"/
exec "$fuzzer" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 "$work"
