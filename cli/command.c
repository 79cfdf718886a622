/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * command.c: the command grammar as a table, and a parser that walks it.
 *
 * Each op is the words that name it, the modifiers it accepts and the kind
 * of argument it takes. Errors name the word that was wrong and what was
 * expected there, because the person reading them typed the command.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command.h"
#include "fcachectl.h"

enum fc_arg { ARG_NONE, ARG_SIZE, ARG_BOOL, ARG_NAME };

struct op_spec {
        const char *verb;
        const char *object;     /* NULL: the verb alone names the op */
        unsigned int mods;      /* FC_MOD_* allowed */
        enum fc_arg arg;
};

static const struct op_spec ops[FC_OP_COUNT] = {
        [FC_OP_QUERY_CACHED] = { "query", "cached", FC_MOD_RECURSIVE, ARG_NONE },
        [FC_OP_QUERY_DIRTY] = { "query", "dirty", FC_MOD_RECURSIVE, ARG_NONE },
        [FC_OP_QUERY_PINNED] = { "query", "pinned", FC_MOD_RECURSIVE, ARG_NONE },
        [FC_OP_QUERY_CACHE] = { "query", "cache", 0, ARG_NONE },
        [FC_OP_QUERY_STATE] = { "query", "state", 0, ARG_NONE },
        [FC_OP_QUERY_CONFLICTS] = { "query", "conflicts", 0, ARG_NONE },
        [FC_OP_QUERY_REINTEGRATION] = { "query", "reintegration", 0, ARG_NONE },
        [FC_OP_FLUSH] = { "flush", NULL, 0, ARG_NONE },
        [FC_OP_FLUSH_VOLUME] = { "flush", "volume", 0, ARG_NONE },
        [FC_OP_FLUSH_ALL] = { "flush", "all", 0, ARG_NONE },
        [FC_OP_FLUSH_CALLBACKS] = { "flush", "callbacks", 0, ARG_NONE },
        [FC_OP_PREFETCH] = { "prefetch", NULL, FC_MOD_RECURSIVE, ARG_NONE },
        [FC_OP_PIN] = { "pin", NULL, FC_MOD_RECURSIVE | FC_MOD_PRIORITY | FC_MOD_DRY_RUN, ARG_NONE },
        [FC_OP_UNPIN] = { "unpin", NULL, FC_MOD_RECURSIVE, ARG_NONE },
        [FC_OP_SET_CACHE_SIZE] = { "set", "cache-size", 0, ARG_SIZE },
        [FC_OP_SET_CACHEABLE] = { "set", "cacheable", 0, ARG_BOOL },
        [FC_OP_SET_RESERVE] = { "set", "reserve", 0, ARG_SIZE },
        [FC_OP_SET_CACHE] = { "set", "cache", 0, ARG_NAME },
        [FC_OP_DISCONNECT] = { "disconnect", NULL, 0, ARG_NONE },
        [FC_OP_RECONNECT] = { "reconnect", NULL, FC_MOD_FORCE, ARG_NONE },
        [FC_OP_SYNC] = { "sync", NULL, 0, ARG_NONE },
};

static const char *const mod_words[] = { "recursive", "priority", "dry-run", "force" };

const char *fc_op_name(enum fc_op op)
{
        static const char *const names[FC_OP_COUNT] = {
                [FC_OP_QUERY_CACHED] = "query cached",
                [FC_OP_QUERY_DIRTY] = "query dirty",
                [FC_OP_QUERY_PINNED] = "query pinned",
                [FC_OP_QUERY_CACHE] = "query cache",
                [FC_OP_QUERY_STATE] = "query state",
                [FC_OP_QUERY_CONFLICTS] = "query conflicts",
                [FC_OP_QUERY_REINTEGRATION] = "query reintegration",
                [FC_OP_FLUSH] = "flush",
                [FC_OP_FLUSH_VOLUME] = "flush volume",
                [FC_OP_FLUSH_ALL] = "flush all",
                [FC_OP_FLUSH_CALLBACKS] = "flush callbacks",
                [FC_OP_PREFETCH] = "prefetch",
                [FC_OP_PIN] = "pin",
                [FC_OP_UNPIN] = "unpin",
                [FC_OP_SET_CACHE_SIZE] = "set cache-size",
                [FC_OP_SET_CACHEABLE] = "set cacheable",
                [FC_OP_SET_RESERVE] = "set reserve",
                [FC_OP_SET_CACHE] = "set cache",
                [FC_OP_DISCONNECT] = "disconnect",
                [FC_OP_RECONNECT] = "reconnect",
                [FC_OP_SYNC] = "sync",
        };

        return (unsigned)op < FC_OP_COUNT ? names[op] : "?";
}

/* "a, b or c" of the objects a verb takes, for error messages. */
static void list_objects(const char *verb, char *buf, size_t len)
{
        size_t n = 0, count = 0, seen = 0;

        for (int i = 0; i < FC_OP_COUNT; i++)
                if (!strcmp(ops[i].verb, verb) && ops[i].object)
                        count++;
        buf[0] = '\0';
        for (int i = 0; i < FC_OP_COUNT && n < len; i++) {
                if (strcmp(ops[i].verb, verb) || !ops[i].object)
                        continue;
                seen++;
                n += snprintf(buf + n, len - n, "%s%s",
                              seen == 1 ? "" : seen == count ? " or " : ", ", ops[i].object);
        }
}

int fc_parse_size(const char *s, uint64_t *out)
{
        static const char units[] = "KMGTPE";
        unsigned long long v;
        unsigned shift = 0;
        const char *u;
        char *end;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno == ERANGE)
                return -ERANGE;
        while (*end == ' ' || *end == '\t')     /* "20 G" in a configuration file */
                end++;
        /* Powers of 1024, any case: K, KiB; B alone is bytes.  "KB" is refused:
         * it means 1000 to some and 1024 to others. */
        u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
        if (u) {
                shift = 10 * (unsigned)(u - units + 1);
                end++;
                if (*end == 'i' || *end == 'I') {
                        if (toupper((unsigned char)end[1]) != 'B')
                                return -EINVAL;
                        end += 2;
                }
        } else if (*end == 'B' || *end == 'b') {
                end++;
        }
        if (*end)
                return -EINVAL;
        if (shift && v > (UINT64_MAX >> shift))
                return -ERANGE;
        *out = (uint64_t)v << shift;
        return 0;
}

static bool valid_cache_name(const char *s)
{
        size_t n = strlen(s);

        if (n == 0 || n > FC_CACHE_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || c == '.'))
                        return false;
        }
        return s[0] != '.';
}

static int parse_arg(enum fc_op op, const char *word, struct fc_command *c, struct fc_error *e)
{
        const char *name = fc_op_name(op);
        int r;

        switch (ops[op].arg) {
        case ARG_SIZE:
                r = fc_parse_size(word, &c->size);
                if (r == -ERANGE)
                        return fc_error_set(e, EINVAL, "%s: size '%s' is too large", name, word);
                if (r < 0)
                        return fc_error_set(e, EINVAL,
                                            "%s: '%s' is not a size (a number with an optional "
                                            "K, M, G, T or P suffix, powers of 1024)", name, word);
                return 0;
        case ARG_BOOL:
                if (!strcmp(word, "on"))
                        c->on = true;
                else if (!strcmp(word, "off"))
                        c->on = false;
                else
                        return fc_error_set(e, EINVAL, "%s: expected 'on' or 'off', got '%s'",
                                            name, word);
                return 0;
        case ARG_NAME:
                if (!valid_cache_name(word))
                        return fc_error_set(e, EINVAL,
                                            "%s: '%s' is not a cache name (1 to %d letters, digits, "
                                            "'_', '-' or '.', not starting with '.')",
                                            name, word, FC_CACHE_NAME_MAX);
                strcpy(c->name, word);
                return 0;
        case ARG_NONE:
                break;
        }
        return 0;
}

static int parse_priority(const char *word, int *out)
{
        char *end;
        long v;

        if (!word || *word < '0' || *word > '9')
                return -EINVAL;
        errno = 0;
        v = strtol(word, &end, 10);
        if (errno || *end || v < FC_PRIORITY_MIN || v > FC_PRIORITY_MAX)
                return -EINVAL;
        *out = (int)v;
        return 0;
}

/* Modifiers follow the op's words in any order, each at most once. */
static int parse_mods(enum fc_op op, char *const *w, int n, int i, struct fc_command *c,
                      int *consumed, bool need_all, struct fc_error *e)
{
        const char *name = fc_op_name(op);

        while (i < n) {
                unsigned int mod = 0;

                for (unsigned k = 0; k < sizeof(mod_words) / sizeof(mod_words[0]); k++)
                        if (!strcmp(w[i], mod_words[k]))
                                mod = 1u << k;
                if (!mod || !(ops[op].mods & mod)) {
                        if (!need_all)
                                break; /* the CLI's paths start here */
                        if (mod)
                                return fc_error_set(e, EINVAL, "%s: '%s' does not apply here",
                                                    name, w[i]);
                        return fc_error_set(e, EINVAL, "%s: unexpected word '%s'", name, w[i]);
                }
                if (c->mods & mod)
                        return fc_error_set(e, EINVAL, "%s: '%s' given twice", name, w[i]);
                c->mods |= mod;
                i++;
                if (mod == FC_MOD_PRIORITY) {
                        if (i >= n)
                                return fc_error_set(e, EINVAL, "%s: 'priority' needs a number "
                                                    "from %d to %d", name, FC_PRIORITY_MIN,
                                                    FC_PRIORITY_MAX);
                        if (parse_priority(w[i], &c->priority) < 0)
                                return fc_error_set(e, EINVAL, "%s: priority '%s' is not a number "
                                                    "from %d to %d", name, w[i], FC_PRIORITY_MIN,
                                                    FC_PRIORITY_MAX);
                        i++;
                }
        }
        *consumed = i;
        return 0;
}

static int parse_words(char *const *w, int n, struct fc_command *out, int *consumed,
                       bool need_all, struct fc_error *e)
{
        struct fc_command c = { .priority = FC_PRIORITY_DEFAULT };
        int op = -1, i = 0, r, used = 0;
        bool verb_known = false, has_objects = false, bare = false;
        char expected[160];

        if (n == 0)
                return fc_error_set(e, EINVAL, "empty command (expected query, flush, prefetch, "
                                    "pin, unpin, set, disconnect or reconnect)");
        for (int k = 0; k < FC_OP_COUNT; k++) {
                if (strcmp(ops[k].verb, w[0]))
                        continue;
                verb_known = true;
                if (ops[k].object)
                        has_objects = true;
                else
                        bare = true;
        }
        if (!verb_known)
                return fc_error_set(e, EINVAL, "unknown command '%s' (expected query, flush, "
                                    "prefetch, pin, unpin, set, disconnect or reconnect)", w[0]);
        i = 1;
        if (has_objects && n > 1) {
                for (int k = 0; k < FC_OP_COUNT; k++)
                        if (!strcmp(ops[k].verb, w[0]) && ops[k].object &&
                            !strcmp(ops[k].object, w[1]))
                                op = k;
                if (op >= 0)
                        i = 2;
        }
        if (op < 0 && bare)
                for (int k = 0; k < FC_OP_COUNT; k++)
                        if (!strcmp(ops[k].verb, w[0]) && !ops[k].object)
                                op = k;
        if (op < 0) {
                list_objects(w[0], expected, sizeof(expected));
                if (n == 1)
                        return fc_error_set(e, EINVAL, "%s: missing what to %s (expected %s)",
                                            w[0], w[0], expected);
                return fc_error_set(e, EINVAL, "%s: unknown word '%s' (expected %s)", w[0], w[1],
                                    expected);
        }
        c.op = op;
        if (ops[op].arg != ARG_NONE) {
                if (i >= n)
                        return fc_error_set(e, EINVAL, "%s: missing %s", fc_op_name(op),
                                            ops[op].arg == ARG_SIZE ? "SIZE" :
                                            ops[op].arg == ARG_BOOL ? "'on' or 'off'" : "NAME");
                r = parse_arg(op, w[i], &c, e);
                if (r < 0)
                        return r;
                i++;
        }
        r = parse_mods(op, w, n, i, &c, &used, need_all, e);
        if (r < 0)
                return r;
        *out = c;
        if (consumed)
                *consumed = used;
        return 0;
}

int fc_command_parse_words(char *const *words, int n, struct fc_command *out, int *consumed,
                           struct fc_error *e)
{
        return parse_words(words, n, out, consumed, false, e);
}

int fc_command_parse(const char *text, struct fc_command *out, struct fc_error *e)
{
        char buf[FCACHECTL_CMD_MAX + 1];
        char *words[16];
        int n = 0;
        size_t len;

        if (!text)
                return fc_error_set(e, EINVAL, "no command given");
        len = strnlen(text, FCACHECTL_CMD_MAX + 1);
        if (len > FCACHECTL_CMD_MAX)
                return fc_error_set(e, EINVAL, "command is longer than %d bytes",
                                    FCACHECTL_CMD_MAX);
        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char)text[i];
                if ((ch < 0x20 && ch != '\t') || ch >= 0x7f)
                        return fc_error_set(e, EINVAL, "command has a byte 0x%02x at offset %zu: "
                                            "only printable ASCII words are allowed", ch, i);
        }
        memcpy(buf, text, len + 1);
        for (char *save = NULL, *tok = strtok_r(buf, " \t", &save); tok;
             tok = strtok_r(NULL, " \t", &save)) {
                if (n == (int)(sizeof(words) / sizeof(words[0])))
                        return fc_error_set(e, EINVAL, "command has more than %d words: '%s' is "
                                            "one too many", n, tok);
                words[n++] = tok;
        }
        return parse_words(words, n, out, NULL, true, e);
}

int fc_command_format(const struct fc_command *c, char *buf, size_t len)
{
        char arg[FC_CACHE_NAME_MAX + 32] = "";
        int n;

        if ((unsigned)c->op >= FC_OP_COUNT)
                return -EINVAL;
        switch (ops[c->op].arg) {
        case ARG_SIZE:
                snprintf(arg, sizeof(arg), " %llu", (unsigned long long)c->size);
                break;
        case ARG_BOOL:
                snprintf(arg, sizeof(arg), " %s", c->on ? "on" : "off");
                break;
        case ARG_NAME:
                snprintf(arg, sizeof(arg), " %s", c->name);
                break;
        case ARG_NONE:
                break;
        }
        n = snprintf(buf, len, "%s%s%s", fc_op_name(c->op), arg,
                     c->mods & FC_MOD_RECURSIVE ? " recursive" : "");
        if (n >= 0 && (size_t)n < len && (c->mods & FC_MOD_PRIORITY))
                n += snprintf(buf + n, len - n, " priority %d", c->priority);
        if (n >= 0 && (size_t)n < len && (c->mods & FC_MOD_DRY_RUN))
                n += snprintf(buf + n, len - n, " dry-run");
        if (n >= 0 && (size_t)n < len && (c->mods & FC_MOD_FORCE))
                n += snprintf(buf + n, len - n, " force");
        if (n < 0 || (size_t)n >= len)
                return -ERANGE;
        return n;
}
