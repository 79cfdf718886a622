/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store.c: the persistent store (see store.h for the layout and the crash
 * rules): objects and their blocks, validation against the backing identity,
 * block-range fill, write-through patching, culling between thresholds.
 *
 * Locking: sobj.lock (one object's blocks and identity) is taken before
 * store.lock (the database, the in-memory object table, the counters).  The
 * culler only ever trylocks object locks, so two fillers culling each
 * other's objects cannot deadlock.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>
#include <sqlite3.h>

#include "store.h"
#include "view-log.h"
#include "view-time.h"

/* Free-space thresholds, in percent of capacity (cachefilesd's defaults). */
#define BRUN_PCT 10
#define BCULL_PCT 7
#define BSTOP_PCT 3

struct store {
        pthread_mutex_t lock;
        char *dir;
        char *fault;            /* why the index was found unusable at start and made anew */
        uint64_t pins_restored; /* pins taken back from the pins file at start */
        int objdir_fd;
        sqlite3 *db;            /* protected by lock */
        GHashTable *objs;       /* protected by lock: ino -> struct sobj (in use) */
        GHashTable *nocache;    /* protected by lock: inos with cacheable off */
        GHashTable *rows;       /* protected by lock: inos that have an objects row */
        uint64_t cache_size, reserve; /* protected by lock */
        uint64_t max_files;     /* protected by lock: 0 = no limit */
        uint64_t used, pinned;  /* protected by lock */
        uint64_t objects;       /* protected by lock */
        uint64_t culled, corrupt; /* protected by lock */
        /* One cull at a time: two would each pass over the object the other
         * holds and take a newer one in its place. */
        pthread_mutex_t cull_lock;
        store_container_fn container_fn;
        void *container_ud;
        store_complete_fn complete_fn;  /* an unpinned object became complete in blocks */
        store_container_fn remove_fn;   /* removes an unpinned container (culled, stale) */
        bool in_batch;          /* protected by lock: a transaction is open */
        /* SQL text -> its statement, prepared once (an open of a file loads
         * its object, a resync notes every mirror file: parsing the SQL
         * each time was most of that) */
        GHashTable *stmts;      /* protected by lock */
        /* inos whose container store_set_container() was given since
         * store_containers_note_begin(), or NULL */
        GHashTable *noted;      /* protected by lock */
        /* After the backing numbered its files anew under a running worker:
         * the inos reached since (their rows are the new numbers' now), and
         * the fact to record once the rest are dropped; NULL when the
         * numbers are sure */
        GHashTable *renumbered; /* protected by lock */
        char *numbering_next;   /* protected by lock */
};

struct sobj {
        uint64_t ino;
        unsigned refs;          /* protected by store.lock */
        pthread_mutex_t lock;
        /* the fields below are protected by lock */
        int64_t size, mtime_ns, ctime_ns;
        uint64_t validated_ns;
        uint64_t persisted_ns;  /* when validated_ns was last written to the database */
        uint64_t use_persisted_ns;      /* when the row's atime (last use) was */
        uint32_t nblk;          /* entries in len[] and crc[] */
        uint32_t *len;          /* 0: block absent */
        uint32_t *crc;
        uint64_t bytes;
        int pin;
        int cfd;                /* content file, or -1 until needed */
        char *container;        /* where the content is instead of blocks, or NULL */
        int ctfd;               /* the container, or -1 until needed */
        bool told_complete;     /* complete_fn was told since the content last changed */
        bool own;               /* the container is the store's own (store_make_container) */
};

/* Bytes of local disk the object's content takes (counted in used). */
static uint64_t held(const struct sobj *o)
{
        return o->container ? (uint64_t)o->size : o->bytes;
}

static bool has_content(const struct sobj *o)
{
        return o->container || o->bytes;
}

static int db_exec(struct store *s, const char *sql)
{
        char *msg = NULL;
        int r = sqlite3_exec(s->db, sql, NULL, NULL, &msg);

        if (r != SQLITE_OK) {
                log_error("Failed to run '%s' on the store database: %s", sql,
                          msg ? msg : sqlite3_errstr(r));
                sqlite3_free(msg);
                return -EIO;
        }
        return 0;
}

/* The statement of @sql, prepared the first time, reset and unbound (store.lock
 * held); stmt_done() when stepped: a statement left stepping keeps a read
 * transaction open. */
static sqlite3_stmt *stmt_of(struct store *s, const char *sql)
{
        sqlite3_stmt *st = g_hash_table_lookup(s->stmts, sql);

        if (st) {
                sqlite3_reset(st);
                sqlite3_clear_bindings(st);
                return st;
        }
        if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) !=
            SQLITE_OK) {
                log_error("Failed to prepare '%s': %s", sql, sqlite3_errmsg(s->db));
                sqlite3_finalize(st);
                return NULL;
        }
        g_hash_table_insert(s->stmts, g_strdup(sql), st);
        return st;
}

static void stmt_free(gpointer st)
{
        sqlite3_finalize(st);
}

static void stmt_done(sqlite3_stmt *st)
{
        sqlite3_reset(st);
}

/* Before the database closes: a prepared statement keeps it open. */
static void stmts_forget(struct store *s)
{
        if (s->stmts)
                g_hash_table_remove_all(s->stmts);
}

/* Binds up to 6 int64 arguments to sql's statement, steps once. Returns
 * SQLITE_ROW/SQLITE_DONE as 1/0 with *stmt left for a row (stmt_done() it),
 * or -EIO. */
static int db_run(struct store *s, sqlite3_stmt **out, const char *sql, int n, ...)
{
        sqlite3_stmt *st = stmt_of(s, sql);
        va_list ap;
        int r;

        if (!st)
                return -EIO;
        va_start(ap, n);
        for (int i = 1; i <= n; i++)
                sqlite3_bind_int64(st, i, va_arg(ap, int64_t));
        va_end(ap);
        r = sqlite3_step(st);
        if (r != SQLITE_ROW && r != SQLITE_DONE) {
                log_error("Failed to run '%s': %s", sql, sqlite3_errmsg(s->db));
                stmt_done(st);
                return -EIO;
        }
        if (out && r == SQLITE_ROW) {
                *out = st;
                return 1;
        }
        stmt_done(st);
        return r == SQLITE_ROW;
}

static uint64_t db_scalar(struct store *s, const char *sql)
{
        sqlite3_stmt *st = NULL;
        uint64_t v = 0;

        if (db_run(s, &st, sql, 0) == 1) {
                v = (uint64_t)sqlite3_column_int64(st, 0);
                stmt_done(st);
        }
        return v;
}

static const char schema[] =
        "PRAGMA journal_mode=WAL;"
        "PRAGMA synchronous=NORMAL;"
        "CREATE TABLE IF NOT EXISTS objects("
        " ino INTEGER PRIMARY KEY, size INTEGER NOT NULL DEFAULT 0,"
        " mtime INTEGER NOT NULL DEFAULT 0, ctime INTEGER NOT NULL DEFAULT 0,"
        " validated INTEGER NOT NULL DEFAULT 0, atime INTEGER NOT NULL DEFAULT 0,"
        " pin INTEGER NOT NULL DEFAULT -1, nocache INTEGER NOT NULL DEFAULT 0);"
        "CREATE TABLE IF NOT EXISTS blocks("
        " ino INTEGER NOT NULL, idx INTEGER NOT NULL, len INTEGER NOT NULL,"
        " crc INTEGER NOT NULL, PRIMARY KEY(ino, idx)) WITHOUT ROWID;"
        "CREATE TABLE IF NOT EXISTS pins(path TEXT PRIMARY KEY, prio INTEGER NOT NULL);"
        "CREATE TABLE IF NOT EXISTS facts(name TEXT PRIMARY KEY);"
        "CREATE INDEX IF NOT EXISTS objects_lru ON objects(pin, atime);";

/*
 * The rows' times (validated, and atime, which orders culling) are
 * wall-clock nanoseconds (CLOCK_REALTIME), so that the cull's order between
 * rows used before a reboot and after it is kept; in memory they are
 * now_ns()'s (monotonic, as the leases are), converted at the database.
 * A store whose rows are on the monotonic clock (made before this fact)
 * has their validation times cleared once (each copy is compared with the
 * backing at its first use) and keeps their atimes: small numbers, older
 * than any wall-clock row, in their own order.
 */
#define FACT_WALL_CLOCK "row times on the wall clock"

static int64_t wall_now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return timespec_ns(&ts);
}

/* The wall-clock time of now_ns()'s @t (0 stays 0: never). */
static int64_t row_time(uint64_t t)
{
        uint64_t now = now_ns();

        if (!t)
                return 0;
        return wall_now() - (int64_t)(now > t ? now - t : 0);
}

/* now_ns()'s time of the row's wall-clock @wall; 0 (never) when it is not
 * a time of this boot that has passed (a clock set back, another boot). */
static uint64_t mono_of_row(int64_t wall)
{
        int64_t ago = wall_now() - wall;
        uint64_t now = now_ns();

        if (wall <= 0 || ago < 0 || (uint64_t)ago >= now)
                return 0;
        return now - (uint64_t)ago;
}

static void rows_on_wall_clock(struct store *s)
{
        int r;

        if (db_scalar(s, "SELECT COUNT(*) FROM facts WHERE name='" FACT_WALL_CLOCK "'"))
                return;
        r = db_exec(s, "BEGIN IMMEDIATE;"
                    "UPDATE objects SET validated=0 WHERE validated!=0;"
                    "INSERT OR IGNORE INTO facts(name) VALUES('" FACT_WALL_CLOCK "');"
                    "COMMIT;");
        if (r < 0) {
                /* mono_of_row() reads such times as none anyway: tried again next start. */
                db_exec(s, "ROLLBACK");
                log_warn("Failed to mark the store's row times as wall-clock ones, ignoring");
        }
}

/* A store made before a column (containers, own containers) lacks it. */
static int add_column(struct store *s, const char *name, const char *decl)
{
        sqlite3_stmt *st;
        char *sql = g_strdup_printf("SELECT %s FROM objects LIMIT 0", name);
        int r;

        if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK) {
                sqlite3_finalize(st);
                g_free(sql);
                return 0;
        }
        g_free(sql);
        sql = g_strdup_printf("ALTER TABLE objects ADD COLUMN %s %s", name, decl);
        r = db_exec(s, sql);
        g_free(sql);
        return r;
}

static int add_container_column(struct store *s)
{
        int r = add_column(s, "container", "TEXT");

        /* own: the container was the store's content file, moved into the
         * mirror (an unpinned file cached whole), not a copy the mirror made. */
        return r < 0 ? r : add_column(s, "own", "INTEGER NOT NULL DEFAULT 0");
}

/* Opens the index at @path: -EUCLEAN when it is not a database or is damaged. */
static int open_index(struct store *s, const char *path)
{
        int r = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                SQLITE_OPEN_NOMUTEX, NULL);

        if (r != SQLITE_OK) {
                log_error("Failed to open the store database %s: %s", path,
                          s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(r));
                return -EIO;
        }
        sqlite3_busy_timeout(s->db, 5000);
        r = db_exec(s, schema);
        if (r >= 0)
                r = add_container_column(s);
        if (r >= 0)
                rows_on_wall_clock(s);
        if (r < 0) {
                int code = sqlite3_errcode(s->db);

                if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT) {
                        free(s->fault);
                        s->fault = g_strdup_printf("%s: %s", path, sqlite3_errstr(code));
                        return -EUCLEAN;
                }
        }
        return r;
}

/* Empties objects/XX/ (the block files, a cache that no index row describes now). */
static int remove_cached_blocks(struct store *s)
{
        int dfd = dup(s->objdir_fd);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        struct dirent *de;

        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                return -errno;
        }
        while ((de = readdir(d))) {
                int sub;
                DIR *sd;
                struct dirent *e;

                if (de->d_name[0] == '.')
                        continue;
                sub = openat(s->objdir_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                             O_CLOEXEC);
                sd = sub >= 0 ? fdopendir(sub) : NULL;
                if (!sd) {
                        if (sub >= 0)
                                close(sub);
                        continue;
                }
                while ((e = readdir(sd)))
                        if (e->d_name[0] != '.')
                                (void)unlinkat(sub, e->d_name, 0);
                closedir(sd);
        }
        closedir(d);
        return 0;
}

/*
 * A damaged index is kept for diagnosis as store.db.corrupt-TIME (with its
 * -wal and -shm) and the cache starts empty: the blocks under objects/ are
 * a cache of the backing and go, the pins come back from the pins file
 * (store-pins.c; query state says so); the mirror, what is served offline,
 * is untouched.
 */
static int index_set_aside(struct store *s, const char *path)
{
        static const char *const suffix[] = { "", "-wal", "-shm" };
        time_t now = time(NULL);

        stmts_forget(s);
        sqlite3_close(s->db);
        s->db = NULL;
        log_error("The store database is unusable (%s): kept as %s.corrupt-%lld, starting with "
                  "an empty cache and the pins of the pins file", s->fault, path,
                  (long long)now);
        for (size_t i = 0; i < G_N_ELEMENTS(suffix); i++) {
                char *from = g_strdup_printf("%s%s", path, suffix[i]);
                char *to = g_strdup_printf("%s.corrupt-%lld%s", path, (long long)now, suffix[i]);
                int e = rename(from, to) < 0 && errno != ENOENT ? -errno : 0;

                g_free(from);
                g_free(to);
                if (e < 0)
                        return e;
        }
        return remove_cached_blocks(s);
}

static int restore_pins(struct store *s);

const char *store_fault(struct store *s)
{
        return s->fault;
}

int store_open(struct store **out, const char *dir, uint64_t cache_size, uint64_t reserve,
               uint64_t max_files)
{
        struct store *s = calloc(1, sizeof(*s));
        char *path = NULL;
        int r;

        if (!s)
                return -ENOMEM;
        pthread_mutex_init(&s->lock, NULL);
        pthread_mutex_init(&s->cull_lock, NULL);
        s->objdir_fd = -1;
        s->cache_size = cache_size;
        s->reserve = reserve;
        s->max_files = max_files;
        s->dir = strdup(dir);
        s->objs = g_hash_table_new(g_int64_hash, g_int64_equal);
        s->stmts = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, stmt_free);
        s->nocache = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
        s->rows = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
        if (!s->dir || !s->objs || !s->nocache || !s->rows) {
                r = -ENOMEM;
                goto fail;
        }
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                r = -errno;
                log_error("Failed to create CacheDir %s: %m", dir);
                goto fail;
        }
        if (asprintf(&path, "%s/objects", dir) < 0) {
                path = NULL;
                r = -ENOMEM;
                goto fail;
        }
        if (mkdir(path, 0700) < 0 && errno != EEXIST) {
                r = -errno;
                log_error("Failed to create %s: %m", path);
                goto fail;
        }
        s->objdir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (s->objdir_fd < 0) {
                r = -errno;
                log_error("Failed to open %s: %m", path);
                goto fail;
        }
        free(path);
        if (asprintf(&path, "%s/store.db", dir) < 0) {
                path = NULL;
                r = -ENOMEM;
                goto fail;
        }
        /* A deleted index leaves block files no row describes: they go. */
        if (access(path, F_OK) < 0 && errno == ENOENT)
                remove_cached_blocks(s);
        r = open_index(s, path);
        if (r == -EUCLEAN) {
                r = index_set_aside(s, path);
                if (r >= 0)
                        r = open_index(s, path);
        }
        if (r >= 0)
                r = restore_pins(s);
        if (r < 0)
                goto fail;
        /* Counters are derived from the committed rows, never trusted from a
         * previous run, so a kill -9 at any point leaves them right. */
        s->used = db_scalar(s, "SELECT COALESCE(SUM(len),0) FROM blocks") +
                  db_scalar(s, "SELECT COALESCE(SUM(size),0) FROM objects"
                            " WHERE container IS NOT NULL");
        s->pinned = db_scalar(s, "SELECT COALESCE(SUM(b.len),0) FROM blocks b JOIN objects o"
                              " ON o.ino=b.ino WHERE o.pin>=0") +
                    db_scalar(s, "SELECT COALESCE(SUM(size),0) FROM objects"
                              " WHERE container IS NOT NULL AND pin>=0");
        s->objects = db_scalar(s, "SELECT COUNT(*) FROM (SELECT ino FROM blocks UNION"
                               " SELECT ino FROM objects WHERE container IS NOT NULL)");
        {
                sqlite3_stmt *st;

                /* Which inodes have rows, so that the write path of a file the
                 * store does not know costs no query. */
                if (sqlite3_prepare_v2(s->db, "SELECT ino, nocache FROM objects", -1,
                                       &st, NULL) == SQLITE_OK) {
                        while (sqlite3_step(st) == SQLITE_ROW) {
                                gint64 *k = g_new(gint64, 1);

                                *k = sqlite3_column_int64(st, 0);
                                if (sqlite3_column_int(st, 1))
                                        g_hash_table_add(s->nocache, g_memdup2(k, sizeof(*k)));
                                g_hash_table_add(s->rows, k);
                        }
                        sqlite3_finalize(st);
                }
        }
        free(path);
        *out = s;
        return 0;
fail:
        free(path);
        store_close(s);
        return r;
}

void store_close(struct store *s)
{
        if (!s)
                return;
        if (s->in_batch)
                db_exec(s, "COMMIT");
        if (s->stmts)
                g_hash_table_destroy(s->stmts);
        if (s->noted)
                g_hash_table_destroy(s->noted);
        if (s->renumbered)
                g_hash_table_destroy(s->renumbered);
        free(s->numbering_next);
        if (s->db)
                sqlite3_close(s->db);
        if (s->objdir_fd >= 0)
                close(s->objdir_fd);
        if (s->objs)
                g_hash_table_destroy(s->objs);
        if (s->nocache)
                g_hash_table_destroy(s->nocache);
        if (s->rows)
                g_hash_table_destroy(s->rows);
        free(s->dir);
        free(s->fault);
        pthread_mutex_destroy(&s->lock);
        pthread_mutex_destroy(&s->cull_lock);
        free(s);
}

static void thresholds(const struct store *s, struct store_stats *st)
{
        st->cache_size = s->cache_size;
        st->reserve = s->reserve;
        st->capacity = s->cache_size > s->reserve ? s->cache_size - s->reserve : 0;
        st->brun = st->capacity / 100 * BRUN_PCT;
        st->bcull = st->capacity / 100 * BCULL_PCT;
        st->bstop = st->capacity / 100 * BSTOP_PCT;
        st->used = s->used;
        st->free = st->capacity > s->used ? st->capacity - s->used : 0;
        st->objects = s->objects;
        st->files_limit = s->max_files;
        st->files_free = s->max_files > s->objects ? s->max_files - s->objects : 0;
        /* the same percentages on the number of objects, kept apart */
        st->fstop = s->max_files / 100 * BSTOP_PCT;
        st->fcull = s->max_files / 100 * BCULL_PCT;
        st->frun = s->max_files / 100 * BRUN_PCT;
        if (st->fcull <= st->fstop)
                st->fcull = st->fstop + 1;
        if (st->frun <= st->fcull)
                st->frun = st->fcull + 1;
}

/* Culling is needed when free space or free files fall below bcull/fcull... */
static bool below_cull(const struct store_stats *st, uint64_t len, bool new_obj)
{
        return st->free < st->bcull + len ||
               (st->files_limit && st->files_free < st->fcull + (new_obj ? 1 : 0));
}

/* ...and goes on until both are back above brun/frun. */
static bool above_run(const struct store_stats *st)
{
        return st->free >= st->brun && (!st->files_limit || st->files_free >= st->frun);
}

void store_get_stats(struct store *s, struct store_stats *st)
{
        pthread_mutex_lock(&s->lock);
        thresholds(s, st);
        st->pinned = s->pinned;
        st->objects = s->objects;
        st->culled = s->culled;
        st->corrupt = s->corrupt;
        pthread_mutex_unlock(&s->lock);
}

int store_set_limits(struct store *s, uint64_t cache_size, uint64_t reserve)
{
        if (reserve >= cache_size)
                return -EINVAL;
        pthread_mutex_lock(&s->lock);
        if (cache_size - reserve < s->pinned) {
                pthread_mutex_unlock(&s->lock);
                return -ENOSPC;
        }
        s->cache_size = cache_size;
        s->reserve = reserve;
        pthread_mutex_unlock(&s->lock);
        store_cull(s);
        return 0;
}

static int content_name(uint64_t ino, char *buf, size_t len)
{
        return snprintf(buf, len, "%02x/%" PRIu64, (unsigned)(ino & 0xff), ino);
}

static int content_fd(struct store *s, struct sobj *o)
{
        char name[64], dir[8];

        if (o->cfd >= 0)
                return o->cfd;
        snprintf(dir, sizeof(dir), "%02x", (unsigned)(o->ino & 0xff));
        if (mkdirat(s->objdir_fd, dir, 0700) < 0 && errno != EEXIST)
                return -errno;
        content_name(o->ino, name, sizeof(name));
        o->cfd = openat(s->objdir_fd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (o->cfd < 0)
                return -errno;
        return o->cfd;
}

static int grow(struct sobj *o, uint32_t nblk)
{
        uint32_t *l, *c;

        if (nblk <= o->nblk)
                return 0;
        l = realloc(o->len, nblk * sizeof(*l));
        if (!l)
                return -ENOMEM;
        o->len = l;
        c = realloc(o->crc, nblk * sizeof(*c));
        if (!c)
                return -ENOMEM;
        o->crc = c;
        memset(o->len + o->nblk, 0, (nblk - o->nblk) * sizeof(*l));
        memset(o->crc + o->nblk, 0, (nblk - o->nblk) * sizeof(*c));
        o->nblk = nblk;
        return 0;
}

/* sql's statement bound to ino. */
static sqlite3_stmt *ino_stmt(struct store *s, const char *sql, uint64_t ino)
{
        sqlite3_stmt *st = stmt_of(s, sql);

        if (st)
                sqlite3_bind_int64(st, 1, (int64_t)ino);
        return st;
}

/* Loads o's row and blocks.  Called with store.lock held. Returns 1 if a row
 * exists, 0 if not. */
static int load_locked(struct store *s, struct sobj *o)
{
        sqlite3_stmt *st;
        int r;

        st = ino_stmt(s, "SELECT size, mtime, ctime, validated, pin, container,"
                      " own FROM objects WHERE ino=?", o->ino);
        if (!st)
                return -EIO;
        r = sqlite3_step(st);
        if (r != SQLITE_ROW) {
                stmt_done(st);
                if (r == SQLITE_DONE)
                        return 0;
                log_error("Failed to load inode %" PRIu64 " from the store database: %s",
                          o->ino, sqlite3_errmsg(s->db));
                return -EIO;
        }
        o->size = sqlite3_column_int64(st, 0);
        o->mtime_ns = sqlite3_column_int64(st, 1);
        o->ctime_ns = sqlite3_column_int64(st, 2);
        o->validated_ns = mono_of_row(sqlite3_column_int64(st, 3));
        o->persisted_ns = o->use_persisted_ns = o->validated_ns;
        o->pin = sqlite3_column_int(st, 4);
        if (sqlite3_column_type(st, 5) == SQLITE_TEXT)
                o->container = g_strdup((const char *)sqlite3_column_text(st, 5));
        o->own = o->container && sqlite3_column_int(st, 6);
        /* Done now: a statement left stepping keeps a read transaction open. */
        stmt_done(st);
        st = ino_stmt(s, "SELECT idx, len, crc FROM blocks WHERE ino=?", o->ino);
        if (!st)
                return -EIO;
        while (sqlite3_step(st) == SQLITE_ROW) {
                int64_t idx = sqlite3_column_int64(st, 0);
                uint32_t len = (uint32_t)sqlite3_column_int64(st, 1);

                if (idx < 0 || idx >= UINT32_MAX || len > STORE_BLOCK ||
                    grow(o, (uint32_t)idx + 1) < 0)
                        continue;
                o->len[idx] = len;
                o->crc[idx] = (uint32_t)sqlite3_column_int64(st, 2);
                o->bytes += len;
        }
        sqlite3_reset(st);
        return 1;
}

static struct sobj *obj_new(uint64_t ino)
{
        struct sobj *o = calloc(1, sizeof(*o));

        if (!o)
                return NULL;
        o->ino = ino;
        o->pin = -1;
        o->cfd = -1;
        o->ctfd = -1;
        pthread_mutex_init(&o->lock, NULL);
        return o;
}

static void obj_free(struct sobj *o)
{
        if (o->cfd >= 0)
                close(o->cfd);
        if (o->ctfd >= 0)
                close(o->ctfd);
        g_free(o->container);
        free(o->len);
        free(o->crc);
        pthread_mutex_destroy(&o->lock);
        free(o);
}

/* Finds or loads the in-memory object; store.lock held. *exists: row exists. */
static int obj_ref_locked(struct store *s, uint64_t ino, bool create, struct sobj **out)
{
        gint64 key = (gint64)ino;
        struct sobj *o = g_hash_table_lookup(s->objs, &key);
        int r;

        if (o) {
                o->refs++;
                *out = o;
                return 1;
        }
        if (!create && !g_hash_table_contains(s->rows, &key))
                return -ENOENT;
        o = obj_new(ino);
        if (!o)
                return -ENOMEM;
        r = load_locked(s, o);
        if (r < 0 || (r == 0 && !create)) {
                obj_free(o);
                return r < 0 ? r : -ENOENT;
        }
        if (r == 0) {
                r = db_run(s, NULL, "INSERT INTO objects(ino) VALUES(?)", 1, (int64_t)ino);
                if (r < 0) {
                        obj_free(o);
                        return r;
                }
                g_hash_table_add(s->rows, g_memdup2(&key, sizeof(key)));
        }
        o->refs = 1;
        g_hash_table_insert(s->objs, &o->ino, o);
        *out = o;
        return r;
}

void store_obj_ref(struct store *s, struct sobj *o)
{
        pthread_mutex_lock(&s->lock);
        o->refs++;
        pthread_mutex_unlock(&s->lock);
}

int store_obj_pin(struct sobj *o)
{
        int pin;

        pthread_mutex_lock(&o->lock);
        pin = o->pin;
        pthread_mutex_unlock(&o->lock);
        return pin;
}

void store_obj_put(struct store *s, struct sobj *o)
{
        if (!o)
                return;
        pthread_mutex_lock(&s->lock);
        if (--o->refs == 0) {
                g_hash_table_remove(s->objs, &o->ino);
                obj_free(o);
        }
        pthread_mutex_unlock(&s->lock);
}

void store_obj_close_idle(struct store *s, struct sobj *o, unsigned keepers)
{
        bool sole;

        /* Every use of the descriptors holds o->lock: taken first. */
        pthread_mutex_lock(&o->lock);
        pthread_mutex_lock(&s->lock);
        sole = o->refs <= keepers;
        pthread_mutex_unlock(&s->lock);
        if (sole && o->cfd >= 0) {
                close(o->cfd);
                o->cfd = -1;
        }
        if (sole && o->ctfd >= 0) {
                close(o->ctfd);
                o->ctfd = -1;
        }
        pthread_mutex_unlock(&o->lock);
}

static void identity_of(const struct sobj *o, struct store_identity *id)
{
        id->ino = o->ino;
        id->size = o->size;
        id->mtime_ns = o->mtime_ns;
        id->ctime_ns = o->ctime_ns;
        id->path = o->container;
}

/* The container of an unpinned object is the store's own: it goes with the
 * content (culled, changed on the backing, written through the view).  The
 * remove function removes it only while it still holds o's identity, so a
 * file the mirror put there since (a pin's copy, an offline edit) stays. */
static void remove_own_container(struct store *s, struct sobj *o)
{
        struct store_identity id;

        if (!o->container || !o->own || o->pin >= 0 || !s->remove_fn)
                return;
        identity_of(o, &id);
        if (s->remove_fn(s->container_ud, &id) == 0)
                log_debug("Removed the container %s of unpinned inode %" PRIu64,
                          o->container, o->ino);
}

/* Drops every block of o, and forgets its container; @remove: an unpinned
 * one is removed too (else it is left to the mirror); o->lock held, store.lock not. */
static int drop_content_as(struct store *s, struct sobj *o, bool remove)
{
        uint64_t h = held(o);
        char name[64];
        int r;

        o->told_complete = false;
        if (!o->bytes && !o->container && o->cfd < 0 && !o->nblk)
                return 0;       /* no row, no content file of ours */
        if (remove)
                remove_own_container(s, o);
        pthread_mutex_lock(&s->lock);
        r = db_run(s, NULL, "DELETE FROM blocks WHERE ino=?", 1, (int64_t)o->ino);
        if (r >= 0 && o->container)
                r = db_run(s, NULL, "UPDATE objects SET container=NULL, own=0 WHERE ino=?", 1,
                           (int64_t)o->ino);
        if (r >= 0) {
                s->used -= h < s->used ? h : s->used;
                if (o->pin >= 0)
                        s->pinned -= h < s->pinned ? h : s->pinned;
                if (has_content(o) && s->objects)
                        s->objects--;
        }
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
                return r;
        g_clear_pointer(&o->container, g_free);
        o->own = false;
        if (o->ctfd >= 0) {
                close(o->ctfd);
                o->ctfd = -1;
        }
        /* Rows go first: content without a row is never served. */
        if (o->cfd >= 0) {
                close(o->cfd);
                o->cfd = -1;
        }
        content_name(o->ino, name, sizeof(name));
        if (unlinkat(s->objdir_fd, name, 0) < 0 && errno != ENOENT)
                log_warn("Failed to remove store file %s: %m, ignoring", name);
        if (o->nblk) {
                memset(o->len, 0, o->nblk * sizeof(*o->len));
                memset(o->crc, 0, o->nblk * sizeof(*o->crc));
        }
        o->bytes = 0;
        return 0;
}

static int drop_content(struct store *s, struct sobj *o)
{
        return drop_content_as(s, o, true);
}

/* The object of @ino as its row has it (obj_ref_locked(), store.lock taken
 * here): for the store's own passes over its rows.  @unsure (may be NULL):
 * whether the numbers were unsure then. */
static int row_ref(struct store *s, uint64_t ino, bool create, struct sobj **out, bool *unsure)
{
        int r;

        pthread_mutex_lock(&s->lock);
        r = obj_ref_locked(s, ino, create, out);
        if (unsure)
                *unsure = s->renumbered != NULL;
        pthread_mutex_unlock(&s->lock);
        return r;
}

/* While the numbers are unsure: ino's row is the new number's from now on.
 * True when it was not yet (reached for the first time).  store.lock held. */
static bool number_taken_locked(struct store *s, uint64_t ino)
{
        gint64 key = (gint64)ino;

        if (!s->renumbered || g_hash_table_contains(s->renumbered, &key))
                return false;
        g_hash_table_add(s->renumbered, g_memdup2(&key, sizeof(key)));
        return true;
}

static bool number_taken(struct store *s, uint64_t ino)
{
        bool first;

        pthread_mutex_lock(&s->lock);
        first = number_taken_locked(s, ino);
        pthread_mutex_unlock(&s->lock);
        return first;
}

/*
 * Row o is reached by a number the backing gave anew (mounted again under a
 * running worker): its content, identity and pin mark were another file's,
 * maybe of the same size and times.  The content goes (an unpinned own
 * container with it; a pinned one is left to the mirror, whose resync finds
 * its file again by name), the identity becomes one no file has, and the
 * pin mark goes (the pin walk after the resync marks the pinned files by
 * their new numbers).  o->lock held.
 */
static void forget_renumbered(struct store *s, struct sobj *o)
{
        int r = drop_content(s, o);

        o->size = -1;
        o->mtime_ns = o->ctime_ns = 0;
        o->validated_ns = o->persisted_ns = o->use_persisted_ns = 0;
        if (r >= 0) {
                pthread_mutex_lock(&s->lock);
                r = db_run(s, NULL, "UPDATE objects SET size=-1, mtime=0, ctime=0, validated=0,"
                           " pin=-1 WHERE ino=?", 1, (int64_t)o->ino);
                if (r >= 0)
                        o->pin = -1;    /* no content left: the counts stay */
                pthread_mutex_unlock(&s->lock);
        }
        if (r < 0)
                log_warn("Failed to forget the store's copy of renumbered inode %" PRIu64 ": %s",
                         o->ino, strerror(-r));
}

bool store_numbers_unsure_now(struct store *s)
{
        bool r;

        pthread_mutex_lock(&s->lock);
        r = s->renumbered != NULL;
        pthread_mutex_unlock(&s->lock);
        return r;
}

/* The first reach of o by its number while the numbers are unsure forgets
 * its row; a user of o meanwhile waits on o->lock. */
static void number_reached(struct store *s, struct sobj *o)
{
        pthread_mutex_lock(&o->lock);
        if (number_taken(s, o->ino))
                forget_renumbered(s, o);
        pthread_mutex_unlock(&o->lock);
}

static void number_check(struct store *s, struct sobj *o)
{
        if (store_numbers_unsure_now(s))
                number_reached(s, o);
}

/* The object of @ino for a caller that reached it by the backing's number. */
static int obj_ref(struct store *s, uint64_t ino, bool create, struct sobj **out)
{
        bool unsure;
        int r = row_ref(s, ino, create, out, &unsure);

        if (!unsure)
                return r;
        if (r > 0)
                number_reached(s, *out);
        else if (r == 0)
                number_taken(s, ino);   /* a new row: the new number's already */
        return r;
}

#define IDENTITY_PERSIST_NS (60 * 1000000000ULL)

/* Records a fresh stat of the backing; @used: by an open, a read or a
 * write through the view.  Only a use dates the row's atime, which orders
 * culling: a background revalidation or a stat is not one. */
static int record_identity(struct store *s, struct sobj *o, const struct stat *st, uint64_t now,
                           bool used)
{
        bool same = o->size == st->st_size && o->mtime_ns == timespec_ns(&st->st_mtim) &&
                    o->ctime_ns == timespec_ns(&st->st_ctim);
        int r;

        o->size = st->st_size;
        o->mtime_ns = timespec_ns(&st->st_mtim);
        o->ctime_ns = timespec_ns(&st->st_ctim);
        o->validated_ns = now;
        /* An unchanged identity is written back at most once a minute: the
         * row's validation time only makes a restarted worker revalidate
         * sooner, and its atime orders culling (a minute's precision is
         * plenty), so an open of an unchanged file writes nothing. */
        used = used && (!o->use_persisted_ns ||
                        now - o->use_persisted_ns >= IDENTITY_PERSIST_NS);
        if (same && !used && now - o->persisted_ns < IDENTITY_PERSIST_NS)
                return 0;
        o->persisted_ns = now;
        pthread_mutex_lock(&s->lock);
        if (used) {
                o->use_persisted_ns = now;
                r = db_run(s, NULL, "UPDATE objects SET size=?, mtime=?, ctime=?, validated=?,"
                           " atime=? WHERE ino=?", 6, (int64_t)o->size, o->mtime_ns,
                           o->ctime_ns, row_time(now), row_time(now), (int64_t)o->ino);
        } else {
                r = db_run(s, NULL, "UPDATE objects SET size=?, mtime=?, ctime=?, validated=?"
                           " WHERE ino=?", 5, (int64_t)o->size, o->mtime_ns, o->ctime_ns,
                           row_time(now), (int64_t)o->ino);
        }
        pthread_mutex_unlock(&s->lock);
        return r < 0 ? r : 0;
}

static bool same_identity(const struct sobj *o, const struct stat *st)
{
        return o->size == st->st_size && o->mtime_ns == timespec_ns(&st->st_mtim) &&
               o->ctime_ns == timespec_ns(&st->st_ctim);
}

int store_obj_revalidate(struct store *s, struct sobj *o, const struct stat *st, bool used,
                         bool *unchanged)
{
        uint64_t now = now_ns();
        bool same;
        int r = 0;

        pthread_mutex_lock(&o->lock);
        same = same_identity(o, st);
        if (!same) {
                if (o->bytes)
                        log_debug("Backing inode %" PRIu64 " changed, dropping its store copy",
                                  o->ino);
                r = drop_content(s, o);
        }
        if (r >= 0)
                r = record_identity(s, o, st, now, used);
        pthread_mutex_unlock(&o->lock);
        if (unchanged)
                *unchanged = same;
        return r;
}

static void note_if_complete(struct store *s, struct sobj *o);

void store_obj_opened_ro(struct store *s, struct sobj *o)
{
        pthread_mutex_lock(&o->lock);
        note_if_complete(s, o);
        pthread_mutex_unlock(&o->lock);
}

void store_complete_untold(struct store *s, uint64_t ino)
{
        struct sobj *o;

        /* An object not in memory is told afresh once it is loaded again. */
        if (store_obj_find_loaded(s, ino, &o) < 0)
                return;
        pthread_mutex_lock(&o->lock);
        o->told_complete = false;
        pthread_mutex_unlock(&o->lock);
        store_obj_put(s, o);
}

int store_obj_get(struct store *s, const struct stat *st, bool create, uint64_t lease_ns,
                  bool *unchanged, struct sobj **out)
{
        struct sobj *o;
        int r;

        r = obj_ref(s, st->st_ino, create, &o);
        if (r < 0)
                return r;
        if (lease_ns && o->validated_ns && !store_obj_stale(o, now_ns(), lease_ns)) {
                /* Valid within the lease: trusted without asking the backing. */
                if (unchanged)
                        *unchanged = true;
                *out = o;
                return 0;
        }
        r = store_obj_revalidate(s, o, st, true, unchanged);
        if (r < 0) {
                store_obj_put(s, o);
                return r;
        }
        *out = o;
        return 0;
}

int store_obj_find_loaded(struct store *s, uint64_t ino, struct sobj **out)
{
        gint64 key = (gint64)ino;
        struct sobj *o;

        pthread_mutex_lock(&s->lock);
        o = g_hash_table_lookup(s->objs, &key);
        if (o)
                o->refs++;
        pthread_mutex_unlock(&s->lock);
        if (!o)
                return -ENOENT;
        number_check(s, o);
        *out = o;
        return 0;
}

int store_obj_find(struct store *s, uint64_t ino, struct sobj **out)
{
        int r;

        r = obj_ref(s, ino, false, out);
        return r < 0 ? r : 0;
}

bool store_obj_stale(struct sobj *o, uint64_t now, uint64_t lease_ns)
{
        uint64_t v = __atomic_load_n(&o->validated_ns, __ATOMIC_RELAXED);

        return now - v > lease_ns;
}

/* Room for len more bytes?  Culls first when below bcull. */
static bool has_room(struct store *s, uint64_t len, bool new_obj)
{
        struct store_stats st;

        pthread_mutex_lock(&s->lock);
        thresholds(s, &st);
        pthread_mutex_unlock(&s->lock);
        if (below_cull(&st, len, new_obj))
                store_cull(s);
        pthread_mutex_lock(&s->lock);
        thresholds(s, &st);
        pthread_mutex_unlock(&s->lock);
        return st.free >= st.bstop + len &&
               (!new_obj || !st.files_limit || st.files_free >= st.fstop + 1);
}

static int commit_block(struct store *s, struct sobj *o, uint32_t idx, uint32_t len,
                        uint32_t crc)
{
        uint32_t old = o->len[idx];
        int r;

        pthread_mutex_lock(&s->lock);
        r = db_run(s, NULL, "INSERT OR REPLACE INTO blocks(ino, idx, len, crc) VALUES(?,?,?,?)",
                   4, (int64_t)o->ino, (int64_t)idx, (int64_t)len, (int64_t)crc);
        if (r >= 0) {
                s->used += len;
                s->used -= old < s->used ? old : s->used;
                if (o->pin >= 0) {
                        s->pinned += len;
                        s->pinned -= old < s->pinned ? old : s->pinned;
                }
                if (!o->bytes && len)
                        s->objects++;
        }
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
                return r;
        o->bytes = o->bytes - old + len;
        o->len[idx] = len;
        o->crc[idx] = crc;
        return 0;
}

static int uncommit_block(struct store *s, struct sobj *o, uint32_t idx)
{
        uint32_t old = o->len[idx];
        int r;

        if (!old)
                return 0;
        pthread_mutex_lock(&s->lock);
        r = db_run(s, NULL, "DELETE FROM blocks WHERE ino=? AND idx=?", 2, (int64_t)o->ino,
                   (int64_t)idx);
        if (r >= 0) {
                s->used -= old < s->used ? old : s->used;
                if (o->pin >= 0)
                        s->pinned -= old < s->pinned ? old : s->pinned;
                if (o->bytes == old && s->objects)
                        s->objects--;
        }
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
                return r;
        o->bytes -= old;
        o->len[idx] = 0;
        o->crc[idx] = 0;
        return 0;
}

/* Expected length of block idx for the recorded size. */
static uint32_t expect_len(const struct sobj *o, uint32_t idx)
{
        int64_t start = (int64_t)idx * STORE_BLOCK;

        if (o->size <= start)
                return 0;
        return o->size - start >= STORE_BLOCK ? STORE_BLOCK : (uint32_t)(o->size - start);
}

/* Reads block idx from the store into blk; o->lock held.  Returns its
 * length, 0 if absent or corrupt (then dropped), -errno. */
static ssize_t read_present(struct store *s, struct sobj *o, uint32_t idx, char *blk)
{
        uint32_t want = idx < o->nblk ? o->len[idx] : 0;
        ssize_t n;
        int fd;

        if (!want || want < expect_len(o, idx))
                return 0;
        fd = content_fd(s, o);
        if (fd < 0)
                return 0;
        n = pread(fd, blk, want, (off_t)idx * STORE_BLOCK);
        if (n == (ssize_t)want && store_crc32c(0, blk, want) == o->crc[idx])
                return n;
        log_warn("Store block %" PRIu32 " of inode %" PRIu64 " is %s, fetching it again",
                 idx, o->ino, n < 0 ? "unreadable" : "corrupt");
        pthread_mutex_lock(&s->lock);
        s->corrupt++;
        pthread_mutex_unlock(&s->lock);
        uncommit_block(s, o, idx);
        return 0;
}

/* Fetches block idx from the backing into blk and, if there is room, into
 * the store; o->lock held.  Returns its length or -errno. */
static ssize_t fetch_block(struct store *s, struct sobj *o, int bfd, uint32_t idx, char *blk,
                           bool store_it)
{
        off_t start = (off_t)idx * STORE_BLOCK;
        ssize_t n, got = 0;
        int fd;

        while (got < STORE_BLOCK) {
                n = pread(bfd, blk + got, STORE_BLOCK - got, start + got);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break;
                got += n;
        }
        if (!store_it || got == 0 || got < expect_len(o, idx) || !has_room(s, (uint64_t)got, o->bytes == 0))
                return got;
        if (grow(o, idx + 1) < 0)
                return got;
        fd = content_fd(s, o);
        if (fd < 0 || pwrite(fd, blk, got, start) != got) {
                log_warn("Failed to write store block %" PRIu32 " of inode %" PRIu64
                         ": %m, serving uncached", idx, o->ino);
                return got;
        }
        commit_block(s, o, idx, (uint32_t)got, store_crc32c(0, blk, got));
        return got;
}

/* The open container of o (o->lock held); a container that is gone or no
 * longer holds o's identity is forgotten (-ENOENT: fetch from the backing). */
static int container_fd(struct store *s, struct sobj *o)
{
        struct store_identity id;

        if (o->ctfd >= 0)
                return o->ctfd;
        identity_of(o, &id);
        o->ctfd = s->container_fn ? s->container_fn(s->container_ud, &id) : -ENOENT;
        if (o->ctfd >= 0)
                return o->ctfd;
        /* EINVAL: the opener refuses what is no longer a regular file. */
        log_warn("The container of inode %" PRIu64 " is gone or changed (%s): the store"
                 " forgets it, reads fetch from the backing", o->ino,
                 o->ctfd == -EINVAL ? "not a regular file now" : strerror(-o->ctfd));
        o->ctfd = -1;
        drop_content_as(s, o, false);
        return -ENOENT;
}

static ssize_t container_read(int fd, char *buf, size_t size, off_t off)
{
        size_t done = 0;

        while (done < size) {
                ssize_t n = pread(fd, buf + done, size - done, off + (off_t)done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return done ? (ssize_t)done : -errno;
                if (n == 0)
                        break;
                done += (size_t)n;
        }
        return (ssize_t)done;
}

/* Every block of o present, none short; o->lock held.  An empty file has
 * no block to fetch: it is whole as soon as its identity is known. */
static bool complete_in_blocks(const struct sobj *o)
{
        uint32_t total = (uint32_t)((o->size + STORE_BLOCK - 1) / STORE_BLOCK);

        if (o->container || o->size < 0 || o->bytes < (uint64_t)o->size || total > o->nblk)
                return false;
        for (uint32_t i = 0; i < total; i++)
                if (o->len[i] < expect_len(o, i))
                        return false;
        return true;
}

/* An unpinned object whose content just became whole in blocks is told to
 * the view once (it moves it into a container, off the request path). */
static void note_if_complete(struct store *s, struct sobj *o)
{
        if (o->told_complete || o->pin >= 0 || !s->complete_fn ||
            o->bytes < (uint64_t)o->size || !complete_in_blocks(o))
                return;
        o->told_complete = true;
        s->complete_fn(s->container_ud, o->ino);
}

ssize_t store_obj_read(struct store *s, struct sobj *o, int bfd, char *buf, size_t size,
                       off_t off)
{
        char *blk;
        size_t done = 0;
        ssize_t r = 0;
        int cfd;

        pthread_mutex_lock(&o->lock);
        if (o->container && (cfd = container_fd(s, o)) >= 0) {
                r = container_read(cfd, buf, size, off);
                pthread_mutex_unlock(&o->lock);
                return r;
        }
        blk = malloc(STORE_BLOCK);
        if (!blk) {
                pthread_mutex_unlock(&o->lock);
                return -ENOMEM;
        }
        while (done < size) {
                off_t pos = off + (off_t)done;
                uint32_t idx = (uint32_t)(pos / STORE_BLOCK);
                size_t in = (size_t)(pos % STORE_BLOCK), take;
                ssize_t n;

                n = read_present(s, o, idx, blk);
                if (n == 0)
                        n = fetch_block(s, o, bfd, idx, blk, true);
                if (n < 0) {
                        r = n;
                        break;
                }
                if ((size_t)n <= in)
                        break;
                take = (size_t)n - in;
                if (take > size - done)
                        take = size - done;
                memcpy(buf + done, blk + in, take);
                done += take;
                if ((size_t)n < STORE_BLOCK)
                        break;
        }
        note_if_complete(s, o);
        pthread_mutex_unlock(&o->lock);
        free(blk);
        return done || r == 0 ? (ssize_t)done : r;
}

int store_obj_fill(struct store *s, struct sobj *o, int bfd, uint64_t *fetched)
{
        char *blk = malloc(STORE_BLOCK);
        uint32_t nblk;
        int r = 0;

        if (!blk)
                return -ENOMEM;
        pthread_mutex_lock(&o->lock);
        if (o->container && container_fd(s, o) >= 0) {
                pthread_mutex_unlock(&o->lock);
                free(blk);
                return 0;       /* complete in its container */
        }
        nblk = (uint32_t)((o->size + STORE_BLOCK - 1) / STORE_BLOCK);
        for (uint32_t i = 0; i < nblk; i++) {
                ssize_t n;

                if (i < o->nblk && o->len[i] && o->len[i] >= expect_len(o, i))
                        continue;
                n = fetch_block(s, o, bfd, i, blk, true);
                if (n < 0) {
                        r = (int)n;
                        break;
                }
                if (i >= o->nblk || o->len[i] < expect_len(o, i)) {
                        r = -ENOSPC;    /* no room: the store refused the block */
                        break;
                }
                if (fetched)
                        *fetched += (uint64_t)n;
        }
        if (r == 0)
                note_if_complete(s, o);
        pthread_mutex_unlock(&o->lock);
        free(blk);
        return r;
}

static int container_to_blocks(struct store *s, struct sobj *o);

int store_obj_written(struct store *s, struct sobj *o, const char *buf, size_t size,
                      off_t off, const struct stat *st)
{
        char *blk = NULL;
        int r = 0;

        pthread_mutex_lock(&o->lock);
        o->told_complete = false;
        /* The backing has new bytes: a pinned container is stale until the
         * mirror copies the file again; an unpinned one goes back to blocks,
         * which are patched below. */
        if (o->container && (!o->own || o->pin >= 0 || container_to_blocks(s, o) < 0))
                drop_content(s, o);
        for (size_t done = 0; done < size;) {
                off_t pos = off + (off_t)done;
                uint32_t idx = (uint32_t)(pos / STORE_BLOCK);
                size_t in = (size_t)(pos % STORE_BLOCK);
                size_t take = STORE_BLOCK - in;
                uint32_t newlen;
                int fd;

                if (take > size - done)
                        take = size - done;
                if (idx < o->nblk && o->len[idx]) {
                        newlen = o->len[idx] > in + take ? o->len[idx] : (uint32_t)(in + take);
                        fd = content_fd(s, o);
                        if (!blk)
                                blk = malloc(STORE_BLOCK);
                        if (in > o->len[idx] || fd < 0 || !blk ||
                            pwrite(fd, buf + done, take, pos) != (ssize_t)take ||
                            pread(fd, blk, newlen, (off_t)idx * STORE_BLOCK) != newlen) {
                                uncommit_block(s, o, idx);
                        } else {
                                r = commit_block(s, o, idx, newlen,
                                                 store_crc32c(0, blk, newlen));
                                if (r < 0)
                                        uncommit_block(s, o, idx);
                        }
                }
                done += take;
        }
        free(blk);
        if (st)
                record_identity(s, o, st, now_ns(), true);
        pthread_mutex_unlock(&o->lock);
        return r;
}

int store_obj_changed_range(struct store *s, struct sobj *o, off_t off, off_t len,
                            const struct stat *st)
{
        pthread_mutex_lock(&o->lock);
        o->told_complete = false;
        if (o->container && (!o->own || o->pin >= 0 || container_to_blocks(s, o) < 0))
                drop_content(s, o);
        for (uint32_t i = (uint32_t)(off / STORE_BLOCK); i < o->nblk; i++) {
                if (len >= 0 && (off_t)i * STORE_BLOCK >= off + len)
                        break;
                uncommit_block(s, o, i);
        }
        if (st)
                record_identity(s, o, st, now_ns(), true);
        pthread_mutex_unlock(&o->lock);
        return 0;
}

int store_obj_set_pin(struct store *s, struct sobj *o, int prio)
{
        int r;

        pthread_mutex_lock(&o->lock);
        if (o->pin == prio) {
                pthread_mutex_unlock(&o->lock);
                return 0;
        }
        pthread_mutex_lock(&s->lock);
        r = db_run(s, NULL, "UPDATE objects SET pin=? WHERE ino=?", 2, (int64_t)prio,
                   (int64_t)o->ino);
        if (r >= 0) {
                uint64_t h = held(o);

                if (o->pin < 0 && prio >= 0)
                        s->pinned += h;
                else if (o->pin >= 0 && prio < 0)
                        s->pinned -= h < s->pinned ? h : s->pinned;
                o->pin = prio;
        }
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_unlock(&o->lock);
        return r < 0 ? r : 0;
}

void store_obj_info(struct sobj *o, struct sobj_info *info)
{
        uint32_t total;

        pthread_mutex_lock(&o->lock);
        total = (uint32_t)((o->size + STORE_BLOCK - 1) / STORE_BLOCK);
        memset(info, 0, sizeof(*info));
        info->ino = o->ino;
        info->size = (uint64_t)o->size;
        info->bytes = o->bytes;
        info->validated_ns = o->validated_ns;
        info->pin = o->pin;
        info->blocks_total = total;
        /* A forgotten identity (size -1) is no file's: nothing of it is here. */
        info->complete = o->size >= 0;
        if (o->size < 0)
                info->size = 0;
        info->container = o->container != NULL;
        if (o->container) {
                info->bytes = (uint64_t)o->size;
                info->blocks_present = total;
                total = 0;
        }
        for (uint32_t i = 0; i < total; i++) {
                if (i < o->nblk && o->len[i] && o->len[i] >= expect_len(o, i))
                        info->blocks_present++;
                else
                        info->complete = false;
        }
        pthread_mutex_unlock(&o->lock);
}

int store_info_ino(struct store *s, uint64_t ino, struct sobj_info *info)
{
        struct sobj *o;
        int r;

        r = obj_ref(s, ino, false, &o);
        if (r < 0)
                return r;
        store_obj_info(o, info);
        store_obj_put(s, o);
        return 0;
}

static int drop_ino(struct store *s, uint64_t ino, bool even_pinned, bool trylock)
{
        struct sobj *o;
        int r;

        r = row_ref(s, ino, false, &o, NULL);
        if (r < 0)
                return r == -ENOENT ? 0 : r;
        if (trylock) {
                if (pthread_mutex_trylock(&o->lock)) {
                        store_obj_put(s, o);
                        return 0;
                }
        } else {
                pthread_mutex_lock(&o->lock);
        }
        r = 0;
        if ((o->pin < 0 || even_pinned) && has_content(o)) {
                r = drop_content(s, o);
                r = r < 0 ? r : 1;
        }
        pthread_mutex_unlock(&o->lock);
        store_obj_put(s, o);
        return r;
}

int store_drop_ino(struct store *s, uint64_t ino, bool even_pinned)
{
        return drop_ino(s, ino, even_pinned, false);
}

/* The inodes @sql selects; its one parameter, if it has one, is @param. */
static GArray *select_inos_with(struct store *s, const char *sql, int64_t param)
{
        GArray *a = g_array_new(FALSE, FALSE, sizeof(gint64));
        sqlite3_stmt *st;

        pthread_mutex_lock(&s->lock);
        st = stmt_of(s, sql);
        if (st && sqlite3_bind_parameter_count(st) == 1)
                sqlite3_bind_int64(st, 1, param);
        if (st) {
                while (sqlite3_step(st) == SQLITE_ROW) {
                        gint64 ino = sqlite3_column_int64(st, 0);

                        g_array_append_val(a, ino);
                }
                stmt_done(st);
        }
        pthread_mutex_unlock(&s->lock);
        return a;
}

static GArray *select_inos(struct store *s, const char *sql)
{
        return select_inos_with(s, sql, 0);
}

int store_drop_all(struct store *s, bool even_pinned)
{
        GArray *a = select_inos(s, "SELECT ino FROM blocks UNION"
                                " SELECT ino FROM objects WHERE container IS NOT NULL");
        int n = 0;

        for (guint i = 0; i < a->len; i++)
                if (store_drop_ino(s, (uint64_t)g_array_index(a, gint64, i), even_pinned) > 0)
                        n++;
        g_array_free(a, TRUE);
        return n;
}

/*
 * Least recently used first, 32 candidates at a time.  An object in use
 * (its lock held: being filled or read) is passed over, not waited for, and
 * the next candidates are taken after it: the store still comes back under
 * its thresholds when the oldest objects are all busy.
 */
static void cull_locked(struct store *s)
{
        struct store_stats st;
        int64_t passed = 0;     /* candidates left in place, ahead of the next batch */

        for (;;) {
                GArray *a;
                guint len;

                pthread_mutex_lock(&s->lock);
                thresholds(s, &st);
                pthread_mutex_unlock(&s->lock);
                if (!below_cull(&st, 0, false))
                        return;
                a = select_inos_with(s, "SELECT o.ino FROM objects o WHERE o.pin<0 AND"
                                     " ((o.container IS NOT NULL AND o.own=1) OR EXISTS"
                                     " (SELECT 1 FROM blocks b WHERE b.ino=o.ino))"
                                     " ORDER BY o.atime LIMIT 32 OFFSET ?", passed);
                len = a->len;
                for (guint i = 0; i < a->len; i++) {
                        uint64_t ino = (uint64_t)g_array_index(a, gint64, i);

                        if (drop_ino(s, ino, false, true) <= 0) {
                                passed++;
                                continue;
                        }
                        pthread_mutex_lock(&s->lock);
                        s->culled++;
                        thresholds(s, &st);
                        pthread_mutex_unlock(&s->lock);
                        log_debug("Culled inode %" PRIu64 " from the store", ino);
                        if (above_run(&st))
                                break;
                }
                g_array_free(a, TRUE);
                if (len == 0 || above_run(&st))
                        return;
        }
}

void store_cull(struct store *s)
{
        pthread_mutex_lock(&s->cull_lock);
        cull_locked(s);
        pthread_mutex_unlock(&s->cull_lock);
}

/* The row of o says its content is in the container at @path; store.lock held. */
static int set_container_row(struct store *s, struct sobj *o, const char *path, uint64_t now,
                             bool own)
{
        static const char sql[] = "UPDATE objects SET container=?, size=?, mtime=?, ctime=?,"
                                  " validated=?, own=? WHERE ino=?";
        sqlite3_stmt *st = stmt_of(s, sql);
        int r = SQLITE_ERROR;

        if (st) {
                sqlite3_bind_text(st, 1, path, -1, SQLITE_TRANSIENT);
                sqlite3_bind_int64(st, 2, o->size);
                sqlite3_bind_int64(st, 3, o->mtime_ns);
                sqlite3_bind_int64(st, 4, o->ctime_ns);
                sqlite3_bind_int64(st, 5, row_time(now));
                sqlite3_bind_int64(st, 6, own);
                sqlite3_bind_int64(st, 7, (int64_t)o->ino);
                r = sqlite3_step(st);
                stmt_done(st);
        }
        if (r != SQLITE_DONE) {
                log_error("Failed to run '%s': %s", sql, sqlite3_errmsg(s->db));
                return -EIO;
        }
        return 0;
}

/* o->lock held, o without content: its content is the container at @path
 * (the store's own or not), validated at @validated; o and the counts follow. */
static int set_container(struct store *s, struct sobj *o, const char *path, uint64_t validated,
                         bool own)
{
        int r;

        pthread_mutex_lock(&s->lock);
        r = set_container_row(s, o, path, validated, own);
        if (r >= 0) {
                o->container = g_strdup(path);
                o->own = own;
                s->used += (uint64_t)o->size;
                if (o->pin >= 0)
                        s->pinned += (uint64_t)o->size;
                s->objects++;
        }
        pthread_mutex_unlock(&s->lock);
        return r;
}

void store_batch_begin(struct store *s)
{
        pthread_mutex_lock(&s->lock);
        if (!s->in_batch && db_exec(s, "BEGIN") == 0)
                s->in_batch = true;
        pthread_mutex_unlock(&s->lock);
}

void store_batch_commit(struct store *s)
{
        pthread_mutex_lock(&s->lock);
        if (s->in_batch && db_exec(s, "COMMIT") == 0)
                s->in_batch = false;
        pthread_mutex_unlock(&s->lock);
}

void store_set_container_fn(struct store *s, store_container_fn fn, void *ud)
{
        pthread_mutex_lock(&s->lock);
        s->container_fn = fn;
        s->container_ud = ud;
        pthread_mutex_unlock(&s->lock);
}

/* Noted for store_check_containers(), up to a bound (past it, all are checked). */
#define NOTED_MAX 1000000

static void note_set(struct store *s, uint64_t ino)
{
        gint64 key = (gint64)ino;

        pthread_mutex_lock(&s->lock);
        if (s->noted && g_hash_table_size(s->noted) < NOTED_MAX)
                g_hash_table_add(s->noted, g_memdup2(&key, sizeof(key)));
        pthread_mutex_unlock(&s->lock);
}

void store_containers_note_begin(struct store *s)
{
        pthread_mutex_lock(&s->lock);
        if (s->noted)
                g_hash_table_remove_all(s->noted);
        else
                s->noted = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
        pthread_mutex_unlock(&s->lock);
}

/* The noted set, taken from the store (NULL when not noting). */
static GHashTable *noted_take(struct store *s)
{
        GHashTable *noted;

        pthread_mutex_lock(&s->lock);
        noted = s->noted;
        s->noted = NULL;
        pthread_mutex_unlock(&s->lock);
        return noted;
}

void store_containers_note_end(struct store *s)
{
        GHashTable *noted = noted_take(s);

        if (noted)
                g_hash_table_destroy(noted);
}

int store_set_container(struct store *s, const struct stat *st, const char *path)
{
        uint64_t now = now_ns();
        struct sobj *o;
        int r;

        /* The mirror's file at @path is the new number's (its pin mark is
         * the resync's to give: view-mirror.c's note_container()). */
        r = row_ref(s, st->st_ino, true, &o, NULL);
        if (r < 0)
                return r;
        number_taken(s, st->st_ino);
        pthread_mutex_lock(&o->lock);
        if (o->container && same_identity(o, st) && !strcmp(o->container, path)) {
                pthread_mutex_unlock(&o->lock);
                store_obj_put(s, o);
                note_set(s, st->st_ino);
                return 0;
        }
        /* Blocks (the second copy) and any older container go first (the
         * mirror has just put the new one in place, maybe at the same path). */
        r = drop_content_as(s, o, false);
        if (r >= 0) {
                o->size = st->st_size;
                o->mtime_ns = timespec_ns(&st->st_mtim);
                o->ctime_ns = timespec_ns(&st->st_ctim);
                o->validated_ns = o->persisted_ns = now;
                r = set_container(s, o, path, now, false);
        }
        pthread_mutex_unlock(&o->lock);
        store_obj_put(s, o);
        if (r >= 0)
                note_set(s, st->st_ino);
        return r < 0 ? r : 0;
}

/*
 * The container's file becomes the object's content file (a hard link, no
 * copy) and its blocks are checksummed and committed; o->lock held.  The
 * container is forgotten either way.
 */
static int adopt_container(struct store *s, struct sobj *o)
{
        uint32_t nblk = (uint32_t)((o->size + STORE_BLOCK - 1) / STORE_BLOCK);
        char proc[64], name[64], dir[8];
        char *blk = NULL;
        int cfd = container_fd(s, o), r = 0;

        if (cfd < 0)
                return cfd;
        cfd = dup(cfd);
        r = drop_content_as(s, o, false);       /* forgets the container, no blocks yet */
        if (r < 0 || cfd < 0)
                goto out;
        snprintf(dir, sizeof(dir), "%02x", (unsigned)(o->ino & 0xff));
        if (mkdirat(s->objdir_fd, dir, 0700) < 0 && errno != EEXIST) {
                r = -errno;
                goto out;
        }
        content_name(o->ino, name, sizeof(name));
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", cfd);
        unlinkat(s->objdir_fd, name, 0);
        if (linkat(AT_FDCWD, proc, s->objdir_fd, name, AT_SYMLINK_FOLLOW) < 0) {
                r = -errno;
                goto out;
        }
        blk = malloc(STORE_BLOCK);
        if (!blk || grow(o, nblk) < 0) {
                r = -ENOMEM;
                goto out;
        }
        for (uint32_t i = 0; i < nblk && r == 0; i++) {
                ssize_t n = pread(cfd, blk, STORE_BLOCK, (off_t)i * STORE_BLOCK);

                if (n != (ssize_t)expect_len(o, i))
                        break;          /* shorter: the rest is fetched when read */
                r = commit_block(s, o, i, (uint32_t)n, store_crc32c(0, blk, (size_t)n));
        }
out:
        free(blk);
        if (cfd >= 0)
                close(cfd);
        return r;
}

/* Whether o's content file has a name besides the store's; o->lock held. */
static bool shared_content(struct store *s, struct sobj *o)
{
        char name[64];
        struct stat st;

        content_name(o->ino, name, sizeof(name));
        return fstatat(s->objdir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_nlink > 1;
}

/*
 * An unpinned container about to change (a write or truncate through the
 * view) goes back into blocks, to be patched there: its file becomes the
 * store's again and the mirror's name of it goes (a later complete read
 * moves it back, again without a copy); o->lock held.
 */
static int container_to_blocks(struct store *s, struct sobj *o)
{
        struct store_identity id;
        int r;

        identity_of(o, &id);
        id.path = g_strdup(o->container);
        r = adopt_container(s, o);
        /* Also when it failed: the content changes, the mirror's name must
         * not keep the old bytes under the old identity. */
        if (s->remove_fn)
                s->remove_fn(s->container_ud, &id);
        g_free((char *)id.path);
        /* The mirror kept its name (its copy changed since, as a write made to
         * it too does: mirror_through()): the file is the mirror's, not the
         * store's to patch, fill or move back (an extra link the mirror's
         * object would show offline); the caller lets the blocks go. */
        if (r == 0 && shared_content(s, o))
                r = -EBUSY;
        return r;
}

int store_obj_unpin(struct store *s, struct sobj *o)
{
        int r = store_obj_set_pin(s, o, -1);

        pthread_mutex_lock(&o->lock);
        if (r == 0 && o->container && adopt_container(s, o) < 0)
                log_debug("The container of inode %" PRIu64 " was not kept in the store",
                          o->ino);
        pthread_mutex_unlock(&o->lock);
        return r;
}

void store_check_containers(struct store *s)
{
        GArray *a = select_inos(s, "SELECT ino FROM objects WHERE container IS NOT NULL");
        GHashTable *noted = noted_take(s);

        for (guint i = 0; i < a->len; i++) {
                gint64 ino = g_array_index(a, gint64, i);
                struct sobj *o;

                if ((noted && g_hash_table_contains(noted, &ino)) ||
                    row_ref(s, (uint64_t)ino, false, &o, NULL) < 0)
                        continue;
                pthread_mutex_lock(&o->lock);
                if (o->container)
                        container_fd(s, o);     /* forgets it when it is gone */
                pthread_mutex_unlock(&o->lock);
                store_obj_put(s, o);
        }
        g_array_free(a, TRUE);
        if (noted)
                g_hash_table_destroy(noted);
}

int store_set_nocache(struct store *s, uint64_t ino, bool nocache)
{
        gint64 key = (gint64)ino;
        int r;

        pthread_mutex_lock(&s->lock);
        r = db_run(s, NULL, "INSERT INTO objects(ino, nocache) VALUES(?, ?) ON CONFLICT(ino)"
                   " DO UPDATE SET nocache=excluded.nocache", 2, (int64_t)ino,
                   (int64_t)nocache);
        if (r >= 0) {
                /* Set by the backing's number now: the new number's, if it changes. */
                number_taken_locked(s, ino);
                if (!g_hash_table_contains(s->rows, &key))
                        g_hash_table_add(s->rows, g_memdup2(&key, sizeof(key)));
                if (nocache) {
                        gint64 *k = g_new(gint64, 1);

                        *k = key;
                        g_hash_table_add(s->nocache, k);
                } else {
                        g_hash_table_remove(s->nocache, &key);
                }
        }
        pthread_mutex_unlock(&s->lock);
        return r < 0 ? r : 0;
}

bool store_is_nocache(struct store *s, uint64_t ino)
{
        gint64 key = (gint64)ino;
        bool r;

        pthread_mutex_lock(&s->lock);
        r = g_hash_table_size(s->nocache) && g_hash_table_contains(s->nocache, &key);
        pthread_mutex_unlock(&s->lock);
        return r;
}

static int bind_text_run(struct store *s, const char *sql, const char *text, int64_t v,
                         bool with_v)
{
        sqlite3_stmt *st;
        int r;

        pthread_mutex_lock(&s->lock);
        st = stmt_of(s, sql);
        r = SQLITE_ERROR;
        if (st) {
                sqlite3_bind_text(st, 1, text, -1, SQLITE_TRANSIENT);
                if (with_v)
                        sqlite3_bind_int64(st, 2, v);
                r = sqlite3_step(st);
                stmt_done(st);
        }
        if (r != SQLITE_DONE)
                log_error("Failed to run '%s': %s", sql, sqlite3_errmsg(s->db));
        r = r == SQLITE_DONE ? sqlite3_changes(s->db) : -EIO;
        pthread_mutex_unlock(&s->lock);
        return r;
}

static int collect_pin(void *ud, const char *path, int prio)
{
        GArray *pins = ud;
        struct pins_entry e = { g_strdup(path), prio };

        g_array_append_val(pins, e);
        return 0;
}

/* Rewrites the pins file from the index, one writer at a time. */
static int save_pins_file(struct store *s)
{
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        GArray *pins = g_array_new(FALSE, FALSE, sizeof(struct pins_entry));
        int r;

        pthread_mutex_lock(&lock);
        r = store_pin_foreach(s, collect_pin, pins);
        if (r >= 0)
                r = pins_file_save(s->dir, (struct pins_entry *)(void *)pins->data, pins->len);
        pthread_mutex_unlock(&lock);
        for (guint i = 0; i < pins->len; i++)
                g_free((char *)g_array_index(pins, struct pins_entry, i).path);
        g_array_free(pins, TRUE);
        if (r < 0)
                log_error("Failed to save the pins file in %s: %s", s->dir, strerror(-r));
        return r;
}

int store_pin_add(struct store *s, const char *path, int prio)
{
        int r = bind_text_run(s, "INSERT OR REPLACE INTO pins(path, prio) VALUES(?, ?)", path,
                              prio, true);

        if (r >= 0)
                r = save_pins_file(s);
        return r < 0 ? r : 0;
}

int store_pin_remove(struct store *s, const char *path)
{
        int r = bind_text_run(s, "DELETE FROM pins WHERE path=?", path, 0, false);

        if (r > 0) {
                int e = save_pins_file(s);

                if (e < 0)
                        return e;
        }
        return r;
}

static int restore_pin(void *ud, const char *path, int prio)
{
        struct store *s = ud;
        int r = bind_text_run(s, "INSERT OR REPLACE INTO pins(path, prio) VALUES(?, ?)", path,
                              prio, true);

        if (r >= 0)
                s->pins_restored++;
        return r < 0 ? r : 0;
}

/*
 * An index without pins beside a pins file that has some was made anew
 * (damaged, or deleted): the pins come back from the file.  An index that
 * has pins is the newer truth (the file is written after it).
 */
static int restore_pins(struct store *s)
{
        int r;

        if (db_scalar(s, "SELECT COUNT(*) FROM pins") > 0)
                return 0;
        r = pins_file_load(s->dir, restore_pin, s);
        if (r == -ENOENT)
                return 0;
        if (r == -EUCLEAN) {
                log_error("%s/pins is not a pins file: the pins it held are lost", s->dir);
                return 0;
        }
        if (r < 0)
                return r;
        if (s->pins_restored)
                log_info("%" PRIu64 " pins taken back from %s/pins (the index had none)",
                         s->pins_restored, s->dir);
        return 0;
}

uint64_t store_pins_restored(struct store *s)
{
        return s->pins_restored;
}

int store_pin_foreach(struct store *s, int (*fn)(void *ud, const char *path, int prio),
                      void *ud)
{
        GPtrArray *paths = g_ptr_array_new_with_free_func(g_free);
        GArray *prios = g_array_new(FALSE, FALSE, sizeof(int));
        sqlite3_stmt *st;
        int r = 0;

        pthread_mutex_lock(&s->lock);
        if (sqlite3_prepare_v2(s->db, "SELECT path, prio FROM pins ORDER BY prio DESC", -1,
                               &st, NULL) == SQLITE_OK) {
                while (sqlite3_step(st) == SQLITE_ROW) {
                        int prio = sqlite3_column_int(st, 1);

                        g_ptr_array_add(paths, g_strdup((const char *)sqlite3_column_text(st, 0)));
                        g_array_append_val(prios, prio);
                }
                sqlite3_finalize(st);
        }
        pthread_mutex_unlock(&s->lock);
        for (guint i = 0; i < paths->len && r >= 0; i++)
                r = fn(ud, g_ptr_array_index(paths, i), g_array_index(prios, int, i));
        g_ptr_array_free(paths, TRUE);
        g_array_free(prios, TRUE);
        return r;
}

void store_set_unpinned_fns(struct store *s, store_complete_fn complete, store_container_fn remove)
{
        pthread_mutex_lock(&s->lock);
        s->complete_fn = complete;
        s->remove_fn = remove;
        pthread_mutex_unlock(&s->lock);
}

/* Every block's bytes match its checksum (a container has none after it,
 * and blocks found in the store at start were not all read since); a
 * corrupt one is dropped (-EAGAIN: fetched again when read); o->lock held. */
static int blocks_verified(struct store *s, struct sobj *o, int cfd)
{
        uint32_t total = (uint32_t)((o->size + STORE_BLOCK - 1) / STORE_BLOCK);
        char *blk = malloc(STORE_BLOCK);
        int r = blk ? 0 : -ENOMEM;

        for (uint32_t i = 0; r == 0 && i < total; i++) {
                ssize_t n = pread(cfd, blk, o->len[i], (off_t)i * STORE_BLOCK);

                if (n == (ssize_t)o->len[i] && store_crc32c(0, blk, (size_t)n) == o->crc[i])
                        continue;
                log_warn("Store block %" PRIu32 " of inode %" PRIu64 " is corrupt, fetching"
                         " it again", i, o->ino);
                pthread_mutex_lock(&s->lock);
                s->corrupt++;
                pthread_mutex_unlock(&s->lock);
                uncommit_block(s, o, i);
                r = -EAGAIN;
        }
        free(blk);
        return r;
}

int store_make_container(struct store *s, const struct stat *st, const char *path,
                         store_place_fn place, void *pud)
{
        uint64_t now = now_ns();
        char name[64];
        struct sobj *o;
        int r, cfd;

        pthread_mutex_lock(&s->lock);
        r = obj_ref_locked(s, st->st_ino, false, &o);
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
                return r;
        pthread_mutex_lock(&o->lock);
        /* Only what is still whole in blocks, unpinned, of this identity. */
        r = -EAGAIN;
        if (o->pin >= 0 || !same_identity(o, st) || !complete_in_blocks(o))
                goto out;
        cfd = content_fd(s, o);
        r = cfd < 0 ? cfd : 0;
        /* The blocks were written without a sync (their checksums tell a torn
         * one); a container has none, so its bytes are made durable first. */
        if (r == 0)
                r = blocks_verified(s, o, cfd);
        if (r == 0 && (ftruncate(cfd, o->size) < 0 || fdatasync(cfd) < 0))
                r = -errno;
        content_name(o->ino, name, sizeof(name));
        if (r == 0)
                r = place(pud, s->objdir_fd, name);
        if (r < 0)
                goto out;
        /* The mirror holds the file now: the blocks' rows and the store's
         * name of it go, and the row names the container. */
        r = drop_content_as(s, o, false);
        if (r >= 0) {
                o->validated_ns = o->persisted_ns = now;
                r = set_container(s, o, path, now, true);
        }
out:
        pthread_mutex_unlock(&o->lock);
        store_obj_put(s, o);
        return r < 0 ? r : 0;
}

/* o->lock held: o's unpinned own container, with @id's identity still? */
static bool same_unpinned_container(const struct sobj *o, const struct store_identity *id)
{
        return o->container && o->own && o->pin < 0 && o->ino == id->ino &&
               o->size == id->size && o->mtime_ns == id->mtime_ns &&
               o->ctime_ns == id->ctime_ns && !strcmp(o->container, id->path);
}

int store_check_unpinned(struct store *s, store_container_fn on_server,
                         store_container_fn remove_stale)
{
        GArray *a = select_inos(s, "SELECT ino FROM objects WHERE container IS NOT NULL"
                                " AND own=1 AND pin<0");
        int n = 0;

        for (guint i = 0; i < a->len; i++) {
                struct store_identity id;
                struct sobj *o;
                char *path = NULL;
                int r;

                if (row_ref(s, (uint64_t)g_array_index(a, gint64, i), false, &o, NULL) < 0)
                        continue;
                pthread_mutex_lock(&o->lock);
                identity_of(o, &id);
                if (o->container && o->own && o->pin < 0)
                        id.path = path = g_strdup(o->container);
                pthread_mutex_unlock(&o->lock);
                /* The server is asked with no lock held: a reader of the
                 * object (or the culler) never waits on its answer. */
                r = path ? on_server(s->container_ud, &id) : -ENOENT;
                /* The server's file at its path has its number and identity:
                 * the row is the new number's too (numbered anew). */
                if (r == 0)
                        number_taken(s, id.ino);
                if (r == -ESTALE) {
                        pthread_mutex_lock(&o->lock);
                        if (same_unpinned_container(o, &id)) {
                                remove_stale(s->container_ud, &id);
                                if (drop_content(s, o) == 0)
                                        n++;
                        }
                        pthread_mutex_unlock(&o->lock);
                }
                g_free(path);
                store_obj_put(s, o);
        }
        g_array_free(a, TRUE);
        return n;
}

#define FACT_CONTAINERS_INDEXED "mirror containers indexed"

bool store_containers_unindexed(struct store *s)
{
        bool r;

        pthread_mutex_lock(&s->lock);
        r = db_scalar(s, "SELECT COUNT(*) FROM facts WHERE name='"
                      FACT_CONTAINERS_INDEXED "'") == 0;
        pthread_mutex_unlock(&s->lock);
        return r;
}

int store_containers_indexed(struct store *s)
{
        int r;

        pthread_mutex_lock(&s->lock);
        r = db_exec(s, "INSERT OR IGNORE INTO facts(name) VALUES('" FACT_CONTAINERS_INDEXED "')");
        pthread_mutex_unlock(&s->lock);
        return r;
}

/*
 * The store's rows are keyed by the server's inode numbers.  A backing that
 * numbers its files anew at each mount (sshfs) records which mount numbered
 * them, as the fact "numbered by <mount>".
 */
#define FACT_NUMBERED_BY "numbered by "

bool store_numbered_by(struct store *s, const char *mount)
{
        char *fact = g_strconcat(FACT_NUMBERED_BY, mount, NULL);
        sqlite3_stmt *st;
        bool r = false;

        pthread_mutex_lock(&s->lock);
        st = stmt_of(s, "SELECT COUNT(*) FROM facts WHERE name=?");
        if (st) {
                sqlite3_bind_text(st, 1, fact, -1, SQLITE_TRANSIENT);
                r = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0;
                stmt_done(st);
        }
        pthread_mutex_unlock(&s->lock);
        g_free(fact);
        return r;
}

/* The fact that @mount numbered the rows, in place of any other's. */
static int record_numbering(struct store *s, const char *mount)
{
        char *fact = g_strconcat(FACT_NUMBERED_BY, mount, NULL);
        int r;

        pthread_mutex_lock(&s->lock);
        r = db_exec(s, "DELETE FROM facts WHERE name LIKE '" FACT_NUMBERED_BY "%'");
        pthread_mutex_unlock(&s->lock);
        if (r >= 0)
                r = bind_text_run(s, "INSERT OR IGNORE INTO facts(name) VALUES(?)", fact, 0,
                                  false);
        g_free(fact);
        return r;
}

int store_renumbered(struct store *s, const char *mount)
{
        int n = store_drop_all(s, true), r;

        pthread_mutex_lock(&s->lock);
        /* The rows' pin marks and cacheable flags were the old numbers'
         * too: with no object in use (at start) the rows go as well. */
        r = g_hash_table_size(s->objs) ? 0 :
            db_exec(s, "DELETE FROM blocks; DELETE FROM objects;");
        if (r >= 0 && !g_hash_table_size(s->objs)) {
                g_hash_table_remove_all(s->rows);
                g_hash_table_remove_all(s->nocache);
        }
        pthread_mutex_unlock(&s->lock);
        if (r >= 0)
                r = record_numbering(s, mount);
        return r < 0 ? r : n;
}

int store_numbers_unsure(struct store *s, const char *mount)
{
        char *m = strdup(mount);

        if (!m)
                return -ENOMEM;
        pthread_mutex_lock(&s->lock);
        if (!s->renumbered)
                s->renumbered = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
        free(s->numbering_next);
        s->numbering_next = m;
        pthread_mutex_unlock(&s->lock);
        return 0;
}

/* Row o, reached by no one since the numbers became unsure, goes: forgotten,
 * and deleted unless another user holds o.  o->lock held. */
static bool drop_unreached(struct store *s, struct sobj *o)
{
        gint64 key = (gint64)o->ino;
        bool freed = false;
        int r;

        forget_renumbered(s, o);
        pthread_mutex_lock(&s->lock);
        r = db_run(s, NULL, o->refs == 1 ? "DELETE FROM objects WHERE ino=?"
                                        : "UPDATE objects SET nocache=0 WHERE ino=?",
                   1, (int64_t)o->ino);
        if (r >= 0) {
                g_hash_table_remove(s->nocache, &key);
                if (o->refs == 1) {
                        /* Out of reach before o->lock is let go. */
                        g_hash_table_remove(s->rows, &key);
                        g_hash_table_remove(s->objs, &key);
                        o->refs = 0;
                        freed = true;
                }
        }
        pthread_mutex_unlock(&s->lock);
        return freed;
}

int store_numbers_settle(struct store *s, unsigned *dropped)
{
        GArray *a;
        char *mount;
        int r;

        *dropped = 0;
        if (!store_numbers_unsure_now(s))
                return 0;
        a = select_inos(s, "SELECT ino FROM objects");
        for (guint i = 0; i < a->len; i++) {
                uint64_t ino = (uint64_t)g_array_index(a, gint64, i);
                struct sobj *o;
                bool freed, reached, unreached;

                pthread_mutex_lock(&s->lock);
                reached = g_hash_table_contains(s->renumbered, &(gint64){ (gint64)ino });
                pthread_mutex_unlock(&s->lock);
                if (reached || row_ref(s, ino, false, &o, NULL) < 0)
                        continue;
                pthread_mutex_lock(&o->lock);
                /* Taken here, so that no reach forgets it a second time. */
                unreached = number_taken(s, ino);
                freed = unreached && drop_unreached(s, o);
                pthread_mutex_unlock(&o->lock);
                if (unreached)
                        (*dropped)++;
                if (freed)
                        obj_free(o);
                else
                        store_obj_put(s, o);
        }
        g_array_free(a, TRUE);
        pthread_mutex_lock(&s->lock);
        mount = s->numbering_next;
        s->numbering_next = NULL;
        g_clear_pointer(&s->renumbered, g_hash_table_destroy);
        pthread_mutex_unlock(&s->lock);
        r = mount ? record_numbering(s, mount) : 0;
        free(mount);
        return r < 0 ? r : 1;
}

int store_reindex_container(struct store *s, const struct store_identity *id, bool validated)
{
        struct sobj *o;
        int r;

        pthread_mutex_lock(&s->lock);
        r = obj_ref_locked(s, id->ino, true, &o);
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
                return r;
        pthread_mutex_lock(&o->lock);
        /* What the store holds already (blocks, a container, a pin's mark) is
         * newer than a file found in the mirror. */
        r = 0;
        if (o->pin >= 0 || has_content(o))
                goto out;
        o->size = id->size;
        o->mtime_ns = id->mtime_ns;
        o->ctime_ns = id->ctime_ns;
        /* Unvalidated (0): compared with the backing at its first use online. */
        o->validated_ns = o->persisted_ns = validated ? now_ns() : 0;
        r = set_container(s, o, id->path, o->validated_ns, true);
        if (r >= 0)
                r = 1;
out:
        pthread_mutex_unlock(&o->lock);
        store_obj_put(s, o);
        return r;
}

int store_set_last_use(struct store *s, uint64_t ino, int64_t used_ns)
{
        int r;

        pthread_mutex_lock(&s->lock);
        r = db_run(s, NULL, "UPDATE objects SET atime=? WHERE ino=? AND atime=0", 2, used_ns,
                   (int64_t)ino);
        pthread_mutex_unlock(&s->lock);
        return r < 0 ? r : 0;
}
