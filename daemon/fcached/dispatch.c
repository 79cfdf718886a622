/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * dispatch.c: the one place in fcached that decides who serves a command.
 *
 *   flush all (any path)                               -> libfcachectl's router,
 *                                                         then every volume's store
 *   fcache volume (a path under a volume's mountpoint)  -> its view's control
 *                                                         socket (volumes.c)
 *   plain mount, cache commands                        -> libfcachectl's router
 *                                                         (fcache.ko, else user space)
 *   plain mount, pin / unpin / query pinned / budget   -> the daemon's pins (pins.c),
 *                                                         in fcache.ko while it is loaded
 *                                                         (query pinned adds the module's
 *                                                         answer)
 *   sync with no PATH ("/")                            -> every volume's view
 *   plain mount, volume-only commands                  -> NotSupported, saying why
 *
 * The worker half runs with the caller's identity (caller-access.c): the
 * path is resolved and every file opened as the caller would, and the tree
 * walk's own threads inherit that identity.  A volume's view gets the
 * resolved object itself (its descriptor), never the path to walk again.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "caller-access.h"
#include "dispatch.h"
#include "fcachectl.h"
#include "operation.h"
#include "kmod-link.h"
#include "pins.h"
#include "volumes.h"

static void on_progress(const struct fcachectl_progress *pr, void *data)
{
        fcd_progress_set(data, pr->files_done, pr->files_seen, pr->bytes_done, pr->walk_done);
}

/* Commands that libfcachectl's backends serve on plain mounts. */
static bool core_serves(enum fc_op op)
{
        switch (op) {
        case FC_OP_QUERY_CACHED:
        case FC_OP_QUERY_DIRTY:
        case FC_OP_QUERY_CACHE:
        case FC_OP_FLUSH:
        case FC_OP_FLUSH_VOLUME:
        case FC_OP_FLUSH_ALL:
        case FC_OP_FLUSH_CALLBACKS:
        case FC_OP_PREFETCH:
                return true;
        default:
                return false;
        }
}

/* Served in the main loop from the daemon's own state. */
static bool daemon_serves(enum fc_op op)
{
        return op == FC_OP_UNPIN || op == FC_OP_QUERY_PINNED || op == FC_OP_SET_CACHE_SIZE ||
               op == FC_OP_QUERY_STATE;
}

static void run_core(struct fcd_request *req, struct fc_target *t)
{
        struct fcd_operation *op = req->op;
        struct fcachectl_options o = {
                .size = sizeof(o),
                .flags = FCACHECTL_F_LOCAL_ONLY, /* never back to fcached itself */
                .progress = op ? on_progress : NULL,
                .userdata = op ? &op->progress : NULL,
                .cancel = op ? &op->cancel : NULL,
        };
        struct fc_request r = {
                .cmd = &req->cmd, .target = t, .opts = &o, .result = &req->res, .error = &req->e,
        };
        req->r = fc_run(&r);
}

/*
 * query pinned while fcache.ko is loaded: the module's own answer for the
 * object too (fcached's kernel pins and a direct caller's, whether it holds
 * the pages), merged with the registry's by the main loop: one answer.
 */
static void query_kernel_pin(struct fcd_request *req, struct fc_target *t)
{
        struct fcachectl_options o = { .size = sizeof(o), .flags = FCACHECTL_F_LOCAL_ONLY };
        struct fc_error e = { 0 };
        struct fc_result res;
        struct fc_request r = {
                .cmd = &req->cmd, .target = t, .opts = &o, .result = &res, .error = &e,
        };

        if (!fcd_kmod_loaded())
                return;
        fc_result_init(&res);
        if (fc_run(&r) == 0 && res.buf && g_str_has_prefix(res.buf, "backend=kmod\n"))
                req->kernel_pin = g_strdup(res.buf);
        fc_result_free(&res);
}

/* KEY's value in result lines, as written (escaped), or NULL. */
static char *result_value(const char *lines, const char *key)
{
        g_auto(GStrv) split = g_strsplit(lines, "\n", -1);
        size_t n = strlen(key);

        for (char **l = split; *l; l++)
                if (!strncmp(*l, key, n) && (*l)[n] == '=')
                        return g_strdup(*l + n + 1);
        return NULL;
}

/* The registry's answer, with what the module says of the object. */
static void query_pinned(struct fcd_request *req)
{
        g_autofree char *pinned = NULL, *mode = NULL, *held = NULL;

        if (req->kernel_pin) {
                pinned = result_value(req->kernel_pin, "pinned");
                mode = result_value(req->kernel_pin, "pin_mode");
                held = result_value(req->kernel_pin, "pages_held");
        }
        fcd_pins_query(req->ctx->pins, req->canonical, &req->caller,
                       pinned && !strcmp(pinned, "yes"), &req->res);
        if (mode)
                fc_result_add_str(&req->res, "pin_mode", mode);
        if (held)
                fc_result_add_u64(&req->res, "pages_held", g_ascii_strtoull(held, NULL, 10));
}

void fcd_dispatch_thread(struct fcd_request *req)
{
        struct fcd_identity_saved saved;
        struct fc_target t = FC_TARGET_INIT;
        char proc[64], buf[FCD_PATH_MAX + 1];
        ssize_t n;
        int r;

        r = fcd_identity_enter(&req->caller, &saved);
        if (r < 0) {
                req->r = fc_error_set(&req->e, -r, "Cannot take on the caller's identity (uid "
                                      "%u): %s", req->caller.uid, strerror(-r));
                return;
        }
        req->r = fcd_caller_resolve(req->path, req->atflags, &t, &req->e);
        if (req->r < 0)
                goto out;
        req->type = t.stx.stx_mode & S_IFMT;
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", t.fd);
        n = readlink(proc, buf, sizeof(buf) - 1);
        if (n <= 0 || buf[0] != '/') {
                req->r = fc_error_set(&req->e, n < 0 ? errno : ENOENT, "%s: cannot name the "
                                      "resolved object (deleted, or outside this namespace)",
                                      req->path);
                goto out;
        }
        buf[n] = '\0';
        req->canonical = g_strdup(buf);
        /*
         * A volume's path goes to its data plane; the caller's access was proved
         * above, through the view itself (default_permissions).
         */
        if (req->cmd.op != FC_OP_FLUSH_ALL && /* all: every cache and every store (below) */
            fcd_volume_contains(req->ctx->volumes, req->canonical)) {
                req->volume = true; /* forwarded below, as fcached: the socket is root's */
        } else if (core_serves(req->cmd.op)) {
                run_core(req, &t);
        } else if (req->cmd.op == FC_OP_PIN) {
                struct fcd_operation *op = req->op;
                req->r = fcd_pin_build_run(req->ctx->pins, &t, req->canonical,
                                           req->cmd.mods & FC_MOD_RECURSIVE,
                                           req->cmd.mods & FC_MOD_DRY_RUN,
                                           op ? &op->progress : NULL, op ? &op->cancel : NULL,
                                           &req->build, &req->e);
        } else if (req->cmd.op == FC_OP_SYNC && !strcmp(req->canonical, "/")) {
                req->r = 0; /* every volume's, below */
        } else if (daemon_serves(req->cmd.op)) {
                if (req->cmd.op == FC_OP_QUERY_PINNED)
                        query_kernel_pin(req, &t);
                req->r = 0; /* the main loop finishes it */
        } else {
                req->r = fc_error_set(&req->e, EOPNOTSUPP, "%s: is on a plain mount; %s applies "
                                      "to fcache volumes (disconnected operation), which the "
                                      "daemon serves once the path is a volume", req->path,
                                      fc_op_name(req->cmd.op));
        }
out:
        fcd_identity_leave(&saved);
        if (req->cmd.op == FC_OP_FLUSH_ALL && req->r == 0)
                req->r = fcd_volumes_flush_all(req->ctx->volumes, &req->res);
        if (req->cmd.op == FC_OP_SYNC && !req->volume && req->r == 0)
                req->r = fcd_volumes_sync_all(req->ctx->volumes, &req->res, &req->e);
        /* The view acts on the object resolved above, handed over as its descriptor. */
        if (req->volume && req->r == 0)
                fcd_volume_forward(req->ctx->volumes, req->canonical, t.fd, req->cmd_text,
                                   req->op ? &req->op->progress : NULL,
                                   req->op ? &req->op->cancel : NULL, &req->res, &req->e,
                                   &req->r);
        fc_target_close(&t);
}

bool fcd_dispatch_finish(struct fcd_request *req)
{
        struct fcd_pins *pins = req->ctx->pins;
        bool changed = false;

        if (req->r < 0) {
                fcd_pins_discard(pins, g_steal_pointer(&req->build));
                return false;
        }
        if (core_serves(req->cmd.op) || req->volume)
                return false;
        fc_result_add_str(&req->res, "backend", "fcached");
        fc_result_add_str(&req->res, "type", fc_file_type_name(req->type));
        switch (req->cmd.op) {
        case FC_OP_PIN:
                if (req->cmd.mods & FC_MOD_DRY_RUN) {
                        fcd_pin_build_describe(pins, req->build, &req->res);
                } else {
                        req->r = fcd_pins_commit(pins, req->build, &req->caller,
                                                 req->cmd.priority, &req->res, &req->e);
                        changed = req->r == 0;
                }
                fcd_pins_discard(pins, g_steal_pointer(&req->build));
                break;
        case FC_OP_UNPIN: {
                guint before = fcd_pins_count(pins);
                req->r = fcd_pins_unpin(pins, req->canonical, req->cmd.mods & FC_MOD_RECURSIVE,
                                        &req->caller, &req->res, &req->e);
                changed = fcd_pins_count(pins) != before;
                break;
        }
        case FC_OP_QUERY_PINNED:
                query_pinned(req);
                break;
        case FC_OP_SET_CACHE_SIZE:
                req->r = fcd_pins_set_budget(pins, req->cmd.size, &req->res, &req->e);
                changed = req->r == 0;
                break;
        case FC_OP_QUERY_STATE:
                fc_result_add_str(&req->res, "volume", "no");
                fc_result_add_str(&req->res, "state", "plain-mount");
                fc_result_add_str(&req->res, "kmod", fcd_kmod_loaded() ? "loaded" : "absent");
                fc_result_add_u64(&req->res, "pins", fcd_pins_count(pins));
                fc_result_add_u64(&req->res, "inotify_rescans", fcd_pins_rescans(pins));
                break;
        default:
                break;
        }
        return changed;
}
