# SPDX-License-Identifier: LGPL-2.1-or-later
"""compare-results.py DIR: the same fcachectl steps run with fcache.ko
(DIR/kmod/N) and without it (DIR/user/N), each file "NAME\\tEXIT\\tMS" then
the JSON.  One command on one path must mean one thing whichever backend
serves it: the same outcome (exit status, errno name), every key the user
backend gives also given by the module's backend with the same value, and
no key of the module's beyond what only the kernel knows.  Prints one line
per step, "PASS name" or "FAIL name: why", and the matrix to DIR/matrix.txt.
"""
import json
import os
import sys

# what only the kernel knows, or what cachestat(2) knows and 6.1's mincore not
KERNEL_ONLY = {
    "pinned", "pin_mode", "pages_held", "pages_stale", "fscache_cookie",
    "fscache_cookie_users", "pages_unstable", "supers", "fs_type", "files_pinned",
    "pages_dirty", "bytes_dirty", "pages_writeback", "bytes_writeback", "pages_evicted",
    "files_dirty",
    "delegations_held", "delegations_returned", "delegations_returned_at_close",
}
# named differently by nature, or words rather than figures
NOT_COMPARED = {"backend", "method", "first_error", "reason", "attributes",
                "callbacks_released", "unstable", "unstable_reason"}


# a walk's own figure: the module flushes a volume without walking it
NOT_COMPARED_FOR = {"flush volume": {"dirs"}}


def load(path):
    with open(path) as f:
        head, _, body = f.read().partition("\n")
    name, rc, ms = head.split("\t")
    try:
        res = json.loads(body)["results"][0]
    except (ValueError, KeyError, IndexError):
        res = {"ok": None, "raw": body.strip()[:200]}
    return name, int(rc), int(ms), res


def outcome(rc, res):
    if res.get("ok") is True:
        return "%d:OK" % rc
    if res.get("ok") is False:
        return "%d:%s" % (rc, res["error"]["name"])
    return "%d:no-result" % rc


def brief(rc, ms, res):
    r = res.get("result", {})
    keys = ("files", "pages_cached", "pages_dropped", "pages_fetched", "mounts")
    figs = " ".join("%s=%s" % (k, r[k]) for k in keys if k in r)
    return "%s %s %dms" % (outcome(rc, res), figs, ms)


def main():
    top = sys.argv[1]
    steps = sorted(os.listdir(os.path.join(top, "user")), key=int)
    rows = []
    for n in steps:
        kpath = os.path.join(top, "kmod", n)
        if not os.path.exists(kpath):
            print("FAIL step %s: no result with the module" % n)
            continue
        name, krc, kms, kres = load(kpath)
        _, urc, ums, ures = load(os.path.join(top, "user", n))
        rows.append("%-36s | %-44s | %s" % (name, brief(krc, kms, kres), brief(urc, ums, ures)))
        why = []
        if outcome(krc, kres) != outcome(urc, ures):
            why.append("outcome %s with the module, %s without"
                       % (outcome(krc, kres), outcome(urc, ures)))
        kr, ur = kres.get("result", {}), ures.get("result", {})
        skip = NOT_COMPARED | NOT_COMPARED_FOR.get(" ".join(name.split()[:2]), set())
        for k, v in ur.items():
            if k in skip:
                continue
            if k not in kr:
                why.append("%s=%s without the module, absent with it" % (k, v))
            elif kr[k] != v:
                why.append("%s: %s with the module, %s without" % (k, kr[k], v))
        for k in kr:
            if k not in ur and k not in KERNEL_ONLY and k not in NOT_COMPARED:
                why.append("%s=%s only with the module" % (k, kr[k]))
        if why:
            print("FAIL %s: %s" % (name, "; ".join(why)))
        else:
            print("PASS %s" % name)
    with open(os.path.join(top, "matrix.txt"), "w") as f:
        f.write("%-36s | %-44s | %s\n" % ("NFSv4.2: command", "fcache.ko", "no module"))
        f.write("\n".join(rows) + "\n")


main()
