/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * volume-link.h: a volume's link to its server.  It follows reachability
 * (netstate.h: NetworkManager, probes of Server=, manual disconnect and
 * reconnect) and takes the volume's view offline and back online
 * (reintegration) to match, reporting every state change.  Main loop only.
 */
#pragma once

#include <stdbool.h>

struct volume_link;

/* @state: "online", "offline", "reintegrating"; @reason as netstate_reason_to_string().
 * @state NULL: the state is the same, whether the connection is metered changed. */
typedef void (*volume_link_state_fn)(void *userdata, const char *name, const char *state,
                                     const char *reason);

/* @server: Server= (NULL: no probes); @socket_path: the view's control socket. */
struct volume_link *volume_link_new(const char *name, const char *server, const char *socket_path,
                                    volume_link_state_fn on_state, void *userdata);
void volume_link_free(struct volume_link *l);
/* Makes the view match the current state (after it started or was adopted). */
void volume_link_sync(struct volume_link *l);
/* A manual disconnect (sticky until reconnect) or reconnect (force: reconnect
 * force, which may delete what the server lost of the pinned copy). */
void volume_link_manual(struct volume_link *l, bool disconnect, bool force);
/* The state last reported. */
const char *volume_link_state(const struct volume_link *l);
/* Why it last changed (as volume_link_state_fn's @reason). */
const char *volume_link_reason(const struct volume_link *l);
/* NetworkManager says the connection is metered. */
bool volume_link_metered(const struct volume_link *l);
