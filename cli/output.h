/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* output.h: the CLI's renderings of results: aligned tables for people, JSON for programs. */
#pragma once

#include <stdbool.h>
#include <stdio.h>

#include "command.h"

struct fc_pair {
        char *key;
        char *value; /* unescaped */
};

/* One target's outcome. */
struct fc_outcome {
        const char *path;
        int err;              /* 0 or errno */
        char *message;        /* error text when err != 0 */
        struct fc_pair *pairs;
        size_t count;
};

/* Split "k=v\n" lines into pairs, in place in text. Returns 0 or -ENOMEM. */
int fc_outcome_parse(struct fc_outcome *o, char *text);
void fc_outcome_free(struct fc_outcome *o);
const char *fc_outcome_get(const struct fc_outcome *o, const char *key);

/* Tables through table.h: 0, or -1 when --output names a column the table lacks. */
int fc_print_table(FILE *f, const struct fc_command *c, const struct fc_outcome *o, size_t n);
void fc_print_json(FILE *f, const char *command, const struct fc_outcome *o, size_t n);

/* A JSON string; bytes that are not valid UTF-8 become U+FFFD. */
void fc_json_str(FILE *f, const char *s);

/* "1.5 GiB"; buf of at least 16 bytes. */
void fc_format_bytes(char *buf, size_t len, unsigned long long bytes);
