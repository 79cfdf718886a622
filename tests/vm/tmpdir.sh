#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# tmpdir.sh --ko FCACHE.KO --fcnl FCNL [run.sh options]: the VM harness with
# the module and client in a build directory under /tmp (as a user building
# there has them): copies them to a fresh /tmp directory and runs run.sh with
# guest/smoke.sh on them.
set -u
here=$(cd "$(dirname "$0")" && pwd)
ko= fcnl=
while [ $# -gt 0 ]; do
	case $1 in
	--ko) ko=$2; shift ;;
	--fcnl) fcnl=$2; shift ;;
	*) break ;;
	esac
	shift
done
dir=$(mktemp -d /tmp/fcache-vm-build.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
cp "$ko" "$fcnl" "$dir/" || exit 1
"$here/run.sh" --ko "$dir/$(basename "$ko")" --fcnl "$dir/$(basename "$fcnl")" \
	--guest "$here/guest/smoke.sh" --timeout 300 "$@"
