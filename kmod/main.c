// SPDX-License-Identifier: GPL-2.0
/*
 * main.c - fcache.ko: the generic netlink family "fcache", its handlers
 * (parse -> validate -> authorize -> act -> reply once) and module setup.
 *
 * The protocol is in uapi/fcache_netlink.h.  Handlers run in the sender's
 * task (netlink_unicast -> genl_rcv), so FCACHE_A_FD is resolved in the
 * sender's file table and permissions are checked against its credentials.
 * The family is parallel_ops: no handler holds genl_mutex.
 */
#include <linux/backing-dev.h>
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/netlink.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <net/genetlink.h>
#include <net/net_namespace.h>

#include "fcache.h"

unsigned int fc_chunk_bytes = 8 << 20;
module_param_named(chunk_bytes, fc_chunk_bytes, uint, 0644);
MODULE_PARM_DESC(chunk_bytes,
		 "Readahead chunk; bigger files are prefetched as a job");

static char *fc_net_types = "nfs,nfs4,cifs,smb3,afs,9p,ceph,fuse";
module_param_named(flush_all_types, fc_net_types, charp, 0444);
MODULE_PARM_DESC(flush_all_types,
		 "Filesystem types FLUSH_ALL may act on (comma-separated)");

extern unsigned int fc_job_max;

static const struct nla_policy fc_policy[FCACHE_A_MAX + 1] = {
	[FCACHE_A_FD]		= { .type = NLA_U32 },
	[FCACHE_A_FLAGS]	= NLA_POLICY_MASK(NLA_U32, FCACHE_FLAGS_ALL),
	[FCACHE_A_MOUNTS]	= { .type = NLA_NESTED },
	[FCACHE_A_PIN_ID]	= { .type = NLA_U64 },
	[FCACHE_A_PIN_BUDGET]	= { .type = NLA_U64 },
	[FCACHE_A_PIN_MAX]	= { .type = NLA_U32 },
	[FCACHE_A_JOB_MAX]	= { .type = NLA_U32 },
	[FCACHE_A_REPIN_MS]	= { .type = NLA_U32 },
};

static bool fc_attr_is_u32(int attr)
{
	switch (attr) {
	case FCACHE_A_PINNED:
	case FCACHE_A_COOKIE:
	case FCACHE_A_COOKIE_USERS:
	case FCACHE_A_DEV:
	case FCACHE_A_UID:
	case FCACHE_A_PIN_MAX:
	case FCACHE_A_PIN_COUNT:
	case FCACHE_A_JOB_MAX:
	case FCACHE_A_REPIN_MS:
		return true;
	}
	return false;
}

/**
 * fc_put_result() - put a result set into a message
 * @skb: the message
 * @r: the result
 *
 * Return: 0 or -EMSGSIZE.
 */
int fc_put_result(struct sk_buff *skb, const struct fc_result *r)
{
	int attr;

	if (r->fstype[0] && nla_put_string(skb, FCACHE_A_FSTYPE, r->fstype))
		return -EMSGSIZE;
	for_each_set_bit(attr, r->set, __FCACHE_A_MAX) {
		int err;

		if (fc_attr_is_u32(attr))
			err = nla_put_u32(skb, attr, r->val[attr]);
		else
			err = nla_put_u64_64bit(skb, attr, r->val[attr],
						FCACHE_A_PAD);
		if (err)
			return err;
	}
	return 0;
}

static int fc_reply(struct genl_info *info, struct fc_ctx *ctx, u64 job)
{
	struct sk_buff *msg;
	void *hdr;

	msg = genlmsg_new(NLMSG_GOODSIZE, GFP_KERNEL);
	if (!msg)
		return -ENOMEM;
	hdr = genlmsg_put_reply(msg, info, &fc_family, 0, info->genlhdr->cmd);
	if (!hdr)
		goto nospace;
	if (job) {
		if (nla_put_u64_64bit(msg, FCACHE_A_JOB, job, FCACHE_A_PAD))
			goto nospace;
	} else if (fc_put_result(msg, &ctx->res)) {
		goto nospace;
	}
	genlmsg_end(msg, hdr);
	return genlmsg_reply(msg, info);
nospace:
	nlmsg_free(msg);
	return -EMSGSIZE;
}

/* run inline, or as a job if @async; replies and frees ctx either way */
static int fc_run(struct genl_info *info, struct fc_ctx *ctx,
		  int (*fn)(struct fc_ctx *), bool async)
{
	u64 job = 0;
	int err;

	if (async) {
		struct fc_job *j = fc_job_start(ctx, fn, info->snd_seq, &job);

		if (IS_ERR(j)) {
			if (PTR_ERR(j) == -EAGAIN)
				NL_SET_ERR_MSG_MOD(info->extack,
						   "too many jobs running");
			return PTR_ERR(j);
		}
		/* the reply first, so that the completion comes after it */
		err = fc_reply(info, NULL, job);
		fc_job_queue(j);
		return err;
	}
	err = fc_user_err(fn(ctx));
	if (!err)
		err = fc_reply(info, ctx, 0);
	fc_ctx_free(ctx);
	return err;
}

static struct fc_ctx *fc_ctx_new(struct genl_info *info, bool need_fd,
				 int *errp)
{
	struct nlattr **tb = info->attrs;
	struct fc_ctx *ctx;

	ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);
	if (!ctx) {
		*errp = -ENOMEM;
		return NULL;
	}
	ctx->cmd = info->genlhdr->cmd;
	if (tb[FCACHE_A_FLAGS])
		ctx->flags = nla_get_u32(tb[FCACHE_A_FLAGS]);
	if (tb[FCACHE_A_PIN_ID])
		ctx->pin_id = nla_get_u64(tb[FCACHE_A_PIN_ID]);
	ctx->uid = current_fsuid();
	ctx->admin = ns_capable_noaudit(&init_user_ns, CAP_SYS_ADMIN);
	ctx->portid = info->snd_portid;
	ctx->net = get_net(genl_info_net(info));
	if (!tb[FCACHE_A_FD]) {
		if (!need_fd)
			return ctx;
		NL_SET_ERR_MSG_MOD(info->extack, "missing target descriptor");
		*errp = -EINVAL;
		goto fail;
	}
	/* fdget() refuses O_PATH descriptors, fget_raw() takes them */
	ctx->file = fget_raw(nla_get_u32(tb[FCACHE_A_FD]));
	if (!ctx->file) {
		NL_SET_ERR_MSG_ATTR(info->extack, tb[FCACHE_A_FD],
				    "bad target descriptor");
		*errp = -EBADF;
		goto fail;
	}
	/* on overlayfs the pages are the real (upper or lower) inode's */
	ctx->inode = d_real_inode(ctx->file->f_path.dentry);
	return ctx;
fail:
	fc_ctx_free(ctx);
	return NULL;
}

static int fc_may_read(struct genl_info *info, struct fc_ctx *ctx)
{
	int err = inode_permission(fc_file_idmap(ctx->file),
				   file_inode(ctx->file), MAY_READ);

	if (err)
		NL_SET_ERR_MSG_MOD(info->extack, "needs read access");
	return err;
}

/* cachestat(2)'s rule: QUERY is a page-cache side channel */
static int fc_may_query(struct genl_info *info, struct fc_ctx *ctx)
{
	struct file *f = ctx->file;

	if (f->f_mode & FMODE_WRITE)
		return 0;
	if (inode_owner_or_capable(fc_file_idmap(f), file_inode(f)))
		return 0;
	if (!inode_permission(fc_file_idmap(f), file_inode(f), MAY_WRITE))
		return 0;
	NL_SET_ERR_MSG_MOD(info->extack,
			   "query needs write access or ownership, as cachestat(2)");
	return -EPERM;
}

static int fc_need_admin(struct genl_info *info)
{
	/* init-ns CAP_SYS_ADMIN; GENL_ADMIN_PERM would mean CAP_NET_ADMIN */
	if (capable(CAP_SYS_ADMIN))
		return 0;
	NL_SET_ERR_MSG_MOD(info->extack, "needs CAP_SYS_ADMIN");
	return -EPERM;
}

/* a real open file for I/O; never for non-regular files (drivers, FIFOs) */
static int fc_open_real(struct genl_info *info, struct fc_ctx *ctx)
{
	struct file *f;

	if (!S_ISREG(file_inode(ctx->file)->i_mode)) {
		NL_SET_ERR_MSG_MOD(info->extack, "not a regular file");
		return -EINVAL;
	}
	/* dentry_open() skips may_open(): fc_may_read() came first */
	f = dentry_open(&ctx->file->f_path, O_RDONLY | O_LARGEFILE,
			current_cred());
	if (IS_ERR(f))
		return PTR_ERR(f);
	ctx->rfile = f;
	return 0;
}

static bool fc_big(struct fc_ctx *ctx)
{
	return i_size_read(ctx->inode) > fc_chunk_bytes;
}

static int fc_query_doit(struct sk_buff *skb, struct genl_info *info)
{
	struct fc_ctx *ctx;
	int err = 0;

	ctx = fc_ctx_new(info, true, &err);
	if (!ctx)
		return err;
	err = fc_may_query(info, ctx);
	if (err) {
		fc_ctx_free(ctx);
		return err;
	}
	return fc_run(info, ctx, fc_do_query,
		      S_ISDIR(ctx->inode->i_mode) &&
		      (ctx->flags & FCACHE_FLAG_RECURSIVE));
}

/*
 * tmpfs, ramfs and the like have no backing store: their cached pages are
 * the data, so a flush of a file, a directory or the whole superblock is
 * refused rather than reported as a flush that dropped nothing.
 */
static int fc_need_backing(struct genl_info *info, struct fc_ctx *ctx)
{
	if (mapping_can_writeback(ctx->inode->i_mapping))
		return 0;
	NL_SET_ERR_MSG_MOD(info->extack,
			   "no backing store: the cached pages are the data");
	return -EOPNOTSUPP;
}

static int fc_flush_doit(struct sk_buff *skb, struct genl_info *info)
{
	struct fc_ctx *ctx;
	int err = 0;

	ctx = fc_ctx_new(info, true, &err);
	if (!ctx)
		return err;
	err = fc_may_read(info, ctx);
	if (err)
		goto out;
	err = fc_need_backing(info, ctx);
	if (err)
		goto out;
	if (!S_ISDIR(ctx->inode->i_mode) && fc_pin_is_pinned(ctx->inode)) {
		NL_SET_ERR_MSG_MOD(info->extack, "target is pinned");
		err = -EBUSY;
		goto out;
	}
	return fc_run(info, ctx, fc_do_flush, S_ISDIR(ctx->inode->i_mode));
out:
	fc_ctx_free(ctx);
	return err;
}

static int fc_flush_volume_doit(struct sk_buff *skb, struct genl_info *info)
{
	struct fc_ctx *ctx;
	int err = fc_need_admin(info);

	if (err)
		return err;
	ctx = fc_ctx_new(info, true, &err);
	if (!ctx)
		return err;
	err = fc_need_backing(info, ctx);
	if (err) {
		fc_ctx_free(ctx);
		return err;
	}
	return fc_run(info, ctx, fc_do_flush_volume, true);
}

static bool fc_type_allowed(const char *name)
{
	size_t len = strlen(name);
	const char *p = fc_net_types;

	while (p && *p) {
		const char *end = strchrnul(p, ',');

		if (end - p == len && !strncmp(p, name, len))
			return true;
		p = *end ? end + 1 : NULL;
	}
	return false;
}

/*
 * keep @f if its type is allowed and its superblock new; takes over the
 * reference.  Only the superblocks of the caller's own mounts are flushed:
 * one of the same type that the caller cannot see (another namespace's, or
 * one hidden under a stacked filesystem) is not its to flush.
 */
static void fc_add_mount(struct fc_ctx *ctx, struct file *f)
{
	struct super_block *sb = f->f_path.mnt->mnt_sb;
	unsigned int i;

	if (!fc_type_allowed(sb->s_type->name) || ctx->nr_mnt == FC_MAX_MOUNTS)
		goto drop;
	for (i = 0; i < ctx->nr_mnt; i++)
		if (ctx->mnt[i]->f_path.mnt->mnt_sb == sb)
			goto drop;
	ctx->mnt[ctx->nr_mnt++] = f;
	return;
drop:
	fput(f);
}

static int fc_flush_all_doit(struct sk_buff *skb, struct genl_info *info)
{
	struct nlattr *mounts = info->attrs[FCACHE_A_MOUNTS];
	struct fc_ctx *ctx;
	int err = fc_need_admin(info);

	if (err)
		return err;
	ctx = fc_ctx_new(info, !mounts, &err);
	if (!ctx)
		return err;
	if (mounts) {
		struct nlattr *a;
		int rem;

		nla_for_each_nested(a, mounts, rem) {
			struct file *f;

			if (nla_type(a) != FCACHE_A_FD || nla_len(a) != 4) {
				NL_SET_ERR_MSG_ATTR(info->extack, a,
						    "mounts holds only FDs");
				err = -EINVAL;
				goto out;
			}
			f = fget_raw(nla_get_u32(a));
			if (!f) {
				NL_SET_ERR_MSG_ATTR(info->extack, a,
						    "bad mount descriptor");
				err = -EBADF;
				goto out;
			}
			fc_add_mount(ctx, f);
		}
	}
	if (ctx->file)
		fc_add_mount(ctx, get_file(ctx->file));
	if (!ctx->nr_mnt) {
		NL_SET_ERR_MSG_MOD(info->extack,
				   "no network filesystem type among the mounts");
		err = -EOPNOTSUPP;
		goto out;
	}
	return fc_run(info, ctx, fc_do_flush_all, true);
out:
	fc_ctx_free(ctx);
	return err;
}

static int fc_flush_callbacks_doit(struct sk_buff *skb, struct genl_info *info)
{
	struct fc_ctx *ctx;
	int err = 0;

	ctx = fc_ctx_new(info, true, &err);
	if (!ctx)
		return err;
	err = fc_may_read(info, ctx);
	if (err) {
		fc_ctx_free(ctx);
		return err;
	}
	/* a directory's files each cost a DELEGRETURN round trip */
	return fc_run(info, ctx, fc_do_flush_callbacks,
		      S_ISDIR(ctx->inode->i_mode));
}

static int fc_prefetch_doit(struct sk_buff *skb, struct genl_info *info)
{
	struct fc_ctx *ctx;
	int err = 0;

	ctx = fc_ctx_new(info, true, &err);
	if (!ctx)
		return err;
	err = fc_may_read(info, ctx);
	if (!err)
		err = fc_open_real(info, ctx);
	if (err) {
		fc_ctx_free(ctx);
		return err;
	}
	return fc_run(info, ctx, fc_do_prefetch,
		      fc_big(ctx) || (ctx->flags & FCACHE_FLAG_ASYNC));
}

static int fc_pin_doit(struct sk_buff *skb, struct genl_info *info)
{
	struct fc_ctx *ctx;
	bool memory;
	int err = 0;

	ctx = fc_ctx_new(info, true, &err);
	if (!ctx)
		return err;
	memory = ctx->flags & FCACHE_FLAG_MEMORY;
	err = fc_may_read(info, ctx);
	if (err)
		goto out;
	if (memory && !capable(CAP_IPC_LOCK)) {
		NL_SET_ERR_MSG_MOD(info->extack,
				   "memory pins need CAP_IPC_LOCK");
		err = -EPERM;
		goto out;
	}
	if (S_ISREG(ctx->inode->i_mode)) {
		/* ->open makes the FS-Cache cookie in use */
		err = fc_open_real(info, ctx);
		if (err)
			goto out;
	} else if (memory) {
		NL_SET_ERR_MSG_MOD(info->extack,
				   "memory pins need a regular file");
		err = -EINVAL;
		goto out;
	}
	if (memory) {
		err = fc_pin_check_budget(ctx->inode, info->extack);
		if (err)
			goto out;
	}
	return fc_run(info, ctx, fc_do_pin, memory &&
		      (fc_big(ctx) || (ctx->flags & FCACHE_FLAG_ASYNC)) &&
		      !(ctx->flags & FCACHE_FLAG_DRY_RUN));
out:
	fc_ctx_free(ctx);
	return err;
}

static int fc_unpin_doit(struct sk_buff *skb, struct genl_info *info)
{
	struct fc_ctx *ctx;
	int err = 0;

	ctx = fc_ctx_new(info, !info->attrs[FCACHE_A_PIN_ID], &err);
	if (!ctx)
		return err;
	err = fc_do_unpin(ctx);
	if (err == -ENOENT)
		NL_SET_ERR_MSG_MOD(info->extack, "not pinned");
	else if (err == -EPERM)
		NL_SET_ERR_MSG_MOD(info->extack, "pinned by another user");
	if (!err)
		err = fc_reply(info, ctx, 0);
	fc_ctx_free(ctx);
	return err;
}

static int fc_limits_doit(struct sk_buff *skb, struct genl_info *info)
{
	struct nlattr **tb = info->attrs;
	struct fc_ctx *ctx;
	int err = 0;

	if (info->genlhdr->cmd == FCACHE_CMD_LIMITS_SET) {
		err = fc_need_admin(info);
		if (err)
			return err;
		if (tb[FCACHE_A_PIN_BUDGET])
			fc_pin_set_budget(nla_get_u64(tb[FCACHE_A_PIN_BUDGET]));
		if (tb[FCACHE_A_PIN_MAX])
			WRITE_ONCE(fc_pin_max,
				   nla_get_u32(tb[FCACHE_A_PIN_MAX]));
		if (tb[FCACHE_A_JOB_MAX])
			WRITE_ONCE(fc_job_max,
				   nla_get_u32(tb[FCACHE_A_JOB_MAX]));
		if (tb[FCACHE_A_REPIN_MS]) {
			WRITE_ONCE(fc_repin_ms,
				   nla_get_u32(tb[FCACHE_A_REPIN_MS]));
			fc_pin_kick();
		}
	}
	ctx = fc_ctx_new(info, false, &err);
	if (!ctx)
		return err;
	fc_pin_limits(&ctx->res);
	fc_res_set(&ctx->res, FCACHE_A_JOB_MAX, READ_ONCE(fc_job_max));
	err = fc_reply(info, ctx, 0);
	fc_ctx_free(ctx);
	return err;
}

static const struct genl_small_ops fc_ops[] = {
	{ .cmd = FCACHE_CMD_QUERY,	 .doit = fc_query_doit },
	{ .cmd = FCACHE_CMD_FLUSH,	 .doit = fc_flush_doit },
	{ .cmd = FCACHE_CMD_FLUSH_VOLUME, .doit = fc_flush_volume_doit },
	{ .cmd = FCACHE_CMD_FLUSH_ALL,	 .doit = fc_flush_all_doit },
	{ .cmd = FCACHE_CMD_PREFETCH,	 .doit = fc_prefetch_doit },
	{ .cmd = FCACHE_CMD_PIN,	 .doit = fc_pin_doit },
	{ .cmd = FCACHE_CMD_UNPIN,	 .doit = fc_unpin_doit },
	{ .cmd = FCACHE_CMD_PIN_LIST,	 .dumpit = fc_pin_dump },
	{ .cmd = FCACHE_CMD_LIMITS_GET,	 .doit = fc_limits_doit },
	{ .cmd = FCACHE_CMD_LIMITS_SET,	 .doit = fc_limits_doit },
	{ .cmd = FCACHE_CMD_FLUSH_CALLBACKS, .doit = fc_flush_callbacks_doit },
};

struct genl_family fc_family __ro_after_init = {
	.name		= FCACHE_GENL_NAME,
	.version	= FCACHE_GENL_VERSION,
	.maxattr	= FCACHE_A_MAX,
	.policy		= fc_policy,
	/* targets are descriptors, checks are on inodes and init-ns caps */
	.netnsok	= true,
	/* a long command must not hold genl_mutex for everyone */
	.parallel_ops	= true,
	.module		= THIS_MODULE,
	.small_ops	= fc_ops,
	.n_small_ops	= ARRAY_SIZE(fc_ops),
};

/*
 * A socket closed: cancel its jobs at once (that is how a fatal signal
 * reaches an asynchronous prefetch) and end its session pins from a work
 * item, since this notifier may run where sleeping is not allowed.
 */
struct fc_gone {
	struct work_struct work;
	struct net *net;	/* compared only */
	u32 portid;
};

static void fc_gone_fn(struct work_struct *work)
{
	struct fc_gone *g = container_of(work, struct fc_gone, work);

	fc_pin_drop_port(g->net, g->portid);
	kfree(g);
}

static int fc_netlink_event(struct notifier_block *nb, unsigned long event,
			    void *ptr)
{
	struct netlink_notify *n = ptr;
	struct fc_gone *g;

	if (event != NETLINK_URELEASE || n->protocol != NETLINK_GENERIC)
		return NOTIFY_DONE;
	fc_job_cancel_port(n->net, n->portid);
	g = kmalloc(sizeof(*g), GFP_ATOMIC);
	if (!g)
		return NOTIFY_DONE;
	INIT_WORK(&g->work, fc_gone_fn);
	g->net = n->net;
	g->portid = n->portid;
	/* fc_wq is drained at unload, after this notifier is gone */
	queue_work(fc_wq, &g->work);
	return NOTIFY_DONE;
}

static struct notifier_block fc_netlink_nb = {
	.notifier_call = fc_netlink_event,
};

static int __init fc_init(void)
{
	int err;

	err = fc_job_init();
	if (err)
		return err;
	fc_pin_init();
	err = netlink_register_notifier(&fc_netlink_nb);
	if (err)
		goto out_pins;
	err = genl_register_family(&fc_family);
	if (err)
		goto out_notifier;
	pr_info("fcache: generic netlink family %s version %d\n",
		FCACHE_GENL_NAME, FCACHE_GENL_VERSION);
	return 0;

out_notifier:
	netlink_unregister_notifier(&fc_netlink_nb);
out_pins:
	fc_pin_exit();
	fc_job_exit();
	return err;
}

static void __exit fc_exit(void)
{
	/* waits for running handlers; no new ones after this */
	genl_unregister_family(&fc_family);
	netlink_unregister_notifier(&fc_netlink_nb);
	fc_job_exit();
	fc_pin_exit();
}

module_init(fc_init);
module_exit(fc_exit);

MODULE_LICENSE("GPL");
MODULE_AUTHOR("fcache developers");
MODULE_DESCRIPTION("Cache control of mounted filesystems over generic netlink");
MODULE_ALIAS_GENL_FAMILY(FCACHE_GENL_NAME);
