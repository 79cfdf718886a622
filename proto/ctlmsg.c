/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * ctlmsg.c: encoder and decoder of the control socket's framed messages
 * (ctlmsg.h).  Plain C without dependencies, so that every program that
 * speaks the socket links it and the fuzzer instruments it whole.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ctlmsg.h"

#define ALIGN4(n) (((n) + 3u) & ~(size_t)3u)

static void reserve(struct ctlmsg *m, size_t more)
{
        size_t want = m->len + more;
        uint8_t *nb;

        if (m->failed)
                return;
        if (want > CTLMSG_MAX) {
                m->failed = true;
                return;
        }
        if (want <= m->cap)
                return;
        nb = realloc(m->buf, want * 2);
        if (!nb) {
                m->failed = true;
                return;
        }
        m->buf = nb;
        m->cap = want * 2;
}

void ctlmsg_init(struct ctlmsg *m, enum ctlmsg_type type)
{
        struct ctlmsg_hdr h = { .len = sizeof(h), .type = (uint16_t)type };

        memset(m, 0, sizeof(*m));
        reserve(m, sizeof(h));
        if (m->failed)
                return;
        memcpy(m->buf, &h, sizeof(h));
        m->len = sizeof(h);
}

void ctlmsg_free(struct ctlmsg *m)
{
        free(m->buf);
        memset(m, 0, sizeof(*m));
}

void ctlmsg_put(struct ctlmsg *m, enum ctlmsg_attr_type type, const void *data, size_t len)
{
        struct ctlmsg_attr a = { .type = (uint16_t)type, .len = (uint32_t)len };
        size_t total = sizeof(a) + ALIGN4(len);

        if (len > CTLMSG_MAX) {
                m->failed = true;
                return;
        }
        reserve(m, total);
        if (m->failed)
                return;
        memcpy(m->buf + m->len, &a, sizeof(a));
        if (len)
                memcpy(m->buf + m->len + sizeof(a), data, len);
        memset(m->buf + m->len + sizeof(a) + len, 0, ALIGN4(len) - len);
        m->len += total;
}

void ctlmsg_put_str(struct ctlmsg *m, enum ctlmsg_attr_type type, const char *s)
{
        ctlmsg_put(m, type, s, strlen(s));
}

void ctlmsg_put_u64(struct ctlmsg *m, enum ctlmsg_attr_type type, uint64_t v)
{
        ctlmsg_put(m, type, &v, sizeof(v));
}

void ctlmsg_put_s32(struct ctlmsg *m, enum ctlmsg_attr_type type, int32_t v)
{
        ctlmsg_put(m, type, &v, sizeof(v));
}

void ctlmsg_put_kv(struct ctlmsg *m, const char *key, const char *value)
{
        size_t kl = strlen(key), vl = strlen(value);
        char *p;

        if (kl + vl + 1 > CTLMSG_MAX) {
                m->failed = true;
                return;
        }
        p = malloc(kl + 1 + vl);
        if (!p) {
                m->failed = true;
                return;
        }
        memcpy(p, key, kl + 1);
        memcpy(p + kl + 1, value, vl);
        ctlmsg_put(m, CTLA_KV, p, kl + 1 + vl);
        free(p);
}

void ctlmsg_append_attrs(struct ctlmsg *dst, const struct ctlmsg *src)
{
        size_t n;

        if (src->failed || !src->buf) {
                dst->failed = true;
                return;
        }
        n = src->len - sizeof(struct ctlmsg_hdr);
        reserve(dst, n);
        if (dst->failed)
                return;
        memcpy(dst->buf + dst->len, src->buf + sizeof(struct ctlmsg_hdr), n);
        dst->len += n;
}

int ctlmsg_send(int sock, struct ctlmsg *m, int fd)
{
        char cbuf[CMSG_SPACE(sizeof(int))];
        size_t off = 0;

        if (m->failed || !m->buf)
                return -EMSGSIZE;
        ((struct ctlmsg_hdr *)m->buf)->len = (uint32_t)m->len;
        while (off < m->len) {
                struct iovec iov = { m->buf + off, m->len - off };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
                ssize_t n;

                /* The descriptor rides on the message's first bytes. */
                if (fd >= 0 && off == 0) {
                        struct cmsghdr *c;

                        memset(cbuf, 0, sizeof(cbuf));
                        mh.msg_control = cbuf;
                        mh.msg_controllen = sizeof(cbuf);
                        c = CMSG_FIRSTHDR(&mh);
                        c->cmsg_level = SOL_SOCKET;
                        c->cmsg_type = SCM_RIGHTS;
                        c->cmsg_len = CMSG_LEN(sizeof(int));
                        memcpy(CMSG_DATA(c), &fd, sizeof(int));
                }
                n = sendmsg(sock, &mh, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? -errno : -EIO;
                off += (size_t)n;
        }
        return 0;
}

/* Takes the descriptors of one control message: the first into *fd, the rest closed. */
static void take_fds(struct msghdr *mh, int *fd)
{
        for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
                size_t n;

                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < n; i++) {
                        int f;

                        memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        if (*fd < 0)
                                *fd = f;
                        else
                                close(f);
                }
        }
}

int ctlmsg_recv(int sock, uint8_t **buf, size_t *len, int *fd)
{
        struct ctlmsg_hdr h;
        union {
                char buf[CMSG_SPACE(4 * sizeof(int))];
                struct cmsghdr align;
        } cbuf;
        size_t got = 0;
        int rfd = -1, r;
        uint8_t *b;

        /* The header, and with it any descriptor. */
        while (got < sizeof(h)) {
                struct iovec iov = { (uint8_t *)&h + got, sizeof(h) - got };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                                     .msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf.buf) };
                ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        goto fail;
                }
                take_fds(&mh, &rfd);
                if (n == 0) {
                        r = got ? -EBADMSG : -ECONNRESET;
                        goto fail;
                }
                if (mh.msg_flags & MSG_CTRUNC) {
                        r = -EBADMSG;
                        goto fail;
                }
                got += (size_t)n;
        }
        if (h.len < sizeof(h) || h.len > CTLMSG_MAX) {
                r = -EBADMSG;
                goto fail;
        }
        b = malloc(h.len);
        if (!b) {
                r = -ENOMEM;
                goto fail;
        }
        memcpy(b, &h, sizeof(h));
        while (got < h.len) {
                ssize_t n = read(sock, b + got, h.len - got);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        r = n < 0 ? -errno : -EBADMSG;
                        free(b);
                        goto fail;
                }
                got += (size_t)n;
        }
        r = ctlmsg_check(b, h.len);
        if (r < 0) {
                free(b);
                goto fail;
        }
        *buf = b;
        *len = h.len;
        if (fd)
                *fd = rfd;
        else if (rfd >= 0)
                close(rfd);
        return 0;
fail:
        if (rfd >= 0)
                close(rfd);
        if (fd)
                *fd = -1;
        return r;
}

int ctlmsg_check(const uint8_t *buf, size_t len)
{
        struct ctlmsg_hdr h;
        size_t off = sizeof(h);

        if (len < sizeof(h) || len > CTLMSG_MAX)
                return -EBADMSG;
        memcpy(&h, buf, sizeof(h));
        if (h.len != len || h.zero || h.type < CTLMSG_REQUEST || h.type > CTLMSG_ANSWER)
                return -EBADMSG;
        while (off < len) {
                struct ctlmsg_attr a;

                if (len - off < sizeof(a))
                        return -EBADMSG;
                memcpy(&a, buf + off, sizeof(a));
                off += sizeof(a);
                if (a.zero || a.len > len - off || ALIGN4(a.len) > len - off)
                        return -EBADMSG;
                off += ALIGN4(a.len);
        }
        return 0;
}

enum ctlmsg_type ctlmsg_type_of(const uint8_t *buf)
{
        struct ctlmsg_hdr h;

        memcpy(&h, buf, sizeof(h));
        return (enum ctlmsg_type)h.type;
}

void ctlmsg_iter_init(struct ctlmsg_iter *it, const uint8_t *buf, size_t len)
{
        it->buf = buf;
        it->len = len;
        it->off = sizeof(struct ctlmsg_hdr);
}

bool ctlmsg_next(struct ctlmsg_iter *it, uint16_t *type, const uint8_t **data, uint32_t *len)
{
        struct ctlmsg_attr a;

        if (it->off + sizeof(a) > it->len)
                return false;
        memcpy(&a, it->buf + it->off, sizeof(a));
        *type = a.type;
        *data = it->buf + it->off + sizeof(a);
        *len = a.len;
        it->off += sizeof(a) + ALIGN4(a.len);
        return true;
}

int ctlmsg_get_str(const uint8_t *data, uint32_t len, char **out)
{
        char *s;

        if (memchr(data, 0, len))
                return -EBADMSG;
        s = malloc((size_t)len + 1);
        if (!s)
                return -ENOMEM;
        memcpy(s, data, len);
        s[len] = 0;
        *out = s;
        return 0;
}

int ctlmsg_get_u64(const uint8_t *data, uint32_t len, uint64_t *out)
{
        if (len != sizeof(*out))
                return -EBADMSG;
        memcpy(out, data, sizeof(*out));
        return 0;
}

int ctlmsg_get_s32(const uint8_t *data, uint32_t len, int32_t *out)
{
        if (len != sizeof(*out))
                return -EBADMSG;
        memcpy(out, data, sizeof(*out));
        return 0;
}

int ctlmsg_get_kv(const uint8_t *data, uint32_t len, char **key, char **value)
{
        const uint8_t *nul = memchr(data, 0, len);
        char *s;

        if (!nul || nul == data || memchr(data, '=', (size_t)(nul - data)) ||
            memchr(nul + 1, 0, len - (size_t)(nul - data) - 1))
                return -EBADMSG;
        s = malloc((size_t)len + 1);
        if (!s)
                return -ENOMEM;
        memcpy(s, data, len);
        s[len] = 0;
        *key = s;
        *value = s + (nul - data) + 1;
        return 0;
}

void ctl_request_clear(struct ctl_request *req)
{
        free(req->command);
        free(req->name);
        memset(req, 0, sizeof(*req));
}

/* A name: one component, not "." or "..", at most NAME_MAX bytes. */
static bool one_name(const char *s)
{
        size_t n = strlen(s);

        return n && n <= 255 && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

int ctl_request_decode(const uint8_t *buf, size_t len, struct ctl_request *req, char *err,
                       size_t errlen)
{
        struct ctlmsg_iter it;
        const uint8_t *data;
        uint32_t alen;
        uint16_t type;
        int r = 0;

        memset(req, 0, sizeof(*req));
        if (ctlmsg_check(buf, len) < 0 || ctlmsg_type_of(buf) != CTLMSG_REQUEST) {
                snprintf(err, errlen, "not a request message");
                return -EBADMSG;
        }
        ctlmsg_iter_init(&it, buf, len);
        while (r == 0 && ctlmsg_next(&it, &type, &data, &alen)) {
                switch (type) {
                case CTLA_COMMAND:
                        if (req->command || ctlmsg_get_str(data, alen, &req->command) < 0) {
                                snprintf(err, errlen, "a request has one command, without NUL");
                                r = -EBADMSG;
                        }
                        break;
                case CTLA_NAME:
                        if (req->name || ctlmsg_get_str(data, alen, &req->name) < 0 ||
                            !one_name(req->name)) {
                                snprintf(err, errlen, "the request's name must be one name"
                                         " (no '/', not '.' or '..', 1 to 255 bytes)");
                                r = -EBADMSG;
                        }
                        break;
                case CTLA_TARGET:
                        req->has_target = true;
                        break;
                case CTLA_RUN_AS_JOB:
                        req->run_as_job = true;
                        break;
                case CTLA_CANCEL:
                        if (ctlmsg_get_u64(data, alen, &req->cancel) < 0) {
                                snprintf(err, errlen, "a cancel names a job by a u64");
                                r = -EBADMSG;
                        }
                        req->has_cancel = true;
                        break;
                default:
                        snprintf(err, errlen, "unknown request attribute %u", type);
                        r = -EBADMSG;
                        break;
                }
        }
        if (r == 0 && !req->command == !req->has_cancel) {
                snprintf(err, errlen, "a request carries a command or a cancel");
                r = -EBADMSG;
        }
        if (r == 0 && req->name && !req->has_target) {
                snprintf(err, errlen, "a name needs a target directory");
                r = -EBADMSG;
        }
        if (r < 0)
                ctl_request_clear(req);
        return r;
}
