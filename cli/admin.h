/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * admin.h: fcachectl's commands on fcached itself rather than on a path:
 *   status                         one overview (fcached, fcache.ko, pins, volumes)
 *   volume list                    the volumes fcached runs
 *   volume add NAME FILE|-|KEY=VALUE...   a volume from a NAME.conf text
 *   volume remove NAME
 */
#pragma once

#include <stdbool.h>

/* Is @word the first word of one of these commands? */
bool fc_admin_command(const char *word);
/* Runs words[0..n); returns fcachectl's exit status (0, 1, 2). */
int fc_admin_run(char **words, int n, bool json, bool interactive);
