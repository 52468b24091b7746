// SPDX-License-Identifier: GPL-2.0
/*
 * io_uring commands on older kernels: cancelable commands before 6.7, and
 * the SQE a command leaves for io_uring's worker on 6.12.
 *
 * Since 93b8cc60c37b ("io_uring: cancelable uring_cmd") io_uring calls a
 * marked command's ->uring_cmd with IO_URING_F_CANCEL when its ring is
 * closed or its task cancels all its requests (exec, an SQPOLL thread
 * killed).  Before it nothing tells a driver, and a command that waits
 * for a peer would keep its ring (and the exit work that frees it), or
 * an exec, forever.  Here the marked commands are looked at four times a
 * second while there are any: one whose ring is dying (its reference
 * count killed at the close) or whose task's io_uring context is
 * cancelling all its requests (ss_watch_gone()) gets the same call.  A
 * command leaves the watch when it is completed (io_uring_cmd_done(),
 * compat.h).
 */
#if defined(CONFIG_IO_URING) && !defined(HAVE_IO_URING_CMD_CANCELABLE)
#include <linux/fs.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/percpu-refcount.h>
#include <linux/sched.h>
#include <linux/workqueue.h>

static LIST_HEAD(ss_watched);
static DEFINE_MUTEX(ss_watch_lock);
static void ss_watch_fn(struct work_struct *work);
static DECLARE_DELAYED_WORK(ss_watch_work, ss_watch_fn);

/* The last bytes of the pdu: see STABLESEND_URING_PDU_SIZE. */
static struct list_head *ss_watch_node(struct io_uring_cmd *cmd)
{
	return (void *)cmd + offsetofend(struct io_uring_cmd, pdu) -
	       sizeof(struct list_head);
}

void stablesend_uring_watch(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	mutex_lock(&ss_watch_lock);
	if (list_empty(&ss_watched))
		schedule_delayed_work(&ss_watch_work, HZ / 4);
	list_add_tail(ss_watch_node(cmd), &ss_watched);
	mutex_unlock(&ss_watch_lock);
}

/* At issue: not watched (the pdu holds whatever the last request left). */
void stablesend_uring_unmarked(struct io_uring_cmd *cmd)
{
	INIT_LIST_HEAD(ss_watch_node(cmd));
}

void stablesend_uring_unwatch(struct io_uring_cmd *cmd)
{
	struct list_head *node = ss_watch_node(cmd);

	mutex_lock(&ss_watch_lock);
	list_del_init(node);
	mutex_unlock(&ss_watch_lock);
}

/*
 * The ring is closed, or the submitting task cancels all its requests:
 * it execs, or it is an SQPOLL thread going away.  A thread that exits
 * also leaves in_idle set (io_uring_files_cancel()), but keeps the
 * commands io_uring does not track: they go on (another thread sends).
 */
static bool ss_watch_gone(struct io_uring_cmd *cmd)
{
	struct io_kiocb *req = cmd_to_io_kiocb(cmd);
	struct task_struct *task = req->task;

	/* The request pins its task, which keeps its io_uring context. */
	return percpu_ref_is_dying(&req->ctx->refs) ||
	       (atomic_read(&task->io_uring->in_idle) &&
		(task->in_execve || (READ_ONCE(task->flags) & PF_IO_WORKER)));
}

/*
 * The cancel call (STABLESEND_URING_F_WATCHER) completes nothing
 * synchronously: its CQE comes from task work, which takes the lock to
 * leave the list.  So it is made with the lock held, and every command on
 * the list is alive.
 */
static void ss_watch_fn(struct work_struct *work)
{
	struct list_head *node;

	mutex_lock(&ss_watch_lock);
	list_for_each(node, &ss_watched) {
		struct io_uring_cmd *cmd = (void *)node -
			offsetofend(struct io_uring_cmd, pdu) +
			sizeof(struct list_head);

		if (ss_watch_gone(cmd))
			cmd->file->f_op->uring_cmd(cmd, IO_URING_F_CANCEL |
						   STABLESEND_URING_F_WATCHER);
	}
	if (!list_empty(&ss_watched))
		schedule_delayed_work(&ss_watch_work, HZ / 4);
	mutex_unlock(&ss_watch_lock);
}

void stablesend_uring_watch_exit(void)
{
	cancel_delayed_work_sync(&ss_watch_work);
}
#endif

#if defined(CONFIG_IO_URING) && defined(STABLESEND_URING_KEEP_SQE)
#include <linux/string.h>

/*
 * A command's SQE for io_uring's worker.  6.12 allocates the request's
 * async data at prep and copies the SQE into it when the command returns
 * -EAGAIN, but leaves ->sqe on the SQ entry, which is the application's
 * again once io_uring_enter(2) returns: the worker would issue whatever
 * the entry holds by then.  Copy it first and point ->sqe at the copy,
 * which io_uring then keeps.  Where the async data is allocated only at
 * the punt (no async data yet here), io_uring copies and moves ->sqe itself.
 */
void stablesend_uring_keep_sqe(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	struct io_kiocb *req = cmd_to_io_kiocb(cmd);
	size_t size = sizeof(struct io_uring_sqe) <<
		      !!(issue_flags & IO_URING_F_SQE128);

	if (!req->async_data || cmd->sqe == req->async_data)
		return;
	memcpy(req->async_data, cmd->sqe, size);
	cmd->sqe = req->async_data;
}
#endif
