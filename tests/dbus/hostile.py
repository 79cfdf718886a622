#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# hostile.py: what a hostile local user tries on a volume, run as that user.
#
#   hostile.py names DIR        files named with LF, TAB, CR, ESC, other control
#                               bytes and 255-byte components in DIR (the user's
#                               own, in a volume), each passed to every Manager1
#                               method that takes a path; prints one line a call
#   hostile.py race DIR INO N   swaps DIR/d (the user's directory holding
#                               "secret") with DIR/link (a symlink to a root-only
#                               directory holding root's "secret", inode INO) in
#                               a loop, while calling Query, Pin, Flush, Unpin,
#                               SetCacheable, ListConflicts, GetConflictVersion
#                               and ResolveConflict on DIR/d/secret N times each;
#                               prints "calls=C answers_about_root=A"
import ctypes
import os
import sys
import threading

from gi.repository import Gio, GLib

BUS, OBJ, IFACE = "org.fcache.Manager1", "/org/fcache/Manager1", "org.fcache.Manager1"
RENAME_EXCHANGE = 2
libc = ctypes.CDLL(None, use_errno=True)

bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)


def call(method, sig, args, out="(a{sv})"):
    """(ok, value or error text)"""
    try:
        ret, _ = bus.call_with_unix_fd_list_sync(BUS, OBJ, IFACE, method, GLib.Variant(sig, args),
                                                 GLib.VariantType(out),
                                                 Gio.DBusCallFlags.NONE, 60000, None, None)
        return True, ret.unpack()
    except GLib.Error as e:
        return False, e.message


def calls_on(path, dry_run=True):
    """Every Manager1 method that takes a path, on path."""
    return [
        ("Query", "(ssb)", (path, "cached", False), "(a{sv})"),
        ("Control", "(ssa{sv})", (path, "query state", {}), "(a{sv})"),
        ("Flush", "(ss)", (path, ""), "(a{sv})"),
        ("Pin", "(sbub)", (path, False, 0, dry_run), "(o)"),
        ("Unpin", "(sb)", (path, False), "(a{sv})"),
        ("SetCacheable", "(sb)", (path, True), "(a{sv})"),
        ("ListConflicts", "(s)", (path,), "(a(tsss))"),
        ("GetConflictVersion", "(ss)", (path, "local"), "(h)"),
        ("ResolveConflict", "(ss)", (path, "remote"), "(a{sv})"),
        ("Prefetch", "(sb)", (path, False), "(o)"),
    ]


def names(d):
    bad = ["x\ndisconnect", "x\nunpin recursive\tprivate", "tab\tname", "cr\rname",
           "esc\x1b[31mname", "bell\x07\x01\x7fname", "n" * 255, "\n", "x\n\nreconnect"]
    for name in bad:
        p = os.path.join(d, name)
        with open(p, "w") as f:
            f.write("hostile\n")
        for method, sig, args, out in calls_on(p):
            ok, val = call(method, sig, args, out)
            print(f"{method} {name!r}: {'ok' if ok else 'refused'}: {str(val)[:120]!r}")


def race(d, root_ino, n):
    stop = threading.Event()
    a, b = os.path.join(d, "d").encode(), os.path.join(d, "link").encode()

    def swapper():
        while not stop.is_set():
            libc.renameat2(-100, a, -100, b, RENAME_EXCHANGE)

    t = threading.Thread(target=swapper, daemon=True)
    t.start()
    target = os.path.join(d, "d", "secret")
    calls = about_root = 0
    try:
        for _ in range(n):
            for method, sig, args, out in calls_on(target, dry_run=False):
                if method in ("Control", "Prefetch"):
                    continue
                ok, val = call(method, sig, args, out)
                calls += 1
                if not ok:
                    continue
                text = repr(val)
                res = val[0] if isinstance(val, tuple) and val and isinstance(val[0], dict) else {}
                ino = res.get("ino")
                if ino is not None and str(ino) == str(root_ino):
                    about_root += 1
                    print(f"# {method} answered about root's object: {text[:200]}")
                if "private" in text:
                    about_root += 1
                    print(f"# {method} named root's directory: {text[:200]}")
    finally:
        stop.set()
        t.join()
    print(f"calls={calls} answers_about_root={about_root}")


def main():
    if sys.argv[1] == "names":
        names(sys.argv[2])
    elif sys.argv[1] == "race":
        race(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")


main()
