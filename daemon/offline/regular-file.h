/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * regular-file.h: opening a name that must be a regular file.
 *
 * The daemon opens names in trees others change under it: the server's
 * (any user of it, another client), the mirror (the applications, through
 * the view).  A name that became a FIFO would block the open until a
 * writer comes (a worker thread, and the locks it holds, stuck for good);
 * a device node's open acts on the device.  Neither is ever opened here.
 */
#pragma once

#include <sys/stat.h>

/*
 * openat(dfd, name, flags | O_NOFOLLOW | O_CLOEXEC) when name is a regular
 * file, checked before anything opens it (an O_PATH descriptor is
 * looked at, then reopened); *st (may be NULL) gets its stat.  -EINVAL
 * when it is not a regular file, else -errno.
 */
int regular_open_at(int dfd, const char *name, int flags, struct stat *st);
/* The same for an O_PATH descriptor (left open): its file reopened. */
int regular_reopen(int pathfd, int flags, struct stat *st);
