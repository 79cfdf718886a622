#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# askpass.py PASSWORD COMMAND...: runs COMMAND on a new pseudo-terminal (its
# controlling terminal and standard input), types PASSWORD after the first
# "Password:" it prints and again after each of the next two (none if
# PASSWORD is "-"), and copies what it printed to standard output; exits
# with its status (124 if it took over 90 s).
import os
import pty
import select
import sys
import termios
import time

password, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
out, typed, deadline = b"", 0, time.monotonic() + 90
while time.monotonic() < deadline:
    r, _, _ = select.select([fd], [], [], 1)
    if not r:
        continue
    try:
        data = os.read(fd, 4096)
    except OSError:  # EIO: the other side is closed
        break
    if not data:
        break
    out += data
    if password != "-" and typed < 3 and out.count(b"Password:") > typed:
        # Only once the prompt turned echo off: it does so with TCSAFLUSH, which would
        # throw away what was typed before.
        while termios.tcgetattr(fd)[3] & termios.ECHO and time.monotonic() < deadline:
            time.sleep(0.05)
        os.write(fd, password.encode() + b"\n")
        typed += 1
sys.stdout.write(out.decode(errors="replace"))
if time.monotonic() >= deadline:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    sys.exit(124)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
