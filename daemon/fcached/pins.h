/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * pins.h: the registry of pins that fcached holds on plain mounts (pins.c).
 *
 * A pin names a file or a tree (recursive). Its files are kept as file
 * handles, not descriptors, and their pages resident (mmap + mlock) within
 * a byte budget. Pins persist in STATE_DIR/pins.ini and are re-applied at
 * start; recursive pins follow their tree through inotify.
 *
 * Building a pin's file set (fcd_pin_build_run) happens in a worker thread
 * with the caller's identity; everything else is the main loop's.
 */
#pragma once

#include "fcached.h"
#include "result.h"
#include "target.h"

struct fcd_pin_build;

struct fcd_pins_limits {
        guint max_pins;
        guint64 max_files;
        guint64 budget_bytes;
};

struct fcd_pins *fcd_pins_new(struct fcd_context *ctx, const char *state_dir,
                              const struct fcd_pins_limits *limits, GError **error);
void fcd_pins_free(struct fcd_pins *p);
/* Load pins.ini and re-apply every pin (at start, before the bus name is taken). */
void fcd_pins_load(struct fcd_pins *p);

/*
 * Worker thread, caller identity entered: build the file set of a pin of t.
 * *out is always set (hand it to fcd_pins_commit or fcd_pins_discard in the
 * main loop); returns 0 or -errno with e set.
 */
int fcd_pin_build_run(struct fcd_pins *p, const struct fc_target *t, const char *canonical,
                      bool recursive, bool dry_run, struct fcd_progress *progress,
                      const volatile int *cancel, struct fcd_pin_build **out, struct fc_error *e);
/* Main loop: drop a build that is not committed (or after a commit), with its unused watches. */
void fcd_pins_discard(struct fcd_pins *p, struct fcd_pin_build *b);
void fcd_pin_build_free(struct fcd_pin_build *b);
/* The result keys of a dry run. */
void fcd_pin_build_describe(struct fcd_pins *p, const struct fcd_pin_build *b,
                            struct fc_result *res);

/* Main loop. Each returns 0 or -errno with e set, and adds its result keys. */
int fcd_pins_commit(struct fcd_pins *p, struct fcd_pin_build *b, const struct fcd_caller *owner,
                    int priority, struct fc_result *res, struct fc_error *e);
int fcd_pins_unpin(struct fcd_pins *p, const char *canonical, bool recursive,
                   const struct fcd_caller *caller, struct fc_result *res, struct fc_error *e);
/* kernel_pinned: fcache.ko pins the object (a direct caller's pin counts too). */
void fcd_pins_query(struct fcd_pins *p, const char *canonical, const struct fcd_caller *caller,
                    bool kernel_pinned, struct fc_result *res);
int fcd_pins_set_budget(struct fcd_pins *p, guint64 bytes, struct fc_result *res,
                        struct fc_error *e);

guint fcd_pins_count(struct fcd_pins *p);
guint64 fcd_pins_files(struct fcd_pins *p);
guint64 fcd_pins_bytes(struct fcd_pins *p);
guint64 fcd_pins_resident(struct fcd_pins *p);
guint64 fcd_pins_budget(struct fcd_pins *p);
guint64 fcd_pins_rescans(struct fcd_pins *p);
