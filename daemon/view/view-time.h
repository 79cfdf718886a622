/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-time.h: time in nanoseconds, as the store, the mirror's base and
 * the view's deadlines keep it (the bottom layer: it calls nothing of the view).
 */
#pragma once

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC, for ages and deadlines. */
static inline uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

static inline int64_t timespec_ns(const struct timespec *t)
{
        return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

/* The reverse (a time before 1970 too: tv_nsec is never negative). */
static inline struct timespec ns_timespec(int64_t ns)
{
        struct timespec t = { (time_t)(ns / 1000000000), (long)(ns % 1000000000) };

        if (t.tv_nsec < 0) {
                t.tv_sec--;
                t.tv_nsec += 1000000000;
        }
        return t;
}

/* @ms from now on @clock, for a timed wait (pthread_*_timedwait). */
static inline void deadline_from_now(struct timespec *until, clockid_t clock, uint64_t ms)
{
        clock_gettime(clock, until);
        until->tv_sec += (time_t)(ms / 1000);
        until->tv_nsec += (long)(ms % 1000) * 1000000;
        if (until->tv_nsec >= 1000000000) {
                until->tv_sec++;
                until->tv_nsec -= 1000000000;
        }
}
