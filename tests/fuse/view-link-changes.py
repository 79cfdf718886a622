#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Changes through a cut link (linklib: sshfs through a relay adding 10 ms
of round trip, the relay frozen for the cut), BackingTimeout=2s, on a
pinned subtree: seeded random rounds of creates, writes, mkdir, rename
(also over another file), unlink, rmdir, chmod, utimens, symlink, link,
setxattr and readdir against an in-memory model, the link cut silently for
FCACHE_LINK_CUT_S (default 12) seconds after 3 s of each round, which ends
as the link returns.  Every
call returns (a hang guard of 90 s, not a timing assertion; the longest
call is reported) and none fails but as the model expects; the volume goes
offline and reconnects by itself once the link is back; then the server's
tree equals the model and there is no conflict: a change the server got
although its call had timed out (then made again offline) is recognised by
the replay as done.

FCACHE_LINKCH_SEED=N reruns a seed, FCACHE_LINKCH_ROUNDS=N (default 2),
FCACHE_LINKCH_TRACE=1 prints each operation."""
import os
import random
import stat
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linklib  # noqa: E402
from viewlib import Volume, check, eq, finish, read_file, require_root_fuse, wait_for, write_file  # noqa: E402

CUT_S = float(os.environ.get("FCACHE_LINK_CUT_S", "12"))
TIMEOUT_S = 2
HANG_S = 90
# A call in flight this long gets the worker's stacks taken, printed if the
# round fails (a diagnosis for a run elsewhere, not a bound).
SLOW_S = 4 * TIMEOUT_S + 1
TRACE = os.environ.get("FCACHE_LINKCH_TRACE") == "1"
# Replay recognises objects by inode number: sshfs keeps its numbers.
SSHFS_OPTIONS = linklib.SSHFS_OPTIONS + ",noforget"


class Model:
    """What the pinned tree holds: files (bytes, mode; hard links share one
    entry), directories, symlinks, and each file's user xattr."""

    def __init__(self):
        self.files = {}         # rel -> [data, mode, xattr or None]
        self.dirs = {""}
        self.links = {}         # rel -> target

    def names(self):
        return set(self.files) | self.dirs | set(self.links)

    def children(self, d):
        pre = d + "/" if d else ""
        return sorted(n[len(pre):] for n in self.names()
                      if n.startswith(pre) and n != d and "/" not in n[len(pre):])


class Changer(threading.Thread):
    """Random changes on the model, one call at a time, until stopped."""

    def __init__(self, vol, model, rnd, xattrs):
        super().__init__(name="changer", daemon=True)
        self.vol, self.m, self.rnd, self.xattrs = vol, model, rnd, xattrs
        self.stop = threading.Event()
        self.errors, self.calls, self.longest, self.longest_op = [], 0, 0.0, ""
        self.began = None       # when the call under way began (None: none)
        self.counter = 0
        # sshfs gives each name of a hard link an inode number of its own,
        # and replay knows objects by theirs: links made offline end as
        # conflicts over sshfs whatever the cut does (FCACHE_LINKCH_LINKS=1
        # puts them in).
        self.link_weight = 2 if os.environ.get("FCACHE_LINKCH_LINKS") == "1" else 0

    def v(self, rel):
        return self.vol.v("proj", rel) if rel else self.vol.v("proj")

    def fresh(self, parent):
        self.counter += 1
        return f"{parent}/n{self.counter}" if parent else f"n{self.counter}"

    def pick_file(self):
        names = sorted(self.m.files)
        return self.rnd.choice(names) if names else None

    def any_dir(self):
        """A directory to make something in: at most three deep."""
        return self.rnd.choice(sorted(d for d in self.m.dirs if d.count("/") < 2))

    def op_create(self):
        rel = self.fresh(self.any_dir())
        data = self.rnd.randbytes(self.rnd.randrange(0, 6000))
        fd = os.open(self.v(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self.m.files[rel] = [data, 0o644, None]
        return f"create {rel}"

    def op_write(self):
        rel = self.pick_file()
        if not rel:
            return None
        f = self.m.files[rel]
        off = self.rnd.randrange(0, len(f[0]) + 50)
        data = self.rnd.randbytes(self.rnd.randrange(1, 3000))
        fd = os.open(self.v(rel), os.O_WRONLY)
        try:
            os.pwrite(fd, data, off)
        finally:
            os.close(fd)
        buf = f[0].ljust(off, b"\0")
        f[0] = buf[:off] + data + buf[off + len(data):]
        return f"write {rel}"

    def op_mkdir(self):
        rel = self.fresh(self.any_dir())
        os.mkdir(self.v(rel), 0o755)
        self.m.dirs.add(rel)
        return f"mkdir {rel}"

    def op_rename(self):
        kind = self.rnd.choice(["file", "file", "file", "dir", "link"])
        pool = sorted(self.m.files if kind == "file" else self.m.links if kind == "link"
                      else (d for d in self.m.dirs if d))
        if not pool:
            return None
        rel = self.rnd.choice(pool)
        if kind == "file" and self.rnd.random() < 0.4:
            dst = self.pick_file()     # over another file
            if dst is None or self.m.files[dst] is self.m.files[rel]:
                return None
        else:
            parent = self.any_dir()
            if kind == "dir" and (parent == rel or parent.startswith(rel + "/")):
                return None
            dst = self.fresh(parent)
        os.rename(self.v(rel), self.v(dst))
        if kind == "dir":
            for p in (self.m.files, self.m.links):
                for n in sorted(p):
                    if n.startswith(rel + "/"):
                        p[dst + n[len(rel):]] = p.pop(n)
            for n in sorted(self.m.dirs):
                if n == rel or n.startswith(rel + "/"):
                    self.m.dirs.discard(n)
                    self.m.dirs.add(dst + n[len(rel):])
        else:
            p = self.m.files if kind == "file" else self.m.links
            p.pop(dst, None)
            p[dst] = p.pop(rel)
        return f"rename {rel} {dst}"

    def op_unlink(self):
        names = sorted(set(self.m.files) | set(self.m.links))
        if not names:
            return None
        rel = self.rnd.choice(names)
        os.unlink(self.v(rel))
        self.m.files.pop(rel, None)
        self.m.links.pop(rel, None)
        return f"unlink {rel}"

    def op_rmdir(self):
        empty = sorted(d for d in self.m.dirs if d and not self.m.children(d))
        if not empty:
            return None
        rel = self.rnd.choice(empty)
        os.rmdir(self.v(rel))
        self.m.dirs.discard(rel)
        return f"rmdir {rel}"

    def op_chmod(self):
        rel = self.pick_file()
        if not rel:
            return None
        mode = self.rnd.choice([0o600, 0o640, 0o644, 0o755])
        os.chmod(self.v(rel), mode)
        self.m.files[rel][1] = mode
        return f"chmod {rel} {mode:o}"

    def op_utimens(self):
        rel = self.pick_file()
        if not rel:
            return None
        t = self.rnd.randrange(1000000000, 1700000000)
        os.utime(self.v(rel), (t, t))
        return f"utimens {rel}"

    def op_symlink(self):
        rel = self.fresh(self.any_dir())
        target = f"target-{self.counter}"
        os.symlink(target, self.v(rel))
        self.m.links[rel] = target
        return f"symlink {rel}"

    def op_link(self):
        rel = self.pick_file()
        if not rel:
            return None
        dst = self.fresh(self.any_dir())
        os.link(self.v(rel), self.v(dst))
        self.m.files[dst] = self.m.files[rel]
        return f"link {rel} {dst}"

    def op_setxattr(self):
        rel = self.pick_file()
        if not rel or not self.xattrs:
            return None
        val = b"v%d" % self.rnd.randrange(1000)
        os.setxattr(self.v(rel), "user.fcache-test", val)
        self.m.files[rel][2] = val
        return f"setxattr {rel}"

    def op_readdir(self):
        d = self.any_dir()
        got = sorted(os.listdir(self.v(d)))
        want = self.m.children(d)
        if got != want:
            raise OSError(0, f"readdir {d!r}: {got} != model {want}")
        return f"readdir {d}"

    def run(self):
        ops = [(self.op_create, 10), (self.op_write, 8), (self.op_mkdir, 4), (self.op_rename, 8),
               (self.op_unlink, 5), (self.op_rmdir, 2), (self.op_chmod, 4), (self.op_utimens, 3),
               (self.op_symlink, 3), (self.op_link, self.link_weight), (self.op_setxattr, 3),
               (self.op_readdir, 6)]
        fns = [f for f, w in ops for _ in range(w)]
        while not self.stop.is_set():
            fn = self.rnd.choice(fns)
            t = time.monotonic()
            self.began = t
            try:
                what = fn()
            except OSError as e:
                what = None
                self.errors.append(f"{fn.__name__[3:]}: {e}")
            took = time.monotonic() - t
            self.began = None
            if what and TRACE:
                print(f"# {what} ({took:.2f} s)", flush=True)
            if took > self.longest:
                self.longest, self.longest_op = took, what or fn.__name__[3:]
            self.calls += 1
            # A pace a person's tools might keep: the replay of what a
            # 12 s cut gathers stays within the reconnect's wait below.
            time.sleep(0.05)


def server_tree(top):
    """What the server has under top: files (data, mode, xattr), dirs, symlinks."""
    files, dirs, links = {}, {""}, {}
    for root, dnames, fnames in os.walk(top):
        rel_root = os.path.relpath(root, top)
        rel_root = "" if rel_root == "." else rel_root
        for n in dnames + fnames:
            rel = f"{rel_root}/{n}" if rel_root else n
            p = os.path.join(top, rel)
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                dirs.add(rel)
            elif stat.S_ISLNK(st.st_mode):
                links[rel] = os.readlink(p)
            else:
                try:
                    x = os.getxattr(p, "user.fcache-test")
                except OSError:
                    x = None
                files[rel] = (read_file(p), stat.S_IMODE(st.st_mode), x)
    return files, dirs, links


def main():
    require_root_fuse()
    seed = int(os.environ.get("FCACHE_LINKCH_SEED", random.randrange(1 << 32)))
    rounds = int(os.environ.get("FCACHE_LINKCH_ROUNDS", "2"))
    print(f"# seed {seed} (FCACHE_LINKCH_SEED={seed} to rerun), {rounds} rounds", flush=True)
    rnd = random.Random(seed)
    vol = Volume("linkch", lease="2s", extra=["--set", f"BackingTimeout={TIMEOUT_S}s"])
    link = linklib.volume_over_link(vol, 5, SSHFS_OPTIONS)
    proj = os.path.join(link.server, "proj")
    os.makedirs(os.path.join(proj, "d0"))
    model = Model()
    model.dirs.add("d0")
    for i in range(6):
        rel = f"d0/f{i}" if i % 2 else f"f{i}"
        data = rnd.randbytes(rnd.randrange(100, 4000))
        write_file(os.path.join(proj, rel), data)
        os.chmod(os.path.join(proj, rel), 0o644)
        model.files[rel] = [data, 0o644, None]
    vol.start()
    eq(vol.ctl("pin recursive", "proj").get("mirrored"), "yes", "the pinned subtree is mirrored")
    # Whether the server keeps user xattrs through sshfs (else setxattr is left out).
    try:
        os.setxattr(os.path.join(vol.backing, "proj", "f0"), "user.fcache-probe", b"1")
        os.removexattr(os.path.join(vol.backing, "proj", "f0"), "user.fcache-probe")
        xattrs = True
    except OSError:
        xattrs = False
    print(f"# xattrs through sshfs: {'yes' if xattrs else 'no (setxattr left out)'}", flush=True)

    longest, longest_op, calls = 0.0, "", 0
    for rnd_i in range(rounds):
        ch = Changer(vol, model, rnd, xattrs)
        ch.counter = 1000 * (rnd_i + 1)
        ch.start()
        time.sleep(3)
        link.cut()
        cut_at = time.monotonic()
        states, hung, stacks = set(), False, []

        def note_slow():
            began = ch.began
            if stacks or began is None or time.monotonic() - began < SLOW_S:
                return
            r = subprocess.run([sys.executable, os.path.join(os.path.dirname(
                os.path.abspath(__file__)), "stackscan.py"), str(vol.worker_pid())],
                capture_output=True, text=True, timeout=120)
            stacks.append(f"a call in flight for {time.monotonic() - began:.1f} s:\n" + r.stdout)
        while time.monotonic() - cut_at < CUT_S:
            states.add(vol.state()["state"])
            note_slow()
            time.sleep(0.2)
        # The changes stop as the link returns: a change made online while the
        # mirror's resync after the reconnect walks may miss the mirror (a
        # name made in a directory the resync has not given its server
        # identity yet; view-reconnect-serve covers changes during a reconnect).
        link.restore()
        ch.stop.set()
        back = wait_for(lambda: vol.state()["state"] == "online", 90)
        # A generous guard against a call that never returns, not a bound.
        while ch.is_alive():
            ch.join(1)
            note_slow()
            if ch.began is not None and time.monotonic() - ch.began > HANG_S:
                hung = True
                break
        check(not hung, f"round {rnd_i}: every call returned (none hung for {HANG_S} s)")
        if hung:
            finish()
            return
        print(f"# round {rnd_i}: {ch.calls} calls, longest {ch.longest:.2f} s ({ch.longest_op});"
              f" states while cut: {sorted(states)}", flush=True)
        longest, calls = max(longest, ch.longest), calls + ch.calls
        if ch.longest >= longest:
            longest_op = ch.longest_op
        for e in ch.errors:
            print(f"# failed: {e}")
        if stacks and (ch.errors or ch.longest >= SLOW_S):
            for line in stacks[0].splitlines():
                print(f"# {line}")
        if ch.errors:
            for line in vol.logtext().splitlines()[-40:]:
                print(f"# log: {line}")
        eq(ch.errors, [], f"round {rnd_i}: no call failed through the cut")
        check("offline" in states, f"round {rnd_i}: the volume went offline while the link was cut")
        check(back, f"round {rnd_i}: after the link returned the volume reconnected by itself")
        st = vol.state()
        # Reported, not failed, unless FCACHE_LINKCH_STRICT=1: a change in
        # flight at the cut that comes back as a conflict at the reconnect
        # (its bytes kept in the conflict, the object's later records held
        # behind it), the server then differing from the model.  The causes
        # found are fixed (none seen since); view.md's Not done yet keeps the
        # ones known (a truncate the mirror lacks).  Without a conflict every
        # check holds.
        conflicted = st.get("conflicts") != "0"
        todo = conflicted and os.environ.get("FCACHE_LINKCH_STRICT") != "1"
        why = " # TODO a change in flight at the cut came back as a conflict"

        def same(got, want, what):
            if not todo:
                eq(got, want, what)
            else:
                print(f"{'ok' if got == want else 'not ok'} - {what}{why}")
        same(st.get("conflicts"), "0", f"round {rnd_i}: no conflicts")
        if conflicted:
            for line in vol.ctl("query conflicts")["_lines"]:
                print(f"# {line}")
        files, dirs, links = server_tree(proj)
        want = {rel: (f[0], f[1], f[2] if xattrs else None) for rel, f in model.files.items()}
        if not xattrs:
            files = {rel: (f[0], f[1], None) for rel, f in files.items()}
        same(sorted(dirs), sorted(model.dirs), f"round {rnd_i}: the server's directories")
        same(links, model.links, f"round {rnd_i}: the server's symlinks")
        same(sorted(files), sorted(want), f"round {rnd_i}: the server's file names")
        bad = [rel for rel in sorted(want) if files.get(rel) != want[rel]]
        same(bad, [], f"round {rnd_i}: every file's content, mode and xattr on the server")
        if todo:
            # The held records stay pending: later rounds would only compare
            # against them again.
            break
        time.sleep(3)   # the mirror's resync after the reconnect (see above)
    print(f"# {rounds} rounds, {calls} calls, link cut {CUT_S:.0f} s, BackingTimeout {TIMEOUT_S} s:"
          f" longest call {longest:.2f} s ({longest_op})", flush=True)
    finish()


if __name__ == "__main__":
    main()
