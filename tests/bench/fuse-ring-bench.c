/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuse-ring-bench: what one open+close of a FUSE file costs when the
 * server takes its requests over io_uring (FUSE_OVER_IO_URING, Linux 6.14+)
 * rather than read(2)/writev(2) on /dev/fuse.
 *
 *     fuse-ring-bench dev|ring COUNT [MOUNTPOINT]
 *
 * mounts a raw FUSE server (no libfuse) with one file, "f", at MOUNTPOINT
 * (a fresh directory under /tmp by default), opens and closes it COUNT times
 * and prints "MODE COUNT SECONDS CPU_SECONDS dev=N ring=N" (CPU of the
 * whole process: client and server; N: requests served each way in the
 * timed loop).  Names and attributes are cached for an hour, FLUSH
 * is answered ENOSYS once, so each open+close costs the kernel exactly an
 * OPEN and a RELEASE, as a warm open of a pinned file in the view does.
 *
 * In ring mode the kernel wants one queue per possible CPU, each with at
 * least one registered entry, before it routes requests to the ring; FORGET
 * and INTERRUPT stay on /dev/fuse, so a /dev/fuse thread runs in both modes.
 * Needs root and /sys/module/fuse/parameters/enable_uring = Y for ring mode.
 * RING_NO_PIN in the environment leaves the ring threads unpinned, DEV_PIN
 * puts the client and the /dev/fuse thread on CPU 0.
 * Driver: tests/bench/fuse-ring-bench.py.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* The io_uring part of the FUSE protocol (include/uapi/linux/fuse.h of
 * Linux 6.14+); Debian 12's headers predate it. */
#define RING_INIT_FLAG2 (1u << (41 - 32))   /* FUSE_OVER_IO_URING in flags2 */
#define RING_CMD_REGISTER 1
#define RING_CMD_COMMIT_AND_FETCH 2

struct ring_ent_in_out {
        uint64_t flags;
        uint64_t commit_id;     /* echoed in the commit of this request */
        uint32_t payload_sz;
        uint32_t padding;
        uint64_t reserved;
};

struct ring_req_header {
        char in_out[128];       /* fuse_in_header / fuse_out_header */
        char op_in[128];        /* the opcode's fixed-size argument */
        struct ring_ent_in_out ent;
};

struct ring_cmd_req {           /* the SQE128's command area */
        uint64_t flags;
        uint64_t commit_id;
        uint16_t qid;
        uint8_t padding[6];
};

#define ROOT_INO 1
#define FILE_INO 2
#define QUEUE_DEPTH 4
/* At least the kernel's max(max_write, max_pages * page size). */
#define PAYLOAD_SZ (1024 * 1024)
#define DEV_BUF_SZ (PAYLOAD_SZ + 4096)

static int g_dev = -1;
static bool g_ring_mode;
/* Requests served each way, to show where they went. */
static unsigned long g_dev_requests, g_ring_requests;
static unsigned g_queues_registered;

static void die(const char *what)
{
        fprintf(stderr, "fuse-ring-bench: %s: %s\n", what, strerror(errno));
        exit(1);
}

static void fill_attr(struct fuse_attr *a, uint64_t ino)
{
        memset(a, 0, sizeof(*a));
        a->ino = ino;
        a->mode = ino == ROOT_INO ? S_IFDIR | 0755 : S_IFREG | 0644;
        a->nlink = ino == ROOT_INO ? 2 : 1;
        a->size = ino == ROOT_INO ? 0 : 4096;
        a->blksize = 4096;
}

/*
 * Answers one request: the reply's argument is written to out (at most
 * PAYLOAD_SZ bytes).  Returns the argument's length, -errno for an error
 * reply, or 1 << 30 for a request that takes no reply.
 */
#define NO_REPLY (1 << 30)
static int answer(const struct fuse_in_header *in, const void *arg, void *out)
{
        switch (in->opcode) {
        case FUSE_LOOKUP: {
                struct fuse_entry_out *e = out;

                if (in->nodeid != ROOT_INO || strcmp(arg, "f") != 0)
                        return -ENOENT;
                memset(e, 0, sizeof(*e));
                e->nodeid = FILE_INO;
                e->entry_valid = 3600;
                e->attr_valid = 3600;
                fill_attr(&e->attr, FILE_INO);
                return sizeof(*e);
        }
        case FUSE_GETATTR: {
                struct fuse_attr_out *a = out;

                memset(a, 0, sizeof(*a));
                a->attr_valid = 3600;
                fill_attr(&a->attr, in->nodeid);
                return sizeof(*a);
        }
        case FUSE_OPEN:
        case FUSE_OPENDIR: {
                struct fuse_open_out *o = out;

                memset(o, 0, sizeof(*o));
                o->fh = 7;
                o->open_flags = FOPEN_KEEP_CACHE;
                return sizeof(*o);
        }
        case FUSE_RELEASE:
        case FUSE_RELEASEDIR:
                return 0;
        case FUSE_FORGET:
        case FUSE_BATCH_FORGET:
                return NO_REPLY;
        default:
                return -ENOSYS;
        }
}

static int init_reply(const struct fuse_in_header *in, const struct fuse_init_in *ii)
{
        struct {
                struct fuse_out_header h;
                struct fuse_init_out o;
        } r;

        memset(&r, 0, sizeof(r));
        r.h.len = sizeof(r);
        r.h.unique = in->unique;
        r.o.major = FUSE_KERNEL_VERSION;
        r.o.minor = ii->minor < FUSE_KERNEL_MINOR_VERSION ? ii->minor : FUSE_KERNEL_MINOR_VERSION;
        r.o.max_readahead = ii->max_readahead;
        r.o.flags = FUSE_INIT_EXT | FUSE_ASYNC_READ | FUSE_BIG_WRITES;
        r.o.max_write = 128 * 1024;
        r.o.max_background = 64;
        r.o.congestion_threshold = 48;
        r.o.time_gran = 1;
        if (g_ring_mode) {
                if (!(ii->flags & FUSE_INIT_EXT) || !(ii->flags2 & RING_INIT_FLAG2)) {
                        fprintf(stderr, "fuse-ring-bench: the kernel does not offer "
                                "FUSE_OVER_IO_URING (enable_uring = N?)\n");
                        exit(2);
                }
                r.o.flags2 = RING_INIT_FLAG2;
        }
        if (write(g_dev, &r, sizeof(r)) != (ssize_t)sizeof(r))
                die("INIT reply");
        return 0;
}

static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_init_cond = PTHREAD_COND_INITIALIZER;
static bool g_init_done;

/* DEV_PIN set: the client and the /dev/fuse thread run on CPU 0, where a
 * ring request of the client goes to queue 0, served on CPU 0 too: client
 * and server share one CPU both ways, to tell the ring's saving from the
 * saving of staying on one CPU. */
static void pin_to_cpu0(void)
{
        cpu_set_t cpus;

        CPU_ZERO(&cpus);
        CPU_SET(0, &cpus);
        if (getenv("DEV_PIN") != NULL)
                sched_setaffinity(0, sizeof(cpus), &cpus);
}

static void *dev_thread(void *unused)
{
        char *buf = malloc(DEV_BUF_SZ);
        char *out = malloc(PAYLOAD_SZ);

        (void)unused;
        pin_to_cpu0();
        if (!buf || !out)
                die("malloc");
        for (;;) {
                ssize_t n = read(g_dev, buf, DEV_BUF_SZ);
                const struct fuse_in_header *in = (const void *)buf;
                struct fuse_out_header h;
                struct iovec iov[2];
                int res;

                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN || errno == ENOENT)
                                continue;
                        return NULL;    /* ENODEV: unmounted */
                }
                if (in->opcode == FUSE_INIT) {
                        init_reply(in, (const void *)(in + 1));
                        pthread_mutex_lock(&g_init_lock);
                        g_init_done = true;
                        pthread_cond_broadcast(&g_init_cond);
                        pthread_mutex_unlock(&g_init_lock);
                        continue;
                }
                __atomic_add_fetch(&g_dev_requests, 1, __ATOMIC_RELAXED);
                res = answer(in, in + 1, out);
                if (res == NO_REPLY)
                        continue;
                h.unique = in->unique;
                h.error = res < 0 ? res : 0;
                h.len = sizeof(h) + (res > 0 ? res : 0);
                iov[0] = (struct iovec){ &h, sizeof(h) };
                iov[1] = (struct iovec){ out, res > 0 ? (size_t)res : 0 };
                if (writev(g_dev, iov, 2) < 0 && errno != ENOENT)
                        die("reply on /dev/fuse");
        }
}

struct ring_ent {
        struct ring_req_header *hdr;
        char *payload;
        struct iovec iov[2];
        uint64_t commit_id;
};

struct ring_queue {
        unsigned qid;
        struct io_uring ring;
        struct ring_ent ent[QUEUE_DEPTH];
};

static void prep_cmd(struct ring_queue *q, struct ring_ent *e, unsigned op)
{
        struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
        struct ring_cmd_req *cmd;

        if (!sqe) {
                errno = EBUSY;
                die("no free SQE");
        }
        memset(sqe, 0, 128);
        sqe->opcode = IORING_OP_URING_CMD;
        sqe->fd = g_dev;
        sqe->cmd_op = op;
        io_uring_sqe_set_data(sqe, e);
        if (op == RING_CMD_REGISTER) {
                sqe->addr = (uint64_t)(uintptr_t)e->iov;
                sqe->len = 2;
        }
        cmd = (void *)sqe->cmd;
        cmd->qid = q->qid;
        cmd->commit_id = op == RING_CMD_COMMIT_AND_FETCH ? e->commit_id : 0;
}

static void ring_answer(struct ring_queue *q, struct ring_ent *e)
{
        struct fuse_in_header in;
        struct fuse_out_header *out = (void *)e->hdr->in_out;
        const void *arg;
        char name[256];
        int res;

        memcpy(&in, e->hdr->in_out, sizeof(in));
        __atomic_add_fetch(&g_ring_requests, 1, __ATOMIC_RELAXED);
        e->commit_id = e->hdr->ent.commit_id;
        /* The opcode's fixed argument is in op_in, the rest (a LOOKUP's
         * name) in the payload. */
        arg = e->hdr->op_in;
        if (in.opcode == FUSE_LOOKUP) {
                size_t len = e->hdr->ent.payload_sz < sizeof(name) - 1 ?
                             e->hdr->ent.payload_sz : sizeof(name) - 1;

                memcpy(name, e->payload, len);
                name[len] = 0;
                arg = name;
        }
        res = answer(&in, arg, e->payload);
        if (res == NO_REPLY)
                res = -ENOSYS;  /* the kernel sends no FORGET here */
        memset(out, 0, sizeof(*out));
        out->unique = in.unique;
        out->error = res < 0 ? res : 0;
        e->hdr->ent.payload_sz = res > 0 ? res : 0;
        prep_cmd(q, e, RING_CMD_COMMIT_AND_FETCH);
}

static void *ring_thread(void *arg)
{
        struct ring_queue *q = arg;
        struct io_uring_params p = { .flags = IORING_SETUP_SQE128 };
        cpu_set_t cpus;
        int rc;

        CPU_ZERO(&cpus);
        CPU_SET(q->qid, &cpus);
        /* The kernel queues a request on its sender's CPU: serve it there. */
        if (getenv("RING_NO_PIN") == NULL)
                sched_setaffinity(0, sizeof(cpus), &cpus);
        rc = io_uring_queue_init_params(QUEUE_DEPTH * 2, &q->ring, &p);
        if (rc < 0) {
                errno = -rc;
                die("io_uring_queue_init_params");
        }
        for (unsigned i = 0; i < QUEUE_DEPTH; i++) {
                struct ring_ent *e = &q->ent[i];

                e->hdr = aligned_alloc(4096, 4096);
                e->payload = aligned_alloc(4096, PAYLOAD_SZ);
                if (!e->hdr || !e->payload)
                        die("aligned_alloc");
                memset(e->hdr, 0, 4096);
                e->iov[0] = (struct iovec){ e->hdr, sizeof(*e->hdr) };
                e->iov[1] = (struct iovec){ e->payload, PAYLOAD_SZ };
                prep_cmd(q, e, RING_CMD_REGISTER);
        }
        rc = io_uring_submit(&q->ring);
        if (rc != QUEUE_DEPTH) {
                errno = rc < 0 ? -rc : EIO;
                die("registering the queue's entries");
        }
        __atomic_add_fetch(&g_queues_registered, 1, __ATOMIC_RELEASE);
        for (;;) {
                struct io_uring_cqe *cqe;
                unsigned head, seen = 0;

                rc = io_uring_submit_and_wait(&q->ring, 1);
                if (rc < 0 && rc != -EINTR) {
                        errno = -rc;
                        die("io_uring_submit_and_wait");
                }
                io_uring_for_each_cqe(&q->ring, head, cqe) {
                        struct ring_ent *e = io_uring_cqe_get_data(cqe);

                        seen++;
                        if (cqe->res == -ENOTCONN || cqe->res == -ENODEV)
                                return NULL;    /* unmounted */
                        if (cqe->res < 0) {
                                errno = -cqe->res;
                                die("ring command");
                        }
                        ring_answer(q, e);
                }
                io_uring_cq_advance(&q->ring, seen);
        }
}

static double now(clockid_t clock)
{
        struct timespec ts;

        clock_gettime(clock, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
        char dir[] = "/tmp/fuse-ring-bench.XXXXXX";
        const char *mnt;
        char opts[128], path[4200];
        long count;
        pthread_t tid;
        double t0, c0, t1, c1;
        int fd;

        if (argc < 3 || (strcmp(argv[1], "dev") != 0 && strcmp(argv[1], "ring") != 0)) {
                fprintf(stderr, "usage: fuse-ring-bench dev|ring COUNT [MOUNTPOINT]\n");
                return 64;
        }
        g_ring_mode = strcmp(argv[1], "ring") == 0;
        count = atol(argv[2]);
        mnt = argc > 3 ? argv[3] : mkdtemp(dir);
        if (!mnt)
                die("mkdtemp");
        g_dev = open("/dev/fuse", O_RDWR | O_CLOEXEC);
        if (g_dev < 0)
                die("/dev/fuse");
        snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0", g_dev);
        if (mount("fuse-ring-bench", mnt, "fuse", MS_NOSUID | MS_NODEV, opts) < 0)
                die("mount");
        if (pthread_create(&tid, NULL, dev_thread, NULL) != 0)
                die("pthread_create");
        pthread_mutex_lock(&g_init_lock);
        while (!g_init_done)
                pthread_cond_wait(&g_init_cond, &g_init_lock);
        pthread_mutex_unlock(&g_init_lock);
        if (g_ring_mode) {
                /* Registering before the INIT reply is processed fails;
                 * the reply above was written synchronously. */
                long ncpu = sysconf(_SC_NPROCESSORS_CONF);

                for (long i = 0; i < ncpu; i++) {
                        struct ring_queue *q = calloc(1, sizeof(*q));

                        if (!q)
                                die("calloc");
                        q->qid = i;
                        if (pthread_create(&tid, NULL, ring_thread, q) != 0)
                                die("pthread_create");
                }
                while (__atomic_load_n(&g_queues_registered, __ATOMIC_ACQUIRE) < ncpu)
                        usleep(1000);
        }
        snprintf(path, sizeof(path), "%s/f", mnt);
        pin_to_cpu0();
        /* Warm up: the LOOKUP, FLUSH's ENOSYS and (ring) the ring becoming
         * ready happen here, not in the timed loop. */
        for (int i = 0; i < 1000; i++) {
                fd = open(path, O_RDONLY);
                if (fd < 0)
                        die(path);
                close(fd);
        }
        unsigned long dev0 = g_dev_requests, ring0 = g_ring_requests;
        t0 = now(CLOCK_MONOTONIC);
        c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        for (long i = 0; i < count; i++) {
                fd = open(path, O_RDONLY);
                if (fd < 0)
                        die(path);
                close(fd);
        }
        t1 = now(CLOCK_MONOTONIC);
        c1 = now(CLOCK_PROCESS_CPUTIME_ID);
        printf("%s %ld %.4f %.4f dev=%lu ring=%lu\n", argv[1], count, t1 - t0, c1 - c0,
               g_dev_requests - dev0, g_ring_requests - ring0);
        fflush(stdout);
        if (umount2(mnt, MNT_DETACH) < 0)
                die("umount");
        if (argc <= 3)
                rmdir(mnt);
        _exit(0);
}
