/* SPDX-License-Identifier: GPL-2.0 */
/*
 * compat.h - shims for kernel interfaces that moved between 6.1 and 6.18.
 *
 * Every FC_HAVE_* macro comes from a compile probe in Kbuild (never from a
 * version check: distribution kernels backport).  One line per shim says
 * where the interface moved.
 */
#ifndef FCACHE_COMPAT_H
#define FCACHE_COMPAT_H

#include <linux/fs.h>

/* 6.3: struct user_namespace * became struct mnt_idmap * in the VFS calls */
#ifdef FC_HAVE_MNT_IDMAP
#define fc_file_idmap(f)	file_mnt_idmap(f)
#else
#define fc_file_idmap(f)	file_mnt_user_ns(f)
#endif

/* 6.19: i_state is read through accessors */
#ifdef FC_HAVE_INODE_STATE_READ
#define fc_i_state(inode)	inode_state_read(inode)
#else
#define fc_i_state(inode)	((inode)->i_state)
#endif

#endif /* FCACHE_COMPAT_H */
