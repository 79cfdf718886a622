/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-output.c: what fcachectl prints: names escaped in text output, and a
 * JSON shape that depends on the keys alone.
 */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "output.h"
#include "result.h"

static void test_escape(void)
{
        static const struct {
                const char *in, *value, *display;
        } cases[] = {
                { "plain", "plain", "plain" },
                { "a\nb", "a\\nb", "a\\nb" },
                { "t\tab", "t\\tab", "t\\tab" },
                { "esc\033[2J", "esc\\x1b[2J", "esc\\x1b[2J" },
                { "cr\r del\x7f", "cr\\x0d del\\x7f", "cr\\x0d del\\x7f" },
                { "back\\slash", "back\\\\slash", "back\\\\slash" },
                { "caf\xc3\xa9 \xe2\x82\xac", "caf\xc3\xa9 \xe2\x82\xac", "caf\xc3\xa9 \xe2\x82\xac" },
                /* U+009B (CSI) in UTF-8, and a lone 0x9b byte. */
                { "c1\xc2\x9b", "c1\xc2\x9b", "c1\\xc2\\x9b" },
                { "raw\x9b", "raw\x9b", "raw\\x9b" },
                { "overlong\xc0\xaf", "overlong\xc0\xaf", "overlong\\xc0\\xaf" },
        };

        for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
                char *v = fc_escape(cases[i].in, FC_ESCAPE_VALUE);
                char *d = fc_escape(cases[i].in, FC_ESCAPE_DISPLAY);

                g_assert_cmpstr(v, ==, cases[i].value);
                g_assert_cmpstr(d, ==, cases[i].display);
                /* What people see has no control byte left. */
                for (const unsigned char *p = (const unsigned char *)d; *p; p++)
                        g_assert_true(*p >= 0x20 && *p != 0x7f);
                free(v);
                free(d);
        }
}

/* Render with a function into a string. */
static char *render(void (*fn)(FILE *, const struct fc_command *, const char *,
                               struct fc_outcome *, size_t),
                    const char *cmd_text, struct fc_outcome *o, size_t n)
{
        struct fc_command cmd;
        struct fc_error e;
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);

        g_assert_nonnull(f);
        g_assert_cmpint(fc_command_parse(cmd_text, &cmd, &e), ==, 0);
        fn(f, &cmd, cmd_text, o, n);
        g_assert_cmpint(fclose(f), ==, 0);
        return buf;
}

static void table(FILE *f, const struct fc_command *c, const char *t, struct fc_outcome *o,
                  size_t n)
{
        (void)t;
        fc_print_table(f, c, o, n);
}

static void json(FILE *f, const struct fc_command *c, const char *t, struct fc_outcome *o,
                 size_t n)
{
        (void)c;
        fc_print_json(f, t, o, n);
}

/* The result texts the outcomes point into, freed at the end. */
static GPtrArray *texts;

static void outcome(struct fc_outcome *o, const char *path, const char *lines)
{
        char *text = g_strdup(lines);

        g_ptr_array_add(texts, text);
        memset(o, 0, sizeof(*o));
        o->path = path;
        g_assert_cmpint(fc_outcome_parse(o, text), ==, 0);
}

static void test_table_escapes_names(void)
{
        struct fc_outcome o[2];
        char **lines, *out;

        outcome(&o[0], "/v/evil\nname\033]0;owned\007",
                "type=regular\nfiles=1\nbytes=10\npages_total=1\npages_cached=1\nbytes_cached=4096\n");
        outcome(&o[1], "/v/ok", "type=regular\nfiles=1\nbytes=10\n");
        out = render(table, "query cached", o, 2);
        /* A header and one line per path: the newline did not make a row. */
        lines = g_strsplit(out, "\n", -1);
        g_assert_cmpuint(g_strv_length(lines), ==, 4);
        g_strfreev(lines);
        g_assert_null(strchr(out, '\033'));
        g_assert_null(strchr(out, '\007'));
        g_assert_nonnull(strstr(out, "/v/evil\\nname\\x1b]0;owned\\x07\n"));
        free(out);

        fc_outcome_free(&o[0]);
        /* key: value lists (query pinned): the names in values are escaped too. */
        outcome(&o[0], "/v/d", "pinned=yes\npin=id=1 path=/v/d/a\\nb\\x1b files=1\n");
        out = render(table, "query pinned", o, 1);
        g_assert_nonnull(strstr(out, "pin     id=1 path=/v/d/a\\nb\\x1b files=1\n"));
        g_assert_null(strchr(out, '\033'));
        free(out);
        for (size_t i = 0; i < 2; i++)
                fc_outcome_free(&o[i]);
}

static void test_json_shape(void)
{
        struct fc_outcome o;
        char *out;

        /* One pin is still a list of pins; a name made of digits is a string. */
        outcome(&o, "/v/d", "pinned=yes\npin=id=1 path=/v/d\nfiles=3\nfirst_error=42\n");
        out = render(json, "query pinned", &o, 1);
        g_assert_nonnull(strstr(out, "\"pin\":[\"id=1 path=/v/d\"]"));
        g_assert_nonnull(strstr(out, "\"files\":3"));
        g_assert_nonnull(strstr(out, "\"first_error\":\"42\""));
        free(out);
        fc_outcome_free(&o);

        /* Every value of a repeated key, in order. */
        outcome(&o, "/v/d", "pin=a\npin=b\npin=c\n");
        out = render(json, "query pinned recursive", &o, 1);
        g_assert_nonnull(strstr(out, "\"pin\":[\"a\",\"b\",\"c\"]"));
        free(out);
        fc_outcome_free(&o);

        g_assert_true(fc_result_key_repeats("pin"));
        g_assert_true(fc_result_key_repeats("mount"));
        g_assert_false(fc_result_key_repeats("pinned"));
        g_assert_true(fc_result_key_is_text("path"));
        g_assert_false(fc_result_key_is_text("bytes"));
}

int main(int argc, char **argv)
{
        int r;

        g_test_init(&argc, &argv, NULL);
        texts = g_ptr_array_new_with_free_func(g_free);
        g_test_add_func("/fcache/output/escape", test_escape);
        g_test_add_func("/fcache/output/table-escapes-names", test_table_escapes_names);
        g_test_add_func("/fcache/output/json-shape", test_json_shape);
        r = g_test_run();
        g_ptr_array_unref(texts);
        return r;
}
