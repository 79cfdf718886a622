/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fcache-agent: tells the person at the desktop what fcache does with their
 * files.  It runs in the user's session (a systemd user unit, an XDG
 * autostart entry), follows fcached's objects on the system bus (the
 * ObjectManager at /org/fcache) and shows notifications through
 * org.freedesktop.Notifications:
 *   - a volume goes offline, or comes back (and why; with what the
 *     reintegration left: conflicts);
 *   - a conflict appears, with actions that settle it through its
 *     org.fcache.Conflict1 object: take mine, take the server's, keep both,
 *     and show (opens the folder that holds it).
 * fcached sends a user only what that user may read (volumes whose
 * mountpoint, conflicts whose file it may read), so the agent needs no
 * filter of its own: it never hears of the others.
 */
#include <locale.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <gio/gio.h>

#define FCD_BUS "org.fcache.Manager1"
#define OM_PATH "/org/fcache"
#define OM_IFACE "org.freedesktop.DBus.ObjectManager"
#define PROPS_IFACE "org.freedesktop.DBus.Properties"
#define VOLUME_IFACE "org.fcache.Volume1"
#define CONFLICT_IFACE "org.fcache.Conflict1"
#define NOTIFY_BUS "org.freedesktop.Notifications"
#define NOTIFY_PATH "/org/freedesktop/Notifications"
#define CALL_TIMEOUT_MS 120000     /* a resolve may wait for a polkit password */

struct volume {
        char *name;
        char *state;
        char *reason;
        guint32 conflicts;
};

struct conflict {
        char *path;                /* the object's */
        char *file;                /* Path */
        char *volume;
        char *kind;
        char *detail;
        guint32 notification;      /* its notification's id, 0 if none */
};

struct agent {
        GMainLoop *loop;
        GDBusConnection *system;
        GDBusConnection *session;
        GHashTable *volumes;       /* object path -> struct volume */
        GHashTable *conflicts;     /* object path -> struct conflict */
        guint sub_fcd, sub_notify_action, sub_notify_closed, watch;
        bool quiet_start;          /* --quiet-start: no notification for what exists at start */
};

static void volume_free(gpointer p)
{
        struct volume *v = p;

        g_free(v->name);
        g_free(v->state);
        g_free(v->reason);
        g_free(v);
}

static void conflict_free(gpointer p)
{
        struct conflict *c = p;

        g_free(c->path);
        g_free(c->file);
        g_free(c->volume);
        g_free(c->kind);
        g_free(c->detail);
        g_free(c);
}

/* ---- notifications ---- */

struct notify_done {
        struct agent *a;
        char *conflict;            /* the conflict object it is about, or NULL */
};

static void on_notified(GObject *src, GAsyncResult *res, gpointer data)
{
        struct notify_done *nd = data;
        g_autoptr(GError) error = NULL;
        g_autoptr(GVariant) ret = g_dbus_connection_call_finish(G_DBUS_CONNECTION(src), res,
                                                                &error);
        struct conflict *c;

        if (!ret) {
                g_message("Cannot show a notification: %s", error->message);
        } else if (nd->conflict && (c = g_hash_table_lookup(nd->a->conflicts, nd->conflict))) {
                g_variant_get(ret, "(u)", &c->notification);
        }
        g_free(nd->conflict);
        g_free(nd);
}

/* Shows a notification; @actions: key, label, ... NULL-terminated; @conflict: whose. */
static void notify(struct agent *a, const char *summary, const char *body,
                   const char *const *actions, const char *conflict, const char *urgency_icon)
{
        static const char *const no_actions[] = { NULL };
        struct notify_done *nd = g_new0(struct notify_done, 1);
        GVariantBuilder hints;

        g_variant_builder_init(&hints, G_VARIANT_TYPE("a{sv}"));
        g_variant_builder_add(&hints, "{sv}", "desktop-entry",
                              g_variant_new_string("fcache-agent"));
        g_variant_builder_add(&hints, "{sv}", "urgency",
                              g_variant_new_byte(conflict ? 2 : 1));
        nd->a = a;
        nd->conflict = g_strdup(conflict);
        g_message("%s: %s", summary, body);
        g_dbus_connection_call(a->session, NOTIFY_BUS, NOTIFY_PATH, NOTIFY_BUS, "Notify",
                               g_variant_new("(susss^asa{sv}i)", "fcache", 0u, urgency_icon,
                                             summary, body, actions ? actions : no_actions,
                                             &hints, conflict ? 0 : -1),
                               G_VARIANT_TYPE("(u)"), G_DBUS_CALL_FLAGS_NONE, -1, NULL,
                               on_notified, nd);
}

static const char *why(const char *state, const char *reason)
{
        bool off = !strcmp(state, "offline");

        if (!strcmp(reason, "network"))
                return off ? "the network is gone" : "the network is back";
        if (!strcmp(reason, "probe"))
                return off ? "its server does not answer" : "its server answers again";
        if (!strcmp(reason, "manual"))
                return off ? "it was disconnected by hand" : "it was reconnected by hand";
        if (!strcmp(reason, "reintegrated"))
                return "the changes made offline were sent to the server";
        if (!strcmp(reason, "reintegration-failed"))
                return "sending the changes made offline failed; they are kept";
        return reason;
}

static void volume_state_changed(struct agent *a, struct volume *v, const char *old_state)
{
        g_autofree char *summary = NULL, *body = NULL;

        if (!strcmp(v->state, "offline")) {
                summary = g_strdup_printf("%s is offline", v->name);
                body = g_strdup_printf("Because %s. Pinned files stay usable; changes are kept "
                                       "and sent when it is back.", why(v->state, v->reason));
                notify(a, summary, body, NULL, NULL, "network-offline");
        } else if (!strcmp(v->state, "online") && strcmp(old_state, "online")) {
                summary = g_strdup_printf("%s is back online", v->name);
                if (!strcmp(v->reason, "reintegrated") || !strcmp(old_state, "reintegrating"))
                        body = v->conflicts
                                ? g_strdup_printf("Reintegration ended: %s; %u conflict%s to "
                                                  "settle.", why(v->state, v->reason),
                                                  v->conflicts, v->conflicts == 1 ? "" : "s")
                                : g_strdup_printf("Reintegration ended: %s.",
                                                  why(v->state, v->reason));
                else
                        body = g_strdup_printf("Because %s.", why(v->state, v->reason));
                notify(a, summary, body, NULL, NULL, "network-idle");
        }
}

static void conflict_appeared(struct agent *a, struct conflict *c)
{
        static const char *const actions[] = {
                "default", "Show", "show", "Show",
                "local", "Take mine", "remote", "Take the server's", "both", "Keep both", NULL,
        };
        g_autofree char *summary = g_strdup_printf("Conflict in %s", c->file);
        g_autofree char *body = g_strdup_printf("Changed here while offline and on the server "
                                                "meanwhile (%s).", *c->detail ? c->detail
                                                                              : c->kind);

        notify(a, summary, body, actions, c->path, "dialog-warning");
}

/* ---- settling a conflict from its notification ---- */

struct resolve_call {
        struct agent *a;
        char *file;
        char *how;
};

static void on_resolved(GObject *src, GAsyncResult *res, gpointer data)
{
        struct resolve_call *rc = data;
        g_autoptr(GError) error = NULL;
        g_autoptr(GVariant) ret = g_dbus_connection_call_finish(G_DBUS_CONNECTION(src), res,
                                                                &error);
        g_autofree char *body = NULL;

        if (!ret) {
                g_dbus_error_strip_remote_error(error);
                body = g_strdup_printf("%s: %s", rc->file, error->message);
                notify(rc->a, "The conflict was not settled", body, NULL, NULL, "dialog-error");
        } else {
                g_autoptr(GVariant) result = g_variant_get_child_value(ret, 0);
                const char *kept = NULL;

                /* "kept" is there, empty, when only one side was kept */
                g_variant_lookup(result, "kept", "&s", &kept);
                body = kept && *kept ? g_strdup_printf("%s: both kept; yours is %s", rc->file, kept)
                            : g_strdup_printf("%s: %s version kept", rc->file,
                                              !strcmp(rc->how, "local") ? "your" : "the server's");
                notify(rc->a, "Conflict settled", body, NULL, NULL, "emblem-ok");
        }
        g_free(rc->file);
        g_free(rc->how);
        g_free(rc);
}

static void on_action(GDBusConnection *bus, const char *sender, const char *path,
                      const char *iface, const char *signal, GVariant *params, gpointer data)
{
        struct agent *a = data;
        struct conflict *c = NULL;
        GHashTableIter it;
        const char *key;
        gpointer v;
        guint32 id;

        if (!g_variant_is_of_type(params, G_VARIANT_TYPE("(us)")))
                return;
        g_variant_get(params, "(u&s)", &id, &key);
        g_hash_table_iter_init(&it, a->conflicts);
        while (!c && g_hash_table_iter_next(&it, NULL, &v))
                if (((struct conflict *)v)->notification == id)
                        c = v;
        if (!c)
                return;
        if (!strcmp(key, "show") || !strcmp(key, "default")) {
                g_autofree char *dir = g_path_get_dirname(c->file);
                g_autofree char *uri = g_filename_to_uri(dir, NULL, NULL);
                g_autoptr(GError) error = NULL;

                if (uri && !g_app_info_launch_default_for_uri(uri, NULL, &error))
                        g_message("Cannot show %s: %s", dir, error->message);
        } else if (!strcmp(key, "local") || !strcmp(key, "remote") || !strcmp(key, "both")) {
                struct resolve_call *rc = g_new0(struct resolve_call, 1);

                rc->a = a;
                rc->file = g_strdup(c->file);
                rc->how = g_strdup(key);
                /* A polkit agent of the session may ask for a password. */
                g_dbus_connection_call(a->system, FCD_BUS, c->path, CONFLICT_IFACE, "Resolve",
                                       g_variant_new("(s)", key), G_VARIANT_TYPE("(a{sv})"),
                                       G_DBUS_CALL_FLAGS_ALLOW_INTERACTIVE_AUTHORIZATION,
                                       CALL_TIMEOUT_MS, NULL, on_resolved, rc);
        }
}

static void on_closed(GDBusConnection *bus, const char *sender, const char *path,
                      const char *iface, const char *signal, GVariant *params, gpointer data)
{
        struct agent *a = data;
        GHashTableIter it;
        gpointer v;
        guint32 id, reason;

        if (!g_variant_is_of_type(params, G_VARIANT_TYPE("(uu)")))
                return;
        g_variant_get(params, "(uu)", &id, &reason);
        g_hash_table_iter_init(&it, a->conflicts);
        while (g_hash_table_iter_next(&it, NULL, &v))
                if (((struct conflict *)v)->notification == id)
                        ((struct conflict *)v)->notification = 0;
}

/* ---- fcached's objects ---- */

static const char *str_of(GVariant *props, const char *key)
{
        const char *s = NULL;

        return props && g_variant_lookup(props, key, "&s", &s) ? s : "";
}

static void object_added(struct agent *a, const char *path, GVariant *ifaces, bool tell)
{
        g_autoptr(GVariant) vp = g_variant_lookup_value(ifaces, VOLUME_IFACE,
                                                        G_VARIANT_TYPE("a{sv}"));
        g_autoptr(GVariant) cp = g_variant_lookup_value(ifaces, CONFLICT_IFACE,
                                                        G_VARIANT_TYPE("a{sv}"));

        if (vp && !g_hash_table_contains(a->volumes, path)) {
                struct volume *v = g_new0(struct volume, 1);

                v->name = g_strdup(str_of(vp, "Name"));
                v->state = g_strdup(str_of(vp, "State"));
                v->reason = g_strdup(str_of(vp, "StateReason"));
                g_variant_lookup(vp, "Conflicts", "u", &v->conflicts);
                g_hash_table_insert(a->volumes, g_strdup(path), v);
                if (tell && strcmp(v->state, "online"))
                        volume_state_changed(a, v, "online");
        }
        if (cp && !g_hash_table_contains(a->conflicts, path)) {
                struct conflict *c = g_new0(struct conflict, 1);

                c->path = g_strdup(path);
                c->file = g_strdup(str_of(cp, "Path"));
                c->volume = g_strdup(str_of(cp, "Volume"));
                c->kind = g_strdup(str_of(cp, "Kind"));
                c->detail = g_strdup(str_of(cp, "Detail"));
                g_hash_table_insert(a->conflicts, c->path, c);
                if (tell)
                        conflict_appeared(a, c);
        }
}

static void object_removed(struct agent *a, const char *path)
{
        struct conflict *c = g_hash_table_lookup(a->conflicts, path);

        if (c && c->notification) /* settled: its question is moot */
                g_dbus_connection_call(a->session, NOTIFY_BUS, NOTIFY_PATH, NOTIFY_BUS,
                                       "CloseNotification", g_variant_new("(u)", c->notification),
                                       NULL, G_DBUS_CALL_FLAGS_NONE, -1, NULL, NULL, NULL);
        g_hash_table_remove(a->conflicts, path);
        g_hash_table_remove(a->volumes, path);
}

static void volume_props_changed(struct agent *a, const char *path, GVariant *changed)
{
        struct volume *v = g_hash_table_lookup(a->volumes, path);
        g_autofree char *old_state = NULL;
        const char *s;

        if (!v)
                return;
        g_variant_lookup(changed, "Conflicts", "u", &v->conflicts);
        if (g_variant_lookup(changed, "StateReason", "&s", &s)) {
                g_free(v->reason);
                v->reason = g_strdup(s);
        }
        if (g_variant_lookup(changed, "State", "&s", &s) && strcmp(s, v->state)) {
                old_state = v->state;
                v->state = g_strdup(s);
                volume_state_changed(a, v, old_state);
        }
}

static void on_fcd_signal(GDBusConnection *bus, const char *sender, const char *path,
                          const char *iface, const char *signal, GVariant *params, gpointer data)
{
        struct agent *a = data;

        if (!strcmp(signal, "InterfacesAdded") &&
            g_variant_is_of_type(params, G_VARIANT_TYPE("(oa{sa{sv}})"))) {
                const char *obj;
                g_autoptr(GVariant) ifaces = NULL;

                g_variant_get(params, "(&o@a{sa{sv}})", &obj, &ifaces);
                object_added(a, obj, ifaces, true);
        } else if (!strcmp(signal, "InterfacesRemoved") &&
                   g_variant_is_of_type(params, G_VARIANT_TYPE("(oas)"))) {
                const char *obj;

                g_variant_get(params, "(&o@as)", &obj, NULL);
                object_removed(a, obj);
        } else if (!strcmp(signal, "PropertiesChanged") &&
                   g_variant_is_of_type(params, G_VARIANT_TYPE("(sa{sv}as)"))) {
                const char *on;
                g_autoptr(GVariant) changed = NULL;

                g_variant_get(params, "(&s@a{sv}@as)", &on, &changed, NULL);
                if (!strcmp(on, VOLUME_IFACE))
                        volume_props_changed(a, path, changed);
        }
}

static void on_managed(GObject *src, GAsyncResult *res, gpointer data)
{
        struct agent *a = data;
        g_autoptr(GError) error = NULL;
        g_autoptr(GVariant) ret = g_dbus_connection_call_finish(G_DBUS_CONNECTION(src), res,
                                                                &error);
        g_autoptr(GVariant) objs = NULL;
        GVariantIter it;
        const char *path;
        GVariant *ifaces;

        if (!ret) {
                g_message("Cannot list fcached's objects: %s", error->message);
                return;
        }
        objs = g_variant_get_child_value(ret, 0);
        g_variant_iter_init(&it, objs);
        while (g_variant_iter_loop(&it, "{&o@a{sa{sv}}}", &path, &ifaces))
                object_added(a, path, ifaces, !a->quiet_start);
        g_message("Following %u volume%s and %u conflict%s",
                  g_hash_table_size(a->volumes), g_hash_table_size(a->volumes) == 1 ? "" : "s",
                  g_hash_table_size(a->conflicts), g_hash_table_size(a->conflicts) == 1 ? "" : "s");
}

static void on_fcached_appeared(GDBusConnection *bus, const char *name, const char *owner,
                                gpointer data)
{
        struct agent *a = data;

        /* Subscribed before asking, so that nothing falls between the answer and the signals. */
        if (!a->sub_fcd)
                a->sub_fcd = g_dbus_connection_signal_subscribe(
                        a->system, FCD_BUS, NULL, NULL, NULL, NULL, G_DBUS_SIGNAL_FLAGS_NONE,
                        on_fcd_signal, a, NULL);
        g_dbus_connection_call(a->system, FCD_BUS, OM_PATH, OM_IFACE, "GetManagedObjects", NULL,
                               G_VARIANT_TYPE("(a{oa{sa{sv}}})"), G_DBUS_CALL_FLAGS_NONE, -1,
                               NULL, on_managed, a);
}

static void on_fcached_vanished(GDBusConnection *bus, const char *name, gpointer data)
{
        struct agent *a = data;

        /* A restarted fcached answers again; what it lists then is what is. */
        g_hash_table_remove_all(a->volumes);
        g_hash_table_remove_all(a->conflicts);
}

int main(int argc, char **argv)
{
        g_autoptr(GOptionContext) oc = g_option_context_new("- tell the desktop what fcache does");
        g_autoptr(GError) error = NULL;
        struct agent a = { 0 };
        gboolean version = FALSE, quiet_start = FALSE;
        GOptionEntry entries[] = {
                { "quiet-start", 0, 0, G_OPTION_ARG_NONE, &quiet_start,
                  "Say nothing of the offline volumes and conflicts there are at start", NULL },
                { "version", 0, 0, G_OPTION_ARG_NONE, &version, "Show the version", NULL },
                { NULL },
        };

        setlocale(LC_ALL, "");
        g_set_prgname("fcache-agent");
        g_option_context_add_main_entries(oc, entries, NULL);
        if (!g_option_context_parse(oc, &argc, &argv, &error)) {
                fprintf(stderr, "fcache-agent: %s\n", error->message);
                return 2;
        }
        if (version) {
                printf("fcache-agent %s\n", FCACHE_VERSION);
                return 0;
        }
        a.quiet_start = quiet_start;
        a.system = g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, &error);
        if (a.system)
                a.session = g_bus_get_sync(G_BUS_TYPE_SESSION, NULL, &error);
        if (!a.system || !a.session) {
                fprintf(stderr, "fcache-agent: Failed to connect to the %s bus: %s\n",
                        a.system ? "session" : "system", error->message);
                return 1;
        }
        a.loop = g_main_loop_new(NULL, FALSE);
        a.volumes = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, volume_free);
        a.conflicts = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, conflict_free);
        a.sub_notify_action = g_dbus_connection_signal_subscribe(
                a.session, NULL, NOTIFY_BUS, "ActionInvoked", NOTIFY_PATH, NULL,
                G_DBUS_SIGNAL_FLAGS_NONE, on_action, &a, NULL);
        a.sub_notify_closed = g_dbus_connection_signal_subscribe(
                a.session, NULL, NOTIFY_BUS, "NotificationClosed", NOTIFY_PATH, NULL,
                G_DBUS_SIGNAL_FLAGS_NONE, on_closed, &a, NULL);
        a.watch = g_bus_watch_name_on_connection(a.system, FCD_BUS,
                                                 G_BUS_NAME_WATCHER_FLAGS_AUTO_START,
                                                 on_fcached_appeared, on_fcached_vanished, &a,
                                                 NULL);
        /* The session ends: the session bus closes, and GDBus exits the process. */
        g_main_loop_run(a.loop);
        return 0;
}
