/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-command.c: every command of the grammar parses, every error names the bad word. */
#include <errno.h>
#include <glib.h>
#include <string.h>

#include "command.h"

static void test_every_command(void)
{
        static const struct { const char *text; enum fc_op op; unsigned mods; } cases[] = {
                { "query cached", FC_OP_QUERY_CACHED, 0 },
                { "query cached recursive", FC_OP_QUERY_CACHED, FC_MOD_RECURSIVE },
                { "query dirty", FC_OP_QUERY_DIRTY, 0 },
                { "query dirty recursive", FC_OP_QUERY_DIRTY, FC_MOD_RECURSIVE },
                { "query pinned", FC_OP_QUERY_PINNED, 0 },
                { "query pinned recursive", FC_OP_QUERY_PINNED, FC_MOD_RECURSIVE },
                { "query cache", FC_OP_QUERY_CACHE, 0 },
                { "query state", FC_OP_QUERY_STATE, 0 },
                { "query conflicts", FC_OP_QUERY_CONFLICTS, 0 },
                { "query reintegration", FC_OP_QUERY_REINTEGRATION, 0 },
                { "flush", FC_OP_FLUSH, 0 },
                { "flush volume", FC_OP_FLUSH_VOLUME, 0 },
                { "flush all", FC_OP_FLUSH_ALL, 0 },
                { "flush callbacks", FC_OP_FLUSH_CALLBACKS, 0 },
                { "prefetch", FC_OP_PREFETCH, 0 },
                { "prefetch recursive", FC_OP_PREFETCH, FC_MOD_RECURSIVE },
                { "pin", FC_OP_PIN, 0 },
                { "pin recursive", FC_OP_PIN, FC_MOD_RECURSIVE },
                { "pin dry-run", FC_OP_PIN, FC_MOD_DRY_RUN },
                { "pin recursive priority 7 dry-run", FC_OP_PIN,
                  FC_MOD_RECURSIVE | FC_MOD_PRIORITY | FC_MOD_DRY_RUN },
                { "pin dry-run priority 0 recursive", FC_OP_PIN,
                  FC_MOD_RECURSIVE | FC_MOD_PRIORITY | FC_MOD_DRY_RUN },
                { "unpin", FC_OP_UNPIN, 0 },
                { "unpin recursive", FC_OP_UNPIN, FC_MOD_RECURSIVE },
                { "reconnect force", FC_OP_RECONNECT, FC_MOD_FORCE },
                { "set cache-size 10G", FC_OP_SET_CACHE_SIZE, 0 },
                { "set cacheable on", FC_OP_SET_CACHEABLE, 0 },
                { "set cacheable off", FC_OP_SET_CACHEABLE, 0 },
                { "set reserve 512MiB", FC_OP_SET_RESERVE, 0 },
                { "set cache fast-ssd", FC_OP_SET_CACHE, 0 },
                { "disconnect", FC_OP_DISCONNECT, 0 },
                { "reconnect", FC_OP_RECONNECT, 0 },
                { "sync", FC_OP_SYNC, 0 },
                { "  query\tcached  ", FC_OP_QUERY_CACHED, 0 },
        };

        for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
                struct fc_command c;
                struct fc_error e = { 0 };

                g_test_message("%s", cases[i].text);
                g_assert_cmpint(fc_command_parse(cases[i].text, &c, &e), ==, 0);
                g_assert_cmpint(c.op, ==, cases[i].op);
                g_assert_cmpuint(c.mods, ==, cases[i].mods);
        }
}

static void test_arguments(void)
{
        struct fc_command c;
        struct fc_error e = { 0 };

        g_assert_cmpint(fc_command_parse("pin priority 1000", &c, &e), ==, 0);
        g_assert_cmpint(c.priority, ==, 1000);
        g_assert_cmpint(fc_command_parse("pin", &c, &e), ==, 0);
        g_assert_cmpint(c.priority, ==, FC_PRIORITY_DEFAULT);
        g_assert_cmpint(fc_command_parse("set cache-size 10G", &c, &e), ==, 0);
        g_assert_cmpuint(c.size, ==, 10ull << 30);
        g_assert_cmpint(fc_command_parse("set reserve 4096", &c, &e), ==, 0);
        g_assert_cmpuint(c.size, ==, 4096);
        g_assert_cmpint(fc_command_parse("set reserve 3KiB", &c, &e), ==, 0);
        g_assert_cmpuint(c.size, ==, 3072);
        g_assert_cmpint(fc_command_parse("set cacheable off", &c, &e), ==, 0);
        g_assert_false(c.on);
        g_assert_cmpint(fc_command_parse("set cacheable on", &c, &e), ==, 0);
        g_assert_true(c.on);
        g_assert_cmpint(fc_command_parse("set cache ssd_1.x", &c, &e), ==, 0);
        g_assert_cmpstr(c.name, ==, "ssd_1.x");
}

/* Each bad command fails with EINVAL and a message quoting the offending word. */
static void test_errors(void)
{
        static const struct { const char *text, *needle; } cases[] = {
                { "", "empty command" },
                { "   ", "empty command" },
                { "frobnicate", "unknown command 'frobnicate'" },
                { "Query cached", "unknown command 'Query'" },
                { "query", "query: missing what to query" },
                { "query bogus", "query: unknown word 'bogus'" },
                { "query cached bogus", "query cached: unexpected word 'bogus'" },
                { "query cache recursive", "query cache: 'recursive' does not apply here" },
                { "query cached dry-run", "query cached: 'dry-run' does not apply here" },
                { "query cached recursive recursive", "'recursive' given twice" },
                { "flush recursive", "flush: 'recursive' does not apply here" },
                { "flush everything", "flush: unexpected word 'everything'" },
                { "prefetch now", "prefetch: unexpected word 'now'" },
                { "pin priority", "pin: 'priority' needs a number" },
                { "pin priority high", "pin: priority 'high' is not a number" },
                { "pin priority 1001", "pin: priority '1001' is not a number" },
                { "pin priority -1", "pin: priority '-1' is not a number" },
                { "pin priority 5 priority 6", "pin: 'priority' given twice" },
                { "unpin dry-run", "unpin: 'dry-run' does not apply here" },
                { "disconnect force", "disconnect: 'force' does not apply here" },
                { "reconnect force force", "reconnect: 'force' given twice" },
                { "set", "set: missing what to set" },
                { "set colour blue", "set: unknown word 'colour'" },
                { "set cache-size", "set cache-size: missing SIZE" },
                { "set cache-size lots", "set cache-size: 'lots' is not a size" },
                { "set cache-size 10GB", "set cache-size: '10GB' is not a size" },
                { "set cache-size -5", "set cache-size: '-5' is not a size" },
                { "set cache-size 99999999999999999999", "is too large" },
                { "set cache-size 20000000P", "set cache-size: size '20000000P' is too large" },
                { "set reserve 1G 2G", "set reserve: unexpected word '2G'" },
                { "set cacheable", "set cacheable: missing 'on' or 'off'" },
                { "set cacheable maybe", "set cacheable: expected 'on' or 'off', got 'maybe'" },
                { "set cache", "set cache: missing NAME" },
                { "set cache ../etc", "set cache: '../etc' is not a cache name" },
                { "set cache .hidden", "is not a cache name" },
                { "disconnect now", "disconnect: unexpected word 'now'" },
                { "reconnect recursive", "reconnect: 'recursive' does not apply here" },
                { "query\ncached", "byte 0x0a at offset 5" },
                { "query cach\xc3\xa9", "byte 0xc3 at offset 10" },
                { "a b c d e f g h i j k l m n o p q", "more than 16 words: 'q'" },
        };

        for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
                struct fc_command c;
                struct fc_error e = { 0 };

                g_test_message("%s", cases[i].text);
                g_assert_cmpint(fc_command_parse(cases[i].text, &c, &e), ==, -EINVAL);
                g_assert_cmpint(e.code, ==, EINVAL);
                if (!strstr(e.text, cases[i].needle))
                        g_error("'%s': message '%s' lacks '%s'", cases[i].text, e.text,
                                cases[i].needle);
        }
}

static void test_too_long(void)
{
        char *s = g_strnfill(5000, 'a');
        struct fc_command c;
        struct fc_error e = { 0 };

        g_assert_cmpint(fc_command_parse(s, &c, &e), ==, -EINVAL);
        g_assert_nonnull(strstr(e.text, "longer than 4096"));
        g_assert_cmpint(fc_command_parse(NULL, &c, &e), ==, -EINVAL);
        g_free(s);
}

/* A failed parse leaves the caller's command untouched. */
static void test_no_clobber(void)
{
        struct fc_command c = { .op = FC_OP_RECONNECT, .priority = 3 };
        struct fc_error e = { 0 };

        g_assert_cmpint(fc_command_parse("pin priority x", &c, &e), <, 0);
        g_assert_cmpint(c.op, ==, FC_OP_RECONNECT);
        g_assert_cmpint(c.priority, ==, 3);
}

static void test_round_trip(void)
{
        static const char *const texts[] = {
                "query cached recursive", "pin dry-run recursive priority 12", "set cache-size 1K",
                "set cacheable off", "set cache a", "flush all", "unpin recursive", "reconnect",
                "reconnect force",
        };

        for (size_t i = 0; i < G_N_ELEMENTS(texts); i++) {
                struct fc_command a, b;
                struct fc_error e = { 0 };
                char buf[256];

                g_assert_cmpint(fc_command_parse(texts[i], &a, &e), ==, 0);
                g_assert_cmpint(fc_command_format(&a, buf, sizeof(buf)), >, 0);
                g_assert_cmpint(fc_command_parse(buf, &b, &e), ==, 0);
                g_assert_cmpint(memcmp(&a, &b, sizeof(a)), ==, 0);
        }
        struct fc_command c;
        struct fc_error e = { 0 };
        char tiny[4];
        fc_command_parse("query cached", &c, &e);
        g_assert_cmpint(fc_command_format(&c, tiny, sizeof(tiny)), ==, -ERANGE);
}

/* The CLI's split: the longest command first, the rest are paths. */
static void test_words(void)
{
        char *w1[] = { "query", "cached", "recursive", "/a", "/b" };
        char *w2[] = { "flush", "/mnt/x" };
        char *w3[] = { "flush", "volume" };
        char *w4[] = { "pin", "priority", "9", "dir" };
        char *w5[] = { "set", "cache-size", "1G", "/v" };
        struct fc_command c;
        struct fc_error e = { 0 };
        int used;

        g_assert_cmpint(fc_command_parse_words(w1, 5, &c, &used, &e), ==, 0);
        g_assert_cmpint(used, ==, 3);
        g_assert_cmpint(fc_command_parse_words(w2, 2, &c, &used, &e), ==, 0);
        g_assert_cmpint(c.op, ==, FC_OP_FLUSH);
        g_assert_cmpint(used, ==, 1);
        g_assert_cmpint(fc_command_parse_words(w3, 2, &c, &used, &e), ==, 0);
        g_assert_cmpint(c.op, ==, FC_OP_FLUSH_VOLUME);
        g_assert_cmpint(fc_command_parse_words(w4, 4, &c, &used, &e), ==, 0);
        g_assert_cmpint(c.priority, ==, 9);
        g_assert_cmpint(used, ==, 3);
        g_assert_cmpint(fc_command_parse_words(w5, 4, &c, &used, &e), ==, 0);
        g_assert_cmpint(used, ==, 3);
}

/* One size grammar for the CLI and the volume configuration. */
static void test_sizes(void)
{
        static const struct { const char *text; int r; uint64_t size; } cases[] = {
                { "0", 0, 0 },
                { "512B", 0, 512 },
                { "20g", 0, 20ull << 30 },
                { "20G", 0, 20ull << 30 },
                { "20GiB", 0, 20ull << 30 },
                { "20gib", 0, 20ull << 30 },
                { "1P", 0, 1ull << 50 },
                { "1p", 0, 1ull << 50 },
                { "2E", 0, 2ull << 60 },
                { "8 M", 0, 8ull << 20 },
                { "16E", -ERANGE, 0 },
                { "10GB", -EINVAL, 0 },
                { "10Gi", -EINVAL, 0 },
                { "12Q", -EINVAL, 0 },
                { "-1", -EINVAL, 0 },
                { "", -EINVAL, 0 },
        };

        for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
                uint64_t v = 0;

                g_test_message("%s", cases[i].text);
                g_assert_cmpint(fc_parse_size(cases[i].text, &v), ==, cases[i].r);
                if (cases[i].r == 0)
                        g_assert_cmpuint(v, ==, cases[i].size);
        }
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/fcache/parser/every-command", test_every_command);
        g_test_add_func("/fcache/parser/arguments", test_arguments);
        g_test_add_func("/fcache/parser/errors", test_errors);
        g_test_add_func("/fcache/parser/too-long", test_too_long);
        g_test_add_func("/fcache/parser/no-clobber", test_no_clobber);
        g_test_add_func("/fcache/parser/round-trip", test_round_trip);
        g_test_add_func("/fcache/parser/words", test_words);
        g_test_add_func("/fcache/parser/sizes", test_sizes);
        return g_test_run();
}
