/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * resolve-bus.h: fcache-resolve's way through fcached's D-Bus API (the
 * org.fcache.Volume1 and org.fcache.Conflict1 objects under the
 * ObjectManager at /org/fcache), for callers who cannot use a volume's
 * root-only control socket.  fcached shows each caller only the volumes and
 * conflicts it may read, and checks polkit (org.fcache.resolve) and the
 * caller's own access on every version and resolve.
 */
#pragma once

#include <gio/gio.h>
#include <stdbool.h>

struct rbus_volume {
        char *name;
        char *mountpoint;
};

struct rbus_conflict {
        guint64 id;
        char *object;           /* its D-Bus object path */
        char *volume;
        char *path;             /* absolute, under the volume's mountpoint */
        char *kind;
        char *detail;
};

struct rbus {
        GDBusConnection *bus;
        bool interactive;       /* calls may wait for polkit to ask a password */
        GPtrArray *volumes;     /* struct rbus_volume, the caller may see */
        GPtrArray *conflicts;   /* struct rbus_conflict, the caller may see */
};

/* Connects to the system bus and reads the objects; false with *error set. */
bool rbus_open(struct rbus *b, bool interactive, GError **error);
void rbus_close(struct rbus *b);
/* The volume whose mountpoint holds absolute @path (the innermost), or NULL. */
const struct rbus_volume *rbus_volume_of(const struct rbus *b, const char *path);
/* One version ("base", "local", "remote") of a conflict: 1 with *data (NUL
 * terminated, g_free) and *size; 0 when that side has no content; -1 with *error. */
int rbus_version(struct rbus *b, const char *object, const char *which, char **data,
                 size_t *size, GError **error);
/* Resolve(how) or ResolveMerged(@data): the result's "key=value" lines
 * (GPtrArray of g_free()d strings; a list value as one line per item), or NULL. */
GPtrArray *rbus_resolve(struct rbus *b, const char *object, const char *how, GError **error);
GPtrArray *rbus_resolve_merged(struct rbus *b, const char *object, const char *data,
                               size_t size, GError **error);
