/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * polkit-agent.c: pkttyagent for the calling terminal (polkit-agent.h).
 *
 * It is registered for this very process (--process), not for a login
 * session: that works without logind, and it never takes the place of the
 * graphical agent the session has for its other processes.  Not --fallback
 * (as systemctl, whose agent is the session's): polkitd consults a fallback
 * agent only once it found a session for the caller, so without logind it
 * would never ask.  --notify-fd tells when it is registered.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "polkit-agent.h"

#define PKTTYAGENT "/usr/bin/pkttyagent"
#define REGISTER_WAIT_MS 10000

pid_t fc_polkit_agent_open(void)
{
        char fdarg[16], pidarg[32];
        int notify[2];
        pid_t self = getpid(), pid;

        if (!isatty(STDIN_FILENO) || access(PKTTYAGENT, X_OK) < 0)
                return 0;
        if (pipe2(notify, O_CLOEXEC) < 0)
                return 0;
        pid = fork();
        if (pid < 0) {
                close(notify[0]);
                close(notify[1]);
                return 0;
        }
        if (pid == 0) {
                /* The child keeps only the write end, as the fd it is told about. */
                int fd = fcntl(notify[1], F_DUPFD, 3);

                if (fd < 0)
                        _exit(127);
                snprintf(fdarg, sizeof(fdarg), "%d", fd);
                snprintf(pidarg, sizeof(pidarg), "%d", (int)self);
                execl(PKTTYAGENT, PKTTYAGENT, "--notify-fd", fdarg, "--process", pidarg,
                      (char *)NULL);
                _exit(127);
        }
        close(notify[1]);
        /* It closes the fd once it is registered (or dies): either way, on with the call. */
        for (;;) {
                struct pollfd p = { .fd = notify[0], .events = POLLIN };
                char c;
                int r = poll(&p, 1, REGISTER_WAIT_MS);

                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0 || read(notify[0], &c, 1) <= 0)
                        break;
        }
        close(notify[0]);
        return pid;
}

void fc_polkit_agent_close(pid_t pid)
{
        if (pid <= 0)
                return;
        kill(pid, SIGTERM);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
}
