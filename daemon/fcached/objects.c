/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * objects.c: the volumes and conflicts as D-Bus objects, found through
 * org.freedesktop.DBus.ObjectManager at /org/fcache.
 *
 * Not GDBusObjectManagerServer and exported skeletons: those answer every
 * caller with every object and broadcast every signal, and a conflict's
 * path (and a volume's counters) must reach only users who may read it.
 * So the objects are registered by hand:
 *   - GetManagedObjects, Properties.Get/GetAll and every method first look
 *     the caller up on the bus and check, in a worker thread with the
 *     caller's identity, that it may see the object (a volume: resolve and
 *     read its mountpoint, as Manager1.Query would; a conflict: what
 *     GetConflictVersion checks).  An object it may not see answers
 *     UnknownObject, as one that does not exist.
 *   - The methods then run Manager1's own code on the object's path
 *     (fcd_manager_request, fcd_conflict_*): the same polkit actions, the
 *     same caller-access checks, the same results and errors.
 *   - Signals (InterfacesAdded, InterfacesRemoved, PropertiesChanged) go
 *     unicast to the "watchers", the bus names that called
 *     GetManagedObjects, each time checked again: a watcher that may no
 *     longer see an object it was told about gets InterfacesRemoved, one
 *     that now may gets InterfacesAdded.
 *
 * The values come from the views (`query state`, `query cache`, `query
 * conflicts` on each volume's control socket, as root), read again when a
 * volume's state changes, after each request on a volume and each resolve,
 * and every REFRESH_PERIOD_S while someone watches (the pending count moves
 * with every offline write, which nothing reports).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "auth.h"
#include "caller-access.h"
#include "objects.h"
#include "volumes.h"

#define WATCHERS_MAX 256           /* bus names sent signals; more get none */
#define REFRESH_PERIOD_S 10
#define REL_PATH_MAX 4000
#define PROPS_IFACE "org.freedesktop.DBus.Properties"
#define OM_IFACE "org.freedesktop.DBus.ObjectManager"
#define VOLUME_IFACE "org.fcache.Volume1"
#define CONFLICT_IFACE "org.fcache.Conflict1"
#define VOLUME_PREFIX FCD_OBJECT_MANAGER_PATH "/volume/"
#define CONFLICT_PREFIX FCD_OBJECT_MANAGER_PATH "/conflict/"

static const char om_xml[] =
        "<node><interface name='" OM_IFACE "'>"
        "<method name='GetManagedObjects'>"
        "<arg name='objects' type='a{oa{sa{sv}}}' direction='out'/></method>"
        "<signal name='InterfacesAdded'><arg name='object' type='o'/>"
        "<arg name='interfaces' type='a{sa{sv}}'/></signal>"
        "<signal name='InterfacesRemoved'><arg name='object' type='o'/>"
        "<arg name='interfaces' type='as'/></signal>"
        "</interface></node>";

enum kind { OBJ_VOLUME, OBJ_CONFLICT };

struct object {
        enum kind kind;
        char *path;
        char *volume;              /* its volume's name */
        char *check_path;          /* who may read this may see the object */
        guint64 conflict_id;
        GHashTable *props;         /* name -> GVariant */
        GHashTable *known_by;      /* watcher names told about it */
        guint reg_id;
};

struct watcher {
        char *name;
        struct fcd_caller caller;
};

struct fcd_objects {
        struct fcd_context *ctx;
        GDBusNodeInfo *om_info;
        guint om_reg;
        guint name_sub;
        guint timer;
        GHashTable *objects;       /* path -> struct object */
        GHashTable *watchers;      /* bus name -> struct watcher */
        GHashTable *refreshing;    /* volume name -> 1 (running) or 2 (and again after) */
        bool watchers_full_logged;
};

/* What a visibility check needs, copied out of an object for a worker. */
struct probe {
        char *path;
        enum kind kind;
        char *check_path;
        GVariant *changed;         /* notify: the properties that changed (a{sv}); NULL: all */
};

static void probe_free(gpointer p)
{
        struct probe *pr = p;

        g_free(pr->path);
        g_free(pr->check_path);
        if (pr->changed)
                g_variant_unref(pr->changed);
        g_free(pr);
}

static struct probe *probe_of(const struct object *o, GVariant *changed)
{
        struct probe *pr = g_new0(struct probe, 1);

        pr->path = g_strdup(o->path);
        pr->kind = o->kind;
        pr->check_path = g_strdup(o->check_path);
        pr->changed = changed ? g_variant_ref_sink(changed) : NULL;
        return pr;
}

/* Worker thread: may @c see the object?  Root sees everything. */
static bool visible_to(const struct fcd_caller *c, enum kind kind, const char *check_path)
{
        struct fcd_identity_saved saved;
        struct fc_target t = FC_TARGET_INIT;
        struct fc_error e = { 0 };
        int r;

        if (c->uid == 0)
                return true;
        if (kind == OBJ_CONFLICT)
                return fcd_conflict_caller_may_read(c, check_path);
        if (fcd_identity_enter(c, &saved) < 0)
                return false;
        r = fcd_caller_resolve(check_path, 0, &t, &e);
        fcd_identity_leave(&saved);
        fc_target_close(&t);
        return r == 0;
}

static GDBusInterfaceInfo *iface_of(enum kind kind)
{
        return kind == OBJ_VOLUME ? fc_volume1_interface_info() : fc_conflict1_interface_info();
}

static GVariant *props_dict(struct object *o)
{
        GDBusInterfaceInfo *info = iface_of(o->kind);
        GVariantBuilder b;

        g_variant_builder_init(&b, G_VARIANT_TYPE("a{sv}"));
        for (guint i = 0; info->properties[i]; i++) {
                GVariant *v = g_hash_table_lookup(o->props, info->properties[i]->name);
                if (v)
                        g_variant_builder_add(&b, "{sv}", info->properties[i]->name, v);
        }
        return g_variant_builder_end(&b);
}

/* {interface: properties} of an object, floating. */
static GVariant *interfaces_dict(struct object *o)
{
        GVariantBuilder b;

        g_variant_builder_init(&b, G_VARIANT_TYPE("a{sa{sv}}"));
        g_variant_builder_add(&b, "{s@a{sv}}", iface_of(o->kind)->name, props_dict(o));
        return g_variant_builder_end(&b);
}

static void emit_to(struct fcd_objects *objs, const char *dest, const char *path,
                    const char *iface, const char *signal, GVariant *params)
{
        g_autoptr(GError) error = NULL;

        if (!g_dbus_connection_emit_signal(objs->ctx->bus, dest, path, iface, signal, params,
                                           &error))
                g_debug("%s to %s: %s", signal, dest, error->message);
}

static void emit_removed(struct fcd_objects *objs, struct object *o, const char *dest)
{
        const char *ifaces[] = { iface_of(o->kind)->name, NULL };

        emit_to(objs, dest, FCD_OBJECT_MANAGER_PATH, OM_IFACE, "InterfacesRemoved",
                g_variant_new("(o^as)", o->path, ifaces));
}

/* ---- calls on the objects: the caller may see it, then Manager1's code ---- */

struct object_call {
        struct fcd_context *ctx;
        GDBusMethodInvocation *inv;
        char *path;
        enum kind kind;
        char *check_path;
        struct fcd_caller caller;
        bool visible;
};

static void object_call_free(struct object_call *oc)
{
        g_free(oc->path);
        g_free(oc->check_path);
        g_free(oc);
}

static void unknown_object(GDBusMethodInvocation *inv, const char *path)
{
        g_dbus_method_invocation_return_error(inv, G_DBUS_ERROR, G_DBUS_ERROR_UNKNOWN_OBJECT,
                                              "No such object %s", path);
}

static void properties_call(struct object *o, GDBusMethodInvocation *inv)
{
        const char *method = g_dbus_method_invocation_get_method_name(inv);
        GVariant *params = g_dbus_method_invocation_get_parameters(inv);
        const char *iface = iface_of(o->kind)->name, *want, *name;
        GVariant *v;

        if (!strcmp(method, "GetAll") && g_variant_is_of_type(params, G_VARIANT_TYPE("(s)"))) {
                g_variant_get(params, "(&s)", &want);
                if (strcmp(want, iface)) /* as GDBus answers for an interface with none */
                        g_dbus_method_invocation_return_value(inv, g_variant_new("(a{sv})", NULL));
                else
                        g_dbus_method_invocation_return_value(inv, g_variant_new("(@a{sv})",
                                                                                 props_dict(o)));
        } else if (!strcmp(method, "Get") && g_variant_is_of_type(params, G_VARIANT_TYPE("(ss)"))) {
                g_variant_get(params, "(&s&s)", &want, &name);
                v = strcmp(want, iface) ? NULL : g_hash_table_lookup(o->props, name);
                if (!v)
                        g_dbus_method_invocation_return_error(inv, G_DBUS_ERROR,
                                                              G_DBUS_ERROR_INVALID_ARGS,
                                                              "No such property %.64s.%.64s",
                                                              want, name);
                else
                        g_dbus_method_invocation_return_value(inv, g_variant_new("(v)", v));
        } else if (!strcmp(method, "Set")) {
                g_dbus_method_invocation_return_error(inv, G_DBUS_ERROR,
                                                      G_DBUS_ERROR_PROPERTY_READ_ONLY,
                                                      "The properties of %s are read-only", iface);
        } else {
                g_dbus_method_invocation_return_error(inv, G_DBUS_ERROR,
                                                      G_DBUS_ERROR_UNKNOWN_METHOD,
                                                      "No method %.64s", method);
        }
}

/* A path relative to the volume's root: no leading '/', no '.' or '..' component. */
static char *volume_subpath(const char *mountpoint, const char *rel)
{
        g_auto(GStrv) parts = NULL;

        if (strlen(rel) > REL_PATH_MAX || rel[0] == '/')
                return NULL;
        if (!*rel)
                return g_strdup(mountpoint);
        parts = g_strsplit(rel, "/", -1);
        for (guint i = 0; parts[i]; i++)
                if (!*parts[i] || !strcmp(parts[i], ".") || !strcmp(parts[i], ".."))
                        return NULL;
        return g_strconcat(mountpoint, "/", rel, NULL);
}

static void volume_call(struct fcd_context *ctx, struct object *o, GDBusMethodInvocation *inv)
{
        const char *method = g_dbus_method_invocation_get_method_name(inv);
        GVariant *params = g_dbus_method_invocation_get_parameters(inv);
        const char *mountpoint = o->check_path, *rel;
        g_autofree char *path = NULL;
        gboolean recursive, dry_run;
        guint priority;

        if (!strcmp(method, "Disconnect")) {
                fcd_manager_request(ctx, inv, mountpoint, "disconnect", NULL, false);
        } else if (!strcmp(method, "Reconnect")) {
                fcd_manager_request(ctx, inv, mountpoint, "reconnect", NULL, false);
        } else if (!strcmp(method, "Flush")) {
                fcd_manager_request(ctx, inv, mountpoint, "flush volume", NULL, false);
        } else if (!strcmp(method, "QueryReintegration")) {
                fcd_manager_request(ctx, inv, mountpoint, "query reintegration", NULL, false);
        } else if (!strcmp(method, "Pin")) {
                g_variant_get(params, "(&sbub)", &rel, &recursive, &priority, &dry_run);
                path = volume_subpath(mountpoint, rel);
                if (!path)
                        fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "The path must be relative "
                                   "to the volume's root, without '.' or '..'");
                else
                        fcd_manager_pin(ctx, inv, path, recursive, priority, dry_run);
        } else if (!strcmp(method, "Unpin")) {
                g_variant_get(params, "(&sb)", &rel, &recursive);
                path = volume_subpath(mountpoint, rel);
                if (!path)
                        fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "The path must be relative "
                                   "to the volume's root, without '.' or '..'");
                else
                        fcd_manager_unpin(ctx, inv, path, recursive);
        } else {
                g_dbus_method_invocation_return_error(inv, G_DBUS_ERROR,
                                                      G_DBUS_ERROR_UNKNOWN_METHOD,
                                                      "No method %.64s", method);
        }
}

static void conflict_call(struct fcd_context *ctx, struct object *o, GDBusMethodInvocation *inv)
{
        const char *method = g_dbus_method_invocation_get_method_name(inv);
        GVariant *params = g_dbus_method_invocation_get_parameters(inv);
        GDBusMessage *msg = g_dbus_method_invocation_get_message(inv);
        const char *word;
        GVariant *handle;

        if (!strcmp(method, "GetVersion")) {
                g_variant_get(params, "(&s)", &word);
                fcd_conflict_get_version(ctx, inv, o->check_path, word);
        } else if (!strcmp(method, "Resolve")) {
                g_variant_get(params, "(&s)", &word);
                fcd_conflict_resolve(ctx, inv, o->check_path, word);
        } else if (!strcmp(method, "ResolveMerged")) {
                handle = g_variant_get_child_value(params, 0);
                fcd_conflict_resolve_merged(ctx, inv, g_dbus_message_get_unix_fd_list(msg),
                                            o->check_path, handle);
                g_variant_unref(handle);
        } else {
                g_dbus_method_invocation_return_error(inv, G_DBUS_ERROR,
                                                      G_DBUS_ERROR_UNKNOWN_METHOD,
                                                      "No method %.64s", method);
        }
}

static void on_call_checked(GObject *src, GAsyncResult *res, gpointer data)
{
        struct object_call *oc = g_task_get_task_data(G_TASK(res));
        struct fcd_objects *objs = oc->ctx->objects;
        GDBusMethodInvocation *inv = g_steal_pointer(&oc->inv);
        struct object *o;

        fcd_tasks_in_flight--;
        o = objs && oc->visible ? g_hash_table_lookup(objs->objects, oc->path) : NULL;
        if (!o) {
                unknown_object(inv, oc->path);
                return;
        }
        if (!strcmp(g_dbus_method_invocation_get_interface_name(inv), PROPS_IFACE))
                properties_call(o, inv);
        else if (o->kind == OBJ_VOLUME)
                volume_call(oc->ctx, o, inv);
        else
                conflict_call(oc->ctx, o, inv);
}

static void call_check_worker(GTask *task, gpointer src, gpointer data, GCancellable *cancel)
{
        struct object_call *oc = data;

        oc->visible = visible_to(&oc->caller, oc->kind, oc->check_path);
        g_task_return_boolean(task, TRUE);
}

static void on_call_caller(GObject *src, GAsyncResult *res, gpointer data)
{
        struct object_call *oc = data;
        g_autoptr(GError) error = NULL;
        g_autoptr(GTask) task = NULL;

        if (!fcd_caller_lookup_finish(res, &oc->caller, &error)) {
                g_dbus_method_invocation_return_gerror(oc->inv, error);
                object_call_free(oc);
                return;
        }
        task = g_task_new(NULL, NULL, on_call_checked, NULL);
        g_task_set_task_data(task, oc, (GDestroyNotify)object_call_free);
        fcd_tasks_in_flight++;
        g_task_run_in_thread(task, call_check_worker);
}

static void on_object_method(GDBusConnection *bus, const char *sender, const char *path,
                             const char *iface, const char *method, GVariant *params,
                             GDBusMethodInvocation *inv, gpointer data)
{
        struct fcd_objects *objs = data;
        struct object *o = g_hash_table_lookup(objs->objects, path);
        struct object_call *oc;

        if (!o) {
                unknown_object(inv, path);
                return;
        }
        oc = g_new0(struct object_call, 1);
        oc->ctx = objs->ctx;
        oc->inv = inv;
        oc->path = g_strdup(path);
        oc->kind = o->kind;
        oc->check_path = g_strdup(o->check_path);
        fcd_caller_lookup_async(bus, sender, on_call_caller, oc);
}

/* get_property and set_property NULL: Properties calls come to on_object_method, where
 * they can wait for the visibility check. */
static const GDBusInterfaceVTable object_vtable = { .method_call = on_object_method };

/* ---- the objects ---- */

static void object_free(gpointer p)
{
        struct object *o = p;

        g_free(o->path);
        g_free(o->volume);
        g_free(o->check_path);
        g_hash_table_unref(o->props);
        g_hash_table_unref(o->known_by);
        g_free(o);
}

static struct object *object_new(struct fcd_objects *objs, enum kind kind, const char *path,
                                 const char *volume, const char *check_path)
{
        g_autoptr(GError) error = NULL;
        struct object *o = g_new0(struct object, 1);

        o->kind = kind;
        o->path = g_strdup(path);
        o->volume = g_strdup(volume);
        o->check_path = g_strdup(check_path);
        o->props = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                         (GDestroyNotify)g_variant_unref);
        o->known_by = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        o->reg_id = g_dbus_connection_register_object(objs->ctx->bus, path, iface_of(kind),
                                                      &object_vtable, objs, NULL, &error);
        if (!o->reg_id)
                g_warning("Failed to export %s: %s", path, error->message);
        g_hash_table_insert(objs->objects, o->path, o);
        return o;
}

/* Gone: InterfacesRemoved to every watcher that was told about it. */
static void object_remove(struct fcd_objects *objs, struct object *o)
{
        GHashTableIter it;
        gpointer name;

        g_hash_table_iter_init(&it, o->known_by);
        while (g_hash_table_iter_next(&it, &name, NULL))
                emit_removed(objs, o, name);
        if (o->reg_id)
                g_dbus_connection_unregister_object(objs->ctx->bus, o->reg_id);
        g_hash_table_remove(objs->objects, o->path);
}

/* Sets property @name; adds it to @changed (an a{sv} builder) when its value differs. */
static void set_prop(struct object *o, GVariantBuilder *changed, const char *name, GVariant *v)
{
        GVariant *old = g_hash_table_lookup(o->props, name);

        g_variant_ref_sink(v);
        if (old && g_variant_equal(old, v)) {
                g_variant_unref(v);
                return;
        }
        g_variant_builder_add(changed, "{sv}", name, v);
        g_hash_table_insert(o->props, g_strdup(name), v);
}

static char *volume_object_path(const char *name)
{
        g_autofree char *esc = g_dbus_escape_object_path(name);

        return g_strconcat(VOLUME_PREFIX, esc, NULL);
}

static char *conflict_object_path(const char *volume, guint64 id)
{
        g_autofree char *esc = g_dbus_escape_object_path(volume);

        return g_strdup_printf(CONFLICT_PREFIX "%s/%" G_GUINT64_FORMAT, esc, id);
}

static void remove_volume_objects(struct fcd_objects *objs, const char *volume)
{
        g_autoptr(GPtrArray) gone = g_ptr_array_new();
        GHashTableIter it;
        gpointer v;

        g_hash_table_iter_init(&it, objs->objects);
        while (g_hash_table_iter_next(&it, NULL, &v))
                if (!strcmp(((struct object *)v)->volume, volume))
                        g_ptr_array_add(gone, v);
        /* conflicts first: a client sees them go before their volume */
        for (guint i = 0; i < gone->len; i++)
                if (((struct object *)gone->pdata[i])->kind == OBJ_CONFLICT)
                        object_remove(objs, gone->pdata[i]);
        for (guint i = 0; i < gone->len; i++)
                if (((struct object *)gone->pdata[i])->kind == OBJ_VOLUME)
                        object_remove(objs, gone->pdata[i]);
}

/* ---- telling the watchers ---- */

struct notify {
        struct fcd_context *ctx;
        GPtrArray *probes;         /* struct probe */
        GArray *watchers;          /* struct watcher, copies (names owned here) */
        guint8 *visible;           /* [watcher * probes->len + probe] */
};

static void notify_free(gpointer p)
{
        struct notify *n = p;

        g_ptr_array_unref(n->probes);
        for (guint i = 0; i < n->watchers->len; i++)
                g_free(g_array_index(n->watchers, struct watcher, i).name);
        g_array_unref(n->watchers);
        g_free(n->visible);
        g_free(n);
}

static void notify_worker(GTask *task, gpointer src, gpointer data, GCancellable *cancel)
{
        struct notify *n = data;

        for (guint w = 0; w < n->watchers->len; w++) {
                const struct watcher *wa = &g_array_index(n->watchers, struct watcher, w);
                for (guint i = 0; i < n->probes->len; i++) {
                        const struct probe *pr = n->probes->pdata[i];
                        n->visible[w * n->probes->len + i] =
                                visible_to(&wa->caller, pr->kind, pr->check_path);
                }
        }
        g_task_return_boolean(task, TRUE);
}

static void on_notify_checked(GObject *src, GAsyncResult *res, gpointer data)
{
        struct notify *n = g_task_get_task_data(G_TASK(res));
        struct fcd_objects *objs = n->ctx->objects;

        fcd_tasks_in_flight--;
        if (!objs)
                return;
        for (guint i = 0; i < n->probes->len; i++) {
                const struct probe *pr = n->probes->pdata[i];
                struct object *o = g_hash_table_lookup(objs->objects, pr->path);

                if (!o) /* removed meanwhile: its watchers were told */
                        continue;
                for (guint w = 0; w < n->watchers->len; w++) {
                        const char *name = g_array_index(n->watchers, struct watcher, w).name;
                        bool known = g_hash_table_contains(o->known_by, name);

                        if (!g_hash_table_contains(objs->watchers, name))
                                continue; /* left the bus meanwhile */
                        if (n->visible[w * n->probes->len + i]) {
                                if (!known) {
                                        emit_to(objs, name, FCD_OBJECT_MANAGER_PATH, OM_IFACE,
                                                "InterfacesAdded",
                                                g_variant_new("(o@a{sa{sv}})", o->path,
                                                              interfaces_dict(o)));
                                        g_hash_table_add(o->known_by, g_strdup(name));
                                } else if (pr->changed && g_variant_n_children(pr->changed)) {
                                        emit_to(objs, name, o->path, PROPS_IFACE,
                                                "PropertiesChanged",
                                                g_variant_new("(s@a{sv}as)",
                                                              iface_of(o->kind)->name,
                                                              pr->changed, NULL));
                                }
                        } else if (known) {
                                emit_removed(objs, o, name);
                                g_hash_table_remove(o->known_by, name);
                        }
                }
        }
}

/* Tell each watcher that may see them about @probes (consumed). */
static void notify(struct fcd_objects *objs, GPtrArray *probes)
{
        g_autoptr(GTask) task = NULL;
        struct notify *n;
        GHashTableIter it;
        gpointer v;

        if (!probes->len || !g_hash_table_size(objs->watchers)) {
                g_ptr_array_unref(probes);
                return;
        }
        n = g_new0(struct notify, 1);
        n->ctx = objs->ctx;
        n->probes = probes;
        n->watchers = g_array_new(FALSE, TRUE, sizeof(struct watcher));
        g_hash_table_iter_init(&it, objs->watchers);
        while (g_hash_table_iter_next(&it, NULL, &v)) {
                struct watcher copy = *(struct watcher *)v;
                copy.name = g_strdup(copy.name);
                g_array_append_val(n->watchers, copy);
        }
        n->visible = g_new0(guint8, n->watchers->len * probes->len);
        task = g_task_new(NULL, NULL, on_notify_checked, NULL);
        g_task_set_task_data(task, n, notify_free);
        fcd_tasks_in_flight++;
        g_task_run_in_thread(task, notify_worker);
}

/* ---- reading a volume from its view ---- */

struct refresh {
        struct fcd_context *ctx;
        char *name;
        char *socket_path;
        char *mountpoint;
        char *backing;
        GArray *remote_us;         /* per row: its server object's mtime (µs), 0 if none */
        bool have_state, have_cache, have_conflicts, have_reint, have_reint_bytes;
        guint64 pending, conflicts, size, used, pinned, free, reint_done, reint_total, reint_bytes;
        GArray *rows;              /* struct fcd_conflict_row */
};

static void refresh_free(gpointer p)
{
        struct refresh *rf = p;

        g_free(rf->name);
        g_free(rf->socket_path);
        g_free(rf->mountpoint);
        g_free(rf->backing);
        if (rf->remote_us)
                g_array_unref(rf->remote_us);
        if (rf->rows)
                g_array_unref(rf->rows);
        g_free(rf);
}

static bool line_u64(GPtrArray *lines, const char *key, guint64 *out)
{
        const char *v = fcd_control_value(lines, key);
        char *end;

        if (!v)
                return false;
        *out = g_ascii_strtoull(v, &end, 10);
        return *end == '\0';
}

/*
 * When the server last changed the object at @rel (µs since the epoch; 0 when
 * it has none): its mtime on the backing, reached beneath it and through no
 * symlink (the names are the server's, which users may shape).
 */
static guint64 remote_changed_us(const char *backing, const char *rel)
{
        struct open_how how = { .flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                           RESOLVE_NO_MAGICLINKS };
        int dfd = open(backing, O_PATH | O_DIRECTORY | O_CLOEXEC), fd;
        struct stat st;
        guint64 us = 0;

        if (dfd < 0)
                return 0;
        while (*rel == '/')
                rel++;
        fd = *rel ? (int)syscall(SYS_openat2, dfd, rel, &how, sizeof(how)) : dup(dfd);
        if (fd >= 0 && fstat(fd, &st) == 0)
                us = (guint64)st.st_mtim.tv_sec * G_USEC_PER_SEC +
                     (guint64)st.st_mtim.tv_nsec / 1000;
        if (fd >= 0)
                close(fd);
        close(dfd);
        return us;
}

static void refresh_worker(GTask *task, gpointer src, gpointer data, GCancellable *cancel)
{
        struct refresh *rf = data;
        g_autoptr(GPtrArray) st = g_ptr_array_new_with_free_func(g_free);
        g_autoptr(GPtrArray) ca = g_ptr_array_new_with_free_func(g_free);
        g_autoptr(GPtrArray) co = g_ptr_array_new_with_free_func(g_free);

        if (fcd_control_call(rf->socket_path, "query state", -1, NULL, st) == 0) {
                rf->have_state = line_u64(st, "pending", &rf->pending) &&
                                 line_u64(st, "conflicts", &rf->conflicts);
                rf->have_reint = line_u64(st, "reintegration_done", &rf->reint_done) &&
                                 line_u64(st, "reintegration_total", &rf->reint_total);
                rf->have_reint_bytes = line_u64(st, "reintegration_bytes", &rf->reint_bytes);
        }
        if (fcd_control_call(rf->socket_path, "query cache", -1, NULL, ca) == 0)
                rf->have_cache = line_u64(ca, "size", &rf->size) &&
                                 line_u64(ca, "used", &rf->used) &&
                                 line_u64(ca, "pinned", &rf->pinned) &&
                                 line_u64(ca, "free", &rf->free);
        if (fcd_control_call(rf->socket_path, "query conflicts", -1, NULL, co) == 0) {
                rf->rows = fcd_conflicts_parse(co);
                rf->have_conflicts = true;
                rf->remote_us = g_array_sized_new(FALSE, TRUE, sizeof(guint64), rf->rows->len);
                for (guint i = 0; i < rf->rows->len; i++) {
                        guint64 us = remote_changed_us(rf->backing,
                                g_array_index(rf->rows, struct fcd_conflict_row, i).rel);

                        g_array_append_val(rf->remote_us, us);
                }
        }
        g_task_return_boolean(task, TRUE);
}

static void refresh_start(struct fcd_objects *objs, const char *name);

static const struct fcd_volume_info *info_find(GArray *infos, const char *name)
{
        for (guint i = 0; i < infos->len; i++)
                if (!strcmp(g_array_index(infos, struct fcd_volume_info, i).name, name))
                        return &g_array_index(infos, struct fcd_volume_info, i);
        return NULL;
}

/* The volume's object with what is known now; its probe when anything changed. */
static void update_volume(struct fcd_objects *objs, const struct fcd_volume_info *vi,
                          const struct refresh *rf, GPtrArray *probes)
{
        g_autofree char *path = volume_object_path(vi->name);
        struct object *o = g_hash_table_lookup(objs->objects, path);
        bool fresh = !o;
        GVariantBuilder ch;

        if (!o)
                o = object_new(objs, OBJ_VOLUME, path, vi->name, vi->mountpoint);
        g_variant_builder_init(&ch, G_VARIANT_TYPE("a{sv}"));
        set_prop(o, &ch, "Name", g_variant_new_string(vi->name));
        set_prop(o, &ch, "Mountpoint", g_variant_new_string(vi->mountpoint));
        set_prop(o, &ch, "Backing", g_variant_new_string(vi->backing));
        set_prop(o, &ch, "State", g_variant_new_string(vi->state));
        set_prop(o, &ch, "StateReason", g_variant_new_string(vi->reason));
        set_prop(o, &ch, "Metered", g_variant_new_boolean(vi->metered));
        /* Until the view first answers, zeros (the type must be there for GetAll). */
        if (rf && rf->have_state) {
                set_prop(o, &ch, "Pending", g_variant_new_uint64(rf->pending));
                set_prop(o, &ch, "Conflicts", g_variant_new_uint32(MIN(rf->conflicts,
                                                                       G_MAXUINT32)));
        } else if (fresh) {
                set_prop(o, &ch, "Pending", g_variant_new_uint64(0));
                set_prop(o, &ch, "Conflicts", g_variant_new_uint32(0));
        }
        if (rf && rf->have_reint) {
                set_prop(o, &ch, "ReintegrationDone", g_variant_new_uint64(rf->reint_done));
                set_prop(o, &ch, "ReintegrationTotal", g_variant_new_uint64(rf->reint_total));
        } else if (fresh) {
                set_prop(o, &ch, "ReintegrationDone", g_variant_new_uint64(0));
                set_prop(o, &ch, "ReintegrationTotal", g_variant_new_uint64(0));
        }
        if (rf && rf->have_reint_bytes)
                set_prop(o, &ch, "ReintegrationBytes", g_variant_new_uint64(rf->reint_bytes));
        else if (fresh)
                set_prop(o, &ch, "ReintegrationBytes", g_variant_new_uint64(0));
        if (rf && rf->have_cache) {
                set_prop(o, &ch, "CacheSize", g_variant_new_uint64(rf->size));
                set_prop(o, &ch, "CacheUsed", g_variant_new_uint64(rf->used));
                set_prop(o, &ch, "CachePinned", g_variant_new_uint64(rf->pinned));
                set_prop(o, &ch, "CacheFree", g_variant_new_uint64(rf->free));
        } else if (fresh) {
                set_prop(o, &ch, "CacheSize", g_variant_new_uint64(0));
                set_prop(o, &ch, "CacheUsed", g_variant_new_uint64(0));
                set_prop(o, &ch, "CachePinned", g_variant_new_uint64(0));
                set_prop(o, &ch, "CacheFree", g_variant_new_uint64(0));
        }
        g_ptr_array_add(probes, probe_of(o, g_variant_builder_end(&ch)));
}

static char *absolute_in(const char *mountpoint, const char *rel)
{
        while (*rel == '/')
                rel++;
        return *rel ? g_strconcat(mountpoint, "/", rel, NULL) : g_strdup(mountpoint);
}

/* The volume's conflict objects to match @rows: new ones made (and probed), settled ones gone. */
static void update_conflicts(struct fcd_objects *objs, const struct fcd_volume_info *vi,
                             GArray *rows, GArray *remote_us, GPtrArray *probes)
{
        g_autoptr(GHashTable) now = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        g_autoptr(GPtrArray) gone = g_ptr_array_new();
        GHashTableIter it;
        gpointer v;

        for (guint i = 0; i < rows->len; i++) {
                const struct fcd_conflict_row *row = &g_array_index(rows, struct fcd_conflict_row,
                                                                    i);
                g_autofree char *path = conflict_object_path(vi->name, row->id);
                g_autofree char *abs = NULL;
                struct object *o = g_hash_table_lookup(objs->objects, path);
                GVariantBuilder ch;

                g_hash_table_add(now, g_strdup(path));
                if (o) {
                        /* The server may change it again meanwhile. */
                        GVariant *changed;

                        g_variant_builder_init(&ch, G_VARIANT_TYPE("a{sv}"));
                        set_prop(o, &ch, "RemoteChanged", g_variant_new_uint64(
                                g_array_index(remote_us, guint64, i)));
                        changed = g_variant_ref_sink(g_variant_builder_end(&ch));
                        if (g_variant_n_children(changed))
                                g_ptr_array_add(probes, probe_of(o, changed));
                        g_variant_unref(changed);
                        continue;
                }
                abs = absolute_in(vi->mountpoint, row->rel);
                o = object_new(objs, OBJ_CONFLICT, path, vi->name, abs);
                o->conflict_id = row->id;
                g_variant_builder_init(&ch, G_VARIANT_TYPE("a{sv}"));
                set_prop(o, &ch, "Volume", g_variant_new_string(vi->name));
                set_prop(o, &ch, "Path", g_variant_new_string(abs));
                set_prop(o, &ch, "Kind", g_variant_new_string(row->kind));
                set_prop(o, &ch, "Detail", g_variant_new_string(row->detail ? row->detail : ""));
                set_prop(o, &ch, "RemoteChanged", g_variant_new_uint64(
                        g_array_index(remote_us, guint64, i)));
                set_prop(o, &ch, "Recorded", g_variant_new_uint64(row->recorded_us));
                set_prop(o, &ch, "LocalChanged", g_variant_new_uint64(row->local_changed_us));
                g_variant_builder_clear(&ch);
                g_ptr_array_add(probes, probe_of(o, NULL));
        }
        g_hash_table_iter_init(&it, objs->objects);
        while (g_hash_table_iter_next(&it, NULL, &v)) {
                struct object *o = v;
                if (o->kind == OBJ_CONFLICT && !strcmp(o->volume, vi->name) &&
                    !g_hash_table_contains(now, o->path))
                        g_ptr_array_add(gone, o);
        }
        for (guint i = 0; i < gone->len; i++)
                object_remove(objs, gone->pdata[i]);
}

static void on_refresh_done(GObject *src, GAsyncResult *res, gpointer data)
{
        struct refresh *rf = g_task_get_task_data(G_TASK(res));
        struct fcd_objects *objs = rf->ctx->objects;
        g_autoptr(GArray) infos = NULL;
        const struct fcd_volume_info *vi;
        GPtrArray *probes;
        bool again;

        fcd_tasks_in_flight--;
        if (!objs)
                return;
        again = GPOINTER_TO_INT(g_hash_table_lookup(objs->refreshing, rf->name)) == 2;
        g_hash_table_remove(objs->refreshing, rf->name);
        infos = fcd_volumes_info(objs->ctx->volumes);
        vi = info_find(infos, rf->name);
        if (!vi) {
                remove_volume_objects(objs, rf->name);
                return;
        }
        probes = g_ptr_array_new_with_free_func(probe_free);
        update_volume(objs, vi, rf, probes);
        if (rf->have_conflicts && strcmp(vi->state, "reintegrating"))
                update_conflicts(objs, vi, rf->rows, rf->remote_us, probes);
        notify(objs, probes);
        if (again)
                refresh_start(objs, rf->name);
}

static void refresh_start(struct fcd_objects *objs, const char *name)
{
        g_autoptr(GArray) infos = NULL;
        const struct fcd_volume_info *vi;
        g_autoptr(GTask) task = NULL;
        struct refresh *rf;

        if (g_hash_table_contains(objs->refreshing, name)) {
                /* one at a time per volume; the running one is read again after */
                g_hash_table_insert(objs->refreshing, g_strdup(name), GINT_TO_POINTER(2));
                return;
        }
        infos = fcd_volumes_info(objs->ctx->volumes);
        vi = info_find(infos, name);
        if (!vi) {
                remove_volume_objects(objs, name);
                return;
        }
        g_hash_table_insert(objs->refreshing, g_strdup(name), GINT_TO_POINTER(1));
        rf = g_new0(struct refresh, 1);
        rf->ctx = objs->ctx;
        rf->name = g_strdup(name);
        rf->socket_path = g_strdup(vi->socket_path);
        rf->mountpoint = g_strdup(vi->mountpoint);
        rf->backing = g_strdup(vi->backing);
        task = g_task_new(NULL, NULL, on_refresh_done, NULL);
        g_task_set_task_data(task, rf, refresh_free);
        fcd_tasks_in_flight++;
        g_task_run_in_thread(task, refresh_worker);
}

void fcd_objects_volume_changed(struct fcd_context *ctx, const char *name)
{
        if (ctx->objects && name)
                refresh_start(ctx->objects, name);
}

void fcd_objects_volume_touched(struct fcd_context *ctx, const char *canonical)
{
        g_autofree char *name = NULL;

        if (ctx->objects && fcd_volume_find(ctx->volumes, canonical, &name, NULL, NULL))
                refresh_start(ctx->objects, name);
}

void fcd_objects_volumes_changed(struct fcd_context *ctx)
{
        struct fcd_objects *objs = ctx->objects;
        g_autoptr(GArray) infos = NULL;
        g_autoptr(GPtrArray) gone = g_ptr_array_new_with_free_func(g_free);
        GHashTableIter it;
        gpointer v;

        if (!objs)
                return;
        infos = fcd_volumes_info(ctx->volumes);
        g_hash_table_iter_init(&it, objs->objects);
        while (g_hash_table_iter_next(&it, NULL, &v)) {
                struct object *o = v;
                if (o->kind == OBJ_VOLUME && !info_find(infos, o->volume))
                        g_ptr_array_add(gone, g_strdup(o->volume));
        }
        for (guint i = 0; i < gone->len; i++)
                remove_volume_objects(objs, gone->pdata[i]);
        for (guint i = 0; i < infos->len; i++)
                refresh_start(objs, g_array_index(infos, struct fcd_volume_info, i).name);
}

static gboolean on_timer(gpointer data)
{
        struct fcd_objects *objs = data;

        if (g_hash_table_size(objs->watchers))
                fcd_objects_volumes_changed(objs->ctx);
        return G_SOURCE_CONTINUE;
}

/* ---- GetManagedObjects ---- */

struct gmo_call {
        struct fcd_context *ctx;
        GDBusMethodInvocation *inv;
        char *sender;
        struct fcd_caller caller;
        GPtrArray *probes;
        guint8 *visible;
};

static void gmo_free(gpointer p)
{
        struct gmo_call *g = p;

        g_free(g->sender);
        if (g->probes)
                g_ptr_array_unref(g->probes);
        g_free(g->visible);
        g_free(g);
}

static void gmo_worker(GTask *task, gpointer src, gpointer data, GCancellable *cancel)
{
        struct gmo_call *g = data;

        for (guint i = 0; i < g->probes->len; i++) {
                const struct probe *pr = g->probes->pdata[i];
                g->visible[i] = visible_to(&g->caller, pr->kind, pr->check_path);
        }
        g_task_return_boolean(task, TRUE);
}

static void add_watcher(struct fcd_objects *objs, const char *name, const struct fcd_caller *c)
{
        struct watcher *w;

        if (g_hash_table_contains(objs->watchers, name))
                return;
        if (g_hash_table_size(objs->watchers) >= WATCHERS_MAX) {
                if (!objs->watchers_full_logged)
                        g_message("%u bus names watch the objects already; %s gets no signals",
                                  WATCHERS_MAX, name);
                objs->watchers_full_logged = true;
                return;
        }
        w = g_new0(struct watcher, 1);
        w->name = g_strdup(name);
        w->caller = *c;
        g_hash_table_insert(objs->watchers, w->name, w);
}

static void on_gmo_checked(GObject *src, GAsyncResult *res, gpointer data)
{
        struct gmo_call *g = g_task_get_task_data(G_TASK(res));
        struct fcd_objects *objs = g->ctx->objects;
        GDBusMethodInvocation *inv = g_steal_pointer(&g->inv);
        GVariantBuilder b, mb;

        fcd_tasks_in_flight--;
        if (!objs) {
                g_dbus_method_invocation_return_error_literal(inv, FCD_ERROR, FCD_ERROR_FAILED,
                                                              "fcached is stopping");
                return;
        }
        add_watcher(objs, g->sender, &g->caller);
        g_variant_builder_init(&b, G_VARIANT_TYPE("a{oa{sa{sv}}}"));
        /* The manager itself: everyone may see it. */
        g_variant_builder_init(&mb, G_VARIANT_TYPE("a{sa{sv}}"));
        g_variant_builder_add(&mb, "{s@a{sv}}", FCD_BUS_NAME,
                              g_dbus_interface_skeleton_get_properties(
                                      G_DBUS_INTERFACE_SKELETON(g->ctx->manager)));
        g_variant_builder_add(&b, "{o@a{sa{sv}}}", FCD_MANAGER_PATH, g_variant_builder_end(&mb));
        for (guint i = 0; i < g->probes->len; i++) {
                const struct probe *pr = g->probes->pdata[i];
                struct object *o = g_hash_table_lookup(objs->objects, pr->path);

                if (!o || !g->visible[i])
                        continue;
                g_variant_builder_add(&b, "{o@a{sa{sv}}}", o->path, interfaces_dict(o));
                if (g_hash_table_contains(objs->watchers, g->sender))
                        g_hash_table_add(o->known_by, g_strdup(g->sender));
        }
        g_dbus_method_invocation_return_value(inv, g_variant_new("(@a{oa{sa{sv}}})",
                                                                 g_variant_builder_end(&b)));
}

static void on_gmo_caller(GObject *src, GAsyncResult *res, gpointer data)
{
        struct gmo_call *g = data;
        struct fcd_objects *objs = g->ctx->objects;
        g_autoptr(GError) error = NULL;
        g_autoptr(GTask) task = NULL;
        GHashTableIter it;
        gpointer v;

        if (!fcd_caller_lookup_finish(res, &g->caller, &error) || !objs) {
                if (error)
                        g_dbus_method_invocation_return_gerror(g->inv, error);
                else
                        g_dbus_method_invocation_return_error_literal(g->inv, FCD_ERROR,
                                                                      FCD_ERROR_FAILED,
                                                                      "fcached is stopping");
                gmo_free(g);
                return;
        }
        g->probes = g_ptr_array_new_with_free_func(probe_free);
        g_hash_table_iter_init(&it, objs->objects);
        while (g_hash_table_iter_next(&it, NULL, &v))
                g_ptr_array_add(g->probes, probe_of(v, NULL));
        g->visible = g_new0(guint8, MAX(g->probes->len, 1));
        task = g_task_new(NULL, NULL, on_gmo_checked, NULL);
        g_task_set_task_data(task, g, gmo_free);
        fcd_tasks_in_flight++;
        g_task_run_in_thread(task, gmo_worker);
}

static void on_om_method(GDBusConnection *bus, const char *sender, const char *path,
                         const char *iface, const char *method, GVariant *params,
                         GDBusMethodInvocation *inv, gpointer data)
{
        struct fcd_objects *objs = data;
        struct gmo_call *g;

        if (strcmp(method, "GetManagedObjects")) {
                g_dbus_method_invocation_return_error(inv, G_DBUS_ERROR,
                                                      G_DBUS_ERROR_UNKNOWN_METHOD,
                                                      "No method %.64s", method);
                return;
        }
        g = g_new0(struct gmo_call, 1);
        g->ctx = objs->ctx;
        g->inv = inv;
        g->sender = g_strdup(sender);
        fcd_caller_lookup_async(bus, sender, on_gmo_caller, g);
}

static const GDBusInterfaceVTable om_vtable = { .method_call = on_om_method };

/* A watcher left the bus: forget it. */
static void on_name_owner_changed(GDBusConnection *bus, const char *sender, const char *path,
                                  const char *iface, const char *signal, GVariant *params,
                                  gpointer data)
{
        struct fcd_objects *objs = data;
        const char *name, *old_owner, *new_owner;
        GHashTableIter it;
        gpointer v;

        if (!g_variant_is_of_type(params, G_VARIANT_TYPE("(sss)")))
                return;
        g_variant_get(params, "(&s&s&s)", &name, &old_owner, &new_owner);
        if (*new_owner || !g_hash_table_remove(objs->watchers, name))
                return;
        g_hash_table_iter_init(&it, objs->objects);
        while (g_hash_table_iter_next(&it, NULL, &v))
                g_hash_table_remove(((struct object *)v)->known_by, name);
}

static void watcher_free(gpointer p)
{
        struct watcher *w = p;

        g_free(w->name);
        g_free(w);
}

int fcd_objects_start(struct fcd_context *ctx, GError **error)
{
        struct fcd_objects *objs = g_new0(struct fcd_objects, 1);

        objs->ctx = ctx;
        objs->objects = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, object_free);
        objs->watchers = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, watcher_free);
        objs->refreshing = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        objs->om_info = g_dbus_node_info_new_for_xml(om_xml, error);
        g_assert(objs->om_info); /* a constant */
        objs->om_reg = g_dbus_connection_register_object(ctx->bus, FCD_OBJECT_MANAGER_PATH,
                                                         objs->om_info->interfaces[0],
                                                         &om_vtable, objs, NULL, error);
        ctx->objects = objs;
        if (!objs->om_reg)
                return -1;
        objs->name_sub = g_dbus_connection_signal_subscribe(
                ctx->bus, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged",
                "/org/freedesktop/DBus", NULL, G_DBUS_SIGNAL_FLAGS_NONE, on_name_owner_changed,
                objs, NULL);
        objs->timer = g_timeout_add_seconds(REFRESH_PERIOD_S, on_timer, objs);
        fcd_objects_volumes_changed(ctx);
        return 0;
}

void fcd_objects_free(struct fcd_context *ctx)
{
        struct fcd_objects *objs = ctx->objects;
        GHashTableIter it;
        gpointer v;

        if (!objs)
                return;
        ctx->objects = NULL;
        if (objs->timer)
                g_source_remove(objs->timer);
        if (objs->name_sub)
                g_dbus_connection_signal_unsubscribe(ctx->bus, objs->name_sub);
        g_hash_table_iter_init(&it, objs->objects);
        while (g_hash_table_iter_next(&it, NULL, &v))
                if (((struct object *)v)->reg_id)
                        g_dbus_connection_unregister_object(ctx->bus,
                                                            ((struct object *)v)->reg_id);
        if (objs->om_reg)
                g_dbus_connection_unregister_object(ctx->bus, objs->om_reg);
        g_dbus_node_info_unref(objs->om_info);
        g_hash_table_unref(objs->objects);
        g_hash_table_unref(objs->watchers);
        g_hash_table_unref(objs->refreshing);
        g_free(objs);
}
