/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-merge-content.c: libFuzzer target for fcache_merge_content().
 *
 * Input: two option bytes, two 16-bit little-endian lengths, then base,
 * local and remote back to back (remote is the rest). Whatever the bytes,
 * the merge must succeed and its result must be consistent: a clean merge
 * has content, taking a side yields exactly that side, a conflict keeps all
 * three versions byte for byte, and a text conflict has a rendering with
 * markers.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fcache-merge.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same(const void *a, size_t an, const void *b, size_t bn)
{
        return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        fcache_merge_content_options opts = FCACHE_MERGE_CONTENT_OPTIONS_INIT;
        fcache_merge_content_result r;
        fcache_merge_buf b, l, rm;
        size_t nb, nl;
        bool no_base;
        uint8_t o;

        if (size < 6)
                return 0;
        o = data[0];
        nb = (size_t) data[2] | (size_t) data[3] << 8;
        nl = (size_t) data[4] | (size_t) data[5] << 8;
        no_base = data[1] & 1;
        opts.marker_size = (unsigned short) ((data[1] >> 1) & 0x0f);
        data += 6;
        size -= 6;
        if (nb > size)
                nb = size;
        if (nl > size - nb)
                nl = size - nb;
        b = FCACHE_MERGE_BUF(data, nb);
        l = FCACHE_MERGE_BUF(data + nb, nl);
        rm = FCACHE_MERGE_BUF(data + nb + nl, size - nb - nl);

        opts.style = (fcache_merge_style) ((o & 3) % _FCACHE_MERGE_STYLE_MAX);
        opts.flags = (o >> 2) & 0x1f;
        if (o & 0x80)
                opts.binary_scan_limit = FCACHE_MERGE_GIT_BINARY_SCAN;

        assert(fcache_merge_content(&r, no_base ? NULL : &b, &l, &rm, &opts) == 0);

        switch (r.outcome) {
        case FCACHE_MERGE_CONTENT_CONFLICT:
                assert(r.conflict == FCACHE_CONFLICT_CONTENT || r.conflict == FCACHE_CONFLICT_BINARY);
                assert(!r.merged);
                assert(same(r.local, r.local_size, l.data, l.size));
                assert(same(r.remote, r.remote_size, rm.data, rm.size));
                assert(!same(l.data, l.size, rm.data, rm.size));
                if (r.conflict == FCACHE_CONFLICT_CONTENT)
                        assert(r.rendering && r.rendering[r.rendering_size] == '\0');
                break;
        case FCACHE_MERGE_CONTENT_TAKE_LOCAL:
                assert(same(r.merged, r.merged_size, l.data, l.size));
                break;
        case FCACHE_MERGE_CONTENT_TAKE_REMOTE:
                assert(same(r.merged, r.merged_size, rm.data, rm.size));
                break;
        case FCACHE_MERGE_CONTENT_UNCHANGED:
        case FCACHE_MERGE_CONTENT_IDENTICAL:
                assert(same(r.merged, r.merged_size, l.data, l.size));
                assert(same(r.merged, r.merged_size, rm.data, rm.size));
                break;
        case FCACHE_MERGE_CONTENT_MERGED:
                assert(r.merged && r.merged[r.merged_size] == '\0');
                assert(!r.binary);
                break;
        default:
                abort();
        }
        if (r.outcome != FCACHE_MERGE_CONTENT_CONFLICT)
                assert(r.conflict == FCACHE_CONFLICT_NONE && r.merged && !r.rendering && !r.local);

        (void) fcache_merge_count_markers(data, size, opts.marker_size);
        fcache_merge_content_result_free(&r);
        return 0;
}
