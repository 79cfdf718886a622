/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * oplog.c: the durable offline operation log (see oplog.h).
 *
 * Why SQLite (WAL) and not a write-ahead file: coalescing rewrites and
 * deletes earlier records, and reintegration must mark a record applied in
 * the same atomic step as the server identity it produced; a transactional
 * table gives both, and in WAL mode each commit is one append.  Commits are
 * synchronous=NORMAL (safe against a crash of the process), and
 * oplog_durable() syncs the WAL when an application asks for durability.
 * A content row names its container by file handle; where that cannot be,
 * the content is copied to content/SEQ, fsynced and renamed into place
 * before the row that names it commits, so a committed row always names
 * complete content; a crash before the commit leaves at most an orphan
 * file, removed at the next open.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "oplog-internal.h"

/*
 * The log's format, in its meta table: 2, objects and conflicts never reuse
 * an id (AUTOINCREMENT); 3, a create may be deferred (its later attributes
 * and bytes are the mirror's file until oplog_settle_deferred(): a reader of
 * format 2 would replay the file empty).  A log of a newer format than this
 * code's is refused, never extended or replayed.
 */
#define LOG_FORMAT_NUMBER 3
#define LOG_FORMAT STRINGIFY(LOG_FORMAT_NUMBER)
#define STRINGIFY(x) STRINGIFY_(x)
#define STRINGIFY_(x) #x

/*
 * Object and conflict ids are AUTOINCREMENT, never SQLite's max(rowid)+1:
 * they are held outside the database (a node's and an open file's lid, a
 * mirror file's mark, the st_ino an object made offline shows; a conflict
 * id a user read from 'query conflicts'), so an id whose row went (a
 * create cancelled, an object forgotten, a conflict settled) must not come
 * back naming another.
 */
#define OBJECTS_COLUMNS \
        "(lid INTEGER PRIMARY KEY AUTOINCREMENT, local INTEGER NOT NULL, type INTEGER NOT NULL," \
        " names INTEGER NOT NULL DEFAULT 1," \
        " srv_parent INTEGER, srv_name TEXT," \
        " b_ino INTEGER, b_size INTEGER, b_mtime INTEGER, b_ctime INTEGER, b_mode INTEGER," \
        " b_uid INTEGER, b_gid INTEGER, b_nlink INTEGER, b_content TEXT," \
        " orig_content TEXT, conflict INTEGER, c_ino INTEGER)"
#define CONFLICTS_COLUMNS \
        "(id INTEGER PRIMARY KEY AUTOINCREMENT, seq INTEGER, lid INTEGER, kind TEXT NOT NULL," \
        " path TEXT, base TEXT, local TEXT, remote TEXT, detail TEXT," \
        " recorded INTEGER NOT NULL DEFAULT 0, local_changed INTEGER NOT NULL DEFAULT 0)"

static const char schema[] =
        "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);"
        "CREATE TABLE IF NOT EXISTS objects" OBJECTS_COLUMNS ";"
        "CREATE INDEX IF NOT EXISTS objects_ino ON objects(b_ino);"
        "CREATE TABLE IF NOT EXISTS ops("
        " seq INTEGER PRIMARY KEY AUTOINCREMENT, kind INTEGER NOT NULL, lid INTEGER NOT NULL,"
        " parent INTEGER, name TEXT, parent2 INTEGER, name2 TEXT, other INTEGER,"
        " flags INTEGER NOT NULL DEFAULT 0, mask INTEGER NOT NULL DEFAULT 0,"
        " mode INTEGER, uid INTEGER, gid INTEGER, rdev INTEGER, atime INTEGER, mtime INTEGER,"
        " size INTEGER, content TEXT, xname TEXT, xvalue BLOB,"
        " state INTEGER NOT NULL DEFAULT 0, outcome TEXT, intent INTEGER, container BLOB);"
        "CREATE INDEX IF NOT EXISTS ops_lid ON ops(lid);"
        "CREATE INDEX IF NOT EXISTS ops_other ON ops(other) WHERE other IS NOT NULL;"
        /* Whether anything pending lives in a directory (cancelling a create, at each unlink). */
        "CREATE INDEX IF NOT EXISTS ops_parent ON ops(parent) WHERE parent IS NOT NULL;"
        "CREATE INDEX IF NOT EXISTS ops_parent2 ON ops(parent2) WHERE parent2 IS NOT NULL;"
        /* Other server names of an object with several links, seen offline. */
        "CREATE TABLE IF NOT EXISTS aliases("
        " lid INTEGER NOT NULL, parent INTEGER NOT NULL, name TEXT NOT NULL,"
        " PRIMARY KEY (lid, parent, name));"
        "CREATE TABLE IF NOT EXISTS conflicts" CONFLICTS_COLUMNS ";";

/* Objects by the inode they were cached with (see add_cached_ino_column()). */
static const char objects_cino_index[] =
        "CREATE INDEX IF NOT EXISTS objects_cino ON objects(c_ino) WHERE c_ino IS NOT NULL";

static const char *const kind_names[_OPLOG_KIND_MAX] = {
        [OPLOG_CONTENT] = "content",   [OPLOG_CREATE] = "create",
        [OPLOG_MKDIR] = "mkdir",       [OPLOG_SYMLINK] = "symlink",
        [OPLOG_LINK] = "link",         [OPLOG_UNLINK] = "unlink",
        [OPLOG_RMDIR] = "rmdir",       [OPLOG_RENAME] = "rename",
        [OPLOG_SETATTR] = "setattr",   [OPLOG_SETXATTR] = "setxattr",
        [OPLOG_REMOVEXATTR] = "removexattr", [OPLOG_MKNOD] = "mknod",
};

const char *oplog_kind_to_string(enum oplog_kind k)
{
        return k > 0 && k < _OPLOG_KIND_MAX ? kind_names[k] : NULL;
}

const char *oplog_state_to_string(enum oplog_state s)
{
        static const char *const names[] = { "pending", "applied", "conflict", "held" };

        return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : NULL;
}

void oplog_version_from_stat(struct oplog_version *v, const struct stat *st)
{
        memset(v, 0, sizeof(*v));
        v->ino = st->st_ino;
        v->size = (uint64_t)st->st_size;
        v->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
        v->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
        v->mode = st->st_mode;
        v->uid = st->st_uid;
        v->gid = st->st_gid;
        v->nlink = (uint32_t)st->st_nlink;
}

/* ------------------------------------------------------------------------ */
/* SQLite helpers                                                           */
/* ------------------------------------------------------------------------ */

int oplog_sqlite_errno(int rc)
{
        switch (rc & 0xff) {
        case SQLITE_OK: case SQLITE_DONE: case SQLITE_ROW: return 0;
        case SQLITE_FULL: return -ENOSPC;
        case SQLITE_NOMEM: return -ENOMEM;
        case SQLITE_BUSY: case SQLITE_LOCKED: return -EBUSY;
        case SQLITE_READONLY: case SQLITE_PERM: case SQLITE_AUTH: return -EACCES;
        case SQLITE_CANTOPEN: return -ENOENT;
        case SQLITE_CONSTRAINT: return -EEXIST;
        case SQLITE_TOOBIG: return -E2BIG;
        case SQLITE_MISUSE: case SQLITE_RANGE: return -EINVAL;
        case SQLITE_CORRUPT: case SQLITE_NOTADB: return -EUCLEAN;
        default: return -EIO;
        }
}

/* The slots of the statements prepared once (log->stmts). */
enum {
        STMT_OBJECT_LOAD, STMT_OBJECT_SAVE, STMT_MARK, STMT_INTENT, STMT_NAMES,
        STMT_CONTAINER,         /* replay: a content record's container */
        /* appending a record: each runs at every change an application makes offline */
        STMT_BEGIN, STMT_COMMIT, STMT_EXISTS, STMT_INSERT_ROW, STMT_INSERT_OBJECT,
        STMT_SETATTR_PENDING, STMT_SETATTR_UPDATE, STMT_LAST_SEQ, STMT_DELETE_SEQ,
        STMT_CONTENT_LAST, STMT_CONTENT_PENDING, STMT_CONTENT_DELETE, STMT_DEFERRED,
        STMT_ALIAS_IF_SEVERAL, STMT_ALIAS,
        /* settling a deferred create: once per file created offline, at a replay */
        STMT_SETTLE_REMOVED, STMT_SETTLE_PLAIN, STMT_SETTLE_CREATE,
        _STMT_MAX,
};

static int exec_cached(struct oplog *log, unsigned slot, const char *sql);
_Static_assert(_STMT_MAX <= sizeof(((struct oplog *)0)->stmts) / sizeof(sqlite3_stmt *),
               "struct oplog has a slot for every statement prepared once");

int oplog_exec(struct oplog *log, const char *sql)
{
        return oplog_sqlite_errno(sqlite3_exec(log->db, sql, NULL, NULL, NULL));
}

int oplog_begin(struct oplog *log)
{
        return exec_cached(log, STMT_BEGIN, "BEGIN IMMEDIATE");
}

int oplog_commit(struct oplog *log)
{
        int e = exec_cached(log, STMT_COMMIT, "COMMIT");

        if (e < 0) {
                oplog_rollback(log);
        } else {
                log->unsynced = true;
                log->commits++;
        }
        return e;
}

void oplog_rollback(struct oplog *log)
{
        if (!sqlite3_get_autocommit(log->db))
                (void)sqlite3_exec(log->db, "ROLLBACK", NULL, NULL, NULL);
}

int oplog_sync(struct oplog *log)
{
        int e;

        if (log->opts.no_fsync)
                return 0;
        /* An empty FULL transaction is not written at all; a checkpoint syncs the WAL. */
        e = oplog_exec(log, "PRAGMA wal_checkpoint(PASSIVE)");
        if (e < 0)
                return e;
        return fsync(log->dir_fd) < 0 ? -errno : 0;
}

int oplog_durable(struct oplog *log)
{
        sqlite3_file *wal = NULL;
        int e;

        if (!log)
                return -EINVAL;
        if (log->opts.no_fsync || (!log->unsynced && !log->links_unsynced))
                return 0;
        if (log->unsynced) {
                /* The WAL holds every commit since the last checkpoint: syncing it is enough. */
                if (sqlite3_file_control(log->db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) ==
                    SQLITE_OK && wal && wal->pMethods)
                        e = oplog_sqlite_errno(wal->pMethods->xSync(wal, SQLITE_SYNC_NORMAL));
                else
                        e = oplog_exec(log, "PRAGMA wal_checkpoint(PASSIVE)");
                if (e < 0)
                        return e;
                log->unsynced = false;
                log->synced = log->commits;
        }
        if (log->links_unsynced) {
                if (fsync(log->content_fd) < 0)
                        return -errno;
                log->links_unsynced = false;
        }
        return 0;
}

/* Without the caller's lock: the WAL (and content/ when @links) to disk. */
static int sync_grouped(struct oplog *log, bool links)
{
        if (fdatasync(log->wal_fd) < 0)
                return -errno;
        return links && fsync(log->content_fd) < 0 ? -errno : 0;
}

int oplog_durable_grouped(struct oplog *log, pthread_mutex_t *lock)
{
        uint64_t want, upto;
        bool links;
        int e = 0;

        if (!log || !lock)
                return -EINVAL;
        if (log->opts.no_fsync)
                return 0;
        if (log->wal_fd < 0)
                log->wal_fd = openat(log->dir_fd, "log.db-wal", O_RDONLY | O_CLOEXEC);
        if (log->wal_fd < 0)
                return oplog_durable(log);      /* no WAL file to sync on its own */
        /* Content links come before their row's commit: a sync of the commits
         * so far syncs the links made so far. */
        want = log->commits;
        while (log->synced < want) {
                if (log->syncing) {
                        pthread_cond_wait(&log->sync_done, lock);
                        continue;
                }
                upto = log->commits;
                links = log->links_unsynced;
                log->links_unsynced = false;
                log->syncing = true;
                pthread_mutex_unlock(lock);
                e = sync_grouped(log, links);
                pthread_mutex_lock(lock);
                log->syncing = false;
                if (e < 0)
                        log->links_unsynced |= links;
                else if (upto > log->synced)
                        log->synced = upto;
                pthread_cond_broadcast(&log->sync_done);
                if (e < 0)
                        return e;
        }
        if (log->synced >= log->commits)
                log->unsynced = false;
        return 0;
}

static int prep(struct oplog *log, sqlite3_stmt **st, const char *sql)
{
        return oplog_sqlite_errno(sqlite3_prepare_v2(log->db, sql, -1, st, NULL));
}

/*
 * A statement prepared once and kept (reintegration runs these per record);
 * reset and unbound for reuse.  Finish it with step_done_cached().
 */
static int prep_cached(struct oplog *log, unsigned slot, sqlite3_stmt **st, const char *sql)
{
        if (!log->stmts[slot]) {
                int rc = sqlite3_prepare_v3(log->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
                                            &log->stmts[slot], NULL);

                if (rc != SQLITE_OK)
                        return oplog_sqlite_errno(rc);
        }
        *st = log->stmts[slot];
        return 0;
}

static void release_cached(sqlite3_stmt *st)
{
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
}

static int step_done_cached(sqlite3_stmt *st)
{
        int rc = sqlite3_step(st);

        release_cached(st);
        return rc == SQLITE_DONE ? 0 : oplog_sqlite_errno(rc);
}

/* Runs @sql (no arguments, no rows), prepared once in @slot. */
static int exec_cached(struct oplog *log, unsigned slot, const char *sql)
{
        sqlite3_stmt *st = NULL;
        int e = prep_cached(log, slot, &st, sql);

        return e < 0 ? e : step_done_cached(st);
}


static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
        if (s)
                sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
        else
                sqlite3_bind_null(st, i);
}

static const char *col_text(sqlite3_stmt *st, int i)
{
        return (const char *)sqlite3_column_text(st, i);
}

static void bind_id(sqlite3_stmt *st, int i, uint64_t v)
{
        if (v)
                sqlite3_bind_int64(st, i, (sqlite3_int64)v);
        else
                sqlite3_bind_null(st, i);
}

/* Steps a statement that returns no row, then finalizes it. */
static int step_done(sqlite3_stmt *st)
{
        int rc = sqlite3_step(st);

        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? 0 : oplog_sqlite_errno(rc);
}

/* The end of a loop over a statement's rows: @rc the last step's result,
 * @e the last row's (negative stops the loop and is returned). */
static int rows_end(sqlite3_stmt *st, int rc, int e)
{
        sqlite3_finalize(st);
        if (e < 0)
                return e;
        return rc == SQLITE_DONE ? 0 : oplog_sqlite_errno(rc);
}

/* The one integer a query's step answers: 1 with *out, 0 for no row, or -errno. */
static int step_int(sqlite3_stmt *st, int64_t *out)
{
        int rc = sqlite3_step(st);

        if (rc == SQLITE_ROW) {
                *out = sqlite3_column_int64(st, 0);
                return 1;
        }
        return rc == SQLITE_DONE ? 0 : oplog_sqlite_errno(rc);
}

/* Binds n int64_t arguments to ?1..?n. */
static void bind_ints(sqlite3_stmt *st, int n, va_list ap)
{
        for (int i = 0; i < n; i++)
                sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
}

/* Runs a one-integer query with integer arguments ?1..?n. */
static int query_int(struct oplog *log, int64_t *out, const char *sql, int n, ...)
{
        sqlite3_stmt *st = NULL;
        va_list ap;
        int e;

        e = prep(log, &st, sql);
        if (e < 0)
                return e;
        va_start(ap, n);
        bind_ints(st, n, ap);
        va_end(ap);
        e = step_int(st, out);
        sqlite3_finalize(st);
        return e;
}

/* query_int() with a statement prepared once in @slot (run per record). */
static int query_int_cached(struct oplog *log, unsigned slot, int64_t *out, const char *sql,
                            int n, ...)
{
        sqlite3_stmt *st = NULL;
        va_list ap;
        int e;

        e = prep_cached(log, slot, &st, sql);
        if (e < 0)
                return e;
        va_start(ap, n);
        bind_ints(st, n, ap);
        va_end(ap);
        e = step_int(st, out);
        release_cached(st);
        return e;
}

static int exec_ids(struct oplog *log, const char *sql, int n, ...)
{
        sqlite3_stmt *st = NULL;
        va_list ap;
        int e;

        e = prep(log, &st, sql);
        if (e < 0)
                return e;
        va_start(ap, n);
        for (int i = 0; i < n; i++)
                sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
        va_end(ap);
        return step_done(st);
}

/* ------------------------------------------------------------------------ */
/* Open and close                                                           */
/* ------------------------------------------------------------------------ */

static int load_token(struct oplog *log)
{
        sqlite3_stmt *st = NULL;
        uint8_t raw[8];
        int rc, e;

        e = prep(log, &st, "SELECT value FROM meta WHERE key='token'");
        if (e < 0)
                return e;
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && sqlite3_column_bytes(st, 0) == 16) {
                memcpy(log->token, sqlite3_column_text(st, 0), 16);
                log->token[16] = '\0';
                sqlite3_finalize(st);
                return 0;
        }
        sqlite3_finalize(st);
        if (getrandom(raw, sizeof(raw), 0) != sizeof(raw))
                return -EIO;
        for (int i = 0; i < 8; i++)
                snprintf(log->token + 2 * i, 3, "%02x", raw[i]);
        e = prep(log, &st, "INSERT OR REPLACE INTO meta(key, value) VALUES ('token', ?1)");
        if (e < 0)
                return e;
        bind_text(st, 1, log->token);
        return step_done(st);
}

/* The bytes of the containers content rows name (sweep_content() counted the copies). */
static int count_container_bytes(struct oplog *log)
{
        int64_t v;
        int e = query_int(log, &v, "SELECT total(size) FROM ops WHERE kind=1 AND container IS NOT"
                                   " NULL", 0);

        if (e == 1)
                log->content_bytes += (uint64_t)v;
        return e < 0 ? e : 0;
}

/* A log made before content rows named containers gets the column (its rows keep copies). */
static int add_container_column(struct oplog *log)
{
        sqlite3_stmt *st = NULL;

        if (prep(log, &st, "SELECT container FROM ops LIMIT 0") == 0) {
                sqlite3_finalize(st);
                return 0;
        }
        return oplog_exec(log, "ALTER TABLE ops ADD COLUMN container BLOB");
}

static int64_t now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A log made before conflicts kept their times: theirs are 0 (unknown). */
static int add_conflict_time_columns(struct oplog *log)
{
        sqlite3_stmt *st = NULL;

        if (prep(log, &st, "SELECT recorded, local_changed FROM conflicts LIMIT 0") == 0) {
                sqlite3_finalize(st);
                return 0;
        }
        return oplog_exec(log, "ALTER TABLE conflicts ADD COLUMN recorded INTEGER NOT NULL"
                               " DEFAULT 0; ALTER TABLE conflicts ADD COLUMN local_changed"
                               " INTEGER NOT NULL DEFAULT 0");
}

/*
 * c_ino: the server inode a server object was cached with, which the
 * mirror's marks name it by until the next resync, also once a replay has
 * given it a new one (content written through a temporary renamed over it)
 * while the volume still serves as offline.  A log made before it gets it.
 */
static int add_cached_ino_column(struct oplog *log)
{
        sqlite3_stmt *st = NULL;
        int e = 0;

        if (prep(log, &st, "SELECT c_ino FROM objects LIMIT 0") == 0)
                sqlite3_finalize(st);
        else
                e = oplog_exec(log, "ALTER TABLE objects ADD COLUMN c_ino INTEGER");
        return e < 0 ? e : oplog_exec(log, objects_cino_index);
}

/*
 * A log made before ids were AUTOINCREMENT: rebuilds @table as @columns,
 * every row kept with its id (which starts its sequence at the largest).
 * Run inside a transaction; the caller makes its indexes again.
 */
static int rebuild_autoincrement(struct oplog *log, const char *table, const char *columns)
{
        sqlite3_stmt *st = NULL;
        char *names = NULL, *sql;
        int e;

        /* The old table's columns (migrations before this one added any it lacked). */
        sql = sqlite3_mprintf("SELECT group_concat('\"' || name || '\"', ',')"
                              " FROM pragma_table_info(%Q)", table);
        if (!sql)
                return -ENOMEM;
        e = prep(log, &st, sql);
        sqlite3_free(sql);
        if (e < 0)
                return e;
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
                names = sqlite3_mprintf("%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        if (!names)
                return -EUCLEAN;
        sql = sqlite3_mprintf("CREATE TABLE \"%w_new\"%s;"
                              " INSERT INTO \"%w_new\"(%s) SELECT %s FROM \"%w\";"
                              " DROP TABLE \"%w\"; ALTER TABLE \"%w_new\" RENAME TO \"%w\"",
                              table, columns, table, names, names, table, table, table, table);
        sqlite3_free(names);
        if (!sql)
                return -ENOMEM;
        e = oplog_exec(log, sql);
        sqlite3_free(sql);
        return e;
}

/* Whether @table's ids are AUTOINCREMENT (1), not (0), or -errno. */
static int ids_autoincrement(struct oplog *log, const char *table)
{
        char *sql = sqlite3_mprintf("SELECT sql LIKE '%%AUTOINCREMENT%%' FROM sqlite_master"
                                    " WHERE type='table' AND name=%Q", table);
        int64_t v = 0;
        int e;

        if (!sql)
                return -ENOMEM;
        e = query_int(log, &v, sql, 0);
        sqlite3_free(sql);
        return e < 0 ? e : v != 0;
}

/*
 * A log made before ids were AUTOINCREMENT (see OBJECTS_COLUMNS) gets its
 * objects and conflicts tables rebuilt with them, in one transaction: rows,
 * ids and indexes as they were, the next id past the largest kept.
 */
static int make_ids_never_reused(struct oplog *log)
{
        int objects = ids_autoincrement(log, "objects");
        int conflicts = ids_autoincrement(log, "conflicts");
        int e;

        if (objects < 0 || conflicts < 0)
                return objects < 0 ? objects : conflicts;
        if (objects && conflicts)
                return 0;
        e = oplog_begin(log);
        if (e < 0)
                return e;
        if (!objects)
                e = rebuild_autoincrement(log, "objects", OBJECTS_COLUMNS);
        if (e >= 0 && !conflicts)
                e = rebuild_autoincrement(log, "conflicts", CONFLICTS_COLUMNS);
        /* The indexes went with the old tables. */
        if (e >= 0)
                e = oplog_exec(log, schema);
        if (e >= 0)
                e = oplog_exec(log, objects_cino_index);
        if (e >= 0)
                e = oplog_exec(log, "INSERT OR REPLACE INTO meta(key, value) VALUES"
                                    " ('format', '" LOG_FORMAT "')");
        if (e < 0) {
                oplog_rollback(log);
                return e;
        }
        return oplog_commit(log);
}

/* -EPROTONOSUPPORT when the log was written in a format newer than this code's. */
static int check_format(struct oplog *log)
{
        sqlite3_stmt *st = NULL;
        int e, rc;

        e = prep(log, &st, "SELECT CAST(value AS INTEGER) FROM meta WHERE key='format'");
        if (e < 0)
                return e;
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && sqlite3_column_int64(st, 0) > LOG_FORMAT_NUMBER)
                e = -EPROTONOSUPPORT;
        else if (rc != SQLITE_ROW && rc != SQLITE_DONE)
                e = oplog_sqlite_errno(rc);
        sqlite3_finalize(st);
        return e;
}

/* Removes content files that no committed row names (a crash before a commit). */
static int sweep_content(struct oplog *log)
{
        int dfd = dup(log->content_fd);
        struct dirent *de;
        DIR *d;

        if (dfd < 0)
                return -errno;
        d = fdopendir(dfd);
        if (!d) {
                close(dfd);
                return -errno;
        }
        log->content_bytes = 0;
        while ((de = readdir(d))) {
                char *end;
                uint64_t seq;
                int64_t size;
                int found;

                if (de->d_name[0] == '.') {
                        /* A link or copy a crash left before its rename. */
                        if (!strncmp(de->d_name, ".tmp-", 5))
                                (void)unlinkat(log->content_fd, de->d_name, 0);
                        continue;
                }
                seq = strtoull(de->d_name, &end, 10);
                found = *end ? 0 : query_int(log, &size,
                        "SELECT size FROM ops WHERE seq=?1 AND kind=1", 1, (int64_t)seq);
                if (found == 1)
                        log->content_bytes += (uint64_t)size;
                else if (found == 0)
                        (void)unlinkat(log->content_fd, de->d_name, 0);
        }
        closedir(d);
        return 0;
}

/*
 * Whether content records can name containers by file handle: the log opens
 * its own directory by handle (the privilege open_by_handle_at() needs).
 */
static void probe_handles(struct oplog *log)
{
        union {
                struct file_handle h;
                char space[sizeof(struct file_handle) + MAX_HANDLE_SZ];
        } fh;
        int fd;

        log->handles = false;
        if (log->opts.copy_content)
                return;
        fh.h.handle_bytes = MAX_HANDLE_SZ;
        if (name_to_handle_at(log->dir_fd, "", &fh.h, &log->mount_id, AT_EMPTY_PATH) < 0)
                return;
        fd = open_by_handle_at(log->dir_fd, &fh.h, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                close(fd);
                log->handles = true;
        }
}

/*
 * A checkpoint (two syncs, and the pages written again into log.db) every
 * 4 MiB of WAL rather than SQLite's 1 MiB: a page many records change (the
 * sequence, an index's leaf) is copied once per checkpoint.  The WAL counts
 * against max_bytes: a small bound keeps SQLite's interval.
 */
static int set_checkpoint_interval(struct oplog *log)
{
        uint64_t pages = 4096;
        char sql[64];

        if (log->opts.max_bytes && log->opts.max_bytes / 4096 < pages)
                pages = log->opts.max_bytes / 4096 > 1000 ? log->opts.max_bytes / 4096 : 1000;
        snprintf(sql, sizeof(sql), "PRAGMA wal_autocheckpoint=%" PRIu64, pages);
        return oplog_exec(log, sql);
}

/* ---- deferred creates (oplog_record_create_deferred()): the count of their containers ---- */

/* Opens the container a row names by file handle (@blob, @n bytes); -ESTALE: gone. */
static int open_handle_blob(struct oplog *log, const void *blob, size_t n)
{
        union {
                struct file_handle h;
                char space[sizeof(struct file_handle) + MAX_HANDLE_SZ];
        } fh;
        int fd;

        if (n < sizeof(fh.h) || n > sizeof(fh))
                return -EUCLEAN;
        memcpy(&fh, blob, n);
        if (sizeof(fh.h) + fh.h.handle_bytes != n)
                return -EUCLEAN;
        fd = open_by_handle_at(log->dir_fd, &fh.h, O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* The bytes counted for deferred create @lid's container, and whether it is one. */
static bool deferred_counted(struct oplog *log, uint64_t lid, uint64_t *size)
{
        gpointer v;

        if (!g_hash_table_lookup_extended(log->deferred, GSIZE_TO_POINTER(lid), NULL, &v))
                return false;
        *size = GPOINTER_TO_SIZE(v);
        return true;
}

/* Counts @size bytes for deferred create @lid's container (instead of what it counted). */
static void deferred_count(struct oplog *log, uint64_t lid, uint64_t size)
{
        uint64_t old = 0;

        deferred_counted(log, lid, &old);
        log->content_bytes = log->content_bytes - (old < log->content_bytes ? old : log->content_bytes)
                             + size;
        g_hash_table_insert(log->deferred, GSIZE_TO_POINTER(lid), GSIZE_TO_POINTER(size));
}

/* @lid is no deferred create any more (settled, cancelled): its count goes. */
static void deferred_forget(struct oplog *log, uint64_t lid)
{
        uint64_t old;

        if (!deferred_counted(log, lid, &old))
                return;
        log->content_bytes -= old < log->content_bytes ? old : log->content_bytes;
        g_hash_table_remove(log->deferred, GSIZE_TO_POINTER(lid));
}

/* A log opened again: its deferred creates, their containers' bytes counted. */
static int count_deferred(struct oplog *log)
{
        sqlite3_stmt *st = NULL;
        int rc, e;

        e = prep(log, &st, "SELECT lid, container FROM ops WHERE kind=2 AND state=0"
                           " AND container IS NOT NULL");
        if (e < 0)
                return e;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                int fd = open_handle_blob(log, sqlite3_column_blob(st, 1),
                                          (size_t)sqlite3_column_bytes(st, 1));
                struct stat cst;
                uint64_t size = 0;

                if (fd >= 0 && fstat(fd, &cst) == 0)
                        size = (uint64_t)cst.st_size;
                if (fd >= 0)
                        close(fd);
                deferred_count(log, (uint64_t)sqlite3_column_int64(st, 0), size);
        }
        return rows_end(st, rc, 0);
}

int oplog_open(struct oplog **out, const char *dir, const struct oplog_options *opts)
{
        struct oplog_options defaults = OPLOG_OPTIONS_INIT;
        fcache_merge_store_options so = FCACHE_MERGE_STORE_OPTIONS_INIT;
        struct oplog *log;
        char *path = NULL;
        int e;

        if (!out || !dir)
                return -EINVAL;
        if (opts && opts->version != OPLOG_OPTIONS_VERSION)
                return -EINVAL;
        log = calloc(1, sizeof(*log));
        if (!log)
                return -ENOMEM;
        log->opts = opts ? *opts : defaults;
        log->dir_fd = log->content_fd = log->wal_fd = -1;
        log->deferred = g_hash_table_new(g_direct_hash, g_direct_equal);
        pthread_cond_init(&log->sync_done, NULL);
        log->dir = strdup(dir);
        if (!log->dir) {
                e = -ENOMEM;
                goto fail;
        }
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                e = -errno;
                goto fail;
        }
        log->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (log->dir_fd < 0) {
                e = -errno;
                goto fail;
        }
        if (mkdirat(log->dir_fd, "content", 0700) < 0 && errno != EEXIST) {
                e = -errno;
                goto fail;
        }
        log->content_fd = openat(log->dir_fd, "content", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (log->content_fd < 0) {
                e = -errno;
                goto fail;
        }
        if (asprintf(&path, "%s/bases", dir) < 0) {
                path = NULL;
                e = -ENOMEM;
                goto fail;
        }
        if (log->opts.no_fsync)
                so.flags |= FCACHE_MERGE_STORE_NO_FSYNC;
        e = fcache_merge_store_open(&log->store, path, &so);
        free(path);
        path = NULL;
        if (e < 0)
                goto fail;
        if (asprintf(&path, "%s/log.db", dir) < 0) {
                path = NULL;
                e = -ENOMEM;
                goto fail;
        }
        e = oplog_sqlite_errno(sqlite3_open_v2(path, &log->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL));
        free(path);
        path = NULL;
        if (e < 0)
                goto fail;
        sqlite3_busy_timeout(log->db, 5000);
        /* One process owns a log; exclusive locking spares the per-transaction file locks. */
        e = oplog_exec(log, "PRAGMA locking_mode=EXCLUSIVE");
        /* Small pages: each record commits a few of them to the WAL (no effect on an old log). */
        if (e >= 0)
                e = oplog_exec(log, "PRAGMA page_size=1024");
        if (e >= 0)
                e = oplog_exec(log, "PRAGMA journal_mode=WAL");
        if (e >= 0)
                e = oplog_exec(log, log->opts.no_fsync ? "PRAGMA synchronous=OFF"
                                                       : "PRAGMA synchronous=NORMAL");
        if (e >= 0)
                e = set_checkpoint_interval(log);
        if (e >= 0)
                e = oplog_exec(log, schema);
        if (e >= 0)
                e = check_format(log);
        if (e >= 0)
                e = add_container_column(log);
        if (e >= 0)
                e = add_conflict_time_columns(log);
        if (e >= 0)
                e = add_cached_ino_column(log);
        if (e >= 0)
                e = make_ids_never_reused(log);
        if (e >= 0)
                e = oplog_exec(log, "INSERT OR IGNORE INTO meta(key, value) VALUES"
                                    " ('format', '" LOG_FORMAT "')");
        /* An older log's number raised; best effort, and no write at all for
         * a current one: a log must open on a full disk, to be read. */
        if (e >= 0)
                (void)oplog_exec(log, "UPDATE meta SET value='" LOG_FORMAT "' WHERE key='format'"
                                      " AND CAST(value AS INTEGER) < " LOG_FORMAT);
        if (e >= 0)
                e = oplog_exec(log, "INSERT OR IGNORE INTO objects(lid, local, type, srv_parent,"
                                    " srv_name) VALUES (1, 0, 16384, 0, '')");
        if (e >= 0)
                e = load_token(log);
        if (e >= 0)
                e = sweep_content(log);
        if (e < 0)
                goto fail;
        probe_handles(log);
        e = count_container_bytes(log);
        if (e >= 0)
                e = count_deferred(log);
        if (e < 0)
                goto fail;
        *out = log;
        return 0;
fail:
        oplog_close(log);
        return e;
}

void oplog_close(struct oplog *log)
{
        if (!log)
                return;
        for (size_t i = 0; i < sizeof(log->stmts) / sizeof(log->stmts[0]); i++)
                sqlite3_finalize(log->stmts[i]);
        if (log->db)
                sqlite3_close_v2(log->db);
        fcache_merge_store_free(log->store);
        if (log->content_fd >= 0)
                close(log->content_fd);
        if (log->dir_fd >= 0)
                close(log->dir_fd);
        if (log->wal_fd >= 0)
                close(log->wal_fd);
        pthread_cond_destroy(&log->sync_done);
        if (log->deferred)
                g_hash_table_destroy(log->deferred);
        free(log->dir);
        free(log);
}

fcache_merge_store *oplog_store(struct oplog *log)
{
        return log ? log->store : NULL;
}

int oplog_put_base_fd(struct oplog *log, int fd, char out[FCACHE_MERGE_ID_SIZE])
{
        if (!log || fd < 0 || !out)
                return -EINVAL;
        return fcache_merge_store_put_fd(out, log->store, fd);
}

int oplog_size(struct oplog *log, uint64_t *out)
{
        struct stat st;
        uint64_t total = log->content_bytes;

        if (fstatat(log->dir_fd, "log.db", &st, 0) == 0)
                total += (uint64_t)st.st_size;
        if (fstatat(log->dir_fd, "log.db-wal", &st, 0) == 0)
                total += (uint64_t)st.st_size;
        *out = total;
        return 0;
}

/* -ENOSPC if @extra more bytes would take the log past its bound. */
static int check_room(struct oplog *log, uint64_t extra)
{
        uint64_t used;

        if (!log->opts.max_bytes)
                return 0;
        oplog_size(log, &used);
        return used + extra + 4096 > log->opts.max_bytes ? -ENOSPC : 0;
}

/* ------------------------------------------------------------------------ */
/* Objects                                                                  */
/* ------------------------------------------------------------------------ */

void oplog_object_clear(struct oplog_object *o)
{
        free(o->srv_name);
        memset(o, 0, sizeof(*o));
}

static void copy_id(char dst[FCACHE_MERGE_ID_SIZE], const unsigned char *src)
{
        if (src && strlen((const char *)src) < FCACHE_MERGE_ID_SIZE)
                strcpy(dst, (const char *)src);
        else
                dst[0] = '\0';
}

int oplog_object_load(struct oplog *log, uint64_t lid, struct oplog_object *out)
{
        struct oplog_object o = { 0 };
        sqlite3_stmt *st = NULL;
        int rc, e;

        e = prep_cached(log, STMT_OBJECT_LOAD, &st,
                        "SELECT local, type, srv_parent, srv_name, b_ino, b_size, b_mtime,"
                        " b_ctime, b_mode, b_uid, b_gid, b_nlink, b_content, orig_content,"
                        " conflict FROM objects WHERE lid=?1");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        rc = sqlite3_step(st);
        if (rc != SQLITE_ROW) {
                release_cached(st);
                return rc == SQLITE_DONE ? -ENOENT : oplog_sqlite_errno(rc);
        }
        o.lid = lid;
        o.local = sqlite3_column_int(st, 0);
        o.type = (uint32_t)sqlite3_column_int(st, 1);
        o.srv_parent = (uint64_t)sqlite3_column_int64(st, 2);
        if (sqlite3_column_type(st, 3) != SQLITE_NULL) {
                o.srv_name = strdup((const char *)sqlite3_column_text(st, 3));
                if (!o.srv_name) {
                        release_cached(st);
                        return -ENOMEM;
                }
        }
        o.base.ino = (uint64_t)sqlite3_column_int64(st, 4);
        o.base.size = (uint64_t)sqlite3_column_int64(st, 5);
        o.base.mtime_ns = sqlite3_column_int64(st, 6);
        o.base.ctime_ns = sqlite3_column_int64(st, 7);
        o.base.mode = (uint32_t)sqlite3_column_int64(st, 8);
        o.base.uid = (uint32_t)sqlite3_column_int64(st, 9);
        o.base.gid = (uint32_t)sqlite3_column_int64(st, 10);
        o.base.nlink = (uint32_t)sqlite3_column_int64(st, 11);
        copy_id(o.base.content, sqlite3_column_text(st, 12));
        copy_id(o.orig, sqlite3_column_text(st, 13));
        o.conflict = (uint64_t)sqlite3_column_int64(st, 14);
        release_cached(st);
        *out = o;
        return 0;
}

int oplog_objects_of_pending(struct oplog *log,
                             int (*fn)(void *ud, struct oplog_object *o), void *ud)
{
        sqlite3_stmt *st = NULL;
        int rc, e;

        e = prep(log, &st, "SELECT lid, local, type, srv_parent, srv_name, b_ino, b_size, b_mtime,"
                           " b_ctime, b_mode, b_uid, b_gid, b_nlink, b_content, orig_content,"
                           " conflict FROM objects WHERE lid IN (SELECT lid FROM ops WHERE state=0"
                           " UNION SELECT parent FROM ops WHERE state=0"
                           " UNION SELECT parent2 FROM ops WHERE state=0"
                           " UNION SELECT other FROM ops WHERE state=0)");
        if (e < 0)
                return e;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                struct oplog_object *o = calloc(1, sizeof(*o));

                if (!o) {
                        e = -ENOMEM;
                        break;
                }
                o->lid = (uint64_t)sqlite3_column_int64(st, 0);
                o->local = sqlite3_column_int(st, 1);
                o->type = (uint32_t)sqlite3_column_int(st, 2);
                o->srv_parent = (uint64_t)sqlite3_column_int64(st, 3);
                if (sqlite3_column_type(st, 4) != SQLITE_NULL &&
                    !(o->srv_name = strdup(col_text(st, 4)))) {
                        free(o);
                        e = -ENOMEM;
                        break;
                }
                o->base.ino = (uint64_t)sqlite3_column_int64(st, 5);
                o->base.size = (uint64_t)sqlite3_column_int64(st, 6);
                o->base.mtime_ns = sqlite3_column_int64(st, 7);
                o->base.ctime_ns = sqlite3_column_int64(st, 8);
                o->base.mode = (uint32_t)sqlite3_column_int64(st, 9);
                o->base.uid = (uint32_t)sqlite3_column_int64(st, 10);
                o->base.gid = (uint32_t)sqlite3_column_int64(st, 11);
                o->base.nlink = (uint32_t)sqlite3_column_int64(st, 12);
                copy_id(o->base.content, sqlite3_column_text(st, 13));
                copy_id(o->orig, sqlite3_column_text(st, 14));
                o->conflict = (uint64_t)sqlite3_column_int64(st, 15);
                e = fn(ud, o); /* takes @o */
                if (e < 0)
                        break;
        }
        return rows_end(st, rc, e);
}

int oplog_object_save(struct oplog *log, const struct oplog_object *o)
{
        sqlite3_stmt *st = NULL;
        int e;

        e = prep_cached(log, STMT_OBJECT_SAVE, &st,
                        "UPDATE objects SET srv_parent=?2, srv_name=?3, b_ino=?4, b_size=?5,"
                        " b_mtime=?6, b_ctime=?7, b_mode=?8, b_uid=?9, b_gid=?10, b_nlink=?11,"
                        " b_content=?12, conflict=?13, local=?14 WHERE lid=?1");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)o->lid);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)o->srv_parent);
        bind_text(st, 3, o->srv_name);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)o->base.ino);
        sqlite3_bind_int64(st, 5, (sqlite3_int64)o->base.size);
        sqlite3_bind_int64(st, 6, o->base.mtime_ns);
        sqlite3_bind_int64(st, 7, o->base.ctime_ns);
        sqlite3_bind_int64(st, 8, o->base.mode);
        sqlite3_bind_int64(st, 9, o->base.uid);
        sqlite3_bind_int64(st, 10, o->base.gid);
        sqlite3_bind_int64(st, 11, o->base.nlink);
        bind_text(st, 12, o->base.content);
        bind_id(st, 13, o->conflict);
        sqlite3_bind_int(st, 14, o->local);
        return step_done_cached(st);
}

int oplog_set_root(struct oplog *log, const struct oplog_version *base)
{
        struct oplog_object o;
        int e;

        if (!log || !base || !S_ISDIR(base->mode))
                return -EINVAL;
        e = oplog_object_load(log, OPLOG_ROOT, &o);
        if (e < 0)
                return e;
        o.base = *base;
        e = oplog_object_save(log, &o);
        oplog_object_clear(&o);
        return e;
}

static int find_ino(struct oplog *log, uint64_t ino, bool cached_first, uint64_t *out_lid)
{
        int64_t lid;
        int e;

        if (!log || !out_lid)
                return -EINVAL;
        /* By the inode it has on the server now, or had when it was cached. */
        e = query_int(log, &lid, cached_first ?
                      "SELECT lid FROM objects WHERE local=0 AND (b_ino=?1 OR c_ino=?1)"
                      " ORDER BY c_ino IS ?1 DESC, lid DESC LIMIT 1" :
                      "SELECT lid FROM objects WHERE local=0 AND (b_ino=?1 OR"
                      " c_ino=?1) ORDER BY lid DESC LIMIT 1", 1, (int64_t)ino);
        if (e < 0)
                return e;
        if (e == 0)
                return -ENOENT;
        *out_lid = (uint64_t)lid;
        return 0;
}

int oplog_find_ino(struct oplog *log, uint64_t ino, uint64_t *out_lid)
{
        return find_ino(log, ino, false, out_lid);
}

int oplog_find_cached_ino(struct oplog *log, uint64_t ino, uint64_t *out_lid)
{
        return find_ino(log, ino, true, out_lid);
}

bool oplog_became(struct oplog *log, uint64_t was, uint64_t now)
{
        int64_t v;

        if (was == now)
                return false;
        return query_int(log, &v, "SELECT 1 FROM objects WHERE local=0 AND c_ino=?1 AND"
                         " b_ino=?2 LIMIT 1", 2, (int64_t)was, (int64_t)now) == 1;
}

bool oplog_object_is(struct oplog *log, uint64_t lid, uint64_t ino)
{
        int64_t v;

        return query_int(log, &v, "SELECT 1 FROM objects WHERE lid=?1 AND local=0 AND b_ino=?2",
                         2, (int64_t)lid, (int64_t)ino) == 1;
}

bool oplog_ino_known(struct oplog *log, uint64_t ino)
{
        int64_t v;

        if (query_int(log, &v, "SELECT 1 FROM objects WHERE b_ino=?1 LIMIT 1", 1,
                      (int64_t)ino) == 1)
                return true;
        return query_int(log, &v, "SELECT 1 FROM ops WHERE intent=?1 LIMIT 1", 1,
                         (int64_t)ino) == 1;
}

static bool valid_name(const char *name)
{
        size_t n;

        if (!name)
                return false;
        n = strlen(name);
        return n > 0 && n <= NAME_MAX && !strchr(name, '/') && strcmp(name, ".") != 0 &&
               strcmp(name, "..") != 0;
}

static int insert_object(struct oplog *log, bool local, uint32_t type, uint64_t parent,
                         const char *name, const struct oplog_version *base, uint64_t *out)
{
        sqlite3_stmt *st = NULL;
        int e;

        e = prep_cached(log, STMT_INSERT_OBJECT, &st,
                        "INSERT INTO objects(local, type, srv_parent, srv_name, b_ino, b_size,"
                        " b_mtime, b_ctime, b_mode, b_uid, b_gid, b_nlink, b_content,"
                        " orig_content, c_ino) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,"
                        " ?11, ?12, ?13, ?13, CASE WHEN ?1 THEN NULL ELSE ?5 END)");
        if (e < 0)
                return e;
        sqlite3_bind_int(st, 1, local);
        sqlite3_bind_int64(st, 2, type);
        if (local) {
                /* Not on the server until its create applies. */
                sqlite3_bind_int64(st, 3, 0);
                sqlite3_bind_null(st, 4);
        } else {
                sqlite3_bind_int64(st, 3, (sqlite3_int64)parent);
                bind_text(st, 4, name);
        }
        if (base) {
                sqlite3_bind_int64(st, 5, (sqlite3_int64)base->ino);
                sqlite3_bind_int64(st, 6, (sqlite3_int64)base->size);
                sqlite3_bind_int64(st, 7, base->mtime_ns);
                sqlite3_bind_int64(st, 8, base->ctime_ns);
                sqlite3_bind_int64(st, 9, base->mode);
                sqlite3_bind_int64(st, 10, base->uid);
                sqlite3_bind_int64(st, 11, base->gid);
                sqlite3_bind_int64(st, 12, base->nlink);
                bind_text(st, 13, base->content);
        }
        e = step_done_cached(st);
        if (e < 0)
                return e;
        *out = (uint64_t)sqlite3_last_insert_rowid(log->db);
        return 0;
}

int oplog_object(struct oplog *log, uint64_t parent, const char *name,
                 const struct oplog_version *base, uint64_t *out_lid)
{
        uint64_t lid;
        int e;

        if (!log || !base || !out_lid || !parent || !valid_name(name))
                return -EINVAL;
        if (base->content[0] && !fcache_merge_id_is_valid(base->content))
                return -EINVAL;
        e = oplog_find_cached_ino(log, base->ino, &lid);
        if (e == 0) {
                *out_lid = lid;
                return 0;
        }
        if (e != -ENOENT)
                return e;
        e = check_room(log, 512);
        if (e < 0)
                return e;
        e = insert_object(log, false, base->mode & S_IFMT, parent, name, base, &lid);
        if (e < 0)
                return e;
        *out_lid = lid;
        return 0;
}

int oplog_object_alias(struct oplog *log, uint64_t lid, uint64_t parent, const char *name)
{
        sqlite3_stmt *st = NULL;
        int e;

        if (!log || !lid || !parent || !valid_name(name))
                return -EINVAL;
        e = prep_cached(log, STMT_ALIAS, &st,
                        "INSERT OR IGNORE INTO aliases(lid, parent, name) VALUES (?1, ?2, ?3)");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)parent);
        bind_text(st, 3, name);
        return step_done_cached(st);
}

/* An alias of @lid at parent/name, if the object already has one (a name
 * given to an object of several, for replay to follow it by). */
static int alias_if_several(struct oplog *log, uint64_t lid, uint64_t parent, const char *name)
{
        sqlite3_stmt *st = NULL;
        int e;

        e = prep_cached(log, STMT_ALIAS_IF_SEVERAL, &st,
                        "INSERT OR IGNORE INTO aliases(lid, parent, name) SELECT ?1, ?2, ?3"
                        " WHERE EXISTS (SELECT 1 FROM aliases WHERE lid=?1)");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)parent);
        bind_text(st, 3, name);
        return step_done_cached(st);
}

int oplog_mark_in_doubt(struct oplog *log, uint64_t lid)
{
        sqlite3_stmt *st = NULL;
        int e;

        if (!log || !lid)
                return -EINVAL;
        e = prep(log, &st, "UPDATE ops SET flags=flags|?2 WHERE seq=(SELECT max(seq) FROM ops"
                           " WHERE lid=?1 AND state=0 AND kind IN (1, 2, 3, 4, 8, 9, 10, 11, 12))");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        sqlite3_bind_int64(st, 2, OPLOG_IN_DOUBT);
        return step_done(st);
}

/* ------------------------------------------------------------------------ */
/* Appending records                                                        */
/* ------------------------------------------------------------------------ */

struct row {
        enum oplog_kind kind;
        uint64_t lid, parent, parent2, other;
        const char *name, *name2;
        unsigned flags, mask;
        uint32_t mode, uid, gid;
        uint64_t rdev;
        int64_t atime, mtime;
        uint64_t size;
        bool has_size;
        const void *container;  /* content: the container's file handle */
        size_t container_size;
        const char *content;
        const char *xname;
        const void *xvalue;
        size_t xsize;
        bool has_xvalue;
};

static int insert_row(struct oplog *log, const struct row *r, uint64_t *out_seq)
{
        sqlite3_stmt *st = NULL;
        int e;

        e = prep_cached(log, STMT_INSERT_ROW, &st,
                        "INSERT INTO ops(kind, lid, parent, name, parent2, name2, other,"
                        " flags, mask, mode, uid, gid, rdev, atime, mtime, size, content, xname,"
                        " xvalue, container) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,"
                        " ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)");
        if (e < 0)
                return e;
        sqlite3_bind_int(st, 1, r->kind);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)r->lid);
        bind_id(st, 3, r->parent);
        bind_text(st, 4, r->name);
        bind_id(st, 5, r->parent2);
        bind_text(st, 6, r->name2);
        bind_id(st, 7, r->other);
        sqlite3_bind_int64(st, 8, r->flags);
        sqlite3_bind_int64(st, 9, r->mask);
        sqlite3_bind_int64(st, 10, r->mode);
        sqlite3_bind_int64(st, 11, r->uid);
        sqlite3_bind_int64(st, 12, r->gid);
        sqlite3_bind_int64(st, 13, (sqlite3_int64)r->rdev);
        sqlite3_bind_int64(st, 14, r->atime);
        sqlite3_bind_int64(st, 15, r->mtime);
        if (r->has_size)
                sqlite3_bind_int64(st, 16, (sqlite3_int64)r->size);
        bind_text(st, 17, r->content);
        bind_text(st, 18, r->xname);
        if (r->has_xvalue)
                sqlite3_bind_blob(st, 19, r->xsize ? r->xvalue : "", (int)r->xsize,
                                  SQLITE_TRANSIENT);
        if (r->container)
                sqlite3_bind_blob(st, 20, r->container, (int)r->container_size, SQLITE_TRANSIENT);
        e = step_done_cached(st);
        if (e < 0)
                return e;
        if (out_seq)
                *out_seq = (uint64_t)sqlite3_last_insert_rowid(log->db);
        return 0;
}

/* Commits, passing the "before commit" crash point. */
static int commit(struct oplog *log)
{
        fault_point(FAULT_OPLOG_BEFORE_COMMIT);
        return oplog_commit(log);
}

static int object_exists(struct oplog *log, uint64_t lid)
{
        sqlite3_stmt *st = NULL;
        int rc, e;

        e = prep_cached(log, STMT_EXISTS, &st, "SELECT 1 FROM objects WHERE lid=?1");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        rc = sqlite3_step(st);
        release_cached(st);
        return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : oplog_sqlite_errno(rc);
}

/* A content row coalescing or compaction deleted. */
struct drop {
        uint64_t seq;
        uint64_t size;
        bool copy;              /* its content is a copy, content/SEQ */
};

/* A list of content rows to drop after the commit, grown by each coalescing step. */
struct drops {
        struct drop *v;
        size_t n;
};

/* Adds the rows of @st (seq, size, whether a copy; bound, not stepped yet) to @d. */
static int drops_add_rows(struct drops *d, sqlite3_stmt *st)
{
        int rc;

        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                struct drop *nv = realloc(d->v, (d->n + 1) * sizeof(*nv));

                if (!nv)
                        return -ENOMEM;
                d->v = nv;
                d->v[d->n++] = (struct drop){
                        .seq = (uint64_t)sqlite3_column_int64(st, 0),
                        .size = (uint64_t)sqlite3_column_int64(st, 1),
                        .copy = sqlite3_column_int(st, 2) != 0,
                };
        }
        return rc == SQLITE_DONE ? 0 : oplog_sqlite_errno(rc);
}

/* Adds the content rows of @lid selected by @where to @d. */
static int drops_add_where(struct oplog *log, struct drops *d, uint64_t lid, const char *where)
{
        sqlite3_stmt *st = NULL;
        char *sql = NULL;
        int e;

        if (asprintf(&sql, "SELECT seq, ifnull(size, 0), container IS NULL FROM ops"
                           " WHERE kind=1 AND %s", where) < 0)
                return -ENOMEM;
        e = prep(log, &st, sql);
        free(sql);
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        e = drops_add_rows(d, st);
        sqlite3_finalize(st);
        return e;
}

static int drops_add_lid(struct oplog *log, struct drops *d, uint64_t lid)
{
        return drops_add_where(log, d, lid, "lid=?1 AND state=0");
}

static void content_bytes_sub(struct oplog *log, uint64_t n)
{
        log->content_bytes = log->content_bytes >= n ? log->content_bytes - n : 0;
}

/* After a commit: the copies of the rows deleted go, and their bytes from the count. */
static void drop_content_files(struct oplog *log, struct drops *d)
{
        for (size_t i = 0; i < d->n; i++) {
                char name[32];
                struct stat st;

                if (!d->v[i].copy) {
                        content_bytes_sub(log, d->v[i].size);
                        continue;
                }
                snprintf(name, sizeof(name), "%" PRIu64, d->v[i].seq);
                if (fstatat(log->content_fd, name, &st, 0) == 0)
                        content_bytes_sub(log, (uint64_t)st.st_size);
                (void)unlinkat(log->content_fd, name, 0);
        }
        free(d->v);
        d->v = NULL;
        d->n = 0;
}

/*
 * If @lid was created offline and nothing outside its own pending records
 * refers to it, cancels the object: returns 1.  Returns 0 when it cannot be
 * cancelled (the caller appends the unlink), or -errno.
 */
static int cancel_local(struct oplog *log, struct drops *d, uint64_t lid)
{
        int64_t v;
        int e;

        e = query_int(log, &v, "SELECT names FROM objects WHERE lid=?1 AND local=1", 1,
                      (int64_t)lid);
        if (e <= 0)
                return e;
        if (v > 1)
                return 0;
        /* Not while its create is being replayed. */
        if (log->replaying) {
                e = query_int(log, &v, "SELECT count(*) FROM ops WHERE lid=?1 AND seq<=?2", 2,
                              (int64_t)lid, (int64_t)log->replaying);
                if (e < 0 || v)
                        return e < 0 ? e : 0;
        }
        /* Its create must still be pending, and nothing of it applied; one in
         * doubt may be on the server already (oplog_mark_in_doubt()). */
        e = query_int(log, &v, "SELECT count(*) FROM ops WHERE lid=?1 AND state=0 AND"
                               " kind IN (2, 3, 4, 12) AND (flags & 65536)=0", 1, (int64_t)lid);
        if (e < 0 || v == 0)
                return e < 0 ? e : 0;
        e = query_int(log, &v, "SELECT count(*) FROM ops WHERE lid=?1 AND state<>0", 1,
                      (int64_t)lid);
        if (e < 0 || v)
                return e < 0 ? e : 0;
        e = query_int(log, &v, "SELECT count(*) FROM ops WHERE state=0 AND ((kind=5 AND lid=?1)"
                               " OR (kind=8 AND (flags & 2) AND (lid=?1 OR other=?1))"
                               " OR parent=?1 OR parent2=?1 OR (other=?1 AND kind<>8))", 1,
                      (int64_t)lid);
        if (e < 0 || v)
                return e < 0 ? e : 0;
        e = drops_add_lid(log, d, lid);
        if (e < 0)
                return e;
        /* A rename of it over a server object still removed that object. */
        e = exec_ids(log, "UPDATE ops SET kind=6, lid=other, parent=parent2, name=name2,"
                          " parent2=NULL, name2=NULL, other=NULL, flags=0"
                          " WHERE lid=?1 AND kind=8 AND state=0 AND other IS NOT NULL", 1,
                     (int64_t)lid);
        if (e >= 0)
                e = exec_ids(log, "DELETE FROM ops WHERE lid=?1 AND state=0", 1, (int64_t)lid);
        if (e >= 0)
                e = exec_ids(log, "UPDATE ops SET other=NULL WHERE other=?1 AND state=0", 1,
                             (int64_t)lid);
        if (e >= 0)
                e = exec_ids(log, "DELETE FROM aliases WHERE lid=?1", 1, (int64_t)lid);
        if (e >= 0)
                e = exec_ids(log, "DELETE FROM objects WHERE lid=?1", 1, (int64_t)lid);
        if (e >= 0)
                deferred_forget(log, lid);
        return e < 0 ? e : 1;
}

/* A server object lost a name: with one link its pending edits no longer matter. */
static int drop_edits_of_removed(struct oplog *log, struct drops *d, uint64_t lid)
{
        int64_t v;
        int e;

        if (log->replaying)
                return 0;       /* they may be on their way: they replay, then the unlink */
        e = query_int(log, &v, "SELECT b_nlink FROM objects WHERE lid=?1 AND local=0", 1,
                      (int64_t)lid);
        if (e <= 0 || v > 1)
                return e < 0 ? e : 0;
        e = query_int(log, &v, "SELECT count(*) FROM ops WHERE state=0 AND kind=5 AND lid=?1",
                      1, (int64_t)lid);
        if (e < 0 || v)
                return e < 0 ? e : 0;
        e = drops_add_lid(log, d, lid);
        if (e < 0)
                return e;
        /* One in doubt stays: replayed first, it takes the server's state as
         * what the unlink removes (oplog_mark_in_doubt()). */
        return exec_ids(log, "DELETE FROM ops WHERE lid=?1 AND state=0 AND kind IN (1, 9, 10, 11)"
                             " AND (flags & 65536)=0", 1, (int64_t)lid);
}

/* Finishes a record: commit, or roll back; then drop the coalesced content files. */
static int finish(struct oplog *log, int e, struct drops *d)
{
        if (e >= 0)
                e = commit(log);
        else
                oplog_rollback(log);
        if (e >= 0) {
                drop_content_files(log, d);
        } else {
                free(d->v);
                d->v = NULL;
        }
        return e;
}

int write_all(int fd, const char *buf, size_t size)
{
        while (size) {
                ssize_t n = write(fd, buf, size);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                buf += n;
                size -= (size_t)n;
        }
        return 0;
}

int oplog_copy_fd(int out, int in)
{
        char buf[65536];
        off_t off = 0;

        for (;;) {
                ssize_t n = copy_file_range(in, &off, out, NULL, 1 << 30, 0);

                if (n == 0)
                        return 0;
                if (n < 0)
                        break;
        }
        if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
                return -errno;
        for (;;) {
                ssize_t n = pread(in, buf, sizeof(buf), off);
                int e;

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        return 0;
                e = write_all(out, buf, (size_t)n);
                if (e < 0)
                        return e;
                off += n;
        }
}

/* Copies @fd into content/NAME, fsynced: a container the log cannot name. */
static int copy_content(struct oplog *log, int fd, const char *name)
{
        int flags = fcntl(fd, F_GETFL), in = fd, out, e;

        /* A container open for writing only is read through a descriptor of its own. */
        if (flags >= 0 && (flags & O_ACCMODE) == O_WRONLY) {
                char path[32];

                snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
                in = open(path, O_RDONLY | O_CLOEXEC);
                if (in < 0)
                        return -errno;
        }
        out = openat(log->content_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (out < 0) {
                e = -errno;
                if (in != fd)
                        close(in);
                return e;
        }
        e = oplog_copy_fd(out, in);
        if (in != fd)
                close(in);
        if (e >= 0 && !log->opts.no_fsync && fsync(out) < 0)
                e = -errno;
        if (close(out) < 0 && e >= 0)
                e = -errno;
        if (e < 0)
                (void)unlinkat(log->content_fd, name, 0);
        return e;
}

/*
 * The file handle of container @fd (struct file_handle, its f_handle after
 * the header) if the log can open it again by that handle: on the log's
 * filesystem, with the privilege open_by_handle_at() needs.  0 or -errno.
 */
static int container_handle_at(struct oplog *log, int dfd, const char *name,
                               struct file_handle *h)
{
        int mnt;

        if (!log->handles)
                return -EOPNOTSUPP;
        h->handle_bytes = MAX_HANDLE_SZ;
        if (name_to_handle_at(dfd, name, h, &mnt, *name ? 0 : AT_EMPTY_PATH) < 0)
                return -errno;
        return mnt == log->mount_id ? 0 : -EXDEV;
}

static int container_handle(struct oplog *log, int fd, struct file_handle *h)
{
        return container_handle_at(log, fd, "", h);
}

/*
 * Whether the last record of @lid is its pending content row naming
 * container @h already: then that record says all there is to say (*seq,
 * *size: the row and the size it counts).
 */
static bool content_recorded(struct oplog *log, uint64_t lid, const struct file_handle *h,
                             uint64_t *seq, uint64_t *size)
{
        sqlite3_stmt *st = NULL;
        bool same = false;

        if (prep_cached(log, STMT_CONTENT_LAST, &st,
                        "SELECT kind, state, intent IS NULL, container, size, seq FROM ops"
                        " WHERE lid=?1 OR other=?1 ORDER BY seq DESC LIMIT 1") < 0)
                return false;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == OPLOG_CONTENT &&
            sqlite3_column_int(st, 1) == OPLOG_PENDING && sqlite3_column_int(st, 2) &&
            (size_t)sqlite3_column_bytes(st, 3) == sizeof(*h) + h->handle_bytes) {
                same = !memcmp(sqlite3_column_blob(st, 3), h, sizeof(*h) + h->handle_bytes);
                *size = (uint64_t)sqlite3_column_int64(st, 4);
                *seq = (uint64_t)sqlite3_column_int64(st, 5);
                same = same && *seq > log->replaying;
        }
        release_cached(st);
        return same;
}

/*
 * The container of pending row @seq is now @size bytes: the count against
 * max_bytes follows.  Not a change of what replay does: it needs no sync
 * (a power loss at worst leaves the old count).
 */
static int content_resized(struct oplog *log, uint64_t seq, uint64_t old, uint64_t size)
{
        bool unsynced = log->unsynced;
        uint64_t commits = log->commits;
        int e = 0;

        if (size > old)
                e = check_room(log, size - old);
        if (e >= 0)
                e = oplog_begin(log);
        if (e >= 0)
                e = exec_ids(log, "UPDATE ops SET size=?2 WHERE seq=?1", 2, (int64_t)seq,
                             (int64_t)size);
        if (e >= 0)
                e = oplog_commit(log);
        else
                oplog_rollback(log);
        if (e < 0)
                return e;
        log->unsynced = unsynced;
        log->commits = commits;
        log->content_bytes = log->content_bytes - (old < log->content_bytes ? old : log->content_bytes)
                             + size;
        return 0;
}

/*
 * Before a new content row of @lid: its pending content rows (but one whose
 * in-place write is under way on the server: it stays, to be finished) go,
 * added to @d.
 */
static int content_replaced(struct oplog *log, struct drops *d, uint64_t lid)
{
        sqlite3_stmt *st = NULL;
        int e;

        e = prep_cached(log, STMT_CONTENT_PENDING, &st,
                        "SELECT seq, ifnull(size, 0), container IS NULL FROM ops"
                        " WHERE kind=1 AND lid=?1 AND state=0 AND intent IS NULL AND seq>?2");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)log->replaying);
        e = drops_add_rows(d, st);
        release_cached(st);
        if (e < 0)
                return e;
        e = prep_cached(log, STMT_CONTENT_DELETE, &st,
                        "DELETE FROM ops WHERE lid=?1 AND kind=1 AND state=0 AND intent IS NULL"
                        " AND seq>?2");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)log->replaying);
        return step_done_cached(st);
}

/* Whether @lid's pending content record is in doubt (1; 0 if none is), or -errno. */
static int content_in_doubt(struct oplog *log, uint64_t lid)
{
        int64_t v;
        int e = query_int(log, &v, "SELECT count(*) FROM ops WHERE lid=?1 AND kind=1 AND"
                                   " state=0 AND (flags & 65536)<>0", 1, (int64_t)lid);

        return e < 0 ? e : v > 0;
}

int oplog_record_content(struct oplog *log, uint64_t lid, int fd)
{
        union {
                struct file_handle h;
                char space[sizeof(struct file_handle) + MAX_HANDLE_SZ];
        } fh;
        struct drops d = { 0 };
        struct row r = { .kind = OPLOG_CONTENT, .lid = lid, .has_size = true };
        char tmp[64], name[32];
        struct stat st;
        bool copied;
        uint64_t seq, recorded;
        int e;

        if (!log || fd < 0 || !lid)
                return -EINVAL;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        copied = container_handle(log, fd, &fh.h) < 0;
        if (!copied && content_recorded(log, lid, &fh.h, &seq, &recorded))
                return recorded == (uint64_t)st.st_size ? 0
                       : content_resized(log, seq, recorded, (uint64_t)st.st_size);
        fault_point(FAULT_OPLOG_BEFORE_DATA);
        r.size = (uint64_t)st.st_size;
        snprintf(tmp, sizeof(tmp), ".tmp-%d-%" PRIu64, getpid(), lid);
        /* A container is not in the log's files, but its bytes count against the bound. */
        e = check_room(log, r.size);
        if (e < 0)
                return e;
        if (copied) {
                e = copy_content(log, fd, tmp);
                if (e < 0)
                        return e;
        } else {
                r.container = &fh.h;
                r.container_size = sizeof(fh.h) + fh.h.handle_bytes;
        }
        e = oplog_begin(log);
        if (e >= 0)
                e = object_exists(log, lid);
        /* The row replaced was in doubt: so is the one replacing it. */
        if (e >= 0 && (e = content_in_doubt(log, lid)) > 0)
                r.flags |= OPLOG_IN_DOUBT;
        /* A row whose in-place write is under way on the server stays, to be finished. */
        if (e >= 0)
                e = content_replaced(log, &d, lid);
        if (e >= 0)
                e = insert_row(log, &r, &seq);
        if (e >= 0 && copied) {
                snprintf(name, sizeof(name), "%" PRIu64, seq);
                if (renameat(log->content_fd, tmp, log->content_fd, name) < 0)
                        e = -errno;
                else
                        log->links_unsynced = true;
        }
        e = finish(log, e, &d);
        if (e < 0) {
                if (copied) {
                        (void)unlinkat(log->content_fd, tmp, 0);
                        (void)unlinkat(log->content_fd, name, 0);
                }
                return e;
        }
        log->content_bytes += r.size;
        return 0;
}

int oplog_object_conflict(struct oplog *log, uint64_t lid, char kind[32])
{
        sqlite3_stmt *st = NULL;
        int rc, e;

        if (!log || !kind)
                return -EINVAL;
        e = prep(log, &st, "SELECT c.kind FROM objects o JOIN conflicts c ON c.id = o.conflict"
                           " WHERE o.lid=?1");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                snprintf(kind, 32, "%s", col_text(st, 0) ? col_text(st, 0) : "");
                e = 1;
        } else {
                e = rc == SQLITE_DONE ? 0 : oplog_sqlite_errno(rc);
        }
        sqlite3_finalize(st);
        return e;
}

int oplog_content_detach(struct oplog *log, uint64_t seq)
{
        char name[32], tmp[64];
        int64_t v;
        int fd, e;

        e = query_int(log, &v, "SELECT 1 FROM ops WHERE seq=?1 AND container IS NOT NULL", 1,
                      (int64_t)seq);
        if (e <= 0)
                return e;
        fd = oplog_content_open(log, seq);
        if (fd == -ESTALE)
                return 0;       /* gone: replay will say so */
        if (fd < 0)
                return fd;
        snprintf(name, sizeof(name), "%" PRIu64, seq);
        snprintf(tmp, sizeof(tmp), ".tmp-%d-%s", getpid(), name);
        e = copy_content(log, fd, tmp);
        close(fd);
        if (e >= 0 && renameat(log->content_fd, tmp, log->content_fd, name) < 0)
                e = -errno;
        if (e >= 0 && !log->opts.no_fsync && fsync(log->content_fd) < 0)
                e = -errno;
        if (e >= 0)
                e = oplog_begin(log);
        if (e >= 0)
                e = exec_ids(log, "UPDATE ops SET container=NULL WHERE seq=?1", 1, (int64_t)seq);
        if (e >= 0)
                e = oplog_commit(log);
        else
                oplog_rollback(log);
        if (e < 0)
                (void)unlinkat(log->content_fd, tmp, 0);
        return e;
}

int oplog_content_open(struct oplog *log, uint64_t seq)
{
        sqlite3_stmt *st = NULL;
        char name[32];
        int fd, e;

        e = prep_cached(log, STMT_CONTAINER, &st, "SELECT container FROM ops WHERE seq=?1");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)seq);
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_bytes(st, 0) >=
                                                  (int)sizeof(struct file_handle)) {
                /* -ESTALE: the container is gone (every name removed, no one has it open). */
                fd = open_handle_blob(log, sqlite3_column_blob(st, 0),
                                      (size_t)sqlite3_column_bytes(st, 0));
                release_cached(st);
                return fd;
        }
        release_cached(st);
        snprintf(name, sizeof(name), "%" PRIu64, seq);
        fd = openat(log->content_fd, name, O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static int record_new(struct oplog *log, struct row *r, uint32_t type, uint64_t *out_lid)
{
        struct oplog_version v = { 0 };
        uint64_t lid;
        int e;

        if (!log || !out_lid || !r->parent || !valid_name(r->name))
                return -EINVAL;
        e = check_room(log, 1024);
        if (e < 0)
                return e;
        fault_point(FAULT_OPLOG_BEFORE_DATA);
        v.mode = type | (r->mode & 07777);
        v.uid = r->uid;
        v.gid = r->gid;
        e = oplog_begin(log);
        if (e < 0)
                return e;
        e = object_exists(log, r->parent);
        if (e >= 0)
                e = insert_object(log, true, type, 0, NULL, &v, &lid);
        if (e >= 0) {
                r->lid = lid;
                e = insert_row(log, r, NULL);
        }
        if (e >= 0)
                e = commit(log);
        else
                oplog_rollback(log);
        if (e < 0)
                return e;
        *out_lid = lid;
        return 0;
}

int oplog_record_create(struct oplog *log, uint64_t parent, const char *name, mode_t mode,
                        uid_t uid, gid_t gid, uint64_t *out_lid)
{
        if ((mode & S_IFMT) && !S_ISREG(mode))
                return oplog_record_mknod(log, parent, name, mode, 0, uid, gid, out_lid);
        struct row r = { .kind = OPLOG_CREATE, .parent = parent, .name = name,
                         .mode = mode & 07777, .uid = uid, .gid = gid };

        return record_new(log, &r, S_IFREG, out_lid);
}

int oplog_record_mknod(struct oplog *log, uint64_t parent, const char *name, mode_t mode,
                       dev_t rdev, uid_t uid, gid_t gid, uint64_t *out_lid)
{
        struct row r = { .kind = OPLOG_MKNOD, .parent = parent, .name = name,
                         .mode = mode, .uid = uid, .gid = gid, .rdev = rdev };

        if (S_ISREG(mode) || S_ISDIR(mode) || S_ISLNK(mode) || !(mode & S_IFMT))
                return -EINVAL;
        return record_new(log, &r, mode & S_IFMT, out_lid);
}

int oplog_record_mkdir(struct oplog *log, uint64_t parent, const char *name, mode_t mode,
                       uid_t uid, gid_t gid, uint64_t *out_lid)
{
        struct row r = { .kind = OPLOG_MKDIR, .parent = parent, .name = name,
                         .mode = mode & 07777, .uid = uid, .gid = gid };

        return record_new(log, &r, S_IFDIR, out_lid);
}

int oplog_record_symlink(struct oplog *log, uint64_t parent, const char *name,
                         const char *target, uid_t uid, gid_t gid, uint64_t *out_lid)
{
        struct row r = { .kind = OPLOG_SYMLINK, .parent = parent, .name = name, .mode = 0777,
                         .uid = uid, .gid = gid, .content = target };

        if (!target || !*target || strlen(target) >= PATH_MAX)
                return -EINVAL;
        return record_new(log, &r, S_IFLNK, out_lid);
}

/* ---- deferred creates ---- */

int oplog_record_create_deferred(struct oplog *log, uint64_t parent, const char *name,
                                 mode_t mode, uid_t uid, gid_t gid, int dfd, const char *cname,
                                 uint64_t *out_lid)
{
        union {
                struct file_handle h;
                char space[sizeof(struct file_handle) + MAX_HANDLE_SZ];
        } fh;
        struct row r = { .kind = OPLOG_CREATE, .parent = parent, .name = name,
                         .mode = mode & 07777, .uid = uid, .gid = gid };
        bool deferred;
        int e;

        if (!log || !cname)
                return -EINVAL;
        deferred = container_handle_at(log, dfd, cname, &fh.h) == 0;
        if (deferred) {
                r.container = &fh.h;
                r.container_size = sizeof(fh.h) + fh.h.handle_bytes;
        }
        e = record_new(log, &r, S_IFREG, out_lid);
        if (e >= 0 && deferred)
                deferred_count(log, *out_lid, 0);
        return e;
}

int oplog_deferred_change(struct oplog *log, uint64_t lid, int fd)
{
        sqlite3_stmt *st = NULL;
        uint64_t old;
        struct stat cst;
        bool pending;
        int e;

        if (!log || !deferred_counted(log, lid, &old))
                return 0;
        /* The table only filters: the create row says. */
        e = prep_cached(log, STMT_DEFERRED, &st,
                        "SELECT 1 FROM ops WHERE lid=?1 AND kind=2 AND state=0 AND seq>?2"
                        " AND container IS NOT NULL");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)log->replaying);
        pending = sqlite3_step(st) == SQLITE_ROW;
        release_cached(st);
        if (!pending) {
                deferred_forget(log, lid);
                return 0;
        }
        if (fd < 0 || fstat(fd, &cst) < 0)
                return 1;
        /* Grown: the new bytes must fit under max_bytes. */
        if ((uint64_t)cst.st_size > old && (e = check_room(log, (uint64_t)cst.st_size - old)) < 0)
                return e;
        deferred_count(log, lid, (uint64_t)cst.st_size);
        return 1;
}

/* A deferred create as oplog_settle_deferred() found it. */
struct deferred {
        uint64_t seq, lid;
        void *handle;
        size_t handle_size;
        uint64_t size;          /* the bytes its content row counts */
        bool in_doubt;          /* OPLOG_IN_DOUBT: its mode, uid and gid are the create's */
        uint32_t mode, uid, gid;
};

/* The deferred create at @seq becomes a plain one (no container). */
static int settle_plain(struct oplog *log, uint64_t seq)
{
        sqlite3_stmt *st = NULL;
        int e = prep_cached(log, STMT_SETTLE_PLAIN, &st,
                            "UPDATE ops SET container=NULL WHERE seq=?1");

        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)seq);
        return step_done_cached(st);
}

static int settle_one(struct oplog *log, struct drops *d, struct deferred *df)
{
        struct row c = { .kind = OPLOG_CONTENT, .lid = df->lid, .has_size = true,
                         .container = df->handle, .container_size = df->handle_size };
        struct row t = { .kind = OPLOG_SETATTR, .lid = df->lid,
                         .mask = OPLOG_SET_ATIME | OPLOG_SET_MTIME };
        sqlite3_stmt *st = NULL;
        struct stat cst;
        int64_t removed = 0;
        int fd, e;

        df->size = 0;
        /* Every name it had removed since (a create in doubt outlives its
         * unlink): what its handle reaches is no longer its own (an atomic
         * save gave those bytes to the file it replaced).  A plain create. */
        e = query_int_cached(log, STMT_SETTLE_REMOVED, &removed,
                             "SELECT (SELECT count(*) FROM ops WHERE state=0 AND seq>?2"
                             " AND ((lid=?1 AND kind=6) OR (other=?1 AND kind=8 AND"
                             " (flags & 2)=0))) - (SELECT count(*) FROM ops WHERE"
                             " state=0 AND seq>?2 AND lid=?1 AND kind=5)", 2,
                             (int64_t)df->lid, (int64_t)df->seq);
        if (e < 0)
                return e;
        if (removed > 0)
                return settle_plain(log, df->seq);
        fd = open_handle_blob(log, df->handle, df->handle_size);
        /* Every name removed (the records to come say so), or a handle that
         * names nothing: a plain create.  Out of descriptors or memory: the
         * replay fails and is tried again. */
        if (fd == -ESTALE || fd == -ENOENT || fd == -EUCLEAN || fd == -EINVAL)
                return settle_plain(log, df->seq);
        if (fd < 0)
                return fd;
        e = fstat(fd, &cst) < 0 ? -errno : 0;
        close(fd);
        if (e < 0)
                return e;
        /* A create in doubt says what the server may have made already (the
         * replay knows it by them): what changed since goes in the setattr. */
        if (df->in_doubt) {
                t.mode = cst.st_mode & 07777;
                t.uid = cst.st_uid;
                t.gid = cst.st_gid;
                t.mask |= (t.mode != df->mode ? OPLOG_SET_MODE : 0) |
                          (t.uid != df->uid ? OPLOG_SET_UID : 0) |
                          (t.gid != df->gid ? OPLOG_SET_GID : 0);
                cst.st_mode = df->mode;
                cst.st_uid = df->uid;
                cst.st_gid = df->gid;
        }
        e = prep_cached(log, STMT_SETTLE_CREATE, &st,
                        "UPDATE ops SET mode=?2, uid=?3, gid=?4, container=NULL WHERE seq=?1");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)df->seq);
        sqlite3_bind_int64(st, 2, cst.st_mode & 07777);
        sqlite3_bind_int64(st, 3, cst.st_uid);
        sqlite3_bind_int64(st, 4, cst.st_gid);
        e = step_done_cached(st);
        t.atime = (int64_t)cst.st_atim.tv_sec * 1000000000 + cst.st_atim.tv_nsec;
        t.mtime = (int64_t)cst.st_mtim.tv_sec * 1000000000 + cst.st_mtim.tv_nsec;
        /* The times before the bytes: the replay's create then carries both
         * (its file made with them, the mtime the container's), no second
         * visit of the name.  A create in doubt may find its file made
         * already and write the bytes apart: its setattr stays last. */
        if (e >= 0 && !df->in_doubt)
                e = insert_row(log, &t, NULL);
        if (e >= 0 && cst.st_size > 0) {
                c.size = (uint64_t)cst.st_size;
                e = content_replaced(log, d, df->lid);
                if (e >= 0)
                        e = insert_row(log, &c, NULL);
                df->size = c.size;
        }
        if (e >= 0 && df->in_doubt)
                e = insert_row(log, &t, NULL);
        return e;
}

int oplog_settle_deferred(struct oplog *log)
{
        GArray *found = g_array_new(FALSE, FALSE, sizeof(struct deferred));
        struct drops d = { 0 };
        sqlite3_stmt *st = NULL;
        int rc, e;

        e = prep(log, &st, "SELECT seq, lid, container, flags, mode, uid, gid FROM ops WHERE"
                           " kind=2 AND state=0 AND container IS NOT NULL ORDER BY seq");
        if (e >= 0) {
                while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                        struct deferred df = {
                                .seq = (uint64_t)sqlite3_column_int64(st, 0),
                                .lid = (uint64_t)sqlite3_column_int64(st, 1),
                                .handle_size = (size_t)sqlite3_column_bytes(st, 2),
                                .in_doubt = sqlite3_column_int(st, 3) & OPLOG_IN_DOUBT,
                                .mode = (uint32_t)sqlite3_column_int64(st, 4),
                                .uid = (uint32_t)sqlite3_column_int64(st, 5),
                                .gid = (uint32_t)sqlite3_column_int64(st, 6),
                        };

                        df.handle = g_memdup2(sqlite3_column_blob(st, 2), df.handle_size);
                        g_array_append_val(found, df);
                }
                e = rows_end(st, rc, 0);
        }
        if (e >= 0 && found->len)
                e = oplog_begin(log);
        for (guint i = 0; e >= 0 && i < found->len; i++)
                e = settle_one(log, &d, &g_array_index(found, struct deferred, i));
        if (found->len)
                e = finish(log, e, &d);
        for (guint i = 0; i < found->len; i++) {
                struct deferred *df = &g_array_index(found, struct deferred, i);

                /* Its content row counts the container now (count_container_bytes()). */
                if (e >= 0) {
                        deferred_forget(log, df->lid);
                        log->content_bytes += df->size;
                }
                g_free(df->handle);
        }
        g_array_unref(found);
        return e;
}

/* Begins a record of an existing object: checks, the crash point, BEGIN. */
static int begin_existing(struct oplog *log, uint64_t lid)
{
        int e;

        if (!log || !lid)
                return -EINVAL;
        e = check_room(log, 1024);
        if (e < 0)
                return e;
        fault_point(FAULT_OPLOG_BEFORE_DATA);
        e = oplog_begin(log);
        if (e < 0)
                return e;
        e = object_exists(log, lid);
        if (e < 0)
                oplog_rollback(log);
        return e;
}

int oplog_record_link(struct oplog *log, uint64_t lid, uint64_t newparent, const char *newname)
{
        struct row r = { .kind = OPLOG_LINK, .lid = lid, .parent2 = newparent, .name2 = newname };
        struct drops d = { 0 };
        int e;

        if (!newparent || !valid_name(newname))
                return -EINVAL;
        e = begin_existing(log, lid);
        if (e < 0)
                return e;
        e = exec_ids(log, "UPDATE objects SET names=names+1 WHERE lid=?1 AND local=1", 1,
                     (int64_t)lid);
        if (e >= 0)
                e = insert_row(log, &r, NULL);
        /* A name replay can follow the object by once the record is
         * compacted away and another of its names goes (a rename over it). */
        if (e >= 0)
                e = oplog_object_alias(log, lid, newparent, newname);
        return finish(log, e, &d);
}

static int record_remove(struct oplog *log, enum oplog_kind kind, uint64_t parent,
                         const char *name, uint64_t lid)
{
        struct row r = { .kind = kind, .lid = lid, .parent = parent, .name = name };
        struct drops d = { 0 };
        int e;

        if (!parent || !valid_name(name) || lid == OPLOG_ROOT)
                return -EINVAL;
        e = begin_existing(log, lid);
        if (e < 0)
                return e;
        e = cancel_local(log, &d, lid);
        if (e == 0) {
                e = exec_ids(log, "UPDATE objects SET names=names-1 WHERE lid=?1 AND local=1"
                                  " AND names>1", 1, (int64_t)lid);
                if (e >= 0 && kind == OPLOG_UNLINK)
                        e = drop_edits_of_removed(log, &d, lid);
                if (e >= 0)
                        e = insert_row(log, &r, NULL);
        }
        return finish(log, e, &d);
}

int oplog_record_unlink(struct oplog *log, uint64_t parent, const char *name, uint64_t lid)
{
        return record_remove(log, OPLOG_UNLINK, parent, name, lid);
}

int oplog_record_rmdir(struct oplog *log, uint64_t parent, const char *name, uint64_t lid)
{
        return record_remove(log, OPLOG_RMDIR, parent, name, lid);
}

/*
 * 1 when a directory @lid's rename @seq can move to the end of the log:
 * no directory was moved since (one moved into @lid's subtree while @lid
 * was where that rename put it would, replayed first, be moved into itself
 * where @lid still was); 0 if one was, or @lid is no directory.
 */
static int chain_moves_no_directory(struct oplog *log, uint64_t lid, uint64_t seq)
{
        int64_t moved = 0;
        int e = query_int(log, &moved,
                          "SELECT count(*) FROM ops o WHERE o.seq>?1 AND o.state=0 AND"
                          " o.kind=?3 AND o.lid!=?2 AND EXISTS (SELECT 1 FROM objects b"
                          " WHERE (b.lid=o.lid OR b.lid=o.other) AND b.type=?4) AND"
                          " EXISTS (SELECT 1 FROM objects c WHERE c.lid=?2 AND c.type=?4)",
                          4, (int64_t)seq, (int64_t)lid, (int64_t)OPLOG_RENAME,
                          (int64_t)S_IFDIR);

        return e < 0 ? e : moved == 0;
}

/*
 * Rename chain: the latest pending rename of @lid that brought it to
 * parent/name, when it replaced nothing and nothing else pending names its
 * source since.  Returns 1 with *seq and the source set, 0 if none.
 */
static int find_chain(struct oplog *log, uint64_t lid, uint64_t parent, const char *name,
                      uint64_t *seq, uint64_t *src_parent, char **src_name)
{
        sqlite3_stmt *st = NULL;
        int64_t v;
        int rc, e;

        e = prep(log, &st, "SELECT seq, parent, name, other, flags FROM ops WHERE lid=?1 AND"
                           " kind=8 AND state=0 ORDER BY seq DESC LIMIT 1");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        rc = sqlite3_step(st);
        if (rc != SQLITE_ROW) {
                sqlite3_finalize(st);
                return rc == SQLITE_DONE ? 0 : oplog_sqlite_errno(rc);
        }
        *seq = (uint64_t)sqlite3_column_int64(st, 0);
        *src_parent = (uint64_t)sqlite3_column_int64(st, 1);
        if (sqlite3_column_type(st, 3) != SQLITE_NULL ||
            (sqlite3_column_int(st, 4) & (RENAME_EXCHANGE | OPLOG_IN_DOUBT)) ||
            *seq <= log->replaying) {
                sqlite3_finalize(st);
                return 0;
        }
        *src_name = strdup((const char *)sqlite3_column_text(st, 2));
        sqlite3_finalize(st);
        if (!*src_name)
                return -ENOMEM;
        /* It must be the rename to parent/name, and no later record may name its source. */
        e = prep(log, &st, "SELECT count(*) FROM ops WHERE seq=?1 AND parent2=?2 AND name2=?3");
        if (e >= 0) {
                sqlite3_bind_int64(st, 1, (sqlite3_int64)*seq);
                sqlite3_bind_int64(st, 2, (sqlite3_int64)parent);
                bind_text(st, 3, name);
                rc = sqlite3_step(st);
                v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
                sqlite3_finalize(st);
                if (v == 1) {
                        /* Nor remove its source's directory: the merged rename,
                         * replayed after that rmdir, would find it not empty. */
                        e = prep(log, &st, "SELECT count(*) FROM ops WHERE seq>?1 AND state=0 AND"
                                           " ((parent=?2 AND name=?3) OR (parent2=?2 AND name2=?3)"
                                           "  OR (lid=?2 AND kind=?4))");
                        if (e >= 0) {
                                sqlite3_bind_int64(st, 1, (sqlite3_int64)*seq);
                                sqlite3_bind_int64(st, 2, (sqlite3_int64)*src_parent);
                                bind_text(st, 3, *src_name);
                                sqlite3_bind_int(st, 4, OPLOG_RMDIR);
                                rc = sqlite3_step(st);
                                v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 1;
                                sqlite3_finalize(st);
                                if (v == 0)
                                        e = chain_moves_no_directory(log, lid, *seq);
                                if (e == 1)
                                        return 1;
                        }
                }
        }
        free(*src_name);
        *src_name = NULL;
        return e < 0 ? e : 0;
}

int oplog_record_rename(struct oplog *log, uint64_t parent, const char *name, uint64_t lid,
                        uint64_t newparent, const char *newname, uint64_t other,
                        unsigned flags)
{
        struct row r = { .kind = OPLOG_RENAME, .lid = lid, .parent = parent, .name = name,
                         .parent2 = newparent, .name2 = newname, .other = other,
                         .flags = flags };
        struct drops d = { 0 };
        char *src_name = NULL;
        uint64_t seq = 0, src_parent = 0;
        int e;

        if (!parent || !newparent || !valid_name(name) || !valid_name(newname) ||
            lid == OPLOG_ROOT || other == lid || (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) ||
            ((flags & RENAME_EXCHANGE) && (!other || (flags & RENAME_NOREPLACE))) ||
            ((flags & RENAME_NOREPLACE) && other))
                return -EINVAL;
        if (parent == newparent && strcmp(name, newname) == 0)
                return 0;
        e = begin_existing(log, lid);
        if (e >= 0 && other && (e = object_exists(log, other)) < 0)
                oplog_rollback(log);
        if (e < 0)
                return e;
        if (other && !(flags & RENAME_EXCHANGE)) {
                e = cancel_local(log, &d, other);
                if (e == 1) {
                        r.other = 0;
                } else if (e == 0) {
                        e = exec_ids(log, "UPDATE objects SET names=names-1 WHERE lid=?1 AND"
                                          " local=1 AND names>1", 1, (int64_t)other);
                        if (e >= 0)
                                e = drop_edits_of_removed(log, &d, other);
                }
        }
        if (e >= 0 && !(flags & RENAME_EXCHANGE)) {
                e = find_chain(log, lid, parent, name, &seq, &src_parent, &src_name);
                if (e == 1) {
                        e = exec_ids(log, "DELETE FROM ops WHERE seq=?1", 1, (int64_t)seq);
                        r.parent = src_parent;
                        r.name = src_name;
                        r.flags &= ~RENAME_NOREPLACE;
                }
        }
        if (e >= 0 && !(r.parent == r.parent2 && strcmp(r.name, r.name2) == 0 && !r.other))
                e = insert_row(log, &r, NULL);
        /* The new name of a file of several names, for replay to follow it
         * by once the record is compacted away and its other names go. */
        if (e >= 0)
                e = alias_if_several(log, lid, newparent, newname);
        if (e >= 0 && (flags & RENAME_EXCHANGE))
                e = alias_if_several(log, other, parent, name);
        e = finish(log, e, &d);
        free(src_name);
        return e;
}

/* The seq of the last row of the log (0 if none). */
static int last_seq(struct oplog *log, uint64_t *out)
{
        sqlite3_stmt *st = NULL;
        int rc, e;

        e = prep_cached(log, STMT_LAST_SEQ, &st, "SELECT ifnull(max(seq), 0) FROM ops");
        if (e < 0)
                return e;
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
                *out = (uint64_t)sqlite3_column_int64(st, 0);
        release_cached(st);
        return rc == SQLITE_ROW ? 0 : oplog_sqlite_errno(rc);
}

/*
 * The merged setattr @r replaces pending row @seq.  When that row is the last
 * of the log, it is rewritten in place: the same position as a new row at
 * the end, without the index and sequence pages a delete and an insert
 * write (an untar sets mode, owner and times one after the other).
 */
static int setattr_replace(struct oplog *log, uint64_t seq, const struct row *r)
{
        sqlite3_stmt *st = NULL;
        uint64_t last = 0;
        int e;

        e = last_seq(log, &last);
        if (e < 0)
                return e;
        if (last != seq) {
                e = prep_cached(log, STMT_DELETE_SEQ, &st, "DELETE FROM ops WHERE seq=?1");
                if (e < 0)
                        return e;
                sqlite3_bind_int64(st, 1, (sqlite3_int64)seq);
                e = step_done_cached(st);
                return e < 0 ? e : insert_row(log, r, NULL);
        }
        e = prep_cached(log, STMT_SETATTR_UPDATE, &st,
                        "UPDATE ops SET mask=?2, mode=?3, uid=?4, gid=?5, atime=?6, mtime=?7"
                        " WHERE seq=?1");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)seq);
        sqlite3_bind_int64(st, 2, r->mask);
        sqlite3_bind_int64(st, 3, r->mode);
        sqlite3_bind_int64(st, 4, r->uid);
        sqlite3_bind_int64(st, 5, r->gid);
        sqlite3_bind_int64(st, 6, r->atime);
        sqlite3_bind_int64(st, 7, r->mtime);
        return step_done_cached(st);
}

int oplog_record_setattr(struct oplog *log, uint64_t lid, const struct oplog_setattr *sa)
{
        struct row r = { .kind = OPLOG_SETATTR, .lid = lid };
        struct drops d = { 0 };
        sqlite3_stmt *st = NULL;
        uint64_t seq = 0;
        int rc, e;

        if (!sa || !sa->mask || (sa->mask & ~0x1fu))
                return -EINVAL;
        e = begin_existing(log, lid);
        if (e < 0)
                return e;
        /* Start from the pending setattr of the object, if any. */
        e = prep_cached(log, STMT_SETATTR_PENDING, &st,
                        "SELECT seq, mask, mode, uid, gid, atime, mtime, flags FROM ops WHERE"
                        " lid=?1 AND kind=9 AND state=0 AND seq>?2 ORDER BY seq DESC LIMIT 1");
        if (e >= 0) {
                sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
                sqlite3_bind_int64(st, 2, (sqlite3_int64)log->replaying);
                rc = sqlite3_step(st);
                /* Not into one in doubt: it replays as it is (oplog_mark_in_doubt()). */
                if (rc == SQLITE_ROW && (sqlite3_column_int(st, 7) & OPLOG_IN_DOUBT)) {
                        rc = SQLITE_DONE;
                } else if (rc == SQLITE_ROW) {
                        seq = (uint64_t)sqlite3_column_int64(st, 0);
                        r.mask = (unsigned)sqlite3_column_int(st, 1);
                        r.mode = (uint32_t)sqlite3_column_int64(st, 2);
                        r.uid = (uint32_t)sqlite3_column_int64(st, 3);
                        r.gid = (uint32_t)sqlite3_column_int64(st, 4);
                        r.atime = sqlite3_column_int64(st, 5);
                        r.mtime = sqlite3_column_int64(st, 6);
                } else if (rc != SQLITE_DONE) {
                        e = oplog_sqlite_errno(rc);
                }
                release_cached(st);
        }
        r.mask |= sa->mask;
        if (sa->mask & OPLOG_SET_MODE)
                r.mode = sa->mode & 07777;
        if (sa->mask & OPLOG_SET_UID)
                r.uid = sa->uid;
        if (sa->mask & OPLOG_SET_GID)
                r.gid = sa->gid;
        if (sa->mask & OPLOG_SET_ATIME)
                r.atime = sa->atime.tv_nsec == UTIME_NOW ? INT64_MIN
                        : (int64_t)sa->atime.tv_sec * 1000000000 + sa->atime.tv_nsec;
        if (sa->mask & OPLOG_SET_MTIME)
                r.mtime = sa->mtime.tv_nsec == UTIME_NOW ? INT64_MIN
                        : (int64_t)sa->mtime.tv_sec * 1000000000 + sa->mtime.tv_nsec;
        if (e >= 0)
                e = seq ? setattr_replace(log, seq, &r) : insert_row(log, &r, NULL);
        return finish(log, e, &d);
}

static int record_xattr(struct oplog *log, enum oplog_kind kind, uint64_t lid, const char *name,
                        const void *value, size_t size, int flags)
{
        struct row r = { .kind = kind, .lid = lid, .xname = name, .xvalue = value,
                         .xsize = size, .has_xvalue = kind == OPLOG_SETXATTR,
                         .flags = (unsigned)flags };
        struct drops d = { 0 };
        sqlite3_stmt *st = NULL;
        int e;

        if (!name || !*name || strlen(name) > 255 || (size && !value) || size > 65536)
                return -EINVAL;
        e = check_room(log, size);
        if (e < 0)
                return e;
        e = begin_existing(log, lid);
        if (e < 0)
                return e;
        e = prep(log, &st, "DELETE FROM ops WHERE lid=?1 AND kind IN (10, 11) AND state=0 AND"
                           " xname=?2 AND seq>?3 AND (flags & 65536)=0");
        if (e >= 0) {
                sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
                bind_text(st, 2, name);
                sqlite3_bind_int64(st, 3, (sqlite3_int64)log->replaying);
                e = step_done(st);
        }
        if (e >= 0)
                e = insert_row(log, &r, NULL);
        return finish(log, e, &d);
}

int oplog_record_setxattr(struct oplog *log, uint64_t lid, const char *name, const void *value,
                          size_t size, int flags)
{
        return record_xattr(log, OPLOG_SETXATTR, lid, name, value, size, flags);
}

int oplog_record_removexattr(struct oplog *log, uint64_t lid, const char *name)
{
        return record_xattr(log, OPLOG_REMOVEXATTR, lid, name, NULL, 0, 0);
}

/* ------------------------------------------------------------------------ */
/* Reading back                                                             */
/* ------------------------------------------------------------------------ */

int oplog_foreach(struct oplog *log, bool pending_only,
                  int (*fn)(void *ud, const struct oplog_record *r), void *ud)
{
        sqlite3_stmt *st = NULL;
        int rc, e;

        if (!log || !fn)
                return -EINVAL;
        e = prep(log, &st, pending_only
                 ? "SELECT seq, kind, state, lid, parent, name, parent2, name2, other, flags, mask,"
                   " mode, uid, gid, rdev, atime, mtime, content, size, xname, xvalue, outcome"
                   " FROM ops WHERE state=0 ORDER BY seq"
                 : "SELECT seq, kind, state, lid, parent, name, parent2, name2, other, flags, mask,"
                   " mode, uid, gid, rdev, atime, mtime, content, size, xname, xvalue, outcome"
                   " FROM ops ORDER BY seq");
        if (e < 0)
                return e;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                struct oplog_record r = {
                        .seq = (uint64_t)sqlite3_column_int64(st, 0),
                        .kind = sqlite3_column_int(st, 1),
                        .state = sqlite3_column_int(st, 2),
                        .lid = (uint64_t)sqlite3_column_int64(st, 3),
                        .parent = (uint64_t)sqlite3_column_int64(st, 4),
                        .name = col_text(st, 5),
                        .parent2 = (uint64_t)sqlite3_column_int64(st, 6),
                        .name2 = col_text(st, 7),
                        .other = (uint64_t)sqlite3_column_int64(st, 8),
                        .flags = (unsigned)sqlite3_column_int(st, 9),
                        .mask = (unsigned)sqlite3_column_int(st, 10),
                        .mode = (uint32_t)sqlite3_column_int64(st, 11),
                        .uid = (uint32_t)sqlite3_column_int64(st, 12),
                        .gid = (uint32_t)sqlite3_column_int64(st, 13),
                        .rdev = (uint64_t)sqlite3_column_int64(st, 14),
                        .atime_ns = sqlite3_column_int64(st, 15),
                        .mtime_ns = sqlite3_column_int64(st, 16),
                        .content = col_text(st, 17),
                        .size = (uint64_t)sqlite3_column_int64(st, 18),
                        .xname = col_text(st, 19),
                        .xvalue = sqlite3_column_blob(st, 20),
                        .xsize = (size_t)sqlite3_column_bytes(st, 20),
                        .outcome = col_text(st, 21),
                };

                e = fn(ud, &r);
                if (e < 0)
                        break;
        }
        return rows_end(st, rc, e);
}

void oplog_set_replaying(struct oplog *log, uint64_t upto)
{
        log->replaying = upto;
}

int oplog_count(struct oplog *log, int state, uint64_t *out)
{
        int64_t v;
        int e;

        if (!log || !out)
                return -EINVAL;
        e = state < 0 ? query_int(log, &v, "SELECT count(*) FROM ops", 0)
                      : query_int(log, &v, "SELECT count(*) FROM ops WHERE state=?1", 1,
                                  (int64_t)state);
        if (e < 0)
                return e;
        *out = (uint64_t)v;
        return 0;
}

int oplog_conflict_foreach(struct oplog *log,
                           int (*fn)(void *ud, const struct oplog_conflict *c), void *ud)
{
        sqlite3_stmt *st = NULL;
        int rc, e;

        if (!log || !fn)
                return -EINVAL;
        e = prep(log, &st, "SELECT id, seq, lid, kind, ifnull(path, ''), ifnull(base, ''),"
                           " ifnull(local, ''), ifnull(remote, ''), ifnull(detail, ''),"
                           " recorded, local_changed FROM conflicts ORDER BY id");
        if (e < 0)
                return e;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                struct oplog_conflict c = {
                        .id = (uint64_t)sqlite3_column_int64(st, 0),
                        .seq = (uint64_t)sqlite3_column_int64(st, 1),
                        .lid = (uint64_t)sqlite3_column_int64(st, 2),
                        .kind = col_text(st, 3),
                        .path = col_text(st, 4),
                        .base = col_text(st, 5),
                        .local = col_text(st, 6),
                        .remote = col_text(st, 7),
                        .detail = col_text(st, 8),
                        .recorded_us = sqlite3_column_int64(st, 9),
                        .local_changed_us = sqlite3_column_int64(st, 10),
                };

                e = fn(ud, &c);
                if (e < 0)
                        break;
        }
        return rows_end(st, rc, e);
}

/* ------------------------------------------------------------------------ */
/* Replay bookkeeping (reintegrate.c)                                       */
/* ------------------------------------------------------------------------ */

int oplog_mark(struct oplog *log, uint64_t seq, enum oplog_state state, const char *outcome)
{
        sqlite3_stmt *st = NULL;
        int e;

        e = prep_cached(log, STMT_MARK, &st, "UPDATE ops SET state=?2, outcome=?3 WHERE seq=?1");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)seq);
        sqlite3_bind_int(st, 2, state);
        bind_text(st, 3, outcome);
        return step_done_cached(st);
}

int oplog_set_intent(struct oplog *log, uint64_t seq, uint64_t ino)
{
        sqlite3_stmt *st = NULL;
        int e = prep_cached(log, STMT_INTENT, &st, "UPDATE ops SET intent=nullif(?2, 0) WHERE seq=?1");

        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)seq);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)ino);
        return step_done_cached(st);
}

int oplog_dir_fd(struct oplog *log)
{
        return log->dir_fd;
}

bool oplog_no_fsync(struct oplog *log)
{
        return log->opts.no_fsync;
}

int oplog_intents(struct oplog *log, int (*fn)(void *ud, uint64_t seq, uint64_t ino), void *ud)
{
        sqlite3_stmt *st = NULL;
        int rc, e;

        e = prep(log, &st, "SELECT seq, intent FROM ops WHERE state=0 AND intent IS NOT NULL");
        if (e < 0)
                return e;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                e = fn(ud, (uint64_t)sqlite3_column_int64(st, 0), (uint64_t)sqlite3_column_int64(st, 1));
                if (e < 0)
                        break;
        }
        return rows_end(st, rc, e);
}

int oplog_pending_content(struct oplog *log, uint64_t lid, uint64_t *out_seq)
{
        int64_t v;
        int e = query_int(log, &v, "SELECT seq FROM ops WHERE lid=?1 AND kind=1 AND state=0"
                                   " ORDER BY seq DESC LIMIT 1", 1, (int64_t)lid);

        if (e < 0)
                return e;
        if (e == 0)
                return -ENOENT;
        *out_seq = (uint64_t)v;
        return 0;
}

int oplog_get_intent(struct oplog *log, uint64_t seq, uint64_t *out_ino)
{
        int64_t v;
        int e = query_int(log, &v, "SELECT ifnull(intent, 0) FROM ops WHERE seq=?1", 1,
                          (int64_t)seq);

        if (e < 0)
                return e;
        *out_ino = e ? (uint64_t)v : 0;
        return 0;
}

int oplog_names_of(struct oplog *log, uint64_t lid,
                   int (*fn)(void *ud, uint64_t parent, const char *name), void *ud)
{
        sqlite3_stmt *st = NULL;
        int rc, e;

        e = prep_cached(log, STMT_NAMES, &st,
                        "SELECT parent, name FROM ops WHERE lid=?1 AND name IS NOT NULL"
                        " UNION SELECT parent2, name2 FROM ops WHERE lid=?1 AND name2 IS NOT NULL"
                        " UNION SELECT parent2, name2 FROM ops WHERE other=?1 AND (flags & 2)"
                        " UNION SELECT srv_parent, srv_name FROM objects WHERE lid=?1"
                        " AND srv_name IS NOT NULL"
                        " UNION SELECT parent, name FROM aliases WHERE lid=?1");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)lid);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                e = fn(ud, (uint64_t)sqlite3_column_int64(st, 0), col_text(st, 1));
                if (e != 0)
                        break;
        }
        release_cached(st);
        if (e != 0)
                return e;
        return rc == SQLITE_DONE ? 0 : oplog_sqlite_errno(rc);
}

int oplog_add_conflict(struct oplog *log, uint64_t seq, uint64_t lid, const char *kind,
                       const char *path, const char *base, const char *local,
                       const char *remote, const char *detail, int64_t local_changed_us,
                       uint64_t *out_id)
{
        sqlite3_stmt *st = NULL;
        int e;

        e = prep(log, &st, "INSERT INTO conflicts(seq, lid, kind, path, base, local, remote,"
                           " detail, recorded, local_changed)"
                           " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)seq);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)lid);
        bind_text(st, 3, kind);
        bind_text(st, 4, path);
        bind_text(st, 5, base);
        bind_text(st, 6, local);
        bind_text(st, 7, remote);
        bind_text(st, 8, detail);
        sqlite3_bind_int64(st, 9, now_us());
        sqlite3_bind_int64(st, 10, local_changed_us);
        e = step_done(st);
        if (e >= 0 && out_id)
                *out_id = (uint64_t)sqlite3_last_insert_rowid(log->db);
        return e;
}

/* ------------------------------------------------------------------------ */
/* Compaction                                                               */
/* ------------------------------------------------------------------------ */

static int collect_ids(struct oplog *log, const char *sql, char ***ids, size_t *n)
{
        sqlite3_stmt *st = NULL;
        int rc, e;

        e = prep(log, &st, sql);
        if (e < 0)
                return e;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                const char *id = col_text(st, 0);
                char **nv;

                if (!id || !fcache_merge_id_is_valid(id))
                        continue;
                nv = realloc(*ids, (*n + 1) * sizeof(**ids));
                if (!nv) {
                        sqlite3_finalize(st);
                        return -ENOMEM;
                }
                *ids = nv;
                (*ids)[*n] = strdup(id);
                if (!(*ids)[*n]) {
                        sqlite3_finalize(st);
                        return -ENOMEM;
                }
                (*n)++;
        }
        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? 0 : oplog_sqlite_errno(rc);
}

/* Drops the base-store blobs no object or conflict refers to. */
static int gc_bases(struct oplog *log)
{
        char **ids = NULL;
        size_t n = 0;
        int e = collect_ids(log, "SELECT b_content FROM objects UNION SELECT orig_content FROM"
                                 " objects UNION SELECT base FROM conflicts UNION SELECT local"
                                 " FROM conflicts UNION SELECT remote FROM conflicts", &ids, &n);

        if (e >= 0)
                e = fcache_merge_store_gc(NULL, log->store, (const char *const *)ids, n);
        for (size_t i = 0; i < n; i++)
                free(ids[i]);
        free(ids);
        return e;
}

int oplog_compact(struct oplog *log, uint64_t *out_removed)
{
        struct drops d = { 0 };
        int e;

        if (!log)
                return -EINVAL;
        e = oplog_begin(log);
        if (e < 0)
                return e;
        e = drops_add_where(log, &d, 0, "state=1 AND lid>=?1");
        if (e >= 0)
                e = exec_ids(log, "DELETE FROM ops WHERE state=1", 0);
        if (e >= 0 && out_removed)
                *out_removed = (uint64_t)sqlite3_changes(log->db);
        e = finish(log, e, &d);
        if (e < 0)
                return e;
        return gc_bases(log);
}

int oplog_shrink(struct oplog *log)
{
        uint64_t pending = 0;
        int e;

        if (!log)
                return -EINVAL;
        e = oplog_count(log, OPLOG_PENDING, &pending);
        if (e < 0 || pending)
                return e;
        /* Objects forgotten since oplog_compact() took their bases' last references. */
        e = gc_bases(log);
        if (e >= 0)
                e = oplog_exec(log, "VACUUM");
        if (e >= 0)
                e = oplog_exec(log, "PRAGMA wal_checkpoint(TRUNCATE)");
        return e;
}

int oplog_forget_settled(struct oplog *log, uint64_t *out_forgotten)
{
        uint64_t total = 0;
        int changes, e;

        if (!log)
                return -EINVAL;
        /* Children first: a parent stays while an object under it stays. */
        do {
                e = exec_ids(log, "DELETE FROM objects WHERE lid != 1 AND conflict IS NULL"
                                  " AND lid NOT IN (SELECT lid FROM ops)"
                                  " AND lid NOT IN (SELECT parent FROM ops WHERE parent IS NOT NULL)"
                                  " AND lid NOT IN (SELECT parent2 FROM ops WHERE parent2 IS NOT NULL)"
                                  " AND lid NOT IN (SELECT other FROM ops WHERE other IS NOT NULL)"
                                  " AND lid NOT IN (SELECT lid FROM conflicts WHERE lid IS NOT NULL)"
                                  " AND lid NOT IN (SELECT srv_parent FROM objects"
                                  "                 WHERE srv_parent IS NOT NULL)"
                                  " AND lid NOT IN (SELECT parent FROM aliases"
                                  "                 WHERE lid IN (SELECT lid FROM objects))", 0);
                if (e < 0)
                        return e;
                changes = sqlite3_changes(log->db);
                total += (uint64_t)changes;
                e = exec_ids(log, "DELETE FROM aliases WHERE lid NOT IN (SELECT lid FROM objects)", 0);
                if (e < 0)
                        return e;
        } while (changes > 0);
        if (out_forgotten)
                *out_forgotten = total;
        return 0;
}

/* ------------------------------------------------------------------------ */
/* Settling a conflict (resolve.c)                                          */
/* ------------------------------------------------------------------------ */

int oplog_conflict_settle(struct oplog *log, uint64_t id, uint64_t seq, bool replay,
                          uint64_t *out_count)
{
        char held[32];
        sqlite3_stmt *st = NULL;
        int e;

        snprintf(held, sizeof(held), "held:%" PRIu64, id);
        e = prep(log, &st, replay
                 ? "UPDATE ops SET state=0, outcome=NULL WHERE seq=?1 OR (state=3 AND outcome=?2)"
                 : "UPDATE ops SET state=1, outcome='dropped' WHERE seq=?1 OR (state=3 AND outcome=?2)");
        if (e < 0)
                return e;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)seq);
        bind_text(st, 2, held);
        e = step_done(st);
        if (e < 0)
                return e;
        if (out_count)
                *out_count = (uint64_t)sqlite3_changes(log->db);
        e = exec_ids(log, "UPDATE objects SET conflict=NULL WHERE conflict=?1", 1, (int64_t)id);
        if (e < 0)
                return e;
        return exec_ids(log, "DELETE FROM conflicts WHERE id=?1", 1, (int64_t)id);
}
