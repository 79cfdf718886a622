/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager-volumes.c: the Manager1 methods that add, remove and list fcache
 * volumes (the registry itself is volumes.c).  Add and remove are admin
 * acts (polkit org.fcache.volumes) and touch no caller's files, so they skip
 * the path pipeline of manager.c: authorize, then act in the main loop.
 */
#include <errno.h>
#include <string.h>

#include "auth.h"
#include "objects.h"
#include "volumes.h"

#define VOLUMES_ACTION "org.fcache.volumes"

struct volume_call {
        struct fcd_context *ctx;
        GDBusMethodInvocation *inv;
        char *name;
        char *config;           /* NULL: RemoveVolume */
};

static void volume_call_free(struct volume_call *c)
{
        g_free(c->name);
        g_free(c->config);
        g_free(c);
}

static void on_volume_authorized(GObject *src, GAsyncResult *res, gpointer data)
{
        struct volume_call *c = data;
        g_autoptr(GError) error = NULL;
        struct fc_error e = { 0 };
        int r;

        if (!fcd_polkit_check_finish(res, &error)) {
                g_dbus_method_invocation_return_gerror(c->inv, error);
                volume_call_free(c);
                return;
        }
        r = c->config ? fcd_volumes_add(c->ctx->volumes, c->name, c->config, &e)
                      : fcd_volumes_remove(c->ctx->volumes, c->name, &e);
        if (r < 0) {
                FcdError code = e.code == EEXIST ? FCD_ERROR_FAILED :
                                e.code == ENOENT ? FCD_ERROR_NO_SUCH_PATH :
                                                   FCD_ERROR_INVALID_ARGUMENT;
                g_message("%s %s refused: %s", c->config ? "AddVolume" : "RemoveVolume",
                          c->name, e.text);
                g_dbus_method_invocation_return_error_literal(c->inv, FCD_ERROR, code, e.text);
        } else {
                g_dbus_method_invocation_return_value(c->inv, NULL);
                fcd_objects_volumes_changed(c->ctx);
        }
        volume_call_free(c);
}

static gboolean volume_call_start(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                                  const char *name, const char *config)
{
        struct volume_call *c = g_new0(struct volume_call, 1);
        GDBusMessage *msg = g_dbus_method_invocation_get_message(inv);

        c->ctx = ctx;
        c->inv = inv;
        c->name = g_strdup(name);
        c->config = g_strdup(config);
        fcd_polkit_check_async(ctx->bus, g_dbus_method_invocation_get_sender(inv), VOLUMES_ACTION,
                               (g_dbus_message_get_flags(msg) &
                                G_DBUS_MESSAGE_FLAGS_ALLOW_INTERACTIVE_AUTHORIZATION) != 0,
                               on_volume_authorized, c);
        return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static gboolean on_add_volume(FcManager1 *m, GDBusMethodInvocation *inv, const char *name,
                              const char *config, gpointer ctx)
{
        return volume_call_start(ctx, inv, name, config);
}

static gboolean on_remove_volume(FcManager1 *m, GDBusMethodInvocation *inv, const char *name,
                                 gpointer ctx)
{
        return volume_call_start(ctx, inv, name, NULL);
}

static gboolean on_list_volumes(FcManager1 *m, GDBusMethodInvocation *inv, gpointer data)
{
        struct fcd_context *ctx = data;

        fc_manager1_complete_list_volumes(m, inv, fcd_volumes_list(ctx->volumes));
        return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static void on_volume_state(void *userdata, const char *name, const char *state,
                            const char *reason)
{
        struct fcd_context *ctx = userdata;

        if (!state) { /* metered: the Volume1 object's property follows */
                fcd_objects_volume_changed(ctx, name);
                return;
        }
        fc_manager1_set_volume_states(ctx->manager, fcd_volumes_states(ctx->volumes));
        fc_manager1_emit_volume_state_changed(ctx->manager, name, state, reason);
        if (!strcmp(state, "online")) /* a reconnect may have kept conflicts */
                fcd_manager_conflicts_poll(ctx, name);
        fcd_objects_volume_changed(ctx, name);
}

void fcd_manager_volumes_connect(struct fcd_context *ctx)
{
        fc_manager1_set_volume_states(ctx->manager, fcd_volumes_states(ctx->volumes));
        fcd_volumes_set_state_hook(ctx->volumes, on_volume_state, ctx);
        g_signal_connect(ctx->manager, "handle-add-volume", G_CALLBACK(on_add_volume), ctx);
        g_signal_connect(ctx->manager, "handle-remove-volume", G_CALLBACK(on_remove_volume), ctx);
        g_signal_connect(ctx->manager, "handle-list-volumes", G_CALLBACK(on_list_volumes), ctx);
        fcd_manager_conflicts_connect(ctx);
}
