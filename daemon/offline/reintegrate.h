/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reintegrate.h: replay an offline operation log (oplog.h) against the
 * server, reached only through @backing_dirfd (the volume's Backing=
 * directory) and *at() calls.
 *
 * Records replay in log order, independent ones at the same time
 * (reintegrate-pool.h).  For each, the server's state of the objects
 * it touches is compared with the base version the log recorded for them:
 *   - unchanged: the change is applied (content in place, from a durable
 *     temporary in the same directory; regular files created O_EXCL at
 *     their name, with the bytes of their first content record; other
 *     creates through a temporary renamed with RENAME_NOREPLACE; a
 *     backing without it, sshfs or NFS, is checked and then renamed, never
 *     linked and unlinked, which leaves a file open there under a
 *     silly-renamed name);
 *   - the server already shows the record's result (a replay interrupted
 *     after the server write): marked applied, nothing done twice;
 *   - changed on both sides: classified with fcache_merge_structure(); text
 *     files edited on both are merged with fcache_merge_content(): a clean
 *     merge is written, overlapping edits become a "content" conflict;
 *   - a conflict is recorded (oplog_conflict_foreach()) with the base, local
 *     and remote versions kept in oplog_store(); the server is left as it
 *     is and later records of the object are held behind the conflict.
 *
 * Each record is marked atomically with the server identity it produced
 * (one entry of a replay journal written as the record completes, folded
 * into the SQLite log in batches), so a crash or a server that drops
 * mid-replay leaves at most the record in progress in doubt, and its check
 * above settles it when reintegrate_run() is called again (a record logged
 * meanwhile is kept apart from it: reintegrate_recover()).  An
 * error from the backing (EIO, ETIMEDOUT, ENOTCONN, ...) stops the run and
 * is returned; the volume goes back offline and calls it again later.
 *
 * The log must not be used by another thread while a run is under way (one
 * struct oplog, one thread), unless the caller gives the run the mutex it
 * records under (opts.lock): then changes are recorded during the run, which
 * replays the records pending at its start (up to a sequence K, the log as
 * it stood) and takes the mutex only to read and mark the log, never across
 * a call to the backing.  Until it returns, a record made after K never
 * coalesces with one up to K (oplog_set_replaying()): it is replayed by the
 * next run, after what it follows.
 *
 * Known limits: content is written in place (the server's object keeps its
 * inode, links and other clients' open files), so until the run is
 * finished after a crash in the middle of that write, another client can
 * read the file half written; a run cut
 * between a regular file's create intent and its mark (killed, or the link
 * reset) takes a regular file at that name holding nothing or exactly the
 * bytes the create carries as its own (one the server made there alike is
 * then not kept as a conflict); objects are
 * recognized by inode number, so the backing needs stable inode numbers
 * (NFS, SMB with serverino, local filesystems; sshfs without them does not
 * qualify).
 *
 * Conflict decisions never use timestamps' order: "changed" is decided by
 * inode, size, mtime and ctime equality for the fast path and by content id
 * (git blob hash) otherwise.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "fcache-merge.h"
#include "oplog.h"

enum reintegrate_outcome {
        REINTEGRATE_APPLIED = 0, /* "apply": applied (dry run: would apply) */
        REINTEGRATE_ALREADY,     /* "already": the server already had the result */
        REINTEGRATE_MERGED,      /* "merge": a clean three-way merge was written */
        REINTEGRATE_CONFLICT,    /* "conflict": kept as a conflict */
        REINTEGRATE_HELD,        /* "held": behind an earlier conflict of its object */
        _REINTEGRATE_OUTCOME_MAX,
};
const char *reintegrate_outcome_to_string(enum reintegrate_outcome o);

/* What one record did (or would do, in a dry run). */
struct reintegrate_item {
        const struct oplog_record *record;
        enum reintegrate_outcome outcome;
        fcache_conflict_kind conflict;  /* CONFLICT (and HELD: the blocking kind) */
        const char *path;               /* the object's server path, or NULL */
        uint64_t done, total;           /* records finished in this run, records pending at start */
};

struct reintegrate_stats {
        uint64_t total;         /* pending records at the start */
        uint64_t applied, already, merged, conflicts, held;
};

struct reintegrate_options {
        unsigned version;
        /* List what would happen from the server's current state; change nothing. */
        bool dry_run;
        /*
         * Records between fdatasyncs of the replay journal (0: 256).  Every
         * record is marked as it completes, durable against a crash of the
         * process at once; this bounds how many a power loss can put back in
         * doubt (to be settled by their checks).
         */
        unsigned sync_every;
        /* Structure classification flags (FCACHE_MERGE_STRUCTURE_*). */
        unsigned structure_flags;
        /* Called after each record (a real run: in the order they finish). */
        void (*progress)(void *userdata, const struct reintegrate_item *item);
        /* Checked before each record starts; true stops the run with -ECANCELED
         * (resumable) once the records in flight have finished. */
        bool (*cancel)(void *userdata);
        /* The server now has content for @lid the store does not (a merge): refetch it. */
        void (*refresh)(void *userdata, uint64_t lid);
        void *userdata;
        /*
         * Records replayed at the same time (0: 8), each waiting on the
         * backing while the others proceed; only records that depend on
         * each other keep their order (reintegrate-pool.h).  A dry run
         * looks as many at once and reports them in log order.  Callbacks
         * are called one at a time, from these threads.
         */
        unsigned threads;
        /*
         * The mutex the caller records into the log under (see above), or
         * NULL; the caller does not hold it when it calls reintegrate_run().
         */
        pthread_mutex_t *lock;
        /* Called from the replay's threads as each call to the backing
         * returns (the lock may be held: take nothing it orders): a sign of
         * life for a caller that bounds a run that stopped moving. */
        void (*moved)(void *userdata);
        /* The server file @server (its stat after the replay's last change)
         * now holds the bytes of the record's local content @local (the
         * container's stat): the mirror's resync can take it as the same
         * without reading it back.  Called under the lock. */
        void (*wrote)(void *userdata, const struct stat *server, const struct stat *local);
        /* The replay changed only the owner, mode or times of server file
         * @before, which is @after now: the same bytes (what wrote() said
         * of @before holds for @after).  Called under the lock. */
        void (*restamped)(void *userdata, const struct stat *before, const struct stat *after);
        /* True while a writer of @lid's server file writes it directly (the
         * kernel passes it through to that file, opened before the volume
         * went offline): the server holds each of its writes as it is made,
         * so a content record of the object is the server's already.  It is
         * marked so, the server's version the new base, and never written
         * over what the writer goes on writing.  May be NULL. */
        bool (*written_through)(void *userdata, uint64_t lid);
        /* The backing is a local filesystem: the new files of a batch of
         * records are made durable by one syncfs() before their marks are,
         * not by an fsync each (see reintegrate.c, "Marking records"). */
        bool backing_local;
        /* The backing makes its inode numbers up and may give a file a new
         * one (sshfs, for a file it forgot and looked up again, or after
         * it was mounted again): the object of the record's kind at the
         * name replay knows an object by is that object, its inode number
         * taken anew once a run; its size and times still tell changes. */
        bool names_identify;
};
#define REINTEGRATE_OPTIONS_VERSION 1
#define REINTEGRATE_OPTIONS_INIT { REINTEGRATE_OPTIONS_VERSION }

/*
 * Replays the pending records of @log against @backing_dirfd.  Returns 0
 * when every record is applied or kept as a conflict (*out, may be NULL,
 * gets the counts), or -errno with the log intact and resumable.
 */
int reintegrate_run(struct oplog *log, int backing_dirfd, const struct reintegrate_options *opts,
                    struct reintegrate_stats *out);

/*
 * Takes up where a run the last process did not finish left @log: the
 * marks and intents of its journal folded in, and the records that run was
 * to replay kept from coalescing with later ones until the next run ends
 * (one it was in may be on the server without its mark).  Call it when the
 * log is opened, before any record is appended: one coalesced into a
 * record the journal had marked was lost with that mark.  0 or -errno.
 */
int reintegrate_recover(struct oplog *log);

/*
 * The dry run as `query reintegration` key=value lines:
 *   records=N apply=N already=N merge=N conflict=N held=N
 * then one line per record: "record=SEQ kind=KIND outcome=OUTCOME
 * [conflict=KIND] path=PATH".  *out is malloc()ed (free it).
 */
int reintegrate_dry_run_text(struct oplog *log, int backing_dirfd, char **out);
