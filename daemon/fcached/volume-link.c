/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * volume-link.c: a volume's link to its server (volume-link.h).
 *
 * netstate.h decides from NetworkManager, Server= probes and manual
 * requests whether the server is reachable; this file makes the volume's
 * view follow: offline -> "disconnect", reintegrating -> "reconnect" (the
 * view replays its log) and reports the end back to netstate.  The control
 * calls block, so they run in a worker thread, one at a time per volume;
 * a change that arrives meanwhile is driven when the running one ends.
 * Whether the connection is metered (NetworkManager's Metered) goes to the
 * view too ("set metered yes|no": its hoard walks wait), on every change and
 * whenever the view (re)starts.
 */
#include <errno.h>
#include <string.h>

#include "netstate.h"
#include "volume-link.h"
#include "volumes.h"

struct volume_link {
        char *name;
        char *socket_path;
        struct netstate *ns;
        volume_link_state_fn on_state;
        void *userdata;
        bool busy;              /* a drive is running */
        bool again;             /* the wanted state changed while it ran */
        bool dead;              /* freed while busy: the drive frees it */
        bool force;             /* the next reconnect may delete what the server lost */
        unsigned gen;           /* atomic: bumped by every change of the wanted state */
        char state[16];         /* what was last reported */
        char reason[32];
};

struct drive {
        char *socket_path;
        enum netstate_state want;
        const unsigned *gen;    /* the link's (alive while the drive runs) */
        unsigned seen;          /* its value when the drive started */
        bool force;             /* reconnect force */
};

static void drive_free(gpointer p)
{
        struct drive *d = p;

        g_free(d->socket_path);
        g_free(d);
}

/* The view's state ("online", "writeback", "offline", "reintegrating"), or "" if it does not answer. */
static void view_state(const char *socket_path, char *out, size_t len)
{
        g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);

        out[0] = '\0';
        if (fcd_control_call(socket_path, "query state", -1, NULL, lines) < 0)
                return;
        for (guint i = 0; i < lines->len; i++)
                if (g_str_has_prefix(lines->pdata[i], "state="))
                        g_strlcpy(out, (char *)lines->pdata[i] + 6, len);
}

/* Reaching the server: online, or write-back (changes shipped in the background). */
static bool connected(const char *state)
{
        return !strcmp(state, "online") || !strcmp(state, "writeback");
}

static void drive_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel)
{
        struct drive *d = data;
        g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
        char cur[16];
        int r = 0;

        /* A view just started takes a moment to answer. */
        for (int i = 0; i < 100; i++) {
                view_state(d->socket_path, cur, sizeof(cur));
                if (cur[0])
                        break;
                g_usleep(100000);
        }
        /* A newer wish (a manual disconnect meanwhile) is driven next: not this one. */
        if (__atomic_load_n(d->gen, __ATOMIC_ACQUIRE) != d->seen)
                r = 0;
        else if (!cur[0])
                r = -ENOTCONN;
        else if (d->want == NETSTATE_OFFLINE && connected(cur))
                r = fcd_control_call(d->socket_path, "disconnect", -1, NULL, lines);
        else if (d->want != NETSTATE_OFFLINE && !connected(cur))
                r = fcd_control_call(d->socket_path, d->force ? "reconnect force" : "reconnect",
                                     -1, NULL, lines);
        g_task_return_int(task, r);
}

static void drive(struct volume_link *l);

static void metered_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel)
{
        const char *socket_path = g_object_get_data(G_OBJECT(task), "socket");
        g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
        bool metered = data != NULL;
        char cur[16];

        for (int i = 0; i < 100; i++) {
                view_state(socket_path, cur, sizeof(cur));
                if (cur[0])
                        break;
                g_usleep(100000);
        }
        g_task_return_int(task, fcd_control_call(socket_path, metered ? "set metered yes" :
                                                 "set metered no", -1, NULL, lines));
}

static void metered_done(GObject *source, GAsyncResult *res, gpointer data)
{
        char *name = data;
        int r = (int)g_task_propagate_int(G_TASK(res), NULL);

        if (r < 0)
                g_warning("Volume %s: its view was not told whether the connection is "
                          "metered: %s", name, g_strerror(-r));
        g_free(name);
}

/* Tells the view whether the connection is metered now (a worker: the call blocks). */
static void tell_metered(struct volume_link *l)
{
        GTask *task = g_task_new(NULL, NULL, metered_done, g_strdup(l->name));

        g_task_set_task_data(task, netstate_metered(l->ns) ? GINT_TO_POINTER(1) : NULL, NULL);
        g_object_set_data_full(G_OBJECT(task), "socket", g_strdup(l->socket_path), g_free);
        g_task_run_in_thread(task, metered_thread);
        g_object_unref(task);
}

static void report(struct volume_link *l, const char *state, const char *reason)
{
        if (!strcmp(l->state, state) && !strcmp(l->reason, reason))
                return;
        g_strlcpy(l->state, state, sizeof(l->state));
        g_strlcpy(l->reason, reason, sizeof(l->reason));
        g_message("Volume %s: %s (%s)", l->name, state, reason);
        if (l->on_state)
                l->on_state(l->userdata, l->name, state, reason);
}

static void drive_done(GObject *source, GAsyncResult *res, gpointer data)
{
        struct volume_link *l = data;
        struct drive *d = g_task_get_task_data(G_TASK(res));
        GError *error = NULL;
        int r = (int)g_task_propagate_int(G_TASK(res), &error);

        g_clear_error(&error);
        l->busy = false;
        if (l->dead) {
                netstate_free(l->ns);
                g_free(l->name);
                g_free(l->socket_path);
                g_free(l);
                return;
        }
        if (r < 0)
                g_warning("Volume %s: its view did not go %s: %s", l->name,
                          d->want == NETSTATE_OFFLINE ? "offline" : "online", g_strerror(-r));
        if (d->want == NETSTATE_REINTEGRATING && netstate_get(l->ns) == NETSTATE_REINTEGRATING)
                netstate_reintegration_done(l->ns, r); /* calls on_netstate: online or offline */
        if (l->again) {
                l->again = false;
                drive(l);
        }
}

static void drive(struct volume_link *l)
{
        struct drive *d;
        GTask *task;

        if (l->busy) {
                l->again = true;
                return;
        }
        d = g_new0(struct drive, 1);
        d->socket_path = g_strdup(l->socket_path);
        d->want = netstate_get(l->ns);
        d->gen = &l->gen;
        d->seen = __atomic_load_n(&l->gen, __ATOMIC_ACQUIRE);
        /* The drive of a forced manual reconnect is forced too: unforced, it
         * would be refused, and its failure would take the volume back offline
         * behind the forced command's back. */
        if (d->want == NETSTATE_REINTEGRATING) {
                d->force = l->force;
                l->force = false;
        }
        l->busy = true;
        task = g_task_new(NULL, NULL, drive_done, l);
        g_task_set_task_data(task, d, drive_free);
        g_task_run_in_thread(task, drive_thread);
        g_object_unref(task);
}

static void on_netstate(void *userdata, enum netstate_state old_state, enum netstate_state new_state,
                        enum netstate_reason reason)
{
        struct volume_link *l = userdata;

        __atomic_add_fetch(&l->gen, 1, __ATOMIC_ACQ_REL);
        report(l, netstate_state_to_string(new_state), netstate_reason_to_string(reason));
        if (new_state != NETSTATE_ONLINE)
                drive(l);
}

static void on_metered(void *userdata, bool metered)
{
        struct volume_link *l = userdata;

        g_message("Volume %s: the connection is %smetered", l->name, metered ? "" : "not ");
        tell_metered(l);
        if (l->on_state)
                l->on_state(l->userdata, l->name, NULL, NULL);
}

struct volume_link *volume_link_new(const char *name, const char *server, const char *socket_path,
                                    volume_link_state_fn on_state, void *userdata)
{
        struct netstate_options opts = NETSTATE_OPTIONS_INIT;
        struct netstate_callbacks cb = { .state_changed = on_netstate,
                                         .metered_changed = on_metered };
        struct volume_link *l = g_new0(struct volume_link, 1);
        int r;

        l->name = g_strdup(name);
        l->socket_path = g_strdup(socket_path);
        l->on_state = on_state;
        l->userdata = userdata;
        cb.userdata = l;
        opts.server = server;
        r = netstate_new(&l->ns, &opts, &cb);
        if (r < 0) {
                g_warning("Volume %s: cannot follow the server's reachability: %s", name,
                          g_strerror(-r));
                g_free(l->name);
                g_free(l->socket_path);
                g_free(l);
                return NULL;
        }
        report(l, netstate_state_to_string(netstate_get(l->ns)),
               netstate_reason_to_string(netstate_last_reason(l->ns)));
        return l;
}

void volume_link_free(struct volume_link *l)
{
        if (!l)
                return;
        if (l->busy) {
                l->dead = true;
                return;
        }
        netstate_free(l->ns);
        g_free(l->name);
        g_free(l->socket_path);
        g_free(l);
}

void volume_link_sync(struct volume_link *l)
{
        /* A view left offline (before a restart) comes back when the server is there;
         * a view just started knows nothing of the connection. */
        if (!l)
                return;
        drive(l);
        tell_metered(l);
}

void volume_link_manual(struct volume_link *l, bool disconnect, bool force)
{
        if (!l)
                return;
        l->force = !disconnect && force;
        if (disconnect)
                netstate_disconnect(l->ns);
        else
                netstate_reconnect(l->ns);
}

const char *volume_link_state(const struct volume_link *l)
{
        return l ? l->state : "online";
}

const char *volume_link_reason(const struct volume_link *l)
{
        return l ? l->reason : "start";
}

bool volume_link_metered(const struct volume_link *l)
{
        return l && l->ns && netstate_metered(l->ns);
}
