/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * oplog-snapshot.c: a private copy of a log, for a dry run that must not
 * hold the log (and the lock the view keeps it under) while it waits on the
 * server.
 *
 * The copy is the database as of now (VACUUM INTO), hard links to the
 * content copies, the replay journal's bytes, and a symbolic link to the
 * log's base store (content-addressed: what the copy adds there is
 * collected as any unreferenced base).  Opened with oplog_open(), it is a
 * log of its own; nothing done to it reaches the original.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oplog-internal.h"

static int link_content(struct oplog *log, int dfd)
{
        int src = openat(log->content_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;
        struct dirent *de;
        DIR *d;

        if (mkdirat(dfd, "content", 0700) < 0)
                r = -errno;
        if (src < 0 || r < 0) {
                if (src >= 0)
                        close(src);
                return r < 0 ? r : -errno;
        }
        d = fdopendir(src);
        if (!d) {
                close(src);
                return -errno;
        }
        while (r == 0 && (de = readdir(d))) {
                char to[PATH_MAX];

                if (de->d_name[0] == '.')
                        continue;
                snprintf(to, sizeof(to), "content/%s", de->d_name);
                if (linkat(dirfd(d), de->d_name, dfd, to, 0) < 0 && errno != ENOENT)
                        r = -errno;
        }
        closedir(d);
        return r;
}

static int copy_journal(struct oplog *log, int dfd)
{
        char buf[65536];
        int in = openat(log->dir_fd, "replay.journal", O_RDONLY | O_CLOEXEC), out, r = 0;
        ssize_t n;

        if (in < 0)
                return errno == ENOENT ? 0 : -errno;
        out = openat(dfd, "replay.journal", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (out < 0) {
                r = -errno;
                close(in);
                return r;
        }
        while ((n = read(in, buf, sizeof(buf))) > 0)
                if (write(out, buf, (size_t)n) != n) {
                        r = -EIO;
                        break;
                }
        if (n < 0)
                r = -errno;
        close(in);
        close(out);
        return r;
}

int oplog_snapshot(struct oplog *log, const char *dir)
{
        char *sql, *bases;
        int dfd, r;

        if (!log || !dir)
                return -EINVAL;
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return -errno;
        sql = sqlite3_mprintf("VACUUM INTO '%q/log.db'", dir);
        r = sql ? oplog_exec(log, sql) : -ENOMEM;
        sqlite3_free(sql);
        if (r == 0)
                r = link_content(log, dfd);
        if (r == 0)
                r = copy_journal(log, dfd);
        if (r == 0) {
                if (asprintf(&bases, "%s/bases", log->dir) < 0)
                        r = -ENOMEM;
                else if (symlinkat(bases, dfd, "bases") < 0)
                        r = -errno;
                if (r != -ENOMEM)
                        free(bases);
        }
        close(dfd);
        return r;
}
