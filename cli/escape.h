/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * escape.h: the one escaping of names and values, header-only so that every
 * program in cli/ can use it (fcache-resolve links no fcache library).
 *
 * A name may hold any byte but NUL and '/'. Escaped, it stays on one line and
 * one table cell, and no byte of it reaches a terminal as a control code:
 * backslash becomes "\\", newline "\n", tab "\t", other C0 bytes and DEL
 * "\xHH". That is the escaping of result values (result.h), which the
 * result lines carry on the wire. For people (FC_ESCAPE_DISPLAY) also the C1
 * controls, which terminals obey as well: U+0080..U+009F written as UTF-8,
 * and bytes that are not part of valid UTF-8 (a lone 0x9b is CSI to a
 * terminal in an 8-bit mode), each byte as "\xHH".
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum fc_escape_mode { FC_ESCAPE_VALUE, FC_ESCAPE_DISPLAY };

/* Bytes of the valid UTF-8 sequence at p that is not a C1 control, or 0. */
static inline size_t fc_escape_printable_utf8(const unsigned char *p)
{
        size_t len = p[0] < 0xc2 ? 0 : p[0] < 0xe0 ? 2 : p[0] < 0xf0 ? 3 : p[0] < 0xf5 ? 4 : 0;

        for (size_t k = 1; k < len; k++)
                if ((p[k] & 0xc0) != 0x80)
                        return 0;
        /* Overlong forms and surrogates are not valid UTF-8 either. */
        if ((len == 3 && p[0] == 0xe0 && p[1] < 0xa0) || (len == 3 && p[0] == 0xed && p[1] >= 0xa0) ||
            (len == 4 && p[0] == 0xf0 && p[1] < 0x90) || (len == 4 && p[0] == 0xf4 && p[1] >= 0x90))
                return 0;
        if (len == 2 && p[0] == 0xc2 && p[1] < 0xa0)
                return 0; /* C1 control */
        return len;
}

/* s escaped (see above), newly allocated; NULL when out of memory. */
static inline char *fc_escape(const char *s, enum fc_escape_mode mode)
{
        const unsigned char *p = (const unsigned char *)s;
        size_t n = strlen(s), o = 0;
        char *out;

        if (n > (SIZE_MAX - 1) / 4)
                return NULL;
        out = malloc(n * 4 + 1);
        if (!out)
                return NULL;
        while (*p) {
                size_t ok;

                if (*p == '\\' || *p == '\n' || *p == '\t') {
                        out[o++] = '\\';
                        out[o++] = *p == '\\' ? '\\' : *p == '\n' ? 'n' : 't';
                        p++;
                } else if (*p < 0x20 || *p == 0x7f) {
                        o += (size_t)snprintf(out + o, 5, "\\x%02x", *p++);
                } else if (*p < 0x80 || mode == FC_ESCAPE_VALUE) {
                        out[o++] = (char)*p++;
                } else if ((ok = fc_escape_printable_utf8(p))) {
                        memcpy(out + o, p, ok);
                        o += ok;
                        p += ok;
                } else {
                        o += (size_t)snprintf(out + o, 5, "\\x%02x", *p++);
                }
        }
        out[o] = '\0';
        return out;
}

/* Write s to f escaped for people; the raw bytes never, even out of memory. */
static inline void fc_fputs_display(const char *s, FILE *f)
{
        char *e = fc_escape(s, FC_ESCAPE_DISPLAY);

        fputs(e ? e : "(out of memory)", f);
        free(e);
}
