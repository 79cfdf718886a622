#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Offline writes through the fcache view against the raw backing, same run:

  untar    `tar xf` of 5,000 small files (100 B - 4 KiB) into a pinned
           directory of a disconnected volume
  reconnect  after the untar: `reconnect` through the control socket until
           the volume is online again (the replay of the untar's records, about
           three a file, and the mirror's resync), against `cp -a` of the same
           tree into a fresh directory beside the backing (both synced
           before); the replay and the resync separately where the view's
           reconnect answers replay_ms and resync_ms
  online untar  the same `tar xf` into the pinned directory with the volume
           online (each file written through to the backing, and its copy
           for offline use made before close(2) returns)
  sqlite   100 transactions (an UPDATE of 200 rows and an INSERT of 1 KiB,
           each committed, rollback journal, synchronous=FULL: each commit
           fsyncs) on a ~6.5 MB database in a pinned directory, offline

The raw side does the same work on a directory of the backing's
filesystem.  Rounds are interleaved (raw, view, raw, view, ...); medians
and spread (min-max) are reported, as time ratios view/raw (lower is
better; targets: untar <= 3, reconnect <= 2 x cp -a, sqlite <= 2) and bytes the view wrote
(write_bytes of its worker in /proc/PID/io: the log and whatever data the
worker copies itself; writes passed through to the mirror's file, as every
offline writer's are on a kernel with FUSE passthrough, are charged to the
application, as raw sqlite's own write_bytes are, and the growth
of CacheDir/offline, the log, which holds the base copy of the database),
as a multiple of the data (sqlite target: <= 2 x the database's size).

A peer, libfuse's passthrough_ll example (tests/bench/fusepeer.py), does
the same untar each round into a directory it forwards to, with no log and
no copy: the floor any FUSE filesystem pays for the untar's requests here
(FCACHE_BENCH_PEERS="" leaves it out).

Environment: FCACHE_VIEW, FCACHE_VIEW_CTL (the binaries), FCACHE_BENCH_DIR
(default /var/tmp), FCACHE_BENCH_ROUNDS (default 3), FCACHE_BENCH_VIEW_BEFORE
and FCACHE_BENCH_CTL_BEFORE (binaries of another build, e.g. main: measured
as "before" in the same interleaved rounds), FCACHE_BENCH_SET ("Key=Value ..."
settings of both volumes, e.g. FetchThreads=2).
"""
import io
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuse"))
import viewlib  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fusepeer  # noqa: E402

NFILES = 5000
NTXN = 100
DB_ROWS = 6000          # x ~1 KiB: a ~6.5 MB database


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def write_bytes(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k == "write_bytes":
                return int(v)
    return 0


def make_tarball(path):
    rnd = random.Random(13)
    with tarfile.open(path, "w") as t:
        for i in range(NFILES):
            data = rnd.randbytes(rnd.randrange(100, 4096))
            ti = tarfile.TarInfo(f"d{i // 250}/f{i}")
            ti.size = len(data)
            ti.mtime = 1700000000
            ti.mode = 0o644
            t.addfile(ti, io.BytesIO(data))


def make_db(path):
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER, pad BLOB)")
    rnd = random.Random(7)
    db.executemany("INSERT INTO t(n, pad) VALUES (?, ?)",
                   ((i, rnd.randbytes(1000)) for i in range(DB_ROWS)))
    db.commit()
    db.close()


def untar(tarball, dest):
    os.makedirs(dest)
    t = time.perf_counter()
    subprocess.run(["tar", "xf", tarball, "-C", dest], check=True)
    return time.perf_counter() - t


def sqlite_txns(path, seed):
    rnd = random.Random(seed)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA synchronous=FULL")
    t = time.perf_counter()
    for i in range(NTXN):
        db.execute("BEGIN")
        lo = rnd.randrange(0, DB_ROWS - 200)
        db.execute("UPDATE t SET n = n + 1 WHERE id BETWEEN ? AND ?", (lo, lo + 199))
        db.execute("INSERT INTO t(n, pad) VALUES (?, ?)", (i, rnd.randbytes(1000)))
        db.execute("COMMIT")
    dt = time.perf_counter() - t
    db.close()
    return dt


class Side:
    """A disconnected volume with the pinned directory p (holding db.sqlite)."""

    def __init__(self, name, view, ctl, top, db_template):
        viewlib.VIEW, viewlib.CTL = view, ctl
        extra = [a for kv in os.environ.get("FCACHE_BENCH_SET", "").split() for a in ("--set", kv)]
        self.vol = viewlib.Volume(name, cache_size="4G", extra=extra)
        self.view, self.ctl = view, ctl
        os.makedirs(self.vol.b("p"))
        shutil.copy(db_template, self.vol.b("p", "db.sqlite"))
        self.vol.start()
        self.vol.ctl("pin recursive", "p")
        self.vol.ctl("disconnect")
        self.pid = self.vol.worker_pid()

    def measure(self, fn):
        viewlib.VIEW, viewlib.CTL = self.view, self.ctl
        log = os.path.join(self.vol.cache, "offline")
        b0, l0 = write_bytes(self.pid), dir_bytes(log)
        dt = fn()
        subprocess.run(["sync"])
        return dt, write_bytes(self.pid) - b0, dir_bytes(log) - l0

    def online(self, fn):
        """fn() timed with the volume online; offline again after it."""
        viewlib.VIEW, viewlib.CTL = self.view, self.ctl
        self.vol.ctl("reconnect", timeout=600)
        try:
            return fn()
        finally:
            self.vol.ctl("disconnect")

    def reconnect(self):
        """Seconds until `reconnect` answered (the volume online, its mirror
        resynced), and the view's own replay and resync times (None if it
        does not say); then offline again."""
        viewlib.VIEW, viewlib.CTL = self.view, self.ctl
        subprocess.run(["sync"])
        t = time.perf_counter()
        out = self.vol.ctl("reconnect", timeout=600)
        dt = time.perf_counter() - t
        state = self.vol.state()["state"]
        if state != "online":
            raise RuntimeError(f"{state} after the reconnect: {self.vol.logtext()}")
        self.vol.ctl("disconnect")
        parts = [int(out[k]) / 1000 if k in out else None for k in ("replay_ms", "resync_ms")]
        return dt, parts[0], parts[1]

    def stop(self):
        self.vol.stop()


def cp_a(src, dest):
    subprocess.run(["sync"])
    t = time.perf_counter()
    subprocess.run(["cp", "-a", src, dest], check=True)
    return time.perf_counter() - t


def spread(v):
    return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"


def main():
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        viewlib.skip("needs root and /dev/fuse")
    rounds = int(os.environ.get("FCACHE_BENCH_ROUNDS", "3"))
    top = tempfile.mkdtemp(prefix="fcache-bench-offline-",
                           dir=os.environ.get("FCACHE_BENCH_DIR", "/var/tmp"))
    tarball = os.path.join(top, "files.tar")
    template = os.path.join(top, "template.sqlite")
    make_tarball(tarball)
    make_db(template)
    db_size = os.path.getsize(template)
    data_size = sum(m.size for m in tarfile.open(tarball).getmembers())
    builds = [("after", viewlib.VIEW, viewlib.CTL)]
    if os.environ.get("FCACHE_BENCH_VIEW_BEFORE"):
        builds.insert(0, ("before", os.environ["FCACHE_BENCH_VIEW_BEFORE"],
                          os.environ.get("FCACHE_BENCH_CTL_BEFORE", viewlib.CTL)))
    raw = os.path.join(top, "raw")
    os.makedirs(raw)
    # The floor of any FUSE filesystem here: libfuse's passthrough_ll over
    # a directory beside raw's, the same untar through it.
    ptll = None
    if fusepeer.NAME in os.environ.get("FCACHE_BENCH_PEERS", fusepeer.NAME):
        exe = fusepeer.build(os.path.join(top, "ptll-build"))
        if exe:
            os.makedirs(os.path.join(top, "ptll-src"))
            ptll = fusepeer.Mount(exe, os.path.join(top, "ptll-src"), os.path.join(top, "ptll"))
    shutil.copy(template, os.path.join(raw, "db.sqlite"))
    res = {}
    sides = {}
    try:
        for label, view, ctl in builds:
            sides[label] = Side(label, view, ctl, top, template)
        for r in range(rounds):
            res.setdefault("raw untar", []).append(
                untar(tarball, os.path.join(raw, f"x{r}")))
            if ptll:
                res.setdefault(f"{fusepeer.NAME} untar", []).append(
                    untar(tarball, os.path.join(ptll.mnt, f"x{r}")))
            subprocess.run(["sync"])
            w0 = write_bytes("self")
            res.setdefault("raw sqlite", []).append(
                sqlite_txns(os.path.join(raw, "db.sqlite"), r))
            subprocess.run(["sync"])
            res.setdefault("raw sqlite written", []).append((write_bytes("self") - w0) / db_size)
            for label, s in sides.items():
                dt, wb, lg = s.measure(lambda: untar(tarball, s.vol.v("p", f"x{r}")))
                res.setdefault(f"{label} untar", []).append(dt)
                res.setdefault(f"{label} untar written", []).append(wb / data_size)
                res.setdefault(f"{label} untar log", []).append(lg / data_size)
                # beside the backing: its filesystem, and the same inode
                # allocator's neighbourhood (ext4 without a journal scans
                # past inodes freed in the last minutes, per create)
                res.setdefault(f"{label} cp -a", []).append(
                    cp_a(os.path.join(raw, f"x{r}"), os.path.join(s.vol.top, f"cp{r}")))
                dt, replay, resync = s.reconnect()
                res.setdefault(f"{label} reconnect", []).append(dt)
                if replay is not None:
                    res.setdefault(f"{label} replay", []).append(replay)
                    res.setdefault(f"{label} resync", []).append(resync)
                dt, wb, lg = s.measure(lambda: sqlite_txns(s.vol.v("p", "db.sqlite"), r))
                res.setdefault(f"{label} sqlite", []).append(dt)
                res.setdefault(f"{label} sqlite written", []).append(wb / db_size)
                res.setdefault(f"{label} sqlite log", []).append(lg / db_size)
                # the next round's reconnect replays its untar alone
                s.reconnect()
                res.setdefault(f"{label} online untar", []).append(
                    s.online(lambda: untar(tarball, s.vol.v("p", f"o{r}"))))
    finally:
        for s in sides.values():
            s.stop()
        if ptll:
            ptll.stop()
        shutil.rmtree(top, ignore_errors=True)
    print(f"untar {NFILES} files ({data_size / 1e6:.1f} MB), sqlite {NTXN} transactions"
          f" on {db_size / 1e6:.1f} MB; {rounds} rounds, median (min-max)")
    for row in ("untar", "sqlite"):
        wr = res.get(f"raw {row} written")
        print(f"raw {row}: {spread(res[f'raw {row}'])} s" +
              (f", wrote {spread(wr)} x the data" if wr else ""))
        peer = res.get(f"{fusepeer.NAME} {row}")
        if peer:
            ratios = [v / r for v, r in zip(peer, res[f"raw {row}"])]
            print(f"{fusepeer.NAME} {row} (online, no log): {spread(peer)} s,"
                  f" {spread(ratios)} x raw")
        for label, _, _ in builds:
            ratios = [v / r for v, r in zip(res[f"{label} {row}"], res[f"raw {row}"])]
            print(f"{label} {row}: {spread(res[f'{label} {row}'])} s, {spread(ratios)} x raw;"
                  f" view wrote {spread(res[f'{label} {row} written'])} x the data,"
                  f" log grew {spread(res[f'{label} {row} log'])} x")
    for label, _, _ in builds:
        ratios = [v / r for v, r in zip(res[f"{label} online untar"], res["raw untar"])]
        print(f"{label} online untar: {spread(res[f'{label} online untar'])} s,"
              f" {spread(ratios)} x raw")
    # each build's reconnect against the cp -a of the same tree timed just before it
    print("cp -a of the untarred tree: " +
          spread([c for label, _, _ in builds for c in res[f"{label} cp -a"]]) + " s")
    for label, _, _ in builds:
        cp = res[f"{label} cp -a"]
        line = f"{label} reconnect: {spread(res[f'{label} reconnect'])} s," \
               f" {spread([v / c for v, c in zip(res[f'{label} reconnect'], cp)])} x cp -a"
        for part in ("replay", "resync"):
            if res.get(f"{label} {part}"):
                line += f"; {part} {spread(res[f'{label} {part}'])} s," \
                        f" {spread([v / c for v, c in zip(res[f'{label} {part}'], cp)])} x"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
