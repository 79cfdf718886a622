/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * dbus-load.c: load on fcached. CLIENTS processes, each with its own bus
 * connection, make CALLS synchronous calls each (Query PATH cached, which
 * goes through credentials, polkit, the caller-identity worker and the
 * user-space backend), and the parent reports calls/s and latency
 * percentiles. Exit status 1 if any call failed.
 *
 *   dbus-load CLIENTS CALLS PATH
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

static double now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

static int client(int calls, const char *path, int out)
{
        sd_bus *bus = NULL;
        double *lat = calloc((size_t)calls, sizeof(double));
        int r, failed = 0;

        if (!lat || sd_bus_open_system(&bus) < 0)
                return 1;
        for (int i = 0; i < calls; i++) {
                sd_bus_error err = SD_BUS_ERROR_NULL;
                sd_bus_message *reply = NULL;
                double t0 = now();

                r = sd_bus_call_method(bus, "org.fcache.Manager1", "/org/fcache/Manager1",
                                       "org.fcache.Manager1", "Query", &err, &reply, "ssb", path,
                                       "cached", 0);
                lat[i] = now() - t0;
                if (r < 0 && failed++ < 3)
                        fprintf(stderr, "dbus-load: call failed: %s\n", err.message);
                sd_bus_error_free(&err);
                sd_bus_message_unref(reply);
        }
        if (write(out, lat, sizeof(double) * (size_t)calls) != (ssize_t)(sizeof(double) * (size_t)calls))
                failed++;
        sd_bus_flush_close_unref(bus);
        free(lat);
        return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
        int clients, calls, failed = 0;
        char tmpl[] = "/tmp/dbus-load-XXXXXX";
        double t0, elapsed, *all;
        size_t total;

        if (argc != 4 || (clients = atoi(argv[1])) < 1 || (calls = atoi(argv[2])) < 1) {
                fprintf(stderr, "usage: dbus-load CLIENTS CALLS PATH\n");
                return 2;
        }
        int fd = mkstemp(tmpl);
        if (fd < 0)
                return 2;
        unlink(tmpl);
        t0 = now();
        for (int c = 0; c < clients; c++) {
                pid_t pid = fork();
                if (pid == 0)
                        _exit(client(calls, argv[3], fd));
                if (pid < 0)
                        return 2;
        }
        for (int c = 0; c < clients; c++) {
                int st;
                if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
                        failed++;
        }
        elapsed = now() - t0;
        total = (size_t)clients * (size_t)calls;
        all = malloc(total * sizeof(double));
        if (!all || pread(fd, all, total * sizeof(double), 0) != (ssize_t)(total * sizeof(double))) {
                fprintf(stderr, "dbus-load: lost the latencies\n");
                return 1;
        }
        qsort(all, total, sizeof(double), cmp);
        printf("dbus-load: %d clients x %d calls = %zu calls in %.2f s: %.0f calls/s, "
               "latency p50 %.2f ms, p99 %.2f ms, max %.2f ms; %d clients failed\n", clients, calls,
               total, elapsed, (double)total / elapsed, all[total / 2] * 1e3,
               all[total * 99 / 100] * 1e3, all[total - 1] * 1e3, failed);
        free(all);
        return failed ? 1 : 0;
}
