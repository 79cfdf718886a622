/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-mirror.c: the local mirror of the pinned subtrees (CacheDir/mirror),
 * what a volume serves while it is offline.
 *
 * The mirror is a real directory tree: every pinned subtree, and the
 * directories on the way to it, with the backing's names, types, modes,
 * owners, times and content.  So the view's operations, which reach objects
 * only by descriptors and *at() calls, work on it unchanged while offline.
 *
 * Each mirrored entry carries the xattr trusted.fcache.base, the backing
 * identity it was copied from (struct mirror_base: inode, size, mtime,
 * ctime, ...) and, for a directory inside a pin, MIRROR_COMPLETE: every
 * entry of it is mirrored, so a name it lacks does not exist.  An entry
 * created offline carries trusted.fcache.lid instead, its id in the offline
 * log.  Content is copied through the store (store_obj_read), so a pinned
 * file is fetched from the server once; it is then kept twice on local disk.
 *
 * Files are replaced whole (a temporary linked and renamed into place), so
 * a crash leaves the old copy or the new one, never half of one.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "view.h"

#define XATTR_BASE "trusted.fcache.base"
#define XATTR_LID "trusted.fcache.lid"
#define MAX_DEPTH 2048
#define COPY_CHUNK (1024 * 1024)

/* The path to reach dfd/name (or dfd itself: the magic link is then to be
 * followed, as the l*xattr calls would act on the link). */
static bool entry_path(char *buf, size_t len, int dfd, const char *name)
{
        if (name && *name) {
                snprintf(buf, len, "/proc/self/fd/%d/%s", dfd, name);
                return false;
        }
        snprintf(buf, len, "/proc/self/fd/%d", dfd);
        return true;
}

static ssize_t get_x(int dfd, const char *name, const char *key, void *val, size_t size)
{
        char p[PATH_MAX];
        bool follow = entry_path(p, sizeof(p), dfd, name);

        return follow ? getxattr(p, key, val, size) : lgetxattr(p, key, val, size);
}

static int set_x(int dfd, const char *name, const char *key, const void *val, size_t size)
{
        char p[PATH_MAX];
        bool follow = entry_path(p, sizeof(p), dfd, name);
        int r = follow ? setxattr(p, key, val, size, 0) : lsetxattr(p, key, val, size, 0);

        return r < 0 ? -errno : 0;
}

int mirror_get_base(int dfd, const char *name, struct mirror_base *b)
{
        ssize_t n = get_x(dfd, name, XATTR_BASE, b, sizeof(*b));

        if (n < 0)
                return -errno;
        return n == sizeof(*b) ? 0 : -EINVAL;
}

static int set_base(int dfd, const char *name, const struct mirror_base *b)
{
        return set_x(dfd, name, XATTR_BASE, b, sizeof(*b));
}

int mirror_take_identity(int dfd, const char *name, const struct mirror_base *b)
{
        char p[PATH_MAX];
        int r = set_base(dfd, name, b);

        entry_path(p, sizeof(p), dfd, name);
        if (r == 0 && lremovexattr(p, XATTR_LID) < 0 && errno != ENODATA)
                r = -errno;
        return r;
}

int mirror_get_lid(int dfd, const char *name, uint64_t *lid)
{
        ssize_t n = get_x(dfd, name, XATTR_LID, lid, sizeof(*lid));

        if (n < 0)
                return -errno;
        return n == sizeof(*lid) ? 0 : -EINVAL;
}

int mirror_set_lid(int dfd, const char *name, uint64_t lid)
{
        return set_x(dfd, name, XATTR_LID, &lid, sizeof(lid));
}

bool mirror_xattr_hidden(const char *name)
{
        return !strncmp(name, "trusted.fcache.", 15);
}

static void base_from_stat(struct mirror_base *b, const struct stat *st, uint32_t flags)
{
        memset(b, 0, sizeof(*b));
        oplog_version_from_stat(&b->ver, st);
        b->flags = flags;
}

static bool same_identity(const struct mirror_base *a, const struct mirror_base *b)
{
        return a->ver.ino == b->ver.ino && a->ver.size == b->ver.size &&
               a->ver.mtime_ns == b->ver.mtime_ns && a->ver.ctime_ns == b->ver.ctime_ns &&
               a->ver.mode == b->ver.mode;
}

/*
 * The same content, though a link, unlink or rename elsewhere changed the
 * object's ctime (and nlink): size and mtime as a write leaves them.
 */
static bool same_content(const struct mirror_base *a, const struct mirror_base *b)
{
        return a->ver.ino == b->ver.ino && a->ver.size == b->ver.size &&
               a->ver.mtime_ns == b->ver.mtime_ns && a->ver.mode == b->ver.mode;
}

/* rm -rf of dfd/name. */
static int remove_tree(int dfd, const char *name, int depth)
{
        struct stat st;
        DIR *d;
        struct dirent *de;
        int cfd;

        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dfd, name, 0) < 0 ? -errno : 0;
        if (depth > MAX_DEPTH)
                return -ELOOP;
        cfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cfd < 0)
                return -errno;
        d = fdopendir(cfd);
        if (!d) {
                close(cfd);
                return -errno;
        }
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        remove_tree(dirfd(d), de->d_name, depth + 1);
        closedir(d);
        return unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

static void set_owner_mode_times(int mdfd, const char *name, const struct stat *bst)
{
        struct timespec tv[2] = { bst->st_atim, bst->st_mtim };

        /* A view that does not run as root cannot give files away: EPERM is expected. */
        if (fchownat(mdfd, name, bst->st_uid, bst->st_gid, AT_SYMLINK_NOFOLLOW) < 0 && errno != EPERM)
                log_warn("Failed to set the owner of mirrored '%s': %m, ignoring", name);
        if (!S_ISLNK(bst->st_mode) && fchmodat(mdfd, name, bst->st_mode & 07777, 0) < 0)
                log_warn("Failed to set the mode of mirrored '%s': %m, ignoring", name);
        utimensat(mdfd, name, tv, AT_SYMLINK_NOFOLLOW);
}

static void tmp_name(char *buf, size_t len)
{
        static unsigned long counter;

        snprintf(buf, len, ".fcache-mirror.%d.%lu", (int)getpid(),
                 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
}

/*
 * Hard links: a server file with several names is one mirror object, so that
 * offline it keeps its nlink and a change through one name shows through the
 * others.  CacheDir/mirror.links/INO (outside what is served) is one more
 * link to the mirror object of server inode INO, by which the next name
 * mirrored finds it; offline stat does not count it.
 */
static void links_key(char *buf, size_t len, uint64_t ino)
{
        snprintf(buf, len, "%" PRIu64, ino);
}

/* mdfd/name becomes a link to the mirror object of server file @bst if there is
 * one of that version: 0 when done, -ENOENT when there is none. */
static int link_partner(struct view *v, int mdfd, const char *name, const struct stat *bst)
{
        struct mirror_base have, want;
        struct stat lst, mst;
        char key[32], tmp[64];
        int r;

        if (!S_ISREG(bst->st_mode) || bst->st_nlink < 2 || v->mirror_links_fd < 0)
                return -ENOENT;
        links_key(key, sizeof(key), bst->st_ino);
        base_from_stat(&want, bst, 0);
        if (fstatat(v->mirror_links_fd, key, &lst, AT_SYMLINK_NOFOLLOW) < 0 ||
            mirror_get_base(v->mirror_links_fd, key, &have) < 0 || !same_content(&have, &want))
                return -ENOENT;
        if (fstatat(mdfd, name, &mst, AT_SYMLINK_NOFOLLOW) == 0 && mst.st_ino == lst.st_ino)
                return set_base(mdfd, name, &want);     /* already that object */
        tmp_name(tmp, sizeof(tmp));
        if (linkat(v->mirror_links_fd, key, mdfd, tmp, 0) < 0)
                return -errno;
        r = renameat(mdfd, tmp, mdfd, name) < 0 ? -errno : set_base(mdfd, name, &want);
        if (r < 0)
                unlinkat(mdfd, tmp, 0);
        return r;
}

/* After server file @bst was mirrored as mdfd/name: the index of its links. */
static void index_links(struct view *v, int mdfd, const char *name, const struct stat *bst)
{
        char key[32];

        if (!S_ISREG(bst->st_mode) || bst->st_nlink < 2 || v->mirror_links_fd < 0)
                return;
        links_key(key, sizeof(key), bst->st_ino);
        unlinkat(v->mirror_links_fd, key, 0);
        if (linkat(mdfd, name, v->mirror_links_fd, key, 0) < 0)
                log_warn("Failed to index the links of '%s' in the mirror: %m", name);
}

bool mirror_links_counted(struct view *v, const struct stat *st, uint64_t sino)
{
        struct stat lst;
        char key[32];

        if (!S_ISREG(st->st_mode) || st->st_nlink < 2 || v->mirror_links_fd < 0)
                return false;
        links_key(key, sizeof(key), sino);
        return fstatat(v->mirror_links_fd, key, &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
               lst.st_ino == st->st_ino && lst.st_dev == st->st_dev;
}

/* Index entries whose object no name in the mirror holds any more. */
static void prune_links(struct view *v)
{
        struct dirent *de;
        int fd = openat(v->mirror_links_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        while ((de = readdir(d))) {
                struct stat st;

                if (de->d_name[0] != '.' &&
                    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    st.st_nlink <= 1)
                        unlinkat(dirfd(d), de->d_name, 0);
        }
        closedir(d);
}

/* Puts a new entry in place of mdfd/name: made as tmp, then renamed. */
static int install(struct view *v, int mdfd, const char *tmp, const char *name,
                   const struct stat *bst, uint32_t flags)
{
        struct mirror_base b;
        int r;

        /* Another name of this file was mirrored meanwhile (same batch). */
        if (link_partner(v, mdfd, name, bst) == 0) {
                unlinkat(mdfd, tmp, 0);
                return 0;
        }
        base_from_stat(&b, bst, flags);
        set_owner_mode_times(mdfd, tmp, bst);
        r = set_base(mdfd, tmp, &b);
        if (r == 0 && renameat(mdfd, tmp, mdfd, name) < 0)
                r = -errno;
        if (r < 0)
                unlinkat(mdfd, tmp, 0);
        else
                index_links(v, mdfd, name, bst);
        return r;
}

/*
 * Files copied for one directory are made durable together: their
 * temporaries are written, then one syncfs(), then each is put in place.  A
 * copy is never in place (with its identity) before its bytes are on disk.
 */
struct batch {
        GArray *items;          /* struct batch_item */
};
struct batch_item {
        char tmp[64];
        char *name;
        struct stat st;
};

static void batch_item_clear(void *p)
{
        g_free(((struct batch_item *)p)->name);
}

static int batch_install(struct view *v, int mdfd, struct batch *b)
{
        int r = 0;

        if (!b->items->len)
                return 0;
        if (syncfs(mdfd) < 0)
                r = -errno;
        for (guint i = 0; i < b->items->len; i++) {
                struct batch_item *it = &g_array_index(b->items, struct batch_item, i);
                int e = r < 0 ? r : install(v, mdfd, it->tmp, it->name, &it->st, 0);

                if (r < 0)
                        unlinkat(mdfd, it->tmp, 0);
                if (e < 0)
                        log_warn("Failed to mirror '%s' for offline use: %s", it->name,
                                 strerror(-e));
        }
        g_array_set_size(b->items, 0);
        return r;
}

/* Copies the backing file bdfd/name into the mirror, through the store;
 * with @batch, it is put in place by batch_install(). */
static int copy_file(struct view *v, int bdfd, int mdfd, const char *name,
                     const struct stat *bst, struct batch *batch)
{
        char tmp[64], *buf;
        struct sobj *o = NULL;
        bool unchanged;
        int bfd, tfd, r = 0;
        off_t off = 0;

        /* O_NOATIME: the copy is the daemon's read, not an application's. */
        bfd = openat(bdfd, name, O_RDONLY | O_NOFOLLOW | O_NOATIME | O_CLOEXEC);
        if (bfd < 0)
                return -errno;
        tmp_name(tmp, sizeof(tmp));
        tfd = openat(mdfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        buf = malloc(COPY_CHUNK);
        if (tfd < 0 || !buf) {
                r = tfd < 0 ? -errno : -ENOMEM;
                goto out;
        }
        if (store_obj_get(v->store, bst, true, 0, &unchanged, &o) < 0)
                o = NULL;
        while (off < bst->st_size) {
                ssize_t n = o ? store_obj_read(v->store, o, bfd, buf, COPY_CHUNK, off)
                              : pread(bfd, buf, COPY_CHUNK, off);

                if (n < 0) {
                        r = o ? (int)n : -errno;
                        break;
                }
                if (n == 0)
                        break;
                if (write(tfd, buf, (size_t)n) != n) {
                        r = -EIO;
                        break;
                }
                off += n;
        }
        if (r == 0 && !batch && fsync(tfd) < 0)
                r = -errno;
        if (r == 0 && batch) {
                struct batch_item it = { .name = g_strdup(name), .st = *bst };

                g_strlcpy(it.tmp, tmp, sizeof(it.tmp));
                g_array_append_val(batch->items, it);
        } else if (r == 0) {
                close(tfd);
                tfd = -1;
                r = install(v, mdfd, tmp, name, bst, 0);
        } else {
                unlinkat(mdfd, tmp, 0);
        }
out:
        if (o)
                store_obj_put(v->store, o);
        if (tfd >= 0)
                close(tfd);
        free(buf);
        close(bfd);
        return r;
}

static int copy_special(struct view *v, int bdfd, int mdfd, const char *name,
                        const struct stat *bst)
{
        char tmp[64], target[PATH_MAX + 1];
        ssize_t n;

        tmp_name(tmp, sizeof(tmp));
        if (S_ISLNK(bst->st_mode)) {
                n = readlinkat(bdfd, name, target, sizeof(target) - 1);
                if (n < 0)
                        return -errno;
                target[n] = 0;
                if (symlinkat(target, mdfd, tmp) < 0)
                        return -errno;
        } else if (mknodat(mdfd, tmp, bst->st_mode, bst->st_rdev) < 0) {
                return -errno;
        }
        return install(v, mdfd, tmp, name, bst, 0);
}

static int sync_dir_children(struct view *v, int bdfd, int mdfd, int depth);

/*
 * New content of a file with several names whose mirror object they share:
 * written in place, since a copy renamed over one name would leave the others
 * on the old object.  Its identity goes first and comes back only once the
 * bytes are durable, so a crash leaves an object without one (copied again),
 * never half a file under a valid identity.
 */
static int rewrite_shared(struct view *v, int bdfd, int mdfd, const char *name,
                          const struct stat *bst)
{
        struct mirror_base want;
        char p[PATH_MAX], *buf = malloc(COPY_CHUNK);
        int bfd = -1, mfd = -1, r = 0;
        off_t off = 0;

        if (!buf)
                return -ENOMEM;
        entry_path(p, sizeof(p), mdfd, name);
        if (lremovexattr(p, XATTR_BASE) < 0 && errno != ENODATA)
                r = -errno;
        if (r == 0 && (bfd = openat(bdfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
                r = -errno;
        if (r == 0 && (mfd = openat(mdfd, name, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC)) < 0)
                r = -errno;
        while (r == 0 && off < bst->st_size) {
                ssize_t n = pread(bfd, buf, COPY_CHUNK, off);

                if (n < 0)
                        r = -errno;
                if (n <= 0)
                        break;
                if (pwrite(mfd, buf, (size_t)n, off) != n)
                        r = -EIO;
                off += n;
        }
        if (r == 0 && fsync(mfd) < 0)
                r = -errno;
        if (r == 0) {
                set_owner_mode_times(mdfd, name, bst);
                base_from_stat(&want, bst, 0);
                r = set_base(mdfd, name, &want);
        }
        if (r == 0)
                index_links(v, mdfd, name, bst);
        if (mfd >= 0)
                close(mfd);
        if (bfd >= 0)
                close(bfd);
        free(buf);
        return r;
}

/* Whether regular files @a and @b (descriptors) hold the same bytes. */
static bool same_bytes(int a, int b)
{
        char x[65536], y[65536];

        for (off_t off = 0;;) {
                ssize_t n = pread(a, x, sizeof(x), off), m;

                if (n < 0)
                        return false;
                m = pread(b, y, (size_t)n, off);
                if (m != n || memcmp(x, y, (size_t)n))
                        return false;
                if (n == 0)
                        return true;
                off += n;
        }
}

/*
 * A mirror file that already holds the bytes of the server file @bst (one
 * created or edited offline, now replayed) takes the server's identity
 * instead of being copied again: 0 when done, -ENOENT when it does not.
 */
static int adopt_same(int bdfd, int mdfd, const char *name, const struct stat *bst,
                      const struct stat *mst, const struct mirror_base *want)
{
        int bfd, mfd, r = -ENOENT;

        if (!S_ISREG(bst->st_mode) || !S_ISREG(mst->st_mode) || bst->st_nlink > 1 ||
            mst->st_nlink > 1 || bst->st_size != mst->st_size)
                return -ENOENT;
        bfd = openat(bdfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        mfd = openat(mdfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (bfd >= 0 && mfd >= 0 && same_bytes(bfd, mfd)) {
                set_owner_mode_times(mdfd, name, bst);
                r = mirror_take_identity(mdfd, name, want);
        }
        if (bfd >= 0)
                close(bfd);
        if (mfd >= 0)
                close(mfd);
        return r;
}

/*
 * Makes mdfd/name what bdfd/name is.  A directory's children are mirrored
 * too when recursive (it is then marked complete); else only the directory.
 */
static int sync_entry(struct view *v, int bdfd, int mdfd, const char *name, bool recursive,
                      int depth, struct batch *batch)
{
        struct mirror_base have, want;
        struct stat bst, mst;
        bool exists, based;
        int r;

        if (fstatat(bdfd, name, &bst, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno == ENOENT)
                        return remove_tree(mdfd, name, 0);
                return -errno;
        }
        exists = fstatat(mdfd, name, &mst, AT_SYMLINK_NOFOLLOW) == 0;
        based = exists && mirror_get_base(mdfd, name, &have) == 0;
        if (exists && (mst.st_mode ^ bst.st_mode) & S_IFMT) {
                r = remove_tree(mdfd, name, 0);
                if (r < 0)
                        return r;
                exists = based = false;
        }
        base_from_stat(&want, &bst, 0);
        if (S_ISDIR(bst.st_mode)) {
                uint32_t flags = (based ? have.flags : 0) | (recursive ? MIRROR_COMPLETE : 0);

                if (!exists && mkdirat(mdfd, name, 0700) < 0)
                        return -errno;
                if (recursive) {
                        int cb, cm;

                        if (depth > MAX_DEPTH)
                                return -ELOOP;
                        cb = openat(bdfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (cb < 0)
                                return -errno;
                        cm = openat(mdfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (cm < 0) {
                                r = -errno;
                                close(cb);
                                return r;
                        }
                        r = sync_dir_children(v, cb, cm, depth + 1);
                        close(cb);
                        close(cm);
                        if (r < 0)
                                return r;
                }
                set_owner_mode_times(mdfd, name, &bst);
                base_from_stat(&want, &bst, flags);
                return set_base(mdfd, name, &want);
        }
        r = link_partner(v, mdfd, name, &bst);
        if (r != -ENOENT)
                return r;
        /* A link added or removed elsewhere changed only its count (and ctime):
         * the same object keeps its content, and is indexed for the new name. */
        if (based && S_ISREG(bst.st_mode) && have.ver.nlink != want.ver.nlink &&
            same_content(&have, &want)) {
                set_owner_mode_times(mdfd, name, &bst);
                r = set_base(mdfd, name, &want);
                if (r == 0)
                        index_links(v, mdfd, name, &bst);
                return r;
        }
        if (based && same_identity(&have, &want)) {
                if (have.ver.uid != want.ver.uid || have.ver.gid != want.ver.gid ||
                    have.ver.nlink != want.ver.nlink) {
                        set_owner_mode_times(mdfd, name, &bst);
                        return set_base(mdfd, name, &want);
                }
                return 0;
        }
        if (S_ISREG(bst.st_mode) && bst.st_nlink > 1 && based && mst.st_nlink > 1 &&
            have.ver.ino == want.ver.ino)
                return rewrite_shared(v, bdfd, mdfd, name, &bst);
        if (exists && adopt_same(bdfd, mdfd, name, &bst, &mst, &want) == 0)
                return 0;
        if (S_ISREG(bst.st_mode))
                return copy_file(v, bdfd, mdfd, name, &bst, batch);
        return copy_special(v, bdfd, mdfd, name, &bst);
}

static bool is_tmp(const char *name)
{
        return !strncmp(name, ".fcache-mirror.", 15);
}

static int sync_dir_children(struct view *v, int bdfd, int mdfd, int depth)
{
        struct batch batch = { g_array_new(FALSE, TRUE, sizeof(struct batch_item)) };
        struct dirent *de;
        struct stat st;
        int r = 0, dup_fd;
        DIR *d;

        g_array_set_clear_func(batch.items, batch_item_clear);
        dup_fd = openat(bdfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dup_fd < 0 || !(d = fdopendir(dup_fd))) {
                r = -errno;
                if (dup_fd >= 0)
                        close(dup_fd);
                g_array_free(batch.items, TRUE);
                return r;
        }
        while ((de = readdir(d))) {
                int e;

                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                e = sync_entry(v, bdfd, mdfd, de->d_name, true, depth, &batch);
                if (e < 0) {
                        log_warn("Failed to mirror '%s' for offline use: %s", de->d_name,
                                 strerror(-e));
                        r = e;
                }
        }
        closedir(d);
        {
                int e = batch_install(v, mdfd, &batch);

                if (e < 0)
                        r = e;
        }
        g_array_free(batch.items, TRUE);
        /* Entries the backing no longer has (and leftover temporaries). */
        dup_fd = openat(mdfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dup_fd < 0)
                return -errno;
        d = fdopendir(dup_fd);
        if (!d) {
                close(dup_fd);
                return -errno;
        }
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (is_tmp(de->d_name) ||
                    (fstatat(bdfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT))
                        remove_tree(dirfd(d), de->d_name, 0);
        }
        closedir(d);
        return r;
}

/* Splits a volume-relative path into components, skipping "" and ".". */
static gchar **components(const char *rel)
{
        gchar **parts = g_strsplit(rel ? rel : "", "/", -1);
        unsigned n = 0;

        for (unsigned i = 0; parts[i]; i++) {
                if (!*parts[i] || !strcmp(parts[i], ".")) {
                        g_free(parts[i]);
                        continue;
                }
                parts[n++] = parts[i];
        }
        parts[n] = NULL;
        return parts;
}

/* The caller holds mode_lock (shared or exclusive) and the view is online. */
static int sync_path(struct view *v, const char *rel, bool recursive)
{
        gchar **parts = components(rel);
        int bdfd, mdfd, r = 0;

        if (v->mirror_fd < 0) {
                g_strfreev(parts);
                return -ENOTDIR;
        }
        bdfd = openat(v->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        mdfd = openat(v->mirror_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (bdfd < 0 || mdfd < 0) {
                r = -errno;
                goto out;
        }
        if (!parts[0]) {
                struct mirror_base b;
                struct stat st;

                r = sync_dir_children(v, bdfd, mdfd, 0);
                if (fstat(bdfd, &st) == 0) {
                        base_from_stat(&b, &st, MIRROR_COMPLETE);
                        set_owner_mode_times(mdfd, ".", &st);
                        set_base(mdfd, "", &b);
                }
                goto out;
        }
        for (unsigned i = 0; parts[i] && r == 0; i++) {
                bool last = !parts[i + 1];
                int nb, nm;

                r = sync_entry(v, bdfd, mdfd, parts[i], last && recursive, 0, NULL);
                if (r < 0 || last)
                        break;
                nb = openat(bdfd, parts[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                nm = openat(mdfd, parts[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (nb < 0 || nm < 0) {
                        r = -errno;
                        if (nb >= 0)
                                close(nb);
                        if (nm >= 0)
                                close(nm);
                        break;
                }
                close(bdfd);
                close(mdfd);
                bdfd = nb;
                mdfd = nm;
        }
out:
        if (bdfd >= 0)
                close(bdfd);
        if (mdfd >= 0)
                close(mdfd);
        g_strfreev(parts);
        return r;
}

int mirror_sync_path(struct view *v, const char *rel, bool recursive)
{
        int r = -EHOSTDOWN;

        /* Never while offline: the mirror then holds changes the server lacks. */
        view_change_begin(v);
        if (!view_offline(v))
                r = sync_path(v, rel, recursive);
        view_change_end(v);
        return r;
}

static int resync_pin(void *ud, const char *path, int prio)
{
        int r = sync_path(ud, path, true);

        if (r < 0)
                log_warn("Failed to mirror pinned '%s' for offline use: %s", path, strerror(-r));
        return 0;
}

int mirror_sync_all(struct view *v)
{
        int r = store_pin_foreach(v->store, resync_pin, v);

        prune_links(v);
        return r;
}

int mirror_unpin_path(struct view *v, const char *rel)
{
        gchar **parts = components(rel);
        int r;

        /* The subtree goes; what other pins still need of it comes back. */
        if (!parts[0]) {
                char *dir = g_build_filename(v->cfg->cache_dir, "mirror", NULL);
                char *old = g_strconcat(dir, ".old", NULL);

                r = rename(dir, old) < 0 ? -errno : 0;
                if (r == 0 && mkdir(dir, 0755) < 0)
                        r = -errno;
                if (r == 0) {
                        int nfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);

                        if (nfd >= 0) {
                                dup2(nfd, v->mirror_fd);
                                close(nfd);
                        }
                        remove_tree(AT_FDCWD, old, 0);
                }
                g_free(dir);
                g_free(old);
        } else {
                r = remove_tree(v->mirror_fd, rel, 0);
        }
        g_strfreev(parts);
        if (r < 0 && r != -ENOENT)
                return r;
        view_change_begin(v);
        r = view_offline(v) ? -EHOSTDOWN : mirror_sync_all(v);
        view_change_end(v);
        return r;
}

int mirror_open(struct view *v)
{
        char *dir = g_build_filename(v->cfg->cache_dir, "mirror", NULL);
        struct stat st;

        if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
                int e = -errno;

                log_error("Failed to create the offline mirror %s: %m", dir);
                g_free(dir);
                return e;
        }
        v->mirror_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        g_free(dir);
        if (v->mirror_fd < 0 || fstat(v->mirror_fd, &st) < 0)
                return -errno;
        v->mirror_dev = st.st_dev;
        dir = g_build_filename(v->cfg->cache_dir, "mirror.links", NULL);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                log_warn("Failed to create %s (hard links are mirrored as copies): %m", dir);
        v->mirror_links_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        g_free(dir);
        return 0;
}

char *view_rel_path(int root_fd, int dfd, const char *name)
{
        char p[64], root[PATH_MAX], buf[PATH_MAX];
        ssize_t n, rl;

        snprintf(p, sizeof(p), "/proc/self/fd/%d", root_fd);
        rl = readlink(p, root, sizeof(root) - 1);
        snprintf(p, sizeof(p), "/proc/self/fd/%d", dfd);
        n = readlink(p, buf, sizeof(buf) - 1);
        if (rl < 0 || n < 0)
                return NULL;
        root[rl] = 0;
        buf[n] = 0;
        if (rl == 1)
                rl = 0; /* the root is "/" */
        if (strncmp(buf, root, (size_t)rl) || (buf[rl] && buf[rl] != '/'))
                return NULL;
        if (name && *name)
                return g_build_filename(buf[rl] ? buf + rl + 1 : ".", name, NULL);
        return g_strdup(buf[rl] ? buf + rl + 1 : ".");
}

void mirror_note_change(struct view *v, int dfd, const char *name)
{
        struct mirror_base b;
        char *rel = view_rel_path(v->root_fd, dfd, name), *dir;
        int r;

        if (!rel || !strcmp(rel, ".")) {
                g_free(rel);
                return;
        }
        dir = g_path_get_dirname(rel);
        /* Only what lies in a complete (pinned) directory is kept current. */
        r = mirror_get_base(v->mirror_fd, strcmp(dir, ".") ? dir : NULL, &b);
        if (r == 0 && (b.flags & MIRROR_COMPLETE)) {
                r = sync_path(v, rel, true);
                if (r < 0)
                        log_warn("Failed to bring the offline mirror of '%s' up to date: %s"
                                 " (the hoard walk retries)", rel, strerror(-r));
        }
        g_free(dir);
        g_free(rel);
}
