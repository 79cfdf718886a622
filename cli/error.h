/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* error.h: an errno with the sentence that explains it, carried out of every layer. */
#pragma once

#include <stdarg.h>

#define FC_ERROR_TEXT_MAX 512

struct fc_error {
        int code;                      /* positive errno, 0 if none */
        char text[FC_ERROR_TEXT_MAX];
};

/* Record the error and return -code, so callers can `return fc_error_set(...)`. */
int fc_error_set(struct fc_error *e, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
