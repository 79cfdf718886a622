# SPDX-License-Identifier: LGPL-2.1-or-later
"""linklib: a slow network link on this machine, for the fuse tests and the
benchmarks.  A loopback sshd (view-sshfs.py's) behind link-relay.py, which
adds a one-way delay each way, and sshfs mounted through the relay: the
sshfs mount is then a server DELAY_MS x 2 of round trip away, usable as a
volume's Backing= or read directly as the plain-sshfs baseline.

The link is cut by freezing the relay (silent, as dropped packets: calls
hang, nothing is refused) and restored by thawing it."""
import atexit
import importlib.util
import os
import signal
import socket
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RELAY = os.path.join(HERE, "link-relay.py")

_spec = importlib.util.spec_from_file_location("view_sshfs", os.path.join(HERE, "view-sshfs.py"))
view_sshfs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(view_sshfs)

# What a user would mount over a WAN: sshfs's own caches on, reconnecting.
SSHFS_OPTIONS = "reconnect,ServerAliveInterval=5,ServerAliveCountMax=3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Link:
    """A server directory top/server reached over the slow link at mnt."""

    def __init__(self, top, mnt, delay_ms=5.0, sshfs_options=SSHFS_OPTIONS):
        self.top, self.mnt, self.delay_ms = top, mnt, delay_ms
        self.server = os.path.join(top, "server")
        os.makedirs(self.server, exist_ok=True)
        os.makedirs(mnt, exist_ok=True)
        self.sshd_port, self.relay_port = free_port(), free_port()
        self.sshd, self.keydir = view_sshfs.start_sshd(top, self.sshd_port)
        self.relay = None
        self.cut_now = False
        self.start_relay()
        r = view_sshfs.mount_sshfs(self.server, mnt, self.keydir, sshfs_options, self.relay_port)
        if r.returncode != 0:
            self.close()
            view_sshfs.skip("sshfs mount through the relay failed: " + r.stderr.strip())
        atexit.register(self.close)

    def start_relay(self):
        self.relay = subprocess.Popen(["/usr/bin/python3", RELAY, str(self.relay_port),
                                       str(self.sshd_port), str(self.delay_ms)],
                                      stdout=subprocess.PIPE, text=True)
        if self.relay.stdout.readline().strip() != "ready":
            raise RuntimeError("link-relay did not start")

    def stop_relay(self):
        """Cuts the link with resets: the relay goes (start_relay brings it back)."""
        if self.relay:
            self.relay.send_signal(signal.SIGCONT)
            self.relay.kill()
            self.relay.wait()
            self.relay = None

    def cut(self):
        """Cuts the link silently: calls in flight and new ones hang."""
        self.relay.send_signal(signal.SIGSTOP)
        self.cut_now = True

    def restore(self):
        self.relay.send_signal(signal.SIGCONT)
        self.cut_now = False

    def rtt_ms(self, n=5):
        """Median time of n stat calls that must reach the server (a fresh
        name each: no cache can answer)."""
        times = []
        for i in range(n):
            t = time.perf_counter()
            try:
                os.stat(os.path.join(self.mnt, f".rtt-probe-{os.getpid()}-{time.time_ns()}-{i}"))
            except FileNotFoundError:
                pass
            times.append((time.perf_counter() - t) * 1000)
        return sorted(times)[n // 2]

    def close(self):
        if self.relay:
            self.relay.send_signal(signal.SIGCONT)
        subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
        self.stop_relay()
        if self.sshd:
            self.sshd.kill()
            self.sshd.wait()
            self.sshd = None


def volume_over_link(vol, delay_ms=5.0, sshfs_options=SSHFS_OPTIONS):
    """Mounts vol's Backing= as sshfs over a slow link (before vol.start());
    the Link.  On exit the volume stops before the link goes."""
    link = Link(vol.top, vol.backing, delay_ms, sshfs_options)
    atexit.register(lambda: (vol.stop(), link.close()))
    return link
