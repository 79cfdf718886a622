/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * route.c: the one place that decides which backend serves a command.
 *
 * The first backend in the table that is available and handles the
 * command on the target serves it:
 *
 *   kmod    fcache.ko, whenever its generic netlink family resolves, for
 *           the commands it knows on plain mounts (it declines fcache
 *           volumes: those are fcached's)
 *   fcached what only the daemon can do (volumes, their state, cache
 *           parameters), and pins on plain mounts while fcache.ko is not
 *           loaded (the daemon holds them then)
 *   user    everything else, with plain system calls; it explains what it
 *           cannot do
 *
 * fcache.ko comes before fcached because fcached takes pins whether or not
 * it runs: after it, a pin on a plain mount would never reach the module,
 * which holds it in the kernel (DESIGN.md: the module when loaded, the
 * fallback, daemon-held pins, when not).
 */
#include <stddef.h>

#include "backend-kmod.h"
#include "backend.h"

static const struct fc_backend *const backends[] = {
        &fc_backend_kmod,
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
