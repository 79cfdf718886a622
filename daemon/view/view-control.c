/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-control.c: the private control socket of a volume,
 * CacheDir/control.sock (mode 0600, CacheDir 0700: root only), used by
 * fcached, fcache-resolve and fcache-view-ctl.
 *
 * Protocol: framed messages (proto/ctlmsg.h), one request per connection.
 * A request carries a COMMAND in the project's command grammar
 * (view-command.h) and, with it, the descriptor of its target: an O_PATH
 * descriptor of an object of this view's mount, which the client resolved
 * with the right to (fcached: as the calling user).  The view maps it to
 * its node through the FUSE file handle (which holds the nodeid) and acts on
 * that node and no other: no path string is ever walked here on a client's
 * behalf.  Without a descriptor the target is the volume root.  A NAME
 * beside the descriptor names one entry of that directory (a conflict on an
 * object that may be gone).  The answer is a status, an error message on
 * failure, and key=value results.
 *
 * Jobs: a request with CTLA_RUN_AS_JOB runs as job N: CTLMSG_JOB with its
 * id comes at once, a pin then sends CTLMSG_PROGRESS (files done, total,
 * bytes fetched; at most ten a second), and the answer follows.  A request
 * with CTLA_CANCEL N (on another connection) stops job N: a pin then
 * answers status=-ECANCELED and unpins what it had pinned.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "view-command.h"
#include "view.h"

#define PROGRESS_INTERVAL_NS 100000000ull

/* A running job: the pin's own state, and where its progress goes. */
struct ctl_job {
        struct pin_job pin;
        uint64_t id;
        int cfd;
        uint64_t last_progress_ns;
};

static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static GHashTable *jobs;        /* protected by jobs_lock: id -> struct ctl_job */
static uint64_t next_job_id = 1; /* protected by jobs_lock */

static void job_progress(struct pin_job *pj, const struct pin_result *res)
{
        struct ctl_job *job = (struct ctl_job *)pj;
        uint64_t now = now_ns();
        struct ctlmsg m;

        /* The last file is always reported, so the final count is exact. */
        if (now - job->last_progress_ns < PROGRESS_INTERVAL_NS && res->files < pj->files_total)
                return;
        job->last_progress_ns = now;
        ctlmsg_init(&m, CTLMSG_PROGRESS);
        ctlmsg_put_u64(&m, CTLA_DONE, res->files);
        ctlmsg_put_u64(&m, CTLA_TOTAL, pj->files_total);
        ctlmsg_put_u64(&m, CTLA_BYTES, res->fetched);
        if (ctlmsg_send(job->cfd, &m, -1) < 0)
                pj->cancel = 1; /* nobody listens any more */
        ctlmsg_free(&m);
}

static struct ctl_job *job_start(int cfd)
{
        struct ctl_job *job = g_new0(struct ctl_job, 1);
        struct ctlmsg m;

        job->cfd = cfd;
        job->pin.progress = job_progress;
        job->pin.newly_pinned = g_array_new(FALSE, FALSE, sizeof(uint64_t));
        pthread_mutex_lock(&jobs_lock);
        if (!jobs)
                jobs = g_hash_table_new(g_int64_hash, g_int64_equal);
        job->id = next_job_id++;
        g_hash_table_insert(jobs, &job->id, job);
        pthread_mutex_unlock(&jobs_lock);
        ctlmsg_init(&m, CTLMSG_JOB);
        ctlmsg_put_u64(&m, CTLA_JOB_ID, job->id);
        if (ctlmsg_send(cfd, &m, -1) < 0)
                job->pin.cancel = 1;
        ctlmsg_free(&m);
        return job;
}

static void job_end(struct ctl_job *job)
{
        pthread_mutex_lock(&jobs_lock);
        g_hash_table_remove(jobs, &job->id);
        pthread_mutex_unlock(&jobs_lock);
        g_array_free(job->pin.newly_pinned, TRUE);
        g_free(job);
}

static int job_cancel(uint64_t id, GString *err)
{
        struct ctl_job *job = NULL;

        pthread_mutex_lock(&jobs_lock);
        if (jobs)
                job = g_hash_table_lookup(jobs, &id);
        if (job)
                job->pin.cancel = 1;
        pthread_mutex_unlock(&jobs_lock);
        if (!job) {
                g_string_printf(err, "no job %" PRIu64 " is running", id);
                return -ENOENT;
        }
        return 0;
}

/* Online: whether backing object fd (at @rel) may be stored: neither it
 * nor a directory above it is marked cacheable off. */
static bool path_cacheable(struct view *v, int fd, const char *rel)
{
        char *up = g_strdup(rel), *slash;
        bool ok = true;
        struct stat st;

        if (backing_fstatat(v, fd, NULL, &st) == 0 && store_is_nocache(v->store, st.st_ino))
                ok = false;
        while (ok && (slash = strrchr(up, '/'))) {
                *slash = 0;
                if (backing_fstatat(v, v->root_fd, up, &st) == 0 &&
                    store_is_nocache(v->store, st.st_ino))
                        ok = false;
        }
        if (ok && backing_fstatat(v, v->root_fd, NULL, &st) == 0 &&
            store_is_nocache(v->store, st.st_ino))
                ok = false;
        g_free(up);
        return ok;
}

static int do_query_cached(struct view *v, int fd, struct ctl_out *o)
{
        struct sobj_info info;
        struct stat st;
        fuse_ino_t id;
        int r;

        if (fstat(fd, &st) < 0)
                return -errno;
        id = vnode_id_of_ino(v, st.st_ino);
        out_kv(o, "ino=%" PRIu64, (uint64_t)st.st_ino);
        out_kv(o, "cacheable=%s", (id ? vnode_cacheable(v, id) : !store_is_nocache(v->store, st.st_ino))
           ? "on" : "off");
        if (!S_ISREG(st.st_mode)) {
                out_kv(o, "type=%s", S_ISDIR(st.st_mode) ? "directory" : "other");
                return 0;
        }
        out_kv(o, "type=file");
        out_kv(o, "size=%" PRIu64, (uint64_t)st.st_size);
        r = store_info_ino(v->store, st.st_ino, &info);
        if (r == -ENOENT) {
                out_kv(o, "cached=no");
                out_kv(o, "cached_bytes=0");
                out_kv(o, "pinned=no");
                return 0;
        }
        if (r < 0)
                return r;
        /* An empty file's container holds no byte and is complete. */
        out_kv(o, "cached=%s", !info.bytes && !info.container ? "no" :
               info.complete ? "complete" : "partial");
        out_kv(o, "cached_bytes=%" PRIu64, info.bytes);
        /* A file of the mirror (its container) is what offline serves. */
        out_kv(o, "offline_copy=%s", info.container ? "yes" : "no");
        out_kv(o, "blocks=%" PRIu32, info.blocks_present);
        out_kv(o, "blocks_total=%" PRIu32, info.blocks_total);
        out_kv(o, "block_size=%u", STORE_BLOCK);
        out_kv(o, "valid=%s", info.size == (uint64_t)st.st_size &&
           now_ns() - info.validated_ns <= (uint64_t)(v->lease_s * 1e9) ? "yes" : "stale");
        out_kv(o, "validated_ms_ago=%" PRIu64, (now_ns() - info.validated_ns) / 1000000);
        out_kv(o, "pinned=%s", info.pin >= 0 ? "yes" : "no");
        if (info.pin >= 0)
                out_kv(o, "priority=%d", info.pin);
        return 0;
}

static void stats_out(struct view *v, struct ctl_out *o)
{
        struct store_stats st;

        store_get_stats(v->store, &st);
        out_kv(o, "size=%" PRIu64, st.cache_size);
        out_kv(o, "reserve=%" PRIu64, st.reserve);
        out_kv(o, "capacity=%" PRIu64, st.capacity);
        out_kv(o, "used=%" PRIu64, st.used);
        out_kv(o, "pinned=%" PRIu64, st.pinned);
        out_kv(o, "free=%" PRIu64, st.free);
        out_kv(o, "brun=%" PRIu64, st.brun);
        out_kv(o, "bcull=%" PRIu64, st.bcull);
        out_kv(o, "bstop=%" PRIu64, st.bstop);
        out_kv(o, "objects=%" PRIu64, st.objects);
        out_kv(o, "files_limit=%" PRIu64, st.files_limit);
        if (st.files_limit) {
                out_kv(o, "files_free=%" PRIu64, st.files_free);
                out_kv(o, "frun=%" PRIu64, st.frun);
                out_kv(o, "fcull=%" PRIu64, st.fcull);
                out_kv(o, "fstop=%" PRIu64, st.fstop);
        }
        out_kv(o, "culled=%" PRIu64, st.culled);
        out_kv(o, "corrupt_blocks=%" PRIu64, st.corrupt);
        out_kv(o, "block_size=%u", STORE_BLOCK);
}

static int list_pin(void *ud, const char *path, int prio)
{
        struct ctl_out *o = ud;

        out_kv(o, "pin=%d %s", prio, path);
        return 0;
}

static void pin_out(struct ctl_out *o, const struct pin_result *res)
{
        out_kv(o, "files=%" PRIu64, res->files);
        out_kv(o, "bytes=%" PRIu64, res->total_bytes);
        out_kv(o, "fetched=%" PRIu64, res->fetched);
        out_kv(o, "failed=%" PRIu64, res->failed);
}

static void view_state_lines(struct view *v, struct ctl_out *o)
{
        GString *text = g_string_new(NULL);

        view_state_out(v, text);
        out_lines(o, text->str);
        g_string_free(text, TRUE);
}

static int view_reconnect_lines(struct view *v, bool force, struct ctl_out *o, GString *err)
{
        GString *text = g_string_new(NULL);
        int r = view_reconnect(v, force, text, err);

        if (r < 0)
                log_warn("Reconnect asked over the control socket failed: %s", err->str);
        out_lines(o, text->str);
        g_string_free(text, TRUE);
        return r;
}

/* pin, unpin and prefetch in writeback: the server's subtree name by name. */
static bool writeback_pin_verb(struct view *v, const struct view_command *c)
{
        return (c->verb == VERB_PIN || c->verb == VERB_UNPIN || c->verb == VERB_PREFETCH) &&
               __atomic_load_n(&v->state, __ATOMIC_ACQUIRE) == VIEW_WRITEBACK;
}

static int writeback_pin_execute(struct view *v, const struct view_command *c, int tfd,
                                 const char *rel, struct ctl_out *o, GString *err,
                                 struct pin_job *job)
{
        struct pin_result res;
        uint64_t avail = 0;
        int r, n = 0;

        switch (c->verb) {
        case VERB_PIN:
                r = pin_subtree_writeback(v, tfd, rel, c->recursive, c->priority, c->dry_run,
                                          &res, &avail, job, err);
                out_kv(o, "needed=%" PRIu64, res.needed);
                out_kv(o, "available=%" PRIu64, avail);
                if (r == -ENOSPC) {
                        g_string_printf(err, "pin needs %" PRIu64 " bytes but only %" PRIu64
                                        " are available (CacheSize minus Reserve minus pinned)",
                                        res.needed, avail);
                        return r;
                }
                if (r < 0)
                        break;
                out_kv(o, "fits=yes");
                pin_out(o, &res);
                if (!c->dry_run)
                        r = store_pin_add(v->store, rel, c->priority);
                if (r >= 0 && !c->dry_run) {
                        /* Not whole: a name failed or is kept local; the resync completes it. */
                        out_kv(o, "mirrored=%s", res.mirror_err == 0 ? "yes" : "no");
                        if (res.mirror_err < 0)
                                log_warn("Pinned '%s' in write-back is not completely"
                                         " mirrored: %" PRIu64 " files failed (the next"
                                         " reconnect's resync completes it)", rel, res.failed);
                }
                out_kv(o, "dry_run=%s", c->dry_run ? "yes" : "no");
                break;
        case VERB_PREFETCH:
                r = prefetch_subtree_writeback(v, tfd, rel, c->recursive, &res, job, err);
                if (r >= 0)
                        pin_out(o, &res);
                break;
        default:
                r = unpin_subtree_writeback(v, tfd, rel, c->recursive, &res, &n);
                if (r >= 0) {
                        out_kv(o, "unpinned=%" PRIu64, res.files);
                        out_kv(o, "pins_removed=%d", n);
                }
                break;
        }
        if (r >= 0)
                out_kv(o, "state=%s", view_state_name(v));
        if (r < 0 && !err->len)
                g_string_assign(err, strerror(-r));
        return r < 0 ? r : 0;
}

/*
 * Runs @cmdline on the request's target: @tfd, an O_PATH descriptor of the
 * object in what the view serves, and @rel, its path from the volume root.
 */
static int execute(struct view *v, const char *cmdline, int tfd, const char *rel,
                   struct ctl_out *o, GString *err, struct pin_job *job)
{
        struct view_command c;
        struct pin_result res;
        struct store_stats st;
        char msg[256];
        uint64_t avail = 0;
        int r, fd = -1;

        r = view_command_parse(cmdline, &c, msg, sizeof(msg));
        if (r < 0) {
                g_string_assign(err, msg);
                return r;
        }
        /* In writeback, a flush ships the changes made to its path (the root: all). */
        if (c.verb == VERB_FLUSH &&
            __atomic_load_n(&v->state, __ATOMIC_ACQUIRE) == VIEW_WRITEBACK)
                return writeback_sync(v, strcmp(rel, ".") ? tfd : -1, o, err);
        if (writeback_pin_verb(v, &c))
                return writeback_pin_execute(v, &c, tfd, rel, o, err, job);
        switch (c.verb) {
        case VERB_QUERY_CACHED: case VERB_FLUSH: case VERB_PIN: case VERB_UNPIN:
        case VERB_SET_CACHEABLE: case VERB_FLUSH_VOLUME: case VERB_PREFETCH:
                /* These compare with or fetch from the server. */
                if (view_offline(v)) {
                        g_string_printf(err, "the volume is %s: '%s' needs the server"
                                        " (reconnect first)", view_state_name(v), cmdline);
                        return -EHOSTDOWN;
                }
                if (c.verb == VERB_FLUSH_VOLUME)
                        break;
                fd = tfd;
                break;
        default:
                break;
        }
        switch (c.verb) {
        case VERB_QUERY_CACHED:
                r = do_query_cached(v, fd, o);
                break;
        case VERB_QUERY_CACHE:
                stats_out(v, o);
                break;
        case VERB_QUERY_PINNED:
                r = store_pin_foreach(v->store, list_pin, o);
                break;
        case VERB_QUERY_STATE:
                view_state_lines(v, o);
                out_kv(o, "pid=%d", (int)getpid());
                out_kv(o, "takeover=%s", v->takeover ? "yes" : "no");
                out_kv(o, "backing=%s", v->cfg->backing);
                out_kv(o, "mountpoint=%s", v->cfg->mountpoint);
                out_kv(o, "file_handles=%s", v->handles ? "yes" : "no");
                out_kv(o, "passthrough=%s", passthrough_on() ? "yes" : "no");
                out_kv(o, "read_requests=%" PRIu64, passthrough_read_requests());
                out_kv(o, "flush_requests=%" PRIu64, view_flush_requests());
                pthread_mutex_lock(&v->itab_lock);
                out_kv(o, "nodes=%u", g_hash_table_size(v->nodes));
                out_kv(o, "node_fds=%u", v->open_fds);
                pthread_mutex_unlock(&v->itab_lock);
                break;
        case VERB_FLUSH:
                r = flush_subtree(v, fd, true, &res);
                out_kv(o, "flushed=%" PRIu64, res.fetched);
                out_kv(o, "kept_pinned=%" PRIu64, res.needed);
                break;
        case VERB_FLUSH_VOLUME:
                r = store_drop_all(v->store, false);
                if (r >= 0) {
                        out_kv(o, "flushed=%d", r);
                        r = 0;
                }
                break;
        case VERB_PIN:
                r = pin_subtree(v, fd, c.recursive, c.priority, c.dry_run, &res, &avail, job);
                out_kv(o, "needed=%" PRIu64, c.dry_run || r == -ENOSPC ? res.needed : res.total_bytes);
                out_kv(o, "available=%" PRIu64, avail);
                if (r == -ENOSPC) {
                        g_string_printf(err, "pin needs %" PRIu64 " bytes but only %" PRIu64
                                        " are available (CacheSize minus Reserve minus pinned)",
                                        res.needed, avail);
                        break;
                }
                out_kv(o, "fits=yes");
                pin_out(o, &res);
                if (r >= 0 && !c.dry_run)
                        r = store_pin_add(v->store, rel, c.priority);
                /* The pin fetched it into the mirror, for offline use too. */
                if (r >= 0 && !c.dry_run) {
                        out_kv(o, "mirrored=%s", res.mirror_err == 0 ? "yes" : "no");
                        if (res.mirror_err < 0)
                                log_warn("Pinned '%s' is not completely mirrored for offline"
                                         " use: %s (the hoard walk retries)", rel,
                                         strerror(-res.mirror_err));
                }
                out_kv(o, "dry_run=%s", c.dry_run ? "yes" : "no");
                break;
        case VERB_PREFETCH:
                if (!path_cacheable(v, fd, rel)) {
                        g_string_printf(err, "'%s' is marked cacheable off (itself or a"
                                        " directory above it): its files are read through,"
                                        " never stored, so there is nothing to prefetch", rel);
                        r = -EINVAL;
                        break;
                }
                r = prefetch_subtree(v, fd, c.recursive, &res, job);
                pin_out(o, &res);
                out_kv(o, "skipped=%" PRIu64, res.skipped);
                break;
        case VERB_UNPIN:
                r = unpin_subtree(v, fd, c.recursive, &res);
                if (r >= 0) {
                        int n = store_pin_remove(v->store, rel);

                        mirror_unpin_path(v, rel);

                        out_kv(o, "unpinned=%" PRIu64, res.files);
                        out_kv(o, "pins_removed=%d", n < 0 ? 0 : n);
                }
                break;
        case VERB_SET_CACHEABLE: {
                struct stat sb;

                if (fstat(fd, &sb) < 0) {
                        r = -errno;
                        break;
                }
                r = store_set_nocache(v->store, sb.st_ino, !c.on);
                if (r >= 0 && !c.on)
                        r = flush_subtree(v, fd, true, &res);
                out_kv(o, "cacheable=%s", c.on ? "on" : "off");
                break;
        }
        case VERB_DISCONNECT:
                r = view_disconnect(v, err);
                if (r >= 0)
                        view_state_lines(v, o);
                break;
        case VERB_RECONNECT:
                __atomic_store_n(&v->auto_reconnect, false, __ATOMIC_RELEASE);
                r = view_reconnect_lines(v, c.force, o, err);
                if (r >= 0)
                        out_kv(o, "state=%s", view_state_name(v));
                break;
        case VERB_QUERY_REINTEGRATION:
                r = view_reintegration_dry_run(v, o, err);
                break;
        case VERB_SET_CACHE_SIZE:
        case VERB_SET_RESERVE:
                store_get_stats(v->store, &st);
                r = store_set_limits(v->store, c.verb == VERB_SET_CACHE_SIZE ? c.size : st.cache_size,
                                     c.verb == VERB_SET_RESERVE ? c.size : st.reserve);
                if (r == -ENOSPC)
                        g_string_printf(err, "pinned data (%" PRIu64 " bytes) would not fit",
                                        st.pinned);
                else if (r == -EINVAL)
                        g_string_printf(err, "Reserve must be smaller than CacheSize");
                else
                        stats_out(v, o);
                break;
        }
        if (r < 0 && !err->len)
                g_string_assign(err, strerror(-r));
        return r < 0 ? r : 0;
}

#ifndef AT_HANDLE_FID
#define AT_HANDLE_FID 0x200     /* Linux 6.5: a handle to identify, not to open */
#endif

/*
 * The node of descriptor @cfd, received from a client: it must be an object
 * of this view's mount, and its FUSE file handle names the node (nodeid,
 * then generation).  Returns an O_PATH descriptor of the node's object in
 * what the view serves, or -errno.
 */
static int target_node(struct view *v, int cfd, GString *err)
{
        union {
                struct file_handle fh;
                char buf[sizeof(struct file_handle) + MAX_HANDLE_SZ];
        } h = { .fh.handle_bytes = MAX_HANDLE_SZ };
        uint32_t words[2];
        struct vnode *n;
        struct stat st;
        uint64_t id;
        dev_t dev;
        int mnt, fd, r;

        if (fstat(cfd, &st) < 0)
                return -errno;
        r = view_mount_find(v->cfg->mountpoint, &dev);
        if (r < 0) {
                g_string_printf(err, "cannot find this view's mount %s: %s",
                                v->cfg->mountpoint, strerror(-r));
                return r;
        }
        if (st.st_dev != dev) {
                g_string_printf(err, "the request's target is not in this volume (%s)",
                                v->cfg->mountpoint);
                return -EXDEV;
        }
        if (name_to_handle_at(cfd, "", &h.fh, &mnt, AT_EMPTY_PATH) < 0 &&
            (errno != EOPNOTSUPP ||
             name_to_handle_at(cfd, "", &h.fh, &mnt, AT_EMPTY_PATH | AT_HANDLE_FID) < 0))
                return -errno;
        /* FUSE's handles: FILEID_INO64_GEN (0x81), with the parent (0x82). */
        if ((h.fh.handle_type != 0x81 && h.fh.handle_type != 0x82) || h.fh.handle_bytes < 12) {
                g_string_printf(err, "the request's target has a handle of type %d, not FUSE's",
                                h.fh.handle_type);
                return -EXDEV;
        }
        memcpy(words, h.fh.f_handle, sizeof(words));
        id = (uint64_t)words[0] << 32 | words[1];
        fd = vnode_get(v, id, &n);
        if (fd < 0) {
                g_string_printf(err, "the request's target (node %" PRIu64 ") is not known: %s",
                                id, strerror(-fd));
                return fd;
        }
        if ((vnode_type(n) ^ st.st_mode) & S_IFMT)
                r = -ESTALE;
        else if ((r = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0)
                r = -errno;
        vnode_put(v, n);
        if (r == -ESTALE)
                g_string_printf(err, "the request's target changed type");
        return r;
}

/* The root of what is served, as an O_PATH descriptor. */
static int target_root(struct view *v)
{
        struct vnode *n;
        int fd = vnode_get(v, FUSE_ROOT_ID, &n), r;

        if (fd < 0)
                return fd;
        r = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (r < 0)
                r = -errno;
        vnode_put(v, n);
        return r;
}

/* The request's target: its descriptor, and its path from the volume root. */
static int request_target(struct view *v, const struct ctl_request *req, int cfd, int *tfd,
                          char **rel, GString *err)
{
        char *r = NULL;
        int fd = -1;

        /* A switch between taking the target and the served root moves the
         * one from the other's tree: taken again once the switch is done. */
        for (int tries = 0; !r && tries < 100; tries++) {
                if (tries)
                        usleep(20000);
                fd = req->has_target ? target_node(v, cfd, err) : target_root(v);
                if (fd < 0)
                        return fd;
                r = view_rel_path(view_served_root(v), fd, NULL);
                if (!r)
                        close(fd);
        }
        if (!r) {
                g_string_assign(err, "the request's target is not where the volume serves "
                                "(it moved at each of the switches between online and offline"
                                " for 2 s; try again)");
                return -EAGAIN;
        }
        if (req->name) {
                char *full = strcmp(r, ".") ? g_strconcat(r, "/", req->name, NULL)
                                             : g_strdup(req->name);

                g_free(r);
                r = full;
        }
        *tfd = fd;
        *rel = r;
        return 0;
}

static void serve_request(struct view *v, int cfd)
{
        struct ctl_request req = { 0 };
        struct ctl_out o;
        GString *err = g_string_new(NULL);
        char *rel = NULL;
        const char *under;
        uint8_t *buf = NULL;
        size_t len;
        char why[160];
        int r, rfd = -1, tfd = -1;

        ctlmsg_init(&o.msg, CTLMSG_ANSWER);
        r = ctlmsg_recv(cfd, &buf, &len, &rfd);
        if (r == -ECONNRESET)
                goto out;
        if (r == 0)
                r = ctl_request_decode(buf, len, &req, why, sizeof(why));
        else
                snprintf(why, sizeof(why), "malformed request: %s", strerror(-r));
        if (r < 0) {
                g_string_assign(err, why);
        } else if (req.has_target != (rfd >= 0)) {
                g_string_assign(err, req.has_target ? "the request's target descriptor is missing"
                                                    : "a descriptor came without a target");
                r = -EBADMSG;
        } else if (req.has_cancel) {
                r = job_cancel(req.cancel, err);
        } else if ((r = request_target(v, &req, rfd, &tfd, &rel, err)) < 0) {
                /* err says why */
        } else if (req.run_as_job) {
                struct ctl_job *job = job_start(cfd);

                r = execute(v, req.command, tfd, rel, &o, err, &job->pin);
                job_end(job);
        } else {
                under = strcmp(rel, ".") ? rel : "";
                if (!conflicts_execute(v, req.command, under, &o, err, &r) &&
                    !metered_execute(v, req.command, &o, err, &r) &&
                    !writeback_execute(v, req.command, tfd, rel, &o, err, &r))
                        r = execute(v, req.command, tfd, rel, &o, err, NULL);
        }
        ctlmsg_put_s32(&o.msg, CTLA_STATUS, r < 0 ? r : 0);
        if (r < 0)
                ctlmsg_put_str(&o.msg, CTLA_ERROR, err->len ? err->str : strerror(-r));
        if (ctlmsg_send(cfd, &o.msg, -1) == -EMSGSIZE) {
                struct ctlmsg small;

                ctlmsg_init(&small, CTLMSG_ANSWER);
                ctlmsg_put_s32(&small, CTLA_STATUS, -E2BIG);
                ctlmsg_put_str(&small, CTLA_ERROR, "the answer is larger than a message may be");
                ctlmsg_send(cfd, &small, -1);
                ctlmsg_free(&small);
        }
out:
        if (tfd >= 0)
                close(tfd);
        if (rfd >= 0)
                close(rfd);
        free(buf);
        g_free(rel);
        ctl_request_clear(&req);
        ctlmsg_free(&o.msg);
        g_string_free(err, TRUE);
}

static void *conn_thread(void *arg)
{
        struct view *v = ((void **)arg)[0];
        int cfd = (int)(intptr_t)((void **)arg)[1];

        free(arg);
        serve_request(v, cfd);
        close(cfd);
        return NULL;
}

static void *accept_thread(void *arg)
{
        struct view *v = arg;

        for (;;) {
                int cfd = accept4(v->control_fd, NULL, NULL, SOCK_CLOEXEC);
                pthread_t t;
                void **a;

                if (cfd < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        if (errno == EBADF || errno == EINVAL)
                                return NULL;
                        log_warn("Control socket accept failed: %m, ignoring");
                        sleep(1);
                        continue;
                }
                a = malloc(2 * sizeof(*a));
                if (!a) {
                        close(cfd);
                        continue;
                }
                a[0] = v;
                a[1] = (void *)(intptr_t)cfd;
                if (pthread_create(&t, NULL, conn_thread, a) != 0) {
                        free(a);
                        close(cfd);
                        continue;
                }
                pthread_detach(t);
        }
        return NULL;
}

int control_start(struct view *v)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        pthread_t t;
        int fd;

        if (asprintf(&v->control_path, "%s/control.sock", v->cfg->cache_dir) < 0)
                return -ENOMEM;
        if (strlen(v->control_path) >= sizeof(sa.sun_path)) {
                log_error("Control socket path %s is too long", v->control_path);
                return -ENAMETOOLONG;
        }
        strcpy(sa.sun_path, v->control_path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        unlink(v->control_path);
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(v->control_path, 0600) < 0 ||
            listen(fd, 16) < 0) {
                log_error("Failed to set up control socket %s: %m", v->control_path);
                close(fd);
                return -errno;
        }
        v->control_fd = fd;
        if (pthread_create(&t, NULL, accept_thread, v) != 0) {
                close(fd);
                return -EAGAIN;
        }
        pthread_detach(t);
        return 0;
}

void control_stop(struct view *v)
{
        if (v->control_fd >= 0)
                shutdown(v->control_fd, SHUT_RDWR);
}
