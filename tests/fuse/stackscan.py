#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Heuristic user stacks of a process whose threads cannot be stopped
(blocked in FUSE calls, so gdb's attach waits for ever): reads each
thread's stack pointer from /proc/PID/task/TID/syscall, scans the stack
words that point into the executable's text, and symbolizes them with
addr2line.  Words left on the stack by earlier calls show up too: read the
innermost frames first.  Usage: stackscan.py PID"""
import os, subprocess, struct, sys
pid = int(sys.argv[1])
exe = os.readlink(f"/proc/{pid}/exe")
maps = []
for line in open(f"/proc/{pid}/maps"):
    f = line.split()
    lo, hi = (int(x, 16) for x in f[0].split("-"))
    path = f[5] if len(f) > 5 else ""
    maps.append((lo, hi, f[1], int(f[2], 16), path))
base = min(lo - off for lo, hi, perm, off, path in maps if path == exe)
text = [(lo, hi) for lo, hi, perm, off, path in maps if path == exe and "x" in perm]
mem = open(f"/proc/{pid}/mem", "rb", 0)
for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
    try:
        sc = open(f"/proc/{pid}/task/{tid}/syscall").read().split()
    except OSError:
        continue
    if len(sc) < 9:
        print(f"== {tid}: {sc}")
        continue
    sp = int(sc[7], 16)
    try:
        mem.seek(sp)
        raw = mem.read(32768)
    except OSError:
        raw = b""
    addrs = []
    for i in range(0, len(raw) - 7, 8):
        (w,) = struct.unpack_from("<Q", raw, i)
        if any(lo <= w < hi for lo, hi in text):
            addrs.append(w - base)
    names = []
    if addrs:
        out = subprocess.run(["addr2line", "-f", "-s", "-e", exe] + [hex(a) for a in addrs],
                             capture_output=True, text=True).stdout.split("\n")
        for j in range(0, len(out) - 1, 2):
            names.append(f"{out[j]}@{out[j+1]}")
    print(f"== {tid} syscall {sc[0]} arg1 {sc[1]}: " + " <- ".join(names[:14]), flush=True)
