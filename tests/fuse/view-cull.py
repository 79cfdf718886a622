#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""CacheSize enforcement: LRU culling of unpinned objects between thresholds,
pins (hoarding) that are never culled, pin admission and dry-run, Reserve,
unpin, set cache-size / set reserve, query cache / query pinned.
"""
import os
import sys

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
    finish()


if __name__ == "__main__":
    main()
