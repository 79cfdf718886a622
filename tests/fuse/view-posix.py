#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""POSIX behaviour of every operation through the view, against the backing.

Each scenario runs twice, in a plain directory and in the view (Backing a
local directory), and what a user would observe (contents, sizes, modes,
owners, errno names) must be the same; as root and as two unprivileged users
created for the test (one in a shared group, one not), so owners, setgid
inheritance and permission denials come out as on the backing.
"""
import errno
import fcntl
import mmap
import os
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (RENAME_EXCHANGE, RENAME_NOREPLACE, Volume, as_user, check, ensure_group,  # noqa: E402
                     ensure_user, eq, errname, finish, read_file, renameat2, require_root_fuse,
                     write_file)


def st_obs(p, follow=False):
    s = os.stat(p) if follow else os.lstat(p)
    return (stat.filemode(s.st_mode), s.st_uid, s.st_gid, s.st_size if not stat.S_ISDIR(s.st_mode) else 0,
            s.st_nlink if not stat.S_ISDIR(s.st_mode) else 0)


def sc_files(d):
    o = []
    p = os.path.join(d, "f")
    write_file(p, b"hello world\n")
    o.append(read_file(p))
    with open(p, "r+b") as f:
        f.seek(6)
        f.write(b"there")
        f.seek(0, 2)
        f.write(b"tail")
        f.flush()
        os.fsync(f.fileno())
        os.fdatasync(f.fileno())
    o.append(read_file(p))
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"+app")
    os.close(fd)
    o.append(read_file(p))
    fd = os.open(p, os.O_RDWR)
    o.append(os.pread(fd, 5, 6))
    os.pwrite(fd, b"XY", 100)            # a hole
    o.append(os.fstat(fd).st_size)
    o.append(os.pread(fd, 10, 95))
    os.ftruncate(fd, 8)
    o.append(read_file(p))
    os.truncate(p, 20000)
    o.append((os.stat(p).st_size, read_file(p)[-3:]))
    os.posix_fallocate(fd, 0, 65536)
    o.append(os.fstat(fd).st_size)
    try:
        fcntl.fallocate = None
    except AttributeError:
        pass
    os.close(fd)
    # mmap: write through a shared mapping, read it back with read()
    with open(p, "r+b") as f:
        m = mmap.mmap(f.fileno(), 4096)
        m[0:5] = b"MMAP!"
        m.flush()
        m.close()
    o.append(read_file(p)[:8])
    with open(p, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        o.append(m[0:5])
        m.close()
    o.append(errname(lambda: os.open(os.path.join(d, "f"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)))
    o.append(errname(lambda: os.open(os.path.join(d, "nope"), os.O_RDONLY)))
    o.append(errname(lambda: os.open(os.path.join(d, "f", "x"), os.O_RDONLY)))
    o.append(st_obs(p))
    os.unlink(p)
    o.append(errname(lambda: os.stat(p)))
    o.append(errname(lambda: os.unlink(p)))
    return o


def sc_dirs(d):
    o = []
    os.mkdir(os.path.join(d, "a"), 0o750)
    o.append(st_obs(os.path.join(d, "a")))
    o.append(errname(lambda: os.mkdir(os.path.join(d, "a"))))
    for i in range(50):
        write_file(os.path.join(d, "a", f"e{i:03d}"), b"x" * i)
    o.append(sorted(os.listdir(os.path.join(d, "a"))))
    o.append(sorted((e.name, e.is_file(), e.stat().st_size) for e in os.scandir(os.path.join(d, "a"))))
    o.append(errname(lambda: os.rmdir(os.path.join(d, "a"))))
    o.append(errname(lambda: os.rmdir(os.path.join(d, "a", "e001"))))
    o.append(errname(lambda: os.unlink(os.path.join(d, "a"))))
    for i in range(50):
        os.unlink(os.path.join(d, "a", f"e{i:03d}"))
    os.rmdir(os.path.join(d, "a"))
    o.append(os.listdir(d))
    os.mknod(os.path.join(d, "fifo"), stat.S_IFIFO | 0o640)
    o.append(st_obs(os.path.join(d, "fifo")))
    os.unlink(os.path.join(d, "fifo"))
    return o


def sc_rename_links(d):
    o = []
    a, b, c = (os.path.join(d, n) for n in "abc")
    write_file(a, b"A")
    write_file(b, b"B")
    os.rename(a, c)
    o.append((os.path.exists(a), read_file(c)))
    o.append(errname(lambda: renameat2(c, b, RENAME_NOREPLACE)))
    renameat2(c, b, RENAME_EXCHANGE)
    o.append((read_file(b), read_file(c)))
    os.rename(c, b)                      # over an existing file
    o.append((read_file(b), os.path.exists(c)))
    o.append(errname(lambda: renameat2(b, os.path.join(d, "zz"), RENAME_EXCHANGE)))
    renameat2(b, os.path.join(d, "n"), RENAME_NOREPLACE)
    o.append(sorted(os.listdir(d)))
    os.mkdir(os.path.join(d, "dir"))
    os.rename(os.path.join(d, "n"), os.path.join(d, "dir", "n"))
    o.append(read_file(os.path.join(d, "dir", "n")))
    o.append(errname(lambda: os.rename(os.path.join(d, "dir"), os.path.join(d, "dir", "sub"))))
    # hard links
    os.link(os.path.join(d, "dir", "n"), os.path.join(d, "h"))
    s1, s2 = os.stat(os.path.join(d, "dir", "n")), os.stat(os.path.join(d, "h"))
    o.append((s1.st_ino == s2.st_ino, s1.st_nlink, s2.st_nlink))
    with open(os.path.join(d, "h"), "ab") as f:
        f.write(b"+via-link")
    o.append(read_file(os.path.join(d, "dir", "n")))
    os.unlink(os.path.join(d, "dir", "n"))
    o.append((os.stat(os.path.join(d, "h")).st_nlink, read_file(os.path.join(d, "h"))))
    o.append(errname(lambda: os.link(os.path.join(d, "dir"), os.path.join(d, "dl"))))
    # symlinks
    os.symlink("h", os.path.join(d, "s"))
    os.symlink("/nonexistent/target", os.path.join(d, "dang"))
    o.append((os.readlink(os.path.join(d, "s")), os.readlink(os.path.join(d, "dang"))))
    o.append(read_file(os.path.join(d, "s")))
    o.append(stat.S_ISLNK(os.lstat(os.path.join(d, "s")).st_mode))
    o.append(errname(lambda: os.stat(os.path.join(d, "dang"))))
    o.append(errname(lambda: os.open(os.path.join(d, "s"), os.O_RDONLY | os.O_NOFOLLOW)))
    return o


def sc_attrs(d):
    o = []
    p = os.path.join(d, "f")
    write_file(p, b"data")
    os.chmod(p, 0o4751)
    o.append(st_obs(p))
    os.chown(p, 1234, 5678)
    o.append(st_obs(p))
    os.chown(p, 0, 0)
    os.utime(p, ns=(1000000000123456789, 1200000000987654321))
    s = os.stat(p)
    o.append((s.st_atime_ns, s.st_mtime_ns))
    os.utime(p)
    o.append(abs(os.stat(p).st_mtime - time.time()) < 5)
    os.symlink("f", os.path.join(d, "l"))
    os.chown(os.path.join(d, "l"), 4321, 4321, follow_symlinks=False)
    o.append((os.lstat(os.path.join(d, "l")).st_uid, os.stat(p).st_uid))
    # xattrs
    os.setxattr(p, "user.color", b"blue")
    os.setxattr(p, "user.size", b"x" * 1000)
    o.append(os.getxattr(p, "user.color"))
    o.append(sorted(os.listxattr(p)))
    o.append(errname(lambda: os.setxattr(p, "user.color", b"red", os.XATTR_CREATE)))
    o.append(errname(lambda: os.setxattr(p, "user.none", b"red", os.XATTR_REPLACE)))
    os.removexattr(p, "user.color")
    o.append(errname(lambda: os.getxattr(p, "user.color")))
    o.append(sorted(os.listxattr(p)))
    os.setxattr(d, "user.dir", b"1")
    o.append(os.getxattr(d, "user.dir"))
    os.removexattr(d, "user.dir")
    return o


def sc_locks(d):
    """Record locks and flock conflict between two processes."""
    o = []
    p = os.path.join(d, "lk")
    write_file(p, b"x" * 100)
    fd = os.open(p, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
    fcntl.flock(fd, fcntl.LOCK_EX)
    pid = os.fork()
    if pid == 0:
        fd2 = os.open(p, os.O_RDWR)
        r = 0
        try:
            fcntl.lockf(fd2, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
        except OSError as e:
            r |= 1 if e.errno in (errno.EAGAIN, errno.EACCES) else 8
        try:
            fcntl.lockf(fd2, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 50)   # other range: free
        except OSError:
            r |= 16
        try:
            fcntl.flock(fd2, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            r |= 2 if e.errno == errno.EWOULDBLOCK else 32
        os._exit(r)
    _, status = os.waitpid(pid, 0)
    o.append(os.WEXITSTATUS(status))
    os.close(fd)
    return o


def sc_statfs(d):
    s = os.statvfs(d)
    return [s.f_bsize > 0, s.f_namemax, s.f_blocks > 0]


def sc_users(d, u1, u2, shared):
    """Owners, setgid inheritance and denials for unprivileged callers."""
    o = []
    pub = os.path.join(d, "pub")
    os.mkdir(pub)
    os.chmod(pub, 0o777)
    sg = os.path.join(d, "sg")
    os.mkdir(sg)
    os.chown(sg, 0, shared.gr_gid)
    os.chmod(sg, 0o2775)
    grp_only = os.path.join(d, "grp")
    os.mkdir(grp_only)
    os.chown(grp_only, 0, shared.gr_gid)
    os.chmod(grp_only, 0o770)
    sticky = os.path.join(d, "sticky")
    os.mkdir(sticky)
    os.chmod(sticky, 0o1777)

    def u1_creates():
        write_file(os.path.join(pub, "u1"), b"u1")
        os.chmod(os.path.join(pub, "u1"), 0o600)
        write_file(os.path.join(sg, "u1"), b"u1")
        os.mkdir(os.path.join(sg, "sub"))
        write_file(os.path.join(grp_only, "u1"), b"u1")   # via the supplementary group
        write_file(os.path.join(sticky, "u1"), b"u1")
        os.symlink("u1", os.path.join(pub, "u1link"))
        os.mkdir(os.path.join(pub, "u1dir"), 0o700)
        return "ok"
    o.append(as_user(u1, u1_creates))
    for p in ("pub/u1", "sg/u1", "sg/sub", "grp/u1", "sticky/u1", "pub/u1link", "pub/u1dir"):
        o.append((p, st_obs(os.path.join(d, p))))
    o.append(as_user(u2, lambda: read_file(os.path.join(pub, "u1"))))
    o.append(as_user(u2, lambda: write_file(os.path.join(grp_only, "u2"), b"x")))
    o.append(as_user(u2, lambda: os.unlink(os.path.join(sticky, "u1"))))
    o.append(as_user(u2, lambda: os.chmod(os.path.join(pub, "u1"), 0o666)))
    o.append(as_user(u2, lambda: os.listdir(os.path.join(pub, "u1dir"))))
    o.append(as_user(u2, lambda: os.rename(os.path.join(sticky, "u1"), os.path.join(sticky, "x"))))
    o.append(as_user(u1, lambda: os.chown(os.path.join(pub, "u1"), -1, shared.gr_gid)))
    o.append(as_user(u1, lambda: os.chown(os.path.join(pub, "u1"), -1, 0)))
    o.append(as_user(u1, lambda: os.chown(os.path.join(pub, "u1"), 0, -1)))
    o.append(st_obs(os.path.join(pub, "u1")))

    def u1_setid():
        p = os.path.join(pub, "suid")
        write_file(p, b"#!/bin/sh\n")
        os.chmod(p, 0o6755)
        before = stat.S_IMODE(os.stat(p).st_mode)
        return before
    o.append(as_user(u1, u1_setid))
    os.chmod(os.path.join(pub, "suid"), 0o6777)

    def u2_writes_suid():
        with open(os.path.join(pub, "suid"), "ab") as f:
            f.write(b"echo\n")
        return "ok"
    o.append(as_user(u2, u2_writes_suid))
    o.append(stat.filemode(os.stat(os.path.join(pub, "suid")).st_mode))
    o.append(as_user(u1, lambda: os.utime(os.path.join(pub, "u1"), ns=(5, 7))))
    o.append(as_user(u2, lambda: os.utime(os.path.join(pub, "u1"), ns=(5, 7))))
    o.append(as_user(u1, lambda: os.setxattr(os.path.join(pub, "u1"), "user.a", b"1")))
    o.append(as_user(u2, lambda: os.setxattr(os.path.join(pub, "u1"), "user.a", b"1")))
    o.append(as_user(u2, lambda: os.truncate(os.path.join(pub, "u1"), 0)))
    o.append(as_user(u2, lambda: os.link(os.path.join(pub, "u1"), os.path.join(pub, "u2l"))))
    return o


def main():
    require_root_fuse()
    shared = ensure_group("fcache-tshared")
    u1 = ensure_user("fcache-tu1", [shared.gr_name])
    u2 = ensure_user("fcache-tu2")
    vol = Volume("posix").start()
    ref_top = os.path.join(vol.top, "ref")
    os.mkdir(ref_top)
    scenarios = [("files", sc_files), ("dirs", sc_dirs), ("rename+links", sc_rename_links),
                 ("attributes+xattrs", sc_attrs), ("locks", sc_locks), ("statfs", sc_statfs),
                 ("users", lambda d: sc_users(d, u1, u2, shared))]
    for name, fn in scenarios:
        rd, vd = os.path.join(ref_top, name), vol.v(name)
        os.mkdir(rd)
        os.mkdir(vd)
        os.chmod(rd, 0o755)
        os.chmod(vd, 0o755)
        try:
            want = fn(rd)
        except Exception as e:  # noqa: BLE001
            want = f"raised {e!r}"
        try:
            got = fn(vd)
        except Exception as e:  # noqa: BLE001
            got = f"raised {e!r}"
        if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
            for i, (g, w) in enumerate(zip(got, want)):
                eq(g, w, f"{name}[{i}] same through the view as on the backing")
        else:
            eq(got, want, f"{name}: same through the view as on the backing")
        # and the view's changes really are on the backing
        eq(sorted(os.listdir(vd)), sorted(os.listdir(vol.b(name))), f"{name}: view lists the backing")

    # O_DIRECT policy: unaligned direct I/O works through the view
    p = vol.v("direct")
    fd = os.open(p, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o644)
    n = os.pwrite(fd, b"unaligned direct write", 3)
    got = os.pread(fd, 10, 5)
    os.close(fd)
    eq((n, got), (22, b"aligned di"), "O_DIRECT unaligned write/read served (policy: no O_DIRECT on the backing)")
    eq(read_file(vol.b("direct")), b"\0\0\0unaligned direct write", "O_DIRECT write reached the backing")
    vol.stop()
    check(not os.path.ismount(vol.mnt), "view unmounted at stop")
    finish()


if __name__ == "__main__":
    main()
