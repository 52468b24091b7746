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
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <net/sock.h>

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
 * A non-blocking SEND sends what the socket takes at once, about its
 * send buffer at most (TCP may take up to a buffer more, as it looks at
 * the room before each): snapshot no more file bytes than that (but the
 * header, and at least one byte), nor than @mem_free unless it is 0 (whole
 * chunks, which need no more than their size).  A request cut short loses
 * its trailer (the caller's next call sends it, after the rest of the
 * file), as the bytes reported are a prefix of header, file bytes and
 * trailer.  Returns the request to use: @ur, or @capped with *@flen cut.
 */
static const struct stablesend_req *
ss_nonblock_cap(const struct stablesend_req *ur, struct stablesend_req *capped,
		struct sock *sk, u64 *flen, u64 mem_free)
{
	u64 room = max(READ_ONCE(sk->sk_sndbuf), 0);
	u64 keep;

	if (mem_free)
		room = min(room, mem_free);

	if ((u64)ur->head_len + *flen + ur->tail_len <= room)
		return ur;
	keep = min(*flen, room > ur->head_len ? room - ur->head_len : 0);
	if (!ur->head_len && !keep)
		return ur;	/* a trailer alone */
	*flen = keep;
	*capped = *ur;
	capped->tail_len = 0;
	return capped;
}

/*
 * A request failed.  With -ENOMEM the user's memory cgroup may be full of
 * the open's own idle pages, which its reclaim may have left (the shrinker
 * skips a busy open): give them back, so the next request that fits can
 * be allocated.  (Other opens of the user keep theirs.)
 */
static struct ss_req *ss_prepare_failed(struct ss_ctx *ctx, int err)
{
	if (err == -ENOMEM)
		ss_pool_drain(ctx);
	return ERR_PTR(err);
}

/*
 * Validate, snapshot and queue one request.  Returns it with a reference
 * of the caller's own, or an ERR_PTR; a failed request leaves no trace
 * (but for the open's idle pages freed after -ENOMEM).
 * @sender is a SEND's registry entry (NULL for SUBMIT), @nonblock fails
 * instead of waiting for memory, @ucmd is an io_uring command's (or NULL).
 */
static struct ss_req *ss_prepare(struct ss_ctx *ctx,
				 const struct stablesend_req *ur,
				 struct ss_sender *sender, bool nonblock,
				 struct io_uring_cmd *ucmd)
{
	bool sync = sender;
	struct stablesend_req capped;
	unsigned int sflags;
	bool sock_nonblock, nowait;
	u32 rflags;
	struct ss_req *req;
	struct socket *sock;
	bool copies = false;
	struct file *file;
	u64 isize, flen = 0;
	int err;

	err = ss_check_req(ur);
	if (err)
		return ERR_PTR(err);
	file = fget(ur->file_fd);	/* O_PATH fds are not found */
	if (!file)
		return ERR_PTR(-EBADF);
	err = -EBADF;
	if (!(file->f_mode & FMODE_READ))
		goto put_file;
	err = -EINVAL;
	if (!S_ISREG(file_inode(file)->i_mode))
		goto put_file;
	sock = sockfd_lookup(ur->sock_fd, &err);
	if (!sock)
		goto put_file;
	/* Read once: a SEND is non-blocking or not throughout. */
	sflags = READ_ONCE(sock->file->f_flags);
	sock_nonblock = sync && (sflags & O_NONBLOCK);
	/* sendfile(2) refuses an O_APPEND output; so does SEND. */
	err = -EINVAL;
	if (sync && (sflags & O_APPEND))
		goto put_sock;
	err = ss_sock_check(sock, &copies);
	if (err)
		goto put_sock;
	/*
	 * A non-blocking SEND that could send nothing: fail before the copy.
	 * AF_UNIX's poll() is stricter than its send, which decides then, as
	 * sendfile's does; without waiting for memory, as the socket is full.
	 */
	if (sock_nonblock &&
	    !(vfs_poll(sock->file, NULL) & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
		err = -EAGAIN;
		if (sock->sk->sk_family != AF_UNIX ||
		    !stablesend_unix_may_send(sock->sk))
			goto put_sock;
		nonblock = true;
	}
	if (ur->len) {
		isize = i_size_read(file_inode(file));
		err = -ENODATA;
		if (ur->offset >= isize)
			goto put_sock;
		flen = min(ur->len, isize - ur->offset);
	}
	/*
	 * STABLESEND_REQ_NOWAIT: nor does it wait for memory, which other
	 * sockets' stalled peers may hold for good; it takes what is free.
	 */
	nowait = sock_nonblock && (ur->flags & STABLESEND_REQ_NOWAIT);
	rflags = ur->flags & ~(nowait ? 0 : STABLESEND_REQ_NOWAIT);
	if (sock_nonblock)
		ur = ss_nonblock_cap(ur, &capped, sock->sk, &flen,
				     nowait ? ss_mem_free_now(ctx) : 0);
	if (nowait)
		nonblock = true;

	req = ss_req_alloc(ctx, ur->head_len + flen + ur->tail_len, sender,
			   rflags, nonblock, ucmd);
	if (IS_ERR(req)) {
		err = PTR_ERR(req);
		/* Another way now, unless that would overtake queued bytes. */
		if (err == -EAGAIN && nowait && ss_sock_idle(sock))
			err = -ENOSPC;
		goto put_sock;
	}
	req->user_data = ur->user_data;
	req->copied = copies;
	req->sock_nonblock = sock_nonblock;
	err = ss_snapshot(req, ur, file, flen);
	fput(file);
	if (err) {
		sockfd_put(sock);
		ss_req_put(req);
		return ss_prepare_failed(ctx, err);
	}
	/* The caller's reference; the one from ss_req_alloc() is the FIFO's. */
	refcount_inc(&req->ref);
	if (ucmd)
		ss_uring_mark(ucmd);
	err = ss_enqueue(req, sock);
	if (err) {
		ss_req_put(req);
		ss_req_put(req);
		return ss_prepare_failed(ctx, err);
	}
	return req;

put_sock:
	sockfd_put(sock);
put_file:
	fput(file);
	return ss_prepare_failed(ctx, err);
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
	struct ss_req *req;
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
		req = ss_prepare(ctx, &ur, NULL, dev->f_flags & O_NONBLOCK, NULL);
		if (IS_ERR(req)) {
			err = PTR_ERR(req);
			break;
		}
		/* What the socket takes now goes out here, in our context. */
		ss_submit_send(req);
		ss_req_put(req);
	}
	return i ? i : err;
}

long ss_send_sync(struct ss_ctx *ctx, struct file *dev,
		  const struct stablesend_req __user *arg)
{
	struct ss_sender sender;
	struct stablesend_req ur;
	struct ss_req *req;
	long res;

	if (copy_from_user(&ur, arg, sizeof(ur)))
		return -EFAULT;
	ss_mark_setup(ctx);
	res = ss_sender_enter(&sender);
	if (res)
		return res;
	req = ss_prepare(ctx, &ur, &sender, dev->f_flags & O_NONBLOCK, NULL);
	if (IS_ERR(req)) {
		res = PTR_ERR(req);
	} else {
		res = ss_sync_send(req);
		ss_req_put(req);
	}
	ss_sender_leave(&sender);
	return res;
}

/**
 * ss_submit_uring - validate, snapshot and queue an io_uring command's request
 * @ctx:	the open of the device the command was issued on
 * @ur:		the request, copied from user space
 * @ucmd:	the command; its CQE is the request's completion
 * @nonblock:	fail with -EAGAIN instead of waiting for memory
 *
 * Marks the command cancelable (ss_uring_mark()) just before queueing.
 * Returns the request with a reference for the command (dropped once its
 * CQE is posted), or an ERR_PTR.
 */
struct ss_req *ss_submit_uring(struct ss_ctx *ctx,
			       const struct stablesend_req *ur,
			       struct io_uring_cmd *ucmd, bool nonblock)
{
	ss_mark_setup(ctx);
	return ss_prepare(ctx, ur, NULL, nonblock, ucmd);
}
