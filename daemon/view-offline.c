/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-offline.c: disconnected operation of a view: its operation log
 * (oplog.h) and the switches between online, offline and reintegrating.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "view.h"

int view_oplog_open(struct view *v)
{
        struct oplog_options opts = OPLOG_OPTIONS_INIT;
        struct oplog_version root;
        struct stat st;
        char *dir;
        int r;

        pthread_mutex_init(&v->offline_lock, NULL);
        v->state = VIEW_ONLINE;
        v->mirror_fd = -1;
        /* Reserve is the room kept for offline edits: the log may use it all. */
        opts.max_bytes = v->cfg->reserve;
        dir = g_build_filename(v->cfg->cache_dir, "offline", NULL);
        r = oplog_open(&v->oplog, dir, &opts);
        if (r < 0) {
                log_error("Failed to open the offline log in %s: %s", dir, strerror(-r));
                g_free(dir);
                return r;
        }
        g_free(dir);
        if (fstat(v->root_fd, &st) < 0)
                return -errno;
        oplog_version_from_stat(&root, &st);
        r = oplog_set_root(v->oplog, &root);
        if (r < 0)
                log_error("Failed to record the volume root in the offline log: %s",
                          strerror(-r));
        return r;
}
