#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""POSIX behaviour through the view that a conformance run checks, against the backing.

As view-posix: each scenario runs in a plain directory and in the view, and what
a user observes must be the same there: default ACLs and the umask, ACL entries
in permission checks, execute-only programs, trusted.* xattrs on symlinks,
O_TMPFILE; then what only the view can get wrong, checked against the
backing: attributes changed behind the kernel's cache (set-id bits killed by a
write, a mode changed by an ACL), O_DIRECT with shared mmap and the page
cache, atime, open_by_handle_at after the kernel dropped the inode.
"""
import ctypes
import os
import shutil
import stat
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, as_user, check, ensure_group, ensure_user, eq, errname, finish,  # noqa: E402
                     read_direct, read_file, require_root_fuse, skip, write_file)


def mode_of(p):
    return stat.filemode(os.lstat(p).st_mode)


def getfacl(p):
    r = subprocess.run(["getfacl", "-cpn", p], capture_output=True, text=True, check=True)
    return r.stdout


def setfacl(*args):
    subprocess.run(["setfacl", *args], check=True)


def sc_acl(d, u1):
    """A default ACL replaces the umask; ACL entries count in permission checks."""
    o = []
    a = os.path.join(d, "acl")
    os.mkdir(a, 0o775)
    setfacl("-d", "-m", "u::rwx,g::rwx,o::r-x", a)
    fd = os.open(os.path.join(a, "ro"), os.O_CREAT | os.O_WRONLY, 0o440)
    os.close(fd)
    o.append(mode_of(os.path.join(a, "ro")))
    os.mkdir(os.path.join(a, "sub"), 0o777)
    o.append(mode_of(os.path.join(a, "sub")))
    o.append(getfacl(os.path.join(a, "sub")))
    os.mknod(os.path.join(a, "fifo"), stat.S_IFIFO | 0o666)
    o.append(mode_of(os.path.join(a, "fifo")))
    # a setgid directory with a default ACL
    sg = os.path.join(d, "sg")
    os.mkdir(sg)
    os.chmod(sg, 0o2775)
    setfacl("-d", "-m", "u::rwx,g::rwx,o::r-x", sg)
    os.mkdir(os.path.join(sg, "sub"), 0o777)
    o.append(mode_of(os.path.join(sg, "sub")))
    # no default ACL: the umask (022, set by main) applies
    fd = os.open(os.path.join(d, "plain"), os.O_CREAT | os.O_WRONLY, 0o666)
    os.close(fd)
    o.append(mode_of(os.path.join(d, "plain")))
    os.mkdir(os.path.join(d, "plaindir"), 0o777)
    o.append(mode_of(os.path.join(d, "plaindir")))
    # as a user, under the default ACL: umask 022 from as_user must not apply
    os.chmod(a, 0o777)
    o.append(as_user(u1, lambda: os.close(os.open(os.path.join(a, "u1"), os.O_CREAT | os.O_WRONLY,
                                                  0o664))))
    o.append(mode_of(os.path.join(a, "u1")))
    # a named-user entry grants what the mode bits alone would not
    p = os.path.join(d, "secret")
    write_file(p, b"s")
    os.chmod(p, 0o600)
    o.append(as_user(u1, lambda: read_file(p)))
    setfacl("-m", f"u:{u1.pw_name}:r", p)
    o.append(mode_of(p))
    o.append(as_user(u1, lambda: read_file(p)))
    setfacl("-b", p)
    o.append(as_user(u1, lambda: read_file(p)))
    return o


def sc_exec(d, u1):
    """A program with execute but not read permission runs."""
    o = []
    p = os.path.join(d, "true")
    shutil.copyfile("/bin/true", p)
    os.chmod(p, 0o711)

    def run():
        return subprocess.run([p]).returncode
    o.append(as_user(u1, run))
    o.append(as_user(u1, lambda: read_file(p)))
    os.chmod(p, 0o700)
    o.append(as_user(u1, run))
    return o


def sc_symlink_xattr(d):
    o = []
    link = os.path.join(d, "l")
    write_file(os.path.join(d, "t"), b"t")
    os.symlink("t", link)
    os.setxattr(link, "trusted.x", b"1", follow_symlinks=False)
    o.append(os.getxattr(link, "trusted.x", follow_symlinks=False))
    o.append(sorted(os.listxattr(link, follow_symlinks=False)))
    o.append(sorted(os.listxattr(os.path.join(d, "t"))))
    o.append(errname(lambda: os.setxattr(link, "user.x", b"1", follow_symlinks=False)))
    o.append(errname(lambda: os.getxattr(link, "user.x", follow_symlinks=False)))
    os.removexattr(link, "trusted.x", follow_symlinks=False)
    o.append(errname(lambda: os.getxattr(link, "trusted.x", follow_symlinks=False)))
    return o


libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
AT_SYMLINK_FOLLOW = 0x400


def link_fd(fd, dst):
    """linkat(2) of an open file through /proc/self/fd (os.link() may call link())."""
    if libc.linkat(AT_FDCWD, f"/proc/self/fd/{fd}".encode(), AT_FDCWD, dst.encode(),
                   AT_SYMLINK_FOLLOW) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), dst)


STATX_MODE = 0x2


def statx_mode(p):
    """statx(2) asking for the mode only: the kernel's cached mode, unless it knows it is stale."""
    buf = ctypes.create_string_buffer(256)
    if libc.statx(AT_FDCWD, p.encode(), 0, STATX_MODE, buf) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), p)
    return stat.filemode(int.from_bytes(buf.raw[28:30], "little"))


def sc_tmpfile(d, u1):
    o = []
    fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o666)
    os.write(fd, b"tmp data")
    o.append(sorted(os.listdir(d)))
    st = os.fstat(fd)
    o.append((stat.filemode(st.st_mode), st.st_nlink, st.st_size, os.pread(fd, 3, 4)))
    link_fd(fd, os.path.join(d, "linked"))
    o.append((read_file(os.path.join(d, "linked")), os.stat(os.path.join(d, "linked")).st_nlink))
    os.write(fd, b"+more")
    os.close(fd)
    o.append(read_file(os.path.join(d, "linked")))
    fd = os.open(d, os.O_TMPFILE | os.O_WRONLY | os.O_EXCL, 0o600)
    o.append(errname(lambda: link_fd(fd, os.path.join(d, "x"))))
    os.close(fd)
    o.append(errname(lambda: os.open(d, os.O_TMPFILE | os.O_RDONLY, 0o600)))
    os.chmod(d, 0o777)

    def user_tmpfile():
        fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o644)
        link_fd(fd, os.path.join(d, "u1"))
        os.close(fd)
        return "ok"
    o.append(as_user(u1, user_tmpfile))
    s = os.stat(os.path.join(d, "u1"))
    o.append((stat.filemode(s.st_mode), s.st_uid == u1.pw_uid, s.st_gid == u1.pw_gid))
    o.append(sorted(os.listdir(d)))
    return o


def sc_setid_kill(d, u1, u2):
    """Set-id bits a change by another user kills, and modes an ACL changes, are seen at once."""
    o = []
    os.chmod(d, 0o777)
    ops = {
        "write": lambda p: os.close(os.open(p, os.O_WRONLY)) or write_at(p, b"w", 1),
        "direct": lambda p: write_at(p, b"w", 1, os.O_DIRECT),
        "truncate": lambda p: os.truncate(p, 3),
        "fallocate": lambda p: falloc(p),
    }
    for name, fn in ops.items():
        p = os.path.join(d, name)
        as_user(u1, lambda: write_file(p, b"#!/bin/sh\n" * 100))
        as_user(u1, lambda: os.chmod(p, 0o6777))
        o.append((name, mode_of(p)))
        fd = os.open(p, os.O_RDONLY)       # an open file keeps the inode cached
        o.append((name, as_user(u2, lambda: fn(p) or "ok")))
        o.append((name, statx_mode(p), mode_of(p), stat.filemode(os.fstat(fd).st_mode),
                  os.access(p, os.X_OK)))
        os.close(fd)
    p = os.path.join(d, "acl")
    write_file(p, b"x")
    os.chmod(p, 0o644)
    fd = os.open(p, os.O_RDONLY)
    o.append(mode_of(p))
    setfacl("-m", f"u:{u1.pw_name}:rwx", p)
    o.append((statx_mode(p), mode_of(p), stat.filemode(os.fstat(fd).st_mode)))
    os.setxattr(p, "system.posix_acl_access", os.getxattr(p, "system.posix_acl_access"))
    setfacl("-m", "m::r", p)
    o.append((statx_mode(p), mode_of(p), stat.filemode(os.fstat(fd).st_mode)))
    os.close(fd)
    return o


def write_at(p, data, off, extra=0):
    fd = os.open(p, os.O_WRONLY | extra)
    try:
        if extra & os.O_DIRECT:
            import mmap
            buf = mmap.mmap(-1, 4096)
            buf.write(data * 4096)
            os.pwritev(fd, [buf], 0)
        else:
            os.pwrite(fd, data, off)
    finally:
        os.close(fd)


def falloc(p):
    fd = os.open(p, os.O_WRONLY)
    try:
        os.posix_fallocate(fd, 0, 65536)
    finally:
        os.close(fd)


def check_atime(vol):
    """The daemon's own reads leave atime alone; the view's noatime and nodiratime hold."""
    old = 946684800 * 10**9                     # 2000-01-01, older than any mtime here
    os.mkdir(vol.b("atime"))
    for n in ("pinned", "read"):
        write_file(vol.b("atime", n), b"atime" * 1000)
        os.utime(vol.b("atime", n), ns=(old, os.stat(vol.b("atime", n)).st_mtime_ns))
    os.mkdir(vol.b("atime", "dir"))
    os.utime(vol.b("atime", "dir"), ns=(old, os.stat(vol.b("atime", "dir")).st_mtime_ns))

    def atime(*p):
        return os.stat(vol.b("atime", *p)).st_atime_ns

    vol.ctl("pin", "atime/pinned")
    eq(atime("pinned"), old, "a pin reads the backing without changing its atime")
    subprocess.run(["mount", "-o", "remount,bind,noatime", vol.mnt], check=True)
    read_direct(vol.v("atime", "read"))
    os.listdir(vol.v("atime", "dir"))
    eq((atime("read"), atime("dir")), (old, old),
       "view mounted noatime: a read and a listing leave the backing's atime alone")
    subprocess.run(["mount", "-o", "remount,bind,strictatime", vol.mnt], check=True)
    read_direct(vol.v("atime", "read"))
    os.listdir(vol.v("atime", "dir"))
    eq((atime("read") > old, atime("dir") > old), (True, True),
          "view mounted with atime updates again (a bind remount cannot go back from noatime to relatime): a read and a listing update an atime older than the mtime, by the backing's rules")
    eq(os.stat(vol.v("atime", "read")).st_atime_ns, atime("read"), "the view reports that atime")
    before = atime("read")
    with open(vol.v("atime", "read"), "r+b") as f:   # the store copy is patched
        f.write(b"new")
    eq(vol.ctl("query cached", "atime/read").get("cached"), "complete", "the file is in the store")
    read_direct(vol.v("atime", "read"))
    check(atime("read") > before, "a read served from the store after a change updates the atime")


def sc_direct(d):
    """O_DIRECT (aligned, as the backing needs; view-posix checks unaligned): a shared
    mapping of the file, and buffered readers see direct writes at once."""
    import mmap
    o = []
    p = os.path.join(d, "f")
    write_file(p, b"a" * 8192)
    buffered = os.open(p, os.O_RDONLY)
    o.append(os.pread(buffered, 4, 4096))        # now in the page cache
    fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096)
    buf.write(b"d" * 4096)
    o.append(os.pwritev(fd, [buf], 4096))
    o.append(os.pread(buffered, 4, 4096))
    o.append(read_file(p)[4094:4098])
    rbuf = mmap.mmap(-1, 4096)
    o.append((os.preadv(fd, [rbuf], 4096), rbuf[:4]))
    m = mmap.mmap(fd, 8192)                      # MAP_SHARED of an O_DIRECT file
    m[4096:4098] = b"MM"
    m.flush()
    o.append(m[0:2])
    m.close()
    o.append(os.pread(buffered, 4, 4096))
    o.append((os.preadv(fd, [rbuf], 4096), rbuf[:4]))
    os.close(fd)
    os.close(buffered)
    o.append(read_file(p)[4094:4100])
    return o


def name_to_handle(p):
    buf = ctypes.create_string_buffer(8 + 128)
    struct.pack_into("Ii", buf, 0, 128, 0)
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(AT_FDCWD, p.encode(), buf, ctypes.byref(mount_id), 0) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), p)
    return buf


def open_by_handle(mount_fd, h, flags):
    fd = libc.open_by_handle_at(mount_fd, h, flags)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return fd


def check_handles(vol):
    """open_by_handle_at finds a linked file (and a directory) after the kernel dropped its inode."""
    os.makedirs(vol.v("h", "dir", "sub"))
    write_file(vol.v("h", "dir", "sub", "f"), b"by handle")
    write_file(vol.v("h", "gone"), b"x")
    hf, hd, hg = (name_to_handle(vol.v("h", *p)) for p in (("dir", "sub", "f"), ("dir", "sub"), ("gone",)))
    os.unlink(vol.v("h", "gone"))
    mount_fd = os.open(vol.mnt, os.O_RDONLY | os.O_DIRECTORY)
    for rnd in range(2):
        # Drops every unused dentry and inode, the view's among them (the
        # kernel then sends FORGET): the handles must still lead to them.
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2")
        fd = errname(lambda: open_by_handle(mount_fd, hf, os.O_RDONLY))
        eq(errname(lambda: os.pread(fd, 100, 0)) if isinstance(fd, int) else fd, b"by handle",
           f"round {rnd}: a file opened by handle after its inode was dropped")
        if isinstance(fd, int):
            os.close(fd)
        fd = errname(lambda: open_by_handle(mount_fd, hd, os.O_RDONLY | os.O_DIRECTORY))
        eq(sorted(os.listdir(fd)) if isinstance(fd, int) else fd, ["f"],
           f"round {rnd}: a directory opened by handle after its inode was dropped")
        if isinstance(fd, int):
            os.close(fd)
        eq(errname(lambda: open_by_handle(mount_fd, hg, os.O_RDONLY)), "EESTALE",
           f"round {rnd}: an unlinked file's handle is stale")
    os.close(mount_fd)
    eq(read_file(vol.v("h", "dir", "sub", "f")), b"by handle", "the path still works")


def main():
    require_root_fuse()
    if not shutil.which("setfacl"):
        skip("setfacl is not installed (Debian package acl)")
    shared = ensure_group("fcache-tshared")
    u1 = ensure_user("fcache-tu1", [shared.gr_name])
    u2 = ensure_user("fcache-tu2")
    os.umask(0o022)
    vol = Volume("posix2").start()
    ref_top = os.path.join(vol.top, "ref")
    os.mkdir(ref_top)
    scenarios = [("acl", lambda d: sc_acl(d, u1)), ("exec", lambda d: sc_exec(d, u1)),
                 ("symlink-xattr", sc_symlink_xattr), ("tmpfile", lambda d: sc_tmpfile(d, u1)),
                 ("setid-kill", lambda d: sc_setid_kill(d, u1, u2)), ("direct", sc_direct)]
    for name, fn in scenarios:
        rd, vd = os.path.join(ref_top, name), vol.v(name)
        for x in (rd, vd):
            os.mkdir(x)
            os.chmod(x, 0o755)
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

    check_atime(vol)
    check_handles(vol)
    vol.stop()
    check(not os.path.ismount(vol.mnt), "view unmounted at stop")
    finish()


if __name__ == "__main__":
    main()
