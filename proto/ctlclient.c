/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * ctlclient.c: one request on a volume's control socket and its answer
 * (ctlmsg.h), for every client: fcached, fcache-view-ctl, fcache-resolve.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctlmsg.h"

#define POLL_STEP_MS 100        /* how often a running job looks for a cancel */

int ctl_connect(const char *socket_path)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        if (strlen(socket_path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, socket_path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = -errno;

                close(fd);
                return r;
        }
        return fd;
}

void ctl_answer_clear(struct ctl_answer *a)
{
        for (size_t i = 0; i < a->n; i++)
                free(a->keys[i]);       /* the value shares the key's block */
        free(a->keys);
        free(a->values);
        free(a->error);
        memset(a, 0, sizeof(*a));
}

const char *ctl_answer_get(const struct ctl_answer *a, const char *key)
{
        for (size_t i = 0; i < a->n; i++)
                if (!strcmp(a->keys[i], key))
                        return a->values[i];
        return NULL;
}

static int answer_add(struct ctl_answer *a, char *key, char *value)
{
        char **k = realloc(a->keys, (a->n + 1) * sizeof(*k));
        char **v;

        if (!k)
                return -ENOMEM;
        a->keys = k;
        v = realloc(a->values, (a->n + 1) * sizeof(*v));
        if (!v)
                return -ENOMEM;
        a->values = v;
        a->keys[a->n] = key;
        a->values[a->n] = value;
        a->n++;
        return 0;
}

int ctl_answer_decode(const uint8_t *buf, size_t len, struct ctl_answer *a)
{
        struct ctlmsg_iter it;
        const uint8_t *data;
        bool status = false;
        uint32_t alen;
        uint16_t type;

        ctlmsg_iter_init(&it, buf, len);
        while (ctlmsg_next(&it, &type, &data, &alen)) {
                char *key, *value;
                int32_t s;

                switch (type) {
                case CTLA_STATUS:
                        if (ctlmsg_get_s32(data, alen, &s) < 0 || s > 0)
                                return -EBADMSG;
                        a->status = s;
                        status = true;
                        break;
                case CTLA_ERROR:
                        free(a->error);
                        a->error = NULL;
                        if (ctlmsg_get_str(data, alen, &a->error) < 0)
                                return -EBADMSG;
                        break;
                case CTLA_KV:
                        if (ctlmsg_get_kv(data, alen, &key, &value) < 0)
                                return -EBADMSG;
                        if (answer_add(a, key, value) < 0) {
                                free(key);
                                return -ENOMEM;
                        }
                        break;
                default:
                        break;  /* newer views may say more */
                }
        }
        if (!status)
                return -EBADMSG;
        a->answered = true;
        return 0;
}

static void decode_job(const uint8_t *buf, size_t len, uint64_t *job_id,
                       const struct ctl_call *call)
{
        uint64_t done = 0, total = 0, bytes = 0;
        struct ctlmsg_iter it;
        const uint8_t *data;
        uint32_t alen;
        uint16_t type;

        ctlmsg_iter_init(&it, buf, len);
        while (ctlmsg_next(&it, &type, &data, &alen)) {
                if (type == CTLA_JOB_ID)
                        ctlmsg_get_u64(data, alen, job_id);
                else if (type == CTLA_DONE)
                        ctlmsg_get_u64(data, alen, &done);
                else if (type == CTLA_TOTAL)
                        ctlmsg_get_u64(data, alen, &total);
                else if (type == CTLA_BYTES)
                        ctlmsg_get_u64(data, alen, &bytes);
        }
        if (ctlmsg_type_of(buf) == CTLMSG_PROGRESS && call->on_progress)
                call->on_progress(call->userdata, done, total, bytes);
}

static void send_cancel(const char *socket_path, uint64_t job_id)
{
        struct ctl_call c = { .target_fd = -1, .has_cancel = true, .cancel = job_id,
                              .idle_timeout_ms = 10000 };
        struct ctl_answer a = { 0 };

        ctl_call(socket_path, &c, &a);
        ctl_answer_clear(&a);
}

int ctl_call(const char *socket_path, const struct ctl_call *call, struct ctl_answer *a)
{
        struct ctlmsg m;
        uint64_t job_id = 0;
        bool cancel_sent = false;
        int waited_ms = 0;
        int sock, r;

        memset(a, 0, sizeof(*a));
        sock = ctl_connect(socket_path);
        if (sock < 0)
                return sock;
        ctlmsg_init(&m, CTLMSG_REQUEST);
        if (call->command)
                ctlmsg_put_str(&m, CTLA_COMMAND, call->command);
        if (call->target_fd >= 0)
                ctlmsg_put(&m, CTLA_TARGET, NULL, 0);
        if (call->name)
                ctlmsg_put_str(&m, CTLA_NAME, call->name);
        if (call->run_as_job)
                ctlmsg_put(&m, CTLA_RUN_AS_JOB, NULL, 0);
        if (call->has_cancel)
                ctlmsg_put_u64(&m, CTLA_CANCEL, call->cancel);
        r = ctlmsg_send(sock, &m, call->target_fd);
        ctlmsg_free(&m);
        if (r < 0)
                goto out;
        for (;;) {
                struct pollfd p = { .fd = sock, .events = POLLIN };
                uint8_t *buf;
                size_t len;

                if (call->cancel_requested && job_id && !cancel_sent &&
                    call->cancel_requested(call->userdata)) {
                        cancel_sent = true;
                        send_cancel(socket_path, job_id);
                }
                r = poll(&p, 1, POLL_STEP_MS);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0) {
                        r = -errno;
                        goto out;
                }
                if (r == 0) {
                        waited_ms += POLL_STEP_MS;
                        if (call->idle_timeout_ms > 0 && waited_ms >= call->idle_timeout_ms) {
                                r = -ETIMEDOUT;
                                goto out;
                        }
                        continue;
                }
                waited_ms = 0;
                r = ctlmsg_recv(sock, &buf, &len, NULL);
                if (r < 0)
                        goto out;
                switch (ctlmsg_type_of(buf)) {
                case CTLMSG_JOB:
                case CTLMSG_PROGRESS:
                        decode_job(buf, len, &job_id, call);
                        free(buf);
                        continue;
                case CTLMSG_ANSWER:
                        r = ctl_answer_decode(buf, len, a);
                        free(buf);
                        if (r == 0)
                                r = a->status;
                        goto out;
                default:
                        free(buf);
                        r = -EBADMSG;
                        goto out;
                }
        }
out:
        close(sock);
        return r;
}
