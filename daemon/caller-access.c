/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * caller-access.c: resolve a path and check access with the caller's
 * identity, so that a caller never learns anything about, nor acts on, a
 * file it could not read itself.
 *
 * The identity switch uses the raw system calls: glibc's setgroups()
 * changes every thread of the process, the raw one only this thread.
 * Changing the fs uid away from 0 also drops this thread's file
 * capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, ...), so the
 * kernel's checks are the caller's, symlink protections included.
 * Resolution refuses /proc magic links, which could otherwise reach files
 * through another process's descriptors.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "caller-access.h"

int fcd_identity_enter(const struct fcd_caller *c, struct fcd_identity_saved *saved)
{
        saved->switched = false;
        if (c->uid == 0)
                return 0; /* root acts as itself */
        saved->ngroups = getgroups(FCD_GROUPS_MAX, saved->groups);
        if (saved->ngroups < 0)
                return -errno;
        if (syscall(SYS_setgroups, (size_t)c->ngroups, c->groups) < 0)
                return -errno;
        saved->switched = true;
        syscall(SYS_setfsgid, c->gid);
        syscall(SYS_setfsuid, c->uid);
        /* setfs[ug]id report no errors: read the values back. */
        if ((uid_t)syscall(SYS_setfsuid, (uid_t)-1) != c->uid ||
            (gid_t)syscall(SYS_setfsgid, (gid_t)-1) != c->gid) {
                fcd_identity_leave(saved);
                return -EPERM;
        }
        return 0;
}

void fcd_identity_leave(struct fcd_identity_saved *saved)
{
        if (!saved->switched)
                return;
        syscall(SYS_setfsuid, geteuid());
        syscall(SYS_setfsgid, getegid());
        if (syscall(SYS_setgroups, (size_t)saved->ngroups, saved->groups) < 0)
                g_error("Cannot restore the daemon's groups: %m"); /* never act with them */
        saved->switched = false;
}

int fcd_caller_resolve(const char *path, unsigned int atflags, struct fc_target *t,
                       struct fc_error *e)
{
        struct open_how how = {
                .flags = O_PATH | O_CLOEXEC,
                .resolve = RESOLVE_NO_MAGICLINKS,
        };
        struct statx stx;
        int fd, r;

        t->display = path;
        if (atflags & AT_SYMLINK_NOFOLLOW)
                how.flags |= O_NOFOLLOW;
        fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
        if (fd < 0) {
                r = errno;
                switch (r) {
                case ENOENT:
                        return fc_error_set(e, ENOENT, "%s: no such file or directory", path);
                case ENOTDIR:
                        return fc_error_set(e, ENOTDIR, "%s: a component of the path is not a "
                                            "directory", path);
                case EACCES:
                case EPERM:
                        return fc_error_set(e, EACCES, "%s: permission denied: the caller "
                                            "cannot reach it", path);
                case ELOOP:
                        return fc_error_set(e, ELOOP, "%s: too many levels of symbolic links, "
                                            "or a /proc magic link", path);
                default:
                        return fc_error_set(e, r, "%s: %s", path, strerror(r));
                }
        }
        if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
                  STATX_TYPE | STATX_MODE | STATX_INO | STATX_SIZE | STATX_MNT_ID, &stx) < 0) {
                r = errno;
                close(fd);
                return fc_error_set(e, r, "%s: cannot stat: %s", path, strerror(r));
        }
        /* A symbolic link itself (no-follow) is readable by whoever reaches it. */
        if (!S_ISLNK(stx.stx_mode) &&
            syscall(SYS_faccessat2, fd, "", R_OK, AT_EMPTY_PATH | AT_EACCESS) < 0) {
                r = errno;
                close(fd);
                if (r == EACCES || r == EPERM)
                        return fc_error_set(e, EACCES, "%s: permission denied: the caller "
                                            "cannot read it", path);
                return fc_error_set(e, r, "%s: cannot check access: %s", path, strerror(r));
        }
        t->fd = fd;
        t->stx = stx;
        return 0;
}

int fcd_open_regular_at(int dirfd, const char *name)
{
        struct stat st;
        int fd;

        /* Never open a device node (its open runs a driver) or a fifo. */
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return -EINVAL;
        }
        return fd;
}
