#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The view over a real network filesystem: Backing is an sshfs mount of a
loopback sshd (nodes whose FUSE file handle goes stale re-resolve by parent
and name).  Runs a POSIX subset, store validity and a kill -9 takeover; and when
the server goes away, cached files keep serving from the store instead of
looking deleted or empty."""
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import (RENAME_EXCHANGE, Volume, check, eq, finish, rand_bytes, read_direct,  # noqa: E402
                     read_file, renameat2, require_root_fuse, skip, wait_for, write_file)

PORT = 22000 + os.getpid() % 1000


def start_sshd(top, port=PORT):
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.access(sshd, os.X_OK) or not shutil.which("sshfs"):
        skip("needs openssh-server (sshd) and sshfs")
    keydir = os.path.join(top, "ssh")
    os.makedirs(keydir)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(keydir, "host")],
                   check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(keydir, "id")],
                   check=True)
    auth = os.path.join(keydir, "authorized_keys")
    shutil.copy(os.path.join(keydir, "id.pub"), auth)
    os.chmod(auth, 0o600)
    conf = os.path.join(keydir, "sshd_config")
    with open(conf, "w") as f:
        f.write(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keydir}/host\n"
                f"AuthorizedKeysFile {auth}\nPasswordAuthentication no\nPermitRootLogin yes\n"
                f"StrictModes no\nUsePAM no\nPidFile {keydir}/sshd.pid\n"
                "Subsystem sftp internal-sftp\n")
    os.makedirs("/run/sshd", exist_ok=True)
    p = subprocess.Popen([sshd, "-D", "-e", "-f", conf], stderr=open(os.path.join(keydir, "log"), "w"))
    time.sleep(0.5)
    if p.poll() is not None:
        skip("sshd did not start: " + open(os.path.join(keydir, "log")).read()[-300:])
    return p, keydir


def mount_sshfs(server_dir, mnt, keydir, options, port=PORT):
    """sshfs of server_dir over the loopback sshd (or a relay to it) on port at mnt
    (-o allow_other and OPTIONS); the completed process, for its return code and stderr."""
    return subprocess.run(["sshfs", f"root@127.0.0.1:{server_dir}", mnt, "-p", str(port),
                           "-o", f"IdentityFile={keydir}/id,StrictHostKeyChecking=no,"
                           f"UserKnownHostsFile=/dev/null,allow_other,{options}"],
                          capture_output=True, text=True, timeout=30)


def main():
    require_root_fuse()
    vol = Volume("sshfs", lease="2s")
    server_dir = os.path.join(vol.top, "server")
    os.makedirs(server_dir)
    sshd, keydir = start_sshd(vol.top)
    sshfs_mnt = vol.backing
    r = mount_sshfs(server_dir, sshfs_mnt, keydir,
                    "reconnect,ServerAliveInterval=1,ServerAliveCountMax=2,cache=no")
    if r.returncode != 0:
        sshd.kill()
        skip("sshfs mount failed: " + r.stderr.strip())

    def cleanup():
        vol.stop()
        subprocess.run(["fusermount3", "-u", "-z", sshfs_mnt], capture_output=True)
        sshd.kill()
        sshd.wait()
    try:
        vol.start()
        fh = vol.state()["file_handles"]
        check(fh in ("yes", "no"), f"the view serves sshfs (file handles: {fh}; nodes whose handle"
              " goes stale re-resolve by parent and name)")
        # POSIX subset through view -> sshfs -> sftp -> the server directory
        write_file(vol.v("a"), b"alpha")
        eq(read_file(os.path.join(server_dir, "a")), b"alpha", "create+write reach the server")
        os.mkdir(vol.v("d"))
        os.rename(vol.v("a"), vol.v("d", "a2"))
        eq(sorted(os.listdir(vol.v("d"))), ["a2"], "mkdir, rename")
        os.symlink("a2", vol.v("d", "ln"))
        eq((os.readlink(vol.v("d", "ln")), read_file(vol.v("d", "ln"))), ("a2", b"alpha"),
           "symlink, readlink")
        os.chmod(vol.v("d", "a2"), 0o640)
        eq(oct(os.stat(os.path.join(server_dir, "d", "a2")).st_mode & 0o777), "0o640", "chmod")
        os.truncate(vol.v("d", "a2"), 2)
        eq(read_file(vol.v("d", "a2")), b"al", "truncate")
        with open(vol.v("d", "a2"), "ab") as f:
            f.write(b"+more")
        eq(read_file(os.path.join(server_dir, "d", "a2")), b"al+more", "append")
        os.utime(vol.v("d", "a2"), (1000000000, 1100000000))
        eq(int(os.stat(os.path.join(server_dir, "d", "a2")).st_mtime), 1100000000, "utimens")
        write_file(vol.v("b"), b"B")
        try:
            renameat2(vol.v("b"), vol.v("d", "a2"), RENAME_EXCHANGE)
            ex = "ok"
        except OSError as e:
            ex = e.errno
        eq(ex, sshfs_rename_exchange_errno(), "RENAME_EXCHANGE comes out as sshfs gives it")
        os.unlink(vol.v("d", "ln"))
        os.unlink(vol.v("d", "a2"))
        os.rmdir(vol.v("d"))
        check(not os.path.exists(os.path.join(server_dir, "d")), "unlink, rmdir")
        # deep path on the network filesystem
        p = vol.mnt
        for i in range(12):
            p = os.path.join(p, "n" * 200)
            os.mkdir(p)
        write_file(os.path.join(p, "leaf"), b"deep")
        eq(read_file(os.path.join(p, "leaf")), b"deep", f"deep path of {len(p)} bytes")
        # store validity
        data = rand_bytes(2 * 1024 * 1024, 7)
        write_file(os.path.join(server_dir, "big"), data)
        time.sleep(2.5)
        eq(read_file(vol.v("big")), data, "a file written on the server reads through the view")
        eq(vol.ctl("query cached", "big")["cached"], "complete", "and is in the store")
        with open(os.path.join(server_dir, "big"), "r+b") as f:
            f.write(b"CHANGED")
        eq(read_direct(vol.v("big"), 0, 7), data[:7], "within the lease the store copy is served")
        time.sleep(2.5)
        eq(read_direct(vol.v("big"), 0, 7), b"CHANGED", "after the lease the server's change is seen")
        # kill -9 of the worker: an open file keeps working on the new worker
        fd = os.open(vol.v("big"), os.O_RDONLY)
        old = vol.kill_worker()
        vol.wait_new_worker(old)
        eq(os.pread(fd, 7, 0), b"CHANGED", "a file open across kill -9 reads on (sshfs backing)")
        os.close(fd)
        eq(read_file(vol.v("big"))[7:], data[7:], "content after takeover")
        # the server goes away: cached content keeps serving, nothing looks deleted or empty
        sshd.send_signal(signal.SIGSTOP)
        for p2 in subprocess.run(["pgrep", "-f", "sshd.*" + keydir], capture_output=True,
                                 text=True).stdout.split():
            try:
                os.kill(int(p2), signal.SIGSTOP)
            except ProcessLookupError:
                pass
        t0 = time.time()
        fd = os.open(vol.v("big"), os.O_RDONLY | os.O_DIRECT)
        got = os.pread(fd, 7, 0)
        os.close(fd)
        eq(got, b"CHANGED", f"with the server stopped a cached file is served ({time.time() - t0:.1f}s)")
        for p2 in subprocess.run(["pgrep", "-f", "sshd.*" + keydir], capture_output=True,
                                 text=True).stdout.split():
            try:
                os.kill(int(p2), signal.SIGCONT)
            except ProcessLookupError:
                pass
        sshd.send_signal(signal.SIGCONT)
        remounted_offline(keydir)
        cached_across_a_remount(keydir)
        read_while_renumbered(keydir)
        taken_over_renumbered(keydir)
        open_file_renamed_offline(keydir)
        other_share_refused(keydir)
    finally:
        cleanup()
    finish()


def mount_at_backing(vol, server, keydir, what):
    """sshfs of server at vol's Backing=, what was mounted there unmounted
    (lazily: the view holds it)."""
    if os.path.ismount(vol.backing):
        subprocess.run(["umount", "-l", vol.backing], check=True)
    r = mount_sshfs(server, vol.backing, keydir, "reconnect,ServerAliveInterval=1,"
                    "ServerAliveCountMax=2")
    check(r.returncode == 0, f"{what}: sshfs of {os.path.basename(server)} mounted"
          f" ({r.stderr.strip()})")


def pinned_over_sshfs(vol, server, keydir, what):
    """vol started over sshfs of server, its directory proj pinned."""
    mount_at_backing(vol, server, keydir, what)
    vol.start()
    vol.ctl("pin recursive", "proj")


def other_share_refused(keydir):
    """FUSE gives every mount filesystem id 0 and sshfs numbers the root 1,
    so only the mount's source tells one share from another.  Offline, an
    edit; then another directory's sshfs mounted at Backing=: a reconnect
    is refused saying where it is mounted from, the volume stays offline
    and that share is untouched; the volume's share mounted again: the
    reconnect puts the edit there (before: the edit was replayed onto the
    other share)."""
    vol = Volume("sshfs-other", lease="2s")
    server, other = os.path.join(vol.top, "server"), os.path.join(vol.top, "other")
    for d in (server, other):
        os.makedirs(os.path.join(d, "proj"))
        write_file(os.path.join(d, "proj", "f"), b"%s\n" % os.path.basename(d).encode())
    try:
        pinned_over_sshfs(vol, server, keydir, "other share")
        idf = os.path.join(vol.cache, "backing.id")
        check(f"source=root@127.0.0.1:{server}\n" in open(idf).read(),
              f"other share: backing.id records the mount's source ({open(idf).read()!r})")
        # As an fcache-view that recorded no source left it: recorded at the next reconnect.
        with open(idf) as f:
            old = "".join(line for line in f if not line.startswith("source="))
        with open(idf, "w") as f:
            f.write(old)
        eq(vol.ctl("disconnect")["state"], "offline", "other share: disconnect")
        eq(vol.ctl("reconnect")["state"], "online", "other share: a backing.id without a source")
        check("source=" in open(idf).read(), "... takes the source at the reconnect")
        eq(vol.ctl("disconnect")["state"], "offline", "other share: disconnect")
        with open(vol.v("proj", "f"), "ab") as f:
            f.write(b"offline edit\n")
        mount_at_backing(vol, other, keydir, "other share")
        q = vol.ctl("reconnect", ok=False)
        check(q["_rc"] != 0 and "mounted from" in q["_err"] and other in q["_err"],
              f"other share: the reconnect is refused, saying where it is mounted from"
              f" ({q['_err']})")
        eq(vol.state()["state"], "offline", "other share: the volume stays offline")
        eq(read_file(os.path.join(other, "proj", "f")), b"other\n",
           "other share: nothing replayed onto it")
        eq(read_file(vol.v("proj", "f")), b"server\noffline edit\n",
           "other share: the view serves its own copy")
        mount_at_backing(vol, server, keydir, "other share")
        check(wait_reconnected(vol), "other share: back online with the volume's share")
        eq(read_file(os.path.join(server, "proj", "f")), b"server\noffline edit\n",
           "other share: the edit on the volume's share")
    finally:
        vol.stop()
        subprocess.run(["fusermount3", "-u", "-z", vol.backing], capture_output=True)


def wait_reconnected(vol, timeout=60):
    """A reconnect refused leaves the volume probing: it returns by itself,
    or a reconnect by hand brings it."""
    end = time.time() + timeout
    while time.time() < end:
        if vol.state()["state"] == "online":
            return True
        vol.ctl("reconnect", ok=False)
        time.sleep(0.2)
    return False


def sshfs_pid(mnt):
    """The sshfs process serving mnt: the newest one, an sshfs unmounted
    lazily may still run beside it."""
    return int(subprocess.run(["pgrep", "-n", "-f", f"^sshfs .* {mnt} "], capture_output=True,
                              text=True).stdout.split()[0])


def sshfs_read_bytes(mnt):
    """What the sshfs process serving mnt has read (its rchar: the sftp
    connection's bytes, file contents among them)."""
    with open(f"/proc/{sshfs_pid(mnt)}/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def remounted_offline(keydir):
    """sshfs makes its inode numbers up as it meets files (the root 1), so
    mounted again it gives the same files other numbers.  Offline changes
    to a pinned tree (an edit, a chmod, a utime then a rename, a rename,
    an unlink, a rename over another file, a create), sshfs mounted again and its files met in another
    order, then a reconnect: every change on the server, no conflict, and
    the resync and the pin walk take the pinned files the mirror has as
    they are (not read again)
    (before: the chmod, the utime and the unlink were conflicts, \"the
    server removed the object\", and the rename after the utime held)."""
    vol = Volume("sshfs-remount", lease="2s")
    server = os.path.join(vol.top, "server")
    os.makedirs(os.path.join(server, "proj"))
    for i in range(7):
        write_file(os.path.join(server, "proj", f"f{i}"), b"server %d\n" % i)
    big = rand_bytes(4 << 20, 11)
    write_file(os.path.join(server, "proj", "big"), big)
    try:
        pinned_over_sshfs(vol, server, keydir, "remount")
        before = os.stat(os.path.join(vol.backing, "proj", "f1")).st_ino
        eq(vol.ctl("disconnect")["state"], "offline", "remount: disconnect")
        m = lambda *p: vol.v("proj", *p)          # noqa: E731
        with open(m("f1"), "ab") as f:
            f.write(b"offline edit\n")
        os.chmod(m("f4"), 0o600)
        os.utime(m("f0"), (1000000, 1000000))
        os.rename(m("f0"), m("f0-moved"))
        os.rename(m("f2"), m("f2-renamed"))
        os.unlink(m("f3"))
        os.replace(m("f5"), m("f6"))
        write_file(m("new"), b"new\n")
        mount_at_backing(vol, server, keydir, "remount")
        for i in (6, 4, 3, 5, 0, 2):
            os.stat(os.path.join(vol.backing, "proj", f"f{i}"))
        after = os.stat(os.path.join(vol.backing, "proj", "f1")).st_ino
        check(after != before, f"remount: sshfs gave f1 another inode number ({before} -> {after})")
        read_before = sshfs_read_bytes(vol.backing)
        q = vol.ctl("reconnect", ok=False)
        vol.ctl("pin recursive", "proj")     # what the hoard walk does
        read = sshfs_read_bytes(vol.backing) - read_before
        check(read < len(big) // 2, f"remount: the reconnect's resync and a pin walk take the"
              f" pinned files the mirror has as they are, reading none again (sshfs read {read}"
              f" bytes; big is {len(big)})")
        eq((q["_rc"], q.get("conflicts")), (0, "0"), f"remount: reconnect without conflict"
           f" ({q['_err']}{vol.ctl('query conflicts')['_lines']})")
        s = lambda *p: os.path.join(server, "proj", *p)  # noqa: E731
        eq(sorted(os.listdir(s())), ["big", "f0-moved", "f1", "f2-renamed", "f4", "f6", "new"],
           "remount: the server has the renames, the unlink and the create")
        eq(read_file(s("f6")), b"server 5\n", "remount: the rename over another file")
        def attr(f, *p):
            try:
                return f(s(*p))
            except OSError as e:
                return e.strerror
        eq((attr(read_file, "f1"), attr(lambda p: os.stat(p).st_mode & 0o777, "f4"),
            attr(lambda p: int(os.stat(p).st_mtime), "f0-moved"), attr(read_file, "new")),
           (b"server 1\noffline edit\n", 0o600, 1000000, b"new\n"),
           "remount: the edit, the chmod, the utime and the new file on the server")
    finally:
        vol.stop()
        subprocess.run(["fusermount3", "-u", "-z", vol.backing], capture_output=True)


def cached_across_a_remount(keydir):
    """Two files of one size and one mtime read whole online (copies in the
    store, by sshfs's inode numbers), the volume stopped, sshfs mounted
    again and the files met in the other order, so that the numbers name
    other files than they did, the volume started: each file, and a pinned
    one, reads its own bytes (before: c2 read another file's copy of the
    same number, size and times, and the pinned file another's too).  The
    same with the volume offline across the remount and a reconnect; and
    the pinned file is found again by name by the hoard walk the start
    makes at once (or the reconnect's resync), not read again."""
    vol = Volume("sshfs-cached", lease="2s")
    server = os.path.join(vol.top, "server")
    os.makedirs(os.path.join(server, "proj"))
    os.makedirs(os.path.join(server, "other"))
    big = rand_bytes(4 << 20, 12)
    write_file(os.path.join(server, "proj", "big"), big)
    data = {n: rand_bytes(64 << 10, 20 + i) for i, n in enumerate(("c1", "c2"))}
    for n, d in data.items():
        write_file(os.path.join(server, "other", n), d)
        os.utime(os.path.join(server, "other", n), (1700000000, 1700000000))
    try:
        def meet(*order):
            """sshfs numbers the files in the order they are first stat-ed."""
            return [os.stat(os.path.join(vol.backing, "other", n)).st_ino for n in order]

        pinned_over_sshfs(vol, server, keydir, "cached")
        for what, offline in (("restart", False), ("reconnect", True)):
            before = meet("c1", "c2")
            for n in ("c1", "c2"):
                eq(read_file(vol.v("other", n)), data[n], f"cached, {what}: {n} read whole")
            check(wait_for(lambda: all(vol.ctl("query cached", f"other/{n}")["cached"] ==
                                       "complete" for n in data)),
                  f"cached, {what}: their copies are complete")
            if offline:
                eq(vol.ctl("disconnect")["state"], "offline", f"cached, {what}: disconnect")
            else:
                vol.stop()
            mount_at_backing(vol, server, keydir, "cached")
            after = meet("c2", "c1")
            check(after != before, f"cached, {what}: sshfs numbered the files anew ({before} ->"
                  f" {after})")
            read_before = sshfs_read_bytes(vol.backing)
            if offline:
                q = vol.ctl("reconnect", ok=False)
                eq((q["_rc"], q.get("state")), (0, "online"), f"cached, {what}: reconnect"
                   f" ({q['_err']})")
            else:
                vol.start()
            got = {n: read_direct(vol.v("other", n)) == d for n, d in data.items()}
            eq(got, {"c1": True, "c2": True}, f"cached, {what}: each file reads its own bytes")
            check(wait_for(lambda: vol.ctl("query cached", "proj/big")["cached"] == "complete"),
                  f"cached, {what}: the pinned file's copy is found again (the hoard walk at"
                  f" start, the reconnect's resync)")
            eq(read_direct(vol.v("proj", "big")), big, f"cached, {what}: the pinned file reads")
            read = sshfs_read_bytes(vol.backing) - read_before
            check(read < len(big) // 2, f"cached, {what}: the pinned file is found again by"
                  f" name, not read again (sshfs read {read} bytes; it is {len(big)})")
    finally:
        vol.stop()
        subprocess.run(["fusermount3", "-u", "-z", vol.backing], capture_output=True)


def read_while_renumbered(keydir):
    """sshfs mounted again under a running worker (offline, then a
    reconnect), its files met in the other order, so that each number names
    another file of the same size and times: files read whole (containers)
    and in part (blocks) and pinned ones, read while the reconnect's resync
    is held before its check of the cached files, then after it, each read
    their own bytes, and the pinned files are marked pinned again by their
    new numbers (before: in the window a cached file read the other's copy,
    and a file read in part the other's blocks, after the resync too)."""
    vol = Volume("sshfs-renumbered", lease="2s")
    server = os.path.join(vol.top, "server")
    gate = os.path.join(vol.top, "check-gate")
    for d in ("proj", "other"):
        os.makedirs(os.path.join(server, d))
    data = {}
    for i, (d, n, size) in enumerate((("proj", "p1", 64 << 10), ("proj", "p2", 64 << 10),
                                      ("other", "c1", 64 << 10), ("other", "c2", 64 << 10),
                                      ("other", "b1", 512 << 10), ("other", "b2", 512 << 10))):
        data[n] = rand_bytes(size, 40 + i)
        write_file(os.path.join(server, d, n), data[n])
        os.utime(os.path.join(server, d, n), (1700000000, 1700000000))
    where = {n: "proj" if n.startswith("p") else "other" for n in data}
    order = ["p1", "p2", "c1", "c2", "b1", "b2"]
    os.environ["FCACHE_FAULT_PAUSE"] = f"view-check-cached:{gate}"
    try:
        def meet(names):
            """sshfs numbers the files in the order they are first stat-ed."""
            return {n: os.stat(os.path.join(vol.backing, where[n], n)).st_ino for n in names}

        mount_at_backing(vol, server, keydir, "renumbered")
        before = meet(order)
        vol.start()
        vol.ctl("pin recursive", "proj")
        for n in ("c1", "c2"):
            eq(read_direct(vol.v("other", n)), data[n], f"renumbered: {n} read whole")
        for n in ("b1", "b2"):
            eq(read_direct(vol.v("other", n), 0, 128 << 10), data[n][:128 << 10],
               f"renumbered: {n} read in part")
        check(wait_for(lambda: all(vol.ctl("query cached", f"other/{n}")["cached"] == "complete"
                                   for n in ("c1", "c2"))), "renumbered: c1 and c2 cached whole")
        eq(vol.ctl("disconnect")["state"], "offline", "renumbered: disconnect")
        mount_at_backing(vol, server, keydir, "renumbered")
        after = meet(["p2", "p1", "c2", "c1", "b2", "b1"])
        swapped = {a: b for a, b in (("p1", "p2"), ("c1", "c2"), ("b1", "b2"))}
        swapped.update({b: a for a, b in swapped.items()})
        eq({n: after[n] == before[swapped[n]] for n in order}, {n: True for n in order},
           f"renumbered: each file has its partner's old number ({before} -> {after})")

        def all_read(when):
            got = {n: read_direct(vol.v(where[n], n)) == data[n] for n in order}
            eq(got, {n: True for n in order}, f"renumbered: {when}, each file reads its own"
               " bytes")

        open(gate, "w").close()
        done = {}
        t = threading.Thread(target=lambda: done.update(q=vol.ctl("reconnect", ok=False)))
        t.start()
        reached = wait_for(lambda: os.path.exists(gate + ".reached"), 120)
        check(reached, "renumbered: the resync reaches its check of the cached files")
        if reached:
            all_read("during the resync")
        os.unlink(gate)
        t.join(120)
        q = done.get("q", {})
        eq((q.get("_rc"), q.get("state")), (0, "online"), f"renumbered: reconnect"
           f" ({q.get('_err')})")
        all_read("after the resync")
        check(wait_for(lambda: all(vol.ctl("query cached", f"proj/{n}")["pinned"] == "yes"
                                   for n in ("p1", "p2"))),
              "renumbered: the pinned files are marked pinned by their new numbers"
              f" ({[vol.ctl('query cached', f'proj/{n}') for n in ('p1', 'p2')]})")
        check("rows of the old ones dropped" in vol.log_bytes(0).decode(errors="replace"),
              "renumbered: the rows of the old numbers the resync did not confirm are dropped")
    finally:
        del os.environ["FCACHE_FAULT_PAUSE"]
        if os.path.exists(gate):
            os.unlink(gate)
        vol.stop()
        subprocess.run(["fusermount3", "-u", "-z", vol.backing], capture_output=True)


def taken_over_renumbered(keydir):
    """sshfs mounted again under a running worker, online, its files met in
    the other order (each has its partner's old number), then the worker
    killed: the successor takes the kernel's nodes over on the new mount.
    Within the lease (60 s) the kernel opens them by node: each file, one
    in a subdirectory and a file made after the takeover read their own
    bytes, and a file written through its old node lands in that file on
    the server (before: a node was found again by its old mount's handle,
    which opens the file that has that number now)."""
    vol = Volume("sshfs-takeover", lease="60s")
    server = os.path.join(vol.top, "server")
    os.makedirs(os.path.join(server, "d1", "sub"))
    os.makedirs(os.path.join(server, "d2", "sub"))
    data = {}
    names = ["d1/a", "d1/b", "d1/sub/c", "d2/a", "d2/b", "d2/sub/c"]
    for i, n in enumerate(names):
        data[n] = rand_bytes(4096, 60 + i)
        write_file(os.path.join(server, n), data[n])
        os.utime(os.path.join(server, n), (1700000000, 1700000000))
    try:
        mount_at_backing(vol, server, keydir, "takeover")
        vol.start()
        for n in names:
            eq(read_direct(vol.v(n)), data[n], f"takeover: {n} read")
        mount_at_backing(vol, server, keydir, "takeover")
        # Met in another order: the numbers go to other files.
        for n in reversed(["d1", "d2", "d1/sub", "d2/sub"] + names):
            os.stat(os.path.join(vol.backing, n))
        old = vol.kill_worker()
        vol.wait_new_worker(old)
        got = {}
        for n in names:
            try:
                got[n] = read_direct(vol.v(n)) == data[n]
            except OSError as e:
                got[n] = e.strerror
        eq(got, {n: True for n in names}, "takeover: each file reads its own bytes through"
           " the node the kernel kept")
        with open(vol.v("d2", "b"), "ab") as f:
            f.write(b"appended\n")
        eq(read_file(os.path.join(server, "d2", "b")), data["d2/b"] + b"appended\n",
           "takeover: an append through a kept node is on the server in that file")
        eq([read_file(os.path.join(server, n)) == data[n] for n in names if n != "d2/b"],
           [True] * (len(names) - 1), "takeover: no other file changed on the server")
        write_file(vol.v("d1", "sub", "new"), b"new\n")
        eq(read_file(os.path.join(server, "d1", "sub", "new")), b"new\n",
           "takeover: a file made in a kept directory is on the server there")
    finally:
        vol.stop()
        subprocess.run(["fusermount3", "-u", "-z", vol.backing], capture_output=True)


def open_file_renamed_offline(keydir):
    """A file held open for writing from online on, renamed out of its
    directory offline and the directory removed: the reconnect replays
    both without conflict, the server has no entry left in the old place
    (sshfs has no RENAME_NOREPLACE; before, the replay linked the new name
    and unlinked the old one, which sshfs, with the file open, kept as
    .fuse_hidden*: the rmdir then found it, a conflict), and the writes
    made through the open file before and after the reconnect are in it."""
    vol = Volume("sshfs-open-renamed", lease="2s")
    server = os.path.join(vol.top, "server")
    os.makedirs(os.path.join(server, "proj", "sub"))
    write_file(os.path.join(server, "proj", "sub", "f"), b"server\n")
    try:
        pinned_over_sshfs(vol, server, keydir, "open renamed")
        fd = os.open(vol.v("proj", "sub", "f"), os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"online\n")
            eq(vol.ctl("disconnect")["state"], "offline", "open renamed: disconnect")
            os.rename(vol.v("proj", "sub", "f"), vol.v("proj", "f2"))
            os.rmdir(vol.v("proj", "sub"))
            os.write(fd, b"offline\n")
            os.fsync(fd)
            q = vol.ctl("reconnect", ok=False)
            eq((q["_rc"], q.get("conflicts")), (0, "0"), f"open renamed: reconnect without"
               f" conflict ({q['_err']}{vol.ctl('query conflicts')['_lines']})")
            eq(sorted(os.listdir(os.path.join(server, "proj"))), ["f2"],
               "open renamed: the server has the new name only, the directory gone")
            os.write(fd, b"after\n")
        finally:
            os.close(fd)
        check(wait_for(lambda: read_file(os.path.join(server, "proj", "f2")) ==
                       b"server\nonline\noffline\nafter\n"),
              f"open renamed: every write in the file on the server"
              f" ({read_file(os.path.join(server, 'proj', 'f2'))!r})")
    finally:
        vol.stop()
        subprocess.run(["fusermount3", "-u", "-z", vol.backing], capture_output=True)


def sshfs_rename_exchange_errno():
    import errno
    return errno.EINVAL


if __name__ == "__main__":
    main()
