// SPDX-License-Identifier: GPL-2.0
/*
 * Cancelable io_uring commands before 6.7.
 *
 * Since 93b8cc60c37b ("io_uring: cancelable uring_cmd") io_uring calls a
 * marked command's ->uring_cmd with IO_URING_F_CANCEL when its ring is
 * closed or its task cancels all its requests (exec, an SQPOLL thread
 * killed).  Before it nothing tells a driver, and a command that waits
 * for a peer would keep its ring (and the exit work that frees it), or
 * an exec, forever.  Here the marked commands are looked at four times a
 * second while there are any: one whose ring is dying (its reference
 * count killed at the close) or whose task's io_uring context is
 * cancelling (in_idle) gets the same call.  A command leaves the watch
 * when it is completed (io_uring_cmd_done(), compat.h).
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

static bool ss_watch_gone(struct io_uring_cmd *cmd)
{
	struct io_kiocb *req = cmd_to_io_kiocb(cmd);

	/* The request pins its task, which keeps its io_uring context. */
	return percpu_ref_is_dying(&req->ctx->refs) ||
	       atomic_read(&req->task->io_uring->in_idle);
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
