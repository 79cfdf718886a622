#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""One FUSE thread of the worker reads /dev/fuse at a time (view-readers.c);
the others wait in reserve.  A request that holds its thread without saying
so (here: opendirs paused at view-opendir while a gate file exists) must not
hold the requests behind it: with Threads=3 and two threads held, stats,
reads, a create and a listing by a path already open are still answered, and
right; with all three held, nothing is lost: the held opendirs and every
request queued behind them are answered once the gate goes.  Then the
volume serves a few hundred opens from several processes at once (the
reader's turn passed around under load) and stops cleanly.
"""
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, finish, read_file,  # noqa: E402
                     require_root_fuse, wait_for, write_file)

BOUND = 60


def held_listing(vol, name, out):
    """Lists directory name (its opendir is held at the gate) in a thread."""
    th = threading.Thread(target=lambda: out.update({name: sorted(os.listdir(vol.v(name)))}),
                          daemon=True)
    th.start()
    return th


def main():
    require_root_fuse()
    top = Volume("readers", extra=("--set", "Threads=3"), lease="600s")
    gate = os.path.join(top.top, "opendir-gate")
    os.environ["FCACHE_FAULT_PAUSE"] = f"view-opendir:{gate}"
    for d in ("d1", "d2", "d3", "work"):
        os.makedirs(top.b(d))
        write_file(top.b(d, "f"), f"in {d}\n".encode())
    vol = top.start()
    eq(read_file(vol.v("work", "f")), b"in work\n", "a file read before any thread is held")

    # Two of the three threads held by opendirs that did not say they wait.
    open(gate, "w").close()
    listed = {}
    held = [held_listing(vol, "d1", listed)]
    check(wait_for(lambda: os.path.exists(gate + ".reached"), BOUND),
          "the first opendir is held at the gate")
    held.append(held_listing(vol, "d2", listed))
    # The second may take a moment to reach the gate; nothing below depends on it.
    t = time.time()
    r = subprocess.run(["sh", "-c", 'stat -c %s "$1/f" && cat "$1/f" && echo new > "$1/g" &&'
                        ' cat "$1/g"', "sh", vol.v("work")], capture_output=True, timeout=BOUND)
    eq((r.returncode, r.stdout), (0, b"8\nin work\nnew\n"),
       f"with two of three threads held: stat, read, create, read back answered"
       f" ({time.time() - t:.1f} s; {r.stderr.decode().strip()})")
    eq(read_file(top.b("work", "g")), b"new\n", "... the create is on the backing")

    # The third held too: what comes now waits, and is answered after.
    held.append(held_listing(vol, "d3", listed))
    late = {}
    lt = threading.Thread(target=lambda: late.update(r=read_file(vol.v("d3", "f"))), daemon=True)
    lt.start()
    os.unlink(gate)
    for th in held + [lt]:
        th.join(BOUND)
        check(not th.is_alive(), "a held request is answered once the gate goes")
    eq(listed, {d: ["f"] for d in ("d1", "d2", "d3")}, "the held listings are right")
    eq(late.get("r"), b"in d3\n", "the read queued behind them is right")

    # Several processes at once: the turn to read passes between threads.
    for i in range(40):
        write_file(vol.v("work", f"m{i}"), f"m{i}\n".encode() * 100)
    procs = [subprocess.Popen(["sh", "-c", 'for n in $(seq 0 39); do cat "$1/m$n"; done',
                               "sh", vol.v("work")], stdout=subprocess.PIPE) for _ in range(6)]
    want = b"".join(f"m{i}\n".encode() * 100 for i in range(40))
    for p in procs:
        out, _ = p.communicate(timeout=BOUND)
        eq((p.returncode, out == want), (0, True), "a reader of 40 files among 6 at once")
    vol.stop()
    finish()


if __name__ == "__main__":
    main()
