/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR LGPL-2.1-or-later) */
/*
 * fcache_netlink.h - the generic netlink protocol of fcache.ko.
 *
 * The one definition of the family, shared by the module (kmod/) and by
 * user space (libfcachectl's kmod backend, the VM test client).  The same
 * protocol is described for YNL in fcache.yaml beside this file; keep both
 * in step and never redefine these enums elsewhere.
 *
 * Conventions:
 * - The target of a command travels as an O_PATH (or any) file descriptor
 *   of the sender in FCACHE_A_FD.  doit handlers run in the sender's task,
 *   so the module resolves the descriptor in the sender's file table.
 * - Every request gets exactly one reply message with the same command, or
 *   an NLMSG_ERROR (with an extack message where there is a reason to say).
 * - Long commands (PREFETCH of more than one chunk, FLUSH of a directory,
 *   FLUSH_VOLUME, FLUSH_ALL, memory PIN of more than one chunk) reply at once
 *   with FCACHE_A_JOB and run in the module's workqueue; their result comes
 *   later as one FCACHE_CMD_DONE message (same nlmsg_seq, same FCACHE_A_JOB,
 *   FCACHE_A_ERROR plus the result attributes) unicast to the sender's port.
 *   A job is cancelled when its sender's socket closes, so killing the
 *   client interrupts it.  FCACHE_FLAG_ASYNC asks for a job for a small
 *   PREFETCH or memory PIN too: a client that cancels from another thread
 *   (a flag, not a signal) then stops waiting at once.  An inline command
 *   stops with -EINTR when the sender takes a signal.
 * - Counters are u64 unless said otherwise; sizes are bytes.
 */
#ifndef _UAPI_LINUX_FCACHE_NETLINK_H
#define _UAPI_LINUX_FCACHE_NETLINK_H

#define FCACHE_GENL_NAME	"fcache"
#define FCACHE_GENL_VERSION	1

enum fcache_cmd {
	FCACHE_CMD_UNSPEC,
	FCACHE_CMD_QUERY,	/* page cache state (FLAG_RECURSIVE: subtree) */
	FCACHE_CMD_FLUSH,	/* write back, drop pages and unused dentries */
	FCACHE_CMD_FLUSH_VOLUME, /* the same for FD's whole superblock */
	FCACHE_CMD_FLUSH_ALL,	/* the superblocks of the MOUNTS given */
	FCACHE_CMD_PREFETCH,	/* read the whole regular file into the cache */
	FCACHE_CMD_PIN,		/* keep FD cached (FLAG_MEMORY: resident) */
	FCACHE_CMD_UNPIN,	/* by FD or by PIN_ID */
	FCACHE_CMD_PIN_LIST,	/* dump: one message per pin */
	FCACHE_CMD_LIMITS_GET,
	FCACHE_CMD_LIMITS_SET,	/* CAP_SYS_ADMIN */
	FCACHE_CMD_DONE,	/* kernel -> user: completion of a job */
	FCACHE_CMD_FLUSH_CALLBACKS, /* give back NFSv4 delegations (a directory: under it) */

	__FCACHE_CMD_MAX,
	FCACHE_CMD_MAX = __FCACHE_CMD_MAX - 1
};

enum fcache_attr {
	FCACHE_A_UNSPEC,
	FCACHE_A_PAD,
	/* request */
	FCACHE_A_FD,		/* u32: the sender's descriptor of the target */
	FCACHE_A_FLAGS,		/* u32: FCACHE_FLAG_* */
	FCACHE_A_MOUNTS,	/* nested: FCACHE_A_FD of each mount to flush */
	FCACHE_A_PIN_ID,	/* u64 */
	/* results */
	FCACHE_A_JOB,		/* u64: id of an asynchronous job */
	FCACHE_A_ERROR,		/* s32: 0 or -errno of a finished job */
	FCACHE_A_FSTYPE,	/* string: filesystem type name */
	FCACHE_A_FILE_SIZE,	/* u64 bytes (i_size; sum for a subtree) */
	FCACHE_A_PAGES_TOTAL,	/* u64: pages the file(s) would need */
	FCACHE_A_PAGES_CACHED,	/* u64 */
	FCACHE_A_PAGES_DIRTY,	/* u64 */
	FCACHE_A_PAGES_WRITEBACK, /* u64 */
	FCACHE_A_PAGES_EVICTED,	/* u64: pages of shadow entries (evicted) */
	FCACHE_A_PAGES_UNSTABLE, /* u64: NFS written, not yet committed */
	FCACHE_A_PAGES_DROPPED,	/* u64: pages removed by a flush */
	FCACHE_A_PAGES_HELD,	/* u64: folio pages held by memory pins */
	FCACHE_A_PAGES_STALE,	/* u64: held pages the fs replaced */
	FCACHE_A_BYTES,		/* u64: bytes read by prefetch / pin */
	FCACHE_A_FILES,		/* u64: files the command acted on */
	FCACHE_A_DENTRIES,	/* u64: dentries dropped */
	FCACHE_A_SUPERS,	/* u64: superblocks flushed */
	FCACHE_A_PINNED,	/* u32: FCACHE_PIN_* of the target */
	FCACHE_A_COOKIE,	/* u32: FCACHE_COOKIE_* (FS-Cache) */
	FCACHE_A_COOKIE_USERS,	/* u32: the cookie's n_active */
	FCACHE_A_INO,		/* u64 */
	FCACHE_A_DEV,		/* u32: st_dev encoding (new_encode_dev) */
	FCACHE_A_PATH,		/* string: path of a pin (d_path) */
	FCACHE_A_UID,		/* u32: owner of a pin */
	/* limits */
	FCACHE_A_PIN_BUDGET,	/* u64 bytes: cap of memory pins */
	FCACHE_A_PIN_USED,	/* u64 bytes held by memory pins */
	FCACHE_A_PIN_MAX,	/* u32: cap of the number of pins */
	FCACHE_A_PIN_COUNT,	/* u32: pins now */
	FCACHE_A_JOB_MAX,	/* u32: cap of concurrent jobs */
	FCACHE_A_REPIN_MS,	/* u32: period of the stale-page check, 0 off */
	FCACHE_A_FILES_PINNED,	/* u64: files a flush kept because pinned */
	FCACHE_A_DELEG_HELD,	/* u64: NFSv4 delegations held on the target(s) */
	FCACHE_A_DELEG_RETURNED, /* u64: of them, returned to the server now */
	FCACHE_A_DELEG_AT_CLOSE, /* u64: returned when the file's last user lets go */
	FCACHE_A_FILES_DIRTY,	/* u64: regular files with dirty pages */

	__FCACHE_A_MAX,
	FCACHE_A_MAX = __FCACHE_A_MAX - 1
};

/* FCACHE_A_FLAGS */
#define FCACHE_FLAG_RECURSIVE	(1U << 0) /* QUERY: sum over a directory */
#define FCACHE_FLAG_MEMORY	(1U << 1) /* PIN: hold pages (CAP_IPC_LOCK) */
#define FCACHE_FLAG_SESSION	(1U << 2) /* PIN: drop when my socket closes */
#define FCACHE_FLAG_DRY_RUN	(1U << 3) /* PIN: check and report only */
#define FCACHE_FLAG_ASYNC	(1U << 4) /* PREFETCH, memory PIN: a job even if small */
#define FCACHE_FLAGS_ALL	0x1fU

/* FCACHE_A_PINNED */
#define FCACHE_PIN_PINNED	(1U << 0)
#define FCACHE_PIN_MEMORY	(1U << 1)
#define FCACHE_PIN_SESSION	(1U << 2)

/* FCACHE_A_COOKIE */
#define FCACHE_COOKIE_NONE	0	/* no FS-Cache cookie */
#define FCACHE_COOKIE_IDLE	1	/* a cookie, nobody using it */
#define FCACHE_COOKIE_IN_USE	2	/* a cookie in use (n_active > 0) */

#endif /* _UAPI_LINUX_FCACHE_NETLINK_H */
