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
 * Pin and unpin on a plain mount go to fcached whenever it runs, so that
 * polkit decides and the pin is in fcached's registry (persisted,
 * re-applied, its tree followed); fcached pins in fcache.ko itself while
 * the module is loaded.  When fcached does not run they go to the module
 * directly (its own permission checks apply), else fcached's backend
 * explains that the daemon is needed.
 */
#include <stddef.h>

#include "backend-kmod.h"
#include "backend.h"

static const struct fc_backend *const backends[] = {
        &fc_backend_kmod,
        &fc_backend_daemon,
        &fc_backend_user,
};

/* A pin on a plain mount that fcached, running, should hold. */
static bool pin_for_daemon(const struct fc_command *cmd, unsigned int flags)
{
        if (cmd->op != FC_OP_PIN && cmd->op != FC_OP_UNPIN)
                return false;
        return !(flags & FCACHECTL_F_LOCAL_ONLY) && fc_daemon_running();
}

const struct fc_backend *fc_route(const struct fc_command *cmd, const struct fc_target *t,
                                  unsigned int flags)
{
        if (pin_for_daemon(cmd, flags))
                return &fc_backend_daemon;
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
