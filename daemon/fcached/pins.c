/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * pins.c: the pins fcached holds on plain mounts.
 *
 * Descriptors are bounded: a pinned file is kept as a file handle
 * (name_to_handle_at) and, while it is resident, as a locked shared
 * mapping, which keeps its pages in the page cache without holding a
 * descriptor. Each pin keeps one O_PATH descriptor of its root, for
 * open_by_handle_at when a file changes and must be mapped again.
 *
 * Residency is bounded by the budget (set cache-size): a new pin that
 * does not fit fails with LimitExceeded; files that appear later in a
 * pinned tree and do not fit are held but not resident. Lowering the
 * budget releases residency from the lowest priority pins first.
 *
 * Recursive pins watch every directory of their tree with one inotify
 * descriptor in the main loop. File events are applied one by one (as the
 * pin's owner); directory events and a queue overflow (IN_Q_OVERFLOW)
 * schedule a rescan of the pin in a worker thread, so nothing is missed
 * silently.
 *
 * While fcache.ko is loaded the files are pinned in the kernel instead
 * (kmod-link.c): a kernel pin per file, a memory pin (its pages held by the
 * module, charged to the module's budget) while it fits, so that fcachectl
 * and the module's own pin list see the same pins.  The module is polled
 * for: when it appears or goes, every pin is rebuilt the other way.
 *
 * Persistence: STATE_DIR/pins.ini, replaced atomically (write, fsync,
 * rename) on every change; the file set is rebuilt at start.  Kernel pins
 * are left in place when fcached stops: the next start takes them over (the
 * kernel gives the same pin for the same file), so a restart leaves no gap.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <glib-unix.h>
#include <glib/gstdio.h>

#include "caller-access.h"
#include "kmod-link.h"
#include "pins.h"

#define WATCH_MASK (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CLOSE_WRITE | \
                    IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)
#define FILE_WATCH_MASK (IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF)
#define DEPTH_MAX 256
#define RESCAN_DELAY_MS 100
#define KMOD_POLL_S 2

struct held {                    /* one pinned regular file */
        struct file_handle *fh;  /* NULL if the filesystem has no handles */
        guint64 size;
        void *map;               /* locked mapping while resident, else NULL */
        size_t maplen;
        struct fcd_kpin kpin;    /* pinned in fcache.ko instead (id 0: not) */
        bool kmemory;            /* the kernel pin holds the pages: resident */
};

struct pin {
        guint64 id;
        char *path;              /* canonical path of the pinned object */
        bool recursive, is_dir;
        int priority;
        struct fcd_caller owner;
        gint64 created;
        char *unresolved;        /* why it could not be applied, or NULL */
        GHashTable *files;       /* relative path ("" for a file pin) -> struct held */
        GHashTable *wds;         /* wd -> relative directory path */
        int root_fd;             /* O_PATH of the root, for open_by_handle_at; -1 if none */
        guint64 bytes, resident;
        bool rescan_pending, rescan_running;
};

struct fcd_pins {
        struct fcd_context *ctx;
        char *file;
        struct fcd_pins_limits lim;      /* budget_bytes read by workers (atomics) */
        GHashTable *pins;                /* id -> struct pin */
        guint64 next_id;
        int ifd;
        guint isrc;
        GHashTable *watches;             /* wd -> GArray of pin ids (one per reference) */
        guint64 files, bytes, resident;  /* totals; resident read by workers (atomics) */
        guint64 rescans;
        guint rescan_timer;
        guint kmod_timer;
        bool budget_set;                 /* set cache-size was used: the module gets it too */
};

struct fcd_pin_build {
        char *path;
        bool recursive, is_dir, dry_run, soft;
        GHashTable *files;               /* rel -> struct held */
        GHashTable *wds;                 /* wd -> rel */
        int root_fd;
        int mnt_id;
        bool kmod;                       /* pin files in fcache.ko */
        guint64 bytes, resident, budget_left, files_left, errors, mounts_skipped;
        char first_error[256];
        int status;                      /* 0, or -errno if the build failed */
        int ifd;
        struct fcd_progress *progress;
        const volatile int *cancel;
};

static bool held_resident(const struct held *h)
{
        return h->map || h->kmemory;
}

/*
 * mlock(2) and munlock(2) as system calls: the sanitizer runtimes make the
 * libc functions no-ops (they guard their shadow memory), which would leave
 * a sanitized fcached holding nothing resident while it says it does.
 */
static int lock_pages(void *addr, size_t len)
{
        return (int)syscall(SYS_mlock, addr, len);
}

static void unlock_pages(void *addr, size_t len)
{
        syscall(SYS_munlock, addr, len);
}

static void held_free(gpointer data)
{
        struct held *h = data;

        fcd_kmod_unpin(&h->kpin);
        if (h->map) {
                unlock_pages(h->map, h->maplen);
                munmap(h->map, h->maplen);
        }
        g_free(h->fh);
        g_free(h);
}

static void pin_free(gpointer data)
{
        struct pin *pin = data;

        g_hash_table_unref(pin->files);
        g_hash_table_unref(pin->wds);
        if (pin->root_fd >= 0)
                close(pin->root_fd);
        g_free(pin->unresolved);
        g_free(pin->path);
        g_free(pin);
}

static GHashTable *new_files(void)
{
        return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, held_free);
}

static GHashTable *new_wds(void)
{
        return g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, g_free);
}

void fcd_pin_build_free(struct fcd_pin_build *b)
{
        if (!b)
                return;
        g_hash_table_unref(b->files);
        g_hash_table_unref(b->wds);
        if (b->root_fd >= 0)
                close(b->root_fd);
        g_free(b->path);
        g_free(b);
}

static void note_error(struct fcd_pin_build *b, const char *rel, int err)
{
        if (!b->errors++)
                snprintf(b->first_error, sizeof(b->first_error), "%s: %s", *rel ? rel : ".",
                         strerror(err));
}

static guint64 budget_now(struct fcd_pins *p)
{
        return __atomic_load_n(&p->lim.budget_bytes, __ATOMIC_RELAXED);
}

static guint64 resident_now(struct fcd_pins *p)
{
        return __atomic_load_n(&p->resident, __ATOMIC_RELAXED);
}

/* Lock the file's pages in memory (mlock reads them in). Returns true if resident. */
static bool map_resident(struct held *h, int fd)
{
        void *m;

        if (!h->size || h->size > SIZE_MAX)
                return false;
        m = mmap(NULL, (size_t)h->size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
                return false;
        if (lock_pages(m, (size_t)h->size) < 0) {
                munmap(m, (size_t)h->size);
                return false;
        }
        h->map = m;
        h->maplen = (size_t)h->size;
        return true;
}

/*
 * Pin the open file in fcache.ko: a memory pin while it fits the budget,
 * else (soft) a plain one.  -ENOSPC: it does not fit and must; other
 * -errno: the module cannot pin it (gone, or refused).
 */
static int hold_in_kernel(struct fcd_pin_build *b, struct held *h, int fd)
{
        char msg[256];
        int r;

        if (!h->size)
                return fcd_kmod_pin(fd, false, &h->kpin, msg, sizeof(msg));
        if (b->resident + h->size <= b->budget_left) {
                r = fcd_kmod_pin(fd, true, &h->kpin, msg, sizeof(msg));
                if (r == 0) {
                        h->kmemory = true;
                        b->resident += h->size;
                        return 0;
                }
                if (r != -ENOSPC)
                        return r;
        }
        if (!b->soft)
                return -ENOSPC;
        return fcd_kmod_pin(fd, false, &h->kpin, msg, sizeof(msg));
}

/* A held file for the open regular file fd; NULL with -errno in *err for a limit. */
static struct held *hold_fd(struct fcd_pin_build *b, int fd, int *err)
{
        struct held *h;
        struct stat st;
        int mnt_id;

        if (fstat(fd, &st) < 0) {
                *err = -errno;
                return NULL;
        }
        if (b->files_left == 0) {
                *err = -E2BIG;
                return NULL;
        }
        h = g_new0(struct held, 1);
        h->size = (guint64)st.st_size;
        h->fh = g_malloc(sizeof(*h->fh) + MAX_HANDLE_SZ);
        h->fh->handle_bytes = MAX_HANDLE_SZ;
        if (name_to_handle_at(fd, "", h->fh, &mnt_id, AT_EMPTY_PATH) < 0)
                g_clear_pointer(&h->fh, g_free); /* the mapping still holds the file */
        if (b->kmod && !b->dry_run) {
                int r = hold_in_kernel(b, h, fd);
                if (r == -ENOSPC) {
                        held_free(h);
                        *err = r;
                        return NULL;
                }
                if (r < 0)
                        b->kmod = false; /* the module went: hold the rest here */
        }
        if (!b->dry_run && h->size && !h->kpin.id) {
                if (b->resident + h->size <= b->budget_left && map_resident(h, fd)) {
                        b->resident += h->size;
                } else if (!b->soft) {
                        held_free(h);
                        *err = -ENOSPC;
                        return NULL;
                }
        }
        b->files_left--;
        b->bytes += h->size;
        if (b->progress) {
                fcd_progress_add(&b->progress->files_done, 1);
                fcd_progress_add(&b->progress->bytes_done, h->size);
        }
        return h;
}

static int build_dir(struct fcd_pin_build *b, int dirfd, const char *rel, int depth)
{
        char proc[64];
        DIR *d;
        int dfd, r = 0;

        if (b->ifd >= 0 && !b->dry_run) {
                snprintf(proc, sizeof(proc), "/proc/self/fd/%d", dirfd);
                int wd = inotify_add_watch(b->ifd, proc, WATCH_MASK);
                if (wd < 0)
                        note_error(b, rel, errno);
                else
                        g_hash_table_replace(b->wds, GINT_TO_POINTER(wd), g_strdup(rel));
        }
        dfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        if (dfd < 0)
                return -errno;
        d = fdopendir(dfd);
        if (!d) {
                r = -errno;
                close(dfd);
                return r;
        }
        for (struct dirent *de; (de = readdir(d));) {
                struct statx stx;
                g_autofree char *child = NULL;

                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (b->cancel && *b->cancel) {
                        r = -ECANCELED;
                        break;
                }
                child = *rel ? g_strconcat(rel, "/", de->d_name, NULL) : g_strdup(de->d_name);
                if (statx(dirfd, de->d_name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
                          STATX_TYPE | STATX_MNT_ID, &stx) < 0) {
                        note_error(b, child, errno);
                        continue;
                }
                if ((int)stx.stx_mnt_id != b->mnt_id) {
                        b->mounts_skipped++; /* a pin stays on its mount */
                        continue;
                }
                if (S_ISDIR(stx.stx_mode)) {
                        if (!b->recursive)
                                continue;
                        if (depth >= DEPTH_MAX) {
                                note_error(b, child, ELOOP);
                                continue;
                        }
                        int cfd = openat(dirfd, de->d_name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (cfd < 0) {
                                note_error(b, child, errno);
                                continue;
                        }
                        r = build_dir(b, cfd, child, depth + 1);
                        close(cfd);
                        if (r < 0)
                                break;
                } else if (S_ISREG(stx.stx_mode)) {
                        int fd = fcd_open_regular_at(dirfd, de->d_name), err = 0;
                        struct held *h;

                        if (b->progress)
                                fcd_progress_add(&b->progress->files_seen, 1);
                        if (fd < 0) {
                                note_error(b, child, -fd);
                                continue;
                        }
                        h = hold_fd(b, fd, &err);
                        close(fd);
                        if (!h && (err == -E2BIG || err == -ENOSPC)) {
                                r = err;
                                break;
                        }
                        if (!h) {
                                note_error(b, child, -err);
                                continue;
                        }
                        g_hash_table_replace(b->files, g_steal_pointer(&child), h);
                }
        }
        closedir(d);
        return r;
}

static struct fcd_pin_build *build_new(struct fcd_pins *p, const char *canonical, bool recursive,
                                       bool dry_run, guint64 own_resident, guint64 own_files)
{
        struct fcd_pin_build *b = g_new0(struct fcd_pin_build, 1);
        guint64 budget = budget_now(p), used = resident_now(p) - own_resident;
        guint64 files = __atomic_load_n(&p->files, __ATOMIC_RELAXED) - own_files;

        b->path = g_strdup(canonical);
        b->recursive = recursive;
        b->dry_run = dry_run;
        b->files = new_files();
        b->wds = new_wds();
        b->root_fd = -1;
        b->ifd = p->ifd;
        b->kmod = fcd_kmod_loaded();
        b->budget_left = used < budget ? budget - used : 0;
        b->files_left = files < p->lim.max_files ? p->lim.max_files - files : 0;
        return b;
}

static int build_fill(struct fcd_pin_build *b, const struct fc_target *t, struct fc_error *e)
{
        int fd, r = 0, err = 0;

        if (!S_ISREG(t->stx.stx_mode) && !S_ISDIR(t->stx.stx_mode))
                return fc_error_set(e, EINVAL, "%s: is a %s; only regular files and "
                                    "directories can be pinned", t->display,
                                    fc_file_type_name(t->stx.stx_mode));
        b->is_dir = S_ISDIR(t->stx.stx_mode);
        b->mnt_id = (int)t->stx.stx_mnt_id;
        b->root_fd = fcntl(t->fd, F_DUPFD_CLOEXEC, 3);
        if (b->root_fd < 0)
                return fc_error_set(e, errno, "%s: cannot keep a descriptor: %m", t->display);
        fd = fc_target_open_data(t, e);
        if (fd < 0)
                return fd;
        if (b->is_dir) {
                r = build_dir(b, fd, "", 0);
        } else {
                struct held *h;
                if (b->ifd >= 0 && !b->dry_run) {
                        /* A single file: follow its own changes (written, removed, moved). */
                        char proc[64];
                        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
                        int wd = inotify_add_watch(b->ifd, proc, FILE_WATCH_MASK);
                        if (wd >= 0)
                                g_hash_table_replace(b->wds, GINT_TO_POINTER(wd), g_strdup(""));
                }
                if (b->progress)
                        fcd_progress_add(&b->progress->files_seen, 1);
                h = hold_fd(b, fd, &err);
                if (h)
                        g_hash_table_replace(b->files, g_strdup(""), h);
                r = h ? 0 : err;
        }
        close(fd);
        if (b->progress)
                __atomic_store_n(&b->progress->walk_done, 1, __ATOMIC_RELAXED);
        if (r == -ECANCELED)
                return fc_error_set(e, ECANCELED, "%s: pin cancelled", t->display);
        if (r == -ENOSPC)
                return fc_error_set(e, ENOSPC, "%s: the pin needs more than the %" G_GUINT64_FORMAT
                                    " bytes left of the pin budget (set cache-size raises it)",
                                    t->display, b->budget_left);
        if (r == -E2BIG)
                return fc_error_set(e, E2BIG, "%s: the pin would hold more than %" G_GUINT64_FORMAT
                                    " files in all", t->display, b->files_left);
        if (r < 0)
                return fc_error_set(e, -r, "%s: %s", t->display, strerror(-r));
        return 0;
}

int fcd_pin_build_run(struct fcd_pins *p, const struct fc_target *t, const char *canonical,
                      bool recursive, bool dry_run, struct fcd_progress *progress,
                      const volatile int *cancel, struct fcd_pin_build **out, struct fc_error *e)
{
        struct fcd_pin_build *b = build_new(p, canonical, recursive, dry_run, 0, 0);

        b->progress = progress;
        b->cancel = cancel;
        if (dry_run)
                b->files_left = G_MAXUINT64;
        *out = b;
        return build_fill(b, t, e);
}

void fcd_pins_discard(struct fcd_pins *p, struct fcd_pin_build *b)
{
        GHashTableIter it;
        gpointer wd;

        if (!b)
                return;
        /* Watches the build added that no pin uses. */
        g_hash_table_iter_init(&it, b->wds);
        while (g_hash_table_iter_next(&it, &wd, NULL))
                if (!g_hash_table_contains(p->watches, wd))
                        inotify_rm_watch(p->ifd, GPOINTER_TO_INT(wd));
        fcd_pin_build_free(b);
}

void fcd_pin_build_describe(struct fcd_pins *p, const struct fcd_pin_build *b,
                            struct fc_result *res)
{
        guint64 budget = budget_now(p), used = resident_now(p);
        guint64 left = used < budget ? budget - used : 0;

        fc_result_add_str(res, "dry_run", "yes");
        fc_result_add_u64(res, "files", g_hash_table_size(b->files));
        fc_result_add_u64(res, "bytes_needed", b->bytes);
        fc_result_add_u64(res, "budget_bytes", budget);
        fc_result_add_u64(res, "budget_left_bytes", left);
        fc_result_add_str(res, "fits", b->bytes <= left ? "yes" : "no");
        fc_result_add_u64(res, "errors", b->errors);
        if (b->errors)
                fc_result_add_str(res, "first_error", b->first_error);
}

/* ---- watches ---- */

static void watch_ref(struct fcd_pins *p, int wd, guint64 id)
{
        GArray *ids = g_hash_table_lookup(p->watches, GINT_TO_POINTER(wd));

        if (!ids) {
                ids = g_array_new(FALSE, FALSE, sizeof(guint64));
                g_hash_table_insert(p->watches, GINT_TO_POINTER(wd), ids);
        }
        g_array_append_val(ids, id);
}

static void watch_unref(struct fcd_pins *p, int wd, guint64 id)
{
        GArray *ids = g_hash_table_lookup(p->watches, GINT_TO_POINTER(wd));

        if (!ids)
                return;
        for (guint i = 0; i < ids->len; i++) {
                if (g_array_index(ids, guint64, i) == id) {
                        g_array_remove_index_fast(ids, i);
                        break;
                }
        }
        if (!ids->len) {
                inotify_rm_watch(p->ifd, wd);
                g_hash_table_remove(p->watches, GINT_TO_POINTER(wd));
        }
}

static void pin_refs_all(struct fcd_pins *p, struct pin *pin, bool add)
{
        GHashTableIter it;
        gpointer wd;

        g_hash_table_iter_init(&it, pin->wds);
        while (g_hash_table_iter_next(&it, &wd, NULL)) {
                if (add)
                        watch_ref(p, GPOINTER_TO_INT(wd), pin->id);
                else
                        watch_unref(p, GPOINTER_TO_INT(wd), pin->id);
        }
}

/* ---- totals and persistence ---- */

static void totals_add(struct fcd_pins *p, struct pin *pin, int sign)
{
        guint64 n = g_hash_table_size(pin->files);

        if (sign > 0) {
                p->files += n;
                p->bytes += pin->bytes;
                __atomic_fetch_add(&p->resident, pin->resident, __ATOMIC_RELAXED);
        } else {
                p->files -= n;
                p->bytes -= pin->bytes;
                __atomic_fetch_sub(&p->resident, pin->resident, __ATOMIC_RELAXED);
        }
}

static void pins_save(struct fcd_pins *p)
{
        g_autoptr(GKeyFile) kf = g_key_file_new();
        g_autoptr(GError) error = NULL;
        g_autofree char *data = NULL;
        GHashTableIter it;
        gpointer value;
        gsize len;

        g_key_file_set_uint64(kf, "fcached", "budget_bytes", budget_now(p));
        g_key_file_set_boolean(kf, "fcached", "budget_set", p->budget_set);
        g_key_file_set_uint64(kf, "fcached", "next_id", p->next_id);
        g_hash_table_iter_init(&it, p->pins);
        while (g_hash_table_iter_next(&it, NULL, &value)) {
                struct pin *pin = value;
                g_autofree char *group = g_strdup_printf("pin %" G_GUINT64_FORMAT, pin->id);
                gint groups[FCD_GROUPS_MAX];

                g_key_file_set_string(kf, group, "path", pin->path);
                g_key_file_set_boolean(kf, group, "recursive", pin->recursive);
                g_key_file_set_integer(kf, group, "priority", pin->priority);
                g_key_file_set_uint64(kf, group, "uid", pin->owner.uid);
                g_key_file_set_uint64(kf, group, "gid", pin->owner.gid);
                for (guint i = 0; i < pin->owner.ngroups; i++)
                        groups[i] = (gint)pin->owner.groups[i];
                g_key_file_set_integer_list(kf, group, "groups", groups, pin->owner.ngroups);
                g_key_file_set_int64(kf, group, "created", pin->created);
        }
        data = g_key_file_to_data(kf, &len, NULL);
        /*
         * Written to a temporary file, fsynced and renamed over. 0600: the pins
         * name every user's pinned paths, which only root should list.
         */
        if (!g_file_set_contents_full(p->file, data, (gssize)len, G_FILE_SET_CONTENTS_CONSISTENT,
                                      0600, &error))
                g_warning("Failed to save the pins to %s: %s; they will not survive a restart",
                          p->file, error->message);
}

/* ---- applying builds ---- */

/* Replace pin's file set with the build's (which is consumed). */
static void pin_adopt(struct fcd_pins *p, struct pin *pin, struct fcd_pin_build *b)
{
        GHashTable *old_wds = pin->wds;

        totals_add(p, pin, -1);
        g_hash_table_unref(pin->files);
        pin->files = g_steal_pointer(&b->files);
        b->files = new_files();
        pin->wds = g_steal_pointer(&b->wds);
        b->wds = new_wds();
        pin_refs_all(p, pin, true);       /* new references first: shared watches stay */
        {
                struct pin tmp = { .id = pin->id, .wds = old_wds };
                pin_refs_all(p, &tmp, false);
        }
        g_hash_table_unref(old_wds);
        if (pin->root_fd >= 0)
                close(pin->root_fd);
        pin->root_fd = b->root_fd;
        b->root_fd = -1;
        pin->is_dir = b->is_dir;
        pin->bytes = b->bytes;
        pin->resident = b->resident;
        g_clear_pointer(&pin->unresolved, g_free);
        totals_add(p, pin, 1);
}

static struct pin *pin_find_path(struct fcd_pins *p, const char *path)
{
        GHashTableIter it;
        gpointer value;

        g_hash_table_iter_init(&it, p->pins);
        while (g_hash_table_iter_next(&it, NULL, &value))
                if (!strcmp(((struct pin *)value)->path, path))
                        return value;
        return NULL;
}

static void add_pin_keys(struct fc_result *res, struct pin *pin)
{
        fc_result_add_u64(res, "pin_id", pin->id);
        fc_result_add_str(res, "path", pin->path);
        fc_result_add_str(res, "recursive", pin->recursive ? "yes" : "no");
        fc_result_add_u64(res, "priority", (guint64)pin->priority);
        fc_result_add_u64(res, "files", g_hash_table_size(pin->files));
        fc_result_add_u64(res, "bytes", pin->bytes);
        fc_result_add_u64(res, "resident_bytes", pin->resident);
        fc_result_add_u64(res, "watches", g_hash_table_size(pin->wds));
}

int fcd_pins_commit(struct fcd_pins *p, struct fcd_pin_build *b, const struct fcd_caller *owner,
                    int priority, struct fc_result *res, struct fc_error *e)
{
        struct pin *pin = pin_find_path(p, b->path);
        guint64 others_res = resident_now(p) - (pin ? pin->resident : 0);
        guint64 others_files = p->files - (pin ? g_hash_table_size(pin->files) : 0);
        bool created = false;

        /* Builds run concurrently: check the limits again against what is held now. */
        if (!pin && g_hash_table_size(p->pins) >= p->lim.max_pins)
                return fc_error_set(e, E2BIG, "%s: fcached already holds %u pins, the most it "
                                    "may", b->path, p->lim.max_pins);
        if (others_res + b->resident > budget_now(p))
                return fc_error_set(e, ENOSPC, "%s: the pin needs %" G_GUINT64_FORMAT " bytes "
                                    "resident but only %" G_GUINT64_FORMAT " of the budget are "
                                    "left", b->path, b->resident,
                                    budget_now(p) > others_res ? budget_now(p) - others_res : 0);
        if (others_files + g_hash_table_size(b->files) > p->lim.max_files)
                return fc_error_set(e, E2BIG, "%s: the pin would make more than %" G_GUINT64_FORMAT
                                    " files pinned in all", b->path, p->lim.max_files);
        if (!pin) {
                pin = g_new0(struct pin, 1);
                pin->id = ++p->next_id;
                pin->path = g_strdup(b->path);
                pin->files = new_files();
                pin->wds = new_wds();
                pin->root_fd = -1;
                pin->created = g_get_real_time() / G_USEC_PER_SEC;
                g_hash_table_insert(p->pins, &pin->id, pin);
                created = true;
        }
        pin->recursive = b->recursive;
        pin->priority = priority;
        pin->owner = *owner;
        pin_adopt(p, pin, b);
        pins_save(p);
        g_message("Pinned %s (pin %" G_GUINT64_FORMAT ", %s, %u files, %" G_GUINT64_FORMAT
                  " bytes, uid %u)", pin->path, pin->id, pin->recursive ? "recursive" : "single",
                  g_hash_table_size(pin->files), pin->bytes, owner->uid);
        fc_result_add_str(res, "pinned", created ? "new" : "updated");
        add_pin_keys(res, pin);
        fc_result_add_u64(res, "errors", b->errors);
        if (b->errors)
                fc_result_add_str(res, "first_error", b->first_error);
        fc_result_add_u64(res, "pins", g_hash_table_size(p->pins));
        fc_result_add_u64(res, "budget_bytes", budget_now(p));
        return 0;
}

static bool path_at_or_below(const char *path, const char *top)
{
        size_t n = strlen(top);

        if (strncmp(path, top, n))
                return false;
        return path[n] == '\0' || path[n] == '/' || (n == 1 && top[0] == '/');
}

static void pin_remove(struct fcd_pins *p, struct pin *pin)
{
        totals_add(p, pin, -1);
        pin_refs_all(p, pin, false);
        g_hash_table_remove(p->pins, &pin->id);
}

int fcd_pins_unpin(struct fcd_pins *p, const char *canonical, bool recursive,
                   const struct fcd_caller *caller, struct fc_result *res, struct fc_error *e)
{
        g_autoptr(GPtrArray) gone = g_ptr_array_new();
        guint64 kept = 0, files = 0, bytes = 0;
        GHashTableIter it;
        gpointer value;

        g_hash_table_iter_init(&it, p->pins);
        while (g_hash_table_iter_next(&it, NULL, &value)) {
                struct pin *pin = value;
                if (recursive ? !path_at_or_below(pin->path, canonical)
                              : strcmp(pin->path, canonical))
                        continue;
                /* Another user's pin stays: only its owner or root removes it. */
                if (caller->uid != 0 && pin->owner.uid != caller->uid) {
                        kept++;
                        continue;
                }
                g_ptr_array_add(gone, pin);
        }
        for (guint i = 0; i < gone->len; i++) {
                struct pin *pin = gone->pdata[i];
                files += g_hash_table_size(pin->files);
                bytes += pin->bytes;
                g_message("Unpinned %s (pin %" G_GUINT64_FORMAT ", uid %u)", pin->path, pin->id,
                          caller->uid);
                pin_remove(p, pin);
        }
        if (gone->len)
                pins_save(p);
        fc_result_add_u64(res, "unpinned", gone->len);
        fc_result_add_u64(res, "files", files);
        fc_result_add_u64(res, "bytes", bytes);
        fc_result_add_u64(res, "kept_other_owners", kept);
        fc_result_add_u64(res, "pins", g_hash_table_size(p->pins));
        return 0;
}

void fcd_pins_query(struct fcd_pins *p, const char *canonical, const struct fcd_caller *caller,
                    bool kernel_pinned, struct fc_result *res)
{
        const char *state = kernel_pinned ? "yes" : "no";
        GHashTableIter it;
        gpointer value;
        guint64 n = 0;

        g_hash_table_iter_init(&it, p->pins);
        while (g_hash_table_iter_next(&it, NULL, &value)) {
                struct pin *pin = value;
                size_t len = strlen(pin->path);

                if (!strcmp(pin->path, canonical)) {
                        state = "yes";
                } else if (pin->is_dir && path_at_or_below(canonical, pin->path) &&
                           *state == 'n') {
                        const char *rel = canonical + len + (len > 1);
                        if (g_hash_table_contains(pin->files, rel))
                                state = "yes";
                }
                /* Only root sees other users' pins: their paths are theirs. */
                if (path_at_or_below(pin->path, canonical) &&
                    (caller->uid == 0 || caller->uid == pin->owner.uid)) {
                        n++;
                        fc_result_add_fmt(res, "pin", "id=%" G_GUINT64_FORMAT " path=%s "
                                          "recursive=%s priority=%d files=%u bytes=%"
                                          G_GUINT64_FORMAT " resident_bytes=%" G_GUINT64_FORMAT
                                          " owner_uid=%u%s%s", pin->id, pin->path,
                                          pin->recursive ? "yes" : "no", pin->priority,
                                          g_hash_table_size(pin->files), pin->bytes,
                                          pin->resident, pin->owner.uid,
                                          pin->unresolved ? " unresolved=" : "",
                                          pin->unresolved ? pin->unresolved : "");
                }
        }
        fc_result_add_str(res, "pinned", state);
        fc_result_add_u64(res, "pins_below", n);
        fc_result_add_u64(res, "pins", g_hash_table_size(p->pins));
        fc_result_add_u64(res, "pinned_files", p->files);
        fc_result_add_u64(res, "pinned_bytes", p->bytes);
        fc_result_add_u64(res, "resident_bytes", resident_now(p));
        fc_result_add_u64(res, "budget_bytes", budget_now(p));
        fc_result_add_u64(res, "rescans", p->rescans);
}

static gint by_priority(gconstpointer a, gconstpointer b)
{
        const struct pin *x = *(struct pin *const *)a, *y = *(struct pin *const *)b;

        return x->priority - y->priority;
}

static void schedule_rescan(struct fcd_pins *p, struct pin *pin);

/* Main loop: open the held file relfile of pin again, as its owner; -errno on failure. */
static int reopen_held(struct pin *pin, const char *relfile)
{
        g_autofree char *full = *relfile ? g_build_filename(pin->path, relfile, NULL)
                                         : g_strdup(pin->path);
        g_autofree char *dir = g_path_get_dirname(full), *name = g_path_get_basename(full);
        struct fcd_identity_saved saved;
        int dfd, fd;

        if (fcd_identity_enter(&pin->owner, &saved) < 0)
                return -EPERM;
        dfd = fcd_open_how(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                           RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
        fd = dfd < 0 ? -errno : fcd_open_regular_at(dfd, name);
        fcd_identity_leave(&saved);
        if (dfd >= 0)
                close(dfd);
        return fd;
}

/*
 * Main loop: give up the pages of a file held resident, the pin staying:
 * munlock it, or make its kernel memory pin a plain one (fcache.ko keeps a
 * memory pin above a lowered budget, so it is ended and made again).
 * False if it could not be done.
 */
static bool release_pages(struct pin *pin, const char *relfile, struct held *h)
{
        char msg[256];
        int fd;

        if (h->map) {
                unlock_pages(h->map, h->maplen);
                munmap(h->map, h->maplen);
                h->map = NULL;
                return true;
        }
        if (!h->kmemory)
                return false;
        fd = reopen_held(pin, relfile);
        if (fd < 0)
                return false;
        fcd_kmod_unpin(&h->kpin);
        h->kmemory = false;
        if (fcd_kmod_pin(fd, false, &h->kpin, msg, sizeof(msg)) < 0)
                g_warning("Pin %s: %s is no longer pinned in fcache.ko: %s", pin->path,
                          *relfile ? relfile : ".", msg);
        close(fd);
        return true;
}

int fcd_pins_set_budget(struct fcd_pins *p, guint64 bytes, struct fc_result *res,
                        struct fc_error *e)
{
        g_autoptr(GPtrArray) order = g_ptr_array_new();
        guint64 released = 0, old = budget_now(p);
        GHashTableIter pit;
        gpointer pv;

        g_hash_table_iter_init(&pit, p->pins);
        while (g_hash_table_iter_next(&pit, NULL, &pv))
                g_ptr_array_add(order, pv);

        __atomic_store_n(&p->lim.budget_bytes, bytes, __ATOMIC_RELAXED);
        g_ptr_array_sort(order, by_priority);
        /* Over the new budget: the lowest priorities give up residency first. */
        for (guint i = 0; i < order->len && resident_now(p) > bytes; i++) {
                struct pin *pin = order->pdata[i];
                GHashTableIter it;
                gpointer key, value;

                g_hash_table_iter_init(&it, pin->files);
                while (resident_now(p) > bytes && g_hash_table_iter_next(&it, &key, &value)) {
                        struct held *h = value;
                        if (!release_pages(pin, key, h))
                                continue;
                        pin->resident -= h->size;
                        __atomic_fetch_sub(&p->resident, h->size, __ATOMIC_RELAXED);
                        released += h->size;
                }
        }
        if (bytes > old) {
                /* More room: let every pin take up what did not fit before. */
                GHashTableIter it;
                gpointer value;
                g_hash_table_iter_init(&it, p->pins);
                while (g_hash_table_iter_next(&it, NULL, &value))
                        if (((struct pin *)value)->resident < ((struct pin *)value)->bytes)
                                schedule_rescan(p, value);
        }
        p->budget_set = true;
        if (fcd_kmod_loaded()) {
                char msg[256];
                int r = fcd_kmod_set_budget(bytes, msg, sizeof(msg));
                if (r < 0)
                        return fc_error_set(e, -r, "fcache.ko did not take the pin budget: %s",
                                            msg);
                fc_result_add_u64(res, "kmod_pin_budget_bytes", bytes);
        }
        pins_save(p);
        g_message("Pin budget set to %" G_GUINT64_FORMAT " bytes (was %" G_GUINT64_FORMAT
                  "), %" G_GUINT64_FORMAT " bytes released", bytes, old, released);
        fc_result_add_u64(res, "budget_bytes", bytes);
        fc_result_add_u64(res, "previous_budget_bytes", old);
        fc_result_add_u64(res, "released_bytes", released);
        fc_result_add_u64(res, "resident_bytes", resident_now(p));
        return 0;
}

/* ---- rescans ---- */

struct rescan {
        struct fcd_pins *p;
        guint64 id;
        char *path;
        bool recursive;
        struct fcd_caller owner;
        guint64 own_resident, own_files;
        struct fcd_pin_build *b;
        struct fc_error e;
};

static void rescan_free(struct rescan *rs)
{
        fcd_pin_build_free(rs->b);
        g_free(rs->path);
        g_free(rs);
}

/* Resolve the pin's path as its owner and build its file set; any thread. */
static struct fcd_pin_build *rebuild(struct fcd_pins *p, const char *path, bool recursive,
                                     const struct fcd_caller *owner, guint64 own_resident,
                                     guint64 own_files, struct fc_error *e)
{
        struct fcd_identity_saved saved;
        struct fc_target t = FC_TARGET_INIT;
        struct fcd_pin_build *b = NULL;
        int r;

        r = fcd_identity_enter(owner, &saved);
        if (r < 0) {
                fc_error_set(e, -r, "cannot take on uid %u: %s", owner->uid, strerror(-r));
                return NULL;
        }
        if (fcd_caller_resolve(path, AT_SYMLINK_NOFOLLOW, &t, e) == 0) {
                b = build_new(p, path, recursive, false, own_resident, own_files);
                b->soft = true; /* what does not fit is held, not resident */
                b->status = build_fill(b, &t, e);
                fc_target_close(&t);
        }
        fcd_identity_leave(&saved);
        return b;
}

static void rescan_thread(GTask *task, gpointer src, gpointer data, GCancellable *c)
{
        struct rescan *rs = data;

        rs->b = rebuild(rs->p, rs->path, rs->recursive, &rs->owner, rs->own_resident,
                        rs->own_files, &rs->e);
        g_task_return_boolean(task, TRUE);
}

static void rescan_done(GObject *src, GAsyncResult *res, gpointer data)
{
        struct rescan *rs = g_task_get_task_data(G_TASK(res));
        struct fcd_pins *p = rs->p;
        struct pin *pin = g_hash_table_lookup(p->pins, &rs->id);

        fcd_tasks_in_flight--;
        if (!pin) {
                fcd_pins_discard(p, g_steal_pointer(&rs->b)); /* unpinned meanwhile */
                return;
        }
        pin->rescan_running = false;
        if (rs->b && rs->b->status == 0) {
                pin_adopt(p, pin, rs->b);
        } else {
                fcd_pins_discard(p, g_steal_pointer(&rs->b));
                g_warning("Rescan of pin %" G_GUINT64_FORMAT " (%s) failed: %s; its files are "
                          "released until it can be resolved again", pin->id, pin->path,
                          rs->e.text);
                struct fcd_pin_build *empty = build_new(p, pin->path, pin->recursive, false, 0, 0);
                pin_adopt(p, pin, empty);
                fcd_pin_build_free(empty);
                pin->unresolved = g_strdup(rs->e.text);
        }
        if (pin->rescan_pending)
                schedule_rescan(p, pin);
        fcd_manager_pins_changed(p->ctx);
}

static gboolean on_rescan_timer(gpointer data)
{
        struct fcd_pins *p = data;
        GHashTableIter it;
        gpointer value;

        p->rescan_timer = 0;
        g_hash_table_iter_init(&it, p->pins);
        while (g_hash_table_iter_next(&it, NULL, &value)) {
                struct pin *pin = value;
                struct rescan *rs;
                g_autoptr(GTask) task = NULL;

                if (!pin->rescan_pending || pin->rescan_running)
                        continue;
                pin->rescan_pending = false;
                pin->rescan_running = true;
                rs = g_new0(struct rescan, 1);
                rs->p = p;
                rs->id = pin->id;
                rs->path = g_strdup(pin->path);
                rs->recursive = pin->recursive;
                rs->owner = pin->owner;
                rs->own_resident = pin->resident;
                rs->own_files = g_hash_table_size(pin->files);
                task = g_task_new(NULL, NULL, rescan_done, NULL);
                g_task_set_task_data(task, rs, (GDestroyNotify)rescan_free);
                fcd_tasks_in_flight++;
                g_task_run_in_thread(task, rescan_thread);
        }
        return G_SOURCE_REMOVE;
}

static void schedule_rescan(struct fcd_pins *p, struct pin *pin)
{
        pin->rescan_pending = true;
        if (!p->rescan_timer)
                p->rescan_timer = g_timeout_add(RESCAN_DELAY_MS, on_rescan_timer, p);
}

/* ---- inotify events ---- */

/* Open the directory rel of pin as its owner; -errno on failure. */
static int open_pin_dir(struct pin *pin, const char *rel)
{
        g_autofree char *path = *rel ? g_build_filename(pin->path, rel, NULL)
                                     : g_strdup(pin->path);
        int fd = fcd_open_how(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                              RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);

        return fd < 0 ? -errno : fd;
}

static void drop_file(struct fcd_pins *p, struct pin *pin, const char *relfile)
{
        struct held *h = g_hash_table_lookup(pin->files, relfile);

        if (!h)
                return;
        totals_add(p, pin, -1);
        pin->bytes -= h->size;
        if (held_resident(h))
                pin->resident -= h->size;
        g_hash_table_remove(pin->files, relfile);
        totals_add(p, pin, 1);
}

/* A file appeared or was written in a pinned directory: hold it (again) as the owner. */
static void refresh_file(struct fcd_pins *p, struct pin *pin, const char *rel, const char *name,
                         const char *relfile)
{
        struct fcd_identity_saved saved;
        struct fcd_pin_build *b;
        struct held *h;
        int dfd, fd, err = 0;

        drop_file(p, pin, relfile);
        if (fcd_identity_enter(&pin->owner, &saved) < 0)
                return;
        dfd = open_pin_dir(pin, rel);
        fd = dfd < 0 ? dfd : fcd_open_regular_at(dfd, name);
        fcd_identity_leave(&saved);
        if (dfd >= 0)
                close(dfd);
        if (fd < 0)
                return; /* gone again, not regular, or the owner cannot read it */
        b = build_new(p, pin->path, pin->recursive, false, 0, 0);
        b->soft = true;
        h = hold_fd(b, fd, &err);
        close(fd);
        if (h) {
                totals_add(p, pin, -1);
                pin->bytes += h->size;
                if (held_resident(h))
                        pin->resident += h->size;
                g_hash_table_replace(pin->files, g_strdup(relfile), h);
                totals_add(p, pin, 1);
        } else if (err == -E2BIG) {
                g_warning("Pin %s: %s not pinned: the limit of %" G_GUINT64_FORMAT " files is "
                          "reached", pin->path, relfile, p->lim.max_files);
        }
        fcd_pin_build_free(b);
}

static void handle_event(struct fcd_pins *p, const struct inotify_event *ev, bool *changed)
{
        g_autoptr(GArray) ids = NULL;
        GArray *refs;

        if (ev->mask & IN_Q_OVERFLOW) {
                GHashTableIter it;
                gpointer value;
                p->rescans++;
                g_message("The inotify queue overflowed: rescanning every recursive pin");
                g_hash_table_iter_init(&it, p->pins);
                while (g_hash_table_iter_next(&it, NULL, &value))
                        if (((struct pin *)value)->is_dir)
                                schedule_rescan(p, value);
                return;
        }
        refs = g_hash_table_lookup(p->watches, GINT_TO_POINTER(ev->wd));
        if (!refs)
                return;
        ids = g_array_copy(refs);
        for (guint i = 0; i < ids->len; i++) {
                guint64 id = g_array_index(ids, guint64, i);
                struct pin *pin = g_hash_table_lookup(p->pins, &id);
                const char *rel;
                g_autofree char *relfile = NULL;

                if (!pin)
                        continue;
                rel = g_hash_table_lookup(pin->wds, GINT_TO_POINTER(ev->wd));
                if (!rel)
                        continue;
                if (ev->mask & IN_IGNORED) {
                        g_hash_table_remove(pin->wds, GINT_TO_POINTER(ev->wd));
                        continue;
                }
                if (!pin->is_dir || (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) ||
                    ((ev->mask & IN_ISDIR) && pin->recursive)) {
                        schedule_rescan(p, pin); /* the tree's shape changed */
                        continue;
                }
                if (!ev->len || (ev->mask & IN_ISDIR))
                        continue;
                relfile = *rel ? g_strconcat(rel, "/", ev->name, NULL) : g_strdup(ev->name);
                if (ev->mask & (IN_DELETE | IN_MOVED_FROM))
                        drop_file(p, pin, relfile);
                else
                        refresh_file(p, pin, rel, ev->name, relfile);
                *changed = true;
        }
        if (ev->mask & IN_IGNORED)
                g_hash_table_remove(p->watches, GINT_TO_POINTER(ev->wd));
}

static gboolean on_inotify(gint fd, GIOCondition cond, gpointer data)
{
        struct fcd_pins *p = data;
        char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
        bool changed = false;
        ssize_t n;

        while ((n = read(fd, buf, sizeof(buf))) > 0) {
                for (char *q = buf; q < buf + n;) {
                        const struct inotify_event *ev = (const struct inotify_event *)q;
                        handle_event(p, ev, &changed);
                        q += sizeof(*ev) + ev->len;
                }
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
                g_warning("Failed to read inotify events: %m; pinned trees may go stale");
        if (changed)
                fcd_manager_pins_changed(p->ctx);
        return G_SOURCE_CONTINUE;
}

/* ---- fcache.ko coming and going ---- */

/* The budget set with set cache-size is the module's too, whenever it is loaded. */
static void push_budget(struct fcd_pins *p)
{
        char msg[256];

        if (fcd_kmod_loaded() && fcd_kmod_set_budget(budget_now(p), msg, sizeof(msg)) < 0)
                g_warning("Failed to set fcache.ko's pin budget to %" G_GUINT64_FORMAT
                          " bytes: %s", budget_now(p), msg);
}

static gboolean on_kmod_poll(gpointer data)
{
        struct fcd_pins *p = data;
        GHashTableIter it;
        gpointer value;

        if (!fcd_kmod_recheck())
                return G_SOURCE_CONTINUE;
        g_message("fcache.ko is %s: pins are now held %s", fcd_kmod_loaded() ? "loaded" :
                  "gone", fcd_kmod_loaded() ? "in the kernel" : "by fcached");
        if (p->budget_set)
                push_budget(p);
        /* Every pin is built again the new way; the old way's holds go with the old set. */
        g_hash_table_iter_init(&it, p->pins);
        while (g_hash_table_iter_next(&it, NULL, &value))
                schedule_rescan(p, value);
        fcd_manager_pins_changed(p->ctx);
        return G_SOURCE_CONTINUE;
}

/* ---- life cycle ---- */

struct fcd_pins *fcd_pins_new(struct fcd_context *ctx, const char *state_dir,
                              const struct fcd_pins_limits *limits, GError **error)
{
        struct fcd_pins *p;

        /* Private to root, as units/tmpfiles.d/fcache.conf makes it. */
        if (g_mkdir_with_parents(state_dir, 0700) < 0) {
                g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno),
                            "Cannot create the state directory %s: %s", state_dir,
                            g_strerror(errno));
                return NULL;
        }
        p = g_new0(struct fcd_pins, 1);
        p->ctx = ctx;
        p->file = g_build_filename(state_dir, "pins.ini", NULL);
        p->lim = *limits;
        p->pins = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, pin_free);
        p->watches = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL,
                                           (GDestroyNotify)g_array_unref);
        p->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (p->ifd < 0)
                g_warning("Failed to create an inotify instance: %m; recursive pins will not "
                          "follow their trees");
        else
                p->isrc = g_unix_fd_add(p->ifd, G_IO_IN, on_inotify, p);
        fcd_kmod_recheck(); /* before the pins are loaded: they go where it says */
        p->kmod_timer = g_timeout_add_seconds(KMOD_POLL_S, on_kmod_poll, p);
        return p;
}

void fcd_pins_free(struct fcd_pins *p)
{
        if (!p)
                return;
        if (p->rescan_timer)
                g_source_remove(p->rescan_timer);
        if (p->kmod_timer)
                g_source_remove(p->kmod_timer);
        fcd_kmod_detach(); /* the kernel pins stay for the next start */
        if (p->isrc)
                g_source_remove(p->isrc);
        g_hash_table_unref(p->pins);
        g_hash_table_unref(p->watches);
        if (p->ifd >= 0)
                close(p->ifd);
        g_free(p->file);
        g_free(p);
}

void fcd_pins_load(struct fcd_pins *p)
{
        g_autoptr(GKeyFile) kf = g_key_file_new();
        g_autoptr(GError) error = NULL;
        g_auto(GStrv) groups = NULL;
        guint applied = 0, failed = 0;

        if (!g_key_file_load_from_file(kf, p->file, G_KEY_FILE_NONE, &error)) {
                if (!g_error_matches(error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
                        g_warning("Failed to read the pins from %s: %s, ignoring", p->file,
                                  error->message);
                return;
        }
        if (g_key_file_has_key(kf, "fcached", "budget_bytes", NULL))
                p->lim.budget_bytes = g_key_file_get_uint64(kf, "fcached", "budget_bytes", NULL);
        p->budget_set = g_key_file_get_boolean(kf, "fcached", "budget_set", NULL);
        if (p->budget_set)
                push_budget(p);
        p->next_id = g_key_file_get_uint64(kf, "fcached", "next_id", NULL);
        groups = g_key_file_get_groups(kf, NULL);
        for (char **g = groups; *g; g++) {
                struct fc_error e = { 0 };
                struct pin *pin;
                struct fcd_pin_build *b;
                g_autofree char *path = NULL;
                g_autofree gint *gids = NULL;
                gsize ngids = 0;
                guint64 id;

                if (!g_str_has_prefix(*g, "pin "))
                        continue;
                id = g_ascii_strtoull(*g + 4, NULL, 10);
                path = g_key_file_get_string(kf, *g, "path", NULL);
                if (!id || !path || path[0] != '/' || g_hash_table_size(p->pins) >= p->lim.max_pins) {
                        g_warning("Ignoring the bad pin record [%s] in %s", *g, p->file);
                        continue;
                }
                pin = g_new0(struct pin, 1);
                pin->id = id;
                pin->path = g_steal_pointer(&path);
                pin->recursive = g_key_file_get_boolean(kf, *g, "recursive", NULL);
                pin->priority = CLAMP(g_key_file_get_integer(kf, *g, "priority", NULL),
                                      FC_PRIORITY_MIN, FC_PRIORITY_MAX);
                pin->owner.uid = (uid_t)g_key_file_get_uint64(kf, *g, "uid", NULL);
                pin->owner.gid = (gid_t)g_key_file_get_uint64(kf, *g, "gid", NULL);
                gids = g_key_file_get_integer_list(kf, *g, "groups", &ngids, NULL);
                for (gsize i = 0; i < ngids && i < FCD_GROUPS_MAX; i++)
                        pin->owner.groups[pin->owner.ngroups++] = (gid_t)gids[i];
                pin->created = g_key_file_get_int64(kf, *g, "created", NULL);
                pin->files = new_files();
                pin->wds = new_wds();
                pin->root_fd = -1;
                if (id > p->next_id)
                        p->next_id = id;
                g_hash_table_insert(p->pins, &pin->id, pin);
                b = rebuild(p, pin->path, pin->recursive, &pin->owner, 0, 0, &e);
                if (b && b->status == 0) {
                        pin_adopt(p, pin, b);
                        fcd_pin_build_free(b);
                        applied++;
                } else {
                        fcd_pins_discard(p, b);
                        /* Kept: the mount may come later; query pinned says why. */
                        pin->unresolved = g_strdup(e.text);
                        g_warning("Failed to re-apply the pin of %s: %s; keeping it", pin->path,
                                  e.text);
                        failed++;
                }
        }
        g_message("Re-applied %u pins from %s (%u could not be resolved): %" G_GUINT64_FORMAT
                  " files, %" G_GUINT64_FORMAT " bytes resident", applied, p->file, failed,
                  p->files, resident_now(p));
}

guint fcd_pins_count(struct fcd_pins *p) { return g_hash_table_size(p->pins); }
guint64 fcd_pins_files(struct fcd_pins *p) { return p->files; }
guint64 fcd_pins_bytes(struct fcd_pins *p) { return p->bytes; }
guint64 fcd_pins_resident(struct fcd_pins *p) { return resident_now(p); }
guint64 fcd_pins_budget(struct fcd_pins *p) { return budget_now(p); }
guint64 fcd_pins_rescans(struct fcd_pins *p) { return p->rescans; }
