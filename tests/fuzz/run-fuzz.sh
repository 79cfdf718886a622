#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# run-fuzz.sh FUZZER SECONDS: a bounded libFuzzer run from the seed corpus; any crash,
# leak or UB report fails it.
set -eu
fuzzer=$1 seconds=$2 src=$(dirname "$0")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src"/corpus/* "$work"/
exec "$fuzzer" -max_total_time="$seconds" -dict="$src/command.dict" -max_len=512 \
        -print_final_stats=1 "$work"
