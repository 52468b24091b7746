// SPDX-License-Identifier: GPL-2.0
/*
 * No shared pool of threads that one user's sockets can exhaust.
 *
 * User A (nobody, a child process) opens 300 kTLS connections over loopback
 * (TCP + TLS ULP, TLS_TX as in sockets.c) whose peers do not read (tiny
 * SO_RCVBUF).  On each, a thread blocks in send() (the socket is full; it
 * holds kTLS's tx_lock while it waits for memory), then one stablesend
 * request is submitted for that socket from its own thread (64 KiB stack:
 * in the new execution model the submitting call itself may block in
 * tx_lock; that is A's own thread).
 *
 * User B (root, a separate process and device fd) sends 32 requests of
 * 64 KiB over 4 TCP loopback sockets with reading peers, once before A's
 * load (the baseline) and once with it: all 32 must complete within 10 s
 * either way.  Then A's peers read: every thread returns, every request of
 * A completes with its full length, requests_in_flight goes back to 0, all
 * fds are closed and the module's contexts are back to the baseline.
 *
 * test-timeout: 480
 */
#include "common.h"
#include <pthread.h>
#include <signal.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define NOBODY		65534
#define NCONN		300
#define BLOCK_LEN	(160 << 10)	/* each blocked send(): far more than fits */
#define A_REQ		(16 << 10)	/* A's stablesend request per socket */
#define B_NSOCK		4
#define B_NREQ		32
#define B_REQ		(64 << 10)
#define B_BOUND		10.0		/* seconds for all of B's requests */
#define B_WAIT		20		/* B gives up after this */
#define THREAD_STACK	(64 << 10)

/* --- user B: 32 requests over its own sockets ---------------------------- */

struct brx {
	int fd;
	size_t got;
};

static void *brx_fn(void *p)
{
	struct brx *rx = p;
	char *buf = malloc(64 << 10);

	REQUIRE(buf, "malloc");
	while (rx->got < (size_t)B_NREQ / B_NSOCK * B_REQ) {
		ssize_t r = read(rx->fd, buf, 64 << 10);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		rx->got += r;
	}
	free(buf);
	return NULL;
}

/* B, in its own process: the seconds all 32 took, or -1 (said why). */
static void user_b(int file, int out)
{
	struct stablesend_req reqs[B_NREQ];
	struct stablesend_cqe cqe[B_NREQ];
	struct brx rx[B_NSOCK];
	pthread_t th[B_NSOCK];
	int dev, snd[B_NSOCK], i, got = 0, bad = 0;
	double t0, el = -1, end;

	dev = ss_dev();
	for (i = 0; i < B_NSOCK; i++) {
		tcp_pair(AF_INET, &snd[i], &rx[i].fd);
		rx[i].got = 0;
		REQUIRE(pthread_create(&th[i], NULL, brx_fn, &rx[i]) == 0,
			"pthread_create");
	}
	for (i = 0; i < B_NREQ; i++)
		reqs[i] = ss_req(file, snd[i % B_NSOCK], 0, B_REQ, i);
	t0 = now_s();
	end = t0 + B_WAIT;
	i = ss_submit(dev, reqs, B_NREQ);
	if (i != B_NREQ) {
		fprintf(stderr, "B: SUBMIT returned %d: %s\n", i, strerror(errno));
	} else {
		while (got < B_NREQ && now_s() < end) {
			int n = ss_reap(dev, cqe + got, B_NREQ - got,
					(int)((end - now_s()) * 1000) + 1);

			if (!n)
				break;
			got += n;
		}
		if (got == B_NREQ)
			el = now_s() - t0;
		for (i = 0; i < got; i++)
			bad += cqe[i].res != B_REQ;
		if (got < B_NREQ)
			fprintf(stderr, "B: %d of %d requests completed in %d s; module: %lld requests in flight\n",
				got, B_NREQ, B_WAIT, ss_stat("requests_in_flight"));
		if (bad) {
			fprintf(stderr, "B: %d completions with res != %d\n", bad, B_REQ);
			el = -1;
		}
	}
	if (el >= 0) {
		for (i = 0; i < B_NSOCK; i++) {
			pthread_join(th[i], NULL);
			if (rx[i].got != (size_t)B_NREQ / B_NSOCK * B_REQ) {
				fprintf(stderr, "B: socket %d: the reader got %zu bytes\n",
					i, rx[i].got);
				el = -1;
			}
		}
	}
	if (write(out, &el, sizeof(el)) != sizeof(el))
		_exit(1);
	/* Closing cancels what did not go; the readers die with us. */
	close(dev);
	_exit(0);
}

static double run_b(int file, const char *what)
{
	double el = -1;
	int p[2], st;
	pid_t pid;

	REQUIRE(pipe2(p, O_CLOEXEC) == 0, "pipe");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		close(p[0]);
		alarm(B_WAIT + 30);
		user_b(file, p[1]);
	}
	close(p[1]);
	if (read(p[0], &el, sizeof(el)) != sizeof(el))
		el = -1;
	close(p[0]);
	waitpid(pid, &st, 0);
	if (el >= 0)
		printf("B %s: %d requests of %d KiB over %d sockets completed in %.3f s\n",
		       what, B_NREQ, B_REQ >> 10, B_NSOCK, el);
	else
		printf("B %s: %d requests of %d KiB over %d sockets did NOT all complete within %d s\n",
		       what, B_NREQ, B_REQ >> 10, B_NSOCK, B_WAIT);
	return el;
}

/* --- user A: 300 kTLS sockets, each with a thread blocked in send() ---- */

struct conn {
	int c, s;
	pthread_t snd_th, sub_th;
	volatile pid_t snd_tid, sub_tid;
	volatile int sending, send_done, submitting, sub_done;
	ssize_t send_ret;
	int send_err, sub_ret, sub_err;
	struct stablesend_req req;
};

static struct conn conns[NCONN];
static int dev_a;
static char block_buf[BLOCK_LEN];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int release_submitters;
static volatile int drain_stop;

static void *send_fn(void *p)
{
	struct conn *c = p;

	c->snd_tid = syscall(SYS_gettid);
	c->sending = 1;
	c->send_ret = send(c->c, block_buf, sizeof(block_buf), MSG_NOSIGNAL);
	c->send_err = errno;
	c->send_done = 1;
	return NULL;
}

static void *submit_fn(void *p)
{
	struct conn *c = p;

	c->sub_tid = syscall(SYS_gettid);
	c->submitting = 1;
	c->sub_ret = ss_submit(dev_a, &c->req, 1);
	c->sub_err = errno;
	c->sub_done = 1;
	/*
	 * Stay until every request of A completed: a submitting thread that
	 * exits takes its pending requests with it (issue 13).  The wait is
	 * interruptible, so work queued on this thread can run meanwhile.
	 */
	pthread_mutex_lock(&lock);
	while (!release_submitters)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	return NULL;
}

static void *drain_fn(void *p)
{
	static struct pollfd pfd[NCONN];
	static char buf[64 << 10];
	int i;

	(void)p;
	for (i = 0; i < NCONN; i++) {
		pfd[i].fd = conns[i].s;
		pfd[i].events = POLLIN;
	}
	while (!drain_stop) {
		if (poll(pfd, NCONN, 100) <= 0)
			continue;
		for (i = 0; i < NCONN; i++) {
			if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (read(pfd[i].fd, buf, sizeof(buf)) <= 0)
				pfd[i].fd = -1;
		}
	}
	return NULL;
}

static void spawn(pthread_t *th, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, THREAD_STACK);
	REQUIRE(pthread_create(th, &attr, fn, arg) == 0, "pthread_create (%d KiB stack)",
		THREAD_STACK >> 10);
	pthread_attr_destroy(&attr);
}

static void drop_root(void)
{
	REQUIRE(setgroups(0, NULL) == 0, "setgroups");
	REQUIRE(setgid(NOBODY) == 0, "setgid");
	REQUIRE(setuid(NOBODY) == 0, "setuid");
	REQUIRE(setuid(0) == -1, "setuid(0) worked again");
}

/* Wait until every thread of @which has started and is asleep or done. */
static int settle(int which, double timeout_s)
{
	double end = now_s() + timeout_s;
	int i = 0;

	while (i < NCONN && now_s() < end) {
		struct conn *c = &conns[i];
		volatile int *started = which ? &c->submitting : &c->sending;
		volatile int *done = which ? &c->sub_done : &c->send_done;
		pid_t tid = which ? c->sub_tid : c->snd_tid;

		char st = *started ? thread_state(tid) : 0;

		if (*done || st == 'S' || st == 'D')
			i++;
		else
			usleep(5000);
	}
	return i;
}

static void user_a(int file, int ready, int go)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	int l, i, v, n, got = 0, bad = 0, sub_blocked = 0;
	struct stablesend_cqe *cqe;
	pthread_t drain;
	double t0, end;
	char b;

	drop_root();
	printf("A: uid %d, %d kTLS connections\n", (int)getuid(), NCONN);
	memset(block_buf, 'x', sizeof(block_buf));
	dev_a = ss_dev();
	/* 300 requests, each in 64 KiB pool pages: above the default limit. */
	REQUIRE(ss_setup(dev_a, -1, 64 << 20) == 0, "SETUP 64 MiB");

	l = small_window_listener(4096, 64, &sin);
	t0 = now_s();
	for (i = 0; i < NCONN; i++) {
		struct conn *c = &conns[i];

		c->c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		REQUIRE(c->c >= 0, "socket %d", i);
		v = 16384;
		setsockopt(c->c, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
		REQUIRE(connect(c->c, (struct sockaddr *)&sin, len) == 0, "connect %d", i);
		c->s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		REQUIRE(c->s >= 0, "accept %d", i);
		REQUIRE(ktls_setup(c->c, TLS_TX) == 0, "kTLS TX on connection %d", i);
		c->req = ss_req(file, c->c, 0, A_REQ, i);
	}
	close(l);
	printf("A: %d connections in %.1f s\n", NCONN, now_s() - t0);

	for (i = 0; i < NCONN; i++)
		spawn(&conns[i].snd_th, send_fn, &conns[i]);
	n = settle(0, 60);
	REQUIRE(n == NCONN, "only %d of %d send() threads settled", n, NCONN);
	for (i = n = 0; i < NCONN; i++)
		n += conns[i].send_done;
	REQUIRE(n == 0, "%d of %d send() calls returned: the socket did not fill", n, NCONN);
	printf("A: %d threads blocked in send() (%.1f s)\n", NCONN, now_s() - t0);

	for (i = 0; i < NCONN; i++)
		spawn(&conns[i].sub_th, submit_fn, &conns[i]);
	n = settle(1, 60);
	REQUIRE(n == NCONN, "only %d of %d submitting threads settled", n, NCONN);
	usleep(1000000);
	for (i = 0; i < NCONN; i++) {
		if (!conns[i].sub_done)
			sub_blocked++;
		else if (conns[i].sub_ret != 1)
			REQUIRE(0, "A: SUBMIT on connection %d returned %d: %s", i,
				conns[i].sub_ret, strerror(conns[i].sub_err));
	}
	printf("A: %d requests submitted (%d submitting calls returned, %d blocked in their own thread); module: %lld requests in flight (%.1f s)\n",
	       NCONN, NCONN - sub_blocked, sub_blocked,
	       ss_stat("requests_in_flight"), now_s() - t0);

	REQUIRE(write(ready, "r", 1) == 1, "write");
	if (read(go, &b, 1) != 1)
		_exit(1);

	/* The peers read: everything must drain. */
	t0 = now_s();
	end = t0 + 90;
	spawn(&drain, drain_fn, NULL);
	for (i = 0; i < NCONN; i++) {
		while (!(conns[i].send_done && conns[i].sub_done) && now_s() < end)
			usleep(10000);
		if (!(conns[i].send_done && conns[i].sub_done))
			break;
	}
	CHECK(i == NCONN, "A: connection %d: send() %s, SUBMIT %s 90 s after the peers started reading",
	      i, conns[i < NCONN ? i : 0].send_done ? "returned" : "still blocked",
	      conns[i < NCONN ? i : 0].sub_done ? "returned" : "still blocked");
	if (i < NCONN)
		_exit(1);	/* blocked threads: exit kills them */
	for (i = 0; i < NCONN; i++) {
		pthread_join(conns[i].snd_th, NULL);
		bad += conns[i].send_ret != BLOCK_LEN;
		bad += conns[i].sub_ret != 1;
	}
	CHECK(!bad, "A: %d send() or SUBMIT calls returned short or failed", bad);
	printf("A: all send() and SUBMIT calls returned %.1f s after the peers started reading\n",
	       now_s() - t0);

	cqe = calloc(NCONN, sizeof(*cqe));
	REQUIRE(cqe, "calloc");
	while (got < NCONN && now_s() < end) {
		n = ss_reap(dev_a, cqe + got, NCONN - got, 1000);
		got += n;
	}
	for (i = bad = 0; i < got; i++)
		bad += cqe[i].res != A_REQ;
	CHECK(got == NCONN, "A: %d of %d completions 90 s after the peers started reading",
	      got, NCONN);
	CHECK(!bad, "A: %d completions with res != %d", bad, A_REQ);
	printf("A: %d completions %.1f s after the peers started reading\n", got,
	       now_s() - t0);

	pthread_mutex_lock(&lock);
	release_submitters = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	for (i = 0; i < NCONN; i++)
		pthread_join(conns[i].sub_th, NULL);
	CHECK(ss_drained(30), "A: still %lld requests, %lld bytes in flight",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	drain_stop = 1;
	pthread_join(drain, NULL);
	for (i = 0; i < NCONN; i++) {
		close(conns[i].c);
		close(conns[i].s);
	}
	close(dev_a);
	exit(test_result());
}

static void raise_limit(int res, rlim_t v)
{
	struct rlimit rl;

	REQUIRE(getrlimit(res, &rl) == 0, "getrlimit");
	if (rl.rlim_cur >= v && rl.rlim_max >= v)
		return;
	rl.rlim_cur = v;
	if (rl.rlim_max < v)
		rl.rlim_max = v;
	REQUIRE(setrlimit(res, &rl) == 0, "setrlimit %d to %lu", res, (unsigned long)v);
}

static void on_alarm(int sig)
{
	static const char msg[] = "exhaust: overall time limit reached\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

int main(void)
{
	int ready[2], go[2], st, file;
	long long ctx0 = ss_contexts_baseline();
	double base, loaded;
	struct pollfd p;
	pid_t a;
	char b;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getuid()) {
		printf("must start as root to drop user A to nobody\n");
		return SKIP;
	}
	signal(SIGALRM, on_alarm);
	alarm(420);
	/* 600 threads as nobody (RLIMIT_NPROC counts them), 600 sockets. */
	raise_limit(RLIMIT_NPROC, 4096);
	raise_limit(RLIMIT_NOFILE, 4096);
	file = temp_file(B_REQ, 'E');	/* A and B inherit the fd */

	base = run_b(file, "alone");
	CHECK(base >= 0 && base < B_BOUND, "B alone: took %.3f s", base);

	REQUIRE(pipe2(ready, O_CLOEXEC) == 0 && pipe2(go, O_CLOEXEC) == 0, "pipe");
	a = fork();
	REQUIRE(a >= 0, "fork");
	if (!a) {
		signal(SIGALRM, SIG_DFL);
		close(ready[0]);
		close(go[1]);
		user_a(file, ready[1], go[0]);
	}
	close(ready[1]);
	close(go[0]);
	p.fd = ready[0];
	p.events = POLLIN;
	if (poll(&p, 1, 240000) != 1 || read(ready[0], &b, 1) != 1) {
		CHECK(0, "A did not get its %d blocked connections ready", NCONN);
		kill(a, SIGKILL);
		waitpid(a, &st, 0);
		return test_result();
	}

	loaded = run_b(file, "with A's load");
	if (base >= 0 && loaded >= 0)
		printf("B: %.3f s alone, %.3f s with %d of A's kTLS sockets blocked\n",
		       base, loaded, NCONN);
	CHECK(loaded >= 0 && loaded < B_BOUND,
	      "B with A's %d blocked kTLS sockets: %s (alone: %.3f s)", NCONN,
	      loaded < 0 ? "requests did not complete" : "too slow", base);

	REQUIRE(write(go[1], "g", 1) == 1, "write");
	close(go[1]);
	waitpid(a, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "A: status %#x", st);
	CHECK(ss_drained(30), "still %lld requests, %lld bytes in flight",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	CHECK(ss_stat_wait("contexts", ctx0, 30) == ctx0, "contexts %lld, expected %lld",
	      ss_stat("contexts"), ctx0);
	close(file);
	return test_result();
}
