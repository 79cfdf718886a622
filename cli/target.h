/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * target.h: resolving the object a command acts on, without opening it
 * for I/O (O_PATH), honouring AT_SYMLINK_NOFOLLOW, AT_NO_AUTOMOUNT and
 * AT_EMPTY_PATH as the *at() system calls do.
 */
#pragma once

#include <fcntl.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "error.h"

struct fc_target {
        int fd;                 /* O_PATH descriptor of the object; owned */
        struct statx stx;       /* type, size, device, inode, mount id */
        const char *display;    /* the name to use in messages */
};

#define FC_TARGET_INIT { .fd = -1 }

int fc_target_resolve(int dirfd, const char *pathname, unsigned int atflags,
                      struct fc_target *t, struct fc_error *e);
void fc_target_close(struct fc_target *t);

/* "regular", "directory", "symlink", "fifo", "socket", "char-device", "block-device". */
const char *fc_file_type_name(mode_t mode);

/*
 * Open the resolved object for data (O_RDONLY), for the commands that need
 * it. Only regular files and directories are ever opened: opening a device
 * node runs its driver, and a fifo blocks.
 */
int fc_target_open_data(const struct fc_target *t, struct fc_error *e);

/* Open a regular file below dirfd for reading its data (no atime update if allowed). */
int fc_open_file_at(int dirfd, const char *name);
