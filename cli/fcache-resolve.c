/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fcache-resolve: settle, by hand, the conflicts that reintegration of an
 * fcache volume kept (see fcache-resolve(1)).
 *
 * It speaks the volume's control socket, CacheDir/control.sock, served by
 * fcache-view (daemon/view/view-conflicts.c):
 *     query conflicts [TAB PATH]   conflict=ID KIND PATH, conflict_detail=ID DETAIL
 *     conflict-version ID WHICH    size=, content_base64=
 *     resolve ID local|remote|both resolved=, path=, kept=, replayed=, dropped=
 *     resolve-merged ID BASE64|@TOKEN  (merged-chunk ID TOKEN OFFSET BASE64 stages it)
 * The socket is found with --cache-dir, or from the fuse.fcache mount that
 * holds PATH (/proc/self/mountinfo) and the volumes.d/NAME.conf whose
 * Mountpoint= is that mount.  The socket is root's: everyone else (and root
 * when the socket cannot be reached) goes through fcached's D-Bus objects
 * instead (resolve-bus.c), which show each caller only the conflicts it may
 * read and check polkit on every version and resolve.
 *
 * Exit status: 0 done, 1 error, 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <git2.h>
#include <glib.h>
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctlmsg.h"
#include "escape.h"
#include "fcachectl.h"
#include "polkit-agent.h"
#include "resolve-bus.h"
#include "volume-config.h"

#define EXIT_USAGE 2
/* Merged content goes in chunks: each request stays below this size. */
#define MAX_REQUEST 8192

static const char *prog = "fcache-resolve";
static bool opt_json;
static const char *opt_cache_dir;
static unsigned long long opt_id;
static int opt_color = -1;      /* -1: when stdout is a terminal */
static bool opt_ask_password = true;
static bool quiet;              /* fail() says nothing: a way is being tried */
/* Through fcached's D-Bus objects (not the control socket), on this volume. */
static struct rbus *bus;
static const struct rbus_volume *bus_vol;

static const char usage_text[] =
"Usage: fcache-resolve [OPTIONS] COMMAND [ARGS]\n"
"\n"
"Settle the conflicts that reintegration of an fcache volume kept: a file\n"
"or name changed both offline (local) and on the server (remote).\n"
"\n"
"Commands:\n"
"  list [PATH]             the conflicts under PATH (the whole volume if none):\n"
"                          ID, kind, path and what was found\n"
"  show PATH               the conflict on PATH: its base, local and remote\n"
"                          versions (text: one diff3-style view with markers)\n"
"  take local PATH         the server gets the local version (content, mode,\n"
"                          existence or name, by the conflict's kind)\n"
"  take remote PATH        the local change is dropped; PATH follows the server\n"
"  keep-both PATH          the server keeps its version under PATH; the local\n"
"                          one is written beside it as PATH.local\n"
"  edit PATH               opens the diff3-marked text in $VISUAL/$EDITOR; when\n"
"                          the saved file has no conflict markers left, the\n"
"                          server gets it; otherwise nothing changes\n"
"\n"
"PATH is absolute under the volume's mountpoint, or relative to the volume\n"
"root (not to the current directory).\n"
"\n"
"Options:\n"
"  -C, --cache-dir DIR     the volume's CacheDir (its control.sock); default:\n"
"                          found from the fuse.fcache mount holding PATH (or\n"
"                          the current directory) and the volumes.d/*.conf\n"
"                          whose Mountpoint= it is\n"
"      --id ID             act on conflict ID (when PATH has several)\n"
"      --json              list: one JSON array of {id, kind, path, detail}\n"
"      --color[=WHEN]      colour show's output: always, never, auto (default:\n"
"                          auto, only when standard output is a terminal)\n"
"      --no-ask-password   never ask for a password (through fcached, on a\n"
"                          terminal, polkit may ask for one to read or settle)\n"
"  -h, --help              this help\n"
"      --version           print the version and exit\n"
"\n"
"Run by anyone but root, or when the control socket cannot be reached, it\n"
"goes through fcached (D-Bus), which shows only the conflicts on paths the\n"
"caller may read and checks polkit (org.fcache.resolve) for the rest.\n"
"\n"
"Environment: FCACHE_VOLUMES_DIR (default /etc/fcache/volumes.d), VISUAL,\n"
"EDITOR (default vi), TMPDIR.\n"
"\n"
"Exit status: 0 done, 1 error (the message says which and why), 2 usage.\n"
"See fcache-resolve(1).\n";

__attribute__((format(printf, 1, 2)))
static int fail(const char *fmt, ...)
{
        va_list ap;

        if (quiet)
                return EXIT_FAILURE;
        fprintf(stderr, "%s: ", prog);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return EXIT_FAILURE;
}

__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...)
{
        va_list ap;

        fprintf(stderr, "%s: ", prog);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nTry '%s --help'.\n", prog);
        return EXIT_USAGE;
}

/* ------------------------------------------------------------------------ */
/* Finding the volume                                                       */
/* ------------------------------------------------------------------------ */

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static char *unescape(const char *s)
{
        char *r = g_malloc(strlen(s) + 1), *o = r;

        while (*s) {
                if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' &&
                    s[3] >= '0' && s[3] <= '7') {
                        *o++ = (char)(((s[1] - '0') << 6) | ((s[2] - '0') << 3) | (s[3] - '0'));
                        s += 4;
                } else {
                        *o++ = *s++;
                }
        }
        *o = 0;
        return r;
}

struct fmount {
        char *mountpoint;
        char *name;     /* of the source fcache:NAME */
};

/* The fuse.fcache mounts, in mountinfo order. */
static GPtrArray *fcache_mounts(void)
{
        GPtrArray *a = g_ptr_array_new();
        FILE *f = fopen("/proc/self/mountinfo", "re");
        char *line = NULL;
        size_t cap = 0;

        if (!f)
                return a;
        while (getline(&line, &cap, f) > 0) {
                char *dash = strstr(line, " - "), **w, **t;
                struct fmount *m;

                if (!dash)
                        continue;
                t = g_strsplit(dash + 3, " ", 3);
                if (t[0] && t[1] && !strcmp(t[0], "fuse.fcache")) {
                        w = g_strsplit(line, " ", 6);
                        if (w[0] && w[1] && w[2] && w[3] && w[4]) {
                                m = g_new0(struct fmount, 1);
                                m->mountpoint = unescape(w[4]);
                                m->name = unescape(g_str_has_prefix(t[1], "fcache:") ?
                                                   t[1] + 7 : t[1]);
                                g_ptr_array_add(a, m);
                        }
                        g_strfreev(w);
                }
                g_strfreev(t);
        }
        free(line);
        fclose(f);
        return a;
}

/* The fuse.fcache mount holding absolute path @abs (the innermost), or NULL. */
static struct fmount *mount_of(GPtrArray *mounts, const char *abs)
{
        struct fmount *best = NULL;

        for (guint i = 0; i < mounts->len; i++) {
                struct fmount *m = mounts->pdata[i];
                size_t n = strlen(m->mountpoint);

                if (!strncmp(abs, m->mountpoint, n) && (abs[n] == 0 || abs[n] == '/') &&
                    (!best || n >= strlen(best->mountpoint)))
                        best = m;
        }
        return best;
}

/* realpath of @p, or of its parent joined with its last name when @p does not exist. */
static char *real_abs(const char *p)
{
        char buf[PATH_MAX];
        char *dir, *base, *r = NULL;

        if (realpath(p, buf))
                return g_strdup(buf);
        dir = g_path_get_dirname(p);
        base = g_path_get_basename(p);
        if (realpath(dir, buf))
                r = g_build_filename(buf, base, NULL);
        g_free(dir);
        g_free(base);
        return r ? r : g_strdup(p);
}

/* CacheDir of the volume mounted on @m from volumes.d, or NULL with a message. */
static char *cache_dir_of(const struct fmount *m)
{
        const char *dir = getenv("FCACHE_VOLUMES_DIR");
        char *pattern, *found = NULL;
        glob_t g;

        if (!dir || !*dir)
                dir = VOLUME_CONFIG_DIR;
        pattern = g_build_filename(dir, "*.conf", NULL);
        if (glob(pattern, 0, NULL, &g) == 0) {
                for (size_t i = 0; i < g.gl_pathc && !found; i++) {
                        struct volume_config c;
                        char err[512], *base = g_path_get_basename(g.gl_pathv[i]);
                        bool same_name;

                        base[strlen(base) - 5] = 0;
                        same_name = !strcmp(base, m->name);
                        g_free(base);
                        volume_config_init(&c);
                        if (volume_config_load(&c, g.gl_pathv[i], err, sizeof(err)) == 0 &&
                            c.cache_dir && ((c.mountpoint && !strcmp(c.mountpoint, m->mountpoint)) ||
                                            (!c.mountpoint && same_name)))
                                found = g_strdup(c.cache_dir);
                        volume_config_free(&c);
                }
                globfree(&g);
        }
        if (!found)
                fail("no %s/*.conf has Mountpoint=%s (the fcache volume '%s'): give its "
                     "CacheDir with --cache-dir", dir, m->mountpoint, m->name);
        g_free(pattern);
        return found;
}

/*
 * The control socket for @path (may be NULL: the current directory's
 * volume, or the only one).  Returns a g_free()d path or NULL (reported).
 */
static char *find_socket(const char *path)
{
        GPtrArray *mounts;
        struct fmount *m = NULL;
        char *abs = NULL, *cwd, *cache, *sock;

        if (opt_cache_dir)
                return g_build_filename(opt_cache_dir, "control.sock", NULL);
        mounts = fcache_mounts();
        if (path && path[0] == '/') {
                abs = real_abs(path);
                m = mount_of(mounts, abs);
                if (!m)
                        fail("'%s' is not on a mounted fcache volume (no fuse.fcache mount "
                             "holds it); give --cache-dir", path);
        } else {
                cwd = g_get_current_dir();
                m = mount_of(mounts, cwd);
                g_free(cwd);
                if (!m && mounts->len == 1)
                        m = mounts->pdata[0];
                if (!m && mounts->len)
                        fail("the current directory is on no fcache volume and %u are "
                             "mounted: give an absolute PATH or --cache-dir", mounts->len);
                else if (!m)
                        fail("no fcache volume is mounted (no fuse.fcache mount): give "
                             "--cache-dir");
        }
        cache = m ? cache_dir_of(m) : NULL;
        sock = cache ? g_build_filename(cache, "control.sock", NULL) : NULL;
        g_free(cache);
        g_free(abs);
        for (guint i = 0; i < mounts->len; i++) {
                struct fmount *x = mounts->pdata[i];

                g_free(x->mountpoint);
                g_free(x->name);
                g_free(x);
        }
        g_ptr_array_free(mounts, TRUE);
        return sock;
}

/* ------------------------------------------------------------------------ */
/* The control socket                                                       */
/* ------------------------------------------------------------------------ */

static char *ctl_path;

struct answer {
        int status;
        char *error;
        GPtrArray *lines;       /* "key=value" strings (a value may hold a newline) */
};

static void answer_clear(struct answer *a)
{
        g_free(a->error);
        if (a->lines)
                g_ptr_array_free(a->lines, TRUE);
        memset(a, 0, sizeof(*a));
}

/* The first value of @key, or NULL. */
static const char *answer_get(const struct answer *a, const char *key)
{
        size_t n = strlen(key);

        for (guint i = 0; i < a->lines->len; i++) {
                const char *l = a->lines->pdata[i];

                if (!strncmp(l, key, n) && l[n] == '=')
                        return l + n + 1;
        }
        return NULL;
}

static int ctl_reachable(void)
{
        int fd = ctl_connect(ctl_path);

        if (fd < 0)
                return fail("cannot reach the volume's control socket %s: %s%s", ctl_path,
                            strerror(-fd), fd == -ENOENT || fd == -ECONNREFUSED ?
                            " (is the volume's fcache-view running?)" :
                            fd == -EACCES ? " (it is root's: run as root)" : "");
        close(fd);
        return 0;
}

/*
 * Sends one request (on @target_fd, an O_PATH descriptor in the volume, or
 * -1 for its root) and reads its answer; 0, or 1 (reported) if the
 * exchange failed.
 */
static int ctl_request(const char *cmd, int target_fd, const char *name, struct answer *a)
{
        struct ctl_call c = { .command = cmd, .target_fd = target_fd, .name = name };
        struct ctl_answer ca;
        int r = ctl_call(ctl_path, &c, &ca);

        memset(a, 0, sizeof(*a));
        a->lines = g_ptr_array_new_with_free_func(g_free);
        if (!ca.answered) {
                ctl_answer_clear(&ca);
                return fail("no answer on the volume's control socket %s: %s", ctl_path,
                            strerror(-r));
        }
        a->status = ca.status;
        a->error = g_strdup(ca.error);
        for (size_t i = 0; i < ca.n; i++)
                g_ptr_array_add(a->lines, g_strconcat(ca.keys[i], "=", ca.values[i], NULL));
        ctl_answer_clear(&ca);
        return 0;
}

static int ctl_call_root(const char *cmd, struct answer *a)
{
        return ctl_request(cmd, -1, NULL, a);
}

/* Opens @path; an object held by a conflict (FCACHE_ECONFLICT) or gone is
 * named by its directory and its name (*name, g_free). */
static int open_target(const char *path, char **name)
{
        g_autofree char *dir = NULL;
        int fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC), e;

        *name = NULL;
        if (fd >= 0 || (errno != FCACHE_ECONFLICT && errno != ENOENT))
                return fd;
        e = errno;
        *name = g_path_get_basename(path);
        dir = g_path_get_dirname(path);
        if (!strcmp(*name, "/") || !strcmp(*name, ".") || !strcmp(*name, "..") ||
            (fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
                g_clear_pointer(name, g_free);
                errno = e;
                return -1;
        }
        return fd;
}

/* @path (NULL: the root), as the person gave it or under the volume's mountpoint. */
static int ctl_call_on(const char *cmd, const char *path, struct answer *a)
{
        g_autofree char *name = NULL;
        struct answer st;
        const char *mp;
        int fd, r;

        if (!path)
                return ctl_request(cmd, -1, NULL, a);
        /* A relative path is under the volume's root first, as the view lists them. */
        fd = -1;
        if (path[0] != '/' && ctl_call_root("query state", &st) == 0) {
                mp = answer_get(&st, "mountpoint");
                if (mp) {
                        g_autofree char *full = g_build_filename(mp, path, NULL);

                        fd = open_target(full, &name);
                }
                answer_clear(&st);
        }
        if (fd < 0)
                fd = open_target(path, &name);
        if (fd < 0)
                return fail("cannot open %s: %s", path, strerror(errno));
        r = ctl_request(cmd, fd, name, a);
        close(fd);
        return r;
}

/* ------------------------------------------------------------------------ */
/* Conflicts                                                                */
/* ------------------------------------------------------------------------ */

struct conflict {
        unsigned long long id;
        char *kind;
        char *path;
        char *detail;
        char *object;   /* through fcached: its Conflict1 object */
};

static int bus_list_conflicts(const char *path, GArray **out);

static void conflicts_free(GArray *a)
{
        for (guint i = 0; a && i < a->len; i++) {
                struct conflict *c = &g_array_index(a, struct conflict, i);

                g_free(c->kind);
                g_free(c->path);
                g_free(c->detail);
                g_free(c->object);
        }
        if (a)
                g_array_free(a, TRUE);
}

/* The conflicts under @path (NULL: all) into *out; 0 or 1 (reported). */
static int list_conflicts(const char *path, GArray **out)
{
        struct answer a;
        GArray *rows;
        int r;

        if (bus)
                return bus_list_conflicts(path, out);
        r = ctl_call_on("query conflicts", path, &a);
        if (r)
                return r;
        if (a.status < 0) {
                r = fail("listing conflicts%s%s: %s", path ? " under " : "", path ? path : "",
                         a.error ? a.error : strerror(-a.status));
                answer_clear(&a);
                return r;
        }
        rows = g_array_new(FALSE, TRUE, sizeof(struct conflict));
        for (guint i = 0; i < a.lines->len; i++) {
                const char *l = a.lines->pdata[i];
                struct conflict c = { 0 };
                char *end;

                if (!strncmp(l, "conflict=", 9)) {
                        const char *sp;

                        c.id = strtoull(l + 9, &end, 10);
                        if (*end != ' ')
                                continue;
                        sp = strchr(end + 1, ' ');
                        if (!sp)
                                continue;
                        c.kind = g_strndup(end + 1, (gsize)(sp - end - 1));
                        c.path = g_strdup(sp + 1);
                        g_array_append_val(rows, c);
                } else if (!strncmp(l, "conflict_detail=", 16)) {
                        unsigned long long id = strtoull(l + 16, &end, 10);

                        for (guint j = 0; j < rows->len; j++) {
                                struct conflict *x = &g_array_index(rows, struct conflict, j);

                                if (x->id == id && !x->detail && *end == ' ')
                                        x->detail = g_strdup(end + 1);
                        }
                }
        }
        answer_clear(&a);
        *out = rows;
        return 0;
}

/* PATH as the volume-relative form the conflicts are listed under. */
static char *volume_rel(const char *path, const char *mountpoint)
{
        const char *p = path;
        char *abs = NULL, *r;
        size_t n = mountpoint ? strlen(mountpoint) : 0;

        if (path[0] == '/' && n) {
                if (strncmp(path, mountpoint, n) || (path[n] && path[n] != '/')) {
                        abs = real_abs(path);
                        p = abs;
                }
                if (!strncmp(p, mountpoint, n) && (p[n] == 0 || p[n] == '/'))
                        p += n;
        }
        while (*p == '/' || (p[0] == '.' && (p[1] == '/' || p[1] == 0)))
                p++;
        r = g_strdup(p);
        n = strlen(r);
        while (n && r[n - 1] == '/')
                r[--n] = 0;
        g_free(abs);
        return r;
}

/* As list_conflicts, from the conflict objects fcached lets the caller see. */
static int bus_list_conflicts(const char *path, GArray **out)
{
        g_autofree char *top = path ? volume_rel(path, bus_vol->mountpoint) : g_strdup("");
        size_t n = strlen(top);
        GArray *rows = g_array_new(FALSE, TRUE, sizeof(struct conflict));

        for (guint i = 0; i < bus->conflicts->len; i++) {
                const struct rbus_conflict *bc = bus->conflicts->pdata[i];
                char *rel;
                struct conflict c = { 0 };

                if (strcmp(bc->volume, bus_vol->name))
                        continue;
                rel = volume_rel(bc->path, bus_vol->mountpoint);
                if (n && (strncmp(rel, top, n) || (rel[n] && rel[n] != '/'))) {
                        g_free(rel);
                        continue;
                }
                c.id = bc->id;
                c.kind = g_strdup(bc->kind);
                c.path = rel;
                c.detail = g_strdup(bc->detail);
                c.object = g_strdup(bc->object);
                g_array_append_val(rows, c);
        }
        *out = rows;
        return 0;
}

/* The one conflict on exactly @path (or --id); 0 or 1 (reported). */
static int find_conflict(const char *path, struct conflict *out)
{
        struct answer st;
        GArray *rows;
        char *rel;
        int r, found = -1, count = 0;
        GString *ids = g_string_new(NULL);

        if (bus) {
                rel = volume_rel(path, bus_vol->mountpoint);
        } else {
                r = ctl_call_root("query state", &st);
                if (r)
                        return r;
                rel = volume_rel(path, answer_get(&st, "mountpoint"));
                answer_clear(&st);
        }
        r = list_conflicts(NULL, &rows);
        if (r) {
                g_free(rel);
                return r;
        }
        for (guint i = 0; i < rows->len; i++) {
                struct conflict *c = &g_array_index(rows, struct conflict, i);

                if (strcmp(c->path, rel) || (opt_id && c->id != opt_id))
                        continue;
                if (found < 0)
                        found = (int)i;
                g_string_append_printf(ids, "%s%llu", count ? ", " : "", c->id);
                count++;
        }
        if (found < 0 && opt_id)
                r = fail("no conflict with ID %llu on '%s'", opt_id, rel);
        else if (found < 0)
                r = fail("no conflict on '%s'%s (see '%s list')", *rel ? rel : "/",
                         bus ? " that you may read (fcached shows none on paths you cannot "
                         "read)" : "", prog);
        else if (count > 1)
                r = fail("'%s' has %d conflicts (IDs %s): choose one with --id", rel, count,
                         ids->str);
        if (!r) {
                struct conflict *c = &g_array_index(rows, struct conflict, found);

                *out = *c;
                c->kind = c->path = c->detail = c->object = NULL;
        }
        g_string_free(ids, TRUE);
        conflicts_free(rows);
        g_free(rel);
        return r;
}

static void conflict_clear(struct conflict *c)
{
        g_free(c->kind);
        g_free(c->path);
        g_free(c->detail);
        g_free(c->object);
}

/* Version @which of conflict @c: 1 with *data, 0 when that side has none, -1 (reported). */
static int get_version(const struct conflict *c, const char *which, char **data, size_t *size)
{
        unsigned long long id = c->id;
        struct answer a;
        char cmd[96];
        const char *b64;
        gsize n = 0;

        if (bus) {
                g_autoptr(GError) e = NULL;
                int r = rbus_version(bus, c->object, which, data, size, &e);

                if (r < 0)
                        fail("reading the %s version of conflict %llu: %s", which, id,
                             e->message);
                return r;
        }
        snprintf(cmd, sizeof(cmd), "conflict-version %llu %s", id, which);
        if (ctl_call_root(cmd, &a))
                return -1;
        if (a.status == -ENOENT) {
                answer_clear(&a);
                return 0;
        }
        if (a.status < 0) {
                fail("reading the %s version of conflict %llu: %s", which, id,
                     a.error ? a.error : strerror(-a.status));
                answer_clear(&a);
                return -1;
        }
        b64 = answer_get(&a, "content_base64");
        if (b64 && *b64) {
                *data = (char *)g_base64_decode(b64, &n);
        } else {
                *data = g_strdup("");
                n = 0;
        }
        *data = g_realloc(*data, n + 1);
        (*data)[n] = 0;
        *size = n;
        answer_clear(&a);
        return 1;
}

struct versions {
        char *d[3];
        size_t n[3];
        bool have[3];
};
static const char *const which_names[3] = { "base", "local", "remote" };

static int get_versions(const struct conflict *c, struct versions *v)
{
        memset(v, 0, sizeof(*v));
        for (int i = 0; i < 3; i++) {
                int r = get_version(c, which_names[i], &v->d[i], &v->n[i]);

                if (r < 0)
                        return 1;
                v->have[i] = r > 0;
        }
        return 0;
}

static void versions_clear(struct versions *v)
{
        for (int i = 0; i < 3; i++)
                g_free(v->d[i]);
}

static bool is_binary(const char *d, size_t n)
{
        return memchr(d, 0, n < 8000 ? n : 8000) != NULL;
}

/* The diff3-style text of @v (with markers where it conflicts); NULL if binary or missing. */
static char *render_diff3(const struct versions *v, const char *path, size_t *len, bool *clean)
{
        git_merge_file_input in[3] = { GIT_MERGE_FILE_INPUT_INIT, GIT_MERGE_FILE_INPUT_INIT,
                                       GIT_MERGE_FILE_INPUT_INIT };
        git_merge_file_options o = GIT_MERGE_FILE_OPTIONS_INIT;
        git_merge_file_result res = { 0 };
        char *out = NULL;

        if (!v->have[1] || !v->have[2])
                return NULL;
        for (int i = 0; i < 3; i++) {
                if (v->have[i] && is_binary(v->d[i], v->n[i]))
                        return NULL;
                in[i].ptr = v->have[i] ? v->d[i] : "";
                in[i].size = v->have[i] ? v->n[i] : 0;
                in[i].path = path;
        }
        o.ancestor_label = "base";
        o.our_label = "local";
        o.their_label = "remote";
        o.flags = GIT_MERGE_FILE_STYLE_DIFF3;
        git_libgit2_init();
        if (git_merge_file(&res, &in[0], &in[1], &in[2], &o) == 0) {
                out = g_strndup(res.ptr ? res.ptr : "", res.len);
                *len = res.len;
                *clean = res.automergeable;
        }
        git_merge_file_result_free(&res);
        git_libgit2_shutdown();
        return out;
}

/* Is @s a conflict-marker line ("<<<<<<<", "|||||||", "=======", ">>>>>>>")? */
static bool marker_line(const char *s, size_t n)
{
        static const char marks[] = "<|=>";

        if (n < 7)
                return false;
        for (int m = 0; m < 4; m++) {
                size_t k = 0;

                while (k < n && s[k] == marks[m])
                        k++;
                if (k == 7 && (k == n || s[k] == ' ' || s[k] == '\n' || s[k] == '\r'))
                        return true;
        }
        return false;
}

static size_t count_markers(const char *d, size_t n)
{
        size_t count = 0, i = 0;

        while (i < n) {
                const char *nl = memchr(d + i, '\n', n - i);
                size_t l = nl ? (size_t)(nl - (d + i)) : n - i;

                if (marker_line(d + i, l))
                        count++;
                i += l + 1;
        }
        return count;
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                 */
/* ------------------------------------------------------------------------ */

static void json_string(FILE *f, const char *s)
{
        fputc('"', f);
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if (*p == '"' || *p == '\\')
                        fprintf(f, "\\%c", *p);
                else if (*p < 0x20)
                        fprintf(f, "\\u%04x", *p);
                else
                        fputc(*p, f);
        }
        fputc('"', f);
}

static int cmd_list(const char *path)
{
        GArray *rows;
        int r = list_conflicts(path, &rows);

        if (r)
                return r;
        if (opt_json) {
                fputc('[', stdout);
                for (guint i = 0; i < rows->len; i++) {
                        struct conflict *c = &g_array_index(rows, struct conflict, i);

                        printf("%s{\"id\":%llu,\"kind\":", i ? "," : "", c->id);
                        json_string(stdout, c->kind);
                        fputs(",\"path\":", stdout);
                        json_string(stdout, c->path);
                        fputs(",\"detail\":", stdout);
                        json_string(stdout, c->detail ? c->detail : "");
                        fputc('}', stdout);
                }
                fputs("]\n", stdout);
        } else if (!rows->len) {
                printf("no conflicts%s", path ? " under " : "");
                fc_fputs_display(path ? path : "", stdout);
                putchar('\n');
        } else {
                printf("%-5s %-16s %s\n", "ID", "KIND", "PATH");
                for (guint i = 0; i < rows->len; i++) {
                        struct conflict *c = &g_array_index(rows, struct conflict, i);

                        printf("%-5llu %-16s ", c->id, c->kind);
                        fc_fputs_display(c->path, stdout);
                        putchar('\n');
                        if (c->detail && *c->detail) {
                                printf("%-5s %-16s   ", "", "");
                                fc_fputs_display(c->detail, stdout);
                                putchar('\n');
                        }
                }
        }
        conflicts_free(rows);
        return fflush(stdout) ? fail("writing the list: %s", strerror(errno)) : 0;
}

static bool use_color(void)
{
        return opt_color < 0 ? isatty(STDOUT_FILENO) : opt_color;
}

#define C_RESET "\033[0m"
#define C_BOLD "\033[1m"
#define C_LOCAL "\033[32m"
#define C_BASE "\033[36m"
#define C_REMOTE "\033[31m"
#define C_MARK "\033[1;33m"

/* Prints the diff3 text, colouring the sections between markers. */
static void print_rendering(const char *d, size_t n, bool color)
{
        const char *section = NULL;
        size_t i = 0;

        while (i < n) {
                const char *nl = memchr(d + i, '\n', n - i);
                size_t l = nl ? (size_t)(nl - (d + i)) : n - i;

                if (color && marker_line(d + i, l)) {
                        char m = d[i];

                        section = m == '<' ? C_LOCAL : m == '|' ? C_BASE : m == '=' ? C_REMOTE
                                : NULL;
                        printf(C_MARK "%.*s" C_RESET "\n", (int)l, d + i);
                } else if (color && section) {
                        printf("%s%.*s" C_RESET "\n", section, (int)l, d + i);
                } else {
                        printf("%.*s%s", (int)l, d + i, nl ? "\n" : "");
                }
                i += l + 1;
        }
        if (n && d[n - 1] != '\n')
                printf("%s\n", color ? C_BOLD "\\ no newline at end" C_RESET : "");
}

static int cmd_show(const char *path)
{
        struct conflict c;
        struct versions v;
        bool color = use_color(), clean = true;
        char *text;
        size_t len = 0;
        int r = find_conflict(path, &c);

        if (r)
                return r;
        r = get_versions(&c, &v);
        if (r) {
                conflict_clear(&c);
                return r;
        }
        printf("%sconflict %llu: %s%s ", color ? C_BOLD : "", c.id, c.kind, color ? C_RESET : "");
        fc_fputs_display(c.path, stdout);
        putchar('\n');
        if (c.detail && *c.detail) {
                fputs("  ", stdout);
                fc_fputs_display(c.detail, stdout);
                putchar('\n');
        }
        for (int i = 0; i < 3; i++) {
                if (v.have[i])
                        printf("  %-6s %zu bytes%s\n", which_names[i], v.n[i],
                               is_binary(v.d[i], v.n[i]) ? " (binary)" : "");
                else
                        printf("  %-6s no content (absent: deleted, a directory, or not cached)\n",
                               which_names[i]);
        }
        text = render_diff3(&v, c.path, &len, &clean);
        if (text && !clean) {
                printf("%s--- diff3: <<<<<<< local, ||||||| base, ======= , >>>>>>> remote%s\n",
                       color ? C_BOLD : "", color ? C_RESET : "");
                print_rendering(text, len, color);
        } else {
                if (text)
                        printf("  (the texts merge without overlap; the conflict is about %s)\n",
                               c.kind);
                for (int i = 0; i < 3; i++) {
                        const char *col = i == 0 ? C_BASE : i == 1 ? C_LOCAL : C_REMOTE;

                        if (!v.have[i])
                                continue;
                        printf("%s--- %s version%s\n", color ? col : "", which_names[i],
                               color ? C_RESET : "");
                        if (is_binary(v.d[i], v.n[i]))
                                printf("(binary, %zu bytes)\n", v.n[i]);
                        else
                                print_rendering(v.d[i], v.n[i], false);
                }
        }
        g_free(text);
        versions_clear(&v);
        conflict_clear(&c);
        return fflush(stdout) ? fail("writing: %s", strerror(errno)) : 0;
}

/* Reports a resolve's answer; 0 or 1. */
static int report_resolve(const struct conflict *c, const char *how, struct answer *a)
{
        const char *kept, *now, *replayed, *dropped;
        int r = 0;

        if (a->status < 0) {
                r = fail("conflict %llu on '%s' not settled (%s): %s", c->id, c->path, how,
                         a->error ? a->error : strerror(-a->status));
                answer_clear(a);
                return r;
        }
        kept = answer_get(a, "kept");
        now = answer_get(a, "path");
        replayed = answer_get(a, "replayed");
        dropped = answer_get(a, "dropped");
        fc_fputs_display(c->path, stdout);
        printf(": settled (%s)", how);
        if (now && !*now) {
                printf("; it no longer exists on the server");
        } else if (now && strcmp(now, c->path)) {
                printf("; it is now ");
                fc_fputs_display(now, stdout);
        }
        if (kept && *kept) {
                printf("; the local version is kept as ");
                fc_fputs_display(kept, stdout);
        }
        printf("; held changes replayed %s, dropped %s\n", replayed ? replayed : "0",
               dropped ? dropped : "0");
        for (guint i = 0; i < a->lines->len; i++) {
                const char *l = a->lines->pdata[i];

                if (!strncmp(l, "conflict_again=", 15))
                        r = fail("replaying the changes held behind it met the server again: "
                                 "new conflict %s (see '%s show %s')", l + 15, prog, c->path);
        }
        answer_clear(a);
        return r;
}

/*
 * fcached's answer to a resolve (@lines, or NULL and @e) as the view's: its
 * absolute paths relative to the volume's root again.
 */
static int bus_answer(GPtrArray *lines, GError *e, struct answer *a)
{
        size_t n = strlen(bus_vol->mountpoint);

        memset(a, 0, sizeof(*a));
        a->lines = g_ptr_array_new_with_free_func(g_free);
        if (!lines) {
                a->status = -EIO;
                a->error = g_strdup(e ? e->message : "no answer from fcached");
                return 0;
        }
        for (guint i = 0; i < lines->len; i++) {
                char *l = lines->pdata[i];
                const char *v = strchr(l, '=') + 1;

                if ((g_str_has_prefix(l, "path=") || g_str_has_prefix(l, "kept=")) &&
                    !strncmp(v, bus_vol->mountpoint, n) && (v[n] == '/' || !v[n])) {
                        g_autofree char *rel = volume_rel(v, bus_vol->mountpoint);

                        g_ptr_array_add(a->lines, g_strdup_printf("%.*s%s", (int)(v - l), l,
                                                                  *rel ? rel : "/"));
                } else {
                        g_ptr_array_add(a->lines, g_strdup(l));
                }
        }
        g_ptr_array_unref(lines);
        return 0;
}

static int cmd_take(const char *how, const char *path)
{
        g_autoptr(GError) e = NULL;
        struct conflict c;
        struct answer a;
        char cmd[96];
        int r = find_conflict(path, &c);

        if (r)
                return r;
        snprintf(cmd, sizeof(cmd), "resolve %llu %s", c.id, how);
        r = bus ? bus_answer(rbus_resolve(bus, c.object, how, &e), e, &a)
                : ctl_call_root(cmd, &a);
        if (!r)
                r = report_resolve(&c, how, &a);
        conflict_clear(&c);
        return r;
}

static int run_editor(const char *ed, const char *file)
{
        pid_t pid;
        int st;

        fflush(stdout);
        pid = fork();
        if (pid < 0)
                return fail("fork: %s", strerror(errno));
        if (pid == 0) {
                /* As git does: the editor variable is a shell command line. */
                char *line = g_strdup_printf("%s \"$@\"", ed);

                execl("/bin/sh", "sh", "-c", line, ed, file, (char *)NULL);
                _exit(127);
        }
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return fail("waitpid: %s", strerror(errno));
        if (!WIFEXITED(st) || WEXITSTATUS(st))
                return fail("the editor '%s' failed (%s %d); nothing changed, the conflict "
                            "stays; your text is kept in %s", ed,
                            WIFEXITED(st) ? "exit status" : "signal",
                            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), file);
        return 0;
}

/* Sends @data as staged merged content @token of conflict @id; 0 or 1 (reported). */
static int stage_content(unsigned long long id, const char *token, const char *data,
                         size_t len)
{
        /* 4500 bytes are 6000 base64 characters: a line well inside the bound. */
        const size_t chunk = 4500;

        for (size_t off = 0; off < len; off += chunk) {
                size_t n = len - off < chunk ? len - off : chunk;
                char *b64 = g_base64_encode((const guchar *)data + off, n);
                char *cmd = g_strdup_printf("merged-chunk %llu %s %zu %s", id, token, off, b64);
                struct answer a;
                int r = ctl_call_root(cmd, &a);

                g_free(cmd);
                g_free(b64);
                if (r)
                        return r;
                if (a.status < 0) {
                        r = fail("sending the merged text to the volume (at byte %zu): %s", off,
                                 a.error ? a.error : strerror(-a.status));
                        answer_clear(&a);
                        return r;
                }
                answer_clear(&a);
        }
        return 0;
}

static int cmd_edit(const char *path)
{
        struct conflict c;
        struct versions v;
        struct answer a;
        char *text = NULL, *tmpl = NULL, *base, *edited = NULL, *b64 = NULL;
        const char *ed;
        gsize elen = 0;
        size_t len = 0;
        bool clean = false, keep = false;
        int fd = -1, r = find_conflict(path, &c);

        if (r)
                return r;
        r = get_versions(&c, &v);
        if (r) {
                conflict_clear(&c);
                return r;
        }
        if (!v.have[1] || !v.have[2]) {
                r = fail("'%s' (%s) has no %s content to edit: choose with 'take local', "
                         "'take remote' or 'keep-both'", c.path, c.kind,
                         !v.have[1] ? "local" : "remote");
                goto out;
        }
        text = render_diff3(&v, c.path, &len, &clean);
        if (!text) {
                r = fail("'%s' is binary: choose with 'take local', 'take remote' or "
                         "'keep-both'", c.path);
                goto out;
        }
        base = g_path_get_basename(c.path);
        tmpl = g_strdup_printf("%s/fcache-resolve-%llu-XXXXXX-%s",
                               getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                               c.id, base);
        fd = mkstemps(tmpl, (int)strlen(base) + 1);
        g_free(base);
        if (fd < 0) {
                r = fail("cannot create a temporary file %s: %s", tmpl, strerror(errno));
                goto out;
        }
        /* Into the descriptor mkstemps made (0600): the versions are the owner's to read. */
        for (size_t off = 0; off < len;) {
                ssize_t n = write(fd, text + off, len - off);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        r = fail("cannot write %s: %s", tmpl, strerror(n < 0 ? errno : EIO));
                        goto out;
                }
                off += (size_t)n;
        }
        ed = getenv("VISUAL") && *getenv("VISUAL") ? getenv("VISUAL") :
             getenv("EDITOR") && *getenv("EDITOR") ? getenv("EDITOR") : "vi";
        r = run_editor(ed, tmpl);
        if (r) {
                keep = true;    /* for the person */
                goto out;
        }
        if (!g_file_get_contents(tmpl, &edited, &elen, NULL)) {
                r = fail("cannot read back %s", tmpl);
                goto out;
        }
        if (count_markers(edited, elen)) {
                r = fail("'%s' still has %zu conflict marker lines: not settled, the conflict "
                         "stays; your text is kept in %s", c.path, count_markers(edited, elen),
                         tmpl);
                keep = true;
                goto out;
        }
        b64 = elen ? g_base64_encode((const guchar *)edited, elen) : g_strdup("-");
        if (bus) {
                g_autoptr(GError) e = NULL;

                r = bus_answer(rbus_resolve_merged(bus, c.object, edited, elen, &e), e, &a);
        } else if (strlen(b64) + 64 > MAX_REQUEST) {
                /* Too long for one request line: staged in chunks, then settled. */
                char token[40], cmd[96];

                snprintf(token, sizeof(token), "e%d-%08x", (int)getpid(), g_random_int());
                r = stage_content(c.id, token, edited, elen);
                if (r) {
                        keep = true;
                        goto out;
                }
                snprintf(cmd, sizeof(cmd), "resolve-merged %llu @%s", c.id, token);
                r = ctl_call_root(cmd, &a);
        } else {
                GString *cmd = g_string_new(NULL);

                g_string_printf(cmd, "resolve-merged %llu %s", c.id, b64);
                r = ctl_call_root(cmd->str, &a);
                g_string_free(cmd, TRUE);
        }
        if (!r) {
                r = report_resolve(&c, "edited", &a);
                if (r) {
                        keep = true;
                        fprintf(stderr, "%s: your text is kept in %s\n", prog, tmpl);
                }
        }
out:
        if (fd >= 0)
                close(fd);
        if (tmpl && fd >= 0 && !keep)
                unlink(tmpl);
        g_free(tmpl);
        g_free(b64);
        g_free(edited);
        g_free(text);
        versions_clear(&v);
        conflict_clear(&c);
        return r;
}

/*
 * Through fcached: the objects the caller may see, and the volume of @path
 * (absolute) or of the current directory, or the only one; 0 or 1 (reported).
 */
static int open_bus(const char *path, bool interactive)
{
        g_autoptr(GError) e = NULL;
        g_autofree char *abs = NULL;

        bus = g_new0(struct rbus, 1);
        if (!rbus_open(bus, interactive, &e))
                return fail("cannot reach fcached on the system bus: %s", e->message);
        if (path && path[0] == '/') {
                abs = real_abs(path);
                bus_vol = rbus_volume_of(bus, abs);
                if (!bus_vol)
                        return fail("'%s' is on no fcache volume you may read (fcached lists "
                                    "those whose mountpoint you can read)", path);
                return 0;
        }
        abs = g_get_current_dir();
        bus_vol = rbus_volume_of(bus, abs);
        if (!bus_vol && bus->volumes->len == 1)
                bus_vol = bus->volumes->pdata[0];
        if (!bus_vol)
                return fail(bus->volumes->len ? "the current directory is on no fcache volume "
                            "and you may read %u: give an absolute PATH" :
                            "fcached shows no fcache volume you may read (%u)",
                            bus->volumes->len);
        return 0;
}

/*
 * The way to the volume: its control socket for root (or with --cache-dir),
 * fcached's D-Bus objects for everyone else and when the socket does not
 * answer; 0 or 1 (reported).
 */
static int choose_way(const char *path, bool interactive)
{
        int r;

        if (opt_cache_dir || geteuid() == 0) {
                quiet = !opt_cache_dir;
                ctl_path = find_socket(path);
                r = ctl_path ? ctl_reachable() : 1;
                quiet = false;
                if (!r || opt_cache_dir)
                        return r;
                g_clear_pointer(&ctl_path, g_free);
        }
        r = open_bus(path, interactive);
        if (r && geteuid() == 0) {
                /* Neither way: say why the socket did not serve either. */
                ctl_path = find_socket(path);
                if (ctl_path)
                        ctl_reachable();
        }
        return r;
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {
                { "cache-dir", required_argument, NULL, 'C' },
                { "id", required_argument, NULL, 'I' },
                { "json", no_argument, NULL, 'J' },
                { "color", optional_argument, NULL, 'K' },
                { "colour", optional_argument, NULL, 'K' },
                { "no-ask-password", no_argument, NULL, 'N' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {}
        };
        const char *cmd, *path = NULL;
        bool interactive;
        pid_t agent = 0;
        char *end;
        int c, r, nargs;

        while ((c = getopt_long(argc, argv, "C:h", opts, NULL)) != -1) {
                switch (c) {
                case 'C':
                        opt_cache_dir = optarg;
                        break;
                case 'I':
                        errno = 0;
                        opt_id = strtoull(optarg, &end, 10);
                        if (!*optarg || *end || errno || !opt_id || optarg[0] == '-')
                                return usage_error("--id: '%s' is not a conflict ID (a "
                                                   "positive number)", optarg);
                        break;
                case 'J':
                        opt_json = true;
                        break;
                case 'N':
                        opt_ask_password = false;
                        break;
                case 'V':
                        printf("fcache-resolve %s\n", FCACHE_VERSION);
                        return 0;
                case 'K':
                        if (!optarg || !strcmp(optarg, "always"))
                                opt_color = 1;
                        else if (!strcmp(optarg, "never"))
                                opt_color = 0;
                        else if (!strcmp(optarg, "auto"))
                                opt_color = -1;
                        else
                                return usage_error("--color: '%s' is not always, never or "
                                                   "auto", optarg);
                        break;
                case 'h':
                        fputs(usage_text, stdout);
                        return 0;
                default:
                        return usage_error("unknown option");
                }
        }
        if (optind >= argc)
                return usage_error("missing command: list, show, take, keep-both or edit");
        cmd = argv[optind++];
        nargs = argc - optind;
        if (!strcmp(cmd, "help")) {
                fputs(usage_text, stdout);
                return 0;
        }
        if (!strcmp(cmd, "list")) {
                if (nargs > 1)
                        return usage_error("list takes at most one PATH (got '%s' too)",
                                           argv[optind + 1]);
                path = nargs ? argv[optind] : NULL;
        } else if (!strcmp(cmd, "show") || !strcmp(cmd, "keep-both") || !strcmp(cmd, "edit")) {
                if (nargs != 1)
                        return nargs ? usage_error("%s takes one PATH (got '%s' too)", cmd,
                                                   argv[optind + 1])
                                     : usage_error("%s needs a PATH", cmd);
                path = argv[optind];
        } else if (!strcmp(cmd, "take")) {
                if (nargs < 1)
                        return usage_error("take needs local or remote, then a PATH");
                if (strcmp(argv[optind], "local") && strcmp(argv[optind], "remote"))
                        return usage_error("take: '%s' is neither local nor remote%s",
                                           argv[optind], !strcmp(argv[optind], "both") ?
                                           " (use keep-both)" : "");
                if (nargs != 2)
                        return usage_error(nargs < 2 ? "take %s needs a PATH" :
                                           "take %s takes one PATH", argv[optind]);
                path = argv[optind + 1];
        } else {
                return usage_error("unknown command '%s': list, show, take, keep-both or edit",
                                   cmd);
        }
        if (opt_json && strcmp(cmd, "list"))
                return usage_error("--json is for list only");
        if (path && !*path)
                return usage_error("PATH is empty");
        /* Listing needs no password (polkit org.fcache.query); reading a version and settling
         * may, when someone at a terminal can type it. */
        interactive = opt_ask_password && isatty(STDIN_FILENO) && strcmp(cmd, "list");
        r = choose_way(path, interactive);
        if (r)
                goto out;
        if (bus && interactive)
                agent = fc_polkit_agent_open();
        if (!strcmp(cmd, "list"))
                r = cmd_list(path);
        else if (!strcmp(cmd, "show"))
                r = cmd_show(path);
        else if (!strcmp(cmd, "take"))
                r = cmd_take(argv[optind], path);
        else if (!strcmp(cmd, "keep-both"))
                r = cmd_take("both", path);
        else
                r = cmd_edit(path);
out:
        fc_polkit_agent_close(agent);
        if (bus) {
                rbus_close(bus);
                g_free(bus);
        }
        g_free(ctl_path);
        return r ? EXIT_FAILURE : 0;
}
