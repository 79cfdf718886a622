// SPDX-License-Identifier: GPL-2.0
/*
 * cache.c - the page cache side of fcache.ko: QUERY, FLUSH, FLUSH_VOLUME,
 * FLUSH_ALL and PREFETCH, on any mounted filesystem.
 *
 * Only exported (or inline) interfaces of 6.1 are used; see
 * ../shared/vm/KERNEL-NOTES.md for why each one was chosen.
 */
#include <linux/backing-dev.h>
#include <linux/dcache.h>
#include <linux/fadvise.h>
#include <linux/fs.h>
#include <linux/fscache.h>
#include <linux/mm.h>
#include <linux/netfs.h>
#include <linux/nfs_fs.h>
#include <linux/pagemap.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/writeback.h>
#include <linux/xarray.h>

#include "fcache.h"

#define FC_READ_BUF	(256 * 1024)

struct fc_counts {
	u64 cached, dirty, wb, evicted;
};

/*
 * An RCU walk of the page cache, as filemap_cachestat() does upstream, with
 * the same meaning for each figure: evicted counts the pages of shadow (or
 * shmem swap) entries.  cachestat(2)'s nr_recently_evicted has no
 * counterpart: its test (workingset_test_recent()) is not exported.
 */
static void fc_count_pages(struct address_space *mapping, struct fc_counts *c)
{
	XA_STATE(xas, &mapping->i_pages, 0);
	struct folio *folio;

	rcu_read_lock();
	xas_for_each(&xas, folio, ULONG_MAX) {
		unsigned long nr;

		if (xas_retry(&xas, folio))
			continue;
		if (xa_is_value(folio)) {
			/* shadow of an evicted folio, or shmem swap */
			c->evicted += 1UL << xas_get_order(&xas);
			continue;
		}
		nr = folio_nr_pages(folio);
		c->cached += nr;
		if (xas_get_mark(&xas, PAGECACHE_TAG_DIRTY))
			c->dirty += nr;
		if (xas_get_mark(&xas, PAGECACHE_TAG_WRITEBACK))
			c->wb += nr;
		if (need_resched()) {
			xas_pause(&xas);
			rcu_read_unlock();
			cond_resched();
			rcu_read_lock();
		}
	}
	rcu_read_unlock();
}

static bool fc_is_nfs(struct super_block *sb)
{
	const char *n = sb->s_type->name;

	return !strcmp(n, "nfs") || !strcmp(n, "nfs4");
}

/* NFS pages written UNSTABLE and not yet committed carry no xarray tag. */
static u64 fc_nfs_unstable(struct inode *inode)
{
#if IS_ENABLED(CONFIG_NFS_FS)
	if (fc_is_nfs(inode->i_sb))
		return atomic_long_read(&NFS_I(inode)->nrequests);
#endif
	return 0;
}

/*
 * There is no generic inode -> cookie accessor; only look where the type
 * is known to embed a netfs_inode (or, on 6.1's NFS, nfs_inode->fscache).
 */
static struct fscache_cookie *fc_inode_cookie(struct inode *inode)
{
#if IS_ENABLED(CONFIG_FSCACHE)
	static const char * const netfs_types[] = {
		"9p", "afs", "ceph", "cifs", "smb3",
	};
	const char *n = inode->i_sb->s_type->name;
	unsigned int i;

	if (fc_is_nfs(inode->i_sb)) {
#ifdef FC_HAVE_NFS_I_FSCACHE
		return nfs_i_fscache(inode);
#else
		return netfs_i_cookie(netfs_inode(inode));
#endif
	}
	for (i = 0; i < ARRAY_SIZE(netfs_types); i++)
		if (!strcmp(n, netfs_types[i]))
			return netfs_i_cookie(netfs_inode(inode));
#endif
	return NULL;
}

static void fc_query_inode(struct inode *inode, struct fc_result *r)
{
	struct fc_counts c = {};
	loff_t size = i_size_read(inode);

	fc_count_pages(inode->i_mapping, &c);
	fc_res_add(r, FCACHE_A_FILE_SIZE, size);
	fc_res_add(r, FCACHE_A_PAGES_TOTAL, DIV_ROUND_UP(size, PAGE_SIZE));
	fc_res_add(r, FCACHE_A_PAGES_CACHED, c.cached);
	fc_res_add(r, FCACHE_A_PAGES_DIRTY, c.dirty);
	fc_res_add(r, FCACHE_A_PAGES_WRITEBACK, c.wb);
	fc_res_add(r, FCACHE_A_PAGES_EVICTED, c.evicted);
	fc_res_add(r, FCACHE_A_PAGES_UNSTABLE, fc_nfs_unstable(inode));
	fc_res_add(r, FCACHE_A_FILES_DIRTY, S_ISREG(inode->i_mode) && c.dirty);
}

/*
 * Walk the in-memory inodes of @sb (those under @dir if it is set), as
 * drop_pagecache_sb() does: a reference keeps our place in s_inodes while
 * the callback sleeps.
 */
int fc_walk_inodes(struct fc_ctx *ctx, struct super_block *sb,
		   struct dentry *dir, bool need_pages,
		   int (*fn)(struct fc_ctx *, struct inode *, void *),
		   void *arg)
{
	struct inode *inode, *toput = NULL;
	int err = 0;

	spin_lock(&sb->s_inode_list_lock);
	list_for_each_entry(inode, &sb->s_inodes, i_sb_list) {
		spin_lock(&inode->i_lock);
		if ((fc_i_state(inode) & (I_FREEING | I_WILL_FREE | I_NEW)) ||
		    (need_pages && !inode->i_mapping->nrpages)) {
			spin_unlock(&inode->i_lock);
			continue;
		}
		__iget(inode);
		spin_unlock(&inode->i_lock);
		spin_unlock(&sb->s_inode_list_lock);

		iput(toput);
		toput = inode;

		if (dir) {
			struct dentry *alias = d_find_alias(inode);
			bool under = alias && is_subdir(alias, dir);

			dput(alias);
			if (!under)
				goto next;
		}
		err = fn(ctx, inode, arg);
		if (!err && fc_should_stop(ctx))
			err = -EINTR;
		if (err) {
			iput(toput);
			return err;
		}
next:
		cond_resched();
		spin_lock(&sb->s_inode_list_lock);
	}
	spin_unlock(&sb->s_inode_list_lock);
	iput(toput);
	return err;
}

static int fc_query_one(struct fc_ctx *ctx, struct inode *inode, void *arg)
{
	if (S_ISREG(inode->i_mode)) {
		fc_query_inode(inode, &ctx->res);
		fc_res_add(&ctx->res, FCACHE_A_FILES, 1);
	}
	return 0;
}

/**
 * fc_do_query() - QUERY: the page cache state of the target
 * @ctx: the command; a directory with FCACHE_FLAG_RECURSIVE sums the
 *	regular files under it that have an inode in memory
 *
 * Return: 0 or -errno.
 */
int fc_do_query(struct fc_ctx *ctx)
{
	struct inode *inode = ctx->inode;
	struct fc_result *r = &ctx->res;
	struct fscache_cookie *cookie;
	u64 held = 0, stale = 0;
	u32 pinned;
	int err = 0;

	strscpy(r->fstype, inode->i_sb->s_type->name, sizeof(r->fstype));
	fc_res_set(r, FCACHE_A_INO, inode->i_ino);
	fc_res_set(r, FCACHE_A_DEV, new_encode_dev(inode->i_sb->s_dev));
	if (S_ISDIR(inode->i_mode) && (ctx->flags & FCACHE_FLAG_RECURSIVE)) {
		static const int zero[] = {
			FCACHE_A_FILES, FCACHE_A_FILE_SIZE,
			FCACHE_A_PAGES_TOTAL, FCACHE_A_PAGES_CACHED,
			FCACHE_A_PAGES_DIRTY, FCACHE_A_PAGES_WRITEBACK,
			FCACHE_A_PAGES_EVICTED, FCACHE_A_PAGES_UNSTABLE,
			FCACHE_A_FILES_DIRTY,
		};
		unsigned int i;

		for (i = 0; i < ARRAY_SIZE(zero); i++)
			fc_res_set(r, zero[i], 0);
		err = fc_walk_inodes(ctx, inode->i_sb, ctx->file->f_path.dentry,
				     false, fc_query_one, NULL);
	} else {
		fc_query_inode(inode, r);
		fc_res_set(r, FCACHE_A_FILES, S_ISREG(inode->i_mode));
	}
	pinned = fc_pin_state(inode, &held, &stale);
	fc_res_set(r, FCACHE_A_PINNED, pinned);
	if (pinned & FCACHE_PIN_MEMORY) {
		fc_res_set(r, FCACHE_A_PAGES_HELD, held);
		fc_res_set(r, FCACHE_A_PAGES_STALE, stale);
	}
	cookie = fc_inode_cookie(inode);
	if (cookie) {
		u32 users = atomic_read(&cookie->n_active);

		fc_res_set(r, FCACHE_A_COOKIE, users ? FCACHE_COOKIE_IN_USE :
			   FCACHE_COOKIE_IDLE);
		fc_res_set(r, FCACHE_A_COOKIE_USERS, users);
	} else {
		fc_res_set(r, FCACHE_A_COOKIE, FCACHE_COOKIE_NONE);
	}
	return err;
}

/*
 * Write an inode's dirty pages back (with the COMMIT NFS needs), then drop
 * its clean pages.  tmpfs and ramfs are skipped: their pages are the data.
 * A regular file is counted as the user-space backend counts what it
 * flushes: its size, pages needed, dirty pages before, pages left after.
 */
static int fc_flush_inode(struct fc_ctx *ctx, struct inode *inode, void *arg)
{
	struct address_space *mapping = inode->i_mapping;
	struct fc_result *r = &ctx->res;
	bool reg = S_ISREG(inode->i_mode);
	struct fc_counts before = {};
	int err;

	if (!mapping_can_writeback(mapping))
		return 0;
	if (fc_pin_is_pinned(inode)) {
		if (reg)
			fc_res_add(r, FCACHE_A_FILES_PINNED, 1);
		return 0;
	}
	if (reg)
		fc_count_pages(mapping, &before);
	err = filemap_write_and_wait_range(mapping, 0, LLONG_MAX);
	if (err)
		return err;
	if (fc_i_state(inode) & I_DIRTY_ALL) {
		err = write_inode_now(inode, 1);
		if (err)
			return err;
	}
	if (!reg) {
		/* a directory's cached listing: dropped, not counted */
		invalidate_mapping_pages(mapping, 0, -1);
		return 0;
	}
	/* also unmaps; -EBUSY only if a page is dirtied again */
	err = invalidate_inode_pages2(mapping);
	fc_res_add(r, FCACHE_A_FILES, 1);
	fc_res_add(r, FCACHE_A_FILE_SIZE, i_size_read(inode));
	fc_res_add(r, FCACHE_A_PAGES_TOTAL,
		   DIV_ROUND_UP(i_size_read(inode), PAGE_SIZE));
	fc_res_add(r, FCACHE_A_PAGES_DIRTY, before.dirty);
	fc_res_add(r, FCACHE_A_PAGES_CACHED, mapping->nrpages);
	if (before.cached > mapping->nrpages)
		fc_res_add(r, FCACHE_A_PAGES_DROPPED,
			   before.cached - mapping->nrpages);
	return err;
}

/* the figures every flush reply carries, zero when nothing was flushed */
static void fc_flush_res_init(struct fc_result *r)
{
	static const int attrs[] = {
		FCACHE_A_FILES, FCACHE_A_FILE_SIZE, FCACHE_A_PAGES_TOTAL,
		FCACHE_A_PAGES_DIRTY, FCACHE_A_PAGES_CACHED,
		FCACHE_A_PAGES_DROPPED, FCACHE_A_FILES_PINNED,
	};
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(attrs); i++)
		fc_res_set(r, attrs[i], 0);
}

/* a flush of several inodes goes on past an inode that is busy */
static int fc_flush_many(struct fc_ctx *ctx, struct inode *inode, void *arg)
{
	int err = fc_flush_inode(ctx, inode, arg);

	return err == -EBUSY ? 0 : err;
}

/**
 * fc_do_flush() - FLUSH: write back, then drop the pages and unused dentries
 * @ctx: the command; a directory flushes its subtree
 *
 * Return: 0, -EOPNOTSUPP on tmpfs-like filesystems, -EBUSY if the file is
 * pinned, or another -errno.
 */
int fc_do_flush(struct fc_ctx *ctx)
{
	struct inode *inode = ctx->inode;
	struct dentry *dentry = ctx->file->f_path.dentry;
	int err;

	fc_flush_res_init(&ctx->res);
	if (S_ISDIR(inode->i_mode)) {
		err = fc_walk_inodes(ctx, inode->i_sb, dentry, true,
				     fc_flush_many, NULL);
		if (err)
			return err;
		shrink_dcache_parent(dentry);
		return 0;
	}
	err = fc_flush_inode(ctx, inode, NULL);
	if (!err)
		d_prune_aliases(inode);
	return err;
}

static int fc_flush_sb(struct fc_ctx *ctx, struct super_block *sb)
{
	int err;

	lockdep_assert_held(&sb->s_umount);
	err = sync_filesystem(sb);
	if (err)
		return err;
	shrink_dcache_sb(sb);
	err = fc_walk_inodes(ctx, sb, NULL, true, fc_flush_many, NULL);
	fc_res_add(&ctx->res, FCACHE_A_SUPERS, 1);
	return err;
}

/**
 * fc_do_flush_volume() - FLUSH_VOLUME: flush the target's whole superblock
 * @ctx: the command
 *
 * Pinned inodes are skipped.  Return: 0 or -errno.
 */
int fc_do_flush_volume(struct fc_ctx *ctx)
{
	struct super_block *sb = ctx->inode->i_sb;
	int err;

	fc_flush_res_init(&ctx->res);
	strscpy(ctx->res.fstype, sb->s_type->name, sizeof(ctx->res.fstype));
	/* our file holds the mount, so sb stays alive */
	down_read(&sb->s_umount);
	err = fc_flush_sb(ctx, sb);
	up_read(&sb->s_umount);
	return err;
}

/**
 * fc_do_flush_all() - FLUSH_ALL: flush the superblocks of the given mounts
 * @ctx: the command; ctx->mnt holds one file per distinct superblock, on
 *	mounts of the caller (it opened them), so each superblock is alive and
 *	mounted where the caller sees it
 *
 * Return: 0 or the first -errno (the walk goes on past errors).
 */
int fc_do_flush_all(struct fc_ctx *ctx)
{
	unsigned int i;
	int err = 0;

	fc_res_set(&ctx->res, FCACHE_A_SUPERS, 0);
	fc_flush_res_init(&ctx->res);
	for (i = 0; i < ctx->nr_mnt; i++) {
		struct super_block *sb = ctx->mnt[i]->f_path.mnt->mnt_sb;
		int e;

		if (fc_should_stop(ctx))
			return -EINTR;
		down_read(&sb->s_umount);
		e = fc_flush_sb(ctx, sb);
		up_read(&sb->s_umount);
		if (e == -EINTR)
			return e;
		if (e && !err)
			err = e;
	}
	return err;
}

/**
 * fc_read_whole() - read a regular file once into the page cache
 * @ctx: the command (for cancellation)
 * @f: a file open for reading
 * @bytes: adds the bytes read
 *
 * WILLNEED per chunk issues the I/O in large requests (one WILLNEED over a
 * whole file is capped by the readahead limit); the kernel_read() loop
 * waits for it, so the call returns with the data in the cache.
 *
 * Return: 0, -EINTR on a signal (inline) or cancellation (job), or -errno.
 */
int fc_read_whole(struct fc_ctx *ctx, struct file *f, u64 *bytes)
{
	loff_t size = i_size_read(file_inode(f)), pos = 0;
	void *buf;
	int err = 0;

	buf = kvmalloc(FC_READ_BUF, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	while (pos < size) {
		loff_t end = min_t(loff_t, size, pos + fc_chunk_bytes);

		vfs_fadvise(f, pos, end - pos, POSIX_FADV_WILLNEED);
		while (pos < end) {
			ssize_t n = kernel_read(f, buf,
						min_t(loff_t, end - pos,
						      FC_READ_BUF), &pos);
			if (n < 0) {
				err = n;
				goto out;
			}
			if (!n)
				goto out;	/* file shrank */
			*bytes += n;
			if (fc_should_stop(ctx)) {
				err = -EINTR;
				goto out;
			}
			cond_resched();
		}
	}
out:
	kvfree(buf);
	return err;
}

/**
 * fc_do_prefetch() - PREFETCH: the whole regular file into the page cache
 * @ctx: the command, with ctx->rfile open for reading
 *
 * Return: 0 or -errno.
 */
int fc_do_prefetch(struct fc_ctx *ctx)
{
	u64 bytes = 0;
	int err;

	err = fc_read_whole(ctx, ctx->rfile, &bytes);
	fc_res_set(&ctx->res, FCACHE_A_BYTES, bytes);
	fc_res_set(&ctx->res, FCACHE_A_FILES, 1);
	if (!err)
		fc_query_inode(ctx->inode, &ctx->res);
	return err;
}
