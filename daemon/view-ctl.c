/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-ctl.c: fcache-view-ctl, a tiny client of a volume's control socket
 * (for tests and debugging; fcached speaks the same protocol).
 *
 *   fcache-view-ctl CACHEDIR|SOCKET 'COMMAND' [PATH]
 *
 * Prints the key=value lines of the answer; exits 0 on status=0, else
 * prints the error to stderr and exits 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char *line = NULL;
        size_t cap = 0;
        struct stat st;
        int fd, status = -EIO;
        FILE *f;

        if (argc < 3 || argc > 4 || strchr(argv[2], '\n') || strchr(argv[2], '\t') ||
            (argc == 4 && strchr(argv[3], '\n'))) {
                fprintf(stderr, "Usage: fcache-view-ctl CACHEDIR|SOCKET 'COMMAND' [PATH]\n");
                return 2;
        }
        if (stat(argv[1], &st) == 0 && S_ISDIR(st.st_mode))
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/control.sock", argv[1]);
        else
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", argv[1]);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                fprintf(stderr, "fcache-view-ctl: cannot connect to %s: %s\n", sa.sun_path,
                        strerror(errno));
                return 1;
        }
        f = fdopen(fd, "r+");
        if (!f)
                return 1;
        fprintf(f, "%s%s%s\n", argv[2], argc == 4 ? "\t" : "", argc == 4 ? argv[3] : "");
        fflush(f);
        while (getline(&line, &cap, f) > 0) {
                if (!strcmp(line, "\n"))
                        break;
                if (!strncmp(line, "status=", 7))
                        status = atoi(line + 7);
                else if (!strncmp(line, "error=", 6))
                        fprintf(stderr, "fcache-view-ctl: %s", line + 6);
                else
                        fputs(line, stdout);
        }
        free(line);
        fclose(f);
        return status == 0 ? 0 : 1;
}
