/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * backend-kmod.h: the cache commands served by fcache.ko over generic
 * netlink (protocol: kmod/uapi/fcache_netlink.h), for plain mounts when
 * the module is loaded.
 */
#pragma once

#include "backend.h"

extern const struct fc_backend fc_backend_kmod;
