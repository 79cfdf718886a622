#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The backing calls a request makes besides lookups, opens, reads, writes
and changes, each with a server that stops answering: readlink, getxattr,
listxattr, a mkdir's check of the parent's default ACL, a non-root
writer's set-id check before a write and a fallocate, the atime byte a
first read from the store reads, statfs, and a `reconnect` asked by hand while a
change given up on still waits for the server.

The server is a FUSE filesystem whose daemon is stopped (SIGSTOP): an inner
fcache-view over a local directory (every xattr request and attribute
refresh reaches it: AttrLease=0, cacheable off, no passthrough), and for
readlink an sshfs mount (the inner view's kernel keeps symlink targets,
sshfs's does not).  The volume under test, BackingTimeout=2s, pins the tree.
Each call runs in a child and must return within a bound that only catches
a hang (FCACHE_HUNG_BOUND, 60 s) with the answer the volume gives offline,
never EIO, and the volume must be offline; the server then runs again and
the volume reconnects by itself before the next call.
Then fallocates the server acknowledged (a punched hole, a zeroed range, a
growth), the server stopped before their files' closes, an offline append
to each, the server back: no conflict, and the server holds the changes then
the appends (the mirror's copy took them as the server did).
The server stopped as a reconnect switches online (switch-online): the
reconnect answers, the volume is offline again, descriptors open across it
and a create are answered.  A disconnect by hand while a mirror update is
stuck on the stopped server (disconnect-stuck) answers.  A read of cached
files while the reconnect's check of them asks the stopped server
(check-cached) answers.  A rename the server did, the server stopped as
its note brings the mirror's copies up to date (rename-note): answered,
not EIO, the file at its new name offline and then on the server; also
over a file, and an exchange.
A disconnect by hand with written files open, the server stopped: it
answers, the writes on either side reach the server.
(FCACHE_HUNG_ONLY=NAME,... runs some of them; disconnect-writers and
fallocate-close the last.)
"""
import errno
import importlib.util
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE,  # noqa: E402
                     RENAME_EXCHANGE, Volume, append_each, check, eq, fallocate, finish,
                     rand_bytes, read_file, read_or_none, renameat2, require_root_fuse, wait_for,
                     write_file)

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 2
BOUND = float(os.environ.get("FCACHE_HUNG_BOUND", "60"))
ONLY = [x for x in os.environ.get("FCACHE_HUNG_ONLY", "").split(",") if x]
NOBODY = pwd.getpwnam("nobody")

# The child: sets itself up (as another user, priming the kernel's caches so
# that the call itself is the first request to reach the view), says
# "ready", waits for "go", makes the call and prints its answer.
CHILD = r'''
import errno, os, sys, time
op, path, uid = sys.argv[1], sys.argv[2], int(sys.argv[3])
if uid:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
fd = None
if op in ("write", "fallocate"):
    # The first write's capability check done, and closed: the local copy
    # has what the server has (a writer open across the switch would leave
    # its online writes out of it: view.md, Not done yet).
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, b"w", 0)
    os.close(fd)
    fd = os.open(path, os.O_WRONLY)
elif op == "read":
    time.sleep(float(sys.argv[4]))          # past the lease: the open reaches the backing
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
elif op == "mkdir":
    time.sleep(float(sys.argv[4]))          # past the lease: the stat reaches the server,
    os.stat(os.path.dirname(path))          # whose kernel then forgets the ACLs it cached
    assert not os.path.lexists(path)        # a negative entry, within the lease
else:
    os.lstat(path)
print("ready", flush=True)
sys.stdin.readline()
try:
    if op == "readlink":
        r = os.readlink(path)
    elif op == "getxattr":
        r = os.getxattr(path, "user.hung", follow_symlinks=False)
    elif op == "listxattr":
        r = sorted(os.listxattr(path, follow_symlinks=False))
    elif op == "mkdir":
        os.mkdir(path, 0o755)
        r = "made"
    elif op == "write":
        r = os.pwrite(fd, b"written while the server was stopped\n", 0)
    elif op == "fallocate":
        os.posix_fallocate(fd, 0, 65536)
        r = "allocated"
    elif op == "read":
        r = os.pread(fd, 4096, 0)[:32]
    elif op == "chmod":
        os.chmod(path, 0o640)
        r = "changed"
    elif op == "statfs":
        r = "blocks" if os.statvfs(path).f_blocks > 0 else "no blocks"
    print(repr(r), flush=True)
except OSError as e:
    print("error " + errno.errorcode.get(e.errno, str(e.errno)), flush=True)
'''


class Server:
    """A FUSE backing whose daemon can be stopped and started again."""

    def __init__(self, pid):
        self.pid = pid

    def stop(self):
        """Stops it, and returns once every thread of it is stopped (a thread
        that runs on meanwhile would still answer a request)."""
        os.kill(self.pid, signal.SIGSTOP)
        check(wait_for(self.stopped, 30), f"the server (pid {self.pid}) stopped")

    def stopped(self):
        tasks = f"/proc/{self.pid}/task"
        for t in os.listdir(tasks):
            try:
                with open(f"{tasks}/{t}/stat") as f:
                    if f.read().rpartition(")")[2].split()[0] not in "tT":
                        return False
            except FileNotFoundError:
                pass
        return True

    def cont(self):
        os.kill(self.pid, signal.SIGCONT)


def hung_call(server, op, path, uid=0, wait=0.0):
    """With the server stopped, op on path in a child: (answer, seconds); the
    answer None when it did not return within BOUND (a hang)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, op, path, str(uid), str(wait)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    ready = child.stdout.readline().strip()
    if ready != "ready":
        child.kill()
        _, err = child.communicate()
        raise RuntimeError(f"{op} {path}: the child did not get ready: {ready} {err[-500:]}")
    server.stop()
    t = time.time()
    child.stdin.write("go\n")
    child.stdin.flush()
    try:
        out, err = child.communicate(timeout=BOUND)
        answer = out.strip()
    except subprocess.TimeoutExpired:
        answer = None
    took = time.time() - t
    if answer is None:
        server.cont()           # lets the hung call finish
        child.kill()
        child.communicate()
    print(f"# {op}: {answer!r} after {took:.1f} s", flush=True)
    return answer, took


def resume(vol, server, what):
    server.cont()
    check(wait_for(lambda: vol.state()["state"] == "online", 60),
          f"after {what}, with the server back the volume reconnects by itself")


def offline_answer(answer, want, what, took):
    check(answer is not None, f"{what} returns with the server stopped"
          f" ({took:.1f} s; a hang is {BOUND:.0f} s)")
    if answer is not None:
        eq(answer, want, f"{what}: the offline answer")
        check(answer != "error EIO", f"{what}: not EIO")


def went_offline(vol, what):
    st = vol.state()
    eq(st["state"], "offline", f"{what}: the volume went offline")
    check("BackingTimeout" in st.get("offline_reason", ""),
          f"{what}: offline_reason names BackingTimeout ({st.get('offline_reason')})")


def wanted(name):
    return not ONLY or name in ONLY


def ctl_bounded(vol, cmd):
    """vol.ctl(cmd) within the hang guard: {"_rc": None} when it did not answer."""
    try:
        return vol.ctl(cmd, ok=False, timeout=BOUND)
    except subprocess.TimeoutExpired:
        return {"_rc": None, "_err": "no answer"}


def stop_server_at(server, gate, what):
    """Once the worker waits at the pause gate (what it is about to do),
    stops the server and lets the worker go on into its call to it."""
    check(wait_for(lambda: os.path.exists(gate + ".reached"), BOUND), what)
    server.stop()
    os.unlink(gate)


FSIZE = 8192
# name: (mode, offset, length, what the server then holds)
FALLOCATES = {
    "punch": (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 2048,
              lambda old: old[:4096] + bytes(2048) + old[6144:]),
    "zero": (FALLOC_FL_ZERO_RANGE, 6144, 4096, lambda old: old[:6144] + bytes(4096)),
    "grow": (0, 0, 3 * FSIZE, lambda old: old + bytes(2 * FSIZE)),
}


def fallocate_close(vol, inner, server):
    """Each fallocate acknowledged online, the server stopped before the
    close, an offline append, the server back: no conflict, the server has
    both."""
    fds, want = {}, {}
    conflicts = vol.state().get("conflicts")
    for name, (mode, off, length, after) in FALLOCATES.items():
        fd = os.open(vol.v("proj", "fa-" + name), os.O_RDWR)
        try:
            fallocate(fd, mode, off, length)
        except OSError as e:
            os.close(fd)
            print(f"ok - fallocate {name}: not done here # SKIP {e}")
            continue
        fds[name] = fd
        want[name] = after(rand_bytes(FSIZE, name))
    server.stop()
    # The first close's flush waits for the server: the volume goes offline.
    for fd in fds.values():
        os.close(fd)
    went_offline(vol, "the closes after fallocates")
    append_each({name: vol.v("proj", "fa-" + name) for name in fds}, want)
    resume(vol, server, "the closes after fallocates")
    check(wait_for(lambda: vol.state().get("pending") == "0", 60), "the offline appends replayed")
    eq(vol.state().get("conflicts"), conflicts, "no conflict from the fallocates before the stop")
    for name in fds:
        eq(read_file(inner.b("proj", "fa-" + name)), want[name],
           f"fallocate {name}: the server holds it, then the offline append")


def disconnect_with_writers(vol, inner, server):
    """A disconnect asked by hand with files written online still open and
    the server stopped: the mirror's notes of them give up at the bound,
    the forced switch that starts goes ahead, and the disconnect answers;
    the files written on offline, the server back, a reconnect by hand:
    the server holds every write, once."""
    fds = {}
    for name in ("dw-new", "f"):
        fd = os.open(vol.v("proj", name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, b"online\n")
        fds[name] = fd
    want = {name: read_file(inner.b("proj", name)) + b"offline\n" for name in fds}
    server.stop()
    t = time.time()
    r = vol.ctl("disconnect", ok=False, timeout=BOUND)
    took = time.time() - t
    check(r["_rc"] == 0, f"disconnect by hand, the server stopped, written files open: answered"
          f" in {took:.1f} s ({r.get('_err', '')})")
    eq(vol.state()["state"], "offline", "... the volume is offline")
    for name, fd in fds.items():
        os.write(fd, b"offline\n")
        os.close(fd)
        eq(read_file(vol.v("proj", name)), want[name], f"{name}: offline, both writes read")
    server.cont()
    eq(vol.ctl("reconnect", timeout=BOUND).get("state"), "online", "reconnect by hand")
    for name in fds:
        eq(read_file(inner.b("proj", name)), want[name], f"{name}: the server holds both writes")


def switch_online_cut(vol, inner, server, gate):
    """The server stops as a reconnect, its log replayed, switches the
    volume's nodes and open files online (a pause at that point,
    FCACHE_FAULT_PAUSE): the switch gives up on the server within the bound,
    the reconnect answers, the volume is offline again, a read and an append
    through descriptors open across it and a create are answered locally;
    with the server back it reconnects by itself and the server has them."""
    vol.ctl("disconnect")
    write_file(vol.v("proj", "so-made"), b"made offline\n")
    rfd = os.open(vol.v("proj", "h"), os.O_RDONLY)
    wfd = os.open(vol.v("proj", "so-made"), os.O_WRONLY | os.O_APPEND)
    open(gate, "w").close()
    result = {}

    def reconnect():
        t = time.time()
        result["r"] = ctl_bounded(vol, "reconnect")
        result["took"] = time.time() - t
        if os.environ.get("FCACHE_HUNG_DEBUG") and result["took"] > BOUND / 2:
            subprocess.run([sys.executable, os.path.join(HERE, "stackscan.py"),
                            str(vol.worker_pid())])
    th = threading.Thread(target=reconnect, daemon=True)
    th.start()
    stop_server_at(server, gate, "the reconnect replayed the log and reached the switch online")
    th.join()
    r = result["r"]
    check(r["_rc"] is not None, f"the reconnect answers with the server stopped at its switch"
          f" online ({result['took']:.1f} s; a hang is {BOUND:.0f} s)")
    check(r["_rc"] != 0 and "switched online" in r["_err"],
          f"... saying the server stopped answering as it switched ({r.get('_err')})")
    eq(vol.state()["state"], "offline", "... and the volume is offline again")
    t = time.time()
    try:
        got = os.pread(rfd, 32, 0)
        os.write(wfd, b"appended across\n")
        write_file(vol.v("proj", "so-after"), b"made after\n")
        answer = "answered"
    except OSError as e:
        got, answer = None, f"error {e.strerror}"
    eq((answer, got), ("answered", b"read me\n" * 4),
       f"a read and an append through descriptors open across it and a create are answered"
       f" ({time.time() - t:.1f} s)")
    os.close(rfd)
    os.close(wfd)
    resume(vol, server, "the switch online the server stopped in")
    eq(read_file(inner.b("proj", "so-made")), b"made offline\nappended across\n",
       "the server has the file made before and its append after")
    eq(read_file(inner.b("proj", "so-after")), b"made after\n", "... and the file made after")
    eq(vol.ctl("query state").get("conflicts"), "0", "no conflict")


def disconnect_stuck(vol, inner, server, gate):
    """A mirror update stuck in a call to the stopped server (a file read
    whole going into the mirror, paused at view-cache-file while the server
    stops: its calls to the server come before the switch's lock): a
    disconnect by hand answers within the bound, a create is answered
    offline, and after the server is back a reconnect by hand puts it
    there."""
    open(gate, "w").close()
    eq(read_file(vol.v("free", "u")), b"unpinned\n" * 2000, "an unpinned file read whole")
    stop_server_at(server, gate, "its copy is about to go into the mirror")
    time.sleep(0.5)     # the update is in its call to the stopped server
    t = time.time()
    r = ctl_bounded(vol, "disconnect")
    took = time.time() - t
    check(r["_rc"] == 0, f"disconnect by hand, a mirror update stuck on the stopped server:"
          f" answered in {took:.1f} s (a hang is {BOUND:.0f} s; {r.get('_err', '')})")
    if r["_rc"] is None:
        server.cont()
        return
    eq(vol.state()["state"], "offline", "... the volume is offline")
    t = time.time()
    write_file(vol.v("proj", "ds-made"), b"made offline\n")
    check(True, f"a create offline answered ({time.time() - t:.1f} s)")
    server.cont()
    eq(vol.ctl("reconnect", timeout=BOUND).get("state"), "online", "reconnect by hand")
    eq(read_file(inner.b("proj", "ds-made")), b"made offline\n", "the server has the create")


def check_cached_stuck(vol, inner, server, gate):
    """The check after a reconnect of the cached files not pinned (is each
    still the server's file?) asking the stopped server (a pause at
    view-check-cached while the server stops): a read of those files is
    answered meanwhile (the check holds no lock of a file while it asks),
    the volume goes offline, and a copy the server did not answer for stays
    cached; with the server back the volume reconnects by itself."""
    files = {"c": b"cached, not pinned\n" * 1000}
    if os.path.exists(inner.b("free", "u")):
        files["u"] = read_file(inner.b("free", "u"))
    for name, data in files.items():
        eq(read_file(vol.v("free", name)), data, f"unpinned free/{name} read whole")
        check(wait_for(lambda: vol.ctl("query cached", f"free/{name}").get("offline_copy") == "yes",
                       BOUND), "... and cached in its container, which offline serves")
    vol.ctl("disconnect")
    open(gate, "w").close()
    result = {}

    th = threading.Thread(target=lambda: result.update(r=ctl_bounded(vol, "reconnect")),
                          daemon=True)
    th.start()
    stop_server_at(server, gate,
                   "after the reconnect, the check of the cached files is about to ask the server")
    time.sleep(0.5)     # the check is in its call to the stopped server
    t = time.time()
    try:
        r = subprocess.run(["cat"] + [vol.v("free", n) for n in files], capture_output=True,
                           timeout=BOUND)
        answer = r.stdout if r.returncode == 0 else f"error {r.stderr.decode().strip()}"
    except subprocess.TimeoutExpired:
        answer = None
        server.cont()   # lets the hung read finish
    took = time.time() - t
    check(answer == b"".join(files.values()),
          f"a read of the cached files while the check asks the stopped server: answered, right,"
          f" in {took:.1f} s (a hang is {BOUND:.0f} s; {answer if isinstance(answer, str) else ''})")
    th.join()
    check(result["r"]["_rc"] is not None, f"the reconnect answered ({result['r'].get('_err', '')})")
    resume(vol, server, "the check of the cached files")
    for name, data in files.items():
        q = vol.ctl("query cached", f"free/{name}")
        eq((q["cached"], q.get("offline_copy")), ("complete", "yes"),
           f"free/{name}, which the server did not answer for, is still cached")
        eq(read_file(vol.v("free", name)), data, "... and reads right")


def rename_note_cut(vol, inner, server, gate):
    """A rename the server did, its mirror copy moved, the server stopped
    as the copies of its two names are brought up to date (a pause at
    view-note-renamed): the rename is answered without EIO (made again
    offline from the moved copy), the volume offline, the file at its new
    name only, with its bytes; also over an existing file, and an
    exchange.  With the server back the volume reconnects by itself, no
    conflict, and the server has each file at its new name once."""
    body = {"rn-a": b"renamed while the server stopped\n" * 100,
            "rn-c": b"renamed over rn-d\n" * 100,
            "rn-d": b"replaced\n",
            "rn-e": b"exchanged with rn-f\n" * 100,
            "rn-f": b"exchanged with rn-e\n" * 50}
    for src, dst, flags in (("rn-e", "rn-f", RENAME_EXCHANGE), ("rn-c", "rn-d", 0),
                            ("rn-a", "rn-b", 0)):
        what = f"{'exchange' if flags else 'rename'} {src} -> {dst}"
        want = {dst: body[src], src: body[dst] if flags else None}
        for name in (src, dst):
            if name in body:
                write_file(vol.v("proj", name), body[name])
        open(gate, "w").close()
        result = {}

        def rename():
            t = time.time()
            try:
                renameat2(vol.v("proj", src), vol.v("proj", dst), flags)
                result["r"] = "renamed"
            except OSError as e:
                result["r"] = f"error {errno.errorcode.get(e.errno, e.errno)}"
            result["took"] = time.time() - t
        th = threading.Thread(target=rename, daemon=True)
        th.start()
        stop_server_at(server, gate, f"{what}: the server did it, the mirror copy moved")
        th.join(BOUND)
        offline_answer(result.get("r"), "renamed", what, result.get("took", BOUND))
        went_offline(vol, what)
        eq({n: read_or_none(vol.v("proj", n)) for n in want}, want,
           f"offline, the names read as after the {what}")
        resume(vol, server, what)
        eq({n: read_or_none(inner.b("proj", n)) for n in want}, want,
           "the server has each file at its new name once")
        eq(vol.ctl("query state").get("conflicts"), "0", "no conflict")
        eq({n: read_or_none(vol.v("proj", n)) for n in want}, want, "online, the names read so")


def inner_view_phase():
    """The calls over a stacked fcache-view as the server."""
    inner = Volume("hung-inner", lease="0s")
    srv = inner.backing
    os.makedirs(os.path.join(srv, "proj", "sub"))
    write_file(os.path.join(srv, "proj", "f"), b"pinned file\n")
    os.setxattr(os.path.join(srv, "proj", "f"), "user.hung", b"on the server")
    for name in ("g", "g2"):
        write_file(os.path.join(srv, "proj", name), b"g\n")
        os.chmod(os.path.join(srv, "proj", name), 0o666)
    write_file(os.path.join(srv, "proj", "h"), b"read me\n" * 512)
    for name in FALLOCATES:
        write_file(os.path.join(srv, "proj", "fa-" + name), rand_bytes(FSIZE, name))
    os.chmod(os.path.join(srv, "proj", "h"), 0o644)
    os.makedirs(os.path.join(srv, "free"))
    write_file(os.path.join(srv, "free", "u"), b"unpinned\n" * 2000)
    write_file(os.path.join(srv, "free", "c"), b"cached, not pinned\n" * 1000)
    server = Server(inner.start_stoppable_server())
    lease = 3
    vol = Volume("hung", backing=inner.mnt, lease=f"{lease}s",
                 extra=["--set", f"BackingTimeout={TIMEOUT}s"])
    gate = os.path.join(vol.top, "switch-gate")
    cache_gate = os.path.join(vol.top, "cache-gate")
    check_gate = os.path.join(vol.top, "check-gate")
    rename_gate = os.path.join(vol.top, "rename-gate")
    os.environ["FCACHE_FAULT_PAUSE"] = (f"view-switch-online:{gate},view-cache-file:{cache_gate},"
                                        f"view-check-cached:{check_gate},"
                                        f"view-note-renamed:{rename_gate}")
    try:
        vol.start()
        del os.environ["FCACHE_FAULT_PAUSE"]
        q = vol.ctl("pin recursive", "proj")
        check(q["_rc"] == 0, "the tree is pinned through the stopped-to-be server")
        eq(oct(stat.S_IMODE(os.stat(inner.b("proj", "h")).st_mode)), "0o644", "h as made")

        if wanted("getxattr"):
            a, took = hung_call(server, "getxattr", vol.v("proj", "f"))
            want = "error ENODATA"      # the mirror keeps no xattrs
            offline_answer(a, want, "getxattr of a pinned file", took)
            went_offline(vol, "getxattr")
            resume(vol, server, "getxattr")
            eq(os.getxattr(vol.v("proj", "f"), "user.hung"), b"on the server",
               "online again, getxattr answers from the server")
        if wanted("listxattr"):
            a, took = hung_call(server, "listxattr", vol.v("proj", "f"))
            offline_answer(a, "[]", "listxattr of a pinned file", took)
            went_offline(vol, "listxattr")
            resume(vol, server, "listxattr")
        if wanted("mkdir"):
            a, took = hung_call(server, "mkdir", vol.v("proj", "made-hung"), wait=lease + 0.5)
            offline_answer(a, "'made'", "mkdir in a pinned directory (its default ACL check)", took)
            went_offline(vol, "mkdir")
            check(os.path.isdir(vol.v("proj", "made-hung")), "the directory is there offline")
            resume(vol, server, "mkdir")
            check(os.path.isdir(inner.b("proj", "made-hung")), "and on the server after the reconnect")
        if wanted("write"):
            a, took = hung_call(server, "write", vol.v("proj", "g"), uid=NOBODY.pw_uid)
            msg = b"written while the server was stopped\n"
            offline_answer(a, repr(len(msg)), "a write by another user than root (set-id check)",
                           took)
            went_offline(vol, "write")
            eq(read_file(vol.v("proj", "g"))[:len(msg)], msg, "the write is in the offline copy")
            resume(vol, server, "write")
            eq(read_file(inner.b("proj", "g"))[:len(msg)], msg, "and on the server after the reconnect")
        if wanted("fallocate"):
            a, took = hung_call(server, "fallocate", vol.v("proj", "g2"), uid=NOBODY.pw_uid)
            offline_answer(a, "'allocated'", "fallocate by another user than root (set-id check)",
                           took)
            went_offline(vol, "fallocate")
            eq(os.stat(vol.v("proj", "g2")).st_size, 65536, "the offline copy has the new size")
            resume(vol, server, "fallocate")
            eq(os.stat(inner.b("proj", "g2")).st_size, 65536, "and the server after the reconnect")
        if wanted("read"):
            a, took = hung_call(server, "read", vol.v("proj", "h"), wait=lease + 0.5)
            offline_answer(a, repr(b"read me\n" * 4), "the first read of a file from its local copy"
                           " (the atime byte)", took)
            went_offline(vol, "read")
            resume(vol, server, "read")
        if wanted("statfs"):
            a, took = hung_call(server, "statfs", vol.v("proj"))
            offline_answer(a, "'blocks'", "statfs (the local copy's filesystem offline)", took)
            went_offline(vol, "statfs")
            resume(vol, server, "statfs")
        if wanted("reconnect"):
            a, took = hung_call(server, "chmod", vol.v("proj", "f"))
            offline_answer(a, "'changed'", "chmod (given up on, made again offline)", took)
            went_offline(vol, "chmod")
            t = time.time()
            r = vol.ctl("reconnect", ok=False, timeout=BOUND)
            took = time.time() - t
            check(r["_rc"] != 0 and "given up on" in r["_err"],
                  f"reconnect by hand while the chmod given up on waits for the server: refused"
                  f" in {took:.1f} s ({r['_err']})")
            eq(vol.state()["state"], "offline", "the volume stays offline")
            resume(vol, server, "the refused reconnect")
            eq(oct(stat.S_IMODE(os.stat(inner.b("proj", "f")).st_mode)), "0o640",
               "the chmod is on the server, once")
            eq(vol.ctl("query state").get("conflicts"), "0", "no conflict")
        if wanted("switch-online"):
            switch_online_cut(vol, inner, server, gate)
        if wanted("disconnect-stuck"):
            disconnect_stuck(vol, inner, server, cache_gate)
        if wanted("check-cached"):
            check_cached_stuck(vol, inner, server, check_gate)
        if wanted("rename-note"):
            rename_note_cut(vol, inner, server, rename_gate)
        if wanted("disconnect-writers"):
            disconnect_with_writers(vol, inner, server)
        if wanted("fallocate-close"):
            fallocate_close(vol, inner, server)
    finally:
        server.cont()
        vol.stop()
        inner.stop()


def sshfs_phase():
    """readlink over sshfs, whose kernel side keeps no symlink targets."""
    spec = importlib.util.spec_from_file_location("view_sshfs", os.path.join(HERE, "view-sshfs.py"))
    view_sshfs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(view_sshfs)
    vol = Volume("hung-ssh", lease="3s", extra=["--set", f"BackingTimeout={TIMEOUT}s"])
    server_dir = os.path.join(vol.top, "server")
    os.makedirs(os.path.join(server_dir, "proj"))
    os.symlink("target-of-the-link", os.path.join(server_dir, "proj", "l"))
    with socket.socket() as s:              # a free port of this machine's
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sshd, keydir = view_sshfs.start_sshd(vol.top, port=port)
    r = view_sshfs.mount_sshfs(server_dir, vol.backing, keydir, "cache=no", port=port)
    if r.returncode != 0:
        sshd.kill()
        print(f"# SKIP readlink: sshfs mount failed: {r.stderr.strip()}")
        return
    pid = int(subprocess.run(["pgrep", "-f", f"^sshfs root@127.0.0.1:{server_dir} "],
                             capture_output=True, text=True).stdout.split()[0])
    server = Server(pid)
    try:
        vol.start()
        check(vol.ctl("pin recursive", "proj")["_rc"] == 0, "the tree is pinned through sshfs")
        a, took = hung_call(server, "readlink", vol.v("proj", "l"))
        offline_answer(a, repr("target-of-the-link"), "readlink of a pinned symlink", took)
        went_offline(vol, "readlink")
        resume(vol, server, "readlink")
    finally:
        server.cont()
        vol.stop()
        subprocess.run(["fusermount3", "-u", "-z", vol.backing], capture_output=True)
        sshd.kill()
        sshd.wait()


def main():
    require_root_fuse()
    if any(wanted(x) for x in ("getxattr", "listxattr", "mkdir", "write", "fallocate", "read",
                               "statfs", "reconnect", "switch-online", "disconnect-stuck",
                               "rename-note", "disconnect-writers", "fallocate-close")):
        inner_view_phase()
    if wanted("readlink"):
        sshfs_phase()
    finish()


if __name__ == "__main__":
    main()
