/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-store-numbers.c: the store's rows when the backing numbers its files
 * anew under a running worker (sshfs mounted again): two files of one size
 * and one set of times swap numbers, and each number must serve its new
 * file's bytes, never the copy the other file left under it.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"

#define SIZE 4096

struct fixture {
        char *dir;
        struct store *s;
        int fd[2];              /* the backing's two files: A and B */
        char data[2][SIZE];
};

static void setup(struct fixture *f, gconstpointer unused)
{
        (void)unused;
        f->dir = g_dir_make_tmp("test-store-numbers-XXXXXX", NULL);
        g_assert_nonnull(f->dir);
        g_assert_cmpint(store_open(&f->s, f->dir, 64 << 20, 0, 0), ==, 0);
        for (int i = 0; i < 2; i++) {
                char *path = g_strdup_printf("%s/file%d", f->dir, i);

                memset(f->data[i], 'A' + i, SIZE);
                f->fd[i] = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                g_assert_cmpint(f->fd[i], >=, 0);
                g_assert_cmpint(write(f->fd[i], f->data[i], SIZE), ==, SIZE);
                g_free(path);
        }
}

static void teardown(struct fixture *f, gconstpointer unused)
{
        char *cmd = g_strdup_printf("rm -rf '%s'", f->dir);

        (void)unused;
        store_close(f->s);
        close(f->fd[0]);
        close(f->fd[1]);
        g_assert_cmpint(system(cmd), ==, 0);
        g_free(cmd);
        g_free(f->dir);
}

/* Both files look alike but for the number: sftp's times are seconds. */
static struct stat stat_as(uint64_t ino)
{
        struct stat st = { 0 };

        st.st_ino = ino;
        st.st_mode = S_IFREG | 0644;
        st.st_size = SIZE;
        st.st_mtim.tv_sec = st.st_ctim.tv_sec = 1700000000;
        return st;
}

/* Reads number @ino, whose file is now @which (-1: no backing file, the
 * store's copy alone), through the store. */
static void read_as(struct fixture *f, uint64_t ino, int which, char *buf)
{
        struct stat st = stat_as(ino);
        struct sobj *o;

        g_assert_cmpint(store_obj_get(f->s, &st, true, 0, NULL, &o), ==, 0);
        g_assert_cmpint(store_obj_read(f->s, o, which < 0 ? -1 : f->fd[which], buf, SIZE, 0),
                        ==, SIZE);
        store_obj_put(f->s, o);
}

/* The store's copy of @ino alone holds file @which's bytes. */
static void served(struct fixture *f, uint64_t ino, int which)
{
        char buf[SIZE];

        read_as(f, ino, -1, buf);
        g_assert_cmpint(memcmp(buf, f->data[which], SIZE), ==, 0);
}

static void cached(struct fixture *f, uint64_t ino, int which)
{
        char buf[SIZE];
        struct sobj_info info;

        read_as(f, ino, which, buf);
        g_assert_cmpint(memcmp(buf, f->data[which], SIZE), ==, 0);
        g_assert_cmpint(store_info_ino(f->s, ino, &info), ==, 0);
        g_assert_true(info.complete);
}

static void test_swapped(struct fixture *f, gconstpointer unused)
{
        struct sobj_info info;
        char buf[SIZE];
        unsigned dropped;

        (void)unused;
        /* Mount 1: A is number 10, B number 11; both copied whole. */
        g_assert_cmpint(store_renumbered(f->s, "boot/1"), ==, 0);
        cached(f, 10, 0);
        cached(f, 11, 1);

        /* Mount 2, under the running worker: A is 11 now. */
        g_assert_cmpint(store_numbers_unsure(f->s, "boot/2"), ==, 0);
        read_as(f, 11, 0, buf);
        g_assert_cmpint(memcmp(buf, f->data[0], SIZE), ==, 0);
        /* Still unsure until the resync settles: the fact is mount 1's. */
        g_assert_true(store_numbered_by(f->s, "boot/1"));

        /* B was 11 and is 10 now, but nothing reached 10: settled, it goes. */
        g_assert_cmpint(store_numbers_settle(f->s, &dropped), ==, 1);
        g_assert_cmpuint(dropped, ==, 1);
        g_assert_cmpint(store_info_ino(f->s, 10, &info), ==, -ENOENT);
        g_assert_true(store_numbered_by(f->s, "boot/2"));
        g_assert_false(store_numbered_by(f->s, "boot/1"));
        /* Sure again: B read as 10 is fetched anew, A as 11 kept. */
        served(f, 11, 0);
        cached(f, 10, 1);
        g_assert_cmpint(store_numbers_settle(f->s, &dropped), ==, 0);
}

/* The number is reached by a lookup that does not read (the query's, a
 * pin's check): the row is forgotten all the same, once. */
static void test_info_forgets(struct fixture *f, gconstpointer unused)
{
        struct sobj_info info;
        unsigned dropped;

        (void)unused;
        cached(f, 10, 0);
        g_assert_cmpint(store_numbers_unsure(f->s, "boot/2"), ==, 0);
        g_assert_cmpint(store_info_ino(f->s, 10, &info), ==, 0);
        g_assert_false(info.complete);
        g_assert_cmpuint(info.bytes, ==, 0);
        g_assert_cmpint(info.pin, ==, -1);
        /* Copied again under the new number: kept from then on. */
        cached(f, 10, 1);
        served(f, 10, 1);
        g_assert_cmpint(store_numbers_settle(f->s, &dropped), ==, 1);
        g_assert_cmpuint(dropped, ==, 0);
        served(f, 10, 1);
}

int main(int argc, char **argv)
{
        g_test_init(&argc, &argv, NULL);
        g_test_add("/store/numbers/swapped", struct fixture, NULL, setup, test_swapped,
                   teardown);
        g_test_add("/store/numbers/info-forgets", struct fixture, NULL, setup,
                   test_info_forgets, teardown);
        return g_test_run();
}
