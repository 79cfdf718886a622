/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-offline.c: disconnected operation of a view.
 *
 * Online, the view serves the backing.  Offline, it serves the mirror of
 * the pinned subtrees (view-mirror.c) with the same code: nodes and open
 * files are switched to the mirror's objects, stat results carry the
 * backing's inode numbers (from the mirror's trusted.fcache.base), and
 * every change an application makes is applied to the mirror and appended
 * to the operation log (oplog.h) before it is acknowledged.  Reconnecting
 * replays the log against the backing (view-replay.c) while the volume
 * still serves as offline, then, with changes stopped, what was logged
 * meanwhile, switches back, and brings the mirror up to date with the server.
 *
 * The state (online/offline) is kept in CacheDir/offline/state, so a
 * successor process after a crash or restart starts in the same state.
 *
 * Changes and state switches exclude each other through mode_lock: an
 * operation that changes something holds it shared from its check of the
 * state to its log record, a switch holds it exclusively.  So a change is
 * either applied online or applied to the mirror and logged, never half.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fault.h"
#include "reintegrate.h"
#include "view.h"

static char *state_path(struct view *v)
{
        return g_build_filename(v->cfg->cache_dir, "offline", "state", NULL);
}

static int save_state(struct view *v, int state)
{
        char *path = state_path(v), *tmp = g_strconcat(path, ".tmp", NULL);
        /* "auto": offline because the backing stopped answering (or was not the
         * volume's); a successor keeps probing for its return. */
        const char *text = state == VIEW_ONLINE ? "online\n" :
                           state == VIEW_WRITEBACK ? "writeback\n" :
                           __atomic_load_n(&v->auto_reconnect, __ATOMIC_ACQUIRE) ?
                           "offline auto\n" : "offline\n";
        int fd, r = 0;

        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || fsync(fd) < 0 ||
            rename(tmp, path) < 0)
                r = -errno;
        if (fd >= 0)
                close(fd);
        if (r < 0)
                log_error("Failed to record the volume state in %s: %s", path, strerror(-r));
        g_free(path);
        g_free(tmp);
        return r;
}

static int load_state(struct view *v)
{
        char *path = state_path(v), *text = NULL;
        int state = VIEW_ONLINE;

        if (g_file_get_contents(path, &text, NULL, NULL) && g_str_has_prefix(text, "offline")) {
                state = VIEW_OFFLINE;
                if (g_str_has_prefix(text, "offline auto"))
                        __atomic_store_n(&v->auto_reconnect, true, __ATOMIC_RELEASE);
        } else if (text && g_str_has_prefix(text, "writeback")) {
                /* The log may hold records not on the server: shipped
                 * first, whatever WriteBack= says now. */
                state = VIEW_WRITEBACK;
        }
        g_free(text);
        g_free(path);
        return state;
}

int view_oplog_open(struct view *v, bool record_root)
{
        struct oplog_options opts = OPLOG_OPTIONS_INIT;
        pthread_rwlockattr_t attr;
        struct oplog_version root;
        struct stat st;
        char *dir;
        int r;

        pthread_mutex_init(&v->offline_lock, NULL);
        view_writeback_init(v);
        pthread_rwlockattr_init(&attr);
        /* A switch must not starve behind a stream of writes. */
        pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&v->mode_lock, &attr);
        pthread_rwlockattr_destroy(&attr);
        pthread_rwlock_init(&v->served_lock, NULL);
        v->state = VIEW_ONLINE;
        v->mirror_fd = -1;
        v->mirror_mount_fd = -1;
        v->mirror_links_fd = -1;
        /* Reserve is the room kept for offline edits: the log may use it all. */
        opts.max_bytes = v->cfg->reserve;
        dir = g_build_filename(v->cfg->cache_dir, "offline", NULL);
        r = oplog_open(&v->oplog, dir, &opts);
        if (r == -EPROTONOSUPPORT)
                log_error("The offline log in %s was written by a newer fcache (a format this"
                          " fcache-view does not know): refusing to replay or extend it; run"
                          " the newer fcache-view, whose changes it holds", dir);
        else if (r < 0)
                log_error("Failed to open the offline log in %s: %s", dir, strerror(-r));
        if (r < 0) {
                g_free(dir);
                return r;
        }
        /* A replay the last worker did not finish: taken up before a change is logged. */
        r = reintegrate_recover(v->oplog);
        if (r < 0) {
                log_error("Failed to bring the offline log in %s up to its replay journal: %s",
                          dir, strerror(-r));
                g_free(dir);
                return r;
        }
        g_free(dir);
        if (fstat(v->root_fd, &st) < 0)
                return -errno;
        oplog_version_from_stat(&root, &st);
        r = record_root ? oplog_set_root(v->oplog, &root) : 0;
        if (r < 0) {
                log_error("Failed to record the volume root in the offline log: %s",
                          strerror(-r));
                return r;
        }
        r = mirror_open(v);
        if (r < 0)
                return r;
        v->state = load_state(v);
        view_conflicts_recount(v);
        if (v->state == VIEW_OFFLINE)
                log_info("Volume starts offline (as it was left), serving the local mirror");
        else if (v->state == VIEW_WRITEBACK)
                log_info("Volume starts in write-back (as it was left), serving the local mirror");
        return 0;
}

/* ---- switching ---- */

/* mode_lock held exclusively; returns the nodes to invalidate_nodes(). */
static GArray *switch_served(struct view *v, int state, bool *unanswered)
{
        GArray *ids;

        /* A forced switch goes ahead without mode_lock: a request that
         * reads the state and an open file's descriptor together (a
         * listing) sees both from before the switch, or both from after. */
        pthread_rwlock_wrlock(&v->served_lock);
        /* A forced switch and one under mode_lock may both have found the
         * volume online: the nodes move once. */
        if ((v->state != VIEW_ONLINE) == (state != VIEW_ONLINE)) {
                pthread_rwlock_unlock(&v->served_lock);
                return NULL;
        }
        __atomic_store_n(&v->state, state, __ATOMIC_RELEASE);
        __atomic_add_fetch(&v->switches, 1, __ATOMIC_RELEASE);
        *unanswered = false;
        ids = vnode_switch_all(v, unanswered);
        vfile_switch_all(v, unanswered);
        pthread_rwlock_unlock(&v->served_lock);
        return ids;
}

/*
 * The kernel's attributes and pages came from the other tree.  Called
 * without mode_lock: an invalidation waits for page locks that a writer may
 * hold while its request waits for mode_lock.
 */
static void invalidate_nodes(struct view *v, GArray *ids)
{
        for (unsigned i = 0; ids && i < ids->len; i++) {
                struct vnode_entry *e = &g_array_index(ids, struct vnode_entry, i);

                /* Only a name that no longer leads to its node: invalidating
                 * the others would unhash live directories (a process's cwd). */
                if (e->name && e->inval_name)
                        fuse_lowlevel_notify_inval_entry(v->se, e->parent, e->name,
                                                         strlen(e->name));
                fuse_lowlevel_notify_inval_inode(v->se, e->id, 0, 0);
        }
        if (ids)
                g_array_free(ids, TRUE);
}

/*
 * mode_lock held exclusively, online, before a switch into the mirror: the
 * mirror takes the open written files.  Whether the volume is still online
 * after: a note the server did not answer in time starts a forced switch,
 * which may have gone ahead meanwhile (the caller then has nothing to do).
 */
static bool writers_noted_online(struct view *v)
{
        vfile_note_writers(v);
        return v->state == VIEW_ONLINE;
}

/* Guards the reasons query state gives; never held across anything else. */
static pthread_mutex_t reason_lock = PTHREAD_MUTEX_INITIALIZER;

/* mode_lock held exclusively: from a state that serves the mirror already
 * (writeback, a reconnect) to offline: no switch of nodes, the state kept. */
static void offline_from_mirror(struct view *v)
{
        if (v->state == VIEW_WRITEBACK)
                log_info("Volume is offline: the write-back log waits for a reconnect");
        __atomic_store_n(&v->state, VIEW_OFFLINE, __ATOMIC_RELEASE);
        save_state(v, VIEW_OFFLINE);
}

/*
 * Takes mode_lock exclusively for a switch.  A change or a mirror update
 * stuck in a call to a server that stopped answering holds it shared and
 * may never let go: @forced (the backing stopped answering) waits a short
 * while, a switch asked by hand of a network backing BackingTimeout, then
 * the switch goes ahead without it; that change, if it ever completes,
 * reached the server, and reintegration compares with what the server has.
 * Returns whether the lock is held.
 */
static bool switch_lock(struct view *v, bool forced)
{
        uint64_t ms = forced ? 200 : v->cfg->backing_timeout_ms;
        struct timespec until;

        if (!forced && !backing_bounded_in(v, false)) {
                pthread_rwlock_wrlock(&v->mode_lock);
                return true;
        }
        deadline_from_now(&until, CLOCK_REALTIME, ms);
        return pthread_rwlock_timedwrlock(&v->mode_lock, &until) == 0;
}

/*
 * Before a switch into the mirror that is not forced, off every lock: a file
 * read whole online goes into the mirror on the cache thread, queued before
 * its last read is answered.  mirror_cache_file() asks the server first and
 * places the file only while online: a switch that came first leaves it out,
 * and a complete (pinned) directory lacking the name is ENOENT offline.  So
 * the switch waits for those queued so far, at most BackingTimeout (their
 * calls to the server are bounded by it).
 */
static void cached_files_moved(struct view *v)
{
        if (__atomic_load_n(&v->state, __ATOMIC_ACQUIRE) == VIEW_ONLINE &&
            !mirror_cache_wait(v->cfg->backing_timeout_ms))
                log_warn("Files read whole just before are not in the mirror yet: the switch"
                         " goes ahead without them (missing offline until the reconnect)");
}

static int disconnect(struct view *v, bool forced, GString *err)
{
        GArray *ids = NULL;
        bool locked, unanswered;
        int r = 0;

        if (!forced)
                cached_files_moved(v);
        locked = switch_lock(v, forced);

        /* Not online (a reconnect under way, which this one stops): nothing
         * waits on the server; else not waited for, it is taken for gone. */
        if (!locked && !forced && __atomic_load_n(&v->state, __ATOMIC_ACQUIRE) != VIEW_ONLINE) {
                pthread_rwlock_wrlock(&v->mode_lock);
                locked = true;
        }
        if (!locked)
                log_warn("A change is stuck in a backing call: switching offline without"
                         " waiting for it");
        forced = forced || !locked;
        if (v->state != VIEW_ONLINE) {
                /* A reconnect under way stops (after the records in flight):
                 * the volume goes on serving as offline. */
                if ((v->state == VIEW_REINTEGRATING || v->state == VIEW_WRITEBACK) && !forced)
                        offline_from_mirror(v);
                if (locked)
                        pthread_rwlock_unlock(&v->mode_lock);
                return 0;
        }
        /* Forced: the server is gone, and the files created on a network
         * backing were mirrored at their create. */
        if (locked && !forced && !writers_noted_online(v)) {
                pthread_rwlock_unlock(&v->mode_lock);
                return 0;
        }
        r = save_state(v, VIEW_OFFLINE);
        if (r == 0) {
                ids = switch_served(v, VIEW_OFFLINE, &unanswered);
                log_info("Volume is offline: serving the local mirror of its pins");
        } else if (err) {
                g_string_printf(err, "cannot record the offline state: %s", strerror(-r));
        }
        if (locked)
                pthread_rwlock_unlock(&v->mode_lock);
        invalidate_nodes(v, ids);
        return r;
}

/* Why the volume is offline by itself, for query state (NULL: by hand, or online). */
static void set_offline_reason(struct view *v, const char *why)
{
        pthread_mutex_lock(&reason_lock);
        g_free(v->offline_reason);
        v->offline_reason = g_strdup(why);
        pthread_mutex_unlock(&reason_lock);
}

void view_start_offline(struct view *v, const char *why)
{
        if (v->state == VIEW_OFFLINE) {
                log_error("%s: the volume was offline and stays so", why);
                if (__atomic_load_n(&v->auto_reconnect, __ATOMIC_ACQUIRE))
                        set_offline_reason(v, why);
                return;
        }
        set_offline_reason(v, why);
        log_error("%s: the volume starts offline, serving its local copy", why);
        v->state = VIEW_OFFLINE;
        __atomic_store_n(&v->auto_reconnect, true, __ATOMIC_RELEASE);
        save_state(v, VIEW_OFFLINE);
}

int view_disconnect(struct view *v, GString *err)
{
        __atomic_store_n(&v->auto_reconnect, false, __ATOMIC_RELEASE); /* manual: it holds */
        return disconnect(v, false, err);
}

/* Offline (or reconnecting from it): not yet back online or in writeback. */
static bool probing(struct view *v)
{
        int state = __atomic_load_n(&v->state, __ATOMIC_ACQUIRE);

        return state == VIEW_OFFLINE || state == VIEW_REINTEGRATING;
}

void view_reconnect_logged(struct view *v, const char *why, const char *failed)
{
        /* The probe tries every few seconds: a failure said once until it changes. */
        static pthread_mutex_t said_lock = PTHREAD_MUTEX_INITIALIZER;
        static char *said;
        GString *out = g_string_new(NULL), *err = g_string_new(NULL);
        bool again;

        if (view_reconnect(v, false, out, err) < 0) {
                pthread_mutex_lock(&said_lock);
                again = said && strcmp(said, err->str) == 0;
                if (!again) {
                        free(said);
                        said = strdup(err->str);
                }
                pthread_mutex_unlock(&said_lock);
                if (again) {
                        log_debug("%s: %s", failed, err->str);
                } else {
                        log_info("%s", why);
                        log_warn("%s: %s (said once until it changes)", failed, err->str);
                }
        } else {
                log_info("%s", why);
                pthread_mutex_lock(&said_lock);
                free(said);
                said = NULL;
                pthread_mutex_unlock(&said_lock);
        }
        g_string_free(out, TRUE);
        g_string_free(err, TRUE);
}

/* After a timeout: probe the backing, reconnect when it answers again. */
static void *timeout_thread(void *arg)
{
        struct view *v = arg;

        if (disconnect(v, true, NULL) < 0)
                log_error("Failed to switch offline after a backing timeout");
        while (__atomic_load_n(&v->auto_reconnect, __ATOMIC_ACQUIRE) && probing(v)) {
                struct timespec ts = { 2, 0 };

                nanosleep(&ts, NULL);
                /* A worker that started offline probes before its session serves;
                 * a reconnect under way (by hand) is left to finish. */
                if (!__atomic_load_n(&v->auto_reconnect, __ATOMIC_ACQUIRE) ||
                    __atomic_load_n(&v->state, __ATOMIC_ACQUIRE) == VIEW_REINTEGRATING ||
                    !__atomic_load_n(&v->se, __ATOMIC_ACQUIRE) || backing_probe(v) < 0)
                        continue;
                view_reconnect_logged(v, "The backing answers again: reconnecting",
                                      "Reconnecting after a backing timeout failed");
        }
        __atomic_store_n(&v->timeout_thread, false, __ATOMIC_RELEASE);
        return NULL;
}

/* Online: the server is gone (@why): offline at once, in the background,
 * and back when the backing answers again. */
static void offline_by_itself(struct view *v, const char *why)
{
        pthread_t t;

        if (view_offline(v) || __atomic_exchange_n(&v->timeout_thread, true, __ATOMIC_ACQ_REL))
                return;
        log_warn("The server is gone (%s): going offline", why);
        set_offline_reason(v, why);
        __atomic_store_n(&v->auto_reconnect, true, __ATOMIC_RELEASE);
        if (pthread_create(&t, NULL, timeout_thread, v) != 0) {
                __atomic_store_n(&v->timeout_thread, false, __ATOMIC_RELEASE);
                return;
        }
        pthread_detach(t);
}

/* The hook view-mode.c reports a server gone through (struct view's server_gone). */
void view_server_gone_hook(struct view *v, const char *why)
{
        offline_by_itself(v, why);
}

void view_probe_resume(struct view *v)
{
        pthread_t t;

        if (!view_offline(v) || !__atomic_load_n(&v->auto_reconnect, __ATOMIC_ACQUIRE) ||
            __atomic_exchange_n(&v->timeout_thread, true, __ATOMIC_ACQ_REL))
                return;
        log_info("The volume went offline by itself: probing the backing for its return");
        if (pthread_create(&t, NULL, timeout_thread, v) != 0) {
                __atomic_store_n(&v->timeout_thread, false, __ATOMIC_RELEASE);
                return;
        }
        pthread_detach(t);
}

/* The reason a reconnect refused, for query state (NULL: it did not). */
static void set_refused(struct view *v, const char *why)
{
        pthread_mutex_lock(&reason_lock);
        g_free(v->reconnect_refused);
        v->reconnect_refused = g_strdup(why);
        pthread_mutex_unlock(&reason_lock);
}

/*
 * May the reconnect delete what the server lost of the pinned copy?
 * Refused, the volume stays offline and stops probing: it is a person's call
 * (reconnect force), not the next probe's.
 */
static int delete_bound(struct view *v, bool force, GString *err)
{
        int r = reconnect_delete_check(v, err);

        if (r == -ECANCELED && force) {
                log_warn("Reconnecting by force: %s", err->str);
                g_string_truncate(err, 0);
                return 0;
        }
        if (r == -ECANCELED) {
                log_error("Not reconnecting: %s", err->str);
                set_refused(v, err->str);
                __atomic_store_n(&v->auto_reconnect, false, __ATOMIC_RELEASE);
        }
        return r;
}

/*
 * mode_lock held exclusively: another reconnect is under way (from its
 * switch to reintegrating to its end, its resync online and the switch to
 * writeback included).  This one lets go and waits for its end, then
 * starts over from what it left (online or writeback: nothing to do;
 * offline: its own try).
 */
static bool reconnecting(struct view *v)
{
        if (!__atomic_load_n(&v->reconnect_running, __ATOMIC_ACQUIRE))
                return false;
        pthread_rwlock_unlock(&v->mode_lock);
        while (__atomic_load_n(&v->reconnect_running, __ATOMIC_ACQUIRE))
                usleep(20000);
        return true;
}

/*
 * mode_lock held exclusively: the replay stopped (@r), the volume serves as
 * offline again.  Stopped by a server that went away, it probes for its
 * return as after any backing timeout.
 */
static int reconnect_stopped(struct view *v, int r, bool from_writeback, GString *err)
{
        /* From writeback, an error of the replay alone (not of the server,
         * nor a disconnect) leaves it in writeback: the trickle retries. */
        __atomic_store_n(&v->state, from_writeback && r != -ECANCELED && !view_server_gone(r) ?
                         VIEW_WRITEBACK : VIEW_OFFLINE, __ATOMIC_RELEASE);
        if (view_server_gone(r)) {
                __atomic_store_n(&v->auto_reconnect, true, __ATOMIC_RELEASE);
                set_offline_reason(v, "the backing stopped answering during the reconnect");
                save_state(v, VIEW_OFFLINE);
        }
        if (r == -ETIMEDOUT)
                g_string_printf(err, "the server stopped answering during the reconnect (no"
                                " progress for BackingTimeout, %" PRIu64 " ms); the volume"
                                " stays offline and resumes where it stopped once it answers",
                                v->cfg->backing_timeout_ms);
        else if (r == -EBUSY)
                g_string_printf(err, "the replay of a reconnect given up on still waits on the"
                                " server; the volume stays offline and tries again later");
        else if (r == -ECANCELED)
                g_string_printf(err, "the reconnect was stopped by a disconnect; the volume"
                                " stays offline and resumes where it stopped");
        else
                g_string_printf(err, "reintegration stopped: %s; the volume stays %s"
                                " and resumes where it stopped", strerror(-r),
                                view_state_text(v->state));
        return r;
}

/*
 * Online again: the mirror resynced (mode_lock shared, changes go on), then
 * the objects no record needs forgotten.  Bounded by BackingTimeout: a
 * server that stops answering during it takes the volume offline.
 */
static void resync_after_reconnect(struct view *v)
{
        uint64_t forgotten = 0;
        int r;

        pthread_rwlock_rdlock(&v->mode_lock);
        r = view_offline(v) ? -EHOSTDOWN : mirror_resync(v);
        if (r == 0) {
                pthread_mutex_lock(&v->offline_lock);
                oplog_forget_settled(v->oplog, &forgotten);
                /* Nothing left to replay: the log gives its space back. */
                if (oplog_shrink(v->oplog) < 0)
                        log_warn("Shrinking the offline log failed, ignoring");
                pthread_mutex_unlock(&v->offline_lock);
        }
        pthread_rwlock_unlock(&v->mode_lock);
        if (r == -ETIMEDOUT)
                view_backing_timed_out(v);
        else if (r == -EBUSY)
                log_warn("The mirror's resync given up on still waits on the backing: not"
                         " resynced now");
}

/*
 * From writeback, or offline just after it (a disconnect does not wait for
 * the trickle): the trickle's round in flight (view_replay() is one at a
 * time) ends before the reconnect replays; it is bounded by BackingTimeout
 * of no progress, then the reconnect's replay finds it busy (-EBUSY).
 */
static void trickle_wait(struct view *v)
{
        uint64_t bound_ms = v->cfg->backing_timeout_ms ? 2 * v->cfg->backing_timeout_ms : 60000;

        for (uint64_t ms = 0; ms < bound_ms &&
             __atomic_load_n(&v->replay_busy, __ATOMIC_ACQUIRE); ms += 20)
                usleep(20000);
}

static int reconnect(struct view *v, bool force, GString *out, GString *err, bool *ran)
{
        struct reintegrate_stats stats = { 0 };
        gint64 replay_start, resync_start, resync_end;
        bool from_writeback, unanswered, joined = false;
        GArray *ids;
        int r;

        /* As the probe: a change given up on that the server may still make
         * would meet the replay half way (made twice, or back after its
         * unlink).  Waited for off every lock: offline changes go on.  The
         * server is not answering: the probe takes over, as after a replay
         * it stopped. */
        if (__atomic_load_n(&v->state, __ATOMIC_ACQUIRE) != VIEW_ONLINE &&
            backing_wait_in_doubt(v) < 0) {
                g_string_printf(err, "backing changes given up on still wait for the server's"
                                " answer after BackingTimeout (%" PRIu64 " ms); the volume"
                                " stays offline and reconnects by itself once they are"
                                " answered", v->cfg->backing_timeout_ms);
                log_warn("Not reconnecting: %s", err->str);
                __atomic_store_n(&v->auto_reconnect, true, __ATOMIC_RELEASE);
                view_probe_resume(v);
                return -EBUSY;
        }
again:
        pthread_rwlock_wrlock(&v->mode_lock);
        if (reconnecting(v)) {
                joined = true;
                goto again;
        }
        /* Another reconnect ended as this one would (fcached asks twice for
         * one by hand: its own and the caller's). */
        if (v->state == VIEW_ONLINE || (joined && v->state == VIEW_WRITEBACK)) {
                pthread_rwlock_unlock(&v->mode_lock);
                g_string_append(out, "records=0\napplied=0\nmerged=0\nconflicts=0\n");
                return 0;
        }
        /* Never replay against what is not the volume's server (an unmounted share). */
        r = backing_reopen_root(v, err);
        if (r < 0) {
                pthread_rwlock_unlock(&v->mode_lock);
                /* The server away or not yet the volume's: asked by hand or
                 * not, the volume reconnects once it is back (the probe).  The
                 * caller says why (the probe's tries once, not every time). */
                __atomic_store_n(&v->auto_reconnect, true, __ATOMIC_RELEASE);
                view_probe_resume(v);
                return r;
        }
        pthread_rwlock_unlock(&v->mode_lock);
        /* Before any replay (the log's records meet what the server has now),
         * and without mode_lock: offline changes go on while it lists. */
        r = delete_bound(v, force, err);
        if (r < 0)
                return r;
        pthread_rwlock_wrlock(&v->mode_lock);
        if (reconnecting(v)) {          /* another reconnect meanwhile */
                joined = true;
                goto again;
        }
        if (v->state == VIEW_ONLINE) {
                pthread_rwlock_unlock(&v->mode_lock);
                g_string_append(out, "records=0\napplied=0\nmerged=0\nconflicts=0\n");
                return 0;
        }
        set_refused(v, NULL);
        set_offline_reason(v, NULL);
        from_writeback = v->state == VIEW_WRITEBACK;
        __atomic_store_n(&v->reint_done, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&v->reint_total, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&v->reint_bytes, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&v->state, VIEW_REINTEGRATING, __ATOMIC_RELEASE);
        __atomic_store_n(&v->reconnect_running, true, __ATOMIC_RELEASE);
        *ran = true;
        vfile_flush_dirty(v);
        pthread_rwlock_unlock(&v->mode_lock);
        if (from_writeback || __atomic_load_n(&v->trickle_in_round, __ATOMIC_ACQUIRE))
                trickle_wait(v);
        replay_start = g_get_monotonic_time();
        /* The log as it stands, while changes go on offline (logged after it). */
        r = view_replay_while_serving(v, &stats);
        pthread_rwlock_wrlock(&v->mode_lock);
        /* Stopped by a disconnect meanwhile. */
        if (r == 0 && v->state != VIEW_REINTEGRATING)
                r = -ECANCELED;
        /* The last bit with changes stopped: what they logged meanwhile. */
        if (r == 0) {
                vfile_flush_dirty(v);
                r = view_replay(v, &stats);
        }
        if (r < 0) {
                reconnect_stopped(v, r, from_writeback, err);
                pthread_rwlock_unlock(&v->mode_lock);
                log_warn("Reconnect stopped: %s", err->str);
                view_probe_resume(v);
                return r;
        }
        r = save_state(v, VIEW_ONLINE);
        if (r < 0) {
                __atomic_store_n(&v->state, VIEW_OFFLINE, __ATOMIC_RELEASE);
                pthread_rwlock_unlock(&v->mode_lock);
                g_string_printf(err, "cannot record the online state: %s", strerror(-r));
                return r;
        }
        fault_point(FAULT_VIEW_SWITCH_ONLINE);
        /* Every store copy may be older than the server now: revalidated at
         * open; on a backing numbered anew, forgotten at first use. */
        backing_numbering_unsure(v);
        ids = switch_served(v, VIEW_ONLINE, &unanswered);
        if (!unanswered)
                v->nodes_renumbered = false;
        pthread_rwlock_unlock(&v->mode_lock);
        invalidate_nodes(v, ids);
        if (unanswered) {
                /* Its log is on the server: back offline, nothing pending,
                 * and the probe reconnects once the server answers. */
                g_string_printf(err, "the server stopped answering within BackingTimeout as"
                                " the volume switched online; it is offline again and"
                                " reconnects by itself");
                log_warn("%s", err->str);
                set_offline_reason(v, "the backing did not answer within BackingTimeout");
                __atomic_store_n(&v->auto_reconnect, true, __ATOMIC_RELEASE);
                disconnect(v, true, NULL);
                view_probe_resume(v);
                return -ETIMEDOUT;
        }
        /* The mirror takes the server's state (merges, others' changes) while
         * changes go on online (they keep the mirror current as they are
         * made); then objects no record needs are forgotten, so the next
         * offline period bases its changes on what the server has then.
         * Shared: a switch offline meanwhile does not wait for the resync,
         * which stops at its next pin. */
        resync_start = g_get_monotonic_time();
        resync_after_reconnect(v);
        resync_end = g_get_monotonic_time();
        view_conflicts_recount(v);
        /* Online while the mirror took the server's state: no change made
         * in writeback (not yet on the server) was there for it to overwrite. */
        if (view_writeback_wanted(v) && view_writeback_enter(v) < 0)
                log_warn("Staying online: write-back cannot start");
        log_info("Volume is %s: %" PRIu64 " records, %" PRIu64 " applied, %" PRIu64
                 " already there, %" PRIu64 " merged, %" PRIu64 " conflicts, %" PRIu64 " held",
                 view_state_name(v), stats.total, stats.applied, stats.already, stats.merged,
                 stats.conflicts, stats.held);
        g_string_append_printf(out, "records=%" PRIu64 "\napplied=%" PRIu64 "\nalready=%" PRIu64
                               "\nmerged=%" PRIu64 "\nconflicts=%" PRIu64 "\nheld=%" PRIu64 "\n",
                               stats.total, stats.applied, stats.already, stats.merged,
                               stats.conflicts, stats.held);
        g_string_append_printf(out, "replay_ms=%" PRId64 "\nresync_ms=%" PRId64 "\n",
                               (resync_start - replay_start) / 1000,
                               (resync_end - resync_start) / 1000);
        return 0;
}

int view_writeback_enter(struct view *v)
{
        bool unanswered;
        GArray *ids;
        int r;

        cached_files_moved(v);
        /* Not now when a call stuck on the server holds the lock: the
         * next check of the link tries again. */
        if (!switch_lock(v, false)) {
                log_warn("A change is stuck in a backing call: not entering write-back now");
                return 0;
        }
        if (v->state != VIEW_ONLINE) {
                pthread_rwlock_unlock(&v->mode_lock);
                return 0;
        }
        if (!writers_noted_online(v)) {
                pthread_rwlock_unlock(&v->mode_lock);
                return 0;
        }
        r = save_state(v, VIEW_WRITEBACK);
        if (r < 0) {
                pthread_rwlock_unlock(&v->mode_lock);
                return r;
        }
        ids = switch_served(v, VIEW_WRITEBACK, &unanswered);
        pthread_rwlock_unlock(&v->mode_lock);
        log_info("Volume is in write-back: serving the local mirror of its pins, changes"
                 " shipped to the server in the background");
        invalidate_nodes(v, ids);
        view_writeback_kick(v);
        return 0;
}

void view_start_writeback(struct view *v)
{
        if (v->state != VIEW_ONLINE || !view_writeback_wanted(v))
                return;
        log_info("Volume starts in write-back (WriteBack=%s), serving the local mirror",
                 volume_config_write_back_name(v->cfg->write_back));
        v->state = VIEW_WRITEBACK;
        save_state(v, VIEW_WRITEBACK);
}

void view_writeback_lost(struct view *v, int r)
{
        pthread_rwlock_wrlock(&v->mode_lock);
        if (v->state == VIEW_WRITEBACK) {
                log_warn("Shipping the write-back log failed (%s): going offline", strerror(-r));
                __atomic_store_n(&v->auto_reconnect, true, __ATOMIC_RELEASE);
                set_offline_reason(v, r == -ETIMEDOUT ?
                                   "the backing did not answer within BackingTimeout" :
                                   "the backing stopped answering while shipping the"
                                   " write-back log");
                offline_from_mirror(v);
        }
        pthread_rwlock_unlock(&v->mode_lock);
        view_probe_resume(v);
}

int view_reconnect(struct view *v, bool force, GString *out, GString *err)
{
        bool ran = false;
        int r;

        /* The trickle leaves the switch to writeback to it (after its resync). */
        __atomic_add_fetch(&v->reconnects, 1, __ATOMIC_ACQ_REL);
        r = reconnect(v, force, out, err, &ran);
        if (ran)
                __atomic_store_n(&v->reconnect_running, false, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&v->reconnects, 1, __ATOMIC_ACQ_REL);
        return r;
}

void view_conflicts_recount(struct view *v)
{
        uint64_t n = 0;

        pthread_mutex_lock(&v->offline_lock);
        oplog_count(v->oplog, OPLOG_CONFLICT, &n);
        pthread_mutex_unlock(&v->offline_lock);
        __atomic_store_n(&v->conflicts, (unsigned)n, __ATOMIC_RELEASE);
}

void view_state_out(struct view *v, GString *out)
{
        /* The state first: a replay resets its totals before it announces itself. */
        int state = __atomic_load_n(&v->state, __ATOMIC_ACQUIRE);
        uint64_t total = __atomic_load_n(&v->reint_total, __ATOMIC_ACQUIRE);
        uint64_t done = __atomic_load_n(&v->reint_done, __ATOMIC_ACQUIRE);
        uint64_t pending = 0, conflicts = 0;

        if (done > total)
                done = total;
        if (state == VIEW_REINTEGRATING) {
                /* Answer from the replay's progress, without the log it is
                 * marking: a client polling during a long reconnect sees it move. */
                pending = total - done;
                conflicts = __atomic_load_n(&v->conflicts, __ATOMIC_ACQUIRE);
        } else {
                pthread_mutex_lock(&v->offline_lock);
                oplog_count(v->oplog, OPLOG_PENDING, &pending);
                oplog_count(v->oplog, OPLOG_CONFLICT, &conflicts);
                pthread_mutex_unlock(&v->offline_lock);
        }
        g_string_append_printf(out, "state=%s\npending=%" PRIu64 "\nconflicts=%" PRIu64 "\n",
                               view_state_text(state), pending, conflicts);
        g_string_append_printf(out, "reintegration_done=%" PRIu64 "\nreintegration_total=%" PRIu64
                               "\nreintegration_bytes=%" PRIu64 "\n", done, total,
                               __atomic_load_n(&v->reint_bytes, __ATOMIC_ACQUIRE));
        g_string_append_printf(out, "writeback=%s\n",
                               volume_config_write_back_name(v->cfg->write_back));
        if (state != VIEW_ONLINE) {
                pthread_mutex_lock(&reason_lock);
                if (v->offline_reason)
                        g_string_append_printf(out, "offline_reason=%s\n", v->offline_reason);
                if (v->reconnect_refused)
                        g_string_append_printf(out, "reconnect_refused=%s\nwould_delete=%" PRIu64
                                               "\npinned_objects=%" PRIu64 "\n",
                                               v->reconnect_refused,
                                               __atomic_load_n(&v->delete_gone, __ATOMIC_ACQUIRE),
                                               __atomic_load_n(&v->delete_pinned,
                                                               __ATOMIC_ACQUIRE));
                pthread_mutex_unlock(&reason_lock);
        }
        if (store_fault(v->store))
                g_string_append_printf(out, "store=rebuilt\nstore_reason=%s\n"
                                       "pins_restored=%" PRIu64 "\n", store_fault(v->store),
                                       store_pins_restored(v->store));
        else
                g_string_append(out, "store=ok\n");
        view_reindex_state(out);
        view_link_rtt_out(v, out);
}
