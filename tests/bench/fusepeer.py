# SPDX-License-Identifier: LGPL-2.1-or-later
"""libfuse's own passthrough_ll example as a peer in the benchmarks.

passthrough_ll forwards each FUSE request to the same call on a source
directory and does nothing else: no log, no copy, no store.  What it costs
against the raw directory is what the kernel's requests and their
round trips cost any FUSE filesystem on this machine, the floor under the
view's rows.  Debian's libfuse3-dev ships its source; it is built at bench
time into a temporary directory (never kept).  Mounted single-threaded
(-s: one reader of /dev/fuse, as the view reads it), caching names,
attributes and pages (cache=always), with xattrs and default_permissions,
as the view is.
"""
import os
import resource
import shutil
import subprocess
import time

EXAMPLES = "/usr/share/doc/libfuse3-dev/examples"
NAME = "passthrough_ll"


def build(workdir):
    """The path of a passthrough_ll built in @workdir, or None (with why)."""
    src = os.path.join(EXAMPLES, "passthrough_ll.c")
    if not os.path.exists(src) or not shutil.which("gcc") or not shutil.which("pkg-config"):
        print(f"  {NAME} missing (apt-get install libfuse3-dev gcc pkg-config)")
        return None
    os.makedirs(workdir, exist_ok=True)
    for f in ("passthrough_ll.c", "passthrough_helpers.h"):
        shutil.copy(os.path.join(EXAMPLES, f), workdir)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True,
                           text=True, check=True).stdout.split()
    exe = os.path.join(workdir, NAME)
    r = subprocess.run(["gcc", "-O2", os.path.join(workdir, "passthrough_ll.c"), "-o", exe] + flags,
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"  {NAME} not built: {r.stderr.strip()[:200]}")
        return None
    return exe


def most_files():
    """passthrough_ll holds a descriptor per inode the kernel knows."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Mount:
    """passthrough_ll of @source mounted at @mnt (made if missing)."""

    def __init__(self, exe, source, mnt):
        self.mnt = mnt
        os.makedirs(mnt, exist_ok=True)
        subprocess.run([exe, "-s", "-o", f"source={source},xattr,default_permissions,"
                        "cache=always", mnt], check=True, preexec_fn=most_files)
        for _ in range(100):
            if os.path.ismount(mnt):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{NAME} did not mount {mnt}")

    def stop(self):
        subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
