/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-conflicts.c: the control socket's conflict requests, through which a
 * person (fcache-resolve(1)) or fcached settles the conflicts that
 * reintegration kept (resolve.h):
 *
 *   query conflicts               conflicts=N, then per conflict under the
 *                                 request's target conflict=ID KIND PATH
 *                                 and conflict_detail=ID DETAIL
 *                                 and conflict_times=ID RECORDED LOCAL_CHANGED
 *                                 (µs since the epoch, 0 unknown)
 *   conflict-version ID WHICH     WHICH base|local|remote: size=N,
 *                                 content_base64=...
 *   resolve ID local|remote|both  resolved=ID path= kept= replayed= dropped=
 *   resolve-merged ID BASE64      the same, the server gets that content
 *                                 (@TOKEN: the content staged by merged-chunk)
 *   merged-chunk ID TOKEN OFFSET BASE64   staged=N (content longer than a line)
 *
 * Every oplog and resolve call is made with v->offline_lock held.  After a
 * resolve the store copies of the objects it touched are dropped and the
 * kernel's dentries and page caches of them invalidated (after the lock is
 * released: an invalidation waits for the kernel's directory lock, which a
 * FUSE request blocked on offline_lock may hold).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "resolve.h"
#include "view.h"

/* Largest version sent by conflict-version (the answer is one line). */
#define MAX_VERSION_BYTES (64u << 20)

struct conflict_row {
        uint64_t id;
        uint64_t seq;
        char *kind;
        char *path;
        char *detail;
        int64_t recorded_us, local_changed_us;
};

static void row_clear(void *p)
{
        struct conflict_row *r = p;

        g_free(r->kind);
        g_free(r->path);
        g_free(r->detail);
}

struct collect {
        GArray *rows;           /* struct conflict_row */
        const char *under;      /* relative path filter, "" for all */
        uint64_t only_id;       /* 0: every id */
};

static bool path_under(const char *path, const char *under)
{
        size_t n = strlen(under);

        if (!n)
                return true;
        return !strncmp(path, under, n) && (path[n] == 0 || path[n] == '/');
}

static int collect_one(void *ud, const struct oplog_conflict *c)
{
        struct collect *cl = ud;
        struct conflict_row row;

        const char *path = c->path ? c->path : "";

        /* The log's paths start with '/': the answer's are relative to the root. */
        while (*path == '/')
                path++;
        if (cl->only_id && c->id != cl->only_id)
                return 0;
        if (!path_under(path, cl->under))
                return 0;
        row.id = c->id;
        row.seq = c->seq;
        row.kind = g_strdup(c->kind ? c->kind : "unknown");
        row.path = g_strdup(path);
        row.detail = g_strdup(c->detail ? c->detail : "");
        row.recorded_us = c->recorded_us;
        row.local_changed_us = c->local_changed_us;
        g_array_append_val(cl->rows, row);
        return 0;
}

/* The conflicts (with offline_lock held by the caller). */
static int collect(struct view *v, const char *under, uint64_t only_id, GArray **out)
{
        struct collect cl = { g_array_new(FALSE, TRUE, sizeof(struct conflict_row)), under,
                              only_id };
        int r;

        g_array_set_clear_func(cl.rows, row_clear);
        r = oplog_conflict_foreach(v->oplog, collect_one, &cl);
        if (r < 0) {
                g_array_free(cl.rows, TRUE);
                return r;
        }
        *out = cl.rows;
        return 0;
}

static int parse_id(const char *word, uint64_t *out, GString *err)
{
        char *end;

        if (!word || !*word) {
                g_string_assign(err, "missing conflict ID (a number from 'query conflicts')");
                return -EINVAL;
        }
        errno = 0;
        *out = g_ascii_strtoull(word, &end, 10);
        if (*end || errno || *out == 0 || word[0] == '-' || word[0] == '+') {
                g_string_printf(err, "conflict ID '%s' is not a positive number", word);
                return -EINVAL;
        }
        return 0;
}

/* Whether conflict @id exists (lock held); -ENOENT with a message if not. */
static int conflict_lookup_row(struct view *v, uint64_t id, char **path, char **kind,
                               uint64_t *seq, GString *err)
{
        GArray *rows;
        int r = collect(v, "", id, &rows);

        if (r < 0) {
                g_string_printf(err, "cannot read the conflicts: %s", strerror(-r));
                return r;
        }
        if (!rows->len) {
                g_string_printf(err, "no conflict with ID %" PRIu64
                                " (settled already? see 'query conflicts')", id);
                r = -ENOENT;
        } else {
                struct conflict_row *c = &g_array_index(rows, struct conflict_row, 0);

                if (path)
                        *path = g_strdup(c->path);
                if (kind)
                        *kind = g_strdup(c->kind);
                if (seq)
                        *seq = c->seq;
        }
        g_array_free(rows, TRUE);
        return r;
}

static int conflict_lookup(struct view *v, uint64_t id, char **path, GString *err)
{
        return conflict_lookup_row(v, id, path, NULL, NULL, err);
}

static int do_query(struct view *v, char **words, const char *under, struct ctl_out *out,
                    GString *err)
{
        GArray *rows;
        int r;

        if (words[2]) {
                g_string_printf(err, "'query conflicts' takes no word after it (got '%s'); "
                                "its target is the request's", words[2]);
                return -EINVAL;
        }
        pthread_mutex_lock(&v->offline_lock);
        r = collect(v, under, 0, &rows);
        pthread_mutex_unlock(&v->offline_lock);
        if (r < 0) {
                g_string_printf(err, "cannot read the conflicts: %s", strerror(-r));
                return r;
        }
        out_kv(out, "conflicts=%u", rows->len);
        for (guint i = 0; i < rows->len; i++) {
                struct conflict_row *c = &g_array_index(rows, struct conflict_row, i);

                out_kv(out, "conflict=%" PRIu64 " %s %s", c->id, c->kind, c->path);
        }
        for (guint i = 0; i < rows->len; i++) {
                struct conflict_row *c = &g_array_index(rows, struct conflict_row, i);

                out_kv(out, "conflict_detail=%" PRIu64 " %s", c->id, c->detail);
        }
        for (guint i = 0; i < rows->len; i++) {
                struct conflict_row *c = &g_array_index(rows, struct conflict_row, i);

                out_kv(out, "conflict_times=%" PRIu64 " %" PRId64 " %" PRId64, c->id,
                       c->recorded_us, c->local_changed_us);
        }
        g_array_free(rows, TRUE);
        return 0;
}

static int do_version(struct view *v, char **words, struct ctl_out *out, GString *err)
{
        uint64_t id;
        struct stat st;
        char *data, *b64;
        size_t off = 0;
        int fd = -1, r;

        r = parse_id(words[1], &id, err);
        if (r < 0)
                return r;
        if (!words[2] || (strcmp(words[2], "base") && strcmp(words[2], "local") &&
                          strcmp(words[2], "remote")) || words[3]) {
                if (!words[2])
                        g_string_assign(err, "missing version: base, local or remote");
                else if (words[3])
                        g_string_printf(err, "unexpected word '%s' after the version", words[3]);
                else
                        g_string_printf(err, "unknown version '%s': base, local or remote",
                                        words[2]);
                return -EINVAL;
        }
        pthread_mutex_lock(&v->offline_lock);
        r = conflict_lookup(v, id, NULL, err);
        if (r >= 0)
                r = resolve_version_fd(v->oplog, id, words[2], &fd);
        pthread_mutex_unlock(&v->offline_lock);
        if (r == -ENOENT && !err->len)
                g_string_printf(err, "conflict %" PRIu64 " has no %s content (deleted, a "
                                "directory, or never cached on that side)", id, words[2]);
        if (r < 0)
                return r;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        if ((uint64_t)st.st_size > MAX_VERSION_BYTES) {
                close(fd);
                g_string_printf(err, "the %s version is %" PRIu64 " bytes, more than the %u "
                                "this request sends", words[2], (uint64_t)st.st_size,
                                MAX_VERSION_BYTES);
                return -EFBIG;
        }
        data = g_malloc((size_t)st.st_size + 1);
        while (off < (size_t)st.st_size) {
                ssize_t n = pread(fd, data + off, (size_t)st.st_size - off, (off_t)off);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        r = n < 0 ? -errno : -EIO;
                        break;
                }
                off += (size_t)n;
        }
        close(fd);
        if (r < 0) {
                g_free(data);
                return r;
        }
        b64 = g_base64_encode((const guchar *)data, off);
        out_kv(out, "size=%zu", off);
        out_kv(out, "content_base64=%s", b64);
        g_free(b64);
        g_free(data);
        return 0;
}

/* What a resolve touched on the server, to be dropped and invalidated. */
struct touched {
        char *path;             /* relative server path */
        uint64_t ino;           /* its inode before the resolve, 0 if none */
};

static uint64_t path_ino(struct view *v, const char *rel)
{
        struct stat st;

        if (!*rel)
                return 0;
        if (fstatat(v->root_fd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return 0;
        return st.st_ino;
}

/* The kernel's node id of directory @rel ("" the root), 0 if it has none. */
static fuse_ino_t dir_node(struct view *v, const char *rel)
{
        uint64_t ino;

        if (!*rel || !strcmp(rel, "."))
                return FUSE_ROOT_ID;
        ino = path_ino(v, rel);
        return ino ? vnode_id_of_ino(v, ino) : 0;
}

static void drop_ino(struct view *v, uint64_t ino)
{
        fuse_ino_t id;
        int r;

        if (!ino)
                return;
        r = store_drop_ino(v->store, ino, true);
        if (r < 0)
                log_warn("Resolve: dropping the store copy of inode %" PRIu64 " failed: %s",
                         ino, strerror(-r));
        id = vnode_id_of_ino(v, ino);
        if (id && v->se)
                fuse_lowlevel_notify_inval_inode(v->se, id, 0, 0);
}

/* Drops and invalidates path @rel: its old inode @old_ino, and whatever it is now. */
static void invalidate(struct view *v, const char *rel, uint64_t old_ino)
{
        char *parent, *slash, *name;
        fuse_ino_t pid;

        if (!rel || !*rel)
                return;
        drop_ino(v, old_ino);
        drop_ino(v, path_ino(v, rel));
        parent = g_strdup(rel);
        slash = strrchr(parent, '/');
        if (slash) {
                *slash = 0;
                name = slash + 1;
        } else {
                name = parent;
        }
        pid = dir_node(v, slash ? parent : "");
        if (pid && v->se && *name)
                fuse_lowlevel_notify_inval_entry(v->se, pid, name, strlen(name));
        g_free(parent);
}

static void refresh_cb(void *ud, uint64_t lid)
{
        g_array_append_val((GArray *)ud, lid);
}

/* Keeps the offline mirror of relative server path @rel current (mode lock held shared). */
static void mirror_note(struct view *v, const char *rel)
{
        char *parent, *slash;
        int pfd;

        if (!rel || !*rel || v->mirror_fd < 0)
                return;
        parent = g_strdup(rel);
        slash = strrchr(parent, '/');
        if (slash)
                *slash = 0;
        pfd = slash ? openat(v->root_fd, parent, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                    : dup(v->root_fd);
        if (pfd >= 0) {
                mirror_note_change(v, pfd, slash ? slash + 1 : rel);
                close(pfd);
        }
        g_free(parent);
}

/* A server path of the log or of resolve.h, relative to the root (no leading '/'). */
static const char *skip_slash(const char *p)
{
        while (*p == '/')
                p++;
        return p;
}

static int do_resolve(struct view *v, uint64_t id, enum resolve_how how, int merged_fd,
                      struct ctl_out *out, GString *err)
{
        struct reintegrate_options opts = REINTEGRATE_OPTIONS_INIT;
        struct resolve_outcome *res = g_new0(struct resolve_outcome, 1);
        GArray *refreshed = g_array_new(FALSE, FALSE, sizeof(uint64_t));
        struct touched before = { NULL, 0 };
        GArray *again = NULL;
        char *kind = NULL;
        int r;

        opts.refresh = refresh_cb;
        opts.userdata = refreshed;
        opts.names_identify = __atomic_load_n(&v->names_identify, __ATOMIC_ACQUIRE);
        /*
         * Online only: settling writes to the server and replays the log,
         * which offline holds the changes not yet reintegrated.  The shared
         * mode lock keeps the state from switching meanwhile.
         */
        view_change_begin(v);
        if (view_offline(v)) {
                view_change_end(v);
                g_string_printf(err, "the volume is %s: conflicts are settled online "
                                "(reconnect first)", view_state_name(v));
                g_free(res);
                g_array_free(refreshed, TRUE);
                return -EHOSTDOWN;
        }
        pthread_mutex_lock(&v->offline_lock);
        r = conflict_lookup_row(v, id, &before.path, &kind, NULL, err);
        if (r >= 0) {
                before.ino = path_ino(v, before.path);
                r = resolve_conflict(v->oplog, v->root_fd, id, how, merged_fd, &opts, res);
        }
        /* A replayed record that met the server again is a new conflict on the path. */
        if (r >= 0 && collect(v, before.path, 0, &again) < 0)
                again = NULL;
        pthread_mutex_unlock(&v->offline_lock);
        if (r >= 0) {
                /* The offline mirror of pinned directories follows the server. */
                mirror_note(v, before.path);
                if (strcmp(skip_slash(res->path), before.path))
                        mirror_note(v, skip_slash(res->path));
                mirror_note(v, skip_slash(res->kept));
        }
        view_change_end(v);
        if (r >= 0)
                view_conflicts_recount(v);      /* FCACHE_ECONFLICT lookups follow */
        /* Kernel invalidations only now: they wait for directory locks that a
         * FUSE request queued behind a state switch may hold. */
        if (r == -ESTALE)
                g_string_printf(err, "the server changed '%s' again since conflict %" PRIu64
                                " was recorded: reintegrate again (it records the new "
                                "server version) and choose then", before.path, id);
        else if (r == -EINVAL && how == RESOLVE_BOTH && !err->len)
                g_string_printf(err, "conflict %" PRIu64 " ('%s', %s) has no local content to "
                                "keep beside the server's (the local side removed it or "
                                "changed only its attributes): choose local or remote", id,
                                before.path, kind);
        else if (r == -EINVAL && !err->len)
                g_string_printf(err, "conflict %" PRIu64 " ('%s', %s) cannot be settled as "
                                "'%s' (not allowed for its kind)", id, before.path, kind,
                                resolve_how_to_string(how));
        else if (r < 0 && !err->len)
                g_string_printf(err, "settling conflict %" PRIu64 " ('%s') failed on the "
                                "backing: %s", id, before.path, strerror(-r));
        if (r >= 0) {
                /* The conflict's own name, where it is now, and the kept copy. */
                const char *now = skip_slash(res->path), *kept = skip_slash(res->kept);

                invalidate(v, before.path, before.ino);
                if (strcmp(now, before.path))
                        invalidate(v, now, 0);
                invalidate(v, kept, 0);
                out_kv(out, "resolved=%" PRIu64 "", id);
                out_kv(out, "how=%s", resolve_how_to_string(how));
                out_kv(out, "path=%s", now);
                out_kv(out, "kept=%s", kept);
                out_kv(out, "replayed=%" PRIu64 "", res->replayed);
                out_kv(out, "dropped=%" PRIu64 "", res->dropped);
                out_kv(out, "refreshed=%u", refreshed->len);
                for (guint i = 0; again && i < again->len; i++) {
                        struct conflict_row *c = &g_array_index(again, struct conflict_row, i);

                        /* A conflict at the same path again (ids are never reused). */
                        if (!strcmp(c->path, before.path))
                                out_kv(out, "conflict_again=%" PRIu64 " %s %s", c->id,
                                       c->kind, c->path);
                }
                log_info("Conflict %" PRIu64 " (%s) settled: %s", id, before.path,
                         resolve_how_to_string(how));
        }
        g_free(before.path);
        g_free(kind);
        if (again)
                g_array_free(again, TRUE);
        g_array_free(refreshed, TRUE);
        g_free(res);
        return r;
}

static int do_resolve_words(struct view *v, char **words, struct ctl_out *out, GString *err)
{
        enum resolve_how how;
        uint64_t id;
        int r;

        r = parse_id(words[1], &id, err);
        if (r < 0)
                return r;
        if (!words[2]) {
                g_string_assign(err, "missing choice: local, remote or both");
                return -EINVAL;
        }
        if (words[3]) {
                g_string_printf(err, "unexpected word '%s' after the choice", words[3]);
                return -EINVAL;
        }
        if (!strcmp(words[2], "merged")) {
                g_string_assign(err, "'merged' needs the content: use resolve-merged ID BASE64");
                return -EINVAL;
        }
        if (resolve_how_from_string(words[2], &how) < 0) {
                g_string_printf(err, "unknown choice '%s': local, remote or both", words[2]);
                return -EINVAL;
        }
        return do_resolve(v, id, how, -1, out, err);
}

static bool base64_valid(const char *s)
{
        size_t n = strlen(s), pad = 0;

        if (n % 4)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];

                if (c == '=') {
                        pad++;
                        continue;
                }
                if (pad || !(g_ascii_isalnum(c) || c == '+' || c == '/'))
                        return false;
        }
        return pad <= 2;
}

/*
 * Staged merged content, for texts larger than one request line (the
 * control socket reads lines of at most 8 KiB): "merged-chunk ID TOKEN
 * OFFSET BASE64" appends to stage ID/TOKEN (offset 0 starts it again), then
 * "resolve-merged ID @TOKEN" settles with it.  At most MAX_STAGES are kept
 * (the least recently used goes), each at most MAX_VERSION_BYTES.
 */
#define MAX_STAGES 16

struct stage {
        int fd;                 /* memfd */
        uint64_t size;
        uint64_t used_ns;
};

static pthread_mutex_t stages_lock = PTHREAD_MUTEX_INITIALIZER;
static GHashTable *stages;      /* protected by stages_lock: "ID/TOKEN" -> struct stage */

static void stage_free(void *p)
{
        struct stage *st = p;

        close(st->fd);
        g_free(st);
}

static bool token_valid(const char *t)
{
        size_t n = strlen(t);

        if (!n || n > 32)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!g_ascii_isalnum(t[i]) && t[i] != '-' && t[i] != '_')
                        return false;
        return true;
}

static int write_all_fd(int fd, const void *data, size_t len, off_t at)
{
        size_t off = 0;

        while (off < len) {
                ssize_t n = pwrite(fd, (const char *)data + off, len - off, at + (off_t)off);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                off += (size_t)n;
        }
        return 0;
}

static int do_merged_chunk(char **words, struct ctl_out *out, GString *err)
{
        struct stage *st;
        uint64_t id, offset;
        guchar *data = NULL;
        gsize len = 0;
        char *key, *end;
        int r;

        r = parse_id(words[1], &id, err);
        if (r < 0)
                return r;
        if (!words[2] || !token_valid(words[2])) {
                g_string_printf(err, "merged-chunk needs a TOKEN (1-32 letters, digits, '-', "
                                "'_'), got '%s'", words[2] ? words[2] : "");
                return -EINVAL;
        }
        errno = 0;
        offset = words[3] ? g_ascii_strtoull(words[3], &end, 10) : 0;
        if (!words[3] || *end || errno || words[3][0] == '-') {
                g_string_printf(err, "merged-chunk needs the OFFSET of the chunk, got '%s'",
                                words[3] ? words[3] : "");
                return -EINVAL;
        }
        if (!words[4] || words[5] || !base64_valid(words[4])) {
                g_string_assign(err, words[4] && words[5] ? "unexpected word after the chunk"
                                : "the chunk is missing or not valid base64");
                return -EINVAL;
        }
        data = g_base64_decode(words[4], &len);
        key = g_strdup_printf("%" PRIu64 "/%s", id, words[2]);
        pthread_mutex_lock(&stages_lock);
        if (!stages)
                stages = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, stage_free);
        st = g_hash_table_lookup(stages, key);
        if (offset == 0 && st) {
                g_hash_table_remove(stages, key);
                st = NULL;
        }
        if (!st && offset != 0) {
                g_string_printf(err, "no staged content %s (start with offset 0)", key);
                r = -ENOENT;
        } else if (st && offset != st->size) {
                g_string_printf(err, "chunk offset %" PRIu64 " does not follow the %" PRIu64
                                " bytes staged", offset, st->size);
                r = -EINVAL;
        } else if (offset + len > MAX_VERSION_BYTES) {
                g_string_printf(err, "merged content larger than %u bytes", MAX_VERSION_BYTES);
                r = -EFBIG;
        }
        if (r >= 0 && !st) {
                int fd = memfd_create("fcache-merged", MFD_CLOEXEC);

                if (fd < 0) {
                        r = -errno;
                } else {
                        /* Room for it: the least recently used stage goes. */
                        while (g_hash_table_size(stages) >= MAX_STAGES) {
                                GHashTableIter it;
                                gpointer k, val, oldest = NULL;
                                uint64_t t = UINT64_MAX;

                                g_hash_table_iter_init(&it, stages);
                                while (g_hash_table_iter_next(&it, &k, &val))
                                        if (((struct stage *)val)->used_ns < t) {
                                                t = ((struct stage *)val)->used_ns;
                                                oldest = k;
                                        }
                                g_hash_table_remove(stages, oldest);
                        }
                        st = g_new0(struct stage, 1);
                        st->fd = fd;
                        g_hash_table_insert(stages, g_strdup(key), st);
                }
        }
        if (r >= 0)
                r = write_all_fd(st->fd, data, len, (off_t)offset);
        if (r >= 0) {
                st->size = offset + len;
                st->used_ns = now_ns();
                out_kv(out, "staged=%" PRIu64 "", st->size);
        }
        pthread_mutex_unlock(&stages_lock);
        g_free(key);
        g_free(data);
        return r;
}

/* Takes staged content ID/TOKEN out of the table: its descriptor, or -ENOENT. */
static int stage_take(uint64_t id, const char *token, GString *err)
{
        char *key = g_strdup_printf("%" PRIu64 "/%s", id, token);
        struct stage *st = NULL;
        int fd = -ENOENT;

        pthread_mutex_lock(&stages_lock);
        if (stages && g_hash_table_steal_extended(stages, key, NULL, (gpointer *)&st)) {
                fd = st->fd;
                g_free(st);
        }
        pthread_mutex_unlock(&stages_lock);
        if (fd < 0)
                g_string_printf(err, "no staged content %s (send it with merged-chunk first)",
                                key);
        g_free(key);
        return fd;
}

static int do_resolve_merged(struct view *v, char **words, struct ctl_out *out, GString *err)
{
        const char *b64;
        guchar *data;
        gsize len = 0;
        size_t off = 0;
        uint64_t id;
        int fd, r;

        r = parse_id(words[1], &id, err);
        if (r < 0)
                return r;
        if (words[2] && words[3]) {
                g_string_printf(err, "unexpected word '%s' after the content", words[3]);
                return -EINVAL;
        }
        b64 = words[2] ? words[2] : "";
        if (b64[0] == '@') {
                if (!token_valid(b64 + 1)) {
                        g_string_printf(err, "'%s' is not @TOKEN of staged content", b64);
                        return -EINVAL;
                }
                fd = stage_take(id, b64 + 1, err);
                if (fd < 0)
                        return fd;
                r = do_resolve(v, id, RESOLVE_MERGED, fd, out, err);
                close(fd);
                return r;
        }
        if (!strcmp(b64, "-"))
                b64 = "";       /* empty content */
        if (!base64_valid(b64)) {
                g_string_assign(err, "the merged content is not valid base64 "
                                "(use '-' for empty content)");
                return -EINVAL;
        }
        data = *b64 ? g_base64_decode(b64, &len) : NULL;
        fd = memfd_create("fcache-merged", MFD_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                g_free(data);
                return r;
        }
        while (off < len) {
                ssize_t n = write(fd, data + off, len - off);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        break;
                }
                off += (size_t)n;
        }
        g_free(data);
        if (r >= 0 && lseek(fd, 0, SEEK_SET) < 0)
                r = -errno;
        if (r >= 0)
                r = do_resolve(v, id, RESOLVE_MERGED, fd, out, err);
        close(fd);
        return r;
}

bool conflicts_execute(struct view *v, const char *cmdline, const char *under,
                       struct ctl_out *out, GString *err, int *status)
{
        char **words;
        int r;

        while (*cmdline == ' ')
                cmdline++;
        if (strncmp(cmdline, "query conflicts", 15) == 0 &&
            (cmdline[15] == 0 || cmdline[15] == ' ')) {
                /* handled below */
        } else if (strncmp(cmdline, "conflict-version", 16) &&
                   strncmp(cmdline, "resolve", 7) && strncmp(cmdline, "merged-chunk", 12)) {
                return false;
        }
        words = g_strsplit_set(cmdline, " ", -1);
        /* Drop empty words (runs of spaces). */
        {
                guint j = 0;

                for (guint i = 0; words[i]; i++) {
                        if (*words[i])
                                words[j++] = words[i];
                        else
                                g_free(words[i]);
                }
                words[j] = NULL;
        }
        if (!v->oplog) {
                g_string_assign(err, "this volume has no offline log (CacheDir/offline)");
                r = -ENODEV;
        } else if (!strcmp(words[0], "query") && words[1] && !strcmp(words[1], "conflicts")) {
                r = do_query(v, words, under, out, err);
        } else if (!strcmp(words[0], "conflict-version")) {
                r = do_version(v, words, out, err);
        } else if (!strcmp(words[0], "resolve")) {
                r = do_resolve_words(v, words, out, err);
        } else if (!strcmp(words[0], "resolve-merged")) {
                r = do_resolve_merged(v, words, out, err);
        } else if (!strcmp(words[0], "merged-chunk")) {
                r = do_merged_chunk(words, out, err);
        } else {
                g_strfreev(words);
                return false;
        }
        g_strfreev(words);
        if (r < 0 && !err->len)
                g_string_assign(err, strerror(-r));
        *status = r < 0 ? r : 0;
        return true;
}
