#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A switch between online and offline does not change what an open file is.

Files of a pinned subtree are opened (for reading, for writing, for
appending; existing files and files created by the open) on one side of a
switch and used on the other: disconnect with files open online, reconnect
with files open offline, and both in turn with the same descriptors.  Every
write acknowledged through such a descriptor ends on the server, in place
and once; every read returns what the last write put there; the view and
the server agree at the end.  A file of two names whose other name another
file was renamed over online, written online, reads that write offline.
A file of two names whose second name the view never looked up, the first
renamed over online while a descriptor holds it: offline the descriptor
and the second name write and read it, and the server has it after the
reconnect.
Seeded random rounds (FCACHE_SWITCH_SEED,
default "1 2 3") interleave opens, writes, appends, reads, closes and
switches on a handful of files, every read checked against a model.
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (RENAME_EXCHANGE, Volume, check, eq, finish, read_direct,  # noqa: E402
                     read_file, renameat2, require_root_fuse, write_file)


def switch(vol, to):
    q = vol.ctl("disconnect" if to == "offline" else "reconnect")
    eq(q["state"], to, f"{'disconnect' if to == 'offline' else 'reconnect'}: state={to}")


def fixed_cases(vol):
    # opened offline (existing file, written in place), used after the reconnect
    fd = os.open(vol.v("p", "a"), os.O_WRONLY)
    os.pwrite(fd, b"OFF1", 0)
    switch(vol, "online")
    os.pwrite(fd, b"ON2", 10)
    os.fsync(fd)
    os.close(fd)
    want = b"OFF1" + b"a" * 6 + b"ON2" + b"a" * (100 - 13)
    eq(read_file(vol.b("p", "a")), want,
       "a file opened offline and written after the reconnect: both writes on the server")
    eq(read_file(vol.v("p", "a")), want, "... and the view reads them")

    # created offline, appended to after the reconnect
    switch(vol, "offline")
    fd = os.open(vol.v("p", "new"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, b"one\n")
    switch(vol, "online")
    os.write(fd, b"two\n")
    os.close(fd)
    eq(read_file(vol.b("p", "new")), b"one\ntwo\n",
       "a file created offline, appended to after the reconnect: the server has both lines once")

    # opened online, written across a disconnect and a reconnect
    fd = os.open(vol.v("p", "b"), os.O_RDWR)
    os.pwrite(fd, b"X", 0)
    switch(vol, "offline")
    os.pwrite(fd, b"Y", 1)
    eq(os.pread(fd, 2, 0), b"XY", "opened online, written offline: the same descriptor reads both")
    switch(vol, "online")
    os.pwrite(fd, b"Z", 2)
    eq(os.pread(fd, 3, 0), b"XYZ", "... and after the reconnect all three")
    os.close(fd)
    eq(read_file(vol.b("p", "b"))[:3], b"XYZ", "... and the server has all three")

    # opened offline, written online without a flush, then offline again
    switch(vol, "offline")
    fd = os.open(vol.v("p", "c"), os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"1")
    switch(vol, "online")
    os.write(fd, b"2")
    switch(vol, "offline")
    os.close(fd)
    switch(vol, "online")
    eq(read_file(vol.b("p", "c")), b"c" * 100 + b"12",
       "opened offline, written online without a flush, closed after the next disconnect:"
       " the server has every write")

    # a writer opened offline kept open, and a second writer opened after the
    # reconnect (each writes what the kernel passes to the other tree's file)
    switch(vol, "offline")
    fd1 = os.open(vol.v("p", "a"), os.O_WRONLY)
    os.pwrite(fd1, b"W1", 20)
    switch(vol, "online")
    try:
        fd2 = os.open(vol.v("p", "a"), os.O_WRONLY)
    except OSError as e:
        fd2 = None
        check(False, f"a second writer opened online while one opened offline is open: {e}")
    if fd2 is not None:
        os.pwrite(fd2, b"W2", 30)
        os.close(fd2)
        os.pwrite(fd1, b"W3", 40)
        os.close(fd1)
        got = read_file(vol.b("p", "a"))
        eq((got[20:22], got[30:32], got[40:42]), (b"W1", b"W2", b"W3"),
           "a second writer opened online beside one opened offline: the server has"
           " every write of both")
        eq(read_file(vol.v("p", "a")), got, "... and the view reads the same")
    # the other way: opened online, a second writer after the disconnect
    fd1 = os.open(vol.v("p", "b"), os.O_WRONLY)
    os.pwrite(fd1, b"V1", 20)
    switch(vol, "offline")
    try:
        fd2 = os.open(vol.v("p", "b"), os.O_WRONLY)
    except OSError as e:
        fd2 = None
        check(False, f"a second writer opened offline while one opened online is open: {e}")
    if fd2 is not None:
        os.pwrite(fd2, b"V2", 30)
        os.close(fd2)
        os.close(fd1)
        switch(vol, "online")
        got = read_file(vol.b("p", "b"))
        eq((got[20:22], got[30:32]), (b"V1", b"V2"),
           "a second writer opened offline beside one opened online: the server has"
           " both writes after the reconnect")
    else:
        os.close(fd1)
        switch(vol, "online")

    # a reader opened offline reads what an online writer puts there later
    switch(vol, "offline")
    rfd = os.open(vol.v("p", "c"), os.O_RDONLY)
    switch(vol, "online")
    write_file(vol.v("p", "c"), b"fresh")
    eq(os.pread(rfd, 100, 0), b"fresh", "a reader opened offline sees a write made after the reconnect")
    os.close(rfd)

    created_across_switches(vol)
    renamed_over_one_name(vol)
    written_after_its_other_name_went(vol)
    other_name_never_looked_up(vol)


def written_after_its_other_name_went(vol):
    """A file of two names, written offline and given another file's name
    by an exchange (the node the kernel knows it by takes that name), the
    reconnect, another file renamed over that name online, then a write
    online by its first name: after a disconnect it reads that write, with
    one link (before: the switch found its node's mirror object by the
    handle it had offline, the old shared object only the links index
    still held, and served its old bytes with nlink 0)."""
    data = b"two names, one left " * 300
    write_file(vol.b("p", "w"), data)
    os.link(vol.b("p", "w"), vol.b("p", "w.alias"))
    write_file(vol.b("p", "w.other"), b"other " * 100)
    write_file(vol.b("p", "w.t"), b"renamed over " * 100)
    eq(vol.ctl("pin recursive", "p").get("mirrored"), "yes", "pin recursive p again: mirrored")
    switch(vol, "offline")
    fd = os.open(vol.v("p", "w"), os.O_WRONLY)
    os.pwrite(fd, b"OFF", 0)
    os.close(fd)
    data = b"OFF" + data[3:]
    renameat2(vol.v("p", "w.alias"), vol.v("p", "w.other"), RENAME_EXCHANGE)
    switch(vol, "online")
    os.rename(vol.v("p", "w.t"), vol.v("p", "w.other"))
    fd = os.open(vol.v("p", "w"), os.O_WRONLY)
    os.pwrite(fd, b"NEW", 500)
    os.close(fd)
    data = data[:500] + b"NEW" + data[503:]
    switch(vol, "offline")
    eq((read_direct(vol.v("p", "w")), os.stat(vol.v("p", "w")).st_nlink), (data, 1),
       "its other name renamed over online, written online: offline it reads the write, one link")
    switch(vol, "online")
    eq(read_file(vol.b("p", "w")), data, "... and the server has it")


def other_name_never_looked_up(vol):
    """A file of two names made on the server, the second never looked up
    through the view (the node table knows the first only), another file
    renamed over the first online while a descriptor holds the file: after
    the disconnect a write through that descriptor, and one through the
    second name opened offline (read back through the descriptor), are
    what the server has under the second name after the reconnect, no
    conflict (before: the node found no counterpart offline, the
    descriptor kept the server's file, and its write failed with EIO: the
    log could not name it).  Also with the second name in another
    directory (before: the node found its object, and the write through
    the descriptor still failed with EIO: the log looked for a name in the
    node's directory only)."""
    for sub, access in (("", os.O_RDWR), ("", os.O_RDONLY), ("nl", os.O_RDWR), ("nl", os.O_RDONLY)):
        held = "written" if access == os.O_RDWR else "read"
        tag = f"nl{int(bool(sub))}{'w' if access == os.O_RDWR else 'r'}"
        x, o, y = ("p", f"{tag}-x"), ("p", f"{tag}-o"), ("p", sub, f"{tag}-y")
        what = f"{'another' if sub else 'its'} directory, the descriptor {held}"
        data = bytearray(b"made on the server " * 400)
        os.makedirs(vol.b("p", sub), exist_ok=True)
        write_file(vol.b(*x), bytes(data))
        os.link(vol.b(*x), vol.b(*y))
        write_file(vol.b(*o), b"the other file")
        eq(vol.ctl("pin recursive", "p").get("mirrored"), "yes", "pin recursive p again: mirrored")
        fd = os.open(vol.v(*x), access)
        os.rename(vol.v(*o), vol.v(*x))
        switch(vol, "offline")
        try:
            if access == os.O_RDWR:
                os.pwrite(fd, b"HELD", 100)
                data[100:104] = b"HELD"
            w = os.open(vol.v(*y), os.O_WRONLY)
            os.pwrite(w, b"NAMED", 200)
            os.close(w)
            data[200:205] = b"NAMED"
            got = (os.pread(fd, 20000, 0) == data, read_direct(vol.v(*y)) == data)
        except OSError as e:
            got = f"error {e.strerror}"
        os.close(fd)
        eq(got, (True, True), f"the second name in {what}, the first renamed over online:"
           " offline the descriptor and the second name read every write")
        switch(vol, "online")
        eq((read_file(vol.b(*y)) == data, read_file(vol.v(*y)) == data, read_file(vol.b(*x))),
           (True, True, b"the other file"),
           f"... {what}: the server has them under the second name, the view reads them")
        eq(vol.state().get("conflicts", "0"), "0", f"... {what}: no conflict")


def renamed_over_one_name(vol):
    """A file of two names, open by the one another file is renamed over
    offline: after the reconnect the descriptor and the other name are still
    that file, never the one renamed there (the log knows both)."""
    for edit in (False, True):
        what = "edited offline" if edit else "not edited"
        two, alias, other = f"two{int(edit)}", f"two{int(edit)}.alias", f"other{int(edit)}"
        data = b"two names " * 400
        write_file(vol.b("p", two), data)
        os.link(vol.b("p", two), vol.b("p", alias))
        write_file(vol.b("p", other), b"the other file " * 900)
        eq(vol.ctl("pin recursive", "p").get("mirrored"), "yes", "pin recursive p again: mirrored")
        fd = os.open(vol.v("p", two), os.O_RDWR)
        switch(vol, "offline")
        if edit:
            os.pwrite(fd, b"EDIT", 0)
            data = b"EDIT" + data[4:]
        os.rename(vol.v("p", other), vol.v("p", two))
        switch(vol, "online")
        try:
            got = os.pread(fd, 20000, 0)
            size = os.fstat(fd).st_size
        except OSError as e:
            got = size = f"error {e.strerror}"
        os.close(fd)
        if edit:
            # The replay made its edited bytes a new server object (its name
            # had gone, one link was left): no longer the descriptor's.
            check(got in (data, "error Stale file handle"),
                  f"{what}, open by the name another file was renamed over: after the"
                  f" reconnect the descriptor reads its own bytes or ESTALE, never the other"
                  f" file's (got {got[:20] if isinstance(got, bytes) else got})")
        else:
            eq((got, size), (data, len(data)),
               f"{what}, open by the name another file was renamed over: after the reconnect"
               " the descriptor reads that file, and fstat gives its size")
        eq(read_file(vol.v("p", alias)), data, f"... {what}: its other name reads it")
        eq(read_file(vol.v("p", two)), b"the other file " * 900,
           f"... {what}: the name renamed over reads the other file")
        eq(read_file(vol.b("p", alias)), data, f"... {what}: as the server has it")


def created_across_switches(vol):
    """Files created online and open across switches, written where the
    daemon does not see the writes (a created file passes through): offline
    the name is there, and the bytes the offline mirror serves are the last
    ones closed."""
    data = b"created and written " * 3500
    # created, nothing written yet, at the disconnect
    fd = os.open(vol.v("p", "new1"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    switch(vol, "offline")
    check(os.path.lexists(vol.v("p", "new1")),
          "a file created online and open at the disconnect is there offline")
    os.write(fd, data)
    os.close(fd)
    eq(read_file(vol.v("p", "new1")), data, "... and reads what was written offline")
    switch(vol, "online")
    eq(read_file(vol.b("p", "new1")), data, "... which the server has after the reconnect")
    # created online, open across a disconnect and a reconnect, written and
    # closed online: the mirror takes it at the close
    fd = os.open(vol.v("p", "new2"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    switch(vol, "offline")
    switch(vol, "online")
    os.write(fd, data)
    os.close(fd)
    switch(vol, "offline")
    eq(read_file(vol.v("p", "new2")), data,
       "a file created online, open across a disconnect and a reconnect, written and closed"
       " online: offline it reads those bytes")
    switch(vol, "online")
    # the same file written again online through a new descriptor, across switches
    fd = os.open(vol.v("p", "new2"), os.O_WRONLY | os.O_TRUNC)
    switch(vol, "offline")
    switch(vol, "online")
    os.write(fd, data[::-1])
    os.close(fd)
    switch(vol, "offline")
    eq(read_file(vol.v("p", "new2")), data[::-1],
       "rewritten online through a descriptor opened before a disconnect and a reconnect:"
       " offline it reads the new bytes")
    switch(vol, "online")
    eq(read_file(vol.b("p", "new2")), data[::-1], "... as the server does")


def random_round(vol, seed):
    rnd = random.Random(seed)
    names = [f"r{i}" for i in range(4)]
    model = {}
    for n in names:
        model[n] = bytearray(rnd.randbytes(rnd.randrange(1, 5000)))
        write_file(vol.v("p", n), bytes(model[n]))
    fds = {}
    state = "online"
    bad = []
    for step in range(120):
        op = rnd.choice(["open", "write", "append", "read", "close", "switch"])
        n = rnd.choice(names)
        if os.environ.get("FCACHE_SWITCH_TRACE") and (n == os.environ.get("FCACHE_SWITCH_TRACE") or op == "switch"):
            print(f"# step {step}: {op} {n} ({state}, open: {sorted(fds)})")
        if op == "open" and n not in fds:
            fds[n] = os.open(vol.v("p", n), os.O_RDWR)
        elif op == "write" and n in fds:
            off = rnd.randrange(len(model[n]) + 1)
            data = rnd.randbytes(rnd.randrange(1, 3000))
            os.pwrite(fds[n], data, off)
            model[n][off:off + len(data)] = data
        elif op == "append" and n in fds:
            data = rnd.randbytes(rnd.randrange(1, 3000))
            os.pwrite(fds[n], data, len(model[n]))
            model[n] += data
        elif op == "read" and n in fds:
            got = os.pread(fds[n], len(model[n]) + 10, 0)
            if got != bytes(model[n]):
                bad.append(f"step {step}: read {n} ({state}): {len(got)} bytes, want {len(model[n])}")
        elif op == "close" and n in fds:
            os.close(fds.pop(n))
        elif op == "switch":
            state = "offline" if state == "online" else "online"
            q = vol.ctl("disconnect" if state == "offline" else "reconnect")
            if q.get("state") != state:
                bad.append(f"step {step}: switch to {state}: {q.get('state')} {q.get('_err')}")
                break
    for fd in fds.values():
        os.close(fd)
    if state == "offline":
        vol.ctl("reconnect")
    if os.environ.get("FCACHE_SWITCH_TRACE"):
        for n in names:
            srv = read_file(vol.b("p", n))
            if srv != bytes(model[n]):
                diff = next((i for i in range(min(len(srv), len(model[n]))) if srv[i] != model[n][i]), None)
                print(f"# {n}: server {len(srv)} bytes, model {len(model[n])}, first difference at {diff}")
    eq(bad, [], f"random round {seed}: every read through a descriptor kept across switches is right")
    eq({n: read_file(vol.b("p", n)) == bytes(model[n]) for n in names}, {n: True for n in names},
       f"random round {seed}: the server has every acknowledged write")
    eq({n: read_file(vol.v("p", n)) == bytes(model[n]) for n in names}, {n: True for n in names},
       f"random round {seed}: so does the view")
    check(int(vol.state().get("conflicts", "0") or 0) == 0, f"random round {seed}: no conflict")


def main():
    require_root_fuse()
    vol = Volume("switch", lease="1s")
    os.makedirs(vol.b("p"))
    for n in "abc":
        write_file(vol.b("p", n), n.encode() * 100)
    vol.start()
    try:
        eq(vol.ctl("pin recursive", "p").get("mirrored"), "yes", "pin recursive p: mirrored")
        switch(vol, "offline")
        fixed_cases(vol)
        for seed in [int(x) for x in os.environ.get("FCACHE_SWITCH_SEED", "1 2 3").split()]:
            random_round(vol, seed)
    finally:
        vol.cleanup()
    finish()


if __name__ == "__main__":
    main()
