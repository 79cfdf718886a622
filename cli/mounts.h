/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mounts.h: the mount table of this process (/proc/self/mountinfo), and which mounts are network filesystems. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct fc_mount {
        uint64_t id;         /* the mount id, as statx(STATX_MNT_ID) reports it */
        dev_t dev;           /* the filesystem's device, as stat(2) reports it */
        char *mount_point;   /* unescaped */
        char *fs_type;       /* "nfs4", "fuse.sshfs", ... */
        char *source;
};

struct fc_mount_table {
        struct fc_mount *mounts;
        size_t count;
};

int fc_mount_table_read(struct fc_mount_table *t);
void fc_mount_table_free(struct fc_mount_table *t);
const struct fc_mount *fc_mount_table_find(const struct fc_mount_table *t, uint64_t id);

/* nfs, nfs4, cifs, smb3, afs, 9p, ceph, fuse and fuse.*, ... */
bool fc_fs_type_is_network(const char *fs_type);

struct fc_target;
/* Is @t on an fcache volume (a fuse.fcache mount, served by fcached)? */
bool fc_target_on_fcache_volume(const struct fc_target *t);

/*
 * Does the filesystem mounted at @mount_point answer within @timeout_ms
 * (a statfs on a helper thread)?  A dead hard NFS mount or a stopped FUSE
 * server does not; the helper is then left behind, blocked where it is.
 * 0, or -ETIMEDOUT / -errno with @why (a sentence) filled.
 */
#define FC_MOUNT_ANSWER_MS 5000
int fc_mount_answers(const char *mount_point, int timeout_ms, char *why, size_t why_len);
