/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * backend.h: what serves a command once it is parsed and its target
 * resolved. "user" is this process with plain system calls; "kmod" is
 * fcache.ko over generic netlink. route.c is the one place that picks.
 */
#pragma once

#include <stdbool.h>

#include "command.h"
#include "error.h"
#include "fcachectl.h"
#include "result.h"
#include "target.h"

struct fc_request {
        const struct fc_command *cmd;
        const struct fc_target *target;
        const struct fcachectl_options *opts; /* never NULL: defaults filled in */
        struct fc_result *result;             /* the backend adds its keys */
        struct fc_error *error;
};

struct fc_backend {
        const char *name;                     /* the value of the backend= key */
        bool remote;                          /* another process serves it (FCACHECTL_F_LOCAL_ONLY skips it) */
        bool (*available)(void);              /* may it be used in this process now? */
        bool (*handles)(const struct fc_command *cmd, const struct fc_target *t);
        int (*run)(struct fc_request *req);   /* 0 or -errno with req->error set */
};

extern const struct fc_backend fc_backend_user;
extern const struct fc_backend fc_backend_daemon;

/* The backend for this command on this target, given FCACHECTL_F_* flags. Never NULL. */
const struct fc_backend *fc_route(const struct fc_command *cmd, const struct fc_target *t,
                                  unsigned int flags);

/* Run the command: route, run, and add the backend= key. */
int fc_run(struct fc_request *req);
