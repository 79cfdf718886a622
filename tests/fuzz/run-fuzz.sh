#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# run-fuzz.sh FUZZER SECONDS [CORPUS [DICT]]: a bounded libFuzzer run from a seed corpus
# (default: the command parser's corpus and dictionary); any crash, leak or UB report
# fails it.
set -eu
fuzzer=$1 seconds=$2 src=$(dirname "$0")
corpus=${3:-$src/corpus}
dict=${4-$src/command.dict}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$corpus"/* "$work"/
exec "$fuzzer" -max_total_time="$seconds" ${dict:+-dict="$dict"} -max_len=4096 \
        -print_final_stats=1 "$work"
