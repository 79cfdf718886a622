/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* target.c: O_PATH resolution of command targets, and re-opening them for data. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "target.h"

#define SUPPORTED_ATFLAGS (AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH)

const char *fc_file_type_name(mode_t mode)
{
        switch (mode & S_IFMT) {
        case S_IFREG: return "regular";
        case S_IFDIR: return "directory";
        case S_IFLNK: return "symlink";
        case S_IFIFO: return "fifo";
        case S_IFSOCK: return "socket";
        case S_IFCHR: return "char-device";
        case S_IFBLK: return "block-device";
        }
        return "unknown";
}

static int stat_fd(int fd, struct statx *stx)
{
        if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
                  STATX_TYPE | STATX_MODE | STATX_INO | STATX_SIZE | STATX_MNT_ID, stx) < 0)
                return -errno;
        return 0;
}

static int explain_enoent(int dirfd, const char *pathname, const char *display, struct fc_error *e)
{
        struct stat st;

        /* A name that exists as a link whose target does not is worth saying so. */
        if (fstatat(dirfd, pathname, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
                return fc_error_set(e, ENOENT, "%s: dangling symbolic link (use --no-follow / "
                                    "AT_SYMLINK_NOFOLLOW to act on the link itself)", display);
        return fc_error_set(e, ENOENT, "%s: no such file or directory", display);
}

int fc_target_resolve(int dirfd, const char *pathname, unsigned int atflags,
                      struct fc_target *t, struct fc_error *e)
{
        int flags = O_PATH | O_CLOEXEC, fd, r;
        struct statx stx;

        if (!pathname)
                return fc_error_set(e, EFAULT, "no path given");
        t->display = *pathname ? pathname : "(the directory descriptor)";
        if (atflags & ~SUPPORTED_ATFLAGS)
                return fc_error_set(e, EINVAL, "unsupported flags 0x%x (supported: "
                                    "AT_SYMLINK_NOFOLLOW, AT_NO_AUTOMOUNT, AT_EMPTY_PATH)",
                                    atflags & ~SUPPORTED_ATFLAGS);
        if (!*pathname) {
                if (!(atflags & AT_EMPTY_PATH))
                        return fc_error_set(e, ENOENT, "empty path (pass AT_EMPTY_PATH to act "
                                            "on the directory descriptor itself)");
                fd = dirfd == AT_FDCWD ? open(".", flags)
                                       : fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
                if (fd < 0)
                        return fc_error_set(e, errno, "the directory descriptor: %m");
        } else {
                if (atflags & AT_SYMLINK_NOFOLLOW)
                        flags |= O_NOFOLLOW;
                /* O_PATH without O_DIRECTORY never triggers an automount. */
                fd = openat(dirfd, pathname, flags);
                if (fd < 0) {
                        r = errno;
                        if (r == ENOENT)
                                return explain_enoent(dirfd, pathname, t->display, e);
                        if (r == ENOTDIR)
                                return fc_error_set(e, ENOTDIR, "%s: a component of the path is "
                                                    "not a directory", t->display);
                        if (r == ELOOP)
                                return fc_error_set(e, ELOOP, "%s: too many levels of symbolic "
                                                    "links", t->display);
                        if (r == EBADF)
                                return fc_error_set(e, EBADF, "%s: bad directory descriptor %d",
                                                    t->display, dirfd);
                        return fc_error_set(e, r, "%s: %s", t->display, strerror(r));
                }
        }
        r = stat_fd(fd, &stx);
        if (r < 0) {
                close(fd);
                return fc_error_set(e, -r, "%s: cannot stat: %s", t->display, strerror(-r));
        }
        if (S_ISDIR(stx.stx_mode) && *pathname && !(atflags & AT_NO_AUTOMOUNT) &&
            (stx.stx_attributes_mask & STATX_ATTR_AUTOMOUNT) &&
            (stx.stx_attributes & STATX_ATTR_AUTOMOUNT)) {
                /* An automount point: O_DIRECTORY makes the lookup mount it, as open(2) would. */
                int mounted = openat(fd, ".", O_PATH | O_CLOEXEC | O_DIRECTORY);
                if (mounted >= 0 && stat_fd(mounted, &stx) == 0) {
                        close(fd);
                        fd = mounted;
                } else if (mounted >= 0) {
                        close(mounted);
                }
        }
        t->fd = fd;
        t->stx = stx;
        return 0;
}

void fc_target_close(struct fc_target *t)
{
        if (t->fd >= 0)
                close(t->fd);
        t->fd = -1;
}

int fc_open_file_at(int dirfd, const char *name)
{
        const int base = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK;
        int fd = openat(dirfd, name, base | O_NOATIME);

        /* O_NOATIME is only for the owner (or CAP_FOWNER); the others update atime. */
        if (fd < 0 && errno == EPERM)
                fd = openat(dirfd, name, base);
        return fd < 0 ? -errno : fd;
}

int fc_target_open_data(const struct fc_target *t, struct fc_error *e)
{
        char proc[64];
        int fd, flags = O_RDONLY | O_CLOEXEC | O_NOCTTY;
        mode_t type = t->stx.stx_mode & S_IFMT;

        if (type != S_IFREG && type != S_IFDIR)
                return fc_error_set(e, EINVAL, "%s: is a %s; only regular files and directories "
                                    "have data to act on", t->display,
                                    fc_file_type_name(t->stx.stx_mode));
        if (type == S_IFDIR)
                flags |= O_DIRECTORY;
        /* Re-open the very object resolved, not whatever the name points to now. */
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", t->fd);
        fd = open(proc, flags | O_NOATIME);
        if (fd < 0 && errno == EPERM)
                fd = open(proc, flags);
        if (fd < 0) {
                int r = errno;
                if (r == ENOENT && access("/proc/self/fd", F_OK) < 0)
                        return fc_error_set(e, ENOENT, "%s: /proc is not mounted, so the object "
                                            "cannot be re-opened safely", t->display);
                return fc_error_set(e, r, "%s: cannot open for reading: %s", t->display,
                                    strerror(r));
        }
        return fd;
}
