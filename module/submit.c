// SPDX-License-Identifier: GPL-2.0
/*
 * Submission: validate everything the caller hands us, take the snapshot,
 * queue the request on its socket.  Nothing is queued unless all of that
 * succeeded, so a failed submission leaves no trace.
 */
#include <linux/err.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/net.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "ss.h"

static int ss_check_req(const struct stablesend_req *ur)
{
	if ((ur->flags & ~STABLESEND_REQ_FLAGS) || ur->reserved)
		return -EINVAL;
	if (ur->head_len > STABLESEND_HDTR_MAX ||
	    ur->tail_len > STABLESEND_HDTR_MAX)
		return -EINVAL;
	if (!ur->len && !ur->head_len && !ur->tail_len)
		return -EINVAL;
	if (ur->offset > MAX_LFS_FILESIZE ||
	    ur->len > MAX_LFS_FILESIZE - ur->offset)
		return -EINVAL;
	return 0;
}

/*
 * Validate, snapshot and queue one request.  For a synchronous one, *@syncp
 * gets the request with a reference of the caller's own; an asynchronous
 * one may already be gone when this returns.
 */
static int ss_prepare(struct ss_ctx *ctx, struct file *dev,
		      const struct stablesend_req *ur, struct ss_req **syncp)
{
	struct ss_req *req;
	struct socket *sock;
	bool copies = false;
	struct file *file;
	u64 isize, flen = 0;
	int err;

	err = ss_check_req(ur);
	if (err)
		return err;
	file = fget(ur->file_fd);	/* O_PATH fds are not found */
	if (!file)
		return -EBADF;
	err = -EBADF;
	if (!(file->f_mode & FMODE_READ))
		goto put_file;
	err = -EINVAL;
	if (!S_ISREG(file_inode(file)->i_mode))
		goto put_file;
	sock = sockfd_lookup(ur->sock_fd, &err);
	if (!sock)
		goto put_file;
	err = ss_sock_check(sock, &copies);
	if (err)
		goto put_sock;
	if (ur->len) {
		isize = i_size_read(file_inode(file));
		err = -ENODATA;
		if (ur->offset >= isize)
			goto put_sock;
		flen = min(ur->len, isize - ur->offset);
	}

	req = ss_req_alloc(ctx, ur->head_len + flen + ur->tail_len, !!syncp,
			   ur->flags, dev->f_flags & O_NONBLOCK);
	if (IS_ERR(req)) {
		err = PTR_ERR(req);
		goto put_sock;
	}
	req->user_data = ur->user_data;
	req->copied = copies;
	err = ss_snapshot(req, ur, file, flen);
	fput(file);
	if (err) {
		sockfd_put(sock);
		ss_req_put(req);
		return err;
	}
	if (syncp) {
		refcount_inc(&req->ref);
		*syncp = req;
	}
	err = ss_enqueue(req, sock);
	if (err) {
		if (syncp)
			ss_req_put(req);
		ss_req_put(req);
	}
	return err;

put_sock:
	sockfd_put(sock);
put_file:
	fput(file);
	return err;
}

static void ss_mark_setup(struct ss_ctx *ctx)
{
	spin_lock(&ctx->lock);
	ctx->setup_done = true;
	spin_unlock(&ctx->lock);
}

long ss_submit(struct ss_ctx *ctx, struct file *dev,
	       const struct stablesend_submit __user *arg)
{
	const struct stablesend_req __user *ureqs;
	struct stablesend_submit s;
	int err = 0;
	u32 i;

	if (copy_from_user(&s, arg, sizeof(s)))
		return -EFAULT;
	if (s.flags || s.reserved || s.entry_size != sizeof(*ureqs) ||
	    !s.nr || s.nr > STABLESEND_SUBMIT_MAX)
		return -EINVAL;
	ss_mark_setup(ctx);
	ureqs = u64_to_user_ptr(s.reqs);
	for (i = 0; i < s.nr; i++) {
		struct stablesend_req ur;

		if (copy_from_user(&ur, &ureqs[i], sizeof(ur))) {
			err = -EFAULT;
			break;
		}
		err = ss_prepare(ctx, dev, &ur, NULL);
		if (err)
			break;
	}
	return i ? i : err;
}

long ss_send_sync(struct ss_ctx *ctx, struct file *dev,
		  const struct stablesend_req __user *arg)
{
	struct stablesend_req ur;
	struct ss_req *req;
	bool cancelled = false;
	long res;
	int err;

	if (copy_from_user(&ur, arg, sizeof(ur)))
		return -EFAULT;
	ss_mark_setup(ctx);
	err = ss_prepare(ctx, dev, &ur, &req);
	if (err)
		return err;
	if (wait_for_completion_interruptible(&req->done)) {
		/*
		 * Not started: take it back, as if never called.  Started: stop
		 * after what the socket took and report that, like sendfile().
		 */
		spin_lock(&ctx->lock);
		if (!list_empty(&req->ctx_node)) {
			cancelled = ss_cancel_req(req);
			if (!cancelled)
				ss_abort_req(req);
		}
		spin_unlock(&ctx->lock);
		if (cancelled)
			ss_req_finish(req, -ECANCELED);
		wait_for_completion(&req->done);
	}
	res = req->res;
	if (res < 0 && req->sent)
		res = req->sent;
	else if (cancelled)
		res = -ERESTARTSYS;	/* by the signal: nothing was sent */
	ss_req_put(req);
	return res;
}
