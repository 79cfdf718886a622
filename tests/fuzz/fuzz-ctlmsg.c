/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-ctlmsg.c: libFuzzer target for the control socket's message decoder
 * (proto/ctlmsg.h), which the view runs on whatever a client sends.
 *
 * Any input is refused or decodes; a decoded request encodes back to a
 * message that decodes to the same request, and an answer's results keep
 * their bytes.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctlmsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same_str(const char *a, const char *b)
{
        assert(!a == !b);
        assert(!a || !strcmp(a, b));
}

static void request_round_trip(const struct ctl_request *q)
{
        struct ctl_request q2;
        struct ctlmsg m;
        char err[160];

        ctlmsg_init(&m, CTLMSG_REQUEST);
        if (q->command)
                ctlmsg_put_str(&m, CTLA_COMMAND, q->command);
        if (q->has_target)
                ctlmsg_put(&m, CTLA_TARGET, NULL, 0);
        if (q->name)
                ctlmsg_put_str(&m, CTLA_NAME, q->name);
        if (q->run_as_job)
                ctlmsg_put(&m, CTLA_RUN_AS_JOB, NULL, 0);
        if (q->has_cancel)
                ctlmsg_put_u64(&m, CTLA_CANCEL, q->cancel);
        assert(!m.failed);
        ((struct ctlmsg_hdr *)m.buf)->len = (uint32_t)m.len;
        assert(ctl_request_decode(m.buf, m.len, &q2, err, sizeof(err)) == 0);
        same_str(q->command, q2.command);
        same_str(q->name, q2.name);
        assert(q->has_target == q2.has_target && q->run_as_job == q2.run_as_job &&
               q->has_cancel == q2.has_cancel && q->cancel == q2.cancel);
        ctl_request_clear(&q2);
        ctlmsg_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct ctl_request q;
        struct ctl_answer a;
        char err[160];

        if (ctlmsg_check(data, size) < 0)
                return 0;
        if (ctl_request_decode(data, size, &q, err, sizeof(err)) == 0) {
                assert(!q.name || (!strchr(q.name, '/') && strcmp(q.name, "..")));
                request_round_trip(&q);
                ctl_request_clear(&q);
        } else {
                assert(err[0]);
        }
        memset(&a, 0, sizeof(a));
        if (ctl_answer_decode(data, size, &a) == 0) {
                assert(a.answered && a.status <= 0);
                for (size_t i = 0; i < a.n; i++)
                        assert(a.keys[i][0] && !strchr(a.keys[i], '='));
        }
        ctl_answer_clear(&a);
        return 0;
}
