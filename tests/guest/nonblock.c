// SPDX-License-Identifier: GPL-2.0
/*
 * SEND on a non-blocking socket is sendfile(2) on it (issue 13).  A TCP
 * socket with O_NONBLOCK whose peer does not read:
 * (a) STABLESEND_IOC_SEND of 4 MiB returns at once (< 1 s) with the bytes
 *     the socket took (a count below the request), and once the socket is
 *     full -1 EAGAIN; then the peer reads 64 KiB and stops, which leaves
 *     the socket writable with less room than a send buffer: the next call
 *     takes what fits (a partial count) at once, later ones EAGAIN again;
 *     when the peer then drains, it receives exactly the bytes the calls
 *     reported, in order, with the file's content, and not one byte more;
 *     every call asks for RELEASED: each that returned bytes gets exactly
 *     one such record, each EAGAIN none (a failed SEND is as if never made);
 * (b) stablesend_sendfile() keeps sendfile(2)'s contract there (the same
 *     two rounds of calls): partial counts or EAGAIN, each call at once,
 *     *offset advanced by exactly the bytes sent (not at all on EAGAIN),
 *     the peer gets exactly those; and a loop of poll(POLLOUT) +
 *     stablesend_sendfile() over an 8 MiB file to a slow reader delivers
 *     all of it, intact.  (b) runs twice, each in a fresh child: through
 *     the module (stablesend_sendfile_path() must say so) and through the
 *     library's copy fallback, forced by hiding /dev/stablesend in a
 *     private mount namespace (a tmpfs over /dev).
 * Calls that block are given 1 s, then the peer drains to let them return.
 */
#include "common.h"
#include <pthread.h>
#include <stablesend.h>
#include <sys/mount.h>
#include <sys/wait.h>

#define REQ_LEN		(4 << 20)
#define FILE_LEN	(8 << 20)
#define CALL_LIMIT	1.0	/* s */
#define MAX_CALLS	64

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 11 + (i >> 12) + 3);
}

/* What the peer received, in order. */
static unsigned char *rx;
static size_t rx_len;

/* Read what is there now, or wait up to @ms for something; bytes read. */
static size_t rx_some(int s, int ms)
{
	struct pollfd p = { .fd = s, .events = POLLIN };
	size_t before = rx_len;
	ssize_t n;

	if (poll(&p, 1, ms) != 1)
		return 0;
	while (rx_len < FILE_LEN + 1) {
		n = recv(s, rx + rx_len, FILE_LEN + 1 - rx_len, MSG_DONTWAIT);
		if (n <= 0)
			break;
		rx_len += n;
	}
	return rx_len - before;
}

/* Drain the peer: shut the sender down for writing first, then read to EOF. */
static void rx_all(int c, int s)
{
	shutdown(c, SHUT_WR);
	for (;;) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 10000) != 1) {
			fprintf(stderr, "no EOF after 10 s, %zu bytes\n", rx_len);
			return;
		}
		n = recv(s, rx + rx_len, FILE_LEN + 1 - rx_len, 0);
		if (n <= 0)
			return;
		rx_len += n;
	}
}

static void check_rx(const char *what, size_t sent)
{
	size_t i;

	CHECK(rx_len == sent, "%s: the peer received %zu bytes, the calls reported %zu",
	      what, rx_len, sent);
	i = pattern_mismatch(rx, rx_len, 0, pat);
	CHECK(i == rx_len, "%s: received byte %zu differs from the file", what, i);
}

/* One call, in its own thread so that a call that blocks can be undone. */
struct call {
	int lib;		/* stablesend_sendfile() rather than the ioctl */
	int dev, file, sock;
	off_t off;		/* in/out for the library */
	size_t len;
	long ret;
	int err;
	int path;		/* stablesend_sendfile_path() after the call */
	unsigned int calls;	/* ioctl: user_data of the next one */
	signed char got[2 * MAX_CALLS + 2];	/* ioctl: 1 bytes, -1 failed */
	int done;		/* __atomic */
};

static void *do_call(void *arg)
{
	struct call *k = arg;

	if (k->lib) {
		k->ret = stablesend_sendfile(k->sock, k->file, &k->off, k->len);
		k->err = errno;
		if (k->ret > 0)	/* per thread: this one's only call */
			k->path = stablesend_sendfile_path();
		errno = k->err;
	} else {
		struct stablesend_req r = ss_req(k->file, k->sock, k->off, k->len, k->calls);

		r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
		k->ret = ss_send(k->dev, &r);
		k->got[k->calls++] = k->ret > 0 ? 1 : -1;
	}
	k->err = errno;
	__atomic_store_n(&k->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Run @k; if it has not returned within CALL_LIMIT, say so, then drain the
 * peer @s until it does.  Returns the seconds it took (before the drain).
 */
static double timed_call(struct call *k, int s, const char *what)
{
	double t0 = now_s(), took;
	pthread_t t;

	k->done = 0;
	pthread_create(&t, NULL, do_call, k);
	while (!__atomic_load_n(&k->done, __ATOMIC_ACQUIRE) &&
	       now_s() - t0 < CALL_LIMIT)
		usleep(2000);
	took = now_s() - t0;
	if (!__atomic_load_n(&k->done, __ATOMIC_ACQUIRE)) {
		CHECK(0, "%s of %zu bytes on a non-blocking socket whose peer does not read: still blocked after %.1f s (peer had %zu bytes)",
		      what, k->len, took, rx_len);
		while (!__atomic_load_n(&k->done, __ATOMIC_ACQUIRE))
			rx_some(s, 10);
		fprintf(stderr, "%s returned %ld (errno %d) once the peer read %zu bytes\n",
			what, k->ret, k->err, rx_len);
	}
	pthread_join(t, NULL);
	return took;
}

static void nonblocking_pair(int *c, int *s)
{
	int v = 64 << 10;

	tcp_pair(AF_INET, c, s);
	REQUIRE(setsockopt(*c, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) == 0, "SO_SNDBUF");
	REQUIRE(fcntl(*c, F_SETFL, fcntl(*c, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
}

/* The peer reads exactly @n bytes (10 s at most). */
static void rx_exactly(int s, size_t n)
{
	size_t end = rx_len + n;
	double t0 = now_s();

	while (rx_len < end && now_s() - t0 < 10) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 100) != 1)
			continue;
		r = recv(s, rx + rx_len, end - rx_len, MSG_DONTWAIT);
		if (r > 0)
			rx_len += r;
	}
}

/*
 * Call SEND (or stablesend_sendfile()) of REQ_LEN bytes again and again on
 * a socket whose peer does not read, until EAGAIN; 50 ms apart, so that
 * acknowledgements land in between.  Then the peer reads 64 KiB, which
 * makes the socket writable with room for less than a send buffer, and
 * stops again: the next call must take what fits (a partial count), not
 * wait for more; then calls again until EAGAIN.  Returns the bytes
 * reported sent.
 */
static size_t fill(struct call *k, int s, const char *what)
{
	int i, round, partial = 0, eagain = 0;
	size_t sent = 0;

	k->off = 0;
	for (round = 0; round < 2; round++) {
		if (round) {
			struct pollfd p = { .fd = k->sock, .events = POLLOUT };

			rx_exactly(s, 64 << 10);
			CHECK(poll(&p, 1, 2000) == 1,
			      "%s: not writable after the peer read 64 KiB", what);
		}
		for (i = 0; i < MAX_CALLS; i++) {
			off_t before = k->off;
			double took;

			k->len = REQ_LEN;
			took = timed_call(k, s, what);
			if (took >= CALL_LIMIT) {
				if (k->ret > 0)
					sent += k->ret;
				return sent;	/* the peer drained: no point going on */
			}
			if (k->ret < 0) {
				CHECK(k->err == EAGAIN, "%s: -1 errno %d, want EAGAIN",
				      what, k->err);
				CHECK(i || !round,
				      "%s: EAGAIN although poll() said writable", what);
				if (k->lib)
					CHECK(k->off == before,
					      "%s: EAGAIN moved *offset from %lld to %lld",
					      what, (long long)before, (long long)k->off);
				eagain++;
				printf("%s call %d.%d: EAGAIN in %.3f s\n", what, round + 1,
				       i + 1, took);
				break;
			}
			CHECK(k->ret > 0 && (size_t)k->ret < REQ_LEN,
			      "%s call %d.%d: %ld of %d bytes with the peer not reading",
			      what, round + 1, i + 1, k->ret, REQ_LEN);
			if (k->lib)
				CHECK(k->off == before + k->ret,
				      "%s: returned %ld, *offset moved from %lld to %lld",
				      what, k->ret, (long long)before, (long long)k->off);
			else
				k->off += k->ret;
			partial += k->ret > 0 && (size_t)k->ret < REQ_LEN;
			sent += k->ret;
			printf("%s call %d.%d: %ld bytes in %.3f s\n", what, round + 1,
			       i + 1, k->ret, took);
			usleep(50000);
		}
	}
	CHECK(partial >= 2, "%s: %d partial counts", what, partial);
	CHECK(eagain == 2, "%s: EAGAIN %d times in 2 rounds of calls to a peer that does not read (%zu bytes)",
	      what, eagain, sent);
	return sent;
}

/* Each SEND that returned bytes gets one RELEASED record; a failed one none. */
static void released_check(struct call *k)
{
	struct stablesend_cqe c[2 * MAX_CALLS + 2];
	int want = 0, n, i, bad = 0;
	unsigned int u;

	CHECK(k->calls <= sizeof(k->got), "%u calls", k->calls);
	for (u = 0; u < k->calls; u++)
		want += k->got[u] > 0;
	n = ss_reap(k->dev, c, want, 5000);
	/* Anything more would be here by now. */
	n += ss_reap(k->dev, c + n, (int)(sizeof(c) / sizeof(c[0])) - n, 300);
	for (i = 0; i < n; i++) {
		u = (unsigned int)c[i].user_data;
		if (!(c[i].flags & STABLESEND_CQE_RELEASED) || c[i].res ||
		    u >= k->calls || k->got[u] != 1) {
			fprintf(stderr, "record %#llx res %lld flags %#x: call %s\n",
				(unsigned long long)c[i].user_data, (long long)c[i].res,
				c[i].flags, u < k->calls && k->got[u] < 0 ? "failed" :
				u < k->calls && k->got[u] == 2 ? "had one already" : "?");
			bad++;
			continue;
		}
		k->got[u] = 2;
	}
	CHECK(!bad && n == want,
	      "SEND: %d calls returned bytes, %u failed; %d RELEASED records, %d wrong",
	      want, k->calls - want, n, bad);
	printf("SEND: %d RELEASED records for %d calls that sent, none for %u that failed\n",
	       n - bad, want, k->calls - want);
}

/* (a): the ioctl. */
static void ioctl_case(int file)
{
	struct call k = { .file = file };
	size_t sent;
	int c, s;

	k.dev = ss_dev();
	REQUIRE(ss_setup(k.dev, -1, 32 << 20) == 0, "SETUP");
	nonblocking_pair(&c, &s);
	k.sock = c;
	rx_len = 0;
	sent = fill(&k, s, "SEND");
	usleep(300000);		/* anything sent later would show now */
	rx_all(c, s);
	check_rx("SEND", sent);
	printf("SEND: %zu bytes reported, the peer received %zu\n", sent, rx_len);
	close(c);
	close(s);
	released_check(&k);
	close(k.dev);
}

struct reader {
	int s;
	size_t got;
};

/* A slow reader: 16 KiB at a time, 2 ms apart, to EOF. */
static void *slow_reader(void *arg)
{
	struct reader *r = arg;
	ssize_t n;

	for (;;) {
		size_t room = FILE_LEN + 1 - r->got;

		n = recv(r->s, rx + r->got, room < 16384 ? room : 16384, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		r->got += n;
		usleep(2000);
	}
	return NULL;
}

/* (b): the library, in a fresh child; @copy: without the module. */
static int lib_case(int file, int copy)
{
	const char *what = copy ? "stablesend_sendfile (copy fallback)"
				: "stablesend_sendfile (module)";
	int want = copy ? STABLESEND_PATH_COPY : STABLESEND_PATH_MODULE;
	struct call k = { .lib = 1, .file = file };
	int c, s, calls = 0, eagain = 0, partial = 0;
	struct reader rd = { 0 };
	double t0, slowest = 0;
	pthread_t t;
	size_t sent;

	if (copy) {
		if (unshare(CLONE_NEWNS)) {
			printf("%s: unshare(CLONE_NEWNS): %s, skipped\n", what,
			       strerror(errno));
			return SKIP;
		}
		mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
		REQUIRE(mount("none", "/dev", "tmpfs", 0, NULL) == 0, "tmpfs on /dev");
		REQUIRE(access(STABLESEND_DEVICE, F_OK) < 0, STABLESEND_DEVICE " still there");
	}
	unsetenv(STABLESEND_ENV_REQUIRE_MODULE);

	/* Partial counts and EAGAIN to a peer that does not read. */
	nonblocking_pair(&c, &s);
	k.sock = c;
	rx_len = 0;
	sent = fill(&k, s, what);
	CHECK(k.path == want, "%s: path %d, want %d", what, k.path, want);
	usleep(300000);
	rx_all(c, s);
	check_rx(what, sent);
	printf("%s: %zu bytes reported, the peer received %zu\n", what, sent, rx_len);
	close(c);
	close(s);

	/* poll(POLLOUT) + stablesend_sendfile() over the whole file. */
	nonblocking_pair(&c, &s);
	rd.s = s;
	pthread_create(&t, NULL, slow_reader, &rd);
	k.sock = c;
	k.off = 0;
	t0 = now_s();
	while (k.off < FILE_LEN && now_s() - t0 < 60) {
		struct pollfd p = { .fd = c, .events = POLLOUT };
		off_t before = k.off;
		double took, t1;

		if (poll(&p, 1, 5000) != 1)
			continue;
		t1 = now_s();
		k.ret = stablesend_sendfile(c, file, &k.off, FILE_LEN - k.off);
		k.err = errno;
		took = now_s() - t1;
		if (took > slowest)
			slowest = took;
		calls++;
		if (k.ret < 0) {
			CHECK(k.err == EAGAIN || k.err == EINTR, "%s loop: errno %d",
			      what, k.err);
			CHECK(k.off == before, "%s loop: error moved *offset", what);
			if (k.err != EAGAIN && k.err != EINTR)
				break;
			eagain++;
			continue;
		}
		CHECK(k.ret > 0 && k.off == before + k.ret,
		      "%s loop: returned %ld, *offset %lld -> %lld", what, k.ret,
		      (long long)before, (long long)k.off);
		if (k.ret <= 0)
			break;
		partial += (size_t)k.ret < FILE_LEN - before;
	}
	shutdown(c, SHUT_WR);
	pthread_join(t, NULL);
	rx_len = rd.got;
	CHECK(k.off == FILE_LEN, "%s loop: *offset %lld after %.1f s, want %d", what,
	      (long long)k.off, now_s() - t0, FILE_LEN);
	check_rx("poll + stablesend_sendfile loop", FILE_LEN);
	CHECK(stablesend_sendfile_path() == want, "%s loop: path %d, want %d", what,
	      stablesend_sendfile_path(), want);
	CHECK(slowest < CALL_LIMIT, "%s loop: a call took %.2f s on a non-blocking socket",
	      what, slowest);
	printf("%s loop: %d calls (%d partial, %d EAGAIN), slowest %.3f s, %zu bytes received\n",
	       what, calls, partial, eagain, slowest, rx_len);
	close(c);
	close(s);
	return test_result();
}

int main(void)
{
	int file, copy, st;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	rx = malloc(FILE_LEN + 1);
	REQUIRE(rx, "malloc");
	file = file_with_pattern(FILE_LEN, pat);

	ioctl_case(file);
	for (copy = 0; copy < 2; copy++) {
		pid = fork();
		REQUIRE(pid >= 0, "fork");
		if (!pid) {
			failures = 0;	/* the parent's are its own */
			_exit(lib_case(file, copy));
		}
		REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
		CHECK(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == SKIP),
		      "stablesend_sendfile (%s): status 0x%x", copy ? "copy" : "module", st);
	}
	CHECK(ss_drained(10), "requests_in_flight %lld bytes_in_flight %lld",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	close(file);
	free(rx);
	return test_result();
}
