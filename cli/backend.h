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
#include "walk.h"

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
/* Does fcached own its name on the system bus now? */
bool fc_daemon_running(void);

/* The backend for this command on this target, given FCACHECTL_F_* flags. Never NULL. */
const struct fc_backend *fc_route(const struct fc_command *cmd, const struct fc_target *t,
                                  unsigned int flags);

/* Run the command: route, run, and add the backend= key. */
int fc_run(struct fc_request *req);

/*
 * Walk the directory dirfd (the target, opened for data) with one tally per
 * worker (walk.h), seed handed to ops->init, merged into sum. workers: the
 * backend's default, when the caller asked for none. 0 or -errno with
 * req->error set.
 */
int fc_backend_walk(struct fc_request *req, int dirfd, bool top_only, unsigned int workers,
                    const struct fc_walk_tally_ops *ops, void *seed, void *sum,
                    struct fc_walk_stats *st);

/*
 * A flush on tmpfs or ramfs (fd may be O_PATH) is refused by every backend:
 * their page cache is the data.  0, or -EOPNOTSUPP with req->error set.
 */
int fc_backend_refuse_memory_backed(struct fc_request *req, int fd, const char *what);

/* flush and prefetch act on regular files and directories: 0, or -EINVAL with req->error set */
int fc_backend_refuse_not_file(struct fc_request *req);

/*
 * On cifs and smb3, query cached and prefetch say that the pages may not
 * survive the next open (no lease, no cache): kept_at_next_open.
 */
void fc_backend_note_pages_kept(struct fc_request *req);
/* Says that uncommitted NFS pages are not in the user backend's dirty figures. */
void fc_backend_note_unstable_unmeasured(struct fc_request *req);
