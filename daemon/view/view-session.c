/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-session.c: the worker side of fcache-view: it serves a FUSE
 * connection whose /dev/fuse descriptor it inherited from the holder.
 *
 * The worker runs its own loop (fuse_session_receive_buf/process_buf on N
 * threads, one of which reads at a time: view-readers.c) rather than
 * fuse_session_loop_mt, because it needs to see the
 * raw requests: the first worker of a connection saves the FUSE_INIT request
 * the kernel sent, and a successor (--takeover) feeds that saved INIT to
 * libfuse again so that libfuse accepts requests on a connection the kernel
 * will never initialise a second time.  libfuse's reply to that replayed INIT
 * carries a unique id the kernel does not know and is dropped by the kernel
 * (ENOENT, which libfuse does not report).  The successor then sends
 * FUSE_NOTIFY_RESEND (Linux 6.9+), which puts every request the dead worker
 * had read but not answered back in the queue, so applications see a pause,
 * not a hang or ENOTCONN.
 */
#include <errno.h>
#include <inttypes.h>
#include <linux/fuse.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "view.h"

#ifndef FUSE_NOTIFY_RESEND
#define FUSE_NOTIFY_RESEND 7
#endif

/* A unique id no kernel request has: even, far above the kernel's counter. */
#define REPLAYED_INIT_UNIQUE (1ULL << 62)

struct loop {
        struct view *v;
        struct fuse_session *se;
        pthread_mutex_t lock;
        pthread_cond_t done;
        unsigned running;       /* protected by lock */
        bool init_saved;        /* protected by lock */
        /* The INIT this worker answers: its unique id and the flags the
         * kernel offered (see init_reply_patch). */
        uint64_t init_unique;   /* written before libfuse processes the INIT */
        uint32_t init_offered;
        uint32_t init_offered2; /* flags2, when the kernel sent FUSE_INIT_EXT */
};

/* Shared with the FUSE threads, which are not joined: never freed. */
static struct loop g_loop;

/* Kernel INIT flags libfuse 3.14 cannot negotiate (it has no FUSE_CAP_ for
 * them) that the view wants, each only when the kernel offers it:
 *
 * FUSE_HANDLE_KILLPRIV_V2: the filesystem kills set-id bits and
 * capabilities on write, truncate and chown, as the view does already (the
 * backing does it, the caller's fsuid being in force), and the kernel then
 * marks the superblock SB_NOSEC: after the first write to an inode finds no
 * security.capability, later writes skip that check.  Without it every
 * write(2) costs a FUSE_GETXATTR round trip before its FUSE_WRITE. */
#define VIEW_INIT_FLAGS FUSE_HANDLE_KILLPRIV_V2

static void note_init(const void *mem, size_t len)
{
        const struct fuse_in_header *in = mem;
        const struct fuse_init_in *ii = (const void *)(in + 1);

        /* flags sits in the first 16 bytes of fuse_init_in, which every
         * protocol minor sends. */
        if (len < sizeof(*in) + offsetof(struct fuse_init_in, flags) + sizeof(ii->flags))
                return;
        __atomic_store_n(&g_loop.init_offered, ii->flags, __ATOMIC_RELAXED);
        if ((ii->flags & FUSE_INIT_EXT) &&
            len >= sizeof(*in) + offsetof(struct fuse_init_in, flags2) + sizeof(ii->flags2))
                __atomic_store_n(&g_loop.init_offered2, ii->flags2, __ATOMIC_RELAXED);
        __atomic_store_n(&g_loop.init_unique, in->unique, __ATOMIC_RELEASE);
}

/* Adds VIEW_INIT_FLAGS to libfuse's INIT reply.  A replayed INIT (takeover)
 * is patched alike, so the successor's libfuse state matches what the first
 * worker negotiated (the kernel drops that reply anyway). */
static void init_reply_patch(struct iovec *iov, int count)
{
        struct fuse_out_header *oh;
        struct fuse_init_out *o;
        uint64_t unique = __atomic_load_n(&g_loop.init_unique, __ATOMIC_ACQUIRE);

        if (!unique || count < 2 || iov[0].iov_len != sizeof(*oh))
                return;
        oh = iov[0].iov_base;
        if (oh->unique != unique || oh->error != 0 ||
            iov[1].iov_len < offsetof(struct fuse_init_out, flags) + sizeof(o->flags))
                return;
        __atomic_store_n(&g_loop.init_unique, 0, __ATOMIC_RELAXED);
        o = iov[1].iov_base;
        o->flags |= g_loop.init_offered & VIEW_INIT_FLAGS;
        if (g_loop.init_offered & VIEW_INIT_FLAGS & FUSE_HANDLE_KILLPRIV_V2)
                log_debug("FUSE_HANDLE_KILLPRIV_V2 negotiated");
        passthrough_patch_init(o, iov[1].iov_len,
                               g_loop.init_offered | (uint64_t)g_loop.init_offered2 << 32);
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *ud)
{
        (void)ud;
        init_reply_patch(iov, count);
        passthrough_patch_reply(iov, count);
        return writev(fd, iov, count);
}

static ssize_t io_read(int fd, void *buf, size_t len, void *ud)
{
        (void)ud;
        return read(fd, buf, len);
}

static const struct fuse_custom_io view_io = {
        .writev = io_writev,
        .read = io_read,
};

/* Larger than libfuse 3.14's receive size (256 pages + one header page). */
#define RECV_BUF_SIZE (2u << 20)

static void *worker_thread(void *arg)
{
        struct loop *l = arg;
        struct fuse_buf buf = { 0 };

        /* A request the kernel is copying into a buffer page that is not yet
         * mapped fails with EIO if the worker is killed at that moment (the
         * fault is abandoned on the fatal signal).  Receive into a buffer
         * that is faulted in and locked from the start, so a kill -9 never
         * costs an application an EIO. */
        buf.mem = aligned_alloc(4096, RECV_BUF_SIZE);
        if (buf.mem) {
                memset(buf.mem, 0, RECV_BUF_SIZE);
                buf.size = RECV_BUF_SIZE;
                if (mlock(buf.mem, RECV_BUF_SIZE) < 0)
                        log_debug("mlock of the receive buffer failed: %m, ignoring");
        }

        bool reader = false, served = false;

        while (!fuse_session_exited(l->se)) {
                if (!reader) {
                        if (!fuse_readers_turn())
                                break;
                        reader = true;
                        if (served)
                                fuse_readers_poll(fuse_session_fd(l->se));
                }
                int res = fuse_session_receive_buf(l->se, &buf);

                if (res == -EINTR || res == -EAGAIN)
                        continue;
                if (res <= 0) {
                        if (res < 0 && res != -ENODEV)
                                log_error("Failed to read from /dev/fuse: %s", strerror(-res));
                        fuse_session_exit(l->se);
                        fuse_readers_end();
                        break;
                }
                fuse_readers_took();
                reader = false;
                served = true;
                if (!(buf.flags & FUSE_BUF_IS_FD) && (size_t)res >= sizeof(struct fuse_in_header)) {
                        struct fuse_in_header *in = buf.mem;

                        /* libfuse 3.14 has no tmpfile operation.  FUSE_TMPFILE
                         * has FUSE_CREATE's request and reply; op_create knows
                         * it by its name "/". */
                        if (in->opcode == FUSE_TMPFILE)
                                in->opcode = FUSE_CREATE;

                        if (in->opcode == FUSE_INIT) {
                                note_init(buf.mem, (size_t)res);
                                pthread_mutex_lock(&l->lock);
                                if (!l->init_saved && state_save_init(l->v, buf.mem, (size_t)res) == 0)
                                        l->init_saved = true;
                                pthread_mutex_unlock(&l->lock);
                        }
                }
                fuse_session_process_buf(l->se, &buf);
        }
        free(buf.mem);
        pthread_mutex_lock(&l->lock);
        l->running--;
        pthread_cond_signal(&l->done);
        pthread_mutex_unlock(&l->lock);
        return NULL;
}

static int replay_init(struct view *v, struct fuse_session *se)
{
        struct fuse_buf buf = { 0 };
        struct fuse_in_header *in;
        void *mem;
        size_t len;
        int r = state_load_init(v, &mem, &len);

        if (r < 0) {
                log_error("Cannot take over: no saved FUSE_INIT in %s: %s", v->init_path,
                          strerror(-r));
                return r;
        }
        if (len < sizeof(*in) + sizeof(struct fuse_init_in) - 4 * sizeof(uint32_t) ||
            ((struct fuse_in_header *)mem)->opcode != FUSE_INIT) {
                g_free(mem);
                log_error("Cannot take over: %s is not a FUSE_INIT request", v->init_path);
                return -EINVAL;
        }
        in = mem;
        in->unique = REPLAYED_INIT_UNIQUE;
        note_init(mem, len);
        buf.mem = mem;
        buf.size = len;
        fuse_session_process_buf(se, &buf);
        g_free(mem);
        return 0;
}

static void send_resend(int fd)
{
        struct fuse_out_header oh = {
                .len = sizeof(oh), .error = FUSE_NOTIFY_RESEND, .unique = 0,
        };

        if (write(fd, &oh, sizeof(oh)) < 0)
                log_warn("FUSE_NOTIFY_RESEND failed: %m; requests the previous worker had"
                         " read stay unanswered");
        else
                log_info("Asked the kernel to resend the requests the previous worker had read");
}

static void *hoard_thread(void *arg);

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
        stop_signal = sig;
}

int view_worker_run(struct view *v, int fuse_fd)
{
        char *argv[] = { (char *)"fcache-view", NULL };
        struct fuse_args args = FUSE_ARGS_INIT(1, argv);
        pthread_t *tids, hoard;
        sigset_t set, old;
        int r = 0;

        g_loop.v = v;
        pthread_mutex_init(&g_loop.lock, NULL);
        pthread_cond_init(&g_loop.done, NULL);
        v->se = fuse_session_new(&args, &view_ops, sizeof(view_ops), v);
        if (!v->se) {
                log_error("Failed to create the FUSE session");
                return -ENOMEM;
        }
        g_loop.se = v->se;
        fuse_readers_init();
        passthrough_setup(v, fuse_fd);
        /* The inherited descriptor, through our own read/writev so that the
         * INIT reply can carry flags libfuse 3.14 does not know. */
        if (fuse_session_custom_io(v->se, &view_io, fuse_fd) != 0) {
                log_error("Failed to use /dev/fuse descriptor %d", fuse_fd);
                return -EIO;
        }
        if (v->takeover) {
                r = replay_init(v, v->se);
                if (r < 0)
                        return r;
                g_loop.init_saved = true;
        }
        r = control_start(v);
        if (r < 0)
                return r;

        /* Threads start with the stop signals blocked; the main thread waits. */
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &set, &old);
        /* Before any thread of ours reads the device: the kernel resends
         * every request read and not answered on it, and one our threads had
         * read already would be handled twice (a RELEASE beside its READ). */
        if (v->takeover)
                send_resend(fuse_fd);
        tids = calloc(v->cfg->threads, sizeof(*tids));
        if (!tids)
                return -ENOMEM;
        for (unsigned i = 0; i < v->cfg->threads; i++) {
                if (pthread_create(&tids[i], NULL, worker_thread, &g_loop) != 0) {
                        log_error("Failed to start FUSE thread %u", i);
                        break;
                }
                pthread_detach(tids[i]);
                g_loop.running++;
        }
        if (pthread_create(&hoard, NULL, hoard_thread, v) == 0)
                pthread_detach(hoard);
        view_link_rtt_start(v);
        if (v->ready_fd >= 0) {
                if (write(v->ready_fd, "R", 1) < 0)
                        log_warn("Failed to tell the holder we serve: %m, ignoring");
                close(v->ready_fd);
        }

        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
        signal(SIGHUP, on_signal);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_mutex_lock(&g_loop.lock);
        while (g_loop.running && !stop_signal) {
                struct timespec ts;

                deadline_from_now(&ts, CLOCK_REALTIME, 200);
                pthread_cond_timedwait(&g_loop.done, &g_loop.lock, &ts);
        }
        pthread_mutex_unlock(&g_loop.lock);
        if (stop_signal)
                log_info("Stopping on signal %d", (int)stop_signal);
        else
                log_info("The FUSE connection ended (unmounted)");
        control_stop(v);
        /* The FUSE threads may be blocked in read(): exit without joining.
         * The store is consistent at every commit, nothing to flush. */
        free(tids);
        return stop_signal ? 1 : 0;
}

static void *hoard_thread(void *arg)
{
        struct view *v = arg;
        uint64_t interval = v->cfg->hoard_interval_ms;

        /* Pins taken back after the index was made anew, or whose rows went
         * with another mount's numbers: their files have no rows, so they
         * are walked (marked, and fetched if need be) at once. */
        if (store_pins_restored(v->store) || v->walk_pins_now)
                pin_walk_all(v);
        if (!interval)
                return NULL;
        for (;;) {
                struct timespec ts = { (time_t)(interval / 1000),
                                       (long)(interval % 1000) * 1000000 };

                nanosleep(&ts, NULL);
                pin_walk_all(v);
        }
        return NULL;
}
