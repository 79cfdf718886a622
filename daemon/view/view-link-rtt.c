/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-link-rtt.c: the round trip to the server, measured.
 *
 * A network filesystem answers statfs from its server every time (sshfs's
 * statvfs extension, NFS's FSSTAT, SMB's QUERY_FS_INFO), where a stat may
 * come from the client's attribute cache: one fstatfs() of the backing root
 * costs one round trip.  While the volume reaches the server (online or in
 * write-back) a thread times one every RTT_PERIOD_S (under BackingTimeout,
 * as every backing call) and keeps
 * the last RTT_SAMPLES; `query state` reports their median (rtt_ms=, absent
 * until measured, and for a backing on a local filesystem, which has no
 * link), and view_link_poor() says whether it is at least POOR_RTT_US (a
 * LAN answers in well under a millisecond): WriteBack=auto takes such a
 * link as a reason for write-back.  Online, a measurement that fails as the
 * calls of a server gone do (a timeout, a dead mount's ENOTCONN) has the backing
 * probed, which takes the volume offline when it fails too: what notices
 * it while nobody uses the volume.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "view.h"

#define RTT_PERIOD_S 10
#define RTT_SAMPLES 5
#define POOR_RTT_US 5000

static pthread_mutex_t rtt_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t samples[RTT_SAMPLES];   /* microseconds; protected by rtt_lock */
static unsigned nsamples, next_sample;  /* protected by rtt_lock */

static int statfs_root(void *arg)
{
        struct statfs sf;

        return fstatfs(*(int *)arg, &sf) < 0 ? -errno : 0;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

/* The median round trip in microseconds, or 0 before the first measurement. */
static uint64_t rtt_median_us(void)
{
        uint64_t sorted[RTT_SAMPLES];
        unsigned n;

        pthread_mutex_lock(&rtt_lock);
        n = nsamples;
        memcpy(sorted, samples, sizeof(sorted));
        pthread_mutex_unlock(&rtt_lock);
        if (!n)
                return 0;
        qsort(sorted, n, sizeof(sorted[0]), cmp_u64);
        return sorted[n / 2];
}

/* One round trip; returns its time in microseconds, or -errno. */
static int64_t measure(struct view *v)
{
        struct timespec a, b;
        int *fd = malloc(sizeof(*fd));
        int r;

        if (!fd)
                return -ENOMEM;
        *fd = v->root_fd;       /* never closed */
        clock_gettime(CLOCK_MONOTONIC, &a);
        r = backing_call(v, statfs_root, fd, free);
        if (r == -ETIMEDOUT)
                return r;       /* fd is the helper's to free */
        free(fd);
        if (r < 0)
                return r;
        clock_gettime(CLOCK_MONOTONIC, &b);
        return (timespec_ns(&b) - timespec_ns(&a)) / 1000;
}

static void *rtt_thread(void *arg)
{
        struct view *v = arg;

        for (;;) {
                int state = __atomic_load_n(&v->state, __ATOMIC_ACQUIRE);
                int64_t us;

                if (state == VIEW_ONLINE || state == VIEW_WRITEBACK) {
                        us = measure(v);
                        if (state == VIEW_ONLINE && us < 0 &&
                            (us == -ETIMEDOUT || backing_error_gone((int)us)))
                                backing_probe_noticed(v);
                        if (us >= 0) {
                                pthread_mutex_lock(&rtt_lock);
                                samples[next_sample] = (uint64_t)us;
                                next_sample = (next_sample + 1) % RTT_SAMPLES;
                                if (nsamples < RTT_SAMPLES)
                                        nsamples++;
                                pthread_mutex_unlock(&rtt_lock);
                        }
                }
                sleep(RTT_PERIOD_S);
        }
        return NULL;
}

void view_link_rtt_start(struct view *v)
{
        pthread_t t;

        if (v->backing_local)
                return;
        if (pthread_create(&t, NULL, rtt_thread, v) != 0) {
                log_warn("Failed to start the round-trip measurement, ignoring");
                return;
        }
        pthread_detach(t);
}

bool view_link_poor(struct view *v)
{
        uint64_t us = v->backing_local ? 0 : rtt_median_us();

        return us >= POOR_RTT_US;
}

void view_link_rtt_out(struct view *v, GString *out)
{
        uint64_t us = v->backing_local ? 0 : rtt_median_us();

        if (us)
                g_string_append_printf(out, "rtt_ms=%" PRIu64 ".%03" PRIu64 "\n", us / 1000,
                                       us % 1000);
}
