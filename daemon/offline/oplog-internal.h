/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * oplog-internal.h: what reintegrate.c shares with oplog.c and nobody else
 * does: the database handle, the per-object replay state and small SQLite
 * helpers.  Not an interface for the view.
 */
#pragma once

#include <glib.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "oplog.h"

struct oplog {
        sqlite3 *db;
        char *dir;
        int dir_fd;
        int content_fd;         /* dir/content */
        fcache_merge_store *store;
        struct oplog_options opts;
        uint64_t content_bytes; /* sum of the content files' sizes */
        bool unsynced;          /* commits since the last oplog_durable() */
        bool links_unsynced;    /* content/ entries since the last oplog_durable() */
        bool handles;           /* content records name containers by file handle */
        int mount_id;           /* of the log's directory: containers must be there */
        char token[17];         /* random, names the server-side temporaries */
        sqlite3_stmt *stmts[24]; /* prepared once: the statements run per record (append, replay) */
        /* group commit (oplog_durable_grouped()) */
        uint64_t commits;       /* commits so far */
        uint64_t synced;        /* the commits a finished sync covered */
        bool syncing;           /* a sync runs, without the caller's lock */
        pthread_cond_t sync_done;
        int wal_fd;             /* log.db-wal, synced outside the connection */
        uint64_t replaying;     /* records up to it are being replayed: none coalesces (0: none) */
        GHashTable *deferred;   /* lid of a deferred create -> the bytes counted for its container */
};

/* The replay view of one object (table objects). */
struct oplog_object {
        uint64_t lid;
        bool local;             /* created offline: no server version until its create applies */
        uint32_t type;          /* S_IFMT */
        uint64_t srv_parent;    /* where replay expects it on the server (0: not there) */
        char *srv_name;
        struct oplog_version base; /* the server version the next record applies to */
        char orig[FCACHE_MERGE_ID_SIZE]; /* content id when cached (for conflicts) */
        uint64_t conflict;      /* the conflict it is held behind, 0 if none */
};

void oplog_object_clear(struct oplog_object *o);
int oplog_object_load(struct oplog *log, uint64_t lid, struct oplog_object *out);
int oplog_object_save(struct oplog *log, const struct oplog_object *o);
/* Calls @fn with every object a pending record names (a malloc()ed copy @fn takes over). */
int oplog_objects_of_pending(struct oplog *log,
                             int (*fn)(void *ud, struct oplog_object *o), void *ud);

/*
 * A run replays the pending records up to @upto while changes are recorded
 * (0: it ended): a new record then never merges into, cancels or drops one
 * of them, which the run may be sending to the server at that moment; it
 * is appended and replayed after them.
 */
void oplog_set_replaying(struct oplog *log, uint64_t upto);

/* -errno for an SQLite result code. */
int oplog_sqlite_errno(int rc);
/* Runs @sql (no rows); -errno on failure. */
int oplog_exec(struct oplog *log, const char *sql);
int oplog_begin(struct oplog *log);
int oplog_commit(struct oplog *log);
void oplog_rollback(struct oplog *log);
/* Forces what is committed to disk (a WAL checkpoint and an fsync of the directory). */
int oplog_sync(struct oplog *log);
/* The log directory's descriptor (reintegration keeps its replay journal there). */
int oplog_dir_fd(struct oplog *log);
bool oplog_no_fsync(struct oplog *log);

/* Sets a pending record's state and outcome text. */
int oplog_mark(struct oplog *log, uint64_t seq, enum oplog_state state, const char *outcome);
/* The intent of a server-side create: its temporary's inode (0 clears). */
int oplog_set_intent(struct oplog *log, uint64_t seq, uint64_t ino);
int oplog_get_intent(struct oplog *log, uint64_t seq, uint64_t *out_ino);
/* The pending content record of @lid, if any (-ENOENT). */
int oplog_pending_content(struct oplog *log, uint64_t lid, uint64_t *out_seq);
/* Calls @fn with the intent of every pending record that has one. */
int oplog_intents(struct oplog *log, int (*fn)(void *ud, uint64_t seq, uint64_t ino), void *ud);
/* Inserts a conflict row; *out_id (may be NULL) gets its id. */
int oplog_add_conflict(struct oplog *log, uint64_t seq, uint64_t lid, const char *kind,
                       const char *path, const char *base, const char *local,
                       const char *remote, const char *detail, int64_t local_changed_us,
                       uint64_t *out_id);
/* Calls @fn with every (directory lid, name) any record of @lid named it by. */
int oplog_names_of(struct oplog *log, uint64_t lid,
                   int (*fn)(void *ud, uint64_t parent, const char *name), void *ud);
/* Whether a server inode is known to the log (an object's base or a create intent). */
bool oplog_ino_known(struct oplog *log, uint64_t ino);
/*
 * Settles conflict @id (its record @seq): that record and every record held
 * behind it become pending again (@replay) or applied with outcome "dropped";
 * objects held behind it are released; the conflict row is deleted.
 * *out_count (may be NULL) gets the number of records changed.  Run it inside
 * oplog_begin()/oplog_commit().
 */
int oplog_conflict_settle(struct oplog *log, uint64_t id, uint64_t seq, bool replay,
                          uint64_t *out_count);

/* oplog.c: writes all of @buf, retrying short writes and EINTR; 0 or -errno (resolve.c too). */
int write_all(int fd, const char *buf, size_t size);
/*
 * Content record @seq keeps its own copy of the bytes its container holds
 * now (a record held behind a conflict: the mirror is resynced before it
 * is replayed).  0 or -errno.
 */
int oplog_content_detach(struct oplog *log, uint64_t seq);
/* Copies regular file @in (from offset 0, to its end) to @out's position. */
int oplog_copy_fd(int out, int in);
