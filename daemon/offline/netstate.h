/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * netstate.h: the state machine of one volume's connection to its server,
 *
 *     online -> offline -> reintegrating -> online
 *
 * fed by NetworkManager over D-Bus (State and Connectivity, followed through
 * PropertiesChanged; Metered), by TCP connect probes of Server= host:port
 * at an interval with a timeout, by backing I/O timeouts the data plane
 * reports, and by manual disconnect/reconnect (as Coda's cfs does).
 *
 * The server is taken to be reachable when: no manual disconnect is in
 * force; NetworkManager (if it is on the bus) says State >= CONNECTED_LOCAL
 * and Connectivity is not NONE; the last probe (if Server= is set)
 * connected; and no backing timeout or failed reintegration has been
 * reported since the last successful probe (or reconnect).  Unreachable
 * moves online or reintegrating to offline; reachable moves offline to
 * reintegrating, and the owner runs reintegrate_run() and reports the end
 * with netstate_reintegration_done().  Without NetworkManager on the bus
 * (or without a bus) the machine works from probes and timeouts alone.
 *
 * GLib-based: everything runs in the thread-default main context current at
 * netstate_new() (fcached's main loop); callbacks are called from it.  Not
 * thread-safe: call it from that context.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <gio/gio.h>

enum netstate_state {
        NETSTATE_ONLINE = 0,
        NETSTATE_OFFLINE,
        NETSTATE_REINTEGRATING,
        _NETSTATE_STATE_MAX,
};

/* Why the state last changed. */
enum netstate_reason {
        NETSTATE_REASON_START = 0,      /* "start" */
        NETSTATE_REASON_NETWORK,        /* "network": NetworkManager's state or connectivity */
        NETSTATE_REASON_PROBE,          /* "probe": a connect probe of Server= */
        NETSTATE_REASON_TIMEOUT,        /* "timeout": a backing I/O timeout was reported */
        NETSTATE_REASON_MANUAL,         /* "manual": disconnect or reconnect */
        NETSTATE_REASON_REINTEGRATED,   /* "reintegrated": reintegration finished */
        NETSTATE_REASON_REINTEGRATION_FAILED, /* "reintegration-failed" */
        _NETSTATE_REASON_MAX,
};

/* "online", "offline", "reintegrating" (the D-Bus and `query state` values). */
const char *netstate_state_to_string(enum netstate_state s);
const char *netstate_reason_to_string(enum netstate_reason r);

struct netstate_callbacks {
        void (*state_changed)(void *userdata, enum netstate_state old_state,
                              enum netstate_state new_state, enum netstate_reason reason);
        void (*metered_changed)(void *userdata, bool metered);
        void *userdata;
};

struct netstate_options {
        unsigned version;
        /* Server= "host", "host:port" or "[v6]:port"; NULL: no probes. */
        const char *server;
        uint16_t default_port;          /* when server has none (0: 2049, NFS) */
        unsigned probe_interval_ms;     /* 0: 10000 */
        unsigned probe_timeout_ms;      /* 0: 3000 */
        /* The bus NetworkManager is on; NULL: the system bus (a missing bus is fine). */
        GDBusConnection *bus;
        bool no_network_manager;        /* do not look for NetworkManager at all */
};
#define NETSTATE_OPTIONS_VERSION 1
#define NETSTATE_OPTIONS_INIT { NETSTATE_OPTIONS_VERSION }

struct netstate;

/* Starts watching (the first probe runs at once). @cb is copied. */
int netstate_new(struct netstate **out, const struct netstate_options *opts,
                 const struct netstate_callbacks *cb);
void netstate_free(struct netstate *ns);

enum netstate_state netstate_get(const struct netstate *ns);
enum netstate_reason netstate_last_reason(const struct netstate *ns);
/* NetworkManager says the connection is metered (Metered YES or GUESS_YES). */
bool netstate_metered(const struct netstate *ns);
/* NetworkManager owns its name on the bus. */
bool netstate_has_network_manager(const struct netstate *ns);

/* Manual disconnect: offline until netstate_reconnect(). */
void netstate_disconnect(struct netstate *ns);
/* Manual reconnect: clears disconnect and reported timeouts, probes at once. */
void netstate_reconnect(struct netstate *ns);
/* A backing operation exceeded the volume's timeout: offline until a probe succeeds. */
void netstate_report_timeout(struct netstate *ns);
/* Reintegration ended: 0 -> online; -errno -> offline until the next successful probe. */
void netstate_reintegration_done(struct netstate *ns, int result);
/* Runs a probe now (tests; reconnect). */
void netstate_probe_now(struct netstate *ns);
