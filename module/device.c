// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/stablesend: one context per open.  ioctl submits and configures,
 * read(2) returns completion records, poll(2) says when there are some.
 */
#include <linux/eventfd.h>
#include <linux/fs.h>
#include <linux/kobject.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/sched/signal.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/sysfs.h>
#include <linux/uaccess.h>

#include "ss.h"

#define SS_FEATURES	(STABLESEND_FEAT_SUBMIT | STABLESEND_FEAT_SEND |	\
			 STABLESEND_FEAT_HDTR | STABLESEND_FEAT_CANCEL |	\
			 STABLESEND_FEAT_RELEASE | STABLESEND_FEAT_TCP |	\
			 STABLESEND_FEAT_UNIX | STABLESEND_FEAT_KTLS |		\
			 STABLESEND_FEAT_SPLICE_PAGES |				\
			 STABLESEND_FEAT_SEND_SOCKFLAGS | STABLESEND_FEAT_NOWAIT | \
			 (IS_ENABLED(CONFIG_IO_URING) ? STABLESEND_FEAT_URING : 0))

/* An open's limit: no more than a synchronous result or its user may hold. */
static u64 ss_limit(struct ss_ctx *ctx, u64 limit)
{
	u64 user = READ_ONCE(stablesend_user_limit);

	limit = min_t(u64, limit, INT_MAX);
	if (!ctx->unbounded)
		limit = min(limit, user);
	return max_t(u64, limit, PAGE_SIZE);
}

static int ss_open(struct inode *inode, struct file *file)
{
	struct ss_ctx *ctx;
	int order, err;

	ctx = ss_ctx_alloc();
	if (!ctx)
		return -ENOMEM;
	kref_init(&ctx->ref);
	spin_lock_init(&ctx->lock);
	mutex_init(&ctx->reserve_lock);
	INIT_LIST_HEAD(&ctx->queued);
	INIT_LIST_HEAD(&ctx->cq);
	INIT_LIST_HEAD(&ctx->inflight);
	init_waitqueue_head(&ctx->cq_wait);
	init_waitqueue_head(&ctx->mem_wait);
	for (order = 0; order <= SS_CHUNK_ORDER; order++)
		INIT_LIST_HEAD(&ctx->pool[order]);
	err = ss_user_attach(ctx);
	if (err) {
		ss_ctx_dealloc(ctx);
		return err;
	}
	ctx->mem_limit = ss_limit(ctx, READ_ONCE(stablesend_default_limit));
	/* Requests outlive the fd; the context keeps the module for them. */
	__module_get(THIS_MODULE);
	atomic64_inc(&stablesend_stats[SS_CONTEXTS]);
	file->private_data = ctx;
	return stream_open(inode, file);
}

/*
 * Closing cancels what has not started and stops what has after the bytes
 * the socket already took; it never waits for a peer or for a sender.
 * Idle pooled pages are freed at once.  Pages still in the
 * network stack are freed by the reaper once the stack lets go of them.
 */
static int ss_release(struct inode *inode, struct file *file)
{
	struct ss_ctx *ctx = file->private_data;
	struct ss_cqe_node *node, *ntmp;
	struct ss_req *req, *tmp;
	LIST_HEAD(cancelled);
	LIST_HEAD(records);
	unsigned int unread;

	spin_lock(&ctx->lock);
	WRITE_ONCE(ctx->closed, true);
	list_splice_init(&ctx->cq, &records);
	unread = ctx->cq_nr;
	ctx->cq_nr = 0;
	/* A request being sent stays: its sender stops after this sendmsg. */
	list_for_each_entry_safe(req, tmp, &ctx->queued, ctx_node)
		if (ss_cancel_req(req) || ss_abort_req(req))
			list_move_tail(&req->ctx_node, &cancelled);
	spin_unlock(&ctx->lock);

	list_for_each_entry_safe(req, tmp, &cancelled, ctx_node)
		ss_req_finish(req, req->sent ?: -ECANCELED);
	list_for_each_entry_safe(node, ntmp, &records, node)
		kfree(node);
	ss_user_records_uncharge(ctx, unread);
	ss_room_unpoll(ctx);
	ss_inflight_closed(ctx);
	ss_pool_drain(ctx);
	ss_ctx_put(ctx);
	return 0;
}

static long ss_ioctl_setup(struct ss_ctx *ctx, void __user *arg)
{
	struct eventfd_ctx *evfd = NULL;
	struct stablesend_setup s;
	u64 limit;
	int err;

	if (copy_from_user(&s, arg, sizeof(s)))
		return -EFAULT;
	if (s.flags || s.reserved0 || memchr_inv(s.reserved, 0, sizeof(s.reserved)))
		return -EINVAL;
	limit = s.mem_limit ?: READ_ONCE(stablesend_default_limit);
	/* A synchronous result (an int) must hold every byte of a request. */
	if (limit < PAGE_SIZE ||
	    limit > min_t(unsigned long, READ_ONCE(stablesend_max_limit), INT_MAX))
		return -EINVAL;
	/* Above its user's bound: what the user may hold (reported back). */
	limit = ss_limit(ctx, limit);
	if (s.eventfd != -1) {
		evfd = eventfd_ctx_fdget(s.eventfd);
		if (IS_ERR(evfd))
			return PTR_ERR(evfd);
	}

	spin_lock(&ctx->lock);
	err = ctx->setup_done ? -EBUSY : 0;
	if (!err) {
		ctx->setup_done = true;
		ctx->evfd = evfd;
		WRITE_ONCE(ctx->mem_limit, limit);
	}
	spin_unlock(&ctx->lock);
	if (err) {
		if (evfd)
			eventfd_ctx_put(evfd);
		return err;
	}

	s.mem_limit = limit;
	s.features = SS_FEATURES;
	s.abi_version = STABLESEND_ABI_VERSION;
	if (copy_to_user(arg, &s, sizeof(s)))
		return -EFAULT;
	return 0;
}

/* The open's counters; returns the bytes idle on its pool. */
static u64 ss_counters(struct ss_ctx *ctx, struct stablesend_counters *c)
{
	u64 pooled;

	spin_lock(&ctx->lock);
	*c = ctx->stats;
	c->mem_in_use = ctx->mem_used;
	c->mem_limit = ctx->mem_limit;
	c->cqes_pending = ctx->cq_nr;
	pooled = ctx->pooled;
	spin_unlock(&ctx->lock);
	return pooled;
}

static long ss_ioctl_counters(struct ss_ctx *ctx, void __user *arg)
{
	struct stablesend_counters c;

	ss_counters(ctx, &c);
	return copy_to_user(arg, &c, sizeof(c)) ? -EFAULT : 0;
}

static long ss_ioctl_cancel(struct ss_ctx *ctx, u64 __user *arg)
{
	struct ss_req *req, *tmp;
	LIST_HEAD(cancelled);
	u64 user_data;
	long n = 0;

	if (get_user(user_data, arg))
		return -EFAULT;
	spin_lock(&ctx->lock);
	list_for_each_entry_safe(req, tmp, &ctx->queued, ctx_node)
		if (req->user_data == user_data && ss_cancel_req(req))
			list_move_tail(&req->ctx_node, &cancelled);
	spin_unlock(&ctx->lock);
	list_for_each_entry_safe(req, tmp, &cancelled, ctx_node) {
		ss_req_finish(req, -ECANCELED);
		n++;
	}
	return n ?: -ENOENT;
}

static long ss_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct ss_ctx *ctx = file->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case STABLESEND_IOC_SETUP:
		return ss_ioctl_setup(ctx, uarg);
	case STABLESEND_IOC_SUBMIT:
		return ss_submit(ctx, file, uarg);
	case STABLESEND_IOC_SEND:
		return ss_send_sync(ctx, file, uarg);
	case STABLESEND_IOC_CANCEL:
		return ss_ioctl_cancel(ctx, uarg);
	case STABLESEND_IOC_COUNTERS:
		return ss_ioctl_counters(ctx, uarg);
	default:
		return -ENOTTY;
	}
}

/* Move up to @max records off the queue, oldest first. */
static unsigned int ss_take_records(struct ss_ctx *ctx, struct list_head *out,
				    unsigned int max)
{
	unsigned int n = 0;

	spin_lock(&ctx->lock);
	while (n < max && !list_empty(&ctx->cq)) {
		list_move_tail(ctx->cq.next, out);
		n++;
	}
	ctx->cq_nr -= n;
	spin_unlock(&ctx->lock);
	return n;
}

/* A reader waits for records: room for requests (EPOLLOUT) is no news. */
static int ss_read_wake(struct wait_queue_entry *wait, unsigned int mode,
			int sync, void *key)
{
	if (key && !(key_to_poll(key) & EPOLLIN))
		return 0;
	return autoremove_wake_function(wait, mode, sync, key);
}

static int ss_wait_records(struct ss_ctx *ctx)
{
	DEFINE_WAIT_FUNC(wait, ss_read_wake);
	int err = 0;

	for (;;) {
		prepare_to_wait(&ctx->cq_wait, &wait, TASK_INTERRUPTIBLE);
		if (READ_ONCE(ctx->cq_nr))
			break;
		if (signal_pending(current)) {
			err = -ERESTARTSYS;
			break;
		}
		schedule();
	}
	finish_wait(&ctx->cq_wait, &wait);
	return err;
}

static ssize_t ss_read(struct file *file, char __user *buf, size_t count,
		       loff_t *ppos)
{
	const size_t rec = sizeof(struct stablesend_cqe);
	struct ss_ctx *ctx = file->private_data;
	struct ss_cqe_node *node, *tmp;
	unsigned int max, n;
	LIST_HEAD(records);
	ssize_t done = 0;

	if (count < rec)
		return -EINVAL;
	max = min_t(size_t, count / rec, SS_CQ_MAX);
	while (!(n = ss_take_records(ctx, &records, max))) {
		if (file->f_flags & O_NONBLOCK)
			return -EAGAIN;
		if (ss_wait_records(ctx))
			return -ERESTARTSYS;
	}
	list_for_each_entry_safe(node, tmp, &records, node) {
		if (copy_to_user(buf + done, &node->cqe, rec))
			break;
		list_del(&node->node);
		kfree(node);
		done += rec;
		n--;
	}
	if (n) {
		/* Put back what could not be copied, in order. */
		spin_lock(&ctx->lock);
		list_splice(&records, &ctx->cq);
		ctx->cq_nr += n;
		spin_unlock(&ctx->lock);
		/* Others may have found none meanwhile, and sleep. */
		wake_up_interruptible_poll(&ctx->cq_wait, EPOLLIN | EPOLLRDNORM);
	}
	/* Those read (not those put back) are free: after the open's count. */
	ss_user_records_uncharge(ctx, done / rec);
	return done ?: -EFAULT;
}

static __poll_t ss_poll(struct file *file, struct poll_table_struct *pt)
{
	struct ss_ctx *ctx = file->private_data;
	__poll_t mask = 0;

	/* One wait queue: records and room (ss_room_poll()) both wake it. */
	poll_wait(file, &ctx->cq_wait, pt);
	/* Against wakers that look for sleepers first (wq_has_sleeper()). */
	smp_mb();
	if (READ_ONCE(ctx->cq_nr))
		mask |= EPOLLIN | EPOLLRDNORM;
	if (ss_room(ctx) ||
	    (poll_requested_events(pt) & EPOLLOUT && ss_room_poll(ctx)))
		mask |= EPOLLOUT | EPOLLWRNORM;
	return mask;
}

/*
 * /proc/PID/fdinfo/FD: what this open holds, for an admin looking for the
 * processes that use the module (stablesend status).
 */
static void ss_show_fdinfo(struct seq_file *m, struct file *file)
{
	struct ss_ctx *ctx = file->private_data;
	struct stablesend_counters c;
	u64 pooled = ss_counters(ctx, &c);

	seq_printf(m, "stablesend-submitted:\t%llu\n", c.submitted);
	seq_printf(m, "stablesend-completed:\t%llu\n", c.completed);
	seq_printf(m, "stablesend-failed:\t%llu\n", c.failed);
	seq_printf(m, "stablesend-bytes-sent:\t%llu\n", c.bytes_sent);
	seq_printf(m, "stablesend-mem-in-use:\t%llu\n", c.mem_in_use);
	seq_printf(m, "stablesend-mem-pooled:\t%llu\n", pooled);
	seq_printf(m, "stablesend-mem-peak:\t%llu\n", c.mem_peak);
	seq_printf(m, "stablesend-mem-limit:\t%llu\n", c.mem_limit);
	seq_printf(m, "stablesend-records-pending:\t%llu\n", c.cqes_pending);
	ss_user_show_fdinfo(m, ctx);
}

static const struct file_operations ss_fops = {
	.owner		= THIS_MODULE,
	.open		= ss_open,
	.release	= ss_release,
	.read		= ss_read,
	.poll		= ss_poll,
	.unlocked_ioctl	= ss_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
#ifdef CONFIG_IO_URING
	.uring_cmd	= ss_uring_cmd,
#endif
	.llseek		= noop_llseek,
	.show_fdinfo	= ss_show_fdinfo,
};

static const char *const ss_stat_names[SS_NR_STATS] = {
	[SS_REQUESTS]		= "requests",
	[SS_BYTES_SENT]		= "bytes_sent",
	[SS_ERRORS]		= "errors",
	[SS_COPIED]		= "copied",
	[SS_REQUESTS_IN_FLIGHT]	= "requests_in_flight",
	[SS_BYTES_IN_FLIGHT]	= "bytes_in_flight",
	[SS_POOL_BYTES]		= "pool_bytes",
	[SS_POOL_IDLE_BYTES]	= "pool_idle_bytes",
	[SS_ORDER0_FALLBACKS]	= "order0_fallbacks",
	[SS_CONTEXTS]		= "contexts",
	[SS_RX_KICKS]		= "rx_kicks",
	[SS_REAP_CHECKS]	= "reap_checks",
};

static struct kobj_attribute ss_stat_kattrs[SS_NR_STATS];
static struct attribute *ss_stat_attrs[SS_NR_STATS + 1];
static struct kobject *ss_stat_kobj;

/* @attr is one of ss_stat_kattrs[]: its index is the counter's. */
static ssize_t ss_stat_show(struct kobject *kobj, struct kobj_attribute *attr,
			    char *buf)
{
	long long v = atomic64_read(&stablesend_stats[attr - ss_stat_kattrs]);

	return sysfs_emit(buf, "%lld\n", v);
}

static const struct attribute_group ss_stat_group = {
	.attrs	= ss_stat_attrs,
};

static struct miscdevice ss_misc = {
	.minor	= MISC_DYNAMIC_MINOR,
	.name	= "stablesend",
	.fops	= &ss_fops,
	.mode	= 0666,
};

/* The counters, one file each in /sys/module/stablesend/stats/. */
static int __init ss_stat_init(void)
{
	int i, err;

	for (i = 0; i < SS_NR_STATS; i++) {
		struct kobj_attribute *ka = &ss_stat_kattrs[i];

		sysfs_attr_init(&ka->attr);
		ka->attr.name = ss_stat_names[i];
		ka->attr.mode = 0444;
		ka->show = ss_stat_show;
		ss_stat_attrs[i] = &ka->attr;
	}
	/* Holds the module's kobject: put on every path out of init. */
	ss_stat_kobj = kobject_create_and_add("stats",
					      &THIS_MODULE->mkobj.kobj);
	if (!ss_stat_kobj)
		return -ENOMEM;
	err = sysfs_create_group(ss_stat_kobj, &ss_stat_group);
	if (err) {
		kobject_put(ss_stat_kobj);
		ss_stat_kobj = NULL;
	}
	return err;
}

int __init ss_device_init(void)
{
	int err = ss_stat_init();

	if (err)
		return err;
	err = misc_register(&ss_misc);
	if (err) {
		kobject_put(ss_stat_kobj);
		ss_stat_kobj = NULL;
	}
	return err;
}

void ss_device_exit(void)
{
	misc_deregister(&ss_misc);
	kobject_put(ss_stat_kobj);
	ss_stat_kobj = NULL;
}
