/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* walk.c: the tree walker of walk.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "pagecache.h"
#include "target.h"
#include "walk.h"

#define BATCH_FILES 64
#define QUEUE_LEN 64
#define PROGRESS_NS 100000000ull

struct dir_ref {
        int fd;
        int refs; /* atomic */
};

struct batch {
        struct dir_ref *dir;
        int count;
        char *names[BATCH_FILES];
};

struct walk {
        const struct fc_walk_params *p;
        struct fc_walk_stats *st;

        pthread_mutex_t lock;
        pthread_cond_t not_empty, not_full, drained;
        struct batch *queue[QUEUE_LEN]; /* protected by lock */
        unsigned head, count;           /* protected by lock */
        unsigned busy;                  /* workers inside a batch; protected by lock */
        bool closing;                   /* no more batches; protected by lock */

        /* Counters shared with workers; atomic. */
        uint64_t files_done, bytes_done, errors;
        char first_error[512];          /* protected by lock */
        uint64_t last_progress_ns;      /* walker thread only */
        /* getdents buffer, walker thread only: one directory is read whole before descending. */
        char dents[32768];
};

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool cancelled(const struct walk *w)
{
        const struct fcachectl_options *o = w->p->opts;

        return o && o->cancel && *o->cancel;
}

static void dir_unref(struct dir_ref *d)
{
        if (__atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) == 0) {
                close(d->fd);
                free(d);
        }
}

static void batch_free(struct batch *b)
{
        for (int i = 0; i < b->count; i++)
                free(b->names[i]);
        dir_unref(b->dir);
        free(b);
}

static void note_error(struct walk *w, const char *name, int err)
{
        if (__atomic_fetch_add(&w->errors, 1, __ATOMIC_RELAXED) == 0) {
                pthread_mutex_lock(&w->lock);
                snprintf(w->first_error, sizeof(w->first_error), "%s: %s", name, strerror(err));
                pthread_mutex_unlock(&w->lock);
        }
}

static void run_batch(struct walk *w, struct batch *b, void *ctx)
{
        for (int i = 0; i < b->count; i++) {
                uint64_t bytes = 0;
                int r = w->p->file(ctx, b->dir->fd, b->names[i], &bytes);

                /* Removed while we walked, or a file bind mount: not an error. */
                if (r < 0 && r != -ENOENT && r != -EXDEV)
                        note_error(w, b->names[i], -r);
                __atomic_add_fetch(&w->files_done, 1, __ATOMIC_RELAXED);
                __atomic_add_fetch(&w->bytes_done, bytes, __ATOMIC_RELAXED);
        }
}

struct worker_arg {
        struct walk *w;
        void *ctx;
};

static void *worker_main(void *arg)
{
        struct worker_arg *a = arg;
        struct walk *w = a->w;

        pthread_mutex_lock(&w->lock);
        for (;;) {
                while (!w->count && !w->closing)
                        pthread_cond_wait(&w->not_empty, &w->lock);
                if (!w->count)
                        break;
                struct batch *b = w->queue[w->head];
                w->head = (w->head + 1) % QUEUE_LEN;
                w->count--;
                w->busy++;
                pthread_cond_signal(&w->not_full);
                pthread_mutex_unlock(&w->lock);
                if (!cancelled(w))
                        run_batch(w, b, a->ctx);
                batch_free(b);
                pthread_mutex_lock(&w->lock);
                w->busy--;
                if (!w->count && !w->busy)
                        pthread_cond_broadcast(&w->drained);
        }
        pthread_mutex_unlock(&w->lock);
        return NULL;
}

static void report_progress(struct walk *w, bool walk_done, bool force)
{
        const struct fcachectl_options *o = w->p->opts;
        uint64_t t;

        if (!o || !o->progress)
                return;
        t = now_ns();
        if (!force && t - w->last_progress_ns < PROGRESS_NS)
                return;
        w->last_progress_ns = t;
        struct fcachectl_progress pr = {
                .files_done = __atomic_load_n(&w->files_done, __ATOMIC_RELAXED),
                .files_seen = w->st->files,
                .bytes_done = __atomic_load_n(&w->bytes_done, __ATOMIC_RELAXED),
                .walk_done = walk_done,
        };
        o->progress(&pr, o->userdata);
}

static void submit(struct walk *w, struct batch *b)
{
        if (w->p->workers <= 1) {
                run_batch(w, b, w->p->worker_ctx[0]);
                batch_free(b);
                report_progress(w, false, false);
                return;
        }
        pthread_mutex_lock(&w->lock);
        while (w->count == QUEUE_LEN)
                pthread_cond_wait(&w->not_full, &w->lock);
        w->queue[(w->head + w->count) % QUEUE_LEN] = b;
        w->count++;
        pthread_cond_signal(&w->not_empty);
        pthread_mutex_unlock(&w->lock);
        report_progress(w, false, false);
}

static int openat2_beneath(int dirfd, const char *name, int flags)
{
        struct open_how how = {
                .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
                .resolve = RESOLVE_NO_XDEV | RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        };
        long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof(how));

        if (fd < 0 && errno == ENOSYS)
                fd = openat(dirfd, name, flags | O_CLOEXEC | O_NOFOLLOW);
        return fd < 0 ? -errno : (int)fd;
}

int fc_walk_open_file(int dirfd, const char *name)
{
        const int base = O_RDONLY | O_NOCTTY | O_NONBLOCK;
        int fd = openat2_beneath(dirfd, name, base | O_NOATIME);

        if (fd == -EPERM)
                fd = openat2_beneath(dirfd, name, base);
        return fd;
}

/* A directory entry that is a mount or automount point belongs to another mount. */
static bool is_mount_boundary(int dirfd, const char *name)
{
        struct statx stx;

        if (statx(dirfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_TYPE, &stx) < 0)
                return false; /* the open below will say why */
        return stx.stx_attributes & stx.stx_attributes_mask &
               (STATX_ATTR_MOUNT_ROOT | STATX_ATTR_AUTOMOUNT);
}

struct name_list {
        char **names;
        size_t count, alloc;
};

static int name_list_add(struct name_list *l, const char *name)
{
        if (l->count == l->alloc) {
                size_t na = l->alloc ? l->alloc * 2 : 16;
                char **p = realloc(l->names, na * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                l->names = p;
                l->alloc = na;
        }
        if (!(l->names[l->count] = strdup(name)))
                return -ENOMEM;
        l->count++;
        return 0;
}

static void name_list_free(struct name_list *l)
{
        for (size_t i = 0; i < l->count; i++)
                free(l->names[i]);
        free(l->names);
}

static struct batch *batch_new(struct dir_ref *d)
{
        struct batch *b = calloc(1, sizeof(*b));

        if (b) {
                b->dir = d;
                __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
        }
        return b;
}

static int walk_dir(struct walk *w, struct dir_ref *d, const char *display)
{
        char *buf = w->dents;
        struct name_list subdirs = { 0 };
        struct batch *b = NULL;
        int r = 0;

        w->st->dirs++;
        for (;;) {
                long n = syscall(SYS_getdents64, d->fd, buf, sizeof(w->dents));
                if (n < 0) {
                        note_error(w, display, errno);
                        break;
                }
                if (n == 0)
                        break;
                for (long off = 0; off < n;) {
                        struct dirent64 *de = (struct dirent64 *)(buf + off);
                        unsigned char type = de->d_type;

                        off += de->d_reclen;
                        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                                continue;
                        if (type == DT_UNKNOWN) {
                                /* The type alone: a stat wanting times makes NFS
                                 * write the file's dirty pages back. */
                                struct statx stx;
                                if (statx(d->fd, de->d_name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
                                          STATX_TYPE, &stx) < 0)
                                        continue;
                                type = S_ISREG(stx.stx_mode) ? DT_REG : S_ISDIR(stx.stx_mode) ? DT_DIR
                                                                                             : DT_LNK;
                        }
                        if (type == DT_DIR) {
                                if (w->p->top_only)
                                        continue;
                                if ((r = name_list_add(&subdirs, de->d_name)) < 0)
                                        goto out;
                                continue;
                        }
                        if (type != DT_REG)
                                continue;
                        if (!b && !(b = batch_new(d))) {
                                r = -ENOMEM;
                                goto out;
                        }
                        if (!(b->names[b->count] = strdup(de->d_name))) {
                                r = -ENOMEM;
                                goto out;
                        }
                        b->count++;
                        w->st->files++;
                        if (b->count == BATCH_FILES) {
                                submit(w, b);
                                b = NULL;
                                if (cancelled(w)) {
                                        r = -ECANCELED;
                                        goto out;
                                }
                        }
                }
        }
        if (b) {
                submit(w, b);
                b = NULL;
        }
        for (size_t i = 0; i < subdirs.count && r == 0; i++) {
                const char *name = subdirs.names[i];
                struct dir_ref *sub;
                int fd;

                if (cancelled(w)) {
                        r = -ECANCELED;
                        break;
                }
                if (is_mount_boundary(d->fd, name)) {
                        w->st->mounts_skipped++;
                        continue;
                }
                fd = openat2_beneath(d->fd, name, O_RDONLY | O_DIRECTORY | O_NOCTTY);
                if (fd == -EXDEV) {
                        w->st->mounts_skipped++;
                        continue;
                }
                if (fd < 0) {
                        if (fd != -ENOENT)
                                note_error(w, name, -fd);
                        continue;
                }
                if (!(sub = malloc(sizeof(*sub)))) {
                        close(fd);
                        r = -ENOMEM;
                        break;
                }
                sub->fd = fd;
                sub->refs = 1;
                r = walk_dir(w, sub, name);
                dir_unref(sub);
        }
out:
        if (b)
                batch_free(b);
        name_list_free(&subdirs);
        return r;
}

int fc_walk(int rootfd, const struct fc_walk_params *p, struct fc_walk_stats *st)
{
        struct walk w = { .p = p, .st = st };
        struct worker_arg *args = NULL;
        pthread_t *threads = NULL;
        unsigned started = 0;
        struct dir_ref *root;
        int r;

        memset(st, 0, sizeof(*st));
        root = malloc(sizeof(*root));
        if (!root)
                return -ENOMEM;
        root->fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
        if (root->fd < 0) {
                free(root);
                return -errno;
        }
        root->refs = 1;
        pthread_mutex_init(&w.lock, NULL);
        pthread_cond_init(&w.not_empty, NULL);
        pthread_cond_init(&w.not_full, NULL);
        pthread_cond_init(&w.drained, NULL);
        if (p->workers > 1) {
                threads = calloc(p->workers, sizeof(*threads));
                args = calloc(p->workers, sizeof(*args));
                if (!threads || !args) {
                        r = -ENOMEM;
                        dir_unref(root);
                        goto out;
                }
                for (; started < p->workers; started++) {
                        args[started] = (struct worker_arg){ &w, p->worker_ctx[started] };
                        if (pthread_create(&threads[started], NULL, worker_main, &args[started]))
                                break;
                }
                if (started == 0) {
                        r = -EAGAIN;
                        dir_unref(root);
                        goto out;
                }
        }
        r = walk_dir(&w, root, ".");
        dir_unref(root);
        if (started) {
                struct timespec ts;

                pthread_mutex_lock(&w.lock);
                w.closing = true;
                pthread_cond_broadcast(&w.not_empty);
                while (w.count || w.busy) {
                        clock_gettime(CLOCK_REALTIME, &ts);
                        ts.tv_nsec += PROGRESS_NS;
                        if (ts.tv_nsec >= 1000000000L) {
                                ts.tv_sec++;
                                ts.tv_nsec -= 1000000000L;
                        }
                        pthread_cond_timedwait(&w.drained, &w.lock, &ts);
                        pthread_mutex_unlock(&w.lock);
                        report_progress(&w, true, false);
                        pthread_mutex_lock(&w.lock);
                }
                pthread_mutex_unlock(&w.lock);
                for (unsigned i = 0; i < started; i++)
                        pthread_join(threads[i], NULL);
        }
        if (r == 0 && cancelled(&w))
                r = -ECANCELED;
        report_progress(&w, true, true);
out:
        st->errors = w.errors;
        memcpy(st->first_error, w.first_error, sizeof(st->first_error));
        free(threads);
        free(args);
        pthread_mutex_destroy(&w.lock);
        pthread_cond_destroy(&w.not_empty);
        pthread_cond_destroy(&w.not_full);
        pthread_cond_destroy(&w.drained);
        return r;
}

int fc_walk_tally(int rootfd, const struct fc_walk_tally_params *p, void *sum,
                  struct fc_walk_stats *st, struct fc_error *e)
{
        const struct fc_walk_tally_ops *ops = p->ops;
        unsigned int n = p->workers < 1 ? 1 : p->workers > FC_WALK_WORKERS_MAX
                                               ? FC_WALK_WORKERS_MAX : p->workers;
        unsigned int ready = 0;
        char *tallies = calloc(n, ops->tally_size);
        void **ctx = calloc(n, sizeof(*ctx));
        int r = 0;

        memset(st, 0, sizeof(*st));
        if (!tallies || !ctx) {
                free(tallies);
                free(ctx);
                return fc_error_set(e, ENOMEM, "out of memory");
        }
        for (; ready < n; ready++) {
                ctx[ready] = tallies + (size_t)ready * ops->tally_size;
                if (ops->init && (r = ops->init(ctx[ready], p->arg)) < 0)
                        break;
        }
        if (r == 0) {
                struct fc_walk_params wp = {
                        .workers = n, .top_only = p->top_only, .file = ops->file,
                        .worker_ctx = ctx, .opts = p->opts,
                };
                r = fc_walk(rootfd, &wp, st);
                if (r == -ECANCELED)
                        fc_error_set(e, ECANCELED, "%s: cancelled", p->display);
                else if (r < 0)
                        fc_error_set(e, -r, "%s: walking the tree: %s", p->display,
                                     strerror(-r));
        } else {
                fc_error_set(e, -r, "%s: cannot start the walk: %s", p->display, strerror(-r));
        }
        for (unsigned int i = 0; i < ready; i++)
                ops->merge(sum, ctx[i], p->arg);
        free(tallies);
        free(ctx);
        return r;
}

int fc_backend_walk(struct fc_request *req, int dirfd, bool top_only, unsigned int workers,
                    const struct fc_walk_tally_ops *ops, void *seed, void *sum,
                    struct fc_walk_stats *st)
{
        struct fc_walk_tally_params p = {
                .ops = ops, .arg = seed, .top_only = top_only, .opts = req->opts,
                .workers = req->opts->workers ? req->opts->workers : workers,
                .display = req->target->display,
        };

        return fc_walk_tally(dirfd, &p, sum, st, req->error);
}

int fc_backend_refuse_not_file(struct fc_request *req)
{
        mode_t mode = req->target->stx.stx_mode;

        if (S_ISREG(mode) || S_ISDIR(mode))
                return 0;
        return fc_error_set(req->error, EINVAL, "%s: is a %s; %s applies to regular files and "
                            "directories", req->target->display, fc_file_type_name(mode),
                            fc_op_name(req->cmd->op));
}

void fc_backend_note_pages_kept(struct fc_request *req)
{
        if (!fc_pages_dropped_at_open(req->target->fd))
                return;
        fc_result_add_str(req->result, "kept_at_next_open", "only-with-a-lease");
        fc_result_add_str(req->result, "kept_at_next_open_reason",
                          "cifs drops a file's clean pages when it is opened without a read "
                          "lease or oplock, which the SMB server grants or not: these pages "
                          "may not be there for the next reader");
}

void fc_backend_note_unstable_unmeasured(struct fc_request *req)
{
        if (!fc_commits_later(req->target->fd))
                return;
        fc_result_add_str(req->result, "unstable", "not-measured");
        fc_result_add_str(req->result, "unstable_reason",
                          "NFS pages written to the server but not yet committed there are "
                          "neither dirty nor under writeback to cachestat(2); fcache.ko counts "
                          "them (pages_unstable)");
}

int fc_backend_refuse_memory_backed(struct fc_request *req, int fd, const char *what)
{
        if (!fc_memory_backed(fd))
                return 0;
        return fc_error_set(req->error, EOPNOTSUPP, "%s: is on a memory filesystem (tmpfs or "
                            "ramfs): its page cache is the only copy of the data, so %s cannot "
                            "drop it", what, fc_op_name(req->cmd->op));
}

void fc_walk_stats_add_result(struct fc_result *res, const struct fc_walk_stats *st,
                              uint64_t failed, const char *failed_first_error)
{
        fc_result_add_u64(res, "dirs", st->dirs);
        fc_result_add_u64(res, "mounts_skipped", st->mounts_skipped);
        fc_result_add_u64(res, "errors", st->errors + failed);
        if (st->errors)
                fc_result_add_str(res, "first_error", st->first_error);
        else if (failed && failed_first_error)
                fc_result_add_str(res, "first_error", failed_first_error);
}
