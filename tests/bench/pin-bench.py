#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Benchmark: pinning a tree into a volume against `cp -a` of the same tree,
same backing, same run.

  pin   `pin recursive` of a tree of 20,000 files / 1 GiB of mixed sizes
        (most a few KiB, some of a few MiB, a few large), a fresh CacheDir
        each round, until the answer (the pin is then durable and mirrored)
  cp    `cp -a` of the same tree to a directory of the same filesystem
  disk  what CacheDir uses on disk (du, blocks) after the pin, against what
        the tree uses

Caches are dropped (sync; drop_caches=3) before each timed run, for both
sides alike; rounds alternate which side goes first.  Printed: each round's
times and ratios, then medians and the spread (min-max) of the per-round
ratios pin / cp (lower is better; target <= 1.3) and disk / tree (target
<= 1.05).

Environment: FCACHE_BENCH_DIR (default /var/tmp), FCACHE_PIN_BENCH_FILES
(default 20000), FCACHE_PIN_BENCH_MIB (default 1024), FCACHE_BENCH_ROUNDS
(default 3), FCACHE_BENCH_VIEW_BEFORE (another fcache-view binary, e.g. the
commit before a change: pinned as "before" in the same rounds),
FCACHE_PIN_BENCH_SET (extra Key=Value settings for the volume, comma-separated).
A quick run: FCACHE_PIN_BENCH_FILES=2000 FCACHE_PIN_BENCH_MIB=100.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuse"))
import viewlib  # noqa: E402


def drop_all_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def du_bytes(path):
    r = subprocess.run(["du", "-s", "-B1", path], capture_output=True, text=True, check=True)
    return int(r.stdout.split()[0])


def sizes(nfiles, total, seed=7):
    """Mixed sizes: 90 % of 1-32 KiB, 9.5 % of 64 KiB-2 MiB, the rest large,
    scaled so that they add up to total."""
    rnd = random.Random(seed)
    raw = []
    for i in range(nfiles):
        x = rnd.random()
        if x < 0.90:
            raw.append(rnd.randrange(1 << 10, 32 << 10))
        elif x < 0.995:
            raw.append(rnd.randrange(64 << 10, 2 << 20))
        else:
            raw.append(rnd.randrange(8 << 20, 32 << 20))
    scale = total / sum(raw)
    return [max(1, int(s * scale)) for s in raw]


def make_tree(root, nfiles, total):
    chunk = random.Random(1).randbytes(4 << 20)
    for i, size in enumerate(sizes(nfiles, total)):
        d = os.path.join(root, f"a{i // 1000:02d}", f"b{(i // 100) % 10}")
        if i % 100 == 0:
            os.makedirs(d)
        with open(os.path.join(d, f"f{i:05d}"), "wb") as f:
            off = (i * 4099) % (len(chunk) // 2)
            while size > 0:
                n = min(size, len(chunk) // 2)
                f.write(chunk[off:off + n])
                size -= n


def run_cp(back, top):
    dst = os.path.join(top, "cp-dst")
    shutil.rmtree(dst, ignore_errors=True)
    drop_all_caches()
    t = time.perf_counter()
    subprocess.run(["cp", "-a", os.path.join(back, "tree"), dst], check=True)
    dt = time.perf_counter() - t
    # the pin's copies are durable when it answers; cp's are not: also shown
    t2 = time.perf_counter()
    os.sync()
    dts = dt + time.perf_counter() - t2
    shutil.rmtree(dst, ignore_errors=True)
    return dt, dts


def run_pin(back, binary, settings):
    vol = viewlib.Volume("pinbench", backing=back, lease="600s", cache_size="100G",
                         extra=sum((["--set", s] for s in settings), []))
    if binary:
        vol.args[0] = binary
    vol.start()
    try:
        drop_all_caches()
        t = time.perf_counter()
        r = vol.ctl("pin recursive", "tree")
        dt = time.perf_counter() - t
        if r.get("failed", "0") != "0":
            raise RuntimeError(f"pin failed for {r.get('failed')} files")
        vol.stop()
        disk = du_bytes(vol.cache)
    finally:
        vol.cleanup()
    return dt, disk


def med(xs):
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def main():
    if os.geteuid() != 0:
        viewlib.skip("needs root (mounts a FUSE view, drops caches)")
    viewlib.require_root_fuse()
    nfiles = int(os.environ.get("FCACHE_PIN_BENCH_FILES", "20000"))
    mib = int(os.environ.get("FCACHE_PIN_BENCH_MIB", "1024"))
    rounds = int(os.environ.get("FCACHE_BENCH_ROUNDS", "3"))
    settings = [s for s in os.environ.get("FCACHE_PIN_BENCH_SET", "").split(",") if s]
    top = tempfile.mkdtemp(prefix="fcache-pinbench-",
                           dir=os.environ.get("FCACHE_BENCH_DIR", "/var/tmp"))
    os.chmod(top, 0o755)
    back = os.path.join(top, "back")
    print(f"preparing {nfiles} files, {mib} MiB in {back}", flush=True)
    make_tree(os.path.join(back, "tree"), nfiles, mib << 20)
    tree_disk = du_bytes(os.path.join(back, "tree"))
    sides = {"view": None}
    if os.environ.get("FCACHE_BENCH_VIEW_BEFORE"):
        sides["before"] = os.environ["FCACHE_BENCH_VIEW_BEFORE"]
    res = {k: {"pin": [], "ratio": [], "disk": []} for k in sides}
    res["cp"] = {"time": [], "time_sync": []}
    try:
        for rnd in range(rounds):
            order = list(sides) + ["cp"]
            if rnd % 2:
                order.reverse()
            line = [f"round {rnd + 1}:"]
            times = {}
            for side in order:
                if side == "cp":
                    dt, dts = run_cp(back, top)
                    res["cp"]["time"].append(dt)
                    res["cp"]["time_sync"].append(dts)
                    times["cp"] = dt
                    line.append(f"cp -a {dt:.2f}s (+sync {dts:.2f}s)")
                else:
                    dt, disk = run_pin(back, sides[side], settings)
                    res[side]["pin"].append(dt)
                    res[side]["disk"].append(disk / tree_disk)
                    times[side] = dt
                    line.append(f"{side} pin {dt:.2f}s disk {disk / tree_disk:.2f}x")
            for side in sides:
                res[side]["ratio"].append(times[side] / times["cp"])
                line.append(f"{side}/cp {times[side] / times['cp']:.2f}")
            print("  ".join(line), flush=True)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print(f"tree: {nfiles} files, {mib} MiB, {tree_disk / 1e6:.0f} MB on disk; "
          f"cp -a median {med(res['cp']['time']):.2f}s "
          f"(+sync {med(res['cp']['time_sync']):.2f}s)")
    for side in sides:
        r = res[side]
        print(f"{side:6s} pin median {med(r['pin']):.2f}s  pin/cp median {med(r['ratio']):.2f} "
              f"(spread {min(r['ratio']):.2f}-{max(r['ratio']):.2f}; target <= 1.3)  "
              f"disk/tree median {med(r['disk']):.2f} "
              f"(spread {min(r['disk']):.2f}-{max(r['disk']):.2f}; target <= 1.05)")
    print("JSON " + json.dumps(res))


if __name__ == "__main__":
    main()
