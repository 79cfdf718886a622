#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Unpinned files as containers: one local copy of every cached object.

Files read completely online while unpinned move from the store's blocks
into the mirror at their path (no second copy on disk); offline they read
back byte-identical, while a file read only in part and names never read
stay EHOSTDOWN, and a directory holding only cached files is not listed.
An offline edit of such a file reaches the server at the reconnect; a file
the server changed meanwhile is not served stale after it.  Culling removes
the containers and the disk use goes down.  Then a seeded random round
(FCACHE_CACHED_SEED to rerun) of reads, partial reads, server changes and
disconnects, every read checked against the server's bytes.  An empty file
read online is whole at once (no block): offline it reads back empty, and
one the server filled meanwhile is not served stale after the reconnect.
"""
import errno
import os
import random
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, err_of, finish, rand_bytes, read_direct,  # noqa: E402
                     read_file, require_root_fuse, wait_for, write_file)

KiB = 1024


def disk_use(top):
    """Bytes of disk the regular files under top take, each inode once."""
    seen, total = set(), 0
    for dirpath, _, filenames in os.walk(top):
        for n in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, n))
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) in seen or not (st.st_mode & 0o170000 == 0o100000):
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def read_partly(path, n=4096):
    with open(path, "rb") as f:
        return f.read(n)


def main():
    require_root_fuse()
    vol = Volume("cached", lease="1s")
    b, v = vol.b, vol.v
    os.makedirs(b("d", "sub"))
    full = {}
    sizes = [1, 4000, 128 * KiB, 128 * KiB + 1, 300 * KiB, 1024 * KiB]
    for i, n in enumerate(sizes):
        full[f"d/f{i}"] = rand_bytes(n, i)
    full["d/sub/deep"] = rand_bytes(200 * KiB, 99)
    for name, data in full.items():
        write_file(b(name), data)
    write_file(b("d", "big"), rand_bytes(1024 * KiB, 7))
    write_file(b("d", "never"), b"never read\n")
    vol.start()
    mirror = os.path.join(vol.cache, "mirror")

    # ---- online: full reads move the files into containers
    for name, data in full.items():
        eq(read_file(v(name)), data, f"online read of {name}")
    read_partly(v("d", "big"))
    check(wait_for(lambda: all(os.path.exists(os.path.join(mirror, n)) for n in full)),
          "every file read completely gets a container in the mirror at its path")
    check(not os.path.exists(os.path.join(mirror, "d", "big")),
          "a file read in part has no container")
    for name, data in full.items():
        q = vol.ctl("query cached", name)
        eq(q["cached"], "complete", f"query cached: {name} complete (from its container)")
        eq(read_direct(v(name)), data, f"online read of {name} from its container")
    eq(vol.ctl("query cached", "d/big")["cached"], "partial", "the partly read file is partial")
    objects = disk_use(os.path.join(vol.cache, "objects"))
    in_mirror = disk_use(mirror)
    total = sum(len(d) for d in full.values())
    print(f"# disk: {len(full)} files of {total} bytes read whole: mirror {in_mirror} bytes,"
          f" store blocks {objects} bytes (the partly read file's first block)")
    check(objects <= 128 * KiB + 4096,
          f"the store's blocks hold only the partly read file ({objects} bytes)")
    check(total <= in_mirror < total + len(full) * 8 * KiB,
          f"one copy of the files read whole, in the mirror ({in_mirror} for {total})")

    # ---- offline
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect")
    for name, data in full.items():
        eq(read_direct(v(name)), data, f"offline, {name} reads back byte-identical")
    eq(err_of(lambda: read_file(v("d", "big"))), errno.EHOSTDOWN,
       "offline, the partly read file is EHOSTDOWN")
    eq(err_of(lambda: read_file(v("d", "never"))), errno.EHOSTDOWN,
       "offline, a name never read is EHOSTDOWN")
    eq(err_of(lambda: os.listdir(v("d"))), errno.EHOSTDOWN,
       "offline, a directory holding only cached files is not listed (EHOSTDOWN)")
    edited = b"edited offline\n" + full["d/f1"]
    write_file(v("d", "f1"), edited)
    eq(read_direct(v("d", "f1")), edited, "offline edit of a cached file reads back")
    server_new = rand_bytes(300 * KiB, 1234)
    write_file(b("d", "f4"), server_new)       # the server changes a cached file meanwhile
    eq(read_direct(v("d", "f4")), full["d/f4"], "offline, the cached copy is served")
    q = vol.ctl("reconnect")
    eq((q["state"], q.get("conflicts")), ("online", "0"), "reconnect: online, no conflict")
    eq(read_file(b("d", "f1")), edited, "the offline edit of a cached file reached the server")
    time.sleep(1.2)                             # the attribute lease
    eq(read_direct(v("d", "f4")), server_new,
       "after the reconnect a file the server changed is not served stale")
    eq(read_file(v("d", "f1")), edited, "and the edited one reads as the server has it")
    for name in ("d/f0", "d/f2", "d/f3", "d/f5", "d/sub/deep"):
        eq(read_direct(v(name)), full[name], f"after the reconnect {name} still reads right")

    # ---- culling removes unpinned containers
    before = disk_use(vol.cache)
    q = vol.ctl("set cache-size 1M")
    after = disk_use(vol.cache)
    print(f"# disk: CacheDir {before} bytes before culling to 1M, {after} after")
    check(after < before - 512 * KiB, f"culling lowers the disk use ({before} -> {after})")
    gone = [n for n in full if not os.path.exists(os.path.join(mirror, n))]
    check(len(gone) >= 2, f"culling removed containers ({gone})")
    for n in gone:
        eq(vol.ctl("query cached", n)["cached"], "no", f"culled {n}: not cached")
    vol.ctl("set cache-size 1G")
    for name in ("d/f0", "d/f2", "d/f3", "d/f5", "d/sub/deep"):
        eq(read_direct(v(name)), full[name], f"after culling {name} reads right")

    # ---- a write through the view: back into blocks, patched, then moved in again
    name = "d/sub/deep"
    cont = os.path.join(mirror, name)
    check(wait_for(lambda: os.path.exists(cont)), f"{name} is in its container")
    with open(v(name), "r+b") as f:
        f.seek(5000)
        f.write(b"WRITTEN THROUGH")
    new = bytearray(full[name])
    new[5000:5015] = b"WRITTEN THROUGH"
    check(not os.path.exists(cont), "a write through the view takes the file out of the mirror")
    eq(read_file(b(name)), bytes(new), "the write reached the server")
    q = vol.ctl("query cached", name)
    eq((q["cached"], q["valid"]), ("complete", "yes"), "the store's copy was patched, complete")
    eq(read_file(v(name)), bytes(new), "and reads right")
    check(wait_for(lambda: os.path.exists(cont) and read_file(cont) == bytes(new)),
          "read whole again, it is back in its container with the new bytes")

    # ---- across a restart: the containers are the store's still, served offline
    vol.stop()
    vol.start()
    eq(vol.ctl("query cached", name)["cached"], "complete", "after a restart: still complete")
    vol.ctl("disconnect")
    eq(read_direct(v(name)), bytes(new), "after a restart, offline the container is served")
    vol.ctl("reconnect")

    # ---- a file pinned by itself (its directory not complete) is never removed
    os.makedirs(b("solo"))
    write_file(b("solo", "p"), rand_bytes(200 * KiB, 55))
    eq(vol.ctl("pin", "solo/p")["mirrored"], "yes", "a file pinned by itself is mirrored")
    with open(v("solo", "p"), "r+b") as f:
        f.write(b"online")
    check(os.path.exists(os.path.join(mirror, "solo", "p")),
          "written through the view, its mirror copy stays (the hoard walk's to renew)")

    empty_files(vol)
    randomized(vol)
    vol.stop()
    written_through()
    killed_after_placing()
    finish()


def written_through():
    """Over a network backing (another fcache-view: a write the server
    acknowledged is made to the mirror's copy too), a file of a pinned
    directory the mirror lacks, read whole, becomes the store's container;
    written through a descriptor that read it, the mirror keeps its copy
    (with the write) and the store lets the file go: one link (before: the
    store took it back as its content file while the mirror kept its name,
    one inode for both, which a later whole read left with a temporary as
    a second link, nlink 2 offline: model seed 5031, stacked, held links)."""
    inner = Volume("cached-inner", lease="0s")
    inner.start()
    vol = Volume("cached-net", backing=inner.mnt, lease="1s",
                 extra=["--set", "BackingTimeout=30s"])
    os.makedirs(vol.b("m"))
    vol.start()
    vol.ctl("pin recursive", "m")
    data = rand_bytes(9000, 5)
    write_file(vol.b("m", "f"), data)       # the server's alone: not in the mirror yet
    eq(read_direct(vol.v("m", "f")), data, "network backing: a server file read whole")
    ino = os.stat(vol.v("m", "f")).st_ino
    db = sqlite3.connect(f"file:{vol.cache}/store.db?mode=ro", uri=True)
    own = lambda: db.execute("SELECT own FROM objects WHERE ino=?", (ino,)).fetchone()  # noqa: E731
    check(wait_for(lambda: own() == (1,), 10), "network backing: it is the store's container")
    fd = os.open(vol.v("m", "f"), os.O_RDWR)
    eq(os.pread(fd, len(data) + 1, 0), data, "network backing: read through a descriptor")
    os.pwrite(fd, b"z" * 50, 200)
    data = data[:200] + b"z" * 50 + data[250:]
    mst = os.lstat(os.path.join(vol.cache, "mirror", "m", "f"))
    shared = [os.path.join(d, n) for d, _, ns in os.walk(os.path.join(vol.cache, "objects"))
              for n in ns if os.lstat(os.path.join(d, n)).st_ino == mst.st_ino]
    eq((mst.st_nlink, shared), (1, []),
       "written: the mirror's copy is not the store's content file too (nlink, store names)")
    eq(read_file(os.path.join(vol.cache, "mirror", "m", "f")), data,
       "written: the mirror's copy has the write")
    eq(read_direct(vol.v("m", "f")), data, "written: read whole again, right")
    os.close(fd)
    vol.ctl("disconnect")
    st = os.lstat(vol.v("m", "f"))
    eq(st.st_nlink, 1, "offline: one link")
    eq(read_direct(vol.v("m", "f")), data, "offline: the write")
    vol.ctl("reconnect")
    db.close()
    vol.stop()
    inner.stop()


def killed_after_placing():
    """A worker killed once a file read whole is in the mirror (the store's
    content file linked there) and before the store's rows say so
    (FCACHE_FAULT_PAUSE=view-cache-placed, then kill -9): the successor,
    the file read whole again, finds that very file there and leaves it
    with one link (before: it linked it to a temporary and renamed that
    onto the name, which does nothing for two links of one file: the
    temporary stayed, nlink 2 offline)."""
    vol = Volume("cached-kill", lease="1s")
    gate = os.path.join(vol.top, "placed-gate")
    os.makedirs(vol.b("d"))
    data = rand_bytes(50 * KiB, 17)
    write_file(vol.b("d", "f"), data)
    os.environ["FCACHE_FAULT_PAUSE"] = f"view-cache-placed:{gate}"
    try:
        vol.start()
    finally:
        del os.environ["FCACHE_FAULT_PAUSE"]
    open(gate, "w").close()
    eq(read_file(vol.v("d", "f")), data, "killed after placing: read whole")
    check(wait_for(lambda: os.path.exists(gate + ".reached"), 30),
          "... its move into the mirror is held once the file is there")
    old = vol.kill_worker()
    os.unlink(gate)
    vol.wait_new_worker(old, timeout=60)
    cont = os.path.join(vol.cache, "mirror", "d", "f")
    eq(read_direct(vol.v("d", "f")), data, "the successor: read whole again")
    check(wait_for(lambda: vol.ctl("query cached", "d/f")["cached_bytes"] == str(len(data)) and
                   os.lstat(cont).st_nlink == 1, 10),
          "... its container has one link")
    eq(sorted(n for n in os.listdir(os.path.dirname(cont)) if n != "f"), [],
       "... and no temporary beside it")
    vol.ctl("disconnect")
    eq(os.lstat(vol.v("d", "f")).st_nlink, 1, "offline: one link")
    eq(read_direct(vol.v("d", "f")), data, "offline: its bytes")
    vol.ctl("reconnect")
    vol.stop()


def empty_files(vol):
    """An empty file has no block: read online, it is whole at once and gets
    its container, so offline it reads back empty (not EHOSTDOWN); one the
    server filled meanwhile is not served stale after the reconnect."""
    b, v = vol.b, vol.v
    mirror = os.path.join(vol.cache, "mirror")
    os.makedirs(b("e"))
    for n in ("empty", "filled", "looked"):
        write_file(b("e", n), b"")
    eq(read_file(v("e", "empty")), b"", "online, an empty file reads empty")
    eq(read_file(v("e", "filled")), b"", "online, another empty file reads empty")
    os.stat(v("e", "looked"))
    check(wait_for(lambda: all(os.path.exists(os.path.join(mirror, "e", n))
                               for n in ("empty", "filled"))),
          "an empty file read online gets its container at once")
    eq(vol.ctl("query cached", "e/empty")["cached"], "complete",
       "query cached: an empty file read online is complete")
    time.sleep(0.5)                             # the containers are moved off the request path
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect (empty files)")
    eq(read_direct(v("e", "empty")), b"", "offline, an empty file read online reads back empty")
    eq(err_of(lambda: read_file(v("e", "looked"))), errno.EHOSTDOWN,
       "offline, an empty file only looked up (never opened) is EHOSTDOWN")
    filled = b"the server wrote this while the volume was offline\n"
    write_file(b("e", "filled"), filled)
    eq(read_direct(v("e", "filled")), b"", "offline, the cached (empty) version is served")
    q = vol.ctl("reconnect")
    eq((q["state"], q.get("conflicts")), ("online", "0"), "reconnect (empty files): online")
    time.sleep(1.2)                             # the attribute lease
    eq(read_direct(v("e", "filled")), filled,
       "after the reconnect an empty file the server filled is not served stale")
    eq(read_file(v("e", "empty")), b"", "and the unchanged empty file still reads empty")
    vol.ctl("disconnect")
    eq(read_direct(v("e", "filled")), filled,
       "offline again, the filled file (read whole since) reads as the server has it")
    vol.ctl("reconnect")


def randomized(vol):
    """Random reads (whole or in part), server changes and disconnects: every
    read online is the server's bytes; offline a file reads as a version the
    server had (the one cached) or is EHOSTDOWN."""
    seed = int(os.environ.get("FCACHE_CACHED_SEED", random.randrange(1 << 30)))
    print(f"# randomized section: FCACHE_CACHED_SEED={seed}")
    rnd = random.Random(seed)
    b, v = vol.b, vol.v
    os.makedirs(b("r"), exist_ok=True)
    server, versions = {}, {}
    for i in range(12):
        name = f"r/x{i}"
        server[name] = rand_bytes(rnd.choice([100, 5000, 140 * KiB, 400 * KiB]), rnd.random())
        versions[name] = [server[name]]
        write_file(b(name), server[name])
    bad = 0
    for step in range(60):
        name = rnd.choice(sorted(server))
        op = rnd.random()
        if op < 0.5:
            got = read_file(v(name))
            if got != server[name]:
                bad += 1
                print(f"# step {step}: online read of {name} differs")
        elif op < 0.65:
            read_partly(v(name), rnd.randrange(1, 8192))
        elif op < 0.8:
            server[name] = rand_bytes(rnd.choice([100, 5000, 140 * KiB]), rnd.random())
            versions[name].append(server[name])
            write_file(b(name), server[name])
            time.sleep(1.1)                     # the lease: then no stale read is allowed
        else:
            time.sleep(0.5)                     # the containers are moved off the request path
            vol.ctl("disconnect")
            for n in sorted(server):
                e = err_of(lambda: read_direct(v(n)))
                if e == 0:
                    got = read_direct(v(n))
                    if got not in versions[n]:
                        bad += 1
                        print(f"# step {step}: offline {n} is no version the server had")
                elif e != errno.EHOSTDOWN:
                    bad += 1
                    print(f"# step {step}: offline {n} failed with {errno.errorcode.get(e)}")
            vol.ctl("reconnect")
    eq(bad, 0, f"randomized: 60 steps, every read right (seed {seed})")


if __name__ == "__main__":
    main()
