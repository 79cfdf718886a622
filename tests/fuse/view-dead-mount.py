#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The backing's mount dies (sshfs killed, as when its ssh connection
drops without -o reconnect): every call to it fails at once with ENOTCONN,
no call hangs.  That error means the server is gone, not that the object
is: the volume goes offline by itself (its reason names the error), and
applications never see ENOTCONN or EIO for what the volume has.

  - with an application using the volume: its first call after the death
    is answered from the local copy (a read of a pinned file, a create);
  - with nobody using it: the background probe takes it offline;
  - the share mounted again at Backing=: the volume reconnects by itself
    and the server has the changes made meanwhile, no conflict.
"""
import importlib.util
import os
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (Volume, check, eq, finish, read_file, require_root_fuse, skip,  # noqa: E402
                     wait_for, write_file)

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 2


def load_sshfs_helpers():
    spec = importlib.util.spec_from_file_location("view_sshfs", os.path.join(HERE, "view-sshfs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Share:
    """An sshfs mount of server_dir at mnt through a loopback sshd."""

    def __init__(self, top, server_dir, mnt):
        self.ssh = load_sshfs_helpers()
        self.server_dir, self.mnt = server_dir, mnt
        with socket.socket() as s:      # a free port of this machine's
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.sshd, self.keydir = self.ssh.start_sshd(top, port=self.port)

    def mount(self):
        r = self.ssh.mount_sshfs(self.server_dir, self.mnt, self.keydir, "cache=no",
                                 port=self.port)
        if r.returncode != 0:
            self.close()
            skip(f"sshfs mount failed: {r.stderr.strip()}")

    def kill(self):
        """Kills the sshfs process: its mount stays, dead (ENOTCONN)."""
        out = subprocess.run(["pgrep", "-f", f"^sshfs root@127.0.0.1:{self.server_dir} "],
                             capture_output=True, text=True).stdout.split()
        check(len(out) == 1, f"one sshfs process of the share ({out})")
        os.kill(int(out[0]), signal.SIGKILL)
        check(wait_for(lambda: not os.path.exists(f"/proc/{out[0]}"), 30), "sshfs is gone")
        try:
            os.stat(self.mnt)
            check(False, "the dead mount answers ENOTCONN")
        except OSError as e:
            eq(e.errno, 107, "the dead mount answers ENOTCONN")   # ENOTCONN

    def unmount(self):
        subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)

    def close(self):
        self.unmount()
        self.sshd.kill()
        self.sshd.wait()


def attempt(what, fn):
    """fn's result, or the error's name (never raised)."""
    try:
        return fn()
    except OSError as e:
        return f"error {os.strerror(e.errno)}"


def main():
    require_root_fuse()
    vol = Volume("dead-mount", lease="2s", extra=["--set", f"BackingTimeout={TIMEOUT}s"])
    server = os.path.join(vol.top, "server")
    os.makedirs(os.path.join(server, "proj"))
    write_file(os.path.join(server, "proj", "f"), b"pinned bytes\n")
    share = Share(vol.top, server, vol.backing)
    share.mount()
    try:
        vol.start()
        check(vol.ctl("pin recursive", "proj")["_rc"] == 0, "proj pinned over sshfs")

        # An application's calls right after the mount died.
        share.kill()
        eq(attempt("read", lambda: read_file(vol.v("proj", "f"))), b"pinned bytes\n",
           "a pinned file reads from the local copy (not ENOTCONN)")

        def create():
            write_file(vol.v("proj", "made-while-dead"), b"made while the mount was dead\n")
            return "made"
        eq(attempt("create", create), "made", "a create is made offline (not ENOTCONN)")
        st = vol.state()
        eq(st["state"], "offline", "the volume went offline by itself")
        check("ENOTCONN" in st.get("offline_reason", ""),
              f"its reason names the error ({st.get('offline_reason')})")

        # Mounted again: the volume comes back by itself, the create shipped.
        share.unmount()
        share.mount()
        check(wait_for(lambda: vol.state()["state"] == "online", 120),
              "with the share mounted again the volume reconnects by itself")
        eq(read_file(os.path.join(server, "proj", "made-while-dead")),
           b"made while the mount was dead\n", "the server has the create")
        eq(vol.ctl("query state").get("conflicts"), "0", "no conflict")

        # Nobody using the volume: the background probe notices.
        share.kill()
        check(wait_for(lambda: vol.state()["state"] == "offline", 60),
              "with nobody using it, the volume goes offline by itself")
        check("ENOTCONN" in vol.state().get("offline_reason", ""), "saying why")
        eq(read_file(vol.v("proj", "f")), b"pinned bytes\n", "the pinned file reads offline")
        share.unmount()
        share.mount()
        check(wait_for(lambda: vol.state()["state"] == "online", 120),
              "and reconnects by itself once mounted again")
    finally:
        vol.stop()
        share.close()
    finish()


if __name__ == "__main__":
    main()
