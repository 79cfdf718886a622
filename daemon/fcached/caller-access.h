/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * caller-access.h: acting on files as the caller would (caller-access.c).
 *
 * A worker thread takes on the caller's fs uid, fs gid and groups for the
 * time of one request; the kernel then applies the caller's own permission
 * checks to every lookup and open, and threads started meanwhile (the tree
 * walk's pool) inherit them.
 */
#pragma once

#include "fcached.h"
#include "target.h"

struct fcd_identity_saved {
        int ngroups;
        gid_t groups[FCD_GROUPS_MAX];
        bool switched;
};

/* Take on c's identity in this thread only. 0 or -errno. */
int fcd_identity_enter(const struct fcd_caller *c, struct fcd_identity_saved *saved);
/* Back to the daemon's own identity. */
void fcd_identity_leave(struct fcd_identity_saved *saved);

/*
 * With the caller's identity entered: resolve the absolute path (no magic
 * /proc links; the last symlink not followed with AT_SYMLINK_NOFOLLOW) to
 * an O_PATH target, and check that the caller may read the object.
 * 0 or -errno with e set (EACCES when the caller could not read it).
 */
int fcd_caller_resolve(const char *path, unsigned int atflags, struct fc_target *t,
                       struct fc_error *e);

/* openat2(AT_FDCWD, path, flags, resolve), or openat where the kernel lacks openat2. */
int fcd_open_how(const char *path, int flags, unsigned long long resolve);

/* Open dir/name for reading as the current identity: no symlinks, no device nodes. */
int fcd_open_regular_at(int dirfd, const char *name);
