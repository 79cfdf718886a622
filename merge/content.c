/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * content.c: three-way merge of a regular file's bytes. The decisions that
 * need no diff (one side unchanged, identical changes, binary content) are
 * made here; text is merged with libgit2's git_merge_file, which needs no
 * repository. Pure: no I/O.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <git2.h>

#include "fcache-merge.h"
#include "merge-internal.h"

bool fcache_merge_is_binary(const void *data, size_t size, size_t scan_limit)
{
        if (!data || size == 0)
                return false;
        if (scan_limit && size > scan_limit)
                size = scan_limit;
        return memchr(data, 0, size) != NULL;
}

static size_t line_end_len(const char *p, const char *end)
{
        if (p == end)
                return 0;
        if (*p == '\n')
                return 1;
        if (*p == '\r' && p + 1 < end && p[1] == '\n')
                return 2;
        return (size_t) -1;
}

/* Whether the line at @p is a conflict marker of exactly @n characters. */
static bool is_marker_line(const char *p, const char *end, size_t n)
{
        static const char markers[] = "<|=>";
        char c = *p;

        if (!strchr(markers, c) || c == '\0' || (size_t) (end - p) < n)
                return false;
        for (size_t i = 1; i < n; i++)
                if (p[i] != c)
                        return false;
        p += n;
        /* "=======" stands alone; the others may carry a label. */
        if (line_end_len(p, end) != (size_t) -1)
                return true;
        return c != '=' && *p == ' ';
}

size_t fcache_merge_count_markers(const void *data, size_t size, unsigned short marker_size)
{
        const char *p = data, *end = p + size;
        size_t n = marker_size ? marker_size : GIT_MERGE_CONFLICT_MARKER_SIZE, count = 0;

        if (!data)
                return 0;
        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t) (end - p));

                if (is_marker_line(p, end, n))
                        count++;
                if (!nl)
                        break;
                p = nl + 1;
        }
        return count;
}

static bool buf_valid(const fcache_merge_buf *b)
{
        return b && (b->data || b->size == 0);
}

static bool buf_eq(const fcache_merge_buf *a, const fcache_merge_buf *b)
{
        return a->size == b->size && (a->size == 0 || memcmp(a->data, b->data, a->size) == 0);
}

/* A NUL-terminated copy, so that callers may treat text as a C string. */
static int dup_bytes(char **out, size_t *out_size, const void *data, size_t size)
{
        char *p;

        if (size == SIZE_MAX)
                return -ENOMEM;
        p = malloc(size + 1);
        if (!p)
                return -ENOMEM;
        if (size)
                memcpy(p, data, size);
        p[size] = '\0';
        *out = p;
        *out_size = size;
        return 0;
}

static int keep_versions(fcache_merge_content_result *r, const fcache_merge_buf *base,
                         const fcache_merge_buf *local, const fcache_merge_buf *remote)
{
        int e;

        if (base) {
                e = dup_bytes(&r->base, &r->base_size, base->data, base->size);
                if (e < 0)
                        return e;
        }
        e = dup_bytes(&r->local, &r->local_size, local->data, local->size);
        if (e < 0)
                return e;
        return dup_bytes(&r->remote, &r->remote_size, remote->data, remote->size);
}

static unsigned git_flags(const fcache_merge_content_options *o)
{
        unsigned f = 0;

        if (o->flags & FCACHE_MERGE_CONTENT_IGNORE_WHITESPACE)
                f |= GIT_MERGE_FILE_IGNORE_WHITESPACE;
        if (o->flags & FCACHE_MERGE_CONTENT_IGNORE_WHITESPACE_CHANGE)
                f |= GIT_MERGE_FILE_IGNORE_WHITESPACE_CHANGE;
        if (o->flags & FCACHE_MERGE_CONTENT_IGNORE_WHITESPACE_EOL)
                f |= GIT_MERGE_FILE_IGNORE_WHITESPACE_EOL;
        if (o->flags & FCACHE_MERGE_CONTENT_PATIENCE)
                f |= GIT_MERGE_FILE_DIFF_PATIENCE;
        if (o->flags & FCACHE_MERGE_CONTENT_MINIMAL)
                f |= GIT_MERGE_FILE_DIFF_MINIMAL;
        return f;
}

static void git_input(git_merge_file_input *in, const fcache_merge_buf *b)
{
        static const char empty[1];

        git_merge_file_input_init(in, GIT_MERGE_FILE_INPUT_VERSION);
        /* No base: merge against an empty file, as git does for add/add. */
        in->ptr = b && b->size ? b->data : empty;
        in->size = b ? b->size : 0;
}

/*
 * Merge text with git_merge_file. @style_flag selects the marker style;
 * *res must be freed with git_merge_file_result_free() on success.
 */
static int run_git_merge(git_merge_file_result *res, const fcache_merge_buf *base, const fcache_merge_buf *local,
                     const fcache_merge_buf *remote, const fcache_merge_content_options *o, unsigned style_flag)
{
        git_merge_file_input ib, il, ir;
        git_merge_file_options go;
        int e;

        git_input(&ib, base);
        git_input(&il, local);
        git_input(&ir, remote);
        git_merge_file_options_init(&go, GIT_MERGE_FILE_OPTIONS_VERSION);
        go.ancestor_label = o->base_label ? o->base_label : "base";
        go.our_label = o->local_label ? o->local_label : "local";
        go.their_label = o->remote_label ? o->remote_label : "remote";
        go.favor = GIT_MERGE_FILE_FAVOR_NORMAL;
        go.flags = git_flags(o) | style_flag;
        go.marker_size = o->marker_size ? o->marker_size : GIT_MERGE_CONFLICT_MARKER_SIZE;

        e = git_merge_file(res, &ib, &il, &ir, &go);
        if (e < 0)
                return fcache_merge_git_errno(e);
        return 0;
}

static unsigned style_flag(fcache_merge_style style)
{
        switch (style) {
        case FCACHE_MERGE_STYLE_MERGE:
                return GIT_MERGE_FILE_STYLE_MERGE;
        case FCACHE_MERGE_STYLE_ZDIFF3:
                return GIT_MERGE_FILE_STYLE_ZDIFF3;
        default:
                return GIT_MERGE_FILE_STYLE_DIFF3;
        }
}

/* Both sides changed the text differently: let git merge it. */
static int merge_text(fcache_merge_content_result *r, const fcache_merge_buf *base, const fcache_merge_buf *local,
                      const fcache_merge_buf *remote, const fcache_merge_content_options *o)
{
        git_merge_file_result res = { 0 };
        int e;

        /*
         * Decide with git's default (merge style, zealous) first: diff3 style
         * caps xdiff's merge level, which could leave conflicts that zealous
         * mode resolves. The requested style only shapes the rendering.
         */
        e = run_git_merge(&res, base, local, remote, o, GIT_MERGE_FILE_STYLE_MERGE);
        if (e < 0)
                return e;

        if (res.automergeable) {
                r->outcome = FCACHE_MERGE_CONTENT_MERGED;
                e = dup_bytes(&r->merged, &r->merged_size, res.ptr, res.len);
                git_merge_file_result_free(&res);
                return e;
        }

        r->outcome = FCACHE_MERGE_CONTENT_CONFLICT;
        if (!res.ptr) {
                /* libgit2 judged an input binary after all (e.g. too large for xdiff). */
                git_merge_file_result_free(&res);
                r->binary = true;
                r->conflict = FCACHE_CONFLICT_BINARY;
                return 0;
        }
        r->conflict = FCACHE_CONFLICT_CONTENT;

        if (o->style != FCACHE_MERGE_STYLE_MERGE) {
                git_merge_file_result_free(&res);
                memset(&res, 0, sizeof(res));
                e = run_git_merge(&res, base, local, remote, o, style_flag(o->style));
                if (e < 0)
                        return e;
                if (!res.ptr) {
                        git_merge_file_result_free(&res);
                        return -EIO;
                }
        }
        e = dup_bytes(&r->rendering, &r->rendering_size, res.ptr, res.len);
        git_merge_file_result_free(&res);
        return e;
}

void fcache_merge_content_result_free(fcache_merge_content_result *result)
{
        if (!result)
                return;
        free(result->merged);
        free(result->rendering);
        free(result->base);
        free(result->local);
        free(result->remote);
        memset(result, 0, sizeof(*result));
}

int fcache_merge_content(fcache_merge_content_result *out,
                         const fcache_merge_buf *base,
                         const fcache_merge_buf *local,
                         const fcache_merge_buf *remote,
                         const fcache_merge_content_options *opts)
{
        fcache_merge_content_options o = FCACHE_MERGE_CONTENT_OPTIONS_INIT;
        fcache_merge_content_result r = { 0 };
        bool local_changed, remote_changed;
        int e;

        if (!out || !buf_valid(local) || !buf_valid(remote) || (base && !buf_valid(base)))
                return -EINVAL;
        if (opts) {
                if (opts->version != FCACHE_MERGE_CONTENT_OPTIONS_VERSION ||
                    (unsigned) opts->style >= _FCACHE_MERGE_STYLE_MAX)
                        return -EINVAL;
                o = *opts;
        }
        if (o.max_text_size == 0)
                o.max_text_size = FCACHE_MERGE_DEFAULT_MAX_TEXT_SIZE;

        /* Without a base both sides created the file: both count as changed. */
        local_changed = !base || !buf_eq(base, local);
        remote_changed = !base || !buf_eq(base, remote);

        if (buf_eq(local, remote)) {
                r.outcome = local_changed ? FCACHE_MERGE_CONTENT_IDENTICAL : FCACHE_MERGE_CONTENT_UNCHANGED;
                e = dup_bytes(&r.merged, &r.merged_size, local->data, local->size);
        } else if (!local_changed) {
                r.outcome = FCACHE_MERGE_CONTENT_TAKE_REMOTE;
                e = dup_bytes(&r.merged, &r.merged_size, remote->data, remote->size);
        } else if (!remote_changed) {
                r.outcome = FCACHE_MERGE_CONTENT_TAKE_LOCAL;
                e = dup_bytes(&r.merged, &r.merged_size, local->data, local->size);
        } else {
                const fcache_merge_buf *in[3] = { base, local, remote };

                for (size_t i = 0; i < 3; i++)
                        if (in[i] && (in[i]->size > o.max_text_size ||
                                      fcache_merge_is_binary(in[i]->data, in[i]->size, o.binary_scan_limit)))
                                r.binary = true;

                if (r.binary) {
                        r.outcome = FCACHE_MERGE_CONTENT_CONFLICT;
                        r.conflict = FCACHE_CONFLICT_BINARY;
                        e = 0;
                } else {
                        e = fcache_merge_git_ref();
                        if (e >= 0)
                                e = merge_text(&r, base, local, remote, &o);
                }
                if (e >= 0 && r.outcome == FCACHE_MERGE_CONTENT_CONFLICT)
                        e = keep_versions(&r, base, local, remote);
        }

        if (e < 0) {
                fcache_merge_content_result_free(&r);
                return e;
        }
        *out = r;
        return 0;
}
