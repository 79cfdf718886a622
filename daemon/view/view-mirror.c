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
 * created offline carries its id in the offline log instead, as the value of
 * the same xattr (8 bytes; trusted.fcache.lid in mirrors written before), so
 * that taking the server's identity after the replay is one xattr write that
 * fits in the inode.
 *
 * A mirrored regular file is the container of its server file's content
 * (store.h): the store keeps no copy of it and serves online reads of it
 * from here while its identity matches the backing's (the store keeps its
 * path in the mirror).  Files are copied from the backing with
 * copy_file_range by a pool of FetchThreads workers, a directory's files as
 * one batch made durable by one syncfs, then each put in place (a temporary
 * renamed), so a crash leaves the old copy or the new one, never half of one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fault.h"
#include "view.h"

#define COPY_CHUNK (1024 * 1024)
#define BATCH_MAX 1024          /* files copied before one syncfs, at most */
#define BATCH_FDS 512           /* descriptors a batch holds, at most */

static void cache_complete(void *ud, uint64_t ino);
static void resync_step(void);
static bool replayed_same(const struct stat *bst, const struct stat *mst);
static bool resync_stopped(const struct mirror_fill *fill);

/*
 * A change's note (mirror_note_change()) run on a helper whose request gave
 * up on it (BackingTimeout; the volume went offline, and the change is made
 * again in the mirror, which then holds what the server lacks): nothing more
 * goes in place (temporary tmp in mdfd removed).  The entry whose copy is
 * under way may still land at the instant its request gives up.
 */
static bool note_given_up(int mdfd, const char *tmp)
{
        if (!backing_call_abandoned())
                return false;
        unlinkat(mdfd, tmp, 0);
        return true;
}
static int container_remove(void *ud, const struct store_identity *id);
static void drop_moved_cached(struct view *v, int dfd, const char *name, const char *rel);

static void base_from_stat(struct mirror_base *b, const struct stat *st, uint32_t flags)
{
        memset(b, 0, sizeof(*b));
        oplog_version_from_stat(&b->ver, st);
        b->flags = flags;
}

/* A copy marked stale holds what the server may lack: it matches no version. */
static bool same_identity(const struct mirror_base *a, const struct mirror_base *b)
{
        if ((a->flags | b->flags) & MIRROR_STALE)
                return false;
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
        if ((a->flags | b->flags) & MIRROR_STALE)
                return false;
        return a->ver.ino == b->ver.ino && a->ver.size == b->ver.size &&
               a->ver.mtime_ns == b->ver.mtime_ns && a->ver.mode == b->ver.mode;
}

/*
 * On a backing whose inode numbers are made up (names_identify: sshfs
 * numbers files as it meets them), the server file at a mirror file's name
 * with the version its base records but for the number is that object,
 * numbered anew (mounted again, or forgotten and met again).  A file of one
 * name only: the links index keys the others by number.
 */
static bool renumbered(bool names_identify, const struct mirror_base *have,
                       const struct mirror_base *want)
{
        struct mirror_base h = *have;

        if (!names_identify || have->ver.ino == want->ver.ino || have->ver.nlink > 1 ||
            want->ver.nlink > 1)
                return false;
        h.ver.ino = want->ver.ino;
        return same_identity(&h, want);
}

static bool numbers_made_up(struct view *v)
{
        return __atomic_load_n(&v->names_identify, __ATOMIC_ACQUIRE);
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
        if (depth > VIEW_MAX_DEPTH)
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

int view_remove_tree(int dfd, const char *name)
{
        return remove_tree(dfd, name, 0);
}

static bool held_by_kernel(int mdfd, const char *name);

static void set_owner_mode_times(int mdfd, const char *name, const struct stat *bst)
{
        struct timespec tv[2] = { bst->st_atim, bst->st_mtim };

        /* A view that does not run as root cannot give files away: EPERM is expected. */
        if (fchownat(mdfd, name, bst->st_uid, bst->st_gid, AT_SYMLINK_NOFOLLOW) < 0 && errno != EPERM)
                log_warn("Failed to set the owner of mirrored '%s': %m, ignoring", name);
        if (!S_ISLNK(bst->st_mode) && fchmodat(mdfd, name, bst->st_mode & 07777, 0) < 0)
                log_warn("Failed to set the mode of mirrored '%s': %m, ignoring", name);
        /* The times of a file the kernel writes are the writer's. */
        if (!S_ISREG(bst->st_mode) || !held_by_kernel(mdfd, name))
                utimensat(mdfd, name, tv, AT_SYMLINK_NOFOLLOW);
}

/*
 * set_owner_mode_times() for the mirror's @mst, calling only for what differs:
 * a file the replay just made from it (an untar) differs in nothing but its
 * atime, which is not worth a call per file.
 */
static void align_owner_mode_times(int mdfd, const char *name, const struct stat *bst,
                                   const struct stat *mst)
{
        if (mst->st_uid != bst->st_uid || mst->st_gid != bst->st_gid ||
            (mst->st_mode ^ bst->st_mode) & 07777 ||
            mst->st_mtim.tv_sec != bst->st_mtim.tv_sec ||
            mst->st_mtim.tv_nsec != bst->st_mtim.tv_nsec)
                set_owner_mode_times(mdfd, name, bst);
}

/*
 * A file the kernel holds (held_inode(), below) just given the owner and
 * mode of server file @bst: its base (of that server file) takes them too,
 * its size and times staying those of the version its bytes are of.  The
 * log registers the next change against the base (child_lid()): a chmod
 * must replay against the server's mode, not the last copy's.
 */
static void held_base_follows(int mdfd, const char *name, const struct stat *bst)
{
        struct mirror_base b;
        int r;

        if (mirror_get_base(mdfd, name, &b) < 0 || b.ver.ino != (uint64_t)bst->st_ino ||
            (b.ver.mode == bst->st_mode && b.ver.uid == bst->st_uid && b.ver.gid == bst->st_gid))
                return;
        b.ver.mode = bst->st_mode;
        b.ver.uid = bst->st_uid;
        b.ver.gid = bst->st_gid;
        r = mirror_set_base(mdfd, name, &b);
        if (r < 0)
                log_warn("Failed to set the base of held mirror file '%s': %s, ignoring", name,
                         strerror(-r));
}

/*
 * A mirror file the kernel passes an open file through keeps its inode,
 * bytes and times: a writer's bytes there are not on the server yet, its
 * mtime tells whether it wrote since its last copy, and a successor finds
 * the file by its name.  Its base, owner and mode follow the server's; its
 * content is taken once it is closed (op_release()).
 */
static bool held_inode(const struct stat *st)
{
        return S_ISREG(st->st_mode) && passthrough_holds_mirror_file(st->st_ino);
}

static bool held_by_kernel(int mdfd, const char *name)
{
        struct stat st;

        return passthrough_holds_mirror_files() &&
               fstatat(mdfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && held_inode(&st);
}

/* Hard links: view-mirror-marks.c (CacheDir/mirror.links). */
/*
 * mdfd/name becomes a link to the mirror object of server file @bst if there
 * is one of that version: 0 when done, -ENOENT when there is none.  Or one
 * the kernel holds (held_inode()), whatever version its base says: the
 * server's file is open then, so its inode number is not another file's;
 * it is left as it is, and taken once the kernel lets it go: 1.
 */
static int link_partner(struct view *v, int mdfd, const char *name, const struct stat *bst)
{
        struct mirror_base have, want;
        struct stat lst, mst;
        char key[32], tmp[64];
        bool same, already;
        int r;

        if (!mirror_kept_as_links(v, bst))
                return -ENOENT;
        mirror_links_key(key, sizeof(key), bst->st_ino);
        base_from_stat(&want, bst, 0);
        if (fstatat(v->mirror_links_fd, key, &lst, AT_SYMLINK_NOFOLLOW) < 0 ||
            mirror_get_base(v->mirror_links_fd, key, &have) < 0)
                return -ENOENT;
        same = same_content(&have, &want);
        already = fstatat(mdfd, name, &mst, AT_SYMLINK_NOFOLLOW) == 0 && mst.st_ino == lst.st_ino;
        if (!same && (already || !held_inode(&lst)))
                return -ENOENT;
        /* A chmod or chown (through any name) changes no content: the shared
         * object takes it (a held one keeps its times: set_owner_mode_times()). */
        align_owner_mode_times(v->mirror_links_fd, key, bst, &lst);
        if (!same)
                held_base_follows(v->mirror_links_fd, key, bst);
        if (already)
                return mirror_set_base(mdfd, name, &want);
        mirror_tmp_name(tmp, sizeof(tmp));
        if (linkat(v->mirror_links_fd, key, mdfd, tmp, 0) < 0)
                return -errno;
        r = renameat(mdfd, tmp, mdfd, name) < 0 ? -errno :
            same ? mirror_set_base(mdfd, name, &want) : 1;
        /* Also after the rename: onto a link of the same object (put there
         * since the look above) it does nothing, and the temporary would
         * stay, one more link the file shows offline. */
        unlinkat(mdfd, tmp, 0);
        return r;
}

/* Whether the index has a mirror object for server inode @ino. */
static bool mirror_links_indexed(struct view *v, uint64_t ino)
{
        struct stat lst;
        char key[32];

        mirror_links_key(key, sizeof(key), ino);
        return fstatat(v->mirror_links_fd, key, &lst, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Whether index entry @key names a mirror object of server inode @ino: an
 * object counted under two keys would show one link too many offline. */
static bool indexes_own(struct view *v, const char *key, uint64_t ino)
{
        struct mirror_base b;

        return mirror_get_base(v->mirror_links_fd, key, &b) == 0 && b.ver.ino == ino;
}

/* After server file @bst was mirrored as mdfd/name: the index of its links. */
static void index_links(struct view *v, int mdfd, const char *name, const struct stat *bst)
{
        char key[32];

        if (!mirror_kept_as_links(v, bst))
                return;
        mirror_links_key(key, sizeof(key), bst->st_ino);
        unlinkat(v->mirror_links_fd, key, 0);
        if (linkat(mdfd, name, v->mirror_links_fd, key, 0) < 0)
                log_warn("Failed to index the links of '%s' in the mirror: %m", name);
        else if (!indexes_own(v, key, bst->st_ino))
                unlinkat(v->mirror_links_fd, key, 0);   /* a note put another object there */
}

/* Index entries whose object no name in the mirror holds any more, or that
 * another server file's object took. */
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
                    (st.st_nlink <= 1 ||
                     !indexes_own(v, de->d_name, g_ascii_strtoull(de->d_name, NULL, 10))))
                        unlinkat(dirfd(d), de->d_name, 0);
        }
        closedir(d);
}

/* Puts a new entry in place of mdfd/name: made as tmp, then renamed. */
/* The content of server file @bst is in mdfd/name now: the store serves it
 * from there (its container) and drops any copy of its own. */
/* The directory this thread's walk is in (mdfd, and its path in the mirror):
 * its path is found once, not at every file noted in it. */
static __thread int walk_mdfd = -1;
static __thread char *walk_rel;

/* The priority of the pin the resync walks (atomic), or -1: while the
 * store's numbers are unsure (a remount), the rows it confirms take it,
 * as their old marks were other files'. */
static int resync_prio = -1;

static void note_container(struct view *v, int mdfd, const char *name, const struct stat *bst)
{
        int prio = __atomic_load_n(&resync_prio, __ATOMIC_RELAXED);
        struct sobj *o;
        char *rel;
        int r;

        if (!S_ISREG(bst->st_mode))
                return;
        rel = walk_rel && mdfd == walk_mdfd ? g_build_filename(walk_rel, name, NULL)
                                            : view_rel_path(v->mirror_fd, mdfd, name);
        r = rel ? store_set_container(v->store, bst, rel) : -ENAMETOOLONG;
        if (r == 0 && prio >= 0 && store_numbers_unsure_now(v->store) &&
            store_obj_find(v->store, bst->st_ino, &o) == 0) {
                r = store_obj_set_pin(v->store, o, prio);
                store_obj_put(v->store, o);
        }
        g_free(rel);
        if (r < 0)
                log_warn("Failed to record the mirror's copy of inode %" PRIu64 " in the store:"
                         " %s", (uint64_t)bst->st_ino, strerror(-r));
}

/* Gives the temporary the owner, mode, times and identity of @bst. */
static int prepare(int mdfd, const char *tmp, const struct stat *bst, uint32_t flags)
{
        struct mirror_base b;

        base_from_stat(&b, bst, flags);
        set_owner_mode_times(mdfd, tmp, bst);
        return mirror_set_base(mdfd, tmp, &b);
}

/* Puts temporary tmp in place of mdfd/name; @prepared: prepare() was done. */
static int install(struct view *v, int mdfd, const char *tmp, const char *name,
                   const struct stat *bst, uint32_t flags, bool prepared)
{
        int r;

        if (note_given_up(mdfd, tmp))
                return -ECANCELED;

        if (S_ISREG(bst->st_mode) && held_by_kernel(mdfd, name)) {
                unlinkat(mdfd, tmp, 0);
                set_owner_mode_times(mdfd, name, bst);  /* not its times */
                held_base_follows(mdfd, name, bst);
                return 0;
        }

        /* Another name of this file was mirrored meanwhile (same batch). */
        r = link_partner(v, mdfd, name, bst);
        if (r >= 0) {
                unlinkat(mdfd, tmp, 0);
                if (r == 0)
                        note_container(v, mdfd, name, bst);
                return 0;
        }
        r = prepared ? 0 : prepare(mdfd, tmp, bst, flags);
        if (r == 0 && renameat(mdfd, tmp, mdfd, name) < 0)
                r = -errno;
        if (r < 0) {
                unlinkat(mdfd, tmp, 0);
        } else {
                index_links(v, mdfd, name, bst);
                note_container(v, mdfd, name, bst);
        }
        return r;
}

/* Copies @size bytes of bfd to tfd (both at offset 0): copy_file_range, in
 * the kernel (a reflink where the filesystem can), else read and write. */
static int copy_content(int bfd, int tfd, off_t size, uint64_t *copied)
{
        bool in_kernel = true;
        char *buf = NULL;
        off_t off = 0;
        int r = 0;

        while (off < size) {
                ssize_t n;

                if (in_kernel) {
                        loff_t in = off, out = off;

                        n = copy_file_range(bfd, &in, tfd, &out, (size_t)(size - off), 0);
                        if (n < 0 && (errno == EXDEV || errno == EOPNOTSUPP ||
                                      errno == ENOSYS || errno == EINVAL)) {
                                in_kernel = false;      /* another filesystem */
                                continue;
                        }
                } else {
                        if (!buf && !(buf = malloc(COPY_CHUNK))) {
                                r = -ENOMEM;
                                break;
                        }
                        n = pread(bfd, buf, COPY_CHUNK, off);
                        if (n > 0 && pwrite(tfd, buf, (size_t)n, off) != n) {
                                r = -EIO;
                                break;
                        }
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        break;
                }
                if (n == 0)
                        break;          /* shrunk: the identity check tells */
                off += n;
                resync_step();
        }
        free(buf);
        if (copied)
                *copied = (uint64_t)off;
        return r;
}

int mirror_copy_content(int from, int to, off_t size)
{
        return copy_content(from, to, size, NULL);
}

static bool same_stat_identity(const struct stat *a, const struct stat *b)
{
        return a->st_ino == b->st_ino && a->st_size == b->st_size &&
               a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
               a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Copies of a file its writers overtook, before its copy is given up on. */
#define COPY_TRIES 4

/*
 * Copies backing file bdfd/name (identity *bst) into a new temporary of
 * mdfd, named in tmp.  A file written while copied (a writer of its own, or
 * one passed through, which the daemon does not see) is copied again, its
 * new identity in *bst, up to COPY_TRIES times: the writer has likely
 * finished; then -EAGAIN (the hoard walk copies it again), as when the name
 * leads to another file now.  The temporary is removed on failure.
 */
static int copy_to_tmp(int bdfd, int mdfd, const char *name, struct stat *bst,
                       char *tmp, size_t tmplen, bool durable, uint64_t *copied)
{
        struct stat after;
        int bfd, tfd, r;

        /* O_NOATIME: the copy is the daemon's read, not an application's. */
        bfd = regular_open_at(bdfd, name, O_RDONLY | O_NOATIME, NULL);
        if (bfd < 0)
                return bfd;
        mirror_tmp_name(tmp, tmplen);
        tfd = openat(mdfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (tfd < 0) {
                r = -errno;
                close(bfd);
                return r;
        }
        for (int tries = 1;; tries++) {
                r = copy_content(bfd, tfd, bst->st_size, copied);
                if (r == 0 && fstat(bfd, &after) < 0)
                        r = -errno;
                if (r < 0 || same_stat_identity(&after, bst))
                        break;
                if (after.st_ino != bst->st_ino || tries == COPY_TRIES) {
                        r = -EAGAIN;
                        break;
                }
                *bst = after;
                if (ftruncate(tfd, 0) < 0) {
                        r = -errno;
                        break;
                }
        }
        /* An empty copy (a file's note at its create) has no bytes to
         * reach the disk before its name. */
        if (r == 0 && durable && bst->st_size > 0 && fsync(tfd) < 0)
                r = -errno;
        close(tfd);
        close(bfd);
        if (r < 0)
                unlinkat(mdfd, tmp, 0);
        return r;
}

/* A pin's pass: progress, cancellation, what it fetched. */
static bool fill_cancelled(const struct mirror_fill *fill)
{
        return fill && fill->job && fill->job->cancel;
}

void pin_job_progress(struct pin_job *job, const struct pin_result *res)
{
        if (!job || !job->progress)
                return;
        job->progress(job, res);
        fault_point(FAULT_VIEW_PIN_FILE);
}

static void fill_file_done(struct mirror_fill *fill, uint64_t copied, bool ok)
{
        if (!fill)
                return;
        fill->res->files++;
        fill->res->fetched += copied;
        if (!ok)
                fill->res->failed++;
        pin_job_progress(fill->job, fill->res);
}

/*
 * A walk looks an entry up on the server, then puts it in place in the
 * mirror, maybe much later (its copy queued in a batch, a directory finished
 * after its subtree).  A change made through the view meanwhile is noted
 * (mirror_note_change()), and its note may put the newer version in place
 * first, which the walk's older look would then undo: a chmod shown with
 * its old mode offline.  So every note counts itself, by name, before it
 * looks at the server; a walk reads the count of a name before its own
 * look, and after putting the entry in place, an entry whose count moved
 * meanwhile is synced again from a fresh look (entry_settle()).  Whatever
 * order the two run in, the last to write the mirror's entry looked at the
 * server after the change.  Names are counted in stripes: a collision only
 * costs a walk one more look.  A file with several names changes under all
 * of them at a note of one: for such an entry every note counts.
 */
#define NOTE_STRIPES 256
#define SETTLE_TRIES 8          /* looks again while notes overtake, at most */

static unsigned note_counts[NOTE_STRIPES];
static unsigned notes_all;

static unsigned *note_counter(const char *name)
{
        return &note_counts[g_str_hash(name) % NOTE_STRIPES];
}

/* The notes of name (low half) and all notes (high half) so far. */
static uint64_t note_count(const char *name)
{
        uint64_t mine = __atomic_load_n(note_counter(name), __ATOMIC_SEQ_CST);

        return (uint64_t)__atomic_load_n(&notes_all, __ATOMIC_SEQ_CST) << 32 | mine;
}

/* Whether a note that may have changed name's entry ran since @seen;
 * @linked: the entry is a file with several names. */
static bool note_overtook(const char *name, uint64_t seen, bool linked)
{
        uint64_t now = note_count(name);

        return linked ? now != seen : (uint32_t)now != (uint32_t)seen;
}

static void note_begins(const char *name)
{
        __atomic_add_fetch(note_counter(name), 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&notes_all, 1, __ATOMIC_SEQ_CST);
}

static int entry_settle(struct view *v, int bdfd, int mdfd, const char *name, bool recursive,
                        int depth, uint64_t seen, bool linked, int r);

/*
 * The files to copy, across the directories of one walk: fetched in
 * parallel by a pool of workers (a network backing gains from many requests
 * in flight), made durable together by one syncfs(), then each put in
 * place.  A copy is never in place (with its identity) before its bytes are
 * on disk, and a directory is marked complete (and given its times) only
 * after its files are in place: a directory finished while files are queued
 * waits in the batch too.  A batch is flushed every BATCH_MAX files or
 * BATCH_FDS descriptors held, and at the end of the walk.
 */
struct batch {
        GArray *items;          /* struct batch_item */
        GArray *finishes;       /* struct dir_finish, children before parents */
        unsigned fds;           /* descriptors the queued entries hold */
};
/* A directory pair queued files copy between, shared by them. */
struct dirref {
        int bdfd, mdfd;
        unsigned refs;
        struct batch *batch;
};
struct batch_item {
        char tmp[64];
        char *name;
        struct stat st;
        struct dirref *dir;
        uint64_t copied;
        uint64_t seen;          /* note_count() of name as it was queued */
        int err;
};
struct dir_finish {
        int bdfd, mdfd;         /* the directory's parent in both trees (dups) */
        char *name;
        struct stat st;
        uint32_t flags;
        bool recursive;
        uint64_t seen;          /* note_count() of name before st was taken */
};

static struct dirref *dirref_new(struct batch *b, int bdfd, int mdfd)
{
        struct dirref *d = g_new0(struct dirref, 1);

        d->bdfd = fcntl(bdfd, F_DUPFD_CLOEXEC, 0);
        d->mdfd = fcntl(mdfd, F_DUPFD_CLOEXEC, 0);
        if (d->bdfd < 0 || d->mdfd < 0) {
                if (d->bdfd >= 0)
                        close(d->bdfd);
                if (d->mdfd >= 0)
                        close(d->mdfd);
                g_free(d);
                return NULL;
        }
        d->refs = 1;
        d->batch = b;
        b->fds += 2;
        return d;
}

static void dirref_put(struct dirref *d)
{
        if (!d || --d->refs)
                return;
        close(d->bdfd);
        close(d->mdfd);
        d->batch->fds -= 2;
        g_free(d);
}

static void batch_init(struct batch *b)
{
        memset(b, 0, sizeof(*b));
        b->items = g_array_new(FALSE, TRUE, sizeof(struct batch_item));
        b->finishes = g_array_new(FALSE, TRUE, sizeof(struct dir_finish));
}

static bool batch_pending(const struct batch *b)
{
        return b && (b->items->len || b->finishes->len);
}

static bool batch_full(const struct batch *b)
{
        return b->items->len >= BATCH_MAX || b->fds >= BATCH_FDS;
}

static void fetch_item(void *ctx, guint i)
{
        struct batch *b = ctx;
        struct batch_item *it = &g_array_index(b->items, struct batch_item, i);

        it->err = copy_to_tmp(it->dir->bdfd, it->dir->mdfd, it->name, &it->st, it->tmp,
                              sizeof(it->tmp), false, &it->copied);
        resync_step();
        /* Here rather than at install: the pool does it in parallel. */
        if (it->err == 0 && (it->err = prepare(it->dir->mdfd, it->tmp, &it->st, 0)) < 0)
                unlinkat(it->dir->mdfd, it->tmp, 0);
}

static void batch_fetch(struct view *v, struct batch *b)
{
        fetch_pool_run(v, b->items->len, fetch_item, b);
}

/*
 * Whether mirror directory @mst, of base @have, already is what finish_dir()
 * would make it for server directory @bst (@want, @flags): every change
 * noted below a pinned directory passes the directories on its way, and
 * most of them did not change.  Its own times may differ (its entries'
 * copies move them): offline it shows its base's (offline_translate_stat()).
 */
static bool dir_in_sync(const struct mirror_base *have, const struct mirror_base *want,
                        uint32_t flags, const struct stat *mst, const struct stat *bst)
{
        return have->flags == flags && same_identity(have, want) &&
               have->ver.uid == want->ver.uid && have->ver.gid == want->ver.gid &&
               have->ver.nlink == want->ver.nlink && mst->st_uid == bst->st_uid &&
               mst->st_gid == bst->st_gid && !((mst->st_mode ^ bst->st_mode) & 07777);
}

static void finish_dir(int mdfd, const char *name, const struct stat *bst, uint32_t flags)
{
        struct mirror_base want;

        set_owner_mode_times(mdfd, name, bst);
        base_from_stat(&want, bst, flags);
        if (mirror_set_base(mdfd, name, &want) < 0)
                log_warn("Failed to mark mirrored directory '%s': %m", name);
}

/* Drops what is queued: nothing was copied yet (a cancelled walk). */
static void batch_discard(struct batch *b)
{
        for (guint i = 0; i < b->items->len; i++) {
                struct batch_item *it = &g_array_index(b->items, struct batch_item, i);

                g_free(it->name);
                dirref_put(it->dir);
        }
        for (guint i = 0; i < b->finishes->len; i++) {
                struct dir_finish *f = &g_array_index(b->finishes, struct dir_finish, i);

                g_free(f->name);
                close(f->bdfd);
                close(f->mdfd);
                b->fds -= 2;
        }
        g_array_set_size(b->items, 0);
        g_array_set_size(b->finishes, 0);
}

static int batch_install(struct view *v, struct batch *b, struct mirror_fill *fill)
{
        int r = 0;

        if (b->items->len) {
                batch_fetch(v, b);
                if (syncfs(g_array_index(b->items, struct batch_item, 0).dir->mdfd) < 0)
                        r = -errno;
                /* Given up on while the copies waited: nothing goes in place. */
                if (r == 0 && resync_stopped(fill))
                        r = -ECANCELED;
        }
        for (guint i = 0; i < b->items->len; i++) {
                struct batch_item *it = &g_array_index(b->items, struct batch_item, i);
                int mdfd = it->dir->mdfd, e = it->err;

                if (e == 0 && r < 0) {
                        unlinkat(mdfd, it->tmp, 0);
                        e = r;
                } else if (e == 0) {
                        e = install(v, mdfd, it->tmp, it->name, &it->st, 0, true);
                }
                if (r == 0)
                        e = entry_settle(v, it->dir->bdfd, mdfd, it->name, false, 0,
                                         it->seen, it->st.st_nlink > 1, e);
                if (e < 0)
                        log_warn("Failed to mirror '%s' for offline use: %s", it->name,
                                 strerror(-e));
                fill_file_done(fill, e == 0 ? it->copied : 0, e == 0);
                g_free(it->name);
                dirref_put(it->dir);
        }
        for (guint i = 0; i < b->finishes->len; i++) {
                struct dir_finish *f = &g_array_index(b->finishes, struct dir_finish, i);

                if (r == 0) {
                        finish_dir(f->mdfd, f->name, &f->st, f->flags);
                        entry_settle(v, f->bdfd, f->mdfd, f->name, f->recursive, 0, f->seen,
                                     false, 0);
                }
                g_free(f->name);
                close(f->bdfd);
                close(f->mdfd);
                b->fds -= 2;
        }
        store_batch_commit(v->store);
        g_array_set_size(b->items, 0);
        g_array_set_size(b->finishes, 0);
        return r;
}

static void batch_free(struct batch *b)
{
        batch_discard(b);
        g_array_free(b->items, TRUE);
        g_array_free(b->finishes, TRUE);
}

/* What the walk queued goes in place (or, cancelled, is dropped). */
static int batch_end(struct view *v, struct batch *b, struct mirror_fill *fill, int r)
{
        int e;

        if (r == -ECANCELED) {
                batch_discard(b);
                return r;
        }
        e = batch_install(v, b, fill);
        return r < 0 ? r : e;
}

/* Directory mdfd/name is finished now, or when the queued files are in
 * place: true when queued (with the parents bdfd and mdfd). */
static bool dir_done(struct batch *b, int bdfd, int mdfd, const char *name,
                     const struct stat *bst, uint32_t flags, bool recursive, uint64_t seen)
{
        struct dir_finish f = { .name = g_strdup(name), .st = *bst, .flags = flags,
                                .recursive = recursive, .seen = seen, .bdfd = -1, .mdfd = -1 };

        if (batch_pending(b) && bdfd >= 0 &&
            (f.bdfd = fcntl(bdfd, F_DUPFD_CLOEXEC, 0)) >= 0 &&
            (f.mdfd = fcntl(mdfd, F_DUPFD_CLOEXEC, 0)) >= 0) {
                g_array_append_val(b->finishes, f);
                b->fds += 2;
                return true;
        }
        if (f.bdfd >= 0)
                close(f.bdfd);
        g_free(f.name);
        finish_dir(mdfd, name, bst, flags);
        return false;
}

/* Copies the backing file bdfd/name into the mirror; with @batch, it is
 * queued (in the pair *dir, made at the first), copied and put in place by
 * batch_install().  Returns 1 when queued. */
static int copy_file(struct view *v, int bdfd, int mdfd, const char *name,
                     const struct stat *bst, struct batch *batch, struct dirref **dir,
                     uint64_t *copied)
{
        struct stat st = *bst;
        char tmp[64];
        int r;

        if (batch && dir && (*dir || (*dir = dirref_new(batch, bdfd, mdfd)))) {
                /* Counted now: the copy's own look at the file (copy_to_tmp())
                 * comes later, and is what goes in place. */
                struct batch_item it = { .name = g_strdup(name), .st = *bst, .dir = *dir,
                                         .seen = note_count(name) };

                (*dir)->refs++;
                g_array_append_val(batch->items, it);
                return 1;
        }
        r = copy_to_tmp(bdfd, mdfd, name, &st, tmp, sizeof(tmp), true, copied);
        return r < 0 ? r : install(v, mdfd, tmp, name, &st, 0, false);
}

static int copy_special(struct view *v, int bdfd, int mdfd, const char *name,
                        const struct stat *bst)
{
        char tmp[64], target[PATH_MAX + 1];
        ssize_t n;

        mirror_tmp_name(tmp, sizeof(tmp));
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
        return install(v, mdfd, tmp, name, bst, 0, false);
}

static int sync_dir_children(struct view *v, int bdfd, int mdfd, int depth,
                             struct batch *batch, struct mirror_fill *fill);

/*
 * New content of a file with several names whose mirror object they share:
 * written in place, since a copy renamed over one name would leave the others
 * on the old object.  Its identity goes first and comes back only once the
 * bytes are durable, so a crash leaves an object without one (copied again),
 * never half a file under a valid identity.
 */
static int rewrite_shared(struct view *v, int bdfd, int mdfd, const char *name,
                          const struct stat *bst, uint64_t *copied)
{
        struct mirror_base want;
        int bfd = -1, mfd = -1, r;

        r = mirror_clear_base(mdfd, name);
        if (r == 0 && (bfd = regular_open_at(bdfd, name, O_RDONLY | O_NOATIME, NULL)) < 0)
                r = bfd;
        if (r == 0 && (mfd = regular_open_at(mdfd, name, O_WRONLY | O_TRUNC, NULL)) < 0)
                r = mfd;
        if (r == 0)
                r = copy_content(bfd, mfd, bst->st_size, copied);
        if (r == 0 && fsync(mfd) < 0)
                r = -errno;
        if (r == 0) {
                set_owner_mode_times(mdfd, name, bst);
                base_from_stat(&want, bst, 0);
                r = mirror_set_base(mdfd, name, &want);
        }
        if (r == 0) {
                index_links(v, mdfd, name, bst);
                note_container(v, mdfd, name, bst);
        }
        if (mfd >= 0)
                close(mfd);
        if (bfd >= 0)
                close(bfd);
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

static bool may_adopt(const struct stat *bst, const struct stat *mst)
{
        return S_ISREG(bst->st_mode) && S_ISREG(mst->st_mode) && bst->st_nlink <= 1 &&
               mst->st_nlink <= 1 && bst->st_size == mst->st_size;
}

static bool holds_same_bytes(int bdfd, int mdfd, const char *name)
{
        int bfd, mfd;
        bool same;

        /* O_NOATIME: the comparison is the daemon's read (as copy_to_tmp()'s). */
        bfd = regular_open_at(bdfd, name, O_RDONLY | O_NOATIME, NULL);
        mfd = regular_open_at(mdfd, name, O_RDONLY | O_NOATIME, NULL);
        same = bfd >= 0 && mfd >= 0 && same_bytes(bfd, mfd);
        if (bfd >= 0)
                close(bfd);
        if (mfd >= 0)
                close(mfd);
        return same;
}

/*
 * A mirror file that already holds the bytes of the server file @bst (one
 * created or edited offline, now replayed) takes the server's identity
 * instead of being copied again: 0 when done, -ENOENT when it does not.
 * @known: whether it does, found by a look-up of the pool (-1: not known).
 */
static int adopt_same(int bdfd, int mdfd, const char *name, const struct stat *bst,
                      const struct stat *mst, const struct mirror_base *want, int known)
{
        if (!may_adopt(bst, mst) || known == 0 ||
            (known < 0 && !holds_same_bytes(bdfd, mdfd, name)))
                return -ENOENT;
        align_owner_mode_times(mdfd, name, bst, mst);
        return mirror_take_identity(mdfd, name, want);
}

/*
 * What a walk learns of a directory entry from the backing ahead of syncing
 * it, by the fetch pool for a directory's entries at once: the round trips
 * overlap instead of adding up.
 */
struct entry_look {
        char *name;
        int err;                /* of the backing's stat */
        struct stat bst;        /* the backing's entry */
        struct stat mst;        /* the mirror's entry, of a regular file */
        bool mst_ok;            /* mst was found */
        bool based;             /* have is mst's base */
        struct mirror_base have;
        int same;               /* mirror entry mst holds the bytes: 1, 0, -1 not looked */
        uint64_t seen;          /* note_count() of name before bst was taken */
};

static int sync_file(struct view *v, int bdfd, int mdfd, const char *name,
                     const struct stat *bst, const struct stat *mst_now, bool based,
                     const struct mirror_base *have, struct batch *batch, struct dirref **dir,
                     const struct entry_look *look, uint64_t *copied);
static int sync_other(struct view *v, int bdfd, int mdfd, const char *name,
                      const struct stat *bst, const struct stat *mst, bool based,
                      const struct mirror_base *have);

/*
 * Makes mdfd/name what bdfd/name is.  A directory's children are mirrored
 * too when recursive (it is then marked complete); else only the directory.
 * @fill: a pin's pass, which marks every regular file it meets and counts.
 * @seen: note_count(name) before the server's entry was looked at (here, or
 * in @look); *queued: what it puts in place waits in @batch; *linked: a
 * file with several names, on the server or in the mirror.
 */
static int sync_entry_seen(struct view *v, int bdfd, int mdfd, const char *name,
                           bool recursive, int depth, struct batch *batch, struct dirref **dir,
                           struct mirror_fill *fill, const struct entry_look *look,
                           uint64_t seen, bool *queued, bool *linked)
{
        struct mirror_base have, want;
        struct stat bst, mst;
        bool exists, based;
        int r;

        *queued = *linked = false;
        r = look ? look->err : fstatat(bdfd, name, &bst, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
        if (look && r == 0)
                bst = look->bst;
        if (!fill && backing_call_abandoned())
                return -ECANCELED;      /* a note given up on (note_given_up()) */
        if (r == -ENOENT)
                return remove_tree(mdfd, name, 0);
        if (r < 0)
                return r;
        exists = fstatat(mdfd, name, &mst, AT_SYMLINK_NOFOLLOW) == 0;
        *linked = !S_ISDIR(bst.st_mode) && (bst.st_nlink > 1 || (exists && mst.st_nlink > 1));
        /* The look-up's base holds while the mirror file is as it saw it
         * (setting one changes its ctime). */
        if (exists && look && look->mst_ok && same_stat_identity(&mst, &look->mst)) {
                based = look->based;
                have = look->have;
        } else {
                based = exists && mirror_get_base(mdfd, name, &have) == 0;
        }
        if (exists && (mst.st_mode ^ bst.st_mode) & S_IFMT) {
                r = remove_tree(mdfd, name, 0);
                if (r < 0)
                        return r;
                exists = based = false;
        }
        base_from_stat(&want, &bst, 0);
        if (S_ISDIR(bst.st_mode)) {
                /* Complete stays so; a change offline is the server's now. */
                uint32_t flags = (based ? have.flags & MIRROR_COMPLETE : 0) |
                                 (recursive ? MIRROR_COMPLETE : 0);

                if (!exists && mkdirat(mdfd, name, 0700) < 0) {
                        r = -errno;
                        /* A file cached whole meanwhile may have made it on
                         * its way into the mirror (mirror_cache_file): it is
                         * taken as it is. */
                        if (r != -EEXIST || fstatat(mdfd, name, &mst, AT_SYMLINK_NOFOLLOW) < 0 ||
                            !S_ISDIR(mst.st_mode))
                                return r;
                }
                if (!exists)
                        mirror_dirs_changed();
                if (recursive) {
                        int cb, cm;

                        if (depth > VIEW_MAX_DEPTH)
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
                        r = sync_dir_children(v, cb, cm, depth + 1, batch, fill);
                        close(cb);
                        close(cm);
                        if (r < 0)
                                return r;
                }
                if (fill)
                        fill->res->dirs++;
                if (!recursive && exists && based && dir_in_sync(&have, &want, flags, &mst, &bst))
                        return 0;
                *queued = dir_done(batch, bdfd, mdfd, name, &bst, flags, recursive, seen);
                return 0;
        }
        if (S_ISREG(bst.st_mode)) {
                uint64_t copied = 0;

                store_batch_begin(v->store);
                if (fill) {
                        fill->res->total_bytes += (uint64_t)bst.st_size;
                        if (fill->mark(v, &bst, fill) < 0)
                                fill->res->failed++;
                }
                r = sync_file(v, bdfd, mdfd, name, &bst, exists ? &mst : NULL, based, &have,
                              batch, dir,
                              look, &copied);
                *queued = r == 1;
                if (r != 1)
                        fill_file_done(fill, copied, r == 0);
                return r < 0 ? r : 0;
        }
        return sync_other(v, bdfd, mdfd, name, &bst, exists ? &mst : NULL, based, &have);
}

static int sync_entry(struct view *v, int bdfd, int mdfd, const char *name, bool recursive,
                      int depth, struct batch *batch, struct dirref **dir,
                      struct mirror_fill *fill, const struct entry_look *look)
{
        uint64_t seen = look ? look->seen : note_count(name);
        bool queued, linked;
        int r;

        r = sync_entry_seen(v, bdfd, mdfd, name, recursive, depth, batch, dir, fill, look, seen,
                            &queued, &linked);
        /* Also after a failure: an older look may have failed on what a
         * note made (a symlink read where a file is now). */
        if (r != -ECANCELED && !queued)
                r = entry_settle(v, bdfd, mdfd, name, recursive, depth, seen, linked, r);
        return r;
}

/*
 * mdfd/name was just put in place (result @r) as the server's entry looked
 * when its notes counted @seen: synced again from a fresh look while a
 * note of it ran since (see NOTE_STRIPES).  Returns the last result.  Not
 * for a walk without the server's side (bdfd < 0).
 */
static int entry_settle(struct view *v, int bdfd, int mdfd, const char *name, bool recursive,
                        int depth, uint64_t seen, bool linked, int r)
{
        for (unsigned tries = 0; bdfd >= 0 && note_overtook(name, seen, linked); tries++) {
                struct dirref *dir = NULL;
                struct batch batch;
                bool queued;

                if (tries == SETTLE_TRIES) {
                        log_warn("Mirrored '%s' keeps changing under the walk: the hoard walk"
                                 " brings it up to date", name);
                        return r;
                }
                seen = note_count(name);
                batch_init(&batch);
                r = sync_entry_seen(v, bdfd, mdfd, name, recursive, depth, &batch, &dir, NULL,
                                    NULL, seen, &queued, &linked);
                dirref_put(dir);
                r = batch_end(v, &batch, NULL, r);
                batch_free(&batch);
                if (r == -ECANCELED)
                        break;
        }
        return r;
}

/*
 * A shared object the kernel holds, whose base is older than server file
 * @bst: it takes @bst's identity if it holds its bytes (a replay put them
 * there), else it is left as it is for its release (op_release()).
 */
static int held_takes_identity(struct view *v, int bdfd, int mdfd, const char *name,
                               const struct stat *bst, const struct mirror_base *want)
{
        int r;

        if (!holds_same_bytes(bdfd, mdfd, name))
                return 0;
        r = mirror_set_base(mdfd, name, want);
        if (r == 0) {
                index_links(v, mdfd, name, bst);
                note_container(v, mdfd, name, bst);
        }
        return r;
}

/*
 * A chmod or chown, through the view or on the server, moved only the
 * object's ctime, owner or mode: the mirror's copy @mst, still as its base
 * @have left it (not written since, not held by a writer), keeps its bytes
 * and takes them, without reading either file.
 */
static bool owner_or_mode_only(const struct mirror_base *have, const struct mirror_base *want,
                               const struct stat *mst)
{
        return mst && !((have->flags | want->flags) & (MIRROR_STALE | MIRROR_CHANGED)) &&
               have->ver.ino == want->ver.ino && have->ver.size == want->ver.size &&
               have->ver.mtime_ns == want->ver.mtime_ns && have->ver.nlink == want->ver.nlink &&
               !((have->ver.mode ^ want->ver.mode) & S_IFMT) &&
               (uint64_t)mst->st_size == have->ver.size &&
               timespec_ns(&mst->st_mtim) == have->ver.mtime_ns && !held_inode(mst);
}

/*
 * What the mirror's base (@have, when @based) tells of regular file
 * mdfd/name against server file @bst (@want): the name linked to its
 * object, or its object brought to @bst's owner, mode, times and nlink, or
 * rewritten in place when it has several names; -ENOENT when it tells
 * nothing (the file is adopted or copied).
 */
static int sync_by_base(struct view *v, int bdfd, int mdfd, const char *name,
                        const struct stat *bst, const struct stat *mst_now, bool based,
                        const struct mirror_base *have, const struct mirror_base *want,
                        uint64_t *copied)
{
        int r;

        r = link_partner(v, mdfd, name, bst);
        if (r == 0)
                note_container(v, mdfd, name, bst);
        if (r != -ENOENT)
                return r < 0 ? r : 0;
        /* The kernel's file of a writer (stranded by a switch) whose server
         * file got another name, not indexed yet: the names share that
         * object, whatever version its base says (a utime may have moved the
         * server's mtime), as link_partner() takes a held one; its owner and
         * mode follow the server's, its content is taken at its release. */
        if (based && mst_now && have->ver.ino == want->ver.ino && held_inode(mst_now) &&
            mirror_kept_as_links(v, bst) && !mirror_links_indexed(v, bst->st_ino)) {
                align_owner_mode_times(mdfd, name, bst, mst_now);
                held_base_follows(mdfd, name, bst);
                index_links(v, mdfd, name, bst);
                return 0;
        }
        /* A file made offline with several names, open in the kernel: no copy
         * can replace what the kernel writes, so the object itself takes the
         * server's identity (the log forgets the id it was marked with). */
        if (!based && mst_now && bst->st_nlink > 1 && mst_now->st_nlink == bst->st_nlink &&
            held_inode(mst_now))
                return held_takes_identity(v, bdfd, mdfd, name, bst, want);
        if (!based)
                return -ENOENT;
        /* A link added or removed elsewhere changed only its count (and ctime):
         * the same object keeps its content, and is indexed for the new name. */
        if (have->ver.nlink != want->ver.nlink && same_content(have, want)) {
                set_owner_mode_times(mdfd, name, bst);
                r = mirror_set_base(mdfd, name, want);
                if (r == 0) {
                        index_links(v, mdfd, name, bst);
                        note_container(v, mdfd, name, bst);
                }
                return r;
        }
        if (renumbered(numbers_made_up(v), have, want)) {
                r = mirror_set_base(mdfd, name, want);
                if (r == 0)
                        note_container(v, mdfd, name, bst);
                return r;
        }
        if (same_identity(have, want)) {
                r = 0;
                /* MIRROR_CHANGED too: the server has what changed offline now. */
                if (have->ver.uid != want->ver.uid || have->ver.gid != want->ver.gid ||
                    (have->flags & MIRROR_CHANGED)) {
                        set_owner_mode_times(mdfd, name, bst);
                        r = mirror_set_base(mdfd, name, want);
                }
                /* Also a mirror made before containers, or a store that lost it. */
                note_container(v, mdfd, name, bst);
                return r;
        }
        if (owner_or_mode_only(have, want, mst_now)) {
                align_owner_mode_times(mdfd, name, bst, mst_now);
                r = mirror_set_base(mdfd, name, want);
                if (r == 0)
                        note_container(v, mdfd, name, bst);
                return r;
        }
        if (mst_now && bst->st_nlink > 1 && mst_now->st_nlink > 1 &&
            have->ver.ino == want->ver.ino)
                return held_inode(mst_now) ? held_takes_identity(v, bdfd, mdfd, name, bst, want)
                                           : rewrite_shared(v, bdfd, mdfd, name, bst, copied);
        return -ENOENT;
}

/* A regular file: 1 when queued in @batch. */
static int sync_file(struct view *v, int bdfd, int mdfd, const char *name,
                     const struct stat *bst, const struct stat *mst_now, bool based,
                     const struct mirror_base *have, struct batch *batch, struct dirref **dir,
                     const struct entry_look *look, uint64_t *copied)
{
        struct mirror_base want;
        struct stat mst;
        int r, known;

        base_from_stat(&want, bst, 0);
        r = sync_by_base(v, bdfd, mdfd, name, bst, mst_now, based, have, &want, copied);
        if (r != -ENOENT)
                return r;
        /* The mirror's entry as sync_entry() just found it (nothing here changed it). */
        if (mst_now) {
                mst = *mst_now;
                /* The look-up's comparison holds while the mirror file is as it saw it. */
                known = look && look->same >= 0 && same_stat_identity(&mst, &look->mst) ?
                        look->same : -1;
                r = adopt_same(bdfd, mdfd, name, bst, &mst, &want, known);
        } else {
                r = -ENOENT;
        }
        if (r == 0) {
                note_container(v, mdfd, name, bst);
                return 0;
        }
        return copy_file(v, bdfd, mdfd, name, bst, batch, dir, copied);
}

/* Symlinks and special files; @mst: the mirror's entry, NULL when none. */
static int sync_other(struct view *v, int bdfd, int mdfd, const char *name,
                      const struct stat *bst, const struct stat *mst, bool based,
                      const struct mirror_base *have)
{
        struct mirror_base want;
        int r;

        base_from_stat(&want, bst, 0);
        r = link_partner(v, mdfd, name, bst);
        if (r != -ENOENT)
                return r;
        /* MIRROR_CHANGED: what changed offline is the server's now, and
         * the mark goes below. */
        if (based && same_identity(have, &want) && have->ver.uid == want.ver.uid &&
            have->ver.gid == want.ver.gid && have->ver.nlink == want.ver.nlink &&
            !(have->flags & MIRROR_CHANGED)) {
                /* The first name met of an object with several (also one that a
                 * mirror written before keeps as several objects): the next
                 * name is linked to it. */
                if (mst && !mirror_links_counted(v, mst, want.ver.ino))
                        index_links(v, mdfd, name, bst);
                return 0;
        }
        /* A FIFO, device or socket has no content: the same server object is
         * brought to its owner, mode and times in place, so that its other
         * names, which share the mirror object, see them too. */
        if (based && (same_identity(have, &want) ||
                      (!S_ISLNK(bst->st_mode) && mst && have->ver.ino == want.ver.ino &&
                       !((mst->st_mode ^ bst->st_mode) & S_IFMT) &&
                       mst->st_rdev == bst->st_rdev))) {
                set_owner_mode_times(mdfd, name, bst);
                r = mirror_set_base(mdfd, name, &want);
                if (r == 0)
                        index_links(v, mdfd, name, bst);
                return r;
        }
        return copy_special(v, bdfd, mdfd, name, bst);
}

#define LOOK_CHUNK 256          /* entries looked up at once, at most */
#define SEEN_MAX 100000         /* names of a listing remembered, at most (the rest asked) */

struct look_chunk {
        int bdfd, mdfd;
        bool names_identify;    /* the view's, as the walk began */
        GArray *looks;          /* struct entry_look */
};

/* The backing's side of an entry (its stat, and for a mirror file that may
 * be adopted the byte comparison): only reads, so the pool runs it. */
static void look_entry(void *ctx, guint i)
{
        struct look_chunk *c = ctx;
        struct entry_look *l = &g_array_index(c->looks, struct entry_look, i);
        struct mirror_base want;

        l->same = -1;
        l->seen = note_count(l->name);
        l->err = fstatat(c->bdfd, l->name, &l->bst, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
        resync_step();
        if (l->err < 0 || !S_ISREG(l->bst.st_mode) ||
            fstatat(c->mdfd, l->name, &l->mst, AT_SYMLINK_NOFOLLOW) < 0)
                return;
        l->mst_ok = true;
        l->based = mirror_get_base(c->mdfd, l->name, &l->have) == 0;
        if (!may_adopt(&l->bst, &l->mst))
                return;
        base_from_stat(&want, &l->bst, 0);
        if (l->based && (same_identity(&l->have, &want) ||
                         renumbered(c->names_identify, &l->have, &want)))
                return;         /* in sync: nothing to compare */
        l->same = replayed_same(&l->bst, &l->mst) || holds_same_bytes(c->bdfd, c->mdfd, l->name);
}

/* Reads up to LOOK_CHUNK more names of @d into c->looks (and @seen): false at the end. */
static bool read_chunk(DIR *d, struct look_chunk *c, GHashTable *seen)
{
        struct dirent *de;

        while (c->looks->len < LOOK_CHUNK) {
                struct entry_look l = { 0 };

                if (!(de = readdir(d)))
                        return false;
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                l.name = g_strdup(de->d_name);
                g_array_append_val(c->looks, l);
                if (g_hash_table_size(seen) < SEEN_MAX)
                        g_hash_table_add(seen, g_strdup(de->d_name));
        }
        return true;
}

static void chunk_clear(struct look_chunk *c)
{
        for (guint i = 0; i < c->looks->len; i++)
                g_free(g_array_index(c->looks, struct entry_look, i).name);
        g_array_set_size(c->looks, 0);
}

/*
 * The backing is read a chunk of names at a time, looked up by the fetch
 * pool, then each entry synced in order (a subdirectory walked before the
 * next entry, a file's copy queued in @batch).
 */
static int sync_dir_entries(struct view *v, int bdfd, int mdfd, int depth,
                            struct batch *batch, struct mirror_fill *fill)
{
        struct look_chunk chunk = { .bdfd = bdfd, .mdfd = mdfd,
                                    .names_identify = numbers_made_up(v) };
        struct dirref *dir = NULL;
        GHashTable *seen;
        struct dirent *de;
        struct stat st;
        int r = 0, dup_fd;
        bool more = true;
        DIR *d;

        dup_fd = dir_open_noatime(bdfd, ".", 0);
        if (dup_fd < 0 || !(d = fdopendir(dup_fd))) {
                r = -errno;
                if (dup_fd >= 0)
                        close(dup_fd);
                return r;
        }
        seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        chunk.looks = g_array_new(FALSE, TRUE, sizeof(struct entry_look));
        while (more && r != -ECANCELED) {
                more = read_chunk(d, &chunk, seen);
                resync_step();
                if (fill_cancelled(fill) || resync_stopped(fill))
                        r = -ECANCELED;
                else
                        fetch_pool_run(v, chunk.looks->len, look_entry, &chunk);
                for (guint i = 0; i < chunk.looks->len && r != -ECANCELED; i++) {
                        struct entry_look *l = &g_array_index(chunk.looks, struct entry_look, i);
                        int e;

                        if (fill_cancelled(fill) || resync_stopped(fill)) {
                                r = -ECANCELED;
                                break;
                        }
                        e = sync_entry(v, bdfd, mdfd, l->name, true, depth, batch, &dir, fill, l);
                        if (e == -ECANCELED) {
                                r = e;
                                break;
                        }
                        if (e < 0) {
                                log_warn("Failed to mirror '%s' for offline use: %s", l->name,
                                         strerror(-e));
                                r = e;
                        }
                        if (batch_full(batch) && (e = batch_install(v, batch, fill)) < 0)
                                r = e;
                }
                chunk_clear(&chunk);
        }
        g_array_free(chunk.looks, TRUE);
        closedir(d);
        dirref_put(dir);
        if (r == -ECANCELED) {
                g_hash_table_destroy(seen);
                return r;
        }
        /* Entries the backing no longer has (and leftover temporaries): a name
         * its listing gave is there, only the others are asked about. */
        dup_fd = openat(mdfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        d = dup_fd < 0 ? NULL : fdopendir(dup_fd);
        if (!d) {
                r = -errno;
                if (dup_fd >= 0)
                        close(dup_fd);
                g_hash_table_destroy(seen);
                return r;
        }
        while ((de = readdir(d))) {
                uint64_t count = note_count(de->d_name);

                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
                    mirror_tmp_own(de->d_name))
                        continue;
                if (mirror_is_tmp(de->d_name)) {
                        remove_tree(dirfd(d), de->d_name, 0);
                } else if (!g_hash_table_contains(seen, de->d_name) &&
                           fstatat(bdfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 &&
                           errno == ENOENT) {
                        remove_tree(dirfd(d), de->d_name, 0);
                        entry_settle(v, bdfd, dirfd(d), de->d_name, true, depth, count, false,
                                     0);
                }
        }
        closedir(d);
        g_hash_table_destroy(seen);
        return r;
}

static int sync_dir_children(struct view *v, int bdfd, int mdfd, int depth,
                             struct batch *batch, struct mirror_fill *fill)
{
        int outer_mdfd = walk_mdfd, r;
        char *outer_rel = walk_rel;

        walk_mdfd = mdfd;
        walk_rel = view_rel_path(v->mirror_fd, mdfd, NULL);
        r = sync_dir_entries(v, bdfd, mdfd, depth, batch, fill);
        g_free(walk_rel);
        walk_mdfd = outer_mdfd;
        walk_rel = outer_rel;
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

static int open_beneath(int dfd, const char *path, int flags);

/*
 * Opens directory @parts[0..@n) of the backing (*bdfd) and of the mirror
 * (*mdfd), through no symlink: false when either is not there as such.
 */
static bool open_pair_at(struct view *v, gchar **parts, unsigned n, int *bdfd, int *mdfd)
{
        gchar *rest = parts[n], *dir;

        parts[n] = NULL;
        dir = g_strjoinv("/", parts);
        parts[n] = rest;
        *bdfd = open_beneath(v->root_fd, dir, O_RDONLY | O_DIRECTORY);
        *mdfd = *bdfd >= 0 ? open_beneath(v->mirror_fd, dir, O_RDONLY | O_DIRECTORY) : -1;
        g_free(dir);
        if (*mdfd >= 0)
                return true;
        if (*bdfd >= 0)
                close(*bdfd);
        *bdfd = -1;
        return false;
}

/*
 * Makes mirror entry @rel what the backing's is, with the directories on its
 * way; with @synced, only its last @synced components are synced, those above
 * taken as they are when both trees have them (a change's note: what it
 * changed is the entry and its directory).
 * The caller holds mode_lock (shared or exclusive) and the view is online.
 */
static int sync_path_from(struct view *v, const char *rel, unsigned synced, bool recursive,
                          struct mirror_fill *fill)
{
        gchar **parts = components(rel);
        unsigned n = g_strv_length(parts), taken = synced && n > synced ? n - synced : 0;
        struct dirref *dir = NULL;
        struct batch batch;
        unsigned first = 0;
        int bdfd, mdfd, r = 0;

        batch_init(&batch);
        if (v->mirror_fd < 0) {
                g_strfreev(parts);
                return -ENOTDIR;
        }
        if (taken && open_pair_at(v, parts, taken, &bdfd, &mdfd)) {
                first = taken;
        } else {
                bdfd = openat(v->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                mdfd = openat(v->mirror_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        }
        if (bdfd < 0 || mdfd < 0) {
                r = -errno;
                goto out;
        }
        if (!parts[0]) {
                struct mirror_base b;
                struct stat st;

                r = sync_dir_children(v, bdfd, mdfd, 0, &batch, fill);
                r = batch_end(v, &batch, fill, r);
                if (r != -ECANCELED && fstat(bdfd, &st) == 0) {
                        base_from_stat(&b, &st, MIRROR_COMPLETE);
                        set_owner_mode_times(mdfd, ".", &st);
                        mirror_set_base(mdfd, "", &b);
                }
                goto out;
        }
        for (unsigned i = first; parts[i] && r == 0; i++) {
                bool last = !parts[i + 1];
                struct stat st;
                int nb, nm;

                if (last) {
                        /* A single file is copied and made durable by itself. */
                        bool one_file = fstatat(bdfd, parts[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                                        S_ISREG(st.st_mode);

                        r = sync_entry(v, bdfd, mdfd, parts[i], recursive, 0,
                                       one_file ? NULL : &batch, &dir, fill, NULL);
                        dirref_put(dir);
                        r = batch_end(v, &batch, fill, r);
                        break;
                }
                r = sync_entry(v, bdfd, mdfd, parts[i], false, 0, NULL, NULL, NULL, NULL);
                if (r < 0)
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
        batch_free(&batch);
        store_batch_commit(v->store);
        if (bdfd >= 0)
                close(bdfd);
        if (mdfd >= 0)
                close(mdfd);
        g_strfreev(parts);
        return r;
}

static int sync_path(struct view *v, const char *rel, bool recursive, struct mirror_fill *fill)
{
        return sync_path_from(v, rel, 0, recursive, fill);
}

int mirror_fill_path(struct view *v, const char *rel, bool recursive, struct mirror_fill *fill)
{
        int r = -EHOSTDOWN;

        /* Never while offline: the mirror then holds changes the server lacks. */
        view_change_begin(v);
        if (!view_offline(v))
                r = sync_path(v, rel, recursive, fill);
        view_change_end(v);
        return r;
}

int mirror_sync_path(struct view *v, const char *rel, bool recursive)
{
        return mirror_fill_path(v, rel, recursive, NULL);
}

static int resync_pin(void *ud, const char *path, int prio)
{
        int r;

        /* Gone offline meanwhile: the mirror holds changes the server lacks now. */
        if (view_offline(ud) || resync_stopped(NULL))
                return -EHOSTDOWN;
        __atomic_store_n(&resync_prio, prio, __ATOMIC_RELAXED);
        r = sync_path(ud, path, true, NULL);
        __atomic_store_n(&resync_prio, -1, __ATOMIC_RELAXED);

        if (r == -ECANCELED)
                return -EHOSTDOWN;      /* given up on: the rest is not walked */
        if (r < 0)
                log_warn("Failed to mirror pinned '%s' for offline use: %s", path, strerror(-r));
        return 0;
}

int mirror_sync_all(struct view *v)
{
        int r;

        /* What the walk puts or finds in place needs no reopening after it. */
        store_containers_note_begin(v->store);
        r = store_pin_foreach(v->store, resync_pin, v);
        if (r == -EHOSTDOWN) {
                store_containers_note_end(v->store);
                return r;
        }
        prune_links(v);
        store_check_containers(v->store);
        mirror_check_cached(v);
        /* Offline meanwhile, the check of the cached ones confirmed none. */
        if (r == 0 && !view_offline(v))
                backing_numbering_settle(v);
        return r;
}

/*
 * What the replay wrote: server inode -> the server file's identity after
 * and the mirror file's whose bytes it got.  The resync's look-up takes a
 * pair found unchanged on both sides as holding the same bytes (no read of
 * the server's file back); emptied once a resync went through.
 */
struct replayed {
        struct stat server, local;
};
#define REPLAYED_MAX 1000000
static pthread_mutex_t replayed_lock = PTHREAD_MUTEX_INITIALIZER;
static GHashTable *replayed_files;      /* under replayed_lock */

static bool same_file_version(const struct stat *a, const struct stat *b)
{
        return a->st_ino == b->st_ino && a->st_size == b->st_size &&
               timespec_ns(&a->st_mtim) == timespec_ns(&b->st_mtim) &&
               timespec_ns(&a->st_ctim) == timespec_ns(&b->st_ctim);
}

void mirror_note_replayed(struct view *v, const struct stat *server, const struct stat *local)
{
        struct replayed *r;

        (void)v;
        pthread_mutex_lock(&replayed_lock);
        if (!replayed_files)
                replayed_files = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, g_free);
        if (g_hash_table_size(replayed_files) < REPLAYED_MAX) {
                r = g_new(struct replayed, 1);
                r->server = *server;
                r->local = *local;
                g_hash_table_replace(replayed_files, &r->server.st_ino, r);
        }
        pthread_mutex_unlock(&replayed_lock);
}

void mirror_note_restamped(struct view *v, const struct stat *before, const struct stat *after)
{
        uint64_t ino = after->st_ino;
        struct replayed *r;

        (void)v;
        pthread_mutex_lock(&replayed_lock);
        r = replayed_files ? g_hash_table_lookup(replayed_files, &ino) : NULL;
        /* Only from the version the replay wrote: another's change since is not taken. */
        if (r && same_file_version(&r->server, before) && before->st_size == after->st_size)
                r->server = *after;
        pthread_mutex_unlock(&replayed_lock);
}

static bool replayed_same(const struct stat *bst, const struct stat *mst)
{
        uint64_t ino = bst->st_ino;
        struct replayed *r;
        bool same = false;

        pthread_mutex_lock(&replayed_lock);
        r = replayed_files ? g_hash_table_lookup(replayed_files, &ino) : NULL;
        if (r)
                same = same_file_version(&r->server, bst) && same_file_version(&r->local, mst);
        pthread_mutex_unlock(&replayed_lock);
        return same;
}

static void replayed_forget(void)
{
        pthread_mutex_lock(&replayed_lock);
        if (replayed_files)
                g_hash_table_remove_all(replayed_files);
        pthread_mutex_unlock(&replayed_lock);
}

/*
 * The resync after a reconnect, bounded by BackingTimeout: the walk runs on
 * a thread of its own (backing_call_moving), each look-up, copy and chunk
 * copied a sign of life; the caller gives up when none came for
 * BackingTimeout.  The walk given up on puts nothing more in place: it
 * stops at its next entry (the entry in progress when the server answers
 * again may still land) and no resync starts before it ended.  One volume
 * per process: the state is this file's.
 */
static pthread_mutex_t resync_lock = PTHREAD_MUTEX_INITIALIZER;
static struct backing_progress *resync_progress;       /* under resync_lock */
static bool resync_busy, resync_stop;

/* A one-name fetch's copy (mirror_fetch_name()), on its own thread. */
static __thread struct backing_progress *fetch_progress;

static void resync_step(void)
{
        if (fetch_progress) {
                backing_progress_step(fetch_progress);
                return;
        }
        pthread_mutex_lock(&resync_lock);
        if (resync_progress)
                backing_progress_step(resync_progress);
        pthread_mutex_unlock(&resync_lock);
}

/* A walk without a pin's pass (the resync's, a change's note) stops once the
 * resync, or the note's request, gave up on it. */
static bool resync_stopped(const struct mirror_fill *fill)
{
        return !fill && (__atomic_load_n(&resync_stop, __ATOMIC_ACQUIRE) ||
                         backing_call_abandoned());
}

static int resync_work(void *arg, struct backing_progress *p)
{
        struct view *v = arg;
        int r;

        pthread_mutex_lock(&resync_lock);
        resync_progress = p;
        pthread_mutex_unlock(&resync_lock);
        r = resync_stopped(NULL) ? -ECANCELED : mirror_sync_all(v);
        if (r == 0)
                replayed_forget();
        pthread_mutex_lock(&resync_lock);
        resync_progress = NULL;
        pthread_mutex_unlock(&resync_lock);
        __atomic_store_n(&resync_busy, false, __ATOMIC_RELEASE);
        return r == -ETIMEDOUT ? -EIO : r;      /* -ETIMEDOUT: the wait's */
}

int mirror_resync(struct view *v)
{
        int r;

        if (__atomic_exchange_n(&resync_busy, true, __ATOMIC_ACQ_REL))
                return -EBUSY;  /* one given up on still waits on the server */
        __atomic_store_n(&resync_stop, false, __ATOMIC_RELEASE);
        r = backing_call_moving(v, resync_work, v, NULL, NULL);
        if (r == -ETIMEDOUT)
                __atomic_store_n(&resync_stop, true, __ATOMIC_RELEASE);
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
                mirror_dirs_changed();
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

static int open_beneath(int dfd, const char *path, int flags)
{
        struct open_how how = { .flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
                                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                           RESOLVE_NO_MAGICLINKS };
        int fd = (int)syscall(SYS_openat2, dfd, path, &how, sizeof(how));

        return fd < 0 ? -errno : fd;
}

/* open_beneath() of a regular file only (regular-file.h): a container's
 * name may be a FIFO or a device node by now. */
static int open_beneath_regular(int dfd, const char *path, int flags)
{
        int pfd = open_beneath(dfd, path, O_PATH), fd;

        if (pfd < 0)
                return pfd;
        fd = regular_reopen(pfd, flags, NULL);
        close(pfd);
        return fd;
}

/*
 * The store's container function: the mirror file at id->path, if it holds
 * exactly that identity: its base says so, and its own size and mtime are
 * still the base's (a change made offline moves them).
 */
static int container_open(void *ud, const struct store_identity *id)
{
        struct view *v = ud;
        struct mirror_base b;
        struct stat st;
        int fd, r;

        if (!id->path)
                return -ENOENT;
        fd = open_beneath_regular(v->mirror_fd, id->path, O_RDONLY | O_NOATIME);
        if (fd == -EPERM)
                fd = open_beneath_regular(v->mirror_fd, id->path, O_RDONLY);
        if (fd < 0)
                return fd;
        r = fstat(fd, &st) < 0 ? -errno : mirror_get_base(fd, NULL, &b);
        if (r == 0 && (b.ver.ino != id->ino || (int64_t)b.ver.size != id->size ||
                       b.ver.mtime_ns != id->mtime_ns || b.ver.ctime_ns != id->ctime_ns ||
                       st.st_size != id->size ||
                       timespec_ns(&st.st_mtim) != id->mtime_ns))
                r = -ESTALE;
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
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
        v->mirror_mount_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        g_free(dir);
        if (v->mirror_fd < 0 || v->mirror_mount_fd < 0 || fstat(v->mirror_fd, &st) < 0)
                return -errno;
        v->mirror_dev = st.st_dev;
        dir = g_build_filename(v->cfg->cache_dir, "mirror.links", NULL);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                log_warn("Failed to create %s (hard links are mirrored as copies): %m", dir);
        v->mirror_links_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        g_free(dir);
        store_set_container_fn(v->store, container_open, v);
        store_set_unpinned_fns(v->store, cache_complete, container_remove);
        store_check_containers(v->store);
        return 0;
}

static uint64_t dirs_gen = 1;

uint64_t mirror_dirs_gen(void)
{
        return __atomic_load_n(&dirs_gen, __ATOMIC_ACQUIRE);
}

void mirror_dirs_changed(void)
{
        __atomic_add_fetch(&dirs_gen, 1, __ATOMIC_RELEASE);
}

/*
 * Whether a change to an entry of directory dfd (of the tree served online)
 * must reach the mirror before close(2) returns: the directory is complete
 * (pinned) there, so offline would serve that entry.  When in doubt, yes.
 */
bool mirror_keeps_current(struct view *v, int dfd, bool *absent)
{
        struct mirror_base b;
        char *rel = view_rel_path(v->root_fd, dfd, NULL);
        int r;

        *absent = false;
        if (!rel)
                return true;
        r = mirror_get_base(v->mirror_fd, strcmp(rel, ".") ? rel : NULL, &b);
        g_free(rel);
        *absent = r == -ENOENT;
        if (r == -ENOENT || r == -ENODATA)
                return false;
        return r < 0 || (b.flags & MIRROR_COMPLETE);
}

/* Whether the directory mirror entry @rel would be in is complete. */
static bool mirror_dir_complete(struct view *v, const char *rel)
{
        char *dir = g_path_get_dirname(rel);
        struct mirror_base d;
        bool complete;

        complete = mirror_get_base(v->mirror_fd, strcmp(dir, ".") ? dir : NULL, &d) == 0 &&
                   (d.flags & MIRROR_COMPLETE);
        g_free(dir);
        return complete;
}

void mirror_note_change(struct view *v, int dfd, const char *name)
{
        char *rel = view_rel_path(v->root_fd, dfd, name);
        const char *slash;
        int r;

        if (!rel || !strcmp(rel, ".")) {
                g_free(rel);
                return;
        }
        slash = strrchr(rel, '/');
        note_begins(slash ? slash + 1 : rel);   /* before the server is looked at */
        /* Only what lies in a complete (pinned) directory is kept current. */
        if (mirror_dir_complete(v, rel)) {
                /* A file created and still being written through every
                 * copy at a switch offline has no mirror object until a
                 * copy completes (copy_to_tmp()).  The directories above
                 * its own did not change with it (the hoard walk takes
                 * other clients' changes there). */
                r = sync_path_from(v, rel, 2, true, NULL);
                if (r < 0)
                        log_warn("Failed to bring the offline mirror of '%s' up to date: %s"
                                 " (the hoard walk retries)", rel, strerror(-r));
        } else {
                drop_moved_cached(v, dfd, name, rel);
        }
        g_free(rel);
}

/* Whether mirror entry @rel is a copy of server object @st (its base names
 * the object's inode) in a complete directory. */
static bool mirror_copy_of(struct view *v, const char *rel, const struct stat *st)
{
        struct mirror_base b;

        return mirror_get_base(v->mirror_fd, rel, &b) == 0 && b.ver.ino == st->st_ino &&
               mirror_dir_complete(v, rel);
}

/*
 * The copies at and under mirror entry @rel (dfd/name) moved there: the
 * store serves each regular file's from there, as the version its base
 * names (a rename moved the server's ctime: the next validation asks).
 */
static void containers_moved(struct view *v, int dfd, const char *name, const char *rel)
{
        struct mirror_base b;
        struct dirent *de;
        struct stat st;
        int fd;
        DIR *d;

        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return;
        if (S_ISREG(st.st_mode)) {
                if (mirror_get_base(dfd, name, &b) < 0)
                        return;
                st.st_ino = b.ver.ino;
                st.st_size = (off_t)b.ver.size;
                st.st_mtim = ns_timespec(b.ver.mtime_ns);
                st.st_ctim = ns_timespec(b.ver.ctime_ns);
                if (store_set_container(v->store, &st, rel) < 0)
                        log_warn("Failed to record the mirror's copy of '%s' in the store", rel);
                return;
        }
        if (!S_ISDIR(st.st_mode))
                return;
        fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        while ((de = readdir(d))) {
                char *sub;

                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
                    mirror_is_tmp(de->d_name))
                        continue;
                sub = g_build_filename(rel, de->d_name, NULL);
                containers_moved(v, dirfd(d), de->d_name, sub);
                g_free(sub);
        }
        closedir(d);
}

/*
 * An object renamed online keeps its inode on the server: its copy in the
 * mirror is moved too (exchanged, for RENAME_EXCHANGE) rather than copied
 * again at the new name and removed at the old; a directory's with all it
 * holds.  An open file the kernel passes through a copy keeps it under its
 * name, and no bytes are copied twice.  Only copies of the server's
 * objects, between complete directories; what a rename replaced at the new
 * name goes, as on the server.  The notes that follow find the copies in
 * place.
 */
void mirror_note_rename(struct view *v, int pfd, const char *name, int npfd,
                        const char *newname)
{
        char *from, *to;
        struct stat moved, back;
        bool exchanged;

        note_begins(name);
        note_begins(newname);
        from = view_rel_path(v->root_fd, pfd, name);
        to = view_rel_path(v->root_fd, npfd, newname);
        if (!from || !to || !strcmp(from, ".") || !strcmp(to, ".") ||
            fstatat(npfd, newname, &moved, AT_SYMLINK_NOFOLLOW) < 0)
                goto out;
        exchanged = fstatat(pfd, name, &back, AT_SYMLINK_NOFOLLOW) == 0;
        if (!exchanged && errno != ENOENT)
                goto out;
        if (!mirror_copy_of(v, from, &moved) || !mirror_dir_complete(v, to) ||
            (exchanged && !mirror_copy_of(v, to, &back)))
                goto out;
        if (renameat2(v->mirror_fd, from, v->mirror_fd, to, exchanged ? RENAME_EXCHANGE : 0) < 0)
                goto out;
        containers_moved(v, v->mirror_fd, to, to);
        if (exchanged)
                containers_moved(v, v->mirror_fd, from, from);
out:
        g_free(to);
        g_free(from);
}

uint64_t mirror_copy_ino(struct view *v, int dfd, const char *name)
{
        char *rel = view_rel_path(v->root_fd, dfd, name);
        struct mirror_base b;
        uint64_t ino = 0;

        if (rel && strcmp(rel, ".") && mirror_get_base(v->mirror_fd, rel, &b) == 0)
                ino = b.ver.ino;
        g_free(rel);
        return ino;
}

int mirror_open_copy(struct view *v, int dfd, const char *name, uint64_t ino)
{
        char *rel = view_rel_path(v->root_fd, dfd, name), *dir;
        struct mirror_base b;
        struct stat st;
        int fd = -ENOENT, r;

        if (!rel || !strcmp(rel, ".")) {
                g_free(rel);
                return -ENOENT;
        }
        dir = g_path_get_dirname(rel);
        r = mirror_get_base(v->mirror_fd, strcmp(dir, ".") ? dir : NULL, &b);
        if (r == 0 && (b.flags & MIRROR_COMPLETE))
                fd = open_beneath_regular(v->mirror_fd, rel, O_WRONLY);
        /* The server's object, alone: not a file made offline nor one shared
         * with other names or the store. */
        if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
                        mirror_get_base(fd, NULL, &b) < 0 || b.ver.ino != ino)) {
                close(fd);
                fd = -ENOENT;
        }
        g_free(dir);
        g_free(rel);
        return fd;
}

/*
 * Unpinned containers.  A file read (or prefetched) completely while
 * unpinned moves from the store's blocks into the mirror at its path: the
 * store's content file is linked there (no copy) and its blocks go, so the
 * mirror holds every whole object the volume caches, and offline serves it.
 * The directories on its way are mirrored without MIRROR_COMPLETE: offline,
 * a name they lack stays EHOSTDOWN and they are not listed.  Such a
 * container is the store's: culled by removing it, removed when the server's
 * copy changes (store.h).
 */
struct cache_place {
        struct view *v;
        int mdfd;
        const char *name;
        const struct stat *bst;
};

/* The store's place function: its content file dirfd/cname becomes the
 * mirror's mdfd/name, with the server file's owner, mode, times and identity. */
static int place_cached(void *pud, int dirfd, const char *cname)
{
        struct cache_place *c = pud;
        struct stat mst, cst, st = *c->bst;
        bool here = false;
        uint64_t lid;
        char tmp[64];
        int r;

        /* Its atime is when it was read whole here, its last use as far as
         * the file can tell (reads of it are O_NOATIME): a lost index takes
         * the cull's order back from it (view-reindex.c). */
        clock_gettime(CLOCK_REALTIME, &st.st_atim);

        /* Never over something the mirror holds for itself: a directory, a
         * file made offline, a shared object (but this very file, put there
         * by a worker that died before the store's rows said so), a file of
         * a pinned directory (the pin's copy, whatever the store's pin mark
         * says: marks go by the server's numbers, which a remount changes). */
        if (fstatat(c->mdfd, c->name, &mst, AT_SYMLINK_NOFOLLOW) == 0) {
                struct mirror_base db;

                if (mirror_get_base(c->mdfd, NULL, &db) == 0 && (db.flags & MIRROR_COMPLETE))
                        return -EEXIST;
                here = fstatat(dirfd, cname, &cst, 0) == 0 && cst.st_ino == mst.st_ino &&
                       cst.st_dev == mst.st_dev;
                if (!S_ISREG(mst.st_mode) || mirror_get_lid(c->mdfd, c->name, &lid) == 0 ||
                    (mst.st_nlink > 1 && !here))
                        return -EEXIST;
        }
        /* A rename onto another link of the same file does nothing: the
         * temporary would stay, one more link the file shows offline. */
        if (here) {
                r = prepare(c->mdfd, c->name, &st, 0);
        } else {
                mirror_tmp_name(tmp, sizeof(tmp));
                if (linkat(dirfd, cname, c->mdfd, tmp, 0) < 0)
                        return -errno;
                r = prepare(c->mdfd, tmp, &st, 0);
                if (r == 0 && renameat(c->mdfd, tmp, c->mdfd, c->name) < 0)
                        r = -errno;
                unlinkat(c->mdfd, tmp, 0);      /* a link since, as above */
        }
        if (r == 0)
                fault_point(FAULT_VIEW_CACHE_PLACED);
        return r;
}

/*
 * What caching a file asks the server, on a helper under BackingTimeout and
 * before the switch's lock (a server that stops answering then holds no
 * switch up): the file's stat, its volume path, and the stat of each
 * directory on its way from the root.  Owns its descriptors: a helper given
 * up on goes on with them.
 */
struct cache_look {
        int root_fd, bdfd;
        char *name;
        struct stat bst;
        char *rel;              /* the file's volume path */
        gchar **parts;          /* the directories on its way */
        struct entry_look *dirs;
};

static void cache_look_free(void *arg)
{
        struct cache_look *l = arg;

        if (l->root_fd >= 0)
                close(l->root_fd);
        if (l->bdfd >= 0)
                close(l->bdfd);
        free(l->name);
        g_free(l->rel);
        g_strfreev(l->parts);
        g_free(l->dirs);
        free(l);
}

static int cache_look_run(void *arg)
{
        struct cache_look *l = arg;
        const char *name = l->name ? l->name : "";
        gchar *dir;
        unsigned n;
        int d, r;

        if (fstatat(l->bdfd, name, &l->bst, AT_SYMLINK_NOFOLLOW | (*name ? 0 : AT_EMPTY_PATH)) < 0)
                return -errno;
        /* A file of several names stays in blocks (the mirror keeps links
         * of pinned files only). */
        if (!S_ISREG(l->bst.st_mode) || l->bst.st_nlink != 1)
                return -EMLINK;
        l->rel = view_rel_path(l->root_fd, l->bdfd, l->name);
        if (!l->rel)
                return -ENAMETOOLONG;
        if (!strcmp(l->rel, "."))
                return -EISDIR;
        dir = g_path_get_dirname(l->rel);
        l->parts = components(dir);
        g_free(dir);
        n = g_strv_length(l->parts);
        l->dirs = g_new0(struct entry_look, n ? n : 1);
        d = fcntl(l->root_fd, F_DUPFD_CLOEXEC, 0);
        if (d < 0)
                return -errno;
        r = 0;
        for (unsigned i = 0; i < n; i++) {
                struct entry_look *e = &l->dirs[i];
                int nd;

                e->name = l->parts[i];
                e->same = -1;
                e->err = fstatat(d, e->name, &e->bst, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
                if (e->err == 0 && !S_ISDIR(e->bst.st_mode))
                        e->err = -ENOTDIR;
                if (e->err < 0) {
                        r = e->err;
                        break;
                }
                nd = openat(d, e->name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                close(d);
                d = nd;
                if (d < 0) {
                        r = -errno;
                        break;
                }
        }
        if (d >= 0)
                close(d);
        return r;
}

/* The caller holds mode_lock, online: the mirror directory of l's file,
 * made (not complete) where it is missing, as an O_RDONLY descriptor; or
 * -errno. */
static int cached_dir(struct view *v, struct cache_look *l)
{
        int mdfd = openat(v->mirror_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

        if (mdfd < 0)
                return -errno;
        for (unsigned i = 0; l->parts[i]; i++) {
                int nm;

                r = sync_entry(v, -1, mdfd, l->parts[i], false, 0, NULL, NULL, NULL, &l->dirs[i]);
                if (r < 0)
                        break;
                nm = openat(mdfd, l->parts[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (nm < 0)
                        r = -errno;
                close(mdfd);
                mdfd = nm;
                if (r < 0)
                        break;
        }
        if (r < 0 && mdfd >= 0)
                close(mdfd);
        return r < 0 ? r : mdfd;
}

int mirror_cache_file(struct view *v, int bdfd, const char *name)
{
        struct cache_place c = { .v = v };
        struct cache_look *l = calloc(1, sizeof(*l));
        gchar *base = NULL;
        int r;

        fault_point(FAULT_VIEW_CACHE_FILE);
        if (!l)
                return -ENOMEM;
        /* Offline the server is not asked (checked again under the lock). */
        if (view_offline(v) || v->mirror_fd < 0) {
                free(l);
                return -EHOSTDOWN;
        }
        l->root_fd = fcntl(v->root_fd, F_DUPFD_CLOEXEC, 0);
        l->bdfd = fcntl(bdfd, F_DUPFD_CLOEXEC, 0);
        l->name = name ? strdup(name) : NULL;
        if (l->root_fd < 0 || l->bdfd < 0 || (name && !l->name)) {
                r = l->root_fd < 0 || l->bdfd < 0 ? -errno : -ENOMEM;
                cache_look_free(l);
                return r;
        }
        r = backing_call(v, cache_look_run, l, cache_look_free);
        if (r == -ETIMEDOUT)
                return r;       /* the helper frees l */
        if (r < 0)
                goto out;
        /* No switch meanwhile; not a change through the view (which would
         * keep view-revalidate.c's pass from answering lookups). */
        pthread_rwlock_rdlock(&v->mode_lock);
        r = -EHOSTDOWN;
        if (!view_offline(v) && v->mirror_fd >= 0) {
                base = g_path_get_basename(l->rel);
                c.mdfd = cached_dir(v, l);
                c.name = base;
                c.bst = &l->bst;
                r = c.mdfd;
                if (r >= 0) {
                        r = store_make_container(v->store, &l->bst, l->rel, place_cached, &c);
                        close(c.mdfd);
                }
        }
        pthread_rwlock_unlock(&v->mode_lock);
out:
        if (r < 0 && r != -EAGAIN && r != -EHOSTDOWN && r != -EMLINK && r != -EISDIR)
                log_debug("The cached copy of '%s' stays in the store's blocks: %s",
                          l->rel ? l->rel : name ? name : ".", strerror(-r));
        g_free(base);
        cache_look_free(l);
        return r;
}

/* Objects told complete by the store, moved into the mirror by one thread. */
static GAsyncQueue *cache_queue;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static struct view *cache_view;
/* How many were queued and how many moved (or given up on), for a switch
 * into the mirror to wait for: mirror_cache_wait(). */
static pthread_mutex_t cache_count_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cache_moved = PTHREAD_COND_INITIALIZER;
static uint64_t cache_queued, cache_done;
static bool cache_running;

static void cache_by_ino(struct view *v, uint64_t ino)
{
        fuse_ino_t id = vnode_id_of_ino(v, ino);
        struct vnode *p;
        uint64_t parent;
        char *name = NULL;
        int pfd, r = -ENOENT;

        /* The name the node table knows it by (a file read through the view). */
        if (id && vnode_parent_of(v, id, 0, &parent, &name) == 0) {
                pfd = r = vnode_get(v, parent, &p);
                if (pfd >= 0) {
                        r = mirror_cache_file(v, pfd, name);
                        vnode_put(v, p);
                }
        }
        g_free(name);
        /* Kept in blocks for now, not for good (several names, a path too
         * long): offline serves containers only, so a later open tries again. */
        if (r < 0 && r != -EMLINK && r != -EISDIR && r != -ENAMETOOLONG)
                store_complete_untold(v->store, ino);
}

static void *cache_thread(void *arg)
{
        (void)arg;
        for (;;) {
                uint64_t *ino = g_async_queue_pop(cache_queue);

                cache_by_ino(cache_view, *ino);
                g_free(ino);
                pthread_mutex_lock(&cache_count_lock);
                cache_done++;
                pthread_cond_broadcast(&cache_moved);
                pthread_mutex_unlock(&cache_count_lock);
        }
        return NULL;
}

static void cache_start(void)
{
        pthread_t t;

        cache_queue = g_async_queue_new();
        if (pthread_create(&t, NULL, cache_thread, NULL) == 0) {
                pthread_detach(t);
                cache_running = true;
        } else
                log_warn("Failed to start the thread that moves cached files into the mirror");
}

static void cache_complete(void *ud, uint64_t ino)
{
        cache_view = ud;
        pthread_once(&cache_once, cache_start);
        pthread_mutex_lock(&cache_count_lock);
        if (cache_running)
                cache_queued++;
        pthread_mutex_unlock(&cache_count_lock);
        g_async_queue_push(cache_queue, g_memdup2(&ino, sizeof(ino)));
}

bool mirror_cache_wait(uint64_t ms)
{
        struct timespec until;
        uint64_t target;
        bool done;

        deadline_from_now(&until, CLOCK_REALTIME, ms);
        pthread_mutex_lock(&cache_count_lock);
        target = cache_queued;
        while (cache_done < target &&
               (ms ? pthread_cond_timedwait(&cache_moved, &cache_count_lock, &until) :
                     pthread_cond_wait(&cache_moved, &cache_count_lock)) != ETIMEDOUT)
                ;
        done = cache_done >= target;
        pthread_mutex_unlock(&cache_count_lock);
        return done;
}

/* Removes empty directories on the way to @rel that only cached files made. */
static void prune_cached_dirs(struct view *v, const char *rel)
{
        char *dir = g_path_get_dirname(rel);

        while (strcmp(dir, ".") && strcmp(dir, "/")) {
                char *up = g_path_get_dirname(dir), *base = g_path_get_basename(dir);
                struct mirror_base b;
                uint64_t lid;
                int ufd = strcmp(up, ".") ? open_beneath(v->mirror_fd, up, O_PATH | O_DIRECTORY)
                                          : dup(v->mirror_fd);
                bool gone = ufd >= 0 && mirror_get_base(ufd, base, &b) == 0 &&
                            !(b.flags & MIRROR_COMPLETE) &&
                            mirror_get_lid(ufd, base, &lid) < 0 &&
                            unlinkat(ufd, base, AT_REMOVEDIR) == 0;

                if (ufd >= 0)
                        close(ufd);
                g_free(base);
                g_free(dir);
                dir = up;
                if (!gone)
                        break;
        }
        g_free(dir);
}

/* The entry @rel of the mirror, if it is the regular file of descriptor fd. */
static int remove_entry_of(struct view *v, const char *rel, int fd)
{
        char *dir = g_path_get_dirname(rel), *base = g_path_get_basename(rel);
        int dfd = strcmp(dir, ".") ? open_beneath(v->mirror_fd, dir, O_PATH | O_DIRECTORY)
                                   : dup(v->mirror_fd);
        struct stat a, b;
        int r = dfd < 0 ? dfd : 0;

        if (r == 0 && (fstat(fd, &a) < 0 || fstatat(dfd, base, &b, AT_SYMLINK_NOFOLLOW) < 0))
                r = -errno;
        if (r == 0 && (a.st_ino != b.st_ino || a.st_dev != b.st_dev))
                r = -ESTALE;
        if (r == 0 && unlinkat(dfd, base, 0) < 0)
                r = -errno;
        if (dfd >= 0)
                close(dfd);
        g_free(dir);
        g_free(base);
        if (r == 0)
                prune_cached_dirs(v, rel);
        return r;
}

int mirror_remove_cached(struct view *v, const char *rel, int fd)
{
        return remove_entry_of(v, rel, fd);
}

/* The store's remove function: the container at id->path goes if it still
 * holds exactly that identity (not a pin's copy or an offline edit since). */
static int container_remove(void *ud, const struct store_identity *id)
{
        struct view *v = ud;
        int fd = container_open(ud, id), r;

        if (fd < 0)
                return fd;
        r = remove_entry_of(v, id->path, fd);
        close(fd);
        return r;
}

/* The server's file at a volume path, as a helper stats it. */
struct server_look {
        int root_fd;
        char *path;
        struct stat st;
};

static void server_look_free(void *arg)
{
        struct server_look *l = arg;

        if (l->root_fd >= 0)
                close(l->root_fd);
        g_free(l->path);
        g_free(l);
}

static int server_look_run(void *arg)
{
        struct server_look *l = arg;
        int fd = open_beneath(l->root_fd, l->path, O_PATH), r;

        r = fd < 0 ? fd : fstat(fd, &l->st) < 0 ? -errno : 0;
        if (fd >= 0)
                close(fd);
        return r;
}

/* After a reconnect: is the server's file at id->path still of that
 * identity?  0 yes; -ESTALE changed, or no longer at that path; another
 * error (a server that does not answer) says nothing. */
static int cached_on_server(void *ud, const struct store_identity *id)
{
        struct view *v = ud;
        struct server_look *l;
        int r;

        if (view_offline(v))
                return -EHOSTDOWN;      /* unbounded calls now: the reconnect checks again */
        fault_point(FAULT_VIEW_CHECK_CACHED);
        l = g_new0(struct server_look, 1);
        l->root_fd = fcntl(v->root_fd, F_DUPFD_CLOEXEC, 0);
        l->path = g_strdup(id->path);
        if (l->root_fd < 0) {
                r = -errno;
                server_look_free(l);
                return r;
        }
        r = backing_call_bounded(v, server_look_run, l, server_look_free);
        if (r == -ETIMEDOUT)
                return r;       /* l is the helper's now */
        if (r == 0 && (l->st.st_ino != id->ino || l->st.st_size != id->size ||
                       timespec_ns(&l->st.st_mtim) != id->mtime_ns ||
                       timespec_ns(&l->st.st_ctim) != id->ctime_ns))
                r = -ESTALE;
        if (r == -ENOENT || r == -ENOTDIR || r == -ELOOP || r == -EXDEV)
                r = -ESTALE;
        server_look_free(l);
        return r;
}

/* A stale container's mirror file goes, also one edited offline (its edit
 * has been replayed), unless conflicts hold records of the log. */
static int remove_stale_cached(void *ud, const struct store_identity *id)
{
        struct view *v = ud;
        struct mirror_base b;
        struct stat st;
        int fd = open_beneath_regular(v->mirror_fd, id->path, O_RDONLY), r = -ENOENT;

        if (fd >= 0 && !__atomic_load_n(&v->conflicts, __ATOMIC_RELAXED) &&
            mirror_get_base(fd, NULL, &b) == 0 && b.ver.ino == id->ino &&
            fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1)
                r = remove_entry_of(v, id->path, fd);
        if (fd >= 0)
                close(fd);
        return r;
}

void mirror_check_cached(struct view *v)
{
        int n = store_check_unpinned(v->store, cached_on_server, remove_stale_cached);

        if (n)
                log_info("Dropped %d cached files the server changed meanwhile", n);
}

/*
 * A change online to dfd/name in a directory the mirror does not keep
 * complete: a cached container there that no longer is the server's file at
 * that name (renamed, removed, replaced) goes.
 */
static void drop_moved_cached(struct view *v, int dfd, const char *name, const char *rel)
{
        struct sobj_info info;
        struct mirror_base b;
        struct stat bst, mst;
        uint64_t lid;
        int fd = open_beneath_regular(v->mirror_fd, rel, O_RDONLY), r;

        if (fd < 0)
                return;
        r = fstatat(dfd, name ? name : "", &bst,
                    AT_SYMLINK_NOFOLLOW | (name && *name ? 0 : AT_EMPTY_PATH));
        /* A file pinned by itself is the hoard walk's to bring up to date. */
        if (fstat(fd, &mst) == 0 && S_ISREG(mst.st_mode) && mst.st_nlink == 1 &&
            mirror_get_base(fd, NULL, &b) == 0 && mirror_get_lid(fd, NULL, &lid) < 0 &&
            (store_info_ino(v->store, b.ver.ino, &info) < 0 || info.pin < 0) &&
            (r < 0 || (uint64_t)bst.st_ino != b.ver.ino || bst.st_size != (off_t)b.ver.size ||
             timespec_ns(&bst.st_mtim) != b.ver.mtime_ns))
                remove_entry_of(v, rel, fd);
        close(fd);
}

/*
 * One name fetched in write-back (mirror_fetch_name()).  The backing's side
 * runs on a thread of its own, bounded by BackingTimeout of no progress
 * (each chunk copied is a sign of life); it makes the object as a
 * temporary of the mirror directory, with the server's identity as its
 * base, and the requester puts it in place.  Abandoned, the thread removes
 * its temporary whenever the server lets it finish.
 */
struct name_fetch {
        int root_fd, mdfd;      /* dups: the backing root, the mirror directory */
        char *rel, *name;       /* the directory's volume path, the name */
        uint64_t dir_ino;       /* the directory's server inode (0: the root) */
        bool links;             /* a pin's: a file with several names is one object */
        uint64_t room;          /* bytes a file may have (CacheSize) */
        struct stat bst;        /* the server's object */
        char tmp[64];           /* the temporary made in mdfd, "" when none */
        int result;             /* of the work: 0 or -errno */
};

static void name_fetch_free(void *arg)
{
        struct name_fetch *f = arg;

        if (f->tmp[0])
                remove_tree(f->mdfd, f->tmp, 0);
        if (f->root_fd >= 0)
                close(f->root_fd);
        if (f->mdfd >= 0)
                close(f->mdfd);
        g_free(f->rel);
        g_free(f->name);
        g_free(f);
}

/* The server's object as a temporary of the mirror directory. */
static int fetch_as_tmp(struct name_fetch *f, int bdfd)
{
        char target[PATH_MAX + 1];
        ssize_t n;
        int r;

        switch (f->bst.st_mode & S_IFMT) {
        case S_IFREG:
                /* The mirror keeps the links of pinned files only. */
                if (f->bst.st_nlink > 1 && !f->links)
                        return -EMLINK;
                if ((uint64_t)f->bst.st_size > f->room)
                        return -EFBIG;
                r = copy_to_tmp(bdfd, f->mdfd, f->name, &f->bst, f->tmp, sizeof(f->tmp), true,
                                NULL);
                if (r < 0) {
                        f->tmp[0] = 0;  /* removed by copy_to_tmp() */
                        return r;
                }
                break;
        case S_IFDIR:
                mirror_tmp_name(f->tmp, sizeof(f->tmp));
                if (mkdirat(f->mdfd, f->tmp, 0700) < 0) {
                        f->tmp[0] = 0;
                        return -errno;
                }
                break;
        case S_IFLNK:
                n = readlinkat(bdfd, f->name, target, sizeof(target) - 1);
                if (n < 0)
                        return -errno;
                target[n] = 0;
                mirror_tmp_name(f->tmp, sizeof(f->tmp));
                if (symlinkat(target, f->mdfd, f->tmp) < 0) {
                        f->tmp[0] = 0;
                        return -errno;
                }
                break;
        default:
                return -EOPNOTSUPP;
        }
        /* Not complete (a directory): its names are fetched one by one too. */
        return prepare(f->mdfd, f->tmp, &f->bst, 0);
}

static int name_fetch_work(void *arg, struct backing_progress *p)
{
        struct name_fetch *f = arg;
        struct stat dst;
        int bdfd, r;

        fetch_progress = p;
        bdfd = open_beneath(f->root_fd, f->rel, O_RDONLY | O_DIRECTORY);
        r = bdfd < 0 ? bdfd : 0;
        /* The server's directory at that path must be the one the mirror
         * has (not one renamed locally and not shipped yet, nor another). */
        if (r == -ENOENT || r == -ENOTDIR ||
            (r == 0 && f->dir_ino && (fstat(bdfd, &dst) < 0 || (uint64_t)dst.st_ino != f->dir_ino)))
                r = -ESTALE;
        if (r == 0)
                r = fstatat(bdfd, f->name, &f->bst, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
        if (r == 0)
                r = fetch_as_tmp(f, bdfd);
        if (bdfd >= 0)
                close(bdfd);
        fetch_progress = NULL;
        f->result = r;
        return 0;       /* -ETIMEDOUT is the wait's alone: f is then the thread's */
}

/*
 * The fetched object goes in place, with mode_lock held exclusively: no
 * switch and no change half done (applied to the mirror, not yet logged)
 * meanwhile, so the log says all that was done to the directory.  Never
 * over anything the mirror has, but a refresh's file (@re) when
 * re->may_replace() lets it.
 */
static int fetch_place(struct view *v, struct name_fetch *f,
                       bool (*removed)(struct view *v, int mdfd, const char *name),
                       const struct mirror_refresh *re)
{
        bool linked = f->links && S_ISREG(f->bst.st_mode) && f->bst.st_nlink > 1;
        struct stat st;
        int r = 0;

        pthread_rwlock_wrlock(&v->mode_lock);
        if (__atomic_load_n(&v->state, __ATOMIC_ACQUIRE) != VIEW_WRITEBACK)
                r = -EAGAIN;            /* switched meanwhile: looked up again */
        else if (removed(v, f->mdfd, f->name))
                r = -ENOENT;
        else if (re && (!S_ISREG(f->bst.st_mode) || !re->may_replace(v, f->mdfd, f->name, re->ud)))
                r = -EBUSY;             /* changed locally meanwhile: it stays */
        else if (linked && !re && fstatat(f->mdfd, f->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                r = -EAGAIN;
        /* Another name of it was mirrored: this one becomes a link of that object
         * (under the lock, so two names fetched at once do not make two). */
        else if (linked && link_partner(v, f->mdfd, f->name, &f->bst) >= 0)
                r = 0;
        else if (re ? renameat(f->mdfd, f->tmp, f->mdfd, f->name) < 0
                    : renameat2(f->mdfd, f->tmp, f->mdfd, f->name, RENAME_NOREPLACE) < 0)
                r = errno == EEXIST ? -EAGAIN : -errno;
        else
                f->tmp[0] = 0;
        /* Put in place as the first name of its object: the next finds it. */
        if (r == 0 && linked && !f->tmp[0])
                index_links(v, f->mdfd, f->name, &f->bst);
        pthread_rwlock_unlock(&v->mode_lock);
        if (r == 0 && S_ISDIR(f->bst.st_mode))
                mirror_dirs_changed();
        return r;
}

/*
 * A fetched file is an unpinned container of the store's (counted against
 * CacheSize and culled as a file cached whole online is).  A change made to
 * it meanwhile leaves the mirror file unlike that identity: the store then
 * forgets it (container_open()), the mirror keeps it.
 */
static void fetch_index(struct view *v, struct name_fetch *f)
{
        char *path = g_build_filename(f->rel, f->name, NULL);
        struct store_identity id = {
                .ino = f->bst.st_ino, .size = f->bst.st_size,
                .mtime_ns = timespec_ns(&f->bst.st_mtim), .ctime_ns = timespec_ns(&f->bst.st_ctim),
                .path = path,
        };
        struct sobj_info info;
        struct sobj *o;
        int r;

        /* Blocks of an older read go: the container is the copy now.  (Not a
         * container of it: dropping that would remove this very file.) */
        if (store_info_ino(v->store, id.ino, &info) == 0 && !info.container && info.pin < 0)
                store_drop_ino(v->store, id.ino, false);
        r = store_reindex_container(v->store, &id, false);
        /* Validated against the identity just copied, which also dates its
         * use: culled in LRU order (not first, as a file never used would be). */
        if (r == 1 && store_obj_find(v->store, id.ino, &o) == 0) {
                store_obj_revalidate(v->store, o, &f->bst, true, NULL);
                store_obj_put(v->store, o);
        }
        if (r < 0)
                log_warn("Failed to index the fetched '%s' in the store (served from the"
                         " mirror, not culled): %s", path, strerror(-r));
        g_free(path);
        store_cull(v->store);   /* CacheSize holds for them too */
}

/* What a fetch's error answers: -ENOENT and -EAGAIN as they are, else
 * -EHOSTDOWN, logged with why. */
static int fetch_answer(struct view *v, const char *path, uint64_t size, uint64_t room, int r)
{
        if (r == -EFBIG)
                log_warn("Write-back: '%s' (%" PRIu64 " bytes) is larger than the room the cache"
                         " has for files outside the pins (%" PRIu64 " bytes: CacheSize less"
                         " Reserve and pinned files), not fetched: EHOSTDOWN", path, size, room);
        else if (r == -ETIMEDOUT)
                log_warn("Write-back: fetching '%s' got no answer from the server within"
                         " BackingTimeout (%" PRIu64 " ms): EHOSTDOWN", path,
                         v->cfg->backing_timeout_ms);
        else if (r == -ESTALE)
                log_info("Write-back: the server's directory of '%s' is not the one the mirror"
                         " has (moved locally or on the server): EHOSTDOWN", path);
        else if (r == -EMLINK)
                log_info("Write-back: '%s' has several links on the server (only pinned files'"
                         " links are mirrored): EHOSTDOWN", path);
        else if (r == -EOPNOTSUPP)
                log_info("Write-back: '%s' is neither a file, a directory nor a symlink on the"
                         " server: EHOSTDOWN", path);
        else if (r != -ENOENT && r != -EAGAIN)
                log_warn("Write-back: fetching '%s' from the server failed: %s: EHOSTDOWN", path,
                         strerror(-r));
        return r == -ENOENT || r == -EAGAIN ? r : -EHOSTDOWN;
}

static int fetch_name(struct view *v, int mdfd, const char *name,
                      bool (*removed)(struct view *v, int mdfd, const char *name),
                      const struct mirror_refresh *re, bool links, int *why)
{
        struct name_fetch *f = g_new0(struct name_fetch, 1);
        struct store_stats ss;
        struct mirror_base b;
        struct stat mst, root;
        uint64_t room;
        char *path;
        int r = 0;

        f->result = -EAGAIN;
        f->root_fd = fcntl(v->root_fd, F_DUPFD_CLOEXEC, 0);
        f->mdfd = fcntl(mdfd, F_DUPFD_CLOEXEC, 0);
        f->name = g_strdup(name);
        f->links = links && v->mirror_links_fd >= 0;
        if (f->root_fd < 0 || f->mdfd < 0 || fstat(mdfd, &mst) < 0 ||
            fstat(v->mirror_fd, &root) < 0)
                r = -errno;
        if (r == 0 && !(f->rel = view_rel_path(v->mirror_fd, mdfd, NULL)))
                r = -ENAMETOOLONG;
        /* A directory below the root names its server directory by its base. */
        if (r == 0 && (mst.st_ino != root.st_ino || mst.st_dev != root.st_dev)) {
                r = mirror_get_base(mdfd, NULL, &b) < 0 ? -ESTALE : 0;
                f->dir_ino = b.ver.ino;
        }
        store_get_stats(v->store, &ss);
        room = f->room = ss.capacity > ss.pinned ? ss.capacity - ss.pinned : 0;
        path = g_build_filename(f->rel ? f->rel : ".", name, NULL);
        if (r == 0)
                r = backing_call_moving(v, name_fetch_work, f, name_fetch_free, NULL);
        if (why)
                *why = r;
        if (r == -ETIMEDOUT) {
                /* f is the thread's now: it drops it when the server lets it end. */
                r = fetch_answer(v, path, 0, room, r);
                g_free(path);
                return r;
        }
        if (r == 0)
                r = f->result;
        if (r == 0)
                r = fetch_place(v, f, removed, re);
        if (r == 0 && (re || (f->links && S_ISREG(f->bst.st_mode) && f->bst.st_nlink > 1))) {
                /* As the resync's copy: the store's object (pinned or not) is this file
                 * now (a file with several names: not an unpinned container, whose
                 * cull would remove one name); the log's ids of a replaced object go. */
                note_container(v, mdfd, name, &f->bst);
                store_cull(v->store);
                vnode_ids_forget(v);
        } else if (r == 0 && S_ISREG(f->bst.st_mode)) {
                fetch_index(v, f);
        }
        if (why)
                *why = r;
        if (r < 0 && r != -EBUSY)
                r = fetch_answer(v, path, (uint64_t)f->bst.st_size, room, r);
        g_free(path);
        name_fetch_free(f);
        return r;
}

int mirror_fetch_name(struct view *v, int mdfd, const char *name,
                      bool (*removed)(struct view *v, int mdfd, const char *name), int *why)
{
        return fetch_name(v, mdfd, name, removed, NULL, false, why);
}

int writeback_fetch_name(struct view *v, int mdfd, const char *name)
{
        if (__atomic_load_n(&v->state, __ATOMIC_ACQUIRE) != VIEW_WRITEBACK)
                return -EHOSTDOWN;
        if (writeback_name_logged(v, mdfd, name)) {
                log_debug("Write-back: '%s' is named by a change not shipped yet (removed or"
                          " moved here): ENOENT, not fetched", name);
                return -ENOENT;
        }
        return mirror_fetch_name(v, mdfd, name, writeback_name_logged, NULL);
}

int mirror_fetch_pinned_name(struct view *v, int mdfd, const char *name,
                             bool (*removed)(struct view *v, int mdfd, const char *name),
                             int *why)
{
        return fetch_name(v, mdfd, name, removed, NULL, true, why);
}

int mirror_refresh_name(struct view *v, int mdfd, const char *name,
                        bool (*removed)(struct view *v, int mdfd, const char *name),
                        const struct mirror_refresh *re, int *why)
{
        return fetch_name(v, mdfd, name, removed, re, false, why);
}
