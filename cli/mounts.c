/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mounts.c: parsing /proc/self/mountinfo. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include "mounts.h"
#include "target.h"

/* Network (or remote, user-space served) filesystem types; fuse.* matches every FUSE subtype. */
static const char *const network_types[] = {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "afs", "9p", "ceph", "coda", "gfs2", "ocfs2",
        "glusterfs", "lustre", "orangefs", "fuse", "fuseblk", NULL,
};

bool fc_fs_type_is_network(const char *fs_type)
{
        if (!strncmp(fs_type, "fuse.", 5))
                return true;
        for (int i = 0; network_types[i]; i++)
                if (!strcmp(fs_type, network_types[i]))
                        return true;
        return false;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static char *unescape_octal(const char *s)
{
        char *out = malloc(strlen(s) + 1), *w = out;

        if (!out)
                return NULL;
        for (; *s; s++) {
                if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
                    s[3] >= '0' && s[3] <= '7') {
                        *w++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
                        s += 3;
                } else
                        *w++ = *s;
        }
        *w = '\0';
        return out;
}

static void mount_free(struct fc_mount *m)
{
        free(m->mount_point);
        free(m->fs_type);
        free(m->source);
}

/* "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue" */
static int parse_line(char *line, struct fc_mount *m)
{
        char *save = NULL, *f[5], *sep;
        int n = 0;

        sep = strstr(line, " - ");
        if (!sep)
                return -EINVAL;
        *sep = '\0';
        for (char *tok = strtok_r(line, " ", &save); tok && n < 5; tok = strtok_r(NULL, " ", &save))
                f[n++] = tok;
        if (n < 5)
                return -EINVAL;
        save = NULL;
        char *type = strtok_r(sep + 3, " ", &save);
        char *source = strtok_r(NULL, " ", &save);
        if (!type)
                return -EINVAL;
        m->id = strtoull(f[0], NULL, 10);
        {
                unsigned maj = 0, min = 0;

                if (sscanf(f[2], "%u:%u", &maj, &min) == 2)
                        m->dev = makedev(maj, min);
        }
        m->mount_point = unescape_octal(f[4]);
        m->fs_type = unescape_octal(type);
        m->source = unescape_octal(source ? source : "");
        if (!m->mount_point || !m->fs_type || !m->source) {
                mount_free(m);
                return -ENOMEM;
        }
        return 0;
}

int fc_mount_table_read(struct fc_mount_table *t)
{
        FILE *f = fopen("/proc/self/mountinfo", "re");
        char *line = NULL;
        size_t cap = 0, alloc = 0;
        struct fc_mount_table out = { 0 };
        int r = 0;

        if (!f)
                return -errno;
        while (getline(&line, &cap, f) > 0) {
                struct fc_mount m = { 0 };

                line[strcspn(line, "\n")] = '\0';
                if (parse_line(line, &m) < 0)
                        continue;
                if (out.count == alloc) {
                        size_t na = alloc ? alloc * 2 : 32;
                        struct fc_mount *p = realloc(out.mounts, na * sizeof(*p));
                        if (!p) {
                                mount_free(&m);
                                r = -ENOMEM;
                                break;
                        }
                        out.mounts = p;
                        alloc = na;
                }
                out.mounts[out.count++] = m;
        }
        free(line);
        fclose(f);
        if (r < 0) {
                fc_mount_table_free(&out);
                return r;
        }
        *t = out;
        return 0;
}

void fc_mount_table_free(struct fc_mount_table *t)
{
        for (size_t i = 0; i < t->count; i++)
                mount_free(&t->mounts[i]);
        free(t->mounts);
        t->mounts = NULL;
        t->count = 0;
}

const struct fc_mount *fc_mount_table_find(const struct fc_mount_table *t, uint64_t id)
{
        for (size_t i = 0; i < t->count; i++)
                if (t->mounts[i].id == id)
                        return &t->mounts[i];
        return NULL;
}

#define FUSE_MAGIC 0x65735546

/* An fcache volume (a fuse.fcache mount) is served by fcached, whatever the command. */
bool fc_target_on_fcache_volume(const struct fc_target *t)
{
        struct fc_mount_table mt;
        const struct fc_mount *m;
        struct statfs sfs;
        bool volume;

        if (fstatfs(t->fd, &sfs) < 0 || sfs.f_type != FUSE_MAGIC)
                return false;
        if (!(t->stx.stx_mask & STATX_MNT_ID) || fc_mount_table_read(&mt) < 0)
                return false;
        m = fc_mount_table_find(&mt, t->stx.stx_mnt_id);
        volume = m && !strcmp(m->fs_type, "fuse.fcache");
        fc_mount_table_free(&mt);
        return volume;
}
