/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fault.h: named crash points for tests of disconnected operation.
 *
 * FCACHE_FAULT=<point>:<n>[,<point>:<n>...] in the environment makes the
 * process raise(SIGKILL) the n-th time (n >= 1) it passes the named point.
 * Always compiled in: with FCACHE_FAULT unset a point costs one load and one
 * branch.  The points, in the order a change travels:
 *
 *   oplog-before-data      an offline change is being logged; its local
 *                          content is not yet durable (nothing acknowledged)
 *   oplog-before-commit    the content is durable in the log directory, the
 *                          log row is written but not committed
 *   reint-after-write      reintegration changed the server, the record is
 *                          not yet marked applied
 *   reint-merge-output     a clean three-way merge is written to a temporary
 *                          on the server, not yet copied into the file
 *   reint-conflict-found   reintegration found a conflict and fetches the
 *                          server's version to keep (local changes go on
 *                          meanwhile), then keeps the local one
 *   reint-conflict-record  a conflict's remote version is saved in the base
 *                          store, the conflict row is not yet committed
 *   reint-in-place-write   a file's content is being rewritten in place from
 *                          its temporary: truncated, not yet written
 *   reint-linked-unlink    one name of a file with several links was
 *                          removed on the server, the record not yet marked
 *   view-switch-online     a reconnect replayed the log and is about to
 *                          switch the volume's nodes and open files online
 *   view-cache-file        a file the store holds whole is about to go into
 *                          the mirror (its server object is asked first)
 *   view-cache-placed      such a file is in the mirror (the store's content
 *                          file linked there), the store's rows not yet
 *                          changed
 *   view-check-cached      after a (re)connect, the check of the cached files
 *                          not pinned is about to ask the server about one
 *   view-opendir           a FUSE thread is about to serve an opendir (a test
 *                          holds FUSE threads there)
 *   view-pin-file          a pin walk did a file and reported its progress
 *                          (a test holds the walk there to cancel it)
 *   view-note-renamed      a rename made online moved its mirror copy; the
 *                          copies of its two names are about to be brought
 *                          up to date from the server
 *
 * FCACHE_FAULT_PAUSE=<point>:<gate>[,<point>:<gate>...] makes the process wait at the point
 * while file <gate> exists, after making <gate>.reached: a test acts there
 * (stops the server) and removes <gate> to let it go on.
 */
#pragma once

#include <stdbool.h>

#define FAULT_OPLOG_BEFORE_DATA "oplog-before-data"
#define FAULT_OPLOG_BEFORE_COMMIT "oplog-before-commit"
#define FAULT_REINT_AFTER_WRITE "reint-after-write"
#define FAULT_REINT_MERGE_OUTPUT "reint-merge-output"
#define FAULT_REINT_CONFLICT_FOUND "reint-conflict-found"
#define FAULT_REINT_CONFLICT_RECORD "reint-conflict-record"
#define FAULT_REINT_IN_PLACE_WRITE "reint-in-place-write"
#define FAULT_REINT_LINKED_UNLINK "reint-linked-unlink"
#define FAULT_VIEW_SWITCH_ONLINE "view-switch-online"
#define FAULT_VIEW_CACHE_FILE "view-cache-file"
#define FAULT_VIEW_CACHE_PLACED "view-cache-placed"
#define FAULT_VIEW_CHECK_CACHED "view-check-cached"
#define FAULT_VIEW_OPENDIR "view-opendir"
#define FAULT_VIEW_PIN_FILE "view-pin-file"
#define FAULT_VIEW_NOTE_RENAMED "view-note-renamed"

/* Passes the named point; kills the process if FCACHE_FAULT says so. */
void fault_point(const char *name);

/* Whether any fault is armed (FCACHE_FAULT parsed and non-empty). */
bool fault_armed(void);

/* Re-reads FCACHE_FAULT and resets the counters (tests that set it with setenv()). */
void fault_reload(void);
