// SPDX-License-Identifier: GPL-2.0
/*
 * pin.c - PIN, UNPIN, PIN_LIST and the memory budget.
 *
 * A pin holds a real open file of its target (the O_PATH file itself for
 * non-regular targets).  That keeps the inode, the dentry and the mount,
 * keeps NFSv4 OPEN state, and, because ->open ran, keeps the FS-Cache
 * cookie in use on NFS, 9p, afs, ceph and cifs, so cachefilesd does not
 * cull the object.
 *
 * A memory pin also keeps the file's pages resident by holding folio
 * references (AS_UNEVICTABLE alone does not survive drop_caches).  It is
 * charged i_size at pin time against a global budget; a pin beyond the
 * budget fails with -ENOSPC.  The filesystem may still replace the pages
 * (NFS invalidates after a server-side change, truncation): the held folios
 * then leave the mapping, and a periodic check (repin_ms) drops them and
 * reads and holds the new ones.
 *
 * Pins outlive the socket that made them (fcachectl exits right after
 * "pin"); they end on UNPIN or module unload.  A pin made with
 * FCACHE_FLAG_SESSION ends also when its sender's socket closes, for a
 * daemon that wants its pins to die with it.
 */
#include <linux/cred.h>
#include <linux/hashtable.h>
#include <linux/list.h>
#include <linux/mm.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/pagemap.h>
#include <linux/pagevec.h>
#include <linux/refcount.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>
#include <net/genetlink.h>

#include "fcache.h"

static unsigned int fc_pin_budget_mb;
module_param_named(pin_budget_mb, fc_pin_budget_mb, uint, 0444);
MODULE_PARM_DESC(pin_budget_mb,
		 "Memory pin budget in MiB at load (default: 1/8 of RAM)");

unsigned int fc_pin_max = 1 << 20;
module_param_named(pin_max, fc_pin_max, uint, 0644);
MODULE_PARM_DESC(pin_max, "Most pins in all (default 1048576)");

static unsigned int fc_pins_per_user = 4096;
module_param_named(pins_per_user, fc_pins_per_user, uint, 0644);
MODULE_PARM_DESC(pins_per_user,
		 "Most pins of one uid without CAP_SYS_ADMIN (default 4096)");

unsigned int fc_repin_ms = 5000;
module_param_named(repin_ms, fc_repin_ms, uint, 0644);
MODULE_PARM_DESC(repin_ms,
		 "Period of the check for replaced pinned pages, 0 off");

struct fc_pin {
	struct list_head node;		/* fc_pins, under fc_pin_lock */
	struct hlist_node hnode;	/* fc_pin_hash, under fc_pin_lock */
	refcount_t ref;			/* one for the table */
	u64 id;
	struct file *file;
	struct inode *inode;		/* d_real_inode() of the target */
	u32 flags;			/* FCACHE_PIN_*, under lock */
	kuid_t uid;
	struct net *net;		/* session pins: compared, not held */
	u32 portid;
	struct mutex lock;		/* folios, nr_held, charge, flags */
	struct xarray folios;		/* index -> held folio */
	u64 nr_held;			/* pages */
	u64 charge;			/* pages charged to the budget */
	u64 nr_stale;			/* pages re-pinned so far */
};

static DEFINE_MUTEX(fc_pin_lock);
static LIST_HEAD(fc_pins);		/* in id order */
static DEFINE_HASHTABLE(fc_pin_hash, 12);
static unsigned int fc_nr_pins;
static u64 fc_next_pin = 1;

static DEFINE_SPINLOCK(fc_budget_lock);
static u64 fc_budget_pages;		/* under fc_budget_lock */
static u64 fc_charged_pages;		/* under fc_budget_lock */

static void fc_repin_fn(struct work_struct *work);
static DECLARE_DELAYED_WORK(fc_repin_dwork, fc_repin_fn);
static bool fc_repin_stopped;

static u64 fc_pages_of(struct inode *inode)
{
	return DIV_ROUND_UP(i_size_read(inode), PAGE_SIZE);
}

static int fc_charge(u64 pages)
{
	int err = 0;

	spin_lock(&fc_budget_lock);
	if (fc_charged_pages + pages > fc_budget_pages)
		err = -ENOSPC;
	else
		fc_charged_pages += pages;
	spin_unlock(&fc_budget_lock);
	return err;
}

static void fc_uncharge(u64 pages)
{
	spin_lock(&fc_budget_lock);
	fc_charged_pages -= pages;
	spin_unlock(&fc_budget_lock);
}

/**
 * fc_pin_check_budget() - fail early, with a reason, if a pin cannot fit
 * @inode: the file to pin in memory
 * @extack: where the reason goes
 *
 * Return: 0 or -ENOSPC.
 */
int fc_pin_check_budget(struct inode *inode, struct netlink_ext_ack *extack)
{
	u64 need = fc_pages_of(inode), used, budget;

	spin_lock(&fc_budget_lock);
	used = fc_charged_pages;
	budget = fc_budget_pages;
	spin_unlock(&fc_budget_lock);
	if (used + need <= budget)
		return 0;
	NL_SET_ERR_MSG_MOD(extack,
			   "memory pin exceeds the pin budget (see LIMITS_GET)");
	return -ENOSPC;
}

/* hold the folios of the file's first @pin->charge pages; pin->lock held */
static int fc_hold_folios(struct fc_pin *pin)
{
	struct address_space *mapping = pin->inode->i_mapping;
	struct folio_batch fbatch;
	pgoff_t index = 0, last;
	int err = 0;

	if (!pin->charge)
		return 0;
	last = pin->charge - 1;
	folio_batch_init(&fbatch);
	while (!err && pin->nr_held < pin->charge &&
	       filemap_get_folios(mapping, &index, last, &fbatch)) {
		unsigned int i;

		for (i = 0; i < folio_batch_count(&fbatch); i++) {
			struct folio *folio = fbatch.folios[i];
			unsigned long nr = folio_nr_pages(folio);
			void *old;

			if (xa_load(&pin->folios, folio->index))
				continue;
			if (pin->nr_held + nr > pin->charge)
				break;
			folio_get(folio);
			old = xa_store(&pin->folios, folio->index, folio,
				       GFP_KERNEL);
			if (xa_is_err(old)) {
				folio_put(folio);
				err = xa_err(old);
				break;
			}
			pin->nr_held += nr;
		}
		folio_batch_release(&fbatch);
		cond_resched();
	}
	return err;
}

/* count (and with @drop, release) held folios that left the mapping */
static u64 fc_stale_folios(struct fc_pin *pin, bool drop)
{
	struct address_space *mapping = pin->inode->i_mapping;
	struct folio *folio;
	unsigned long index;
	u64 stale = 0;

	xa_for_each(&pin->folios, index, folio) {
		if (READ_ONCE(folio->mapping) == mapping &&
		    folio->index == index)
			continue;
		stale += folio_nr_pages(folio);
		if (!drop)
			continue;
		xa_erase(&pin->folios, index);
		pin->nr_held -= folio_nr_pages(folio);
		folio_put(folio);
	}
	return stale;
}

static void fc_release_folios(struct fc_pin *pin)
{
	struct folio *folio;
	unsigned long index;

	xa_for_each(&pin->folios, index, folio) {
		xa_erase(&pin->folios, index);
		folio_put(folio);
		cond_resched();
	}
	xa_destroy(&pin->folios);
	pin->nr_held = 0;
}

static void fc_pin_put(struct fc_pin *pin)
{
	if (!refcount_dec_and_test(&pin->ref))
		return;
	fc_release_folios(pin);
	if (pin->charge)
		fc_uncharge(pin->charge);
	fput(pin->file);
	mutex_destroy(&pin->lock);
	kfree(pin);
}

/* fc_pin_lock held */
static struct fc_pin *fc_pin_find(struct inode *inode)
{
	struct fc_pin *pin;

	hash_for_each_possible(fc_pin_hash, pin, hnode,
			       (unsigned long)inode)
		if (pin->inode == inode)
			return pin;
	return NULL;
}

static struct fc_pin *fc_pin_get(struct inode *inode)
{
	struct fc_pin *pin;

	mutex_lock(&fc_pin_lock);
	pin = fc_pin_find(inode);
	if (pin)
		refcount_inc(&pin->ref);
	mutex_unlock(&fc_pin_lock);
	return pin;
}

/* fc_pin_lock held; the caller puts the table's reference */
static void fc_pin_unlink(struct fc_pin *pin)
{
	list_del_init(&pin->node);
	hash_del(&pin->hnode);
	fc_nr_pins--;
}

/**
 * fc_pin_is_pinned() - whether an inode is pinned (flushes skip it)
 * @inode: the inode
 *
 * Return: true if pinned.
 */
bool fc_pin_is_pinned(struct inode *inode)
{
	bool pinned;

	mutex_lock(&fc_pin_lock);
	pinned = fc_pin_find(inode);
	mutex_unlock(&fc_pin_lock);
	return pinned;
}

/**
 * fc_pin_state() - the pin flags of an inode, for QUERY
 * @inode: the inode
 * @held: set to the pages held by a memory pin
 * @stale: set to the held pages the filesystem has replaced
 *
 * Return: FCACHE_PIN_* flags, 0 if not pinned.
 */
u32 fc_pin_state(struct inode *inode, u64 *held, u64 *stale)
{
	struct fc_pin *pin = fc_pin_get(inode);
	u32 flags;

	if (!pin)
		return 0;
	mutex_lock(&pin->lock);
	flags = pin->flags;
	*held = pin->nr_held;
	*stale = fc_stale_folios(pin, false);
	mutex_unlock(&pin->lock);
	fc_pin_put(pin);
	return flags;
}

static void fc_pin_result(struct fc_ctx *ctx, struct fc_pin *pin)
{
	struct fc_result *r = &ctx->res;

	fc_res_set(r, FCACHE_A_PIN_ID, pin->id);
	fc_res_set(r, FCACHE_A_PINNED, pin->flags);
	fc_res_set(r, FCACHE_A_FILES, 1);
	if (pin->flags & FCACHE_PIN_MEMORY) {
		fc_res_set(r, FCACHE_A_PAGES_HELD, pin->nr_held);
		fc_res_set(r, FCACHE_A_PAGES_TOTAL, fc_pages_of(pin->inode));
	}
}

/* make @pin a memory pin: charge, read, hold; pin->lock held */
static int fc_pin_memory(struct fc_ctx *ctx, struct fc_pin *pin)
{
	u64 need = fc_pages_of(pin->inode), bytes = 0;
	int err;

	err = fc_charge(need);
	if (err)
		return err;
	pin->charge = need;
	err = fc_read_whole(ctx, pin->file, &bytes);
	if (!err)
		err = fc_hold_folios(pin);
	fc_res_set(&ctx->res, FCACHE_A_BYTES, bytes);
	if (err) {
		fc_release_folios(pin);
		fc_uncharge(pin->charge);
		pin->charge = 0;
		return err;
	}
	pin->flags |= FCACHE_PIN_MEMORY;
	return 0;
}

static unsigned int fc_pins_of(kuid_t uid)
{
	struct fc_pin *pin;
	unsigned int n = 0;

	list_for_each_entry(pin, &fc_pins, node)
		n += uid_eq(pin->uid, uid);
	return n;
}

/**
 * fc_do_pin() - PIN: keep the target cached
 * @ctx: the command; permissions were checked by the caller.  Pinning a
 *	pinned target again is a no-op, except that a memory pin upgrades a
 *	plain one.
 *
 * Return: 0, -ENOSPC over the budget, -EMFILE over a pin limit, or -errno.
 */
int fc_do_pin(struct fc_ctx *ctx)
{
	bool memory = ctx->flags & FCACHE_FLAG_MEMORY;
	struct fc_pin *pin, *old;
	int err = 0;

	pin = fc_pin_get(ctx->inode);
	if (pin) {
		mutex_lock(&pin->lock);
		if (memory && !(pin->flags & FCACHE_PIN_MEMORY) &&
		    !(ctx->flags & FCACHE_FLAG_DRY_RUN))
			err = fc_pin_memory(ctx, pin);
		if (!err)
			fc_pin_result(ctx, pin);
		mutex_unlock(&pin->lock);
		fc_pin_put(pin);
		return err;
	}
	if (ctx->flags & FCACHE_FLAG_DRY_RUN) {
		fc_res_set(&ctx->res, FCACHE_A_BYTES,
			   memory ? fc_pages_of(ctx->inode) << PAGE_SHIFT : 0);
		fc_res_set(&ctx->res, FCACHE_A_PINNED, 0);
		return 0;
	}

	pin = kzalloc(sizeof(*pin), GFP_KERNEL);
	if (!pin)
		return -ENOMEM;
	refcount_set(&pin->ref, 1);
	mutex_init(&pin->lock);
	xa_init(&pin->folios);
	INIT_LIST_HEAD(&pin->node);
	pin->inode = ctx->inode;
	pin->uid = ctx->uid;
	pin->flags = FCACHE_PIN_PINNED;
	if (ctx->flags & FCACHE_FLAG_SESSION) {
		pin->flags |= FCACHE_PIN_SESSION;
		pin->net = ctx->net;
		pin->portid = ctx->portid;
	}
	/* the pin takes over the context's real file (or the O_PATH one) */
	if (ctx->rfile) {
		pin->file = ctx->rfile;
		ctx->rfile = NULL;
	} else {
		pin->file = get_file(ctx->file);
	}
	if (memory) {
		mutex_lock(&pin->lock);
		err = fc_pin_memory(ctx, pin);
		mutex_unlock(&pin->lock);
		if (err)
			goto out_put;
	}

	mutex_lock(&fc_pin_lock);
	old = fc_pin_find(ctx->inode);
	if (old) {
		/* pinned meanwhile by someone else: report theirs */
		refcount_inc(&old->ref);
		mutex_unlock(&fc_pin_lock);
		fc_pin_put(pin);
		mutex_lock(&old->lock);
		fc_pin_result(ctx, old);
		mutex_unlock(&old->lock);
		fc_pin_put(old);
		return 0;
	}
	if (fc_nr_pins >= fc_pin_max ||
	    (!ctx->admin && fc_pins_of(pin->uid) >= fc_pins_per_user)) {
		mutex_unlock(&fc_pin_lock);
		err = -EMFILE;
		goto out_put;
	}
	pin->id = fc_next_pin++;
	list_add_tail(&pin->node, &fc_pins);
	hash_add(fc_pin_hash, &pin->hnode, (unsigned long)pin->inode);
	fc_nr_pins++;
	mutex_unlock(&fc_pin_lock);
	fc_pin_result(ctx, pin);
	return 0;

out_put:
	fc_pin_put(pin);
	return err;
}

/**
 * fc_do_unpin() - UNPIN: by ctx->pin_id if set, else the target's pin
 * @ctx: the command; only the pin's owner or CAP_SYS_ADMIN may unpin
 *
 * Return: 0, -ENOENT if not pinned, -EPERM, or -errno.
 */
int fc_do_unpin(struct fc_ctx *ctx)
{
	struct fc_pin *pin = NULL, *p;

	mutex_lock(&fc_pin_lock);
	if (ctx->pin_id) {
		list_for_each_entry(p, &fc_pins, node)
			if (p->id == ctx->pin_id) {
				pin = p;
				break;
			}
	} else {
		pin = fc_pin_find(ctx->inode);
	}
	if (!pin) {
		mutex_unlock(&fc_pin_lock);
		return -ENOENT;
	}
	if (!uid_eq(pin->uid, ctx->uid) && !ctx->admin) {
		mutex_unlock(&fc_pin_lock);
		return -EPERM;
	}
	fc_pin_unlink(pin);
	mutex_unlock(&fc_pin_lock);
	fc_res_set(&ctx->res, FCACHE_A_PIN_ID, pin->id);
	fc_res_set(&ctx->res, FCACHE_A_FILES, 1);
	fc_res_set(&ctx->res, FCACHE_A_PAGES_HELD, pin->nr_held);
	fc_pin_put(pin);
	return 0;
}

/**
 * fc_pin_drop_port() - end the session pins of a closed socket
 * @net: the socket's namespace
 * @portid: the socket's port
 */
void fc_pin_drop_port(struct net *net, u32 portid)
{
	struct fc_pin *pin, *tmp;
	LIST_HEAD(dead);

	mutex_lock(&fc_pin_lock);
	list_for_each_entry_safe(pin, tmp, &fc_pins, node) {
		if (!(pin->flags & FCACHE_PIN_SESSION) ||
		    pin->portid != portid || pin->net != net)
			continue;
		fc_pin_unlink(pin);
		list_add(&pin->node, &dead);
	}
	mutex_unlock(&fc_pin_lock);
	list_for_each_entry_safe(pin, tmp, &dead, node) {
		list_del_init(&pin->node);
		fc_pin_put(pin);
	}
}

static int fc_pin_fill(struct sk_buff *skb, struct netlink_callback *cb,
		       struct fc_pin *pin, char *buf)
{
	struct inode *inode = pin->inode;
	char *path;
	void *hdr;

	hdr = genlmsg_put(skb, NETLINK_CB(cb->skb).portid,
			  cb->nlh->nlmsg_seq, &fc_family, NLM_F_MULTI,
			  FCACHE_CMD_PIN_LIST);
	if (!hdr)
		return -EMSGSIZE;
	path = d_path(&pin->file->f_path, buf, PATH_MAX);
	if (IS_ERR(path))
		path = "";
	if (nla_put_u64_64bit(skb, FCACHE_A_PIN_ID, pin->id, FCACHE_A_PAD) ||
	    nla_put_u32(skb, FCACHE_A_PINNED, pin->flags) ||
	    nla_put_string(skb, FCACHE_A_PATH, path) ||
	    nla_put_string(skb, FCACHE_A_FSTYPE, inode->i_sb->s_type->name) ||
	    nla_put_u64_64bit(skb, FCACHE_A_INO, inode->i_ino, FCACHE_A_PAD) ||
	    nla_put_u32(skb, FCACHE_A_DEV,
			new_encode_dev(inode->i_sb->s_dev)) ||
	    nla_put_u32(skb, FCACHE_A_UID,
			from_kuid_munged(current_user_ns(), pin->uid)) ||
	    nla_put_u64_64bit(skb, FCACHE_A_FILE_SIZE, i_size_read(inode),
			      FCACHE_A_PAD) ||
	    nla_put_u64_64bit(skb, FCACHE_A_PAGES_HELD, pin->nr_held,
			      FCACHE_A_PAD)) {
		genlmsg_cancel(skb, hdr);
		return -EMSGSIZE;
	}
	genlmsg_end(skb, hdr);
	return 0;
}

/**
 * fc_pin_dump() - PIN_LIST: the caller's pins (all with CAP_SYS_ADMIN)
 * @skb: the dump buffer
 * @cb: the dump; cb->args[0] is the last pin id sent
 *
 * Return: skb->len, 0 at the end, or -errno.
 */
int fc_pin_dump(struct sk_buff *skb, struct netlink_callback *cb)
{
	bool all = netlink_capable(cb->skb, CAP_SYS_ADMIN);
	kuid_t me = current_fsuid();
	struct fc_pin *pin;
	char *buf;
	int err = 0;

	buf = kmalloc(PATH_MAX, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	mutex_lock(&fc_pin_lock);
	list_for_each_entry(pin, &fc_pins, node) {
		if (pin->id <= cb->args[0])
			continue;
		if (!all && !uid_eq(pin->uid, me))
			continue;
		err = fc_pin_fill(skb, cb, pin, buf);
		if (err)
			break;
		cb->args[0] = pin->id;
	}
	mutex_unlock(&fc_pin_lock);
	kfree(buf);
	if (err == -EMSGSIZE && skb->len)
		return skb->len;
	return err ? err : skb->len;
}

/**
 * fc_pin_limits() - the limits and their use, for LIMITS_GET
 * @r: the result
 */
void fc_pin_limits(struct fc_result *r)
{
	u64 budget, used;

	spin_lock(&fc_budget_lock);
	budget = fc_budget_pages;
	used = fc_charged_pages;
	spin_unlock(&fc_budget_lock);
	fc_res_set(r, FCACHE_A_PIN_BUDGET, budget << PAGE_SHIFT);
	fc_res_set(r, FCACHE_A_PIN_USED, used << PAGE_SHIFT);
	fc_res_set(r, FCACHE_A_PIN_MAX, READ_ONCE(fc_pin_max));
	mutex_lock(&fc_pin_lock);
	fc_res_set(r, FCACHE_A_PIN_COUNT, fc_nr_pins);
	mutex_unlock(&fc_pin_lock);
	fc_res_set(r, FCACHE_A_REPIN_MS, READ_ONCE(fc_repin_ms));
}

/**
 * fc_pin_set_budget() - set the memory pin budget
 * @bytes: the new budget; existing pins stay even above it
 *
 * Return: 0.
 */
int fc_pin_set_budget(u64 bytes)
{
	spin_lock(&fc_budget_lock);
	fc_budget_pages = bytes >> PAGE_SHIFT;
	spin_unlock(&fc_budget_lock);
	return 0;
}

/* next memory pin after id @after, with a reference, or NULL */
static struct fc_pin *fc_next_memory_pin(u64 after)
{
	struct fc_pin *pin;

	mutex_lock(&fc_pin_lock);
	list_for_each_entry(pin, &fc_pins, node) {
		if (pin->id > after && (pin->flags & FCACHE_PIN_MEMORY)) {
			refcount_inc(&pin->ref);
			mutex_unlock(&fc_pin_lock);
			return pin;
		}
	}
	mutex_unlock(&fc_pin_lock);
	return NULL;
}

/* re-pin pages the filesystem replaced; runs in system_wq */
static void fc_repin_fn(struct work_struct *work)
{
	struct fc_ctx *ctx;
	struct fc_pin *pin;
	u64 last = 0;

	ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);
	while (ctx && !READ_ONCE(fc_repin_stopped) &&
	       (pin = fc_next_memory_pin(last))) {
		u64 stale, bytes = 0;

		last = pin->id;
		mutex_lock(&pin->lock);
		stale = fc_stale_folios(pin, true);
		if (stale) {
			pin->nr_stale += stale;
			if (!fc_read_whole(ctx, pin->file, &bytes))
				fc_hold_folios(pin);
		}
		mutex_unlock(&pin->lock);
		fc_pin_put(pin);
		cond_resched();
	}
	kfree(ctx);
	if (!READ_ONCE(fc_repin_stopped) && READ_ONCE(fc_repin_ms))
		schedule_delayed_work(&fc_repin_dwork,
				      msecs_to_jiffies(READ_ONCE(fc_repin_ms)));
}

/**
 * fc_pin_kick() - (re)start the stale-page check after repin_ms changed
 */
void fc_pin_kick(void)
{
	if (READ_ONCE(fc_repin_ms))
		mod_delayed_work(system_wq, &fc_repin_dwork,
				 msecs_to_jiffies(READ_ONCE(fc_repin_ms)));
}

/**
 * fc_pin_init() - set the budget and start the stale-page check
 *
 * Return: 0.
 */
int fc_pin_init(void)
{
	if (fc_pin_budget_mb)
		fc_budget_pages = (u64)fc_pin_budget_mb << (20 - PAGE_SHIFT);
	else
		fc_budget_pages = totalram_pages() / 8;
	fc_pin_kick();
	return 0;
}

/**
 * fc_pin_exit() - stop the check and release every pin
 */
void fc_pin_exit(void)
{
	struct fc_pin *pin, *tmp;
	LIST_HEAD(dead);

	WRITE_ONCE(fc_repin_stopped, true);
	cancel_delayed_work_sync(&fc_repin_dwork);
	mutex_lock(&fc_pin_lock);
	list_for_each_entry_safe(pin, tmp, &fc_pins, node) {
		fc_pin_unlink(pin);
		list_add(&pin->node, &dead);
	}
	mutex_unlock(&fc_pin_lock);
	list_for_each_entry_safe(pin, tmp, &dead, node) {
		list_del_init(&pin->node);
		fc_pin_put(pin);
	}
}
