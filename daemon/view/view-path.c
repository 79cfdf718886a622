// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * view-path.c: the path of an object the view holds by descriptor, relative
 * to a tree's root (the control socket's, the store's and the mirror's
 * paths are volume paths), and whether a path is an fcache volume's mount.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mounts.h"
#include "view.h"

char *view_rel_path(int root_fd, int dfd, const char *name)
{
        char p[64], root[PATH_MAX], buf[PATH_MAX];
        ssize_t n, rl;

        snprintf(p, sizeof(p), "/proc/self/fd/%d", root_fd);
        rl = readlink(p, root, sizeof(root) - 1);
        snprintf(p, sizeof(p), "/proc/self/fd/%d", dfd);
        n = readlink(p, buf, sizeof(buf) - 1);
        if (rl < 0 || n < 0)
                return NULL;
        root[rl] = 0;
        buf[n] = 0;
        if (rl == 1)
                rl = 0; /* the root is "/" */
        if (strncmp(buf, root, (size_t)rl) || (buf[rl] && buf[rl] != '/'))
                return NULL;
        if (name && *name)
                return g_build_filename(buf[rl] ? buf + rl + 1 : ".", name, NULL);
        return g_strdup(buf[rl] ? buf + rl + 1 : ".");
}

int view_mount_find(const char *path, dev_t *dev)
{
        struct fc_mount_table mt;
        int r = fc_mount_table_read(&mt);

        if (r < 0)
                return r;
        r = -ENOENT;
        /* A later line is a mount on top of an earlier one. */
        for (size_t i = 0; i < mt.count; i++) {
                if (strcmp(mt.mounts[i].mount_point, path))
                        continue;
                r = strcmp(mt.mounts[i].fs_type, "fuse.fcache") ? -ENOENT : 0;
                if (r == 0)
                        *dev = mt.mounts[i].dev;
        }
        fc_mount_table_free(&mt);
        return r;
}
