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

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "fcachectl.h"
#include "result.h"

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

/*
 * A walk whose workers add up what they do in tallies of their own (no
 * locking on the hot path), folded into one sum when the walk is over.
 * Every backend that works file by file on a tree walks this way.
 */
#define FC_WALK_WORKERS_MAX 64

struct fc_walk_tally_ops {
        size_t tally_size;        /* bytes of one worker's tally (zeroed before init) */
        fc_walk_file_fn file;     /* called with the worker's tally as its context */
        /* Before the walk, for each tally; may be NULL. Returns 0 or -errno. */
        int (*init)(void *tally, void *arg);
        /* After it, for each tally whose init succeeded: fold it into sum, release what init took. */
        void (*merge)(void *sum, void *tally, void *arg);
};

struct fc_walk_tally_params {
        const struct fc_walk_tally_ops *ops;
        void *arg;                /* handed to init and merge */
        unsigned int workers;     /* clamped to 1..FC_WALK_WORKERS_MAX */
        int top_only;             /* as in fc_walk_params */
        const struct fcachectl_options *opts; /* progress and cancel, may be NULL */
        const char *display;      /* the target's name in error messages */
};

/*
 * Walk the tree under rootfd with one tally per worker, merged into sum
 * (also when the walk fails part way: what was done is counted). Returns 0
 * or -errno with e set ("NAME: cancelled", "NAME: walking the tree: ...").
 * Backends call it through fc_backend_walk() (backend.h).
 */
int fc_walk_tally(int rootfd, const struct fc_walk_tally_params *p, void *sum,
                  struct fc_walk_stats *st, struct fc_error *e);

/* The walk's own keys: dirs, mounts_skipped, errors (plus failed), first_error. */
void fc_walk_stats_add_result(struct fc_result *res, const struct fc_walk_stats *st,
                              uint64_t failed, const char *failed_first_error);
