/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reintegrate-pool.c: replaying independent records of the offline log at
 * the same time (see reintegrate-pool.h for what depends on what).
 *
 * The unfinished records form a window in log order (the records before it
 * have all finished); a waiting record of the window becomes ready when no
 * earlier record still in the window depends with it.  Threads take the
 * first ready record; each finish lets the window slide and looks again.
 * The window bounds that look (it is quadratic in the window).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "reintegrate-pool.h"

#define WINDOW 64

struct deps {
        bool barrier;
        unsigned nex, nsh;
        uint64_t ex[4];         /* objects and names the record changes */
        uint64_t sh[2];         /* directories it works in */
};

enum slot_state { WAITING, READY, RUNNING };

struct slot {
        unsigned i;
        enum slot_state state;
        unsigned blocker;       /* WAITING: the earlier record it was last found to wait for */
        struct deps d;
};

struct pool {
        pthread_mutex_t *mu;
        pthread_cond_t cv;
        const struct reintegrate_pool_ops *ops;
        void *ud;
        unsigned n, next;               /* next: the first record not yet in the window */
        struct slot win[WINDOW];        /* the unfinished records, in log order */
        unsigned len, running;
        bool *finished;                 /* per record: done (its blockers wait no more) */
        bool stop;
        int err;
};

/* Objects and names share one key space: an object's id is even, a name's hash odd. */
static uint64_t obj_key(uint64_t lid)
{
        return lid << 1;
}

static uint64_t name_key(uint64_t parent, const char *name)
{
        uint64_t h = 1469598103934665603ull ^ parent;

        for (const unsigned char *p = (const unsigned char *)name; *p; p++)
                h = (h ^ *p) * 1099511628211ull;
        return h | 1;
}

static void deps_of(const struct oplog_record *r, struct deps *d)
{
        memset(d, 0, sizeof(*d));
        d->barrier = r->kind == OPLOG_RENAME || r->kind == OPLOG_RMDIR;
        d->ex[d->nex++] = obj_key(r->lid);
        if (r->other)
                d->ex[d->nex++] = obj_key(r->other);
        if (r->parent && r->name)
                d->ex[d->nex++] = name_key(r->parent, r->name);
        if (r->parent2 && r->name2)
                d->ex[d->nex++] = name_key(r->parent2, r->name2);
        if (r->parent)
                d->sh[d->nsh++] = obj_key(r->parent);
        if (r->parent2)
                d->sh[d->nsh++] = obj_key(r->parent2);
}

static bool any_in(const uint64_t *a, unsigned na, const uint64_t *b, unsigned nb)
{
        for (unsigned i = 0; i < na; i++)
                for (unsigned j = 0; j < nb; j++)
                        if (a[i] == b[j])
                                return true;
        return false;
}

static bool depend(const struct deps *a, const struct deps *b)
{
        return a->barrier || b->barrier || any_in(a->ex, a->nex, b->ex, b->nex) ||
               any_in(a->ex, a->nex, b->sh, b->nsh) || any_in(a->sh, a->nsh, b->ex, b->nex);
}

/*
 * Slides the window past finished records and marks what may start now.  A
 * waiting record whose last found blocker has not finished is not looked
 * at again: each finish costs about the window, not its square.
 */
static void schedule(struct pool *p)
{
        while (!p->stop && p->len < WINDOW && p->next < p->n) {
                struct slot *s = &p->win[p->len++];

                s->i = p->next++;
                s->state = WAITING;
                s->blocker = UINT_MAX;
                deps_of(p->ops->record(p->ud, s->i), &s->d);
        }
        for (unsigned j = 0; j < p->len; j++) {
                struct slot *s = &p->win[j];
                bool go = true;

                if (s->state != WAITING ||
                    (s->blocker != UINT_MAX && !p->finished[s->blocker]))
                        continue;
                for (unsigned k = 0; k < j && go; k++) {
                        go = !depend(&p->win[k].d, &s->d);
                        if (!go)
                                s->blocker = p->win[k].i;
                }
                if (go)
                        s->state = READY;
        }
}

static void finish(struct pool *p, unsigned i)
{
        p->finished[i] = true;
        for (unsigned j = 0; j < p->len; j++) {
                if (p->win[j].i != i)
                        continue;
                memmove(&p->win[j], &p->win[j + 1], (p->len - j - 1) * sizeof(p->win[0]));
                p->len--;
                return;
        }
}

static struct slot *ready(struct pool *p)
{
        for (unsigned j = 0; j < p->len; j++)
                if (p->win[j].state == READY)
                        return &p->win[j];
        return NULL;
}

/*
 * After a record finished: wakes as many waiting threads as there are
 * records ready beyond the one this thread takes next (all of them at the
 * end, to leave).  Waking every thread at each finish made an untar's
 * replay mostly context switches on a small machine.
 */
static void wake(struct pool *p)
{
        unsigned n = 0;

        if (p->stop || (!p->len && p->next == p->n)) {
                pthread_cond_broadcast(&p->cv);
                return;
        }
        for (unsigned j = 0; j < p->len; j++)
                n += p->win[j].state == READY;
        while (n-- > 1)
                pthread_cond_signal(&p->cv);
}

struct worker {
        struct pool *p;
        unsigned id;
        pthread_t thread;
};

static void *work(void *arg)
{
        struct worker *w = arg;
        struct pool *p = w->p;

        pthread_mutex_lock(p->mu);
        for (;;) {
                struct slot *s = p->stop ? NULL : ready(p);
                unsigned i;
                int e;

                if (s) {
                        if (p->ops->cancel && p->ops->cancel(p->ud)) {
                                p->stop = true;
                                if (!p->err)
                                        p->err = -ECANCELED;
                                continue;
                        }
                        s->state = RUNNING;
                        i = s->i;
                        p->running++;
                        e = p->ops->run(p->ud, w->id, i);
                        p->running--;
                        finish(p, i);
                        if (e < 0) {
                                p->stop = true;
                                if (!p->err)
                                        p->err = e;
                        } else {
                                p->ops->done(p->ud, w->id, i, e);
                        }
                        schedule(p);
                        wake(p);
                        continue;
                }
                if (!p->running && (p->stop || (!p->len && p->next == p->n)))
                        break;
                pthread_cond_wait(&p->cv, p->mu);
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(p->mu);
        return NULL;
}

int reintegrate_pool_run(pthread_mutex_t *mu, unsigned threads, unsigned n,
                         const struct reintegrate_pool_ops *ops, void *ud)
{
        struct pool *p;
        struct worker *ws;
        unsigned started = 1;
        int e;

        if (!threads)
                threads = 1;
        if (threads > n)
                threads = n ? n : 1;
        p = calloc(1, sizeof(*p));
        ws = calloc(threads, sizeof(*ws));
        if (p)
                p->finished = calloc(n ? n : 1, sizeof(*p->finished));
        if (!p || !ws || !p->finished) {
                if (p)
                        free(p->finished);
                free(p);
                free(ws);
                return -ENOMEM;
        }
        p->mu = mu;
        p->ops = ops;
        p->ud = ud;
        p->n = n;
        pthread_cond_init(&p->cv, NULL);
        pthread_mutex_lock(mu);
        schedule(p);
        pthread_mutex_unlock(mu);
        for (unsigned t = 0; t < threads; t++) {
                ws[t].p = p;
                ws[t].id = t;
        }
        /* The caller is worker 0; fewer threads than asked for still finish the run. */
        for (unsigned t = 1; t < threads; t++) {
                if (pthread_create(&ws[t].thread, NULL, work, &ws[t]) != 0)
                        break;
                started++;
        }
        work(&ws[0]);
        for (unsigned t = 1; t < started; t++)
                pthread_join(ws[t].thread, NULL);
        e = p->err;
        pthread_cond_destroy(&p->cv);
        free(p->finished);
        free(ws);
        free(p);
        return e;
}
