/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * resolve-bus.c: fcache-resolve through fcached's D-Bus objects
 * (resolve-bus.h).
 */
#include <errno.h>
#include <gio/gunixfdlist.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "resolve-bus.h"

#define BUS_NAME "org.fcache.Manager1"
#define ROOT_PATH "/org/fcache"
#define VOLUME_IFACE "org.fcache.Volume1"
#define CONFLICT_IFACE "org.fcache.Conflict1"
#define NO_SUCH_PATH "org.fcache.Manager1.Error.NoSuchPath"
#define CALL_TIMEOUT_MS 120000
#define VERSION_MAX (256u << 20)

static void volume_free(gpointer p)
{
        struct rbus_volume *v = p;

        g_free(v->name);
        g_free(v->mountpoint);
        g_free(v);
}

static void conflict_free(gpointer p)
{
        struct rbus_conflict *c = p;

        g_free(c->object);
        g_free(c->volume);
        g_free(c->path);
        g_free(c->kind);
        g_free(c->detail);
        g_free(c);
}

static char *prop_string(GVariant *props, const char *name)
{
        const char *s = NULL;

        return g_variant_lookup(props, name, "&s", &s) ? g_strdup(s) : g_strdup("");
}

/* Flags for a call that polkit may check: interactive when someone can answer. */
static GDBusCallFlags call_flags(const struct rbus *b)
{
        return b->interactive ? G_DBUS_CALL_FLAGS_ALLOW_INTERACTIVE_AUTHORIZATION
                              : G_DBUS_CALL_FLAGS_NONE;
}

/* A remote error's message without GDBus's "GDBus.Error:NAME: " prefix. */
static void strip(GError *e)
{
        if (e)
                g_dbus_error_strip_remote_error(e);
}

static int by_path(gconstpointer a, gconstpointer b)
{
        const struct rbus_conflict *x = *(struct rbus_conflict *const *)a;
        const struct rbus_conflict *y = *(struct rbus_conflict *const *)b;
        int r = strcmp(x->path, y->path);

        return r ? r : x->id < y->id ? -1 : x->id > y->id;
}

bool rbus_open(struct rbus *b, bool interactive, GError **error)
{
        g_autoptr(GVariant) reply = NULL, objects = NULL;
        GVariantIter it;
        const char *object;
        GVariant *ifaces;

        memset(b, 0, sizeof(*b));
        b->interactive = interactive;
        b->volumes = g_ptr_array_new_with_free_func(volume_free);
        b->conflicts = g_ptr_array_new_with_free_func(conflict_free);
        b->bus = g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, error);
        if (!b->bus)
                return false;
        reply = g_dbus_connection_call_sync(b->bus, BUS_NAME, ROOT_PATH,
                                            "org.freedesktop.DBus.ObjectManager",
                                            "GetManagedObjects", NULL,
                                            G_VARIANT_TYPE("(a{oa{sa{sv}}})"),
                                            G_DBUS_CALL_FLAGS_NONE, CALL_TIMEOUT_MS, NULL, error);
        if (!reply) {
                strip(error ? *error : NULL);
                return false;
        }
        objects = g_variant_get_child_value(reply, 0);
        g_variant_iter_init(&it, objects);
        while (g_variant_iter_next(&it, "{&o@a{sa{sv}}}", &object, &ifaces)) {
                g_autoptr(GVariant) vol = g_variant_lookup_value(ifaces, VOLUME_IFACE, NULL);
                g_autoptr(GVariant) con = g_variant_lookup_value(ifaces, CONFLICT_IFACE, NULL);

                if (vol) {
                        struct rbus_volume *v = g_new0(struct rbus_volume, 1);

                        v->name = prop_string(vol, "Name");
                        v->mountpoint = prop_string(vol, "Mountpoint");
                        g_ptr_array_add(b->volumes, v);
                }
                if (con) {
                        struct rbus_conflict *c = g_new0(struct rbus_conflict, 1);
                        const char *id = strrchr(object, '/');

                        c->object = g_strdup(object);
                        c->id = id ? g_ascii_strtoull(id + 1, NULL, 10) : 0;
                        c->volume = prop_string(con, "Volume");
                        c->path = prop_string(con, "Path");
                        c->kind = prop_string(con, "Kind");
                        c->detail = prop_string(con, "Detail");
                        g_ptr_array_add(b->conflicts, c);
                }
                g_variant_unref(ifaces);
        }
        g_ptr_array_sort(b->conflicts, by_path);
        return true;
}

void rbus_close(struct rbus *b)
{
        g_clear_object(&b->bus);
        g_clear_pointer(&b->volumes, g_ptr_array_unref);
        g_clear_pointer(&b->conflicts, g_ptr_array_unref);
}

const struct rbus_volume *rbus_volume_of(const struct rbus *b, const char *path)
{
        const struct rbus_volume *best = NULL;

        for (guint i = 0; i < b->volumes->len; i++) {
                const struct rbus_volume *v = b->volumes->pdata[i];
                size_t n = strlen(v->mountpoint);

                if (n && !strncmp(path, v->mountpoint, n) && (path[n] == 0 || path[n] == '/') &&
                    (!best || n > strlen(best->mountpoint)))
                        best = v;
        }
        return best;
}

/* All of @fd from offset 0 into *data; false with *error. */
static bool read_all(int fd, char **data, size_t *size, GError **error)
{
        GByteArray *a = g_byte_array_new();
        char buf[65536];
        off_t off = 0;

        for (;;) {
                ssize_t n = pread(fd, buf, sizeof(buf), off);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 || a->len + (size_t)n > VERSION_MAX) {
                        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(n < 0 ? errno : EFBIG),
                                    "reading the version fcached sent: %s",
                                    n < 0 ? g_strerror(errno) : "too large");
                        g_byte_array_unref(a);
                        return false;
                }
                if (n == 0)
                        break;
                g_byte_array_append(a, (const guint8 *)buf, (guint)n);
                off += n;
        }
        *size = a->len;
        g_byte_array_append(a, (const guint8 *)"", 1);
        *data = (char *)g_byte_array_free(a, FALSE);
        return true;
}

int rbus_version(struct rbus *b, const char *object, const char *which, char **data,
                 size_t *size, GError **error)
{
        g_autoptr(GUnixFDList) fds = NULL;
        g_autoptr(GVariant) reply = NULL;
        g_autoptr(GError) e = NULL;
        gint32 h;
        int fd;
        bool ok;

        reply = g_dbus_connection_call_with_unix_fd_list_sync(
                b->bus, BUS_NAME, object, CONFLICT_IFACE, "GetVersion",
                g_variant_new("(s)", which), G_VARIANT_TYPE("(h)"), call_flags(b),
                CALL_TIMEOUT_MS, NULL, &fds, NULL, &e);
        if (!reply) {
                g_autofree char *name = g_dbus_error_get_remote_error(e);

                if (name && !strcmp(name, NO_SUCH_PATH))
                        return 0;
                strip(e);
                g_propagate_error(error, g_steal_pointer(&e));
                return -1;
        }
        g_variant_get(reply, "(h)", &h);
        fd = fds ? g_unix_fd_list_get(fds, h, error) : -1;
        if (fd < 0) {
                if (!fds)
                        g_set_error(error, G_IO_ERROR, G_IO_ERROR_FAILED,
                                    "fcached sent no file descriptor");
                return -1;
        }
        ok = read_all(fd, data, size, error);
        close(fd);
        return ok ? 1 : -1;
}

/* The a{sv} result as "key=value" lines. */
static GPtrArray *result_lines(GVariant *reply)
{
        GPtrArray *lines = g_ptr_array_new_with_free_func(g_free);
        g_autoptr(GVariant) dict = g_variant_get_child_value(reply, 0);
        GVariantIter it;
        const char *key;
        GVariant *v;

        g_variant_iter_init(&it, dict);
        while (g_variant_iter_next(&it, "{&sv}", &key, &v)) {
                if (g_variant_is_of_type(v, G_VARIANT_TYPE_STRING)) {
                        g_ptr_array_add(lines, g_strconcat(key, "=", g_variant_get_string(v, NULL),
                                                           NULL));
                } else if (g_variant_is_of_type(v, G_VARIANT_TYPE_STRING_ARRAY)) {
                        g_autofree const char **items = g_variant_get_strv(v, NULL);

                        for (guint i = 0; items[i]; i++)
                                g_ptr_array_add(lines, g_strconcat(key, "=", items[i], NULL));
                } else {
                        g_autofree char *s = g_variant_print(v, FALSE);

                        g_ptr_array_add(lines, g_strconcat(key, "=", s, NULL));
                }
                g_variant_unref(v);
        }
        return lines;
}

GPtrArray *rbus_resolve(struct rbus *b, const char *object, const char *how, GError **error)
{
        g_autoptr(GVariant) reply = g_dbus_connection_call_sync(
                b->bus, BUS_NAME, object, CONFLICT_IFACE, "Resolve", g_variant_new("(s)", how),
                G_VARIANT_TYPE("(a{sv})"), call_flags(b), CALL_TIMEOUT_MS, NULL, error);

        if (!reply) {
                strip(error ? *error : NULL);
                return NULL;
        }
        return result_lines(reply);
}

GPtrArray *rbus_resolve_merged(struct rbus *b, const char *object, const char *data,
                               size_t size, GError **error)
{
        g_autoptr(GUnixFDList) fds = g_unix_fd_list_new();
        g_autoptr(GVariant) reply = NULL;
        int fd = memfd_create("fcache-resolve-merged", MFD_CLOEXEC);

        if (fd < 0) {
                g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "memfd_create: %s",
                            g_strerror(errno));
                return NULL;
        }
        for (size_t off = 0; off < size;) {
                ssize_t n = write(fd, data + off, size - off);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno),
                                    "writing the merged text to a memfd: %s", g_strerror(errno));
                        close(fd);
                        return NULL;
                }
                off += (size_t)n;
        }
        if (g_unix_fd_list_append(fds, fd, error) < 0) {
                close(fd);
                return NULL;
        }
        close(fd);
        reply = g_dbus_connection_call_with_unix_fd_list_sync(
                b->bus, BUS_NAME, object, CONFLICT_IFACE, "ResolveMerged",
                g_variant_new("(h)", 0), G_VARIANT_TYPE("(a{sv})"), call_flags(b),
                CALL_TIMEOUT_MS, fds, NULL, NULL, error);
        if (!reply) {
                strip(error ? *error : NULL);
                return NULL;
        }
        return result_lines(reply);
}
