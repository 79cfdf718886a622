/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-replay.c: replay the offline log up to K while serving.
 *
 * A replay runs on a thread of its own (backing_call_moving) with the log
 * shared under offline_lock (reintegrate.h, opts.lock): it takes the records
 * pending at its start, the log as it stood up to a sequence K, and holds
 * the lock only to read and mark the log, never across a call to the
 * backing.  The volume keeps serving as offline meanwhile: a change is
 * applied to the mirror and logged after K, and is replayed by the next
 * round.  The caller repeats while what was logged meanwhile shrinks, then
 * replays the last bit with changes stopped (view_reconnect()).
 *
 * Bounded: the request waits while calls to the backing return, and gives
 * up once none did for BackingTimeout (a server that stopped answering).
 * The thread then starts no new record and finishes whenever the server
 * lets it: what reached the server is marked (the replay journal) and
 * trimmed from the log, so nothing is replayed twice, and no replay starts
 * again before it is done (replay_busy).
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "reintegrate.h"
#include "view.h"

/* Rounds while serving; past them, what is left is replayed under the lock. */
#define ROUNDS 8
/* Left pending after a round: few enough to replay with changes stopped. */
#define FEW 32

struct replay {
        struct view *v;
        int root_fd;            /* a dup of the backing root */
        struct backing_progress *progress;
        uint64_t done_before;   /* records of earlier rounds, for query state */
        struct reintegrate_stats st;
        int result;
};

static void replay_free(void *arg)
{
        struct replay *rp = arg;

        if (rp->root_fd >= 0)
                close(rp->root_fd);
        __atomic_store_n(&rp->v->replay_busy, false, __ATOMIC_RELEASE);
        g_free(rp);
}

/* Each record: progress for query state, and a sign of life. */
static void replay_item(void *ud, const struct reintegrate_item *it)
{
        struct replay *rp = ud;

        __atomic_store_n(&rp->v->reint_total, rp->done_before + it->total, __ATOMIC_RELEASE);
        __atomic_store_n(&rp->v->reint_done, rp->done_before + it->done, __ATOMIC_RELEASE);
        backing_progress_step(rp->progress);
}

static void replay_moved(void *ud)
{
        struct replay *rp = ud;

        backing_progress_step(rp->progress);
}

static void replay_wrote(void *ud, const struct stat *server, const struct stat *local)
{
        struct replay *rp = ud;

        __atomic_add_fetch(&rp->v->reint_bytes, (uint64_t)local->st_size, __ATOMIC_RELEASE);
        mirror_note_replayed(rp->v, server, local);
}

static void replay_restamped(void *ud, const struct stat *before, const struct stat *after)
{
        struct replay *rp = ud;

        mirror_note_restamped(rp->v, before, after);
}

static bool replay_written_through(void *ud, uint64_t lid)
{
        struct replay *rp = ud;

        return vfile_writes_server(rp->v, lid);
}

/* Given up on (the volume went back offline): no new record starts. */
static bool replay_cancel(void *ud)
{
        struct replay *rp = ud;
        int state = __atomic_load_n(&rp->v->state, __ATOMIC_ACQUIRE);

        return state != VIEW_REINTEGRATING && state != VIEW_WRITEBACK;
}

static int replay_work(void *arg, struct backing_progress *p)
{
        struct reintegrate_options opts = REINTEGRATE_OPTIONS_INIT;
        struct replay *rp = arg;
        struct view *v = rp->v;
        uint64_t removed = 0;
        int r;

        rp->progress = p;
        opts.progress = replay_item;
        opts.moved = replay_moved;
        opts.cancel = replay_cancel;
        opts.wrote = replay_wrote;
        opts.restamped = replay_restamped;
        opts.written_through = replay_written_through;
        opts.userdata = rp;
        /* Records in flight on the backing, as many as fetches. */
        opts.threads = view_fetch_threads(v);
        opts.lock = &v->offline_lock;
        opts.backing_local = v->backing_local;
        opts.names_identify = __atomic_load_n(&v->names_identify, __ATOMIC_ACQUIRE);
        rp->result = reintegrate_run(v->oplog, rp->root_fd, &opts, &rp->st);
        /* What reached the server leaves the log, also after an error. */
        pthread_mutex_lock(&v->offline_lock);
        r = oplog_compact(v->oplog, &removed);
        pthread_mutex_unlock(&v->offline_lock);
        if (rp->result == 0)
                rp->result = r;
        return 0;       /* the result is rp->result: -ETIMEDOUT is the wait's */
}

static void stats_add(struct reintegrate_stats *sum, const struct reintegrate_stats *st)
{
        sum->total += st->total;
        sum->applied += st->applied;
        sum->already += st->already;
        sum->merged += st->merged;
        sum->conflicts += st->conflicts;
        sum->held += st->held;
}

int view_replay(struct view *v, struct reintegrate_stats *sum)
{
        struct replay *rp;
        int r;

        if (__atomic_exchange_n(&v->replay_busy, true, __ATOMIC_ACQ_REL))
                return -EBUSY;
        rp = g_new0(struct replay, 1);
        rp->v = v;
        rp->done_before = __atomic_load_n(&v->reint_done, __ATOMIC_ACQUIRE);
        rp->root_fd = fcntl(v->root_fd, F_DUPFD_CLOEXEC, 0);
        if (rp->root_fd < 0) {
                r = -errno;
                replay_free(rp);
                return r;
        }
        r = backing_call_moving(v, replay_work, rp, replay_free, NULL);
        if (r == -ETIMEDOUT)
                return r;       /* rp is the thread's; it clears replay_busy */
        if (r == 0)
                r = rp->result;
        stats_add(sum, &rp->st);
        replay_free(rp);
        return r;
}

int view_replay_while_serving(struct view *v, struct reintegrate_stats *sum)
{
        uint64_t before = UINT64_MAX, pending = 0;
        int r;

        for (int round = 0; round < ROUNDS; round++) {
                r = view_replay(v, sum);
                if (r < 0)
                        return r;
                pthread_mutex_lock(&v->offline_lock);
                r = oplog_count(v->oplog, OPLOG_PENDING, &pending);
                pthread_mutex_unlock(&v->offline_lock);
                if (r < 0)
                        return r;
                /* Changes come as fast as rounds go: the rest with changes stopped. */
                if (pending <= FEW || pending >= before)
                        return 0;
                before = pending;
        }
        return 0;
}
