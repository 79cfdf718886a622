/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * result.h: building a command's result as "key=value\n" lines.
 *
 * Keys are [a-z0-9_]+. Values are escaped so that one line is one pair:
 * backslash becomes "\\", newline "\n", tab "\t", other control bytes
 * "\xHH"; everything else (UTF-8 included) is kept as it is.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fc_result {
        char *buf;   /* NUL-terminated lines; owned */
        size_t len;  /* bytes used, without the NUL */
        size_t cap;
        int oom;     /* an append failed: the result is incomplete */
};

void fc_result_init(struct fc_result *r);
void fc_result_free(struct fc_result *r);
void fc_result_add_str(struct fc_result *r, const char *key, const char *value);
void fc_result_add_u64(struct fc_result *r, const char *key, uint64_t value);
void fc_result_add_fmt(struct fc_result *r, const char *key, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/*
 * Hand the result to a caller under the getxattr-like protocol of
 * fcachectl(): returns 0 or -ERANGE, and sets *len to the size needed.
 */
int fc_result_copy_out(const struct fc_result *r, char *out, size_t *len);

/* Undo the value escaping in place; returns the unescaped length. */
size_t fc_result_unescape(char *value);

/*
 * A key's type never depends on its values: a key that can occur more than
 * once is always a list of strings; a text key (names, paths, words) is
 * always a string; any other key is a number when its value is decimal.
 */
bool fc_result_key_repeats(const char *key);
bool fc_result_key_is_text(const char *key);
