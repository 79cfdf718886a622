/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * route.c: the one place that decides which backend serves a command.
 *
 * Plain mounts: fcache.ko when it is loaded and knows the command, else
 * the user-space backend. fcache volumes (served by fcached) join here
 * when the daemon exists.
 */
#include <stddef.h>

#include "backend.h"

static const struct fc_backend *const backends[] = {
        &fc_backend_daemon,
        &fc_backend_user,
};

const struct fc_backend *fc_route(const struct fc_command *cmd, const struct fc_target *t,
                                  unsigned int flags)
{
        for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
                const struct fc_backend *b = backends[i];
                /* LOCAL_ONLY: fcached itself runs commands here, never back over the bus. */
                if (b->remote && (flags & FCACHECTL_F_LOCAL_ONLY))
                        continue;
                if (b->available() && b->handles(cmd, t))
                        return b;
        }
        return &fc_backend_user; /* it explains what it cannot do */
}

int fc_run(struct fc_request *req)
{
        const struct fc_backend *b = fc_route(req->cmd, req->target, req->opts->flags);

        fc_result_add_str(req->result, "backend", b->name);
        return b->run(req);
}
