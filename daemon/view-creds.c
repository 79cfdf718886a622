/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-creds.c: run one backing operation with the caller's credentials.
 *
 * setfsuid/setfsgid and the raw setgroups system call act on the calling
 * thread only (glibc's setgroups() would change every thread), so each FUSE
 * worker thread can take the identity of the request it serves: new objects
 * get the caller's owner and group (setgid directories included) and the
 * backing makes its own permission decisions, as it would for the caller.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "view.h"

#define MAX_GROUPS 256

/*
 * The supplementary groups of the calling thread, from the "Groups:" line of
 * /proc/PID/status (libfuse 3.14's fuse_req_getgroups() reads that file into
 * a buffer it does not terminate).  Returns the count or -errno.
 */
static int caller_groups(pid_t pid, gid_t *list, int max)
{
        char path[64], buf[8192], *p, *end;
        ssize_t len = 0, r;
        int fd, n = 0;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        while (len < (ssize_t)sizeof(buf) - 1 &&
               (r = read(fd, buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
                len += r;
        close(fd);
        buf[len] = 0;
        p = strstr(buf, "\nGroups:");
        if (!p)
                return -EIO;
        p += strlen("\nGroups:");
        while (n < max) {
                unsigned long g = strtoul(p, &end, 10);

                if (end == p)
                        break;
                list[n++] = (gid_t)g;
                p = end;
        }
        return n;
}

int creds_enter(fuse_req_t req, struct creds *c)
{
        const struct fuse_ctx *ctx = fuse_req_ctx(req);
        gid_t groups[MAX_GROUPS];
        int n;

        c->switched = false;
        if (ctx->uid == 0 && ctx->gid == 0)
                return 0;
        n = caller_groups(ctx->pid, groups, MAX_GROUPS);
        if (n < 0)
                n = 0;          /* the caller is gone: primary group only */
        if (syscall(SYS_setgroups, (size_t)n, groups) < 0)
                return -errno;
        setfsgid(ctx->gid);
        setfsuid(ctx->uid);
        c->switched = true;
        if ((uid_t)setfsuid((uid_t)-1) != ctx->uid || (gid_t)setfsgid((gid_t)-1) != ctx->gid) {
                creds_leave(c);
                return -EPERM;
        }
        return 0;
}

void creds_leave(struct creds *c)
{
        if (!c->switched)
                return;
        setfsuid(0);
        setfsgid(0);
        syscall(SYS_setgroups, (size_t)0, NULL);
        c->switched = false;
}
