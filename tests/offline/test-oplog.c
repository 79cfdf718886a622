/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-oplog.c: the offline operation log on its own: durability across a
 * reopen, argument checks, and every coalescing rule of oplog.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oplog-internal.h"
#include "oplog.h"

struct fixture {
        char *dir;
        struct oplog *log;
        int content_fd;
};

static void setup(struct fixture *f, gconstpointer data)
{
        struct oplog_options o = OPLOG_OPTIONS_INIT;
        char *path;

        f->dir = g_dir_make_tmp("test-oplog-XXXXXX", NULL);
        g_assert_nonnull(f->dir);
        /* data: the copy path (containers the log cannot name by handle). */
        o.copy_content = data != NULL;
        path = g_build_filename(f->dir, "log", NULL);
        g_assert_cmpint(oplog_open(&f->log, path, &o), ==, 0);
        g_free(path);
        path = g_build_filename(f->dir, "content", NULL);
        f->content_fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        g_assert_cmpint(f->content_fd, >=, 0);
        g_free(path);
}

static void teardown(struct fixture *f, gconstpointer data)
{
        char *cmd;

        oplog_close(f->log);
        close(f->content_fd);
        cmd = g_strdup_printf("rm -rf '%s'", f->dir);
        g_assert_cmpint(system(cmd), ==, 0);
        g_free(cmd);
        g_free(f->dir);
}

/*
 * Writes @text as the whole content of a new container (the record names
 * the container, so each recorded version gets its own, as a copy did).
 */
static int content(struct fixture *f, const char *text)
{
        static unsigned n;
        char *path = g_strdup_printf("%s/content.%u", f->dir, n++);

        close(f->content_fd);
        f->content_fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        g_assert_cmpint(f->content_fd, >=, 0);
        g_free(path);
        g_assert_cmpint(pwrite(f->content_fd, text, strlen(text), 0), ==, (ssize_t)strlen(text));
        return f->content_fd;
}

static uint64_t server_object(struct fixture *f, uint64_t parent, const char *name, mode_t mode,
                              uint64_t ino)
{
        struct oplog_version v = { .ino = ino, .mode = mode, .nlink = 1, .size = 3 };
        uint64_t lid;

        g_assert_cmpint(oplog_object(f->log, parent, name, &v, &lid), ==, 0);
        return lid;
}

/* The pending records as "kind:lid[:name->name2]" words. */
static int describe(void *ud, const struct oplog_record *r)
{
        GString *s = ud;

        if (s->len)
                g_string_append_c(s, ' ');
        g_string_append_printf(s, "%s", oplog_kind_to_string(r->kind));
        if (r->kind == OPLOG_RENAME)
                g_string_append_printf(s, ":%s->%s%s", r->name, r->name2, r->other ? "!" : "");
        else if (r->name)
                g_string_append_printf(s, ":%s", r->name);
        return 0;
}

static char *records(struct fixture *f)
{
        GString *s = g_string_new(NULL);

        g_assert_cmpint(oplog_foreach(f->log, true, describe, s), ==, 0);
        return g_string_free(s, FALSE);
}

#define assert_records(f, expected) do { \
                char *_r = records(f); \
                g_assert_cmpstr(_r, ==, expected); \
                g_free(_r); \
        } while (0)

static int count_files(const char *dir)
{
        GDir *d = g_dir_open(dir, 0, NULL);
        int n = 0;

        g_assert_nonnull(d);
        while (g_dir_read_name(d))
                n++;
        g_dir_close(d);
        return n;
}

static void test_durable_reopen(struct fixture *f, gconstpointer data)
{
        uint64_t a, d;
        char *path, *cdir;

        g_assert_cmpint(oplog_record_mkdir(f->log, OPLOG_ROOT, "d", 0755, 0, 0, &d), ==, 0);
        g_assert_cmpint(oplog_record_create(f->log, d, "a", 0644, 0, 0, &a), ==, 0);
        g_assert_cmpint(oplog_record_content(f->log, a, content(f, "hello\n")), ==, 0);
        oplog_close(f->log);
        path = g_build_filename(f->dir, "log", NULL);
        g_assert_cmpint(oplog_open(&f->log, path, NULL), ==, 0);
        assert_records(f, "mkdir:d create:a content");
        /* The record names the container (by handle), or holds a copy. */
        cdir = g_build_filename(path, "content", NULL);
        g_assert_cmpint(count_files(cdir), ==, data ? 1 : 0);
        g_free(cdir);
        g_free(path);
        {
                char buf[16] = "";
                uint64_t seq;
                int fd;

                g_assert_cmpint(oplog_pending_content(f->log, a, &seq), ==, 0);
                fd = oplog_content_open(f->log, seq);
                g_assert_cmpint(fd, >=, 0);
                g_assert_cmpint(pread(fd, buf, sizeof(buf), 0), ==, 6);
                g_assert_cmpstr(buf, ==, "hello\n");
                close(fd);
        }
}

static void test_invalid(struct fixture *f, gconstpointer data)
{
        uint64_t lid = 77;

        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "a/b", 0644, 0, 0, &lid), ==, -EINVAL);
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "..", 0644, 0, 0, &lid), ==, -EINVAL);
        g_assert_cmpint(oplog_record_create(f->log, 999, "x", 0644, 0, 0, &lid), ==, -ENOENT);
        g_assert_cmpint(lid, ==, 77); /* out-parameter untouched on failure */
        g_assert_cmpint(oplog_record_content(f->log, 999, content(f, "x")), ==, -ENOENT);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", OPLOG_ROOT, OPLOG_ROOT, "b",
                                            0, 0), ==, -EINVAL);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", 2, OPLOG_ROOT, "b", 0,
                                            RENAME_EXCHANGE), ==, -EINVAL);
        assert_records(f, "");
}

static void test_writes_coalesce(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 100);
        char *cdir = g_build_filename(f->dir, "log", "content", NULL);
        uint64_t n;

        for (int i = 0; i < 50; i++) {
                char text[32];

                snprintf(text, sizeof(text), "version %d\n", i);
                g_assert_cmpint(oplog_record_content(f->log, a, content(f, text)), ==, 0);
        }
        assert_records(f, "content");
        g_assert_cmpint(count_files(cdir), ==, data ? 1 : 0);
        g_assert_cmpint(oplog_count(f->log, OPLOG_PENDING, &n), ==, 0);
        g_assert_cmpuint(n, ==, 1);
        g_free(cdir);
}

/* A record names the container: replay reads what it holds then; recording it again writes nothing. */
static void test_container_named(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 100), seq, seq2, size;
        int fd = content(f, "first\n"), rfd;
        char *log_path = g_build_filename(f->dir, "log", "log.db-wal", NULL);
        char buf[16] = "";
        struct stat st;

        g_assert_cmpint(oplog_record_content(f->log, a, fd), ==, 0);
        g_assert_cmpint(oplog_pending_content(f->log, a, &seq), ==, 0);
        g_assert_cmpint(stat(log_path, &st), ==, 0);
        size = (uint64_t)st.st_size;
        /* The container changes after its record (a later write of the same size, fsync'ed
         * again: a size change is recorded, the bytes held count against max_bytes). */
        g_assert_cmpint(pwrite(fd, "again\n", 6, 0), ==, 6);
        g_assert_cmpint(oplog_record_content(f->log, a, fd), ==, 0);
        g_assert_cmpint(oplog_pending_content(f->log, a, &seq2), ==, 0);
        g_assert_cmpuint(seq2, ==, seq);
        g_assert_cmpint(stat(log_path, &st), ==, 0);
        g_assert_cmpuint((uint64_t)st.st_size, ==, size);
        rfd = oplog_content_open(f->log, seq);
        g_assert_cmpint(rfd, >=, 0);
        g_assert_cmpint(pread(rfd, buf, sizeof(buf), 0), ==, 6);
        g_assert_cmpstr(buf, ==, "again\n");
        close(rfd);
        assert_records(f, "content");
        g_free(log_path);
}

static void test_create_unlink_cancels(struct fixture *f, gconstpointer data)
{
        char *cdir = g_build_filename(f->dir, "log", "content", NULL);
        uint64_t d, t, keep;

        g_assert_cmpint(oplog_record_mkdir(f->log, OPLOG_ROOT, "build", 0755, 0, 0, &d), ==, 0);
        g_assert_cmpint(oplog_record_create(f->log, d, "keep.o", 0644, 0, 0, &keep), ==, 0);
        for (int i = 0; i < 20; i++) {
                struct oplog_setattr sa = { .mask = OPLOG_SET_MODE, .mode = 0600 };
                char name[32];

                snprintf(name, sizeof(name), "tmp%d", i);
                g_assert_cmpint(oplog_record_create(f->log, d, name, 0644, 0, 0, &t), ==, 0);
                g_assert_cmpint(oplog_record_content(f->log, t, content(f, "junk")), ==, 0);
                g_assert_cmpint(oplog_record_setattr(f->log, t, &sa), ==, 0);
                g_assert_cmpint(oplog_record_setxattr(f->log, t, "user.x", "1", 1, 0), ==, 0);
                g_assert_cmpint(oplog_record_rename(f->log, d, name, t, d, "tmp.final", 0, 0), ==, 0);
                g_assert_cmpint(oplog_record_unlink(f->log, d, "tmp.final", t), ==, 0);
        }
        assert_records(f, "mkdir:build create:keep.o");
        g_assert_cmpint(count_files(cdir), ==, 0);
        /* mkdir then rmdir of an emptied directory cancels too. */
        g_assert_cmpint(oplog_record_unlink(f->log, d, "keep.o", keep), ==, 0);
        g_assert_cmpint(oplog_record_rmdir(f->log, OPLOG_ROOT, "build", d), ==, 0);
        assert_records(f, "");
        g_free(cdir);
}

static void test_cancel_keeps_replaced_unlink(struct fixture *f, gconstpointer data)
{
        uint64_t old = server_object(f, OPLOG_ROOT, "file", S_IFREG | 0644, 200), t;

        /* An editor's save: write a temporary, rename it over the server file... */
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, ".file.swp", 0644, 0, 0, &t), ==, 0);
        g_assert_cmpint(oplog_record_content(f->log, t, content(f, "new")), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, ".file.swp", t, OPLOG_ROOT, "file",
                                            old, 0), ==, 0);
        assert_records(f, "create:.file.swp content rename:.file.swp->file!");
        /* ...then delete it: the server file must still go. */
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "file", t), ==, 0);
        assert_records(f, "unlink:file");
}

static void test_link_blocks_cancel(struct fixture *f, gconstpointer data)
{
        uint64_t t;

        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "a", 0644, 0, 0, &t), ==, 0);
        g_assert_cmpint(oplog_record_link(f->log, t, OPLOG_ROOT, "b"), ==, 0);
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "a", t), ==, 0);
        assert_records(f, "create:a link unlink:a");
}

static void test_unlink_server_file_drops_edits(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 300);
        struct oplog_setattr sa = { .mask = OPLOG_SET_MODE, .mode = 0600 };

        g_assert_cmpint(oplog_record_content(f->log, a, content(f, "edit")), ==, 0);
        g_assert_cmpint(oplog_record_setattr(f->log, a, &sa), ==, 0);
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "a", a), ==, 0);
        assert_records(f, "unlink:a");
}

/*
 * Records made again offline after their call to the server timed out (in
 * doubt: the server may have them too) are kept as they are: a create is
 * not cancelled, a rename not folded into the next, a setattr not merged
 * into nor dropped, a content record not dropped and its mark kept by the
 * record replacing it.
 */
static int count_in_doubt(void *ud, const struct oplog_record *r)
{
        *(unsigned *)ud += (r->flags & OPLOG_IN_DOUBT) != 0;
        return 0;
}

static void test_in_doubt_kept(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 700);
        uint64_t b = server_object(f, OPLOG_ROOT, "b", S_IFREG | 0644, 701);
        struct oplog_setattr s1 = { .mask = OPLOG_SET_MODE, .mode = 0600 };
        struct oplog_setattr s2 = { .mask = OPLOG_SET_MODE, .mode = 0640 };
        unsigned marked = 0;
        uint64_t t;

        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "t", 0644, 0, 0, &t), ==, 0);
        g_assert_cmpint(oplog_mark_in_doubt(f->log, t), ==, 0);
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "t", t), ==, 0);
        assert_records(f, "create:t unlink:t");
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", a, OPLOG_ROOT, "c", 0, 0), ==, 0);
        g_assert_cmpint(oplog_mark_in_doubt(f->log, a), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "c", a, OPLOG_ROOT, "a", 0, 0), ==, 0);
        assert_records(f, "create:t unlink:t rename:a->c rename:c->a");
        g_assert_cmpint(oplog_record_setattr(f->log, b, &s1), ==, 0);
        g_assert_cmpint(oplog_mark_in_doubt(f->log, b), ==, 0);
        g_assert_cmpint(oplog_record_setattr(f->log, b, &s2), ==, 0);
        g_assert_cmpint(oplog_record_content(f->log, b, content(f, "one")), ==, 0);
        g_assert_cmpint(oplog_mark_in_doubt(f->log, b), ==, 0);
        g_assert_cmpint(oplog_record_content(f->log, b, content(f, "two")), ==, 0);
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "b", b), ==, 0);
        assert_records(f, "create:t unlink:t rename:a->c rename:c->a setattr content unlink:b");
        g_assert_cmpint(oplog_foreach(f->log, true, count_in_doubt, &marked), ==, 0);
        g_assert_cmpuint(marked, ==, 4);        /* create, rename, setattr, content */
}

/*
 * While a run replays the records up to K (oplog_set_replaying), a new record
 * never merges into, cancels or drops one of them; after K they coalesce as
 * ever, and once the run ended with them too.
 */
static void test_replaying_barrier(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 500), t, k;
        struct oplog_setattr sa = { .mask = OPLOG_SET_MODE, .mode = 0600 };
        int fd = content(f, "first\n");

        g_assert_cmpint(oplog_record_content(f->log, a, fd), ==, 0);
        g_assert_cmpint(oplog_record_setattr(f->log, a, &sa), ==, 0);
        g_assert_cmpint(oplog_record_setxattr(f->log, a, "user.x", "1", 1, 0), ==, 0);
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "t", 0644, 0, 0, &t), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", a, OPLOG_ROOT, "b", 0, 0), ==, 0);
        g_assert_cmpint(oplog_pending_content(f->log, a, &k), ==, 0);
        k += 4; /* the rename, the last record */
        oplog_set_replaying(f->log, k);
        g_assert_cmpint(pwrite(fd, "second\n", 7, 0), ==, 7);
        g_assert_cmpint(oplog_record_content(f->log, a, fd), ==, 0);
        g_assert_cmpint(oplog_record_content(f->log, a, fd), ==, 0);   /* after K: merges */
        g_assert_cmpint(oplog_record_setattr(f->log, a, &sa), ==, 0);
        g_assert_cmpint(oplog_record_setxattr(f->log, a, "user.x", "2", 1, 0), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "b", a, OPLOG_ROOT, "c", 0, 0), ==, 0);
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "t", t), ==, 0);
        assert_records(f, "content setattr setxattr create:t rename:a->b content setattr setxattr"
                          " rename:b->c unlink:t");
        oplog_set_replaying(f->log, 0);
        g_assert_cmpint(oplog_record_setattr(f->log, a, &sa), ==, 0);
        assert_records(f, "content setattr setxattr create:t rename:a->b content setxattr"
                          " rename:b->c unlink:t setattr");
}

/* A server object is found by the inode it was cached with after a replay gave it another. */
static void test_cached_ino(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 600), lid;
        struct oplog_object o;

        g_assert_cmpint(oplog_object_load(f->log, a, &o), ==, 0);
        o.base.ino = 601;       /* content written through a temporary renamed over it */
        g_assert_cmpint(oplog_object_save(f->log, &o), ==, 0);
        oplog_object_clear(&o);
        g_assert_cmpint(oplog_find_ino(f->log, 600, &lid), ==, 0);
        g_assert_cmpuint(lid, ==, a);
        g_assert_cmpint(oplog_find_ino(f->log, 601, &lid), ==, 0);
        g_assert_cmpuint(lid, ==, a);
        g_assert_cmpuint(server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 600), ==, a);
}

static int get_setattr(void *ud, const struct oplog_record *r)
{
        if (r->kind == OPLOG_SETATTR)
                *(struct oplog_record *)ud = *r;
        return 0;
}

static void test_setattr_merges(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 400);
        struct oplog_setattr s1 = { .mask = OPLOG_SET_MODE, .mode = 0600 };
        struct oplog_setattr s2 = { .mask = OPLOG_SET_UID | OPLOG_SET_MTIME, .uid = 42,
                                    .mtime = { 1000, 5 } };
        struct oplog_setattr s3 = { .mask = OPLOG_SET_MODE, .mode = 0640 };
        struct oplog_record r = { 0 };

        g_assert_cmpint(oplog_record_setattr(f->log, a, &s1), ==, 0);
        g_assert_cmpint(oplog_record_setattr(f->log, a, &s2), ==, 0);
        g_assert_cmpint(oplog_record_setattr(f->log, a, &s3), ==, 0);
        assert_records(f, "setattr");
        g_assert_cmpint(oplog_foreach(f->log, true, get_setattr, &r), ==, 0);
        g_assert_cmpuint(r.mask, ==, OPLOG_SET_MODE | OPLOG_SET_UID | OPLOG_SET_MTIME);
        g_assert_cmpuint(r.mode, ==, 0640);
        g_assert_cmpuint(r.uid, ==, 42);
        g_assert_cmpint(r.mtime_ns, ==, 1000 * 1000000000LL + 5);
}

/* A merged setattr keeps its place only as the log's last row: after a later
 * record of its object it moves behind it (a time set after a write). */
static void test_setattr_merge_order(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 410);
        struct oplog_setattr mode = { .mask = OPLOG_SET_MODE, .mode = 0600 };
        struct oplog_setattr uid = { .mask = OPLOG_SET_UID, .uid = 7 };
        struct oplog_setattr mtime = { .mask = OPLOG_SET_MTIME, .mtime = { 2000, 0 } };
        struct oplog_record r = { 0 };
        uint64_t d;

        g_assert_cmpint(oplog_record_setattr(f->log, a, &mode), ==, 0);
        g_assert_cmpint(oplog_record_setattr(f->log, a, &uid), ==, 0);
        assert_records(f, "setattr");
        g_assert_cmpint(oplog_record_content(f->log, a, content(f, "new\n")), ==, 0);
        g_assert_cmpint(oplog_record_setattr(f->log, a, &mtime), ==, 0);
        assert_records(f, "content setattr");
        /* Another object's record after it: the merge moves to the end too. */
        g_assert_cmpint(oplog_record_mkdir(f->log, OPLOG_ROOT, "d", 0755, 0, 0, &d), ==, 0);
        g_assert_cmpint(oplog_record_setattr(f->log, a, &mode), ==, 0);
        assert_records(f, "content mkdir:d setattr");
        g_assert_cmpint(oplog_foreach(f->log, true, get_setattr, &r), ==, 0);
        g_assert_cmpuint(r.mask, ==, OPLOG_SET_MODE | OPLOG_SET_UID | OPLOG_SET_MTIME);
        g_assert_cmpuint(r.uid, ==, 7);
        g_assert_cmpint(r.mtime_ns, ==, 2000 * 1000000000LL);
}

struct grouped {
        struct oplog *log;
        pthread_mutex_t lock;
        int failures;
};

static void *grouped_writer(void *arg)
{
        struct grouped *g = arg;

        for (int i = 0; i < 25; i++) {
                char name[32];
                uint64_t lid;
                int e;

                snprintf(name, sizeof(name), "g%p-%d", (void *)pthread_self(), i);
                pthread_mutex_lock(&g->lock);
                e = oplog_record_mkdir(g->log, OPLOG_ROOT, name, 0755, 0, 0, &lid);
                if (e == 0)
                        e = oplog_durable_grouped(g->log, &g->lock);
                if (e < 0)
                        g->failures++;
                pthread_mutex_unlock(&g->lock);
        }
        return NULL;
}

/* Records and grouped syncs from several threads: every one kept, and after
 * the last sync nothing is left unsynced. */
static void test_durable_grouped(struct fixture *f, gconstpointer data)
{
        struct grouped g = { .log = f->log, .lock = PTHREAD_MUTEX_INITIALIZER };
        pthread_t t[4];
        uint64_t n = 0;
        char *path;

        for (int i = 0; i < 4; i++)
                g_assert_cmpint(pthread_create(&t[i], NULL, grouped_writer, &g), ==, 0);
        for (int i = 0; i < 4; i++)
                pthread_join(t[i], NULL);
        g_assert_cmpint(g.failures, ==, 0);
        g_assert_cmpuint(f->log->synced, ==, f->log->commits);
        g_assert_false(f->log->syncing);
        oplog_close(f->log);
        path = g_build_filename(f->dir, "log", NULL);
        g_assert_cmpint(oplog_open(&f->log, path, NULL), ==, 0);
        g_free(path);
        g_assert_cmpint(oplog_count(f->log, OPLOG_PENDING, &n), ==, 0);
        g_assert_cmpuint(n, ==, 100);
}

static void test_xattr_replaces(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 500);

        g_assert_cmpint(oplog_record_setxattr(f->log, a, "user.k", "1", 1, 0), ==, 0);
        g_assert_cmpint(oplog_record_setxattr(f->log, a, "user.j", "1", 1, 0), ==, 0);
        g_assert_cmpint(oplog_record_setxattr(f->log, a, "user.k", "2", 1, 0), ==, 0);
        g_assert_cmpint(oplog_record_removexattr(f->log, a, "user.k"), ==, 0);
        assert_records(f, "setxattr removexattr");
}

static void test_rename_chain(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 600);
        uint64_t d = server_object(f, OPLOG_ROOT, "d", S_IFDIR | 0755, 601);

        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", a, OPLOG_ROOT, "b", 0, 0), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "b", a, d, "c", 0, 0), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, d, "c", a, OPLOG_ROOT, "e", 0, 0), ==, 0);
        assert_records(f, "rename:a->e");
        /* Back where it started: nothing left to replay. */
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "e", a, OPLOG_ROOT, "a", 0, 0), ==, 0);
        assert_records(f, "");
}

static void test_rename_chain_kept_when_name_reused(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 700), n;

        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", a, OPLOG_ROOT, "b", 0, 0), ==, 0);
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "a", 0644, 0, 0, &n), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "b", a, OPLOG_ROOT, "c", 0, 0), ==, 0);
        assert_records(f, "rename:a->b create:a rename:b->c");
}

static void test_rename_chain_kept_when_source_dir_removed(struct fixture *f, gconstpointer data)
{
        uint64_t d = server_object(f, OPLOG_ROOT, "d", S_IFDIR | 0755, 750);
        uint64_t a = server_object(f, d, "a", S_IFREG | 0644, 751);

        g_assert_cmpint(oplog_record_rename(f->log, d, "a", a, OPLOG_ROOT, "b", 0, 0), ==, 0);
        g_assert_cmpint(oplog_record_rmdir(f->log, OPLOG_ROOT, "d", d), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "b", a, OPLOG_ROOT, "c", 0, 0), ==, 0);
        /* Merged, the rename would come after the rmdir of its source's directory. */
        assert_records(f, "rename:a->b rmdir:d rename:b->c");
}

static void test_rename_chain_kept_when_a_directory_moved_in(struct fixture *f,
                                                             gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFDIR | 0755, 760);
        uint64_t b = server_object(f, a, "b", S_IFDIR | 0755, 761);
        uint64_t d = server_object(f, b, "d", S_IFDIR | 0755, 762);

        g_assert_cmpint(oplog_record_rename(f->log, b, "d", d, OPLOG_ROOT, "d2", 0, 0), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", a, d, "a", 0, 0), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "d2", d, OPLOG_ROOT, "d3", 0, 0),
                        ==, 0);
        /* Merged, d would still be inside a when a is moved into it. */
        assert_records(f, "rename:d->d2 rename:a->a rename:d2->d3");
}

static void test_exchange_not_collapsed(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 800);
        uint64_t b = server_object(f, OPLOG_ROOT, "b", S_IFREG | 0644, 801);

        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", a, OPLOG_ROOT, "b", b,
                                            RENAME_EXCHANGE), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "b", a, OPLOG_ROOT, "c", 0, 0), ==, 0);
        assert_records(f, "rename:a->b! rename:b->c");
}

static void test_object_identity(struct fixture *f, gconstpointer data)
{
        uint64_t a = server_object(f, OPLOG_ROOT, "a", S_IFREG | 0644, 900), again, found;

        again = server_object(f, OPLOG_ROOT, "renamed-elsewhere", S_IFREG | 0644, 900);
        g_assert_cmpuint(a, ==, again);
        g_assert_cmpint(oplog_find_ino(f->log, 900, &found), ==, 0);
        g_assert_cmpuint(found, ==, a);
        g_assert_cmpint(oplog_find_ino(f->log, 901, &found), ==, -ENOENT);
}

static void test_max_bytes_enospc(struct fixture *f, gconstpointer data)
{
        struct oplog_options o = OPLOG_OPTIONS_INIT;
        char *path = g_build_filename(f->dir, "small", NULL), *big;
        struct oplog *log;
        uint64_t lid, n, ok = 0;
        int e = 0;

        o.max_bytes = 256 * 1024;
        o.copy_content = true;  /* the bound applies to what the log holds: copies */
        g_assert_cmpint(oplog_open(&log, path, &o), ==, 0);
        big = g_malloc(16384);
        memset(big, 'x', 16384);
        for (int i = 0; i < 100; i++) {
                char name[32];

                snprintf(name, sizeof(name), "f%d", i);
                e = oplog_record_create(log, OPLOG_ROOT, name, 0644, 0, 0, &lid);
                if (e == 0) {
                        g_assert_cmpint(ftruncate(f->content_fd, 0), ==, 0);
                        g_assert_cmpint(pwrite(f->content_fd, big, 16384, 0), ==, 16384);
                        e = oplog_record_content(log, lid, f->content_fd);
                }
                if (e < 0)
                        break;
                ok++;
        }
        g_assert_cmpint(e, ==, -ENOSPC);
        g_assert_cmpuint(ok, >, 0);
        oplog_close(log);
        /* Everything accepted before the ENOSPC is still there. */
        g_assert_cmpint(oplog_open(&log, path, &o), ==, 0);
        g_assert_cmpint(oplog_count(log, OPLOG_PENDING, &n), ==, 0);
        g_assert_cmpuint(n, >=, 2 * ok);
        g_assert_cmpuint(n, <=, 2 * ok + 1);
        oplog_close(log);
        g_free(big);
        g_free(path);
}

static int mark_applied(void *ud, const struct oplog_record *r)
{
        return oplog_mark(ud, r->seq, OPLOG_APPLIED, "applied");
}

/* Settled records give their space back: the log does not keep growing. */
static void test_shrink(struct fixture *f, gconstpointer data)
{
        char *big = g_malloc(16384);
        uint64_t lid, full, after, pending;

        memset(big, 'y', 16384);
        for (int i = 0; i < 200; i++) {
                char name[32];

                snprintf(name, sizeof(name), "f%d", i);
                g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, name, 0644, 0, 0, &lid),
                                ==, 0);
                g_assert_cmpint(ftruncate(f->content_fd, 0), ==, 0);
                g_assert_cmpint(pwrite(f->content_fd, big, 16384, 0), ==, 16384);
                g_assert_cmpint(oplog_record_content(f->log, lid, f->content_fd), ==, 0);
        }
        g_assert_cmpint(oplog_size(f->log, &full), ==, 0);
        /* Nothing happens while records are pending. */
        g_assert_cmpint(oplog_shrink(f->log), ==, 0);
        g_assert_cmpint(oplog_foreach(f->log, true, mark_applied, f->log), ==, 0);
        g_assert_cmpint(oplog_compact(f->log, NULL), ==, 0);
        g_assert_cmpint(oplog_forget_settled(f->log, NULL), ==, 0);
        g_assert_cmpint(oplog_shrink(f->log), ==, 0);
        g_assert_cmpint(oplog_count(f->log, OPLOG_PENDING, &pending), ==, 0);
        g_assert_cmpuint(pending, ==, 0);
        g_assert_cmpint(oplog_size(f->log, &after), ==, 0);
        g_test_message("log: %" G_GUINT64_FORMAT " bytes full, %" G_GUINT64_FORMAT " settled",
                       full, after);
        g_assert_cmpuint(full, >, 200 * 16384);
        g_assert_cmpuint(after, <, full / 10);
        g_free(big);
}

static void reopen(struct fixture *f, gconstpointer data)
{
        struct oplog_options o = OPLOG_OPTIONS_INIT;
        char *path = g_build_filename(f->dir, "log", NULL);

        o.copy_content = data != NULL;
        oplog_close(f->log);
        g_assert_cmpint(oplog_open(&f->log, path, &o), ==, 0);
        g_free(path);
}

static bool object_known(struct oplog *log, uint64_t lid)
{
        struct oplog_object o;
        int e = oplog_object_load(log, lid, &o);

        g_assert_true(e == 0 || e == -ENOENT);
        if (e == 0)
                oplog_object_clear(&o);
        return e == 0;
}

static int last_seq(void *ud, const struct oplog_record *r)
{
        *(uint64_t *)ud = r->seq;
        return 0;
}

/* A conflict on the last record (a create of @lid); its id. */
static uint64_t add_conflict(struct oplog *log, uint64_t lid)
{
        uint64_t seq = 0, id;

        g_assert_cmpint(oplog_foreach(log, true, last_seq, &seq), ==, 0);
        g_assert_cmpint(oplog_mark(log, seq, OPLOG_CONFLICT, "conflict"), ==, 0);
        g_assert_cmpint(oplog_add_conflict(log, seq, lid, "name/name", "x", "", "", "", "create",
                                           0, &id), ==, 0);
        return id;
}

static void settle_conflicts(struct oplog *log, uint64_t id)
{
        uint64_t seq = 0;

        g_assert_cmpint(oplog_foreach(log, false, last_seq, &seq), ==, 0);
        g_assert_cmpint(oplog_begin(log), ==, 0);
        g_assert_cmpint(oplog_conflict_settle(log, id, seq, false, NULL), ==, 0);
        g_assert_cmpint(oplog_commit(log), ==, 0);
}

/*
 * An id whose row went (a create cancelled, an object forgotten, a conflict
 * settled) never names another: nodes, open files and the mirror's marks
 * hold lids, users hold conflict ids.  Also across a reopen, a shrink and
 * in a snapshot.
 */
static void test_ids_never_reused(struct fixture *f, gconstpointer data)
{
        struct oplog_options o = OPLOG_OPTIONS_INIT;
        uint64_t a, b, c, d, s, s2, id1, id2, id3, e, last;
        struct oplog *snap;
        char *snapdir;

        /* The newest object's create cancelled: the next new one gets another lid. */
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "a", 0644, 0, 0, &a), ==, 0);
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "a", a), ==, 0);
        g_assert_false(object_known(f->log, a));
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "b", 0644, 0, 0, &b), ==, 0);
        g_assert_cmpuint(b, >, a);
        /* Across a close and open. */
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "c", 0644, 0, 0, &c), ==, 0);
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "c", c), ==, 0);
        reopen(f, data);
        g_assert_false(object_known(f->log, c));
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "d", 0644, 0, 0, &d), ==, 0);
        g_assert_cmpuint(d, >, c);
        /* A server object forgotten and registered again. */
        s = server_object(f, OPLOG_ROOT, "s", S_IFREG | 0644, 700);
        g_assert_cmpint(oplog_forget_settled(f->log, NULL), ==, 0);
        g_assert_false(object_known(f->log, s));
        s2 = server_object(f, OPLOG_ROOT, "s", S_IFREG | 0644, 700);
        g_assert_cmpuint(s2, >, s);
        /* Conflicts: settled, the next one has another id, also after a reopen. */
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "e", 0644, 0, 0, &e), ==, 0);
        id1 = add_conflict(f->log, e);
        settle_conflicts(f->log, id1);
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "e2", 0644, 0, 0, &e), ==, 0);
        id2 = add_conflict(f->log, e);
        g_assert_cmpuint(id2, >, id1);
        settle_conflicts(f->log, id2);
        reopen(f, data);
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "e3", 0644, 0, 0, &e), ==, 0);
        id3 = add_conflict(f->log, e);
        g_assert_cmpuint(id3, >, id2);
        settle_conflicts(f->log, id3);
        /* Everything settled and forgotten, the database rewritten (VACUUM). */
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "f", 0644, 0, 0, &last), ==, 0);
        g_assert_cmpint(oplog_foreach(f->log, true, mark_applied, f->log), ==, 0);
        g_assert_cmpint(oplog_compact(f->log, NULL), ==, 0);
        g_assert_cmpint(oplog_forget_settled(f->log, NULL), ==, 0);
        g_assert_false(object_known(f->log, last));
        g_assert_cmpint(oplog_shrink(f->log), ==, 0);
        reopen(f, data);
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "g", 0644, 0, 0, &a), ==, 0);
        g_assert_cmpuint(a, >, last);
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "g", a), ==, 0);
        /* A snapshot goes on from where its log was. */
        snapdir = g_build_filename(f->dir, "snap", NULL);
        g_assert_cmpint(g_mkdir(snapdir, 0700), ==, 0);
        g_assert_cmpint(oplog_snapshot(f->log, snapdir), ==, 0);
        o.copy_content = data != NULL;
        g_assert_cmpint(oplog_open(&snap, snapdir, &o), ==, 0);
        g_assert_cmpint(oplog_record_create(snap, OPLOG_ROOT, "h", 0644, 0, 0, &b), ==, 0);
        g_assert_cmpuint(b, >, a);
        oplog_close(snap);
        g_free(snapdir);
}

/* The schema of a log made before ids were AUTOINCREMENT (@oldest: before
 * containers, conflict times and cached inodes too), with a few rows. */
static void make_old_log(const char *dir, bool oldest)
{
        GString *sql = g_string_new(NULL);
        char *path = g_build_filename(dir, "log.db", NULL);
        sqlite3 *db;

        g_assert_cmpint(g_mkdir(dir, 0700), ==, 0);
        g_string_append(sql,
                "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
                "CREATE TABLE objects("
                " lid INTEGER PRIMARY KEY, local INTEGER NOT NULL, type INTEGER NOT NULL,"
                " names INTEGER NOT NULL DEFAULT 1,"
                " srv_parent INTEGER, srv_name TEXT,"
                " b_ino INTEGER, b_size INTEGER, b_mtime INTEGER, b_ctime INTEGER, b_mode INTEGER,"
                " b_uid INTEGER, b_gid INTEGER, b_nlink INTEGER, b_content TEXT,"
                " orig_content TEXT, conflict INTEGER");
        g_string_append(sql, oldest ? ");" : ", c_ino INTEGER);");
        g_string_append(sql,
                "CREATE INDEX objects_ino ON objects(b_ino);"
                "CREATE TABLE ops("
                " seq INTEGER PRIMARY KEY AUTOINCREMENT, kind INTEGER NOT NULL, lid INTEGER NOT NULL,"
                " parent INTEGER, name TEXT, parent2 INTEGER, name2 TEXT, other INTEGER,"
                " flags INTEGER NOT NULL DEFAULT 0, mask INTEGER NOT NULL DEFAULT 0,"
                " mode INTEGER, uid INTEGER, gid INTEGER, rdev INTEGER, atime INTEGER, mtime INTEGER,"
                " size INTEGER, content TEXT, xname TEXT, xvalue BLOB,"
                " state INTEGER NOT NULL DEFAULT 0, outcome TEXT, intent INTEGER");
        g_string_append(sql, oldest ? ");" : ", container BLOB);");
        g_string_append(sql,
                "CREATE INDEX ops_lid ON ops(lid);"
                "CREATE INDEX ops_other ON ops(other) WHERE other IS NOT NULL;"
                "CREATE INDEX ops_parent ON ops(parent) WHERE parent IS NOT NULL;"
                "CREATE INDEX ops_parent2 ON ops(parent2) WHERE parent2 IS NOT NULL;"
                "CREATE TABLE aliases("
                " lid INTEGER NOT NULL, parent INTEGER NOT NULL, name TEXT NOT NULL,"
                " PRIMARY KEY (lid, parent, name));"
                "CREATE TABLE conflicts("
                " id INTEGER PRIMARY KEY, seq INTEGER, lid INTEGER, kind TEXT NOT NULL, path TEXT,"
                " base TEXT, local TEXT, remote TEXT, detail TEXT");
        g_string_append(sql, oldest ? ");" : ", recorded INTEGER NOT NULL DEFAULT 0,"
                                             " local_changed INTEGER NOT NULL DEFAULT 0);"
                                             "CREATE INDEX objects_cino ON objects(c_ino)"
                                             " WHERE c_ino IS NOT NULL;");
        /* The root, directory d (100), d/f (101), lid 4 gone (a create cancelled),
         * 5 made offline, its create held behind conflict 3. */
        g_string_append(sql,
                "INSERT INTO meta VALUES ('format', '1');"
                "INSERT INTO objects(lid, local, type, srv_parent, srv_name) VALUES"
                " (1, 0, 16384, 0, '');"
                "INSERT INTO objects(lid, local, type, srv_parent, srv_name, b_ino, b_size,"
                " b_mtime, b_ctime, b_mode, b_uid, b_gid, b_nlink) VALUES"
                " (2, 0, 16384, 1, 'd', 100, 4096, 7, 8, 16877, 0, 0, 2),"
                " (3, 0, 32768, 2, 'f', 101, 3, 9, 10, 33188, 1000, 1000, 2);"
                "INSERT INTO objects(lid, local, type, srv_parent, conflict) VALUES"
                " (5, 1, 32768, 0, 3);"
                "INSERT INTO ops(seq, kind, lid, parent, name, mode, uid, gid, state, outcome)"
                " VALUES (10, 2, 5, 2, 'new', 33188, 1000, 1000, 2, 'conflict');"
                "INSERT INTO ops(seq, kind, lid, mask, mode) VALUES (11, 9, 3, 1, 384);"
                "INSERT INTO aliases VALUES (3, 1, 'f-link');"
                "INSERT INTO conflicts(id, seq, lid, kind, path, base, local, remote, detail)"
                " VALUES (3, 10, 5, 'name/name', 'd/new', '', '', '', 'create: exists');");
        if (!oldest)
                g_string_append(sql, "UPDATE objects SET c_ino=b_ino WHERE b_ino IS NOT NULL;");
        g_assert_cmpint(sqlite3_open(path, &db), ==, SQLITE_OK);
        g_assert_cmpint(sqlite3_exec(db, sql->str, NULL, NULL, NULL), ==, SQLITE_OK);
        g_assert_cmpint(sqlite3_close(db), ==, SQLITE_OK);
        g_string_free(sql, TRUE);
        g_free(path);
}

static int64_t sql_int(struct oplog *log, const char *sql)
{
        sqlite3_stmt *st;
        int64_t v;

        g_assert_cmpint(sqlite3_prepare_v2(log->db, sql, -1, &st, NULL), ==, SQLITE_OK);
        g_assert_cmpint(sqlite3_step(st), ==, SQLITE_ROW);
        v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        return v;
}

static int all_records(void *ud, const struct oplog_record *r)
{
        GString *s = ud;

        g_string_append_printf(s, "%s%s:%" G_GUINT64_FORMAT ":%" G_GUINT64_FORMAT ":%s",
                               s->len ? " " : "", oplog_kind_to_string(r->kind), r->seq, r->lid,
                               oplog_state_to_string(r->state));
        return 0;
}

static int the_conflict(void *ud, const struct oplog_conflict *c)
{
        GString *s = ud;

        g_string_append_printf(s, "%" G_GUINT64_FORMAT ":%" G_GUINT64_FORMAT ":%" G_GUINT64_FORMAT
                               ":%s:%s;", c->id, c->seq, c->lid, c->kind, c->path);
        return 0;
}

/* The migrated log has every row make_old_log() made, with its id. */
static void assert_old_rows(struct oplog *log)
{
        GString *s = g_string_new(NULL);
        struct oplog_object o;
        uint64_t lid;

        g_assert_cmpint(oplog_object_load(log, 3, &o), ==, 0);
        g_assert_false(o.local);
        g_assert_cmpuint(o.srv_parent, ==, 2);
        g_assert_cmpstr(o.srv_name, ==, "f");
        g_assert_cmpuint(o.base.ino, ==, 101);
        g_assert_cmpuint(o.base.mode, ==, S_IFREG | 0644);
        g_assert_cmpint(o.base.mtime_ns, ==, 9);
        g_assert_cmpuint(o.base.nlink, ==, 2);
        oplog_object_clear(&o);
        g_assert_cmpint(oplog_object_load(log, 5, &o), ==, 0);
        g_assert_true(o.local);
        g_assert_cmpuint(o.conflict, ==, 3);
        oplog_object_clear(&o);
        g_assert_cmpint(oplog_object_load(log, 2, &o), ==, 0);
        g_assert_cmpuint(o.type, ==, S_IFDIR);
        g_assert_cmpuint(o.base.ino, ==, 100);
        oplog_object_clear(&o);
        g_assert_false(object_known(log, 4));
        g_assert_cmpint(oplog_find_ino(log, 101, &lid), ==, 0);
        g_assert_cmpuint(lid, ==, 3);
        g_assert_cmpint(oplog_foreach(log, false, all_records, s), ==, 0);
        /* (after the ones a test added since) */
        g_assert_true(g_str_has_prefix(s->str, "create:10:5:conflict setattr:11:3:pending"));
        g_string_truncate(s, 0);
        g_assert_cmpint(oplog_conflict_foreach(log, the_conflict, s), ==, 0);
        g_assert_true(g_str_has_prefix(s->str, "3:10:5:name/name:d/new;"));
        g_string_free(s, TRUE);
        g_assert_cmpint(sql_int(log, "SELECT count(*) FROM aliases WHERE lid=3"), ==, 1);
}

/*
 * A log an older build made (lids SQLite's max(rowid)+1) is migrated at
 * open: its objects and conflicts tables rebuilt AUTOINCREMENT with every
 * row and id, the indexes made again, the format 2; new ids go past the old
 * largest, also once the newest new object is gone and the log reopened.
 */
static void test_migrate_old_log(struct fixture *f, gconstpointer data)
{
        bool oldest = !g_strcmp0(data, "oldest");
        struct oplog_options o = OPLOG_OPTIONS_INIT;
        char *dir = g_build_filename(f->dir, "old", NULL);
        uint64_t lid, lid2, id, e;
        struct oplog *log;

        make_old_log(dir, oldest);
        g_assert_cmpint(oplog_open(&log, dir, &o), ==, 0);
        assert_old_rows(log);
        g_assert_cmpint(sql_int(log, "SELECT count(*) FROM sqlite_master WHERE type='table'"
                                     " AND name IN ('objects', 'conflicts')"
                                     " AND sql LIKE '%AUTOINCREMENT%'"), ==, 2);
        g_assert_cmpint(sql_int(log, "SELECT count(*) FROM sqlite_master WHERE name LIKE"
                                     " '%\\_new' ESCAPE '\\'"), ==, 0);
        g_assert_cmpint(sql_int(log, "SELECT count(*) FROM sqlite_master WHERE type='index'"
                                     " AND name IN ('objects_ino', 'objects_cino')"), ==, 2);
        g_assert_cmpint(sql_int(log, "SELECT value FROM meta WHERE key='format'"), ==, 3);
        g_assert_cmpint(sql_int(log, "PRAGMA integrity_check = 1") , ==, 0);
        /* New ids go past the old largest (lid 5, conflict 3). */
        g_assert_cmpint(oplog_record_create(log, 2, "later", 0644, 0, 0, &lid), ==, 0);
        g_assert_cmpuint(lid, >, 5);
        id = add_conflict(log, lid);
        g_assert_cmpuint(id, >, 3);
        g_assert_cmpint(oplog_record_create(log, 2, "gone", 0644, 0, 0, &e), ==, 0);
        g_assert_cmpint(oplog_record_unlink(log, 2, "gone", e), ==, 0);
        g_assert_false(object_known(log, e));
        oplog_close(log);
        /* Open again: nothing more to migrate, the rows as they were. */
        g_assert_cmpint(oplog_open(&log, dir, &o), ==, 0);
        assert_old_rows(log);
        g_assert_cmpint(oplog_record_create(log, 2, "again", 0644, 0, 0, &lid2), ==, 0);
        g_assert_cmpuint(lid2, >, e);
        g_assert_cmpint(sql_int(log, "SELECT value FROM meta WHERE key='format'"), ==, 3);
        oplog_close(log);
        g_free(dir);
}

/* A log of a format newer than this code's is refused and left as it was. */
static void test_newer_format_refused(struct fixture *f, gconstpointer data)
{
        struct oplog_options o = OPLOG_OPTIONS_INIT;
        char *dir = g_build_filename(f->dir, "log", NULL);
        char *path = g_build_filename(dir, "log.db", NULL);
        struct oplog *log = NULL;
        uint64_t lid;
        sqlite3 *db;

        (void)data;
        g_assert_cmpint(sql_int(f->log, "SELECT value FROM meta WHERE key='format'"), ==, 3);
        g_assert_cmpint(oplog_record_create(f->log, 1, "kept", 0644, 0, 0, &lid), ==, 0);
        oplog_close(f->log);
        f->log = NULL;
        g_assert_cmpint(sqlite3_open(path, &db), ==, SQLITE_OK);
        g_assert_cmpint(sqlite3_exec(db, "UPDATE meta SET value='99' WHERE key='format'", NULL,
                                     NULL, NULL), ==, SQLITE_OK);
        g_assert_cmpint(sqlite3_close(db), ==, SQLITE_OK);
        g_assert_cmpint(oplog_open(&log, dir, &o), ==, -EPROTONOSUPPORT);
        g_assert_null(log);
        g_assert_cmpint(sqlite3_open(path, &db), ==, SQLITE_OK);
        g_assert_cmpint(sqlite3_exec(db, "UPDATE meta SET value='3' WHERE key='format'", NULL,
                                     NULL, NULL), ==, SQLITE_OK);
        g_assert_cmpint(sqlite3_close(db), ==, SQLITE_OK);
        /* Back at this code's format: the record is still there. */
        g_assert_cmpint(oplog_open(&f->log, dir, &o), ==, 0);
        g_assert_cmpint(sql_int(f->log, "SELECT count(*) FROM ops WHERE name='kept'"), ==, 1);
        g_free(path);
        g_free(dir);
}

/* The create's mode and the setattr's times, as oplog_settle_deferred() wrote them. */
struct settled {
        uint32_t create_mode;
        unsigned create_flags;
        unsigned setattr_mask;
        uint32_t setattr_mode;
        int64_t atime_ns, mtime_ns;
        uint64_t size;
};

static int settled_of(void *ud, const struct oplog_record *r)
{
        struct settled *s = ud;

        if (r->kind == OPLOG_CREATE) {
                s->create_mode = r->mode;
                s->create_flags = r->flags;
        }
        if (r->kind == OPLOG_SETATTR) {
                s->setattr_mask = r->mask;
                s->setattr_mode = r->mode;
                s->atime_ns = r->atime_ns;
                s->mtime_ns = r->mtime_ns;
        }
        if (r->kind == OPLOG_CONTENT)
                s->size = r->size;
        return 0;
}

/*
 * A create named with its container: the object's setattrs and writes need
 * no record while it is pending (also after a reopen); settling turns the
 * container's mode, times and bytes into records; a cancelled one leaves
 * nothing counted.  Without handles (the copy fixture) it is a plain create.
 */
static void test_create_deferred(struct fixture *f, gconstpointer data)
{
        struct timespec ts[2] = { { 1000, 111 }, { 2000, 222 } };
        struct settled s = { 0 };
        char *path = g_build_filename(f->dir, "made", NULL), *log_path;
        int dfd = open(f->dir, O_RDONLY | O_DIRECTORY), fd;
        uint64_t lid, gone;

        g_assert_cmpint(dfd, >=, 0);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(oplog_record_create_deferred(f->log, OPLOG_ROOT, "made", 0600, 0, 0, dfd,
                                                     "made", &lid), ==, 0);
        if (data) {
                g_assert_cmpint(oplog_deferred_change(f->log, lid, fd), ==, 0);
                goto out;
        }
        g_assert_cmpint(pwrite(fd, "hello\n", 6, 0), ==, 6);
        g_assert_cmpint(fchmod(fd, 0640), ==, 0);
        g_assert_cmpint(futimens(fd, ts), ==, 0);
        g_assert_cmpint(oplog_deferred_change(f->log, lid, fd), ==, 1);
        g_assert_cmpuint(f->log->content_bytes, ==, 6);
        g_assert_cmpint(oplog_deferred_change(f->log, lid, -1), ==, 1);
        assert_records(f, "create:made");
        /* Deferred still after a reopen, its container counted again. */
        oplog_close(f->log);
        log_path = g_build_filename(f->dir, "log", NULL);
        g_assert_cmpint(oplog_open(&f->log, log_path, NULL), ==, 0);
        g_free(log_path);
        g_assert_cmpuint(f->log->content_bytes, ==, 6);
        g_assert_cmpint(oplog_deferred_change(f->log, lid, -1), ==, 1);
        g_assert_cmpint(oplog_settle_deferred(f->log), ==, 0);
        assert_records(f, "create:made setattr content");
        g_assert_cmpint(oplog_foreach(f->log, true, settled_of, &s), ==, 0);
        g_assert_cmpuint(s.create_mode, ==, 0640);
        g_assert_cmpint(s.atime_ns, ==, 1000 * 1000000000LL + 111);
        g_assert_cmpint(s.mtime_ns, ==, 2000 * 1000000000LL + 222);
        g_assert_cmpuint(s.size, ==, 6);
        g_assert_cmpuint(f->log->content_bytes, ==, 6);
        /* Settled: its changes are records again. */
        g_assert_cmpint(oplog_deferred_change(f->log, lid, fd), ==, 0);
        /* A deferred create cancelled by its unlink leaves nothing counted. */
        close(fd);
        g_free(path);
        path = g_build_filename(f->dir, "tmp", NULL);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
        g_assert_cmpint(oplog_record_create_deferred(f->log, OPLOG_ROOT, "tmp", 0600, 0, 0, dfd,
                                                     "tmp", &gone), ==, 0);
        g_assert_cmpint(pwrite(fd, "scratch", 7, 0), ==, 7);
        g_assert_cmpint(oplog_deferred_change(f->log, gone, fd), ==, 1);
        g_assert_cmpuint(f->log->content_bytes, ==, 13);
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "tmp", gone), ==, 0);
        g_assert_cmpuint(f->log->content_bytes, ==, 6);
        assert_records(f, "create:made setattr content");
out:
        close(fd);
        close(dfd);
        g_free(path);
}

/*
 * A deferred create in doubt (its first try may have reached the server)
 * keeps the mode it was made with when settled, by which the replay knows
 * the server's file as its own; a chmod made since is a setattr of its own.
 */
static void test_create_deferred_in_doubt(struct fixture *f, gconstpointer data)
{
        struct settled s = { 0 };
        char *path = g_build_filename(f->dir, "made", NULL);
        int dfd = open(f->dir, O_RDONLY | O_DIRECTORY), fd;
        uint64_t lid;

        (void)data;
        g_assert_cmpint(dfd, >=, 0);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(fchmod(fd, 0644), ==, 0);
        g_assert_cmpint(oplog_record_create_deferred(f->log, OPLOG_ROOT, "made", 0644, 0, 0, dfd,
                                                     "made", &lid), ==, 0);
        g_assert_cmpint(oplog_mark_in_doubt(f->log, lid), ==, 0);
        g_assert_cmpint(pwrite(fd, "hello\n", 6, 0), ==, 6);
        g_assert_cmpint(fchmod(fd, 0640), ==, 0);
        g_assert_cmpint(oplog_deferred_change(f->log, lid, fd), ==, 1);
        g_assert_cmpint(oplog_deferred_change(f->log, lid, -1), ==, 1);
        g_assert_cmpint(oplog_settle_deferred(f->log), ==, 0);
        assert_records(f, "create:made content setattr");
        g_assert_cmpint(oplog_foreach(f->log, true, settled_of, &s), ==, 0);
        g_assert_cmpuint(s.create_mode, ==, 0644);
        g_assert_true(s.create_flags & OPLOG_IN_DOUBT);
        g_assert_true(s.setattr_mask & OPLOG_SET_MODE);
        g_assert_false(s.setattr_mask & (OPLOG_SET_UID | OPLOG_SET_GID));
        g_assert_cmpuint(s.setattr_mode, ==, 0640);
        g_assert_cmpuint(s.size, ==, 6);
        close(fd);
        g_free(path);

        /* Renamed over a file offline (an atomic save: its create unlinked,
         * kept being in doubt): its bytes are the other file's now, and it
         * settles as a plain create, nothing after its unlink. */
        path = g_build_filename(f->dir, "tmp", NULL);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(oplog_record_create_deferred(f->log, OPLOG_ROOT, "tmp", 0644, 0, 0, dfd,
                                                     "tmp", &lid), ==, 0);
        g_assert_cmpint(oplog_mark_in_doubt(f->log, lid), ==, 0);
        g_assert_cmpint(pwrite(fd, "saved\n", 6, 0), ==, 6);
        g_assert_cmpint(renameat(dfd, "tmp", dfd, "saved"), ==, 0);
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "tmp", lid), ==, 0);
        g_assert_cmpint(oplog_settle_deferred(f->log), ==, 0);
        assert_records(f, "create:made content setattr create:tmp unlink:tmp");
        close(fd);
        close(dfd);
        g_free(path);
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
#define T(name, fn) g_test_add("/fcache/offline/oplog/" name, struct fixture, NULL, setup, fn, teardown)
        g_test_add("/fcache/offline/oplog/shrink", struct fixture, "copy", setup, test_shrink,
                   teardown);
        T("durable-reopen", test_durable_reopen);
        g_test_add("/fcache/offline/oplog/durable-reopen-copy", struct fixture, "copy", setup,
                   test_durable_reopen, teardown);
        T("invalid", test_invalid);
        T("writes-coalesce", test_writes_coalesce);
        T("replaying-barrier", test_replaying_barrier);
        T("cached-ino", test_cached_ino);
        g_test_add("/fcache/offline/oplog/writes-coalesce-copy", struct fixture, "copy", setup,
                   test_writes_coalesce, teardown);
        g_test_add("/fcache/offline/oplog/create-unlink-cancels", struct fixture, "copy", setup,
                   test_create_unlink_cancels, teardown);
        T("container-named", test_container_named);
        T("cancel-keeps-replaced-unlink", test_cancel_keeps_replaced_unlink);
        T("in-doubt-kept", test_in_doubt_kept);
        T("link-blocks-cancel", test_link_blocks_cancel);
        T("unlink-server-file-drops-edits", test_unlink_server_file_drops_edits);
        T("setattr-merges", test_setattr_merges);
        T("setattr-merge-order", test_setattr_merge_order);
        T("durable-grouped", test_durable_grouped);
        T("xattr-replaces", test_xattr_replaces);
        T("rename-chain", test_rename_chain);
        T("rename-chain-kept-when-name-reused", test_rename_chain_kept_when_name_reused);
        T("rename-chain-kept-when-source-dir-removed",
          test_rename_chain_kept_when_source_dir_removed);
        T("rename-chain-kept-when-a-directory-moved-in",
          test_rename_chain_kept_when_a_directory_moved_in);
        T("exchange-not-collapsed", test_exchange_not_collapsed);
        T("object-identity", test_object_identity);
        T("max-bytes-enospc", test_max_bytes_enospc);
        T("ids-never-reused", test_ids_never_reused);
        g_test_add("/fcache/offline/oplog/ids-never-reused-copy", struct fixture, "copy", setup,
                   test_ids_never_reused, teardown);
        T("migrate-old-log", test_migrate_old_log);
        T("create-deferred", test_create_deferred);
        T("newer-format-refused", test_newer_format_refused);
        T("create-deferred-in-doubt", test_create_deferred_in_doubt);
        g_test_add("/fcache/offline/oplog/create-deferred-copy", struct fixture, "copy", setup,
                   test_create_deferred, teardown);
        g_test_add("/fcache/offline/oplog/migrate-oldest-log", struct fixture, "oldest", setup,
                   test_migrate_old_log, teardown);
        return g_test_run();
}
