#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""CacheSize enforcement: LRU culling of unpinned objects between thresholds,
pins (hoarding) that are never culled, pin admission and dry-run, Reserve,
unpin, set cache-size / set reserve, query cache / query pinned.
"""
import os
import signal
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import Volume, check, eq, finish, rand_bytes, read_file, require_root_fuse, write_file  # noqa: E402

MiB = 1024 * 1024


def main():
    require_root_fuse()
    # capacity = 10 MiB - 2 MiB = 8 MiB; bcull = 7 % of that, brun = 10 %
    vol = Volume("cull", cache_size="10M", reserve="2M", lease="30s").start()
    q = vol.ctl("query cache")
    eq((int(q["size"]), int(q["reserve"]), int(q["capacity"])), (10 * MiB, 2 * MiB, 8 * MiB),
       "query cache reports size, reserve and capacity")
    check(int(q["bstop"]) < int(q["bcull"]) < int(q["brun"]) < int(q["capacity"]),
          "thresholds bstop < bcull < brun")

    os.makedirs(vol.b("hoard", "sub"))
    files = {}
    for i in range(3):
        files[f"hoard/h{i}"] = rand_bytes(MiB, 100 + i)
    files["hoard/sub/deep"] = rand_bytes(MiB // 2, 200)
    for i in range(16):
        files[f"f{i:02d}"] = rand_bytes(MiB, i)
    for name, data in files.items():
        write_file(vol.b(name), data)
    hoard_size = 3 * MiB + MiB // 2

    r = vol.ctl("pin recursive dry-run", "hoard")
    eq((int(r["needed"]), r["dry_run"]), (hoard_size, "yes"), "pin dry-run reports the size needed")
    eq(vol.ctl("query pinned")["_lines"], [], "a dry run pins nothing")
    r = vol.ctl("pin recursive priority 7", "hoard")
    eq((int(r["files"]), int(r["fetched"]), r["fits"]), (4, hoard_size, "yes"),
       "pin recursive fetches the whole subtree")
    eq(vol.ctl("query pinned")["_lines"], ["pin=7 hoard"], "query pinned lists the pin")
    q = vol.ctl("query cached", "hoard/sub/deep")
    eq((q["cached"], q["pinned"], q["priority"]), ("complete", "yes", "7"),
       "a pinned file deep in the subtree is complete and pinned")
    eq(int(vol.ctl("query cache")["pinned"]), hoard_size, "query cache counts pinned bytes")

    # admission: 8 MiB capacity - 3.5 MiB pinned = 4.5 MiB available
    os.makedirs(vol.b("toobig"))
    for i in range(5):
        write_file(vol.b("toobig", f"t{i}"), rand_bytes(MiB, 300 + i))
    r = vol.ctl("pin recursive", "toobig", ok=False)
    check(r["_rc"] != 0 and "needs 5242880 bytes" in r["_err"],
          f"a pin that cannot fit fails at once with the size it needs ({r['_err']})")
    eq((int(r["needed"]), int(r["available"])), (5 * MiB, 8 * MiB - hoard_size),
       "needed and available reported")
    eq(vol.ctl("query cached", "toobig/t0")["cached"], "no", "nothing of a refused pin was fetched")

    # reading 16 MiB of unpinned files through an 8 MiB store culls the oldest
    for i in range(16):
        eq(read_file(vol.v(f"f{i:02d}")), files[f"f{i:02d}"], f"read f{i:02d} through the view")
        q = vol.ctl("query cache")
        if int(q["used"]) > int(q["capacity"]):
            check(False, f"store used {q['used']} exceeds capacity after f{i:02d}")
    q = vol.ctl("query cache")
    check(int(q["culled"]) > 0, f"objects were culled ({q['culled']})")
    check(int(q["used"]) <= int(q["capacity"]) - int(q["bstop"]),
          f"used {q['used']} stays below capacity - bstop")
    eq(vol.ctl("query cached", "f00")["cached"], "no", "the least recently used file was culled")
    eq(vol.ctl("query cached", "f15")["cached"], "complete", "the most recent file is cached")
    for name in ("hoard/h0", "hoard/h1", "hoard/h2", "hoard/sub/deep"):
        eq(vol.ctl("query cached", name)["cached"], "complete", f"pinned {name} never culled")
    for name, data in files.items():
        if read_file(vol.v(name)) != data:
            check(False, f"{name} content after culling")
    check(True, "every file reads back right after culling")

    # flush keeps pinned copies
    r = vol.ctl("flush", "hoard")
    eq((r["flushed"], r["kept_pinned"]), ("0", "4"), "flush keeps pinned copies")

    # set cache-size below what is pinned is refused; a larger one is taken
    r = vol.ctl("set cache-size 4M", ok=False)
    check(r["_rc"] != 0, f"set cache-size below the pinned size is refused ({r['_err']})")
    r = vol.ctl("set cache-size 64M")
    eq(int(r["size"]), 64 * MiB, "set cache-size")
    r = vol.ctl("set reserve 4M")
    eq(int(r["capacity"]), 60 * MiB, "set reserve")
    r = vol.ctl("pin recursive", "toobig")
    eq(r["fits"], "yes", "the pin that did not fit fits now")

    r = vol.ctl("unpin recursive", "hoard")
    eq((r["unpinned"], r["pins_removed"]), ("4", "1"), "unpin recursive")
    q = vol.ctl("query cached", "hoard/h0")
    eq((q["pinned"], q["cached"]), ("no", "complete"),
       "unpinned file: its mirror copy stays cached, in the store")
    eq(read_file(vol.v("hoard", "h0")), files["hoard/h0"], "and reads back right")
    eq(int(vol.ctl("query cache")["pinned"]), 5 * MiB, "only the other pin is counted")

    # the number of objects is bounded too (CacheFiles, cachefilesd's frun/fcull/fstop)
    fv = Volume("cullfiles", lease="30s", extra=("--set", "CacheFiles=10")).start()
    for i in range(25):
        write_file(fv.b(f"s{i:02d}"), b"small %d" % i)
    for i in range(25):
        eq(read_file(fv.v(f"s{i:02d}")), b"small %d" % i, f"read s{i:02d}") if i == 24 else read_file(fv.v(f"s{i:02d}"))
        if int(fv.ctl("query cache")["objects"]) > 10:
            check(False, f"more than CacheFiles objects after s{i:02d}")
    q = fv.ctl("query cache")
    check(int(q["objects"]) <= 10 and int(q["culled"]) > 0,
          f"CacheFiles=10 keeps {q['objects']} objects, culled {q['culled']}")
    eq((q["files_limit"], int(q["fstop"]) < int(q["fcull"]) < int(q["frun"])), ("10", True),
       "query cache reports the file limit and its thresholds")
    eq(fv.ctl("query cached", "s24")["cached"], "complete", "the most recent small file is cached")
    eq(fv.ctl("query cached", "s00")["cached"], "no", "the oldest was culled")
    fv.stop()

    # pins survive a restart of the volume
    vol.stop()
    vol.start()
    eq(vol.ctl("query pinned")["_lines"], ["pin=500 toobig"], "pins are persistent")
    q = vol.ctl("query cached", "toobig/t4")
    eq((q["cached"], q["pinned"]), ("complete", "yes"), "pinned content is still in the store")
    vol.stop()
    lru_across_reboot()
    finish()


def store_rows(vol, files):
    """name -> (atime, validated, container or blocks, own, pin) of each
    file's row: what a failing cull check prints."""
    db = sqlite3.connect(os.path.join(vol.cache, "store.db"))
    try:
        rows = {}
        for name in files:
            r = db.execute("SELECT atime, validated, container IS NOT NULL, own, pin,"
                           " (SELECT COUNT(*) FROM blocks b WHERE b.ino=o.ino) FROM objects o"
                           " WHERE ino=?", (os.stat(vol.b(name)).st_ino,)).fetchone()
            rows[name] = r
        return rows
    finally:
        db.close()


def lru_across_reboot():
    """The cull's least-recently-used order holds across a reboot: files read
    in a boot whose monotonic clock was far on (the view in a time namespace
    11 days ahead) are culled before files read after the "reboot".  Rows of
    a store from before the use times were on the wall clock (monotonic
    values, and no fact saying otherwise) lose nothing: their copies are
    served, compared with the backing again, and culled before any row
    used since."""
    if subprocess.run(["unshare", "--time", "--fork", "--monotonic", "1", "true"],
                      capture_output=True).returncode != 0:
        print("# no time namespaces (unshare --time): the reboot's cull order not checked")
        return
    vol = Volume("cull-reboot", cache_size="64M", reserve="2M", lease="30s")
    plain = list(vol.args)
    files = {}
    for i, name in enumerate(("old0", "old1", "old2", "new0", "new1", "new2", "fresh0")):
        files[name] = rand_bytes(MiB, 500 + i)
        write_file(vol.b(name), files[name])

    def stop():
        # unshare --fork passes no SIGTERM on: the whole session gets it
        os.killpg(vol.proc.pid, signal.SIGTERM)
        vol.proc.wait(30)
        vol.stop()

    def cached(name):
        return vol.ctl("query cached", name)["cached"]

    vol.args = ["unshare", "--time", "--fork", "--monotonic", str(11 * 86400)] + plain
    vol.start()
    for name in ("old0", "old1", "old2"):
        eq(read_file(vol.v(name)), files[name], f"{name} read in the boot before")
    stop()
    vol.args = plain
    vol.start()
    for name in ("new0", "new1", "new2"):
        eq(read_file(vol.v(name)), files[name], f"{name} read after the reboot")
    # capacity 5 MiB for 6 MiB cached: culled down to brun (0.5 MiB free), two files
    rows_before = store_rows(vol, files)
    vol.ctl("set cache-size 7M")
    got = {n: cached(n) for n in files if n != "fresh0"}
    want = {"old0": "no", "old1": "no", "old2": "complete", "new0": "complete",
            "new1": "complete", "new2": "complete"}
    eq(got, want, "the cull took the two least recently used, read before the reboot")
    if got != want:
        print(f"# the store's rows before the cull: {rows_before}")
        print(f"# after: {store_rows(vol, files)}")
        for line in vol.logtext().splitlines()[-20:]:
            print(f"# log: {line}")

    # A store of the old format: use and validation times on the monotonic clock.
    stop()
    db = sqlite3.connect(os.path.join(vol.cache, "store.db"))
    for i, name in enumerate(("new0", "new1", "new2")):
        db.execute("UPDATE objects SET atime=?, validated=? WHERE ino=?",
                   (5 * 10 ** 11 + i, 5 * 10 ** 11 + i, os.stat(vol.b(name)).st_ino))
    db.execute("DELETE FROM facts WHERE name LIKE '%wall clock%'")
    db.commit()
    db.close()
    vol.start()
    eq({n: cached(n) for n in ("old2", "new0", "new1", "new2")},
       {n: "complete" for n in ("old2", "new0", "new1", "new2")},
       "a store with monotonic use times: every copy is still there")
    db = sqlite3.connect(os.path.join(vol.cache, "store.db"))
    rows = dict(db.execute("SELECT ino, validated FROM objects"))
    check(db.execute("SELECT COUNT(*) FROM facts WHERE name LIKE '%wall clock%'").fetchone()[0]
          == 1, "the store records that its rows' times are on the wall clock now")
    db.close()
    eq({n: rows.get(os.stat(vol.b(n)).st_ino) for n in ("new0", "new1", "new2")},
       {n: 0 for n in ("new0", "new1", "new2")},
       "their monotonic validation times are cleared (compared with the backing at first use)")
    eq(read_file(vol.v("fresh0")), files["fresh0"], "fresh0 read")
    db = sqlite3.connect(os.path.join(vol.cache, "store.db"))
    atime = db.execute("SELECT atime FROM objects WHERE ino=?",
                       (os.stat(vol.b("fresh0")).st_ino,)).fetchone()[0]
    db.close()
    check(abs(atime - time.time_ns()) < 3600 * 10 ** 9,
          f"a row's use time is wall-clock ns ({atime})")
    # 5 MiB cached, capacity 4 MiB: culled down to 3.6 MiB, two files
    vol.ctl("set cache-size 6M")
    eq({n: cached(n) for n in ("old2", "new0", "new1", "new2", "fresh0")},
       {"old2": "complete", "new0": "no", "new1": "no", "new2": "complete",
        "fresh0": "complete"},
       "rows of the old format are culled first, in their own order")
    for name, data in files.items():
        if read_file(vol.v(name)) != data:
            check(False, f"{name} reads back right")
    check(True, "every file reads back right")
    stop()


if __name__ == "__main__":
    main()
