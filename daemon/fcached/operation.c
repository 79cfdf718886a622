/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * operation.c: operation objects at /org/fcache/Manager1/operation/N.
 *
 * An operation stays exported for a while after it ends (the linger time)
 * so that a client that missed Finished can read State and Result; then
 * it is unexported and freed. Only the uid that started it, or root, may
 * cancel it; cancelling twice, or after the end, does nothing.
 *
 * An operation's Path, Command and Result are the owner's business: the
 * object is registered with our own vtable rather than exported as a
 * skeleton, so that Get and GetAll answer only the owner's uid and root,
 * and its signals (Progress, Finished, PropertiesChanged) go to the bus
 * name that started it, never broadcast. The generated skeleton is kept,
 * unexported, as the typed store of the property values.
 */
#include <string.h>

#include "auth.h"
#include "operation.h"

#define PROGRESS_MS 200
#define OPERATION_IFACE "org.fcache.Operation1"
#define PROPERTIES_IFACE "org.freedesktop.DBus.Properties"

/* Unicast to the bus name that started the operation. */
static void emit_to_owner(struct fcd_operation *op, const char *iface, const char *name,
                          GVariant *params)
{
        g_autoptr(GError) error = NULL;

        if (!g_dbus_connection_emit_signal(op->ctx->bus, op->owner_sender, op->object_path, iface,
                                           name, params, &error))
                g_debug("Failed to send %s of operation %" G_GUINT64_FORMAT " to %s: %s, ignoring",
                        name, op->id, op->owner_sender, error->message);
}

/* PropertiesChanged with the current values of the NULL-terminated names. */
static void emit_changed(struct fcd_operation *op, const char *const *names)
{
        g_autoptr(GVariant) all = g_dbus_interface_skeleton_get_properties(
                G_DBUS_INTERFACE_SKELETON(op->skel));
        GVariantBuilder b;

        g_variant_builder_init(&b, G_VARIANT_TYPE("a{sv}"));
        for (; *names; names++) {
                g_autoptr(GVariant) v = g_variant_lookup_value(all, *names, NULL);

                if (v)
                        g_variant_builder_add(&b, "{sv}", *names, v);
        }
        emit_to_owner(op, PROPERTIES_IFACE, "PropertiesChanged",
                      g_variant_new("(sa{sv}as)", OPERATION_IFACE, &b, NULL));
}

static void operation_free(gpointer data)
{
        struct fcd_operation *op = data;

        if (op->timer)
                g_source_remove(op->timer);
        if (op->linger)
                g_source_remove(op->linger);
        g_dbus_connection_unregister_object(op->ctx->bus, op->registration);
        g_object_unref(op->skel);
        g_free(op->owner_sender);
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
        emit_changed(op, (const char *const[]){ "FilesDone", "FilesSeen", "BytesDone", NULL });
        emit_to_owner(op, OPERATION_IFACE, "Progress",
                      g_variant_new("(tttb)", done, seen, bytes, walk_done));
}

static gboolean on_progress_timer(gpointer data)
{
        sync_progress(data, false);
        return G_SOURCE_CONTINUE;
}

/* A call on the object that waits for the caller's uid. */
struct op_call {
        struct fcd_context *ctx;
        guint64 id;
        GDBusMethodInvocation *inv;
};

static bool may_see(const struct fcd_operation *op, uid_t uid)
{
        return uid == 0 || uid == op->owner_uid;
}

static void cancel(struct fcd_operation *op, GDBusMethodInvocation *inv, uid_t uid)
{
        if (!may_see(op, uid)) {
                g_dbus_method_invocation_return_error(inv, FCD_ERROR, FCD_ERROR_NOT_AUTHORIZED,
                                                      "Only the user who started operation %"
                                                      G_GUINT64_FORMAT " (uid %u) or root may "
                                                      "cancel it", op->id, op->owner_uid);
                return;
        }
        if (!op->finished && !op->cancel) {
                g_message("Operation %" G_GUINT64_FORMAT " cancelled by uid %u", op->id, uid);
                __atomic_store_n(&op->cancel, 1, __ATOMIC_RELAXED);
        }
        g_dbus_method_invocation_return_value(inv, NULL);
}

static void get_properties(struct fcd_operation *op, GDBusMethodInvocation *inv, uid_t uid)
{
        g_autoptr(GVariant) all = NULL;
        const char *iface, *name;
        GVariant *params = g_dbus_method_invocation_get_parameters(inv);

        /* Whether the operation exists is no secret; what it does is. */
        if (!may_see(op, uid)) {
                g_dbus_method_invocation_return_error(inv, FCD_ERROR, FCD_ERROR_ACCESS_DENIED,
                                                      "Only the user who started operation %"
                                                      G_GUINT64_FORMAT " or root may read it",
                                                      op->id);
                return;
        }
        all = g_dbus_interface_skeleton_get_properties(G_DBUS_INTERFACE_SKELETON(op->skel));
        if (!strcmp(g_dbus_method_invocation_get_method_name(inv), "GetAll")) {
                g_dbus_method_invocation_return_value(inv, g_variant_new("(@a{sv})", all));
                return;
        }
        g_variant_get(params, "(&s&s)", &iface, &name);
        GVariant *v = g_variant_lookup_value(all, name, NULL);
        if (!v) {
                g_dbus_method_invocation_return_error(inv, G_DBUS_ERROR,
                                                      G_DBUS_ERROR_INVALID_ARGS,
                                                      "No such property '%s'", name);
                return;
        }
        g_dbus_method_invocation_return_value(inv, g_variant_new("(@v)", g_variant_new_variant(v)));
        g_variant_unref(v);
}

static void on_call_caller(GObject *src, GAsyncResult *res, gpointer data)
{
        g_autofree struct op_call *oc = data;
        g_autoptr(GError) error = NULL;
        struct fcd_caller caller;
        struct fcd_operation *op;

        if (!fcd_caller_lookup_finish(res, &caller, &error)) {
                g_dbus_method_invocation_return_gerror(oc->inv, error);
                return;
        }
        op = g_hash_table_lookup(oc->ctx->operations, &oc->id);
        if (!op) {
                g_dbus_method_invocation_return_error(oc->inv, FCD_ERROR, FCD_ERROR_NO_SUCH_PATH,
                                                      "The operation is gone");
                return;
        }
        if (!strcmp(g_dbus_method_invocation_get_interface_name(oc->inv), PROPERTIES_IFACE))
                get_properties(op, oc->inv, caller.uid);
        else
                cancel(op, oc->inv, caller.uid);
}

/*
 * Every call on the object: Cancel, and (get_property being NULL in the
 * vtable) Properties.Get, GetAll and Set, so that reads can be checked.
 */
static void on_method_call(GDBusConnection *bus, const char *sender, const char *path,
                           const char *iface, const char *method, GVariant *params,
                           GDBusMethodInvocation *inv, gpointer data)
{
        struct fcd_operation *op = data;
        struct op_call *oc;

        if (!strcmp(iface, PROPERTIES_IFACE) && !strcmp(method, "Set")) {
                g_dbus_method_invocation_return_error(inv, G_DBUS_ERROR,
                                                      G_DBUS_ERROR_PROPERTY_READ_ONLY,
                                                      "The properties of an operation are "
                                                      "read-only");
                return;
        }
        oc = g_new0(struct op_call, 1);
        oc->ctx = op->ctx;
        oc->id = op->id;
        oc->inv = inv;
        fcd_caller_lookup_async(op->ctx->bus, sender, on_call_caller, oc);
}

static const GDBusInterfaceVTable operation_vtable = {
        .method_call = on_method_call,
};

struct fcd_operation *fcd_operation_new(struct fcd_context *ctx, const char *path,
                                        const char *command, uid_t owner_uid,
                                        const char *owner_sender, GError **error)
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
        op->owner_sender = g_strdup(owner_sender);
        op->object_path = g_strdup_printf(FCD_OPERATION_PREFIX "%" G_GUINT64_FORMAT, op->id);
        op->skel = fc_operation1_skeleton_new();
        fc_operation1_set_path(op->skel, path);
        fc_operation1_set_command(op->skel, command);
        fc_operation1_set_state(op->skel, "running");
        fc_operation1_set_result(op->skel, g_variant_new("a{sv}", NULL));
        fc_operation1_set_error_name(op->skel, "");
        fc_operation1_set_error_message(op->skel, "");
        op->registration = g_dbus_connection_register_object(ctx->bus, op->object_path,
                                                             fc_operation1_interface_info(),
                                                             &operation_vtable, op, NULL, error);
        if (!op->registration) {
                g_object_unref(op->skel);
                g_free(op->owner_sender);
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
        /* Property changes go out before the signal, so readers never see them stale. */
        emit_changed(op, (const char *const[]){ "State", "Result", "ErrorName", "ErrorMessage",
                                                NULL });
        emit_to_owner(op, OPERATION_IFACE, "Finished",
                      g_variant_new("(s@a{sv}ss)", state, res, name ? name : "",
                                    error ? error->message : ""));
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
