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
 * moves.  Requests are grouped by socket, oldest first, and a look at a
 * group stops at the first request with pages out; a group whose pages
 * keep coming back is looked at every tick, one where nothing moved twice
 * as rarely each time, down to about twice a second (RELEASED asked for:
 * every SS_LEVEL_RELEASED ticks at least; someone waiting for memory:
 * every tick).
 * Requests parked on a full socket with nothing sent cost nothing.  A
 * submitter that starts waiting for memory has every group looked at on
 * the next tick.  When pages someone waits for do not come back (a
 * RELEASED record; memory, by a submitter of their user, blocking or
 * polling after EAGAIN; the module, once their open is closed) the reaper
 * kicks receive processing on the housekeeping CPUs (see rxkick.c): per
 * socket SS_KICK_FIRST ticks into the stall, then at doubling gaps up to
 * a second (pages a kick freed do not end the stall: a receiver still
 * reading gets few kicks, not one every other tick), and at most
 * SS_USER_KICKS a second for one user's pages;
 * once the kicks have run it looks at the kicked groups again at once.
 * Pages nobody waits for are never kicked for: they come back with the
 * CPU's next receive processing, or when someone starts to wait.  Nor are
 * pages a TCP connection still holds in its own queue, unsent or
 * unacknowledged, where no kick reaches (ss_sock_holds()).
 */
#include <linux/cred.h>
#include <linux/eventfd.h>
#include <linux/hashtable.h>
#include <linux/hrtimer.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "ss.h"

/* Level L is looked at every 2^L ticks; the last about twice a second. */
#define SS_LEVELS		(ilog2(HZ) + 1)
#define SS_LEVEL_RELEASED	4
/* Ticks into a stall before a group's first kick; doubles to HZ. */
#define SS_KICK_FIRST		1

/*
 * The requests one socket took bytes of, oldest first.  A socket mostly
 * gives pages back in order, so a pass looks at a group's oldest requests
 * until one still has pages out (past it, a few more, when someone waits):
 * the cost follows the sockets with pages out, not the requests.  A group
 * holds its socket's struct sock, so no other socket can take its key; it
 * lives while a FIFO of the socket does or it has requests, and the
 * socket's next FIFO takes it over (a FIFO lives only while requests wait).
 */
struct ss_group {
	struct hlist_node hash;		/* on ss_groups, by @sk */
	struct sock *sk;		/* referenced */
	struct list_head reqs;		/* ss_req.inflight */
	struct list_head node;		/* on ss_watch[level], or a free list */
	unsigned int level;
	unsigned int released;		/* requests on @reqs with wants_pages */
	unsigned long moved_at;		/* jiffies of its last progress */
	unsigned long kicked_at;	/* of its stall's last kick */
	unsigned long kick_gap;		/* ticks from that to the next */
	unsigned int resume;		/* kicked: 1 + its level if that freed nothing */
	bool sock_gone;			/* no FIFO owns it */
};

static DEFINE_HASHTABLE(ss_groups, 8);

/* Groups by level, when each level is due next; all under the lock. */
static struct list_head ss_watch[SS_LEVELS];
static unsigned long ss_due[SS_LEVELS];
static DEFINE_SPINLOCK(ss_inflight_lock);
/* Someone began to wait for memory: look at everything on the next pass. */
static bool ss_wanted;
static unsigned long ss_wanted_at;
/* Kicks have run: look at level 0, where the kicked groups are, at once. */
static bool ss_recheck;
static unsigned long ss_recheck_at;
/* Submitters waiting for memory now: kicks are for them. */
static atomic_t ss_waiters;
/* When a non-blocking submitter last got EAGAIN: it waits too, in poll(). */
static unsigned long ss_eagain_at;
static void ss_reaper_fn(struct work_struct *work);
static DECLARE_WORK(ss_reaper, ss_reaper_fn);
/*
 * The reaper's clock.  Not a delayed work: the timer wheel rounds a delay
 * up by one tick (calc_index()), so "every tick" would be every other one,
 * and each RELEASED record a tick or two later than it need be.
 */
static struct hrtimer ss_reaper_timer;
static unsigned long ss_reaper_due;	/* its expiry, in jiffies */
static DEFINE_SPINLOCK(ss_reaper_clock_lock);	/* arming it */

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
		ss_user_records_uncharge(ctx, 1);
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
	if (req->ring)	/* unless the ring's end already posted it */
		ss_uring_complete(req, req->res);
	ss_req_put(req);
}

/*
 * Someone waits for @req's pages: a RELEASED record, a ring's CQE that
 * io_uring's cancel has not taken, or the module, once the open is closed.
 * Under ss_inflight_lock, which orders it after a cancel's xchg() of
 * req->ucmd (ss_inflight_unwant()) and a close's ss_inflight_closed().
 */
static bool ss_wants_release(const struct ss_req *req)
{
	return req->cqe_released || READ_ONCE(req->ctx->closed) ||
	       (READ_ONCE(req->ucmd) && (req->flags & STABLESEND_REQ_NOTIFY_RELEASE));
}

/* Take @req off its group, if on one.  Under ss_inflight_lock. */
static void ss_group_del(struct ss_req *req)
{
	struct ss_group *g = req->group;

	if (!g)
		return;
	list_del_init(&req->inflight);
	list_del_init(&req->ctx_inflight);
	req->group = NULL;
	if (req->wants_pages)
		g->released--;
	req->wants_pages = false;
}

/*
 * @g may have lost its last request: off the lists then, and when no FIFO
 * owns it either, onto @dead for ss_group_free() once the lock is dropped.
 * Under ss_inflight_lock.
 */
static void ss_group_check(struct ss_group *g, struct list_head *dead)
{
	if (!g || !list_empty(&g->reqs))
		return;
	list_del_init(&g->node);
	if (g->sock_gone) {
		hash_del(&g->hash);
		list_add(&g->node, dead);
	}
}

static void ss_group_free(struct list_head *dead)
{
	struct ss_group *g, *tmp;

	list_for_each_entry_safe(g, tmp, dead, node) {
		sock_put(g->sk);
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

static enum hrtimer_restart ss_reaper_timer_fn(struct hrtimer *t)
{
	queue_work(stablesend_wq, &ss_reaper);
	return HRTIMER_NORESTART;
}

/*
 * A pass @ticks ticks from now (0: at once), unless one is due sooner:
 * a pass already due is never pushed back.
 */
static void ss_reaper_after(unsigned long ticks)
{
	unsigned long flags, due;
	ktime_t at;

	if (!ticks) {
		queue_work(stablesend_wq, &ss_reaper);
		return;
	}
	due = jiffies + ticks;
	/* Mostly armed already, for as soon (racy: looked at again below). */
	if (hrtimer_is_queued(&ss_reaper_timer) &&
	    !time_after(READ_ONCE(ss_reaper_due), due))
		return;
	/* A little past the tick, so that the pass finds jiffies moved on. */
	at = ktime_add_ns(ktime_get(), (u64)ticks * TICK_NSEC + TICK_NSEC / 8);
	spin_lock_irqsave(&ss_reaper_clock_lock, flags);
	if (!hrtimer_is_queued(&ss_reaper_timer) ||
	    ktime_before(at, hrtimer_get_expires(&ss_reaper_timer))) {
		WRITE_ONCE(ss_reaper_due, due);
		/* A little slack, for the timer to share a wakeup. */
		hrtimer_start_range_ns(&ss_reaper_timer, at, TICK_NSEC / 4,
				       HRTIMER_MODE_ABS);
	}
	spin_unlock_irqrestore(&ss_reaper_clock_lock, flags);
}

/* A pass within a tick. */
static void ss_reaper_soon(void)
{
	/* Queued to run now: it will look. */
	if (work_pending(&ss_reaper))
		return;
	ss_reaper_after(1);
}

/* The socket's group that no FIFO owns, now owned.  Under ss_inflight_lock. */
static struct ss_group *ss_group_take(struct sock *sk)
{
	struct ss_group *g;

	lockdep_assert_held(&ss_inflight_lock);
	hash_for_each_possible(ss_groups, g, hash, (unsigned long)sk) {
		if (g->sk == sk && g->sock_gone) {
			g->sock_gone = false;
			return g;
		}
	}
	return NULL;
}

/**
 * ss_group_get - the release group of a new FIFO of socket @sk
 * @sk:		the socket
 *
 * The socket's earlier group if it still has requests, else a new one.
 *
 * Return: the group, or NULL.
 */
struct ss_group *ss_group_get(struct sock *sk)
{
	struct ss_group *g, *fresh;

	/* Mostly the last FIFO's group is still there, with its pages. */
	spin_lock(&ss_inflight_lock);
	g = ss_group_take(sk);
	spin_unlock(&ss_inflight_lock);
	if (g)
		return g;
	fresh = kzalloc(sizeof(*fresh), SS_GFP);
	spin_lock(&ss_inflight_lock);
	g = ss_group_take(sk);
	if (g)
		goto out;
	g = fresh;
	fresh = NULL;
	if (g) {
		sock_hold(sk);
		g->sk = sk;
		INIT_LIST_HEAD(&g->reqs);
		INIT_LIST_HEAD(&g->node);
		hash_add(ss_groups, &g->hash, (unsigned long)sk);
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
	LIST_HEAD(dead);

	spin_lock(&ss_inflight_lock);
	g->sock_gone = true;
	ss_group_check(g, &dead);
	spin_unlock(&ss_inflight_lock);
	ss_group_free(&dead);
}

/* Watch @g from the next tick on.  Under ss_inflight_lock. */
static void ss_group_watch(struct ss_group *g)
{
	g->level = 0;
	g->moved_at = jiffies;
	g->kicked_at = g->moved_at - SS_KICK_FIRST;
	g->kick_gap = SS_KICK_FIRST;
	g->resume = 0;
	list_move_tail(&g->node, &ss_watch[0]);
}

/* @req's pages may come back from now on.  Under ss_inflight_lock. */
static void ss_group_add(struct ss_req *req, struct ss_group *g)
{
	req->group = g;
	req->wants_pages = ss_wants_release(req);
	if (req->wants_pages)
		g->released++;
	list_add_tail(&req->inflight, &g->reqs);
	/* After the close, marked already (ss_inflight_closed()). */
	if (!READ_ONCE(req->ctx->closed))
		list_add_tail(&req->ctx_inflight, &req->ctx->inflight);
	if (list_empty(&g->node))
		ss_group_watch(g);
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
	if (!req->group && !req->finished)
		ss_group_add(req, g);
	spin_unlock(&ss_inflight_lock);
	ss_reaper_soon();
}

/**
 * ss_inflight_unwant - nobody waits for @req's pages any more
 * @req:	an io_uring command's request whose CQE io_uring's cancel took
 *
 * From now on its pages are no reason to kick receive processing, unless
 * its open is closed.  Called after the cancel cleared req->ucmd (a later
 * ss_group_add() does not count the request either, but for a closed
 * open), not under ctx->lock (lock order).
 */
void ss_inflight_unwant(struct ss_req *req)
{
	if (!(req->flags & STABLESEND_REQ_NOTIFY_RELEASE))
		return;
	spin_lock(&ss_inflight_lock);
	if (req->wants_pages && !READ_ONCE(req->ctx->closed)) {
		req->group->released--;
		req->wants_pages = false;
	}
	spin_unlock(&ss_inflight_lock);
}

/* Requests ss_inflight_closed() marks before it lets others at the lock. */
#define SS_CLOSE_BATCH	256

/**
 * ss_inflight_closed - the module waits for the pages of a closed open
 * @ctx:	the open, with ctx->closed set
 *
 * Its requests whose pages are out count from now on as if they had asked
 * for RELEASED, wherever they are in their socket's group (behind another
 * open's request too): their groups are looked at on the next tick, and
 * kicked for.  The closer pays, in proportion to its own requests, in
 * batches.  Requests that reach a group later are marked there.
 */
void ss_inflight_closed(struct ss_ctx *ctx)
{
	unsigned int n = 0, marked = 0;
	struct ss_group *g;
	struct ss_req *req;

	spin_lock(&ss_inflight_lock);
	while ((req = list_first_entry_or_null(&ctx->inflight, struct ss_req,
					       ctx_inflight))) {
		list_del_init(&req->ctx_inflight);
		g = req->group;
		if (!req->wants_pages) {
			req->wants_pages = true;
			g->released++;
			marked++;
			if (g->level) {
				g->level = 0;
				list_move_tail(&g->node, &ss_watch[0]);
			}
		}
		if (!(++n % SS_CLOSE_BATCH) && !list_empty(&ctx->inflight)) {
			spin_unlock(&ss_inflight_lock);
			cond_resched();
			spin_lock(&ss_inflight_lock);
		}
	}
	spin_unlock(&ss_inflight_lock);
	if (marked)
		ss_reaper_soon();
}

/**
 * ss_reaper_wait - a submitter starts (@delta 1) or stops (-1) waiting
 * @delta:	1 or -1
 *
 * A start has every group looked at on the next pass, at most once a
 * tick.  While anyone waits, no group is looked at more rarely than every
 * SS_LEVEL_RELEASED ticks, past its oldest request too, and the
 * housekeeping CPUs are kicked when nothing moves.
 */
void ss_reaper_wait(int delta)
{
	unsigned long now = jiffies;

	atomic_add(delta, &ss_waiters);
	if (delta > 0 && READ_ONCE(ss_wanted_at) != now) {
		WRITE_ONCE(ss_wanted_at, now);
		WRITE_ONCE(ss_wanted, true);
		ss_reaper_after(0);
	}
}

/**
 * ss_reaper_eagain - a non-blocking submitter found no memory
 *
 * It will poll for room, unseen: for a second it counts as a waiter.
 */
void ss_reaper_eagain(void)
{
	unsigned long now = jiffies;

	if (READ_ONCE(ss_eagain_at) != now) {
		WRITE_ONCE(ss_eagain_at, now);
		ss_reaper_soon();
	}
}

/**
 * ss_req_finish - a request is off its socket's FIFO for good
 * @req:	the request; the caller has unlinked it from the FIFO
 * @res:	bytes sent, or -errno
 *
 * Takes over the FIFO's reference: afterwards the caller may touch @req
 * only if it holds a reference of its own.
 */
void ss_req_finish(struct ss_req *req, s64 res)
{
	bool copied = req->copied && req->sent;
	struct ss_sock *ss = req->sock;	/* before the reaper may free @req */
	struct ss_ctx *ctx = req->ctx;
	bool unsent = false;
	struct ss_group *g;
	LIST_HEAD(dead);
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
		unsent = true;
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
	if (unsent)
		ss_user_records_uncharge(ctx, 1);
	atomic64_add(req->sent, &stablesend_stats[SS_BYTES_SENT]);
	if (res < 0)
		atomic64_inc(&stablesend_stats[SS_ERRORS]);
	if (copied)
		atomic64_inc(&stablesend_stats[SS_COPIED]);

	if (req->ring) {
		/* Its CQE; with RELEASED asked for, once the pages are back. */
		if (!(req->flags & STABLESEND_REQ_NOTIFY_RELEASE))
			ss_uring_complete(req, res);
	} else if (!req->sync) {
		ss_post(req, &req->cqe_sent, res, STABLESEND_CQE_SENT |
			(copied ? STABLESEND_CQE_COPIED : 0));
	}

	spin_lock(&ss_inflight_lock);
	req->finished = true;
	g = req->group;
	idle = ss_req_reap(req);
	if (idle) {
		ss_group_check(g, &dead);
	} else if (!g) {
		/* Pages held although nothing was sent (a transient reference). */
		ss_group_add(req, ss_sock_group(req->sock));
	}
	spin_unlock(&ss_inflight_lock);
	ss_group_free(&dead);
	/*
	 * Not idle, @req is the reaper's now (it frees it once its pages are
	 * back) and may be gone: only its socket's reference is ours to drop,
	 * the FIFO's (task work may still hold one of its own).
	 */
	ss_sock_put(ss);
	if (idle)
		ss_req_release(req);
	else
		ss_reaper_soon();
}

/* Looks one pass takes at most (under the lock); the rest wait a tick. */
#define SS_PASS_BUDGET	4096
/* Requests a pass looks at past a group's first busy one when someone waits. */
#define SS_PAST_BUSY	64

struct ss_pass {
	struct list_head next[SS_LEVELS];	/* groups by their new level */
	struct list_head idle;			/* requests to release */
	struct list_head dead;			/* groups to free */
	unsigned long now;
	int budget;
	bool waiters;
	bool wanted;
	bool moved;
	bool kick;		/* a user's stalled pages are due a kick */
	bool kicks_on;		/* ss_rx_kick_enabled() */
};

/*
 * Can a kick free pages of @req's group: not while its TCP connection
 * still holds them in its own queue, unacknowledged (or unsent).  For
 * memory, @req is the group's oldest request, and its next page to come
 * back is held while that page's first byte is; for RELEASED, the whole
 * request is held while its last byte is.  (Acknowledged bytes may still
 * sit unread in the peer's receive queue, which a kick cannot tell from a
 * defer list.)  A byte is held while it lies in [snd_una, write_seq):
 * never after the connection went past it, however far.  Racy reads,
 * looked at again on the next pass; the group holds @sk, and @req's
 * freed_bytes is under ss_inflight_lock, which the caller holds.
 */
static bool ss_sock_holds(struct sock *sk, const struct ss_req *req,
			  bool memory)
{
	u32 una, nxt, seq;

	if (!req->tcp || !READ_ONCE(req->sent) ||
	    !((1 << READ_ONCE(sk->sk_state)) &
	      (TCPF_ESTABLISHED | TCPF_CLOSE_WAIT | TCPF_FIN_WAIT1 |
	       TCPF_CLOSING | TCPF_LAST_ACK)))
		return false;
	una = READ_ONCE(tcp_sk(sk)->snd_una);
	nxt = READ_ONCE(tcp_sk(sk)->write_seq);
	if (una == nxt)
		return false;
	if (memory)
		seq = req->start_seq + (u32)req->freed_bytes;
	else
		seq = READ_ONCE(req->end_seq) - 1;
	return between(seq, una, nxt - 1);
}

/*
 * @g's pages did not move.  A kick is due when someone waits for them: a
 * request of it asked for RELEASED or its open is closed (wants_pages), a
 * submitter somewhere waits for memory (blocked, or for a second after
 * EAGAIN), or its oldest request's user is short of memory.
 * SS_KICK_FIRST ticks into the stall, then at doubling gaps up to a
 * second, within the rate of the user of @wanted (the first request with
 * wants_pages the pass looked at) or else of the oldest request; free
 * when another group's kick is made in this pass anyway.  Looks at no
 * request the pass has not looked at.  Under ss_inflight_lock.
 */
static bool ss_group_kick_due(struct ss_group *g, struct ss_pass *p,
			      struct ss_req *wanted)
{
	struct ss_req *first = list_first_entry(&g->reqs, struct ss_req, inflight);
	bool memory;

	if (p->now - g->moved_at < g->kick_gap ||
	    p->now - g->kicked_at < g->kick_gap)
		return false;
	memory = p->waiters || ss_user_wants_pages(first->ctx);
	if (!g->released && !memory)
		return false;
	if (ss_sock_holds(g->sk, memory ? first : wanted ?: first, memory))
		return false;
	if (!p->kick && !ss_user_kick_take((wanted ?: first)->ctx, p->now))
		return false;
	g->kicked_at = p->now;
	g->kick_gap = min_t(unsigned long, 2 * g->kick_gap, HZ);
	return true;
}

/*
 * Look at the groups of level @l: from each one's oldest request on, give
 * back what came back, until a request still has pages out (or, when
 * someone waits for memory or for RELEASED, SS_PAST_BUSY more).  A group
 * that moved goes to level 0, one that did not a level up; one kicked goes
 * to level 0 until the kicks have run, and back up if they freed nothing.
 * Under ss_inflight_lock.  Returns false when the budget ran out first.
 */
static bool ss_reap_level(unsigned int l, struct ss_pass *p)
{
	struct ss_group *g, *gtmp;
	struct ss_req *req, *tmp;

	list_for_each_entry_safe(g, gtmp, &ss_watch[l], node) {
		bool waited = p->waiters || g->released, moved = false;
		struct ss_req *wanted = NULL;
		bool kicked = false;
		unsigned int past = waited || p->wanted ? SS_PAST_BUSY : 0, top;

		if (p->budget <= 0)
			return false;
		list_for_each_entry_safe(req, tmp, &g->reqs, inflight) {
			unsigned int freed = req->nr_freed;

			p->budget--;
			if (ss_req_reap(req)) {
				list_add_tail(&req->inflight, &p->idle);
				moved = true;
				continue;
			}
			moved |= req->nr_freed != freed;
			if (!wanted && req->wants_pages)
				wanted = req;
			if (!past--)
				break;
		}
		if (list_empty(&g->reqs)) {
			p->moved = true;
			ss_group_check(g, &p->dead);
			continue;
		}
		if (moved) {
			p->moved = true;
			g->moved_at = p->now;
			/*
			 * What our kick freed: the stall goes on, its gaps
			 * doubling, but only while kicks free nothing do they
			 * grow past a user's rate.
			 */
			g->kick_gap = g->resume ? min(g->kick_gap, SS_KICK_TICKS) :
						  SS_KICK_FIRST;
			g->resume = 0;
		} else if (ss_group_kick_due(g, p, wanted)) {
			p->kick = true;
			kicked = p->kicks_on;
		}
		/* Someone waits for memory: every tick, as memory is wanted now. */
		top = p->waiters ? 0 : g->released ? SS_LEVEL_RELEASED :
						     SS_LEVELS - 1;
		if (moved) {
			g->level = 0;
		} else if (kicked) {
			/* Looked at again as soon as the kicks have run. */
			g->resume = min(l + 1, top) + 1;
			g->level = 0;
		} else if (g->resume) {
			/* The kicks freed nothing of it: where it was going. */
			g->level = min(g->resume - 1, top);
			g->resume = 0;
		} else {
			g->level = min(l + 1, top);
		}
		list_move_tail(&g->node, &p->next[g->level]);
	}
	return true;
}

static void ss_reaper_fn(struct work_struct *work)
{
	unsigned long delay = MAX_JIFFY_OFFSET;
	/* The level a pass starts at: the one the last ran out of budget in. */
	static unsigned int first;
	struct ss_pass p = {
		.now = jiffies,
		.budget = SS_PASS_BUDGET,
		.waiters = atomic_read(&ss_waiters) ||
			   jiffies - READ_ONCE(ss_eagain_at) < HZ,
		.wanted = xchg(&ss_wanted, false),
		.kicks_on = ss_rx_kick_enabled(),
	};
	bool recheck = xchg(&ss_recheck, false);
	struct ss_req *req, *tmp;
	unsigned int i, l;

	INIT_LIST_HEAD(&p.idle);
	INIT_LIST_HEAD(&p.dead);
	for (l = 0; l < SS_LEVELS; l++)
		INIT_LIST_HEAD(&p.next[l]);
	spin_lock(&ss_inflight_lock);
	for (i = 0; i < SS_LEVELS; i++) {
		l = (first + i) % SS_LEVELS;
		/* After kicks: level 0 only (the kicked groups), due or not. */
		if (!p.wanted &&
		    (recheck ? l != 0 : time_before(p.now, ss_due[l])))
			continue;
		if (!ss_reap_level(l, &p)) {
			/* The rest next tick, before the other levels. */
			ss_due[l] = p.now;
			first = l;
			break;
		}
		ss_due[l] = p.now + (1UL << l);
	}
	for (l = 0; l < SS_LEVELS; l++) {
		list_splice_tail(&p.next[l], &ss_watch[l]);
		if (!list_empty(&ss_watch[l]))
			delay = min(delay, time_after(ss_due[l], p.now) ?
				    ss_due[l] - p.now : 1UL);
	}
	spin_unlock(&ss_inflight_lock);
	atomic64_add(SS_PASS_BUDGET - p.budget, &stablesend_stats[SS_REAP_CHECKS]);
	if (p.kick)
		ss_rx_kick();

	ss_group_free(&p.dead);
	list_for_each_entry_safe(req, tmp, &p.idle, inflight) {
		list_del_init(&req->inflight);
		ss_req_release(req);
	}
	if (delay != MAX_JIFFY_OFFSET)
		ss_reaper_after(delay);
}

/**
 * ss_reaper_kicked - the kicks of ss_rx_kick() have run
 *
 * What they freed is looked at now, at most once a tick: a pass over
 * level 0, where the kicked groups are.
 */
void ss_reaper_kicked(void)
{
	unsigned long now = jiffies;

	if (READ_ONCE(ss_recheck_at) == now)
		return;
	WRITE_ONCE(ss_recheck_at, now);
	WRITE_ONCE(ss_recheck, true);
	ss_reaper_after(0);
}

void ss_reaper_init(void)
{
	unsigned int l;

	for (l = 0; l < SS_LEVELS; l++) {
		INIT_LIST_HEAD(&ss_watch[l]);
		ss_due[l] = jiffies;
	}
	ss_eagain_at = jiffies - HZ;
	ss_wanted_at = jiffies - 1;
	ss_recheck_at = jiffies - 1;
	hrtimer_setup(&ss_reaper_timer, ss_reaper_timer_fn, CLOCK_MONOTONIC,
		      HRTIMER_MODE_ABS);
}

/*
 * With no group left: a pass re-arms the clock only while groups are
 * watched, and a kick only while it has groups to look at.
 */
void ss_reaper_stop(void)
{
	hrtimer_cancel(&ss_reaper_timer);
	cancel_work_sync(&ss_reaper);
	hrtimer_cancel(&ss_reaper_timer);
	cancel_work_sync(&ss_reaper);
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
	ss_user_records_uncharge(ctx, req->cq_charged);
	kfree(req->cqe_sent);
	kfree(req->cqe_released);
	put_cred(req->cred);
	put_task_struct(req->task);
	put_pid(req->tgid);
	ss_req_free_bvec(req);
	kfree(req);
	ss_ctx_put(ctx);
}

static void ss_ctx_free(struct work_struct *work)
{
	struct ss_ctx *ctx = container_of(work, struct ss_ctx, free_work);

	WARN_ON_ONCE(!list_empty(&ctx->inflight));
	ss_pool_drain(ctx);
	ss_user_detach(ctx);
	if (ctx->evfd)
		eventfd_ctx_put(ctx->evfd);
	atomic64_dec(&stablesend_stats[SS_CONTEXTS]);
	ss_ctx_dealloc(ctx);
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
