/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-command.c: libFuzzer target for the command parser.
 *
 * Any input either fails with EINVAL and a message, or parses; a parsed
 * command formats to text that parses back to the same command.
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "command.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct fc_command a, b;
        struct fc_error e = { 0 };
        char text[256];
        char *s = malloc(size + 1);

        if (!s)
                return 0;
        memcpy(s, data, size);
        s[size] = '\0';
        int r = fc_command_parse(s, &a, &e);
        if (r < 0) {
                assert(r == -EINVAL && e.code == EINVAL && e.text[0]);
        } else {
                assert(fc_command_format(&a, text, sizeof(text)) > 0);
                assert(fc_command_parse(text, &b, &e) == 0);
                assert(memcmp(&a, &b, sizeof(a)) == 0);
        }
        free(s);
        return 0;
}
