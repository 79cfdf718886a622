#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The store of a volume: validity within the lease, partial fill, write-through,
flush, set cacheable off, prefetch, one local copy of a pinned file (its mirror file,
the container, serves online reads), corruption detection, and deep paths
near PATH_MAX.

O_DIRECT reads through the view bypass the kernel's page cache (the view's
O_DIRECT policy), so they show what the store serves.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, finish, rand_bytes, read_direct, read_file,  # noqa: E402
                     require_root_fuse, write_file)

BLOCK = 131072
LEASE = 2.0


def main():
    require_root_fuse()
    vol = Volume("store", lease=f"{int(LEASE)}s").start()

    # --- a cached file is served from the store while valid, revalidated after
    data = rand_bytes(3 * 1024 * 1024 + 1234, 1)
    write_file(vol.b("big"), data)
    eq(read_file(vol.v("big")), data, "first read through the view returns the backing content")
    q = vol.ctl("query cached", "big")
    eq((q["cached"], int(q["cached_bytes"]), q["valid"]), ("complete", len(data), "yes"),
       "query cached: the whole file is in the store and valid")
    changed = bytearray(data)
    changed[0:4096] = rand_bytes(4096, 2)
    dfd = os.open(vol.v("big"), os.O_RDONLY | os.O_DIRECT)   # open before the change
    eq(os.pread(dfd, 4096, 0), data[0:4096], "O_DIRECT read of the cached file")
    with open(vol.b("big"), "r+b") as f:          # changed on the server, same size
        f.write(changed[0:4096])
    eq(os.pread(dfd, 4096, 0), data[0:4096],
       "within the lease the store copy is served to an open file")
    time.sleep(LEASE + 0.5)
    eq(os.pread(dfd, 4096, 0), bytes(changed[0:4096]),
       "after the lease the change made in the backing is seen")
    os.close(dfd)
    eq(read_file(vol.v("big")), bytes(changed), "a fresh open after the lease reads the new content")
    with open(vol.b("big"), "r+b") as f:          # close-to-open: a new open checks at once
        f.write(data[0:4096])
    eq(read_direct(vol.v("big"), 0, 4096), data[0:4096], "an open compares the copy with the backing")
    changed[0:4096] = data[0:4096]
    eq(read_file(vol.v("big")), bytes(changed), "and serves the whole file again")
    q = vol.ctl("query cached", "big")
    eq(q["cached"], "complete", "the store refilled after revalidation")

    # --- an application that keeps the file open sees the backing's change after
    #     the lease too (the kernel re-reads attributes and drops stale pages)
    write_file(vol.b("held"), b"A" * 8192)
    with open(vol.v("held"), "rb") as held:
        eq(held.read(), b"A" * 8192, "held file read once (now in the page cache)")
        with open(vol.b("held"), "r+b") as f:
            f.write(b"B" * 8192)
        held.seek(0)
        check(held.read() in (b"A" * 8192, b"B" * 8192), "within the lease: old or new, never a mix")
        time.sleep(LEASE + 0.5)
        held.seek(0)
        eq(held.read(), b"B" * 8192, "after the lease the same open file shows the backing's change")

    # --- a change of size made in the backing is seen after the lease (stat)
    write_file(vol.b("small"), b"one")
    eq(read_file(vol.v("small")), b"one", "small file read")
    write_file(vol.b("small"), b"three")
    time.sleep(LEASE + 0.5)
    eq((os.stat(vol.v("small")).st_size, read_file(vol.v("small"))), (5, b"three"),
       "size and content changed in the backing are seen after the lease")
    write_file(vol.b("newfile"), b"n")
    time.sleep(LEASE + 0.5)
    check(os.path.exists(vol.v("newfile")), "a file created in the backing appears after the lease")

    # --- partial fill by block ranges
    part = rand_bytes(8 * 1024 * 1024, 3)
    write_file(vol.b("part"), part)
    eq(read_direct(vol.v("part"), 5 * 1024 * 1024 + 100, 4096),
       part[5 * 1024 * 1024 + 100:5 * 1024 * 1024 + 4196], "4 KiB read in the middle")
    q = vol.ctl("query cached", "part")
    eq((q["cached"], int(q["cached_bytes"]), q["blocks"]), ("partial", BLOCK, "1"),
       "only the block read is in the store (partial)")
    eq(read_direct(vol.v("part"), BLOCK * 10, BLOCK * 3), part[BLOCK * 10:BLOCK * 13],
       "a second range")
    eq(vol.ctl("query cached", "part")["blocks"], "4", "the store holds the two ranges read")
    eq(read_file(vol.v("part")), part, "the whole file, mixing store and backing blocks")
    eq(vol.ctl("query cached", "part")["cached"], "complete", "then the store copy is complete")

    # --- writes go through to the backing and keep the store copy valid
    with open(vol.v("part"), "r+b") as f:
        f.seek(BLOCK + 10)
        f.write(b"WRITTEN-THROUGH")
    p2 = bytearray(part)
    p2[BLOCK + 10:BLOCK + 25] = b"WRITTEN-THROUGH"
    eq(read_file(vol.b("part")), bytes(p2), "the write reached the backing")
    q = vol.ctl("query cached", "part")
    eq((q["cached"], q["valid"]), ("complete", "yes"), "the store copy was patched, still complete")
    eq(read_direct(vol.v("part"), BLOCK, BLOCK), bytes(p2[BLOCK:2 * BLOCK]),
       "the store serves the written bytes")
    os.truncate(vol.v("part"), 3 * BLOCK + 5)
    eq(read_file(vol.v("part")), bytes(p2[:3 * BLOCK + 5]), "truncate through the view")
    eq(read_direct(vol.v("part")), bytes(p2[:3 * BLOCK + 5]), "store after truncate")

    # --- flush drops store copies (the kernel's too); the data is fetched again
    r = vol.ctl("flush", "part")
    eq(r["flushed"], "1", "flush drops the file's store copy")
    eq(vol.ctl("query cached", "part")["cached"], "no", "query cached after flush")
    eq(read_file(vol.v("part")), bytes(p2[:3 * BLOCK + 5]), "content after flush, fetched again")

    # --- set cacheable off: read through without storing
    os.mkdir(vol.v("nocache"))
    write_file(vol.b("nocache", "f"), b"x" * 300000)
    eq(vol.ctl("set cacheable off", "nocache")["cacheable"], "off", "set cacheable off")
    eq(read_file(vol.v("nocache", "f")), b"x" * 300000, "read under a cacheable-off directory")
    q = vol.ctl("query cached", "nocache/f")
    eq((q["cached"], q["cacheable"]), ("no", "off"), "nothing stored under cacheable off")
    vol.ctl("set cacheable on", "nocache")

    # --- a pinned file changed on the server is fetched completely again on access
    os.mkdir(vol.b("hoard"))
    write_file(vol.b("hoard", "p"), rand_bytes(1024 * 1024, 10))
    eq(vol.ctl("pin recursive", "hoard")["fits"], "yes", "pin a subtree")
    newp = rand_bytes(1536 * 1024, 11)
    write_file(vol.b("hoard", "p"), newp)
    time.sleep(LEASE + 0.5)
    with open(vol.v("hoard", "p"), "rb") as f:
        f.read(10)
    for _ in range(50):
        if vol.ctl("query cached", "hoard/p")["cached"] == "complete":
            break
        time.sleep(0.1)
    q = vol.ctl("query cached", "hoard/p")
    eq((q["cached"], int(q["cached_bytes"]), q["pinned"]), ("complete", len(newp), "yes"),
       "after one access the changed pinned file is complete again in the store")
    eq(read_direct(vol.v("hoard", "p")), newp, "with the new content")

    # --- a pinned file has one local copy: its mirror file is the container
    os.mkdir(vol.b("one"))
    one = rand_bytes(2 * 1024 * 1024 + 77, 12)
    write_file(vol.b("one", "f"), one)
    eq(read_file(vol.v("one", "f")), one, "read before the pin (fills the store)")
    ino = os.stat(vol.b("one", "f")).st_ino
    blob = os.path.join(vol.cache, "objects", f"{ino & 0xff:02x}", str(ino))
    mirror = os.path.join(vol.cache, "mirror", "one", "f")
    for _ in range(200):                         # moved into its container off the request path
        if os.path.exists(mirror) and not os.path.exists(blob):
            break
        time.sleep(0.05)
    check(os.path.exists(mirror) and not os.path.exists(blob),
          "read whole while unpinned, it moved from the store's blocks into its container")
    r = vol.ctl("pin recursive", "one")
    eq((r["mirrored"], int(r["fetched"])), ("yes", 0),
       "the pin fetches nothing: it only marks the cached container pinned")
    check(not os.path.exists(blob), "pinned, the store holds no second copy of it")
    q = vol.ctl("query cached", "one/f")
    eq((q["cached"], int(q["cached_bytes"]), q["pinned"]), ("complete", len(one), "yes"),
       "query cached: complete and pinned")
    eq(read_file(mirror), one, "the mirror's file holds the content")
    st = os.stat(mirror)
    with open(mirror, "r+b") as f:             # behind the view's back, size and mtime kept
        f.seek(BLOCK + 5)
        f.write(b"CONTAINER")
    os.utime(mirror, ns=(st.st_atime_ns, st.st_mtime_ns))
    marked = bytearray(one)
    marked[BLOCK + 5:BLOCK + 14] = b"CONTAINER"
    eq(read_direct(vol.v("one", "f")), bytes(marked), "online reads are served from the container")
    with open(mirror, "r+b") as f:
        f.seek(BLOCK + 5)
        f.write(one[BLOCK + 5:BLOCK + 14])
    os.utime(mirror, ns=(st.st_atime_ns, st.st_mtime_ns))
    used = int(vol.ctl("query cache")["used"])
    check(used >= len(one), f"the container's bytes count as used ({used})")
    with open(vol.v("one", "f"), "r+b") as f:  # written through the view: on the server
        f.seek(10)
        f.write(b"written online")
    one2 = bytearray(one)
    one2[10:24] = b"written online"
    eq(read_direct(vol.v("one", "f")), bytes(one2), "after a write through the view, reads are right")
    eq(read_file(mirror), bytes(one2), "and the container was brought up to date at close")
    os.truncate(vol.b("one", "f"), 1000)         # changed on the server
    time.sleep(LEASE + 0.5)
    eq(read_direct(vol.v("one", "f")), bytes(one2[:1000]),
       "a server change is seen (the stale container is not served)")
    vol.stop()
    vol.start()
    eq(read_direct(vol.v("one", "f")), bytes(one2[:1000]), "and after a restart")
    eq(vol.ctl("pin recursive", "one")["mirrored"], "yes", "a pin again brings the container up to date")
    q = vol.ctl("query cached", "one/f")
    eq((q["cached"], int(q["cached_bytes"])), ("complete", 1000), "complete again, one copy")
    check(not os.path.exists(blob), "still no second copy in the store")

    # --- prefetch: a subtree fetched into the store, not pinned
    os.makedirs(vol.b("pre", "d"))
    pre = {f"pre/f{i:02d}": rand_bytes(200000 + i, 20 + i) for i in range(70)}
    pre["pre/d/g"] = rand_bytes(300000, 99)
    for name, content in pre.items():
        write_file(vol.b(name), content)
    r = vol.ctl("prefetch recursive", "pre")
    eq((int(r["files"]), int(r["fetched"]), r["failed"]), (71, sum(map(len, pre.values())), "0"),
       "prefetch recursive fetches every file of the subtree (more than one batch)")
    states = {(vol.ctl("query cached", n)["cached"], vol.ctl("query cached", n)["pinned"])
              for n in pre}
    eq(states, {("complete", "no")}, "... into the store: complete, not pinned")
    eq(read_direct(vol.v("pre", "d", "g")), pre["pre/d/g"], "prefetched content reads back")
    r = vol.ctl("prefetch", "pre/f00")
    eq((r["files"], r["fetched"]), ("1", "0"), "prefetch of a cached file fetches nothing")

    # --- prefetch leaves out what is marked cacheable off
    os.makedirs(vol.b("pre2", "nc", "deeper"))
    write_file(vol.b("pre2", "a"), b"a" * 5000)
    write_file(vol.b("pre2", "nc", "b"), b"b" * 5000)
    write_file(vol.b("pre2", "nc", "deeper", "c"), b"c" * 5000)
    write_file(vol.b("pre2", "off"), b"o" * 5000)
    vol.ctl("set cacheable off", "pre2/nc")
    vol.ctl("set cacheable off", "pre2/off")
    r = vol.ctl("prefetch recursive", "pre2")
    eq((r["files"], r["fetched"], r.get("skipped")), ("1", "5000", "2"),
       "prefetch recursive fetches a and leaves out nc/ and off (cacheable off)")
    eq([vol.ctl("query cached", n)["cached"] for n in
        ("pre2/a", "pre2/nc/b", "pre2/nc/deeper/c", "pre2/off")],
       ["complete", "no", "no", "no"], "... nothing of them stored")
    r = vol.ctl("prefetch recursive", "pre2/nc/deeper", ok=False)
    check(r["_rc"] != 0 and "cacheable off" in r["_err"] and "pre2/nc/deeper" in r["_err"],
          f"prefetch below a directory marked cacheable off is refused, saying why ({r['_err']})")
    eq(vol.ctl("query cached", "pre2/nc/deeper/c")["cached"], "no", "... and stores nothing")

    # --- bad commands are refused with the word that was wrong
    r = vol.ctl("frobnicate", ok=False)
    check(r["_rc"] != 0 and "frobnicate" in r["_err"], f"bad command names the word ({r['_err']})")
    r = vol.ctl("query cached", "../../etc/passwd", ok=False)
    check(r["_rc"] != 0, "a path outside the volume is refused")

    # --- a corrupted store file is detected and fetched again, never served
    # (read all but its last block: a file read whole moves into a container)
    good = rand_bytes(6 * BLOCK, 4)
    write_file(vol.b("victim"), good)
    eq(read_direct(vol.v("victim"), 0, 5 * BLOCK), good[:5 * BLOCK], "victim cached (5 blocks of 6)")
    ino = os.stat(vol.b("victim")).st_ino
    blob = os.path.join(vol.cache, "objects", f"{ino & 0xff:02x}", str(ino))
    check(os.path.getsize(blob) == 5 * BLOCK, "the store holds the content in one file per object")
    with open(blob, "r+b") as f:               # flip bytes while the view runs
        f.seek(BLOCK + 7)
        f.write(b"\xff\x00CORRUPT")
    eq(read_direct(vol.v("victim"), BLOCK, BLOCK), good[BLOCK:2 * BLOCK],
       "a corrupt block is not served (running)")
    check(int(vol.ctl("query cache")["corrupt_blocks"]) >= 1, "query cache counts the corrupt block")
    vol.stop()
    with open(blob, "r+b") as f:               # and while it is stopped
        f.seek(3 * BLOCK + 1)
        f.write(b"garbage!")
    with open(blob, "r+b") as f:
        f.truncate(4 * BLOCK + 3)             # a torn tail
    vol.start()
    eq(read_direct(vol.v("victim")), good, "after restart, corrupt and torn blocks are fetched again")
    eq(vol.ctl("query cached", "victim")["cached"], "complete", "and the store copy is whole again")

    # --- deep paths near and beyond PATH_MAX: the backing is reached by *at() calls
    name = "d" * 200
    depth = 0
    fd = os.open(vol.mnt, os.O_RDONLY | os.O_DIRECTORY)
    while depth < 30:                          # 30 * 201 bytes: past PATH_MAX (4096)
        os.mkdir(name, dir_fd=fd)
        nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
        depth += 1
    with open(os.open("leaf", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd), "wb") as f:
        f.write(b"deep")
    os.rename("leaf", "leaf2", src_dir_fd=fd, dst_dir_fd=fd)
    os.symlink("leaf2", "ln", dir_fd=fd)
    with open(os.open("ln", os.O_RDONLY, dir_fd=fd), "rb") as f:
        got = f.read()
    os.close(fd)
    eq(got, b"deep", f"create/rename/symlink/read at depth {depth} ({depth * 201} bytes of path)")
    # the same leaf through the backing, walking it by descriptors
    bfd = os.open(vol.backing, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        n = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=bfd)
        os.close(bfd)
        bfd = n
    with open(os.open("leaf2", os.O_RDONLY, dir_fd=bfd), "rb") as f:
        eq(f.read(), b"deep", "the deep file is on the backing")
    os.close(bfd)
    near = os.path.join(vol.mnt, *([name] * ((4000 - len(vol.mnt)) // 201)))
    check(len(near) < 4096 and len(near) > 3800, f"a path of {len(near)} bytes")
    write_file(os.path.join(near, "x"), b"near")
    eq(read_file(os.path.join(near, "x")), b"near", "absolute path near PATH_MAX works")
    subprocess.run(["rm", "-rf", vol.b(name)], check=True)

    vol.stop()
    finish()


if __name__ == "__main__":
    main()
