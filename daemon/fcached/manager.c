/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager.c: serves org.fcache.Manager1 at /org/fcache/Manager1.
 *
 * Every method becomes one command of the grammar on one path, and every
 * request goes the same way:
 *   parse    the command text (InvalidCommand)
 *   validate the path and options (InvalidArgument)
 *   authorize: the caller's identity from the bus, then polkit (NotAuthorized)
 *   act      in a worker thread with the caller's identity (dispatch.c), then
 *            the registry part in the main loop
 *   emit     PinsChanged and property changes
 *   reply    exactly once: the result, or the operation path at once for
 *            Start/Prefetch/Pin (the operation then ends with Finished)
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "dispatch.h"
#include "fcachectl.h"
#include "objects.h"
#include "operation.h"
#include "kmod-link.h"
#include "pins.h"

void fcd_request_free(struct fcd_request *req)
{
        if (!req)
                return;
        if (req->inv) /* never leave a caller without a reply */
                g_dbus_method_invocation_return_error(req->inv, FCD_ERROR, FCD_ERROR_FAILED,
                                                      "Internal error: no reply was made");
        fcd_pins_discard(req->ctx->pins, req->build);
        fc_result_free(&req->res);
        g_free(req->canonical);
        g_free(req->kernel_pin);
        g_free(req->sender);
        g_free(req->path);
        g_free(req->cmd_text);
        g_free(req);
}

static void reply_error(struct fcd_request *req, const GError *error)
{
        if (req->op) {
                fcd_operation_finish(req->op, NULL, error);
                req->op = NULL;
        }
        if (req->inv) {
                g_dbus_method_invocation_return_gerror(g_steal_pointer(&req->inv), error);
        }
}

static void log_outcome(struct fcd_request *req, const GError *error)
{
        if (error)
                g_message("%s %s for uid %u (%s): refused: %s", req->cmd_text, req->path,
                          req->caller.uid, req->sender, error->message);
        else
                g_debug("%s %s for uid %u: done", req->cmd_text, req->path, req->caller.uid);
}

guint fcd_tasks_in_flight;

static void on_worker_done(GObject *src, GAsyncResult *res, gpointer data)
{
        g_autoptr(fcd_request) req = g_task_get_task_data(G_TASK(res));
        g_autoptr(GError) error = NULL;
        g_autoptr(GVariant) result = NULL;

        fcd_tasks_in_flight--;
        if (fcd_dispatch_finish(req))
                fcd_manager_pins_changed(req->ctx);          /* emit */
        if (req->volume && req->canonical)  /* its counters may have moved */
                fcd_objects_volume_touched(req->ctx, req->canonical);
        if (req->r == 0 && req->res.oom)
                req->r = fc_error_set(&req->e, ENOMEM, "out of memory building the result");
        if (req->r < 0) {
                FcdError code = fcd_error_from_errno(req->e.code);
                error = g_error_new_literal(FCD_ERROR, code, req->e.text[0] ? req->e.text
                                                                             : "failed");
                log_outcome(req, error);
                reply_error(req, error);
                return;
        }
        result = g_variant_ref_sink(fcd_result_to_variant(req->res.buf));
        if (req->op) {
                fcd_operation_finish(req->op, result, NULL);
                req->op = NULL;
        }
        if (req->inv)
                g_dbus_method_invocation_return_value(g_steal_pointer(&req->inv),
                                                      g_variant_new("(@a{sv})", result));
}

static void worker(GTask *task, gpointer src, gpointer data, GCancellable *c)
{
        fcd_dispatch_thread(data);
        g_task_return_boolean(task, TRUE);
}

static void act(struct fcd_request *req)
{
        g_autoptr(GTask) task = g_task_new(NULL, NULL, on_worker_done, NULL);

        g_task_set_task_data(task, req, NULL);
        fcd_tasks_in_flight++;
        g_task_run_in_thread(task, worker);
}

static void on_authorized(GObject *src, GAsyncResult *res, gpointer data)
{
        struct fcd_request *req = data;
        g_autoptr(GError) error = NULL;
        bool as_operation = req->op != NULL;

        if (!fcd_polkit_check_finish(res, &error)) {
                req->op = NULL;
                log_outcome(req, error);
                reply_error(req, error);
                fcd_request_free(req);
                return;
        }
        if (as_operation) {
                /* The operation object exists only once the act is authorized. */
                req->op = fcd_operation_new(req->ctx, req->path, req->cmd_text, req->caller.uid,
                                            req->sender, &error);
                if (!req->op) {
                        reply_error(req, error);
                        fcd_request_free(req);
                        return;
                }
                g_dbus_method_invocation_return_value(g_steal_pointer(&req->inv),
                                                      g_variant_new("(o)", req->op->object_path));
        }
        act(req);
}

static void on_caller(GObject *src, GAsyncResult *res, gpointer data)
{
        struct fcd_request *req = data;
        g_autoptr(GError) error = NULL;
        gboolean interactive;

        if (!fcd_caller_lookup_finish(res, &req->caller, &error)) {
                req->op = NULL;
                reply_error(req, error);
                fcd_request_free(req);
                return;
        }
        interactive = (g_dbus_message_get_flags(g_dbus_method_invocation_get_message(req->inv)) &
                       G_DBUS_MESSAGE_FLAGS_ALLOW_INTERACTIVE_AUTHORIZATION) != 0;
        fcd_polkit_check_async(req->ctx->bus, req->sender, req->action, interactive,
                               on_authorized, req);
}

/* A marker meaning "run as an operation"; replaced by the real one once authorized. */
static struct fcd_operation pending_operation;

gboolean fcd_refuse(GDBusMethodInvocation *inv, FcdError code, const char *fmt, ...)
{
        g_autofree char *msg = NULL;
        va_list ap;

        va_start(ap, fmt);
        msg = g_strdup_vprintf(fmt, ap);
        va_end(ap);
        /* debug only: bad input must not flood the journal */
        g_debug("%s from %s refused: %s", g_dbus_method_invocation_get_method_name(inv),
                g_dbus_method_invocation_get_sender(inv), msg);
        g_dbus_method_invocation_return_error_literal(inv, FCD_ERROR, code, msg);
        return G_DBUS_METHOD_INVOCATION_HANDLED;
}

gboolean fcd_manager_request(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                             const char *path, const char *text, GVariant *options,
                             bool as_operation)
{
        struct fc_command cmd;
        struct fc_error e = { 0 };
        unsigned int atflags = 0;
        char canon[FCACHECTL_CMD_MAX + 1];
        struct fcd_request *req;
        size_t plen = strlen(path);

        /* parse */
        if (strlen(text) > FCACHECTL_CMD_MAX)
                return fcd_refuse(inv, FCD_ERROR_INVALID_COMMAND, "The command is longer than %d "
                            "bytes", FCACHECTL_CMD_MAX);
        if (fc_command_parse(text, &cmd, &e) < 0)
                return fcd_refuse(inv, FCD_ERROR_INVALID_COMMAND, "%s", e.text);
        fc_command_format(&cmd, canon, sizeof(canon));
        /* validate */
        if (plen == 0 || path[0] != '/')
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "The path must be absolute, not "
                            "'%.200s'", path);
        if (plen > FCD_PATH_MAX)
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "The path is longer than %d bytes",
                            FCD_PATH_MAX);
        if (options) {
                GVariantIter it;
                const char *key;
                GVariant *value;

                g_variant_iter_init(&it, options);
                while (g_variant_iter_loop(&it, "{&sv}", &key, &value)) {
                        unsigned int flag = !strcmp(key, "no-follow") ? AT_SYMLINK_NOFOLLOW
                                            : !strcmp(key, "no-automount") ? AT_NO_AUTOMOUNT : 0;
                        if (!flag || !g_variant_is_of_type(value, G_VARIANT_TYPE_BOOLEAN)) {
                                g_variant_unref(value);
                                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "Unknown option "
                                            "'%.64s' (known: no-follow, no-automount; both "
                                            "booleans)", key);
                        }
                        if (g_variant_get_boolean(value))
                                atflags |= flag;
                }
        }
        /* authorize (asynchronously), then act */
        req = g_new0(struct fcd_request, 1);
        req->ctx = ctx;
        req->inv = inv;
        req->sender = g_strdup(g_dbus_method_invocation_get_sender(inv));
        req->path = g_strdup(path);
        req->cmd_text = g_strdup(canon);
        req->cmd = cmd;
        req->atflags = atflags;
        req->action = fcd_action_for(&cmd);
        req->op = as_operation ? &pending_operation : NULL;
        fc_result_init(&req->res);
        fcd_caller_lookup_async(ctx->bus, req->sender, on_caller, req);
        return G_DBUS_METHOD_INVOCATION_HANDLED;
}

/* ---- the typed methods: each is one command of the grammar ---- */

static bool one_word(const char *s)
{
        if (!*s || strlen(s) > 64)
                return false;
        for (; *s; s++)
                if (!g_ascii_isalnum(*s) && *s != '-')
                        return false;
        return true;
}

static gboolean on_control(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                           const char *cmd, GVariant *options, gpointer ctx)
{
        return fcd_manager_request(ctx, inv, path, cmd, options, false);
}

static gboolean on_start(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                         const char *cmd, GVariant *options, gpointer ctx)
{
        return fcd_manager_request(ctx, inv, path, cmd, options, true);
}

static gboolean on_query(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                         const char *what, gboolean recursive, gpointer ctx)
{
        g_autofree char *cmd = NULL;

        if (!one_word(what))
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "'what' must be one word: cached, "
                            "dirty, pinned, cache, state, conflicts or reintegration");
        cmd = g_strdup_printf("query %s%s", what, recursive ? " recursive" : "");
        return fcd_manager_request(ctx, inv, path, cmd, NULL, false);
}

static gboolean on_flush(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                         const char *scope, gpointer ctx)
{
        g_autofree char *cmd = NULL;

        if (*scope && !one_word(scope))
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "'scope' must be \"\", volume, all "
                            "or callbacks");
        cmd = g_strdup_printf("flush%s%s", *scope ? " " : "", scope);
        return fcd_manager_request(ctx, inv, path, cmd, NULL, false);
}

static gboolean on_prefetch(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                            gboolean recursive, gpointer ctx)
{
        return fcd_manager_request(ctx, inv, path, recursive ? "prefetch recursive" : "prefetch",
                                   NULL, true);
}

gboolean fcd_manager_pin(struct fcd_context *ctx, GDBusMethodInvocation *inv, const char *path,
                         gboolean recursive, guint priority, gboolean dry_run)
{
        g_autofree char *cmd = NULL;

        if (priority > FC_PRIORITY_MAX)
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "priority %u is out of range (%d to "
                            "%d)", priority, FC_PRIORITY_MIN, FC_PRIORITY_MAX);
        cmd = g_strdup_printf("pin%s priority %u%s", recursive ? " recursive" : "", priority,
                              dry_run ? " dry-run" : "");
        return fcd_manager_request(ctx, inv, path, cmd, NULL, true);
}

static gboolean on_pin(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                       gboolean recursive, guint priority, gboolean dry_run, gpointer ctx)
{
        return fcd_manager_pin(ctx, inv, path, recursive, priority, dry_run);
}

gboolean fcd_manager_unpin(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                           const char *path, gboolean recursive)
{
        return fcd_manager_request(ctx, inv, path, recursive ? "unpin recursive" : "unpin", NULL,
                                   false);
}

static gboolean on_unpin(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                         gboolean recursive, gpointer ctx)
{
        return fcd_manager_unpin(ctx, inv, path, recursive);
}

static gboolean on_set_cache_size(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                                  guint64 bytes, gpointer ctx)
{
        g_autofree char *cmd = g_strdup_printf("set cache-size %" G_GUINT64_FORMAT, bytes);

        return fcd_manager_request(ctx, inv, path, cmd, NULL, false);
}

static gboolean on_set_cacheable(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                                 gboolean on, gpointer ctx)
{
        return fcd_manager_request(ctx, inv, path, on ? "set cacheable on" : "set cacheable off",
                                   NULL, false);
}

static gboolean on_set_reserve(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                               guint64 bytes, gpointer ctx)
{
        g_autofree char *cmd = g_strdup_printf("set reserve %" G_GUINT64_FORMAT, bytes);

        return fcd_manager_request(ctx, inv, path, cmd, NULL, false);
}

static gboolean on_set_cache(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                             const char *name, gpointer ctx)
{
        g_autofree char *cmd = NULL;

        if (!one_word(name))
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "The cache name must be one word "
                            "of letters, digits and '-'");
        cmd = g_strdup_printf("set cache %s", name);
        return fcd_manager_request(ctx, inv, path, cmd, NULL, false);
}

static gboolean on_disconnect(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                              gpointer ctx)
{
        return fcd_manager_request(ctx, inv, path, "disconnect", NULL, false);
}

static gboolean on_reconnect(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                             gpointer ctx)
{
        return fcd_manager_request(ctx, inv, path, "reconnect", NULL, false);
}

void fcd_manager_update_properties(struct fcd_context *ctx)
{
        fc_manager1_set_kmod_loaded(ctx->manager, fcd_kmod_loaded());
        fc_manager1_set_pin_count(ctx->manager, fcd_pins_count(ctx->pins));
        fc_manager1_set_pinned_bytes(ctx->manager, fcd_pins_bytes(ctx->pins));
        fc_manager1_set_resident_bytes(ctx->manager, fcd_pins_resident(ctx->pins));
        fc_manager1_set_budget_bytes(ctx->manager, fcd_pins_budget(ctx->pins));
}

void fcd_manager_pins_changed(struct fcd_context *ctx)
{
        if (!ctx->manager)
                return;
        fcd_manager_update_properties(ctx);
        g_dbus_interface_skeleton_flush(G_DBUS_INTERFACE_SKELETON(ctx->manager));
        fc_manager1_emit_pins_changed(ctx->manager, fcd_pins_count(ctx->pins),
                                      fcd_pins_files(ctx->pins), fcd_pins_bytes(ctx->pins));
}

int fcd_manager_export(struct fcd_context *ctx, GError **error)
{
        ctx->manager = fc_manager1_skeleton_new();
        fc_manager1_set_version(ctx->manager, FCACHE_VERSION);
        fcd_manager_update_properties(ctx);
        g_signal_connect(ctx->manager, "handle-control", G_CALLBACK(on_control), ctx);
        g_signal_connect(ctx->manager, "handle-start", G_CALLBACK(on_start), ctx);
        g_signal_connect(ctx->manager, "handle-query", G_CALLBACK(on_query), ctx);
        g_signal_connect(ctx->manager, "handle-flush", G_CALLBACK(on_flush), ctx);
        g_signal_connect(ctx->manager, "handle-prefetch", G_CALLBACK(on_prefetch), ctx);
        g_signal_connect(ctx->manager, "handle-pin", G_CALLBACK(on_pin), ctx);
        g_signal_connect(ctx->manager, "handle-unpin", G_CALLBACK(on_unpin), ctx);
        g_signal_connect(ctx->manager, "handle-set-cache-size", G_CALLBACK(on_set_cache_size),
                         ctx);
        g_signal_connect(ctx->manager, "handle-set-cacheable", G_CALLBACK(on_set_cacheable), ctx);
        g_signal_connect(ctx->manager, "handle-set-reserve", G_CALLBACK(on_set_reserve), ctx);
        g_signal_connect(ctx->manager, "handle-set-cache", G_CALLBACK(on_set_cache), ctx);
        g_signal_connect(ctx->manager, "handle-disconnect", G_CALLBACK(on_disconnect), ctx);
        g_signal_connect(ctx->manager, "handle-reconnect", G_CALLBACK(on_reconnect), ctx);
        fcd_manager_volumes_connect(ctx);
        if (!g_dbus_interface_skeleton_export(G_DBUS_INTERFACE_SKELETON(ctx->manager), ctx->bus,
                                              FCD_MANAGER_PATH, error))
                return -1;
        return 0;
}
