/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-delete-bound.c: a reconnect that would delete more of the pinned
 * local copy than ReconnectDeleteLimit allows asks first.
 *
 * After a reconnect the mirror of the pinned subtrees takes the server's
 * state: what the server no longer has goes from the local copy too.  When
 * the server's side lost the data (an export directory emptied, or replaced
 * by another on the same filesystem, which the identity check of
 * view-identity.c cannot tell), that would wipe the only copy left.  So
 * before anything is replayed, the reconnect counts the pinned objects the
 * server no longer has, and refuses above the bound: the volume stays
 * offline, serving its copy, with the figures in `query state`, until
 * `reconnect force`.
 *
 * One listing per mirrored directory, no stat per file, off every lock on a
 * thread of its own, given up when the server stops answering
 * (backing_call_moving).  An object the
 * offline log knows (renamed or changed offline) is left to the replay,
 * which keeps a conflict where the server deleted it; objects made offline
 * are not the server's to lose.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "view.h"

struct census {
        struct view *v;
        struct backing_progress *progress;
        uint64_t pinned;        /* pinned objects of the local copy that came from the server */
        uint64_t gone;          /* of which the server has no longer */
};

static bool skipped_name(const char *name)
{
        return !strcmp(name, ".") || !strcmp(name, "..") || mirror_is_tmp(name);
}

/* Is mirror object @mdfd/@name one the offline log knows (changed offline)? */
static bool logged(struct view *v, const struct mirror_base *b)
{
        uint64_t lid;
        bool r;

        pthread_mutex_lock(&v->offline_lock);
        r = oplog_find_ino(v->oplog, b->ver.ino, &lid) == 0;
        pthread_mutex_unlock(&v->offline_lock);
        return r;
}

/* The objects from the server in mirror subtree @mdfd/@name, itself included. */
static uint64_t count_subtree(int mdfd, const char *name, int depth)
{
        struct mirror_base b;
        struct dirent *de;
        struct stat st;
        uint64_t n;
        DIR *d;
        int fd;

        if (fstatat(mdfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return 0;
        n = mirror_get_base(mdfd, name, &b) == 0 ? 1 : 0;
        if (!S_ISDIR(st.st_mode) || depth > VIEW_MAX_DEPTH)
                return n;
        fd = openat(mdfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return n;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return n;
        }
        while ((de = readdir(d)))
                if (!skipped_name(de->d_name))
                        n += count_subtree(dirfd(d), de->d_name, depth + 1);
        closedir(d);
        return n;
}

/* The names in backing directory @bdfd (-> their d_type + 1), or NULL with -errno in *err. */
static GHashTable *backing_names(int bdfd, int *err)
{
        GHashTable *names = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        struct dirent *de;
        int fd = dir_open_noatime(bdfd, ".", 0);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

        if (!d) {
                *err = -errno;
                if (fd >= 0)
                        close(fd);
                g_hash_table_destroy(names);
                return NULL;
        }
        errno = 0;
        while ((de = readdir(d)))
                g_hash_table_insert(names, g_strdup(de->d_name),
                                    GUINT_TO_POINTER((unsigned)de->d_type + 1));
        *err = errno ? -errno : 0;
        closedir(d);
        if (*err < 0) {
                g_hash_table_destroy(names);
                return NULL;
        }
        return names;
}

static int census_dir(struct census *c, int bdfd, int mdfd, int depth);

/*
 * Mirror object @mdfd/@name, which backing directory @bdfd lists (@type:
 * its d_type + 1) or not (0).  The listing's type spares a stat of each
 * directory where the backing gives it.
 */
static int census_entry(struct census *c, int bdfd, int mdfd, const char *name, unsigned type,
                        int depth)
{
        bool present = type != 0;
        struct mirror_base b;
        struct stat mst, bst;
        uint64_t n;
        int cb, cm, r;

        if (mirror_get_base(mdfd, name, &b) < 0)
                return 0;       /* made offline: the replay creates it */
        if (!present) {
                if (logged(c->v, &b))
                        return 0;       /* renamed or changed offline: the replay judges */
                n = count_subtree(mdfd, name, depth);
                c->pinned += n;
                c->gone += n;
                return 0;
        }
        c->pinned++;
        if (fstatat(mdfd, name, &mst, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(mst.st_mode))
                return 0;
        if (type - 1 == DT_DIR) {
                bst.st_mode = S_IFDIR;
        } else if (type - 1 != DT_UNKNOWN) {
                bst.st_mode = 0;
        } else if (fstatat(bdfd, name, &bst, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno != ENOENT)
                        return -errno;
                bst.st_mode = 0;
        }
        if (!S_ISDIR(bst.st_mode)) {
                /* Replaced by a non-directory: what was below it goes. */
                n = count_subtree(mdfd, name, depth) - 1;

                c->pinned += n;
                c->gone += n;
                return 0;
        }
        if (depth > VIEW_MAX_DEPTH)
                return -ELOOP;
        cb = openat(bdfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cb < 0)
                return -errno;
        cm = openat(mdfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cm < 0) {
                close(cb);
                return 0;
        }
        r = census_dir(c, cb, cm, depth + 1);
        close(cb);
        close(cm);
        return r;
}

static int census_dir(struct census *c, int bdfd, int mdfd, int depth)
{
        GHashTable *names;
        struct dirent *de;
        int fd, r = 0;
        DIR *d;

        names = backing_names(bdfd, &r);
        if (!names)
                return r;
        backing_progress_step(c->progress);
        fd = openat(mdfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                g_hash_table_destroy(names);
                return 0;
        }
        while (r == 0 && (de = readdir(d)))
                if (!skipped_name(de->d_name))
                        r = census_entry(c, bdfd, dirfd(d), de->d_name,
                                         GPOINTER_TO_UINT(g_hash_table_lookup(names, de->d_name)),
                                         depth);
        closedir(d);
        g_hash_table_destroy(names);
        return r;
}

/* "a/b" of a pin's path ("" for the root), components as the mirror has them. */
static char *normal_path(const char *path)
{
        gchar **parts = g_strsplit(path ? path : "", "/", -1);
        GString *out = g_string_new(NULL);

        for (unsigned i = 0; parts[i]; i++) {
                if (!*parts[i] || !strcmp(parts[i], "."))
                        continue;
                if (out->len)
                        g_string_append_c(out, '/');
                g_string_append(out, parts[i]);
        }
        g_strfreev(parts);
        return g_string_free(out, FALSE);
}

static int collect_pin(void *ud, const char *path, int prio)
{
        g_ptr_array_add(ud, normal_path(path));
        return 0;
}

static gint by_path(gconstpointer a, gconstpointer b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Is @p inside (or) @top? */
static bool under(const char *p, const char *top)
{
        size_t n = strlen(top);

        return !n || (!strncmp(p, top, n) && (p[n] == '/' || !p[n]));
}

/* One pin's subtree, @rel ("" the root). */
static int census_pin(struct census *c, const char *rel)
{
        char *parent = g_path_get_dirname(rel), *name = g_path_get_basename(rel);
        int bp, mp, r = 0;
        GHashTable *names;
        struct stat st;

        if (!*rel) {
                bp = openat(c->v->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                mp = openat(c->v->mirror_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                r = bp < 0 ? -errno : 0;
                if (r == 0 && mp >= 0)
                        r = census_dir(c, bp, mp, 0);
                goto out;
        }
        if (fstatat(c->v->mirror_fd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                bp = mp = -1;
                goto out;               /* not mirrored (yet): nothing to lose */
        }
        mp = openat(c->v->mirror_fd, parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        bp = openat(c->v->root_fd, parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (mp < 0)
                goto out;
        if (bp < 0) {
                if (errno != ENOENT && errno != ENOTDIR) {
                        r = -errno;
                        goto out;
                }
                /* The pin's parent is gone: the pin with it. */
                r = census_entry(c, mp, mp, name, 0, 0);
                goto out;
        }
        names = backing_names(bp, &r);
        if (names) {
                r = census_entry(c, bp, mp, name,
                                 GPOINTER_TO_UINT(g_hash_table_lookup(names, name)), 0);
                g_hash_table_destroy(names);
        }
out:
        if (bp >= 0)
                close(bp);
        if (mp >= 0)
                close(mp);
        g_free(parent);
        g_free(name);
        return r;
}

static int census_work(void *arg, struct backing_progress *p)
{
        GPtrArray *pins = g_ptr_array_new_with_free_func(g_free);
        struct census *c = arg;
        const char *top = NULL;
        int r = 0;

        c->progress = p;
        store_pin_foreach(c->v->store, collect_pin, pins);
        g_ptr_array_sort(pins, by_path);
        /* Sorted, a pin inside another comes after it: counted once. */
        for (guint i = 0; i < pins->len && r == 0; i++) {
                const char *path = g_ptr_array_index(pins, i);

                if (top && under(path, top))
                        continue;
                top = path;
                r = census_pin(c, path);
                backing_progress_step(p);
        }
        g_ptr_array_free(pins, TRUE);
        return r == -ETIMEDOUT ? -EIO : r;      /* -ETIMEDOUT: given up on */
}

int reconnect_delete_check(struct view *v, GString *why)
{
        struct census *c = g_new0(struct census, 1);
        uint64_t allowed, pinned, gone;
        int r;

        c->v = v;
        /* Off every lock: offline changes go on while the server is listed. */
        r = backing_call_moving(v, census_work, c, g_free, NULL);
        if (r == -ETIMEDOUT) {
                g_string_printf(why, "Backing %s did not answer within BackingTimeout (%" PRIu64
                                " ms) while the pinned copy was compared with it",
                                v->cfg->backing, v->cfg->backing_timeout_ms);
                return r;       /* c is the thread's */
        }
        pinned = c->pinned;
        gone = c->gone;
        g_free(c);
        if (r < 0) {
                g_string_printf(why, "cannot compare the pinned copy with Backing %s: %s",
                                v->cfg->backing, strerror(-r));
                return r;
        }
        allowed = v->cfg->delete_limit_percent ? pinned * v->cfg->delete_limit / 100 :
                  v->cfg->delete_limit;
        __atomic_store_n(&v->delete_gone, gone, __ATOMIC_RELEASE);
        __atomic_store_n(&v->delete_pinned, pinned, __ATOMIC_RELEASE);
        if (gone <= allowed)
                return 0;
        g_string_printf(why, "reconnecting would delete %" PRIu64 " of %" PRIu64 " pinned objects"
                        " from the local copy (the server no longer has them; "
                        "ReconnectDeleteLimit=%" PRIu64 "%s): is the right export mounted at %s? "
                        "'reconnect force' deletes them", gone, pinned, v->cfg->delete_limit,
                        v->cfg->delete_limit_percent ? "%" : "", v->cfg->backing);
        return -ECANCELED;
}
