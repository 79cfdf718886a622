/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kmod-conn.c: the generic netlink client of fcache.ko (kmod-conn.h): one
 * socket per connection, requests built by hand, replies parsed into a
 * flat table of attributes.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kmod-conn.h"

void kmsg_init(struct kmsg *m, uint16_t family, uint8_t cmd, uint16_t flags)
{
        struct genlmsghdr *g;

        memset(m->raw, 0, NLMSG_LENGTH(GENL_HDRLEN));
        m->nh.nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN);
        m->nh.nlmsg_type = family;
        m->nh.nlmsg_flags = NLM_F_REQUEST | flags;
        g = NLMSG_DATA(&m->nh);
        g->cmd = cmd;
        g->version = family == GENL_ID_CTRL ? 2 : FCACHE_GENL_VERSION;
}

struct nlattr *kmsg_put(struct kmsg *m, uint16_t type, const void *data, size_t len)
{
        struct nlattr *a = (struct nlattr *)(m->raw + NLMSG_ALIGN(m->nh.nlmsg_len));

        if (NLMSG_ALIGN(m->nh.nlmsg_len) + NLA_HDRLEN + NLA_ALIGN(len) > sizeof(m->raw))
                return NULL;
        a->nla_type = type;
        a->nla_len = (uint16_t)(NLA_HDRLEN + len);
        if (len)
                memcpy((char *)a + NLA_HDRLEN, data, len);
        m->nh.nlmsg_len = NLMSG_ALIGN(m->nh.nlmsg_len) + NLA_ALIGN(a->nla_len);
        return a;
}

void kmsg_put_u32(struct kmsg *m, uint16_t type, uint32_t v)
{
        kmsg_put(m, type, &v, sizeof(v));
}

int kconn_send(struct kconn *c, struct kmsg *m)
{
        struct sockaddr_nl sa = { .nl_family = AF_NETLINK };

        m->nh.nlmsg_seq = ++c->seq;
        if (sendto(c->fd, m->raw, m->nh.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return -errno;
        return 0;
}

void kreply_attrs(struct kreply *r, const struct nlmsghdr *nh)
{
        const struct nlattr *a = (const struct nlattr *)((const char *)NLMSG_DATA(nh) + GENL_HDRLEN);
        int rem = (int)nh->nlmsg_len - NLMSG_LENGTH(GENL_HDRLEN);

        while (rem >= (int)NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= rem) {
                uint16_t t = a->nla_type & NLA_TYPE_MASK;
                const char *d = (const char *)a + NLA_HDRLEN;
                size_t len = a->nla_len - NLA_HDRLEN;

                if (t <= FCACHE_A_MAX) {
                        if (t == FCACHE_A_FSTYPE || t == FCACHE_A_PATH) {
                                char *dst = t == FCACHE_A_FSTYPE ? r->fstype : r->path;
                                size_t cap = t == FCACHE_A_FSTYPE ? sizeof(r->fstype)
                                                                  : sizeof(r->path);
                                size_t n = strnlen(d, len < cap ? len : cap - 1);
                                memcpy(dst, d, n);
                                dst[n] = '\0';
                        } else if (len == 8) {
                                memcpy(&r->v[t], d, 8);
                        } else if (len == 4) {
                                uint32_t w;
                                memcpy(&w, d, 4);
                                r->v[t] = t == FCACHE_A_ERROR ? (uint64_t)(int64_t)(int32_t)w : w;
                        }
                        r->has[t] = 1;
                }
                rem -= NLA_ALIGN(a->nla_len);
                a = (const struct nlattr *)((const char *)a + NLA_ALIGN(a->nla_len));
        }
}

static void extack_msg(const struct nlmsghdr *nh, char *out, size_t cap)
{
        const struct nlmsgerr *e = NLMSG_DATA(nh);
        size_t off = sizeof(*e);
        const struct nlattr *a;

        out[0] = '\0';
        if (!(nh->nlmsg_flags & NLM_F_ACK_TLVS))
                return;
        if (!(nh->nlmsg_flags & NLM_F_CAPPED))
                off += e->msg.nlmsg_len - sizeof(e->msg);
        a = (const struct nlattr *)((const char *)e + NLMSG_ALIGN(off));
        while ((const char *)a + NLA_HDRLEN <= (const char *)nh + nh->nlmsg_len &&
               a->nla_len >= NLA_HDRLEN) {
                if (a->nla_type == NLMSGERR_ATTR_MSG) {
                        snprintf(out, cap, "%s", (const char *)a + NLA_HDRLEN);
                        return;
                }
                a = (const struct nlattr *)((const char *)a + NLA_ALIGN(a->nla_len));
        }
}

/* NLMSG_OK without its signed/unsigned comparison (clang's -Wsign-compare) */
static bool knlmsg_ok(const struct nlmsghdr *nh, int len)
{
        return len >= (int)sizeof(*nh) && nh->nlmsg_len >= sizeof(*nh) &&
               nh->nlmsg_len <= (unsigned int)len;
}


int kconn_wait(struct kconn *c, struct kreply *r, kdump_fn dump, void *arg,
                      const volatile int *cancel)
{
        uint64_t job = 0;

        for (;;) {
                struct pollfd p = { .fd = c->fd, .events = POLLIN };
                int pr = poll(&p, 1, cancel ? 100 : -1);

                if (pr < 0 && errno != EINTR)
                        return -errno;
                if (cancel && *cancel)
                        return -ECANCELED;
                if (pr <= 0)
                        continue;
                ssize_t n = recv(c->fd, c->buf, KBUF_SIZE, MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return -errno;
                }
                int len = (int)n, got = 0;
                for (struct nlmsghdr *nh = (struct nlmsghdr *)c->buf; knlmsg_ok(nh, len);
                     nh = NLMSG_NEXT(nh, len)) {
                        if (nh->nlmsg_seq != c->seq)
                                continue;
                        if (nh->nlmsg_type == NLMSG_ERROR) {
                                const struct nlmsgerr *e = NLMSG_DATA(nh);
                                if (!e->error)
                                        continue;
                                extack_msg(nh, r->msg, sizeof(r->msg));
                                return e->error;
                        }
                        if (nh->nlmsg_type == NLMSG_DONE)
                                return 0;
                        if (nh->nlmsg_type != c->family)
                                continue;
                        const struct genlmsghdr *g = NLMSG_DATA(nh);
                        if (dump) {
                                struct kreply one;
                                memset(&one, 0, sizeof(one));
                                kreply_attrs(&one, nh);
                                dump(&one, arg);
                                continue;
                        }
                        kreply_attrs(r, nh);
                        /* a job's completion carries the whole result */
                        if (g->cmd == FCACHE_CMD_DONE) {
                                if (r->v[FCACHE_A_ERROR]) {
                                        snprintf(r->msg, sizeof(r->msg), "the module's job failed");
                                        return (int)(int64_t)r->v[FCACHE_A_ERROR];
                                }
                                return 0;
                        }
                        if (r->has[FCACHE_A_JOB] && !job)
                                job = r->v[FCACHE_A_JOB];
                        got = 1;
                }
                if (got && !job && !dump)
                        return 0;
        }
}

void kconn_close(struct kconn *c)
{
        if (c->fd >= 0)
                close(c->fd);
        free(c->buf);
        c->fd = -1;
        c->buf = NULL;
}

int kconn_open(struct kconn *c)
{
        struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
        struct kmsg m;
        struct kreply r;
        int one = 1, err;

        c->fd = -1;
        c->seq = 0;
        c->family = GENL_ID_CTRL;
        c->buf = malloc(KBUF_SIZE);
        if (!c->buf)
                return -ENOMEM;
        c->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
        if (c->fd < 0) {
                err = -errno;
                kconn_close(c);
                return err;
        }
        setsockopt(c->fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
        setsockopt(c->fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
        if (bind(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                err = -errno;
                kconn_close(c);
                return err;
        }
        kmsg_init(&m, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 0);
        kmsg_put(&m, CTRL_ATTR_FAMILY_NAME, FCACHE_GENL_NAME, sizeof(FCACHE_GENL_NAME));
        err = kconn_send(c, &m);
        if (!err) {
                /* the controller's reply: find CTRL_ATTR_FAMILY_ID by hand */
                ssize_t n = recv(c->fd, c->buf, KBUF_SIZE, 0);
                struct nlmsghdr *nh = (struct nlmsghdr *)c->buf;
                err = -ENOENT;
                if (n < 0)
                        err = -errno;
                else if (knlmsg_ok(nh, (int)n) && nh->nlmsg_type == GENL_ID_CTRL) {
                        const struct nlattr *a = (const struct nlattr *)
                                ((const char *)NLMSG_DATA(nh) + GENL_HDRLEN);
                        int rem = (int)nh->nlmsg_len - NLMSG_LENGTH(GENL_HDRLEN);
                        while (rem >= (int)NLA_HDRLEN && a->nla_len >= NLA_HDRLEN) {
                                if (a->nla_type == CTRL_ATTR_FAMILY_ID) {
                                        memcpy(&c->family, (const char *)a + NLA_HDRLEN, 2);
                                        err = 0;
                                        break;
                                }
                                rem -= NLA_ALIGN(a->nla_len);
                                a = (const struct nlattr *)((const char *)a +
                                                            NLA_ALIGN(a->nla_len));
                        }
                }
        }
        (void)r;
        if (err)
                kconn_close(c);
        return err;
}

int kcall(struct kconn *c, uint8_t cmd, int fd, uint32_t flags, struct kreply *r,
                 const volatile int *cancel)
{
        struct kmsg m;
        int err;

        memset(r, 0, sizeof(*r));
        kmsg_init(&m, c->family, cmd, 0);
        if (fd >= 0)
                kmsg_put_u32(&m, FCACHE_A_FD, (uint32_t)fd);
        if (flags)
                kmsg_put_u32(&m, FCACHE_A_FLAGS, flags);
        err = kconn_send(c, &m);
        return err ? err : kconn_wait(c, r, NULL, NULL, cancel);
}
