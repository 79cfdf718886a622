#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A real application lives in the volume: git, online and offline.

A repository on the server is pinned; git commits to it through the view
online; then, disconnected, git commits, branches, merges, repacks and
collects garbage (every ref and log update is a "write X.lock, rename over
X", every pack a file written, renamed into place and read back), and
`git fsck --full --strict` is clean in the view while offline.  After the
reconnect the server's copy, read directly, is the same repository (same
refs, same HEAD, fsck clean) and the view agrees.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import Volume, eq, finish, require_root_fuse  # noqa: E402

GIT_ENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org",
               GIT_CONFIG_NOSYSTEM="1", HOME="/nonexistent", LC_ALL="C")


def git(repo, *args, ok=True):
    r = subprocess.run(["git", "-C", repo, "-c", "safe.directory=*", "-c", "gc.auto=0",
                        "-c", "init.defaultBranch=main"] + list(args),
                       env=GIT_ENV, capture_output=True, text=True, timeout=300)
    if ok and r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {repo}: {(r.stdout + r.stderr).strip()[:600]}")
    return r


def fsck(repo):
    r = git(repo, "fsck", "--full", "--strict", "--no-dangling", ok=False)
    return r.returncode, (r.stdout + r.stderr).strip()


def commit_files(repo, tag, n, size=3000, top="src"):
    for i in range(n):
        d = os.path.join(repo, f"{top}{i % 4}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.txt"), "a") as f:
            f.write((f"{tag} line {i}\n" * (size // 20 + 1))[:size])
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{tag}: {n} files")


def refs(repo):
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)").stdout
    return sorted(out.splitlines())


def main():
    require_root_fuse()
    vol = Volume("git", lease="1s")
    server = vol.b("proj")
    os.makedirs(server)
    git(server, "init", "-q")
    for k in range(3):
        commit_files(server, f"server {k}", 20)
    vol.start()
    view = vol.v("proj")

    # ---- online ----
    commit_files(view, "online", 10)
    eq(fsck(view)[0], 0, "online: git fsck clean in the view")
    eq(refs(view), refs(server), "online: the server has the view's refs")

    # Right after the reads of git fsck, which cache files whole into the
    # mirror while the pin makes the same directories there.
    eq(vol.ctl("pin recursive", "proj").get("mirrored"), "yes", "pin recursive: mirrored")
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect")

    # ---- offline ----
    for k in range(4):
        commit_files(view, f"offline {k}", 12)
    git(view, "branch", "feature")
    git(view, "checkout", "-q", "feature")
    commit_files(view, "feature", 8, size=9000, top="feature")
    git(view, "checkout", "-q", "main")
    commit_files(view, "main again", 5)
    git(view, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    git(view, "tag", "-a", "-m", "offline tag", "v1")
    git(view, "repack", "-q", "-a", "-d")
    git(view, "gc", "-q", "--prune=now")
    rc, text = fsck(view)
    eq(rc, 0, "offline: git fsck --full --strict clean after commits, a merge, repack and gc"
       + ("" if rc == 0 else f": {text[:400]}"))
    eq(git(view, "status", "--porcelain").stdout, "", "offline: the work tree is clean")
    log_offline = git(view, "log", "--format=%H", "--all").stdout.split()
    eq(len(log_offline), 11, "offline: history has every commit (3 + 1 + 4 + 2 + the merge)")
    refs_offline = refs(view)

    # ---- reconnect ----
    q = vol.ctl("reconnect")
    eq(vol.state()["state"], "online", "reconnect")
    eq(q.get("conflicts"), "0", "reconnect: no conflicts")
    rc, text = fsck(server)
    eq(rc, 0, "server: git fsck --full --strict clean after the reconnect"
       + ("" if rc == 0 else f": {text[:400]}"))
    eq(refs(server), refs_offline, "server: the refs made offline")
    eq(git(server, "log", "--format=%H", "--all").stdout.split(), log_offline,
       "server: the history made offline")
    eq(git(server, "status", "--porcelain").stdout, "", "server: the work tree is clean")
    eq(fsck(view)[0], 0, "view after reconnect: git fsck clean")
    eq(refs(view), refs_offline, "view after reconnect: the same refs")

    # ---- online again: the repository stays usable ----
    commit_files(view, "after", 3)
    eq(fsck(server)[0], 0, "server: fsck clean after a commit online again")
    finish()


if __name__ == "__main__":
    main()
