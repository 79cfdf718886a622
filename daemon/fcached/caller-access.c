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
#include <stdio.h>
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

int fcd_open_how(const char *path, int flags, unsigned long long resolve)
{
        struct open_how how = { .flags = (unsigned long long)flags, .resolve = resolve };
        int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));

        /*
         * Before Linux 5.6 (and under valgrind, which does not know openat2):
         * openat as the same identity. The kernel's own checks still apply with
         * the caller's fs uid, /proc/PID links included (ptrace access with fs
         * credentials), so only the defence in depth is lost.
         */
        if (fd < 0 && errno == ENOSYS)
                fd = openat(AT_FDCWD, path, flags | ((resolve & RESOLVE_NO_SYMLINKS) ? O_NOFOLLOW : 0));
        return fd;
}

/* May the current identity read the object behind the O_PATH descriptor fd? 0 or -errno. */
static int check_read(int fd, mode_t mode)
{
        char proc[64];
        int rfd;

        if (S_ISREG(mode) || S_ISDIR(mode)) {
                /* Opening for reading is the very check the caller's own read would pass. */
                snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
                rfd = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK |
                                 (S_ISDIR(mode) ? O_DIRECTORY : 0));
                if (rfd < 0)
                        return -errno;
                close(rfd);
                return 0;
        }
        /* Never open a device node or a fifo: ask the kernel instead. */
        if (syscall(SYS_faccessat2, fd, "", R_OK, AT_EMPTY_PATH | AT_EACCESS) < 0)
                return -errno;
        return 0;
}

int fcd_caller_resolve(const char *path, unsigned int atflags, struct fc_target *t,
                       struct fc_error *e)
{
        int flags = O_PATH | O_CLOEXEC;
        struct statx stx;
        int fd, r;

        t->display = path;
        if (atflags & AT_SYMLINK_NOFOLLOW)
                flags |= O_NOFOLLOW;
        fd = fcd_open_how(path, flags, RESOLVE_NO_MAGICLINKS);
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
        if (!S_ISLNK(stx.stx_mode) && (r = -check_read(fd, stx.stx_mode)) > 0) {
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
