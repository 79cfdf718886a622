/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * merge-internal.h: helpers shared by the files of libfcache-merge and not
 * part of its API: holding libgit2's global state and mapping its errors.
 */
#pragma once

#include <stdlib.h>

/*
 * libgit2 needs git_libgit2_init() before most calls (its allocator and
 * thread state live there). Every entry point that uses libgit2 calls this
 * first; it initializes libgit2 once per process. Returns 0 or -errno.
 */
int fcache_merge_git_ref(void);

/* Map a negative libgit2 return code (and its last error) to -errno. */
int fcache_merge_git_errno(int code);

static inline void fcache_merge_freep(void *p)
{
        free(*(void **) p);
}

/* A small cleanup attribute; merge/ does not depend on GLib. */
#define _cleanup_free_ __attribute__((cleanup(fcache_merge_freep)))
