#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Disconnected operation of a volume, end to end through a real FUSE view:
pin a subtree, disconnect, read and change it offline, change the server
meanwhile, look at the reintegration dry run, reconnect, and check that the
server holds exactly what a model says (offline changes applied, a text file
edited on both sides merged, overlapping edits kept as a conflict with the
server's version in place).  Then the same after a kill -9 of the worker
while offline: the successor starts offline and loses no acknowledged edit.
"""
import errno
import os
import random
import stat
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, err_of, finish, getdents, rand_bytes,  # noqa: E402
                     read_file, renameat2, require_root_fuse, short, tree, wait_for,
                     write_file)

LINES = [f"line {i}\n" for i in range(1, 21)]


def text(lines):
    return "".join(lines).encode()


def main():
    require_root_fuse()
    vol = Volume("offline", lease="1s")
    b = vol.b
    os.makedirs(b("proj", "sub"))
    os.makedirs(b("elsewhere"))
    write_file(b("proj", "a.txt"), b"alpha\n")
    write_file(b("proj", "b.txt"), b"bravo\n")
    write_file(b("proj", "sub", "c.bin"), os.urandom(300000))
    write_file(b("proj", "notes.txt"), text(LINES))
    write_file(b("proj", "clash.txt"), text(LINES))
    write_file(b("proj", "gone.txt"), b"to be deleted offline\n")
    os.symlink("a.txt", b("proj", "link"))
    os.chmod(b("proj", "b.txt"), 0o640)
    write_file(b("elsewhere", "x"), b"not pinned\n")
    vol.start()
    v = vol.v

    q = vol.ctl("pin recursive", "proj")
    eq(q.get("mirrored"), "yes", "pin recursive: the subtree is mirrored for offline use")
    eq(vol.state()["state"], "online", "query state: online before the disconnect")
    write_file(v("proj", "a.txt"), b"alpha, edited online\n")
    os.mkdir(v("proj", "made-online"))

    # ---- offline
    expected_offline = tree(b("proj"))
    q = vol.ctl("disconnect")
    eq(q["state"], "offline", "disconnect answers state=offline")
    eq(vol.state()["state"], "offline", "query state: offline")
    eq(tree(v("proj")), expected_offline,
       "offline, the pinned subtree reads exactly as the server had it (names, modes, content,"
       " symlinks, the edit made online just before)")
    eq(os.stat(v("proj", "a.txt")).st_ino, os.stat(b("proj", "a.txt")).st_ino,
       "offline, inode numbers are the server's")
    eq(err_of(lambda: os.stat(v("proj", "no-such"))), errno.ENOENT,
       "a name a complete (pinned) directory lacks is ENOENT")
    eq(err_of(lambda: read_file(v("elsewhere", "x"))), errno.EHOSTDOWN,
       "an object outside the pins is EHOSTDOWN offline (never ENOENT: it may exist)")
    eq(vol.ctl("pin recursive", "proj", ok=False)["_rc"] != 0, True,
       "pin is refused offline (it needs the server)")

    # Offline changes, each acknowledged (close) before the next.
    write_file(v("proj", "a.txt"), b"alpha, edited offline\n")
    write_file(v("proj", "new.txt"), b"created offline\n")
    os.mkdir(v("proj", "newdir"))
    write_file(v("proj", "newdir", "inner"), b"inner\n")
    os.unlink(v("proj", "b.txt"))
    os.rename(v("proj", "sub", "c.bin"), v("proj", "sub", "c2.bin"))
    os.chmod(v("proj", "new.txt"), 0o600)
    write_file(v("proj", "tmpfile"), b"scratch\n")
    os.unlink(v("proj", "tmpfile"))
    os.symlink("new.txt", v("proj", "link2"))
    os.link(v("proj", "new.txt"), v("proj", "hardlink"))
    write_file(v("proj", "replacement"), b"renamed over the symlink\n")
    os.truncate(v("proj", "sub", "c2.bin"), 1000)
    os.setxattr(v("proj", "new.txt"), "user.tag", b"offline")
    os.rename(v("proj", "replacement"), v("proj", "link"))     # replaces the symlink
    mine = list(LINES)
    mine[0] = "line 1, mine\n"
    # An editor's save: a new file renamed over the old one (sed -i, vim, ...).
    write_file(v("proj", ".notes.txt.swp"), text(mine))
    os.rename(v("proj", ".notes.txt.swp"), v("proj", "notes.txt"))
    os.unlink(v("proj", "gone.txt"))           # the server edits it meanwhile
    clash_mine = list(LINES)
    clash_mine[4] = "line 5, mine\n"
    write_file(v("proj", ".clash.tmp"), text(clash_mine))
    os.rename(v("proj", ".clash.tmp"), v("proj", "clash.txt"))
    eq(read_file(v("proj", "a.txt")), b"alpha, edited offline\n",
       "offline edits read back at once")
    eq(sorted(os.listdir(v("proj"))),
       sorted(["a.txt", "new.txt", "newdir", "sub", "notes.txt", "clash.txt", "link", "link2",
               "made-online", "hardlink"]), "offline listing shows the offline changes")
    eq(os.stat(v("proj", "new.txt")).st_nlink, 2, "offline hard link: two links")
    eq(os.getxattr(v("proj", "new.txt"), "user.tag"), b"offline", "offline xattr reads back")
    check(not any(n.startswith("trusted.fcache") for n in os.listxattr(v("proj", "new.txt"))),
          "the mirror's own xattrs are not listed")
    eq(read_file(b("proj", "a.txt")), b"alpha, edited online\n",
       "offline, the server is not touched")

    # Meanwhile on the server.
    theirs = list(LINES)
    theirs[15] = "line 16, theirs\n"
    write_file(b("proj", "notes.txt"), text(theirs))
    clash_theirs = list(LINES)
    clash_theirs[4] = "line 5, theirs\n"
    write_file(b("proj", "clash.txt"), text(clash_theirs))
    write_file(b("proj", "server-new.txt"), b"from the server\n")
    write_file(b("proj", "gone.txt"), b"edited on the server\n")

    dry = vol.ctl("query reintegration")
    lines = dry["_lines"]
    check(any("outcome=conflict" in ln and "clash.txt" in ln for ln in lines),
          "query reintegration: clash.txt would conflict")
    check(any("outcome=merge" in ln and "notes.txt" in ln for ln in lines),
          "query reintegration: notes.txt would merge")
    check(not any("tmpfile" in ln for ln in lines),
          "query reintegration: a file created and removed offline left no record")
    eq(read_file(b("proj", "a.txt")), b"alpha, edited online\n",
       "the dry run changes nothing on the server")
    check(int(vol.state()["pending"]) > 0, "query state: pending records while offline")

    # ---- reconnect
    mirrored = {n: os.stat(os.path.join(vol.cache, "mirror", "proj", *n.split("/"))).st_ino
                for n in ("a.txt", "newdir/inner")}
    q = vol.ctl("reconnect")
    eq(q["state"], "online", "reconnect answers state=online")
    eq({n: os.stat(os.path.join(vol.cache, "mirror", "proj", *n.split("/"))).st_ino
        for n in mirrored}, mirrored,
       "files edited or made offline keep their mirror copy (it already holds the replayed"
       " bytes: it takes the server's identity, it is not copied again)")
    check("trusted.fcache.base" in os.listxattr(os.path.join(vol.cache, "mirror", "proj",
                                                             "newdir", "inner")),
          "a file made offline has the server identity in the mirror after reconnect")
    eq((q["conflicts"], q["merged"]), ("2", "1"),
       "reconnect: two conflicts (overlapping edits, delete vs edit), one clean merge")
    merged = list(LINES)
    merged[0] = "line 1, mine\n"
    merged[15] = "line 16, theirs\n"
    model = dict(expected_offline)
    model.update({
        "a.txt": ("file", 0o644, b"alpha, edited offline\n"),
        "new.txt": ("file", 0o600, b"created offline\n"),
        "newdir": ("dir", 0o755, None),
        "newdir/inner": ("file", 0o644, b"inner\n"),
        "sub/c2.bin": ("file", 0o644, expected_offline["sub/c.bin"][2][:1000]),
        "hardlink": ("file", 0o600, b"created offline\n"),
        "link": ("file", 0o644, b"renamed over the symlink\n"),
        "notes.txt": ("file", 0o644, text(merged)),
        "clash.txt": ("file", 0o644, text(clash_theirs)),
        "server-new.txt": ("file", 0o644, b"from the server\n"),
        "link2": ("link", 0, "new.txt"),
        "gone.txt": ("file", 0o644, b"edited on the server\n"),
    })
    del model["b.txt"]
    del model["sub/c.bin"]
    eq(tree(b("proj")), model,
       "after reconnect the server holds exactly the model: offline changes applied, the"
       " both-sides text edit merged, the overlapping edit's server version kept")
    check("gone.txt" in os.listdir(v("proj")),
          "a structurally conflicted file is still listed (delete vs edit)")
    eq(err_of(lambda: os.stat(v("proj", "gone.txt"))), errno.EUCLEAN,
       "but using it fails with FCACHE_ECONFLICT (EUCLEAN)")
    seen = tree(v("proj"))
    model_view = dict(model, **{"gone.txt": ("conflict", 0, None)})
    eq({k: seen.get(k) for k in set(seen) | set(model_view) if seen.get(k) != model_view.get(k)},
       {},
       "and the view shows the same (differences listed)")
    eq(os.stat(b("proj", "new.txt")).st_ino, os.stat(b("proj", "hardlink")).st_ino,
       "the offline hard link is a hard link on the server")
    eq(os.getxattr(b("proj", "new.txt"), "user.tag"), b"offline", "the offline xattr reached the server")
    eq(vol.state()["conflicts"], "2", "query state: the conflicts are kept")
    ids = [ln.split("=", 1)[1].split() for ln in vol.ctl("query conflicts")["_lines"]
           if ln.startswith("conflict=")]
    gone = [c[0] for c in ids if c[2] == "proj/gone.txt"]
    eq([c[1] for c in ids if c[2] == "proj/gone.txt"], ["delete-edit"],
       "query conflicts: gone.txt is a delete-edit conflict")
    eq([c[1] for c in ids if c[2] == "proj/clash.txt"], ["content"],
       "query conflicts: clash.txt (saved offline through a rename) is a content conflict")
    vol.ctl(f"resolve {gone[0]} remote")
    eq(read_file(v("proj", "gone.txt")), b"edited on the server\n",
       "resolved (take remote): the file is usable again")

    # ---- a crash while offline
    vol.ctl("disconnect")
    fd = os.open(v("proj", "a.txt"), os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"written offline, fsynced\n")
    os.fsync(fd)
    old = vol.kill_worker()
    vol.wait_new_worker(old)
    os.close(fd)
    eq(vol.state()["state"], "offline", "after kill -9 offline, the successor starts offline")
    eq(read_file(v("proj", "a.txt")), b"written offline, fsynced\n",
       "the fsynced offline edit survived kill -9")
    write_file(v("proj", "after-crash"), b"after the crash\n")
    q = vol.ctl("reconnect")
    eq(q["state"], "online", "reconnect after the crash")
    eq(read_file(b("proj", "a.txt")), b"written offline, fsynced\n",
       "the fsynced edit reached the server once")
    eq(read_file(b("proj", "after-crash")), b"after the crash\n",
       "an edit made after the crash reached the server")

    # ---- the mirror follows the server again
    write_file(b("proj", "later.txt"), b"later\n")
    q = vol.ctl("pin recursive", "proj")
    vol.ctl("disconnect")
    eq(read_file(v("proj", "later.txt")), b"later\n",
       "a file the server gained is mirrored when the pin is walked again")
    vol.ctl("reconnect")
    vol.stop()
    disk_full()
    crash_in_reintegration()
    crash_in_rename_replay()
    crash_after_fsync_in_place()
    created_offline_attrs()
    directory_moved_into_a_moved_one()
    chmod_during_pin_walk()
    setid_killed_offline()
    atime_kept_by_reconnect()
    lid_of_older_mirror()
    listing_across_switches()
    read_whole_then_disconnect()
    finish()


def start_with_env(vol, var, value):
    """Starts the volume with @var=@value in its environment (its successors
    keep it)."""
    os.environ[var] = value
    try:
        vol.start()
    finally:
        del os.environ[var]


def start_with_fault(vol, fault):
    start_with_env(vol, "FCACHE_FAULT", fault)


def reconnect_through_crashes(vol, tries=30):
    """Reconnects until the volume is online, each worker the fault point
    killed succeeded by one that starts offline; returns how many died."""
    crashes = 0
    for _ in range(tries):
        pid = vol.worker_pid()
        q = vol.ctl("reconnect", ok=False)
        if q.get("state") == "online":
            break
        crashes += 1
        vol.wait_new_worker(pid)
        eq(vol.state()["state"], "offline", f"after crash {crashes} the successor starts offline")
    return crashes


def crash_in_reintegration():
    """kill -9 of the worker in the middle of reintegration, again and again
    (FCACHE_FAULT reint-after-write: after a server write, before its record
    is marked): each successor starts offline and the next reconnect resumes;
    in the end the server holds every change exactly once."""
    vol = Volume("reint-crash", lease="1s")
    os.makedirs(vol.b("p"))
    for i in range(6):
        write_file(vol.b("p", f"f{i}"), b"base %d\n" % i)
    start_with_fault(vol, "reint-after-write:3")
    vol.ctl("pin recursive", "p")
    vol.ctl("disconnect")
    model = {f"f{i}": b"base %d\n" % i for i in range(6)}
    for i in range(6):
        with open(vol.v("p", f"f{i}"), "ab") as f:
            f.write(b"appended offline\n")
        model[f"f{i}"] += b"appended offline\n"
    for i in range(6):
        write_file(vol.v("p", f"new{i}"), b"new %d\n" % i)
        model[f"new{i}"] = b"new %d\n" % i
    os.unlink(vol.v("p", "f0"))
    del model["f0"]
    crashes = reconnect_through_crashes(vol)
    check(crashes >= 2, f"the worker was killed mid-reintegration ({crashes} times)")
    eq(vol.state()["state"], "online", "reintegration finished after the crashes")
    eq({n: read_file(vol.b("p", n)) for n in sorted(os.listdir(vol.b("p")))}, model,
       "the server holds every offline change exactly once (none lost, none doubled)")
    vol.stop()


def crash_in_rename_replay():
    """kill -9 of the worker after each second server write of a replay of
    renames (FCACHE_FAULT reint-after-write:2: after the rename, before its
    mark), again and again: a plain rename, a directory's, one over a
    server file, an exchange, a swap through a temporary, moves into
    another directory (then edited), into a directory made offline and out
    of a renamed one.  A rename found done by the next replay is taken as
    done, never as a conflict: no conflict, and the server ends as the
    view was offline."""
    vol = Volume("rename-crash", lease="1s")
    b, v = vol.b, vol.v
    os.makedirs(b("p", "d1", "deep"))
    os.makedirs(b("p", "d2"))
    for i in range(8):
        write_file(b("p", f"f{i}"), b"file %d\n" % i)
    write_file(b("p", "d1", "deep", "x"), b"x\n")
    start_with_fault(vol, "reint-after-write:2")
    vol.ctl("pin recursive", "p")
    vol.ctl("disconnect")
    os.rename(v("p", "f0"), v("p", "g0"))
    os.rename(v("p", "d1"), v("p", "d1moved"))
    os.rename(v("p", "f1"), v("p", "f2"))
    renameat2(v("p", "f3"), v("p", "f4"), 2)       # RENAME_EXCHANGE
    os.rename(v("p", "f5"), v("p", "t"))
    os.rename(v("p", "f6"), v("p", "f5"))
    os.rename(v("p", "t"), v("p", "f6"))
    os.rename(v("p", "f7"), v("p", "d2", "f7"))
    write_file(v("p", "d2", "f7"), b"edited after the move\n")
    os.mkdir(v("p", "new"))
    os.rename(v("p", "g0"), v("p", "new", "g0"))
    os.rename(v("p", "d1moved", "deep", "x"), v("p", "d1moved", "y"))
    model = tree(v("p"))
    crashes = reconnect_through_crashes(vol)
    check(crashes >= 2, f"the worker was killed mid-replay ({crashes} times)")
    eq(vol.state()["state"], "online", "the replay of the renames finished after the crashes")
    eq(vol.state()["conflicts"], "0", "no rename came back as a conflict")
    got = tree(b("p"))
    eq({k: (got.get(k), model.get(k)) for k in set(got) | set(model) if got.get(k) != model.get(k)},
       {}, "the server holds every rename and the edit once (differences listed)")
    eq(tree(v("p")), model, "and the view online shows the same")
    vol.stop()


def crash_after_fsync_in_place():
    """A database's pattern offline: writes in place into an existing file
    (large and small, passed through to the mirror's file) and a journal
    created beside it, each fsynced, and files fsynced by several threads at
    once (their syncs of the log are grouped), then kill -9 of the worker with
    the files still open.  What fsync acknowledged is there in the successor,
    and reaches the server once at reconnect; a second round rewrites the
    same bytes' range (same size) after the restart and is not lost."""
    vol = Volume("fsync-crash", lease="1s")
    os.makedirs(vol.b("p"))
    big = bytearray(rand_bytes(300 * 1024, 5))
    small = bytearray(b"s" * 4096)
    write_file(vol.b("p", "db"), bytes(big))
    write_file(vol.b("p", "small"), bytes(small))
    vol.start()
    vol.ctl("pin recursive", "p")
    vol.ctl("disconnect")

    def put(buf, fd, off, data):
        eq(os.pwrite(fd, data, off), len(data), f"pwrite of {len(data)} bytes at {off}")
        buf[off:off + len(data)] = data

    model = {}
    for rnd in (1, 2):
        fd = os.open(vol.v("p", "db"), os.O_RDWR)
        put(big, fd, 0, b"header %d" % rnd)
        put(big, fd, 150000, rand_bytes(8192, rnd))
        if rnd == 1:
            put(big, fd, len(big), b"grown offline\n")
        os.fsync(fd)
        sfd = os.open(vol.v("p", "small"), os.O_RDWR)
        put(small, sfd, 100, b"small %d" % rnd)
        os.fdatasync(sfd)
        jfd = os.open(vol.v("p", f"db-journal{rnd}"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        journal = b"journal %d\n" % rnd * 100
        os.write(jfd, journal)
        os.fsync(jfd)
        model.update({"db": bytes(big), "small": bytes(small), f"db-journal{rnd}": journal})

        def fsyncer(t, rnd=rnd):
            for i in range(10):
                name = f"t{t}-{i}"
                data = b"thread %d file %d round %d\n" % (t, i, rnd) * (i + 1)
                with open(vol.v("p", name), "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                model[name] = data
        threads = [threading.Thread(target=fsyncer, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        old = vol.kill_worker()
        vol.wait_new_worker(old)
        for f in (fd, sfd, jfd):
            os.close(f)
        eq(vol.state()["state"], "offline", f"round {rnd}: the successor starts offline")
        eq({n: read_file(vol.v("p", n)) for n in model}, model,
           f"round {rnd}: every fsynced write is there after kill -9")
    q = vol.ctl("reconnect")
    eq(q["state"], "online", "reconnect after the kills")
    eq({n: read_file(vol.b("p", n)) for n in sorted(os.listdir(vol.b("p")))}, model,
       "the server holds what fsync acknowledged offline, once")
    vol.stop()


def directory_moved_into_a_moved_one():
    """Offline: a directory moved out of a/b to the top, then a (its old
    ancestor) moved into it, then the directory renamed again: the reconnect
    replays all three and the server has the tree the view shows (before:
    the two renames of the directory were merged into one after the move of
    a, which the replay then made into a's own descendant: EINVAL, and every
    reconnect stopped there, the volume offline for good)."""
    vol = Volume("dir-chain", lease="1s")
    os.makedirs(vol.b("p", "a", "b", "d"))
    write_file(vol.b("p", "a", "b", "d", "f"), b"f\n")
    vol.start()
    try:
        vol.ctl("pin recursive", "p")
        eq(vol.ctl("disconnect")["state"], "offline", "dir chain: disconnect")
        os.rename(vol.v("p", "a", "b", "d"), vol.v("p", "d2"))
        os.rename(vol.v("p", "a"), vol.v("p", "d2", "a"))
        os.rename(vol.v("p", "d2"), vol.v("p", "d3"))
        q = vol.ctl("reconnect", ok=False)
        eq((q["_rc"], q.get("conflicts")), (0, "0"), f"dir chain: reconnect ({q['_err']})")
        eq(tree(vol.b("p")), tree(vol.v("p")), "dir chain: the server has the view's tree")
        eq(read_file(vol.b("p", "d3", "f")), b"f\n", "dir chain: the file moved with d")
        check(os.path.isdir(vol.b("p", "d3", "a", "b")), "dir chain: a, with b, inside d3")
    finally:
        vol.stop()


def chmod_during_pin_walk():
    """A pinned tree walked again (a pin, as the hoard walk does) while its
    files are chmod'ed, renamed (one over another) and made through the
    view: the walk looked the server's files up before those changes and is
    held after its first file (FCACHE_FAULT_PAUSE=view-pin-file).  Offline
    the view has the server's tree, each file the mode it was given, and
    the reconnect finds nothing to replay or settle (before: 3 of 4 files
    showed their old mode offline, the walk undoing the chmods' notes)."""
    vol = Volume("walk-chmod", lease="1s")
    gate = os.path.join(vol.top, "walk-gate")
    names = [f"f{i}" for i in range(4)]
    os.makedirs(vol.b("p"))
    for n in names:
        write_file(vol.b("p", n), n.encode())
        os.chmod(vol.b("p", n), 0o644)
    start_with_env(vol, "FCACHE_FAULT_PAUSE", f"view-pin-file:{gate}")
    try:
        vol.ctl("pin recursive", "p")
        open(gate, "w").close()
        walk = threading.Thread(target=vol.ctl, args=("job pin recursive", "p"))
        walk.start()
        check(wait_for(lambda: os.path.exists(gate + ".reached"), 60),
              "walk and chmod: the walk is held after its first file")

        def change():
            for n in names:
                os.chmod(vol.v("p", n), 0o600)
            os.rename(vol.v("p", "f3"), vol.v("p", "g"))
            os.rename(vol.v("p", "f2"), vol.v("p", "f1"))
            write_file(vol.v("p", "h"), b"h")
        changes = threading.Thread(target=change)
        changes.start()
        changes.join(30)
        os.unlink(gate)
        changes.join()
        walk.join()
        want = tree(vol.b("p"))
        eq(vol.ctl("disconnect")["state"], "offline", "walk and chmod: disconnect")
        eq(tree(vol.v("p")), want, "walk and chmod: offline, the view has the server's tree")
        eq({n: stat.S_IMODE(os.lstat(vol.v("p", n)).st_mode) for n in ("f0", "f1", "g")},
           {n: 0o600 for n in ("f0", "f1", "g")},
           "walk and chmod: offline, every file has its new mode")
        eq(read_file(vol.v("p", "f1")), b"f2", "walk and chmod: offline, f2 renamed over f1")
        q = vol.ctl("reconnect")
        eq((q["state"], q.get("conflicts")), ("online", "0"), "walk and chmod: reconnect")
        eq(tree(vol.b("p")), want, "walk and chmod: the server's tree is as it was")
    finally:
        if os.path.exists(gate):
            os.unlink(gate)
        vol.stop()


def created_offline_attrs():
    """Files created offline and then written, chmod'ed, chown'ed and
    utimens'ed (an untar's steps, in a seeded random order), with kill -9 of
    the worker at random points between the steps (also right after the
    create): the log records only their creates, the mirror file being the
    truth until a replay takes it, so the successor and then the server after
    reconnect hold exactly the final mode, owner, times and bytes.
    FCACHE_OFFLINE_SEED=N reruns a seed."""
    seed = int(os.environ.get("FCACHE_OFFLINE_SEED", random.randrange(1 << 32)))
    print(f"# created_offline_attrs: seed {seed} (FCACHE_OFFLINE_SEED={seed} to rerun)", flush=True)
    rnd = random.Random(seed)
    vol = Volume("created-attrs", lease="1s")
    os.makedirs(vol.b("p"))
    write_file(vol.b("p", "seed"), b"seed\n")
    vol.start()
    vol.ctl("pin recursive", "p")
    vol.ctl("disconnect")
    now = int(time.time())
    model = {}
    kills = 0

    def maybe_kill(p):
        nonlocal kills
        if kills < 6 and rnd.random() < p:
            old = vol.kill_worker()
            vol.wait_new_worker(old)
            kills += 1
            eq(vol.state()["state"], "offline", f"kill {kills}: the successor starts offline")

    for i in range(12):
        name = f"f{i}"
        path = vol.v("p", name)
        m = {"data": b"", "mode": 0o600, "uid": 0, "gid": 0, "times": None}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        model[name] = m
        maybe_kill(0.3)
        steps = ["write", "chmod", "chown", "write", "truncate"]
        rnd.shuffle(steps)
        # Mostly the times last, as tar does; otherwise a write after them stamps its own.
        steps.insert(len(steps) if rnd.random() < 0.7 else rnd.randrange(len(steps)), "utime")
        for step in steps:
            if step == "write":
                data = rand_bytes(rnd.randrange(1, 20000), rnd.randrange(1 << 30))
                with open(path, "r+b") as f:
                    f.seek(len(m["data"]))
                    f.write(data)
                m["data"] += data
                m["times"] = None
            elif step == "truncate":
                n = rnd.randrange(len(m["data"]) + 1)
                os.truncate(path, n)
                m["data"] = m["data"][:n]
                m["times"] = None
            elif step == "chmod":
                m["mode"] = rnd.choice([0o644, 0o640, 0o755, 0o700, 0o444, 0o604])
                os.chmod(path, m["mode"])
            elif step == "chown":
                m["uid"], m["gid"] = rnd.randrange(1000, 1010), rnd.randrange(1000, 1010)
                os.chown(path, m["uid"], m["gid"])
            else:
                # atime after mtime and recent: no read changes it (relatime)
                mt = (now - rnd.randrange(10 ** 6, 10 ** 8)) * 10 ** 9 + rnd.randrange(10 ** 9)
                at = (now - rnd.randrange(60, 3600)) * 10 ** 9 + rnd.randrange(10 ** 9)
                os.utime(path, ns=(at, mt))
                m["times"] = (at, mt)
            maybe_kill(0.1)
    for name, m in model.items():
        if m["times"] is None:          # written last: the time of that change
            m["mtime"] = os.stat(vol.v("p", name)).st_mtime_ns

    def attrs(path, m, server=False):
        st = os.stat(path)
        atime = st.st_atime_ns
        # The server's relatime: a read after the replay's utimensat (which
        # left ctime after atime) may move atime on, never back.
        if server and m["times"] and atime > m["times"][0]:
            atime = m["times"][0]
        got = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid,
               (atime, st.st_mtime_ns) if m["times"] else st.st_mtime_ns)
        return got, read_file(path)

    def want(m):
        return ((m["mode"], m["uid"], m["gid"], m["times"] or m["mtime"]), m["data"])

    eq({n: attrs(vol.v("p", n), m) for n, m in model.items()},
       {n: want(m) for n, m in model.items()},
       f"offline after {kills} kills: each created file has its final mode, owner, times, bytes")
    eq(vol.state()["pending"], str(len(model)),
       "the log holds one record per file created offline (its create)")
    q = vol.ctl("reconnect")
    eq(q["state"], "online", "reconnect after files created offline")
    wrong = [n for n, m in model.items() if attrs(vol.b("p", n), m, True) != want(m)]
    eq(wrong, [], "the server holds each created file's final mode, owner, times and bytes")
    for n in wrong[:3]:
        print(f"# {n}: server {short(attrs(vol.b('p', n), model[n], True))},"
              f" expected {short(want(model[n]))}")
    wrong = [n for n, m in model.items() if attrs(vol.v("p", n), m, True) != want(m)]
    eq(wrong, [], "... and the view online shows them")
    vol.stop()


def setid_killed_offline():
    """Offline, a write by a user other than root kills set-id bits, as on a
    local filesystem: of a pinned server file and of a file created offline
    (whose create then carries the mode to the server).  A writer passed
    through would write the mirror's file with the daemon's CAP_FSETID.
    Replay writes the server's files as root, which keeps set-id bits: the
    kill reaches the server as the mode the change left, so a 6755 file of
    uid 1000 appended to (fallocated, truncated, opened with O_TRUNC) by its
    owner offline ends 0755 there, as that change made online would leave
    it, and a setgid file without group execute appended to by a member of
    its group keeps its bit."""
    vol = Volume("setid", lease="1s")
    os.makedirs(vol.b("p"))
    os.chmod(vol.b("p"), 0o777)
    write_file(vol.b("p", "big"), b"\0" * (256 << 10))
    modes = {"owned": (0o6755, 0o755), "sgid-noexec": (0o2664, 0o2664)}
    for name, (mode, _) in list(modes.items()) + [("falloc", (0o6755, None)),
                                                   ("trunc", (0o6755, None)),
                                                   ("otrunc", (0o6755, None))]:
        write_file(vol.b("p", name), b"server\n")
        os.chown(vol.b("p", name), 1000, 1000)
        os.chmod(vol.b("p", name), mode)
    vol.start()
    vol.ctl("pin recursive", "p")
    vol.ctl("disconnect")
    write_file(vol.v("p", "made"), b"made offline\n")

    def append_as_1000(path):
        subprocess.run(["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "sh", "-c",
                        'echo appended >> "$1"', "sh", path], check=True)

    for name in ("big", "made"):
        path = vol.v("p", name)
        os.chmod(path, 0o6777)
        append_as_1000(path)
        eq(oct(stat.S_IMODE(os.stat(path).st_mode)), oct(0o777),
           f"offline, an append by uid 1000 kills the set-id bits of {name}")
    for name, (_, after) in modes.items():
        append_as_1000(vol.v("p", name))
        eq(oct(stat.S_IMODE(os.stat(vol.v("p", name)).st_mode)), oct(after),
           f"offline, the owner's append leaves {name} {oct(after)}")
    # fallocate(1) as the owner: the mode it leaves (the kernel's kill, as for a write)
    subprocess.run(["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "fallocate",
                    "-l", "64K", vol.v("p", "falloc")], check=True)
    falloc_mode = stat.S_IMODE(os.stat(vol.v("p", "falloc")).st_mode)
    subprocess.run(["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "truncate",
                    "-s", "3", vol.v("p", "trunc")], check=True)
    eq(oct(stat.S_IMODE(os.stat(vol.v("p", "trunc")).st_mode)), oct(0o755),
       "offline, a truncate by the owner kills the set-id bits")
    subprocess.run(["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "sh", "-c",
                    'echo new > "$1"', "sh", vol.v("p", "otrunc")], check=True)
    eq(oct(stat.S_IMODE(os.stat(vol.v("p", "otrunc")).st_mode)), oct(0o755),
       "offline, an open with O_TRUNC and a write by the owner kill the set-id bits")
    q = vol.ctl("reconnect")
    eq(q["state"], "online", "reconnect after the set-id appends")
    eq(q.get("conflicts"), "0", "the set-id kills replay without a conflict")
    eq(oct(stat.S_IMODE(os.stat(vol.b("p", "made")).st_mode)), oct(0o777),
       "the server has the file created offline without its set-id bits")
    eq(read_file(vol.b("p", "made")), b"made offline\nappended\n", "... and its bytes")
    eq(oct(stat.S_IMODE(os.stat(vol.b("p", "big")).st_mode)), oct(0o777),
       "the server file chmod-ed 6777 offline and then appended to by uid 1000 has lost its"
       " set-id bits (the replay's write as root keeps them)")
    eq(read_file(vol.b("p", "big")), b"\0" * (256 << 10) + b"appended\n", "... and its bytes")
    for name, (_, after) in modes.items():
        st = os.stat(vol.b("p", name))
        eq((oct(stat.S_IMODE(st.st_mode)), st.st_uid, st.st_gid), (oct(after), 1000, 1000),
           f"the server's {name} has the mode and owner the append made online would leave")
        eq(read_file(vol.b("p", name)), b"server\nappended\n", f"... and {name}'s bytes")
    eq(oct(stat.S_IMODE(os.stat(vol.b("p", "falloc")).st_mode)), oct(falloc_mode),
       f"a fallocate by the owner offline leaves the server's file {oct(falloc_mode)}, as it"
       " left the local copy")
    eq(os.stat(vol.b("p", "falloc")).st_size, 64 << 10, "... and its size")
    eq((oct(stat.S_IMODE(os.stat(vol.b("p", "trunc")).st_mode)), read_file(vol.b("p", "trunc"))),
       (oct(0o755), b"ser"), "a truncate by the owner offline: the server's file 0755, cut")
    eq((oct(stat.S_IMODE(os.stat(vol.b("p", "otrunc")).st_mode)), read_file(vol.b("p", "otrunc"))),
       (oct(0o755), b"new\n"), "an open with O_TRUNC by the owner offline: the server's file 0755")
    eq(oct(stat.S_IMODE(os.stat(vol.v("p", "owned")).st_mode)), oct(0o755),
       "the view online shows the server's mode")
    vol.stop()


def atime_kept_by_reconnect():
    """The dry run and the reconnect read server files no application read:
    a file only read offline, one edited offline to the bytes the server got
    meanwhile (replay reads the server's to find them the same), one edited
    on both sides (read to merge, kept as a conflict), a directory removed
    offline.  Their server atimes, set long before their ctimes so that any
    read would move them (relatime), stay, and so does the directory's,
    which the reconnect's walks list."""
    vol = Volume("atime", lease="1s")
    os.makedirs(vol.b("p", "d"))
    for name in ("read.txt", "same.txt", "clash.txt"):
        write_file(vol.b("p", name), text(LINES))
    vol.start()
    vol.ctl("pin recursive", "p")
    vol.ctl("disconnect")
    eq(read_file(vol.v("p", "read.txt")), text(LINES), "offline read")
    mine, theirs = list(LINES), list(LINES)
    mine[3], theirs[3] = "line 4, mine\n", "line 4, theirs\n"
    write_file(vol.v("p", "same.txt"), text(mine))
    write_file(vol.v("p", "clash.txt"), text(mine))
    os.rmdir(vol.v("p", "d"))
    write_file(vol.b("p", "same.txt"), text(mine))
    write_file(vol.b("p", "clash.txt"), text(theirs))
    old = time.time_ns() - 3 * 86400 * 10 ** 9
    names = ("read.txt", "same.txt", "clash.txt", "d")
    for name in names + ("probe",):
        if name == "probe":
            write_file(vol.b("p", name), b"probe\n")
        os.utime(vol.b("p", name), ns=(old, os.stat(vol.b("p", name)).st_mtime_ns))
    read_file(vol.b("p", "probe"))
    if os.stat(vol.b("p", "probe")).st_atime_ns == old:
        print("# the backing's filesystem does not update atimes: atime checks skipped")
        vol.stop()
        return
    os.unlink(vol.b("p", "probe"))
    os.utime(vol.b("p"), ns=(old, os.stat(vol.b("p")).st_mtime_ns))
    names += (".",)
    dry = vol.ctl("query reintegration")
    check(any("outcome=conflict" in ln and "clash.txt" in ln for ln in dry["_lines"]),
          "query reintegration: clash.txt would conflict")
    eq({n: os.stat(vol.b("p", n)).st_atime_ns for n in names}, {n: old for n in names},
       "the dry run moves no server atime")
    q = vol.ctl("reconnect")
    eq((q["state"], q["conflicts"]), ("online", "1"), "reconnect: clash.txt a conflict")
    # The walks (deletion bound, resync) list directories with O_NOATIME too.
    kept = [n for n in names if n != "d"]
    eq({n: os.stat(vol.b("p", n)).st_atime_ns for n in kept}, {n: old for n in kept},
       "the reconnect (replay, deletion bound, the mirror's resync) moves no server atime")
    eq(read_file(vol.b("p", "clash.txt")), text(theirs), "the server's clash.txt kept")
    eq(os.path.exists(vol.b("p", "d")), False, "the directory removed offline is gone")
    vol.ctl("pin recursive", "p")
    eq(os.stat(vol.b("p")).st_atime_ns, old, "a pin walk (as the hoard walk) lists it with O_NOATIME")
    vol.stop()


def lid_of_older_mirror():
    """An object made offline carries its log id in trusted.fcache.base (8
    bytes), which the base replaces at the reconnect's resync in one write;
    a mirror written before kept the id in trusted.fcache.lid: such a mirror
    is still served, logged to and replayed, and its ids go at the resync."""
    vol = Volume("oldlid", lease="1s")
    os.makedirs(vol.b("p"))
    write_file(vol.b("p", "server.txt"), b"server\n")
    vol.start()
    vol.ctl("pin recursive", "p")
    vol.ctl("disconnect")
    write_file(vol.v("p", "new.txt"), b"made offline\n")
    os.mkdir(vol.v("p", "nd"))
    write_file(vol.v("p", "nd", "f"), b"in a directory made offline\n")
    vol.stop()
    mirror = os.path.join(vol.cache, "mirror", "p")
    made = [os.path.join(mirror, n) for n in ("new.txt", "nd", os.path.join("nd", "f"))]
    eq([(os.listxattr(m), len(os.getxattr(m, "trusted.fcache.base"))) for m in made],
       [(["trusted.fcache.base"], 8)] * 3,
       "an object made offline carries its log id, 8 bytes, in trusted.fcache.base")
    for m in made:     # as an older worker wrote them
        os.setxattr(m, "trusted.fcache.lid", os.getxattr(m, "trusted.fcache.base"))
        os.removexattr(m, "trusted.fcache.base")
    vol.start()
    eq(vol.state()["state"], "offline", "the successor starts offline")
    eq(read_file(vol.v("p", "nd", "f")), b"in a directory made offline\n",
       "a file made offline with an older mirror's log id is served")
    write_file(vol.v("p", "new.txt"), b"made offline, then edited\n")
    write_file(vol.v("p", "nd", "g"), b"made in a directory with an older id\n")
    q = vol.ctl("reconnect")
    eq((q["state"], q["conflicts"]), ("online", "0"), "reconnect with an older mirror's ids")
    eq({n: read_file(vol.b("p", *n.split("/"))) for n in ("nd/f", "nd/g", "server.txt")},
       {"nd/f": b"in a directory made offline\n",
        "nd/g": b"made in a directory with an older id\n", "server.txt": b"server\n"},
       "the server holds what was made offline")
    eq(read_file(vol.b("p", "new.txt")), b"made offline, then edited\n",
       "the edit of a file known by an older mirror's log id is replayed")
    eq([len(os.getxattr(m, "trusted.fcache.base"))
        for m in made + [os.path.join(mirror, "nd", "g")]], [52] * 4,
       "after the resync each carries its server base")
    eq([os.listxattr(m) for m in (made[0], made[2])], [["trusted.fcache.base"]] * 2,
       "a file's older log id goes when it takes the server's identity")
    vol.stop()


def listing_across_switches():
    """A pinned directory of 2,000 names listed in small getdents64 calls,
    the volume switched midway: opened online and read on offline, opened
    offline and read on after the reconnect, and across both.  Each name
    once, none missing, no error.  The backing is a tmpfs, whose offsets
    (indexes) mean nothing in the mirror's ext4 directory (hashes), nor
    the mirror's on the tmpfs."""
    vol = Volume("listing", lease="1s")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", vol.b()],
                      capture_output=True).returncode:
        print("# no tmpfs mount: listing across switches skipped")
        return
    try:
        names = {f"entry-{i:04d}.txt" for i in range(2000)}
        os.makedirs(vol.b("big"))
        for name in names:
            write_file(vol.b("big", name), b"")
        vol.start()
        eq(vol.ctl("pin recursive", "big").get("mirrored"), "yes", "the big directory is pinned")
        want = sorted(names | {".", ".."})

        def listed(switches, what):
            """Lists big in 512-byte getdents64 calls, switch(i) after
            the i-th call."""
            got, calls, err = [], 0, None
            fd = os.open(vol.v("big"), os.O_RDONLY | os.O_DIRECTORY)
            try:
                while True:
                    if calls in switches:
                        vol.ctl(switches[calls])
                    chunk = getdents(fd, 512)
                    calls += 1
                    if not chunk:
                        break
                    got += chunk
            except OSError as e:
                err = e
            finally:
                os.close(fd)
            eq((err, len(got), sorted(got) == want), (None, len(want), True),
               f"a listing {what}: each name once, no error")
            check(calls > 20, f"the listing {what} took many calls ({calls})")

        listed({5: "disconnect"}, "opened online, read on offline")
        listed({5: "reconnect"}, "opened offline, read on online")
        listed({3: "disconnect", 8: "reconnect"}, "across a disconnect and a reconnect")
        # rewinddir (offset 0) lists afresh what the switch serves.
        fd = os.open(vol.v("big"), os.O_RDONLY | os.O_DIRECTORY)
        first = getdents(fd, 512)
        vol.ctl("disconnect")
        os.lseek(fd, 0, os.SEEK_SET)
        again = []
        while chunk := getdents(fd, 4096):
            again += chunk
        os.close(fd)
        eq(sorted(again), want, "rewound after the switch: the whole listing again")
        check(len(first) > 2, "the first call listed some names")
        eq(vol.ctl("reconnect")["state"], "online", "reconnect after the listings")

        # Listings under way while the volume switches back and forth, the
        # kernel knowing every name (a switch then has many nodes to move).
        for name in names:
            os.stat(vol.v("big", name))
        stop = threading.Event()
        errors, wrong, done = [], [], [0]

        def lister():
            while not stop.is_set():
                got = []
                try:
                    fd = os.open(vol.v("big"), os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        while chunk := getdents(fd, 1024):
                            got += chunk
                    finally:
                        os.close(fd)
                except OSError as e:
                    errors.append(e.errno)
                    continue
                done[0] += 1
                if sorted(got) != want:
                    wrong.append(len(got))

        threads = [threading.Thread(target=lister, daemon=True) for _ in range(3)]
        for t in threads:
            t.start()
        for _ in range(8):
            vol.ctl("disconnect")
            time.sleep(0.2)
            vol.ctl("reconnect")
            time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(60)
        eq(([errno.errorcode.get(e, e) for e in errors], wrong), ([], []),
           f"{done[0]} listings while the volume switched: no error, each name once")
        vol.stop()
    finally:
        vol.stop()
        subprocess.run(["umount", vol.b()], capture_output=True)


def read_whole_then_disconnect():
    """A file another client made in a pinned directory, read whole through
    the view: it goes into the mirror on the cache thread after its last
    read is answered.  Held there (FCACHE_FAULT_PAUSE=view-cache-file) while
    a disconnect is asked, the switch waits for it, and offline the file
    reads (before: the switch went first, the move gave up, and the complete
    directory said ENOENT until the reconnect; 1-5 rounds in 320 of a
    read-then-disconnect loop on a loaded machine)."""
    vol = Volume("cache-move", lease="1s")
    gate = os.path.join(vol.top, "cache-gate")
    os.makedirs(vol.b("p"))
    write_file(vol.b("p", "seed"), b"seed\n")
    start_with_env(vol, "FCACHE_FAULT_PAUSE", f"view-cache-file:{gate}")
    vol.ctl("pin recursive", "p")
    data = b"made on the server after the pin\n" * 100
    write_file(vol.b("p", "new"), data)
    open(gate, "w").close()
    eq(read_file(vol.v("p", "new")), data, "a file made on the server, read whole online")
    check(wait_for(lambda: os.path.exists(gate + ".reached"), 30),
          "... its move into the mirror is held at view-cache-file")
    result = {}
    th = threading.Thread(target=lambda: result.update(q=vol.ctl("disconnect", ok=False)),
                          daemon=True)
    th.start()
    th.join(0.5)
    waited = th.is_alive()
    os.unlink(gate)
    th.join(60)
    check(waited, "the disconnect waits for the move")
    eq(result.get("q", {}).get("state"), "offline", "... then answers, offline")
    eq(err_of(lambda: os.stat(vol.v("p", "new"))), 0, "offline, the file read whole is there")
    eq(read_file(vol.v("p", "new")) if os.path.exists(vol.v("p", "new")) else None, data,
       "... with the server's bytes")
    eq(vol.ctl("reconnect").get("state"), "online", "reconnect")
    vol.stop()


def disk_full():
    """Offline edits beyond Reserve: ENOSPC to the writer, nothing accepted then lost."""
    vol = Volume("enospc", lease="1s", cache_size="64M", reserve="2M")
    os.makedirs(vol.b("p"))
    write_file(vol.b("p", "seed"), b"seed\n")
    vol.start()
    vol.ctl("pin recursive", "p")
    vol.ctl("disconnect")
    accepted = {}
    refused = None
    for i in range(40):
        name = f"chunk{i}"
        data = bytes([i]) * 256 * 1024
        try:
            write_file(vol.v("p", name), data)
            accepted[name] = data
        except OSError as e:
            refused = e.errno
            break
    eq(refused, errno.ENOSPC, "offline writes past Reserve fail with ENOSPC")
    check(len(accepted) >= 2, f"writes before that were accepted ({len(accepted)} of 256 KiB)")
    q = vol.ctl("reconnect")
    eq(q["state"], "online", "reconnect after the disk-full episode")
    got = {n: read_file(vol.b("p", n)) for n in accepted}
    eq(got, accepted, "every accepted offline write reached the server")
    vol.stop()


if __name__ == "__main__":
    main()
