// SPDX-License-Identifier: GPL-2.0
/*
 * Faults: a stalled request resumes when the peer reads again, the peer
 * resets mid-request, the socket is closed with requests queued (by the
 * sender, by the peer), the process is killed with requests in flight,
 * requests are cancelled behind a stalled one, the device fd is closed
 * while a request is half sent.  Each gives its documented result, nothing
 * hangs, closing never waits for a peer, and afterwards nothing is left in
 * flight (module stats requests_in_flight/bytes_in_flight 0, contexts back
 * to where they were).
 *
 * "Stalled": a TCP pair over loopback with small buffers whose receiver
 * does not read, so the head request is started (SIOCOUTQ > 0) and
 * everything behind it waits on the socket's FIFO.
 *
 * test-timeout: 300
 * compat32: yes
 */
#include "watchdog.h"
#include <linux/sockios.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#define SEED_A	0
#define SEED_B	1
#define SEED_C	2

/* A file of @size bytes of pattern @seed; returns a read-write fd. */
static int pat_file(size_t size, unsigned int seed)
{
	unsigned char *b = malloc(size);
	int fd = temp_file(0, 0);
	size_t i;

	REQUIRE(b, "malloc");
	for (i = 0; i < size; i++)
		b[i] = pat(i, seed);
	write_full(fd, b, size, 0);
	free(b);
	return fd;
}

/* --- SEND with a watchdog ---------------------------------------------------- */

/* A connected loopback TCP pair with small buffers on both ends. */
static void stalled_pair(int *c, int *s)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sin);
	int v = 4096, l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	REQUIRE(l >= 0, "socket");
	/* Set before accept/connect so the window is small from the start. */
	setsockopt(l, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
	REQUIRE(bind(l, (struct sockaddr *)&sin, len) == 0 && listen(l, 1) == 0 &&
		getsockname(l, (struct sockaddr *)&sin, &len) == 0, "listen");
	*c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(*c >= 0, "socket");
	setsockopt(*c, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	REQUIRE(connect(*c, (struct sockaddr *)&sin, len) == 0, "connect");
	*s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	REQUIRE(*s >= 0, "accept");
	close(l);
}

/* Wait until the module has put bytes on @sock: the head request started. */
static int wait_started(int sock)
{
	double end = now_s() + 10;
	int outq = 0;

	while (now_s() < end) {
		if (ioctl(sock, SIOCOUTQ, &outq) == 0 && outq > 0) {
			usleep(100000);	/* let it fill the socket and park */
			return 1;
		}
		usleep(5000);
	}
	return 0;
}

/*
 * Read @s until EOF (or @timeout_s of silence); every byte must continue
 * pattern @seed from 0.  Returns the bytes read, -1 on a timeout, -2 on a
 * byte that is not the pattern.
 */
static long drain_prefix(int s, unsigned int seed, double timeout_s)
{
	struct timeval tv = { .tv_sec = (long)timeout_s };
	static unsigned char buf[65536];
	long total = 0;

	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (;;) {
		ssize_t r = read(s, buf, sizeof(buf)), i;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN ? -1 : -3;
		if (!r)
			return total;
		for (i = 0; i < r; i++)
			if (buf[i] != pat(total + i, seed)) {
				fprintf(stderr, "byte %ld is %#x, pattern %u has %#x\n",
					total + i, buf[i], seed, pat(total + i, seed));
				return -2;
			}
		total += r;
	}
}

static int is_peer_gone(long long res)
{
	return res == -ECONNRESET || res == -EPIPE;
}

static void reset_close(int s)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	REQUIRE(setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0, "SO_LINGER");
	close(s);
}

static void rcv_timeout(int s, int seconds)
{
	struct timeval tv = { .tv_sec = seconds };

	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static void check_read_pattern(int s, size_t n, unsigned int seed, const char *what)
{
	unsigned char *b = malloc(n);
	size_t got, i;

	REQUIRE(b, "malloc");
	rcv_timeout(s, 20);
	got = read_full(s, b, n);
	CHECK(got == n, "%s: peer read %zu of %zu bytes", what, got, n);
	for (i = 0; i < got; i++)
		if (b[i] != pat(i, seed))
			break;
	CHECK(i == got, "%s: byte %zu is not the pattern", what, i);
	free(b);
}

/*
 * 0. A stalled request resumes when the peer reads again, and completes.
 * The peer reads in small pieces so that socket space comes back while
 * the module is between a refused send and parking on the socket.
 */
static void stall_resume(int file, int rounds)
{
	const size_t len = 2 << 20;
	static unsigned char buf[4096];
	int i, stuck = 0;

	for (i = 0; i < rounds; i++) {
		struct stablesend_counters cnt;
		struct stablesend_cqe cqe;
		struct stablesend_req r;
		int dev = ss_dev(), c, s, outq = -1, n;
		size_t got = 0, k;
		int bad = 0;

		stalled_pair(&c, &s);
		rcv_timeout(s, 10);
		r = ss_req(file, c, 0, len, 1);
		CHECK(ss_submit(dev, &r, 1) == 1, "submit 2 MiB");
		CHECK(wait_started(c), "never started");
		while (got < len) {
			ssize_t m = read(s, buf, sizeof(buf));

			if (m <= 0)
				break;
			for (k = 0; k < (size_t)m; k++)
				bad |= buf[k] != pat(got + k, SEED_A);
			got += m;
		}
		n = ss_reap(dev, &cqe, 1, 5000);
		ss_counters(dev, &cnt);
		ioctl(c, SIOCOUTQ, &outq);
		CHECK(!bad, "round %d: wrong bytes", i);
		CHECK(got == len && n == 1 && cqe.res == (long long)len,
		      "round %d: the stalled request did not resume: peer got %zu of %zu bytes, then nothing for 10 s; "
		      "socket send queue %d bytes (idle), completions %d, COUNTERS completed %llu",
		      i, got, len, outq, n, (unsigned long long)cnt.completed);
		stuck += got != len;
		close(dev);	/* aborts a stuck request */
		close(c);
		close(s);
	}
	printf("%s   stalled request resumes when the peer reads: %d of %d rounds stuck\n",
	       stuck ? "FAIL" : "ok", stuck, rounds);
	CHECK(ss_drained(10), "pages in flight after the resume case");
}

/* 1a. The peer reads a little, then resets: the async request fails. */
static void peer_reset_async(int file8m)
{
	struct stablesend_counters cnt;
	struct stablesend_cqe cqe;
	struct stablesend_req r;
	int dev = ss_dev(), c, s, n;

	REQUIRE(ss_setup(dev, -1, 16 << 20) == 0, "SETUP");
	stalled_pair(&c, &s);
	r = ss_req(file8m, c, 0, 8 << 20, 1);
	CHECK(ss_submit(dev, &r, 1) == 1, "submit 8 MiB");
	check_read_pattern(s, 65536, SEED_A, "peer reset");
	reset_close(s);
	n = ss_reap(dev, &cqe, 1, 10000);
	CHECK(n == 1, "no completion 10 s after the reset");
	if (n == 1) {
		CHECK(cqe.user_data == 1 && is_peer_gone(cqe.res) &&
		      (cqe.flags & STABLESEND_CQE_SENT),
		      "after a reset: user_data %llu res %lld flags %#x, expected -ECONNRESET or -EPIPE",
		      (unsigned long long)cqe.user_data, (long long)cqe.res, cqe.flags);
		printf("%s   peer reset mid-request (async): res %lld (%s)\n",
		       is_peer_gone(cqe.res) ? "ok" : "FAIL", (long long)cqe.res,
		       strerrorname_np((int)-cqe.res) ?: "?");
	}
	ss_counters(dev, &cnt);
	CHECK(cnt.completed == 1 && cnt.failed == 1 && cnt.cqes_pending == 0,
	      "counters: completed %llu failed %llu cqes_pending %llu",
	      (unsigned long long)cnt.completed, (unsigned long long)cnt.failed,
	      (unsigned long long)cnt.cqes_pending);
	close(c);
	/* Pages nobody waits for come back at the latest once the fd is closed. */
	close(dev);
	CHECK(ss_drained(10), "pages in flight after the reset");
}

struct resetter {
	int s;
	size_t first;
};

static void *reset_after(void *p)
{
	struct resetter *rs = p;

	check_read_pattern(rs->s, rs->first, SEED_A, "peer reset (sync)");
	reset_close(rs->s);
	return NULL;
}

/* 1b. The same under a synchronous SEND: it returns what was sent (like sendfile). */
static void peer_reset_sync(int file8m)
{
	struct resetter rs = { .first = 65536 };
	struct stablesend_req r;
	pthread_t th;
	int dev = ss_dev(), c;
	long ret;
	int err, stalled;

	stalled_pair(&c, &rs.s);
	REQUIRE(pthread_create(&th, NULL, reset_after, &rs) == 0, "pthread_create");
	r = ss_req(file8m, c, 0, 8 << 20, 2);
	ret = send_wd(dev, &r, 60, &stalled);
	err = errno;
	CHECK(!stalled, "SEND still waiting 60 s after the peer reset: returned %ld after the watchdog signal",
	      ret);
	pthread_join(th, NULL);
	errno = err;
	CHECK((ret >= (long)rs.first && ret < 8 << 20) ||
	      (ret == -1 && (err == ECONNRESET || err == EPIPE)),
	      "SEND of 8 MiB, peer reset after 64 KiB: returned %ld", ret);
	printf("%s   peer reset mid-request (SEND): returned %ld%s%s\n",
	       (ret >= (long)rs.first && ret < 8 << 20) || ret == -1 ? "ok" : "FAIL",
	       ret, ret < 0 ? " " : "", ret < 0 ? strerrorname_np(err) : "");
	close(c);
	close(dev);
	CHECK(ss_drained(10), "pages in flight after the reset (SEND)");
}

/* Head request from file A (started, stalled), then @nq queued ones from file B. */
static int queue_behind_stall(int dev, int fa, int fb, int c, size_t head,
			      int nq, size_t qlen)
{
	struct stablesend_req r = ss_req(fa, c, 0, head, 1);
	int i, n = 0;

	n += ss_submit(dev, &r, 1) == 1;
	CHECK(wait_started(c), "the head request never started");
	for (i = 0; i < nq; i++) {
		r = ss_req(fb, c, 0, qlen, 2 + i);
		n += ss_submit(dev, &r, 1) == 1;
	}
	CHECK(n == nq + 1, "%d of %d requests accepted", n, nq + 1);
	return n;
}

static void timed_close(int fd, const char *what)
{
	double t = now_s();

	close(fd);
	t = now_s() - t;
	CHECK(t < 2, "%s: closing the device fd took %.2f s", what, t);
	printf("%s   %s: close(device) took %.3f s\n", t < 2 ? "ok" : "FAIL", what, t);
}

/* 2a. The sender closes its socket fd, then the device fd. */
static void sender_closes(int fa, int fb)
{
	int dev = ss_dev(), c, s;
	long got;

	stalled_pair(&c, &s);
	queue_behind_stall(dev, fa, fb, c, 4 << 20, 4, 256 << 10);
	close(c);	/* the module keeps the socket while requests are queued */
	usleep(50000);
	timed_close(dev, "sender closed its socket, requests queued");
	/* The peer gets what the socket had taken of the head, then EOF. */
	got = drain_prefix(s, SEED_A, 20);
	CHECK(got > 0 && got < 4 << 20,
	      "peer got %ld bytes (expected part of the head request only, then EOF)", got);
	printf("%s   peer got %ld bytes of the head request, then EOF\n",
	       got > 0 && got < 4 << 20 ? "ok" : "FAIL", got);
	close(s);
	CHECK(ss_drained(10), "pages in flight after the sender closed");
}

/* 2b. The peer closes (RST: it has unread data); every request fails. */
static void peer_closes(int fa, int fb, int reap)
{
	struct stablesend_counters cnt;
	struct stablesend_cqe cqe[5];
	int dev = ss_dev(), c, s, n, i, ok = 1;

	stalled_pair(&c, &s);
	queue_behind_stall(dev, fa, fb, c, 4 << 20, 4, 256 << 10);
	close(s);
	if (reap) {
		n = ss_reap(dev, cqe, 5, 10000);
		CHECK(n == 5, "%d of 5 completions after the peer closed", n);
		for (i = 0; i < n; i++) {
			ok &= is_peer_gone(cqe[i].res) && cqe[i].user_data == (uint64_t)(1 + i);
			CHECK(is_peer_gone(cqe[i].res) && cqe[i].user_data == (uint64_t)(1 + i),
			      "cqe %d: user_data %llu res %lld, expected -ECONNRESET/-EPIPE", i,
			      (unsigned long long)cqe[i].user_data, (long long)cqe[i].res);
		}
		printf("%s   peer closed with 5 requests queued: %d completions, res %lld %lld ...\n",
		       ok && n == 5 ? "ok" : "FAIL", n, n > 0 ? (long long)cqe[0].res : 0,
		       n > 1 ? (long long)cqe[1].res : 0);
		ss_counters(dev, &cnt);
		CHECK(cnt.completed == 5 && cnt.failed == 5 && cnt.cqes_pending == 0,
		      "counters: completed %llu failed %llu cqes_pending %llu",
		      (unsigned long long)cnt.completed, (unsigned long long)cnt.failed,
		      (unsigned long long)cnt.cqes_pending);
	}
	timed_close(dev, reap ? "peer closed, completions reaped"
			      : "peer closed, device closed at once");
	close(c);
	CHECK(ss_drained(10), "pages in flight after the peer closed");
}

/*
 * Wait until the module counts @want contexts.  An open's context goes
 * when its last request is freed, a little after the request stops
 * counting as in flight: a count read right after ss_drained() may still
 * include the previous case's opens (it did on the debug kernel).
 */
static void contexts_settle(long long want, const char *when)
{
	long long now = ss_stat_wait("contexts", want, 10);

	CHECK(now == want, "contexts %lld %s, expected %lld", now, when, want);
}

/* 3. A process with requests in flight is killed; @ctx0: contexts now. */
static void killed(int fa, int fb, long long ctx0)
{
	int c, s, p[2], n = 0, status;
	long long ctx1;
	double t;
	pid_t pid;
	long got;

	contexts_settle(ctx0, "before the child");
	stalled_pair(&c, &s);
	REQUIRE(pipe(p) == 0, "pipe");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		int dev = open(STABLESEND_DEVICE, O_RDWR);

		close(s);
		close(p[0]);
		if (dev >= 0)
			n = queue_behind_stall(dev, fa, fb, c, 4 << 20, 40, 64 << 10);
		if (write(p[1], &n, sizeof(n)) != sizeof(n))
			_exit(1);
		for (;;)
			pause();
	}
	close(c);
	close(p[1]);
	CHECK(read(p[0], &n, sizeof(n)) == sizeof(n) && n == 41,
	      "the child queued %d of 41 requests", n);
	close(p[0]);
	ctx1 = ss_stat("contexts");
	CHECK(ctx1 == ctx0 + 1, "contexts %lld with the child's open, %lld before", ctx1, ctx0);
	CHECK(ss_stat("requests_in_flight") >= n, "requests_in_flight %lld, the child queued %d",
	      ss_stat("requests_in_flight"), n);
	t = now_s();
	kill(pid, SIGKILL);
	CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) &&
	      WTERMSIG(status) == SIGKILL, "child status %#x", status);
	t = now_s() - t;
	CHECK(t < 2, "the killed child took %.2f s to die", t);
	printf("%s   killed with %d requests in flight: exited in %.3f s\n",
	       t < 2 ? "ok" : "FAIL", n, t);
	got = drain_prefix(s, SEED_A, 20);
	CHECK(got > 0 && got < 4 << 20,
	      "peer got %ld bytes (expected part of the head request only, then EOF)", got);
	close(s);
	CHECK(ss_drained(10), "pages in flight after the kill: requests %lld bytes %lld",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	contexts_settle(ctx0, "after the child");
	printf("%s   after the kill: peer got %ld bytes then EOF, contexts %lld (was %lld), in flight %lld\n",
	       ss_stat("contexts") == ctx0 && got > 0 ? "ok" : "FAIL", got,
	       ss_stat("contexts"), ctx0, ss_stat("requests_in_flight"));
}

/* 4. Cancel by user_data: queued ones go, the started head does not. */
static void cancel(int fa, int fb, int fc)
{
	struct stablesend_counters cnt;
	struct stablesend_cqe cqe[5];
	struct stablesend_req r[5];
	const size_t head = 2 << 20, keep = 50000;
	uint64_t ud;
	long ret;
	int dev = ss_dev(), c, s, i, n;
	char b;

	stalled_pair(&c, &s);
	r[0] = ss_req(fa, c, 0, head, 1);
	r[1] = ss_req(fb, c, 0, 100000, 7);
	r[2] = ss_req(fc, c, 0, keep, 8);
	r[3] = ss_req(fb, c, 0, 100000, 7);
	r[4] = ss_req(fb, c, 0, 100000, 7);
	CHECK(ss_submit(dev, r, 1) == 1, "submit head");
	CHECK(wait_started(c), "head never started");
	CHECK(ss_submit(dev, r + 1, 4) == 4, "submit 4 behind it");

	ud = 7;
	ret = ioctl(dev, STABLESEND_IOC_CANCEL, &ud);
	CHECK(ret == 3, "CANCEL(7) returned %ld, expected 3", ret);
	n = ss_reap(dev, cqe, 3, 5000);
	CHECK(n == 3, "%d of 3 cancellation completions", n);
	for (i = 0; i < n; i++)
		CHECK(cqe[i].user_data == 7 && cqe[i].res == -ECANCELED &&
		      (cqe[i].flags & STABLESEND_CQE_SENT),
		      "cqe %d: user_data %llu res %lld flags %#x, expected 7 -ECANCELED", i,
		      (unsigned long long)cqe[i].user_data, (long long)cqe[i].res, cqe[i].flags);
	if (ret == 3 && n == 3)
		printf("ok   CANCEL(7): 3 queued requests cancelled, -ECANCELED completions\n");
	ret = ioctl(dev, STABLESEND_IOC_CANCEL, &ud);
	CHECK(ret == -1 && errno == ENOENT, "CANCEL(7) again returned %ld", ret);
	ud = 1;
	ret = ioctl(dev, STABLESEND_IOC_CANCEL, &ud);
	CHECK(ret == -1 && errno == ENOENT, "CANCEL of the started head returned %ld", ret);
	if (ret == -1 && errno == ENOENT)
		printf("ok   CANCEL of the started head request: ENOENT\n");
	ss_counters(dev, &cnt);
	CHECK(cnt.cancelled == 3 && cnt.completed == 3 && cnt.failed == 3,
	      "counters: cancelled %llu completed %llu failed %llu",
	      (unsigned long long)cnt.cancelled, (unsigned long long)cnt.completed,
	      (unsigned long long)cnt.failed);

	/* The peer reads: the head and request 8, nothing of the cancelled ones. */
	{
		unsigned char *got = malloc(head + keep);
		size_t k, m;

		REQUIRE(got, "malloc");
		rcv_timeout(s, 20);
		m = read_full(s, got, head + keep);
		CHECK(m == head + keep, "peer read %zu of %zu", m, head + keep);
		for (k = 0; k < m && k < head; k++)
			if (got[k] != pat(k, SEED_A))
				break;
		for (; k < m && got[k] == pat(k - head, SEED_C); k++)
			;
		CHECK(k == m, "received byte %zu is neither the head nor request 8", k);
		free(got);
	}
	n = ss_reap(dev, cqe, 2, 10000);
	CHECK(n == 2 && cqe[0].user_data == 1 && cqe[0].res == (long long)head &&
	      cqe[1].user_data == 8 && cqe[1].res == (long long)keep,
	      "%d completions: %llu %lld, %llu %lld", n,
	      (unsigned long long)cqe[0].user_data, (long long)cqe[0].res,
	      (unsigned long long)cqe[1].user_data, (long long)cqe[1].res);
	close(c);
	b = 0;
	rcv_timeout(s, 10);
	CHECK(read(s, &b, 1) == 0, "bytes after the kept requests");
	close(s);
	ss_counters(dev, &cnt);
	CHECK(cnt.cancelled == 3 && cnt.completed == 5 && cnt.failed == 3 &&
	      cnt.cqes_pending == 0 && cnt.bytes_sent == head + keep,
	      "counters: cancelled %llu completed %llu failed %llu cqes_pending %llu bytes_sent %llu",
	      (unsigned long long)cnt.cancelled, (unsigned long long)cnt.completed,
	      (unsigned long long)cnt.failed, (unsigned long long)cnt.cqes_pending,
	      (unsigned long long)cnt.bytes_sent);
	printf("ok   after the peer read: head and request 8 complete, %llu bytes sent\n",
	       (unsigned long long)cnt.bytes_sent);
	/* Pages nobody waits for come back at the latest once the fd is closed. */
	close(dev);
	CHECK(ss_drained(10), "pages in flight after the cancel case");
}

/* 5. Closing the device fd with a started request on a stalled peer. */
static void close_started(int file8m)
{
	struct stablesend_req r;
	int dev = ss_dev(), c, s;
	long got;

	stalled_pair(&c, &s);
	r = ss_req(file8m, c, 0, 8 << 20, 1);
	CHECK(ss_submit(dev, &r, 1) == 1, "submit 8 MiB");
	CHECK(wait_started(c), "request never started");
	timed_close(dev, "started request on a stalled peer");
	close(c);
	got = drain_prefix(s, SEED_A, 20);
	CHECK(got > 0 && got < 8 << 20,
	      "peer got %ld bytes (expected part of the request, then EOF)", got);
	printf("%s   peer got %ld bytes of the started request, then EOF\n",
	       got > 0 && got < 8 << 20 ? "ok" : "FAIL", got);
	close(s);
	CHECK(ss_drained(10), "pages in flight after closing mid-request");
}

int main(void)
{
	long long ctx0;
	int fa, fb, fc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm_setup();
	if (access(STABLESEND_DEVICE, F_OK))
		return SKIP;
	signal(SIGPIPE, SIG_IGN);
	CHECK(ss_drained(10), "pages in flight before the test");
	ctx0 = ss_contexts_baseline();
	fa = pat_file(8 << 20, SEED_A);
	fb = pat_file(1 << 20, SEED_B);
	fc = pat_file(1 << 20, SEED_C);

	stall_resume(fa, 8);
	peer_reset_async(fa);
	peer_reset_sync(fa);
	sender_closes(fa, fb);
	peer_closes(fa, fb, 1);
	peer_closes(fa, fb, 0);
	killed(fa, fb, ctx0);
	cancel(fa, fb, fc);
	close_started(fa);

	CHECK(ss_drained(10), "pages in flight at the end");
	contexts_settle(ctx0, "at the end");
	close(fa);
	close(fb);
	close(fc);
	return test_result();
}
