#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Round trips the view spares, and what it keeps (daemon/view/view.md,
Serving): a file created online outside the mirror's complete (pinned)
directories is closed without a FUSE_FLUSH (`flush_requests` in `query
state` does not move), its bytes on the backing before write(2) returns; a
writer of an existing file, and a file created in a pinned directory, keep
their FLUSH, and the mirror holds such a file right after close (the volume
taken offline at once reads it), also in a directory pinned after files
were created in it (which the view had found missing from the mirror),
and a file created there before the pin and written after it, or moved
into a pinned directory (rename, link) while open and written after; an open of an unchanged cached file writes
nothing to the store's index (store.db's data_version does not move), and a
change on the backing is still seen by the next open.
"""
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, finish, rand_bytes, read_file,  # noqa: E402
                     require_root_fuse, wait_for, write_file)


def flushes(vol):
    return int(vol.state()["flush_requests"])


def main():
    require_root_fuse()
    vol = Volume("rt", lease="600s").start()

    # --- new files outside pinned directories: no FLUSH, written through
    os.mkdir(vol.v("u"))
    f0 = flushes(vol)
    for i in range(20):
        data = rand_bytes(100 + i * 37, i)
        fd = os.open(vol.v("u", f"n{i}"), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        eq(os.write(fd, data), len(data), f"write to new file n{i}")
        eq(read_file(vol.b("u", f"n{i}")), data, f"n{i}: on the backing before close")
        os.close(fd)
        eq(read_file(vol.v("u", f"n{i}")), data, f"n{i}: read back through the view")
    eq(flushes(vol) - f0, 0, "closes of files created outside pinned directories: no FLUSH")
    with open(vol.v("u", "n0"), "r+b") as fh:
        fh.write(b"X")
    check(flushes(vol) > f0, "the close of a writer of an existing file still flushes")
    eq(read_file(vol.b("u", "n0"))[:1], b"X", "that write on the backing")

    # --- "w" has new files (none read, so the mirror has no such
    #     directory); pinned now, a file open since before the pin and one
    #     created after it reach the mirror at close
    os.mkdir(vol.v("w"))
    for i in range(3):
        write_file(vol.v("w", f"n{i}"), b"unread\n")
    fd = os.open(vol.v("w", "open-across"), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    os.write(fd, b"before the pin\n")
    vol.ctl("pin recursive", "w")
    across = b"before the pin\n" + b"after the pin\n" * 50
    os.write(fd, across[len(b"before the pin\n"):])
    os.close(fd)
    f2 = flushes(vol)
    after = b"created in w once pinned\n" * 40
    write_file(vol.v("w", "after-pin"), after)
    check(flushes(vol) > f2, "a file created in a directory pinned since is flushed at close")

    def mirror_has(name, data):
        m = os.path.join(vol.cache, "mirror", "w", name)
        return os.path.exists(m) and read_file(m) == data
    # The release (which close does not wait for) brings the first one.
    check(wait_for(lambda: mirror_has("open-across", across), 5),
          "the mirror has the file written across the pin after its release")
    eq(vol.ctl("disconnect")["state"], "offline", "disconnected")
    eq(read_file(vol.v("w", "after-pin")), after, "offline, the file created after the pin")
    eq(read_file(vol.v("w", "open-across")), across, "offline, the file written across the pin")
    eq(vol.ctl("reconnect")["state"], "online", "reconnected")

    # --- a file created in a pinned directory: FLUSH kept, the mirror
    #     current at close (offline at once, it reads back)
    os.mkdir(vol.b("p"))
    write_file(vol.b("p", "old"), b"old\n")
    vol.ctl("pin recursive", "p")
    f1 = flushes(vol)
    made = b"made online in a pinned directory\n" * 100
    write_file(vol.v("p", "new"), made)
    check(flushes(vol) > f1, "a file created in a pinned directory is flushed at close")
    eq(vol.ctl("disconnect")["state"], "offline", "disconnected right after the close")
    eq(read_file(vol.v("p", "new")), made, "offline, the file created just before reads back")
    eq(vol.ctl("reconnect")["state"], "online", "reconnected")

    # --- files created in "w2" (no such directory in the mirror), moved
    #     into pinned "p" by rename and by link while open, written after:
    #     their release brings the mirror up to date
    os.mkdir(vol.v("w2"))
    moved = {}
    for how in ("rename", "link"):
        fd = os.open(vol.v("w2", how), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        os.write(fd, b"before the move\n")
        if how == "rename":
            os.rename(vol.v("w2", how), vol.v("p", how))
        else:
            os.link(vol.v("w2", how), vol.v("p", how))
            os.unlink(vol.v("w2", how))
        moved[how] = b"before the move\n" + b"after the move\n" * 30
        os.write(fd, moved[how][len(b"before the move\n"):])
        os.close(fd)
    for how, data in moved.items():
        m = os.path.join(vol.cache, "mirror", "p", how)
        check(wait_for(lambda: os.path.exists(m) and read_file(m) == data, 5),
              f"the mirror has the file moved into a pinned directory by {how} after its release")

    # --- an open of an unchanged cached file writes nothing to the index
    data = rand_bytes(8000, 99)
    write_file(vol.b("c"), data)
    eq(read_file(vol.v("c")), data, "first read (fills the store)")
    eq(vol.ctl("query cached", "c")["cached"], "complete", "the store holds it whole")
    time.sleep(1.5)       # past the once-a-second write-back this replaced
    db = sqlite3.connect(f"file:{vol.cache}/store.db?mode=ro", uri=True)
    before = db.execute("PRAGMA data_version").fetchone()[0]
    for _ in range(3):
        eq(read_file(vol.v("c")), data, "read of the cached file")
        time.sleep(0.6)
    eq(db.execute("PRAGMA data_version").fetchone()[0], before,
       "opens of an unchanged cached file: store.db not written")
    db.close()
    changed = rand_bytes(8000, 100)
    write_file(vol.b("c"), changed)
    eq(read_file(vol.v("c")), changed, "a change on the backing is seen by the next open")
    vol.stop()
    finish()


if __name__ == "__main__":
    main()
