#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# objects.py: fcached's object manager as a client sees it.
#   objects.py list                 GetManagedObjects: "PATH IFACE" per object, then
#                                   "PATH PROP=VALUE" per property
#   objects.py watch FILE           GetManagedObjects, then every signal fcached sends
#                                   this connection, one line each, appended to FILE:
#                                   "ready", "added PATH IFACE", "removed PATH",
#                                   "changed PATH PROP=VALUE"; until killed
#   objects.py version OBJ WHICH    Conflict1.GetVersion's bytes on stdout
#   objects.py merged OBJ TEXT      Conflict1.ResolveMerged with TEXT in a memfd
import os
import sys

from gi.repository import Gio, GLib

BUS, OM = "org.fcache.Manager1", "/org/fcache"


def show(v):
    return str(v.unpack()) if isinstance(v, GLib.Variant) else str(v)


def managed(bus):
    ret = bus.call_sync(BUS, OM, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects",
                        None, GLib.VariantType("(a{oa{sa{sv}}})"), Gio.DBusCallFlags.NONE, -1,
                        None)
    return ret.unpack()[0]


def main():
    bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
    cmd = sys.argv[1]
    if cmd == "list":
        objs = managed(bus)
        for path in sorted(objs):
            for iface in objs[path]:
                print(path, iface)
        for path in sorted(objs):
            for iface, props in objs[path].items():
                for k in sorted(props):
                    print(path, "%s=%s" % (k, props[k]))
    elif cmd == "watch":
        out = open(sys.argv[2], "a", buffering=1)

        def on_signal(conn, sender, path, iface, name, params):
            p = params.unpack()
            if name == "InterfacesAdded":
                for i in p[1]:
                    out.write("added %s %s\n" % (p[0], i))
            elif name == "InterfacesRemoved":
                out.write("removed %s\n" % p[0])
            elif name == "PropertiesChanged":
                for k, v in sorted(p[1].items()):
                    out.write("changed %s %s=%s\n" % (path, k, v))
        bus.signal_subscribe(BUS, None, None, None, None, Gio.DBusSignalFlags.NONE, on_signal)
        for path in sorted(managed(bus)):
            out.write("known %s\n" % path)
        out.write("ready\n")
        GLib.MainLoop().run()
    elif cmd == "version":
        ret, fdl = bus.call_with_unix_fd_list_sync(
            BUS, sys.argv[2], "org.fcache.Conflict1", "GetVersion",
            GLib.Variant("(s)", (sys.argv[3],)), GLib.VariantType("(h)"), Gio.DBusCallFlags.NONE, -1, None, None)
        fd = fdl.get(ret.unpack()[0])
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            sys.stdout.buffer.write(b)
    elif cmd == "merged":
        fd = os.memfd_create("merged")
        os.write(fd, sys.argv[3].encode())
        fdl = Gio.UnixFDList.new_from_array([fd])
        ret, _ = bus.call_with_unix_fd_list_sync(
            BUS, sys.argv[2], "org.fcache.Conflict1", "ResolveMerged", GLib.Variant("(h)", (0,)),
            GLib.VariantType("(a{sv})"), Gio.DBusCallFlags.NONE, -1, fdl, None)
        for k, v in sorted(ret.unpack()[0].items()):
            print("%s=%s" % (k, v))


try:
    main()
except GLib.Error as e:
    print(e.message, file=sys.stderr)
    sys.exit(1)
