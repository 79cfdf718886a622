/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * ctlmsg.h: the framed messages of a volume's control socket (ctlmsg.c),
 * spoken by fcache-view (the server) and by fcached, fcache-view-ctl and
 * fcache-resolve (the clients), all through this one encoder and decoder.
 *
 * A message is a header and attributes, in host byte order (both ends are
 * on one machine), in the manner of netlink:
 *
 *     struct ctlmsg_hdr  { u32 len (the whole message); u16 type; u16 zero; }
 *     struct ctlmsg_attr { u16 type; u16 zero; u32 len (the payload); }
 *                        payload, padded with zeros to 4 bytes
 *
 * Every byte of a name or an argument is inside a length-counted payload,
 * so nothing in it can start another attribute or another request.  A
 * string payload holds no NUL.
 *
 * A connection carries one request: the client sends one CTLMSG_REQUEST,
 * with the descriptor of its target (an O_PATH descriptor of an object of
 * the volume's mount, resolved by whoever had the right to) as SCM_RIGHTS
 * on the same sendmsg; the view answers with zero or more CTLMSG_JOB and
 * CTLMSG_PROGRESS messages and one CTLMSG_ANSWER, and closes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CTLMSG_MAX (4u << 20)   /* the largest message either side accepts */

struct ctlmsg_hdr {
        uint32_t len;
        uint16_t type;
        uint16_t zero;
};

struct ctlmsg_attr {
        uint16_t type;
        uint16_t zero;
        uint32_t len;
};

enum ctlmsg_type {
        CTLMSG_REQUEST = 1,     /* client -> view */
        CTLMSG_JOB = 2,         /* view -> client: the request runs as job CTLA_JOB_ID */
        CTLMSG_PROGRESS = 3,    /* view -> client: CTLA_DONE, CTLA_TOTAL, CTLA_BYTES */
        CTLMSG_ANSWER = 4,      /* view -> client: CTLA_STATUS, CTLA_ERROR, CTLA_KV... */
};

enum ctlmsg_attr_type {
        CTLA_COMMAND = 1,       /* string: the command, in the project's grammar */
        CTLA_TARGET = 2,        /* empty: a target descriptor came with the request */
        CTLA_NAME = 3,          /* string: one name under the target directory */
        CTLA_RUN_AS_JOB = 4,    /* empty: answer CTLMSG_JOB first, then progress */
        CTLA_CANCEL = 5,        /* u64: cancel that job (the request has no command) */
        CTLA_STATUS = 6,        /* s32: 0 or -errno */
        CTLA_ERROR = 7,         /* string: why, for a person */
        CTLA_KV = 8,            /* key NUL value: one result (a key may repeat) */
        CTLA_JOB_ID = 9,        /* u64 */
        CTLA_DONE = 10,         /* u64: files done */
        CTLA_TOTAL = 11,        /* u64: files in all */
        CTLA_BYTES = 12,        /* u64: bytes fetched */
};

/* A message being built (ctlmsg_init .. ctlmsg_send, then ctlmsg_free). */
struct ctlmsg {
        uint8_t *buf;
        size_t len, cap;
        bool failed;            /* out of memory or too large: ctlmsg_send fails */
};

void ctlmsg_init(struct ctlmsg *m, enum ctlmsg_type type);
void ctlmsg_free(struct ctlmsg *m);
void ctlmsg_put(struct ctlmsg *m, enum ctlmsg_attr_type type, const void *data, size_t len);
void ctlmsg_put_str(struct ctlmsg *m, enum ctlmsg_attr_type type, const char *s);
void ctlmsg_put_u64(struct ctlmsg *m, enum ctlmsg_attr_type type, uint64_t v);
void ctlmsg_put_s32(struct ctlmsg *m, enum ctlmsg_attr_type type, int32_t v);
/* A result: key (no NUL, no '=') and value (no NUL). */
void ctlmsg_put_kv(struct ctlmsg *m, const char *key, const char *value);

/* Appends the attributes of @src (a message built here) to @dst. */
void ctlmsg_append_attrs(struct ctlmsg *dst, const struct ctlmsg *src);

/* Sends the message, with descriptor @fd as SCM_RIGHTS when fd >= 0. 0 or -errno. */
int ctlmsg_send(int sock, struct ctlmsg *m, int fd);

/*
 * Receives one message into *buf (malloc()ed, *len bytes, checked by
 * ctlmsg_check).  A descriptor that came with it goes to *fd when fd is not
 * NULL (else it is closed), -1 if none.  0, -ECONNRESET at the end of the
 * stream, -EBADMSG for a malformed message, or -errno.
 */
int ctlmsg_recv(int sock, uint8_t **buf, size_t *len, int *fd);

/* Is buf[0..len) one well-formed message (header, attributes, sizes)? 0 or -EBADMSG. */
int ctlmsg_check(const uint8_t *buf, size_t len);
/* The type of a checked message. */
enum ctlmsg_type ctlmsg_type_of(const uint8_t *buf);

/* Walks the attributes of a checked message. */
struct ctlmsg_iter {
        const uint8_t *buf;
        size_t len, off;
};
void ctlmsg_iter_init(struct ctlmsg_iter *it, const uint8_t *buf, size_t len);
/* The next attribute; false at the end. */
bool ctlmsg_next(struct ctlmsg_iter *it, uint16_t *type, const uint8_t **data, uint32_t *len);

/* Payload decoders: 0, or -EBADMSG when the payload is not of that kind. */
int ctlmsg_get_str(const uint8_t *data, uint32_t len, char **out); /* malloc()ed */
int ctlmsg_get_u64(const uint8_t *data, uint32_t len, uint64_t *out);
int ctlmsg_get_s32(const uint8_t *data, uint32_t len, int32_t *out);
/* A CTLA_KV: *key and *value point into one malloc()ed block (free *key). */
int ctlmsg_get_kv(const uint8_t *data, uint32_t len, char **key, char **value);

/* A request, decoded (the view's side). */
struct ctl_request {
        char *command;          /* NULL for a cancel */
        char *name;             /* NULL, or one name under the target */
        bool has_target;
        bool run_as_job;
        bool has_cancel;
        uint64_t cancel;
};
/* Decodes a checked CTLMSG_REQUEST; -EBADMSG (with a reason in err) if it is not one. */
int ctl_request_decode(const uint8_t *buf, size_t len, struct ctl_request *req, char *err,
                       size_t errlen);
void ctl_request_clear(struct ctl_request *req);

/*
 * The client side (ctlclient.c): one request on a control socket, and its
 * answer.
 */
struct ctl_answer {
        bool answered;          /* the view answered (else the exchange failed) */
        int status;             /* the view's status: 0 or -errno */
        char *error;            /* the view's reason, or NULL */
        size_t n;               /* results, in order; a key may repeat */
        char **keys;
        char **values;
};

struct ctl_call {
        const char *command;    /* NULL with has_cancel */
        int target_fd;          /* an O_PATH descriptor in the volume's mount, or -1 (the root) */
        const char *name;       /* one name under target_fd, or NULL */
        bool run_as_job;
        bool has_cancel;
        uint64_t cancel;
        int idle_timeout_ms;    /* longest wait for the next message; <= 0: none */
        /* While a job runs: its id, its progress, and whether to cancel it. */
        void (*on_progress)(void *userdata, uint64_t done, uint64_t total, uint64_t bytes);
        bool (*cancel_requested)(void *userdata);
        void *userdata;
};

/* Connects to @socket_path; a descriptor or -errno. */
int ctl_connect(const char *socket_path);
/*
 * Sends @call on a new connection to @socket_path and reads the answer into
 * @a.  Returns the view's status (0 or -errno), or -errno of the exchange
 * itself (-ETIMEDOUT when the view stayed silent for idle_timeout_ms).
 */
int ctl_call(const char *socket_path, const struct ctl_call *call, struct ctl_answer *a);
void ctl_answer_clear(struct ctl_answer *a);
/* Decodes a checked CTLMSG_ANSWER into @a (ctl_answer_clear it after); 0 or -EBADMSG. */
int ctl_answer_decode(const uint8_t *buf, size_t len, struct ctl_answer *a);
/* The first value of @key, or NULL. */
const char *ctl_answer_get(const struct ctl_answer *a, const char *key);
