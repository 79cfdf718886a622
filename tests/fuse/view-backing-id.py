#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""An unmounted share is not a server on which everything was deleted.

The backing is a bind mount of a directory (the "share").  A pinned tree is
edited offline; then the share is unmounted, leaving its empty mountpoint as
Backing=.  A reconnect must refuse, saying why, and keep the volume offline
with every pinned file and every offline edit still served; a worker killed
and started again then starts offline on its local copy instead of serving
the empty directory.  Once the share is mounted again the reconnect goes
through and the offline edit reaches the share.  Last, the share goes away
under an online volume and its worker is killed: the successor starts
offline on its local copy, and comes back by itself once the share is.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, finish, read_file, require_root_fuse,  # noqa: E402
                     write_file)

require_root_fuse()
share = tempfile.mkdtemp(prefix="fcache-share-")
os.makedirs(os.path.join(share, "proj"))
for i in range(5):
    write_file(os.path.join(share, "proj", f"f{i}"), f"file {i}\n".encode())

vol = Volume("bid")
mounted = []


def mount_share():
    subprocess.run(["mount", "--bind", share, vol.backing], check=True)
    mounted.append(vol.backing)


def umount_share():
    subprocess.run(["umount", "-l", vol.backing], check=True)
    mounted.pop()


try:
    mount_share()
    vol.start()
    vol.ctl("pin recursive", "proj")
    vol.ctl("disconnect")
    eq(vol.state()["state"], "offline", "disconnected")
    write_file(vol.v("proj", "f1"), b"edited offline\n")
    write_file(vol.v("proj", "new"), b"made offline\n")

    umount_share()
    eq(sorted(os.listdir(vol.backing)), [], "the share's mountpoint is empty once unmounted")
    r = vol.ctl("reconnect", ok=False)
    check(r["_rc"] != 0 and "not" in r["_err"] and "Backing" in r["_err"],
          f"reconnect onto the empty mountpoint is refused, saying why ({r['_err']})")
    eq(vol.state()["state"], "offline", "the volume stays offline")
    eq(sorted(os.listdir(vol.v("proj"))), ["f0", "f1", "f2", "f3", "f4", "new"],
       "every pinned file and the offline one are still served")
    eq(read_file(vol.v("proj", "f1")), b"edited offline\n", "the offline edit is still there")
    eq(read_file(vol.v("proj", "f3")), b"file 3\n", "a pinned file still reads")

    # A successor (kill -9) that opens Backing= by path meets the empty directory.
    old = vol.kill_worker(signal.SIGKILL)
    vol.wait_new_worker(old)
    eq(vol.state()["state"], "offline", "a successor starts offline on its local copy")
    eq(read_file(vol.v("proj", "new")), b"made offline\n",
       "the successor serves the offline file")
    write_file(vol.v("proj", "f2"), b"edited by the successor's caller\n")

    mount_share()
    r = vol.ctl("reconnect", ok=False)
    eq(r["_rc"], 0, f"with the share mounted again, reconnect goes through ({r['_err']})")
    eq(vol.state()["state"], "online", "online again")
    eq(read_file(os.path.join(share, "proj", "f1")), b"edited offline\n",
       "the offline edit reached the share")
    eq(read_file(os.path.join(share, "proj", "f2")), b"edited by the successor's caller\n",
       "the successor's edit reached the share")
    eq(read_file(os.path.join(share, "proj", "new")), b"made offline\n",
       "the offline file reached the share")
    eq(read_file(os.path.join(share, "proj", "f4")), b"file 4\n", "nothing was deleted")

    # Online, the share goes away under a successor: it must not serve the empty directory.
    umount_share()
    old = vol.kill_worker(signal.SIGKILL)
    vol.wait_new_worker(old)
    eq(vol.state()["state"], "offline", "an online volume's successor starts offline too")
    eq(read_file(vol.v("proj", "f1")), b"edited offline\n", "and serves the pinned files")
    write_file(vol.v("proj", "f3"), b"edited while the share was away\n")
    mount_share()
    # It went offline by itself, so it probes for the share and comes back by itself.
    deadline = time.monotonic() + 120
    while vol.state()["state"] != "online" and time.monotonic() < deadline:
        time.sleep(0.2)
    eq(vol.state()["state"], "online", "the successor reconnects by itself once the share is back")
    eq(sorted(os.listdir(os.path.join(share, "proj"))), ["f0", "f1", "f2", "f3", "f4", "new"],
       "the share holds every file")
    eq(read_file(os.path.join(share, "proj", "f3")), b"edited while the share was away\n",
       "the edit made while the share was away reached it")

    # Backing= a directory inside the share: once unmounted, the path is gone (ENOENT).
    share2 = tempfile.mkdtemp(prefix="fcache-share2-")
    os.makedirs(os.path.join(share2, "sub", "docs"))
    write_file(os.path.join(share2, "sub", "docs", "a"), b"inside the share\n")
    point2 = tempfile.mkdtemp(prefix="fcache-point2-")
    subprocess.run(["mount", "--bind", share2, point2], check=True)
    mounted.append(point2)
    vol2 = Volume("bid2", backing=os.path.join(point2, "sub"))
    try:
        vol2.start()
        vol2.ctl("pin recursive", "docs")
        subprocess.run(["umount", "-l", point2], check=True)
        mounted.pop()
        check(not os.path.exists(vol2.backing), "the backing's path is gone with the share")
        old = vol2.kill_worker(signal.SIGKILL)
        vol2.wait_new_worker(old)
        eq(vol2.state()["state"], "offline", "a worker whose Backing= is gone starts offline")
        eq(read_file(vol2.v("docs", "a")), b"inside the share\n", "and serves the pinned file")
        write_file(vol2.v("docs", "b"), b"made while the share was away\n")
        subprocess.run(["mount", "--bind", share2, point2], check=True)
        mounted.append(point2)
        deadline = time.monotonic() + 120
        while vol2.state()["state"] != "online" and time.monotonic() < deadline:
            time.sleep(0.2)
        eq(vol2.state()["state"], "online", "it comes back by itself once the share is mounted")
        eq(read_file(os.path.join(share2, "sub", "docs", "b")),
           b"made while the share was away\n", "the offline file reached the share")
        eq(read_file(os.path.join(share2, "sub", "docs", "a")), b"inside the share\n",
           "nothing was deleted")
    finally:
        vol2.stop()
        if mounted and mounted[-1] == point2:
            subprocess.run(["umount", "-l", point2], capture_output=True)
            mounted.pop()
        vol2.cleanup()
        subprocess.run(["rm", "-rf", share2, point2])
finally:
    vol.stop()
    # The share must be unmounted before the volume's tree is removed.
    for m in reversed(mounted):
        subprocess.run(["umount", "-l", m], capture_output=True)
    vol.cleanup()
    subprocess.run(["rm", "-rf", share])
finish()
