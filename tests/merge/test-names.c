/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-names.c: the stable string names of libfcache-merge. They are an
 * interface (query conflicts, D-Bus, JSON), so the expected lists are spelled
 * out here: renaming one must fail this test.
 */
#include <errno.h>
#include <string.h>

#include <glib.h>

#include "fcache-merge.h"

static void test_conflict_kinds(void)
{
        static const struct {
                fcache_conflict_kind kind;
                const char *name;
                bool structural;
        } expected[] = {
                { FCACHE_CONFLICT_NONE, "none", false },
                { FCACHE_CONFLICT_CONTENT, "content", false },
                { FCACHE_CONFLICT_BINARY, "binary", false },
                { FCACHE_CONFLICT_SYMLINK, "symlink", false },
                { FCACHE_CONFLICT_EDIT_DELETE, "edit-delete", true },
                { FCACHE_CONFLICT_DELETE_EDIT, "delete-edit", true },
                { FCACHE_CONFLICT_RENAME_RENAME, "rename-rename", true },
                { FCACHE_CONFLICT_RENAME_DELETE, "rename-delete", true },
                { FCACHE_CONFLICT_DELETE_RENAME, "delete-rename", true },
                { FCACHE_CONFLICT_CREATE_CREATE, "create-create", true },
                { FCACHE_CONFLICT_TYPE_CHANGE, "type-change", true },
                { FCACHE_CONFLICT_CHILDREN_DELETE, "children-delete", true },
                { FCACHE_CONFLICT_DELETE_CHILDREN, "delete-children", true },
                { FCACHE_CONFLICT_MODE, "mode", false },
                { FCACHE_CONFLICT_OWNER, "owner", false },
        };

        g_assert_cmpuint(G_N_ELEMENTS(expected), ==, _FCACHE_CONFLICT_MAX);
        for (size_t i = 0; i < G_N_ELEMENTS(expected); i++) {
                fcache_conflict_kind parsed = _FCACHE_CONFLICT_MAX;
                const char *desc = fcache_conflict_kind_describe(expected[i].kind);

                g_assert_cmpstr(fcache_conflict_kind_to_string(expected[i].kind), ==, expected[i].name);
                g_assert_cmpint(fcache_conflict_kind_from_string(&parsed, expected[i].name), ==, 0);
                g_assert_cmpint(parsed, ==, expected[i].kind);
                g_assert_cmpint(fcache_conflict_kind_is_structural(expected[i].kind), ==, expected[i].structural);
                g_assert_nonnull(desc);
                g_assert_cmpuint(strlen(desc), >, 5);
        }

        g_assert_null(fcache_conflict_kind_to_string(_FCACHE_CONFLICT_MAX));
        g_assert_null(fcache_conflict_kind_to_string((fcache_conflict_kind) -1));
        g_assert_null(fcache_conflict_kind_describe(_FCACHE_CONFLICT_MAX));
        g_assert_false(fcache_conflict_kind_is_structural(_FCACHE_CONFLICT_MAX));
}

static void test_conflict_kind_parse_errors(void)
{
        fcache_conflict_kind k = FCACHE_CONFLICT_MODE;

        g_assert_cmpint(fcache_conflict_kind_from_string(&k, "Edit-Delete"), ==, -EINVAL);
        g_assert_cmpint(fcache_conflict_kind_from_string(&k, "edit-delete "), ==, -EINVAL);
        g_assert_cmpint(fcache_conflict_kind_from_string(&k, ""), ==, -EINVAL);
        g_assert_cmpint(fcache_conflict_kind_from_string(&k, NULL), ==, -EINVAL);
        g_assert_cmpint(fcache_conflict_kind_from_string(NULL, "mode"), ==, -EINVAL);
        /* Untouched on failure. */
        g_assert_cmpint(k, ==, FCACHE_CONFLICT_MODE);
}

static void test_other_names(void)
{
        static const char *const actions[] = { "none", "take-local", "take-remote", "merge-content",
                                               "merge-metadata", "conflict" };
        static const char *const types[] = { "absent", "file", "dir", "symlink" };
        static const char *const aspects[] = { "type", "content", "location", "mode", "uid", "gid", "children" };
        static const char *const sources[] = { "base", "local", "remote", "both", "merge", "conflict" };
        static const char *const outcomes[] = { "unchanged", "take-local", "take-remote", "identical", "merged",
                                                "conflict" };

        g_assert_cmpuint(G_N_ELEMENTS(actions), ==, _FCACHE_MERGE_ACTION_MAX);
        for (unsigned i = 0; i < G_N_ELEMENTS(actions); i++)
                g_assert_cmpstr(fcache_merge_action_to_string(i), ==, actions[i]);
        g_assert_null(fcache_merge_action_to_string(_FCACHE_MERGE_ACTION_MAX));

        g_assert_cmpuint(G_N_ELEMENTS(types), ==, _FCACHE_MERGE_NODE_MAX);
        for (unsigned i = 0; i < G_N_ELEMENTS(types); i++)
                g_assert_cmpstr(fcache_merge_node_type_to_string(i), ==, types[i]);
        g_assert_null(fcache_merge_node_type_to_string(_FCACHE_MERGE_NODE_MAX));

        g_assert_cmpuint(G_N_ELEMENTS(aspects), ==, _FCACHE_MERGE_ASPECT_MAX);
        for (unsigned i = 0; i < G_N_ELEMENTS(aspects); i++)
                g_assert_cmpstr(fcache_merge_aspect_to_string(i), ==, aspects[i]);
        g_assert_null(fcache_merge_aspect_to_string(_FCACHE_MERGE_ASPECT_MAX));

        g_assert_cmpuint(G_N_ELEMENTS(sources), ==, _FCACHE_MERGE_FROM_MAX);
        for (unsigned i = 0; i < G_N_ELEMENTS(sources); i++)
                g_assert_cmpstr(fcache_merge_source_to_string(i), ==, sources[i]);
        g_assert_null(fcache_merge_source_to_string(_FCACHE_MERGE_FROM_MAX));

        g_assert_cmpuint(G_N_ELEMENTS(outcomes), ==, _FCACHE_MERGE_CONTENT_MAX);
        for (unsigned i = 0; i < G_N_ELEMENTS(outcomes); i++)
                g_assert_cmpstr(fcache_merge_content_outcome_to_string(i), ==, outcomes[i]);
        g_assert_null(fcache_merge_content_outcome_to_string(_FCACHE_MERGE_CONTENT_MAX));
}

static void assert_keep_both(const char *name, const char *tag, unsigned counter, const char *want)
{
        g_autofree char *got = NULL;

        g_assert_cmpint(fcache_merge_keep_both_name(&got, name, tag, counter), ==, 0);
        g_assert_cmpstr(got, ==, want);
}

static void test_keep_both_name(void)
{
        g_autofree char *long_name = NULL, *got = NULL;
        g_autoptr(GString) utf8 = g_string_new(NULL);
        char *untouched = (char *) "untouched";

        assert_keep_both("report.txt", "local", 0, "report.local.txt");
        assert_keep_both("report.txt", "remote", 1, "report.remote.txt");
        assert_keep_both("report.txt", "local", 2, "report.local-2.txt");
        assert_keep_both("Makefile", "local", 0, "Makefile.local");
        assert_keep_both(".bashrc", "remote", 0, ".bashrc.remote");
        assert_keep_both(".config.json", "local", 0, ".config.local.json");
        assert_keep_both("archive.tar.gz", "local", 0, "archive.tar.local.gz");
        assert_keep_both("trailing.", "local", 0, "trailing..local");
        assert_keep_both("v1.0-release-notes-for-the-whole-team", "local", 0,
                         "v1.0-release-notes-for-the-whole-team.local");

        /* Shortened to NAME_MAX, keeping tag and extension. */
        long_name = g_strnfill(300, 'x');
        g_assert_cmpint(fcache_merge_keep_both_name(&got, long_name, "local", 3), ==, 0);
        g_assert_cmpuint(strlen(got), ==, 255);
        g_assert_true(g_str_has_suffix(got, "x.local-3"));
        g_clear_pointer(&got, g_free);

        /* ...never inside a UTF-8 character. */
        for (int i = 0; i < 126; i++)
                g_string_append(utf8, "\xc3\xa9"); /* é */
        g_string_append(utf8, ".txt");
        g_assert_cmpint(fcache_merge_keep_both_name(&got, utf8->str, "local", 0), ==, 0);
        g_assert_cmpuint(strlen(got), <=, 255);
        g_assert_true(g_utf8_validate(got, -1, NULL));
        g_assert_true(g_str_has_suffix(got, "\xc3\xa9.local.txt"));
        g_clear_pointer(&got, g_free);

        g_assert_cmpint(fcache_merge_keep_both_name(&untouched, "", "local", 0), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_keep_both_name(&untouched, "..", "local", 0), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_keep_both_name(&untouched, "a/b", "local", 0), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_keep_both_name(&untouched, "a", "lo/cal", 0), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_keep_both_name(&untouched, "a", NULL, 0), ==, -EINVAL);
        g_assert_cmpint(fcache_merge_keep_both_name(NULL, "a", "local", 0), ==, -EINVAL);
        g_clear_pointer(&long_name, g_free);
        long_name = g_strnfill(260, 't');
        g_assert_cmpint(fcache_merge_keep_both_name(&untouched, "a.txt", long_name, 0), ==, -ENAMETOOLONG);
        g_assert_cmpstr(untouched, ==, "untouched");
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
        g_test_add_func("/fcache/merge/names/conflict-kinds", test_conflict_kinds);
        g_test_add_func("/fcache/merge/names/conflict-kind-parse-errors", test_conflict_kind_parse_errors);
        g_test_add_func("/fcache/merge/names/others", test_other_names);
        g_test_add_func("/fcache/merge/names/keep-both", test_keep_both_name);
        return g_test_run();
}
