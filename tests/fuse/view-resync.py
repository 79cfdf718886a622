#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The mirror's resync after a reconnect, randomized: a pinned tree with a
directory larger than the walk's look-up chunk (its names are looked up by
the fetch pool a chunk at a time) and nested directories; offline, files
created, edited (same size and not) and deleted through the view; on the
server meanwhile, other files changed, deleted and added, a directory added.
After the reconnect the mirror must be exactly the server's tree, the files
made or edited offline kept (adopted, not copied again), and the view served
offline again shows the server's tree.  FCACHE_TEST_SEED repeats a run.
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, finish, require_root_fuse, tree,  # noqa: E402
                     write_file)

BIG = 700           # more than two look-up chunks


def diff(a, b):
    keys = sorted(set(a) | set(b))
    return [k for k in keys if a.get(k) != b.get(k)][:10]


def main():
    require_root_fuse()
    seed = int(os.environ.get("FCACHE_TEST_SEED", random.randrange(1 << 30)))
    print(f"# seed {seed}")
    rnd = random.Random(seed)
    vol = Volume("resync", lease="1s", extra=["--set", "FetchThreads=4"])
    b = vol.b
    names = [f"f{i:04d}" for i in range(BIG)]
    os.makedirs(b("proj", "big"))
    for n in names:
        write_file(b("proj", "big", n), rnd.randbytes(rnd.randrange(0, 3000)))
    for d in ("d0", "d0/d1", "d0/d1/d2", "d3"):
        os.makedirs(b("proj", d))
        for i in range(rnd.randrange(1, 20)):
            write_file(b("proj", d, f"g{i}"), rnd.randbytes(rnd.randrange(0, 5000)))
    os.symlink("big/f0000", b("proj", "ln"))
    vol.start()
    v = vol.v
    eq(vol.ctl("pin recursive", "proj", timeout=300).get("mirrored"), "yes",
       "pin recursive: the tree is mirrored")

    eq(vol.ctl("disconnect")["state"], "offline", "disconnect")
    pool = list(names)
    rnd.shuffle(pool)
    edited, removed, server_changed, server_removed = (pool[0:60], pool[60:90], pool[90:150],
                                                       pool[150:190])
    created = [f"new{i:04d}" for i in range(rnd.randrange(200, 400))]
    for n in created:
        write_file(v("proj", "big", n), rnd.randbytes(rnd.randrange(0, 2000)))
    for n in edited:
        size = os.path.getsize(v("proj", "big", n))
        if rnd.random() < 0.5:
            write_file(v("proj", "big", n), rnd.randbytes(size))   # same size, new bytes
        else:
            write_file(v("proj", "big", n), rnd.randbytes(rnd.randrange(0, 4000)))
    for n in removed:
        os.unlink(v("proj", "big", n))
    os.makedirs(v("proj", "d0", "made-offline"))
    write_file(v("proj", "d0", "made-offline", "x"), b"offline\n")
    # The server meanwhile, on other files.
    for n in server_changed:
        write_file(b("proj", "big", n), rnd.randbytes(rnd.randrange(0, 4000)))
    for n in server_removed:
        os.unlink(b("proj", "big", n))
    for i in range(rnd.randrange(1, 50)):
        write_file(b("proj", "big", f"srv{i:03d}"), rnd.randbytes(rnd.randrange(0, 2000)))
    os.makedirs(b("proj", "d3", "from-server"))
    write_file(b("proj", "d3", "from-server", "y"), b"server\n")

    mirror = os.path.join(vol.cache, "mirror", "proj")
    kept = {n: os.stat(os.path.join(mirror, "big", n)).st_ino for n in created + edited}
    q = vol.ctl("reconnect", timeout=300)
    eq(q["state"], "online", "reconnect answers state=online")
    eq(q.get("conflicts"), "0", "reconnect: no conflicts (each side changed other files)")
    server = tree(b("proj"))
    got = tree(mirror)
    eq(diff(got, server), [], "after the reconnect the mirror is exactly the server's tree")
    eq({n: os.stat(os.path.join(mirror, "big", n)).st_ino for n in kept}, kept,
       "files made or edited offline keep their mirror copy (adopted, not copied again)")
    check(all("trusted.fcache.base" in os.listxattr(os.path.join(mirror, "big", n))
              for n in created),
          "every file made offline has the server's identity in the mirror")
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect again")
    eq(diff(tree(v("proj")), server), [], "offline again, the view shows the server's tree")
    finish()


if __name__ == "__main__":
    main()
