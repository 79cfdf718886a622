/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * resolve.c: settling a kept conflict (resolve.h).
 *
 * The approach: the object's base version is moved to what the server has
 * now (checked against the conflict's remote version first: -ESTALE if the
 * server moved again), so that the conflict's record and the records held
 * behind it either replay cleanly through reintegrate_run() (local, and the
 * held records of merged) or are marked applied as "dropped" (remote, both).
 * Content the server gets directly (merged; both's kept copy; local content
 * of an object the server deleted) is written to a temporary in the target
 * directory and renamed into place (RENAME_NOREPLACE where the name must be
 * free).  The conflict row goes in the same transaction that re-queues or
 * drops its records; for local the effect then reaches the server in the
 * replay that follows (a crash in between leaves pending records that the
 * next reintegration applies).
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

#include "oplog-internal.h"
#include "regular-file.h"
#include "resolve.h"

static const char *const how_names[] = { "local", "remote", "both", "merged" };

const char *resolve_how_to_string(enum resolve_how how)
{
        return (unsigned)how < 4 ? how_names[how] : NULL;
}

int resolve_how_from_string(const char *word, enum resolve_how *out)
{
        for (unsigned i = 0; word && i < 4; i++)
                if (strcmp(word, how_names[i]) == 0) {
                        *out = (enum resolve_how)i;
                        return 0;
                }
        return -EINVAL;
}

struct found {
        uint64_t id, seq, lid;
        char kind[32];
        char path[PATH_MAX];
        char base[FCACHE_MERGE_ID_SIZE], local[FCACHE_MERGE_ID_SIZE], remote[FCACHE_MERGE_ID_SIZE];
        bool ok;
};

static void copy_s(char *dst, size_t n, const char *src)
{
        size_t l = src ? strnlen(src, n - 1) : 0;

        if (l)
                memcpy(dst, src, l);
        dst[l] = '\0';
}

static int find_cb(void *ud, const struct oplog_conflict *c)
{
        struct found *f = ud;

        if (c->id != f->id)
                return 0;
        f->ok = true;
        f->seq = c->seq;
        f->lid = c->lid;
        copy_s(f->kind, sizeof(f->kind), c->kind);
        copy_s(f->path, sizeof(f->path), c->path);
        copy_s(f->base, sizeof(f->base), c->base);
        copy_s(f->local, sizeof(f->local), c->local);
        copy_s(f->remote, sizeof(f->remote), c->remote);
        return 0;
}

static int find(struct oplog *log, uint64_t id, struct found *f)
{
        int e;

        memset(f, 0, sizeof(*f));
        f->id = id;
        e = oplog_conflict_foreach(log, find_cb, f);
        if (e < 0)
                return e;
        return f->ok ? 0 : -ENOENT;
}

/* The parent directory of relative @path under @dirfd (walked without symlinks); *name its last part. */
static int open_parent(int dirfd, const char *path, char *name, size_t name_size, int *out)
{
        char buf[PATH_MAX];
        char *p, *slash;
        int fd = dup(dirfd);

        if (fd < 0)
                return -errno;
        copy_s(buf, sizeof(buf), path);
        p = buf;
        while ((slash = strchr(p, '/'))) {
                int nfd;

                *slash = '\0';
                if (*p) {
                        nfd = openat(fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        close(fd);
                        if (nfd < 0)
                                return -errno;
                        fd = nfd;
                }
                p = slash + 1;
        }
        if (!*p) {
                close(fd);
                return -EINVAL; /* the volume root itself is not settled by name */
        }
        copy_s(name, name_size, p);
        *out = fd;
        return 0;
}

static int read_fd(int fd, char **out, size_t *size)
{
        size_t cap = 65536, n = 0;
        char *b = malloc(cap);

        if (!b)
                return -ENOMEM;
        for (;;) {
                ssize_t r;

                if (n == cap) {
                        char *nb = realloc(b, cap *= 2);

                        if (!nb) {
                                free(b);
                                return -ENOMEM;
                        }
                        b = nb;
                }
                r = read(fd, b + n, cap - n);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0) {
                        int e = -errno;

                        free(b);
                        return e;
                }
                if (r == 0)
                        break;
                n += (size_t)r;
        }
        *out = b;
        *size = n;
        return 0;
}

/*
 * What the server has at @pfd/@name now: *st (st_mode 0 if nothing), and the
 * content id of a regular file or symlink in @id ("" otherwise).
 */
static int server_now(int pfd, const char *name, struct stat *st, char id[FCACHE_MERGE_ID_SIZE])
{
        char *data = NULL;
        size_t size = 0;
        int e = 0;

        id[0] = '\0';
        if (fstatat(pfd, name, st, AT_SYMLINK_NOFOLLOW) < 0) {
                memset(st, 0, sizeof(*st));
                return errno == ENOENT ? 0 : -errno;
        }
        if (S_ISREG(st->st_mode)) {
                int fd = regular_open_at(pfd, name, O_RDONLY, NULL);

                if (fd < 0)
                        return fd;
                e = read_fd(fd, &data, &size);
                close(fd);
        } else if (S_ISLNK(st->st_mode)) {
                char t[PATH_MAX];
                ssize_t n = readlinkat(pfd, name, t, sizeof(t));

                if (n < 0)
                        return -errno;
                data = malloc((size_t)n + 1);
                if (!data)
                        return -ENOMEM;
                memcpy(data, t, (size_t)n);
                size = (size_t)n;
        } else {
                return 0;
        }
        if (e >= 0)
                e = fcache_merge_blob_id(id, data, size);
        free(data);
        return e;
}

/*
 * Writes @data as file @name in @pfd: a temporary renamed into place, over
 * what is there (@noreplace false) or only to a free name (-EEXIST).
 */
static int put_file(int pfd, const char *name, const void *data, size_t size, mode_t mode,
                    bool noreplace, bool sync)
{
        char tmp[64];
        int fd, e;

        snprintf(tmp, sizeof(tmp), ".fcache-resolve-%d", (int)getpid());
        (void)unlinkat(pfd, tmp, 0);
        fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 07777);
        if (fd < 0)
                return -errno;
        e = write_all(fd, data, size);
        if (e >= 0 && fchmod(fd, mode & 07777) < 0)
                e = -errno;
        if (e >= 0 && sync && fsync(fd) < 0)
                e = -errno;
        close(fd);
        if (e >= 0 && (noreplace ? renameat2(pfd, tmp, pfd, name, RENAME_NOREPLACE)
                                 : renameat(pfd, tmp, pfd, name)) < 0)
                e = -errno;
        if (e < 0)
                (void)unlinkat(pfd, tmp, 0);
        else if (sync)
                (void)fsync(pfd);
        return e;
}

/* The object's base becomes what the server has now at @pfd/@name. */
static int rebase(struct oplog *log, struct oplog_object *o, int pfd, const char *name)
{
        struct stat st;
        char id[FCACHE_MERGE_ID_SIZE];
        int e = server_now(pfd, name, &st, id);

        if (e < 0)
                return e;
        if (!st.st_mode)
                return 0; /* gone: the records that still name it are dropped */
        oplog_version_from_stat(&o->base, &st);
        if (S_ISREG(st.st_mode)) {
                int fd = regular_open_at(pfd, name, O_RDONLY, NULL);

                if (fd < 0)
                        return fd;
                e = oplog_put_base_fd(log, fd, o->base.content);
                close(fd);
                if (e < 0)
                        return e;
        } else if (S_ISLNK(st.st_mode)) {
                copy_s(o->base.content, sizeof(o->base.content), id);
        }
        return 0;
}

static int settle(struct oplog *log, struct oplog_object *o, const struct found *f, bool replay,
                  const char *mark_outcome, uint64_t *count)
{
        int e = oplog_begin(log);

        if (e < 0)
                return e;
        o->conflict = 0;
        e = oplog_object_save(log, o);
        if (e >= 0)
                e = oplog_conflict_settle(log, f->id, f->seq, replay, count);
        if (e >= 0 && mark_outcome) {
                e = oplog_mark(log, f->seq, OPLOG_APPLIED, mark_outcome);
                if (e >= 0 && count && *count)
                        (*count)--;
        }
        if (e >= 0)
                e = oplog_commit(log);
        else
                oplog_rollback(log);
        return e;
}

/*
 * A name both sides created, settled local or merged: the local (or merged)
 * content replaces the server's file, and the object created offline becomes
 * that server file (its create is done, not replayed), so the records held
 * behind the conflict apply to it.
 */
static int adopt_server_name(struct oplog *log, struct oplog_object *o, const struct found *f,
                             enum resolve_how how, int merged_fd, int pfd, const char *name,
                             const struct stat *st, uint64_t *count)
{
        struct stat pst;
        uint64_t plid;
        char *data = NULL, *nm;
        size_t size = 0;
        int e;

        if (!S_ISREG(st->st_mode) || !S_ISREG(o->type ? o->type : S_IFREG))
                return -EINVAL; /* only regular files have a content to take */
        if (fstat(pfd, &pst) < 0)
                return -errno;
        e = oplog_find_ino(log, pst.st_ino, &plid);
        if (e < 0)
                return e;
        if (how == RESOLVE_MERGED)
                e = read_fd(merged_fd, &data, &size);
        else if (f->local[0])
                e = fcache_merge_store_get((void **)&data, &size, oplog_store(log), f->local);
        if (e >= 0)
                e = put_file(pfd, name, data, size, st->st_mode, false, !oplog_no_fsync(log));
        free(data);
        if (e < 0)
                return e;
        nm = strdup(name);
        if (!nm)
                return -ENOMEM;
        free(o->srv_name);
        o->srv_name = nm;
        o->srv_parent = plid;
        o->local = false;
        e = rebase(log, o, pfd, name);
        if (e >= 0)
                e = settle(log, o, f, true, how == RESOLVE_MERGED ? "merged" : "local", count);
        return e;
}

int resolve_conflict(struct oplog *log, int backing_dirfd, uint64_t conflict_id,
                     enum resolve_how how, int merged_fd,
                     const struct reintegrate_options *opts, struct resolve_outcome *out)
{
        struct reintegrate_options ro = REINTEGRATE_OPTIONS_INIT;
        struct oplog_object o = { 0 };
        struct found f;
        struct stat st;
        char name[NAME_MAX + 1], now[FCACHE_MERGE_ID_SIZE];
        char *data = NULL;
        size_t size = 0;
        uint64_t count = 0;
        int pfd = -1, e;

        if (!log || !out || (unsigned)how > RESOLVE_MERGED)
                return -EINVAL;
        memset(out, 0, sizeof(*out));
        if (opts)
                ro = *opts;
        ro.dry_run = false;
        e = find(log, conflict_id, &f);
        if (e < 0)
                return e;
        if (how == RESOLVE_MERGED && merged_fd < 0)
                return -EINVAL;
        if (how == RESOLVE_BOTH && !f.local[0])
                return -EINVAL; /* nothing local to keep beside the server's version */
        e = oplog_object_load(log, f.lid, &o);
        if (e < 0)
                return e;
        out->lid = f.lid;
        e = open_parent(backing_dirfd, f.path, name, sizeof(name), &pfd);
        if (e == -ENOENT && how == RESOLVE_REMOTE) {
                e = settle(log, &o, &f, false, NULL, &out->dropped);
                goto done;
        }
        if (e < 0)
                goto done;
        e = server_now(pfd, name, &st, now);
        if (e < 0)
                goto done;
        if (strcmp(now, f.remote) != 0) {
                e = -ESTALE;
                goto done;
        }
        if (o.local && !strcmp(f.kind, "create-create") &&
            (how == RESOLVE_LOCAL || how == RESOLVE_MERGED)) {
                e = adopt_server_name(log, &o, &f, how, merged_fd, pfd, name, &st, &count);
                goto replay;
        }
        switch (how) {
        case RESOLVE_REMOTE:
                e = rebase(log, &o, pfd, name);
                if (e >= 0)
                        e = settle(log, &o, &f, false, NULL, &out->dropped);
                if (e >= 0 && st.st_mode)
                        copy_s(out->path, sizeof(out->path), f.path);
                break;
        case RESOLVE_BOTH: {
                char *kept = NULL;
                size_t plen;

                e = fcache_merge_store_get((void **)&data, &size, oplog_store(log), f.local);
                for (unsigned i = 0; e >= 0 && i < 100; i++) {
                        free(kept);
                        kept = NULL;
                        e = fcache_merge_keep_both_name(&kept, name, "local", i);
                        if (e < 0)
                                break;
                        e = put_file(pfd, kept, data, size, S_ISREG(o.base.mode) ? o.base.mode : 0644,
                                     true, !oplog_no_fsync(log));
                        if (e != -EEXIST)
                                break;
                }
                if (e >= 0) {
                        plen = strlen(f.path) - strlen(name);
                        snprintf(out->kept, sizeof(out->kept), "%.*s%s", (int)plen, f.path, kept);
                        e = rebase(log, &o, pfd, name);
                }
                free(kept);
                if (e >= 0)
                        e = settle(log, &o, &f, false, NULL, &out->dropped);
                if (e >= 0 && st.st_mode)
                        copy_s(out->path, sizeof(out->path), f.path);
                break;
        }
        case RESOLVE_MERGED:
                if (st.st_mode && !S_ISREG(st.st_mode)) {
                        e = -EINVAL;
                        break;
                }
                e = read_fd(merged_fd, &data, &size);
                if (e >= 0)
                        e = put_file(pfd, name, data, size, st.st_mode ? st.st_mode : o.base.mode,
                                     !st.st_mode, !oplog_no_fsync(log));
                if (e >= 0)
                        e = rebase(log, &o, pfd, name);
                if (e >= 0 && ro.refresh)
                        ro.refresh(ro.userdata, f.lid);
                if (e >= 0)
                        e = settle(log, &o, &f, true, "merged", &count);
                goto replay;
        case RESOLVE_LOCAL:
                if (!st.st_mode && f.local[0] && S_ISREG(o.base.mode ? o.base.mode : S_IFREG)) {
                        /* The server deleted it: the local content comes back under its name. */
                        e = fcache_merge_store_get((void **)&data, &size, oplog_store(log), f.local);
                        if (e >= 0)
                                e = put_file(pfd, name, data, size, o.base.mode ? o.base.mode : 0644,
                                             true, !oplog_no_fsync(log));
                        if (e >= 0 && o.srv_parent == 0)
                                e = -EINVAL;
                }
                if (e >= 0)
                        e = rebase(log, &o, pfd, name);
                if (e >= 0)
                        e = settle(log, &o, &f, true, NULL, &count);
replay:
                if (e >= 0) {
                        struct reintegrate_stats rs = { 0 };

                        out->replayed = count;
                        e = reintegrate_run(log, backing_dirfd, &ro, &rs);
                        if (e >= 0 && ro.refresh)
                                ro.refresh(ro.userdata, f.lid);
                        if (e >= 0 && (rs.conflicts || rs.held))
                                e = 0; /* a replayed record met the server again: a new conflict */
                }
                if (e >= 0) {
                        struct stat now_st;

                        if (fstatat(pfd, name, &now_st, AT_SYMLINK_NOFOLLOW) == 0)
                                copy_s(out->path, sizeof(out->path), f.path);
                }
                break;
        }
done:
        free(data);
        oplog_object_clear(&o);
        if (pfd >= 0)
                close(pfd);
        return e;
}

int resolve_version_fd(struct oplog *log, uint64_t conflict_id, const char *which, int *out_fd)
{
        struct found f;
        const char *id;
        void *data = NULL;
        size_t size = 0;
        int e, fd, ro;
        char proc[64];

        if (!log || !which || !out_fd)
                return -EINVAL;
        e = find(log, conflict_id, &f);
        if (e < 0)
                return e;
        if (strcmp(which, "base") == 0)
                id = f.base;
        else if (strcmp(which, "local") == 0)
                id = f.local;
        else if (strcmp(which, "remote") == 0)
                id = f.remote;
        else
                return -EINVAL;
        if (!id[0])
                return -ENOENT;
        e = fcache_merge_store_get(&data, &size, oplog_store(log), id);
        if (e < 0)
                return e;
        fd = memfd_create("fcache-version", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0) {
                e = -errno;
                free(data);
                return e;
        }
        e = write_all(fd, data, size);
        free(data);
        if (e >= 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
                e = -errno;
        if (e < 0) {
                close(fd);
                return e;
        }
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        ro = open(proc, O_RDONLY | O_CLOEXEC);
        if (ro >= 0) {
                close(fd);
                fd = ro;
        } else {
                (void)lseek(fd, 0, SEEK_SET);
        }
        *out_fd = fd;
        return 0;
}
