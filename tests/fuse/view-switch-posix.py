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
"""
import os
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, as_user, check, ensure_group, ensure_user, eq, finish,  # noqa: E402
                     require_root_fuse, wait_for, write_file)


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
            for step in steps:
                if step in ("off", "on"):
                    q = vol.ctl("disconnect" if step == "off" else "reconnect")
                    eq(q["state"], "offline" if step == "off" else "online", f"{name}: {step}")
                    continue
                what, fn = step
                eq(fn(vol.v("p", f)), fn(os.path.join(plain, f)), f"{name}: {what}")
                eq(obs(vol.v("p", f)), obs(os.path.join(plain, f)), f"{name}: after {what}")
            check(wait_for(lambda: vol.state().get("pending") == "0"), f"{name}: log replayed")
            eq(obs(vol.b("p", f)), obs(os.path.join(plain, f)), f"{name}: server after the reconnect")
            eq(obs(vol.v("p", f)), obs(os.path.join(plain, f)), f"{name}: view after the reconnect")
        check(int(vol.state().get("conflicts", "0") or 0) == 0, "no conflict")
    finally:
        vol.cleanup()
    finish()


if __name__ == "__main__":
    main()
