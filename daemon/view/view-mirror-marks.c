// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * view-mirror-marks.c: what the mirror's entries carry on disk, read and
 * written in one place: the xattr trusted.fcache.base (the server identity
 * an entry was copied from, struct mirror_base, kept small enough for the
 * inode; or, for an entry made offline, its log id), MIRROR_COMPLETE of a
 * directory, the index of hard links (CacheDir/mirror.links), and the
 * names of the mirror's temporaries
 * (.fcache-mirror.PID.N).  It calls nothing of the view: the mirror
 * (view-mirror.c), the listing, the nodes and the offline log read marks
 * through it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "view.h"

#define XATTR_BASE "trusted.fcache.base"
#define XATTR_LID "trusted.fcache.lid"

/* The path to reach dfd/name (or dfd itself: the magic link is then to be
 * followed, as the l*xattr calls would act on the link). */
static bool entry_path(char *buf, size_t len, int dfd, const char *name)
{
        if (name && *name) {
                snprintf(buf, len, "/proc/self/fd/%d/%s", dfd, name);
                return false;
        }
        snprintf(buf, len, "/proc/self/fd/%d", dfd);
        return true;
}

static ssize_t get_x(int dfd, const char *name, const char *key, void *val, size_t size)
{
        char p[PATH_MAX];
        bool follow = entry_path(p, sizeof(p), dfd, name);

        return follow ? getxattr(p, key, val, size) : lgetxattr(p, key, val, size);
}

static int set_x_flags(int dfd, const char *name, const char *key, const void *val, size_t size,
                       int flags)
{
        char p[PATH_MAX];
        bool follow = entry_path(p, sizeof(p), dfd, name);
        int r = follow ? setxattr(p, key, val, size, flags) : lsetxattr(p, key, val, size, flags);

        return r < 0 ? -errno : 0;
}

static int set_x(int dfd, const char *name, const char *key, const void *val, size_t size)
{
        return set_x_flags(dfd, name, key, val, size, 0);
}

/*
 * The base as stored: a mirror_base without its content id (always "" in the
 * mirror), 52 bytes, so that ext4 keeps it in the inode (a larger value
 * takes a block of its own: 4 KiB more per mirrored file).  A base of the
 * whole struct, as written before, is read too.
 */
struct base_xattr {
        uint64_t ino, size;
        int64_t mtime_ns, ctime_ns;
        uint32_t mode, uid, gid, nlink, flags;
} __attribute__((packed));

int mirror_get_base(int dfd, const char *name, struct mirror_base *b)
{
        struct base_xattr x;
        ssize_t n = get_x(dfd, name, XATTR_BASE, b, sizeof(*b));

        if (n < 0)
                return -errno;
        if (n == sizeof(*b))
                return 0;
        if (n == sizeof(uint64_t))
                return -ENODATA;        /* a log id: made offline, no base */
        if (n != sizeof(x))
                return -EINVAL;
        memcpy(&x, b, sizeof(x));
        memset(b, 0, sizeof(*b));
        b->ver.ino = x.ino;
        b->ver.size = x.size;
        b->ver.mtime_ns = x.mtime_ns;
        b->ver.ctime_ns = x.ctime_ns;
        b->ver.mode = x.mode;
        b->ver.uid = x.uid;
        b->ver.gid = x.gid;
        b->ver.nlink = x.nlink;
        b->flags = x.flags;
        return 0;
}

static void base_to_xattr(struct base_xattr *x, const struct mirror_base *b)
{
        *x = (struct base_xattr){
                .ino = b->ver.ino, .size = b->ver.size, .mtime_ns = b->ver.mtime_ns,
                .ctime_ns = b->ver.ctime_ns, .mode = b->ver.mode, .uid = b->ver.uid,
                .gid = b->ver.gid, .nlink = b->ver.nlink, .flags = b->flags,
        };
}

int mirror_set_base(int dfd, const char *name, const struct mirror_base *b)
{
        struct base_xattr x;

        base_to_xattr(&x, b);
        return set_x(dfd, name, XATTR_BASE, &x, sizeof(x));
}

int mirror_clear_base(int dfd, const char *name)
{
        char p[PATH_MAX];

        entry_path(p, sizeof(p), dfd, name);
        return lremovexattr(p, XATTR_BASE) < 0 && errno != ENODATA ? -errno : 0;
}

/*
 * The base replaces the log id in one write (the same xattr), so a crash
 * leaves one or the other, and the base alone fits in the inode (ext4 gave
 * the pair a block of their own).  An entry without the xattr may be of an
 * older mirror, whose log id has its own: it goes after the base, as before
 * (one left beside a base is never read: mirror_get_lid()).
 */
int mirror_take_identity(int dfd, const char *name, const struct mirror_base *b)
{
        struct base_xattr x;
        char p[PATH_MAX];
        int r;

        base_to_xattr(&x, b);
        r = set_x_flags(dfd, name, XATTR_BASE, &x, sizeof(x), XATTR_REPLACE);
        if (r != -ENODATA)
                return r;
        r = set_x(dfd, name, XATTR_BASE, &x, sizeof(x));
        entry_path(p, sizeof(p), dfd, name);
        if (r == 0 && lremovexattr(p, XATTR_LID) < 0 && errno != ENODATA)
                r = -errno;
        return r;
}

int mirror_get_lid(int dfd, const char *name, uint64_t *lid)
{
        struct mirror_base b;
        ssize_t n = get_x(dfd, name, XATTR_BASE, &b, sizeof(b));

        if (n == sizeof(*lid)) {
                memcpy(lid, &b, sizeof(*lid));
                return 0;
        }
        if (n >= 0)
                return -ENODATA;        /* a base: the server's object */
        if (errno != ENODATA)
                return -errno;
        n = get_x(dfd, name, XATTR_LID, lid, sizeof(*lid));     /* an older mirror's */
        if (n < 0)
                return -errno;
        return n == sizeof(*lid) ? 0 : -EINVAL;
}

int mirror_set_lid(int dfd, const char *name, uint64_t lid)
{
        return set_x(dfd, name, XATTR_BASE, &lid, sizeof(lid));
}

bool mirror_xattr_hidden(const char *name)
{
        return !strncmp(name, "trusted.fcache.", 15);
}

int mirror_mark_stale(int fd)
{
        struct mirror_base b;
        int r = mirror_get_base(fd, NULL, &b);

        if (r < 0)
                return r;
        b.flags |= MIRROR_STALE;
        return mirror_set_base(fd, NULL, &b);
}

bool mirror_copy_stale(int fd)
{
        struct mirror_base b;

        return mirror_get_base(fd, NULL, &b) == 0 && (b.flags & MIRROR_STALE);
}

int mirror_mark_changed(int dfd, const char *name)
{
        struct mirror_base b;
        int r = mirror_get_base(dfd, name, &b);

        if (r == -ENODATA)
                return 0;       /* made offline: its times are all its own */
        if (r < 0 || (b.flags & MIRROR_CHANGED))
                return r;
        b.flags |= MIRROR_CHANGED;
        return mirror_set_base(dfd, name, &b);
}

/* Offline: is every entry of mirror directory dfd there (a name it lacks does not exist)? */
bool offline_dir_complete(int dfd)
{
        struct mirror_base b;
        uint64_t lid;

        if (mirror_get_base(dfd, NULL, &b) == 0)
                return b.flags & MIRROR_COMPLETE;
        return mirror_get_lid(dfd, NULL, &lid) == 0;    /* made offline: all here */
}

/*
 * Hard links: a server file with several names is one mirror object, so that
 * offline it keeps its nlink and a change through one name shows through the
 * others.  CacheDir/mirror.links/INO (outside what is served) is one more
 * link to the mirror object of server inode INO, by which the next name
 * mirrored finds it; offline stat does not count it.  A FIFO, device or
 * socket is kept so too: its mode and owner are all it has to share.
 */
bool mirror_linkable(mode_t mode)
{
        return S_ISREG(mode) || S_ISFIFO(mode) || S_ISCHR(mode) || S_ISBLK(mode) ||
               S_ISSOCK(mode);
}

/* Whether the object stat'ed as st has its names kept as one mirror object. */
bool mirror_kept_as_links(struct view *v, const struct stat *st)
{
        return mirror_linkable(st->st_mode) && st->st_nlink >= 2 && v->mirror_links_fd >= 0;
}

void mirror_links_key(char *buf, size_t len, uint64_t ino)
{
        snprintf(buf, len, "%" PRIu64, ino);
}

bool mirror_links_counted(struct view *v, const struct stat *st, uint64_t sino)
{
        struct stat lst;
        char key[32];

        /* Also its last link: the names it had are all gone. */
        if (!mirror_linkable(st->st_mode) || st->st_nlink < 1 || v->mirror_links_fd < 0)
                return false;
        mirror_links_key(key, sizeof(key), sino);
        return fstatat(v->mirror_links_fd, key, &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
               lst.st_ino == st->st_ino && lst.st_dev == st->st_dev;
}

bool mirror_nameless(struct view *v, const struct stat *st, uint64_t sino)
{
        return st->st_nlink == 0 || (st->st_nlink == 1 && sino && mirror_links_counted(v, st, sino));
}

void mirror_tmp_name(char *buf, size_t len)
{
        static unsigned long counter;

        snprintf(buf, len, ".fcache-mirror.%d.%lu", (int)getpid(),
                 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
}

bool mirror_is_tmp(const char *name)
{
        return !strncmp(name, ".fcache-mirror.", 15);
}

/* This process's temporaries may be in use by another of its walks (the
 * hoard thread and a pin, copies in flight); others' were left by a worker
 * that died. */
bool mirror_tmp_own(const char *name)
{
        char mine[48];

        snprintf(mine, sizeof(mine), ".fcache-mirror.%d.", (int)getpid());
        return !strncmp(name, mine, strlen(mine));
}

bool mirror_tmp_orphaned(const char *name)
{
        char *end;
        long pid;

        if (!mirror_is_tmp(name))
                return false;
        errno = 0;
        pid = strtol(name + 15, &end, 10);
        if (errno || end == name + 15 || *end != '.' || pid <= 0 || pid == getpid())
                return false;
        /* A live process of that id may be a worker still moving it in. */
        return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}
