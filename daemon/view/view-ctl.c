/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-ctl.c: fcache-view-ctl, a tiny client of a volume's control socket
 * (for tests and debugging; fcached speaks the same protocol, proto/ctlmsg.h).
 *
 *   fcache-view-ctl CACHEDIR|SOCKET 'COMMAND' [PATH]
 *   fcache-view-ctl CACHEDIR|SOCKET 'job COMMAND' [PATH]   (progress= lines first)
 *   fcache-view-ctl CACHEDIR|SOCKET 'cancel N'
 *
 * PATH is opened here (O_PATH, the last symlink not followed) and its
 * descriptor is the request's target: an absolute path as it is, a relative
 * one under the volume's mountpoint.  Prints the key=value results, one a
 * line, with a backslash, newline, carriage return or tab in a value written
 * \\, \n, \r, \t; exits 0 on status 0, else prints the error and
 * "(status -ERRNO)" to stderr and exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctlmsg.h"

static void print_escaped(const char *s)
{
        for (; *s; s++) {
                switch (*s) {
                case '\\': fputs("\\\\", stdout); break;
                case '\n': fputs("\\n", stdout); break;
                case '\r': fputs("\\r", stdout); break;
                case '\t': fputs("\\t", stdout); break;
                default: putchar(*s); break;
                }
        }
}

static void on_progress(void *userdata, uint64_t done, uint64_t total, uint64_t bytes)
{
        printf("progress=%" PRIu64 " %" PRIu64 " %" PRIu64 "\n", done, total, bytes);
        fflush(stdout);
}

/* The volume's mountpoint, from `query state`; malloc()ed, or NULL. */
static char *mountpoint_of(const char *sock)
{
        struct ctl_call c = { .command = "query state", .target_fd = -1 };
        struct ctl_answer a;
        const char *mp;
        char *r = NULL;

        if (ctl_call(sock, &c, &a) == 0 && (mp = ctl_answer_get(&a, "mountpoint")))
                r = strdup(mp);
        ctl_answer_clear(&a);
        return r;
}

static int open_target(const char *sock, const char *path)
{
        char *mp, *full;
        int fd;

        if (path[0] == '/')
                return open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        mp = mountpoint_of(sock);
        if (!mp) {
                errno = ENOENT;
                return -1;
        }
        if (asprintf(&full, "%s/%s", mp, path) < 0) {
                free(mp);
                return -1;
        }
        fd = open(full, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        free(full);
        free(mp);
        return fd;
}

int main(int argc, char **argv)
{
        struct ctl_call c = { .target_fd = -1, .on_progress = on_progress };
        struct ctl_answer a;
        char sock[4096];
        struct stat st;
        const char *cmd;
        int r;

        if (argc < 3 || argc > 4) {
                fprintf(stderr, "Usage: fcache-view-ctl CACHEDIR|SOCKET 'COMMAND' [PATH]\n");
                return 2;
        }
        if (stat(argv[1], &st) == 0 && S_ISDIR(st.st_mode))
                snprintf(sock, sizeof(sock), "%s/control.sock", argv[1]);
        else
                snprintf(sock, sizeof(sock), "%s", argv[1]);
        cmd = argv[2];
        if (!strncmp(cmd, "cancel ", 7)) {
                char *end;

                c.has_cancel = true;
                c.cancel = strtoull(cmd + 7, &end, 10);
                if (!cmd[7] || *end) {
                        fprintf(stderr, "fcache-view-ctl: 'cancel' takes a job number\n");
                        return 2;
                }
        } else if (!strncmp(cmd, "job ", 4)) {
                c.run_as_job = true;
                c.command = cmd + 4;
        } else {
                c.command = cmd;
        }
        if (argc == 4) {
                c.target_fd = open_target(sock, argv[3]);
                if (c.target_fd < 0) {
                        fprintf(stderr, "fcache-view-ctl: cannot open %s: %s\n", argv[3],
                                strerror(errno));
                        return 1;
                }
        }
        r = ctl_call(sock, &c, &a);
        if (c.target_fd >= 0)
                close(c.target_fd);
        for (size_t i = 0; i < a.n; i++) {
                printf("%s=", a.keys[i]);
                print_escaped(a.values[i]);
                putchar('\n');
        }
        if (r < 0 && a.answered)
                fprintf(stderr, "fcache-view-ctl: %s (status %d)\n",
                        a.error ? a.error : strerror(-r), r);
        else if (r < 0)
                fprintf(stderr, "fcache-view-ctl: no answer on the control socket %s: %s\n",
                        sock, strerror(-r));
        ctl_answer_clear(&a);
        return r == 0 ? 0 : 1;
}
