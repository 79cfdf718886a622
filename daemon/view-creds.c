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
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "view.h"

#define MAX_GROUPS 256

int creds_enter(fuse_req_t req, struct creds *c)
{
        const struct fuse_ctx *ctx = fuse_req_ctx(req);
        gid_t groups[MAX_GROUPS];
        int n;

        c->switched = false;
        if (ctx->uid == 0 && ctx->gid == 0)
                return 0;
        n = fuse_req_getgroups(req, MAX_GROUPS, groups);
        if (n < 0 || n > MAX_GROUPS)
                n = 0;          /* the caller is gone or has more groups: primary only */
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
