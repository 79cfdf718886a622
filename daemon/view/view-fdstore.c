// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * view-fdstore.c: descriptors the holder keeps for the worker, across a
 * takeover.
 *
 * An open file whose object lost its last name (unlinked, or renamed
 * over) can be reached only through a descriptor: a successor finds it by
 * no name, and a filesystem refuses the handle of an unlinked inode.  The
 * worker gives such descriptors to the holder (the process that keeps
 * /dev/fuse), keyed by their open file's handle, and takes them back at
 * its release.  So it does with the file of each passthrough backing, from
 * its registration to its close: the kernel's own file, which names and
 * handles may no longer lead to.  A successor asks for all of them at its
 * start.
 *
 * One SOCK_SEQPACKET pair for the holder's life: the holder's thread reads
 * one end, every worker inherits the other, so what a worker sent before
 * it died is read before its successor's request.  Each message is a
 * struct fdstore_msg, with one descriptor for KEEP and ENTRY.  A request's
 * answers carry its number: answers to a worker that died while reading
 * them are told apart and dropped.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <glib.h>

#include "view.h"

enum { FDSTORE_KEEP = 1, FDSTORE_DROP, FDSTORE_GIVE, FDSTORE_ENTRY, FDSTORE_END };

struct fdstore_msg {
        uint32_t kind;
        uint32_t request;       /* GIVE, and its ENTRY and END answers */
        uint64_t key;           /* KEEP, DROP, ENTRY */
};

static int send_msg(int sock, const struct fdstore_msg *m, int fd)
{
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } ctl;
        struct iovec iov = { (void *)m, sizeof(*m) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

        if (fd >= 0) {
                struct cmsghdr *c;

                memset(&ctl, 0, sizeof(ctl));
                mh.msg_control = ctl.buf;
                mh.msg_controllen = sizeof(ctl.buf);
                c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(c), &fd, sizeof(int));
        }
        while (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0)
                if (errno != EINTR)
                        return -errno;
        return 0;
}

/* One message, and its descriptor in *fd (-1: none); 0 at end of stream. */
static ssize_t recv_msg(int sock, struct fdstore_msg *m, int *fd)
{
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } ctl;
        struct iovec iov = { m, sizeof(*m) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                             .msg_controllen = sizeof(ctl.buf) };
        struct cmsghdr *c;
        ssize_t n;

        *fd = -1;
        while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0)
                if (errno != EINTR)
                        return -errno;
        for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
                    c->cmsg_len == CMSG_LEN(sizeof(int)))
                        memcpy(fd, CMSG_DATA(c), sizeof(int));
        if (n > 0 && (size_t)n != sizeof(*m)) {
                if (*fd >= 0)
                        close(*fd);
                *fd = -1;
                m->kind = 0;    /* not one of ours: ignored */
        }
        return n;
}

/* ---- the holder's side ---- */

static void close_kept(gpointer p)
{
        close(GPOINTER_TO_INT(p) - 1);
}

static void *holder_thread(void *arg)
{
        int sock = (int)(intptr_t)arg, fd;
        GHashTable *kept = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, close_kept);
        struct fdstore_msg m;

        while (recv_msg(sock, &m, &fd) > 0) {
                GHashTableIter it;
                gpointer key, val;

                switch (m.kind) {
                case FDSTORE_KEEP:
                        if (fd >= 0)
                                g_hash_table_insert(kept, g_memdup2(&m.key, sizeof(m.key)),
                                                    GINT_TO_POINTER(fd + 1));
                        fd = -1;
                        break;
                case FDSTORE_DROP:
                        g_hash_table_remove(kept, &m.key);
                        break;
                case FDSTORE_GIVE:
                        g_hash_table_iter_init(&it, kept);
                        while (g_hash_table_iter_next(&it, &key, &val))
                                send_msg(sock, &(struct fdstore_msg){ FDSTORE_ENTRY, m.request,
                                                                      *(uint64_t *)key },
                                         GPOINTER_TO_INT(val) - 1);
                        send_msg(sock, &(struct fdstore_msg){ FDSTORE_END, m.request, 0 }, -1);
                        break;
                }
                if (fd >= 0)
                        close(fd);
        }
        g_hash_table_destroy(kept);
        return NULL;
}

int fdstore_holder_start(int *worker_end)
{
        pthread_t t;
        int sv[2];

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        if (pthread_create(&t, NULL, holder_thread, (void *)(intptr_t)sv[0]) != 0) {
                close(sv[0]);
                close(sv[1]);
                return -EAGAIN;
        }
        pthread_detach(t);
        *worker_end = sv[1];
        return 0;
}

/* ---- the worker's side ---- */

/* How long a descriptor given with fdstore_keep_soon() may wait: most are
 * dropped sooner (a file created, written and closed), and cost nothing. */
#define KEEP_SOON_MS 50

static struct {
        pthread_mutex_t lock;
        pthread_cond_t wake;    /* a descriptor is pending, the keeper idle */
        int sock;               /* -1: no holder (--no-holder) */
        GHashTable *pending;    /* under lock: key -> duplicate + 1, not sent yet */
        bool keeper_idle;       /* under lock: waiting for one (not timing one) */
} store = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, -1, NULL, false };

/* store.lock held: every pending descriptor goes to the holder. */
static void send_pending(void)
{
        GHashTableIter it;
        gpointer key, val;

        g_hash_table_iter_init(&it, store.pending);
        while (g_hash_table_iter_next(&it, &key, &val)) {
                int fd = GPOINTER_TO_INT(val) - 1;

                send_msg(store.sock, &(struct fdstore_msg){ FDSTORE_KEEP, 0, *(uint64_t *)key },
                         fd);
                close(fd);
                g_hash_table_iter_remove(&it);
        }
}

static void *keeper_thread(void *arg)
{
        (void)arg;
        pthread_mutex_lock(&store.lock);
        for (;;) {
                struct timespec until;

                store.keeper_idle = true;
                while (!g_hash_table_size(store.pending))
                        pthread_cond_wait(&store.wake, &store.lock);
                store.keeper_idle = false;
                deadline_from_now(&until, CLOCK_REALTIME, KEEP_SOON_MS);
                while (pthread_cond_timedwait(&store.wake, &store.lock, &until) == 0)
                        ;       /* the window is timed, not signalled */
                send_pending();
        }
        return NULL;
}

void fdstore_attach(int sock)
{
        pthread_t t;

        store.sock = sock;
        store.pending = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
        if (pthread_create(&t, NULL, keeper_thread, NULL) == 0)
                pthread_detach(t);
        else
                store.pending = NULL;   /* every keep is sent at once */
}

void fdstore_keep_soon(uint64_t key, int fd)
{
        int dup;

        if (store.sock < 0)
                return;
        if (!store.pending || (dup = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
                fdstore_keep(key, fd);
                return;
        }
        pthread_mutex_lock(&store.lock);
        g_hash_table_insert(store.pending, g_memdup2(&key, sizeof(key)), GINT_TO_POINTER(dup + 1));
        if (store.keeper_idle)
                pthread_cond_signal(&store.wake);
        pthread_mutex_unlock(&store.lock);
}

void fdstore_flush(void)
{
        if (store.sock < 0 || !store.pending)
                return;
        pthread_mutex_lock(&store.lock);
        send_pending();
        pthread_mutex_unlock(&store.lock);
}

int fdstore_keep(uint64_t key, int fd)
{
        int r;

        if (store.sock < 0)
                return -ENOTSUP;
        pthread_mutex_lock(&store.lock);
        r = send_msg(store.sock, &(struct fdstore_msg){ FDSTORE_KEEP, 0, key }, fd);
        pthread_mutex_unlock(&store.lock);
        return r;
}

void fdstore_drop(uint64_t key)
{
        gpointer val;

        if (store.sock < 0)
                return;
        pthread_mutex_lock(&store.lock);
        /* Never sent: nothing to tell the holder. */
        if (store.pending && (val = g_hash_table_lookup(store.pending, &key))) {
                close(GPOINTER_TO_INT(val) - 1);
                g_hash_table_remove(store.pending, &key);
        } else {
                send_msg(store.sock, &(struct fdstore_msg){ FDSTORE_DROP, 0, key }, -1);
        }
        pthread_mutex_unlock(&store.lock);
}

struct kept_fd {
        uint64_t key;
        int fd;
};

int fdstore_take_all(void (*take)(void *ud, uint64_t key, int fd), void *ud)
{
        GArray *got = g_array_new(FALSE, FALSE, sizeof(struct kept_fd));
        uint32_t request = (uint32_t)getpid();
        struct fdstore_msg m;
        ssize_t n;
        int fd, r;

        if (store.sock < 0) {
                g_array_free(got, TRUE);
                return 0;
        }
        pthread_mutex_lock(&store.lock);
        n = send_msg(store.sock, &(struct fdstore_msg){ FDSTORE_GIVE, request, 0 }, -1);
        while (n >= 0 && (n = recv_msg(store.sock, &m, &fd)) > 0) {
                if (m.request == request && m.kind == FDSTORE_ENTRY && fd >= 0) {
                        g_array_append_val(got, ((struct kept_fd){ m.key, fd }));
                        continue;
                }
                if (fd >= 0)
                        close(fd);      /* a predecessor's answers */
                if (m.request == request && m.kind == FDSTORE_END)
                        break;
        }
        pthread_mutex_unlock(&store.lock);
        /* Outside the lock: @take may keep or drop descriptors. */
        for (guint i = 0; i < got->len; i++) {
                struct kept_fd *k = &g_array_index(got, struct kept_fd, i);

                take(ud, k->key, k->fd);
        }
        r = n < 0 ? (int)n : (int)got->len;
        g_array_free(got, TRUE);
        return r;
}
