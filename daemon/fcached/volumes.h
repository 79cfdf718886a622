/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * volumes.h: the fcache volumes fcached runs (volumes.c).
 *
 * Each NAME.conf in the volumes directory (/etc/fcache/volumes.d) is one
 * volume, served by its own fcache-view process (the data plane: the FUSE
 * view, the store, the control socket CacheDir/control.sock; see
 * daemon/view/view.md).  fcached starts that process, starts it again when it
 * dies, and adopts one that is already serving (left by an fcached that was
 * restarted or crashed) instead of mounting again, so a restart of fcached
 * is invisible to applications.  Stopping fcached leaves the views serving;
 * RemoveVolume stops one (it unmounts).
 *
 * Commands on a path inside a volume go to that volume's control socket
 * (fcd_volume_forward); the registry is read by worker threads under its
 * own lock.
 */
#pragma once

#include <stdbool.h>

#include "fcached.h"

struct fcd_volumes;

/*
 * Reads every *.conf of @dir and starts or adopts their views.  A bad file
 * is logged (file, line, key, why) and skipped; the others start.  @view_exe
 * is the fcache-view program.
 */
struct fcd_volumes *fcd_volumes_start(const char *dir, const char *view_exe);
/* Forgets the registry; the views keep serving (see above). */
void fcd_volumes_free(struct fcd_volumes *vols);

/*
 * Adds volume @name from the text of a NAME.conf: written to the volumes
 * directory, then started.  0, or -errno with @e set (bad name, bad config
 * naming the key, a volume of that name or mountpoint exists).
 */
int fcd_volumes_add(struct fcd_volumes *vols, const char *name, const char *config,
                    struct fc_error *e);
/* Stops volume @name (its view unmounts) and removes its NAME.conf. */
int fcd_volumes_remove(struct fcd_volumes *vols, const char *name, struct fc_error *e);

/* A volume's state changed ("online", "offline", "reintegrating"; why), or (@state NULL)
 * whether its connection is metered. Main loop. */
typedef void (*fcd_volume_state_fn)(void *userdata, const char *name, const char *state,
                                    const char *reason);
void fcd_volumes_set_state_hook(struct fcd_volumes *vols, fcd_volume_state_fn fn, void *userdata);
/* name -> state of each volume (a{ss}), floating. */
GVariant *fcd_volumes_states(struct fcd_volumes *vols);

/*
 * One request on a view's control socket, on @target_fd (an O_PATH
 * descriptor in the volume's mount, resolved as the caller; -1: the volume
 * root) and, with @name, that directory's entry.  The answer's results go
 * into @lines as "key=value" (a value may hold any byte but NUL).
 */
int fcd_control_call(const char *socket_path, const char *command, int target_fd,
                     const char *name, GPtrArray *lines);
/* KEY's value in such an answer's lines, or NULL. */
const char *fcd_control_value(GPtrArray *lines, const char *key);

/* What the volume objects show of a volume (fcd_volumes_info). */
struct fcd_volume_info {
        char *name;
        char *mountpoint;
        char *backing;
        char *socket_path;
        char *state;               /* volume_link_state() */
        char *reason;
        bool metered;
};
/* Each volume's info: an array of struct fcd_volume_info that frees them.  Main loop. */
GArray *fcd_volumes_info(struct fcd_volumes *vols);

/* (name, mountpoint, backing) of each volume: ListVolumes' a(sss), floating. */
GVariant *fcd_volumes_list(struct fcd_volumes *vols);

/* Does @canonical (a resolved, absolute path) lie in a volume?  Thread-safe. */
bool fcd_volume_contains(struct fcd_volumes *vols, const char *canonical);
/* As fcd_volume_contains, and its name, mountpoint and control socket (g_free each). */
bool fcd_volume_find(struct fcd_volumes *vols, const char *canonical, char **name,
                     char **mountpoint, char **socket_path);
/* The control socket of volume @name (g_free), or NULL.  Thread-safe. */
char *fcd_volume_socket(struct fcd_volumes *vols, const char *name);
/*
 * If @canonical lies in a volume, returns true and runs @cmd_text on
 * @target_fd, the object the caller resolved there (canonical is its name),
 * through the volume's control socket: the answer's lines go into @res, a failure into @e and *r
 * (-errno).  With @cancel (an operation) it runs as a job of the view: its
 * progress is written to @progress and *cancel set cancels it.
 * Thread-safe.
 */
bool fcd_volume_forward(struct fcd_volumes *vols, const char *canonical, int target_fd,
                        const char *cmd_text, struct fcd_progress *progress,
                        const volatile int *cancel, struct fc_result *res, struct fc_error *e,
                        int *r);

/*
 * flush all: every volume's store drops its copies (never unsynchronised
 * data, never pins): "flushed_volume" (each name), "volume_objects_flushed" and
 * "volumes_failed" go into @res.
 */
int fcd_volumes_flush_all(struct fcd_volumes *vols, struct fc_result *res);
/* sync of every volume (fcachectl sync with no PATH): waits until each
 * one's changes made in write-back are on the server.  -errno with @e naming
 * the volumes that did not get there and why. */
int fcd_volumes_sync_all(struct fcd_volumes *vols, struct fc_result *res, struct fc_error *e);
