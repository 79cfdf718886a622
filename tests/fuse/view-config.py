#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Volume configuration files: a bad one is refused with the file, line, key
and reason; a good one (by path or by NAME in /etc/fcache/volumes.d) mounts."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import VIEW, Volume, check, eq, finish, read_file, require_root_fuse, write_file  # noqa: E402


def run_conf(text):
    d = tempfile.mkdtemp(prefix="fcache-conf-")
    p = os.path.join(d, "vol.conf")
    write_file(p, text.encode())
    r = subprocess.run([VIEW, "--config", p], capture_output=True, text=True, timeout=10)
    os.unlink(p)
    os.rmdir(d)
    return p, r


def main():
    require_root_fuse()
    base = "[Volume]\nBacking=/srv/b\nMountpoint=/mnt/v\nCacheDir=/var/cache/v\n"
    cases = [
        (base + "CacheSize=12Q\n", ":5: CacheSize: '12Q' is not a size"),
        (base + "Colour=blue\n", ":5: Colour: unknown key"),
        (base + "Backing=/other\n", ":5: Backing: set twice"),
        ("Backing=relative/path\n", ":1: Backing: 'relative/path' is not an absolute path"),
        ("[Volume]\n# comment\nAttrLease=soon\n", ":3: AttrLease: 'soon' is not a duration"),
        ("[Other]\n", ":1: [Other]: unknown section"),
        ("just words\n", ":1: 'just words': not a Key=Value line"),
        ("Mountpoint=/mnt/v\nCacheDir=/c\n", "Backing: missing"),
        (base + "CacheSize=1G\nReserve=2G\n", "Reserve: 2147483648 bytes leaves no room"),
        (base + "FetchThreads=0\n", ":5: FetchThreads: '0' is not a number from 1 to 64"),
        (base + "ReconnectDeleteLimit=lots\n",
         ":5: ReconnectDeleteLimit: 'lots' is neither a number of pinned objects"),
        (base + "ReconnectDeleteLimit=150%\n", ":5: ReconnectDeleteLimit: '150%' is more than 100%"),
        (base + "ReconnectDeleteLimit=5 files\n", ":5: ReconnectDeleteLimit: '5 files' is neither"),
        (base + "WriteBack=sometimes\n", ":5: WriteBack: 'sometimes' is none of no"),
    ]
    for text, want in cases:
        path, r = run_conf(text)
        check(r.returncode != 0 and want in r.stderr and
              path in r.stderr,
              f"refused with '{want}' ({r.stderr.strip()})")

    vol = Volume("conf")                           # for its directories only
    write_file(vol.b("hello"), b"from a config file")
    name = f"fcache-test-{os.getpid()}"
    conf = f"/etc/fcache/volumes.d/{name}.conf"
    os.makedirs("/etc/fcache/volumes.d", exist_ok=True)
    write_file(conf, (f"[Volume]\nBacking={vol.backing}\nMountpoint={vol.mnt}\n"
                      f"CacheDir={vol.cache}\nCacheSize=64M\nReserve=8M\nAttrLease=5s\n"
                      f"Server=localhost\nBackingTimeout=3s\nHoardInterval=10min\nFetchThreads=4\n"
                      f"ReconnectDeleteLimit=10%\nWriteBack=no\n").encode())
    try:
        vol.args = [VIEW, name]
        vol.start()
        eq(read_file(vol.v("hello")), b"from a config file", "a volume by NAME mounts and serves")
        q = vol.ctl("query cache")
        eq((q["size"], q["reserve"]), (str(64 << 20), str(8 << 20)), "its CacheSize and Reserve apply")
        vol.stop()
    finally:
        os.unlink(conf)
    finish()


if __name__ == "__main__":
    main()
