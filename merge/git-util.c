/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * git-util.c: the library's use of libgit2's global state and error codes.
 */
#include <errno.h>

#include <git2.h>

#include "merge-internal.h"

int fcache_merge_git_ref(void)
{
        /* Reference counted inside libgit2, and thread-safe. */
        if (git_libgit2_init() < 0)
                return -ENOMEM;
        return 0;
}

void fcache_merge_git_unref(void)
{
        git_libgit2_shutdown();
}

int fcache_merge_git_errno(int code)
{
        const git_error *e;

        switch (code) {
        case GIT_ENOTFOUND:
                return -ENOENT;
        case GIT_EEXISTS:
                return -EEXIST;
        case GIT_EBUFS:
                return -ENOBUFS;
        case GIT_EINVALID:
        case GIT_EINVALIDSPEC:
        case GIT_EAMBIGUOUS:
                return -EINVAL;
        case GIT_EMISMATCH:
                /* A stored object's bytes no longer hash to its id. */
                return -EIO;
        default:
                break;
        }

        e = git_error_last();
        if (e && e->klass == GIT_ERROR_NOMEMORY)
                return -ENOMEM;
        return -EIO;
}
