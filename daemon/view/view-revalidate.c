/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-revalidate.c: the store's copies checked against the backing in the
 * background, a directory at a time.
 *
 * A read-only open of a copy within its lease costs no round trip
 * (view-ops.c); the directories such opens happened in are "hot" for ten
 * leases.  Every half lease one pass lists each hot directory on the backing
 * and compares the attributes of its files with their store copies: the
 * listing brings them in one exchange where the backing can (NFS
 * READDIRPLUS, sshfs's readdir with attributes, which fill the stats that
 * follow), rather than a stat round trip per file opened.  An unchanged copy
 * gets a new lease; a changed one is dropped (a pinned one fills again as it
 * is read, or at the hoard walk),
 * and the kernel's pages and attributes of it go
 * (fuse_lowlevel_notify_inval_inode); a name that now leads to another
 * object, or to none, is invalidated in the kernel's dentries
 * (fuse_lowlevel_notify_inval_entry).
 *
 * Each pass first probes the backing under BackingTimeout: opens served
 * locally ask the server nothing, so this is what takes the volume offline
 * when the server goes silent.  The pass then calls the backing directly on
 * its own thread, holding no lock an operation needs: a server that goes
 * away during it stops the pass, nothing else.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "view.h"

#define HOT_LEASES 10

struct hot_dir {
        uint64_t id;            /* nodeid of the directory */
        uint64_t used_ns;       /* under rv.lock: last local open in it */
        GHashTable *names;      /* under rv.lock: name -> struct stat at the last pass */
        uint64_t taken_ns;      /* under rv.lock: when that pass began */
        uint64_t changes;       /* under rv.lock: view.changes then */
};

static struct {
        pthread_mutex_t lock;
        GHashTable *hot;        /* under lock: nodeid -> struct hot_dir */
        bool started;           /* under lock */
} rv = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t lease_ns(struct view *v)
{
        return (uint64_t)(v->lease_s * 1e9);
}

/* A changed copy was dropped: the kernel forgets its own.  (A pinned one
 * fills again as it is read, or at the hoard walk: fetching it here would
 * hold the object while the server may be going away.) */
static void copy_changed(struct view *v, uint64_t ino)
{
        fuse_ino_t id = vnode_id_of_ino(v, ino);

        if (id)
                fuse_lowlevel_notify_inval_inode(v->se, id, 0, 0);
}

static void forget_name(struct view *v, uint64_t dir, const char *name)
{
        fuse_lowlevel_notify_inval_entry(v->se, dir, name, strlen(name));
}

#define STATTERS 8

/* One pass over a directory: its entries, stated by STATTERS threads at once
 * (a network filesystem keeps them all in flight on its connection). */
struct pass {
        struct view *v;
        struct hot_dir *hd;
        int dfd;
        uint64_t changes;       /* view.changes when the pass began */
        GPtrArray *entries;     /* names listed */
        unsigned next;          /* atomic: the next entry to state */
        pthread_mutex_t lock;
        GHashTable *names;      /* under lock: name -> struct stat, regular files */
};

static void pass_entry(struct pass *p, const char *name)
{
        struct view *v = p->v;
        struct stat *was;
        struct stat st;
        struct sobj *o;
        bool same, replaced;

        if (fstatat(p->dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                return;
        /* Not notified under rv.lock: the kernel takes the directory's
         * lock, which a lookup waiting for rv.lock holds. */
        pthread_mutex_lock(&rv.lock);
        was = p->hd->names ? g_hash_table_lookup(p->hd->names, name) : NULL;
        replaced = was && was->st_ino != st.st_ino;
        pthread_mutex_unlock(&rv.lock);
        if (replaced)
                forget_name(v, p->hd->id, name);
        pthread_mutex_lock(&p->lock);
        g_hash_table_insert(p->names, g_strdup(name), g_memdup2(&st, sizeof(st)));
        pthread_mutex_unlock(&p->lock);
        /* A change through the view since the pass began may be newer than
         * this stat: its copies are judged next time. */
        if (__atomic_load_n(&v->changes, __ATOMIC_ACQUIRE) != p->changes ||
            store_obj_find(v->store, st.st_ino, &o) < 0)
                return;
        if (store_obj_revalidate(v->store, o, &st, false, &same) == 0 && !same)
                copy_changed(v, st.st_ino);
        store_obj_put(v->store, o);
}

static void *statter(void *arg)
{
        struct pass *p = arg;

        for (;;) {
                unsigned i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);

                if (i >= p->entries->len || view_offline(p->v))
                        break;
                pass_entry(p, g_ptr_array_index(p->entries, i));
        }
        return NULL;
}

/* One directory: its files' copies renewed or dropped. */
static void pass_dir(struct view *v, struct hot_dir *hd)
{
        GHashTable *names = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        uint64_t began = now_ns(), changes = __atomic_load_n(&v->changes, __ATOMIC_ACQUIRE);
        struct pass p = { .v = v, .hd = hd, .changes = changes, .names = names };
        pthread_t tids[STATTERS];
        unsigned started = 0;
        GHashTable *old;
        GHashTableIter it;
        gpointer key, val;
        struct dirent *de;
        struct vnode *n;
        DIR *d;
        int pfd, dfd;

        pfd = vnode_get(v, hd->id, &n);
        if (pfd < 0) {
                g_hash_table_destroy(names);
                return;
        }
        /* Not held across the backing call: while a node has users, its
         * descriptor of the tree served before a switch serves on. */
        pfd = fcntl(pfd, F_DUPFD_CLOEXEC, 0);
        vnode_put(v, n);
        dfd = pfd >= 0 ? dir_open_noatime(pfd, ".", 0) : -1;
        if (pfd >= 0)
                close(pfd);
        d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                g_hash_table_destroy(names);
                return;
        }
        p.entries = g_ptr_array_new_with_free_func(g_free);
        while ((de = readdir(d)))
                if (de->d_type == DT_REG || de->d_type == DT_UNKNOWN)
                        g_ptr_array_add(p.entries, g_strdup(de->d_name));
        p.dfd = dirfd(d);
        pthread_mutex_init(&p.lock, NULL);
        while (started < STATTERS && started < p.entries->len &&
               pthread_create(&tids[started], NULL, statter, &p) == 0)
                started++;
        if (!started)
                statter(&p);
        for (unsigned i = 0; i < started; i++)
                pthread_join(tids[i], NULL);
        pthread_mutex_destroy(&p.lock);
        g_ptr_array_free(p.entries, TRUE);
        closedir(d);
        if (view_offline(v)) {
                g_hash_table_destroy(names);
                return;
        }
        pthread_mutex_lock(&rv.lock);
        old = hd->names;
        hd->names = names;
        hd->taken_ns = began;
        hd->changes = changes;
        pthread_mutex_unlock(&rv.lock);
        if (old) {
                g_hash_table_iter_init(&it, old);
                while (g_hash_table_iter_next(&it, &key, &val))
                        if (!g_hash_table_contains(names, key))
                                forget_name(v, hd->id, key);        /* gone */
                g_hash_table_destroy(old);
        }
}

int revalidate_lookup(struct view *v, fuse_ino_t parent, const char *name, struct stat *st)
{
        struct hot_dir *hd;
        struct stat *got;
        int r = -ENOENT;

        pthread_mutex_lock(&rv.lock);
        hd = rv.hot ? g_hash_table_lookup(rv.hot, &parent) : NULL;
        got = hd && hd->names ? g_hash_table_lookup(hd->names, name) : NULL;
        if (got && now_ns() - hd->taken_ns <= lease_ns(v) &&
            hd->changes == __atomic_load_n(&v->changes, __ATOMIC_ACQUIRE)) {
                *st = *got;
                r = 0;
        }
        pthread_mutex_unlock(&rv.lock);
        return r;
}

static void hot_dir_free(gpointer p)
{
        struct hot_dir *hd = p;

        if (hd->names)
                g_hash_table_destroy(hd->names);
        g_free(hd);
}

static void *revalidate_thread(void *arg)
{
        struct view *v = arg;
        uint64_t period = lease_ns(v) / 2;

        if (period < 200000000)
                period = 200000000;
        for (;;) {
                struct timespec ts = { (time_t)(period / 1000000000), (long)(period % 1000000000) };
                GPtrArray *dirs = g_ptr_array_new();
                GHashTableIter it;
                gpointer key, val;
                uint64_t now;

                nanosleep(&ts, NULL);
                /* Opens served locally ask the backing nothing: this probe
                 * (bounded) is what notices that a server went silent, or
                 * its mount died. */
                if (view_offline(v) || (v->cfg->backing_timeout_ms && backing_probe_noticed(v) < 0)) {
                        g_ptr_array_free(dirs, TRUE);
                        continue;
                }
                now = now_ns();
                pthread_mutex_lock(&rv.lock);
                g_hash_table_iter_init(&it, rv.hot);
                while (g_hash_table_iter_next(&it, &key, &val)) {
                        struct hot_dir *hd = val;

                        if (now - hd->used_ns > HOT_LEASES * lease_ns(v))
                                g_hash_table_iter_remove(&it);  /* only this thread frees */
                        else
                                g_ptr_array_add(dirs, hd);
                }
                pthread_mutex_unlock(&rv.lock);
                for (guint i = 0; i < dirs->len && !view_offline(v); i++)
                        pass_dir(v, g_ptr_array_index(dirs, i));
                g_ptr_array_free(dirs, TRUE);
        }
        return NULL;
}

void revalidate_note(struct view *v, fuse_ino_t id)
{
        fuse_ino_t dir = vnode_parent_id(v, id);
        struct hot_dir *hd;
        pthread_t t;

        if (!dir)
                return;
        pthread_mutex_lock(&rv.lock);
        if (!rv.started) {
                rv.hot = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, hot_dir_free);
                if (pthread_create(&t, NULL, revalidate_thread, v) == 0) {
                        pthread_detach(t);
                        rv.started = true;
                } else {
                        g_hash_table_destroy(rv.hot);
                        rv.hot = NULL;
                        pthread_mutex_unlock(&rv.lock);
                        return;
                }
        }
        hd = g_hash_table_lookup(rv.hot, &dir);
        if (!hd) {
                hd = g_new0(struct hot_dir, 1);
                hd->id = dir;
                g_hash_table_insert(rv.hot, &hd->id, hd);
        }
        hd->used_ns = now_ns();
        pthread_mutex_unlock(&rv.lock);
}
