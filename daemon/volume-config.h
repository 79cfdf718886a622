/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * volume-config.h: one fcache volume's configuration, as read from
 * /etc/fcache/volumes.d/NAME.conf.  Shared by fcache-view (which serves the
 * volume) and fcached (which starts one fcache-view per volume).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define VOLUME_CONFIG_DIR "/etc/fcache/volumes.d"

struct volume_config {
        char *name;             /* NAME of NAME.conf, or given on the command line */
        char *backing;          /* Backing=: directory of the network filesystem */
        char *mountpoint;       /* Mountpoint=: where the view is mounted */
        char *cache_dir;        /* CacheDir=: the volume's persistent store */
        char *server;           /* Server=: host[:port] for reachability probes, or NULL */
        uint64_t cache_size;    /* CacheSize=: bytes the store may hold */
        uint64_t reserve;       /* Reserve=: bytes kept free for offline edits */
        uint64_t cache_files;   /* CacheFiles=: objects the store may hold, 0 = no limit */
        uint64_t attr_lease_ms; /* AttrLease=: how long a validated object is trusted */
        uint64_t backing_timeout_ms; /* BackingTimeout=: bound on one backing operation */
        uint64_t hoard_interval_ms;  /* HoardInterval=: period of the pin (hoard) walk */
        unsigned threads;       /* Threads=: FUSE worker threads */
        bool metered_ignore;    /* Metered=ignore: hoard on a metered connection too */
        int write_back;         /* WriteBack=: WRITE_BACK_NO, _YES or _AUTO */
        unsigned fetch_threads; /* FetchThreads=: copies in flight for pins and hoarding; 0: by the backing */
        /* ReconnectDeleteLimit=: pinned objects a reconnect may delete without
         * force, a count or (delete_limit_percent) a percentage of them */
        uint64_t delete_limit;
        bool delete_limit_percent;
};

/* WriteBack=: changes acknowledged locally and shipped in the background
 * always (yes), while the connection is metered (auto), or never (no). */
enum { WRITE_BACK_NO, WRITE_BACK_YES, WRITE_BACK_AUTO };
const char *volume_config_write_back_name(int mode);

/* Fills defaults; every pointer NULL. */
void volume_config_init(struct volume_config *c);
void volume_config_free(struct volume_config *c);

/*
 * Parses a NAME.conf file into c (which must have been initialised; keys
 * already set are overwritten).  Returns 0, or -errno with a message
 * "FILE:LINE: KEY: why" in err (size errlen).
 */
int volume_config_load(struct volume_config *c, const char *path, char *err, size_t errlen);

/* Sets one KEY=VALUE pair (also used for command-line options). */
int volume_config_set(struct volume_config *c, const char *key, const char *value,
                      char *err, size_t errlen);

/* Checks that the required keys are present and consistent. */
int volume_config_validate(const struct volume_config *c, char *err, size_t errlen);

/* "10G", "512M", "4096" -> bytes (1024-based suffixes K, M, G, T). */
int volume_config_parse_size(const char *s, uint64_t *out);
/* "30s", "500ms", "5min", "1h", "30" (seconds) -> milliseconds. */
int volume_config_parse_duration(const char *s, uint64_t *out_ms);
