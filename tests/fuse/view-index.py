#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A damaged store index (store.db) found at start: the volume still comes
up, says so in `query state` (store=rebuilt and why), keeps the damaged file
for diagnosis, serves the files (from the backing online, from the mirror
offline) and takes new pins; an intact index says store=ok.

Garbage over the whole file (not a database) and garbage after a valid
SQLite header (a damaged one) are both tried.

Files read whole while unpinned live only in the mirror (their containers):
after the index is lost they are indexed again at start (`query state`:
reindex=done, containers_reindexed, containers_dropped), counted in the
cache's use and culled; one the server changed or removed meanwhile is
removed from the mirror and read afresh; found offline they are indexed
unvalidated, served offline, and checked at the reconnect.

A worker killed while moving a file into the mirror may leave its temporary
in a directory that is not complete: the next start removes it (not one of a
live process).  After a lost index the least recently used containers are
culled first.
"""
import errno
import glob
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, err_of, finish, rand_bytes, read_direct,  # noqa: E402
                     read_file, require_root_fuse, wait_for, write_file)

KiB = 1024


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


def delete_index(cache):
    for suffix in ("", "-wal", "-shm"):
        p = os.path.join(cache, "store.db" + suffix)
        if os.path.exists(p):
            os.unlink(p)


def reindexed(vol):
    """query state once the start's walk of the mirror has ended."""
    wait_for(lambda: vol.state().get("reindex") == "done")
    return vol.state()


def read_into_containers(vol, data, label):
    mirror = os.path.join(vol.cache, "mirror")
    for name, d in data.items():
        eq(read_file(vol.v(name)), d, f"{label}: read {name} whole")
    check(wait_for(lambda: all(os.path.exists(os.path.join(mirror, n)) for n in data)),
          f"{label}: every file read whole is a container in the mirror")


def cached_reindexed():
    """Online: the containers are indexed again, counted, culled; changed or
    removed ones are dropped."""
    vol = Volume("index-cached", lease="1s")
    mirror = os.path.join(vol.cache, "mirror")
    os.makedirs(vol.b("c", "sub"))
    os.makedirs(vol.b("p"))
    data = {f"c/f{i}": rand_bytes(300 * KiB + i * 1000, 40 + i) for i in range(5)}
    data["c/sub/deep"] = rand_bytes(200 * KiB, 50)
    data["c/changed"] = rand_bytes(100 * KiB, 51)
    data["c/gone"] = rand_bytes(100 * KiB, 52)
    data["c/gonedir/y"] = rand_bytes(100 * KiB, 55)
    os.makedirs(vol.b("c", "gonedir"))
    for name, d in data.items():
        write_file(vol.b(name), d)
    write_file(vol.b("p", "x"), rand_bytes(50 * KiB, 53))
    vol.start()
    eq(vol.ctl("pin recursive", "p")["_rc"], 0, "cached: pin p")
    read_into_containers(vol, data, "cached")
    used = int(vol.ctl("query cache")["used"])
    vol.stop()
    new = rand_bytes(120 * KiB, 54)
    write_file(vol.b("c", "changed"), new)      # the server changes one meanwhile
    os.unlink(vol.b("c", "gone"))               # and removes another
    shutil.rmtree(vol.b("c", "gonedir"))        # and a directory
    delete_index(vol.cache)
    vol.start()
    st = reindexed(vol)
    kept = [n for n in data if n not in ("c/changed", "c/gone", "c/gonedir/y")]
    eq((st.get("reindex"), st.get("containers_reindexed"), st.get("containers_unvalidated"),
        st.get("containers_dropped")), ("done", str(len(kept)), "0", "3"),
       "cached: query state counts the containers indexed again and those dropped")
    for n in kept:
        eq(vol.ctl("query cached", n)["cached"], "complete", f"cached: {n} is cached again")
        eq(read_direct(vol.v(n)), data[n], f"cached: {n} reads right")
    kept_bytes = sum(len(data[n]) for n in kept)
    used_now = int(vol.ctl("query cache")["used"])
    check(used_now >= kept_bytes, f"cached: the cache's use counts them ({used_now} >="
          f" {kept_bytes}; {used} before the index was lost)")
    for n in ("c/changed", "c/gone", "c/gonedir/y"):
        check(not os.path.exists(os.path.join(mirror, n)),
              f"cached: {n}, changed or removed on the server, is gone from the mirror")
    check(not os.path.exists(os.path.join(mirror, "c", "gonedir")),
          "cached: so is the mirror's directory that only it kept")
    eq(read_file(vol.v("c", "changed")), new, "cached: the changed file reads afresh")
    eq(err_of(lambda: read_file(vol.v("c", "gone"))), errno.ENOENT,
       "cached: the removed file is gone")
    check(wait_for(lambda: vol.ctl("query cached", "p/x").get("pinned") == "yes"),
          "cached: the pinned file is the hoard walk's (pinned again)")
    vol.stop()
    vol.start()
    eq(vol.state().get("reindex"), None, "cached: the next start has no walk to make")
    for n in kept:
        eq(vol.ctl("query cached", n)["cached"], "complete", f"cached: {n} still cached")
    before = [n for n in data if os.path.exists(os.path.join(mirror, n))]
    eq(vol.ctl("set cache-size 1M")["_rc"], 0, "cached: a small CacheSize")
    culled = [n for n in before if not os.path.exists(os.path.join(mirror, n))]
    check(len(culled) >= 2, f"cached: culling removed containers indexed again ({culled})")
    for n in culled:
        eq(vol.ctl("query cached", n)["cached"], "no", f"cached: culled {n} is not cached")
    check(os.path.exists(os.path.join(mirror, "p", "x")), "cached: the pinned file stays")
    vol.ctl("set cache-size 1G")
    for n in kept:
        eq(read_file(vol.v(n)), data[n], f"cached: after culling {n} reads right")
    check(wait_for(lambda: all(os.path.exists(os.path.join(mirror, n)) for n in kept)),
          "cached: read whole again, they are containers again")

    # the index deleted under a running worker, which is then killed: the
    # holder's next worker (a takeover) indexes them again
    present = [n for n in data if os.path.exists(os.path.join(mirror, n))]
    delete_index(vol.cache)
    old = vol.kill_worker()
    vol.wait_new_worker(old)
    st = reindexed(vol)
    eq((st.get("containers_reindexed"), st.get("containers_dropped")), (str(len(present)), "0"),
       "cached: after a takeover on a deleted index they are indexed again")
    for n in present:
        eq(vol.ctl("query cached", n)["cached"], "complete", f"cached: {n} cached after it")
    vol.stop()


def cached_reindexed_offline():
    """Offline: the containers are indexed unvalidated and served; the
    reconnect checks them (a file the server changed is not served stale)."""
    vol = Volume("index-offline", lease="1s")
    os.makedirs(vol.b("c"))
    data = {f"c/f{i}": rand_bytes(150 * KiB + i, 60 + i) for i in range(4)}
    for name, d in data.items():
        write_file(vol.b(name), d)
    vol.start()
    read_into_containers(vol, data, "offline")
    eq(vol.ctl("disconnect")["state"], "offline", "offline: disconnect")
    vol.stop()
    delete_index(vol.cache)
    new = rand_bytes(160 * KiB, 70)
    write_file(vol.b("c", "f1"), new)            # the server changes one meanwhile
    vol.start()
    st = reindexed(vol)
    eq((st.get("state"), st.get("containers_reindexed"), st.get("containers_unvalidated"),
        st.get("containers_dropped")), ("offline", "4", "4", "0"),
       "offline: every container is indexed again, unvalidated, none dropped")
    for n, d in data.items():
        eq(read_direct(vol.v(n)), d, f"offline: {n} is served from its container")
    used = int(vol.ctl("query cache")["used"])
    check(used >= sum(len(d) for d in data.values()), f"offline: the cache's use counts them"
          f" ({used})")
    q = vol.ctl("reconnect")
    eq((q["state"], q.get("conflicts")), ("online", "0"), "offline: reconnect")
    time.sleep(1.2)                             # the attribute lease
    eq(read_direct(vol.v("c", "f1")), new, "offline: after the reconnect the changed file is"
       " not served stale")
    for n in ("c/f0", "c/f2", "c/f3"):
        eq(vol.ctl("query cached", n)["cached"], "complete", f"offline: {n} still cached")
        eq(read_direct(vol.v(n)), data[n], f"offline: after the reconnect {n} reads right")
    vol.stop()


def randomized():
    """Seeded rounds (FCACHE_INDEX_SEED to rerun): random files read whole or
    in part, the volume stopped online or offline, the server changing and
    removing files meanwhile, the index deleted or damaged; at each start the
    counts are what the mirror held, offline every cached file reads as it
    was cached, online every file reads as the server has it.  Last, a start
    with a CacheSize too small for them culls them."""
    seed = int(os.environ.get("FCACHE_INDEX_SEED", random.randrange(1 << 30)))
    print(f"# randomized section: FCACHE_INDEX_SEED={seed}")
    rnd = random.Random(seed)
    vol = Volume("index-random", lease="1s")
    mirror = os.path.join(vol.cache, "mirror")
    server = {}

    def put(name):
        server[name] = rand_bytes(rnd.choice([100, 5000, 140 * KiB, 300 * KiB]), rnd.random())
        os.makedirs(os.path.dirname(vol.b(name)), exist_ok=True)
        write_file(vol.b(name), server[name])

    for i in range(14):
        put(f"r/d{i % 3}/x{i}")
    vol.start()
    bad = 0
    for rnd_no in range(4):
        label = f"random round {rnd_no}"
        whole = [n for n in sorted(server) if rnd.random() < 0.6]
        for n in sorted(server):
            if n in whole:
                bad += read_file(vol.v(n)) != server[n]
            elif rnd.random() < 0.5:
                with open(vol.v(n), "rb") as f:
                    bad += f.read(4096) != server[n][:4096]
        wait_for(lambda: all(os.path.exists(os.path.join(mirror, n)) for n in whole))
        was = dict(server)
        offline = rnd.random() < 0.4
        if offline:
            eq(vol.ctl("disconnect")["state"], "offline", f"{label}: disconnect")
        vol.stop()
        # what the mirror holds once stopped (files move in asynchronously)
        cached = {n for n in server if os.path.exists(os.path.join(mirror, n))}
        stale = set()
        for n in sorted(server):
            r = rnd.random()
            if r < 0.2:
                put(n)
                stale.add(n)
            elif r < 0.3:
                os.unlink(vol.b(n))
                del server[n]
                stale.add(n)
        how = rnd.choice(["deleted", "garbage", "damaged"])
        if how == "deleted":
            delete_index(vol.cache)
        else:
            damage(vol.cache, 0 if how == "garbage" else 100)
        vol.start()
        st = reindexed(vol)
        got = (st.get("containers_reindexed"), st.get("containers_unvalidated"),
               st.get("containers_dropped"))
        if offline:
            eq(got, (str(len(cached)), str(len(cached)), "0"),
               f"{label} (offline, index {how}): all {len(cached)} cached files indexed,"
               " unvalidated")
            for n in sorted(cached):
                bad += read_direct(vol.v(n)) != was[n]
            q = vol.ctl("reconnect")
            eq((q["state"], q.get("conflicts")), ("online", "0"), f"{label}: reconnect")
            time.sleep(1.2)                     # the attribute lease
        else:
            keep = cached - stale
            eq(got, (str(len(keep)), "0", str(len(cached & stale))),
               f"{label} (online, index {how}): {len(keep)} indexed again,"
               f" {len(cached & stale)} dropped")
            used = int(vol.ctl("query cache")["used"])
            check(used >= sum(len(server[n]) for n in keep),
                  f"{label}: the cache's use counts them ({used})")
        for n in sorted(was):
            if n in server:
                bad += read_direct(vol.v(n)) != server[n]
            else:
                bad += err_of(lambda: read_file(vol.v(n))) != errno.ENOENT
                put(n)                          # back for the next round
        time.sleep(1.2)     # the lease: the view saw removed names as absent
    eq(bad, 0, f"random rounds: every read right (seed {seed})")
    for n in sorted(server):
        read_file(vol.v(n))
    wait_for(lambda: all(os.path.exists(os.path.join(mirror, n)) for n in server))
    vol.stop()
    delete_index(vol.cache)
    half = sum(len(d) for d in server.values()) // 2048
    vol.args += ["--set", f"CacheSize={half}K", "--set", "Reserve=16K"]
    vol.start()
    reindexed(vol)
    q = vol.ctl("query cache")
    check(int(q["used"]) <= int(q["capacity"]),
          f"a small CacheSize at the start culls them: used {q['used']} <= {q['capacity']}")
    check(int(q["culled"]) > 0, f"... it culled some ({q['culled']})")
    for n in sorted(server):
        eq(read_direct(vol.v(n)), server[n], f"after the start's culling {n} reads right")
    vol.stop()


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


def swept(vol):
    """query state once the start's walk of the mirror has ended."""
    wait_for(lambda: "temporaries_removed" in vol.state())
    return vol.state()


def leftover_temporaries():
    """A worker killed while moving a file into the mirror leaves its
    temporary in a directory that is not complete: the next worker's start
    removes it (not one a live process may still own), the index intact."""
    vol = Volume("index-tmp")
    mirror = os.path.join(vol.cache, "mirror")
    os.makedirs(vol.b("t", "sub"))
    data = {"t/a": rand_bytes(50 * KiB, 80), "t/sub/b": rand_bytes(60 * KiB, 81)}
    for name, d in data.items():
        write_file(vol.b(name), d)
    vol.start()
    read_into_containers(vol, data, "tmp")
    pid = vol.worker_pid()
    # what the worker's moves in flight leave when it is killed: the
    # store's content file linked into the mirror under a temporary name
    stale = [os.path.join(mirror, "t", f".fcache-mirror.{pid}.7"),
             os.path.join(mirror, "t", "sub", f".fcache-mirror.{pid}.8")]
    live = os.path.join(mirror, "t", f".fcache-mirror.{os.getpid()}.9")
    for p in stale + [live]:
        write_file(p, rand_bytes(50 * KiB, 82))
    old = vol.kill_worker()
    vol.wait_new_worker(old)
    st = swept(vol)
    eq((st.get("temporaries_removed"), st.get("reindex")), ("2", None),
       "tmp: after a kill -9 the next worker's start removes the dead worker's temporaries"
       " (no reindex: the index is intact)")
    for p in stale:
        check(not os.path.exists(p), f"tmp: {os.path.relpath(p, mirror)} is gone")
    check(os.path.exists(live), "tmp: a temporary of a live process stays")
    os.unlink(live)
    for name, d in data.items():
        eq(read_direct(vol.v(name)), d, f"tmp: {name} reads right")
        eq(vol.ctl("query cached", name)["cached"], "complete", f"tmp: {name} still cached")
    vol.stop()
    stale = os.path.join(mirror, "t", ".fcache-mirror.999999999.1")
    write_file(stale, b"x")
    vol.start()
    eq(swept(vol).get("temporaries_removed"), "1", "tmp: a restart removes one too")
    check(not os.path.exists(stale), "tmp: ... from the mirror")
    vol.stop()


def lru_after_lost_index():
    """After the index is lost the containers indexed again keep the cull's
    order: the least recently used go first.  They are read in an order
    unlike their inode numbers' (a row's order among equal use times)."""
    vol = Volume("index-lru", reserve="0")
    mirror = os.path.join(vol.cache, "mirror")
    os.makedirs(vol.b("l"))
    names = [f"l/f{i}" for i in range(8)]
    data = {n: rand_bytes(200 * KiB, 90 + i) for i, n in enumerate(names)}
    for n in names:
        write_file(vol.b(n), data[n])
    order = names[::2][::-1] + names[1::2]      # f6 f4 f2 f0 f1 f3 f5 f7
    vol.start()
    for n in order:                             # one after another: each its own use
        read_into_containers(vol, {n: data[n]}, "lru")
    vol.stop()
    delete_index(vol.cache)
    vol.start()
    eq(reindexed(vol).get("containers_reindexed"), str(len(names)),
       "lru: the containers are indexed again")
    eq(vol.ctl("set cache-size 1M")["_rc"], 0, "lru: a CacheSize that holds about half of them")
    culled = [n for n in order if not os.path.exists(os.path.join(mirror, n))]
    kept = [n for n in order if n not in culled]
    check(len(culled) >= 2 and len(kept) >= 2, f"lru: culling removed some ({culled})")
    eq(culled, order[:len(culled)],
       f"lru: the least recently used are culled first (read in order {order})")
    for n in order:
        eq(read_direct(vol.v(n)), data[n], f"lru: {n} reads right after culling")
    vol.stop()


def main():
    require_root_fuse()
    lru_after_lost_index()
    leftover_temporaries()
    lost_index()
    cached_reindexed()
    cached_reindexed_offline()
    randomized()
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
        read_into_containers(vol, {"other": b"x" * 1000}, label)
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
        eq(reindexed(vol).get("containers_reindexed"), "1",
           f"{label}: the cached file is indexed again")
        eq(vol.ctl("query cached", "other")["cached"], "complete",
           f"{label}: ... and cached")
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
