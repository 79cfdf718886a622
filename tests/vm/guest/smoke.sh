#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# smoke.sh: the guest side of tests/vm/tmpdir.sh: the module and the client
# run from a directory under the host's /tmp, which the guest's own /tmp
# tmpfs would hide unless run.sh names it (GUEST_KEEP).
. "$(dirname "$0")/preamble.sh"
diag "kept from the host's /tmp: $GUEST_KEEP"
check "insmod $FCACHE_KO (under the host's /tmp)" insmod "$FCACHE_KO"
check "family fcache resolves" fc family
check "the guest's /tmp is its own tmpfs" \
	eq "$(awk '$2 == "/tmp" { print $3 }' /proc/self/mounts)" tmpfs
check "rmmod fcache" rmmod fcache
finish
