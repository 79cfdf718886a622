/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-api.c: fcachectl() as a program calls it: the result-size protocol,
 * target resolution on every kind of object, errors and their texts.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fcachectl.h"

static char *dir;

static char *path_in(const char *name)
{
        return g_build_filename(dir, name, NULL);
}

static void write_file(const char *name, size_t size)
{
        g_autofree char *p = path_in(name);
        g_autofree char *data = g_malloc0(size);
        g_assert_true(g_file_set_contents(p, data, (gssize)size, NULL));
}

static char *value_of(const char *result, const char *key)
{
        g_autofree char *needle = g_strdup_printf("\n%s=", key);
        g_autofree char *text = g_strdup_printf("\n%s", result);
        const char *p = strstr(text, needle);

        if (!p)
                return NULL;
        p += strlen(needle);
        return g_strndup(p, strcspn(p, "\n"));
}

static void test_result_protocol(void)
{
        g_autofree char *file = path_in("data");
        char buf[8192], small[8];
        size_t len = 0, need;

        write_file("data", 20000);
        /* NULL result with a length: only the size needed. */
        g_assert_cmpint(fcachectl(AT_FDCWD, file, 0, "query cached", NULL, &len), ==, 0);
        g_assert_cmpuint(len, >, 20);
        need = len;
        /* NULL for both: the command runs, the result is discarded. */
        g_assert_cmpint(fcachectl(AT_FDCWD, file, 0, "query cached", NULL, NULL), ==, 0);
        /* Too small: ERANGE and the size needed, the buffer left alone past its size. */
        len = sizeof(small);
        memset(small, 'x', sizeof(small));
        errno = 0;
        g_assert_cmpint(fcachectl(AT_FDCWD, file, 0, "query cached", small, &len), ==, -1);
        g_assert_cmpint(errno, ==, ERANGE);
        g_assert_cmpuint(len, ==, need);
        g_assert_nonnull(strstr(fcachectl_error(), "too small"));
        /* Exactly the size: fits, NUL-terminated, every line key=value. */
        len = need;
        g_assert_cmpint(fcachectl(AT_FDCWD, file, 0, "query cached", buf, &len), ==, 0);
        g_assert_cmpuint(len, ==, strlen(buf) + 1);
        g_auto(GStrv) lines = g_strsplit(buf, "\n", -1);
        for (int i = 0; lines[i] && lines[i][0]; i++)
                g_assert_true(g_regex_match_simple("^[a-z0-9_]+=", lines[i], 0, 0));
        g_autofree char *backend = value_of(buf, "backend");
        g_autofree char *files = value_of(buf, "files");
        g_autofree char *pages = value_of(buf, "pages_total");
        g_assert_cmpstr(backend, ==, "user");
        g_assert_cmpstr(files, ==, "1");
        g_assert_cmpint(atoi(pages), ==, (20000 + 4095) / 4096);
}

static void expect_fail(int dirfd, const char *path, unsigned flags, const char *cmd, int err,
                        const char *needle)
{
        char buf[4096];
        size_t len = sizeof(buf);

        errno = 0;
        g_assert_cmpint(fcachectl(dirfd, path, flags, cmd, buf, &len), ==, -1);
        g_assert_cmpint(errno, ==, err);
        if (!strstr(fcachectl_error(), needle))
                g_error("%s on %s: '%s' lacks '%s'", cmd, path, fcachectl_error(), needle);
}

static char *run_ok(int dirfd, const char *path, unsigned flags, const char *cmd)
{
        char buf[8192];
        size_t len = sizeof(buf);

        if (fcachectl(dirfd, path, flags, cmd, buf, &len) < 0)
                g_error("%s on %s: %s", cmd, path, fcachectl_error());
        return g_strdup(buf);
}

static void test_symlinks(void)
{
        g_autofree char *link = path_in("link"), *dangling = path_in("dangling");
        write_file("target", 5000);
        g_assert_cmpint(symlink("target", link), ==, 0);
        g_assert_cmpint(symlink("does-not-exist", dangling), ==, 0);

        /* Followed: the target's data; not followed: the link itself. */
        g_autofree char *followed = run_ok(AT_FDCWD, link, 0, "query cached");
        g_autofree char *type1 = value_of(followed, "type");
        g_assert_cmpstr(type1, ==, "regular");
        g_autofree char *itself = run_ok(AT_FDCWD, link, AT_SYMLINK_NOFOLLOW, "query cached");
        g_autofree char *type2 = value_of(itself, "type");
        g_autofree char *measured = value_of(itself, "measured");
        g_assert_cmpstr(type2, ==, "symlink");
        g_assert_cmpstr(measured, ==, "no");

        expect_fail(AT_FDCWD, dangling, 0, "query cached", ENOENT, "dangling symbolic link");
        g_autofree char *d = run_ok(AT_FDCWD, dangling, AT_SYMLINK_NOFOLLOW, "query cached");
        g_assert_nonnull(strstr(d, "type=symlink"));
        expect_fail(AT_FDCWD, dangling, AT_SYMLINK_NOFOLLOW, "prefetch", EINVAL,
                    "is a symlink; prefetch applies to regular files and directories");
        expect_fail(AT_FDCWD, link, AT_SYMLINK_NOFOLLOW, "flush", EINVAL, "is a symlink");
}

static void test_special_files(void)
{
        g_autofree char *fifo = path_in("fifo"), *sock = path_in("sock");
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int s;

        g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
        /* A fifo is never opened (that would block): queries answer, data commands refuse. */
        g_autofree char *q = run_ok(AT_FDCWD, fifo, 0, "query cached");
        g_assert_nonnull(strstr(q, "type=fifo\n"));
        expect_fail(AT_FDCWD, fifo, 0, "prefetch", EINVAL, "is a fifo");
        expect_fail(AT_FDCWD, fifo, 0, "flush", EINVAL, "is a fifo");

        s = socket(AF_UNIX, SOCK_STREAM, 0);
        g_assert_cmpint(s, >=, 0);
        g_strlcpy(sa.sun_path, sock, sizeof(sa.sun_path));
        g_assert_cmpint(bind(s, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
        g_autofree char *qs = run_ok(AT_FDCWD, sock, 0, "query cached");
        g_assert_nonnull(strstr(qs, "type=socket\n"));
        close(s);

        /* A device node: a driver must never be opened by a query. */
        g_autofree char *qd = run_ok(AT_FDCWD, "/dev/null", 0, "query cached");
        g_assert_nonnull(strstr(qd, "type=char-device\n"));
        expect_fail(AT_FDCWD, "/dev/null", 0, "prefetch", EINVAL, "is a char-device");
        g_autofree char *cb = run_ok(AT_FDCWD, "/dev/null", 0, "flush callbacks");
        g_assert_nonnull(strstr(cb, "attributes=not-revalidated\n"));
}

static void test_missing_and_notdir(void)
{
        g_autofree char *missing = path_in("missing"), *file = path_in("plain");
        g_autofree char *under = g_build_filename(file, "child", NULL);

        write_file("plain", 10);
        expect_fail(AT_FDCWD, missing, 0, "query cached", ENOENT, "no such file or directory");
        expect_fail(AT_FDCWD, under, 0, "query cached", ENOTDIR, "is not a directory");
        expect_fail(AT_FDCWD, "", 0, "query cached", ENOENT, "AT_EMPTY_PATH");
        expect_fail(AT_FDCWD, NULL, 0, "query cached", EFAULT, "no path");
        expect_fail(AT_FDCWD, file, 0x100000, "query cached", EINVAL, "unsupported flags");
        expect_fail(12345, "relative", 0, "query cached", EBADF, "bad directory descriptor");
        expect_fail(AT_FDCWD, file, 0, "query cachd", EINVAL, "unknown word 'cachd'");
        expect_fail(AT_FDCWD, file, 0, "pin", EOPNOTSUPP, "needs the fcache daemon");
}

static void test_empty_path_and_dirfd(void)
{
        int dfd = open(dir, O_PATH | O_DIRECTORY);
        int ffd;

        write_file("viafd", 9000);
        g_assert_cmpint(dfd, >=, 0);
        /* Relative to a directory descriptor. */
        g_autofree char *rel = run_ok(dfd, "viafd", 0, "query cached");
        g_assert_nonnull(strstr(rel, "type=regular\n"));
        /* AT_EMPTY_PATH on a file descriptor opened O_PATH. */
        ffd = openat(dfd, "viafd", O_PATH);
        g_autofree char *empty = run_ok(ffd, "", AT_EMPTY_PATH, "query cached");
        g_assert_nonnull(strstr(empty, "pages_total=3\n"));
        /* AT_EMPTY_PATH on a directory descriptor acts on the directory. */
        g_autofree char *d = run_ok(dfd, "", AT_EMPTY_PATH, "query cached");
        g_assert_nonnull(strstr(d, "type=directory\n"));
        close(ffd);
        close(dfd);
}

/* The options struct: error text copied out, unknown sizes refused. */
static void test_options(void)
{
        char err[64];
        struct fcachectl_options o = { .size = sizeof(o), .error = err, .error_len = sizeof(err) };
        struct fcachectl_options bad = { .size = sizeof(o) + 64 };

        g_assert_cmpint(fcachectl_ex(AT_FDCWD, "/", 0, "nonsense", NULL, NULL, &o), ==, -1);
        g_assert_cmpint(errno, ==, EINVAL);
        g_assert_true(g_str_has_prefix(err, "unknown command 'nonsense'"));
        g_assert_cmpuint(strlen(err), <, sizeof(err));
        g_assert_cmpint(fcachectl_ex(AT_FDCWD, "/", 0, "query cache", NULL, NULL, &bad), ==, -1);
        g_assert_cmpint(errno, ==, EINVAL);
        /* The error text is reset by a successful call. */
        g_assert_cmpint(fcachectl(AT_FDCWD, "/", 0, "query cache", NULL, NULL), ==, 0);
        g_assert_cmpstr(fcachectl_error(), ==, "");
}

/* A tree deeper than PATH_MAX: reached by descriptors, never by gluing paths. */
static void test_deep_tree(void)
{
        int fd = open(dir, O_PATH | O_DIRECTORY), depth = 1500;

        g_assert_cmpint(mkdirat(fd, "deep", 0700), ==, 0);
        int top = openat(fd, "deep", O_PATH | O_DIRECTORY);
        int cur = dup(top);
        for (int i = 0; i < depth; i++) {
                int next;
                g_assert_cmpint(mkdirat(cur, "d", 0700), ==, 0);
                next = openat(cur, "d", O_PATH | O_DIRECTORY);
                g_assert_cmpint(next, >=, 0);
                close(cur);
                cur = next;
        }
        int f = openat(cur, "leaf", O_WRONLY | O_CREAT, 0600);
        g_assert_cmpint(write(f, "x", 1), ==, 1);
        close(f);
        close(cur);
        g_autofree char *r = run_ok(top, "", AT_EMPTY_PATH, "query cached recursive");
        g_assert_nonnull(strstr(r, "\nfiles=1\n"));
        g_autofree char *dirs = value_of(r, "dirs");
        g_assert_cmpint(atoi(dirs), ==, depth + 1);
        close(top);
        close(fd);
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
        dir = g_dir_make_tmp("fcache-test-XXXXXX", NULL);
        g_assert_nonnull(dir);
        g_test_add_func("/fcache/api/result-protocol", test_result_protocol);
        g_test_add_func("/fcache/api/symlinks", test_symlinks);
        g_test_add_func("/fcache/api/special-files", test_special_files);
        g_test_add_func("/fcache/api/missing-and-notdir", test_missing_and_notdir);
        g_test_add_func("/fcache/api/empty-path-and-dirfd", test_empty_path_and_dirfd);
        g_test_add_func("/fcache/api/options", test_options);
        g_test_add_func("/fcache/api/deep-tree", test_deep_tree);
        int r = g_test_run();
        g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", dir);
        if (system(cmd) != 0)
                r = 1;
        g_free(dir);
        return r;
}
