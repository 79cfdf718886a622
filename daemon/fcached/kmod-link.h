/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kmod-link.h: fcached's link to fcache.ko (kmod-link.c).  While the
 * module is loaded the files of fcached's pins are pinned in the kernel
 * through it; this file knows whether it is loaded, makes and ends those
 * kernel pins, and sets the module's pin budget.
 *
 * A kernel pin is per inode: pinning a file twice gives the same pin id,
 * so the kernel pins are counted here and unpinned when the last holder
 * lets go.  A module reloaded numbers its pins afresh: each pin carries
 * the family id it was made under (a new one after every load), and a pin
 * of an earlier load is never unpinned.
 */
#pragma once

#include <glib.h>
#include <stdbool.h>

struct fcd_kpin {
        guint64 id;             /* 0: not a kernel pin */
        guint16 family;         /* the generic netlink family id it was made under */
};

/* Any thread: the family id while the module is loaded (at the last check), else 0. */
guint16 fcd_kmod_family(void);
static inline bool fcd_kmod_loaded(void) { return fcd_kmod_family() != 0; }

/*
 * Any thread, as the caller whose identity is entered: pin the open file fd
 * in the kernel (memory: its pages resident, charged to the module's
 * budget).  0, or -errno with the module's reason in msg.
 */
int fcd_kmod_pin(int fd, bool memory, struct fcd_kpin *out, char *msg, size_t cap);
/* Any thread: let go of a kernel pin (the kernel's ends with its last holder). */
void fcd_kmod_unpin(struct fcd_kpin *k);
/* Main loop: set the module's memory pin budget. 0 or -errno with msg. */
int fcd_kmod_set_budget(guint64 bytes, char *msg, size_t cap);
/* Main loop: check again whether the module is loaded; true if that changed. */
bool fcd_kmod_recheck(void);
/* At exit: kernel pins stay (the next start takes them over), nothing is unpinned. */
void fcd_kmod_detach(void);
