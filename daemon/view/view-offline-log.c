// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * view-offline-log.c: what offline changes leave in the operation log
 * (oplog.h), and who a mirror object is.
 *
 * Offline, every change an application makes is applied to the mirror
 * and then noted here before it is acknowledged (offline_note_*()): a
 * record naming the changed object by its log id, which the mirror's
 * marks give (view-mirror-marks.c: an object made offline carries its
 * log id, one of the server's its base).  stat of a mirror object shows
 * the server's inode number and times its base recorded, or the log id's
 * number for an object made offline (offline_translate_stat()).  The
 * switch between online and offline is view-offline.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fcachectl.h"
#include "view.h"

/* ---- identities ---- */

/*
 * The times mirror object @st (nlink as shown) with base @b shows.  Its
 * own ctime is that of the mirror's copy of the server's last change, a few
 * ms after the server's (and a directory's mtime that of the mirror's own
 * entries): shown offline, a ctime read there could be later than the one
 * read online after the reconnect, or the same second as a change a second
 * after it.  So an object the mirror holds as its base says shows the
 * server's ctime and mtime as the base recorded them.  One changed offline
 * (MIRROR_CHANGED), or that no longer matches its base (a change the mirror
 * took without a new base: a write passed through, another of its names
 * unlinked), shows its own, the later, but never a ctime before the base's.
 */
static void show_base_times(const struct mirror_base *b, struct stat *st)
{
        bool as_base = !(b->flags & (MIRROR_CHANGED | MIRROR_STALE)) &&
                       st->st_mode == b->ver.mode && st->st_uid == b->ver.uid &&
                       st->st_gid == b->ver.gid &&
                       (S_ISDIR(st->st_mode) ||
                        (timespec_ns(&st->st_mtim) == b->ver.mtime_ns &&
                         (uint64_t)st->st_size == b->ver.size && st->st_nlink == b->ver.nlink));

        if (as_base)
                st->st_mtim = ns_timespec(b->ver.mtime_ns);
        if (as_base || timespec_ns(&st->st_ctim) < b->ver.ctime_ns)
                st->st_ctim = ns_timespec(b->ver.ctime_ns);
}

int offline_translate_stat(struct view *v, int fd, struct stat *st)
{
        struct mirror_base b;
        uint64_t lid;
        int by = 0;

        if (mirror_get_base(fd, NULL, &b) == 0) {
                if (mirror_links_counted(v, st, b.ver.ino))
                        st->st_nlink--;         /* the index's link is no name */
                st->st_ino = b.ver.ino;
                show_base_times(&b, st);
        } else if (mirror_get_lid(fd, NULL, &lid) == 0) {
                st->st_ino = OFFLINE_INO_BASE + lid;
                by = OFFLINE_SHOWN_BY_LID;
        }
        st->st_dev = v->backing_dev;
        return by;
}

/* offline_lock held: the lid of child @name of directory @dfd (lid @plid). */
static int child_lid(struct view *v, int dfd, const char *name, uint64_t plid, uint64_t *lid)
{
        struct oplog_version ver;
        struct mirror_base b;
        int r;

        if (mirror_get_base(dfd, name, &b) < 0)
                return mirror_get_lid(dfd, name, lid) == 0 ? 0 : -ENOENT;
        if (oplog_find_cached_ino(v->oplog, b.ver.ino, lid) == 0)
                return 0;
        /* Its bytes may not be the server's: no base to log a change against. */
        if (b.flags & MIRROR_STALE)
                return -EHOSTDOWN;
        /* First change of this object while offline: register its base. */
        ver = b.ver;
        if (S_ISREG(ver.mode)) {
                int fd = regular_open_at(dfd, name, O_RDONLY, NULL);

                if (fd < 0)
                        return fd;
                r = oplog_put_base_fd(v->oplog, fd, ver.content);
                close(fd);
                if (r < 0)
                        return r;
        }
        return oplog_object(v->oplog, plid, name, &ver, lid);
}

/* offline_lock held: the lid of an object the log knows already, found by its
 * own marks (no path needed, whatever its depth or how many names it has). */
static int known_lid(struct view *v, int dfd, const char *name, uint64_t *lid)
{
        struct mirror_base b;

        if (mirror_get_base(dfd, name, &b) == 0)
                return oplog_find_cached_ino(v->oplog, b.ver.ino, lid) == 0 ? 0 : -ENOENT;
        return mirror_get_lid(dfd, name, lid) == 0 ? 0 : -ENOENT;
}

/* A listing of directory @dfd (an O_PATH descriptor will do), or NULL. */
static DIR *dir_listing(int dfd)
{
        int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

        if (!d && fd >= 0)
                close(fd);
        return d;
}

/* Whether entry @de of listing @d is object @ino (its d_ino, then a stat). */
static bool entry_is(DIR *d, const struct dirent *de, ino_t ino)
{
        struct stat st;

        return de->d_ino == ino && fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               st.st_ino == ino;
}

char *offline_name_in(int dfd, ino_t ino)
{
        struct dirent *de;
        char *found = NULL;
        DIR *d = dir_listing(dfd);

        if (!d)
                return NULL;
        while (!found && (de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && entry_is(d, de, ino))
                        found = strdup(de->d_name);
        closedir(d);
        return found;
}

/*
 * A name of non-directory @ino in the tree under directory @dfd, as the name
 * and a descriptor of its directory (*where); NULL if none.
 */
static char *name_in_tree(int dfd, ino_t ino, int *where, int depth)
{
        struct dirent *de;
        char *found = NULL;
        DIR *d = dir_listing(dfd);

        if (!d)
                return NULL;
        while (!found && (de = readdir(d))) {
                int sub;

                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
                    mirror_is_tmp(de->d_name))
                        continue;
                if (de->d_ino == ino) {
                        if (entry_is(d, de, ino) && (*where = dup(dirfd(d))) >= 0)
                                found = strdup(de->d_name);
                } else if ((de->d_type == DT_DIR || de->d_type == DT_UNKNOWN) && depth < 4096 &&
                           (sub = openat(dirfd(d), de->d_name,
                                         O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
                        found = name_in_tree(sub, ino, where, depth + 1);
                        close(sub);
                }
        }
        closedir(d);
        return found;
}

/* offline_lock held: by the path (an object known only by a descriptor). */
static int lid_by_path(struct view *v, int dfd, const char *name, uint64_t *out)
{
        char *rel = view_rel_path(v->mirror_fd, dfd, name);
        gchar **parts;
        uint64_t lid = OPLOG_ROOT;
        int cur, r = 0;

        if (!rel)
                return -ESTALE;
        parts = g_strsplit(rel, "/", -1);
        g_free(rel);
        cur = dup(v->mirror_fd);
        for (unsigned i = 0; parts[i] && r == 0 && cur >= 0; i++) {
                int next;

                if (!*parts[i] || !strcmp(parts[i], "."))
                        continue;
                r = child_lid(v, cur, parts[i], lid, &lid);
                if (r < 0 || !parts[i + 1])
                        break;
                next = openat(cur, parts[i], O_PATH | O_NOFOLLOW | O_CLOEXEC);
                close(cur);
                cur = next;
        }
        if (cur < 0 && r == 0)
                r = -errno;
        if (cur >= 0)
                close(cur);
        g_strfreev(parts);
        if (r == 0)
                *out = lid;
        return r;
}

/*
 * offline_lock held: the lid of mirror object dfd/name (dfd itself when name
 * is NULL), registering it (and the directories above it) at its first
 * change.  Directories are climbed by descriptors ("..") rather than by a
 * path, which would fail near PATH_MAX.
 */
static int lid_of_depth(struct view *v, int dfd, const char *name, uint64_t *out, int depth)
{
        struct stat st, root;
        uint64_t plid;
        char *me;
        int up, r;

        if (known_lid(v, dfd, name, out) == 0) {
                /* A file with several links: the name it is reached by now may
                 * be the one replay has to follow it by, once the others go. */
                if (name && *name && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    mirror_linkable(st.st_mode) && st.st_nlink > 1 &&
                    lid_of_depth(v, dfd, NULL, &plid, depth + 1) == 0)
                        oplog_object_alias(v->oplog, *out, plid, name);
                return 0;
        }
        if (depth > 4096)
                return -ELOOP;
        if (name && *name) {
                r = lid_of_depth(v, dfd, NULL, &plid, depth + 1);
                return r < 0 ? r : child_lid(v, dfd, name, plid, out);
        }
        if (fstatat(dfd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ||
            fstat(v->mirror_fd, &root) < 0)
                return -errno;
        if (st.st_ino == root.st_ino && st.st_dev == root.st_dev) {
                *out = OPLOG_ROOT;
                return 0;
        }
        if (!S_ISDIR(st.st_mode)) {
                r = lid_by_path(v, dfd, NULL, out);
                /* A file of several names reached by none the view knows (its
                 * descriptor's went to another file, or is the links index's):
                 * named by another the mirror has, once, as the log then knows it. */
                if (r < 0 && mirror_linkable(st.st_mode) && st.st_nlink >= 2 &&
                    (me = name_in_tree(v->mirror_fd, st.st_ino, &up, 0))) {
                        r = lid_of_depth(v, up, me, out, depth + 1);
                        free(me);
                        close(up);
                }
                return r;
        }
        up = openat(dfd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (up < 0)
                return -errno;
        me = offline_name_in(up, st.st_ino);
        r = me ? lid_of_depth(v, up, me, out, depth + 1) : -ESTALE;
        free(me);
        close(up);
        return r;
}

static int lid_of(struct view *v, int dfd, const char *name, uint64_t *out)
{
        return lid_of_depth(v, dfd, name, out, 0);
}

/*
 * offline_lock held: the lid of mirror object dfd/name that a change is
 * about to be made to, its base marked MIRROR_CHANGED (the directories
 * above it, registered on the way, are not changed).  A node that
 * remembers the lid found here for it was marked then.
 */
static int lid_to_change(struct view *v, int dfd, const char *name, uint64_t *out)
{
        int r = lid_of(v, dfd, name, out), m;

        if (r == 0 && (m = mirror_mark_changed(dfd, name)) < 0)
                log_warn("Failed to mark a mirror object changed offline: %s (it shows the"
                         " server's times until the reconnect), ignoring", strerror(-m));
        return r;
}

int offline_lid(struct view *v, int dfd, const char *name, uint64_t *lid)
{
        int r;

        pthread_mutex_lock(&v->offline_lock);
        r = lid_to_change(v, dfd, name, lid);
        pthread_mutex_unlock(&v->offline_lock);
        if (r < 0)
                log_warn("Offline change of an object the log cannot name: %s", strerror(-r));
        return r;
}

bool offline_became(struct view *v, uint64_t was, uint64_t now)
{
        bool r;

        if (!v->oplog)
                return false;
        pthread_mutex_lock(&v->offline_lock);
        r = oplog_became(v->oplog, was, now);
        pthread_mutex_unlock(&v->offline_lock);
        return r;
}

bool offline_object_is(struct view *v, uint64_t lid, uint64_t server_ino)
{
        bool r;

        if (!v->oplog)
                return false;
        pthread_mutex_lock(&v->offline_lock);
        r = oplog_object_is(v->oplog, lid, server_ino);
        pthread_mutex_unlock(&v->offline_lock);
        return r;
}

/* ---- records ---- */

/*
 * offline_lock held: after new content of lid (mirror descriptor fd), its
 * mtime as the change left it, so that replay stamps the time of the change,
 * not its own.  Recorded after the content, which replay applies first.
 */
static int note_mtime(struct view *v, uint64_t lid, int fd)
{
        struct oplog_setattr sa = { .mask = OPLOG_SET_MTIME };
        struct stat st;

        if (fstat(fd, &st) < 0)
                return -errno;
        sa.mtime = st.st_mtim;
        return oplog_record_setattr(v->oplog, lid, &sa);
}

static int note_result(int r, const char *what)
{
        if (r < 0)
                log_error("Failed to log an offline %s: %s", what, strerror(-r));
        return r;
}

int offline_note_create(struct view *v, int pfd, uint64_t *pplid, const char *name,
                        const char *target, uint64_t *out)
{
        uint64_t plid = *pplid, lid;
        struct stat st;
        int r = 0;

        if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        pthread_mutex_lock(&v->offline_lock);
        /* The parent's marks are read only when its node does not know its id. */
        if (!plid)
                r = lid_to_change(v, pfd, NULL, &plid);
        if (r == 0) {
                if (S_ISDIR(st.st_mode))
                        r = oplog_record_mkdir(v->oplog, plid, name, st.st_mode & 07777,
                                               st.st_uid, st.st_gid, &lid);
                else if (S_ISLNK(st.st_mode))
                        r = oplog_record_symlink(v->oplog, plid, name, target, st.st_uid,
                                                 st.st_gid, &lid);
                else if (S_ISREG(st.st_mode))
                        r = oplog_record_create_deferred(v->oplog, plid, name, st.st_mode,
                                                         st.st_uid, st.st_gid, pfd, name, &lid);
                else
                        r = oplog_record_mknod(v->oplog, plid, name, st.st_mode, st.st_rdev,
                                               st.st_uid, st.st_gid, &lid);
        }
        if (r == 0)
                r = mirror_set_lid(pfd, name, lid);
        pthread_mutex_unlock(&v->offline_lock);
        if (r == 0) {
                *pplid = plid;
                *out = lid;
        }
        if (r < 0)      /* not logged: not done */
                unlinkat(pfd, name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
        return note_result(r, "create");
}

int offline_note_link(struct view *v, uint64_t lid, int npfd, const char *newname)
{
        uint64_t nplid;
        int r;

        pthread_mutex_lock(&v->offline_lock);
        r = lid_to_change(v, npfd, NULL, &nplid);
        if (r == 0)
                r = oplog_record_link(v->oplog, lid, nplid, newname);
        pthread_mutex_unlock(&v->offline_lock);
        if (r < 0)
                unlinkat(npfd, newname, 0);
        return note_result(r, "link");
}

int offline_note_unlink(struct view *v, uint64_t plid, const char *name, uint64_t lid, bool dir)
{
        int r;

        pthread_mutex_lock(&v->offline_lock);
        r = dir ? oplog_record_rmdir(v->oplog, plid, name, lid)
                : oplog_record_unlink(v->oplog, plid, name, lid);
        pthread_mutex_unlock(&v->offline_lock);
        return note_result(r, dir ? "rmdir" : "unlink");
}

int offline_note_rename(struct view *v, uint64_t plid, const char *name, uint64_t lid,
                        uint64_t nplid, const char *newname, uint64_t other, unsigned flags)
{
        int r;

        pthread_mutex_lock(&v->offline_lock);
        r = oplog_record_rename(v->oplog, plid, name, lid, nplid, newname, other, flags);
        pthread_mutex_unlock(&v->offline_lock);
        return note_result(r, "rename");
}

int offline_note_in_doubt(struct view *v, uint64_t lid)
{
        int r;

        pthread_mutex_lock(&v->offline_lock);
        r = oplog_mark_in_doubt(v->oplog, lid);
        pthread_mutex_unlock(&v->offline_lock);
        return note_result(r, "in-doubt mark");
}

bool offline_is_atomic_save(int pfd, const char *name, int npfd, const char *newname,
                            unsigned flags, struct mirror_base *dest_base)
{
        struct mirror_base b;
        struct stat src, dst;
        uint64_t lid;

        if (flags || mirror_get_base(pfd, name, &b) == 0 || mirror_get_lid(pfd, name, &lid) < 0 ||
            mirror_get_base(npfd, newname, dest_base) < 0)
                return false;
        if (fstatat(pfd, name, &src, AT_SYMLINK_NOFOLLOW) < 0 ||
            fstatat(npfd, newname, &dst, AT_SYMLINK_NOFOLLOW) < 0)
                return false;
        return S_ISREG(src.st_mode) && S_ISREG(dst.st_mode) && src.st_nlink == 1 &&
               dst.st_nlink == 1;
}

int offline_note_atomic_save(struct view *v, uint64_t plid, const char *name, uint64_t lid,
                             uint64_t dest_lid, int npfd, const char *newname,
                             const struct mirror_base *dest_base)
{
        /* The file that takes its identity is its new content, changed offline. */
        struct mirror_base saved = *dest_base;
        struct stat st;
        int fd, r;

        saved.flags |= MIRROR_CHANGED;

        fd = regular_open_at(npfd, newname, O_RDONLY, NULL);
        if (fd < 0)
                return fd;
        pthread_mutex_lock(&v->offline_lock);
        /* The temporary goes (its create and content cancel), the file gets its bytes. */
        r = oplog_record_unlink(v->oplog, plid, name, lid);
        if (r == 0)
                r = oplog_record_content(v->oplog, dest_lid, fd);
        if (r == 0)
                r = note_mtime(v, dest_lid, fd);
        /* Its mode too, whatever the server file's was: a change of the
         * replaced file's mode pending in the log must not outlive it. */
        if (r == 0 && fstat(fd, &st) == 0) {
                struct oplog_setattr sa = { .mask = OPLOG_SET_MODE, .mode = st.st_mode & 07777 };

                r = oplog_record_setattr(v->oplog, dest_lid, &sa);
        }
        if (r == 0)
                r = mirror_take_identity(npfd, newname, &saved);
        pthread_mutex_unlock(&v->offline_lock);
        close(fd);
        return note_result(r, "save (rename over a file)");
}

int offline_note_setattr(struct view *v, uint64_t lid, const struct oplog_setattr *sa)
{
        int r;

        pthread_mutex_lock(&v->offline_lock);
        /* A file created offline: its create takes the mirror's attributes. */
        r = oplog_deferred_change(v->oplog, lid, -1);
        if (r == 0)
                r = oplog_record_setattr(v->oplog, lid, sa);
        pthread_mutex_unlock(&v->offline_lock);
        if (r > 0)
                r = 0;
        return note_result(r, "attribute change");
}

int offline_note_content(struct view *v, uint64_t lid, int fd)
{
        int r;

        /* The record names the container; replay takes its bytes and mtime then
         * (a file created offline: its create does, no record). */
        pthread_mutex_lock(&v->offline_lock);
        r = oplog_deferred_change(v->oplog, lid, fd);
        if (r == 0)
                r = oplog_record_content(v->oplog, lid, fd);
        pthread_mutex_unlock(&v->offline_lock);
        if (r > 0)
                r = 0;
        return note_result(r, "write");
}

int offline_durable(struct view *v)
{
        int r;

        /* Fsyncs arriving together share one sync; other changes go on meanwhile. */
        pthread_mutex_lock(&v->offline_lock);
        r = oplog_durable_grouped(v->oplog, &v->offline_lock);
        pthread_mutex_unlock(&v->offline_lock);
        return note_result(r, "sync");
}

int offline_note_xattr(struct view *v, uint64_t lid, const char *name, const void *value,
                       size_t size, int flags, bool remove)
{
        int r;

        pthread_mutex_lock(&v->offline_lock);
        r = remove ? oplog_record_removexattr(v->oplog, lid, name)
                   : oplog_record_setxattr(v->oplog, lid, name, value, size, flags);
        pthread_mutex_unlock(&v->offline_lock);
        return note_result(r, "xattr change");
}

/* Online: a structural conflict holds server inode ino. */
int view_conflict_errno(struct view *v, uint64_t ino)
{
        fcache_conflict_kind k;
        char kind[32];
        uint64_t lid;
        int r = 0;

        if (!__atomic_load_n(&v->conflicts, __ATOMIC_ACQUIRE))
                return 0;
        pthread_mutex_lock(&v->offline_lock);
        /* Where the server deleted the object, its inode number may have been
         * reused by another object since: that one is not held. */
        if (oplog_find_ino(v->oplog, ino, &lid) == 0 &&
            oplog_object_conflict(v->oplog, lid, kind) == 1 &&
            fcache_conflict_kind_from_string(&k, kind) == 0 &&
            fcache_conflict_kind_is_structural(k) && k != FCACHE_CONFLICT_EDIT_DELETE &&
            k != FCACHE_CONFLICT_RENAME_DELETE && k != FCACHE_CONFLICT_CHILDREN_DELETE)
                r = -FCACHE_ECONFLICT;
        pthread_mutex_unlock(&v->offline_lock);
        return r;
}

/* offline_lock held: the log's id of mirror entry dfd/name (dfd itself when
 * name is NULL); false when the log does not know it (no record names it). */
bool offline_entry_lid(struct view *v, int dfd, const char *name, uint64_t *lid)
{
        struct stat st, root;

        if (!name && fstat(dfd, &st) == 0 && fstat(v->mirror_fd, &root) == 0 &&
            st.st_ino == root.st_ino && st.st_dev == root.st_dev) {
                *lid = OPLOG_ROOT;
                return true;
        }
        return known_lid(v, dfd, name, lid) == 0;
}

/*
 * Names not in the mirror, looked up in writeback: fetched one by one
 * (Coda's fetch of a miss while weakly connected), never a walk of the
 * directory, which may hold changes not shipped yet.  The log guards it: a
 * name a pending record created, removed or moved in that directory (an
 * unlink, an rmdir, a rename's source) is the application's doing, not a
 * miss.  While the LOOKUP of a name it has no dentry for is in flight the
 * kernel holds the directory's lock, so no entry of it is made, removed or
 * moved through the view meanwhile (a revalidation of a dentry it has is
 * not under that lock); the check is made again as the fetched object goes
 * in place, with changes excluded.
 */
struct name_ref {
        uint64_t parent;
        const char *name;
        bool named;
};

static int names_it(void *ud, const struct oplog_record *rec)
{
        struct name_ref *n = ud;
        bool at = rec->parent == n->parent && rec->name && !strcmp(rec->name, n->name);
        bool to = rec->parent2 == n->parent && rec->name2 && !strcmp(rec->name2, n->name);

        if (rec->state == OPLOG_APPLIED)
                return 0;
        switch (rec->kind) {
        case OPLOG_CREATE: case OPLOG_MKDIR: case OPLOG_SYMLINK: case OPLOG_MKNOD:
        case OPLOG_UNLINK: case OPLOG_RMDIR:
                n->named = n->named || at;
                break;
        case OPLOG_RENAME:
                n->named = n->named || at || to;
                break;
        case OPLOG_LINK:
                n->named = n->named || to;
                break;
        default:
                break;
        }
        return n->named ? -1 : 0;
}

/* Whether a record not yet on the server names @name in directory @mdfd. */
bool writeback_name_logged(struct view *v, int mdfd, const char *name)
{
        struct name_ref n = { .name = name };

        pthread_mutex_lock(&v->offline_lock);
        if (offline_entry_lid(v, mdfd, NULL, &n.parent))
                oplog_foreach(v->oplog, false, names_it, &n);
        pthread_mutex_unlock(&v->offline_lock);
        return n.named;
}

struct lid_ref {
        uint64_t lid;
        bool named;
};

static int touches_it(void *ud, const struct oplog_record *rec)
{
        struct lid_ref *l = ud;

        if (rec->state == OPLOG_APPLIED)
                return 0;
        l->named = rec->lid == l->lid || rec->other == l->lid || rec->parent == l->lid ||
                   rec->parent2 == l->lid;
        return l->named ? -1 : 0;
}

bool writeback_object_logged(struct view *v, int mdfd, const char *name)
{
        struct lid_ref l = { 0 };
        bool known;

        pthread_mutex_lock(&v->offline_lock);
        known = offline_entry_lid(v, mdfd, name, &l.lid);
        if (known)
                oplog_foreach(v->oplog, false, touches_it, &l);
        pthread_mutex_unlock(&v->offline_lock);
        return l.named;
}
