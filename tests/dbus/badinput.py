#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# badinput.py: hostile calls to fcached over the bus: megabyte strings, wrong
# signatures, unknown methods, odd paths, malformed commands, and invalid UTF-8
# sent as raw bytes (the bus must reject it at the wire level). Prints TAP lines
# from N on (argv[1]); ends with "# next N". Uses GDBus (python3-gi) and a raw socket.
import os, socket, struct, sys
from gi.repository import Gio, GLib

n = int(sys.argv[1])
tmp = sys.argv[2]
fails = 0
BUS, OBJ, IFACE = "org.fcache.Manager1", "/org/fcache/Manager1", "org.fcache.Manager1"
bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)


def report(good, what, detail=""):
    global n, fails
    n += 1
    if not good:
        fails += 1
    print(("ok" if good else "not ok") + " %d - %s" % (n, what))
    if not good and detail:
        for line in str(detail).splitlines()[:5]:
            print("# " + line[:300])


def call(method, sig, args, timeout=30000):
    try:
        body = args if isinstance(args, GLib.Variant) else GLib.Variant(sig, args) if sig else None
        r = bus.call_sync(BUS, OBJ, IFACE, method, body,
                          None, Gio.DBusCallFlags.NONE, timeout, None)
        return ("ok", r)
    except GLib.Error as e:
        return (Gio.DBusError.get_remote_error(e) or "", e.message)


def expect_error(what, name, method, sig, args):
    got, msg = call(method, sig, args)
    report(got == name, what + " -> " + name.split(".")[-1], "%s: %s" % (got, msg))
    return msg


E = "org.fcache.Manager1.Error."
f = os.path.join(tmp, "f")
mb = "x" * (1 << 20)
expect_error("a 1 MiB path", E + "InvalidArgument", "Control", "(ssa{sv})", ("/" + mb, "query cached", {}))
expect_error("a 1 MiB command", E + "InvalidCommand", "Control", "(ssa{sv})", (f, "query " + mb, {}))
expect_error("a 16 MiB command", E + "InvalidCommand", "Control", "(ssa{sv})", (f, "q" * (16 << 20), {}))
expect_error("a 1 MiB option name", E + "InvalidArgument", "Control", "(ssa{sv})",
             (f, "query cached", {mb: GLib.Variant("b", True)}))
msg = expect_error("a 1 MiB 'what'", E + "InvalidArgument", "Query", "(ssb)", (f, mb, False))
report(len(msg) < 2000, "the error message does not echo megabytes", len(msg))
expect_error("a 4096-byte path", E + "InvalidArgument", "Control", "(ssa{sv})", ("/" + "a" * 4095, "query cached", {}))
expect_error("a 300-byte name (ENAMETOOLONG)", E + "InvalidArgument", "Control", "(ssa{sv})", ("/" + "a" * 300, "query cached", {}))
expect_error("an empty path", E + "InvalidArgument", "Control", "(ssa{sv})", ("", "query cached", {}))
expect_error("a path with a newline", E + "NoSuchPath", "Control", "(ssa{sv})", (tmp + "/\nx", "query cached", {}))
got, _ = call("Control", "(ssa{sv})", ("/" + "../" * 50 + tmp.lstrip("/") + "/f", "query cached", {}))
report(got == "ok", "a path with many '..' resolves like the kernel would", got)
for bad in ["", " ", "query", "query cached cached", "pin priority", "pin priority -1",
            "pin priority 99999999999999999999", "set cache-size 10Q", "set cache-size",
            "set cache " + "n" * 65, "flush volume all", "\x01\x02", "prefetch recursive recursive",
            "unpin dry-run", "set cacheable maybe", "disconnect now", "query cached\nflush all"]:
    expect_error("malformed command %r" % bad[:40], E + "InvalidCommand", "Control", "(ssa{sv})",
                 (f, bad, {}))
for method, sig, args in [("Control", "(ss)", (f, "query cached")),
                          ("Control", "(sss)", (f, "query cached", "x")),
                          ("Query", "(sss)", (f, "cached", "no")),
                          ("Pin", "(sbib)", (f, True, -1, False)),
                          ("Control", None, None)]:
    got, msg = call(method, sig, args)
    report(got == "org.freedesktop.DBus.Error.InvalidArgs", "%s with signature %s -> InvalidArgs" % (method, sig), got)
got, msg = call("Frobnicate", "(s)", (f,))
report(got == "org.freedesktop.DBus.Error.UnknownMethod", "an unknown method -> UnknownMethod", got)
try:
    bus.call_sync(BUS, "/org/fcache/Manager1/operation/999999", "org.fcache.Operation1", "Cancel",
                  None, None, Gio.DBusCallFlags.NONE, 5000, None)
    report(False, "Cancel of an unknown operation fails")
except GLib.Error as e:
    report("UnknownObject" in (Gio.DBusError.get_remote_error(e) or "") or "not exist" in e.message,
           "Cancel of an unknown operation -> UnknownObject", e.message)

# Random bodies for every method, made from random bytes as untrusted GVariants
# (GLib normalises what is not valid serialised data), with real paths mixed in.
import random
rng = random.Random(4)
methods = {"Control": "(ssa{sv})", "Start": "(ssa{sv})", "Query": "(ssb)", "Flush": "(ss)",
           "Prefetch": "(sb)", "Pin": "(sbub)", "Unpin": "(sb)", "SetCacheSize": "(st)",
           "SetCacheable": "(sb)", "SetReserve": "(st)", "SetCache": "(ss)",
           "Disconnect": "(s)", "Reconnect": "(s)"}
names = {}
for method, sig in methods.items():
    for i in range(40):
        raw = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 200)))
        v = GLib.Variant.new_from_bytes(GLib.VariantType.new(sig), GLib.Bytes.new(raw), False)
        if i % 2:
            # never a big tree: a random Prefetch or Pin of / would read the whole disk
            path = rng.choice([f, "/proc/self/fd/0", tmp + "/none", tmp + "/f/x"])
            v = GLib.Variant.new_tuple(GLib.Variant("s", path),
                                       *[v.get_child_value(k) for k in range(1, v.n_children())])
        got, msg = call(method, sig, v)
        if not got and "not allowed in D-Bus" in msg:
            got = "unsendable"  # GLib refuses to send it (an empty tuple in a variant)
        elif not got:
            print("# %s: %s" % (method, msg[:200]))
        names[got] = names.get(got, 0) + 1
allowed = {"ok", "unsendable", "org.freedesktop.DBus.Error.InvalidArgs"} | {E + x for x in (
    "InvalidArgument", "InvalidCommand", "NoSuchPath", "NotSupported", "AccessDenied",
    "LimitExceeded", "Failed", "NotAuthorized")}
report(set(names) <= allowed, "520 random-bodied calls get documented answers: %s" %
       ", ".join("%s=%d" % (k.split(".")[-1], v) for k, v in sorted(names.items())), names)
bus.call_sync(BUS, OBJ, IFACE, "Control", GLib.Variant("(ssa{sv})", ("/", "unpin recursive", {})),
              None, Gio.DBusCallFlags.NONE, 30000, None)

# Invalid UTF-8 in a string argument, hand-marshalled on a raw connection.
def pad(b, a):
    return b + b"\0" * ((-len(b)) % a)

def raw_call(sock, serial, dest, path, iface, member, sig, body):
    def s(x):
        return struct.pack("<I", len(x)) + x + b"\0"
    fields = b""
    for code, typ, val in [(1, b"o", path.encode()), (2, b"s", iface.encode()),
                           (3, b"s", member.encode()), (6, b"s", dest.encode()),
                           (8, b"g", sig.encode())]:
        fields = pad(fields, 8)
        enc = (struct.pack("<B", len(val)) + val + b"\0") if typ == b"g" else s(val)
        fields += struct.pack("<B", code) + bytes([1]) + typ + b"\0" + enc
    hdr = b"l" + bytes([1, 0, 1]) + struct.pack("<III", len(body), serial, len(fields)) + fields
    sock.sendall(pad(hdr, 8) + body)

addr = os.environ["DBUS_SYSTEM_BUS_ADDRESS"].split("path=", 1)[1].split(",")[0]
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(addr)
sock.sendall(b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode() + b"\r\n")
ok_line = sock.recv(4096)
sock.sendall(b"BEGIN\r\n")
raw_call(sock, 1, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello", "", b"")
bad = b"/tmp/\xff\xfe\xc0\xaf"
body = struct.pack("<I", len(bad)) + bad + b"\0"
body = pad(body, 4) + struct.pack("<I", 12) + b"query cached" + b"\0"
body = pad(body, 4) + struct.pack("<I", 0)
raw_call(sock, 2, BUS, OBJ, IFACE, "Control", "ssa{sv}", body)
sock.settimeout(5)
data = b""
try:
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
except (socket.timeout, ConnectionResetError):
    pass
sock.close()
report(ok_line.startswith(b"OK"), "the raw connection authenticates", ok_line)
report(b"query cached" not in data, "the bus drops the invalid UTF-8 message (no reply from fcached)", data[-200:])

got, r = call("Query", "(ssb)", (f, "cached", False))
report(got == "ok", "after all that, fcached still answers", r)
print("# next %d %d" % (n, fails))
sys.exit(1 if fails else 0)
