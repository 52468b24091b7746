// SPDX-License-Identifier: GPL-2.0
/*
 * Completions: a request leaves its socket's FIFO exactly once
 * (ss_req_finish: sent, failed, cancelled or aborted), which posts its SENT
 * record.  Once the socket took some of it, its pages are watched
 * (ss_reaper): each one the socket took and the network stack dropped goes
 * back to the pool at once, oldest first, so a large request gives back
 * memory while it is still being received; when the last is back the
 * RELEASED record is posted.  Frags hold plain page references, so there
 * is no callback: the reaper looks at page counts, in proportion to what
 * moves.  A watched request whose pages keep coming back is looked at every
 * tick, one where nothing moved twice as rarely each time, down to about
 * twice a second (RELEASED asked for: every SS_LEVEL_RELEASED ticks at
 * least).
 * Requests parked on a full socket with nothing sent cost nothing.  A
 * submitter waiting for memory has everything looked at on the next tick.
 * When pages do not come back it kicks the receive processing of the
 * housekeeping CPUs (see rxkick.c): while someone waits for memory or for
 * a RELEASED record after a few ticks, at growing intervals; otherwise
 * only for requests nothing moved for about a second, once a second at
 * most, so that memory nobody waits for comes back too (closed opens).
 */
#include <linux/cred.h>
#include <linux/eventfd.h>
#include <linux/hashtable.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/sched/task.h>
#include <linux/slab.h>

#include "ss.h"

/* Level L is looked at every 2^L ticks; the last about twice a second. */
#define SS_LEVELS		(ilog2(HZ) + 1)
#define SS_LEVEL_RELEASED	4

/*
 * The requests one socket took bytes of, oldest first.  A socket gives
 * pages back in order, so the reaper looks at the oldest few only: its
 * cost follows the sockets with pages out, not the requests.  Lives while
 * a FIFO of its socket does or it has requests; the socket's next FIFO
 * takes it over (a FIFO lives only while requests wait on it).
 */
struct ss_group {
	struct hlist_node hash;		/* on ss_groups, by @key */
	const void *key;		/* the socket */
	struct list_head reqs;		/* ss_req.inflight */
	struct list_head node;		/* on ss_watch[level] while @reqs is not empty */
	unsigned int level;
	unsigned int released;		/* requests on @reqs that asked for RELEASED */
	bool sock_gone;			/* no FIFO owns it */
};

static DEFINE_HASHTABLE(ss_groups, 8);

/* Groups by level, when each level is due next; all under the lock. */
static struct list_head ss_watch[SS_LEVELS];
static unsigned long ss_due[SS_LEVELS];
static DEFINE_SPINLOCK(ss_inflight_lock);
/* Someone began to wait for memory: look at everything on the next pass. */
static bool ss_wanted;
/* Submitters waiting for memory now: kicks are for them. */
static atomic_t ss_waiters;
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

/* Take @req off its group, if on one.  Under ss_inflight_lock. */
static void ss_group_del(struct ss_req *req)
{
	struct ss_group *g = req->group;

	if (!g)
		return;
	list_del_init(&req->inflight);
	req->group = NULL;
	g->released -= !!req->cqe_released;
}

/* @g lost requests: off the lists when it has none, freed if its FIFO is too. */
static void ss_group_check(struct ss_group *g)
{
	if (!g || !list_empty(&g->reqs))
		return;
	list_del_init(&g->node);
	if (g->sock_gone) {
		hash_del(&g->hash);
		kfree(g);
	}
}

/*
 * Give back @req's idle pages; true when all are idle, and then @req is
 * off the list, for the caller to ss_req_release().  Under ss_inflight_lock.
 */
static bool ss_req_reap(struct ss_req *req)
{
	unsigned int idle = ss_req_idle_pages(req, req->finished);

	if (req->finished && idle == req->nr_pages) {
		ss_group_del(req);
		return true;
	}
	if (idle > req->nr_freed)
		atomic64_sub(ss_req_free_pages(req, idle),
			     &stablesend_stats[SS_BYTES_IN_FLIGHT]);
	return false;
}

/*
 * A pass within a tick: sooner than the rarer levels may have it due, but
 * without pushing back a pass already due (racy read of the expiry: at
 * worst one extra pass or one tick later).
 */
static void ss_reaper_soon(void)
{
	if (!delayed_work_pending(&ss_reaper) ||
	    time_after(READ_ONCE(ss_reaper.timer.expires), jiffies + 1))
		mod_delayed_work(stablesend_wq, &ss_reaper, 1);
}

/**
 * ss_group_get - the release group of a new FIFO of socket @key
 * @key:	the socket
 *
 * The socket's earlier group if it still has requests, else a new one.
 *
 * Return: the group, or NULL.
 */
struct ss_group *ss_group_get(const void *key)
{
	struct ss_group *g, *fresh = kzalloc(sizeof(*fresh), SS_GFP);

	spin_lock(&ss_inflight_lock);
	hash_for_each_possible(ss_groups, g, hash, (unsigned long)key) {
		if (g->key == key && g->sock_gone) {
			g->sock_gone = false;
			goto out;
		}
	}
	g = fresh;
	fresh = NULL;
	if (g) {
		g->key = key;
		INIT_LIST_HEAD(&g->reqs);
		INIT_LIST_HEAD(&g->node);
		hash_add(ss_groups, &g->hash, (unsigned long)key);
	}
out:
	spin_unlock(&ss_inflight_lock);
	kfree(fresh);
	return g;
}

/**
 * ss_group_sock_gone - the socket's FIFO is freed
 * @g:		its group
 *
 * The group goes with its last request, unless a new FIFO takes it over.
 */
void ss_group_sock_gone(struct ss_group *g)
{
	spin_lock(&ss_inflight_lock);
	g->sock_gone = true;
	ss_group_check(g);
	spin_unlock(&ss_inflight_lock);
}

/* Watch @g from the next tick on.  Under ss_inflight_lock. */
static void ss_group_watch(struct ss_group *g)
{
	g->level = 0;
	list_move_tail(&g->node, &ss_watch[0]);
}

/**
 * ss_inflight_add - the socket took the first bytes of @req
 * @req:	a request on its FIFO
 * @g:		the FIFO's group
 *
 * From now on pages of it may come back.  Called by its sender, once.
 */
void ss_inflight_add(struct ss_req *req, struct ss_group *g)
{
	spin_lock(&ss_inflight_lock);
	if (!req->group && !req->finished) {
		req->group = g;
		g->released += !!req->cqe_released;
		list_add_tail(&req->inflight, &g->reqs);
		if (list_empty(&g->node))
			ss_group_watch(g);
	}
	spin_unlock(&ss_inflight_lock);
	ss_reaper_soon();
}

/**
 * ss_reaper_wait - a submitter starts (@delta 1) or stops (-1) waiting
 * @delta:	1 or -1
 *
 * Each start has every page looked at on the next tick.  A waiter starts
 * again only after something came back, so that costs no more than the
 * progress made.  While anyone waits, no request is looked at more rarely
 * than every SS_LEVEL_RELEASED ticks, and the CPUs are kicked when nothing
 * moves.
 */
void ss_reaper_wait(int delta)
{
	atomic_add(delta, &ss_waiters);
	if (delta > 0) {
		WRITE_ONCE(ss_wanted, true);
		mod_delayed_work(stablesend_wq, &ss_reaper, 0);
	}
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
	struct ss_group *g;
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
	/* Not idle: it is on its group (pages only go out once it is). */
	g = req->group;
	idle = ss_req_reap(req);
	if (idle)
		ss_group_check(g);
	spin_unlock(&ss_inflight_lock);
	if (idle)
		ss_req_release(req);
	else
		ss_reaper_soon();
}

/* Passes without progress, while wanted, before the first kick; doubles to HZ. */
#define SS_KICK_FIRST	2

/*
 * Look at the groups of level @l: from each one's oldest request on, give
 * back what came back, until a request still has pages out.  A group that
 * moved goes to level 0, one that did not a level up.  Under
 * ss_inflight_lock.  Returns whether any page came back; *@released tells
 * whether a request that still has pages out asked for RELEASED.
 */
static bool ss_reap_level(unsigned int l, struct list_head *next,
			  struct list_head *idle, bool waiters, bool *released)
{
	struct ss_group *g, *gtmp;
	struct ss_req *req, *tmp;
	bool moved = false;

	list_for_each_entry_safe(g, gtmp, &ss_watch[l], node) {
		bool gmoved = false;
		unsigned int top;

		list_for_each_entry_safe(req, tmp, &g->reqs, inflight) {
			unsigned int freed = req->nr_freed;

			atomic64_inc(&stablesend_stats[SS_REAP_CHECKS]);
			if (ss_req_reap(req)) {
				list_add_tail(&req->inflight, idle);
				gmoved = true;
				continue;
			}
			gmoved |= req->nr_freed != freed;
			break;
		}
		moved |= gmoved;
		if (list_empty(&g->reqs)) {
			ss_group_check(g);	/* off the lists, or freed */
			continue;
		}
		top = waiters || g->released ? SS_LEVEL_RELEASED : SS_LEVELS - 1;
		*released |= !!g->released;
		g->level = gmoved ? 0 : min(l + 1, top);
		list_move_tail(&g->node, &next[g->level]);
	}
	return moved;
}

static void ss_reaper_fn(struct work_struct *work)
{
	/* The work item never runs concurrently with itself: no lock. */
	static unsigned int still, kick_at = SS_KICK_FIRST;
	static unsigned long last_kick;
	struct list_head next[SS_LEVELS];
	bool wanted = xchg(&ss_wanted, false), released = false, moved = false;
	bool stale, kick = false;
	bool waiters = atomic_read(&ss_waiters);
	unsigned long now = jiffies, delay = MAX_JIFFY_OFFSET;
	struct ss_req *req, *tmp;
	LIST_HEAD(idle);
	unsigned int l;

	for (l = 0; l < SS_LEVELS; l++)
		INIT_LIST_HEAD(&next[l]);
	spin_lock(&ss_inflight_lock);
	for (l = 0; l < SS_LEVELS; l++) {
		if (!wanted && time_before(now, ss_due[l]))
			continue;
		ss_due[l] = now + (1UL << l);
		moved |= ss_reap_level(l, next, &idle, waiters, &released);
	}
	for (l = 0; l < SS_LEVELS; l++) {
		list_splice_tail(&next[l], &ss_watch[l]);
		if (!list_empty(&ss_watch[l]))
			delay = min(delay, time_after(ss_due[l], now) ?
				    ss_due[l] - now : 1UL);
	}
	stale = !list_empty(&ss_watch[SS_LEVELS - 1]);
	spin_unlock(&ss_inflight_lock);

	/* Soon for someone waiting: for memory, or for RELEASED. */
	if (moved || !(waiters || released)) {
		still = 0;
		kick_at = SS_KICK_FIRST;
	} else if (++still >= kick_at) {
		still = 0;
		kick_at = min_t(unsigned int, 2 * kick_at, HZ);
		kick = true;
	}
	/* Else pages nothing moved for a while: once a second at most. */
	if (kick || (stale && time_after_eq(now, last_kick + HZ))) {
		last_kick = now;
		ss_rx_kick();
	}

	list_for_each_entry_safe(req, tmp, &idle, inflight) {
		list_del_init(&req->inflight);
		ss_req_release(req);
	}
	if (delay != MAX_JIFFY_OFFSET)
		queue_delayed_work(stablesend_wq, &ss_reaper, delay);
}

void ss_reaper_init(void)
{
	unsigned int l;

	for (l = 0; l < SS_LEVELS; l++) {
		INIT_LIST_HEAD(&ss_watch[l]);
		ss_due[l] = jiffies;
	}
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
	ss_user_detach(ctx);
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
