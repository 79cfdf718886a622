/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * pagecache.h: what user space can see and do of one file's page cache:
 * measure it (cachestat(2), else mmap + mincore), drop it, fill it.
 *
 * The figures mean what fcache.ko's mean, so that a command says the same
 * whichever backend serves it: cachestat's nr_recently_evicted is left out,
 * since the module cannot compute it (the kernel's workingset test is not
 * exported to modules).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum fc_measure_method { FC_MEASURE_CACHESTAT, FC_MEASURE_MINCORE };

struct fc_pagestat {
        uint64_t total;             /* pages the file's size spans */
        uint64_t cached;
        uint64_t dirty;             /* cachestat only */
        uint64_t writeback;         /* cachestat only */
        uint64_t evicted;           /* cachestat only */
};

long fc_page_size(void);

/*
 * Measure the page cache of an open regular file of the given size.  A
 * file of an overlay is measured with mincore: cachestat(2) would look at
 * the overlay's own mapping, which holds no pages; a mapping of the file
 * is the real (upper or lower) file's.
 */
int fc_pagecache_measure(int fd, uint64_t size, struct fc_pagestat *ps,
                         enum fc_measure_method *method);

const char *fc_measure_method_name(enum fc_measure_method m);

/* True if the file's pages live in another filesystem's file (overlayfs). */
bool fc_stacked(int fd);

/* True if the file's filesystem keeps data only in memory (tmpfs, ramfs). */
bool fc_memory_backed(int fd);

/*
 * True if the file's filesystem drops its clean pages when it is opened
 * without a lease (cifs, smb3): what is cached now may not be there for
 * the next reader.
 */
bool fc_pages_dropped_at_open(int fd);

/*
 * True if the file's filesystem keeps pages written to the server but not
 * yet committed there (NFS's unstable writes): neither dirty nor under
 * writeback, so cachestat(2) does not count them.
 */
bool fc_commits_later(int fd);

/*
 * The file's type and size, asked without its times: NFS writes a file's
 * dirty pages back to the server before it answers a stat that wants mtime
 * or ctime (fstat does), which would change the very pages a query counts.
 * 0 or -errno.
 */
int fc_file_type_size(int fd, mode_t *mode, uint64_t *size);

/* Write back dirty pages, then ask the kernel to drop the clean ones. */
int fc_pagecache_flush(int fd, uint64_t size);

/* Read the whole file into the page cache and wait until it is there. */
int fc_pagecache_prefetch(int fd, uint64_t size, const volatile int *cancel);
