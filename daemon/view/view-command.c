/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-command.c: maps the project's command grammar (cli/command.h, the one
 * parser) onto what a volume's control socket serves.  Commands a volume does
 * not serve yet (query dirty, ...) parse but answer EOPNOTSUPP.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "command.h"
#include "view-command.h"

int view_command_parse(const char *cmd, struct view_command *out, char *err, size_t errlen)
{
        struct view_command c = { 0 };
        struct fc_command fc;
        struct fc_error e = { 0 };
        int r = fc_command_parse(cmd, &fc, &e);

        if (r < 0) {
                snprintf(err, errlen, "%s", e.text[0] ? e.text : strerror(-r));
                return r;
        }
        c.recursive = fc.mods & FC_MOD_RECURSIVE;
        c.dry_run = fc.mods & FC_MOD_DRY_RUN;
        c.force = fc.mods & FC_MOD_FORCE;
        c.priority = fc.priority;
        c.size = fc.size;
        c.on = fc.on;
        switch (fc.op) {
        case FC_OP_QUERY_CACHED: c.verb = VERB_QUERY_CACHED; break;
        case FC_OP_QUERY_CACHE: c.verb = VERB_QUERY_CACHE; break;
        case FC_OP_QUERY_PINNED: c.verb = VERB_QUERY_PINNED; break;
        case FC_OP_QUERY_STATE: c.verb = VERB_QUERY_STATE; break;
        case FC_OP_FLUSH: c.verb = VERB_FLUSH; break;
        case FC_OP_FLUSH_VOLUME:
        case FC_OP_FLUSH_ALL: c.verb = VERB_FLUSH_VOLUME; break;
        case FC_OP_PIN: c.verb = VERB_PIN; break;
        case FC_OP_UNPIN: c.verb = VERB_UNPIN; break;
        case FC_OP_SET_CACHEABLE: c.verb = VERB_SET_CACHEABLE; break;
        case FC_OP_SET_CACHE_SIZE: c.verb = VERB_SET_CACHE_SIZE; break;
        case FC_OP_SET_RESERVE: c.verb = VERB_SET_RESERVE; break;
        case FC_OP_DISCONNECT: c.verb = VERB_DISCONNECT; break;
        case FC_OP_RECONNECT: c.verb = VERB_RECONNECT; break;
        case FC_OP_QUERY_REINTEGRATION: c.verb = VERB_QUERY_REINTEGRATION; break;
        case FC_OP_PREFETCH: c.verb = VERB_PREFETCH; break;
        default:
                snprintf(err, errlen, "'%s' is not served by a volume yet", fc_op_name(fc.op));
                return -EOPNOTSUPP;
        }
        *out = c;
        return 0;
}
