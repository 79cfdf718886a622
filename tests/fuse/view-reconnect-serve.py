#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Changes keep working during a reconnect, and a reconnect whose server
stops answering gives up without holding them, randomized.

Over a slow link (linklib: sshfs through a relay), a volume offline with
many logged changes reconnects while a writer keeps creating, appending to
and renaming pinned files.  Writer operations complete while `query state`
still says "reintegrating" (counted, no timing asserted), and at the end
the server holds every acknowledged change once: each file as the model
says, appends in order, no conflict, no leftover.

Then the link is cut silently in the middle of a reconnect (the relay
stopped with SIGSTOP: calls in flight hang): the reconnect gives up after
BackingTimeout without progress, the volume is offline, the writer's
changes go on meanwhile, and once the link is back the volume reconnects
by itself and the server again equals the model: nothing replayed twice,
nothing lost.  A disconnect during a reconnect stops it, and the next
reconnect finishes it.  FCACHE_TEST_SEED repeats a run.
"""
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linklib  # noqa: E402
from viewlib import (Volume, check, eq, finish, require_root_fuse, tree,  # noqa: E402
                     wait_for, write_file)

TIMEOUT_S = 3
# SFTP has no inode numbers: sshfs makes its own, and a file's changes once
# the kernel forgot it.  Replay recognizes objects by inode number (as on
# NFS or SMB with serverino), so sshfs keeps its numbers for the mount's life.
SSHFS_OPTIONS = linklib.SSHFS_OPTIONS + ",noforget"
OP_BOUND_S = 60     # a writer operation that takes longer is reported as hung


class Writer:
    """Changes to pinned files in proj/w, one at a time, and the model of
    what the server must end up with (the acknowledged ones)."""

    def __init__(self, vol, rnd, tag):
        self.vol, self.rnd, self.tag = vol, rnd, tag
        self.model = {}         # name -> bytes
        self.n = 0
        self.during = 0         # operations begun and ended while reintegrating
        self.ops = 0
        self.hung = None
        self.errors = []
        self.stop = threading.Event()
        self.thread = None

    def path(self, name):
        return self.vol.v("proj", "w", name)

    def one(self):
        r = self.rnd.random()
        self.n += 1
        if r < 0.35 or len(self.model) < 3:
            name = f"{self.tag}-c{self.n:05d}"
            data = self.rnd.randbytes(self.rnd.randrange(0, 3000))
            write_file(self.path(name), data)
            self.model[name] = data
        elif r < 0.8:
            name = self.rnd.choice(sorted(self.model))
            line = b"append %d to %s\n" % (self.n, name.encode())
            with open(self.path(name), "ab") as f:
                f.write(line)
            self.model[name] += line
        else:
            old = self.rnd.choice(sorted(self.model))
            new = f"{self.tag}-r{self.n:05d}"
            os.rename(self.path(old), self.path(new))
            self.model[new] = self.model.pop(old)

    def reintegrating(self):
        try:
            return self.vol.state().get("state") == "reintegrating"
        except RuntimeError:
            return False

    def run(self):
        while not self.stop.is_set():
            before = self.reintegrating()
            try:
                self.one()
            except OSError as e:
                self.errors.append(f"op {self.n}: {e}")
                return
            self.ops += 1
            if before and self.reintegrating():
                self.during += 1
            time.sleep(0.01)    # an application's pace: the replay catches up

    def start(self):
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def finish(self):
        """Stops the writer; False when its operation in progress hung."""
        self.stop.set()
        self.thread.join(OP_BOUND_S)
        return not self.thread.is_alive()


def in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.update(r=fn()), daemon=True)
    t.start()
    return t, out


def replaying(vol, n):
    """The reconnect is replaying and has done more than n records."""
    s = vol.state()
    return s["state"] == "reintegrating" and int(s.get("reintegration_done", "0")) > n


def server_tree(link):
    return tree(os.path.join(link.server, "proj"))


def expected_tree(base, offline, writer):
    """The server's proj as it must be: the files, those made offline, the writer's."""
    want = dict(base)
    for name, data in offline.items():
        want[name] = ("file", 0o644, data)
    for name, data in writer.model.items():
        want[os.path.join("w", name)] = ("file", 0o644, data)
    return want


def compare(got, want, what):
    # Modes are the umask's on both sides: content and names are what matter here.
    g = {k: (t, c) for k, (t, _, c) in got.items()}
    w = {k: (t, c) for k, (t, _, c) in want.items()}
    extra = sorted(set(g) - set(w))[:5]
    missing = sorted(set(w) - set(g))[:5]
    differ = sorted(k for k in set(g) & set(w) if g[k] != w[k])[:5]
    check(g == w, f"{what}" + ("" if g == w else
                              f": extra {extra}, missing {missing}, differ {differ}"))


def offline_changes(vol, rnd, tag, count):
    """Files made and edited offline (in proj/o): name -> bytes."""
    made = {}
    for i in range(count):
        name = os.path.join("o", f"{tag}{i:04d}")
        data = rnd.randbytes(rnd.randrange(0, 4000))
        write_file(vol.v("proj", name), data)
        made[name] = data
    for name in rnd.sample(sorted(made), count // 5):
        made[name] += b"edited offline\n"
        with open(vol.v("proj", name), "ab") as f:
            f.write(b"edited offline\n")
    return made


def no_conflict(vol, what):
    n = vol.state().get("conflicts")
    eq(n, "0", what)
    if n != "0":
        for line in vol.ctl("query conflicts", ok=False)["_lines"][:12]:
            print("# " + line)


def resync_cut(vol, link, base, offline, writer):
    """The link cut silently while the mirror resyncs after a replay: the
    volume goes offline (BackingTimeout, a generous bound asserted), the
    reconnect answers, and with the link back it reconnects by itself and
    the server and the view equal the model."""
    eq(vol.ctl("disconnect")["state"], "offline", "resync: disconnect")
    # Server-side changes the resync must copy: enough to be caught at it.
    for attempt in range(3):
        n = 400 * (attempt + 1)
        for i in range(n):
            name = os.path.join("s", f"s{i:04d}")
            data = b"%d changed on the server %d\n" % (i, attempt) * 800
            write_file(os.path.join(link.server, "proj", name), data)
            base[name] = ("file", 0o644, data)
        write_file(vol.v("proj", "o", f"resync{attempt}"), b"offline %d\n" % attempt)
        offline[os.path.join("o", f"resync{attempt}")] = b"offline %d\n" % attempt
        t, out = in_thread(lambda: vol.ctl("reconnect", ok=False, timeout=900))
        caught = False
        # Online (the replay done) while the reconnect still runs: the resync.
        while t.is_alive():
            if vol.state()["state"] == "online":
                link.cut()
                caught = True
                break
            time.sleep(0.02)
        if caught:
            break
        print(f"# resync: over before the cut with {n} files; more")
        eq(vol.ctl("disconnect")["state"], "offline", "resync: disconnect again")
    check(caught, "resync: the link is cut while the mirror resyncs")
    cut_at = time.time()
    t.join(TIMEOUT_S + 120)
    check(not t.is_alive(), "resync: the reconnect answers with the link cut")
    check(wait_for(lambda: vol.state()["state"] == "offline", TIMEOUT_S + 120),
          "resync: the volume goes offline while the link is cut")
    print(f"# resync: offline {time.time() - cut_at:.1f} s after the cut"
          f" (BackingTimeout {TIMEOUT_S} s)")
    check("did not answer within BackingTimeout" in vol.ctl("query state").get(
        "offline_reason", ""), "resync: query state says why")
    link.restore()
    check(wait_for(lambda: vol.state()["state"] == "online", 600),
          "resync: with the link back the volume reconnects by itself")
    no_conflict(vol, "resync: no conflict")
    compare(server_tree(link), expected_tree(base, offline, writer),
            "resync: the server equals the model")
    names = sorted(k for k in base if k.startswith("s/"))
    bad = [k for k in names[::37] if open(vol.v("proj", k), "rb").read() != base[k][2]]
    eq(bad, [], "resync: the view reads the server's files")


def main():
    require_root_fuse()
    seed = int(os.environ.get("FCACHE_TEST_SEED", random.randrange(1 << 30)))
    print(f"# seed {seed}")
    rnd = random.Random(seed)
    vol = Volume("reconnserve", lease="1s",
                 extra=["--set", f"BackingTimeout={TIMEOUT_S}s", "--set", "FetchThreads=4"])
    link = linklib.volume_over_link(vol, 10, SSHFS_OPTIONS)
    proj = os.path.join(link.server, "proj")
    for d in ("o", "w", "s"):
        os.makedirs(os.path.join(proj, d))
    for i in range(10):
        write_file(os.path.join(proj, f"base{i}"), b"base %d\n" % i)
    vol.start()
    eq(vol.ctl("pin recursive", "proj", timeout=300).get("mirrored"), "yes", "pinned over the link")
    base = {k: v for k, v in server_tree(link).items() if not k.startswith(("o/", "w/"))}

    # 1. Changes during a reconnect.
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect")
    offline = offline_changes(vol, rnd, "a", 200)
    writer = Writer(vol, rnd, "a")
    for _ in range(5):
        writer.one()            # offline, before the reconnect
    t, out = in_thread(lambda: vol.ctl("reconnect", ok=False, timeout=900))
    check(wait_for(lambda: vol.state()["state"] != "offline", 60), "the reconnect starts")
    writer.start()
    t.join(900)
    check(not t.is_alive(), "the reconnect ends")
    time.sleep(0.5)             # a few operations online too
    check(writer.finish(), "the writer's operations complete (none hung)")
    eq(writer.errors, [], "the writer's operations succeed")
    r = out.get("r", {})
    eq(r.get("_rc"), 0, f"reconnect ({r.get('_err')})")
    print(f"# writer: {writer.ops} operations, {writer.during} begun and ended while"
          f" reintegrating")
    check(writer.during > 0, "writer operations complete while query state says the reconnect"
          " is running")
    check(wait_for(lambda: vol.state()["state"] == "online", 120), "online after the reconnect")
    no_conflict(vol, "no conflict")
    compare(server_tree(link), expected_tree(base, offline, writer),
            "the server holds every acknowledged change once, appends in order")

    # 2. The link cut silently in the middle of a reconnect; offline edits go
    # on and nothing is replayed twice.
    for round_, how in enumerate(("frozen", "reset")):
        eq(vol.ctl("disconnect")["state"], "offline", f"{how}: disconnect")
        offline.update(offline_changes(vol, rnd, f"b{round_}-", 200))
        writer.tag = f"b{round_}"
        for _ in range(5):
            writer.one()
        t, out = in_thread(lambda: vol.ctl("reconnect", ok=False, timeout=900))
        moved = wait_for(lambda: replaying(vol, 20), 300)
        check(moved, f"{how}: the reconnect is replaying")
        writer.stop.clear()
        writer.start()
        if how == "frozen":
            link.cut()
        else:
            link.stop_relay()   # connections reset, records in flight in doubt
        t.join(300)
        check(not t.is_alive(), f"{how}: the reconnect gives up")
        r = out.get("r", {})
        print(f"# {how}: reconnect rc {r.get('_rc')}: {r.get('_err')}")
        check(wait_for(lambda: vol.state()["state"] == "offline", 120),
              f"{how}: the volume is offline while the link is cut")
        ops = writer.ops
        check(wait_for(lambda: writer.ops >= ops + 20 or writer.errors, 120),
              f"{how}: offline edits go on while the link is cut")
        check(writer.finish(), f"{how}: the writer's operations complete (none hung)")
        eq(writer.errors, [], f"{how}: the writer's operations succeed")
        if how == "frozen":
            link.restore()
        else:
            link.start_relay()
        check(wait_for(lambda: vol.state()["state"] == "online", 600),
              f"{how}: with the link back the volume reconnects by itself")
        no_conflict(vol, f"{how}: no conflict (nothing replayed twice)")
        compare(server_tree(link), expected_tree(base, offline, writer),
                f"{how}: the server equals the model")

    resync_cut(vol, link, base, offline, writer)

    # 3. A disconnect during a reconnect stops it; the next one finishes it.
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect")
    offline.update(offline_changes(vol, rnd, "c", 200))
    t, out = in_thread(lambda: vol.ctl("reconnect", ok=False, timeout=900))
    check(wait_for(lambda: replaying(vol, 20), 300), "the reconnect is replaying")
    eq(vol.ctl("disconnect")["state"], "offline", "a disconnect during the reconnect answers")
    t.join(300)
    r = out.get("r", {})
    check(r.get("_rc") != 0 and "disconnect" in r.get("_err", ""),
          f"the reconnect stops, saying why ({r.get('_err')})")
    s = vol.state()
    check(s["state"] == "offline" and int(s.get("pending", "0")) > 0,
          f"offline with the rest pending ({s.get('state')}, {s.get('pending')})")
    eq(vol.ctl("reconnect", timeout=900)["state"], "online", "the next reconnect finishes")
    no_conflict(vol, "no conflict after the stopped reconnect")
    compare(server_tree(link), expected_tree(base, offline, writer),
            "the server equals the model after the stopped reconnect")
    finish()


if __name__ == "__main__":
    main()
