/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-merge-structure.c: libFuzzer target for fcache_merge_structure().
 *
 * Input bytes describe three nodes (type, content, location, mode, owner,
 * children) drawn from small value sets so that equal and different values
 * both occur. For every valid input the decision must be consistent, and
 * swapping local and remote must give the mirrored decision.
 */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "fcache-merge.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const values[] = { "a", "b", "c", NULL };

static void node_from(fcache_merge_node *n, const uint8_t *p)
{
        memset(n, 0, sizeof(*n));
        n->type = (fcache_merge_node_type) (p[0] % (_FCACHE_MERGE_NODE_MAX + 1));
        n->content_id = values[(p[0] >> 3) % 4];
        n->parent = values[(p[0] >> 5) % 4];
        n->name = values[p[1] % 4];
        n->mode = (p[1] >> 2) % 3 == 0 ? 0644 : (p[1] >> 2) % 3 == 1 ? 0600 : 0100644;
        n->uid = (p[1] >> 4) % 3;
        n->gid = (p[1] >> 6) % 3;
        n->has_new_children = p[2] & 1;
}

static fcache_merge_action mirror_action(fcache_merge_action a)
{
        return a == FCACHE_MERGE_ACTION_TAKE_LOCAL    ? FCACHE_MERGE_ACTION_TAKE_REMOTE
               : a == FCACHE_MERGE_ACTION_TAKE_REMOTE ? FCACHE_MERGE_ACTION_TAKE_LOCAL
                                                      : a;
}

static fcache_conflict_kind mirror_kind(fcache_conflict_kind k)
{
        static const fcache_conflict_kind pairs[][2] = {
                { FCACHE_CONFLICT_EDIT_DELETE, FCACHE_CONFLICT_DELETE_EDIT },
                { FCACHE_CONFLICT_RENAME_DELETE, FCACHE_CONFLICT_DELETE_RENAME },
                { FCACHE_CONFLICT_CHILDREN_DELETE, FCACHE_CONFLICT_DELETE_CHILDREN },
        };

        for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
                if (k == pairs[i][0])
                        return pairs[i][1];
                if (k == pairs[i][1])
                        return pairs[i][0];
        }
        return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        fcache_merge_structure_options opts = FCACHE_MERGE_STRUCTURE_OPTIONS_INIT;
        fcache_merge_node base, local, remote;
        fcache_merge_decision d, m;
        int e;

        if (size < 10)
                return 0;
        node_from(&base, data);
        node_from(&local, data + 3);
        node_from(&remote, data + 6);
        opts.flags = data[9] & 3;

        e = fcache_merge_structure(&d, (data[9] & 4) ? NULL : &base, &local, &remote, &opts);
        if (e < 0) {
                assert(e == -22);
                return 0;
        }
        assert(fcache_merge_action_to_string(d.action));
        assert(fcache_conflict_kind_to_string(d.conflict));
        assert((d.action == FCACHE_MERGE_ACTION_CONFLICT) == (d.conflict != FCACHE_CONFLICT_NONE));
        if (d.action == FCACHE_MERGE_ACTION_CONFLICT)
                assert(d.collisions && d.result.type == FCACHE_MERGE_NODE_ABSENT);
        if (d.action == FCACHE_MERGE_ACTION_MERGE_CONTENT)
                assert(d.result.type == FCACHE_MERGE_NODE_FILE && !d.result.content_id);
        if (d.action == FCACHE_MERGE_ACTION_NONE || d.action == FCACHE_MERGE_ACTION_TAKE_REMOTE)
                assert(d.result.type == remote.type);
        if (d.action == FCACHE_MERGE_ACTION_TAKE_LOCAL)
                assert(d.result.type == local.type);

        assert(fcache_merge_structure(&m, (data[9] & 4) ? NULL : &base, &remote, &local, &opts) == 0);
        assert(m.action == mirror_action(d.action));
        assert(m.conflict == mirror_kind(d.conflict));
        assert(m.collisions == d.collisions);
        assert(m.changed_local == d.changed_remote && m.changed_remote == d.changed_local);
        return 0;
}
