/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bus-result.c: how results and errors look on the bus.
 *
 * A result is libfcachectl's "key=value" lines, turned into a{sv}. A key's
 * type is decided by the key, never by how many values it has or what they
 * look like (result.h): a key that can repeat is always "as", even with one
 * value; a text key is always "s"; other keys are uint64 when decimal.
 * Errors are org.fcache.Manager1.Error.* names, one per FcdError.
 */
#include <errno.h>
#include <string.h>

#include "fcached.h"
#include "result.h"

static const GDBusErrorEntry error_entries[] = {
        { FCD_ERROR_FAILED, FCD_ERROR_PREFIX "Failed" },
        { FCD_ERROR_NOT_AUTHORIZED, FCD_ERROR_PREFIX "NotAuthorized" },
        { FCD_ERROR_ACCESS_DENIED, FCD_ERROR_PREFIX "AccessDenied" },
        { FCD_ERROR_INVALID_COMMAND, FCD_ERROR_PREFIX "InvalidCommand" },
        { FCD_ERROR_INVALID_ARGUMENT, FCD_ERROR_PREFIX "InvalidArgument" },
        { FCD_ERROR_NO_SUCH_PATH, FCD_ERROR_PREFIX "NoSuchPath" },
        { FCD_ERROR_LIMIT_EXCEEDED, FCD_ERROR_PREFIX "LimitExceeded" },
        { FCD_ERROR_NOT_SUPPORTED, FCD_ERROR_PREFIX "NotSupported" },
        { FCD_ERROR_CANCELLED, FCD_ERROR_PREFIX "Cancelled" },
        { FCD_ERROR_BUSY, FCD_ERROR_PREFIX "Busy" },
};
G_STATIC_ASSERT(G_N_ELEMENTS(error_entries) == FCD_ERROR_COUNT);

GQuark fcd_error_quark(void)
{
        static gsize quark;

        g_dbus_error_register_error_domain("fcd-error-quark", &quark, error_entries,
                                           G_N_ELEMENTS(error_entries));
        return (GQuark)quark;
}

const char *fcd_error_name(FcdError code)
{
        return code < FCD_ERROR_COUNT ? error_entries[code].dbus_error_name
                                      : error_entries[0].dbus_error_name;
}

FcdError fcd_error_from_errno(int err)
{
        switch (err) {
        case ENOENT:
        case ENOTDIR:
                return FCD_ERROR_NO_SUCH_PATH;
        case EACCES:
        case EPERM:
                return FCD_ERROR_ACCESS_DENIED;
        case EINVAL:
        case ELOOP:
        case ENAMETOOLONG:
                return FCD_ERROR_INVALID_ARGUMENT;
        case ENOSPC:
        case E2BIG:
        case EMFILE:
        case ENFILE:
                return FCD_ERROR_LIMIT_EXCEEDED;
        case EOPNOTSUPP:
                return FCD_ERROR_NOT_SUPPORTED;
        case ECANCELED:
                return FCD_ERROR_CANCELLED;
        case EBUSY:
                return FCD_ERROR_BUSY;
        default:
                return FCD_ERROR_FAILED;
        }
}

static bool is_decimal(const char *s)
{
        size_t n = strlen(s);

        if (!n || n > 19) /* fits in 64 bits */
                return false;
        for (size_t i = 0; i < n; i++)
                if (s[i] < '0' || s[i] > '9')
                        return false;
        return n == 1 || s[0] != '0';
}

GVariant *fcd_result_to_variant(const char *lines)
{
        g_autoptr(GHashTable) keys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                                           (GDestroyNotify)g_ptr_array_unref);
        g_autoptr(GPtrArray) order = g_ptr_array_new();
        g_auto(GStrv) split = g_strsplit(lines ? lines : "", "\n", -1);
        GVariantBuilder b;

        for (char **l = split; *l; l++) {
                char *eq = strchr(*l, '=');
                GPtrArray *vals;

                if (!eq || eq == *l)
                        continue;
                *eq = '\0';
                fc_result_unescape(eq + 1);
                vals = g_hash_table_lookup(keys, *l);
                if (!vals) {
                        vals = g_ptr_array_new_with_free_func(g_free);
                        g_hash_table_insert(keys, g_strdup(*l), vals);
                        g_ptr_array_add(order, *l);
                }
                /* Paths need not be UTF-8; the bus demands it. */
                g_ptr_array_add(vals, g_utf8_validate(eq + 1, -1, NULL) ? g_strdup(eq + 1)
                                                                     : g_utf8_make_valid(eq + 1, -1));
        }
        g_variant_builder_init(&b, G_VARIANT_TYPE("a{sv}"));
        for (guint i = 0; i < order->len; i++) {
                const char *key = order->pdata[i];
                GPtrArray *vals = g_hash_table_lookup(keys, key);
                GVariant *v;

                if (fc_result_key_repeats(key)) {
                        g_ptr_array_add(vals, NULL);
                        v = g_variant_new_strv((const char *const *)vals->pdata, -1);
                } else if (!fc_result_key_is_text(key) && is_decimal(vals->pdata[0])) {
                        v = g_variant_new_uint64(g_ascii_strtoull(vals->pdata[0], NULL, 10));
                } else {
                        v = g_variant_new_string(vals->pdata[0]);
                }
                g_variant_builder_add(&b, "{sv}", key, v);
        }
        return g_variant_builder_end(&b);
}
