/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * keep-both.c: the name under which one side of a conflict is kept next to
 * the other when a person resolves it with "keep both". Pure. One rule for
 * the daemon and the CLI, so the copies are where people expect them.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fcache-merge.h"

/* A longer "extension" is more likely part of the name than a type. */
#define MAX_EXTENSION 32

static bool name_valid(const char *s)
{
        return s && *s && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && !strchr(s, '/');
}

/* Shorten @len so that s[0..len) does not end inside a UTF-8 sequence. */
static size_t utf8_cut(const char *s, size_t len)
{
        size_t cut = len;

        while (cut > 0 && ((unsigned char) s[cut] & 0xc0) == 0x80)
                cut--;
        return cut;
}

int fcache_merge_keep_both_name(char **out, const char *name, const char *tag, unsigned counter)
{
        const char *dot, *ext;
        char suffix[NAME_MAX + 1];
        size_t stem_len, ext_len, suffix_len;
        char *r;
        int n;

        if (!out || !name_valid(name) || !name_valid(tag))
                return -EINVAL;

        /* The last extension, unless the dot starts the name (".bashrc") or ends it. */
        dot = strrchr(name, '.');
        if (dot && dot != name && dot[1] && strlen(dot) <= MAX_EXTENSION)
                ext = dot;
        else
                ext = name + strlen(name);
        stem_len = (size_t) (ext - name);
        ext_len = strlen(ext);

        if (counter > 1)
                n = snprintf(suffix, sizeof(suffix), ".%s-%u", tag, counter);
        else
                n = snprintf(suffix, sizeof(suffix), ".%s", tag);
        if (n < 0 || (size_t) n >= sizeof(suffix))
                return -ENAMETOOLONG;
        suffix_len = (size_t) n;

        /* Shorten the stem, never the tag or the extension, to stay within NAME_MAX. */
        if (suffix_len + ext_len + 1 > NAME_MAX)
                return -ENAMETOOLONG;
        if (stem_len + suffix_len + ext_len > NAME_MAX)
                stem_len = utf8_cut(name, NAME_MAX - suffix_len - ext_len);

        r = malloc(stem_len + suffix_len + ext_len + 1);
        if (!r)
                return -ENOMEM;
        memcpy(r, name, stem_len);
        memcpy(r + stem_len, suffix, suffix_len);
        memcpy(r + stem_len + suffix_len, ext, ext_len + 1);
        *out = r;
        return 0;
}
