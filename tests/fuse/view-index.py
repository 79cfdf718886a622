#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A damaged store index (store.db) found at start: the volume still comes
up, says so in `query state` (store=rebuilt and why), keeps the damaged file
for diagnosis, serves the files (from the backing online, from the mirror
offline) and takes new pins; an intact index says store=ok.

Garbage over the whole file (not a database) and garbage after a valid
SQLite header (a damaged one) are both tried.
"""
import glob
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, finish, rand_bytes, read_file,  # noqa: E402
                     require_root_fuse, write_file)


def damage(cache, keep_header):
    for suffix in ("", "-wal", "-shm"):
        p = os.path.join(cache, "store.db" + suffix)
        if not os.path.exists(p):
            continue
        keep = keep_header if suffix == "" else 0
        with open(p, "r+b") as f:
            size = max(os.fstat(f.fileno()).st_size, 8192)
            f.seek(keep)
            f.write(rand_bytes(size - keep, 99))


def wait_pinned(vol, path, rounds=600):
    for _ in range(rounds):
        if vol.ctl("query cached", path, ok=False).get("pinned") == "yes":
            return True
        time.sleep(0.1)
    return False


def lost_index():
    """store.db deleted outright (a cleaned cache directory): the pins file
    gives the pins back as well."""
    vol = Volume("index-lost")
    os.makedirs(vol.b("keep"))
    write_file(vol.b("keep", "a"), rand_bytes(150000, 7))
    vol.start()
    eq(vol.ctl("pin recursive", "keep")["_rc"], 0, "lost: pin")
    eq(vol.ctl("unpin recursive", "keep")["_rc"], 0, "lost: unpin")
    eq(vol.ctl("pin recursive", "keep")["_rc"], 0, "lost: pin again")
    vol.stop()
    for suffix in ("", "-wal", "-shm"):
        p = os.path.join(vol.cache, "store.db" + suffix)
        if os.path.exists(p):
            os.unlink(p)
    vol.start()
    eq(vol.ctl("query pinned")["_lines"], ["pin=500 keep"], "lost: the pin is back")
    check(wait_pinned(vol, "keep/a"), "lost: its file is pinned again")
    eq(vol.ctl("unpin recursive", "keep")["_rc"], 0, "lost: unpin")
    vol.stop()
    vol.start()
    eq(vol.ctl("query pinned")["_lines"], [], "lost: an unpin is kept in the pins file too")
    vol.stop()


def main():
    require_root_fuse()
    lost_index()
    for label, keep in (("not a database", 0), ("damaged after its header", 100)):
        vol = Volume("index")
        os.makedirs(vol.b("tree"))
        data = {f"f{i}": rand_bytes(200000, i) for i in range(3)}
        for name, d in data.items():
            write_file(vol.b("tree", name), d)
        write_file(vol.b("other"), b"x" * 1000)
        vol.start()
        eq(vol.state().get("store"), "ok", f"{label}: an intact index: store=ok")
        eq(vol.ctl("pin recursive", "tree")["_rc"], 0, f"{label}: pin")
        vol.stop()
        damage(vol.cache, keep)
        vol.start()
        st = vol.state()
        eq(st.get("state"), "online", f"{label}: the volume comes up")
        eq(st.get("store"), "rebuilt", f"{label}: query state says store=rebuilt")
        check("store.db" in st.get("store_reason", ""), f"{label}: ... and why"
              f" ({st.get('store_reason')})")
        check(glob.glob(os.path.join(vol.cache, "store.db.corrupt-*")) != [],
              f"{label}: the damaged index is kept beside the new one")
        eq(st.get("pins_restored"), "1", f"{label}: the pin came back from the pins file")
        eq(vol.ctl("query pinned")["_lines"], ["pin=500 tree"], f"{label}: query pinned lists it")
        check(wait_pinned(vol, "tree/f1"), f"{label}: the hoard walk marks its files pinned again")
        eq(read_file(vol.v("tree", "f0")), data["f0"], f"{label}: a file reads right online")
        eq(vol.ctl("pin", "other", ok=False)["_rc"], 0, f"{label}: a new pin works")
        eq(vol.ctl("pin recursive", "tree", ok=False)["_rc"], 0,
           f"{label}: pinning the tree again works")
        eq(vol.ctl("disconnect")["state"], "offline", f"{label}: disconnect")
        eq(read_file(vol.v("tree", "f2")), data["f2"],
           f"{label}: the pinned tree reads right offline")
        eq(vol.ctl("reconnect").get("state", "online") and vol.state()["state"], "online",
           f"{label}: reconnect")
        vol.stop()
        vol.start()
        eq(vol.state().get("store"), "ok", f"{label}: the next start finds the new index intact")
        vol.stop()
    finish()


if __name__ == "__main__":
    main()
