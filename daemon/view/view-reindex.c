/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-reindex.c: the start's walk of the mirror's directories that are not
 * complete: temporaries left by a dead worker removed, and the unpinned
 * containers given back to a store whose index was made anew.
 *
 * A worker killed while moving a file into the mirror (view-mirror.c) may
 * leave its temporary (.fcache-mirror.PID.N) in a directory that is not
 * complete, which no hoard walk visits: every start's walk removes those of
 * a process that is gone (never one a live process may still rename).
 *
 * A file read whole while unpinned lives in the mirror only (its container,
 * view-mirror.c); the index (store.db) is what counts it in the cache's size
 * and culls it.  An index lost (damaged or deleted) leaves those files
 * served offline but no longer counted nor ever culled: CacheSize would not
 * hold.  So at the start after such a loss (and until one walk has ended:
 * store_containers_unindexed) a thread walks the mirror's directories that
 * are not complete (a complete one is a pin's: the hoard walk renews it),
 * and for each cached file there:
 *
 *   - online, whose backing file still has the identity the container was
 *     copied from (inode, size, mtime, ctime): indexed, an unpinned own
 *     container (counted, culled);
 *   - online, whose backing file changed or is gone: removed (it is only a
 *     cache; a read fetches the file afresh);
 *   - offline, or when the backing cannot say: indexed unvalidated, compared
 *     with the backing at its first use online (and at the reconnect), so it
 *     goes on being served offline meanwhile.
 *
 * A file edited offline (its size or mtime no longer its base's), one made
 * offline (a log id), one of several links and one pinned by itself are
 * left as they are: they belong to the offline log or to a pin.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib.h>

#include "view.h"

enum { REINDEX_NONE, REINDEX_RUNNING, REINDEX_DONE };

static struct {
        int state;
        uint64_t reindexed, unvalidated, dropped;
        bool swept;             /* the start's walk has ended */
        uint64_t tmp_removed;
} progress;

struct reindex {
        struct view *v;
        bool reindex;           /* the index was made anew: give the containers back */
        GPtrArray *pins;        /* paths of the pins, relative to the volume root */
};

static void count(uint64_t *counter)
{
        __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

static int collect_pin(void *ud, const char *path, int prio)
{
        (void)prio;
        g_ptr_array_add(ud, g_strdup(path));
        return 0;
}

/* Is volume path @rel a pin's, or under one?  Those are the hoard walk's. */
static bool pinned_path(const struct reindex *r, const char *rel)
{
        for (guint i = 0; i < r->pins->len; i++) {
                const char *p = g_ptr_array_index(r->pins, i);
                size_t n = strlen(p);

                if (!*p || !strcmp(p, ".") || !strcmp(p, "/"))
                        return true;
                if (!strncmp(rel, p, n) && (!rel[n] || rel[n] == '/'))
                        return true;
        }
        return false;
}

/* The backing file's answer: 1 same identity, 0 changed or gone, -errno unknown. */
static int backing_same(struct view *v, int bdfd, const char *name,
                        const struct mirror_base *b)
{
        struct stat st;
        int r;

        if (bdfd == -ENOENT)
                return 0;       /* its directory is gone from the backing */
        if (bdfd < 0)
                return bdfd;
        r = backing_fstatat(v, bdfd, name, &st);
        if (r == -ENOENT || r == -ENOTDIR)
                return 0;
        if (r < 0)
                return r;
        return S_ISREG(st.st_mode) && (uint64_t)st.st_ino == b->ver.ino &&
               (uint64_t)st.st_size == b->ver.size && timespec_ns(&st.st_mtim) == b->ver.mtime_ns &&
               timespec_ns(&st.st_ctim) == b->ver.ctime_ns;
}

/* Removes the stale cached file mdfd/name (volume path rel), open as fd;
 * not once the volume went offline meanwhile (an offline edit may follow),
 * nor while conflicts hold records of the log (as at a reconnect). */
static bool drop_stale(struct view *v, const char *rel, int fd)
{
        bool gone = false;

        pthread_rwlock_rdlock(&v->mode_lock);
        if (!view_offline(v) && !__atomic_load_n(&v->conflicts, __ATOMIC_RELAXED))
                gone = mirror_remove_cached(v, rel, fd) == 0;
        pthread_rwlock_unlock(&v->mode_lock);
        return gone;
}

/* When the container @st was last used (wall clock, as the store's rows):
 * its atime (set when it was read whole, moved by reads of it offline), or
 * its mtime if later (a version is used after it was made), so culling
 * keeps the order the files can tell. */
static int64_t last_use(const struct stat *st)
{
        return MAX(timespec_ns(&st->st_atim), timespec_ns(&st->st_mtim));
}

static void reindex_file(struct reindex *r, int mdfd, int bdfd, const char *name,
                         const char *rel)
{
        struct view *v = r->v;
        struct store_identity id = { .path = rel };
        struct mirror_base b;
        struct stat st;
        uint64_t lid;
        int fd, same, e;

        fd = regular_open_at(mdfd, name, O_RDONLY | O_NOATIME, &st);
        if (fd == -EPERM)
                fd = regular_open_at(mdfd, name, O_RDONLY, &st);
        if (fd < 0)
                return;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
            mirror_get_lid(fd, NULL, &lid) == 0 || mirror_get_base(fd, NULL, &b) < 0 ||
            st.st_size != (off_t)b.ver.size || timespec_ns(&st.st_mtim) != b.ver.mtime_ns ||
            pinned_path(r, rel))
                goto out;
        same = view_offline(v) ? -EHOSTDOWN : backing_same(v, bdfd, name, &b);
        if (same == 0) {
                if (drop_stale(v, rel, fd)) {
                        count(&progress.dropped);
                        log_debug("Removed the cached file '%s': the server's changed", rel);
                }
                goto out;
        }
        id.ino = b.ver.ino;
        id.size = (int64_t)b.ver.size;
        id.mtime_ns = b.ver.mtime_ns;
        id.ctime_ns = b.ver.ctime_ns;
        e = store_reindex_container(v->store, &id, same == 1);
        if (e == 1) {
                store_set_last_use(v->store, id.ino, last_use(&st));
                count(&progress.reindexed);
                if (same != 1)
                        count(&progress.unvalidated);
        } else if (e < 0) {
                log_warn("Failed to index the cached file '%s' again: %s", rel, strerror(-e));
        }
out:
        close(fd);
}

/* The backing's directory bdfd/name, as walk_dir() wants it. */
static int backing_dir(struct view *v, int bdfd, const char *name, bool reindexing)
{
        int fd;

        if (bdfd < 0)
                return bdfd;    /* gone stays gone, unknown stays unknown */
        if (view_offline(v) || !reindexing)
                return -EHOSTDOWN;
        fd = backing_openat(v, bdfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        /* A symlink or a file where the mirror has a directory: that one is gone. */
        return fd == -ENOTDIR || fd == -ELOOP ? -ENOENT : fd;
}

/* Walks mirror directory mdfd (volume path rel, "" for the root); bdfd is
 * the backing's directory there, -ENOENT if it has none, else -errno. */
static void walk_dir(struct reindex *r, int mdfd, int bdfd, const char *rel, int depth)
{
        int dfd = dup(mdfd);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        struct dirent *de;

        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                log_warn("Failed to read the mirror directory '%s': %m", *rel ? rel : ".");
                return;
        }
        while ((de = readdir(d))) {
                struct mirror_base b;
                char *crel;
                int cm, cb;

                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (mirror_is_tmp(de->d_name)) {
                        if (mirror_tmp_orphaned(de->d_name) && unlinkat(mdfd, de->d_name, 0) == 0)
                                count(&progress.tmp_removed);
                        continue;
                }
                crel = *rel ? g_strconcat(rel, "/", de->d_name, NULL) : g_strdup(de->d_name);
                if (r->reindex && (de->d_type == DT_REG || de->d_type == DT_UNKNOWN))
                        reindex_file(r, mdfd, bdfd, de->d_name, crel);
                if ((de->d_type == DT_DIR || de->d_type == DT_UNKNOWN) && depth < VIEW_MAX_DEPTH &&
                    (cm = openat(mdfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                 O_CLOEXEC)) >= 0) {
                        /* A complete directory is a pin's, its subtree too. */
                        if (mirror_get_base(cm, NULL, &b) < 0 || !(b.flags & MIRROR_COMPLETE)) {
                                cb = backing_dir(r->v, bdfd, de->d_name, r->reindex);
                                walk_dir(r, cm, cb, crel, depth + 1);
                                if (cb >= 0)
                                        close(cb);
                        }
                        close(cm);
                }
                g_free(crel);
        }
        closedir(d);
}

static void *reindex_thread(void *arg)
{
        struct reindex *r = arg;
        struct view *v = r->v;
        int mdfd = openat(v->mirror_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int bdfd = backing_dir(v, v->root_fd, ".", r->reindex);
        struct mirror_base b;

        if (mdfd >= 0 && (mirror_get_base(mdfd, NULL, &b) < 0 || !(b.flags & MIRROR_COMPLETE)))
                walk_dir(r, mdfd, bdfd, "", 0);
        if (progress.tmp_removed)
                log_info("Removed %" PRIu64 " temporaries a dead worker left in the mirror",
                         progress.tmp_removed);
        __atomic_store_n(&progress.swept, true, __ATOMIC_RELEASE);
        if (r->reindex && mdfd >= 0 && store_containers_indexed(v->store) == 0 &&
            progress.reindexed + progress.dropped) {
                log_info("Cached files found in the mirror after the index was made anew: %" PRIu64
                         " indexed again (%" PRIu64 " to validate online), %" PRIu64
                         " removed (changed on the server)", progress.reindexed,
                         progress.unvalidated, progress.dropped);
                if (!view_offline(v))
                        store_cull(v->store);   /* CacheSize holds for them too */
        }
        if (r->reindex)
                __atomic_store_n(&progress.state, REINDEX_DONE, __ATOMIC_RELEASE);
        if (mdfd >= 0)
                close(mdfd);
        if (bdfd >= 0)
                close(bdfd);
        g_ptr_array_free(r->pins, TRUE);
        g_free(r);
        return NULL;
}

/* A mirror with no entry (a volume's first start) has nothing to give back. */
static bool mirror_empty(struct view *v)
{
        int fd = openat(v->mirror_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *de;
        bool empty = true;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return false;
        }
        while (empty && (de = readdir(d)))
                empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
        closedir(d);
        return empty;
}

void view_reindex_start(struct view *v)
{
        struct reindex *r;
        bool reindex;
        pthread_t t;

        if (v->mirror_fd < 0)
                return;
        reindex = store_containers_unindexed(v->store);
        if (mirror_empty(v)) {
                if (reindex)
                        store_containers_indexed(v->store);
                __atomic_store_n(&progress.swept, true, __ATOMIC_RELEASE);
                return;
        }
        r = g_new0(struct reindex, 1);
        r->v = v;
        r->reindex = reindex;
        r->pins = g_ptr_array_new_with_free_func(g_free);
        if (reindex) {
                store_pin_foreach(v->store, collect_pin, r->pins);
                __atomic_store_n(&progress.state, REINDEX_RUNNING, __ATOMIC_RELEASE);
        }
        if (pthread_create(&t, NULL, reindex_thread, r) == 0) {
                pthread_detach(t);
                return;
        }
        log_warn("Failed to start the thread that walks the mirror's cached files"
                 " (they are indexed again, and leftover temporaries removed, at the next start)");
        __atomic_store_n(&progress.state, REINDEX_NONE, __ATOMIC_RELEASE);
        g_ptr_array_free(r->pins, TRUE);
        g_free(r);
}

void view_reindex_state(GString *out)
{
        int state = __atomic_load_n(&progress.state, __ATOMIC_ACQUIRE);

        if (__atomic_load_n(&progress.swept, __ATOMIC_ACQUIRE))
                g_string_append_printf(out, "temporaries_removed=%" PRIu64 "\n",
                                       __atomic_load_n(&progress.tmp_removed, __ATOMIC_RELAXED));
        if (state == REINDEX_NONE)
                return;
        g_string_append_printf(out, "reindex=%s\ncontainers_reindexed=%" PRIu64
                               "\ncontainers_unvalidated=%" PRIu64 "\ncontainers_dropped=%"
                               PRIu64 "\n", state == REINDEX_DONE ? "done" : "running",
                               __atomic_load_n(&progress.reindexed, __ATOMIC_RELAXED),
                               __atomic_load_n(&progress.unvalidated, __ATOMIC_RELAXED),
                               __atomic_load_n(&progress.dropped, __ATOMIC_RELAXED));
}
