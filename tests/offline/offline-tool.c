/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * offline-tool.c: a driver for the offline crash, clock-skew, disk-full and
 * benchmark tests.  It plays the view's part: a seeded workload of offline
 * changes is recorded step by step into an oplog (each step acknowledged in
 * DIR/acks only after its oplog call returned, as an application's fsync or
 * close would be) and the same step applied directly to DIR/direct, the
 * model of what the server must hold after reintegration.
 *
 *   offline-tool init DIR SEED [FILES]  server tree DIR/srv, its copy DIR/direct, the log
 *   offline-tool record DIR SEED STEPS [conflicts]
 *                                   record (resuming after the last ack); "conflicts"
 *                                   adds scripted edits of the c* files
 *   offline-tool server-edits DIR   the server's side of the scripted conflicts
 *   offline-tool reint DIR          reintegrate (prints the counts)
 *   offline-tool dump DIR srv|direct   canonical tree dump (srv: and the conflicts)
 *   offline-tool fill DIR           record 64 KiB content changes until ENOSPC (disk full)
 *   offline-tool check-fill DIR     the log holds every acknowledged fill step
 *   offline-tool bench DIR STEPS [FILES]  reintegration against direct application, timed
 *
 * FCACHE_FAULT applies as everywhere.  Exit 0 on success, 1 on a failed check.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "oplog.h"
#include "reintegrate.h"
#include "tree.h"

/* ------------------------------------------------------------------------ */
/* The simulated namespace                                                  */
/* ------------------------------------------------------------------------ */

struct obj {
        uint64_t lid;
        bool dir;
        bool symlink;
        int names;
        int children;           /* dirs: live entries */
};

struct entry {
        int parent;             /* index of a dir object; 0 is the root */
        char name[32];
        int obj;
        bool alive;
        bool scripted;          /* c* files: only the scripted steps touch them */
};

struct sim {
        GArray *objs;           /* struct obj */
        GArray *ents;           /* struct entry */
        GRand *rand;
        unsigned counter;
};

/* One step of the workload. */
enum step_kind {
        S_CONTENT, S_CREATE, S_MKDIR, S_SYMLINK, S_LINK, S_UNLINK, S_RMDIR, S_RENAME,
        S_CHMOD, S_UTIMES, S_SETXATTR,
};

struct step {
        enum step_kind kind;
        int ent;                /* the entry acted on (source) */
        int dir;                /* target dir object */
        char name[32];          /* new name */
        int over;               /* rename: entry replaced, or -1 */
        char text[256];
        unsigned mode;
        int64_t mtime;
};

#define OBJ(s, i) (&g_array_index((s)->objs, struct obj, (i)))
#define ENT(s, i) (&g_array_index((s)->ents, struct entry, (i)))

static int add_obj(struct sim *s, bool dir, bool symlink)
{
        struct obj o = { .dir = dir, .symlink = symlink };

        g_array_append_val(s->objs, o);
        return (int)s->objs->len - 1;
}

static int add_ent(struct sim *s, int parent, const char *name, int obj, bool scripted)
{
        struct entry e = { .parent = parent, .obj = obj, .alive = true, .scripted = scripted };

        snprintf(e.name, sizeof(e.name), "%s", name);
        g_array_append_val(s->ents, e);
        OBJ(s, obj)->names++;
        OBJ(s, parent)->children++;
        return (int)s->ents->len - 1;
}

static void kill_ent(struct sim *s, int i)
{
        struct entry *e = ENT(s, i);

        e->alive = false;
        OBJ(s, e->obj)->names--;
        OBJ(s, e->parent)->children--;
}

/* The path of entry @i relative to the tree root (g_free). */
static char *ent_path(struct sim *s, int i);

/* The entry naming directory object @dir (the root has none). */
static int dir_ent(struct sim *s, int dir)
{
        for (guint i = 0; i < s->ents->len; i++)
                if (ENT(s, i)->alive && ENT(s, i)->obj == dir)
                        return (int)i;
        return -1;
}

static char *dir_path(struct sim *s, int dir)
{
        int e;

        if (dir == 0)
                return g_strdup("");
        e = dir_ent(s, dir);
        g_assert_cmpint(e, >=, 0);
        return ent_path(s, e);
}

static char *ent_path(struct sim *s, int i)
{
        struct entry *e = ENT(s, i);
        char *p = dir_path(s, e->parent), *r;

        r = p[0] ? g_strdup_printf("%s/%s", p, e->name) : g_strdup(e->name);
        g_free(p);
        return r;
}

static char *in_dir(struct sim *s, int dir, const char *name)
{
        char *p = dir_path(s, dir), *r;

        r = p[0] ? g_strdup_printf("%s/%s", p, name) : g_strdup(name);
        g_free(p);
        return r;
}

/* The initial tree: dirs d0..d2 (d2 inside d0), files, a symlink, and the scripted c* files. */
static void sim_init(struct sim *s, unsigned seed, unsigned files)
{
        int d[3];

        s->objs = g_array_new(FALSE, TRUE, sizeof(struct obj));
        s->ents = g_array_new(FALSE, TRUE, sizeof(struct entry));
        s->rand = g_rand_new_with_seed(seed);
        add_obj(s, true, false); /* root */
        OBJ(s, 0)->names = 1;
        d[0] = add_obj(s, true, false);
        add_ent(s, 0, "d0", d[0], false);
        d[1] = add_obj(s, true, false);
        add_ent(s, 0, "d1", d[1], false);
        d[2] = add_obj(s, true, false);
        add_ent(s, d[0], "d2", d[2], false);
        for (unsigned i = 0; i < files; i++) {
                char name[32];

                snprintf(name, sizeof(name), "f%u", i);
                add_ent(s, i % 4 == 3 ? 0 : d[i % 3], name, add_obj(s, false, false), false);
        }
        add_ent(s, 0, "s0", add_obj(s, false, true), false);
        for (unsigned i = 0; i < 7; i++) {
                char name[32];

                snprintf(name, sizeof(name), "c%u", i);
                add_ent(s, 0, name, add_obj(s, false, false), true);
        }
}

static void sim_free(struct sim *s)
{
        g_array_unref(s->objs);
        g_array_unref(s->ents);
        g_rand_free(s->rand);
}

static const char *initial_text(const char *name, char buf[256])
{
        if (strlen(name) > 8)
                name = "long";
        snprintf(buf, 256, "%.8s line 1\n%.8s line 2\n%.8s line 3\n%.8s line 4\n%.8s line 5\n"
                 "%.8s line 6\n%.8s line 7\n%.8s line 8\n%.8s line 9\n", name, name, name, name,
                 name, name, name, name, name);
        return buf;
}

/* Writes the initial tree under @dirfd. */
static void write_initial(struct sim *s, int dirfd)
{
        char buf[256];

        for (guint i = 0; i < s->ents->len; i++) {
                struct entry *e = ENT(s, i);
                char *p = ent_path(s, (int)i);

                if (OBJ(s, e->obj)->dir)
                        g_assert_cmpint(mkdirat(dirfd, p, 0755), ==, 0);
                else if (OBJ(s, e->obj)->symlink)
                        g_assert_cmpint(symlinkat("d0", dirfd, p), ==, 0);
                else
                        tree_put(dirfd, p, initial_text(e->name, buf));
                g_free(p);
        }
}

/* A random live entry (files only if @file, dirs only if @dir), never a scripted one. */
static int pick(struct sim *s, bool file, bool dir)
{
        for (int tries = 0; tries < 200; tries++) {
                int i = g_rand_int_range(s->rand, 0, (gint32)s->ents->len);
                struct entry *e = ENT(s, i);
                struct obj *o = OBJ(s, e->obj);

                if (!e->alive || e->scripted || (file && (o->dir || o->symlink)) || (dir && !o->dir))
                        continue;
                return i;
        }
        return -1;
}

static int pick_dir(struct sim *s)
{
        int e;

        if (g_rand_int_range(s->rand, 0, 4) == 0)
                return 0;
        e = pick(s, false, true);
        return e < 0 ? 0 : ENT(s, e)->obj;
}

static bool name_free(struct sim *s, int dir, const char *name)
{
        for (guint i = 0; i < s->ents->len; i++)
                if (ENT(s, i)->alive && ENT(s, i)->parent == dir && !strcmp(ENT(s, i)->name, name))
                        return false;
        return true;
}

/* Whether dir object @d is @a or inside it. */
static bool inside(struct sim *s, int d, int a)
{
        for (int depth = 0; depth < 64; depth++) {
                int e;

                if (d == a)
                        return true;
                if (d == 0)
                        return false;
                e = dir_ent(s, d);
                if (e < 0)
                        return false;
                d = ENT(s, e)->parent;
        }
        return true;
}

/* Generates the next random step (not yet applied to the simulation). */
static void gen(struct sim *s, struct step *st, unsigned k)
{
        for (;;) {
                int r = g_rand_int_range(s->rand, 0, 100);

                memset(st, 0, sizeof(*st));
                st->over = -1;
                snprintf(st->name, sizeof(st->name), "n%u", ++s->counter);
                snprintf(st->text, sizeof(st->text), "step %u wrote this\nand %u more\n", k,
                         g_rand_int_range(s->rand, 0, 1000000));
                if (r < 30) {
                        st->kind = S_CONTENT;
                        st->ent = pick(s, true, false);
                } else if (r < 45) {
                        st->kind = S_CREATE;
                        st->dir = pick_dir(s);
                        st->ent = 0;
                } else if (r < 50) {
                        st->kind = S_MKDIR;
                        st->dir = pick_dir(s);
                        st->ent = 0;
                } else if (r < 53) {
                        st->kind = S_SYMLINK;
                        st->dir = pick_dir(s);
                        st->ent = 0;
                } else if (r < 56) {
                        st->kind = S_LINK;
                        st->ent = pick(s, true, false);
                        st->dir = pick_dir(s);
                } else if (r < 66) {
                        st->kind = S_UNLINK;
                        st->ent = pick(s, false, false);
                        if (st->ent >= 0 && OBJ(s, ENT(s, st->ent)->obj)->dir)
                                continue;
                } else if (r < 69) {
                        st->kind = S_RMDIR;
                        st->ent = pick(s, false, true);
                        if (st->ent >= 0 && OBJ(s, ENT(s, st->ent)->obj)->children)
                                continue;
                } else if (r < 82) {
                        st->kind = S_RENAME;
                        st->ent = pick(s, false, false);
                        if (st->ent < 0)
                                continue;
                        if (OBJ(s, ENT(s, st->ent)->obj)->dir) {
                                st->dir = ENT(s, st->ent)->parent; /* dirs: a new name only */
                        } else {
                                st->dir = pick_dir(s);
                                if (g_rand_int_range(s->rand, 0, 3) == 0) {
                                        int o = pick(s, true, false);

                                        if (o >= 0 && o != st->ent &&
                                            ENT(s, o)->obj != ENT(s, st->ent)->obj) {
                                                st->over = o;
                                                st->dir = ENT(s, o)->parent;
                                                snprintf(st->name, sizeof(st->name), "%s",
                                                         ENT(s, o)->name);
                                        }
                                }
                        }
                } else if (r < 90) {
                        st->kind = S_CHMOD;
                        st->ent = pick(s, true, false);
                        st->mode = 0600 | (unsigned)g_rand_int_range(s->rand, 0, 0100);
                } else if (r < 95) {
                        st->kind = S_UTIMES;
                        st->ent = pick(s, true, false);
                        st->mtime = 1000000000 + k;
                } else {
                        st->kind = S_SETXATTR;
                        st->ent = pick(s, true, false);
                }
                if (st->ent < 0)
                        continue;
                if ((st->kind == S_CREATE || st->kind == S_MKDIR || st->kind == S_SYMLINK ||
                     st->kind == S_LINK || (st->kind == S_RENAME && st->over < 0)) &&
                    !name_free(s, st->dir, st->name))
                        continue;
                if (st->kind == S_RENAME && OBJ(s, ENT(s, st->ent)->obj)->dir &&
                    inside(s, st->dir, ENT(s, st->ent)->obj))
                        continue;
                return;
        }
}

/* Applies @st to the simulation; *new_obj gets the object a create made, or -1. */
static void sim_apply(struct sim *s, const struct step *st, int *new_obj)
{
        struct entry *e = ENT(s, st->ent);

        *new_obj = -1;
        switch (st->kind) {
        case S_CREATE:
        case S_MKDIR:
        case S_SYMLINK:
                *new_obj = add_obj(s, st->kind == S_MKDIR, st->kind == S_SYMLINK);
                add_ent(s, st->dir, st->name, *new_obj, false);
                break;
        case S_LINK:
                add_ent(s, st->dir, st->name, e->obj, false);
                break;
        case S_UNLINK:
        case S_RMDIR:
                kill_ent(s, st->ent);
                break;
        case S_RENAME: {
                int obj = e->obj;

                if (st->over >= 0)
                        kill_ent(s, st->over);
                kill_ent(s, st->ent);
                add_ent(s, st->dir, st->name, obj, ENT(s, st->ent)->scripted);
                break;
        }
        default:
                break;
        }
}

/* ------------------------------------------------------------------------ */
/* Doing a step: to the log, and directly to a tree                         */
/* ------------------------------------------------------------------------ */

struct run {
        char *dir;
        int srv, direct, scratch;
        unsigned containers;
        struct oplog *log;
        FILE *acks;
        struct sim sim;
        GHashTable *lids;       /* step number -> lid made by it (from the acks) */
};

static int open_dir(const char *base, const char *name)
{
        char *p = g_build_filename(base, name, NULL);
        int fd = open(p, O_RDONLY | O_DIRECTORY);

        g_free(p);
        return fd;
}

/* @text in a new container (the record names it; what was recorded before stays). */
static void set_content(struct run *r, const char *text)
{
        char *p = g_strdup_printf("%s/containers/c.%d.%u", r->dir, (int)getpid(), r->containers++);

        close(r->scratch);
        r->scratch = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
        g_assert_cmpint(r->scratch, >=, 0);
        g_free(p);
        g_assert_cmpint(pwrite(r->scratch, text, strlen(text), 0), ==, (ssize_t)strlen(text));
}

/* Records @st in the log; *made gets the lid it created. Returns 0 or -errno. */
static int log_step(struct run *r, const struct step *st, uint64_t *made)
{
        struct sim *s = &r->sim;
        struct entry *e = ENT(s, st->ent);
        uint64_t lid = OBJ(s, e->obj)->lid, dir = OBJ(s, st->dir)->lid;
        struct oplog_setattr sa = { 0 };

        *made = 0;
        switch (st->kind) {
        case S_CONTENT:
                set_content(r, st->text);
                return oplog_record_content(r->log, lid, r->scratch);
        case S_CREATE:
                return oplog_record_create(r->log, dir, st->name, 0644, 0, 0, made);
        case S_MKDIR:
                return oplog_record_mkdir(r->log, dir, st->name, 0755, 0, 0, made);
        case S_SYMLINK:
                return oplog_record_symlink(r->log, dir, st->name, "../target", 0, 0, made);
        case S_LINK:
                return oplog_record_link(r->log, lid, dir, st->name);
        case S_UNLINK:
                return oplog_record_unlink(r->log, OBJ(s, e->parent)->lid, e->name, lid);
        case S_RMDIR:
                return oplog_record_rmdir(r->log, OBJ(s, e->parent)->lid, e->name, lid);
        case S_RENAME:
                return oplog_record_rename(r->log, OBJ(s, e->parent)->lid, e->name, lid, dir,
                                           st->name, st->over >= 0
                                           ? OBJ(s, ENT(s, st->over)->obj)->lid : 0, 0);
        case S_CHMOD:
                sa.mask = OPLOG_SET_MODE;
                sa.mode = st->mode;
                return oplog_record_setattr(r->log, lid, &sa);
        case S_UTIMES:
                sa.mask = OPLOG_SET_MTIME;
                sa.mtime.tv_sec = st->mtime;
                return oplog_record_setattr(r->log, lid, &sa);
        case S_SETXATTR:
                return oplog_record_setxattr(r->log, lid, "user.step", st->text, 4, 0);
        }
        return -EINVAL;
}

/* A step as concrete system calls on paths, so that timing the direct run times only those. */
struct direct_op {
        enum step_kind kind;
        char *p, *n;
        char text[256];
        unsigned mode;
        int64_t mtime;
};

static void direct_prepare(struct sim *s, const struct step *st, struct direct_op *op)
{
        op->kind = st->kind;
        op->p = st->ent >= 0 && st->kind != S_CREATE && st->kind != S_MKDIR &&
                st->kind != S_SYMLINK ? ent_path(s, st->ent) : NULL;
        op->n = in_dir(s, st->dir, st->name);
        memcpy(op->text, st->text, sizeof(op->text));
        op->mode = st->mode;
        op->mtime = st->mtime;
}

static void direct_exec(int fd, const struct direct_op *op)
{
        struct timespec ts[2] = { { 0, UTIME_OMIT }, { op->mtime, 0 } };
        const char *p = op->p, *n = op->n;
        int f;

        switch (op->kind) {
        case S_CONTENT:
                f = openat(fd, p, O_WRONLY | O_TRUNC | O_NOFOLLOW);
                g_assert_cmpint(f, >=, 0);
                g_assert_cmpint(write(f, op->text, strlen(op->text)), ==, (ssize_t)strlen(op->text));
                close(f);
                break;
        case S_CREATE:
                f = openat(fd, n, O_WRONLY | O_CREAT | O_EXCL, 0644);
                g_assert_cmpint(f, >=, 0);
                close(f);
                break;
        case S_MKDIR:
                g_assert_cmpint(mkdirat(fd, n, 0755), ==, 0);
                break;
        case S_SYMLINK:
                g_assert_cmpint(symlinkat("../target", fd, n), ==, 0);
                break;
        case S_LINK:
                g_assert_cmpint(linkat(fd, p, fd, n, 0), ==, 0);
                break;
        case S_UNLINK:
                g_assert_cmpint(unlinkat(fd, p, 0), ==, 0);
                break;
        case S_RMDIR:
                g_assert_cmpint(unlinkat(fd, p, AT_REMOVEDIR), ==, 0);
                break;
        case S_RENAME:
                g_assert_cmpint(renameat(fd, p, fd, n), ==, 0);
                break;
        case S_CHMOD:
                g_assert_cmpint(fchmodat(fd, p, op->mode, 0), ==, 0);
                break;
        case S_UTIMES:
                g_assert_cmpint(utimensat(fd, p, ts, 0), ==, 0);
                break;
        case S_SETXATTR:
                f = openat(fd, p, O_RDONLY);
                g_assert_cmpint(f, >=, 0);
                g_assert_cmpint(fsetxattr(f, "user.step", op->text, 4, 0), ==, 0);
                close(f);
                break;
        }
}

static void direct_clear(struct direct_op *op)
{
        g_free(op->p);
        g_free(op->n);
}

/* Applies @st directly to tree @fd (the model). */
static void direct_step(struct sim *s, int fd, const struct step *st)
{
        struct direct_op op;

        direct_prepare(s, st, &op);
        direct_exec(fd, &op);
        direct_clear(&op);
}

/* The scripted local side of the conflicts (after the random steps). */
static int scripted(struct sim *s, unsigned i, struct step *st)
{
        static const struct { enum step_kind kind; const char *name; } script[] = {
                { S_CONTENT, "c0" },    /* server edits another line: clean merge */
                { S_CONTENT, "c1" },    /* server edits the same line: content conflict */
                { S_CONTENT, "c2" },    /* server deletes: edit-delete */
                { S_UNLINK, "c3" },     /* server edits: delete-edit */
                { S_CHMOD, "c4" },      /* server chmods differently: mode */
                { S_CREATE, "cc" },     /* server creates the same name: create-create */
                { S_CONTENT, "cc" },
                { S_CONTENT, "c5" },    /* two more clean merges */
                { S_CONTENT, "c6" },
        };
        char buf[256];

        if (i >= G_N_ELEMENTS(script))
                return 0;
        memset(st, 0, sizeof(*st));
        st->kind = script[i].kind;
        st->over = -1;
        st->ent = -1;
        for (guint j = 0; j < s->ents->len; j++)
                if (ENT(s, j)->alive && !strcmp(ENT(s, j)->name, script[i].name) &&
                    ENT(s, j)->parent == 0)
                        st->ent = (int)j;
        snprintf(st->name, sizeof(st->name), "%s", script[i].name);
        if (st->kind == S_CREATE) {
                st->ent = 0;
                st->dir = 0;
        }
        g_assert_cmpint(st->ent, >=, 0);
        initial_text(script[i].name, buf);
        if (i == 0 || i >= 7)
                *strstr(buf, "line 1") = 'L';           /* "c0 Line 1" */
        else if (i == 1)
                strstr(buf, "line 5")[5] = '#';          /* "c1 line #" */
        else
                snprintf(buf, sizeof(buf), "local %s\n", script[i].name);
        snprintf(st->text, sizeof(st->text), "%s", buf);
        st->mode = 0600;
        return 1;
}

static void run_open(struct run *r, const char *dir, bool no_fsync)
{
        struct oplog_options o = OPLOG_OPTIONS_INIT;
        char *p;

        r->dir = g_strdup(dir);
        r->srv = open_dir(dir, "srv");
        r->direct = open_dir(dir, "direct");
        g_assert_cmpint(r->srv, >=, 0);
        o.no_fsync = no_fsync;
        p = g_build_filename(dir, "log", NULL);
        g_assert_cmpint(oplog_open(&r->log, p, &o), ==, 0);
        g_free(p);
        p = g_build_filename(dir, "containers", NULL);
        (void)mkdir(p, 0700);
        g_free(p);
        p = g_build_filename(dir, "scratch", NULL);
        r->scratch = open(p, O_RDWR | O_CREAT, 0600);
        g_assert_cmpint(r->scratch, >=, 0);
        g_free(p);
}

static void run_close(struct run *r)
{
        oplog_close(r->log);
        close(r->srv);
        if (r->direct >= 0)
                close(r->direct);
        close(r->scratch);
        g_free(r->dir);
}

/* Registers every initial object of the simulation with the log (the view caching them). */
static void register_all(struct run *r)
{
        struct sim *s = &r->sim;

        OBJ(s, 0)->lid = tree_register(r->log, r->srv, "");
        for (guint i = 0; i < s->ents->len; i++) {
                char *p = ent_path(s, (int)i);

                OBJ(s, ENT(s, i)->obj)->lid = tree_register(r->log, r->srv, p);
                g_free(p);
        }
}

static unsigned files_of(const char *dir)
{
        char *p = g_build_filename(dir, "files", NULL), *text = NULL;
        unsigned n = 12;

        if (g_file_get_contents(p, &text, NULL, NULL))
                n = (unsigned)atoi(text);
        g_free(text);
        g_free(p);
        return n;
}

static int cmd_init(const char *dir, unsigned seed, unsigned files)
{
        struct run r = { 0 };
        char *p, *n;

        g_assert_cmpint(g_mkdir_with_parents(dir, 0755), ==, 0);
        /* srv/ and direct/ may exist already, empty (mount points of the benchmark). */
        p = g_build_filename(dir, "srv", NULL);
        g_assert_true(mkdir(p, 0755) == 0 || errno == EEXIST);
        g_free(p);
        p = g_build_filename(dir, "direct", NULL);
        g_assert_true(mkdir(p, 0755) == 0 || errno == EEXIST);
        g_free(p);
        p = g_build_filename(dir, "files", NULL);
        n = g_strdup_printf("%u", files);
        g_assert_true(g_file_set_contents(p, n, -1, NULL));
        g_free(n);
        g_free(p);
        run_open(&r, dir, false);
        sim_init(&r.sim, seed, files);
        write_initial(&r.sim, r.srv);
        write_initial(&r.sim, r.direct);
        register_all(&r);
        run_close(&r);
        sim_free(&r.sim);
        return 0;
}

/* Reads DIR/acks: step number -> lid (0 for steps that made none). */
static GHashTable *read_acks(const char *dir)
{
        GHashTable *h = g_hash_table_new_full(g_int_hash, g_int_equal, g_free, g_free);
        char *p = g_build_filename(dir, "acks", NULL), *text = NULL;

        if (g_file_get_contents(p, &text, NULL, NULL)) {
                char **lines = g_strsplit(text, "\n", -1);

                for (char **l = lines; *l && **l; l++) {
                        int *k = g_new(int, 1);
                        uint64_t *lid = g_new(uint64_t, 1);

                        if (sscanf(*l, "%d %" SCNu64, k, lid) != 2) {
                                g_free(k);
                                g_free(lid);
                                continue;
                        }
                        g_hash_table_insert(h, k, lid);
                }
                g_strfreev(lines);
        }
        g_free(text);
        g_free(p);
        return h;
}

static void ack(struct run *r, unsigned k, uint64_t lid)
{
        fprintf(r->acks, "%u %" PRIu64 "\n", k, lid);
        fflush(r->acks);
        g_assert_cmpint(fsync(fileno(r->acks)), ==, 0);
}

/* One step: generated, logged unless already acknowledged, applied to the model. */
static int do_step(struct run *r, struct step *st, unsigned k, bool model)
{
        uint64_t made = 0, *acked = g_hash_table_lookup(r->lids, &k);
        int new_obj, e;

        if (acked) {
                made = *acked;
        } else {
                e = log_step(r, st, &made);
                if (e < 0)
                        return e;
                if (model)
                        direct_step(&r->sim, r->direct, st);
                ack(r, k, made);
        }
        sim_apply(&r->sim, st, &new_obj);
        if (new_obj >= 0)
                OBJ(&r->sim, new_obj)->lid = made;
        return 0;
}

static int cmd_record(const char *dir, unsigned seed, unsigned steps, bool with_script)
{
        struct run r = { 0 };
        struct step st;
        unsigned k = 0;
        char *p;
        int e;

        run_open(&r, dir, false);
        sim_init(&r.sim, seed, files_of(dir));
        /* The initial objects' lids, as registered by init (the same order). */
        for (guint i = 0; i < r.sim.ents->len; i++) {
                char *path = ent_path(&r.sim, (int)i);
                struct stat sst;

                g_assert_cmpint(fstatat(r.srv, path, &sst, AT_SYMLINK_NOFOLLOW), ==, 0);
                g_assert_cmpint(oplog_find_ino(r.log, sst.st_ino, &OBJ(&r.sim, ENT(&r.sim, i)->obj)->lid), ==, 0);
                g_free(path);
        }
        OBJ(&r.sim, 0)->lid = OPLOG_ROOT;
        r.lids = read_acks(dir);
        p = g_build_filename(dir, "acks", NULL);
        r.acks = fopen(p, "a");
        g_assert_nonnull(r.acks);
        g_free(p);
        for (k = 1; k <= steps; k++) {
                gen(&r.sim, &st, k);
                e = do_step(&r, &st, k, true);
                if (e < 0) {
                        fprintf(stderr, "step %u: %s\n", k, strerror(-e));
                        return 1;
                }
        }
        for (unsigned i = 0; with_script && scripted(&r.sim, i, &st); i++, k++) {
                e = do_step(&r, &st, k, false);
                if (e < 0) {
                        fprintf(stderr, "scripted step %u: %s\n", i, strerror(-e));
                        return 1;
                }
        }
        fclose(r.acks);
        g_hash_table_destroy(r.lids);
        run_close(&r);
        sim_free(&r.sim);
        return 0;
}

static int cmd_server_edits(const char *dir)
{
        int srv = open_dir(dir, "srv");
        char buf[256];

        g_assert_cmpint(srv, >=, 0);
        initial_text("c0", buf);
        *strstr(buf, "line 9") = 'L';
        tree_put(srv, "c0", buf);                       /* another line: merges */
        initial_text("c5", buf);
        *strstr(buf, "line 9") = 'L';
        tree_put(srv, "c5", buf);
        initial_text("c6", buf);
        *strstr(buf, "line 9") = 'L';
        tree_put(srv, "c6", buf);
        initial_text("c1", buf);
        strstr(buf, "line 5")[5] = '%';
        tree_put(srv, "c1", buf);                       /* the same line: conflicts */
        g_assert_cmpint(unlinkat(srv, "c2", 0), ==, 0); /* edit-delete */
        tree_put(srv, "c3", "c3 edited on the server\n"); /* delete-edit */
        g_assert_cmpint(fchmodat(srv, "c4", 0640, 0), ==, 0); /* mode */
        tree_put(srv, "cc", "the server's cc\n");       /* create-create */
        if (getenv("FCACHE_TEST_SERVER_CLOCK")) {
                /* A server whose clock is off: its edits carry its time (libfaketime's here). */
                struct timespec ts[2] = { { time(NULL), 0 }, { time(NULL), 0 } };
                const char *edited[] = { "c0", "c1", "c3", "c5", "c6", "cc" };

                for (size_t i = 0; i < G_N_ELEMENTS(edited); i++)
                        g_assert_cmpint(utimensat(srv, edited[i], ts, 0), ==, 0);
        }
        close(srv);
        return 0;
}

static int cmd_reint(const char *dir)
{
        struct reintegrate_options o = REINTEGRATE_OPTIONS_INIT;
        struct reintegrate_stats st;
        struct run r = { 0 };
        int e;

        run_open(&r, dir, false);
        /* The server is a local directory: batches synced, the journal's sync points kept. */
        o.backing_local = true;
        e = reintegrate_run(r.log, r.srv, &o, &st);
        if (e < 0) {
                fprintf(stderr, "reintegrate: %s\n", strerror(-e));
                return 1;
        }
        printf("total=%" PRIu64 " applied=%" PRIu64 " already=%" PRIu64 " merged=%" PRIu64
               " conflicts=%" PRIu64 " held=%" PRIu64 "\n", st.total, st.applied, st.already,
               st.merged, st.conflicts, st.held);
        run_close(&r);
        return 0;
}

struct conflict_lines {
        struct oplog *log;
        GPtrArray *lines;
};

/* One "CONFLICT" line of the dump; sorted before printing (ids follow the replay's finishing order). */
static int print_conflict(void *ud, const struct oplog_conflict *c)
{
        struct conflict_lines *cl = ud;
        struct oplog *log = cl->log;
        const char *ids[3] = { c->base, c->local, c->remote };
        GString *out = g_string_new(NULL);

        g_string_append_printf(out, "CONFLICT %s %s", c->kind, c->path);
        for (int i = 0; i < 3; i++) {
                void *data;
                size_t size;
                char *sum;

                if (!ids[i][0]) {
                        g_string_append(out, " -");
                        continue;
                }
                if (fcache_merge_store_get(&data, &size, oplog_store(log), ids[i]) < 0) {
                        g_string_append(out, " MISSING");
                        continue;
                }
                sum = g_compute_checksum_for_data(G_CHECKSUM_SHA256, data, size);
                g_string_append_printf(out, " %.12s", sum);
                g_free(sum);
                free(data);
        }
        g_ptr_array_add(cl->lines, g_string_free(out, FALSE));
        return 0;
}

static gint cmp_str(gconstpointer a, gconstpointer b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmd_dump(const char *dir, const char *which)
{
        int fd = open_dir(dir, which);
        char *d;

        g_assert_cmpint(fd, >=, 0);
        d = tree_dump(fd, false);
        fputs(d, stdout);
        g_free(d);
        close(fd);
        if (!strcmp(which, "srv")) {
                struct run r = { 0 };

                struct conflict_lines cl;

                run_open(&r, dir, false);
                cl.log = r.log;
                cl.lines = g_ptr_array_new_with_free_func(g_free);
                g_assert_cmpint(oplog_conflict_foreach(r.log, print_conflict, &cl), ==, 0);
                g_ptr_array_sort(cl.lines, cmp_str);
                for (guint i = 0; i < cl.lines->len; i++)
                        printf("%s\n", (char *)cl.lines->pdata[i]);
                g_ptr_array_unref(cl.lines);
                run_close(&r);
        }
        return 0;
}

/* Disk full: content changes of 64 KiB until the log says ENOSPC. */
static int cmd_fill(const char *dir)
{
        struct oplog_options o = OPLOG_OPTIONS_INIT;
        struct oplog *log;
        char *p = g_build_filename(dir, "log", NULL), *big = g_malloc(65536);
        FILE *acks;
        int scratch, e = 0;
        unsigned k;

        if (oplog_open(&log, p, &o) < 0) {
                fprintf(stderr, "cannot open the log\n");
                return 1;
        }
        g_free(p);
        p = g_build_filename(dir, "acks", NULL);
        acks = fopen(p, "a");
        g_free(p);
        scratch = memfd_create("scratch", 0);
        g_assert_cmpint(scratch, >=, 0);
        for (k = 1; k < 1000000; k++) {
                uint64_t lid;
                char name[32];

                snprintf(name, sizeof(name), "fill%u", k);
                memset(big, 'a' + (int)(k % 26), 65536);
                g_assert_cmpint(ftruncate(scratch, 0), ==, 0);
                g_assert_cmpint(pwrite(scratch, big, 65536, 0), ==, 65536);
                e = oplog_record_create(log, OPLOG_ROOT, name, 0644, 0, 0, &lid);
                if (e == 0) {
                        fprintf(acks, "create %s\n", name);
                        fflush(acks);
                        e = oplog_record_content(log, lid, scratch);
                }
                if (e < 0)
                        break;
                fprintf(acks, "content %s %c\n", name, 'a' + (int)(k % 26));
                fflush(acks);
        }
        fclose(acks);
        oplog_close(log);
        close(scratch);
        g_free(big);
        printf("fill: %u steps, then %s\n", k - 1, strerror(-e));
        return e == -ENOSPC ? 0 : 1;
}

struct fill_check {
        struct oplog *log;
        GHashTable *names;      /* lid -> name */
        GHashTable *content;    /* name -> letter */
};

static int check_rec(void *ud, const struct oplog_record *r)
{
        struct fill_check *fc = ud;

        if (r->kind == OPLOG_CREATE) {
                g_hash_table_insert(fc->names, g_memdup2(&r->lid, sizeof(r->lid)), g_strdup(r->name));
        } else if (r->kind == OPLOG_CONTENT) {
                const char *name = g_hash_table_lookup(fc->names, &r->lid);
                int fd = oplog_content_open(fc->log, r->seq);
                char c = 0;

                if (!name || fd < 0 || r->size != 65536 || pread(fd, &c, 1, 65535) != 1) {
                        if (fd >= 0)
                                close(fd);
                        return -EIO;
                }
                close(fd);
                g_hash_table_insert(fc->content, g_strdup(name), GINT_TO_POINTER((int)c));
        }
        return 0;
}

static int cmd_check_fill(const char *dir)
{
        struct fill_check fc;
        char *p = g_build_filename(dir, "log", NULL), *text = NULL;
        char **lines;
        unsigned checked = 0;
        int bad = 0;

        g_assert_cmpint(oplog_open(&fc.log, p, NULL), ==, 0);
        g_free(p);
        fc.names = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
        fc.content = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        if (oplog_foreach(fc.log, true, check_rec, &fc) < 0) {
                fprintf(stderr, "a content record is damaged\n");
                return 1;
        }
        p = g_build_filename(dir, "acks", NULL);
        g_assert_true(g_file_get_contents(p, &text, NULL, NULL));
        g_free(p);
        lines = g_strsplit(text, "\n", -1);
        for (char **l = lines; *l && **l; l++) {
                char name[64], c;

                if (sscanf(*l, "content %63s %c", name, &c) == 2) {
                        checked++;
                        if (GPOINTER_TO_INT(g_hash_table_lookup(fc.content, name)) != c) {
                                fprintf(stderr, "acknowledged %s lost\n", name);
                                bad = 1;
                        }
                }
        }
        printf("check-fill: %u acknowledged contents, %s\n", checked, bad ? "LOST" : "all present");
        g_strfreev(lines);
        g_free(text);
        g_hash_table_destroy(fc.names);
        g_hash_table_destroy(fc.content);
        oplog_close(fc.log);
        return bad || !checked;
}

static double now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Reintegration of STEPS mixed changes against applying them directly, same run, same data. */
static int cmd_bench(const char *dir, unsigned steps, unsigned files)
{
        struct reintegrate_stats rs;
        struct run r = { 0 };
        GArray *list = g_array_new(FALSE, FALSE, sizeof(struct direct_op));
        double t0, t_direct, t_reint;
        uint64_t records;
        char *a, *b;
        int e;

        if (cmd_init(dir, 42, files))
                return 1;
        /* Record (not timed; fsyncs skipped here only: recording is not what is measured). */
        run_open(&r, dir, true);
        sim_init(&r.sim, 42, files);
        for (guint i = 0; i < r.sim.ents->len; i++) {
                char *path = ent_path(&r.sim, (int)i);
                struct stat sst;

                g_assert_cmpint(fstatat(r.srv, path, &sst, AT_SYMLINK_NOFOLLOW), ==, 0);
                g_assert_cmpint(oplog_find_ino(r.log, sst.st_ino, &OBJ(&r.sim, ENT(&r.sim, i)->obj)->lid), ==, 0);
                g_free(path);
        }
        OBJ(&r.sim, 0)->lid = OPLOG_ROOT;
        for (unsigned k = 1; k <= steps; k++) {
                struct step st;
                uint64_t made;
                int new_obj;

                struct direct_op op;

                gen(&r.sim, &st, k);
                direct_prepare(&r.sim, &st, &op);
                g_array_append_val(list, op);
                e = log_step(&r, &st, &made);
                g_assert_cmpint(e, ==, 0);
                sim_apply(&r.sim, &st, &new_obj);
                if (new_obj >= 0)
                        OBJ(&r.sim, new_obj)->lid = made;
                }
        g_assert_cmpint(oplog_count(r.log, OPLOG_PENDING, &records), ==, 0);
        run_close(&r);
        sim_free(&r.sim);
        sync();

        /* Direct: the same steps as system calls on the copy of the tree. */
        r.direct = open_dir(dir, "direct");
        t0 = now();
        for (guint i = 0; i < list->len; i++)
                direct_exec(r.direct, &g_array_index(list, struct direct_op, i));
        t_direct = now() - t0;

        /* Reintegration, log with its real fsyncs. */
        {
                struct run rr = { 0 };

                run_open(&rr, dir, false);
                t0 = now();
                e = reintegrate_run(rr.log, rr.srv, NULL, &rs);
                t_reint = now() - t0;
                g_assert_cmpint(e, ==, 0);
                a = tree_dump(rr.srv, false);
                b = tree_dump(r.direct, false);
                run_close(&rr);
        }
        close(r.direct);
        printf("steps=%u records=%" PRIu64 " applied=%" PRIu64 " conflicts=%" PRIu64
               " direct=%.3fs reintegrate=%.3fs ratio=%.2f same-result=%s\n", steps, records,
               rs.applied + rs.already, rs.conflicts, t_direct, t_reint, t_reint / t_direct,
               strcmp(a, b) ? "NO" : "yes");
        e = strcmp(a, b) || rs.conflicts;
        g_free(a);
        g_free(b);
        for (guint i = 0; i < list->len; i++)
                direct_clear(&g_array_index(list, struct direct_op, i));
        g_array_unref(list);
        return e;
}

int main(int argc, char **argv)
{
        if (argc >= 4 && !strcmp(argv[1], "init"))
                return cmd_init(argv[2], (unsigned)atoi(argv[3]), argc > 4 ? (unsigned)atoi(argv[4]) : 12);
        if (argc >= 5 && !strcmp(argv[1], "record"))
                return cmd_record(argv[2], (unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]),
                                  argc > 5 && !strcmp(argv[5], "conflicts"));
        if (argc == 3 && !strcmp(argv[1], "server-edits"))
                return cmd_server_edits(argv[2]);
        if (argc == 3 && !strcmp(argv[1], "reint"))
                return cmd_reint(argv[2]);
        if (argc == 4 && !strcmp(argv[1], "dump"))
                return cmd_dump(argv[2], argv[3]);
        if (argc == 3 && !strcmp(argv[1], "fill"))
                return cmd_fill(argv[2]);
        if (argc == 3 && !strcmp(argv[1], "check-fill"))
                return cmd_check_fill(argv[2]);
        if (argc >= 4 && !strcmp(argv[1], "bench"))
                return cmd_bench(argv[2], (unsigned)atoi(argv[3]), argc > 4 ? (unsigned)atoi(argv[4]) : 2000);
        fprintf(stderr, "usage: see the header of offline-tool.c\n");
        return 2;
}
