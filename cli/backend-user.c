/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * backend-user.c: the cache commands done with plain system calls, for
 * any mounted filesystem, when neither fcache.ko nor fcached serves them.
 *
 * Queries use cachestat(2) (mincore before 6.5), flush is write back then
 * POSIX_FADV_DONTNEED, prefetch is chunked WILLNEED plus a populate that
 * waits for the data. Directories are walked in parallel (walk.c),
 * staying on their mount.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "mounts.h"
#include "pagecache.h"
#include "walk.h"

/* What one worker adds up over the files it handles. */
struct tally {
        enum fc_op op;
        const volatile int *cancel;
        uint64_t files, files_dirty, bytes;
        uint64_t unmeasured;     /* files acted on that cachestat would not show (EPERM) */
        struct fc_pagestat before, after;
        int mincore;             /* some file was measured without cachestat */
};

static void pagestat_add(struct fc_pagestat *sum, const struct fc_pagestat *ps)
{
        sum->total += ps->total;
        sum->cached += ps->cached;
        sum->dirty += ps->dirty;
        sum->writeback += ps->writeback;
        sum->evicted += ps->evicted;
}

/* The per-file work of every command, on an open regular file. */
static int tally_file(struct tally *t, int fd, uint64_t *bytes)
{
        struct fc_pagestat before, after;
        enum fc_measure_method m;
        uint64_t size;
        mode_t mode;
        bool unmeasured;
        int r;

        if ((r = fc_file_type_size(fd, &mode, &size)) < 0)
                return r;
        if (!S_ISREG(mode))
                return 0;
        r = fc_pagecache_measure(fd, size, &before, &m);
        /* cachestat's rule (owner or write access) keeps the figures, not the act */
        unmeasured = r == -EPERM && t->op != FC_OP_QUERY_CACHED && t->op != FC_OP_QUERY_DIRTY;
        if (r < 0 && !unmeasured)
                return r;
        t->mincore |= !unmeasured && m == FC_MEASURE_MINCORE;
        /*
         * A volume-wide flush acts on, and counts, the files that have pages
         * in the cache, as fcache.ko's walk of the inodes in memory does.
         */
        if ((t->op == FC_OP_FLUSH_VOLUME || t->op == FC_OP_FLUSH_ALL) && !unmeasured &&
            !before.cached) {
                *bytes = 0;
                return 0;
        }
        switch (t->op) {
        case FC_OP_FLUSH:
        case FC_OP_FLUSH_VOLUME:
        case FC_OP_FLUSH_ALL:
        case FC_OP_FLUSH_CALLBACKS:
                r = fc_pagecache_flush(fd, size);
                break;
        case FC_OP_PREFETCH:
                r = fc_pagecache_prefetch(fd, size, t->cancel);
                break;
        default:
                break;
        }
        if (r < 0)
                return r;
        *bytes = size;
        t->files++;
        t->bytes += size;
        if (unmeasured) {
                t->unmeasured++;
                return 0;
        }
        after = before;
        if (t->op != FC_OP_QUERY_CACHED && t->op != FC_OP_QUERY_DIRTY) {
                r = fc_pagecache_measure(fd, size, &after, &m);
                if (r < 0)
                        return r;
        }
        t->files_dirty += before.dirty > 0;
        pagestat_add(&t->before, &before);
        pagestat_add(&t->after, &after);
        return 0;
}

static int walk_file(void *ctx, int dirfd, const char *name, uint64_t *bytes)
{
        int fd = fc_walk_open_file(dirfd, name), r;

        if (fd < 0)
                return fd;
        r = tally_file(ctx, fd, bytes);
        close(fd);
        return r;
}

static unsigned default_workers(enum fc_op op)
{
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);

        /* Prefetch waits on I/O (network round trips): keep several requests in flight. */
        if (op == FC_OP_PREFETCH)
                return 8;
        return cpus < 1 ? 1 : cpus > 4 ? 4 : (unsigned)cpus;
}

static int tally_init(void *tally, void *arg)
{
        const struct tally *seed = arg;
        struct tally *t = tally;

        t->op = seed->op;
        t->cancel = seed->cancel;
        return 0;
}

static void tally_merge(void *sum, void *tally, void *arg)
{
        struct tally *s = sum;
        const struct tally *t = tally;

        s->files += t->files;
        s->files_dirty += t->files_dirty;
        s->bytes += t->bytes;
        s->unmeasured += t->unmeasured;
        s->mincore |= t->mincore;
        pagestat_add(&s->before, &t->before);
        pagestat_add(&s->after, &t->after);
}

static const struct fc_walk_tally_ops tally_ops = {
        .tally_size = sizeof(struct tally),
        .file = walk_file, .init = tally_init, .merge = tally_merge,
};

/* Walk dirfd's tree with the pool, summing into *sum. */
static int walk_tally(struct fc_request *req, int dirfd, bool top_only, struct tally *sum,
                      struct fc_walk_stats *st)
{
        struct tally seed = { .op = req->cmd->op, .cancel = req->opts->cancel };

        return fc_backend_walk(req, dirfd, top_only, default_workers(req->cmd->op), &tally_ops,
                               &seed, sum, st);
}

/* Run the op on the target: one file, or a directory's files (tree or top level). */
static int tally_target(struct fc_request *req, bool tree, struct tally *sum, bool *walked,
                        struct fc_walk_stats *st)
{
        int fd = fc_target_open_data(req->target, req->error), r;
        uint64_t bytes;

        if (fd < 0)
                return fd;
        sum->op = req->cmd->op;
        sum->cancel = req->opts->cancel;
        if (S_ISDIR(req->target->stx.stx_mode)) {
                *walked = true;
                r = walk_tally(req, fd, !tree, sum, st);
        } else {
                r = tally_file(sum, fd, &bytes);
                if (r < 0)
                        fc_error_set(req->error, -r, "%s: %s", req->target->display,
                                     strerror(-r));
        }
        close(fd);
        return r;
}

static void add_pages(struct fc_result *res, const char *prefix, uint64_t pages)
{
        char key[64];

        snprintf(key, sizeof(key), "pages_%s", prefix);
        fc_result_add_u64(res, key, pages);
        snprintf(key, sizeof(key), "bytes_%s", prefix);
        fc_result_add_u64(res, key, pages * (uint64_t)fc_page_size());
}

static int run_query(struct fc_request *req)
{
        struct fc_result *res = req->result;
        struct fc_walk_stats st;
        struct tally sum = { 0 };
        bool walked = false;
        mode_t mode = req->target->stx.stx_mode;
        int r;

        fc_result_add_str(res, "type", fc_file_type_name(mode));
        if (!S_ISREG(mode) && !S_ISDIR(mode)) {
                /* Not opened: a device's open runs its driver, a fifo's blocks. */
                fc_result_add_str(res, "measured", "no");
                fc_result_add_u64(res, "files", 0);
                return 0;
        }
        r = tally_target(req, req->cmd->mods & FC_MOD_RECURSIVE, &sum, &walked, &st);
        if (r < 0)
                return r;
        if (sum.mincore && req->cmd->op == FC_OP_QUERY_DIRTY)
                return fc_error_set(req->error, EOPNOTSUPP, "%s: query dirty needs cachestat(2) "
                                    "(Linux 6.5, and not through an overlay, whose own mapping "
                                    "holds no pages) or fcache.ko; mincore cannot see dirty pages",
                                    req->target->display);
        fc_result_add_str(res, "measured", "yes");
        fc_result_add_str(res, "method", sum.mincore ? "mincore" : "cachestat");
        fc_result_add_u64(res, "page_size", (uint64_t)fc_page_size());
        fc_result_add_u64(res, "files", sum.files);
        fc_result_add_u64(res, "bytes", sum.bytes);
        fc_result_add_u64(res, "pages_total", sum.before.total);
        add_pages(res, "cached", sum.before.cached);
        if (!sum.mincore) {
                add_pages(res, "dirty", sum.before.dirty);
                add_pages(res, "writeback", sum.before.writeback);
                fc_result_add_u64(res, "pages_evicted", sum.before.evicted);
                fc_result_add_u64(res, "files_dirty", sum.files_dirty);
                fc_backend_note_unstable_unmeasured(req);
        }
        if (walked)
                fc_walk_stats_add_result(res, &st, 0, NULL);
        fc_backend_note_pages_kept(req);
        return 0;
}

static void add_change(struct fc_result *res, const struct tally *sum)
{
        fc_result_add_u64(res, "files", sum->files);
        fc_result_add_u64(res, "bytes", sum->bytes);
        if (sum->unmeasured)
                fc_result_add_u64(res, "files_unmeasured", sum->unmeasured);
        fc_result_add_u64(res, "pages_total", sum->before.total);
        fc_result_add_u64(res, "pages_cached_before", sum->before.cached);
        fc_result_add_u64(res, "pages_dirty_before", sum->before.dirty);
        add_pages(res, "cached", sum->after.cached);
        if (sum->before.cached >= sum->after.cached)
                fc_result_add_u64(res, "pages_dropped", sum->before.cached - sum->after.cached);
        else
                fc_result_add_u64(res, "pages_fetched", sum->after.cached - sum->before.cached);
}

static int run_flush_or_prefetch(struct fc_request *req)
{
        struct fc_walk_stats st;
        struct tally sum = { 0 };
        bool walked = false;
        mode_t mode = req->target->stx.stx_mode;
        bool flush = req->cmd->op == FC_OP_FLUSH;
        int r;

        fc_result_add_str(req->result, "type", fc_file_type_name(mode));
        r = fc_backend_refuse_not_file(req);
        if (r < 0)
                return r;
        if (flush) {
                /* O_PATH suffices for fstatfs. */
                r = fc_backend_refuse_memory_backed(req, req->target->fd, req->target->display);
                if (r < 0)
                        return r;
        }
        /* flush on a directory takes its subtree; prefetch only with recursive. */
        r = tally_target(req, flush || (req->cmd->mods & FC_MOD_RECURSIVE), &sum, &walked, &st);
        if (r < 0)
                return r;
        add_change(req->result, &sum);
        if (walked)
                fc_walk_stats_add_result(req->result, &st, 0, NULL);
        if (!flush)
                fc_backend_note_pages_kept(req);
        return 0;
}

/* Open a mount's root by its mount point, checking that it is that mount and not one over it. */
static int open_mount_root(const struct fc_mount *m, struct fc_error *e)
{
        struct statx stx;
        int fd = open(m->mount_point, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY);

        if (fd < 0)
                return fc_error_set(e, errno, "%s: cannot open the mount point: %m",
                                    m->mount_point);
        if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) < 0 || stx.stx_mnt_id != m->id) {
                close(fd);
                return fc_error_set(e, EBUSY, "%s: another mount covers this mount point, so "
                                    "its files cannot be reached", m->mount_point);
        }
        return fd;
}

static int flush_mount(struct fc_request *req, const struct fc_mount *m, struct tally *sum,
                       struct fc_walk_stats *st)
{
        int fd = open_mount_root(m, req->error), r;

        if (fd < 0)
                return fd;
        r = fc_backend_refuse_memory_backed(req, fd, m->mount_point);
        if (r == 0) {
                /* One syncfs writes the whole filesystem back far faster than per-file syncs. */
                syncfs(fd);
                sum->op = req->cmd->op;
                r = walk_tally(req, fd, false, sum, st);
        }
        close(fd);
        return r;
}

static int run_flush_volume(struct fc_request *req)
{
        struct fc_mount_table mt;
        const struct fc_mount *m;
        struct fc_walk_stats st;
        struct tally sum = { 0 };
        int r;

        if (!(req->target->stx.stx_mask & STATX_MNT_ID))
                return fc_error_set(req->error, EOPNOTSUPP, "%s: the kernel does not report "
                                    "mount ids (Linux 5.8)", req->target->display);
        r = fc_mount_table_read(&mt);
        if (r < 0)
                return fc_error_set(req->error, -r, "cannot read /proc/self/mountinfo: %s",
                                    strerror(-r));
        m = fc_mount_table_find(&mt, req->target->stx.stx_mnt_id);
        if (!m) {
                fc_mount_table_free(&mt);
                return fc_error_set(req->error, ENOENT, "%s: its mount is not in this process's "
                                    "mount table", req->target->display);
        }
        r = flush_mount(req, m, &sum, &st);
        if (r == 0) {
                fc_result_add_str(req->result, "mount_point", m->mount_point);
                fc_result_add_str(req->result, "fs_type", m->fs_type);
                add_change(req->result, &sum);
                fc_walk_stats_add_result(req->result, &st, 0, NULL);
        }
        fc_mount_table_free(&mt);
        return r;
}

static int run_flush_all(struct fc_request *req)
{
        struct fc_mount_table mt;
        struct tally sum = { 0 };
        uint64_t mounts = 0, failed = 0, errors = 0, skipped = 0;
        int r;

        r = fc_mount_table_read(&mt);
        if (r < 0)
                return fc_error_set(req->error, -r, "cannot read /proc/self/mountinfo: %s",
                                    strerror(-r));
        for (size_t i = 0; i < mt.count; i++) {
                const struct fc_mount *m = &mt.mounts[i];
                struct fc_walk_stats st;
                struct fc_error e = { 0 };
                struct fc_request sub = *req;

                char why[160];

                if (!fc_fs_type_is_network(m->fs_type))
                        continue;
                /* One dead mount must not hang the whole command. */
                if (fc_mount_answers(m->mount_point, FC_MOUNT_ANSWER_MS, why, sizeof(why)) < 0) {
                        fc_result_add_fmt(req->result, "skipped", "%s: %s", m->mount_point, why);
                        skipped++;
                        continue;
                }
                sub.error = &e;
                fc_result_add_str(req->result, "mount", m->mount_point);
                if (flush_mount(&sub, m, &sum, &st) < 0) {
                        if (e.code == ECANCELED) {
                                fc_mount_table_free(&mt);
                                return fc_error_set(req->error, ECANCELED, "flush all: cancelled");
                        }
                        if (!failed++)
                                fc_result_add_str(req->result, "first_error", e.text);
                        continue;
                }
                mounts++;
                errors += st.errors;
        }
        fc_mount_table_free(&mt);
        fc_result_add_u64(req->result, "mounts", mounts);
        fc_result_add_u64(req->result, "mounts_failed", failed);
        fc_result_add_u64(req->result, "mounts_skipped", skipped);
        add_change(req->result, &sum);
        fc_result_add_u64(req->result, "errors", errors);
        return 0;
}

/*
 * What user space can do to make a network filesystem revalidate: an open
 * makes NFS check attributes (close-to-open), dropping clean pages makes
 * the next read fetch them again. Returning leases or delegations is the
 * filesystem's business, and the result says so.
 */
static int run_flush_callbacks(struct fc_request *req)
{
        mode_t mode = req->target->stx.stx_mode;
        struct tally sum = { .op = FC_OP_FLUSH_CALLBACKS };
        uint64_t bytes;
        int fd, r = 0;

        fc_result_add_str(req->result, "type", fc_file_type_name(mode));
        if (S_ISREG(mode) || S_ISDIR(mode)) {
                fd = fc_target_open_data(req->target, req->error);
                if (fd < 0)
                        return fd;
                if (S_ISREG(mode) && !fc_memory_backed(fd))
                        r = tally_file(&sum, fd, &bytes);
                close(fd);
                if (r < 0)
                        return fc_error_set(req->error, -r, "%s: %s", req->target->display,
                                            strerror(-r));
        }
        fc_result_add_str(req->result, "attributes", S_ISREG(mode) || S_ISDIR(mode)
                                  ? "revalidated-on-open" : "not-revalidated");
        fc_result_add_u64(req->result, "pages_dropped",
                          sum.before.cached > sum.after.cached ? sum.before.cached - sum.after.cached
                                                               : 0);
        fc_result_add_str(req->result, "callbacks_released", "no");
        fc_result_add_str(req->result, "reason", "user space cannot return a filesystem's "
                          "leases, delegations or callbacks; it forced revalidation instead");
        return 0;
}

/* Lines of /proc/meminfo that describe the page cache, in bytes. */
static void add_meminfo(struct fc_result *res)
{
        static const struct { const char *field, *key; } fields[] = {
                { "Cached:", "mem_cached_bytes" }, { "Dirty:", "mem_dirty_bytes" },
                { "Writeback:", "mem_writeback_bytes" }, { "Active(file):", "mem_active_file_bytes" },
                { "Inactive(file):", "mem_inactive_file_bytes" }, { "Shmem:", "mem_shmem_bytes" },
                { "Unevictable:", "mem_unevictable_bytes" }, { "MemTotal:", "mem_total_bytes" },
        };
        FILE *f = fopen("/proc/meminfo", "re");
        char line[256];

        if (!f)
                return;
        while (fgets(line, sizeof(line), f)) {
                for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
                        size_t n = strlen(fields[i].field);
                        if (strncmp(line, fields[i].field, n))
                                continue;
                        fc_result_add_u64(res, fields[i].key, strtoull(line + n, NULL, 10) * 1024);
                }
        }
        fclose(f);
}

/* /proc/fs/fscache/stats: "Cookies: n=3 v=1 vcol=0" -> fscache_cookies_n=3 ... */
static void add_fscache(struct fc_result *res)
{
        FILE *f = fopen("/proc/fs/fscache/stats", "re");
        char line[512];

        fc_result_add_str(res, "fscache", f ? "present" : "absent");
        if (!f)
                return;
        while (fgets(line, sizeof(line), f)) {
                char *colon = strchr(line, ':'), *save = NULL, section[64];
                size_t j = 0;

                if (!colon)
                        continue;
                *colon = '\0';
                for (char *p = line; *p && j < sizeof(section) - 1; p++)
                        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                            (*p >= '0' && *p <= '9'))
                                section[j++] = (char)(*p | 0x20);
                section[j] = '\0';
                for (char *tok = strtok_r(colon + 1, " \t\n", &save); tok;
                     tok = strtok_r(NULL, " \t\n", &save)) {
                        char *eq = strchr(tok, '='), key[160];
                        if (!eq || eq == tok)
                                continue;
                        *eq = '\0';
                        snprintf(key, sizeof(key), "fscache_%s_%s", section, tok);
                        for (char *k = key; *k; k++)
                                if (!((*k >= 'a' && *k <= 'z') || (*k >= '0' && *k <= '9')))
                                        *k = *k >= 'A' && *k <= 'Z' ? (char)(*k | 0x20) : '_';
                        fc_result_add_str(res, key, eq + 1);
                }
        }
        fclose(f);
}

static int run_query_cache(struct fc_request *req)
{
        struct fc_mount_table mt;

        fc_result_add_u64(req->result, "page_size", (uint64_t)fc_page_size());
        add_meminfo(req->result);
        add_fscache(req->result);
        if (fc_mount_table_read(&mt) == 0) {
                const struct fc_mount *m = fc_mount_table_find(&mt, req->target->stx.stx_mnt_id);
                if (m) {
                        fc_result_add_str(req->result, "mount_point", m->mount_point);
                        fc_result_add_str(req->result, "fs_type", m->fs_type);
                        fc_result_add_str(req->result, "fs_network",
                                          fc_fs_type_is_network(m->fs_type) ? "yes" : "no");
                }
                fc_mount_table_free(&mt);
        }
        return 0;
}

static int run_needs_daemon(struct fc_request *req)
{
        return fc_error_set(req->error, EOPNOTSUPP, "%s: needs the fcache daemon (fcached), "
                            "which this build of fcache does not include yet",
                            fc_op_name(req->cmd->op));
}

static int user_run(struct fc_request *req)
{
        switch (req->cmd->op) {
        case FC_OP_QUERY_CACHED:
        case FC_OP_QUERY_DIRTY:
                return run_query(req);
        case FC_OP_QUERY_CACHE:
                return run_query_cache(req);
        case FC_OP_FLUSH:
        case FC_OP_PREFETCH:
                return run_flush_or_prefetch(req);
        case FC_OP_FLUSH_VOLUME:
                return run_flush_volume(req);
        case FC_OP_FLUSH_ALL:
                return run_flush_all(req);
        case FC_OP_FLUSH_CALLBACKS:
                return run_flush_callbacks(req);
        default:
                return run_needs_daemon(req);
        }
}

static bool user_available(void)
{
        return true;
}

static bool user_handles(const struct fc_command *cmd, const struct fc_target *t)
{
        return true;
}

const struct fc_backend fc_backend_user = {
        .name = "user",
        .available = user_available,
        .handles = user_handles,
        .run = user_run,
};
