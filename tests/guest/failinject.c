// SPDX-License-Identifier: GPL-2.0
/*
 * Fault injection: each operation runs with its Nth fault-injectable call
 * failing (/proc/thread-self/fail-nth; failslab and fail_page_alloc set to
 * reach GFP_KERNEL and order-0 allocations), for N = 1, 2, ... until the
 * operation no longer consumes the fault.  Operations: open + eventfd +
 * SETUP, SUBMIT of one small request, of a multi-page framed one, of a
 * batch of four, synchronous SEND, CANCEL, read of records, close of the
 * device with requests queued, shutdown + close of a socket with requests
 * in flight, an io_uring command (its io_uring_enter() and its CQE).  Every injected failure must give a documented errno (or
 * success); an accepted request gets exactly one SENT record with its
 * full size (and RELEASED when asked); the peer receives exactly the bytes
 * of the accepted requests, in order; afterwards the same open still works
 * (or, closed, goes away); the module ends holding nothing.
 *
 * The sends of queued requests run from task work and wakeups, outside
 * the submitting system call, where fail-nth does not reach: a last phase
 * fails a share of all socket buffer allocations
 * (failslab cache filter on the skbuff caches, no task filter) while
 * requests go out over TCP and AF_UNIX, and checks results and streams.
 *
 * Kernels without CONFIG_FAULT_INJECTION (stock Debian) skip.
 *
 * test-timeout: 900
 */
#include "stress.h"
#include "uring.h"
#include <stablesend.h>
#include <linux/sockios.h>
#include <sys/eventfd.h>

#define DBG		"/sys/kernel/debug/"
#define LIMIT		(4 << 20)
#define FSIZE		(1 << 20)
#define FSEED		5
#define MAXN		400
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))

static unsigned char *fcopy;
static int file, nth_fd = -1, usercopy;
static long long ctx0;

/* --- fault injection knobs ------------------------------------------------ */

struct knob {
	const char *path, *val;
	char old[32];
	int set;
};

static struct knob knobs[] = {
	{ DBG "failslab/ignore-gfp-wait", "N" },
	{ DBG "failslab/verbose", "0" },
	{ DBG "fail_page_alloc/ignore-gfp-wait", "N" },
	{ DBG "fail_page_alloc/ignore-gfp-highmem", "N" },
	{ DBG "fail_page_alloc/min-order", "0" },
	{ DBG "fail_page_alloc/verbose", "0" },
	{ DBG "fail_usercopy/verbose", "0" },
	{ DBG "fail_futex/verbose", "0" },
};

static void knobs_set(void)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(knobs); i++) {
		struct knob *k = &knobs[i];

		if (read_str(k->path, k->old, sizeof(k->old)))
			continue;
		k->set = !write_str(k->path, k->val);
		if (!k->set)
			printf("note: could not set %s\n", k->path);
	}
}

static void knobs_restore(void)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(knobs); i++)
		if (knobs[i].set)
			write_str(knobs[i].path, knobs[i].old);
}

/* The Nth fault-injectable call of this thread from now on fails. */
static void inject(int n)
{
	char b[16];
	int len = snprintf(b, sizeof(b), "%d", n);

	REQUIRE(pwrite(nth_fd, b, len, 0) == len, "write fail-nth");
}

/* Was the fault injected?  Disarms it either way. */
static int injected(void)
{
	char b[16] = "";

	REQUIRE(pread(nth_fd, b, sizeof(b) - 1, 0) > 0, "read fail-nth");
	REQUIRE(pwrite(nth_fd, "0", 1, 0) == 1, "write fail-nth");
	return atoi(b) == 0;
}

/* errno of a failed call under injection: ENOMEM, or EFAULT if copies can fail. */
static int clean_errno(int e)
{
	return e == ENOMEM || (usercopy && e == EFAULT);
}

/* --- requests and what the peer must see ---------------------------------- */

static unsigned char head[256], tail[256];

struct tmpl {
	uint64_t off, len;
	uint32_t hlen, tlen, flags;
};

static const struct tmpl small = { 0, 3000, 0, 0, STABLESEND_REQ_NOTIFY_RELEASE };
static const struct tmpl multi = { 1234, 200 << 10, 100, 50, STABLESEND_REQ_NOTIFY_RELEASE };
static const struct tmpl batch[4] = {
	{ 0, 1000, 0, 0, 0 },
	{ 5000, 16 << 10, 10, 0, STABLESEND_REQ_NOTIFY_RELEASE },
	{ 70000, (64 << 10) + 1, 0, 7, 0 },
	{ 9, 1, 0, 0, STABLESEND_REQ_NOTIFY_RELEASE },
};
static const struct tmpl sync_t = { 4096, 40 << 10, 20, 20, STABLESEND_REQ_NOTIFY_RELEASE };
static const struct tmpl clean = { 777, 5000, 3, 3, STABLESEND_REQ_NOTIFY_RELEASE };
static const struct tmpl big = { 0, 512 << 10, 0, 0, 0 };	/* stalls a small socket */
static const struct tmpl ring_t = { 1234, 200 << 10, 100, 50, 0 };	/* CQE only */

static struct stablesend_req mkreq(const struct tmpl *t, int sock, uint64_t ud)
{
	struct stablesend_req r = ss_req(file, sock, t->off, t->len, ud);

	r.head = (uintptr_t)head;
	r.head_len = t->hlen;
	r.tail = (uintptr_t)tail;
	r.tail_len = t->tlen;
	r.flags = t->flags;
	return r;
}

static size_t tsize(const struct tmpl *t)
{
	return t->hlen + t->len + t->tlen;
}

/* Does @b (@n bytes) match the start of request @t? */
static int tmatch(const struct tmpl *t, const unsigned char *b, size_t n)
{
	size_t h = n < t->hlen ? n : t->hlen, f;

	if (memcmp(b, head, h))
		return 0;
	b += h;
	n -= h;
	f = n < t->len ? n : t->len;
	if (memcmp(b, fcopy + t->off, f))
		return 0;
	return !memcmp(b + f, tail, n - f);
}

/* One open of the device with an eventfd, and a socket pair. */
struct env {
	int dev, efd, c, s;
	int nrec;		/* records read */
	struct stablesend_cqe rec[64];
	unsigned char *got;	/* bytes the peer read */
	size_t ngot;
};

#define PEER_MAX	(2 << 20)

static void small_bufs(int c, int s)
{
	int v = 4096;

	setsockopt(c, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

static void env_pair(struct env *e, int tcp, int stall)
{
	if (tcp)
		tcp_pair(AF_INET, &e->c, &e->s);
	else
		unix_pair(&e->c, &e->s);
	if (stall)
		small_bufs(e->c, e->s);
	fcntl(e->s, F_SETFL, O_NONBLOCK);
	e->ngot = 0;
}

static void env_open(struct env *e, int tcp, int stall)
{
	memset(e, 0, sizeof(*e));
	e->got = malloc(PEER_MAX);
	REQUIRE(e->got, "malloc");
	memset(e->got, 0, PEER_MAX);	/* no page fault inside an injected call */
	e->dev = ss_dev();
	e->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	REQUIRE(e->efd >= 0 && ss_setup(e->dev, e->efd, LIMIT) == 0, "SETUP");
	env_pair(e, tcp, stall);
}

static void env_close(struct env *e)
{
	if (e->dev >= 0)
		close(e->dev);
	if (e->efd >= 0)
		close(e->efd);
	if (e->c >= 0)
		close(e->c);
	if (e->s >= 0)
		close(e->s);
	free(e->got);
	e->got = NULL;
}

static void peer_read(struct env *e)
{
	for (;;) {
		ssize_t r = read(e->s, e->got + e->ngot, PEER_MAX - e->ngot);

		if (r <= 0)
			return;
		e->ngot += r;
	}
}

/*
 * Read records until @nrec have come, and peer bytes until @bytes have
 * (and a moment more, to see extra ones); at most @timeout_s.
 */
static void collect(struct env *e, int nrec, size_t bytes, double timeout_s)
{
	double start = now_s(), end = start + timeout_s, quiet = 0;

	for (;;) {
		struct pollfd p[2] = { { .fd = e->dev, .events = POLLIN },
				       { .fd = e->s, .events = POLLIN } };

		poll(p, 2, 20);
		if (p[0].revents & POLLIN) {
			ssize_t r = read(e->dev, e->rec + e->nrec,
					 (64 - e->nrec) * sizeof(e->rec[0]));

			if (r > 0)
				e->nrec += r / sizeof(e->rec[0]);
		}
		peer_read(e);
		if (e->nrec >= nrec && e->ngot >= bytes) {
			if (!quiet)
				quiet = now_s() + 0.05;
			else if (now_s() > quiet)
				return;
		}
		if (now_s() > end)
			return;
	}
}

/* The one SENT record of @ud, or NULL; counts its RELEASED records in *@rel. */
static struct stablesend_cqe *find_rec(struct env *e, uint64_t ud, int *nsent, int *rel)
{
	struct stablesend_cqe *sent = NULL;
	int i;

	*nsent = *rel = 0;
	for (i = 0; i < e->nrec; i++) {
		if (e->rec[i].user_data != ud)
			continue;
		if (e->rec[i].flags & STABLESEND_CQE_SENT) {
			sent = &e->rec[i];
			++*nsent;
		}
		if (e->rec[i].flags & STABLESEND_CQE_RELEASED)
			++*rel;
	}
	return sent;
}

/*
 * The @n requests @t (user_data @ud0..), asynchronous unless @sync, were
 * accepted: each has one SENT record with its size and one RELEASED when
 * asked, and the peer got exactly their bytes in order.
 */
static void check_done(struct env *e, const char *what, const struct tmpl *t, int n,
		       uint64_t ud0, int sync)
{
	size_t total = 0, pos = 0;
	int i, nrec = 0, nsent, rel;

	for (i = 0; i < n; i++) {
		total += tsize(&t[i]);
		nrec += !sync + !!(t[i].flags & STABLESEND_REQ_NOTIFY_RELEASE);
	}
	collect(e, nrec, total, 20);
	for (i = 0; i < n; i++) {
		struct stablesend_cqe *c = find_rec(e, ud0 + i, &nsent, &rel);

		CHECK(nsent == !sync, "%s: request %d has %d SENT records", what, i, nsent);
		CHECK(!c || c->res == (long long)tsize(&t[i]),
		      "%s: request %d result %lld, expected %zu", what, i,
		      c ? (long long)c->res : 0, tsize(&t[i]));
		CHECK(rel == !!(t[i].flags & STABLESEND_REQ_NOTIFY_RELEASE),
		      "%s: request %d has %d RELEASED records", what, i, rel);
		if (pos + tsize(&t[i]) <= e->ngot)
			CHECK(tmatch(&t[i], e->got + pos, tsize(&t[i])),
			      "%s: request %d: wrong bytes at the peer", what, i);
		pos += tsize(&t[i]);
	}
	CHECK(e->nrec == nrec, "%s: %d records, expected %d", what, e->nrec, nrec);
	CHECK(e->ngot == total, "%s: peer got %zu bytes, expected %zu", what, e->ngot, total);
	e->nrec = 0;
	e->ngot = 0;
}

/* The open still works: a clean request goes out, records and eventfd agree. */
static void check_works(struct env *e, const char *what)
{
	struct stablesend_req r = mkreq(&clean, e->c, 999);
	struct stablesend_counters cnt;
	uint64_t ev = 0;
	double end;

	/* A record can be read just before its eventfd signal: let those land. */
	usleep(20000);
	if (read(e->efd, &ev, sizeof(ev)) < 0)
		ev = 0;
	CHECK(ss_submit(e->dev, &r, 1) == 1, "%s: clean SUBMIT afterwards", what);
	check_done(e, what, &clean, 1, 999, 0);
	ev = efd_count(e->efd, 2, 1);
	CHECK(ev == 2, "%s: eventfd counted %llu for 2 records", what, (unsigned long long)ev);
	/* Pages nobody waits for may stay out while the fd is open (module_idle() at the end). */
	end = now_s() + 5;
	do
		ss_counters(e->dev, &cnt);
	while (cnt.completed != cnt.submitted && now_s() < end && !usleep(1000));
	CHECK(cnt.completed == cnt.submitted && !cnt.cqes_pending,
	      "%s: counters: submitted %llu completed %llu mem %llu pending %llu", what,
	      (unsigned long long)cnt.submitted, (unsigned long long)cnt.completed,
	      (unsigned long long)cnt.mem_in_use, (unsigned long long)cnt.cqes_pending);
}

/* Wait until the head request has put bytes in the socket and parked. */
static int wait_started(int sock)
{
	double end = now_s() + 10;
	int outq = 0;

	while (now_s() < end) {
		if (ioctl(sock, SIOCOUTQ, &outq) == 0 && outq > 0) {
			usleep(50000);
			return 1;
		}
		usleep(2000);
	}
	return 0;
}

/* --- the operations: run with fault N; returns whether it was consumed ---- */

struct stats {
	int failed, succeeded;
};

static int op_open(int n, struct stats *st)
{
	struct stablesend_setup s = { .eventfd = -1 };
	int dev, efd = -1, r = -1, err, hit;
	struct env e;

	env_open(&e, 0, 0);
	close(e.dev);
	close(e.efd);
	inject(n);
	dev = open(STABLESEND_DEVICE, O_RDWR | O_CLOEXEC);
	if (dev >= 0)
		efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (efd >= 0) {
		s.eventfd = efd;
		r = ioctl(dev, STABLESEND_IOC_SETUP, &s);
	}
	err = errno;
	hit = injected();
	if (r) {
		CHECK(clean_errno(err), "open+SETUP, fault %d: %s failed with errno %d", n,
		      dev < 0 ? "open" : efd < 0 ? "eventfd" : "SETUP", err);
		st->failed++;
	} else {
		st->succeeded++;
	}
	e.dev = dev >= 0 ? dev : ss_dev();
	e.efd = efd >= 0 ? efd : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r)
		CHECK(ss_setup(e.dev, e.efd, LIMIT) == 0, "open+SETUP, fault %d: SETUP again", n);
	check_works(&e, "open+SETUP");
	env_close(&e);
	return hit;
}

/* SUBMIT of @nt requests @t under fault @n; the rest is resubmitted. */
static int submit_case(int n, struct stats *st, const char *what, const struct tmpl *t,
		       int nt, int tcp)
{
	struct stablesend_req r[4];
	struct env e;
	int i, ret, err, hit;

	env_open(&e, tcp, 0);
	for (i = 0; i < nt; i++)
		r[i] = mkreq(&t[i], e.c, i);
	inject(n);
	ret = ss_submit(e.dev, r, nt);
	err = errno;
	hit = injected();
	if (ret < 0) {
		CHECK(clean_errno(err), "%s, fault %d: errno %d", what, n, err);
		ret = 0;
	}
	if (ret < nt)
		st->failed++;
	else
		st->succeeded++;
	if (ret < nt)
		CHECK(ss_submit(e.dev, r + ret, nt - ret) == nt - ret,
		      "%s, fault %d: resubmitting the last %d", what, n, nt - ret);
	check_done(&e, what, t, nt, 0, 0);
	check_works(&e, what);
	env_close(&e);
	return hit;
}

static int op_submit_small(int n, struct stats *st)
{
	return submit_case(n, st, "SUBMIT small", &small, 1, n % 2);
}

static int op_submit_multi(int n, struct stats *st)
{
	return submit_case(n, st, "SUBMIT multi-page framed", &multi, 1, n % 2);
}

static int op_submit_batch(int n, struct stats *st)
{
	return submit_case(n, st, "SUBMIT batch of 4", batch, 4, n % 2);
}

static int op_send(int n, struct stats *st)
{
	struct stablesend_req r;
	struct env e;
	int err, hit, stalled;
	long ret;

	env_open(&e, n % 2, 0);
	r = mkreq(&sync_t, e.c, 0);
	inject(n);
	ret = send_wd(e.dev, &r, 20, &stalled);
	err = errno;
	hit = injected();
	if (ret < 0) {
		/* ENOBUFS: the socket's own buffer allocation failed, as send(2) says. */
		CHECK(clean_errno(err) || err == ENOBUFS, "SEND, fault %d: errno %d", n, err);
		st->failed++;
		collect(&e, 0, 0, 0.2);
		CHECK(!e.ngot && !e.nrec, "SEND, fault %d: failed, but the peer got %zu bytes, "
		      "%d records", n, e.ngot, e.nrec);
		e.ngot = e.nrec = 0;
	} else {
		CHECK(ret == (long)tsize(&sync_t), "SEND, fault %d: returned %ld", n, ret);
		st->succeeded++;
		check_done(&e, "SEND", &sync_t, 1, 0, 1);
	}
	check_works(&e, "SEND");
	env_close(&e);
	return hit;
}

static int op_cancel(int n, struct stats *st)
{
	struct stablesend_req r[3];
	struct env e;
	uint64_t ud = 1;
	int ret, err, hit, nsent, rel;
	struct stablesend_cqe *c;

	env_open(&e, 0, 1);
	r[0] = mkreq(&big, e.c, 0);
	r[1] = mkreq(&small, e.c, 1);
	r[2] = mkreq(&batch[1], e.c, 2);
	REQUIRE(ss_submit(e.dev, r, 3) == 3, "CANCEL: SUBMIT");
	CHECK(wait_started(e.c), "CANCEL: the head request never started");
	inject(n);
	ret = ioctl(e.dev, STABLESEND_IOC_CANCEL, &ud);
	err = errno;
	hit = injected();
	if (ret < 0) {
		CHECK(clean_errno(err), "CANCEL, fault %d: errno %d", n, err);
		st->failed++;
	} else {
		CHECK(ret == 1, "CANCEL, fault %d: returned %d", n, ret);
		st->succeeded++;
	}
	/* The peer reads: the head request and the third arrive, not the second. */
	collect(&e, 5, tsize(&big) + tsize(&batch[1]) + (ret == 1 ? 0 : tsize(&small)), 30);
	c = find_rec(&e, 1, &nsent, &rel);
	CHECK(nsent == 1 && rel == 1, "CANCEL: %d SENT, %d RELEASED records", nsent, rel);
	if (ret == 1) {
		CHECK(c && c->res == -ECANCELED, "CANCEL: result %lld", c ? (long long)c->res : 0);
		CHECK(e.ngot == tsize(&big) + tsize(&batch[1]) &&
		      tmatch(&big, e.got, tsize(&big)) &&
		      tmatch(&batch[1], e.got + tsize(&big), tsize(&batch[1])),
		      "CANCEL: peer got %zu bytes, not the head and the third request", e.ngot);
	}
	CHECK(e.nrec == 5, "CANCEL: %d records, expected 5", e.nrec);
	e.nrec = e.ngot = 0;
	check_works(&e, "CANCEL");
	env_close(&e);
	return hit;
}

static int op_read(int n, struct stats *st)
{
	struct stablesend_req r[3];
	struct stablesend_cqe c[3];
	struct stablesend_counters cnt;
	struct env e;
	double end = now_s() + 10;
	int i, err, hit, got = 0, seen[3] = { 0 };
	ssize_t ret;

	env_open(&e, 0, 0);
	for (i = 0; i < 3; i++)
		r[i] = mkreq(&batch[0], e.c, i);
	REQUIRE(ss_submit(e.dev, r, 3) == 3, "read: SUBMIT");
	do {
		peer_read(&e);
		ss_counters(e.dev, &cnt);
	} while (cnt.cqes_pending < 3 && now_s() < end && !usleep(1000));
	memset(c, 0, sizeof(c));
	inject(n);
	ret = read(e.dev, c, sizeof(c));
	err = errno;
	hit = injected();
	if (ret < 0) {
		CHECK(clean_errno(err), "read, fault %d: errno %d", n, err);
		st->failed++;
	} else {
		CHECK(ret % sizeof(c[0]) == 0 && ret > 0, "read, fault %d: returned %zd", n, ret);
		got = ret / sizeof(c[0]);
		st->succeeded += got == 3;
		st->failed += got < 3;
	}
	if (got < 3)
		got += ss_reap(e.dev, c + got, 3 - got, 5000);
	CHECK(got == 3, "read, fault %d: %d records", n, got);
	for (i = 0; i < got; i++) {
		CHECK(c[i].user_data < 3 && !seen[c[i].user_data]++ &&
		      c[i].res == (long long)tsize(&batch[0]),
		      "read, fault %d: record %d: user_data %llu res %lld", n, i,
		      (unsigned long long)c[i].user_data, (long long)c[i].res);
		if (c[i].user_data >= 3)
			break;
	}
	peer_read(&e);
	e.ngot = 0;
	check_works(&e, "read");
	env_close(&e);
	return hit;
}

/* Requests queued behind a started one, on a stalled socket. */
static void queue_stalled(struct env *e, int tcp)
{
	struct stablesend_req r[3];

	env_open(e, tcp, 1);
	r[0] = mkreq(&big, e->c, 0);
	r[1] = mkreq(&small, e->c, 1);
	r[2] = mkreq(&multi, e->c, 2);
	REQUIRE(ss_submit(e->dev, r, 3) == 3, "SUBMIT");
	CHECK(wait_started(e->c), "the head request never started");
}

/* Drain the peer until EOF or @quiet_s of silence. */
static void peer_drain(struct env *e, double quiet_s)
{
	double last = now_s();

	while (now_s() - last < quiet_s) {
		struct pollfd p = { .fd = e->s, .events = POLLIN | POLLRDHUP };
		size_t before = e->ngot;

		poll(&p, 1, 20);
		peer_read(e);
		if (e->ngot != before)
			last = now_s();
		if (p.revents & (POLLHUP | POLLRDHUP) && e->ngot == before)
			break;
	}
}

static int op_close_dev(int n, struct stats *st)
{
	struct env e;
	int ret, err, hit;

	queue_stalled(&e, 0);
	inject(n);
	ret = close(e.dev);
	err = errno;
	hit = injected();
	e.dev = -1;
	CHECK(!ret, "close of the device, fault %d: errno %d", n, err);
	st->succeeded += !ret;
	st->failed += !!ret;
	/* The started request stops after what the socket took; the rest never goes. */
	peer_drain(&e, 0.5);
	CHECK(e.ngot < tsize(&big) && tmatch(&big, e.got, e.ngot),
	      "close of the device, fault %d: peer got %zu bytes, not a prefix of the head",
	      n, e.ngot);
	env_close(&e);
	CHECK(module_idle(ctx0, 10), "close of the device, fault %d: the open did not go away", n);
	return hit;
}

static int op_close_sock(int n, struct stats *st)
{
	struct env e;
	int ret, err, hit, i, nsent, rel;
	struct stablesend_cqe *c;
	static const struct tmpl *t[3] = { &big, &small, &multi };

	queue_stalled(&e, 1);
	inject(n);
	ret = shutdown(e.c, SHUT_RDWR);
	if (!ret)
		ret = close(e.c);
	err = errno;
	hit = injected();
	CHECK(!ret, "shutdown+close of the socket, fault %d: errno %d", n, err);
	st->succeeded += !ret;
	st->failed += !!ret;
	e.c = -1;
	peer_drain(&e, 1);
	collect(&e, 5, 0, 10);
	for (i = 0; i < 3; i++) {
		c = find_rec(&e, i, &nsent, &rel);
		CHECK(nsent == 1 && c && (c->res == (long long)tsize(t[i]) ||
					 c->res == -EPIPE || c->res == -ECONNRESET),
		      "socket closed, fault %d: request %d: %d SENT records, result %lld",
		      n, i, nsent, c ? (long long)c->res : 0);
		CHECK(rel == !!(t[i]->flags & STABLESEND_REQ_NOTIFY_RELEASE),
		      "socket closed, fault %d: request %d: %d RELEASED records", n, i, rel);
	}
	CHECK(tmatch(&big, e.got, e.ngot < tsize(&big) ? e.ngot : tsize(&big)),
	      "socket closed, fault %d: the peer's %zu bytes are not the stream", n, e.ngot);
	e.nrec = 0;
	close(e.s);
	env_pair(&e, 1, 0);
	check_works(&e, "socket closed");
	env_close(&e);
	return hit;
}

/*
 * An io_uring command issued inline under fault @n: io_uring_enter() fails
 * cleanly (its SQE is then submitted again) or the CQE carries a clean
 * errno (the request is then submitted again) or the whole size; no
 * record is queued either way and the peer gets the bytes once.
 */
static int op_uring(int n, struct stats *st)
{
	struct io_uring_sqe *sqe;
	struct io_uring_cqe cqe;
	struct stablesend_req r;
	struct ring ring;
	int ret, hit, res = 0;
	struct env e;

	env_open(&e, n % 2, 0);
	REQUIRE(!ring_init(&ring, 4, 0), "io_uring_setup");
	r = mkreq(&ring_t, e.c, 0);
	sqe = ring_sqe(&ring);
	stablesend_prep_uring(sqe, e.dev, &r);
	sqe->user_data = 5;
	inject(n);
	ret = ring_submit(&ring, 0);
	hit = injected();
	if (ret != 1) {
		CHECK(ret < 0 && (clean_errno(-ret) || ret == -EAGAIN),
		      "io_uring, fault %d: io_uring_enter returned %d", n, ret);
		st->failed++;
		/* The SQE is still on the ring. */
		CHECK(syscall(__NR_io_uring_enter, ring.fd, 1, 0, 0, NULL, 0) == 1,
		      "io_uring, fault %d: submitting again", n);
	} else if ((res = ring_wait(&ring, &cqe, 10000) ? -ETIME : cqe.res) !=
		   (int)tsize(&ring_t)) {
		CHECK(res < 0 && clean_errno(-res), "io_uring, fault %d: CQE %d", n, res);
		st->failed++;
		sqe = ring_sqe(&ring);
		stablesend_prep_uring(sqe, e.dev, &r);
		sqe->user_data = 5;
		CHECK(ring_submit(&ring, 0) == 1, "io_uring, fault %d: submitting again", n);
	} else {
		st->succeeded++;
	}
	if (res != (int)tsize(&ring_t)) {
		res = ring_wait(&ring, &cqe, 10000) ? -ETIME : cqe.res;
		CHECK(res == (int)tsize(&ring_t), "io_uring, fault %d: the request again: CQE %d",
		      n, res);
	}
	check_done(&e, "io_uring", &ring_t, 1, 0, 1);
	ring_exit(&ring);
	check_works(&e, "io_uring");
	env_close(&e);
	return hit;
}

static const struct {
	const char *name;
	int (*fn)(int n, struct stats *st);
} ops[] = {
	{ "open+eventfd+SETUP", op_open },
	{ "SUBMIT small", op_submit_small },
	{ "SUBMIT multi-page+hdtr", op_submit_multi },
	{ "SUBMIT batch of 4", op_submit_batch },
	{ "SEND sync", op_send },
	{ "CANCEL", op_cancel },
	{ "read of records", op_read },
	{ "close of device, requests queued", op_close_dev },
	{ "shutdown+close of socket, requests in flight", op_close_sock },
	{ "io_uring command", op_uring },
};

/* --- transmit path: a share of all skb allocations fail ------------------- */

static const char *const skb_caches[] = { "skbuff_head_cache", "skbuff_fclone_cache" };

static void transmit_phase(void)
{
	static const char *const fs[][2] = {
		{ "cache-filter", "Y" }, { "task-filter", "N" }, { "interval", "1" },
		{ "space", "0" }, { "times", "1000000" }, { "probability", "10" },
	};
	char old[6][32], path[128], left[32] = "";
	struct env envs[2];
	int ncache = 0, i, t, fails = 0, errs = 0, partial = 0, reqs = 0;
	unsigned int k;

	for (k = 0; k < 2; k++) {
		char val[8] = "";

		snprintf(path, sizeof(path), "/sys/kernel/slab/%s/failslab", skb_caches[k]);
		/* Read-only before 6.2: slub_debug=A set it at boot there. */
		if (!write_str(path, "1") ||
		    (!read_str(path, val, sizeof(val)) && val[0] == '1'))
			ncache++;
		else
			printf("note: cannot filter %s (merged, or no SLUB sysfs)\n", skb_caches[k]);
	}
	/* Not a quiet skip: this phase is what covers the transmit path. */
	CHECK(ncache > 0, "transmit phase cannot run: no skb cache can be filtered");
	if (!ncache)
		return;
	for (t = 0; t < 2; t++)
		env_open(&envs[t], t, 0);	/* connected before skbs fail */
	for (k = 0; k < 6; k++) {
		snprintf(path, sizeof(path), DBG "failslab/%s", fs[k][0]);
		REQUIRE(!read_str(path, old[k], sizeof(old[k])), "%s", path);
		REQUIRE(!write_str(path, fs[k][1]), "%s", path);
	}
	for (t = 0; t < 2; t++) {
		struct env e = envs[t];

		for (i = 0; i < 40; i++) {
			struct tmpl tm = { (i * 4099) % FSIZE, 1 + (i * 7919) % (48 << 10),
					   (uint32_t)i % 40, (uint32_t)i % 13, 0 };
			struct stablesend_req r;
			struct stablesend_counters c0, c1;
			struct stablesend_cqe *c;
			int nsent, rel;
			size_t sent;

			if (tm.off + tm.len > FSIZE)
				tm.len = FSIZE - tm.off;
			r = mkreq(&tm, e.c, i);
			ss_counters(e.dev, &c0);
			if (ss_submit(e.dev, &r, 1) != 1) {
				CHECK(errno == ENOMEM, "transmit phase: SUBMIT errno");
				continue;
			}
			reqs++;
			collect(&e, 1, 0, 20);
			c = find_rec(&e, i, &nsent, &rel);
			CHECK(nsent == 1, "transmit phase: %d SENT records", nsent);
			ss_counters(e.dev, &c1);
			sent = c1.bytes_sent - c0.bytes_sent;
			collect(&e, 1, sent, 20);
			if (c && c->res < 0) {
				errs++;
				partial += sent > 0;
				CHECK(-c->res == ENOMEM || -c->res == EPIPE || -c->res == ECONNRESET,
				      "transmit phase (%s): request %d of %zu bytes: result %lld "
				      "(errno outside the documented set), %zu bytes sent",
				      t ? "tcp" : "unix", i, tsize(&tm), (long long)c->res, sent);
			} else if (c) {
				CHECK(c->res == (long long)tsize(&tm) && sent == tsize(&tm),
				      "transmit phase: result %lld, %zu bytes sent, size %zu",
				      (long long)c->res, sent, tsize(&tm));
			}
			CHECK(e.ngot == sent && tmatch(&tm, e.got, e.ngot),
			      "transmit phase: peer got %zu bytes, %zu sent, or wrong bytes",
			      e.ngot, sent);
			e.nrec = 0;
			e.ngot = 0;
		}
		envs[t] = e;
	}
	snprintf(path, sizeof(path), DBG "failslab/times");
	read_str(path, left, sizeof(left));
	fails = 1000000 - atoi(left);
	for (k = 0; k < 6; k++) {
		snprintf(path, sizeof(path), DBG "failslab/%s", fs[5 - k][0]);
		write_str(path, old[5 - k]);
	}
	for (k = 0; k < 2; k++) {
		snprintf(path, sizeof(path), "/sys/kernel/slab/%s/failslab", skb_caches[k]);
		write_str(path, "0");
	}
	for (t = 0; t < 2; t++)
		env_close(&envs[t]);
	printf("transmit phase: %d requests over unix and tcp, %d skb allocations failed, "
	       "%d requests failed (%d after sending part)\n", reqs, fails, errs, partial);
}

int main(void)
{
	char path[64];
	unsigned int i;
	int total = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm_setup();
	if (access(STABLESEND_DEVICE, F_OK))
		return SKIP;
	snprintf(path, sizeof(path), "/proc/self/task/%d/fail-nth", gettid());
	nth_fd = open(path, O_RDWR | O_CLOEXEC);
	if (nth_fd < 0 || (access(DBG "failslab", F_OK) && access(DBG "fail_page_alloc", F_OK))) {
		printf("kernel has no fault injection (fail-nth, failslab, fail_page_alloc)\n");
		return SKIP;
	}
	signal(SIGPIPE, SIG_IGN);
	CHECK(ss_drained(10), "pages in flight before the test");
	ctx0 = ss_contexts_baseline();
	usercopy = !access(DBG "fail_usercopy", F_OK);
	file = pattern_file(FSIZE, FSEED);
	fcopy = malloc(FSIZE);
	REQUIRE(fcopy && pread(file, fcopy, FSIZE, 0) == FSIZE, "read file");
	for (i = 0; i < sizeof(head); i++) {
		head[i] = pat(i, 90);
		tail[i] = pat(i, 91);
	}
	knobs_set();
	printf("failslab %s, fail_page_alloc %s, fail_usercopy %s\n",
	       access(DBG "failslab", F_OK) ? "absent" : "on",
	       access(DBG "fail_page_alloc", F_OK) ? "absent" : "on",
	       usercopy ? "on" : "absent");

	for (i = 0; i < ARRAY_SIZE(ops); i++) {
		struct stats st = { 0 };
		double t0 = now_s();
		int n;

		for (n = 1; n <= MAXN && ops[i].fn(n, &st); n++)
			;
		CHECK(n <= MAXN, "%s: still consuming faults at %d", ops[i].name, MAXN);
		printf("%-46s %3d fault points exercised (%d calls failed cleanly, "
		       "%d succeeded) in %.1f s\n", ops[i].name, n - 1, st.failed,
		       st.succeeded - 1, now_s() - t0);
		total += n - 1;
	}
	knobs_restore();
	transmit_phase();
	CHECK(module_idle(ctx0, 30), "the module still holds memory after fault injection");
	printf("failinject: %d fault points exercised in all\n", total);
	return test_result();
}
