#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A node is a node: what a name serves through the view is the object that
was put there, online and offline, whatever renames, renames over, hard links
and the server's inode numbers do, and a switch between online and offline
does not change what an open directory (a process's cwd) is.

- the "write H.lock, rename over H" reproduction (git's refs and logs),
  exactly, online and offline: every file created and renamed into place
  reads back (O_DIRECT) as what was written, and stat shows it linked; the
  saved file keeps the mode of the save;
- hard links offline: one object, nlink kept, `ln a b; rm a` then changes
  through b, replayed as one object;
- paths near PATH_MAX changed offline;
- replay keeps the time of the offline change as mtime;
- utimensat(AT_SYMLINK_NOFOLLOW) (touch -h) online and offline;
- a process's cwd inside the volume across disconnect and reconnect.
"""
import ctypes
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, finish, read_direct, read_file,  # noqa: E402
                     require_root_fuse, write_file)

libc = ctypes.CDLL(None, use_errno=True)


def lock_save(path, data):
    """write PATH.lock, fsync, rename over PATH (git's lockfile)."""
    lock = path + ".lock"
    fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(lock, path)


def rename_over_rounds(vol, d, label):
    """The reproduction: three rounds of lock saves of H1..H3 then three
    fresh files renamed into place, each read back with O_DIRECT."""
    content = {f"H{i}": read_file(os.path.join(d, f"H{i}")) for i in range(1, 4)}
    bad = []
    for rnd in range(3):
        for h in sorted(content):
            content[h] = content[h] + f"round {rnd} {h}\n".encode()
            lock_save(os.path.join(d, h), content[h])
        for j in range(3):
            data = (f"{label} R{rnd} j{j} ".encode() * 2000)[:25000]
            tmp = os.path.join(d, f"tmp_{rnd}_{j}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            x = os.path.join(d, f"X_{rnd}_{j}")
            os.rename(tmp, x)
            got = read_direct(x)
            st = os.stat(x)
            if got != data or st.st_nlink != 1 or st.st_size != len(data):
                bad.append(f"X_{rnd}_{j}: {len(got)} bytes, nlink {st.st_nlink}, "
                           f"first bytes {got[:16]!r}")
            content[f"X_{rnd}_{j}"] = data
    eq(bad, [], f"{label}: every file renamed into place reads back as written")
    for name, data in sorted(content.items()):
        eq(read_direct(os.path.join(d, name)), data, f"{label}: {name} reads back")
    inos = {}
    for name in content:
        inos.setdefault(os.stat(os.path.join(d, name)).st_ino, []).append(name)
    eq([n for n in inos.values() if len(n) > 1], [], f"{label}: no two names share an inode")
    return content


def touch_h(path, t):
    """utimensat(AT_FDCWD, path, (t, t), AT_SYMLINK_NOFOLLOW)."""
    class timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
    ts = (timespec * 2)((t, 0), (t, 0))
    r = libc.utimensat(-100, path.encode(), ts, 0x100)
    return 0 if r == 0 else ctypes.get_errno()


def deep_dir(root, total):
    """A chain of directories under root whose path is about total bytes long."""
    parts = []
    length = len(root)
    while length + 201 < total:
        parts.append("d" * 200)
        length += 201
    return parts


def mkdirs_at(root, parts):
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for p in parts:
        try:
            os.mkdir(p, dir_fd=fd)
        except FileExistsError:
            pass
        nfd = os.open(p, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    return fd


def main():
    require_root_fuse()
    vol = Volume("identity", lease="1s")
    b = vol.b
    for d in ("rp", "on", "hl", "tm", "ln"):
        os.makedirs(b(d))
    for i in range(1, 4):
        write_file(b("rp", f"H{i}"), f"server file H{i}\n".encode() * 3)
        write_file(b("on", f"H{i}"), f"server file H{i}\n".encode() * 3)
    write_file(b("hl", "a"), b"linked\n")
    os.link(b("hl", "a"), b("hl", "b"))
    write_file(b("hl", "c"), b"pair\n")
    os.link(b("hl", "c"), b("hl", "d"))
    write_file(b("tm", "f"), b"old\n")
    os.utime(b("tm", "f"), (1000000000, 1000000000))
    write_file(b("ln", "target"), b"t\n")
    os.symlink("target", b("ln", "sym"))
    deep = deep_dir(b("deep"), 4400)
    os.close(mkdirs_at(b(), ["deep"] + deep))
    vol.start()
    v = vol.v

    # ---- online ----
    rename_over_rounds(vol, v("on"), "online")
    eq(touch_h(v("ln", "sym"), 1500000000), 0, "online: utimensat(AT_SYMLINK_NOFOLLOW) on a symlink")
    eq(int(os.lstat(v("ln", "sym")).st_mtime), 1500000000, "online: touch -h set the time")

    for d in ("rp", "hl", "tm", "ln", "deep"):
        vol.ctl("pin recursive", d)
    cwd = subprocess.Popen(["sh", "-c", "read x; pwd -P; cat H1 >/dev/null && echo ok"],
                           cwd=v("rp"), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    cwd_link = f"/proc/{cwd.pid}/cwd"
    eq(os.readlink(cwd_link), v("rp"), "cwd inside the volume before the disconnect")
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect")
    eq(os.readlink(cwd_link), v("rp"), "a process's cwd is still its directory offline")

    # ---- offline ----
    os.chmod(v("rp", "H3"), 0o600)     # replaced below: the saves' mode wins
    content = rename_over_rounds(vol, v("rp"), "offline")

    st_a, st_b = os.stat(v("hl", "a")), os.stat(v("hl", "b"))
    eq((st_a.st_nlink, st_b.st_nlink), (2, 2), "offline: a hard-link pair keeps nlink 2")
    eq(st_a.st_ino, st_b.st_ino, "offline: a hard-link pair is one object")
    with open(v("hl", "a"), "ab") as f:
        f.write(b"via a\n")
    eq(read_file(v("hl", "b")), b"linked\nvia a\n", "offline: a write through one link shows"
       " through the other")
    os.link(v("hl", "c"), v("hl", "e"))
    eq(os.stat(v("hl", "c")).st_nlink, 3, "offline: ln makes nlink 3")
    os.unlink(v("hl", "c"))
    os.unlink(v("hl", "d"))
    try:
        with open(v("hl", "e"), "ab") as f:
            f.write(b"via e\n")
        os.chmod(v("hl", "e"), 0o600)
        err = 0
    except OSError as e:
        err = e.errno
    eq(err, 0, "offline: ln c e; rm c d; then changes through e work")
    eq(read_file(v("hl", "e")), b"pair\nvia e\n", "offline: e holds the pair's bytes")

    t_change = time.time()
    write_file(v("tm", "f"), b"changed offline\n")
    mtime_offline = os.stat(v("tm", "f")).st_mtime
    write_file(v("tm", "new"), b"made offline\n")
    os.utime(v("tm", "new"), (1200000000, 1200000000))

    eq(touch_h(v("ln", "sym"), 1600000000), 0, "offline: utimensat(AT_SYMLINK_NOFOLLOW) on a symlink")

    fd = mkdirs_at(v(), ["deep"] + deep)
    try:
        dfd = os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(dfd, b"deep offline\n")
        os.close(dfd)
        os.mkdir("sub", dir_fd=fd)
        os.rename("f", "g", src_dir_fd=fd, dst_dir_fd=fd)
        err = 0
    except OSError as e:
        err = e.errno
    finally:
        os.close(fd)
    eq(err, 0, "offline: changes to a file with a path near PATH_MAX")

    # ---- reconnect ----
    time.sleep(1.1)     # the reconnect time differs from the change's
    q = vol.ctl("reconnect")
    eq(q.get("state", "online") and vol.state()["state"], "online", "reconnect")
    eq(q.get("conflicts"), "0", "reconnect: no conflicts")
    eq(os.readlink(cwd_link), v("rp"), "a process's cwd is still its directory after reconnect")
    out, _ = cwd.communicate(b"\n", timeout=30)
    eq(out.decode().split(), [v("rp"), "ok"], "the process still works in its cwd")

    eq(os.stat(b("rp", "H3")).st_mode & 0o777, 0o644, "server: a saved file has the mode of"
       " its last save, not a chmod of the file it replaced")
    for name, data in sorted(content.items()):
        eq(read_file(b("rp", name)), data, f"server: rp/{name} after reconnect")
        eq(read_direct(v("rp", name)), data, f"view: rp/{name} after reconnect")
    eq(read_file(b("hl", "b")), b"linked\nvia a\n", "server: the write through a")
    eq(os.stat(b("hl", "a")).st_ino, os.stat(b("hl", "b")).st_ino, "server: a, b still one")
    eq(sorted(os.listdir(b("hl"))), ["a", "b", "e"], "server: hl after reconnect")
    eq(read_file(b("hl", "e")), b"pair\nvia e\n", "server: e")
    eq(os.stat(b("hl", "e")).st_mode & 0o777, 0o600, "server: e's mode")
    st = os.stat(b("tm", "f"))
    check(abs(st.st_mtime - mtime_offline) < 0.01,
          f"server: mtime is the offline change's ({st.st_mtime} vs {mtime_offline},"
          f" changed at {t_change})")
    eq(int(os.stat(b("tm", "new")).st_mtime), 1200000000, "server: a new file's set mtime")
    eq(int(os.lstat(b("ln", "sym")).st_mtime), 1600000000, "server: touch -h replayed")
    fd = mkdirs_at(b(), ["deep"] + deep)
    eq(sorted(os.listdir(fd)), ["g", "sub"], "server: the deep directory's changes")
    os.close(fd)
    finish()


if __name__ == "__main__":
    main()
