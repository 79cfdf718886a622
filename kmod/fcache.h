/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fcache.h - what the parts of fcache.ko share: the command context, the
 * result set, jobs and pins.
 *
 * Lock order: sb->s_umount -> fc_pin_lock -> pin->lock.  Never take
 * s_umount while holding fc_pin_lock.
 */
#ifndef FCACHE_H
#define FCACHE_H

#include <linux/bitmap.h>
#include <linux/errno.h>
#include <linux/fs.h>
#include <linux/types.h>
#include <linux/workqueue.h>
#include <net/genetlink.h>

#include "uapi/fcache_netlink.h"
#include "compat.h"

#define FC_MAX_MOUNTS	64	/* distinct superblocks in one FLUSH_ALL */

/* the attributes a command sets in its reply */
struct fc_result {
	DECLARE_BITMAP(set, __FCACHE_A_MAX);
	u64 val[__FCACHE_A_MAX];
	char fstype[32];
};

struct fc_job;

/* one command being run, inline in the sender's task or as a job */
struct fc_ctx {
	u8 cmd;
	u32 flags;
	struct file *file;	/* the sender's file of the target, a ref */
	struct inode *inode;	/* d_real_inode(): where the pages live */
	struct file *rfile;	/* a real open file (regular targets), a ref */
	struct file *mnt[FC_MAX_MOUNTS]; /* FLUSH_ALL: one mount per superblock */
	unsigned int nr_mnt;
	u64 pin_id;
	kuid_t uid;		/* fsuid of the sender */
	bool admin;		/* the sender had CAP_SYS_ADMIN */
	u32 portid;		/* the sender's socket */
	struct net *net;
	struct fc_job *job;	/* NULL when run inline */
	struct fc_result res;
};

/* main.c */
extern struct genl_family fc_family;
extern unsigned int fc_chunk_bytes;
bool fc_should_stop(struct fc_ctx *ctx);

static inline void fc_res_set(struct fc_result *r, int attr, u64 v)
{
	__set_bit(attr, r->set);
	r->val[attr] = v;
}

static inline void fc_res_add(struct fc_result *r, int attr, u64 v)
{
	__set_bit(attr, r->set);
	r->val[attr] += v;
}

int fc_put_result(struct sk_buff *skb, const struct fc_result *r);

/* a restart code (a read a signal interrupted) must not reach user space */
static inline int fc_user_err(int err)
{
	switch (err) {
	case -ERESTARTSYS:
	case -ERESTARTNOINTR:
	case -ERESTARTNOHAND:
	case -ERESTART_RESTARTBLOCK:
		return -EINTR;
	}
	return err;
}

/* cache.c */
int fc_do_query(struct fc_ctx *ctx);
int fc_do_flush(struct fc_ctx *ctx);
int fc_do_flush_volume(struct fc_ctx *ctx);
int fc_do_flush_all(struct fc_ctx *ctx);
int fc_do_prefetch(struct fc_ctx *ctx);
int fc_read_whole(struct fc_ctx *ctx, struct file *f, u64 *bytes);
int fc_walk_inodes(struct fc_ctx *ctx, struct super_block *sb,
		   struct dentry *dir, bool need_pages,
		   int (*fn)(struct fc_ctx *, struct inode *, void *),
		   void *arg);

/* callbacks.c */
int fc_do_flush_callbacks(struct fc_ctx *ctx);

/* job.c */
extern struct workqueue_struct *fc_wq;
int fc_job_init(void);
void fc_job_exit(void);
struct fc_job *fc_job_start(struct fc_ctx *ctx, int (*fn)(struct fc_ctx *),
			    u32 seq, u64 *id);
void fc_job_queue(struct fc_job *job);
void fc_job_cancel_port(struct net *net, u32 portid);
void fc_ctx_free(struct fc_ctx *ctx);

/* pin.c */
extern unsigned int fc_pin_max;
extern unsigned int fc_repin_ms;
int fc_pin_init(void);
void fc_pin_exit(void);
int fc_do_pin(struct fc_ctx *ctx);
int fc_do_unpin(struct fc_ctx *ctx);
int fc_pin_check_budget(struct inode *inode, struct netlink_ext_ack *extack);
u32 fc_pin_state(struct inode *inode, u64 *held, u64 *stale);
bool fc_pin_is_pinned(struct inode *inode);
int fc_pin_dump(struct sk_buff *skb, struct netlink_callback *cb);
void fc_pin_drop_port(struct net *net, u32 portid);
void fc_pin_limits(struct fc_result *r);
int fc_pin_set_budget(u64 bytes);
void fc_pin_kick(void);

#endif /* FCACHE_H */
