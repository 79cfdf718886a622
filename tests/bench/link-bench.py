#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A volume over a slow link, against local disk and plain sshfs on the same
link, in one run (tests/fuse/linklib.py: sshfs through a relay that adds
FCACHE_BENCH_RTT_MS of round trip, default 10):

  read      read 1,000 pinned 8 KiB files through the view, warm: read
            again within the attribute lease of the previous pass ("warm"),
            and the first pass after the lease ran out ("lease out");
            against the same read on local disk (page cache warm) and on the
            plain sshfs mount (warm: read before); with
            FCACHE_BENCH_VIEW_BEFORE (another fcache-view binary, e.g. of
            the commit before a change) a second volume on the same backing
            is pinned and read warm in the same rounds ("before")
  pin100    `pin recursive` of a directory of 100 small files (4 KiB), cold,
            against `cat` of the same on the raw sshfs mount with 8 in
            flight and `fcachectl prefetch recursive` there
  pin1000   the same with 1,000 files
  reconnect 1,000 files created (64 bytes each) and 100 pinned files edited
            while the volume is offline, then `reconnect` timed (the
            replay of the offline log and the mirror's resync); against the
            same changes made directly on the plain sshfs mount; "replay"
            is the part until the volume is online, "resync" the rest (the
            mirror of pinned trees resynced with the server); and the
            floor a replay through the mount has: the same creates made
            on the plain mount by 8 threads at once in one directory (the
            kernel makes one directory's creates one at a time, each a
            LOOKUP and a CREATE to the server)
  untar     (sshfs then mounted with noforget, as fcache.volume(5) asks)
            `tar xf` of 1,000 files (4 KiB, in 10 directories) into a
            pinned directory of the volume online with WriteBack=yes
            (acknowledged locally; "wb ship" is the `sync` after it, until
            every file is on the server), against the same untar on local
            disk and into a pinned directory of the volume with WriteBack=no
            (the volume is restarted with WriteBack=yes for its part)
  pinwb     `pin recursive` of a directory of 100 (and of 1,000) small
            files (4 KiB), cold, with the volume in writeback (the server's
            subtree fetched name by name), against the same pin online in
            the same run (the volume restarted with WriteBack=yes for its
            part, as for untar)

Each round uses fresh directories (nothing cached on any side).  Prints the
median and range of each column and of the ratios view/baseline per round.
Environment: FCACHE_BENCH_ROUNDS (default 3), FCACHE_BENCH_ROWS (default
"read,pin100,pin1000,reconnect,untar,pinwb"), FCACHE_BENCH_RTT_MS, FCACHE_BENCH_LEASE (AttrLease,
default 30s), FCACHE_BENCH_CREATES / FCACHE_BENCH_EDITS (reconnect row,
default 1000 / 100), FCACHECTL (fcachectl to run prefetch with; the column is
missing without it).
"""
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fuse"))
import linklib  # noqa: E402
import viewlib  # noqa: E402

ROUNDS = int(os.environ.get("FCACHE_BENCH_ROUNDS", "3"))
ROWS = os.environ.get("FCACHE_BENCH_ROWS", "read,pin100,pin1000,reconnect,untar,pinwb").split(",")
RTT_MS = float(os.environ.get("FCACHE_BENCH_RTT_MS", "10"))
LEASE = os.environ.get("FCACHE_BENCH_LEASE", "30s")
FCACHECTL = os.environ.get("FCACHECTL", "")
BEFORE = os.environ.get("FCACHE_BENCH_VIEW_BEFORE", "")
NREAD = 1000
NCREATE = int(os.environ.get("FCACHE_BENCH_CREATES", "1000"))
NEDIT = int(os.environ.get("FCACHE_BENCH_EDITS", "100"))
NUNTAR = 1000


def make_tree(d, n, size):
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        with open(os.path.join(d, f"f{i:04d}"), "wb") as f:
            f.write(os.urandom(size))


def read_all(d, names):
    t = time.perf_counter()
    for name in names:
        fd = os.open(os.path.join(d, name), os.O_RDONLY)
        while os.read(fd, 65536):
            pass
        os.close(fd)
    return time.perf_counter() - t


def timed(cmd, **kw):
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    took = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {r.stderr.strip()[-300:]}")
    return took


def cat8(d):
    return timed(["sh", "-c", 'find "$1" -type f -print0 | xargs -0 -P 8 -n 16 cat > /dev/null',
                  "cat8", d])


def summary(xs):
    if not xs:
        return "missing"
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def main():
    viewlib.require_root_fuse()
    vol = viewlib.Volume("linkbench", lease=LEASE)
    # The write-back replay matches the files it made by inode number:
    # sshfs keeps them only with noforget (fcache.volume(5)).
    link = linklib.volume_over_link(vol, RTT_MS / 2, linklib.SSHFS_OPTIONS +
                                    (",noforget" if "untar" in ROWS else ""))
    vol.start()
    print(f"# link: sshfs through a relay adding {RTT_MS:g} ms of round trip;"
          f" a stat that reaches the server takes {link.rtt_ms():.1f} ms")
    res = {}

    def add(key, x):
        res.setdefault(key, []).append(x)

    if "read" in ROWS:
        names = [f"f{i:04d}" for i in range(NREAD)]
        make_tree(os.path.join(link.server, "read"), NREAD, 8192)
        local = os.path.join(vol.top, "local-read")
        subprocess.run(["cp", "-a", os.path.join(link.server, "read"), local], check=True)
        t = time.perf_counter()
        vol.ctl("pin recursive", "read", timeout=1800)
        print(f"# pinned {NREAD} files for the read row in {time.perf_counter() - t:.1f} s")
        views = {"view": vol}
        if BEFORE:
            # Stopped before the link goes (atexit runs it first).
            bvol = viewlib.Volume("linkbench-before", backing=vol.backing, lease=LEASE)
            bvol.args[0] = BEFORE
            bvol.start()
            bvol.ctl("pin recursive", "read", timeout=1800)
            views["before"] = bvol
        read_all(local, names)
        read_all(os.path.join(link.mnt, "read"), names)
        for r in range(ROUNDS):
            ls = read_all(local, names)
            add("read local", ls)
            took = {}
            for k in (list(views) if r % 2 == 0 else list(reversed(views))):
                # Within the lease: read once just before (the other view's
                # passes may take longer than the lease when it ran out).
                read_all(views[k].v("read"), names)
                took[k] = read_all(views[k].v("read"), names)
            for k in views:
                add(f"read {k} warm", took[k])
                add(f"read {k} warm / local", took[k] / ls)
            add("read sshfs", read_all(os.path.join(link.mnt, "read"), names))
            # Past the lease: what the first pass then costs.
            time.sleep(lease_s() + 1)
            add("read view lease out", read_all(vol.v("read"), names))
            print(f"# read round {r + 1}: local {ls:.3f} " +
                  " ".join(f"{k} {took[k]:.3f}" for k in views), flush=True)
    for n in (100, 1000):
        row = f"pin{n}"
        if row not in ROWS:
            continue
        for r in range(ROUNDS):
            for kind in ("pin", "cat", "pre"):
                make_tree(os.path.join(link.server, f"{kind}{n}-{r}"), n, 4096)
            add(f"{row} view pin", pin_time(vol, f"pin{n}-{r}"))
            add(f"{row} sshfs cat x8", cat8(os.path.join(link.mnt, f"cat{n}-{r}")))
            if FCACHECTL:
                add(f"{row} sshfs prefetch", timed([FCACHECTL, "-q", "prefetch", "recursive",
                                                    os.path.join(link.mnt, f"pre{n}-{r}")]))
                add(f"{row} view pin / prefetch",
                    res[f"{row} view pin"][-1] / res[f"{row} sshfs prefetch"][-1])
            add(f"{row} view pin / cat x8", res[f"{row} view pin"][-1] / res[f"{row} sshfs cat x8"][-1])
            print(f"# {row} round {r + 1}: pin {res[f'{row} view pin'][-1]:.2f} s", flush=True)
    if "reconnect" in ROWS:
        for r in range(ROUNDS):
            for kind in ("rc", "rd"):
                make_tree(os.path.join(link.server, f"{kind}-{r}"), NEDIT, 1024)
            vol.ctl("pin recursive", f"rc-{r}", timeout=1800)
            vol.ctl("disconnect")
            changes(vol.v(f"rc-{r}"))
            q, took, replay = reconnect(vol)
            if q.get("conflicts", "0") != "0":
                raise RuntimeError(f"reconnect row: unexpected conflicts: {q}")
            add("reconnect view", took)
            add("reconnect view replay", replay)
            add("reconnect view resync", took - replay)
            add("reconnect sshfs direct", changes(os.path.join(link.mnt, f"rd-{r}")))
            add("reconnect view / direct", took / res["reconnect sshfs direct"][-1])
            add("reconnect sshfs creates x8", creates8(os.path.join(link.mnt, f"rx-{r}")))
            add("reconnect view replay / creates x8", replay / res["reconnect sshfs creates x8"][-1])
            # The next round's resync covers its own tree only (a reconnect resyncs every pin).
            vol.ctl("unpin recursive", f"rc-{r}", timeout=1800)
            print(f"# reconnect round {r + 1}: {took:.2f} s, replay {replay:.2f} s,"
                  f" resync {took - replay:.2f} s ({q.get('records')} records)", flush=True)
    if "untar" in ROWS:
        untar_row(vol, link, add)
    if "pinwb" in ROWS:
        pinwb_row(vol, link, add)
    print(f"# {ROUNDS} rounds; seconds (or ratios): median (min-max)")
    for k, xs in res.items():
        print(f"{k:32s} {summary(xs)}")


def untar_row(vol, link, add):
    """The untar row: local disk and WriteBack=no first, then the volume
    restarted with WriteBack=yes (pinned directories made before: pins need
    the server)."""
    src = os.path.join(vol.top, "untar-src")
    for i in range(NUNTAR):
        os.makedirs(os.path.join(src, f"d{i % 10}"), exist_ok=True)
        with open(os.path.join(src, f"d{i % 10}", f"f{i:04d}"), "wb") as f:
            f.write(os.urandom(4096))
    tarball = os.path.join(vol.top, "untar.tar")
    subprocess.run(["tar", "cf", tarball, "-C", src, "."], check=True)
    local, no, wb = [], [], []
    for r in range(ROUNDS):
        for kind in ("no", "wb"):
            os.makedirs(os.path.join(link.server, f"untar-{kind}-{r}"))
            vol.ctl("pin recursive", f"untar-{kind}-{r}", timeout=1800)
        d = os.path.join(vol.top, f"untar-local-{r}")
        os.makedirs(d)
        local.append(timed(["tar", "xf", tarball, "-C", d]))
        no.append(timed(["tar", "xf", tarball, "-C", vol.v(f"untar-no-{r}")], timeout=3600))
        print(f"# untar round {r + 1}: local {local[-1]:.3f} s, WriteBack=no {no[-1]:.2f} s",
              flush=True)
    vol.stop()
    vol.args += ["--set", "WriteBack=yes"]
    vol.start()
    if vol.state().get("state") != "writeback":
        raise RuntimeError(f"untar row: WriteBack=yes is not in writeback: {vol.state()}")
    for r in range(ROUNDS):
        wb.append(timed(["tar", "xf", tarball, "-C", vol.v(f"untar-wb-{r}")]))
        ship = timed([viewlib.CTL, vol.cache, "sync"], timeout=3600)
        got = sum(len(fs) for _, _, fs in os.walk(os.path.join(link.server, f"untar-wb-{r}")))
        conflicts = vol.ctl("query conflicts").get("conflicts")
        if got != NUNTAR or conflicts != "0":
            raise RuntimeError(f"untar row: {got} of {NUNTAR} files on the server after sync,"
                               f" {conflicts} conflicts")
        add("untar local", local[r])
        add("untar view WriteBack=no", no[r])
        add("untar view WriteBack=yes", wb[-1])
        add("untar view wb ship (sync)", ship)
        add("untar WriteBack=yes / local", wb[-1] / local[r])
        add("untar WriteBack=no / local", no[r] / local[r])
        print(f"# untar round {r + 1}: WriteBack=yes {wb[-1]:.3f} s, shipped in {ship:.2f} s",
              flush=True)


def pinwb_row(vol, link, add):
    """The pinwb row: pins online first, then the volume in writeback (restarted
    with WriteBack=yes unless the untar row left it so)."""
    online = {}
    for n in (100, 1000):
        for r in range(ROUNDS):
            for kind in ("on", "wb"):
                make_tree(os.path.join(link.server, f"pinwb-{kind}{n}-{r}"), n, 4096)
            if vol.state().get("state") == "online":
                online[n, r] = pin_time(vol, f"pinwb-on{n}-{r}")
    if vol.state().get("state") != "writeback":
        vol.stop()
        vol.args += ["--set", "WriteBack=yes"]
        vol.start()
        if vol.state().get("state") != "writeback":
            raise RuntimeError(f"pinwb row: WriteBack=yes is not in writeback: {vol.state()}")
    for n in (100, 1000):
        for r in range(ROUNDS):
            t = time.perf_counter()
            q = vol.ctl("pin recursive", f"pinwb-wb{n}-{r}", timeout=1800)
            took = time.perf_counter() - t
            if q.get("mirrored") != "yes" or q.get("state") != "writeback":
                raise RuntimeError(f"pinwb row: the pin in writeback did not mirror it all: {q}")
            add(f"pinwb{n} view pin writeback", took)
            if (n, r) in online:
                add(f"pinwb{n} view pin online", online[n, r])
                add(f"pinwb{n} writeback / online", took / online[n, r])
            print(f"# pinwb{n} round {r + 1}: writeback {took:.2f} s", flush=True)


def reconnect(vol):
    """Runs `reconnect`: its answer, seconds to the answer, and seconds until
    `query state` left "reintegrating" (the replay; the rest is the mirror's
    resync with the server), polled every 0.1 s."""
    res = {}
    t = time.perf_counter()
    th = threading.Thread(target=lambda: res.update(vol.ctl("reconnect", timeout=3600)))
    th.start()
    replay = None
    seen = False
    while th.is_alive():
        st = vol.state().get("state")
        seen = seen or st == "reintegrating"
        if seen and st != "reintegrating" and replay is None:
            replay = time.perf_counter() - t
        time.sleep(0.1)
    th.join()
    took = time.perf_counter() - t
    if not res:
        raise RuntimeError("reconnect failed")
    return res, took, replay if replay is not None else took


def changes(d):
    """The reconnect row's changes in d (holding NEDIT files f0000...): NCREATE
    new files of 64 bytes, then every existing file rewritten.  Seconds taken."""
    t = time.perf_counter()
    for i in range(NCREATE):
        with open(os.path.join(d, f"new{i:04d}"), "wb") as f:
            f.write(b"%063d\n" % i)
    for i in range(NEDIT):
        with open(os.path.join(d, f"f{i:04d}"), "r+b") as f:
            f.write(b"edited offline\n")
    return time.perf_counter() - t


def creates8(d):
    """NCREATE files of 64 bytes made in new directory d by 8 threads at
    once.  Seconds taken."""
    os.mkdir(d)
    names = iter(range(NCREATE))
    lock = threading.Lock()

    def work():
        while True:
            with lock:
                i = next(names, None)
            if i is None:
                return
            fd = os.open(os.path.join(d, f"new{i:04d}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, b"%063d\n" % i)
            finally:
                os.close(fd)

    t = time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t


def lease_s():
    return float(LEASE.rstrip("s"))


def pin_time(vol, path):
    t = time.perf_counter()
    vol.ctl("pin recursive", path, timeout=1800)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
