/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * names.c: the stable string names of conflict kinds, actions, node types,
 * aspects, sources and content outcomes. These strings are an interface
 * (`query conflicts`, D-Bus, JSON): never rename one, only add.
 */
#include <errno.h>
#include <string.h>

#include "fcache-merge.h"

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

static const struct {
        const char *name;
        const char *description;
        bool structural;
} conflict_kinds[_FCACHE_CONFLICT_MAX] = {
        [FCACHE_CONFLICT_NONE] = { "none", "no conflict", false },
        [FCACHE_CONFLICT_CONTENT] = { "content", "edited here and on the server in overlapping places", false },
        [FCACHE_CONFLICT_BINARY] = { "binary", "binary file changed differently here and on the server", false },
        [FCACHE_CONFLICT_SYMLINK] = { "symlink", "symbolic link pointed elsewhere here and on the server", false },
        [FCACHE_CONFLICT_EDIT_DELETE] = { "edit-delete", "edited here, deleted on the server", true },
        [FCACHE_CONFLICT_DELETE_EDIT] = { "delete-edit", "deleted here, edited on the server", true },
        [FCACHE_CONFLICT_RENAME_RENAME] = { "rename-rename", "renamed differently here and on the server", true },
        [FCACHE_CONFLICT_RENAME_DELETE] = { "rename-delete", "renamed here, deleted on the server", true },
        [FCACHE_CONFLICT_DELETE_RENAME] = { "delete-rename", "deleted here, renamed on the server", true },
        [FCACHE_CONFLICT_CREATE_CREATE] = { "create-create", "created here and on the server with different contents", true },
        [FCACHE_CONFLICT_TYPE_CHANGE] = { "type-change", "replaced by another type of object (file, directory, symlink) while changed on the other side", true },
        [FCACHE_CONFLICT_CHILDREN_DELETE] = { "children-delete", "directory gained entries here, removed on the server", true },
        [FCACHE_CONFLICT_DELETE_CHILDREN] = { "delete-children", "directory removed here, gained entries on the server", true },
        [FCACHE_CONFLICT_MODE] = { "mode", "permissions changed differently here and on the server", false },
        [FCACHE_CONFLICT_OWNER] = { "owner", "owner or group changed differently here and on the server", false },
};

static const char *const action_names[_FCACHE_MERGE_ACTION_MAX] = {
        [FCACHE_MERGE_ACTION_NONE] = "none",
        [FCACHE_MERGE_ACTION_TAKE_LOCAL] = "take-local",
        [FCACHE_MERGE_ACTION_TAKE_REMOTE] = "take-remote",
        [FCACHE_MERGE_ACTION_MERGE_CONTENT] = "merge-content",
        [FCACHE_MERGE_ACTION_MERGE_METADATA] = "merge-metadata",
        [FCACHE_MERGE_ACTION_CONFLICT] = "conflict",
};

static const char *const node_type_names[_FCACHE_MERGE_NODE_MAX] = {
        [FCACHE_MERGE_NODE_ABSENT] = "absent",
        [FCACHE_MERGE_NODE_FILE] = "file",
        [FCACHE_MERGE_NODE_DIR] = "dir",
        [FCACHE_MERGE_NODE_SYMLINK] = "symlink",
};

static const char *const aspect_names[_FCACHE_MERGE_ASPECT_MAX] = {
        [FCACHE_MERGE_ASPECT_TYPE] = "type",
        [FCACHE_MERGE_ASPECT_CONTENT] = "content",
        [FCACHE_MERGE_ASPECT_LOCATION] = "location",
        [FCACHE_MERGE_ASPECT_MODE] = "mode",
        [FCACHE_MERGE_ASPECT_UID] = "uid",
        [FCACHE_MERGE_ASPECT_GID] = "gid",
        [FCACHE_MERGE_ASPECT_CHILDREN] = "children",
};

static const char *const source_names[_FCACHE_MERGE_FROM_MAX] = {
        [FCACHE_MERGE_FROM_BASE] = "base",
        [FCACHE_MERGE_FROM_LOCAL] = "local",
        [FCACHE_MERGE_FROM_REMOTE] = "remote",
        [FCACHE_MERGE_FROM_BOTH] = "both",
        [FCACHE_MERGE_FROM_MERGE] = "merge",
        [FCACHE_MERGE_FROM_CONFLICT] = "conflict",
};

static const char *const outcome_names[_FCACHE_MERGE_CONTENT_MAX] = {
        [FCACHE_MERGE_CONTENT_UNCHANGED] = "unchanged",
        [FCACHE_MERGE_CONTENT_TAKE_LOCAL] = "take-local",
        [FCACHE_MERGE_CONTENT_TAKE_REMOTE] = "take-remote",
        [FCACHE_MERGE_CONTENT_IDENTICAL] = "identical",
        [FCACHE_MERGE_CONTENT_MERGED] = "merged",
        [FCACHE_MERGE_CONTENT_CONFLICT] = "conflict",
};

/* Enums may be unsigned or signed; compare as unsigned to reject both ends. */
#define LOOKUP(table, i) ((unsigned) (i) < ELEMENTSOF(table) ? (table)[(unsigned) (i)] : NULL)

const char *fcache_conflict_kind_to_string(fcache_conflict_kind kind)
{
        return (unsigned) kind < ELEMENTSOF(conflict_kinds) ? conflict_kinds[kind].name : NULL;
}

const char *fcache_conflict_kind_describe(fcache_conflict_kind kind)
{
        return (unsigned) kind < ELEMENTSOF(conflict_kinds) ? conflict_kinds[kind].description : NULL;
}

bool fcache_conflict_kind_is_structural(fcache_conflict_kind kind)
{
        return (unsigned) kind < ELEMENTSOF(conflict_kinds) && conflict_kinds[kind].structural;
}

int fcache_conflict_kind_from_string(fcache_conflict_kind *out, const char *name)
{
        if (!out || !name)
                return -EINVAL;

        for (unsigned i = 0; i < ELEMENTSOF(conflict_kinds); i++)
                if (strcmp(conflict_kinds[i].name, name) == 0) {
                        *out = (fcache_conflict_kind) i;
                        return 0;
                }
        return -EINVAL;
}

const char *fcache_merge_action_to_string(fcache_merge_action action)
{
        return LOOKUP(action_names, action);
}

const char *fcache_merge_node_type_to_string(fcache_merge_node_type type)
{
        return LOOKUP(node_type_names, type);
}

const char *fcache_merge_aspect_to_string(fcache_merge_aspect aspect)
{
        return LOOKUP(aspect_names, aspect);
}

const char *fcache_merge_source_to_string(fcache_merge_source source)
{
        return LOOKUP(source_names, source);
}

const char *fcache_merge_content_outcome_to_string(fcache_merge_content_outcome outcome)
{
        return LOOKUP(outcome_names, outcome);
}
