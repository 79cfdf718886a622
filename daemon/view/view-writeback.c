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
 * when it was asked are on the server (applied, or kept as conflicts): of a
 * path, only those of its objects and what they need there first.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

        deadline_from_now(&until, CLOCK_MONOTONIC, ms);
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
        __atomic_store_n(&v->reint_bytes, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&v->trickle_in_round, true, __ATOMIC_RELEASE);
        r = view_replay(v, &st);
        __atomic_store_n(&v->trickle_in_round, false, __ATOMIC_RELEASE);
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

/*
 * What a sync waits for: the sequences of the records pending when it was
 * asked (all of them, or those of a path's objects and what they need).
 */
static int add_seq(void *ud, const struct oplog_record *rec)
{
        g_hash_table_add(ud, g_memdup2(&rec->seq, sizeof(rec->seq)));
        return 0;
}

struct seq_count {
        GHashTable *seqs;
        uint64_t n;
};

static int count_in(void *ud, const struct oplog_record *rec)
{
        struct seq_count *c = ud;

        if (g_hash_table_contains(c->seqs, &rec->seq))
                c->n++;
        return 0;
}

/* Of the records waited for, those still pending. */
static uint64_t pending_of(struct view *v, GHashTable *seqs)
{
        struct seq_count c = { seqs, 0 };

        pthread_mutex_lock(&v->offline_lock);
        oplog_foreach(v->oplog, true, count_in, &c);
        pthread_mutex_unlock(&v->offline_lock);
        return c.n;
}

/* The log ids of the objects of the mirror's subtree at dfd (a directory). */
static void subtree_lids(struct view *v, int dfd, GHashTable *lids, int depth)
{
        struct dirent *de;
        int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd < 0 ? NULL : fdopendir(fd);

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        while ((de = readdir(d))) {
                uint64_t lid;
                bool known;

                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
                    mirror_is_tmp(de->d_name))
                        continue;
                pthread_mutex_lock(&v->offline_lock);
                known = offline_entry_lid(v, dirfd(d), de->d_name, &lid);
                pthread_mutex_unlock(&v->offline_lock);
                if (known)
                        g_hash_table_add(lids, g_memdup2(&lid, sizeof(lid)));
                if (de->d_type == DT_DIR && depth < VIEW_MAX_DEPTH) {
                        int cfd = openat(dirfd(d), de->d_name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

                        if (cfd >= 0) {
                                subtree_lids(v, cfd, lids, depth + 1);
                                close(cfd);
                        }
                }
        }
        closedir(d);
}

/* A pending record, as the dependencies of a path's records need it. */
struct rec_ref {
        uint64_t seq, lid, parent, parent2, other;
        enum oplog_kind kind;
};

static int copy_ref(void *ud, const struct oplog_record *rec)
{
        struct rec_ref r = { rec->seq, rec->lid, rec->parent, rec->parent2, rec->other,
                             rec->kind };

        g_array_append_val(ud, r);
        return 0;
}

static bool has_lid(GHashTable *t, uint64_t lid)
{
        return lid && g_hash_table_contains(t, &lid);
}

/* The places record @r needs on the server first: its directories, a
 * rename's source and target, the object it replaced. */
static void add_needs(GHashTable *needs, const struct rec_ref *r)
{
        uint64_t ids[3] = { r->parent, r->parent2, r->other };

        for (int i = 0; i < 3; i++)
                if (ids[i] && ids[i] != OPLOG_ROOT)
                        g_hash_table_add(needs, g_memdup2(&ids[i], sizeof(ids[i])));
}

/*
 * The log ids of the mirror's directories on the way to @fd: a record that
 * makes or moves one of them is needed on the server before the path is
 * there, though nothing of the path itself may be pending.
 */
static void path_dir_lids(struct view *v, int fd, GHashTable *needs)
{
        char *rel = view_rel_path(v->mirror_fd, fd, NULL), *slash;
        uint64_t lid;

        for (slash = rel ? strchr(rel, '/') : NULL; slash; slash = strchr(slash + 1, '/')) {
                int dfd;
                bool known;

                *slash = '\0';
                dfd = openat(v->mirror_fd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                *slash = '/';
                if (dfd < 0)
                        break;
                pthread_mutex_lock(&v->offline_lock);
                known = offline_entry_lid(v, dfd, NULL, &lid);
                pthread_mutex_unlock(&v->offline_lock);
                close(dfd);
                if (known && lid != OPLOG_ROOT)
                        g_hash_table_add(needs, g_memdup2(&lid, sizeof(lid)));
        }
        g_free(rel);
}

static bool makes_or_moves(enum oplog_kind k)
{
        return k == OPLOG_CREATE || k == OPLOG_MKDIR || k == OPLOG_SYMLINK || k == OPLOG_MKNOD ||
               k == OPLOG_RENAME || k == OPLOG_LINK;
}

/*
 * The pending records of the objects at mirror object @fd (its subtree for a
 * directory): each record of one of them or made in one of its directories,
 * then, until nothing is added, the records that make or move what those
 * or the path itself need on the server (a directory's mkdir, the source
 * and target of a rename, the directories on the way to @fd), whatever
 * path they are on.
 */
static void path_records(struct view *v, int fd, GHashTable *seqs)
{
        GHashTable *lids = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
        GHashTable *needs = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
        GArray *recs = g_array_new(FALSE, FALSE, sizeof(struct rec_ref));
        bool *in, more = true;
        struct stat st;
        uint64_t lid;
        int dfd;

        pthread_mutex_lock(&v->offline_lock);
        if (offline_entry_lid(v, fd, NULL, &lid))
                g_hash_table_add(lids, g_memdup2(&lid, sizeof(lid)));
        oplog_foreach(v->oplog, true, copy_ref, recs);
        pthread_mutex_unlock(&v->offline_lock);
        if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) &&
            (dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
                subtree_lids(v, dfd, lids, 0);
                close(dfd);
        }
        path_dir_lids(v, fd, needs);
        in = g_new0(bool, recs->len ? recs->len : 1);
        for (guint i = 0; i < recs->len; i++) {
                struct rec_ref *r = &g_array_index(recs, struct rec_ref, i);

                if (has_lid(lids, r->lid) || has_lid(lids, r->parent) ||
                    has_lid(lids, r->parent2) || has_lid(lids, r->other)) {
                        in[i] = true;
                        add_needs(needs, r);
                }
        }
        while (more) {
                more = false;
                for (guint i = 0; i < recs->len; i++) {
                        struct rec_ref *r = &g_array_index(recs, struct rec_ref, i);

                        if (!in[i] && makes_or_moves(r->kind) && has_lid(needs, r->lid)) {
                                in[i] = more = true;
                                add_needs(needs, r);
                        }
                }
        }
        for (guint i = 0; i < recs->len; i++) {
                uint64_t seq = g_array_index(recs, struct rec_ref, i).seq;

                if (in[i])
                        g_hash_table_add(seqs, g_memdup2(&seq, sizeof(seq)));
        }
        g_free(in);
        g_array_free(recs, TRUE);
        g_hash_table_destroy(needs);
        g_hash_table_destroy(lids);
}

int writeback_sync(struct view *v, int fd, struct ctl_out *out, GString *err)
{
        uint64_t bound_ms = v->cfg->backing_timeout_ms ? 2 * v->cfg->backing_timeout_ms + 5000
                                                       : 60000;
        uint64_t total, left, moved = now_ns(), seen, done;
        GHashTable *seqs = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
        int state, r = 0;

        /* Writes to files still open become records first (as at a reconnect). */
        if (__atomic_load_n(&v->state, __ATOMIC_ACQUIRE) == VIEW_WRITEBACK) {
                pthread_rwlock_wrlock(&v->mode_lock);
                if (v->state == VIEW_WRITEBACK)
                        vfile_flush_dirty(v);
                pthread_rwlock_unlock(&v->mode_lock);
        }
        if (fd >= 0) {
                path_records(v, fd, seqs);
        } else {
                pthread_mutex_lock(&v->offline_lock);
                oplog_foreach(v->oplog, true, add_seq, seqs);
                pthread_mutex_unlock(&v->offline_lock);
        }
        total = left = g_hash_table_size(seqs) ? pending_of(v, seqs) : 0;
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
                        r = -EHOSTDOWN;
                        break;
                }
                if ((now_ns() - moved) / 1000000 >= bound_ms) {
                        g_string_printf(err, "no change reached the server for %" PRIu64
                                        " ms: %" PRIu64 " of the %" PRIu64 " changes to sync"
                                        " are still pending", bound_ms, left, total);
                        out_kv(out, "pending=%" PRIu64, left);
                        r = -ETIMEDOUT;
                        break;
                }
                pthread_mutex_lock(&v->wb_lock);
                if (v->wb_rounds == seen)
                        wait_ms(v, SYNC_POLL_MS);
                seen = v->wb_rounds;
                pthread_mutex_unlock(&v->wb_lock);
                now = pending_of(v, seqs);
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
        g_hash_table_destroy(seqs);
        if (r < 0)
                return r;
        out_kv(out, "synced=%" PRIu64, total);
        out_kv(out, "state=%s", view_state_name(v));
        return 0;
}

/*
 * sync of a path names a volume in writeback (or reintegrating, whose end
 * it waits for): elsewhere there is nothing of that path to wait for, which
 * a user asking for it should know (the whole volume's `sync` answers at once).
 */
static bool path_sync_state(struct view *v, const char *rel, GString *err, int *status)
{
        uint64_t n = pending_count(v);

        switch (__atomic_load_n(&v->state, __ATOMIC_ACQUIRE)) {
        case VIEW_ONLINE:
                g_string_printf(err, "'%s' is on a volume that is online, not in write-back"
                                " (WriteBack=%s): its changes reach the server as they are"
                                " made, there is nothing to sync", rel,
                                volume_config_write_back_name(v->cfg->write_back));
                *status = -EINVAL;
                return false;
        case VIEW_OFFLINE:
                g_string_printf(err, "'%s' is on a volume that is offline, not in write-back:"
                                " its %" PRIu64 " pending changes are shipped at the reconnect",
                                rel, n);
                *status = -EHOSTDOWN;
                return false;
        default:
                return true;
        }
}

/*
 * A reconnect of a volume that wants writeback passes through online (the
 * mirror's resync): what a sync asked meanwhile is of its end.  Bounded as
 * the reconnect is (no progress for BackingTimeout stops it).
 */
static void reconnect_wait(struct view *v)
{
        while (__atomic_load_n(&v->reconnects, __ATOMIC_ACQUIRE) &&
               __atomic_load_n(&v->state, __ATOMIC_ACQUIRE) != VIEW_WRITEBACK &&
               view_writeback_wanted(v))
                usleep(20000);
}

bool writeback_execute(struct view *v, const char *cmdline, int fd, const char *rel,
                       struct ctl_out *out, GString *err, int *status)
{
        while (*cmdline == ' ')
                cmdline++;
        if (strncmp(cmdline, "sync", 4) || (cmdline[4] && cmdline[4] != ' '))
                return false;
        reconnect_wait(v);
        if (rel && strcmp(rel, ".") && !path_sync_state(v, rel, err, status))
                return true;
        /* The volume root is every path: all that is pending. */
        *status = writeback_sync(v, rel && strcmp(rel, ".") ? fd : -1, out, err);
        return true;
}
