/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * resolve.h: settling a conflict that reintegration (reintegrate.h) kept.
 *
 * A conflict (oplog_conflict_foreach()) names an object, its kind
 * (fcache_conflict_kind) and the base, local and remote versions, kept in
 * oplog_store().  A person chooses one of:
 *   local   the server gets the local state of the object: its content, or
 *           its existence or absence, or its name;
 *   remote  the local change is dropped and the object follows the server;
 *   both    the server keeps its version under the name, and the local
 *           version is written beside it under fcache_merge_keep_both_name()
 *           (tag "local");
 *   merged  content conflicts (and text edited on both sides): the server
 *           gets the content of @merged_fd.
 * The server is reached only through @backing_dirfd and *at() calls, as in
 * reintegrate.c.  The conflict is then removed, and the object's records
 * that were held behind it are replayed (local, both, merged) or dropped
 * (remote).  Nothing is lost on the way: a crash at any point leaves the
 * conflict in place, or resolved with its effect on the server.
 *
 * Callers: the view (fcache-view's control socket, the only owner of the
 * log) on behalf of fcached's org.fcache.Conflict1.Resolve and
 * fcache-resolve(1).
 */
#pragma once

#include <stdint.h>
#include <limits.h>

#include "oplog.h"
#include "reintegrate.h"

enum resolve_how {
        RESOLVE_LOCAL,
        RESOLVE_REMOTE,
        RESOLVE_BOTH,
        RESOLVE_MERGED,
};

/* "local", "remote", "both", "merged". */
const char *resolve_how_to_string(enum resolve_how how);
/* 0, or -EINVAL for any other word. */
int resolve_how_from_string(const char *word, enum resolve_how *out);

struct resolve_outcome {
        uint64_t lid;                   /* the object the conflict was about */
        char path[PATH_MAX];            /* its server path now (relative), "" if it is gone */
        char kept[PATH_MAX];            /* both: the server path the local version got */
        uint64_t replayed, dropped;     /* held records replayed / dropped */
};

/*
 * Settles conflict @conflict_id.  @merged_fd is read only for
 * RESOLVE_MERGED (-1 otherwise).  @opts: its refresh callback is called
 * for every object whose server content changed (the view drops its store
 * copy); other fields as for reintegrate_run().  Returns 0, -ENOENT for an
 * unknown id, -EINVAL for a choice the kind does not allow (merged without
 * content), -ESTALE when the server changed the object again since the
 * conflict was recorded (run reintegration again: it re-records the
 * conflict with the new remote version), or the backing's -errno.
 */
int resolve_conflict(struct oplog *log, int backing_dirfd, uint64_t conflict_id,
                     enum resolve_how how, int merged_fd,
                     const struct reintegrate_options *opts, struct resolve_outcome *out);

/*
 * A read-only descriptor (a sealed memfd) with version @which ("base",
 * "local" or "remote") of conflict @conflict_id: a regular file's content or
 * a symlink's target.  -ENOENT when that side has no content (deleted, a
 * directory, never cached).
 */
int resolve_version_fd(struct oplog *log, uint64_t conflict_id, const char *which, int *out_fd);
