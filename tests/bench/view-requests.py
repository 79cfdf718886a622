#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""FUSE requests per operation through the view, by opcode: the worker's
reads of /dev/fuse are traced (strace -f, first 8 bytes: the request's
length and opcode) while tar reads N warm small files (`tar cf - | cat`)
and while N small files are created (create, write 100 bytes, close).

Then, in a second pass of each (strace -f -c on the worker), the system
calls the worker makes a file, by name: what serving those requests costs
besides the requests' own read and write of /dev/fuse.

Environment: FCACHE_REQ_FILES (default 500), FCACHE_VIEW (the binary).
Needs root and strace; prints, e.g.
  tar: 2.06 requests a file: OPEN 1.00, RELEASE 1.00, ...
  tar: 8.10 worker syscalls a file: read 2.06, writev 2.00, ...
"""
import collections
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuse"))
import viewlib  # noqa: E402

OPS = {1: "LOOKUP", 2: "FORGET", 3: "GETATTR", 4: "SETATTR", 9: "MKDIR", 10: "UNLINK",
       13: "STATFS", 14: "OPEN", 15: "READ", 16: "WRITE", 18: "RELEASE", 20: "FSYNC",
       22: "GETXATTR", 25: "FLUSH", 27: "OPENDIR", 28: "READDIR", 29: "RELEASEDIR",
       35: "CREATE", 42: "BATCH_FORGET", 44: "READDIRPLUS", 46: "LSEEK"}
N = int(os.environ.get("FCACHE_REQ_FILES", "500"))
HEX8 = r"((?:\\x[0-9a-f]{2}){8})"


def opcodes(trace, fusefd):
    """Counts the requests read from fusefd in an strace -f -xx -s 8 log."""
    count, pending = collections.Counter(), {}
    for line in open(trace):
        parts = line.split(None, 1)
        if len(parts) < 2:
            continue
        tid, rest = parts
        m = re.match(r"read\((\d+),\s+<unfinished", rest)
        if m:
            pending[tid] = int(m.group(1))
            continue
        m = re.match(r"read\((\d+), \"" + HEX8, rest)
        if m:
            fd, data = int(m.group(1)), m.group(2)
        else:
            m = re.match(r"<\.\.\. read resumed>\"" + HEX8, rest)
            if not m:
                continue
            fd, data = pending.pop(tid, None), m.group(1)
        if fd != fusefd:
            continue
        raw = bytes(int(h, 16) for h in data.split("\\x")[1:])
        op = struct.unpack("<II", raw)[1]
        count[OPS.get(op, str(op))] += 1
    return count


def syscalls(summary):
    """Calls by name from an strace -c summary."""
    count = {}
    for line in open(summary):
        f = line.split()
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
            count[f[-1]] = int(f[3])
    return count


def main():
    if os.geteuid() != 0:
        viewlib.skip("needs root")
    if not shutil.which("strace"):
        viewlib.skip("needs strace")
    vol = viewlib.Volume("req", lease="600s")
    rnd = random.Random(3)
    for i in range(N):
        d = os.path.join(vol.backing, "tree", f"d{i // 100:02d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:04d}"), "wb") as f:
            f.write(rnd.randbytes(rnd.randrange(1024, 16384)))
    vol.start()
    pid = vol.worker_pid()
    fusefd = next(int(fd) for fd in os.listdir(f"/proc/{pid}/fd")
                  if os.path.realpath(f"/proc/{pid}/fd/{fd}") == "/dev/fuse")

    def tar():
        subprocess.run("tar cf - tree | cat > /dev/null", shell=True, cwd=vol.mnt, check=True)

    def create(tag):
        os.mkdir(vol.v(tag))
        for i in range(N):
            fd = os.open(vol.v(tag, f"c{i:05d}"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            os.write(fd, b"x" * 100)
            os.close(fd)

    tar()
    tar()
    create("warm")
    trace = os.path.join(vol.top, "strace.log")
    for what, fn in (("tar", tar), ("create", lambda: create("traced"))):
        st = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=read", "-e", "signal=none",
                               "-xx", "-s", "8", "-p", str(pid), "-o", trace])
        time.sleep(1)           # attached to every thread
        fn()
        time.sleep(0.5)         # the RELEASEs, which close(2) does not wait for
        st.terminate()
        st.wait()
        c = opcodes(trace, fusefd)
        print(f"{what}: {sum(c.values()) / N:.2f} requests a file: " +
              ", ".join(f"{k} {v / N:.2f}" for k, v in c.most_common()), flush=True)
    summary = os.path.join(vol.top, "strace-c.log")
    for what, fn in (("tar", tar), ("create", lambda: create("counted"))):
        st = subprocess.Popen(["strace", "-f", "-qq", "-c", "-e", "signal=none",
                               "-p", str(pid), "-o", summary])
        time.sleep(1)
        fn()
        time.sleep(0.5)
        st.terminate()
        st.wait()
        c = syscalls(summary)
        print(f"{what}: {sum(c.values()) / N:.2f} worker syscalls a file: " +
              ", ".join(f"{k} {v / N:.2f}" for k, v in sorted(c.items(), key=lambda kv: -kv[1])),
              flush=True)
    vol.stop()


if __name__ == "__main__":
    main()
