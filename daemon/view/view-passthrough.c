/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-passthrough.c: FUSE passthrough (Linux 6.9+) for the view's open
 * files: the kernel serves read, write and mmap of such an open file from a
 * local file the view registered, without a FUSE_READ or FUSE_WRITE.
 *
 * libfuse 3.14 has no API for it, so the protocol is spoken here directly:
 * FUSE_PASSTHROUGH (with max_stack_depth 1) is added to the INIT reply when
 * the kernel offers it, the local file is registered with
 * FUSE_DEV_IOC_BACKING_OPEN on /dev/fuse, and the OPEN (or CREATE) reply
 * gets FOPEN_PASSTHROUGH and the backing id, patched into the message
 * libfuse writes through the session's custom io (view-session.c).
 *
 * Which opens pass through: a file created by this open, offline an open
 * for writing (the mirror's file is the container the log names: the view
 * records it at flush, fsync and release, as for a created file), and read-only
 * opens (not O_DIRECT) of regular files that have a complete local copy: online, a file the store holds whole and
 * found unchanged at this open, of a backing on a local filesystem (its
 * file is passed: a network backing keeps the store and BackingTimeout
 * between it and the application); offline, the mirror's file.  The first
 * read of a file goes through the view and fills the store as before.  The
 * file passed is the one the view opened as the caller.  Files smaller than
 * PT_MIN_SIZE are served as before: warm, the kernel's page cache answers
 * their reads anyway (keep_cache), while a passthrough read makes the kernel
 * drop the inode's atime, so the next stat costs a FUSE_GETATTR (tar, which
 * stats each file it reads, got slower by one round trip per file).
 *
 * A created file is its own complete copy: its writes go to the backing's
 * (local) file or offline the mirror's directly, without a FUSE_WRITE (and
 * without the GETXATTR of security.capability the kernel asks before the
 * first write to an inode); the view marks it written, for the mirror or
 * the log, as it cannot see the writes.
 *
 * The kernel fails with EIO an open that is not in the mode of the inode's
 * other open files (all passthrough with one backing, or none).  So the mode
 * is kept per node here, decided by the first open and kept until the last
 * release: while a node is open normally, every open of it is normal; while
 * it is open for passthrough, every open of it passes through the same
 * backing, writers included (their writes reach the backing file directly,
 * which is what an online write through the view does too; the view marks
 * them written, as it cannot see them).  A writer of a node passed through
 * in the other tree (the volume switched between online and offline since,
 * or the release of the last such open is still on its way) joins it too,
 * with that file as its stranded file: what the kernel writes there is
 * copied over the object served at flush, fsync and release, as for a
 * writer open across the switch (view-ops.c).
 *
 * FCACHE_VIEW_PASSTHROUGH=0 in the environment turns it off.
 */
#include <errno.h>
#include <linux/fuse.h>
#include <linux/magic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/statfs.h>
#include <sys/uio.h>

#include "view.h"

/* Protocol 7.40 (Linux 6.9); the installed header may be older. */
#ifndef FUSE_PASSTHROUGH
#define FUSE_PASSTHROUGH (1ULL << 37)
#endif
#ifndef FUSE_INIT_EXT
#define FUSE_INIT_EXT (1 << 30)
#endif
#ifndef FOPEN_PASSTHROUGH
#define FOPEN_PASSTHROUGH (1 << 7)
#endif
struct view_backing_map {
        int32_t fd;
        uint32_t flags;
        uint64_t padding;
};
#define VIEW_DEV_IOC_BACKING_OPEN  _IOW(229, 1, struct view_backing_map)
#define VIEW_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

/* fuse_init_out from 7.36 on: flags2 at 32, max_stack_depth (7.40) at 36. */
#define INIT_OUT_FLAGS2 32
#define INIT_OUT_STACK_DEPTH 36

#define PT_MIN_SIZE (128 << 10)

struct pt_node {
        unsigned opens;         /* open files of the node this table counts */
        int backing_id;         /* > 0: they pass through this backing */
        int fd;                 /* the file registered as that backing, or -1 */
        bool offline;           /* the backing is the mirror's file */
        uint64_t mirror_ino;    /* offline, with fd: that file's inode number, else 0 */
};

static struct {
        pthread_mutex_t lock;
        GHashTable *nodes;      /* protected by lock: nodeid -> struct pt_node */
        GHashTable *mirror_files; /* protected by lock: the mirror's files the
                                   * kernel holds, inode number -> nodes */
        unsigned mirror_count;  /* atomic: their number */
        bool wanted;            /* not turned off; the kernel decides */
        bool on;                /* negotiated in INIT (atomic) */
        int fuse_fd;
        struct view *v;
        uint64_t read_requests; /* atomic */
} pt = { .lock = PTHREAD_MUTEX_INITIALIZER, .fuse_fd = -1 };

/* pt.lock held: node n's file is fd (duplicated). */
static void node_take_file(struct pt_node *n, int fd)
{
        struct stat st;
        guint nodes;

        n->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (n->fd < 0 || !n->offline || fstat(n->fd, &st) < 0)
                return;
        n->mirror_ino = st.st_ino;
        if (!pt.mirror_files)
                pt.mirror_files = g_hash_table_new_full(g_int64_hash, g_int64_equal,
                                                        g_free, NULL);
        nodes = GPOINTER_TO_UINT(g_hash_table_lookup(pt.mirror_files, &n->mirror_ino));
        g_hash_table_insert(pt.mirror_files, g_memdup2(&n->mirror_ino, sizeof(uint64_t)),
                            GUINT_TO_POINTER(nodes + 1));
        __atomic_add_fetch(&pt.mirror_count, 1, __ATOMIC_RELEASE);
}

/* pt.lock held. */
static void pt_node_free(gpointer p)
{
        struct pt_node *n = p;

        if (n->mirror_ino) {
                guint nodes = GPOINTER_TO_UINT(g_hash_table_lookup(pt.mirror_files,
                                                                   &n->mirror_ino));

                if (nodes > 1)
                        g_hash_table_insert(pt.mirror_files,
                                            g_memdup2(&n->mirror_ino, sizeof(uint64_t)),
                                            GUINT_TO_POINTER(nodes - 1));
                else
                        g_hash_table_remove(pt.mirror_files, &n->mirror_ino);
                __atomic_sub_fetch(&pt.mirror_count, 1, __ATOMIC_RELEASE);
        }
        if (n->fd >= 0)
                close(n->fd);
        g_free(n);
}

bool passthrough_holds_mirror_files(void)
{
        return __atomic_load_n(&pt.mirror_count, __ATOMIC_ACQUIRE) != 0;
}

bool passthrough_holds_mirror_file(uint64_t ino)
{
        bool held;

        if (!passthrough_holds_mirror_files())
                return false;
        pthread_mutex_lock(&pt.lock);
        held = pt.mirror_files && g_hash_table_contains(pt.mirror_files, &ino);
        pthread_mutex_unlock(&pt.lock);
        return held;
}

/* The open reply this thread is about to send, and its backing id. */
static __thread int reply_backing_id;

bool view_fs_is_local(int fd)
{
        struct statfs sf;

        if (fstatfs(fd, &sf) < 0)
                return false;
        switch ((unsigned long)sf.f_type) {
        case FUSE_SUPER_MAGIC:
        case NFS_SUPER_MAGIC:
        case SMB_SUPER_MAGIC:
        case 0xff534d42:        /* CIFS */
        case 0xfe534d42:        /* SMB2 */
        case 0x00c36400:        /* Ceph */
        case V9FS_MAGIC:
        case AFS_SUPER_MAGIC:
        case AFS_FS_MAGIC:
        case CODA_SUPER_MAGIC:
                return false;
        default:
                return true;
        }
}

static void nodes_init(void)
{
        if (!pt.nodes)
                pt.nodes = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, pt_node_free);
}

void passthrough_restore(struct view *v, uint64_t id, uint32_t mode)
{
        struct pt_node *n;

        pthread_mutex_lock(&pt.lock);
        nodes_init();
        n = g_hash_table_lookup(pt.nodes, &id);
        if (!n) {
                uint64_t *key = g_new(uint64_t, 1);

                *key = id;
                n = g_new0(struct pt_node, 1);
                n->backing_id = (int)PT_MODE_BACKING_ID(mode);
                n->fd = -1;
                /* An older worker's log does not say: the tree served now. */
                n->offline = (mode & PT_MODE_TREE) ? (mode & PT_MODE_OFFLINE) != 0 :
                                                     view_offline(v);
                g_hash_table_insert(pt.nodes, key, n);
        }
        n->opens++;
        pthread_mutex_unlock(&pt.lock);
}

uint32_t passthrough_tree_mode(uint64_t id)
{
        struct pt_node *n;
        uint32_t mode = 0;

        pthread_mutex_lock(&pt.lock);
        n = pt.nodes ? g_hash_table_lookup(pt.nodes, &id) : NULL;
        if (n && n->backing_id > 0)
                mode = PT_MODE_TREE | (n->offline ? PT_MODE_OFFLINE : 0);
        pthread_mutex_unlock(&pt.lock);
        return mode;
}

bool passthrough_in_other_tree(uint64_t id, bool offline)
{
        struct pt_node *n;
        bool other;

        pthread_mutex_lock(&pt.lock);
        n = pt.nodes ? g_hash_table_lookup(pt.nodes, &id) : NULL;
        other = n && n->backing_id > 0 && n->offline != offline;
        pthread_mutex_unlock(&pt.lock);
        return other;
}

bool passthrough_file_unknown(uint64_t id, bool *offline)
{
        struct pt_node *n;
        bool unknown;

        pthread_mutex_lock(&pt.lock);
        n = pt.nodes ? g_hash_table_lookup(pt.nodes, &id) : NULL;
        unknown = n && n->backing_id > 0 && n->fd < 0;
        if (unknown)
                *offline = n->offline;
        pthread_mutex_unlock(&pt.lock);
        return unknown;
}

void passthrough_adopt_file(uint64_t id, int fd)
{
        struct pt_node *n;

        pthread_mutex_lock(&pt.lock);
        n = pt.nodes ? g_hash_table_lookup(pt.nodes, &id) : NULL;
        if (n && n->fd < 0) {
                node_take_file(n, fd);
                /* Found by name (an older worker's, or a kill before it
                 * went to the holder): the holder keeps it from now on. */
                if (n->fd >= 0 && n->backing_id > 0)
                        fdstore_keep_soon(FDSTORE_BACKING | (uint32_t)n->backing_id, n->fd);
        }
        pthread_mutex_unlock(&pt.lock);
}

void passthrough_take_backing(uint32_t bid, int fd)
{
        GHashTableIter it;
        gpointer key, val;
        bool taken = false;

        pthread_mutex_lock(&pt.lock);
        if (pt.nodes) {
                g_hash_table_iter_init(&it, pt.nodes);
                while (!taken && g_hash_table_iter_next(&it, &key, &val)) {
                        struct pt_node *n = val;

                        taken = n->backing_id == (int)bid;
                        if (taken && n->fd < 0)
                                node_take_file(n, fd);
                }
        }
        pthread_mutex_unlock(&pt.lock);
        close(fd);
        if (!taken)
                fdstore_drop(FDSTORE_BACKING | bid);    /* released meanwhile */
}

void passthrough_setup(struct view *v, int fuse_fd)
{
        const char *e = getenv("FCACHE_VIEW_PASSTHROUGH");

        pt.wanted = !(e && (!strcmp(e, "0") || !strcmp(e, "no") || !strcmp(e, "off")));
        pt.fuse_fd = fuse_fd;
        pt.v = v;
        pthread_mutex_lock(&pt.lock);
        nodes_init();
        pthread_mutex_unlock(&pt.lock);
        if (!pt.wanted)
                log_info("FUSE passthrough turned off (FCACHE_VIEW_PASSTHROUGH)");
}

bool passthrough_on(void)
{
        return __atomic_load_n(&pt.on, __ATOMIC_ACQUIRE);
}

void passthrough_count_read(void)
{
        __atomic_add_fetch(&pt.read_requests, 1, __ATOMIC_RELAXED);
}

uint64_t passthrough_read_requests(void)
{
        return __atomic_load_n(&pt.read_requests, __ATOMIC_RELAXED);
}

void passthrough_patch_init(void *init_out, size_t len, uint64_t offered)
{
        char *o = init_out;
        uint32_t flags, flags2, depth = 1;

        if (!pt.wanted || !(offered & FUSE_PASSTHROUGH) || !(offered & FUSE_INIT_EXT) ||
            len < INIT_OUT_STACK_DEPTH + sizeof(depth))
                return;
        memcpy(&flags, o + offsetof(struct fuse_init_out, flags), sizeof(flags));
        memcpy(&flags2, o + INIT_OUT_FLAGS2, sizeof(flags2));
        if (flags & FUSE_WRITEBACK_CACHE)
                return;         /* the kernel refuses passthrough with it */
        flags |= FUSE_INIT_EXT;
        flags2 |= (uint32_t)(FUSE_PASSTHROUGH >> 32);
        memcpy(o + offsetof(struct fuse_init_out, flags), &flags, sizeof(flags));
        memcpy(o + INIT_OUT_FLAGS2, &flags2, sizeof(flags2));
        /* The view's files are not on another stacked filesystem's. */
        memcpy(o + INIT_OUT_STACK_DEPTH, &depth, sizeof(depth));
        __atomic_store_n(&pt.on, true, __ATOMIC_RELEASE);
        log_info("FUSE passthrough negotiated%s",
                 pt.v->backing_local ? "" : " (offline only: the backing is not local)");
}

void passthrough_patch_reply(struct iovec *iov, int count)
{
        const struct fuse_out_header *oh;
        struct fuse_open_out *oo;
        size_t len;

        if (!reply_backing_id || count != 2 || iov[0].iov_len != sizeof(*oh))
                return;
        oh = iov[0].iov_base;
        len = iov[1].iov_len;
        if (oh->error != 0 || (len != sizeof(*oo) &&
                               len != sizeof(struct fuse_entry_out) + sizeof(*oo)))
                return;
        oo = (void *)((char *)iov[1].iov_base + len - sizeof(*oo));
        oo->open_flags |= FOPEN_PASSTHROUGH;
        oo->open_flags &= ~FOPEN_KEEP_CACHE;    /* not allowed with passthrough */
        /* backing_id from 7.40 on, the field older headers call padding: set by
         * offset so that the code builds against either */
        memcpy((char *)oo + offsetof(struct fuse_open_out, open_flags) + sizeof(oo->open_flags),
               &(int32_t){ reply_backing_id }, sizeof(int32_t));
}

void passthrough_reply_begin(int backing_id)
{
        reply_backing_id = backing_id > 0 ? backing_id : 0;
}

void passthrough_reply_end(void)
{
        reply_backing_id = 0;
}

/*
 * A writer of a file with set-id bits is not passed through: the kernel
 * would write the local file with the daemon's credentials, whose
 * CAP_FSETID keeps the bits a write by the caller kills (and with
 * HANDLE_KILLPRIV the kernel leaves that kill to the view, which does not
 * see the write).  Through the view, the write is made as the caller.
 */
static bool writer_keeps_setid(int fd, bool writing)
{
        struct stat st;

        return writing && fstat(fd, &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID));
}

int passthrough_open(struct view *v, uint64_t id, int fd, int flags, bool regular,
                     bool local_copy, bool created, int *stranded)
{
        bool offline = view_offline(v);
        bool writing = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
        struct view_backing_map map = { .fd = fd };
        struct pt_node *n;
        struct stat st;
        uint64_t *key;
        int r = 0;

        if (stranded)
                *stranded = -1;
        if (!regular || !passthrough_on())
                return 0;
        pthread_mutex_lock(&pt.lock);
        n = g_hash_table_lookup(pt.nodes, &id);
        if (n) {
                r = n->backing_id;
                if (r > 0 && writing && n->offline != offline) {
                        /* Written in the other tree's file: shipped by the caller. */
                        int dup = stranded && n->fd >= 0 ?
                                  fcntl(n->fd, F_DUPFD_CLOEXEC, 0) : -1;

                        if (dup < 0)
                                r = -ETXTBSY;
                        else
                                *stranded = dup;
                }
                if (r >= 0)
                        n->opens++;
                pthread_mutex_unlock(&pt.lock);
                return r;
        }
        n = g_new0(struct pt_node, 1);
        n->fd = -1;
        key = g_new(uint64_t, 1);
        *key = id;
        n->opens = 1;
        n->offline = offline;
        if (!(flags & O_DIRECT) && local_copy && (offline || v->backing_local) &&
            !writer_keeps_setid(fd, writing) &&
            (created || (offline && writing) ||
             (!writing && fstat(fd, &st) == 0 && st.st_size >= PT_MIN_SIZE))) {
                r = ioctl(pt.fuse_fd, VIEW_DEV_IOC_BACKING_OPEN, &map);
                if (r > 0) {
                        n->backing_id = r;
                        node_take_file(n, fd);
                        /* For a successor: names may not lead there then.
                         * Soon, not now: most are closed at once (a file
                         * created, written and closed), and a name moved
                         * meanwhile sends it first (fdstore_flush()). */
                        fdstore_keep_soon(FDSTORE_BACKING | (uint32_t)r, fd);
                }
                else
                        log_debug("FUSE_DEV_IOC_BACKING_OPEN failed: %m, serving reads");
        }
        g_hash_table_insert(pt.nodes, key, n);
        r = n->backing_id;
        pthread_mutex_unlock(&pt.lock);
        return r;
}

/* pt.lock held: node @id's entry when it passes through a file known here. */
static struct pt_node *file_node(uint64_t id)
{
        struct pt_node *n = pt.nodes ? g_hash_table_lookup(pt.nodes, &id) : NULL;

        return n && n->backing_id > 0 && n->fd >= 0 ? n : NULL;
}

int passthrough_file_stat(uint64_t id, struct stat *st)
{
        struct pt_node *n;
        int r = -ENOENT;

        pthread_mutex_lock(&pt.lock);
        n = file_node(id);
        if (n)
                r = fstat(n->fd, st) < 0 ? -errno : 0;
        pthread_mutex_unlock(&pt.lock);
        return r;
}

int passthrough_other_tree_file(uint64_t id, bool offline)
{
        struct pt_node *n;
        int fd = -1;

        pthread_mutex_lock(&pt.lock);
        n = file_node(id);
        if (n && n->offline != offline)
                fd = backing_reopen(n->fd, O_WRONLY);
        pthread_mutex_unlock(&pt.lock);
        return fd < 0 ? -1 : fd;
}

int passthrough_kernel_file(uint64_t id)
{
        struct pt_node *n;
        int fd = -1;

        pthread_mutex_lock(&pt.lock);
        n = file_node(id);
        if (n)
                fd = backing_reopen(n->fd, O_WRONLY);
        pthread_mutex_unlock(&pt.lock);
        return fd < 0 ? -1 : fd;
}

int passthrough_nameless_file(uint64_t id, int flags)
{
        struct pt_node *n;
        struct stat st;
        int fd = -ENOENT;

        pthread_mutex_lock(&pt.lock);
        n = file_node(id);
        if (n && fstat(n->fd, &st) == 0 && st.st_nlink == 0)
                fd = backing_reopen(n->fd, flags);
        pthread_mutex_unlock(&pt.lock);
        return fd;
}

bool passthrough_release(uint64_t id)
{
        struct pt_node *n;
        bool mirror_file = false;

        pthread_mutex_lock(&pt.lock);
        n = pt.nodes ? g_hash_table_lookup(pt.nodes, &id) : NULL;
        if (n && --n->opens == 0) {
                uint32_t bid = (uint32_t)n->backing_id;

                mirror_file = n->offline;

                /* The kernel holds the backing for the inode's open files
                 * still closing; the id only names it for new opens. */
                if (bid && ioctl(pt.fuse_fd, VIEW_DEV_IOC_BACKING_CLOSE, &bid) < 0)
                        log_debug("FUSE_DEV_IOC_BACKING_CLOSE %u failed: %m, ignoring", bid);
                if (bid)
                        fdstore_drop(FDSTORE_BACKING | bid);
                g_hash_table_remove(pt.nodes, &id);
        }
        pthread_mutex_unlock(&pt.lock);
        return mirror_file;
}
