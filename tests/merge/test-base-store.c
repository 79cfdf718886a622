/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-base-store.c: the content-addressed base store (fcache_merge_store_*)
 * in a temporary directory: round trips, ids as git computes them, the
 * on-disk layout and permissions, persistence, streaming from a file
 * descriptor, ids of files another thread shortens while they are read,
 * corruption detection, and keep-set garbage collection (including that
 * libgit2's cache never resurrects a collected blob).
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <git2.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "fcache-merge.h"

/* `printf 'hello\n' | git hash-object --stdin` and the empty blob. */
#define HELLO_ID "ce013625030ba8dba906f756967f9e9ca394464a"
#define EMPTY_ID "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"

typedef struct {
        char *tmp;
        char *path;
        fcache_merge_store *store;
} fixture;

static fcache_merge_store *open_store(const char *path)
{
        fcache_merge_store_options opts = FCACHE_MERGE_STORE_OPTIONS_INIT;
        fcache_merge_store *s = NULL;

        opts.flags = FCACHE_MERGE_STORE_NO_FSYNC;
        g_assert_cmpint(fcache_merge_store_open(&s, path, &opts), ==, 0);
        g_assert_nonnull(s);
        return s;
}

static void fixture_set_up(fixture *f, gconstpointer data)
{
        g_autoptr(GError) error = NULL;

        f->tmp = g_dir_make_tmp("fcache-merge-XXXXXX", &error);
        g_assert_no_error(error);
        f->path = g_build_filename(f->tmp, "bases", NULL);
        f->store = open_store(f->path);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        return remove(path);
}

static void fixture_tear_down(fixture *f, gconstpointer data)
{
        fcache_merge_store_free(f->store);
        g_assert_cmpint(nftw(f->tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS), ==, 0);
        g_free(f->path);
        g_free(f->tmp);
}

static char *object_path(const fixture *f, const char *id)
{
        return g_strdup_printf("%s/%.2s/%s", f->path, id, id + 2);
}

static void put(const fixture *f, char id[FCACHE_MERGE_ID_SIZE], const char *s)
{
        g_assert_cmpint(fcache_merge_store_put(id, f->store, s, strlen(s)), ==, 0);
        g_assert_true(fcache_merge_id_is_valid(id));
}

static void assert_get(const fixture *f, const char *id, const void *want, size_t want_size)
{
        void *data = NULL;
        size_t size = 0;

        g_assert_cmpint(fcache_merge_store_get(&data, &size, f->store, id), ==, 0);
        g_assert_cmpmem(data, size, want, want_size);
        g_assert_cmpint(((char *) data)[size], ==, '\0');
        g_free(data);
        g_assert_cmpint(fcache_merge_store_contains(f->store, id), ==, 1);
}

static void assert_gone(const fixture *f, const char *id)
{
        void *data = (void *) 0x1;
        size_t size = 77;

        g_assert_cmpint(fcache_merge_store_get(&data, &size, f->store, id), ==, -ENOENT);
        g_assert_true(data == (void *) 0x1);
        g_assert_cmpuint(size, ==, 77);
        g_assert_cmpint(fcache_merge_store_contains(f->store, id), ==, 0);
}

static void test_round_trip(fixture *f, gconstpointer data)
{
        static const char bin[] = "\0\1\2\xff binary \0 with NULs";
        char id[FCACHE_MERGE_ID_SIZE], id2[FCACHE_MERGE_ID_SIZE], hashed[FCACHE_MERGE_ID_SIZE];
        g_autofree char *file = NULL;
        g_autofree guint8 *big = NULL;
        struct stat st;

        put(f, id, "hello\n");
        g_assert_cmpstr(id, ==, HELLO_ID);
        assert_get(f, id, "hello\n", 6);

        /* The id is git's blob id, computable without a store. */
        g_assert_cmpint(fcache_merge_blob_id(hashed, "hello\n", 6), ==, 0);
        g_assert_cmpstr(hashed, ==, HELLO_ID);

        /* Stored once, however often it is put. */
        put(f, id2, "hello\n");
        g_assert_cmpstr(id2, ==, id);

        /* Loose object, private to the daemon. */
        file = object_path(f, id);
        g_assert_cmpint(stat(file, &st), ==, 0);
        g_assert_cmpuint(st.st_mode & 07777, ==, 0400);
        g_assert_cmpint(stat(f->path, &st), ==, 0);
        g_assert_cmpuint(st.st_mode & 07777, ==, 0700);

        g_assert_cmpint(fcache_merge_store_put(id, f->store, NULL, 0), ==, 0);
        g_assert_cmpstr(id, ==, EMPTY_ID);
        assert_get(f, id, "", 0);

        g_assert_cmpint(fcache_merge_store_put(id, f->store, bin, sizeof(bin) - 1), ==, 0);
        assert_get(f, id, bin, sizeof(bin) - 1);

        big = g_malloc(1 << 20);
        for (size_t i = 0; i < 1 << 20; i++)
                big[i] = (guint8) g_test_rand_int();
        g_assert_cmpint(fcache_merge_store_put(id, f->store, big, 1 << 20), ==, 0);
        g_assert_cmpint(fcache_merge_blob_id(hashed, big, 1 << 20), ==, 0);
        g_assert_cmpstr(id, ==, hashed);
        assert_get(f, id, big, 1 << 20);

        /* Upper-case ids name the same blob. */
        g_assert_cmpint(fcache_merge_store_contains(f->store, "CE013625030BA8DBA906F756967F9E9CA394464A"), ==, 1);
}

static void test_persistence(fixture *f, gconstpointer data)
{
        char id[FCACHE_MERGE_ID_SIZE];

        put(f, id, "survives a restart\n");
        fcache_merge_store_free(f->store);
        /* Opening an existing store does not wipe it. */
        f->store = open_store(f->path);
        assert_get(f, id, "survives a restart\n", 19);
}

/* The default, durable store (fsync on every put). */
static void test_durable(fixture *f, gconstpointer data)
{
        g_autofree char *path = g_build_filename(f->tmp, "durable", NULL);
        fcache_merge_store *s = NULL;
        char id[FCACHE_MERGE_ID_SIZE];
        void *p = NULL;
        size_t n = 0;

        g_assert_cmpint(fcache_merge_store_open(&s, path, NULL), ==, 0);
        g_assert_cmpint(fcache_merge_store_put(id, s, "hello\n", 6), ==, 0);
        g_assert_cmpstr(id, ==, HELLO_ID);
        g_assert_cmpint(fcache_merge_store_get(&p, &n, s, id), ==, 0);
        g_assert_cmpmem(p, n, "hello\n", 6);
        g_free(p);
        fcache_merge_store_free(s);
}

static void test_bad_ids(fixture *f, gconstpointer data)
{
        static const char *const bad[] = {
                "", "ce01", HELLO_ID "0", "ce013625030ba8dba906f756967f9e9ca394464", "ce013625030ba8dba906f756967f9e9ca394464g",
                "../../../../etc/passwd/aaaaaaaaaaaaaaaaaaaaaaaaaaa",
        };
        void *p = NULL;
        size_t n = 0;

        for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
                g_assert_false(fcache_merge_id_is_valid(bad[i]));
                g_assert_cmpint(fcache_merge_store_get(&p, &n, f->store, bad[i]), ==, -EINVAL);
                g_assert_cmpint(fcache_merge_store_contains(f->store, bad[i]), ==, -EINVAL);
        }
        g_assert_false(fcache_merge_id_is_valid(NULL));
        g_assert_null(p);
        g_assert_cmpint(fcache_merge_store_get(&p, &n, f->store, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_store_get(NULL, &n, f->store, HELLO_ID), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_store_put(NULL, f->store, "x", 1), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_store_put((char[FCACHE_MERGE_ID_SIZE]){ 0 }, f->store, NULL, 1), ==, -EINVAL);
        assert_gone(f, HELLO_ID);
}

static void test_open_errors(void)
{
        g_autoptr(GError) error = NULL;
        g_autofree char *tmp = g_dir_make_tmp("fcache-merge-XXXXXX", &error);
        g_autofree char *file = g_build_filename(tmp, "plain-file", NULL);
        g_autofree char *orphan = g_build_filename(tmp, "missing", "bases", NULL);
        fcache_merge_store_options bad = { 7, 0 };
        fcache_merge_store *s = (fcache_merge_store *) 0x1;

        g_assert_no_error(error);
        g_assert_true(g_file_set_contents(file, "x", 1, NULL));
        g_assert_cmpint(fcache_merge_store_open(&s, file, NULL), ==, -ENOTDIR);
        g_assert_cmpint(fcache_merge_store_open(&s, orphan, NULL), ==, -ENOENT);
        g_assert_cmpint(fcache_merge_store_open(&s, tmp, &bad), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_store_open(&s, "", NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_store_open(NULL, tmp, NULL), ==, -EINVAL);
        g_assert_true(s == (fcache_merge_store *) 0x1);
        fcache_merge_store_free(NULL);

        g_assert_cmpint(g_unlink(file), ==, 0);
        g_assert_cmpint(g_rmdir(tmp), ==, 0);
}

static void test_put_fd(fixture *f, gconstpointer data)
{
        g_autofree char *file = g_build_filename(f->tmp, "input", NULL);
        g_autoptr(GString) content = g_string_new(NULL);
        char id[FCACHE_MERGE_ID_SIZE], hashed[FCACHE_MERGE_ID_SIZE];
        int fd, pipefd[2];

        /* Larger than one read chunk, not a multiple of it. */
        for (int i = 0; i < 30000; i++)
                g_string_append_printf(content, "line %d\n", i);
        g_assert_true(g_file_set_contents(file, content->str, (gssize) content->len, NULL));

        fd = open(file, O_RDONLY | O_CLOEXEC);
        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(fcache_merge_store_put_fd(id, f->store, fd), ==, 0);
        g_assert_cmpint(fcache_merge_blob_id(hashed, content->str, content->len), ==, 0);
        g_assert_cmpstr(id, ==, hashed);
        assert_get(f, id, content->str, content->len);
        close(fd);

        g_assert_cmpint(pipe(pipefd), ==, 0);
        g_assert_cmpint(fcache_merge_store_put_fd(id, f->store, pipefd[0]), ==, -EINVAL);
        close(pipefd[0]);
        close(pipefd[1]);
        g_assert_cmpint(fcache_merge_store_put_fd(id, f->store, -1), ==, -EINVAL);
}

static void test_corruption(fixture *f, gconstpointer data)
{
        char id[FCACHE_MERGE_ID_SIZE];
        g_autofree char *file = NULL;
        g_autofree char *bytes = NULL;
        gsize len;
        void *p = NULL;
        size_t n = 0;

        put(f, id, "precious base version\n");
        file = object_path(f, id);
        g_assert_true(g_file_get_contents(file, &bytes, &len, NULL));
        g_assert_cmpuint(len, >, 4);
        /* Flip a byte inside the compressed data. */
        bytes[len - 3] ^= 0x55;
        g_assert_cmpint(chmod(file, 0600), ==, 0);
        g_assert_true(g_file_set_contents(file, bytes, (gssize) len, NULL));

        /* A fresh store, so that no cache hides the damage. */
        fcache_merge_store_free(f->store);
        f->store = open_store(f->path);
        g_assert_cmpint(fcache_merge_store_get(&p, &n, f->store, id), ==, -EIO);
        g_assert_null(p);
}

static void test_gc(fixture *f, gconstpointer data)
{
        char a[FCACHE_MERGE_ID_SIZE], b[FCACHE_MERGE_ID_SIZE], c[FCACHE_MERGE_ID_SIZE];
        g_autofree char *b_file = NULL;
        size_t removed = 99;

        /*
         * Let libgit2 cache blobs (off by default; a process may turn it on),
         * then read b into that cache: a collected blob must not come back from it.
         */
        g_assert_cmpint(git_libgit2_init(), >, 0);
        g_assert_cmpint(git_libgit2_opts(GIT_OPT_SET_CACHE_OBJECT_LIMIT, GIT_OBJECT_BLOB, (size_t) 1 << 20), ==, 0);

        put(f, a, "version a\n");
        put(f, b, "version b\n");
        put(f, c, "version c\n");
        assert_get(f, b, "version b\n", 10);

        {
                const char *keep[] = { a, c };

                g_assert_cmpint(fcache_merge_store_gc(&removed, f->store, keep, G_N_ELEMENTS(keep)), ==, 0);
        }
        g_assert_cmpuint(removed, ==, 1);
        assert_gone(f, b);
        b_file = object_path(f, b);
        g_assert_false(g_file_test(b_file, G_FILE_TEST_EXISTS));
        assert_get(f, a, "version a\n", 10);
        assert_get(f, c, "version c\n", 10);

        /* Nothing more to collect. */
        {
                const char *keep[] = { c, a, a };

                g_assert_cmpint(fcache_merge_store_gc(&removed, f->store, keep, G_N_ELEMENTS(keep)), ==, 0);
                g_assert_cmpuint(removed, ==, 0);
        }

        /* Putting a collected blob again stores it again. */
        put(f, b, "version b\n");
        g_assert_true(g_file_test(b_file, G_FILE_TEST_IS_REGULAR));
        assert_get(f, b, "version b\n", 10);

        /* An empty keep set collects everything, fan-out directories included. */
        g_assert_cmpint(fcache_merge_store_gc(&removed, f->store, NULL, 0), ==, 0);
        g_assert_cmpuint(removed, ==, 3);
        assert_gone(f, a);
        assert_gone(f, b);
        assert_gone(f, c);
        {
                g_autoptr(GDir) dir = g_dir_open(f->path, 0, NULL);

                g_assert_nonnull(dir);
                g_assert_null(g_dir_read_name(dir));
        }
        g_assert_cmpint(fcache_merge_store_gc(NULL, f->store, NULL, 0), ==, 0);
        /* The fan-out directories come back as needed. */
        put(f, a, "version a\n");
        assert_get(f, a, "version a\n", 10);

        g_assert_cmpint(git_libgit2_opts(GIT_OPT_SET_CACHE_OBJECT_LIMIT, GIT_OBJECT_BLOB, (size_t) 0), ==, 0);
        git_libgit2_shutdown();
}

static void test_gc_bad_keep(fixture *f, gconstpointer data)
{
        char a[FCACHE_MERGE_ID_SIZE];
        size_t removed = 99;
        const char *keep[] = { "not-an-id" };
        const char *keep_null[] = { NULL };

        put(f, a, "keep me\n");
        g_assert_cmpint(fcache_merge_store_gc(&removed, f->store, keep, 1), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_store_gc(&removed, f->store, keep_null, 1), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_store_gc(&removed, f->store, NULL, 1), ==, -EINVAL);
        g_assert_cmpuint(removed, ==, 99);
        /* A bad keep list deletes nothing. */
        assert_get(f, a, "keep me\n", 8);

        /* Upper-case keep ids protect their blob too. */
        {
                g_autofree char *upper = g_ascii_strup(a, -1);
                const char *keep_upper[] = { upper };

                g_assert_cmpint(fcache_merge_store_gc(&removed, f->store, keep_upper, 1), ==, 0);
                g_assert_cmpuint(removed, ==, 0);
                assert_get(f, a, "keep me\n", 8);
        }
}

static void test_gc_leftovers(fixture *f, gconstpointer data)
{
        char a[FCACHE_MERGE_ID_SIZE];
        g_autofree char *fanout = NULL, *lock = NULL, *tmp = NULL, *other = NULL;
        size_t removed = 99;
        const char *keep[] = { a };

        put(f, a, "kept\n");
        fanout = g_strdup_printf("%s/%.2s", f->path, a);
        lock = g_strdup_printf("%s/%s.lock", fanout, a + 2);
        tmp = g_build_filename(f->path, "tmp_object_git2_AbCdEf", NULL);
        other = g_build_filename(f->path, "README", NULL);
        /* What a crash in the middle of a write leaves behind. */
        g_assert_true(g_file_set_contents(lock, "partial", 7, NULL));
        g_assert_true(g_file_set_contents(tmp, "partial", 7, NULL));
        g_assert_true(g_file_set_contents(other, "not ours", 8, NULL));

        g_assert_cmpint(fcache_merge_store_gc(&removed, f->store, keep, 1), ==, 0);
        g_assert_cmpuint(removed, ==, 0);
        g_assert_false(g_file_test(lock, G_FILE_TEST_EXISTS));
        g_assert_false(g_file_test(tmp, G_FILE_TEST_EXISTS));
        /* Files the store did not write are left alone. */
        g_assert_true(g_file_test(other, G_FILE_TEST_EXISTS));
        assert_get(f, a, "kept\n", 5);
}

static void test_blob_id(void)
{
        char id[FCACHE_MERGE_ID_SIZE] = "untouched";

        g_assert_cmpint(fcache_merge_blob_id(id, NULL, 0), ==, 0);
        g_assert_cmpstr(id, ==, EMPTY_ID);
        g_assert_cmpint(fcache_merge_blob_id(id, NULL, 5), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_blob_id(NULL, "x", 1), ==, -EINVAL);
        g_assert_cmpstr(id, ==, EMPTY_ID);
}

/* A file another thread keeps shortening and filling again. */
struct churn {
        int fd;
        gint stop;
};

static gpointer churn_file(gpointer arg)
{
        struct churn *c = arg;
        static char block[65536];

        while (!g_atomic_int_get(&c->stop)) {
                g_assert_cmpint(ftruncate(c->fd, 0), ==, 0);
                for (int i = 0; i < 64; i++)
                        g_assert_cmpint(pwrite(c->fd, block, sizeof(block), (off_t)i * sizeof(block)),
                                        ==, sizeof(block));
        }
        return NULL;
}

/*
 * The id of a file read through its descriptor: the same as of its bytes
 * (empty, small, 1 MiB, and after its name went), and a file shortened
 * while it is read gives an id or an error, never a fault (a mapping of it
 * would: SIGBUS).
 */
static void test_blob_id_fd(fixture *f, gconstpointer data)
{
        g_autofree char *path = g_build_filename(f->tmp, "file", NULL);
        char id[FCACHE_MERGE_ID_SIZE], want[FCACHE_MERGE_ID_SIZE];
        size_t sizes[] = { 0, 6, 1 << 20 };
        struct churn c = { 0 };
        GThread *th;
        guint8 *buf = g_malloc(1 << 20);
        int fd, ok = 0, failed = 0;

        for (size_t i = 0; i < 1 << 20; i++)
                buf[i] = (guint8)g_test_rand_int();
        for (size_t k = 0; k < G_N_ELEMENTS(sizes); k++) {
                fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
                g_assert_cmpint(fd, >=, 0);
                g_assert_cmpint(pwrite(fd, buf, sizes[k], 0), ==, (ssize_t)sizes[k]);
                if (k == G_N_ELEMENTS(sizes) - 1)
                        g_assert_cmpint(unlink(path), ==, 0);
                g_assert_cmpint(fcache_merge_blob_id_fd(id, fd), ==, 0);
                g_assert_cmpint(fcache_merge_blob_id(want, buf, sizes[k]), ==, 0);
                g_assert_cmpstr(id, ==, want);
                close(fd);
        }
        g_assert_cmpint(fcache_merge_blob_id_fd(id, -1), ==, -EINVAL);

        c.fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        g_assert_cmpint(c.fd, >=, 0);
        th = g_thread_new("churn", churn_file, &c);
        for (int i = 0; i < 300; i++) {
                int e = fcache_merge_blob_id_fd(id, c.fd);

                g_assert_true(e == 0 || e == -EIO);
                if (e == 0)
                        ok++;
                else
                        failed++;
        }
        g_atomic_int_set(&c.stop, 1);
        g_thread_join(th);
        close(c.fd);
        g_test_message("%d read whole, %d shortened while read", ok, failed);
        g_free(buf);
}

#define ADD(name, fn) g_test_add("/fcache/merge/base-store/" name, fixture, NULL, fixture_set_up, fn, fixture_tear_down)

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
        ADD("round-trip", test_round_trip);
        ADD("persistence", test_persistence);
        ADD("durable", test_durable);
        ADD("bad-ids", test_bad_ids);
        ADD("put-fd", test_put_fd);
        ADD("corruption", test_corruption);
        ADD("gc", test_gc);
        ADD("gc-bad-keep", test_gc_bad_keep);
        ADD("gc-leftovers", test_gc_leftovers);
        ADD("blob-id-fd", test_blob_id_fd);
        g_test_add_func("/fcache/merge/base-store/open-errors", test_open_errors);
        g_test_add_func("/fcache/merge/base-store/blob-id", test_blob_id);
        return g_test_run();
}
