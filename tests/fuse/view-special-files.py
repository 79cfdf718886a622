#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Names that stop being regular files under the daemon never stall it.

The daemon opens names in trees others change: the server's (any user of
it) and the mirror (applications, through the view).  A FIFO's open waits
for a writer, so a FIFO put where the daemon expects a file it cached (a
container, a pinned file) used to stop a worker thread for good, with the
locks it held: found by a POSIX conformance suite run while the volume was
switched offline and online (its files replaced by FIFOs of the same
names), where every later create through the view waited behind it.

Cases, each bounded by a hang-only limit on the control call:
  - a pinned, cached file renamed and a FIFO made under its old name
    through the view online, then a disconnect and a reconnect (the resync
    checks every container);
  - a FIFO renamed over a pinned, cached file, the same;
  - a file replaced by a FIFO on the server, behind the view, then
    the pin walked again and a reconnect;
  - a FIFO made offline in a pinned directory, replayed to the server;
  - a file created online and still open at a disconnect is there offline;
  - a file being written at a disconnect, then replaced by a FIFO or
    removed offline, reconnects without a conflict;
  - files replaced by FIFOs by a thread while the volume is switched
    offline and back several times;
and after each, a create through the view still works and the FIFO is a
FIFO on both sides.
"""
import os
import stat
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import Volume, check, eq, finish, read_file, require_root_fuse, write_file  # noqa: E402

HANG = 60       # seconds: only a hang takes this long


def is_fifo(path):
    return stat.S_ISFIFO(os.lstat(path).st_mode)


def still_creates(vol, name):
    write_file(vol.v("p", name), b"after\n")
    eq(read_file(vol.v("p", name)), b"after\n", f"a create through the view still works ({name})")


def replaced_through_view(vol):
    write_file(vol.b("p", "f1"), b"one\n" * 1000)
    vol.ctl("pin recursive", "p", timeout=HANG)
    eq(read_file(vol.v("p", "f1")), b"one\n" * 1000, "the pinned file reads")
    # Moved away, its old name made a FIFO: what the store knew by that name.
    os.rename(vol.v("p", "f1"), vol.v("p", "f1.moved"))
    os.mkfifo(vol.v("p", "f1"), 0o644)
    q = vol.ctl("disconnect", timeout=HANG)
    eq(q["state"], "offline", "disconnect with a FIFO where a cached file was")
    check(is_fifo(vol.v("p", "f1")), "offline, the name is a FIFO")
    q = vol.ctl("reconnect", timeout=HANG)
    eq((q["state"], q["conflicts"]), ("online", "0"),
       "reconnect (the resync looks at every container) answers")
    check(is_fifo(vol.b("p", "f1")) and is_fifo(vol.v("p", "f1")), "a FIFO on both sides")
    # A FIFO renamed over the cached file.
    write_file(vol.b("p", "f5"), b"five\n" * 1000)
    vol.ctl("pin recursive", "p", timeout=HANG)
    eq(read_file(vol.v("p", "f5")), b"five\n" * 1000, "the pinned file reads")
    os.mkfifo(vol.v("p", "fifo5"), 0o644)
    os.rename(vol.v("p", "fifo5"), vol.v("p", "f5"))
    vol.ctl("disconnect", timeout=HANG)
    q = vol.ctl("reconnect", timeout=HANG)
    eq((q["state"], q["conflicts"]), ("online", "0"),
       "reconnect with a FIFO renamed over a cached file answers")
    check(is_fifo(vol.b("p", "f5")), "the FIFO renamed over the file is on the server")
    eq(read_file(vol.v("p", "f1.moved")), b"one\n" * 1000, "the moved file reads")
    still_creates(vol, "c1")


def replaced_on_server(vol):
    write_file(vol.b("p", "f2"), b"two\n" * 1000)
    vol.ctl("pin recursive", "p", timeout=HANG)
    eq(read_file(vol.v("p", "f2")), b"two\n" * 1000, "the pinned file reads")
    os.unlink(vol.b("p", "f2"))
    os.mkfifo(vol.b("p", "f2"), 0o644)
    q = vol.ctl("pin recursive", "p", ok=False, timeout=HANG)
    check(q["_rc"] in (0, 1), f"the pin walked again answers ({q['_err'] or 'ok'})")
    vol.ctl("disconnect", timeout=HANG)
    q = vol.ctl("reconnect", timeout=HANG)
    eq(q["state"], "online", "reconnect after the server's file became a FIFO answers")
    check(is_fifo(vol.v("p", "f2")), "the view shows the server's FIFO")
    still_creates(vol, "c2")


def made_offline(vol):
    vol.ctl("disconnect", timeout=HANG)
    os.mkfifo(vol.v("p", "f3"), 0o600)
    write_file(vol.v("p", "f4"), b"four\n")
    os.unlink(vol.v("p", "f4"))
    os.mkfifo(vol.v("p", "f4"), 0o600)
    q = vol.ctl("reconnect", timeout=HANG)
    eq((q["state"], q["conflicts"]), ("online", "0"), "reconnect of FIFOs made offline")
    check(is_fifo(vol.b("p", "f3")) and is_fifo(vol.b("p", "f4")),
          "the FIFOs made offline are FIFOs on the server")
    still_creates(vol, "c3")


def written_across_disconnect_then_replaced(vol):
    """A file created online and still being written at a disconnect: the
    kernel passes its writes through to the server's file, and the offline
    log takes them from there (a record in doubt).  Then, offline, a FIFO is
    renamed over it or it is removed: the reconnect finds the server's file
    holding those writes and takes them as this client's, not as a change
    on the server (the rename was a delete-edit conflict, the FIFO's
    temporary name left on the server and EEXIST or ECONFLICT there)."""
    for i, (before, how) in enumerate(((0, "rename"), (1000, "rename"), (0, "unlink"))):
        name, tmp = vol.v("p", f"wd{i}"), vol.v("p", f"wd{i}.fifo")
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"w" * before)
        vol.ctl("disconnect", timeout=HANG)
        os.write(fd, b"w" * (70000 - before))
        os.close(fd)
        eq(read_file(name), b"w" * 70000, f"{how} ({before} bytes online): offline it reads whole")
        if how == "rename":
            os.mkfifo(tmp, 0o644)
            os.rename(tmp, name)
        else:
            os.unlink(name)
        q = vol.ctl("reconnect", timeout=HANG)
        eq((q["state"], q["conflicts"]), ("online", "0"),
           f"{how} ({before} bytes online): reconnect without a conflict")
        base = os.path.basename(tmp)
        eq((os.path.lexists(tmp), os.path.lexists(vol.b("p", base)),
            os.path.lexists(os.path.join(vol.cache, "mirror", "p", base))), (False, False, False),
           f"{how} ({before} bytes online): the temporary name is nowhere")
        if how == "rename":
            check(is_fifo(vol.b("p", f"wd{i}")) and is_fifo(name), "the FIFO is on both sides")
            os.mkfifo(tmp, 0o644)       # the temporary name is free again
            os.unlink(tmp)
        else:
            check(not os.path.lexists(vol.b("p", f"wd{i}")), "the removal reached the server")


def churn_across_reconnects(vol, rounds=6):
    """Files made, read whole (containers) and replaced by FIFOs renamed
    over them, by a thread, while the volume is switched offline and back:
    the reconnect's replay and resync meet names turning into FIFOs under
    them, and a disconnect meets files created and being written: each is
    there offline, with the bytes written, and a FIFO renamed over one of
    them offline leaves its temporary name nowhere."""
    stop = threading.Event()
    errors = []

    def churn():
        i = 0
        while not stop.is_set():
            name, tmp = vol.v("p", f"churn{i % 50}"), vol.v("p", f"churn{i % 50}.fifo")
            op = "unlink"
            try:
                if os.path.lexists(name):
                    os.unlink(name)
                op = "create"
                write_file(name, b"c" * 70000)
                op = "read"
                got = read_file(name)
                if got != b"c" * 70000:
                    errors.append(f"{name}: read {len(got)} bytes ({got.count(b'c')} of them"
                                  f" 'c'), not the 70000 written (state {vol.state()['state']})")
                op = "mkfifo"
                os.mkfifo(tmp, 0o644)
                op = "rename"
                os.rename(tmp, name)
            except OSError as e:
                path = tmp if op == "mkfifo" else name
                base = os.path.basename(path)
                errors.append(f"{op} {path}: {e} (state {vol.state()['state']}; on the"
                              f" server: {os.path.lexists(vol.b('p', base))}, in the"
                              f" mirror: {os.path.lexists(os.path.join(vol.cache, 'mirror', 'p', base))},"
                              f" in the view now: {os.path.lexists(name)})")
            time.sleep(0.001)
            i += 1

    t = threading.Thread(target=churn, daemon=True)
    t.start()
    answered = 0
    for _ in range(rounds):
        vol.ctl("disconnect", timeout=HANG)
        q = vol.ctl("reconnect", ok=False, timeout=HANG)
        answered += q["_rc"] == 0 or "busy" in q["_err"].lower()
    stop.set()
    t.join(HANG)
    check(not t.is_alive(), "the churning thread ends (no call through the view stalled)")
    eq(answered, rounds, "every reconnect answered")
    for e in errors:
        print("# " + e)
    eq(len(errors), 0, "no call of the churning thread failed")
    if vol.state()["state"] != "online":
        eq(vol.ctl("reconnect", timeout=HANG)["state"], "online", "online at the end")
    still_creates(vol, "c4")


def created_open_across_disconnect(vol):
    """A file created and written online, still open at a disconnect: the
    mirror takes it at the switch (not only at its close), so offline its
    name is there with what was written; the writes after the switch are
    logged and reach the server at the reconnect."""
    fd = os.open(vol.v("p", "open-new"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b"online\n")
    vol.ctl("disconnect", timeout=HANG)
    check(os.path.lexists(vol.v("p", "open-new")),
          "offline, a file created online and still open is there")
    eq(read_file(vol.v("p", "open-new")), b"online\n", "... with what was written online")
    os.write(fd, b"offline\n")
    os.close(fd)
    q = vol.ctl("reconnect", timeout=HANG)
    eq((q["state"], q["conflicts"]), ("online", "0"), "reconnect after it")
    eq(read_file(vol.b("p", "open-new")), b"online\noffline\n",
       "the server has both writes, once")


def main():
    require_root_fuse()
    vol = Volume("special", lease="1s")
    os.makedirs(vol.b("p"))
    vol.start()
    replaced_through_view(vol)
    replaced_on_server(vol)
    made_offline(vol)
    created_open_across_disconnect(vol)
    written_across_disconnect_then_replaced(vol)
    churn_across_reconnects(vol)
    vol.stop()
    finish()


if __name__ == "__main__":
    main()
