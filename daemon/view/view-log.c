// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * view-log.c: fcache-view's log lines on stderr, which is the journal
 * under fcached.service.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "view-log.h"

int view_log_level = 6;
static const char *log_name = "fcache-view";
static const char *log_role = "";

void view_log_identify(const char *name, const char *role)
{
        if (name)
                log_name = name;
        if (role)
                log_role = role;
}

/* "<N>" when stderr is the journal (its dev:ino in $JOURNAL_STREAM), so that the
 * journal files each line at its syslog priority; "" on a terminal or a file. */
static const char *journal_prefix(int level)
{
        static const char *const prefixes[] = { "<0>", "<1>", "<2>", "<3>", "<4>", "<5>",
                                                "<6>", "<7>" };
        static int journal = -1;
        unsigned long long dev, ino;
        const char *e;
        struct stat st;

        if (journal < 0) {
                e = getenv("JOURNAL_STREAM");
                journal = e && sscanf(e, "%llu:%llu", &dev, &ino) == 2 &&
                          fstat(STDERR_FILENO, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
        }
        return journal ? prefixes[level < 0 ? 0 : level > 7 ? 7 : level] : "";
}

void view_log(int level, const char *fmt, ...)
{
        char buf[1024];
        va_list ap;
        int saved = errno;

        if (level > view_log_level)
                return;
        va_start(ap, fmt);
        errno = saved;  /* keep %m meaningful */
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        fprintf(stderr, "%sfcache-view[%s%s]: %s\n", journal_prefix(level), log_name, log_role,
                buf);
        errno = saved;
}
