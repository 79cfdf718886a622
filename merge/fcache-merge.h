/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fcache-merge.h: the public API of libfcache-merge, fcache's merge library.
 *
 * Reintegration (daemon) and fcache-resolve (CLI) use it to decide what to do
 * when a path was changed both locally (offline) and on the server:
 *
 *   - conflict kinds and actions with stable string names (for `query
 *     conflicts`, D-Bus and JSON);
 *   - fcache_merge_structure(): classify the base, local and remote states of
 *     one path into an action or a structural conflict (pure);
 *   - fcache_merge_content(): three-way merge of a regular file's bytes with
 *     libgit2's git_merge_file (pure, no repository);
 *   - fcache_merge_store_*(): base versions kept content-addressed in a libgit2
 *     object database (the only part that does I/O).
 *
 * Conventions (libgit2's): out-parameters come first; functions return >= 0 on
 * success and -errno on failure and never touch out-parameters on failure;
 * options structs carry a version and have an _INIT macro (NULL options mean
 * the defaults). A conflict is a result, not an error: it is reported in the
 * result with a return value of 0.
 *
 * libgit2 is initialized on first use, once for the life of the process
 * (git_libgit2_init() is reference counted, so other users are unaffected).
 * All functions are thread-safe except that calls on one store must not
 * overlap.
 *
 * Naming: "local" is the person's side (the volume's store, changed offline),
 * "remote" is the server's side (the backing now), "base" is the version both
 * started from. Two-sided kind names read local first: "edit-delete" means
 * edited locally, deleted on the server.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Conflict kinds and actions                                               */
/* ------------------------------------------------------------------------ */

/*
 * Conflict kinds. The numbers may change between releases; the string names
 * (fcache_conflict_kind_to_string) are the stable interface.
 */
typedef enum {
        FCACHE_CONFLICT_NONE = 0,        /* "none" */
        FCACHE_CONFLICT_CONTENT,         /* "content": text edits overlap */
        FCACHE_CONFLICT_BINARY,          /* "binary": binary file changed differently on both */
        FCACHE_CONFLICT_SYMLINK,         /* "symlink": symlink retargeted differently on both */
        FCACHE_CONFLICT_EDIT_DELETE,     /* "edit-delete": edited locally, deleted on the server */
        FCACHE_CONFLICT_DELETE_EDIT,     /* "delete-edit": deleted locally, edited on the server */
        FCACHE_CONFLICT_RENAME_RENAME,   /* "rename-rename": renamed to different names on both */
        FCACHE_CONFLICT_RENAME_DELETE,   /* "rename-delete": renamed locally, deleted on the server */
        FCACHE_CONFLICT_DELETE_RENAME,   /* "delete-rename": deleted locally, renamed on the server */
        FCACHE_CONFLICT_CREATE_CREATE,   /* "create-create": same name created on both, different objects */
        FCACHE_CONFLICT_TYPE_CHANGE,     /* "type-change": file/dir/symlink type changed against another change */
        FCACHE_CONFLICT_CHILDREN_DELETE, /* "children-delete": directory gained local entries, server removed it */
        FCACHE_CONFLICT_DELETE_CHILDREN, /* "delete-children": directory removed locally, server added entries */
        FCACHE_CONFLICT_MODE,            /* "mode": permission bits changed differently on both */
        FCACHE_CONFLICT_OWNER,           /* "owner": owner or group changed differently on both */
        _FCACHE_CONFLICT_MAX,
} fcache_conflict_kind;

/* The stable name of @kind ("none", "edit-delete", ...), or NULL if out of range. */
const char *fcache_conflict_kind_to_string(fcache_conflict_kind kind);

/* Parse a stable name. Returns 0, or -EINVAL for an unknown name. */
int fcache_conflict_kind_from_string(fcache_conflict_kind *out, const char *name);

/* A one-line English description for people ("edited here, deleted on the server"), or NULL. */
const char *fcache_conflict_kind_describe(fcache_conflict_kind kind);

/*
 * Whether @kind is structural: the object's existence, name or type is in
 * question, so the view answers FCACHE_ECONFLICT for it. Content, binary,
 * symlink, mode and owner conflicts leave one object with two candidate
 * values and are not structural.
 */
bool fcache_conflict_kind_is_structural(fcache_conflict_kind kind);

/* What to do with a path; see fcache_merge_structure(). */
typedef enum {
        FCACHE_MERGE_ACTION_NONE = 0,       /* "none": nothing to apply on either side */
        FCACHE_MERGE_ACTION_TAKE_LOCAL,     /* "take-local": apply the local state to the server */
        FCACHE_MERGE_ACTION_TAKE_REMOTE,    /* "take-remote": apply the remote state to the store */
        FCACHE_MERGE_ACTION_MERGE_CONTENT,  /* "merge-content": run fcache_merge_content() */
        FCACHE_MERGE_ACTION_MERGE_METADATA, /* "merge-metadata": combine non-colliding changes of both */
        FCACHE_MERGE_ACTION_CONFLICT,       /* "conflict": see the decision's conflict kind */
        _FCACHE_MERGE_ACTION_MAX,
} fcache_merge_action;

/* The stable name of @action, or NULL if out of range. */
const char *fcache_merge_action_to_string(fcache_merge_action action);

/* ------------------------------------------------------------------------ */
/* Structure: classify one path                                             */
/* ------------------------------------------------------------------------ */

typedef enum {
        FCACHE_MERGE_NODE_ABSENT = 0, /* the path does not exist on this side */
        FCACHE_MERGE_NODE_FILE,
        FCACHE_MERGE_NODE_DIR,
        FCACHE_MERGE_NODE_SYMLINK,
        _FCACHE_MERGE_NODE_MAX,
} fcache_merge_node_type;

/* The stable name of @type ("absent", "file", "dir", "symlink"), or NULL. */
const char *fcache_merge_node_type_to_string(fcache_merge_node_type type);

/*
 * The state of one object on one side. The three states passed to
 * fcache_merge_structure() describe the same object (the caller tracks
 * identity through its operation log), so a different parent or name than
 * base's means a rename.
 */
typedef struct {
        fcache_merge_node_type type;
        /*
         * FILE: an id of the content (fcache_merge_blob_id() suits);
         * SYMLINK: an id of the target, or the target itself. Compared as
         * strings; required for FILE and SYMLINK, ignored for DIR.
         */
        const char *content_id;
        uint32_t mode; /* permission bits; only 07777 is compared */
        uint32_t uid;
        uint32_t gid;
        const char *parent; /* the parent directory's identity (id or path); NULL equals "" */
        const char *name;   /* the entry name in parent; NULL equals "" */
        /*
         * DIR: entries were created in or moved into it on this side since
         * base. Removing such a directory on the other side is a conflict.
         */
        bool has_new_children;
} fcache_merge_node;

#define FCACHE_MERGE_NODE_INIT { FCACHE_MERGE_NODE_ABSENT }

/* Parts of a node's state that are merged independently. */
typedef enum {
        FCACHE_MERGE_ASPECT_TYPE = 0, /* "type" */
        FCACHE_MERGE_ASPECT_CONTENT,  /* "content" */
        FCACHE_MERGE_ASPECT_LOCATION, /* "location": parent and name */
        FCACHE_MERGE_ASPECT_MODE,     /* "mode" */
        FCACHE_MERGE_ASPECT_UID,      /* "uid" */
        FCACHE_MERGE_ASPECT_GID,      /* "gid" */
        FCACHE_MERGE_ASPECT_CHILDREN, /* "children": has_new_children */
        _FCACHE_MERGE_ASPECT_MAX,
} fcache_merge_aspect;

#define FCACHE_MERGE_ASPECT_BIT(a) (1u << (a))

/* The stable name of @aspect, or NULL. */
const char *fcache_merge_aspect_to_string(fcache_merge_aspect aspect);

/* Where an aspect of the merged state comes from. */
typedef enum {
        FCACHE_MERGE_FROM_BASE = 0, /* "base": unchanged on both sides */
        FCACHE_MERGE_FROM_LOCAL,    /* "local": changed locally only */
        FCACHE_MERGE_FROM_REMOTE,   /* "remote": changed on the server only */
        FCACHE_MERGE_FROM_BOTH,     /* "both": changed identically on both */
        FCACHE_MERGE_FROM_MERGE,    /* "merge": content changed on both; merge the bytes */
        FCACHE_MERGE_FROM_CONFLICT, /* "conflict": changed differently on both */
        _FCACHE_MERGE_FROM_MAX,
} fcache_merge_source;

/* The stable name of @source, or NULL. */
const char *fcache_merge_source_to_string(fcache_merge_source source);

/* Flags for fcache_merge_structure_options.flags. */
enum {
        /* Owner and group are not merged (filesystems that squash them); the remote's are kept. */
        FCACHE_MERGE_STRUCTURE_IGNORE_OWNER = 1u << 0,
        /*
         * A deletion wins over a mode/owner-only change on the other side
         * instead of being an edit-delete or delete-edit conflict.
         */
        FCACHE_MERGE_STRUCTURE_DELETE_WINS_OVER_METADATA = 1u << 1,
};

typedef struct {
        unsigned int version;
        unsigned int flags;
} fcache_merge_structure_options;

#define FCACHE_MERGE_STRUCTURE_OPTIONS_VERSION 1
#define FCACHE_MERGE_STRUCTURE_OPTIONS_INIT { FCACHE_MERGE_STRUCTURE_OPTIONS_VERSION }

typedef struct {
        fcache_merge_action action;
        fcache_conflict_kind conflict; /* NONE unless action is CONFLICT */
        /* FCACHE_MERGE_ASPECT_BIT()s changed against base on each side, and colliding. */
        unsigned int changed_local;
        unsigned int changed_remote;
        unsigned int collisions;
        /* Where each aspect of the merged state comes from. */
        fcache_merge_source from[_FCACHE_MERGE_ASPECT_MAX];
        /*
         * The merged state, unless action is CONFLICT (then it is ABSENT).
         * Its strings point into the inputs. With MERGE_CONTENT its
         * content_id is NULL: the content merge decides.
         */
        fcache_merge_node result;
} fcache_merge_decision;

/*
 * Classify a path. Parents are classified as paths of their own: a
 * directory that gained entries on one side is passed with has_new_children,
 * so removing it on the other side is reported once, at the directory
 * (children-delete or delete-children), and the entries inside wait for that
 * conflict's resolution. Entries moved into a directory count as new there.
 *
 * @base may be NULL for "did not exist at base" (same as an
 * ABSENT node); @local and @remote are required. Returns 0 with *out filled
 * (a conflict is reported in out->action / out->conflict), or -EINVAL for
 * bad arguments (NULL, an unknown type, a FILE or SYMLINK without
 * content_id, an options version this library does not know).
 */
int fcache_merge_structure(fcache_merge_decision *out,
                           const fcache_merge_node *base,
                           const fcache_merge_node *local,
                           const fcache_merge_node *remote,
                           const fcache_merge_structure_options *opts);

/*
 * The name for keeping one side of a conflict next to the other ("keep
 * both"): ".@tag" goes before the last extension, so the copy still opens
 * with the same application: "report.txt" -> "report.local.txt",
 * "Makefile" -> "Makefile.local", ".bashrc" -> ".bashrc.local". A @counter
 * above 1 makes it unique when that name is taken: "report.local-2.txt".
 * The name is shortened (at a UTF-8 character boundary, never in the tag or
 * extension) to fit NAME_MAX. *out is malloc()ed. Returns 0, -EINVAL for an
 * empty, ".", ".." or '/'-containing name or tag, -ENAMETOOLONG, -ENOMEM.
 */
int fcache_merge_keep_both_name(char **out, const char *name, const char *tag, unsigned counter);

/* ------------------------------------------------------------------------ */
/* Content: three-way merge of a regular file                               */
/* ------------------------------------------------------------------------ */

/* A borrowed byte buffer. */
typedef struct {
        const void *data; /* may be NULL when size is 0 */
        size_t size;
} fcache_merge_buf;

#define FCACHE_MERGE_BUF(d, n) ((fcache_merge_buf){ (d), (n) })

/* How a text conflict is rendered for display/edit. */
typedef enum {
        FCACHE_MERGE_STYLE_DIFF3 = 0, /* <<<<<<< local, ||||||| base, =======, >>>>>>> remote */
        FCACHE_MERGE_STYLE_MERGE,     /* without the base section */
        FCACHE_MERGE_STYLE_ZDIFF3,    /* diff3 with common lines moved out of the conflict */
        _FCACHE_MERGE_STYLE_MAX,
} fcache_merge_style;

/*
 * Flags for fcache_merge_content_options.flags (the text merge's diff
 * options). The whitespace ones let a whitespace-only change on one side
 * (a CRLF -> LF conversion, say) be dropped from a merge, so none is set by
 * default.
 */
enum {
        FCACHE_MERGE_CONTENT_IGNORE_WHITESPACE = 1u << 0,
        FCACHE_MERGE_CONTENT_IGNORE_WHITESPACE_CHANGE = 1u << 1,
        FCACHE_MERGE_CONTENT_IGNORE_WHITESPACE_EOL = 1u << 2,
        FCACHE_MERGE_CONTENT_PATIENCE = 1u << 3,
        FCACHE_MERGE_CONTENT_MINIMAL = 1u << 4,
};

/* git's binary heuristic looks this far for a NUL byte. */
#define FCACHE_MERGE_GIT_BINARY_SCAN 8000
/* Default largest input that is text-merged; larger is treated as binary. */
#define FCACHE_MERGE_DEFAULT_MAX_TEXT_SIZE ((size_t)256 << 20)

typedef struct {
        unsigned int version;
        fcache_merge_style style; /* of the conflict rendering */
        unsigned int flags;
        const char *base_label;   /* marker labels; NULL: "base", "local", "remote" */
        const char *local_label;
        const char *remote_label;
        unsigned short marker_size; /* 0: 7 ("<<<<<<<") */
        /* Bytes scanned for a NUL by the binary check; 0: the whole buffer. */
        size_t binary_scan_limit;
        /* Inputs larger than this are treated as binary; 0: FCACHE_MERGE_DEFAULT_MAX_TEXT_SIZE. */
        size_t max_text_size;
} fcache_merge_content_options;

#define FCACHE_MERGE_CONTENT_OPTIONS_VERSION 1
#define FCACHE_MERGE_CONTENT_OPTIONS_INIT { FCACHE_MERGE_CONTENT_OPTIONS_VERSION }

typedef enum {
        FCACHE_MERGE_CONTENT_UNCHANGED = 0, /* "unchanged": both sides equal base */
        FCACHE_MERGE_CONTENT_TAKE_LOCAL,    /* "take-local": only the local side changed */
        FCACHE_MERGE_CONTENT_TAKE_REMOTE,   /* "take-remote": only the remote side changed */
        FCACHE_MERGE_CONTENT_IDENTICAL,     /* "identical": both made the same change */
        FCACHE_MERGE_CONTENT_MERGED,        /* "merged": non-overlapping text changes combined */
        FCACHE_MERGE_CONTENT_CONFLICT,      /* "conflict": see the result's conflict kind */
        _FCACHE_MERGE_CONTENT_MAX,
} fcache_merge_content_outcome;

/* The stable name of @outcome, or NULL. */
const char *fcache_merge_content_outcome_to_string(fcache_merge_content_outcome outcome);

/*
 * The result of a content merge. All buffers are owned by the result (free
 * it with fcache_merge_content_result_free()) and have a NUL byte after
 * their size, which is not counted.
 */
typedef struct {
        fcache_merge_content_outcome outcome;
        fcache_conflict_kind conflict; /* NONE, CONTENT or BINARY */
        bool binary;                   /* some input was treated as binary */
        /* Unless CONFLICT: the merged content (never NULL, possibly empty). */
        char *merged;
        size_t merged_size;
        /*
         * CONTENT conflict: the text with conflict markers in the requested
         * style. For display and for editing by the person only, never to be
         * written into their file without them.
         */
        char *rendering;
        size_t rendering_size;
        /* CONFLICT: copies of all three versions (base NULL if there was none). */
        char *base;
        size_t base_size;
        char *local;
        size_t local_size;
        char *remote;
        size_t remote_size;
} fcache_merge_content_result;

/*
 * Three-way merge of a regular file. @base NULL means there was no common
 * version (both sides created the file). Identical changes are clean; if any
 * input is binary and both sides changed differently, the result is a BINARY
 * conflict; otherwise text is merged with git_merge_file. Returns 0 with
 * *out filled, -EINVAL for bad arguments, -ENOMEM, or -EIO if libgit2 fails.
 */
int fcache_merge_content(fcache_merge_content_result *out,
                         const fcache_merge_buf *base,
                         const fcache_merge_buf *local,
                         const fcache_merge_buf *remote,
                         const fcache_merge_content_options *opts);

/* Free what a result owns and zero it. NULL is fine. */
void fcache_merge_content_result_free(fcache_merge_content_result *result);

/*
 * Whether @data is binary: a NUL byte within the first @scan_limit bytes
 * (0: the whole buffer; FCACHE_MERGE_GIT_BINARY_SCAN is git's notion).
 */
bool fcache_merge_is_binary(const void *data, size_t size, size_t scan_limit);

/*
 * Count conflict-marker lines ("<<<<<<< ", "||||||| ", "=======",
 * ">>>>>>> " at a line start, @marker_size characters long, 0: 7) in @data,
 * so that an editing tool can tell whether the person removed them all.
 */
size_t fcache_merge_count_markers(const void *data, size_t size, unsigned short marker_size);

/* ------------------------------------------------------------------------ */
/* Base versions: a content-addressed store (libgit2 object database)       */
/* ------------------------------------------------------------------------ */

/* A blob id: 40 lower-case hex digits (git's SHA-1 blob id) and a NUL. */
#define FCACHE_MERGE_ID_SIZE 41

/* The id @data gets in a store, without storing it. Returns 0 or -errno. */
int fcache_merge_blob_id(char out[FCACHE_MERGE_ID_SIZE], const void *data, size_t size);

/*
 * The id of the bytes open as @fd, read in pieces (never mapped: another
 * process may shorten the file meanwhile, and a mapping would fault).
 * Returns 0 or -errno; -EIO also when the file came out shorter than its
 * size when the read began.
 */
int fcache_merge_blob_id_fd(char out[FCACHE_MERGE_ID_SIZE], int fd);

/* Whether @id is a well-formed blob id (40 hex digits). */
bool fcache_merge_id_is_valid(const char *id);

typedef struct fcache_merge_store fcache_merge_store;

enum {
        /* Do not fsync objects (tests, throw-away stores). */
        FCACHE_MERGE_STORE_NO_FSYNC = 1u << 0,
};

typedef struct {
        unsigned int version;
        unsigned int flags;
} fcache_merge_store_options;

#define FCACHE_MERGE_STORE_OPTIONS_VERSION 1
#define FCACHE_MERGE_STORE_OPTIONS_INIT { FCACHE_MERGE_STORE_OPTIONS_VERSION }

/*
 * Open the store in directory @path (e.g. <CacheDir>/bases), creating it
 * with mode 0700 if it does not exist (its parent must). Objects are loose
 * git objects (0400); unless NO_FSYNC, a put returns only once the object
 * and the directory entries leading to it are on disk. Calls on one store
 * must not run concurrently. Returns 0 or -errno.
 */
int fcache_merge_store_open(fcache_merge_store **out, const char *path,
                            const fcache_merge_store_options *opts);

/* Close a store. NULL is fine. */
void fcache_merge_store_free(fcache_merge_store *store);

/* Store a blob; *out gets its id. Storing an existing blob is cheap. Returns 0 or -errno. */
int fcache_merge_store_put(char out[FCACHE_MERGE_ID_SIZE], fcache_merge_store *store,
                           const void *data, size_t size);

/*
 * Store the contents of the regular file open at @fd, from offset 0 to its
 * end, without reading it all into memory. Returns 0, -EAGAIN if the file
 * changed size while it was read, or -errno.
 */
int fcache_merge_store_put_fd(char out[FCACHE_MERGE_ID_SIZE], fcache_merge_store *store, int fd);

/*
 * Read a blob. *out_data is malloc()ed with a NUL after *out_size; free()
 * it. Returns 0, -EINVAL for a malformed id, -ENOENT if it is not stored,
 * -EIO if the stored object is corrupt, or -errno.
 */
int fcache_merge_store_get(void **out_data, size_t *out_size, fcache_merge_store *store,
                           const char *id);

/* Returns 1 if @id is stored, 0 if not, or -errno. */
int fcache_merge_store_contains(fcache_merge_store *store, const char *id);

/*
 * Garbage collection: delete every stored blob whose id is not among the
 * @n_keep ids in @keep, and leftovers of interrupted writes. A malformed id
 * in @keep fails the call with -EINVAL before anything is deleted.
 * *out_removed (may be NULL) gets the number of blobs deleted. Returns 0 or
 * -errno (the first error; the other deletions are still attempted).
 */
int fcache_merge_store_gc(size_t *out_removed, fcache_merge_store *store,
                          const char *const *keep, size_t n_keep);

#ifdef __cplusplus
}
#endif
