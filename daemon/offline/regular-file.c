/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* regular-file.c: opening a name that must be a regular file (see the header). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "regular-file.h"

int regular_reopen(int pathfd, int flags, struct stat *st)
{
        struct stat own;
        char p[64];
        int fd;

        if (!st)
                st = &own;
        if (fstat(pathfd, st) < 0)
                return -errno;
        if (!S_ISREG(st->st_mode))
                return -EINVAL;
        /* The same inode, whatever its name points to now. */
        snprintf(p, sizeof(p), "/proc/self/fd/%d", pathfd);
        fd = open(p, (flags & ~(O_NOFOLLOW | O_CREAT | O_EXCL)) | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

int regular_open_at(int dfd, const char *name, int flags, struct stat *st)
{
        int pfd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC), fd;

        if (pfd < 0)
                return -errno;
        fd = regular_reopen(pfd, flags, st);
        close(pfd);
        return fd;
}
