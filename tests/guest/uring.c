// SPDX-License-Identifier: GPL-2.0
/*
 * io_uring commands (stablesend_prep_uring()): 64 requests submitted in one
 * io_uring_enter() carry the file as it was when that call returned, not
 * the write that follows; one CQE each with its bytes; every errno of a
 * submission in the CQE; with NOTIFY_RELEASE the CQE waits for the pages
 * and then the memory is back; a cancel by user_data; a ring closed, and
 * a submitter killed, with requests stuck on a peer that does not read
 * end them and give everything back; a fixed file, an SQE128 ring and an
 * SQPOLL ring; a command behind a link whose SQ entry was reused; the
 * device fd polled through the ring (IORING_OP_POLL_ADD).
 * compat32: yes
 * test-timeout: 240
 */
#include "uring.h"
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdatomic.h>
#include <stablesend.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#define NBATCH	64
#define CHUNK	65536

static unsigned char pat(size_t pos)
{
	return (unsigned char)(pos * 13 + pos / 509 + 1);
}

struct reader {
	int fd;
	unsigned char *buf;
	size_t len, got;
};

static void *reader_fn(void *arg)
{
	struct reader *r = arg;

	r->got = read_full(r->fd, r->buf, r->len);
	return NULL;
}

/* One SQE for @req on @dev (@sqe_flags: IOSQE_*), submitted alone. */
static int submit_one(struct ring *r, int dev, const struct stablesend_req *req,
		      __u64 ud, unsigned int sqe_flags)
{
	struct io_uring_sqe *sqe = ring_sqe(r);

	REQUIRE(sqe, "SQ ring full");
	stablesend_prep_uring(sqe, dev, req);
	sqe->user_data = ud;
	sqe->flags = sqe_flags;
	return ring_submit(r, 0);
}

/* The CQE of the one request in flight: its res, or -ETIME as "none". */
static int cqe_res(struct ring *r, __u64 ud, int timeout_ms)
{
	struct io_uring_cqe cqe;

	if (ring_wait(r, &cqe, timeout_ms))
		return -ETIME;
	CHECK(cqe.user_data == ud, "CQE user_data %llu, want %llu",
	      (unsigned long long)cqe.user_data, (unsigned long long)ud);
	CHECK(!(cqe.flags & IORING_CQE_F_MORE), "one CQE per command");
	return cqe.res;
}

static void features(void)
{
	struct stablesend_setup s = { .eventfd = -1 };
	struct stablesend *ss;
	int dev = ss_dev();

	REQUIRE(ioctl(dev, STABLESEND_IOC_SETUP, &s) == 0, "SETUP");
	REQUIRE(s.features & STABLESEND_FEAT_URING,
		"the module does not report STABLESEND_FEAT_URING (features %#llx)",
		(unsigned long long)s.features);
	close(dev);
	/* What the library (and so "stablesend status") reports. */
	ss = stablesend_open(-1, 0);
	REQUIRE(ss, "stablesend_open");
	CHECK(stablesend_features(ss) & STABLESEND_FEAT_URING, "library: no FEAT_URING");
	CHECK(stablesend_feature_name(STABLESEND_FEAT_URING) &&
	      !strcmp(stablesend_feature_name(STABLESEND_FEAT_URING), "uring"),
	      "library: feature name");
	stablesend_close(ss);
}

/*
 * The snapshot: 64 requests in one io_uring_enter(), the whole file
 * overwritten as soon as it returns; the peer gets the old content.
 */
static void batch_snapshot(unsigned int ring_flags, const char *what)
{
	bool sqpoll = ring_flags & IORING_SETUP_SQPOLL;
	size_t len = (size_t)NBATCH * CHUNK, i;
	static struct stablesend_req reqs[NBATCH];
	unsigned char *junk = malloc(len);
	struct reader rd = { .len = len };
	int dev = ss_dev(), file, c, s, n, seen[NBATCH] = { 0 };
	struct ring r;
	pthread_t t;

	REQUIRE(!ring_init(&r, 2 * NBATCH, ring_flags), "io_uring_setup (%s)", what);
	file = file_with_pattern(len, pat);
	tcp_pair(AF_INET, &c, &s);
	rd.fd = s;
	rd.buf = malloc(len);
	REQUIRE(junk && rd.buf, "malloc");
	memset(junk, 0xee, len);
	pthread_create(&t, NULL, reader_fn, &rd);
	for (i = 0; i < NBATCH; i++) {
		struct io_uring_sqe *sqe = ring_sqe(&r);

		REQUIRE(sqe, "SQ ring full");
		stablesend_prep_req(&reqs[i], file, c, i * CHUNK, CHUNK, i);
		stablesend_prep_uring(sqe, dev, &reqs[i]);
		sqe->user_data = 1000 + i;
	}
	n = ring_submit(&r, 0);
	/*
	 * The snapshot is taken: nothing from here on may reach the wire.
	 * SQPOLL: io_uring's thread issues the commands when it gets to
	 * them, so only the CQEs say the snapshot is taken.
	 */
	if (!sqpoll)
		write_full(file, junk, len, 0);
	if (sqpoll)
		CHECK(n == 0, "%s: io_uring_enter returned %d", what, n);
	else
		CHECK(n == NBATCH, "%s: io_uring_enter submitted %d of %d", what, n, NBATCH);
	for (i = 0; i < NBATCH; i++) {
		struct io_uring_cqe cqe;

		if (ring_wait(&r, &cqe, 30000 * ss_debug_scale(4))) {
			CHECK(0, "%s: %zu of %d CQEs", what, i, NBATCH);
			break;
		}
		CHECK(cqe.user_data >= 1000 && cqe.user_data < 1000 + NBATCH &&
		      !seen[cqe.user_data - 1000]++, "%s: CQE user_data %llu", what,
		      (unsigned long long)cqe.user_data);
		CHECK(cqe.res == CHUNK, "%s: CQE res %d, want %d", what, cqe.res, CHUNK);
	}
	/* SQPOLL: the CQEs are in: bytes still in the socket stay as they were. */
	if (sqpoll)
		write_full(file, junk, len, 0);
	pthread_join(t, NULL);
	CHECK(rd.got == len, "%s: the peer got %zu of %zu bytes", what, rd.got, len);
	i = pattern_mismatch(rd.buf, rd.got, 0, pat);
	CHECK(i == rd.got, "%s: byte %zu is %#x, the file's was %#x at submission%s",
	      what, i, rd.buf[i], pat(i), rd.buf[i] == 0xee ? " (a later write's)" : "");
	ring_exit(&r);
	close(c);
	close(s);
	close(file);
	close(dev);
	free(junk);
	free(rd.buf);
}

struct errcase {
	const char *what;
	int want;
};

static void expect(struct ring *r, int dev, struct stablesend_req *req,
		   const struct errcase *ec)
{
	int res;

	REQUIRE(submit_one(r, dev, req, 7, 0) == 1, "io_uring_enter");
	res = cqe_res(r, 7, 10000);
	CHECK(res == ec->want, "%s: CQE res %d (%s), want %d (%s)", ec->what, res,
	      strerror(-res), ec->want, strerror(-ec->want));
}

enum sqe_fault { NO_FAULT, BAD_OP, AREA_FLAGS, AREA_RESERVED, BAD_POINTER };

/* One SQE for @q on @fd, spoilt as @fault says: its CQE must be @want. */
static void sqe_case(struct ring *r, int fd, struct stablesend_req *q,
		     enum sqe_fault fault, int want, const char *what)
{
	struct io_uring_sqe *sqe = ring_sqe(r);
	struct stablesend_uring_cmd *area = (struct stablesend_uring_cmd *)sqe->cmd;
	int res;

	stablesend_prep_uring(sqe, fd, q);
	if (fault == BAD_OP)
		sqe->cmd_op = 0x1234;
	else if (fault == AREA_FLAGS)
		area->flags = STABLESEND_URING_F_WAIT << 1;
	else if (fault == AREA_RESERVED)
		area->reserved = 1;
	else if (fault == BAD_POINTER)
		area->req = 4096;
	sqe->user_data = 7;
	REQUIRE(ring_submit(r, 0) == 1, "io_uring_enter");
	res = cqe_res(r, 7, 10000);
	CHECK(res == want, "%s: CQE %d, want %d", what, res, want);
}

static void errnos(void)
{
	int dev = ss_dev(), small = ss_dev(), file = temp_file(8192, 'x');
	int c, s, u, wo, dir, udp, lone, half, hs;
	struct stablesend_counters cnt;
	struct stablesend_req q;
	struct ring r;
	char name[64];

	REQUIRE(!ring_init(&r, 8, 0), "io_uring_setup");
	REQUIRE(ss_setup(small, -1, 65536) == 0, "SETUP 64 KiB");
	tcp_pair(AF_INET, &c, &s);
	tcp_pair(AF_INET, &half, &hs);
	shutdown(half, SHUT_WR);
	snprintf(name, sizeof(name), "/proc/self/fd/%d", file);
	wo = open(name, O_WRONLY);
	dir = open("/", O_RDONLY | O_DIRECTORY);
	udp = socket(AF_INET, SOCK_DGRAM, 0);
	lone = socket(AF_INET, SOCK_STREAM, 0);
	u = c;
	REQUIRE(wo >= 0 && dir >= 0 && udp >= 0 && lone >= 0, "fds");

#define CASE(fd, what, want, ...) do {					\
		struct errcase ec = { what, want };			\
		q = ss_req(file, u, 0, 4096, 7);			\
		__VA_ARGS__;						\
		expect(&r, fd, &q, &ec);				\
	} while (0)
	CASE(dev, "file_fd -1", -EBADF, q.file_fd = -1);
	CASE(dev, "write-only file", -EBADF, q.file_fd = wo);
	CASE(dev, "a directory", -EINVAL, q.file_fd = dir);
	CASE(dev, "sock_fd a file", -ENOTSOCK, q.sock_fd = file);
	CASE(dev, "UDP", -EOPNOTSUPP, q.sock_fd = udp);
	CASE(dev, "not connected", -ENOTCONN, q.sock_fd = lone);
	CASE(dev, "shut down for writing", -EPIPE, q.sock_fd = half);
	CASE(dev, "offset at EOF", -ENODATA, q.offset = 8192);
	CASE(dev, "offset overflow", -EINVAL, q.offset = ~0ULL - 100);
	CASE(dev, "no byte", -EINVAL, q.len = 0);
	CASE(dev, "reserved", -EINVAL, q.reserved = 1);
	CASE(dev, "unknown flag", -EINVAL, q.flags = 1u << 9);
	CASE(dev, "head_len too big", -EINVAL, q.head_len = STABLESEND_HDTR_MAX + 1;
	     q.head = (uintptr_t)name);
	CASE(dev, "bad head pointer", -EFAULT, q.head_len = 16; q.head = 16);
	CASE(small, "larger than the limit", -EMSGSIZE, q.len = 1 << 20;
	     close(file); file = temp_file(1 << 20, 'y'); q.file_fd = file);
#undef CASE

	/* The command area and the SQE. */
	q = ss_req(file, c, 0, 4096, 7);
	sqe_case(&r, dev, &q, BAD_OP, -EINVAL, "unknown cmd_op");
	sqe_case(&r, dev, &q, AREA_FLAGS, -EINVAL, "command area: an unknown flag");
	sqe_case(&r, dev, &q, AREA_RESERVED, -EINVAL, "command area reserved");
	sqe_case(&r, dev, &q, BAD_POINTER, -EFAULT, "request pointer unmapped");
	/* Not the device: io_uring refuses a command on a file without ->uring_cmd. */
	sqe_case(&r, file, &q, NO_FAULT, -EOPNOTSUPP, "a command on a regular file");

	/* Nothing failed left a trace: no memory held, nothing counted. */
	ss_counters(dev, &cnt);
	CHECK(cnt.submitted == 0 && cnt.mem_in_use == 0,
	      "after failures: %llu submitted, %llu bytes in use",
	      (unsigned long long)cnt.submitted, (unsigned long long)cnt.mem_in_use);

	/* A good one on the same ring still goes. */
	q = ss_req(file, c, 0, 4096, 7);
	CHECK(submit_one(&r, dev, &q, 8, 0) == 1, "io_uring_enter");
	CHECK(cqe_res(&r, 8, 10000) == 4096, "a good request after the errors");
	ring_exit(&r);
	close(c);
	close(s);
	close(half);
	close(hs);
	close(wo);
	close(dir);
	close(udp);
	close(lone);
	close(file);
	close(small);
	close(dev);
}

/* An open limited to 1 MiB, a ring, a socket pair and a buffer. */
struct fixture {
	int dev, file, a, b;
	unsigned char *buf;
	struct ring r;
};

/* A file of @len bytes of @fill, a buffer of @buf_len, a ring of @entries. */
static void fixture_init(struct fixture *f, size_t len, char fill,
			 size_t buf_len, unsigned int entries)
{
	f->dev = ss_dev();
	f->file = temp_file(len, fill);
	f->buf = malloc(buf_len);
	REQUIRE(f->buf, "malloc");
	REQUIRE(ss_setup(f->dev, -1, 1 << 20) == 0, "SETUP 1 MiB");
	REQUIRE(!ring_init(&f->r, entries, 0), "io_uring_setup");
	unix_pair(&f->a, &f->b);
}

static void fixture_exit(struct fixture *f)
{
	ring_exit(&f->r);
	close(f->a);
	close(f->b);
	close(f->file);
	close(f->dev);
	free(f->buf);
}

/*
 * The open's memory limit: the command does not wait, its CQE says
 * EAGAIN; once the peer reads, the same request goes.
 */
static void eagain(void)
{
	int i, res = 0, pending = 0, late = 0;
	size_t want = 0, got = 0;
	struct stablesend_req q[8];
	struct io_uring_cqe cqe;
	struct fixture f;

	fixture_init(&f, 1 << 20, 'm', 8 << 20, 16);
	for (i = 0; i < 8; i++) {
		q[i] = ss_req(f.file, f.a, 0, 256 << 10, i);
		REQUIRE(submit_one(&f.r, f.dev, &q[i], i, 0) == 1, "io_uring_enter");
		res = cqe_res(&f.r, i, 300);
		if (res == -EAGAIN)
			break;
		CHECK(res == -ETIME || res == 256 << 10, "request %d: %d", i, res);
		want += 256 << 10;
		pending += res == -ETIME;
	}
	CHECK(res == -EAGAIN, "a 1 MiB limit took 8 requests of 256 KiB (last %d)", res);
	CHECK(i >= 2, "EAGAIN after %d requests of 256 KiB under a 1 MiB limit", i);
	while (got < want) {
		ssize_t n = read(f.b, f.buf + got, (8 << 20) - got);

		if (n <= 0)
			break;
		got += n;
	}
	CHECK(got == want, "the peer got %zu of %zu", got, want);
	while (late < pending && !ring_wait(&f.r, &cqe, 10000 * ss_debug_scale(4))) {
		CHECK(cqe.res == 256 << 10, "late CQE %d", cqe.res);
		late++;
	}
	CHECK(late == pending, "%d of %d parked commands completed", late, pending);
	fixture_exit(&f);
}

/*
 * The device fd polled through the ring (IORING_OP_POLL_ADD), as a ring
 * user told EAGAIN would wait for memory: POLLOUT at once on a fresh
 * open; POLLIN not before a record, then once a SUBMIT's is queued;
 * POLLOUT not while a peer that does not read holds the whole limit, then
 * once it read and the memory came back.  (io_uring takes two wait
 * queues per poll at most; the device has one.)
 */
static void poll_add(void)
{
	struct stablesend_cqe rec;
	struct stablesend_req q;
	struct fixture f;
	int res;

	fixture_init(&f, 1 << 20, 'p', 1 << 20, 8);
	poll_sqe(&f.r, f.dev, POLLOUT, 0, 1);
	res = cqe_res(&f.r, 1, 10000);
	CHECK(res > 0 && (res & POLLOUT), "POLL_ADD POLLOUT on a fresh open: %d", res);

	poll_sqe(&f.r, f.dev, POLLIN, 0, 2);
	CHECK(cqe_res(&f.r, 2, 200) == -ETIME, "POLL_ADD POLLIN with no record");
	q = ss_req(f.file, f.a, 0, 4096, 3);
	REQUIRE(ss_submit(f.dev, &q, 1) == 1, "SUBMIT 4 KiB");
	res = cqe_res(&f.r, 2, 10000);
	CHECK(res > 0 && (res & POLLIN), "POLL_ADD POLLIN after a SENT record: %d", res);
	CHECK(ss_reap(f.dev, &rec, 1, 10000) == 1 && rec.res == 4096, "SENT record");
	CHECK(read_full(f.b, f.buf, 4096) == 4096, "read 4 KiB");

	/* The whole limit to a peer that reads nothing yet (waits for the 4 KiB). */
	q = ss_req(f.file, f.a, 0, 1 << 20, 4);
	REQUIRE(ss_submit(f.dev, &q, 1) == 1, "SUBMIT 1 MiB");
	poll_sqe(&f.r, f.dev, POLLOUT, 0, 5);
	CHECK(cqe_res(&f.r, 5, 200) == -ETIME, "POLL_ADD POLLOUT with the limit in use");
	CHECK(read_full(f.b, f.buf, 1 << 20) == 1 << 20, "read 1 MiB");
	res = cqe_res(&f.r, 5, 10000 * ss_debug_scale(4));
	CHECK(res > 0 && (res & POLLOUT),
	      "POLL_ADD POLLOUT once the memory is back: %d", res);
	printf("POLL_ADD on the device fd: POLLOUT, POLLIN after a record, POLLOUT after memory came back\n");
	fixture_exit(&f);
}

/* CQEs of the multishot POLL_ADD @ud within @ms: how many said POLLOUT. */
static int multishot_seen(struct ring *r, __u64 ud, int ms)
{
	struct io_uring_cqe cqe;
	int n = 0;

	while (!ring_wait(r, &cqe, n ? 100 : ms)) {
		CHECK(cqe.user_data == ud, "CQE user_data %llu, want %llu",
		      (unsigned long long)cqe.user_data, (unsigned long long)ud);
		CHECK(cqe.flags & IORING_CQE_F_MORE, "multishot POLL_ADD ended: %d",
		      cqe.res);
		CHECK(cqe.res > 0 && (cqe.res & POLLOUT), "multishot POLL_ADD: %d",
		      cqe.res);
		n++;
	}
	return n;
}

/*
 * A multishot POLL_ADD stays armed without being polled again: after a
 * request is refused (EAGAIN) with the whole limit held by a peer that
 * does not read, it says POLLOUT once the memory comes back, round after
 * round, and not while it is held.
 */
static void poll_multishot(void)
{
	struct stablesend_req q;
	struct fixture f;
	int round, ok = 0, fl;

	fixture_init(&f, 1 << 20, 'M', 1 << 20, 8);
	poll_sqe(&f.r, f.dev, POLLOUT, IORING_POLL_ADD_MULTI, 9);
	CHECK(multishot_seen(&f.r, 9, 10000) >= 1, "no POLLOUT on a fresh open");
	fl = fcntl(f.dev, F_GETFL);
	REQUIRE(fl >= 0 && !fcntl(f.dev, F_SETFL, fl | O_NONBLOCK), "O_NONBLOCK");
	for (round = 0; round < 3; round++) {
		q = ss_req(f.file, f.a, 0, 1 << 20, round);
		REQUIRE(ss_submit(f.dev, &q, 1) == 1, "SUBMIT 1 MiB");
		q.len = 64 << 10;
		CHECK(ss_submit(f.dev, &q, 1) < 0 && errno == EAGAIN,
		      "64 KiB with the limit in use: %s", strerror(errno));
		CHECK(!multishot_seen(&f.r, 9, 200), "POLLOUT with the limit in use");
		CHECK(read_full(f.b, f.buf, 1 << 20) == 1 << 20, "read 1 MiB");
		if (multishot_seen(&f.r, 9, 10000 * ss_debug_scale(4)))
			ok++;
		else
			CHECK(0, "round %d: no POLLOUT once the memory came back", round);
	}
	printf("multishot POLL_ADD on the device fd: POLLOUT once the memory came back in %d of %d rounds\n",
	       ok, round);
	fixture_exit(&f);
}

struct blocked_reader {
	int dev;
	_Atomic pid_t tid;
	ssize_t got;
};

/* Blocks in read() of the device fd until a record comes. */
static void *blocked_read_fn(void *arg)
{
	struct blocked_reader *br = arg;
	struct stablesend_cqe rec;

	atomic_store(&br->tid, (pid_t)syscall(SYS_gettid));
	br->got = read(br->dev, &rec, sizeof(rec));
	return NULL;
}

/* A thread's voluntary context switches (its sleeps), or -1. */
static long sleeps(pid_t tid)
{
	char path[64], line[128];
	long n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
			break;
	fclose(f);
	return n;
}

/*
 * A thread blocked in read() for records sleeps on while the open's
 * memory comes back to a command the ring was refused (the open's
 * pollers get EPOLLOUT then): ring commands post no records, so it has
 * nothing to wake for until a SUBMIT's SENT record.
 */
static void reader_quiet(void)
{
	struct blocked_reader br = { .got = -2 };
	struct stablesend_req q;
	struct pollfd p;
	struct fixture f;
	long before, after;
	int round, i, eagain = 0, got, refused;
	struct io_uring_cqe cqe;
	pthread_t th;

	fixture_init(&f, 1 << 20, 'r', 1 << 20, 16);
	br.dev = f.dev;
	REQUIRE(!pthread_create(&th, NULL, blocked_read_fn, &br), "pthread_create");
	while (!atomic_load(&br.tid))
		usleep(1000);
	usleep(200000);		/* asleep in read() */
	before = sleeps(br.tid);
	for (round = 0; round < 5; round++) {
		for (i = 0; i < 5; i++) {
			q = ss_req(f.file, f.a, (i & 3) << 18, 1 << 18, i);
			REQUIRE(submit_one(&f.r, f.dev, &q, i, 0) == 1, "io_uring_enter");
		}
		/* The fifth is refused: 4 x 256 KiB hold the 1 MiB. */
		got = 0;
		refused = 0;
		while (!refused && !ring_wait(&f.r, &cqe, 10000)) {
			if (cqe.res == -EAGAIN)
				refused = 1;
			else
				got += cqe.res == 1 << 18;
		}
		eagain += refused;
		CHECK(read_full(f.b, f.buf, 1 << 20) == 1 << 20, "read 1 MiB");
		while (got < 4 && !ring_wait(&f.r, &cqe, 10000))
			got += cqe.res == 1 << 18;
		CHECK(got == 4, "round %d: %d of 4 commands sent", round, got);
		p = (struct pollfd){ .fd = f.dev, .events = POLLOUT };
		CHECK(poll(&p, 1, 10000 * ss_debug_scale(4)) == 1 && p.revents & POLLOUT,
		      "round %d: no POLLOUT once the memory came back", round);
		/* All of it, for the next round's four. */
		for (i = 0; i < 1000; i++) {
			struct stablesend_counters c;

			ss_counters(f.dev, &c);
			if (!c.mem_in_use)
				break;
			usleep(10000);
		}
		CHECK(i < 1000, "round %d: memory still in use after 10 s", round);
	}
	usleep(100000);
	after = sleeps(br.tid);
	CHECK(eagain == 5, "%d of 5 rounds refused a command", eagain);
	CHECK(before >= 0 && after - before <= 1,
	      "a reader blocked in read() woke %ld times in 5 rounds of memory coming back",
	      after - before);
	printf("reader blocked in read(): %ld wake-ups in 5 rounds of memory coming back\n",
	       after - before);
	/* A record ends its read(). */
	q = ss_req(f.file, f.a, 0, 4096, 99);
	REQUIRE(ss_submit(f.dev, &q, 1) == 1, "SUBMIT 4 KiB");
	pthread_join(th, NULL);
	CHECK(br.got == sizeof(struct stablesend_cqe), "read() of a record: %zd", br.got);
	CHECK(read_full(f.b, f.buf, 4096) == 4096, "read 4 KiB");
	fixture_exit(&f);
}

/* @sqe for @req on @dev with STABLESEND_URING_F_WAIT. */
static void prep_wait(struct io_uring_sqe *sqe, int dev,
		      const struct stablesend_req *req, __u64 ud)
{
	stablesend_prep_uring(sqe, dev, req);
	((struct stablesend_uring_cmd *)sqe->cmd)->flags = STABLESEND_URING_F_WAIT;
	sqe->user_data = ud;
}

/* One command with STABLESEND_URING_F_WAIT (no wait for its CQE); its SQE. */
static struct io_uring_sqe *submit_wait(struct ring *r, int dev,
					const struct stablesend_req *req, __u64 ud)
{
	struct io_uring_sqe *sqe = ring_sqe(r);

	REQUIRE(sqe, "SQ ring full");
	prep_wait(sqe, dev, req, ud);
	REQUIRE(ring_submit(r, 0) == 1, "io_uring_enter");
	return sqe;
}

/*
 * STABLESEND_URING_F_WAIT: at the limit a command waits for memory in
 * io_uring's worker instead of failing with -EAGAIN, and goes out once
 * the peer drains what is ahead of it; without the flag, -EAGAIN as ever;
 * IORING_OP_ASYNC_CANCEL ends such a wait with -ECANCELED.
 */
static void wait_memory(void)
{
	size_t len = 768 << 10, got = 0;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe cqe;
	struct stablesend_req q;
	int res, i, done = 0;
	struct fixture f;

	fixture_init(&f, len, 'w', 2 * len, 8);
	q = ss_req(f.file, f.a, 0, len, 0);
	/* A holds 768 KiB of the 1 MiB, parked on a peer that does not read. */
	REQUIRE(submit_one(&f.r, f.dev, &q, 1, 0) == 1, "io_uring_enter");
	CHECK(cqe_res(&f.r, 1, 300) == -ETIME, "A completed with the peer not reading");
	submit_wait(&f.r, f.dev, &q, 2);				/* B waits */
	REQUIRE(submit_one(&f.r, f.dev, &q, 3, 0) == 1, "io_uring_enter");	/* C */
	res = cqe_res(&f.r, 3, 5000);
	CHECK(res == -EAGAIN, "C, no F_WAIT, at the limit: %d, want -EAGAIN", res);
	submit_wait(&f.r, f.dev, &q, 4);				/* D waits */
	CHECK(ring_wait(&f.r, &cqe, 500) == -ETIME, "a CQE (%llu: %d) while B and D wait",
	      (unsigned long long)cqe.user_data, cqe.res);
	sqe = ring_sqe(&f.r);
	REQUIRE(sqe, "SQ ring full");
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = IORING_OP_ASYNC_CANCEL;
	sqe->fd = -1;
	sqe->addr = 4;
	sqe->user_data = 5;
	REQUIRE(ring_submit(&f.r, 0) == 1, "io_uring_enter ASYNC_CANCEL");
	for (i = 0; i < 2; i++) {
		if (ring_wait(&f.r, &cqe, 5000 * ss_debug_scale(4))) {
			CHECK(0, "ASYNC_CANCEL of D: %d of 2 CQEs", i);
			break;
		}
		if (cqe.user_data == 4)
			CHECK(cqe.res == -ECANCELED, "D cancelled: %d, want -ECANCELED",
			      cqe.res);
		else if (cqe.user_data == 5)
			CHECK(cqe.res == 0 || cqe.res == -EALREADY,
			      "ASYNC_CANCEL's own CQE: %d", cqe.res);
		else
			CHECK(0, "CQE %llu: %d during the cancel",
			      (unsigned long long)cqe.user_data, cqe.res);
	}
	/* The peer drains A; B gets its memory and follows. */
	got = read_full(f.b, f.buf, 2 * len);
	CHECK(got == 2 * len, "the peer got %zu of %zu", got, 2 * len);
	i = bytes_of(f.buf, got, 'w');
	CHECK(i == (int)got, "byte %d is %#x, not the file's", i, f.buf[i]);
	while (done < 2 && !ring_wait(&f.r, &cqe, 10000 * ss_debug_scale(4))) {
		CHECK((cqe.user_data == 1 || cqe.user_data == 2) && cqe.res == (int)len,
		      "CQE %llu: %d, want %zu", (unsigned long long)cqe.user_data,
		      cqe.res, len);
		done++;
	}
	CHECK(done == 2, "%d of A and B completed", done);
	printf("F_WAIT: C -EAGAIN, B waited in io_uring's worker and sent %zu, D cancelled\n",
	       len);
	fixture_exit(&f);
}

/*
 * A command with STABLESEND_URING_F_WAIT that io_uring's worker issues
 * again, once memory is free, sends the request it was submitted with,
 * although the application reused its SQ entry after io_uring_enter(2)
 * returned (the entry is the application's then, on every kernel).  The
 * ring has one worker, kept busy by another command waiting for memory,
 * so the entry is rewritten before the worker issues the command again.
 * In a thread of its own: io_uring's workers are per thread, and those of
 * earlier tests may still be idle, beyond the new limit of one.
 */
static void *wait_reused_fn(void *arg)
{
	size_t hold = 768 << 10, len = 512 << 10, got = 0;
	unsigned int workers[2] = { 1, 1 };
	struct stablesend_req a, w, b, y;
	int x1, x2, y1, y2, done = 0;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe cqe;
	double end;

	struct fixture f;

	fixture_init(&f, hold, 'r', hold + len, 8);
	REQUIRE(syscall(__NR_io_uring_register, f.r.fd,
			IORING_REGISTER_IOWQ_MAX_WORKERS, workers, 2) == 0,
		"IORING_REGISTER_IOWQ_MAX_WORKERS: %s", strerror(errno));
	unix_pair(&x1, &x2);
	unix_pair(&y1, &y2);
	a = ss_req(f.file, f.a, 0, hold, 0);
	w = ss_req(f.file, f.a, 0, len, 0);
	b = ss_req(f.file, x1, 0, len, 0);
	y = ss_req(f.file, y1, 0, len, 0);
	/* A holds 768 KiB of the 1 MiB; W waits for memory in the worker. */
	REQUIRE(submit_one(&f.r, f.dev, &a, 1, 0) == 1, "io_uring_enter");
	CHECK(cqe_res(&f.r, 1, 300) == -ETIME, "A completed with the peer not reading");
	submit_wait(&f.r, f.dev, &w, 2);
	/* B waits for the worker; meanwhile its SQ entry gets Y. */
	sqe = submit_wait(&f.r, f.dev, &b, 3);
	usleep(200000);
	prep_wait(sqe, f.dev, &y, 4);
	/* The peer drains A and W: W, then B, get their memory. */
	CHECK(read_full(f.b, f.buf, hold + len) == hold + len, "the peer of A and W");
	for (end = now_s() + 10 * ss_debug_scale(4); got < len && now_s() < end;) {
		struct pollfd p = { .fd = x2, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 100) != 1)
			continue;
		n = read(x2, f.buf + got, len - got);
		if (n <= 0)
			break;
		got += n;
	}
	CHECK(got == len, "B's peer got %zu of %zu bytes", got, len);
	CHECK(bytes_of(f.buf, got, 'r') == got, "B's bytes are not the file's");
	while (done < 3 && !ring_wait(&f.r, &cqe, 10000 * ss_debug_scale(4))) {
		CHECK(cqe.user_data >= 1 && cqe.user_data <= 3 &&
		      cqe.res == (int)(cqe.user_data == 1 ? hold : len),
		      "CQE %llu: %d", (unsigned long long)cqe.user_data, cqe.res);
		done++;
	}
	CHECK(done == 3, "%d of A, W and B completed", done);
	{
		struct pollfd p = { .fd = y2, .events = POLLIN };

		CHECK(poll(&p, 1, 200) == 0,
		      "the request of the reused SQ entry (never submitted) was sent");
	}
	printf("F_WAIT, SQ entry reused while the command waited for io_uring's worker: "
	       "its own request sent (%zu bytes)\n", got);
	close(x1);
	close(x2);
	close(y1);
	close(y2);
	fixture_exit(&f);
	return arg;
}

static void wait_reused(void)
{
	pthread_t th;

	REQUIRE(!pthread_create(&th, NULL, wait_reused_fn, NULL), "pthread_create");
	pthread_join(th, NULL);
}

/*
 * io_uring's threads never send: a SEND from the process's only thread,
 * queued behind a SUBMIT's request X (parked: the peer, another process,
 * reads only later) and a command C that io_uring's worker issued
 * (IOSQE_ASYNC), sends X, then C, then its own bytes, and returns.
 */
static void send_behind(void)
{
	size_t big = 1 << 20, small = 4096, total = 2 * big + small;
	int dev = ss_dev(), fx = temp_file(big, 'x'), fc = temp_file(big, 's');
	int fs = temp_file(small, 'e'), a, b, i, res, st = -1;
	struct timeval tv = { .tv_sec = 10 };
	struct stablesend_counters k;
	struct stablesend_req qx, qc, qs;
	pid_t pid;
	long sent;
	struct ring r;

	REQUIRE(!ring_init(&r, 8, 0), "io_uring_setup");
	unix_pair(&a, &b);
	REQUIRE(setsockopt(a, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0, "SO_SNDTIMEO");
	qx = ss_req(fx, a, 0, big, 1);
	CHECK(ss_submit(dev, &qx, 1) == 1, "SUBMIT X");
	qc = ss_req(fc, a, 0, big, 2);
	REQUIRE(submit_one(&r, dev, &qc, 2, IOSQE_ASYNC) == 1, "io_uring_enter");
	for (i = 0; i < 500; i++) {
		ss_counters(dev, &k);
		if (k.submitted == 2)
			break;
		usleep(10000);
	}
	CHECK(k.submitted == 2, "io_uring's worker did not queue the command");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		unsigned char *buf = malloc(total);
		size_t got;

		usleep(500000);		/* the SEND is waiting by now */
		got = buf ? read_full(b, buf, total) : 0;
		for (i = 0; i < (int)got; i++)
			if (buf[i] != (i < (int)big ? 'x' : i < 2 * (int)big ? 's' : 'e'))
				break;
		_exit(got == total && i == (int)got ? 0 : 1);
	}
	close(b);
	qs = ss_req(fs, a, 0, small, 3);
	/*
	 * C's CQE is io_uring task work on this thread: with SO_SNDTIMEO set
	 * it cuts the SEND short with EINTR before its first byte, as it
	 * would a send(2).  Again, as an application does.
	 */
	i = 0;
	do
		sent = ss_send(dev, &qs);
	while (sent < 0 && errno == EINTR && ++i < 100);
	CHECK(sent == (long)small, "SEND behind a command io_uring's worker issued: %ld (%s)",
	      sent, sent < 0 ? strerror(errno) : "short");
	res = cqe_res(&r, 2, 10000 * ss_debug_scale(4));
	CHECK(res == (int)big, "the command's CQE: %d", res);
	close(a);
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && !WEXITSTATUS(st),
	      "the peer did not get X, C and the SEND's bytes in order");
	ring_exit(&r);
	close(fx);
	close(fc);
	close(fs);
	close(dev);
}

/* With NOTIFY_RELEASE the CQE waits for the pages; then they are back. */
static void release_cqe(void)
{
	int dev = ss_dev(), file = file_with_pattern(CHUNK, pat), c, s, res;
	unsigned char *buf = malloc(CHUNK);
	struct stablesend_counters cnt;
	struct stablesend_req q;
	struct ring r;

	REQUIRE(!ring_init(&r, 8, 0), "io_uring_setup");
	tcp_pair(AF_INET, &c, &s);
	/*
	 * Control: without it the CQE comes although nobody reads.  On an
	 * open of its own, closed once read: nobody would wait for its pages
	 * on @dev, whose memory is checked below.
	 */
	q = ss_req(file, c, 0, CHUNK, 1);
	{
		int dev0 = ss_dev();

		REQUIRE(submit_one(&r, dev0, &q, 1, 0) == 1, "io_uring_enter");
		res = cqe_res(&r, 1, 5000 * ss_debug_scale(4));
		CHECK(res == CHUNK, "without NOTIFY_RELEASE: CQE %d while the peer does not read",
		      res);
		CHECK(read_full(s, buf, CHUNK) == CHUNK, "read");
		close(dev0);
	}

	q = ss_req(file, c, 0, CHUNK, 2);
	q.flags = STABLESEND_REQ_NOTIFY_RELEASE;
	REQUIRE(submit_one(&r, dev, &q, 2, 0) == 1, "io_uring_enter");
	res = cqe_res(&r, 2, 700);
	CHECK(res == -ETIME, "NOTIFY_RELEASE: CQE %d while the peer still holds the pages", res);
	ss_counters(dev, &cnt);
	CHECK(cnt.mem_in_use > 0, "the pages are held: %llu bytes in use",
	      (unsigned long long)cnt.mem_in_use);
	CHECK(read_full(s, buf, CHUNK) == CHUNK, "read");
	CHECK(pattern_mismatch(buf, CHUNK, 0, pat) == CHUNK, "payload");
	if (res == -ETIME) {
		res = cqe_res(&r, 2, 10000 * ss_debug_scale(4));
		CHECK(res == CHUNK, "NOTIFY_RELEASE: CQE %d after the peer read", res);
	}
	ss_counters(dev, &cnt);
	CHECK(cnt.mem_in_use == 0, "after the CQE: %llu bytes still in use",
	      (unsigned long long)cnt.mem_in_use);
	ring_exit(&r);
	close(c);
	close(s);
	close(file);
	close(dev);
	free(buf);
}

/* A command that has not started is cancelled by its user_data. */
static void cancel(void)
{
	int dev = ss_dev(), file = temp_file(4 << 20, 'c'), a, b, res;
	struct stablesend_req q1, q2;
	__u64 ud = 2;
	struct ring r;

	REQUIRE(!ring_init(&r, 8, 0), "io_uring_setup");
	unix_pair(&a, &b);
	q1 = ss_req(file, a, 0, 4 << 20, 1);
	q2 = ss_req(file, a, 0, 4096, 2);
	REQUIRE(submit_one(&r, dev, &q1, 1, 0) == 1, "io_uring_enter");
	REQUIRE(submit_one(&r, dev, &q2, 2, 0) == 1, "io_uring_enter");
	CHECK(ioctl(dev, STABLESEND_IOC_CANCEL, &ud) == 1, "CANCEL took none");
	res = cqe_res(&r, 2, 5000);
	CHECK(res == -ECANCELED, "the cancelled command's CQE: %d", res);
	/* The first goes on to the end once the peer reads. */
	{
		char *buf = malloc(4 << 20);

		CHECK(read_full(b, buf, 4 << 20) == 4 << 20, "read");
		free(buf);
	}
	res = cqe_res(&r, 1, 10000 * ss_debug_scale(4));
	CHECK(res == 4 << 20, "the first command's CQE: %d", res);
	ring_exit(&r);
	close(a);
	close(b);
	close(file);
	close(dev);
}

struct thread_submit {
	struct fixture *f;
	struct stablesend_req q;
	int res;
};

static void *thread_submit_fn(void *arg)
{
	struct thread_submit *t = arg;

	t->res = submit_one(&t->f->r, t->f->dev, &t->q, 1, 0);
	return NULL;
}

/*
 * A thread submits a command larger than its socket holds and exits: the
 * command is not cancelled (a thread that exits leaves its commands to
 * the others); once the peer reads, the rest goes out and the CQE says
 * every byte.
 */
static void thread_exit(void)
{
	size_t len = 768 << 10, got, i;
	struct thread_submit t;
	struct io_uring_cqe cqe;
	struct fixture f;
	pthread_t th;
	int res;

	fixture_init(&f, len, 'e', len, 8);
	t.f = &f;
	t.q = ss_req(f.file, f.a, 0, len, 1);
	REQUIRE(!pthread_create(&th, NULL, thread_submit_fn, &t), "pthread_create");
	pthread_join(th, NULL);
	REQUIRE(t.res == 1, "io_uring_enter in the thread: %d", t.res);
	/* A watcher that took the exit for a cancel would act within 250 ms. */
	res = ring_wait(&f.r, &cqe, 1000);
	CHECK(res == -ETIME, "a CQE (%d) after its submitting thread exited, the peer not reading",
	      res ? 0 : cqe.res);
	got = read_full(f.b, f.buf, len);
	i = bytes_of(f.buf, got, 'e');
	CHECK(got == len && i == got, "the peer got %zu of %zu bytes, %zu of the file's",
	      got, len, i);
	if (res == -ETIME) {
		res = cqe_res(&f.r, 1, 10000 * ss_debug_scale(4));
		CHECK(res == (int)len, "the command's CQE: %d, want %zu", res, len);
	}
	printf("submitting thread exited: its command sent all %zu bytes\n", got);
	fixture_exit(&f);
}

/*
 * A ring closed with a command parked on a peer that does not read (and
 * one queued behind it): both end at once, and once the peer goes too,
 * every page and the open come back.
 */
static void ring_closed(long long base)
{
	int dev = ss_dev(), file = temp_file(4 << 20, 'r'), a, b;
	struct stablesend_counters cnt;
	struct stablesend_req q1, q2;
	double end;
	struct ring r;

	REQUIRE(!ring_init(&r, 8, 0), "io_uring_setup");
	unix_pair(&a, &b);
	q1 = ss_req(file, a, 0, 4 << 20, 1);
	q2 = ss_req(file, a, 0, 4096, 2);
	REQUIRE(submit_one(&r, dev, &q1, 1, 0) == 1, "io_uring_enter");
	REQUIRE(submit_one(&r, dev, &q2, 2, 0) == 1, "io_uring_enter");
	ring_exit(&r);
	end = now_s() + 10 * ss_debug_scale(4);
	do {
		usleep(20000);
		ss_counters(dev, &cnt);
	} while (cnt.completed < 2 && now_s() < end);
	CHECK(cnt.completed == 2 && cnt.cancelled >= 1,
	      "ring closed: %llu of 2 commands ended, %llu cancelled",
	      (unsigned long long)cnt.completed, (unsigned long long)cnt.cancelled);
	close(a);
	close(b);
	close(file);
	close(dev);
	CHECK(ss_drained(10 * ss_debug_scale(4)), "pages still in flight: %lld requests",
	      ss_stat("requests_in_flight"));
	CHECK(ss_stat_wait("contexts", base, 10 * ss_debug_scale(4)) == base,
	      "opens not freed: %lld, want %lld", ss_stat("contexts"), base);
}

/* Kernel CPU time so far, all CPUs, in USER_HZ ticks (/proc/stat). */
static long long kernel_ticks(void)
{
	unsigned long long v[7] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	int n;

	REQUIRE(f, "/proc/stat");
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
		   &v[2], &v[3], &v[4], &v[5], &v[6]);
	fclose(f);
	REQUIRE(n == 7, "/proc/stat: %d fields", n);
	return v[2] + v[5] + v[6];	/* system, irq, softirq */
}

struct vforker {
	struct ring r;
	unsigned int ring_flags;
	int dev, a, file, self_cancel;
	atomic_int ready;	/* 1: submitted, -1: failed */
	pid_t tid;
	atomic_int child;	/* its pid, as the child says (memory shared) */
	char stack[64 << 10] __attribute__((aligned(16)));	/* the child's */
};

static int vfork_child_fn(void *arg)
{
	struct vforker *v = arg;

	atomic_store(&v->child, getpid());
	for (;;)
		pause();
	return 0;
}

/*
 * Sets up a ring (a DEFER_TASKRUN one is its creator's alone), submits a
 * command that fills its socket and one queued behind it (8), cancels
 * that one itself if asked, then waits in a vfork().
 */
static void *vforker_fn(void *arg)
{
	struct vforker *v = arg;
	struct stablesend_req q1 = ss_req(v->file, v->a, 0, 4 << 20, 7);
	struct stablesend_req q2 = ss_req(v->file, v->a, 0, 4096, 8);
	__u64 ud = 8;
	pid_t pid;

	v->tid = gettid();
	if (ring_init(&v->r, 8, v->ring_flags) ||
	    submit_one(&v->r, v->dev, &q1, 7, 0) != 1 ||
	    submit_one(&v->r, v->dev, &q2, 8, 0) != 1 ||
	    (v->self_cancel && ioctl(v->dev, STABLESEND_IOC_CANCEL, &ud) != 1)) {
		atomic_store(&v->ready, -1);
		return NULL;
	}
	atomic_store(&v->ready, 1);
	/*
	 * vfork(), but the fd table shared, so that the ring's last file
	 * reference can go: the wait for the child is killable, not
	 * interruptible, and task work waits for the child.
	 */
	pid = clone(vfork_child_fn, v->stack + sizeof(v->stack),
		    CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, v);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return NULL;
}

/* The vfork() child of @v's thread, once that thread waits for it. */
static pid_t vfork_child(struct vforker *v)
{
	double end = now_s() + 10 * ss_debug_scale(4);

	while (now_s() < end) {
		if (atomic_load(&v->child) > 0 && thread_state(v->tid) == 'D')
			return atomic_load(&v->child);
		usleep(10000);
	}
	return 0;
}

/*
 * A queued command cancelled by another thread while its issuing thread
 * waits in vfork(), where no task work reaches it (or, on a DEFER_TASKRUN
 * ring, whose task work runs only when the thread waits for CQEs, by
 * that thread itself just before), then its ring closed: the command's
 * CQE was decided but not posted, and io_uring's exit work must not spin
 * on the command meanwhile.
 * The kernel's CPU time over the next second stays that of an idle
 * system; once the child goes, the thread runs again and everything
 * comes back.
 */
static void ring_closed_vfork(long long base, unsigned int ring_flags,
			      int self_cancel)
{
	struct vforker v = {
		.dev = ss_dev(), .file = temp_file(4 << 20, 'v'),
		.ring_flags = ring_flags, .self_cancel = self_cancel,
	};
	long long t0, busy, hz = sysconf(_SC_CLK_TCK);
	char what[80];
	__u64 ud = 8;
	pthread_t th;
	pid_t child;
	int b;

	snprintf(what, sizeof(what), "%s ring, cancelled by %s",
		 ring_flags ? "DEFER_TASKRUN" : "plain",
		 self_cancel ? "its own thread" : "another thread");
	unix_pair(&v.a, &b);
	REQUIRE(!pthread_create(&th, NULL, vforker_fn, &v), "pthread_create");
	for (int i = 0; i < 1000 && !atomic_load(&v.ready); i++)
		usleep(10000);
	REQUIRE(atomic_load(&v.ready) == 1, "%s: the thread's ring and commands", what);
	child = vfork_child(&v);
	REQUIRE(child > 0, "%s: the thread waiting in vfork()", what);
	if (!self_cancel)
		CHECK(ioctl(v.dev, STABLESEND_IOC_CANCEL, &ud) == 1, "%s: CANCEL took none", what);
	ring_exit(&v.r);
	usleep(200000);
	t0 = kernel_ticks();
	usleep(1000000);
	busy = kernel_ticks() - t0;
	printf("%s, then closed while the thread waits in vfork(): the kernel busy %lld%% of a CPU for 1 s\n",
	       what, busy * 100 / hz);
	CHECK(busy * 100 < 30 * hz,
	      "%s: the kernel spent %lld%% of a CPU for 1 s after the ring closed: its exit work spins on the command",
	      what, busy * 100 / hz);
	kill(child, SIGKILL);
	pthread_join(th, NULL);
	close(v.a);
	close(b);
	close(v.file);
	close(v.dev);
	CHECK(ss_drained(10 * ss_debug_scale(4)), "%s: pages still in flight: %lld requests",
	      what, ss_stat("requests_in_flight"));
	CHECK(ss_stat_wait("contexts", base, 10 * ss_debug_scale(4)) == base,
	      "%s: opens not freed: %lld, want %lld", what, ss_stat("contexts"), base);
}

/*
 * The submitter killed, or exec()ing, with commands stuck on a peer we
 * hold (exec waits for every io_uring request of the task): it goes at
 * once, and all comes back.  @ring_flags: IORING_SETUP_SQPOLL, whose
 * thread cancels its requests itself when killed.
 */
static void gone(long long base, unsigned int ring_flags, int exec_it)
{
	const char *what = exec_it ? "exec" : ring_flags ? "killed (SQPOLL)" : "killed";
	int a, b, file = temp_file(4 << 20, 'k'), status, reaped;
	double t0;
	pid_t pid;

	unix_pair(&a, &b);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		int dev = ss_dev();
		struct stablesend_req q1 = ss_req(file, a, 0, 4 << 20, 1);
		struct stablesend_req q2 = ss_req(file, a, 0, 4096, 2);
		struct io_uring_cqe cqe;
		struct ring r;

		if (ring_init(&r, 8, ring_flags) || submit_one(&r, dev, &q1, 1, 0) < 0 ||
		    submit_one(&r, dev, &q2, 2, 0) < 0)
			_exit(3);
		/* SQPOLL: until its thread took both (no CQE: they are stuck). */
		ring_wait(&r, &cqe, 300);
		if (exec_it) {
			execl("/proc/self/exe", "uring", "--exit", (char *)NULL);
			_exit(4);
		}
		pause();
		_exit(0);
	}
	/* Until the first command filled the socket. */
	t0 = now_s();
	while (ss_stat("requests_in_flight") < 1 && now_s() < t0 + 10)
		usleep(10000);
	usleep(200000);
	if (!exec_it)
		kill(pid, SIGKILL);
	t0 = now_s();
	while (!(reaped = waitpid(pid, &status, WNOHANG) == pid) &&
	       now_s() < t0 + 15 * ss_debug_scale(4))
		usleep(20000);
	CHECK(reaped, "%s: the child is still there after %.0f s", what, now_s() - t0);
	if (!reaped) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	if (exec_it)
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exec: the new program exited %#x",
		      status);
	else
		CHECK(WIFSIGNALED(status), "%s: the child exited %#x before it was killed", what,
		      status);
	close(a);
	close(b);
	close(file);
	CHECK(ss_drained(10 * ss_debug_scale(4)), "%s: pages still in flight: %lld requests",
	      what, ss_stat("requests_in_flight"));
	CHECK(ss_stat_wait("contexts", base, 10 * ss_debug_scale(4)) == base,
	      "%s: opens not freed: %lld, want %lld", what, ss_stat("contexts"), base);
}

struct canceller {
	int dev;
	atomic_int stop;
	long hits;
};

static void *cancel_loop(void *arg)
{
	struct canceller *c = arg;
	__u64 ud = 2;

	while (!atomic_load(&c->stop)) {
		int n = ioctl(c->dev, STABLESEND_IOC_CANCEL, &ud);

		if (n > 0)
			c->hits += n;
	}
	return NULL;
}

/*
 * Commands issued from io_uring's workers (IOSQE_ASYNC) while another
 * thread cancels them as they are queued: each gets one CQE, nothing is
 * touched after it is gone (KASAN on the debug kernel).
 */
static void async_issue(void)
{
	int dev = ss_dev(), file = temp_file(1 << 20, 'a'), a, b, i, n = 0, cancelled = 0;
	struct canceller cl = { .dev = dev };
	struct stablesend_req q1, q2[64];
	struct io_uring_cqe cqe;
	char *buf = malloc(1 << 20);
	struct ring r;
	pthread_t t;

	REQUIRE(!ring_init(&r, 128, 0), "io_uring_setup");
	unix_pair(&a, &b);
	/* Parked ahead of the others, so they stay queued. */
	q1 = ss_req(file, a, 0, 1 << 20, 1);
	REQUIRE(submit_one(&r, dev, &q1, 1, 0) == 1, "io_uring_enter");
	pthread_create(&t, NULL, cancel_loop, &cl);
	for (i = 0; i < 64; i++) {
		struct io_uring_sqe *sqe = ring_sqe(&r);

		REQUIRE(sqe, "SQ ring full");
		q2[i] = ss_req(file, a, 0, 4096, 2);
		stablesend_prep_uring(sqe, dev, &q2[i]);
		sqe->flags = IOSQE_ASYNC;
		sqe->user_data = 2;
	}
	CHECK(ring_submit(&r, 0) == 64, "io_uring_enter");
	while (n < 64 && !ring_wait(&r, &cqe, 10000 * ss_debug_scale(4))) {
		CHECK(cqe.user_data == 2 && (cqe.res == -ECANCELED || cqe.res == 4096),
		      "IOSQE_ASYNC: CQE %llu %d", (unsigned long long)cqe.user_data, cqe.res);
		cancelled += cqe.res == -ECANCELED;
		n++;
	}
	atomic_store(&cl.stop, 1);
	pthread_join(t, NULL);
	CHECK(n == 64, "IOSQE_ASYNC: %d of 64 CQEs", n);
	CHECK(cancelled == cl.hits, "%d cancelled CQEs, %ld cancelled by the ioctl", cancelled,
	      cl.hits);
	CHECK(read_full(b, buf, 1 << 20) == 1 << 20, "read");
	CHECK(!ring_wait(&r, &cqe, 10000 * ss_debug_scale(4)) && cqe.res == 1 << 20,
	      "the first command's CQE");
	ring_exit(&r);
	close(a);
	close(b);
	close(file);
	close(dev);
	free(buf);
}

/*
 * A command behind a link is issued when the request ahead of it
 * completes, after io_uring_enter() returned, and the application may have
 * reused its SQ entry by then.  Here the entry is rewritten at once with
 * another request (other file bytes), then the link's head (a read of a
 * pipe) is let complete.  With IOSQE_ASYNC io_uring copies the SQE at
 * submission: the command must send what it was submitted with, on every
 * kernel (the uapi header's advice).  Without it, which one goes out is
 * io_uring's doing: the result must be what the header says of this
 * kernel (6.12's io_uring reads the SQE only at issue).
 */
static void linked(void)
{
	int dev = ss_dev(), file = file_with_pattern(4 * CHUNK, pat), c, s, p[2], async;
	unsigned char *buf = malloc(CHUNK);
	struct stablesend_req a, b;
	struct utsname u;
	int major = 0, minor = 0, late_kernel;

	REQUIRE(buf && !uname(&u), "malloc, uname");
	sscanf(u.release, "%d.%d", &major, &minor);
	/*
	 * Of the matrix kernels, 6.12's io_uring reads a linked command's SQE
	 * at issue; 6.1's copies it at submission (prep_async), and so does
	 * 7.3's.  Another kernel must be measured before the header says.
	 */
	late_kernel = major == 6 && minor == 12;
	for (async = 1; async >= 0; async--) {
		struct io_uring_sqe *head, *cmd;
		struct io_uring_cqe cqe;
		int i, got = -1, late;
		struct ring r;
		char x = 'x';

		REQUIRE(!ring_init(&r, 8, 0), "io_uring_setup");
		REQUIRE(pipe(p) == 0, "pipe");
		tcp_pair(AF_INET, &c, &s);
		a = ss_req(file, c, 0, CHUNK, 1);
		b = ss_req(file, c, 2 * CHUNK, CHUNK, 1);
		head = ring_sqe(&r);
		head->opcode = IORING_OP_READ;
		head->fd = p[0];
		head->addr = (uintptr_t)buf;
		head->len = 1;
		head->flags = IOSQE_IO_LINK;
		head->user_data = 10;
		cmd = ring_sqe(&r);
		stablesend_prep_uring(cmd, dev, &a);
		cmd->flags = async ? IOSQE_ASYNC : 0;
		cmd->user_data = 11;
		REQUIRE(ring_submit(&r, 0) == 2, "io_uring_enter");
		/* The entry is the application's again: reuse it. */
		stablesend_prep_uring(cmd, dev, &b);
		cmd->user_data = 12;
		REQUIRE(write(p[1], &x, 1) == 1, "write");
		for (i = 0; i < 2 && !ring_wait(&r, &cqe, 10000 * ss_debug_scale(4)); i++)
			if (cqe.user_data != 10)
				got = cqe.res;
		CHECK(i == 2 && got == CHUNK, "linked%s: %d CQEs, command's res %d",
		      async ? " IOSQE_ASYNC" : "", i, got);
		CHECK(read_full(s, buf, CHUNK) == CHUNK, "linked: read");
		late = pattern_mismatch(buf, CHUNK, 2 * CHUNK, pat) == CHUNK;
		CHECK(late || pattern_mismatch(buf, CHUNK, 0, pat) == CHUNK,
		      "linked: sent neither request's bytes");
		printf("linked command%s, SQ entry reused after submission (%s): sent the %s request\n",
		       async ? " with IOSQE_ASYNC" : "", u.release,
		       late ? "rewritten" : "submitted");
		if (async)
			CHECK(!late, "IOSQE_ASYNC: io_uring read the reused SQ entry");
		else
			CHECK(late == late_kernel,
			      "plain link on %s: the %s request went out; the uapi header says the %s",
			      u.release, late ? "rewritten" : "submitted",
			      late_kernel ? "rewritten" : "submitted");
		ring_exit(&r);
		close(p[0]);
		close(p[1]);
		close(c);
		close(s);
	}
	close(file);
	close(dev);
	free(buf);
}

/* The device fd as a registered file. */
static void fixed_file(void)
{
	int dev = ss_dev(), file = file_with_pattern(CHUNK, pat), c, s, res;
	unsigned char *buf = malloc(CHUNK);
	struct stablesend_req q;
	struct ring r;

	REQUIRE(!ring_init(&r, 8, 0), "io_uring_setup");
	REQUIRE(syscall(__NR_io_uring_register, r.fd, IORING_REGISTER_FILES, &dev, 1) == 0,
		"IORING_REGISTER_FILES");
	tcp_pair(AF_INET, &c, &s);
	q = ss_req(file, c, 0, CHUNK, 1);
	REQUIRE(submit_one(&r, 0, &q, 1, IOSQE_FIXED_FILE) == 1, "io_uring_enter");
	res = cqe_res(&r, 1, 10000);
	CHECK(res == CHUNK, "fixed file: CQE %d", res);
	CHECK(read_full(s, buf, CHUNK) == CHUNK && pattern_mismatch(buf, CHUNK, 0, pat) == CHUNK,
	      "fixed file: payload");
	ring_exit(&r);
	close(c);
	close(s);
	close(file);
	close(dev);
	free(buf);
}

int main(int argc, char **argv)
{
	long long base;

	if (argc > 1 && !strcmp(argv[1], "--exit"))
		return 0;	/* gone(): the program an exec brings */
	base = ss_contexts_baseline();

	features();
	batch_snapshot(0, "64-byte SQEs");
	batch_snapshot(IORING_SETUP_SQE128, "SQE128 ring");
	errnos();
	eagain();
	poll_add();
	poll_multishot();
	reader_quiet();
	wait_memory();
	wait_reused();
	send_behind();
	release_cqe();
	cancel();
	thread_exit();
	fixed_file();
	async_issue();
	linked();
	ring_closed(base);
	ring_closed_vfork(base, 0, 0);
	ring_closed_vfork(base, IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, 0);
	ring_closed_vfork(base, IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, 1);
	gone(base, 0, 0);
	gone(base, IORING_SETUP_SQPOLL, 0);
	gone(base, 0, 1);
	batch_snapshot(IORING_SETUP_SQPOLL, "SQPOLL ring");
	/*
	 * A ring goes away after its close (io_uring's exit work), and the
	 * device file with its last command: then the module is idle again.
	 */
	CHECK(ss_drained(10 * ss_debug_scale(4)), "pages still in flight: %lld requests",
	      ss_stat("requests_in_flight"));
	CHECK(ss_stat_wait("contexts", base, 10 * ss_debug_scale(4)) == base,
	      "opens not freed after the rings closed: %lld, want %lld",
	      ss_stat("contexts"), base);
	CHECK(ss_stat_wait("pool_bytes", 0, 10 * ss_debug_scale(4)) == 0,
	      "the module still owns %lld bytes of pages", ss_stat("pool_bytes"));
	return test_result();
}
