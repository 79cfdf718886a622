/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-pin-writeback.c: pin, prefetch and unpin while the volume is in
 * writeback (a slow or metered link: exactly when a user pins).
 *
 * The mirror is what is served then, and it holds changes the server does
 * not have yet, so it is never resynced from the server here.  The server's
 * subtree is listed first (one walk on a thread of its own, bounded by
 * BackingTimeout of no progress), then what the mirror lacks is fetched name
 * by name as a lookup's miss is (mirror_fetch_name(): FetchThreads at a
 * time), with the same guard: a name a pending record creates, removes or
 * moves is the application's and never fetched, nothing is put over an
 * entry the mirror has (a local change, or a copy not shipped yet, stays),
 * and the log is checked again as each object goes in place.  A directory
 * of the server that the mirror has as another object (replaced or moved
 * locally) is left alone.  Where no change waits, the mirror takes the
 * server's current tree: a file it has in an older version is copied again
 * and renamed over it, an entry the server removed goes (older_version(),
 * may_replace(), removable()), and the kernel's entries and pages of the
 * old objects are invalidated.  No answer from the server (or an error that
 * means it is gone) takes the volume offline as the trickle would.
 *
 * A pin then marks each directory whose every server name is present, or
 * decided by the log, complete, and pins the files whose mirror copy is of
 * the server's object (an object made locally has nothing in the store to
 * pin; the mirror keeps it whatever happens).  A prefetch leaves the fetched
 * files unpinned containers of the store (cullable), their directories not
 * complete.  An unpin makes the pinned containers of the subtree unpinned
 * ones (they stay in the mirror until culled) and its directories not
 * complete, so a culled name is fetched again rather than taken as absent;
 * the mirror is not removed and resynced as online, since it holds the
 * local changes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "view.h"

/* One name of the server's subtree, as listed. */
struct sentry {
        char *name;
        struct stat st;
        GPtrArray *kids;        /* a directory listed: struct sentry * */
};

static void sentry_free(gpointer p)
{
        struct sentry *e = p;

        if (!e)
                return;
        if (e->kids)
                g_ptr_array_free(e->kids, TRUE);
        g_free(e->name);
        g_free(e);
}

/* The listing's work, on a thread of its own (backing_call_moving()). */
struct listing {
        struct view *v;
        char *rel;
        uint64_t dir_ino;       /* what the mirror's directory is of (0: not checked) */
        bool recursive;
        struct sentry *top;
        int result;
};

static void listing_free(void *arg)
{
        struct listing *l = arg;

        sentry_free(l->top);
        g_free(l->rel);
        g_free(l);
}

static int list_dir(int dfd, struct sentry *dir, bool recursive, int depth,
                    struct backing_progress *p)
{
        struct dirent *de;
        int r = 0, fd;
        DIR *d;

        if (depth > VIEW_MAX_DEPTH)
                return -ELOOP;
        fd = dir_open_noatime(dfd, ".", 0);
        if (fd < 0 || !(d = fdopendir(fd))) {
                r = -errno;
                if (fd >= 0)
                        close(fd);
                return r;
        }
        dir->kids = g_ptr_array_new_with_free_func(sentry_free);
        while (r == 0 && (de = readdir(d))) {
                struct sentry *e;

                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                e = g_new0(struct sentry, 1);
                e->name = g_strdup(de->d_name);
                if (fstatat(dirfd(d), de->d_name, &e->st, AT_SYMLINK_NOFOLLOW) < 0) {
                        r = errno == ENOENT ? 0 : -errno;       /* gone meanwhile */
                        sentry_free(e);
                        continue;
                }
                backing_progress_step(p);
                g_ptr_array_add(dir->kids, e);
                if (S_ISDIR(e->st.st_mode) && recursive) {
                        int cfd = openat(dirfd(d), de->d_name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

                        r = cfd < 0 ? (errno == ENOENT ? 0 : -errno)
                                    : list_dir(cfd, e, recursive, depth + 1, p);
                        if (cfd >= 0)
                                close(cfd);
                }
        }
        closedir(d);
        return r;
}

static int listing_work(void *arg, struct backing_progress *p)
{
        struct listing *l = arg;
        /* O_PATH: a special file on the server is never opened. */
        int fd = view_open_path(l->v, l->rel, O_PATH | O_NOFOLLOW);
        int r = fd < 0 ? fd : 0;

        l->top = g_new0(struct sentry, 1);
        if (r == 0 && fstat(fd, &l->top->st) < 0)
                r = -errno;
        /* The server's object at that path must be the one the mirror has. */
        if (r == -ENOENT || r == -ENOTDIR || r == -ELOOP ||
            (r == 0 && l->dir_ino && (uint64_t)l->top->st.st_ino != l->dir_ino))
                r = -ESTALE;
        /* list_dir() reads the directory through openat(fd, "."). */
        if (r == 0 && S_ISDIR(l->top->st.st_mode))
                r = list_dir(fd, l->top, l->recursive, 0, p);
        if (fd >= 0)
                close(fd);
        l->result = r;
        return 0;       /* -ETIMEDOUT is the wait's alone: l is then the thread's */
}

/*
 * The server's subtree at @rel, whose mirror object is @fd: *top, or
 * -ESTALE (the server has another object there, or none), -ETIMEDOUT (no
 * answer within BackingTimeout), -errno.
 */
static int list_server(struct view *v, int fd, const char *rel, bool recursive,
                       struct sentry **top)
{
        struct listing *l = g_new0(struct listing, 1);
        struct mirror_base b;
        struct stat mst, root;
        int r = 0;

        l->v = v;
        l->rel = g_strdup(rel);
        l->recursive = recursive;
        l->result = -EAGAIN;
        if (fstat(fd, &mst) < 0 || fstat(v->mirror_fd, &root) < 0)
                r = -errno;
        else if (mst.st_ino != root.st_ino || mst.st_dev != root.st_dev)
                /* Made locally (no base): the server has nothing of it yet. */
                r = mirror_get_base(fd, NULL, &b) < 0 ? -ESTALE : 0;
        if (r == 0 && (mst.st_ino != root.st_ino || mst.st_dev != root.st_dev))
                l->dir_ino = b.ver.ino;
        if (r == 0)
                r = backing_call_moving(v, listing_work, l, listing_free, NULL);
        if (r == -ETIMEDOUT)
                return r;       /* l is the thread's now */
        if (r == 0)
                r = l->result;
        if (r == 0) {
                *top = l->top;
                l->top = NULL;
        }
        listing_free(l);
        return r;
}

enum wb_what { WB_PIN, WB_PREFETCH };

/* Now by the clock file ctimes are stamped by (coarse): an entry changed once
 * the listing began has a ctime of this or later. */
static int64_t listing_start(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME_COARSE, &ts);
        return timespec_ns(&ts);
}

struct wb_walk {
        struct view *v;
        enum wb_what what;
        bool recursive;
        int prio;
        struct pin_result *res;
        struct pin_job *job;
        GArray *newly_pinned;   /* uint64_t: for a cancelled job */
        int gone;               /* atomic: the server's error that stopped the walk */
        int64_t listed_ns;      /* the coarse clock (as ctimes are) when the listing began */
};

static bool wb_stopped(struct wb_walk *w)
{
        return __atomic_load_n(&w->gone, __ATOMIC_ACQUIRE) || (w->job && w->job->cancel) ||
               __atomic_load_n(&w->v->state, __ATOMIC_ACQUIRE) != VIEW_WRITEBACK;
}

/* The store object of the mirror file mdfd/name, if it is of server inode
 * @sino (else an object made or replaced locally: the store has none). */
static int mirror_file_obj(struct view *v, int mdfd, const char *name, uint64_t sino,
                           struct sobj **o)
{
        struct mirror_base b;
        char *rel;
        int r;

        if (mirror_get_base(mdfd, name, &b) < 0 || !S_ISREG(b.ver.mode) ||
            (sino && b.ver.ino != sino))
                return -ENOENT;
        if (store_obj_find(v->store, b.ver.ino, o) == 0)
                return 0;
        /* Mirrored without an index entry (an index made anew): indexed now. */
        rel = view_rel_path(v->mirror_fd, mdfd, name);
        if (!rel)
                return -ENAMETOOLONG;
        {
                struct store_identity id = {
                        .ino = b.ver.ino, .size = (int64_t)b.ver.size,
                        .mtime_ns = b.ver.mtime_ns, .ctime_ns = b.ver.ctime_ns, .path = rel,
                };

                r = store_reindex_container(v->store, &id, false);
        }
        g_free(rel);
        return r < 0 ? r : store_obj_find(v->store, b.ver.ino, o);
}

static void pin_mirror_file(struct wb_walk *w, int mdfd, const char *name, uint64_t sino)
{
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        struct sobj *o;
        int r;

        if (w->what != WB_PIN || mirror_file_obj(w->v, mdfd, name, sino, &o) < 0)
                return;
        if (store_obj_pin(o) < 0) {
                pthread_mutex_lock(&lock);
                g_array_append_val(w->newly_pinned, sino);
                pthread_mutex_unlock(&lock);
        }
        r = store_obj_set_pin(w->v->store, o, w->prio);
        store_obj_put(w->v->store, o);
        if (r < 0) {
                __atomic_add_fetch(&w->res->failed, 1, __ATOMIC_RELAXED);
                log_warn("Write-back: failed to pin '%s' (inode %" PRIu64 "): %s", name, sino,
                         strerror(-r));
        }
}

/* The names a directory's pass fetches, FetchThreads at a time. */
struct fetches {
        struct wb_walk *w;
        int mdfd;
        GPtrArray *items;       /* struct sentry *, borrowed */
        const struct stat *was; /* refreshes: the mirror file each replaces; NULL: fetches */
        int *result;
};

/*
 * A newer copy goes over mirror file mdfd/name only if it is still the file
 * looked at (@ud: its stat then; any change since moves its ctime), no
 * record not shipped yet changes it, and no open file may write to it (its
 * writes would go to the old object).  An open file that reads it keeps the
 * old version, as with a file replaced by rename.
 */
static bool may_replace(struct view *v, int mdfd, const char *name, void *ud)
{
        const struct stat *was = ud;
        struct stat now;
        fuse_ino_t id;

        if (fstatat(mdfd, name, &now, AT_SYMLINK_NOFOLLOW) < 0 || now.st_ino != was->st_ino ||
            now.st_dev != was->st_dev || timespec_ns(&now.st_ctim) != timespec_ns(&was->st_ctim))
                return false;
        if (writeback_object_logged(v, mdfd, name))
                return false;
        id = vnode_id_of_ino(v, now.st_ino);
        return !id || !vfile_node_writable(v, id);
}

/* Entry i of f's names (fetch_pool_run()). */
static void fetch_one(void *ctx, guint i)
{
        struct fetches *f = ctx;
        struct sentry *e = f->items->pdata[i];
        int why = 0, r;

        if (wb_stopped(f->w)) {
                f->result[i] = -ECANCELED;
                return;
        }
        if (f->was) {
                struct mirror_refresh re = { may_replace, (void *)&f->was[i] };

                r = mirror_refresh_name(f->w->v, f->mdfd, e->name, writeback_name_logged,
                                        &re, &why);
        } else if (f->w->what == WB_PIN) {
                r = mirror_fetch_pinned_name(f->w->v, f->mdfd, e->name,
                                             writeback_name_logged, &why);
        } else {
                r = mirror_fetch_name(f->w->v, f->mdfd, e->name, writeback_name_logged,
                                      &why);
        }
        if (r == -EHOSTDOWN && (why == -ETIMEDOUT || view_server_gone(why)))
                __atomic_store_n(&f->w->gone, why, __ATOMIC_RELEASE);
        if (r == 0 && S_ISREG(e->st.st_mode))
                __atomic_add_fetch(&f->w->res->fetched, (uint64_t)e->st.st_size,
                                   __ATOMIC_RELAXED);
        f->result[i] = r;
}

static void fetch_all(struct wb_walk *w, int mdfd, GPtrArray *items, const struct stat *was,
                      int *result)
{
        struct fetches f = { w, mdfd, items, was, result };

        fetch_pool_run(w->v, items->len, fetch_one, &f);
}

/* Directory mdfd: every name of the server's is there or decided by the log. */
static void mark_complete(struct view *v, int mdfd)
{
        struct mirror_base b;

        if (mirror_get_base(mdfd, NULL, &b) < 0 || b.flags & MIRROR_COMPLETE)
                return;
        b.flags |= MIRROR_COMPLETE;
        if (mirror_take_identity(mdfd, NULL, &b) == 0)
                mirror_dirs_changed();
}

/* Whether mirror file mdfd/name (@mst) is of an older version of server file @e
 * than the listing's: copied again.  A file with several names is left to
 * the resync, which rewrites their shared object in place. */
static bool older_version(int mdfd, const struct sentry *e, const struct stat *mst,
                          uint64_t *old_sino)
{
        struct mirror_base b;

        if (!S_ISREG(mst->st_mode) || !S_ISREG(e->st.st_mode) || mst->st_nlink != 1 ||
            e->st.st_nlink != 1 || mirror_get_base(mdfd, e->name, &b) < 0 ||
            !S_ISREG(b.ver.mode))
                return false;   /* no base: made locally */
        *old_sino = b.ver.ino;
        return b.ver.ino != (uint64_t)e->st.st_ino || b.ver.size != (uint64_t)e->st.st_size ||
               b.ver.mtime_ns != timespec_ns(&e->st.st_mtim);
}

/* The kernel's node of mirror directory @mdfd, 0 if it has none. */
static fuse_ino_t dir_node(struct view *v, int mdfd)
{
        struct stat st, root;

        if (fstat(mdfd, &st) < 0 || fstat(v->mirror_fd, &root) < 0)
                return 0;
        if (st.st_ino == root.st_ino && st.st_dev == root.st_dev)
                return FUSE_ROOT_ID;
        return vnode_id_of_ino(v, st.st_ino);
}

/* Mirror entry mdfd/name is another object now, or none: the kernel's entry
 * of it, and the attributes and pages of its old object @old_ino, go.
 * Called without mode_lock (an invalidation waits for page locks). */
static void invalidate_entry(struct view *v, int mdfd, const char *name, uint64_t old_ino)
{
        fuse_ino_t parent = dir_node(v, mdfd), id = vnode_id_of_ino(v, old_ino);

        if (!v->se)
                return;
        if (parent)
                fuse_lowlevel_notify_inval_entry(v->se, parent, name, strlen(name));
        if (id)
                fuse_lowlevel_notify_inval_inode(v->se, id, 0, 0);
}

/*
 * Whether mirror entry dfd/name, which the server no longer has, may go: the
 * server's object (it has a base), mirrored before the listing began (a copy
 * fetched, or a change shipped, since then has a later ctime), no record not
 * shipped yet names or changes it, no open file may write to it; a
 * directory only if all it holds may go too.
 */
static bool removable(struct wb_walk *w, int dfd, const char *name, int depth)
{
        struct mirror_base b;
        struct dirent *de;
        struct stat st;
        bool ok = true;
        fuse_ino_t id;
        int fd;
        DIR *d;

        if (depth > VIEW_MAX_DEPTH || mirror_is_tmp(name) ||
            fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            timespec_ns(&st.st_ctim) >= w->listed_ns || mirror_get_base(dfd, name, &b) < 0 ||
            writeback_name_logged(w->v, dfd, name) || writeback_object_logged(w->v, dfd, name))
                return false;
        if (S_ISREG(st.st_mode))
                return st.st_nlink == 1 && !((id = vnode_id_of_ino(w->v, st.st_ino)) &&
                                             vfile_node_writable(w->v, id));
        if (!S_ISDIR(st.st_mode))
                return true;
        fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return false;
        }
        while (ok && (de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        ok = removable(w, dirfd(d), de->d_name, depth + 1);
        closedir(d);
        return ok;
}

/* The entries of mirror directory mdfd that the server's listing @dir lacks
 * and that may go (removable()) are removed, with mode_lock held
 * exclusively: no change is half done meanwhile. */
static void remove_gone(struct wb_walk *w, int mdfd, struct sentry *dir)
{
        GHashTable *listed = g_hash_table_new(g_str_hash, g_str_equal);
        GPtrArray *gone = g_ptr_array_new_with_free_func(g_free);
        struct dirent *de;
        int fd;
        DIR *d;

        for (guint i = 0; i < dir->kids->len; i++)
                g_hash_table_add(listed, ((struct sentry *)dir->kids->pdata[i])->name);
        fd = openat(mdfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        d = fd < 0 ? NULL : fdopendir(fd);
        if (!d && fd >= 0)
                close(fd);
        while (d && (de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
                    !mirror_is_tmp(de->d_name) && !g_hash_table_contains(listed, de->d_name))
                        g_ptr_array_add(gone, g_strdup(de->d_name));
        if (d)
                closedir(d);
        for (guint i = 0; i < gone->len && !wb_stopped(w); i++) {
                const char *name = gone->pdata[i];
                struct mirror_base b;
                struct stat st;
                int r = -EBUSY;

                if (!removable(w, mdfd, name, 0))
                        continue;
                pthread_rwlock_wrlock(&w->v->mode_lock);
                if (__atomic_load_n(&w->v->state, __ATOMIC_ACQUIRE) == VIEW_WRITEBACK &&
                    fstatat(mdfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    mirror_get_base(mdfd, name, &b) == 0 && removable(w, mdfd, name, 0))
                        r = view_remove_tree(mdfd, name);
                pthread_rwlock_unlock(&w->v->mode_lock);
                if (r < 0) {
                        if (r != -EBUSY)
                                log_warn("Write-back: failed to remove '%s', which the server"
                                         " removed, from the mirror: %s", name, strerror(-r));
                        continue;
                }
                log_debug("Write-back: '%s' is gone from the server: removed from the mirror",
                          name);
                vnode_ids_forget(w->v);
                if (S_ISDIR(st.st_mode))
                        mirror_dirs_changed();
                else if (S_ISREG(st.st_mode))
                        store_drop_ino(w->v->store, b.ver.ino, true);
                invalidate_entry(w->v, mdfd, name, st.st_ino);
        }
        g_hash_table_destroy(listed);
        g_ptr_array_free(gone, TRUE);
}

/*
 * One directory of the walk: mdfd is the mirror's, @dir the server's as
 * listed.  Returns whether every name of it is now in the mirror (or left
 * to the log), its subdirectories too.
 */
static bool wb_dir(struct wb_walk *w, int mdfd, struct sentry *dir, int depth)
{
        GPtrArray *fetch = g_ptr_array_new(), *walk = g_ptr_array_new();
        GPtrArray *refresh = g_ptr_array_new();
        GArray *was = g_array_new(FALSE, FALSE, sizeof(struct stat));
        GArray *old_sinos = g_array_new(FALSE, FALSE, sizeof(uint64_t));
        uint64_t old_sino;
        bool whole = true;
        int *result;

        remove_gone(w, mdfd, dir);
        for (guint i = 0; i < dir->kids->len && !wb_stopped(w); i++) {
                struct sentry *e = dir->kids->pdata[i];
                struct stat mst;

                if (S_ISREG(e->st.st_mode)) {
                        w->res->files++;
                        w->res->total_bytes += (uint64_t)e->st.st_size;
                }
                /* Created, removed or moved by a change not shipped: the log's. */
                if (writeback_name_logged(w->v, mdfd, e->name))
                        continue;
                if (fstatat(mdfd, e->name, &mst, AT_SYMLINK_NOFOLLOW) < 0) {
                        g_ptr_array_add(fetch, e);
                } else if (older_version(mdfd, e, &mst, &old_sino)) {
                        g_ptr_array_add(refresh, e);
                        g_array_append_val(was, mst);
                        g_array_append_val(old_sinos, old_sino);
                } else if (S_ISREG(e->st.st_mode))
                        pin_mirror_file(w, mdfd, e->name, (uint64_t)e->st.st_ino);
                else if (S_ISDIR(e->st.st_mode) && S_ISDIR(mst.st_mode))
                        g_ptr_array_add(walk, e);
        }
        result = g_new0(int, refresh->len ? refresh->len : 1);
        fetch_all(w, mdfd, refresh, (const struct stat *)(void *)was->data, result);
        for (guint i = 0; i < refresh->len; i++) {
                struct sentry *e = refresh->pdata[i];
                const struct stat *old = &g_array_index(was, struct stat, i);
                int r = result[i];

                /* -EBUSY: changed locally meanwhile, -ENOENT: gone from the server. */
                if (r == 0) {
                        log_debug("Write-back: '%s' is of a newer version on the server: copied"
                                  " again", e->name);
                        invalidate_entry(w->v, mdfd, e->name, old->st_ino);
                        /* Replaced on the server: the store's object of the old one goes. */
                        old_sino = g_array_index(old_sinos, uint64_t, i);
                        if (old_sino != (uint64_t)e->st.st_ino)
                                store_drop_ino(w->v->store, old_sino, true);
                } else if (r != -EBUSY && r != -ENOENT) {
                        whole = false;
                        if (r != -ECANCELED)
                                w->res->failed++;
                }
                pin_mirror_file(w, mdfd, e->name, (uint64_t)e->st.st_ino);
                pin_job_progress(w->job, w->res);
        }
        g_free(result);
        result = g_new0(int, fetch->len ? fetch->len : 1);
        fetch_all(w, mdfd, fetch, NULL, result);
        for (guint i = 0; i < fetch->len; i++) {
                struct sentry *e = fetch->pdata[i];
                struct stat mst;
                int r = result[i];

                /* -EAGAIN: put there meanwhile (by the application: it stays). */
                if (r == -EAGAIN && fstatat(mdfd, e->name, &mst, AT_SYMLINK_NOFOLLOW) == 0)
                        r = S_ISREG(mst.st_mode) == S_ISREG(e->st.st_mode) ? 0 : 1;
                if (r == 0 && S_ISREG(e->st.st_mode))
                        pin_mirror_file(w, mdfd, e->name, (uint64_t)e->st.st_ino);
                else if (r == 0 && S_ISDIR(e->st.st_mode))
                        g_ptr_array_add(walk, e);
                /* -ENOENT: gone from the server meanwhile, or removed locally. */
                if (r < 0 && r != -ENOENT) {
                        whole = false;
                        if (S_ISREG(e->st.st_mode) && r != -ECANCELED)
                                w->res->failed++;
                }
                if (S_ISREG(e->st.st_mode))
                        pin_job_progress(w->job, w->res);
        }
        g_free(result);
        for (guint i = 0; i < walk->len && w->recursive; i++) {
                struct sentry *e = walk->pdata[i];
                struct mirror_base b;
                int cfd;

                if (wb_stopped(w) || depth >= VIEW_MAX_DEPTH) {
                        whole = false;
                        break;
                }
                cfd = openat(mdfd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                /* Another object than the server's (replaced locally): left alone. */
                if (cfd >= 0 && mirror_get_base(cfd, NULL, &b) == 0 &&
                    b.ver.ino == (uint64_t)e->st.st_ino && e->kids)
                        whole = wb_dir(w, cfd, e, depth + 1) && whole;
                if (cfd < 0)
                        whole = false;
                else
                        close(cfd);
        }
        if (wb_stopped(w))
                whole = false;
        if (whole && w->what == WB_PIN && w->recursive)
                mark_complete(w->v, mdfd);
        w->res->dirs++;
        g_ptr_array_free(fetch, TRUE);
        g_ptr_array_free(walk, TRUE);
        g_ptr_array_free(refresh, TRUE);
        g_array_free(was, TRUE);
        g_array_free(old_sinos, TRUE);
        return whole;
}

static uint64_t needed_bytes(struct view *v, const struct sentry *e)
{
        struct sobj_info info;
        uint64_t n = 0;

        if (S_ISREG(e->st.st_mode))
                return store_info_ino(v->store, e->st.st_ino, &info) == 0 && info.pin >= 0
                       ? 0 : (uint64_t)e->st.st_size;
        for (guint i = 0; e->kids && i < e->kids->len; i++)
                n += needed_bytes(v, e->kids->pdata[i]);
        return n;
}

/* The regular files of a listing, and their bytes. */
static void count_tree(const struct sentry *e, uint64_t *files, uint64_t *bytes)
{
        if (S_ISREG(e->st.st_mode)) {
                (*files)++;
                *bytes += (uint64_t)e->st.st_size;
        }
        for (guint i = 0; e->kids && i < e->kids->len; i++)
                count_tree(e->kids->pdata[i], files, bytes);
}

/* The walk ended: why it did not go through, in @err. */
static int wb_end(struct wb_walk *w, const char *verb, const char *rel, int r, GString *err)
{
        int gone = __atomic_load_n(&w->gone, __ATOMIC_ACQUIRE);

        if (r == -ETIMEDOUT || (r < 0 && view_server_gone(r) && r != -ESTALE && r != -EBUSY))
                gone = r;
        if (gone) {
                log_warn("Write-back: the server %s during the %s of '%s': going offline",
                         gone == -ETIMEDOUT ? "did not answer within BackingTimeout" :
                         "stopped answering", verb, rel);
                view_writeback_lost(w->v, gone);
                g_string_printf(err, "the server %s (%s) during the %s of '%s': the volume is"
                                " offline now; %s again once it is back", gone == -ETIMEDOUT ?
                                "did not answer within BackingTimeout" : "stopped answering",
                                strerror(-gone), verb, rel, verb);
                return -EHOSTDOWN;
        }
        if (w->job && w->job->cancel)
                return -ECANCELED;
        if (r == -ESTALE) {
                g_string_printf(err, "'%s' is not on the server as the mirror has it (made,"
                                " moved or replaced by a change not shipped yet, or changed on"
                                " the server): sync first", rel);
                return r;
        }
        if (r == 0 && __atomic_load_n(&w->v->state, __ATOMIC_ACQUIRE) != VIEW_WRITEBACK) {
                g_string_printf(err, "the volume left write-back during the %s of '%s' (it is"
                                " %s now): %s again", verb, rel, view_state_name(w->v), verb);
                return -EAGAIN;
        }
        return r;
}

/* The walk of @what over the server's subtree of @rel (the mirror's @fd). */
static int wb_run(struct wb_walk *w, int fd, struct sentry *top)
{
        int dfd;
        bool whole;

        if (!S_ISDIR(top->st.st_mode)) {
                struct stat st;

                /* A file the mirror has (it is the target): pinned if it is the server's. */
                w->res->files = S_ISREG(top->st.st_mode);
                w->res->total_bytes = S_ISREG(top->st.st_mode) ? (uint64_t)top->st.st_size : 0;
                if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
                        pin_mirror_file(w, fd, NULL, (uint64_t)top->st.st_ino);
                pin_job_progress(w->job, w->res);
                return 0;
        }
        dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return -errno;
        whole = wb_dir(w, dfd, top, 0);
        close(dfd);
        if (!whole && !w->res->mirror_err)
                w->res->mirror_err = -EAGAIN;
        return 0;
}

static int unmark(struct view *v, int fd, const char *rel, bool recursive,
                  struct pin_result *res);

/* A pin cancelled or given up: what it pinned that was not pinned before is unpinned
 * (their copies stay in the mirror as the store's unpinned containers), and
 * the directories it made complete are not, unless another pin keeps them. */
static void wb_undo(struct wb_walk *w, int fd, const char *rel)
{
        struct pin_result scratch = { 0 };

        for (guint i = 0; i < w->newly_pinned->len; i++) {
                struct sobj *o;

                if (store_obj_find(w->v->store, g_array_index(w->newly_pinned, uint64_t, i),
                                   &o) == 0) {
                        store_obj_set_pin(w->v->store, o, -1);
                        store_obj_put(w->v->store, o);
                }
        }
        unmark(w->v, fd, rel, w->recursive, &scratch);
}

int pin_subtree_writeback(struct view *v, int fd, const char *rel, bool recursive, int prio,
                          bool dry_run, struct pin_result *res, uint64_t *available,
                          struct pin_job *job, GString *err)
{
        struct wb_walk w = { v, WB_PIN, recursive, prio, res, job,
                             g_array_new(FALSE, FALSE, sizeof(uint64_t)), 0 };
        struct sentry *top = NULL;
        struct store_stats st;
        int r;

        memset(res, 0, sizeof(*res));
        w.listed_ns = listing_start();
        r = list_server(v, fd, rel, recursive, &top);
        if (r == 0) {
                /* Admission, as online: the files not pinned yet must fit. */
                res->needed = needed_bytes(v, top);
                store_get_stats(v->store, &st);
                *available = st.capacity > st.pinned ? st.capacity - st.pinned : 0;
                /* What a dry run answers; the walk counts again as it goes. */
                count_tree(top, &res->files, &res->total_bytes);
                if (job)
                        job->files_total = res->files;
                if (res->needed > *available)
                        r = -ENOSPC;
        }
        if (r == 0 && !dry_run) {
                uint64_t needed = res->needed;

                res->files = res->total_bytes = 0;
                r = wb_run(&w, fd, top);
                res->needed = needed;
        }
        sentry_free(top);
        if (r != -ENOSPC)
                r = wb_end(&w, "pin", rel, r, err);
        /* Cancelled, or given up (no pin is recorded): as if not asked. */
        if (r < 0 && r != -ENOSPC && !dry_run)
                wb_undo(&w, fd, rel);
        g_array_free(w.newly_pinned, TRUE);
        return r;
}

int prefetch_subtree_writeback(struct view *v, int fd, const char *rel, bool recursive,
                               struct pin_result *res, struct pin_job *job, GString *err)
{
        struct wb_walk w = { v, WB_PREFETCH, recursive, -1, res, job,
                             g_array_new(FALSE, FALSE, sizeof(uint64_t)), 0 };
        struct sentry *top = NULL;
        int r;

        memset(res, 0, sizeof(*res));
        w.listed_ns = listing_start();
        r = list_server(v, fd, rel, recursive, &top);
        if (r == 0) {
                uint64_t bytes = 0;

                if (job)
                        count_tree(top, &job->files_total, &bytes);
                r = wb_run(&w, fd, top);
        }
        sentry_free(top);
        r = wb_end(&w, "prefetch", rel, r, err);
        g_array_free(w.newly_pinned, TRUE);
        return r;
}

/* The pins left, to keep the directories they cover complete. */
static int add_pin(void *ud, const char *path, int prio)
{
        (void)prio;
        g_ptr_array_add(ud, g_strdup(path));
        return 0;
}

/* Whether volume path @rel is a pin's or below one. */
static bool under_pin(GPtrArray *pins, const char *rel)
{
        for (guint i = 0; i < pins->len; i++) {
                const char *p = pins->pdata[i];
                size_t n = strlen(p);

                if (!strcmp(p, ".") || !strcmp(p, rel) ||
                    (!strncmp(p, rel, n) && rel[n] == '/'))
                        return true;
        }
        return false;
}

struct unpin_walk {
        struct view *v;
        struct pin_result *res;
        GPtrArray *pins;
        bool recursive;
};

static void unpin_dir(struct unpin_walk *u, int dfd, const char *rel, int depth)
{
        struct mirror_base b;
        struct dirent *de;
        int fd;
        DIR *d;

        if (depth > VIEW_MAX_DEPTH || under_pin(u->pins, rel))
                return;         /* another pin keeps it whole */
        if (mirror_get_base(dfd, NULL, &b) == 0 && b.flags & MIRROR_COMPLETE) {
                b.flags &= ~MIRROR_COMPLETE;
                if (mirror_take_identity(dfd, NULL, &b) == 0)
                        mirror_dirs_changed();
        }
        fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
                if (fd >= 0)
                        close(fd);
                u->res->failed++;
                return;
        }
        u->res->dirs++;
        while ((de = readdir(d))) {
                char *crel;
                struct stat st;
                struct sobj *o;

                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
                    mirror_is_tmp(de->d_name) ||
                    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                crel = strcmp(rel, ".") ? g_build_filename(rel, de->d_name, NULL)
                                        : g_strdup(de->d_name);
                if (S_ISREG(st.st_mode) && !under_pin(u->pins, crel) &&
                    mirror_file_obj(u->v, dirfd(d), de->d_name, 0, &o) == 0) {
                        if (store_obj_pin(o) >= 0) {
                                if (store_obj_set_pin(u->v->store, o, -1) == 0)
                                        u->res->files++;
                                else
                                        u->res->failed++;
                        }
                        store_obj_put(u->v->store, o);
                } else if (S_ISDIR(st.st_mode) && u->recursive) {
                        int cfd = openat(dirfd(d), de->d_name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

                        if (cfd >= 0) {
                                unpin_dir(u, cfd, crel, depth + 1);
                                close(cfd);
                        }
                }
                g_free(crel);
        }
        closedir(d);
}

/*
 * The files of the subtree at @fd (volume path @rel) no pin left covers are
 * unpinned (unpinned containers now) and its directories made not complete:
 * a container culled must be fetched again, not taken as absent.
 */
static int unmark(struct view *v, int fd, const char *rel, bool recursive,
                  struct pin_result *res)
{
        struct unpin_walk u = { v, res, g_ptr_array_new_with_free_func(g_free), recursive };
        struct stat st;
        int r;

        store_pin_foreach(v->store, add_pin, u.pins);
        r = fstat(fd, &st) < 0 ? -errno : 0;
        if (r == 0 && S_ISDIR(st.st_mode)) {
                int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

                if (dfd < 0) {
                        r = -errno;
                } else {
                        unpin_dir(&u, dfd, rel, 0);
                        close(dfd);
                }
        } else if (r == 0 && S_ISREG(st.st_mode) && !under_pin(u.pins, rel)) {
                struct sobj *o;

                if (mirror_file_obj(v, fd, NULL, 0, &o) == 0) {
                        if (store_obj_pin(o) >= 0 && store_obj_set_pin(v->store, o, -1) == 0)
                                res->files++;
                        store_obj_put(v->store, o);
                }
        }
        g_ptr_array_free(u.pins, TRUE);
        store_cull(v->store);   /* the unpinned copies count against CacheSize now */
        return r;
}

int unpin_subtree_writeback(struct view *v, int fd, const char *rel, bool recursive,
                            struct pin_result *res, int *pins_removed)
{
        int n;

        memset(res, 0, sizeof(*res));
        n = store_pin_remove(v->store, rel);
        *pins_removed = n < 0 ? 0 : n;
        return unmark(v, fd, rel, recursive, res);
}
