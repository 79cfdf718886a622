/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-reintegrate-pool.c: pipelined replay against a model.  Random offline
 * changes with dependencies between them (directories made and then filled,
 * files created and then edited, renamed, linked, removed, directories
 * renamed and removed) are recorded in the log and applied directly to a
 * model tree; the log is replayed on 8 threads (also cancelled part way and
 * resumed), and the server must then equal the model, with no conflict, no
 * pending record, and progress that only grew by one record at a time.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oplog.h"
#include "reintegrate.h"
#include "tree.h"

struct ent {
        uint64_t lid;
        bool dir;
};

struct world {
        struct server_fixture *f;
        int model;
        GHashTable *ents;       /* path ("" the root) -> struct ent */
        GRand *rand;
        unsigned serial;
};

static void add(struct world *w, const char *path, uint64_t lid, bool dir)
{
        struct ent *e = g_new(struct ent, 1);

        e->lid = lid;
        e->dir = dir;
        g_hash_table_replace(w->ents, g_strdup(path), e);
}

static gint by_name(gconstpointer a, gconstpointer b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A random path of the world that is a directory (@dir) or a file, or NULL. */
static char *pick_sorted(struct world *w, bool dir, bool with_root)
{
        GPtrArray *all = g_ptr_array_new();
        GHashTableIter it;
        gpointer k, v;
        char *p = NULL;

        g_hash_table_iter_init(&it, w->ents);
        while (g_hash_table_iter_next(&it, &k, &v))
                if (((struct ent *)v)->dir == dir && (with_root || *(char *)k))
                        g_ptr_array_add(all, k);
        g_ptr_array_sort(all, by_name);
        if (all->len)
                p = g_strdup(all->pdata[g_rand_int_range(w->rand, 0, (gint32)all->len)]);
        g_ptr_array_unref(all);
        return p;
}

static struct ent *ent(struct world *w, const char *path)
{
        return g_hash_table_lookup(w->ents, path);
}

static char *join(const char *dir, const char *name)
{
        return *dir ? g_strdup_printf("%s/%s", dir, name) : g_strdup(name);
}

static bool empty_dir(struct world *w, const char *dir)
{
        char *prefix = g_strdup_printf("%s/", dir);
        GHashTableIter it;
        gpointer k;
        bool empty = true;

        g_hash_table_iter_init(&it, w->ents);
        while (empty && g_hash_table_iter_next(&it, &k, NULL))
                empty = !g_str_has_prefix(k, prefix);
        g_free(prefix);
        return empty;
}

/* Moves @from and everything under it to @to in the world's map. */
static void move_paths(struct world *w, const char *from, const char *to)
{
        GPtrArray *keys = g_ptr_array_new_with_free_func(g_free);
        size_t n = strlen(from);
        GHashTableIter it;
        gpointer k;

        g_hash_table_iter_init(&it, w->ents);
        while (g_hash_table_iter_next(&it, &k, NULL))
                if (!strcmp(k, from) || (g_str_has_prefix(k, from) && ((char *)k)[n] == '/'))
                        g_ptr_array_add(keys, g_strdup(k));
        for (guint i = 0; i < keys->len; i++) {
                const char *old = keys->pdata[i];
                struct ent *e = ent(w, old), copy = *e;
                char *neu = g_strdup_printf("%s%s", to, old + n);

                g_hash_table_remove(w->ents, old);
                add(w, neu, copy.lid, copy.dir);
                g_free(neu);
        }
        g_ptr_array_unref(keys);
}

static void split(const char *path, char **dir, const char **name)
{
        const char *slash = strrchr(path, '/');

        *dir = slash ? g_strndup(path, (gsize)(slash - path)) : g_strdup("");
        *name = slash ? slash + 1 : path;
}

/* One random offline change, recorded in the log and made in the model. */
static void step(struct world *w)
{
        struct oplog *log = w->f->log;
        unsigned n = ++w->serial;
        char name[32], text[64], *a = NULL, *b = NULL, *d = NULL, *p = NULL;
        const char *base;
        uint64_t lid;

        snprintf(text, sizeof(text), "text %u of %u\n", n, g_rand_int(w->rand));
        switch (g_rand_int_range(w->rand, 0, 10)) {
        case 0: /* mkdir */
                d = pick_sorted(w, true, true);
                snprintf(name, sizeof(name), "d%u", n);
                p = join(d, name);
                g_assert_cmpint(oplog_record_mkdir(log, ent(w, d)->lid, name, 0755, 0, 0, &lid),
                                ==, 0);
                g_assert_cmpint(mkdirat(w->model, p, 0755), ==, 0);
                add(w, p, lid, true);
                break;
        case 1: case 2: /* create */
                d = pick_sorted(w, true, true);
                snprintf(name, sizeof(name), "f%u", n);
                p = join(d, name);
                g_assert_cmpint(oplog_record_create(log, ent(w, d)->lid, name, 0644, 0, 0, &lid),
                                ==, 0);
                fixture_local(w->f, lid, text);
                tree_put(w->model, p, text);
                add(w, p, lid, false);
                break;
        case 3: /* edit */
                a = pick_sorted(w, false, false);
                if (!a)
                        break;
                fixture_local(w->f, ent(w, a)->lid, text);
                tree_put(w->model, a, text);
                break;
        case 4: /* rename a file, to a new name or over another file */
                a = pick_sorted(w, false, false);
                d = pick_sorted(w, true, true);
                if (!a)
                        break;
                b = pick_sorted(w, false, false);
                if (g_rand_boolean(w->rand) || !b || !strcmp(a, b) ||
                    ent(w, a)->lid == ent(w, b)->lid) {
                        g_free(b);
                        snprintf(name, sizeof(name), "r%u", n);
                        b = join(d, name);
                }
                {
                        char *sd, *td;
                        const char *sn, *tn;
                        struct ent *other = ent(w, b);

                        split(a, &sd, &sn);
                        split(b, &td, &tn);
                        g_assert_cmpint(oplog_record_rename(log, ent(w, sd)->lid, sn, ent(w, a)->lid,
                                                            ent(w, td)->lid, tn,
                                                            other ? other->lid : 0, 0), ==, 0);
                        g_assert_cmpint(renameat(w->model, a, w->model, b), ==, 0);
                        lid = ent(w, a)->lid;
                        g_hash_table_remove(w->ents, a);
                        add(w, b, lid, false);
                        g_free(sd);
                        g_free(td);
                }
                break;
        case 5: /* unlink */
                a = pick_sorted(w, false, false);
                if (!a)
                        break;
                split(a, &d, &base);
                g_assert_cmpint(oplog_record_unlink(log, ent(w, d)->lid, base, ent(w, a)->lid), ==, 0);
                g_assert_cmpint(unlinkat(w->model, a, 0), ==, 0);
                g_hash_table_remove(w->ents, a);
                break;
        case 6: /* rmdir of an empty directory */
                a = pick_sorted(w, true, false);
                if (!a || !empty_dir(w, a))
                        break;
                split(a, &d, &base);
                g_assert_cmpint(oplog_record_rmdir(log, ent(w, d)->lid, base, ent(w, a)->lid), ==, 0);
                g_assert_cmpint(unlinkat(w->model, a, AT_REMOVEDIR), ==, 0);
                g_hash_table_remove(w->ents, a);
                break;
        case 7: { /* chmod */
                struct oplog_setattr sa = { .mask = OPLOG_SET_MODE };

                a = pick_sorted(w, false, false);
                if (!a)
                        break;
                sa.mode = g_rand_boolean(w->rand) ? 0600 : 0640;
                g_assert_cmpint(oplog_record_setattr(log, ent(w, a)->lid, &sa), ==, 0);
                g_assert_cmpint(fchmodat(w->model, a, sa.mode, 0), ==, 0);
                break;
        }
        case 8: /* hard link */
                a = pick_sorted(w, false, false);
                d = pick_sorted(w, true, true);
                if (!a)
                        break;
                snprintf(name, sizeof(name), "h%u", n);
                p = join(d, name);
                g_assert_cmpint(oplog_record_link(log, ent(w, a)->lid, ent(w, d)->lid, name), ==, 0);
                g_assert_cmpint(linkat(w->model, a, w->model, p, 0), ==, 0);
                add(w, p, ent(w, a)->lid, false);
                break;
        case 9: /* rename a directory within its parent */
                a = pick_sorted(w, true, false);
                if (!a)
                        break;
                split(a, &d, &base);
                snprintf(name, sizeof(name), "m%u", n);
                p = join(d, name);
                g_assert_cmpint(oplog_record_rename(log, ent(w, d)->lid, base, ent(w, a)->lid,
                                                    ent(w, d)->lid, name, 0, 0), ==, 0);
                g_assert_cmpint(renameat(w->model, a, w->model, p), ==, 0);
                move_paths(w, a, p);
                break;
        }
        g_free(a);
        g_free(b);
        g_free(d);
        g_free(p);
}

struct progress {
        uint64_t last, calls, cancel_after;
};

static void on_progress(void *ud, const struct reintegrate_item *it)
{
        struct progress *p = ud;

        g_assert_cmpuint(it->done, ==, p->last + 1);
        g_assert_cmpuint(it->done, <=, it->total);
        g_assert_nonnull(it->record);
        p->last = it->done;
        p->calls++;
}

static bool on_cancel(void *ud)
{
        struct progress *p = ud;

        return p->cancel_after && p->calls >= p->cancel_after;
}

static void assert_same(int a, int b)
{
        char *da = tree_dump(a, false), *db = tree_dump(b, false);

        g_assert_cmpstr(da, ==, db);
        g_free(da);
        g_free(db);
}

static void one_world(struct server_fixture *f, guint32 seed, unsigned steps, bool cancel)
{
        struct reintegrate_options o = REINTEGRATE_OPTIONS_INIT;
        struct progress prog = { 0 };
        struct reintegrate_stats st;
        struct world w = { .f = f };
        char *path = g_build_filename(f->dir, "model", NULL);
        uint64_t n;
        int e;

        g_test_message("seed %u, %u steps%s", seed, steps, cancel ? ", cancelled and resumed" : "");
        g_assert_cmpint(mkdir(path, 0755), ==, 0);
        w.model = open(path, O_RDONLY | O_DIRECTORY);
        g_assert_cmpint(w.model, >=, 0);
        g_free(path);
        w.rand = g_rand_new_with_seed(seed);
        w.ents = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        /* The server before: two directories and a few files, the same in the model. */
        for (int side = 0; side < 2; side++) {
                int fd = side ? w.model : f->srv;

                g_assert_cmpint(mkdirat(fd, "a", 0755), ==, 0);
                g_assert_cmpint(mkdirat(fd, "a/b", 0755), ==, 0);
                tree_put(fd, "x", "x\n");
                tree_put(fd, "a/y", "y\n");
                tree_put(fd, "a/b/z", "z\n");
        }
        add(&w, "", tree_register(f->log, f->srv, ""), true);
        add(&w, "a", tree_register(f->log, f->srv, "a"), true);
        add(&w, "a/b", tree_register(f->log, f->srv, "a/b"), true);
        add(&w, "x", tree_register(f->log, f->srv, "x"), false);
        add(&w, "a/y", tree_register(f->log, f->srv, "a/y"), false);
        add(&w, "a/b/z", tree_register(f->log, f->srv, "a/b/z"), false);
        for (unsigned i = 0; i < steps; i++)
                step(&w);

        o.threads = 8;
        o.progress = on_progress;
        o.cancel = on_cancel;
        o.userdata = &prog;
        o.sync_every = 7;
        if (cancel) {
                prog.cancel_after = 1 + g_rand_int_range(w.rand, 0, (gint32)steps / 2 + 1);
                e = reintegrate_run(f->log, f->srv, &o, &st);
                g_assert_true(e == 0 || e == -ECANCELED);
                prog = (struct progress){ 0 };
        }
        g_assert_cmpint(reintegrate_run(f->log, f->srv, &o, &st), ==, 0);
        g_assert_cmpuint(prog.calls, ==, st.total);
        g_assert_cmpuint(st.conflicts, ==, 0);
        g_assert_cmpuint(st.held, ==, 0);
        g_assert_cmpint(oplog_count(f->log, OPLOG_PENDING, &n), ==, 0);
        g_assert_cmpuint(n, ==, 0);
        g_assert_cmpint(oplog_count(f->log, OPLOG_CONFLICT, &n), ==, 0);
        g_assert_cmpuint(n, ==, 0);
        assert_same(f->srv, w.model);
        /* Replaying again finds nothing to do. */
        g_assert_cmpint(reintegrate_run(f->log, f->srv, &o, &st), ==, 0);
        g_assert_cmpuint(st.total, ==, 0);
        g_hash_table_destroy(w.ents);
        g_rand_free(w.rand);
        close(w.model);
}

static void test_random(struct server_fixture *f, gconstpointer data)
{
        guint32 seed = GPOINTER_TO_UINT(data);

        one_world(f, seed, 150, false);
}

static void test_random_cancelled(struct server_fixture *f, gconstpointer data)
{
        guint32 seed = GPOINTER_TO_UINT(data);

        one_world(f, seed, 150, true);
}

int main(int argc, char **argv)
{
        const char *env = g_getenv("FCACHE_TEST_SEED");
        guint32 first = env ? (guint32)strtoul(env, NULL, 10) : 1;
        char name[96];

        g_test_init(&argc, &argv, NULL);
        if (geteuid() != 0)
                g_test_skip("needs root"); /* replay chowns what it creates */
        for (guint32 s = first; s < first + 12; s++) {
                snprintf(name, sizeof(name), "/fcache/offline/reintegrate-pool/random/%u", s);
                g_test_add(name, struct server_fixture, GUINT_TO_POINTER(s), fixture_setup,
                           test_random, fixture_teardown);
                snprintf(name, sizeof(name), "/fcache/offline/reintegrate-pool/cancelled/%u", s);
                g_test_add(name, struct server_fixture, GUINT_TO_POINTER(s), fixture_setup,
                           test_random_cancelled, fixture_teardown);
        }
        return g_test_run();
}
