// SPDX-License-Identifier: GPL-2.0
/*
 * Transmission: one FIFO per socket, shared by every open that submits to
 * it, so requests go out in submission order and never interleave.  A work
 * item per socket sends the head request's pages by reference with
 * MSG_SPLICE_PAGES | MSG_DONTWAIT; when the socket is full it parks an entry
 * on the socket's wait queue (as poll does) and returns, so a stalled peer
 * holds no thread and never delays other sockets.
 */
#include <linux/fs.h>
#include <linux/hashtable.h>
#include <linux/in.h>
#include <linux/net.h>
#include <linux/netdevice.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/socket.h>
#include <net/dst.h>
#include <net/inet_connection_sock.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "ss.h"

/*
 * Lifetime: @ref counts the requests on the FIFO (and lookups in progress).
 * Neither @work nor the wait queue entry holds a reference: whoever drops
 * the last one unhashes the FIFO and defers freeing to @free_work, which
 * first unhooks the wait queue entry and then waits for @work, so the send
 * work may run on after its last request finished.
 */
struct ss_sock {
	refcount_t ref;
	struct hlist_node hash;
	struct socket *sock;
	struct file *file;	/* keeps @sock alive */
	spinlock_t lock;	/* @fifo and each request's state and abort */
	struct list_head fifo;
	struct work_struct work;
	struct work_struct free_work;
	struct wait_queue_entry wait;	/* on the socket's wait queue */
	bool waiting;		/* out of space: a wakeup requeues @work */
};

static DEFINE_HASHTABLE(ss_socks, 8);
static DEFINE_SPINLOCK(ss_socks_lock);

/*
 * TCP's route caps always claim scatter-gather (software GSO), so ask the
 * route's device: without SG, segmentation copies the pages out.
 */
static bool ss_tcp_dev_copies(struct sock *sk)
{
	struct dst_entry *dst;
	bool copies;

	rcu_read_lock();
	dst = __sk_dst_get(sk);
	if (dst && dst->dev)
		copies = !(READ_ONCE(dst->dev->features) & NETIF_F_SG);
	else
		copies = !(READ_ONCE(sk->sk_route_caps) & NETIF_F_SG);
	rcu_read_unlock();
	return copies;
}

/**
 * ss_sock_check - can we send on this socket?
 * @sock:	the socket
 * @copies:	set when the protocol will copy the pages (kTLS, no SG)
 */
int ss_sock_check(struct socket *sock, bool *copies)
{
	struct sock *sk = sock->sk;
	const struct tcp_ulp_ops *ulp;
	int state;

	if (sock->type != SOCK_STREAM)
		return -EOPNOTSUPP;
	switch (sk->sk_family) {
	case AF_INET:
	case AF_INET6:
		if (sk->sk_protocol != IPPROTO_TCP)
			return -EOPNOTSUPP;
		ulp = READ_ONCE(inet_csk(sk)->icsk_ulp_ops);
		if (ulp && strcmp(ulp->name, "tls"))
			return -EOPNOTSUPP;
		*copies = ulp || ss_tcp_dev_copies(sk);
		break;
	case AF_UNIX:
		*copies = false;
		break;
	default:
		return -EOPNOTSUPP;
	}
	/* Shut down for writing moves TCP to FIN_WAIT: that is EPIPE, as send(2) says. */
	if (READ_ONCE(sk->sk_shutdown) & SEND_SHUTDOWN)
		return -EPIPE;
	state = READ_ONCE(sk->sk_state);
	if (state != TCP_ESTABLISHED && state != TCP_CLOSE_WAIT)
		return -ENOTCONN;
	return 0;
}

/*
 * Run the socket's send work; safe in atomic context.  The caller holds a
 * request on the FIFO, or is the wait queue callback (the entry is
 * unhooked before the FIFO is freed).
 */
void ss_kick(struct ss_sock *ss)
{
	queue_work(ss_wq, &ss->work);
}

static void ss_sock_free(struct work_struct *work)
{
	struct ss_sock *ss = container_of(work, struct ss_sock, free_work);

	/* After this no wakeup can be running or start... */
	remove_wait_queue(&ss->sock->wq.wait, &ss->wait);
	/* ...so nothing can queue the send work again. */
	cancel_work_sync(&ss->work);
	fput(ss->file);
	kfree(ss);
}

void ss_sock_put(struct ss_sock *ss)
{
	if (!refcount_dec_and_test(&ss->ref))
		return;
	/* Lookups skip a dead entry (refcount_inc_not_zero) until it is gone. */
	spin_lock(&ss_socks_lock);
	hash_del(&ss->hash);
	spin_unlock(&ss_socks_lock);
	queue_work(ss_wq, &ss->free_work);
}

static int ss_wake(struct wait_queue_entry *wait, unsigned int mode, int sync,
		   void *key)
{
	struct ss_sock *ss = container_of(wait, struct ss_sock, wait);
	__poll_t mask = key_to_poll(key);

	if (mask && !(mask & (EPOLLOUT | EPOLLWRNORM | EPOLLERR | EPOLLHUP)))
		return 0;
	if (READ_ONCE(ss->waiting) && xchg(&ss->waiting, false))
		ss_kick(ss);
	return 0;
}

/*
 * Out of socket space.  Returns true if space (or an error) showed up
 * meanwhile and the caller should go on; false if a wakeup will requeue us.
 */
static bool ss_wait_space(struct ss_sock *ss)
{
	__poll_t mask;

	WRITE_ONCE(ss->waiting, true);
	smp_mb(); /* waiting before the socket state poll reads; pairs with wakeup */
	mask = vfs_poll(ss->file, NULL);
	if (!(mask & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
		return false;
	return xchg(&ss->waiting, false);
}

/* Hand the rest of @req to the socket.  0 when all of it went, or -errno. */
static int ss_send(struct ss_sock *ss, struct ss_req *req)
{
	while (req->sent < req->total) {
		struct msghdr msg = {
			.msg_flags = MSG_SPLICE_PAGES | MSG_DONTWAIT |
				     MSG_NOSIGNAL,
		};
		int ret;

		if (req->flags & STABLESEND_REQ_MORE)
			msg.msg_flags |= MSG_MORE;
		iov_iter_bvec(&msg.msg_iter, ITER_SOURCE, req->bvec,
			      req->nr_send, req->total);
		iov_iter_advance(&msg.msg_iter, req->sent);
		ret = stablesend_sendmsg(ss->sock, &msg);
		if (ret <= 0)
			return ret ? ret : -EAGAIN;
		/* After the sendmsg took its page references: ss_req_idle_pages(). */
		smp_store_release(&req->sent, req->sent + ret);
		cond_resched();
	}
	return 0;
}

static void ss_sock_work(struct work_struct *work)
{
	struct ss_sock *ss = container_of(work, struct ss_sock, work);
	bool retried = false;
	struct ss_req *req;
	int ret;

	for (;;) {
		spin_lock(&ss->lock);
		req = list_first_entry_or_null(&ss->fifo, struct ss_req, fifo);
		if (req && req->abort) {
			list_del(&req->fifo);
			req->state = SS_REQ_DONE;
			spin_unlock(&ss->lock);
			ss_req_finish(req, req->sent ?: -ECANCELED);
			continue;
		}
		if (req)
			req->state = SS_REQ_STARTED;
		spin_unlock(&ss->lock);
		if (!req)
			break;

		ret = ss_send(ss, req);
		if (ret == -EAGAIN) {
			/*
			 * Space appeared meanwhile: go on, but only once in a row
			 * here; after that requeue ourselves, so a protocol that
			 * keeps refusing while poll says writable cannot pin
			 * this worker.
			 */
			if (!ss_wait_space(ss))
				break;
			if (!retried) {
				retried = true;
				continue;
			}
			ss_kick(ss);
			break;
		}
		retried = false;
		spin_lock(&ss->lock);
		list_del(&req->fifo);
		req->state = SS_REQ_DONE;
		spin_unlock(&ss->lock);
		ss_req_finish(req, ret ?: (s64)req->sent);
	}
}

static struct ss_sock *ss_sock_find(struct socket *sock)
{
	struct ss_sock *ss;

	hash_for_each_possible(ss_socks, ss, hash, (unsigned long)sock)
		if (ss->sock == sock && refcount_inc_not_zero(&ss->ref))
			return ss;
	return NULL;
}

/* The socket's FIFO, with a reference; consumes the caller's socket reference. */
static struct ss_sock *ss_sock_get(struct socket *sock)
{
	struct ss_sock *ss, *old;

	spin_lock(&ss_socks_lock);
	ss = ss_sock_find(sock);
	spin_unlock(&ss_socks_lock);
	if (ss)
		goto put_sock;

	ss = kzalloc(sizeof(*ss), SS_GFP);
	if (!ss) {
		sockfd_put(sock);
		return NULL;
	}
	refcount_set(&ss->ref, 1);
	ss->sock = sock;
	ss->file = sock->file;
	spin_lock_init(&ss->lock);
	INIT_LIST_HEAD(&ss->fifo);
	INIT_WORK(&ss->work, ss_sock_work);
	INIT_WORK(&ss->free_work, ss_sock_free);
	init_waitqueue_func_entry(&ss->wait, ss_wake);
	add_wait_queue(&sock->wq.wait, &ss->wait);

	spin_lock(&ss_socks_lock);
	old = ss_sock_find(sock);
	if (!old)
		hash_add(ss_socks, &ss->hash, (unsigned long)sock);
	spin_unlock(&ss_socks_lock);
	if (!old)
		return ss;
	/* Lost a race with another submitter: use theirs. */
	remove_wait_queue(&sock->wq.wait, &ss->wait);
	kfree(ss);
	ss = old;
put_sock:
	sockfd_put(sock);
	return ss;
}

/**
 * ss_enqueue - queue a snapshotted request at the tail of its socket's FIFO
 * @req:	the request, linked on nothing yet
 * @sock:	its socket; the reference from sockfd_lookup() is consumed
 */
int ss_enqueue(struct ss_req *req, struct socket *sock)
{
	struct ss_ctx *ctx = req->ctx;
	struct ss_sock *ss;
	bool first;

	ss = ss_sock_get(sock);
	if (!ss)
		return -ENOMEM;
	req->sock = ss;
	req->state = SS_REQ_QUEUED;
	atomic64_inc(&ss_stats[SS_REQUESTS]);
	atomic64_inc(&ss_stats[SS_REQUESTS_IN_FLIGHT]);
	atomic64_add(req->charged, &ss_stats[SS_BYTES_IN_FLIGHT]);
	ss_inflight_add(req);

	/*
	 * Both lists at once, in the order cancel takes the locks: a CANCEL
	 * that finds the request on ctx->queued must find it on the FIFO too.
	 * Kick before unlocking: once a CANCEL can take the request, its
	 * reference on @ss may be the last one.
	 */
	spin_lock(&ctx->lock);
	list_add_tail(&req->ctx_node, &ctx->queued);
	ctx->stats.submitted++;
	spin_lock(&ss->lock);
	first = list_empty(&ss->fifo);
	list_add_tail(&req->fifo, &ss->fifo);
	if (first)
		ss_kick(ss);
	spin_unlock(&ss->lock);
	spin_unlock(&ctx->lock);
	return 0;
}

/*
 * Take @req off its FIFO if it has not started; true if it was, and the
 * caller must then ss_req_finish() it.  Called with ctx->lock held.
 */
bool ss_cancel_req(struct ss_req *req)
{
	struct ss_sock *ss = req->sock;
	bool queued;

	spin_lock(&ss->lock);
	queued = req->state == SS_REQ_QUEUED;
	if (queued) {
		list_del(&req->fifo);
		req->state = SS_REQ_DONE;
	}
	spin_unlock(&ss->lock);
	return queued;
}

/*
 * Stop a started request after what the socket already took; the work
 * finishes it.  Called with ctx->lock held and @req on ctx->queued, which
 * keeps req->sock valid.
 */
void ss_abort_req(struct ss_req *req)
{
	struct ss_sock *ss = req->sock;
	bool kick;

	spin_lock(&ss->lock);
	kick = req->state == SS_REQ_STARTED;
	if (kick)
		req->abort = true;
	spin_unlock(&ss->lock);
	if (kick)
		ss_kick(ss);
}
