/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-deadline.c: backing calls with a bound (BackingTimeout=).
 *
 * A call that may block on a server that vanished (a hard NFS mount, a
 * stopped sshfs) runs on one of a few helper threads while the request's
 * thread waits at most BackingTimeout.  Past it the request gets
 * -ETIMEDOUT, the volume is switched offline (view_backing_timed_out()), and
 * the request is served again from the mirror; the helper stays stuck in the
 * kernel until the server answers, then drops what it got.  Every argument a
 * helper uses is its own copy (a dup() of a descriptor, a copy of a name),
 * since the requester may be gone by then.
 *
 * Without BackingTimeout (0) the calls are made directly.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "view.h"

#define HELPERS 8

enum call { CALL_FSTATAT, CALL_OPENAT, CALL_REOPEN, CALL_CLOSE, CALL_PWRITE, CALL_FN,
            CALL_CHANGE, CALL_QUERY };

struct job {
        enum call call;
        int dirfd;              /* owned: a dup() */
        char *name;             /* owned */
        int flags;
        void *buf;              /* owned: CALL_PWRITE's bytes, CALL_QUERY's answer */
        size_t size;
        void *out;              /* CALL_QUERY: the requester's buffer, filled while it waits */
        off_t off;
        bool as_caller;
        struct caller_id id;    /* CALL_REOPEN as_caller: whose identity */
        struct backing_change ch; /* CALL_CHANGE: fds, names and value the job's own */
        int (*fn)(void *arg);   /* CALL_FN: the work, on arg */
        void *arg;              /* CALL_FN: the requester's; abandoned, drop()'s */
        void (*drop)(void *arg);
        /* results, under lock */
        int result;             /* fd or 0, or -errno */
        struct stat st;
        bool done, abandoned;
        bool in_doubt;          /* a change given up on, not answered yet (in_doubt) */
        unsigned refs;          /* requester + helper */
        uint64_t wino;          /* CALL_PWRITE, and the CALL_CLOSE of its duplicate: the
                                 * written file's inode number (write_errs), or 0 */
        struct job *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queued = PTHREAD_COND_INITIALIZER;
static pthread_cond_t finished = PTHREAD_COND_INITIALIZER;
static struct job *head, *tail;         /* protected by lock */
static unsigned started;                /* protected by lock */
static __thread struct job *running;    /* a helper's job under way */
static unsigned in_doubt;               /* protected by lock: changes given up on still
                                         * waiting for the server */

static void enqueue(struct job *j);

/*
 * A network file reports a failed asynchronous write once, to whichever
 * close of its open file flushes first (sshfs: at FLUSH): often the close
 * of a write job's duplicate, on a helper, which nobody waits for.  What
 * such a close took is kept here for the flush of the application's close
 * (backing_write_error()), by the file's inode number as the kernel has it,
 * with how many of those closes were to come and have been made.
 */
struct write_err {
        uint64_t ino;
        uint64_t id;            /* this entry, of all made (an entry may go and come back) */
        uint64_t opened, closed; /* write jobs' duplicates made, and closed since */
        int err;                /* errno a close of one took, or 0 */
};
static GHashTable *write_errs;          /* protected by lock: ino -> struct write_err */
static uint64_t write_errs_made;        /* protected by lock */

/* The inode number of fd as the kernel has it cached (no server call), or 0. */
static uint64_t cached_ino(int fd)
{
        struct statx stx;

        if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_INO, &stx) < 0)
                return 0;
        return stx.stx_ino;
}

/* lock held: the entry of ino, made when @make. */
static struct write_err *write_err_of(uint64_t ino, bool make)
{
        struct write_err *e;

        if (!write_errs && make)
                write_errs = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, free);
        e = write_errs ? g_hash_table_lookup(write_errs, &ino) : NULL;
        if (!e && make && (e = calloc(1, sizeof(*e)))) {
                e->ino = ino;
                e->id = ++write_errs_made;
                g_hash_table_insert(write_errs, &e->ino, e);
        }
        return e;
}

/* lock held: a write job's duplicate closed, with @err (an errno) or 0. */
static void write_closed(uint64_t ino, int err)
{
        struct write_err *e = write_err_of(ino, false);

        if (!e)
                return;
        if (err && !e->err)
                e->err = err;
        e->closed++;
        if (e->closed == e->opened && !e->err)
                g_hash_table_remove(write_errs, &ino);
}

/* Closes fd on a helper; @wino: a write job's duplicate (write_errs). */
static void close_later(int fd, uint64_t wino)
{
        struct job *j;
        int fl = fcntl(fd, F_GETFL), r;

        /* Only an O_PATH descriptor closes without a word to the server. */
        if ((fl >= 0 && (fl & O_PATH)) || !(j = calloc(1, sizeof(*j)))) {
                r = close(fd) < 0 ? errno : 0;
                if (wino) {
                        pthread_mutex_lock(&lock);
                        write_closed(wino, r);
                        pthread_cond_broadcast(&finished);
                        pthread_mutex_unlock(&lock);
                }
                return;
        }
        j->call = CALL_CLOSE;
        j->dirfd = fd;
        j->wino = wino;
        j->refs = 1;
        pthread_mutex_lock(&lock);
        enqueue(j);
        pthread_mutex_unlock(&lock);
}

void backing_close_later(int fd)
{
        close_later(fd, 0);
}

/* lock held: drops a reference; true when it was the last (then job_free()
 * after the lock: closing a network file's descriptor asks its server). */
static bool job_put(struct job *j)
{
        return --j->refs == 0;
}

static void job_free(struct job *j)
{
        if (j->abandoned && (j->call == CALL_OPENAT || j->call == CALL_REOPEN ||
                             (j->call == CALL_CHANGE && j->ch.kind == BC_CREATE)) &&
            j->result >= 0)
                backing_close_later(j->result); /* nobody will take it */
        /* -ETIMEDOUT, late or the work's own: the requester no longer has arg. */
        if (j->call == CALL_FN && j->drop && (j->abandoned || j->result == -ETIMEDOUT))
                j->drop(j->arg);
        if (j->dirfd >= 0)
                close_later(j->dirfd, j->call == CALL_PWRITE ? j->wino : 0);
        if (j->call == CALL_CHANGE && j->ch.fd2 >= 0)
                close(j->ch.fd2);
        if (j->call == CALL_CHANGE)
                free((char *)j->ch.name2);
        free(j->name);
        free(j->buf);
        free(j);
}

static int change_run(const struct backing_change *c);
static ssize_t query_run(enum backing_query_kind kind, int fd, const char *name, void *buf,
                         size_t size);

static void run(struct job *j)
{
        int r;

        switch (j->call) {
        case CALL_FSTATAT:
                r = fstatat(j->dirfd, j->name, &j->st, AT_SYMLINK_NOFOLLOW |
                            (*j->name ? 0 : AT_EMPTY_PATH));
                j->result = r < 0 ? -errno : 0;
                break;
        case CALL_OPENAT:
                r = openat(j->dirfd, j->name, j->flags);
                j->result = r < 0 ? -errno : r;
                break;
        case CALL_PWRITE: {
                struct creds c = { false };

                r = j->as_caller ? creds_enter_id(&j->id, &c) : 0;
                if (r == 0) {
                        ssize_t n = pwrite(j->dirfd, j->buf, j->size, j->off);

                        r = n < 0 ? -errno : (int)n;
                }
                creds_leave(&c);
                j->result = r;
                break;
        }
        case CALL_FN:
                j->result = j->fn(j->arg);
                break;
        case CALL_QUERY:
                j->result = (int)query_run((enum backing_query_kind)j->flags, j->dirfd, j->name,
                                           j->buf, j->size);
                break;
        case CALL_CHANGE: {
                struct creds c = { false };

                r = j->as_caller ? creds_enter_id(&j->id, &c) : 0;
                j->result = r < 0 ? r : change_run(&j->ch);
                creds_leave(&c);
                break;
        }
        case CALL_CLOSE:
                /* Closing the last descriptor of a network file flushes it. */
                r = close(j->dirfd);
                j->dirfd = -1;
                j->result = r < 0 ? -errno : 0;
                if (j->wino) {
                        pthread_mutex_lock(&lock);
                        write_closed(j->wino, -j->result);
                        pthread_mutex_unlock(&lock);    /* the helper broadcasts */
                }
                break;
        case CALL_REOPEN: {
                struct creds c = { false };

                r = j->as_caller ? creds_enter_id(&j->id, &c) : 0;
                j->result = r < 0 ? r : backing_reopen(j->dirfd, j->flags);
                creds_leave(&c);
                break;
        }
        }
}

static void *helper(void *arg)
{
        for (;;) {
                struct job *j;
                bool last;

                pthread_mutex_lock(&lock);
                while (!head)
                        pthread_cond_wait(&queued, &lock);
                j = head;
                head = j->next;
                if (!head)
                        tail = NULL;
                pthread_mutex_unlock(&lock);
                running = j;
                run(j);         /* may block for as long as the server is gone */
                running = NULL;
                pthread_mutex_lock(&lock);
                j->done = true;
                if (j->in_doubt)
                        in_doubt--;
                pthread_cond_broadcast(&finished);
                last = job_put(j);
                pthread_mutex_unlock(&lock);
                if (last)
                        job_free(j);
        }
        return NULL;
}

/* lock held: queues j for a helper. */
static void enqueue(struct job *j)
{
        if (started < HELPERS) {
                pthread_t t;

                if (pthread_create(&t, NULL, helper, NULL) == 0) {
                        pthread_detach(t);
                        started++;
                }
        }
        if (tail)
                tail->next = j;
        else
                head = j;
        tail = j;
        pthread_cond_signal(&queued);
}

/*
 * A call failed with @err, an error a server gone also gives (a dead FUSE
 * mount's ENOTCONN, EIO): whether the backing's probe fails too (then the
 * volume is going offline), or the error is the object's own.  A probe
 * that cannot run because a change given up on still waits for the server
 * confirms it: that server has not answered for BackingTimeout already.
 */
static bool confirm_gone(struct view *v, int err)
{
        int r = backing_probe_noticed(v);

        if (r == -EBUSY)
                view_backing_gone(v, err);
        return r == -ETIMEDOUT || r == -EBUSY || backing_error_gone(r);
}

/* Runs j on a helper, waiting at most the bound; -ETIMEDOUT past it (and
 * the volume goes offline, if @notice), or when an error it took means the
 * server is gone (confirm_gone()). */
static int submit_job(struct view *v, struct job *j, struct stat *st, bool notice)
{
        uint64_t ms = v->cfg->backing_timeout_ms;
        struct timespec until;
        bool last;
        int r = 0;

        fuse_readers_may_block();
        deadline_from_now(&until, CLOCK_REALTIME, ms);
        pthread_mutex_lock(&lock);
        j->refs = 2;
        enqueue(j);
        while (!j->done && r != ETIMEDOUT)
                r = pthread_cond_timedwait(&finished, &lock, &until);
        if (j->done) {
                r = j->result;
                if (st)
                        *st = j->st;
                if (j->out && j->size && r > 0)
                        memcpy(j->out, j->buf, (size_t)r);
        } else {
                j->abandoned = true;
                /* A change the server may still make (a lookup, a read, a
                 * note for the mirror change nothing there). */
                j->in_doubt = j->call == CALL_CHANGE || j->call == CALL_PWRITE ||
                              j->call == CALL_REOPEN || j->call == CALL_CLOSE;
                in_doubt += j->in_doubt;
                r = -ETIMEDOUT;
        }
        last = job_put(j);
        pthread_mutex_unlock(&lock);
        if (last)
                job_free(j);
        if (r == -ETIMEDOUT && notice)
                view_backing_timed_out(v);
        else if (notice && backing_error_gone(r) && confirm_gone(v, r))
                r = -ETIMEDOUT; /* the caller serves it offline, as after a timeout */
        return r;
}

static int submit(struct view *v, struct job *j, struct stat *st)
{
        return submit_job(v, j, st, true);
}

/* Frees a job never submitted. */
static void job_unref_new(struct job *j)
{
        job_free(j);
}

/*
 * A descriptor of @fd's file for a stat only: an O_PATH one, whose close
 * says nothing to the server (the close of the last dup() of an open
 * network file is a flush, a round trip); a dup() where that fails.
 */
static int path_copy(int fd)
{
        char path[64];
        int fl = fcntl(fd, F_GETFL), r;

        if (fl >= 0 && (fl & O_PATH))
                return fcntl(fd, F_DUPFD_CLOEXEC, 0);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        r = open(path, O_PATH | O_CLOEXEC);
        return r >= 0 ? r : fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

static struct job *job_new(enum call call, int dirfd, const char *name, int flags)
{
        struct job *j = calloc(1, sizeof(*j));

        if (!j)
                return NULL;
        j->call = call;
        j->flags = flags;
        j->dirfd = call == CALL_FSTATAT ? path_copy(dirfd) : fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
        j->name = strdup(name ? name : "");
        if (j->dirfd < 0 || !j->name) {
                if (j->dirfd >= 0)
                        close(j->dirfd);
                free(j->name);
                free(j);
                return NULL;
        }
        return j;
}

/* Only the backing may hang: the mirror (offline) is local. */
bool backing_bounded_in(struct view *v, bool offline)
{
        /* A local filesystem does not go away as a server does: its calls
         * are plain ones, without a helper thread's round trip. */
        return v->cfg->backing_timeout_ms && !v->backing_local && !offline;
}

bool backing_bounded(struct view *v)
{
        return backing_bounded_in(v, view_calls_offline(v));
}

int backing_fstatat_in(struct view *v, bool offline, int dirfd, const char *name, struct stat *st)
{
        struct job *j;

        if (!backing_bounded_in(v, offline)) {
                if (fstatat(dirfd, name ? name : "", st,
                            AT_SYMLINK_NOFOLLOW | (name && *name ? 0 : AT_EMPTY_PATH)) < 0)
                        return -errno;
                return 0;
        }
        j = job_new(CALL_FSTATAT, dirfd, name, 0);
        return j ? submit(v, j, st) : -ENOMEM;
}

int backing_fstatat(struct view *v, int dirfd, const char *name, struct stat *st)
{
        return backing_fstatat_in(v, view_calls_offline(v), dirfd, name, st);
}

int backing_openat_in(struct view *v, bool offline, int dirfd, const char *name, int flags)
{
        struct job *j;
        int fd;

        if (!backing_bounded_in(v, offline)) {
                fd = openat(dirfd, name, flags);
                return fd < 0 ? -errno : fd;
        }
        j = job_new(CALL_OPENAT, dirfd, name, flags);
        return j ? submit(v, j, NULL) : -ENOMEM;
}

int backing_openat(struct view *v, int dirfd, const char *name, int flags)
{
        return backing_openat_in(v, view_calls_offline(v), dirfd, name, flags);
}

int backing_reopen(int pathfd, int flags)
{
        char p[64];
        int fd;

        snprintf(p, sizeof(p), "/proc/self/fd/%d", pathfd);
        fd = open(p, (flags & ~(O_NOFOLLOW | O_CREAT | O_EXCL | O_DIRECT)) | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

int backing_reopen_in(struct view *v, bool offline, int pathfd, int flags,
                      const struct caller_id *id)
{
        struct creds c = { false };
        struct job *j;
        int r;

        if (!backing_bounded_in(v, offline)) {
                r = id ? creds_enter_id(id, &c) : 0;
                if (r == 0)
                        r = backing_reopen(pathfd, flags);
                creds_leave(&c);
                return r;
        }
        j = job_new(CALL_REOPEN, pathfd, NULL, flags);
        if (!j)
                return -ENOMEM;
        if (id) {
                j->as_caller = true;
                j->id = *id;
        }
        return submit(v, j, NULL);
}

int backing_reopen_bounded(struct view *v, int pathfd, int flags, const struct caller_id *id)
{
        return backing_reopen_in(v, view_calls_offline(v), pathfd, flags, id);
}

ssize_t backing_pwrite(struct view *v, int fd, const void *buf, size_t size, off_t off,
                       const struct caller_id *id)
{
        struct creds c = { false };
        struct job *j;
        ssize_t n;
        int r;

        if (!backing_bounded(v) || size > INT_MAX) {
                r = id ? creds_enter_id(id, &c) : 0;
                n = r < 0 ? r : pwrite(fd, buf, size, off);
                if (n < 0 && r == 0)
                        n = -errno;
                creds_leave(&c);
                return n;
        }
        j = job_new(CALL_PWRITE, fd, NULL, 0);
        if (!j || !(j->buf = malloc(size ? size : 1))) {
                if (j)
                        job_unref_new(j);
                return -ENOMEM;
        }
        memcpy(j->buf, buf, size);
        j->size = size;
        j->off = off;
        j->wino = cached_ino(j->dirfd);
        if (j->wino) {
                struct write_err *e;

                pthread_mutex_lock(&lock);
                e = write_err_of(j->wino, true);
                if (e)
                        e->opened++;
                else
                        j->wino = 0;
                pthread_mutex_unlock(&lock);
        }
        if (id) {
                j->as_caller = true;
                j->id = *id;
        }
        return submit(v, j, NULL);
}

int backing_flush(struct view *v, int fd)
{
        struct job *j;
        int dfd;

        if (!backing_bounded(v)) {
                dfd = dup(fd);
                if (dfd < 0)
                        return -errno;
                return close(dfd) < 0 ? -errno : 0;
        }
        j = job_new(CALL_CLOSE, fd, NULL, 0);
        return j ? submit(v, j, NULL) : -ENOMEM;
}

int backing_write_error(struct view *v, int fd)
{
        uint64_t ino = cached_ino(fd), id, upto;
        struct write_err *e;
        struct timespec until;
        int r = 0, err = 0;

        if (!ino)
                return 0;
        deadline_from_now(&until, CLOCK_REALTIME, v->cfg->backing_timeout_ms);
        pthread_mutex_lock(&lock);
        e = write_err_of(ino, false);
        /* The duplicates' closes of the writes made so far (not of those
         * another open file goes on making) wait for the same write replies
         * as the flush that just returned: they end at once, or with the
         * server. */
        id = e ? e->id : 0;
        upto = e ? e->opened : 0;
        while (e && e->closed < upto && r != ETIMEDOUT) {
                r = pthread_cond_timedwait(&finished, &lock, &until);
                e = write_err_of(ino, false);
                if (e && e->id != id)
                        e = NULL;       /* all closed, and another writer's since */
        }
        if (e) {
                err = e->err;
                e->err = 0;
                if (e->closed == e->opened)
                        g_hash_table_remove(write_errs, &ino);
        }
        pthread_mutex_unlock(&lock);
        return -err;
}

void backing_close(struct view *v, int fd)
{
        struct job *j;

        if (!v->cfg->backing_timeout_ms || v->backing_local || !(j = calloc(1, sizeof(*j)))) {
                close(fd);
                return;
        }
        /* Nobody waits: a close of a file of a server that is gone hangs there. */
        j->call = CALL_CLOSE;
        j->dirfd = fd;
        j->refs = 1;
        pthread_mutex_lock(&lock);
        enqueue(j);
        pthread_mutex_unlock(&lock);
}

/* A job running fn(arg) on a helper (drop(arg) when nobody waits for it). */
static struct job *fn_job_new(int (*fn)(void *arg), void *arg, void (*drop)(void *arg))
{
        struct job *j = calloc(1, sizeof(*j));

        if (!j)
                return NULL;
        j->call = CALL_FN;
        j->dirfd = -1;
        j->fn = fn;
        j->arg = arg;
        j->drop = drop;
        return j;
}

int backing_call(struct view *v, int (*fn)(void *arg), void *arg, void (*drop)(void *arg))
{
        struct job *j;
        int r;

        if (!v->cfg->backing_timeout_ms) {
                r = fn(arg);
                if (r == -ETIMEDOUT && drop)
                        drop(arg);
                return r;
        }
        j = fn_job_new(fn, arg, drop);
        if (!j)
                return -ENOMEM;
        return submit_job(v, j, NULL, false);
}

bool backing_call_abandoned(void)
{
        bool r;

        if (!running)
                return false;
        pthread_mutex_lock(&lock);
        r = running->abandoned;
        pthread_mutex_unlock(&lock);
        return r;
}

int backing_call_bounded_in(struct view *v, bool offline, int (*fn)(void *arg), void *arg,
                            void (*drop)(void *arg))
{
        struct job *j;
        int r;

        if (!backing_bounded_in(v, offline)) {
                /* -ETIMEDOUT tells the caller arg is no longer its own, as
                 * when a helper was given up on. */
                r = fn(arg);
                if (r == -ETIMEDOUT && drop)
                        drop(arg);
                return r;
        }
        j = fn_job_new(fn, arg, drop);
        if (!j)
                return -ENOMEM;
        return submit(v, j, NULL);
}

int backing_call_bounded(struct view *v, int (*fn)(void *arg), void *arg, void (*drop)(void *arg))
{
        return backing_call_bounded_in(v, view_calls_offline(v), fn, arg, drop);
}

/* ---- what an object holds: its symlink target, its xattrs ---- */

#ifndef SYS_getxattrat
#define SYS_getxattrat 464
#endif

/* struct xattr_args of getxattrat(2), which older headers lack. */
struct getxattrat_args {
        uint64_t value;
        uint32_t size;
        uint32_t flags;
};

/*
 * getxattr of the directory of O_PATH descriptor dfd: getxattrat(2) of "."
 * in it (Linux 6.13+; it refuses an O_PATH descriptor itself with
 * AT_EMPTY_PATH), a path walk of one step, where /proc/self/fd/N costs
 * procfs's lookup and permission checks of the magic link (about 5 us
 * against 0.6 here); that on older kernels and where a seccomp filter
 * refuses it.  Returns -1 and errno as getxattr(2).
 */
static ssize_t dir_getxattr(int dfd, const char *name, void *buf, size_t size)
{
        static bool no_at;
        char path[64];

        if (!__atomic_load_n(&no_at, __ATOMIC_RELAXED)) {
                struct getxattrat_args a = { .value = (uintptr_t)buf, .size = (uint32_t)size };
                long r = syscall(SYS_getxattrat, dfd, ".", 0, name, &a, sizeof(a));

                /* EPERM: a seccomp filter that does not know the call
                 * (systemd's @system-service before it listed it, as
                 * fcached.service runs the view); the /proc path then gives
                 * the xattr's own answer. */
                if (r >= 0 || (errno != ENOSYS && errno != EINVAL && errno != EPERM))
                        return r;
                __atomic_store_n(&no_at, true, __ATOMIC_RELAXED);
        }
        snprintf(path, sizeof(path), "/proc/self/fd/%d", dfd);
        return getxattr(path, name, buf, size);
}

/* The query itself, on whichever thread: the answer's length or -errno. */
static ssize_t query_run(enum backing_query_kind kind, int fd, const char *name, void *buf,
                         size_t size)
{
        char path[64];
        ssize_t r;

        /* An O_PATH descriptor's xattrs are reached through its /proc link,
         * which names a symlink itself too. */
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        switch (kind) {
        case BQ_READLINK:
                r = readlinkat(fd, "", buf, size);
                break;
        case BQ_GETXATTR:
                r = getxattr(path, name, size ? buf : NULL, size);
                break;
        case BQ_DIR_GETXATTR:
                r = dir_getxattr(fd, name, size ? buf : NULL, size);
                break;
        case BQ_LISTXATTR:
                r = listxattr(path, size ? buf : NULL, size);
                break;
        case BQ_STATFS:
                if (size != sizeof(struct statvfs)) {
                        errno = EINVAL;
                        r = -1;
                } else {
                        r = fstatvfs(fd, buf) < 0 ? -1 : (ssize_t)size;
                }
                break;
        default:
                errno = EINVAL;
                r = -1;
        }
        return r < 0 ? -errno : r;
}

ssize_t backing_query_in(struct view *v, bool offline, enum backing_query_kind kind, int fd,
                         const char *name, void *buf, size_t size)
{
        struct job *j;

        /* An xattr or a link target is at most 64 KiB or PATH_MAX: an int. */
        if (!backing_bounded_in(v, offline) || size > INT_MAX)
                return query_run(kind, fd, name, buf, size);
        j = job_new(CALL_QUERY, fd, name, (int)kind);
        if (!j || (size && !(j->buf = malloc(size)))) {
                if (j)
                        job_unref_new(j);
                return -ENOMEM;
        }
        j->size = size;
        j->out = buf;
        return submit(v, j, NULL);
}

ssize_t backing_query(struct view *v, enum backing_query_kind kind, int fd, const char *name,
                      void *buf, size_t size)
{
        return backing_query_in(v, view_calls_offline(v), kind, fd, name, buf, size);
}

/* ---- changes ---- */

/* The change itself, on whichever thread (credentials already taken). */
static int change_run(const struct backing_change *c)
{
        char path[64];
        int r;

        /* An O_PATH descriptor is reached through its /proc link (chmod,
         * truncate, utimes and xattrs refuse one). */
        snprintf(path, sizeof(path), "/proc/self/fd/%d", c->fd);
        switch (c->kind) {
        case BC_MKDIR:
                r = mkdirat(c->fd, c->name, c->mode);
                break;
        case BC_MKNOD:
                r = mknodat(c->fd, c->name, c->mode, c->rdev);
                break;
        case BC_SYMLINK:
                r = symlinkat(c->name2, c->fd, c->name);
                break;
        case BC_CREATE:
                r = openat(c->fd, c->name, c->flags | O_CLOEXEC, c->mode);
                return r < 0 ? -errno : r;
        case BC_LINK:
                r = linkat(c->fd, "", c->fd2, c->name2, AT_EMPTY_PATH);
                break;
        case BC_UNLINK:
                r = unlinkat(c->fd, c->name, c->flags);
                break;
        case BC_RENAME:
                r = renameat2(c->fd, c->name, c->fd2, c->name2, (unsigned)c->flags);
                break;
        case BC_CHMOD:
                r = c->open_file ? fchmod(c->fd, c->mode) : fchmodat(AT_FDCWD, path, c->mode, 0);
                break;
        case BC_CHOWN:
                r = fchownat(c->fd, "", c->uid, c->gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
                break;
        case BC_TRUNCATE:
                r = c->open_file ? ftruncate(c->fd, c->off) : truncate(path, c->off);
                break;
        case BC_UTIMENS:
                if (c->open_file)
                        r = futimens(c->fd, c->times);
                else if (c->flags & AT_EMPTY_PATH)     /* a symlink itself */
                        r = utimensat(c->fd, "", c->times, AT_EMPTY_PATH);
                else
                        r = utimensat(AT_FDCWD, path, c->times, 0);
                break;
        case BC_SETXATTR:
                r = setxattr(path, c->name2, c->value, c->size, c->flags);
                break;
        case BC_REMOVEXATTR:
                r = removexattr(path, c->name2);
                break;
        case BC_FALLOCATE:
                r = fallocate(c->fd, c->flags, c->off, c->len);
                break;
        default:
                return -EINVAL;
        }
        return r < 0 ? -errno : 0;
}

int backing_change(struct view *v, const struct backing_change *c, const struct caller_id *id)
{
        struct creds cr = { false };
        struct job *j;
        int r;

        if (!backing_bounded(v)) {
                r = id ? creds_enter_id(id, &cr) : 0;
                if (r == 0)
                        r = change_run(c);
                creds_leave(&cr);
                return r;
        }
        /* The helper's own copies: the requester may be gone when it runs. */
        j = job_new(CALL_CHANGE, c->fd, c->name, 0);
        if (!j)
                return -ENOMEM;
        j->ch = *c;
        j->ch.fd = j->dirfd;
        j->ch.name = j->name;
        j->ch.fd2 = c->fd2 >= 0 ? fcntl(c->fd2, F_DUPFD_CLOEXEC, 0) : -1;
        j->ch.name2 = c->name2 ? strdup(c->name2) : NULL;
        j->ch.value = NULL;
        if (c->value || c->size) {
                j->buf = malloc(c->size ? c->size : 1);
                if (j->buf && c->size)
                        memcpy(j->buf, c->value, c->size);
                j->ch.value = j->buf;
        }
        if ((c->fd2 >= 0 && j->ch.fd2 < 0) || (c->name2 && !j->ch.name2) ||
            ((c->value || c->size) && !j->buf)) {
                job_unref_new(j);
                return -ENOMEM;
        }
        if (id) {
                j->as_caller = true;
                j->id = *id;
        }
        return submit(v, j, NULL);
}

/* The probe, on a helper: Backing= by its path (a share mounted again is a
 * new root; the old one may never answer), then what no cache answers. */
static int probe_path(void *arg)
{
        const char *path = arg;
        struct statx stx;
        struct statfs sfs;
        int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC), r;

        if (fd < 0)
                return -errno;
        r = statx(fd, "", AT_EMPTY_PATH | AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, &stx);
        if (r == 0)
                r = fstatfs(fd, &sfs);
        r = r < 0 ? -errno : 0;
        close(fd);
        return r;
}

int backing_probe(struct view *v)
{
        char *path;
        unsigned doubt;
        int r;

        /* The changes given up on are answered first: the server may apply
         * one after the probe's calls, and a replay begun meanwhile would
         * meet it half way (made twice, or back after its unlink). */
        pthread_mutex_lock(&lock);
        doubt = in_doubt;
        pthread_mutex_unlock(&lock);
        if (doubt) {
                log_debug("%u backing changes given up on still wait for the server", doubt);
                return -EBUSY;
        }
        path = strdup(v->cfg->backing);
        if (!path)
                return -ENOMEM;
        r = backing_call(v, probe_path, path, free);
        if (r != -ETIMEDOUT)
                free(path);     /* else free()d by the helper */
        return r;
}

int backing_probe_noticed(struct view *v)
{
        int r = backing_probe(v);

        if (r == -ETIMEDOUT)
                view_backing_timed_out(v);
        else if (backing_error_gone(r))
                view_backing_gone(v, r);
        return r;
}

int backing_wait_in_doubt(struct view *v)
{
        uint64_t ms = v->cfg->backing_timeout_ms;
        struct timespec until;
        unsigned doubt;
        int r = 0;

        deadline_from_now(&until, CLOCK_REALTIME, ms);
        pthread_mutex_lock(&lock);
        while (in_doubt && ms && r != ETIMEDOUT)
                r = pthread_cond_timedwait(&finished, &lock, &until);
        doubt = in_doubt;
        pthread_mutex_unlock(&lock);
        if (doubt)
                log_info("%u backing changes given up on still wait for the server after"
                         " BackingTimeout (%" PRIu64 " ms)", doubt, ms);
        return doubt ? -EBUSY : 0;
}

/* ---- long work that must keep moving ---- */

struct backing_progress {
        pthread_mutex_t lock;
        pthread_cond_t moved;
        unsigned refs;          /* the requester and the thread */
        uint64_t steps;
        bool done, abandoned;
        int result;
        int (*fn)(void *arg, struct backing_progress *p);
        void *arg;
        void (*drop)(void *arg);
};

static void progress_unref(struct backing_progress *p)
{
        bool last;

        pthread_mutex_lock(&p->lock);
        last = --p->refs == 0;
        pthread_mutex_unlock(&p->lock);
        if (!last)
                return;
        if (p->drop && (p->abandoned || p->result == -ETIMEDOUT))
                p->drop(p->arg);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->moved);
        free(p);
}

void backing_progress_step(struct backing_progress *p)
{
        pthread_mutex_lock(&p->lock);
        p->steps++;
        pthread_cond_broadcast(&p->moved);
        pthread_mutex_unlock(&p->lock);
}

static void *progress_thread(void *arg)
{
        struct backing_progress *p = arg;
        int r = p->fn(p->arg, p);

        pthread_mutex_lock(&p->lock);
        p->result = r;
        p->done = true;
        pthread_cond_broadcast(&p->moved);
        pthread_mutex_unlock(&p->lock);
        progress_unref(p);
        return NULL;
}

int backing_call_moving(struct view *v, int (*fn)(void *arg, struct backing_progress *p),
                        void *arg, void (*drop)(void *arg), uint64_t *steps)
{
        struct backing_progress *p = calloc(1, sizeof(*p));
        uint64_t ms = v->cfg->backing_timeout_ms, seen = UINT64_MAX;
        struct timespec until = { 0 };
        pthread_t t;
        int r = 0;

        if (!p)
                return -ENOMEM;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->moved, NULL);
        p->fn = fn;
        p->arg = arg;
        p->drop = drop;
        p->refs = 2;
        if (pthread_create(&t, NULL, progress_thread, p) != 0) {
                p->refs = 1;
                p->drop = NULL;
                progress_unref(p);
                return -EAGAIN;
        }
        pthread_detach(t);
        pthread_mutex_lock(&p->lock);
        while (!p->done) {
                if (p->steps != seen) {
                        seen = p->steps;
                        deadline_from_now(&until, CLOCK_REALTIME, ms);
                }
                if (!ms)
                        pthread_cond_wait(&p->moved, &p->lock);
                else if (pthread_cond_timedwait(&p->moved, &p->lock, &until) == ETIMEDOUT &&
                         p->steps == seen && !p->done) {
                        p->abandoned = true;
                        r = -ETIMEDOUT;
                        break;
                }
        }
        if (r == 0)
                r = p->result;
        if (steps)
                *steps = p->steps;
        pthread_mutex_unlock(&p->lock);
        progress_unref(p);
        return r;
}
