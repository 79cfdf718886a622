/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fcachectl.h: the public C interface of libfcachectl.
 *
 * One call runs one command of the fcache grammar ("query cached",
 * "flush volume", "prefetch recursive", ...) on one target, on any
 * filesystem. See fcachectl(3) for the grammar, the result keys and the
 * errors.
 */
#ifndef FCACHECTL_H
#define FCACHECTL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Linux has no "conflict" errno. Operations on an object whose offline
 * changes could not be reintegrated fail with this one ("Structure needs
 * cleaning"); `query conflicts` and fcache-resolve(1) give the detail.
 */
#define FCACHE_ECONFLICT EUCLEAN

/* Longest command string accepted, in bytes, without the NUL. */
#define FCACHECTL_CMD_MAX 4096

/* Flags for struct fcachectl_options.flags. */
#define FCACHECTL_F_LOCAL_ONLY 0x1u /* never ask fcached; run in this process */
/* fcached may have polkit ask the caller for a password (through an authentication agent the
 * caller runs: the message's ALLOW_INTERACTIVE_AUTHORIZATION flag). */
#define FCACHECTL_F_INTERACTIVE 0x2u

struct fcachectl_progress {
        uint64_t files_done;  /* files processed so far */
        uint64_t files_seen;  /* files found so far by the tree walk */
        uint64_t bytes_done;  /* bytes of those files processed */
        int walk_done;        /* 1 once files_seen is final */
};

typedef void (*fcachectl_progress_fn)(const struct fcachectl_progress *progress, void *userdata);

struct fcachectl_options {
        size_t size;                   /* sizeof(struct fcachectl_options) */
        unsigned int flags;            /* FCACHECTL_F_* */
        unsigned int workers;          /* parallel workers for trees, 0 = default */
        fcachectl_progress_fn progress; /* called about 10 times a second, may be NULL */
        void *userdata;                /* passed to progress */
        char *error;                   /* if not NULL, receives the error text */
        size_t error_len;              /* size of error */
        const volatile int *cancel;    /* if not NULL and *cancel != 0, stop with ECANCELED */
};

/*
 * Run cmd on the object named by dirfd + pathname (as openat(2); atflags
 * may hold AT_SYMLINK_NOFOLLOW, AT_NO_AUTOMOUNT and AT_EMPTY_PATH).
 *
 * On success returns 0 and, if result is not NULL, stores the result as
 * NUL-terminated "key=value\n" lines and sets *result_len to the bytes used
 * including the NUL. If result is NULL and result_len is not, only
 * *result_len is set. If the buffer is too small the call fails with ERANGE
 * and *result_len is set to the size needed; the command has run.
 *
 * On failure returns -1 and sets errno; fcachectl_error() says why.
 */
int fcachectl(int dirfd, const char *pathname, unsigned int atflags, const char *cmd,
              char *result, size_t *result_len);

/* As fcachectl(), with options (progress, cancellation, error text). opts may be NULL. */
int fcachectl_ex(int dirfd, const char *pathname, unsigned int atflags, const char *cmd,
                 char *result, size_t *result_len, const struct fcachectl_options *opts);

/* The text of this thread's last fcachectl() error, "" if none. */
const char *fcachectl_error(void);

#ifdef __cplusplus
}
#endif

#endif
