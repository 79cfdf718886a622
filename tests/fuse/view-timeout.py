#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A server that stops answering: Backing is an sshfs mount of a loopback
sshd, and the sshfs process is frozen (SIGSTOP), so every backing call
hangs in the kernel.  With BackingTimeout=2s no application waits much
longer than that: the view gives up on the backing, goes offline by itself
and serves the pinned subtree from its mirror; an open file keeps working.
When sshfs runs again (SIGCONT) the view notices by itself and reconnects;
so it does after a reconnect asked by hand that the frozen server refused.
"""
import importlib.util
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import Volume, check, eq, finish, read_file, require_root_fuse, skip, write_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("view_sshfs", os.path.join(HERE, "view-sshfs.py"))
view_sshfs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(view_sshfs)

BOUND = 2.0


def timed_read(path):
    """(bytes or None, seconds) of reading path in a child, killed after 30 s."""
    t = time.time()
    r = subprocess.run(["timeout", "30", "cat", path], capture_output=True)
    return (r.stdout if r.returncode == 0 else None), time.time() - t


def main():
    require_root_fuse()
    vol = Volume("timeout", lease="1s", extra=["--set", f"BackingTimeout={int(BOUND)}s"])
    server_dir = os.path.join(vol.top, "server")
    os.makedirs(os.path.join(server_dir, "proj"))
    for i in range(3):
        write_file(os.path.join(server_dir, "proj", f"f{i}"), b"file %d\n" % i * 1000)
    write_file(os.path.join(server_dir, "outside"), b"not pinned\n")
    sshd, keydir = view_sshfs.start_sshd(vol.top)
    sshfs_mnt = vol.backing
    r = view_sshfs.mount_sshfs(server_dir, sshfs_mnt, keydir, "cache=no")
    if r.returncode != 0:
        sshd.kill()
        skip("sshfs mount failed: " + r.stderr.strip())
    sshfs_pid = int(subprocess.run(["pgrep", "-f", f"^sshfs root@127.0.0.1:{server_dir} "],
                                   capture_output=True, text=True).stdout.split()[0])

    def cleanup():
        os.kill(sshfs_pid, signal.SIGCONT)
        vol.stop()
        subprocess.run(["fusermount3", "-u", "-z", sshfs_mnt], capture_output=True)
        sshd.kill()
        sshd.wait()
    try:
        vol.start()
        q = vol.ctl("pin recursive", "proj")
        eq(q.get("mirrored"), "yes", "the pinned subtree is mirrored (through sshfs)")
        held = os.open(vol.v("proj", "f1"), os.O_RDONLY | os.O_DIRECT)   # no page cache
        eq(os.pread(held, 4096, 0)[:5], b"file ", "a file held open before the server stops")

        os.kill(sshfs_pid, signal.SIGSTOP)     # every backing call now hangs
        time.sleep(1.5)                         # past the attribute lease: the kernel asks again
        data, took = timed_read(vol.v("proj", "f0"))
        eq(data, b"file 0\n" * 1000, "with the server frozen, a pinned file still reads")
        check(took < BOUND + 3, f"... within the bound: {took:.1f} s (BackingTimeout {BOUND:.0f} s)")
        eq(vol.state()["state"], "offline", "the view went offline by itself")
        check("did not answer within BackingTimeout" in vol.logtext(),
              "and its log says why")
        data, took = timed_read(vol.v("proj", "f2"))
        check(data == b"file 2\n" * 1000 and took < 2,
              f"offline now, reads are served at once ({took:.2f} s)")
        eq(os.pread(held, 4096, 4096)[:7], (b"file 1\n" * 1000)[4096:4103],
           "the file held open keeps reading (O_DIRECT: from the view, not the page cache)")
        eq(sorted(os.listdir(vol.v("proj"))), ["f0", "f1", "f2"], "the listing works offline")

        os.kill(sshfs_pid, signal.SIGCONT)     # the server answers again
        end = time.time() + 20
        while time.time() < end and vol.state()["state"] != "online":
            time.sleep(0.2)
        eq(vol.state()["state"], "online", "once the backing answers, the view reconnects by itself")
        write_file(vol.v("proj", "after"), b"after\n")
        eq(read_file(os.path.join(server_dir, "proj", "after")), b"after\n",
           "and writes reach the server again")
        os.close(held)

        # Disconnected by hand, then a reconnect asked while the server is
        # frozen: refused, and the volume reconnects once the server is back
        # (it was asked to; no second reconnect needed).
        vol.ctl("disconnect")
        os.kill(sshfs_pid, signal.SIGSTOP)
        r = vol.ctl("reconnect", ok=False, timeout=60)
        check(r["_rc"] != 0, f"a reconnect asked with the server frozen is refused ({r['_err']})")
        eq(vol.state()["state"], "offline", "the volume stays offline")
        os.kill(sshfs_pid, signal.SIGCONT)
        end = time.time() + 60
        while time.time() < end and vol.state()["state"] != "online":
            time.sleep(0.2)
        eq(vol.state()["state"], "online",
           "with the server back, the refused reconnect goes through by itself")
    finally:
        cleanup()
    finish()


if __name__ == "__main__":
    main()
