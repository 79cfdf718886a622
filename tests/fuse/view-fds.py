#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""More cached inodes than the process may hold descriptors (hard limit
20,000 here): the view keeps a bounded descriptor cache and re-resolves
nodes by file handle or parent+name, so 21,000 files (more than the limit) all stay reachable;
and the same after a kill -9 takeover, where every node is restored from
the takeover log without a descriptor."""
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import Volume, check, eq, finish, require_root_fuse  # noqa: E402

N = 21000


def main():
    require_root_fuse()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    vol = Volume("fds", lease="600s").start()
    for i in range(N):
        d = vol.b(f"d{i // 1000:02d}")
        if i % 1000 == 0:
            os.mkdir(d)
        with open(os.path.join(d, f"f{i:05d}"), "wb") as f:
            f.write(b"%d" % i)

    def walk(tag, step=1):
        bad = 0
        for i in range(0, N, step):
            p = vol.v(f"d{i // 1000:02d}", f"f{i:05d}")
            try:
                with open(p, "rb") as f:
                    if f.read() != b"%d" % i:
                        bad += 1
            except OSError:
                bad += 1
        eq(bad, 0, f"{tag}: {len(range(0, N, step))} files open and read through the view")

    walk("first pass")
    st = vol.state()
    check(int(st["nodes"]) >= N, f"the kernel holds {st['nodes']} nodes")
    check(int(st["node_fds"]) <= 4096, f"but the view keeps only {st['node_fds']} descriptors")
    nfd = len(os.listdir(f"/proc/{st['pid']}/fd"))
    check(nfd < min(hard, 20000) // 2, f"worker has {nfd} open descriptors (hard limit {hard})")
    walk("second pass (re-resolved nodes, every 3rd)", 3)
    old = vol.kill_worker()
    vol.wait_new_worker(old)
    walk("after kill -9 and takeover (every 5th)", 5)
    st = vol.state()
    check(int(st["node_fds"]) <= 4096, f"after takeover {st['node_fds']} descriptors")
    vol.stop()
    finish()


if __name__ == "__main__":
    main()
