/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kmod-conn.h: a small hand-written generic netlink client of fcache.ko
 * (no libnl), shared by libfcachectl's kmod backend and by fcached, which
 * drives the module for the pins it holds.
 */
#pragma once

#include <limits.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../kmod/uapi/fcache_netlink.h"

#define KBUF_SIZE 32768
#define KMSG_SIZE 1024

struct kconn {
        int fd;
        uint16_t family;
        uint32_t seq;
        char *buf;
};

struct kmsg {
        union {
                struct nlmsghdr nh;
                char raw[KMSG_SIZE];
        };
};

struct kreply {
        uint64_t v[FCACHE_A_MAX + 1];
        unsigned char has[FCACHE_A_MAX + 1];
        char fstype[64];
        char path[PATH_MAX];
        char msg[256];          /* extack message of a failure */
};

typedef void (*kdump_fn)(const struct kreply *r, void *arg);

void kmsg_init(struct kmsg *m, uint16_t family, uint8_t cmd, uint16_t flags);
struct nlattr *kmsg_put(struct kmsg *m, uint16_t type, const void *data, size_t len);
void kmsg_put_u32(struct kmsg *m, uint16_t type, uint32_t v);
int kconn_send(struct kconn *c, struct kmsg *m);
void kreply_attrs(struct kreply *r, const struct nlmsghdr *nh);
/*
 * Receive until the answer to the last request: its reply (and, for a job,
 * the job's FCACHE_CMD_DONE), an error, or the end of a dump.  Polls so
 * that *cancel is seen; returns 0 or -errno, with r->msg set on failure.
 */
int kconn_wait(struct kconn *c, struct kreply *r, kdump_fn dump, void *arg,
               const volatile int *cancel);
/* Open a socket and resolve the family: 0, or -ENOENT when the module is not loaded. */
int kconn_open(struct kconn *c);
void kconn_close(struct kconn *c);
/* One request: cmd on fd (or none if fd < 0), with flags; waits for the result. */
int kcall(struct kconn *c, uint8_t cmd, int fd, uint32_t flags, struct kreply *r,
          const volatile int *cancel);
