/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-state.c: libFuzzer target for the takeover log's decoder
 * (daemon/view/view-state.c), which a successor runs on whatever its
 * killed predecessor left in CacheDir/view.state.
 *
 * Any image decodes without reading outside it; every name handed on is
 * one path component; a node's other names encode back to a list that
 * decodes to the same names.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

void view_log(int level, const char *fmt, ...)
{
        (void)level;
        (void)fmt;
}

static volatile unsigned sink;

static void one_component(const char *name)
{
        size_t len = strlen(name);

        assert(len > 0 && len <= NAME_MAX && !strchr(name, '/'));
        assert(strcmp(name, ".") && strcmp(name, ".."));
}

static int node(struct view *v, uint64_t id, uint64_t ino, mode_t type, uint64_t parent,
                const char *name, const void *handle, unsigned hlen, int htype)
{
        (void)v, (void)id, (void)ino, (void)type, (void)parent, (void)htype;
        if (*name)
                one_component(name);
        assert(hlen <= MAX_HANDLE_SZ);
        for (unsigned i = 0; i < hlen; i++)
                sink += ((const unsigned char *)handle)[i];
        return 0;
}

static void aliases(struct view *v, uint64_t id, const void *list, uint32_t size, uint32_t count)
{
        const char *p = list, *end = p + size;
        GByteArray *again = g_byte_array_new();
        GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
        uint64_t parent, parent2;
        char *name;

        (void)v, (void)id;
        for (uint32_t i = 0; i < count && (name = state_alias_next(&p, end, &parent)); i++) {
                one_component(name);
                state_alias_put(again, parent, name);
                g_ptr_array_add(names, name);
        }
        p = end = (const char *)again->data;
        if (again->len)
                end += again->len;
        for (guint i = 0; i < names->len; i++) {
                name = state_alias_next(&p, end, &parent2);
                assert(name && !strcmp(name, g_ptr_array_index(names, i)));
                g_free(name);
        }
        assert(p == end);
        g_ptr_array_free(names, TRUE);
        g_byte_array_free(again, TRUE);
}

static int file(struct view *v, uint64_t fh, uint64_t id, int flags, uint32_t pt_mode)
{
        (void)v, (void)fh, (void)id, (void)flags, (void)pt_mode;
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static const struct state_restorer to = { node, aliases, file };
        /* Records are read in place, 8-byte aligned, as from the log's mapping. */
        char *buf = g_malloc(size ? size : 1);

        memcpy(buf, data, size);
        state_replay(NULL, buf, size, &to);
        g_free(buf);
        return 0;
}
