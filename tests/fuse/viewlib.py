# SPDX-License-Identifier: LGPL-2.1-or-later
"""viewlib: start, talk to and stop an fcache-view volume for the fuse tests.

Every test makes its own temporary tree (backing, mountpoint, cache), starts
fcache-view (the holder and its worker), and on exit stops it, unmounts and
kills whatever it started.  Tests that cannot run here exit 77 with a reason.
"""
import atexit
import ctypes
import errno
import mmap
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

VIEW = os.environ.get("FCACHE_VIEW", "build-view/daemon/fcache-view")
CTL = os.environ.get("FCACHE_VIEW_CTL", "build-view/daemon/fcache-view-ctl")

failures = []
checks = 0
# How AddressSanitizer, LeakSanitizer and UBSan begin a report.
SANITIZER_MARKS = (b"ERROR: AddressSanitizer", b"ERROR: LeakSanitizer", b": runtime error: ")


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(77)


def require_root_fuse():
    if os.geteuid() != 0:
        skip("needs root (mounts a FUSE view with allow_other)")
    if not os.path.exists("/dev/fuse"):
        skip("no /dev/fuse")
    for p in (VIEW, CTL):
        if not os.access(p, os.X_OK):
            skip(f"{p} is not built")


def check(cond, what):
    global checks
    checks += 1
    if cond:
        print(f"ok {checks} - {what}")
    else:
        print(f"not ok {checks} - {what}")
        failures.append(what)


def wait_for(cond, timeout=60):
    """Whether cond() came true within timeout seconds (a control socket
    not answering meanwhile counts as not yet)."""
    end = time.time() + timeout
    while True:
        try:
            if cond():
                return True
        except (RuntimeError, KeyError, ValueError):
            pass
        if time.time() >= end:
            return False
        time.sleep(0.05)


def short(x):
    r = repr(x)
    if len(r) > 160 and not os.environ.get("FCACHE_TEST_VERBOSE"):
        import hashlib
        h = hashlib.sha256(r.encode()).hexdigest()[:12]
        r = f"{r[:60]}...({len(r)} chars, sha {h})"
    return r


def eq(a, b, what):
    check(a == b, what if a == b else f"{what}: got {short(a)}, expected {short(b)}")


def finish():
    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


class Volume:
    def __init__(self, name="t", backing=None, extra=(), lease="2s", cache_size=None,
                 reserve=None):
        self.top = tempfile.mkdtemp(prefix=f"fcache-{name}-")
        os.chmod(self.top, 0o755)
        self.backing = backing or os.path.join(self.top, "back")
        self.mnt = os.path.join(self.top, "mnt")
        self.cache = os.path.join(self.top, "cache")
        for d in (self.backing, self.mnt):
            os.makedirs(d, exist_ok=True)
        os.chmod(self.backing, 0o755)
        self.args = [VIEW, "--name", name, "--backing", self.backing, "--mountpoint", self.mnt,
                     "--cache-dir", self.cache, "--set", f"AttrLease={lease}"]
        if cache_size:
            self.args += ["--set", f"CacheSize={cache_size}"]
        if reserve:
            self.args += ["--set", f"Reserve={reserve}"]
        self.args += list(extra)
        self.log = open(os.path.join(self.top, "view.log"), "ab")
        self.scanned = 0
        self.proc = None
        atexit.register(self.cleanup)

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=self.log,
                                     start_new_session=True)
        self.wait_ready()
        return self

    def start_stoppable_server(self):
        """Starts this volume as the FUSE server another volume is stacked
        on, for a test to stop with SIGSTOP: no passthrough and no page
        cache, so every read reaches it.  Returns its worker's pid."""
        os.environ["FCACHE_VIEW_PASSTHROUGH"] = "0"
        try:
            self.start()
        finally:
            del os.environ["FCACHE_VIEW_PASSTHROUGH"]
        self.ctl("set cacheable off")       # its kernel keeps no pages: reads reach it
        return self.worker_pid()

    def wait_ready(self, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fcache-view exited {self.proc.returncode}: {self.logtext()}")
            if os.path.ismount(self.mnt) and os.path.exists(os.path.join(self.cache,
                                                                         "control.sock")):
                try:
                    self.state()
                    return
                except RuntimeError:
                    pass
            time.sleep(0.05)
        raise RuntimeError("fcache-view did not come up: " + self.logtext())

    def log_bytes(self, start=0):
        """The view's log from byte start on."""
        self.log.flush()
        with open(os.path.join(self.top, "view.log"), "rb") as f:
            f.seek(start)
            return f.read()

    def logtext(self, tail=3000):
        return self.log_bytes().decode(errors="replace")[-tail:]

    def ctl(self, cmd, path=None, ok=True, timeout=120):
        args = [CTL, self.cache, cmd] + ([path] if path is not None else [])
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        if ok and r.returncode != 0:
            why = r.stderr.strip()
            if "no answer" in why:
                # the worker may have died: its last words say why
                why += "\nthe view's log ends:\n" + self.logtext(12000)
            raise RuntimeError(f"ctl {cmd} {path}: {why}")
        out = {}
        for line in r.stdout.splitlines():
            k, _, v = line.partition("=")
            out.setdefault(k, v)
        out["_rc"] = r.returncode
        out["_err"] = r.stderr.strip()
        out["_lines"] = r.stdout.splitlines()
        return out

    def state(self):
        return self.ctl("query state")

    def worker_pid(self):
        return int(self.state()["pid"])

    def kill_worker(self, sig=signal.SIGKILL):
        pid = self.worker_pid()
        os.kill(pid, sig)
        return pid

    def wait_new_worker(self, old, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if self.worker_pid() != old:
                    return
            except (RuntimeError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        raise RuntimeError("no new worker: " + self.logtext())

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # the worker is in the same session; make sure nothing is left
        if self.proc:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if os.path.ismount(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        if self.proc:
            self.sanitizer_check()
        self.proc = None

    def sanitizer_check(self):
        """A worker a sanitizer stopped is replaced by the next one and the
        test may go on and pass: a report in the view's log fails it."""
        text = self.log_bytes(self.scanned)
        self.scanned += len(text)
        for mark in SANITIZER_MARKS:
            i = text.find(mark)
            if i >= 0:
                check(False, f"no sanitizer report in the view's log ({self.top}): "
                      + text[max(0, i - 200):i + 8000].decode(errors="replace"))
                return

    def cleanup(self):
        try:
            self.stop()
        finally:
            if not failures or os.environ.get("FCACHE_KEEP") is None:
                shutil.rmtree(self.top, ignore_errors=True)

    def v(self, *p):
        return os.path.join(self.mnt, *p)

    def b(self, *p):
        return os.path.join(self.backing, *p)


def read_direct(path, off=0, size=None):
    """Reads through O_DIRECT (the view then bypasses the page cache), with the
    aligned offsets, lengths and buffer that O_DIRECT asks of a caller: a file
    passed through to a local file takes them from the local filesystem."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        if size is None:
            size = os.fstat(fd).st_size - off
        start = off - off % 4096
        end = off + size
        length = max(4096, -(-(end - start) // 4096) * 4096)
        buf = mmap.mmap(-1, length)
        got = 0
        while got < length:
            n = os.preadv(fd, [memoryview(buf)[got:]], start + got)
            got += n
            if n == 0 or got % 4096:
                break
        return bytes(buf[off - start:min(got, end - start)])
    finally:
        os.close(fd)


def write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def read_or_none(path):
    """A file's bytes, or None when there is no such name."""
    try:
        return read_file(path)
    except FileNotFoundError:
        return None


libc = ctypes.CDLL(None, use_errno=True)
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


def renameat2(old, new, flags):
    r = libc.renameat2(-100, old.encode(), -100, new.encode(), flags)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


SYS_getdents64 = 217    # x86_64


def getdents(fd, size):
    """One getdents64(2) of directory descriptor fd into a buffer of size
    bytes: the names it gave ([] at the end)."""
    buf = ctypes.create_string_buffer(size)
    n = libc.syscall(SYS_getdents64, fd, buf, size)
    if n < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    names, pos = [], 0
    while pos < n:
        reclen = int.from_bytes(buf.raw[pos + 16:pos + 18], "little")
        name = buf.raw[pos + 19:pos + reclen]
        names.append(name[:name.index(b"\0")].decode(errors="surrogateescape"))
        pos += reclen
    return names


FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 1, 2, 16
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def fallocate(fd, mode, off, length):
    """fallocate(2) with its mode (Python has posix_fallocate only)."""
    if libc.fallocate(fd, mode, off, length) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def append_each(paths, want):
    """Appends a line naming it to each file (name: path), as want[name] too."""
    for name, path in paths.items():
        tail = b"\0offline " + name.encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, tail)
        os.close(fd)
        want[name] += tail


def rand_bytes(n, seed):
    return random.Random(seed).randbytes(n)


def ensure_user(name, groups=()):
    """Creates a system user for the test (kept: cheap, and tests rerun)."""
    try:
        import pwd
        return pwd.getpwnam(name)
    except KeyError:
        pass
    cmd = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
    if groups:
        cmd += ["-G", ",".join(groups)]
    cmd.append(name)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        skip(f"cannot create user {name}: {r.stderr.strip()}")
    import pwd
    return pwd.getpwnam(name)


def ensure_group(name):
    import grp
    try:
        return grp.getgrnam(name)
    except KeyError:
        r = subprocess.run(["groupadd", "--system", name], capture_output=True, text=True)
        if r.returncode != 0:
            skip(f"cannot create group {name}: {r.stderr.strip()}")
        return grp.getgrnam(name)


def as_user(pw, fn, groups=None):
    """Runs fn() in a child with the user's uid, gid and groups; returns its result
    (a repr-able value) or the errno name it failed with."""
    import pickle
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            os.setgroups(groups if groups is not None else os.getgrouplist(pw.pw_name, pw.pw_gid))
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            os.umask(0o022)
            res = fn()
        except OSError as e:
            res = "E" + errno.errorcode.get(e.errno, str(e.errno))
        except Exception as e:  # noqa: BLE001 - reported to the parent
            res = f"X{type(e).__name__}: {e}"
        os.write(wfd, pickle.dumps(res))
        os._exit(0)
    os.close(wfd)
    data = b""
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        data += chunk
    os.close(rfd)
    os.waitpid(pid, 0)
    return pickle.loads(data)


def errname(fn):
    try:
        r = fn()
        return r if r is not None else "ok"
    except OSError as e:
        return "E" + errno.errorcode.get(e.errno, str(e.errno))


def err_of(fn):
    try:
        fn()
    except OSError as e:
        return e.errno
    return 0


def tree(root):
    """{relative path: (type, mode, content or target)} of a directory tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            try:
                st = os.lstat(p)
            except OSError as e:
                if e.errno != errno.EUCLEAN:
                    raise
                out[rel] = ("conflict", 0, None)
                continue
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), None)
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, os.readlink(p))
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), read_file(p))
    return out
