/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-reintegrate.c: reintegration against a real backing directory.
 * Offline changes of every kind with an unchanged server apply exactly (the
 * server ends as a tree written out by hand); server-side changes made
 * while offline give exactly the expected clean merges and conflicts, with
 * every version retrievable; a second run changes nothing; the dry run
 * predicts and changes nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "oplog.h"
#include "reintegrate.h"
#include "tree.h"

static struct reintegrate_stats run(struct server_fixture *f)
{
        struct reintegrate_options o = REINTEGRATE_OPTIONS_INIT;
        struct reintegrate_stats st;

        o.refresh = fixture_refresh;
        o.userdata = f;
        g_assert_cmpint(reintegrate_run(f->log, f->srv, &o, &st), ==, 0);
        return st;
}

struct conflicts {
        GString *kinds;
        char base[FCACHE_MERGE_ID_SIZE], local[FCACHE_MERGE_ID_SIZE], remote[FCACHE_MERGE_ID_SIZE];
        char path[256];
};

static int on_conflict(void *ud, const struct oplog_conflict *c)
{
        struct conflicts *cs = ud;

        if (cs->kinds->len)
                g_string_append_c(cs->kinds, ' ');
        g_string_append(cs->kinds, c->kind);
        snprintf(cs->base, sizeof(cs->base), "%s", c->base);
        snprintf(cs->local, sizeof(cs->local), "%s", c->local);
        snprintf(cs->remote, sizeof(cs->remote), "%s", c->remote);
        snprintf(cs->path, sizeof(cs->path), "%s", c->path);
        return 0;
}

/* The conflict kinds in order; the last conflict's ids in *cs. */
static char *conflicts(struct server_fixture *f, struct conflicts *cs)
{
        struct conflicts local_cs;

        if (!cs)
                cs = &local_cs;
        memset(cs, 0, sizeof(*cs));
        cs->kinds = g_string_new(NULL);
        g_assert_cmpint(oplog_conflict_foreach(f->log, on_conflict, cs), ==, 0);
        return g_string_free(cs->kinds, FALSE);
}

static void assert_blob(struct server_fixture *f, const char *id, const char *text)
{
        void *data;
        size_t size;

        g_assert_cmpint(fcache_merge_store_get(&data, &size, oplog_store(f->log), id), ==, 0);
        g_assert_cmpuint(size, ==, strlen(text));
        g_assert_cmpmem(data, size, text, strlen(text));
        free(data);
}

static void assert_no_conflicts(struct server_fixture *f)
{
        char *kinds = conflicts(f, NULL);

        g_assert_cmpstr(kinds, ==, "");
        g_free(kinds);
}

static void assert_no_pending(struct server_fixture *f)
{
        uint64_t n;

        g_assert_cmpint(oplog_count(f->log, OPLOG_PENDING, &n), ==, 0);
        g_assert_cmpuint(n, ==, 0);
}

/* A second tree, built by hand with the expected result. */
static int model(struct server_fixture *f)
{
        char *path = g_build_filename(f->dir, "model", NULL);
        int fd;

        g_assert_cmpint(mkdir(path, 0755), ==, 0);
        fd = open(path, O_RDONLY | O_DIRECTORY);
        g_assert_cmpint(fd, >=, 0);
        g_free(path);
        return fd;
}

static void assert_same_tree(int a, int b)
{
        char *da = tree_dump(a, false), *db = tree_dump(b, false);

        g_assert_cmpstr(da, ==, db);
        g_free(da);
        g_free(db);
}

static void test_every_kind(struct server_fixture *f, gconstpointer data)
{
        uint64_t a, b, x, y, old, empty, nd, nf, ns, fifo, tmp, gone;
        struct oplog_setattr sa = { .mask = OPLOG_SET_MODE | OPLOG_SET_MTIME | OPLOG_SET_ATIME,
                                    .mode = 0600, .atime = { 1500000000, 0 },
                                    .mtime = { 1600000000, 0 } };
        struct reintegrate_stats st;
        struct stat sst;
        char *before;
        int m;

        g_assert_cmpint(mkdirat(f->srv, "d", 0755), ==, 0);
        g_assert_cmpint(mkdirat(f->srv, "empty", 0755), ==, 0);
        tree_put(f->srv, "d/a", "alpha\n");
        tree_put(f->srv, "b", "beta\n");
        tree_put(f->srv, "x", "ex\n");
        tree_put(f->srv, "y", "why\n");
        tree_put(f->srv, "old", "replaced by a rename\n");
        tree_put(f->srv, "gone", "deleted offline\n");
        tree_register(f->log, f->srv, "d");
        a = tree_register(f->log, f->srv, "d/a");
        b = tree_register(f->log, f->srv, "b");
        x = tree_register(f->log, f->srv, "x");
        y = tree_register(f->log, f->srv, "y");
        old = tree_register(f->log, f->srv, "old");
        empty = tree_register(f->log, f->srv, "empty");
        gone = tree_register(f->log, f->srv, "gone");

        /* Offline: one change of every kind. */
        fixture_local(f, a, "alpha, edited offline\n");
        g_assert_cmpint(oplog_record_setattr(f->log, a, &sa), ==, 0);
        g_assert_cmpint(oplog_record_setxattr(f->log, a, "user.note", "kept", 4, 0), ==, 0);
        g_assert_cmpint(oplog_record_mkdir(f->log, OPLOG_ROOT, "new", 0750, 0, 0, &nd), ==, 0);
        g_assert_cmpint(oplog_record_create(f->log, nd, "file", 0640, 0, 0, &nf), ==, 0);
        fixture_local(f, nf, "created offline\n");
        g_assert_cmpint(oplog_record_symlink(f->log, nd, "link", "../b", 0, 0, &ns), ==, 0);
        g_assert_cmpint(oplog_record_mknod(f->log, nd, "fifo", S_IFIFO | 0600, 0, 0, 0, &fifo), ==, 0);
        g_assert_cmpint(oplog_record_link(f->log, a, nd, "hard"), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "b", b, OPLOG_ROOT, "b-moved", 0,
                                            RENAME_NOREPLACE), ==, 0);
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "x", x, OPLOG_ROOT, "y", y,
                                            RENAME_EXCHANGE), ==, 0);
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, ".old.tmp", 0644, 0, 0, &tmp), ==, 0);
        fixture_local(f, tmp, "the new old\n");
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, ".old.tmp", tmp, OPLOG_ROOT, "old",
                                            old, 0), ==, 0);
        g_assert_cmpint(oplog_record_rmdir(f->log, OPLOG_ROOT, "empty", empty), ==, 0);
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "gone", gone), ==, 0);
        g_assert_cmpint(oplog_record_removexattr(f->log, a, "user.none"), ==, 0);
        g_assert_cmpint(oplog_record_setxattr(f->log, nd, "user.dir", "yes", 3, 0), ==, 0);

        /* The expected server, built by hand. */
        m = model(f);
        g_assert_cmpint(mkdirat(m, "d", 0755), ==, 0);
        tree_put(m, "d/a", "alpha, edited offline\n");
        g_assert_cmpint(fchmodat(m, "d/a", 0600, 0), ==, 0);
        {
                int fd = openat(m, "d/a", O_RDONLY);

                g_assert_cmpint(fsetxattr(fd, "user.note", "kept", 4, 0), ==, 0);
                close(fd);
        }
        tree_put(m, "b-moved", "beta\n");
        tree_put(m, "x", "why\n");
        tree_put(m, "y", "ex\n");
        tree_put(m, "old", "the new old\n");
        g_assert_cmpint(mkdirat(m, "new", 0750), ==, 0);
        g_assert_cmpint(fchmodat(m, "new", 0750, 0), ==, 0);
        {
                int fd = openat(m, "new", O_RDONLY | O_DIRECTORY);

                g_assert_cmpint(fsetxattr(fd, "user.dir", "yes", 3, 0), ==, 0);
                close(fd);
        }
        tree_put(m, "new/file", "created offline\n");
        g_assert_cmpint(fchmodat(m, "new/file", 0640, 0), ==, 0);
        g_assert_cmpint(symlinkat("../b", m, "new/link"), ==, 0);
        g_assert_cmpint(mknodat(m, "new/fifo", S_IFIFO | 0600, 0), ==, 0);
        g_assert_cmpint(linkat(m, "d/a", m, "new/hard", 0), ==, 0);

        st = run(f);
        g_assert_cmpuint(st.conflicts, ==, 0);
        g_assert_cmpuint(st.held, ==, 0);
        g_assert_cmpuint(st.merged, ==, 0);
        g_assert_cmpuint(st.already, ==, 1); /* removing an xattr the server never had */
        g_assert_cmpuint(st.applied + st.already, ==, st.total);
        assert_no_pending(f);
        g_assert_cmpint(fstatat(f->srv, "d/a", &sst, 0), ==, 0);
        g_assert_cmpint(sst.st_mtim.tv_sec, ==, 1600000000);
        g_assert_cmpint(sst.st_atim.tv_sec, ==, 1500000000);
        assert_same_tree(f->srv, m);
        assert_no_conflicts(f);

        /* Replaying again changes nothing. */
        before = tree_dump(f->srv, true);
        st = run(f);
        g_assert_cmpuint(st.total, ==, 0);
        {
                char *after = tree_dump(f->srv, true);

                g_assert_cmpstr(before, ==, after);
                g_free(after);
        }
        g_free(before);
        close(m);
}

static void test_clean_merge(struct server_fixture *f, gconstpointer data)
{
        uint64_t a;
        struct reintegrate_stats st;
        char *text;

        tree_put(f->srv, "a", "1\n2\n3\n4\n5\n6\n7\n");
        a = tree_register(f->log, f->srv, "a");
        fixture_local(f, a, "one\n2\n3\n4\n5\n6\n7\n");
        tree_put(f->srv, "a", "1\n2\n3\n4\n5\n6\nseven\n"); /* the server's edit while offline */
        st = run(f);
        g_assert_cmpuint(st.merged, ==, 1);
        g_assert_cmpuint(st.conflicts, ==, 0);
        g_assert_cmpuint(f->refreshed, ==, 1);
        text = tree_get(f->srv, "a");
        g_assert_cmpstr(text, ==, "one\n2\n3\n4\n5\n6\nseven\n");
        g_free(text);
        assert_no_pending(f);
}

static void test_content_conflict(struct server_fixture *f, gconstpointer data)
{
        struct conflicts cs;
        struct reintegrate_stats st;
        uint64_t a;
        char *kinds, *text;

        tree_put(f->srv, "a", "1\n2\n3\n");
        a = tree_register(f->log, f->srv, "a");
        fixture_local(f, a, "1\nlocal\n3\n");
        /* A later offline rename of it is held behind the conflict, not dropped. */
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", a, OPLOG_ROOT, "a2", 0, 0), ==, 0);
        tree_put(f->srv, "a", "1\nremote\n3\n");
        st = run(f);
        g_assert_cmpuint(st.conflicts, ==, 1);
        g_assert_cmpuint(st.held, ==, 1);
        kinds = conflicts(f, &cs);
        g_assert_cmpstr(kinds, ==, "content");
        g_assert_cmpstr(cs.path, ==, "/a");
        {
                char kind[32];

                g_assert_cmpint(oplog_object_conflict(f->log, a, kind), ==, 1);
                g_assert_cmpstr(kind, ==, "content");
                g_assert_cmpint(oplog_object_conflict(f->log, OPLOG_ROOT, kind), ==, 0);
        }
        assert_blob(f, cs.base, "1\n2\n3\n");
        assert_blob(f, cs.local, "1\nlocal\n3\n");
        assert_blob(f, cs.remote, "1\nremote\n3\n");
        text = tree_get(f->srv, "a"); /* nothing overwritten */
        g_assert_cmpstr(text, ==, "1\nremote\n3\n");
        g_free(text);
        g_free(kinds);
}

static void test_binary_conflict(struct server_fixture *f, gconstpointer data)
{
        struct reintegrate_stats st;
        uint64_t a;
        char *kinds;

        tree_put(f->srv, "bin", "x");
        a = tree_register(f->log, f->srv, "bin");
        fixture_new_scratch(f);
        g_assert_cmpint(pwrite(f->scratch, "\0local", 6, 0), ==, 6);
        g_assert_cmpint(oplog_record_content(f->log, a, f->scratch), ==, 0);
        {
                int fd = openat(f->srv, "bin", O_WRONLY | O_TRUNC);

                g_assert_cmpint(write(fd, "\0remote", 7), ==, 7);
                close(fd);
        }
        st = run(f);
        g_assert_cmpuint(st.conflicts, ==, 1);
        kinds = conflicts(f, NULL);
        g_assert_cmpstr(kinds, ==, "binary");
        g_free(kinds);
}

static void test_edit_delete(struct server_fixture *f, gconstpointer data)
{
        struct conflicts cs;
        uint64_t a;
        char *kinds;

        tree_put(f->srv, "a", "base\n");
        a = tree_register(f->log, f->srv, "a");
        fixture_local(f, a, "edited here\n");
        g_assert_cmpint(unlinkat(f->srv, "a", 0), ==, 0);
        run(f);
        kinds = conflicts(f, &cs);
        g_assert_cmpstr(kinds, ==, "edit-delete");
        assert_blob(f, cs.local, "edited here\n");
        assert_blob(f, cs.base, "base\n");
        g_assert_null(tree_get(f->srv, "a")); /* not resurrected silently either */
        g_free(kinds);
}

static void test_delete_edit(struct server_fixture *f, gconstpointer data)
{
        struct conflicts cs;
        uint64_t a;
        char *kinds, *text;

        tree_put(f->srv, "a", "base\n");
        a = tree_register(f->log, f->srv, "a");
        g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "a", a), ==, 0);
        tree_put(f->srv, "a", "edited on the server\n");
        run(f);
        kinds = conflicts(f, &cs);
        g_assert_cmpstr(kinds, ==, "delete-edit");
        assert_blob(f, cs.remote, "edited on the server\n");
        text = tree_get(f->srv, "a");
        g_assert_cmpstr(text, ==, "edited on the server\n");
        g_free(text);
        g_free(kinds);
}

static int held_content(void *ud, const struct oplog_record *r)
{
        if (r->kind == OPLOG_CONTENT && r->state == OPLOG_HELD)
                *(uint64_t *)ud = r->seq;
        return 0;
}

static void test_create_create(struct server_fixture *f, gconstpointer data)
{
        struct reintegrate_stats st;
        struct conflicts cs;
        uint64_t n;
        char *kinds, *text;

        tree_register(f->log, f->srv, "");
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "same", 0644, 0, 0, &n), ==, 0);
        fixture_local(f, n, "mine\n");
        tree_put(f->srv, "same", "theirs\n");
        st = run(f);
        g_assert_cmpuint(st.conflicts, ==, 1);
        g_assert_cmpuint(st.held, ==, 1); /* the content waits behind the conflict */
        kinds = conflicts(f, &cs);
        g_assert_cmpstr(kinds, ==, "create-create");
        assert_blob(f, cs.remote, "theirs\n");
        assert_blob(f, cs.local, "mine\n"); /* the held content is the local version */
        text = tree_get(f->srv, "same");
        g_assert_cmpstr(text, ==, "theirs\n");
        g_free(text);
        g_free(kinds);
        /* The held record keeps its bytes, whatever the mirror's container becomes. */
        g_assert_cmpint(ftruncate(f->scratch, 0), ==, 0);
        g_assert_cmpint(pwrite(f->scratch, "resynced\n", 9, 0), ==, 9);
        {
                uint64_t seq = 0;
                char buf[16] = "";
                int fd;

                g_assert_cmpint(oplog_foreach(f->log, false, held_content, &seq), ==, 0);
                g_assert_cmpuint(seq, !=, 0);
                fd = oplog_content_open(f->log, seq);
                g_assert_cmpint(fd, >=, 0);
                g_assert_cmpint(pread(fd, buf, sizeof(buf) - 1, 0), ==, 5);
                g_assert_cmpstr(buf, ==, "mine\n");
                close(fd);
        }
}

static void test_rename_delete(struct server_fixture *f, gconstpointer data)
{
        uint64_t a;
        char *kinds;

        tree_put(f->srv, "a", "base\n");
        a = tree_register(f->log, f->srv, "a");
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", a, OPLOG_ROOT, "b", 0, 0), ==, 0);
        g_assert_cmpint(unlinkat(f->srv, "a", 0), ==, 0);
        run(f);
        kinds = conflicts(f, NULL);
        g_assert_cmpstr(kinds, ==, "rename-delete");
        g_assert_null(tree_get(f->srv, "b"));
        g_free(kinds);
}

/* A rename over one name of a file with another, that file edited on the
 * server: only a link goes, the edit stays under the other name. */
static void test_rename_over_a_link(struct server_fixture *f, gconstpointer data)
{
        uint64_t a, b;
        char *text;

        tree_put(f->srv, "a", "mine\n");
        tree_put(f->srv, "b", "base\n");
        g_assert_cmpint(linkat(f->srv, "b", f->srv, "c", 0), ==, 0);
        a = tree_register(f->log, f->srv, "a");
        b = tree_register(f->log, f->srv, "b");
        g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", a, OPLOG_ROOT, "b", b, 0),
                        ==, 0);
        tree_put(f->srv, "c", "edited on the server\n");      /* in place: b too */
        run(f);
        assert_no_conflicts(f);
        text = tree_get(f->srv, "b");
        g_assert_cmpstr(text, ==, "mine\n");
        g_free(text);
        text = tree_get(f->srv, "c");
        g_assert_cmpstr(text, ==, "edited on the server\n");
        g_free(text);
}

static void test_mode(struct server_fixture *f, gconstpointer data)
{
        struct oplog_setattr sa = { .mask = OPLOG_SET_MODE, .mode = 0600 };
        struct stat st;
        uint64_t a, b;
        char *kinds, *text;

        tree_put(f->srv, "a", "a\n");
        tree_put(f->srv, "b", "b\n");
        a = tree_register(f->log, f->srv, "a");
        b = tree_register(f->log, f->srv, "b");
        /* a: both changed the mode, differently: a conflict. */
        g_assert_cmpint(oplog_record_setattr(f->log, a, &sa), ==, 0);
        g_assert_cmpint(fchmodat(f->srv, "a", 0640, 0), ==, 0);
        /* b: mode here, content there: both kept. */
        g_assert_cmpint(oplog_record_setattr(f->log, b, &sa), ==, 0);
        tree_put(f->srv, "b", "b, edited on the server\n");
        run(f);
        kinds = conflicts(f, NULL);
        g_assert_cmpstr(kinds, ==, "mode");
        g_assert_cmpint(fstatat(f->srv, "a", &st, 0), ==, 0);
        g_assert_cmpuint(st.st_mode & 07777, ==, 0640);
        g_assert_cmpint(fstatat(f->srv, "b", &st, 0), ==, 0);
        g_assert_cmpuint(st.st_mode & 07777, ==, 0600);
        text = tree_get(f->srv, "b");
        g_assert_cmpstr(text, ==, "b, edited on the server\n");
        g_free(text);
        g_free(kinds);
}

static void test_content_with_server_chmod(struct server_fixture *f, gconstpointer data)
{
        struct reintegrate_stats st;
        struct stat sst;
        uint64_t a;
        char *text;

        tree_put(f->srv, "a", "base\n");
        a = tree_register(f->log, f->srv, "a");
        fixture_local(f, a, "local\n");
        g_assert_cmpint(fchmodat(f->srv, "a", 0600, 0), ==, 0);
        st = run(f);
        g_assert_cmpuint(st.applied, ==, 1);
        text = tree_get(f->srv, "a");
        g_assert_cmpstr(text, ==, "local\n");
        g_assert_cmpint(fstatat(f->srv, "a", &sst, 0), ==, 0);
        g_assert_cmpuint(sst.st_mode & 07777, ==, 0600);
        g_free(text);
}

/* Content goes into the server's file in place: its inode, its other
 * links and its set-id bits stay, a plain edit and a merge alike. */
static void test_content_in_place(struct server_fixture *f, gconstpointer data)
{
        struct reintegrate_stats st;
        struct stat a0, b0, a1, b1;
        uint64_t a, b;
        char *text;

        tree_put(f->srv, "a", "base\n");
        tree_put(f->srv, "b", "1\n2\n3\n4\n5\n6\n7\n");
        g_assert_cmpint(linkat(f->srv, "a", f->srv, "a2", 0), ==, 0);
        g_assert_cmpint(fchmodat(f->srv, "b", 04755, 0), ==, 0);
        g_assert_cmpint(fstatat(f->srv, "a", &a0, 0), ==, 0);
        g_assert_cmpint(fstatat(f->srv, "b", &b0, 0), ==, 0);
        a = tree_register(f->log, f->srv, "a");
        b = tree_register(f->log, f->srv, "b");
        fixture_local(f, a, "local\n");
        fixture_local(f, b, "one\n2\n3\n4\n5\n6\n7\n");
        tree_put(f->srv, "b", "1\n2\n3\n4\n5\n6\nseven\n");
        g_assert_cmpint(fstatat(f->srv, "b", &b0, 0), ==, 0);
        st = run(f);
        g_assert_cmpuint(st.applied, ==, 1);
        g_assert_cmpuint(st.merged, ==, 1);
        g_assert_cmpint(fstatat(f->srv, "a", &a1, 0), ==, 0);
        g_assert_cmpint(fstatat(f->srv, "b", &b1, 0), ==, 0);
        g_assert_cmpuint(a1.st_ino, ==, a0.st_ino);
        g_assert_cmpuint(a1.st_nlink, ==, 2);
        g_assert_cmpuint(b1.st_ino, ==, b0.st_ino);
        g_assert_cmpuint(b1.st_mode & 07777, ==, b0.st_mode & 07777);
        text = tree_get(f->srv, "a2");
        g_assert_cmpstr(text, ==, "local\n");
        g_free(text);
        text = tree_get(f->srv, "b");
        g_assert_cmpstr(text, ==, "one\n2\n3\n4\n5\n6\nseven\n");
        g_free(text);
        assert_no_pending(f);
}

static bool always_written_through(void *ud, uint64_t lid)
{
        return true;
}

/* A file whose writer writes the server's file directly: its content
 * record is the server's, never written over it. */
static void test_written_through(struct server_fixture *f, gconstpointer data)
{
        struct reintegrate_options o = REINTEGRATE_OPTIONS_INIT;
        struct reintegrate_stats st;
        uint64_t a;
        char *text;

        tree_put(f->srv, "a", "base\n");
        a = tree_register(f->log, f->srv, "a");
        fixture_local(f, a, "older\n");
        tree_put(f->srv, "a", "newer, written through\n");
        o.written_through = always_written_through;
        o.userdata = f;
        g_assert_cmpint(reintegrate_run(f->log, f->srv, &o, &st), ==, 0);
        g_assert_cmpuint(st.already, ==, 1);
        text = tree_get(f->srv, "a");
        g_assert_cmpstr(text, ==, "newer, written through\n");
        g_free(text);
        assert_no_conflicts(f);
        assert_no_pending(f);
}

static void test_children_delete(struct server_fixture *f, gconstpointer data)
{
        struct reintegrate_stats st;
        uint64_t d, n;
        char *kinds;

        g_assert_cmpint(mkdirat(f->srv, "d", 0755), ==, 0);
        d = tree_register(f->log, f->srv, "d");
        g_assert_cmpint(oplog_record_create(f->log, d, "new", 0644, 0, 0, &n), ==, 0);
        fixture_local(f, n, "new\n");
        g_assert_cmpint(unlinkat(f->srv, "d", AT_REMOVEDIR), ==, 0);
        st = run(f);
        g_assert_cmpuint(st.conflicts, ==, 1);
        g_assert_cmpuint(st.held, ==, 1);
        kinds = conflicts(f, NULL);
        g_assert_cmpstr(kinds, ==, "children-delete");
        g_free(kinds);
}

static void test_delete_children(struct server_fixture *f, gconstpointer data)
{
        uint64_t d;
        char *kinds, *text;

        g_assert_cmpint(mkdirat(f->srv, "d", 0755), ==, 0);
        d = tree_register(f->log, f->srv, "d");
        g_assert_cmpint(oplog_record_rmdir(f->log, OPLOG_ROOT, "d", d), ==, 0);
        tree_put(f->srv, "d/added", "on the server\n");
        run(f);
        kinds = conflicts(f, NULL);
        g_assert_cmpstr(kinds, ==, "delete-children");
        text = tree_get(f->srv, "d/added");
        g_assert_cmpstr(text, ==, "on the server\n");
        g_free(text);
        g_free(kinds);
}

static void test_dry_run(struct server_fixture *f, gconstpointer data)
{
        uint64_t a, b, n;
        char *before, *after, *text;

        tree_put(f->srv, "a", "1\n2\n3\n");
        tree_put(f->srv, "b", "1\n2\n3\n4\n5\n6\n");
        a = tree_register(f->log, f->srv, "a");
        b = tree_register(f->log, f->srv, "b");
        fixture_local(f, a, "1\nlocal\n3\n");
        fixture_local(f, b, "one\n2\n3\n4\n5\n6\n");
        g_assert_cmpint(oplog_record_mkdir(f->log, OPLOG_ROOT, "nd", 0755, 0, 0, &n), ==, 0);
        g_assert_cmpint(oplog_record_create(f->log, n, "f", 0644, 0, 0, &n), ==, 0);
        tree_put(f->srv, "a", "1\nremote\n3\n");
        tree_put(f->srv, "b", "1\n2\n3\n4\n5\nsix\n");
        before = tree_dump(f->srv, true);
        g_assert_cmpint(reintegrate_dry_run_text(f->log, f->srv, &text), ==, 0);
        after = tree_dump(f->srv, true);
        g_assert_cmpstr(before, ==, after);
        g_assert_true(g_str_has_prefix(text, "records=4\napply=2\nalready=0\nmerge=1\nconflict=1\nheld=0\n"));
        g_assert_nonnull(strstr(text, "kind=content outcome=conflict conflict=content path=/a\n"));
        g_assert_nonnull(strstr(text, "kind=content outcome=merge path=/b\n"));
        g_assert_nonnull(strstr(text, "kind=create outcome=apply path=/nd/f\n"));
        assert_no_conflicts(f);
        {
                uint64_t pending;

                g_assert_cmpint(oplog_count(f->log, OPLOG_PENDING, &pending), ==, 0);
                g_assert_cmpuint(pending, ==, 4);
        }
        /* And the real run does what the dry run said. */
        {
                struct reintegrate_stats st = run(f);

                g_assert_cmpuint(st.applied, ==, 2);
                g_assert_cmpuint(st.merged, ==, 1);
                g_assert_cmpuint(st.conflicts, ==, 1);
        }
        g_free(text);
        g_free(before);
        g_free(after);
}

static void test_server_gone_resumes(struct server_fixture *f, gconstpointer data)
{
        struct reintegrate_options o = REINTEGRATE_OPTIONS_INIT;
        struct reintegrate_stats st;
        uint64_t a, n;
        int bad;
        char *text;

        tree_put(f->srv, "a", "a\n");
        a = tree_register(f->log, f->srv, "a");
        fixture_local(f, a, "a2\n");
        g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, "n", 0644, 0, 0, &n), ==, 0);
        /* A backing that fails (here: a descriptor of a file, not a directory). */
        bad = openat(f->srv, "a", O_RDONLY);
        g_assert_cmpint(reintegrate_run(f->log, bad, &o, &st), <, 0);
        close(bad);
        st = run(f);
        g_assert_cmpuint(st.total, ==, 2);
        g_assert_cmpuint(st.applied, ==, 2);
        text = tree_get(f->srv, "a");
        g_assert_cmpstr(text, ==, "a2\n");
        g_free(text);
}

struct progress {
        unsigned calls, cancel_after;
        uint64_t last_done, last_total;
};

static void on_progress(void *ud, const struct reintegrate_item *it)
{
        struct progress *p = ud;

        p->calls++;
        g_assert_cmpuint(it->done, ==, p->last_done + 1);
        p->last_done = it->done;
        p->last_total = it->total;
        g_assert_nonnull(it->record);
        g_assert_cmpint(it->outcome, ==, REINTEGRATE_APPLIED);
}

static bool on_cancel(void *ud)
{
        struct progress *p = ud;

        return p->calls >= p->cancel_after;
}

static void test_cancel_resumes(struct server_fixture *f, gconstpointer data)
{
        struct reintegrate_options o = REINTEGRATE_OPTIONS_INIT;
        struct progress p = { .cancel_after = 2 };
        struct reintegrate_stats st;
        uint64_t lid;
        char *text;

        tree_register(f->log, f->srv, "");
        for (int i = 0; i < 5; i++) {
                char name[16];

                snprintf(name, sizeof(name), "f%d", i);
                g_assert_cmpint(oplog_record_create(f->log, OPLOG_ROOT, name, 0644, 0, 0, &lid), ==, 0);
                fixture_local(f, lid, name);
        }
        o.progress = on_progress;
        o.cancel = on_cancel;
        o.userdata = &p;
        o.threads = 1; /* one record at a time: none in flight when the cancel is seen */
        g_assert_cmpint(reintegrate_run(f->log, f->srv, &o, &st), ==, -ECANCELED);
        g_assert_cmpuint(p.calls, ==, 2);
        g_assert_cmpuint(p.last_total, ==, 10);
        st = run(f); /* resumes with what is left */
        g_assert_cmpuint(st.total, ==, 8);
        g_assert_cmpuint(st.applied, ==, 8);
        text = tree_get(f->srv, "f4");
        g_assert_cmpstr(text, ==, "f4");
        g_free(text);
}

/*
 * An untar's records, create, setattr (mode, times), content, replayed as
 * one create that carries the content and the setattr's mode, atime and the
 * container's mtime (later than the setattr's): every record applied, the
 * server's files exactly that, a second run changes nothing.  On a local
 * backing (no fsync per file, one syncfs per batch) and otherwise alike.
 */
static void test_untar(struct server_fixture *f, gconstpointer data)
{
        struct reintegrate_options o = REINTEGRATE_OPTIONS_INIT;
        struct oplog_setattr sa = { .mask = OPLOG_SET_MODE | OPLOG_SET_MTIME | OPLOG_SET_ATIME,
                                    .mode = 0644, .atime = { 1500000000, 0 },
                                    .mtime = { 1600000000, 0 } };
        struct timespec later[2] = { { 0, UTIME_OMIT }, { 1700000000, 5 } };
        struct reintegrate_stats st;
        struct stat sst;
        uint64_t d, lid;

        tree_register(f->log, f->srv, "");
        g_assert_cmpint(oplog_record_mkdir(f->log, OPLOG_ROOT, "x", 0755, 0, 0, &d), ==, 0);
        for (int i = 0; i < 40; i++) {
                char name[16];

                snprintf(name, sizeof(name), "f%d", i);
                g_assert_cmpint(oplog_record_create(f->log, d, name, 0600, 0, 0, &lid), ==, 0);
                g_assert_cmpint(oplog_record_setattr(f->log, lid, &sa), ==, 0);
                fixture_new_scratch(f);
                g_assert_cmpint(pwrite(f->scratch, name, strlen(name), 0), ==,
                                (ssize_t)strlen(name));
                g_assert_cmpint(futimens(f->scratch, later), ==, 0);
                g_assert_cmpint(oplog_record_content(f->log, lid, f->scratch), ==, 0);
        }
        o.backing_local = GPOINTER_TO_INT(data);
        o.sync_every = 16;      /* several batches */
        g_assert_cmpint(reintegrate_run(f->log, f->srv, &o, &st), ==, 0);
        g_assert_cmpuint(st.total, ==, 1 + 3 * 40);
        g_assert_cmpuint(st.applied, ==, st.total);
        assert_no_pending(f);
        assert_no_conflicts(f);
        for (int i = 0; i < 40; i++) {
                char name[32], *text;

                snprintf(name, sizeof(name), "x/f%d", i);
                /* Before the read, which moves an atime older than the mtime (relatime). */
                g_assert_cmpint(fstatat(f->srv, name, &sst, 0), ==, 0);
                g_assert_cmpint(sst.st_mode & 07777, ==, 0644);
                g_assert_cmpint(sst.st_atim.tv_sec, ==, 1500000000);
                g_assert_cmpint(sst.st_mtim.tv_sec, ==, 1700000000);
                g_assert_cmpint(sst.st_mtim.tv_nsec, ==, 5);
                text = tree_get(f->srv, name);
                g_assert_cmpstr(text, ==, name + 2);
                g_free(text);
        }
        st = run(f);
        g_assert_cmpuint(st.total, ==, 0);
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
        if (geteuid() != 0) {
                /* chown of replayed objects and mknod need root; CI runs as root. */
                g_test_skip("needs root");
        }
#define T(name, fn)                                                                 \
        g_test_add("/fcache/offline/reintegrate/" name, struct server_fixture, NULL, \
                   fixture_setup, fn, fixture_teardown)
        T("every-kind", test_every_kind);
        T("clean-merge", test_clean_merge);
        T("content-conflict", test_content_conflict);
        T("binary-conflict", test_binary_conflict);
        T("edit-delete", test_edit_delete);
        T("delete-edit", test_delete_edit);
        T("create-create", test_create_create);
        T("rename-delete", test_rename_delete);
        T("rename-over-a-link", test_rename_over_a_link);
        T("mode", test_mode);
        T("content-with-server-chmod", test_content_with_server_chmod);
        T("content-in-place", test_content_in_place);
        T("written-through", test_written_through);
        T("children-delete", test_children_delete);
        T("delete-children", test_delete_children);
        T("dry-run", test_dry_run);
        T("server-gone-resumes", test_server_gone_resumes);
        T("cancel-resumes", test_cancel_resumes);
        g_test_add("/fcache/offline/reintegrate/untar", struct server_fixture,
                   GINT_TO_POINTER(0), fixture_setup, test_untar, fixture_teardown);
        g_test_add("/fcache/offline/reintegrate/untar-local", struct server_fixture,
                   GINT_TO_POINTER(1), fixture_setup, test_untar, fixture_teardown);
        return g_test_run();
}
