#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A seeded run of random operations (create, write, truncate, rename incl.
over and exchange, link, unlink, mkdir, rmdir, symlink, mkfifo, chmod,
utimens, fsync; and descriptors held open across the other operations,
written, truncated, read and fsynced through) through the view on a
pinned subtree, across random
disconnects, reconnects and kill -9s of the worker (a successor takes the
connection over, online or offline), against an in-memory model of what
each name holds: every read is checked (O_DIRECT, so what the view serves,
not the kernel's pages), and after the last reconnect every change is on
the backing, hard links (of files and of FIFOs) as one inode.

FCACHE_MODEL_HELD=1 adds descriptors held open: a held file keeps a name
and has only one, and no worker is killed while one is held;
FCACHE_MODEL_HELD=links lifts the last two limits, FCACHE_MODEL_HELD=all
all three (view.md, Not done yet).
FCACHE_MODEL_STACKED=1 (the view-model-stacked test) makes the backing
another fcache-view, a network filesystem to the volume (its calls bounded
by BackingTimeout, acknowledged writes mirrored through).
FCACHE_MODEL_WRITEBACK=1 (the view-model-writeback test, with
FCACHE_MODEL_HELD=1; also with FCACHE_MODEL_STACKED) runs the volume with
WriteBack=yes: changes are acknowledged locally and shipped by the trickle
while the operations go on; a random `sync` (of everything or of one name)
is followed by a check that the backing holds what the model says (every
name after a full sync; that name after `sync PATH`), files held open for
writing left out until their close.
FCACHE_MODEL_SSHFS=1 (the view-model-sshfs test) makes the backing sshfs of
a loopback sshd, a server that makes its inode numbers up, and mounts it
again at about half the disconnects (half of those with the old sshfs
killed, when no file is held open), its files met in a random order (other
numbers) before the reconnect; sshfs has no FIFOs, no link count and no
RENAME_EXCHANGE, so those operations are left out.
FCACHE_MODEL_WALKS=1 walks the pinned tree
again and again beside the operations (`pin recursive`, as the hoard walk
and the resync do), so that a walk's look at a name races the changes made
through the view (whose notes bring the mirror's copy up to date); hard
links and RENAME_EXCHANGE are left out, FCACHE_MODEL_WALKS=all keeps them
(view.md, Not done yet).
FCACHE_MODEL_SEED=N reruns a seed; FCACHE_MODEL_OPS=N changes the length;
FCACHE_MODEL_TRACE=1 prints each operation, FCACHE_MODEL_SWEEP=1 reads every
file after each.
"""
import atexit
import importlib.util
import os
import random
import stat
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (RENAME_EXCHANGE, Volume, check, eq, finish, read_direct,  # noqa: E402
                     read_file, renameat2, require_root_fuse)


class Obj:
    """A file: its bytes, mode and the mtime set explicitly (None: any);
    data None: a FIFO."""
    def __init__(self, data, mode=0o644):
        self.data = data
        self.mode = mode
        self.mtime = None


class SshfsServer:
    """The volume's Backing= an sshfs mount of vol.top/server through a
    loopback sshd (view-sshfs.py's), mounted again on demand."""
    def __init__(self, vol):
        spec = importlib.util.spec_from_file_location(
            "view_sshfs", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       "view-sshfs.py"))
        self.lib = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.lib)
        self.vol = vol
        self.dir = os.path.join(vol.top, "server")
        os.makedirs(self.dir)
        self.sshd, self.keydir = self.lib.start_sshd(vol.top)
        atexit.register(self.close)
        self.mount()

    def mount(self):
        self.lib.mount_at_backing(self.vol, self.dir, self.keydir, "model")

    def remount(self, rnd, may_kill):
        """Mounted again, its names met in a random order: sshfs numbers
        them as it meets them.  Half the time (@may_kill) the old sshfs is
        killed first (a dead mount: its calls fail ENOTCONN), else left to
        serve the descriptors on it (lazily unmounted).  Not while files are
        held open: sshfs keeps a file removed while open as .fuse_hidden*
        until its last close, which a killed sshfs leaves on the server."""
        if rnd.random() < 0.5 and may_kill:
            os.kill(self.lib.sshfs_pid(self.vol.backing), 9)
        self.mount()
        names = []
        for dirpath, dirnames, filenames in os.walk(self.dir):
            names += [os.path.relpath(os.path.join(dirpath, n), self.dir)
                      for n in dirnames + filenames]
        rnd.shuffle(names)
        for n in names:
            try:
                os.lstat(os.path.join(self.vol.backing, n))
            except OSError:
                pass

    def close(self):
        subprocess.run(["fusermount3", "-u", "-z", self.vol.backing], capture_output=True)
        self.sshd.kill()


class Model:
    def __init__(self):
        self.files = {}         # rel -> Obj (hard links share one; FIFOs too)
        self.dirs = {"": 0o755}
        self.links = {}         # rel -> symlink target

    def names(self):
        return set(self.files) | set(self.dirs) | set(self.links)

    def children(self, d):
        pre = d + "/" if d else ""
        return [n for n in self.names() if n.startswith(pre) and n != d and
                "/" not in n[len(pre):]]


def main():
    require_root_fuse()
    seed = int(os.environ.get("FCACHE_MODEL_SEED", random.randrange(1 << 32)))
    nops = int(os.environ.get("FCACHE_MODEL_OPS", "500"))
    print(f"# seed {seed} (FCACHE_MODEL_SEED={seed} to rerun), {nops} operations", flush=True)
    rnd = random.Random(seed)
    writeback = bool(os.environ.get("FCACHE_MODEL_WRITEBACK"))
    connected = "writeback" if writeback else "online"
    inner = server = None
    extra = ["--set", "WriteBack=yes"] if writeback else []
    if os.environ.get("FCACHE_MODEL_STACKED"):
        # The server a network filesystem: another fcache-view (not local to
        # the volume: its calls bounded, acknowledged writes mirrored through).
        inner = Volume("model-inner", lease="0s")
        inner.start()
        vol = Volume("model", backing=inner.mnt, lease="1s",
                     extra=["--set", "BackingTimeout=30s"] + extra)
    elif os.environ.get("FCACHE_MODEL_SSHFS"):
        vol = Volume("model", lease="1s", extra=["--set", "BackingTimeout=30s"] + extra)
        server = SshfsServer(vol)
    else:
        vol = Volume("model", lease="1s", extra=extra)
    # The server's own tree: what a check of the backing reads.
    b = lambda rel: os.path.join(server.dir if server else vol.backing, "m", rel)  # noqa: E731
    os.makedirs(b(""))
    model = Model()
    for i in range(4):
        data = rnd.randbytes(rnd.randrange(1, 3000))
        with open(b(f"s{i}"), "wb") as f:
            f.write(data)
        model.files[f"s{i}"] = Obj(data)
    if not server:
        os.link(b("s0"), b("s0.link"))
        model.files["s0.link"] = model.files["s0"]
    os.mkdir(b("sd"))
    model.dirs["sd"] = 0o755
    vol.start()
    vol.ctl("pin recursive", "m")
    v = lambda rel: vol.v("m", rel) if rel else vol.v("m")  # noqa: E731
    offline = False
    counter = [0]
    kills = [0]
    failures_at = []

    def fresh(parent):
        counter[0] += 1
        name = f"n{counter[0]}"
        return f"{parent}/{name}" if parent else name

    def pick(kind):
        """A name of that kind: "file" (regular), "fifo", "node" (either),
        "dir" (not the top), "link" (symlink)."""
        pool = {"dir": model.dirs, "link": model.links}.get(kind, model.files)
        names = sorted(n for n in pool if n or kind != "dir")
        if kind in ("file", "fifo"):
            names = [n for n in names if (model.files[n].data is None) == (kind == "fifo")]
        return rnd.choice(names) if names else None

    def any_dir():
        return rnd.choice(sorted(model.dirs))

    def verify(rel, what):
        if rel in model.files and model.files[rel].data is None:
            st = os.lstat(v(rel))
            nl = sum(1 for o in model.files.values() if o is model.files[rel])
            eq((stat.S_ISFIFO(st.st_mode), st.st_nlink, stat.S_IMODE(st.st_mode)),
               (True, nl, model.files[rel].mode), f"{what}: FIFO {rel} type, nlink and mode")
        elif rel in model.files:
            st = os.lstat(v(rel))
            if not stat.S_ISREG(st.st_mode):
                failures_at.append(what)
                check(False, f"{what}: {rel} is a regular file (mode {st.st_mode:o})")
                return
            got = read_direct(v(rel))
            if got != model.files[rel].data:
                failures_at.append(what)
            eq(got, model.files[rel].data, f"{what}: {rel} reads back")
            st = os.lstat(v(rel))
            nl = sum(1 for o in model.files.values() if o is model.files[rel])
            eq((st.st_nlink, stat.S_IMODE(st.st_mode)), (nl, model.files[rel].mode),
               f"{what}: {rel} nlink and mode")
        elif rel in model.links:
            eq(os.readlink(v(rel)), model.links[rel], f"{what}: symlink {rel}")

    def model_write(o, off, data):
        buf = o.data.ljust(off, b"\0")
        o.data = buf[:off] + data + buf[off + len(data):]
        o.mtime = None

    def model_truncate(o, size):
        o.data = o.data[:size].ljust(size, b"\0")
        o.mtime = None

    def op_create():
        rel = fresh(any_dir())
        data = rnd.randbytes(rnd.randrange(0, 40000))
        fd = os.open(v(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        if rnd.random() < 0.5:
            os.fsync(fd)
        os.close(fd)
        model.files[rel] = Obj(data)
        return rel

    def op_write():
        rel = pick("file")
        if not rel:
            return None
        o = model.files[rel]
        off = rnd.randrange(0, len(o.data) + 100)
        data = rnd.randbytes(rnd.randrange(1, 5000))
        fd = os.open(v(rel), os.O_WRONLY)
        os.pwrite(fd, data, off)
        if rnd.random() < 0.3:
            os.fsync(fd)
        os.close(fd)
        model_write(o, off, data)
        return rel

    def op_truncate():
        rel = pick("file")
        if not rel:
            return None
        o = model.files[rel]
        size = rnd.randrange(0, len(o.data) + 1000)
        os.truncate(v(rel), size)
        model_truncate(o, size)
        return rel

    def op_rename():
        kind = rnd.choice(["file", "file", "file", "fifo", "link", "dir"])
        rel = pick(kind)
        if not rel:
            return None
        if kind in ("file", "fifo") and rnd.random() < 0.5:
            dst = pick("node")          # over another file: an atomic save
            if dst is None or model.files[dst] is model.files[rel] or \
                    not keeps_held(model.files[dst]):
                return None
        else:
            parent = any_dir()
            if kind == "dir" and (parent == rel or parent.startswith(rel + "/")):
                return None
            dst = fresh(parent)
        if os.environ.get("FCACHE_MODEL_TRACE"):
            print(f"# rename {rel} -> {dst}", flush=True)
        os.rename(v(rel), v(dst))
        if kind == "dir":
            pre = rel + "/"
            for pool in (model.files, model.dirs, model.links):
                for n in sorted(pool):
                    if n == rel or n.startswith(pre):
                        pool[dst + n[len(rel):]] = pool.pop(n)
        else:
            pool = model.links if kind == "link" else model.files
            pool.pop(dst, None)
            pool[dst] = pool.pop(rel)
        return dst

    def op_exchange():
        a = rnd.choice(sorted(set(model.files) | set(model.links)) or [None])
        b = rnd.choice(sorted(set(model.files) | set(model.links)) or [None])
        if not a or not b or a == b or (a in model.files and b in model.files and
                                        model.files[a] is model.files[b]):
            return None
        if os.environ.get("FCACHE_MODEL_TRACE"):
            print(f"# exchange {a} <-> {b}", flush=True)
        renameat2(v(a), v(b), RENAME_EXCHANGE)
        ea = model.files.pop(a, None), model.links.pop(a, None)
        eb = model.files.pop(b, None), model.links.pop(b, None)
        for name, (f, ln) in ((a, eb), (b, ea)):
            if f is not None:
                model.files[name] = f
            else:
                model.links[name] = ln
        return a

    def op_mkfifo():
        rel = fresh(any_dir())
        os.mkfifo(v(rel), 0o644)
        model.files[rel] = Obj(None)
        return rel

    held = []               # [fd, Obj]: descriptors kept open across operations
    held_mode = os.environ.get("FCACHE_MODEL_HELD", "")
    held_keep_name = held_mode != "all"
    held_limited = held_mode not in ("links", "all")

    def names_of(o):
        return sum(1 for x in model.files.values() if x is o)

    def held_obj(o):
        return any(h[1] is o for h in held)

    def keeps_held(o):
        """False when removing a name of o would leave a held file nameless."""
        return not (held_keep_name and held_obj(o) and names_of(o) == 1)

    def op_hold():
        rel = pick("file")
        if not rel or len(held) >= 4 or (held_limited and names_of(model.files[rel]) > 1):
            return None
        held.append([os.open(v(rel), os.O_RDWR), model.files[rel]])
        trace(f"hold fd {held[-1][0]} on {rel}")
        return None

    def trace(what):
        if os.environ.get("FCACHE_MODEL_TRACE"):
            print(f"# {what}", flush=True)

    def pick_held():
        h = rnd.choice(held) if held else None
        if h:
            trace(f"held fd {h[0]} ({held_name(h[1])}, {len(h[1].data)} bytes)")
        return h

    def op_held_write():
        h = pick_held()
        if not h:
            return None
        o = h[1]
        off = rnd.randrange(0, len(o.data) + 100)
        data = rnd.randbytes(rnd.randrange(1, 5000))
        os.pwrite(h[0], data, off)
        if rnd.random() < 0.3:
            os.fsync(h[0])
        model_write(o, off, data)
        return held_name(o)

    def op_held_truncate():
        h = pick_held()
        if not h:
            return None
        o = h[1]
        size = rnd.randrange(0, len(o.data) + 1000)
        os.ftruncate(h[0], size)
        model_truncate(o, size)
        return held_name(o)

    def op_held_read():
        h = pick_held()
        if not h:
            return None
        got = os.pread(h[0], len(h[1].data) + 100, 0)
        if got != h[1].data:
            failures_at.append("held read")
        eq((len(got), got == h[1].data), (len(h[1].data), True),
           "a descriptor held open reads what was written (size, bytes)")
        eq(os.fstat(h[0]).st_size, len(h[1].data), "a descriptor held open: fstat's size")
        return None

    def op_held_close():
        h = pick_held()
        if not h:
            return None
        if rnd.random() < 0.5:
            os.fsync(h[0])
        os.close(h[0])
        held.remove(h)
        return held_name(h[1])

    def held_name(o):
        """A name of object o, if it still has one."""
        names = sorted(n for n, x in model.files.items() if x is o)
        return names[0] if names else None

    def op_kill():
        """kill -9 of the worker: a successor takes the connection over."""
        if held and held_limited:
            return None
        old = vol.kill_worker()
        vol.wait_new_worker(old, timeout=120)
        kills[0] += 1
        return None

    def op_link():
        rel = pick("node")
        if not rel or (held_limited and held_obj(model.files[rel])):
            return None
        dst = fresh(any_dir())
        if os.environ.get("FCACHE_MODEL_TRACE"):
            print(f"# link {rel} -> {dst}", flush=True)
        os.link(v(rel), v(dst))
        model.files[dst] = model.files[rel]
        return dst

    def op_unlink():
        rel = pick(rnd.choice(["node", "link"]))
        if not rel or (rel in model.files and not keeps_held(model.files[rel])):
            return None
        if os.environ.get("FCACHE_MODEL_TRACE"):
            print(f"# unlink {rel}", flush=True)
        os.unlink(v(rel))
        model.files.pop(rel, None)
        model.links.pop(rel, None)
        return None

    def op_mkdir():
        rel = fresh(any_dir())
        os.mkdir(v(rel), 0o755)
        model.dirs[rel] = 0o755
        return None

    def op_rmdir():
        empty = [d for d in model.dirs if d and not model.children(d)]
        if not empty:
            return None
        rel = rnd.choice(sorted(empty))
        if os.environ.get("FCACHE_MODEL_TRACE"):
            print(f"# rmdir {rel}", flush=True)
        os.rmdir(v(rel))
        del model.dirs[rel]
        return None

    def op_symlink():
        rel = fresh(any_dir())
        target = f"target-{counter[0]}"
        os.symlink(target, v(rel))
        model.links[rel] = target
        return rel

    def op_chmod():
        rel = pick("node")
        if not rel:
            return None
        mode = rnd.choice([0o600, 0o640, 0o644, 0o755])
        os.chmod(v(rel), mode)
        model.files[rel].mode = mode
        return rel

    def op_utimens():
        rel = pick("file")
        if not rel:
            return None
        t = rnd.randrange(1000000000, 1700000000)
        os.utime(v(rel), (t, t))
        model.files[rel].mtime = t
        eq(int(os.stat(v(rel)).st_mtime), t, f"utimens {rel}")
        return rel

    def op_fsync():
        rel = pick("file")
        if not rel:
            return None
        fd = os.open(v(rel), os.O_RDWR)
        os.fsync(fd)
        os.close(fd)
        return rel


    def check_backing(what, only=None):
        """The backing holds every change the model has (only: that name),
        but for objects held open for writing (their writes are shipped at
        their close)."""
        busy = [h[1] for h in held]
        if only is None:
            seen = set()
            for dirpath, dirnames, filenames in os.walk(b("")):
                for name in dirnames + filenames:
                    # sshfs's name for a file removed while open (a held
                    # one, or the view's own descriptor), until its close.
                    if not (server and held and name.startswith(".fuse_hidden")):
                        seen.add(os.path.relpath(os.path.join(dirpath, name), b("")))
            want = model.names() - {""}
            eq((sorted(seen - want), sorted(want - seen)), ([], []),
               f"{what}: the backing has the names the model has (extra, missing)")
        inode_of = {}
        for n, o in sorted(model.files.items()):
            if (only is not None and n != only) or not os.path.lexists(b(n)):
                continue
            st = os.lstat(b(n))
            if o.data is None:
                check(stat.S_ISFIFO(st.st_mode), f"{what}: backing: {n} is a FIFO")
            elif not any(x is o for x in busy):
                eq(read_file(b(n)), o.data, f"{what}: backing: {n} content")
            eq(stat.S_IMODE(st.st_mode), o.mode, f"{what}: backing: {n} mode")
            if o.mtime is not None and not any(x is o for x in busy):
                eq(int(st.st_mtime), o.mtime, f"{what}: backing: {n} mtime")
            prev = inode_of.setdefault(id(o), st.st_ino)
            eq(prev, st.st_ino, f"{what}: backing: {n} is the same inode as its other links")
        for n, t in sorted(model.links.items()):
            if only is None or n == only:
                eq(os.readlink(b(n)) if os.path.islink(b(n)) else None, t, f"{what}: backing: symlink {n}")
        for n in sorted(model.dirs):
            if only is None or n == only:
                check(os.path.isdir(b(n)), f"{what}: backing: directory {n or '.'}")

    def op_sync():
        """Write-back: `sync` (or `sync PATH` of one name) ships what was
        acknowledged; the backing then holds it."""
        if offline:
            return None
        names = sorted(model.names() - {""})
        rel = rnd.choice(names) if names and rnd.random() < 0.5 else None
        trace(f"sync {rel or 'everything'}")
        q = vol.ctl("sync", f"m/{rel}" if rel else None, ok=False)
        eq(q["_rc"], 0, f"sync {rel or ''} succeeds ({q['_err']})")
        conflicts = vol.state().get("conflicts", "0")
        eq(conflicts, "0", f"sync {rel or ''}: no conflict")
        if conflicts != "0":
            for line in vol.ctl("query conflicts")["_lines"]:
                print(f"# {line}")
        check_backing(f"after sync {rel or ''}", only=rel)
        return None

    ops = [(op_create, 10), (op_write, 12), (op_truncate, 4), (op_rename, 10), (op_link, 4),
           (op_unlink, 5), (op_mkdir, 4), (op_rmdir, 2), (op_symlink, 3), (op_chmod, 4),
           (op_utimens, 3), (op_fsync, 3), (op_exchange, 2), (op_mkfifo, 2), (op_kill, 1),
           (op_hold, 3), (op_held_write, 6), (op_held_truncate, 2), (op_held_read, 3),
           (op_held_close, 2), (op_sync, 3 if writeback else 0)]
    if not held_mode:
        ops = [(f, w) for f, w in ops if f.__name__[3:7] != "hold" and
               not f.__name__.startswith("op_held")]
    if server:
        ops = [(f, w) for f, w in ops if f not in (op_mkfifo, op_link, op_exchange)]
    walks_mode = os.environ.get("FCACHE_MODEL_WALKS")
    if walks_mode and walks_mode != "all":
        ops = [(f, w) for f, w in ops if f not in (op_link, op_exchange)]
    fns = [f for f, w in ops for _ in range(w)]
    switches = remounts = 0
    walks = [0]
    walking = threading.Event()

    def walk_again_and_again():
        """Pin walks one after another, offline too (refused there), through
        kill -9s (the walk's answer lost): only the mirror they leave counts."""
        while walking.is_set():
            q = vol.ctl("pin recursive", "m", ok=False)
            walks[0] += q["_rc"] == 0
    walker = threading.Thread(target=walk_again_and_again)
    if walks_mode:
        walking.set()
        walker.start()
    for i in range(nops):
        if rnd.random() < 0.05:
            if offline:
                q = vol.ctl("reconnect", ok=False)
                if q["_rc"] != 0:
                    check(False, f"op {i}: reconnect: {q['_err']}")
                    break
                eq(q.get("conflicts"), "0", f"op {i}: reconnect without conflicts")
                if q.get("conflicts") != "0":
                    for line in vol.ctl("query conflicts")["_lines"]:
                        print(f"# {line}")
            else:
                vol.ctl("disconnect")
                if server and rnd.random() < 0.5:
                    trace("sshfs mounted again")
                    server.remount(rnd, not held)
                    remounts += 1
            offline = not offline
            switches += 1
            eq(vol.state()["state"], "offline" if offline else connected,
               f"op {i}: state after the switch")
        fn = rnd.choice(fns)
        what = f"op {i} {fn.__name__[3:]} ({'offline' if offline else connected})"
        try:
            rel = fn()
        except OSError as e:
            check(False, f"{what}: {e}")
            break
        if os.environ.get("FCACHE_MODEL_TRACE"):
            print(f"# {what} -> {rel}", flush=True)
        try:
            if rel:
                verify(rel, what)
            if i % 25 == 0 or os.environ.get("FCACHE_MODEL_SWEEP"):
                for n in sorted(model.files):
                    verify(n, f"{what}, sweep")
        except OSError as e:
            check(False, f"{what}: reading back: {e}")
            break
        if failures_at:
            break
    walking.clear()
    if walker.is_alive():
        walker.join()
    print(f"# {switches} switches, {remounts} sshfs mounted again, {kills[0]} workers killed,"
          f" {walks[0]} walks beside", flush=True)
    for h in held:
        try:
            os.close(h[0])
        except OSError as e:
            check(False, f"close of a descriptor held open: {e}")
    held.clear()
    if offline:
        q = vol.ctl("reconnect", ok=False)
        eq((q["_rc"], q.get("conflicts")), (0, "0"),
           f"final reconnect without conflicts ({q['_err']})")
    for n in sorted(model.files):
        verify(n, "after the last reconnect")
    if writeback:
        q = vol.ctl("sync", ok=False)
        eq(q["_rc"], 0, f"the last sync succeeds ({q['_err']})")

    check_backing("after the last reconnect")
    if failures_at:
        print(f"# first wrong read at {failures_at[0]}; seed {seed}")
    finish()


if __name__ == "__main__":
    main()
