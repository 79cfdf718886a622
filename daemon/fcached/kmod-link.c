/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kmod-link.c: fcached's link to fcache.ko (kmod-link.h).
 *
 * One netlink connection, shared by the main loop and the pin builders
 * under a mutex.  Whether the module is loaded is checked cheaply (sysfs,
 * then one controller request) by fcd_kmod_recheck, which the pins poll.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "kmod-conn.h"
#include "kmod-link.h"

static struct {
        GMutex lock;
        struct kconn conn;      /* fd -1 while closed */
        guint16 family;         /* 0: not loaded */
        ino_t sys_ino;          /* /sys/module/fcache of that load */
        GHashTable *holders;    /* kernel pin id -> holders (GUINT_TO_POINTER) */
        bool detached;
} k = { .conn = { .fd = -1 } };

/*
 * Resolve the family now: its id, or 0.  Lock held.  sysfs says "not
 * loaded" without a socket, and "the same load as before" by the inode of
 * /sys/module/fcache (kernfs numbers a new directory afresh): only a load
 * not seen before costs a controller request.
 */
static guint16 resolve_family(void)
{
        struct kconn c;
        struct stat st;
        guint16 id;

        if (stat("/sys/module/fcache", &st) == 0) {
                if (k.family && st.st_ino == k.sys_ino)
                        return k.family;
        } else if (stat("/sys/module", &st) == 0) {
                return 0;
        } else {
                st.st_ino = 0; /* no sysfs: ask the controller every time */
        }
        if (kconn_open(&c) < 0)
                return 0;
        id = c.family;
        kconn_close(&c);
        k.sys_ino = st.st_ino;
        return id;
}

/* A new family (or none): the old connection and pin counts belong to the old module. */
static void set_family(guint16 id)
{
        __atomic_store_n(&k.family, id, __ATOMIC_RELAXED);
        kconn_close(&k.conn);
        if (k.holders)
                g_hash_table_remove_all(k.holders);
}

/* Lock held: an open connection to the current family, or -errno. */
static int conn_get(void)
{
        int r;

        if (!k.family)
                return -ENOENT;
        if (k.conn.fd >= 0)
                return 0;
        r = kconn_open(&k.conn);
        if (r < 0)
                return r;
        if (k.conn.family != k.family) { /* reloaded since the last check */
                set_family(0);
                return -ENOENT;
        }
        return 0;
}

guint16 fcd_kmod_family(void)
{
        return __atomic_load_n(&k.family, __ATOMIC_RELAXED);
}

bool fcd_kmod_recheck(void)
{
        guint16 id;
        bool changed;

        g_mutex_lock(&k.lock);
        id = resolve_family();
        changed = id != k.family;
        if (changed)
                set_family(id);
        g_mutex_unlock(&k.lock);
        return changed;
}

int fcd_kmod_pin(int fd, bool memory, struct fcd_kpin *out, char *msg, size_t cap)
{
        struct kreply r;
        gpointer n;
        int err;

        msg[0] = '\0';
        g_mutex_lock(&k.lock);
        err = conn_get();
        if (!err) {
                err = kcall(&k.conn, FCACHE_CMD_PIN, fd, memory ? FCACHE_FLAG_MEMORY : 0, &r,
                            NULL);
                if (err && err != -ENOSPC && err != -EACCES && err != -EPERM)
                        kconn_close(&k.conn); /* the module may be going: open anew next time */
        }
        if (!err && !r.v[FCACHE_A_PIN_ID])
                err = -EPROTO;
        if (!err) {
                guint64 *key = g_new(guint64, 1);

                if (!k.holders)
                        k.holders = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free,
                                                          NULL);
                out->id = r.v[FCACHE_A_PIN_ID];
                out->family = k.family;
                *key = out->id;
                n = g_hash_table_lookup(k.holders, key);
                /* an existing key stays and the new one is freed */
                g_hash_table_insert(k.holders, key, GUINT_TO_POINTER(GPOINTER_TO_UINT(n) + 1));
        } else {
                snprintf(msg, cap, "%s", err == -ENOENT ? "fcache.ko is not loaded" :
                         r.msg[0] ? r.msg : strerror(-err));
        }
        g_mutex_unlock(&k.lock);
        return err;
}

void fcd_kmod_unpin(struct fcd_kpin *kp)
{
        struct kmsg m;
        struct kreply r;
        guint n;

        if (!kp->id)
                return;
        g_mutex_lock(&k.lock);
        if (k.detached || kp->family != k.family || !k.holders)
                goto out; /* kept for the next start, or ended with its module */
        n = GPOINTER_TO_UINT(g_hash_table_lookup(k.holders, &kp->id));
        if (n > 1) {
                g_hash_table_insert(k.holders, g_memdup2(&kp->id, sizeof(kp->id)),
                                    GUINT_TO_POINTER(n - 1));
                goto out;
        }
        g_hash_table_remove(k.holders, &kp->id);
        if (conn_get() < 0)
                goto out;
        kmsg_init(&m, k.conn.family, FCACHE_CMD_UNPIN, 0);
        kmsg_put(&m, FCACHE_A_PIN_ID, &kp->id, sizeof(kp->id));
        memset(&r, 0, sizeof(r));
        if (kconn_send(&k.conn, &m) == 0 && kconn_wait(&k.conn, &r, NULL, NULL, NULL) == 0)
                goto out;
        /* ENOENT: unpinned meanwhile by a direct caller; nothing else is expected */
        kconn_close(&k.conn);
out:
        kp->id = 0;
        g_mutex_unlock(&k.lock);
}

int fcd_kmod_set_budget(guint64 bytes, char *msg, size_t cap)
{
        struct kmsg m;
        struct kreply r;
        int err;

        msg[0] = '\0';
        memset(&r, 0, sizeof(r));
        g_mutex_lock(&k.lock);
        err = conn_get();
        if (!err) {
                kmsg_init(&m, k.conn.family, FCACHE_CMD_LIMITS_SET, 0);
                kmsg_put(&m, FCACHE_A_PIN_BUDGET, &bytes, sizeof(bytes));
                err = kconn_send(&k.conn, &m);
                if (!err)
                        err = kconn_wait(&k.conn, &r, NULL, NULL, NULL);
        }
        if (err)
                snprintf(msg, cap, "%s", err == -ENOENT ? "fcache.ko is not loaded" :
                         r.msg[0] ? r.msg : strerror(-err));
        g_mutex_unlock(&k.lock);
        return err;
}

void fcd_kmod_detach(void)
{
        g_mutex_lock(&k.lock);
        k.detached = true;
        kconn_close(&k.conn);
        g_clear_pointer(&k.holders, g_hash_table_unref);
        g_mutex_unlock(&k.lock);
}
