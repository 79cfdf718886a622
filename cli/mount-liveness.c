/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mount-liveness.c: is a mount alive, asked without hanging the asker.
 *
 * Any call into a dead hard NFS mount or a stopped FUSE server blocks,
 * uninterruptibly, until the server returns.  Commands that walk every
 * mount (flush all) first ask each one a statfs on a helper thread and wait
 * a bounded time; a mount that does not answer is skipped and reported.
 * The helper owns its copy of the path and frees it whenever it returns.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <time.h>

#include "mounts.h"

struct probe {
        pthread_mutex_t lock;
        pthread_cond_t done_cond;
        int refs;               /* the asker and the helper */
        bool done;
        int result;
        char *path;
};

static void probe_put(struct probe *p)
{
        bool last;

        pthread_mutex_lock(&p->lock);
        last = --p->refs == 0;
        pthread_mutex_unlock(&p->lock);
        if (!last)
                return;
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->done_cond);
        free(p->path);
        free(p);
}

static void *probe_thread(void *arg)
{
        struct probe *p = arg;
        struct statfs sf;
        int r = statfs(p->path, &sf) < 0 ? -errno : 0;

        pthread_mutex_lock(&p->lock);
        p->result = r;
        p->done = true;
        pthread_cond_signal(&p->done_cond);
        pthread_mutex_unlock(&p->lock);
        probe_put(p);
        return NULL;
}

int fc_mount_answers(const char *mount_point, int timeout_ms, char *why, size_t why_len)
{
        struct probe *p = calloc(1, sizeof(*p));
        pthread_condattr_t ca;
        struct timespec until;
        pthread_attr_t ta;
        pthread_t t;
        int r;

        if (!p || !(p->path = strdup(mount_point))) {
                free(p);
                snprintf(why, why_len, "out of memory");
                return -ENOMEM;
        }
        pthread_mutex_init(&p->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&p->done_cond, &ca);
        pthread_condattr_destroy(&ca);
        p->refs = 2;
        pthread_attr_init(&ta);
        pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&ta, 64 * 1024);
        r = pthread_create(&t, &ta, probe_thread, p);
        pthread_attr_destroy(&ta);
        if (r) {
                p->refs = 1;
                probe_put(p);
                snprintf(why, why_len, "cannot start a helper thread: %s", strerror(r));
                return -r;
        }
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&p->lock);
        while (!p->done && pthread_cond_timedwait(&p->done_cond, &p->lock, &until) != ETIMEDOUT)
                ;
        r = p->done ? p->result : -ETIMEDOUT;
        pthread_mutex_unlock(&p->lock);
        probe_put(p);
        if (r == -ETIMEDOUT)
                snprintf(why, why_len, "does not answer (statfs took longer than %d ms: a dead "
                         "server or a stopped FUSE daemon)", timeout_ms);
        else if (r < 0)
                snprintf(why, why_len, "statfs: %s", strerror(-r));
        return r;
}
