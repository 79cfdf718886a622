/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-readers.c: which of the worker's FUSE threads reads /dev/fuse.
 *
 * A warm open of a cached file costs the worker two requests (OPEN and
 * RELEASE) that it answers in a few microseconds each; what the caller
 * waits for is mostly the wake-ups around them.  On this kind of machine
 * (virtual CPUs, whose idle state is a halt the host must undo) a wake-up
 * of a thread asleep on another CPU costs more than serving the request.
 * Every thread blocked in read(2) of /dev/fuse is woken in turn, the one
 * that slept the longest first, so with N readers nearly every request
 * wakes a cold thread on whichever CPU it last ran on.
 *
 * So one thread reads at a time (the reader); the others wait in reserve,
 * where the kernel does not see them.  The thread that took a request
 * serves it and, if no one else read meanwhile, reads again itself,
 * first polling the device for a short while, since the next request of a
 * busy caller tends to follow within microseconds: that request then costs
 * no wake-up at all.
 *
 * Concurrency stays what it was (Threads= requests served at once):
 *
 * - A thread about to wait on the backing says so (fuse_readers_may_block(),
 *   called where a backing call is handed to a helper thread), and a thread
 *   of the reserve takes over reading at once.
 * - Any other long request (a lock held by a switch, a slow local disk) is
 *   caught by the watch: one thread of the reserve wakes every WATCH_MS
 *   while requests come, and takes over reading when no one has read for
 *   that long.  That bounds what a request can wait behind a slow one the
 *   reader did not announce.  The watch sleeps for good after a quiet spell
 *   and is woken by the next request, so an idle volume costs no wake-ups.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "view.h"

/* How long a thread that has just served a request polls for the next one
 * before it sleeps in read(2): a little longer than a caller takes between
 * two requests of a warm open/read/close loop. */
#define SPIN_NS (50 * 1000)
/* The longest no one reads /dev/fuse while a request is served. */
#define WATCH_MS 2
/* Watches in a row without a new request before the watch sleeps. */
#define QUIET_WATCHES 8

static struct {
        pthread_mutex_t lock;
        pthread_cond_t reserve;         /* threads of the reserve wait here */
        pthread_cond_t watch;           /* the watching thread waits here */
        bool reading;                   /* a thread is the reader */
        bool watching;                  /* a thread of the reserve watches */
        bool watch_asleep;              /* ... and sleeps until the next request */
        bool wanted;                    /* a reader is wanted now (may_block) */
        bool ending;                    /* the session ended */
        unsigned idle;                  /* threads waiting in reserve */
        uint64_t taken;                 /* requests taken so far */
        uint64_t unread_since;          /* now_ns(): no reader since */
} r = {
        .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* This thread holds a request and has not handed reading on. */
static __thread bool serving;

void fuse_readers_init(void)
{
        pthread_condattr_t a;

        pthread_condattr_init(&a);
        pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
        pthread_cond_init(&r.reserve, &a);
        pthread_cond_init(&r.watch, &a);
        pthread_condattr_destroy(&a);
}

/* Lock held.  Should a thread of the reserve read now? */
static bool reader_due(uint64_t now)
{
        return !r.reading && (r.wanted || now - r.unread_since >= WATCH_MS * 1000000ull);
}

/* Lock held: this thread watches until a reader is due or the session ends. */
static void watch(void)
{
        uint64_t seen = r.taken;
        unsigned quiet = 0;

        r.watching = true;
        while (!r.ending && !reader_due(now_ns())) {
                if (r.watch_asleep) {
                        pthread_cond_wait(&r.watch, &r.lock);
                } else {
                        uint64_t due = (r.reading ? now_ns() : r.unread_since) +
                                       WATCH_MS * 1000000ull;
                        struct timespec ts = ns_timespec((int64_t)due);

                        pthread_cond_timedwait(&r.watch, &r.lock, &ts);
                }
                if (r.taken != seen) {
                        seen = r.taken;
                        quiet = 0;
                } else if (r.reading && ++quiet >= QUIET_WATCHES) {
                        r.watch_asleep = true;
                }
        }
        r.watching = false;
        r.watch_asleep = false;
}

bool fuse_readers_turn(void)
{
        bool ok;

        serving = false;
        pthread_mutex_lock(&r.lock);
        while (!r.ending && r.reading) {
                if (!r.watching) {
                        watch();
                        /* The next thread of the reserve watches in turn. */
                        if (r.idle)
                                pthread_cond_signal(&r.reserve);
                        continue;
                }
                r.idle++;
                pthread_cond_wait(&r.reserve, &r.lock);
                r.idle--;
        }
        ok = !r.ending;
        if (ok) {
                r.reading = true;
                r.wanted = false;
        }
        pthread_mutex_unlock(&r.lock);
        return ok;
}

void fuse_readers_poll(int fd)
{
        uint64_t until = now_ns() + SPIN_NS;
        struct pollfd p = { .fd = fd, .events = POLLIN };

        do {
                if (poll(&p, 1, 0) != 0)
                        return;
        } while (now_ns() < until);
}

void fuse_readers_took(void)
{
        pthread_mutex_lock(&r.lock);
        r.reading = false;
        r.taken++;
        r.unread_since = now_ns();
        if (r.watch_asleep) {
                r.watch_asleep = false;
                pthread_cond_signal(&r.watch);
        }
        pthread_mutex_unlock(&r.lock);
        serving = true;
}

void fuse_readers_may_block(void)
{
        if (!serving)
                return;
        serving = false;
        pthread_mutex_lock(&r.lock);
        if (!r.reading) {
                r.wanted = true;
                if (r.idle)
                        pthread_cond_signal(&r.reserve);
                else if (r.watching)
                        pthread_cond_signal(&r.watch);
        }
        pthread_mutex_unlock(&r.lock);
}

void fuse_readers_end(void)
{
        pthread_mutex_lock(&r.lock);
        r.ending = true;
        r.reading = false;
        pthread_cond_broadcast(&r.reserve);
        pthread_cond_broadcast(&r.watch);
        pthread_mutex_unlock(&r.lock);
}
