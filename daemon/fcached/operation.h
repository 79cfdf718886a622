/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * operation.h: long operations on the bus, org.fcache.Operation1 (operation.c).
 *
 * Created once a request is authorized; the worker updates its progress
 * counters and polls its cancel flag; the main loop emits Progress about
 * five times a second and Finished once.
 */
#pragma once

#include "fcached.h"

struct fcd_operation {
        struct fcd_context *ctx;
        guint64 id;
        char *object_path;
        FcOperation1 *skel;          /* the property values; never exported */
        guint registration;          /* the object on the bus */
        uid_t owner_uid;             /* who may read and cancel it (and root) */
        char *owner_sender;          /* the unique bus name its signals go to */
        struct fcd_progress progress;
        volatile int cancel;         /* set by Cancel, read by the worker */
        guint timer, linger;
        bool finished;
        guint64 last_done, last_seen, last_bytes;
};

/* NULL with FCD_ERROR_BUSY when too many are running. */
struct fcd_operation *fcd_operation_new(struct fcd_context *ctx, const char *path,
                                        const char *command, uid_t owner_uid,
                                        const char *owner_sender, GError **error);
/* Exactly once: result (floating or not) on success, else error. */
void fcd_operation_finish(struct fcd_operation *op, GVariant *result, const GError *error);
/* The destroy function of the context's operation table. */
void fcd_operation_destroy(gpointer data);
/* Ask every running operation to stop (shutdown). */
void fcd_operations_cancel_all(struct fcd_context *ctx);
/* Drop every operation (shutdown). */
void fcd_operations_free_all(struct fcd_context *ctx);
