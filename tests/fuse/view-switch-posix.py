#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Owner and mode changes around a switch come out as on a plain directory.

Each scenario is a sequence of changes (chmod, chown as root and as the
file's unprivileged owner, a new file) with disconnects and reconnects
between them, run in a pinned directory of the view and, without the
switches, in a plain directory.  After every step the mode, owner and
group a user sees must be the same in both, and after the last reconnect
(the offline log replayed) the server's too: a chown kills the set-id bits
of a non-directory, offline as online, and replay neither keeps bits the
chown killed nor kills bits a later chmod set again.

Special files with several names (a FIFO, a character device, a bound
AF_UNIX socket, given more names with link): made online and seen offline,
made or linked offline and seen after the reconnect, a chmod or chown
through one name seen through the others, an unlink or rename of one name
keeping the others; after every step each name's type, mode, owner and
nlink and which names share an inode are as in the plain directory, after
the reconnect on the server too, and no change ends as a conflict.
"""
import os
import socket
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, as_user, check, ensure_group, ensure_user, eq, errname,  # noqa: E402
                     finish, require_root_fuse, wait_for, write_file)


def obs(p):
    s = os.lstat(p)
    return (oct(stat.S_IMODE(s.st_mode)), s.st_uid, s.st_gid)


def scenarios(u1, g2):
    uid, g1 = u1.pw_uid, u1.pw_gid
    groups = [g1, g2]

    def chmod(m):
        return ("chmod %o" % m, lambda p: os.chmod(p, m))

    def chown(u, g):
        return (f"chown {u}:{g}", lambda p: os.chown(p, u, g))

    def user_chown(g):
        return (f"chown -1:{g} as {u1.pw_name}",
                lambda p: as_user(u1, lambda: os.chown(p, -1, g), groups))

    def create():
        return ("create", lambda p: write_file(p, b"x"))

    mine = chown(uid, g1)
    return {
        "set-id, offline chown as owner": [create(), mine, chmod(0o6555), "off", user_chown(g2), "on"],
        "set-id set offline, chown as owner": [create(), mine, "off", chmod(0o6555), user_chown(g2),
                                               "on"],
        "chown kills, chmod sets again offline": [create(), mine, "off", chmod(0o6555), user_chown(g2),
                                                  chmod(0o6555), "on"],
        "chmod, chown, chmod, chown offline": [create(), mine, "off", chmod(0o6555), user_chown(g2),
                                               chmod(0o6555), user_chown(g1), "on"],
        "chown as root offline": [create(), "off", chmod(0o6555), mine, "on"],
        "created offline": ["off", create(), mine, chmod(0o6555), user_chown(g2), "on"],
        "set-id across both switches": [create(), mine, "off", chmod(0o6555), "on", user_chown(g2),
                                        "off", chmod(0o6555), user_chown(g1), "on"],
        "no group execute: setgid kept": [create(), mine, "off", chmod(0o6545), user_chown(g2), "on"],
    }


def run_steps(vol, name, steps, mine, plain, observe):
    """Runs each step on path mine in the view and path plain in the plain
    directory ("off", "on": a switch of the view), comparing the results and
    what observe() sees after each."""
    for step in steps:
        if step in ("off", "on"):
            q = vol.ctl("disconnect" if step == "off" else "reconnect")
            eq(q["state"], "offline" if step == "off" else "online", f"{name}: {step}")
            continue
        what, fn = step
        eq(errname(lambda: fn(mine)), errname(lambda: fn(plain)), f"{name}: {what}")
        eq(observe(mine), observe(plain), f"{name}: after {what}")


def make_special(kind, p):
    if kind == "fifo":
        os.mkfifo(p, 0o644)
    elif kind == "chr":
        os.mknod(p, stat.S_IFCHR | 0o644, os.makedev(1, 3))
    else:
        # bound by a relative name: a socket's path is limited to 108 bytes
        here = os.getcwd()
        os.chdir(os.path.dirname(p))
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(os.path.basename(p))
        finally:
            os.chdir(here)


def link_obs(d, names):
    """Each name's type, mode, owner and nlink (None when absent), and which
    names are one inode."""
    seen, by_ino = {}, {}
    for n in names:
        try:
            s = os.lstat(os.path.join(d, n))
        except FileNotFoundError:
            seen[n] = None
            continue
        seen[n] = (stat.S_IFMT(s.st_mode), oct(stat.S_IMODE(s.st_mode)), s.st_uid, s.st_gid,
                   s.st_nlink)
        by_ino.setdefault(s.st_ino, []).append(n)
    return seen, sorted(sorted(v) for v in by_ino.values())


def link_scenarios(kind, uid, gid):
    def make(a):
        return (f"{kind} {a}", lambda d: make_special(kind, os.path.join(d, a)))

    def link(a, b):
        return (f"link {a} {b}", lambda d: os.link(os.path.join(d, a), os.path.join(d, b)))

    def chmod(a, m):
        return (f"chmod {m:o} {a}", lambda d: os.chmod(os.path.join(d, a), m))

    def chown(a):
        return (f"chown {a}", lambda d: os.chown(os.path.join(d, a), uid, gid))

    def unlink(a):
        return (f"unlink {a}", lambda d: os.unlink(os.path.join(d, a)))

    def rename(a, b):
        return (f"rename {a} {b}", lambda d: os.rename(os.path.join(d, a), os.path.join(d, b)))

    return {
        f"{kind} linked online, seen offline": [
            make("a"), link("a", "b"), link("a", "c"), "off", chmod("b", 0o600), chown("c"),
            unlink("a"), "on"],
        f"{kind} made and linked offline": [
            "off", make("a"), link("a", "b"), chmod("a", 0o640), "on", chown("b"), link("b", "c"),
            unlink("a"), "off", chmod("c", 0o604), "on"],
        f"{kind} linked offline": [
            make("a"), "off", link("a", "b"), chmod("b", 0o600), rename("a", "c"), link("c", "a"),
            "on", unlink("b"), "off", chown("a"), unlink("c"), "on"],
        f"{kind} across both switches": [
            make("a"), link("a", "b"), "off", "on", chmod("a", 0o602), "off", link("b", "c"),
            chown("c"), "on", rename("c", "b"), "off", unlink("a"), chmod("b", 0o660), "on"],
    }


def run_links(vol, plain, u1):
    names = ["a", "b", "c"]
    n = 0
    for kind in ("fifo", "chr", "sock"):
        for name, steps in link_scenarios(kind, u1.pw_uid, u1.pw_gid).items():
            d = f"l{n}"
            n += 1
            os.mkdir(vol.v("p", d))
            os.mkdir(os.path.join(plain, d))
            run_steps(vol, name, steps, vol.v("p", d), os.path.join(plain, d),
                      lambda p: link_obs(p, names))
            check(wait_for(lambda: vol.state().get("pending") == "0"), f"{name}: log replayed")
            eq(link_obs(vol.b("p", d), names), link_obs(os.path.join(plain, d), names),
               f"{name}: server after the reconnect")
            eq(link_obs(vol.v("p", d), names), link_obs(os.path.join(plain, d), names),
               f"{name}: view after the reconnect")
            eq(vol.state().get("conflicts"), "0", f"{name}: no conflict")


def main():
    require_root_fuse()
    g2 = ensure_group("fcache-tshared")
    u1 = ensure_user("fcache-tu1", [g2.gr_name])
    vol = Volume("switch-posix", lease="1s")
    os.makedirs(vol.b("p"))
    plain = os.path.join(vol.top, "plain")
    os.makedirs(plain)
    vol.start()
    try:
        eq(vol.ctl("pin recursive", "p").get("mirrored"), "yes", "pin recursive p: mirrored")
        for i, (name, steps) in enumerate(scenarios(u1, g2.gr_gid).items()):
            f = f"f{i}"
            run_steps(vol, name, steps, vol.v("p", f), os.path.join(plain, f), obs)
            check(wait_for(lambda: vol.state().get("pending") == "0"), f"{name}: log replayed")
            eq(obs(vol.b("p", f)), obs(os.path.join(plain, f)), f"{name}: server after the reconnect")
            eq(obs(vol.v("p", f)), obs(os.path.join(plain, f)), f"{name}: view after the reconnect")
        check(int(vol.state().get("conflicts", "0") or 0) == 0, "no conflict")
        run_links(vol, plain, u1)
        check(int(vol.state().get("conflicts", "0") or 0) == 0, "no conflict with links")
    finally:
        vol.cleanup()
    finish()


if __name__ == "__main__":
    main()
