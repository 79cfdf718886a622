/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A directory handle's listing, with the view's own offsets.
 *
 * The kernel's next READDIR carries the offset of the last entry it took.
 * A backing's d_off cookies (ext4's name hashes, tmpfs's indexes, a
 * server's cookies) mean nothing in the other tree once the volume
 * switched between online and offline, so a handle keeps the entries it
 * read, in order, and an entry's offset is its index + 1.  Entries are read
 * from the tree served only as far as READDIR asks.  When the handle's
 * descriptor changed (a switch) or its position is lost (a read given up
 * on), the listing goes on from the start of the directory it has now,
 * leaving out the names it holds already: each name once, and none lost
 * that the tree served still has.  A listing read to its end is whole
 * until offset 0 (opendir, rewinddir) starts a fresh one.
 *
 * Also the descriptors of the daemon's own listings of server directories
 * (pin and hoard walks, the reconnect's deletion bound and resync, the
 * revalidation pass): O_NOATIME, so a directory's atime stays what the
 * applications' listings made it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <glib.h>

#include "view.h"

struct linux_dirent64 {
        uint64_t d_ino;
        int64_t d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[];
};

struct dirlist {
        GArray *ents;           /* struct dirlist_entry, in the order listed */
        GStringChunk *names;    /* the entries' names (stable addresses) */
        GHashTable *held;       /* the names in ents, once the listing went on
                                 * in another descriptor (NULL before) */
        int fd;                 /* the directory read from (the handle's), or -1 */
        bool mirror;            /* fd was read as the mirror's */
        bool eof;               /* listed to the end: the listing is whole */
        bool lost;              /* fd's position is not known */
};

#define DIRLIST_READ 32768      /* bytes of entries per getdents64 */

int dir_open_noatime(int dfd, const char *name, int flags)
{
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOATIME | flags);

        /* Only the owner or CAP_FOWNER may: without it, listed as before. */
        if (fd < 0 && errno == EPERM)
                fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | flags);
        return fd;
}

struct dirlist *dirlist_new(void)
{
        struct dirlist *l = calloc(1, sizeof(*l));

        if (!l)
                return NULL;
        l->ents = g_array_new(FALSE, FALSE, sizeof(struct dirlist_entry));
        l->names = g_string_chunk_new(4096);
        l->fd = -1;
        return l;
}

void dirlist_free(struct dirlist *l)
{
        if (!l)
                return;
        if (l->held)
                g_hash_table_destroy(l->held);
        g_string_chunk_free(l->names);
        g_array_free(l->ents, TRUE);
        free(l);
}

void dirlist_rewind(struct dirlist *l)
{
        if (l->held)
                g_hash_table_destroy(l->held);
        l->held = NULL;
        g_array_set_size(l->ents, 0);
        g_string_chunk_clear(l->names);
        l->fd = -1;
        l->eof = l->lost = false;
}

/* One getdents64 from offset off, for a helper: its own descriptor and buffer. */
struct dents {
        int fd;                 /* a dup(): shares the listing's offset */
        off_t off;              /* -1: go on from where the last one stopped */
        char *buf;
        size_t size;
};

static void dents_free(void *arg)
{
        struct dents *d = arg;

        backing_close_later(d->fd);
        free(d->buf);
        free(d);
}

static int dents_run(void *arg)
{
        struct dents *d = arg;
        long n;

        if (d->off >= 0 && lseek(d->fd, d->off, SEEK_SET) < 0)
                return -errno;
        n = syscall(SYS_getdents64, d->fd, d->buf, d->size);
        return n < 0 ? -errno : (int)n;
}

/* getdents64 of directory fd (mirror: the mirror's) into raw (size bytes),
 * from off (-1: on), bounded when it is the server's. */
static long read_dents(struct view *v, int fd, bool mirror, off_t off, char *raw, size_t size)
{
        struct dents *d;
        long got;
        int n;

        if (!backing_bounded_in(v, mirror)) {
                if (off >= 0 && lseek(fd, off, SEEK_SET) < 0)
                        return -errno;
                got = syscall(SYS_getdents64, fd, raw, size);
                return got < 0 ? -errno : got;
        }
        d = calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        d->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        d->buf = malloc(size);
        d->off = off;
        d->size = size;
        if (d->fd < 0 || !d->buf) {
                if (d->fd >= 0)
                        close(d->fd);
                free(d->buf);
                free(d);
                return -ENOMEM;
        }
        n = backing_call_bounded_in(v, mirror, dents_run, d, dents_free);
        if (n == -ETIMEDOUT)
                return n;       /* d is the helper's now */
        if (n > 0)
                memcpy(raw, d->buf, (size_t)n);
        dents_free(d);
        return n;
}

/*
 * Offline, a mirror directory that is not complete (on the way to a pin, or
 * holding cached files only) would list some of its entries as if they
 * were all: its listing is EHOSTDOWN, as a lookup of a name it lacks is.
 * It still opens (a descriptor for *at() calls, fsync, a cwd).
 */
static bool dirlist_partial(int dfd)
{
        if (offline_dir_complete(dfd))
                return false;
        log_info("Offline listing of a directory not mirrored completely: EHOSTDOWN");
        return true;
}

/* The listing goes on in fd from its start, without the names it holds. */
static void dirlist_restart(struct dirlist *l, int fd, bool mirror)
{
        if (!l->held && l->ents->len) {
                l->held = g_hash_table_new(g_str_hash, g_str_equal);
                for (guint i = 0; i < l->ents->len; i++)
                        g_hash_table_add(l->held,
                                         (char *)g_array_index(l->ents, struct dirlist_entry,
                                                               i).name);
        }
        l->fd = fd;
        l->mirror = mirror;
        l->lost = false;
}

/* Reads the next entries of fd (mirror: the mirror's directory) into l. */
static int dirlist_read(struct view *v, struct dirlist *l, int fd, bool mirror)
{
        /* A switch moved the handle, or found it no counterpart (the
         * descriptor stays, the tree served changed). */
        bool start = l->fd != fd || l->mirror != mirror || l->lost;
        char *raw;
        long n;

        if (start && mirror && dirlist_partial(fd))
                return -EHOSTDOWN;
        if (start)
                dirlist_restart(l, fd, mirror);
        raw = malloc(DIRLIST_READ);
        if (!raw)
                return -ENOMEM;
        n = read_dents(v, fd, mirror, start ? 0 : -1, raw, DIRLIST_READ);
        if (n < 0) {
                /* A read given up on may still move the position. */
                l->lost = true;
                free(raw);
                return (int)n;
        }
        if (n == 0)
                l->eof = true;
        for (long pos = 0; pos < n;) {
                struct linux_dirent64 *d = (void *)(raw + pos);
                struct dirlist_entry e = { .ino = d->d_ino, .type = d->d_type };

                pos += d->d_reclen;
                /* A copy the mirror is making (a note given up on removes
                 * its own once the server lets it go on). */
                if (mirror && mirror_is_tmp(d->d_name))
                        continue;
                if (l->held && g_hash_table_contains(l->held, d->d_name))
                        continue;
                e.name = g_string_chunk_insert(l->names, d->d_name);
                g_array_append_val(l->ents, e);
                if (l->held)
                        g_hash_table_add(l->held, (char *)e.name);
        }
        free(raw);
        return 0;
}

int dirlist_entry(struct view *v, struct dirlist *l, int fd, bool mirror, uint64_t i,
                  const struct dirlist_entry **e)
{
        while (i >= l->ents->len) {
                int r;

                if (l->eof)
                        return 0;
                r = dirlist_read(v, l, fd, mirror);
                if (r < 0)
                        return r;
        }
        *e = &g_array_index(l->ents, struct dirlist_entry, i);
        return 1;
}
