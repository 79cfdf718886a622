/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-writeback.c: write-back on slow or metered links (WriteBack=yes|auto,
 * Coda's trickle reintegration).
 *
 * In state writeback the view serves the mirror of the pinned subtrees
 * exactly as offline (view-offline.c): every change is applied there,
 * logged and acknowledged at local speed.  The trickle, a thread of its
 * own, ships the log with the replay a reconnect uses (view_replay(): the
 * records pending at its start, offline_lock never held across a backing
 * call, bounded by BackingTimeout of no progress), round after round: at
 * once while many records wait, else after a pause.  Conflicts are found
 * and kept as after an offline period.  An error that means the server is
 * gone takes the volume offline; the probe's reconnect brings it back to
 * writeback (view_reconnect() ends there when writeback is wanted).
 *
 * The trickle also follows WriteBack=auto and a change of WriteBack=:
 * online -> writeback when writeback is wanted (as a disconnect, then
 * shipped), writeback -> online when it no longer is (a reconnect: the log
 * drained, the mirror resynced).
 *
 * Other clients' changes reach the mirror once per HoardInterval with
 * nothing left to ship: a reconnect, online while the mirror is resynced.
 * A name the mirror lacks outside the pins is fetched at its first lookup
 * (writeback_fetch_name()).
 *
 * sync (and flush of a path in writeback) waits until the records pending
 * when it was asked are on the server (applied, or kept as conflicts).
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "reintegrate.h"
#include "view.h"

/* Between rounds when few records wait. */
#define PAUSE_MS 1000
/* Records left after a round that make the next one start at once. */
#define MANY 64
/* How often a sync looks at what is left. */
#define SYNC_POLL_MS 200

bool view_writeback_wanted(struct view *v)
{
        switch (v->cfg->write_back) {
        case WRITE_BACK_YES:
                return true;
        case WRITE_BACK_AUTO:
                /* A metered connection, or a slow one (view-link-rtt.c). */
                return __atomic_load_n(&v->metered, __ATOMIC_ACQUIRE) || view_link_poor(v);
        default:
                return false;
        }
}

void view_writeback_init(struct view *v)
{
        pthread_condattr_t attr;

        pthread_mutex_init(&v->wb_lock, NULL);
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&v->wb_cond, &attr);
        pthread_condattr_destroy(&attr);
}

void view_writeback_kick(struct view *v)
{
        pthread_mutex_lock(&v->wb_lock);
        pthread_cond_broadcast(&v->wb_cond);
        pthread_mutex_unlock(&v->wb_lock);
}

/* wb_lock held: waits for a kick or the end of a round, at most @ms. */
static void wait_ms(struct view *v, uint64_t ms)
{
        struct timespec until;

        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += ms / 1000;
        until.tv_nsec += (long)(ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&v->wb_cond, &v->wb_lock, &until);
}

static uint64_t pending_count(struct view *v)
{
        uint64_t n = 0;

        pthread_mutex_lock(&v->offline_lock);
        oplog_count(v->oplog, OPLOG_PENDING, &n);
        pthread_mutex_unlock(&v->offline_lock);
        return n;
}

/* One round: what is pending now goes to the server.  0 or -errno. */
static int trickle_round(struct view *v)
{
        struct reintegrate_stats st = { 0 };
        int r;

        __atomic_store_n(&v->reint_done, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&v->reint_total, 0, __ATOMIC_RELEASE);
        r = view_replay(v, &st);
        if (st.conflicts)
                view_conflicts_recount(v);
        if (st.total)
                log_debug("Write-back round: %" PRIu64 " records, %" PRIu64 " applied, %" PRIu64
                          " conflicts, %" PRIu64 " held", st.total, st.applied, st.conflicts,
                          st.held);
        return r;
}

/* Writeback no longer wanted: drained and online, as at the end of a reconnect. */
static void writeback_leave(struct view *v)
{
        view_reconnect_logged(v, "Write-back is no longer wanted: shipping the log, then online",
                              "Leaving write-back failed");
}

/*
 * The mirror takes other clients' changes as the hoard walk does online:
 * once per HoardInterval with nothing left to ship, a reconnect (the
 * volume online while the mirror is resynced, then in writeback again).
 * Returns whether it was due.
 */
static bool refresh_if_due(struct view *v)
{
        static uint64_t last_ns;
        uint64_t now = now_ns(), interval_ns = v->cfg->hoard_interval_ms * 1000000;

        if (!last_ns)
                last_ns = now;
        if (!interval_ns || now - last_ns < interval_ns)
                return false;
        last_ns = now;
        view_reconnect_logged(v, "Write-back: nothing to ship, taking the server's changes into"
                              " the mirror", "Taking the server's changes in write-back failed");
        return true;
}

/* Does one step; true when the next should follow at once. */
static bool trickle_step(struct view *v, int *last_err)
{
        int state = __atomic_load_n(&v->state, __ATOMIC_ACQUIRE);
        uint64_t before, after;
        int r;

        if (state == VIEW_ONLINE && view_writeback_wanted(v) &&
            !__atomic_load_n(&v->reconnects, __ATOMIC_ACQUIRE)) {
                r = view_writeback_enter(v);
                if (r < 0 && r != *last_err)
                        log_warn("Cannot start write-back: %s", strerror(-r));
                *last_err = r;
                return false;
        }
        if (state != VIEW_WRITEBACK)
                return false;
        if (!view_writeback_wanted(v)) {
                writeback_leave(v);
                return false;
        }
        before = pending_count(v);
        if (!before) {
                refresh_if_due(v);
                return false;
        }
        r = trickle_round(v);
        if (r < 0 && view_server_gone(r) && r != -EBUSY) {
                view_writeback_lost(v, r);
                return false;
        }
        if (r < 0 && r != *last_err)
                log_warn("Shipping the write-back log: %s (retried)", strerror(-r));
        *last_err = r;
        after = pending_count(v);
        return r == 0 && after >= MANY && after < before;
}

static void *trickle_thread(void *arg)
{
        struct view *v = arg;
        int last_err = 0;

        /* Switches invalidate the kernel's nodes: once the session serves. */
        while (!__atomic_load_n(&v->se, __ATOMIC_ACQUIRE))
                usleep(50000);
        for (;;) {
                bool now = trickle_step(v, &last_err);

                pthread_mutex_lock(&v->wb_lock);
                v->wb_rounds++;
                pthread_cond_broadcast(&v->wb_cond);
                if (!now)
                        wait_ms(v, PAUSE_MS);
                pthread_mutex_unlock(&v->wb_lock);
        }
        return NULL;
}

void view_writeback_start(struct view *v)
{
        pthread_t t;

        /* WriteBack=no with a log left in writeback ships it, then stays online. */
        if (v->cfg->write_back == WRITE_BACK_NO && v->state != VIEW_WRITEBACK)
                return;
        if (pthread_create(&t, NULL, trickle_thread, v) != 0) {
                log_error("Cannot start the write-back thread: %m");
                return;
        }
        pthread_detach(t);
}

/* The highest sequence of a pending record (0: none). */
static int max_seq(void *ud, const struct oplog_record *rec)
{
        uint64_t *k = ud;

        if (rec->seq > *k)
                *k = rec->seq;
        return 0;
}

struct upto {
        uint64_t k, n;
};

static int count_upto(void *ud, const struct oplog_record *rec)
{
        struct upto *u = ud;

        if (rec->seq <= u->k)
                u->n++;
        return 0;
}

/* Pending records up to sequence k (all with k 0 is none). */
static uint64_t pending_upto(struct view *v, uint64_t k)
{
        struct upto u = { k, 0 };

        pthread_mutex_lock(&v->offline_lock);
        oplog_foreach(v->oplog, true, count_upto, &u);
        pthread_mutex_unlock(&v->offline_lock);
        return u.n;
}

/*
 * Names not in the mirror, looked up in writeback: fetched one by one
 * (Coda's fetch of a miss while weakly connected), never a walk of the
 * directory, which may hold changes not shipped yet.  The log guards it: a
 * name a pending record created, removed or moved in that directory (an
 * unlink, an rmdir, a rename's source) is the application's doing, not a
 * miss.  While the LOOKUP of a name it has no dentry for is in flight the
 * kernel holds the directory's lock, so no entry of it is made, removed or
 * moved through the view meanwhile (a revalidation of a dentry it has is
 * not under that lock); the check is made again as the fetched object goes
 * in place, with changes excluded.
 */
struct name_ref {
        uint64_t parent;
        const char *name;
        bool named;
};

static int names_it(void *ud, const struct oplog_record *rec)
{
        struct name_ref *n = ud;
        bool at = rec->parent == n->parent && rec->name && !strcmp(rec->name, n->name);
        bool to = rec->parent2 == n->parent && rec->name2 && !strcmp(rec->name2, n->name);

        if (rec->state == OPLOG_APPLIED)
                return 0;
        switch (rec->kind) {
        case OPLOG_CREATE: case OPLOG_MKDIR: case OPLOG_SYMLINK: case OPLOG_MKNOD:
        case OPLOG_UNLINK: case OPLOG_RMDIR:
                n->named = n->named || at;
                break;
        case OPLOG_RENAME:
                n->named = n->named || at || to;
                break;
        case OPLOG_LINK:
                n->named = n->named || to;
                break;
        default:
                break;
        }
        return n->named ? -1 : 0;
}

/* offline_lock held: the log's id of mirror directory @mdfd; false when the
 * log does not know it (then no record names a place in it). */
static bool dir_lid(struct view *v, int mdfd, uint64_t *lid)
{
        struct mirror_base b;
        struct stat st, root;

        if (fstat(mdfd, &st) == 0 && fstat(v->mirror_fd, &root) == 0 &&
            st.st_ino == root.st_ino && st.st_dev == root.st_dev) {
                *lid = OPLOG_ROOT;
                return true;
        }
        if (mirror_get_base(mdfd, NULL, &b) == 0)
                return oplog_find_cached_ino(v->oplog, b.ver.ino, lid) == 0;
        return mirror_get_lid(mdfd, NULL, lid) == 0;
}

/* Whether a record not yet on the server names @name in directory @mdfd. */
bool writeback_name_logged(struct view *v, int mdfd, const char *name)
{
        struct name_ref n = { .name = name };

        pthread_mutex_lock(&v->offline_lock);
        if (dir_lid(v, mdfd, &n.parent))
                oplog_foreach(v->oplog, false, names_it, &n);
        pthread_mutex_unlock(&v->offline_lock);
        return n.named;
}

int writeback_fetch_name(struct view *v, int mdfd, const char *name)
{
        if (__atomic_load_n(&v->state, __ATOMIC_ACQUIRE) != VIEW_WRITEBACK)
                return -EHOSTDOWN;
        if (writeback_name_logged(v, mdfd, name)) {
                log_debug("Write-back: '%s' is named by a change not shipped yet (removed or"
                          " moved here): ENOENT, not fetched", name);
                return -ENOENT;
        }
        return mirror_fetch_name(v, mdfd, name, writeback_name_logged, NULL);
}

int writeback_sync(struct view *v, struct ctl_out *out, GString *err)
{
        uint64_t bound_ms = v->cfg->backing_timeout_ms ? 2 * v->cfg->backing_timeout_ms + 5000
                                                       : 60000;
        uint64_t k = 0, total, left, moved = now_ns(), seen, done;
        int state;

        /* Writes to files still open become records first (as at a reconnect). */
        if (__atomic_load_n(&v->state, __ATOMIC_ACQUIRE) == VIEW_WRITEBACK) {
                pthread_rwlock_wrlock(&v->mode_lock);
                if (v->state == VIEW_WRITEBACK)
                        vfile_flush_dirty(v);
                pthread_rwlock_unlock(&v->mode_lock);
        }
        pthread_mutex_lock(&v->offline_lock);
        oplog_foreach(v->oplog, true, max_seq, &k);
        pthread_mutex_unlock(&v->offline_lock);
        total = left = k ? pending_upto(v, k) : 0;
        view_writeback_kick(v);
        pthread_mutex_lock(&v->wb_lock);
        seen = v->wb_rounds;
        pthread_mutex_unlock(&v->wb_lock);
        done = __atomic_load_n(&v->reint_done, __ATOMIC_ACQUIRE);
        while (left) {
                uint64_t now;

                state = __atomic_load_n(&v->state, __ATOMIC_ACQUIRE);
                if (state == VIEW_OFFLINE) {
                        g_string_printf(err, "the volume is offline: %" PRIu64 " of the %" PRIu64
                                        " changes to sync are not on the server (they are"
                                        " shipped at the reconnect)", left, total);
                        out_kv(out, "pending=%" PRIu64, left);
                        return -EHOSTDOWN;
                }
                if ((now_ns() - moved) / 1000000 >= bound_ms) {
                        g_string_printf(err, "no change reached the server for %" PRIu64
                                        " ms: %" PRIu64 " of the %" PRIu64 " changes to sync"
                                        " are still pending", bound_ms, left, total);
                        out_kv(out, "pending=%" PRIu64, left);
                        return -ETIMEDOUT;
                }
                pthread_mutex_lock(&v->wb_lock);
                if (v->wb_rounds == seen)
                        wait_ms(v, SYNC_POLL_MS);
                seen = v->wb_rounds;
                pthread_mutex_unlock(&v->wb_lock);
                now = pending_upto(v, k);
                if (now < left)
                        log_info("sync: %" PRIu64 " of %" PRIu64 " changes on the server",
                                 total - now, total);
                /* A round marks its records at its end: its progress counts too. */
                if (now < left || __atomic_load_n(&v->reint_done, __ATOMIC_ACQUIRE) != done) {
                        done = __atomic_load_n(&v->reint_done, __ATOMIC_ACQUIRE);
                        moved = now_ns();
                }
                left = now;
        }
        out_kv(out, "synced=%" PRIu64, total);
        out_kv(out, "state=%s", view_state_name(v));
        return 0;
}

bool writeback_execute(struct view *v, const char *cmdline, struct ctl_out *out, GString *err,
                       int *status)
{
        while (*cmdline == ' ')
                cmdline++;
        if (strncmp(cmdline, "sync", 4) || (cmdline[4] && cmdline[4] != ' '))
                return false;
        *status = writeback_sync(v, out, err);
        return true;
}
