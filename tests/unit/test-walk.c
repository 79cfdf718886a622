/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-walk.c: fc_walk_tally(), the tree walk with per-worker tallies that
 * both backends use: every file counted once whatever the number of
 * workers, top_only, what was done merged also when the walk fails, and
 * init failures undone.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "walk.h"

struct count {
        int initialised;
        guint64 files, bytes;
};

struct arg {
        int fail_init_at;        /* init of this tally fails (-1: none) */
        int inits, merges;
        int fail_file;           /* the file function fails with -EIO on "bad" */
};

static int count_file(void *ctx, int dirfd, const char *name, uint64_t *bytes)
{
        struct count *c = ctx;
        struct stat st;

        if (fstatat(dirfd, name, &st, 0) < 0)
                return -errno;
        if (!strcmp(name, "bad"))
                return -EIO;
        c->files++;
        c->bytes += (guint64)st.st_size;
        *bytes = (uint64_t)st.st_size;
        return 0;
}

static int count_init(void *tally, void *arg)
{
        struct arg *a = arg;
        struct count *c = tally;

        g_assert_cmpint(c->initialised, ==, 0); /* zeroed */
        if (a->inits++ == a->fail_init_at)
                return -EMFILE;
        c->initialised = 1;
        return 0;
}

static void count_merge(void *sum, void *tally, void *arg)
{
        struct count *s = sum, *c = tally;
        struct arg *a = arg;

        g_assert_cmpint(c->initialised, ==, 1);
        a->merges++;
        s->files += c->files;
        s->bytes += c->bytes;
}

static const struct fc_walk_tally_ops ops = {
        .tally_size = sizeof(struct count),
        .file = count_file, .init = count_init, .merge = count_merge,
};

static char *make_tree(void)
{
        g_autoptr(GError) err = NULL;
        char *dir = g_dir_make_tmp("fcache-walk-XXXXXX", &err);

        g_assert_no_error(err);
        /* 3 files at the top, 3 x 40 below: more than one batch per directory */
        for (int d = 0; d < 3; d++) {
                g_autofree char *sub = g_strdup_printf("%s/d%d", dir, d);
                g_assert_cmpint(g_mkdir(sub, 0755), ==, 0);
                for (int i = 0; i < 40; i++) {
                        g_autofree char *f = g_strdup_printf("%s/f%02d", sub, i);
                        g_assert_true(g_file_set_contents(f, "12345", 5, NULL));
                }
                g_autofree char *top = g_strdup_printf("%s/t%d", dir, d);
                g_assert_true(g_file_set_contents(top, "1234567890", 10, NULL));
        }
        return dir;
}

static void rm_tree(const char *dir)
{
        g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", dir);

        g_assert_cmpint(system(cmd), ==, 0);
}

static int walk(const char *dir, unsigned workers, int top_only, struct arg *a, struct count *sum,
                struct fc_walk_stats *st, struct fc_error *e)
{
        struct fc_walk_tally_params p = {
                .ops = &ops, .arg = a, .workers = workers, .top_only = top_only,
                .display = dir,
        };
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r;

        g_assert_cmpint(fd, >=, 0);
        r = fc_walk_tally(fd, &p, sum, st, e);
        close(fd);
        return r;
}

static void test_counts(void)
{
        g_autofree char *dir = make_tree();
        static const unsigned workers[] = { 0, 1, 2, 5, 200 };

        for (size_t i = 0; i < G_N_ELEMENTS(workers); i++) {
                struct arg a = { .fail_init_at = -1 };
                struct count sum = { 0 };
                struct fc_walk_stats st;
                struct fc_error e = { 0 };
                unsigned n = workers[i] < 1 ? 1 : workers[i] > FC_WALK_WORKERS_MAX
                                                   ? FC_WALK_WORKERS_MAX : workers[i];

                g_assert_cmpint(walk(dir, workers[i], 0, &a, &sum, &st, &e), ==, 0);
                g_assert_cmpuint(sum.files, ==, 123);
                g_assert_cmpuint(sum.bytes, ==, 3 * 10 + 120 * 5);
                g_assert_cmpuint(st.files, ==, 123);
                g_assert_cmpuint(st.dirs, ==, 4);
                g_assert_cmpint(a.inits, ==, (int)n);
                g_assert_cmpint(a.merges, ==, (int)n);

                memset(&sum, 0, sizeof(sum));
                a = (struct arg){ .fail_init_at = -1 };
                g_assert_cmpint(walk(dir, workers[i], 1, &a, &sum, &st, &e), ==, 0);
                g_assert_cmpuint(sum.files, ==, 3);
                g_assert_cmpuint(st.dirs, ==, 1);
        }
        rm_tree(dir);
}

/* The sum starts where the caller left it: flush all adds mount after mount. */
static void test_sum_accumulates(void)
{
        g_autofree char *dir = make_tree();
        struct arg a = { .fail_init_at = -1 };
        struct count sum = { .files = 1000 };
        struct fc_walk_stats st;
        struct fc_error e = { 0 };

        g_assert_cmpint(walk(dir, 3, 1, &a, &sum, &st, &e), ==, 0);
        g_assert_cmpuint(sum.files, ==, 1003);
        rm_tree(dir);
}

static void test_init_fails(void)
{
        g_autofree char *dir = make_tree();
        struct arg a = { .fail_init_at = 2 };
        struct count sum = { 0 };
        struct fc_walk_stats st;
        struct fc_error e = { 0 };

        g_assert_cmpint(walk(dir, 4, 0, &a, &sum, &st, &e), ==, -EMFILE);
        g_assert_cmpint(e.code, ==, EMFILE);
        g_assert_nonnull(strstr(e.text, "cannot start the walk"));
        g_assert_nonnull(strstr(e.text, dir));
        g_assert_cmpint(a.inits, ==, 3);   /* stopped at the failing one */
        g_assert_cmpint(a.merges, ==, 2);  /* only the initialised ones are released */
        g_assert_cmpuint(sum.files, ==, 0);
        rm_tree(dir);
}

/* A file that fails is an error of the walk, not of the whole command; the rest is counted. */
static void test_file_errors(void)
{
        g_autofree char *dir = make_tree();
        g_autofree char *bad = g_strdup_printf("%s/d1/bad", dir);
        struct arg a = { .fail_init_at = -1 };
        struct count sum = { 0 };
        struct fc_walk_stats st;
        struct fc_error e = { 0 };
        struct fc_result res;

        g_assert_true(g_file_set_contents(bad, "x", 1, NULL));
        g_assert_cmpint(walk(dir, 2, 0, &a, &sum, &st, &e), ==, 0);
        g_assert_cmpuint(sum.files, ==, 123);
        g_assert_cmpuint(st.errors, ==, 1);
        g_assert_cmpstr(st.first_error, ==, "bad: Input/output error");

        fc_result_init(&res);
        fc_walk_stats_add_result(&res, &st, 2, "not this one");
        g_assert_nonnull(strstr(res.buf, "errors=3\n"));
        g_assert_nonnull(strstr(res.buf, "first_error=bad: Input/output error\n"));
        fc_result_free(&res);
        rm_tree(dir);
}

/* Cancelled before it starts: ECANCELED with the target's name, tallies still released. */
static void test_cancel(void)
{
        g_autofree char *dir = make_tree();
        volatile int cancel = 1;
        struct fcachectl_options o = { .size = sizeof(o), .cancel = &cancel };
        struct arg a = { .fail_init_at = -1 };
        struct count sum = { 0 };
        struct fc_walk_stats st;
        struct fc_error e = { 0 };
        struct fc_walk_tally_params p = {
                .ops = &ops, .arg = &a, .workers = 3, .opts = &o, .display = "the-tree",
        };
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        g_assert_cmpint(fc_walk_tally(fd, &p, &sum, &st, &e), ==, -ECANCELED);
        close(fd);
        g_assert_cmpstr(e.text, ==, "the-tree: cancelled");
        g_assert_cmpint(a.merges, ==, 3);
        rm_tree(dir);
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/fcache/walk/counts", test_counts);
        g_test_add_func("/fcache/walk/sum-accumulates", test_sum_accumulates);
        g_test_add_func("/fcache/walk/init-fails", test_init_fails);
        g_test_add_func("/fcache/walk/file-errors", test_file_errors);
        g_test_add_func("/fcache/walk/cancel", test_cancel);
        return g_test_run();
}
