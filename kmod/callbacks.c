// SPDX-License-Identifier: GPL-2.0
/*
 * callbacks.c - FLUSH_CALLBACKS: give back what a server granted on the
 * target, where the kernel lets a module do it.
 *
 * NFSv4 delegations.  Neither 6.1 nor 6.12 exports a function that returns
 * one (nfs4_inode_return_delegation() is internal to nfsv4.ko), but the
 * client returns an inode's delegation, with a synchronous DELEGRETURN,
 * when it evicts the inode (nfs4_evict_inode).  So the inode is marked
 * I_DONTCACHE (d_mark_dontcache(), exported) and its unused dentries are
 * pruned: an inode nobody else uses is evicted here, when the walk lets it
 * go, and its delegation returned now; one in use (open, a working
 * directory, the caller's own descriptor of the target) is evicted when its
 * last user lets go, and its delegation returned then.  Eviction also drops
 * the inode's cached pages and attributes: the next open revalidates.
 *
 * SMB leases and oplocks (cifs.ko) and AFS callbacks (kafs.ko): neither
 * module exports a way to give them back; user space is told so.
 */
#include <linux/dcache.h>
#include <linux/fs.h>
#include <linux/nfs_fs.h>
#include <linux/pagemap.h>
#include <linux/string.h>

#include "fcache.h"

static bool fc_has_delegation(struct inode *inode)
{
#if IS_ENABLED(CONFIG_NFS_V4)
	if (!strcmp(inode->i_sb->s_type->name, "nfs4"))
		return rcu_access_pointer(NFS_I(inode)->delegation) != NULL;
#endif
	return false;
}

/*
 * Called with a reference of the walk's (or the caller's descriptor's, for
 * the target itself): held is how many references that is.
 */
static void fc_return_delegation(struct fc_ctx *ctx, struct inode *inode,
				 int held)
{
	struct fc_result *r = &ctx->res;

	if (!S_ISREG(inode->i_mode) || !fc_has_delegation(inode))
		return;
	fc_res_add(r, FCACHE_A_DELEG_HELD, 1);
	d_mark_dontcache(inode);
	d_prune_aliases(inode);
	/* no other user: the walk's iput() evicts it, and NFS returns it */
	if (atomic_read(&inode->i_count) <= held)
		fc_res_add(r, FCACHE_A_DELEG_RETURNED, 1);
	else
		fc_res_add(r, FCACHE_A_DELEG_AT_CLOSE, 1);
}

static int fc_callbacks_one(struct fc_ctx *ctx, struct inode *inode, void *arg)
{
	fc_return_delegation(ctx, inode, 1);
	return 0;
}

/**
 * fc_do_flush_callbacks() - FLUSH_CALLBACKS: return NFSv4 delegations
 * @ctx: the command; a regular file (its delegation is returned when the
 *	caller's descriptor, the last user, is closed), or a directory (the
 *	delegations of the files under it that are in memory, returned now
 *	for those nobody uses)
 *
 * Also drops the target's clean pages, as the user-space backend does.
 * Return: 0 or -errno.
 */
int fc_do_flush_callbacks(struct fc_ctx *ctx)
{
	struct inode *inode = ctx->inode;
	struct fc_result *r = &ctx->res;
	unsigned long before = inode->i_mapping->nrpages;
	int err = 0;

	strscpy(r->fstype, inode->i_sb->s_type->name, sizeof(r->fstype));
	fc_res_set(r, FCACHE_A_DELEG_HELD, 0);
	fc_res_set(r, FCACHE_A_DELEG_RETURNED, 0);
	fc_res_set(r, FCACHE_A_DELEG_AT_CLOSE, 0);
	fc_res_set(r, FCACHE_A_PAGES_DROPPED, 0);
	if (S_ISREG(inode->i_mode) && mapping_can_writeback(inode->i_mapping)) {
		invalidate_mapping_pages(inode->i_mapping, 0, -1);
		if (before > inode->i_mapping->nrpages)
			fc_res_set(r, FCACHE_A_PAGES_DROPPED,
				   before - inode->i_mapping->nrpages);
	}
	if (S_ISDIR(inode->i_mode))
		err = fc_walk_inodes(ctx, inode->i_sb, ctx->file->f_path.dentry,
				     false, fc_callbacks_one, NULL);
	else
		/* the caller's descriptor holds it: returned at its close */
		fc_return_delegation(ctx, inode, 0);
	return err;
}
