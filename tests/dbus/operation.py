#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# operation.py: a client of org.fcache.Operation1 for the dbus tests, on the
# system bus of DBUS_SYSTEM_BUS_ADDRESS.
#
#   operation.py start PATH COMMAND
#       Start COMMAND on PATH and wait, on the same connection, for the
#       operation's Finished signal (signals go to the caller's bus name only).
#       Prints "operation OBJ", "finished STATE", then "type KEY SIGNATURE" for
#       each key of the result.
#   operation.py listen
#       Listen to every signal fcached sends this connection; print "ready",
#       and when a line comes on standard input, make a round trip to fcached
#       (what it sent before is then here: one sender's messages keep their
#       order) and print "signal PATH INTERFACE.MEMBER" for each Operation1
#       signal or PropertiesChanged of an operation received.
import sys

from gi.repository import Gio, GLib

BUS = "org.fcache.Manager1"
OBJ = "/org/fcache/Manager1"
OP_PREFIX = OBJ + "/operation/"


def start(path, command):
    bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
    loop = GLib.MainLoop()
    seen = {"op": None, "finished": None, "early": []}

    def on_signal(conn, sender, obj, iface, member, params):
        if iface == "org.fcache.Operation1" and member == "Finished":
            if seen["op"] is None:
                seen["early"].append((obj, params))
            elif obj == seen["op"]:
                seen["finished"] = params
                loop.quit()

    bus.signal_subscribe(BUS, "org.fcache.Operation1", None, None, None,
                         Gio.DBusSignalFlags.NONE, on_signal)
    reply = bus.call_sync(BUS, OBJ, "org.fcache.Manager1", "Start",
                          GLib.Variant("(ssa{sv})", (path, command, {})),
                          GLib.VariantType("(o)"), Gio.DBusCallFlags.NONE, -1, None)
    seen["op"] = reply.unpack()[0]
    print("operation", seen["op"], flush=True)
    for obj, params in seen["early"]:
        if obj == seen["op"]:
            seen["finished"] = params
    if seen["finished"] is None:
        loop.run()
    state = seen["finished"].get_child_value(0).get_string()
    result = seen["finished"].get_child_value(1)
    print("finished", state)
    for i in range(result.n_children()):
        entry = result.get_child_value(i)
        key = entry.get_child_value(0).get_string()
        value = entry.get_child_value(1).get_variant()
        print("type", key, value.get_type_string())


def listen():
    bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
    loop = GLib.MainLoop()
    got = []

    def on_signal(conn, sender, obj, iface, member, params):
        if obj.startswith(OP_PREFIX):
            got.append("signal %s %s.%s" % (obj, iface, member))

    bus.signal_subscribe(BUS, None, None, None, None, Gio.DBusSignalFlags.NONE, on_signal)
    # A round trip, so that the match rule is in place before "ready".
    bus.call_sync(BUS, OBJ, "org.freedesktop.DBus.Peer", "Ping", None, None,
                  Gio.DBusCallFlags.NONE, -1, None)
    print("ready", flush=True)

    def on_stdin(channel, condition):
        channel.readline()
        bus.call_sync(BUS, OBJ, "org.freedesktop.DBus.Peer", "Ping", None, None,
                      Gio.DBusCallFlags.NONE, -1, None)
        # Signals that came before the reply are queued for this context.
        while GLib.MainContext.default().iteration(False):
            pass
        loop.quit()
        return False

    GLib.io_add_watch(GLib.IOChannel.unix_new(sys.stdin.fileno()), GLib.PRIORITY_DEFAULT,
                      GLib.IOCondition.IN | GLib.IOCondition.HUP, on_stdin)
    loop.run()
    print("signals", len(got))
    for line in got:
        print(line)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "start":
        start(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 2 and sys.argv[1] == "listen":
        listen()
    else:
        sys.exit("usage: operation.py start PATH COMMAND | listen")
