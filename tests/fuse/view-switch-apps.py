#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""What an application that keeps its files open sees across switches.

sqlite keeps its database open, writes it in place and checks at each
write transaction that the name still leads to the inode it opened
(otherwise "attempt to write a readonly database", for good); its
rollback journal is created and deleted, or truncated, in every
transaction.  Across switches between online and offline:

- the replay writes an offline edit into the server's file in place: a
  file's inode number (stat of the name, fstat of an open descriptor, the
  server's) stays the same through a disconnect and a reconnect;
- a truncate or a fallocate made through a writer whose writes the
  kernel passes to the other tree's file (opened before the switch) is
  made in that file too: every split point of open, write, fsync,
  truncate, fsync, close around a disconnect or a reconnect leaves the
  view and the server empty; so is an O_TRUNC open, a truncate(2) of the
  name and a hole punched by another process beside such a writer, and a
  truncate(2) beside a reader passed through so, which a writer then
  joins;
- the size of a file whose writer writes the other tree's file (opened
  before a switch) is what that writer wrote, before its next flush too:
  a stat the kernel must ask the view for, and a chmod's reply, after an
  extending pwrite; a utime of its name then holds, in the view and on the
  server after the writer's close;
- a writer opened offline and closed after the reconnect without writing
  since does not copy its file over the server's: another client's change
  made on the server after the reconnect stays;
- a successor (the worker killed offline) finds again the file the kernel
  passes an open file through, before the reconnect's resync could replace
  it, and the resync then updates that file in place: a truncate and a
  write through a writer opened offline and held through a reconnect, a
  disconnect, the kill and a reconnect reach its descriptor, the view and
  the server; a writer opening a file that a reader opened offline passes
  through (not ETXTBSY), and its write reaches the server;
- a writer opened offline, written offline and online, a utime of its
  name and a link to a new name online, then its close: the view, the
  server and offline both names (one object) hold every write;
- a file open for writing whose name another file was renamed over online
  (its object has no name left) goes on working through its descriptor
  across three switches (fstat, ftruncate, pwrite, pread);
- a writer opened offline on a file with several names, written online
  and the file linked to a new name before its close: the close puts its
  writes on the server, and offline the names are still one object (the
  mirror leaves the file the kernel writes as it is, and takes it at the
  close);
- the file the kernel passes an open file through is the one a successor
  takes, whatever became of its names (the holder keeps each such file):
  a file made offline with two names, a writer opened offline by one, the
  reconnect and a kill, then a pwrite and a truncate(2) of its name: the
  writer reads both, and so do its other name and the server; a writer
  opened offline on a file with two names, the worker killed, the names
  removed and renamed over, the worker killed again: through three
  switches its pwrite, ftruncate, fstat and pread hold and its close
  succeeds; a writer opened offline, the reconnect, its name renamed over
  online, offline again: its ftruncate holds for its reads (the file the
  kernel writes is truncated, not only the open file's own), and fstat
  shows an appending pwrite's size at once (the node shows the size of
  the file the kernel writes whenever that is not the file served);
- a file of two names open for writing online, both names removed
  offline (the mirror's object keeps only its links index's link): through
  the reconnect and two more switches its descriptor works on that file,
  never ESTALE, and the server has neither name; so it does with the
  worker killed after the reconnect (its resync unlinked the links
  index's link: the holder keeps the descriptor);
- a file open for writing whose second name (in another directory) was
  exchanged with another file's and then removed online, the worker
  killed offline: the successor finds it by the name it keeps, and its
  ftruncate, pread and three more switches hold (the name exchanged
  away is the other file's, not one of its own);
- a file of two names held open, both names removed offline, the
  reconnect and a kill, the file closed after two switches: a file of
  two names another client then makes with the inode number the mirror's
  object had, held open for writing, offline the worker killed: its
  ftruncate, pread and three more switches hold (the successor knows the
  first file's node unbound, not by that number);
- a file whose node a successor keeps after its object went, which at a
  switch offline and back found no counterpart (it keeps only its server
  inode number), and a file of two names another client then makes with
  that number, held open for writing, offline the worker killed: its
  ftruncate, pread and three more switches hold (at a switch a node whose
  name leads to its object takes it before another claims it by its
  number through the links index);
- a file removed while held open and the worker killed (the successor
  keeps its node, never freed), its inode number then given to a file of
  two names another client makes: that file held open for writing works
  through two switches, and offline both names read it (the old node lets
  the number go when the new file is looked up);
- a file made offline with two names and held open for writing across
  the reconnect, offline again: a rename of one name is logged (the
  object the kernel writes took the server's identity at the resync)
  and reaches the server;
- a directory made offline and held open (as a shell's current
  directory is) across a kill offline and the reconnect: fstat, openat
  and a listing through it work (the successor's node, with no
  descriptor yet, finds its mirror object by handle);
- a writer that writes the server's file directly while offline is never
  overwritten by the replay of its own older content: every pread after a
  pwrite and fsync returns that write, through eight reconnects;
- sqlite in DELETE, TRUNCATE and WAL journal modes (synchronous=FULL),
  one connection committing all the time through eight disconnects and
  reconnects: no error, every committed row in the view and on the
  server, integrity_check ok on both; again in TRUNCATE and WAL modes
  with the worker killed (kill -9) while offline at each disconnect: the
  successor takes the database the kernel writes (the server's file,
  opened online) back as that writer's file.
"""
import ctypes
import os
import sqlite3
import stat
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (RENAME_EXCHANGE, Volume, check, eq, finish, read_direct,  # noqa: E402
                     read_file, renameat2, require_root_fuse)


LEASE_S = 2


def switch(vol, to):
    q = vol.ctl("disconnect" if to == "offline" else "reconnect")
    eq(q["state"], to, f"{'disconnect' if to == 'offline' else 'reconnect'}: state={to}")


def inode_numbers(vol):
    with open(vol.v("p", "ino"), "wb") as f:
        f.write(b"a" * 8192)
    path = vol.v("p", "ino")
    fd = os.open(path, os.O_RDWR)
    first = os.fstat(fd).st_ino
    seen = []
    for to, off in (("offline", 0), ("online", 4096), ("offline", 100), ("online", 200)):
        switch(vol, to)
        os.pwrite(fd, to.encode(), off)
        os.fsync(fd)
        seen.append((os.stat(path).st_ino, os.fstat(fd).st_ino))
    os.close(fd)
    eq(seen, [(first, first)] * 4,
       "an edited file's inode number (its name's, its descriptor's) stays across switches")
    eq(os.stat(vol.b("p", "ino")).st_ino, first,
       "the replay wrote the offline edits into the server's file in place")


TRUNC_OPS = ["open", "write", "fsync", "trunc", "fsync2", "close"]


def truncate_splits(vol):
    wrong = []
    i = 0
    for existed in (False, True):
        for start in ("online", "offline"):
            for k in range(len(TRUNC_OPS)):
                i += 1
                name = f"t{i}"
                if existed:
                    with open(vol.v("p", name), "wb") as f:
                        f.write(b"old" * 10)
                if start == "offline":
                    switch(vol, "offline")
                fd = None
                for idx, op in enumerate(TRUNC_OPS):
                    if idx == k:
                        switch(vol, "online" if start == "offline" else "offline")
                    if op == "open":
                        fd = os.open(vol.v("p", name), os.O_RDWR | os.O_CREAT, 0o644)
                    elif op == "write":
                        os.pwrite(fd, b"x" * 512, 0)
                    elif op in ("fsync", "fsync2"):
                        os.fsync(fd)
                    elif op == "trunc":
                        os.ftruncate(fd, 0)
                    else:
                        os.close(fd)
                if start == "online":
                    switch(vol, "online")
                sizes = (os.stat(vol.v("p", name)).st_size, os.stat(vol.b("p", name)).st_size)
                if sizes != (0, 0):
                    wrong.append((name, existed, start, TRUNC_OPS[k], sizes))
    eq(wrong, [], "a truncate through a writer opened before a switch: view and server empty"
       " at every split point")


def stranded_writer(vol, path, first, data):
    """A descriptor of new file path opened in the tree @first ("online"
    or "offline"), data written and fsynced there, and the volume then
    switched to the other tree: the kernel writes the file it was opened
    on, not the one served."""
    if first == "offline":
        switch(vol, "offline")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    os.pwrite(fd, data, 0)
    os.fsync(fd)
    switch(vol, "online" if first == "offline" else "offline")
    return fd


def punch_hole(fd, off, length):
    libc = ctypes.CDLL(None, use_errno=True)
    # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
    if libc.fallocate(fd, 0x02 | 0x01, ctypes.c_long(off), ctypes.c_long(length)) != 0:
        raise OSError(ctypes.get_errno(), "fallocate")


def changes_beside_a_stranded_writer(vol):
    """A writer opened before a switch (the kernel writes the other tree's
    file) and, after it, another process's O_TRUNC open, truncate(2) of the
    name or hole punched: the writer's descriptor, the view and the server
    all see the change."""
    wrong = []
    for first in ("online", "offline"):
        for how in ("O_TRUNC", "truncate", "punch"):
            name = f"s-{first}-{how}"
            path = vol.v("p", name)
            a = stranded_writer(vol, path, first, b"A" * 1000)
            if how == "O_TRUNC":
                with open(path, "wb") as f:
                    f.write(b"x\n")
                want = b"x\n"
            elif how == "truncate":
                os.truncate(path, 10)
                want = b"A" * 10
            else:
                b = os.open(path, os.O_RDWR)
                punch_hole(b, 0, 500)
                os.close(b)
                want = b"\0" * 500 + b"A" * 500
            through_a = os.pread(a, 2000, 0)
            os.fsync(a)
            os.close(a)
            if first == "offline":
                switch(vol, "offline")
            switch(vol, "online")
            got = (through_a, read_file(path), read_file(vol.b("p", name)))
            if got != (want, want, want):
                wrong.append((name, [g[:12] for g in got]))
    eq(wrong, [], "a change beside a writer opened before a switch: its descriptor, the view"
       " and the server see it")


AT_EMPTY_PATH = 0x1000
AT_STATX_FORCE_SYNC = 0x2000


def size_asked(fd):
    """st_size of fd from the view itself (statx AT_STATX_FORCE_SYNC: the
    kernel's cached attributes are not used)."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)
    if libc.statx(fd, b"", AT_EMPTY_PATH | AT_STATX_FORCE_SYNC, 0x200, buf) != 0:
        raise OSError(ctypes.get_errno(), "statx")
    return int.from_bytes(buf.raw[40:48], sys.byteorder)


T_SET = 1287863627      # a time set with utime(2), in the past


def stranded_writer_size(vol):
    """An extending write through a writer opened before a switch (the
    kernel writes the other tree's file), not flushed yet: the view's
    attributes show its size."""
    wrong = []
    for first in ("online", "offline"):
        name = f"size-{first}"
        path = vol.v("p", name)
        fd = stranded_writer(vol, path, first, b"a" * 4096)
        os.pwrite(fd, b"b" * 4096, 4096)
        asked = size_asked(fd)
        os.fchmod(fd, 0o640)
        after_chmod = os.fstat(fd).st_size
        named = os.stat(path).st_size
        os.utime(path, (T_SET, T_SET))
        times = (int(os.stat(path).st_mtime), int(os.fstat(fd).st_mtime))
        os.close(fd)
        if (asked, after_chmod, named, times) != (8192, 8192, 8192, (T_SET, T_SET)):
            wrong.append((name, asked, after_chmod, named, times))
        if first == "offline":
            switch(vol, "offline")
        switch(vol, "online")
        server = os.stat(vol.b("p", name))
        if (server.st_size, int(server.st_mtime)) != (8192, T_SET):
            wrong.append((name, "server", server.st_size, int(server.st_mtime)))
    eq(wrong, [], "a writer's extending write to the other tree's file shows in the size"
       " (stat asked of the view, a chmod's reply, the name's stat, the server after),"
       " and a utime of the name after it in the mtime (the view's, the server's after)")


def offline_writer_closed_online(vol):
    """A writer opened offline (the kernel writes the mirror's file), written
    offline or not, held across the reconnect and closed after another
    client changed the server's file: the change stays."""
    wrong, wants = [], []
    for written in (False, True):
        name = f"held-{int(written)}"
        with open(vol.b("p", name), "wb") as f:
            f.write(b"x" * 3000)
        read_file(vol.v("p", name))
        switch(vol, "offline")
        fd = os.open(vol.v("p", name), os.O_RDWR)
        want = b"x" * 3000
        if written:
            os.pwrite(fd, b"w" * 10, 1000)
            want = want[:1000] + b"w" * 10 + want[1010:]
        switch(vol, "online")
        with open(vol.b("p", name), "r+b") as f:
            f.write(b"ZZ")
        want = b"ZZ" + want[2:]
        os.close(fd)
        wants.append((name, want))
    # A reader passed through offline, and a writer that joins its file online.
    size = 256 * 1024
    with open(vol.b("p", "held-r"), "wb") as f:
        f.write(b"x" * size)
    read_file(vol.v("p", "held-r"))
    switch(vol, "offline")
    r = os.open(vol.v("p", "held-r"), os.O_RDONLY)
    os.pread(r, 10, 0)
    switch(vol, "online")
    with open(vol.b("p", "held-r"), "r+b") as f:
        f.write(b"ZZ")
    w = os.open(vol.v("p", "held-r"), os.O_RDWR)
    os.close(w)
    os.close(r)
    wants.append(("held-r", b"ZZ" + b"x" * (size - 2)))
    # The view shows another client's change once the attribute lease ran out.
    time.sleep(LEASE_S + 0.5)
    for name, want in wants:
        got = (read_file(vol.b("p", name)), read_file(vol.v("p", name)))
        if got != (want, want):
            wrong.append((name, [g[:4] for g in got]))
    eq(wrong, [], "a writer opened offline, or joining a reader's file online, closed online"
       " unwritten since: the server keeps another client's change")


def kept_by_a_successor(vol):
    """Open files the kernel passes through the mirror's files, across a
    reconnect, a disconnect, kill -9 of the worker offline and a reconnect."""
    switch(vol, "offline")
    with open(vol.v("p", "kept-w"), "wb") as f:
        f.write(b"x" * 3000)
    w = os.open(vol.v("p", "kept-w"), os.O_RDWR)
    size = 256 * 1024
    with open(vol.v("p", "kept-r"), "wb") as f:
        f.write(b"r" * size)
    switch(vol, "online")
    switch(vol, "offline")
    r = os.open(vol.v("p", "kept-r"), os.O_RDONLY)
    os.pread(r, 10, 0)
    kill_and_wait(vol)
    switch(vol, "online")
    os.ftruncate(w, 1000)
    os.pwrite(w, b"y" * 10, 2000)
    want_w = b"x" * 1000 + b"\0" * 1000 + b"y" * 10
    through_w = os.pread(w, 5000, 0)
    os.fsync(w)
    try:
        w2 = os.open(vol.v("p", "kept-r"), os.O_RDWR)
        os.pwrite(w2, b"ZZ", 0)
        os.close(w2)
        opened = "opened"
    except OSError as e:
        opened = e.strerror
    os.close(r)
    os.close(w)
    want_r = b"ZZ" + b"r" * (size - 2)
    eq((through_w == want_w, read_file(vol.v("p", "kept-w")) == want_w,
        read_file(vol.b("p", "kept-w")) == want_w),
       (True, True, True), "a writer held through a reconnect, a kill offline and a reconnect:"
       " its truncate and write reach its descriptor, the view and the server")
    eq((opened, read_file(vol.v("p", "kept-r")) == want_r, read_file(vol.b("p", "kept-r")) == want_r),
       ("opened", True, True), "a writer opening a file a reader passed through offline before"
       " the kill: opened, its write in the view and on the server")


def linked_beside_a_stranded_writer(vol):
    """A file with three names (two directories), a writer opened offline
    through one, a write through another name offline, the reconnect; then
    online a write and an fsync, a write, a link made to the file and the
    writer closed, or a writer by another name opened before that close:
    the server holds every write, and offline the four names are one
    object with every write."""
    wrong = []
    for joined in (False, True):
        d = f"lk{int(joined)}"
        os.makedirs(vol.b("p", d, "sub"))
        data = bytearray(os.urandom(6201))
        with open(vol.b("p", d, "a"), "wb") as f:
            f.write(data)
        os.link(vol.b("p", d, "a"), vol.b("p", d, "b"))
        os.link(vol.b("p", d, "a"), vol.b("p", d, "sub", "c"))
        vol.ctl("pin recursive", f"p/{d}")
        switch(vol, "offline")
        fd = os.open(vol.v("p", d, "a"), os.O_RDWR)

        def write(through, off, n):
            chunk = os.urandom(n)
            os.pwrite(through, chunk, off)
            data[off:off + n] = chunk
        by_name = os.open(vol.v("p", d, "b"), os.O_RDWR)
        write(by_name, 2070, 4131)
        os.close(by_name)
        switch(vol, "online")
        write(fd, 4903, 243)
        os.fsync(fd)
        write(fd, 4958, 378)
        os.link(vol.v("p", d, "a"), vol.v("p", d, "sub", "e"))
        if joined:
            second = os.open(vol.v("p", d, "b"), os.O_RDWR)
        os.close(fd)
        if joined:
            write(second, 100, 1516)
            os.close(second)
        got = read_file(vol.b("p", d, "b"))
        if got != data:
            wrong.append((d, "server", len(got)))
        switch(vol, "offline")
        names = ("a", "b", "sub/c", "sub/e")
        for name in names:
            st = os.stat(vol.v("p", d, name))
            if (st.st_nlink, read_file(vol.v("p", d, name)) == data) != (4, True):
                wrong.append((d, name, st.st_nlink))
        inos = {os.stat(os.path.join(vol.cache, "mirror", "p", d, n)).st_ino for n in names}
        if len(inos) != 1:
            wrong.append((d, "mirror objects", len(inos)))
        switch(vol, "online")
    eq(wrong, [], "a stranded writer of a file with several names, a link made online:"
       " every write on the server, and offline one object with four names")


def utime_and_link_beside_a_stranded_writer(vol):
    """A writer opened offline, a write offline, the reconnect; online a
    write, a utime of the name (the server's mtime and the kernel's file's
    move together) and a link to a new name, then the close: the view, the
    server and, offline, both names (one object) hold every write (before:
    the new name's copy was made from the server before the close, and with
    the size and mtime the same afterwards it passed for current: the view
    served it, without the online write)."""
    data = bytearray(os.urandom(16683))
    with open(vol.b("p", "ul-a"), "wb") as f:
        f.write(data)
    vol.ctl("pin recursive", "p")
    switch(vol, "offline")
    fd = os.open(vol.v("p", "ul-a"), os.O_RDWR)

    def write(off, n):
        chunk = os.urandom(n)
        os.pwrite(fd, chunk, off)
        data[off:off + n] = chunk
    write(4614, 1635)
    switch(vol, "online")
    write(2687, 1852)
    os.utime(vol.v("p", "ul-a"), (1500000000, 1500000000))
    os.link(vol.v("p", "ul-a"), vol.v("p", "ul-b"))
    os.close(fd)
    eq((read_direct(vol.v("p", "ul-b")) == data, read_file(vol.b("p", "ul-b")) == data),
       (True, True), "a utime and a link beside a stranded writer: the view and the server"
       " hold every write")
    switch(vol, "offline")
    sa, sb = os.stat(vol.v("p", "ul-a")), os.stat(vol.v("p", "ul-b"))
    eq((sa.st_ino == sb.st_ino, sa.st_nlink, read_direct(vol.v("p", "ul-b")) == data),
       (True, 2, True), "... offline: one object with two names and every write")
    switch(vol, "online")


def renamed_over_while_open(vol):
    """A file open for writing (large enough to pass through) renamed over
    online, so that its object has no name left, then the volume switched
    offline, online and offline: through the descriptor fstat, ftruncate,
    pwrite and pread go on working on the file it opened (its node finds
    no counterpart in either tree), and the name holds the other file."""
    data = bytearray(os.urandom(300000))
    with open(vol.v("p", "over-x"), "wb") as f:
        f.write(data)
    with open(vol.v("p", "over-o"), "wb") as f:
        f.write(b"other")
    fd = os.open(vol.v("p", "over-x"), os.O_RDWR)
    os.rename(vol.v("p", "over-o"), vol.v("p", "over-x"))
    steps = ("offline", "online", "offline")
    got = held_through(vol, fd, data, steps, 0, 200000)
    switch(vol, "online")
    eq(got, [(to, True, True) for to in steps] + ["closed"],
       "a file renamed over while open, through three switches: fstat, ftruncate, pwrite, pread")
    eq(read_file(vol.v("p", "over-x")), b"other", "the name holds the file renamed over it")


def kill_and_wait(vol):
    old = vol.kill_worker()
    vol.wait_new_worker(old)


def two_names_after_a_kill(vol):
    """A file made offline with two names, a writer opened offline by one
    (the kernel writes the mirror's file), the reconnect, the worker
    killed online; a pwrite through the writer, then a truncate(2) of its
    name: the writer, the other name and the server see both."""
    switch(vol, "offline")
    data = bytearray(os.urandom(29249))
    with open(vol.v("p", "tn-a"), "wb") as f:
        f.write(data)
    os.link(vol.v("p", "tn-a"), vol.v("p", "tn-b"))
    fd = os.open(vol.v("p", "tn-a"), os.O_RDWR)
    switch(vol, "online")
    kill_and_wait(vol)
    chunk = os.urandom(1407)
    os.pwrite(fd, chunk, 23399)
    data[23399:23399 + 1407] = chunk
    os.truncate(vol.v("p", "tn-a"), 27962)
    del data[27962:]
    through = os.pread(fd, 40000, 0)
    os.close(fd)
    eq((len(through), through == data, read_file(vol.v("p", "tn-b")) == data,
        read_file(vol.b("p", "tn-b")) == data), (len(data), True, True, True),
       "two names, a writer held through a reconnect and a kill, a pwrite and a truncate:"
       " the writer, the other name and the server see both")


def two_names_held_across_a_reconnect(vol):
    """A file made offline with two names and held open for writing across
    the reconnect (the mirror keeps the object the kernel writes, which
    takes the server's identity), offline again: a rename of one name
    works (before: ENOENT, the log had forgotten the object's offline id)
    and reaches the server with the writer's bytes, one inode."""
    switch(vol, "offline")
    with open(vol.v("p", "hr-a"), "wb") as f:
        f.write(b"a" * 1000)
    os.link(vol.v("p", "hr-a"), vol.v("p", "hr-b"))
    fd = os.open(vol.v("p", "hr-b"), os.O_RDWR)
    os.pwrite(fd, b"X" * 10, 5)
    switch(vol, "online")
    switch(vol, "offline")
    try:
        os.rename(vol.v("p", "hr-b"), vol.v("p", "hr-c"))
        check(True, "two names held across a reconnect: a rename offline")
    except OSError as e:
        check(False, f"two names held across a reconnect: a rename offline: {e}")
    os.close(fd)
    switch(vol, "online")
    want = b"aaaaa" + b"X" * 10 + b"a" * 985
    eq((read_file(vol.b("p", "hr-c")) if os.path.exists(vol.b("p", "hr-c")) else None,
        os.path.exists(vol.b("p", "hr-b")), os.stat(vol.b("p", "hr-a")).st_nlink),
       (want, False, 2), "two names held across a reconnect: the server has the rename and the bytes")


def held_through(vol, fd, data, steps, at, size):
    """After each switch through fd: a pwrite, an appending pwrite (its
    size checked by fstat at once), an ftruncate, then fstat and pread."""
    got = []
    for i, to in enumerate(steps):
        switch(vol, to)
        try:
            off = at + 50 * i
            os.pwrite(fd, b"w" * 100, off)
            data.extend(bytes(max(0, off - len(data))))     # a hole up to it
            data[off:off + 100] = b"w" * 100
            os.pwrite(fd, b"a" * 64, len(data))
            data += b"a" * 64
            if os.fstat(fd).st_size != len(data):
                got.append((to, "size after an appending write", os.fstat(fd).st_size, len(data)))
            os.ftruncate(fd, size - 100 * i)
            del data[size - 100 * i:]
            got.append((to, os.fstat(fd).st_size == len(data), os.pread(fd, len(data) + 1000, 0) == data))
        except OSError as e:
            got.append((to, e.strerror))
    try:
        os.close(fd)
        got.append("closed")
    except OSError as e:
        got.append(("close", e.strerror))
    return got


def nameless_after_kills(vol):
    """A writer opened offline on a file with two names, the worker
    killed (the open file is restored without a descriptor of its own),
    one name removed and another file renamed over the other, the worker
    killed again: through three switches the writer works on its file,
    and its close succeeds."""
    data = bytearray(os.urandom(13000))
    with open(vol.v("p", "nk-x"), "wb") as f:
        f.write(data)
    os.link(vol.v("p", "nk-x"), vol.v("p", "nk-y"))
    switch(vol, "offline")
    fd = os.open(vol.v("p", "nk-x"), os.O_RDWR)
    kill_and_wait(vol)
    os.unlink(vol.v("p", "nk-y"))
    with open(vol.v("p", "nk-o"), "wb") as f:
        f.write(b"other")
    os.rename(vol.v("p", "nk-o"), vol.v("p", "nk-x"))
    kill_and_wait(vol)
    steps = ("online", "offline", "online")
    eq(held_through(vol, fd, data, steps, 0, 12000), [(to, True, True) for to in steps] + ["closed"],
       "a writer whose file lost its names between two kills, through three switches:"
       " pwrite, ftruncate, fstat, pread, close")
    eq(read_file(vol.v("p", "nk-x")), b"other", "the name holds the file renamed over it")


def names_gone_offline(vol, kill=False):
    """A file of two names (one mirror object, also linked in the links
    index), open for writing online, both names removed offline: through
    the reconnect and two more switches its pwrite, ftruncate, fstat and
    pread hold (its node keeps the mirror's object as it does an unlinked
    one, rather than looking for a server object the replay removed:
    ESTALE), and the server has neither name.  @kill: the worker killed
    after the reconnect, whose resync unlinked the links index's link (the
    holder keeps the descriptor from the removal of the last name on)."""
    x, y = ("ngk-x", "ngk-y") if kill else ("ng-x", "ng-y")
    data = bytearray(os.urandom(9000))
    with open(vol.v("p", x), "wb") as f:
        f.write(data)
    os.link(vol.v("p", x), vol.v("p", y))
    fd = os.open(vol.v("p", x), os.O_RDWR)
    switch(vol, "offline")
    os.unlink(vol.v("p", x))
    os.unlink(vol.v("p", y))
    steps = ("online", "offline", "online")
    if kill:
        switch(vol, "online")
        kill_and_wait(vol)
        steps = ("offline", "online")
    eq(held_through(vol, fd, data, steps, 3000, 8000), [(to, True, True) for to in steps] + ["closed"],
       f"a file whose two names went offline, open across the reconnect{', a kill' if kill else ''}"
       " and two switches: pwrite, ftruncate, fstat, pread, close")
    eq([os.path.lexists(vol.b("p", n)) for n in (x, y)], [False, False],
       "... and the server has neither name")


def held_through_a_kill(vol, fd, data, what):
    """fd, a file held open for writing whose bytes are data: offline the
    worker killed, then through fd ftruncate and pread, and pwrite,
    ftruncate, fstat and pread through three more switches, then close."""
    switch(vol, "offline")
    kill_and_wait(vol)
    try:
        os.ftruncate(fd, 8000)
        del data[8000:]
        got = [("offline", os.pread(fd, 10000, 0) == data)]
    except OSError as e:
        got = [("offline", e.strerror)]
    steps = ("online", "offline", "online")
    got += held_through(vol, fd, data, steps, 3000, 7000)
    eq(got, [("offline", True)] + [(to, True, True) for to in steps] + ["closed"],
       f"{what}, held across a kill offline: ftruncate, pread, then pwrite, ftruncate, fstat,"
       " pread through three switches, close")


def exchanged_name_gone_before_a_kill(vol):
    """A file open for writing, linked to a second name in another
    directory, that name exchanged with another file's and then removed
    online (the file keeps its first name only, two directories down),
    offline the worker killed: the successor finds the file by that name,
    and through the descriptor ftruncate, pread and three more switches
    hold (before: its node kept the name exchanged away, which leads to
    the other file, and the descriptor answered ESTALE)."""
    os.makedirs(vol.v("p", "xg", "d"))
    x = vol.v("p", "xg", "d", "x")
    data = bytearray(os.urandom(9000))
    with open(x, "wb") as f:
        f.write(data)
    with open(vol.v("p", "xg-o"), "wb") as f:
        f.write(b"other")
    fd = os.open(x, os.O_RDWR)
    os.link(x, vol.v("p", "xg-y"))
    renameat2(vol.v("p", "xg-y"), vol.v("p", "xg-o"), RENAME_EXCHANGE)
    os.unlink(vol.v("p", "xg-o"))
    held_through_a_kill(vol, fd, data, "a file whose second name was exchanged away and removed")
    eq((read_file(x) == data, read_file(vol.v("p", "xg-y")),
        read_file(vol.b("p", "xg", "d", "x")) == data, read_file(vol.b("p", "xg-y"))),
       (True, b"other", True, b"other"),
       "... its name and the server hold its bytes, the other name the other file")


def number_freed_after_a_kill(vol, d):
    """Makes in d (under p) a file held open while its name is removed
    through the view, kills the worker (the successor keeps the node: the
    kernel's count is not known) and closes the file, so that the backing
    frees its inode number; then makes files on the backing, as another
    client, until one is given that number (ext4 gives a number freed in
    the same second again).  Returns that file's name, or None."""
    old = vol.v("p", d, "old")
    with open(old, "wb") as f:
        f.write(b"old")
    ino = os.stat(vol.b("p", d, "old")).st_ino
    r = os.open(old, os.O_RDONLY)
    os.unlink(old)
    kill_and_wait(vol)
    return made_with_number(vol, d, r, ino)


def made_with_number(vol, d, fd, ino):
    """Closes fd, the last hold on an object of inode number ino, early in
    a second, then makes files in d (under p) on the backing, as another
    client, until one is given that number (ext4 gives a number freed in
    the same second again).  Returns that file's name, or None."""
    time.sleep(1.02 - time.time() % 1)      # the release frees it early in a second
    os.close(fd)
    made, found = [], None
    end = time.time() + 0.8
    while not found and time.time() < end:
        name = vol.b("p", d, f"c{len(made)}")
        with open(name, "wb"):
            pass
        if os.stat(name).st_ino == ino:
            found = name
        else:
            made.append(name)   # kept until the end: its number is not the one
    for name in made:
        os.unlink(name)
    return found


def two_names_held(vol, d, found):
    """found (made on the backing) becomes p/d/d/new, with a second name
    new2, written, pinned and opened for writing through the view.  Returns
    the descriptor, its bytes, and the two names' paths in the view and the
    second's on the backing."""
    data = bytearray(os.urandom(9000))
    b, b2 = vol.b("p", d, "d", "new"), vol.b("p", d, "d", "new2")
    os.rename(found, b)
    with open(b, "wb") as f:
        f.write(data)
    os.link(b, b2)
    vol.ctl("pin recursive", "p")
    new, new2 = vol.v("p", d, "d", "new"), vol.v("p", d, "d", "new2")
    return os.open(new, os.O_RDWR), data, (new, new2, b2)


def freed_number_file(vol, prefix, what):
    """Up to three tries of number_freed_after_a_kill() in p/PREFIX0,
    PREFIX1, ...: (that directory's name, the file given the number), or
    a passing check saying the part is skipped and (None, None)."""
    for i in range(3):
        d = f"{prefix}{i}"
        os.makedirs(vol.v("p", d, "d"))
        found = number_freed_after_a_kill(vol, d)
        if found:
            return d, found
    check(True, f"{what}: skipped, the backing gave it to no new file")
    return None, None


def reused_number_after_a_kill(vol):
    """A file whose node a successor still knows after its object went
    (number_freed_after_a_kill()), its inode number given to a file of two
    names another client makes two directories down, pinned and looked up
    through the view, then held open for writing: through two switches
    pwrite, ftruncate, fstat and pread hold, and offline both names read
    its bytes (before: the old node still claimed the number, took the new
    file's mirror object through the links index at the switch offline,
    and the new file's node found none)."""
    d, found = freed_number_file(vol, "rn", "a reused inode number after a kill")
    if not found:
        return
    fd, data, (new, new2, b2) = two_names_held(vol, d, found)
    steps = ("offline", "online")
    got = held_through(vol, fd, data, steps, 2000, 8000)
    switch(vol, "offline")
    got += [read_file(new) == data, read_file(new2) == data]
    switch(vol, "online")
    eq(got, [(to, True, True) for to in steps] + ["closed", True, True],
       "a file given the inode number of one a successor still knows, held open: pwrite,"
       " ftruncate, fstat, pread through two switches, close, and offline both names")
    eq(read_file(b2) == data, True, "... and the server has its bytes")


def held_across_a_kill(vol, d, found, what):
    """found as two_names_held() makes it, then held_through_a_kill(): both
    names and the server hold its bytes."""
    fd, data, (new, new2, b2) = two_names_held(vol, d, found)
    held_through_a_kill(vol, fd, data, what)
    eq((read_file(new) == data, read_file(new2) == data, read_file(b2) == data),
       (True, True, True), "... both names and the server hold its bytes")


def stale_number_beside_a_held_file(vol):
    """A file whose node a successor still knows after its object went
    (number_freed_after_a_kill()), a switch offline and back (the old node
    finds no counterpart: it keeps only the server inode number it had),
    then that number given to a file of two names another client makes two
    directories down, pinned and held open for writing; offline the worker
    killed: through the descriptor ftruncate and pread hold, and pwrite,
    ftruncate, fstat and pread through three more switches (before: at the
    switch offline the old node, shallower, took the new file's mirror
    object through the links index by that number, the new file's node
    found none, and the descriptor answered ESTALE for good)."""
    d, found = freed_number_file(vol, "sq", "a stale number beside a held file")
    if not found:
        return
    switch(vol, "offline")
    switch(vol, "online")
    held_across_a_kill(vol, d, found, "a file given the server inode number a node without a"
                       " counterpart kept")


def mirror_number_after_a_kill(vol):
    """As names_gone_offline() with the kill: a file of two names held open
    online, both names removed offline, the reconnect (its node keeps the
    mirror's object, which no name holds) and the worker killed; a switch
    offline and back, then the file closed, so that the mirror's object
    goes and its inode number is free (the mirror and the backing share a
    filesystem here); files made on the backing, as another client, until
    one gets that number: that file, given two names, pinned and held open
    for writing, then offline the worker killed: through the descriptor
    ftruncate and pread hold, and pwrite, ftruncate, fstat and pread
    through three more switches (before: the successor restored the first
    file's node with its mirror inode number as its server's, which the
    switches kept; at the switch offline it took the new file's mirror
    object through the links index by that number, and the new file's
    descriptor answered ESTALE for good)."""
    for i in range(3):
        d = f"mq{i}"
        os.makedirs(vol.v("p", d, "d"))
        x, y = vol.v("p", d, "x"), vol.v("p", d, "y")
        with open(x, "wb") as f:
            f.write(b"x" * 5000)
        os.link(x, y)
        fd = os.open(x, os.O_RDWR)
        switch(vol, "offline")
        ino = os.stat(os.path.join(vol.cache, "mirror", "p", d, "x")).st_ino
        os.unlink(x)
        os.unlink(y)
        switch(vol, "online")
        kill_and_wait(vol)
        switch(vol, "offline")
        switch(vol, "online")
        found = made_with_number(vol, d, fd, ino)
        if found:
            break
    else:
        check(True, "a mirror's inode number after a kill: skipped, the backing gave it to"
              " no new file")
        return
    held_across_a_kill(vol, d, found, "a file given the inode number of a mirror object a"
                       " successor's node kept")


def stranded_then_nameless(vol):
    """A writer opened offline, the reconnect (the kernel writes the
    mirror's file), another file renamed over its name online, then
    offline, online, offline: each pwrite and ftruncate through it holds
    for its reads."""
    data = bytearray(os.urandom(8000))
    with open(vol.v("p", "sn-x"), "wb") as f:
        f.write(data)
    switch(vol, "offline")
    fd = os.open(vol.v("p", "sn-x"), os.O_RDWR)
    switch(vol, "online")
    with open(vol.v("p", "sn-o"), "wb") as f:
        f.write(b"other")
    os.rename(vol.v("p", "sn-o"), vol.v("p", "sn-x"))
    steps = ("offline", "online", "offline")
    eq(held_through(vol, fd, data, steps, 7000, 4000), [(to, True, True) for to in steps] + ["closed"],
       "a stranded writer renamed over online, through three switches:"
       " pwrite, ftruncate, fstat, pread, close")
    switch(vol, "online")


def dir_made_offline_across_a_kill(vol):
    """A directory made offline, held open across a kill of the worker
    offline and the reconnect: fstat, openat and a listing through it."""
    switch(vol, "offline")
    os.mkdir(vol.v("p", "dk"))
    with open(vol.v("p", "dk", "x"), "wb") as f:
        f.write(b"made offline")
    d = os.open(vol.v("p", "dk"), os.O_RDONLY | os.O_DIRECTORY)
    kill_and_wait(vol)
    switch(vol, "online")
    got = []

    def read_x():
        fd = os.open("x", os.O_RDONLY, dir_fd=d)
        try:
            return os.read(fd, 100)
        finally:
            os.close(fd)
    for what, fn in (("fstat", lambda: stat.S_ISDIR(os.fstat(d).st_mode)),
                     ("openat", read_x), ("listdir", lambda: sorted(os.listdir(d)))):
        try:
            got.append((what, fn()))
        except OSError as e:
            got.append((what, e.strerror))
    os.close(d)
    eq(got, [("fstat", True), ("openat", b"made offline"), ("listdir", ["x"])],
       "a directory made offline, held open across a kill and the reconnect")


def truncate_beside_a_stranded_reader(vol):
    """A reader of a file large enough to pass through, opened before a
    switch (the kernel reads the other tree's file), then truncate(2) of
    the name and a writer opened after it: the truncate holds for the
    reader, the view and the server (the writer joins the reader's file)."""
    size = 256 * 1024
    wrong = []
    for first in ("online", "offline"):
        name = f"r-{first}"
        path = vol.v("p", name)
        with open(path, "wb") as f:
            f.write(b"A" * size)
        if first == "offline":
            switch(vol, "offline")
        with open(path, "rb") as f:
            f.read()                # complete in the store: reads pass through
        r = os.open(path, os.O_RDONLY)
        os.pread(r, 4096, 0)
        switch(vol, "online" if first == "offline" else "offline")
        os.truncate(path, 10)
        w = os.open(path, os.O_WRONLY)
        os.pwrite(w, b"Z", 0)
        os.fsync(w)
        os.close(w)
        through_r = os.pread(r, size, 0)
        os.close(r)
        if first == "offline":
            switch(vol, "offline")
        switch(vol, "online")
        want = b"Z" + b"A" * 9
        got = (through_r, read_file(path), read_file(vol.b("p", name)))
        if got != (want, want, want):
            wrong.append((name, [(len(g), g[:3]) for g in got]))
    eq(wrong, [], "a truncate beside a reader opened before a switch, then a writer: the reader,"
       " the view and the server see it")


def writer_through_reconnects(vol):
    # Created through the view online: the kernel writes the server's file
    # directly, offline too.
    fd = os.open(vol.v("p", "pages"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    os.pwrite(fd, b"\0" * 65536, 0)
    stop = threading.Event()
    bad = []
    done = [0]

    def work():
        i = 0
        while not stop.is_set():
            page = b"PAGE%010d" % i + b"\0" * 4082
            os.pwrite(fd, page, 0)
            os.pwrite(fd, b"P" * 4096, 4096 * (1 + i % 15))
            os.fsync(fd)
            got = os.pread(fd, 4096, 0)
            if got != page:
                bad.append((i, got[:14]))
            i += 1
            done[0] = i

    th = threading.Thread(target=work)
    th.start()
    try:
        for _ in range(8):
            switch(vol, "offline")
            time.sleep(0.2)
            switch(vol, "online")
            time.sleep(0.2)
    finally:
        stop.set()
        th.join()
    os.close(fd)
    check(done[0] > 0, f"the writer wrote ({done[0]} rounds)")
    eq(bad, [], "every pread after a pwrite and fsync returned it, through eight reconnects")
    eq(read_file(vol.b("p", "pages")), read_file(vol.v("p", "pages")),
       "... and the server holds what the view does")


def sqlite_through_switches(vol, mode, kill=False):
    tag = f"{mode}{'-kill' if kill else ''}"
    path = vol.v("p", f"{tag}.sqlite")
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA journal_mode={mode}")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
    stop = threading.Event()
    errors = []
    committed = []

    def work():
        i = 0
        while not stop.is_set():
            try:
                db.execute("BEGIN")
                db.execute("INSERT INTO t(id, v) VALUES (?, ?)", (i, os.urandom(10 + i % 4000)))
                if i % 7 == 0:
                    db.execute("UPDATE t SET v = ? WHERE id = ?", (b"x" * 100, i // 2))
                db.execute("COMMIT")
                committed.append(i)
                i += 1
            except sqlite3.Error as e:
                errors.append((i, str(e)))
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                if len(errors) > 20:
                    return
                time.sleep(0.05)

    th = threading.Thread(target=work)
    th.start()
    try:
        for _ in range(8):
            time.sleep(0.3)
            switch(vol, "offline")
            time.sleep(0.3)
            if kill:
                kill_and_wait(vol)
            switch(vol, "online")
    finally:
        stop.set()
        th.join()
    eq(errors[:3], [], f"sqlite, journal_mode={mode}: no error through eight switches"
       f"{', the worker killed at each while offline' if kill else ''}"
       f" ({len(committed)} transactions)")
    try:
        ids = [r[0] for r in db.execute("SELECT id FROM t ORDER BY id")]
        ok = db.execute("PRAGMA integrity_check").fetchone()[0]
    except sqlite3.Error as e:
        ids, ok = None, str(e)
    eq(ids, committed, "... the view's database holds every committed row")
    eq(ok, "ok", "... and passes integrity_check")
    if mode == "wal":
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    srv = sqlite3.connect(vol.b("p", f"{tag}.sqlite"))
    try:
        ids = [r[0] for r in srv.execute("SELECT id FROM t ORDER BY id")]
        ok = srv.execute("PRAGMA integrity_check").fetchone()[0]
    except sqlite3.Error as e:
        ids, ok = None, str(e)
    srv.close()
    eq(ids, committed, "... the server's database holds every committed row")
    eq(ok, "ok", "... and passes integrity_check")


def main():
    require_root_fuse()
    vol = Volume("switch-apps", lease=f"{LEASE_S}s")
    os.makedirs(vol.b("p"))
    vol.start()
    try:
        vol.ctl("pin recursive", "p")
        inode_numbers(vol)
        truncate_splits(vol)
        changes_beside_a_stranded_writer(vol)
        truncate_beside_a_stranded_reader(vol)
        stranded_writer_size(vol)
        offline_writer_closed_online(vol)
        kept_by_a_successor(vol)
        linked_beside_a_stranded_writer(vol)
        utime_and_link_beside_a_stranded_writer(vol)
        renamed_over_while_open(vol)
        two_names_after_a_kill(vol)
        two_names_held_across_a_reconnect(vol)
        nameless_after_kills(vol)
        stranded_then_nameless(vol)
        names_gone_offline(vol)
        names_gone_offline(vol, kill=True)
        exchanged_name_gone_before_a_kill(vol)
        stale_number_beside_a_held_file(vol)
        mirror_number_after_a_kill(vol)
        reused_number_after_a_kill(vol)
        dir_made_offline_across_a_kill(vol)
        writer_through_reconnects(vol)
        for mode in ("delete", "truncate", "wal"):
            sqlite_through_switches(vol, mode)
        # A successor finds the file the kernel writes (the server's) again.
        for mode in ("truncate", "wal"):
            sqlite_through_switches(vol, mode, kill=True)
        st = vol.state()
        eq((st["state"], st.get("conflicts", "0")), ("online", "0"),
           "online at the end, no conflict")
    finally:
        vol.stop()
    finish()


if __name__ == "__main__":
    main()
