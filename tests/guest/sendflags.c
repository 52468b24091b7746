// SPDX-License-Identifier: GPL-2.0
/*
 * SEND looks at the socket's flags as sendfile(2) does, so that the
 * library's sendfile needs no system calls of its own to look at them
 * (STABLESEND_FEAT_SEND_SOCKFLAGS):
 * (a) SETUP reports the feature;
 * (b) an O_APPEND TCP socket: SEND fails with EINVAL, the errno the
 *     kernel's sendfile(2) gives on the same socket, and the peer gets
 *     nothing; stablesend_sendfile() fails the same way;
 * (c) a non-blocking socket takes no more than its send buffer at once,
 *     and SEND snapshots no more: with the open's memory limit (256 KiB)
 *     far below the request (8 MiB) but above the socket's send buffer
 *     (SO_SNDBUF 32 KiB, which the kernel doubles), the call returns a
 *     count of at most the send buffer instead of failing with EMSGSIZE;
 *     with a header and a trailer it reports the header and file bytes
 *     and no trailer byte; the peer gets exactly the bytes reported: the
 *     header, then the file's bytes from the offset;
 * (d) the cap is for non-blocking sockets only: the same request on a
 *     blocking socket still fails with EMSGSIZE;
 * (e) STABLESEND_REQ_MORE is send(2)'s MSG_MORE: 100 bytes sent with it
 *     (SEND, and SUBMIT) stay in the TCP socket, the peer sees nothing
 *     for 100 ms; the next request without it pushes them out with its
 *     own, and the peer gets both, in order;
 * (f) STABLESEND_REQ_NOWAIT on a non-blocking socket never waits for
 *     memory: with half of a 256 KiB limit held by a request whose peer
 *     does not read, a SEND of 8 MiB (send buffer 256 KiB) takes the
 *     128 KiB free, a short count, and exactly those bytes arrive; with
 *     nothing free the next fails at once with ENOSPC; without the flag,
 *     on a non-blocking device fd, with EAGAIN.
 */
#include "common.h"
#include <stablesend.h>
#include <sys/sendfile.h>

#define REQ_LEN		(8 << 20)
#define LIMIT		(256 << 10)
#define SNDBUF		(32 << 10)
#define OFF		12345
#define HDTR		100

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 7 + (i >> 10) + 1);
}

/*
 * Shut the sender down and read the peer to EOF: the byte count (the
 * first @cap of them in @buf).
 */
static size_t drain(int c, int s, unsigned char *buf, size_t cap)
{
	unsigned char junk[4096];
	size_t got = 0;

	shutdown(c, SHUT_WR);
	for (;;) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		ssize_t n;

		REQUIRE(poll(&p, 1, 10000) == 1, "no EOF after 10 s");
		if (got < cap)
			n = recv(s, buf + got, cap - got, 0);
		else
			n = recv(s, junk, sizeof(junk), 0);
		if (n <= 0)
			return got;
		got += n;
	}
}

static void o_append(int dev, int file)
{
	struct stablesend_req r;
	unsigned char buf[64];
	off_t off = 0;
	int c, s, sf_err;
	long n;

	tcp_pair(AF_INET, &c, &s);
	REQUIRE(fcntl(c, F_SETFL, O_APPEND) == 0, "F_SETFL O_APPEND");
	errno = 0;
	n = sendfile(c, file, &off, 4096);
	sf_err = errno;
	CHECK(n == -1 && sf_err == EINVAL,
	      "(b) the kernel's sendfile to an O_APPEND socket: %ld, %s",
	      n, strerror(sf_err));
	r = ss_req(file, c, 0, 4096, 1);
	errno = 0;
	n = ss_send(dev, &r);
	CHECK(n == -1 && errno == sf_err,
	      "(b) SEND to an O_APPEND socket: %ld, %s (sendfile(2): %s)",
	      n, strerror(errno), strerror(sf_err));
	off = 0;
	errno = 0;
	n = stablesend_sendfile(c, file, &off, 4096);
	CHECK(n == -1 && errno == sf_err && off == 0,
	      "(b) stablesend_sendfile to an O_APPEND socket: %ld, %s, offset %lld",
	      n, strerror(errno), (long long)off);
	CHECK(drain(c, s, buf, sizeof(buf)) == 0,
	      "(b) the peer of the O_APPEND socket got bytes");
	close(c);
	close(s);
}

static void capped(int dev, int file, int hdtr)
{
	static unsigned char rx[REQ_LEN + 2 * HDTR + 1];
	unsigned char head[HDTR], tail[HDTR];
	int c, s, v = SNDBUF, sndbuf;
	socklen_t sl = sizeof(sndbuf);
	struct stablesend_req r;
	size_t got, hl = hdtr ? HDTR : 0;
	long n;

	memset(head, 'H', sizeof(head));
	memset(tail, 'T', sizeof(tail));
	tcp_pair(AF_INET, &c, &s);
	REQUIRE(setsockopt(c, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) == 0,
		"SO_SNDBUF");
	REQUIRE(getsockopt(c, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl) == 0,
		"SO_SNDBUF");
	REQUIRE(sndbuf < LIMIT, "send buffer %d not below the limit", sndbuf);
	r = ss_req(file, c, OFF, REQ_LEN, 2);
	if (hdtr)
		stablesend_prep_hdtr(&r, head, HDTR, tail, HDTR);

	/* (d) blocking: the whole request must fit the open's limit. */
	errno = 0;
	n = ss_send(dev, &r);
	CHECK(n == -1 && errno == EMSGSIZE,
	      "(d) %s: SEND of %d bytes on a blocking socket: %ld, %s",
	      hdtr ? "hdtr" : "plain", REQ_LEN, n, strerror(errno));

	REQUIRE(fcntl(c, F_SETFL, O_NONBLOCK) == 0, "F_SETFL O_NONBLOCK");
	errno = 0;
	n = ss_send(dev, &r);
	CHECK(n > (long)hl && n <= sndbuf,
	      "(c) %s: non-blocking SEND of %d bytes, send buffer %d, limit %d: %ld, %s",
	      hdtr ? "hdtr" : "plain", REQ_LEN, sndbuf, LIMIT, n,
	      n < 0 ? strerror(errno) : "");
	got = drain(c, s, rx, sizeof(rx));
	CHECK(n < 0 || got == (size_t)n,
	      "(c) %s: the peer got %zu bytes, SEND reported %ld",
	      hdtr ? "hdtr" : "plain", got, n);
	if (n > (long)hl && got == (size_t)n && got <= sizeof(rx)) {
		size_t i;

		for (i = 0; i < hl; i++)
			if (rx[i] != 'H')
				break;
		CHECK(i == hl, "(c) hdtr: header byte %zu is %#x", i, rx[i]);
		i = pattern_mismatch(rx + hl, got - hl, OFF, pat);
		CHECK(i == got - hl,
		      "(c) %s: byte %zu of the file part is %#x, not the file's %#x",
		      hdtr ? "hdtr" : "plain", i, rx[hl + i], pat(OFF + i));
	}
	close(c);
	close(s);
}

static void nowait(int file)
{
	static unsigned char rx[LIMIT];
	int dev = ss_dev(), a, pa, c, s;
	struct stablesend_counters k;
	struct stablesend_req r;
	size_t got;
	long n;

	REQUIRE(ss_setup(dev, -1, LIMIT) == 0, "SETUP");
	tcp_pair(AF_INET, &a, &pa);	/* pa never reads */
	tcp_pair(AF_INET, &c, &s);
	sndbuf_force(a, LIMIT / 2);
	sndbuf_force(c, LIMIT / 2);
	REQUIRE(fcntl(a, F_SETFL, O_NONBLOCK) == 0 &&
		fcntl(c, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	r = ss_req(file, a, 0, LIMIT / 2, 3);
	n = ss_send(dev, &r);
	REQUIRE(n == LIMIT / 2, "(f) SEND of %d bytes: %ld", LIMIT / 2, n);
	ss_counters(dev, &k);
	REQUIRE(k.mem_in_use == LIMIT / 2, "(f) %llu bytes in use, want %d",
		(unsigned long long)k.mem_in_use, LIMIT / 2);
	alarm(20);	/* a SEND that waits for memory ends the test */

	r = ss_req(file, c, OFF, REQ_LEN, 4);
	r.flags = STABLESEND_REQ_NOWAIT;
	n = ss_send(dev, &r);
	CHECK(n == LIMIT / 2,
	      "(f) NOWAIT SEND of %d bytes with %d free: %ld (%s)", REQ_LEN,
	      LIMIT / 2, n, n < 0 ? strerror(errno) : "bytes");
	errno = 0;
	n = ss_send(dev, &r);
	CHECK(n == -1 && errno == ENOSPC,
	      "(f) NOWAIT SEND with no memory free: %ld (%s), want ENOSPC",
	      n, strerror(errno));
	REQUIRE(fcntl(dev, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	r.flags = 0;
	errno = 0;
	n = ss_send(dev, &r);
	CHECK(n == -1 && errno == EAGAIN,
	      "(f) SEND without NOWAIT, no memory free, non-blocking device fd: %ld (%s), want EAGAIN",
	      n, strerror(errno));
	got = drain(c, s, rx, sizeof(rx));
	CHECK(got == LIMIT / 2 && pattern_mismatch(rx, got, OFF, pat) == got,
	      "(f) the peer got %zu bytes, want the file's %d", got, LIMIT / 2);
	alarm(0);
	printf("(f) NOWAIT: %d bytes with %d free, then ENOSPC; without it EAGAIN\n",
	       LIMIT / 2, LIMIT / 2);
	close(a);
	close(pa);
	close(c);
	close(s);
	close(dev);
}

/* Bytes @c can read within @ms (0 if none came). */
static ssize_t read_within(int c, unsigned char *buf, size_t n, int ms)
{
	struct pollfd p = { .fd = c, .events = POLLIN };

	if (poll(&p, 1, ms) != 1)
		return 0;
	return recv(c, buf, n, MSG_DONTWAIT);
}

static void more(int dev, int file, int async)
{
	struct stablesend_req r = ss_req(file, -1, OFF, 100, 1);
	unsigned char buf[256];
	struct stablesend_cqe cqe;
	ssize_t n, got;
	int c, s;

	tcp_pair(AF_INET, &c, &s);
	r.sock_fd = s;
	r.flags = STABLESEND_REQ_MORE;
	n = async ? (ss_submit(dev, &r, 1) == 1 ? 100 : -1) : ss_send(dev, &r);
	CHECK(n == 100, "(e) %s with MORE: %zd (%s)", async ? "SUBMIT" : "SEND",
	      n, strerror(errno));
	got = read_within(c, buf, sizeof(buf), 100);
	CHECK(got == 0, "(e) %s with MORE: the peer got %zd bytes at once",
	      async ? "SUBMIT" : "SEND", got);
	r.flags = 0;
	r.offset = OFF + 100;
	n = async ? (ss_submit(dev, &r, 1) == 1 ? 100 : -1) : ss_send(dev, &r);
	CHECK(n == 100, "(e) the next %s: %zd (%s)", async ? "SUBMIT" : "SEND",
	      n, strerror(errno));
	shutdown(s, SHUT_WR);
	got = read_full(c, buf, 200);
	CHECK(got == 200 && pattern_mismatch(buf, 200, OFF, pat) == 200,
	      "(e) after the next %s the peer got %zd of 200 bytes, or others",
	      async ? "SUBMIT" : "SEND", got);
	if (async)
		CHECK(ss_reap(dev, &cqe, 1, 5000) == 1 &&
		      ss_reap(dev, &cqe, 1, 5000) == 1, "(e) two SENT records");
	printf("(e) %s with MORE: nothing for 100 ms, then 200 bytes with the next\n",
	       async ? "SUBMIT" : "SEND");
	close(c);
	close(s);
}

int main(void)
{
	struct stablesend_setup su = { .eventfd = -1, .mem_limit = LIMIT };
	int dev = ss_dev(), file = file_with_pattern(OFF + REQ_LEN, pat);

	REQUIRE(ioctl(dev, STABLESEND_IOC_SETUP, &su) == 0, "SETUP");
	CHECK(su.features & STABLESEND_FEAT_SEND_SOCKFLAGS,
	      "(a) SETUP features %#llx lack SEND_SOCKFLAGS",
	      (unsigned long long)su.features);
	CHECK(su.mem_limit == LIMIT, "limit in force %llu",
	      (unsigned long long)su.mem_limit);
	o_append(dev, file);
	capped(dev, file, 0);
	capped(dev, file, 1);
	more(dev, file, 0);
	more(dev, file, 1);
	nowait(file);
	close(file);
	close(dev);
	return test_result();
}
