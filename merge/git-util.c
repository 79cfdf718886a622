/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * git-util.c: the library's use of libgit2's global state and error codes.
 */
#include <errno.h>
#include <pthread.h>

#include <git2.h>

#include "merge-internal.h"

static pthread_once_t git_once = PTHREAD_ONCE_INIT;
static int git_init_error;

static void git_init_once(void)
{
        if (git_libgit2_init() < 0)
                git_init_error = -ENOMEM;
}

/*
 * Setting libgit2 up costs milliseconds (TLS, its crypto backend), far more
 * than a small merge, so the first use initializes it once for the life of
 * the process instead of once per call; git_libgit2_init() is reference
 * counted, so other users of libgit2 in the process are not disturbed.
 */
int fcache_merge_git_ref(void)
{
        pthread_once(&git_once, git_init_once);
        return git_init_error;
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
