/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view.h: the data plane of one fcache volume (fcache-view): the shared
 * context and the interfaces between its files.
 *
 * Its files by layer, bottom first (a file calls only its own layer and
 * those below; tests/unit/layers.py checks it; view.md, Files, has them all):
 *
 *   view-log.c, view-time.h, view-creds.c, view-readers.c, view-mode.c,
 *   view-mirror-marks.c, view-command.c, view-ctl-out.c, view-path.c
 *                   log lines, time, the caller's credentials, who reads
 *                   /dev/fuse, which tree is served, the mirror's marks, the
 *                   command grammar, control replies, paths
 *   store*.c        the persistent store and its index (a library)
 *   view-deadline.c backing calls bounded by BackingTimeout
 *   view-identity.c, view-link-rtt.c, view-passthrough.c, view-listing.c,
 *   view-delete-bound.c, view-fetch-pool.c
 *                   what builds on bounded calls alone
 *   view-state.c, view-offline-log.c
 *                   the takeover log; what offline changes leave in the log
 *   view-inode.c    node table, bounded descriptor cache, re-resolution
 *   view-mirror.c, view-revalidate.c, view-reindex.c
 *                   the mirror; the store's copies kept current
 *   view-ops.c      the FUSE operations and the open files
 *   view-offline.c, view-replay.c, view-writeback.c, view-dry-run.c,
 *   view-conflicts.c
 *                   disconnected operation
 *   view-pin.c, view-pin-writeback.c, view-metered.c
 *                   pins, prefetch, hoarding
 *   view-control.c, view-session.c, view-main.c
 *                   the control socket, the worker, the command line
 *
 * Lock order: vfile.lock -> store object lock -> store lock -> itab lock ->
 * state_lock (a leaf).
 */
#pragma once

#define FUSE_USE_VERSION 34

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <glib.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "ctlmsg.h"
#include "oplog.h"
#include "regular-file.h"
#include "store.h"
#include "view-log.h"
#include "view-time.h"
#include "volume-config.h"

struct vnode;

struct view {
        struct volume_config *cfg;
        struct fuse_session *se;
        struct store *store;
        int root_fd;            /* O_PATH|O_DIRECTORY on Backing, never closed */
        int mount_fd;           /* O_RDONLY on Backing, for open_by_handle_at */
        ino_t root_ino;         /* of root_fd (with backing_dev): a remount is another */
        dev_t backing_dev;
        bool backing_local;     /* on a local filesystem: no BackingTimeout, passthrough */
        bool handles;           /* the backing supports name_to_handle_at */
        /* atomic: a FUSE backing whose inode numbers are made up and may
         * change (sshfs: root 1, or handles that do not last): replay finds
         * objects by name */
        bool names_identify;
        /* set at start: the pinned files have no rows (the store dropped
         * another mount's numbers), so the hoard walk marks them at once */
        bool walk_pins_now;
        /* mode_lock: the numbering of a backing mounted again under the
         * worker, for the switch online (backing_numbering_unsure()), or NULL */
        char *numbering_pending;
        /* mode_lock: such a backing mounted again since the nodes were
         * bound online: the next switch online binds each node to the
         * object of its type at its name (view-inode.c) */
        bool nodes_renumbered;
        double lease_s;         /* entry/attr timeouts handed to the kernel */
        bool takeover;          /* this worker took over a live connection */

        /* node table (view-inode.c) */
        pthread_mutex_t itab_lock;
        GHashTable *nodes;      /* protected by itab_lock: nodeid -> struct vnode */
        GHashTable *by_ino;     /* protected by itab_lock: backing ino -> struct vnode */
        unsigned open_fds;      /* protected by itab_lock: O_PATH fds held by nodes */
        unsigned max_fds;       /* bound of the descriptor cache */
        struct vnode *lru_head, *lru_tail; /* protected by itab_lock: idle fds, oldest first */
        uint64_t next_alt_id;   /* protected by itab_lock: nodeids for reused inode numbers */
        GHashTable *forgotten;  /* protected by itab_lock: nodeid -> handle of a freed node */
        GQueue *forgotten_order; /* protected by itab_lock: their nodeids, oldest first */

        /* open files (view-ops.c) */
        pthread_mutex_t ftab_lock;
        GHashTable *files;      /* protected by ftab_lock: fh -> struct vfile */
        uint64_t next_fh;       /* protected by ftab_lock */

        /* takeover log (view-state.c) */
        pthread_mutex_t state_lock;
        int state_fd;           /* protected by state_lock */
        uint64_t state_records; /* protected by state_lock */
        char *state_map;        /* protected by state_lock: the log's window being filled */
        uint64_t state_map_off; /* protected by state_lock: the window's offset in the file */
        size_t state_used;      /* protected by state_lock: bytes of the window filled */
        char *state_path;
        char *init_path;

        /* disconnected operation (view-offline.c, view-mirror.c) */
        pthread_rwlock_t mode_lock;   /* changes shared, state switches exclusive */
        /* A backing call found the server gone (@why): the owner of the state
         * takes the volume offline (view-offline.c's view_server_gone_hook). */
        void (*server_gone)(struct view *v, const char *why);
        pthread_rwlock_t served_lock; /* exclusive while a switch changes what is served
                                       * (state, nodes, open files' descriptors), shared
                                       * to read a state and a descriptor that agree;
                                       * never held across anything else */
        uint64_t switches;      /* atomic: switches of the tree served, moved under
                                 * served_lock */
        pthread_mutex_t offline_lock; /* serializes the oplog */
        struct oplog *oplog;    /* protected by offline_lock: CacheDir/offline */
        int state;              /* enum view_state (atomic) */
        int mirror_fd;          /* O_PATH|O_DIRECTORY on CacheDir/mirror */
        int mirror_mount_fd;    /* O_RDONLY on it, for open_by_handle_at (which
                                 * takes no O_PATH descriptor) */
        unsigned conflicts;     /* records kept as conflicts (atomic; 0: no lookup asks) */
        bool timeout_thread;    /* atomic: a backing timeout is being handled */
        uint64_t changes;       /* atomic: changes begun through the view (view_change_begin) */
        bool auto_reconnect;    /* atomic: offline by a timeout, back when the backing answers */
        bool metered;           /* atomic: fcached says the connection is metered */
        /* write-back (view-writeback.c) */
        pthread_mutex_t wb_lock;
        pthread_cond_t wb_cond; /* wb_lock: the trickle has work, or a round ended */
        uint64_t wb_rounds;     /* wb_lock: trickle rounds ended */
        unsigned reconnects;    /* atomic: view_reconnect() calls under way */
        bool reconnect_running; /* atomic: one of them replays, from its switch to
                                 * reintegrating to its end (others wait for it) */
        uint64_t reint_done;    /* atomic: records replayed by the running or last reintegration */
        uint64_t reint_total;   /* atomic: and the records it had to replay */
        uint64_t reint_bytes;   /* atomic: and the content bytes it put on the server */
        bool replay_busy;       /* atomic: a replay runs (or, given up on, still waits on the backing) */
        bool trickle_in_round;  /* atomic: the trickle's replay is under way (not given up on) */
        uint64_t delete_gone;   /* atomic: pinned objects the last reconnect found gone */
        uint64_t delete_pinned; /* atomic: of the pinned objects it counted */
        char *reconnect_refused; /* view-offline.c's reason_lock: why the last reconnect refused, or NULL */
        char *offline_reason;   /* reason_lock: why it went offline by itself, or NULL */
        dev_t mirror_dev;
        int mirror_links_fd;    /* CacheDir/mirror.links (view-mirror.c), or -1 */
        uint64_t ids_epoch;     /* atomic: what nodes remember of their identity offline
                                 * holds while it stays (view-inode.c) */
        bool inos_kept;         /* atomic: a node keeps the st_ino it showed offline */

        int control_fd;         /* listening control socket */
        int ready_fd;           /* pipe to the holder: one byte once serving, or -1 */
        char *control_path;
};

/* VIEW_WRITEBACK serves the mirror as offline while the log is shipped in
 * the background (view-writeback.c). */
enum view_state { VIEW_ONLINE, VIEW_OFFLINE, VIEW_REINTEGRATING, VIEW_WRITEBACK };

/* view-creds.c */
struct creds {
        bool switched;
};
int creds_enter(fuse_req_t req, struct creds *c);
/* The caller's identity, to take on in another thread (view-deadline.c). */
#define CALLER_GROUPS_MAX 256
struct caller_id {
        uid_t uid;
        gid_t gid;
        int ngroups;
        gid_t groups[CALLER_GROUPS_MAX];
};
void creds_capture(fuse_req_t req, struct caller_id *id);
int creds_enter_id(const struct caller_id *id, struct creds *c);
void creds_leave(struct creds *c);

/* view-inode.c */
int vnode_table_init(struct view *v);
/* Returns an O_PATH descriptor of node id (held until vnode_put), or -errno. */
int vnode_get(struct view *v, fuse_ino_t id, struct vnode **out);
/*
 * As vnode_get, with the tree its descriptor is of (*offline: the mirror),
 * as one: a switch stores the state before it moves the nodes, so the state
 * read apart from the node may be the other tree's.  *switches (if not NULL):
 * the view's switch count then, for a request that registers an open file
 * (a switch that moves the open files before it is in their table passes it by).
 */
int vnode_get_served(struct view *v, fuse_ino_t id, struct vnode **out, bool *offline,
                     uint64_t *switches);
uint64_t vnode_ino(const struct vnode *n);
mode_t vnode_type(const struct vnode *n);
/* Directory node n as last found missing from the mirror: at that
 * mirror_dirs_gen(), or 0. */
uint64_t vnode_mirror_absent_gen(const struct vnode *n);
void vnode_set_mirror_absent_gen(struct vnode *n, uint64_t gen);
void vnode_put(struct view *v, struct vnode *n);
/* vnode_get of two nodes (a link's or rename's two ends): both held, with
 * their descriptors in *fa and *fb, or neither and -errno. */
int vnode_get_pair(struct view *v, fuse_ino_t a, struct vnode **na, int *fa, fuse_ino_t b,
                   struct vnode **nb, int *fb);
/* vnode_get_pair with the tree both are of, as vnode_get_served. */
int vnode_get_pair_served(struct view *v, fuse_ino_t a, struct vnode **na, int *fa, fuse_ino_t b,
                          struct vnode **nb, int *fb, bool *offline);
/* Looks name up under parent (descriptor pfd of node parent), fills e. */
int vnode_lookup(struct view *v, fuse_ino_t parent, int pfd, const char *name,
                 struct fuse_entry_param *e);
/* As vnode_lookup, in the tree @offline says, pfd and @switches from
 * vnode_get_served(): -EAGAIN when a switch passed it by (look up again). */
int vnode_lookup_in(struct view *v, bool offline, uint64_t switches, fuse_ino_t parent, int pfd,
                    const char *name, struct fuse_entry_param *e);
/* As vnode_lookup, for an object without a name (O_TMPFILE) open as fd in parent. */
int vnode_enter_unnamed(struct view *v, fuse_ino_t parent, int fd, struct fuse_entry_param *e);
/*
 * The kernel's lookups of "." and ".." in node id, which it makes to find a
 * node again from an NFS-style file handle (open_by_handle_at) after it
 * dropped the inode: id itself, or its parent.  A node the kernel forgot is
 * found again through the backing file handle it had (the last 65536 kept).
 */
int vnode_lookup_dot(struct view *v, fuse_ino_t id, bool dotdot, struct fuse_entry_param *e);
void vnode_forget(struct view *v, fuse_ino_t id, uint64_t nlookup);
/* Is there a node of inode ino known as parent/name?  (A slow scan.) */
bool vnode_child_is(struct view *v, fuse_ino_t parent, const char *name, uint64_t ino);
/* After a rename through the view: re-points the moved node at its new name. */
void vnode_moved(struct view *v, fuse_ino_t newparent, int npfd, const char *newname);
/* The parent and name the node table knows node id by (name to free): idx 0
 * its main name, then the other names (hard links) it was looked up by;
 * -ENOENT past the last.  Names may be stale: check the object there. */
int vnode_parent_of(struct view *v, fuse_ino_t id, unsigned idx, uint64_t *parent, char **name);
/* Name parent/name of the object of inode ino (in the tree served) went. */
void vnode_name_gone(struct view *v, uint64_t ino, uint64_t parent, const char *name);
/* Is a store copy allowed for objects under node id (set cacheable off)? */
bool vnode_cacheable(struct view *v, fuse_ino_t id);
/* The kernel's nodeid of a backing inode, or 0 if the kernel does not know it. */
fuse_ino_t vnode_id_of_ino(struct view *v, uint64_t ino);
/* A lookup answered without the backing: the node of inode ino, if the
 * table knows it as parent/name, counts one more lookup; its nodeid, or 0. */
fuse_ino_t vnode_lookup_known(struct view *v, fuse_ino_t parent, const char *name, uint64_t ino,
                              mode_t type);
/* The backing inode number and type of node id, without its descriptor
 * (which vnode_get may have to find again on the backing). */
int vnode_peek(struct view *v, fuse_ino_t id, uint64_t *ino, mode_t *type);
/* The parent the node table knows node id under, 0 for none (the root). */
fuse_ino_t vnode_parent_id(struct view *v, fuse_ino_t id);
/* Recreates a node from the takeover log (its kernel lookup count is unknown). */
int vnode_restore(struct view *v, uint64_t id, uint64_t ino, mode_t type, uint64_t parent,
                  const char *name, const void *handle, unsigned hlen, int htype);
/* Its other names from the takeover log (state_log_aliases()'s list). */
void vnode_restore_aliases(struct view *v, uint64_t id, const void *list, uint32_t size,
                           uint32_t count);
void vnode_set_alt_floor(struct view *v, uint64_t id);
int vnode_fill_stat(struct view *v, int fd, struct stat *st);
/* As vnode_fill_stat, for node n (descriptor fd): offline, the st_ino it
 * shows as last found while that still holds. */
int vnode_fill_stat_of(struct view *v, struct vnode *n, int fd, struct stat *st);
/* As vnode_fill_stat_of, for a descriptor of the tree @offline says. */
int vnode_fill_stat_in(struct view *v, bool offline, struct vnode *n, int fd, struct stat *st);
/*
 * Offline, what a node remembers of its object's identity (its log id, its
 * shown st_ino, its directory complete) holds until vnode_ids_forget(),
 * called at a switch and after every offline rename, link and unlink.  Take
 * vnode_ids_epoch() before naming the object and remember it with that.
 */
uint64_t vnode_ids_epoch(struct view *v);
void vnode_ids_forget(struct view *v);
/* Before a reply carrying node id's attributes: an object made offline keeps
 * showing the st_ino it showed then (its log id's), online and offline, for
 * as long as the kernel knows its node. */
void vnode_show_kept_ino(struct view *v, fuse_ino_t id, struct stat *st);
int vnode_known_lid(struct view *v, fuse_ino_t id, uint64_t *lid);
void vnode_remember_lid(struct view *v, fuse_ino_t id, uint64_t epoch, uint64_t lid);
/* offline_dir_complete() of directory node n (descriptor fd), remembered once true. */
bool vnode_dir_complete(struct view *v, struct vnode *n, int fd);
/* After a state switch: each node is bound to its counterpart in what is now
 * served.  Returns every node as the kernel knows it (struct vnode_entry):
 * attributes to refresh, and the names that no longer lead to their node. */
struct vnode_entry {
        uint64_t id, parent;
        char *name;     /* NULL for the root */
        bool inval_name;
};
/* Going online, once a call to the server is not answered within
 * BackingTimeout (*unanswered) the nodes left ask it nothing: they have no
 * counterpart (ESTALE) until the next switch, which the caller makes. */
GArray *vnode_switch_all(struct view *v, bool *unanswered);

/* view-state.c */
enum state_rec {
        STATE_NODE = 1,         /* nodeid, ino, type, parent, name, handle */
        STATE_DROP = 2,         /* nodeid forgotten by the kernel */
        STATE_OPEN = 3,         /* fh, nodeid, flags */
        STATE_CLOSE = 4,        /* fh */
        STATE_PAD = 5,          /* the unused end of a window of the log */
        STATE_ALIASES = 6,      /* nodeid, its other names (parent, name) */
};
/* Where a takeover's records go: the node table and the open files, which
 * log into the new file as they restore (view-main.c passes view-inode.c's
 * and view-ops.c's restores: the log is below both). */
struct state_restorer {
        int (*node)(struct view *v, uint64_t id, uint64_t ino, mode_t type, uint64_t parent,
                    const char *name, const void *handle, unsigned hlen, int htype);
        void (*aliases)(struct view *v, uint64_t id, const void *list, uint32_t size,
                        uint32_t count);
        int (*file)(struct view *v, uint64_t fh, uint64_t id, int flags, uint32_t pt_mode);
};
/* The records of a takeover log's image @buf, in order, through @to: a
 * record cut short ends it, one malformed is skipped. */
void state_replay(struct view *v, const char *buf, size_t len, const struct state_restorer *to);
/* A node's other names, as an ALIASES record lists them: one appended to
 * @list; the next at *p (before @end) read and *p moved past it, its name
 * (g_free) returned, or NULL at the end or at a malformed entry. */
void state_alias_put(GByteArray *list, uint64_t parent, const char *name);
char *state_alias_next(const char **p, const char *end, uint64_t *parent);
/* A new takeover log; with @takeover, the previous worker's replayed through @to. */
int state_open(struct view *v, bool takeover, const struct state_restorer *to);
void state_log_node(struct view *v, uint64_t id, uint64_t ino, mode_t type, uint64_t parent,
                    const char *name, const void *handle, unsigned hlen, int htype);
void state_log_drop(struct view *v, uint64_t id);
void state_log_aliases(struct view *v, uint64_t id, const void *list, uint32_t size,
                       uint32_t count);
void state_log_open(struct view *v, uint64_t fh, uint64_t id, int flags);
/* The same open again, with its passthrough mode (view-passthrough.c's word). */
void state_log_open_mode(struct view *v, uint64_t fh, uint64_t id, int flags, uint32_t mode);
void state_log_close(struct view *v, uint64_t fh);
int state_save_init(struct view *v, const void *buf, size_t len);
int state_load_init(struct view *v, void **buf, size_t *len);

/* view-ops.c */
extern const struct fuse_lowlevel_ops view_ops;
int vfile_restore(struct view *v, uint64_t fh, uint64_t id, int flags, uint32_t pt_mode);
/* At a takeover: the descriptors the holder kept for open files
 * (view-fdstore.c) go back to them. */
void vfile_take_kept(struct view *v);
void vfile_set_fh_floor(struct view *v, uint64_t fh);
/* Before a switch offline: the mirror takes the files written online and open. */
void vfile_note_writers(struct view *v);
/* After a state switch: open files move to what is now served. */
void vfile_switch_all(struct view *v, bool *unanswered);
/* Logs the content of files written offline and still open. */
void vfile_flush_dirty(struct view *v);
/* Whether an open file of node @id may write to it. */
bool vfile_node_writable(struct view *v, uint64_t id);
/* Offline: whether a writer of the object with log id @lid writes its
 * server file directly (the kernel passes it through to the file it was
 * opened on online): the server has its writes as they are made. */
bool vfile_writes_server(struct view *v, uint64_t lid);
/* After a takeover, and at each switch: writers passed through without a
 * descriptor of their own get the kernel's file as their stranded file
 * when it is of the other tree than the one served, and lose it when not. */
void vfile_strand_unopened_writers(struct view *v);
/* After a takeover: the files the kernel passes restored open files through
 * are found again by their node's name, in the tree each is of, before
 * anything (the mirror's resync) may replace them. */
void vfile_adopt_restored(struct view *v);

/* view-listing.c: a directory handle's listing, offsets its own (see there). */
struct dirlist;
struct dirlist_entry {
        const char *name;
        uint64_t ino;
        unsigned char type;     /* d_type */
};
/* openat(dfd, name, O_RDONLY | O_DIRECTORY | flags) for the daemon's own
 * listing, with O_NOATIME where the filesystem allows it (dfd may be O_PATH,
 * name "." for itself): a descriptor, or -1 with errno. */
int dir_open_noatime(int dfd, const char *name, int flags);
struct dirlist *dirlist_new(void);
void dirlist_free(struct dirlist *l);
/* Offset 0: the next entries are read afresh. */
void dirlist_rewind(struct dirlist *l);
/* Entry i (offset i + 1) of the listing, read on as far as needed from fd,
 * the handle's directory in the tree served (mirror: the mirror's): 1 and
 * *e, 0 past the last, or -errno (-ETIMEDOUT: the server did not answer). */
int dirlist_entry(struct view *v, struct dirlist *l, int fd, bool mirror, uint64_t i,
                  const struct dirlist_entry **e);

/* view-control.c */
int control_start(struct view *v);
void control_stop(struct view *v);
/* An answer being built: results in order, each a framed key and value. */
struct ctl_out {
        struct ctlmsg msg;
};
/* One result, formatted as "key=value" (the key is what comes before the first '='). */
void out_kv(struct ctl_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The "key=value" lines of a text the view made itself, without names in it. */
void out_lines(struct ctl_out *o, const char *text);

/* view-revalidate.c: a read-only open of node id served from its store copy
 * alone; its directory's copies are then revalidated in the background. */
void revalidate_note(struct view *v, fuse_ino_t id);
/* The attributes of parent/name as the last pass listed them, if that pass
 * is within the lease and nothing changed through the view since it began:
 * 0, or -ENOENT (ask the backing). */
int revalidate_lookup(struct view *v, fuse_ino_t parent, const char *name, struct stat *st);

/* view-pin.c: hoarding walks */
struct pin_result {
        uint64_t files, dirs, total_bytes, needed, fetched, failed;
        uint64_t skipped;       /* prefetch: entries marked cacheable off, left out */
        int mirror_err;         /* why the pinned tree is not completely mirrored, or 0 */
};
/*
 * A pin run as a job of the control socket ("job pin ..."): progress as it
 * goes, and cancellation ("cancel N"), which undoes the pins this job set.
 */
struct pin_job {
        volatile int cancel;
        uint64_t files_total;   /* from the admission walk */
        void (*progress)(struct pin_job *job, const struct pin_result *res);
        GArray *newly_pinned;   /* uint64_t inos this job pinned that were not before */
};
/* view-mirror.c: a walk of @job (may be NULL) did a file: its progress, reported. */
void pin_job_progress(struct pin_job *job, const struct pin_result *res);
/* @job may be NULL; a cancelled job returns -ECANCELED. */
int pin_subtree(struct view *v, int fd, bool recursive, int prio, bool dry_run,
                struct pin_result *res, uint64_t *available, struct pin_job *job);
int unpin_subtree(struct view *v, int fd, bool recursive, struct pin_result *res);
int flush_subtree(struct view *v, int fd, bool recursive, struct pin_result *res);
/* Fetches the files completely into the store (not pinned), FetchThreads at a
 * time; @job may be NULL. */
int prefetch_subtree(struct view *v, int fd, bool recursive, struct pin_result *res,
                     struct pin_job *job);
int pin_walk_all(struct view *v);
/* Opens path (relative to the volume root, or absolute under the mountpoint). */
int view_open_path(struct view *v, const char *path, int flags);

/* view-path.c */
/* The path of object dfd[/name] relative to directory root_fd ("." for the
 * root itself), found through /proc/self/fd; NULL if it is not under it. */
char *view_rel_path(int root_fd, int dfd, const char *name);

/* view-mode.c: which tree the volume serves, asked in one place (see there). */
const char *view_state_name(struct view *v);     /* "online", "offline"... */
const char *view_state_text(int state);         /* the same, of enum view_state @state */
bool view_offline(struct view *v);      /* serving the mirror (offline, reintegrating, writeback) */
int view_served_root(struct view *v);   /* the root descriptor of what is served */
void view_change_begin(struct view *v); /* around every change: the state cannot switch */
void view_change_end(struct view *v);
/* Whether the calling thread's backing calls are of the mirror: within a
 * change, as the state was at its view_change_begin(); else view_offline(). */
bool view_calls_offline(struct view *v);
/* A backing call exceeded BackingTimeout: go offline (at once, in the background),
 * and come back when the backing answers again. */
void view_backing_timed_out(struct view *v);
/* After a timeout: waits (briefly) until the volume serves offline; true if it does. */
bool view_wait_offline(struct view *v);
/* A backing call failed with @r, an error of a server gone (backing_error_gone()),
 * and the backing's probe says so too: the same, the reason saying which. */
void view_backing_gone(struct view *v, int r);
/* An error of the replay that says the server went away (or the replay waits on it). */
bool view_server_gone(int r);
/* An error of a backing call that may mean the server or its mount is gone
 * (ENOTCONN of a dead FUSE mount, EIO, ESTALE of a server that restarted
 * without its state...); some (EIO, ESTALE) are also an object's own: the
 * backing's probe tells. */
bool backing_error_gone(int r);

/*
 * view-offline.c: disconnected operation (see there).  Nodes created
 * offline get inode numbers OFFLINE_INO_BASE + their log id until they
 * reach the server.
 */
#define OFFLINE_INO_BASE (1ULL << 61)
struct mirror_base;
/* @record_root: the backing is the volume's; its root becomes the log's root base. */
int view_oplog_open(struct view *v, bool record_root);
/* view-offline-log.c, from here to offline_note_xattr(): what offline
 * changes leave in the log, and who a mirror object is. */
/* The st_ino and st_dev an application sees of mirror object fd:
 * OFFLINE_SHOWN_BY_LID when st_ino is the log id's (an object made offline:
 * it depends on nothing else), else 0. */
#define OFFLINE_SHOWN_BY_LID 1
int offline_translate_stat(struct view *v, int fd, struct stat *st);
int offline_lid(struct view *v, int dfd, const char *name, uint64_t *lid);
/* Is the server object the mirror knew as inode @was now inode @now on the
 * server (a replay renamed its new content over the server's file)? */
bool offline_became(struct view *v, uint64_t was, uint64_t now);
/* Is log object @lid (made offline) server inode @server_ino now (replayed)? */
bool offline_object_is(struct view *v, uint64_t lid, uint64_t server_ino);
/* A name of inode ino in directory dfd (to free), or NULL: a scan. */
char *offline_name_in(int dfd, ino_t ino);
/* After the change was applied to the mirror: log it (undone if that fails).
 * A create: *plid is the parent's log id if the caller knows it, else 0 and
 * it is found (and set); *lid gets the new object's. */
int offline_note_create(struct view *v, int pfd, uint64_t *plid, const char *name,
                        const char *target, uint64_t *lid);
int offline_note_link(struct view *v, uint64_t lid, int npfd, const char *newname);
int offline_note_unlink(struct view *v, uint64_t plid, const char *name, uint64_t lid, bool dir);
/* The last create or rename of object lid was made again offline after its
 * online call timed out: the server may have applied it too (OPLOG_IN_DOUBT). */
int offline_note_in_doubt(struct view *v, uint64_t lid);
int offline_note_rename(struct view *v, uint64_t plid, const char *name, uint64_t lid,
                        uint64_t nplid, const char *newname, uint64_t other, unsigned flags);
int offline_note_setattr(struct view *v, uint64_t lid, const struct oplog_setattr *sa);
/*
 * An editor's atomic save: a file made offline renamed over a server file.
 * offline_is_atomic_save() before the rename (fills *dest_base); after it,
 * offline_note_atomic_save() logs it as new content of the server file
 * (the temporary's create cancels), so reintegration merges it like an edit.
 */
bool offline_is_atomic_save(int pfd, const char *name, int npfd, const char *newname,
                            unsigned flags, struct mirror_base *dest_base);
int offline_note_atomic_save(struct view *v, uint64_t plid, const char *name, uint64_t lid,
                             uint64_t dest_lid, int npfd, const char *newname,
                             const struct mirror_base *dest_base);
int offline_note_content(struct view *v, uint64_t lid, int fd);
/* fsync offline: every change logged so far durable against a power loss. */
int offline_durable(struct view *v);
int offline_note_xattr(struct view *v, uint64_t lid, const char *name, const void *value,
                       size_t size, int flags, bool remove);
int view_disconnect(struct view *v, GString *err);
/* Before serving: the volume starts offline (the backing is not its server). */
void view_start_offline(struct view *v, const char *why);
/* struct view's server_gone: offline at once (in the background), and back
 * when the backing answers again. */
void view_server_gone_hook(struct view *v, const char *why);
/* A worker that starts offline by itself (not by hand) probes for the backing's return. */
void view_probe_resume(struct view *v);
/* @force: even when more pinned objects would go than ReconnectDeleteLimit.
 * From offline or writeback; it ends in writeback when view_writeback_wanted().
 * One asked while another runs ends with it. */
int view_reconnect(struct view *v, bool force, GString *out, GString *err);
/* A reconnect started in the background: @why logged first, a failure after @failed. */
void view_reconnect_logged(struct view *v, const char *why, const char *failed);
/* Before serving: a volume that would start online starts in writeback when wanted. */
void view_start_writeback(struct view *v);
/* Online -> writeback (the mirror served, the log shipped by the trickle). */
int view_writeback_enter(struct view *v);
/* In writeback, the trickle's replay failed with @r, an error of a server
 * gone: the volume goes offline and probes for the backing's return. */
void view_writeback_lost(struct view *v, int r);
/*
 * view-replay.c: replays the offline log as it stands (records up to K)
 * while the volume goes on serving as offline, its changes logged after K;
 * again while what was logged meanwhile shrinks.  Bounded: given up
 * (-ETIMEDOUT) once the backing stood still for BackingTimeout, the replay
 * finishing in the background whenever the server lets it (-EBUSY until
 * then).  @sum (added to) gets the counts.  0 or -errno.
 */
struct reintegrate_stats;
int view_replay_while_serving(struct view *v, struct reintegrate_stats *sum);
/* One replay of what is pending, bounded as above (the last step, under mode_lock). */
int view_replay(struct view *v, struct reintegrate_stats *sum);
/* view-delete-bound.c: -ECANCELED with the figures in @why when reconnecting
 * would delete more of the pinned copy than ReconnectDeleteLimit. */
int reconnect_delete_check(struct view *v, GString *why);
int view_reintegration_dry_run(struct view *v, struct ctl_out *out, GString *err);
/* view-dry-run.c: removes the log copies of dry runs a previous worker left. */
void view_dry_run_sweep(struct view *v);
void view_state_out(struct view *v, GString *out);
/* Recounts the conflicts (after a reconnect or a resolve). */
void view_conflicts_recount(struct view *v);
/* view-offline-log.c, with offline_lock held: the log's id of mirror entry
 * dfd/name (dfd itself when name is NULL); false when no record names it. */
bool offline_entry_lid(struct view *v, int dfd, const char *name, uint64_t *lid);
/* view-offline-log.c, the log's guard of write-back's fetches: */
/* Whether a record not yet on the server creates, removes or moves @name in
 * mirror directory @mdfd (the application's doing: never fetched over). */
bool writeback_name_logged(struct view *v, int mdfd, const char *name);
/* Whether a record not yet on the server changes mirror entry mdfd/name's
 * object (its content, attributes, names, or, a directory, its entries). */
bool writeback_object_logged(struct view *v, int mdfd, const char *name);
/* Online: -FCACHE_ECONFLICT when server inode ino is held by a structural
 * conflict (view-offline-log.c). */
int view_conflict_errno(struct view *v, uint64_t ino);

/* Directory levels a walk of a tree (pins, mirror, census) follows: ELOOP beyond. */
#define VIEW_MAX_DEPTH 2048

/* view-mirror-marks.c: what the mirror's entries carry on disk (see there). */
#define MIRROR_COMPLETE 1u      /* a directory every entry of which is mirrored */
#define MIRROR_STALE 2u         /* a file's copy that may hold bytes the server lacks:
                                 * copied again at the next note or resync, never
                                 * served offline meanwhile */
#define MIRROR_CHANGED 4u       /* changed offline since the base was taken: the
                                 * object's own times are the later ones, not the
                                 * base's (offline_translate_stat()) */
struct mirror_base {
        struct oplog_version ver;       /* the backing identity; content "" */
        uint32_t flags;
};
/* dfd/name, or dfd itself when name is NULL or "". */
int mirror_get_base(int dfd, const char *name, struct mirror_base *b);
int mirror_get_lid(int dfd, const char *name, uint64_t *lid);
/* dfd/name's base set (replacing a log id), or removed. */
int mirror_set_base(int dfd, const char *name, const struct mirror_base *b);
int mirror_clear_base(int dfd, const char *name);
/* dfd/name becomes the mirror of the server object @b describes (no longer a new one). */
int mirror_take_identity(int dfd, const char *name, const struct mirror_base *b);
int mirror_set_lid(int dfd, const char *name, uint64_t lid);
bool mirror_xattr_hidden(const char *name);
/* Offline: is every entry of mirror directory dfd there (a name it lacks does not exist)? */
bool offline_dir_complete(int dfd);
/* Is @name a copy's temporary in a mirror directory (never an object)? */
bool mirror_is_tmp(const char *name);
/* A temporary of the mirror's whose process is gone (a worker killed while
 * moving a file in): nothing will rename it into place. */
bool mirror_tmp_orphaned(const char *name);
/* Whether an object of this type may have several names (hard links), which
 * the mirror keeps as one object: regular and special files (FIFOs, devices,
 * sockets), not directories or symlinks. */
bool mirror_linkable(mode_t mode);
/* Is one link of a mirror object (stat st, server inode sino) the index's? */
bool mirror_links_counted(struct view *v, const struct stat *st, uint64_t sino);
/* Whether no name holds mirror object @st (its base's server inode @sino):
 * unlinked, or its only link left the links index's. */
bool mirror_nameless(struct view *v, const struct stat *st, uint64_t sino);
/* Whether the object stat'ed as st has its names kept as one mirror object. */
bool mirror_kept_as_links(struct view *v, const struct stat *st);
/* The name of server inode @ino's entry in CacheDir/mirror.links. */
void mirror_links_key(char *buf, size_t len, uint64_t ino);
/* Marks the mirror's copy fd as one that may hold what the server lacks
 * (MIRROR_STALE): 0 or -errno. */
int mirror_mark_stale(int fd);
/* Whether mirror object fd is so marked. */
bool mirror_copy_stale(int fd);
/* Offline, before a change to mirror object dfd/name (dfd itself when name
 * is NULL): marks its base MIRROR_CHANGED, once.  0 (also for an object
 * with no base: made offline) or -errno. */
int mirror_mark_changed(int dfd, const char *name);
/* A new temporary's name for a mirror directory. */
void mirror_tmp_name(char *buf, size_t len);
/* Is @name a temporary of this process's (its walks may still move it in)? */
bool mirror_tmp_own(const char *name);

/* view-mirror.c: the local mirror of the pinned subtrees (see there). */
int mirror_open(struct view *v);
/* Copies @size bytes of @from to @to, both from offset 0 (in the kernel where it can). */
int mirror_copy_content(int from, int to, off_t size);
/* rm -rf of dfd/name (not following symlinks): 0, or the last step's -errno. */
int view_remove_tree(int dfd, const char *name);
/* Mirrors volume path rel (and its subtree when recursive) from the backing;
 * -EHOSTDOWN while offline. */
int mirror_sync_path(struct view *v, const char *rel, bool recursive);
/*
 * A pin's fetch into the mirror: mark() is called for every regular file
 * met (to pin it in the store), res counts files, directories and bytes
 * fetched, job (may be NULL) follows and can cancel it (-ECANCELED).
 */
struct mirror_fill {
        struct pin_result *res;
        struct pin_job *job;
        int prio;
        int (*mark)(struct view *v, const struct stat *st, struct mirror_fill *fill);
};
int mirror_fill_path(struct view *v, const char *rel, bool recursive, struct mirror_fill *fill);
/* Every pin again; the caller holds mode_lock and the view is online
 * (-EHOSTDOWN: it went offline meanwhile, the rest not synced). */
int mirror_sync_all(struct view *v);
/* mirror_sync_all() bounded by BackingTimeout (view-mirror.c): -ETIMEDOUT when
 * the server stopped answering (the walk stops at its next entry), -EBUSY
 * while a walk given up on still waits on it. */
int mirror_resync(struct view *v);
/* The replay wrote the bytes of mirror file @local (its stat then) to server
 * file @server (its stat after): the resync takes them as the same while
 * both keep these identities, without reading the server's back. */
void mirror_note_replayed(struct view *v, const struct stat *server, const struct stat *local);
/* The replay then changed only the owner, mode or times of server file
 * @before (now @after): still the bytes it wrote. */
void mirror_note_restamped(struct view *v, const struct stat *before, const struct stat *after);
int mirror_unpin_path(struct view *v, const char *rel);
/* Backing file bdfd/name (or bdfd itself), complete in the store's blocks
 * and unpinned, becomes a container in the mirror at its path (the store's
 * file linked there, no copy); its directories are mirrored not complete.
 * -EAGAIN when it no longer qualifies, -EHOSTDOWN offline. */
int mirror_cache_file(struct view *v, int bdfd, const char *name);
/* Waits (at most @ms, 0: no bound) until the files the store told complete
 * so far went into the mirror, or were given up on; whether they did. */
bool mirror_cache_wait(uint64_t ms);
/*
 * view-fetch-pool.c, the fetch pool: fn(ctx, i) for every i below n, on up to FetchThreads
 * threads (the caller's one of them), each taking the next index.  What
 * waits on the backing's round trips (copies, the resync's look-ups, a
 * switch's look-ups of the nodes' names) goes through it.
 */
void fetch_pool_run(struct view *v, guint n, void (*fn)(void *ctx, guint i), void *ctx);
/* FetchThreads=, or when unset 8 on a local backing and 16 on a network one. */
unsigned view_fetch_threads(const struct view *v);
/*
 * In write-back: name @name that mirror directory @mdfd (not complete) lacks,
 * fetched from the server into it (a file copied whole, an unpinned container
 * of the store's; a directory not complete; a symlink), under BackingTimeout,
 * never over anything and never while removed(v, mdfd, name) says a pending
 * record removed it.  0 (it is there now), -ENOENT (not on the server, or
 * removed), -EAGAIN (the volume switched, or something else put it there
 * meanwhile: look it up again), -EHOSTDOWN (why logged: no answer, a server
 * error, another type, too big for CacheSize, the directory not the server's).
 * *why (may be NULL) gets the error before it became -EHOSTDOWN (-ETIMEDOUT:
 * no answer within BackingTimeout).
 */
int mirror_fetch_name(struct view *v, int mdfd, const char *name,
                      bool (*removed)(struct view *v, int mdfd, const char *name), int *why);
/* As mirror_fetch_name(), for a pin: a file with several names on the server
 * is fetched too, as one object of the mirror that its names share (the
 * resync's hard links), not an unpinned container. */
int mirror_fetch_pinned_name(struct view *v, int mdfd, const char *name,
                             bool (*removed)(struct view *v, int mdfd, const char *name),
                             int *why);
/* What mirror_refresh_name() may put a newer copy over: may_replace() is
 * asked with mode_lock held exclusively, as the copy would go in place. */
struct mirror_refresh {
        bool (*may_replace)(struct view *v, int mdfd, const char *name, void *ud);
        void *ud;
};
/* As mirror_fetch_name(), for regular file @name the mirror has in an older
 * version of the server's: the server's current one is copied and renamed
 * over it if re->may_replace() lets it (else -EBUSY), and the store's
 * object becomes the new copy. */
int mirror_refresh_name(struct view *v, int mdfd, const char *name,
                        bool (*removed)(struct view *v, int mdfd, const char *name),
                        const struct mirror_refresh *re, int *why);
/* The cached (unpinned) file @rel of the mirror, if it is still the file of
 * descriptor fd, goes, and the directories only it kept. */
int mirror_remove_cached(struct view *v, const char *rel, int fd);
/* view-reindex.c: after the index was made anew, the mirror's cached files
 * are indexed again on a thread of their own (see there); query state. */
void view_reindex_start(struct view *v);
void view_reindex_state(GString *out);
/* After a reconnect: the unpinned containers whose server file changed go. */
void mirror_check_cached(struct view *v);
/* After a change online (mode_lock held shared) to backing object dfd/name,
 * or dfd itself: keeps the mirror current. */
void mirror_note_change(struct view *v, int pfd, const char *name);
/* Before the notes of a rename of backing file pfd/name to npfd/newname
 * online: the mirror's copy, if it is that object's, moves with it. */
void mirror_note_rename(struct view *v, int pfd, const char *name, int npfd,
                        const char *newname);
/* Online: the server inode the mirror's copy of backing entry dfd/name
 * copies (its base), or 0 when the mirror has none. */
uint64_t mirror_copy_ino(struct view *v, int dfd, const char *name);
/* Online, the mirror's copy of backing file dfd/name (server inode @ino),
 * for a writer's bytes to go there too: O_WRONLY, or -errno (-ENOENT when
 * its directory is not complete there, or the copy is another object). */
int mirror_open_copy(struct view *v, int dfd, const char *name, uint64_t ino);
/* Whether a change to an entry of directory dfd must reach the mirror at
 * close (the directory is complete there); *absent: the mirror has no such
 * directory at all, so no entry under it either. */
bool mirror_keeps_current(struct view *v, int dfd, bool *absent);
/* Changes (after) whenever the mirror may have gained a directory, and at
 * every rename and link through the view (what moved may now be at a path
 * the mirror has): a "no such directory in the mirror" found at generation
 * g, for a directory or a file created in it, holds while mirror_dirs_gen()
 * is still g.  Never 0. */
uint64_t mirror_dirs_gen(void);
void mirror_dirs_changed(void);

/*
 * view-conflicts.c: the control socket's conflict requests (query
 * conflicts, conflict-version, resolve).  Returns false when @cmdline is not
 * one of them; else fills @out or @err, sets *status.  @under: the
 * request's target, relative to the volume root ("" for the root).
 */
bool conflicts_execute(struct view *v, const char *cmdline, const char *under,
                       struct ctl_out *out, GString *err, int *status);

/*
 * view-metered.c: "set metered yes|no" from fcached (false when @cmdline is
 * another request), and whether the hoard walks wait for an unmetered link.
 */
bool metered_execute(struct view *v, const char *cmdline, struct ctl_out *out, GString *err,
                     int *status);
bool view_hoard_paused(struct view *v);

/* view-link-rtt.c: the measured round trip to the server */
void view_link_rtt_start(struct view *v);
/* A median round trip of 5 ms or more (false before it is measured, and on a local backing). */
bool view_link_poor(struct view *v);
void view_link_rtt_out(struct view *v, GString *out);

/*
 * view-writeback.c: WriteBack= (see there).  Is writeback wanted now (yes,
 * or auto on a metered connection)?  Before serving, a volume that would
 * start online starts in writeback instead; the trickle thread then ships
 * the log and follows WriteBack=auto.
 */
bool view_writeback_wanted(struct view *v);
void view_writeback_init(struct view *v);
void view_writeback_start(struct view *v);
/* Wakes the trickle (a change logged, the metered state changed). */
void view_writeback_kick(struct view *v);
/* "sync": false when @cmdline is another request; the target fd (volume
 * path @rel: "." is every path) says what to wait for. */
bool writeback_execute(struct view *v, const char *cmdline, int fd, const char *rel,
                       struct ctl_out *out, GString *err, int *status);
/* view-mirror.c: a lookup of @name that mirror directory @mdfd (not complete)
 * lacks: in writeback fetched from the server (mirror_fetch_name()) unless a
 * pending record removed it (-ENOENT); -EHOSTDOWN in any other state. */
int writeback_fetch_name(struct view *v, int mdfd, const char *name);
/*
 * view-pin-writeback.c: pin, prefetch and unpin in writeback, on the
 * mirror's object @fd (volume path @rel): the server's subtree is listed
 * and what the mirror lacks is fetched name by name (mirror_fetch_name()),
 * never a name a pending record touches nor over anything the mirror has,
 * under BackingTimeout (no answer: the volume goes offline, -EHOSTDOWN).
 * A pin marks the directories it made whole complete and pins their files.
 */
int pin_subtree_writeback(struct view *v, int fd, const char *rel, bool recursive, int prio,
                          bool dry_run, struct pin_result *res, uint64_t *available,
                          struct pin_job *job, GString *err);
int prefetch_subtree_writeback(struct view *v, int fd, const char *rel, bool recursive,
                               struct pin_result *res, struct pin_job *job, GString *err);
/* Unpins the mirror's files of the subtree (unpinned containers now, cullable,
 * so their directories are no longer complete) and removes the pin @rel. */
int unpin_subtree_writeback(struct view *v, int fd, const char *rel, bool recursive,
                            struct pin_result *res, int *pins_removed);
/* Waits until the records pending now are on the server (sync, and flush
 * of a path in writeback): those of the objects at mirror object @fd (its
 * subtree) and what they depend on, or all with fd -1.  0, -EHOSTDOWN
 * (offline), -ETIMEDOUT (no progress). */
int writeback_sync(struct view *v, int fd, struct ctl_out *out, GString *err);

/*
 * view-deadline.c: backing calls bounded by BackingTimeout (see there):
 * -ETIMEDOUT past it, and the volume goes offline.  Offline (or with no
 * BackingTimeout) they are plain calls.  name NULL or "": dirfd itself.
 */
int backing_fstatat(struct view *v, int dirfd, const char *name, struct stat *st);
/*
 * The _in variants take the tree the caller's descriptor is of
 * (vnode_get_served()), not the state now: a server's descriptor taken just
 * before a switch offline is still called bounded.
 */
int backing_fstatat_in(struct view *v, bool offline, int dirfd, const char *name, struct stat *st);
int backing_openat(struct view *v, int dirfd, const char *name, int flags);
int backing_openat_in(struct view *v, bool offline, int dirfd, const char *name, int flags);
/* Reopens pathfd as the caller @id (NULL: as root). */
/* O_PATH descriptor pathfd's file opened with @flags (through /proc), unbounded. */
int backing_reopen(int pathfd, int flags);
int backing_reopen_bounded(struct view *v, int pathfd, int flags, const struct caller_id *id);
int backing_reopen_in(struct view *v, bool offline, int pathfd, int flags,
                      const struct caller_id *id);
/* Flushes (closes a duplicate of) fd, bounded; backing_close closes it on a helper. */
/* pwrite(2) of a backing file, as the caller id if given (bounded). */
ssize_t backing_pwrite(struct view *v, int fd, const void *buf, size_t size, off_t off,
                       const struct caller_id *id);
int backing_flush(struct view *v, int fd);
/* After a flush of written file fd: the error a helper's close of a write's
 * duplicate of it took meanwhile (a write the server refused), as -errno,
 * or 0; taken (reported once). */
int backing_write_error(struct view *v, int fd);
void backing_close(struct view *v, int fd);
/* Closes fd on a helper, unless it is O_PATH: closing any descriptor of a
 * network file flushes it, a round trip (unbounded) to its server. */
void backing_close_later(int fd);
/* Probes Backing= (by its path) on a helper even offline: 0 when it answers in time. */
int backing_probe(struct view *v);
/* As backing_probe(), online: a server found silent or gone (ENOTCONN of a
 * dead mount...) takes the volume offline. */
int backing_probe_noticed(struct view *v);
/* Waits at most BackingTimeout for the changes given up on (the server may
 * still make them) to be answered: 0, or -EBUSY while some still wait. */
int backing_wait_in_doubt(struct view *v);
/* What backing_query() reads of an object, never changing it. */
enum backing_query_kind {
        BQ_READLINK,            /* a symlink's target (fd: its O_PATH descriptor) */
        BQ_GETXATTR,            /* an xattr (size 0: its size) */
        BQ_DIR_GETXATTR,        /* the same of a directory (cheaper: getxattrat) */
        BQ_LISTXATTR,           /* the xattr names (size 0: their size) */
        BQ_STATFS,              /* its filesystem's statvfs (buf: a struct statvfs) */
};
/* As readlink(2), getxattr(2) or listxattr(2) of fd into buf, bounded as the
 * calls above: the length, or -errno. */
ssize_t backing_query(struct view *v, enum backing_query_kind kind, int fd, const char *name,
                      void *buf, size_t size);
ssize_t backing_query_in(struct view *v, bool offline, enum backing_query_kind kind, int fd,
                         const char *name, void *buf, size_t size);
/*
 * Runs fn(arg) on a helper, waiting at most BackingTimeout, online or
 * offline, without taking the volume offline.  -ETIMEDOUT: arg is no longer
 * the caller's (drop(arg) is called once fn is done with it); else fn's result.
 */
int backing_call(struct view *v, int (*fn)(void *arg), void *arg, void (*drop)(void *arg));
/* Whether the calls above run on helpers now (a network backing online with
 * a BackingTimeout); else they are plain calls. */
bool backing_bounded(struct view *v);
bool backing_bounded_in(struct view *v, bool offline);
/* backing_call() bounded as the calls above: made directly when they are,
 * and past the bound the volume goes offline. */
int backing_call_bounded(struct view *v, int (*fn)(void *arg), void *arg, void (*drop)(void *arg));
int backing_call_bounded_in(struct view *v, bool offline, int (*fn)(void *arg), void *arg,
                            void (*drop)(void *arg));
/* On a helper: whether the requester of the call under way gave up on it
 * (false on any other thread), so that work it no longer waits for stops. */
bool backing_call_abandoned(void);

/* One change of the backing, as backing_change() makes it. */
enum backing_change_kind {
        BC_MKDIR, BC_MKNOD, BC_SYMLINK, BC_CREATE, BC_LINK, BC_UNLINK, BC_RENAME, BC_CHMOD,
        BC_CHOWN, BC_TRUNCATE, BC_UTIMENS, BC_SETXATTR, BC_REMOVEXATTR, BC_FALLOCATE,
};
struct backing_change {
        enum backing_change_kind kind;
        int fd;                 /* the directory of name, or the object (O_PATH, or open_file) */
        const char *name;
        int fd2;                /* link, rename: the new name's directory; else -1 */
        const char *name2;      /* link, rename: the new name; symlink: its target;
                                 * xattrs: the attribute */
        const void *value;      /* setxattr */
        size_t size;
        int flags;              /* create: open(2)'s; unlink: AT_REMOVEDIR; rename: RENAME_*;
                                 * setxattr: XATTR_*; fallocate: its mode; utimens:
                                 * AT_EMPTY_PATH for a symlink itself */
        bool open_file;         /* chmod, truncate, utimens: fd is an open file */
        mode_t mode;
        dev_t rdev;
        uid_t uid;
        gid_t gid;
        off_t off, len;         /* truncate: the size; fallocate */
        struct timespec times[2];
};
/*
 * Makes change c on the backing as the caller id (NULL: as the daemon),
 * bounded as the calls above (its own copies of c's descriptors, names and
 * value on the helper): 0 (a create: the new descriptor) or -errno;
 * -ETIMEDOUT past the bound, and the volume goes offline (the request is
 * then made again offline: the server may still apply this one later).
 */
int backing_change(struct view *v, const struct backing_change *c, const struct caller_id *id);
/*
 * Long work against the backing (a dry run, a walk): fn(arg) on a thread of
 * its own, which calls backing_progress_step() as it moves; the caller waits
 * while it moves and gives up (-ETIMEDOUT, arg then drop()'s as above) once
 * it stood still for BackingTimeout (0: waits for ever).  *steps (may be
 * NULL) gets the steps made.
 */
struct backing_progress;
void backing_progress_step(struct backing_progress *p);
int backing_call_moving(struct view *v, int (*fn)(void *arg, struct backing_progress *p),
                        void *arg, void (*drop)(void *arg), uint64_t *steps);

/*
 * view-identity.c: the backing is the filesystem and directory the volume
 * was made on (recorded at first sight in CacheDir/backing.id).
 */
struct backing_identity {
        uint64_t fstype;
        uint64_t fsid;
        uint64_t root_ino;
        /* A FUSE backing's mount source ("" unknown): FUSE gives every
         * mount filesystem id 0, and sshfs its root inode 1. */
        char source[256];
};
/* What opening Backing= found. */
struct backing_root {
        int root_fd;            /* O_PATH|O_DIRECTORY */
        int mount_fd;           /* O_RDONLY, for open_by_handle_at */
        struct stat st;
        struct backing_identity id;
        bool local;             /* view_fs_is_local */
        bool handles;           /* its file handles open again */
        bool names_identify;    /* inode numbers made up (struct view's) */
        char numbering[64];     /* names_identify: the mount that numbered them */
};
/* Opens Backing= by path and asks what the view needs of it, all on a helper
 * under BackingTimeout (online or offline): 0, -ETIMEDOUT, or open's -errno. */
int backing_open_root(struct view *v, struct backing_root *out);
/* The reason backing_open_root failed with @err, for a person. */
void backing_root_why(struct view *v, int err, GString *why);
/* 0 (recorded at first sight), or -EXDEV with @why. */
int backing_identity_compare(struct view *v, const struct backing_identity *seen, GString *why);
/*
 * Backing= cannot be opened (@err): for a volume that has seen its backing,
 * an empty private directory stands in for it (the identity check then
 * fails and the volume serves its local copy); else -err.
 */
int backing_stand_in(struct view *v, int err);
/* Opens Backing= again (bounded), checks it, and serves it from now on if it
 * is another mount; the caller holds mode_lock exclusively. */
int backing_reopen_root(struct view *v, GString *why);
/* At start: a backing that numbers its files anew at each mount (@b
 * names_identify), mounted again since the store's copies were indexed:
 * they are dropped. */
void backing_numbering_check(struct view *v, const struct backing_root *b);
/* Mounted again under a running worker (backing_reopen_root() found it):
 * at the switch online, the store's rows are unsure (store_numbers_unsure());
 * mode_lock held exclusively. */
void backing_numbering_unsure(struct view *v);
/* A resync went through online: the rows it did not confirm go (those it
 * confirmed took the pins' marks as it noted them: view-mirror.c). */
void backing_numbering_settle(struct view *v);

/* view-path.c: the device of the fcache view mounted topmost on @path; -ENOENT if none. */
int view_mount_find(const char *path, dev_t *dev);

/* view-session.c */
int view_worker_run(struct view *v, int fuse_fd);

/* view-readers.c: which FUSE thread reads /dev/fuse (see there).  A thread
 * waits for its turn to read (false: the session ended), may poll the
 * device briefly first, and says when it took a request. */
void fuse_readers_init(void);
bool fuse_readers_turn(void);
void fuse_readers_poll(int fd);
void fuse_readers_took(void);
/* Before a FUSE thread waits on something slow: another thread reads. */
void fuse_readers_may_block(void);
void fuse_readers_end(void);

/* view-passthrough.c (see there) */
struct iovec;
/* Is fd on a local filesystem (not FUSE or a network filesystem)? */
bool view_fs_is_local(int fd);
void passthrough_setup(struct view *v, int fuse_fd);
bool passthrough_on(void);
/* INIT reply (fuse_init_out of len bytes): adds FUSE_PASSTHROUGH if offered. */
void passthrough_patch_init(void *init_out, size_t len, uint64_t offered);
/* Every reply written: the OPEN/CREATE reply between begin and end on this
 * thread passes through backing_id (> 0). */
void passthrough_patch_reply(struct iovec *iov, int count);
void passthrough_reply_begin(int backing_id);
void passthrough_reply_end(void);
/* An open of node id as descriptor fd (local_copy: fd's content is a
 * complete local copy; created: by this open): the backing id to pass through (> 0), 0 to serve
 * it, or -errno; each open counted until passthrough_release(id), unless
 * it returned -errno.  The caller holds view_change_begin() for writers.
 * *stranded (may be NULL: such a writer gets -ETXTBSY): for a writer passed
 * through a file of the tree not served, a descriptor of that file (else -1). */
int passthrough_open(struct view *v, uint64_t id, int fd, int flags, bool regular,
                     bool local_copy, bool created, int *stranded);
/* true when that was the node's last open and the kernel's file was the
 * mirror's. */
bool passthrough_release(uint64_t id);
/*
 * The file the kernel reads and writes for node @id when it passes the
 * node through to the other tree's file than @offline's (opened before a
 * switch), reopened for writing; else -1.  A change the view makes for the
 * node (a truncate, a fallocate) is made there too: the kernel's readers
 * read it, and a writer's shipping copies it over the file served.
 */
int passthrough_other_tree_file(uint64_t id, bool offline);
/* fstat(2) of the file the kernel passes node @id's open files through:
 * 0, or -ENOENT when it passes none (or one it has not found again). */
int passthrough_file_stat(uint64_t id, struct stat *st);
/* The file the kernel passes node @id through, opened for writing, or -1. */
int passthrough_kernel_file(uint64_t id);
/* Node @id's file the kernel passes it through, opened with @flags, when
 * that file has no name left (no look-up reaches it); else -errno. */
int passthrough_nameless_file(uint64_t id, int flags);
/* The word the takeover log keeps for an open passed through: its backing
 * id, and which tree the kernel's file is of (a log of an older worker
 * does not say: PT_MODE_TREE clear). */
#define PT_MODE_COUNTED (1u << 31)
#define PT_MODE_TREE    (1u << 30)
#define PT_MODE_OFFLINE (1u << 29)      /* with PT_MODE_TREE: the mirror's */
#define PT_MODE_BACKING_ID(m) ((m) & ~(PT_MODE_COUNTED | PT_MODE_TREE | PT_MODE_OFFLINE))
/* PT_MODE_TREE and PT_MODE_OFFLINE for node @id passed through, else 0. */
uint32_t passthrough_tree_mode(uint64_t id);
/* A successor counts an open file its predecessor had counted (and keeps
 * its backing id, still registered on the connection). */
void passthrough_restore(struct view *v, uint64_t id, uint32_t mode);
/* After a takeover: whether node @id passes through to the other tree's
 * file than @offline's, and that file (@fd, duplicated) once found again. */
bool passthrough_in_other_tree(uint64_t id, bool offline);
void passthrough_adopt_file(uint64_t id, int fd);
/* At a takeover: the file of backing @bid the holder kept (FDSTORE_BACKING),
 * the very file the kernel holds; taken by the node restored with it. */
void passthrough_take_backing(uint32_t bid, int fd);
/* After a takeover: whether node @id passes through a file not found again
 * yet, and of which tree (*offline: the mirror's). */
bool passthrough_file_unknown(uint64_t id, bool *offline);
/* Whether the kernel passes some node through the mirror's file of inode
 * number @ino: the mirror updates such a file in place, never replaces it
 * (the kernel's readers and writers go on with it, a successor finds it by
 * its name). */
bool passthrough_holds_mirror_file(uint64_t ino);

/* view-fdstore.c: descriptors the holder keeps across a takeover.  Keys:
 * an open file's handle (its own descriptor), that with FDSTORE_STRANDED
 * (the file the kernel writes for it), FDSTORE_BACKING | a backing id (the
 * file the kernel passes that backing's opens through). */
#define FDSTORE_STRANDED (UINT64_C(1) << 63)
#define FDSTORE_BACKING (UINT64_C(1) << 62)
int fdstore_holder_start(int *worker_end);      /* the holder: 0 or -errno */
void fdstore_attach(int sock);                  /* a worker: its end */
int fdstore_keep(uint64_t key, int fd);         /* a duplicate goes to the holder */
/* A duplicate goes to the holder within 50 ms, or at the next
 * fdstore_flush(); a drop before that sends nothing. */
void fdstore_keep_soon(uint64_t key, int fd);
void fdstore_flush(void);
void fdstore_drop(uint64_t key);
/* Each descriptor kept, once, to @take (which owns it): how many, or -errno. */
int fdstore_take_all(void (*take)(void *ud, uint64_t key, int fd), void *ud);
bool passthrough_holds_mirror_files(void);      /* any */
void passthrough_count_read(void);
uint64_t passthrough_read_requests(void);

/* FUSE_FLUSH requests served (close(2)s that waited for the view), for query state. */
uint64_t view_flush_requests(void);
