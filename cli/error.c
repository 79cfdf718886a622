/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* error.c: filling struct fc_error. */
#include <stdio.h>

#include "error.h"

int fc_error_set(struct fc_error *e, int code, const char *fmt, ...)
{
        va_list ap;

        if (e) {
                e->code = code;
                va_start(ap, fmt);
                vsnprintf(e->text, sizeof(e->text), fmt, ap);
                va_end(ap);
        }
        return -code;
}
