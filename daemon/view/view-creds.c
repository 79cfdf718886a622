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

void creds_capture(fuse_req_t req, struct caller_id *id)
{
        const struct fuse_ctx *ctx = fuse_req_ctx(req);
        int n = 0;

        id->uid = ctx->uid;
        id->gid = ctx->gid;
        if (ctx->uid || ctx->gid)
                n = caller_groups(ctx->pid, id->groups, CALLER_GROUPS_MAX);
        id->ngroups = n < 0 ? 0 : n;    /* the caller is gone: primary group only */
}

int creds_enter_id(const struct caller_id *id, struct creds *c)
{
        c->switched = false;
        if (id->uid == 0 && id->gid == 0)
                return 0;
        if (syscall(SYS_setgroups, (size_t)id->ngroups, id->groups) < 0)
                return -errno;
        setfsgid(id->gid);
        setfsuid(id->uid);
        c->switched = true;
        if ((uid_t)setfsuid((uid_t)-1) != id->uid || (gid_t)setfsgid((gid_t)-1) != id->gid) {
                creds_leave(c);
                return -EPERM;
        }
        return 0;
}

int creds_enter(fuse_req_t req, struct creds *c)
{
        struct caller_id id;

        creds_capture(req, &id);
        return creds_enter_id(&id, c);
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
