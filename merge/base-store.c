/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * base-store.c: base versions of files kept content-addressed, as loose
 * blobs in a libgit2 object database in one directory (<CacheDir>/bases).
 * Reintegration needs the version an offline change was made against; the
 * store keeps each such version once, however many changes refer to it, and
 * collects the ones no change refers to any more. The only I/O in merge/.
 *
 * Layout: git's loose objects, <dir>/<2 hex>/<38 hex>, zlib-compressed.
 * libgit2 has no call to delete an object, so garbage collection unlinks
 * those files itself and then reopens the database to drop libgit2's object
 * cache, which would otherwise still answer for deleted objects (libgit2
 * caches no blobs by default, but any code in the process may enable it with
 * GIT_OPT_SET_CACHE_OBJECT_LIMIT).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <git2.h>
#include <git2/sys/odb_backend.h>

#include "fcache-merge.h"
#include "merge-internal.h"

/* Private: base versions are copies of people's files. */
#define STORE_DIR_MODE 0700
#define STORE_FILE_MODE 0400
#define READ_CHUNK (64 * 1024)

struct fcache_merge_store {
        git_odb *odb;
        char *path;
        int dir_fd;
        unsigned flags;
        bool stale; /* objects were deleted but the odb (and its cache) not yet reopened */
};

bool fcache_merge_id_is_valid(const char *id)
{
        if (!id)
                return false;
        for (size_t i = 0; i < GIT_OID_HEXSZ; i++)
                if (!strchr("0123456789abcdefABCDEF", id[i]) || id[i] == '\0')
                        return false;
        return id[GIT_OID_HEXSZ] == '\0';
}

static int parse_id(git_oid *out, const char *id)
{
        if (!fcache_merge_id_is_valid(id))
                return -EINVAL;
        if (git_oid_fromstr(out, id) < 0)
                return -EINVAL;
        return 0;
}

int fcache_merge_blob_id(char out[FCACHE_MERGE_ID_SIZE], const void *data, size_t size)
{
        git_oid oid;
        int e;

        if (!out || (!data && size))
                return -EINVAL;
        e = fcache_merge_git_ref();
        if (e < 0)
                return e;
        e = git_odb_hash(&oid, size ? data : "", size, GIT_OBJECT_BLOB);
        if (e < 0)
                return fcache_merge_git_errno(e);
        git_oid_tostr(out, FCACHE_MERGE_ID_SIZE, &oid);
        return 0;
}

int fcache_merge_blob_id_fd(char out[FCACHE_MERGE_ID_SIZE], int fd)
{
        char path[64];
        git_oid oid;
        int e;

        if (!out || fd < 0)
                return -EINVAL;
        e = fcache_merge_git_ref();
        if (e < 0)
                return e;
        /* The descriptor's own file, even when its name went. */
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        e = git_odb_hashfile(&oid, path, GIT_OBJECT_BLOB);
        if (e < 0)
                return fcache_merge_git_errno(e);
        git_oid_tostr(out, FCACHE_MERGE_ID_SIZE, &oid);
        return 0;
}

static int odb_open(git_odb **out, const char *path, unsigned flags)
{
        git_odb_backend *loose = NULL;
        git_odb *odb = NULL;
        int e;

        e = git_odb_new(&odb);
        if (e < 0)
                return fcache_merge_git_errno(e);
        e = git_odb_backend_loose(&loose, path, -1, !(flags & FCACHE_MERGE_STORE_NO_FSYNC), STORE_DIR_MODE,
                                  STORE_FILE_MODE);
        if (e < 0) {
                e = fcache_merge_git_errno(e);
                git_odb_free(odb);
                return e;
        }
        e = git_odb_add_backend(odb, loose, 1);
        if (e < 0) {
                e = fcache_merge_git_errno(e);
                loose->free(loose);
                git_odb_free(odb);
                return e;
        }
        *out = odb;
        return 0;
}

int fcache_merge_store_open(fcache_merge_store **out, const char *path, const fcache_merge_store_options *opts)
{
        fcache_merge_store *s;
        struct stat st;
        unsigned flags = 0;
        int e;

        if (!out || !path || !*path)
                return -EINVAL;
        if (opts) {
                if (opts->version != FCACHE_MERGE_STORE_OPTIONS_VERSION)
                        return -EINVAL;
                flags = opts->flags;
        }

        if (mkdir(path, STORE_DIR_MODE) < 0 && errno != EEXIST)
                return -errno;
        if (stat(path, &st) < 0)
                return -errno;
        if (!S_ISDIR(st.st_mode))
                return -ENOTDIR;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->flags = flags;
        s->dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (s->dir_fd < 0) {
                e = -errno;
                free(s);
                return e;
        }
        s->path = strdup(path);
        e = s->path ? fcache_merge_git_ref() : -ENOMEM;
        if (e >= 0)
                e = odb_open(&s->odb, path, flags);
        if (e < 0) {
                close(s->dir_fd);
                free(s->path);
                free(s);
                return e;
        }
        *out = s;
        return 0;
}

/* Reopen the odb if GC could not, so that its cache never answers for deleted objects. */
static int store_refresh(fcache_merge_store *s)
{
        git_odb *fresh = NULL;
        int e;

        if (!s->stale)
                return 0;
        e = odb_open(&fresh, s->path, s->flags);
        if (e < 0)
                return e;
        git_odb_free(s->odb);
        s->odb = fresh;
        s->stale = false;
        return 0;
}

/*
 * libgit2 fsyncs the object and its fan-out directory, but not the store
 * directory that a new fan-out directory was created in; without that a
 * crash could lose the entry and the object with it.
 */
static int store_sync(fcache_merge_store *s)
{
        if (s->flags & FCACHE_MERGE_STORE_NO_FSYNC)
                return 0;
        if (fsync(s->dir_fd) < 0)
                return -errno;
        return 0;
}

void fcache_merge_store_free(fcache_merge_store *store)
{
        if (!store)
                return;
        git_odb_free(store->odb);
        close(store->dir_fd);
        free(store->path);
        free(store);
}

int fcache_merge_store_put(char out[FCACHE_MERGE_ID_SIZE], fcache_merge_store *store, const void *data, size_t size)
{
        git_oid oid;
        int e;

        if (!out || !store || (!data && size))
                return -EINVAL;
        e = store_refresh(store);
        if (e < 0)
                return e;
        e = git_odb_write(&oid, store->odb, size ? data : "", size, GIT_OBJECT_BLOB);
        if (e < 0)
                return fcache_merge_git_errno(e);
        e = store_sync(store);
        if (e < 0)
                return e;
        git_oid_tostr(out, FCACHE_MERGE_ID_SIZE, &oid);
        return 0;
}

static void stream_freep(git_odb_stream **s)
{
        if (*s)
                git_odb_stream_free(*s); /* discards the temporary file unless finalized */
}

int fcache_merge_store_put_fd(char out[FCACHE_MERGE_ID_SIZE], fcache_merge_store *store, int fd)
{
        __attribute__((cleanup(stream_freep))) git_odb_stream *stream = NULL;
        _cleanup_free_ char *buf = NULL;
        struct stat st;
        git_oid oid;
        off_t done = 0;
        int e;

        if (!out || !store || fd < 0)
                return -EINVAL;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        e = store_refresh(store);
        if (e < 0)
                return e;
        buf = malloc(READ_CHUNK);
        if (!buf)
                return -ENOMEM;

        /* A loose object's header carries the size, so it is fixed up front. */
        e = git_odb_open_wstream(&stream, store->odb, (git_object_size_t) st.st_size, GIT_OBJECT_BLOB);
        if (e < 0)
                return fcache_merge_git_errno(e);

        for (;;) {
                ssize_t n = pread(fd, buf, READ_CHUNK, done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                /* Grown while we read: not the version the caller meant. */
                if (done + n > st.st_size)
                        return -EAGAIN;
                e = git_odb_stream_write(stream, buf, (size_t) n);
                if (e < 0)
                        return fcache_merge_git_errno(e);
                done += n;
        }
        /* Truncated while we read. */
        if (done != st.st_size)
                return -EAGAIN;
        e = git_odb_stream_finalize_write(&oid, stream);
        if (e < 0)
                return fcache_merge_git_errno(e);
        e = store_sync(store);
        if (e < 0)
                return e;
        git_oid_tostr(out, FCACHE_MERGE_ID_SIZE, &oid);
        return 0;
}

int fcache_merge_store_get(void **out_data, size_t *out_size, fcache_merge_store *store, const char *id)
{
        git_odb_object *obj = NULL;
        git_oid oid;
        size_t size;
        char *p;
        int e;

        if (!out_data || !out_size || !store)
                return -EINVAL;
        e = parse_id(&oid, id);
        if (e < 0)
                return e;
        e = store_refresh(store);
        if (e < 0)
                return e;

        /* libgit2 verifies the object's hash on read (strict hash verification). */
        e = git_odb_read(&obj, store->odb, &oid);
        if (e < 0)
                return fcache_merge_git_errno(e);
        if (git_odb_object_type(obj) != GIT_OBJECT_BLOB) {
                git_odb_object_free(obj);
                return -EIO;
        }
        size = git_odb_object_size(obj);
        p = malloc(size + 1);
        if (!p) {
                git_odb_object_free(obj);
                return -ENOMEM;
        }
        if (size)
                memcpy(p, git_odb_object_data(obj), size);
        p[size] = '\0';
        git_odb_object_free(obj);

        *out_data = p;
        *out_size = size;
        return 0;
}

int fcache_merge_store_contains(fcache_merge_store *store, const char *id)
{
        git_oid oid;
        int e;

        if (!store)
                return -EINVAL;
        e = parse_id(&oid, id);
        if (e < 0)
                return e;
        e = store_refresh(store);
        if (e < 0)
                return e;
        return git_odb_exists(store->odb, &oid) ? 1 : 0;
}

typedef struct {
        git_oid *ids;
        size_t n, allocated;
        const git_oid *keep;
        size_t n_keep;
        bool out_of_memory;
} gc_state;

static int oid_cmp(const void *a, const void *b)
{
        return git_oid_cmp(a, b);
}

static int gc_collect(const git_oid *id, void *userdata)
{
        gc_state *st = userdata;

        if (st->n_keep && bsearch(id, st->keep, st->n_keep, sizeof(git_oid), oid_cmp))
                return 0;
        if (st->n == st->allocated) {
                size_t n = st->allocated ? st->allocated * 2 : 64;
                git_oid *ids = reallocarray(st->ids, n, sizeof(git_oid));

                if (!ids) {
                        st->out_of_memory = true;
                        return GIT_EUSER; /* stops the iteration */
                }
                st->ids = ids;
                st->allocated = n;
        }
        git_oid_cpy(&st->ids[st->n++], id);
        return 0;
}

static bool is_hex(const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (!strchr("0123456789abcdef", s[i]) || s[i] == '\0')
                        return false;
        return s[n] == '\0';
}

static bool is_leftover(const char *name)
{
        size_t len = strlen(name);

        /* libgit2 writes objects through "<name>.lock" and streams through "tmp_object*". */
        return strncmp(name, "tmp_object", 10) == 0 || (len > 5 && strcmp(name + len - 5, ".lock") == 0);
}

/*
 * Remove leftovers of writes interrupted by a crash and fan-out directories
 * left empty. Calls on a store are serialized, so no write is in progress.
 */
static int sweep(const char *path)
{
        DIR *top;
        struct dirent *de;
        int r = 0;

        top = opendir(path);
        if (!top)
                return -errno;
        while ((errno = 0, de = readdir(top))) {
                int sub_fd;
                DIR *sub;
                struct dirent *se;

                if (is_leftover(de->d_name)) {
                        if (unlinkat(dirfd(top), de->d_name, 0) < 0 && errno != ENOENT && r == 0)
                                r = -errno;
                        continue;
                }
                if (!is_hex(de->d_name, 2))
                        continue;
                sub_fd = openat(dirfd(top), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub_fd < 0)
                        continue;
                sub = fdopendir(sub_fd);
                if (!sub) {
                        close(sub_fd);
                        continue;
                }
                while ((se = readdir(sub)))
                        if (is_leftover(se->d_name) && unlinkat(sub_fd, se->d_name, 0) < 0 && errno != ENOENT &&
                            r == 0)
                                r = -errno;
                closedir(sub);
                /* Fails with ENOTEMPTY while objects remain, which is fine. */
                (void) unlinkat(dirfd(top), de->d_name, AT_REMOVEDIR);
        }
        closedir(top);
        return r;
}

int fcache_merge_store_gc(size_t *out_removed, fcache_merge_store *store, const char *const *keep, size_t n_keep)
{
        _cleanup_free_ git_oid *keep_ids = NULL;
        gc_state st = { 0 };
        size_t removed = 0;
        int e, first_error = 0;

        if (!store || (!keep && n_keep))
                return -EINVAL;
        e = store_refresh(store);
        if (e < 0)
                return e;

        /* Parse everything before deleting anything: a bad keep list must not cost data. */
        if (n_keep) {
                keep_ids = calloc(n_keep, sizeof(git_oid));
                if (!keep_ids)
                        return -ENOMEM;
                for (size_t i = 0; i < n_keep; i++) {
                        e = parse_id(&keep_ids[i], keep[i]);
                        if (e < 0)
                                return e;
                }
                qsort(keep_ids, n_keep, sizeof(git_oid), oid_cmp);
        }
        st.keep = keep_ids;
        st.n_keep = n_keep;

        e = git_odb_foreach(store->odb, gc_collect, &st);
        if (e < 0) {
                free(st.ids);
                return st.out_of_memory ? -ENOMEM : fcache_merge_git_errno(e);
        }

        for (size_t i = 0; i < st.n; i++) {
                char hex[FCACHE_MERGE_ID_SIZE];
                _cleanup_free_ char *file = NULL;

                git_oid_tostr(hex, sizeof(hex), &st.ids[i]);
                if (asprintf(&file, "%s/%.2s/%s", store->path, hex, hex + 2) < 0) {
                        file = NULL;
                        if (first_error == 0)
                                first_error = -ENOMEM;
                        continue;
                }
                if (unlink(file) < 0) {
                        if (errno != ENOENT && first_error == 0)
                                first_error = -errno;
                        continue;
                }
                removed++;
        }
        free(st.ids);

        e = sweep(store->path);
        if (e < 0 && first_error == 0)
                first_error = e;

        /* Drop libgit2's cache of what was just deleted. */
        if (removed) {
                store->stale = true;
                e = store_refresh(store);
                if (e < 0 && first_error == 0)
                        first_error = e;
        }

        if (first_error < 0)
                return first_error;
        if (out_removed)
                *out_removed = removed;
        return 0;
}
