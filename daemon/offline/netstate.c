/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * netstate.c: the volume connection state machine (see netstate.h).
 *
 * NetworkManager is followed with a GDBusProxy on org.freedesktop.NetworkManager
 * (no auto-start): its cached State, Connectivity and Metered properties
 * are updated by PropertiesChanged, and its name owner tells whether NM is
 * there at all, so NM may come and go.  Probes are asynchronous connects
 * with GSocketClient, cancelled by a timer after probe_timeout_ms; a probe
 * is never started while one is running.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "netstate.h"

#define NM_NAME "org.freedesktop.NetworkManager"
#define NM_PATH "/org/freedesktop/NetworkManager"
#define NM_STATE_CONNECTED_LOCAL 50
#define NM_CONNECTIVITY_NONE 1
#define NM_METERED_YES 1
#define NM_METERED_GUESS_YES 3

struct netstate {
        struct netstate_callbacks cb;
        char *server;
        uint16_t port;
        unsigned interval_ms, timeout_ms;
        GMainContext *ctx;

        enum netstate_state state;
        enum netstate_reason reason;
        bool manual;            /* disconnect in force */
        bool failed;            /* a timeout or failed reintegration since the last good probe */
        bool probe_ok;          /* the last probe connected (true until the first says otherwise) */
        bool metered;

        GDBusProxy *nm;
        bool nm_present;
        uint32_t nm_state, nm_connectivity;

        GSocketClient *client;
        GCancellable *probe;    /* the probe running, or NULL */
        GSource *probe_timer;   /* its timeout */
        GSource *interval;      /* the next probe */
        GCancellable *life;     /* cancelled at free: late probe results are dropped */
};

const char *netstate_state_to_string(enum netstate_state s)
{
        static const char *const names[] = { "online", "offline", "reintegrating" };

        return (unsigned)s < _NETSTATE_STATE_MAX ? names[s] : NULL;
}

const char *netstate_reason_to_string(enum netstate_reason r)
{
        static const char *const names[] = { "start", "network", "probe", "timeout", "manual",
                                             "reintegrated", "reintegration-failed" };

        return (unsigned)r < _NETSTATE_REASON_MAX ? names[r] : NULL;
}

static bool network_ok(const struct netstate *ns)
{
        if (!ns->nm_present)
                return true;
        return ns->nm_state >= NM_STATE_CONNECTED_LOCAL &&
               ns->nm_connectivity != NM_CONNECTIVITY_NONE;
}

static bool reachable(const struct netstate *ns)
{
        return !ns->manual && !ns->failed && network_ok(ns) && (!ns->server || ns->probe_ok);
}

static void set_state(struct netstate *ns, enum netstate_state to, enum netstate_reason why)
{
        enum netstate_state from = ns->state;

        if (from == to)
                return;
        ns->state = to;
        ns->reason = why;
        if (ns->cb.state_changed)
                ns->cb.state_changed(ns->cb.userdata, from, to, why);
}

/* Re-evaluates after an input changed for @why. */
static void update(struct netstate *ns, enum netstate_reason why)
{
        bool up = reachable(ns);

        if (!up && ns->state != NETSTATE_OFFLINE)
                set_state(ns, NETSTATE_OFFLINE, why);
        else if (up && ns->state == NETSTATE_OFFLINE)
                set_state(ns, NETSTATE_REINTEGRATING, why);
}

/* ------------------------------------------------------------------------ */
/* NetworkManager                                                           */
/* ------------------------------------------------------------------------ */

static uint32_t nm_uint(GDBusProxy *p, const char *name, uint32_t dflt)
{
        GVariant *v = g_dbus_proxy_get_cached_property(p, name);
        uint32_t r = dflt;

        if (v && g_variant_is_of_type(v, G_VARIANT_TYPE_UINT32))
                r = g_variant_get_uint32(v);
        if (v)
                g_variant_unref(v);
        return r;
}

static void nm_read(struct netstate *ns)
{
        char *owner = g_dbus_proxy_get_name_owner(ns->nm);
        bool metered;

        ns->nm_present = owner != NULL;
        g_free(owner);
        /* Unknown values (an NM without them) count as connected. */
        ns->nm_state = nm_uint(ns->nm, "State", 70);
        ns->nm_connectivity = nm_uint(ns->nm, "Connectivity", 4);
        metered = ns->nm_present && (nm_uint(ns->nm, "Metered", 0) == NM_METERED_YES ||
                                     nm_uint(ns->nm, "Metered", 0) == NM_METERED_GUESS_YES);
        if (metered != ns->metered) {
                ns->metered = metered;
                if (ns->cb.metered_changed)
                        ns->cb.metered_changed(ns->cb.userdata, metered);
        }
}

/* NetworkManager's view changed; a network that comes back also clears reported timeouts. */
static void nm_update(struct netstate *ns)
{
        bool was_ok = network_ok(ns);

        nm_read(ns);
        if (!was_ok && network_ok(ns)) {
                ns->failed = false;
                netstate_probe_now(ns);
        }
        update(ns, NETSTATE_REASON_NETWORK);
}

static void nm_changed(GDBusProxy *p, GVariant *changed, GStrv invalidated, gpointer ud)
{
        nm_update(ud);
}

static void nm_owner(GObject *obj, GParamSpec *pspec, gpointer ud)
{
        nm_update(ud);
}

static void nm_watch(struct netstate *ns, GDBusConnection *bus)
{
        GDBusConnection *conn = bus ? g_object_ref(bus) : g_bus_get_sync(G_BUS_TYPE_SYSTEM,
                                                                          NULL, NULL);

        if (!conn)
                return; /* no system bus: probes and timeouts alone */
        ns->nm = g_dbus_proxy_new_sync(conn, G_DBUS_PROXY_FLAGS_DO_NOT_AUTO_START |
                                       G_DBUS_PROXY_FLAGS_GET_INVALIDATED_PROPERTIES, NULL,
                                       NM_NAME, NM_PATH, NM_NAME, NULL, NULL);
        g_object_unref(conn);
        if (!ns->nm)
                return;
        g_signal_connect(ns->nm, "g-properties-changed", G_CALLBACK(nm_changed), ns);
        g_signal_connect(ns->nm, "notify::g-name-owner", G_CALLBACK(nm_owner), ns);
        nm_read(ns);
}

/* ------------------------------------------------------------------------ */
/* Probes                                                                   */
/* ------------------------------------------------------------------------ */

static void schedule(struct netstate *ns, unsigned ms);
void netstate_probe_now(struct netstate *ns);

struct probe {
        struct netstate *ns;
        GCancellable *life;
};

static void probe_finish(struct netstate *ns, bool ok)
{
        if (ns->probe_timer) {
                g_source_destroy(ns->probe_timer);
                g_source_unref(ns->probe_timer);
                ns->probe_timer = NULL;
        }
        g_clear_object(&ns->probe);
        ns->probe_ok = ok;
        if (ok)
                ns->failed = false;
        update(ns, NETSTATE_REASON_PROBE);
        schedule(ns, ns->interval_ms);
}

static void probe_done(GObject *src, GAsyncResult *res, gpointer ud)
{
        struct probe *p = ud;
        GSocketConnection *conn;
        GError *err = NULL;

        conn = g_socket_client_connect_to_host_finish(G_SOCKET_CLIENT(src), res, &err);
        if (!g_cancellable_is_cancelled(p->life))
                probe_finish(p->ns, conn != NULL);
        if (conn) {
                g_io_stream_close(G_IO_STREAM(conn), NULL, NULL);
                g_object_unref(conn);
        }
        g_clear_error(&err);
        g_object_unref(p->life);
        g_free(p);
}

static gboolean probe_timeout(gpointer ud)
{
        struct netstate *ns = ud;

        if (ns->probe)
                g_cancellable_cancel(ns->probe); /* probe_done reports the failure */
        return G_SOURCE_REMOVE;
}

void netstate_probe_now(struct netstate *ns)
{
        struct probe *p;

        if (!ns->server || ns->probe)
                return;
        p = g_new0(struct probe, 1);
        p->ns = ns;
        p->life = g_object_ref(ns->life);
        ns->probe = g_cancellable_new();
        ns->probe_timer = g_timeout_source_new(ns->timeout_ms);
        g_source_set_callback(ns->probe_timer, probe_timeout, ns, NULL);
        g_source_attach(ns->probe_timer, ns->ctx);
        g_socket_client_connect_to_host_async(ns->client, ns->server, ns->port, ns->probe,
                                              probe_done, p);
}

static gboolean interval_fired(gpointer ud)
{
        struct netstate *ns = ud;

        g_source_unref(ns->interval);
        ns->interval = NULL;
        netstate_probe_now(ns);
        return G_SOURCE_REMOVE;
}

static void schedule(struct netstate *ns, unsigned ms)
{
        if (!ns->server)
                return;
        if (ns->interval) {
                g_source_destroy(ns->interval);
                g_source_unref(ns->interval);
        }
        ns->interval = g_timeout_source_new(ms);
        g_source_set_callback(ns->interval, interval_fired, ns, NULL);
        g_source_attach(ns->interval, ns->ctx);
}

/* ------------------------------------------------------------------------ */

int netstate_new(struct netstate **out, const struct netstate_options *opts,
                 const struct netstate_callbacks *cb)
{
        struct netstate *ns;

        if (!out || !opts || opts->version != NETSTATE_OPTIONS_VERSION)
                return -EINVAL;
        if (opts->server && (!*opts->server || strlen(opts->server) > 1024))
                return -EINVAL;
        ns = calloc(1, sizeof(*ns));
        if (!ns)
                return -ENOMEM;
        if (cb)
                ns->cb = *cb;
        if (opts->server) {
                ns->server = strdup(opts->server);
                if (!ns->server) {
                        free(ns);
                        return -ENOMEM;
                }
        }
        ns->port = opts->default_port ? opts->default_port : 2049;
        ns->interval_ms = opts->probe_interval_ms ? opts->probe_interval_ms : 10000;
        ns->timeout_ms = opts->probe_timeout_ms ? opts->probe_timeout_ms : 3000;
        ns->ctx = g_main_context_ref_thread_default();
        ns->life = g_cancellable_new();
        ns->client = g_socket_client_new();
        ns->probe_ok = true;
        ns->state = NETSTATE_ONLINE;
        ns->reason = NETSTATE_REASON_START;
        if (!opts->no_network_manager)
                nm_watch(ns, opts->bus);
        /* The initial state, without a callback: the owner reads netstate_get(). */
        if (!reachable(ns)) {
                ns->state = NETSTATE_OFFLINE;
                ns->reason = NETSTATE_REASON_NETWORK;
        }
        netstate_probe_now(ns);
        *out = ns;
        return 0;
}

void netstate_free(struct netstate *ns)
{
        if (!ns)
                return;
        g_cancellable_cancel(ns->life);
        if (ns->probe)
                g_cancellable_cancel(ns->probe);
        g_clear_object(&ns->probe);
        if (ns->probe_timer) {
                g_source_destroy(ns->probe_timer);
                g_source_unref(ns->probe_timer);
        }
        if (ns->interval) {
                g_source_destroy(ns->interval);
                g_source_unref(ns->interval);
        }
        if (ns->nm) {
                g_signal_handlers_disconnect_by_data(ns->nm, ns);
                g_object_unref(ns->nm);
        }
        g_object_unref(ns->client);
        g_object_unref(ns->life);
        g_main_context_unref(ns->ctx);
        free(ns->server);
        free(ns);
}

enum netstate_state netstate_get(const struct netstate *ns)
{
        return ns->state;
}

enum netstate_reason netstate_last_reason(const struct netstate *ns)
{
        return ns->reason;
}

bool netstate_metered(const struct netstate *ns)
{
        return ns->metered;
}

bool netstate_has_network_manager(const struct netstate *ns)
{
        return ns->nm_present;
}

void netstate_disconnect(struct netstate *ns)
{
        ns->manual = true;
        update(ns, NETSTATE_REASON_MANUAL);
}

void netstate_reconnect(struct netstate *ns)
{
        ns->manual = false;
        ns->failed = false;
        update(ns, NETSTATE_REASON_MANUAL);
        netstate_probe_now(ns);
}

void netstate_report_timeout(struct netstate *ns)
{
        ns->failed = true;
        update(ns, NETSTATE_REASON_TIMEOUT);
        /* Find out soon when it is back. */
        schedule(ns, ns->interval_ms);
}

void netstate_reintegration_done(struct netstate *ns, int result)
{
        if (ns->state != NETSTATE_REINTEGRATING)
                return;
        if (result >= 0 && reachable(ns)) {
                set_state(ns, NETSTATE_ONLINE, NETSTATE_REASON_REINTEGRATED);
                return;
        }
        if (result < 0)
                ns->failed = true;
        set_state(ns, NETSTATE_OFFLINE, result < 0 ? NETSTATE_REASON_REINTEGRATION_FAILED
                                                   : ns->reason);
        schedule(ns, ns->interval_ms);
}
