/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-netstate.c: the volume state machine against a local TCP listener
 * (probes), reported timeouts, manual disconnect/reconnect, and
 * python3-dbusmock's NetworkManager template on a private bus (State,
 * Connectivity, Metered, NetworkManager going away).
 */
#include <errno.h>
#include <gio/gio.h>
#include <glib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netstate.h"

struct watch {
        enum netstate_state state;
        enum netstate_reason reason;
        unsigned changes;
        bool metered;
        unsigned metered_changes;
        GString *trace;
};

static void on_state(void *ud, enum netstate_state from, enum netstate_state to,
                     enum netstate_reason why)
{
        struct watch *w = ud;

        w->state = to;
        w->reason = why;
        w->changes++;
        g_string_append_printf(w->trace, "%s(%s) ", netstate_state_to_string(to),
                               netstate_reason_to_string(why));
}

static void on_metered(void *ud, bool metered)
{
        struct watch *w = ud;

        w->metered = metered;
        w->metered_changes++;
}

/* Runs the main loop until @ns is in @state, or @ms pass. */
static bool wait_state(struct netstate *ns, enum netstate_state state, unsigned ms)
{
        gint64 end = g_get_monotonic_time() + (gint64)ms * 1000;

        while (netstate_get(ns) != state && g_get_monotonic_time() < end)
                g_main_context_iteration(NULL, FALSE), g_usleep(2000);
        return netstate_get(ns) == state;
}

static void spin(unsigned ms)
{
        gint64 end = g_get_monotonic_time() + (gint64)ms * 1000;

        while (g_get_monotonic_time() < end)
                g_main_context_iteration(NULL, FALSE), g_usleep(2000);
}

struct listener {
        GSocketListener *l;
        guint16 port;
};

static void listen_on(struct listener *l)
{
        GError *err = NULL;
        GInetAddress *lo = g_inet_address_new_loopback(G_SOCKET_FAMILY_IPV4);
        GSocketAddress *addr = g_inet_socket_address_new(lo, l->port), *effective = NULL;

        l->l = g_socket_listener_new();
        g_assert_true(g_socket_listener_add_address(l->l, addr, G_SOCKET_TYPE_STREAM,
                                                    G_SOCKET_PROTOCOL_TCP, NULL, &effective, &err));
        g_assert_no_error(err);
        l->port = g_inet_socket_address_get_port(G_INET_SOCKET_ADDRESS(effective));
        g_object_unref(effective);
        g_object_unref(addr);
        g_object_unref(lo);
}

static void listen_stop(struct listener *l)
{
        g_socket_listener_close(l->l);
        g_clear_object(&l->l);
}

static struct netstate *start(struct watch *w, const char *server, GDBusConnection *bus,
                              bool no_nm)
{
        struct netstate_options o = NETSTATE_OPTIONS_INIT;
        struct netstate_callbacks cb = { on_state, on_metered, w };
        struct netstate *ns;

        memset(w, 0, sizeof(*w));
        w->trace = g_string_new(NULL);
        o.server = server;
        o.probe_interval_ms = 100;
        o.probe_timeout_ms = 300;
        o.bus = bus;
        o.no_network_manager = no_nm;
        g_assert_cmpint(netstate_new(&ns, &o, &cb), ==, 0);
        return ns;
}

static void stop(struct netstate *ns, struct watch *w)
{
        netstate_free(ns);
        g_string_free(w->trace, TRUE);
}

static void test_probes(void)
{
        struct listener l = { 0 };
        struct watch w;
        struct netstate *ns;
        char *server;

        listen_on(&l);
        server = g_strdup_printf("127.0.0.1:%u", l.port);
        ns = start(&w, server, NULL, true);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_ONLINE);
        spin(300);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_ONLINE); /* probes keep succeeding */
        listen_stop(&l);
        g_assert_true(wait_state(ns, NETSTATE_OFFLINE, 2000));
        g_assert_cmpint(w.reason, ==, NETSTATE_REASON_PROBE);
        listen_on(&l); /* the same port again */
        g_assert_true(wait_state(ns, NETSTATE_REINTEGRATING, 2000));
        g_assert_cmpint(w.reason, ==, NETSTATE_REASON_PROBE);
        netstate_reintegration_done(ns, 0);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_ONLINE);
        g_assert_cmpint(w.reason, ==, NETSTATE_REASON_REINTEGRATED);
        g_assert_cmpstr(w.trace->str, ==, "offline(probe) reintegrating(probe) online(reintegrated) ");
        stop(ns, &w);
        listen_stop(&l);
        g_free(server);
}

static void test_manual(void)
{
        struct listener l = { 0 };
        struct watch w;
        struct netstate *ns;
        char *server;

        listen_on(&l);
        server = g_strdup_printf("127.0.0.1:%u", l.port);
        ns = start(&w, server, NULL, true);
        netstate_disconnect(ns);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_OFFLINE);
        g_assert_cmpint(w.reason, ==, NETSTATE_REASON_MANUAL);
        spin(400); /* reachable, but a disconnect holds */
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_OFFLINE);
        netstate_reconnect(ns);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_REINTEGRATING);
        /* The server drops mid-replay: back offline, then resumed by the next good probe. */
        netstate_reintegration_done(ns, -EIO);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_OFFLINE);
        g_assert_cmpint(w.reason, ==, NETSTATE_REASON_REINTEGRATION_FAILED);
        g_assert_true(wait_state(ns, NETSTATE_REINTEGRATING, 2000));
        netstate_reintegration_done(ns, 0);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_ONLINE);
        stop(ns, &w);
        listen_stop(&l);
        g_free(server);
}

static void test_timeout_report(void)
{
        struct listener l = { 0 };
        struct watch w;
        struct netstate *ns;
        char *server;

        listen_on(&l);
        server = g_strdup_printf("127.0.0.1:%u", l.port);
        ns = start(&w, server, NULL, true);
        netstate_report_timeout(ns);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_OFFLINE);
        g_assert_cmpint(w.reason, ==, NETSTATE_REASON_TIMEOUT);
        g_assert_true(wait_state(ns, NETSTATE_REINTEGRATING, 2000));
        stop(ns, &w);
        listen_stop(&l);
        g_free(server);
}

static void test_no_server_no_nm(void)
{
        struct watch w;
        struct netstate *ns = start(&w, NULL, NULL, true);

        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_ONLINE);
        g_assert_false(netstate_has_network_manager(ns));
        netstate_report_timeout(ns);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_OFFLINE);
        spin(200);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_OFFLINE); /* nothing to probe */
        netstate_reconnect(ns);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_REINTEGRATING);
        stop(ns, &w);
}

static void test_probe_refused(void)
{
        struct watch w;
        struct netstate *ns;

        /* A closed port: the first probe fails and the volume goes offline at once. */
        ns = start(&w, "127.0.0.1:1", NULL, true);
        g_assert_true(wait_state(ns, NETSTATE_OFFLINE, 2000));
        g_assert_cmpint(w.reason, ==, NETSTATE_REASON_PROBE);
        stop(ns, &w);
}

/* ------------------------------------------------------------------------ */
/* NetworkManager (python3-dbusmock)                                        */
/* ------------------------------------------------------------------------ */

static void mock_call(GDBusConnection *c, const char *method, GVariant *args)
{
        GError *err = NULL;
        GVariant *r = g_dbus_connection_call_sync(c, "org.freedesktop.NetworkManager",
                                                  "/org/freedesktop/NetworkManager",
                                                  "org.freedesktop.DBus.Mock", method, args, NULL,
                                                  G_DBUS_CALL_FLAGS_NONE, 5000, NULL, &err);

        g_assert_no_error(err);
        g_variant_unref(r);
}

static void test_network_manager(void)
{
        const char *py = "/usr/bin/python3";
        char *argv[] = { (char *)py, "-m", "dbusmock", "--session", "--template", "networkmanager",
                         NULL };
        GTestDBus *tbus;
        GDBusConnection *conn;
        GError *err = NULL;
        GPid pid;
        struct watch w;
        struct netstate *ns;
        gint64 end;
        int status;

        char *daemon = g_find_program_in_path("dbus-daemon");

        if (!daemon || !g_file_test(py, G_FILE_TEST_IS_EXECUTABLE) ||
            system("/usr/bin/python3 -c 'import dbusmock' 2>/dev/null") != 0) {
                g_free(daemon);
                g_test_skip("needs python3-dbusmock and dbus-daemon");
                return;
        }
        g_free(daemon);
        tbus = g_test_dbus_new(G_TEST_DBUS_NONE);
        g_test_dbus_up(tbus);
        conn = g_dbus_connection_new_for_address_sync(g_test_dbus_get_bus_address(tbus),
                        G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
                        G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION, NULL, NULL, &err);
        g_assert_no_error(err);

        /* Before NetworkManager appears: probes and timeouts alone (no server: online). */
        ns = start(&w, NULL, conn, false);
        g_assert_false(netstate_has_network_manager(ns));
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_ONLINE);

        g_assert_true(g_spawn_async(NULL, argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD |
                                    G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, &pid, &err));
        g_assert_no_error(err);
        end = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
        while (!netstate_has_network_manager(ns) && g_get_monotonic_time() < end)
                spin(20);
        g_assert_true(netstate_has_network_manager(ns));
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_ONLINE); /* the template: State 70 */

        mock_call(conn, "SetGlobalConnectionState", g_variant_new("(u)", 20));
        g_assert_true(wait_state(ns, NETSTATE_OFFLINE, 3000));
        g_assert_cmpint(w.reason, ==, NETSTATE_REASON_NETWORK);
        mock_call(conn, "SetGlobalConnectionState", g_variant_new("(u)", 70));
        g_assert_true(wait_state(ns, NETSTATE_REINTEGRATING, 3000));
        netstate_reintegration_done(ns, 0);
        g_assert_cmpint(netstate_get(ns), ==, NETSTATE_ONLINE);

        mock_call(conn, "SetConnectivity", g_variant_new("(u)", 1)); /* NONE */
        g_assert_true(wait_state(ns, NETSTATE_OFFLINE, 3000));
        mock_call(conn, "SetConnectivity", g_variant_new("(u)", 4));
        g_assert_true(wait_state(ns, NETSTATE_REINTEGRATING, 3000));
        netstate_reintegration_done(ns, 0);

        /* Metered is not in the template: add it, then change it. */
        g_assert_false(netstate_metered(ns));
        mock_call(conn, "AddProperty", g_variant_new("(ssv)", "org.freedesktop.NetworkManager",
                                                     "Metered", g_variant_new_uint32(2)));
        mock_call(conn, "SetProperty", g_variant_new("(sssv)", "/org/freedesktop/NetworkManager",
                                                     "org.freedesktop.NetworkManager", "Metered",
                                                     g_variant_new_uint32(1)));
        end = g_get_monotonic_time() + 3 * G_USEC_PER_SEC;
        while (!netstate_metered(ns) && g_get_monotonic_time() < end)
                spin(20);
        g_assert_true(netstate_metered(ns));
        g_assert_cmpuint(w.metered_changes, ==, 1);

        /* NetworkManager says offline, then goes away: the volume works without it. */
        mock_call(conn, "SetGlobalConnectionState", g_variant_new("(u)", 20));
        g_assert_true(wait_state(ns, NETSTATE_OFFLINE, 3000));
        kill(pid, SIGTERM);
        g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
        g_spawn_close_pid(pid);
        g_assert_true(wait_state(ns, NETSTATE_REINTEGRATING, 3000));
        g_assert_false(netstate_has_network_manager(ns));
        g_assert_false(netstate_metered(ns));

        stop(ns, &w);
        g_object_unref(conn);
        g_test_dbus_down(tbus);
        g_object_unref(tbus);
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/fcache/offline/netstate/probes", test_probes);
        g_test_add_func("/fcache/offline/netstate/manual", test_manual);
        g_test_add_func("/fcache/offline/netstate/timeout-report", test_timeout_report);
        g_test_add_func("/fcache/offline/netstate/no-server-no-nm", test_no_server_no_nm);
        g_test_add_func("/fcache/offline/netstate/probe-refused", test_probe_refused);
        g_test_add_func("/fcache/offline/netstate/network-manager", test_network_manager);
        return g_test_run();
}
