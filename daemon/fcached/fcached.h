/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fcached.h: what the parts of fcached (the control-plane daemon) share:
 * the daemon context, a caller's identity, the request that flows through
 * parse -> validate -> authorize -> act -> emit -> reply, and the errors.
 *
 * Threads: the main loop owns the context, the pin registry and every
 * exported object. Worker threads (GTask) only resolve and act on files
 * with a caller's identity and hand plain data back to the main loop.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <gio/gio.h>
#include <gio/gunixfdlist.h>

#include "command.h"
#include "error.h"
#include "fcached-dbus.h"
#include "result.h"

#define FCD_BUS_NAME "org.fcache.Manager1"
#define FCD_MANAGER_PATH "/org/fcache/Manager1"
#define FCD_OPERATION_PREFIX "/org/fcache/Manager1/operation/"
#define FCD_ERROR_PREFIX "org.fcache.Manager1.Error."
#define FCD_PATH_MAX 4095          /* longest path accepted from the bus */
#define FCD_GROUPS_MAX 256         /* groups of a caller we honour */
#define FCD_MAX_OPERATIONS 64      /* operations running at once */

/* org.fcache.Manager1.Error.* */
typedef enum {
        FCD_ERROR_FAILED,
        FCD_ERROR_NOT_AUTHORIZED,
        FCD_ERROR_ACCESS_DENIED,
        FCD_ERROR_INVALID_COMMAND,
        FCD_ERROR_INVALID_ARGUMENT,
        FCD_ERROR_NO_SUCH_PATH,
        FCD_ERROR_LIMIT_EXCEEDED,
        FCD_ERROR_NOT_SUPPORTED,
        FCD_ERROR_CANCELLED,
        FCD_ERROR_BUSY,
        FCD_ERROR_COUNT,
} FcdError;

#define FCD_ERROR (fcd_error_quark())
GQuark fcd_error_quark(void);
/* The FcdError for an errno from the file layer. */
FcdError fcd_error_from_errno(int err);

/* Who is calling, from the bus credentials. */
struct fcd_caller {
        uid_t uid;
        gid_t gid;                     /* used as the fs gid */
        guint ngroups;
        gid_t groups[FCD_GROUPS_MAX];
        guint32 pid;
};

struct fcd_pins;
struct fcd_volumes;
struct fcd_operation;
struct fcd_objects;

struct fcd_context {
        GMainLoop *loop;
        GDBusConnection *bus;
        FcManager1 *manager;           /* the exported skeleton */
        struct fcd_pins *pins;
        struct fcd_volumes *volumes;   /* fcache volumes and their views (volumes.c) */
        struct fcd_objects *objects;   /* the volume and conflict objects (objects.c) */
        GHashTable *operations;        /* id -> struct fcd_operation*, running or lingering */
        guint64 next_operation;
        guint running_operations;
        guint operation_linger_s;
        char *state_dir;
        int exit_status;               /* 1 once the run failed (bus name lost) */
};

/* A call in flight; freed by fcd_request_free once replied to. */
struct fcd_request {
        struct fcd_context *ctx;
        GDBusMethodInvocation *inv;    /* NULL once replied (Start replies early) */
        char *sender;
        char *path;
        char *cmd_text;                /* canonical command text */
        struct fc_command cmd;
        unsigned int atflags;
        const char *action;            /* polkit action id */
        struct fcd_caller caller;
        struct fcd_operation *op;      /* set for Start, Prefetch, Pin */
        /* Filled by the worker (dispatch.c), read by the main loop after it. */
        int r;                         /* 0 or -errno with e set */
        struct fc_error e;
        struct fc_result res;
        char *canonical;               /* the resolved object's path */
        mode_t type;                   /* its file type */
        bool volume;                   /* served by a volume's view (forwarded) */
        struct fcd_pin_build *build;   /* pin: the file set to commit */
        char *kernel_pin;              /* query pinned: fcache.ko's answer (result lines) */
};

typedef struct fcd_request fcd_request;
void fcd_request_free(struct fcd_request *req);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(fcd_request, fcd_request_free)

/* manager.c */
int fcd_manager_export(struct fcd_context *ctx, GError **error);
void fcd_manager_update_properties(struct fcd_context *ctx);
/* Refuses a call before any work: the error @code with the message (logged at
 * debug level only: bad input must not flood the journal); returns HANDLED. */
gboolean fcd_refuse(GDBusMethodInvocation *inv, FcdError code, const char *fmt, ...)
        G_GNUC_PRINTF(3, 4);
/*
 * The request pipeline of Manager1 (parse, validate, authorize, act, emit,
 * reply) for command @text on @path, answering @inv: what every
 * path-and-command method runs, whichever object it was called on.
 */
gboolean fcd_manager_request(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                             const char *path, const char *text, GVariant *options,
                             bool as_operation);
/* Manager1.Pin and Unpin's command on @path (the argument checks included). */
gboolean fcd_manager_pin(struct fcd_context *ctx, GDBusMethodInvocation *inv, const char *path,
                         gboolean recursive, guint priority, gboolean dry_run);
gboolean fcd_manager_unpin(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                           const char *path, gboolean recursive);
/* manager-volumes.c: AddVolume, RemoveVolume, ListVolumes */
void fcd_manager_volumes_connect(struct fcd_context *ctx);
/* manager-conflicts.c: ListConflicts, GetConflictVersion, ResolveConflict*, ConflictsChanged */
void fcd_manager_conflicts_connect(struct fcd_context *ctx);
/* Read volume NAME's conflict count; ConflictsChanged if it changed.  Main loop. */
void fcd_manager_conflicts_poll(struct fcd_context *ctx, const char *name);
/* GetConflictVersion, ResolveConflict and ResolveConflictMerged on @path, answering @inv
 * (@fds and @content as sent with the call). */
gboolean fcd_conflict_get_version(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                                  const char *path, const char *which);
gboolean fcd_conflict_resolve(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                              const char *path, const char *how);
gboolean fcd_conflict_resolve_merged(struct fcd_context *ctx, GDBusMethodInvocation *inv,
                                     GUnixFDList *fds, const char *path, GVariant *content);
/* One conflict as the view lists it (`query conflicts`). */
struct fcd_conflict_row {
        guint64 id;
        char *kind;
        char *rel;                 /* relative to the volume root, "" for the root */
        char *detail;
        guint64 recorded_us, local_changed_us; /* 0: unknown */
};
/* The rows of a `query conflicts` answer: an array of struct fcd_conflict_row that frees them. */
GArray *fcd_conflicts_parse(GPtrArray *lines);
/*
 * May @caller read the object in conflict at @path (or, when it is gone,
 * read and search its directory)?  GetConflictVersion's check, made with
 * the caller's identity; a worker thread.
 */
bool fcd_conflict_caller_may_read(const struct fcd_caller *caller, const char *path);

/* bus-result.c: "key=value\n" lines <-> a{sv} */
GVariant *fcd_result_to_variant(const char *lines);
/* Reply or finish with an error: the FcdError name and the message. */
const char *fcd_error_name(FcdError code);

/* Progress of a long operation, written by a worker, read by the main loop (atomics). */
struct fcd_progress {
        guint64 files_done;
        guint64 files_seen;
        guint64 bytes_done;
        gint walk_done;
};

static inline void fcd_progress_add(guint64 *field, guint64 n)
{
        __atomic_fetch_add(field, n, __ATOMIC_RELAXED);
}

/* All of it at once, from a walker's own report. */
static inline void fcd_progress_set(struct fcd_progress *p, guint64 files_done,
                                    guint64 files_seen, guint64 bytes_done, gboolean walk_done)
{
        __atomic_store_n(&p->files_done, files_done, __ATOMIC_RELAXED);
        __atomic_store_n(&p->files_seen, files_seen, __ATOMIC_RELAXED);
        __atomic_store_n(&p->bytes_done, bytes_done, __ATOMIC_RELAXED);
        __atomic_store_n(&p->walk_done, walk_done ? 1 : 0, __ATOMIC_RELAXED);
}

static inline guint64 fcd_progress_get(const guint64 *field)
{
        return __atomic_load_n(field, __ATOMIC_RELAXED);
}

/*
 * Worker tasks not yet completed in the main loop. Shutdown cancels the
 * operations and waits for this to reach 0 before freeing what they use.
 */
extern guint fcd_tasks_in_flight;

/* Tell the manager that pins changed (PinsChanged, properties). */
void fcd_manager_pins_changed(struct fcd_context *ctx);
