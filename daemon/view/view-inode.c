/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-inode.c: the node table of a view.
 *
 * A node is a backing object the kernel holds a lookup count on.  Its nodeid
 * is the backing inode number (stable across a takeover by a new
 * fcache-view), except for the root (always 1) and for a reused inode number
 * whose old node is still alive, which gets a number from a high range.
 *
 * Nodes do not each keep a descriptor: there is a bounded cache of O_PATH
 * descriptors (max_fds, least recently used closed first), and a node
 * without one is re-resolved through its file handle (open_by_handle_at) or,
 * where the backing has no handles (sshfs), through its parent and name,
 * checking that the inode number is still the same.
 *
 * The backing handles of freed nodes are kept a while (a bounded FIFO), so
 * that the kernel can find a node again by nodeid alone (its file handles
 * for open_by_handle_at and NFS export) after it forgot it.
 *
 * A node is bound to one object of the tree served (the backing online, the
 * mirror offline) by that object's own inode number and handle there, never
 * by the inode number stat reports (offline, the server's, which an atomic
 * save gives to another local object, and the log's ids, which are reused):
 * otherwise one name could serve another object's bytes.  A switch between
 * online and offline binds each node to its counterpart in the other tree
 * (the same server object, or the one created offline, now replayed, at its
 * name); a node whose object was unlinked keeps it, as an open unlinked file
 * keeps its bytes; a node with no counterpart serves ESTALE and its name is
 * invalidated.  So a switch does not change what a node is, and the kernel
 * keeps its dentries of the objects that stay (a process's cwd).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "view.h"

#define ALT_ID_BASE (1ULL << 62)
#define FORGOTTEN_MAX 65536

#define MAX_ALIASES 16

struct alias {
        uint64_t parent;
        char *name;
};

struct vnode {
        uint64_t id;            /* nodeid, immutable */
        uint64_t ino;           /* inode number of the object in the tree served,
                                 * 0 when unbound; changes at a switch (itab_lock) */
        mode_t type;            /* S_IFMT bits, immutable */
        /* the fields below are protected by view.itab_lock */
        uint64_t nlookup;
        bool immortal;          /* root, or restored after a takeover */
        uint64_t parent;
        char *name;
        struct file_handle *fh; /* in the tree served; NULL when it has none */
        struct file_handle *sfh; /* offline: the server's, to find its object
                                  * again should its name go to another */
        struct file_handle *mfh; /* online: the mirror's when last offline, as sfh */
        uint64_t sino;          /* the server's inode number, 0 for an object made
                                 * offline and not yet replayed */
        bool detached;          /* its object was unlinked: fd keeps it for good */
        /* restored from a worker that saw the backing under another
         * numbering (a names_identify backing mounted again): its ino and
         * handle name another file there now, so online it is found by its
         * name, as the object of its type there */
        bool renumbered;
        GArray *aliases;        /* struct alias: other names (hard links) looked up */
        int fd;                 /* O_PATH in the tree served, or -1 */
        unsigned users;         /* vnode_get()s not yet put */
        GArray *old_fds;        /* int: descriptors of trees served before a
                                 * switch, which users may still hold */
        bool in_lru;
        struct vnode *lru_prev, *lru_next;
        uint64_t mirror_absent_gen; /* atomic: a directory the mirror lacked at
                                     * this mirror_dirs_gen(), or 0 */
        /* Offline, what naming it found, valid while ids_epoch is the view's
         * (vnode_ids_forget()): its log id, the st_ino it shows (an object
         * made offline), that its directory is complete.  0: not known. */
        uint64_t lid, lid_epoch;
        uint64_t shown_ino, shown_epoch;
        uint64_t complete_epoch;
        /* An object made offline: the st_ino it showed then, shown for its
         * server object kept_sino (the one the replay made) while the node
         * lives, so that a switch does not change what it is.  0: none. */
        uint64_t kept_ino, kept_sino;
};

uint64_t vnode_mirror_absent_gen(const struct vnode *n)
{
        return __atomic_load_n(&n->mirror_absent_gen, __ATOMIC_ACQUIRE);
}

void vnode_set_mirror_absent_gen(struct vnode *n, uint64_t gen)
{
        __atomic_store_n(&n->mirror_absent_gen, gen, __ATOMIC_RELEASE);
}
uint64_t vnode_ino(const struct vnode *n) { return n->ino; }

/*
 * What a node remembers of its mirror object's identity offline.  Which log
 * object a mirror object is, and the st_ino it shows, change only at a
 * switch (nodes are bound to other objects, the log forgets settled ones
 * after a reconnect), at a rename (an atomic save gives the renamed file the
 * replaced one's identity), a link (a file with several names is named by
 * each, for the log's aliases) or an unlink (a create cancelled), each of
 * which calls vnode_ids_forget(); and when a node's descriptor is resolved
 * again (it may be another object of the same inode number).  A reader takes
 * the epoch before it names the object, so what it learnt across a forget
 * is stored under the old epoch and never used.
 */
uint64_t vnode_ids_epoch(struct view *v)
{
        return __atomic_load_n(&v->ids_epoch, __ATOMIC_ACQUIRE);
}

void vnode_ids_forget(struct view *v)
{
        __atomic_add_fetch(&v->ids_epoch, 1, __ATOMIC_ACQ_REL);
}

static void ids_clear(struct vnode *n)
{
        n->lid_epoch = n->shown_epoch = n->complete_epoch = 0;
}

static struct vnode *node_locked(struct view *v, fuse_ino_t id)
{
        uint64_t key = id;

        return g_hash_table_lookup(v->nodes, &key);
}

void vnode_show_kept_ino(struct view *v, fuse_ino_t id, struct stat *st)
{
        struct vnode *n;

        if (!__atomic_load_n(&v->inos_kept, __ATOMIC_ACQUIRE))
                return;
        pthread_mutex_lock(&v->itab_lock);
        n = node_locked(v, id);
        if (n && n->kept_ino && (uint64_t)st->st_ino == n->kept_sino)
                st->st_ino = n->kept_ino;
        pthread_mutex_unlock(&v->itab_lock);
}

int vnode_known_lid(struct view *v, fuse_ino_t id, uint64_t *lid)
{
        uint64_t epoch = vnode_ids_epoch(v);
        struct vnode *n;
        int r = -ENOENT;

        pthread_mutex_lock(&v->itab_lock);
        n = node_locked(v, id);
        if (n && n->lid_epoch == epoch) {
                *lid = n->lid;
                r = 0;
        }
        pthread_mutex_unlock(&v->itab_lock);
        return r;
}

void vnode_remember_lid(struct view *v, fuse_ino_t id, uint64_t epoch, uint64_t lid)
{
        struct vnode *n;

        pthread_mutex_lock(&v->itab_lock);
        n = node_locked(v, id);
        if (n) {
                n->lid = lid;
                n->lid_epoch = epoch;
        }
        pthread_mutex_unlock(&v->itab_lock);
}

bool vnode_dir_complete(struct view *v, struct vnode *n, int fd)
{
        uint64_t epoch = vnode_ids_epoch(v);
        bool known, complete;

        pthread_mutex_lock(&v->itab_lock);
        known = n->complete_epoch == epoch;
        pthread_mutex_unlock(&v->itab_lock);
        if (known)
                return true;
        complete = offline_dir_complete(fd);
        if (complete) {
                pthread_mutex_lock(&v->itab_lock);
                n->complete_epoch = epoch;
                pthread_mutex_unlock(&v->itab_lock);
        }
        return complete;
}
mode_t vnode_type(const struct vnode *n) { return n->type; }

static void lru_del(struct view *v, struct vnode *n)
{
        if (!n->in_lru)
                return;
        if (n->lru_prev)
                n->lru_prev->lru_next = n->lru_next;
        else
                v->lru_head = n->lru_next;
        if (n->lru_next)
                n->lru_next->lru_prev = n->lru_prev;
        else
                v->lru_tail = n->lru_prev;
        n->lru_prev = n->lru_next = NULL;
        n->in_lru = false;
}

static void lru_add(struct view *v, struct vnode *n)
{
        if (n->in_lru || n->fd < 0 || n->id == FUSE_ROOT_ID || n->detached)
                return;
        n->lru_prev = v->lru_tail;
        n->lru_next = NULL;
        if (v->lru_tail)
                v->lru_tail->lru_next = n;
        else
                v->lru_head = n;
        v->lru_tail = n;
        n->in_lru = true;
}

/* itab_lock held */
static void evict_fds(struct view *v)
{
        while (v->open_fds > v->max_fds && v->lru_head) {
                struct vnode *n = v->lru_head;

                lru_del(v, n);
                close(n->fd);
                n->fd = -1;
                v->open_fds--;
        }
}

static void alias_clear(void *p)
{
        free(((struct alias *)p)->name);
}

/* itab_lock held: n is known as parent/name too (its main name is another). */
static void alias_add(struct vnode *n, uint64_t parent, const char *name)
{
        struct alias a = { parent, NULL };

        if (!n->aliases) {
                n->aliases = g_array_new(FALSE, FALSE, sizeof(struct alias));
                g_array_set_clear_func(n->aliases, alias_clear);
        }
        for (guint i = 0; i < n->aliases->len; i++) {
                struct alias *b = &g_array_index(n->aliases, struct alias, i);

                if (b->parent == parent && !strcmp(b->name, name))
                        return;
        }
        if (n->aliases->len >= MAX_ALIASES)
                g_array_remove_index(n->aliases, 0);
        a.name = strdup(name);
        if (a.name)
                g_array_append_val(n->aliases, a);
}

static void alias_del(struct vnode *n, uint64_t parent, const char *name)
{
        for (guint i = 0; n->aliases && i < n->aliases->len; i++) {
                struct alias *b = &g_array_index(n->aliases, struct alias, i);

                if (b->parent == parent && !strcmp(b->name, name)) {
                        g_array_remove_index(n->aliases, i);
                        return;
                }
        }
}

/* No users left: the descriptors of trees served before go.  Returns how many. */
static unsigned close_old_fds(struct vnode *n)
{
        unsigned closed = n->old_fds ? n->old_fds->len : 0;

        for (guint i = 0; i < closed; i++)
                close(g_array_index(n->old_fds, int, i));
        if (n->old_fds)
                g_array_free(n->old_fds, TRUE);
        n->old_fds = NULL;
        return closed;
}

static void node_free(struct vnode *n)
{
        if (n->aliases)
                g_array_free(n->aliases, TRUE);
        close_old_fds(n);
        if (n->fd >= 0)
                close(n->fd);
        free(n->name);
        free(n->fh);
        free(n->sfh);
        free(n->mfh);
        free(n);
}

struct forgotten {
        uint64_t ino;
        struct file_handle *fh;
};

static void forgotten_free(void *p)
{
        struct forgotten *g = p;

        free(g->fh);
        free(g);
}

/* itab_lock held: keeps the backing handle of a node being freed, so that
 * the kernel can still find it by nodeid (vnode_lookup_dot); takes n->fh. */
static void remember_forgotten(struct view *v, struct vnode *n)
{
        struct forgotten *g;
        uint64_t *key;

        if (!n->fh || !v->forgotten)
                return;
        g = malloc(sizeof(*g));
        key = malloc(sizeof(*key));
        if (!g || !key) {
                free(g);
                free(key);
                return;
        }
        g->ino = n->ino;
        g->fh = n->fh;
        n->fh = NULL;
        *key = n->id;
        g_hash_table_replace(v->forgotten, key, g);
        g_queue_push_tail(v->forgotten_order, g_memdup2(key, sizeof(*key)));
        while (g_queue_get_length(v->forgotten_order) > FORGOTTEN_MAX) {
                uint64_t *old = g_queue_pop_head(v->forgotten_order);

                /* (a newer entry of the same nodeid goes early: harmless) */
                g_hash_table_remove(v->forgotten, old);
                g_free(old);
        }
}

/* itab_lock held: n out of by_ino, whose key is n's own ino field, if it
 * is the node found by that number. */
static void by_ino_drop(struct view *v, struct vnode *n)
{
        if (n->ino && g_hash_table_lookup(v->by_ino, &n->ino) == n)
                g_hash_table_remove(v->by_ino, &n->ino);
}

/* itab_lock held; removes a node nobody needs any more. */
static void maybe_free(struct view *v, struct vnode *n)
{
        if (n->nlookup || n->users || n->immortal)
                return;
        remember_forgotten(v, n);
        lru_del(v, n);
        if (n->fd >= 0)
                v->open_fds--;
        g_hash_table_remove(v->nodes, &n->id);
        by_ino_drop(v, n);
        node_free(n);
}

int vnode_table_init(struct view *v)
{
        struct vnode *root = calloc(1, sizeof(*root));
        struct stat st;

        if (!root)
                return -ENOMEM;
        pthread_mutex_init(&v->itab_lock, NULL);
        v->ids_epoch = 1;       /* a node's 0 is "not known" */
        v->nodes = g_hash_table_new(g_int64_hash, g_int64_equal);
        v->by_ino = g_hash_table_new(g_int64_hash, g_int64_equal);
        v->forgotten = g_hash_table_new_full(g_int64_hash, g_int64_equal, free, forgotten_free);
        v->forgotten_order = g_queue_new();
        if (!v->max_fds)
                v->max_fds = 4096;
        v->next_alt_id = ALT_ID_BASE;
        if (fstat(view_served_root(v), &st) < 0) {
                free(root);
                return -errno;
        }
        root->id = FUSE_ROOT_ID;
        root->ino = st.st_ino;
        root->sino = view_offline(v) ? 0 : st.st_ino;
        root->type = S_IFDIR;
        root->immortal = true;
        root->fd = view_served_root(v);
        root->parent = FUSE_ROOT_ID;
        g_hash_table_insert(v->nodes, &root->id, root);
        g_hash_table_insert(v->by_ino, &root->ino, root);
        return 0;
}

/* The descriptor open_by_handle_at() needs for the tree @offline says, or -1. */
static int handle_mount_fd_in(struct view *v, bool offline)
{
        if (offline)
                return v->mirror_fd;
        return v->handles ? v->mount_fd : -1;
}

static struct file_handle *handle_of_in(struct view *v, bool offline, int fd)
{
        struct file_handle *fh;
        int mount_id;

        if (handle_mount_fd_in(v, offline) < 0)
                return NULL;
        fh = malloc(sizeof(*fh) + MAX_HANDLE_SZ);
        if (!fh)
                return NULL;
        fh->handle_bytes = MAX_HANDLE_SZ;
        if (name_to_handle_at(fd, "", fh, &mount_id, AT_EMPTY_PATH) < 0) {
                free(fh);
                return NULL;
        }
        return fh;
}

static bool same_handle(const struct file_handle *a, const struct file_handle *b)
{
        if (!a || !b)
                return true;    /* cannot tell: trust the inode number */
        return a->handle_type == b->handle_type && a->handle_bytes == b->handle_bytes &&
               !memcmp(a->f_handle, b->f_handle, a->handle_bytes);
}

/* In a node record's type word beside S_IFMT: its number and handle are of
 * a numbering the backing no longer has (a successor finds it by name). */
#define NODE_RENUMBERED 0x40000000u

static void log_node(struct view *v, const struct vnode *n)
{
        state_log_node(v, n->id, n->ino, n->type | (n->renumbered ? NODE_RENUMBERED : 0),
                       n->parent, n->name ? n->name : "",
                       n->fh ? n->fh->f_handle : NULL, n->fh ? n->fh->handle_bytes : 0,
                       n->fh ? n->fh->handle_type : 0);
}

/* itab_lock held: n's other names, for a successor (view-state.c). */
static void log_aliases(struct view *v, const struct vnode *n)
{
        GByteArray *b = g_byte_array_new();
        uint32_t count = 0;

        for (guint i = 0; n->aliases && i < n->aliases->len; i++) {
                const struct alias *a = &g_array_index(n->aliases, struct alias, i);

                state_alias_put(b, a->parent, a->name);
                count++;
        }
        state_log_aliases(v, n->id, b->data, b->len, count);
        g_byte_array_free(b, TRUE);
}

static struct file_handle *handle_of(struct view *v, int fd)
{
        return handle_of_in(v, view_offline(v), fd);
}

/* The object's own identity in the tree @offline says (not the one stat reports). */
static int real_stat_in(struct view *v, bool offline, int fd, struct stat *st)
{
        if (!offline)
                return backing_fstatat_in(v, false, fd, NULL, st);      /* bounded */
        return fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

static int real_stat(struct view *v, int fd, struct stat *st)
{
        return real_stat_in(v, view_offline(v), fd, st);
}

static int check_ino_in(struct view *v, bool offline, int fd, uint64_t ino)
{
        struct stat st;
        int r = real_stat_in(v, offline, fd, &st);

        if (r < 0)
                return r;
        return st.st_ino == ino ? 0 : -ESTALE;
}

/* open_by_handle_at() of a server's object, on a helper. */
struct handle_open {
        int mount_fd;           /* a duplicate: a reconnect may replace the view's */
        int fd;                 /* the answer: dropped with the job if nobody waits */
        struct file_handle *fh; /* a copy */
};

static int handle_open_run(void *arg)
{
        struct handle_open *h = arg;

        h->fd = open_by_handle_at(h->mount_fd, h->fh, O_PATH | O_CLOEXEC);
        return h->fd < 0 ? -errno : 0;
}

static void handle_open_drop(void *arg)
{
        struct handle_open *h = arg;

        if (h->fd >= 0)
                close(h->fd);
        close(h->mount_fd);
        free(h->fh);
        free(h);
}

/* An O_PATH descriptor of handle fh in the tree @offline says (bounded as
 * the backing's calls: a server's object may need a round trip), or -errno. */
static int open_handle_in(struct view *v, bool offline, const struct file_handle *fh)
{
        int mfd = handle_mount_fd_in(v, offline), r;
        size_t fh_size = sizeof(*fh) + fh->handle_bytes;
        struct handle_open *h;

        if (mfd < 0)
                return -EOPNOTSUPP;
        if (!backing_bounded_in(v, offline)) {
                r = open_by_handle_at(mfd, (struct file_handle *)fh, O_PATH | O_CLOEXEC);
                return r < 0 ? -errno : r;
        }
        h = calloc(1, sizeof(*h));
        if (!h)
                return -ENOMEM;
        h->fd = -1;
        h->fh = malloc(fh_size);
        h->mount_fd = fcntl(mfd, F_DUPFD_CLOEXEC, 0);
        if (!h->fh || h->mount_fd < 0) {
                r = h->fh ? -errno : -ENOMEM;
                if (h->mount_fd >= 0)
                        close(h->mount_fd);
                free(h->fh);
                free(h);
                return r;
        }
        memcpy(h->fh, fh, fh_size);
        r = backing_call_bounded_in(v, offline, handle_open_run, h, handle_open_drop);
        if (r == -ETIMEDOUT)
                return r;       /* h is the helper's now */
        if (r == 0) {
                r = h->fd;
                h->fd = -1;
        }
        handle_open_drop(h);
        return r;
}

/*
 * The tree served (*offline) and the switch count it goes with, read as one.
 * served_lock is not held across the node look-ups that follow (they may
 * call the backing, and a switch waits for its holders): a switch that
 * passed the request by meanwhile (served_switched()) makes it look again.
 */
static uint64_t served_now(struct view *v, bool *offline)
{
        uint64_t seen;

        pthread_rwlock_rdlock(&v->served_lock);
        seen = __atomic_load_n(&v->switches, __ATOMIC_ACQUIRE);
        *offline = view_offline(v);
        pthread_rwlock_unlock(&v->served_lock);
        return seen;
}

/*
 * Opens an O_PATH descriptor for n (identity ino, in the tree served when it
 * was read) without holding itab_lock.  Each step calls the tree it reads
 * as one with its descriptor: a forced switch meanwhile never makes a
 * server's descriptor be called unbounded (the caller sees n->ino change).
 */
static int resolve(struct view *v, struct vnode *n, struct file_handle *fh, uint64_t parent,
                   const char *name, uint64_t ino, bool renumbered, uint64_t *new_ino)
{
        struct vnode *p;
        struct stat st;
        bool offline;
        int fd, pfd;

        if (!ino)
                return -ESTALE;         /* no counterpart in the tree served */
        served_now(v, &offline);
        renumbered = renumbered && !offline;
        if (fh && !renumbered) {
                fd = open_handle_in(v, offline, fh);
                if (fd == -ETIMEDOUT)
                        return fd;
                if (fd >= 0) {
                        if (check_ino_in(v, offline, fd, ino) == 0)
                                return fd;
                        close(fd);
                }
        }
        if (!name || !*name || parent == n->id)
                return -ESTALE;
        pfd = vnode_get_served(v, parent, &p, &offline, NULL);
        if (pfd < 0)
                return pfd;
        fd = backing_openat_in(v, offline, pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        vnode_put(v, p);
        if (fd < 0)
                return fd == -ENOENT ? -ESTALE : fd;
        if (renumbered) {
                /* Names identify objects on such a backing. */
                int r = real_stat_in(v, offline, fd, &st);

                if (r < 0 || ((st.st_mode ^ n->type) & S_IFMT)) {
                        close(fd);
                        return r < 0 ? r : -ESTALE;
                }
                *new_ino = st.st_ino;
                return fd;
        }
        if (check_ino_in(v, offline, fd, ino) < 0) {
                close(fd);
                return -ESTALE;
        }
        return fd;
}

/* itab_lock held: renumbered node n found on the backing as @ino. */
static void renumber(struct view *v, struct vnode *n, uint64_t ino)
{
        if (g_hash_table_lookup(v->by_ino, &n->ino) == n)
                g_hash_table_remove(v->by_ino, &n->ino);
        n->ino = n->sino = ino;
        n->renumbered = false;
        free(n->fh);
        n->fh = handle_of(v, n->fd);
        if (!g_hash_table_contains(v->by_ino, &n->ino))
                g_hash_table_insert(v->by_ino, &n->ino, n);
        log_node(v, n);
}

int vnode_get(struct view *v, fuse_ino_t id, struct vnode **out)
{
        struct file_handle *fh = NULL;
        uint64_t key = id, parent, ino, new_ino;
        char *name = NULL;
        unsigned tries = 0;
        bool renumbered;
        struct vnode *n;
        int fd;

again:
        pthread_mutex_lock(&v->itab_lock);
        n = g_hash_table_lookup(v->nodes, &key);
        if (!n) {
                pthread_mutex_unlock(&v->itab_lock);
                log_debug("Request for unknown node %" PRIu64, (uint64_t)id);
                return -ESTALE;
        }
        n->users++;
        lru_del(v, n);
        if (n->fd >= 0) {
                pthread_mutex_unlock(&v->itab_lock);
                *out = n;
                return n->fd;
        }
        if (n->fh) {
                fh = malloc(sizeof(*fh) + n->fh->handle_bytes);
                if (fh)
                        memcpy(fh, n->fh, sizeof(*fh) + n->fh->handle_bytes);
        }
        name = n->name ? strdup(n->name) : NULL;
        parent = n->parent;
        ino = n->ino;
        renumbered = n->renumbered;
        pthread_mutex_unlock(&v->itab_lock);

        new_ino = 0;
        fd = resolve(v, n, fh, parent, name, ino, renumbered, &new_ino);
        free(fh);
        free(name);
        fh = NULL;      /* a node without a handle, looked for again */
        name = NULL;

        pthread_mutex_lock(&v->itab_lock);
        if (fd < 0) {
                /* The state switched meanwhile: looked for in the new tree. */
                bool switched = fd != -ETIMEDOUT && (n->fd >= 0 || n->ino != ino);

                n->users--;
                maybe_free(v, n);
                pthread_mutex_unlock(&v->itab_lock);
                if (switched && ++tries < 3)
                        goto again;
                return fd;
        }
        if (n->fd >= 0 || n->ino != ino) {
                close(fd);      /* resolved meanwhile, or the state switched */
                if (n->fd < 0) {
                        n->users--;
                        maybe_free(v, n);
                        pthread_mutex_unlock(&v->itab_lock);
                        if (++tries < 3)
                                goto again;
                        return -ESTALE;
                }
        } else {
                n->fd = fd;
                v->open_fds++;
                ids_clear(n);
                if (new_ino && n->renumbered)
                        renumber(v, n, new_ino);
        }
        fd = n->fd;
        evict_fds(v);
        pthread_mutex_unlock(&v->itab_lock);
        *out = n;
        return fd;
}

static bool served_switched(struct view *v, uint64_t seen)
{
        return __atomic_load_n(&v->switches, __ATOMIC_ACQUIRE) != seen;
}

int vnode_get_served(struct view *v, fuse_ino_t id, struct vnode **out, bool *offline,
                     uint64_t *switches)
{
        uint64_t seen;
        int fd;

        for (;;) {
                seen = served_now(v, offline);
                fd = vnode_get(v, id, out);
                if (!served_switched(v, seen))
                        break;
                if (fd >= 0)
                        vnode_put(v, *out);
        }
        if (switches)
                *switches = seen;
        return fd;
}

void vnode_put(struct view *v, struct vnode *n)
{
        pthread_mutex_lock(&v->itab_lock);
        if (--n->users == 0) {
                v->open_fds -= close_old_fds(n);
                lru_add(v, n);
                evict_fds(v);
                maybe_free(v, n);
        }
        pthread_mutex_unlock(&v->itab_lock);
}

int vnode_get_pair(struct view *v, fuse_ino_t a, struct vnode **na, int *fa, fuse_ino_t b,
                   struct vnode **nb, int *fb)
{
        *fa = vnode_get(v, a, na);
        if (*fa < 0)
                return *fa;
        *fb = vnode_get(v, b, nb);
        if (*fb < 0) {
                vnode_put(v, *na);
                return *fb;
        }
        return 0;
}

int vnode_get_pair_served(struct view *v, fuse_ino_t a, struct vnode **na, int *fa, fuse_ino_t b,
                          struct vnode **nb, int *fb, bool *offline)
{
        uint64_t seen;
        int r;

        for (;;) {
                seen = served_now(v, offline);
                r = vnode_get_pair(v, a, na, fa, b, nb, fb);
                if (!served_switched(v, seen))
                        return r;
                if (r == 0) {
                        vnode_put(v, *nb);
                        vnode_put(v, *na);
                }
        }
}

int vnode_fill_stat(struct view *v, int fd, struct stat *st)
{
        if (!view_offline(v))
                return backing_fstatat(v, fd, NULL, st);        /* bounded */
        if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        offline_translate_stat(v, fd, st);
        return 0;
}

int vnode_fill_stat_of(struct view *v, struct vnode *n, int fd, struct stat *st)
{
        return vnode_fill_stat_in(v, view_offline(v), n, fd, st);
}

int vnode_fill_stat_in(struct view *v, bool offline, struct vnode *n, int fd, struct stat *st)
{
        uint64_t epoch, shown = 0;

        if (!offline)
                return backing_fstatat_in(v, false, fd, NULL, st);      /* bounded */
        epoch = vnode_ids_epoch(v);
        if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        pthread_mutex_lock(&v->itab_lock);
        if (n->shown_epoch == epoch)
                shown = n->shown_ino;
        pthread_mutex_unlock(&v->itab_lock);
        if (shown) {
                st->st_ino = shown;
                st->st_dev = v->backing_dev;
                return 0;
        }
        if (offline_translate_stat(v, fd, st) == OFFLINE_SHOWN_BY_LID) {
                pthread_mutex_lock(&v->itab_lock);
                n->shown_ino = st->st_ino;
                n->shown_epoch = epoch;
                pthread_mutex_unlock(&v->itab_lock);
        }
        return 0;
}

static void free_entry_name(void *p)
{
        g_free(((struct vnode_entry *)p)->name);
}

static unsigned depth_of(struct view *v, const struct vnode *n)
{
        unsigned d = 0;

        while (n && n->id != FUSE_ROOT_ID && d < 4096) {
                uint64_t key = n->parent;

                n = g_hash_table_lookup(v->nodes, &key);
                d++;
        }
        return d;
}

static gint by_depth(gconstpointer a, gconstpointer b, gpointer data)
{
        unsigned da = depth_of(data, *(struct vnode *const *)a);
        unsigned db = depth_of(data, *(struct vnode *const *)b);

        return da < db ? -1 : da > db;
}

/*
 * The server identity of node n before the switch to @offline: going
 * offline, the backing object's own inode number; going online, what its
 * mirror object says now (an atomic save gave it the replaced file's), 0
 * for one made offline, whose log id is then *lid (0 if none).  Sets *gone
 * when no name holds the mirror object (unlinked, or its only link left the
 * links index's): n keeps it (local, so it never waits for a server); going
 * offline, when the server object n holds on a local backing was (asked
 * only there: a network server may be gone by now).
 */
static uint64_t server_identity(struct view *v, struct vnode *n, bool offline, bool *gone,
                                uint64_t *lid)
{
        struct mirror_base b;
        struct stat st;
        uint64_t sino;
        int fd = n->fd;

        *gone = false;
        *lid = 0;
        if (!n->ino)
                return n->sino;         /* had no counterpart: what it was last */
        if (offline) {
                /* The server's object: its own inode number; none when the
                 * view saw its last name go (a rename over it online). */
                if (fd >= 0 && v->backing_local &&
                    fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 &&
                    st.st_ino == n->ino && st.st_nlink == 0 && !S_ISDIR(st.st_mode)) {
                        *gone = true;
                        return 0;
                }
                return n->sino = n->ino;
        }
        /* By the mount's O_RDONLY descriptor: open_by_handle_at() refuses an
         * O_PATH one.  A handle of the server's (restored from a log written
         * online) may decode into the server's file when both trees share a
         * filesystem: only the mirror's marks are read from it. */
        if (fd < 0 && n->fh)
                fd = open_by_handle_at(v->mirror_mount_fd, n->fh, O_PATH | O_CLOEXEC);
        if (fd < 0)
                return n->sino;
        sino = mirror_get_base(fd, NULL, &b) == 0 ? b.ver.ino : 0;
        /* A file of several names whose names all went offline keeps the
         * links index's link: the replay removed its server object, so it
         * has no counterpart there and stays this one, as if unlinked. */
        if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == n->ino &&
            mirror_nameless(v, &st, sino)) {
                *gone = true;
                if (fd != n->fd) {
                        n->fd = fd;
                        v->open_fds++;
                }
                return 0;
        }
        n->sino = sino;
        if (!n->sino && mirror_get_lid(fd, NULL, lid) < 0)
                *lid = 0;
        if (fd != n->fd)
                close(fd);
        return n->sino;
}

/*
 * Whether an object of stat result @r, *st (-errno: *unanswered when it
 * timed out) may be n's in the new tree: it stats as n's type and no other
 * node is bound to it.
 */
static bool candidate(struct vnode *n, int r, const struct stat *st, GHashTable *bound,
                      bool *unanswered)
{
        *unanswered = r == -ETIMEDOUT;
        return r == 0 && !((st->st_mode ^ n->type) & S_IFMT) &&
               !g_hash_table_contains(bound, &(uint64_t){ st->st_ino });
}

/* What n's name in new-tree directory pfd names: an O_PATH descriptor (or
 * -errno) and its stat's result. */
struct name_look {
        struct vnode *n;
        const char *name;       /* one of n's other names, or NULL: n->name */
        int pfd;
        int fd;
        int r;
        struct stat st;
        bool filled;            /* looked up ahead (look_ahead()) */
};

/* Of the tree the volume switches to: the mirror (@offline) or the server. */
static void look_name(struct view *v, bool offline, struct name_look *l)
{
        l->fd = backing_openat_in(v, offline, l->pfd, l->name ? l->name : l->n->name,
                                  O_PATH | O_NOFOLLOW | O_CLOEXEC);
        l->r = l->fd < 0 ? l->fd : real_stat_in(v, offline, l->fd, &l->st);
}

/*
 * itab_lock held: the counterpart of n (server identity sino, or log id
 * lid when made offline) under new-tree directory pfd, as an O_PATH
 * descriptor with its own inode number, or -1.  Found by n's name, which may
 * since name another object (a rename over one of several names): only the
 * same object is n's.  @pre: that name looked up already (its descriptor
 * is taken from it), or NULL.
 */
static int counterpart_at(struct view *v, struct vnode *n, int pfd, const char *name,
                          uint64_t sino, uint64_t lid, struct name_look *pre,
                          GHashTable *bound, struct stat *st, bool *unanswered);

static int counterpart(struct view *v, struct vnode *n, int pfd, uint64_t sino, uint64_t lid,
                       struct name_look *pre, GHashTable *bound, struct stat *st,
                       bool *unanswered)
{
        return counterpart_at(v, n, pfd, NULL, sino, lid, pre, bound, st, unanswered);
}

/* counterpart() by another name of n's (@name, NULL for n->name), in pfd. */
static int counterpart_at(struct view *v, struct vnode *n, int pfd, const char *name,
                          uint64_t sino, uint64_t lid, struct name_look *pre,
                          GHashTable *bound, struct stat *st, bool *unanswered)
{
        struct name_look l = { .n = n, .name = name, .pfd = pfd };
        struct mirror_base b;
        int fd, r;

        if (pfd < 0 || !n->name || *unanswered)
                return -1;
        if (pre) {
                l = *pre;
                pre->fd = -1;
        } else {
                look_name(v, view_offline(v), &l);
        }
        fd = l.fd;
        *st = l.st;
        if (!candidate(n, l.r, st, bound, unanswered))
                goto no;
        if (view_offline(v)) {
                /* The mirror object of this server object, also before the
                 * resync after a reconnect gave it the identity the replay
                 * made (the log's content renamed over the server's file, or
                 * its create). */
                uint64_t mlid;

                r = mirror_get_base(fd, NULL, &b);
                /* Made offline, and replayed as server object sino since. */
                if (r == -ENODATA && mirror_get_lid(fd, NULL, &mlid) == 0 &&
                    offline_object_is(v, mlid, sino))
                        return fd;
                if (r < 0 || (b.ver.ino != sino && !offline_became(v, b.ver.ino, sino)))
                        goto no;
        } else if (v->nodes_renumbered) {
                /* The backing numbers its files anew since n was bound (a
                 * share mounted again that makes its numbers up): names
                 * identify objects there, as the replay takes them. */
                return fd;
        } else if (sino ? (uint64_t)st->st_ino != sino &&
                          !offline_became(v, sino, (uint64_t)st->st_ino)
                        : !lid || !offline_object_is(v, lid, (uint64_t)st->st_ino)) {
                /* Another object, unless the replay has just renamed the
                 * node's new content over the server's, or made it there;
                 * a node that knows neither (it lost its object at an
                 * earlier switch) takes none by its name. */
                goto no;
        }
        return fd;
no:
        if (fd >= 0)
                close(fd);
        return -1;
}

/*
 * itab_lock held, going online: n's server object found by the handle it
 * had there (its name now names another object, or none), when that is
 * still the object n was.  An O_PATH descriptor, or -1.
 */
static int counterpart_by_handle(struct view *v, struct vnode *n, uint64_t sino,
                                 GHashTable *bound, struct stat *st, bool *unanswered)
{
        int fd;

        /* A handle of another mount's numbering opens whichever file has
         * that number now. */
        if (!n->sfh || !sino || *unanswered || v->nodes_renumbered)
                return -1;
        fd = open_handle_in(v, false, n->sfh);
        if (candidate(n, fd < 0 ? fd : real_stat(v, fd, st), st, bound, unanswered) &&
            (uint64_t)st->st_ino == sino &&
            st->st_nlink > 0)
                return fd;
        if (fd >= 0)
                close(fd);
        return -1;
}

/*
 * itab_lock held, going offline: n's mirror object found by the handle it
 * had there when last offline (its name no longer leads to it: the kernel
 * forgot its parent, or the name went to another object), when that is
 * still linked and the mirror of server object sino.  An O_PATH
 * descriptor, or -1.
 */
static int counterpart_by_mirror_handle(struct view *v, struct vnode *n, uint64_t sino,
                                        GHashTable *bound, struct stat *st, bool *unanswered)
{
        struct mirror_base b;
        int fd;

        if (!n->mfh || !sino)
                return -1;
        fd = open_by_handle_at(v->mirror_mount_fd, n->mfh, O_PATH | O_CLOEXEC);
        if (fd < 0)
                fd = -errno;
        /* Its only link may be the links index's: no name holds it (a name
         * of its server file got a copy of its own since), and its bytes
         * may be old. */
        if (candidate(n, fd < 0 ? fd : real_stat_in(v, true, fd, st), st, bound, unanswered) &&
            st->st_nlink > 0 && mirror_get_base(fd, NULL, &b) == 0 &&
            (b.ver.ino == sino || offline_became(v, b.ver.ino, sino)) &&
            !mirror_nameless(v, st, b.ver.ino))
                return fd;
        if (fd >= 0)
                close(fd);
        return -1;
}

/*
 * itab_lock held: n's counterpart by one of its other names (a file of
 * several whose name the node knows went to another object meanwhile),
 * whose directory is bound already; that name becomes n's.  An O_PATH
 * descriptor, or -1.
 */
static int counterpart_by_alias(struct view *v, struct vnode *n, GHashTable *dirs,
                                uint64_t sino, uint64_t lid, GHashTable *bound,
                                struct stat *st, bool *unanswered)
{
        for (guint i = 0; n->aliases && i < n->aliases->len && !*unanswered; i++) {
                struct alias *a = &g_array_index(n->aliases, struct alias, i);
                int pfd = GPOINTER_TO_INT(g_hash_table_lookup(dirs, &a->parent)) - 1;
                int fd = pfd < 0 ? -1 : counterpart_at(v, n, pfd, a->name, sino, lid, NULL,
                                                       bound, st, unanswered);
                uint64_t parent = a->parent;
                char *name;

                if (fd < 0)
                        continue;
                /* The names swap: the one it was known by is another now. */
                name = a->name;
                a->name = n->name;
                a->parent = n->parent;
                n->name = name;
                n->parent = parent;
                log_aliases(v, n);
                return fd;
        }
        return -1;
}

/*
 * itab_lock held, going offline: n's mirror object found through the links
 * index, when none of the names the node table knows leads to it (another
 * file was renamed over its name, and the names it keeps were never looked
 * up through the view) and a name still holds it.  A name of it in n's
 * directory (@pfd) becomes n's, for the log to name it by; else the index's
 * descriptor.  An O_PATH descriptor, or -1.
 */
static int counterpart_by_links_index(struct view *v, struct vnode *n, int pfd, uint64_t sino,
                                      GHashTable *bound, struct stat *st, bool *unanswered)
{
        struct mirror_base b;
        char key[32], *name;
        int fd, at;

        if (!sino || v->mirror_links_fd < 0 || !mirror_linkable(n->type))
                return -1;
        mirror_links_key(key, sizeof(key), sino);
        fd = openat(v->mirror_links_fd, key, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                fd = -errno;
        /* As by the mirror handle: its only link may be the index's. */
        if (!candidate(n, fd < 0 ? fd : real_stat_in(v, true, fd, st), st, bound, unanswered) ||
            st->st_nlink < 2 || mirror_get_base(fd, NULL, &b) < 0 || b.ver.ino != sino) {
                if (fd >= 0)
                        close(fd);
                return -1;
        }
        name = pfd >= 0 ? offline_name_in(pfd, st->st_ino) : NULL;
        at = name ? counterpart_at(v, n, pfd, name, sino, 0, NULL, bound, st, unanswered) : -1;
        if (at < 0) {
                free(name);
                return fd;
        }
        close(fd);
        free(n->name);
        n->name = name;
        return at;
}

/*
 * Going online, the names of one depth's nodes are looked up on the server
 * FetchThreads at a time: each is a round trip over a network backing, and
 * changes wait for the switch (the kernel may know thousands of nodes after
 * an offline session).  Once one goes unanswered the rest are not asked.
 */
struct look_ahead {
        struct view *v;
        struct name_look *looks;
        bool unanswered;
};

static void look_ahead_one(void *ctx, guint i)
{
        struct look_ahead *a = ctx;
        struct name_look *l = &a->looks[i];

        /* Not one to look up here, or asked nothing more: l->fd, l->r are
         * -ETIMEDOUT already. */
        if (!l->filled || __atomic_load_n(&a->unanswered, __ATOMIC_ACQUIRE))
                return;
        look_name(a->v, false, l);
        if (l->r == -ETIMEDOUT)
                __atomic_store_n(&a->unanswered, true, __ATOMIC_RELEASE);
}

/* itab_lock held: looks up the names of nodes all[from..to) whose parents
 * are bound (their directories in @dirs), into pre[from..to). */
static void look_ahead(struct view *v, GPtrArray *all, guint from, guint to, GHashTable *dirs,
                       struct name_look *pre, bool unanswered)
{
        struct look_ahead a = { .v = v, .looks = pre + from, .unanswered = unanswered };
        guint asked = 0;

        for (guint i = from; i < to; i++) {
                struct vnode *n = g_ptr_array_index(all, i);
                uint64_t pkey = n->parent;

                pre[i] = (struct name_look){ .n = n, .fd = -1 };
                pre[i].pfd = GPOINTER_TO_INT(g_hash_table_lookup(dirs, &pkey)) - 1;
                if (n->id != FUSE_ROOT_ID && !n->detached && n->name && pre[i].pfd >= 0) {
                        pre[i].filled = true;
                        pre[i].fd = pre[i].r = -ETIMEDOUT;
                        asked++;
                }
        }
        if (asked)
                fetch_pool_run(v, to - from, look_ahead_one, &a);
}

/*
 * itab_lock held, at a switch to @offline: n is bound to fd, its
 * counterpart in the new tree (stat st), or to none (fd < 0: ESTALE until
 * the next switch finds it again); its entry e goes to ids.  Takes fd.
 */
static void switch_node(struct view *v, struct vnode *n, bool offline, int fd, struct stat *st,
                        uint64_t shown_epoch, GHashTable *bound, GHashTable *dirs,
                        struct vnode_entry *e, GArray *ids)
{
        /* The descriptor of the tree served before goes, at the last put
         * when users hold it: a request that gets the node from now on is
         * given the new tree's, never the old one, whose server may be
         * gone. */
        if (n->fd >= 0 && n->users) {
                if (!n->old_fds)
                        n->old_fds = g_array_new(FALSE, FALSE, sizeof(int));
                g_array_append_val(n->old_fds, n->fd);
                n->fd = -1;
        } else if (n->fd >= 0) {
                lru_del(v, n);
                close(n->fd);
                n->fd = -1;
                v->open_fds--;
        }
        free(n->sfh);
        n->sfh = offline ? n->fh : NULL;
        if (!offline && n->fh) {
                /* To find its mirror object by, should its name go. */
                free(n->mfh);
                n->mfh = n->fh;
        } else if (offline && fd >= 0) {
                free(n->mfh);
                n->mfh = NULL;
        }
        n->fh = NULL;
        n->renumbered = false;  /* bound in the tree switched to */
        if (fd < 0) {
                n->ino = 0;
                e->inval_name = true;
                g_array_append_val(ids, *e);
                log_node(v, n);
                return;
        }
        n->ino = st->st_ino;
        if (!offline)
                n->sino = st->st_ino;
        /* Made offline and shown by its log id: the server's object the
         * replay made goes on showing that st_ino. */
        if (!offline && n->shown_epoch == shown_epoch && n->shown_ino) {
                n->kept_ino = n->shown_ino;
                n->kept_sino = n->sino;
                __atomic_store_n(&v->inos_kept, true, __ATOMIC_RELEASE);
        }
        n->fh = handle_of(v, fd);
        g_hash_table_replace(bound, &n->ino, n);
        if (S_ISDIR(st->st_mode)) {
                g_hash_table_insert(dirs, &n->id, GINT_TO_POINTER(fd + 1));
                n->fd = dup(fd);
        } else {
                n->fd = fd;
        }
        if (n->fd >= 0) {
                v->open_fds++;
                if (!n->users)
                        lru_add(v, n);
        }
        log_node(v, n);
        g_array_append_val(ids, *e);
}

/* A node whose name did not lead to its counterpart: looked for again once
 * every node has been by its name. */
struct switch_later {
        struct vnode *n;
        struct vnode_entry e;
        uint64_t sino, lid;
        bool named;             /* its name was looked up (its parent was bound) */
};

GArray *vnode_switch_all(struct view *v, bool *unanswered)
{
        GArray *ids = g_array_new(FALSE, FALSE, sizeof(struct vnode_entry));
        GArray *later = g_array_new(FALSE, FALSE, sizeof(struct switch_later));
        GPtrArray *all = g_ptr_array_new();
        GHashTable *bound = g_hash_table_new(g_int64_hash, g_int64_equal);
        GHashTable *dirs = g_hash_table_new(g_int64_hash, g_int64_equal); /* id -> fd + 1 */
        uint64_t shown_epoch = vnode_ids_epoch(v); /* what nodes showed offline */
        bool offline = view_offline(v);
        struct name_look *pre;  /* per node of all: its name looked up ahead, going online */
        unsigned depth = UINT_MAX, d;
        GHashTableIter it;
        gpointer key, val;
        struct stat st;

        vnode_ids_forget(v);    /* every node is bound anew */
        pthread_mutex_lock(&v->itab_lock);
        g_hash_table_iter_init(&it, v->nodes);
        while (g_hash_table_iter_next(&it, &key, &val))
                g_ptr_array_add(all, val);
        /* Parents before children: a child is found in its parent's counterpart. */
        g_ptr_array_sort_with_data(all, by_depth, v);
        pre = g_new0(struct name_look, all->len ? all->len : 1);
        for (guint i = 0; i < all->len; i++)
                pre[i].fd = -1;
        /*
         * First each node by its name: an object its name leads to with the
         * node's own identity is that node's.  Another node claims an object
         * by weaker evidence (a handle, another name, the links index by a
         * server inode number, which the server gives to a new file once
         * the node's object went) only after, when no node's name took it.
         */
        for (guint i = 0; i < all->len; i++) {
                struct vnode *n = g_ptr_array_index(all, i);
                struct vnode_entry e = { n->id, n->parent, NULL, false };
                uint64_t pkey = n->parent, sino, lid;
                bool gone;
                int pfd, fd;

                if (n->id == FUSE_ROOT_ID) {
                        int r;

                        n->fd = view_served_root(v);
                        r = *unanswered ? -ETIMEDOUT : real_stat(v, n->fd, &st);
                        *unanswered = r == -ETIMEDOUT;
                        if (r == 0)
                                n->ino = st.st_ino;
                        g_hash_table_replace(bound, &n->ino, n);
                        g_hash_table_insert(dirs, &n->id, GINT_TO_POINTER(n->fd + 1));
                        g_array_append_val(ids, e);
                        continue;
                }
                e.name = g_strdup(n->name);
                if (n->detached) {
                        g_array_append_val(ids, e);
                        continue;
                }
                if (!offline && (d = depth_of(v, n)) != depth) {
                        guint to = i + 1;

                        depth = d;
                        while (to < all->len && depth_of(v, g_ptr_array_index(all, to)) == depth)
                                to++;
                        look_ahead(v, all, i, to, dirs, pre, *unanswered);
                }
                sino = server_identity(v, n, offline, &gone, &lid);
                if (gone) {
                        /* Unlinked while open or known: it stays that object.
                         * A server object may have been unlinked by another
                         * client: the kernel's name for it is looked up again. */
                        lru_del(v, n);
                        n->detached = true;
                        n->ino = 0;
                        /* Logged unbound: a successor has no descriptor to
                         * keep its object by, and the number last logged
                         * (the other tree's, or one freed since) may name
                         * another object by then. */
                        log_node(v, n);
                        e.inval_name = offline;
                        g_array_append_val(ids, e);
                        continue;
                }
                pfd = GPOINTER_TO_INT(g_hash_table_lookup(dirs, &pkey)) - 1;
                fd = counterpart(v, n, pfd, sino, lid, pre[i].filled ? &pre[i] : NULL, bound, &st,
                                 unanswered);
                if (fd < 0) {
                        struct switch_later l = { n, e, sino, lid, pfd >= 0 };

                        g_array_append_val(later, l);
                        continue;
                }
                switch_node(v, n, offline, fd, &st, shown_epoch, bound, dirs, &e, ids);
        }
        /* In depth order still: a directory found here is its children's. */
        for (guint i = 0; i < later->len; i++) {
                struct switch_later *l = &g_array_index(later, struct switch_later, i);
                struct vnode *n = l->n;
                uint64_t pkey = n->parent;
                int pfd = GPOINTER_TO_INT(g_hash_table_lookup(dirs, &pkey)) - 1;
                int fd = -1;

                if (!l->named)
                        fd = counterpart(v, n, pfd, l->sino, l->lid, NULL, bound, &st, unanswered);
                if (fd < 0 && !offline)
                        fd = counterpart_by_handle(v, n, l->sino, bound, &st, unanswered);
                if (fd < 0 && offline)
                        fd = counterpart_by_mirror_handle(v, n, l->sino, bound, &st, unanswered);
                /* The name the kernel knows it by leads elsewhere now. */
                if (fd < 0 && (fd = counterpart_by_alias(v, n, dirs, l->sino, l->lid, bound, &st,
                                                         unanswered)) >= 0)
                        l->e.inval_name = true;
                if (fd < 0 && offline &&
                    (fd = counterpart_by_links_index(v, n, pfd, l->sino, bound, &st,
                                                     unanswered)) >= 0)
                        l->e.inval_name = true;
                switch_node(v, n, offline, fd, &st, shown_epoch, bound, dirs, &l->e, ids);
        }
        g_array_free(later, TRUE);
        for (guint i = 0; i < all->len; i++)
                if (pre[i].fd >= 0)
                        close(pre[i].fd);       /* looked up, not taken */
        g_free(pre);
        g_hash_table_iter_init(&it, dirs);
        while (g_hash_table_iter_next(&it, &key, &val))
                if (*(uint64_t *)key != FUSE_ROOT_ID)
                        close(GPOINTER_TO_INT(val) - 1);
        g_hash_table_destroy(dirs);
        g_hash_table_destroy(v->by_ino);
        v->by_ino = bound;
        evict_fds(v);
        pthread_mutex_unlock(&v->itab_lock);
        g_ptr_array_free(all, TRUE);
        g_array_set_clear_func(ids, free_entry_name);
        return ids;
}

/* No switch count to check: the caller holds mode_lock across the lookup. */
#define ANY_SWITCHES UINT64_MAX

static int enter_node(struct view *v, bool offline, uint64_t switches, fuse_ino_t parent, int fd,
                      const char *name, struct fuse_entry_param *e);

int vnode_lookup_in(struct view *v, bool offline, uint64_t switches, fuse_ino_t parent, int pfd,
                    const char *name, struct fuse_entry_param *e)
{
        int fd = backing_openat_in(v, offline, pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);

        return fd < 0 ? fd : enter_node(v, offline, switches, parent, fd, name, e);
}

int vnode_lookup(struct view *v, fuse_ino_t parent, int pfd, const char *name,
                 struct fuse_entry_param *e)
{
        return vnode_lookup_in(v, view_offline(v), ANY_SWITCHES, parent, pfd, name, e);
}

int vnode_enter_unnamed(struct view *v, fuse_ino_t parent, int fd, struct fuse_entry_param *e)
{
        char p[64];
        int pathfd;

        snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
        pathfd = open(p, O_PATH | O_CLOEXEC);
        if (pathfd < 0)
                return -errno;
        return enter_node(v, view_offline(v), ANY_SWITCHES, parent, pathfd, NULL, e);
}

static uint64_t root_ino(struct view *v)
{
        uint64_t key = FUSE_ROOT_ID, ino;
        struct vnode *root;

        pthread_mutex_lock(&v->itab_lock);
        root = g_hash_table_lookup(v->nodes, &key);
        ino = root ? root->ino : 0;
        pthread_mutex_unlock(&v->itab_lock);
        return ino;
}

int vnode_lookup_dot(struct view *v, fuse_ino_t id, bool dotdot, struct fuse_entry_param *e)
{
        struct forgotten *g;
        struct file_handle *fh = NULL;
        struct vnode *n;
        uint64_t key = id, ino = 0, switches;
        struct stat st;
        bool offline;
        int fd, r;

        fd = vnode_get_served(v, id, &n, &offline, &switches);
        if (fd >= 0) {
                if (dotdot && id != FUSE_ROOT_ID) {
                        int pfd = backing_openat_in(v, offline, fd, "..",
                                                    O_PATH | O_DIRECTORY | O_CLOEXEC);

                        vnode_put(v, n);
                        if (pfd < 0)
                                return pfd;
                        if (real_stat_in(v, offline, pfd, &st) == 0 && st.st_ino == root_ino(v)) {
                                close(pfd);
                                return vnode_lookup_dot(v, FUSE_ROOT_ID, false, e);
                        }
                        /* its own parent and name are not known here: kept if
                         * known; a switch passed by: asked again by the kernel */
                        r = enter_node(v, offline, switches, 0, pfd, NULL, e);
                        return r == -EAGAIN ? -ESTALE : r;
                }
                r = vnode_fill_stat(v, fd, &st);
                if (r == 0) {
                        pthread_mutex_lock(&v->itab_lock);
                        n->nlookup++;
                        pthread_mutex_unlock(&v->itab_lock);
                        memset(e, 0, sizeof(*e));
                        e->ino = id;
                        e->attr = st;
                        e->attr_timeout = v->lease_s;
                        e->entry_timeout = v->lease_s;
                }
                vnode_put(v, n);
                return r;
        }
        if (fd != -ESTALE || offline)
                return fd;
        pthread_mutex_lock(&v->itab_lock);
        g = g_hash_table_lookup(v->forgotten, &key);
        if (g) {
                fh = malloc(sizeof(*fh) + g->fh->handle_bytes);
                if (fh)
                        memcpy(fh, g->fh, sizeof(*fh) + g->fh->handle_bytes);
                ino = g->ino;
        }
        pthread_mutex_unlock(&v->itab_lock);
        if (!fh)
                return -ESTALE;
        fd = open_handle_in(v, false, fh);
        free(fh);
        if (fd == -ETIMEDOUT)
                return fd;
        if (fd < 0)
                return -ESTALE;         /* gone from the backing */
        if (check_ino_in(v, false, fd, ino) < 0) {
                close(fd);
                return -ESTALE;
        }
        r = enter_node(v, false, switches, 0, fd, NULL, e);
        if (r == -EAGAIN)
                return -ESTALE;         /* a switch passed it by */
        if (r == 0 && e->ino != id) {
                /* its inode number is another node's now: not the same nodeid */
                vnode_forget(v, e->ino, 1);
                return -ESTALE;
        }
        if (r == 0 && dotdot) {
                r = vnode_lookup_dot(v, id, true, e);
                vnode_forget(v, id, 1);         /* only its parent was asked for */
        }
        return r;
}

/* Takes O_PATH descriptor fd of parent/name into the table (fd is consumed). */
/*
 * Enters fd, of the tree @offline says, as parent/name.  @switches: the
 * switch count the caller took its parent's descriptor at; a switch since
 * (which moves the nodes under itab_lock) would leave the node entered on
 * the other tree: -EAGAIN, to look up again.
 */
static int enter_node(struct view *v, bool offline, uint64_t switches, fuse_ino_t parent, int fd,
                      const char *name, struct fuse_entry_param *e)
{
        uint64_t key, epoch = vnode_ids_epoch(v);
        struct file_handle *fh;
        bool same_dev, by_lid = false;
        struct vnode *n;
        struct stat st;
        int r;

        r = real_stat_in(v, offline, fd, &st);
        if (r == 0 && !offline)
                r = view_conflict_errno(v, st.st_ino); /* listed by readdir, not usable */
        if (r < 0) {
                close(fd);
                return r;
        }
        fh = handle_of_in(v, offline, fd);
        key = st.st_ino;
        same_dev = st.st_dev == (offline ? v->mirror_dev : v->backing_dev);
        if (offline)            /* what the application sees */
                by_lid = offline_translate_stat(v, fd, &st) == OFFLINE_SHOWN_BY_LID;

        pthread_mutex_lock(&v->itab_lock);
        if (switches != ANY_SWITCHES &&
            __atomic_load_n(&v->switches, __ATOMIC_ACQUIRE) != switches) {
                pthread_mutex_unlock(&v->itab_lock);
                free(fh);
                close(fd);
                return -EAGAIN;
        }
        n = same_dev ? g_hash_table_lookup(v->by_ino, &key) : NULL;
        if (n && (!same_handle(n->fh, fh) || (n->type ^ st.st_mode) & S_IFMT)) {
                /*
                 * Inode number reused by another object: n's is gone (n is
                 * held by the kernel, or restored by a takeover and never
                 * freed).  n lets the number go, and online its server
                 * object, here and in the takeover log: kept, a switch or
                 * a successor (which restores both bound to it) could give
                 * n the new object.
                 */
                if (n->id != FUSE_ROOT_ID) {
                        by_ino_drop(v, n);      /* before the field it is keyed by changes */
                        n->ino = 0;
                        if (!offline)
                                n->sino = 0;
                        log_node(v, n);
                }
                n = NULL;
        }
        if (n) {
                free(fh);
                n->nlookup++;
                if (name && n->id != FUSE_ROOT_ID && (n->parent != parent || !n->name ||
                                              strcmp(n->name, name))) {
                        char *nm = strdup(name);

                        if (nm) {
                                /* Another link of it: both names are its. */
                                if (n->name && mirror_linkable(n->type))
                                        alias_add(n, n->parent, n->name);
                                alias_del(n, parent, name);
                                free(n->name);
                                n->name = nm;
                                n->parent = parent;
                                log_node(v, n);
                                log_aliases(v, n);
                        }
                }
                if (n->fd < 0) {
                        n->fd = fd;
                        v->open_fds++;
                        ids_clear(n);
                        if (!n->users)
                                lru_add(v, n);
                } else {
                        close(fd);
                }
        } else {
                n = calloc(1, sizeof(*n));
                if (!n || !(n->name = strdup(name ? name : ""))) {
                        pthread_mutex_unlock(&v->itab_lock);
                        free(n);
                        free(fh);
                        close(fd);
                        return -ENOMEM;
                }
                n->ino = key;
                n->sino = st.st_ino < OFFLINE_INO_BASE ? st.st_ino : 0;
                n->type = st.st_mode & S_IFMT;
                n->id = st.st_ino;
                if (n->id <= FUSE_ROOT_ID || n->id >= ALT_ID_BASE ||
                    !same_dev || g_hash_table_contains(v->nodes, &n->id))
                        n->id = v->next_alt_id++;
                n->parent = parent;
                n->fh = fh;
                n->fd = fd;
                n->nlookup = 1;
                v->open_fds++;
                g_hash_table_insert(v->nodes, &n->id, n);
                /* replace: the key is the node's field, not an older one's */
                if (same_dev)
                        g_hash_table_replace(v->by_ino, &n->ino, n);
                lru_add(v, n);
                log_node(v, n);
        }
        if (by_lid) {
                n->shown_ino = st.st_ino;
                n->shown_epoch = epoch;
        }
        memset(e, 0, sizeof(*e));
        e->ino = n->id;
        evict_fds(v);
        pthread_mutex_unlock(&v->itab_lock);
        e->attr = st;
        e->attr_timeout = v->lease_s;
        e->entry_timeout = v->lease_s;
        return 0;
}

void vnode_forget(struct view *v, fuse_ino_t id, uint64_t nlookup)
{
        uint64_t key = id;
        struct vnode *n;

        pthread_mutex_lock(&v->itab_lock);
        n = g_hash_table_lookup(v->nodes, &key);
        if (n && !n->immortal) {
                n->nlookup = nlookup > n->nlookup ? 0 : n->nlookup - nlookup;
                if (!n->nlookup) {
                        state_log_drop(v, n->id);
                        maybe_free(v, n);
                }
        }
        pthread_mutex_unlock(&v->itab_lock);
}

bool vnode_child_is(struct view *v, fuse_ino_t parent, const char *name, uint64_t ino)
{
        GHashTableIter it;
        gpointer key, val;
        bool found = false;

        pthread_mutex_lock(&v->itab_lock);
        g_hash_table_iter_init(&it, v->nodes);
        while (g_hash_table_iter_next(&it, &key, &val)) {
                struct vnode *n = val;

                if (n->id != FUSE_ROOT_ID && n->parent == parent && n->ino == ino && n->name &&
                    !strcmp(n->name, name)) {
                        found = true;
                        break;
                }
        }
        pthread_mutex_unlock(&v->itab_lock);
        return found;
}

void vnode_moved(struct view *v, fuse_ino_t newparent, int npfd, const char *newname)
{
        struct stat st;
        struct vnode *n;
        uint64_t key;
        char *nm;

        int fd = openat(npfd, newname, O_PATH | O_NOFOLLOW | O_CLOEXEC);

        /* The identity the node table knows: the object's own. */
        if (fd < 0)
                return;
        if (real_stat(v, fd, &st) < 0) {
                close(fd);
                return;
        }
        close(fd);
        key = st.st_ino;
        nm = strdup(newname);
        if (!nm)
                return;
        pthread_mutex_lock(&v->itab_lock);
        n = g_hash_table_lookup(v->by_ino, &key);
        if (n && n->id != FUSE_ROOT_ID) {
                /* The name moved may have been another link of it. */
                if (n->name && mirror_linkable(n->type) &&
                    (n->parent != newparent || strcmp(n->name, newname)))
                        alias_add(n, n->parent, n->name);
                alias_del(n, newparent, newname);
                free(n->name);
                n->name = nm;
                nm = NULL;
                n->parent = newparent;
                log_node(v, n);
                log_aliases(v, n);
        }
        pthread_mutex_unlock(&v->itab_lock);
        free(nm);
}

int vnode_parent_of(struct view *v, fuse_ino_t id, unsigned idx, uint64_t *parent, char **name)
{
        uint64_t key = id;
        struct vnode *n;
        int r = -ENOENT;

        pthread_mutex_lock(&v->itab_lock);
        n = g_hash_table_lookup(v->nodes, &key);
        if (n && n->id != FUSE_ROOT_ID && n->name && !n->detached) {
                if (idx == 0) {
                        *name = strdup(n->name);
                        *parent = n->parent;
                        r = *name ? 0 : -ENOMEM;
                } else if (n->aliases && idx - 1 < n->aliases->len) {
                        struct alias *a = &g_array_index(n->aliases, struct alias, idx - 1);

                        *name = strdup(a->name);
                        *parent = a->parent;
                        r = *name ? 0 : -ENOMEM;
                }
        }
        pthread_mutex_unlock(&v->itab_lock);
        return r;
}

void vnode_name_gone(struct view *v, uint64_t ino, uint64_t parent, const char *name)
{
        struct vnode *n;

        pthread_mutex_lock(&v->itab_lock);
        n = g_hash_table_lookup(v->by_ino, &ino);
        if (n && n->id != FUSE_ROOT_ID) {
                alias_del(n, parent, name);
                /* Its main name went: another it is known by takes its place. */
                if (n->parent == parent && n->name && !strcmp(n->name, name) && n->aliases &&
                    n->aliases->len) {
                        struct alias *a = &g_array_index(n->aliases, struct alias,
                                                         n->aliases->len - 1);

                        free(n->name);
                        n->name = a->name;
                        n->parent = a->parent;
                        a->name = NULL;
                        g_array_remove_index(n->aliases, n->aliases->len - 1);
                        log_node(v, n);
                }
                if (n->aliases)
                        log_aliases(v, n);
        }
        pthread_mutex_unlock(&v->itab_lock);
}

bool vnode_cacheable(struct view *v, fuse_ino_t id)
{
        uint64_t inos[256], key = id;
        unsigned count = 0;
        struct vnode *n;

        pthread_mutex_lock(&v->itab_lock);
        n = g_hash_table_lookup(v->nodes, &key);
        while (n && count < 256) {
                inos[count++] = n->ino;
                if (n->id == FUSE_ROOT_ID)
                        break;
                key = n->parent;
                n = g_hash_table_lookup(v->nodes, &key);
        }
        pthread_mutex_unlock(&v->itab_lock);
        for (unsigned i = 0; i < count; i++)
                if (store_is_nocache(v->store, inos[i]))
                        return false;
        return true;
}

fuse_ino_t vnode_id_of_ino(struct view *v, uint64_t ino)
{
        struct vnode *n;
        fuse_ino_t id = 0;

        pthread_mutex_lock(&v->itab_lock);
        n = g_hash_table_lookup(v->by_ino, &ino);
        if (n)
                id = n->id;
        pthread_mutex_unlock(&v->itab_lock);
        return id;
}

fuse_ino_t vnode_lookup_known(struct view *v, fuse_ino_t parent, const char *name, uint64_t ino,
                              mode_t type)
{
        struct vnode *n;
        fuse_ino_t id = 0;

        pthread_mutex_lock(&v->itab_lock);
        n = g_hash_table_lookup(v->by_ino, &ino);
        if (n && n->parent == parent && n->name && !strcmp(n->name, name) &&
            !((n->type ^ type) & S_IFMT) && !n->detached) {
                n->nlookup++;
                id = n->id;
        }
        pthread_mutex_unlock(&v->itab_lock);
        return id;
}

fuse_ino_t vnode_parent_id(struct view *v, fuse_ino_t id)
{
        struct vnode *n;
        uint64_t key = id;
        fuse_ino_t parent = 0;

        pthread_mutex_lock(&v->itab_lock);
        n = g_hash_table_lookup(v->nodes, &key);
        if (n && n->id != FUSE_ROOT_ID)
                parent = n->parent;
        pthread_mutex_unlock(&v->itab_lock);
        return parent;
}

int vnode_peek(struct view *v, fuse_ino_t id, uint64_t *ino, mode_t *type)
{
        struct vnode *n;
        uint64_t key = id;

        pthread_mutex_lock(&v->itab_lock);
        n = g_hash_table_lookup(v->nodes, &key);
        /* A renumbered node's number is another file's until it is found. */
        if (n && n->renumbered)
                n = NULL;
        if (n) {
                *ino = n->ino;
                *type = n->type;
        }
        pthread_mutex_unlock(&v->itab_lock);
        return n ? 0 : -ESTALE;
}

void vnode_restore_aliases(struct view *v, uint64_t id, const void *list, uint32_t size,
                           uint32_t count)
{
        const char *p = list, *end = p + size;
        struct vnode *n;

        pthread_mutex_lock(&v->itab_lock);
        n = g_hash_table_lookup(v->nodes, &id);
        for (uint32_t i = 0; n && n->id != FUSE_ROOT_ID && i < count; i++) {
                uint64_t parent;
                char *name = state_alias_next(&p, end, &parent);

                if (!name)
                        break;
                alias_add(n, parent, name);
                g_free(name);
        }
        if (n && n->id != FUSE_ROOT_ID)
                log_aliases(v, n);
        pthread_mutex_unlock(&v->itab_lock);
}

void vnode_set_alt_floor(struct view *v, uint64_t id)
{
        pthread_mutex_lock(&v->itab_lock);
        if (id >= v->next_alt_id)
                v->next_alt_id = id + 1;
        pthread_mutex_unlock(&v->itab_lock);
}

int vnode_restore(struct view *v, uint64_t id, uint64_t ino, mode_t type, uint64_t parent,
                  const char *name, const void *handle, unsigned hlen, int htype)
{
        struct vnode *n;

        if (id == FUSE_ROOT_ID)
                return 0;
        n = calloc(1, sizeof(*n));
        if (!n || !(n->name = strdup(name))) {
                free(n);
                return -ENOMEM;
        }
        if (handle && hlen && hlen <= MAX_HANDLE_SZ) {
                n->fh = malloc(sizeof(*n->fh) + hlen);
                if (!n->fh) {
                        node_free(n);
                        return -ENOMEM;
                }
                n->fh->handle_bytes = hlen;
                n->fh->handle_type = htype;
                memcpy(n->fh->f_handle, handle, hlen);
        }
        n->id = id;
        n->ino = ino;
        n->sino = view_offline(v) ? 0 : ino;
        /* Offline its number and handle are the mirror's: the switch online
         * binds it by name (nodes_renumbered). */
        n->renumbered = !view_offline(v) && (v->nodes_renumbered || (type & NODE_RENUMBERED));
        n->type = type & S_IFMT;
        n->parent = parent;
        n->fd = -1;
        n->immortal = true;     /* the kernel's lookup count is not known */
        pthread_mutex_lock(&v->itab_lock);
        if (g_hash_table_contains(v->nodes, &id)) {
                pthread_mutex_unlock(&v->itab_lock);
                node_free(n);
                return -EEXIST;
        }
        g_hash_table_insert(v->nodes, &n->id, n);
        /* A renumbered node's number is another file's now: it is known by
         * number once found by name (renumber()). */
        if (ino && !n->renumbered)
                g_hash_table_replace(v->by_ino, &n->ino, n);
        if (id >= v->next_alt_id && id >= ALT_ID_BASE)
                v->next_alt_id = id + 1;
        log_node(v, n);
        pthread_mutex_unlock(&v->itab_lock);
        return 0;
}
