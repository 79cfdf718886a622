/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fcached-main.c: fcached, the fcache control-plane daemon: options, the
 * main loop, the bus name, sd_notify (READY, STOPPING, WATCHDOG) and a
 * clean stop on SIGTERM or SIGINT.
 *
 * Logs go to the journal when stderr is connected to it (under systemd),
 * to stderr otherwise: GLib's default log writer decides.
 */
#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <glib-unix.h>
#include <systemd/sd-daemon.h>

#include "auth.h"
#include "command.h"
#include "fcached.h"
#include "operation.h"
#include "pins.h"
#include "volume-config.h"
#include "objects.h"
#include "volumes.h"

static struct {
        char *state_dir;
        char *volumes_dir;
        char *view_exe;
        char *budget;
        int max_pins;
        gint64 max_files;
        int linger;
        gboolean version;
} opt = {
        .max_pins = 1024,
        .max_files = 50000,
        .linger = 60,
};

static const GOptionEntry entries[] = {
        { "state-dir", 0, 0, G_OPTION_ARG_FILENAME, &opt.state_dir,
          "Where pins persist (default /var/lib/fcache)", "DIR" },
        { "volumes-dir", 0, 0, G_OPTION_ARG_FILENAME, &opt.volumes_dir,
          "Where the volumes' NAME.conf files are (default " VOLUME_CONFIG_DIR ")", "DIR" },
        { "view", 0, 0, G_OPTION_ARG_FILENAME, &opt.view_exe,
          "The fcache-view program that serves a volume (default " FCACHE_VIEW_PATH ")", "PATH" },
        { "pin-budget", 0, 0, G_OPTION_ARG_STRING, &opt.budget,
          "Bytes of pinned files kept resident (default 256M; set cache-size changes it)", "SIZE" },
        { "max-pins", 0, 0, G_OPTION_ARG_INT, &opt.max_pins, "Most pins held (default 1024)", "N" },
        { "max-files", 0, 0, G_OPTION_ARG_INT64, &opt.max_files,
          "Most files held by all pins together (default 50000)", "N" },
        { "operation-linger", 0, 0, G_OPTION_ARG_INT, &opt.linger,
          "Seconds an ended operation stays on the bus (default 60)", "S" },
        { "version", 0, 0, G_OPTION_ARG_NONE, &opt.version, "Show the version", NULL },
        { NULL },
};

static gboolean on_signal(gpointer data)
{
        struct fcd_context *ctx = data;

        g_message("Stopping on a signal");
        sd_notify(0, "STOPPING=1");
        g_main_loop_quit(ctx->loop);
        return G_SOURCE_REMOVE;
}

static gboolean on_watchdog(gpointer data)
{
        sd_notify(0, "WATCHDOG=1");
        return G_SOURCE_CONTINUE;
}

static gboolean on_tick(gpointer data)
{
        return G_SOURCE_CONTINUE; /* only wakes the shutdown loop */
}

static void on_name_acquired(GDBusConnection *bus, const char *name, gpointer data)
{
        struct fcd_context *ctx = data;
        g_autofree char *status = g_strdup_printf("STATUS=Serving %u pins", fcd_pins_count(ctx->pins));

        g_message("Acquired %s on the system bus; ready", name);
        sd_notify(0, "READY=1");
        sd_notify(0, status);
}

static void on_name_lost(GDBusConnection *bus, const char *name, gpointer data)
{
        struct fcd_context *ctx = data;

        g_warning("Lost (or could not own) %s on the system bus; stopping", name);
        ctx->exit_status = 1;
        g_main_loop_quit(ctx->loop);
}

int main(int argc, char **argv)
{
        g_autoptr(GOptionContext) oc = g_option_context_new("- the fcache daemon");
        g_autoptr(GError) error = NULL;
        struct fcd_context ctx = { 0 };
        struct fcd_pins_limits lim = { 0 };
        guint owner = 0, wd_timer = 0;
        uint64_t wd_usec = 0;
        int status = 0;

        setlocale(LC_ALL, "");
        g_set_prgname("fcached");
        g_option_context_add_main_entries(oc, entries, NULL);
        if (!g_option_context_parse(oc, &argc, &argv, &error)) {
                fprintf(stderr, "fcached: %s\n", error->message);
                return 2;
        }
        if (opt.version) {
                printf("fcached %s\n", FCACHE_VERSION);
                return 0;
        }
        lim.max_pins = opt.max_pins > 0 ? (guint)opt.max_pins : 1;
        lim.max_files = opt.max_files > 0 ? (guint64)opt.max_files : 1;
        lim.budget_bytes = 256ull << 20;
        if (opt.budget && fc_parse_size(opt.budget, &lim.budget_bytes) < 0) {
                fprintf(stderr, "fcached: --pin-budget: '%s' is not a size\n", opt.budget);
                return 2;
        }
        if (geteuid() != 0)
                g_warning("Not running as root: callers' identities cannot be taken on, so only "
                          "calls from this user will work");

        ctx.state_dir = opt.state_dir ? opt.state_dir : g_strdup("/var/lib/fcache");
        ctx.operation_linger_s = opt.linger > 0 ? (guint)opt.linger : 1;
        ctx.loop = g_main_loop_new(NULL, FALSE);
        ctx.operations = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL,
                                               fcd_operation_destroy);
        ctx.pins = fcd_pins_new(&ctx, ctx.state_dir, &lim, &error);
        if (!ctx.pins) {
                g_warning("Failed to start: %s", error->message);
                return 1;
        }
        fcd_pins_load(ctx.pins);
        ctx.volumes = fcd_volumes_start(opt.volumes_dir ? opt.volumes_dir : VOLUME_CONFIG_DIR,
                                        opt.view_exe ? opt.view_exe : FCACHE_VIEW_PATH);

        ctx.bus = g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, &error);
        if (!ctx.bus) {
                g_warning("Failed to connect to the system bus: %s", error->message);
                fcd_pins_free(ctx.pins);
                return 1;
        }
        g_dbus_connection_set_exit_on_close(ctx.bus, FALSE);
        fcd_auth_init(ctx.bus);
        if (fcd_manager_export(&ctx, &error) < 0) {
                g_warning("Failed to export %s: %s", FCD_MANAGER_PATH, error->message);
                return 1;
        }
        if (fcd_objects_start(&ctx, &error) < 0) {
                g_warning("Failed to export %s: %s", FCD_OBJECT_MANAGER_PATH, error->message);
                return 1;
        }
        owner = g_bus_own_name_on_connection(ctx.bus, FCD_BUS_NAME,
                                             G_BUS_NAME_OWNER_FLAGS_DO_NOT_QUEUE,
                                             on_name_acquired, on_name_lost, &ctx, NULL);
        g_unix_signal_add(SIGTERM, on_signal, &ctx);
        g_unix_signal_add(SIGINT, on_signal, &ctx);
        if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec > 0)
                wd_timer = g_timeout_add(MAX(wd_usec / 2000, 1), on_watchdog, NULL);

        g_main_loop_run(ctx.loop);

        status = ctx.exit_status;
        /* Workers still running use the registry: stop them and let them finish first. */
        g_bus_unown_name(owner);
        owner = 0;
        fcd_operations_cancel_all(&ctx);
        if (fcd_tasks_in_flight) {
                gint64 deadline = g_get_monotonic_time() + 30 * G_USEC_PER_SEC;
                guint tick = g_timeout_add_seconds(1, on_tick, NULL);

                g_message("Waiting for %u requests in progress", fcd_tasks_in_flight);
                while (fcd_tasks_in_flight && g_get_monotonic_time() < deadline)
                        g_main_context_iteration(NULL, TRUE);
                g_source_remove(tick);
                if (fcd_tasks_in_flight) {
                        /* Freeing what they use would be worse than leaking it. */
                        g_warning("%u requests did not finish in 30 s; stopping without "
                                  "cleaning up", fcd_tasks_in_flight);
                        return 1;
                }
        }
        if (wd_timer)
                g_source_remove(wd_timer);
        fcd_operations_free_all(&ctx);
        fcd_objects_free(&ctx);
        g_dbus_interface_skeleton_unexport(G_DBUS_INTERFACE_SKELETON(ctx.manager));
        g_object_unref(ctx.manager);
        ctx.manager = NULL;
        fcd_auth_done(ctx.bus);
        g_dbus_connection_flush_sync(ctx.bus, NULL, NULL);
        g_object_unref(ctx.bus);
        fcd_pins_free(ctx.pins);
        fcd_volumes_free(ctx.volumes); /* the views keep serving: see volumes.h */
        g_hash_table_unref(ctx.operations);
        g_main_loop_unref(ctx.loop);
        g_free(ctx.state_dir);
        g_free(opt.budget);
        g_free(opt.volumes_dir);
        g_free(opt.view_exe);
        g_message("Stopped");
        return status;
}
