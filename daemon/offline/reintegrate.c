/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reintegrate.c: replay of the offline operation log against the server
 * (see reintegrate.h for the rules, oplog.h for the log).
 *
 * Objects are found on the server by the location replay expects them at
 * (objects.srv_parent/srv_name, starting from the base location and moved
 * by each applied rename), walking directory descriptors from the backing
 * root with openat(O_PATH|O_NOFOLLOW), and are recognized by inode number.
 * The replay state of every object touched (its location and the server
 * version the next record applies to) is saved in the transaction that marks
 * the record, so the log alone says where replay stands.
 *
 * Marks go through a replay journal folded into the log in batches (see
 * "Marking records"); the log's commits stay synchronous=FULL.  A record in
 * doubt is settled by comparing the server
 * with the record's expected result: content by blob id, creates by the
 * inode of the temporary recorded as the record's intent before it was
 * renamed into place, removals and renames by inode at the two names.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <glib.h>

#include "fault.h"
#include "oplog-internal.h"
#include "reintegrate-pool.h"
#include "regular-file.h"
#include "reintegrate.h"

#define EMPTY_BLOB_ID "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
/* A content record's intent before its temporary exists (no inode has this number). */
#define TMP_MAY_EXIST UINT64_MAX
/* A create's intent before its file exists at its name (see create_file()). */
#define NAME_MAY_EXIST (UINT64_MAX - 1)

const char *reintegrate_outcome_to_string(enum reintegrate_outcome o)
{
        static const char *const names[] = { "apply", "already", "merge", "conflict", "held" };

        return (unsigned)o < _REINTEGRATE_OUTCOME_MAX ? names[o] : NULL;
}

/* What a dry run found for one record, until its turn to be listed. */
struct dry_item {
        bool ready;
        int outcome;
        fcache_conflict_kind conflict;
        char *path;
};

/* A record copied out of the log, so that replay can write while it walks. */
struct rec {
        struct oplog_record r;
        struct rec *next;       /* the next pending record of the same object, or NULL */
        char *name, *name2, *content, *xname;
        void *xvalue;
};

/*
 * The state of a run, shared by the threads of reintegrate-pool.c, and the
 * record in progress (dirty, conflict, path), one per thread: each thread
 * works in a copy whose @run points to the one the run owns.
 */
struct ctx {
        struct ctx *run;
        pthread_mutex_t *mu;    /* held while a record runs, dropped around backing calls */
        struct oplog *log;
        int root;
        const struct reintegrate_options *o;
        bool dry;
        GHashTable *objs;       /* lid -> struct oplog_object * */
        GHashTable *rebound;    /* names_identify: lids whose inode number was taken anew */
        GHashTable *dirs;       /* lid -> directory O_PATH fd (+1 stored) */
        GHashTable *virt;       /* dry run: lids that would exist on the server */
        GPtrArray *dirty;       /* objects changed by the record in progress */
        struct reintegrate_stats st;
        unsigned since_sync;
        /* the replay journal (see "Marking records") */
        int jfd;
        uint64_t upto;          /* the run's last record (0: it ended), after each truncation */
        GHashTable *unsaved;    /* lid -> object changed since the last flush */
        GArray *marks;          /* struct pending_mark since the last flush */
        GArray *intents;        /* struct pending_intent since the last flush */
        GHashTable *intent_of;  /* seq -> recorded intent inode (pending records, at start) */
        /* renameat2(RENAME_NOREPLACE) refused by the backing once: not asked again */
        bool no_noreplace;
        GPtrArray *recs;        /* the pending records (struct rec), in log order */
        GHashTable *carried;    /* content records whose bytes their create wrote (seq) */
        struct ctx *workers;
        uint64_t done;
        /* A dry run's results held until every earlier record's is out (log order). */
        struct dry_item *held;
        unsigned next_out;
        /* the record in progress */
        fcache_conflict_kind conflict;
        char *path;
};

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

/*
 * Calls the backing with the run's mutex dropped, so that other records
 * proceed during the round trip; errno is kept.  Only around calls that
 * touch nothing shared but what the record owns (reintegrate-pool.h).
 */
static void backing_enter(struct ctx *c)
{
        if (c->mu)
                pthread_mutex_unlock(c->mu);
}

static void backing_leave(struct ctx *c)
{
        if (c->o->moved)
                c->o->moved(c->o->userdata);
        if (c->mu)
                pthread_mutex_lock(c->mu);
}

#define BACKING(c, call) ({                             \
        backing_enter(c);                               \
        __typeof__(call) backing_v_ = (call);           \
        int backing_errno_ = errno;                     \
        backing_leave(c);                               \
        errno = backing_errno_;                         \
        backing_v_;                                     \
})

static void rec_free(gpointer p)
{
        struct rec *c = p;

        free(c->name);
        free(c->name2);
        free(c->content);
        free(c->xname);
        free(c->xvalue);
        free(c);
}

static int dup_str(char **dst, const char *src)
{
        *dst = NULL;
        if (!src)
                return 0;
        *dst = strdup(src);
        return *dst ? 0 : -ENOMEM;
}

static int collect(void *ud, const struct oplog_record *r)
{
        GPtrArray *a = ud;
        struct rec *c = calloc(1, sizeof(*c));

        if (!c)
                return -ENOMEM;
        c->r = *r;
        if (dup_str(&c->name, r->name) < 0 || dup_str(&c->name2, r->name2) < 0 ||
            dup_str(&c->content, r->content) < 0 || dup_str(&c->xname, r->xname) < 0) {
                rec_free(c);
                return -ENOMEM;
        }
        if (r->xvalue && r->xsize) {
                c->xvalue = malloc(r->xsize);
                if (!c->xvalue) {
                        rec_free(c);
                        return -ENOMEM;
                }
                memcpy(c->xvalue, r->xvalue, r->xsize);
        }
        c->r.name = c->name;
        c->r.name2 = c->name2;
        c->r.content = c->content;
        c->r.xname = c->xname;
        c->r.xvalue = c->xvalue;
        c->r.outcome = NULL;
        g_ptr_array_add(a, c);
        return 0;
}

static bool same_identity(const struct oplog_version *b, const struct stat *st)
{
        struct oplog_version v;

        oplog_version_from_stat(&v, st);
        return v.ino == b->ino && v.size == b->size && v.mtime_ns == b->mtime_ns &&
               v.ctime_ns == b->ctime_ns && v.mode == b->mode;
}

/* Takes a new base version from @st, keeping @content as its content id. */
static void set_base(struct oplog_object *o, const struct stat *st, const char *content)
{
        char id[FCACHE_MERGE_ID_SIZE] = "";

        if (content && strlen(content) < sizeof(id))
                strcpy(id, content); /* @content may be o->base.content itself */
        oplog_version_from_stat(&o->base, st);
        memcpy(o->base.content, id, sizeof(id));
}

static void obj_free(gpointer p)
{
        struct oplog_object *o = p;

        oplog_object_clear(o);
        free(o);
}

static int get_obj(struct ctx *c, uint64_t lid, struct oplog_object **out)
{
        struct oplog_object *o = g_hash_table_lookup(c->objs, &lid);
        int e;

        if (o) {
                *out = o;
                return 0;
        }
        o = calloc(1, sizeof(*o));
        if (!o)
                return -ENOMEM;
        e = oplog_object_load(c->log, lid, o);
        if (e < 0) {
                free(o);
                return e;
        }
        g_hash_table_insert(c->objs, &o->lid, o);
        *out = o;
        return 0;
}

static void dirty(struct ctx *c, struct oplog_object *o)
{
        for (guint i = 0; i < c->dirty->len; i++)
                if (c->dirty->pdata[i] == o)
                        return;
        g_ptr_array_add(c->dirty, o);
}

/*
 * On a backing whose inode numbers are made up (opts.names_identify), the
 * server object of @o's type at the name replay knows @o by (@parent,
 * @name), stat @st, is @o whatever number it has now: its base takes that
 * number, once a run (a replacement later in the run is one still).
 */
static void rebind(struct ctx *c, struct oplog_object *o, uint64_t parent, const char *name,
                   const struct stat *st)
{
        if (!c->o->names_identify || !o->base.ino || st->st_ino == o->base.ino ||
            (st->st_mode & S_IFMT) != (o->type & S_IFMT) || o->srv_parent != parent ||
            !o->srv_name || !name || strcmp(o->srv_name, name) ||
            !g_hash_table_add(c->rebound, &o->lid))
                return;
        o->base.ino = st->st_ino;
        dirty(c, o);
}

static void set_srv(struct oplog_object *o, uint64_t parent, const char *name)
{
        char *n = name ? strdup(name) : NULL;

        if (name && !n)
                return; /* keeps the old location; the save below fails the record */
        free(o->srv_name);
        o->srv_name = n;
        o->srv_parent = parent;
}

static void close_dir(gpointer p)
{
        int fd = GPOINTER_TO_INT(p) - 1;

        if (fd >= 0)
                close(fd);
}

static void forget_dirs(struct ctx *c)
{
        g_hash_table_remove_all(c->dirs);
}

/* An O_PATH descriptor of directory pfd/name and its stat, -ENOENT if not a directory. */
static int open_dir(int pfd, const char *name, struct stat *st)
{
        int fd = openat(pfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), e;

        if (fd < 0)
                return errno == ENOTDIR || errno == ELOOP ? -ENOENT : -errno;
        if (fstat(fd, st) < 0) {
                e = -errno;
                close(fd);
                return e;
        }
        return fd;
}

/*
 * An O_PATH descriptor of directory @lid on the server (not to be closed),
 * -ENOENT if it is not where replay expects it (gone or replaced), or -errno.
 */
static int dir_fd(struct ctx *c, uint64_t lid, int depth)
{
        struct oplog_object *o;
        struct stat st;
        gpointer v;
        int pfd, fd, e;

        if (lid == OPLOG_ROOT)
                return c->root;
        if (depth > 4096)
                return -ELOOP;
        v = g_hash_table_lookup(c->dirs, &lid);
        if (v)
                return GPOINTER_TO_INT(v) - 1;
        e = get_obj(c, lid, &o);
        if (e < 0)
                return e;
        if (!S_ISDIR(o->type) || !o->srv_parent || !o->srv_name)
                return -ENOENT;
        pfd = dir_fd(c, o->srv_parent, depth + 1);
        if (pfd < 0)
                return pfd;
        fd = BACKING(c, open_dir(pfd, o->srv_name, &st));
        if (fd < 0)
                return fd;
        /* Another thread may have opened it meanwhile: one descriptor stays. */
        v = g_hash_table_lookup(c->dirs, &lid);
        if (v) {
                close(fd);
                return GPOINTER_TO_INT(v) - 1;
        }
        rebind(c, o, o->srv_parent, o->srv_name, &st);
        if (st.st_ino != o->base.ino) {
                close(fd);
                return -ENOENT;
        }
        g_hash_table_insert(c->dirs, &o->lid, GINT_TO_POINTER(fd + 1));
        return fd;
}

/* The server path of @lid as replay knows it (malloc()ed), or NULL. */
static char *obj_path(struct ctx *c, uint64_t lid)
{
        GString *s = g_string_new(NULL);
        int depth = 0;

        while (lid != OPLOG_ROOT && depth++ < 4096) {
                struct oplog_object *o;

                if (get_obj(c, lid, &o) < 0 || !o->srv_name)
                        break;
                g_string_prepend(s, o->srv_name);
                g_string_prepend_c(s, '/');
                lid = o->srv_parent;
        }
        if (!s->len)
                g_string_append_c(s, '/');
        return g_string_free(s, FALSE);
}

static void set_path(struct ctx *c, uint64_t parent, const char *name)
{
        char *p = obj_path(c, parent);

        g_free(c->path);
        c->path = p ? g_strdup_printf("%s%s%s", p, strcmp(p, "/") ? "/" : "",
                                      name ? name : "") : NULL;
        g_free(p);
}

static int read_all_fd(int fd, char **out, size_t *size)
{
        struct stat st;
        char *buf;
        size_t len = 0, cap;

        if (fstat(fd, &st) < 0)
                return -errno;
        cap = (size_t)st.st_size + 1;
        buf = malloc(cap);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                ssize_t n = pread(fd, buf + len, cap - len, (off_t)len);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        free(buf);
                        return -errno;
                }
                if (n == 0)
                        break;
                len += (size_t)n;
                if (len == cap) {
                        char *nb = realloc(buf, cap * 2);

                        if (!nb) {
                                free(buf);
                                return -ENOMEM;
                        }
                        buf = nb;
                        cap *= 2;
                }
        }
        *out = buf;
        *size = len;
        return 0;
}

/*
 * Opens the server's pfd/name for reading (@flags besides O_RDONLY) without
 * moving its atime: replay and the dry run read files no application read
 * (a file only read offline keeps the server's atime).  O_NOATIME needs the
 * file's owner or CAP_FOWNER; refused, the open is a plain one.
 */
static int open_noatime(int pfd, const char *name, int flags)
{
        int fd;

        if (flags & O_DIRECTORY) {
                fd = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME | flags);
                if (fd < 0 && errno == EPERM)
                        fd = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | flags);
                return fd;
        }
        /* A file: never a FIFO or a device node put in its place. */
        fd = regular_open_at(pfd, name, O_RDONLY | O_NOATIME | flags, NULL);
        if (fd == -EPERM)
                fd = regular_open_at(pfd, name, O_RDONLY | flags, NULL);
        if (fd < 0) {
                errno = -fd;
                return -1;
        }
        return fd;
}

/* The bytes of regular file pfd/name (malloc()ed). */
static int read_remote(int pfd, const char *name, char **out, size_t *size)
{
        int fd = open_noatime(pfd, name, 0), e;

        if (fd < 0)
                return -errno;
        e = read_all_fd(fd, out, size);
        close(fd);
        return e;
}

/* The content id of what is at pfd/name now (file: content; symlink: target). */
static int remote_id(int pfd, const char *name, const struct stat *st,
                     char id[FCACHE_MERGE_ID_SIZE])
{
        char *buf;
        size_t size;
        int fd, e;

        if (S_ISLNK(st->st_mode)) {
                char target[PATH_MAX];
                ssize_t n = readlinkat(pfd, name, target, sizeof(target));

                if (n < 0)
                        return -errno;
                return fcache_merge_blob_id(id, target, (size_t)n);
        }
        if (!S_ISREG(st->st_mode)) {
                snprintf(id, FCACHE_MERGE_ID_SIZE, "%s", "");
                return 0;
        }
        fd = open_noatime(pfd, name, 0);
        if (fd < 0)
                return -errno;
        e = read_all_fd(fd, &buf, &size);
        close(fd);
        if (e < 0)
                return e;
        e = fcache_merge_blob_id(id, buf, size);
        free(buf);
        return e;
}

static const char *lid_str(uint64_t lid, char buf[24])
{
        snprintf(buf, 24, "%" PRIu64, lid);
        return buf;
}

static fcache_merge_node_type node_type(uint32_t mode)
{
        switch (mode & S_IFMT) {
        case S_IFDIR: return FCACHE_MERGE_NODE_DIR;
        case S_IFLNK: return FCACHE_MERGE_NODE_SYMLINK;
        default: return FCACHE_MERGE_NODE_FILE;
        }
}

static void node_set(fcache_merge_node *n, uint32_t mode, uint32_t uid, uint32_t gid,
                     const char *content, const char *parent, const char *name)
{
        n->type = node_type(mode);
        n->mode = mode & 07777;
        n->uid = uid;
        n->gid = gid;
        n->content_id = content && *content ? content : "-";
        n->parent = parent;
        n->name = name;
}

/* ------------------------------------------------------------------------ */
/* Marking records                                                          */
/* ------------------------------------------------------------------------ */

/*
 * Marks go to a replay journal (CacheDir/offline/replay.journal), one
 * write() per record, and reach the database in batches: a record is
 * marked the moment its journal entry is written (the page cache keeps it
 * across kill -9), and the next run replays the journal into the database
 * before anything else.  The journal is fdatasync'ed every sync_every
 * records and the batch committed every FLUSH_EVERY records, before a
 * conflict is recorded, and at the end, after which the journal is emptied.
 * So one SQLite transaction serves thousands of records while every record
 * is still marked atomically with the server identity it produced.
 *
 * On a local backing (opts.backing_local) a new file's bytes are not
 * fsynced by its record: one syncfs() of the backing before each journal
 * sync and commit (backing_durable(), the lock held, so no mark is written
 * meanwhile; a local disk answers) makes every file written since durable,
 * and a sync point ('S') in the journal after it says so.  That is enough:
 * a mark is written after its record's server writes, so every mark before
 * an 'S' names bytes that are durable.  A mark after the last 'S' may have
 * reached the disk (the kernel writes the journal back when it likes)
 * without its bytes; after a reboot (the journal's boot id, 'B', is not
 * this boot's) those marks are dropped and their records settled again by
 * their checks, as a torn tail is: no more than sync_every records (a
 * rename among them may then be kept as a conflict, as after a torn tail).
 * After a crash of the process alone the page cache holds both, and every
 * mark counts.  A server's files are fsynced one by one as before (a
 * syncfs of a share that stopped answering would hold the lock; FUSE does
 * not pass it on).  The temporary of an in-place write (put_content()) is
 * fsynced before the file is truncated on any backing: without that a
 * power loss can leave the name with neither the old bytes nor the new.
 *
 * Entry: u32 magic, u32 body length, u64 FNV-1a of the body, then the body:
 *   u8 'M', u64 seq, u8 state, u16 len, outcome, u16 n, n x object, or
 *   u8 'I', u64 seq, u64 ino (a create's intent), or
 *   u8 'I', u64 0, u64 seq (the last record of the run: journal_upto()), or
 *   u8 'B', u64 0, 16 bytes boot id (the boot the entries after it are of), or
 *   u8 'S', u64 0 (a sync point: the server's writes before it are durable);
 *   object: u64 lid, u8 local, u64 srv_parent, u16 len, srv_name,
 *           struct oplog_version, u64 conflict.
 */
#define JOURNAL "replay.journal"
#define JOURNAL_MAGIC 0x4a4c4346u /* "FCLJ" */
#define FLUSH_EVERY 4096

struct pending_mark {
        uint64_t seq;
        enum oplog_state state;
        char outcome[32];
};

struct pending_intent {
        uint64_t seq, ino;
};

static uint64_t fnv1a(const void *p, size_t n)
{
        const unsigned char *b = p;
        uint64_t h = 1469598103934665603ull;

        for (size_t i = 0; i < n; i++)
                h = (h ^ b[i]) * 1099511628211ull;
        return h;
}

static void put(GByteArray *b, const void *p, size_t n)
{
        g_byte_array_append(b, p, (guint)n);
}

static void put_str(GByteArray *b, const char *s)
{
        uint16_t n = s ? (uint16_t)strlen(s) : 0;

        put(b, &n, sizeof(n));
        if (n)
                put(b, s, n);
}

static int journal_write(struct ctx *c, GByteArray *body)
{
        uint32_t hdr[2] = { JOURNAL_MAGIC, body->len };
        uint64_t h = fnv1a(body->data, body->len);
        GByteArray *e = g_byte_array_sized_new(body->len + 16);
        ssize_t n;

        put(e, hdr, sizeof(hdr));
        put(e, &h, sizeof(h));
        put(e, body->data, body->len);
        n = write(c->jfd, e->data, e->len);
        g_byte_array_unref(e);
        if (n < 0)
                return -errno;
        return (size_t)n == body->len + 16 ? 0 : -EIO;
}

/* The kernel's id of this boot (zeros if unknown). */
static void boot_id(uint8_t id[16])
{
        char text[64];
        unsigned j = 0;
        ssize_t n;
        int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);

        memset(id, 0, 16);
        if (fd < 0)
                return;
        n = read(fd, text, sizeof(text) - 1);
        close(fd);
        for (ssize_t i = 0; i + 1 < n && j < 16; i++) {
                unsigned v;

                if (text[i] == '-')
                        continue;
                if (sscanf(text + i, "%2x", &v) != 1)
                        break;
                id[j++] = (uint8_t)v;
                i++;
        }
}

/* A body-less journal entry of type @t ('S'), or 'B' with this boot's id. */
static int journal_note(struct ctx *c, uint8_t t)
{
        GByteArray *b = g_byte_array_new();
        uint64_t zero = 0;
        uint8_t id[16];
        int e;

        put(b, &t, 1);
        put(b, &zero, 8);
        if (t == 'B') {
                boot_id(id);
                put(b, id, sizeof(id));
        }
        e = journal_write(c, b);
        g_byte_array_unref(b);
        return e;
}

/* An empty journal's first entry: the boot its marks are of (local backings). */
static int journal_start(struct ctx *c)
{
        return c->o->backing_local && !c->dry ? journal_note(c, 'B') : 0;
}

/*
 * The last record of a run under way, for reintegrate_recover() when the
 * run is cut before it marked its records: as an intent of no record
 * (seq 0), which folding takes as nothing.
 */
static int journal_upto(struct ctx *c, uint64_t upto)
{
        GByteArray *b = g_byte_array_new();
        uint64_t zero = 0;
        uint8_t t = 'I';
        int e;

        put(b, &t, 1);
        put(b, &zero, 8);
        put(b, &upto, 8);
        e = journal_write(c, b);
        g_byte_array_unref(b);
        return e;
}

/*
 * A local backing's writes so far durable (see "Marking records"), then a
 * sync point in the journal for them.  A server's files were fsynced each.
 */
static int backing_durable(struct ctx *c)
{
        int fd, e = 0;

        if (!c->o->backing_local || oplog_no_fsync(c->log))
                return 0;
        /* The root may be O_PATH, which syncfs() refuses. */
        fd = openat(c->root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || syncfs(fd) < 0)
                e = -errno;
        if (fd >= 0)
                close(fd);
        return e < 0 ? e : journal_note(c, 'S');
}

/* Commits what the journal holds to the database, then empties the journal. */
static int flush(struct ctx *c)
{
        GHashTableIter it;
        gpointer v;
        int e;

        if (c->dry || (!c->marks->len && !c->intents->len))
                return 0;
        /* The marks go into the database: what they name is on the server's disk first. */
        e = backing_durable(c);
        if (e < 0)
                return e;
        e = oplog_begin(c->log);
        if (e < 0)
                return e;
        g_hash_table_iter_init(&it, c->unsaved);
        while (e >= 0 && g_hash_table_iter_next(&it, NULL, &v))
                e = oplog_object_save(c->log, v);
        for (guint i = 0; e >= 0 && i < c->intents->len; i++) {
                struct pending_intent *pi = &g_array_index(c->intents, struct pending_intent, i);

                e = oplog_set_intent(c->log, pi->seq, pi->ino);
        }
        for (guint i = 0; e >= 0 && i < c->marks->len; i++) {
                struct pending_mark *pm = &g_array_index(c->marks, struct pending_mark, i);

                e = oplog_mark(c->log, pm->seq, pm->state, pm->outcome);
        }
        /* Durable (oplog_durable() below) before the journal that held it goes. */
        if (e >= 0)
                e = oplog_commit(c->log);
        else
                oplog_rollback(c->log);
        if (e >= 0)
                e = oplog_durable(c->log);
        if (e < 0)
                return e;
        if (ftruncate(c->jfd, 0) < 0)
                return -errno;
        e = journal_start(c);
        if (e >= 0 && c->run->upto)
                e = journal_upto(c, c->run->upto);
        if (e < 0)
                return e;
        g_hash_table_remove_all(c->unsaved);
        g_array_set_size(c->marks, 0);
        g_array_set_size(c->intents, 0);
        c->run->since_sync = 0;
        return 0;
}

static int sync_maybe(struct ctx *c)
{
        unsigned every = c->o->sync_every ? c->o->sync_every : 256;
        int e;

        if (c->marks->len >= FLUSH_EVERY)
                return flush(c);
        if (++c->run->since_sync < every)
                return 0;
        c->run->since_sync = 0;
        if (oplog_no_fsync(c->log))
                return 0;
        e = backing_durable(c);
        if (e < 0)
                return e;
        return fdatasync(c->jfd) < 0 ? -errno : 0;
}

/* Marks @r with @state together with the objects it changed (journal first). */
static int mark(struct ctx *c, const struct rec *r, enum oplog_state state, const char *outcome)
{
        struct pending_mark pm = { .seq = r->r.seq, .state = state };
        GByteArray *b;
        uint16_t n = (uint16_t)c->dirty->len;
        uint8_t t = 'M', st8 = (uint8_t)state;
        int e;

        if (c->dry) {
                g_ptr_array_set_size(c->dirty, 0);
                return 0;
        }
        b = g_byte_array_new();
        put(b, &t, 1);
        put(b, &r->r.seq, 8);
        put(b, &st8, 1);
        put_str(b, outcome);
        put(b, &n, 2);
        for (guint i = 0; i < c->dirty->len; i++) {
                struct oplog_object *o = c->dirty->pdata[i];
                uint8_t local = o->local;

                put(b, &o->lid, 8);
                put(b, &local, 1);
                put(b, &o->srv_parent, 8);
                put_str(b, o->srv_name);
                put(b, &o->base, sizeof(o->base));
                put(b, &o->conflict, 8);
                g_hash_table_insert(c->unsaved, &o->lid, o);
        }
        e = journal_write(c, b);
        g_byte_array_unref(b);
        g_ptr_array_set_size(c->dirty, 0);
        /* Still pending: only where its objects stand, for a run cut before its mark. */
        if (e < 0 || state == OPLOG_PENDING)
                return e;
        snprintf(pm.outcome, sizeof(pm.outcome), "%s", outcome ? outcome : "");
        g_array_append_val(c->marks, pm);
        return sync_maybe(c);
}

/* Records a create's intent (the inode of its temporary) before it is renamed into place. */
static int journal_intent(struct ctx *c, const struct rec *r, uint64_t ino)
{
        struct pending_intent pi = { r->r.seq, ino };
        GByteArray *b = g_byte_array_new();
        uint8_t t = 'I';
        int e;

        put(b, &t, 1);
        put(b, &r->r.seq, 8);
        put(b, &ino, 8);
        e = journal_write(c, b);
        g_byte_array_unref(b);
        if (e < 0)
                return e;
        g_array_append_val(c->intents, pi);
        return 0;
}

struct reader {
        const uint8_t *p, *end;
        bool bad;
};

static void get(struct reader *rd, void *out, size_t n)
{
        if (rd->bad || (size_t)(rd->end - rd->p) < n) {
                rd->bad = true;
                memset(out, 0, n);
                return;
        }
        memcpy(out, rd->p, n);
        rd->p += n;
}

static char *get_str(struct reader *rd)
{
        uint16_t n;
        char *s;

        get(rd, &n, 2);
        if (rd->bad || !n || (size_t)(rd->end - rd->p) < n)
                return NULL;
        s = g_strndup((const char *)rd->p, n);
        rd->p += n;
        return s;
}

/*
 * Applies one journal entry to the database (inside the caller's
 * transaction); a mark only if @marks (not one a reboot may have cut from
 * its server bytes).  *@upto rises to the last record the entry names.
 */
static int replay_entry(struct oplog *log, struct reader *rd, bool marks, uint64_t *upto)
{
        uint8_t t;
        uint64_t seq;
        int e = 0;

        get(rd, &t, 1);
        get(rd, &seq, 8);
        if (*upto < seq)
                *upto = seq;
        if (t == 'B' || t == 'S' || (t == 'M' && !marks))
                return rd->bad ? -EINVAL : 0;
        if (t == 'I') {
                uint64_t ino;

                get(rd, &ino, 8);
                if (rd->bad)
                        return -EINVAL;
                if (!seq) {     /* journal_upto(): the run's last record */
                        if (*upto < ino)
                                *upto = ino;
                        return 0;
                }
                return oplog_set_intent(log, seq, ino);
        }
        if (t == 'M') {
                uint8_t state;
                uint16_t n;
                char *outcome;

                get(rd, &state, 1);
                outcome = get_str(rd);
                get(rd, &n, 2);
                for (uint16_t i = 0; e >= 0 && i < n && !rd->bad; i++) {
                        struct oplog_object o;
                        uint8_t local;

                        memset(&o, 0, sizeof(o));
                        get(rd, &o.lid, 8);
                        get(rd, &local, 1);
                        get(rd, &o.srv_parent, 8);
                        o.srv_name = get_str(rd);
                        get(rd, &o.base, sizeof(o.base));
                        get(rd, &o.conflict, 8);
                        o.local = local;
                        o.base.content[FCACHE_MERGE_ID_SIZE - 1] = '\0';
                        if (!rd->bad)
                                e = oplog_object_save(log, &o);
                        g_free(o.srv_name);
                        o.srv_name = NULL;
                }
                if (e >= 0 && !rd->bad)
                        e = oplog_mark(log, seq, state, outcome);
                g_free(outcome);
                return rd->bad ? -EINVAL : e;
        }
        return -EINVAL;
}

/* The length of the complete entry at @off of @buf (@n bytes), 0 if none. */
static size_t journal_entry(const uint8_t *buf, size_t n, size_t off)
{
        uint32_t hdr[2];
        uint64_t h;

        if (off + 16 > n)
                return 0;
        memcpy(hdr, buf + off, 8);
        memcpy(&h, buf + off + 8, 8);
        if (hdr[0] != JOURNAL_MAGIC || hdr[1] < 9 || off + 16 + hdr[1] > n ||
            fnv1a(buf + off + 16, hdr[1]) != h)
                return 0;
        return 16 + hdr[1];
}

/*
 * Where the marks the journal @buf (@n bytes) holds stop counting: its end,
 * or, when it is of another boot than this one, its last sync point (marks
 * after it may have reached the disk without their server bytes).
 */
static size_t journal_trusted(const uint8_t *buf, size_t n)
{
        uint8_t id[16], now[16];
        size_t off = 0, len, upto = 0;
        bool other_boot = false;

        while ((len = journal_entry(buf, n, off)) > 0) {
                uint8_t t = buf[off + 16];

                if (t == 'B' && len >= 16 + 9 + 16) {
                        memcpy(id, buf + off + 16 + 9, 16);
                        boot_id(now);
                        other_boot = memcmp(id, now, 16) != 0;
                }
                if (t == 'S')
                        upto = off + len;
                off += len;
        }
        return other_boot ? upto : n;
}

/*
 * Brings the database up to the journal an interrupted run left: every
 * complete entry is applied in order (a torn tail, after a power loss, is
 * dropped: those records are settled again by their checks, as are the
 * marks a reboot left after the last sync point: journal_trusted()).
 * *upto (may be NULL) gets the last record the run was to replay (0: none).
 */
static int journal_recover(struct oplog *log, int jfd, uint64_t *upto)
{
        struct stat st;
        uint8_t *buf;
        size_t off = 0, len, trusted;
        uint64_t last = 0;
        ssize_t n;
        int e;

        if (fstat(jfd, &st) < 0)
                return -errno;
        if (st.st_size == 0)
                return 0;
        buf = malloc((size_t)st.st_size);
        if (!buf)
                return -ENOMEM;
        n = pread(jfd, buf, (size_t)st.st_size, 0);
        if (n < 0) {
                e = -errno;
                free(buf);
                return e;
        }
        trusted = journal_trusted(buf, (size_t)n);
        e = oplog_begin(log);
        while (e >= 0 && (len = journal_entry(buf, (size_t)n, off)) > 0) {
                struct reader rd = { buf + off + 16, buf + off + len, false };

                e = replay_entry(log, &rd, off < trusted, upto ? upto : &last);
                off += len;
        }
        free(buf);
        if (e >= 0)
                e = oplog_commit(log);
        else
                oplog_rollback(log);
        if (e >= 0)
                e = oplog_sync(log);
        if (e >= 0 && ftruncate(jfd, 0) < 0)
                e = -errno;
        return e;
}

int reintegrate_recover(struct oplog *log)
{
        struct ctx c = { .jfd = -1 };
        int e;

        if (!log)
                return -EINVAL;
        c.jfd = openat(oplog_dir_fd(log), JOURNAL, O_RDWR | O_APPEND | O_CLOEXEC);
        if (c.jfd < 0)
                return errno == ENOENT ? 0 : -errno;
        e = journal_recover(log, c.jfd, &c.upto);
        /* The records the cut run was in may be on the server without their
         * marks: until a run settled them, none is coalesced into (a later
         * change would be checked against the server as if it were not),
         * also after another restart before that run. */
        if (e >= 0 && c.upto) {
                oplog_set_replaying(log, c.upto);
                e = journal_upto(&c, c.upto);
        }
        close(c.jfd);
        return e;
}

/*
 * What the server has at pfd/name, read for a conflict's remote version: a
 * symlink's target, or a regular file's bytes copied into a memfd.  Read
 * off the run's lock (a call to the server); put in the base store under
 * it (keep_remote()).
 */
struct remote_copy {
        int fd;                 /* a regular file's bytes, or -1 */
        char *target;           /* a symlink's target, or NULL */
        size_t len;
};
#define REMOTE_COPY_INIT { -1, NULL, 0 }

static int fetch_remote(int pfd, const char *name, const struct stat *st, struct remote_copy *rc)
{
        char target[PATH_MAX];
        ssize_t n;
        int fd, e;

        fault_point(FAULT_REINT_CONFLICT_FOUND);
        if (!st)
                return 0;
        if (S_ISLNK(st->st_mode)) {
                n = readlinkat(pfd, name, target, sizeof(target));
                if (n < 0)
                        return -errno;
                rc->target = g_strndup(target, (gsize)n);
                rc->len = (size_t)n;
                return 0;
        }
        if (!S_ISREG(st->st_mode))
                return 0;
        fd = open_noatime(pfd, name, 0);
        if (fd < 0)
                return -errno;
        rc->fd = memfd_create("fcache-remote", MFD_CLOEXEC);
        e = rc->fd < 0 ? -errno : oplog_copy_fd(rc->fd, fd);
        close(fd);
        return e;
}

static void remote_copy_clear(struct remote_copy *rc)
{
        if (rc->fd >= 0)
                close(rc->fd);
        g_free(rc->target);
        *rc = (struct remote_copy)REMOTE_COPY_INIT;
}

/* Saves the server's version read by fetch_remote() in the base store ("" if none). */
static int keep_remote(struct ctx *c, const struct remote_copy *rc, char id[FCACHE_MERGE_ID_SIZE])
{
        id[0] = '\0';
        if (rc->target)
                return fcache_merge_store_put(id, oplog_store(c->log), rc->target, rc->len);
        if (rc->fd < 0)
                return 0;
        return fcache_merge_store_put_fd(id, oplog_store(c->log), rc->fd);
}

/* Saves the local side of @r in the base store: its content or symlink target. */
static int keep_local(struct ctx *c, const struct rec *r, char id[FCACHE_MERGE_ID_SIZE])
{
        uint64_t seq = r->r.seq;
        int fd, e;

        id[0] = '\0';
        if (r->r.kind == OPLOG_SYMLINK && r->content)
                return fcache_merge_store_put(id, oplog_store(c->log), r->content,
                                              strlen(r->content));
        if (r->r.kind != OPLOG_CONTENT) {
                /* Anything else: the object's pending content is its local version (if any). */
                e = oplog_pending_content(c->log, r->r.lid, &seq);
                if (e == -ENOENT)
                        return 0;
                if (e < 0)
                        return e;
        }
        fd = oplog_content_open(c->log, seq);
        /* Another record's container gone: the object has no local content
         * to keep (its removal is a record of its own). */
        if (fd == -ESTALE && r->r.kind != OPLOG_CONTENT)
                return 0;
        if (fd < 0)
                return fd;
        e = fcache_merge_store_put_fd(id, oplog_store(c->log), fd);
        close(fd);
        return e;
}

static int content_gone(struct ctx *c, const struct rec *r, struct oplog_object *o);

/*
 * Records a conflict of @r on @o: every version kept, the server untouched,
 * later records of @o held.  @remote_pfd/@remote_name/@remote_st: what the
 * server has (NULL st: nothing).
 */
static int conflict(struct ctx *c, const struct rec *r, struct oplog_object *o,
                    fcache_conflict_kind kind, int remote_pfd, const char *remote_name,
                    const struct stat *remote_st, const char *detail)
{
        char local[FCACHE_MERGE_ID_SIZE], remote[FCACHE_MERGE_ID_SIZE];
        struct remote_copy rc = REMOTE_COPY_INIT;
        const char *kname = fcache_conflict_kind_to_string(kind);
        int64_t local_us = 0;
        char *full = NULL;
        uint64_t id = 0;
        int e;

        c->conflict = kind;
        if (c->dry) {
                o->conflict = UINT64_MAX; /* later records of it show as held */
                g_ptr_array_set_size(c->dirty, 0);
                return REINTEGRATE_CONFLICT;
        }
        if (r->r.kind == OPLOG_CONTENT) {
                /* When the local side changed: its container's mtime, before
                 * the bytes are copied away below. */
                int fd = oplog_content_open(c->log, r->r.seq);
                struct stat lst;

                if (fd >= 0 && fstat(fd, &lst) == 0)
                        local_us = (int64_t)lst.st_mtim.tv_sec * 1000000 +
                                   lst.st_mtim.tv_nsec / 1000;
                if (fd >= 0)
                        close(fd);
        }
        e = BACKING(c, fetch_remote(remote_pfd, remote_name, remote_st, &rc));
        if (e >= 0)
                e = keep_local(c, r, local);
        if (e >= 0)
                e = keep_remote(c, &rc, remote);
        remote_copy_clear(&rc);
        /* Settled "local", the record is replayed after the mirror was resynced
         * with the server's bytes: it keeps its own copy of the container's. */
        if (e >= 0 && r->r.kind == OPLOG_CONTENT)
                e = oplog_content_detach(c->log, r->r.seq);
        /* Every local name of the file went meanwhile: no conflict of its
         * content; its removal's record meets the server's version. */
        if (e == -ESTALE && r->r.kind == OPLOG_CONTENT)
                return content_gone(c, r, o);
        if (e < 0)
                return e;
        fault_point(FAULT_REINT_CONFLICT_RECORD);
        e = flush(c); /* the journal's records first, in order */
        if (e < 0)
                return e;
        full = g_strdup_printf("%s: %s", oplog_kind_to_string(r->r.kind), detail);
        e = oplog_begin(c->log);
        if (e >= 0)
                e = oplog_add_conflict(c->log, r->r.seq, o->lid, kname, c->path,
                                       o->orig[0] ? o->orig : o->base.content, local, remote,
                                       full, local_us, &id);
        if (e >= 0) {
                o->conflict = id;
                dirty(c, o);
                for (guint i = 0; i < c->dirty->len && e >= 0; i++)
                        e = oplog_object_save(c->log, c->dirty->pdata[i]);
        }
        if (e >= 0)
                e = oplog_mark(c->log, r->r.seq, OPLOG_CONFLICT, kname);
        if (e >= 0)
                e = oplog_commit(c->log);
        else
                oplog_rollback(c->log);
        g_free(full);
        g_ptr_array_set_size(c->dirty, 0);
        return e < 0 ? e : REINTEGRATE_CONFLICT;
}

/* Classifies with the structure table and records the conflict it names. */
static int structure_conflict(struct ctx *c, const struct rec *r, struct oplog_object *o,
                              const fcache_merge_node *base, const fcache_merge_node *local,
                              const fcache_merge_node *remote, int pfd, const char *name,
                              const struct stat *st, fcache_conflict_kind fallback,
                              const char *detail)
{
        fcache_merge_structure_options so = FCACHE_MERGE_STRUCTURE_OPTIONS_INIT;
        fcache_merge_decision d;
        fcache_conflict_kind kind = fallback;

        so.flags = c->o->structure_flags;
        if (fcache_merge_structure(&d, base, local, remote, &so) == 0 &&
            d.action == FCACHE_MERGE_ACTION_CONFLICT)
                kind = d.conflict;
        return conflict(c, r, o, kind, pfd, name, st, detail);
}

/* ------------------------------------------------------------------------ */
/* Writing to the server                                                    */
/* ------------------------------------------------------------------------ */

static void tmp_name(struct ctx *c, const struct rec *r, char buf[64])
{
        snprintf(buf, 64, ".fcache-%s-%" PRIu64, c->log->token, r->r.seq);
}

/*
 * Gives the new object @fd (or pfd/name when @fd is -1) owner @uid:@gid and
 * @mode, calling the backing only for what its fresh stat (served from the
 * attributes its create answered with) does not show already.  A refused
 * chown (a server that squashes root keeps its own owner) is an error only
 * if @chown_errors and not EPERM.
 */
static int own(int pfd, const char *name, int fd, uid_t uid, gid_t gid, mode_t mode,
               bool chown_errors)
{
        int flags = AT_SYMLINK_NOFOLLOW;
        bool chowned = false;
        struct stat st;

        if ((fd >= 0 ? fstat(fd, &st) : fstatat(pfd, name, &st, flags)) < 0)
                return -errno;
        if (st.st_uid != uid || st.st_gid != gid) {
                int e = fd >= 0 ? fchown(fd, uid, gid) : fchownat(pfd, name, uid, gid, flags);

                if (e < 0 && chown_errors && errno != EPERM)
                        return -errno;
                chowned = e == 0;
        }
        /* A chown clears set-id bits: the mode again after one. */
        if (S_ISLNK(st.st_mode) || (!chowned && (st.st_mode & 07777) == (mode & 07777)))
                return 0;
        if ((fd >= 0 ? fchmod(fd, mode & 07777) : fchmodat(pfd, name, mode & 07777, 0)) < 0)
                return -errno;
        return 0;
}

/* Creates the temporary @tmp in @pfd (replacing a leftover) holding @src_fd's or @buf's bytes. */
static int write_tmp(int pfd, const char *tmp, mode_t mode, int src_fd, const char *buf,
                     size_t size, int *fd_out)
{
        int fd, e;

        fd = openat(pfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd < 0 && errno == EEXIST) {
                /* A leftover of an interrupted attempt. */
                (void)unlinkat(pfd, tmp, 0);
                fd = openat(pfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        }
        if (fd < 0)
                return -errno;
        e = src_fd >= 0 ? oplog_copy_fd(fd, src_fd) : write_all(fd, buf, size);
        if (e < 0) {
                close(fd);
                (void)unlinkat(pfd, tmp, 0);
                return e;
        }
        *fd_out = fd;
        return 0;
}

/*
 * Copies the temporary @tmp over the content of pfd/name in place, then
 * removes it.  The journalled intent (the file's inode) tells a resumed run
 * that a half-written file is ours, to be finished from @tmp.
 */
static int finish_in_place(int pfd, const char *name, const char *tmp, int tmp_fd)
{
        int fd, e;

        fd = regular_open_at(pfd, name, O_WRONLY | O_TRUNC, NULL);
        if (fd < 0)
                return fd;
        fault_point(FAULT_REINT_IN_PLACE_WRITE);
        e = oplog_copy_fd(fd, tmp_fd);
        if (e >= 0 && fsync(fd) < 0)
                e = -errno;
        if (close(fd) < 0 && e >= 0)
                e = -errno;
        if (e >= 0 && unlinkat(pfd, tmp, 0) < 0)
                e = -errno;
        return e;
}

/* Closes and removes the temporary @tmp (open as @fd). */
static int drop_tmp(int pfd, const char *tmp, int fd)
{
        close(fd);
        return unlinkat(pfd, tmp, 0);
}

/*
 * Replaces the content of regular file pfd/name (now @old) with @src_fd's or
 * @buf's, in place: the server's object stays the same inode, as the
 * application's write left the local one (its other links, another
 * client's open file and the view's inode number go on naming it).  The
 * bytes go first into a temporary made durable, so a crash in the middle
 * of the write is finished from there (resume_in_place()).
 */
static int put_content(struct ctx *c, const struct rec *r, int pfd, const char *name,
                       const struct stat *old, int src_fd, const char *buf, size_t size,
                       bool merged)
{
        char tmp[64];
        int fd = -1, e;

        tmp_name(c, r, tmp);
        /* A temporary may exist from here: a resumed run looks for it (resume_in_place). */
        e = journal_intent(c, r, TMP_MAY_EXIST);
        if (e < 0)
                return e;
        e = BACKING(c, write_tmp(pfd, tmp, 0600, src_fd, buf, size, &fd));
        if (e < 0)
                return e;
        if (BACKING(c, fsync(fd)) < 0)
                e = -errno;
        if (e >= 0)
                e = journal_intent(c, r, old->st_ino);
        /* Durable before the file is truncated, as the temporary is. */
        if (e >= 0 && !oplog_no_fsync(c->log) && fdatasync(c->jfd) < 0)
                e = -errno;
        if (e >= 0 && merged)
                fault_point(FAULT_REINT_MERGE_OUTPUT);
        if (e < 0) {
                BACKING(c, drop_tmp(pfd, tmp, fd));
                return e;
        }
        /* From here a failure keeps the temporary: the next run finishes from it. */
        e = BACKING(c, finish_in_place(pfd, name, tmp, fd));
        BACKING(c, close(fd));
        /* A writer without CAP_FSETID on the server loses the set-id bits
         * the file keeps (the local write that made this content was not
         * one that clears them, or a record of its own clears them). */
        if (e >= 0 && (old->st_mode & (S_ISUID | S_ISGID)))
                e = BACKING(c, own(pfd, name, -1, old->st_uid, old->st_gid, old->st_mode, false));
        return e;
}

/*
 * renameat2(RENAME_NOREPLACE); where it is not supported (sshfs, NFS: asked
 * once per run, the backing's refusal remembered), a check, then a rename:
 * another client's name made between the two is replaced (a window no call
 * through the mount closes).  Not a link and an unlink: a file open on the
 * backing (a writer's, the view's own) would keep its old name as a
 * silly-renamed .nfs* or .fuse_hidden* entry until its last close, which
 * a later rmdir of that directory then finds there.
 */
static int rename_noreplace(struct ctx *c, int ofd, const char *oname, int nfd, const char *nname)
{
        struct stat st;

        if (!c->run->no_noreplace) {
                if (BACKING(c, renameat2(ofd, oname, nfd, nname, RENAME_NOREPLACE)) == 0)
                        return 0;
                if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
                        return -errno;
                c->run->no_noreplace = true;
        }
        if (BACKING(c, fstatat(nfd, nname, &st, AT_SYMLINK_NOFOLLOW)) == 0)
                return -EEXIST;
        return BACKING(c, renameat(ofd, oname, nfd, nname)) < 0 ? -errno : 0;
}

/* ------------------------------------------------------------------------ */
/* The records                                                              */
/* ------------------------------------------------------------------------ */

struct name_of {
        uint64_t parent;
        char *name;
};

static int collect_name(void *ud, uint64_t parent, const char *name)
{
        struct name_of n = { parent, g_strdup(name) };

        g_array_append_val((GArray *)ud, n);
        return 0;
}

/* Whether the server has inode @ino at parent/name (*st: its stat). */
static bool still_at(struct ctx *c, uint64_t parent, const char *name, uint64_t ino,
                     struct stat *st)
{
        int fd = dir_fd(c, parent, 0);

        return fd >= 0 && BACKING(c, fstatat(fd, name, st, AT_SYMLINK_NOFOLLOW)) == 0 &&
               st->st_ino == ino;
}

/*
 * Follows @o by another name the log saw it under than parent/name (a
 * file with several links): the first one the server still has as inode
 * @ino becomes where replay finds it (*st: its stat).  1 if one did, 0 if
 * none, -errno.
 */
static int follow_other_name(struct ctx *c, struct oplog_object *o, uint64_t parent,
                             const char *name, uint64_t ino, struct stat *st)
{
        GArray *names = g_array_new(FALSE, FALSE, sizeof(struct name_of));
        int e, found = 0;

        e = oplog_names_of(c->log, o->lid, collect_name, names);
        for (guint i = 0; e >= 0 && !found && i < names->len; i++) {
                struct name_of *n = &g_array_index(names, struct name_of, i);

                if (name && n->parent == parent && !strcmp(n->name, name))
                        continue;
                if (still_at(c, n->parent, n->name, ino, st)) {
                        set_srv(o, n->parent, n->name);
                        set_base(o, st, o->base.content);
                        found = 1;
                }
        }
        for (guint i = 0; i < names->len; i++)
                g_free(g_array_index(names, struct name_of, i).name);
        g_array_free(names, TRUE);
        return e < 0 ? e : found;
}

/*
 * Locates @o on the server: its parent's fd and name, and a fresh stat
 * (-ENOENT: absent).  Where the name replay follows it by is gone or holds
 * another inode, a file with several links is followed by another name the
 * log saw it under (a name it lost when another file was renamed over it
 * in an earlier round, before the log knew its other names); else that
 * name's stat is returned for the caller to judge.
 */
static int locate(struct ctx *c, struct oplog_object *o, int *pfd, struct stat *st)
{
        int fd = -ENOENT, e = -ENOENT, f;

        if (o->srv_parent && o->srv_name) {
                fd = dir_fd(c, o->srv_parent, 0);
                if (fd < 0 && fd != -ENOENT)
                        return fd;
                if (fd >= 0)
                        e = BACKING(c, fstatat(fd, o->srv_name, st, AT_SYMLINK_NOFOLLOW)) < 0 ?
                            -errno : 0;
                if (e < 0 && e != -ENOENT)
                        return e;
                if (e == 0)
                        rebind(c, o, o->srv_parent, o->srv_name, st);
                if (e == 0 && st->st_ino == o->base.ino) {
                        *pfd = fd;
                        return 0;
                }
        }
        if (o->base.ino && !S_ISDIR(o->type)) {
                struct stat other;
                uint64_t parent = o->srv_parent;
                char *name = g_strdup(o->srv_name);

                f = follow_other_name(c, o, parent, name, o->base.ino, &other);
                g_free(name);
                if (f < 0)
                        return f;
                if (f > 0) {
                        /* Found just now: its directory's descriptor is cached. */
                        dirty(c, o);
                        fd = dir_fd(c, o->srv_parent, 0);
                        if (fd < 0)
                                return fd;
                        *pfd = fd;
                        *st = other;
                        return 0;
                }
        }
        if (e == 0)
                *pfd = fd;
        return e;
}

/* The local content open as @fd is still the version @before (its bytes unchanged since). */
static bool local_unchanged(int fd, const struct stat *before)
{
        struct stat now;

        return fstat(fd, &now) == 0 && now.st_ino == before->st_ino &&
               now.st_size == before->st_size &&
               now.st_mtim.tv_sec == before->st_mtim.tv_sec &&
               now.st_mtim.tv_nsec == before->st_mtim.tv_nsec &&
               now.st_ctim.tv_sec == before->st_ctim.tv_sec &&
               now.st_ctim.tv_nsec == before->st_ctim.tv_nsec;
}

/* Tells the caller that the server's @server holds the bytes of local content @local. */
static void note_wrote(struct ctx *c, const struct stat *server, const struct stat *local)
{
        if (!c->dry && c->o->wrote && local && local->st_ino)
                c->o->wrote(c->o->userdata, server, local);
}

/* Tells the caller that the replay's setattr made server file @before @after. */
static void note_restamped(struct ctx *c, const struct stat *before, const struct stat *after)
{
        if (!c->dry && c->o->restamped && S_ISREG(after->st_mode))
                c->o->restamped(c->o->userdata, before, after);
}

/*
 * The id of the bytes open as @fd, and its stat *st: one version of them.
 * A container may be changed by an application while a replay reads it:
 * read again until a read found the file as it was before it.
 */
static int content_of_fd(int fd, char id[FCACHE_MERGE_ID_SIZE], struct stat *st)
{
        int e = -EAGAIN;

        for (int tries = 0; tries < 8 && e == -EAGAIN; tries++) {
                if (fstat(fd, st) < 0)
                        return -errno;
                e = fcache_merge_blob_id_fd(id, fd);
                if (!local_unchanged(fd, st))
                        e = -EAGAIN;
        }
        return e;
}

/*
 * The local side of content record @r: the id of the bytes its container
 * holds now (a record of the old format carries the id of its copy) and the
 * container's mtime, which replay gives the server file (mtime->tv_nsec
 * UTIME_OMIT: none, the old format logs it as a setattr).
 */
static int local_content(struct ctx *c, const struct rec *r, char id[FCACHE_MERGE_ID_SIZE],
                         struct timespec *mtime)
{
        struct stat st;
        int fd, e;

        *mtime = (struct timespec){ 0, UTIME_OMIT };
        if (r->content) {
                snprintf(id, FCACHE_MERGE_ID_SIZE, "%s", r->content);
                return 0;
        }
        fd = oplog_content_open(c->log, r->r.seq);
        if (fd < 0)
                return fd;
        e = content_of_fd(fd, id, &st);
        close(fd);
        if (e >= 0)
                *mtime = st.st_mtim;
        return e;
}

/* Gives the server file pfd/name the container's mtime (best effort) and reads it back. */
static int stamp_mtime(int pfd, const char *name, const struct timespec *mtime, struct stat *st)
{
        if (mtime->tv_nsec != UTIME_OMIT) {
                struct timespec ts[2] = { { 0, UTIME_OMIT }, *mtime };

                (void)utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW);
        }
        return fstatat(pfd, name, st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

/* Marks @r merged: the server holds a merge, which the local copy takes too. */
static int mark_merged(struct ctx *c, const struct rec *r, struct oplog_object *o)
{
        int e = mark(c, r, OPLOG_APPLIED, "merged");

        if (e < 0)
                return e;
        if (c->o->refresh)
                c->o->refresh(c->o->userdata, o->lid);
        return REINTEGRATE_MERGED;
}

/*
 * The server's side of resume_in_place(): finishes pfd/name (inode @ino)
 * from the temporary @tmp.  1 when finished (*nst, @id: what it holds now),
 * 0 when there is nothing to finish (a leftover temporary of an attempt
 * that had not touched the file is removed).
 */
static int finish_from_tmp(int pfd, const char *name, const char *tmp, uint64_t ino,
                           const struct stat *st, const struct timespec *mtime,
                           struct stat *nst, char id[FCACHE_MERGE_ID_SIZE])
{
        int fd = openat(pfd, tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), e;

        if (fd < 0)
                return 0;
        if (ino != st->st_ino) {
                close(fd);
                (void)unlinkat(pfd, tmp, 0);
                return 0;
        }
        e = finish_in_place(pfd, name, tmp, fd);
        close(fd);
        if (e < 0)
                return e;
        fault_point(FAULT_REINT_AFTER_WRITE);
        e = stamp_mtime(pfd, name, mtime, nst);
        /* What was written is the local content or a merge of it: the new base either way. */
        if (e >= 0)
                e = remote_id(pfd, name, nst, id);
        return e < 0 ? e : 1;
}

/*
 * An in-place write of @r (put_content) interrupted after its intent: the
 * file @st is ours, half written; finish it from the temporary, which holds
 * the local content (@lcid) or a merge of it with the server's.  Returns
 * the outcome, or 0 if there is nothing to finish.
 */
static int resume_in_place(struct ctx *c, const struct rec *r, struct oplog_object *o, int pfd,
                           const struct stat *st, const struct timespec *mtime,
                           const char *lcid)
{
        uint64_t *v = g_hash_table_lookup(c->intent_of, &r->r.seq);
        char tmp[64], id[FCACHE_MERGE_ID_SIZE];
        struct stat nst;
        int e;

        /* No intent: no attempt got as far as a temporary. */
        if (!v)
                return 0;
        tmp_name(c, r, tmp);
        e = BACKING(c, finish_from_tmp(pfd, o->srv_name, tmp, v[1], st, mtime, &nst, id));
        if (e <= 0)
                return e;
        set_base(o, &nst, id);
        dirty(c, o);
        if (strcmp(id, lcid) == 0) {
                e = mark(c, r, OPLOG_APPLIED, "applied");
                return e < 0 ? e : REINTEGRATE_APPLIED;
        }
        /* A merge: the local copy takes it too, as after a merge not cut. */
        return mark_merged(c, r, o);
}

/*
 * A content record in doubt (OPLOG_IN_DOUBT) whose container went (the file
 * removed offline): the server's file may hold its write, so its version
 * now is the base the removal compares with.
 */
static int content_rebase_in_doubt(struct ctx *c, const struct rec *r, struct oplog_object *o)
{
        char rid[FCACHE_MERGE_ID_SIZE];
        struct stat st;
        int pfd, e;

        if (!(r->r.flags & OPLOG_IN_DOUBT) || locate(c, o, &pfd, &st) < 0 ||
            st.st_ino != o->base.ino || !S_ISREG(st.st_mode) || same_identity(&o->base, &st))
                return 0;
        e = BACKING(c, remote_id(pfd, o->srv_name, &st, rid));
        if (e < 0)
                return e;
        set_base(o, &st, rid);
        dirty(c, o);
        return 0;
}

/*
 * The container of content record @r is gone: every local name of the
 * object was removed, also while the record was being replayed.  Its
 * removal's record settles the server's file.
 */
static int content_gone(struct ctx *c, const struct rec *r, struct oplog_object *o)
{
        int e;

        if (c->dry)
                return REINTEGRATE_ALREADY;
        if ((e = content_rebase_in_doubt(c, r, o)) < 0)
                return e;
        e = mark(c, r, OPLOG_APPLIED, "gone");
        return e < 0 ? e : REINTEGRATE_ALREADY;
}

static int do_content(struct ctx *c, const struct rec *r, struct oplog_object *o)
{
        fcache_merge_structure_options so = FCACHE_MERGE_STRUCTURE_OPTIONS_INIT;
        char rid[FCACHE_MERGE_ID_SIZE], lcid[FCACHE_MERGE_ID_SIZE], ps[24];
        fcache_merge_node bn = FCACHE_MERGE_NODE_INIT, ln = FCACHE_MERGE_NODE_INIT,
                          rn = FCACHE_MERGE_NODE_INIT;
        fcache_merge_decision d;
        struct timespec mtime;
        struct stat st, nst, lst;
        int pfd = -1, src, e;
        const char *lid_parent = lid_str(o->srv_parent, ps);

        set_path(c, o->srv_parent, o->srv_name);
        if (c->dry && g_hash_table_contains(c->virt, &o->lid))
                return REINTEGRATE_APPLIED;
        if (!c->dry && g_hash_table_contains(c->run->carried, &r->r.seq)) {
                /* Its create wrote these bytes, and the new base says so. */
                e = mark(c, r, OPLOG_APPLIED, "applied");
                return e < 0 ? e : REINTEGRATE_APPLIED;
        }
        e = local_content(c, r, lcid, &mtime);
        if (e == -ESTALE)
                return content_gone(c, r, o);
        if (e < 0)
                return e;
        node_set(&bn, o->base.mode, o->base.uid, o->base.gid, o->base.content, lid_parent,
                 o->srv_name);
        ln = bn;
        ln.content_id = lcid;
        e = locate(c, o, &pfd, &st);
        if (e == -ENOENT)
                return structure_conflict(c, r, o, &bn, &ln, &rn, -1, NULL, NULL,
                                          FCACHE_CONFLICT_EDIT_DELETE,
                                          "the server removed the file");
        if (e < 0)
                return e;
        if (c->o->written_through && S_ISREG(st.st_mode) &&
            c->o->written_through(c->o->userdata, o->lid)) {
                if (c->dry)
                        return REINTEGRATE_ALREADY;
                e = BACKING(c, remote_id(pfd, o->srv_name, &st, rid));
                if (e < 0)
                        return e;
                set_base(o, &st, rid);
                dirty(c, o);
                e = mark(c, r, OPLOG_APPLIED, "already");
                return e < 0 ? e : REINTEGRATE_ALREADY;
        }
        if (!c->dry) {
                e = resume_in_place(c, r, o, pfd, &st, &mtime, lcid);
                if (e != 0)
                        return e;
        }
        if (st.st_ino == o->base.ino && same_identity(&o->base, &st)) {
                snprintf(rid, sizeof(rid), "%s", o->base.content);
        } else {
                e = BACKING(c, remote_id(pfd, o->srv_name, &st, rid));
                if (e < 0)
                        return e;
                if (S_ISREG(st.st_mode) && strcmp(rid, lcid) == 0) {
                        /* Our own earlier write (a replay interrupted before its mark). */
                        if (!c->dry &&
                            (e = BACKING(c, stamp_mtime(pfd, o->srv_name, &mtime, &st))) < 0)
                                return e;
                        set_base(o, &st, lcid);
                        dirty(c, o);
                        e = mark(c, r, OPLOG_APPLIED, "already");
                        return e < 0 ? e : REINTEGRATE_ALREADY;
                }
        }
        /* A write in doubt: what the server has beyond the base is that write
         * (bn names the base's content: now the server's). */
        if ((r->r.flags & OPLOG_IN_DOUBT) && S_ISREG(st.st_mode) && st.st_ino == o->base.ino &&
            strcmp(rid, o->base.content))
                set_base(o, &st, rid);
        node_set(&rn, st.st_mode, st.st_uid, st.st_gid, rid, lid_parent, o->srv_name);
        so.flags = c->o->structure_flags;
        e = fcache_merge_structure(&d, &bn, &ln, &rn, &so);
        if (e < 0)
                return e;
        if (d.action == FCACHE_MERGE_ACTION_CONFLICT)
                return conflict(c, r, o, d.conflict, pfd, o->srv_name, &st,
                                "changed on both sides");
        if (d.action == FCACHE_MERGE_ACTION_NONE || d.action == FCACHE_MERGE_ACTION_TAKE_REMOTE) {
                set_base(o, &st, rid);
                dirty(c, o);
                e = mark(c, r, OPLOG_APPLIED, "already");
                return e < 0 ? e : REINTEGRATE_ALREADY;
        }
        if (d.action == FCACHE_MERGE_ACTION_MERGE_CONTENT) {
                fcache_merge_content_options mo = FCACHE_MERGE_CONTENT_OPTIONS_INIT;
                fcache_merge_content_result res = { 0 };
                fcache_merge_buf bb, lb, rb;
                void *base = NULL;
                size_t base_size = 0, lsize = 0, rsize = 0;
                char *local = NULL, *remote = NULL;

                if (o->base.content[0]) {
                        e = fcache_merge_store_get(&base, &base_size, oplog_store(c->log),
                                                   o->base.content);
                        if (e < 0 && e != -ENOENT)
                                return e;
                }
                /* Opened again: removed since local_content() (a change
                 * logged meanwhile), it is gone as if it had been before. */
                src = oplog_content_open(c->log, r->r.seq);
                if (src < 0) {
                        free(base);
                        return src == -ESTALE ? content_gone(c, r, o) : src;
                }
                e = read_all_fd(src, &local, &lsize);
                close(src);
                if (e >= 0)
                        e = BACKING(c, read_remote(pfd, o->srv_name, &remote, &rsize));
                if (e >= 0) {
                        bb = FCACHE_MERGE_BUF(base, base_size);
                        lb = FCACHE_MERGE_BUF(local, lsize);
                        rb = FCACHE_MERGE_BUF(remote, rsize);
                        e = fcache_merge_content(&res, base ? &bb : NULL, &lb, &rb, &mo);
                }
                free(base);
                free(local);
                free(remote);
                if (e < 0)
                        return e;
                if (res.outcome == FCACHE_MERGE_CONTENT_CONFLICT) {
                        fcache_conflict_kind k = res.conflict;

                        fcache_merge_content_result_free(&res);
                        return conflict(c, r, o, k, pfd, o->srv_name, &st,
                                        "edits overlap");
                }
                if (c->dry) {
                        fcache_merge_content_result_free(&res);
                        return REINTEGRATE_MERGED;
                }
                e = put_content(c, r, pfd, o->srv_name, &st, -1, res.merged, res.merged_size,
                                true);
                if (e >= 0)
                        e = fcache_merge_blob_id(rid, res.merged, res.merged_size);
                fcache_merge_content_result_free(&res);
                if (e < 0)
                        return e;
                fault_point(FAULT_REINT_AFTER_WRITE);
                e = BACKING(c, stamp_mtime(pfd, o->srv_name, &mtime, &nst));
                if (e < 0)
                        return e;
                set_base(o, &nst, rid);
                dirty(c, o);
                return mark_merged(c, r, o);
        }
        /* TAKE_LOCAL, MERGE_METADATA: the local content, the server's metadata. */
        if (c->dry)
                return REINTEGRATE_APPLIED;
        src = oplog_content_open(c->log, r->r.seq);
        if (src == -ESTALE)
                return content_gone(c, r, o);
        if (src < 0)
                return src;
        if (fstat(src, &lst) < 0)
                lst.st_ino = 0;
        e = put_content(c, r, pfd, o->srv_name, &st, src, NULL, 0, false);
        /* The local copy's version whose bytes the server got (none if it changed meanwhile). */
        if (e >= 0 && lst.st_ino && !local_unchanged(src, &lst))
                lst.st_ino = 0;
        close(src);
        if (e < 0)
                return e;
        /* The server holds the local content: the base a run cut before the
         * mark resumes from, when the container may hold newer bytes. */
        snprintf(o->base.content, sizeof(o->base.content), "%s", lcid);
        dirty(c, o);
        e = mark(c, r, OPLOG_PENDING, NULL);
        if (e < 0)
                return e;
        fault_point(FAULT_REINT_AFTER_WRITE);
        e = BACKING(c, stamp_mtime(pfd, o->srv_name, &mtime, &nst));
        if (e < 0)
                return e;
        set_base(o, &nst, lcid);
        dirty(c, o);
        note_wrote(c, &nst, &lst);
        e = mark(c, r, OPLOG_APPLIED, "applied");
        return e < 0 ? e : REINTEGRATE_APPLIED;
}

/*
 * Creates the object of @r at the temporary @tmp in @pfd.  A regular file
 * stays open in *fd_out (its owner, mode and identity are then set and read
 * through it, without path walks); other kinds leave it -1.
 */
static int make_tmp(const struct rec *r, int pfd, const char *tmp, int *fd_out, struct stat *st)
{
        int fd, e;

        *fd_out = -1;
        switch (r->r.kind) {
        case OPLOG_CREATE:
                /*
                 * Not fsynced when left empty: a server that loses it in a crash
                 * makes the file's later content record an edit-delete conflict,
                 * kept (content carried into it is fsynced: carry_content()).
                 */
                fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            r->r.mode & 0777);
                if (fd < 0)
                        return -errno;
                e = own(pfd, tmp, fd, r->r.uid, r->r.gid, r->r.mode, true);
                if (e >= 0 && fstat(fd, st) < 0)
                        e = -errno;
                if (e < 0) {
                        close(fd);
                        (void)unlinkat(pfd, tmp, 0);
                        return e;
                }
                *fd_out = fd;
                return 0;
        case OPLOG_MKDIR:
                if (mkdirat(pfd, tmp, r->r.mode & 0777) < 0)
                        return -errno;
                break;
        case OPLOG_SYMLINK:
                if (symlinkat(r->content, pfd, tmp) < 0)
                        return -errno;
                break;
        case OPLOG_MKNOD:
                if (mknodat(pfd, tmp, (r->r.mode & S_IFMT) | 0600, (dev_t)r->r.rdev) < 0)
                        return -errno;
                break;
        default:
                return -EINVAL;
        }
        e = own(pfd, tmp, -1, r->r.uid, r->r.gid, r->r.mode, true);
        if (e >= 0 && fstatat(pfd, tmp, st, AT_SYMLINK_NOFOLLOW) < 0)
                e = -errno;
        return e;
}

static int remove_tmp(int pfd, const char *tmp, enum oplog_kind kind)
{
        return unlinkat(pfd, tmp, kind == OPLOG_MKDIR ? AT_REMOVEDIR : 0);
}

/* Finishes a create: the object is on the server at parent/name as @st says. */
static int created(struct ctx *c, const struct rec *r, struct oplog_object *o, int pfd,
                   int fd, const char *content_id, const struct stat *local, const char *outcome)
{
        struct stat st;
        char id[FCACHE_MERGE_ID_SIZE] = "";
        int e;

        if (BACKING(c, fd >= 0 ? fstat(fd, &st) : fstatat(pfd, r->name, &st,
                                                          AT_SYMLINK_NOFOLLOW)) < 0)
                return -errno;
        if (r->r.kind == OPLOG_CREATE)
                snprintf(id, sizeof(id), "%s", content_id ? content_id : EMPTY_BLOB_ID);
        else if (r->r.kind == OPLOG_SYMLINK && (e = fcache_merge_blob_id(id, r->content,
                                                                         strlen(r->content))) < 0)
                return e;
        set_base(o, &st, id);
        set_srv(o, r->r.parent, r->name);
        o->local = false;
        dirty(c, o);
        /* Its bytes are those of the local content it carried. */
        note_wrote(c, &st, local);
        e = mark(c, r, OPLOG_APPLIED, outcome);
        return e < 0 ? e : strcmp(outcome, "already") ? REINTEGRATE_APPLIED : REINTEGRATE_ALREADY;
}

/* The server has @st at the name create @r makes: the conflict, classified. */
static int name_taken(struct ctx *c, const struct rec *r, struct oplog_object *o, int pfd,
                      const struct stat *st)
{
        fcache_merge_node ln = FCACHE_MERGE_NODE_INIT, rn = FCACHE_MERGE_NODE_INIT;
        char ps[24];

        node_set(&ln, (r->r.kind == OPLOG_MKNOD ? r->r.mode : 0) |
                 (r->r.kind == OPLOG_MKDIR ? S_IFDIR : r->r.kind == OPLOG_SYMLINK
                  ? S_IFLNK : S_IFREG), r->r.uid, r->r.gid, "local",
                 lid_str(r->r.parent, ps), r->name);
        node_set(&rn, st->st_mode, st->st_uid, st->st_gid, "remote", ps, r->name);
        return structure_conflict(c, r, o, NULL, &ln, &rn, pfd, r->name, st,
                                  FCACHE_CONFLICT_CREATE_CREATE,
                                  "the server created the same name");
}

/* Whether directory pfd/name has no entries. */
static bool dir_empty(int pfd, const char *name)
{
        int fd = open_noatime(pfd, name, O_DIRECTORY);
        struct dirent *d;
        bool empty = true;
        DIR *dir;

        if (fd < 0)
                return false;
        dir = fdopendir(fd);
        if (!dir) {
                close(fd);
                return false;
        }
        while (empty && (d = readdir(dir)))
                empty = !strcmp(d->d_name, ".") || !strcmp(d->d_name, "..");
        closedir(dir);
        return empty;
}

/*
 * A create the view began online and made again offline when the server
 * did not answer within BackingTimeout: the server may have applied the
 * first after all, and then has at the name (@st) what the record makes,
 * as it was before any later record: an empty directory or regular file,
 * the same symlink or node, with the record's permission bits.  That is
 * taken as done, never as another's create (a conflict) nor made twice.
 * Only for a record so marked (OPLOG_IN_DOUBT); another client's object
 * just like it would be taken too then: it holds nothing to lose.
 */
static bool created_in_doubt(int pfd, const struct rec *r, const struct stat *st)
{
        char target[PATH_MAX];
        ssize_t n;

        if (!(r->r.flags & OPLOG_IN_DOUBT))
                return false;
        switch (r->r.kind) {
        case OPLOG_CREATE:
                return S_ISREG(st->st_mode) && st->st_size == 0 &&
                       (st->st_mode & 07777) == (r->r.mode & 07777);
        case OPLOG_MKDIR:
                return S_ISDIR(st->st_mode) && (st->st_mode & 07777) == (r->r.mode & 07777) &&
                       dir_empty(pfd, r->name);
        case OPLOG_SYMLINK:
                if (!S_ISLNK(st->st_mode) || !r->content)
                        return false;
                n = readlinkat(pfd, r->name, target, sizeof(target));
                return n >= 0 && (size_t)n == strlen(r->content) &&
                       !memcmp(target, r->content, (size_t)n);
        case OPLOG_MKNOD:
                return (st->st_mode & S_IFMT) == (r->r.mode & S_IFMT) &&
                       (st->st_mode & 07777) == (r->r.mode & 07777) &&
                       st->st_rdev == (dev_t)r->r.rdev;
        default:
                return false;
        }
}

/*
 * Copies @src's bytes to the new file @fd, with the times @ts (UTIME_OMIT:
 * none); fsynced when @sync (a server's file: on a local backing the batch
 * is made durable at once, backing_durable()).
 */
static int fill(int fd, int src, const struct timespec ts[2], bool sync)
{
        int e = oplog_copy_fd(fd, src);

        if (e >= 0 && sync && fsync(fd) < 0)
                e = -errno;
        /* After the data is on the server: a later write-back would move it. */
        if (e >= 0 && (ts[0].tv_nsec != UTIME_OMIT || ts[1].tv_nsec != UTIME_OMIT))
                (void)futimens(fd, ts);
        return e;
}

/*
 * The content record a create carries (carry_content()): the object's next
 * record when it is its content, or the first after setattrs of the object
 * alone (tar's chmod and utimens between its write and its close), whose
 * owner and mode the create then takes (carried_attrs()).  NULL if none.
 */
static struct rec *carried_content(const struct rec *r)
{
        struct rec *n = r->next;

        if (r->r.kind != OPLOG_CREATE)
                return NULL;
        while (n && n->r.lid == r->r.lid && n->r.kind == OPLOG_SETATTR)
                n = n->next;
        return n && n->r.lid == r->r.lid && n->r.kind == OPLOG_CONTENT ? n : NULL;
}

/*
 * The owner and mode create @r gives its file when it carries @content over
 * setattrs (*eff: @r with those applied, later ones winning), and the atime
 * they set (UTIME_OMIT: none).  Their mtimes are not needed: the container's,
 * which the create gives the file, is at least as late (it is the object's
 * now).
 */
static void carried_attrs(const struct rec *r, const struct rec *content, struct rec *eff,
                          struct timespec *atime)
{
        *eff = *r;
        *atime = (struct timespec){ 0, UTIME_OMIT };
        for (const struct rec *n = content ? r->next : NULL; n && n != content; n = n->next) {
                if (n->r.mask & OPLOG_SET_MODE)
                        eff->r.mode = (r->r.mode & ~07777u) | (n->r.mode & 07777);
                if (n->r.mask & OPLOG_SET_UID)
                        eff->r.uid = n->r.uid;
                if (n->r.mask & OPLOG_SET_GID)
                        eff->r.gid = n->r.gid;
                if ((n->r.mask & OPLOG_SET_ATIME) && n->r.atime_ns == INT64_MIN)
                        *atime = (struct timespec){ 0, UTIME_NOW };
                else if (n->r.mask & OPLOG_SET_ATIME)
                        *atime = (struct timespec){ n->r.atime_ns / 1000000000,
                                                    n->r.atime_ns % 1000000000 };
        }
}

/* The records create @r's file now has the result of: up to its carried @content. */
static void carry_done(struct ctx *c, const struct rec *r, struct rec *content)
{
        for (struct rec *n = r->next; n; n = n->next) {
                g_hash_table_add(c->run->carried, &n->r.seq);
                if (n == content)
                        break;
        }
}

/*
 * A file created offline and then written: the create writes the bytes of
 * the object's next record, when that is its content, into the new file
 * before it is placed, and the content record finds them there
 * (do_content()); a round trip saved for every step of a separate replace.
 * *carried: that record (NULL: none), @id its content id.  A create resumed
 * after a crash does not know what its file holds: its content record then
 * checks and, at worst, writes the same bytes again.
 */
static int carry_content(struct ctx *c, const struct rec *r, struct rec *next,
                         const struct timespec *atime, int fd, struct rec **carried,
                         char id[FCACHE_MERGE_ID_SIZE], struct stat *lst)
{
        struct timespec ts[2] = { *atime, { 0, UTIME_OMIT } };
        int src, e;

        *carried = NULL;
        lst->st_ino = 0;
        if (!next)
                return 0;
        src = oplog_content_open(c->log, next->r.seq);
        if (src == -ESTALE)
                return 0; /* removed locally since: the content record settles it */
        if (src < 0)
                return src;
        e = content_of_fd(src, id, lst);
        /* A record of the old format carries the id of its copy. */
        if (e >= 0 && next->content)
                snprintf(id, FCACHE_MERGE_ID_SIZE, "%s", next->content);
        if (e < 0) {
                close(src);
                return e;
        }
        ts[1] = next->content ? (struct timespec){ 0, UTIME_OMIT } : lst->st_mtim;
        e = BACKING(c, fill(fd, src, ts, !c->o->backing_local));
        /* The local copy's version whose bytes the server got (none if it changed meanwhile). */
        if (e >= 0 && lst->st_ino && !local_unchanged(src, lst))
                lst->st_ino = 0;
        close(src);
        if (e >= 0)
                *carried = next;
        return e;
}

/*
 * A regular file is created at its name at once, O_EXCL (a name the server
 * took meanwhile fails it): two directory operations fewer than through a
 * temporary and a no-replace rename, which sshfs does as link + unlink, and
 * one directory's operations are one at a time in the kernel.  The intent
 * goes first as NAME_MAY_EXIST, then with the new inode: a run killed
 * between the two finds an empty regular file at the name and takes it as
 * its own.  Only then would an empty file the server made at that name be
 * taken too, instead of kept as a create-create conflict (its bytes are not
 * lost: it had none; its owner and mode give way to the offline file's).
 * Readers of the server may see the file before its bytes, as with any
 * file being written.
 */
static int create_file(struct ctx *c, const struct rec *r, struct oplog_object *o, int pfd)
{
        char cid[FCACHE_MERGE_ID_SIZE];
        struct rec *carried = NULL, *content = carried_content(r), eff;
        struct timespec atime;
        struct stat st;
        struct stat lst = { 0 };
        int fd = -1, e;

        carried_attrs(r, content, &eff, &atime);
        e = journal_intent(c, r, NAME_MAY_EXIST);
        if (e < 0)
                return e;
        e = BACKING(c, make_tmp(&eff, pfd, r->name, &fd, &st));
        if (e == -EEXIST) {
                if (BACKING(c, fstatat(pfd, r->name, &st, AT_SYMLINK_NOFOLLOW)) < 0)
                        return -errno;
                if (BACKING(c, created_in_doubt(pfd, r, &st)))
                        return created(c, r, o, pfd, -1, NULL, NULL, "already");
                return name_taken(c, r, o, pfd, &st);
        }
        if (e < 0)
                return e;
        e = journal_intent(c, r, st.st_ino);
        if (e >= 0)
                e = carry_content(c, r, content, &atime, fd, &carried, cid, &lst);
        if (e >= 0) {
                fault_point(FAULT_REINT_AFTER_WRITE);
                e = created(c, r, o, pfd, fd, carried ? cid : NULL, &lst, "applied");
                if (e >= 0 && carried)
                        carry_done(c, r, carried);
        }
        BACKING(c, close(fd));
        return e;
}

/*
 * A regular file's create cut before its mark (the link reset, the worker
 * killed): the file @st at its name is ours when it holds no bytes or the
 * bytes the create carries, which it then keeps (their mtime set again, as
 * fill() had perhaps not).  By content, not only by the inode number its
 * intent recorded: over sshfs a file looked up again may have a new one.
 * The outcome, or 0 when the file is not ours (another's create: a
 * conflict, found by the create).
 */
static int create_in_doubt(struct ctx *c, const struct rec *r, struct oplog_object *o, int pfd,
                           struct stat *st)
{
        char lid[FCACHE_MERGE_ID_SIZE], rid[FCACHE_MERGE_ID_SIZE];
        struct rec *next = carried_content(r);
        struct timespec mtime;
        int e;

        if (!S_ISREG(st->st_mode))
                return 0;
        if (st->st_size == 0)
                return created(c, r, o, pfd, -1, NULL, NULL, "already");
        if (!next)
                return 0;
        e = local_content(c, next, lid, &mtime);
        if (e == -ESTALE)
                return 0;
        if (e < 0)
                return e;
        e = BACKING(c, remote_id(pfd, r->name, st, rid));
        if (e < 0)
                return e;
        if (strcmp(lid, rid))
                return 0;
        e = BACKING(c, stamp_mtime(pfd, r->name, &mtime, st));
        if (e < 0)
                return e;
        e = created(c, r, o, pfd, -1, lid, NULL, "already");
        /* Its owner and mode were the setattrs' from its create on (create_file()). */
        if (e >= 0)
                carry_done(c, r, next);
        return e;
}

static int do_create(struct ctx *c, const struct rec *r, struct oplog_object *o)
{
        char tmp[64];
        struct stat st, tst;
        uint64_t intent = 0;
        int pfd, fd = -1, e;

        set_path(c, r->r.parent, r->name);
        pfd = dir_fd(c, r->r.parent, 0);
        if (pfd == -ENOENT) {
                if (c->dry && g_hash_table_contains(c->virt, &r->r.parent)) {
                        g_hash_table_add(c->virt, &o->lid);
                        set_srv(o, r->r.parent, r->name);
                        return REINTEGRATE_APPLIED;
                }
                return conflict(c, r, o, FCACHE_CONFLICT_CHILDREN_DELETE, -1, NULL, NULL,
                                "the server removed the directory it was created in");
        }
        if (pfd < 0)
                return pfd;
        tmp_name(c, r, tmp);
        if (!c->dry) {
                uint64_t *v = g_hash_table_lookup(c->intent_of, &r->r.seq);

                intent = v ? v[1] : 0;
        }
        if (r->r.kind == OPLOG_CREATE && intent) {
                /* Cut between create_file()'s create and its mark. */
                if (BACKING(c, fstatat(pfd, r->name, &st, AT_SYMLINK_NOFOLLOW)) == 0) {
                        if (st.st_ino == intent)
                                return created(c, r, o, pfd, -1, NULL, NULL, "already");
                        e = create_in_doubt(c, r, o, pfd, &st);
                        if (e != 0)
                                return e;
                }
        } else if (intent) {
                if (BACKING(c, fstatat(pfd, tmp, &tst, AT_SYMLINK_NOFOLLOW)) == 0 &&
                    tst.st_ino == intent)
                        goto place;
                if (BACKING(c, fstatat(pfd, r->name, &st, AT_SYMLINK_NOFOLLOW)) == 0 &&
                    st.st_ino == intent)
                        return created(c, r, o, pfd, -1, NULL, NULL, "already");
                /* The temporary is gone (cleaned up): start again. */
        }
        if (c->dry) {
                /* A real run learns this from its O_EXCL create or no-replace rename. */
                if (BACKING(c, fstatat(pfd, r->name, &st, AT_SYMLINK_NOFOLLOW)) == 0) {
                        if (!BACKING(c, created_in_doubt(pfd, r, &st)))
                                return name_taken(c, r, o, pfd, &st);
                        set_srv(o, r->r.parent, r->name);
                        return REINTEGRATE_ALREADY;
                }
                if (errno != ENOENT)
                        return -errno;
                g_hash_table_add(c->virt, &o->lid);
                set_srv(o, r->r.parent, r->name);
                return REINTEGRATE_APPLIED;
        }
        if (r->r.kind == OPLOG_CREATE)
                return create_file(c, r, o, pfd);
        e = BACKING(c, make_tmp(r, pfd, tmp, &fd, &tst));
        if (e == -EEXIST) {
                /* A leftover of an attempt that died before its intent was recorded. */
                BACKING(c, remove_tmp(pfd, tmp, r->r.kind));
                e = BACKING(c, make_tmp(r, pfd, tmp, &fd, &tst));
        }
        /* The intent: this inode is ours, whatever name it has when we look again. */
        if (e >= 0)
                e = journal_intent(c, r, tst.st_ino);
        if (e < 0) {
                if (fd >= 0)
                        BACKING(c, close(fd));
                BACKING(c, remove_tmp(pfd, tmp, r->r.kind));
                return e;
        }
place:
        e = rename_noreplace(c, pfd, tmp, pfd, r->name);
        if (e == -EEXIST || e == -ENOTEMPTY) {
                if (fd >= 0)
                        BACKING(c, close(fd));
                BACKING(c, remove_tmp(pfd, tmp, r->r.kind));
                if (BACKING(c, fstatat(pfd, r->name, &st, AT_SYMLINK_NOFOLLOW)) < 0)
                        return -errno;
                if (BACKING(c, created_in_doubt(pfd, r, &st)))
                        return created(c, r, o, pfd, -1, NULL, NULL, "already");
                return name_taken(c, r, o, pfd, &st);
        }
        if (e >= 0) {
                fault_point(FAULT_REINT_AFTER_WRITE);
                e = created(c, r, o, pfd, fd, NULL, NULL, "applied");
        }
        if (fd >= 0)
                BACKING(c, close(fd));
        return e;
}

static int do_link(struct ctx *c, const struct rec *r, struct oplog_object *o)
{
        struct stat st, nst;
        int pfd = -1, nfd, e;

        set_path(c, r->r.parent2, r->name2);
        if (c->dry && (g_hash_table_contains(c->virt, &o->lid) ||
                       g_hash_table_contains(c->virt, &r->r.parent2)))
                return REINTEGRATE_APPLIED;
        nfd = dir_fd(c, r->r.parent2, 0);
        if (nfd == -ENOENT)
                return conflict(c, r, o, FCACHE_CONFLICT_CHILDREN_DELETE, -1, NULL, NULL,
                                "the server removed the directory of the new link");
        if (nfd < 0)
                return nfd;
        if (BACKING(c, fstatat(nfd, r->name2, &nst, AT_SYMLINK_NOFOLLOW)) == 0) {
                if (nst.st_ino == o->base.ino) {
                        if (locate(c, o, &pfd, &st) == 0 && st.st_ino == o->base.ino) {
                                set_base(o, &st, o->base.content);
                                dirty(c, o);
                        }
                        e = mark(c, r, OPLOG_APPLIED, "already");
                        return e < 0 ? e : REINTEGRATE_ALREADY;
                }
                return conflict(c, r, o, FCACHE_CONFLICT_CREATE_CREATE, nfd, r->name2, &nst,
                                "the server created the same name");
        } else if (errno != ENOENT) {
                return -errno;
        }
        e = locate(c, o, &pfd, &st);
        if (e == -ENOENT || (e == 0 && st.st_ino != o->base.ino))
                return conflict(c, r, o, FCACHE_CONFLICT_EDIT_DELETE, -1, NULL, NULL,
                                "the server removed the file being linked");
        if (e < 0)
                return e;
        if (c->dry)
                return REINTEGRATE_APPLIED;
        if (BACKING(c, linkat(pfd, o->srv_name, nfd, r->name2, 0)) < 0) {
                if (errno == EEXIST) {
                        if (BACKING(c, fstatat(nfd, r->name2, &nst, AT_SYMLINK_NOFOLLOW)) < 0)
                                return -errno;
                        return conflict(c, r, o, FCACHE_CONFLICT_CREATE_CREATE, nfd, r->name2,
                                        &nst, "the server created the same name");
                }
                return -errno;
        }
        fault_point(FAULT_REINT_AFTER_WRITE);
        if (BACKING(c, fstatat(pfd, o->srv_name, &st, AT_SYMLINK_NOFOLLOW)) < 0)
                return -errno;
        set_base(o, &st, o->base.content);
        dirty(c, o);
        e = mark(c, r, OPLOG_APPLIED, "applied");
        return e < 0 ? e : REINTEGRATE_APPLIED;
}

/* Whether the server's @st (at pfd/name) still is @o's base version, by content if need be. */
static int unchanged(struct oplog_object *o, int pfd, const char *name, const struct stat *st,
                     char rid[FCACHE_MERGE_ID_SIZE])
{
        int e;

        if (st->st_ino != o->base.ino || (st->st_mode & S_IFMT) != (o->base.mode & S_IFMT))
                return 0;
        if (S_ISDIR(st->st_mode) || same_identity(&o->base, st)) {
                snprintf(rid, FCACHE_MERGE_ID_SIZE, "%s", o->base.content);
                return (st->st_mode & 07777) == (o->base.mode & 07777) &&
                       st->st_uid == o->base.uid && st->st_gid == o->base.gid;
        }
        e = remote_id(pfd, name, st, rid);
        if (e < 0)
                return e;
        return strcmp(rid, o->base.content) == 0 && (st->st_mode & 07777) == (o->base.mode & 07777) &&
               st->st_uid == o->base.uid && st->st_gid == o->base.gid;
}

/*
 * @o lost the name parent/name on the server (an unlink, or a rename over
 * it); @nlink is what its link count was before.  Replay keeps following it
 * by another name if it has one.  The server is asked before @o changes:
 * another record's flush of the journal meanwhile saves @o as it was.
 */
static int lost_name(struct ctx *c, struct oplog_object *o, uint64_t parent, const char *name,
                     nlink_t nlink, uint64_t ino)
{
        struct stat st;
        int e;

        if (!o->srv_name || o->srv_parent != parent || strcmp(o->srv_name, name)) {
                char *at = g_strdup(o->srv_name);

                if (at && still_at(c, o->srv_parent, at, ino, &st))
                        set_base(o, &st, o->base.content);
                g_free(at);
                return 0;
        }
        if (nlink <= 1) {
                set_srv(o, 0, NULL);
                return 0;
        }
        e = follow_other_name(c, o, parent, name, ino, &st);
        /* Not found by another name: no longer followed. */
        if (e == 0)
                set_srv(o, 0, NULL);
        return e < 0 ? e : 0;
}

static int do_remove(struct ctx *c, const struct rec *r, struct oplog_object *o)
{
        fcache_merge_node bn = FCACHE_MERGE_NODE_INIT, ln = FCACHE_MERGE_NODE_INIT,
                          rn = FCACHE_MERGE_NODE_INIT;
        char rid[FCACHE_MERGE_ID_SIZE] = "", ps[24];
        bool dir = r->r.kind == OPLOG_RMDIR;
        struct stat st;
        int pfd, e;

        set_path(c, r->r.parent, r->name);
        if (c->dry && g_hash_table_contains(c->virt, &o->lid))
                return REINTEGRATE_APPLIED;
        pfd = dir_fd(c, r->r.parent, 0);
        e = pfd < 0 ? pfd : BACKING(c, fstatat(pfd, r->name, &st, AT_SYMLINK_NOFOLLOW)) < 0
                                ? -errno : 0;
        if (e == -ENOENT) {
                /*
                 * Gone on the server too (or removed by us before a crash):
                 * the same bookkeeping as after our own unlink, following a
                 * file with other links by another name (its link count
                 * before is unknown here).
                 */
                if (o->srv_parent == r->r.parent && o->srv_name && !strcmp(o->srv_name, r->name)) {
                        e = lost_name(c, o, r->r.parent, r->name, dir ? 1 : 2, o->base.ino);
                        if (e < 0)
                                return e;
                        dirty(c, o);
                }
                if (dir)
                        forget_dirs(c);
                e = mark(c, r, OPLOG_APPLIED, "already");
                return e < 0 ? e : REINTEGRATE_ALREADY;
        }
        if (e < 0)
                return e;
        rebind(c, o, r->r.parent, r->name, &st);
        e = BACKING(c, unchanged(o, pfd, r->name, &st, rid));
        if (e < 0)
                return e;
        node_set(&bn, o->base.mode, o->base.uid, o->base.gid, o->base.content,
                 lid_str(r->r.parent, ps), r->name);
        if (!e) {
                node_set(&rn, st.st_mode, st.st_uid, st.st_gid,
                         st.st_ino == o->base.ino ? rid : "replaced", ps, r->name);
                if (st.st_ino != o->base.ino && (st.st_mode & S_IFMT) != (o->base.mode & S_IFMT))
                        rn.type = node_type(st.st_mode);
                return structure_conflict(c, r, o, &bn, &ln, &rn, pfd, r->name, &st,
                                          FCACHE_CONFLICT_DELETE_EDIT,
                                          "the server changed what was removed");
        }
        if (c->dry)
                return REINTEGRATE_APPLIED;
        if (BACKING(c, unlinkat(pfd, r->name, dir ? AT_REMOVEDIR : 0)) < 0) {
                if (errno == ENOTEMPTY || errno == EEXIST)
                        return conflict(c, r, o, FCACHE_CONFLICT_DELETE_CHILDREN, pfd, r->name,
                                        &st, "the server added entries to the directory");
                return -errno;
        }
        fault_point(FAULT_REINT_AFTER_WRITE);
        if (st.st_nlink > 1)
                fault_point(FAULT_REINT_LINKED_UNLINK);
        e = lost_name(c, o, r->r.parent, r->name, st.st_nlink, st.st_ino);
        if (e < 0)
                return e;
        dirty(c, o);
        if (dir)
                forget_dirs(c);
        e = mark(c, r, OPLOG_APPLIED, "applied");
        return e < 0 ? e : REINTEGRATE_APPLIED;
}

/* Whether @r renames the name replay follows @o by (not another hard link of it). */
static bool moves_srv(const struct oplog_object *o, const struct rec *r)
{
        return !o->srv_name || (o->srv_parent == r->r.parent && !strcmp(o->srv_name, r->name));
}

static int do_rename(struct ctx *c, const struct rec *r, struct oplog_object *o)
{
        fcache_merge_node bn = FCACHE_MERGE_NODE_INIT, ln = FCACHE_MERGE_NODE_INIT,
                          rn = FCACHE_MERGE_NODE_INIT;
        bool exchange = r->r.flags & RENAME_EXCHANGE;
        struct oplog_object *other = NULL;
        char ps[24], qs[24], rid[FCACHE_MERGE_ID_SIZE];
        struct stat sa, sb, sb_before = { 0 };
        bool has_a, has_b;
        int pfd, qfd, e;

        set_path(c, r->r.parent, r->name);
        if (r->r.other && (e = get_obj(c, r->r.other, &other)) < 0)
                return e;
        if (c->dry && (g_hash_table_contains(c->virt, &o->lid) ||
                       g_hash_table_contains(c->virt, &r->r.parent2)))
                return REINTEGRATE_APPLIED;
        pfd = dir_fd(c, r->r.parent, 0);
        qfd = pfd < 0 ? pfd : dir_fd(c, r->r.parent2, 0);
        if (pfd == -ENOENT || qfd == -ENOENT)
                return conflict(c, r, o, pfd == -ENOENT ? FCACHE_CONFLICT_RENAME_DELETE
                                                        : FCACHE_CONFLICT_CHILDREN_DELETE,
                                -1, NULL, NULL, "the server removed a directory of the rename");
        if (pfd < 0 || qfd < 0)
                return pfd < 0 ? pfd : qfd;
        has_a = BACKING(c, fstatat(pfd, r->name, &sa, AT_SYMLINK_NOFOLLOW)) == 0;
        if (!has_a && errno != ENOENT)
                return -errno;
        has_b = BACKING(c, fstatat(qfd, r->name2, &sb, AT_SYMLINK_NOFOLLOW)) == 0;
        if (!has_b && errno != ENOENT)
                return -errno;
        if (has_a)
                rebind(c, o, r->r.parent, r->name, &sa);
        if (has_b && other)
                rebind(c, other, r->r.parent2, r->name2, &sb);
        /* Already done? */
        if (has_b && sb.st_ino == o->base.ino &&
            (!exchange || (has_a && other && sa.st_ino == other->base.ino))) {
                if (moves_srv(o, r))
                        set_srv(o, r->r.parent2, r->name2);
                set_base(o, &sb, o->base.content);
                dirty(c, o);
                if (other) {
                        if (exchange) {
                                set_srv(other, r->r.parent, r->name);
                                set_base(other, &sa, other->base.content);
                        } else if ((e = lost_name(c, other, r->r.parent2, r->name2, 2,
                                                  other->base.ino)) < 0) {
                                return e;
                        }
                        dirty(c, other);
                }
                if (S_ISDIR(o->type) || (other && S_ISDIR(other->type)))
                        forget_dirs(c);
                e = mark(c, r, OPLOG_APPLIED, "already");
                return e < 0 ? e : REINTEGRATE_ALREADY;
        }
        node_set(&bn, o->base.mode, o->base.uid, o->base.gid, "x", lid_str(r->r.parent, ps),
                 r->name);
        ln = bn;
        ln.parent = lid_str(r->r.parent2, qs);
        ln.name = r->name2;
        if (!has_a || sa.st_ino != o->base.ino)
                return structure_conflict(c, r, o, &bn, &ln, &rn, pfd, NULL, NULL,
                                          FCACHE_CONFLICT_RENAME_DELETE,
                                          "the server removed or replaced what was renamed");
        if (has_b && (!other || sb.st_ino != other->base.ino)) {
                node_set(&rn, sb.st_mode, sb.st_uid, sb.st_gid, "remote", qs, r->name2);
                return conflict(c, r, o, FCACHE_CONFLICT_CREATE_CREATE, qfd, r->name2, &sb,
                                "the server created the target name");
        }
        /* Replacing: the server's copy of what is replaced must be the base
         * one, unless it keeps other names (only a link goes: no change of
         * it is lost; its changes here are records of their own). */
        if (has_b && other && !exchange && (S_ISDIR(sb.st_mode) || sb.st_nlink <= 1)) {
                e = BACKING(c, unchanged(other, qfd, r->name2, &sb, rid));
                if (e < 0)
                        return e;
                if (!e)
                        return conflict(c, r, o, FCACHE_CONFLICT_DELETE_EDIT, qfd, r->name2, &sb,
                                        "the server changed the file the rename replaces");
        }
        if (exchange && !has_b)
                return conflict(c, r, o, FCACHE_CONFLICT_RENAME_DELETE, -1, NULL, NULL,
                                "the server removed the other side of the exchange");
        if (c->dry)
                return REINTEGRATE_APPLIED;
        sb_before = sb;
        if (exchange)
                e = BACKING(c, renameat2(pfd, r->name, qfd, r->name2, RENAME_EXCHANGE)) < 0 ? -errno : 0;
        else if (!has_b)
                e = rename_noreplace(c, pfd, r->name, qfd, r->name2);
        else
                e = BACKING(c, renameat(pfd, r->name, qfd, r->name2)) < 0 ? -errno : 0;
        if (e == -EEXIST || e == -ENOTEMPTY) {
                if (BACKING(c, fstatat(qfd, r->name2, &sb, AT_SYMLINK_NOFOLLOW)) < 0)
                        return -errno;
                return conflict(c, r, o, e == -EEXIST ? FCACHE_CONFLICT_CREATE_CREATE
                                                      : FCACHE_CONFLICT_DELETE_CHILDREN,
                                qfd, r->name2, &sb, "the target changed on the server");
        }
        if (e < 0)
                return e;
        fault_point(FAULT_REINT_AFTER_WRITE);
        if (BACKING(c, fstatat(qfd, r->name2, &sb, AT_SYMLINK_NOFOLLOW)) < 0)
                return -errno;
        if (moves_srv(o, r))
                set_srv(o, r->r.parent2, r->name2);
        set_base(o, &sb, o->base.content);
        dirty(c, o);
        if (other) {
                if (exchange && BACKING(c, fstatat(pfd, r->name, &sa, AT_SYMLINK_NOFOLLOW)) == 0) {
                        set_srv(other, r->r.parent, r->name);
                        set_base(other, &sa, other->base.content);
                } else if (!exchange) {
                        e = lost_name(c, other, r->r.parent2, r->name2,
                                      has_b ? sb_before.st_nlink : 1, other->base.ino);
                        if (e < 0)
                                return e;
                }
                dirty(c, other);
        }
        if (S_ISDIR(o->type) || (other && S_ISDIR(other->type)))
                forget_dirs(c);
        e = mark(c, r, OPLOG_APPLIED, "applied");
        return e < 0 ? e : REINTEGRATE_APPLIED;
}

static int do_setattr(struct ctx *c, const struct rec *r, struct oplog_object *o)
{
        fcache_merge_structure_options so = FCACHE_MERGE_STRUCTURE_OPTIONS_INIT;
        fcache_merge_node bn = FCACHE_MERGE_NODE_INIT, ln, rn = FCACHE_MERGE_NODE_INIT;
        fcache_merge_decision d;
        unsigned m = r->r.mask;
        struct timespec ts[2];
        struct stat st, before;
        bool todo = false;
        char ps[24];
        int pfd, e;

        set_path(c, o->srv_parent, o->srv_name);
        if (c->dry && g_hash_table_contains(c->virt, &o->lid))
                return REINTEGRATE_APPLIED;
        if (!c->dry && g_hash_table_contains(c->run->carried, &r->r.seq)) {
                /* Its create made the file with this owner and mode (carried_attrs()). */
                e = mark(c, r, OPLOG_APPLIED, "applied");
                return e < 0 ? e : REINTEGRATE_APPLIED;
        }
        /* Content is not this record's business: the same id on all three sides. */
        node_set(&bn, o->base.mode, o->base.uid, o->base.gid, "-", lid_str(o->srv_parent, ps),
                 o->srv_name);
        ln = bn;
        if (m & OPLOG_SET_MODE)
                ln.mode = r->r.mode & 07777;
        if (m & OPLOG_SET_UID)
                ln.uid = r->r.uid;
        if (m & OPLOG_SET_GID)
                ln.gid = r->r.gid;
        e = locate(c, o, &pfd, &st);
        if (e == -ENOENT || (e == 0 && st.st_ino != o->base.ino))
                return structure_conflict(c, r, o, &bn, &ln, &rn, -1, NULL, NULL,
                                          FCACHE_CONFLICT_EDIT_DELETE,
                                          "the server removed the object");
        if (e < 0)
                return e;
        node_set(&rn, st.st_mode, st.st_uid, st.st_gid, "-", ps, o->srv_name);
        so.flags = c->o->structure_flags;
        e = fcache_merge_structure(&d, &bn, &ln, &rn, &so);
        if (e < 0)
                return e;
        if (d.action == FCACHE_MERGE_ACTION_CONFLICT) {
                char detail[160];

                snprintf(detail, sizeof(detail), "base mode %04o owner %u:%u, local mode %04o"
                         " owner %u:%u, server mode %04o owner %u:%u", bn.mode, bn.uid, bn.gid,
                         ln.mode, ln.uid, ln.gid, rn.mode, rn.uid, rn.gid);
                return conflict(c, r, o, d.conflict, pfd, o->srv_name, &st, detail);
        }
        if (c->dry)
                return REINTEGRATE_APPLIED;
        before = st;
        /* The owner first: a chown kills set-id bits, the mode logged is the
         * one the file had last offline (what a chown there killed included). */
        if (((m & OPLOG_SET_UID) && st.st_uid != r->r.uid) ||
            ((m & OPLOG_SET_GID) && st.st_gid != r->r.gid)) {
                if (BACKING(c, fchownat(pfd, o->srv_name,
                                        (m & OPLOG_SET_UID) ? r->r.uid : (uid_t)-1,
                                        (m & OPLOG_SET_GID) ? r->r.gid : (gid_t)-1,
                                        AT_SYMLINK_NOFOLLOW)) < 0 ||
                    BACKING(c, fstatat(pfd, o->srv_name, &st, AT_SYMLINK_NOFOLLOW)) < 0)
                        return -errno;
                todo = true;
        }
        if ((m & OPLOG_SET_MODE) && (st.st_mode & 07777) != (r->r.mode & 07777) &&
            !S_ISLNK(st.st_mode)) {
                if (BACKING(c, fchmodat(pfd, o->srv_name, r->r.mode & 07777, 0)) < 0)
                        return -errno;
                todo = true;
        }
        if (m & (OPLOG_SET_ATIME | OPLOG_SET_MTIME)) {
                int64_t t[2] = { r->r.atime_ns, r->r.mtime_ns };

                for (int i = 0; i < 2; i++) {
                        if (!(m & (i ? OPLOG_SET_MTIME : OPLOG_SET_ATIME)))
                                ts[i] = (struct timespec){ 0, UTIME_OMIT };
                        else if (t[i] == INT64_MIN)
                                ts[i] = (struct timespec){ 0, UTIME_NOW };
                        else
                                ts[i] = (struct timespec){ t[i] / 1000000000, t[i] % 1000000000 };
                }
                if (BACKING(c, utimensat(pfd, o->srv_name, ts, AT_SYMLINK_NOFOLLOW)) < 0)
                        return -errno;
                todo = true;
        }
        fault_point(FAULT_REINT_AFTER_WRITE);
        if (BACKING(c, fstatat(pfd, o->srv_name, &st, AT_SYMLINK_NOFOLLOW)) < 0)
                return -errno;
        set_base(o, &st, o->base.content);
        dirty(c, o);
        if (todo)
                note_restamped(c, &before, &st);
        e = mark(c, r, OPLOG_APPLIED, todo ? "applied" : "already");
        return e < 0 ? e : todo ? REINTEGRATE_APPLIED : REINTEGRATE_ALREADY;
}

/*
 * The server's side of an xattr record: whether pfd/name already has what
 * @r sets or removes (*done), else (unless @dry) makes it so; *st: the
 * object's stat after (st_ino 0 if it could not be read).
 */
static int xattr_apply(int pfd, const char *name, const struct rec *r, bool dry, bool *done,
                       struct stat *st)
{
        char *cur = malloc(65536);
        ssize_t n;
        int fd, e = 0;

        if (!cur)
                return -ENOMEM;
        fd = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
                free(cur);
                return -errno;
        }
        n = fgetxattr(fd, r->xname, cur, 65536);
        if (r->r.kind == OPLOG_SETXATTR)
                *done = n >= 0 && (size_t)n == r->r.xsize && !memcmp(cur, r->xvalue, (size_t)n);
        else
                *done = n < 0 && errno == ENODATA;
        free(cur);
        if (!*done && !dry) {
                if (r->r.kind == OPLOG_SETXATTR)
                        e = fsetxattr(fd, r->xname, r->xvalue ? r->xvalue : "", r->r.xsize, 0);
                else
                        e = fremovexattr(fd, r->xname);
                e = e < 0 && errno != ENODATA ? -errno : 0;
        }
        if (e >= 0 && !dry)
                fault_point(FAULT_REINT_AFTER_WRITE);
        if (e >= 0 && !dry && fstat(fd, st) < 0)
                st->st_ino = 0;
        close(fd);
        return e;
}

static int do_xattr(struct ctx *c, const struct rec *r, struct oplog_object *o)
{
        struct stat st;
        int pfd, e;
        bool done = false;

        set_path(c, o->srv_parent, o->srv_name);
        if (c->dry && g_hash_table_contains(c->virt, &o->lid))
                return REINTEGRATE_APPLIED;
        e = locate(c, o, &pfd, &st);
        if (e == -ENOENT || (e == 0 && st.st_ino != o->base.ino))
                return conflict(c, r, o, FCACHE_CONFLICT_EDIT_DELETE, -1, NULL, NULL,
                                "the server removed the object");
        if (e < 0)
                return e;
        e = BACKING(c, xattr_apply(pfd, o->srv_name, r, c->dry, &done, &st));
        if (e < 0)
                return e;
        if (c->dry)
                return done ? REINTEGRATE_ALREADY : REINTEGRATE_APPLIED;
        if (st.st_ino)
                set_base(o, &st, o->base.content);
        dirty(c, o);
        e = mark(c, r, OPLOG_APPLIED, done ? "already" : "applied");
        return e < 0 ? e : done ? REINTEGRATE_ALREADY : REINTEGRATE_APPLIED;
}

/* The conflict @r is held behind, 0 if none: its object's, or (creates) its parent's. */
static uint64_t blocker(struct ctx *c, const struct rec *r, struct oplog_object *o)
{
        struct oplog_object *p;

        if (o->conflict)
                return o->conflict;
        if (r->r.parent && get_obj(c, r->r.parent, &p) == 0 && p->conflict)
                return p->conflict;
        if (r->r.parent2 && get_obj(c, r->r.parent2, &p) == 0 && p->conflict)
                return p->conflict;
        if (r->r.other && get_obj(c, r->r.other, &p) == 0 && p->conflict)
                return p->conflict;
        return 0;
}

static int one(struct ctx *c, const struct rec *r)
{
        struct oplog_object *o;
        uint64_t held;
        int e;

        c->conflict = FCACHE_CONFLICT_NONE;
        g_free(c->path);
        c->path = NULL;
        e = get_obj(c, r->r.lid, &o);
        if (e < 0)
                return e;
        held = blocker(c, r, o);
        if (held) {
                char buf[32];

                snprintf(buf, sizeof(buf), "held:%" PRIu64, held);
                set_path(c, o->srv_parent, o->srv_name);
                /* Replayed after the conflict is settled: the mirror is resynced by then. */
                if (!c->dry && r->r.kind == OPLOG_CONTENT &&
                    (e = oplog_content_detach(c->log, r->r.seq)) < 0)
                        return e;
                if (!o->conflict) {
                        o->conflict = held;
                        dirty(c, o);
                }
                e = mark(c, r, OPLOG_HELD, buf);
                return e < 0 ? e : REINTEGRATE_HELD;
        }
        switch (r->r.kind) {
        case OPLOG_CONTENT:
                return do_content(c, r, o);
        case OPLOG_CREATE:
        case OPLOG_MKDIR:
        case OPLOG_SYMLINK:
        case OPLOG_MKNOD:
                return do_create(c, r, o);
        case OPLOG_LINK:
                return do_link(c, r, o);
        case OPLOG_UNLINK:
        case OPLOG_RMDIR:
                return do_remove(c, r, o);
        case OPLOG_RENAME:
                return do_rename(c, r, o);
        case OPLOG_SETATTR:
                return do_setattr(c, r, o);
        case OPLOG_SETXATTR:
        case OPLOG_REMOVEXATTR:
                return do_xattr(c, r, o);
        default:
                return -EINVAL;
        }
}

static guint lid_hash(gconstpointer p)
{
        return g_int64_hash(p);
}

/* Loads the objects pending records name in one query (get_obj() finds the rest). */
static int preload(void *ud, struct oplog_object *o)
{
        g_hash_table_replace(ud, &o->lid, o);
        return 0;
}

/* intent_of entries are { seq, ino } pairs keyed by their first half. */
static int load_intent(void *ud, uint64_t seq, uint64_t ino)
{
        uint64_t *v = g_new(uint64_t, 2);

        v[0] = seq;
        v[1] = ino;
        g_hash_table_insert(ud, v, v);
        return 0;
}

static const struct oplog_record *pool_record(void *ud, unsigned i)
{
        struct ctx *c = ud;

        return &((struct rec *)c->recs->pdata[i])->r;
}

static int pool_run(void *ud, unsigned worker, unsigned i)
{
        struct ctx *c = &((struct ctx *)ud)->workers[worker];
        int e = one(c, c->run->recs->pdata[i]);

        g_ptr_array_set_size(c->dirty, 0);
        return e;
}

static void report(struct ctx *run, unsigned i, int outcome, fcache_conflict_kind conflict,
                   const char *path)
{
        struct reintegrate_item it;

        switch (outcome) {
        case REINTEGRATE_APPLIED: run->st.applied++; break;
        case REINTEGRATE_ALREADY: run->st.already++; break;
        case REINTEGRATE_MERGED: run->st.merged++; break;
        case REINTEGRATE_CONFLICT: run->st.conflicts++; break;
        case REINTEGRATE_HELD: run->st.held++; break;
        }
        run->done++;
        if (run->o->progress) {
                it = (struct reintegrate_item){
                        .record = pool_record(run, i), .outcome = outcome,
                        .conflict = conflict, .path = path, .done = run->done,
                        .total = run->recs->len,
                };
                run->o->progress(run->o->userdata, &it);
        }
}

/*
 * A record finished: reported at once in a real run (in the order records
 * finish: done only grows); a dry run lists its results in log order, as
 * the listing reads, so each waits for the records before it.
 */
static void pool_done(void *ud, unsigned worker, unsigned i, int outcome)
{
        struct ctx *run = ud, *c = &run->workers[worker];

        if (!run->dry) {
                report(run, i, outcome, c->conflict, c->path);
                return;
        }
        run->held[i] = (struct dry_item){ true, outcome, c->conflict, g_strdup(c->path) };
        while (run->next_out < run->recs->len && run->held[run->next_out].ready) {
                struct dry_item *d = &run->held[run->next_out];

                report(run, run->next_out++, d->outcome, d->conflict, d->path);
                g_free(d->path);
                d->path = NULL;
        }
}

static bool pool_cancel(void *ud)
{
        struct ctx *run = ud;

        return run->o->cancel && run->o->cancel(run->o->userdata);
}

/* Links every record to the next one of its object (as the object or as a rename's other). */
static void link_next(GPtrArray *recs)
{
        GHashTable *later = g_hash_table_new(lid_hash, g_int64_equal);

        for (guint i = recs->len; i-- > 0;) {
                struct rec *r = recs->pdata[i];

                r->next = g_hash_table_lookup(later, &r->r.lid);
                g_hash_table_insert(later, &r->r.lid, r);
                if (r->r.other)
                        g_hash_table_insert(later, &r->r.other, r);
        }
        g_hash_table_destroy(later);
}

/* Replays the records on the pool (reintegrate-pool.h). */
static int replay(struct ctx *run)
{
        static const struct reintegrate_pool_ops ops = {
                .record = pool_record, .run = pool_run, .done = pool_done,
                .cancel = pool_cancel,
        };
        unsigned threads = run->o->threads ? run->o->threads : REINTEGRATE_POOL_THREADS;
        pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        /* The caller's: its changes are recorded while records wait on the backing. */
        pthread_mutex_t *lock = run->o->lock ? run->o->lock : &mu;
        int e;

        if (run->dry)
                run->held = g_new0(struct dry_item, run->recs->len);
        run->workers = g_new0(struct ctx, threads);
        for (unsigned t = 0; t < threads; t++) {
                run->workers[t] = *run;
                run->workers[t].mu = threads > 1 || run->o->lock ? lock : NULL;
                run->workers[t].dirty = g_ptr_array_new();
                run->workers[t].path = NULL;
        }
        e = reintegrate_pool_run(lock, threads, run->recs->len, &ops, run);
        for (unsigned t = 0; t < threads; t++) {
                g_ptr_array_unref(run->workers[t].dirty);
                g_free(run->workers[t].path);
        }
        g_free(run->workers);
        run->workers = NULL;
        if (run->held)
                for (guint i = 0; i < run->recs->len; i++)
                        g_free(run->held[i].path);
        g_free(run->held);
        run->held = NULL;
        pthread_mutex_destroy(&mu);
        return e;
}

/*
 * The run's start, under the caller's lock if it gave one: an interrupted
 * run's marks, the pending records (up to K, the last of them) and their
 * objects; records after K are not coalesced into these until the run ends.
 */
static int start(struct ctx *cp, GPtrArray **out)
{
        struct ctx c = *cp;
        struct oplog *log = c.log;
        GPtrArray *recs;
        int e;

        c.jfd = openat(oplog_dir_fd(log), JOURNAL, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (c.jfd < 0)
                return -errno;
        /* An interrupted run's marks first (a dry run needs them too to see where replay is). */
        e = journal_recover(log, c.jfd, NULL);
        if (e >= 0)
                e = journal_start(&c);
        /* Files created offline whose later changes only their containers hold: as records. */
        if (e >= 0)
                e = oplog_settle_deferred(log);
        recs = g_ptr_array_new_with_free_func(rec_free);
        if (e >= 0)
                e = oplog_foreach(log, true, collect, recs);
        /* Until its end, a restart finds where this run was to stop. */
        if (e >= 0 && !c.dry && recs->len) {
                c.upto = ((struct rec *)recs->pdata[recs->len - 1])->r.seq;
                e = journal_upto(&c, c.upto);
        }
        if (e < 0) {
                g_ptr_array_unref(recs);
                close(c.jfd);
                return e;
        }
        c.intent_of = g_hash_table_new_full(lid_hash, g_int64_equal, g_free, NULL);
        e = oplog_intents(log, load_intent, c.intent_of);
        if (e < 0) {
                g_hash_table_destroy(c.intent_of);
                g_ptr_array_unref(recs);
                close(c.jfd);
                return e;
        }
        c.objs = g_hash_table_new_full(lid_hash, g_int64_equal, NULL, obj_free);
        e = oplog_objects_of_pending(log, preload, c.objs);
        if (e < 0) {
                g_hash_table_destroy(c.objs);
                g_hash_table_destroy(c.intent_of);
                g_ptr_array_unref(recs);
                close(c.jfd);
                return e;
        }
        c.unsaved = g_hash_table_new(lid_hash, g_int64_equal);
        c.rebound = g_hash_table_new(lid_hash, g_int64_equal);
        c.marks = g_array_new(FALSE, FALSE, sizeof(struct pending_mark));
        c.intents = g_array_new(FALSE, FALSE, sizeof(struct pending_intent));
        c.dirs = g_hash_table_new_full(lid_hash, g_int64_equal, NULL, close_dir);
        c.virt = g_hash_table_new(lid_hash, g_int64_equal);
        c.dirty = g_ptr_array_new();
        c.st.total = recs->len;
        c.carried = g_hash_table_new(lid_hash, g_int64_equal);
        if (c.o->lock && recs->len)
                oplog_set_replaying(log, ((struct rec *)recs->pdata[recs->len - 1])->r.seq);
        *cp = c;
        *out = recs;
        return 0;
}

int reintegrate_run(struct oplog *log, int backing_dirfd, const struct reintegrate_options *opts,
                    struct reintegrate_stats *out)
{
        struct reintegrate_options defaults = REINTEGRATE_OPTIONS_INIT;
        struct ctx c = { 0 };
        GPtrArray *recs = NULL;
        int e, e2;

        if (!log || backing_dirfd < 0)
                return -EINVAL;
        if (opts && opts->version != REINTEGRATE_OPTIONS_VERSION)
                return -EINVAL;
        c.log = log;
        c.root = backing_dirfd;
        c.o = opts ? opts : &defaults;
        c.dry = c.o->dry_run;
        if (c.o->lock)
                pthread_mutex_lock(c.o->lock);
        e = start(&c, &recs);
        if (c.o->lock)
                pthread_mutex_unlock(c.o->lock);
        if (e < 0)
                return e;
        c.run = &c;
        c.recs = recs;
        link_next(recs);
        e = replay(&c);
        if (c.o->lock)
                pthread_mutex_lock(c.o->lock);
        if (!c.dry) {
                /* Also after an error: what the server got is recorded either way. */
                c.upto = 0;
                e2 = flush(&c);
                if (e >= 0)
                        e = e2;
        }
        if (c.o->lock) {
                oplog_set_replaying(log, 0);
                pthread_mutex_unlock(c.o->lock);
        }
        close(c.jfd);
        g_hash_table_destroy(c.intent_of);
        g_hash_table_destroy(c.unsaved);
        g_array_unref(c.marks);
        g_array_unref(c.intents);
        g_ptr_array_unref(c.dirty);
        g_hash_table_destroy(c.virt);
        g_hash_table_destroy(c.carried);
        g_hash_table_destroy(c.dirs);
        g_hash_table_destroy(c.rebound);
        g_hash_table_destroy(c.objs);
        g_ptr_array_unref(recs);
        if (e < 0)
                return e;
        if (out)
                *out = c.st;
        return 0;
}

static void dry_line(void *ud, const struct reintegrate_item *it)
{
        GString *s = ud;

        g_string_append_printf(s, "record=%" PRIu64 " kind=%s outcome=%s", it->record->seq,
                               oplog_kind_to_string(it->record->kind),
                               reintegrate_outcome_to_string(it->outcome));
        if (it->outcome == REINTEGRATE_CONFLICT)
                g_string_append_printf(s, " conflict=%s",
                                       fcache_conflict_kind_to_string(it->conflict));
        g_string_append_printf(s, " path=%s\n", it->path ? it->path : "");
}

int reintegrate_dry_run_text(struct oplog *log, int backing_dirfd, char **out)
{
        struct reintegrate_options o = REINTEGRATE_OPTIONS_INIT;
        struct reintegrate_stats st;
        GString *lines = g_string_new(NULL);
        char *text, *copy;
        int e;

        if (!out) {
                g_string_free(lines, TRUE);
                return -EINVAL;
        }
        o.dry_run = true;
        o.progress = dry_line;
        o.userdata = lines;
        e = reintegrate_run(log, backing_dirfd, &o, &st);
        if (e < 0) {
                g_string_free(lines, TRUE);
                return e;
        }
        text = g_strdup_printf("records=%" PRIu64 "\napply=%" PRIu64 "\nalready=%" PRIu64
                               "\nmerge=%" PRIu64 "\nconflict=%" PRIu64 "\nheld=%" PRIu64
                               "\n%s", st.total, st.applied, st.already, st.merged,
                               st.conflicts, st.held, lines->str);
        g_string_free(lines, TRUE);
        copy = strdup(text);
        g_free(text);
        if (!copy)
                return -ENOMEM;
        *out = copy;
        return 0;
}
