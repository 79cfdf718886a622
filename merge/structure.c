/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * structure.c: classify the base, local and remote states of one path into
 * an action or a structural conflict. Pure: no I/O, no allocation.
 *
 * The model: a deletion is a change of type to ABSENT, so "changed" is one
 * bit mask per side over the aspects (type, content, location, mode, uid,
 * gid, children). An object whose type changed on one side is gone on that
 * side and replaced by a new one, so a type change agrees with a deletion on
 * the other side. Otherwise aspects merge one by one: changed on one side
 * only -> that side, changed identically -> either, changed differently ->
 * a collision (file content collisions go to the content merge instead).
 */
#include <errno.h>
#include <string.h>

#include "fcache-merge.h"

#define ASPECT(a) FCACHE_MERGE_ASPECT_BIT(FCACHE_MERGE_ASPECT_##a)
#define ATTR_ASPECTS (ASPECT(MODE) | ASPECT(UID) | ASPECT(GID))

/* NULL and "" are the same parent/name (the root, or unknown). */
static bool str_eq(const char *a, const char *b)
{
        return strcmp(a ? a : "", b ? b : "") == 0;
}

static bool present(const fcache_merge_node *n)
{
        return n->type != FCACHE_MERGE_NODE_ABSENT;
}

static bool has_content(const fcache_merge_node *n)
{
        return n->type == FCACHE_MERGE_NODE_FILE || n->type == FCACHE_MERGE_NODE_SYMLINK;
}

/* Whether aspect @a has the same value in @x and @y (of the same type). */
static bool aspect_equal(fcache_merge_aspect a, const fcache_merge_node *x, const fcache_merge_node *y)
{
        switch (a) {
        case FCACHE_MERGE_ASPECT_TYPE:
                return x->type == y->type;
        case FCACHE_MERGE_ASPECT_CONTENT:
                return !has_content(x) || str_eq(x->content_id, y->content_id);
        case FCACHE_MERGE_ASPECT_LOCATION:
                return str_eq(x->parent, y->parent) && str_eq(x->name, y->name);
        case FCACHE_MERGE_ASPECT_MODE:
                return ((x->mode ^ y->mode) & 07777) == 0;
        case FCACHE_MERGE_ASPECT_UID:
                return x->uid == y->uid;
        case FCACHE_MERGE_ASPECT_GID:
                return x->gid == y->gid;
        default:
                return true;
        }
}

static bool aspect_ignored(fcache_merge_aspect a, unsigned flags)
{
        return (flags & FCACHE_MERGE_STRUCTURE_IGNORE_OWNER) &&
               (a == FCACHE_MERGE_ASPECT_UID || a == FCACHE_MERGE_ASPECT_GID);
}

/* The aspects of @side that differ from @base. */
static unsigned changes(const fcache_merge_node *base, const fcache_merge_node *side, unsigned flags)
{
        unsigned mask = 0;

        if (side->type == FCACHE_MERGE_NODE_DIR && side->has_new_children)
                mask |= ASPECT(CHILDREN);
        if (base->type != side->type)
                return mask | ASPECT(TYPE);
        if (!present(side))
                return mask;
        for (fcache_merge_aspect a = FCACHE_MERGE_ASPECT_CONTENT; a <= FCACHE_MERGE_ASPECT_GID; a++)
                if (!aspect_ignored(a, flags) && !aspect_equal(a, base, side))
                        mask |= FCACHE_MERGE_ASPECT_BIT(a);
        return mask;
}

static void set_conflict(fcache_merge_decision *d, fcache_conflict_kind kind, unsigned collisions)
{
        d->action = FCACHE_MERGE_ACTION_CONFLICT;
        d->conflict = kind;
        d->collisions |= collisions;
        for (fcache_merge_aspect a = 0; a < _FCACHE_MERGE_ASPECT_MAX; a++)
                if (collisions & FCACHE_MERGE_ASPECT_BIT(a))
                        d->from[a] = FCACHE_MERGE_FROM_CONFLICT;
        d->result = (fcache_merge_node) FCACHE_MERGE_NODE_INIT;
}

/* The whole state of one side wins (a create, a delete, a replacement). */
static void take_side(fcache_merge_decision *d, const fcache_merge_node *side, bool local)
{
        fcache_merge_source src = local ? FCACHE_MERGE_FROM_LOCAL : FCACHE_MERGE_FROM_REMOTE;

        d->action = local ? FCACHE_MERGE_ACTION_TAKE_LOCAL : FCACHE_MERGE_ACTION_TAKE_REMOTE;
        d->from[FCACHE_MERGE_ASPECT_TYPE] = src;
        if (present(side))
                for (fcache_merge_aspect a = FCACHE_MERGE_ASPECT_CONTENT; a <= FCACHE_MERGE_ASPECT_GID; a++)
                        d->from[a] = src;
        d->result = *side;
        d->result.has_new_children = false;
}

/*
 * Base existed; one side deleted it, @kept still has it. Whatever @kept
 * changed would be lost by applying the deletion, so that is a conflict;
 * a replacement by another type agrees with the deletion of the old object.
 */
static void one_deleted(fcache_merge_decision *d, const fcache_merge_node *deleted,
                        const fcache_merge_node *kept, bool local_deleted, unsigned kept_changes,
                        unsigned flags)
{
        unsigned collide = ASPECT(TYPE) | (kept_changes & ~ASPECT(TYPE));

        if (kept_changes & ASPECT(TYPE))
                take_side(d, kept, !local_deleted);
        else if (kept_changes & ASPECT(CHILDREN))
                set_conflict(d, local_deleted ? FCACHE_CONFLICT_DELETE_CHILDREN : FCACHE_CONFLICT_CHILDREN_DELETE,
                             collide);
        else if (kept_changes & ASPECT(CONTENT))
                set_conflict(d, local_deleted ? FCACHE_CONFLICT_DELETE_EDIT : FCACHE_CONFLICT_EDIT_DELETE, collide);
        else if (kept_changes & ASPECT(LOCATION))
                set_conflict(d, local_deleted ? FCACHE_CONFLICT_DELETE_RENAME : FCACHE_CONFLICT_RENAME_DELETE,
                             collide);
        else if ((kept_changes & ATTR_ASPECTS) && !(flags & FCACHE_MERGE_STRUCTURE_DELETE_WINS_OVER_METADATA))
                set_conflict(d, local_deleted ? FCACHE_CONFLICT_DELETE_EDIT : FCACHE_CONFLICT_EDIT_DELETE, collide);
        else
                take_side(d, deleted, local_deleted);
}

/* The action that applies the per-aspect sources in d->from. */
static void settle(fcache_merge_decision *d)
{
        bool any_local = false, any_remote = false;

        for (fcache_merge_aspect a = FCACHE_MERGE_ASPECT_TYPE; a <= FCACHE_MERGE_ASPECT_GID; a++) {
                any_local |= d->from[a] == FCACHE_MERGE_FROM_LOCAL;
                any_remote |= d->from[a] == FCACHE_MERGE_FROM_REMOTE;
        }

        if (d->from[FCACHE_MERGE_ASPECT_CONTENT] == FCACHE_MERGE_FROM_MERGE)
                d->action = FCACHE_MERGE_ACTION_MERGE_CONTENT;
        else if (any_local && any_remote)
                d->action = FCACHE_MERGE_ACTION_MERGE_METADATA;
        else if (any_local)
                d->action = FCACHE_MERGE_ACTION_TAKE_LOCAL;
        else if (any_remote)
                d->action = FCACHE_MERGE_ACTION_TAKE_REMOTE;
        else
                d->action = FCACHE_MERGE_ACTION_NONE;
}

static const fcache_merge_node *pick(fcache_merge_source src, const fcache_merge_node *base,
                                     const fcache_merge_node *local, const fcache_merge_node *remote)
{
        switch (src) {
        case FCACHE_MERGE_FROM_BASE:
                return base;
        case FCACHE_MERGE_FROM_REMOTE:
                return remote;
        default:
                return local;
        }
}

/* Build d->result from the per-aspect sources. */
static void compose(fcache_merge_decision *d, const fcache_merge_node *base, const fcache_merge_node *local,
                    const fcache_merge_node *remote, unsigned flags)
{
        const fcache_merge_node *loc = pick(d->from[FCACHE_MERGE_ASPECT_LOCATION], base, local, remote);
        fcache_merge_node *r = &d->result;

        r->type = local->type;
        r->content_id = !has_content(local) || d->from[FCACHE_MERGE_ASPECT_CONTENT] == FCACHE_MERGE_FROM_MERGE
                                ? NULL
                                : pick(d->from[FCACHE_MERGE_ASPECT_CONTENT], base, local, remote)->content_id;
        r->parent = loc->parent;
        r->name = loc->name;
        r->mode = pick(d->from[FCACHE_MERGE_ASPECT_MODE], base, local, remote)->mode;
        if (flags & FCACHE_MERGE_STRUCTURE_IGNORE_OWNER) {
                r->uid = remote->uid;
                r->gid = remote->gid;
        } else {
                r->uid = pick(d->from[FCACHE_MERGE_ASPECT_UID], base, local, remote)->uid;
                r->gid = pick(d->from[FCACHE_MERGE_ASPECT_GID], base, local, remote)->gid;
        }
        r->has_new_children = false;
}

/* The first colliding aspect, in order of what a person most needs to see, names the conflict. */
static fcache_conflict_kind collision_kind(unsigned collisions)
{
        if (collisions & ASPECT(LOCATION))
                return FCACHE_CONFLICT_RENAME_RENAME;
        if (collisions & ASPECT(CONTENT))
                return FCACHE_CONFLICT_SYMLINK;
        if (collisions & ASPECT(MODE))
                return FCACHE_CONFLICT_MODE;
        if (collisions & (ASPECT(UID) | ASPECT(GID)))
                return FCACHE_CONFLICT_OWNER;
        return FCACHE_CONFLICT_NONE;
}

/*
 * Both sides hold an object of the same type, and base had one of that type
 * too: merge aspect by aspect.
 */
static void merge_aspects(fcache_merge_decision *d, const fcache_merge_node *base,
                          const fcache_merge_node *local, const fcache_merge_node *remote, unsigned flags)
{
        unsigned collisions = 0;

        for (fcache_merge_aspect a = FCACHE_MERGE_ASPECT_CONTENT; a <= FCACHE_MERGE_ASPECT_GID; a++) {
                unsigned bit = FCACHE_MERGE_ASPECT_BIT(a);
                bool lc = d->changed_local & bit, rc = d->changed_remote & bit;

                if (!lc && !rc)
                        d->from[a] = FCACHE_MERGE_FROM_BASE;
                else if (lc && !rc)
                        d->from[a] = FCACHE_MERGE_FROM_LOCAL;
                else if (!lc && rc)
                        d->from[a] = FCACHE_MERGE_FROM_REMOTE;
                else if (aspect_equal(a, local, remote))
                        d->from[a] = FCACHE_MERGE_FROM_BOTH;
                else if (a == FCACHE_MERGE_ASPECT_CONTENT && local->type == FCACHE_MERGE_NODE_FILE)
                        d->from[a] = FCACHE_MERGE_FROM_MERGE;
                else
                        collisions |= bit;
        }

        if (collisions) {
                set_conflict(d, collision_kind(collisions), collisions);
                return;
        }
        settle(d);
        compose(d, base, local, remote, flags);
}

/*
 * Both sides hold an object that is new against base (both created it, or
 * both replaced base's object): there is nothing to merge against, so the
 * two must agree, or the conflict is @kind.
 */
static void both_new(fcache_merge_decision *d, const fcache_merge_node *local, const fcache_merge_node *remote,
                     fcache_conflict_kind kind, unsigned flags)
{
        unsigned collisions = 0;

        if (local->type != remote->type) {
                set_conflict(d, kind, ASPECT(TYPE));
                return;
        }
        d->from[FCACHE_MERGE_ASPECT_TYPE] = FCACHE_MERGE_FROM_BOTH;
        for (fcache_merge_aspect a = FCACHE_MERGE_ASPECT_CONTENT; a <= FCACHE_MERGE_ASPECT_GID; a++) {
                if (aspect_ignored(a, flags))
                        continue;
                if (aspect_equal(a, local, remote))
                        d->from[a] = FCACHE_MERGE_FROM_BOTH;
                else
                        collisions |= FCACHE_MERGE_ASPECT_BIT(a);
        }

        if (collisions & (ASPECT(CONTENT) | ASPECT(LOCATION)))
                set_conflict(d, kind, collisions);
        else if (collisions)
                set_conflict(d, collision_kind(collisions), collisions);
        else {
                settle(d);
                compose(d, local, local, remote, flags);
        }
}

static bool node_valid(const fcache_merge_node *n)
{
        if ((unsigned) n->type >= _FCACHE_MERGE_NODE_MAX)
                return false;
        if (has_content(n) && !n->content_id)
                return false;
        if (n->has_new_children && n->type != FCACHE_MERGE_NODE_DIR)
                return false;
        return true;
}

int fcache_merge_structure(fcache_merge_decision *out,
                           const fcache_merge_node *base,
                           const fcache_merge_node *local,
                           const fcache_merge_node *remote,
                           const fcache_merge_structure_options *opts)
{
        static const fcache_merge_node absent = FCACHE_MERGE_NODE_INIT;
        fcache_merge_decision d = { 0 };
        unsigned flags = 0;

        if (!out || !local || !remote)
                return -EINVAL;
        if (opts) {
                if (opts->version != FCACHE_MERGE_STRUCTURE_OPTIONS_VERSION)
                        return -EINVAL;
                flags = opts->flags;
        }
        if (!base)
                base = &absent;
        if (!node_valid(base) || !node_valid(local) || !node_valid(remote))
                return -EINVAL;
        /* Children are new against base: base cannot have them. */
        if (base->has_new_children)
                return -EINVAL;

        d.changed_local = changes(base, local, flags);
        d.changed_remote = changes(base, remote, flags);
        if (local->has_new_children && remote->has_new_children)
                d.from[FCACHE_MERGE_ASPECT_CHILDREN] = FCACHE_MERGE_FROM_BOTH;
        else if (local->has_new_children)
                d.from[FCACHE_MERGE_ASPECT_CHILDREN] = FCACHE_MERGE_FROM_LOCAL;
        else if (remote->has_new_children)
                d.from[FCACHE_MERGE_ASPECT_CHILDREN] = FCACHE_MERGE_FROM_REMOTE;

        if (!present(base)) {
                if (!present(local) && !present(remote))
                        d.action = FCACHE_MERGE_ACTION_NONE;
                else if (!present(remote))
                        take_side(&d, local, true);
                else if (!present(local))
                        take_side(&d, remote, false);
                else
                        both_new(&d, local, remote, FCACHE_CONFLICT_CREATE_CREATE, flags);
        } else if (!present(local) && !present(remote)) {
                d.action = FCACHE_MERGE_ACTION_NONE;
                d.from[FCACHE_MERGE_ASPECT_TYPE] = FCACHE_MERGE_FROM_BOTH;
        } else if (!present(local)) {
                one_deleted(&d, local, remote, true, d.changed_remote, flags);
        } else if (!present(remote)) {
                one_deleted(&d, remote, local, false, d.changed_local, flags);
        } else {
                bool lt = d.changed_local & ASPECT(TYPE), rt = d.changed_remote & ASPECT(TYPE);

                /* A replacement wins only if the other side left base's object alone. */
                if (lt && rt)
                        both_new(&d, local, remote, FCACHE_CONFLICT_TYPE_CHANGE, flags);
                else if (lt && d.changed_remote)
                        set_conflict(&d, FCACHE_CONFLICT_TYPE_CHANGE, ASPECT(TYPE) | d.changed_remote);
                else if (lt)
                        take_side(&d, local, true);
                else if (rt && d.changed_local)
                        set_conflict(&d, FCACHE_CONFLICT_TYPE_CHANGE, ASPECT(TYPE) | d.changed_local);
                else if (rt)
                        take_side(&d, remote, false);
                else
                        merge_aspects(&d, base, local, remote, flags);
        }

        *out = d;
        return 0;
}
