#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# conflict-fd.py: the Manager1 conflict calls that carry a file descriptor,
# which busctl prints poorly.
#   conflict-fd.py version PATH WHICH   the version's bytes on stdout; "sealed" on stderr
#   conflict-fd.py merged PATH FILE     ResolveConflictMerged with FILE's bytes (a pipe
#                                       if FILE is "-": stdin is copied into one; a memfd
#                                       holding TEXT if FILE is "memfd:TEXT")
import fcntl
import os
import sys
import threading

from gi.repository import Gio, GLib

BUS, OBJ, IFACE = "org.fcache.Manager1", "/org/fcache/Manager1", "org.fcache.Manager1"


def call(method, args, sig, out, fds=None):
    bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
    return bus.call_with_unix_fd_list_sync(BUS, OBJ, IFACE, method, GLib.Variant(sig, args),
                                           GLib.VariantType(out), Gio.DBusCallFlags.NONE, -1,
                                           fds, None)


def main():
    try:
        if sys.argv[1] == "version":
            ret, fdl = call("GetConflictVersion", (sys.argv[2], sys.argv[3]), "(ss)", "(h)")
            fd = fdl.get(ret.unpack()[0])
            seals = fcntl.fcntl(fd, 1034)  # F_GET_SEALS
            if seals & 8:  # F_SEAL_WRITE
                print("sealed", file=sys.stderr)
            while True:
                b = os.read(fd, 65536)
                if not b:
                    break
                sys.stdout.buffer.write(b)
            os.close(fd)
        elif sys.argv[1] == "merged":
            if sys.argv[3] == "-":
                r, w = os.pipe()
                data = sys.stdin.buffer.read()

                def feed():
                    os.write(w, data)
                    os.close(w)
                threading.Thread(target=feed).start()
                fd = r
            elif sys.argv[3].startswith("memfd:"):
                fd = os.memfd_create("merged")
                os.write(fd, sys.argv[3][6:].encode())  # left at its end: fcached reads from 0
            else:
                fd = os.open(sys.argv[3], os.O_RDONLY)
            fdl = Gio.UnixFDList.new_from_array([fd])
            ret, _ = call("ResolveConflictMerged", (sys.argv[2], 0), "(sh)", "(a{sv})", fdl)
            print(ret.unpack()[0])
    except GLib.Error as e:
        print(e.message, file=sys.stderr)
        sys.exit(1)


main()
