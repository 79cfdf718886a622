/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* auth.h: the caller's identity from the bus, and polkit checks (auth.c). */
#pragma once

#include "fcached.h"

/* Start and stop the credentials cache (main loop). */
void fcd_auth_init(GDBusConnection *bus);
void fcd_auth_done(GDBusConnection *bus);

void fcd_caller_lookup_async(GDBusConnection *bus, const char *sender,
                             GAsyncReadyCallback cb, gpointer data);
gboolean fcd_caller_lookup_finish(GAsyncResult *res, struct fcd_caller *out, GError **error);

void fcd_polkit_check_async(GDBusConnection *bus, const char *sender, const char *action,
                            gboolean interactive, GAsyncReadyCallback cb, gpointer data);
/* TRUE, or FALSE with FCD_ERROR_NOT_AUTHORIZED. */
gboolean fcd_polkit_check_finish(GAsyncResult *res, GError **error);

/* The polkit action that guards a command. */
const char *fcd_action_for(const struct fc_command *c);
