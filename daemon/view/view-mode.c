// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * view-mode.c: which tree the volume serves, asked in one place.
 *
 * The state (online, offline, reintegrating, writeback) says whether the
 * backing (the server) or the mirror (the local copy) is served.  Every
 * request and every backing call asks here: view_offline() for what is
 * served now, view_calls_offline() for the tree a change began in (a
 * forced switch does not wait for changes).  The state itself is switched
 * by view-offline.c with mode_lock held exclusively; a backing call that
 * finds the server gone reports it here, and the volume goes offline by
 * itself (struct view's server_gone, set by its owner).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "view.h"

static const char *const state_names[] = { "online", "offline", "reintegrating", "writeback" };

const char *view_state_text(int state)
{
        return state_names[state];
}

const char *view_state_name(struct view *v)
{
        return view_state_text(__atomic_load_n(&v->state, __ATOMIC_ACQUIRE));
}

bool view_offline(struct view *v)
{
        return __atomic_load_n(&v->state, __ATOMIC_ACQUIRE) != VIEW_ONLINE;
}

int view_served_root(struct view *v)
{
        return view_offline(v) ? v->mirror_fd : v->root_fd;
}

/*
 * The tree the calling thread's change began in: its descriptors are of
 * that tree, whatever a forced switch (which does not wait for changes)
 * did since, so its backing calls stay bounded when it began online.
 */
static __thread unsigned change_depth;
static __thread bool change_offline;

void view_change_begin(struct view *v)
{
        pthread_rwlock_rdlock(&v->mode_lock);
        __atomic_add_fetch(&v->changes, 1, __ATOMIC_ACQ_REL); /* view-revalidate.c */
        if (change_depth++ == 0)
                change_offline = view_offline(v);
}

void view_change_end(struct view *v)
{
        change_depth--;
        pthread_rwlock_unlock(&v->mode_lock);
}

bool view_calls_offline(struct view *v)
{
        return change_depth ? change_offline : view_offline(v);
}

/* After a timeout: the switch is in the background. */
bool view_wait_offline(struct view *v)
{
        for (int i = 0; i < 300 && !view_offline(v); i++)
                usleep(10000);
        return view_offline(v);
}

bool view_server_gone(int r)
{
        return r == -ETIMEDOUT || r == -EBUSY || backing_error_gone(r);
}

bool backing_error_gone(int r)
{
        switch (-r) {
        case EIO: case ENOTCONN: case ESTALE: case ECONNRESET: case ECONNABORTED:
        case ECONNREFUSED: case ESHUTDOWN: case EHOSTDOWN: case EHOSTUNREACH:
        case ENETDOWN: case ENETUNREACH:
                return true;
        default:
                return false;
        }
}

void view_backing_timed_out(struct view *v)
{
        v->server_gone(v, "the backing did not answer within BackingTimeout");
}

void view_backing_gone(struct view *v, int r)
{
        char why[160];

        snprintf(why, sizeof(why), "the backing answers %s (%s): its mount or its server is"
                 " gone", strerrorname_np(-r) ? strerrorname_np(-r) : "an error", strerror(-r));
        v->server_gone(v, why);
}
