/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-pin.c: walks over a backing subtree for pins (hoarding), unpins and
 * flushes.  A pin is admitted before anything is fetched: the sizes of the
 * files not yet pinned must fit in CacheSize minus Reserve minus what is
 * already pinned, else it fails at once with the size it needs.  Then every
 * file is marked pinned in the store (never culled) and fetched completely
 * into the mirror, which is its one local copy (the store serves it from
 * there: view-mirror.c), by a pool of FetchThreads copies in flight.  A
 * non-recursive pin of a directory pins the files in it without mirroring
 * them: those are fetched into the store's blocks.  The hoard thread
 * repeats the pin for every recorded pin, so a pinned subtree stays complete
 * as it changes on the server.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "view.h"

typedef int (*file_fn)(struct view *v, int dfd, const char *name, const struct stat *st,
                       void *ud);

struct walk {
        struct view *v;
        struct pin_result *res;
        file_fn fn;
        void *ud;
        bool recursive;
        bool skip_nocache;      /* objects marked cacheable off (and what is below) left out */
        struct pin_job *job;    /* NULL, or the job that can cancel and follow the walk */
};

static bool walk_cancelled(const struct walk *w)
{
        return w->job && w->job->cancel;
}

static int walk_dir(struct walk *w, int dfd, int depth)
{
        DIR *d;
        struct dirent *de;
        int r = 0;

        if (depth > VIEW_MAX_DEPTH)
                return -ELOOP;
        d = fdopendir(dfd);
        if (!d) {
                r = -errno;
                close(dfd);
                return r;
        }
        w->res->dirs++;
        while ((de = readdir(d)) && !walk_cancelled(w)) {
                struct stat st;
                int cfd;

                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        w->res->failed++;
                        continue;
                }
                if (w->skip_nocache && store_is_nocache(w->v->store, st.st_ino)) {
                        w->res->skipped++;
                        continue;
                }
                if (S_ISREG(st.st_mode)) {
                        w->res->files++;
                        w->res->total_bytes += (uint64_t)st.st_size;
                        if (w->fn(w->v, dirfd(d), de->d_name, &st, w->ud) < 0)
                                w->res->failed++;
                        pin_job_progress(w->job, w->res);
                } else if (S_ISDIR(st.st_mode) && w->recursive) {
                        cfd = dir_open_noatime(dirfd(d), de->d_name, O_NOFOLLOW);
                        if (cfd < 0 || walk_dir(w, cfd, depth + 1) < 0)
                                w->res->failed++;
                }
        }
        closedir(d);
        return r == 0 && walk_cancelled(w) ? -ECANCELED : r;
}

/* fd: O_PATH descriptor of the walk's root (file or directory). */
static int walk_as(struct view *v, int fd, bool recursive, bool skip_nocache, file_fn fn,
                   void *ud, struct pin_result *res, struct pin_job *job)
{
        struct walk w = { v, res, fn, ud, recursive, skip_nocache, job };
        struct stat st;
        int dfd;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (S_ISREG(st.st_mode)) {
                res->files++;
                res->total_bytes += (uint64_t)st.st_size;
                return fn(v, fd, NULL, &st, ud);
        }
        if (!S_ISDIR(st.st_mode))
                return -EINVAL;
        dfd = dir_open_noatime(fd, ".", 0);
        if (dfd < 0)
                return -errno;
        return walk_dir(&w, dfd, 0);
}

static int walk(struct view *v, int fd, bool recursive, file_fn fn, void *ud,
                struct pin_result *res, struct pin_job *job)
{
        return walk_as(v, fd, recursive, false, fn, ud, res, job);
}

static int open_file(int dfd, const char *name)
{
        /* O_NOATIME: a pin is not an access by an application. */
        return name ? regular_open_at(dfd, name, O_RDONLY | O_NOATIME, NULL)
                    : backing_reopen(dfd, O_RDONLY | O_NOATIME);
}

static int measure_one(struct view *v, int dfd, const char *name, const struct stat *st,
                       void *ud)
{
        struct pin_result *res = ud;
        struct sobj_info info;

        if (store_info_ino(v->store, st->st_ino, &info) == 0 && info.pin >= 0)
                return 0;
        res->needed += (uint64_t)st->st_size;
        return 0;
}

struct fill_ctx {
        struct pin_result *res;
        int prio;
        struct pin_job *job;
};

/* Marks backing file @st pinned in the store (its content is fetched by the
 * caller); a job remembers what it newly pinned, to undo a cancel. */
static int mark_pinned(struct view *v, const struct stat *st, int prio, struct pin_job *job,
                       struct sobj **out)
{
        struct sobj *o;
        bool same;
        int r;

        if (job) {
                struct sobj_info info;
                uint64_t ino = (uint64_t)st->st_ino;

                if (store_info_ino(v->store, st->st_ino, &info) < 0 || info.pin < 0)
                        g_array_append_val(job->newly_pinned, ino);
        }
        r = store_obj_get(v->store, st, true, 0, &same, &o);
        if (r == 0) {
                r = store_obj_set_pin(v->store, o, prio);
                if (r == 0 && out)
                        *out = o;
                else
                        store_obj_put(v->store, o);
        }
        if (r < 0)
                log_warn("Failed to pin inode %" PRIu64 ": %s", (uint64_t)st->st_ino,
                         strerror(-r));
        return r;
}

static int mark_for_mirror(struct view *v, const struct stat *st, struct mirror_fill *fill)
{
        return mark_pinned(v, st, fill->prio, fill->job, NULL);
}

/* A file pinned without its mirror (a directory pinned non-recursively):
 * fetched into the store's blocks. */
static int pin_one(struct view *v, int dfd, const char *name, const struct stat *lst, void *ud)
{
        struct fill_ctx *c = ud;
        struct sobj *o;
        struct stat st;
        int fd, r;

        fd = open_file(dfd, name);
        if (fd < 0)
                return fd;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        r = mark_pinned(v, &st, c->prio, c->job, &o);
        if (r == 0) {
                r = store_obj_fill(v->store, o, fd, &c->res->fetched);
                store_obj_put(v->store, o);
                if (r < 0)
                        log_warn("Failed to hoard inode %" PRIu64 ": %s",
                                 (uint64_t)st.st_ino, strerror(-r));
        }
        close(fd);
        return r;
}

/* Unpins the store object of backing inode @ino, if it has one. */
static int unpin_ino(struct view *v, uint64_t ino)
{
        struct sobj *o;
        int r;

        if (store_obj_find(v->store, ino, &o) < 0)
                return 0;
        r = store_obj_unpin(v->store, o);
        store_obj_put(v->store, o);
        return r;
}

/* A cancelled job: the files it pinned that were not pinned before are unpinned. */
static void pin_job_undo(struct view *v, struct pin_job *job)
{
        for (guint i = 0; i < job->newly_pinned->len; i++)
                unpin_ino(v, g_array_index(job->newly_pinned, uint64_t, i));
}

int pin_subtree(struct view *v, int fd, bool recursive, int prio, bool dry_run,
                struct pin_result *res, uint64_t *available, struct pin_job *job)
{
        struct fill_ctx c = { res, prio, job };
        struct mirror_fill fill = { res, job, prio, mark_for_mirror };
        struct store_stats st;
        struct stat fst;
        char *rel;
        int r;

        memset(res, 0, sizeof(*res));
        if (available) {
                r = walk(v, fd, recursive, measure_one, res, res, NULL);
                if (r < 0)
                        return r;
                if (job)
                        job->files_total = res->files;
                store_get_stats(v->store, &st);
                *available = st.capacity > st.pinned ? st.capacity - st.pinned : 0;
                if (res->needed > *available)
                        return -ENOSPC;
                if (dry_run)
                        return 0;
                memset(res, 0, sizeof(*res));
                res->needed = 0;
        }
        if (fstat(fd, &fst) < 0)
                return -errno;
        rel = view_rel_path(v->root_fd, fd, NULL);
        if (!rel)
                return -ENAMETOOLONG;
        if (recursive || !S_ISDIR(fst.st_mode)) {
                r = mirror_fill_path(v, rel, recursive, &fill);
                res->mirror_err = r == -ECANCELED ? 0 : r;
                if (r != -ECANCELED)
                        r = 0;  /* what failed is counted; the hoard walk retries */
        } else {
                r = walk(v, fd, recursive, pin_one, &c, res, job);
                res->mirror_err = r < 0 ? 0 : mirror_sync_path(v, rel, false);
        }
        if (r == -ECANCELED) {
                pin_job_undo(v, job);
                /* What it mirrored goes, unless another pin holds it. */
                mirror_unpin_path(v, rel);
        }
        g_free(rel);
        return r;
}

static int unpin_one(struct view *v, int dfd, const char *name, const struct stat *st,
                     void *ud)
{
        return unpin_ino(v, st->st_ino);
}

int unpin_subtree(struct view *v, int fd, bool recursive, struct pin_result *res)
{
        memset(res, 0, sizeof(*res));
        return walk(v, fd, recursive, unpin_one, NULL, res, NULL);
}

static int flush_one(struct view *v, int dfd, const char *name, const struct stat *st,
                     void *ud)
{
        struct pin_result *res = ud;
        struct sobj_info info;
        fuse_ino_t id;
        int r;

        if (store_info_ino(v->store, st->st_ino, &info) < 0 || !info.bytes)
                return 0;
        r = store_drop_ino(v->store, st->st_ino, false);
        if (r < 0)
                return r;
        if (r == 0) {
                res->needed++;          /* kept: pinned */
                return 0;
        }
        res->fetched++;                 /* dropped */
        id = vnode_id_of_ino(v, st->st_ino);
        if (id && v->se)
                fuse_lowlevel_notify_inval_inode(v->se, id, 0, 0);
        return 0;
}

int flush_subtree(struct view *v, int fd, bool recursive, struct pin_result *res)
{
        memset(res, 0, sizeof(*res));
        return walk(v, fd, recursive, flush_one, res, res, NULL);
}

static int hoard_one(void *ud, const char *path, int prio)
{
        struct view *v = ud;
        struct pin_result res;
        int fd = view_open_path(v, path, O_PATH | O_NOFOLLOW);

        if (fd < 0) {
                log_warn("Pinned path '%s' cannot be opened: %s, keeping the pin", path,
                         strerror(-fd));
                return 0;
        }
        pin_subtree(v, fd, true, prio, false, &res, NULL, NULL);
        close(fd);
        if (res.fetched)
                log_info("Hoard walk of '%s' fetched %" PRIu64 " bytes", path, res.fetched);
        return 0;
}

int pin_walk_all(struct view *v)
{
        /* Offline there is no server to walk; reconnecting resyncs the mirror.  On a
         * metered connection the walk waits (Metered=pause). */
        if (view_offline(v) || view_hoard_paused(v))
                return 0;
        return store_pin_foreach(v->store, hoard_one, v);
}

int view_open_path(struct view *v, const char *path, int flags)
{
        /* A pinned path is what is there now: never through a symlink (a user's,
         * pointing where that user cannot go). */
        struct open_how how = { .flags = (uint64_t)(flags | O_CLOEXEC),
                                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                           RESOLVE_NO_MAGICLINKS };
        size_t ml = strlen(v->cfg->mountpoint);
        int fd;

        if (path[0] == '/') {
                if (strncmp(path, v->cfg->mountpoint, ml) || (path[ml] && path[ml] != '/'))
                        return -EXDEV;
                path += ml;
        }
        while (*path == '/')
                path++;
        if (!*path)
                path = ".";
        fd = (int)syscall(SYS_openat2, v->root_fd, path, &how, sizeof(how));
        return fd < 0 ? -errno : fd;
}

/*
 * prefetch: the files of a subtree fetched completely into the store
 * (unpinned: cullable as any cached file), FetchThreads at a time, as a
 * pin's copies are.  The walk queues the files; each batch of PREFETCH_BATCH
 * is fetched by the pool before the walk goes on.
 */
#define PREFETCH_BATCH 64

struct prefetch_item {
        int dfd;                /* a dup of the directory's descriptor, or the file's own */
        char *name;             /* NULL: dfd is the file */
};

struct prefetch {
        struct view *v;
        struct pin_result *res;
        GArray *items;          /* struct prefetch_item */
        guint next;             /* the next item a worker takes */
};

static void *prefetch_worker(void *arg)
{
        struct prefetch *p = arg;
        guint i;

        while ((i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED)) < p->items->len) {
                struct prefetch_item *it = &g_array_index(p->items, struct prefetch_item, i);
                uint64_t got = 0;
                struct sobj *o;
                struct stat st;
                bool same;
                int fd = open_file(it->dfd, it->name), r;

                r = fd < 0 ? fd : fstat(fd, &st) < 0 ? -errno : 0;
                if (r == 0)
                        r = store_obj_get(p->v->store, &st, true, 0, &same, &o);
                if (r == 0) {
                        r = store_obj_fill(p->v->store, o, fd, &got);
                        store_obj_put(p->v->store, o);
                }
                /* Whole now: into its container (the store's thread would
                 * not find a name for a file never looked up). */
                if (r == 0)
                        mirror_cache_file(p->v, it->dfd, it->name);
                if (fd >= 0)
                        close(fd);
                __atomic_add_fetch(&p->res->fetched, got, __ATOMIC_RELAXED);
                if (r < 0) {
                        __atomic_add_fetch(&p->res->failed, 1, __ATOMIC_RELAXED);
                        log_warn("Failed to prefetch '%s': %s", it->name ? it->name : ".",
                                 strerror(-r));
                }
        }
        return NULL;
}

static void prefetch_flush(struct prefetch *p)
{
        unsigned n = view_fetch_threads(p->v), started = 0;
        pthread_t *tids;

        if (!p->items->len)
                return;
        if (n > p->items->len)
                n = p->items->len;
        tids = g_new(pthread_t, n);
        p->next = 0;
        for (unsigned i = 1; i < n; i++)
                if (pthread_create(&tids[started], NULL, prefetch_worker, p) == 0)
                        started++;
        prefetch_worker(p);
        for (unsigned i = 0; i < started; i++)
                pthread_join(tids[i], NULL);
        g_free(tids);
        for (guint i = 0; i < p->items->len; i++) {
                struct prefetch_item *it = &g_array_index(p->items, struct prefetch_item, i);

                close(it->dfd);
                g_free(it->name);
        }
        g_array_set_size(p->items, 0);
}

static int prefetch_queue(struct view *v, int dfd, const char *name, const struct stat *st,
                          void *ud)
{
        struct prefetch *p = ud;
        struct prefetch_item it = { fcntl(dfd, F_DUPFD_CLOEXEC, 0), g_strdup(name) };

        if (it.dfd < 0) {
                g_free(it.name);
                return -errno;
        }
        g_array_append_val(p->items, it);
        if (p->items->len >= PREFETCH_BATCH)
                prefetch_flush(p);
        return 0;
}

int prefetch_subtree(struct view *v, int fd, bool recursive, struct pin_result *res,
                     struct pin_job *job)
{
        struct prefetch p = { v, res, g_array_new(FALSE, TRUE, sizeof(struct prefetch_item)), 0 };
        int r;

        memset(res, 0, sizeof(*res));
        /* What is marked cacheable off is read through, never stored. */
        r = walk_as(v, fd, recursive, true, prefetch_queue, &p, res, job);
        if (r == -ECANCELED) {
                for (guint i = 0; i < p.items->len; i++) {
                        close(g_array_index(p.items, struct prefetch_item, i).dfd);
                        g_free(g_array_index(p.items, struct prefetch_item, i).name);
                }
                g_array_set_size(p.items, 0);
        }
        prefetch_flush(&p);
        g_array_free(p.items, TRUE);
        if (job && job->progress && r != -ECANCELED)
                job->progress(job, res);
        return r;
}
