#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The view under fcached.service's system call filter.

fcached.service allows only the system calls of its SystemCallFilter= line
(systemd's @system-service and @mount sets, as the installed systemd defines
them) and makes every other one fail with EPERM; fcached and the views it
starts inherit the filter.  A call the view starts to use that the filter
does not know (getxattrat(2), newer than systemd 252, was one) works in
every other test and fails only in the service.  This test builds the same
filter from the unit file and the installed systemd's sets (syscall-filter,
beside this file), checks it refuses what the service refuses, and runs
fuse tests that exercise most of the view (POSIX operations online,
disconnected operation and reconnect, random operations across switches)
with the view under it.

Environment: FCACHE_VIEW, FCACHE_VIEW_CTL as the other fuse tests;
FCACHE_SYSCALL_FILTER (the syscall-filter program); FCACHE_FILTER_TESTS
(comma-separated fuse test names, default posix,posix2,offline,model).
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import VIEW, check, eq, finish, require_root_fuse, skip  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
UNIT = os.path.join(HERE, "..", "..", "units", "fcached.service.in")
FILTER = os.environ.get("FCACHE_SYSCALL_FILTER", "")
TESTS = os.environ.get("FCACHE_FILTER_TESTS", "posix,posix2,offline,model").split(",")


def unit_filter():
    """The allowed names and @sets of the unit's SystemCallFilter= lines."""
    words = []
    with open(UNIT) as f:
        for line in f:
            m = re.match(r"\s*SystemCallFilter=(.*)", line)
            if m:
                words += m.group(1).split()
    if not words or any(w.startswith("~") for w in words):
        raise SystemExit(f"{UNIT}: expected an allow-list SystemCallFilter=, found {words}")
    return words


def expand(words):
    """Names of the system calls of @sets (recursively, as the installed
    systemd defines them) and plain names."""
    names, seen = set(), set()
    todo = list(words)
    while todo:
        w = todo.pop()
        if not w.startswith("@"):
            names.add(w)
            continue
        if w in seen:
            continue
        seen.add(w)
        out = subprocess.run(["systemd-analyze", "syscall-filter", w], capture_output=True,
                             text=True, check=True).stdout
        for line in out.splitlines()[1:]:
            line = line.strip()
            if line and not line.startswith("#"):
                todo.append(line)
    return names


def syscall_numbers():
    """name -> number of the native architecture, from the kernel headers."""
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    heads = [h for h in (f"/usr/include/{arch}/asm/unistd_64.h", "/usr/include/asm/unistd_64.h")
             if os.path.exists(h)]
    if not heads:
        skip("no asm/unistd_64.h (linux-libc-dev) to number the system calls")
    nums = {}
    with open(heads[0]) as f:
        for line in f:
            m = re.match(r"#define __NR_(\w+)\s+(\d+)\s*$", line)
            if m:
                nums[m.group(1)] = int(m.group(2))
    return nums


def main():
    require_root_fuse()
    if not FILTER or not os.access(FILTER, os.X_OK):
        skip("FCACHE_SYSCALL_FILTER is not the syscall-filter program")
    if not shutil.which("systemd-analyze"):
        skip("no systemd-analyze to read systemd's system call sets")
    names = expand(unit_filter())
    nums = syscall_numbers()
    allowed = sorted({nums[n] for n in names if n in nums})
    check(len(allowed) > 200, f"the service's filter allows {len(allowed)} system calls of this architecture")
    work = tempfile.mkdtemp(prefix="fcache-filter-")
    try:
        wrapper = os.path.join(work, "fcache-view")
        asan = os.environ.get("ASAN_OPTIONS", "")
        # LeakSanitizer's exit check stops threads with ptrace, which the
        # service's filter refuses too: the leak check is the other tests'.
        asan = (asan + ":" if asan else "") + "detect_leaks=0"
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\n"
                    f"ASAN_OPTIONS='{asan}' exec '{FILTER}' {' '.join(map(str, allowed))} -- "
                    f"'{os.path.abspath(VIEW)}' \"$@\"\n")
        os.chmod(wrapper, 0o755)

        # The filter refuses as the service does: ptrace is no service's
        # call, getxattrat (where the headers know it) is newer than the sets.
        probe = ("import ctypes, os\n"
                 "libc = ctypes.CDLL(None, use_errno=True)\n"
                 f"r = libc.syscall({nums['ptrace']}, 0, 0, 0, 0)\n"
                 "print(r, os.strerror(ctypes.get_errno()) if r < 0 else '')\n")
        out = subprocess.run([FILTER] + [str(n) for n in allowed] + ["--", sys.executable, "-c", probe],
                             capture_output=True, text=True)
        eq(out.stdout.strip(), "-1 Operation not permitted",
           "a call outside the service's sets (ptrace) fails with EPERM under the filter")

        env = dict(os.environ, FCACHE_VIEW=wrapper)
        for t in TESTS:
            script = os.path.join(HERE, f"view-{t}.py")
            r = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
            lines = (r.stdout + r.stderr).splitlines()
            tail = "\n".join([ln for ln in lines if ln.startswith("not ok")][:10] + lines[-5:])
            check(r.returncode in (0, 77),
                  f"view-{t} passes with the view under the service's filter (exit {r.returncode})"
                  + ("" if r.returncode in (0, 77) else "\n" + tail))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
