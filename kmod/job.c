// SPDX-License-Identifier: GPL-2.0
/*
 * job.c - long commands run asynchronously.
 *
 * A doit handler holds genl's cb_lock (shared) for as long as it runs, which
 * stalls every genl_register_family() in the system; so a long command
 * (PREFETCH of a big file, a directory FLUSH, FLUSH_VOLUME, FLUSH_ALL, a big
 * memory PIN) does its checks and opens its files in the sender's task,
 * replies with a job id at once, and runs in fc_wq.  Its result goes to the
 * sender's port as one FCACHE_CMD_DONE message.  When the sender's socket
 * closes (the client exited or was killed) its jobs are cancelled: that is
 * how a fatal signal interrupts an asynchronous PREFETCH.
 */
#include <linux/atomic.h>
#include <linux/list.h>
#include <linux/moduleparam.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/workqueue.h>
#include <net/genetlink.h>
#include <net/net_namespace.h>

#include "fcache.h"

unsigned int fc_job_max = 16;
module_param_named(job_max, fc_job_max, uint, 0644);
MODULE_PARM_DESC(job_max, "Most asynchronous jobs at once (default 16)");

struct fc_job {
	struct work_struct work;
	struct list_head node;		/* in fc_jobs, under fc_job_lock */
	u64 id;
	u32 seq;
	bool cancelled;			/* READ_ONCE/WRITE_ONCE */
	int (*fn)(struct fc_ctx *ctx);
	struct fc_ctx *ctx;
};

struct workqueue_struct *fc_wq;
static LIST_HEAD(fc_jobs);
static DEFINE_SPINLOCK(fc_job_lock);
static unsigned int fc_nr_jobs;		/* under fc_job_lock */
static u64 fc_next_job = 1;		/* under fc_job_lock */
static bool fc_jobs_closed;		/* under fc_job_lock */

/**
 * fc_should_stop() - whether a command must give up now
 * @ctx: the command
 *
 * An inline command runs in the sender's sendmsg(), so any signal the
 * sender takes stops it, as it would stop a read(): a client that catches
 * SIGTERM to clean up must not wait for a whole file first.
 *
 * Return: true on a pending signal (inline) or cancellation (job).
 */
bool fc_should_stop(struct fc_ctx *ctx)
{
	if (ctx->job)
		return READ_ONCE(ctx->job->cancelled);
	return signal_pending(current);
}

/**
 * fc_ctx_free() - drop what a command context holds
 * @ctx: the command, may be NULL
 */
void fc_ctx_free(struct fc_ctx *ctx)
{
	unsigned int i;

	if (!ctx)
		return;
	for (i = 0; i < ctx->nr_mnt; i++)
		fput(ctx->mnt[i]);
	if (ctx->rfile)
		fput(ctx->rfile);
	if (ctx->file)
		fput(ctx->file);
	if (ctx->net)
		put_net(ctx->net);
	kfree(ctx);
}

static void fc_job_reply(struct fc_job *job, int err)
{
	struct fc_ctx *ctx = job->ctx;
	struct sk_buff *skb;
	void *hdr;

	skb = genlmsg_new(NLMSG_GOODSIZE, GFP_KERNEL);
	if (!skb)
		return;
	hdr = genlmsg_put(skb, ctx->portid, job->seq, &fc_family, 0,
			  FCACHE_CMD_DONE);
	if (!hdr)
		goto fail;
	if (nla_put_u64_64bit(skb, FCACHE_A_JOB, job->id, FCACHE_A_PAD) ||
	    nla_put_s32(skb, FCACHE_A_ERROR, err) ||
	    fc_put_result(skb, &ctx->res))
		goto fail;
	genlmsg_end(skb, hdr);
	/* the sender may be gone: nothing to do then */
	genlmsg_unicast(ctx->net, skb, ctx->portid);
	return;
fail:
	nlmsg_free(skb);
}

static void fc_job_work(struct work_struct *work)
{
	struct fc_job *job = container_of(work, struct fc_job, work);
	int err;

	err = fc_user_err(job->fn(job->ctx));
	if (READ_ONCE(job->cancelled) && !err)
		err = -EINTR;
	fc_job_reply(job, err);

	spin_lock(&fc_job_lock);
	list_del(&job->node);
	fc_nr_jobs--;
	spin_unlock(&fc_job_lock);
	fc_ctx_free(job->ctx);
	kfree(job);
}

/**
 * fc_job_start() - prepare a command to run asynchronously
 * @ctx: the command; the job owns it from here on, also on failure
 * @fn: the command's body
 * @seq: the request's nlmsg_seq, repeated in the completion
 * @id: set to the job's id
 *
 * The caller replies with @id, then calls fc_job_queue(), so that the
 * reply always comes before the completion.
 *
 * Return: the job, or an ERR_PTR: -EAGAIN when too many jobs run,
 * -ESHUTDOWN during unload, -ENOMEM.
 */
struct fc_job *fc_job_start(struct fc_ctx *ctx, int (*fn)(struct fc_ctx *),
			    u32 seq, u64 *id)
{
	struct fc_job *job;

	job = kzalloc(sizeof(*job), GFP_KERNEL);
	if (!job) {
		fc_ctx_free(ctx);
		return ERR_PTR(-ENOMEM);
	}
	INIT_WORK(&job->work, fc_job_work);
	job->fn = fn;
	job->ctx = ctx;
	job->seq = seq;
	ctx->job = job;

	spin_lock(&fc_job_lock);
	if (fc_jobs_closed || fc_nr_jobs >= fc_job_max) {
		int err = fc_jobs_closed ? -ESHUTDOWN : -EAGAIN;

		spin_unlock(&fc_job_lock);
		fc_ctx_free(ctx);
		kfree(job);
		return ERR_PTR(err);
	}
	job->id = fc_next_job++;
	*id = job->id;
	fc_nr_jobs++;
	list_add_tail(&job->node, &fc_jobs);
	spin_unlock(&fc_job_lock);
	return job;
}

/**
 * fc_job_queue() - start a job prepared by fc_job_start()
 * @job: the job; if the reply failed it still runs, and its completion
 *	finds nobody, which is harmless
 */
void fc_job_queue(struct fc_job *job)
{
	queue_work(fc_wq, &job->work);
}

/**
 * fc_job_cancel_port() - cancel the jobs a socket started
 * @net: the socket's namespace
 * @portid: the socket's port
 */
void fc_job_cancel_port(struct net *net, u32 portid)
{
	struct fc_job *job;

	spin_lock(&fc_job_lock);
	list_for_each_entry(job, &fc_jobs, node)
		if (job->ctx->portid == portid && net_eq(job->ctx->net, net))
			WRITE_ONCE(job->cancelled, true);
	spin_unlock(&fc_job_lock);
}

/**
 * fc_job_init() - create the workqueue
 *
 * Return: 0 or -ENOMEM.
 */
int fc_job_init(void)
{
	fc_wq = alloc_workqueue("fcache", WQ_UNBOUND, 0);
	return fc_wq ? 0 : -ENOMEM;
}

/**
 * fc_job_exit() - cancel every job and wait for them to end
 */
void fc_job_exit(void)
{
	struct fc_job *job;

	spin_lock(&fc_job_lock);
	fc_jobs_closed = true;
	list_for_each_entry(job, &fc_jobs, node)
		WRITE_ONCE(job->cancelled, true);
	spin_unlock(&fc_job_lock);
	destroy_workqueue(fc_wq);
}
