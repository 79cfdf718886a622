/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * oplog.h: the durable operation log of one fcache volume while it is
 * offline (Coda's client modify log).
 *
 * Every change the view makes offline is recorded here, against objects
 * named by a stable local id (lid), never by path: the volume root is
 * OPLOG_ROOT; an object that exists on the server gets its lid from
 * oplog_object() (keyed by its server inode, with the server version it was
 * cached at: its "base"); an object created offline gets one from its
 * oplog_record_create()/_mkdir()/_symlink().  A lid (and a conflict id) is
 * never given to another object, also once its own is gone (a create
 * cancelled, an object forgotten): nodes, open files and the mirror's marks
 * hold lids.  Reintegration (reintegrate.h) replays the log against the
 * server.
 *
 * Files under the log directory (CacheDir/offline, say):
 *   log.db        SQLite, WAL, synchronous=NORMAL: objects, ops, conflicts
 *   content/SEQ   a copy of the content of record SEQ, only where its
 *                 container cannot be named (see below)
 *   bases/        fcache_merge_store: base, local and remote versions by id
 *   replay.journal  reintegration's per-record marks not yet folded into
 *                 log.db (see reintegrate.c)
 *
 * Content: a content record is small ("object N changed"): it names the
 * object's container, the local file the view keeps its current bytes in
 * (the mirror file), by file handle, so that it follows the container
 * through renames, and hard links are one container; replay reads the bytes
 * (and the mtime) the container has then.  The base the change applies to
 * is kept once, when the object is registered (oplog_put_base_fd()).  A
 * container the log cannot open by handle again (another filesystem than
 * the log's, no CAP_DAC_READ_SEARCH, an unlinked file) is copied, as
 * opts.copy_content makes every one.  A container gone by replay time
 * (every local name removed) makes its record moot ("gone").
 *
 * Durability: each oplog_record_*() returns once its row is committed to the
 * WAL, which the page cache keeps across a crash of the process (kill -9);
 * oplog_durable() makes every record so far durable against a power loss
 * (one WAL sync; none if nothing new).  So, as on a local filesystem,
 * close() acknowledges against a crash of the daemon, fsync() against a
 * power loss; many records (an untar) share one sync, and fsyncs arriving
 * together share one (oplog_durable_grouped()).  A failed call
 * changes nothing.  When the log would grow past opts.max_bytes (counting
 * the bytes of the containers its pending records name), or the disk is
 * full, a call fails with -ENOSPC and everything recorded before stays.
 *
 * Coalescing, done when a record is appended (only pending records are ever
 * touched, never ones reintegration already applied):
 *   - content: a new content record of an object replaces its pending one
 *     (when that one is already the object's last record and names the
 *     same container, nothing is written but a changed size, which needs
 *     no oplog_durable());
 *   - create/mkdir/symlink then unlink/rmdir (or rename over) of the same
 *     object cancels its create and every pending record of it (contents,
 *     setattrs, xattrs, renames; a rename that replaced a server object turns
 *     into the unlink of that object), unless the object is named by a
 *     link/exchange record or a pending record uses it as a parent;
 *   - unlink of a server file with one link drops its pending contents,
 *     setattrs and xattrs (the unlink wins; the base stays for conflicts);
 *   - setattr after setattr of an object merges into one (later fields win);
 *   - setxattr/removexattr after one of the same name replaces it;
 *   - rename of an object to B, then from B to C, becomes one rename to C
 *     (and vanishes if C is where it started), unless the first replaced or
 *     exchanged something, another pending record uses its old name, its
 *     old directory was removed since, or, for a directory, another
 *     directory was moved since (into its subtree, replayed first, it
 *     would be moved into itself).
 *
 * Wiring into fcache-view (the calls the data plane makes):
 *   - volume start: oplog_open(CacheDir/offline), oplog_set_root(stat of
 *     Backing=);
 *   - when an object is cached (and at the latest before its first offline
 *     change): oplog_object(parent lid, name, version) with
 *     oplog_version_from_stat() and, for a regular file whose store copy
 *     is complete, version.content from oplog_put_base_fd(); keep the lid
 *     in the node (after a restart, oplog_find_ino() maps inodes back);
 *   - offline, after each change is applied to the container, the matching
 *     oplog_record_*() before replying; for data, oplog_record_content()
 *     with the container at the points a write is acknowledged (flush,
 *     fsync, release), and at fsync oplog_durable() after fsync of the
 *     container; an error (-ENOSPC) goes to the application;
 *   - reintegrating: reintegrate_run() on a worker thread with the
 *     backing root descriptor (reintegrate.h), then oplog_compact();
 *   - `query reintegration`: reintegrate_dry_run_text(); `query
 *     conflicts`: oplog_conflict_foreach(); FCACHE_ECONFLICT for an object
 *     oplog_object_conflict() reports with a structural kind.
 *
 * Concurrency: one struct oplog must not be used by two threads at once; the
 * caller (the view) serializes with its own lock.  The database is opened
 * with locking_mode=EXCLUSIVE: one process (the volume's data plane) owns a
 * log; others (fcached, fcache-resolve) ask it over its control socket.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "fcache-merge.h"

#define OPLOG_ROOT 1 /* the lid of the volume root */

struct oplog;

/* The server-side identity of an object, as cached (its base version). */
struct oplog_version {
        uint64_t ino;
        uint64_t size;
        int64_t mtime_ns;
        int64_t ctime_ns;
        uint32_t mode;  /* st_mode: type and permission bits */
        uint32_t uid, gid;
        uint32_t nlink;
        /*
         * Regular file: blob id of the content in oplog_store() (see
         * oplog_put_base_fd()); symlink: blob id of the target; "" if unknown
         * (a file not completely cached: both-sides edits then conflict).
         */
        char content[FCACHE_MERGE_ID_SIZE];
};

/* Fills @v from @st; content is left "". */
void oplog_version_from_stat(struct oplog_version *v, const struct stat *st);

struct oplog_options {
        unsigned version;
        uint64_t max_bytes;     /* bound on log.db + WAL + content/ (0: none; the Reserve) */
        bool no_fsync;          /* tests and benchmarks only: skip every fsync */
        bool copy_content;      /* tests only: copy content at each record, as without privilege */
};
#define OPLOG_OPTIONS_VERSION 1
#define OPLOG_OPTIONS_INIT { OPLOG_OPTIONS_VERSION, 0, false, false }

/* Opens (creating) the log in directory @dir (created 0700 if missing). */
int oplog_open(struct oplog **out, const char *dir, const struct oplog_options *opts);
void oplog_close(struct oplog *log);
/*
 * Copies @log as of now into the existing empty directory @dir, a log of
 * its own for oplog_open() (a dry run on it does not hold @log).  The
 * copy's content files are hard links: @dir on the log's filesystem.
 */
int oplog_snapshot(struct oplog *log, const char *dir);

/* The base store of the log (base, local and remote versions by blob id). */
fcache_merge_store *oplog_store(struct oplog *log);

/* Stores the content of regular file @fd as a base version; *out gets its id. */
int oplog_put_base_fd(struct oplog *log, int fd, char out[FCACHE_MERGE_ID_SIZE]);

/* Records the base version of the volume root (its type, mode and owner). */
int oplog_set_root(struct oplog *log, const struct oplog_version *base);

/*
 * The lid of the server object with inode base->ino, cached under directory
 * lid @parent as @name, registering it with @base as its base version if the
 * log does not know it yet.  Call it before the first record of an object.
 */
int oplog_object(struct oplog *log, uint64_t parent, const char *name,
                 const struct oplog_version *base, uint64_t *out_lid);
/* The lid of the server object with inode @ino now, or when it was cached (-ENOENT: none). */
int oplog_find_ino(struct oplog *log, uint64_t ino, uint64_t *out_lid);
/* The same for an inode a mirror's mark names: first the object cached with
 * it (a replay may have given that one another inode since, and the server
 * the old number to another object). */
int oplog_find_cached_ino(struct oplog *log, uint64_t ino, uint64_t *out_lid);
/* Is the server object cached with inode @was now inode @now (a replay
 * renamed its new content over the server's file)? */
bool oplog_became(struct oplog *log, uint64_t was, uint64_t now);
/* Is object @lid on the server as inode @ino (once its create was replayed)? */
bool oplog_object_is(struct oplog *log, uint64_t lid, uint64_t ino);
/*
 * Object @lid (a file with several links) may also be on the server as
 * @name under directory lid @parent: replay follows it there when the name
 * it knows it by goes (it checks the inode number first).
 */
int oplog_object_alias(struct oplog *log, uint64_t lid, uint64_t parent, const char *name);

/*
 * In a record's flags: made again offline after its call to the server got
 * no answer within BackingTimeout, so the server may have applied it too.
 * oplog_mark_in_doubt() sets it on the last pending content, create, mkdir,
 * symlink, mknod, rename, setattr or xattr record of object @lid:
 * coalescing then keeps that record (a create is not cancelled by a later
 * unlink nor, when settled, given its file's later owner and mode, which go
 * in a setattr after it (oplog_settle_deferred()), a rename not folded into
 * a later one, a setattr or xattr neither
 * merged with a later one nor dropped by an unlink, a content record not
 * dropped by an unlink and its flag kept by the record replacing it), and
 * replay takes what the server made of it as done, which also makes it
 * the base later records of the object are compared with (a content
 * record in doubt takes what the server has beyond its base as its write).
 */
#define OPLOG_IN_DOUBT 0x10000
int oplog_mark_in_doubt(struct oplog *log, uint64_t lid);

/*
 * Records.  @uid/@gid are the owner the object gets (the caller's fsuid and
 * fsgid, or the setgid directory's group); @mode of create carries the type
 * (S_IFREG; S_IFIFO/S_IFSOCK/S_IFCHR/S_IFBLK with @rdev via _mknod).
 */
/*
 * write, truncate, fallocate: the content of object @lid is now that of
 * its container @fd (its local copy, a regular file the view keeps the
 * current bytes in).  The record names the container, it does not copy it:
 * replay reads the bytes the container has then.  Recording again a
 * container already recorded as the object's last change writes nothing
 * but its size (counted against max_bytes).  @fd may be open for writing
 * only (an application's descriptor).
 */
int oplog_record_content(struct oplog *log, uint64_t lid, int fd);

/*
 * Makes every record so far durable against a power loss (one sync of the
 * log's WAL, none if nothing was committed since the last call).  Records
 * are durable against a crash of the process when their call returns; the
 * view calls this where an application asks for durability (fsync).
 */
int oplog_durable(struct oplog *log);
/*
 * oplog_durable() for callers that serialize with @lock (held when called,
 * held again on return): the sync itself runs without it, so records go on
 * being appended meanwhile, and callers arriving during a sync wait for the
 * next one, which covers all of them (group commit: one WAL sync for the
 * fsyncs that arrive together).  Returns once every record committed before
 * the call is durable.
 */
int oplog_durable_grouped(struct oplog *log, pthread_mutex_t *lock);
int oplog_record_create(struct oplog *log, uint64_t parent, const char *name, mode_t mode,
                        uid_t uid, gid_t gid, uint64_t *out_lid);
int oplog_record_mknod(struct oplog *log, uint64_t parent, const char *name, mode_t mode,
                       dev_t rdev, uid_t uid, gid_t gid, uint64_t *out_lid);
int oplog_record_mkdir(struct oplog *log, uint64_t parent, const char *name, mode_t mode,
                       uid_t uid, gid_t gid, uint64_t *out_lid);
int oplog_record_symlink(struct oplog *log, uint64_t parent, const char *name,
                         const char *target, uid_t uid, gid_t gid, uint64_t *out_lid);
/*
 * A regular file created offline whose container is @dfd/@cname (its mirror
 * file): while this create is pending, the object's mode, owner, times and
 * bytes are the container's, and its changes need no record (see
 * oplog_deferred_change()); oplog_settle_deferred() writes what the
 * container holds then as the records replay reads.  An untar's file is one
 * record.  A container the log cannot name by handle makes a plain create.
 */
int oplog_record_create_deferred(struct oplog *log, uint64_t parent, const char *name,
                                 mode_t mode, uid_t uid, gid_t gid, int dfd, const char *cname,
                                 uint64_t *out_lid);
/*
 * Before recording a setattr or content of @lid: 1 when its create is
 * deferred (nothing to record; the container's size, @fd if >= 0, is
 * counted against max_bytes: -ENOSPC past it), 0 when the caller records.
 */
int oplog_deferred_change(struct oplog *log, uint64_t lid, int fd);
/*
 * Turns every deferred create into the records replay reads: the create
 * takes its container's mode and owner, a content record names the
 * container (when it holds bytes), a setattr carries its atime and mtime.
 * One transaction; reintegrate_run() calls it before taking the records.
 */
int oplog_settle_deferred(struct oplog *log);
int oplog_record_link(struct oplog *log, uint64_t lid, uint64_t newparent, const char *newname);
int oplog_record_unlink(struct oplog *log, uint64_t parent, const char *name, uint64_t lid);
int oplog_record_rmdir(struct oplog *log, uint64_t parent, const char *name, uint64_t lid);
/*
 * rename(2)/renameat2(2): @lid moves from parent/name to newparent/newname.
 * @other is the object that was at newparent/newname (replaced, or with
 * RENAME_EXCHANGE moved to parent/name), 0 if none.  @flags: RENAME_NOREPLACE,
 * RENAME_EXCHANGE.
 */
int oplog_record_rename(struct oplog *log, uint64_t parent, const char *name, uint64_t lid,
                        uint64_t newparent, const char *newname, uint64_t other,
                        unsigned flags);

enum {
        OPLOG_SET_MODE = 1u << 0,
        OPLOG_SET_UID = 1u << 1,
        OPLOG_SET_GID = 1u << 2,
        OPLOG_SET_ATIME = 1u << 3,
        OPLOG_SET_MTIME = 1u << 4,
};
struct oplog_setattr {
        unsigned mask;          /* OPLOG_SET_* */
        mode_t mode;            /* permission bits */
        uid_t uid;
        gid_t gid;
        struct timespec atime, mtime; /* tv_nsec UTIME_NOW is kept as "now at replay" */
};
int oplog_record_setattr(struct oplog *log, uint64_t lid, const struct oplog_setattr *sa);
int oplog_record_setxattr(struct oplog *log, uint64_t lid, const char *name, const void *value,
                          size_t size, int flags);
int oplog_record_removexattr(struct oplog *log, uint64_t lid, const char *name);

/* Record kinds (stored as numbers; the names are the interface). */
enum oplog_kind {
        OPLOG_CONTENT = 1,
        OPLOG_CREATE,
        OPLOG_MKDIR,
        OPLOG_SYMLINK,
        OPLOG_LINK,
        OPLOG_UNLINK,
        OPLOG_RMDIR,
        OPLOG_RENAME,
        OPLOG_SETATTR,
        OPLOG_SETXATTR,
        OPLOG_REMOVEXATTR,
        OPLOG_MKNOD,
        _OPLOG_KIND_MAX,
};
const char *oplog_kind_to_string(enum oplog_kind k); /* "content", "create", ... */

enum oplog_state {
        OPLOG_PENDING = 0,
        OPLOG_APPLIED = 1,      /* reached the server (or the server already had it) */
        OPLOG_CONFLICT = 2,     /* kept as a conflict (see the conflicts) */
        OPLOG_HELD = 3,         /* not applied: its object is in conflict */
};
const char *oplog_state_to_string(enum oplog_state s);

/* One record as read back; the strings live until the callback returns. */
struct oplog_record {
        uint64_t seq;
        enum oplog_kind kind;
        enum oplog_state state;
        uint64_t lid;
        uint64_t parent;        /* create/unlink/rename source location */
        const char *name;
        uint64_t parent2;       /* link/rename destination */
        const char *name2;
        uint64_t other;         /* rename: replaced or exchanged object */
        unsigned flags;         /* rename flags; setxattr flags; OPLOG_IN_DOUBT */
        unsigned mask;          /* setattr */
        uint32_t mode, uid, gid;
        uint64_t rdev;
        int64_t atime_ns, mtime_ns; /* setattr; UTIME_NOW/OMIT kept in nsec as in timespec */
        const char *content;    /* content: local blob id; symlink: target */
        uint64_t size;          /* content: bytes */
        const char *xname;      /* xattrs */
        const void *xvalue;
        size_t xsize;
        const char *outcome;    /* what reintegration did, or NULL */
};

/* Calls @fn for each record in log order (all states; @pending_only: only pending). */
int oplog_foreach(struct oplog *log, bool pending_only,
                  int (*fn)(void *ud, const struct oplog_record *r), void *ud);
/* Number of records in @state (or all with -1). */
int oplog_count(struct oplog *log, int state, uint64_t *out);

/* One recorded conflict; every version is kept in oplog_store() by id. */
struct oplog_conflict {
        uint64_t id;
        uint64_t seq;           /* the record that conflicted */
        uint64_t lid;
        const char *kind;       /* fcache_conflict_kind_to_string() */
        const char *path;       /* the object's server path (relative to the backing) */
        const char *base;       /* blob ids, "" where a side has no content */
        const char *local;
        const char *remote;
        const char *detail;     /* record kind and what was found */
        int64_t recorded_us;    /* when it was recorded, µs since the epoch (0: unknown) */
        int64_t local_changed_us; /* when the local side last changed (0: unknown) */
};
int oplog_conflict_foreach(struct oplog *log,
                           int (*fn)(void *ud, const struct oplog_conflict *c), void *ud);

/*
 * Whether object @lid is held behind a conflict: returns 1 and copies the
 * conflict's kind name (fcache_conflict_kind_to_string()) into @kind, 0 if
 * not, or -errno.
 */
int oplog_object_conflict(struct oplog *log, uint64_t lid, char kind[32]);

/* Opens the container of content record @seq read-only (reintegration). */
int oplog_content_open(struct oplog *log, uint64_t seq);

/*
 * Drops applied records (their content files too), and base-store blobs no
 * record, object or conflict refers to.  *out_removed (may be NULL) gets the
 * number of records dropped.
 */
int oplog_compact(struct oplog *log, uint64_t *out_removed);

/*
 * Forgets the objects no record or conflict needs any more (after
 * reintegration and oplog_compact()), so that the next offline period
 * registers them again with the server version they then have as base.
 */
int oplog_forget_settled(struct oplog *log, uint64_t *out_forgotten);

/*
 * With nothing pending: gives the space of settled records back (the
 * database rewritten to its live rows, the WAL truncated, base blobs no row
 * refers to dropped).  Else does nothing.  0 or -errno.
 */
int oplog_shrink(struct oplog *log);

/* Bytes used by the log (database, WAL, content files). */
int oplog_size(struct oplog *log, uint64_t *out);
