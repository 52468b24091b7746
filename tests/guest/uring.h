/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A minimal io_uring for the guest tests: raw system calls, no liburing
 * (the tests are static and also built -m32).  One submitter thread per
 * ring; SQEs are 64 bytes unless IORING_SETUP_SQE128.
 */
#ifndef STABLESEND_TEST_URING_H
#define STABLESEND_TEST_URING_H

#include "common.h"
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>

struct ring {
	int fd;
	unsigned int flags;
	unsigned int sq_entries, *sq_head, *sq_tail, *sq_mask, *sq_array, *sq_flags;
	unsigned int *cq_head, *cq_tail, *cq_mask;
	unsigned int tail;		/* ours, not yet published */
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
	void *sq_ptr, *cq_ptr;
	size_t sq_size, cq_size, sqes_size;
};

static inline int ring_init(struct ring *r, unsigned int entries,
			    unsigned int flags)
{
	struct io_uring_params p;
	size_t sqe = sizeof(struct io_uring_sqe) << !!(flags & IORING_SETUP_SQE128);

	memset(&p, 0, sizeof(p));
	memset(r, 0, sizeof(*r));
	p.flags = flags;
	if (flags & IORING_SETUP_SQPOLL)
		p.sq_thread_idle = 100;
	r->fd = syscall(__NR_io_uring_setup, entries, &p);
	if (r->fd < 0)
		return -errno;
	r->flags = flags;
	r->sq_entries = p.sq_entries;
	r->sq_size = p.sq_off.array + p.sq_entries * sizeof(unsigned int);
	r->cq_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	if (p.features & IORING_FEAT_SINGLE_MMAP)
		r->sq_size = r->cq_size = r->sq_size > r->cq_size ? r->sq_size : r->cq_size;
	r->sq_ptr = mmap(NULL, r->sq_size, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
	REQUIRE(r->sq_ptr != MAP_FAILED, "mmap sq ring");
	r->cq_ptr = r->sq_ptr;
	if (!(p.features & IORING_FEAT_SINGLE_MMAP)) {
		r->cq_ptr = mmap(NULL, r->cq_size, PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_CQ_RING);
		REQUIRE(r->cq_ptr != MAP_FAILED, "mmap cq ring");
	}
	r->sqes_size = p.sq_entries * sqe;
	r->sqes = mmap(NULL, r->sqes_size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
	REQUIRE(r->sqes != MAP_FAILED, "mmap sqes");
	r->sq_head = (unsigned int *)((char *)r->sq_ptr + p.sq_off.head);
	r->sq_tail = (unsigned int *)((char *)r->sq_ptr + p.sq_off.tail);
	r->sq_mask = (unsigned int *)((char *)r->sq_ptr + p.sq_off.ring_mask);
	r->sq_array = (unsigned int *)((char *)r->sq_ptr + p.sq_off.array);
	r->sq_flags = (unsigned int *)((char *)r->sq_ptr + p.sq_off.flags);
	r->cq_head = (unsigned int *)((char *)r->cq_ptr + p.cq_off.head);
	r->cq_tail = (unsigned int *)((char *)r->cq_ptr + p.cq_off.tail);
	r->cq_mask = (unsigned int *)((char *)r->cq_ptr + p.cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)((char *)r->cq_ptr + p.cq_off.cqes);
	r->tail = *r->sq_tail;
	return 0;
}

static inline void ring_exit(struct ring *r)
{
	munmap(r->sqes, r->sqes_size);
	if (r->cq_ptr != r->sq_ptr)
		munmap(r->cq_ptr, r->cq_size);
	munmap(r->sq_ptr, r->sq_size);
	close(r->fd);
	r->fd = -1;
}

/* The next free SQE, cleared (the SQ ring full fails the test). */
static inline struct io_uring_sqe *ring_sqe(struct ring *r)
{
	unsigned int head = __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
	unsigned int idx = r->tail & *r->sq_mask;
	size_t sz = sizeof(struct io_uring_sqe) << !!(r->flags & IORING_SETUP_SQE128);
	struct io_uring_sqe *sqe;

	REQUIRE(r->tail - head < r->sq_entries, "the SQ ring is full");
	sqe = (struct io_uring_sqe *)((char *)r->sqes + idx * sz);
	memset(sqe, 0, sz);
	r->sq_array[idx] = idx;
	r->tail++;
	return sqe;
}

/*
 * Publish the SQEs taken since the last call and enter the kernel once
 * (SQPOLL: wake the thread if it sleeps, and wait for it to take them);
 * what io_uring_enter() returned, or -errno.
 */
static inline int ring_submit(struct ring *r, unsigned int wait_nr)
{
	unsigned int n = r->tail - *r->sq_tail, flags = wait_nr ? IORING_ENTER_GETEVENTS : 0;
	int ret;

	__atomic_store_n(r->sq_tail, r->tail, __ATOMIC_RELEASE);
	if (r->flags & IORING_SETUP_SQPOLL) {
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(r->sq_flags, __ATOMIC_ACQUIRE) & IORING_SQ_NEED_WAKEUP)
			flags |= IORING_ENTER_SQ_WAKEUP;
		n = 0;
	}
	ret = syscall(__NR_io_uring_enter, r->fd, n, wait_nr, flags, NULL, 0);
	return ret < 0 ? -errno : ret;
}

/* The next CQE within @timeout_ms (copied, and consumed); 0 or -ETIME. */
static inline int ring_wait(struct ring *r, struct io_uring_cqe *out, int timeout_ms)
{
	double end = now_s() + timeout_ms / 1e3;

	for (;;) {
		unsigned int head = *r->cq_head;

		if (head != __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE)) {
			*out = r->cqes[head & *r->cq_mask];
			__atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
			return 0;
		}
		if (now_s() >= end)
			return -ETIME;
		{
			struct pollfd p = { .fd = r->fd, .events = POLLIN };
			int left = (int)((end - now_s()) * 1e3) + 1;

			poll(&p, 1, left > 100 ? 100 : left);
		}
		/* Task work (our CQEs, stablesend's sends) runs on the way out. */
		syscall(__NR_io_uring_enter, r->fd, 0, 0, IORING_ENTER_GETEVENTS, NULL, 0);
	}
}

/* IORING_OP_POLL_ADD of @events on @fd (@flags: IORING_POLL_ADD_*), submitted alone. */
static inline void poll_sqe(struct ring *r, int fd, unsigned int events,
			    unsigned int flags, __u64 ud)
{
	struct io_uring_sqe *sqe = ring_sqe(r);

	sqe->opcode = IORING_OP_POLL_ADD;
	sqe->fd = fd;
	sqe->poll32_events = events;
	sqe->len = flags;
	sqe->user_data = ud;
	REQUIRE(ring_submit(r, 0) == 1, "io_uring_enter POLL_ADD");
}

#endif /* STABLESEND_TEST_URING_H */
