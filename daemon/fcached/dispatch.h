/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * dispatch.h: the daemon's router (dispatch.c): which part of fcached
 * serves a command on the object the caller resolved.
 */
#pragma once

#include "fcached.h"

/* Worker thread: take on the caller's identity, resolve, act on files. Sets req->r. */
void fcd_dispatch_thread(struct fcd_request *req);
/* Main loop, after the worker: registry acts (pins, budget). Sets req->r; true if pins changed. */
bool fcd_dispatch_finish(struct fcd_request *req);
