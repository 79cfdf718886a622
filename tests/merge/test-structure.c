/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-structure.c: the structural table of fcache_merge_structure(), one
 * GTest case per row, each row also checked mirrored (local and remote
 * swapped must give the mirrored action and kind), plus argument checks.
 */
#include <errno.h>
#include <string.h>

#include <glib.h>

#include "fcache-merge.h"

/* Node constructors: a file "f" in directory "d", mode 0644, owned by 1000:1000. */
#define N(t, id, mode, uid, gid, parent, name, kids) \
        { FCACHE_MERGE_NODE_##t, id, mode, uid, gid, parent, name, kids }
#define NIL N(ABSENT, NULL, 0, 0, 0, NULL, NULL, false)
#define F(id) N(FILE, id, 0644, 1000, 1000, "d", "f", false)
#define FM(id, mode) N(FILE, id, mode, 1000, 1000, "d", "f", false)
#define FO(id, uid, gid) N(FILE, id, 0644, uid, gid, "d", "f", false)
#define FR(id, parent, name) N(FILE, id, 0644, 1000, 1000, parent, name, false)
#define D N(DIR, NULL, 0755, 1000, 1000, "d", "f", false)
#define DM(mode) N(DIR, NULL, mode, 1000, 1000, "d", "f", false)
#define DR(name) N(DIR, NULL, 0755, 1000, 1000, "d", name, false)
#define DK N(DIR, NULL, 0755, 1000, 1000, "d", "f", true)
#define L(target) N(SYMLINK, target, 0777, 1000, 1000, "d", "f", false)

#define IGNORE_OWNER FCACHE_MERGE_STRUCTURE_IGNORE_OWNER
#define DELETE_WINS FCACHE_MERGE_STRUCTURE_DELETE_WINS_OVER_METADATA

typedef struct {
        const char *name;
        unsigned flags;
        bool no_base; /* pass base as NULL */
        fcache_merge_node base, local, remote;
        fcache_merge_action action;
        fcache_conflict_kind kind;
        /* The merged state (not checked for conflicts, whose result is ABSENT). */
        fcache_merge_node_type rtype;
        const char *rcontent;
        uint32_t rmode;
        const char *rname;
        uint32_t ruid;
} row;

#define NONE FCACHE_MERGE_ACTION_NONE
#define TAKE_LOCAL FCACHE_MERGE_ACTION_TAKE_LOCAL
#define TAKE_REMOTE FCACHE_MERGE_ACTION_TAKE_REMOTE
#define MERGE_CONTENT FCACHE_MERGE_ACTION_MERGE_CONTENT
#define MERGE_METADATA FCACHE_MERGE_ACTION_MERGE_METADATA
#define CONFLICT FCACHE_MERGE_ACTION_CONFLICT
#define K(k) FCACHE_CONFLICT_##k
#define T(t) FCACHE_MERGE_NODE_##t

/* A clean row: action and the merged type, content id, mode, name, uid. */
#define OK(nm, fl, b, l, r, act, rt, rc, rm, rn, ru) \
        { nm, fl, false, b, l, r, act, K(NONE), T(rt), rc, rm, rn, ru }
/* A conflict row. */
#define XX(nm, fl, b, l, r, kind) \
        { nm, fl, false, b, l, r, CONFLICT, K(kind), T(ABSENT), NULL, 0, NULL, 0 }
/* A clean row whose merged state is "nothing there". */
#define GONE(nm, fl, b, l, r, act) \
        { nm, fl, false, b, l, r, act, K(NONE), T(ABSENT), NULL, 0, NULL, 0 }

static const row table[] = {
        /* Nothing at base. */
        GONE("absent-everywhere", 0, NIL, NIL, NIL, NONE),
        OK("local-create", 0, NIL, F("A"), NIL, TAKE_LOCAL, FILE, "A", 0644, "f", 1000),
        OK("remote-create", 0, NIL, NIL, F("B"), TAKE_REMOTE, FILE, "B", 0644, "f", 1000),
        { "local-create-null-base", 0, true, NIL, F("A"), NIL, TAKE_LOCAL, K(NONE), T(FILE), "A", 0644, "f", 1000 },
        OK("create-create-same-content", 0, NIL, F("A"), F("A"), NONE, FILE, "A", 0644, "f", 1000),
        XX("create-create-different-content", 0, NIL, F("A"), F("B"), CREATE_CREATE),
        XX("create-create-file-vs-dir", 0, NIL, F("A"), D, CREATE_CREATE),
        XX("create-create-symlink-vs-file", 0, NIL, L("t"), F("A"), CREATE_CREATE),
        OK("create-create-dirs", 0, NIL, D, D, NONE, DIR, NULL, 0755, "f", 1000),
        OK("create-create-same-symlink", 0, NIL, L("t"), L("t"), NONE, SYMLINK, "t", 0777, "f", 1000),
        XX("create-create-different-symlink", 0, NIL, L("t"), L("u"), CREATE_CREATE),
        XX("create-create-same-content-different-mode", 0, NIL, FM("A", 0600), F("A"), MODE),
        XX("create-create-same-content-different-owner", 0, NIL, FO("A", 0, 0), F("A"), OWNER),
        OK("create-create-different-owner-ignored", IGNORE_OWNER, NIL, FO("A", 0, 0), F("A"), NONE, FILE, "A",
           0644, "f", 1000),
        XX("create-create-dirs-different-mode", 0, NIL, DM(0700), D, MODE),

        /* Deleted on both sides. */
        GONE("delete-delete", 0, F("A"), NIL, NIL, NONE),
        GONE("delete-delete-dir", 0, D, NIL, NIL, NONE),

        /* Deleted locally. */
        GONE("local-delete-remote-unchanged", 0, F("A"), NIL, F("A"), TAKE_LOCAL),
        XX("delete-edit", 0, F("A"), NIL, F("B"), DELETE_EDIT),
        XX("delete-rename", 0, F("A"), NIL, FR("A", "d", "g"), DELETE_RENAME),
        XX("delete-rename-other-parent", 0, F("A"), NIL, FR("A", "e", "f"), DELETE_RENAME),
        XX("delete-rename-and-edit", 0, F("A"), NIL, FR("B", "d", "g"), DELETE_EDIT),
        XX("delete-chmod", 0, F("A"), NIL, FM("A", 0600), DELETE_EDIT),
        GONE("delete-chmod-delete-wins", DELETE_WINS, F("A"), NIL, FM("A", 0600), TAKE_LOCAL),
        XX("delete-chown", 0, F("A"), NIL, FO("A", 0, 1000), DELETE_EDIT),
        GONE("delete-chown-owner-ignored", IGNORE_OWNER, F("A"), NIL, FO("A", 0, 1000), TAKE_LOCAL),
        XX("delete-dir-remote-children", 0, D, NIL, DK, DELETE_CHILDREN),
        XX("delete-dir-remote-chmod", 0, D, NIL, DM(0700), DELETE_EDIT),
        GONE("delete-dir-remote-unchanged", 0, D, NIL, D, TAKE_LOCAL),
        OK("delete-vs-replaced-by-dir", 0, F("A"), NIL, D, TAKE_REMOTE, DIR, NULL, 0755, "f", 1000),
        OK("delete-vs-replaced-by-symlink", 0, F("A"), NIL, L("t"), TAKE_REMOTE, SYMLINK, "t", 0777, "f", 1000),

        /* Deleted on the server. */
        GONE("remote-delete-local-unchanged", 0, F("A"), F("A"), NIL, TAKE_REMOTE),
        XX("edit-delete", 0, F("A"), F("B"), NIL, EDIT_DELETE),
        XX("rename-delete", 0, F("A"), FR("A", "d", "g"), NIL, RENAME_DELETE),
        XX("rename-and-edit-delete", 0, F("A"), FR("B", "d", "g"), NIL, EDIT_DELETE),
        XX("chmod-delete", 0, F("A"), FM("A", 0600), NIL, EDIT_DELETE),
        GONE("chmod-delete-delete-wins", DELETE_WINS, F("A"), FM("A", 0600), NIL, TAKE_REMOTE),
        XX("dir-local-children-remote-delete", 0, D, DK, NIL, CHILDREN_DELETE),
        XX("dir-local-children-remote-delete-delete-wins", DELETE_WINS, D, DK, NIL, CHILDREN_DELETE),
        XX("dir-rename-remote-delete", 0, D, DR("g"), NIL, RENAME_DELETE),
        OK("replaced-by-symlink-vs-delete", 0, F("A"), L("t"), NIL, TAKE_LOCAL, SYMLINK, "t", 0777, "f", 1000),
        OK("replaced-by-file-vs-delete", 0, D, F("A"), NIL, TAKE_LOCAL, FILE, "A", 0644, "f", 1000),

        /* Same type everywhere: aspects merge independently. */
        OK("unchanged", 0, F("A"), F("A"), F("A"), NONE, FILE, "A", 0644, "f", 1000),
        OK("local-edit", 0, F("A"), F("B"), F("A"), TAKE_LOCAL, FILE, "B", 0644, "f", 1000),
        OK("remote-edit", 0, F("A"), F("A"), F("B"), TAKE_REMOTE, FILE, "B", 0644, "f", 1000),
        OK("identical-edit", 0, F("A"), F("B"), F("B"), NONE, FILE, "B", 0644, "f", 1000),
        OK("both-edit", 0, F("A"), F("B"), F("C"), MERGE_CONTENT, FILE, NULL, 0644, "f", 1000),
        OK("both-edit-local-chmod", 0, F("A"), FM("B", 0600), F("C"), MERGE_CONTENT, FILE, NULL, 0600, "f", 1000),
        XX("both-edit-both-chmod-differently", 0, F("A"), FM("B", 0600), FM("C", 0640), MODE),
        OK("local-edit-remote-chmod", 0, F("A"), F("B"), FM("A", 0600), MERGE_METADATA, FILE, "B", 0600, "f", 1000),
        OK("local-chmod-remote-edit", 0, F("A"), FM("A", 0600), F("B"), MERGE_METADATA, FILE, "B", 0600, "f", 1000),
        OK("local-chmod", 0, F("A"), FM("A", 0600), F("A"), TAKE_LOCAL, FILE, "A", 0600, "f", 1000),
        OK("remote-chmod", 0, F("A"), F("A"), FM("A", 0600), TAKE_REMOTE, FILE, "A", 0600, "f", 1000),
        OK("same-chmod", 0, F("A"), FM("A", 0600), FM("A", 0600), NONE, FILE, "A", 0600, "f", 1000),
        XX("chmod-chmod", 0, F("A"), FM("A", 0600), FM("A", 0640), MODE),
        OK("chmod-type-bits-ignored", 0, F("A"), FM("A", 0100644), F("A"), NONE, FILE, "A", 0644, "f", 1000),
        OK("local-chmod-remote-chown", 0, F("A"), FM("A", 0600), FO("A", 0, 1000), MERGE_METADATA, FILE, "A", 0600,
           "f", 0),
        XX("chown-chown", 0, F("A"), FO("A", 0, 1000), FO("A", 1001, 1000), OWNER),
        XX("chgrp-chgrp", 0, F("A"), FO("A", 1000, 0), FO("A", 1000, 5), OWNER),
        OK("local-chown-remote-chgrp", 0, F("A"), FO("A", 0, 1000), FO("A", 1000, 5), MERGE_METADATA, FILE, "A",
           0644, "f", 0),
        OK("chown-chown-owner-ignored", IGNORE_OWNER, F("A"), FO("A", 0, 1000), FO("A", 1001, 1000), NONE, FILE,
           "A", 0644, "f", 1001),
        OK("same-chown", 0, F("A"), FO("A", 0, 0), FO("A", 0, 0), NONE, FILE, "A", 0644, "f", 0),
        OK("local-rename", 0, F("A"), FR("A", "d", "g"), F("A"), TAKE_LOCAL, FILE, "A", 0644, "g", 1000),
        OK("remote-rename", 0, F("A"), F("A"), FR("A", "d", "g"), TAKE_REMOTE, FILE, "A", 0644, "g", 1000),
        OK("local-rename-remote-edit", 0, F("A"), FR("A", "d", "g"), F("B"), MERGE_METADATA, FILE, "B", 0644, "g",
           1000),
        OK("local-rename-both-edit", 0, F("A"), FR("B", "d", "g"), F("C"), MERGE_CONTENT, FILE, NULL, 0644, "g",
           1000),
        OK("same-rename", 0, F("A"), FR("A", "d", "g"), FR("A", "d", "g"), NONE, FILE, "A", 0644, "g", 1000),
        XX("rename-rename", 0, F("A"), FR("A", "d", "g"), FR("A", "d", "h"), RENAME_RENAME),
        XX("rename-rename-other-parent", 0, F("A"), FR("A", "e", "f"), FR("A", "d", "g"), RENAME_RENAME),
        XX("rename-rename-and-chmod-chmod", 0, F("A"), FR("A", "d", "g"), N(FILE, "A", 0600, 1000, 1000, "d",
           "h", false), RENAME_RENAME),
        XX("symlink-retarget-both", 0, L("t"), L("u"), L("v"), SYMLINK),
        OK("symlink-retarget-local", 0, L("t"), L("u"), L("t"), TAKE_LOCAL, SYMLINK, "u", 0777, "f", 1000),
        OK("symlink-retarget-same", 0, L("t"), L("u"), L("u"), NONE, SYMLINK, "u", 0777, "f", 1000),
        OK("dir-unchanged", 0, D, D, D, NONE, DIR, NULL, 0755, "f", 1000),
        OK("dir-local-chmod", 0, D, DM(0700), D, TAKE_LOCAL, DIR, NULL, 0700, "f", 1000),
        XX("dir-chmod-chmod", 0, D, DM(0700), DM(0750), MODE),
        OK("dir-local-children", 0, D, DK, D, NONE, DIR, NULL, 0755, "f", 1000),
        OK("dir-both-children", 0, D, DK, DK, NONE, DIR, NULL, 0755, "f", 1000),
        OK("dir-local-children-remote-rename", 0, D, DK, DR("g"), TAKE_REMOTE, DIR, NULL, 0755, "g", 1000),
        XX("dir-rename-rename", 0, D, DR("g"), DR("h"), RENAME_RENAME),

        /* Type changes with both sides present. */
        OK("file-to-dir-local", 0, F("A"), D, F("A"), TAKE_LOCAL, DIR, NULL, 0755, "f", 1000),
        OK("file-to-symlink-remote", 0, F("A"), F("A"), L("t"), TAKE_REMOTE, SYMLINK, "t", 0777, "f", 1000),
        OK("dir-to-file-local", 0, D, F("A"), D, TAKE_LOCAL, FILE, "A", 0644, "f", 1000),
        XX("file-to-dir-vs-edit", 0, F("A"), D, F("B"), TYPE_CHANGE),
        XX("edit-vs-file-to-dir", 0, F("A"), F("B"), D, TYPE_CHANGE),
        XX("file-to-symlink-vs-chmod", 0, F("A"), L("t"), FM("A", 0600), TYPE_CHANGE),
        XX("file-to-symlink-vs-rename", 0, F("A"), L("t"), FR("A", "d", "g"), TYPE_CHANGE),
        XX("dir-to-file-vs-remote-children", 0, D, F("A"), DK, TYPE_CHANGE),
        XX("local-children-vs-dir-to-symlink", 0, D, DK, L("t"), TYPE_CHANGE),
        XX("dir-to-symlink-vs-chmod", 0, D, L("t"), DM(0700), TYPE_CHANGE),
        XX("file-to-dir-vs-file-to-symlink", 0, F("A"), D, L("t"), TYPE_CHANGE),
        XX("symlink-to-file-vs-symlink-to-dir", 0, L("t"), F("A"), D, TYPE_CHANGE),
        XX("file-to-symlink-both-different-targets", 0, F("A"), L("t"), L("u"), TYPE_CHANGE),
        OK("file-to-symlink-both-same-target", 0, F("A"), L("t"), L("t"), NONE, SYMLINK, "t", 0777, "f", 1000),
        OK("file-to-dir-both", 0, F("A"), D, D, NONE, DIR, NULL, 0755, "f", 1000),
        XX("file-to-dir-both-different-mode", 0, F("A"), D, DM(0700), MODE),
};

static fcache_merge_action mirror_action(fcache_merge_action a)
{
        if (a == TAKE_LOCAL)
                return TAKE_REMOTE;
        if (a == TAKE_REMOTE)
                return TAKE_LOCAL;
        return a;
}

static fcache_conflict_kind mirror_kind(fcache_conflict_kind k)
{
        switch (k) {
        case K(EDIT_DELETE):
                return K(DELETE_EDIT);
        case K(DELETE_EDIT):
                return K(EDIT_DELETE);
        case K(RENAME_DELETE):
                return K(DELETE_RENAME);
        case K(DELETE_RENAME):
                return K(RENAME_DELETE);
        case K(CHILDREN_DELETE):
                return K(DELETE_CHILDREN);
        case K(DELETE_CHILDREN):
                return K(CHILDREN_DELETE);
        default:
                return k;
        }
}

static void test_row(gconstpointer data)
{
        const row *r = data;
        fcache_merge_structure_options opts = FCACHE_MERGE_STRUCTURE_OPTIONS_INIT;
        fcache_merge_decision d, m;
        const fcache_merge_node *base = r->no_base ? NULL : &r->base;

        opts.flags = r->flags;
        g_assert_cmpint(fcache_merge_structure(&d, base, &r->local, &r->remote, &opts), ==, 0);

        g_assert_cmpstr(fcache_merge_action_to_string(d.action), ==, fcache_merge_action_to_string(r->action));
        g_assert_cmpstr(fcache_conflict_kind_to_string(d.conflict), ==, fcache_conflict_kind_to_string(r->kind));
        g_assert_cmpint(d.action == CONFLICT, ==, d.conflict != K(NONE));

        g_assert_cmpstr(fcache_merge_node_type_to_string(d.result.type), ==,
                        fcache_merge_node_type_to_string(r->rtype));
        if (d.action == CONFLICT) {
                g_assert_cmpuint(d.collisions, !=, 0);
        } else if (r->rtype != T(ABSENT)) {
                g_assert_cmpstr(d.result.content_id, ==, r->rcontent);
                g_assert_cmpuint(d.result.mode, ==, r->rmode);
                g_assert_cmpstr(d.result.name, ==, r->rname);
                g_assert_cmpuint(d.result.uid, ==, r->ruid);
                g_assert_false(d.result.has_new_children);
        }
        /* MERGE_CONTENT leaves the content to the content merge; only a conflict may also. */
        if (d.action == MERGE_CONTENT)
                g_assert_cmpint(d.from[FCACHE_MERGE_ASPECT_CONTENT], ==, FCACHE_MERGE_FROM_MERGE);
        if (d.from[FCACHE_MERGE_ASPECT_CONTENT] == FCACHE_MERGE_FROM_MERGE)
                g_assert_true(d.action == MERGE_CONTENT || d.action == CONFLICT);

        /* The same row seen from the other side. */
        g_assert_cmpint(fcache_merge_structure(&m, base, &r->remote, &r->local, &opts), ==, 0);
        g_assert_cmpstr(fcache_merge_action_to_string(m.action), ==,
                        fcache_merge_action_to_string(mirror_action(r->action)));
        g_assert_cmpstr(fcache_conflict_kind_to_string(m.conflict), ==,
                        fcache_conflict_kind_to_string(mirror_kind(r->kind)));
        g_assert_cmpuint(m.changed_local, ==, d.changed_remote);
        g_assert_cmpuint(m.changed_remote, ==, d.changed_local);
}

/* Sources per aspect, where the table's columns do not show them. */
static void test_sources(void)
{
        const fcache_merge_node base = F("A"), local = FO("B", 0, 1000), remote = FM("A", 0600);
        const fcache_merge_node rlocal = FM("B", 0600), rremote = FM("C", 0640);
        fcache_merge_decision d;

        g_assert_cmpint(fcache_merge_structure(&d, &base, &local, &remote, NULL), ==, 0);
        g_assert_cmpint(d.action, ==, MERGE_METADATA);
        g_assert_cmpint(d.from[FCACHE_MERGE_ASPECT_TYPE], ==, FCACHE_MERGE_FROM_BASE);
        g_assert_cmpint(d.from[FCACHE_MERGE_ASPECT_CONTENT], ==, FCACHE_MERGE_FROM_LOCAL);
        g_assert_cmpint(d.from[FCACHE_MERGE_ASPECT_LOCATION], ==, FCACHE_MERGE_FROM_BASE);
        g_assert_cmpint(d.from[FCACHE_MERGE_ASPECT_MODE], ==, FCACHE_MERGE_FROM_REMOTE);
        g_assert_cmpint(d.from[FCACHE_MERGE_ASPECT_UID], ==, FCACHE_MERGE_FROM_LOCAL);
        g_assert_cmpint(d.from[FCACHE_MERGE_ASPECT_GID], ==, FCACHE_MERGE_FROM_BASE);
        g_assert_cmpuint(d.changed_local, ==,
                         FCACHE_MERGE_ASPECT_BIT(FCACHE_MERGE_ASPECT_CONTENT) |
                                 FCACHE_MERGE_ASPECT_BIT(FCACHE_MERGE_ASPECT_UID));
        g_assert_cmpuint(d.changed_remote, ==, FCACHE_MERGE_ASPECT_BIT(FCACHE_MERGE_ASPECT_MODE));
        g_assert_cmpuint(d.collisions, ==, 0);
        g_assert_cmpstr(d.result.content_id, ==, "B");
        g_assert_cmpuint(d.result.mode, ==, 0600);
        g_assert_cmpuint(d.result.uid, ==, 0);
        /* Strings point into the inputs. */
        g_assert_true(d.result.content_id == local.content_id);

        /* A mode conflict on top of a content merge still says the content needs merging. */
        g_assert_cmpint(fcache_merge_structure(&d, &base, &rlocal, &rremote, NULL), ==, 0);
        g_assert_cmpint(d.action, ==, CONFLICT);
        g_assert_cmpint(d.conflict, ==, K(MODE));
        g_assert_cmpint(d.from[FCACHE_MERGE_ASPECT_CONTENT], ==, FCACHE_MERGE_FROM_MERGE);
        g_assert_cmpint(d.from[FCACHE_MERGE_ASPECT_MODE], ==, FCACHE_MERGE_FROM_CONFLICT);
        g_assert_cmpuint(d.collisions, ==, FCACHE_MERGE_ASPECT_BIT(FCACHE_MERGE_ASPECT_MODE));
}

static void test_children_source(void)
{
        const fcache_merge_node base = D, local = DK, remote = NIL;
        fcache_merge_decision d;

        g_assert_cmpint(fcache_merge_structure(&d, &base, &local, &remote, NULL), ==, 0);
        g_assert_cmpint(d.conflict, ==, K(CHILDREN_DELETE));
        g_assert_true(fcache_conflict_kind_is_structural(d.conflict));
        g_assert_cmpint(d.from[FCACHE_MERGE_ASPECT_CHILDREN], ==, FCACHE_MERGE_FROM_CONFLICT);
        g_assert_cmpint(d.from[FCACHE_MERGE_ASPECT_TYPE], ==, FCACHE_MERGE_FROM_CONFLICT);
        g_assert_true(d.changed_local & FCACHE_MERGE_ASPECT_BIT(FCACHE_MERGE_ASPECT_CHILDREN));
        g_assert_cmpuint(d.changed_remote, ==, FCACHE_MERGE_ASPECT_BIT(FCACHE_MERGE_ASPECT_TYPE));
}

static void test_invalid(void)
{
        const fcache_merge_node ok = F("A"), abs = NIL;
        fcache_merge_node bad_type = F("A"), no_id = F(NULL), kids_on_file = F("A"), base_kids = DK;
        fcache_merge_structure_options bad_version = { 99, 0 };
        fcache_merge_decision d, sentinel;

        bad_type.type = (fcache_merge_node_type) 42;
        kids_on_file.has_new_children = true;
        memset(&sentinel, 0x5a, sizeof(sentinel));
        d = sentinel;

        g_assert_cmpint(fcache_merge_structure(NULL, &ok, &ok, &ok, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_structure(&d, &ok, NULL, &ok, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_structure(&d, &ok, &ok, NULL, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_structure(&d, &ok, &bad_type, &ok, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_structure(&d, &abs, &ok, &no_id, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_structure(&d, &ok, &kids_on_file, &ok, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_structure(&d, &base_kids, &base_kids, &base_kids, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_structure(&d, &ok, &ok, &ok, &bad_version), ==, -EINVAL);
        /* Never clobber out-parameters on failure. */
        g_assert_cmpmem(&d, sizeof(d), &sentinel, sizeof(sentinel));
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);

        for (size_t i = 0; i < G_N_ELEMENTS(table); i++) {
                g_autofree char *path = g_strdup_printf("/fcache/merge/structure/table/%s", table[i].name);

                for (size_t j = 0; j < i; j++)
                        g_assert_cmpstr(table[j].name, !=, table[i].name);
                g_test_add_data_func(path, &table[i], test_row);
        }
        g_test_add_func("/fcache/merge/structure/sources", test_sources);
        g_test_add_func("/fcache/merge/structure/children-source", test_children_source);
        g_test_add_func("/fcache/merge/structure/invalid", test_invalid);

        return g_test_run();
}
