/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-ops.c: the FUSE low-level operations of a view, and its table of
 * open files.
 *
 * Every operation replies exactly once, with -errno from the backing as it
 * came.  The backing is reached only through descriptors and *at() calls.
 * Operations that create or change objects run with the caller's fsuid,
 * fsgid and groups (view-creds.c); lookups and the reopening of descriptors
 * run as root, the kernel having checked permissions (default_permissions).
 *
 * O_DIRECT policy: the view never passes O_DIRECT to the backing (unaligned
 * direct I/O would fail there), and does not answer FOPEN_DIRECT_IO either:
 * the kernel's own O_DIRECT path for FUSE bypasses its page cache for that
 * descriptor (every read and write reaches this process, no alignment
 * required) while keeping the cache coherent for buffered readers (it
 * invalidates what a direct write covers) and allowing a shared mmap, which
 * FOPEN_DIRECT_IO refuses (ENODEV).  Writes go straight through to the
 * backing and reads come from the store only when the copy is valid, exactly
 * as for any other open.
 *
 * Locks: POSIX record locks and flock() are left to the kernel (the view's
 * own lock table, shared by every local process); they are not forwarded to
 * the backing.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "view.h"
#include "fault.h"

/* A file's size, mtime and ctime as last seen (size -1: never), to tell
 * whether the kernel wrote it since (writes passed through are not seen).
 * ctime too: mtime may be set back (utimens) after a write of the same size. */
struct file_mark {
        struct timespec mtime, ctime;
        off_t size;
};

static bool same_time(const struct timespec *a, const struct timespec *b)
{
        return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

static bool mark_holds(const struct file_mark *m, const struct stat *st)
{
        return st->st_size == m->size && same_time(&st->st_mtim, &m->mtime) &&
               same_time(&st->st_ctim, &m->ctime);
}

static void mark_take(struct file_mark *m, const struct stat *st)
{
        m->mtime = st->st_mtim;
        m->ctime = st->st_ctim;
        m->size = st->st_size;
}

struct vfile {
        uint64_t fh;            /* immutable */
        uint64_t id;            /* nodeid, immutable */
        int flags;              /* open flags as the application gave them, immutable */
        bool dir;               /* immutable */
        pthread_mutex_t lock;
        int fd;                 /* protected by lock: backing descriptor, -1 until reopened */
        GArray *retired;        /* descriptors of the tree served before a switch (int),
                                 * closed at release: a request may still use one */
        struct sobj *obj;       /* protected by lock: the store object, or NULL */
        GPtrArray *retired_objs; /* store objects of what was served before a switch,
                                  * put at release: a read may still use one */
        /* Under the view's mode_lock (shared): */
        uint64_t lid;           /* offline: the object's log id, 0 until it changes */
        uint64_t lid_epoch;     /* vnode_ids_epoch() when lid was found (file_lid()) */
        bool dirty;             /* offline: written since its content was last logged */
        bool doubt;             /* a write made again offline after its server call
                                 * timed out, or shipped offline from the server's
                                 * file: the next content record is in doubt */
        bool written;           /* online: written, so the mirror takes it at release */
        int mirror_fd;          /* set under lock, read atomically: online, the
                                 * mirror's copy the writes also go to
                                 * (mirror_through()); -1 not looked for yet, -2 none */
        uint64_t mirror_quiet;  /* immutable: created online where the mirror had no
                                 * directory, at this mirror_dirs_gen(); else 0 */
        bool touch_atime;       /* atomic: the first read from the store reads a byte
                                 * of the backing, whose rules then update its atime */
        bool pt_counted;        /* immutable: counted in view-passthrough.c's node modes */
        bool passthrough;       /* immutable: the kernel reads and writes it without us */
        bool local;             /* opened from the store alone within the lease: fd
                                 * stays -1 until something needs the backing */
        bool lost;              /* atomic: its object has no counterpart in the tree
                                 * served, and still has names in the other: ESTALE */
        bool kept;              /* under ftab_lock: its descriptor is kept by the holder
                                 * too (its object has no name: view-fdstore.c) */
        int stranded_fd;        /* under mode_lock: the file a writer passed through
                                 * goes on writing when a switch serves another one
                                 * (never the one f->fd is), or -1 */
        struct file_mark stranded_shipped; /* it, when last copied over */
        struct file_mark pt_logged; /* offline, passed through: when last logged */
        struct dirlist *listing; /* protected by lock: a directory's entries read */
};

static struct view *V(fuse_req_t req)
{
        return fuse_req_userdata(req);
}

static void proc_path(char *buf, size_t len, int fd)
{
        snprintf(buf, len, "/proc/self/fd/%d", fd);
}

/*
 * atime: the view reports the backing's, which only the applications' reads
 * change.  The daemon's own reads (pin and hoard walks, refills, mirror
 * copies) use O_NOATIME; an application's reads that reach the backing
 * update it by the backing's rules, unless the view is mounted noatime (or
 * nodiratime, for directories): then the backing descriptor gets O_NOATIME.
 * Reads served from the kernel's page cache never reach the daemon
 * (strictatime cannot be kept); the first read of an open file served from
 * the store reads one byte of the backing when relatime would update the
 * atime (not after the last change, or older than a day), so the backing's
 * rules apply as if it had served the read.
 */
static bool mount_has_option(const char *opts, const char *opt)
{
        size_t l = strlen(opt);

        for (const char *p = opts; (p = strstr(p, opt)); p += l)
                if ((p == opts || p[-1] == ',') && (p[l] == ',' || !p[l] || p[l] == ' '))
                        return true;
        return false;
}

/* The mount options of the view's mountpoint (per mount, so a remount or a
 * bind remount changes them at any time): read again when the mount table
 * changed, which a poll of /proc/self/mountinfo reports (POLLPRI). */
static void view_atime_flags(struct view *v, bool *noatime, bool *nodiratime)
{
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        static int watch_fd = -1;
        static bool no_a, no_d;
        struct pollfd pfd;
        bool reread;

        pthread_mutex_lock(&lock);
        if (watch_fd < 0) {
                watch_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
                reread = true;
        } else {
                pfd = (struct pollfd){ .fd = watch_fd, .events = POLLPRI };
                reread = poll(&pfd, 1, 0) > 0;
        }
        if (reread) {
                FILE *mi = fopen("/proc/self/mountinfo", "re");
                char *line = NULL;
                size_t cap = 0;

                no_a = no_d = false;
                while (mi && getline(&line, &cap, mi) > 0) {
                        char mnt[PATH_MAX], opts[1024], *o = mnt;

                        if (sscanf(line, "%*s %*s %*s %*s %4095s %1023s", mnt, opts) != 2)
                                continue;
                        /* mountinfo escapes space, tab, newline and backslash in octal */
                        for (char *i = mnt; *i; o++) {
                                if (i[0] == '\\' && i[1] >= '0' && i[1] <= '3' && i[2] && i[3]) {
                                        *o = (char)((i[1] - '0') * 64 + (i[2] - '0') * 8 + (i[3] - '0'));
                                        i += 4;
                                } else {
                                        *o = *i++;
                                }
                        }
                        *o = 0;
                        if (strcmp(mnt, v->cfg->mountpoint))
                                continue;
                        /* the last mount on the mountpoint is the one seen */
                        no_a = mount_has_option(opts, "noatime");
                        no_d = no_a || mount_has_option(opts, "nodiratime");
                }
                free(line);
                if (mi)
                        fclose(mi);
        }
        *noatime = no_a;
        *nodiratime = no_d;
        pthread_mutex_unlock(&lock);
}

static bool timespec_le(const struct timespec *a, const struct timespec *b)
{
        return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec <= b->tv_nsec);
}

/* Applies the view's noatime (nodiratime for a directory: view_atime_flags(),
 * asked once per open) to a backing descriptor opened for an application (as
 * root: O_NOATIME needs ownership or CAP_FOWNER). */
static void apply_atime_policy(int fd, bool noatime)
{
        int fl;

        if (!noatime || (fl = fcntl(fd, F_GETFL)) < 0 || (fl & O_NOATIME))
                return;
        if (fcntl(fd, F_SETFL, fl | O_NOATIME) < 0)
                log_debug("O_NOATIME refused by the backing: %m, ignoring");
}

/* ---- open files ---- */

static struct vfile *vfile_add(struct view *v, uint64_t fh, uint64_t id, int fd, int flags,
                               bool dir)
{
        struct vfile *f = calloc(1, sizeof(*f));

        if (!f)
                return NULL;
        pthread_mutex_init(&f->lock, NULL);
        f->id = id;
        f->fd = fd;
        f->stranded_fd = -1;
        f->mirror_fd = -1;
        f->flags = flags;
        f->dir = dir;
        pthread_mutex_lock(&v->ftab_lock);
        f->fh = fh ? fh : v->next_fh++;
        if (fh && fh >= v->next_fh)
                v->next_fh = fh + 1;
        g_hash_table_insert(v->files, &f->fh, f);
        pthread_mutex_unlock(&v->ftab_lock);
        state_log_open(v, f->fh, id, dir ? -1 : flags);
        return f;
}

int vfile_restore(struct view *v, uint64_t fh, uint64_t id, int flags, uint32_t pt_mode)
{
        struct vfile *f = vfile_add(v, fh, id, -1, flags < 0 ? O_RDONLY | O_DIRECTORY : flags,
                                    flags < 0);

        if (!f)
                return -ENOMEM;
        /* The kernel sends opens of regular files only: each counts in its
         * node's mode, normal unless logged as passed through. */
        if (flags >= 0) {
                passthrough_restore(v, id, pt_mode | PT_MODE_COUNTED);
                f->pt_counted = true;
                f->passthrough = PT_MODE_BACKING_ID(pt_mode) != 0;
                if (f->passthrough)
                        state_log_open_mode(v, f->fh, id, f->flags, pt_mode);
                /* A writer's writes since its last log are not known (the
                 * predecessor's, or the kernel's, passed through): taken as
                 * done, as at an open passed through, for the log. */
                if ((flags & O_ACCMODE) != O_RDONLY && view_offline(v)) {
                        f->dirty = true;
                        f->pt_logged.size = -1;
                }
        }
        return 0;
}

static bool gone_offline(struct view *v, int fd);

/*
 * After a name of object @ino (of the tree served, @offline) went: its open
 * files whose object has no name left give their descriptor to the holder,
 * so that a successor can reach it (no name leads there, and an unlinked
 * inode's handle is refused).  Offline, a mirror object whose only link
 * left is the links index's has no name either, and the resync after the
 * reconnect unlinks that one too.
 */
static void vfile_keep_nameless(struct view *v, uint64_t ino, bool offline)
{
        fuse_ino_t id = vnode_id_of_ino(v, ino);
        GHashTableIter it;
        gpointer key, val;
        struct stat st;

        if (!id)
                return;
        pthread_mutex_lock(&v->ftab_lock);
        g_hash_table_iter_init(&it, v->files);
        while (g_hash_table_iter_next(&it, &key, &val)) {
                struct vfile *f = val;

                if (f->id != id || f->dir || f->kept || f->fd < 0 ||
                    !(offline ? gone_offline(v, f->fd) : fstat(f->fd, &st) == 0 && st.st_nlink == 0))
                        continue;
                f->kept = fdstore_keep(f->fh, f->fd) == 0;
                /* The file the kernel writes, when another. */
                if (f->kept && f->stranded_fd >= 0)
                        fdstore_keep(f->fh | FDSTORE_STRANDED, f->stranded_fd);
        }
        pthread_mutex_unlock(&v->ftab_lock);
}

static void take_kept(void *ud, uint64_t key, int fd)
{
        struct view *v = ud;
        uint64_t fh = key & ~FDSTORE_STRANDED;
        struct vfile *f;

        if (key & FDSTORE_BACKING) {
                passthrough_take_backing((uint32_t)(key & ~FDSTORE_BACKING), fd);
                return;
        }

        pthread_mutex_lock(&v->ftab_lock);
        f = g_hash_table_lookup(v->files, &fh);
        if (f && f->dir)
                f = NULL;
        if (f && key != fh && f->stranded_fd < 0) {
                f->stranded_fd = fd;
                f->stranded_shipped.size = -1;  /* copied over at its next flush */
                fd = -1;
        } else if (f && key == fh && f->fd < 0) {
                __atomic_store_n(&f->fd, fd, __ATOMIC_RELEASE);
                f->kept = true;
                fd = -1;
        }
        pthread_mutex_unlock(&v->ftab_lock);
        if (fd >= 0) {
                close(fd);
                fdstore_drop(key);      /* released meanwhile */
        }
}

/*
 * A kept file the kernel passes through whose backing the holder lacks (a
 * predecessor killed before it went there) is found by no name either: its
 * own descriptor is the kernel's file.
 */
static void adopt_kept(struct view *v)
{
        GHashTableIter it;
        gpointer key, val;
        bool offline;

        pthread_mutex_lock(&v->ftab_lock);
        g_hash_table_iter_init(&it, v->files);
        while (g_hash_table_iter_next(&it, &key, &val)) {
                struct vfile *f = val;

                if (f->kept && passthrough_file_unknown(f->id, &offline))
                        passthrough_adopt_file(f->id, f->stranded_fd >= 0 ? f->stranded_fd
                                                                          : f->fd);
        }
        pthread_mutex_unlock(&v->ftab_lock);
}

void vfile_take_kept(struct view *v)
{
        int n = fdstore_take_all(take_kept, v);

        adopt_kept(v);
        if (n > 0)
                log_info("Took back %d descriptors the holder kept (open files without a name,"
                         " passthrough backings)", n);
        else if (n < 0)
                log_warn("Failed to take back descriptors kept by the holder: %s", strerror(-n));
}

/* Logs an open file passed through with its backing id, for a successor. */
static void vfile_log_mode(struct view *v, struct vfile *f, int bid)
{
        if (bid > 0)
                state_log_open_mode(v, f->fh, f->id, f->flags,
                                    PT_MODE_COUNTED | passthrough_tree_mode(f->id) | (uint32_t)bid);
}

void vfile_set_fh_floor(struct view *v, uint64_t fh)
{
        pthread_mutex_lock(&v->ftab_lock);
        if (fh >= v->next_fh)
                v->next_fh = fh + 1;
        pthread_mutex_unlock(&v->ftab_lock);
}

static int log_content(struct view *v, struct vfile *f);

static bool same_file(int a, int b)
{
        struct stat sa, sb;

        return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
               sa.st_ino == sb.st_ino;
}

static int lid_before_change(struct view *v, fuse_ino_t id, int fd, uint64_t *lid);
static int file_lid(struct view *v, struct vfile *f);

/*
 * The file of node @id in the other tree than the one served, for writing,
 * if it is the same object: the mirror's file names the server file's
 * inode in its base.  Found by the node's path, local in either tree (a
 * server's file passes through only on a local backing).
 */
static int other_tree_file(struct view *v, uint64_t id, bool offline)
{
        struct mirror_base b;
        struct vnode *n;
        struct stat st;
        char *rel;
        int pfd, kfd;

        pfd = vnode_get(v, id, &n);
        if (pfd < 0)
                return pfd;
        rel = view_rel_path(view_served_root(v), pfd, NULL);
        kfd = rel ? openat(offline ? v->root_fd : v->mirror_fd, rel,
                           O_RDWR | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (kfd < 0)
                kfd = rel ? -errno : -ENOENT;
        g_free(rel);
        if (kfd >= 0 && (mirror_get_base(offline ? pfd : kfd, NULL, &b) < 0 ||
                         fstat(offline ? kfd : pfd, &st) < 0 || st.st_ino != b.ver.ino)) {
                close(kfd);
                kfd = -ESTALE;
        }
        vnode_put(v, n);
        return kfd;
}

/*
 * Offline, the kernel's writes to come are changes against what each of
 * @writers' files holds now: its base is registered before any (mode_lock
 * is held exclusively: no writer is released meanwhile).  Frees @writers.
 */
static void writers_take_bases(struct view *v, GPtrArray *writers)
{
        for (guint i = 0; view_offline(v) && i < writers->len; i++) {
                struct vfile *f = g_ptr_array_index(writers, i);

                if (file_lid(v, f) < 0)
                        f->lid = 0;
        }
        g_ptr_array_free(writers, TRUE);
}

/* The file of node @id in the tree @offline says, for writing (the other
 * tree's only if it is the same object: other_tree_file()). */
static int tree_file(struct view *v, uint64_t id, bool offline)
{
        struct vnode *n;
        int pfd, fd;

        if (offline != view_offline(v))
                return other_tree_file(v, id, view_offline(v));
        pfd = vnode_get(v, id, &n);
        if (pfd < 0)
                return pfd;
        fd = backing_reopen(pfd, O_RDWR);
        vnode_put(v, n);
        return fd;
}

void vfile_adopt_restored(struct view *v)
{
        GArray *ids = g_array_new(FALSE, FALSE, sizeof(uint64_t));
        GHashTableIter it;
        gpointer key, val;
        bool offline;

        pthread_mutex_lock(&v->ftab_lock);
        g_hash_table_iter_init(&it, v->files);
        while (g_hash_table_iter_next(&it, &key, &val)) {
                struct vfile *f = val;

                if (!f->dir && f->passthrough && f->fd < 0)
                        g_array_append_val(ids, f->id);
        }
        pthread_mutex_unlock(&v->ftab_lock);
        for (guint i = 0; i < ids->len; i++) {
                uint64_t id = g_array_index(ids, uint64_t, i);
                int fd;

                if (!passthrough_file_unknown(id, &offline))
                        continue;
                fd = tree_file(v, id, offline);
                if (fd < 0) {
                        log_warn("The %s file node %" PRIu64 " passes through was not found"
                                 " again: %s", offline ? "mirror's" : "server's", id,
                                 strerror(-fd));
                        continue;
                }
                passthrough_adopt_file(id, fd);
                close(fd);
        }
        g_array_free(ids, TRUE);
}

/*
 * Writers passed through that have no descriptor of their own (restored by
 * a takeover and not used since: reopened at first use, so a switch does
 * not move them) get their stranded file as the switch gives it to the
 * others: the kernel's file when it is of the other tree than the one
 * served, found again there; none when it is of the tree served (offline
 * their content is then logged, in doubt: what the kernel wrote may have
 * reached the server already).
 */
void vfile_strand_unopened_writers(struct view *v)
{
        bool offline = view_offline(v);
        GPtrArray *writers = g_ptr_array_new();
        GHashTableIter it;
        gpointer key, val;

        pthread_mutex_lock(&v->ftab_lock);
        g_hash_table_iter_init(&it, v->files);
        while (g_hash_table_iter_next(&it, &key, &val)) {
                struct vfile *f = val;
                bool other;
                int kfd;

                if (f->dir || !f->passthrough || f->fd >= 0 ||
                    (f->flags & O_ACCMODE) == O_RDONLY)
                        continue;
                other = passthrough_in_other_tree(f->id, offline);
                if (other == (f->stranded_fd >= 0))
                        continue;
                if (!other) {
                        close(f->stranded_fd);
                        f->stranded_fd = -1;
                        f->doubt = f->doubt || offline;
                } else {
                        /* The file found again at the takeover, else by its name. */
                        kfd = passthrough_other_tree_file(f->id, offline);
                        if (kfd < 0)
                                kfd = other_tree_file(v, f->id, offline);
                        if (kfd < 0) {
                                log_warn("Open file handle %" PRIu64 " writes a file of the %s"
                                         " tree that was not found again: %s; its writes reach"
                                         " that file only", f->fh,
                                         offline ? "server" : "offline", strerror(-kfd));
                                continue;
                        }
                        passthrough_adopt_file(f->id, kfd);
                        f->stranded_fd = kfd;
                        f->stranded_shipped.size = -1;
                }
                /* As vfile_switch_all() does for the others. */
                f->dirty = offline;
                f->pt_logged.size = -1;
                f->written = !offline;
                g_ptr_array_add(writers, f);
        }
        pthread_mutex_unlock(&v->ftab_lock);
        writers_take_bases(v, writers);
}

/* Copies file @from over file @to (over the old bytes, then cut to size: a
 * reader never sees it empty), durably. */
static int copy_over(int from, int to)
{
        struct stat st;
        int in, out, r;

        in = backing_reopen(from, O_RDONLY);
        r = in < 0 ? in : fstat(in, &st) < 0 ? -errno : 0;
        out = r < 0 ? r : backing_reopen(to, O_WRONLY);
        r = out < 0 ? out : mirror_copy_content(in, out, st.st_size);
        /* The times the kernel's writes (or a utimens) gave it, not the copy's. */
        if (r == 0 && (ftruncate(out, st.st_size) < 0 ||
                       futimens(out, (struct timespec[2]){ st.st_atim, st.st_mtim }) < 0 ||
                       fdatasync(out) < 0))
                r = -errno;
        if (out >= 0)
                close(out);
        if (in >= 0)
                close(in);
        return r;
}

/*
 * Whether the kernel wrote a stranded file since mark m: its size and mtime
 * (a write moves the mtime; setattrs go to the file served).  Not its ctime,
 * which moves when the mirror replaces or marks its own file.
 */
static bool stranded_unwritten(const struct file_mark *m, const struct stat *st)
{
        return st->st_size == m->size && same_time(&st->st_mtim, &m->mtime);
}

/*
 * A writer stranded by a switch online, whose file (the mirror's) was
 * logged offline: the server has what the log had of it (the replay's last
 * round), and may have others' changes since, which copying an unwritten
 * file over would undo.  Offline, or not logged: copied over at its next
 * flush.
 */
static void stranded_online_mark(struct view *v, struct vfile *f)
{
        struct stat st;

        f->stranded_shipped.size = -1;
        if (!view_offline(v) && fstat(f->stranded_fd, &st) == 0 &&
            stranded_unwritten(&f->pt_logged, &st))
                mark_take(&f->stranded_shipped, &st);
}

/* Has what the kernel wrote to f's stranded file been copied over since? */
static bool stranded_shipped(struct vfile *f)
{
        struct stat st;

        return fstat(f->stranded_fd, &st) == 0 && stranded_unwritten(&f->stranded_shipped, &st);
}

/* An open file's descriptor in the tree switched to, opened by the pool. */
struct file_reopen {
        struct vfile *f;
        struct vnode *n;
        int pfd, nfd;
};

struct file_reopens {
        struct view *v;
        bool offline;
        GArray *a;              /* of struct file_reopen */
        bool unanswered;        /* a reopen went unanswered: the rest are not tried */
};

static void reopen_one(void *ctx, guint i)
{
        struct file_reopens *rs = ctx;
        struct file_reopen *r = &g_array_index(rs->a, struct file_reopen, i);
        struct vfile *f = r->f;

        if (__atomic_load_n(&rs->unanswered, __ATOMIC_ACQUIRE)) {
                r->nfd = -ECANCELED;
                return;
        }
        r->nfd = backing_reopen_in(rs->v, rs->offline, r->pfd,
                                   f->dir ? O_RDONLY | O_DIRECTORY : f->flags & ~O_TRUNC, NULL);
        if (r->nfd == -ETIMEDOUT)
                __atomic_store_n(&rs->unanswered, true, __ATOMIC_RELEASE);
}

/* ftab_lock held: each open file's descriptor in the tree served now, as
 * r->nfd (-errno where it has none), many in flight to a server. */
static GArray *reopen_files(struct view *v, bool *unanswered)
{
        struct file_reopens rs = { v, view_offline(v), NULL, *unanswered };
        GHashTableIter it;
        gpointer key, val;

        rs.a = g_array_new(FALSE, FALSE, sizeof(struct file_reopen));
        g_hash_table_iter_init(&it, v->files);
        /* The server stopped answering: the switch back offline finds the
         * files where they are. */
        while (!*unanswered && g_hash_table_iter_next(&it, &key, &val)) {
                struct file_reopen r = { .f = val, .nfd = -1 };

                if (r.f->fd < 0)
                        continue;       /* reopened where it is served at first use */
                r.pfd = vnode_get(v, r.f->id, &r.n);
                if (r.pfd < 0) {
                        struct stat st;
                        /* Online, its reads and writes would be the mirror's
                         * file's, not the server's object's.  Offline, or
                         * unlinked (the descriptor's alone), it is kept. */
                        bool keep = r.f->dir || rs.offline ||
                                    (fstat(r.f->fd, &st) == 0 && st.st_nlink == 0);

                        log_warn("Open file handle %" PRIu64 " has no counterpart in the %s"
                                 " tree: %s; %s", r.f->fh, rs.offline ? "offline" : "server",
                                 strerror(-r.pfd), keep ? "it keeps its old object" :
                                 "it answers ESTALE");
                        __atomic_store_n(&r.f->lost, !keep, __ATOMIC_RELEASE);
                        continue;
                }
                __atomic_store_n(&r.f->lost, false, __ATOMIC_RELEASE);
                g_array_append_val(rs.a, r);
        }
        /* A local tree's opens take no round trip: no threads for them. */
        if (!rs.offline && !v->backing_local)
                fetch_pool_run(v, rs.a->len, reopen_one, &rs);
        else
                for (guint i = 0; i < rs.a->len; i++)
                        reopen_one(&rs, i);
        for (guint i = 0; i < rs.a->len; i++)
                vnode_put(v, g_array_index(rs.a, struct file_reopen, i).n);
        *unanswered = *unanswered || rs.unanswered;
        return rs.a;
}

/* The served tree switched: each open file gets its object there (the old
 * descriptor stays open until release, so a request using it is not disturbed). */
void vfile_switch_all(struct view *v, bool *unanswered)
{
        GPtrArray *writers = g_ptr_array_new();
        GArray *reopened;

        fdstore_flush();        /* a successor finds no kernel's file by name after */

        pthread_mutex_lock(&v->ftab_lock);
        reopened = reopen_files(v, unanswered);
        for (guint i = 0; i < reopened->len; i++) {
                struct file_reopen *r = &g_array_index(reopened, struct file_reopen, i);
                struct vfile *f = r->f;
                bool passed_writer = f->passthrough && !f->dir &&
                                     (f->flags & O_ACCMODE) != O_RDONLY;
                int nfd = r->nfd, old;

                if (nfd < 0) {
                        if (nfd != -ECANCELED)
                                log_warn("Failed to move open file handle %" PRIu64 ": %s",
                                         f->fh, strerror(-nfd));
                        continue;
                }
                if (!f->dir)
                        lseek(nfd, lseek(f->fd, 0, SEEK_CUR), SEEK_SET);
                /* Not dup3() over it: closing a network file's descriptor
                 * flushes, and the server may be gone. */
                old = f->fd;
                if (passed_writer) {
                        /* The kernel goes on writing the file it was opened
                         * on: shipped to the object served at flush, fsync
                         * and release, until a switch serves that file again. */
                        if (f->stranded_fd < 0) {
                                f->stranded_fd = old;
                                stranded_online_mark(v, f);
                                old = -1;
                        }
                        if (same_file(f->stranded_fd, nfd)) {
                                /* Online writes not flushed yet: a local
                                 * backing takes them now (no server to wait on). */
                                if (view_offline(v) && old >= 0 && !stranded_shipped(f) &&
                                    !(v->backing_local && copy_over(f->stranded_fd, old) == 0))
                                        log_warn("Writes to open file handle %" PRIu64 " made"
                                                 " online and not flushed before the switch"
                                                 " stay in the local copy only", f->fh);
                                close(f->stranded_fd);
                                f->stranded_fd = -1;
                        }
                        /* Offline its content is logged at flush, against
                         * its base as the switch finds it (below). */
                        f->dirty = view_offline(v);
                        f->pt_logged.size = -1;
                        g_ptr_array_add(writers, f);
                }
                if (old >= 0) {
                        if (!f->retired)
                                f->retired = g_array_new(FALSE, FALSE, sizeof(int));
                        g_array_append_val(f->retired, old);
                }
                __atomic_store_n(&f->fd, nfd, __ATOMIC_RELEASE);
                /* The store copy is of the object served before (keyed by
                 * its server identity): reads go to the new one. */
                if (f->obj) {
                        if (!f->retired_objs)
                                f->retired_objs = g_ptr_array_new();
                        g_ptr_array_add(f->retired_objs, f->obj);
                        __atomic_store_n(&f->obj, NULL, __ATOMIC_RELEASE);
                }
                f->lid = 0;
                /* A writer passed through writes without us: online its
                 * writes are taken as done, for the mirror, as at its open. */
                f->written = passed_writer && !view_offline(v);
        }
        pthread_mutex_unlock(&v->ftab_lock);
        g_array_free(reopened, TRUE);
        writers_take_bases(v, writers);
        vfile_strand_unopened_writers(v);
}

bool vfile_node_writable(struct view *v, uint64_t id)
{
        GHashTableIter it;
        gpointer key, val;
        bool found = false;

        pthread_mutex_lock(&v->ftab_lock);
        g_hash_table_iter_init(&it, v->files);
        while (!found && g_hash_table_iter_next(&it, &key, &val)) {
                struct vfile *f = val;

                found = f->id == id && (f->flags & O_ACCMODE) != O_RDONLY;
        }
        pthread_mutex_unlock(&v->ftab_lock);
        return found;
}

bool vfile_writes_server(struct view *v, uint64_t lid)
{
        GHashTableIter it;
        gpointer key, val;
        bool found = false;

        if (!lid || !view_offline(v))
                return false;
        pthread_mutex_lock(&v->ftab_lock);
        g_hash_table_iter_init(&it, v->files);
        while (!found && g_hash_table_iter_next(&it, &key, &val)) {
                struct vfile *f = val;

                /* Offline, a stranded file is the one opened online. */
                found = !f->dir && f->lid == lid && f->stranded_fd >= 0;
        }
        pthread_mutex_unlock(&v->ftab_lock);
        return found;
}

/*
 * A writer the kernel passes through to another file than the one served
 * (stranded: the other tree's, or, for an object with no name left, the
 * copy the kernel writes) has its bytes there until its next flush, fsync
 * or release copies them over: the node's size and mtime are that file's
 * (its ctime the later), else an attribute reply would cut the kernel's
 * size back under the writer.
 */
static void show_stranded_writes(struct view *v, uint64_t id, struct stat *st)
{
        GHashTableIter it;
        gpointer key, val;
        struct stat kst;
        bool found = false;

        if (!S_ISREG(st->st_mode) || !passthrough_tree_mode(id))
                return;
        pthread_mutex_lock(&v->ftab_lock);
        g_hash_table_iter_init(&it, v->files);
        while (!found && g_hash_table_iter_next(&it, &key, &val)) {
                struct vfile *f = val;

                found = !f->dir && f->id == id && f->stranded_fd >= 0 &&
                        fstat(f->stranded_fd, &kst) == 0;
        }
        pthread_mutex_unlock(&v->ftab_lock);
        if (!found)
                return;
        st->st_size = kst.st_size;
        st->st_blocks = kst.st_blocks;
        st->st_mtim = kst.st_mtim;
        if (timespec_ns(&kst.st_ctim) > timespec_ns(&st->st_ctim))
                st->st_ctim = kst.st_ctim;
}

void vfile_flush_dirty(struct view *v)
{
        GHashTableIter it;
        gpointer key, val;

        pthread_mutex_lock(&v->ftab_lock);
        g_hash_table_iter_init(&it, v->files);
        while (g_hash_table_iter_next(&it, &key, &val)) {
                struct vfile *f = val;

                if (f->fd >= 0 && !f->dir && f->dirty && log_content(v, f) < 0)
                        log_error("Offline writes to open file handle %" PRIu64
                                  " could not be logged", f->fh);
        }
        pthread_mutex_unlock(&v->ftab_lock);
}

/*
 * The store objects of the last RECENT_OBJS files released after reading,
 * kept referenced: the next open of such a file finds its object in memory
 * instead of loading it from store.db (two queries and their locks, most of
 * a warm open's work).  Every change to an object goes through the one in
 * memory, so keeping it changes nothing else; one kept unused holds no
 * descriptor, and a few hundred bytes plus 8 a block of 128 KiB: only files
 * up to RECENT_MAX_SIZE are kept (a larger file's open costs little beside
 * its reads), so the ring holds a few MiB at most.
 */
#define RECENT_OBJS 4096
#define RECENT_MAX_SIZE (16 << 20)
static struct {
        pthread_mutex_t lock;
        struct sobj *ring[RECENT_OBJS]; /* protected by lock */
        GHashTable *in_ring;            /* protected by lock: the objects in ring */
        unsigned next;                  /* protected by lock */
} recent = { .lock = PTHREAD_MUTEX_INITIALIZER };

static bool recent_fits(struct sobj *o)
{
        struct sobj_info info;

        store_obj_info(o, &info);
        return info.size <= RECENT_MAX_SIZE;
}

/* Keeps the object o, once (the caller's reference goes to the ring or is
 * dropped). */
static void recent_keep(struct view *v, struct sobj *o)
{
        struct sobj *old = NULL;
        bool kept = false;

        store_obj_ref(v->store, o);     /* o lives to the end, whatever the ring does */
        pthread_mutex_lock(&recent.lock);
        if (!recent.in_ring)
                recent.in_ring = g_hash_table_new(NULL, NULL);
        kept = g_hash_table_contains(recent.in_ring, o);
        if (!kept) {
                old = recent.ring[recent.next];
                if (old)
                        g_hash_table_remove(recent.in_ring, old);
                recent.ring[recent.next] = o;
                g_hash_table_add(recent.in_ring, o);
                recent.next = (recent.next + 1) % RECENT_OBJS;
        }
        pthread_mutex_unlock(&recent.lock);
        if (kept)
                store_obj_put(v->store, o);
        /* Unused but by the ring and the reference taken above. */
        store_obj_close_idle(v->store, o, 2);
        store_obj_put(v->store, o);
        store_obj_put(v->store, old);
}

/* Removes open file f: true when the kernel let go of a mirror file with it
 * (passthrough_release()). */
static bool vfile_remove(struct view *v, struct vfile *f)
{
        bool mirror_file = false;

        pthread_mutex_lock(&v->ftab_lock);
        g_hash_table_remove(v->files, &f->fh);
        pthread_mutex_unlock(&v->ftab_lock);
        state_log_close(v, f->fh);
        if (f->kept) {
                fdstore_drop(f->fh);
                fdstore_drop(f->fh | FDSTORE_STRANDED);
        }
        if (f->pt_counted)
                mirror_file = passthrough_release(f->id);
        if (f->fd >= 0)
                backing_close(v, f->fd);
        for (guint i = 0; f->retired && i < f->retired->len; i++)
                backing_close(v, g_array_index(f->retired, int, i));
        if (f->retired)
                g_array_free(f->retired, TRUE);
        if (f->stranded_fd >= 0)
                close(f->stranded_fd);
        if (f->mirror_fd >= 0)
                close(f->mirror_fd);
        for (guint i = 0; f->retired_objs && i < f->retired_objs->len; i++)
                store_obj_put(v->store, g_ptr_array_index(f->retired_objs, i));
        if (f->retired_objs)
                g_ptr_array_free(f->retired_objs, TRUE);
        dirlist_free(f->listing);
        if (f->obj && (f->flags & O_ACCMODE) == O_RDONLY && recent_fits(f->obj))
                recent_keep(v, f->obj);
        else
                store_obj_put(v->store, f->obj);
        pthread_mutex_destroy(&f->lock);
        free(f);
        return mirror_file;
}

struct refill {
        struct view *v;
        struct sobj *o;
        int fd;
};

static void *refill_thread(void *arg)
{
        struct refill *r = arg;
        uint64_t got = 0;
        int e = store_obj_fill(r->v->store, r->o, r->fd, &got);

        if (e < 0)
                log_warn("Failed to refill a pinned file: %s", strerror(-e));
        else if (got)
                log_debug("Refilled %" PRIu64 " bytes of a pinned file", got);
        close(r->fd);
        store_obj_put(r->v->store, r->o);
        free(r);
        return NULL;
}

/* A pinned file found changed is fetched completely again in the background
 * (on-access hoarding; the hoard walk catches what is not accessed). */
static void refill_pinned(struct view *v, struct sobj *o, int fd)
{
        struct refill *r = malloc(sizeof(*r));
        pthread_t t;

        if (!r)
                return;
        r->v = v;
        r->o = o;
        /* The daemon's own read: the file's atime stays the applications'. */
        r->fd = backing_reopen(fd, O_RDONLY | O_NOATIME);
        if (r->fd < 0)
                r->fd = dup(fd);
        if (r->fd < 0) {
                free(r);
                return;
        }
        store_obj_ref(v->store, o);
        if (pthread_create(&t, NULL, refill_thread, r) != 0) {
                close(r->fd);
                store_obj_put(v->store, o);
                free(r);
                return;
        }
        pthread_detach(t);
}

/* Attaches the store object of a regular file open for reading (noatime:
 * the view's, from view_atime_flags()). */
static void attach_store(struct view *v, struct vfile *f, bool noatime, bool *keep_cache)
{
        bool unchanged = false, reading = (f->flags & O_ACCMODE) != O_WRONLY;
        struct stat st;
        int r;

        *keep_cache = false;
        /* Offline the mirror is the copy; the store is keyed by backing identities. */
        if (view_offline(v) || backing_fstatat(v, f->fd, NULL, &st) < 0 || !S_ISREG(st.st_mode))
                return;
        if (reading && !vnode_cacheable(v, f->id))
                reading = false;
        /* Close-to-open: an open compares the copy with the backing (the fstat
         * is done anyway); reads of an open file trust it for the lease. */
        r = store_obj_get(v->store, &st, reading, 0, &unchanged, &f->obj);
        if (r < 0) {
                f->obj = NULL;
                return;
        }
        *keep_cache = unchanged;
        if (reading) {
                f->touch_atime = !noatime &&
                        (timespec_le(&st.st_atim, &st.st_mtim) ||
                         timespec_le(&st.st_atim, &st.st_ctim) ||
                         st.st_atim.tv_sec + 24 * 3600 <= time(NULL));
        }
        if (!unchanged && reading && store_obj_pin(f->obj) >= 0)
                refill_pinned(v, f->obj, f->fd);
        else if ((unchanged || st.st_size == 0) && reading && (f->flags & O_ACCMODE) == O_RDONLY)
                store_obj_opened_ro(v->store, f->obj);  /* an empty file is whole at once */
}

/* The open file of fi, as it is (its descriptor may still be -1). */
static struct vfile *vfile_find(struct view *v, struct fuse_file_info *fi, int *err)
{
        struct vfile *f;
        uint64_t key = fi->fh;

        pthread_mutex_lock(&v->ftab_lock);
        f = g_hash_table_lookup(v->files, &key);
        pthread_mutex_unlock(&v->ftab_lock);
        if (!f)
                *err = EBADF;
        return f;
}

/* Returns the open file of fi with its backing descriptor, opening it now
 * for a file opened from the store alone, or after a takeover. */
static struct vfile *vfile_of(struct view *v, struct fuse_file_info *fi, int *err)
{
        struct vfile *f = vfile_find(v, fi, err);
        struct vnode *n;
        int fd, pfd;
        bool keep;

        if (f && __atomic_load_n(&f->lost, __ATOMIC_ACQUIRE)) {
                *err = ESTALE;
                return NULL;
        }
        if (!f || __atomic_load_n(&f->fd, __ATOMIC_ACQUIRE) >= 0)
                return f;
        pthread_mutex_lock(&f->lock);
        if (f->fd < 0) {
again:
                pfd = vnode_get(v, f->id, &n);
                /* No name leads to an object that lost its last one: the
                 * file the kernel passes it through is that object. */
                if (pfd < 0 && (fd = passthrough_nameless_file(f->id, f->flags & ~O_TRUNC)) >= 0)
                        goto reopened;
                if (pfd < 0) {
                        pthread_mutex_unlock(&f->lock);
                        *err = -pfd;
                        return NULL;
                }
                /* As the daemon: the caller's permission was checked at its open. */
                fd = backing_reopen_bounded(v, pfd, f->flags & ~O_TRUNC, NULL);
                vnode_put(v, n);
                if (fd == -ETIMEDOUT && view_wait_offline(v))
                        goto again;     /* the mirror's object now */
                if (fd < 0) {
                        pthread_mutex_unlock(&f->lock);
                        log_warn("Failed to reopen file handle %" PRIu64 " after takeover: %s",
                                 f->fh, strerror(-fd));
                        *err = -fd;
                        return NULL;
                }
reopened:
                __atomic_store_n(&f->fd, fd, __ATOMIC_RELEASE);
                /* A local open keeps its copy: reads revalidate it past the lease. */
                if (f->local)
                        __atomic_store_n(&f->local, false, __ATOMIC_RELEASE);
                else if (!f->dir) {
                        bool noatime, nodiratime;

                        view_atime_flags(v, &noatime, &nodiratime);
                        attach_store(v, f, noatime, &keep);
                }
        }
        pthread_mutex_unlock(&f->lock);
        return f;
}

/* A file opened locally reads from its store copy while that is complete
 * and within its lease, without a backing descriptor. */
static bool local_copy_serves(struct view *v, struct vfile *f)
{
        struct sobj_info info;

        if (!__atomic_load_n(&f->local, __ATOMIC_ACQUIRE) || view_offline(v))
                return false;
        store_obj_info(f->obj, &info);
        return info.complete && !store_obj_stale(f->obj, now_ns(), (uint64_t)(v->lease_s * 1e9));
}

/* ---- helpers ---- */

static void reply_entry_or_err(fuse_req_t req, int r, struct fuse_entry_param *e)
{
        if (r < 0) {
                fuse_reply_err(req, -r);
                return;
        }
        if (e->ino) {
                vnode_show_kept_ino(V(req), e->ino, &e->attr);
                show_stranded_writes(V(req), e->ino, &e->attr);
        }
        fuse_reply_entry(req, e);
}

static void reply_attr(fuse_req_t req, fuse_ino_t id, struct stat *st)
{
        struct view *v = V(req);

        vnode_show_kept_ino(v, id, st);
        show_stranded_writes(v, id, st);
        fuse_reply_attr(req, st, v->lease_s);
}

/* Node id's descriptor fd, of the tree offline says (vnode_get_served()). */
#define WITH_NODE(v, id, n, fd, req, offline, switches)                  \
        struct vnode *n;                                                 \
        int fd = vnode_get_served(v, id, &n, &offline, &switches);       \
        if (fd < 0) {                                                    \
                fuse_reply_err(req, -fd);                                \
                return;                                                  \
        }

/* As WITH_NODE, for an operation that may change something: the state cannot
 * switch (view_change_begin()) until its view_change_end(); offline says which
 * tree the node is in. */
#define WITH_NODE_CHANGING(v, id, n, fd, req, offline)   \
        view_change_begin(v);                            \
        bool offline;                                    \
        struct vnode *n;                                 \
        int fd = vnode_get_served(v, id, &n, &offline, NULL); \
        if (fd < 0) {                                    \
                view_change_end(v);                      \
                fuse_reply_err(req, -fd);                \
                return;                                  \
        }

/*
 * A change the server did not answer within BackingTimeout: the volume goes
 * offline.  Lets go of the request's nodes (a, b: NULL if none) and of the
 * state, which the switch takes, and waits for it: true when the request is
 * to be made again offline, applied to the mirror and logged (the server may
 * still apply the call that timed out: the replay takes it as done).
 */
static bool left_for_offline(struct view *v, struct vnode *a, struct vnode *b)
{
        if (b)
                vnode_put(v, b);
        if (a)
                vnode_put(v, a);
        view_change_end(v);
        return view_wait_offline(v);
}

/* A create made again offline by left_for_offline()'s request, now at
 * pfd/name in the mirror: its record is in doubt (OPLOG_IN_DOUBT). */
static int create_in_doubt(struct view *v, int pfd, const char *name)
{
        uint64_t lid;

        return mirror_get_lid(pfd, name, &lid) < 0 ? -EIO : offline_note_in_doubt(v, lid);
}

/*
 * Before a change is made again offline (left_for_offline()): what the
 * mirror's note given up on already put at mdfd/name, the change's target,
 * goes.  That note copies what the server has there after the change, and
 * stops halfway when it is given up on; the entry is its work when nothing
 * offline made it (no log id) and it is no server object the mirror had
 * before: for a create (@made) whatever it is, the name being new; for a
 * rename one with no base yet (a directory whose copy did not end) or the
 * base of the object being moved there (@moved: its server inode, 0 if none).
 */
static void clear_note_leftover(int mdfd, const char *name, bool made, uint64_t moved)
{
        struct mirror_base b;
        uint64_t lid;
        int r;

        if (mirror_get_lid(mdfd, name, &lid) == 0)
                return;
        r = mirror_get_base(mdfd, name, &b);
        if ((r == -ENODATA || (r == 0 && (made || (moved && b.ver.ino == moved)))) &&
            view_remove_tree(mdfd, name) == 0)
                log_info("Removed the offline mirror's unfinished copy of '%s' before making"
                         " its change again offline", name);
}

/*
 * Before a rename given up on online is made again offline: whether its
 * note already moved the mirror's copies as the server did (the copy of
 * the source's object, server inode @from_ino, now at the target, and for
 * an exchange the target's, @to_ino, at the source, else the source gone).
 * Moving them again would undo that.
 */
static bool renamed_in_mirror(int pfd, const char *name, int npfd, const char *newname,
                              unsigned int flags, uint64_t from_ino, uint64_t to_ino)
{
        struct mirror_base b;

        if (!from_ino || mirror_get_base(npfd, newname, &b) < 0 || b.ver.ino != from_ino)
                return false;
        if (flags & RENAME_EXCHANGE)
                return to_ino && mirror_get_base(pfd, name, &b) == 0 && b.ver.ino == to_ino;
        return faccessat(pfd, name, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT;
}

/* The caller's identity, for a change made on a helper (backing_change()). */
static const struct caller_id *caller_of(fuse_req_t req, struct caller_id *id)
{
        creds_capture(req, id);
        return id;
}

/* Drops the store copy of the object name in pfd if this was its last link. */
static void drop_if_last(struct view *v, const struct stat *st)
{
        if (S_ISREG(st->st_mode) && st->st_nlink <= 1)
                store_drop_ino(v->store, st->st_ino, true);
}

/*
 * A name node id (descriptor fd) has now, as a descriptor of its directory
 * (to close) and *name (to free): one the node table knows it by that still
 * leads to it, else (a hard link whose names went) one found in one of those
 * directories.  -ENOENT if none.
 */
static int node_name(struct view *v, fuse_ino_t id, int fd, uint64_t *parent, char **name)
{
        struct stat me, there;
        struct vnode *p;
        char *nm;
        int pfd, dfd;

        if (fstatat(fd, "", &me, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        for (int pass = 0; pass < 2; pass++) {
                for (unsigned idx = 0; vnode_parent_of(v, id, idx, parent, &nm) == 0; idx++) {
                        pfd = vnode_get(v, *parent, &p);
                        if (pfd < 0) {
                                free(nm);
                                continue;
                        }
                        if (pass == 1 && mirror_linkable(me.st_mode) && me.st_nlink > 1) {
                                free(nm);
                                nm = offline_name_in(pfd, me.st_ino);
                        }
                        if (nm && fstatat(pfd, nm, &there, AT_SYMLINK_NOFOLLOW) == 0 &&
                            me.st_ino == there.st_ino && me.st_dev == there.st_dev) {
                                dfd = dup(pfd);
                                vnode_put(v, p);
                                if (dfd < 0) {
                                        free(nm);
                                        return -errno;
                                }
                                *name = nm;
                                return dfd;
                        }
                        vnode_put(v, p);
                        free(nm);
                }
        }
        return -ENOENT;
}

/*
 * An object whose last name went offline (held open): nothing of it is for
 * the server, so its changes are not logged.  Made offline, its create was
 * cancelled and its log id may be another object's now; of the server, the
 * replay removes it there (an edit logged would be a conflict with its own
 * removal).
 */
static bool gone_offline(struct view *v, int fd)
{
        struct mirror_base b;
        struct stat st;

        if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
                return false;
        /* Its only link left may be the links index's (several names once):
         * only then is its base read. */
        if (st.st_nlink != 1 || !mirror_linkable(st.st_mode))
                return st.st_nlink == 0;
        return mirror_get_base(fd, NULL, &b) == 0 && mirror_nameless(v, &st, b.ver.ino);
}

/* lid_before_change(): nothing to log (gone_offline()). */
#define LID_GONE 1

/*
 * Offline: the log id of node id, descriptor fd (registered with its base
 * before it changes), or LID_GONE.  Named through its parent's descriptor
 * when the node table knows it there, so that no path is needed (a file
 * has no "..").
 */
static int lid_before_change(struct view *v, fuse_ino_t id, int fd, uint64_t *lid)
{
        uint64_t parent, epoch = vnode_ids_epoch(v);
        struct stat st;
        char *name;
        int pfd, r = -ENOENT;

        if (gone_offline(v, fd))
                return LID_GONE;
        if (vnode_known_lid(v, id, lid) == 0)
                return 0;
        pfd = node_name(v, id, fd, &parent, &name);
        if (pfd >= 0) {
                r = offline_lid(v, pfd, name, lid);
                close(pfd);
                free(name);
        }
        if (r < 0)
                r = offline_lid(v, fd, NULL, lid);
        if (r < 0)
                return -EIO;
        /* A file with several names is named by each it is reached by
         * (the log's aliases): not remembered. */
        if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 &&
            (!mirror_linkable(st.st_mode) || st.st_nlink == 1))
                vnode_remember_lid(v, id, epoch, *lid);
        return 0;
}

/*
 * Offline: the log id of open file f's object, found again after anything
 * that may have made it another (vnode_ids_forget()): an atomic save gives
 * a file held open the identity of the file it replaced.
 */
static int file_lid(struct view *v, struct vfile *f)
{
        uint64_t epoch = vnode_ids_epoch(v);
        int r;

        if (f->lid && f->lid_epoch == epoch)
                return 0;
        r = lid_before_change(v, f->id, f->fd, &f->lid);
        if (r < 0)
                return -EIO;
        if (r == LID_GONE)
                f->lid = 0;
        f->lid_epoch = epoch;
        return r;
}

/*
 * Online, after a change to node id (descriptor fd): keeps the mirror current
 * through a name of the object in its parent, not through fd's path, which
 * for a hard link may be a name since removed.
 */
static void note_node_change(struct view *v, fuse_ino_t id, int fd)
{
        uint64_t parent;
        char *name;
        int pfd = node_name(v, id, fd, &parent, &name);

        if (pfd < 0) {
                mirror_note_change(v, fd, NULL);
                return;
        }
        mirror_note_change(v, pfd, name);
        close(pfd);
        free(name);
}

/* A change's note for the mirror, for a helper: its own copies. */
struct note {
        struct view *v;
        fuse_ino_t id;          /* note_node_change() of it, or 0: mirror_note_change() */
        int fd;                 /* a dup() */
        char *name;
        int from_fd;            /* a rename's source (a dup()), or -1 */
        char *from_name;
};

static void note_free(void *arg)
{
        struct note *n = arg;

        backing_close_later(n->fd);
        if (n->from_fd >= 0)
                backing_close_later(n->from_fd);
        free(n->name);
        free(n->from_name);
        free(n);
}

static int note_run(void *arg)
{
        struct note *n = arg;

        if (n->id) {
                note_node_change(n->v, n->id, n->fd);
                return 0;
        }
        /* The new name first: a note given up on then leaves the old
         * name's copy, which the change made again offline moves. */
        if (n->from_name) {
                mirror_note_rename(n->v, n->from_fd, n->from_name, n->fd, n->name);
                fault_point(FAULT_VIEW_NOTE_RENAMED);
        }
        mirror_note_change(n->v, n->fd, n->name);
        if (n->from_name)
                mirror_note_change(n->v, n->from_fd, n->from_name);
        return 0;
}

/*
 * Online, after a change: keeps the mirror current (node id, descriptor
 * fd; or id 0 and fd/name; and a rename's source from_fd/from_name),
 * bounded, since that reads the server: -ETIMEDOUT when it stopped
 * answering meanwhile (the volume goes offline; the note given up on puts
 * nothing in place, view-mirror.c), else 0.
 */
static int note_bounded(struct view *v, fuse_ino_t id, int fd, const char *name,
                        int from_fd, const char *from_name)
{
        struct note *n;
        int r;

        if (!backing_bounded(v))
                return note_run(&(struct note){ .v = v, .id = id, .fd = fd, .name = (char *)name,
                                                .from_fd = from_fd,
                                                .from_name = (char *)from_name });
        n = calloc(1, sizeof(*n));
        if (!n)
                return -ENOMEM;
        *n = (struct note){ .v = v, .id = id, .from_fd = -1 };
        n->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        n->name = name ? strdup(name) : NULL;
        if (from_name) {
                n->from_fd = fcntl(from_fd, F_DUPFD_CLOEXEC, 0);
                n->from_name = strdup(from_name);
        }
        if (n->fd < 0 || (name && !n->name) ||
            (from_name && (n->from_fd < 0 || !n->from_name))) {
                if (n->fd >= 0)
                        close(n->fd);
                if (n->from_fd >= 0)
                        close(n->from_fd);
                free(n->name);
                free(n->from_name);
                free(n);
                return -ENOMEM;
        }
        r = backing_call_bounded(v, note_run, n, note_free);
        if (r != -ETIMEDOUT)
                note_free(n);
        return r;
}

static int note_change_bounded(struct view *v, fuse_ino_t id, int fd, const char *name)
{
        return note_bounded(v, id, fd, name, -1, NULL);
}

/* Offline: logs the content of an open file written since it was last logged.
 * The writes of a file passed through are not seen: it stays dirty, and its
 * mtime tells whether it changed since it was last logged (a shell's
 * `cmd > file` flushes at the close of the descriptor it dup2()ed, before
 * cmd writes anything). */
static int log_content(struct view *v, struct vfile *f)
{
        struct stat st;
        bool have;
        int r;

        if (!f->dirty)
                return 0;
        have = f->passthrough && fstat(f->fd, &st) == 0;
        if (have && mark_holds(&f->pt_logged, &st))
                return 0;
        r = file_lid(v, f);
        if (r < 0)
                return -EIO;
        if (r == LID_GONE) {
                f->dirty = f->passthrough;
                return 0;
        }
        r = offline_note_content(v, f->lid, f->fd);
        if (r == 0 && f->doubt) {
                r = offline_note_in_doubt(v, f->lid);
                f->doubt = r < 0;
        }
        if (r == 0 && have) {
                mark_take(&f->pt_logged, &st);
        } else if (r == 0 && !f->passthrough) {
                f->dirty = false;
        }
        return r;
}

/*
 * A write, fallocate or ACL change on the backing may change the mode behind
 * the kernel's cached attributes (set-id bits killed, the ACL mask as group
 * bits), which it goes on trusting for permission checks and for execve()'s
 * set-id until they expire: make it ask again.
 */
static void mode_changed_check(struct view *v, fuse_ino_t ino, const struct stat *now,
                               mode_t before)
{
        if (now->st_mode != before)
                fuse_lowlevel_notify_inval_inode(v->se, ino, -1, 0);
}

/*
 * Offline, after a write or fallocate of open file @f as the caller that may
 * have killed set-id bits of its mirror file (@before: the mode then): the
 * mode it left is logged, as the kernel's kill is a mode change.  Replay
 * writes the server's file as root, which would keep the bits.
 */
static int log_setid_kill(struct view *v, struct vfile *f, const struct stat *now,
                          mode_t before)
{
        struct oplog_setattr sa = { .mask = OPLOG_SET_MODE };

        if (!f->lid || (now->st_mode & 07777) == (before & 07777))
                return 0;
        sa.mode = now->st_mode & 07777;
        return offline_note_setattr(v, f->lid, &sa);
}

/* The caller's fsuid and fsgid for a change to an open file (a write or
 * fallocate), so that the backing kills set-id bits as it would for the
 * caller; not for the kernel's own writeback.  *before: the mode before
 * when it has set-id bits to lose (0 when the switch was not needed).
 * -ETIMEDOUT (nothing switched) when the server did not answer the stat. */
static int as_writer(fuse_req_t req, struct view *v, struct fuse_file_info *fi, int fd,
                     mode_t *before)
{
        const struct fuse_ctx *ctx = fuse_req_ctx(req);
        struct stat st;
        int r;

        *before = 0;
        if (ctx->uid == 0 || fi->writepage)
                return 0;
        r = backing_fstatat(v, fd, NULL, &st);
        if (r == -ETIMEDOUT)
                return r;
        setfsgid(ctx->gid);
        setfsuid(ctx->uid);
        *before = r < 0 || !(st.st_mode & (S_ISUID | S_ISGID)) ? S_IFREG : st.st_mode;
        return 0;
}

static void leave_writer(mode_t before)
{
        if (!before)
                return;
        setfsuid(0);
        setfsgid(0);
}

/* ---- operations ---- */

static void op_init(void *ud, struct fuse_conn_info *conn)
{
        struct view *v = ud;

        if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
                conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
        if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
                conn->want |= FUSE_CAP_CACHE_SYMLINKS;
        /* Writes, truncates and chowns run with the caller's fsuid, so the
         * backing clears set-id bits itself, as it would for the caller. */
        if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV)
                conn->want |= FUSE_CAP_HANDLE_KILLPRIV;
        if (conn->capable & FUSE_CAP_EXPORT_SUPPORT)
                conn->want |= FUSE_CAP_EXPORT_SUPPORT;
        /* The kernel leaves the umask to us (create_mode()): it must not
         * apply when the parent has a default ACL.  With POSIX_ACL it also
         * checks ACL entries (not only the mode bits) and refreshes the
         * attributes after an ACL change, which changes the mode. */
        if (conn->capable & FUSE_CAP_DONT_MASK)
                conn->want |= FUSE_CAP_DONT_MASK;
        if (conn->capable & FUSE_CAP_POSIX_ACL)
                conn->want |= FUSE_CAP_POSIX_ACL;
        conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
                        FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
        conn->time_gran = 1;
        log_info("FUSE connection %s (protocol %u.%u)",
                 v->takeover ? "taken over" : "initialised", conn->proto_major,
                 conn->proto_minor);
}

/*
 * A name a directory the mirror holds in part lacks.  It may well exist on
 * the server: never a cached "no".  In write-back it is fetched from there
 * and looked up again (*again: the volume switched, or it was put there
 * meanwhile: the lookup starts over); else EHOSTDOWN.
 */
static int lookup_miss(struct view *v, fuse_ino_t parent, int pfd, const char *name,
                       struct fuse_entry_param *e, bool *again)
{
        int r = writeback_fetch_name(v, pfd, name);

        *again = r == -EAGAIN;
        if (r == 0)
                return vnode_lookup(v, parent, pfd, name, e);
        if (r == -EHOSTDOWN && __atomic_load_n(&v->state, __ATOMIC_ACQUIRE) != VIEW_WRITEBACK)
                log_info("Offline lookup of '%s' in a directory not mirrored completely:"
                         " EHOSTDOWN", name);
        return *again ? -EHOSTDOWN : r;
}

static int lookup_once(struct view *v, fuse_ino_t parent, const char *name,
                       struct fuse_entry_param *e)
{
        bool again = true;
        int r = -EHOSTDOWN;

        for (int tries = 0; again && tries < 3; tries++) {
                uint64_t switches;
                struct vnode *p;
                bool offline;
                int pfd = vnode_get_served(v, parent, &p, &offline, &switches);

                if (pfd < 0)
                        return pfd;
                again = false;
                r = vnode_lookup_in(v, offline, switches, parent, pfd, name, e);
                if (r == -ENOENT && offline && !vnode_dir_complete(v, p, pfd))
                        r = lookup_miss(v, parent, pfd, name, e, &again);
                vnode_put(v, p);
                /* A switch passed it by: an answer of the tree served before,
                 * asked again (as often as switches pass it by). */
                if (r == -EAGAIN || (r < 0 && r != -ETIMEDOUT &&
                                     __atomic_load_n(&v->switches, __ATOMIC_ACQUIRE) != switches)) {
                        again = true;
                        tries--;
                }
        }
        return r;
}

/*
 * Within the lease, a name of a directory the background pass keeps
 * (view-revalidate.c) is answered from what that pass listed, for a regular
 * file whose node the table knows by that name and whose store copy is
 * complete: no round trip.  Anything else asks the backing.
 */
static int lookup_locally(struct view *v, fuse_ino_t parent, const char *name,
                          struct fuse_entry_param *e)
{
        struct sobj_info info;
        struct stat st;
        struct sobj *o;
        fuse_ino_t id;
        bool valid;

        if (v->backing_local || view_offline(v) || __atomic_load_n(&v->conflicts, __ATOMIC_ACQUIRE) ||
            revalidate_lookup(v, parent, name, &st) < 0 || !S_ISREG(st.st_mode) ||
            store_obj_find(v->store, st.st_ino, &o) < 0)
                return -ENOENT;
        store_obj_info(o, &info);
        valid = info.complete && info.size == (uint64_t)st.st_size &&
                !store_obj_stale(o, now_ns(), (uint64_t)(v->lease_s * 1e9));
        store_obj_put(v->store, o);
        if (!valid || !(id = vnode_lookup_known(v, parent, name, st.st_ino, st.st_mode)))
                return -ENOENT;
        memset(e, 0, sizeof(*e));
        e->ino = id;
        e->attr = st;
        e->attr_timeout = v->lease_s;
        e->entry_timeout = v->lease_s;
        return 0;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
        struct view *v = V(req);
        struct fuse_entry_param e;
        int r;

        /* Only the kernel's export operations look up "." and ".." (path
         * walks resolve them itself): finding a node by its nodeid. */
        if (!strcmp(name, ".") || !strcmp(name, "..")) {
                r = vnode_lookup_dot(v, parent, name[1] == '.', &e);
                reply_entry_or_err(req, r == -ENOENT ? -ESTALE : r, &e);
                return;
        }
        if (lookup_locally(v, parent, name, &e) == 0) {
                reply_entry_or_err(req, 0, &e);
                return;
        }
        r = lookup_once(v, parent, name, &e);

        /* The server did not answer in time: the volume went offline, ask the mirror. */
        if (r == -ETIMEDOUT && view_wait_offline(v))
                r = lookup_once(v, parent, name, &e);
        if (r == -ENOENT) {
                memset(&e, 0, sizeof(e));
                e.entry_timeout = v->lease_s;   /* negative entry, within the lease */
                fuse_reply_entry(req, &e);
                return;
        }
        reply_entry_or_err(req, r, &e);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
        vnode_forget(V(req), ino, nlookup);
        fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
        for (size_t i = 0; i < count; i++)
                vnode_forget(V(req), forgets[i].ino, forgets[i].nlookup);
        fuse_reply_none(req);
}

static int getattr_once(struct view *v, fuse_ino_t ino, struct stat *st, bool *offline)
{
        struct vnode *n;
        int fd = vnode_get_served(v, ino, &n, offline, NULL), r;

        if (fd < 0)
                return fd;
        r = vnode_fill_stat_in(v, *offline, n, fd, st);
        vnode_put(v, n);
        return r;
}

/*
 * The attributes of node id from one of its open files: a node that found
 * no counterpart in the tree served (its object lost its last name) is
 * still what its open files have (fstat(2) asks by node, without the
 * file): the file the kernel passes them through, or else one's own.
 * -ESTALE when none is open.
 */
static int open_file_attr(struct view *v, fuse_ino_t id, struct stat *st)
{
        GHashTableIter it;
        gpointer key, val;
        int r = -ESTALE;

        if (passthrough_file_stat(id, st) == 0)
                return 0;
        pthread_mutex_lock(&v->ftab_lock);
        g_hash_table_iter_init(&it, v->files);
        while (r < 0 && g_hash_table_iter_next(&it, &key, &val)) {
                struct vfile *f = val;

                if (f->id == id && !f->dir && f->fd >= 0 && fstat(f->fd, st) == 0)
                        r = 0;
        }
        pthread_mutex_unlock(&v->ftab_lock);
        return r;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        struct view *v = V(req);
        struct sobj *o;
        struct stat st;
        bool offline;
        int r = getattr_once(v, ino, &st, &offline);

        if (r == -ETIMEDOUT && view_wait_offline(v))
                r = getattr_once(v, ino, &st, &offline);
        if (r == -ESTALE && (r = open_file_attr(v, ino, &st)) == 0)
                offline = true;         /* no store object to revalidate by it */
        /* The kernel drops its pages when these attributes show a change; an
         * open file's store copy must not then serve the old bytes again. */
        if (r == 0 && S_ISREG(st.st_mode) && !offline &&
            store_obj_find_loaded(v->store, st.st_ino, &o) == 0) {
                store_obj_revalidate(v->store, o, &st, false, NULL);
                store_obj_put(v->store, o);
        }
        if (r < 0)
                fuse_reply_err(req, -r);
        else
                reply_attr(req, ino, &st);
}

/*
 * Online, over a server that may vanish (BackingTimeout): an acknowledged
 * write, truncate or fallocate goes to the mirror's copy of a pinned file
 * too, which the note at close otherwise brings up to date by reading the
 * server.  Should the server stop answering before that note, the mirror
 * still holds what the server acknowledged, so that what the volume serves
 * offline, and the base the changes made offline are logged against,
 * include it (else the replay would take it for another's edit: a
 * conflict, or a merge).  The mirror's identity of the file stays the
 * server's old one until the note.
 */
struct mirror_change {
        enum { MC_WRITE, MC_TRUNCATE, MC_FALLOCATE } kind;
        const char *buf;        /* MC_WRITE: size bytes at off */
        size_t size;
        off_t off, len;         /* MC_TRUNCATE: the size is off */
        int mode;               /* MC_FALLOCATE's */
};

/* The mirror's copy of node id (server inode ino), for writing, or -errno. */
static int mirror_copy_of_node(struct view *v, fuse_ino_t id, uint64_t ino)
{
        uint64_t parent;
        struct vnode *p;
        char *name;
        int pfd, fd = -ENOENT;

        if (vnode_parent_of(v, id, 0, &parent, &name) < 0)
                return -ENOENT;
        pfd = vnode_get(v, parent, &p);
        if (pfd >= 0) {
                fd = mirror_open_copy(v, pfd, name, ino);
                vnode_put(v, p);
        }
        free(name);
        return fd;
}

/* Zeroes [off, end) of fd: a hole punched or a range zeroed where the
 * mirror's filesystem does neither. */
static int zero_range(int fd, off_t off, off_t end)
{
        static const char zeros[65536];

        while (off < end) {
                size_t n = end - off < (off_t)sizeof(zeros) ? (size_t)(end - off) : sizeof(zeros);
                ssize_t w = pwrite(fd, zeros, n, off);

                if (w <= 0)
                        return w < 0 ? -errno : -EIO;
                off += w;
        }
        return 0;
}

/* The same change to the mirror's copy: the same bytes, size and holes read
 * back (allocation aside). */
static int apply_to_copy(int fd, const struct mirror_change *c)
{
        struct stat st;
        ssize_t n;
        off_t end;
        int r;

        switch (c->kind) {
        case MC_WRITE:
                n = pwrite(fd, c->buf, c->size, c->off);
                return n == (ssize_t)c->size ? 0 : n < 0 ? -errno : -EIO;
        case MC_TRUNCATE:
                return ftruncate(fd, c->off) < 0 ? -errno : 0;
        case MC_FALLOCATE:
                if (fallocate(fd, c->mode, c->off, c->len) == 0)
                        return 0;
                if (errno != EOPNOTSUPP ||
                    (c->mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE |
                                 FALLOC_FL_ZERO_RANGE)))
                        return -errno;
                if (fstat(fd, &st) < 0)
                        return -errno;
                end = c->off + c->len;
                r = 0;
                if (c->mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))
                        r = zero_range(fd, c->off, end < st.st_size ? end : st.st_size);
                if (r == 0 && !(c->mode & FALLOC_FL_KEEP_SIZE) && end > st.st_size &&
                    ftruncate(fd, end) < 0)
                        r = -errno;
                return r;
        }
        return -EINVAL;
}

/* A copy the note replaced meanwhile (a rename over it): not the mirror's any more. */
static bool copy_replaced(int fd)
{
        struct stat st;

        return fstat(fd, &st) < 0 || st.st_nlink == 0;
}

static void mark_stale(int fd, uint64_t ino)
{
        int r = mirror_mark_stale(fd);

        if (r < 0)
                log_warn("Failed to mark the offline copy of inode %" PRIu64 " stale: %s", ino,
                         strerror(-r));
}

/* Change c made to mirror copy fd; a copy that does not take it is marked
 * stale: the note copies the server's again, and offline it is not served. */
static int apply_or_stale(int fd, uint64_t ino, const struct mirror_change *c)
{
        int r = apply_to_copy(fd, c);

        if (r < 0) {
                log_warn("Failed to change the offline copy of inode %" PRIu64 " too: %s"
                         " (marked stale: copied again at the note)", ino, strerror(-r));
                mark_stale(fd, ino);
        }
        return r;
}

/*
 * Change c, which the server acknowledged for node id (server inode ino),
 * made to the mirror's copy too: f's, found at its first change (and again
 * when a note replaced it), or, without an open file (a truncate by name),
 * the copy opened for it.
 */
static void mirror_through(struct view *v, struct vfile *f, fuse_ino_t id, uint64_t ino,
                           const struct mirror_change *c)
{
        bool looked = false;
        int cur, fd = -1;

        if (!f) {
                fd = mirror_copy_of_node(v, id, ino);
                if (fd >= 0) {
                        apply_or_stale(fd, ino, c);
                        close(fd);
                }
                return;
        }
        /* Looked for with no lock held over the node table. */
        cur = __atomic_load_n(&f->mirror_fd, __ATOMIC_ACQUIRE);
        if (cur == -1 || (cur >= 0 && copy_replaced(cur))) {
                fd = mirror_copy_of_node(v, id, ino);
                looked = true;
        }
        pthread_mutex_lock(&f->lock);
        if (f->mirror_fd == -1 || (looked && cur >= 0 && f->mirror_fd == cur)) {
                if (f->mirror_fd >= 0)
                        close(f->mirror_fd);
                __atomic_store_n(&f->mirror_fd, fd < 0 ? -2 : fd, __ATOMIC_RELEASE);
        } else if (fd >= 0) {
                close(fd);
        }
        if (f->mirror_fd >= 0 && apply_or_stale(f->mirror_fd, ino, c) < 0) {
                close(f->mirror_fd);
                __atomic_store_n(&f->mirror_fd, -2, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&f->lock);
}

/*
 * Online, the server refused f's writes at its flush (an asynchronous write
 * failed, as sshfs reports at close): what went through to the mirror's
 * copy and the store's may not be on the server.  The copy is marked stale
 * (the note copies the server's again, or the hoard walk and the resync do
 * when the note is given up on; offline it is not served meanwhile) and the
 * store forgets the object's bytes.
 */
static void mirror_refused(struct view *v, struct vfile *f)
{
        struct sobj *o = NULL;
        uint64_t ino = 0;
        mode_t type;
        int fd;

        if (vnode_peek(v, f->id, &ino, &type) == 0 &&
            (f->obj || store_obj_find(v->store, ino, &o) == 0)) {
                store_obj_changed_range(v->store, o ? o : f->obj, 0, -1, NULL);
                if (o)
                        store_obj_put(v->store, o);
        }
        pthread_mutex_lock(&f->lock);
        fd = f->mirror_fd;
        if (fd >= 0) {
                mark_stale(fd, ino);
                close(fd);
                __atomic_store_n(&f->mirror_fd, -2, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&f->lock);
        if (fd >= 0)
                log_warn("The server refused writes to open file handle %" PRIu64 " at its"
                         " close: its offline copy is copied from the server again", f->fh);
}

/* Offline: logs what a setattr changed (a size change is new content; the
 * set-id bits a chown or truncate killed, @mode_before the mode before them,
 * a mode change: replay's chown or truncate as root may kill other bits). */
static int log_setattr(struct view *v, uint64_t lid, int fd, int ffd, const struct stat *attr,
                       int valid, mode_t mode_before)
{
        struct oplog_setattr sa = { 0 };
        struct stat now;
        int r = 0;

        if (valid & FUSE_SET_ATTR_MODE) {
                sa.mask |= OPLOG_SET_MODE;
                sa.mode = attr->st_mode & 07777;
        } else if ((mode_before & (S_ISUID | S_ISGID)) &&
                   fstatat(fd, "", &now, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 &&
                   (now.st_mode & 07777) != (mode_before & 07777)) {
                sa.mask |= OPLOG_SET_MODE;
                sa.mode = now.st_mode & 07777;
        }
        if (valid & FUSE_SET_ATTR_UID) {
                sa.mask |= OPLOG_SET_UID;
                sa.uid = attr->st_uid;
        }
        if (valid & FUSE_SET_ATTR_GID) {
                sa.mask |= OPLOG_SET_GID;
                sa.gid = attr->st_gid;
        }
        /* "Now" is the time of this change, as the mirror took it, not replay's. */
        if (valid & (FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW) &&
            fstatat(fd, "", &now, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) {
                sa.mask |= OPLOG_SET_ATIME;
                sa.atime = valid & FUSE_SET_ATTR_ATIME_NOW ? now.st_atim : attr->st_atim;
        }
        if (valid & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
                sa.mask |= OPLOG_SET_MTIME;
                sa.mtime = valid & FUSE_SET_ATTR_MTIME_NOW ? now.st_mtim : attr->st_mtim;
        }
        if (valid & FUSE_SET_ATTR_SIZE) {
                int cfd = ffd >= 0 ? ffd : backing_reopen(fd, O_RDONLY);

                if (cfd < 0)
                        return cfd;
                r = offline_note_content(v, lid, cfd);
                if (cfd != ffd)
                        close(cfd);
        }
        if (r == 0 && sa.mask)
                r = offline_note_setattr(v, lid, &sa);
        return r;
}

/*
 * A truncate to @size (@times NULL), or a change of times, of node @ino
 * made in file @changed is made in the file the kernel passes the node
 * through as well, when that is another file (the other tree's, or one
 * that lost its last name): its size and times are what the node shows,
 * and what a writer's shipping copies.  1 when it was, 0 when there is
 * none, or -errno.
 */
static int change_kernel_file(fuse_ino_t ino, int changed, off_t size,
                              const struct timespec *times)
{
        int fd = passthrough_kernel_file(ino), r;

        if (fd < 0)
                return 0;
        if (same_file(fd, changed))
                r = 0;
        else
                r = (times ? futimens(fd, times) : ftruncate(fd, size)) < 0 ? -errno : 1;
        close(fd);
        return r;
}

/* The utimensat(2) times a setattr asks for (UTIME_OMIT for the others). */
static void setattr_times(const struct stat *attr, int valid, struct timespec tv[2])
{
        tv[0] = tv[1] = (struct timespec){ 0, UTIME_OMIT };
        if (valid & FUSE_SET_ATTR_ATIME_NOW)
                tv[0].tv_nsec = UTIME_NOW;
        else if (valid & FUSE_SET_ATTR_ATIME)
                tv[0] = attr->st_atim;
        if (valid & FUSE_SET_ATTR_MTIME_NOW)
                tv[1].tv_nsec = UTIME_NOW;
        else if (valid & FUSE_SET_ATTR_MTIME)
                tv[1] = attr->st_mtim;
}

/* The file open file f's writes reach: its stranded file, else its own. */
static int kernel_file_of(const struct vfile *f)
{
        return f->stranded_fd >= 0 ? f->stranded_fd : f->fd;
}

/*
 * A setattr through an open file of a node that found no counterpart in
 * the tree served (its object lost its last name: no name leads there, and
 * nothing is logged): made in the open file's file, and in the file the
 * kernel passes it through when that is another; *st its attributes.
 */
static int setattr_open_file(struct view *v, fuse_ino_t ino, const struct stat *attr, int valid,
                             struct fuse_file_info *fi, struct stat *st)
{
        struct timespec tv[2];
        struct vfile *f = vfile_of(v, fi, &(int){ 0 });
        int r = 0;

        if (!f || f->dir)
                return -ESTALE;
        if ((valid & FUSE_SET_ATTR_MODE) && fchmod(f->fd, attr->st_mode & 07777) < 0)
                r = -errno;
        if (r == 0 && (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) &&
            fchown(f->fd, valid & FUSE_SET_ATTR_UID ? attr->st_uid : (uid_t)-1,
                   valid & FUSE_SET_ATTR_GID ? attr->st_gid : (gid_t)-1) < 0)
                r = -errno;
        if (r == 0 && (valid & FUSE_SET_ATTR_SIZE)) {
                r = ftruncate(f->fd, attr->st_size) < 0 ? -errno : 0;
                if (r == 0 && f->stranded_fd >= 0)
                        r = ftruncate(f->stranded_fd, attr->st_size) < 0 ? -errno : 0;
                if (r == 0)
                        r = change_kernel_file(ino, kernel_file_of(f), attr->st_size, NULL);
        }
        if (r >= 0 && (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
                setattr_times(attr, valid, tv);
                r = futimens(f->fd, tv) < 0 ? -errno : 0;
                if (r == 0 && f->stranded_fd >= 0)
                        r = futimens(f->stranded_fd, tv) < 0 ? -errno : 0;
                if (r == 0)
                        r = change_kernel_file(ino, kernel_file_of(f), 0, tv);
        }
        return r < 0 ? r : open_file_attr(v, ino, st);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
                       struct fuse_file_info *fi)
{
        struct view *v = V(req);
        struct vfile *f = NULL;
        struct backing_change ch;
        struct caller_id id;
        struct stat st;
        uint64_t lid;
        int r, err, ffd;
        mode_t mode_before;
        bool log, redo = false, stranded;

again:
        stranded = false;
        lid = 0;
        r = 0;
        ffd = -1;
        mode_before = 0;
        view_change_begin(v);
        bool offline;
        struct vnode *n;
        int fd = vnode_get_served(v, ino, &n, &offline, NULL);

        if (fd < 0) {
                if (fd == -ESTALE && fi)
                        fd = setattr_open_file(v, ino, attr, valid, fi, &st);
                view_change_end(v);
                if (fd < 0)
                        fuse_reply_err(req, -fd);
                else
                        reply_attr(req, ino, &st);
                return;
        }
        log = offline;
        if (offline && (r = lid_before_change(v, ino, fd, &lid)) < 0)
                goto out;
        if (r == LID_GONE) {
                log = false;
                r = 0;
        }
        if (fi) {
                f = vfile_of(v, fi, &err);
                if (f && !f->dir)
                        ffd = f->fd;
        }
        caller_of(req, &id);
        /* Each change as the caller, on the open file when there is one. */
        ch = (struct backing_change){ .fd = ffd >= 0 ? ffd : fd, .open_file = ffd >= 0,
                                      .fd2 = -1 };

        if (valid & FUSE_SET_ATTR_MODE) {
                const struct caller_id *who = &id;
                struct stat cur;

                /* The kernel kills set-id bits on a write or truncate by another
                 * user with a forced mode change (default_permissions has already
                 * refused any chmod the caller may not do): apply that as root. */
                if ((id.uid || id.gid) && vnode_fill_stat(v, fd, &cur) == 0 &&
                    (cur.st_mode & 07777 & ~(S_ISUID | S_ISGID)) == (attr->st_mode & 07777) &&
                    (cur.st_mode & (S_ISUID | S_ISGID)))
                        who = NULL;
                ch.kind = BC_CHMOD;
                ch.mode = attr->st_mode;
                r = backing_change(v, &ch, who);
                if (r < 0)
                        goto out;
        }
        if (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
                struct stat cur;

                /* Offline, a chown kills set-id bits of a non-directory: logged. */
                if (log && !(valid & FUSE_SET_ATTR_MODE) &&
                    fstatat(fd, "", &cur, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0)
                        mode_before = cur.st_mode;
                ch.kind = BC_CHOWN;
                ch.fd = fd;     /* by its O_PATH descriptor, a symlink itself */
                ch.open_file = false;
                ch.uid = valid & FUSE_SET_ATTR_UID ? attr->st_uid : (uid_t)-1;
                ch.gid = valid & FUSE_SET_ATTR_GID ? attr->st_gid : (gid_t)-1;
                r = backing_change(v, &ch, &id);
                ch.fd = ffd >= 0 ? ffd : fd;
                ch.open_file = ffd >= 0;
                if (r < 0)
                        goto out;
        }
        if (valid & FUSE_SET_ATTR_SIZE) {
                struct stat cur;

                /* Offline, a truncate as the caller may kill set-id bits: logged. */
                if (log && !mode_before && fstat(ch.fd, &cur) == 0)
                        mode_before = cur.st_mode;
                ch.kind = BC_TRUNCATE;
                ch.off = attr->st_size;
                r = backing_change(v, &ch, &id);
                if (r < 0)
                        goto out;
                if (S_ISREG(vnode_type(n))) {
                        int tr = change_kernel_file(ino, ch.fd, attr->st_size, NULL);

                        stranded = tr != 0;
                        if (tr < 0) {
                                r = tr;
                                goto out;
                        }
                }
                if (!offline && backing_bounded(v) && S_ISREG(vnode_type(n)))
                        mirror_through(v, f && !f->dir ? f : NULL, ino, vnode_ino(n),
                                       &(struct mirror_change){ .kind = MC_TRUNCATE,
                                                                .off = attr->st_size });
        }
        if (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
                struct timespec *tv = ch.times;

                setattr_times(attr, valid, tv);
                ch.kind = BC_UTIMENS;
                /* The link itself (a NULL path would need a non-O_PATH fd). */
                ch.flags = ffd < 0 && S_ISLNK(vnode_type(n)) ? AT_EMPTY_PATH : 0;
                r = backing_change(v, &ch, &id);
                if (r < 0)
                        goto out;
                if (S_ISREG(vnode_type(n))) {
                        int tr = change_kernel_file(ino, ch.fd, 0, tv);

                        stranded = stranded || tr != 0;
                        if (tr < 0) {
                                r = tr;
                                goto out;
                        }
                }
        }
out:
        if (r >= 0 && log)
                r = log_setattr(v, lid, fd, ffd, attr, valid, mode_before);
        /* Offline, a stranded file is the server's: it holds the change too. */
        if (r >= 0 && log && (redo || stranded))
                r = offline_note_in_doubt(v, lid);
        if (r >= 0)
                r = vnode_fill_stat_of(v, n, fd, &st);
        if (r >= 0 && !offline && (valid & FUSE_SET_ATTR_SIZE) && S_ISREG(st.st_mode)) {
                struct sobj *o;

                /* Drop what the truncation changed, keep the rest. */
                if (store_obj_find(v->store, st.st_ino, &o) == 0) {
                        store_obj_changed_range(v->store, o, attr->st_size, -1, &st);
                        store_obj_put(v->store, o);
                }
        }
        /* A truncation too: the mirror would serve the old bytes offline. */
        if (r >= 0 && !offline)
                r = note_change_bounded(v, ino, fd, NULL);
        if (r == -ETIMEDOUT && !offline) {
                redo = true;
                if (left_for_offline(v, n, NULL))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        vnode_put(v, n);
        view_change_end(v);
        if (r < 0)
                fuse_reply_err(req, -r);
        else
                reply_attr(req, ino, &st);
}

/* backing_query() of node ino, in the tree its descriptor is of. */
static ssize_t query_once(struct view *v, fuse_ino_t ino, enum backing_query_kind kind,
                          void *buf, size_t size)
{
        struct vnode *n;
        bool offline;
        int fd = vnode_get_served(v, ino, &n, &offline, NULL);
        ssize_t len;

        if (fd < 0)
                return fd;
        len = backing_query_in(v, offline, kind, fd, NULL, buf, size);
        vnode_put(v, n);
        return len;
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
        struct view *v = V(req);
        char buf[PATH_MAX + 1];
        ssize_t len = query_once(v, ino, BQ_READLINK, buf, sizeof(buf));

        /* The server did not answer in time: the volume went offline, ask the mirror. */
        if (len == -ETIMEDOUT && view_wait_offline(v))
                len = query_once(v, ino, BQ_READLINK, buf, sizeof(buf));
        if (len < 0)
                fuse_reply_err(req, (int)-len);
        else if (len >= (ssize_t)sizeof(buf))
                fuse_reply_err(req, ENAMETOOLONG);
        else {
                buf[len] = 0;
                fuse_reply_readlink(req, buf);
        }
}

/*
 * The mode a new object of parent pfd gets.  A default ACL on the parent
 * replaces the umask (POSIX.1e), and the backing applies it itself, the
 * daemon's own umask being 0; otherwise the caller's umask, which the
 * kernel hands over instead of applying it (FUSE_CAP_DONT_MASK).  Applied
 * to *mode; -ETIMEDOUT when the server did not say in time.
 */
static int create_mode(fuse_req_t req, struct view *v, int pfd, mode_t *mode)
{
        ssize_t r = backing_query(v, BQ_DIR_GETXATTR, pfd, "system.posix_acl_default", NULL, 0);

        if (r == -ETIMEDOUT)
                return (int)r;
        if (r <= 0)
                *mode &= ~fuse_req_ctx(req)->umask;
        return 0;
}

/*
 * Offline: logs the create of pfd/name in node parent.  The parent's log id
 * is its node's once known (an untar's creates in a directory read its
 * marks once); *lid gets the new object's.  @epoch: vnode_ids_epoch() from
 * before the change.
 */
static int note_create(struct view *v, fuse_ino_t parent, int pfd, const char *name,
                       const char *target, uint64_t epoch, uint64_t *lid)
{
        uint64_t plid = 0;
        int r;

        vnode_known_lid(v, parent, &plid);
        r = offline_note_create(v, pfd, &plid, name, target, lid);
        if (r >= 0)
                vnode_remember_lid(v, parent, epoch, plid);
        return r;
}

enum mk { MK_NOD, MK_DIR, MK_LINK };

static void make_node(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      dev_t rdev, const char *target, enum mk kind)
{
        struct view *v = V(req);
        struct fuse_entry_param e;
        uint64_t epoch, lid;
        struct caller_id id;
        mode_t asked = mode;
        bool redo = false;
        int r;

again:
        mode = asked;
        epoch = vnode_ids_epoch(v);
        lid = 0;
        WITH_NODE_CHANGING(v, parent, p, pfd, req, offline);
        r = kind != MK_LINK ? create_mode(req, v, pfd, &mode) : 0;
        if (r >= 0 && redo && offline)
                clear_note_leftover(pfd, name, true, 0);
        if (r >= 0)
                r = backing_change(v, &(struct backing_change){
                .kind = kind == MK_DIR ? BC_MKDIR : kind == MK_LINK ? BC_SYMLINK : BC_MKNOD,
                .fd = pfd, .name = name, .fd2 = -1, .name2 = target, .mode = mode,
                .rdev = rdev }, caller_of(req, &id));
        if (r >= 0 && offline)
                mirror_dirs_changed();  /* made in the mirror, the tree served */
        if (r >= 0 && offline)
                r = note_create(v, parent, pfd, name, target, epoch, &lid);
        else if (r >= 0)
                r = note_change_bounded(v, 0, pfd, name);
        if (r >= 0 && redo)
                r = create_in_doubt(v, pfd, name);
        if (r >= 0)
                r = vnode_lookup(v, parent, pfd, name, &e);
        /* One name: its node keeps its log id (the next creates in a new directory). */
        if (r >= 0 && lid)
                vnode_remember_lid(v, e.ino, epoch, lid);
        if (r == -ETIMEDOUT && !offline) {
                redo = true;
                if (left_for_offline(v, p, NULL))
                        goto again;
                r = -EIO;
        } else {
                vnode_put(v, p);
                view_change_end(v);
        }
        reply_entry_or_err(req, r, &e);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     dev_t rdev)
{
        make_node(req, parent, name, mode, rdev, NULL, MK_NOD);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
        make_node(req, parent, name, mode, 0, NULL, MK_DIR);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
        make_node(req, parent, name, 0, 0, link, MK_LINK);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
        struct view *v = V(req);
        struct fuse_entry_param e;
        struct vnode *np, *n;
        uint64_t lid = 0;
        bool offline;
        int r, npfd, fd;

        fdstore_flush();        /* names move: the holder has the kernel's files */
again:
        view_change_begin(v);
        r = vnode_get_pair_served(v, ino, &n, &fd, newparent, &np, &npfd, &offline);
        if (r < 0) {
                view_change_end(v);
                fuse_reply_err(req, -r);
                return;
        }
        r = offline ? lid_before_change(v, ino, fd, &lid) : 0;
        if (r == LID_GONE)
                r = -ENOENT;    /* no name to link it by */
        /* As the daemon: linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH. */
        if (r >= 0)
                r = backing_change(v, &(struct backing_change){ .kind = BC_LINK, .fd = fd,
                                   .fd2 = npfd, .name2 = newname }, NULL);
        /* A file open since its create may now have a name the mirror keeps. */
        if (r >= 0)
                mirror_dirs_changed();
        if (r >= 0 && offline) {
                r = offline_note_link(v, lid, npfd, newname);
                vnode_ids_forget(v);    /* now named by each of its names */
        } else if (r >= 0) {
                /* The mirror object first, so that the new name becomes its link. */
                r = note_change_bounded(v, ino, fd, NULL);
                if (r >= 0)
                        r = note_change_bounded(v, 0, npfd, newname);
        }
        if (r >= 0)
                r = vnode_lookup(v, newparent, npfd, newname, &e);
        if (r == -ETIMEDOUT && !offline) {
                if (left_for_offline(v, np, n))
                        goto again;
                r = -EIO;
        } else {
                vnode_put(v, np);
                vnode_put(v, n);
                view_change_end(v);
        }
        reply_entry_or_err(req, r, &e);
}

static void op_unlink_common(fuse_req_t req, fuse_ino_t parent, const char *name, int flags)
{
        struct view *v = V(req);
        uint64_t plid = 0, lid = 0;
        struct caller_id id;
        struct stat st;
        bool had;
        int r;

        fdstore_flush();        /* names move: the holder has the kernel's files */
again:
        WITH_NODE_CHANGING(v, parent, p, pfd, req, offline);
        r = backing_fstatat(v, pfd, name, &st);
        had = r == 0;
        r = r == -ETIMEDOUT ? r : 0;
        if (offline && had && (offline_lid(v, pfd, NULL, &plid) < 0 ||
                               offline_lid(v, pfd, name, &lid) < 0))
                r = -EIO;
        if (r >= 0)
                r = backing_change(v, &(struct backing_change){ .kind = BC_UNLINK, .fd = pfd,
                                   .name = name, .fd2 = -1, .flags = flags },
                                   caller_of(req, &id));
        if (r >= 0 && had) {
                vnode_name_gone(v, st.st_ino, parent, name);
                vfile_keep_nameless(v, st.st_ino, offline);
        }
        if (r >= 0 && offline) {
                r = offline_note_unlink(v, plid, name, lid, flags & AT_REMOVEDIR);
                vnode_ids_forget(v);    /* a create cancelled; inode numbers free */
        } else if (r >= 0 && had) {
                drop_if_last(v, &st);
                r = note_change_bounded(v, 0, pfd, name);
        }
        if (r == -ETIMEDOUT && !offline) {
                if (left_for_offline(v, p, NULL))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        vnode_put(v, p);
        view_change_end(v);
        fuse_reply_err(req, -r);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
        op_unlink_common(req, parent, name, 0);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
        op_unlink_common(req, parent, name, AT_REMOVEDIR);
}

/*
 * A rename that finds its source gone may be one the previous worker did
 * but did not answer (the kernel resends it after a takeover): done if the
 * node the kernel knows by the old name is now at the new one.  Answering
 * ENOENT would leave the kernel's dentries (a cached "no" for the new name)
 * contradicting the backing.
 */
static bool rename_was_done(struct view *v, fuse_ino_t parent, int pfd, const char *name,
                            fuse_ino_t newparent, int npfd, const char *newname)
{
        struct stat st, gone;

        if (!v->takeover || fstatat(pfd, name, &gone, AT_SYMLINK_NOFOLLOW) == 0 ||
            fstatat(npfd, newname, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return false;
        /* The predecessor died before (old name) or after (new name) it
         * re-pointed the node: either way the node is the target now. */
        return vnode_child_is(v, parent, name, st.st_ino) ||
               vnode_child_is(v, newparent, newname, st.st_ino);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
        struct view *v = V(req);
        uint64_t plid = 0, lid = 0, nplid = 0, other = 0, from_ino = 0, to_ino = 0;
        bool had, offline, save, redo = false, done = false;
        struct mirror_base dest_base;
        struct vnode *np, *p;
        struct caller_id id;
        struct stat victim;
        int r, npfd, pfd;

        fdstore_flush();        /* names move: the holder has the kernel's files */
again:
        view_change_begin(v);
        r = vnode_get_pair_served(v, parent, &p, &pfd, newparent, &np, &npfd, &offline);
        if (r < 0) {
                view_change_end(v);
                fuse_reply_err(req, -r);
                return;
        }
        /* Where the mirror's copies were, should this be made again offline. */
        if (!redo && !offline && backing_bounded(v)) {
                from_ino = mirror_copy_ino(v, pfd, name);
                to_ino = mirror_copy_ino(v, npfd, newname);
        }
        r = flags & RENAME_EXCHANGE ? -ENOENT : backing_fstatat(v, npfd, newname, &victim);
        had = r == 0;
        r = r == -ETIMEDOUT ? r : 0;
        if (redo && offline)
                done = renamed_in_mirror(pfd, name, npfd, newname, flags, from_ino, to_ino);
        if (redo && offline && !done && !(flags & RENAME_EXCHANGE)) {
                struct mirror_base src;

                clear_note_leftover(npfd, newname, false,
                                    mirror_get_base(pfd, name, &src) == 0 ? src.ver.ino : 0);
                had = fstatat(npfd, newname, &victim, AT_SYMLINK_NOFOLLOW) == 0;
        }
        if (done)
                had = false;    /* what it replaced went from the mirror too */
        save = offline && !done &&
               offline_is_atomic_save(pfd, name, npfd, newname, flags, &dest_base);
        if (offline) {
                /* Once done, the object moved is at the new name. */
                int sfd = done ? npfd : pfd, tfd = done ? pfd : npfd;
                const char *sname = done ? newname : name, *tname = done ? name : newname;
                struct stat tmp;

                if (offline_lid(v, pfd, NULL, &plid) < 0 || offline_lid(v, sfd, sname, &lid) < 0 ||
                    offline_lid(v, npfd, NULL, &nplid) < 0 ||
                    (fstatat(tfd, tname, &tmp, AT_SYMLINK_NOFOLLOW) == 0 &&
                     offline_lid(v, tfd, tname, &other) < 0))
                        r = -EIO;
        }
        if (r >= 0 && !done)
                r = backing_change(v, &(struct backing_change){ .kind = BC_RENAME, .fd = pfd,
                                   .name = name, .fd2 = npfd, .name2 = newname,
                                   .flags = (int)flags }, caller_of(req, &id));
        if (r == -ENOENT && !offline && rename_was_done(v, parent, pfd, name, newparent, npfd, newname))
                r = 0;  /* resent after a takeover: the predecessor did it */
        if (r >= 0 && save)
                r = offline_note_atomic_save(v, plid, name, lid, other, npfd, newname, &dest_base);
        else if (r >= 0 && offline)
                r = offline_note_rename(v, plid, name, lid, nplid, newname, other, flags);
        else if (r >= 0)
                r = note_bounded(v, 0, npfd, newname, pfd, name);
        if (r >= 0 && offline && redo && !save)
                r = offline_note_in_doubt(v, lid);
        if (r == -ETIMEDOUT && !offline) {
                redo = true;
                if (left_for_offline(v, np, p))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        /* An atomic save gave the renamed file the replaced one's identity. */
        if (offline)
                vnode_ids_forget(v);
        if (r >= 0) {
                struct stat moved;

                /* What moved (a directory, a file open since its create)
                 * may now be at a path the mirror has. */
                mirror_dirs_changed();
                if (had && !offline)
                        drop_if_last(v, &victim);
                if (had) {
                        vnode_name_gone(v, victim.st_ino, newparent, newname);
                        vfile_keep_nameless(v, victim.st_ino, offline);
                }
                vnode_moved(v, newparent, npfd, newname);
                if (!(flags & RENAME_EXCHANGE) && backing_fstatat(v, npfd, newname, &moved) == 0)
                        vnode_name_gone(v, moved.st_ino, parent, name);
                if (flags & RENAME_EXCHANGE) {
                        struct stat back;

                        vnode_moved(v, parent, pfd, name);
                        /* The name each left is the other's now, not another
                         * of its own: kept, it could become the node's name
                         * when the one it has goes, and lead elsewhere.  (Two
                         * links of one object exchanged stay as they were.) */
                        if (backing_fstatat(v, npfd, newname, &moved) == 0 &&
                            backing_fstatat(v, pfd, name, &back) == 0 &&
                            moved.st_ino != back.st_ino) {
                                vnode_name_gone(v, moved.st_ino, parent, name);
                                vnode_name_gone(v, back.st_ino, newparent, newname);
                        }
                }
        }
        vnode_put(v, np);
        vnode_put(v, p);
        view_change_end(v);
        fuse_reply_err(req, -r);
}

/* The kernel's __FMODE_EXEC: the open is execve()'s (or uselib's). */
#define OPEN_FOR_EXEC 040

/* O_APPEND stays with the kernel, which sends each write with its offset:
 * a write resent after a takeover then lands at the same place, not twice. */
static int open_flags(struct fuse_file_info *fi)
{
        return fi->flags & ~(O_DIRECT | O_NOFOLLOW | O_APPEND | OPEN_FOR_EXEC);
}

/* The store holds all of the file as the backing has it now: the open was
 * compared with the backing (close-to-open), and the lease covers the rest. */
static bool complete_copy(struct vfile *f, bool unchanged)
{
        struct sobj_info info;

        if (!f->obj || !unchanged)
                return false;
        store_obj_info(f->obj, &info);
        return info.complete;
}

/*
 * Within its lease a complete store copy answers a read-only open of a
 * network backing's file by itself, without a round trip: the kernel has
 * checked the caller's permission (default_permissions), and the background
 * pass (view-revalidate.c) keeps the copy's validity.  A local backing keeps
 * close-to-open: asking it costs nothing.  The object, referenced, or NULL.
 */
static struct sobj *local_copy_for_open(struct view *v, fuse_ino_t ino)
{
        struct sobj_info info;
        struct sobj *o;
        uint64_t bino;
        mode_t type;

        /* Without the node's descriptor, which vnode_get() may have to find
         * again on the server. */
        if (v->backing_local || vnode_peek(v, ino, &bino, &type) < 0 || !S_ISREG(type) ||
            store_obj_find(v->store, bino, &o) < 0)
                return NULL;
        store_obj_info(o, &info);
        if (info.complete && !store_obj_stale(o, now_ns(), (uint64_t)(v->lease_s * 1e9)) &&
            vnode_cacheable(v, ino))
                return o;
        store_obj_put(v->store, o);
        return NULL;
}

/* Replies to an open of f (bid: its passthrough backing id, or 0). */
static void reply_open(fuse_req_t req, struct view *v, struct vfile *f, struct fuse_file_info *fi,
                       int bid, bool keep, bool writing)
{
        int r;

        fi->fh = f->fh;
        fi->keep_cache = keep;
        /* A writer's close brings the mirror up to date (online) or logs its
         * content (offline): only readers may skip FLUSH. */
        fi->noflush = !writing;
        passthrough_reply_begin(bid);
        r = fuse_reply_open(req, fi);
        passthrough_reply_end();
        if (r < 0)
                vfile_remove(v, f);     /* the open was interrupted */
}

/* Opens node ino (n) for reading from its store copy alone. */
static void open_locally(fuse_req_t req, struct view *v, fuse_ino_t ino, struct sobj *o,
                         struct fuse_file_info *fi)
{
        struct vfile *f = vfile_add(v, 0, ino, -1, open_flags(fi), false);
        int bid;

        if (!f) {
                store_obj_put(v->store, o);
                fuse_reply_err(req, ENOMEM);
                return;
        }
        f->obj = o;
        f->local = true;
        bid = passthrough_open(v, ino, -1, fi->flags, true, false, false, NULL);
        if (bid < 0) {
                vfile_remove(v, f);
                fuse_reply_err(req, -bid);
                return;
        }
        f->pt_counted = passthrough_on();
        f->passthrough = bid > 0;
        vfile_log_mode(v, f, bid);
        revalidate_note(v, ino);
        reply_open(req, v, f, fi, bid, true, false);
}

/* FOPEN_NOFLUSH: close(2) need not wait for a FLUSH when it has nothing
 * to do: a reader's, and online a writer's on a local backing (the flush's
 * dup+close reports write-back errors of network filesystems; offline it
 * logs the content). */

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        struct view *v = V(req);
        bool writing = (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC);
        struct vfile *f;
        struct sobj *o;
        bool keep = false, offline, regular, redo = false;
        uint64_t lid = 0, epoch, sino, switches;
        int r, bfd, bid, stranded;

again:
        if (writing)
                view_change_begin(v);
        epoch = vnode_ids_epoch(v);
        offline = view_offline(v);
        if (!writing && !offline && (o = local_copy_for_open(v, ino))) {
                open_locally(req, v, ino, o, fi);
                return;
        }
        struct vnode *n;
        int fd = vnode_get_served(v, ino, &n, &offline, &switches);

        if (fd < 0) {
                if (writing)
                        view_change_end(v);
                fuse_reply_err(req, -fd);
                return;
        }
        /* Offline, a copy that may hold bytes the server lacks is not served
         * (mirror_refused()). */
        r = offline && S_ISREG(vnode_type(n)) && mirror_copy_stale(fd) ? -EHOSTDOWN : 0;
        /* Offline, a file opened for writing is registered with its base
         * content before anything (O_TRUNC first) changes it. */
        if (r == 0 && offline && writing && S_ISREG(vnode_type(n)))
                r = lid_before_change(v, ino, fd, &lid);
        if (r < 0) {
                vnode_put(v, n);
                if (writing)
                        view_change_end(v);
                fuse_reply_err(req, -r);
                return;
        }
        /* A helper thread opens it as the caller (bounded). */
        struct caller_id id;
        struct stat before = { 0 };

        creds_capture(req, &id);
        /* Offline, O_TRUNC as the caller may kill set-id bits: logged below. */
        if (offline && (fi->flags & O_TRUNC) && fstat(fd, &before) < 0)
                before.st_mode = 0;
        bfd = backing_reopen_in(v, offline, fd, open_flags(fi), &id);
        /* execve() needs execute permission only, which the kernel has
         * checked (default_permissions); the backing would ask for read
         * permission too.  What execve() reads through this open stays in
         * the kernel. */
        if (bfd == -EACCES && !writing && (fi->flags & OPEN_FOR_EXEC))
                bfd = backing_reopen_in(v, offline, fd, open_flags(fi), NULL);
        regular = S_ISREG(vnode_type(n));
        sino = vnode_ino(n);
        vnode_put(v, n);
        /* The server did not answer in time: the open is made again in the
         * local copy, which the volume now serves. */
        if (bfd == -ETIMEDOUT && !offline) {
                if (writing)
                        view_change_end(v);
                redo = true;
                if (view_wait_offline(v))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        if (bfd < 0) {
                if (writing)
                        view_change_end(v);
                fuse_reply_err(req, -bfd);
                return;
        }
        bool noatime, nodiratime;

        view_atime_flags(v, &noatime, &nodiratime);
        apply_atime_policy(bfd, noatime);
        f = vfile_add(v, 0, ino, bfd, open_flags(fi), false);
        if (!f) {
                close(bfd);
                if (writing)
                        view_change_end(v);
                fuse_reply_err(req, ENOMEM);
                return;
        }
        /* As op_opendir: a switch that moved the open files before this one
         * was in their table would leave it the other tree's file. */
        if (__atomic_load_n(&v->switches, __ATOMIC_ACQUIRE) != switches) {
                vfile_remove(v, f);
                if (writing)
                        view_change_end(v);
                redo = true;
                goto again;
        }
        f->lid = lid;
        f->lid_epoch = epoch;
        f->dirty = offline && (fi->flags & O_TRUNC);
        if (before.st_mode & (S_ISUID | S_ISGID)) {
                struct stat now;

                if (fstat(bfd, &now) == 0 && (r = log_setid_kill(v, f, &now, before.st_mode)))
                        log_warn("Failed to log the set-id bits an offline O_TRUNC open killed"
                                 " (the server's file keeps them): %s", strerror(-r));
        }
        f->doubt = redo && (fi->flags & O_TRUNC);       /* the server may have truncated it */
        f->written = !offline && (fi->flags & O_TRUNC);
        if (!writing)
                attach_store(v, f, noatime, &keep);
        /* Its directory's copies are kept valid from now on, so that the
         * next opens there are local (a network backing). */
        if (!writing && !offline && !v->backing_local && complete_copy(f, keep))
                revalidate_note(v, ino);
        bid = passthrough_open(v, ino, bfd, fi->flags, regular, offline || complete_copy(f, keep),
                               false, &stranded);
        if (bid < 0) {
                vfile_remove(v, f);
                if (writing)
                        view_change_end(v);
                fuse_reply_err(req, -bid);
                return;
        }
        f->pt_counted = regular && passthrough_on();
        f->passthrough = bid > 0;
        /* As its writes (passed through, they reach the mirror at the note only). */
        if (f->written && regular && !f->passthrough && backing_bounded(v))
                mirror_through(v, f, ino, sino,
                               &(struct mirror_change){ .kind = MC_TRUNCATE, .off = 0 });
        vfile_log_mode(v, f, bid);
        /* The kernel writes the file of the tree served before a switch
         * (another open of the node still passes through it). */
        if (stranded >= 0) {
                struct stat kst;

                f->stranded_fd = stranded;
                /* O_TRUNC emptied the file served: the kernel's file too. */
                int tr = (fi->flags & O_TRUNC) ? change_kernel_file(ino, bfd, 0, NULL) : 0;

                if (tr < 0)
                        log_warn("Failed to truncate the file open file handle %" PRIu64
                                 " writes: %s", f->fh, strerror(-tr));
                /* Offline, that file is the server's (ship_stranded()). */
                if (tr != 0)
                        f->doubt = f->doubt || offline;
                /* What this writer writes there from now on is shipped, not
                 * what the file held before (its other writers ship theirs). */
                if (tr >= 0 && fstat(stranded, &kst) == 0)
                        mark_take(&f->stranded_shipped, &kst);
                else
                        f->stranded_shipped.size = -1;
        }
        /* A writer joining passthrough readers writes without us: its
         * writes are taken as done, for the mirror or the log. */
        if (f->passthrough && writing) {
                f->dirty = offline;
                f->written = !offline;
        }
        if (writing) {
                view_change_end(v);
                if (!f->passthrough)
                        attach_store(v, f, noatime, &keep);
        }
        reply_open(req, v, f, fi, bid, keep, writing);
}

/*
 * O_TMPFILE: an unnamed file in parent, made with O_TMPFILE on the backing
 * (never O_EXCL there: whether it may be linked is the kernel's to enforce
 * on the view's inode).  A later linkat() reaches op_link with its node,
 * whose descriptor is the backing inode.  Offline there is no log record
 * for an object without a name: EOPNOTSUPP (per call; the kernel tries again).
 */
static void op_tmpfile(fuse_req_t req, fuse_ino_t parent, mode_t mode, struct fuse_file_info *fi)
{
        struct view *v = V(req);
        struct fuse_entry_param e;
        struct vfile *f;
        struct caller_id id;
        mode_t asked = mode;
        int r, bfd, flags;

again:
        bfd = -1;
        WITH_NODE_CHANGING(v, parent, p, pfd, req, offline);
        mode = asked;
        flags = (open_flags(fi) & ~(O_TMPFILE | O_CREAT | O_EXCL | O_TRUNC)) | O_TMPFILE;
        r = offline ? -EOPNOTSUPP : create_mode(req, v, pfd, &mode);
        if (r >= 0) {
                bfd = backing_change(v, &(struct backing_change){ .kind = BC_CREATE,
                                     .fd = pfd, .name = ".", .fd2 = -1, .mode = mode,
                                     .flags = flags }, caller_of(req, &id));
                r = bfd < 0 ? bfd : 0;
                bfd = bfd < 0 ? -1 : bfd;
        }
        if (r >= 0)
                r = vnode_enter_unnamed(v, parent, bfd, &e);
        if (r == -ETIMEDOUT && !offline) {
                if (bfd >= 0)
                        backing_close(v, bfd);
                if (left_for_offline(v, p, NULL))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        vnode_put(v, p);
        if (r < 0) {
                if (bfd >= 0)
                        close(bfd);
                view_change_end(v);
                fuse_reply_err(req, -r);
                return;
        }
        f = vfile_add(v, 0, e.ino, bfd, flags & ~O_TMPFILE, false);
        if (!f) {
                close(bfd);
                vnode_forget(v, e.ino, 1);
                view_change_end(v);
                fuse_reply_err(req, ENOMEM);
                return;
        }
        view_change_end(v);
        fi->fh = f->fh;
        vnode_show_kept_ino(v, e.ino, &e.attr);
        if (fuse_reply_create(req, &e, fi) < 0) {
                vfile_remove(v, f);
                vnode_forget(v, e.ino, 1);
        }
}

/*
 * Whether the close of a file created online in directory p (descriptor
 * pfd) must bring the mirror up to date: the directory is complete there.
 * A directory the mirror has not at all is remembered in its node until the
 * mirror gains or moves one (mirror_dirs_gen), so that creating many files
 * in it costs no path lookups in the mirror; *quiet is then that
 * generation: while it holds, the mirror has no entry for the new file
 * either, and its release has nothing to tell it.
 */
static bool create_keeps_mirror(struct view *v, struct vnode *p, int pfd, uint64_t *quiet)
{
        uint64_t gen = mirror_dirs_gen();
        bool keeps, absent;

        *quiet = 0;
        if (vnode_mirror_absent_gen(p) == gen) {
                *quiet = gen;
                return false;
        }
        keeps = mirror_keeps_current(v, pfd, &absent);
        if (absent) {
                vnode_set_mirror_absent_gen(p, gen);
                *quiet = gen;
        }
        return keeps;
}

/* The release of f, created where the mirror had no directory: nothing to
 * tell the mirror while it has gained or moved none since. */
static bool mirror_quiet_for(const struct vfile *f)
{
        return f->mirror_quiet && f->mirror_quiet == mirror_dirs_gen();
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
        struct view *v = V(req);
        struct fuse_entry_param e;
        struct vfile *f;
        struct caller_id id;
        struct stat before;
        bool existed;
        uint64_t lid, quiet, epoch;
        mode_t asked = mode;
        bool redo = false, fresh = false;
        int r, bfd;

        /* FUSE_TMPFILE, handed over as a create (view-session.c): the kernel
         * names the unnamed dentry "/", which no create can carry. */
        if (!strcmp(name, "/")) {
                op_tmpfile(req, parent, mode, fi);
                return;
        }
again:
        lid = quiet = 0;
        bfd = -1;
        mode = asked;
        WITH_NODE_CHANGING(v, parent, p, pfd, req, offline);
        epoch = vnode_ids_epoch(v);
        /* Only a name the server lacked before: else it is the server's file. */
        if (redo && offline && fresh)
                clear_note_leftover(pfd, name, true, 0);
        r = backing_fstatat(v, pfd, name, &before);
        existed = r == 0;
        fresh = !offline && r == -ENOENT;
        r = r == -ETIMEDOUT ? r : create_mode(req, v, pfd, &mode);
        if (r >= 0 && offline && existed)
                r = offline_lid(v, pfd, name, &lid);
        if (r >= 0) {
                bfd = backing_change(v, &(struct backing_change){ .kind = BC_CREATE,
                                     .fd = pfd, .name = name, .fd2 = -1, .mode = mode,
                                     .flags = open_flags(fi) | O_CREAT | O_NOFOLLOW },
                                     caller_of(req, &id));
                r = bfd < 0 ? bfd : 0;
                bfd = bfd < 0 ? -1 : bfd;
        }
        if (r >= 0 && offline && !existed) {
                r = note_create(v, parent, pfd, name, NULL, epoch, &lid);
                if (r >= 0 && redo)
                        r = create_in_doubt(v, pfd, name);
        } else if (r >= 0 && !existed) {
                struct stat st;

                /* A new file may reuse the inode number of one removed behind
                 * the store's back (by replay, or on the server): that copy
                 * must not be patched by the writes to come and served. */
                if (backing_fstatat(v, bfd, NULL, &st) == 0)
                        store_drop_ino(v->store, st.st_ino, true);
                /* A network backing's new file goes in the mirror now (when
                 * its directory is pinned), not at its close: a switch
                 * offline meanwhile then finds it, to go on writing there. */
                if (!v->backing_local)
                        r = note_change_bounded(v, 0, pfd, name);
        }
        if (r >= 0)
                r = vnode_lookup(v, parent, pfd, name, &e);
        if (r == -ETIMEDOUT && !offline) {
                if (bfd >= 0)
                        backing_close(v, bfd);
                redo = true;
                if (left_for_offline(v, p, NULL))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        /* Its log id, remembered: it has one name. */
        if (r >= 0 && offline && !existed && lid)
                vnode_remember_lid(v, e.ino, epoch, lid);
        /* Online, the close of a new file of a local backing has nothing to
         * do (no write-back errors to report) unless the mirror keeps its
         * directory: the release notes the change for the mirror's cached
         * copies, and close(2) need not wait for a FLUSH. */
        fi->noflush = r >= 0 && !offline && !existed && v->backing_local &&
                      !create_keeps_mirror(v, p, pfd, &quiet);
        vnode_put(v, p);
        if (r < 0) {
                if (bfd >= 0)
                        close(bfd);
                view_change_end(v);
                fuse_reply_err(req, -r);
                return;
        }
        f = vfile_add(v, 0, e.ino, bfd, open_flags(fi) & ~(O_CREAT | O_EXCL | O_TRUNC), false);
        if (!f) {
                close(bfd);
                vnode_forget(v, e.ino, 1);
                view_change_end(v);
                fuse_reply_err(req, ENOMEM);
                return;
        }
        f->lid = lid;
        f->lid_epoch = epoch;
        f->dirty = offline && existed && (fi->flags & O_TRUNC);
        f->written = !offline;
        f->mirror_quiet = fi->noflush ? quiet : 0;
        /* A created file passes through (see view-passthrough.c), or joins
         * its node's open files when it existed. */
        r = passthrough_open(v, e.ino, bfd, fi->flags, S_ISREG(e.attr.st_mode), true, !existed,
                             NULL);
        if (r < 0) {
                vfile_remove(v, f);
                vnode_forget(v, e.ino, 1);
                view_change_end(v);
                fuse_reply_err(req, -r);
                return;
        }
        f->pt_counted = S_ISREG(e.attr.st_mode) && passthrough_on();
        f->passthrough = r > 0;
        vfile_log_mode(v, f, r);
        if (f->passthrough)
                f->dirty = offline;
        view_change_end(v);
        fi->fh = f->fh;
        vnode_show_kept_ino(v, e.ino, &e.attr);
        passthrough_reply_begin(r);
        r = fuse_reply_create(req, &e, fi);
        passthrough_reply_end();
        if (r < 0) {
                vfile_remove(v, f);
                vnode_forget(v, e.ino, 1);
        }
}

/* A read that reaches the backing (absent blocks of the store's copy, or
 * the file itself), for a helper: its own descriptor, object and buffer. */
struct backing_read {
        struct store *store;
        struct sobj *o;         /* referenced, or NULL: pread the file */
        int fd;                 /* a dup() */
        char *buf;
        size_t size;
        off_t off;
};

static void backing_read_free(void *arg)
{
        struct backing_read *b = arg;

        backing_close_later(b->fd);
        if (b->o)
                store_obj_put(b->store, b->o);
        free(b->buf);
        free(b);
}

static int backing_read_run(void *arg)
{
        struct backing_read *b = arg;
        ssize_t n = b->o ? store_obj_read(b->store, b->o, b->fd, b->buf, b->size, b->off)
                         : pread(b->fd, b->buf, b->size, b->off);

        return n < 0 && !b->o ? -errno : (int)n;
}

/*
 * Online: a read of o's copy (NULL: of the file fd) that may need the
 * backing, bounded: -ETIMEDOUT past BackingTimeout (the volume goes
 * offline).  A complete copy is read here, without a helper.
 */
static ssize_t read_bounded(struct view *v, struct sobj *o, int fd, char *buf, size_t size,
                            off_t off)
{
        struct backing_read *b;
        struct sobj_info info;
        ssize_t got;
        int n;

        if (o)
                store_obj_info(o, &info);
        /* fd is the server's even if the volume went offline meanwhile. */
        if (o && (info.complete || size > INT_MAX || !backing_bounded_in(v, false)))
                return store_obj_read(v->store, o, fd, buf, size, off);
        if (!o && (size > INT_MAX || !backing_bounded_in(v, false))) {
                got = pread(fd, buf, size, off);
                return got < 0 ? -errno : got;
        }
        b = calloc(1, sizeof(*b));
        if (!b)
                return -ENOMEM;
        b->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        b->buf = malloc(size ? size : 1);
        if (b->fd < 0 || !b->buf) {
                if (b->fd >= 0)
                        close(b->fd);
                free(b->buf);
                free(b);
                return -ENOMEM;
        }
        b->store = v->store;
        b->o = o;
        if (o)
                store_obj_ref(v->store, o);
        b->size = size;
        b->off = off;
        n = backing_call_bounded_in(v, false, backing_read_run, b, backing_read_free);
        if (n == -ETIMEDOUT)
                return n;       /* b is the helper's now */
        if (n > 0)
                memcpy(buf, b->buf, (size_t)n);
        backing_read_free(b);
        return n;
}

static int vfile_served_fd(struct view *v, struct vfile *f, bool *mirror);

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
        struct view *v = V(req);
        struct sobj *o;
        struct vfile *f;
        ssize_t n;
        char *buf;
        bool online, mirror;
        int err, rfd;

        passthrough_count_read();
again:
        f = vfile_find(v, fi, &err);
        if (f && !local_copy_serves(v, f))
                f = vfile_of(v, fi, &err);
        if (!f) {
                fuse_reply_err(req, err);
                return;
        }
        buf = malloc(size ? size : 1);
        if (!buf) {
                fuse_reply_err(req, ENOMEM);
                return;
        }
        n = -EBADF;
        if (__atomic_load_n(&f->fd, __ATOMIC_ACQUIRE) < 0)
                n = store_obj_read(v->store, __atomic_load_n(&f->obj, __ATOMIC_ACQUIRE), -1,
                                   buf, size, off);
        /* A block found corrupt is fetched again: that needs the backing. */
        if (n < 0 && !(f = vfile_of(v, fi, &err))) {
                free(buf);
                fuse_reply_err(req, err);
                return;
        }
        /* One load: a switch may retire it meanwhile (kept until release). */
        o = __atomic_load_n(&f->obj, __ATOMIC_ACQUIRE);
        rfd = vfile_served_fd(v, f, &mirror);
        online = !mirror;
        if (n >= 0) {
                /* served from the store alone */
        } else if (o && online) {
                uint64_t lease_ns = (uint64_t)(v->lease_s * 1e9);

                if (store_obj_stale(o, now_ns(), lease_ns)) {
                        struct stat st;

                        /* An erroring (or silent) backing keeps the valid copy serving. */
                        if (backing_fstatat_in(v, false, rfd, NULL, &st) == 0)
                                store_obj_revalidate(v->store, o, &st, true, NULL);
                }
                n = read_bounded(v, o, rfd, buf, size, off);
                /* The bytes are the store's: a server that does not answer
                 * for the atime takes the volume offline, not them. */
                if (n >= 0 && __atomic_exchange_n(&f->touch_atime, false, __ATOMIC_RELAXED)) {
                        char c;
                        ssize_t r = read_bounded(v, NULL, rfd, &c, 1, 0);

                        if (r < 0)
                                log_debug("Failed to read a byte for the atime: %s, ignoring",
                                          strerror((int)-r));
                }
        } else if (online) {
                n = read_bounded(v, NULL, rfd, buf, size, off);
        } else {
                n = pread(rfd, buf, size, off);
                if (n < 0)
                        n = -errno;
        }
        /* The server did not answer in time: read again from the mirror when
         * it has the file; a file it lacks (cached in part) is EHOSTDOWN, as
         * offline. */
        if (n == -ETIMEDOUT && online) {
                free(buf);
                if (view_wait_offline(v) &&
                    __atomic_load_n(&f->fd, __ATOMIC_ACQUIRE) != rfd)
                        goto again;
                fuse_reply_err(req, EHOSTDOWN);
                return;
        }
        if (n < 0)
                fuse_reply_err(req, (int)-n);
        else
                fuse_reply_buf(req, buf, (size_t)n);
        free(buf);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
        struct view *v = V(req);
        struct vfile *f;
        struct stat st;
        bool offline;
        mode_t before;
        ssize_t n;
        int err, sr;
        bool sent;

again:
        view_change_begin(v);
        f = vfile_of(v, fi, &err);
        if (!f) {
                view_change_end(v);
                fuse_reply_err(req, err);
                return;
        }
        offline = view_offline(v);
        if (offline && file_lid(v, f) < 0) {
                view_change_end(v);
                fuse_reply_err(req, EIO);
                return;
        }
        sr = -EIO;
        /* -ETIMEDOUT: the set-id check was not answered, nothing was sent. */
        n = as_writer(req, v, fi, f->fd, &before);
        sent = n == 0;
        if (sent && offline) {
                n = pwrite(f->fd, buf, size, off);
                err = errno;
        } else if (sent) {
                struct caller_id id;

                creds_capture(req, &id);
                n = backing_pwrite(v, f->fd, buf, size, off, before ? &id : NULL);
                /* Its new attributes (bounded: a stat after a write asks the
                 * server); no answer is the write's own timeout. */
                sr = n >= 0 ? backing_fstatat(v, f->fd, NULL, &st) : -EIO;
                if (sr == -ETIMEDOUT)
                        n = -ETIMEDOUT;
                err = n < 0 ? (int)-n : 0;
        }
        leave_writer(before);
        /* The server did not answer in time: the write is made again in the
         * local copy, which the volume now serves (and logs). */
        if (n == -ETIMEDOUT) {
                f->doubt = f->doubt || sent;
                view_change_end(v);
                if (view_wait_offline(v))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        if (n >= 0 && offline && (before & (S_ISUID | S_ISGID)))
                sr = fstat(f->fd, &st) < 0 ? -errno : 0;        /* the mirror's: local */
        if (n >= 0 && sr == 0 && (before & (S_ISUID | S_ISGID))) {
                mode_changed_check(v, ino, &st, before);
                if (offline && (err = -log_setid_kill(v, f, &st, before)))
                        n = -err;
        }
        if (n < 0) {
                view_change_end(v);
                fuse_reply_err(req, err);
                return;
        }
        if (offline) {
                f->dirty = true;
        } else {
                f->written = true;
                if (sr == 0 && backing_bounded(v) && !f->passthrough)
                        mirror_through(v, f, f->id, st.st_ino,
                                       &(struct mirror_change){ .kind = MC_WRITE, .buf = buf,
                                                                .size = (size_t)n, .off = off });
                /* Patch the store copy even when this open has none attached
                 * (a writer that opened before any reader cached the file). */
                struct sobj *o = f->obj;

                if (sr == 0 && (o || store_obj_find(v->store, st.st_ino, &o) == 0)) {
                        store_obj_written(v->store, o, buf, (size_t)n, off, &st);
                        if (o != f->obj)
                                store_obj_put(v->store, o);
                }
        }
        view_change_end(v);
        fuse_reply_write(req, (size_t)n);
}

/*
 * Online, at a writer's close: the mirror takes what it wrote (on the server
 * already, acknowledged), bounded.  When the server stops answering
 * meanwhile the volume goes offline with the mirror's copy from before
 * these writes (said in the log): the server has them, and a change made
 * to the file offline meets them at the reconnect (a conflict, not a loss).
 */
static void note_written_bounded(struct view *v, struct vfile *f)
{
        if (note_change_bounded(v, f->id, f->fd, NULL) == -ETIMEDOUT)
                log_warn("The server stopped answering while the offline mirror took the writes"
                         " to open file handle %" PRIu64 ": its offline copy is from before"
                         " them", f->fh);
}

/*
 * Before a switch offline, with changes held off (mode_lock exclusively)
 * and the server answering: the mirror takes every file written online and
 * still open, as its close would.  A file created since the last pass has
 * no mirror object yet, and the switch would find no counterpart for it:
 * its name would be missing offline until the reconnect's resync.
 */
void vfile_note_writers(struct view *v)
{
        struct writer {
                fuse_ino_t id;
                int fd;         /* its own: a release may remove the file meanwhile */
        };
        GArray *writers = g_array_new(FALSE, FALSE, sizeof(struct writer));
        bool answering = true;
        GHashTableIter it;
        gpointer key, val;

        pthread_mutex_lock(&v->ftab_lock);
        g_hash_table_iter_init(&it, v->files);
        while (g_hash_table_iter_next(&it, &key, &val)) {
                struct vfile *f = val;
                struct writer w = { f->id, -1 };

                if (f->dir || !f->written || f->fd < 0 || mirror_quiet_for(f))
                        continue;
                w.fd = fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
                if (w.fd >= 0)
                        g_array_append_val(writers, w);
        }
        pthread_mutex_unlock(&v->ftab_lock);
        for (guint i = 0; i < writers->len; i++) {
                struct writer *w = &g_array_index(writers, struct writer, i);

                /* One the server did not answer in time: it is gone, the
                 * others would wait as long each. */
                if (answering && note_change_bounded(v, w->id, w->fd, NULL) == -ETIMEDOUT) {
                        log_warn("The server stopped answering while the offline mirror took the"
                                 " open written files: those not taken yet are missing offline"
                                 " until the reconnect");
                        answering = false;
                }
                close(w->fd);
        }
        g_array_free(writers, TRUE);
}

static uint64_t flush_requests; /* atomic */

uint64_t view_flush_requests(void)
{
        return __atomic_load_n(&flush_requests, __ATOMIC_RELAXED);
}

/*
 * A writer the kernel passes through to the mirror file it was opened on
 * offline, open across a switch: the kernel cannot be told to write
 * elsewhere, so what it wrote there is copied to the object now served
 * (close-to-open: at flush, fsync and release): online the server's, which
 * the mirror then takes as any online write; offline the mirror's new copy,
 * which is then logged.
 */
static int ship_stranded(struct view *v, struct vfile *f)
{
        struct stat st;
        int r;

        if (f->stranded_fd < 0)
                return 0;
        /* Copied over already, and not written since. */
        if (stranded_shipped(f))
                return 0;
        r = copy_over(f->stranded_fd, f->fd);
        if (r < 0) {
                log_warn("Failed to copy the writes of open file handle %" PRIu64 " over: %s",
                         f->fh, strerror(-r));
                return r;
        }
        if (!view_offline(v))
                note_node_change(v, f->id, f->fd);
        else if (!f->dir)
                /* The stranded file is the server's: it holds these writes
                 * already, so the record is in doubt (replay takes them as
                 * done, also when the file is removed or replaced offline). */
                f->doubt = true;
        /* As the mirror's update may have left it (the same bytes). */
        if (fstat(f->stranded_fd, &st) == 0)
                mark_take(&f->stranded_shipped, &st);
        return 0;
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        struct view *v = V(req);
        struct vfile *f;
        int err;

        __atomic_add_fetch(&flush_requests, 1, __ATOMIC_RELAXED);
again:
        view_change_begin(v);
        f = vfile_of(v, fi, &err);
        if (!f) {
                view_change_end(v);
                fuse_reply_err(req, err);
                return;
        }
        if (view_offline(v)) {
                /* close() acknowledges the writes: they are logged first. */
                err = -ship_stranded(v, f);
                if (!err)
                        err = -log_content(v, f);
                view_change_end(v);
                fuse_reply_err(req, err);
                return;
        }
        err = -ship_stranded(v, f);
        /* Closing a duplicate makes network backings write back and report
         * errors at close(), as they would for the application (bounded: a
         * server that is gone makes it EIO, and the volume goes offline). */
        if (!err)
                err = -backing_flush(v, f->fd);
        if (!err && f->written && !f->dir)
                err = -backing_write_error(v, f->fd);
        if (err && err != ETIMEDOUT && f->written && !f->dir) {
                mirror_refused(v, f);
                f->written = false;
                note_written_bounded(v, f);
        }
        /* The server did not answer in time: the content is logged from the
         * local copy, which the volume now serves. */
        if (err == ETIMEDOUT) {
                view_change_end(v);
                if (view_wait_offline(v))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        /* At close, not at release (which close does not wait for): a
         * disconnect in between would leave the mirror with the old bytes. */
        if (!err && f->written && !f->dir) {
                /* One passed through may write again without us. */
                f->written = f->passthrough;
                note_written_bounded(v, f);
        }
        view_change_end(v);
        fuse_reply_err(req, err);
}

static void renote_node(struct view *v, fuse_ino_t id)
{
        struct vnode *n;
        bool offline;
        int fd;

        view_change_begin(v);
        fd = vnode_get_served(v, id, &n, &offline, NULL);
        if (fd >= 0 && !offline)
                note_change_bounded(v, id, fd, NULL);
        if (fd >= 0)
                vnode_put(v, n);
        view_change_end(v);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        struct view *v = V(req);
        struct vfile *f;
        uint64_t key = fi->fh;

        pthread_mutex_lock(&v->ftab_lock);
        f = g_hash_table_lookup(v->files, &key);
        pthread_mutex_unlock(&v->ftab_lock);
        /* A reader has nothing to log or mirror (and begins no change). */
        if (f && f->fd >= 0 && !f->dir &&
            ((f->flags & O_ACCMODE) != O_RDONLY || (f->flags & O_TRUNC))) {
                view_change_begin(v);
                if (view_offline(v) && f->dirty &&
                    (ship_stranded(v, f) < 0 || log_content(v, f) < 0))
                        log_error("Offline writes to file handle %" PRIu64 " could not be"
                                  " logged at its release", f->fh);
                else if (!view_offline(v) && f->written && !mirror_quiet_for(f))
                        note_written_bounded(v, f);
                else if (f->stranded_fd >= 0)
                        ship_stranded(v, f);
                view_change_end(v);
        }
        /* Online, the kernel letting go of a mirror file (opened offline):
         * the mirror left it alone while it was held (view-mirror.c), and
         * takes the node's object now. */
        if (f && vfile_remove(v, f))
                renote_node(v, ino);
        fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
        struct view *v = V(req);
        struct vfile *f;
        int err;

        view_change_begin(v);
        f = vfile_of(v, fi, &err);
        if (!f) {
                view_change_end(v);
                fuse_reply_err(req, err);
                return;
        }
        err = -ship_stranded(v, f);
        if (!err)
                err = (datasync ? fdatasync(f->fd) : fsync(f->fd)) < 0 ? errno : 0;
        /* Offline, fsync means the change is in the log, and the log durable
         * (the container was synced above: the record names it). */
        if (!err && view_offline(v) && !f->dir)
                err = -log_content(v, f);
        if (!err && view_offline(v))
                err = -offline_durable(v);
        view_change_end(v);
        fuse_reply_err(req, err);
}

/* The descriptor of open file f and whether it is the mirror's, as one:
 * a switch changes the state before it moves the open files. */
static int vfile_served_fd(struct view *v, struct vfile *f, bool *mirror)
{
        int fd;

        pthread_rwlock_rdlock(&v->served_lock);
        *mirror = view_offline(v);
        fd = __atomic_load_n(&f->fd, __ATOMIC_ACQUIRE);
        pthread_rwlock_unlock(&v->served_lock);
        return fd;
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        struct view *v = V(req);
        struct vfile *f;
        uint64_t switches;
        bool offline;
        int dfd;

        fault_point(FAULT_VIEW_OPENDIR);
again:;     /* a label before a declaration */
        WITH_NODE(v, ino, n, fd, req, offline, switches);

        dfd = backing_reopen_in(v, offline, fd, O_RDONLY | O_DIRECTORY, NULL);
        vnode_put(v, n);
        /* The server did not answer in time: the mirror's directory. */
        if (dfd == -ETIMEDOUT && !offline && view_wait_offline(v))
                goto again;
        if (dfd < 0) {
                fuse_reply_err(req, -dfd);
                return;
        }
        bool noatime, nodiratime;

        view_atime_flags(v, &noatime, &nodiratime);
        apply_atime_policy(dfd, nodiratime);
        f = vfile_add(v, 0, ino, dfd, O_RDONLY | O_DIRECTORY, true);
        if (!f) {
                close(dfd);
                fuse_reply_err(req, ENOMEM);
                return;
        }
        /* A switch that moved the open files before this one was in their
         * table left it the other tree's directory: opened again. */
        if (__atomic_load_n(&v->switches, __ATOMIC_ACQUIRE) != switches) {
                vfile_remove(v, f);
                goto again;
        }
        fi->fh = f->fh;
        if (fuse_reply_open(req, fi) < 0)
                vfile_remove(v, f);
}

/* Offsets are the listing's own (view-listing.c): a server's cookies would
 * mean nothing in the mirror after a switch, nor the mirror's on the server. */
static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
        struct view *v = V(req);
        bool mirror = false, retry = false;
        struct vfile *f;
        size_t used;
        char *out;
        int err;

again:
        err = 0;
        used = 0;
        f = vfile_of(v, fi, &err);
        if (!f) {
                fuse_reply_err(req, err);
                return;
        }
        out = malloc(size);
        if (!out) {
                fuse_reply_err(req, ENOMEM);
                return;
        }
        pthread_mutex_lock(&f->lock);
        if (!f->listing && !(f->listing = dirlist_new()))
                err = ENOMEM;
        else if (off == 0 && !retry)
                dirlist_rewind(f->listing);
        for (uint64_t i = (uint64_t)(off < 0 ? 0 : off); !err; i++) {
                int fd = vfile_served_fd(v, f, &mirror);
                const struct dirlist_entry *e;
                struct stat st = { 0 };
                size_t need;
                int r;

                r = dirlist_entry(v, f->listing, fd, mirror, i, &e);
                if (r <= 0) {
                        err = -r;
                        break;
                }
                st.st_ino = e->ino;
                st.st_mode = (mode_t)e->type << 12;
                need = fuse_add_direntry(req, out + used, size - used, e->name, &st,
                                         (off_t)i + 1);
                if (need > size - used)
                        break;
                used += need;
        }
        pthread_mutex_unlock(&f->lock);
        /* The server did not answer in time: the listing goes on in the mirror. */
        if (err == ETIMEDOUT && !mirror) {
                free(out);
                retry = true;
                if (view_wait_offline(v))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        if (err && !used)
                fuse_reply_err(req, err);
        else
                fuse_reply_buf(req, out, used);
        free(out);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        op_release(req, ino, fi);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                        struct fuse_file_info *fi)
{
        op_fsync(req, ino, datasync, fi);
}

/* statfs always reaches the server: bounded, and answered from the local
 * copy's filesystem once a server that stopped answering is given up on. */
static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
        struct view *v = V(req);
        struct statvfs sv;
        ssize_t r = query_once(v, FUSE_ROOT_ID, BQ_STATFS, &sv, sizeof(sv));

        (void)ino;
        if (r == -ETIMEDOUT && view_wait_offline(v))
                r = query_once(v, FUSE_ROOT_ID, BQ_STATFS, &sv, sizeof(sv));
        if (r < 0)
                fuse_reply_err(req, (int)-r);
        else
                fuse_reply_statfs(req, &sv);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
        struct view *v = V(req);
        struct caller_id id;
        uint64_t lid;
        bool log, redo = false;
        int r;

again:
        lid = 0;
        WITH_NODE_CHANGING(v, ino, n, fd, req, offline);
        log = offline;
        r = offline && mirror_xattr_hidden(name) ? -EPERM : 0;
        if (r >= 0 && offline)
                r = lid_before_change(v, ino, fd, &lid);
        if (r == LID_GONE)
                log = false;    /* nothing to log */
        /* /proc/self/fd/N of a symlink's O_PATH descriptor names the symlink
         * itself: trusted.* works there, user.* is the backing's own EPERM. */
        if (r >= 0)
                r = backing_change(v, &(struct backing_change){ .kind = BC_SETXATTR, .fd = fd,
                                   .fd2 = -1, .name2 = name, .value = value, .size = size,
                                   .flags = flags }, caller_of(req, &id));
        if (r == -ETIMEDOUT && !offline) {
                redo = true;
                if (left_for_offline(v, n, NULL))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        if (r >= 0 && !strcmp(name, "system.posix_acl_access"))
                fuse_lowlevel_notify_inval_inode(v->se, ino, -1, 0);      /* the mode too */
        if (r >= 0 && log)
                r = offline_note_xattr(v, lid, name, value, size, flags, false);
        if (r >= 0 && log && redo)
                r = offline_note_in_doubt(v, lid);
        vnode_put(v, n);
        view_change_end(v);
        fuse_reply_err(req, -r);
}

/* Drops trusted.fcache.* names from a listxattr answer (buf NULL: a size query). */
static ssize_t filter_listxattr(const char *path, char *buf, size_t size, ssize_t len)
{
        char *all = buf;
        ssize_t out = 0;

        if (!buf) {
                all = malloc((size_t)len);
                if (!all)
                        return -ENOMEM;
                len = listxattr(path, all, (size_t)len);
                if (len < 0) {
                        free(all);
                        return -errno;
                }
        }
        for (ssize_t i = 0; i < len;) {
                size_t l = strlen(all + i) + 1;

                if (!mirror_xattr_hidden(all + i)) {
                        memmove(all + out, all + i, l);
                        out += (ssize_t)l;
                }
                i += (ssize_t)l;
        }
        if (!buf)
                free(all);
        return out;
}

/* getxattr of name of node ino, or listxattr with name NULL, into buf. */
static ssize_t xattr_once(struct view *v, fuse_ino_t ino, const char *name, char *buf,
                          size_t size)
{
        struct vnode *n;
        bool offline;
        int fd = vnode_get_served(v, ino, &n, &offline, NULL);
        char path[64];
        ssize_t r;

        if (fd < 0)
                return fd;
        if (!name)
                r = backing_query_in(v, offline, BQ_LISTXATTR, fd, NULL, buf, size);
        else if (offline && mirror_xattr_hidden(name))
                r = -ENODATA;
        else
                r = backing_query_in(v, offline,
                                     S_ISDIR(vnode_type(n)) ? BQ_DIR_GETXATTR : BQ_GETXATTR, fd,
                                     name, buf, size);
        /* The mirror's own bookkeeping is not the application's. */
        if (!name && r > 0 && offline) {
                proc_path(path, sizeof(path), fd);
                r = filter_listxattr(path, buf, size, r);
        }
        vnode_put(v, n);
        return r;
}

/* Answers getxattr (name) or listxattr (name NULL) of node ino. */
static void xattr_reply(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
        struct view *v = V(req);
        char *buf = NULL;
        ssize_t r;

        if (size && !(buf = malloc(size))) {
                fuse_reply_err(req, ENOMEM);
                return;
        }
        r = xattr_once(v, ino, name, buf, size);
        /* The server did not answer in time: the volume went offline, ask the mirror. */
        if (r == -ETIMEDOUT && view_wait_offline(v))
                r = xattr_once(v, ino, name, buf, size);
        /*
         * A backing without POSIX ACLs (NFSv4, SMB) has none: say so.  With
         * FUSE_CAP_POSIX_ACL the kernel asks for the ACL in every permission
         * check, and 6.1 takes EOPNOTSUPP for an error, not for "no ACL":
         * every access by a non-owner failed with it.
         */
        if (name && r == -EOPNOTSUPP && (!strcmp(name, "system.posix_acl_access") ||
                                         !strcmp(name, "system.posix_acl_default")))
                r = -ENODATA;
        if (r < 0)
                fuse_reply_err(req, (int)-r);
        else if (size)
                fuse_reply_buf(req, buf, (size_t)r);
        else
                fuse_reply_xattr(req, (size_t)r);
        free(buf);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
        xattr_reply(req, ino, name, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
        xattr_reply(req, ino, NULL, size);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
        struct view *v = V(req);
        struct caller_id id;
        uint64_t lid;
        bool log, redo = false;
        int r;

again:
        lid = 0;
        WITH_NODE_CHANGING(v, ino, n, fd, req, offline);
        log = offline;
        r = offline && mirror_xattr_hidden(name) ? -ENODATA : 0;
        if (r >= 0 && offline)
                r = lid_before_change(v, ino, fd, &lid);
        if (r == LID_GONE)
                log = false;    /* nothing to log */
        if (r >= 0)
                r = backing_change(v, &(struct backing_change){ .kind = BC_REMOVEXATTR,
                                   .fd = fd, .fd2 = -1, .name2 = name }, caller_of(req, &id));
        if (r == -ETIMEDOUT && !offline) {
                redo = true;
                if (left_for_offline(v, n, NULL))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        if (r >= 0 && !strcmp(name, "system.posix_acl_access"))
                fuse_lowlevel_notify_inval_inode(v->se, ino, -1, 0);      /* the mode too */
        if (r >= 0 && log)
                r = offline_note_xattr(v, lid, name, NULL, 0, 0, true);
        if (r >= 0 && log && redo)
                r = offline_note_in_doubt(v, lid);
        vnode_put(v, n);
        view_change_end(v);
        fuse_reply_err(req, -r);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                         struct fuse_file_info *fi)
{
        struct view *v = V(req);
        struct vfile *f;
        struct caller_id id;
        struct stat st;
        mode_t before;
        bool offline, sent;
        int err, sr;

again:
        view_change_begin(v);
        f = vfile_of(v, fi, &err);
        if (!f) {
                view_change_end(v);
                fuse_reply_err(req, err);
                return;
        }
        offline = view_offline(v);
        if (offline && file_lid(v, f) < 0) {
                view_change_end(v);
                fuse_reply_err(req, EIO);
                return;
        }
        /* ETIMEDOUT: the set-id check was not answered, nothing was sent. */
        err = -as_writer(req, v, fi, f->fd, &before);
        sent = !err;
        if (sent)
                err = -backing_change(v, &(struct backing_change){ .kind = BC_FALLOCATE,
                                      .fd = f->fd, .fd2 = -1, .flags = mode, .off = offset,
                                      .len = length }, before ? caller_of(req, &id) : NULL);
        leave_writer(before);
        int sfd = !err ? passthrough_other_tree_file(f->id, offline) : -1;

        if (sfd >= 0) {
                if (fallocate(sfd, mode, offset, length) < 0)
                        err = errno;
                close(sfd);
                /* Offline, the stranded file is the server's (ship_stranded()). */
                f->doubt = f->doubt || offline;
        }
        /* Its new attributes (bounded, as after a write); no answer is the
         * change's own timeout. */
        sr = !err ? backing_fstatat(v, f->fd, NULL, &st) : -EIO;
        if (sr == -ETIMEDOUT)
                err = ETIMEDOUT;
        /* As a write: made again in the local copy, which the volume now serves. */
        if (err == ETIMEDOUT && !offline) {
                f->doubt = f->doubt || sent;
                if (left_for_offline(v, NULL, NULL))
                        goto again;
                fuse_reply_err(req, EIO);
                return;
        }
        if (!err && sr == 0 && (before & (S_ISUID | S_ISGID))) {
                mode_changed_check(v, ino, &st, before);
                if (offline)
                        err = -log_setid_kill(v, f, &st, before);
        }
        if (!err && offline) {
                f->dirty = true;
        } else if (!err && sr == 0) {
                f->written = true;
                if (backing_bounded(v))
                        mirror_through(v, f, f->id, st.st_ino,
                                       &(struct mirror_change){ .kind = MC_FALLOCATE,
                                                                .mode = mode, .off = offset,
                                                                .len = length });
                struct sobj *o = f->obj;

                if (o || store_obj_find(v->store, st.st_ino, &o) == 0) {
                        store_obj_changed_range(v->store, o, offset, length, &st);
                        if (o != f->obj)
                                store_obj_put(v->store, o);
                }
        }
        view_change_end(v);
        fuse_reply_err(req, err);
}

static void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
                     struct fuse_file_info *fi)
{
        struct vfile *f;
        off_t r;
        int err;

        f = vfile_of(V(req), fi, &err);
        if (!f) {
                fuse_reply_err(req, err);
                return;
        }
        r = lseek(f->fd, off, whence);
        if (r < 0)
                fuse_reply_err(req, errno);
        else
                fuse_reply_lseek(req, r);
}

const struct fuse_lowlevel_ops view_ops = {
        .init = op_init,
        .lookup = op_lookup,
        .forget = op_forget,
        .forget_multi = op_forget_multi,
        .getattr = op_getattr,
        .setattr = op_setattr,
        .readlink = op_readlink,
        .mknod = op_mknod,
        .mkdir = op_mkdir,
        .symlink = op_symlink,
        .link = op_link,
        .unlink = op_unlink,
        .rmdir = op_rmdir,
        .rename = op_rename,
        .open = op_open,
        .create = op_create,
        .read = op_read,
        .write = op_write,
        .flush = op_flush,
        .release = op_release,
        .fsync = op_fsync,
        .opendir = op_opendir,
        .readdir = op_readdir,
        .releasedir = op_releasedir,
        .fsyncdir = op_fsyncdir,
        .statfs = op_statfs,
        .setxattr = op_setxattr,
        .getxattr = op_getxattr,
        .listxattr = op_listxattr,
        .removexattr = op_removexattr,
        .fallocate = op_fallocate,
        .lseek = op_lseek,
};
