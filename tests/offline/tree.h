/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tree.h: test helpers shared by the offline tests: a canonical dump of a
 * directory tree (for comparing a server with a model), whole-file helpers,
 * registering a server tree's objects with an oplog, and the fixture of the
 * reintegration and resolution tests.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oplog.h"

/*
 * One line per entry, sorted by path: "PATH TYPE MODE UID:GID NLINK? CONTENT"
 * where CONTENT is the sha of a file, the target of a symlink, "-" for
 * directories; user.* xattrs follow as "x:name=value".  Entries whose name
 * starts with @skip_prefix (e.g. ".fcache-") are listed as LEFTOVER lines.
 * Returns a g_malloc()ed string.
 */
char *tree_dump(int dirfd, bool with_times);

/* Writes @text as the whole of file @path under @dirfd (created 0644). */
void tree_put(int dirfd, const char *path, const char *text);
/* The whole content of @path under @dirfd (g_malloc()ed), or NULL if absent. */
char *tree_get(int dirfd, const char *path);

/*
 * The lid of the object at @path (relative, "" for the root) of the server
 * tree @dirfd, registering it and its parents with @log (files' content is
 * stored as their base version).
 */
uint64_t tree_register(struct oplog *log, int dirfd, const char *path);

/*
 * A test's world, in a temporary directory: the server (the backing), the
 * offline log, and a scratch file standing in for the view's store copy.
 */
struct server_fixture {
        char *dir;
        int srv;
        struct oplog *log;
        int scratch;
        unsigned refreshed;     /* calls of fixture_refresh() */
};
/* GTest setup and teardown of a struct server_fixture. */
void fixture_setup(struct server_fixture *f, const void *data);
void fixture_teardown(struct server_fixture *f, const void *data);
/* Records @text as the whole local content of object @lid. */
/* A new scratch file (a container): what was recorded from the old one stays. */
void fixture_new_scratch(struct server_fixture *f);
void fixture_local(struct server_fixture *f, uint64_t lid, const char *text);
/* A reintegrate_options.refresh callback (userdata: the fixture) that counts. */
void fixture_refresh(void *ud, uint64_t lid);
