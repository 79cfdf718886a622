/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-resolve.c: settling kept conflicts (daemon/offline/resolve.h) against a real
 * backing directory.  Table-driven over conflict kind x choice: after
 * resolve_conflict() the server tree equals the model's (tree_dump), the
 * conflict is gone, held records were replayed or dropped; a server that
 * changed again gives -ESTALE and keeps the conflict; every version is
 * retrievable (resolve_version_fd) until the conflict is settled.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <stdio.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oplog.h"
#include "reintegrate.h"
#include "resolve.h"
#include "tree.h"

static void run(struct server_fixture *f)
{
        struct reintegrate_options o = REINTEGRATE_OPTIONS_INIT;
        struct reintegrate_stats st;

        g_assert_cmpint(reintegrate_run(f->log, f->srv, &o, &st), ==, 0);
}

struct first {
        uint64_t id;
        char kind[32];
        unsigned n;
};

static int on_conflict(void *ud, const struct oplog_conflict *c)
{
        struct first *fc = ud;

        if (!fc->n++) {
                fc->id = c->id;
                snprintf(fc->kind, sizeof(fc->kind), "%s", c->kind);
        }
        return 0;
}

static struct first conflicts(struct server_fixture *f)
{
        struct first fc = { 0 };

        g_assert_cmpint(oplog_conflict_foreach(f->log, on_conflict, &fc), ==, 0);
        return fc;
}

static char *version(struct server_fixture *f, uint64_t id, const char *which)
{
        char buf[4096];
        int fd = -1, e;
        ssize_t n;

        e = resolve_version_fd(f->log, id, which, &fd);
        if (e == -ENOENT)
                return NULL;
        g_assert_cmpint(e, ==, 0);
        /* read-only: a write must fail */
        g_assert_cmpint(write(fd, "x", 1), <, 0);
        n = pread(fd, buf, sizeof(buf) - 1, 0);
        g_assert_cmpint(n, >=, 0);
        buf[n] = '\0';
        close(fd);
        return g_strdup(buf);
}

/* Kinds: how the conflict is made.  Each leaves the remote's "a" as the model has it. */
enum kind { K_CONTENT, K_EDIT_DELETE, K_DELETE_EDIT };

struct row {
        const char *name;
        enum kind kind;
        const char *conflict_kind;
        enum resolve_how how;
        /* the model: the server's files afterwards, "path=content;..." sorted */
        const char *model;
        uint64_t replayed, dropped;
};

static const struct row rows[] = {
        { "content/local", K_CONTENT, "content", RESOLVE_LOCAL, "a2=1\nlocal\n3\n;", 2, 0 },
        { "content/remote", K_CONTENT, "content", RESOLVE_REMOTE, "a=1\nremote\n3\n;", 0, 2 },
        { "content/both", K_CONTENT, "content", RESOLVE_BOTH, "a=1\nremote\n3\n;a.local=1\nlocal\n3\n;", 0, 2 },
        { "content/merged", K_CONTENT, "content", RESOLVE_MERGED, "a2=merged\n;", 1, 0 },
        { "edit-delete/local", K_EDIT_DELETE, "edit-delete", RESOLVE_LOCAL, "a=1\nlocal\n3\n;", 1, 0 },
        { "edit-delete/remote", K_EDIT_DELETE, "edit-delete", RESOLVE_REMOTE, "", 0, 1 },
        { "delete-edit/local", K_DELETE_EDIT, "delete-edit", RESOLVE_LOCAL, "", 1, 0 },
        { "delete-edit/remote", K_DELETE_EDIT, "delete-edit", RESOLVE_REMOTE, "a=1\nremote\n3\n;", 0, 1 },
};

static gint cmp_names(gconstpointer a, gconstpointer b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The server's regular files as "name=content;" sorted (the model's form), leftovers included. */
static char *server_files(struct server_fixture *f)
{
        GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
        GString *s = g_string_new(NULL);
        int fd = dup(f->srv);
        DIR *d;
        struct dirent *de;

        g_assert_cmpint(fd, >=, 0);
        d = fdopendir(fd);
        g_assert_nonnull(d);
        rewinddir(d);
        while ((de = readdir(d)))
                if (de->d_name[0] != '.' || strncmp(de->d_name, ".fcache", 7) == 0)
                        g_ptr_array_add(names, g_strdup(de->d_name));
        closedir(d);
        g_ptr_array_sort(names, cmp_names);
        for (guint i = 0; i < names->len; i++) {
                const char *n = names->pdata[i];
                char *text = tree_get(f->srv, n);

                if (strncmp(n, "a.local", 7) == 0)
                        n = "a.local"; /* the keep-both name's exact form is merge/'s */
                g_string_append_printf(s, "%s=%s;", n, text ? text : "?");
                g_free(text);
        }
        g_ptr_array_unref(names);
        return g_string_free(s, FALSE);
}

static void make(struct server_fixture *f, enum kind kind)
{
        uint64_t a;

        tree_put(f->srv, "a", "1\n2\n3\n");
        a = tree_register(f->log, f->srv, "a");
        switch (kind) {
        case K_CONTENT:
                fixture_local(f, a, "1\nlocal\n3\n");
                g_assert_cmpint(oplog_record_rename(f->log, OPLOG_ROOT, "a", a, OPLOG_ROOT, "a2", 0, 0), ==, 0);
                tree_put(f->srv, "a", "1\nremote\n3\n");
                break;
        case K_EDIT_DELETE:
                fixture_local(f, a, "1\nlocal\n3\n");
                g_assert_cmpint(unlinkat(f->srv, "a", 0), ==, 0);
                break;
        case K_DELETE_EDIT:
                g_assert_cmpint(oplog_record_unlink(f->log, OPLOG_ROOT, "a", a), ==, 0);
                tree_put(f->srv, "a", "1\nremote\n3\n");
                break;
        }
        run(f);
}

static void test_row(struct server_fixture *f, gconstpointer data)
{
        const struct row *r = data;
        struct resolve_outcome out;
        struct first fc;
        int mfd = -1, e;
        char *files, *v;

        make(f, r->kind);
        fc = conflicts(f);
        g_assert_cmpuint(fc.n, ==, 1);
        g_assert_cmpstr(fc.kind, ==, r->conflict_kind);
        /* every version that has content is retrievable before resolution */
        v = version(f, fc.id, "base");
        g_assert_cmpstr(v, ==, "1\n2\n3\n");
        g_free(v);
        v = version(f, fc.id, "local");
        g_assert_cmpstr(v, ==, r->kind == K_DELETE_EDIT ? NULL : "1\nlocal\n3\n");
        g_free(v);
        v = version(f, fc.id, "remote");
        g_assert_cmpstr(v, ==, r->kind == K_EDIT_DELETE ? NULL : "1\nremote\n3\n");
        g_free(v);
        if (r->how == RESOLVE_MERGED) {
                mfd = memfd_create("merged", 0);
                g_assert_cmpint(write(mfd, "merged\n", 7), ==, 7);
                g_assert_cmpint(lseek(mfd, 0, SEEK_SET), ==, 0);
                /* merged without content is refused and changes nothing */
                g_assert_cmpint(resolve_conflict(f->log, f->srv, fc.id, r->how, -1, NULL, &out), ==, -EINVAL);
                g_assert_cmpuint(conflicts(f).n, ==, 1);
        }
        e = resolve_conflict(f->log, f->srv, fc.id, r->how, mfd, NULL, &out);
        g_assert_cmpint(e, ==, 0);
        if (mfd >= 0)
                close(mfd);
        files = server_files(f);
        g_assert_cmpstr(files, ==, r->model);
        g_free(files);
        g_assert_cmpuint(conflicts(f).n, ==, 0);
        g_assert_cmpuint(out.replayed, ==, r->replayed);
        g_assert_cmpuint(out.dropped, ==, r->dropped);
        {
                uint64_t n = 99;

                g_assert_cmpint(oplog_count(f->log, OPLOG_PENDING, &n), ==, 0);
                g_assert_cmpuint(n, ==, 0);
                g_assert_cmpint(oplog_count(f->log, OPLOG_HELD, &n), ==, 0);
                g_assert_cmpuint(n, ==, 0);
        }
        /* settled: the id is unknown now */
        g_assert_cmpint(resolve_conflict(f->log, f->srv, fc.id, r->how, -1, NULL, &out), ==, -ENOENT);
        g_assert_cmpint(resolve_version_fd(f->log, fc.id, "base", &mfd), ==, -ENOENT);
}

static void test_stale(struct server_fixture *f, gconstpointer data)
{
        struct resolve_outcome out;
        struct first fc;
        char *text;

        make(f, K_CONTENT);
        fc = conflicts(f);
        tree_put(f->srv, "a", "1\nremote again\n3\n");
        for (int how = RESOLVE_LOCAL; how <= RESOLVE_BOTH; how++)
                g_assert_cmpint(resolve_conflict(f->log, f->srv, fc.id, how, -1, NULL, &out), ==, -ESTALE);
        g_assert_cmpuint(conflicts(f).n, ==, 1);
        text = tree_get(f->srv, "a");
        g_assert_cmpstr(text, ==, "1\nremote again\n3\n");
        g_free(text);
        text = server_files(f);
        g_assert_cmpstr(text, ==, "a=1\nremote again\n3\n;");
        g_free(text);
}

static void test_words(struct server_fixture *f, gconstpointer data)
{
        enum resolve_how h;

        for (int i = RESOLVE_LOCAL; i <= RESOLVE_MERGED; i++) {
                g_assert_cmpint(resolve_how_from_string(resolve_how_to_string(i), &h), ==, 0);
                g_assert_cmpint(h, ==, i);
        }
        g_assert_cmpint(resolve_how_from_string("mine", &h), ==, -EINVAL);
        g_assert_cmpint(resolve_how_from_string(NULL, &h), ==, -EINVAL);
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
        for (size_t i = 0; i < G_N_ELEMENTS(rows); i++) {
                char *p = g_strdup_printf("/fcache/offline/resolve/%s", rows[i].name);

                g_test_add(p, struct server_fixture, &rows[i], fixture_setup, test_row, fixture_teardown);
                g_free(p);
        }
        g_test_add("/fcache/offline/resolve/stale", struct server_fixture, NULL, fixture_setup, test_stale, fixture_teardown);
        g_test_add("/fcache/offline/resolve/words", struct server_fixture, NULL, fixture_setup, test_words, fixture_teardown);
        return g_test_run();
}
