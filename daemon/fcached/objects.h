/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * objects.h: the volumes and conflicts as D-Bus objects (objects.c):
 * org.freedesktop.DBus.ObjectManager at /org/fcache, org.fcache.Volume1 at
 * /org/fcache/volume/NAME, org.fcache.Conflict1 at
 * /org/fcache/conflict/VOLUME/ID.  Each user sees (in GetManagedObjects,
 * Properties, signals) only the objects it may read.  Main loop only.
 */
#pragma once

#include "fcached.h"

#define FCD_OBJECT_MANAGER_PATH "/org/fcache"

/* Registers the object manager and makes the objects of the volumes there are. */
int fcd_objects_start(struct fcd_context *ctx, GError **error);
/* Unregisters everything (no signal: the name is gone). */
void fcd_objects_free(struct fcd_context *ctx);

/* Volume @name changed (state, after a resolve...): read it again and tell who may see it. */
void fcd_objects_volume_changed(struct fcd_context *ctx, const char *name);
/* A request acted on @canonical: if it lies in a volume, as fcd_objects_volume_changed. */
void fcd_objects_volume_touched(struct fcd_context *ctx, const char *canonical);
/* Volumes were added or removed. */
void fcd_objects_volumes_changed(struct fcd_context *ctx);
