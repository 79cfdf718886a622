/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tree.c: see tree.h. */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "tree.h"

static void dump_dir(int dirfd, const char *prefix, GPtrArray *lines, bool times)
{
        int fd = openat(dirfd, prefix[0] ? prefix : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
        GDir *d;
        char *path;
        const char *n;

        g_assert_cmpint(fd, >=, 0);
        path = g_strdup_printf("/proc/self/fd/%d", fd);
        d = g_dir_open(path, 0, NULL);
        g_free(path);
        g_assert_nonnull(d);
        while ((n = g_dir_read_name(d)))
                g_ptr_array_add(names, g_strdup(n));
        g_dir_close(d);
        close(fd);
        for (guint i = 0; i < names->len; i++) {
                const char *name = names->pdata[i];
                char *rel = prefix[0] ? g_strdup_printf("%s/%s", prefix, name) : g_strdup(name);
                GString *s = g_string_new(NULL);
                struct stat st;

                g_assert_cmpint(fstatat(dirfd, rel, &st, AT_SYMLINK_NOFOLLOW), ==, 0);
                if (g_str_has_prefix(name, ".fcache-"))
                        g_string_append(s, "LEFTOVER ");
                g_string_append_printf(s, "%s %s %04o %u:%u", rel,
                                       S_ISDIR(st.st_mode) ? "dir" : S_ISLNK(st.st_mode) ? "symlink"
                                       : S_ISREG(st.st_mode) ? "file" : S_ISFIFO(st.st_mode)
                                       ? "fifo" : "other", st.st_mode & 07777, st.st_uid, st.st_gid);
                if (S_ISREG(st.st_mode) && st.st_nlink > 1)
                        g_string_append_printf(s, " links=%lu", (unsigned long)st.st_nlink);
                if (times && !S_ISLNK(st.st_mode))
                        g_string_append_printf(s, " mtime=%lld", (long long)st.st_mtim.tv_sec);
                if (S_ISREG(st.st_mode)) {
                        char *text = tree_get(dirfd, rel), *sum;

                        sum = g_compute_checksum_for_string(G_CHECKSUM_SHA256, text, -1);
                        g_string_append_printf(s, " %.16s", sum);
                        g_free(sum);
                        g_free(text);
                } else if (S_ISLNK(st.st_mode)) {
                        char target[4096];
                        ssize_t len = readlinkat(dirfd, rel, target, sizeof(target) - 1);

                        g_assert_cmpint(len, >=, 0);
                        target[len] = '\0';
                        g_string_append_printf(s, " -> %s", target);
                }
                if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
                        int xfd = openat(dirfd, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
                        char list[1024], value[256];
                        ssize_t len = xfd < 0 ? -1 : flistxattr(xfd, list, sizeof(list));

                        for (ssize_t j = 0; len > 0 && j < len; j += (ssize_t)strlen(list + j) + 1) {
                                ssize_t vl;

                                if (!g_str_has_prefix(list + j, "user."))
                                        continue;
                                vl = fgetxattr(xfd, list + j, value, sizeof(value) - 1);
                                if (vl >= 0) {
                                        value[vl] = '\0';
                                        g_string_append_printf(s, " x:%s=%s", list + j, value);
                                }
                        }
                        if (xfd >= 0)
                                close(xfd);
                }
                g_ptr_array_add(lines, g_string_free(s, FALSE));
                if (S_ISDIR(st.st_mode))
                        dump_dir(dirfd, rel, lines, times);
                g_free(rel);
        }
        g_ptr_array_unref(names);
}

static gint cmp_str(gconstpointer a, gconstpointer b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

char *tree_dump(int dirfd, bool with_times)
{
        GPtrArray *lines = g_ptr_array_new_with_free_func(g_free);
        GString *out = g_string_new(NULL);

        dump_dir(dirfd, "", lines, with_times);
        g_ptr_array_sort(lines, cmp_str);
        for (guint i = 0; i < lines->len; i++) {
                g_string_append(out, lines->pdata[i]);
                g_string_append_c(out, '\n');
        }
        g_ptr_array_unref(lines);
        return g_string_free(out, FALSE);
}

void tree_put(int dirfd, const char *path, const char *text)
{
        int fd = openat(dirfd, path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(write(fd, text, strlen(text)), ==, (ssize_t)strlen(text));
        close(fd);
}

char *tree_get(int dirfd, const char *path)
{
        int fd = openat(dirfd, path, O_RDONLY | O_NOFOLLOW);
        GString *s;
        char buf[8192];
        ssize_t n;

        if (fd < 0)
                return NULL;
        s = g_string_new(NULL);
        while ((n = read(fd, buf, sizeof(buf))) > 0)
                g_string_append_len(s, buf, n);
        close(fd);
        return g_string_free(s, FALSE);
}

uint64_t tree_register(struct oplog *log, int dirfd, const char *path)
{
        struct oplog_version v;
        struct stat st;
        char *slash, *parent_path, *name;
        uint64_t parent, lid;

        if (!path[0]) {
                g_assert_cmpint(fstat(dirfd, &st), ==, 0);
                oplog_version_from_stat(&v, &st);
                g_assert_cmpint(oplog_set_root(log, &v), ==, 0);
                return OPLOG_ROOT;
        }
        slash = strrchr(path, '/');
        parent_path = slash ? g_strndup(path, slash - path) : g_strdup("");
        name = g_strdup(slash ? slash + 1 : path);
        parent = tree_register(log, dirfd, parent_path);
        g_assert_cmpint(fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW), ==, 0);
        oplog_version_from_stat(&v, &st);
        if (S_ISREG(st.st_mode)) {
                int fd = openat(dirfd, path, O_RDONLY);

                g_assert_cmpint(fd, >=, 0);
                g_assert_cmpint(oplog_put_base_fd(log, fd, v.content), ==, 0);
                close(fd);
        } else if (S_ISLNK(st.st_mode)) {
                char target[4096];
                ssize_t n = readlinkat(dirfd, path, target, sizeof(target));

                g_assert_cmpint(n, >=, 0);
                g_assert_cmpint(fcache_merge_store_put(v.content, oplog_store(log), target,
                                                       (size_t)n), ==, 0);
        }
        g_assert_cmpint(oplog_object(log, parent, name, &v, &lid), ==, 0);
        g_free(parent_path);
        g_free(name);
        return lid;
}

void fixture_setup(struct server_fixture *f, const void *data)
{
        char *path;

        f->dir = g_dir_make_tmp("test-offline-XXXXXX", NULL);
        g_assert_nonnull(f->dir);
        path = g_build_filename(f->dir, "srv", NULL);
        g_assert_cmpint(mkdir(path, 0755), ==, 0);
        f->srv = open(path, O_RDONLY | O_DIRECTORY);
        g_assert_cmpint(f->srv, >=, 0);
        g_free(path);
        path = g_build_filename(f->dir, "log", NULL);
        g_assert_cmpint(oplog_open(&f->log, path, NULL), ==, 0);
        g_free(path);
        path = g_build_filename(f->dir, "scratch", NULL);
        f->scratch = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        g_assert_cmpint(f->scratch, >=, 0);
        g_free(path);
        f->refreshed = 0;
}

void fixture_teardown(struct server_fixture *f, const void *data)
{
        char *cmd = g_strdup_printf("rm -rf '%s'", f->dir);

        oplog_close(f->log);
        close(f->srv);
        close(f->scratch);
        g_assert_cmpint(system(cmd), ==, 0);
        g_free(cmd);
        g_free(f->dir);
}

void fixture_new_scratch(struct server_fixture *f)
{
        static unsigned n;
        char *path = g_strdup_printf("%s/scratch.%u", f->dir, n++);

        close(f->scratch);
        f->scratch = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        g_assert_cmpint(f->scratch, >=, 0);
        g_free(path);
}

void fixture_local(struct server_fixture *f, uint64_t lid, const char *text)
{
        fixture_new_scratch(f);
        g_assert_cmpint(pwrite(f->scratch, text, strlen(text), 0), ==, (ssize_t)strlen(text));
        g_assert_cmpint(oplog_record_content(f->log, lid, f->scratch), ==, 0);
}

void fixture_refresh(void *ud, uint64_t lid)
{
        ((struct server_fixture *)ud)->refreshed++;
}
