/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* result.c: the key=value result builder and its escaping. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "result.h"

void fc_result_init(struct fc_result *r)
{
        memset(r, 0, sizeof(*r));
}

void fc_result_free(struct fc_result *r)
{
        free(r->buf);
        fc_result_init(r);
}

static int reserve(struct fc_result *r, size_t more)
{
        size_t need = r->len + more + 1;
        char *p;

        if (r->oom)
                return -ENOMEM;
        if (need <= r->cap)
                return 0;
        size_t cap = r->cap ? r->cap : 256;
        while (cap < need)
                cap *= 2;
        p = realloc(r->buf, cap);
        if (!p) {
                r->oom = 1;
                return -ENOMEM;
        }
        r->buf = p;
        r->cap = cap;
        return 0;
}

static void put(struct fc_result *r, const char *s, size_t n)
{
        if (reserve(r, n) < 0)
                return;
        memcpy(r->buf + r->len, s, n);
        r->len += n;
        r->buf[r->len] = '\0';
}

void fc_result_add_str(struct fc_result *r, const char *key, const char *value)
{
        char *e = fc_escape(value, FC_ESCAPE_VALUE);

        if (!e) {
                r->oom = 1;
                return;
        }
        put(r, key, strlen(key));
        put(r, "=", 1);
        put(r, e, strlen(e));
        put(r, "\n", 1);
        free(e);
}

void fc_result_add_u64(struct fc_result *r, const char *key, uint64_t value)
{
        char num[24];

        snprintf(num, sizeof(num), "%llu", (unsigned long long)value);
        fc_result_add_str(r, key, num);
}

void fc_result_add_fmt(struct fc_result *r, const char *key, const char *fmt, ...)
{
        char buf[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        fc_result_add_str(r, key, buf);
}

int fc_result_copy_out(const struct fc_result *r, char *out, size_t *len)
{
        size_t need = r->len + 1;

        if (!len)
                return 0;
        if (!out) {
                *len = need;
                return 0;
        }
        if (*len < need) {
                *len = need;
                return -ERANGE;
        }
        memcpy(out, r->buf ? r->buf : "", r->len);
        out[r->len] = '\0';
        *len = need;
        return 0;
}

static int hexval(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

size_t fc_result_unescape(char *v)
{
        char *w = v;

        for (char *p = v; *p; p++) {
                if (*p != '\\' || !p[1]) {
                        *w++ = *p;
                        continue;
                }
                p++;
                if (*p == 'n')
                        *w++ = '\n';
                else if (*p == 't')
                        *w++ = '\t';
                else if (*p == 'x' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
                        *w++ = (char)(hexval(p[1]) * 16 + hexval(p[2]));
                        p += 2;
                } else
                        *w++ = *p;
        }
        *w = '\0';
        return (size_t)(w - v);
}

/*
 * The keys that may occur more than once in one result. A reader must not
 * guess from the count: one pin is still a list of pins, so these are
 * always arrays (D-Bus "as", JSON arrays), even with a single value.
 */
static const char *const repeated_keys[] = {
        "conflict",        /* query conflicts: ID KIND PATH per conflict */
        "conflict_again",  /* resolve: conflicts the resolution left */
        "conflict_detail", /* query conflicts: ID DETAIL per conflict */
        "flushed_volume",  /* flush all: each fcache volume whose store was flushed */
        "mount",           /* flush all: each network mount */
        "pin",             /* query pinned: each pin at or below the path */
        "record",          /* query reintegration: each log record */
        "skipped",         /* flush all: MOUNTPOINT: why, for each mount left alone */
        "synced_volume",   /* sync with no PATH: each volume synced */
        "failed_volume",   /* sync with no PATH: each volume whose changes did not get there */
        NULL,
};

/*
 * Keys whose values are words, names or paths: always strings, even when a
 * value happens to be made of digits (a file named "42", a cache named "7").
 */
static const char *const text_keys[] = {
        "attributes", "backend", "backing", "cache", "cacheable", "cached",
        "callbacks_released", "dry_run", "file_handles", "files_counted", "first_error",
        "fits", "fs_network", "fs_type", "fscache", "fscache_cookie", "kept", "kmod",
        "measured", "method", "mirrored", "mount_point", "mountpoint", "name", "path",
        "pin_mode", "pinned", "reason", "recursive", "state", "takeover", "type", "unstable", "valid",
        "volume", NULL,
};

static bool in_list(const char *const *list, const char *key)
{
        for (; *list; list++)
                if (!strcmp(*list, key))
                        return true;
        return false;
}

bool fc_result_key_repeats(const char *key)
{
        return in_list(repeated_keys, key);
}

bool fc_result_key_is_text(const char *key)
{
        return in_list(text_keys, key) || fc_result_key_repeats(key);
}
