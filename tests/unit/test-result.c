/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-result.c: the key=value builder: escaping, round trip, the size protocol. */
#include <errno.h>
#include <glib.h>
#include <string.h>

#include "result.h"

static void test_escaping(void)
{
        struct fc_result r;
        char *copy;

        fc_result_init(&r);
        fc_result_add_str(&r, "path", "a\nb\\c\td\x01" "e\x7f" "f\xc3\xa9");
        fc_result_add_u64(&r, "n", 18446744073709551615ull);
        g_assert_cmpstr(r.buf, ==, "path=a\\nb\\\\c\\td\\x01e\\x7ff\xc3\xa9\nn=18446744073709551615\n");
        /* One line per pair, and the value comes back byte for byte. */
        copy = g_strndup(r.buf + 5, strcspn(r.buf + 5, "\n"));
        fc_result_unescape(copy);
        g_assert_cmpstr(copy, ==, "a\nb\\c\td\x01" "e\x7f" "f\xc3\xa9");
        g_free(copy);
        fc_result_free(&r);
}

static void test_copy_out(void)
{
        struct fc_result r;
        char buf[16];
        size_t len;

        fc_result_init(&r);
        fc_result_add_str(&r, "k", "value");   /* "k=value\n" = 8 bytes + NUL */
        len = 0;
        g_assert_cmpint(fc_result_copy_out(&r, NULL, &len), ==, 0);
        g_assert_cmpuint(len, ==, 9);
        len = 8;
        memset(buf, '#', sizeof(buf));
        g_assert_cmpint(fc_result_copy_out(&r, buf, &len), ==, -ERANGE);
        g_assert_cmpuint(len, ==, 9);
        g_assert_cmpint(buf[0], ==, '#');
        len = 9;
        g_assert_cmpint(fc_result_copy_out(&r, buf, &len), ==, 0);
        g_assert_cmpstr(buf, ==, "k=value\n");
        g_assert_cmpint(fc_result_copy_out(&r, buf, NULL), ==, 0);
        fc_result_free(&r);

        /* An empty result is the empty string. */
        fc_result_init(&r);
        len = sizeof(buf);
        g_assert_cmpint(fc_result_copy_out(&r, buf, &len), ==, 0);
        g_assert_cmpstr(buf, ==, "");
        g_assert_cmpuint(len, ==, 1);
}

static void test_growth(void)
{
        struct fc_result r;

        fc_result_init(&r);
        for (int i = 0; i < 10000; i++)
                fc_result_add_fmt(&r, "line", "%d", i);
        g_assert_false(r.oom);
        g_assert_nonnull(strstr(r.buf, "line=9999\n"));
        g_assert_cmpuint(r.len, ==, strlen(r.buf));
        fc_result_free(&r);
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/fcache/result/escaping", test_escaping);
        g_test_add_func("/fcache/result/copy-out", test_copy_out);
        g_test_add_func("/fcache/result/growth", test_growth);
        return g_test_run();
}
