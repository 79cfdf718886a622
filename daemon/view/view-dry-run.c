/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-dry-run.c: `query reintegration`, what a reconnect would do now,
 * without holding anything an offline change needs while the server is asked.
 *
 * The log is copied as of now (oplog_snapshot(), under offline_lock for the
 * copy only) and the dry run runs on the copy on a thread of its own
 * (backing_call_moving): the request waits while records are compared and
 * gives up when none was for BackingTimeout (a server that stopped
 * answering); the thread finishes whenever the server lets it and removes
 * the copy.  A long log on a slow link takes as long as it takes; a dead
 * server costs one BackingTimeout.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fcachectl.h"
#include "reintegrate.h"
#include "view.h"

struct dry_run {
        char *dir;              /* the snapshot */
        int root_fd;            /* a dup of the backing root */
        bool names_identify;    /* the view's, as the run started */
        struct backing_progress *progress;
        struct ctl_out items;
        struct reintegrate_stats st;
};

static void dry_run_free(void *arg)
{
        struct dry_run *d = arg;

        if (d->dir)
                view_remove_tree(AT_FDCWD, d->dir);
        if (d->root_fd >= 0)
                close(d->root_fd);
        ctlmsg_free(&d->items.msg);
        g_free(d->dir);
        g_free(d);
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
        backing_progress_step(d->progress);
}

static int dry_run_work(void *arg, struct backing_progress *p)
{
        struct oplog_options lo = OPLOG_OPTIONS_INIT;
        struct reintegrate_options opts = REINTEGRATE_OPTIONS_INIT;
        struct dry_run *d = arg;
        struct oplog *log = NULL;
        int r;

        d->progress = p;
        lo.no_fsync = true;     /* a scratch copy */
        r = oplog_open(&log, d->dir, &lo);
        backing_progress_step(p);
        if (r < 0)
                return r;
        opts.dry_run = true;
        opts.names_identify = d->names_identify;
        opts.progress = dry_run_item;
        opts.userdata = d;
        r = reintegrate_run(log, d->root_fd, &opts, &d->st);
        oplog_close(log);
        return r == -ETIMEDOUT ? -EIO : r;      /* -ETIMEDOUT: given up on */
}

void view_dry_run_sweep(struct view *v)
{
        DIR *d = opendir(v->cfg->cache_dir);
        struct dirent *de;

        while (d && (de = readdir(d)))
                if (!strncmp(de->d_name, "dry-run.", 8))
                        view_remove_tree(dirfd(d), de->d_name);
        if (d)
                closedir(d);
}

/* The copy of the log, in a fresh CacheDir/dry-run.XXXXXX. */
static int snapshot(struct view *v, struct dry_run *d)
{
        int r;

        d->dir = g_build_filename(v->cfg->cache_dir, "dry-run.XXXXXX", NULL);
        if (!mkdtemp(d->dir)) {
                r = -errno;
                g_free(d->dir);
                d->dir = NULL;
                return r;
        }
        pthread_mutex_lock(&v->offline_lock);
        r = oplog_snapshot(v->oplog, d->dir);
        pthread_mutex_unlock(&v->offline_lock);
        return r;
}

int view_reintegration_dry_run(struct view *v, struct ctl_out *out, GString *err)
{
        struct dry_run *d = g_new0(struct dry_run, 1);
        uint64_t steps = 0;
        int r;

        ctlmsg_init(&d->items.msg, CTLMSG_ANSWER);
        d->root_fd = fcntl(v->root_fd, F_DUPFD_CLOEXEC, 0);
        d->names_identify = __atomic_load_n(&v->names_identify, __ATOMIC_ACQUIRE);
        r = d->root_fd < 0 ? -errno : snapshot(v, d);
        if (r < 0) {
                g_string_printf(err, "cannot copy the offline log for the dry run: %s",
                                strerror(-r));
                dry_run_free(d);
                return r;
        }
        r = backing_call_moving(v, dry_run_work, d, dry_run_free, &steps);
        if (r == -ETIMEDOUT) {
                g_string_printf(err, "the server did not answer within BackingTimeout (%" PRIu64
                                " ms) after %" PRIu64 " records of the dry run",
                                v->cfg->backing_timeout_ms, steps ? steps - 1 : 0);
                return r;       /* d is the thread's */
        }
        if (r < 0) {
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
        dry_run_free(d);
        return r;
}
