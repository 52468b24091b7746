// SPDX-License-Identifier: GPL-2.0
/*
 * One user cannot pin the machine's memory (issue 14).  Snapshot memory is
 * bounded per user across all its opens (module parameter user_limit, by
 * default a sixteenth of RAM, well under a quarter):
 * - as nobody, without a memory cgroup, opens that each submit their 16 MiB
 *   to a peer that never reads are refused (EAGAIN on a non-blocking fd)
 *   before the module holds more than user_limit, and long before RAM/4;
 * - meanwhile another user submits as usual: the bound is per user;
 * - a blocking submitter of the same user waits, and goes on when memory
 *   of the user's comes back (one open closed, its peer gone);
 * - everything comes back when the opens are closed;
 * - root with CAP_SYS_RESOURCE goes beyond the bound, root without it does
 *   not, and SETUP reports an open's limit cut to the bound;
 * - poll() says POLLOUT once a request refused for memory fits, and
 *   not before (at least a 64 KiB chunk free); so do io_uring's POLL_ADD
 *   and aio's IOCB_CMD_POLL, which take the event from the wake-up itself,
 *   and an edge-triggered epoll; a change of user_limit that makes room
 *   wakes them all;
 * - idle pool pages of an open still in use go back to the kernel under
 *   reclaim (drop_caches runs the shrinkers);
 * - a SEND that waits for the user's memory while the same thread's own
 *   earlier SUBMIT holds it (queued behind a slow reader, sent on only by
 *   that thread) completes: the wait gives way to the thread's task work.
 * (The module used to pin whatever its opens asked: 1104 MiB of 1973 for
 * nobody alone, and kept idle pools until close.)
 * test-timeout: 240
 */
#include "common.h"
#include "users.h"
#include "uring.h"
#include <grp.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/aio_abi.h>
#include <linux/capability.h>

#define REQ		(16 << 20)
#define MAX_OPENS	200
#define PARAM		"/sys/module/stablesend/parameters/user_limit"

static long long mem_total(void)
{
	char buf[4096], *p;

	if (read_text("/proc/meminfo", buf, sizeof(buf)))
		return -1;
	p = strstr(buf, "MemTotal:");
	return p ? strtoll(p + 9, NULL, 10) << 10 : -1;
}

static long long param(void)
{
	char buf[64];

	return read_str(PARAM, buf, sizeof(buf)) ? -1 : strtoll(buf, NULL, 10);
}

struct pinner {
	int dev[MAX_OPENS], a[MAX_OPENS], b[MAX_OPENS];
	int n;			/* opens whose submission was taken */
	int err;		/* errno of the refused one, 0 if none was */
	long long pinned;	/* pool_bytes when refused */
};

/*
 * Open the device again and again (non-blocking), each open submitting
 * @len bytes of @file to an AF_UNIX peer that never reads, until one is
 * refused or the module holds more than @stop bytes.
 */
static void pin(struct pinner *p, int file, size_t len, long long stop)
{
	struct stablesend_req r;

	p->n = 0;
	p->err = 0;
	while (p->n < MAX_OPENS) {
		int i = p->n;

		p->dev[i] = open(STABLESEND_DEVICE, O_RDWR | O_NONBLOCK | O_CLOEXEC);
		if (p->dev[i] < 0 || ss_setup(p->dev[i], -1, 0)) {
			p->err = errno;
			break;
		}
		unix_pair(&p->a[i], &p->b[i]);
		r = ss_req(file, p->a[i], 0, len, i);
		if (ss_submit(p->dev[i], &r, 1) != 1) {
			p->err = errno;
			close(p->dev[i]);
			close(p->a[i]);
			close(p->b[i]);
			break;
		}
		p->n++;
		if (ss_stat("pool_bytes") > stop)
			break;
	}
	p->pinned = ss_stat("pool_bytes");
}

static void unpin(struct pinner *p)
{
	while (p->n > 0) {
		p->n--;
		close(p->dev[p->n]);
		close(p->a[p->n]);
		close(p->b[p->n]);
	}
}

/* Child: submit @len once, as @uid, on a blocking fd or not; exit 0 if taken. */
static pid_t submit_as(uid_t uid, int file, size_t len, int nonblock)
{
	pid_t pid = fork();

	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		struct stablesend_req r;
		int dev, a, b;

		become(uid);
		dev = open(STABLESEND_DEVICE,
			   O_RDWR | O_CLOEXEC | (nonblock ? O_NONBLOCK : 0));
		if (dev < 0 || ss_setup(dev, -1, 0))
			_exit(91);
		unix_pair(&a, &b);
		r = ss_req(file, a, 0, len, 1);
		_exit(ss_submit(dev, &r, 1) == 1 ? 0 : errno == EAGAIN ? 11 : 92);
	}
	return pid;
}

static int exited(pid_t pid, double timeout_s)
{
	double end = now_s() + timeout_s;
	int st;

	do {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(20000);
	} while (now_s() < end);
	return -1;
}

static void user_bound(int file, long long total, long long limit)
{
	int tell[2], done[2], st, rc;
	struct pinner *p = calloc(1, sizeof(*p));
	long long stop = total / 4;
	pid_t pinner, other, waiter;
	char c;

	REQUIRE(p && !pipe(tell) && !pipe(done), "pipes");
	pinner = fork();
	REQUIRE(pinner >= 0, "fork");
	if (!pinner) {
		become(65534);
		pin(p, file, REQ, stop);
		printf("  nobody: %d opens of 16 MiB taken, then %s; module holds %lld MiB\n",
		       p->n, p->err ? strerror(p->err) : "none refused",
		       p->pinned >> 20);
		fflush(stdout);
		c = p->err == EAGAIN && p->pinned <= limit && p->n > 0;
		if (write(done[1], &c, 1) != 1)
			_exit(93);
		/* Give one open's memory back when told, then the rest. */
		if (read(tell[0], &c, 1) != 1)
			_exit(94);
		p->n--;
		close(p->dev[p->n]);
		close(p->a[p->n]);
		close(p->b[p->n]);
		if (read(tell[0], &c, 1) != 1)
			_exit(94);
		unpin(p);
		_exit(0);
	}
	REQUIRE(read(done[0], &c, 1) == 1, "pinner died");
	CHECK(c, "nobody was not refused with EAGAIN within user_limit %lld MiB (RAM/4 is %lld MiB)",
	      limit >> 20, stop >> 20);

	/* Another user is not held back by nobody's memory. */
	other = submit_as(65533, file, REQ, 1);
	rc = exited(other, 30);
	CHECK(rc == 0, "uid 65533's submission while nobody is at its bound: %d", rc);

	/* Nobody again, blocking: waits until one of nobody's opens lets go. */
	waiter = submit_as(65534, file, REQ, 0);
	rc = exited(waiter, 0.5);
	CHECK(rc == -1, "a blocking submission over the bound did not wait (%d)", rc);
	REQUIRE(write(tell[1], "x", 1) == 1, "tell");
	if (rc == -1) {
		rc = exited(waiter, 30);
		CHECK(rc == 0, "the waiting submission did not go on when memory came back (%d)",
		      rc);
		if (rc == -1) {
			kill(waiter, SIGKILL);
			waitpid(waiter, &st, 0);
		}
	}
	REQUIRE(write(tell[1], "x", 1) == 1, "tell");
	REQUIRE(waitpid(pinner, &st, 0) == pinner, "waitpid");
	CHECK(WIFEXITED(st) && !WEXITSTATUS(st), "pinner: status %#x", st);
	CHECK(ss_stat_wait("pool_bytes", 0, 20) == 0,
	      "memory not given back after close: pool_bytes %lld", ss_stat("pool_bytes"));
	free(p);
}

/* Print a file of /proc/@pid, indented. */
static void show_proc(pid_t pid, const char *name)
{
	char path[64], buf[4096];

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	if (read_text(path, buf, sizeof(buf)))
		return;
	printf("  --- %s:\n%s\n", path, buf);
}

/*
 * Wait up to @secs for child @pid; true if it exited.  Else print where
 * it (and its descendants' parent) is stuck: its kernel stack, its
 * signal and task-work state, and the module's counters.
 */
static bool wait_or_show(pid_t pid, int *st, int secs)
{
	for (int i = 0; i < secs * 10; i++) {
		if (waitpid(pid, st, WNOHANG) == pid)
			return true;
		usleep(100000);
	}
	printf("  child %d still running after %d s:\n", (int)pid, secs);
	show_proc(pid, "stack");
	show_proc(pid, "wchan");
	show_proc(pid, "status");
	printf("  requests_in_flight %lld, bytes_in_flight %lld, pool_bytes %lld\n",
	       ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"),
	       ss_stat("pool_bytes"));
	return false;
}

/* Set user_limit to @bytes and fork: the child's pid, 0 in the child. */
static pid_t fork_under(long long bytes)
{
	char val[32];
	pid_t pid;

	snprintf(val, sizeof(val), "%lld", bytes);
	REQUIRE(!write_str(PARAM, val), "set user_limit");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	return pid;
}

/* Child @pid must exit 0 within 30 s; one that does not is shown, then killed. */
static void child_ok(pid_t pid, const char *what)
{
	int st;

	if (!wait_or_show(pid, &st, 30)) {
		kill(pid, SIGKILL);
		REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	}
	CHECK(WIFEXITED(st) && !WEXITSTATUS(st), "%s: %s %d", what,
	      WIFSIGNALED(st) ? "killed by signal" : "exit status",
	      WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

/* Root beyond a 32 MiB bound with CAP_SYS_RESOURCE, not without it. */
static void cap_sys_resource(int file, long long limit)
{
	const long long small = 32 << 20;
	struct stablesend_setup s = { .eventfd = -1, .mem_limit = 64 << 20 };
	char val[32];
	pid_t pid;

	pid = fork_under(small);
	if (!pid) {
		struct pinner *p = calloc(1, sizeof(*p));

		pin(p, file, REQ, 4 * small);
		printf("  root: %d opens of 16 MiB taken (%s), module holds %lld MiB\n",
		       p->n, p->err ? strerror(p->err) : "none refused", p->pinned >> 20);
		_exit(p->n * (long long)REQ >= 3 * small ? 0 : 1);
	}
	child_ok(pid, "root with CAP_SYS_RESOURCE went beyond user_limit");
	CHECK(ss_stat_wait("pool_bytes", 0, 20) == 0, "pool_bytes %lld after root's opens",
	      ss_stat("pool_bytes"));

	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		struct pinner *p = calloc(1, sizeof(*p));
		int dev;

		if (drop_sys_resource())
			_exit(2);
		dev = ss_dev();
		if (ioctl(dev, STABLESEND_IOC_SETUP, &s) || s.mem_limit != small) {
			printf("  SETUP asked 64 MiB over a 32 MiB bound: got %llu\n",
			       (unsigned long long)s.mem_limit);
			_exit(3);
		}
		pin(p, file, REQ, 4 * small);
		printf("  root without CAP_SYS_RESOURCE: %d opens taken, then %s, %lld MiB\n",
		       p->n, p->err ? strerror(p->err) : "none refused", p->pinned >> 20);
		_exit(p->err == EAGAIN && p->pinned <= small ? 0 : 1);
	}
	child_ok(pid, "root without CAP_SYS_RESOURCE held to user_limit");
	snprintf(val, sizeof(val), "%lld", limit);
	REQUIRE(!write_str(PARAM, val), "restore user_limit");
	CHECK(ss_stat_wait("pool_bytes", 0, 20) == 0, "pool_bytes %lld at the end",
	      ss_stat("pool_bytes"));
}

/*
 * A child that reads @want bytes of @fd after @delay_ms, exits 0 if it got
 * them.  It holds no other descriptor of ours (a sending end it held
 * would keep its own read from ever seeing EOF) and dies with its parent.
 */
static pid_t drain(int fd, size_t want, int delay_ms)
{
	pid_t pid = fork();
	size_t got = 0;
	char *buf;
	ssize_t n;
	int i;

	if (pid)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (i = 3; i < 1024; i++)
		if (i != fd)
			close(i);
	buf = malloc(1 << 16);
	usleep(delay_ms * 1000);
	while (buf && got < want) {
		n = read(fd, buf, 1 << 16);
		if (n <= 0)
			break;
		got += n;
	}
	_exit(got == want ? 0 : 1);
}

/*
 * As nobody under an 8 MiB bound, single-threaded (another thread could
 * send on for it): SUBMIT 6 MiB to a peer that starts reading late (most
 * of it waits on the socket's FIFO, for this thread's task work), then
 * SEND 4 MiB on another open: the SEND needs 2 MiB of the SUBMIT's memory
 * back, which only this thread can send on.
 */
static void send_behind_own_submit(int file, long long limit)
{
	char val[32];
	pid_t pid;

	pid = fork_under(8 << 20);
	if (!pid) {
		struct stablesend_req r;
		int a, b, c, d, e, f, s1, s2;
		pid_t p1, p2;
		long sent;

		become(65534);
		a = ss_dev();
		b = ss_dev();
		unix_pair(&c, &d);
		unix_pair(&e, &f);
		r = ss_req(file, c, 0, 6 << 20, 1);
		if (ss_submit(a, &r, 1) != 1)
			_exit(2);
		p1 = drain(d, 6 << 20, 300);
		p2 = drain(f, 4 << 20, 0);
		close(d);
		close(f);
		r = ss_req(file, e, 0, 4 << 20, 2);
		sent = ss_send(b, &r);
		/* What is left of the SUBMIT goes out while we wait for the peer. */
		while (waitpid(p1, &s1, 0) < 0 && errno == EINTR)
			;
		while (waitpid(p2, &s2, 0) < 0 && errno == EINTR)
			;
		printf("  SEND behind its own SUBMIT under an 8 MiB bound: %ld bytes; peers %s\n",
		       sent, !s1 && !s2 ? "got everything" : "came short");
		_exit(sent == 4 << 20 && !s1 && !s2 ? 0 : 1);
	}
	child_ok(pid, "SEND behind the thread's own SUBMIT");
	snprintf(val, sizeof(val), "%lld", limit);
	REQUIRE(!write_str(PARAM, val), "restore user_limit");
	CHECK(ss_stat_wait("pool_bytes", 0, 20) == 0, "pool_bytes %lld after SEND behind SUBMIT",
	      ss_stat("pool_bytes"));
}

/*
 * One open shared by two single-threaded processes, its limit 8 MiB: P1
 * SUBMITs 6 MiB to a peer that starts reading late (the rest waits for
 * P1's task work); P2 SUBMITs 4 MiB, reserves piecemeal and waits for
 * memory with the open's piecemeal lock held; then P1 SENDs 1 MiB, which
 * must wait for that lock.  Only P1's task work frees what P2 waits for:
 * P1's wait for the lock must give way to it, as its waits for memory do.
 */
static void send_behind_shared_piecemeal(int file)
{
	pid_t pid = fork();

	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		struct stablesend_req r;
		int a, c, d, e, f, g, h, s1, s2, s3, s4;
		pid_t p1, p2, p3, p2d;
		long sent;

		become(65534);
		a = ss_dev();
		if (ss_setup(a, -1, 8 << 20))
			_exit(2);
		unix_pair(&c, &d);
		unix_pair(&e, &f);
		unix_pair(&g, &h);
		r = ss_req(file, c, 0, 6 << 20, 1);
		if (ss_submit(a, &r, 1) != 1)
			_exit(3);
		p1 = drain(d, 6 << 20, 500);
		p2d = drain(h, 4 << 20, 0);
		p2 = fork();
		if (!p2) {
			/* P2: piecemeal, holding the lock while it waits. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			r = ss_req(file, g, 0, 4 << 20, 2);
			_exit(ss_send(a, &r) == 4 << 20 ? 0 : 1);
		}
		p3 = drain(f, 1 << 20, 0);
		close(d);
		close(f);
		close(h);
		usleep(200000);	/* P2 is waiting for memory by now */
		r = ss_req(file, e, 0, 1 << 20, 3);
		sent = ss_send(a, &r);
		while (waitpid(p2, &s2, 0) < 0 && errno == EINTR)
			;
		while (waitpid(p1, &s1, 0) < 0 && errno == EINTR)
			;
		while (waitpid(p3, &s3, 0) < 0 && errno == EINTR)
			;
		while (waitpid(p2d, &s4, 0) < 0 && errno == EINTR)
			;
		printf("  SEND waiting for the open's piecemeal lock behind its own SUBMIT: %ld bytes; P2 %s, peers %s\n",
		       sent, !s2 ? "sent 4 MiB" : "came short",
		       !s1 && !s3 && !s4 ? "got everything" : "came short");
		_exit(sent == 1 << 20 && !s1 && !s2 && !s3 && !s4 ? 0 : 1);
	}
	child_ok(pid, "SEND behind a shared open's piecemeal lock");
	CHECK(ss_stat_wait("pool_bytes", 0, 20) == 0,
	      "pool_bytes %lld after the shared-open case", ss_stat("pool_bytes"));
}

/*
 * poll() says POLLOUT only with a chunk (64 KiB) free under the open's
 * limit: with one page free a level-triggered loop would spin on EAGAIN.
 */
static void poll_low_water(int file)
{
	/* Whole chunks, then pieces that fill all but one page exactly. */
	static const int kib[] = { 960, 32, 16, 8, 4 };
	int dev = ss_dev(), c, d, off = 0;
	struct stablesend_req r[5];
	struct pollfd p;
	char *buf = malloc(1 << 20);

	REQUIRE(buf, "malloc");
	REQUIRE(ss_setup(dev, -1, 1 << 20) == 0, "SETUP 1 MiB");
	unix_pair(&c, &d);
	for (int i = 0; i < 5; i++) {
		r[i] = ss_req(file, c, off, kib[i] << 10, i);
		off += kib[i] << 10;
	}
	REQUIRE(ss_submit(dev, r, 5) == 5, "SUBMIT 1 MiB less a page");
	p = (struct pollfd){ .fd = dev, .events = POLLOUT };
	CHECK(poll(&p, 1, 0) == 0,
	      "POLLOUT with one page of the open's 1 MiB free (revents %#x)",
	      p.revents);
	printf("  poll with one page free: %s\n",
	       p.revents & POLLOUT ? "POLLOUT" : "not writable");
	CHECK(read_full(d, buf, (1 << 20) - 4096) == (1 << 20) - 4096, "read");
	p = (struct pollfd){ .fd = dev, .events = POLLOUT };
	CHECK(poll(&p, 1, 10000) == 1 && p.revents & POLLOUT,
	      "no POLLOUT within 10 s once the peer read everything");
	close(dev);
	close(c);
	close(d);
	free(buf);
}

static long long mem_in_use(int dev)
{
	struct stablesend_counters c;

	ss_counters(dev, &c);
	return c.mem_in_use;
}

/* The memory in use of the opens @sub and @dev (one open if the same). */
static long long used_by(int sub, int dev)
{
	return mem_in_use(sub) + (dev != sub ? mem_in_use(dev) : 0);
}

/*
 * Read from @d, 16 KiB at a time, until the opens @sub and @dev have at
 * most @max in use (10 s): which read frees a request's pages depends on
 * how the socket packs them (6.1's AF_UNIX appends pages to the skb
 * queued last).  Returns the memory in use then, or -1.
 */
static long long drain_to(int sub, int dev, int d, long long max, char *buf)
{
	for (int i = 0; i < 1000; i++) {
		long long used = used_by(sub, dev);

		if (used <= max)
			return used;
		if (read_full(d, buf, 16 << 10) != 16 << 10)
			return -1;
		usleep(10000);
	}
	return -1;
}

/*
 * Pollers of the device fd for POLLOUT that poll(2) does not cover: an
 * io_uring POLL_ADD and an aio IOCB_CMD_POLL take what the wake-up says
 * without polling again; an edge-triggered epoll reports only after a
 * wake-up, so one must come when room does.
 */
struct pollers {
	struct ring r;
	aio_context_t aio;
	struct iocb cb;
	int ep;
	bool ring_armed, aio_armed, ep_added;
};

static void pollers_init(struct pollers *p)
{
	int err = ring_init(&p->r, 4, 0);

	REQUIRE(!err, "io_uring_setup: %s", strerror(-err));
	p->aio = 0;
	REQUIRE(!syscall(SYS_io_setup, 4, &p->aio), "io_setup: %s", strerror(errno));
	p->ep = epoll_create1(0);
	REQUIRE(p->ep >= 0, "epoll_create1");
	p->ring_armed = p->aio_armed = p->ep_added = false;
}

static void pollers_exit(struct pollers *p)
{
	ring_exit(&p->r);
	syscall(SYS_io_destroy, p->aio);
	close(p->ep);
}

static void pollers_arm(struct pollers *p, int dev)
{
	struct iocb *cbs[1] = { &p->cb };

	poll_sqe(&p->r, dev, POLLOUT, 0, 0);
	p->ring_armed = true;
	memset(&p->cb, 0, sizeof(p->cb));
	p->cb.aio_lio_opcode = IOCB_CMD_POLL;
	p->cb.aio_fildes = dev;
	p->cb.aio_buf = POLLOUT;
	p->aio_armed = syscall(SYS_io_submit, p->aio, 1, cbs) == 1;
	CHECK(p->aio_armed, "aio IOCB_CMD_POLL POLLOUT on the device fd: %s",
	      strerror(errno));
	if (!p->ep_added) {
		struct epoll_event ev = { .events = EPOLLOUT | EPOLLET };

		REQUIRE(!epoll_ctl(p->ep, EPOLL_CTL_ADD, dev, &ev), "EPOLL_CTL_ADD");
		p->ep_added = true;
		/* Not writable now: the edge to come is what counts. */
		CHECK(epoll_wait(p->ep, &ev, 1, 0) == 0,
		      "epoll EPOLLOUT with the limit in use (%#x)", ev.events);
	}
}

#define SEEN_RING	1
#define SEEN_AIO	2
#define SEEN_EPOLL	4
#define SEEN_ALL	(SEEN_RING | SEEN_AIO | SEEN_EPOLL)

/*
 * Which pollers said POLLOUT within @ms (SEEN_*): an armed one that says
 * anything else fails the test, and one that said something is unarmed.
 */
static int pollers_seen(struct pollers *p, int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	struct io_uring_cqe cqe;
	struct epoll_event eev;
	struct io_event ev;
	int seen = 0;

	if (p->ring_armed && !ring_wait(&p->r, &cqe, ms)) {
		p->ring_armed = false;
		CHECK(cqe.res > 0 && (cqe.res & POLLOUT), "io_uring POLL_ADD: %d", cqe.res);
		seen |= SEEN_RING;
	}
	if (p->aio_armed && syscall(SYS_io_getevents, p->aio, 0, 1, &ev, &ts) == 1) {
		p->aio_armed = false;
		CHECK(ev.res > 0 && (ev.res & POLLOUT), "aio IOCB_CMD_POLL: %lld",
		      (long long)ev.res);
		seen |= SEEN_AIO;
	}
	if (epoll_wait(p->ep, &eev, 1, ms) == 1) {
		CHECK(eev.events & EPOLLOUT, "epoll: %#x", eev.events);
		seen |= SEEN_EPOLL;
	}
	return seen;
}

/*
 * One round of poll_refused(): the open @sub fills 1 MiB with 4 x 256 KiB
 * to a peer that reads only as told; the open @dev (the same, or another
 * of the same user under a 1 MiB user_limit) is refused 512 KiB.  Returns
 * 0 when a read gave back too much at once to look at the middle case.
 */
static int refused_round(int file, int sub, int dev, char *buf)
{
	struct stablesend_req r[4], big, small;
	struct pollers pl;
	long long used;
	struct pollfd p;
	int c, d, ok, seen;
	pid_t pid;

	unix_pair(&c, &d);
	pollers_init(&pl);
	for (int i = 0; i < 4; i++)
		r[i] = ss_req(file, c, i << 18, 1 << 18, i);
	REQUIRE(ss_submit(sub, r, 4) == 4, "SUBMIT 4 x 256 KiB");
	big = ss_req(file, c, 1 << 20, 1 << 19, 4);
	small = ss_req(file, c, 3 << 19, 1 << 16, 5);
	CHECK(ss_submit(dev, &big, 1) < 0 && errno == EAGAIN,
	      "512 KiB with the limit in use: %s", strerror(errno));
	pollers_arm(&pl, dev);
	/* A request's pages come back: 64 KiB or more free, too little for it. */
	CHECK(drain_to(sub, dev, d, 3 << 18, buf) >= 0,
	      "no request's pages back within 10 s");
	p = (struct pollfd){ .fd = dev, .events = POLLOUT };
	poll(&p, 1, 0);
	/* Looked at after the poll: memory in use only goes down meanwhile. */
	used = used_by(sub, dev);
	ok = used > 1 << 19;
	if (ok) {
		CHECK(!(p.revents & POLLOUT),
		      "POLLOUT with %lld KiB free after 512 KiB were refused",
		      ((1 << 20) - used) >> 10);
		printf("  poll with %lld KiB free, 512 KiB refused: %s\n",
		       ((1 << 20) - used) >> 10,
		       p.revents & POLLOUT ? "POLLOUT" : "not writable");
		/* Woken by the pages that came back: still no room. */
		seen = pollers_seen(&pl, 100);
		used = used_by(sub, dev);
		CHECK(!seen || used <= 1 << 19,
		      "POLLOUT from %s%s%swith %lld KiB free after 512 KiB were refused",
		      seen & SEEN_RING ? "io_uring POLL_ADD " : "",
		      seen & SEEN_AIO ? "aio IOCB_CMD_POLL " : "",
		      seen & SEEN_EPOLL ? "edge-triggered epoll " : "",
		      ((1 << 20) - used) >> 10);
		/* A request that gets its memory ends that wait (given up). */
		CHECK(ss_submit(dev, &small, 1) == 1, "64 KiB with %lld KiB free: %s",
		      ((1 << 20) - used) >> 10, strerror(errno));
		p = (struct pollfd){ .fd = dev, .events = POLLOUT };
		CHECK(poll(&p, 1, 0) == 1 && p.revents & POLLOUT,
		      "no POLLOUT with 64 KiB or more free after a request went");
		seen |= pollers_seen(&pl, 5000);
		CHECK(seen == SEEN_ALL,
		      "a poller without POLLOUT after a request went (%#x of %#x)",
		      seen, SEEN_ALL);
		CHECK(ss_submit(dev, &big, 1) < 0 && errno == EAGAIN,
		      "512 KiB refused again: %s", strerror(errno));
	} else {
		pollers_seen(&pl, 5000);
	}
	pollers_arm(&pl, dev);
	/* Half comes back while we sleep in poll(): it wakes us, not before. */
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		usleep(200000);
		_exit(drain_to(sub, dev, d, 1 << 19, buf) >= 0 ? 0 : 1);
	}
	p = (struct pollfd){ .fd = dev, .events = POLLOUT };
	CHECK(poll(&p, 1, 10000) == 1 && p.revents & POLLOUT,
	      "no POLLOUT within 10 s while the reader frees 512 KiB");
	used = used_by(sub, dev);
	CHECK(used <= 1 << 19, "POLLOUT with only %lld KiB free",
	      ((1 << 20) - used) >> 10);
	seen = pollers_seen(&pl, 5000);
	CHECK(seen == SEEN_ALL, "a poller without POLLOUT once 512 KiB came back (%#x of %#x)",
	      seen, SEEN_ALL);
	child_ok(pid, "reader");
	pollers_exit(&pl);
	CHECK(ss_submit(dev, &big, 1) == 1,
	      "512 KiB after POLLOUT: %s", strerror(errno));
	/* The socket closes once its requests are out: read to the end. */
	close(c);
	while (read(d, buf, 1 << 20) > 0)
		;
	close(d);
	return ok;
}

/*
 * After a request is refused for memory (EAGAIN), poll() says POLLOUT
 * only once that request fits, not at the first 64 KiB: a level-triggered
 * loop of 512 KiB requests would spin on EAGAIN otherwise.  Under the
 * open's limit, and under the user's (as nobody: root has
 * CAP_SYS_RESOURCE), where another open of the user holds the memory.
 */
static void poll_refused(int file)
{
	char *buf = malloc(1 << 20);
	int dev, fl, seen = 0;
	pid_t pid;

	REQUIRE(buf, "malloc");
	for (int i = 0; i < 3 && !seen; i++) {
		dev = ss_dev();
		REQUIRE(ss_setup(dev, -1, 1 << 20) == 0, "SETUP 1 MiB");
		fl = fcntl(dev, F_GETFL);
		REQUIRE(fl >= 0 && !fcntl(dev, F_SETFL, fl | O_NONBLOCK), "O_NONBLOCK");
		seen = refused_round(file, dev, dev, buf);
		close(dev);
	}
	CHECK(seen, "the open's limit: every round freed too much at once");

	REQUIRE(!write_str(PARAM, "1048576"), "user_limit 1 MiB");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		become(65534);
		seen = 0;
		for (int i = 0; i < 3 && !seen; i++) {
			int sub = ss_dev();

			dev = ss_dev();
			if (ss_setup(sub, -1, 1 << 20) || ss_setup(dev, -1, 1 << 20))
				_exit(2);
			fl = fcntl(dev, F_GETFL);
			if (fl < 0 || fcntl(dev, F_SETFL, fl | O_NONBLOCK))
				_exit(3);
			seen = refused_round(file, sub, dev, buf);
			close(dev);
			close(sub);
		}
		CHECK(seen, "the user's limit: every round freed too much at once");
		_exit(test_result());
	}
	child_ok(pid, "poll after a refusal under the user's limit, as nobody");
	REQUIRE(!write_str(PARAM, "0"), "user_limit back to its default");
	free(buf);
}

/*
 * @big is refused on @dev; its pollers (io_uring's POLL_ADD, aio's
 * IOCB_CMD_POLL and an edge-triggered epoll) say nothing until root,
 * told through @go, changes user_limit (@cmd: 'r' raise, 'l' lower), and
 * then POLLOUT, all three within 5 s.  As nobody, with another open
 * holding memory for a peer that does not read.
 */
static void limit_round(int dev, struct stablesend_req *big, int go, char cmd)
{
	const char *change = cmd == 'r' ? "raised 1 -> 4 MiB" : "lowered 4 -> 2 MiB";
	struct pollers pl;
	int seen;

	CHECK(ss_submit(dev, big, 1) < 0 && errno == EAGAIN,
	      "%llu KiB refused: %s", (unsigned long long)big->len >> 10,
	      strerror(errno));
	pollers_init(&pl);
	pollers_arm(&pl, dev);
	seen = pollers_seen(&pl, 200);
	CHECK(!seen, "POLLOUT (%#x) before user_limit changed", seen);
	CHECK(write(go, &cmd, 1) == 1, "pipe write");
	seen |= pollers_seen(&pl, 5000);
	printf("  user_limit %s, %llu KiB refused: POLLOUT from %s%s%s\n",
	       change, (unsigned long long)big->len >> 10,
	       seen & SEEN_RING ? "io_uring POLL_ADD, " : "",
	       seen & SEEN_AIO ? "aio IOCB_CMD_POLL, " : "",
	       seen & SEEN_EPOLL ? "edge-triggered epoll" : "");
	CHECK(seen == SEEN_ALL,
	      "a poller without POLLOUT after user_limit was %s (%#x of %#x)",
	      change, seen, SEEN_ALL);
	pollers_exit(&pl);
}

/*
 * A change of user_limit that makes room wakes the pollers.  Under 1 MiB,
 * all of it in use, 512 KiB is refused: raised to 4 MiB, it fits.  With
 * 1.5 MiB in use, 3 MiB is refused: lowered to 2 MiB, 3 MiB is no longer
 * waited for (EMSGSIZE), and a 64 KiB chunk fits.
 */
static void poll_limit_changed(int file)
{
	int go[2];
	pid_t pid;
	char x;

	REQUIRE(!pipe(go), "pipe");
	REQUIRE(!write_str(PARAM, "1048576"), "user_limit 1 MiB");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		struct stablesend_req r[4], big, huge;
		int sub, dev, dev2, fl, c, d;

		close(go[0]);
		become(65534);
		sub = ss_dev();
		dev = ss_dev();
		dev2 = ss_dev();
		if (ss_setup(sub, -1, 1 << 20) || ss_setup(dev, -1, 1 << 20))
			_exit(2);
		fl = fcntl(dev, F_GETFL);
		if (fl < 0 || fcntl(dev, F_SETFL, fl | O_NONBLOCK) ||
		    fcntl(dev2, F_SETFL, fl | O_NONBLOCK))
			_exit(3);
		unix_pair(&c, &d);
		for (int i = 0; i < 4; i++)
			r[i] = ss_req(file, c, i << 18, 1 << 18, i);
		CHECK(ss_submit(sub, r, 4) == 4, "SUBMIT 4 x 256 KiB: %s",
		      strerror(errno));
		big = ss_req(file, c, 1 << 20, 1 << 19, 4);
		limit_round(dev, &big, go[1], 'r');
		CHECK(ss_submit(dev, &big, 1) == 1, "512 KiB after the raise: %s",
		      strerror(errno));
		/* 1.5 MiB in use now; an open whose own limit is the 4 MiB. */
		CHECK(ss_setup(dev2, -1, 4 << 20) == 0, "SETUP 4 MiB: %s",
		      strerror(errno));
		huge = ss_req(file, c, 2 << 20, 3 << 20, 5);
		limit_round(dev2, &huge, go[1], 'l');
		CHECK(ss_submit(dev2, &huge, 1) < 0 && errno == EMSGSIZE,
		      "3 MiB under a 2 MiB user_limit: %s", strerror(errno));
		close(dev2);
		close(dev);
		close(sub);
		_exit(test_result());
	}
	close(go[1]);
	while (read(go[0], &x, 1) == 1)
		REQUIRE(!write_str(PARAM, x == 'r' ? "4194304" : "2097152"),
			"user_limit %s", x == 'r' ? "4 MiB" : "2 MiB");
	close(go[0]);
	child_ok(pid, "pollers woken by a change of user_limit, as nobody");
	REQUIRE(!write_str(PARAM, "0"), "user_limit back to its default");
	CHECK(ss_stat_wait("pool_bytes", 0, 20) == 0,
	      "pool_bytes %lld after the changed limit", ss_stat("pool_bytes"));
}

/* Idle pool pages of a live open go back under reclaim. */
static void shrinker(int file)
{
	int dev = ss_dev(), c, s;
	char *buf = malloc(8 << 20);
	struct stablesend_req r;
	struct stablesend_cqe cqe;
	long long idle;

	REQUIRE(buf, "malloc");
	REQUIRE(ss_setup(dev, -1, 16 << 20) == 0, "SETUP");
	tcp_pair(AF_INET, &c, &s);
	r = ss_req(file, c, 0, 8 << 20, 1);
	r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
	REQUIRE(ss_submit(dev, &r, 1) == 1, "submit");
	CHECK(read_full(s, buf, 8 << 20) == 8 << 20, "read 8 MiB");
	CHECK(ss_reap(dev, &cqe, 1, 10000) == 1, "SENT");
	CHECK(ss_reap(dev, &cqe, 1, 10000) == 1 &&
	      cqe.flags & STABLESEND_CQE_RELEASED, "RELEASED");
	idle = ss_stat("pool_idle_bytes");
	CHECK(idle >= 8 << 20, "pool_idle_bytes %lld after 8 MiB came back", idle);
	REQUIRE(!write_str("/proc/sys/vm/drop_caches", "2"), "drop_caches");
	CHECK(ss_stat("pool_idle_bytes") == 0 && ss_stat("pool_bytes") == 0,
	      "after drop_caches: pool_idle_bytes %lld, pool_bytes %lld",
	      ss_stat("pool_idle_bytes"), ss_stat("pool_bytes"));
	printf("  shrinker: %lld MiB idle in the pool, %lld MiB after drop_caches\n",
	       idle >> 20, ss_stat("pool_idle_bytes") >> 20);
	/* The open still works. */
	REQUIRE(ss_submit(dev, &r, 1) == 1, "submit after the shrinker");
	CHECK(read_full(s, buf, 8 << 20) == 8 << 20, "read 8 MiB again");
	close(dev);
	close(c);
	close(s);
	free(buf);
}

int main(void)
{
	long long total = mem_total(), limit = param();
	int file = temp_file(REQ, 'u');

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(total > 0, "MemTotal");
	printf("RAM %lld MiB, user_limit %lld MiB\n", total >> 20,
	       limit < 0 ? -1 : limit >> 20);
	CHECK(limit > 0 && limit <= total / 4,
	      "user_limit (%lld) missing or not under a quarter of RAM", limit);
	CHECK(limit == (total >> 12) / 16 << 12,
	      "user_limit %lld at load, not a sixteenth of RAM (%lld)", limit,
	      (total >> 12) / 16 << 12);
	REQUIRE(ss_stat("pool_bytes") == 0, "pool_bytes not 0 at the start");
	user_bound(file, total, limit > 0 ? limit : total / 4);
	if (limit > 0) {
		cap_sys_resource(file, limit);
		/* A race, not a state: several rounds. */
		for (int i = 0; i < 10; i++)
			send_behind_own_submit(file, limit);
		send_behind_shared_piecemeal(file);
		poll_low_water(file);
		poll_refused(file);
		poll_limit_changed(file);
		shrinker(file);
		/* Writing 0 brings the default (the value at load) back. */
		REQUIRE(!write_str(PARAM, "12345678"), "set user_limit");
		REQUIRE(!write_str(PARAM, "0"), "set user_limit to 0");
		CHECK(param() == limit, "user_limit after writing 0: %lld, at load %lld",
		      param(), limit);
		CHECK(write_str(PARAM, "100") && param() == limit,
		      "user_limit took 100 bytes (under a page): now %lld", param());
	}
	return test_result();
}
