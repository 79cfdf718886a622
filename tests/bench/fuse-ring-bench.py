#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""What FUSE over io_uring would save the view per open+close: runs
fuse-ring-bench (a raw FUSE server with one file, serving OPEN and RELEASE
over /dev/fuse or over the ring) in interleaved dev/ring rounds, same run,
and prints the median and spread of microseconds per open+close, wall and
CPU (client and server together).

Ring mode needs /sys/module/fuse/parameters/enable_uring = Y: run as root,
the script sets it for the rounds and puts back what it found; without root
and with N it exits 77 (skipped).  Setting it is harmless to other FUSE
servers: the kernel only offers the ring in INIT, and a server that does not
take it keeps /dev/fuse.

Environment: FUSE_RING_BENCH (the binary; default next to this script's
build), FUSE_RING_BENCH_COUNT (open+close per run, default 100000),
FUSE_RING_BENCH_ROUNDS (default 5), FUSE_RING_BENCH_MODES (default
"dev,ring,ring-nopin,dev-pin,ring-pin").  The kernel queues a ring request
on its sender's CPU, and "ring" pins each queue's thread to its CPU (as
libfuse does); ring-nopin leaves them unpinned.  dev-pin and ring-pin put
the client (and the /dev/fuse thread) on CPU 0: client and server then
share one CPU both ways, which compares the two transports alone.
"""
import os
import statistics
import subprocess
import sys

PARAM = "/sys/module/fuse/parameters/enable_uring"


def run(binary, mode, count):
    env = dict(os.environ)
    env.pop("RING_NO_PIN", None)
    env.pop("DEV_PIN", None)
    if mode == "ring-nopin":
        env["RING_NO_PIN"] = "1"
    if mode in ("dev-pin", "ring-pin"):
        env["DEV_PIN"] = "1"
    out = subprocess.run([binary, mode.split("-")[0], str(count)], env=env,
                         check=True, capture_output=True, text=True, timeout=600).stdout.split()
    wall, cpu = float(out[2]), float(out[3])
    counts = dict(f.split("=") for f in out[4:])
    return wall, cpu, counts


def summary(values):
    values = sorted(values)
    return "median %7.2f  min %7.2f  max %7.2f" % (statistics.median(values), values[0], values[-1])


def main():
    binary = os.environ.get("FUSE_RING_BENCH", "fuse-ring-bench")
    count = int(os.environ.get("FUSE_RING_BENCH_COUNT", "100000"))
    rounds = int(os.environ.get("FUSE_RING_BENCH_ROUNDS", "5"))
    modes = os.environ.get("FUSE_RING_BENCH_MODES", "dev,ring,ring-nopin,dev-pin,ring-pin").split(",")
    try:
        with open(PARAM) as f:
            found = f.read().strip()
    except OSError:
        print("SKIP: this kernel has no FUSE over io_uring (%s)" % PARAM)
        return 77
    if found != "Y" and os.geteuid() != 0:
        print("SKIP: enable_uring is %s and setting it needs root" % found)
        return 77
    results = {m: {"wall": [], "cpu": []} for m in modes}
    try:
        if found != "Y":
            with open(PARAM, "w") as f:
                f.write("Y\n")
        for r in range(rounds):
            for m in modes:
                wall, cpu, counts = run(binary, m, count)
                us_wall, us_cpu = wall / count * 1e6, cpu / count * 1e6
                results[m]["wall"].append(us_wall)
                results[m]["cpu"].append(us_cpu)
                print("round %d %-10s %7.2f us wall %7.2f us cpu  requests %s" %
                      (r + 1, m, us_wall, us_cpu, counts), flush=True)
    finally:
        if found != "Y":
            with open(PARAM, "w") as f:
                f.write(found + "\n")
    print("\nus per open+close (%d per run, %d rounds)" % (count, rounds))
    for m in modes:
        print("%-10s wall %s" % (m, summary(results[m]["wall"])))
        print("%-10s cpu  %s" % (m, summary(results[m]["cpu"])))
    if "dev" in modes:
        base = statistics.median(results["dev"]["wall"])
        for m in modes:
            if m != "dev":
                print("%s / dev (wall medians): %.2f" % (m, statistics.median(results[m]["wall"]) / base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
