/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-content.c: fcache_merge_content() and its helpers: clean merges,
 * conflicts with all versions kept, the diff3/merge/zdiff3 renderings,
 * binary files, empty files, CRLF, missing trailing newlines, no base,
 * argument checks, and the marker counter used by `fcache-resolve edit`.
 */
#include <errno.h>
#include <string.h>

#include <glib.h>

#include "fcache-merge.h"

/* String literals, or NULL for "no base". */
static int merge3(fcache_merge_content_result *out, const char *base, const char *local, const char *remote,
                  const fcache_merge_content_options *opts)
{
        fcache_merge_buf b = FCACHE_MERGE_BUF(base, base ? strlen(base) : 0);
        fcache_merge_buf l = FCACHE_MERGE_BUF(local, strlen(local));
        fcache_merge_buf r = FCACHE_MERGE_BUF(remote, strlen(remote));

        return fcache_merge_content(out, base ? &b : NULL, &l, &r, opts);
}

static void assert_clean(const fcache_merge_content_result *res, fcache_merge_content_outcome outcome,
                         const char *merged, size_t merged_size)
{
        g_assert_cmpstr(fcache_merge_content_outcome_to_string(res->outcome), ==,
                        fcache_merge_content_outcome_to_string(outcome));
        g_assert_cmpint(res->conflict, ==, FCACHE_CONFLICT_NONE);
        g_assert_nonnull(res->merged);
        g_assert_cmpmem(res->merged, res->merged_size, merged, merged_size);
        g_assert_cmpint(res->merged[res->merged_size], ==, '\0');
        g_assert_null(res->rendering);
        g_assert_null(res->base);
        g_assert_null(res->local);
        g_assert_null(res->remote);
}

#define ASSERT_CLEAN(res, outcome, s) assert_clean(res, FCACHE_MERGE_CONTENT_##outcome, s, strlen(s))

/* A conflict keeps all three versions, byte for byte. */
static void assert_conflict(const fcache_merge_content_result *res, fcache_conflict_kind kind, const char *base,
                            const char *local, const char *remote)
{
        g_assert_cmpint(res->outcome, ==, FCACHE_MERGE_CONTENT_CONFLICT);
        g_assert_cmpstr(fcache_conflict_kind_to_string(res->conflict), ==, fcache_conflict_kind_to_string(kind));
        g_assert_null(res->merged);
        if (base)
                g_assert_cmpmem(res->base, res->base_size, base, strlen(base));
        else
                g_assert_null(res->base);
        g_assert_cmpmem(res->local, res->local_size, local, strlen(local));
        g_assert_cmpmem(res->remote, res->remote_size, remote, strlen(remote));
        g_assert_cmpint(res->local[res->local_size], ==, '\0');
        g_assert_cmpint(res->remote[res->remote_size], ==, '\0');
}

static const char BASE5[] = "1\n2\n3\n4\n5\n";

static void test_clean_merge(void)
{
        fcache_merge_content_result res;

        g_assert_cmpint(merge3(&res, BASE5, "one\n2\n3\n4\n5\n", "1\n2\n3\n4\nfive\n", NULL), ==, 0);
        ASSERT_CLEAN(&res, MERGED, "one\n2\n3\n4\nfive\n");
        g_assert_false(res.binary);
        fcache_merge_content_result_free(&res);

        /* Insertions on both sides in different places. */
        g_assert_cmpint(merge3(&res, BASE5, "0\n1\n2\n3\n4\n5\n", "1\n2\n3\n4\n5\n6\n", NULL), ==, 0);
        ASSERT_CLEAN(&res, MERGED, "0\n1\n2\n3\n4\n5\n6\n");
        fcache_merge_content_result_free(&res);

        /* A deletion and an edit far apart. */
        g_assert_cmpint(merge3(&res, BASE5, "2\n3\n4\n5\n", "1\n2\n3\n4\nV\n", NULL), ==, 0);
        ASSERT_CLEAN(&res, MERGED, "2\n3\n4\nV\n");
        fcache_merge_content_result_free(&res);
}

static void test_one_side(void)
{
        fcache_merge_content_result res;

        g_assert_cmpint(merge3(&res, BASE5, "x\n", BASE5, NULL), ==, 0);
        ASSERT_CLEAN(&res, TAKE_LOCAL, "x\n");
        fcache_merge_content_result_free(&res);

        g_assert_cmpint(merge3(&res, BASE5, BASE5, "y\n", NULL), ==, 0);
        ASSERT_CLEAN(&res, TAKE_REMOTE, "y\n");
        fcache_merge_content_result_free(&res);

        g_assert_cmpint(merge3(&res, BASE5, BASE5, BASE5, NULL), ==, 0);
        ASSERT_CLEAN(&res, UNCHANGED, BASE5);
        fcache_merge_content_result_free(&res);
}

static void test_identical_changes(void)
{
        fcache_merge_content_result res;

        g_assert_cmpint(merge3(&res, BASE5, "1\n2\nthree\n4\n5\n", "1\n2\nthree\n4\n5\n", NULL), ==, 0);
        ASSERT_CLEAN(&res, IDENTICAL, "1\n2\nthree\n4\n5\n");
        fcache_merge_content_result_free(&res);

        /* Both created the same file. */
        g_assert_cmpint(merge3(&res, NULL, "same\n", "same\n", NULL), ==, 0);
        ASSERT_CLEAN(&res, IDENTICAL, "same\n");
        fcache_merge_content_result_free(&res);
}

static const char C_BASE[] = "a\nb\nc\n", C_LOCAL[] = "a\nL\nc\n", C_REMOTE[] = "a\nR\nc\n";

static void test_conflict_diff3(void)
{
        fcache_merge_content_result res;

        g_assert_cmpint(merge3(&res, C_BASE, C_LOCAL, C_REMOTE, NULL), ==, 0);
        assert_conflict(&res, FCACHE_CONFLICT_CONTENT, C_BASE, C_LOCAL, C_REMOTE);
        g_assert_false(res.binary);
        g_assert_cmpstr(res.rendering, ==,
                        "a\n"
                        "<<<<<<< local\n"
                        "L\n"
                        "||||||| base\n"
                        "b\n"
                        "=======\n"
                        "R\n"
                        ">>>>>>> remote\n"
                        "c\n");
        g_assert_cmpuint(res.rendering_size, ==, strlen(res.rendering));
        g_assert_cmpuint(fcache_merge_count_markers(res.rendering, res.rendering_size, 0), ==, 4);
        fcache_merge_content_result_free(&res);
        g_assert_null(res.rendering);
}

static void test_conflict_styles(void)
{
        fcache_merge_content_options opts = FCACHE_MERGE_CONTENT_OPTIONS_INIT;
        fcache_merge_content_result res;
        const char *base = "a\nb\nc\n", *local = "a\nX\nY\nZ\nc\n", *remote = "a\nX\nQ\nZ\nc\n";

        opts.style = FCACHE_MERGE_STYLE_MERGE;
        opts.local_label = "mine";
        opts.remote_label = "server";
        g_assert_cmpint(merge3(&res, base, local, remote, &opts), ==, 0);
        assert_conflict(&res, FCACHE_CONFLICT_CONTENT, base, local, remote);
        g_assert_cmpstr(res.rendering, ==, "a\nX\n<<<<<<< mine\nY\n=======\nQ\n>>>>>>> server\nZ\nc\n");
        g_assert_cmpuint(fcache_merge_count_markers(res.rendering, res.rendering_size, 0), ==, 3);
        fcache_merge_content_result_free(&res);

        /* diff3 keeps the common lines inside the conflict; zdiff3 moves them out. */
        opts = (fcache_merge_content_options) FCACHE_MERGE_CONTENT_OPTIONS_INIT;
        g_assert_cmpint(merge3(&res, base, local, remote, &opts), ==, 0);
        g_assert_cmpstr(res.rendering, ==,
                        "a\n<<<<<<< local\nX\nY\nZ\n||||||| base\nb\n=======\nX\nQ\nZ\n>>>>>>> remote\nc\n");
        fcache_merge_content_result_free(&res);

        opts.style = FCACHE_MERGE_STYLE_ZDIFF3;
        opts.base_label = "ancestor";
        g_assert_cmpint(merge3(&res, base, local, remote, &opts), ==, 0);
        g_assert_cmpstr(res.rendering, ==,
                        "a\nX\n<<<<<<< local\nY\n||||||| ancestor\nb\n=======\nQ\n>>>>>>> remote\nZ\nc\n");
        fcache_merge_content_result_free(&res);

        opts = (fcache_merge_content_options) FCACHE_MERGE_CONTENT_OPTIONS_INIT;
        opts.marker_size = 10;
        g_assert_cmpint(merge3(&res, C_BASE, C_LOCAL, C_REMOTE, &opts), ==, 0);
        g_assert_nonnull(strstr(res.rendering, "\n<<<<<<<<<< local\n"));
        g_assert_nonnull(strstr(res.rendering, "\n==========\n"));
        g_assert_cmpuint(fcache_merge_count_markers(res.rendering, res.rendering_size, 10), ==, 4);
        g_assert_cmpuint(fcache_merge_count_markers(res.rendering, res.rendering_size, 0), ==, 0);
        fcache_merge_content_result_free(&res);
}

static void test_binary(void)
{
        static const char base[] = "GIF\0base", local[] = "GIF\0local", remote[] = "GIF\0remote";
        fcache_merge_buf b = FCACHE_MERGE_BUF(base, sizeof(base) - 1);
        fcache_merge_buf l = FCACHE_MERGE_BUF(local, sizeof(local) - 1);
        fcache_merge_buf r = FCACHE_MERGE_BUF(remote, sizeof(remote) - 1);
        fcache_merge_content_result res;

        g_assert_cmpint(fcache_merge_content(&res, &b, &l, &r, NULL), ==, 0);
        g_assert_cmpint(res.outcome, ==, FCACHE_MERGE_CONTENT_CONFLICT);
        g_assert_cmpint(res.conflict, ==, FCACHE_CONFLICT_BINARY);
        g_assert_true(res.binary);
        g_assert_null(res.merged);
        g_assert_null(res.rendering);
        g_assert_cmpmem(res.base, res.base_size, base, sizeof(base) - 1);
        g_assert_cmpmem(res.local, res.local_size, local, sizeof(local) - 1);
        g_assert_cmpmem(res.remote, res.remote_size, remote, sizeof(remote) - 1);
        fcache_merge_content_result_free(&res);

        /* Identical binary changes are clean. */
        g_assert_cmpint(fcache_merge_content(&res, &b, &l, &l, NULL), ==, 0);
        assert_clean(&res, FCACHE_MERGE_CONTENT_IDENTICAL, local, sizeof(local) - 1);
        fcache_merge_content_result_free(&res);

        /* So is a binary change on one side only. */
        g_assert_cmpint(fcache_merge_content(&res, &b, &b, &r, NULL), ==, 0);
        assert_clean(&res, FCACHE_MERGE_CONTENT_TAKE_REMOTE, remote, sizeof(remote) - 1);
        fcache_merge_content_result_free(&res);

        /* A text file whose base was binary is not text-merged either. */
        {
                fcache_merge_buf lt = FCACHE_MERGE_BUF("text\n", 5), rt = FCACHE_MERGE_BUF("other\n", 6);

                g_assert_cmpint(fcache_merge_content(&res, &b, &lt, &rt, NULL), ==, 0);
                g_assert_cmpint(res.conflict, ==, FCACHE_CONFLICT_BINARY);
                fcache_merge_content_result_free(&res);
        }
}

/* A NUL byte after git's 8000-byte window: binary by default, text with git's window. */
static void test_binary_scan_limit(void)
{
        fcache_merge_content_options opts = FCACHE_MERGE_CONTENT_OPTIONS_INIT;
        g_autoptr(GString) base = g_string_new(NULL), local = NULL, remote = NULL;
        fcache_merge_content_result res;
        fcache_merge_buf b, l, r;

        g_string_append(base, "first\n");
        for (int i = 0; i < 2000; i++)
                g_string_append_printf(base, "line %d\n", i);
        g_string_append_c(base, '\0');
        g_string_append(base, "\nlast\n");
        g_assert_cmpuint(base->len, >, FCACHE_MERGE_GIT_BINARY_SCAN);

        local = g_string_new_len(base->str, (gssize) base->len);
        memcpy(local->str, "FIRST", 5);
        remote = g_string_new_len(base->str, (gssize) base->len);
        memcpy(remote->str + remote->len - 5, "LAST", 4);

        g_assert_true(fcache_merge_is_binary(base->str, base->len, 0));
        g_assert_false(fcache_merge_is_binary(base->str, base->len, FCACHE_MERGE_GIT_BINARY_SCAN));

        b = FCACHE_MERGE_BUF(base->str, base->len);
        l = FCACHE_MERGE_BUF(local->str, local->len);
        r = FCACHE_MERGE_BUF(remote->str, remote->len);
        g_assert_cmpint(fcache_merge_content(&res, &b, &l, &r, NULL), ==, 0);
        g_assert_cmpint(res.conflict, ==, FCACHE_CONFLICT_BINARY);
        fcache_merge_content_result_free(&res);

        opts.binary_scan_limit = FCACHE_MERGE_GIT_BINARY_SCAN;
        g_assert_cmpint(fcache_merge_content(&res, &b, &l, &r, &opts), ==, 0);
        g_assert_cmpint(res.outcome, ==, FCACHE_MERGE_CONTENT_MERGED);
        g_assert_false(res.binary);
        g_assert_cmpuint(res.merged_size, ==, base->len);
        g_assert_true(memcmp(res.merged, "FIRST\n", 6) == 0);
        g_assert_true(memcmp(res.merged + res.merged_size - 6, "\nLAST\n", 6) == 0);
        fcache_merge_content_result_free(&res);
}

static void test_max_text_size(void)
{
        fcache_merge_content_options opts = FCACHE_MERGE_CONTENT_OPTIONS_INIT;
        fcache_merge_content_result res;

        opts.max_text_size = 4;
        g_assert_cmpint(merge3(&res, BASE5, "one\n2\n3\n4\n5\n", "1\n2\n3\n4\nfive\n", &opts), ==, 0);
        g_assert_cmpint(res.conflict, ==, FCACHE_CONFLICT_BINARY);
        g_assert_true(res.binary);
        fcache_merge_content_result_free(&res);
}

static void test_empty_files(void)
{
        fcache_merge_buf nothing = FCACHE_MERGE_BUF(NULL, 0), text = FCACHE_MERGE_BUF("x\n", 2);
        fcache_merge_content_result res;

        /* NULL data with size 0 is an empty file. */
        g_assert_cmpint(fcache_merge_content(&res, &nothing, &nothing, &nothing, NULL), ==, 0);
        assert_clean(&res, FCACHE_MERGE_CONTENT_UNCHANGED, "", 0);
        fcache_merge_content_result_free(&res);

        g_assert_cmpint(fcache_merge_content(&res, &nothing, &text, &nothing, NULL), ==, 0);
        ASSERT_CLEAN(&res, TAKE_LOCAL, "x\n");
        fcache_merge_content_result_free(&res);

        /* Emptied locally, untouched on the server: the emptying wins. */
        g_assert_cmpint(merge3(&res, BASE5, "", BASE5, NULL), ==, 0);
        ASSERT_CLEAN(&res, TAKE_LOCAL, "");
        fcache_merge_content_result_free(&res);

        /* Both filled an empty file differently. */
        g_assert_cmpint(merge3(&res, "", "x\n", "y\n", NULL), ==, 0);
        assert_conflict(&res, FCACHE_CONFLICT_CONTENT, "", "x\n", "y\n");
        g_assert_cmpstr(res.rendering, ==, "<<<<<<< local\nx\n||||||| base\n=======\ny\n>>>>>>> remote\n");
        g_assert_nonnull(res.base);
        g_assert_cmpuint(res.base_size, ==, 0);
        fcache_merge_content_result_free(&res);

        /* Emptied locally, edited on the server. */
        g_assert_cmpint(merge3(&res, "a\nb\n", "", "a\nB\n", NULL), ==, 0);
        assert_conflict(&res, FCACHE_CONFLICT_CONTENT, "a\nb\n", "", "a\nB\n");
        g_assert_cmpstr(res.rendering, ==, "<<<<<<< local\n||||||| base\na\nb\n=======\na\nB\n>>>>>>> remote\n");
        fcache_merge_content_result_free(&res);
}

static void test_crlf(void)
{
        const char *base = "1\r\n2\r\n3\r\n4\r\n5\r\n";
        fcache_merge_content_options opts = FCACHE_MERGE_CONTENT_OPTIONS_INIT;
        fcache_merge_content_result res;

        /* Line endings survive a clean merge. */
        g_assert_cmpint(merge3(&res, base, "one\r\n2\r\n3\r\n4\r\n5\r\n", "1\r\n2\r\n3\r\n4\r\nfive\r\n", NULL), ==, 0);
        ASSERT_CLEAN(&res, MERGED, "one\r\n2\r\n3\r\n4\r\nfive\r\n");
        fcache_merge_content_result_free(&res);

        /* Markers follow the file's line endings. */
        g_assert_cmpint(merge3(&res, "a\r\nb\r\nc\r\n", "a\r\nL\r\nc\r\n", "a\r\nR\r\nc\r\n", NULL), ==, 0);
        g_assert_cmpint(res.conflict, ==, FCACHE_CONFLICT_CONTENT);
        g_assert_cmpstr(res.rendering, ==,
                        "a\r\n<<<<<<< local\r\nL\r\n||||||| base\r\nb\r\n=======\r\nR\r\n>>>>>>> remote\r\nc\r\n");
        g_assert_cmpuint(fcache_merge_count_markers(res.rendering, res.rendering_size, 0), ==, 4);
        fcache_merge_content_result_free(&res);

        /* Converting every line ending is a change of every line: it conflicts with any edit. */
        g_assert_cmpint(merge3(&res, base, "1\n2\n3\n4\n5\n", "1\r\n2\r\n3\r\n4\r\nfive\r\n", NULL), ==, 0);
        assert_conflict(&res, FCACHE_CONFLICT_CONTENT, base, "1\n2\n3\n4\n5\n", "1\r\n2\r\n3\r\n4\r\nfive\r\n");
        fcache_merge_content_result_free(&res);

        /* ...unless end-of-line whitespace is ignored, which drops the conversion (hence off by default). */
        opts.flags = FCACHE_MERGE_CONTENT_IGNORE_WHITESPACE_EOL;
        g_assert_cmpint(merge3(&res, base, "1\n2\n3\n4\n5\n", "1\r\n2\r\n3\r\n4\r\nfive\r\n", &opts), ==, 0);
        ASSERT_CLEAN(&res, MERGED, "1\r\n2\r\n3\r\n4\r\nfive\r\n");
        fcache_merge_content_result_free(&res);
}

static void test_diff_flags(void)
{
        static const unsigned flags[] = { FCACHE_MERGE_CONTENT_IGNORE_WHITESPACE,
                                          FCACHE_MERGE_CONTENT_IGNORE_WHITESPACE_CHANGE };
        fcache_merge_content_options opts = FCACHE_MERGE_CONTENT_OPTIONS_INIT;
        fcache_merge_content_result res;
        const char *base = "x\na b\ny\n", *local = "x\na  b\ny\n", *remote = "x\nA B\ny\n";

        /* A whitespace-only edit against a real one: a conflict by default... */
        g_assert_cmpint(merge3(&res, base, local, remote, NULL), ==, 0);
        g_assert_cmpint(res.conflict, ==, FCACHE_CONFLICT_CONTENT);
        fcache_merge_content_result_free(&res);

        /* ...and the real edit wins when whitespace is ignored. */
        for (size_t i = 0; i < G_N_ELEMENTS(flags); i++) {
                opts.flags = flags[i];
                g_assert_cmpint(merge3(&res, base, local, remote, &opts), ==, 0);
                ASSERT_CLEAN(&res, MERGED, "x\nA B\ny\n");
                fcache_merge_content_result_free(&res);
        }

        /* Other diff algorithms merge the same non-overlapping edits the same way. */
        opts.flags = FCACHE_MERGE_CONTENT_PATIENCE;
        g_assert_cmpint(merge3(&res, BASE5, "one\n2\n3\n4\n5\n", "1\n2\n3\n4\nfive\n", &opts), ==, 0);
        ASSERT_CLEAN(&res, MERGED, "one\n2\n3\n4\nfive\n");
        fcache_merge_content_result_free(&res);
        opts.flags = FCACHE_MERGE_CONTENT_MINIMAL;
        g_assert_cmpint(merge3(&res, BASE5, "one\n2\n3\n4\n5\n", "1\n2\n3\n4\nfive\n", &opts), ==, 0);
        ASSERT_CLEAN(&res, MERGED, "one\n2\n3\n4\nfive\n");
        fcache_merge_content_result_free(&res);
}

static void test_no_trailing_newline(void)
{
        fcache_merge_content_result res;

        g_assert_cmpint(merge3(&res, "a\nb\nc", "A\nb\nc", "a\nb\nC", NULL), ==, 0);
        ASSERT_CLEAN(&res, MERGED, "A\nb\nC");
        fcache_merge_content_result_free(&res);

        /* Adding the final newline is a change of the last line. */
        g_assert_cmpint(merge3(&res, "a\nb\nc", "a\nb\nc\n", "A\nb\nc", NULL), ==, 0);
        ASSERT_CLEAN(&res, MERGED, "A\nb\nc\n");
        fcache_merge_content_result_free(&res);

        /* Both appended to an unterminated last line: the rendering still has whole marker lines. */
        g_assert_cmpint(merge3(&res, "a\nb\nc", "a\nb\nc\nd", "a\nb\nc\ne", NULL), ==, 0);
        assert_conflict(&res, FCACHE_CONFLICT_CONTENT, "a\nb\nc", "a\nb\nc\nd", "a\nb\nc\ne");
        g_assert_cmpstr(res.rendering, ==,
                        "a\nb\n<<<<<<< local\nc\nd\n||||||| base\nc\n=======\nc\ne\n>>>>>>> remote\n");
        g_assert_cmpuint(fcache_merge_count_markers(res.rendering, res.rendering_size, 0), ==, 4);
        fcache_merge_content_result_free(&res);
}

static void test_no_base(void)
{
        fcache_merge_content_result res;

        /* Created on both sides: nothing in common to merge against, so everything differs. */
        g_assert_cmpint(merge3(&res, NULL, "a\nb\n", "a\nc\n", NULL), ==, 0);
        assert_conflict(&res, FCACHE_CONFLICT_CONTENT, NULL, "a\nb\n", "a\nc\n");
        g_assert_cmpstr(res.rendering, ==, "<<<<<<< local\na\nb\n||||||| base\n=======\na\nc\n>>>>>>> remote\n");
        fcache_merge_content_result_free(&res);
}

/* Many lines, edits interleaved but never adjacent: the merge has every edit. */
static void test_many_hunks(void)
{
        g_autoptr(GString) base = g_string_new(NULL), local = g_string_new(NULL), remote = g_string_new(NULL),
                           want = g_string_new(NULL);
        fcache_merge_content_result res;
        fcache_merge_buf b, l, r;

        for (int i = 0; i < 1000; i++) {
                g_string_append_printf(base, "line %d\n", i);
                g_string_append_printf(local, i % 10 == 3 ? "local %d\n" : "line %d\n", i);
                g_string_append_printf(remote, i % 10 == 7 ? "remote %d\n" : "line %d\n", i);
                g_string_append_printf(want, i % 10 == 3 ? "local %d\n" : i % 10 == 7 ? "remote %d\n" : "line %d\n",
                                       i);
        }
        b = FCACHE_MERGE_BUF(base->str, base->len);
        l = FCACHE_MERGE_BUF(local->str, local->len);
        r = FCACHE_MERGE_BUF(remote->str, remote->len);
        g_assert_cmpint(fcache_merge_content(&res, &b, &l, &r, NULL), ==, 0);
        assert_clean(&res, FCACHE_MERGE_CONTENT_MERGED, want->str, want->len);
        fcache_merge_content_result_free(&res);
}

static void test_invalid(void)
{
        fcache_merge_content_options bad_version = { 42 }, bad_style = FCACHE_MERGE_CONTENT_OPTIONS_INIT;
        fcache_merge_buf ok = FCACHE_MERGE_BUF("x", 1), bad = FCACHE_MERGE_BUF(NULL, 3);
        fcache_merge_content_result res, sentinel;

        bad_style.style = _FCACHE_MERGE_STYLE_MAX;
        memset(&sentinel, 0x5a, sizeof(sentinel));
        res = sentinel;

        g_assert_cmpint(fcache_merge_content(NULL, &ok, &ok, &ok, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_content(&res, &ok, NULL, &ok, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_content(&res, &ok, &ok, NULL, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_content(&res, &bad, &ok, &ok, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_content(&res, &ok, &bad, &ok, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_content(&res, &ok, &ok, &ok, &bad_version), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_content(&res, &ok, &ok, &ok, &bad_style), ==, -EINVAL);
        g_assert_cmpmem(&res, sizeof(res), &sentinel, sizeof(sentinel));

        fcache_merge_content_result_free(NULL);
}

static void test_is_binary(void)
{
        g_assert_false(fcache_merge_is_binary(NULL, 0, 0));
        g_assert_false(fcache_merge_is_binary("", 0, 0));
        g_assert_false(fcache_merge_is_binary("plain text\n\t\r\n", 14, 0));
        g_assert_false(fcache_merge_is_binary("caf\xc3\xa9 \xff\xfe", 8, 0));
        g_assert_true(fcache_merge_is_binary("a\0b", 3, 0));
        g_assert_true(fcache_merge_is_binary("\0", 1, 1));
        g_assert_false(fcache_merge_is_binary("ab\0", 3, 2));
}

static void test_count_markers(void)
{
        static const char text[] =
                "<<<<<<< local\n"   /* yes */
                "<<<<<<<\n"         /* yes: bare */
                "<<<<<<<< local\n"  /* no: eight */
                "<<<<<<<local\n"    /* no: no space */
                " <<<<<<< local\n"  /* no: not at line start */
                "=======\n"         /* yes */
                "======= x\n"       /* no: '=' stands alone */
                "||||||| base\r\n"  /* yes: CRLF */
                "=======\r\n"       /* yes */
                "just text\n"
                ">>>>>>> remote";   /* yes: at end without newline */

        g_assert_cmpuint(fcache_merge_count_markers(text, sizeof(text) - 1, 0), ==, 6);
        g_assert_cmpuint(fcache_merge_count_markers(text, sizeof(text) - 1, 8), ==, 1);
        g_assert_cmpuint(fcache_merge_count_markers("no markers\n", 11, 0), ==, 0);
        g_assert_cmpuint(fcache_merge_count_markers(NULL, 0, 0), ==, 0);
        g_assert_cmpuint(fcache_merge_count_markers("<<<", 3, 0), ==, 0);
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/fcache/merge/content/clean", test_clean_merge);
        g_test_add_func("/fcache/merge/content/one-side", test_one_side);
        g_test_add_func("/fcache/merge/content/identical", test_identical_changes);
        g_test_add_func("/fcache/merge/content/conflict-diff3", test_conflict_diff3);
        g_test_add_func("/fcache/merge/content/conflict-styles", test_conflict_styles);
        g_test_add_func("/fcache/merge/content/binary", test_binary);
        g_test_add_func("/fcache/merge/content/binary-scan-limit", test_binary_scan_limit);
        g_test_add_func("/fcache/merge/content/max-text-size", test_max_text_size);
        g_test_add_func("/fcache/merge/content/empty", test_empty_files);
        g_test_add_func("/fcache/merge/content/crlf", test_crlf);
        g_test_add_func("/fcache/merge/content/no-trailing-newline", test_no_trailing_newline);
        g_test_add_func("/fcache/merge/content/diff-flags", test_diff_flags);
        g_test_add_func("/fcache/merge/content/no-base", test_no_base);
        g_test_add_func("/fcache/merge/content/many-hunks", test_many_hunks);
        g_test_add_func("/fcache/merge/content/invalid", test_invalid);
        g_test_add_func("/fcache/merge/content/is-binary", test_is_binary);
        g_test_add_func("/fcache/merge/content/count-markers", test_count_markers);
        return g_test_run();
}
