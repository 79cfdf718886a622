/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-conflicts.c: the control socket's conflict requests.
 */
#include "view.h"

bool conflicts_execute(struct view *v, const char *cmdline, const char *path, GString *out,
                       GString *err, int *status)
{
        return false;
}
