// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * view-ctl-out.c: a control request's results, as the key=value pairs of
 * its reply (ctlmsg.h), built by whichever part of the view answers it.
 */
#include <stdarg.h>
#include <string.h>

#include <glib.h>

#include "view.h"

void out_kv(struct ctl_out *o, const char *fmt, ...)
{
        va_list ap;
        char *text, *eq;

        va_start(ap, fmt);
        text = g_strdup_vprintf(fmt, ap);
        va_end(ap);
        eq = strchr(text, '=');
        if (eq && eq != text) {
                *eq = 0;
                ctlmsg_put_kv(&o->msg, text, eq + 1);
        }
        g_free(text);
}

void out_lines(struct ctl_out *o, const char *text)
{
        char **lines = g_strsplit(text, "\n", -1);

        for (char **l = lines; *l; l++)
                if (**l)
                        out_kv(o, "%s", *l);
        g_strfreev(lines);
}
