// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * view-fetch-pool.c: FetchThreads requests to the backing in flight at once
 * (the mirror's copies and look-ups, the switch's look-ups of nodes): a
 * job's items taken in turn by threads started for it.
 */
#include <pthread.h>

#include "view.h"

struct pool_job {
        void (*fn)(void *ctx, guint i);
        void *ctx;
        guint n;
        guint next;
};

static void *pool_worker(void *arg)
{
        struct pool_job *job = arg;
        guint i;

        while ((i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED)) < job->n)
                job->fn(job->ctx, i);
        return NULL;
}

/* Requests in flight to a server hide its round trips (over a slow link 16
 * pin small files faster than 8, and 32 no faster still: view.md); a local
 * backing keeps the 8 its benchmarks were measured with. */
unsigned view_fetch_threads(const struct view *v)
{
        if (v->cfg->fetch_threads)
                return v->cfg->fetch_threads;
        return v->backing_local ? 8 : 16;
}

void fetch_pool_run(struct view *v, guint n, void (*fn)(void *ctx, guint i), void *ctx)
{
        struct pool_job job = { .fn = fn, .ctx = ctx, .n = n };
        unsigned threads = view_fetch_threads(v), started = 0;
        pthread_t *tids;

        if (threads > n)
                threads = n;
        if (threads < 1)
                return;
        tids = g_new(pthread_t, threads);
        for (unsigned i = 1; i < threads; i++)
                if (pthread_create(&tids[started], NULL, pool_worker, &job) == 0)
                        started++;
        pool_worker(&job);
        for (unsigned i = 0; i < started; i++)
                pthread_join(tids[i], NULL);
        g_free(tids);
}
