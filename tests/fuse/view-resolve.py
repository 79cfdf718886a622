# SPDX-License-Identifier: LGPL-2.1-or-later
"""view-resolve: conflicts kept by reintegration, settled through fcache-resolve.

offline-tool builds a real server tree and an offline log with the scripted
conflicts (c1 content, c2 edit-delete, c3 delete-edit, c4 mode, cc
create-create) and reintegrates it; a real fcache-view then serves that tree
(Backing) with that log (CacheDir/offline), and fcache-resolve settles each
conflict through the control socket.  Every outcome is checked in the backing
tree and through the mountpoint (after the mountpoint had read the files, so
stale store copies or kernel caches would show).
"""
import atexit
import base64
import json
import os
import pty
import re
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from viewlib import (CTL, VIEW, Volume, check, eq, finish, read_file,  # noqa: E402
                     read_or_none, require_root_fuse, skip)

HERE = os.path.dirname(os.path.abspath(VIEW))
TOOL = os.environ.get("FCACHE_OFFLINE_TOOL", os.path.join(HERE, "offline-tool"))
RESOLVE = os.environ.get("FCACHE_RESOLVE",
                         os.path.join(os.path.dirname(HERE), "cli", "fcache-resolve"))

require_root_fuse()
for p in (TOOL, RESOLVE):
    if not os.access(p, os.X_OK):
        skip(f"{p} is not built")


def initial(name):
    return "".join(f"{name} line {i}\n" for i in range(1, 10)).encode()


BASE_C1 = initial("c1")
LOCAL_C1 = BASE_C1.replace(b"c1 line 5", b"c1 line #")
REMOTE_C1 = BASE_C1.replace(b"c1 line 5", b"c1 line %")
LOCAL_C2 = b"local c2\n"
REMOTE_C3 = b"c3 edited on the server\n"
LOCAL_CC = b"local cc\n"
REMOTE_CC = b"the server's cc\n"
KINDS = {"c1": "content", "c2": "edit-delete", "c3": "delete-edit", "c4": "mode",
         "cc": "create-create"}


def tool(*args):
    r = subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"offline-tool {args}: {r.stderr}")
    return r.stdout


class Fixture:
    """A server tree with the scripted conflicts and a view over it."""

    def __init__(self, seed):
        self.work = tempfile.mkdtemp(prefix="fcache-resolve-")
        atexit.register(shutil.rmtree, self.work, True)
        os.chmod(self.work, 0o755)
        d = os.path.join(self.work, "x")
        tool("init", d, str(seed))
        tool("record", d, str(seed), "0", "conflicts")
        tool("server-edits", d)
        out = tool("reint", d)
        check("conflicts=5" in out, f"seed {seed}: reintegration kept 5 conflicts ({out.strip()})")
        self.vol = Volume(name=f"resolve{seed}", backing=os.path.join(d, "srv"))
        os.makedirs(self.vol.cache, mode=0o700)
        shutil.copytree(os.path.join(d, "log"), os.path.join(self.vol.cache, "offline"))
        self.vol.start()
        # The mountpoint reads everything first: caches that a resolve must refresh.
        for n in os.listdir(self.vol.mnt):
            p = self.vol.v(n)
            if os.path.isfile(p) and not os.path.islink(p):
                read_file(p)
                os.stat(p)

    def run(self, *args, env=None, cache=True, cwd=None):
        cmd = [RESOLVE] + (["--cache-dir", self.vol.cache] if cache else []) + list(args)
        e = dict(os.environ)
        e.update(env or {})
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=e, cwd=cwd)

    def conflicts(self):
        r = self.run("list", "--json")
        if r.returncode != 0:
            return None
        return {c["path"]: c for c in json.loads(r.stdout)}

    def close(self):
        self.vol.cleanup()
        shutil.rmtree(self.work, ignore_errors=True)


def raw(vol, req, path=None):
    """One request through fcache-view-ctl: (status, error, result lines)."""
    r = subprocess.run([CTL, vol.cache, req] + ([path] if path is not None else []),
                       capture_output=True, text=True, timeout=120)
    if r.returncode == 0:
        return 0, "", r.stdout.splitlines()
    m = re.search(r"^fcache-view-ctl: (.*) \(status (-?\d+)\)$", r.stderr.strip(), re.S)
    if not m:
        return -1, r.stderr.strip(), r.stdout.splitlines()
    return int(m.group(2)), m.group(1), r.stdout.splitlines()


def both(fx, name, want, what):
    """The backing file and the read through the mountpoint both hold want (None: absent)."""
    eq(read_or_none(fx.vol.b(name)), want, f"{what}: backing {name}")
    eq(read_or_none(fx.vol.v(name)), want, f"{what}: {name} through the mountpoint")


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


# --------------------------------------------------------------------------
# Fixture A: list, show, take local, take remote, keep-both, errors
# --------------------------------------------------------------------------
fx = Fixture(1)
v = fx.vol

r = fx.run("list")
eq(r.returncode, 0, "list exits 0")
lines = r.stdout.splitlines()
for name, kind in KINDS.items():
    check(any(line.split()[1:3] == [kind, name] for line in lines[1:] if len(line.split()) >= 3),
          f"list shows {name} as {kind}")
cs = fx.conflicts()
eq(sorted(cs or {}), sorted(KINDS), "list --json: the five conflicts by path")
eq({p: c["kind"] for p, c in (cs or {}).items()}, KINDS, "list --json: their kinds")
check(all(c["detail"] for c in (cs or {}).values()), "list --json: each has a detail")
r = fx.run("list", "c1")
eq([line.split()[1:] for line in r.stdout.splitlines()[1:2]], [["content", "c1"]],
   "list c1: only c1")
r = fx.run("list", "--json", v.v("cc"))
eq([c["path"] for c in json.loads(r.stdout)], ["cc"], "list with an absolute path under the mount")
r = fx.run("list", "d0")
eq(r.stdout.strip(), "no conflicts under d0", "list of a directory without conflicts")

# The control socket's own answers
a = v.ctl("query conflicts")
eq(a["conflicts"], "5", "query conflicts: conflicts=5")
cid = cs["c1"]["id"]
a = v.ctl(f"conflict-version {cid} base")
eq(base64.b64decode(a["content_base64"]), BASE_C1, "conflict-version base: the base text")
eq(a["size"], str(len(BASE_C1)), "conflict-version base: its size")
eq(base64.b64decode(v.ctl(f"conflict-version {cid} local")["content_base64"]), LOCAL_C1,
   "conflict-version local")
eq(base64.b64decode(v.ctl(f"conflict-version {cid} remote")["content_base64"]), REMOTE_C1,
   "conflict-version remote")
a = v.ctl(f"conflict-version {cs['c2']['id']} remote", ok=False)
check(a["_rc"] != 0 and "no remote content" in a["_err"],
      f"conflict-version of a deleted side: ENOENT, says so ({a['_err']})")
for req, word, errno_ in ((f"resolve {cid} sideways", "sideways", "-22"),
                          ("resolve abc local", "abc", "-22"),
                          (f"resolve {cid}", "missing", "-22"),
                          (f"resolve {cid} merged", "resolve-merged", "-22"),
                          ("resolve 999 local", "999", "-2"),
                          (f"conflict-version {cid} bogus", "bogus", "-22"),
                          ("conflict-version 999 base", "999", "-2"),
                          (f"resolve-merged {cid} !!notbase64", "base64", "-22"),
                          ("query conflicts extra", "extra", "-22")):
    st, err, _ = raw(v, req)
    check(str(st) == errno_ and word in err, f"'{req}': status {st} (want {errno_}), '{err}'")

# show
r = fx.run("show", "c1")
eq(r.returncode, 0, "show c1 exits 0")
for s in ("<<<<<<< local", "||||||| base", "=======", ">>>>>>> remote", "c1 line #",
          "c1 line %", "c1 line 5", "content"):
    check(s in r.stdout, f"show c1 prints {s!r}")
check("\033[" not in r.stdout, "show: no colour when stdout is not a terminal")
r = fx.run("--color=always", "show", "c1")
check("\033[" in r.stdout, "show --color=always colours")
master, slave = pty.openpty()
p = subprocess.Popen([RESOLVE, "--cache-dir", v.cache, "show", "c1"], stdout=slave,
                     stderr=subprocess.PIPE)
os.close(slave)
tty_out = b""
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    tty_out += chunk
p.wait(60)
os.close(master)
check(p.returncode == 0 and b"\033[" in tty_out and b"c1 line #" in tty_out,
      "show on a terminal: coloured")
r = fx.run("--color=never", "show", "c1")
check("\033[" not in r.stdout, "show --color=never")
r = fx.run("show", v.v("c2"))
eq(r.returncode, 0, "show of an edit-delete (absolute path of a name the server removed)")
check("local c2" in r.stdout and "c2 line 3" in r.stdout and "remote no content" in
      " ".join(r.stdout.split()), "show c2: base and local printed, remote absent")
r = fx.run("show", "cc")
check("local cc" in r.stdout and "the server's cc" in r.stdout, "show cc: both creations")

# errors of the CLI
for args, rc, word in ((["take", "local", "nosuch"], 1, "nosuch"),
                       (["show", "d0/nosuch"], 1, "d0/nosuch"),
                       (["take", "both", "c1"], 2, "keep-both"),
                       (["take", "sideways", "c1"], 2, "sideways"),
                       (["take", "local"], 2, "PATH"),
                       (["frob", "c1"], 2, "frob"),
                       ([], 2, "missing command"),
                       (["--json", "show", "c1"], 2, "--json"),
                       (["--id", "x", "show", "c1"], 2, "--id"),
                       (["--id", "999", "show", "c1"], 1, "999"),
                       (["list", "a", "b"], 2, "'b'")):
    r = fx.run(*args)
    check(r.returncode == rc and word in r.stderr,
          f"fcache-resolve {' '.join(args)}: exit {rc} naming {word} "
          f"(got {r.returncode}: {r.stderr.strip().splitlines()[0] if r.stderr else ''})")
r = subprocess.run([RESOLVE, "--cache-dir", "/nonexistent", "list"], capture_output=True,
                   text=True)
check(r.returncode == 1 and "control socket" in r.stderr, "no socket: exit 1, says which")
r = subprocess.run([RESOLVE, "--help"], capture_output=True, text=True)
check(r.returncode == 0 and "keep-both" in r.stdout and "Exit status" in r.stdout, "--help")

# take local (content), take remote (edit-delete), take local (delete-edit, mode), keep-both
r = fx.run("take", "local", "c1")
check(r.returncode == 0 and "settled" in r.stdout, f"take local c1 ({r.stdout.strip()}{r.stderr})")
both(fx, "c1", LOCAL_C1, "take local c1")
r = fx.run("take", "remote", "c2")
eq(r.returncode, 0, "take remote c2 (edit-delete)")
both(fx, "c2", None, "take remote c2: stays deleted")
r = fx.run("take", "local", v.v("c3"))
eq(r.returncode, 0, "take local c3 (delete-edit), absolute path")
both(fx, "c3", None, "take local c3: deleted")
r = fx.run("take", "local", "c4")
eq(r.returncode, 0, "take local c4 (mode)")
eq(mode_of(v.b("c4")), 0o600, "take local c4: backing mode 0600")
eq(mode_of(v.v("c4")), 0o600, "take local c4: mode 0600 through the mountpoint")
r = fx.run("keep-both", "cc")
check(r.returncode == 0 and "cc.local" in r.stdout, f"keep-both cc ({r.stdout.strip()})")
both(fx, "cc", REMOTE_CC, "keep-both cc: the server's version under the name")
both(fx, "cc.local", LOCAL_CC, "keep-both cc: the local one beside it")
eq(fx.conflicts(), {}, "all settled: list --json is empty")
r = fx.run("take", "local", "c1")
check(r.returncode == 1 and "no conflict on 'c1'" in r.stderr, "a settled conflict is gone")
eq(fx.run("list").stdout.strip(), "no conflicts", "list: no conflicts")
fx.close()

# --------------------------------------------------------------------------
# Fixture B: the other choices; the volume found from the mount and its conf
# --------------------------------------------------------------------------
fx = Fixture(2)
v = fx.vol
confdir = os.path.join(fx.work, "volumes.d")
os.makedirs(confdir)
with open(os.path.join(confdir, "resolve2.conf"), "w") as f:
    f.write(f"Backing={v.backing}\nMountpoint={v.mnt}\nCacheDir={v.cache}\n")
env = {"FCACHE_VOLUMES_DIR": confdir}
r = fx.run("list", "--json", v.mnt, env=env, cache=False)
eq(sorted(c["path"] for c in json.loads(r.stdout or "[]")), sorted(KINDS),
   f"list of the mountpoint, volume found from mountinfo and its conf {r.stderr.strip()}")
r = fx.run("list", env=env, cache=False, cwd=v.v("d0"))
check(r.returncode == 0 and "c3" in r.stdout,
      f"list from a directory inside the mount, no --cache-dir {r.stderr.strip()}")
r = fx.run("show", "c1", env=env, cache=False, cwd=v.v("d0"))
check(r.returncode == 0 and "c1 line %" in r.stdout,
      "show c1 from inside the mount: PATH relative to the volume root")
r = fx.run("take", "remote", v.v("c1"), env=env, cache=False)
eq(r.returncode, 0, f"take remote c1 by absolute path, no --cache-dir {r.stderr.strip()}")
both(fx, "c1", REMOTE_C1, "take remote c1")
r = fx.run("take", "remote", "c1", env={"FCACHE_VOLUMES_DIR": fx.work}, cache=False)
check(r.returncode == 1, f"no conf for the mount: exit 1 ({r.stderr.strip()})")
r = fx.run("take", "local", "c2")
eq(r.returncode, 0, "take local c2 (edit-delete)")
both(fx, "c2", LOCAL_C2, "take local c2: the file is back with the local content")
r = fx.run("take", "remote", "c3")
eq(r.returncode, 0, "take remote c3 (delete-edit)")
both(fx, "c3", REMOTE_C3, "take remote c3: the server's edit stays")
r = fx.run("take", "remote", "c4")
eq(r.returncode, 0, "take remote c4 (mode)")
eq(mode_of(v.b("c4")), 0o640, "take remote c4: backing mode 0640")
eq(mode_of(v.v("c4")), 0o640, "take remote c4: through the mountpoint")
# local of a name both sides created: the local file replaces the server's,
# and the object made offline becomes that server file.
r = fx.run("take", "local", "cc")
eq(r.returncode, 0, f"take local cc (create-create) {r.stderr.strip()}")
both(fx, "cc", LOCAL_CC, "take local cc: the local creation replaces the server's")
check(not os.path.exists(v.b("cc.local")), "take local cc: no copy beside")
eq(fx.conflicts(), {}, "fixture B: all settled")
fx.close()

# --------------------------------------------------------------------------
# Fixture C: edit; a server that changed again (ESTALE)
# --------------------------------------------------------------------------
fx = Fixture(3)
v = fx.vol
scripts = os.path.join(fx.work, "editors")
os.makedirs(scripts)
# Larger than one control request line (8 KiB): fcache-resolve stages it in chunks.
MERGED = BASE_C1.replace(b"c1 line 5", b"c1 line merged by hand") + b"".join(
    b"an added line %d\n" % i for i in range(12000))
with open(os.path.join(scripts, "merge.py"), "w") as f:
    f.write("import sys\n"
            "t = open(sys.argv[1]).read()\n"
            "assert '<<<<<<< local' in t and '>>>>>>> remote' in t, t\n"
            f"open(sys.argv[1], 'wb').write({MERGED!r})\n")
r = fx.run("edit", "c1", env={"EDITOR": "true", "VISUAL": ""})
check(r.returncode == 1 and "marker" in r.stderr, f"edit left with markers: refused ({r.stderr.strip()})")
kept = [w for w in r.stderr.split() if w.startswith("/") and "fcache-resolve-" in w]
check(kept and os.path.exists(kept[0]), "edit left with markers: the text is kept in a file")
for k in kept:
    os.unlink(k)
check("c1" in (fx.conflicts() or {}), "edit refused: the conflict stays")
both(fx, "c1", REMOTE_C1, "edit refused: the server is unchanged")
r = fx.run("edit", "c1", env={"EDITOR": "false", "VISUAL": ""})
check(r.returncode == 1 and "editor" in r.stderr, f"edit with a failing editor: refused ({r.stderr.strip()})")
for w in r.stderr.split():
    if w.startswith("/") and "fcache-resolve-" in w and os.path.exists(w):
        os.unlink(w)
r = fx.run("edit", "c2", env={"EDITOR": "true"})
check(r.returncode == 1 and "no remote content" in r.stderr,
      f"edit of an edit-delete: refused ({r.stderr.strip()})")
r = fx.run("edit", "c1", env={"EDITOR": f"{sys.executable} {scripts}/merge.py", "VISUAL": ""})
check(r.returncode == 0 and "settled" in r.stdout,
      f"edit c1 with a merging editor, {len(MERGED)} bytes ({r.stderr.strip()})")
both(fx, "c1", MERGED, "edit c1: the server has the merged text")
check("c1" not in (fx.conflicts() or {}), "edit c1: settled")
AGAIN = b"the server changed c3 again\n"
with open(v.b("c3"), "wb") as f:
    f.write(AGAIN)
r = fx.run("take", "local", "c3")
check(r.returncode == 1 and "again" in r.stderr, f"server changed again: refused ({r.stderr.strip()})")
st, err, _ = raw(v, f"resolve {fx.conflicts()['c3']['id']} local")
eq(st, -116, f"server changed again: status -ESTALE ({err})")
eq(read_or_none(v.b("c3")), AGAIN, "ESTALE: the server's new c3 untouched")
check("c3" in (fx.conflicts() or {}), "ESTALE: the conflict stays")

# Offline, conflicts can be read but not settled (the server is out of reach).
st, err, _ = raw(v, "disconnect")
eq(st, 0, f"disconnect ({err})")
r = fx.run("take", "remote", "c4")
check(r.returncode == 1 and "offline" in r.stderr, f"offline: take refused ({r.stderr.strip()})")
st, err, _ = raw(v, f"resolve {fx.conflicts()['c4']['id']} remote")
eq(st, -112, f"offline: resolve is -EHOSTDOWN ({err})")
check("c4" in (fx.conflicts() or {}), "offline: list still works, the conflict stays")
st, err, _ = raw(v, "reconnect")
eq(st, 0, f"reconnect ({err})")
r = fx.run("take", "remote", "c4")
eq(r.returncode, 0, f"online again: take remote c4 ({r.stderr.strip()})")
eq(mode_of(v.v("c4")), 0o640, "online again: c4 follows the server")
fx.close()

# --------------------------------------------------------------------------
# Fixture D: resolve-merged on the socket, inline and staged in chunks
# --------------------------------------------------------------------------
fx = Fixture(4)
v = fx.vol
cs = fx.conflicts()
cid = cs["c1"]["id"]
st, err, _ = raw(v, f"merged-chunk {cid} t1 5 " + base64.b64encode(b"x").decode())
eq(st, -2, f"merged-chunk not starting at 0: -ENOENT ({err})")
st, err, _ = raw(v, f"merged-chunk {cid} t1 0 " + base64.b64encode(b"abc").decode())
eq(st, 0, f"merged-chunk at 0 ({err})")
st, err, _ = raw(v, f"merged-chunk {cid} t1 2 " + base64.b64encode(b"x").decode())
eq(st, -22, f"merged-chunk at a wrong offset: -EINVAL ({err})")
st, err, _ = raw(v, f"merged-chunk {cid} bad/token 0 eA==")
eq(st, -22, f"merged-chunk with a bad token: -EINVAL ({err})")
st, err, _ = raw(v, f"resolve-merged {cid} @nosuch")
eq(st, -2, f"resolve-merged of an unknown stage: -ENOENT ({err})")
SMALL = b"merged on the socket\n"
st, err, lines = raw(v, f"resolve-merged {cid} " + base64.b64encode(SMALL).decode())
eq(st, 0, f"resolve-merged inline ({err})")
check(f"resolved={cid}" in lines and "path=c1" in lines, f"resolve-merged answer {lines}")
both(fx, "c1", SMALL, "resolve-merged inline")
st, err, _ = raw(v, f"resolve {cid} local")
eq(st, -2, "a settled conflict's id: -ENOENT")
r = fx.run("keep-both", "c2")
check(r.returncode == 0 and "c2.local" in r.stdout, f"keep-both c2 (edit-delete) ({r.stdout.strip()})")
both(fx, "c2", None, "keep-both c2: the server's deletion stays")
both(fx, "c2.local", LOCAL_C2, "keep-both c2: the local version beside it")
for name in ("c3", "c4"):
    r = fx.run("keep-both", name)
    check(r.returncode == 1 and "no local content" in r.stderr,
          f"keep-both {name} ({KINDS[name]}): refused, says why ({r.stderr.strip()})")
    check(name in (fx.conflicts() or {}), f"keep-both {name} refused: the conflict stays")
fx.close()

finish()
