/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager-conflicts.c: the Manager1 methods on the conflicts that
 * reintegration keeps (ListConflicts, GetConflictVersion, ResolveConflict,
 * ResolveConflictMerged) and the ConflictsChanged signal.
 *
 * The conflicts live in each volume's view (daemon/view/view-conflicts.c); these
 * methods are a front to its control-socket requests (query conflicts,
 * conflict-version, resolve, resolve-merged, merged-chunk), addressed by the
 * object's path instead of the conflict ID.  Each call goes: validate the
 * words (InvalidArgument), the caller from the bus, polkit, then a worker
 * thread that resolves the path with the caller's identity (the object for
 * a list, else its directory) and checks that the caller may read (list,
 * version) or write (resolve) the object, or its directory when the object
 * is gone (a deleted side, or held by ECONFLICT; in a sticky directory the
 * caller must also own the directory, as unlink(2) would ask), before
 * anything is looked up: an object the caller may not use answers the same
 * whether it has a conflict or not.  The view then gets the resolved
 * directory itself (its descriptor) and the name, never a path to walk.
 *
 * ConflictsChanged(volume, count) is sent when a volume's count differs
 * from the last one seen: it is read (`query state` conflicts=) after each
 * resolve and each time a volume's link reports "online" (a reconnect, by
 * hand or by the network, reintegrated).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gio/gunixfdlist.h>
#include <linux/openat2.h>

#include "auth.h"
#include "caller-access.h"
#include "objects.h"
#include "volumes.h"

#define QUERY_ACTION "org.fcache.query"
#define RESOLVE_ACTION "org.fcache.resolve"
#define MERGED_MAX (64u << 20)     /* the view's largest staged content */
#define CHUNK_RAW 4500             /* bytes per merged-chunk line: 6000 of base64 */
#define INLINE_B64_MAX 6000        /* resolve-merged with the content on its own line */
#define PIPE_WAIT_MS 30000         /* longest wait for the next bytes of a merged pipe */

#ifndef EUCLEAN
#define EUCLEAN 117
#endif

enum call_kind { CALL_LIST, CALL_VERSION, CALL_RESOLVE, CALL_MERGED };

static const char *const call_names[] = {
        [CALL_LIST] = "ListConflicts",
        [CALL_VERSION] = "GetConflictVersion",
        [CALL_RESOLVE] = "ResolveConflict",
        [CALL_MERGED] = "ResolveConflictMerged",
};

struct conflict_call {
        struct fcd_context *ctx;
        GDBusMethodInvocation *inv;
        enum call_kind kind;
        char *sender;
        char *path;
        char *word;                /* which (version) or how (resolve) */
        int content_fd;            /* merged: ours, -1 otherwise */
        struct fcd_caller caller;
        /* Filled by the worker. */
        FcdError code;
        char *message;             /* set: the call failed */
        GVariant *reply;           /* the reply's value (list, resolve), sunk */
        int out_fd;                /* version: the sealed memfd */
        char *volume;              /* its volume, and (resolve) that volume's count after */
        char *mountpoint;
        int count;                 /* -1 when unknown */
};

static GHashTable *known_counts; /* volume name -> count + 1 (GINT_TO_POINTER); main loop */

static void call_free(struct conflict_call *c)
{
        if (c->inv)
                g_dbus_method_invocation_return_error_literal(c->inv, FCD_ERROR, FCD_ERROR_FAILED,
                                                              "Internal error: no reply was made");
        if (c->content_fd >= 0)
                close(c->content_fd);
        if (c->out_fd >= 0)
                close(c->out_fd);
        g_clear_pointer(&c->reply, g_variant_unref);
        g_free(c->sender);
        g_free(c->path);
        g_free(c->word);
        g_free(c->message);
        g_free(c->volume);
        g_free(c->mountpoint);
        g_free(c);
}

static void call_fail(struct conflict_call *c, FcdError code, const char *fmt, ...)
        G_GNUC_PRINTF(3, 4);

static void call_fail(struct conflict_call *c, FcdError code, const char *fmt, ...)
{
        va_list ap;

        if (c->message)
                return; /* the first failure is the one to report */
        va_start(ap, fmt);
        c->message = g_strdup_vprintf(fmt, ap);
        va_end(ap);
        c->code = code;
}

/* ---- the worker half: the caller's access, then the view ---- */

/*
 * With the caller's identity entered: may it act on @sub (a relative path
 * under directory @top_fd, "" for top_fd itself) with @mode?  When the
 * object is gone (or held), its nearest directory must allow @dir_mode
 * instead; no symlink is followed on the way.  0 or -errno; *gone_dir gets
 * (when not NULL) a descriptor of that nearest directory when the object
 * itself was gone, else -1.
 */
static int caller_may_at(int top_fd, const char *sub, int mode, int dir_mode, int *gone_dir)
{
        g_autofree char *cur = g_strdup(sub);
        int m = mode;

        if (gone_dir)
                *gone_dir = -1;
        for (;;) {
                struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                                        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                                   RESOLVE_NO_MAGICLINKS };
                g_autofree char *dir = NULL;
                const char *base;
                char *slash = strrchr(cur, '/');
                int dfd, err = 0;

                if (!*cur) {
                        dfd = dup(top_fd);
                        base = "";
                } else {
                        dir = slash ? g_strndup(cur, slash - cur) : g_strdup(".");
                        base = slash ? slash + 1 : cur;
                        dfd = (int)syscall(SYS_openat2, top_fd, dir, &how, sizeof(how));
                }
                if (dfd < 0) {
                        err = errno;
                } else if (syscall(SYS_faccessat2, dfd, base, m, AT_EACCESS | AT_SYMLINK_NOFOLLOW |
                                   (*base ? 0 : AT_EMPTY_PATH)) < 0) {
                        err = errno;
                }
                if (!err) {
                        if (gone_dir && m != mode)
                                *gone_dir = dfd;
                        else
                                close(dfd);
                        return 0;
                }
                if (dfd >= 0)
                        close(dfd);
                if ((err != ENOENT && err != EUCLEAN && err != ENOTDIR) || !*cur)
                        return -err;
                if (slash)
                        *slash = '\0';
                else
                        cur[0] = '\0';
                m = dir_mode;
        }
}

/* The canonical name of an O_PATH descriptor, or NULL. */
static char *fd_name(int fd)
{
        char proc[64], buf[FCD_PATH_MAX + 1];
        ssize_t n;

        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        n = readlink(proc, buf, sizeof(buf) - 1);
        if (n <= 0 || buf[0] != '/')
                return NULL;
        buf[n] = '\0';
        return g_strdup(buf);
}

/* The view's error= line, or NULL. */
static const char *answer_error(GPtrArray *lines)
{
        for (guint i = 0; i < lines->len; i++)
                if (g_str_has_prefix(lines->pdata[i], "error="))
                        return (const char *)lines->pdata[i] + 6;
        return NULL;
}

static void view_fail(struct conflict_call *c, const char *what, int r, GPtrArray *lines)
{
        const char *err = lines ? answer_error(lines) : NULL;

        call_fail(c, fcd_error_from_errno(-r), "%s: volume %s: %s", what, c->volume,
                  err ? err : g_strerror(-r));
}

static void row_clear(gpointer p)
{
        struct fcd_conflict_row *row = p;

        g_free(row->kind);
        g_free(row->rel);
        g_free(row->detail);
}

/* `query conflicts` under @target_fd (and its entry @name): the rows, or NULL with the call
 * failed. */
static GArray *query_conflicts(struct conflict_call *c, const char *sock, int target_fd,
                               const char *name)
{
        g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
        int r = fcd_control_call(sock, "query conflicts", target_fd, name, lines);

        if (r < 0) {
                view_fail(c, c->path, r, lines);
                return NULL;
        }
        return fcd_conflicts_parse(lines);
}

GArray *fcd_conflicts_parse(GPtrArray *lines)
{
        GArray *rows = g_array_new(FALSE, TRUE, sizeof(struct fcd_conflict_row));
        g_array_set_clear_func(rows, row_clear);
        for (guint i = 0; i < lines->len; i++) {
                const char *line = lines->pdata[i];
                struct fcd_conflict_row row = { 0 };
                const char *kind, *sp;
                char *end;

                if (!g_str_has_prefix(line, "conflict="))
                        continue;
                row.id = g_ascii_strtoull(line + 9, &end, 10);
                if (*end != ' ' || !row.id)
                        continue;
                kind = end + 1;
                sp = strchr(kind, ' ');
                if (!sp)
                        continue;
                row.kind = g_strndup(kind, sp - kind);
                row.rel = g_strdup(sp + 1);
                g_array_append_val(rows, row);
        }
        for (guint i = 0; i < lines->len; i++) {
                const char *line = lines->pdata[i];
                guint64 id;
                char *end;

                if (!g_str_has_prefix(line, "conflict_detail="))
                        continue;
                id = g_ascii_strtoull(line + 16, &end, 10);
                if (*end != ' ')
                        continue;
                for (guint k = 0; k < rows->len; k++) {
                        struct fcd_conflict_row *row = &g_array_index(rows, struct fcd_conflict_row, k);
                        if (row->id == id && !row->detail)
                                row->detail = g_strdup(end + 1);
                }
        }
        for (guint i = 0; i < lines->len; i++) {
                const char *line = lines->pdata[i];
                guint64 id, rec, loc;
                char *end;

                if (!g_str_has_prefix(line, "conflict_times="))
                        continue;
                id = g_ascii_strtoull(line + 15, &end, 10);
                if (*end != ' ')
                        continue;
                rec = g_ascii_strtoull(end + 1, &end, 10);
                if (*end != ' ')
                        continue;
                loc = g_ascii_strtoull(end + 1, &end, 10);
                for (guint k = 0; k < rows->len; k++) {
                        struct fcd_conflict_row *row = &g_array_index(rows, struct fcd_conflict_row, k);
                        if (row->id == id) {
                                row->recorded_us = rec;
                                row->local_changed_us = loc;
                        }
                }
        }
        return rows;
}

static char *absolute(const char *mountpoint, const char *rel)
{
        while (*rel == '/')
                rel++;
        return *rel ? g_strconcat(mountpoint, "/", rel, NULL) : g_strdup(mountpoint);
}

/* The volume's conflict count from `query state`, or -1. */
static int state_count(const char *sock)
{
        g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
        unsigned int n;

        if (!sock || fcd_control_call(sock, "query state", -1, NULL, lines) < 0)
                return -1;
        for (guint i = 0; i < lines->len; i++)
                if (sscanf(lines->pdata[i], "conflicts=%u", &n) == 1)
                        return (int)MIN(n, (unsigned int)G_MAXINT);
        return -1;
}

/*
 * Reads the merged content: at most MERGED_MAX bytes.  A regular file (a
 * memfd too) is read from offset 0 whatever its offset, so that a client need
 * not rewind what it wrote; a pipe or socket to its end, waiting for it.
 */
static GByteArray *read_content(struct conflict_call *c)
{
        g_autoptr(GByteArray) data = g_byte_array_new();
        guint8 buf[65536];
        struct stat st;
        bool regular;
        off_t off = 0;

        if (fstat(c->content_fd, &st) < 0) {
                call_fail(c, FCD_ERROR_INVALID_ARGUMENT, "Cannot stat the merged content: %s",
                          g_strerror(errno));
                return NULL;
        }
        regular = S_ISREG(st.st_mode);
        if (!regular && !S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode)) {
                call_fail(c, FCD_ERROR_INVALID_ARGUMENT, "The merged content must come from a "
                          "regular file, a memfd, a pipe or a socket");
                return NULL;
        }
        for (;;) {
                struct pollfd p = { .fd = c->content_fd, .events = POLLIN };
                ssize_t n;
                int r = poll(&p, 1, PIPE_WAIT_MS);

                if (r < 0 && errno == EINTR)
                        continue;
                if (r == 0) {
                        call_fail(c, FCD_ERROR_FAILED, "The merged content did not arrive "
                                  "within %d s (close the writing end when done)",
                                  PIPE_WAIT_MS / 1000);
                        return NULL;
                }
                n = regular ? pread(c->content_fd, buf, sizeof(buf), off)
                            : read(c->content_fd, buf, sizeof(buf));
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n < 0) {
                        call_fail(c, FCD_ERROR_INVALID_ARGUMENT, "Cannot read the merged "
                                  "content: %s", g_strerror(errno));
                        return NULL;
                }
                if (n == 0)
                        return g_steal_pointer(&data);
                if (data->len + (guint64)n > MERGED_MAX) {
                        call_fail(c, FCD_ERROR_LIMIT_EXCEEDED, "The merged content is larger "
                                  "than %u bytes", MERGED_MAX);
                        return NULL;
                }
                g_byte_array_append(data, buf, (guint)n);
                off += n;
        }
}

/* The view's answer to a resolve, as the reply (a{sv}) with "volume". */
static GVariant *resolve_result(struct conflict_call *c, GPtrArray *lines)
{
        struct fc_result res;
        GVariant *v;

        fc_result_init(&res);
        fc_result_add_str(&res, "volume", c->volume);
        for (guint i = 0; i < lines->len; i++) {
                g_autofree char *line = g_strdup(lines->pdata[i]);
                char *eq = strchr(line, '='), *sp;

                if (!eq)
                        continue;
                *eq = '\0';
                /* The view's paths are relative to the volume root; ours absolute. */
                if ((!strcmp(line, "path") || !strcmp(line, "kept")) && eq[1]) {
                        g_autofree char *abs = absolute(c->mountpoint, eq + 1);
                        fc_result_add_str(&res, line, abs);
                } else if (!strcmp(line, "conflict_again") && (sp = strchr(eq + 1, ' ')) &&
                           (sp = strchr(sp + 1, ' '))) {
                        g_autofree char *abs = absolute(c->mountpoint, sp + 1);
                        g_autofree char *val = g_strdup_printf("%.*s%s", (int)(sp + 1 - (eq + 1)),
                                                               eq + 1, abs);
                        fc_result_add_str(&res, line, val);
                } else if (strcmp(line, "error")) {
                        fc_result_add_str(&res, line, eq + 1);
                }
        }
        v = fcd_result_to_variant(res.buf ? res.buf : "");
        fc_result_free(&res);
        return g_variant_ref_sink(g_variant_new("(@a{sv})", v));
}

/* The conflicts under the object the caller resolved (@target_fd, named @canonical). */
static void do_list(struct conflict_call *c, int target_fd, const char *canonical,
                    const char *mountpoint, const char *sock)
{
        g_autoptr(GArray) rows = query_conflicts(c, sock, target_fd, NULL);
        const char *top_rel = canonical + strlen(mountpoint);
        struct fcd_identity_saved saved;
        GVariantBuilder b;
        int r;

        if (!rows)
                return;
        while (*top_rel == '/')
                top_rel++;
        r = fcd_identity_enter(&c->caller, &saved);
        if (r < 0) {
                call_fail(c, FCD_ERROR_FAILED, "Cannot take on the caller's identity: %s",
                          g_strerror(-r));
                return;
        }
        g_variant_builder_init(&b, G_VARIANT_TYPE("a(tsss)"));
        for (guint i = 0; i < rows->len; i++) {
                struct fcd_conflict_row *row = &g_array_index(rows, struct fcd_conflict_row, i);
                g_autofree char *abs = absolute(mountpoint, row->rel);
                const char *sub = row->rel;
                size_t tl = strlen(top_rel);

                /* The view lists what lies under the target; below it, the caller's way. */
                if (tl && (strncmp(sub, top_rel, tl) || (sub[tl] && sub[tl] != '/')))
                        continue;
                sub += tl;
                while (*sub == '/')
                        sub++;
                /* Never tell a caller about an object it could not reach. */
                if (caller_may_at(target_fd, sub, F_OK, X_OK, NULL) < 0)
                        continue;
                g_variant_builder_add(&b, "(tsss)", row->id, row->kind, abs,
                                      row->detail ? row->detail : "");
        }
        fcd_identity_leave(&saved);
        c->reply = g_variant_ref_sink(g_variant_new("(@a(tsss))", g_variant_builder_end(&b)));
}

static int seal_memfd(struct conflict_call *c, const guint8 *data, gsize len)
{
        int fd = memfd_create("fcache-conflict-version", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        gsize off = 0;

        if (fd < 0) {
                call_fail(c, FCD_ERROR_FAILED, "memfd_create: %s", g_strerror(errno));
                return -1;
        }
        while (off < len) {
                ssize_t n = write(fd, data + off, len - off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        call_fail(c, FCD_ERROR_FAILED, "Cannot fill the memfd: %s",
                                  g_strerror(n < 0 ? errno : EIO));
                        close(fd);
                        return -1;
                }
                off += (gsize)n;
        }
        if (lseek(fd, 0, SEEK_SET) < 0 ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
                call_fail(c, FCD_ERROR_FAILED, "Cannot seal the memfd: %s", g_strerror(errno));
                close(fd);
                return -1;
        }
        return fd;
}

static void do_version(struct conflict_call *c, guint64 id, const char *sock)
{
        g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
        g_autofree char *cmd = g_strdup_printf("conflict-version %" G_GUINT64_FORMAT " %s", id,
                                               c->word);
        g_autofree guint8 *data = NULL;
        const char *b64 = NULL;
        gsize len = 0;
        int r = fcd_control_call(sock, cmd, -1, NULL, lines);

        if (r == -ENOENT) {
                call_fail(c, FCD_ERROR_NO_SUCH_PATH, "%s: the conflict has no %s content "
                          "(deleted, a directory, or never cached)", c->path, c->word);
                return;
        }
        if (r < 0) {
                view_fail(c, c->path, r, lines);
                return;
        }
        for (guint i = 0; i < lines->len; i++)
                if (g_str_has_prefix(lines->pdata[i], "content_base64="))
                        b64 = (const char *)lines->pdata[i] + 15;
        if (!b64) {
                call_fail(c, FCD_ERROR_FAILED, "%s: the view sent no content", c->path);
                return;
        }
        if (*b64 && strcmp(b64, "-"))
                data = g_base64_decode(b64, &len);
        c->out_fd = seal_memfd(c, data, len);
}

static int send_merged(struct conflict_call *c, guint64 id, const char *sock, GPtrArray *lines)
{
        g_autoptr(GByteArray) data = read_content(c);
        g_autofree char *b64 = NULL, *cmd = NULL;
        static gint token_seq;
        int r;

        if (!data)
                return 1;
        if (data->len == 0) {
                cmd = g_strdup_printf("resolve-merged %" G_GUINT64_FORMAT " -", id);
        } else if (data->len <= INLINE_B64_MAX / 4 * 3) {
                b64 = g_base64_encode(data->data, data->len);
                cmd = g_strdup_printf("resolve-merged %" G_GUINT64_FORMAT " %s", id, b64);
        } else {
                g_autofree char *token = g_strdup_printf("dbus-%d-%d", (int)getpid(),
                                                         g_atomic_int_add(&token_seq, 1));

                for (guint off = 0; off < data->len; off += CHUNK_RAW) {
                        g_autoptr(GPtrArray) ignored = g_ptr_array_new_with_free_func(g_free);
                        g_autofree char *chunk = g_base64_encode(data->data + off,
                                                                 MIN(CHUNK_RAW, data->len - off));
                        g_autofree char *line = g_strdup_printf(
                                "merged-chunk %" G_GUINT64_FORMAT " %s %u %s", id, token, off,
                                chunk);

                        r = fcd_control_call(sock, line, -1, NULL, ignored);
                        if (r < 0) {
                                view_fail(c, c->path, r, ignored);
                                return r;
                        }
                }
                cmd = g_strdup_printf("resolve-merged %" G_GUINT64_FORMAT " @%s", id, token);
        }
        return fcd_control_call(sock, cmd, -1, NULL, lines);
}

static void do_resolve(struct conflict_call *c, guint64 id, const char *sock)
{
        g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
        int r;

        if (c->kind == CALL_MERGED) {
                r = send_merged(c, id, sock, lines);
                if (r > 0 || c->message)
                        return;
        } else {
                g_autofree char *cmd = g_strdup_printf("resolve %" G_GUINT64_FORMAT " %s", id,
                                                       c->word);
                r = fcd_control_call(sock, cmd, -1, NULL, lines);
        }
        if (r < 0) {
                view_fail(c, c->path, r, lines);
                return;
        }
        c->reply = resolve_result(c, lines);
        c->count = state_count(sock);
}

/*
 * With the caller's identity entered: may the caller act on @name in
 * directory @dfd (read for a version, write for a resolve)?  A gone object
 * needs its directory's permission instead, and in a sticky directory the
 * caller must own that directory, as unlink(2) asks.  0, or the call failed.
 */
static int caller_check(struct conflict_call *c, int dfd, const char *name)
{
        bool version = c->kind == CALL_VERSION;
        int gone_dir = -1, r;
        struct stat st;

        r = caller_may_at(dfd, name, version ? R_OK : W_OK, version ? R_OK | X_OK : W_OK | X_OK,
                          &gone_dir);
        if (r == 0 && gone_dir >= 0 && !version && c->caller.uid != 0 &&
            fstat(gone_dir, &st) == 0 && (st.st_mode & S_ISVTX) && st.st_uid != c->caller.uid)
                r = -EPERM;
        if (gone_dir >= 0)
                close(gone_dir);
        if (r == -EACCES || r == -EPERM)
                call_fail(c, FCD_ERROR_ACCESS_DENIED, "%s: permission denied: the caller cannot "
                          "%s it", c->path, version ? "read" : "write");
        else if (r < 0)
                call_fail(c, fcd_error_from_errno(-r), "%s: cannot check access: %s", c->path,
                          g_strerror(-r));
        return r;
}

static void worker(GTask *task, gpointer src, gpointer data, GCancellable *cancellable)
{
        struct conflict_call *c = data;
        struct fcd_identity_saved saved;
        struct fc_target t = FC_TARGET_INIT;
        struct fc_error e = { 0 };
        g_autofree char *canonical = NULL, *sock = NULL, *dir = NULL, *base = NULL;
        g_autofree char *rel = NULL;
        g_autoptr(GArray) rows = NULL;
        struct fcd_conflict_row *row = NULL;
        int r;

        /* As the caller: the object (a list) or its directory, and the caller's access,
         * before anything is asked of the view. */
        if (c->kind == CALL_LIST) {
                dir = g_strdup(c->path);
        } else {
                dir = g_path_get_dirname(c->path);
                base = g_path_get_basename(c->path);
        }
        r = fcd_identity_enter(&c->caller, &saved);
        if (r < 0) {
                call_fail(c, FCD_ERROR_FAILED, "Cannot take on the caller's identity (uid %u): "
                          "%s", c->caller.uid, g_strerror(-r));
                goto out;
        }
        r = fcd_caller_resolve(dir, 0, &t, &e);
        if (r < 0)
                call_fail(c, fcd_error_from_errno(e.code), "%s", e.text);
        else if (base && (!S_ISDIR(t.stx.stx_mode) || caller_check(c, t.fd, base) < 0))
                r = c->message ? -1 : (call_fail(c, FCD_ERROR_NO_SUCH_PATH, "%s: not a directory",
                                                 dir), -1);
        fcd_identity_leave(&saved);
        if (r < 0)
                goto out;
        canonical = fd_name(t.fd);
        if (!canonical) {
                call_fail(c, FCD_ERROR_NO_SUCH_PATH, "%s: cannot name the resolved object "
                          "(deleted, or outside this namespace)", dir);
                goto out;
        }
        if (!fcd_volume_find(c->ctx->volumes, canonical, &c->volume, &c->mountpoint, &sock)) {
                call_fail(c, FCD_ERROR_NOT_SUPPORTED, "%s: is not in an fcache volume; "
                          "conflicts belong to volumes (disconnected operation)", c->path);
                goto out;
        }
        if (c->kind == CALL_LIST) {
                do_list(c, t.fd, canonical, c->mountpoint, sock);
                goto out;
        }
        /* The conflict on this very object: the view looks under the resolved directory. */
        rel = g_strconcat(canonical + strlen(c->mountpoint), "/", base, NULL);
        rows = query_conflicts(c, sock, t.fd, base);
        if (!rows)
                goto out;
        for (guint i = 0; i < rows->len && !row; i++) {
                struct fcd_conflict_row *cand = &g_array_index(rows, struct fcd_conflict_row, i);
                if (!strcmp(cand->rel, rel + strspn(rel, "/")))
                        row = cand;
        }
        if (!row) {
                call_fail(c, FCD_ERROR_NO_SUCH_PATH, "%s: no conflict on this path", c->path);
                goto out;
        }
        if (c->kind == CALL_VERSION)
                do_version(c, row->id, sock);
        else
                do_resolve(c, row->id, sock);
out:
        fc_target_close(&t);
        g_task_return_boolean(task, TRUE);
}

/* ---- the main-loop half ---- */

static void note_count(struct fcd_context *ctx, const char *volume, int count)
{
        gpointer old;

        if (count < 0 || !ctx->manager)
                return;
        if (!known_counts)
                known_counts = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        old = g_hash_table_lookup(known_counts, volume);
        /* Unknown counts as none: the first conflicts are news. */
        if (GPOINTER_TO_INT(old) == count + 1 || (!old && count == 0))
                return;
        g_hash_table_insert(known_counts, g_strdup(volume), GINT_TO_POINTER(count + 1));
        g_message("Volume %s: %d conflict%s", volume, count, count == 1 ? "" : "s");
        fc_manager1_emit_conflicts_changed(ctx->manager, volume, (guint)count);
}

static void on_worker_done(GObject *src, GAsyncResult *res, gpointer data)
{
        struct conflict_call *c = g_task_get_task_data(G_TASK(res));
        GDBusMethodInvocation *inv = g_steal_pointer(&c->inv);

        fcd_tasks_in_flight--;
        if (c->message) {
                g_message("%s %s for uid %u (%s): refused: %s", call_names[c->kind], c->path,
                          c->caller.uid, c->sender, c->message);
                g_dbus_method_invocation_return_error_literal(inv, FCD_ERROR, c->code,
                                                              c->message);
        } else if (c->kind == CALL_VERSION) {
                g_autoptr(GUnixFDList) fds = g_unix_fd_list_new();
                g_autoptr(GError) error = NULL;
                int idx = g_unix_fd_list_append(fds, c->out_fd, &error);

                if (idx < 0)
                        g_dbus_method_invocation_return_error(inv, FCD_ERROR, FCD_ERROR_FAILED,
                                                              "Cannot pass the fd: %s",
                                                              error->message);
                else /* Manager1.GetConflictVersion or Conflict1.GetVersion: both (h) */
                        g_dbus_method_invocation_return_value_with_unix_fd_list(
                                inv, g_variant_new("(h)", idx), fds);
        } else {
                g_dbus_method_invocation_return_value(inv, c->reply);
                if (c->kind != CALL_LIST) {
                        g_message("%s %s (%s) for uid %u: done", call_names[c->kind], c->path,
                                  c->word ? c->word : "merged", c->caller.uid);
                        note_count(c->ctx, c->volume, c->count);
                        fcd_objects_volume_changed(c->ctx, c->volume);
                }
        }
        call_free(c);
}

static void on_authorized(GObject *src, GAsyncResult *res, gpointer data)
{
        struct conflict_call *c = data;
        g_autoptr(GError) error = NULL;
        g_autoptr(GTask) task = NULL;

        if (!fcd_polkit_check_finish(res, &error)) {
                g_message("%s %s for uid %u (%s): refused: %s", call_names[c->kind], c->path,
                          c->caller.uid, c->sender, error->message);
                g_dbus_method_invocation_return_gerror(g_steal_pointer(&c->inv), error);
                call_free(c);
                return;
        }
        task = g_task_new(NULL, NULL, on_worker_done, NULL);
        g_task_set_task_data(task, c, NULL);
        fcd_tasks_in_flight++;
        g_task_run_in_thread(task, worker);
}

static void on_caller(GObject *src, GAsyncResult *res, gpointer data)
{
        struct conflict_call *c = data;
        g_autoptr(GError) error = NULL;
        GDBusMessage *msg = g_dbus_method_invocation_get_message(c->inv);

        if (!fcd_caller_lookup_finish(res, &c->caller, &error)) {
                g_dbus_method_invocation_return_gerror(g_steal_pointer(&c->inv), error);
                call_free(c);
                return;
        }
        fcd_polkit_check_async(c->ctx->bus, c->sender,
                               c->kind == CALL_LIST ? QUERY_ACTION : RESOLVE_ACTION,
                               (g_dbus_message_get_flags(msg) &
                                G_DBUS_MESSAGE_FLAGS_ALLOW_INTERACTIVE_AUTHORIZATION) != 0,
                               on_authorized, c);
}

static gboolean call_start(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                           enum call_kind kind, const char *path, const char *word, int fd)
{
        struct conflict_call *c;
        size_t plen = strlen(path);

        if (plen == 0 || path[0] != '/') {
                if (fd >= 0)
                        close(fd);
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "The path must be absolute, not "
                              "'%.200s'", path);
        }
        if (plen > FCD_PATH_MAX) {
                if (fd >= 0)
                        close(fd);
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "The path is longer than %d "
                              "bytes", FCD_PATH_MAX);
        }
        if (kind != CALL_LIST) {
                g_autofree char *base = g_path_get_basename(path);
                if (!strcmp(base, ".") || !strcmp(base, "..") || !strcmp(base, "/")) {
                        if (fd >= 0)
                                close(fd);
                        return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "The path must name the "
                                      "object in conflict, not end in '%s'", base);
                }
        }
        c = g_new0(struct conflict_call, 1);
        c->ctx = ctx;
        c->inv = inv;
        c->kind = kind;
        c->sender = g_strdup(g_dbus_method_invocation_get_sender(inv));
        c->path = g_strdup(path);
        c->word = g_strdup(word);
        c->content_fd = fd;
        c->out_fd = -1;
        c->count = -1;
        fcd_caller_lookup_async(ctx->bus, c->sender, on_caller, c);
        return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static gboolean on_list_conflicts(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                                  gpointer ctx)
{
        return call_start(ctx, inv, CALL_LIST, path, NULL, -1);
}

gboolean fcd_conflict_get_version(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                                  const char *path, const char *which)
{
        if (strcmp(which, "base") && strcmp(which, "local") && strcmp(which, "remote"))
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "Unknown version '%.64s': base, "
                              "local or remote", which);
        return call_start(ctx, inv, CALL_VERSION, path, which, -1);
}

static gboolean on_get_conflict_version(FcManager1 *m, GDBusMethodInvocation *inv,
                                        GUnixFDList *fds, const char *path, const char *which,
                                        gpointer ctx)
{
        return fcd_conflict_get_version(ctx, inv, path, which);
}

gboolean fcd_conflict_resolve(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                              const char *path, const char *how)
{
        if (strcmp(how, "local") && strcmp(how, "remote") && strcmp(how, "both"))
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "Unknown choice '%.64s': local, "
                              "remote or both (a merged file: ResolveConflictMerged)", how);
        return call_start(ctx, inv, CALL_RESOLVE, path, how, -1);
}

static gboolean on_resolve_conflict(FcManager1 *m, GDBusMethodInvocation *inv, const char *path,
                                    const char *how, gpointer ctx)
{
        return fcd_conflict_resolve(ctx, inv, path, how);
}

gboolean fcd_conflict_resolve_merged(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                                     GUnixFDList *fds, const char *path, GVariant *content)
{
        g_autoptr(GError) error = NULL;
        gint32 idx = g_variant_get_handle(content);
        int fd;

        if (!fds || idx < 0 || idx >= g_unix_fd_list_get_length(fds))
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "The content handle %d names no "
                              "file descriptor sent with the call", idx);
        fd = g_unix_fd_list_get(fds, idx, &error);
        if (fd < 0)
                return fcd_refuse(inv, FCD_ERROR_INVALID_ARGUMENT, "Cannot take the content file "
                              "descriptor: %s", error->message);
        return call_start(ctx, inv, CALL_MERGED, path, NULL, fd);
}

static gboolean on_resolve_conflict_merged(FcManager1 *m, GDBusMethodInvocation *inv,
                                           GUnixFDList *fds, const char *path, GVariant *content,
                                           gpointer ctx)
{
        return fcd_conflict_resolve_merged(ctx, inv, fds, path, content);
}

bool fcd_conflict_caller_may_read(const struct fcd_caller *caller, const char *path)
{
        g_autofree char *dir = g_path_get_dirname(path), *base = g_path_get_basename(path);
        struct fcd_identity_saved saved;
        struct fc_target t = FC_TARGET_INIT;
        struct fc_error e = { 0 };
        int r;

        if (caller->uid == 0)
                return true;
        if (fcd_identity_enter(caller, &saved) < 0)
                return false;
        r = fcd_caller_resolve(dir, 0, &t, &e);
        /* As GetConflictVersion asks: the object readable, or its directory when it is gone. */
        if (r == 0)
                r = S_ISDIR(t.stx.stx_mode) ? caller_may_at(t.fd, base, R_OK, R_OK | X_OK, NULL)
                                            : -ENOTDIR;
        fcd_identity_leave(&saved);
        fc_target_close(&t);
        return r == 0;
}

/* ---- ConflictsChanged after a volume comes back online ---- */

struct poll_call {
        struct fcd_context *ctx;
        char *volume;
        int count;
};

static void poll_free(gpointer p)
{
        struct poll_call *pc = p;

        g_free(pc->volume);
        g_free(pc);
}

static void poll_worker(GTask *task, gpointer src, gpointer data, GCancellable *cancellable)
{
        struct poll_call *pc = data;
        g_autofree char *sock = fcd_volume_socket(pc->ctx->volumes, pc->volume);

        pc->count = state_count(sock);
        g_task_return_boolean(task, TRUE);
}

static void on_poll_done(GObject *src, GAsyncResult *res, gpointer data)
{
        struct poll_call *pc = g_task_get_task_data(G_TASK(res));

        fcd_tasks_in_flight--;
        note_count(pc->ctx, pc->volume, pc->count);
}

void fcd_manager_conflicts_poll(struct fcd_context *ctx, const char *volume)
{
        g_autoptr(GTask) task = g_task_new(NULL, NULL, on_poll_done, NULL);
        struct poll_call *pc = g_new0(struct poll_call, 1);

        pc->ctx = ctx;
        pc->volume = g_strdup(volume);
        pc->count = -1;
        g_task_set_task_data(task, pc, poll_free);
        fcd_tasks_in_flight++;
        g_task_run_in_thread(task, poll_worker);
}

void fcd_manager_conflicts_connect(struct fcd_context *ctx)
{
        g_signal_connect(ctx->manager, "handle-list-conflicts", G_CALLBACK(on_list_conflicts),
                         ctx);
        g_signal_connect(ctx->manager, "handle-get-conflict-version",
                         G_CALLBACK(on_get_conflict_version), ctx);
        g_signal_connect(ctx->manager, "handle-resolve-conflict",
                         G_CALLBACK(on_resolve_conflict), ctx);
        g_signal_connect(ctx->manager, "handle-resolve-conflict-merged",
                         G_CALLBACK(on_resolve_conflict_merged), ctx);
}
