/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * walk.h: a parallel walk of one directory tree that stays on one mount.
 *
 * One thread reads directories; a pool of workers runs the per-file
 * function on batches of regular files. Files are reached by directory
 * descriptor and name, never by gluing path strings, and the number of
 * open descriptors is bounded by the tree's depth plus the queue length.
 * Mount points and automount points inside the tree are skipped.
 */
#pragma once

#include <stdint.h>

#include "fcachectl.h"

/* Called in a worker for each regular file; returns 0 or -errno. Adds the bytes it handled. */
typedef int (*fc_walk_file_fn)(void *worker_ctx, int dirfd, const char *name, uint64_t *bytes);

struct fc_walk_params {
        unsigned int workers;     /* threads; worker_ctx has this many entries (>= 1) */
        int top_only;             /* only the root directory's own files, no subdirectories */
        fc_walk_file_fn file;
        void **worker_ctx;
        const struct fcachectl_options *opts; /* progress and cancel, may be NULL */
};

struct fc_walk_stats {
        uint64_t files;           /* regular files handed to the function */
        uint64_t dirs;            /* directories read, the root included */
        uint64_t mounts_skipped;  /* mount and automount points not entered */
        uint64_t errors;          /* files or directories that failed */
        char first_error[512];    /* "name: reason" of the first failure */
};

/* Walk the tree under the directory rootfd (opened O_RDONLY|O_DIRECTORY; not closed). */
int fc_walk(int rootfd, const struct fc_walk_params *p, struct fc_walk_stats *st);

/* Open a regular file below dirfd for data without leaving dirfd's mount. */
int fc_walk_open_file(int dirfd, const char *name);
