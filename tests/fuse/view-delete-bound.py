#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A reconnect that would delete more of the pinned copy than
ReconnectDeleteLimit asks first, through a real FUSE view:

- pinned tree, disconnect, the server's side of it removed (rm -rf, the
  export emptied on the same filesystem, which the identity check cannot
  see): reconnect is refused with the figures, `query state` says why and
  keeps them, the local copy stays whole and served, an offline edit keeps
  working; `reconnect force` then goes through and the tree goes;
- a small deletion (under the bound) goes through without force, and a
  directory renamed offline is not counted as lost (the replay moves it);
- ReconnectDeleteLimit as a count.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import Volume, check, eq, finish, read_file, require_root_fuse, write_file  # noqa: E402


def make_tree(root, dirs=3, files=6):
    """{relative path: content} of a tree of dirs directories of files files."""
    out = {}
    for d in range(dirs):
        os.makedirs(os.path.join(root, f"d{d}"), exist_ok=True)
        for f in range(files):
            rel = os.path.join(f"d{d}", f"f{f}")
            data = f"{rel} {'x' * (d * 100 + f)}\n".encode()
            write_file(os.path.join(root, rel), data)
            out[rel] = data
    return out


def read_tree(root):
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root)] = read_file(p)
    return out


def lost_export():
    vol = Volume("delbound", lease="1s")
    os.makedirs(vol.b("proj"))
    files = make_tree(vol.b("proj"))
    write_file(vol.b("unpinned"), b"outside the pins\n")
    vol.start()
    eq(vol.ctl("pin recursive", "proj").get("mirrored"), "yes", "the tree is pinned and mirrored")
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect")
    shutil.rmtree(vol.b("proj"))               # the server's side loses the whole tree

    q = vol.ctl("reconnect", ok=False)
    pinned = len(files) + 3 + 1                # files, directories, the pin's root
    check(q["_rc"] != 0, "reconnect is refused when the server lost the pinned tree")
    check(f"would delete {pinned} of {pinned} pinned objects" in q["_err"],
          f"the refusal gives the figures ({q['_err']})")
    s = vol.state()
    eq(s["state"], "offline", "the volume stays offline")
    eq((s.get("would_delete"), s.get("pinned_objects")), (str(pinned), str(pinned)),
       "query state keeps the figures")
    check("ReconnectDeleteLimit" in s.get("reconnect_refused", ""),
          "query state says why (reconnect_refused)")
    eq(read_tree(vol.v("proj")), files, "the local copy is whole and served")
    write_file(vol.v("proj", "d0", "f0"), b"edited while refused\n")
    eq(read_file(vol.v("proj", "d0", "f0")), b"edited while refused\n",
       "an offline edit works while the reconnect is refused")
    files["d0/f0"] = b"edited while refused\n"
    check(not os.path.exists(vol.b("proj")), "nothing was replayed against the server")

    q = vol.ctl("reconnect force", ok=False)
    eq(q["_rc"], 0, f"reconnect force goes through ({q['_err']})")
    s = vol.state()
    eq(s["state"], "online", "online after reconnect force")
    check("reconnect_refused" not in s, "the refusal is cleared")
    eq(read_file(vol.v("unpinned")), b"outside the pins\n", "the volume serves the server again")
    vol.stop()


def small_deletion():
    vol = Volume("delsmall", lease="1s")
    os.makedirs(vol.b("proj"))
    files = make_tree(vol.b("proj"), dirs=2, files=5)
    os.makedirs(vol.b("proj", "big"))
    for i in range(8):
        write_file(vol.b("proj", "big", f"b{i}"), f"big {i}\n".encode())
    vol.start()
    vol.ctl("pin recursive", "proj")
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect")
    # Offline: a directory renamed (its old name is gone from the mirror, the
    # new one is not on the server: the replay's to move, not a loss).
    os.rename(vol.v("proj", "big"), vol.v("proj", "big2"))
    os.unlink(vol.b("proj", "d1", "f4"))       # the server deletes one file
    del files["d1/f4"]
    q = vol.ctl("reconnect", ok=False)
    eq(q["_rc"], 0, f"a small deletion goes through without force ({q['_err']})")
    eq(vol.state()["state"], "online", "online")
    check(not os.path.exists(vol.v("proj", "d1", "f4")), "the file the server deleted is gone")
    eq(sorted(os.listdir(vol.b("proj", "big2"))), [f"b{i}" for i in range(8)],
       "the directory renamed offline is renamed on the server")

    # Again offline, and the server loses two files: over a count of 1.
    vol.stop()
    vol.args += ["--set", "ReconnectDeleteLimit=1"]
    vol.start()
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect (ReconnectDeleteLimit=1)")
    os.unlink(vol.b("proj", "d0", "f0"))
    os.unlink(vol.b("proj", "d0", "f1"))
    q = vol.ctl("reconnect", ok=False)
    check(q["_rc"] != 0 and "would delete 2 of" in q["_err"] and "ReconnectDeleteLimit=1)" in
          q["_err"], f"two lost files are over a limit of 1 ({q['_err']})")
    eq(read_file(vol.v("proj", "d0", "f0")), files["d0/f0"], "and the copy still serves them")
    os.unlink(vol.b("proj", "d0", "f2"))
    os.rename(vol.b("proj", "d0", "f3"), vol.b("proj", "d0", "renamed"))
    write_file(vol.b("proj", "d0", "f0"), b"back on the server\n")
    write_file(vol.b("proj", "d0", "f1"), b"back too\n")
    q = vol.ctl("reconnect", ok=False)
    check(q["_rc"] != 0 and "would delete 2 of" in q["_err"],
          f"counted again at the next reconnect ({q['_err']})")
    os.rename(vol.b("proj", "d0", "renamed"), vol.b("proj", "d0", "f3"))
    q = vol.ctl("reconnect", ok=False)
    eq(q["_rc"], 0, f"once the server has them back, reconnect goes through ({q['_err']})")
    eq(read_file(vol.v("proj", "d0", "f0")), b"back on the server\n", "serving the server's")
    vol.stop()


def main():
    require_root_fuse()
    lost_export()
    small_deletion()
    finish()


if __name__ == "__main__":
    main()
