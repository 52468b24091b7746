// SPDX-License-Identifier: GPL-2.0
/*
 * Transmission: one FIFO per socket, shared by every open that submits to
 * it, so requests go out in submission order and never interleave.
 *
 * Every byte is handed to the socket by the task that submitted it, or by
 * another thread of its process (see below), so the socket layer, the LSM
 * and the scheduler see that process: its pid, the submitter's credentials
 * (as of the submission), its cgroup.  What the socket takes at
 * once goes out inline, inside the SUBMIT or SEND call.  When the socket is
 * full the FIFO "parks": a wait queue entry on the socket notices space and
 * queues task work (TWA_SIGNAL, as io_uring does) on the submitter of the
 * head request, which sends on in its own context.  No kernel thread ever
 * calls sendmsg, so a socket whose send path blocks (kTLS's tx_lock, the
 * socket lock) can only hold up the task that submitted to it.
 *
 * A synchronous SEND is sent by its own caller with the socket's blocking
 * mode, SO_SNDTIMEO and signals, as sendfile(2) would be; it sends the
 * asynchronous requests of its process queued ahead of it itself.
 *
 * When the submitting thread exits, another thread of its process takes
 * its requests over; when the whole process is gone they end where they
 * are (nothing sent: -ECANCELED, else the bytes sent), also on a socket
 * that stays full (ss_watch()).
 */
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/hash.h>
#include <linux/hashtable.h>
#include <linux/in.h>
#include <linux/list_bl.h>
#include <linux/net.h>
#include <linux/netdevice.h>
#include <linux/pid.h>
#include <linux/poll.h>
#include <linux/random.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/socket.h>
#include <linux/task_work.h>
#include <linux/timer.h>
#include <net/dst.h>
#include <net/inet_connection_sock.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "ss.h"

/* Bytes per sendmsg call: aborts and signals are looked at in between. */
#define SS_SEND_CHUNK	SZ_1M
/* Bytes one inline send or task work run sends before it pauses. */
#define SS_PUMP_BUDGET	SZ_16M
/* Parked on a full socket: how often to look whether the head's process is gone. */
#define SS_WATCH_PERIOD	(5 * HZ)

/*
 * Lifetime: @ref counts the requests on the FIFO, queued task work and
 * orphan work, and whoever is sending (a lookup, a SEND, a SUBMIT).  The
 * last put unhooks the wait queue entry, stops the timer and drops the
 * socket file; every put happens in process context, and but for the
 * orphan work (a submitter that exited) in a user task's, so a lingering
 * close of the socket blocks that user's task, not a kernel thread.
 */
struct ss_sock {
	refcount_t ref;
	struct hlist_node hash;
	struct socket *sock;
	struct file *file;	/* keeps @sock alive */
	spinlock_t lock;	/* the fields below, each request's state and abort */
	struct list_head fifo;
	struct ss_req *sending;	/* a task is in sendmsg for it */
	bool parked;		/* head out of space: space notifies its task */
	bool retry_used;	/* @retry was armed, under @lock */
	bool watch;		/* @retry only watches the head's process */
	struct list_head waiters;	/* struct ss_waiter: SEND callers */
	wait_queue_head_t turn;		/* where they sleep */
	struct wait_queue_entry wait;	/* on the socket's wait queue */
	struct timer_list retry;	/* EAGAIN although writable */
	struct ss_group *group;		/* requests whose pages it took (completion.c) */
};

/* A synchronous sender waiting on @turn; it sends its process's requests. */
struct ss_waiter {
	struct list_head node;
	struct task_struct *task;
};

static DEFINE_HASHTABLE(ss_socks, 8);
static DEFINE_SPINLOCK(ss_socks_lock);

/*
 * Tasks inside a SEND.  Task work for their other requests goes to another
 * thread of the process, or is queued with TWA_RESUME to run when the
 * SEND returns: TWA_SIGNAL would interrupt it (a short count from a
 * blocking socket) just to have the work run sooner.
 */
#define SS_SENDERS_BITS	8
static struct hlist_bl_head ss_senders[1 << SS_SENDERS_BITS];

static struct hlist_bl_head *ss_senders_head(struct task_struct *t)
{
	return &ss_senders[hash_ptr(t, SS_SENDERS_BITS)];
}

/**
 * ss_sender_enter - the current task starts a SEND
 * @s:		its entry, until ss_sender_leave()
 *
 * Returns -ERESTARTNOINTR when task work is already due with no signal
 * pending: the SEND is restarted once it ran, instead of being cut short.
 */
int ss_sender_enter(struct ss_sender *s)
{
	struct hlist_bl_head *h = ss_senders_head(current);

	s->task = current;
	local_bh_disable();	/* ss_task_work_add() runs in softirq context too */
	hlist_bl_lock(h);
	hlist_bl_add_head(&s->node, h);
	hlist_bl_unlock(h);
	local_bh_enable();
	s->in = true;
	/* Work queued from now on does not interrupt us; earlier work did. */
	if (test_thread_flag(TIF_NOTIFY_SIGNAL) && !task_sigpending(current)) {
		ss_sender_leave(s);
		return -ERESTARTNOINTR;
	}
	return 0;
}

/* Leave the registry, if on it. */
void ss_sender_leave(struct ss_sender *s)
{
	struct hlist_bl_head *h = ss_senders_head(current);

	if (!s->in)
		return;
	s->in = false;
	local_bh_disable();
	hlist_bl_lock(h);
	hlist_bl_del(&s->node);
	hlist_bl_unlock(h);
	local_bh_enable();
}

/**
 * ss_sender_pause - a SEND caller is about to wait for memory
 * @s:		its entry, or NULL (not a SEND: nothing to do)
 *
 * Its own queued requests may hold that memory, and only it can send them
 * on: off the registry, their task work interrupts the wait.  Work queued
 * while it was on the registry (with TWA_RESUME, under the lock this
 * takes) would not: -ERESTARTNOINTR has it run, and the call start again.
 */
int ss_sender_pause(struct ss_sender *s)
{
	if (!s)
		return 0;
	ss_sender_leave(s);
	if (!task_work_pending(current))
		return 0;
	/* As if TWA_SIGNAL work had come: the way out runs it, then restarts. */
	set_thread_flag(TIF_NOTIFY_SIGNAL);
	return -ERESTARTNOINTR;
}

/*
 * Queue task work on @t, under the lock ss_sender_enter() and
 * ss_sender_leave() take: either it sees TIF_NOTIFY_SIGNAL set (or the
 * work pending), or we see its entry.  Inside a SEND, -EBUSY, or with
 * @resume the work waits for the SEND to return (TWA_RESUME).  Called with
 * BHs off.
 */
static int ss_task_work_add(struct task_struct *t, struct callback_head *cb,
			    bool resume)
{
	struct hlist_bl_head *h = ss_senders_head(t);
	struct hlist_bl_node *pos;
	struct ss_sender *s;
	int ret;

	hlist_bl_lock(h);
	hlist_bl_for_each_entry(s, pos, h, node) {
		if (s->task == t) {
			ret = resume ? task_work_add(t, cb, TWA_RESUME) : -EBUSY;
			hlist_bl_unlock(h);
			return ret;
		}
	}
	ret = task_work_add(t, cb, TWA_SIGNAL);
	hlist_bl_unlock(h);
	return ret;
}

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

static void ss_sock_get_ref(struct ss_sock *ss)
{
	refcount_inc(&ss->ref);
}

/*
 * A kernel thread drops the last reference to the socket (the process
 * that submitted is gone, or the device fd was closed by the kernel): a
 * lingering close would run in the kernel's shared delayed-fput work and
 * hold it up for as long as the peer keeps its window shut.  Close as a
 * socket without SO_LINGER does, in the background.  Not airtight: a
 * holder that drops its reference between the check and our fput()
 * makes ours the last with SO_LINGER still set, as for any file a kernel
 * thread happens to put last.
 */
static void ss_sock_unlinger(struct ss_sock *ss)
{
	struct sock *sk = ss->sock->sk;

	if (!(current->flags & PF_KTHREAD) || file_count(ss->file) != 1 ||
	    !sock_flag(sk, SOCK_LINGER))
		return;
	lock_sock(sk);
	sock_reset_flag(sk, SOCK_LINGER);
	release_sock(sk);
}

void ss_sock_put(struct ss_sock *ss)
{
	might_sleep();
	if (!refcount_dec_and_test(&ss->ref))
		return;
	/* Lookups skip a dead entry (refcount_inc_not_zero) until it is gone. */
	spin_lock(&ss_socks_lock);
	hash_del(&ss->hash);
	spin_unlock(&ss_socks_lock);
	/* After this no wakeup can be running or start... */
	remove_wait_queue(&ss->sock->wq.wait, &ss->wait);
	/*
	 * ...and nothing can arm the timer again.  Only ss_park() arms it
	 * (through ss_watch()), holding a reference, after setting
	 * @retry_used: the last put's acquire ordering
	 * (refcount_dec_and_test()) makes that seen here; the timer itself
	 * re-arms only while the FIFO has a request.
	 */
	if (ss->retry_used)
		timer_delete_sync(&ss->retry);
	ss_sock_unlinger(ss);
	fput(ss->file);
	ss_group_sock_gone(ss->group);
	kfree(ss);
}

/* The release group of @ss's socket (completion.c). */
struct ss_group *ss_sock_group(struct ss_sock *ss)
{
	return ss->group;
}

static struct ss_req *ss_head(struct ss_sock *ss)
{
	return list_first_entry_or_null(&ss->fifo, struct ss_req, fifo);
}

static void ss_req_tw(struct callback_head *cb);

static bool ss_task_ending(struct task_struct *t)
{
	return (READ_ONCE(t->flags) & PF_EXITING) || fatal_signal_pending(t);
}

/* A thread that can run our task work soon. */
static bool ss_task_ready(struct task_struct *t)
{
	return !ss_task_ending(t) && !(t->flags & (PF_IO_WORKER | PF_USER_WORKER));
}

/*
 * @req's process, unless it is gone or going (also set by the last
 * thread's exit(2): a zombie is gone).  Under rcu_read_lock().
 */
static struct task_struct *ss_live_process(struct ss_req *req)
{
	struct task_struct *p = pid_task(req->tgid, PIDTYPE_TGID);

	return p && !(READ_ONCE(p->signal->flags) & SIGNAL_GROUP_EXIT) ? p : NULL;
}

/*
 * Queue @req's task work on its submitter or, when that thread is on its
 * way out, on another thread of its process (same pid as far as the
 * socket layer is concerned; the credentials are the request's own).
 */
static bool ss_task_add(struct ss_req *req)
{
	struct task_struct *p, *t;
	bool queued = false;

	if (ss_task_ready(req->task) && !ss_task_work_add(req->task, &req->tw, false))
		return true;
	rcu_read_lock();
	p = ss_live_process(req);
	if (!p)
		goto out;
	/* Not inside a SEND, where TWA_SIGNAL would cut it short. */
	for_each_thread(p, t) {
		if (ss_task_ready(t) && !ss_task_work_add(t, &req->tw, false)) {
			queued = true;
			goto out;
		}
	}
	/* Only SEND callers: the next to return runs it. */
	for_each_thread(p, t) {
		if (ss_task_ready(t) && !ss_task_work_add(t, &req->tw, true)) {
			queued = true;
			goto out;
		}
	}
out:
	rcu_read_unlock();
	return queued;
}

/*
 * Have @req's process send it, in task work (see ss_task_add()), or, when
 * the process has exited, end it from stablesend_wq.  Safe in atomic
 * context: the caller holds ss->lock and @req is on the FIFO.
 */
static void ss_queue_tw(struct ss_sock *ss, struct ss_req *req)
{
	if (test_and_set_bit(SS_REQ_TW_PENDING, &req->tw_flags))
		return;
	refcount_inc(&req->ref);
	ss_sock_get_ref(ss);
	init_task_work(&req->tw, ss_req_tw);
	if (!ss_task_add(req))
		queue_work(stablesend_wq, &req->orphan);
}

/*
 * Is @req @t's to send: its own, or an asynchronous one of another thread
 * of @t's process (an io_uring thread's, which never sends, or one whose
 * thread has exited or is busy), which a SEND caller takes over rather
 * than wait for task work that may only run once that SEND returns?
 */
static bool ss_req_for(struct ss_req *req, struct task_struct *t)
{
	if (req->task == t)
		return true;
	return !req->sync && same_thread_group(req->task, t);
}

/*
 * The head request is ready to go on: tell whoever sends it.  Called with
 * ss->lock held, in any context.
 */
static void ss_notify(struct ss_sock *ss)
{
	struct ss_req *req = ss_head(ss);
	struct ss_waiter *w;

	/* Parked: space (or the retry timer) tells the head's task. */
	if (!req || ss->sending || ss->parked)
		return;
	/* A SEND caller sends its own request and its process's earlier ones. */
	list_for_each_entry(w, &ss->waiters, node) {
		if (ss_req_for(req, w->task)) {
			wake_up_all(&ss->turn);
			return;
		}
	}
	if (!req->sync)
		ss_queue_tw(ss, req);
}

/* Space or an error on the socket, or the retry timer: unpark. */
static void ss_unpark(struct ss_sock *ss)
{
	spin_lock(&ss->lock);
	if (ss->parked) {
		WRITE_ONCE(ss->parked, false);
		ss_notify(ss);
	}
	spin_unlock(&ss->lock);
}

/* Socket wait queue callback: runs with the queue's lock held, IRQs off. */
static int ss_wake(struct wait_queue_entry *wait, unsigned int mode, int sync,
		   void *key)
{
	struct ss_sock *ss = container_of(wait, struct ss_sock, wait);
	__poll_t mask = key_to_poll(key);

	if (mask && !(mask & (EPOLLOUT | EPOLLWRNORM | EPOLLERR | EPOLLHUP)))
		return 0;
	if (READ_ONCE(ss->parked))
		ss_unpark(ss);
	return 0;
}

static void ss_retry_fn(struct timer_list *t)
{
	struct ss_sock *ss = container_of(t, struct ss_sock, retry);
	struct ss_req *head;
	bool alive;

	spin_lock(&ss->lock);
	/* A watch of a parked FIFO: again while the head's process lives. */
	head = ss->watch && ss->parked ? ss_head(ss) : NULL;
	rcu_read_lock();
	alive = head && ss_live_process(head);
	rcu_read_unlock();
	if (alive) {
		mod_timer(&ss->retry, jiffies + SS_WATCH_PERIOD);
		spin_unlock(&ss->lock);
		return;
	}
	ss->watch = false;
	spin_unlock(&ss->lock);
	ss_unpark(ss);
}

/*
 * Parked on a full socket, nothing may ever wake us: a peer that keeps it
 * full may even hold the device fd and this very socket, passed to it
 * with SCM_RIGHTS, so that neither is ever closed while we hold the
 * socket.  So look from time to time whether the head's process is gone:
 * its requests then end (ss_notify(), orphan work), and our hold on the
 * socket with them.
 */
static void ss_watch(struct ss_sock *ss)
{
	spin_lock_bh(&ss->lock);
	if (ss->parked && !timer_pending(&ss->retry)) {
		ss->retry_used = true;
		ss->watch = true;
		mod_timer(&ss->retry, jiffies + SS_WATCH_PERIOD);
	}
	spin_unlock_bh(&ss->lock);
}

static bool ss_writable(struct ss_sock *ss)
{
	return vfs_poll(ss->file, NULL) & (EPOLLOUT | EPOLLERR | EPOLLHUP);
}

/*
 * Take a finished request off its FIFO, with its result (read under
 * ss->lock by a SEND caller that finds it done).  Called with ss->lock held.
 */
static void ss_unlink(struct ss_sock *ss, struct ss_req *req, s64 res)
{
	list_del(&req->fifo);
	req->state = SS_REQ_DONE;
	req->res = res;
	if (req->sync)	/* its caller may be waiting for its turn */
		wake_up_all(&ss->turn);
}

/*
 * Hand @req's bytes to the socket from req->sent on, as its submitter, at
 * most SS_SEND_CHUNK per sendmsg call.  Returns 0 when all went, the
 * socket's errno, or -EINTR when @stop() said so or *@budget (if any)
 * ran out between two calls.
 */
static int ss_xmit(struct ss_sock *ss, struct ss_req *req, int msg_flags,
		   bool (*stop)(struct ss_req *req), long *budget)
{
	const struct cred *old = NULL;
	struct sock *sk = ss->sock->sk;
	int ret = 0;

	if (req->cred != current_cred())
		old = override_creds(req->cred);
	/* Where its bytes start on a TCP connection: for the reaper's kicks. */
	if (!req->sent && sk_is_tcp(sk)) {
		req->start_seq = READ_ONCE(tcp_sk(sk)->write_seq);
		req->end_seq = req->start_seq;
		req->tcp = true;
	}
	while (req->sent < req->total) {
		struct msghdr msg = { .msg_flags = msg_flags };
		size_t left = req->total - req->sent;

		if (left <= SS_SEND_CHUNK && (req->flags & STABLESEND_REQ_MORE))
			msg.msg_flags |= MSG_MORE;
		iov_iter_bvec(&msg.msg_iter, ITER_SOURCE, req->bvec,
			      req->nr_send, req->total);
		iov_iter_advance(&msg.msg_iter, req->sent);
		iov_iter_truncate(&msg.msg_iter, SS_SEND_CHUNK);
		ret = stablesend_sendmsg(ss->sock, &msg);
		if (ret <= 0) {
			ret = ret ?: -EAGAIN;
			break;
		}
		if (req->tcp)	/* at least to its last byte so far */
			WRITE_ONCE(req->end_seq, READ_ONCE(tcp_sk(sk)->write_seq));
		/* After the sendmsg took its page references: ss_req_idle_pages(). */
		smp_store_release(&req->sent, req->sent + ret);
		if (req->sent == ret)
			ss_inflight_add(req, ss->group);	/* its pages may come back now */
		if (budget)
			*budget -= ret;
		ret = 0;
		if (req->sent < req->total &&
		    (stop(req) || (budget && *budget <= 0))) {
			ret = -EINTR;
			break;
		}
		cond_resched();
	}
	if (old)
		revert_creds(old);
	return ret;
}

/*
 * An asynchronous request pauses for a signal or once its sender has sent
 * SS_PUMP_BUDGET in one go (a fast reader would otherwise keep the
 * submitting call, or its task work, from returning), and resumes from the
 * retry timer; a close of the device fd (abort) is seen in between.
 */
static bool ss_async_stop(struct ss_req *req)
{
	return READ_ONCE(req->abort) || signal_pending(current);
}

/*
 * The head request could not go on: wait for space.  A wakeup that finds
 * @ss parked notifies the head's task.  When the socket refused although
 * poll says writable (TCP under memory pressure with a locked SO_SNDBUF,
 * or no memory for a socket buffer) try once more, then wait a little, as
 * sk_stream_wait_memory() does, instead of spinning; a signal interrupting
 * the send (kTLS's tx_lock) is also retried from the timer, once the
 * signal has been delivered.
 * Called with ss->lock held, which it drops.  Returns true to try again now.
 */
static bool ss_park(struct ss_sock *ss, bool intr, bool *retried)
	__releases(&ss->lock)
{
	WRITE_ONCE(ss->parked, true);
	spin_unlock_bh(&ss->lock);
	/* Parked before the socket state is read; pairs with the waker. */
	smp_mb();
	if (!intr && !ss_writable(ss)) {
		ss_watch(ss);
		return false;
	}
	spin_lock_bh(&ss->lock);
	if (!ss->parked) {
		/* Someone unparked meanwhile and told the head's task. */
		spin_unlock_bh(&ss->lock);
		return false;
	}
	if (intr || *retried) {
		ss->retry_used = true;
		ss->watch = false;
		mod_timer(&ss->retry, jiffies + 1 +
			  (intr ? 0 : get_random_u32_below(HZ / 5)));
		spin_unlock_bh(&ss->lock);
		return false;
	}
	WRITE_ONCE(ss->parked, false);
	spin_unlock_bh(&ss->lock);
	*retried = true;
	return true;
}

/*
 * Send the FIFO's head requests that belong to the current task, with
 * MSG_DONTWAIT, until the head is another task's (which is told) or the
 * socket is full: then we park, and space notifies the head's task again.
 * Called with a reference on @ss.
 */
static void ss_pump(struct ss_sock *ss)
{
	const int flags = MSG_SPLICE_PAGES | MSG_DONTWAIT | MSG_NOSIGNAL;
	long budget = SS_PUMP_BUDGET;
	bool retried = false;
	struct ss_req *req;
	int ret;

	for (;;) {
		spin_lock_bh(&ss->lock);
		req = ss_head(ss);
		/* Never io_uring's threads: their requests go to task work. */
		if (!req || ss->sending || req->task != current || req->sync ||
		    (current->flags & (PF_IO_WORKER | PF_USER_WORKER))) {
			ss_notify(ss);
			spin_unlock_bh(&ss->lock);
			return;
		}
		if (req->abort) {
			/* The device fd was closed: end it where it is. */
			ss_unlink(ss, req, req->sent ?: -ECANCELED);
			spin_unlock_bh(&ss->lock);
			ss_req_finish(req, req->res);
			continue;
		}
		if (ss_task_ending(current)) {
			/* Another thread of our process goes on, if any. */
			ss_queue_tw(ss, req);
			spin_unlock_bh(&ss->lock);
			return;
		}
		WRITE_ONCE(ss->parked, false);
		ss->sending = req;
		req->state = SS_REQ_STARTED;
		spin_unlock_bh(&ss->lock);

		ret = ss_xmit(ss, req, flags, ss_async_stop, &budget);

		spin_lock_bh(&ss->lock);
		ss->sending = NULL;
		if (!req->sent)	/* still cancellable */
			req->state = SS_REQ_QUEUED;
		if (req->abort) {
			/* The next pass ends it. */
			spin_unlock_bh(&ss->lock);
			continue;
		}
		if (ret == -ENOBUFS || ret == -ENOMEM) {
			/* No memory for socket buffers: wait a little, as TCP does. */
			retried = true;
			ret = -EAGAIN;
		}
		if (ret == -EAGAIN || ret == -EINTR || ret == -ERESTARTSYS) {
			if (ss_park(ss, ret != -EAGAIN, &retried))
				continue;
			return;
		}
		retried = false;
		ss_unlink(ss, req, ret ?: (s64)req->sent);
		spin_unlock_bh(&ss->lock);
		ss_req_finish(req, req->res);
	}
}

/*
 * Task work: the socket has space for @req, in its submitter's context,
 * or in another thread of its process that takes the request over.
 */
static void ss_req_tw(struct callback_head *cb)
{
	struct ss_req *req = container_of(cb, struct ss_req, tw);
	struct ss_sock *ss = req->sock;
	struct task_struct *old = NULL;

	spin_lock_bh(&ss->lock);
	clear_bit(SS_REQ_TW_PENDING, &req->tw_flags);
	if (req->task != current && req->state != SS_REQ_DONE) {
		old = req->task;
		req->task = get_task_struct(current);
	}
	spin_unlock_bh(&ss->lock);
	if (old)
		put_task_struct(old);
	ss_pump(ss);
	ss_sock_put(ss);
	/* Last: nothing may sleep after it (ss_exit()). */
	ss_req_put(req);
}

/* stablesend_wq: @req's submitter exited before it could send it; end it. */
void ss_req_orphan(struct work_struct *work)
{
	struct ss_req *req = container_of(work, struct ss_req, orphan);
	struct ss_sock *ss = req->sock;
	bool ended = false;

	spin_lock_bh(&ss->lock);
	clear_bit(SS_REQ_TW_PENDING, &req->tw_flags);
	if (req->state != SS_REQ_DONE && ss->sending != req) {
		ss_unlink(ss, req, req->sent ?: -ECANCELED);
		ended = true;
	}
	spin_unlock_bh(&ss->lock);
	if (ended)
		ss_req_finish(req, req->res);
	spin_lock_bh(&ss->lock);
	ss_notify(ss);
	spin_unlock_bh(&ss->lock);
	ss_sock_put(ss);
	ss_req_put(req);
}

static struct ss_sock *ss_sock_find(struct socket *sock)
{
	struct ss_sock *ss;

	hash_for_each_possible(ss_socks, ss, hash, (unsigned long)sock)
		if (ss->sock == sock && refcount_inc_not_zero(&ss->ref))
			return ss;
	return NULL;
}

/**
 * ss_sock_idle - nothing of the module's is queued on @sock
 * @sock:	a socket the caller holds
 *
 * Bytes the caller sends there now some other way overtake nobody's.
 */
bool ss_sock_idle(struct socket *sock)
{
	struct ss_sock *ss;
	bool idle;

	spin_lock(&ss_socks_lock);
	ss = ss_sock_find(sock);
	spin_unlock(&ss_socks_lock);
	if (!ss)
		return true;
	spin_lock_bh(&ss->lock);
	idle = list_empty(&ss->fifo) && !ss->sending;
	spin_unlock_bh(&ss->lock);
	ss_sock_put(ss);
	return idle;
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
	if (ss) {
		ss->group = ss_group_get(sock->sk);
		if (!ss->group) {
			kfree(ss);
			ss = NULL;
		}
	}
	if (!ss) {
		sockfd_put(sock);
		return NULL;
	}
	refcount_set(&ss->ref, 1);
	ss->sock = sock;
	ss->file = sock->file;
	spin_lock_init(&ss->lock);
	INIT_LIST_HEAD(&ss->fifo);
	INIT_LIST_HEAD(&ss->waiters);
	init_waitqueue_head(&ss->turn);
	timer_setup(&ss->retry, ss_retry_fn, 0);
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
	ss_group_sock_gone(ss->group);
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
 *
 * The caller then sends with ss_submit_send() or ss_sync_send(), which
 * drop the reference on the FIFO taken here for them: by then a CANCEL or
 * a close may have taken the request off the FIFO again.
 */
int ss_enqueue(struct ss_req *req, struct socket *sock)
{
	struct ss_ctx *ctx = req->ctx;
	struct ss_sock *ss;

	ss = ss_sock_get(sock);
	if (!ss)
		return -ENOMEM;
	/* The FIFO's reference, and one for the caller's first send. */
	ss_sock_get_ref(ss);
	req->sock = ss;
	req->state = SS_REQ_QUEUED;
	atomic64_inc(&stablesend_stats[SS_REQUESTS]);
	atomic64_inc(&stablesend_stats[SS_REQUESTS_IN_FLIGHT]);
	atomic64_add(req->charged, &stablesend_stats[SS_BYTES_IN_FLIGHT]);

	/*
	 * Both lists at once, in the order cancel takes the locks: a CANCEL
	 * that finds the request on ctx->queued must find it on the FIFO too.
	 */
	spin_lock(&ctx->lock);
	list_add_tail(&req->ctx_node, &ctx->queued);
	if (req->ring)
		ss_uring_queued(req);
	ctx->stats.submitted++;
	spin_lock_bh(&ss->lock);
	list_add_tail(&req->fifo, &ss->fifo);
	spin_unlock_bh(&ss->lock);
	spin_unlock(&ctx->lock);
	return 0;
}

/**
 * ss_submit_send - send what the socket takes now of a just queued request
 * @req:	an asynchronous request ss_enqueue() queued, with a reference
 *		(and the reference on its FIFO ss_enqueue() took)
 *
 * Sends, in the caller's context, the socket's head requests that the
 * caller submitted; the rest goes out from task work as space appears.
 */
void ss_submit_send(struct ss_req *req)
{
	struct ss_sock *ss = req->sock;

	ss_pump(ss);
	ss_sock_put(ss);
}

static bool ss_sync_stop(struct ss_req *req)
{
	return signal_pending(current);
}

/*
 * Can the SEND caller go on: @req done, or the head is its task's and
 * nobody is sending.  Called with ss->lock held.
 */
static bool ss_sync_turn(struct ss_sock *ss, struct ss_req *req)
{
	struct ss_req *head = ss_head(ss);

	if (req->state == SS_REQ_DONE)
		return true;
	return !ss->sending && head && ss_req_for(head, current) &&
	       (head == req || !ss->parked);
}

/**
 * ss_sync_send - transmit a synchronous request as sendfile(2) would
 * @req:	a request ss_enqueue() queued, with the caller's reference, from
 *		a task inside ss_sender_enter()
 *
 * Waits for the requests queued before it on the socket (sending the
 * caller's own), then sends it honouring the socket's O_NONBLOCK,
 * SO_SNDTIMEO and signals.  Returns the bytes sent (short when the socket
 * timed out, was non-blocking or a signal came), or -errno when none were.
 * The request is off the FIFO when this returns.
 */
long ss_sync_send(struct ss_req *req)
{
	struct ss_sock *ss = req->sock;
	bool nonblock = req->sock_nonblock;
	long timeo = sock_sndtimeo(ss->sock->sk, nonblock);
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	struct ss_waiter me = { .task = current };
	bool mine, turn;
	long err = 0;
	s64 res;

	add_wait_queue(&ss->turn, &wait);
	spin_lock_bh(&ss->lock);
	list_add(&me.node, &ss->waiters);
	for (;;) {
		struct task_struct *old = NULL;
		struct ss_req *head;

		turn = ss_sync_turn(ss, req);
		if (turn && (req->state == SS_REQ_DONE || ss_head(ss) == req))
			break;
		/* Another thread's request ahead of ours: ours to send. */
		head = ss_head(ss);
		if (turn && head->task != current) {
			old = head->task;
			head->task = get_task_struct(current);
		}
		spin_unlock_bh(&ss->lock);
		if (old)
			put_task_struct(old);
		if (signal_pending(current)) {
			err = sock_intr_errno(timeo);
		} else if (turn) {
			/* Our process's earlier requests: send them first. */
			ss_pump(ss);
		} else if (nonblock || !timeo) {
			err = -EAGAIN;
		} else {
			timeo = wait_woken(&wait, TASK_INTERRUPTIBLE, timeo);
		}
		spin_lock_bh(&ss->lock);
		if (err)
			break;
	}
	/* ss->lock held.  Not our turn (@err), or @req done or at the head. */
	list_del(&me.node);
	mine = req->state != SS_REQ_DONE;
	if (mine && !err) {
		ss->sending = req;
		WRITE_ONCE(ss->parked, false);
		req->state = SS_REQ_STARTED;
	} else {
		/* Not started: take it back, as if never called. */
		if (mine)
			ss_unlink(ss, req, err);
		/* Whoever is next was maybe told to wake us only. */
		ss_notify(ss);
	}
	res = req->res;
	spin_unlock_bh(&ss->lock);
	remove_wait_queue(&ss->turn, &wait);

	if (mine && !err) {
		int flags = MSG_SPLICE_PAGES | MSG_NOSIGNAL |
			    (nonblock ? MSG_DONTWAIT : 0);

		err = ss_xmit(ss, req, flags, ss_sync_stop, NULL);
		spin_lock_bh(&ss->lock);
		ss->sending = NULL;
		ss_unlink(ss, req, req->sent ?: err);
		/* Whatever is queued behind us goes on. */
		ss_notify(ss);
		res = req->res;
		spin_unlock_bh(&ss->lock);
	}
	if (mine)
		ss_req_finish(req, res);
	ss_sock_put(ss);
	/* Not mine: cancelled by STABLESEND_IOC_CANCEL before it started. */
	return res;
}

/*
 * Take @req off its FIFO if nobody has sent any of it yet; true if it was,
 * and the caller must then ss_req_finish() it.  Called with ctx->lock held.
 */
bool ss_cancel_req(struct ss_req *req)
{
	struct ss_sock *ss = req->sock;
	bool queued;

	spin_lock_bh(&ss->lock);
	queued = req->state == SS_REQ_QUEUED;
	if (queued) {
		ss_unlink(ss, req, -ECANCELED);
		ss_notify(ss);
	}
	spin_unlock_bh(&ss->lock);
	return queued;
}

/*
 * Stop @req after what the socket already took.  True if it was not being
 * sent and is now off the FIFO: the caller must ss_req_finish() it;
 * otherwise its sender stops after the current sendmsg and finishes it.
 * Called with ctx->lock held and @req on ctx->queued, which keeps req->sock
 * valid.
 */
bool ss_abort_req(struct ss_req *req)
{
	struct ss_sock *ss = req->sock;
	bool now = false;

	spin_lock_bh(&ss->lock);
	if (req->state != SS_REQ_DONE) {
		WRITE_ONCE(req->abort, true);
		now = ss->sending != req && !req->sync;
		if (now) {
			ss_unlink(ss, req, req->sent ?: -ECANCELED);
			ss_notify(ss);
		}
	}
	spin_unlock_bh(&ss->lock);
	return now;
}
