#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Layers call only downward: checks, from the built objects' symbols (nm),
that no file of fcache-view calls a function of a file in a layer above
it, and that the offline library's files call each other in no circle.

Usage: layers.py OBJDIR...  (the .p directories of fcache-view and of the
static libraries it links: every *.o in them is read).

The layers, bottom first.  A file may call files of its own layer and of
the layers below; the top (TOP) may call anything.  Every file is placed:
a new one fails the test until it is put in a layer.  What a file needs
from a layer above (the server found gone, a takeover's restores) it gets
through a hook its caller sets, not a call.
"""
import collections
import glob
import os
import subprocess
import sys

LAYERS = [
    # log lines, time, the caller's credentials, who reads /dev/fuse, which
    # tree is served, the mirror's on-disk marks, the command grammar, the
    # control replies' pairs, paths, the descriptors the holder keeps
    ["view-log", "store-crc", "view-creds", "view-readers", "view-mode",
     "view-mirror-marks", "view-command", "view-ctl-out", "view-path", "view-fdstore"],
    # the store and its index
    ["store-pins", "store"],
    # backing calls bounded by BackingTimeout
    ["view-deadline"],
    # what builds on bounded calls alone
    ["view-identity", "view-link-rtt", "view-passthrough", "view-listing",
     "view-delete-bound", "view-fetch-pool"],
    # the takeover log; what offline changes leave in the operation log
    ["view-state", "view-offline-log"],
    # the nodes
    ["view-inode"],
    # the mirror and the store's copies kept current
    ["view-mirror", "view-revalidate", "view-reindex"],
    # the requests and the open files
    ["view-ops"],
    # disconnected operation: the switch, the replay, write-back's trickle,
    # the dry run, the conflicts (the switch and the trickle call each other)
    ["view-offline", "view-replay", "view-writeback", "view-dry-run", "view-conflicts"],
    # pins, prefetch and hoarding; the metered link's pause
    ["view-pin", "view-pin-writeback", "view-metered"],
]
# The top: the control socket, the worker's session, the command line.
TOP = ["view-control", "view-session", "view-main"]
# The offline library (daemon/offline), below the view: its files in order.
OFFLINE = ["fault", "regular-file", "netstate", "oplog", "oplog-snapshot",
           "reintegrate-pool", "reintegrate", "resolve"]


def unit_name(obj):
    """daemon/view/view-ops.c's object view_view-ops.c.o -> view-ops."""
    n = os.path.basename(obj)
    for suffix in (".c.o", ".o"):
        if n.endswith(suffix):
            n = n[:-len(suffix)]
            break
    for prefix in ("view_", "offline_"):
        if n.startswith(prefix):
            n = n[len(prefix):]
    return n


def symbols(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "TDBRV":
            defined.add(f[2])
        elif len(f) == 2 and f[0] == "U":
            used.add(f[1])
    return defined, used


def main():
    objs = [o for d in sys.argv[1:] for o in glob.glob(os.path.join(d, "*.o"))]
    if not objs:
        sys.exit(f"layers.py: no objects in {sys.argv[1:]}")
    owner, uses = {}, {}
    for o in objs:
        name = unit_name(o)
        defined, used = symbols(o)
        for s in defined:
            owner[s] = name
        uses[name] = used
    calls = collections.defaultdict(lambda: collections.defaultdict(set))
    for name, used in uses.items():
        for s in used:
            if s in owner and owner[s] != name:
                calls[name][owner[s]].add(s)

    level = {}
    for i, layer in enumerate(LAYERS):
        for name in layer:
            level[name] = i
    for name in [n for layer in LAYERS for n in layer] + OFFLINE + TOP:
        if name not in uses:
            sys.exit(f"layers.py: {name} is in LAYERS but no object of it was built")
    placed = {n for layer in LAYERS for n in layer} | set(OFFLINE) | set(TOP)
    unplaced = sorted(set(uses) - placed)
    if unplaced:
        sys.exit(f"layers.py: {', '.join(unplaced)}: in no layer; put each in LAYERS")
    top = len(LAYERS)
    offline = {n: i for i, n in enumerate(OFFLINE)}
    failures = 0
    checked = 0
    for name in sorted(uses):
        if name in offline:
            mine, ranks = offline[name], offline
        elif name in level:
            mine, ranks = level[name], level
        else:
            continue
        checked += 1
        for callee, syms in sorted(calls[name].items()):
            if callee in offline and ranks is level:
                continue        # the view calls the offline library below it
            rank = ranks.get(callee, top)
            if rank > mine:
                failures += 1
                print(f"not ok: {name}.c calls {', '.join(sorted(syms))} of {callee}.c, "
                      f"a layer above it")
    print(f"{checked} files below the top checked, {failures} upward calls")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
