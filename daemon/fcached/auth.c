/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * auth.c: who the caller is and what polkit lets it do, asked over the bus.
 *
 * The identity comes from the bus daemon (GetConnectionCredentials: uid,
 * groups, pid), never from anything the caller sends. polkit is asked with
 * the caller's unique bus name as the subject ("system-bus-name"), so that
 * polkitd itself looks up the caller's process and session. Both calls are
 * asynchronous: the main loop never waits on them.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"

#define POLKIT_NAME "org.freedesktop.PolicyKit1"
#define POLKIT_PATH "/org/freedesktop/PolicyKit1/Authority"
#define POLKIT_IFACE "org.freedesktop.PolicyKit1.Authority"
#define NOGROUP ((gid_t)65534)
#define CACHE_MAX 4096

static GHashTable *creds_cache; /* unique name -> struct fcd_caller; main loop only */
static guint owner_changed_sub;

static void on_name_owner_changed(GDBusConnection *bus, const char *sender, const char *path,
                                  const char *iface, const char *signal, GVariant *params,
                                  gpointer data)
{
        const char *name, *old, *new;

        g_variant_get(params, "(&s&s&s)", &name, &old, &new);
        if (name[0] == ':' && !*new)
                g_hash_table_remove(creds_cache, name);
}

void fcd_auth_init(GDBusConnection *bus)
{
        creds_cache = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        owner_changed_sub = g_dbus_connection_signal_subscribe(
                bus, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged",
                "/org/freedesktop/DBus", NULL, G_DBUS_SIGNAL_FLAGS_NONE, on_name_owner_changed,
                NULL, NULL);
}

void fcd_auth_done(GDBusConnection *bus)
{
        if (owner_changed_sub)
                g_dbus_connection_signal_unsubscribe(bus, owner_changed_sub);
        owner_changed_sub = 0;
        g_clear_pointer(&creds_cache, g_hash_table_unref);
}

/* The caller's primary group from passwd, or -1. */
static gid_t passwd_gid(uid_t uid)
{
        struct passwd pw, *res = NULL;
        char buf[4096];

        if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || !res)
                return (gid_t)-1;
        return pw.pw_gid;
}

static void on_credentials(GObject *src, GAsyncResult *res, gpointer data)
{
        g_autoptr(GTask) task = data;
        g_autoptr(GError) error = NULL;
        g_autoptr(GVariant) reply = g_dbus_connection_call_finish(G_DBUS_CONNECTION(src), res,
                                                                  &error);
        g_autoptr(GVariant) dict = NULL, gids = NULL;
        struct fcd_caller *c;
        gid_t primary;
        guint32 uid;

        if (!reply) {
                g_task_return_new_error(task, FCD_ERROR, FCD_ERROR_FAILED,
                                        "Cannot get the caller's credentials from the bus: %s",
                                        error->message);
                return;
        }
        dict = g_variant_get_child_value(reply, 0);
        if (!g_variant_lookup(dict, "UnixUserID", "u", &uid)) {
                g_task_return_new_error(task, FCD_ERROR, FCD_ERROR_FAILED,
                                        "The bus did not say which user is calling");
                return;
        }
        c = g_new0(struct fcd_caller, 1);
        c->uid = uid;
        g_variant_lookup(dict, "ProcessID", "u", &c->pid);
        gids = g_variant_lookup_value(dict, "UnixGroupIDs", G_VARIANT_TYPE("au"));
        if (gids) {
                gsize n = 0;
                const guint32 *v = g_variant_get_fixed_array(gids, &n, sizeof(guint32));
                if (n > FCD_GROUPS_MAX)
                        n = FCD_GROUPS_MAX; /* fewer groups never grant more */
                for (gsize i = 0; i < n; i++)
                        c->groups[i] = v[i];
                c->ngroups = (guint)n;
        }
        /*
         * dbus 1.14 sends the groups but not the egid. Use the passwd group
         * as the fs gid only if the caller still holds it; else a group
         * nobody is in, so that dropping a group never grants it back.
         */
        primary = passwd_gid(c->uid);
        c->gid = NOGROUP;
        for (guint i = 0; i < c->ngroups; i++)
                if (c->groups[i] == primary)
                        c->gid = primary;
        if (c->uid == 0)
                c->gid = 0;
        if (creds_cache) {
                if (g_hash_table_size(creds_cache) >= CACHE_MAX)
                        g_hash_table_remove_all(creds_cache);
                g_hash_table_replace(creds_cache, g_strdup(g_task_get_task_data(task)),
                                     g_memdup2(c, sizeof(*c)));
        }
        g_task_return_pointer(task, c, g_free);
}

void fcd_caller_lookup_async(GDBusConnection *bus, const char *sender,
                             GAsyncReadyCallback cb, gpointer data)
{
        GTask *task = g_task_new(NULL, NULL, cb, data);
        struct fcd_caller *cached = creds_cache ? g_hash_table_lookup(creds_cache, sender) : NULL;

        if (cached) {
                g_task_return_pointer(task, g_memdup2(cached, sizeof(*cached)), g_free);
                g_object_unref(task);
                return;
        }
        g_task_set_task_data(task, g_strdup(sender), g_free);
        g_dbus_connection_call(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                               "org.freedesktop.DBus", "GetConnectionCredentials",
                               g_variant_new("(s)", sender), G_VARIANT_TYPE("(a{sv})"),
                               G_DBUS_CALL_FLAGS_NONE, 10000, NULL, on_credentials, task);
}

gboolean fcd_caller_lookup_finish(GAsyncResult *res, struct fcd_caller *out, GError **error)
{
        g_autofree struct fcd_caller *c = g_task_propagate_pointer(G_TASK(res), error);

        if (!c)
                return FALSE;
        *out = *c;
        return TRUE;
}

static void on_polkit(GObject *src, GAsyncResult *res, gpointer data)
{
        g_autoptr(GTask) task = data;
        g_autoptr(GError) error = NULL;
        g_autoptr(GVariant) reply = g_dbus_connection_call_finish(G_DBUS_CONNECTION(src), res,
                                                                  &error);
        const char *action = g_task_get_task_data(task);
        gboolean authorized = FALSE, challenge = FALSE;

        if (!reply) {
                g_task_return_new_error(task, FCD_ERROR, FCD_ERROR_NOT_AUTHORIZED,
                                        "Cannot ask polkit about %s, so it is refused: %s",
                                        action, error->message);
                return;
        }
        g_variant_get(reply, "((bb@a{ss}))", &authorized, &challenge, NULL);
        if (!authorized) {
                g_task_return_new_error(task, FCD_ERROR, FCD_ERROR_NOT_AUTHORIZED,
                                        "Not authorized for %s%s", action,
                                        challenge ? " (authentication is required)" : "");
                return;
        }
        g_task_return_boolean(task, TRUE);
}

void fcd_polkit_check_async(GDBusConnection *bus, const char *sender, const char *action,
                            gboolean interactive, GAsyncReadyCallback cb, gpointer data)
{
        GTask *task = g_task_new(NULL, NULL, cb, data);
        GVariantBuilder subject;

        g_task_set_task_data(task, g_strdup(action), g_free);
        g_variant_builder_init(&subject, G_VARIANT_TYPE("a{sv}"));
        g_variant_builder_add(&subject, "{sv}", "name", g_variant_new_string(sender));
        /* Flag 1 (AllowUserInteraction) lets an agent ask for a password; without one polkit
         * answers at once. */
        g_dbus_connection_call(bus, POLKIT_NAME, POLKIT_PATH, POLKIT_IFACE, "CheckAuthorization",
                               g_variant_new("((sa{sv})sa{ss}us)", "system-bus-name", &subject,
                                             action, NULL, interactive ? 1u : 0u, ""),
                               G_VARIANT_TYPE("((bba{ss}))"), G_DBUS_CALL_FLAGS_NONE,
                               interactive ? G_MAXINT : 25000, NULL, on_polkit, task);
}

gboolean fcd_polkit_check_finish(GAsyncResult *res, GError **error)
{
        return g_task_propagate_boolean(G_TASK(res), error);
}

const char *fcd_action_for(const struct fc_command *c)
{
        switch (c->op) {
        case FC_OP_QUERY_CACHED:
        case FC_OP_QUERY_DIRTY:
        case FC_OP_QUERY_PINNED:
        case FC_OP_QUERY_CACHE:
        case FC_OP_QUERY_STATE:
        case FC_OP_QUERY_CONFLICTS:
        case FC_OP_QUERY_REINTEGRATION:
                return "org.fcache.query";
        case FC_OP_FLUSH:
        case FC_OP_FLUSH_CALLBACKS:
        case FC_OP_SYNC:        /* a flush of a path in writeback is one */
                return "org.fcache.flush";
        case FC_OP_FLUSH_VOLUME:
                return "org.fcache.flush-volume";
        case FC_OP_FLUSH_ALL:
                return "org.fcache.flush-all";
        case FC_OP_PREFETCH:
                return "org.fcache.prefetch";
        case FC_OP_PIN:
        case FC_OP_UNPIN:
                /* A dry run changes nothing: it is a question. */
                return c->mods & FC_MOD_DRY_RUN ? "org.fcache.query" : "org.fcache.pin";
        case FC_OP_SET_CACHE_SIZE:
        case FC_OP_SET_CACHEABLE:
        case FC_OP_SET_RESERVE:
        case FC_OP_SET_CACHE:
                return "org.fcache.set-parameters";
        case FC_OP_DISCONNECT:
        case FC_OP_RECONNECT:
                return "org.fcache.connection";
        case FC_OP_COUNT:
                break;
        }
        return "org.fcache.set-parameters"; /* unknown: the strictest */
}
