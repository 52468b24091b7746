// SPDX-License-Identifier: GPL-2.0
/*
 * Completions: a request leaves its socket's FIFO exactly once
 * (ss_req_finish: sent, failed, cancelled or aborted), which posts its SENT
 * record.  From the moment it is queued its pages are watched (ss_reaper):
 * each one the socket took and the network stack has dropped again goes
 * back to the pool at once, oldest first, so a large request gives back
 * memory while it is still being received; when the last is back the
 * RELEASED record is posted.  Frags hold plain page references, so there
 * is no callback: the reaper looks at page counts every tick while anything
 * is in flight, and not at all otherwise.  When no page has come back for
 * a few ticks it kicks every CPU's receive processing (see rxkick.c), at
 * growing intervals while nothing moves.
 */
#include <linux/cred.h>
#include <linux/eventfd.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/sched/task.h>
#include <linux/slab.h>

#include "ss.h"

static LIST_HEAD(ss_inflight);
static DEFINE_SPINLOCK(ss_inflight_lock);
static void ss_reaper_fn(struct work_struct *work);
static DECLARE_DELAYED_WORK(ss_reaper, ss_reaper_fn);

/* Queue one record on @req's open, using the node reserved for it. */
static void ss_post(struct ss_req *req, struct ss_cqe_node **nodep, s64 res,
		    u32 flags)
{
	struct ss_cqe_node *node = *nodep;
	struct ss_ctx *ctx = req->ctx;
	bool closed;

	*nodep = NULL;
	node->cqe.user_data = req->user_data;
	node->cqe.res = res;
	node->cqe.flags = flags;
	spin_lock(&ctx->lock);
	ctx->cq_reserved--;
	req->cq_charged--;
	closed = ctx->closed;
	if (!closed) {
		list_add_tail(&node->node, &ctx->cq);
		ctx->cq_nr++;
	}
	spin_unlock(&ctx->lock);
	if (closed) {
		kfree(node);
		return;
	}
	wake_up_interruptible_poll(&ctx->cq_wait, EPOLLIN | EPOLLRDNORM);
	if (ctx->evfd)
		eventfd_signal(ctx->evfd);
}

/* Last pages idle: give them back, tell whoever asked, drop the pipeline's reference. */
static void ss_req_release(struct ss_req *req)
{
	atomic64_sub(ss_req_free_pages(req, req->nr_pages),
		     &stablesend_stats[SS_BYTES_IN_FLIGHT]);
	atomic64_dec(&stablesend_stats[SS_REQUESTS_IN_FLIGHT]);
	if (req->cqe_released)
		ss_post(req, &req->cqe_released, 0, STABLESEND_CQE_RELEASED);
	ss_req_put(req);
}

/*
 * Give back @req's idle pages; true when all are idle, and then @req is
 * off the list, for the caller to ss_req_release().  Under ss_inflight_lock.
 */
static bool ss_req_reap(struct ss_req *req)
{
	unsigned int idle = ss_req_idle_pages(req, req->finished);

	if (req->finished && idle == req->nr_pages) {
		list_del_init(&req->inflight);
		return true;
	}
	if (idle > req->nr_freed)
		atomic64_sub(ss_req_free_pages(req, idle),
			     &stablesend_stats[SS_BYTES_IN_FLIGHT]);
	return false;
}

/* A request is queued: watch its pages from now on. */
void ss_inflight_add(struct ss_req *req)
{
	spin_lock(&ss_inflight_lock);
	list_add_tail(&req->inflight, &ss_inflight);
	spin_unlock(&ss_inflight_lock);
	queue_delayed_work(stablesend_wq, &ss_reaper, 1);
}

/* Someone waits for memory: look at the pages now. */
void ss_reaper_kick(void)
{
	mod_delayed_work(stablesend_wq, &ss_reaper, 0);
}

/**
 * ss_req_finish - a request is off its socket's FIFO for good
 * @req:	the request; the caller has unlinked it from the FIFO
 * @res:	bytes sent, or -errno
 */
void ss_req_finish(struct ss_req *req, s64 res)
{
	bool copied = req->copied && req->sent;
	struct ss_ctx *ctx = req->ctx;
	bool idle;

	req->res = res;
	spin_lock(&ctx->lock);
	list_del_init(&req->ctx_node);
	/* A SEND that sent nothing is as if never made: no RELEASED either. */
	if (req->sync && !req->sent && req->cqe_released) {
		kfree(req->cqe_released);
		req->cqe_released = NULL;
		ctx->cq_reserved--;
		req->cq_charged--;
	}
	ctx->stats.completed++;
	if (res < 0)
		ctx->stats.failed++;
	if (res == -ECANCELED)
		ctx->stats.cancelled++;
	ctx->stats.bytes_sent += req->sent;
	if (copied)
		ctx->stats.copied++;
	spin_unlock(&ctx->lock);
	atomic64_add(req->sent, &stablesend_stats[SS_BYTES_SENT]);
	if (res < 0)
		atomic64_inc(&stablesend_stats[SS_ERRORS]);
	if (copied)
		atomic64_inc(&stablesend_stats[SS_COPIED]);

	if (!req->sync)
		ss_post(req, &req->cqe_sent, res, STABLESEND_CQE_SENT |
			(copied ? STABLESEND_CQE_COPIED : 0));

	/* The FIFO's reference; task work may still hold one of its own. */
	ss_sock_put(req->sock);

	spin_lock(&ss_inflight_lock);
	req->finished = true;
	idle = ss_req_reap(req);
	spin_unlock(&ss_inflight_lock);
	if (idle)
		ss_req_release(req);
}

/* Reaper passes without progress before the first kick; doubles to HZ. */
#define SS_KICK_FIRST	2

static void ss_reaper_fn(struct work_struct *work)
{
	static unsigned int still, kick_at = SS_KICK_FIRST;
	struct ss_req *req, *tmp;
	bool more, moved = false;
	LIST_HEAD(idle);

	spin_lock(&ss_inflight_lock);
	list_for_each_entry_safe(req, tmp, &ss_inflight, inflight) {
		unsigned int freed = req->nr_freed;

		if (ss_req_reap(req)) {
			list_add_tail(&req->inflight, &idle);
			moved = true;
		} else {
			moved |= req->nr_freed != freed;
		}
	}
	more = !list_empty(&ss_inflight);
	spin_unlock(&ss_inflight_lock);

	/* The work item never runs concurrently with itself: no lock. */
	if (moved || !more) {
		still = 0;
		kick_at = SS_KICK_FIRST;
	} else if (++still >= kick_at) {
		still = 0;
		kick_at = min_t(unsigned int, 2 * kick_at, HZ);
		ss_rx_kick();
	}

	list_for_each_entry_safe(req, tmp, &idle, inflight) {
		list_del_init(&req->inflight);
		ss_req_release(req);
	}
	if (more)
		queue_delayed_work(stablesend_wq, &ss_reaper, 1);
}

void ss_reaper_stop(void)
{
	cancel_delayed_work_sync(&ss_reaper);
}

void ss_req_put(struct ss_req *req)
{
	struct ss_ctx *ctx = req->ctx;

	if (!refcount_dec_and_test(&req->ref))
		return;
	ss_req_unlock(req);
	ss_req_free_pages(req, req->nr_pages);
	spin_lock(&ctx->lock);
	ctx->cq_reserved -= req->cq_charged;
	spin_unlock(&ctx->lock);
	kfree(req->cqe_sent);
	kfree(req->cqe_released);
	put_cred(req->cred);
	put_task_struct(req->task);
	put_pid(req->tgid);
	kvfree(req->bvec);
	kfree(req);
	ss_ctx_put(ctx);
}

static void ss_ctx_free(struct work_struct *work)
{
	struct ss_ctx *ctx = container_of(work, struct ss_ctx, free_work);

	ss_pool_drain(ctx);
	if (ctx->evfd)
		eventfd_ctx_put(ctx->evfd);
	atomic64_dec(&stablesend_stats[SS_CONTEXTS]);
	kfree(ctx);
	module_put(THIS_MODULE);
}

/*
 * The context pins the module.  Its last reference may go in task work,
 * which nothing at module exit waits for, so the module reference is
 * dropped from stablesend_wq, which exit drains.
 */
void ss_ctx_release(struct kref *ref)
{
	struct ss_ctx *ctx = container_of(ref, struct ss_ctx, ref);

	INIT_WORK(&ctx->free_work, ss_ctx_free);
	queue_work(stablesend_wq, &ctx->free_work);
}
