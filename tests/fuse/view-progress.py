#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`query state` answers while a reconnect replays (it used to wait for the
replay's end behind the offline lock), with the replay's progress: state
reintegrating, done never past total and never going back, pending = total -
done, the bytes shipped never going back; after it, online with nothing
pending, done = total and every created file's bytes counted.
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewlib import Volume, check, eq, finish, require_root_fuse  # noqa: E402

FILES = 3000


def main():
    require_root_fuse()
    vol = Volume("progress")
    os.makedirs(vol.b("d"))
    vol.start()
    vol.ctl("pin recursive", "d")
    eq(vol.ctl("disconnect")["state"], "offline", "disconnect")
    for i in range(FILES):
        with open(vol.v("d", f"f{i}"), "wb") as f:
            f.write(b"x" * 100)
    pending = int(vol.state()["pending"])
    check(pending >= FILES, f"{pending} records pending")

    result = {}
    t = threading.Thread(target=lambda: result.update(vol.ctl("reconnect", timeout=600)))
    t.start()
    seen = []
    while t.is_alive():
        st = vol.ctl("query state", timeout=600)
        if st.get("state") == "reintegrating":
            seen.append((int(st["reintegration_done"]), int(st["reintegration_total"]),
                         int(st["pending"]), int(st["reintegration_bytes"])))
    t.join()
    check(len(seen) > 0, f"query state answered {len(seen)} times during the replay")
    check(all(s[0] <= s[1] for s in seen), "done never past total")
    bad = [s for s in seen if s[2] != s[1] - s[0]]
    check(not bad, f"pending = total - done {bad[:3]}")
    check(all(a[0] <= b[0] for a, b in zip(seen, seen[1:])), "done never goes back")
    check(all(a[3] <= b[3] for a, b in zip(seen, seen[1:])), "the bytes shipped never go back")
    moving = [s for s in seen if 0 < s[0] < s[1]]
    print(f"# answers during the replay: {len(seen)}, with 0 < done < total: {len(moving)}")
    st = vol.state()
    eq((st["state"], st["pending"]), ("online", "0"), "after it: online, nothing pending")
    eq(st["reintegration_done"], st["reintegration_total"], "after it: done = total")
    eq(st["reintegration_bytes"], str(FILES * 100), "after it: every created file's 100 bytes counted")
    finish()


if __name__ == "__main__":
    main()
