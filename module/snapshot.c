// SPDX-License-Identifier: GPL-2.0
/*
 * Snapshot: the one copy.  Header, file range and trailer are copied into
 * pages the module owns, packed back to back, at submission time.  Pages
 * are high-order compound pages (order-0 when memory is fragmented),
 * charged to the submitter's memory cgroup, and kept in a per-open pool for
 * reuse once the network stack has dropped its references.
 */
#include <linux/fs.h>
#include <linux/gfp.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/sched/signal.h>
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

static bool ss_mem_fits(struct ss_ctx *ctx, u64 need)
{
	return READ_ONCE(ctx->mem_used) + need <= ctx->mem_limit;
}

static void ss_free_page(struct page *page)
{
	unsigned int order = compound_order(page);

	atomic64_sub(PAGE_SIZE << order, &ss_stats[SS_POOL_BYTES]);
	__free_pages(page, order);
}

/*
 * Reserve @need bytes of the open's memory and @ncqe completion records,
 * waiting for memory unless @nonblock.  Pooled pages beyond what the limit
 * leaves room for are freed, so pool plus reservations stay within it.
 */
static int ss_reserve(struct ss_ctx *ctx, u64 need, unsigned int ncqe,
		      bool nonblock)
{
	struct page *page, *tmp;
	LIST_HEAD(trim);
	int order;

	if (need > ctx->mem_limit)
		return -EMSGSIZE;
	spin_lock(&ctx->lock);
	while (!ss_mem_fits(ctx, need)) {
		spin_unlock(&ctx->lock);
		if (nonblock)
			return -EAGAIN;
		if (wait_event_interruptible(ctx->mem_wait,
					     ss_mem_fits(ctx, need)))
			return -ERESTARTSYS;	/* nothing done: restartable */
		spin_lock(&ctx->lock);
	}
	if (ctx->cq_nr + ctx->cq_reserved + ncqe > SS_CQ_MAX) {
		spin_unlock(&ctx->lock);
		return -ENOBUFS;
	}
	ctx->mem_used += need;
	ctx->cq_reserved += ncqe;
	ctx->stats.mem_peak = max(ctx->stats.mem_peak, ctx->mem_used);
	for (order = 0; order <= SS_CHUNK_ORDER; order++) {
		while (ctx->mem_used + ctx->pooled > ctx->mem_limit &&
		       !list_empty(&ctx->pool[order])) {
			list_move(ctx->pool[order].next, &trim);
			ctx->pooled -= PAGE_SIZE << order;
		}
	}
	spin_unlock(&ctx->lock);
	list_for_each_entry_safe(page, tmp, &trim, lru) {
		list_del(&page->lru);
		ss_free_page(page);
	}
	return 0;
}

static struct page *ss_get_page(struct ss_ctx *ctx, unsigned int order)
{
	gfp_t gfp = GFP_KERNEL_ACCOUNT | __GFP_NOWARN;
	struct page *page;

	spin_lock(&ctx->lock);
	page = list_first_entry_or_null(&ctx->pool[order], struct page, lru);
	if (page) {
		list_del(&page->lru);
		ctx->pooled -= PAGE_SIZE << order;
	}
	spin_unlock(&ctx->lock);
	if (page)
		return page;

	/*
	 * Fail instead of invoking the OOM killer when the cgroup is full: the
	 * submitter gets ENOMEM.  High orders give up early and fall back.
	 */
	gfp |= order ? __GFP_COMP | __GFP_NORETRY : __GFP_RETRY_MAYFAIL;
	page = alloc_pages(gfp, order);
	if (page)
		atomic64_add(PAGE_SIZE << order, &ss_stats[SS_POOL_BYTES]);
	return page;
}

/* Fill @req->bvec with pages for @need bytes; each entry's length is its capacity. */
static int ss_fill_pages(struct ss_req *req, u64 need)
{
	while (need) {
		unsigned int order = min_t(unsigned int, SS_CHUNK_ORDER,
					   get_order(min_t(u64, need, SS_CHUNK_SIZE)));
		struct page *page = ss_get_page(req->ctx, order);
		unsigned int i;

		if (page) {
			bvec_set_page(&req->bvec[req->nr_pages++], page,
				      PAGE_SIZE << order, 0);
			need -= PAGE_SIZE << order;
			continue;
		}
		if (!order)
			return -ENOMEM;
		atomic64_inc(&ss_stats[SS_ORDER0_FALLBACKS]);
		for (i = 0; i < (1U << order); i++) {
			page = ss_get_page(req->ctx, 0);
			if (!page)
				return -ENOMEM;
			bvec_set_page(&req->bvec[req->nr_pages++], page,
				      PAGE_SIZE, 0);
		}
		need -= PAGE_SIZE << order;
	}
	return 0;
}

/**
 * ss_req_alloc - reserve memory, completion records and pool pages
 * @ctx:	the open submitting it
 * @total:	bytes the request will carry at most
 * @sync:	synchronous: no SENT record
 * @flags:	STABLESEND_REQ_*
 * @nonblock:	fail with EAGAIN instead of waiting for memory
 *
 * Returns the request with one reference, or an ERR_PTR.  Until it is
 * queued, ss_req_put() undoes everything.
 */
struct ss_req *ss_req_alloc(struct ss_ctx *ctx, u64 total, bool sync,
			    u32 flags, bool nonblock)
{
	bool released = flags & STABLESEND_REQ_NOTIFY_RELEASE;
	unsigned int ncqe = !sync + released;
	u64 need = ss_need(total);
	struct ss_req *req;
	int err;

	req = kvzalloc(struct_size(req, bvec, need >> PAGE_SHIFT),
		       GFP_KERNEL_ACCOUNT);
	if (!req)
		return ERR_PTR(-ENOMEM);
	refcount_set(&req->ref, 1);
	req->ctx = ctx;
	req->sync = sync;
	req->flags = flags;
	INIT_LIST_HEAD(&req->ctx_node);
	INIT_LIST_HEAD(&req->inflight);
	init_completion(&req->done);
	kref_get(&ctx->ref);
	if (!sync)
		req->cqe_sent = kzalloc(sizeof(*req->cqe_sent),
					GFP_KERNEL_ACCOUNT);
	if (released)
		req->cqe_released = kzalloc(sizeof(*req->cqe_released),
					    GFP_KERNEL_ACCOUNT);
	if ((!sync && !req->cqe_sent) || (released && !req->cqe_released)) {
		err = -ENOMEM;
		goto fail;
	}
	err = ss_reserve(ctx, need, ncqe, nonblock);
	if (err)
		goto fail;
	req->charged = need;
	req->cq_charged = ncqe;
	err = ss_fill_pages(req, need);
	if (err)
		goto fail;
	return req;
fail:
	ss_req_put(req);
	return ERR_PTR(err);
}

/* Copy @len user bytes to byte @pos of the request's pages. */
static int ss_copy_user(struct ss_req *req, u64 pos, const void __user *src,
			size_t len)
{
	unsigned int i = 0;

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
 * any filesystem works and nothing past end of file is ever read.
 */
static ssize_t ss_copy_file(struct ss_req *req, u64 pos, struct file *file,
			    u64 offset, u64 flen)
{
	struct iov_iter iter;
	struct kiocb kiocb;
	ssize_t got = 0;

	iov_iter_bvec(&iter, ITER_DEST, req->bvec, req->nr_pages, req->charged);
	iov_iter_advance(&iter, pos);
	iov_iter_truncate(&iter, flen);
	init_sync_kiocb(&kiocb, file);
	kiocb.ki_flags &= ~IOCB_DIRECT;
	kiocb.ki_pos = offset;
	while (iov_iter_count(&iter)) {
		ssize_t ret = vfs_iocb_iter_read(file, &kiocb, &iter);

		if (ret < 0)
			return got ? got : ret;
		if (!ret)
			break;
		got += ret;
		cond_resched();
	}
	return got;
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
	u64 pos = 0, left;
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
		got = ss_copy_file(req, pos, file, ur->offset, flen);
		if (got < 0)
			return got;
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
	for (left = pos; left; req->nr_send++) {
		struct bio_vec *bv = &req->bvec[req->nr_send];

		if (bv->bv_len > left)
			bv->bv_len = left;
		left -= bv->bv_len;
	}
	return 0;
}

/* Has the network stack dropped every reference to the request's pages? */
bool ss_req_pages_idle(const struct ss_req *req)
{
	unsigned int i;

	for (i = 0; i < req->nr_pages; i++)
		if (page_ref_count(req->bvec[i].bv_page) != 1)
			return false;
	return true;
}

/*
 * Give the request's pages back to the pool (or the page allocator, past
 * the limit or once the open is closed) and its reservations to the open.
 */
void ss_req_free_pages(struct ss_req *req)
{
	struct ss_ctx *ctx = req->ctx;
	LIST_HEAD(freed);
	struct page *page, *tmp;
	unsigned int i;

	spin_lock(&ctx->lock);
	ctx->mem_used -= req->charged;
	for (i = 0; i < req->nr_pages; i++) {
		unsigned int order;

		page = req->bvec[i].bv_page;
		order = compound_order(page);
		if (!ctx->closed &&
		    ctx->mem_used + ctx->pooled + (PAGE_SIZE << order) <=
		    ctx->mem_limit) {
			list_add(&page->lru, &ctx->pool[order]);
			ctx->pooled += PAGE_SIZE << order;
		} else {
			list_add(&page->lru, &freed);
		}
	}
	req->nr_pages = 0;
	req->charged = 0;
	spin_unlock(&ctx->lock);
	wake_up_interruptible_all(&ctx->mem_wait);
	list_for_each_entry_safe(page, tmp, &freed, lru) {
		list_del(&page->lru);
		ss_free_page(page);
	}
}

/* Free every pooled page of a closed open. */
void ss_pool_drain(struct ss_ctx *ctx)
{
	struct page *page, *tmp;
	int order;

	for (order = 0; order <= SS_CHUNK_ORDER; order++) {
		list_for_each_entry_safe(page, tmp, &ctx->pool[order], lru) {
			list_del(&page->lru);
			ss_free_page(page);
		}
	}
	ctx->pooled = 0;
}
