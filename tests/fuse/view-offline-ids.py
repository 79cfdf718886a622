#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Offline, a node remembers which log object it is and the inode number it
shows once it has named them (view-inode.c); every change that can make it
another follows: an atomic save (a file made offline renamed over a server
file takes that file's identity), a hard link (each name is recorded), an
unlink (a create cancelled, the name made again; a removed file held open
while another file is made), a rename of a server file
and of a directory, and a switch online and back.  Each step changes the
object through a node that named it before (a descriptor held open, or the
name), and the server must end with exactly those changes, with no conflict.
Objects made offline keep the inode number they showed then across the
switches that follow (while the kernel knows their nodes).  A worker killed
offline hands its successor every name of a file of several.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import Volume, eq, finish, read_file, require_root_fuse, write_file  # noqa: E402


def mode(path):
    return os.stat(path).st_mode & 0o7777


def main():
    require_root_fuse()
    vol = Volume("ids")
    v, b = vol.v, vol.b
    os.makedirs(b("p"))
    write_file(b("p", "S1"), b"server one\n")
    write_file(b("p", "S2"), b"server two\n")
    os.chmod(b("p", "S1"), 0o644)
    vol.start()
    vol.ctl("pin recursive", "p")
    s1_ino = os.stat(b("p", "S1")).st_ino
    vol.ctl("disconnect")
    eq(vol.state()["state"], "offline", "offline")

    # An atomic save through a held descriptor: the node named N (made offline)
    # becomes S1, and changes through that descriptor and that name are S1's.
    fd = os.open(v("p", "N"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"saved over S1\n")
    os.fchmod(fd, 0o640)
    os.utime(fd, (1300000000, 1300000000))
    n_ino = os.fstat(fd).st_ino
    os.rename(v("p", "N"), v("p", "S1"))
    eq(os.fstat(fd).st_ino, s1_ino, "after the save, the held file shows S1's inode number")
    eq(os.stat(v("p", "S1")).st_ino, s1_ino, "and so does its name")
    os.fchmod(fd, 0o604)
    os.utime(fd, (1310000000, 1310000000))
    os.close(fd)      # its flush logs S1's content, not the cancelled create's
    eq(mode(v("p", "S1")), 0o604, "the saved file's mode through the held descriptor")

    # Hard links: a, changed (named), then linked, changed through b, a removed.
    write_file(v("p", "a"), b"pair\n")
    os.chmod(v("p", "a"), 0o600)
    os.link(v("p", "a"), v("p", "b"))
    os.chmod(v("p", "b"), 0o620)
    os.unlink(v("p", "a"))
    os.chmod(v("p", "b"), 0o640)
    with open(v("p", "b"), "ab") as f:
        f.write(b"via b\n")

    # A create cancelled by its unlink, the name made again: a new object.
    write_file(v("p", "c"), b"first c\n")
    os.chmod(v("p", "c"), 0o600)
    os.unlink(v("p", "c"))
    write_file(v("p", "c"), b"second c\n")
    os.chmod(v("p", "c"), 0o611)
    eq((read_file(v("p", "c")), mode(v("p", "c"))), (b"second c\n", 0o611),
       "the name made again holds its own content and mode")

    # A file made offline, held open, its name removed (the create cancelled),
    # another made: changes through the held descriptor are
    # of nothing the server will see, never of the new file.
    fd = os.open(v("p", "x"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b"x first\n")
    os.fsync(fd)
    os.unlink(v("p", "x"))
    write_file(v("p", "y"), b"y only\n")
    os.pwrite(fd, b"written after the unlink\n", 0)
    os.fchmod(fd, 0o600)
    os.setxattr(fd, "user.k", b"v")
    os.close(fd)
    eq(read_file(v("p", "y")), b"y only\n", "a removed file's held descriptor leaves the new file")

    # A server file named (chmod), renamed, then changed again.
    os.chmod(v("p", "S2"), 0o600)
    os.rename(v("p", "S2"), v("p", "S2r"))
    os.chmod(v("p", "S2r"), 0o640)

    # A directory made offline, renamed, created in again.
    os.mkdir(v("p", "D"))
    write_file(v("p", "D", "f"), b"f\n")
    os.chmod(v("p", "D"), 0o750)
    os.rename(v("p", "D"), v("p", "E"))
    write_file(v("p", "E", "g"), b"g\n")
    os.chmod(v("p", "E"), 0o755)
    os.chmod(v("p", "E", "f"), 0o600)
    eq(n_ino != s1_ino, True, "the file made offline had an inode number of its own")

    time.sleep(1.1)
    q = vol.ctl("reconnect")
    eq(vol.state()["state"], "online", "reconnect")
    eq(q.get("conflicts"), "0", "reconnect: no conflicts")

    eq(read_file(b("p", "S1")), b"saved over S1\n", "server: S1 holds the save")
    eq(mode(b("p", "S1")), 0o604, "server: S1's mode is the one set after the save")
    eq(int(os.stat(b("p", "S1")).st_mtime), 1310000000, "server: S1's mtime set after the save")
    eq(sorted(os.listdir(b("p"))), ["E", "S1", "S2r", "b", "c", "y"], "server: the names")
    eq((read_file(b("p", "y")), mode(b("p", "y")), os.listxattr(b("p", "y"))),
       (b"y only\n", 0o644, []), "server: y as made, nothing of the removed file held open")
    eq(read_file(b("p", "b")), b"pair\nvia b\n", "server: b's content")
    eq(mode(b("p", "b")), 0o640, "server: b's mode")
    eq(read_file(b("p", "c")), b"second c\n", "server: c made again")
    eq(mode(b("p", "c")), 0o611, "server: c's mode")
    eq(read_file(b("p", "S2r")), b"server two\n", "server: S2 renamed")
    eq(mode(b("p", "S2r")), 0o640, "server: S2r's mode")
    eq(sorted(os.listdir(b("p", "E"))), ["f", "g"], "server: the renamed directory")
    eq(mode(b("p", "E")), 0o755, "server: E's mode")
    eq(mode(b("p", "E", "f")), 0o600, "server: E/f's mode")

    # A second offline period: what nodes knew before the switches is not used.
    vol.ctl("disconnect")
    os.chmod(v("p", "S1"), 0o600)
    os.chmod(v("p", "E", "g"), 0o604)
    write_file(v("p", "E", "h"), b"h\n")
    vol.ctl("reconnect")
    eq(vol.state()["state"], "online", "second reconnect")
    eq(mode(b("p", "S1")), 0o600, "server: S1's mode from the second offline period")
    eq(mode(b("p", "E", "g")), 0o604, "server: E/g's mode from the second offline period")
    eq(read_file(b("p", "E", "h")), b"h\n", "server: E/h made in the second offline period")
    kept_inode_numbers(vol)
    names_after_takeover(vol)
    vol.stop()
    finish()


def names_after_takeover(vol):
    """A worker killed offline hands every name of a file of several on:
    after one name moves, the kill, another file renamed over the moved
    name, a link of the file through its other name reaches the server
    (before: the successor knew the moved name only, and the link was a
    conflict, "the server removed the file being linked")."""
    v, b = vol.v, vol.b
    for d in ("d1", "d2", "d3"):
        os.makedirs(b("t", d))
    write_file(b("t", "d1", "f"), b"x")
    write_file(b("t", "o"), b"other")
    vol.ctl("pin recursive", "t")
    os.link(v("t", "d1", "f"), v("t", "d2", "g"))
    vol.ctl("disconnect")
    os.rename(v("t", "d1", "f"), v("t", "d3", "moved"))
    old = vol.kill_worker()
    vol.wait_new_worker(old, timeout=120)
    os.rename(v("t", "o"), v("t", "d3", "moved"))
    os.link(v("t", "d2", "g"), v("t", "d1", "linked"))
    q = vol.ctl("reconnect")
    eq(q.get("conflicts"), "0", "after a kill -9 offline: the link through the other name,"
       " no conflict")
    eq(os.path.exists(b("t", "d1", "linked")) and
       os.stat(b("t", "d1", "linked")).st_ino == os.stat(b("t", "d2", "g")).st_ino, True,
       "... the server has the link")
    eq(read_file(v("t", "d1", "linked")), b"x", "... and the view reads it")
    eq(read_file(b("t", "d3", "moved")), b"other", "... and the file renamed over the moved name")


def kept_inode_numbers(vol):
    """An object made offline keeps the inode number it showed then, online
    and offline again, while the kernel knows it (held open or not)."""
    v = vol.v
    vol.ctl("disconnect")
    os.mkdir(v("p", "K"))
    write_file(v("p", "K", "held"), b"held open\n")
    write_file(v("p", "K", "named"), b"only named\n")
    fd = os.open(v("p", "K", "held"), os.O_RDONLY)
    shown = {n: os.lstat(v("p", *n.split("/"))).st_ino for n in ("K", "K/held", "K/named")}
    for when in ("online", "offline", "online again"):
        vol.ctl("disconnect" if when == "offline" else "reconnect")
        eq(vol.state()["state"], when.split()[0], f"{when}: the state")
        now = {n: os.lstat(v("p", *n.split("/"))).st_ino for n in shown}
        eq(now, shown, f"{when}: the objects made offline show the inode numbers they showed")
        eq(os.fstat(fd).st_ino, shown["K/held"], f"{when}: and so does fstat of one held open")
    os.link(v("p", "K", "named"), v("p", "K", "named2"))
    eq(os.lstat(v("p", "K", "named2")).st_ino, shown["K/named"], "a link made online: the same")
    os.close(fd)


if __name__ == "__main__":
    main()
