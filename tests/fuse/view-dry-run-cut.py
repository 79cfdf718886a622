#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`query reintegration` (the dry run) against a server that stopped
answering never hangs, and holds nothing offline changes need: with the
link (linklib: sshfs through a relay) cut silently while the volume is
offline with logged edits, the dry run answers (an error naming
BackingTimeout, or its result if caches answered for the server), and while
it runs offline edits and `query state` go on.  Once the link is back the
dry run lists the records again and the reconnect puts every edit, those
made during the dry run too, on the server.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linklib  # noqa: E402
from viewlib import Volume, check, eq, finish, read_file, require_root_fuse, write_file  # noqa: E402

TIMEOUT_S = 2


def in_thread(fn, bound):
    """Runs fn on a thread; (finished within bound, its result or exception)."""
    out = {}

    def run():
        try:
            out["r"] = fn()
        except Exception as e:     # noqa: BLE001 - reported by the caller
            out["r"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(bound)
    return not t.is_alive(), out.get("r")


def main():
    require_root_fuse()
    vol = Volume("drycut", lease="1s", extra=["--set", f"BackingTimeout={TIMEOUT_S}s"])
    link = linklib.volume_over_link(vol, 5)
    proj = os.path.join(link.server, "proj")
    os.makedirs(proj)
    for i in range(20):
        write_file(os.path.join(proj, f"f{i:02d}"), b"file %d\n" % i)
    vol.start()
    eq(vol.ctl("pin recursive", "proj").get("mirrored"), "yes", "pinned over the link")
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect")
    for i in range(20):
        write_file(vol.v("proj", f"new{i:02d}"), b"made offline %d\n" % i)
        write_file(vol.v("proj", f"f{i:02d}"), b"edited offline %d\n" % i)
    q = vol.ctl("query reintegration")
    before = int(q.get("records", "0"))
    check(before >= 40, f"the dry run lists the offline records ({before})")
    eq(len([x for x in q["_lines"] if x.startswith("record=")]), before, "one line per record")

    link.cut()
    started = threading.Event()

    def dry_run():
        started.set()
        return vol.ctl("query reintegration", ok=False, timeout=300)
    dry = threading.Thread(target=lambda: out.update(r=dry_run()), daemon=True)
    out = {}
    dry.start()
    started.wait()
    time.sleep(0.5)
    edits = {}

    def edit():
        for i in range(10):
            data = b"edited during the dry run %d\n" % i
            write_file(vol.v("proj", f"during{i}"), data)
            edits[f"during{i}"] = data
        return vol.state()
    done, st = in_thread(edit, 60)
    check(done, "offline edits and query state go on while the dry run waits on the cut link")
    if done and isinstance(st, dict):
        eq(st.get("state"), "offline", "query state answers: offline")
    dry.join(120)
    check(not dry.is_alive(), "the dry run answers while the link is cut")
    r = out.get("r")
    if r is not None:
        check(r["_rc"] == 0 or "BackingTimeout" in r["_err"],
              f"with its result or the bound it gave up at ({r['_err'] or 'ok'})")
        print(f"# dry run over the cut link: rc {r['_rc']} {r['_err']}")

    link.restore()
    q = vol.ctl("query reintegration", ok=False, timeout=300)
    check(q["_rc"] == 0 and int(q.get("records", "0")) >= before + 10,
          f"with the link back the dry run lists every record, those made during the first too"
          f" ({q.get('records')}, {before} before)")
    q = vol.ctl("reconnect", ok=False, timeout=300)
    eq(q["_rc"], 0, f"reconnect ({q['_err']})")
    for name, data in edits.items():
        eq(read_file(os.path.join(proj, name)), data, f"{name}, made during the dry run, is on the server")
    eq(read_file(os.path.join(proj, "f03")), b"edited offline 3\n", "an earlier edit is on the server")
    # A dry run given up on cleans up once the server lets its thread finish.
    end = time.time() + 60
    while time.time() < end:
        leftovers = [n for n in os.listdir(vol.cache) if n.startswith("dry-run.")]
        if not leftovers:
            break
        time.sleep(0.5)
    eq(leftovers, [], "the dry runs' copies of the log are gone")

    # A copy a worker left when it died goes at the next start.
    stale = os.path.join(vol.cache, "dry-run.stale")
    os.makedirs(os.path.join(stale, "content"))
    write_file(os.path.join(stale, "log.db"), b"left behind")
    os.symlink(vol.cache, os.path.join(stale, "bases"))
    vol.kill_worker()
    end = time.time() + 60
    while time.time() < end and os.path.exists(stale):
        time.sleep(0.2)
    check(not os.path.exists(stale), "a copy left by a dead worker is removed by the next one")
    check(os.path.isdir(os.path.join(vol.cache, "offline")), "and only that (the symlink not followed)")
    finish()


if __name__ == "__main__":
    main()
