/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-control.c: the private control socket of a volume,
 * CacheDir/control.sock (mode 0600, CacheDir 0700: root only), used by
 * fcached and by the tests (fcache-view-ctl).
 *
 * Protocol, one request per line, any number per connection:
 *     COMMAND [TAB PATH] LF
 * COMMAND is in the project's command grammar (view-command.h); PATH is
 * relative to the volume root or absolute under its mountpoint (default:
 * the root).  The answer is key=value lines ending with an empty line; the
 * first is "status=0" or "status=-ERRNO", followed on failure by
 * "error=MESSAGE".
 *
 * Jobs: "job COMMAND [TAB PATH]" runs COMMAND as job N: the answer starts at
 * once with "job=N", a pin then sends "progress=FILES_DONE FILES_TOTAL
 * BYTES_FETCHED" lines as it goes (at most ten a second), and the answer
 * block follows.  "cancel N" (on another connection) stops job N: a pin then
 * answers status=-ECANCELED and unpins what it had pinned.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "view-command.h"
#include "view.h"

#define MAX_LINE 8192
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
        char line[96];
        int n;

        /* The last file is always reported, so the final count is exact. */
        if (now - job->last_progress_ns < PROGRESS_INTERVAL_NS && res->files < pj->files_total)
                return;
        job->last_progress_ns = now;
        n = snprintf(line, sizeof(line), "progress=%" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
                     res->files, pj->files_total, res->fetched);
        if (write(job->cfd, line, (size_t)n) < 0)
                pj->cancel = 1; /* nobody listens any more */
}

static struct ctl_job *job_start(int cfd)
{
        struct ctl_job *job = g_new0(struct ctl_job, 1);
        char line[48];
        int n;

        job->cfd = cfd;
        job->pin.progress = job_progress;
        job->pin.newly_pinned = g_array_new(FALSE, FALSE, sizeof(uint64_t));
        pthread_mutex_lock(&jobs_lock);
        if (!jobs)
                jobs = g_hash_table_new(g_int64_hash, g_int64_equal);
        job->id = next_job_id++;
        g_hash_table_insert(jobs, &job->id, job);
        pthread_mutex_unlock(&jobs_lock);
        n = snprintf(line, sizeof(line), "job=%" PRIu64 "\n", job->id);
        if (write(cfd, line, (size_t)n) < 0)
                job->pin.cancel = 1;
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

/* "cancel N" */
static int job_cancel(const char *arg, GString *err)
{
        struct ctl_job *job = NULL;
        char *end;
        uint64_t id = g_ascii_strtoull(arg, &end, 10);

        pthread_mutex_lock(&jobs_lock);
        if (jobs && *arg && !*end)
                job = g_hash_table_lookup(jobs, &id);
        if (job)
                job->pin.cancel = 1;
        pthread_mutex_unlock(&jobs_lock);
        if (!job) {
                g_string_printf(err, "no job '%s' is running", arg);
                return -ENOENT;
        }
        return 0;
}

struct out {
        GString *s;
};

__attribute__((format(printf, 2, 3)))
static void kv(struct out *o, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        g_string_append_vprintf(o->s, fmt, ap);
        va_end(ap);
        g_string_append_c(o->s, '\n');
}

static char *rel_path(struct view *v, const char *path)
{
        size_t ml = strlen(v->cfg->mountpoint);
        char *r;
        size_t n;

        if (path[0] == '/' && !strncmp(path, v->cfg->mountpoint, ml))
                path += ml;
        while (*path == '/')
                path++;
        r = g_strdup(*path ? path : ".");
        n = strlen(r);
        while (n > 1 && r[n - 1] == '/')
                r[--n] = 0;
        return r;
}

static int do_query_cached(struct view *v, int fd, struct out *o)
{
        struct sobj_info info;
        struct stat st;
        fuse_ino_t id;
        int r;

        if (fstat(fd, &st) < 0)
                return -errno;
        id = vnode_id_of_ino(v, st.st_ino);
        kv(o, "ino=%" PRIu64, (uint64_t)st.st_ino);
        kv(o, "cacheable=%s", (id ? vnode_cacheable(v, id) : !store_is_nocache(v->store, st.st_ino))
           ? "on" : "off");
        if (!S_ISREG(st.st_mode)) {
                kv(o, "type=%s", S_ISDIR(st.st_mode) ? "directory" : "other");
                return 0;
        }
        kv(o, "type=file");
        kv(o, "size=%" PRIu64, (uint64_t)st.st_size);
        r = store_info_ino(v->store, st.st_ino, &info);
        if (r == -ENOENT) {
                kv(o, "cached=no");
                kv(o, "cached_bytes=0");
                kv(o, "pinned=no");
                return 0;
        }
        if (r < 0)
                return r;
        kv(o, "cached=%s", !info.bytes ? "no" : info.complete ? "complete" : "partial");
        kv(o, "cached_bytes=%" PRIu64, info.bytes);
        kv(o, "blocks=%" PRIu32, info.blocks_present);
        kv(o, "blocks_total=%" PRIu32, info.blocks_total);
        kv(o, "block_size=%u", STORE_BLOCK);
        kv(o, "valid=%s", info.size == (uint64_t)st.st_size &&
           now_ns() - info.validated_ns <= (uint64_t)(v->lease_s * 1e9) ? "yes" : "stale");
        kv(o, "validated_ms_ago=%" PRIu64, (now_ns() - info.validated_ns) / 1000000);
        kv(o, "pinned=%s", info.pin >= 0 ? "yes" : "no");
        if (info.pin >= 0)
                kv(o, "priority=%d", info.pin);
        return 0;
}

static void stats_out(struct view *v, struct out *o)
{
        struct store_stats st;

        store_get_stats(v->store, &st);
        kv(o, "size=%" PRIu64, st.cache_size);
        kv(o, "reserve=%" PRIu64, st.reserve);
        kv(o, "capacity=%" PRIu64, st.capacity);
        kv(o, "used=%" PRIu64, st.used);
        kv(o, "pinned=%" PRIu64, st.pinned);
        kv(o, "free=%" PRIu64, st.free);
        kv(o, "brun=%" PRIu64, st.brun);
        kv(o, "bcull=%" PRIu64, st.bcull);
        kv(o, "bstop=%" PRIu64, st.bstop);
        kv(o, "objects=%" PRIu64, st.objects);
        kv(o, "files_limit=%" PRIu64, st.files_limit);
        if (st.files_limit) {
                kv(o, "files_free=%" PRIu64, st.files_free);
                kv(o, "frun=%" PRIu64, st.frun);
                kv(o, "fcull=%" PRIu64, st.fcull);
                kv(o, "fstop=%" PRIu64, st.fstop);
        }
        kv(o, "culled=%" PRIu64, st.culled);
        kv(o, "corrupt_blocks=%" PRIu64, st.corrupt);
        kv(o, "block_size=%u", STORE_BLOCK);
}

static int list_pin(void *ud, const char *path, int prio)
{
        struct out *o = ud;

        kv(o, "pin=%d %s", prio, path);
        return 0;
}

static void pin_out(struct out *o, const struct pin_result *res)
{
        kv(o, "files=%" PRIu64, res->files);
        kv(o, "bytes=%" PRIu64, res->total_bytes);
        kv(o, "fetched=%" PRIu64, res->fetched);
        kv(o, "failed=%" PRIu64, res->failed);
}

static int execute(struct view *v, const char *cmdline, const char *path, struct out *o,
                   GString *err, struct pin_job *job)
{
        struct view_command c;
        struct pin_result res;
        struct store_stats st;
        char msg[256];
        uint64_t avail = 0;
        int r, fd = -1;
        char *rel = NULL;

        r = view_command_parse(cmdline, &c, msg, sizeof(msg));
        if (r < 0) {
                g_string_assign(err, msg);
                return r;
        }
        switch (c.verb) {
        case VERB_QUERY_CACHED: case VERB_FLUSH: case VERB_PIN: case VERB_UNPIN:
        case VERB_SET_CACHEABLE: case VERB_FLUSH_VOLUME:
                /* These compare with or fetch from the server. */
                if (view_offline(v)) {
                        g_string_printf(err, "the volume is %s: '%s' needs the server"
                                        " (reconnect first)", view_state_name(v), cmdline);
                        return -EHOSTDOWN;
                }
                if (c.verb == VERB_FLUSH_VOLUME)
                        break;
                fd = view_open_path(v, path, O_PATH | O_NOFOLLOW);
                if (fd < 0) {
                        g_string_printf(err, "cannot open '%s' in the volume: %s", path,
                                        strerror(-fd));
                        return fd;
                }
                rel = rel_path(v, path);
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
                view_state_out(v, o->s);
                kv(o, "pid=%d", (int)getpid());
                kv(o, "takeover=%s", v->takeover ? "yes" : "no");
                kv(o, "backing=%s", v->cfg->backing);
                kv(o, "mountpoint=%s", v->cfg->mountpoint);
                kv(o, "file_handles=%s", v->handles ? "yes" : "no");
                kv(o, "passthrough=%s", passthrough_on() ? "yes" : "no");
                kv(o, "read_requests=%" PRIu64, passthrough_read_requests());
                pthread_mutex_lock(&v->itab_lock);
                kv(o, "nodes=%u", g_hash_table_size(v->nodes));
                kv(o, "node_fds=%u", v->open_fds);
                pthread_mutex_unlock(&v->itab_lock);
                break;
        case VERB_FLUSH:
                r = flush_subtree(v, fd, true, &res);
                kv(o, "flushed=%" PRIu64, res.fetched);
                kv(o, "kept_pinned=%" PRIu64, res.needed);
                break;
        case VERB_FLUSH_VOLUME:
                r = store_drop_all(v->store, false);
                if (r >= 0) {
                        kv(o, "flushed=%d", r);
                        r = 0;
                }
                break;
        case VERB_PIN:
                r = pin_subtree(v, fd, c.recursive, c.priority, c.dry_run, &res, &avail, job);
                kv(o, "needed=%" PRIu64, c.dry_run || r == -ENOSPC ? res.needed : res.total_bytes);
                kv(o, "available=%" PRIu64, avail);
                if (r == -ENOSPC) {
                        g_string_printf(err, "pin needs %" PRIu64 " bytes but only %" PRIu64
                                        " are available (CacheSize minus Reserve minus pinned)",
                                        res.needed, avail);
                        break;
                }
                kv(o, "fits=yes");
                pin_out(o, &res);
                if (r >= 0 && !c.dry_run)
                        r = store_pin_add(v->store, rel, c.priority);
                /* Kept complete on local disk for offline use. */
                if (r >= 0 && !c.dry_run) {
                        int m = mirror_sync_path(v, rel, c.recursive);

                        kv(o, "mirrored=%s", m == 0 ? "yes" : "no");
                        if (m < 0)
                                log_warn("Pinned '%s' is not completely mirrored for offline"
                                         " use: %s (the hoard walk retries)", rel, strerror(-m));
                }
                kv(o, "dry_run=%s", c.dry_run ? "yes" : "no");
                break;
        case VERB_UNPIN:
                r = unpin_subtree(v, fd, c.recursive, &res);
                if (r >= 0) {
                        int n = store_pin_remove(v->store, rel);

                        mirror_unpin_path(v, rel);

                        kv(o, "unpinned=%" PRIu64, res.files);
                        kv(o, "pins_removed=%d", n < 0 ? 0 : n);
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
                kv(o, "cacheable=%s", c.on ? "on" : "off");
                break;
        }
        case VERB_DISCONNECT:
                r = view_disconnect(v, err);
                if (r >= 0)
                        view_state_out(v, o->s);
                break;
        case VERB_RECONNECT:
                __atomic_store_n(&v->auto_reconnect, false, __ATOMIC_RELEASE);
                r = view_reconnect(v, o->s, err);
                if (r >= 0)
                        kv(o, "state=%s", view_state_name(v));
                break;
        case VERB_QUERY_REINTEGRATION:
                r = view_reintegration_dry_run(v, o->s, err);
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
        if (fd >= 0)
                close(fd);
        g_free(rel);
        if (r < 0 && !err->len)
                g_string_assign(err, strerror(-r));
        return r < 0 ? r : 0;
}

static void *conn_thread(void *arg)
{
        struct view *v = ((void **)arg)[0];
        int cfd = (int)(intptr_t)((void **)arg)[1];
        FILE *in = fdopen(cfd, "r");
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;

        free(arg);
        if (!in) {
                close(cfd);
                return NULL;
        }
        while ((n = getline(&line, &cap, in)) > 0) {
                struct out o = { g_string_new(NULL) };
                GString *err = g_string_new(NULL);
                GString *reply = g_string_new(NULL);
                char *tab, *path = (char *)"";
                int r;

                if (line[n - 1] == '\n')
                        line[--n] = 0;
                tab = strchr(line, '\t');
                if (tab) {
                        *tab = 0;
                        path = tab + 1;
                }
                if (n > MAX_LINE) {
                        g_string_assign(err, "request too long");
                        r = -E2BIG;
                } else if (!strncmp(line, "cancel ", 7)) {
                        r = job_cancel(line + 7, err);
                } else if (!strncmp(line, "job ", 4)) {
                        struct ctl_job *job = job_start(cfd);

                        r = execute(v, line + 4, path, &o, err, &job->pin);
                        job_end(job);
                } else if (!conflicts_execute(v, line, path, o.s, err, &r)) {
                        r = execute(v, line, path, &o, err, NULL);
                }
                g_string_append_printf(reply, "status=%d\n", r);
                if (r < 0)
                        g_string_append_printf(reply, "error=%s\n", err->str);
                g_string_append(reply, o.s->str);
                g_string_append_c(reply, '\n');
                if (write(cfd, reply->str, reply->len) < 0)
                        n = -1;
                g_string_free(o.s, TRUE);
                g_string_free(err, TRUE);
                g_string_free(reply, TRUE);
                if (n < 0)
                        break;
        }
        free(line);
        fclose(in);
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
