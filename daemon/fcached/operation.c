/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * operation.c: operation objects at /org/fcache/Manager1/operation/N.
 *
 * An operation stays exported for a while after it ends (the linger time)
 * so that a client that missed Finished can read State and Result; then
 * it is unexported and freed. Only the uid that started it, or root, may
 * cancel it; cancelling twice, or after the end, does nothing.
 */
#include "auth.h"
#include "operation.h"

#define PROGRESS_MS 200

static void operation_free(gpointer data)
{
        struct fcd_operation *op = data;

        if (op->timer)
                g_source_remove(op->timer);
        if (op->linger)
                g_source_remove(op->linger);
        g_dbus_interface_skeleton_unexport(G_DBUS_INTERFACE_SKELETON(op->skel));
        g_object_unref(op->skel);
        g_free(op->object_path);
        g_free(op);
}

static void sync_progress(struct fcd_operation *op, bool force)
{
        guint64 done = fcd_progress_get(&op->progress.files_done);
        guint64 seen = fcd_progress_get(&op->progress.files_seen);
        guint64 bytes = fcd_progress_get(&op->progress.bytes_done);
        gboolean walk_done = __atomic_load_n(&op->progress.walk_done, __ATOMIC_RELAXED) != 0;

        if (seen < done)
                seen = done;
        if (!force && done == op->last_done && seen == op->last_seen && bytes == op->last_bytes)
                return;
        op->last_done = done;
        op->last_seen = seen;
        op->last_bytes = bytes;
        fc_operation1_set_files_done(op->skel, done);
        fc_operation1_set_files_seen(op->skel, seen);
        fc_operation1_set_bytes_done(op->skel, bytes);
        fc_operation1_emit_progress(op->skel, done, seen, bytes, walk_done);
}

static gboolean on_progress_timer(gpointer data)
{
        sync_progress(data, false);
        return G_SOURCE_CONTINUE;
}

struct cancel_call {
        struct fcd_context *ctx;
        guint64 id;
        GDBusMethodInvocation *inv;
};

static void on_cancel_caller(GObject *src, GAsyncResult *res, gpointer data)
{
        g_autofree struct cancel_call *cc = data;
        g_autoptr(GError) error = NULL;
        struct fcd_caller caller;
        struct fcd_operation *op;

        if (!fcd_caller_lookup_finish(res, &caller, &error)) {
                g_dbus_method_invocation_return_gerror(cc->inv, error);
                return;
        }
        op = g_hash_table_lookup(cc->ctx->operations, &cc->id);
        if (!op) {
                g_dbus_method_invocation_return_error(cc->inv, FCD_ERROR, FCD_ERROR_NO_SUCH_PATH,
                                                      "The operation is gone");
                return;
        }
        if (caller.uid != 0 && caller.uid != op->owner_uid) {
                g_dbus_method_invocation_return_error(cc->inv, FCD_ERROR,
                                                      FCD_ERROR_NOT_AUTHORIZED,
                                                      "Only the user who started operation %"
                                                      G_GUINT64_FORMAT " (uid %u) or root may "
                                                      "cancel it", op->id, op->owner_uid);
                return;
        }
        if (!op->finished && !op->cancel) {
                g_message("Operation %" G_GUINT64_FORMAT " cancelled by uid %u", op->id,
                          caller.uid);
                __atomic_store_n(&op->cancel, 1, __ATOMIC_RELAXED);
        }
        fc_operation1_complete_cancel(op->skel, cc->inv);
}

static gboolean on_handle_cancel(FcOperation1 *skel, GDBusMethodInvocation *inv, gpointer data)
{
        struct fcd_operation *op = data;
        struct cancel_call *cc = g_new0(struct cancel_call, 1);

        cc->ctx = op->ctx;
        cc->id = op->id;
        cc->inv = inv;
        fcd_caller_lookup_async(op->ctx->bus, g_dbus_method_invocation_get_sender(inv),
                                on_cancel_caller, cc);
        return G_DBUS_METHOD_INVOCATION_HANDLED;
}

struct fcd_operation *fcd_operation_new(struct fcd_context *ctx, const char *path,
                                        const char *command, uid_t owner_uid, GError **error)
{
        struct fcd_operation *op;

        if (ctx->running_operations >= FCD_MAX_OPERATIONS) {
                g_set_error(error, FCD_ERROR, FCD_ERROR_BUSY, "%u operations are running, the "
                            "most fcached runs at once; try again later", FCD_MAX_OPERATIONS);
                return NULL;
        }
        op = g_new0(struct fcd_operation, 1);
        op->ctx = ctx;
        op->id = ++ctx->next_operation;
        op->owner_uid = owner_uid;
        op->object_path = g_strdup_printf(FCD_OPERATION_PREFIX "%" G_GUINT64_FORMAT, op->id);
        op->skel = fc_operation1_skeleton_new();
        fc_operation1_set_path(op->skel, path);
        fc_operation1_set_command(op->skel, command);
        fc_operation1_set_state(op->skel, "running");
        fc_operation1_set_result(op->skel, g_variant_new("a{sv}", NULL));
        fc_operation1_set_error_name(op->skel, "");
        fc_operation1_set_error_message(op->skel, "");
        g_signal_connect(op->skel, "handle-cancel", G_CALLBACK(on_handle_cancel), op);
        if (!g_dbus_interface_skeleton_export(G_DBUS_INTERFACE_SKELETON(op->skel), ctx->bus,
                                              op->object_path, error)) {
                g_object_unref(op->skel);
                g_free(op->object_path);
                g_free(op);
                return NULL;
        }
        op->timer = g_timeout_add(PROGRESS_MS, on_progress_timer, op);
        g_hash_table_insert(ctx->operations, &op->id, op);
        ctx->running_operations++;
        return op;
}

static gboolean on_linger_done(gpointer data)
{
        struct fcd_operation *op = data;

        op->linger = 0;
        g_hash_table_remove(op->ctx->operations, &op->id);
        return G_SOURCE_REMOVE;
}

void fcd_operation_finish(struct fcd_operation *op, GVariant *result, const GError *error)
{
        g_autoptr(GVariant) res = result ? g_variant_ref_sink(result)
                                         : g_variant_ref_sink(g_variant_new("a{sv}", NULL));
        g_autofree char *name = NULL;
        const char *state = "done";

        g_return_if_fail(!op->finished);
        op->finished = true;
        op->ctx->running_operations--;
        g_clear_handle_id(&op->timer, g_source_remove);
        sync_progress(op, true);
        if (error) {
                name = g_dbus_error_encode_gerror(error);
                state = g_error_matches(error, FCD_ERROR, FCD_ERROR_CANCELLED) ? "cancelled"
                                                                               : "failed";
        }
        fc_operation1_set_result(op->skel, res);
        fc_operation1_set_error_name(op->skel, name ? name : "");
        fc_operation1_set_error_message(op->skel, error ? error->message : "");
        fc_operation1_set_state(op->skel, state);
        /* Push the property changes out before the signal, so readers never see them stale. */
        g_dbus_interface_skeleton_flush(G_DBUS_INTERFACE_SKELETON(op->skel));
        fc_operation1_emit_finished(op->skel, state, res, name ? name : "",
                                    error ? error->message : "");
        op->linger = g_timeout_add_seconds(op->ctx->operation_linger_s, on_linger_done, op);
}

void fcd_operations_cancel_all(struct fcd_context *ctx)
{
        GHashTableIter it;
        gpointer value;

        g_hash_table_iter_init(&it, ctx->operations);
        while (g_hash_table_iter_next(&it, NULL, &value))
                __atomic_store_n(&((struct fcd_operation *)value)->cancel, 1, __ATOMIC_RELAXED);
}

void fcd_operations_free_all(struct fcd_context *ctx)
{
        g_hash_table_remove_all(ctx->operations);
}

void fcd_operation_destroy(gpointer data)
{
        operation_free(data);
}
