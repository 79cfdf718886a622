#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""FUSE passthrough of read-only opens (daemon/view/view-passthrough.c): once the
store holds a file whole (its first read), reads and mmap of it are served
by the kernel from the local file, with no FUSE_READ
(the view's read_requests counter in "query state" does not move); the mode
of a node's open files kept consistent (a writer while readers pass through,
a reader while a writer is open: no EIO); offline, the mirror's file; and
FCACHE_VIEW_PASSTHROUGH=0 serving every read as before.
"""
import mmap
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, finish, rand_bytes, read_file,  # noqa: E402
                     require_root_fuse, skip, write_file)


def reads(vol):
    return int(vol.state()["read_requests"])


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main():
    require_root_fuse()
    vol = Volume("pt").start()
    if vol.state().get("passthrough") != "yes":
        skip("the kernel does not offer FUSE passthrough (Linux 6.9+, CONFIG_FUSE_PASSTHROUGH)")
    data = rand_bytes(4 << 20, 1)
    write_file(vol.b("f"), data)
    write_file(vol.b("small"), b"s" * 4096)

    # --- the first read fills the store through the view; then a read-only
    #     open passes through: no READ reaches the view, cold or warm
    r0 = reads(vol)
    eq(read_file(vol.v("f")), data, "first read of a file through the view")
    check(reads(vol) > r0, "the first read reached the view (it fills the store)")
    eq(vol.ctl("query cached", "f")["cached"], "complete", "the store holds it whole")
    drop_caches()
    r0 = reads(vol)
    eq(read_file(vol.v("f")), data, "read again (cold)")
    eq(read_file(vol.v("f")), data, "and again (warm)")
    eq(reads(vol) - r0, 0, "no FUSE_READ reached the view: the kernel read the backing file")

    # --- mmap of a passed-through file
    with open(vol.v("f"), "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        eq(m[:4096], data[:4096], "mmap of a passed-through file: first page")
        eq(m[len(data) - 100:], data[-100:], "mmap: last bytes")
        m.close()
    eq(reads(vol) - r0, 0, "mmap faults did not reach the view either")

    # --- a small file is served by the view's page cache (keep_cache), not
    #     passed through: a passthrough read would cost a GETATTR at each stat
    eq(read_file(vol.v("small")), b"s" * 4096, "a small file, first read")
    drop_caches()
    r1 = reads(vol)
    eq(read_file(vol.v("small")), b"s" * 4096, "a small file, read again")
    check(reads(vol) > r1, "a small file is not passed through")

    # --- an O_DIRECT open while a reader passes through: passed through too
    #     (the kernel's rule), aligned direct reads work
    rfd = os.open(vol.v("f"), os.O_RDONLY)
    try:
        dfd = os.open(vol.v("f"), os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, 4096)
        eq(os.preadv(dfd, [buf], 4096), 4096, "an aligned O_DIRECT read beside a passthrough reader")
        eq(bytes(buf), data[4096:8192], "its content")
        os.close(dfd)
    except OSError as e:
        check(False, f"O_DIRECT open beside a passthrough reader: {e}")
    os.close(rfd)

    # --- a writer while a reader passes through: no EIO; it passes through too
    rfd = os.open(vol.v("f"), os.O_RDONLY)
    eq(os.pread(rfd, 10, 0), data[:10], "reader open")
    try:
        wfd = os.open(vol.v("f"), os.O_WRONLY)
        eq(os.pwrite(wfd, b"WRITTEN", 0), 7, "write through a second open, for writing")
        os.close(wfd)
        ok = True
    except OSError as e:
        ok = False
        check(False, f"open for writing while a reader passes through: {e}")
    if ok:
        eq(os.pread(rfd, 7, 0), b"WRITTEN", "the reader sees the write")
        with open(vol.b("f"), "rb") as fh:
            eq(fh.read(7), b"WRITTEN", "the write reached the backing before close returned")
    os.close(rfd)
    data = b"WRITTEN" + data[7:]
    eq(read_file(vol.v("f")), data, "content after the write, through a new open")

    # --- a truncating writer (a shell's >) while a reader passes through
    write_file(vol.b("g"), data)
    eq(read_file(vol.v("g")), data, "g: first read fills the store")
    rfd = os.open(vol.v("g"), os.O_RDONLY)
    eq(os.pread(rfd, 8, 0), data[:8], "g: reader open (passes through)")
    short_data = rand_bytes(200 << 10, 3)
    try:
        write_file(vol.v("g"), short_data)
        eq(os.stat(vol.v("g")).st_size, len(short_data), "g: size after O_TRUNC and write")
        eq(os.pread(rfd, 8, 0), short_data[:8], "g: the reader sees the new content")
        eq(read_file(vol.b("g")), short_data, "g: on the backing")
    except OSError as e:
        check(False, f"O_TRUNC open while a reader passes through: {e}")
    os.close(rfd)
    eq(read_file(vol.v("g")), short_data, "g: a new open reads the new content")

    # --- a reader while a writer is open (normal mode): no EIO, served by the view
    wfd = os.open(vol.v("f"), os.O_RDWR)
    os.pwrite(wfd, b"SECOND", 100)
    data = data[:100] + b"SECOND" + data[106:]
    try:
        eq(read_file(vol.v("f")), data, "a reader while a writer is open reads the write")
    except OSError as e:
        check(False, f"open for reading while a writer is open: {e}")
    os.close(wfd)
    r2 = reads(vol)
    eq(read_file(vol.v("f")), data, "after the writer closed, a reader again")
    drop_caches()
    eq(read_file(vol.v("f")), data, "and cold")
    eq(reads(vol) - r2, 0, "passes through again once the writer is gone")

    # --- a worker killed and taken over: open files keep their node's mode
    rfd = os.open(vol.v("f"), os.O_RDONLY)
    old = vol.kill_worker()
    vol.wait_new_worker(old)
    eq(os.pread(rfd, 16, 0), data[:16], "a passed-through open file reads across a takeover")
    try:
        eq(read_file(vol.v("f")), data, "a new reader of it after the takeover (no EIO)")
        wfd = os.open(vol.v("f"), os.O_WRONLY)
        os.pwrite(wfd, b"T", 200)
        os.close(wfd)
        data = data[:200] + b"T" + data[201:]
        eq(os.pread(rfd, 1, 200), b"T", "a writer of it after the takeover (no EIO)")
    except OSError as e:
        check(False, f"open after a takeover: {e}")
    os.close(rfd)
    eq(reads(vol), 0, "the successor served no READ of it (its counter starts at 0)")
    eq(read_file(vol.v("f")), data, "content after the takeover")
    wfd = os.open(vol.v("f"), os.O_RDWR)    # a normal open, held across a takeover
    old = vol.kill_worker()
    vol.wait_new_worker(old)
    try:
        eq(read_file(vol.v("f")), data, "a reader while a writer from before the takeover is open")
    except OSError as e:
        check(False, f"a reader beside a normal open after a takeover: {e}")
    os.close(wfd)

    # --- a file written through the view, truncated, appended: content right
    write_file(vol.v("new"), b"hello world\n" * 20000)
    with open(vol.v("new"), "ab") as fh:
        fh.write(b"more\n")
    new = b"hello world\n" * 20000 + b"more\n"
    eq(read_file(vol.v("new")), new, "created and appended through the view")
    with open(vol.v("new"), "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        eq(bytes(m), new, "mmap of a file written through the view")
        m.close()
    eq(read_file(vol.b("new")), new, "and on the backing")
    os.truncate(vol.v("new"), 5)
    eq(read_file(vol.v("new")), b"hello", "after truncate through the view")

    # --- offline: the mirror's file passes through (it is a complete copy)
    os.makedirs(vol.b("p"))
    pdata = rand_bytes(1 << 20, 2)
    write_file(vol.b("p", "x"), pdata)
    vol.ctl("pin recursive", "p")
    eq(vol.ctl("disconnect")["state"], "offline", "disconnected")
    drop_caches()
    r3 = reads(vol)
    eq(read_file(vol.v("p", "x")), pdata, "offline read of a pinned file")
    eq(reads(vol) - r3, 0, "offline, the mirror's file passes through")
    pdata = b"offline" + pdata[7:]
    with open(vol.v("p", "x"), "r+b") as fh:
        fh.write(b"offline")
    eq(read_file(vol.v("p", "x")), pdata, "offline write then read")
    write_file(vol.v("p", "made"), b"made offline\n" * 1000)
    # a shell's redirection flushes (closes the descriptor it dup2()ed)
    # before the command writes: the writes after it are logged too
    subprocess.run(f"seq 1 5 > {vol.v('p', 'seq')}", shell=True, check=True)
    eq(read_file(vol.v("p", "made")), b"made offline\n" * 1000, "a file created offline")
    q = vol.ctl("reconnect")
    eq(q["state"], "online", "reconnected")
    eq(read_file(vol.b("p", "x")), pdata, "the offline write reached the backing")
    eq(read_file(vol.v("p", "x")), pdata, "and reads back online")
    eq(read_file(vol.b("p", "made")), b"made offline\n" * 1000,
       "the file created offline reached the backing")
    eq(read_file(vol.b("p", "seq")), b"1\n2\n3\n4\n5\n",
       "a file written offline by a shell's redirection reached the backing")
    vol.stop()

    # --- turned off: every read is served by the view, content the same
    os.environ["FCACHE_VIEW_PASSTHROUGH"] = "0"
    off = Volume("pt-off").start()
    del os.environ["FCACHE_VIEW_PASSTHROUGH"]
    eq(off.state().get("passthrough"), "no", "FCACHE_VIEW_PASSTHROUGH=0: not negotiated")
    write_file(off.b("f"), data)
    drop_caches()
    r0 = reads(off)
    eq(read_file(off.v("f")), data, "read with passthrough off")
    check(reads(off) - r0 > 0, "with passthrough off, reads reach the view")
    with open(off.v("f"), "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        eq(m[:4096], data[:4096], "mmap with passthrough off")
        m.close()
    off.stop()
    finish()


if __name__ == "__main__":
    main()
