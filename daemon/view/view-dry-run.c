/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-dry-run.c: `query reintegration`, what a reconnect would do now,
 * without holding anything an offline change needs while the server is asked.
 *
 * The log is copied as of now (oplog_snapshot(), under offline_lock for the
 * copy only) and the dry run runs on the copy on a thread of its own.  The
 * request waits while it moves: it gives up when no record was compared for
 * BackingTimeout (a server that stopped answering), leaving the thread to
 * finish whenever the server lets it and clean up after itself.  A long log
 * on a slow link takes as long as it takes; a dead server costs one
 * BackingTimeout.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fcachectl.h"
#include "reintegrate.h"
#include "view.h"

struct dry_run {
        pthread_mutex_t lock;
        pthread_cond_t moved;
        unsigned refs;          /* the request and the thread */
        uint64_t steps;         /* the log opened, then one per record compared */
        bool done;
        char *dir;              /* the snapshot */
        int root_fd;            /* a dup of the backing root */
        struct ctl_out items;   /* the thread's until done */
        struct reintegrate_stats st;
        int result;
};

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void dry_run_unref(struct dry_run *d)
{
        bool last;

        pthread_mutex_lock(&d->lock);
        last = --d->refs == 0;
        pthread_mutex_unlock(&d->lock);
        if (!last)
                return;
        nftw(d->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (d->root_fd >= 0)
                close(d->root_fd);
        ctlmsg_free(&d->items.msg);
        pthread_mutex_destroy(&d->lock);
        pthread_cond_destroy(&d->moved);
        g_free(d->dir);
        g_free(d);
}

static void step(struct dry_run *d)
{
        pthread_mutex_lock(&d->lock);
        d->steps++;
        pthread_cond_broadcast(&d->moved);
        pthread_mutex_unlock(&d->lock);
}

/* One record: one result, its path inside it whatever bytes it holds. */
static void dry_run_item(void *ud, const struct reintegrate_item *it)
{
        struct dry_run *d = ud;
        char conflict[64] = "";

        if (it->outcome == REINTEGRATE_CONFLICT)
                snprintf(conflict, sizeof(conflict), " conflict=%s",
                         fcache_conflict_kind_to_string(it->conflict));
        out_kv(&d->items, "record=%" PRIu64 " kind=%s outcome=%s%s path=%s", it->record->seq,
               oplog_kind_to_string(it->record->kind),
               reintegrate_outcome_to_string(it->outcome), conflict, it->path ? it->path : "");
        step(d);
}

static void *dry_run_thread(void *arg)
{
        struct oplog_options lo = OPLOG_OPTIONS_INIT;
        struct reintegrate_options opts = REINTEGRATE_OPTIONS_INIT;
        struct dry_run *d = arg;
        struct oplog *log = NULL;
        int r;

        lo.no_fsync = true;     /* a scratch copy */
        r = oplog_open(&log, d->dir, &lo);
        step(d);
        if (r == 0) {
                opts.dry_run = true;
                opts.progress = dry_run_item;
                opts.userdata = d;
                r = reintegrate_run(log, d->root_fd, &opts, &d->st);
                oplog_close(log);
        }
        pthread_mutex_lock(&d->lock);
        d->result = r;
        d->done = true;
        pthread_cond_broadcast(&d->moved);
        pthread_mutex_unlock(&d->lock);
        dry_run_unref(d);
        return NULL;
}

/* The copy of the log, in a fresh CacheDir/dry-run.XXXXXX. */
static int snapshot(struct view *v, struct dry_run *d)
{
        int r;

        d->dir = g_build_filename(v->cfg->cache_dir, "dry-run.XXXXXX", NULL);
        if (!mkdtemp(d->dir))
                return -errno;
        pthread_mutex_lock(&v->offline_lock);
        r = oplog_snapshot(v->oplog, d->dir);
        pthread_mutex_unlock(&v->offline_lock);
        return r;
}

/* Waits while the dry run moves; -ETIMEDOUT once it stood still a whole bound. */
static int wait_moving(struct view *v, struct dry_run *d, uint64_t *steps)
{
        uint64_t ms = v->cfg->backing_timeout_ms, seen = UINT64_MAX;
        struct timespec until = { 0 };
        int r = 0;

        pthread_mutex_lock(&d->lock);
        while (!d->done) {
                if (d->steps != seen) {
                        seen = d->steps;
                        clock_gettime(CLOCK_REALTIME, &until);
                        until.tv_sec += (time_t)(ms / 1000);
                        until.tv_nsec += (long)(ms % 1000) * 1000000;
                        if (until.tv_nsec >= 1000000000) {
                                until.tv_sec++;
                                until.tv_nsec -= 1000000000;
                        }
                }
                if (!ms)
                        pthread_cond_wait(&d->moved, &d->lock);
                else if (pthread_cond_timedwait(&d->moved, &d->lock, &until) == ETIMEDOUT &&
                         d->steps == seen && !d->done) {
                        r = -ETIMEDOUT;
                        break;
                }
        }
        if (r == 0)
                r = d->result;
        *steps = d->steps;
        pthread_mutex_unlock(&d->lock);
        return r;
}

int view_reintegration_dry_run(struct view *v, struct ctl_out *out, GString *err)
{
        struct dry_run *d = g_new0(struct dry_run, 1);
        uint64_t steps = 0;
        pthread_t t;
        int r;

        pthread_mutex_init(&d->lock, NULL);
        pthread_cond_init(&d->moved, NULL);
        ctlmsg_init(&d->items.msg, CTLMSG_ANSWER);
        d->refs = 1;
        d->root_fd = fcntl(v->root_fd, F_DUPFD_CLOEXEC, 0);
        r = d->root_fd < 0 ? -errno : snapshot(v, d);
        if (r < 0) {
                g_string_printf(err, "cannot copy the offline log for the dry run: %s",
                                strerror(-r));
                dry_run_unref(d);
                return r;
        }
        d->refs = 2;
        if (pthread_create(&t, NULL, dry_run_thread, d) != 0) {
                d->refs = 1;
                dry_run_unref(d);
                g_string_assign(err, "cannot start the dry run: no thread");
                return -EAGAIN;
        }
        pthread_detach(t);
        r = wait_moving(v, d, &steps);
        if (r == -ETIMEDOUT) {
                g_string_printf(err, "the server did not answer within BackingTimeout (%" PRIu64
                                " ms) after %" PRIu64 " records of the dry run",
                                v->cfg->backing_timeout_ms, steps ? steps - 1 : 0);
        } else if (r < 0) {
                g_string_printf(err, "cannot compare the log with the server: %s", strerror(-r));
        } else {
                out_kv(out, "records=%" PRIu64, d->st.total);
                out_kv(out, "apply=%" PRIu64, d->st.applied);
                out_kv(out, "already=%" PRIu64, d->st.already);
                out_kv(out, "merge=%" PRIu64, d->st.merged);
                out_kv(out, "conflict=%" PRIu64, d->st.conflicts);
                out_kv(out, "held=%" PRIu64, d->st.held);
                /* The records after the totals, as they came. */
                ctlmsg_append_attrs(&out->msg, &d->items.msg);
        }
        dry_run_unref(d);
        return r;
}
