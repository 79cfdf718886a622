/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reintegrate-pool.h: the order in which reintegration replays records, and
 * a small pool of threads that replays independent ones at the same time.
 *
 * Two records depend on each other when they touch the same object
 * (the record's object, a rename's replaced or exchanged one) or the same
 * name in a directory, or when one makes, changes or moves a directory the
 * other works in (its parent).  Records that only share a parent (creates
 * in one directory) are independent.  A rename and an rmdir wait for every
 * earlier record and hold every later one: they move or end whole subtrees,
 * and records below them find their directories by path.  Dependent
 * records run in log order; a record starts once every earlier record it
 * depends on has finished.
 *
 * The pool serializes the records' bookkeeping with one mutex: a record
 * runs with it held and drops it only around calls to the backing, so that
 * what a record changes in memory and the mark that records it stay one
 * step to every other thread.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "oplog.h"

/* Threads that replay a log when the caller does not say. */
#define REINTEGRATE_POOL_THREADS 8

struct reintegrate_pool_ops {
        /* Record @i of the log, for its dependencies. */
        const struct oplog_record *(*record)(void *ud, unsigned i);
        /*
         * Replays record @i on thread @worker, called and returning with the
         * mutex held: an outcome (>= 0) or -errno, which stops the run (the
         * records in flight finish; no new one starts).
         */
        int (*run)(void *ud, unsigned worker, unsigned i);
        /* Record @i finished with @outcome (>= 0), under the mutex, one at a time. */
        void (*done)(void *ud, unsigned worker, unsigned i, int outcome);
        /* Asked under the mutex before each record starts: true stops the run (-ECANCELED). */
        bool (*cancel)(void *ud);
};

/*
 * Replays records 0..@n-1 on @threads threads (1: in order on the calling
 * thread).  @mu is the mutex the records drop around backing calls; the
 * caller does not hold it.  0 when every record ran, else the first error.
 */
int reintegrate_pool_run(pthread_mutex_t *mu, unsigned threads, unsigned n,
                         const struct reintegrate_pool_ops *ops, void *ud);
