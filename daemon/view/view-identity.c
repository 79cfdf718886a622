/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-identity.c: is Backing= still the filesystem and directory the volume
 * was made on?
 *
 * An unmounted share leaves its mountpoint, an empty local directory, where
 * the server was.  Taken for the server, it is one on which everything was
 * deleted: reintegration would find every object gone and the mirror would
 * follow it.  So the first time a volume sees its backing, it records what
 * the backing is (CacheDir/backing.id: the filesystem type, the filesystem
 * id and the root directory's inode number, none of which changes when the
 * same export is mounted again; for FUSE, whose filesystem ids are 0 and
 * whose path-layer servers number the root 1, also the mount's source, as
 * sshfs's user@host:path), and from then on a backing that differs is
 * refused with the reason: the worker starts offline on its local copy, and
 * a reconnect fails and leaves the volume offline until the right
 * filesystem is back.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "mounts.h"
#include "view.h"

/* The source of mount @mnt_id ("" unknown, or one backing.id's lines cannot hold). */
static void mount_source(uint64_t mnt_id, char *out, size_t len)
{
        struct fc_mount_table mt;
        const struct fc_mount *m;

        out[0] = '\0';
        if (fc_mount_table_read(&mt) < 0)
                return;
        m = fc_mount_table_find(&mt, mnt_id);
        if (m && !strchr(m->source, '\n'))
                g_strlcpy(out, m->source, len);
        fc_mount_table_free(&mt);
}

static int identity_of(int fd, struct backing_identity *id)
{
        struct statfs sf;
        struct statx stx;
        uint64_t fsid;

        if (fstatfs(fd, &sf) < 0 ||
            statx(fd, "", AT_EMPTY_PATH, STATX_INO | STATX_MNT_ID, &stx) < 0)
                return -errno;
        memcpy(&fsid, &sf.f_fsid, sizeof(fsid));
        id->fstype = (uint64_t)sf.f_type;
        id->fsid = fsid;
        id->root_ino = stx.stx_ino;
        id->source[0] = '\0';
        if (id->fstype == FUSE_SUPER_MAGIC && (stx.stx_mask & STATX_MNT_ID))
                mount_source(stx.stx_mnt_id, id->source, sizeof(id->source));
        return 0;
}

static char *identity_path(struct view *v)
{
        return g_build_filename(v->cfg->cache_dir, "backing.id", NULL);
}

static int identity_load(struct view *v, struct backing_identity *id)
{
        char *path = identity_path(v), *text = NULL;
        int r = -ENOENT;

        id->source[0] = '\0';
        if (g_file_get_contents(path, &text, NULL, NULL)) {
                const char *src = strstr(text, "\nsource=");

                r = sscanf(text, "fstype=%" SCNx64 "\nfsid=%" SCNx64 "\nroot_ino=%" SCNu64,
                           &id->fstype, &id->fsid, &id->root_ino) == 3 ? 0 : -EBADMSG;
                /* Recorded by a newer fcache-view than the first ones. */
                if (r == 0 && src)
                        sscanf(src + 8, "%255[^\n]", id->source);
        }
        g_free(text);
        g_free(path);
        return r;
}

static int identity_save(struct view *v, const struct backing_identity *id)
{
        char *path = identity_path(v);
        char *text = g_strdup_printf("fstype=%" PRIx64 "\nfsid=%" PRIx64 "\nroot_ino=%" PRIu64
                                     "\n%s%s%s", id->fstype, id->fsid, id->root_ino,
                                     id->source[0] ? "source=" : "", id->source,
                                     id->source[0] ? "\n" : "");
        GError *error = NULL;
        int r = 0;

        if (!g_file_set_contents_full(path, text, -1, G_FILE_SET_CONTENTS_CONSISTENT |
                                      G_FILE_SET_CONTENTS_DURABLE, 0600, &error)) {
                log_warn("Cannot record the backing's identity in %s: %s", path, error->message);
                g_error_free(error);
                r = -EIO;
        }
        g_free(text);
        g_free(path);
        return r;
}

int backing_identity_compare(struct view *v, const struct backing_identity *seen, GString *why)
{
        struct backing_identity want, have = *seen;
        int r = identity_load(v, &want);

        if (r == -ENOENT) {
                identity_save(v, &have);        /* first sight: this is the volume's */
                return 0;
        }
        if (r < 0) {
                /* Unreadable: say so, and take this one as the volume's from now on. */
                log_warn("The recorded backing identity is unreadable; recording it again");
                identity_save(v, &have);
                return 0;
        }
        if (want.fstype != have.fstype)
                g_string_printf(why, "Backing %s is not the filesystem the volume was made on "
                                "(type %" PRIx64 ", was %" PRIx64 "): is the share mounted?",
                                v->cfg->backing, have.fstype, want.fstype);
        else if (want.fsid != have.fsid)
                g_string_printf(why, "Backing %s is on another filesystem than the volume was "
                                "made on (filesystem id %" PRIx64 ", was %" PRIx64 "): is the "
                                "right share mounted?", v->cfg->backing, have.fsid, want.fsid);
        else if (want.root_ino != have.root_ino)
                g_string_printf(why, "Backing %s is another directory than the volume was made "
                                "on (inode %" PRIu64 ", was %" PRIu64 ")", v->cfg->backing,
                                have.root_ino, want.root_ino);
        else if (want.source[0] && have.source[0] && strcmp(want.source, have.source))
                g_string_printf(why, "Backing %s is mounted from %s, not from %s as when the"
                                " volume was made: is the right share mounted? (If it is the"
                                " same share named otherwise, remove %s/backing.id to take"
                                " it as the volume's)", v->cfg->backing, have.source,
                                want.source, v->cfg->cache_dir);
        else {
                /* Recorded first without a source: from now on with it. */
                if (!want.source[0] && have.source[0])
                        identity_save(v, &have);
                return 0;
        }
        return -EXDEV;
}

/* Opening Backing=, on a helper: what it asks the server, all of it. */
struct root_job {
        char *path;
        struct backing_root res;
};

static void root_job_drop(void *arg)
{
        struct root_job *j = arg;

        if (j->res.root_fd >= 0)
                close(j->res.root_fd);
        if (j->res.mount_fd >= 0)
                close(j->res.mount_fd);
        free(j->path);
        free(j);
}

static bool handles_work(int root_fd, int mount_fd)
{
        struct file_handle *fh = malloc(sizeof(*fh) + MAX_HANDLE_SZ);
        int mount_id, fd;
        bool ok = false;

        if (!fh)
                return false;
        fh->handle_bytes = MAX_HANDLE_SZ;
        if (name_to_handle_at(root_fd, "", fh, &mount_id, AT_EMPTY_PATH) < 0) {
                log_info("Backing has no file handles (name_to_handle_at: %m)");
        } else {
                fd = open_by_handle_at(mount_fd, fh, O_PATH | O_CLOEXEC);
                if (fd >= 0) {
                        ok = true;
                        close(fd);
                } else {
                        log_info("File handles of the backing cannot be opened"
                                 " (open_by_handle_at: %m)");
                }
        }
        free(fh);
        return ok;
}

#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x00004000U
#endif

/*
 * Which mount numbered a backing's files when it makes them up: this boot
 * and the mount's unique id (a plain mount id, which a later mount may be
 * given again, on a kernel without one).
 */
static void numbering_of(int root_fd, char *buf, size_t len)
{
        char boot[40] = "";
        struct statx stx;
        int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);

        if (fd >= 0) {
                ssize_t n = read(fd, boot, sizeof(boot) - 1);

                boot[n > 0 ? n : 0] = 0;
                boot[strcspn(boot, "\n")] = 0;
                close(fd);
        }
        if (statx(root_fd, "", AT_EMPTY_PATH, STATX_MNT_ID_UNIQUE, &stx) == 0 &&
            (stx.stx_mask & STATX_MNT_ID_UNIQUE))
                snprintf(buf, len, "%s/%" PRIu64, boot, (uint64_t)stx.stx_mnt_id);
        else if (statx(root_fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) == 0 &&
                 (stx.stx_mask & STATX_MNT_ID))
                snprintf(buf, len, "%s/id%" PRIu64, boot, (uint64_t)stx.stx_mnt_id);
        else
                snprintf(buf, len, "%s/?", boot);
}

static int open_root(void *arg)
{
        struct root_job *j = arg;
        struct backing_root *b = &j->res;
        int r;

        b->root_fd = open(j->path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (b->root_fd < 0)
                return -errno;
        /* open_by_handle_at() wants a real (not O_PATH) descriptor on the fs. */
        b->mount_fd = openat(b->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (b->mount_fd < 0 || fstat(b->root_fd, &b->st) < 0)
                return -errno;
        r = identity_of(b->root_fd, &b->id);
        if (r < 0)
                return r;
        b->local = view_fs_is_local(b->root_fd);
        b->handles = handles_work(b->root_fd, b->mount_fd);
        /* libfuse's path layer (sshfs) numbers nodes as it meets them, the
         * root 1, and gives a node it forgot a new number; its handles
         * open only while the kernel holds the inode (the root always).
         * A FUSE server with real inode numbers has its root's. */
        b->names_identify = b->id.fstype == FUSE_SUPER_MAGIC &&
                            (!b->handles || b->st.st_ino == 1);
        if (b->names_identify)
                numbering_of(b->root_fd, b->numbering, sizeof(b->numbering));
        return 0;
}

int backing_open_root(struct view *v, struct backing_root *out)
{
        struct root_job *j = calloc(1, sizeof(*j));
        int r;

        if (!j || !(j->path = strdup(v->cfg->backing))) {
                free(j);
                return -ENOMEM;
        }
        j->res.root_fd = j->res.mount_fd = -1;
        r = backing_call(v, open_root, j, root_job_drop);
        if (r == -ETIMEDOUT)
                return r;       /* the helper has j now */
        if (r == 0) {
                *out = j->res;
                j->res.root_fd = j->res.mount_fd = -1;
        }
        root_job_drop(j);
        return r;
}

void backing_root_why(struct view *v, int err, GString *why)
{
        if (err == -ETIMEDOUT)
                g_string_printf(why, "Backing %s did not answer within BackingTimeout (%" PRIu64
                                " ms)", v->cfg->backing, v->cfg->backing_timeout_ms);
        else
                g_string_printf(why, "cannot open Backing %s: %s", v->cfg->backing,
                                strerror(-err));
}

int backing_reopen_root(struct view *v, GString *why)
{
        struct backing_root b;
        int r = backing_open_root(v, &b);

        if (r < 0) {
                backing_root_why(v, r, why);
                return r;
        }
        r = backing_identity_compare(v, &b.id, why);
        if (r < 0 || (b.st.st_dev == v->backing_dev && b.st.st_ino == v->root_ino)) {
                close(b.root_fd);
                close(b.mount_fd);
                return r;
        }
        /*
         * The share was mounted again (or the worker started on its local
         * copy).  The old descriptors are left open: a helper thread may
         * still be stuck in a call on the old mount.
         */
        log_info("Backing %s was mounted again: serving the new mount", v->cfg->backing);
        v->root_fd = b.root_fd;
        v->mount_fd = b.mount_fd;
        v->backing_dev = b.st.st_dev;
        v->root_ino = b.st.st_ino;
        v->backing_local = b.local;
        /* A worker that started on its stand-in learns it only now. */
        __atomic_store_n(&v->handles, b.handles, __ATOMIC_RELEASE);
        __atomic_store_n(&v->names_identify, b.names_identify, __ATOMIC_RELEASE);
        v->nodes_renumbered = v->nodes_renumbered || b.names_identify;
        if (b.names_identify && !store_numbered_by(v->store, b.numbering)) {
                g_free(v->numbering_pending);
                v->numbering_pending = g_strdup(b.numbering);
        }
        return 0;
}

void backing_numbering_check(struct view *v, const struct backing_root *b)
{
        int n;

        if (!b->names_identify || store_numbered_by(v->store, b->numbering))
                return;
        /* The kernel's nodes a predecessor left (a takeover) know the old
         * numbers and handles too: found by name, online or at the next
         * switch online. */
        v->nodes_renumbered = true;
        /* Its numbers are another mount's: the same number may be another
         * file's now, with the same size and times. */
        n = store_renumbered(v->store, b->numbering);
        if (n < 0) {
                log_warn("Failed to record which mount numbered the files of Backing %s: %s",
                         v->cfg->backing, strerror(-n));
        } else if (n > 0) {
                v->walk_pins_now = true;
                log_info("Backing %s numbers its files anew (mounted again): the store's %d"
                         " copies are dropped, the pinned ones found again by name",
                         v->cfg->backing, n);
        }
}

void backing_numbering_unsure(struct view *v)
{
        int r;

        if (!v->numbering_pending)
                return;
        r = store_numbers_unsure(v->store, v->numbering_pending);
        if (r < 0)
                log_warn("Failed to mark the store's copies of Backing %s unsure: %s",
                         v->cfg->backing, strerror(-r));
        else
                log_info("Backing %s numbers its files anew (mounted again): each copy of the"
                         " store is forgotten at its first use, until the resync has found the"
                         " pinned ones by name", v->cfg->backing);
        g_clear_pointer(&v->numbering_pending, g_free);
}

void backing_numbering_settle(struct view *v)
{
        unsigned dropped;
        int r = store_numbers_settle(v->store, &dropped);

        if (r < 0)
                log_warn("Failed to record which mount numbered the files of Backing %s: %s",
                         v->cfg->backing, strerror(-r));
        else if (r > 0)
                log_info("Backing %s: the store's copies are by the new mount's numbers; %u"
                         " rows of the old ones dropped", v->cfg->backing, dropped);
}

int backing_stand_in(struct view *v, int err)
{
        struct backing_identity id;
        char *dir;
        int fd;

        if (identity_load(v, &id) < 0)
                return -err;    /* never seen: nothing local to serve */
        log_error("Backing %s: %s", v->cfg->backing, strerror(err));
        dir = g_build_filename(v->cfg->cache_dir, "backing-absent", NULL);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                fd = -errno;
        } else {
                fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0)
                        fd = -errno;
        }
        g_free(dir);
        return fd;
}
