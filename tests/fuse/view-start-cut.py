#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A worker started while the server does not answer does not hang: the
link (linklib: sshfs through a relay) is cut silently, the worker is killed
with SIGKILL, and the holder's new worker, whose opening of Backing= hangs
on the cut link, comes up offline on its local copy with the reason in
`query state`; pinned files read as the server had them; an edit made then
is logged, and once the link is back the volume reconnects by itself (it
probes for the server) and the edit is on the server.  Also the same with
the worker started while Backing= is not mounted at all (the mountpoint
missing).  How long the new worker took to serve is reported, not asserted.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linklib  # noqa: E402
from viewlib import Volume, check, eq, finish, read_file, require_root_fuse, write_file  # noqa: E402

TIMEOUT_S = 2


def wait_state(vol, want, timeout):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if vol.state()["state"] == want:
                return True
        except (RuntimeError, KeyError):
            pass
        time.sleep(0.2)
    return False


def main():
    require_root_fuse()
    vol = Volume("startcut", lease="1s", extra=["--set", f"BackingTimeout={TIMEOUT_S}s"])
    link = linklib.volume_over_link(vol, 5)
    proj = os.path.join(link.server, "proj")
    os.makedirs(proj)
    files = {f"f{i}": (b"file %d\n" % i) * 100 for i in range(10)}
    for name, data in files.items():
        write_file(os.path.join(proj, name), data)
    vol.start()
    eq(vol.ctl("pin recursive", "proj").get("mirrored"), "yes", "pinned over the link")
    eq(vol.state()["state"], "online", "online before the cut")

    link.cut()
    old = vol.kill_worker()
    t0 = time.time()
    vol.wait_new_worker(old, timeout=120)
    took = time.time() - t0
    s = vol.state()
    print(f"# a new worker served {took:.1f} s after the kill (BackingTimeout {TIMEOUT_S} s)")
    eq(s["state"], "offline", "the new worker came up offline while the link is cut")
    check("did not answer within BackingTimeout" in s.get("offline_reason", ""),
          f"query state says why ({s.get('offline_reason')})")
    eq({n: read_file(vol.v("proj", n)) for n in files}, files,
       "pinned files read as the server had them")
    write_file(vol.v("proj", "f0"), b"edited while the link was cut\n")
    eq(read_file(vol.v("proj", "f0")), b"edited while the link was cut\n", "the edit reads back")
    check(int(vol.state().get("pending", "0")) >= 1, "the edit is logged")
    eq(vol.state()["state"], "offline", "still offline while the link is cut")

    link.restore()
    check(wait_state(vol, "online", 120), "once the link is back the volume reconnects by itself")
    eq(read_file(os.path.join(proj, "f0")), b"edited while the link was cut\n",
       "the edit made while cut is on the server")
    eq(read_file(vol.v("proj", "f1")), files["f1"], "the view serves the server again")
    check("offline_reason" not in vol.state(), "no offline reason once online")

    # Backing= not there at all: the mountpoint gone (an automount not made).
    vol.stop()
    link.close()
    os.rmdir(vol.backing)
    vol.start()
    s = vol.state()
    eq(s["state"], "offline", "a worker whose Backing= is missing starts offline")
    check("cannot open Backing" in s.get("offline_reason", ""),
          f"and says why ({s.get('offline_reason')})")
    eq(read_file(vol.v("proj", "f1")), files["f1"], "serving its local copy")
    vol.stop()
    os.makedirs(vol.backing, exist_ok=True)

    # A local Backing= moved away, the worker started on its local copy, the
    # directory back: the reconnect finds it, file handles and all.
    local = Volume("startgone", lease="1s")
    os.makedirs(local.b("p"))
    write_file(local.b("p", "a"), b"alpha\n")
    local.start()
    eq(local.ctl("pin recursive", "p").get("mirrored"), "yes", "a local volume pinned")
    had = local.state().get("file_handles")
    local.stop()
    os.rename(local.backing, local.backing + ".away")
    local.start()
    s = local.state()
    eq((s["state"], s.get("file_handles")), ("offline", "no"),
       "started with Backing= moved away: offline, no file handles yet")
    os.rename(local.backing + ".away", local.backing)
    eq(local.ctl("reconnect").get("state"), "online", "the directory back: reconnect")
    eq(local.state().get("file_handles"), had, f"file handles as at first ({had})")
    write_file(local.v("p", "b"), b"beta\n")
    eq(read_file(local.b("p", "b")), b"beta\n", "a file made then is on the backing")
    local.cleanup()
    finish()


if __name__ == "__main__":
    main()
