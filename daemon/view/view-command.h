/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-command.h: the subset of the fcache command grammar that a volume's
 * control socket serves, parsed by libfcachectl's one parser (cli/command.h).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum view_verb {
        VERB_QUERY_CACHED,
        VERB_QUERY_CACHE,
        VERB_QUERY_PINNED,
        VERB_QUERY_STATE,
        VERB_FLUSH,             /* object (file, or directory subtree) */
        VERB_FLUSH_VOLUME,      /* flush volume, flush all */
        VERB_PIN,
        VERB_UNPIN,
        VERB_SET_CACHEABLE,
        VERB_SET_CACHE_SIZE,
        VERB_SET_RESERVE,
        VERB_DISCONNECT,
        VERB_RECONNECT,
        VERB_QUERY_REINTEGRATION,
        VERB_PREFETCH,
};

struct view_command {
        enum view_verb verb;
        bool recursive;
        bool dry_run;
        bool force;             /* reconnect force */
        bool on;                /* set cacheable */
        int priority;           /* pin: 0-1000, default 500 (FC_PRIORITY_*) */
        uint64_t size;          /* set cache-size / reserve */
};

/*
 * Parses cmd.  Returns 0; -EINVAL with a message naming the wrong word in
 * err; -EOPNOTSUPP for grammar a volume does not serve (yet).
 */
int view_command_parse(const char *cmd, struct view_command *out, char *err, size_t errlen);
