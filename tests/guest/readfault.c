// SPDX-License-Identifier: GPL-2.0
/*
 * A read() of completion records whose buffer faults gives back what it
 * could not copy, in order, and wakes whoever waits for records meanwhile:
 * a thread asleep in read() and one in epoll_wait() on the same open.
 * The faulting buffer is a page under userfaultfd: the reader has taken
 * the records and sleeps in the copy; two waiters go to sleep on the now
 * empty queue; the page is then unmapped and the fault let go, so the copy
 * fails.  Once with nothing copied (EFAULT), once with one record copied
 * (a short count).
 * compat32: yes
 * test-timeout: 90
 */
#include "common.h"
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define REC	sizeof(struct stablesend_cqe)

static int dev, sock, peer, file;

struct waiter {
	pthread_t thread;
	pid_t tid;
	int fd;			/* the device, or an epoll fd on it */
	void *buf;		/* the reader's buffer (NULL: epoll) */
	size_t len;
	long ret;
	int err;
	volatile int done;
};

static void *waiter_fn(void *arg)
{
	struct waiter *w = arg;
	struct epoll_event ev;

	w->tid = syscall(SYS_gettid);
	if (w->buf)
		w->ret = read(w->fd, w->buf, w->len);
	else
		w->ret = epoll_wait(w->fd, &ev, 1, -1);
	w->err = errno;
	w->done = 1;
	return NULL;
}

/*
 * Has thread @tid gone to sleep in system call @nr on @fd?  Its state is
 * S and /proc says which call it sleeps in (as the task's own ABI numbers
 * it, so also in a 32-bit build).
 */
static int asleep_in(pid_t tid, long nr, long alt, int fd)
{
	char path[64], text[256];
	long got_nr, got_fd;

	if (thread_state(tid) != 'S')
		return 0;
	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	if (read_text(path, text, sizeof(text)) < 0)
		return 0;
	if (sscanf(text, "%ld %lx", &got_nr, &got_fd) != 2)
		return 0;
	return (got_nr == nr || got_nr == alt) && got_fd == fd;
}

/* @w sleeps in system call @nr (or @alt, as the C library may use it). */
static void wait_asleep(struct waiter *w, long nr, long alt, const char *what)
{
	double end = now_s() + 10;

	while (!asleep_in(w->tid, nr, alt, w->fd) && !w->done && now_s() < end)
		usleep(10000);
	REQUIRE(!w->done && asleep_in(w->tid, nr, alt, w->fd),
		"%s asleep in its call on the empty queue (done %d)", what,
		w->done);
}

/* Queue @n SENT records with user_data @first, @first + 1, ... */
static void queue_records(int n, uint64_t first)
{
	struct stablesend_counters k;
	struct stablesend_req r;
	char c[64];
	int i;

	for (i = 0; i < n; i++) {
		r = ss_req(file, sock, i, 1, first + i);
		REQUIRE(ss_submit(dev, &r, 1) == 1, "SUBMIT %d", i);
	}
	REQUIRE(read_full(peer, c, n) == (size_t)n, "the peer gets %d bytes", n);
	for (i = 0; i < 500; i++) {
		ss_counters(dev, &k);
		if (k.cqes_pending == (uint64_t)n)
			break;
		usleep(10000);
	}
	REQUIRE(k.cqes_pending == (uint64_t)n, "%d records queued: %llu", n,
		(unsigned long long)k.cqes_pending);
}

/*
 * Wait up to 5 s for both waiters, then say which had finished; a new
 * record ends any that still sleeps (*@kicks counts those records).
 */
static void finished(struct waiter *b, struct waiter *c, int *ok_b, int *ok_c,
		     int *kicks)
{
	struct stablesend_req r = ss_req(file, sock, 0, 1, 999);
	double end = now_s() + 5;
	char ch;

	while (!(b->done && c->done) && now_s() < end)
		usleep(10000);
	*ok_b = b->done;
	*ok_c = c->done;
	if (!*ok_b || !*ok_c) {
		REQUIRE(ss_submit(dev, &r, 1) == 1, "SUBMIT to wake a waiter");
		REQUIRE(read_full(peer, &ch, 1) == 1, "its byte");
		*kicks = 1;
	}
	pthread_join(b->thread, NULL);
	pthread_join(c->thread, NULL);
}

/*
 * @skip records land in the page before the watched one, the rest in it;
 * @n records are queued, user_data @first onwards.
 */
static void round_trip(const char *name, int n, int skip, uint64_t first)
{
	long pg = sysconf(_SC_PAGESIZE);
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	struct stablesend_cqe got[4], rest[4];
	struct waiter a = { 0 }, b = { 0 }, c = { 0 };
	struct epoll_event ev = { .events = EPOLLIN };
	struct pollfd pu = { .events = POLLIN };
	struct stablesend_counters k;
	struct uffd_msg msg;
	int uffd, ep, i, ok_b, ok_c, kicks = 0;
	char *map;

	printf("%s: %d records, %d of them copied before the fault\n", name, n,
	       skip);
	queue_records(n, first);
	map = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(map != MAP_FAILED, "mmap");
	map[0] = 1;			/* the first page is there */
	uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
	REQUIRE(uffd >= 0, "userfaultfd");
	REQUIRE(ioctl(uffd, UFFDIO_API, &api) == 0, "UFFDIO_API");
	reg.range.start = (uintptr_t)(map + pg);
	reg.range.len = pg;
	REQUIRE(ioctl(uffd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER");

	/* A takes every record and sleeps in the copy into the second page. */
	a.fd = dev;
	a.buf = map + pg - skip * REC;
	a.len = n * REC;
	REQUIRE(pthread_create(&a.thread, NULL, waiter_fn, &a) == 0, "reader A");
	pu.fd = uffd;
	REQUIRE(poll(&pu, 1, 10000) == 1 &&
		read(uffd, &msg, sizeof(msg)) == sizeof(msg) &&
		msg.event == UFFD_EVENT_PAGEFAULT, "A's fault");

	/* B in read() for one record, C in epoll_wait(): the queue is empty. */
	b.fd = dev;
	b.buf = got;
	b.len = REC;
	ep = epoll_create1(EPOLL_CLOEXEC);
	REQUIRE(ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, dev, &ev) == 0, "epoll");
	c.fd = ep;
	REQUIRE(pthread_create(&b.thread, NULL, waiter_fn, &b) == 0, "reader B");
	REQUIRE(pthread_create(&c.thread, NULL, waiter_fn, &c) == 0, "epoll C");
	wait_asleep(&b, SYS_read, SYS_read, "B");
	wait_asleep(&c, SYS_epoll_wait, SYS_epoll_pwait, "C");

	/* The page goes away and the fault is let go: A's copy fails. */
	REQUIRE(munmap(map + pg, pg) == 0, "munmap");
	close(uffd);
	pthread_join(a.thread, NULL);
	if (skip) {
		CHECK(a.ret == skip * (long)REC, "%s: A read %ld, want %ld", name,
		      a.ret, skip * (long)REC);
		for (i = 0; i < skip && a.ret > 0; i++)
			CHECK(((struct stablesend_cqe *)a.buf)[i].user_data ==
			      first + i, "%s: A's record %d", name, i);
	} else {
		CHECK(a.ret == -1 && a.err == EFAULT, "%s: A got %ld (%s), want EFAULT",
		      name, a.ret, strerror(a.err));
	}

	/* The records A put back wake both. */
	finished(&b, &c, &ok_b, &ok_c, &kicks);
	CHECK(ok_b, "%s: reader asleep in read() not woken by the records put back",
	      name);
	CHECK(b.ret == (long)REC && got[0].user_data == first + skip,
	      "%s: B read %ld, user_data %llu, want %llu", name, b.ret,
	      (unsigned long long)got[0].user_data,
	      (unsigned long long)(first + skip));
	CHECK(ok_c, "%s: epoll_wait() not woken by the records put back",
	      name);
	CHECK(c.ret == 1, "%s: epoll_wait returned %ld", name, c.ret);

	/* The rest, in order, and nothing else (but what a kick added). */
	i = ss_reap(dev, rest, n - skip - 1, 2000);
	CHECK(i == n - skip - 1, "%s: %d records left, want %d", name, i,
	      n - skip - 1);
	while (--i >= 0)
		CHECK(rest[i].user_data == first + skip + 1 + i &&
		      rest[i].res == 1 && (rest[i].flags & STABLESEND_CQE_SENT),
		      "%s: record %d: user_data %llu res %lld", name, i,
		      (unsigned long long)rest[i].user_data,
		      (long long)rest[i].res);
	if (kicks)
		ss_reap(dev, rest, kicks, 2000);
	ss_counters(dev, &k);
	CHECK(k.cqes_pending == 0, "%s: %llu records more", name,
	      (unsigned long long)k.cqes_pending);
	close(ep);
	munmap(map, pg);
}

int main(void)
{
	dev = ss_dev();
	file = temp_file(4096, 'f');
	REQUIRE(ss_setup(dev, -1, 0) == 0, "SETUP");
	unix_pair(&sock, &peer);
	round_trip("nothing copied", 2, 0, 1);
	round_trip("one copied", 3, 1, 11);
	close(sock);
	close(peer);
	close(dev);
	return test_result();
}
