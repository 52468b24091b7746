/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Backports of the newest kernel API to the kernels stablesend builds for.
 * Force-included by Kbuild after compat/probed.h; the rest of the module is
 * written against the newest API and carries no version checks.
 */
#ifndef _STABLESEND_COMPAT_H
#define _STABLESEND_COMPAT_H

#include <linux/eventfd.h>
#include <linux/uio.h>

#ifndef HAVE_ITER_DEST
#define ITER_DEST	READ
#define ITER_SOURCE	WRITE
#endif

#ifndef HAVE_EVENTFD_SIGNAL_NOCOUNT
/* 6.8 dropped the count argument; every caller passed 1. */
static inline void stablesend_eventfd_signal(struct eventfd_ctx *ctx)
{
	eventfd_signal(ctx, 1);
}

#define eventfd_signal(ctx) stablesend_eventfd_signal(ctx)
#endif

#ifdef HAVE_ALLOC_NETDEV_DUMMY
#define stablesend_free_netdev_dummy(dev)	free_netdev(dev)
#else
#include <linux/netdevice.h>
#include <linux/slab.h>

/* Before 6.10 a dummy device lived in memory its user provided. */
static inline struct net_device *stablesend_alloc_netdev_dummy(int sizeof_priv)
{
	struct net_device *dev = kzalloc(sizeof(*dev) + sizeof_priv, GFP_KERNEL);

	if (dev)
		init_dummy_netdev(dev);
	return dev;
}

#define alloc_netdev_dummy(priv)	stablesend_alloc_netdev_dummy(priv)
#define stablesend_free_netdev_dummy(dev)	kfree(dev)
#endif

#ifndef HAVE_TIMER_DELETE_SYNC
#define timer_delete_sync(t)		del_timer_sync(t)
#endif

#ifndef HAVE_HRTIMER_SETUP
#include <linux/hrtimer.h>

static inline void
stablesend_hrtimer_setup(struct hrtimer *timer,
			 enum hrtimer_restart (*function)(struct hrtimer *),
			 clockid_t clock_id, enum hrtimer_mode mode)
{
	hrtimer_init(timer, clock_id, mode);
	timer->function = function;
}

#define hrtimer_setup(t, fn, clock, mode) stablesend_hrtimer_setup(t, fn, clock, mode)
#endif

#ifndef HAVE_GET_RANDOM_U32_BELOW
#define get_random_u32_below(ceil)	prandom_u32_max(ceil)
#endif

#include <linux/sched.h>
/* Threads that are not the process's own (vhost workers, 6.4), like io-wq's. */
#ifndef PF_USER_WORKER
#define PF_USER_WORKER			0
#endif

#ifndef HAVE_SHRINKER_ALLOC
#include <linux/shrinker.h>
#include <linux/slab.h>

/* Before 6.7 a shrinker lived in memory its user provided. */
static inline struct shrinker *
stablesend_shrinker_alloc(unsigned int flags, const char *name)
{
	struct shrinker *s = kzalloc(sizeof(*s), GFP_KERNEL);

	if (s)
		s->flags = flags;
	return s;
}

static inline void stablesend_shrinker_register(struct shrinker *s)
{
	/* Without it idle pools are freed at close only. */
	if (register_shrinker(s, "stablesend-pool")) {
		pr_warn("no shrinker: idle pool pages are kept until close\n");
#ifdef CONFIG_MEMCG
		s->id = -1;	/* a list_lru of it marks no memcg for it */
#endif
	}
}

static inline void stablesend_shrinker_free(struct shrinker *s)
{
	if (s)
		unregister_shrinker(s);	/* a no-op if never registered */
	kfree(s);
}

#define shrinker_alloc(flags, name)	stablesend_shrinker_alloc(flags, name)
#define shrinker_register(s)		stablesend_shrinker_register(s)
#define shrinker_free(s)		stablesend_shrinker_free(s)
#endif

#include <linux/list_lru.h>
#ifndef HAVE_LIST_LRU_ADD_OBJ
/* Before 6.8 list_lru_add() found the node and memory cgroup itself. */
#define list_lru_add_obj(lru, item)	list_lru_add(lru, item)
#define list_lru_del_obj(lru, item)	list_lru_del(lru, item)
#endif

/* Before 6.13 a list_lru walk callback was also given the list's lock. */
#ifdef HAVE_LIST_LRU_WALK_CB_LOCK
#define STABLESEND_LRU_WALK_LOCK	spinlock_t *lock,
#else
#define STABLESEND_LRU_WALK_LOCK
#endif

#ifndef HAVE_MM_ACCOUNT_RECLAIMED_PAGES
#include <linux/swap.h>
/* Pages freed by a shrinker count as reclaimed. */
static inline void mm_account_reclaimed_pages(unsigned long pages)
{
	if (current->reclaim_state)
		current->reclaim_state->reclaimed_slab += pages;
}
#endif

struct socket;
struct msghdr;

#ifdef HAVE_KERNEL_SENDPAGE
/*
 * Before 6.5 TCP, AF_UNIX and kTLS take pages by reference only through
 * ->sendpage; compat/sendpage.c feeds a bvec iterator to it page by page.
 */
#ifndef HAVE_MSG_SPLICE_PAGES
#define MSG_SPLICE_PAGES	0
#endif
int stablesend_sendmsg(struct socket *sock, struct msghdr *msg);

/*
 * May a non-blocking send on AF_UNIX stream socket @sk take bytes though
 * poll() says it is full?  unix_stream_sendpage() adds to the last skb
 * without looking at the send buffer: only the send can tell.
 */
static inline bool stablesend_unix_may_send(struct sock *sk)
{
	return true;
}
#else
#include <linux/net.h>
#include <net/sock.h>

static inline int stablesend_sendmsg(struct socket *sock, struct msghdr *msg)
{
	return sock_sendmsg(sock, msg);
}

/*
 * unix_stream_sendmsg() takes every call's pages in a new skb, which
 * sock_alloc_send_pskb() allocates while the send buffer is not full;
 * poll() reports room only below a quarter of it.
 */
static inline bool stablesend_unix_may_send(struct sock *sk)
{
	return sk_wmem_alloc_get(sk) < READ_ONCE(sk->sk_sndbuf);
}
#endif

#ifdef CONFIG_IO_URING
#ifdef HAVE_IO_URING_CMD_H
#include <linux/io_uring/cmd.h>
#else
#include <linux/io_uring.h>
#include <linux/io_uring_types.h>
#endif

/* The command area of the SQE: before 6.6 io_uring kept a pointer to it. */
#if defined(HAVE_IO_URING_SQE_CMD_TYPED)
#define stablesend_uring_cmd_area(ioucmd, type)	\
	io_uring_sqe_cmd((ioucmd)->sqe, type)
#elif defined(HAVE_IO_URING_CMD_H)
#define stablesend_uring_cmd_area(ioucmd, type)	\
	((const type *)io_uring_sqe_cmd((ioucmd)->sqe))
#else
#define stablesend_uring_cmd_area(ioucmd, type)	((const type *)(ioucmd)->cmd)
#endif

#ifndef IORING_URING_CMD_MASK
#define IORING_URING_CMD_MASK		IORING_URING_CMD_FIXED
#endif

/*
 * The driver's part of struct io_uring_cmd's pdu; before 6.7 the last 16
 * bytes are compat/uring.c's.
 */
#ifdef HAVE_IO_URING_CMD_CANCELABLE
#define STABLESEND_URING_PDU_SIZE	sizeof_field(struct io_uring_cmd, pdu)
#else
#define STABLESEND_URING_PDU_SIZE	\
	(sizeof_field(struct io_uring_cmd, pdu) - sizeof(struct list_head))
#endif

/*
 * STABLESEND_URING_TW(name, fn): @name, an io_uring task work callback that
 * calls fn(cmd, issue_flags); newest kernels pass a struct io_tw_req.
 */
#ifdef HAVE_IO_TW_REQ
#define STABLESEND_URING_TW(name, fn)					\
static void name(struct io_tw_req tw_req, io_tw_token_t tw)		\
{									\
	fn(io_uring_cmd_from_tw(tw_req), IO_URING_CMD_TASK_WORK_ISSUE_FLAGS); \
}
#else
#define STABLESEND_URING_TW(name, fn)					\
static void name(struct io_uring_cmd *ioucmd, unsigned int issue_flags)	\
{									\
	fn(ioucmd, issue_flags);					\
}
#endif

/* The task a command's task work runs in; NULL where unknown. */
static inline struct task_struct *
stablesend_uring_cmd_task(struct io_uring_cmd *cmd)
{
#ifdef HAVE_IO_URING_CMD_GET_TASK
	return io_uring_cmd_get_task(cmd);
#else
	return NULL;
#endif
}

/* Whether the command's ring takes CQEs from its task only. */
static inline bool stablesend_uring_cmd_defer_taskrun(struct io_uring_cmd *cmd)
{
#ifdef HAVE_IO_URING_CMD_CANCELABLE
	return cmd_to_io_kiocb(cmd)->ctx->flags & IORING_SETUP_DEFER_TASKRUN;
#else
	return false;	/* io_uring never cancels a command itself */
#endif
}

#ifndef HAVE_IO_URING_CMD_CANCELABLE
/*
 * Before 6.7 io_uring never gives a driver's command back: compat/uring.c
 * watches the marked ones and calls ->uring_cmd with IO_URING_F_CANCEL
 * when their ring is closed or their task cancels all its requests (exec),
 * as io_uring does since.
 */
#define IO_URING_F_CANCEL		BIT(11)
/* The watch's cancel: no io_uring lock held, post the CQE from task work. */
#define STABLESEND_URING_F_WATCHER	BIT(12)
void stablesend_uring_watch(struct io_uring_cmd *cmd, unsigned int issue_flags);
void stablesend_uring_unmarked(struct io_uring_cmd *cmd);
void stablesend_uring_unwatch(struct io_uring_cmd *cmd);
void stablesend_uring_watch_exit(void);
#define io_uring_cmd_mark_cancelable(cmd, flags)	stablesend_uring_watch(cmd, flags)
#else
#define STABLESEND_URING_F_WATCHER	0

static inline void stablesend_uring_unmarked(struct io_uring_cmd *cmd)
{
}

static inline void stablesend_uring_unwatch(struct io_uring_cmd *cmd)
{
}

static inline void stablesend_uring_watch_exit(void)
{
}
#endif

/*
 * Before a command returns -EAGAIN for io_uring's worker to issue it again:
 * make sure that the worker reads the SQE as it was submitted.
 */
#if defined(HAVE_IO_URING_CMD_H) && !defined(HAVE_IO_URING_CMD_DATA) && \
	!defined(HAVE_REQ_F_SQE_COPIED)
#define STABLESEND_URING_KEEP_SQE	1	/* compat/uring.c */
void stablesend_uring_keep_sqe(struct io_uring_cmd *cmd, unsigned int issue_flags);
#else
static inline void stablesend_uring_keep_sqe(struct io_uring_cmd *cmd,
					     unsigned int issue_flags)
{
}
#endif

#ifndef HAVE_IO_URING_CMD_DONE32
/* Newest: no res2 (that is io_uring_cmd_done32()). */
static inline void stablesend_uring_cmd_done(struct io_uring_cmd *cmd,
					     s32 ret, unsigned int flags)
{
	stablesend_uring_unwatch(cmd);
	io_uring_cmd_done(cmd, ret, 0, flags);
}

#define io_uring_cmd_done(cmd, ret, flags)	\
	stablesend_uring_cmd_done(cmd, ret, flags)
#endif
#else
static inline void stablesend_uring_watch_exit(void)
{
}
#endif /* CONFIG_IO_URING */

#endif /* _STABLESEND_COMPAT_H */
