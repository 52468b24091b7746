// SPDX-License-Identifier: GPL-2.0
/*
 * Snapshot memory: the pages the module owns, who holds them, and the bounds.
 *
 * Every pool page belongs to one open: reserved by one of its live requests
 * or idle on its pool.  Two bounds apply:
 * - per open (ctx->mem_limit): reservations plus pool.  A request reserves
 *   whole, or piecemeal while earlier requests drain (snapshot.c);
 * - per user (user_limit): the same, summed over every open of the user who
 *   opened the device (its real uid, as pipes count).  A request is charged
 *   whole to its user before it reserves anything of its open, so nothing is
 *   held while it waits for the user's memory, and two opens of one user
 *   cannot wait for each other.  Idle pools of the user's opens are given
 *   back before anyone waits.  CAP_SYS_RESOURCE goes beyond the bound.
 * Completion records are bounded the same two ways, without waiting: per
 * open (SS_CQ_MAX) and per user (user_records), each counting the records
 * reserved by live requests plus those queued unread (ENOBUFS beyond);
 * poll()'s EPOLLOUT waits for them as for memory.
 * An open's pages are charged to the memory cgroup of its opener, as a
 * socket's buffers are to its creator's (a pool page serves every thread
 * of the open in turn), and come from the NUMA node of the open.  A
 * shrinker gives idle pool pages back under memory pressure: a memory
 * cgroup's reclaim takes the pools of its own opens, global reclaim
 * everyone's.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/hashtable.h>
#include <linux/list_lru.h>
#include <linux/memcontrol.h>
#include <linux/mm.h>
#include <linux/moduleparam.h>
#include <linux/poll.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/seq_file.h>
#include <linux/shrinker.h>
#include <linux/slab.h>
#include <linux/swap.h>

#include "ss.h"

/* One user's opens. */
struct ss_user {
	struct hlist_node node;		/* on ss_users */
	kuid_t uid;
	unsigned int nr_ctx;		/* its opens, under ss_users_lock */
	spinlock_t lock;		/* @idle; taken before ctx->lock */
	struct list_head idle;		/* its opens with idle pages, by ctx->idle_node */
	atomic64_t held;		/* bytes: requests' charges plus pools */
	atomic64_t busy;		/* of which requests' charges */
	atomic_long_t records;		/* completion records: reserved plus queued */
	atomic_t returns;		/* bumped when @held may have room */
	atomic_t waiting;		/* submitters in the slow path's wait: a hint */
	wait_queue_head_t wait;		/* them */
	spinlock_t poll_lock;		/* @pollers */
	struct list_head pollers;	/* opens waiting for room, by ctx->poll_node */
	/* Receive-processing kicks for this user's pages (ss_user_wants_pages()) */
	atomic_t mem_waiters;		/* submitters waiting for any memory */
	bool starved;			/* found none without waiting, not charged since */
	unsigned long kick_tat;		/* its kick budget whole again: under ss_inflight_lock */
	atomic64_t kicks;		/* kicks made for its pages */
};

/*
 * Users with an open.  Lock order: ss_users_lock, user->lock, ctx->lock,
 * with ss_inflight_lock (completion.c) before user->lock; nothing
 * allocates or sleeps under any of them.  user->poll_lock nests under
 * ss_users_lock and ss_inflight_lock (never the other way), and no module
 * lock nests under it.  Under it an open's wait queue is woken:
 * the pollers' callbacks (epoll's, io_uring's, aio's, poll's) take their
 * own locks and the scheduler's, queue work or task work, never call into
 * the module (aio's completion defers the last fput()).
 */
static DEFINE_HASHTABLE(ss_users, 6);
static DEFINE_SPINLOCK(ss_users_lock);

static struct shrinker *ss_shrinker;

/*
 * The opens on their users' idle lists, by the memory cgroup and NUMA node
 * of the open (ss_ctx_alloc()), which are those of its pages, so that a
 * cgroup's reclaim on a node finds its own.  An open is on it exactly
 * while it is on its user's idle list, which is while its pool has pages
 * (but for the moment between emptying it and taking it off: see
 * ss_idle_emptied()).  Both lists change under user->lock and ctx->lock,
 * taken before the list's lock.
 */
static struct list_lru ss_idle_lru;
static bool ss_idle_lru_ready;		/* initialised: the shrinker may walk it */
static struct kmem_cache *ss_ctx_cache;
/* Opens one count or scan of the shrinker looks at, at most. */
#define SS_SHRINK_WALK		128

/*
 * Free pages already taken out of the accounting (and of pool_bytes) under
 * the lock that made them nobody's: until then no open could allocate in
 * their place, so pool_bytes never exceeds what the limits allow.
 */
static void ss_free_list(struct list_head *pages)
{
	struct page *page, *tmp;

	list_for_each_entry_safe(page, tmp, pages, lru) {
		list_del(&page->lru);
		__free_pages(page, compound_order(page));
	}
}

/*
 * Under user->poll_lock, @ctx on its user's list: if a request fits now,
 * take it off and wake all its pollers (an exclusive one, EPOLLEXCLUSIVE,
 * may not be the one to use the room).  io_uring and aio take EPOLLOUT
 * from the wake-up's key without polling again, so it is only sent with
 * room.
 */
static void ss_room_wake(struct ss_ctx *ctx)
{
	if (!ss_room(ctx))
		return;
	list_del_init(&ctx->poll_node);
	if (wq_has_sleeper(&ctx->cq_wait))
		__wake_up(&ctx->cq_wait, TASK_INTERRUPTIBLE, 0,
			  poll_to_key(EPOLLOUT | EPOLLWRNORM));
}

/*
 * The user's requests gave memory or completion records back, or a limit
 * changed: the opens on its list that have room now come off it, and
 * their pollers are woken.
 */
static void ss_user_wake(struct ss_user *u)
{
	struct ss_ctx *ctx, *tmp;

	/* The change before the look at the list: pairs with ss_room_poll(). */
	smp_mb();
	if (list_empty_careful(&u->pollers))
		return;
	spin_lock(&u->poll_lock);
	list_for_each_entry_safe(ctx, tmp, &u->pollers, poll_node)
		ss_room_wake(ctx);
	spin_unlock(&u->poll_lock);
}

/*
 * @held fell (or @busy, or the limit changed): wake the submitters waiting
 * for the user's memory.
 */
static void ss_user_returned(struct ss_user *u)
{
	/* Fully ordered: a waiter's next acquire of it sees the change. */
	atomic_inc_return(&u->returns);
	/* After it, as wq_has_sleeper(): the change before the look. */
	if (waitqueue_active(&u->wait))
		wake_up_interruptible_all(&u->wait);
}

/* Idle pool pages were freed: no request's charge, so no poller's room. */
static void ss_user_uncharge(struct ss_user *u, u64 bytes)
{
	if (!bytes)
		return;
	atomic64_sub(bytes, &u->held);
	ss_user_returned(u);
}

static bool ss_user_try_charge(struct ss_user *u, u64 bytes, u64 limit)
{
	s64 held = atomic64_read(&u->held);

	do {
		if (held + bytes > limit)
			return false;
	} while (!atomic64_try_cmpxchg(&u->held, &held, held + bytes));
	return true;
}

/*
 * The open's pool grew (@bytes > 0) or shrank by @bytes: the counters that
 * follow it.  Called with ctx->lock held, so they never go below zero.
 */
static void ss_pool_account(struct ss_ctx *ctx, s64 bytes)
{
	ctx->pooled += bytes;
	atomic64_add(bytes, &stablesend_stats[SS_POOL_IDLE_BYTES]);
}

/*
 * Move idle pool pages of @ctx to @out until @want bytes or the pool is
 * empty; returns the bytes moved.  Called with ctx->lock held; the caller
 * takes the open off its user's idle list once the pool is empty.
 */
static u64 ss_pool_take(struct ss_ctx *ctx, u64 want, struct list_head *out)
{
	u64 got = 0;
	int order;

	for (order = 0; order <= SS_CHUNK_ORDER && got < want; order++) {
		while (got < want && !list_empty(&ctx->pool[order])) {
			list_move(ctx->pool[order].next, out);
			got += PAGE_SIZE << order;
		}
	}
	ss_pool_account(ctx, -(s64)got);
	atomic64_sub(got, &stablesend_stats[SS_POOL_BYTES]);
	return got;
}

/* The open has idle pages: on its user's idle list and ss_idle_lru. */
static void ss_idle_add(struct ss_ctx *ctx)
{
	if (list_empty(&ctx->idle_node)) {
		list_add_tail(&ctx->idle_node, &ctx->user->idle);
		list_lru_add_obj(&ss_idle_lru, &ctx->lru_node);
	}
}

/* ... or not any more.  Both with user->lock and ctx->lock held. */
static void ss_idle_del(struct ss_ctx *ctx)
{
	if (!list_empty(&ctx->idle_node)) {
		list_del_init(&ctx->idle_node);
		list_lru_del_obj(&ss_idle_lru, &ctx->lru_node);
	}
}

/* ss_get_page() emptied the pool under ctx->lock alone: off the lists. */
static void ss_idle_emptied(struct ss_ctx *ctx)
{
	struct ss_user *u = ctx->user;

	spin_lock(&u->lock);
	spin_lock(&ctx->lock);
	if (!ctx->pooled)	/* unless it has pages again */
		ss_idle_del(ctx);
	spin_unlock(&ctx->lock);
	spin_unlock(&u->lock);
}

/*
 * Free idle pool pages of @u's opens, @want bytes or a little more, other
 * opens' before @own's.  An open is put on the idle list with pages and
 * taken off when a walk finds it empty, so a walk is bounded by @want plus
 * the opens emptied since the last one.
 */
static void ss_user_trim(struct ss_user *u, struct ss_ctx *own, u64 want)
{
	struct ss_ctx *ctx, *tmp;
	LIST_HEAD(pages);
	u64 got = 0;
	int pass;

	spin_lock(&u->lock);
	for (pass = 0; pass < 2 && got < want; pass++) {
		list_for_each_entry_safe(ctx, tmp, &u->idle, idle_node) {
			if (pass ? ctx != own : ctx == own)
				continue;
			spin_lock(&ctx->lock);
			got += ss_pool_take(ctx, want - got, &pages);
			if (!ctx->pooled)
				ss_idle_del(ctx);
			spin_unlock(&ctx->lock);
			if (got >= want)
				break;
		}
	}
	spin_unlock(&u->lock);
	ss_free_list(&pages);
	ss_user_uncharge(u, got);
}

/*
 * After a wait for memory, a SEND goes back on the senders registry (see
 * ss_sender_pause()); a wait cut short restarts the call.
 */
static int ss_sender_back(struct ss_sender *sender, int err)
{
	if (err)
		return -ERESTARTSYS;
	return sender ? ss_sender_enter(sender) : 0;
}

/*
 * ss_user_reserve()'s slow path: @need did not fit under @u's @held.
 * Gives back idle pool pages of the user's opens if the requests leave
 * room for @need, else waits (or fails) until they do.  Returns 0 with
 * @need charged to @held, or -errno.
 */
static int ss_user_charge_slow(struct ss_ctx *ctx, u64 need, bool nonblock,
			       struct ss_sender *sender)
{
	struct ss_user *u = ctx->user;
	int seen, err;
	u64 limit;
	s64 held;

	for (;;) {
		seen = atomic_read_acquire(&u->returns);
		limit = READ_ONCE(stablesend_user_limit);
		if (need > limit)
			return -EMSGSIZE;	/* the bound was lowered */
		if (ss_user_try_charge(u, need, limit))
			return 0;
		/*
		 * Idle pages make room if the requests leave enough.  (One
		 * charged but not yet in @busy can make us trim for nothing.)
		 * Look again even if there was nothing to trim or the trim
		 * found none: a pool take lowers @held under the lock of the
		 * open it took from, without a word to us, and the trim took
		 * that lock after it (or user->lock after ss_idle_emptied()
		 * took the open off the idle list), found the page still
		 * pooled or stopped early, having freed (and said,
		 * ss_user_uncharge()) enough.
		 */
		if (atomic64_read(&u->busy) + need <= limit) {
			held = atomic64_read(&u->held);
			if (held + need > limit)
				ss_user_trim(u, ctx, held + need - limit);
			if (ss_user_try_charge(u, need, limit))
				return 0;
		}
		if (nonblock)
			return -EAGAIN;	/* ss_req_alloc() tells the reaper */
		err = ss_sender_pause(sender);
		if (err)
			return err;
		/*
		 * Pages that come back meanwhile are freed, not pooled.  One
		 * that misses the mark is pooled; its return still wakes us,
		 * and the next pass trims it.
		 */
		atomic_inc(&u->waiting);
		ss_user_waits(ctx, 1);
		err = wait_event_interruptible(u->wait,
					       atomic_read(&u->returns) != seen);
		ss_user_waits(ctx, -1);
		atomic_dec(&u->waiting);
		err = ss_sender_back(sender, err);
		if (err)
			return err;	/* nothing queued: restartable */
	}
}

/**
 * ss_user_reserve - charge a request's memory to the open's user
 * @ctx:	the open
 * @need:	bytes of pool pages the request needs
 * @nonblock:	fail with EAGAIN instead of waiting
 * @sender:	the caller's SEND registry entry, or NULL
 *
 * Called in the submitter's context, before anything of the open is
 * reserved.  Over the bound the opener's CAP_SYS_RESOURCE (at open) lets
 * it pass.
 */
int ss_user_reserve(struct ss_ctx *ctx, u64 need, bool nonblock,
		    struct ss_sender *sender)
{
	struct ss_user *u = ctx->user;
	int err;

	if (ctx->unbounded) {
		atomic64_add(need, &u->held);
	} else if (!ss_user_try_charge(u, need,
				       READ_ONCE(stablesend_user_limit))) {
		err = ss_user_charge_slow(ctx, need, nonblock, sender);
		if (err)
			return err;
	}
	/*
	 * What poll() sees (ss_room()).  One that looks before this line
	 * sees room the request has just taken: its resubmission is refused.
	 */
	atomic64_add(need, &u->busy);
	if (READ_ONCE(u->starved))
		WRITE_ONCE(u->starved, false);
	return 0;
}

/**
 * ss_mem_free_now - snapshot memory a request of @ctx may take without waiting
 * @ctx:	the open
 *
 * Under the open's limit and under its user's (idle pool pages counting
 * as free), in whole chunks: a request of that many bytes needs no more.
 */
u64 ss_mem_free_now(struct ss_ctx *ctx)
{
	u64 free = ss_free_under(READ_ONCE(ctx->mem_used),
				 READ_ONCE(ctx->mem_limit));

	if (!ctx->unbounded)
		free = min(free, ss_free_under(atomic64_read(&ctx->user->busy),
					       READ_ONCE(stablesend_user_limit)));
	return round_down(free, SS_CHUNK_SIZE);
}

/*
 * Whether @nr more records fit under the user's bound with @held held; an
 * opener with CAP_SYS_RESOURCE is not bound.
 */
static bool ss_user_records_fit(const struct ss_ctx *ctx, long held,
				unsigned int nr)
{
	return ctx->unbounded ||
	       (unsigned long)held + nr <= READ_ONCE(stablesend_user_records);
}

/**
 * ss_user_records_charge - count completion records against the open's user
 * @ctx:	the open reserving them
 * @nr:		records
 *
 * Never waits: records come back only when someone reads them.  Over the
 * bound the opener's CAP_SYS_RESOURCE lets them pass, counted still.
 *
 * Return: whether they were charged.
 */
bool ss_user_records_charge(struct ss_ctx *ctx, unsigned int nr)
{
	struct ss_user *u = ctx->user;
	long held;

	/* None (SEND, io_uring): not refused even over a bound lowered since. */
	if (!nr)
		return true;
	if (ctx->unbounded) {
		atomic_long_add(nr, &u->records);
		return true;
	}
	held = atomic_long_read(&u->records);
	do {
		if (!ss_user_records_fit(ctx, held, nr))
			return false;
	} while (!atomic_long_try_cmpxchg(&u->records, &held, held + nr));
	return true;
}

/*
 * @nr records charged by ss_user_records_charge() are freed (or never
 * made), and taken off the open's count before: pollers may have room.
 */
void ss_user_records_uncharge(struct ss_ctx *ctx, unsigned int nr)
{
	if (!nr)
		return;
	atomic_long_sub(nr, &ctx->user->records);
	ss_user_wake(ctx->user);
}

/*
 * What poll() wants free under @limit: the last request refused for
 * memory, and a chunk (or the whole limit, when smaller) at least; a
 * refused request larger than the limit (lowered since) is not waited for.
 */
static u64 ss_room_for(unsigned long want, u64 limit)
{
	u64 chunk = min_t(u64, SS_CHUNK_SIZE, limit);

	return want > chunk && want <= limit ? want : chunk;
}

/*
 * Memory for another request: what ss_room_for() says free under the
 * open's limit and under the user's, idle pool pages counting as free.
 */
static bool ss_room_mem(struct ss_ctx *ctx)
{
	u64 limit = READ_ONCE(stablesend_user_limit);
	u64 mem_limit = READ_ONCE(ctx->mem_limit);
	unsigned long want = READ_ONCE(ctx->room_want);

	if (ss_free_under(READ_ONCE(ctx->mem_used), mem_limit) <
	    ss_room_for(want, mem_limit))
		return false;
	return ctx->unbounded ||
	       ss_free_under(atomic64_read(&ctx->user->busy), limit) >=
	       ss_room_for(want, limit);
}

/*
 * Completion records, once a request of the open was refused them: as
 * many as it needed, under both bounds.  Not before: requests that take
 * none (SEND without RELEASED, io_uring commands) must not wait for them.
 */
static bool ss_room_records(struct ss_ctx *ctx)
{
	unsigned int want = READ_ONCE(ctx->records_want);

	if (!want)
		return true;
	return ss_cq_fits(ctx, want) &&
	       ss_user_records_fit(ctx, atomic_long_read(&ctx->user->records),
				   want);
}

/*
 * Room for another request, for poll(): its memory and its records.  Less
 * would have a level-triggered event loop spin on EAGAIN or ENOBUFS.
 */
bool ss_room(struct ss_ctx *ctx)
{
	return ss_room_records(ctx) && ss_room_mem(ctx);
}

/* Put @ctx on its user's list of opens waiting for room, if not on it. */
static void ss_room_list(struct ss_ctx *ctx)
{
	struct ss_user *u = ctx->user;

	if (!list_empty_careful(&ctx->poll_node))
		return;
	spin_lock(&u->poll_lock);
	if (list_empty(&ctx->poll_node) && !READ_ONCE(ctx->closed))
		list_add_tail(&ctx->poll_node, &u->pollers);
	spin_unlock(&u->poll_lock);
}

/*
 * @ctx's own wait changed (ss_room_refused(), ss_records_refused(),
 * ss_room_got(), ss_records_got()): it alone.
 */
static void ss_room_wake_one(struct ss_ctx *ctx)
{
	struct ss_user *u = ctx->user;

	/* The change before the look at the list: pairs with ss_room_poll(). */
	smp_mb();
	if (list_empty_careful(&ctx->poll_node))
		return;
	spin_lock(&u->poll_lock);
	if (!list_empty(&ctx->poll_node))
		ss_room_wake(ctx);
	spin_unlock(&u->poll_lock);
}

/**
 * ss_room_poll - poll() of @ctx for EPOLLOUT found no room
 * @ctx:	the open, its queue given to the poll table
 *
 * The open waits on its user's list: memory or completion records of any
 * open of the user's coming back (or user_limit or user_records changing)
 * wakes its pollers once a request fits, and takes it off.  So
 * the open has one wait queue (aio's IOCB_CMD_POLL takes no more).  As
 * with a socket's write space, a poller that is not polled again (io_uring's
 * multishot) is woken again only after someone found no room again: a
 * poll, or a request refused for memory or records.
 *
 * Return: whether there is room after all.
 */
bool ss_room_poll(struct ss_ctx *ctx)
{
	ss_room_list(ctx);
	/* The list, then the room: pairs with ss_user_wake(), ss_room_wake_one(). */
	smp_mb();
	if (ss_room(ctx))
		return true;
	if (!ss_room_mem(ctx))
		ss_user_starved(ctx);	/* it waits in poll(), for our pages */
	return false;
}

/**
 * ss_room_refused - a request was refused @need bytes (EAGAIN)
 * @ctx:	its open
 * @need:	bytes of pool pages it needs (at most the open's limit)
 *
 * poll() says EPOLLOUT once that much is free, until a request of the
 * open gets its memory; the open waits for it on its user's list.
 */
void ss_room_refused(struct ss_ctx *ctx, u64 need)
{
	WRITE_ONCE(ctx->room_want, need);
	ss_room_list(ctx);
	/* Memory that came back before it was on the list, or a smaller need. */
	ss_room_wake_one(ctx);
}

/**
 * ss_records_refused - a request was refused @nr completion records (ENOBUFS)
 * @ctx:	its open
 * @nr:		records it needs (one or two)
 *
 * As ss_room_refused(): poll() says EPOLLOUT once @nr are free, until a
 * request of the open gets its records (ss_records_got()).
 */
void ss_records_refused(struct ss_ctx *ctx, unsigned int nr)
{
	WRITE_ONCE(ctx->records_want, nr);
	ss_room_list(ctx);
	/* Records read before it was on the list. */
	ss_room_wake_one(ctx);
}

/**
 * ss_records_got - a request of @ctx got its completion records (one or two)
 * @ctx:	its open
 *
 * Ends the wait for refused records, as ss_room_got() for memory, whether
 * the request then gets its memory or not.
 */
void ss_records_got(struct ss_ctx *ctx)
{
	if (READ_ONCE(ctx->records_want) && xchg(&ctx->records_want, 0))
		ss_room_wake_one(ctx);
}

/**
 * ss_room_got - a request of @ctx got its memory (or waits for it)
 * @ctx:	its open
 *
 * Ends the wait for a refused size: the open is making progress, and a
 * refused request given up must not keep EPOLLOUT away (at worst a
 * resubmit of one too large for what is free is refused again).
 */
void ss_room_got(struct ss_ctx *ctx)
{
	if (READ_ONCE(ctx->room_want) && xchg(&ctx->room_want, 0))
		ss_room_wake_one(ctx);
}

/* At close, when no poller is left: off the user's list. */
void ss_room_unpoll(struct ss_ctx *ctx)
{
	struct ss_user *u = ctx->user;

	spin_lock(&u->poll_lock);
	list_del_init(&ctx->poll_node);
	spin_unlock(&u->poll_lock);
}

static bool ss_mem_fits(struct ss_ctx *ctx, u64 need)
{
	return READ_ONCE(ctx->mem_used) + need <= ctx->mem_limit;
}

/**
 * ss_reserve - reserve bytes of the open's memory
 * @ctx:	the open
 * @need:	bytes
 * @nonblock:	fail with EAGAIN instead of waiting
 * @sender:	the caller's SEND registry entry, or NULL
 *
 * The pool is left alone: the request takes its pages from it first, and
 * ss_get_page() trims what is left over before it allocates.
 */
int ss_reserve(struct ss_ctx *ctx, u64 need, bool nonblock,
	       struct ss_sender *sender)
{
	int err;

	spin_lock(&ctx->lock);
	while (!ss_mem_fits(ctx, need)) {
		spin_unlock(&ctx->lock);
		if (nonblock)
			return -EAGAIN;
		err = ss_sender_pause(sender);
		if (err)
			return err;
		ss_user_waits(ctx, 1);
		err = wait_event_interruptible(ctx->mem_wait,
					       ss_mem_fits(ctx, need));
		ss_user_waits(ctx, -1);
		err = ss_sender_back(sender, err);
		if (err)
			return err;	/* nothing queued: restartable */
		spin_lock(&ctx->lock);
	}
	ctx->mem_used += need;
	ctx->stats.mem_peak = max(ctx->stats.mem_peak, ctx->mem_used);
	spin_unlock(&ctx->lock);
	return 0;
}

/**
 * ss_get_page - a page of @order for a request whose reservation covers it
 * @ctx:	the request's open
 * @order:	0 to SS_CHUNK_ORDER
 *
 * From the pool when it has one, else freshly allocated.  Before
 * allocating, pooled pages of other orders go back to the page allocator
 * until reservations plus pool fit the limit again, so what the open holds
 * never exceeds it.  Reusing pages matters: a fresh one is also cleared
 * when init_on_alloc is on (Debian's default), a second pass over every
 * byte.
 */
struct page *ss_get_page(struct ss_ctx *ctx, unsigned int order)
{
	struct mem_cgroup *old;
	struct page *page;
	bool emptied;
	LIST_HEAD(trim);
	u64 over, got;
	gfp_t gfp;

	spin_lock(&ctx->lock);
	page = list_first_entry_or_null(&ctx->pool[order], struct page, lru);
	if (page) {
		list_del(&page->lru);
		ss_pool_account(ctx, -(s64)(PAGE_SIZE << order));
		/*
		 * The request's charge covers it from now on: the room pollers
		 * see (@busy) is the same.  Under the lock, so that a trim that
		 * misses the page sees @held without it (ss_user_charge_slow()).
		 */
		atomic64_sub(PAGE_SIZE << order, &ctx->user->held);
		emptied = !ctx->pooled;
		spin_unlock(&ctx->lock);
		if (emptied)
			ss_idle_emptied(ctx);
		return page;
	}
	/* Gone before the lock is dropped: no thread of the open counts on them. */
	over = ctx->mem_used + ctx->pooled;
	over = over > ctx->mem_limit ? over - ctx->mem_limit : 0;
	got = over ? ss_pool_take(ctx, over, &trim) : 0;
	emptied = got && !ctx->pooled;
	spin_unlock(&ctx->lock);
	ss_free_list(&trim);
	ss_user_uncharge(ctx->user, got);
	if (emptied)
		ss_idle_emptied(ctx);

	/*
	 * Fail instead of invoking the OOM killer when the cgroup is full: the
	 * submitter gets ENOMEM.  High orders give up early and fall back.
	 */
	gfp = order ? (SS_GFP & ~__GFP_RETRY_MAYFAIL) | __GFP_COMP | __GFP_NORETRY :
		      SS_GFP;
	old = set_active_memcg(ctx->memcg);
	page = alloc_pages_node(ctx->nid, gfp, order);
	if (!page && !order && READ_ONCE(ctx->pooled)) {
		/*
		 * The memory cgroup may be full of our own idle pages, which
		 * its reclaim may have left (it takes page cache first, and
		 * the shrinker skips a busy open): give them back.
		 */
		ss_pool_drain(ctx);
		page = alloc_pages_node(ctx->nid, gfp, order);
	}
	set_active_memcg(old);
	if (page)
		atomic64_add(PAGE_SIZE << order, &stablesend_stats[SS_POOL_BYTES]);
	else if (!order)
		ss_user_starved(ctx);	/* our pages parked in the stack may help */
	return page;
}

/**
 * ss_req_free_pages - give a request's pages back
 * @req:	the request
 * @end:	bvec entries up to this one are idle
 *
 * The pages go to the pool (to the page allocator once the open is closed,
 * or while someone waits for the user's memory), their reservation back
 * to the open and their charge to the user.
 *
 * Return: the bytes of the open's reservation given back.
 */
u64 ss_req_free_pages(struct ss_req *req, unsigned int end)
{
	struct ss_ctx *ctx = req->ctx;
	struct ss_user *u = ctx->user;
	u64 bytes = 0, ubytes, pooled = 0;
	LIST_HEAD(freed);
	unsigned int i;
	bool pool;

	spin_lock(&u->lock);
	spin_lock(&ctx->lock);
	for (i = req->nr_freed; i < end; i++) {
		bytes += PAGE_SIZE << compound_order(req->bvec[i].bv_page);
		if (i < req->nr_send)
			req->freed_bytes += req->bvec[i].bv_len;
	}
	ubytes = bytes;
	/* The last pages take along what was reserved but never filled. */
	if (end == req->nr_pages) {
		bytes = req->charged;
		ubytes = req->user_charged;
	}
	ctx->mem_used -= bytes;
	req->charged -= bytes;
	req->user_charged -= ubytes;
	pool = !ctx->closed && !atomic_read(&u->waiting);
	for (i = req->nr_freed; i < end; i++) {
		struct page *page = req->bvec[i].bv_page;
		unsigned int order = compound_order(page);

		/* The pool holds pages of its node only (ss_idle_lru). */
		if (pool && page_to_nid(page) == ctx->nid) {
			list_add(&page->lru, &ctx->pool[order]);
			pooled += PAGE_SIZE << order;
		} else {
			list_add(&page->lru, &freed);
			atomic64_sub(PAGE_SIZE << order,
				     &stablesend_stats[SS_POOL_BYTES]);
		}
	}
	req->nr_freed = end;
	if (pooled) {
		ss_pool_account(ctx, pooled);
		ss_idle_add(ctx);
	}
	spin_unlock(&ctx->lock);
	spin_unlock(&u->lock);
	/* Pooled pages stay the user's (ubytes >= pooled); waiters trim them. */
	atomic64_sub(ubytes - pooled, &u->held);
	atomic64_sub(ubytes, &u->busy);
	if (ubytes)
		ss_user_returned(u);
	if (ubytes || bytes)
		ss_user_wake(u);
	if (bytes)
		wake_up_interruptible_all(&ctx->mem_wait);
	ss_free_list(&freed);
	return bytes;
}

/**
 * ss_pool_drain - free the idle pool pages of an open
 * @ctx:	the open
 *
 * At close, when an allocation fails, and when a request fails with
 * -ENOMEM (ss_prepare_failed()).  Pages still held by the network
 * stack are freed as they come back (ss_req_free_pages()).
 */
void ss_pool_drain(struct ss_ctx *ctx)
{
	struct ss_user *u = ctx->user;
	LIST_HEAD(idle);
	u64 got;

	spin_lock(&u->lock);
	spin_lock(&ctx->lock);
	got = ss_pool_take(ctx, U64_MAX, &idle);
	ss_idle_del(ctx);
	spin_unlock(&ctx->lock);
	spin_unlock(&u->lock);
	ss_free_list(&idle);
	ss_user_uncharge(u, got);
}

/**
 * ss_ctx_alloc - memory for a new open, zeroed
 *
 * Charged to the opener's memory cgroup, as its pages will be, on the
 * node they will come from: that cgroup's reclaim on that node takes its
 * idle pages (ss_idle_lru).
 */
struct ss_ctx *ss_ctx_alloc(void)
{
	struct mem_cgroup *memcg = get_mem_cgroup_from_mm(current->mm), *old;
	struct ss_ctx *ctx;

	old = set_active_memcg(memcg);
	ctx = kmem_cache_alloc_lru(ss_ctx_cache, &ss_idle_lru,
				   SS_GFP | __GFP_ZERO);
	set_active_memcg(old);
	if (!ctx) {
		mem_cgroup_put(memcg);
		return NULL;
	}
	ctx->memcg = memcg;
	ctx->nid = page_to_nid(virt_to_page(ctx));
	INIT_LIST_HEAD(&ctx->lru_node);
	return ctx;
}

void ss_ctx_dealloc(struct ss_ctx *ctx)
{
	mem_cgroup_put(ctx->memcg);
	kmem_cache_free(ss_ctx_cache, ctx);
}

/**
 * ss_user_attach - count a new open against its opener's user
 * @ctx:	the open, initialised, not yet visible to anyone
 *
 * Return: 0, or -ENOMEM.
 */
int ss_user_attach(struct ss_ctx *ctx)
{
	kuid_t uid = current_uid();
	struct ss_user *u, *fresh = NULL;

	INIT_LIST_HEAD(&ctx->idle_node);
	INIT_LIST_HEAD(&ctx->poll_node);
	/* Over the user's bound only with CAP_SYS_RESOURCE, decided once. */
	ctx->unbounded = ns_capable_noaudit(&init_user_ns, CAP_SYS_RESOURCE);
	for (;;) {
		spin_lock(&ss_users_lock);
		hash_for_each_possible(ss_users, u, node, __kuid_val(uid))
			if (uid_eq(u->uid, uid))
				goto found;
		if (fresh)
			break;
		spin_unlock(&ss_users_lock);
		fresh = kzalloc(sizeof(*fresh), SS_GFP);
		if (!fresh)
			return -ENOMEM;
		fresh->uid = uid;
		fresh->kick_tat = jiffies;
		spin_lock_init(&fresh->lock);
		INIT_LIST_HEAD(&fresh->idle);
		init_waitqueue_head(&fresh->wait);
		spin_lock_init(&fresh->poll_lock);
		INIT_LIST_HEAD(&fresh->pollers);
	}
	u = fresh;
	fresh = NULL;
	hash_add(ss_users, &u->node, __kuid_val(uid));
found:
	u->nr_ctx++;
	ctx->user = u;
	spin_unlock(&ss_users_lock);
	kfree(fresh);
	return 0;
}

/**
 * ss_user_detach - the open is gone, and everything it held
 * @ctx:	the open, its pool drained and no request left
 */
void ss_user_detach(struct ss_ctx *ctx)
{
	struct ss_user *u = ctx->user;
	bool last;

	spin_lock(&ss_users_lock);
	last = !--u->nr_ctx;
	if (last)
		hash_del(&u->node);
	spin_unlock(&ss_users_lock);
	if (last) {
		WARN_ON_ONCE(atomic64_read(&u->held) || atomic64_read(&u->busy) ||
			     atomic_long_read(&u->records));
		kfree(u);
	}
}

/* fdinfo: the user an open counts against, and what that user holds. */
void ss_user_show_fdinfo(struct seq_file *m, struct ss_ctx *ctx)
{
	struct ss_user *u = ctx->user;

	seq_printf(m, "stablesend-user:\t%u\n",
		   from_kuid_munged(seq_user_ns(m), u->uid));
	seq_printf(m, "stablesend-user-held:\t%lld\n",
		   (long long)atomic64_read(&u->held));
	if (ctx->unbounded)
		seq_puts(m, "stablesend-user-limit:\tnone\n");
	else
		seq_printf(m, "stablesend-user-limit:\t%lu\n",
			   READ_ONCE(stablesend_user_limit));
	seq_printf(m, "stablesend-user-records:\t%ld\n",
		   atomic_long_read(&u->records));
	if (ctx->unbounded)
		seq_puts(m, "stablesend-user-records-limit:\tnone\n");
	else
		seq_printf(m, "stablesend-user-records-limit:\t%u\n",
			   READ_ONCE(stablesend_user_records));
	seq_printf(m, "stablesend-user-rx-kicks:\t%lld\n",
		   (long long)atomic64_read(&u->kicks));
}

/* A submitter of @ctx starts (@delta 1) or stops (-1) waiting for memory. */
void ss_user_waits(struct ss_ctx *ctx, int delta)
{
	atomic_add(delta, &ctx->user->mem_waiters);
	ss_reaper_wait(delta);
}

/*
 * A submitter of @ctx found no memory and does not wait for it here
 * (EAGAIN, a failed allocation, poll() for EPOLLOUT without room): it will
 * look again, unseen.  The user's pages are wanted until it is next charged.
 */
void ss_user_starved(struct ss_ctx *ctx)
{
	if (!READ_ONCE(ctx->user->starved))
		WRITE_ONCE(ctx->user->starved, true);
	ss_reaper_eagain();
}

/*
 * Someone waits for pages of @ctx: its user, for memory.  (The module's
 * wait for a closed open's pages is counted per request: ss_inflight_closed().)
 */
bool ss_user_wants_pages(const struct ss_ctx *ctx)
{
	const struct ss_user *u = ctx->user;

	return atomic_read(&u->mem_waiters) || READ_ONCE(u->starved);
}

/**
 * ss_user_kick_take - may pages of @ctx's user cause a kick now
 * @ctx:	the open of the pages
 * @now:	the reaper pass's jiffies
 *
 * At most SS_USER_KICKS a second per user: that many at once, then one
 * every SS_KICK_TICKS (a budget refilled as time passes, not per second,
 * so a user who used it up waits a fraction of a second, not the rest of
 * one); counted.  Called by the reaper under ss_inflight_lock, which
 * serialises the kick fields; the pass's requests keep @ctx and its user.
 */
bool ss_user_kick_take(struct ss_ctx *ctx, unsigned long now)
{
	struct ss_user *u = ctx->user;
	unsigned long tat = time_after(u->kick_tat, now) ? u->kick_tat : now;

	/* Less than a kick left of the budget. */
	if (tat - now > (SS_USER_KICKS - 1) * SS_KICK_TICKS)
		return false;
	u->kick_tat = tat + SS_KICK_TICKS;
	if (ss_rx_kick_enabled())
		atomic64_inc(&u->kicks);
	return true;
}

static enum lru_status ss_lru_count(struct list_head *item,
				    struct list_lru_one *list,
				    STABLESEND_LRU_WALK_LOCK void *arg)
{
	*(u64 *)arg += READ_ONCE(container_of(item, struct ss_ctx, lru_node)->pooled);
	return LRU_SKIP;
}

/* Idle pool pages of the opens of the cgroup and node reclaim asks for. */
static unsigned long ss_shrink_count(struct shrinker *s,
				     struct shrink_control *sc)
{
	unsigned long nr = SS_SHRINK_WALK;
	u64 idle = 0;

	/* Pairs with ss_memory_init()'s release: the list is set up. */
	if (!smp_load_acquire(&ss_idle_lru_ready))
		return 0;
	list_lru_walk_one(&ss_idle_lru, sc->nid, sc->memcg, ss_lru_count,
			  &idle, &nr);
	/* Only an empty list may have the cgroup's shrinker bit cleared. */
	if (nr == SS_SHRINK_WALK)
		return SHRINK_EMPTY;
	return idle >> PAGE_SHIFT;
}

struct ss_shrink {
	u64 want;		/* bytes to free */
	u64 freed;
	struct list_head pages;	/* to free once the walk is over */
};

/*
 * Take idle pages of one open.  The list's lock is held, which the usual
 * order takes after user->lock and ctx->lock: try them, skip if busy.
 */
static enum lru_status ss_lru_take(struct list_head *item,
				   struct list_lru_one *list,
				   STABLESEND_LRU_WALK_LOCK void *arg)
{
	struct ss_ctx *ctx = container_of(item, struct ss_ctx, lru_node);
	struct ss_user *u = ctx->user;
	struct ss_shrink *sh = arg;
	bool empty;
	u64 got;

	/* Enough freed (whole compound pages: maybe more than asked). */
	if (sh->freed >= sh->want)
		return LRU_SKIP;
	if (!spin_trylock(&u->lock))
		return LRU_SKIP;
	if (!spin_trylock(&ctx->lock)) {
		spin_unlock(&u->lock);
		return LRU_SKIP;
	}
	got = ss_pool_take(ctx, sh->want - sh->freed, &sh->pages);
	empty = !ctx->pooled;	/* maybe between emptied and unlisted */
	if (empty) {
		list_del_init(&ctx->idle_node);
		list_lru_isolate(list, item);
	}
	spin_unlock(&ctx->lock);
	/* Under user->lock, before which a closed open cannot let @u go. */
	ss_user_uncharge(u, got);
	spin_unlock(&u->lock);
	sh->freed += got;
	return empty ? LRU_REMOVED : LRU_ROTATE;
}

/*
 * Free idle pool pages of the cgroup's opens on the node, in the list's
 * order: an open that gave some and has more goes to the back.
 */
static unsigned long ss_shrink_scan(struct shrinker *s,
				    struct shrink_control *sc)
{
	struct ss_shrink sh = { .want = (u64)sc->nr_to_scan << PAGE_SHIFT };
	unsigned long nr = SS_SHRINK_WALK, pages;

	/* Pairs with ss_memory_init()'s release: the list is set up. */
	if (!smp_load_acquire(&ss_idle_lru_ready))
		return SHRINK_STOP;
	INIT_LIST_HEAD(&sh.pages);
	list_lru_walk_one(&ss_idle_lru, sc->nid, sc->memcg, ss_lru_take,
			  &sh, &nr);
	ss_free_list(&sh.pages);
	pages = sh.freed >> PAGE_SHIFT;
	sc->nr_scanned = pages;
	mm_account_reclaimed_pages(pages);
	return pages ?: SHRINK_STOP;
}

/* A sixteenth of RAM: what user_limit is at load, and after writing 0. */
static unsigned long ss_user_limit_default(void)
{
	return (totalram_pages() / 16) << PAGE_SHIFT;
}

static int ss_user_limit_set(const char *val, const struct kernel_param *kp)
{
	unsigned long limit;
	struct ss_user *u;
	unsigned int bkt;
	int err;

	err = kstrtoul(val, 0, &limit);
	if (err)
		return err;
	if (!limit)
		limit = ss_user_limit_default();
	else if (limit < PAGE_SIZE)
		return -EINVAL;
	WRITE_ONCE(stablesend_user_limit, limit);
	/* Waiters and pollers look again: more room, or a request too large. */
	spin_lock(&ss_users_lock);
	hash_for_each(ss_users, bkt, u, node) {
		ss_user_returned(u);
		ss_user_wake(u);
	}
	spin_unlock(&ss_users_lock);
	return 0;
}

static const struct kernel_param_ops ss_user_limit_ops = {
	.set	= ss_user_limit_set,
	.get	= param_get_ulong,
};

/* 0 (at load, or written later): a sixteenth of RAM. */
unsigned long stablesend_user_limit;
module_param_cb(user_limit, &ss_user_limit_ops, &stablesend_user_limit, 0644);
MODULE_PARM_DESC(user_limit,
		 "Snapshot memory all opens of one user may hold; CAP_SYS_RESOURCE exceeds it (bytes, 0: RAM/16)");

static int ss_user_records_set(const char *val, const struct kernel_param *kp)
{
	struct ss_user *u;
	unsigned int nr, bkt;
	int err;

	err = kstrtouint(val, 0, &nr);
	if (err)
		return err;
	/* A request with RELEASED takes two: one would refuse it forever. */
	if (nr == 1)
		return -EINVAL;
	WRITE_ONCE(stablesend_user_records, nr ?: SS_USER_RECORDS);
	/* Pollers look again; requests are held to it from the next one. */
	spin_lock(&ss_users_lock);
	hash_for_each(ss_users, bkt, u, node)
		ss_user_wake(u);
	spin_unlock(&ss_users_lock);
	return 0;
}

static const struct kernel_param_ops ss_user_records_ops = {
	.set	= ss_user_records_set,
	.get	= param_get_uint,
};

/* 0 (at load, or written later): SS_USER_RECORDS. */
unsigned int stablesend_user_records = SS_USER_RECORDS;
module_param_cb(user_records, &ss_user_records_ops, &stablesend_user_records,
		0644);
MODULE_PARM_DESC(user_records,
		 "Completion records all opens of one user may hold, unread or owed; CAP_SYS_RESOURCE exceeds it (0: "
		 __stringify(SS_USER_RECORDS) ")");

int ss_memory_init(void)
{
	int err = -ENOMEM;

	if (!stablesend_user_limit)
		stablesend_user_limit = ss_user_limit_default();
	ss_ctx_cache = kmem_cache_create("stablesend_ctx", sizeof(struct ss_ctx),
					 0, SLAB_ACCOUNT, NULL);
	if (!ss_ctx_cache)
		return -ENOMEM;
	ss_shrinker = shrinker_alloc(SHRINKER_MEMCG_AWARE | SHRINKER_NUMA_AWARE,
				     "stablesend-pool");
	if (!ss_shrinker)
		goto fail_cache;
	ss_shrinker->count_objects = ss_shrink_count;
	ss_shrinker->scan_objects = ss_shrink_scan;
	ss_shrinker->seeks = DEFAULT_SEEKS;
	/* Registered first: before 6.7 that gave the shrinker its memcg id. */
	shrinker_register(ss_shrinker);
	err = list_lru_init_memcg(&ss_idle_lru, ss_shrinker);
	if (err)
		goto fail_shrinker;
	/* The shrinker, already live, may walk the list from now on. */
	smp_store_release(&ss_idle_lru_ready, true);
	return 0;

fail_shrinker:
	shrinker_free(ss_shrinker);
fail_cache:
	kmem_cache_destroy(ss_ctx_cache);
	return err;
}

/* Every open is gone (each kept the module). */
void ss_memory_exit(void)
{
	shrinker_free(ss_shrinker);
	list_lru_destroy(&ss_idle_lru);
	kmem_cache_destroy(ss_ctx_cache);
}
