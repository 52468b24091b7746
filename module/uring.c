// SPDX-License-Identifier: GPL-2.0
/*
 * io_uring: STABLESEND_URING_CMD_SEND, an IORING_OP_URING_CMD on the device
 * fd.  It is an asynchronous request like one of SUBMIT's, snapshotted and
 * queued while io_uring issues the command and sent on by the issuing
 * task's process; its completion is the command's CQE instead of a record
 * on the open.  The command holds a reference on the request until that
 * CQE is posted: by the command's task (ss_uring_post()), or by io_uring's
 * cancel.
 * io_uring asks for the command back (its ring closes, its task execs)
 * through ->uring_cmd with IO_URING_F_CANCEL: the request then ends where
 * it is, as at a close of the device fd.  The command claims its CQE with
 * an xchg() on req->ucmd: whoever gets it posts it.
 */
#include <linux/sched/task.h>
#include <linux/task_work.h>
#include <linux/uaccess.h>

#include "ss.h"

struct ss_uring_pdu {
	struct ss_req *req;	/* set once queued, under ctx->lock */
	union {
		s32 res;	/* the CQE's, for task work (before 6.7) */
		u32 issue_flags; /* while issuing, until queued */
	};
	u32 marked;		/* on io_uring's cancelable list (or compat's) */
};

static struct ss_uring_pdu *ss_pdu(struct io_uring_cmd *cmd)
{
	BUILD_BUG_ON(sizeof(struct ss_uring_pdu) > STABLESEND_URING_PDU_SIZE);
	return (struct ss_uring_pdu *)cmd->pdu;
}

/* Task work of the command's task: post the CQE, drop the request. */
static void ss_uring_done(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	struct ss_uring_pdu *pdu = ss_pdu(cmd);
	struct ss_req *req = pdu->req;

	io_uring_cmd_done(cmd, pdu->res, issue_flags);
	ss_req_put(req);
}

STABLESEND_URING_TW(ss_uring_tw, ss_uring_done)

/**
 * ss_uring_mark - a command's request is about to be queued
 * @cmd:	the command, being issued
 *
 * Before the request is queued, where another thread may end it: its CQE
 * must not come before io_uring knows the command is cancelable.  Every
 * error from here on is posted with io_uring_cmd_done(), which takes the
 * command off the cancelable list again.
 */
void ss_uring_mark(struct io_uring_cmd *cmd)
{
	struct ss_uring_pdu *pdu = ss_pdu(cmd);

	io_uring_cmd_mark_cancelable(cmd, pdu->issue_flags);
	pdu->marked = 1;
}

/**
 * ss_uring_queued - a command's request is on its open's queue
 * @req:	the request; called with ctx->lock held
 *
 * From now on a cancel finds it, and it may complete.  The command holds
 * a reference of its own until its CQE is posted.
 */
void ss_uring_queued(struct ss_req *req)
{
	ss_pdu(req->ucmd)->req = req;
	refcount_inc(&req->ref);
}

/* Post the CQE of @cmd, which the caller claimed from req->ucmd, as task work. */
static void ss_uring_post_tw(struct io_uring_cmd *cmd, s64 res)
{
	/* A request holds at most INT_MAX bytes (the open's limit). */
	ss_pdu(cmd)->res = res;
	io_uring_cmd_complete_in_task(cmd, ss_uring_tw);
}

#ifdef HAVE_IO_URING_CMD_CANCELABLE
/*
 * A command's CQE, once its request ended, is io_uring_cmd_done() from
 * the module's task work on the command's task, or from io_uring's cancel
 * if that comes first: whoever takes req->cqe_cmd.  Not io_uring's own
 * task work (io_uring_cmd_complete_in_task()): a command whose CQE waits
 * there stays on io_uring's cancelable list, and a closing ring's exit
 * work (or an exec) calls its cancel in a loop until the task runs that
 * work, which a task asleep killably (vfork(), a stopped process) may
 * not do for as long as it likes, nor one whose ring runs task work only
 * when it waits for CQEs (IORING_SETUP_DEFER_TASKRUN).
 */
static void ss_uring_post_fn(struct callback_head *cb)
{
	struct ss_req *req = container_of(cb, struct ss_req, cqe_tw);
	struct io_uring_cmd *cmd = xchg(&req->cqe_cmd, NULL);

	if (cmd) {
		/* Task work: no io_uring lock held. */
		io_uring_cmd_done(cmd, req->cqe_res, IO_URING_F_UNLOCKED);
		ss_req_put(req);	/* the command's */
	}
	ss_req_put(req);
}

/* Post @cmd's CQE, claimed from req->ucmd; any process context. */
static void ss_uring_post(struct ss_req *req, struct io_uring_cmd *cmd,
			  s64 res)
{
	struct task_struct *t = stablesend_uring_cmd_task(cmd);
	int err = -ESRCH;

	/* Once @cqe_cmd is out, a cancel may free the command, and its task. */
	if (t)
		get_task_struct(t);
	/* A request holds at most INT_MAX bytes (the open's limit). */
	req->cqe_res = res;
	refcount_inc(&req->ref);
	/* @cqe_res first: whoever takes @cqe_cmd (xchg, cmpxchg) reads it. */
	smp_store_release(&req->cqe_cmd, cmd);
	init_task_work(&req->cqe_tw, ss_uring_post_fn);
	if (t) {
		/* As io_uring's own: a blocking call of @t may restart. */
		err = task_work_add(t, &req->cqe_tw, TWA_SIGNAL);
		put_task_struct(t);
	}
	if (!err)
		return;
	/*
	 * The task is past running task work: io_uring's own task work then
	 * goes to the ring's fallback work, which its exit flushes.  (Task
	 * unknown, without io_uring_cmd_get_task(): the task's, as before.)
	 * Unless a cancel posted the CQE meanwhile.
	 */
	if (xchg(&req->cqe_cmd, NULL) == cmd)
		ss_uring_post_tw(cmd, res);
	ss_req_put(req);
}

/* io_uring's cancel: a CQE decided but not posted yet goes now. */
static void ss_uring_cancel_post(struct ss_req *req, struct io_uring_cmd *cmd,
				 unsigned int issue_flags)
{
	if (cmpxchg(&req->cqe_cmd, cmd, NULL) != cmd)
		return;
	io_uring_cmd_done(cmd, req->cqe_res, issue_flags);
	ss_req_put(req);	/* the command's; the poster keeps its own */
}
#else
/* Before 6.7 io_uring never calls a cancel in a loop: its task work. */
static void ss_uring_post(struct ss_req *req, struct io_uring_cmd *cmd,
			  s64 res)
{
	ss_uring_post_tw(cmd, res);
}

static void ss_uring_cancel_post(struct ss_req *req, struct io_uring_cmd *cmd,
				 unsigned int issue_flags)
{
}
#endif

/**
 * ss_uring_complete - post a command's CQE, once
 * @req:	the request
 * @res:	bytes sent, or -errno
 *
 * Any process context but io_uring's cancel, which posts it itself.
 * Later calls do nothing.
 */
void ss_uring_complete(struct ss_req *req, s64 res)
{
	struct io_uring_cmd *cmd = xchg(&req->ucmd, NULL);

	if (cmd)
		ss_uring_post(req, cmd, res);
}

/*
 * io_uring wants the command back (its ring is closing, or its task
 * execs).  The CQE goes now, with the request's result if it ended, else
 * what the socket took so far (-ECANCELED: nothing): not started, the
 * request is cancelled; started, it stops after what the socket took (its
 * sender finishes it, when one is inside sendmsg now); finished and
 * waiting for its pages, it no longer holds the ring, nor is it kicked
 * for (ss_inflight_unwant()); its CQE decided but not posted yet, it is
 * posted now (ss_uring_cancel_post()).  io_uring asks again while the
 * command is on its list: between its mark and its queueing (an issue
 * from io-wq).  The cancel before 6.7 (compat/uring.c) holds no io_uring
 * lock: it posts from task work, and leaves a decided CQE to its task
 * work.
 */
static void ss_uring_cancel(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	struct ss_ctx *ctx = cmd->file->private_data;
	bool queued, now = false;
	struct ss_req *req;
	s64 res;

	/*
	 * A DEFER_TASKRUN ring takes CQEs from its task only: elsewhere (its
	 * exit work, the task alive) the CQE goes through io_uring's task
	 * work, and the command off the cancelable list at once.
	 */
	if (stablesend_uring_cmd_defer_taskrun(cmd) &&
	    current != stablesend_uring_cmd_task(cmd))
		issue_flags &= ~IO_URING_F_COMPLETE_DEFER;
	spin_lock(&ctx->lock);
	req = ss_pdu(cmd)->req;
	if (!req || xchg(&req->ucmd, NULL) != cmd) {
		spin_unlock(&ctx->lock);
		/*
		 * Still on io_uring's list, the command holds @req: its
		 * poster takes the command off only in io_uring_cmd_done(),
		 * which waits for the lock io_uring holds around this call.
		 */
		if (req && !(issue_flags & STABLESEND_URING_F_WATCHER))
			ss_uring_cancel_post(req, cmd, issue_flags);
		return;
	}
	queued = !list_empty(&req->ctx_node);
	if (queued)
		now = ss_cancel_req(req) || ss_abort_req(req);
	spin_unlock(&ctx->lock);
	/* Its CQE goes now: nobody waits for its pages any more. */
	ss_inflight_unwant(req);
	if (now)
		ss_req_finish(req, req->res);	/* the CQE is ours: it posts none */
	res = now || !queued ? req->res : (READ_ONCE(req->sent) ?: -ECANCELED);
	if (issue_flags & STABLESEND_URING_F_WATCHER) {
		ss_uring_post_tw(cmd, res);
		return;
	}
	io_uring_cmd_done(cmd, res, issue_flags);
	ss_req_put(req);
}

/**
 * ss_uring_cmd - the device's ->uring_cmd
 * @cmd:	the command
 * @issue_flags: io_uring's IO_URING_F_*
 *
 * Return: -EIOCBQUEUED once the command is io_uring's to complete through
 * io_uring_cmd_done(), else an error for its CQE.
 */
int ss_uring_cmd(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	struct ss_ctx *ctx = cmd->file->private_data;
	bool inline_issue = issue_flags & IO_URING_F_NONBLOCK;
	const struct stablesend_uring_cmd *area;
	struct ss_uring_pdu *pdu = ss_pdu(cmd);
	struct stablesend_req ur;
	struct ss_req *req;
	bool wait;
	u32 flags;
	u64 uptr;
	int err;

	if (issue_flags & IO_URING_F_CANCEL) {
		ss_uring_cancel(cmd, issue_flags);
		return 0;
	}
	if (cmd->cmd_op != STABLESEND_URING_CMD_SEND)
		return -EINVAL;
	/* Registered buffers, multishot. */
	if (cmd->flags & IORING_URING_CMD_MASK)
		return -EOPNOTSUPP;
	/* The SQE is in memory the application can still write: read once. */
	area = stablesend_uring_cmd_area(cmd, struct stablesend_uring_cmd);
	flags = READ_ONCE(area->flags);
	if ((flags & ~STABLESEND_URING_F_WAIT) || READ_ONCE(area->reserved))
		return -EINVAL;
	uptr = READ_ONCE(area->req);
	if (copy_from_user(&ur, u64_to_user_ptr(uptr), sizeof(ur)))
		return -EFAULT;

	pdu->req = NULL;
	pdu->issue_flags = issue_flags;
	pdu->marked = 0;
	stablesend_uring_unmarked(cmd);
	/* Waits for memory only where io_uring lets it block: its worker. */
	wait = (flags & STABLESEND_URING_F_WAIT) && !inline_issue;
	req = ss_submit_uring(ctx, &ur, cmd, !wait);
	if (IS_ERR(req)) {
		err = PTR_ERR(req);
		/* In io_uring's worker a signal is its cancel. */
		if (err == -ERESTARTSYS)
			err = inline_issue ? -EINTR : -ECANCELED;
		/* No memory now: io_uring issues it again from its worker. */
		if (err == -EAGAIN && (flags & STABLESEND_URING_F_WAIT) &&
		    inline_issue && !pdu->marked) {
			stablesend_uring_keep_sqe(cmd, issue_flags);
			return -EAGAIN;
		}
		/* Posted by io_uring, but -EAGAIN would make it retry. */
		if (!pdu->marked && err != -EAGAIN)
			return err;
		io_uring_cmd_done(cmd, err, issue_flags);
		return -EIOCBQUEUED;
	}
	/* What the socket takes now goes out here; the CQE comes as task work. */
	ss_submit_send(req);
	ss_req_put(req);
	return -EIOCBQUEUED;
}
