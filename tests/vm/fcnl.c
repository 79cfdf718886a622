// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fcnl.c: a raw generic netlink client of fcache.ko for the VM tests.
 *
 * It speaks the protocol of kmod/uapi/fcache_netlink.h directly (no libnl)
 * and exposes what the fcachectl grammar does not: memory and session pins,
 * pin ids, limits, FLUSH_ALL mount lists, and per-file loops for the
 * benchmark.  Results are key=value lines; a failure prints error=ERRNO
 * and message=EXTACK and exits 1.
 *
 *   fcnl [-m] [-s] [-r] [-n] [-h] [-k SECONDS] CMD [PATH...]
 *   CMD: query flush flush-volume flush-all prefetch pin unpin pin-list
 *        limits limits-set family
 *        bench-query|bench-pin|bench-unpin|bench-flush DIR  (every file)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../kmod/uapi/fcache_netlink.h"

#define BUFSZ 65536

static int sock = -1;
static uint16_t family;
static uint32_t seqno = 1;
static const char *names[FCACHE_A_MAX + 1] = {
        [FCACHE_A_JOB] = "job", [FCACHE_A_ERROR] = "job_error",
        [FCACHE_A_FSTYPE] = "fs_type", [FCACHE_A_FILE_SIZE] = "bytes",
        [FCACHE_A_PAGES_TOTAL] = "pages_total", [FCACHE_A_PAGES_CACHED] = "pages_cached",
        [FCACHE_A_PAGES_DIRTY] = "pages_dirty", [FCACHE_A_PAGES_WRITEBACK] = "pages_writeback",
        [FCACHE_A_PAGES_EVICTED] = "pages_evicted", [FCACHE_A_PAGES_UNSTABLE] = "pages_unstable",
        [FCACHE_A_PAGES_DROPPED] = "pages_dropped", [FCACHE_A_PAGES_HELD] = "pages_held",
        [FCACHE_A_PAGES_STALE] = "pages_stale", [FCACHE_A_BYTES] = "bytes_read",
        [FCACHE_A_FILES] = "files", [FCACHE_A_DENTRIES] = "dentries",
        [FCACHE_A_SUPERS] = "supers", [FCACHE_A_PINNED] = "pinned",
        [FCACHE_A_COOKIE] = "cookie", [FCACHE_A_COOKIE_USERS] = "cookie_users",
        [FCACHE_A_INO] = "ino", [FCACHE_A_DEV] = "dev", [FCACHE_A_PATH] = "path",
        [FCACHE_A_UID] = "uid", [FCACHE_A_PIN_ID] = "pin_id",
        [FCACHE_A_PIN_BUDGET] = "pin_budget", [FCACHE_A_PIN_USED] = "pin_used",
        [FCACHE_A_PIN_MAX] = "pin_max", [FCACHE_A_PIN_COUNT] = "pin_count",
        [FCACHE_A_JOB_MAX] = "job_max", [FCACHE_A_REPIN_MS] = "repin_ms",
        [FCACHE_A_FILES_PINNED] = "files_pinned", [FCACHE_A_DELEG_HELD] = "deleg_held",
        [FCACHE_A_DELEG_RETURNED] = "deleg_returned", [FCACHE_A_DELEG_AT_CLOSE] = "deleg_at_close",
};

struct msg {
        struct nlmsghdr nh;
        struct genlmsghdr gh;
        char attrs[4096];
};

static void put_attr(struct msg *m, uint16_t type, const void *data, size_t len)
{
        struct nlattr *a = (struct nlattr *)((char *)m + NLMSG_ALIGN(m->nh.nlmsg_len));

        a->nla_type = type;
        a->nla_len = NLA_HDRLEN + len;
        memcpy((char *)a + NLA_HDRLEN, data, len);
        m->nh.nlmsg_len = NLMSG_ALIGN(m->nh.nlmsg_len) + NLA_ALIGN(a->nla_len);
}

static void put_u32(struct msg *m, uint16_t type, uint32_t v) { put_attr(m, type, &v, 4); }
static void put_u64(struct msg *m, uint16_t type, uint64_t v) { put_attr(m, type, &v, 8); }

static void msg_init(struct msg *m, uint16_t fam, uint8_t cmd, uint16_t flags)
{
        memset(m, 0, sizeof(m->nh) + sizeof(m->gh));
        m->nh.nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN);
        m->nh.nlmsg_type = fam;
        m->nh.nlmsg_flags = NLM_F_REQUEST | flags;
        m->nh.nlmsg_seq = seqno++;
        m->gh.cmd = cmd;
        m->gh.version = FCACHE_GENL_VERSION;
}

static int nl_send(struct msg *m)
{
        struct sockaddr_nl sa = { .nl_family = AF_NETLINK };

        if (sendto(sock, m, m->nh.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return -errno;
        return 0;
}

typedef void (*attr_fn)(struct nlattr *a, void *arg);

static void for_attrs(struct nlmsghdr *nh, attr_fn fn, void *arg)
{
        struct nlattr *a = (struct nlattr *)((char *)NLMSG_DATA(nh) + GENL_HDRLEN);
        int rem = nh->nlmsg_len - NLMSG_LENGTH(GENL_HDRLEN);

        while (rem >= (int)NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= rem) {
                fn(a, arg);
                rem -= NLA_ALIGN(a->nla_len);
                a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len));
        }
}

static const char *extack_msg(struct nlmsghdr *nh)
{
        struct nlmsgerr *e = NLMSG_DATA(nh);
        size_t off = sizeof(*e);
        struct nlattr *a;

        if (!(nh->nlmsg_flags & NLM_F_ACK_TLVS))
                return "";
        if (!(nh->nlmsg_flags & NLM_F_CAPPED))
                off += e->msg.nlmsg_len - sizeof(e->msg);
        a = (struct nlattr *)((char *)e + NLMSG_ALIGN(off));
        while ((char *)a + NLA_HDRLEN <= (char *)nh + nh->nlmsg_len && a->nla_len >= NLA_HDRLEN) {
                if (a->nla_type == NLMSGERR_ATTR_MSG)
                        return (const char *)a + NLA_HDRLEN;
                a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len));
        }
        return "";
}

struct reply {
        uint64_t job;
        int job_error;
        int done;
        int quiet;
        uint64_t val[FCACHE_A_MAX + 1];
};

static void print_attr(struct nlattr *a, void *arg)
{
        struct reply *r = arg;
        uint16_t t = a->nla_type & NLA_TYPE_MASK;
        void *d = (char *)a + NLA_HDRLEN;
        int len = a->nla_len - NLA_HDRLEN;
        uint64_t v = 0;

        if (t > FCACHE_A_MAX || !names[t])
                return;
        if (t == FCACHE_A_FSTYPE || t == FCACHE_A_PATH) {
                if (!r->quiet)
                        printf("%s=%.*s\n", names[t], len, (char *)d);
                return;
        }
        if (len == 8)
                memcpy(&v, d, 8);
        else if (len == 4) {
                uint32_t w;
                memcpy(&w, d, 4);
                v = t == FCACHE_A_ERROR ? (uint64_t)(int64_t)(int32_t)w : w;
        }
        r->val[t] = v;
        if (t == FCACHE_A_JOB)
                r->job = v;
        if (t == FCACHE_A_ERROR)
                r->job_error = (int)(int64_t)v;
        if (!r->quiet && t != FCACHE_A_JOB && t != FCACHE_A_ERROR)
                printf("%s=%lld\n", names[t], (long long)v);
}

/*
 * Wait for the reply to @seq (or the end of a dump); if it names a job,
 * wait for its FCACHE_CMD_DONE too.  Returns 0 or -errno.
 */
static int nl_wait(uint32_t seq, struct reply *r, int dump)
{
        static char buf[BUFSZ];
        int got_reply = 0;

        for (;;) {
                ssize_t n = recv(sock, buf, sizeof(buf), 0);
                struct nlmsghdr *nh;

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                for (nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, n); nh = NLMSG_NEXT(nh, n)) {
                        if (nh->nlmsg_seq != seq)
                                continue;
                        if (nh->nlmsg_type == NLMSG_ERROR) {
                                struct nlmsgerr *e = NLMSG_DATA(nh);
                                if (e->error) {
                                        const char *m = extack_msg(nh);
                                        if (!r->quiet || *m)
                                                printf("message=%s\n", m);
                                        return e->error;
                                }
                                continue;
                        }
                        if (nh->nlmsg_type == NLMSG_DONE)
                                return 0;
                        if (nh->nlmsg_type != family)
                                continue;
                        struct genlmsghdr *gh = NLMSG_DATA(nh);
                        if (gh->cmd == FCACHE_CMD_DONE) {
                                for_attrs(nh, print_attr, r);
                                if (!r->quiet)
                                        printf("async_job=%llu\n", (unsigned long long)r->job);
                                if (r->job_error && !r->quiet)
                                        printf("message=job failed\n");
                                return r->job_error;
                        }
                        for_attrs(nh, print_attr, r);
                        if (dump) {
                                if (!r->quiet)
                                        printf("--\n");
                                continue;
                        }
                        got_reply = 1;
                }
                if (got_reply && !r->job)
                        return 0;
        }
}

static int resolve_family(void)
{
        struct msg m;
        struct reply r = { .quiet = 1 };
        static char buf[BUFSZ];

        msg_init(&m, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 0);
        m.gh.version = 2;
        put_attr(&m, CTRL_ATTR_FAMILY_NAME, FCACHE_GENL_NAME, sizeof(FCACHE_GENL_NAME));
        if (nl_send(&m) < 0)
                return -errno;
        ssize_t n = recv(sock, buf, sizeof(buf), 0);
        if (n < 0)
                return -errno;
        struct nlmsghdr *nh = (struct nlmsghdr *)buf;
        if (nh->nlmsg_type == NLMSG_ERROR)
                return ((struct nlmsgerr *)NLMSG_DATA(nh))->error;
        struct nlattr *a = (struct nlattr *)((char *)NLMSG_DATA(nh) + GENL_HDRLEN);
        int rem = nh->nlmsg_len - NLMSG_LENGTH(GENL_HDRLEN);
        while (rem >= (int)NLA_HDRLEN) {
                if (a->nla_type == CTRL_ATTR_FAMILY_ID) {
                        memcpy(&family, (char *)a + NLA_HDRLEN, 2);
                        return 0;
                }
                rem -= NLA_ALIGN(a->nla_len);
                a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len));
        }
        (void)r;
        return -ENOENT;
}

static int open_sock(void)
{
        struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
        int one = 1;

        sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
        if (sock < 0)
                return -errno;
        setsockopt(sock, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
        setsockopt(sock, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
        if (bind(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return -errno;
        return resolve_family();
}

static uint32_t flags;
static int nofollow, quiet;

static int cmd_of(const char *s)
{
        static const struct { const char *n; int c; } t[] = {
                { "query", FCACHE_CMD_QUERY }, { "flush", FCACHE_CMD_FLUSH },
                { "flush-volume", FCACHE_CMD_FLUSH_VOLUME }, { "flush-all", FCACHE_CMD_FLUSH_ALL },
                { "prefetch", FCACHE_CMD_PREFETCH }, { "pin", FCACHE_CMD_PIN },
                { "unpin", FCACHE_CMD_UNPIN }, { "pin-list", FCACHE_CMD_PIN_LIST },
                { "limits", FCACHE_CMD_LIMITS_GET }, { "limits-set", FCACHE_CMD_LIMITS_SET },
        };
        for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
                if (!strcmp(s, t[i].n))
                        return t[i].c;
        return -1;
}

/* one request on one O_PATH target (fd < 0: none) */
static int request(int cmd, int fd, struct msg *extra, int q)
{
        struct msg m;
        struct reply r = { .quiet = q };

        msg_init(&m, family, cmd, cmd == FCACHE_CMD_PIN_LIST ? NLM_F_DUMP : 0);
        if (fd >= 0)
                put_u32(&m, FCACHE_A_FD, fd);
        if (flags)
                put_u32(&m, FCACHE_A_FLAGS, flags);
        if (extra) {
                size_t len = extra->nh.nlmsg_len - NLMSG_LENGTH(GENL_HDRLEN);
                memcpy((char *)&m + m.nh.nlmsg_len, extra->attrs, len);
                m.nh.nlmsg_len += len;
        }
        int err = nl_send(&m);
        if (err)
                return err;
        return nl_wait(m.nh.nlmsg_seq, &r, cmd == FCACHE_CMD_PIN_LIST);
}

static int open_target(const char *path)
{
        return open(path, O_PATH | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
}

static double now(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* every regular file of a tree, one request each */
static int bench_dir(int cmd, int dirfd, uint64_t *files, uint64_t *failed)
{
        DIR *d = fdopendir(dirfd);
        struct dirent *e;

        if (!d)
                return -errno;
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
                        continue;
                if (e->d_type == DT_DIR) {
                        int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        if (sub >= 0)
                                bench_dir(cmd, sub, files, failed);
                        continue;
                }
                int fd = openat(dirfd, e->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0) {
                        (*failed)++;
                        continue;
                }
                if (request(cmd, fd, NULL, 1))
                        (*failed)++;
                (*files)++;
                close(fd);
        }
        closedir(d);
        return 0;
}

static int bench(int cmd, const char *dir)
{
        uint64_t files = 0, failed = 0;
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        double t0 = now();

        if (fd < 0)
                return -errno;
        bench_dir(cmd, fd, &files, &failed);
        double dt = now() - t0;
        printf("files=%llu\nfailed=%llu\nseconds=%.3f\nops_per_s=%.0f\n",
               (unsigned long long)files, (unsigned long long)failed, dt, files / dt);
        return failed ? -EIO : 0;
}

int main(int argc, char **argv)
{
        int opt, err = 0, cmd;
        struct msg extra;

        while ((opt = getopt(argc, argv, "msrnhq")) != -1) {
                switch (opt) {
                case 'm': flags |= FCACHE_FLAG_MEMORY; break;
                case 's': flags |= FCACHE_FLAG_SESSION; break;
                case 'r': flags |= FCACHE_FLAG_RECURSIVE; break;
                case 'n': flags |= FCACHE_FLAG_DRY_RUN; break;
                case 'h': nofollow = 1; break;
                case 'q': quiet = 1; break;
                default: return 2;
                }
        }
        if (optind >= argc) {
                fprintf(stderr, "usage: fcnl [-msrnhq] CMD [PATH|key=value...]\n");
                return 2;
        }
        err = open_sock();
        if (err) {
                printf("error=%d\nmessage=family %s not found: %s\n", -err, FCACHE_GENL_NAME,
                       strerror(-err));
                return 1;
        }
        const char *name = argv[optind++];
        if (!strcmp(name, "family")) {
                printf("family_id=%u\n", family);
                return 0;
        }
        if (!strncmp(name, "bench-", 6)) {
                cmd = cmd_of(name + 6);
                if (cmd < 0 || optind >= argc)
                        return 2;
                err = bench(cmd, argv[optind]);
                goto out;
        }
        cmd = cmd_of(name);
        if (cmd < 0) {
                fprintf(stderr, "fcnl: unknown command %s\n", name);
                return 2;
        }
        memset(&extra, 0, sizeof(extra.nh) + sizeof(extra.gh));
        extra.nh.nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN);
        if (cmd == FCACHE_CMD_LIMITS_SET || cmd == FCACHE_CMD_LIMITS_GET ||
            cmd == FCACHE_CMD_PIN_LIST) {
                for (; optind < argc; optind++) {
                        char *eq = strchr(argv[optind], '=');
                        if (!eq)
                                return 2;
                        unsigned long long v = strtoull(eq + 1, NULL, 0);
                        *eq = 0;
                        if (!strcmp(argv[optind], "pin_budget"))
                                put_u64(&extra, FCACHE_A_PIN_BUDGET, v);
                        else if (!strcmp(argv[optind], "pin_max"))
                                put_u32(&extra, FCACHE_A_PIN_MAX, v);
                        else if (!strcmp(argv[optind], "job_max"))
                                put_u32(&extra, FCACHE_A_JOB_MAX, v);
                        else if (!strcmp(argv[optind], "repin_ms"))
                                put_u32(&extra, FCACHE_A_REPIN_MS, v);
                        else
                                return 2;
                }
                err = request(cmd, -1, &extra, quiet);
                goto out;
        }
        if (cmd == FCACHE_CMD_UNPIN && optind < argc && !strncmp(argv[optind], "id=", 3)) {
                put_u64(&extra, FCACHE_A_PIN_ID, strtoull(argv[optind] + 3, NULL, 0));
                err = request(cmd, -1, &extra, quiet);
                goto out;
        }
        if (cmd == FCACHE_CMD_FLUSH_ALL && optind + 1 < argc) {
                /* flush-all MOUNT...: a nested list of mount descriptors */
                struct nlattr *nest = (struct nlattr *)((char *)&extra + extra.nh.nlmsg_len);
                nest->nla_type = FCACHE_A_MOUNTS | NLA_F_NESTED;
                extra.nh.nlmsg_len += NLA_HDRLEN;
                for (; optind < argc; optind++) {
                        int fd = open_target(argv[optind]);
                        if (fd < 0) {
                                printf("error=%d\nmessage=%s: %s\n", errno, argv[optind],
                                       strerror(errno));
                                return 1;
                        }
                        put_u32(&extra, FCACHE_A_FD, fd);
                }
                nest->nla_len = (char *)&extra + extra.nh.nlmsg_len - (char *)nest;
                err = request(cmd, -1, &extra, quiet);
                goto out;
        }
        if (optind >= argc) {
                fprintf(stderr, "fcnl: %s needs a path\n", name);
                return 2;
        }
        for (; optind < argc && !err; optind++) {
                int fd = open_target(argv[optind]);
                if (fd < 0) {
                        err = -errno;
                        printf("message=%s: %s\n", argv[optind], strerror(errno));
                        break;
                }
                err = request(cmd, fd, &extra, quiet);
                close(fd);
        }
out:
        if (err) {
                printf("error=%d\n", -err);
                return 1;
        }
        return 0;
}
