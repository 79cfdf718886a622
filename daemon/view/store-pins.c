/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store-pins.c: the pins, kept a second time in a small file beside the
 * index (CacheDir/pins).
 *
 * The pins are the user's promise of what stays available offline; the
 * index (store.db) is a cache that a damaged disk or a bad shutdown can
 * lose.  So every change of the pins also rewrites this file (a new file,
 * fsync, rename, fsync of the directory), and a store that starts without pins (its index made
 * anew) takes them back from here.
 *
 * Format: a first line "fcache-pins 1", then a line per pin: the priority,
 * a tab, and the path relative to the volume root escaped as a C string
 * (g_strescape), so that any byte of a name fits on one line.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <glib.h>

#include "store.h"
#include "view-log.h"
#include "view-time.h"

#define PINS_MAGIC "fcache-pins 1"

static char *pins_path(const char *dir, const char *suffix)
{
        return g_strdup_printf("%s/pins%s", dir, suffix);
}

int pins_file_save(const char *dir, const struct pins_entry *pins, size_t n)
{
        GString *text = g_string_new(PINS_MAGIC "\n");
        char *path = pins_path(dir, "");
        GError *error = NULL;
        int r = 0, dfd;

        for (size_t i = 0; i < n; i++) {
                char *esc = g_strescape(pins[i].path, NULL);

                g_string_append_printf(text, "%d\t%s\n", pins[i].prio, esc);
                g_free(esc);
        }
        if (!g_file_set_contents_full(path, text->str, (gssize)text->len,
                                      G_FILE_SET_CONTENTS_CONSISTENT |
                                      G_FILE_SET_CONTENTS_DURABLE, 0600, &error)) {
                log_error("Failed to write %s: %s", path, error->message);
                g_error_free(error);
                r = -EIO;
        } else {
                /* The rename itself must survive a power loss too. */
                dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dfd >= 0) {
                        if (fsync(dfd) < 0)
                                r = -errno;
                        close(dfd);
                }
        }
        g_string_free(text, TRUE);
        g_free(path);
        return r;
}

int pins_file_load(const char *dir, int (*fn)(void *ud, const char *path, int prio), void *ud)
{
        char *path = pins_path(dir, ""), *text = NULL;
        GError *error = NULL;
        char **lines;
        int r = 0;

        if (!g_file_get_contents(path, &text, NULL, &error)) {
                r = error->code == G_FILE_ERROR_NOENT ? -ENOENT : -EIO;
                g_error_free(error);
                g_free(path);
                return r;
        }
        g_free(path);
        lines = g_strsplit(text, "\n", -1);
        g_free(text);
        if (!lines[0] || strcmp(lines[0], PINS_MAGIC) != 0) {
                g_strfreev(lines);
                return -EUCLEAN;
        }
        for (size_t i = 1; lines[i] && r >= 0; i++) {
                char *tab = strchr(lines[i], '\t'), *end, *name;
                long prio;

                if (!*lines[i])
                        continue;
                if (!tab)
                        continue;       /* a torn line: the rest is still good */
                *tab = '\0';
                prio = strtol(lines[i], &end, 10);
                if (*end || prio < -1000000 || prio > 1000000)
                        continue;
                name = g_strcompress(tab + 1);
                r = fn(ud, name, (int)prio);
                g_free(name);
        }
        g_strfreev(lines);
        return r;
}
