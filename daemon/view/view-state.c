/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-state.c: what a successor fcache-view needs to take over a live FUSE
 * connection after this one is killed: the kernel's nodeids (with the file
 * handle, parent and name to find each backing object again, and the other
 * names of a file of several looked up), the open file
 * handles (fh -> node and open flags), and the FUSE_INIT request the kernel
 * sent once for this connection.
 *
 * The log CacheDir/view.state is append-only while a worker runs (a small
 * record per new node, move, forget, open and release) and compacted by the
 * next worker, which replays it, writes the live records to a new file and
 * renames that over the old one.  Records are copied into a shared mapping
 * of the file, a window of STATE_WINDOW bytes at a time, not written with a
 * system call each: the page cache keeps them across kill -9 all the same,
 * and an open and release of a warm file then cost the worker no log I/O.
 * A record's length is stored last, so one cut short by a kill reads as the
 * end of the log (the file's unused tail is zeros).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "view.h"

struct rec_hdr {
        uint32_t len;           /* of the whole record */
        uint32_t type;
};

struct rec_node {
        struct rec_hdr h;
        uint64_t id, ino, parent;
        uint32_t mode;
        int32_t htype;
        uint32_t hlen, namelen;
        /* handle bytes, then name bytes */
};

struct rec_open {
        struct rec_hdr h;
        uint64_t fh, id;
        int32_t flags;
        uint32_t pad;
};

struct rec_id {
        struct rec_hdr h;
        uint64_t id;
};

/* A node's other names: count entries of (u64 parent, u32 name length, name
 * bytes), packed, in size bytes. */
struct rec_aliases {
        struct rec_hdr h;
        uint64_t id;
        uint32_t count, size;
};

#define STATE_WINDOW (1u << 20)

/* Stores record r (len bytes) at byte at of the window, its length last. */
static void put(char *at, const struct rec_hdr *r, size_t len)
{
        memcpy(at + sizeof(r->len), (const char *)r + sizeof(r->len), len - sizeof(r->len));
        __atomic_store_n((uint32_t *)at, r->len, __ATOMIC_RELEASE);
}

/* Maps the window of the log at off; without a mapping the records are
 * written at their place instead.  The window's blocks are allocated first:
 * a store into a hole of a full disk would be SIGBUS, not an error. */
static void map_window(struct view *v, uint64_t off)
{
        void *m;

        v->state_map_off = off;
        v->state_used = 0;
        if (fallocate(v->state_fd, 0, (off_t)off, STATE_WINDOW) < 0 ||
            (m = mmap(NULL, STATE_WINDOW, PROT_READ | PROT_WRITE, MAP_SHARED, v->state_fd,
                      (off_t)off)) == MAP_FAILED) {
                log_warn("Failed to map %s: %m, writing its records instead", v->state_path);
                return;
        }
        v->state_map = m;
}

/* Pads the end of the full window and maps the next. */
static void next_window(struct view *v)
{
        size_t rest = STATE_WINDOW - v->state_used;

        if (rest) {
                struct rec_hdr pad = { (uint32_t)rest, STATE_PAD };

                put(v->state_map + v->state_used, &pad, sizeof(pad));
        }
        munmap(v->state_map, STATE_WINDOW);
        v->state_map = NULL;
        map_window(v, v->state_map_off + STATE_WINDOW);
}

static void append(struct view *v, const void *buf, size_t len)
{
        ssize_t n;

        pthread_mutex_lock(&v->state_lock);
        if (v->state_fd >= 0) {
                if (v->state_map && v->state_used + len > STATE_WINDOW)
                        next_window(v);
                if (v->state_map) {
                        put(v->state_map + v->state_used, buf, len);
                } else {
                        n = pwrite(v->state_fd, buf, len, (off_t)(v->state_map_off + v->state_used));
                        if (n != (ssize_t)len)
                                log_warn("Failed to append to %s: %s, a takeover may lose track"
                                         " of open files", v->state_path,
                                         n < 0 ? strerror(errno) : "short");
                }
                v->state_used += len;
                v->state_records++;
        }
        pthread_mutex_unlock(&v->state_lock);
}

void state_log_node(struct view *v, uint64_t id, uint64_t ino, mode_t type, uint64_t parent,
                    const char *name, const void *handle, unsigned hlen, int htype)
{
        size_t namelen = strlen(name), len = sizeof(struct rec_node) + hlen + namelen;
        struct rec_node *r;

        if (namelen > 4096 || hlen > MAX_HANDLE_SZ)
                return;
        len = (len + 7) & ~(size_t)7;   /* keep every record 8-byte aligned */
        r = calloc(1, len);
        if (!r)
                return;
        memset(r, 0, sizeof(*r));
        r->h.len = (uint32_t)len;
        r->h.type = STATE_NODE;
        r->id = id;
        r->ino = ino;
        r->parent = parent;
        r->mode = type;
        r->htype = htype;
        r->hlen = hlen;
        r->namelen = (uint32_t)namelen;
        if (hlen)
                memcpy((char *)(r + 1), handle, hlen);
        memcpy((char *)(r + 1) + hlen, name, namelen);
        append(v, r, len);
        free(r);
}

void state_log_aliases(struct view *v, uint64_t id, const void *list, uint32_t size,
                       uint32_t count)
{
        size_t len = (sizeof(struct rec_aliases) + size + 7) & ~(size_t)7;
        struct rec_aliases *r = calloc(1, len);

        if (!r)
                return;
        r->h.len = (uint32_t)len;
        r->h.type = STATE_ALIASES;
        r->id = id;
        r->count = count;
        r->size = size;
        if (size)
                memcpy(r + 1, list, size);
        append(v, r, len);
        free(r);
}

static void log_id(struct view *v, uint32_t type, uint64_t id)
{
        struct rec_id r = { { sizeof(r), type }, id };

        append(v, &r, sizeof(r));
}

void state_log_drop(struct view *v, uint64_t id)
{
        log_id(v, STATE_DROP, id);
}

void state_log_close(struct view *v, uint64_t fh)
{
        log_id(v, STATE_CLOSE, fh);
}

void state_log_open(struct view *v, uint64_t fh, uint64_t id, int flags)
{
        struct rec_open r = { { sizeof(r), STATE_OPEN }, fh, id, flags, 0 };

        append(v, &r, sizeof(r));
}

void state_log_open_mode(struct view *v, uint64_t fh, uint64_t id, int flags, uint32_t mode)
{
        struct rec_open r = { { sizeof(r), STATE_OPEN }, fh, id, flags, mode };

        append(v, &r, sizeof(r));
}

static int read_all(const char *path, char **buf, size_t *len)
{
        GError *err = NULL;
        gsize n;

        if (!g_file_get_contents(path, buf, &n, &err)) {
                int r = err->domain == G_FILE_ERROR && err->code == G_FILE_ERROR_NOENT ?
                        -ENOENT : -EIO;

                g_error_free(err);
                return r;
        }
        *len = n;
        return 0;
}

/* A name a record may carry: one path component (a corrupt log must not
 * make a look-up leave its directory). */
static bool name_ok(const char *p, size_t len)
{
        return len > 0 && len <= NAME_MAX && !memchr(p, '/', len) && !memchr(p, '\0', len) &&
               !(len == 1 && p[0] == '.') && !(len == 2 && p[0] == '.' && p[1] == '.');
}

void state_alias_put(GByteArray *list, uint64_t parent, const char *name)
{
        uint32_t len = (uint32_t)strlen(name);

        g_byte_array_append(list, (const guint8 *)&parent, sizeof(parent));
        g_byte_array_append(list, (const guint8 *)&len, sizeof(len));
        g_byte_array_append(list, (const guint8 *)name, len);
}

char *state_alias_next(const char **p, const char *end, uint64_t *parent)
{
        uint32_t len;

        if ((size_t)(end - *p) < sizeof(*parent) + sizeof(len))
                return NULL;
        memcpy(parent, *p, sizeof(*parent));
        memcpy(&len, *p + sizeof(*parent), sizeof(len));
        if ((size_t)(end - *p) - sizeof(*parent) - sizeof(len) < len ||
            !name_ok(*p + sizeof(*parent) + sizeof(len), len))
                return NULL;
        *p += sizeof(*parent) + sizeof(len) + len;
        return g_strndup(*p - len, len);
}

void state_replay(struct view *v, const char *buf, size_t len, const struct state_restorer *to)
{
        GHashTable *nodes = g_hash_table_new(g_int64_hash, g_int64_equal);
        GHashTable *files = g_hash_table_new(g_int64_hash, g_int64_equal);
        GHashTable *aliases = g_hash_table_new(g_int64_hash, g_int64_equal);
        GHashTableIter it;
        gpointer key, val;
        unsigned restored_nodes = 0, restored_files = 0;
        size_t off = 0;

        while (off + sizeof(struct rec_hdr) <= len) {
                const struct rec_hdr *h = (const void *)(buf + off);

                if (h->len < sizeof(*h) || h->len % 8 || off + h->len > len)
                        break;  /* a torn last record */
                switch (h->type) {
                case STATE_NODE:
                        if (h->len >= sizeof(struct rec_node)) {
                                const struct rec_node *r = (const void *)h;

                                /* The root has no name. */
                                if (sizeof(*r) + (size_t)r->hlen + r->namelen <= h->len &&
                                    r->hlen <= MAX_HANDLE_SZ &&
                                    (r->namelen == 0 ||
                                     name_ok((const char *)(r + 1) + r->hlen, r->namelen)))
                                        g_hash_table_insert(nodes, (gpointer)&r->id, (gpointer)r);
                        }
                        break;
                case STATE_DROP:
                        if (h->len == sizeof(struct rec_id)) {
                                g_hash_table_remove(nodes, &((const struct rec_id *)h)->id);
                                g_hash_table_remove(aliases, &((const struct rec_id *)h)->id);
                        }
                        break;
                case STATE_ALIASES:
                        if (h->len >= sizeof(struct rec_aliases)) {
                                const struct rec_aliases *r = (const void *)h;

                                if (sizeof(*r) + (size_t)r->size <= h->len)
                                        g_hash_table_insert(aliases, (gpointer)&r->id, (gpointer)r);
                        }
                        break;
                case STATE_OPEN:
                        if (h->len == sizeof(struct rec_open))
                                g_hash_table_insert(files, (gpointer)&((const struct rec_open *)h)->fh,
                                                    (gpointer)h);
                        break;
                case STATE_CLOSE:
                        if (h->len == sizeof(struct rec_id))
                                g_hash_table_remove(files, &((const struct rec_id *)h)->id);
                        break;
                }
                off += h->len;
        }
        g_hash_table_iter_init(&it, nodes);
        while (g_hash_table_iter_next(&it, &key, &val)) {
                const struct rec_node *r = val;
                const char *p = (const char *)(r + 1);
                char *name = g_strndup(p + r->hlen, r->namelen);

                if (to->node(v, r->id, r->ino, r->mode, r->parent, name,
                                  r->hlen ? p : NULL, r->hlen, r->htype) == 0)
                        restored_nodes++;
                g_free(name);
        }
        g_hash_table_iter_init(&it, aliases);
        while (g_hash_table_iter_next(&it, &key, &val)) {
                const struct rec_aliases *r = val;

                to->aliases(v, r->id, r + 1, r->size, r->count);
        }
        g_hash_table_iter_init(&it, files);
        while (g_hash_table_iter_next(&it, &key, &val)) {
                const struct rec_open *r = val;

                if (to->file(v, r->fh, r->id, r->flags, r->pad) == 0)
                        restored_files++;
        }
        log_info("Took over %u nodes and %u open files from the previous worker",
                 restored_nodes, restored_files);
        g_hash_table_destroy(nodes);
        g_hash_table_destroy(files);
        g_hash_table_destroy(aliases);
}

int state_open(struct view *v, bool takeover, const struct state_restorer *to)
{
        char *tmp = NULL, *old = NULL;
        size_t len = 0;
        int r;

        pthread_mutex_init(&v->state_lock, NULL);
        v->state_fd = -1;
        if (asprintf(&v->state_path, "%s/view.state", v->cfg->cache_dir) < 0 ||
            asprintf(&v->init_path, "%s/view.init", v->cfg->cache_dir) < 0 ||
            asprintf(&tmp, "%s/view.state.new", v->cfg->cache_dir) < 0)
                return -ENOMEM;
        if (takeover) {
                r = read_all(v->state_path, &old, &len);
                if (r < 0)
                        log_warn("No takeover log %s: %s, open files from before cannot be"
                                 " served", v->state_path, strerror(-r));
        }
        v->state_fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (v->state_fd < 0) {
                r = -errno;
                log_error("Failed to create %s: %m", tmp);
                free(tmp);
                g_free(old);
                return r;
        }
        map_window(v, 0);
        if (old)
                state_replay(v, old, len, to);
        g_free(old);
        if (rename(tmp, v->state_path) < 0) {
                r = -errno;
                log_error("Failed to rename %s: %m", tmp);
                free(tmp);
                return r;
        }
        free(tmp);
        if (!takeover)
                unlink(v->init_path);
        return 0;
}

int state_save_init(struct view *v, const void *buf, size_t len)
{
        GError *err = NULL;

        /*
         * 0600 whatever the umask (the view runs with umask 0, which would make
         * g_file_set_contents's 0666 world-writable): a forged FUSE_INIT would be
         * replayed on the next takeover.
         */
        if (!g_file_set_contents_full(v->init_path, buf, (gssize)len,
                                      G_FILE_SET_CONTENTS_CONSISTENT, 0600, &err)) {
                log_error("Failed to save FUSE_INIT to %s: %s", v->init_path, err->message);
                g_error_free(err);
                return -EIO;
        }
        return 0;
}

int state_load_init(struct view *v, void **buf, size_t *len)
{
        char *b;
        int r = read_all(v->init_path, &b, len);

        if (r < 0)
                return r;
        *buf = b;
        return 0;
}
