// SPDX-License-Identifier: GPL-2.0
/*
 * Snapshot: the one copy.  Header, file range and trailer are copied into
 * pages the module owns (memory.c), packed back to back, at submission
 * time.  Pages are high-order compound pages (order-0 when memory is
 * fragmented), charged to the opener's memory cgroup, and kept in a
 * per-open pool for reuse once the network stack has dropped its references.
 *
 * A request is charged whole to the open's user first (memory.c), then
 * reserves the open's memory whole when that fits at once.  Otherwise
 * (a blocking fd) it reserves and copies one chunk at a time, waiting for
 * the pages earlier requests give back as the receiver drains them, so copy
 * and transmission overlap even when one request is a large part of the
 * limit.  Only one request per open reserves piecemeal (ctx->reserve_lock):
 * two half-reserved requests could otherwise wait for each other forever.
 */
#include <linux/fs.h>
#include <linux/gfp.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/cred.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/uio.h>

#include "ss.h"

/* Bytes of pool pages a request of @total bytes needs. */
static u64 ss_need(u64 total)
{
	u64 rem = total % SS_CHUNK_SIZE;

	return total - rem + (rem ? PAGE_SIZE << get_order(rem) : 0);
}

/*
 * Piecemeal: take what is free now if that is at least @size, else wait
 * for a quarter of the limit (or the rest of the request), so the waiter
 * is not woken for every page that comes back.
 */
static int ss_reserve_more(struct ss_req *req, u64 size)
{
	struct ss_ctx *ctx = req->ctx;
	u64 left = req->need - req->charged, take;
	int err;

	spin_lock(&ctx->lock);
	take = min(left, ss_free_under(ctx->mem_used, ctx->mem_limit));
	spin_unlock(&ctx->lock);
	if (take < size)
		take = max_t(u64, size, ctx->mem_limit / 4);
	take = min(left, take);
	if (take < left)	/* whole chunks, but at least the next page */
		take = max_t(u64, size, round_down(take, SS_CHUNK_SIZE));
	err = ss_reserve(ctx, take, false, req->sender);
	if (!err)
		req->charged += take;
	return err;
}

void ss_req_free_bvec(struct ss_req *req)
{
	if (req->bvec != req->bvec_inline)
		kvfree(req->bvec);
}

/*
 * Room for @want bvec entries: a chunk whose high-order allocation failed
 * takes one entry per page.  The array at least doubles (up to one entry
 * per page of the request), so a request whose chunks all fall back is
 * not copied over once per chunk.  Nothing else looks at the array
 * before the request is queued.
 */
static int ss_bvec_grow(struct ss_req *req, u64 want)
{
	u64 n = max(want, min_t(u64, 2ULL * req->bvec_cap, req->need >> PAGE_SHIFT));
	struct bio_vec *bv;

	if (want <= req->bvec_cap)
		return 0;
	bv = kvmalloc_array(n, sizeof(*bv), SS_GFP);
	if (!bv)
		return -ENOMEM;
	memcpy(bv, req->bvec, req->nr_pages * sizeof(*bv));
	ss_req_free_bvec(req);
	req->bvec = bv;
	req->bvec_cap = n;
	return 0;
}

/*
 * Add pages to @req until they hold @end bytes (reserving them first if
 * the request was not reserved whole); each entry's length is its
 * capacity.  The chunking matches ss_need().
 */
static int ss_grow(struct ss_req *req, u64 end)
{
	while (req->cap < end) {
		u64 left = req->need - req->cap;
		unsigned int order = min_t(unsigned int, SS_CHUNK_ORDER,
					   get_order(min_t(u64, left, SS_CHUNK_SIZE)));
		u64 size = PAGE_SIZE << order;
		struct page *page;
		unsigned int i;
		int err;

		if (req->cap + size > req->charged) {
			err = ss_reserve_more(req, size);
			if (err)
				return err;
		}
		page = ss_get_page(req->ctx, order);
		if (page) {
			bvec_set_page(&req->bvec[req->nr_pages++], page, size, 0);
			req->cap += size;
			continue;
		}
		if (!order)
			return -ENOMEM;
		atomic64_inc(&stablesend_stats[SS_ORDER0_FALLBACKS]);
		/* This chunk page by page, one entry for each chunk after it. */
		err = ss_bvec_grow(req, req->nr_pages + (1U << order) +
				   DIV_ROUND_UP(left - size, SS_CHUNK_SIZE));
		if (err)
			return err;
		for (i = 0; i < (1U << order); i++) {
			page = ss_get_page(req->ctx, 0);
			if (!page)
				return -ENOMEM;
			bvec_set_page(&req->bvec[req->nr_pages++], page,
				      PAGE_SIZE, 0);
			req->cap += PAGE_SIZE;
		}
	}
	return 0;
}

/*
 * One piecemeal reservation per open at a time.  A SEND waits for it off
 * the senders registry, as for memory: the holder may be waiting for
 * memory that only the SEND caller's own task work can free.
 */
static int ss_reserve_lock(struct ss_ctx *ctx, struct ss_sender *sender)
{
	int err = ss_sender_pause(sender);

	if (err)
		return err;
	if (mutex_lock_interruptible(&ctx->reserve_lock))
		return -ERESTARTSYS;
	err = sender ? ss_sender_enter(sender) : 0;
	if (err)
		mutex_unlock(&ctx->reserve_lock);
	return err;
}

/*
 * Reserve @ncqe completion records of the open and of its user: both
 * bounds count what is reserved plus what is queued unread.  Whoever takes
 * a record off ctx->cq_reserved without queuing it, or frees a queued one,
 * gives it back to the user (ss_user_records_uncharge()).
 */
static int ss_reserve_cq(struct ss_ctx *ctx, unsigned int ncqe)
{
	int err = 0;

	if (!ncqe)
		return 0;
	spin_lock(&ctx->lock);
	if (!ss_cq_fits(ctx, ncqe) || !ss_user_records_charge(ctx, ncqe))
		err = -ENOBUFS;
	else
		ctx->cq_reserved += ncqe;
	spin_unlock(&ctx->lock);
	return err;
}

/**
 * ss_req_alloc - reserve memory, completion records and pool pages
 * @ctx:	the open submitting it
 * @total:	bytes the request will carry at most
 * @sender:	a SEND's registry entry (synchronous: no SENT record), or NULL
 * @flags:	STABLESEND_REQ_* (NOWAIT: no poller waits after a refusal)
 * @nonblock:	fail with EAGAIN instead of waiting for memory
 * @ucmd:	the io_uring command it completes (no records), or NULL
 *
 * Returns the request with one reference, or an ERR_PTR.  Until it is
 * queued, ss_req_put() undoes everything.
 */
struct ss_req *ss_req_alloc(struct ss_ctx *ctx, u64 total,
			    struct ss_sender *sender, u32 flags, bool nonblock,
			    struct io_uring_cmd *ucmd)
{
	bool sync = sender;
	bool released = (flags & STABLESEND_REQ_NOTIFY_RELEASE) && !ucmd;
	unsigned int ncqe = (!sync && !ucmd) + released;
	u64 need = ss_need(total);
	struct ss_req *req;
	int err;

	/* Before anything sized by the request is allocated. */
	if (need > READ_ONCE(ctx->mem_limit) ||
	    (need > READ_ONCE(stablesend_user_limit) && !ctx->unbounded))
		return ERR_PTR(-EMSGSIZE);
	req = kzalloc(sizeof(*req), SS_GFP);
	if (!req)
		return ERR_PTR(-ENOMEM);
	/* One entry per chunk; ss_bvec_grow() when a chunk falls back to pages. */
	req->bvec_cap = DIV_ROUND_UP(need, SS_CHUNK_SIZE);
	if (req->bvec_cap <= SS_BVEC_INLINE) {
		req->bvec_cap = SS_BVEC_INLINE;
		req->bvec = req->bvec_inline;
	} else {
		req->bvec = kvmalloc_array(req->bvec_cap, sizeof(*req->bvec),
					   SS_GFP);
		if (!req->bvec) {
			kfree(req);
			return ERR_PTR(-ENOMEM);
		}
	}
	refcount_set(&req->ref, 1);
	req->ctx = ctx;
	req->sync = sync;
	req->sender = sender;
	req->ucmd = ucmd;
	req->ring = ucmd;
	req->flags = flags;
	INIT_LIST_HEAD(&req->ctx_node);
	INIT_LIST_HEAD(&req->inflight);
	INIT_LIST_HEAD(&req->ctx_inflight);
	INIT_WORK(&req->orphan, ss_req_orphan);
	req->task = get_task_struct(current);
	req->tgid = get_pid(task_tgid(current));
	req->cred = get_current_cred();
	kref_get(&ctx->ref);
	if (!sync && !ucmd)
		req->cqe_sent = kzalloc(sizeof(*req->cqe_sent), SS_GFP);
	if (released)
		req->cqe_released = kzalloc(sizeof(*req->cqe_released), SS_GFP);
	if ((!sync && !ucmd && !req->cqe_sent) ||
	    (released && !req->cqe_released)) {
		err = -ENOMEM;
		goto fail;
	}
	err = ss_reserve_cq(ctx, ncqe);
	if (err) {
		/* poll() says EPOLLOUT once that many are free. */
		ss_records_refused(ctx, ncqe);
		goto fail;
	}
	req->cq_charged = ncqe;
	if (ncqe)
		ss_records_got(ctx);
	req->need = need;
	/* The user's bound: waiting here holds nothing the user has. */
	err = ss_user_reserve(ctx, need, nonblock, sender);
	if (err)
		goto fail_mem;
	req->user_charged = need;
	/* Whole if it fits now (or must: O_NONBLOCK), else piecemeal. */
	err = ss_reserve(ctx, need, true, NULL);
	if (!err) {
		req->charged = need;
	} else if (nonblock) {
		goto fail_mem;
	} else {
		err = ss_reserve_lock(ctx, sender);
		if (err)
			goto fail;
		req->piecemeal = true;
	}
	ss_room_got(ctx);
	return req;
fail_mem:
	/*
	 * Our pages parked in the stack may help (the next call soon).
	 * poll() says EPOLLOUT once this much is free: not before it fits;
	 * not for a SEND that goes another way (STABLESEND_REQ_NOWAIT).
	 */
	if (err == -EAGAIN) {
		ss_user_starved(ctx);
		if (!(flags & STABLESEND_REQ_NOWAIT))
			ss_room_refused(ctx, need);
	}
fail:
	ss_req_put(req);
	return ERR_PTR(err);
}

/* Copy @len user bytes to byte @pos of the request's pages. */
static int ss_copy_user(struct ss_req *req, u64 pos, const void __user *src,
			size_t len)
{
	unsigned int i = 0;
	int err;

	err = ss_grow(req, pos + len);
	if (err)
		return err;
	while (pos >= req->bvec[i].bv_len)
		pos -= req->bvec[i++].bv_len;
	while (len) {
		struct page *page = req->bvec[i].bv_page + (pos >> PAGE_SHIFT);
		size_t off = offset_in_page(pos);
		size_t n = min_t(size_t, len, PAGE_SIZE - off);
		unsigned long left;
		void *p;

		p = kmap_local_page(page);
		left = copy_from_user(p + off, src, n);
		kunmap_local(p);
		if (left)
			return -EFAULT;
		src += n;
		len -= n;
		pos += n;
		if (pos == req->bvec[i].bv_len) {
			pos = 0;
			i++;
		}
	}
	return 0;
}

/*
 * Read up to @flen bytes at @offset of @file into the pages from byte @pos,
 * through the filesystem's own ->read_iter (as copy_splice_read() does), so
 * any filesystem works and nothing past end of file is ever read.  Returns
 * the bytes read (fewer at end of file, or when a read failed after some
 * bytes: then *@rerr is its error) or -errno.
 */
static ssize_t ss_copy_file(struct ss_req *req, u64 pos, struct file *file,
			    u64 offset, u64 flen, int *rerr)
{
	struct iov_iter iter;
	struct kiocb kiocb;
	ssize_t got = 0;
	int err;

	init_sync_kiocb(&kiocb, file);
	kiocb.ki_flags &= ~IOCB_DIRECT;
	kiocb.ki_pos = offset;
	while (got < flen) {
		u64 end = pos + flen - got;
		ssize_t ret;

		/* Piecemeal: what is reserved, at least to the end of this chunk. */
		if (req->piecemeal && end > req->charged)
			end = min(end, max_t(u64, req->charged,
					     round_down(pos, SS_CHUNK_SIZE) + SS_CHUNK_SIZE));

		err = ss_grow(req, end);
		if (err)
			return err;	/* no memory or a signal: nothing is sent */
		iov_iter_bvec(&iter, ITER_DEST, req->bvec, req->nr_pages, req->cap);
		iov_iter_advance(&iter, pos);
		iov_iter_truncate(&iter, end - pos);
		ret = vfs_iocb_iter_read(file, &kiocb, &iter);
		if (ret < 0) {
			if (!got)
				return ret;
			*rerr = ret;
			break;
		}
		if (!ret)
			break;
		got += ret;
		pos += ret;
		cond_resched();
	}
	return got;
}

/* Header, file bytes, trailer; sets @req->total. */
static int ss_copy_all(struct ss_req *req, const struct stablesend_req *ur,
		       struct file *file, u64 flen)
{
	u64 pos = 0;
	ssize_t got;
	int err;

	if (ur->head_len) {
		err = ss_copy_user(req, 0, u64_to_user_ptr(ur->head),
				   ur->head_len);
		if (err)
			return err;
		pos = ur->head_len;
	}
	if (flen) {
		int rerr = 0;

		got = ss_copy_file(req, pos, file, ur->offset, flen, &rerr);
		if (got < 0)
			return got;
		/*
		 * A read that failed after some bytes: a SEND without a
		 * trailer sends those, as sendfile(2) does (the next call
		 * gets the error).  Anything else fails whole: its short
		 * result would pass for end of file, and a trailer would
		 * go out in the place of the missing bytes.
		 */
		if (rerr && (ur->tail_len || !req->sync))
			return rerr;
		pos += got;
	}
	if (ur->tail_len) {
		err = ss_copy_user(req, pos, u64_to_user_ptr(ur->tail),
				   ur->tail_len);
		if (err)
			return err;
		pos += ur->tail_len;
	}
	if (!pos)
		return -ENODATA;	/* the file shrank to nothing */
	req->total = pos;
	return 0;
}

/**
 * ss_snapshot - the copy: header, file bytes, trailer, into the pages
 * @req:	request from ss_req_alloc()
 * @ur:		the user's request (validated)
 * @file:	the file, open for reading
 * @flen:	file bytes to copy, at most
 *
 * Sets @req->total (short if the file shrank) and the bvec entries to send.
 */
int ss_snapshot(struct ss_req *req, const struct stablesend_req *ur,
		struct file *file, u64 flen)
{
	u64 left;
	int err;

	err = ss_copy_all(req, ur, file, flen);
	ss_req_unlock(req);
	req->sender = NULL;	/* its SEND's stack: no more waits for memory */
	if (err)
		return err;
	for (left = req->total; left; req->nr_send++) {
		struct bio_vec *bv = &req->bvec[req->nr_send];

		if (bv->bv_len > left)
			bv->bv_len = left;
		left -= bv->bv_len;
	}
	return 0;
}

/* Done reserving piecemeal: the next request of the open may. */
void ss_req_unlock(struct ss_req *req)
{
	if (req->piecemeal) {
		req->piecemeal = false;
		mutex_unlock(&req->ctx->reserve_lock);
	}
}

/*
 * How many of the request's pages, from the first not yet freed, the
 * network stack is done with: every page once the request is off its FIFO
 * (@finished), before that only pages wholly inside what the socket took
 * (a page the socket took holds its reference until the stack drops it).
 */
unsigned int ss_req_idle_pages(const struct ss_req *req, bool finished)
{
	u64 sent = smp_load_acquire(&req->sent);	/* after the sendmsg */
	u64 end = req->freed_bytes;
	unsigned int i;

	for (i = req->nr_freed; i < req->nr_pages; i++) {
		if (!finished) {
			if (i >= req->nr_send)
				break;
			end += req->bvec[i].bv_len;
			if (end > sent)
				break;
		}
		if (page_ref_count(req->bvec[i].bv_page) != 1)
			break;
	}
	return i;
}
