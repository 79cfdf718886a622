/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * polkit-agent.h: a textual polkit authentication agent (pkttyagent) for
 * the calling terminal, as systemctl starts one, so that fcached's polkit
 * checks can ask the person at the terminal for a password.
 */
#pragma once

#include <sys/types.h>

/*
 * Starts pkttyagent for this process when standard input is a terminal and
 * waits until it is registered with polkit.  Returns its pid, or 0 when none
 * was started (no terminal, no pkttyagent, it failed: the calls then run
 * without one and polkit answers as it would).
 */
pid_t fc_polkit_agent_open(void);
/* Stops it (0: nothing to do). */
void fc_polkit_agent_close(pid_t pid);
