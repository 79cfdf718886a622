/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * command.h: the one parser of the fcache command grammar.
 *
 *   query cached|dirty|pinned [recursive] | query cache | query state
 *   query conflicts | query reintegration
 *   flush | flush volume | flush all | flush callbacks
 *   prefetch [recursive]
 *   pin [recursive] [priority N] [dry-run] | unpin [recursive]
 *   set cache-size SIZE | set cacheable on|off | set reserve SIZE | set cache NAME
 *   disconnect | reconnect [force]
 *
 * Used by libfcachectl, the CLI, and the daemon's D-Bus methods alike.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

enum fc_op {
        FC_OP_QUERY_CACHED,
        FC_OP_QUERY_DIRTY,
        FC_OP_QUERY_PINNED,
        FC_OP_QUERY_CACHE,
        FC_OP_QUERY_STATE,
        FC_OP_QUERY_CONFLICTS,
        FC_OP_QUERY_REINTEGRATION,
        FC_OP_FLUSH,
        FC_OP_FLUSH_VOLUME,
        FC_OP_FLUSH_ALL,
        FC_OP_FLUSH_CALLBACKS,
        FC_OP_PREFETCH,
        FC_OP_PIN,
        FC_OP_UNPIN,
        FC_OP_SET_CACHE_SIZE,
        FC_OP_SET_CACHEABLE,
        FC_OP_SET_RESERVE,
        FC_OP_SET_CACHE,
        FC_OP_DISCONNECT,
        FC_OP_RECONNECT,
        FC_OP_SYNC,
        FC_OP_COUNT,
};

/* Modifier words; each op allows a subset. */
#define FC_MOD_RECURSIVE 0x1u
#define FC_MOD_PRIORITY 0x2u
#define FC_MOD_DRY_RUN 0x4u
#define FC_MOD_FORCE 0x8u

#define FC_PRIORITY_MIN 0
#define FC_PRIORITY_MAX 1000
#define FC_PRIORITY_DEFAULT 500
#define FC_CACHE_NAME_MAX 64

struct fc_command {
        enum fc_op op;
        unsigned int mods;      /* FC_MOD_* given */
        int priority;           /* pin: FC_PRIORITY_DEFAULT unless given */
        uint64_t size;          /* set cache-size, set reserve: bytes */
        bool on;                /* set cacheable */
        char name[FC_CACHE_NAME_MAX + 1]; /* set cache */
};

/* Parse a whole command string. Returns 0, or -EINVAL with e naming the bad word. */
int fc_command_parse(const char *text, struct fc_command *out, struct fc_error *e);

/*
 * Parse the longest command at the start of words[0..n); *consumed is set
 * to the number of words it used (the CLI takes the rest as paths).
 */
int fc_command_parse_words(char *const *words, int n, struct fc_command *out, int *consumed,
                           struct fc_error *e);

/* Canonical text of a command ("pin recursive priority 7"); parses back to the same command. */
int fc_command_format(const struct fc_command *c, char *buf, size_t len);

/* "query cached", "flush volume", ...: the op's words. */
const char *fc_op_name(enum fc_op op);

/* Parse "10G", "512MiB", "4096": binary units. Returns 0 or -EINVAL/-ERANGE. */
int fc_parse_size(const char *s, uint64_t *out);
