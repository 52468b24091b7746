// SPDX-License-Identifier: GPL-2.0
/*
 * stablesend_sendfile() in an event loop, as nginx uses sendfile(2) (issue
 * 13): one server thread serves its clients over non-blocking TCP sockets
 * with poll() and stablesend_sendfile() (each writable socket gets calls
 * until EAGAIN or a short count).  Stalled clients ask for a 16 MiB file
 * and never read; client B, 300 ms later, asks for a 1 MiB file and must
 * get all of it, intact, soon: within 1 s on a real machine; the test
 * fails only when B is not fully served 5 s after its request (TCG).  A
 * stalled client must not freeze the loop:
 * - one stalled client (the default 16 MiB limit): B is served through
 *   the module;
 * - eight stalled clients whose sockets (256 KiB send buffers) hold all
 *   of the open's memory (default_limit lowered to 1 MiB, as fdinfo
 *   shows): B's calls that find no memory free are sent as copies, not
 *   waited for (a blocking wait there froze the loop until a stalled
 *   client read); so is a stablesend_sendfile_hdtr() call then; but a
 *   call on a socket where another process's request is parked (that
 *   process stopped, the socket writable again) fails with EAGAIN: a
 *   copy would overtake the rest of that request.
 * And a short count on a non-blocking socket means a full one, as with
 * sendfile(2) (an edge-triggered poller waits for its EPOLLOUT): with
 * 128 KiB of a 256 KiB open held, a call for 512 KiB returns all of it.
 * When the loop is frozen, the test says where the server thread was,
 * then closes the stalled clients to let it go.  Once the server process
 * is gone the module holds none of its pages.
 */
#include "common.h"
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <stablesend.h>

#define A_LEN		(16 << 20)
#define B_LEN		(1 << 20)
#define B_LIMIT		5.0	/* s */
#define MAX_STALLED	8
#define PARAM		"/sys/module/stablesend/parameters/default_limit"
#define LOW_LIMIT	(1 << 20)

static long long was_limit = -1;	/* default_limit at the start */
static pid_t main_pid;

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 3 + (i >> 10) + 7);
}

struct client {
	int fd;			/* the server's end, non-blocking */
	size_t len;		/* what it asks for */
	off_t off;		/* sent so far */
	int asked, done;
	unsigned int paths;	/* 1 << stablesend_sendfile_path() of its calls */
};

struct server {
	struct client cl[MAX_STALLED + 1];	/* the stalled ones, then B */
	int ncl;
	int file;
	int stop;		/* these three: __atomic */
	int in_call;		/* inside stablesend_sendfile() */
	long long call_since;	/* ms */
	int calls, eagain, errors;
};

/* One call per POLLOUT: a short count means the socket is full, as for nginx. */
static void serve(struct server *sv, struct client *c)
{
	ssize_t n;

	__atomic_store_n(&sv->call_since, (long long)(now_s() * 1000), __ATOMIC_RELAXED);
	__atomic_store_n(&sv->in_call, 1, __ATOMIC_RELEASE);
	n = stablesend_sendfile(c->fd, sv->file, &c->off, c->len - c->off);
	__atomic_store_n(&sv->in_call, 0, __ATOMIC_RELEASE);
	sv->calls++;
	if (n < 0) {
		sv->eagain += errno == EAGAIN;
		if (errno != EAGAIN && errno != EINTR) {
			sv->errors++;
			c->done = 1;	/* the client went away */
		}
		return;
	}
	if (n > 0)
		c->paths |= 1u << stablesend_sendfile_path();
	if ((size_t)c->off == c->len) {
		c->done = 1;
		shutdown(c->fd, SHUT_WR);
	}
}

static int all_done(struct server *sv)
{
	for (int i = 0; i < sv->ncl; i++)
		if (!sv->cl[i].done)
			return 0;
	return 1;
}

static void *server(void *arg)
{
	struct server *sv = arg;

	while (!__atomic_load_n(&sv->stop, __ATOMIC_ACQUIRE) && !all_done(sv)) {
		struct pollfd p[MAX_STALLED + 1];
		int i;

		for (i = 0; i < sv->ncl; i++) {
			p[i].fd = sv->cl[i].done ? -1 : sv->cl[i].fd;
			p[i].events = sv->cl[i].asked ? POLLOUT : POLLIN;
			p[i].revents = 0;
		}
		if (poll(p, sv->ncl, 100) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (i = 0; i < sv->ncl; i++) {
			struct client *c = &sv->cl[i];
			char b;

			if (!c->asked && (p[i].revents & POLLIN)) {
				if (recv(c->fd, &b, 1, 0) == 1)
					c->asked = 1;
				continue;
			}
			if (c->asked && (p[i].revents & (POLLOUT | POLLERR | POLLHUP)))
				serve(sv, c);
		}
	}
	return NULL;
}

/* The library's device fd in this process, or -1. */
static int library_dev(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int fd = -1;

	while (d && (e = readdir(d))) {
		char path[sizeof("/proc/self/fd/") + sizeof(e->d_name)];
		char target[64];
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = '\0';
			if (!strcmp(target, STABLESEND_DEVICE)) {
				fd = atoi(e->d_name);
				break;
			}
		}
	}
	if (d)
		closedir(d);
	return fd;
}

/* A send buffer (256 KiB) larger than what is free of the open's memory. */
#define BIG_SNDBUF	(128 << 10)

#define P_LEN	(4 << 20)

/*
 * With no memory free, a call on a socket where another process's request
 * waits (that process stopped, the socket writable again) must not send a
 * copy ahead of the rest of that request: EAGAIN.  Once the process goes
 * on, the peer gets its request whole, and nothing else.
 */
static void order_case(int file)
{
	struct stablesend_cqe cqe;
	unsigned char *buf = malloc(P_LEN + 1);
	int c, s, st, fl, ok = 0, dev;
	off_t off = 0;
	ssize_t n;
	size_t got;
	pid_t p;

	REQUIRE(buf, "malloc");
	tcp_pair(AF_INET, &c, &s);
	/* Buffers far below the request: it stays parked. */
	sndbuf_force(s, BIG_SNDBUF);
	REQUIRE(!setsockopt(c, SOL_SOCKET, SO_RCVBUF, &(int){ 64 << 10 },
			    sizeof(int)), "SO_RCVBUF");
	p = fork();
	REQUIRE(p >= 0, "fork");
	if (!p) {
		int dev = ss_dev();
		struct stablesend_req r = ss_req(file, s, 0, P_LEN, 7);

		if (ss_setup(dev, -1, 8 << 20) || ss_submit(dev, &r, 1) != 1)
			_exit(2);
		raise(SIGSTOP);
		_exit(ss_reap(dev, &cqe, 1, 20000) == 1 && cqe.res == P_LEN ? 0 : 3);
	}
	/* Stopped, its request parked on the full socket: make room. */
	for (int i = 0; i < 500 && proc_state(p) != 'T'; i++)
		usleep(10000);
	CHECK(proc_state(p) == 'T', "the other process did not stop");
	/* Read until the socket is writable (its queue drained to TCP). */
	got = 0;
	for (int i = 0; i < 500 && !ok; i++) {
		ssize_t r = recv(c, buf + got, P_LEN - got, MSG_DONTWAIT);

		if (r > 0)
			got += r;
		ok = poll_now(s, POLLOUT) == POLLOUT;
		if (!ok)
			usleep(10000);
	}
	fl = fcntl(s, F_GETFL);
	REQUIRE(fcntl(s, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
	/* Else the call would fail for that alone, and show nothing. */
	CHECK(ok && got < P_LEN,
	      "the socket is %swritable, %zu of %d bytes of the request arrived",
	      ok ? "" : "not ", got, P_LEN);
	/* And without memory free (else queued behind it: EAGAIN anyway). */
	dev = library_dev();
	CHECK(dev >= 0 && fdinfo_num(getpid(), dev, "stablesend-mem-in-use") >
	      LOW_LIMIT - (64 << 10), "the library's open has memory free: %lld of %d used",
	      dev >= 0 ? fdinfo_num(getpid(), dev, "stablesend-mem-in-use") : -1,
	      LOW_LIMIT);
	n = stablesend_sendfile(s, file, &off, 64 << 10);
	printf("another process's request parked, the socket %swritable: stablesend_sendfile() gives %zd (%s)\n",
	       ok ? "" : "not ", n, n < 0 ? strerror(errno) : "bytes");
	CHECK(n == -1 && errno == EAGAIN && off == 0,
	      "a call behind another process's parked request: %zd (%s), offset %lld",
	      n, n < 0 ? strerror(errno) : "bytes sent ahead of it", (long long)off);
	kill(p, SIGCONT);
	got += read_full(c, buf + got, P_LEN - got);
	REQUIRE(waitpid(p, &st, 0) == p, "waitpid");
	CHECK(WIFEXITED(st) && !WEXITSTATUS(st), "the other process: status %#x", st);
	shutdown(s, SHUT_WR);
	n = read(c, buf + got, 1);
	CHECK(got == P_LEN && pattern_mismatch(buf, got, 0, pat) == got && n == 0,
	      "the peer got %zu bytes (%s), then %zd more: not the parked request alone",
	      got, pattern_mismatch(buf, got, 0, pat) == got ? "the file's" : "not the file's", n);
	close(c);
	close(s);
	free(buf);
}

/*
 * With no memory free, stablesend_sendfile_hdtr() on a non-blocking
 * socket sends a copy too, at once: header, then file bytes.
 */
static void hdtr_case(int file)
{
	unsigned char got[1 + (64 << 10) + 1];
	off_t off = 0;
	int c, s, fl;
	ssize_t n;
	size_t r;

	tcp_pair(AF_INET, &c, &s);
	fl = fcntl(s, F_GETFL);
	REQUIRE(fcntl(s, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
	sndbuf_force(s, BIG_SNDBUF);
	alarm(10);	/* a call that waits for memory ends the process */
	n = stablesend_sendfile_hdtr(s, file, &off, 64 << 10, "H", 1, "T", 1, 0);
	alarm(0);
	printf("no memory free: stablesend_sendfile_hdtr() sent %zd bytes by %s\n",
	       n, stablesend_sendfile_path() == STABLESEND_PATH_COPY ? "copy" : "the module");
	CHECK(n > 1 && stablesend_sendfile_path() == STABLESEND_PATH_COPY &&
	      off == n - 1 - (n == 1 + (64 << 10) + 1),
	      "stablesend_sendfile_hdtr() with no memory free: %zd (%s), offset %lld",
	      n, n < 0 ? strerror(errno) : "", (long long)off);
	shutdown(s, SHUT_WR);
	r = n > 0 ? read_full(c, got, n) : 0;
	CHECK(r == (size_t)(n > 0 ? n : 0) && got[0] == 'H' &&
	      pattern_mismatch(got + 1, off, 0, pat) == (size_t)off,
	      "hdtr copy: %zu of %zd bytes, not header and file", r, n);
	close(c);
	close(s);
}

#define PARTIAL_LIMIT	(256 << 10)

/*
 * A short count on a non-blocking socket means a full socket, as with
 * sendfile(2), so that an edge-triggered poller (nginx) gets its EPOLLOUT:
 * with the library's open at 256 KiB (a SEND at most 64 KiB, a quarter),
 * 128 KiB held by a peer that does not read, a call for 512 KiB on a socket
 * with a 2 MiB send buffer returns all of it (64 KiB per SEND, then a copy
 * once no memory is free), or a count with the socket full.  The same for
 * stablesend_sendfile_hdtr() with a header and a trailer byte.
 */
static int run_partial(void)
{
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLET };
	int file = file_with_pattern(A_LEN, pat), a, pa, c, s, ep, dev, fl;
	const size_t total = 1 + (512 << 10) + 1;
	unsigned char *buf = malloc(total);
	off_t offa = 0, offc = 0;
	long long held = -1;
	ssize_t n;
	size_t got, fgot;	/* fgot: the file bytes hdtr's peer got */

	REQUIRE(buf, "malloc");
	tcp_pair(AF_INET, &a, &pa);	/* pa never reads */
	tcp_pair(AF_INET, &c, &s);
	sndbuf_force(c, 1 << 20);
	sndbuf_force(a, BIG_SNDBUF);
	fl = fcntl(a, F_GETFL);
	REQUIRE(!fcntl(a, F_SETFL, fl | O_NONBLOCK) &&
		!fcntl(c, F_SETFL, fl | O_NONBLOCK), "O_NONBLOCK");
	for (int i = 0; i < 8 && offa < (128 << 10); i++)
		stablesend_sendfile(a, file, &offa, (128 << 10) - offa);
	dev = library_dev();
	REQUIRE(offa == 128 << 10 && dev >= 0 &&
		fdinfo_num(getpid(), dev, "stablesend-mem-in-use") == 128 << 10 &&
		fdinfo_num(getpid(), dev, "stablesend-mem-limit") == PARTIAL_LIMIT,
		"128 KiB held of the library's %d (sent %lld)", PARTIAL_LIMIT,
		(long long)offa);
	ep = epoll_create1(EPOLL_CLOEXEC);
	REQUIRE(ep >= 0 && !epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) &&
		epoll_wait(ep, &ev, 1, 0) == 1, "epoll");
	n = stablesend_sendfile(c, file, &offc, 512 << 10);
	printf("a call for 512 KiB with 128 KiB free: %zd (%s), the socket %swritable after it\n",
	       n, stablesend_sendfile_path() == STABLESEND_PATH_COPY ? "ending in a copy" : "the module's",
	       poll_now(c, POLLOUT) & POLLOUT ? "" : "not ");
	CHECK(n == 512 << 10 || (n > 0 && !(poll_now(c, POLLOUT) & POLLOUT)),
	      "a call for 512 KiB returned %zd with the socket still writable: an edge-triggered poller would wait for good",
	      n);
	shutdown(c, SHUT_WR);
	got = n > 0 ? read_full(s, buf, n) : 0;
	CHECK(got == (size_t)(n > 0 ? n : 0) && pattern_mismatch(buf, got, 0, pat) == got,
	      "the peer got %zu of %zd bytes, or not the file's", got, n);
	close(c);
	close(s);

	/* Once the peer's reading gave c's memory back: the same with hdtr. */
	for (int i = 0; i < 500 && held != 128 << 10; i++) {
		held = fdinfo_num(getpid(), dev, "stablesend-mem-in-use");
		usleep(10000);
	}
	REQUIRE(held == 128 << 10, "memory in use %lld, not back to 128 KiB", held);
	tcp_pair(AF_INET, &c, &s);
	sndbuf_force(c, 1 << 20);
	REQUIRE(!fcntl(c, F_SETFL, fl | O_NONBLOCK), "O_NONBLOCK");
	offc = 0;
	n = stablesend_sendfile_hdtr(c, file, &offc, 512 << 10, "H", 1, "T", 1, 0);
	printf("stablesend_sendfile_hdtr() for 1 + 512 KiB + 1 with 128 KiB free: %zd (%s), the socket %swritable after it\n",
	       n, stablesend_sendfile_path() == STABLESEND_PATH_COPY ? "ending in a copy" : "the module's",
	       poll_now(c, POLLOUT) & POLLOUT ? "" : "not ");
	CHECK(n == (ssize_t)total || (n > 0 && !(poll_now(c, POLLOUT) & POLLOUT)),
	      "stablesend_sendfile_hdtr() returned %zd of %zu with the socket still writable",
	      n, total);
	shutdown(c, SHUT_WR);
	got = n > 0 ? read_full(s, buf, n) : 0;
	fgot = got < 1 ? 0 : got - 1 < 512 << 10 ? got - 1 : 512 << 10;
	CHECK(got == (size_t)(n > 0 ? n : 0) && got > 1 && buf[0] == 'H' &&
	      pattern_mismatch(buf + 1, fgot, 0, pat) == fgot &&
	      (got < total || buf[total - 1] == 'T') && offc == (off_t)fgot,
	      "hdtr: the peer got %zu of %zd bytes, or not header, file and trailer (offset %lld)",
	      got, n, (long long)offc);
	close(ep);
	close(a);
	close(pa);
	close(c);
	close(s);
	close(file);
	free(buf);
	return test_result();
}

/* @nstalled clients stall, then B asks; B must be served. */
static int run_server(int nstalled, int low_limit)
{
	struct server sv = { .ncl = nstalled + 1 };
	struct client *b = &sv.cl[nstalled];
	int ca[MAX_STALLED], cb, file, fl, i, dev;
	unsigned char *buf = malloc(B_LEN + 1);
	double t0, took = -1;
	long long sent = 0;
	size_t got = 0, j;
	pthread_t t;

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(buf, "malloc");
	file = file_with_pattern(A_LEN, pat);
	sv.file = file;
	for (i = 0; i < sv.ncl; i++) {
		tcp_pair(AF_INET, i < nstalled ? &ca[i] : &cb, &sv.cl[i].fd);
		sv.cl[i].len = i < nstalled ? A_LEN : B_LEN;
		fl = fcntl(sv.cl[i].fd, F_GETFL);
		REQUIRE(fcntl(sv.cl[i].fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
		/* B's requests too large for what the stalled leave free. */
		if (low_limit)
			sndbuf_force(sv.cl[i].fd, BIG_SNDBUF);
	}
	pthread_create(&t, NULL, server, &sv);

	/* The stalled clients ask and never read. */
	for (i = 0; i < nstalled; i++)
		REQUIRE(write(ca[i], "A", 1) == 1, "request A%d", i);
	usleep(low_limit ? 1000000 : 300000);
	dev = library_dev();
	if (low_limit) {
		long long used = dev < 0 ? -1 :
			fdinfo_num(getpid(), dev, "stablesend-mem-in-use");
		long long limit = dev < 0 ? -1 :
			fdinfo_num(getpid(), dev, "stablesend-mem-limit");

		printf("%d stalled clients hold %lld of the open's %lld bytes\n",
		       nstalled, used, limit);
		/* Else B would find memory, and the case tests nothing. */
		CHECK(limit == LOW_LIMIT && used > limit - (64 << 10),
		      "the stalled clients hold %lld of %lld bytes: not the open's memory",
		      used, limit);
	}

	/* B asks and reads everything. */
	REQUIRE(write(cb, "B", 1) == 1, "request B");
	t0 = now_s();
	while (now_s() - t0 < B_LIMIT) {
		struct pollfd p = { .fd = cb, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 50) != 1)
			continue;
		n = recv(cb, buf + got, B_LEN + 1 - got, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			break;		/* EOF: served */
		got += n;
	}
	if (got == B_LEN)
		took = now_s() - t0;
	for (i = 0; i < nstalled; i++)
		sent += sv.cl[i].off;
	CHECK(got == B_LEN && took >= 0,
	      "client B got %zu of %d bytes in %.1f s while %d clients stall (%lld bytes sent to them); server thread %s",
	      got, B_LEN, now_s() - t0, nstalled, sent,
	      __atomic_load_n(&sv.in_call, __ATOMIC_ACQUIRE) ? "inside stablesend_sendfile()" : "not in a call");
	if (__atomic_load_n(&sv.in_call, __ATOMIC_ACQUIRE))
		fprintf(stderr, "the server thread has been inside one stablesend_sendfile() for %.1f s\n",
			now_s() - __atomic_load_n(&sv.call_since, __ATOMIC_RELAXED) / 1000.0);
	j = pattern_mismatch(buf, got, 0, pat);
	CHECK(j == got, "client B: byte %zu differs from the file", j);
	printf("%d stalled: client B: %zu bytes %s%.3f s after its request, paths:%s%s; stalled clients: %lld bytes sent; server: %d calls, %d EAGAIN\n",
	       nstalled, got, took >= 0 ? "in " : "not finished after ",
	       took >= 0 ? took : now_s() - t0,
	       b->paths & (1u << STABLESEND_PATH_MODULE) ? " module" : "",
	       b->paths & (1u << STABLESEND_PATH_COPY) ? " copy" : "",
	       sent, sv.calls, sv.eagain);
	if (low_limit)
		/* Some of B went as a copy: there was no memory for it. */
		CHECK(b->paths & (1u << STABLESEND_PATH_COPY),
		      "client B's calls took paths %#x, none the copy",
		      b->paths);
	else
		CHECK(b->paths & (1u << STABLESEND_PATH_MODULE),
		      "client B's calls took paths %#x, none the module",
		      b->paths);

	if (low_limit) {
		hdtr_case(file);
		order_case(file);
	}

	/* Let a stuck server go: the stalled clients disappear (reset). */
	__atomic_store_n(&sv.stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < nstalled; i++)
		close(ca[i]);
	pthread_join(t, NULL);
	close(cb);
	for (i = 0; i < sv.ncl; i++)
		close(sv.cl[i].fd);
	close(file);
	free(buf);
	return test_result();
}

static long long param(void)
{
	char val[64];

	return read_str(PARAM, val, sizeof(val)) ? -1 : strtoll(val, NULL, 10);
}

/* However the test ends, default_limit goes back to what it was. */
static void restore(void)
{
	char val[32];

	if (was_limit > 0 && getpid() == main_pid && param() != was_limit) {
		snprintf(val, sizeof(val), "%lld", was_limit);
		write_str(PARAM, val);
	}
}

/*
 * The server in a process of its own, whose library opens the device at
 * its first call (so under default_limit as it is then).  The library
 * keeps its device fd open for the process: the module owes its pages
 * back once the process (its last fd) is gone.
 */
static void one_case(int nstalled, int low_limit)
{
	int st;
	pid_t pid = fork();

	REQUIRE(pid >= 0, "fork");
	if (!pid)
		_exit(nstalled ? run_server(nstalled, low_limit) : run_partial());
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the server process, %d stalled: status 0x%x", nstalled, st);
	CHECK(ss_drained(10), "requests_in_flight %lld bytes_in_flight %lld",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
}

int main(void)
{
	char val[32];

	main_pid = getpid();
	was_limit = param();
	REQUIRE(was_limit > 0, "default_limit missing");
	atexit(restore);
	one_case(1, 0);
	snprintf(val, sizeof(val), "%d", LOW_LIMIT);
	REQUIRE(!write_str(PARAM, val), "default_limit %d", LOW_LIMIT);
	one_case(MAX_STALLED, 1);
	snprintf(val, sizeof(val), "%d", PARTIAL_LIMIT);
	REQUIRE(!write_str(PARAM, val), "default_limit %d", PARTIAL_LIMIT);
	one_case(0, 0);
	restore();
	return test_result();
}
