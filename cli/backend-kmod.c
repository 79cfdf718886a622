/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * backend-kmod.c: the cache commands done by fcache.ko, in the kernel, on
 * the kernel's own caches of any mounted filesystem.
 *
 * A small hand-written generic netlink client (no libnl): one socket per
 * command (per worker on trees), the target passed as its O_PATH
 * descriptor.  Long commands come back as a job id and a later
 * FCACHE_CMD_DONE; closing the socket cancels them, which is how
 * cancellation reaches the kernel.  Result keys are those of the user
 * backend where they mean the same (pages_cached, bytes_cached, files...)
 * plus what only the kernel knows (pinned, pages_held, cookie...).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "../kmod/uapi/fcache_netlink.h"
#include "backend-kmod.h"
#include "kmod-conn.h"
#include "mounts.h"
#include "pagecache.h"
#include "walk.h"

/* ---- results ------------------------------------------------------------ */

static uint64_t page_size(void)
{
        return (uint64_t)fc_page_size();
}

static void add_pages(struct fc_result *res, const char *what, uint64_t pages)
{
        char key[64];

        snprintf(key, sizeof(key), "pages_%s", what);
        fc_result_add_u64(res, key, pages);
        snprintf(key, sizeof(key), "bytes_%s", what);
        fc_result_add_u64(res, key, pages * page_size());
}

static const char *pin_mode(uint64_t pinned)
{
        if (pinned & FCACHE_PIN_MEMORY)
                return "memory";
        return pinned & FCACHE_PIN_PINNED ? "plain" : "none";
}

static const char *cookie_name(uint64_t c)
{
        return c == FCACHE_COOKIE_IN_USE ? "in-use" : c == FCACHE_COOKIE_IDLE ? "idle" : "none";
}

static int kfail(struct fc_request *req, int err, const struct kreply *r, const char *what)
{
        if (err == -ECANCELED)
                return fc_error_set(req->error, ECANCELED, "%s: cancelled", req->target->display);
        return fc_error_set(req->error, -err, "%s: %s: %s%s%s", req->target->display, what,
                            strerror(-err), r && r->msg[0] ? ": " : "",
                            r && r->msg[0] ? r->msg : "");
}

/* the pin and FS-Cache state of a QUERY reply: what only the kernel knows */
static void add_query_kernel(struct fc_result *res, const struct kreply *r)
{
        if (r->fstype[0])
                fc_result_add_str(res, "fs_type", r->fstype);
        fc_result_add_str(res, "pinned", r->v[FCACHE_A_PINNED] ? "yes" : "no");
        fc_result_add_str(res, "pin_mode", pin_mode(r->v[FCACHE_A_PINNED]));
        if (r->has[FCACHE_A_PAGES_HELD]) {
                fc_result_add_u64(res, "pages_held", r->v[FCACHE_A_PAGES_HELD]);
                fc_result_add_u64(res, "pages_stale", r->v[FCACHE_A_PAGES_STALE]);
        }
        fc_result_add_str(res, "fscache_cookie", cookie_name(r->v[FCACHE_A_COOKIE]));
        fc_result_add_u64(res, "fscache_cookie_users", r->v[FCACHE_A_COOKIE_USERS]);
}

/* the keys of a QUERY reply, as the user backend names them */
static void add_query(struct fc_result *res, const struct kreply *r)
{
        fc_result_add_str(res, "measured", "yes");
        fc_result_add_str(res, "method", "kmod");
        fc_result_add_u64(res, "page_size", page_size());
        fc_result_add_u64(res, "files", r->v[FCACHE_A_FILES]);
        fc_result_add_u64(res, "bytes", r->v[FCACHE_A_FILE_SIZE]);
        fc_result_add_u64(res, "pages_total", r->v[FCACHE_A_PAGES_TOTAL]);
        add_pages(res, "cached", r->v[FCACHE_A_PAGES_CACHED]);
        add_pages(res, "dirty", r->v[FCACHE_A_PAGES_DIRTY]);
        add_pages(res, "writeback", r->v[FCACHE_A_PAGES_WRITEBACK]);
        fc_result_add_u64(res, "pages_evicted", r->v[FCACHE_A_PAGES_EVICTED]);
        fc_result_add_u64(res, "files_dirty", r->v[FCACHE_A_FILES_DIRTY]);
        fc_result_add_u64(res, "pages_unstable", r->v[FCACHE_A_PAGES_UNSTABLE]);
        add_query_kernel(res, r);
}

/* ---- per-file work on trees -------------------------------------------- */

struct ktally {
        struct kconn c;
        uint8_t cmd;
        uint32_t flags;
        const volatile int *cancel;
        uint64_t files, bytes, cached_before, dirty_before, cached_after, total, held, failed;
        uint64_t writeback, evicted, unstable, files_dirty;  /* a query's, as the user backend sums them */
        uint64_t unmeasured;    /* files acted on whose pages the module would not show */
        uint64_t pinned;        /* files a tree flush left alone because they are pinned */
        bool skip_pinned;       /* a tree flush: a pinned file is kept, and counted */
        int first_errno;        /* of the first failed command, with first_error */
        char first_error[600];
};

/*
 * QUERY, the command, and for FLUSH QUERY again.  QUERY follows cachestat's
 * rule (owner or write access); a caller who may only read the file may
 * still prefetch, flush or pin it, which is done without the figures
 * (counted in unmeasured).  A failed command is counted, not returned.
 */
static int tally_fd(struct ktally *t, int fd)
{
        struct kreply q, r;
        bool measured = true;
        int err;

        err = kcall(&t->c, FCACHE_CMD_QUERY, fd, 0, &q, t->cancel);
        if (err == -EPERM && t->cmd != FCACHE_CMD_QUERY)
                measured = false;
        else if (err)
                return err;
        if (t->skip_pinned && measured && q.v[FCACHE_A_PINNED]) {
                t->pinned++;
                return 0;
        }
        if (t->cmd != FCACHE_CMD_QUERY) {
                err = kcall(&t->c, t->cmd, fd, t->flags, &r, t->cancel);
                if (err) {
                        if (!t->failed++) {
                                t->first_errno = -err;
                                snprintf(t->first_error, sizeof(t->first_error), "%s%s%s",
                                         strerror(-err), r.msg[0] ? ": " : "", r.msg);
                        }
                        return err == -ECANCELED ? err : 0;
                }
                t->held += r.v[FCACHE_A_PAGES_HELD];
        }
        t->files++;
        if (!measured) {
                uint64_t size;
                mode_t mode;

                t->unmeasured++;
                if (fc_file_type_size(fd, &mode, &size) == 0)
                        t->bytes += size;
                return 0;
        }
        t->bytes += q.v[FCACHE_A_FILE_SIZE];
        t->total += q.v[FCACHE_A_PAGES_TOTAL];
        t->cached_before += q.v[FCACHE_A_PAGES_CACHED];
        t->dirty_before += q.v[FCACHE_A_PAGES_DIRTY];
        t->writeback += q.v[FCACHE_A_PAGES_WRITEBACK];
        t->evicted += q.v[FCACHE_A_PAGES_EVICTED];
        t->unstable += q.v[FCACHE_A_PAGES_UNSTABLE];
        t->files_dirty += q.v[FCACHE_A_PAGES_DIRTY] > 0;
        if (t->cmd == FCACHE_CMD_PREFETCH)
                t->cached_after += r.v[FCACHE_A_PAGES_CACHED];
        else if (t->cmd == FCACHE_CMD_FLUSH) {
                err = kcall(&t->c, FCACHE_CMD_QUERY, fd, 0, &q, t->cancel);
                if (err)
                        return err;
                t->cached_after += q.v[FCACHE_A_PAGES_CACHED];
        } else
                t->cached_after += q.v[FCACHE_A_PAGES_CACHED];
        return 0;
}

static int walk_file(void *ctx, int dirfd, const char *name, uint64_t *bytes)
{
        struct ktally *t = ctx;
        int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC), err;
        uint64_t before = t->bytes;

        if (fd < 0)
                return -errno;
        err = tally_fd(t, fd);
        close(fd);
        *bytes = t->bytes - before;
        return err;
}

static int ktally_init(void *tally, void *arg)
{
        const struct ktally *seed = arg;
        struct ktally *t = tally;

        t->cmd = seed->cmd;
        t->flags = seed->flags;
        t->cancel = seed->cancel;
        t->skip_pinned = seed->skip_pinned;
        return kconn_open(&t->c);
}

static void ktally_merge(void *sum, void *tally, void *arg)
{
        struct ktally *s = sum;
        struct ktally *t = tally;

        s->files += t->files;
        s->bytes += t->bytes;
        s->total += t->total;
        s->cached_before += t->cached_before;
        s->dirty_before += t->dirty_before;
        s->writeback += t->writeback;
        s->evicted += t->evicted;
        s->unstable += t->unstable;
        s->files_dirty += t->files_dirty;
        s->cached_after += t->cached_after;
        s->held += t->held;
        s->unmeasured += t->unmeasured;
        s->pinned += t->pinned;
        if (t->failed && !s->failed) {
                s->first_errno = t->first_errno;
                snprintf(s->first_error, sizeof(s->first_error), "%s", t->first_error);
        }
        s->failed += t->failed;
        kconn_close(&t->c);
}

static const struct fc_walk_tally_ops ktally_ops = {
        .tally_size = sizeof(struct ktally),
        .file = walk_file, .init = ktally_init, .merge = ktally_merge,
};

/* Run sum's command on every regular file under the target directory, a socket per worker. */
static int walk_tree(struct fc_request *req, bool top_only, struct ktally *sum,
                     struct fc_walk_stats *st)
{
        struct ktally seed = { .cmd = sum->cmd, .flags = sum->flags,
                               .cancel = req->opts->cancel,
                               .skip_pinned = sum->cmd == FCACHE_CMD_FLUSH };
        int dirfd = fc_target_open_data(req->target, req->error), r;

        if (dirfd < 0)
                return dirfd;
        r = fc_backend_walk(req, dirfd, top_only, 4, &ktally_ops, &seed, sum, st);
        close(dirfd);
        return r;
}

static void add_change(struct fc_result *res, const struct ktally *s, bool fetched)
{
        fc_result_add_u64(res, "files", s->files);
        fc_result_add_u64(res, "bytes", s->bytes);
        if (s->unmeasured)
                fc_result_add_u64(res, "files_unmeasured", s->unmeasured);
        if (s->pinned)
                fc_result_add_u64(res, "files_pinned", s->pinned);
        fc_result_add_u64(res, "pages_total", s->total);
        fc_result_add_u64(res, "pages_cached_before", s->cached_before);
        fc_result_add_u64(res, "pages_dirty_before", s->dirty_before);
        add_pages(res, "cached", s->cached_after);
        if (fetched && s->cached_after >= s->cached_before)
                fc_result_add_u64(res, "pages_fetched", s->cached_after - s->cached_before);
        else if (s->cached_before >= s->cached_after)
                fc_result_add_u64(res, "pages_dropped", s->cached_before - s->cached_after);
}

/* ---- commands ----------------------------------------------------------- */

static bool is_dir(const struct fc_request *req)
{
        return S_ISDIR(req->target->stx.stx_mode);
}

static int run_query(struct fc_request *req, struct kconn *c)
{
        struct kreply r;
        bool rec = req->cmd->mods & FC_MOD_RECURSIVE;
        int err;

        fc_result_add_str(req->result, "type", fc_file_type_name(req->target->stx.stx_mode));
        if (is_dir(req)) {
                /*
                 * The directory's files (recursive: its subtree's), opened as
                 * the user backend walks them: the module's own recursive
                 * query sees only the inodes in memory.
                 */
                struct ktally sum = { .cmd = FCACHE_CMD_QUERY };
                struct fc_walk_stats st;

                err = walk_tree(req, !rec, &sum, &st);
                if (err)
                        return err;
                err = kcall(c, FCACHE_CMD_QUERY, req->target->fd, 0, &r, req->opts->cancel);
                if (err)
                        return kfail(req, err, &r, "query");
                r.v[FCACHE_A_FILES] = sum.files;
                r.v[FCACHE_A_FILE_SIZE] = sum.bytes;
                r.v[FCACHE_A_PAGES_TOTAL] = sum.total;
                r.v[FCACHE_A_PAGES_CACHED] = sum.cached_before;
                r.v[FCACHE_A_PAGES_DIRTY] = sum.dirty_before;
                r.v[FCACHE_A_PAGES_WRITEBACK] = sum.writeback;
                r.v[FCACHE_A_PAGES_EVICTED] = sum.evicted;
                r.v[FCACHE_A_PAGES_UNSTABLE] = sum.unstable;
                r.v[FCACHE_A_FILES_DIRTY] = sum.files_dirty;
                add_query(req->result, &r);
                fc_walk_stats_add_result(req->result, &st, sum.failed, sum.first_error);
                fc_backend_note_pages_kept(req);
                return 0;
        }
        err = kcall(c, FCACHE_CMD_QUERY, req->target->fd, 0, &r, req->opts->cancel);
        if (err)
                return kfail(req, err, &r, "query");
        if (!S_ISREG(req->target->stx.stx_mode)) {
                /* a device, fifo or symlink holds no file data: not measured, as without the module */
                fc_result_add_str(req->result, "measured", "no");
                fc_result_add_u64(req->result, "files", 0);
                add_query_kernel(req->result, &r);
                return 0;
        }
        add_query(req->result, &r);
        fc_backend_note_pages_kept(req);
        return 0;
}

struct pinscan {
        const char *prefix;
        size_t len;
        uint64_t pins, memory, held;
};

static void count_pin(const struct kreply *r, void *arg)
{
        struct pinscan *s = arg;

        if (strncmp(r->path, s->prefix, s->len) ||
            (r->path[s->len] && r->path[s->len] != '/' && s->len > 1))
                return;
        s->pins++;
        s->memory += !!(r->v[FCACHE_A_PINNED] & FCACHE_PIN_MEMORY);
        s->held += r->v[FCACHE_A_PAGES_HELD];
}

static int run_query_pinned(struct fc_request *req, struct kconn *c)
{
        struct kreply r;
        int err;

        fc_result_add_str(req->result, "type", fc_file_type_name(req->target->stx.stx_mode));
        err = kcall(c, FCACHE_CMD_QUERY, req->target->fd, 0, &r, req->opts->cancel);
        if (err)
                return kfail(req, err, &r, "query");
        fc_result_add_str(req->result, "pinned", r.v[FCACHE_A_PINNED] ? "yes" : "no");
        fc_result_add_str(req->result, "pin_mode", pin_mode(r.v[FCACHE_A_PINNED]));
        if (r.has[FCACHE_A_PAGES_HELD])
                fc_result_add_u64(req->result, "pages_held", r.v[FCACHE_A_PAGES_HELD]);
        if (is_dir(req)) {
                /* the pins under the directory, by path */
                char link[64], path[PATH_MAX];
                struct pinscan s = { 0 };
                struct kmsg m;
                ssize_t n;

                snprintf(link, sizeof(link), "/proc/self/fd/%d", req->target->fd);
                n = readlink(link, path, sizeof(path) - 1);
                if (n < 0)
                        return fc_error_set(req->error, errno, "%s: cannot name it: %m",
                                            req->target->display);
                path[n] = '\0';
                s.prefix = path;
                s.len = (size_t)n;
                kmsg_init(&m, c->family, FCACHE_CMD_PIN_LIST, NLM_F_DUMP);
                err = kconn_send(c, &m);
                if (!err)
                        err = kconn_wait(c, &r, count_pin, &s, req->opts->cancel);
                if (err)
                        return kfail(req, err, &r, "pin list");
                fc_result_add_u64(req->result, "pins", s.pins);
                fc_result_add_u64(req->result, "pins_memory", s.memory);
                fc_result_add_u64(req->result, "pins_pages_held", s.held);
        }
        return 0;
}

static int run_query_cache(struct fc_request *req, struct kconn *c)
{
        struct kreply r;
        int err = fc_backend_user.run(req);

        if (err)
                return err;
        err = kcall(c, FCACHE_CMD_LIMITS_GET, -1, 0, &r, req->opts->cancel);
        if (err)
                return kfail(req, err, &r, "limits");
        fc_result_add_u64(req->result, "kmod_pin_budget_bytes", r.v[FCACHE_A_PIN_BUDGET]);
        fc_result_add_u64(req->result, "kmod_pin_used_bytes", r.v[FCACHE_A_PIN_USED]);
        fc_result_add_u64(req->result, "kmod_pins", r.v[FCACHE_A_PIN_COUNT]);
        fc_result_add_u64(req->result, "kmod_pin_max", r.v[FCACHE_A_PIN_MAX]);
        fc_result_add_u64(req->result, "kmod_job_max", r.v[FCACHE_A_JOB_MAX]);
        return 0;
}

/* flush and prefetch of one file, as one file of a tree is done */
static int run_file_change(struct fc_request *req, struct kconn *c, uint8_t cmd)
{
        struct ktally sum = { .c = *c, .cmd = cmd, .cancel = req->opts->cancel };
        int err = tally_fd(&sum, req->target->fd);

        c->seq = sum.c.seq;
        if (err)
                return kfail(req, err, NULL, "query");
        if (sum.failed)
                return fc_error_set(req->error, sum.first_errno, "%s: %s: %s",
                                    req->target->display, fc_op_name(req->cmd->op),
                                    sum.first_error);
        add_change(req->result, &sum, cmd == FCACHE_CMD_PREFETCH);
        return 0;
}

static int run_tree(struct fc_request *req, uint8_t cmd, uint32_t flags, bool top_only)
{
        struct ktally sum = { .cmd = cmd, .flags = flags };
        struct fc_walk_stats st;
        int err = walk_tree(req, top_only, &sum, &st);

        if (err)
                return err;
        add_change(req->result, &sum, cmd == FCACHE_CMD_PREFETCH);
        if (cmd == FCACHE_CMD_PIN || cmd == FCACHE_CMD_UNPIN)
                fc_result_add_u64(req->result, "pages_held", sum.held);
        fc_walk_stats_add_result(req->result, &st, sum.failed, sum.first_error);
        return 0;
}

static int run_flush(struct fc_request *req, struct kconn *c)
{
        fc_result_add_str(req->result, "type", fc_file_type_name(req->target->stx.stx_mode));
        if (fc_backend_refuse_not_file(req) < 0)
                return -EINVAL;
        if (!is_dir(req))
                return run_file_change(req, c, FCACHE_CMD_FLUSH);
        /*
         * Every file of the subtree, opened as the user backend walks it: the
         * module's own directory flush sees only the inodes in memory, so
         * its counts would depend on what the cache happens to hold.
         */
        if (fc_backend_refuse_memory_backed(req, req->target->fd, req->target->display) < 0)
                return -EOPNOTSUPP;
        return run_tree(req, FCACHE_CMD_FLUSH, 0, false);
}

static int run_prefetch(struct fc_request *req, struct kconn *c)
{
        mode_t mode = req->target->stx.stx_mode;
        int err;

        fc_result_add_str(req->result, "type", fc_file_type_name(mode));
        if (S_ISDIR(mode))
                err = run_tree(req, FCACHE_CMD_PREFETCH, 0, !(req->cmd->mods & FC_MOD_RECURSIVE));
        else if (fc_backend_refuse_not_file(req) < 0)
                return -EINVAL;
        else
                err = run_file_change(req, c, FCACHE_CMD_PREFETCH);
        if (!err)
                fc_backend_note_pages_kept(req);
        return err;
}

static uint32_t pin_flags(const struct fc_request *req)
{
        uint32_t flags = 0;

        if (req->cmd->mods & FC_MOD_DRY_RUN)
                flags |= FCACHE_FLAG_DRY_RUN;
#ifdef FC_MOD_MEMORY
        if (req->cmd->mods & FC_MOD_MEMORY)
                flags |= FCACHE_FLAG_MEMORY;
#endif
        return flags;
}

static int run_pin(struct fc_request *req, struct kconn *c, uint8_t cmd)
{
        uint32_t flags = cmd == FCACHE_CMD_PIN ? pin_flags(req) : 0;
        struct kreply r;
        int err;

        fc_result_add_str(req->result, "type", fc_file_type_name(req->target->stx.stx_mode));
        if (cmd == FCACHE_CMD_PIN && (req->cmd->mods & FC_MOD_PRIORITY))
                fc_result_add_u64(req->result, "priority", (uint64_t)req->cmd->priority);
        if (is_dir(req) && (req->cmd->mods & FC_MOD_RECURSIVE))
                return run_tree(req, cmd, flags, false);
        err = kcall(c, cmd, req->target->fd, flags, &r, req->opts->cancel);
        if (err)
                return kfail(req, err, &r, cmd == FCACHE_CMD_PIN ? "pin" : "unpin");
        if (cmd == FCACHE_CMD_PIN) {
                fc_result_add_str(req->result, "pinned",
                                  flags & FCACHE_FLAG_DRY_RUN ? "no" : "yes");
                fc_result_add_str(req->result, "pin_mode", pin_mode(r.v[FCACHE_A_PINNED]));
                if (flags & FCACHE_FLAG_DRY_RUN)
                        fc_result_add_u64(req->result, "bytes_needed", r.v[FCACHE_A_BYTES]);
        } else {
                fc_result_add_str(req->result, "pinned", "no");
        }
        if (r.has[FCACHE_A_PIN_ID])
                fc_result_add_u64(req->result, "pin_id", r.v[FCACHE_A_PIN_ID]);
        fc_result_add_u64(req->result, "files", r.v[FCACHE_A_FILES]);
        if (r.has[FCACHE_A_PAGES_HELD])
                fc_result_add_u64(req->result, "pages_held", r.v[FCACHE_A_PAGES_HELD]);
        return 0;
}

/* the keys of the user backend's volume-wide flushes, from a FLUSH_VOLUME/ALL reply */
static void add_result_flush(struct fc_request *req, const struct kreply *r)
{
        struct ktally sum = {
                .files = r->v[FCACHE_A_FILES], .bytes = r->v[FCACHE_A_FILE_SIZE],
                .total = r->v[FCACHE_A_PAGES_TOTAL],
                .cached_before = r->v[FCACHE_A_PAGES_CACHED] + r->v[FCACHE_A_PAGES_DROPPED],
                .dirty_before = r->v[FCACHE_A_PAGES_DIRTY],
                .cached_after = r->v[FCACHE_A_PAGES_CACHED],
                .pinned = r->v[FCACHE_A_FILES_PINNED],
        };

        add_change(req->result, &sum, false);
        fc_result_add_u64(req->result, "supers", r->v[FCACHE_A_SUPERS]);
}

static int run_flush_volume(struct fc_request *req, struct kconn *c)
{
        struct fc_mount_table mt;
        const struct fc_mount *m;
        struct kreply r;
        int err;

        err = fc_mount_table_read(&mt);
        if (err < 0)
                return fc_error_set(req->error, -err, "cannot read /proc/self/mountinfo: %s",
                                    strerror(-err));
        m = fc_mount_table_find(&mt, req->target->stx.stx_mnt_id);
        if (!m) {
                fc_mount_table_free(&mt);
                return fc_error_set(req->error, ENOENT, "%s: its mount is not in this process's "
                                    "mount table", req->target->display);
        }
        err = kcall(c, FCACHE_CMD_FLUSH_VOLUME, req->target->fd, 0, &r, req->opts->cancel);
        if (err == -EOPNOTSUPP) {
                /*
                 * No superblock of its own to flush: tmpfs is refused as the
                 * user backend refuses it; a stacked filesystem (overlay)
                 * keeps its pages on its layers' files, which the user
                 * backend's walk of the mount reaches one by one.
                 */
                err = fc_backend_refuse_memory_backed(req, req->target->fd, m->mount_point);
                fc_mount_table_free(&mt);
                return err ? err : fc_backend_user.run(req);
        }
        if (err) {
                fc_mount_table_free(&mt);
                return kfail(req, err, &r, "flush volume");
        }
        fc_result_add_str(req->result, "mount_point", m->mount_point);
        fc_result_add_str(req->result, "fs_type", m->fs_type);
        fc_mount_table_free(&mt);
        add_result_flush(req, &r);
        fc_result_add_u64(req->result, "mounts_skipped", 0);
        fc_result_add_u64(req->result, "errors", 0);
        return 0;
}

/* FLUSH_ALL: one O_PATH descriptor per mounted network filesystem */
static int run_flush_all(struct fc_request *req, struct kconn *c)
{
        struct fc_mount_table mt;
        struct kmsg m;
        struct kreply r;
        struct nlattr *nest;
        struct statx stx;
        int fds[64], nfd = 0, err;
        uint64_t skipped = 0, failed = 0;

        err = fc_mount_table_read(&mt);
        if (err < 0)
                return fc_error_set(req->error, -err, "cannot read /proc/self/mountinfo: %s",
                                    strerror(-err));
        kmsg_init(&m, c->family, FCACHE_CMD_FLUSH_ALL, 0);
        nest = kmsg_put(&m, FCACHE_A_MOUNTS | NLA_F_NESTED, NULL, 0);
        for (size_t i = 0; i < mt.count && nfd < 64; i++) {
                /* the caller's own mounts: the module flushes only their superblocks */
                const struct fc_mount *mnt = &mt.mounts[i];
                char why[160];
                int fd;

                if (!fc_fs_type_is_network(mnt->fs_type))
                        continue;
                /* The module would wait on a dead mount's writeback: leave it alone. */
                if (fc_mount_answers(mnt->mount_point, FC_MOUNT_ANSWER_MS, why, sizeof(why)) < 0) {
                        fc_result_add_fmt(req->result, "skipped", "%s: %s", mnt->mount_point, why);
                        skipped++;
                        continue;
                }
                fd = open(mnt->mount_point, O_PATH | O_CLOEXEC | O_DIRECTORY);
                if (fd < 0) {
                        if (!failed++)
                                fc_result_add_fmt(req->result, "first_error",
                                                  "%s: cannot open the mount point: %s",
                                                  mnt->mount_point, strerror(errno));
                        continue;
                }
                if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) < 0 ||
                    stx.stx_mnt_id != mnt->id) {
                        close(fd);
                        if (!failed++)
                                fc_result_add_fmt(req->result, "first_error",
                                                  "%s: another mount covers this mount point, "
                                                  "so its files cannot be reached",
                                                  mnt->mount_point);
                        continue;
                }
                fds[nfd++] = fd;
                kmsg_put_u32(&m, FCACHE_A_FD, (uint32_t)fd);
                fc_result_add_str(req->result, "mount", mnt->mount_point);
        }
        fc_mount_table_free(&mt);
        fc_result_add_u64(req->result, "mounts_failed", failed);
        fc_result_add_u64(req->result, "mounts_skipped", skipped);
        nest->nla_len = (uint16_t)(m.raw + m.nh.nlmsg_len - (char *)nest);
        if (!nfd) {
                memset(&r, 0, sizeof(r));
                fc_result_add_u64(req->result, "mounts", 0);
                add_result_flush(req, &r);
                fc_result_add_u64(req->result, "errors", 0);
                return 0;
        }
        memset(&r, 0, sizeof(r));
        err = kconn_send(c, &m);
        if (!err)
                err = kconn_wait(c, &r, NULL, NULL, req->opts->cancel);
        for (int i = 0; i < nfd; i++)
                close(fds[i]);
        if (err)
                return kfail(req, err, &r, "flush all");
        fc_result_add_u64(req->result, "mounts", (uint64_t)nfd);
        add_result_flush(req, &r);
        fc_result_add_u64(req->result, "errors", 0);
        return 0;
}

/* why nothing was given back, from what the module found */
static const char *callbacks_reason(const struct kreply *r)
{
        const char *t = r->fstype;

        if (r->v[FCACHE_A_DELEG_AT_CLOSE])
                return "the file is in use (this command's own descriptor of a file is a use): "
                       "the kernel returns its NFSv4 delegation when the last user closes it";
        if (!strcmp(t, "nfs4"))
                return "no NFSv4 delegation was held";
        if (!strcmp(t, "cifs") || !strcmp(t, "smb3"))
                return "cifs.ko exports no way to give back an SMB lease or oplock; the pages "
                       "were dropped, so the next open revalidates";
        if (!strcmp(t, "afs"))
                return "kafs.ko exports no way to give back an AFS callback; the pages were "
                       "dropped, so the next open revalidates";
        return "this filesystem grants no leases, delegations or callbacks";
}

static int run_flush_callbacks(struct fc_request *req, struct kconn *c)
{
        mode_t mode = req->target->stx.stx_mode;
        struct kreply r;
        int err;

        /* a device or fifo holds nothing granted; a module without the command */
        if (!S_ISREG(mode) && !S_ISDIR(mode))
                return fc_backend_user.run(req);
        err = kcall(c, FCACHE_CMD_FLUSH_CALLBACKS, req->target->fd, 0, &r, req->opts->cancel);
        if (err == -EOPNOTSUPP)
                return fc_backend_user.run(req);
        if (err)
                return kfail(req, err, &r, "flush callbacks");
        fc_result_add_str(req->result, "type", fc_file_type_name(mode));
        fc_result_add_str(req->result, "attributes", "revalidated-on-open");
        fc_result_add_u64(req->result, "pages_dropped", r.v[FCACHE_A_PAGES_DROPPED]);
        fc_result_add_u64(req->result, "delegations_held", r.v[FCACHE_A_DELEG_HELD]);
        fc_result_add_u64(req->result, "delegations_returned", r.v[FCACHE_A_DELEG_RETURNED]);
        fc_result_add_u64(req->result, "delegations_returned_at_close",
                          r.v[FCACHE_A_DELEG_AT_CLOSE]);
        fc_result_add_str(req->result, "callbacks_released",
                          r.v[FCACHE_A_DELEG_RETURNED] ? "yes" : "no");
        if (!r.v[FCACHE_A_DELEG_RETURNED])
                fc_result_add_str(req->result, "reason", callbacks_reason(&r));
        return 0;
}

static int kmod_run(struct fc_request *req)
{
        struct kconn c;
        int err = kconn_open(&c);

        if (err)
                return fc_error_set(req->error, -err, "fcache.ko: cannot reach the %s netlink "
                                    "family: %s", FCACHE_GENL_NAME, strerror(-err));
        switch (req->cmd->op) {
        case FC_OP_QUERY_CACHED:
        case FC_OP_QUERY_DIRTY:
                err = run_query(req, &c);
                break;
        case FC_OP_QUERY_PINNED:
                err = run_query_pinned(req, &c);
                break;
        case FC_OP_QUERY_CACHE:
                err = run_query_cache(req, &c);
                break;
        case FC_OP_FLUSH:
                err = run_flush(req, &c);
                break;
        case FC_OP_FLUSH_VOLUME:
                err = run_flush_volume(req, &c);
                break;
        case FC_OP_FLUSH_ALL:
                err = run_flush_all(req, &c);
                break;
        case FC_OP_FLUSH_CALLBACKS:
                err = run_flush_callbacks(req, &c);
                break;
        case FC_OP_PREFETCH:
                err = run_prefetch(req, &c);
                break;
        case FC_OP_PIN:
                err = run_pin(req, &c, FCACHE_CMD_PIN);
                break;
        case FC_OP_UNPIN:
                err = run_pin(req, &c, FCACHE_CMD_UNPIN);
                break;
        default:
                err = fc_error_set(req->error, EOPNOTSUPP, "%s: not a fcache.ko command",
                                   fc_op_name(req->cmd->op));
                break;
        }
        kconn_close(&c);
        return err;
}

/* Loaded?  sysfs says so cheaply; without sysfs, ask the netlink controller. */
static bool kmod_available(void)
{
        struct stat st;
        struct kconn c;

        if (stat("/sys/module/fcache/initstate", &st) == 0)
                return true;
        if (stat("/sys/module", &st) == 0)
                return false;
        if (kconn_open(&c))
                return false;
        kconn_close(&c);
        return true;
}

static bool kmod_handles(const struct fc_command *cmd, const struct fc_target *t)
{
        if (fc_target_on_fcache_volume(t))
                return false;
        switch (cmd->op) {
        case FC_OP_QUERY_CACHED:
        case FC_OP_QUERY_DIRTY:
        case FC_OP_QUERY_PINNED:
        case FC_OP_QUERY_CACHE:
        case FC_OP_FLUSH:
        case FC_OP_FLUSH_VOLUME:
        case FC_OP_FLUSH_ALL:
        case FC_OP_FLUSH_CALLBACKS:
        case FC_OP_PREFETCH:
        case FC_OP_PIN:
        case FC_OP_UNPIN:
                return true;
        default:
                return false;
        }
}

const struct fc_backend fc_backend_kmod = {
        .name = "kmod",
        .available = kmod_available,
        .handles = kmod_handles,
        .run = kmod_run,
};
