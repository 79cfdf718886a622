/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fault.c: FCACHE_FAULT=<point>:<n> crash points and FCACHE_FAULT_PAUSE
 * pauses (see fault.h).  The spec is
 * parsed once; each armed point keeps an atomic pass counter, so points may
 * be passed from several threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"

#define FAULT_MAX 8
#define FAULT_NAME_MAX 64

struct fault {
        char name[FAULT_NAME_MAX];
        unsigned long target;
        atomic_ulong passed;
};

static struct fault faults[FAULT_MAX];
static int n_faults;
static atomic_int loaded; /* 0: not yet, 1: parsed */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static void parse(const char *spec)
{
        n_faults = 0;
        while (spec && *spec && n_faults < FAULT_MAX) {
                const char *end = strchrnul(spec, ','), *colon = memchr(spec, ':', end - spec);
                char *num_end;
                unsigned long n;

                if (colon && colon > spec && (size_t)(colon - spec) < FAULT_NAME_MAX) {
                        errno = 0;
                        n = strtoul(colon + 1, &num_end, 10);
                        if (errno == 0 && num_end == end && n >= 1) {
                                struct fault *f = &faults[n_faults++];

                                memcpy(f->name, spec, colon - spec);
                                f->name[colon - spec] = '\0';
                                f->target = n;
                                atomic_store(&f->passed, 0);
                        }
                }
                spec = *end ? end + 1 : end;
        }
}

static void load(bool force)
{
        if (!force && atomic_load_explicit(&loaded, memory_order_acquire))
                return;
        pthread_mutex_lock(&load_lock);
        if (force || !atomic_load(&loaded)) {
                parse(getenv("FCACHE_FAULT"));
                atomic_store_explicit(&loaded, 1, memory_order_release);
        }
        pthread_mutex_unlock(&load_lock);
}

void fault_reload(void)
{
        load(true);
}

bool fault_armed(void)
{
        load(false);
        return n_faults > 0;
}

/* FCACHE_FAULT_PAUSE=<point>:<gate>[,...]: at the point, while file <gate>
 * exists, wait (after making <gate>.reached), for a test to act in between. */
static void pause_at(const char *name)
{
        const char *spec = getenv("FCACHE_FAULT_PAUSE");
        size_t nl = strlen(name);
        char gate[4096], reached[4200];

        while (spec && *spec) {
                const char *end = strchrnul(spec, ','), *colon = memchr(spec, ':', end - spec);
                int fd;

                if (colon && (size_t)(colon - spec) == nl && !strncmp(spec, name, nl) &&
                    (size_t)(end - colon - 1) < sizeof(gate)) {
                        memcpy(gate, colon + 1, end - colon - 1);
                        gate[end - colon - 1] = '\0';
                        if (access(gate, F_OK) != 0)
                                return;
                        snprintf(reached, sizeof(reached), "%s.reached", gate);
                        fd = open(reached, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                        if (fd >= 0)
                                close(fd);
                        while (access(gate, F_OK) == 0)
                                usleep(10000);
                        return;
                }
                spec = *end ? end + 1 : end;
        }
}

void fault_point(const char *name)
{
        pause_at(name);
        load(false);
        for (int i = 0; i < n_faults; i++) {
                struct fault *f = &faults[i];

                if (strcmp(f->name, name) != 0)
                        continue;
                if (atomic_fetch_add(&f->passed, 1) + 1 == f->target)
                        raise(SIGKILL);
        }
}
