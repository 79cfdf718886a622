/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-log.h: fcache-view's log lines, at syslog priorities (the bottom
 * layer: it calls nothing of the view).
 */
#pragma once

#define log_error(fmt, ...) view_log(3, fmt, ##__VA_ARGS__)
#define log_warn(fmt, ...)  view_log(4, fmt, ##__VA_ARGS__)
#define log_info(fmt, ...)  view_log(6, fmt, ##__VA_ARGS__)
#define log_debug(fmt, ...) view_log(7, fmt, ##__VA_ARGS__)

/* One line "fcache-view[NAME ROLE]: ..." on stderr, if level <= view_log_level. */
void view_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The volume's name and the process's part (" holder", " worker"), for the lines. */
void view_log_identify(const char *name, const char *role);
extern int view_log_level;
