#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Requests that read (stat, open and read, readlink, getxattr, listing)
while the volume switches between online and offline get answers of one
tree, never a mix: a switch stores the new state before it moves the nodes,
and a request reading the state and a node apart could pair the state of
one tree with the descriptor of the other.

Reader processes loop over a pinned tree, each check against what the tree
holds: every name present, the right bytes, the symlink's target, the
xattr's value (or ENODATA: the mirror keeps no xattrs), the listing's
names; no other error.  Meanwhile:
  - on a tmpfs backing, the volume is switched by hand (disconnect,
    reconnect) many times (FCACHE_SWITCHES, default 40);
  - on a stacked FUSE backing (an inner fcache-view) frozen with SIGSTOP,
    the volume (BackingTimeout=2s) goes offline by itself, a forced switch
    that does not wait for the requests in the server's calls; each reader
    request must answer within a bound that only catches a hang
    (FCACHE_HUNG_BOUND, 60 s); the longest is reported.  Beside the
    readers, changers each rewrite a pinned file of their own and change
    its mode in turn, through the freeze: a change in flight at the forced
    switch must not call the frozen server unbounded; no change fails.
    The server then runs again and the volume reconnects by itself: the
    server holds each changer's last write and mode, no conflict
    (FCACHE_FREEZES rounds, default 3).
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import Volume, check, eq, finish, require_root_fuse, wait_for, write_file  # noqa: E402

TIMEOUT = 2
BOUND = float(os.environ.get("FCACHE_HUNG_BOUND", "60"))
SWITCHES = int(os.environ.get("FCACHE_SWITCHES", "40"))
FREEZES = int(os.environ.get("FCACHE_FREEZES", "3"))
READERS = 4

FILES = {f"f{i}": (f"file {i} ".encode() * (200 + 37 * i)) for i in range(8)}
SUBFILES = {f"s{i}": (f"sub {i} ".encode() * (50 + i)) for i in range(4)}
LINKS = {f"l{i}": f"target-{i}" for i in range(4)}
XATTR = ("user.sw", b"the xattr value")

# A reader: loops over the tree until the stop file exists; prints one JSON
# line: its errors, how many checks, its longest request and which.
READER = r'''
import errno, json, os, random, sys, time
stop, root, spec, seed = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(seed)
errors, n, longest, which = [], 0, 0.0, ""
names = sorted(spec["files"]) + sorted(spec["links"]) + ["d"]
def one(op, name):
    p = os.path.join(root, name)
    if op == "stat":
        os.lstat(p)
    elif op == "read":
        fd = os.open(p, os.O_RDONLY)
        try:
            data = b""
            while True:
                b = os.read(fd, 65536)
                if not b:
                    break
                data += b
        finally:
            os.close(fd)
        want = spec["files"].get(name) or spec["subfiles"][os.path.basename(name)]
        if data != want.encode("latin-1"):
            return f"wrong bytes ({len(data)} of {len(want)})"
    elif op == "readlink":
        t = os.readlink(p)
        if t != spec["links"][name]:
            return f"wrong target {t!r}"
    elif op == "getxattr":
        try:
            val = os.getxattr(p, spec["xattr"][0])
            if val != spec["xattr"][1].encode():
                return f"wrong xattr {val!r}"
        except OSError as e:
            if e.errno != errno.ENODATA:    # offline: the mirror keeps none
                raise
    elif op == "list":
        got = sorted(os.listdir(p))
        want = sorted(spec["subfiles"]) if name == "d" else sorted(names)
        if got != want:
            return f"listing {got}"
    return None
while not os.path.exists(stop):
    op = rnd.choice(["stat", "read", "readlink", "getxattr", "list"])
    if op == "read":
        name = rnd.choice(sorted(spec["files"]) + ["d/" + s for s in sorted(spec["subfiles"])])
    elif op == "readlink":
        name = rnd.choice(sorted(spec["links"]))
    elif op == "getxattr":
        name = rnd.choice(sorted(spec["files"]))
    elif op == "list":
        name = rnd.choice([".", "d"])
    else:
        name = rnd.choice(names + ["d/" + s for s in sorted(spec["subfiles"])])
    t = time.monotonic()
    try:
        bad = one(op, name)
    except OSError as e:
        bad = "error " + errno.errorcode.get(e.errno, str(e.errno))
    took = time.monotonic() - t
    if took > longest:
        longest, which = took, f"{op} {name}"
    n += 1
    if bad and len(errors) < 20:
        errors.append(f"{op} {name}: {bad}")
print(json.dumps({"errors": errors, "n": n, "longest": longest, "which": which}), flush=True)
'''


# A changer: rewrites its own pinned file and changes its mode, in turn,
# until the stop file exists; prints one JSON line: its errors, how many
# changes, its longest, and the last bytes and mode acknowledged.
CHANGER = r'''
import errno, json, os, sys, time
stop, path = sys.argv[1], sys.argv[2]
errors, n, longest, which, data, mode = [], 0, 0.0, "", None, None
while not os.path.exists(stop):
    n += 1
    for op in ("write", "chmod"):
        t = time.monotonic()
        try:
            if op == "write":
                want = (f"change {n} of {path}\n" * 40).encode()
                fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
                try:
                    if os.write(fd, want) != len(want):
                        raise OSError(errno.EIO, "short write")
                finally:
                    os.close(fd)
                data = want.decode()
            else:
                m = 0o640 if n % 2 else 0o604
                os.chmod(path, m)
                mode = m
        except OSError as e:
            if len(errors) < 20:
                errors.append(f"{op} {n}: " + errno.errorcode.get(e.errno, str(e.errno)))
        took = time.monotonic() - t
        if took > longest:
            longest, which = took, f"{op} {n}"
print(json.dumps({"errors": errors, "n": n, "longest": longest, "which": which,
                  "data": data, "mode": mode}), flush=True)
'''
CHANGERS = 2


def make_tree(top):
    os.makedirs(os.path.join(top, "proj", "d"))
    for name, data in FILES.items():
        write_file(os.path.join(top, "proj", name), data)
        os.setxattr(os.path.join(top, "proj", name), XATTR[0], XATTR[1])
    for name, data in SUBFILES.items():
        write_file(os.path.join(top, "proj", "d", name), data)
    for name, target in LINKS.items():
        os.symlink(target, os.path.join(top, "proj", name))
    os.makedirs(os.path.join(top, "work"))
    for i in range(CHANGERS):
        write_file(os.path.join(top, "work", f"c{i}"), b"as made\n")


def spec():
    return json.dumps({"files": {k: v.decode("latin-1") for k, v in FILES.items()},
                       "subfiles": {k: v.decode("latin-1") for k, v in SUBFILES.items()},
                       "links": LINKS, "xattr": [XATTR[0], XATTR[1].decode()]})


def dump_stuck(pids):
    """Debugging (FCACHE_READERS_DEBUG): each thread of pids blocked in a
    system call, with the call and the files of its first argument (then
    the worker's stacks, by stackscan.py)."""
    for pid in pids:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/stat") as f:
                    state = f.read().rpartition(")")[2].split()[0]
                with open(f"/proc/{pid}/task/{t}/syscall") as f:
                    sc = f.read().split()
                with open(f"/proc/{pid}/task/{t}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if state != "D" and (not sc or sc[0] in ("202", "7", "232", "281", "running")):
                continue        # futex, poll, epoll: waiting, not stuck in a call
            try:
                target = os.readlink(f"/proc/{pid}/fd/{int(sc[1], 16)}")
            except (OSError, ValueError, IndexError):
                target = "?"
            print(f"# stuck? pid {pid} tid {t} ({comm}) state {state} syscall {sc[:2]} fd -> "
                  f"{target}", flush=True)


class Workers:
    """Processes running a loop script until a stop file exists, each
    printing one JSON line at the end: its errors, how many checks, its
    longest request and which (and what the script adds)."""

    def __init__(self, vol, what, script, argvs):
        self.what = what
        self.vol = vol
        self.stop_file = os.path.join(vol.top, "stop-workers")
        if os.path.exists(self.stop_file):
            os.unlink(self.stop_file)
        self.procs = [subprocess.Popen([sys.executable, "-c", script, self.stop_file] + argv,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                      for argv in argvs]

    def finish(self, hang_bound, unhang=None):
        """Stops them; (their longest request, their JSON results), the
        longest None when one hung past the bound (unhang() was then called
        so that its request ends and it can be reaped)."""
        open(self.stop_file, "w").close()
        longest, which, total, results = 0.0, "", 0, []
        for p in self.procs:
            try:
                out, err = p.communicate(timeout=hang_bound)
            except subprocess.TimeoutExpired:
                check(False, f"{self.what}: a process returns within {hang_bound:.0f} s (a hang)")
                if os.environ.get("FCACHE_READERS_DEBUG"):
                    dump_stuck([q.pid for q in self.procs] + [self.vol.worker_pid()])
                    subprocess.run([sys.executable, os.path.join(os.path.dirname(
                        os.path.abspath(__file__)), "stackscan.py"), str(self.vol.worker_pid())])
                if unhang:
                    unhang()
                for q in self.procs:
                    q.kill()
                for q in self.procs:
                    try:
                        q.communicate(timeout=hang_bound)
                    except subprocess.TimeoutExpired:
                        print(f"# {self.what}: process {q.pid} still stuck", flush=True)
                return None, results
            if p.returncode != 0 or not out.strip():
                check(False, f"{self.what}: a process ran ({err.strip()[-500:]})")
                continue
            r = json.loads(out.strip().splitlines()[-1])
            results.append(r)
            eq(r["errors"], [], f"{self.what}: a process's {r['n']} checks, no error")
            total += r["n"]
            if r["longest"] > longest:
                longest, which = r["longest"], r["which"]
        print(f"# {self.what}: {total} checks by {len(self.procs)} processes, longest request"
              f" {longest:.2f} s ({which})", flush=True)
        return longest, results


def readers(vol, what):
    return Workers(vol, what, READER, [[vol.v("proj"), spec(), str(i)] for i in range(READERS)])


def switch(vol, to):
    q = vol.ctl("disconnect" if to == "offline" else "reconnect")
    eq(q["state"], to, f"{'disconnect' if to == 'offline' else 'reconnect'}: state={to}")


def tmpfs_phase():
    vol = Volume("switch-readers", lease="0s")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", vol.backing],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"# SKIP tmpfs phase: mount tmpfs failed: {r.stderr.strip()}")
        return
    try:
        make_tree(vol.backing)
        vol.start()
        eq(vol.ctl("pin recursive", "proj").get("mirrored"), "yes", "pin recursive proj: mirrored")
        rd = readers(vol, "switches by hand")
        time.sleep(0.5)
        t = time.time()
        for i in range(SWITCHES):
            vol.ctl("disconnect" if i % 2 == 0 else "reconnect")
        if vol.state()["state"] != "online":
            switch(vol, "online")
        print(f"# {SWITCHES} switches in {time.time() - t:.1f} s", flush=True)
        rd.finish(BOUND)
        eq(vol.state()["state"], "online", "online at the end")
    finally:
        vol.stop()
        subprocess.run(["umount", "-l", vol.backing], capture_output=True)


def frozen_phase():
    inner = Volume("switch-readers-inner", lease="0s")
    make_tree(inner.backing)
    server = inner.start_stoppable_server()
    vol = Volume("switch-readers-frozen", backing=inner.mnt, lease="0s",
                 extra=["--set", f"BackingTimeout={TIMEOUT}s"])
    longest = 0.0
    try:
        vol.start()
        eq(vol.ctl("pin recursive", "proj").get("mirrored"), "yes", "pin recursive proj: mirrored")
        eq(vol.ctl("pin recursive", "work").get("mirrored"), "yes", "pin recursive work: mirrored")
        changed = [vol.v("work", f"c{i}") for i in range(CHANGERS)]
        for i in range(FREEZES):
            what = f"frozen server, round {i + 1}"
            rd = readers(vol, what)
            ch = Workers(vol, what + ", changers", CHANGER, [[p] for p in changed])
            time.sleep(1)
            os.kill(server, signal.SIGSTOP)
            check(wait_for(lambda: vol.state()["state"] == "offline", BOUND),
                  f"round {i + 1}: the volume goes offline by itself")
            time.sleep(2 * TIMEOUT)     # readers and changers go on offline
            unhang = lambda: os.kill(server, signal.SIGCONT)  # noqa: E731
            took, _ = rd.finish(BOUND + TIMEOUT, unhang)
            took_ch, last = ch.finish(BOUND + TIMEOUT, unhang)
            os.kill(server, signal.SIGCONT)
            if took is None or took_ch is None:
                break
            longest = max(longest, took, took_ch)
            check(wait_for(lambda: vol.state()["state"] == "online", 120),
                  f"round {i + 1}: with the server back the volume reconnects by itself")
            for p, r in zip(changed, last):
                rel = os.path.relpath(p, vol.mnt)
                if r["data"] is not None:
                    eq(open(inner.b(rel), encoding="latin-1").read(), r["data"],
                       f"round {i + 1}: {rel}: the server holds the last write acknowledged")
                if r["mode"] is not None:
                    eq(oct(os.stat(inner.b(rel)).st_mode & 0o7777), oct(r["mode"]),
                       f"round {i + 1}: {rel}: and the last mode")
            eq(vol.ctl("query state").get("conflicts"), "0", f"round {i + 1}: no conflict")
        print(f"# longest request across the frozen rounds: {longest:.2f} s"
              f" (BackingTimeout {TIMEOUT} s)", flush=True)
    finally:
        os.kill(server, signal.SIGCONT)
        vol.stop()
        inner.stop()


def main():
    require_root_fuse()
    only = os.environ.get("FCACHE_READERS_ONLY", "all")     # tmpfs, frozen or all
    if only in ("tmpfs", "all"):
        tmpfs_phase()
    if only in ("frozen", "all"):
        frozen_phase()
    finish()


if __name__ == "__main__":
    main()
