/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * backend-daemon.c: the commands only fcached can serve (pins, cache
 * parameters, volume state), sent to it over the system bus with sd-bus.
 *
 * The target is named by the path of the object this process resolved
 * (/proc/self/fd), and fcached resolves it again with the caller's own
 * identity. Pins run as operations (Start): their Progress signals feed
 * the progress callback, and the cancel flag becomes Cancel. Results come
 * back as a{sv} and are turned into the same key=value lines as any other
 * backend's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#include "backend.h"
#include "mounts.h"

#define BUS_NAME "org.fcache.Manager1"
#define MANAGER_PATH "/org/fcache/Manager1"
#define MANAGER_IFACE "org.fcache.Manager1"
#define OPERATION_IFACE "org.fcache.Operation1"
#define ERROR_PREFIX "org.fcache.Manager1.Error."
#define CALL_TIMEOUT_US (120ull * 1000000ull)

static bool daemon_handles(const struct fc_command *cmd, const struct fc_target *t)
{
        /* Every command on an fcache volume is the volume's (fcached runs its view). */
        if (fc_target_on_fcache_volume(t))
                return true;
        switch (cmd->op) {
        case FC_OP_PIN:
        case FC_OP_UNPIN:
        case FC_OP_QUERY_PINNED:
        case FC_OP_QUERY_STATE:
        case FC_OP_QUERY_CONFLICTS:
        case FC_OP_QUERY_REINTEGRATION:
        case FC_OP_SET_CACHE_SIZE:
        case FC_OP_SET_CACHEABLE:
        case FC_OP_SET_RESERVE:
        case FC_OP_SET_CACHE:
        case FC_OP_DISCONNECT:
        case FC_OP_RECONNECT:
        case FC_OP_SYNC:        /* every volume's with no PATH ("/") */
                return true;
        default:
                return false;
        }
}

static bool daemon_available(void)
{
        return true; /* run() says clearly when fcached is not there */
}

bool fc_daemon_running(void)
{
        sd_bus *bus = NULL;
        sd_bus_message *reply = NULL;
        int has = 0;

        if (sd_bus_open_system(&bus) < 0)
                return false;
        sd_bus_set_method_call_timeout(bus, CALL_TIMEOUT_US);
        if (sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                               "org.freedesktop.DBus", "NameHasOwner", NULL, &reply, "s",
                               BUS_NAME) < 0 ||
            sd_bus_message_read(reply, "b", &has) < 0)
                has = 0;
        sd_bus_message_unref(reply);
        sd_bus_flush_close_unref(bus);
        return has;
}

static int map_error(struct fc_request *req, const sd_bus_error *err, int r)
{
        static const struct { const char *name; int code; } names[] = {
                { "NotAuthorized", EPERM }, { "AccessDenied", EACCES },
                { "InvalidCommand", EINVAL }, { "InvalidArgument", EINVAL },
                { "NoSuchPath", ENOENT }, { "LimitExceeded", ENOSPC },
                { "NotSupported", EOPNOTSUPP }, { "Cancelled", ECANCELED },
                { "Busy", EBUSY }, { "Failed", EIO },
        };
        const char *name = err && err->name ? err->name : "";

        if (!strncmp(name, ERROR_PREFIX, strlen(ERROR_PREFIX))) {
                for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                        if (!strcmp(name + strlen(ERROR_PREFIX), names[i].name))
                                return fc_error_set(req->error, names[i].code, "%s",
                                                    err->message ? err->message : name);
        }
        if (sd_bus_error_has_names(err, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER,
                                   SD_BUS_ERROR_UNKNOWN_OBJECT, SD_BUS_ERROR_UNKNOWN_METHOD) ||
            (!err->name && (r == -ENOENT || r == -ECONNREFUSED || r == -ENOTCONN)))
                return fc_error_set(req->error, EOPNOTSUPP, "%s: needs the fcache daemon "
                                    "(fcached), which is not running on the system bus: %s",
                                    fc_op_name(req->cmd->op),
                                    err->message ? err->message : strerror(-r));
        return fc_error_set(req->error, r < 0 ? -r : EIO, "fcached: %s",
                            err->message ? err->message : strerror(r < 0 ? -r : EIO));
}

/* Append the a{sv} at the reader's position to the result, backend= excepted. */
static int read_result(sd_bus_message *m, struct fc_result *res)
{
        int r = sd_bus_message_enter_container(m, 'a', "{sv}");

        if (r < 0)
                return r;
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *key, *contents;
                char type;

                if ((r = sd_bus_message_read(m, "s", &key)) < 0 ||
                    (r = sd_bus_message_peek_type(m, &type, &contents)) < 0)
                        return r;
                if ((r = sd_bus_message_enter_container(m, 'v', contents)) < 0)
                        return r;
                bool keep = strcmp(key, "backend") != 0;
                if (!strcmp(contents, "t")) {
                        uint64_t v;
                        if ((r = sd_bus_message_read(m, "t", &v)) < 0)
                                return r;
                        if (keep)
                                fc_result_add_u64(res, key, v);
                } else if (!strcmp(contents, "s")) {
                        const char *v;
                        if ((r = sd_bus_message_read(m, "s", &v)) < 0)
                                return r;
                        if (keep)
                                fc_result_add_str(res, key, v);
                } else if (!strcmp(contents, "as")) {
                        const char *v;
                        if ((r = sd_bus_message_enter_container(m, 'a', "s")) < 0)
                                return r;
                        while ((r = sd_bus_message_read(m, "s", &v)) > 0)
                                fc_result_add_str(res, key, v);
                        if (r < 0 || (r = sd_bus_message_exit_container(m)) < 0)
                                return r;
                } else if ((r = sd_bus_message_skip(m, contents)) < 0) {
                        return r;
                }
                if ((r = sd_bus_message_exit_container(m)) < 0 ||
                    (r = sd_bus_message_exit_container(m)) < 0)
                        return r;
        }
        if (r < 0)
                return r;
        return sd_bus_message_exit_container(m);
}

struct wait_state {
        struct fc_request *req;
        const char *op_path;
        bool done;
        int r;
        sd_bus_error err;
};

static int on_operation_signal(sd_bus_message *m, void *data, sd_bus_error *ret)
{
        struct wait_state *w = data;
        const char *path = sd_bus_message_get_path(m);

        if (!w->op_path || !path || strcmp(path, w->op_path))
                return 0;
        if (sd_bus_message_is_signal(m, OPERATION_IFACE, "Progress")) {
                struct fcachectl_progress p = { 0 };
                int walk_done = 0;
                if (sd_bus_message_read(m, "tttb", &p.files_done, &p.files_seen, &p.bytes_done,
                                        &walk_done) >= 0 && w->req->opts->progress) {
                        p.walk_done = walk_done;
                        w->req->opts->progress(&p, w->req->opts->userdata);
                }
        } else if (sd_bus_message_is_signal(m, OPERATION_IFACE, "Finished")) {
                const char *state, *name, *msg;
                if (sd_bus_message_read(m, "s", &state) < 0)
                        return 0;
                w->r = read_result(m, w->req->result);
                if (w->r >= 0 && sd_bus_message_read(m, "ss", &name, &msg) >= 0 && *name) {
                        sd_bus_error_set(&w->err, name, msg);
                        w->r = -EIO;
                }
                w->done = true;
        }
        return 0;
}

/* A finished operation's outcome from its properties, for when Finished came before the match. */
static int read_final_state(sd_bus *bus, struct wait_state *w)
{
        sd_bus_error err = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        char *state = NULL, *name = NULL, *msg = NULL;
        int r;

        r = sd_bus_get_property_string(bus, BUS_NAME, w->op_path, OPERATION_IFACE, "State", &err,
                                       &state);
        if (r < 0 || !strcmp(state, "running"))
                goto out;
        r = sd_bus_get_property(bus, BUS_NAME, w->op_path, OPERATION_IFACE, "Result", &err,
                                &reply, "a{sv}");
        if (r >= 0)
                r = read_result(reply, w->req->result);
        if (r >= 0 && sd_bus_get_property_string(bus, BUS_NAME, w->op_path, OPERATION_IFACE,
                                                 "ErrorName", &err, &name) >= 0 && *name &&
            sd_bus_get_property_string(bus, BUS_NAME, w->op_path, OPERATION_IFACE,
                                       "ErrorMessage", &err, &msg) >= 0) {
                sd_bus_error_set(&w->err, name, msg);
                r = -EIO;
        }
        w->r = r;
        w->done = true;
out:
        sd_bus_message_unref(reply);
        sd_bus_error_free(&err);
        free(state);
        free(name);
        free(msg);
        return r;
}

static int run_operation(struct fc_request *req, sd_bus *bus, const char *path, const char *cmd,
                         bool nofollow)
{
        sd_bus_error err = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        sd_bus_slot *slot = NULL;
        struct wait_state w = { .req = req, .err = SD_BUS_ERROR_NULL };
        bool cancelled = false;
        char *op_path = NULL;
        int r;

        /* Subscribe first, so that no signal of the new operation can be missed. */
        r = sd_bus_match_signal(bus, &slot, BUS_NAME, NULL, OPERATION_IFACE, NULL,
                                on_operation_signal, &w);
        if (r < 0) {
                r = map_error(req, &err, r);
                goto out;
        }
        r = sd_bus_call_method(bus, BUS_NAME, MANAGER_PATH, MANAGER_IFACE, "Start", &err, &reply,
                               "ssa{sv}", path, cmd, 1, "no-follow", "b", nofollow);
        if (r < 0) {
                r = map_error(req, &err, r);
                goto out;
        }
        if ((r = sd_bus_message_read(reply, "o", &w.op_path)) < 0 ||
            !(op_path = strdup(w.op_path))) {
                r = fc_error_set(req->error, r < 0 ? -r : ENOMEM, "fcached sent a bad reply");
                goto out;
        }
        w.op_path = op_path;
        read_final_state(bus, &w);
        while (!w.done) {
                r = sd_bus_process(bus, NULL);
                if (r < 0) {
                        r = map_error(req, &err, r);
                        goto out;
                }
                if (r > 0)
                        continue;
                if (req->opts->cancel && *req->opts->cancel && !cancelled) {
                        cancelled = true;
                        sd_bus_call_method(bus, BUS_NAME, op_path, OPERATION_IFACE, "Cancel",
                                           NULL, NULL, "");
                }
                sd_bus_wait(bus, 100000);
        }
        r = w.r < 0 ? map_error(req, &w.err, w.r) : 0;
out:
        sd_bus_error_free(&w.err);
        sd_bus_error_free(&err);
        sd_bus_message_unref(reply);
        sd_bus_slot_unref(slot);
        free(op_path);
        return r;
}

static int daemon_run(struct fc_request *req)
{
        sd_bus_error err = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        sd_bus *bus = NULL;
        char proc[64], path[4096], cmd[FCACHECTL_CMD_MAX + 1];
        bool nofollow = S_ISLNK(req->target->stx.stx_mode);
        ssize_t n;
        int r;

        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", req->target->fd);
        n = readlink(proc, path, sizeof(path) - 1);
        if (n <= 0 || path[0] != '/')
                return fc_error_set(req->error, n < 0 ? errno : ENOENT, "%s: cannot name the "
                                    "object for fcached (deleted, or /proc not mounted)",
                                    req->target->display);
        path[n] = '\0';
        fc_command_format(req->cmd, cmd, sizeof(cmd));
        r = sd_bus_open_system(&bus);
        if (r < 0)
                return fc_error_set(req->error, EOPNOTSUPP, "%s: needs the fcache daemon "
                                    "(fcached), but the system bus cannot be reached: %s",
                                    fc_op_name(req->cmd->op), strerror(-r));
        sd_bus_set_method_call_timeout(bus, CALL_TIMEOUT_US);
        /* Every call on this connection may then wait for the person to type a password. */
        if (req->opts->flags & FCACHECTL_F_INTERACTIVE)
                sd_bus_set_allow_interactive_authorization(bus, 1);
        if (req->cmd->op == FC_OP_PIN && !(req->cmd->mods & FC_MOD_DRY_RUN)) {
                r = run_operation(req, bus, path, cmd, nofollow);
        } else {
                r = sd_bus_call_method(bus, BUS_NAME, MANAGER_PATH, MANAGER_IFACE, "Control",
                                       &err, &reply, "ssa{sv}", path, cmd, 1, "no-follow", "b",
                                       nofollow);
                if (r < 0)
                        r = map_error(req, &err, r);
                else if ((r = read_result(reply, req->result)) < 0)
                        r = fc_error_set(req->error, -r, "fcached sent a result that cannot be "
                                         "read: %s", strerror(-r));
                else
                        r = 0;
        }
        sd_bus_error_free(&err);
        sd_bus_message_unref(reply);
        sd_bus_flush_close_unref(bus);
        return r;
}

const struct fc_backend fc_backend_daemon = {
        .name = "fcached",
        .remote = true,
        .available = daemon_available,
        .handles = daemon_handles,
        .run = daemon_run,
};
