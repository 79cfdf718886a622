/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libfcachectl.c: fcachectl() and fcachectl_ex(), the public entry points.
 *
 * Parse, resolve the target, run through the router, hand the result out
 * under the getxattr-like size protocol. Errors keep their text in a
 * thread-local buffer for fcachectl_error().
 */
#include <errno.h>
#include <string.h>

#include "backend.h"
#include "fcachectl.h"

#define EXPORT __attribute__((visibility("default")))

static __thread char last_error[FC_ERROR_TEXT_MAX];

EXPORT const char *fcachectl_error(void)
{
        return last_error;
}

static int fail(const struct fc_error *e, const struct fcachectl_options *opts)
{
        memcpy(last_error, e->text, sizeof(last_error));
        if (opts && opts->error && opts->error_len) {
                strncpy(opts->error, e->text, opts->error_len - 1);
                opts->error[opts->error_len - 1] = '\0';
        }
        errno = e->code ? e->code : EIO;
        return -1;
}

EXPORT int fcachectl_ex(int dirfd, const char *pathname, unsigned int atflags, const char *cmd,
                        char *result, size_t *result_len, const struct fcachectl_options *opts)
{
        struct fcachectl_options o = { .size = sizeof(o) };
        struct fc_target target = FC_TARGET_INIT;
        struct fc_error e = { 0 };
        struct fc_command c;
        struct fc_result res;
        int r;

        last_error[0] = '\0';
        if (opts) {
                if (opts->size < sizeof(size_t) || opts->size > sizeof(o)) {
                        fc_error_set(&e, EINVAL, "struct fcachectl_options has an unknown size "
                                     "%zu", opts->size);
                        return fail(&e, NULL);
                }
                memcpy(&o, opts, opts->size);
        }
        if (fc_command_parse(cmd, &c, &e) < 0)
                return fail(&e, opts);
        if (fc_target_resolve(dirfd, pathname, atflags, &target, &e) < 0)
                return fail(&e, opts);
        fc_result_init(&res);
        struct fc_request req = {
                .cmd = &c, .target = &target, .opts = &o, .result = &res, .error = &e,
        };
        r = fc_run(&req);
        fc_target_close(&target);
        if (r == 0 && res.oom) {
                fc_error_set(&e, ENOMEM, "out of memory building the result");
                r = -ENOMEM;
        }
        if (r == 0 && fc_result_copy_out(&res, result, result_len) < 0) {
                fc_error_set(&e, ERANGE, "result buffer too small: %zu bytes needed",
                             *result_len);
                r = -ERANGE;
        }
        fc_result_free(&res);
        return r < 0 ? fail(&e, opts) : 0;
}

EXPORT int fcachectl(int dirfd, const char *pathname, unsigned int atflags, const char *cmd,
                     char *result, size_t *result_len)
{
        return fcachectl_ex(dirfd, pathname, atflags, cmd, result, result_len, NULL);
}
