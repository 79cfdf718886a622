/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-metered.c: whether the view's connection is metered, as fcached
 * (which follows NetworkManager's Metered) tells it on the control socket:
 *   set metered yes|no     metered=yes|no, hoard=paused|running
 * With Metered=pause (the default) the hoard walks wait while it is metered;
 * changes still go to the server, and reads of what is not cached still
 * fetch it: only the background fetching stops.
 */
#include <errno.h>
#include <string.h>

#include "view.h"

bool view_hoard_paused(struct view *v)
{
        return __atomic_load_n(&v->metered, __ATOMIC_ACQUIRE) && !v->cfg->metered_ignore;
}

bool metered_execute(struct view *v, const char *cmdline, struct ctl_out *out, GString *err,
                     int *status)
{
        const char *word;

        while (*cmdline == ' ')
                cmdline++;
        if (strncmp(cmdline, "set metered", 11) || (cmdline[11] && cmdline[11] != ' '))
                return false;
        word = cmdline + 11;
        while (*word == ' ')
                word++;
        if (strcmp(word, "yes") && strcmp(word, "no")) {
                g_string_printf(err, "set metered: '%s' is neither yes nor no", word);
                *status = -EINVAL;
                return true;
        }
        if (__atomic_exchange_n(&v->metered, word[0] == 'y', __ATOMIC_ACQ_REL) != (word[0] == 'y'))
                log_info("The connection is %smetered: hoard walks %s", word[0] == 'y' ? "" : "not ",
                         view_hoard_paused(v) ? "pause" :
                         word[0] == 'y' ? "go on (Metered=ignore)" : "resume");
        view_writeback_kick(v);        /* WriteBack=auto follows it */
        out_kv(out, "metered=%s", word);
        out_kv(out, "hoard=%s", view_hoard_paused(v) ? "paused" : "running");
        *status = 0;
        return true;
}
