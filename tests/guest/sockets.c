// SPDX-License-Identifier: GPL-2.0
/*
 * Every supported socket kind gets the payload intact: TCP over IPv4
 * loopback, TCP over IPv6 loopback (::1), AF_UNIX stream (socketpair), TCP
 * with software kTLS (TLS 1.2 AES-GCM-128 on both ends, the receiver reads
 * plaintext), and TCP over a veth pair into another network namespace (the
 * container case).  For each: synchronous SEND and asynchronous SUBMIT,
 * sizes from 1 byte to 3 MiB at odd offsets, with and without header and
 * trailer (up to STABLESEND_HDTR_MAX each), header and trailer alone; the
 * receiver compares every byte, and after the last case sees EOF and
 * nothing else.  kTLS completions carry STABLESEND_CQE_COPIED (and count in
 * COUNTERS.copied); the by-reference paths (loopback, AF_UNIX, veth) do not.
 *
 * test-timeout: 600
 * compat32: yes
 */
#include "netns.h"
#include "watchdog.h"
#include <pthread.h>
#include <signal.h>

#define FILE_SIZE	(4 << 20)

/* --- SEND with a watchdog ---------------------------------------------------- */

/* --- transfers ------------------------------------------------------------- */

struct rx {
	int fd;
	unsigned char *buf;
	size_t want, got;
	int err;
};

static void *rx_fn(void *p)
{
	struct rx *rx = p;

	while (rx->got < rx->want) {
		ssize_t r = read(rx->fd, rx->buf + rx->got, rx->want - rx->got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rx->err = r ? errno : 0;
			break;
		}
		rx->got += r;
	}
	return NULL;
}

enum transport { T_TCP4, T_TCP6, T_UNIX, T_KTLS, T_VETH, T_NR };
static const char *const tname[T_NR] = { "tcp4", "tcp6", "unix", "ktls", "veth" };

static const struct tcase {
	size_t len, off, head, tail;
} cases[] = {
	{ 1, 0, 0, 0 },
	{ 1, 4097, 100, 100 },
	{ 100000, 4093, 37, 1000 },
	{ 100000, 0, 0, 0 },
	{ 3 << 20, 1, 512, 4096 },
	{ 3 << 20, 65536, 0, 0 },
	{ 4097, 8191, STABLESEND_HDTR_MAX, STABLESEND_HDTR_MAX },
	{ 0, 0, 20, 30 },		/* header and trailer alone */
};

/*
 * One transfer: 0 when every check passed, 1 when one failed, 2 when an
 * asynchronous request is still owed its completion (stuck).
 */
static int transfer(int dev, int file, int snd, int rcv, enum transport t,
		    const struct tcase *tc, int async, unsigned int ci)
{
	size_t total = tc->head + tc->len + tc->tail, i;
	unsigned char *head = malloc(tc->head + 1), *tail = malloc(tc->tail + 1);
	unsigned char *want = malloc(total);
	int copies = t == T_KTLS, f0 = failures, owed = 0;
	struct stablesend_counters c0, c1;
	struct stablesend_req r;
	struct rx rx = { .fd = rcv };
	pthread_t th;
	long ret;

	REQUIRE(head && tail && want, "malloc");
	rx.want = total;
	rx.buf = malloc(total);
	REQUIRE(rx.buf, "malloc");
	for (i = 0; i < tc->head; i++)
		head[i] = pat(i, 100 + ci);
	for (i = 0; i < tc->tail; i++)
		tail[i] = pat(i, 200 + ci);
	memcpy(want, head, tc->head);
	for (i = 0; i < tc->len; i++)
		want[tc->head + i] = pat(tc->off + i, 0);
	memcpy(want + tc->head + tc->len, tail, tc->tail);

	r = ss_req(file, snd, tc->off, tc->len, 1000 + ci);
	if (tc->head) {
		r.head = (uintptr_t)head;
		r.head_len = tc->head;
	}
	if (tc->tail) {
		r.tail = (uintptr_t)tail;
		r.tail_len = tc->tail;
	}
	ss_counters(dev, &c0);
	REQUIRE(pthread_create(&th, NULL, rx_fn, &rx) == 0, "pthread_create");
	if (async) {
		struct stablesend_cqe cqe;

		ret = ss_submit(dev, &r, 1);
		CHECK(ret == 1, "%s: SUBMIT returned %ld", tname[t], ret);
		if (ret == 1 && ss_reap(dev, &cqe, 1, 60000) != 1) {
			CHECK(0, "%s: no completion in 60 s", tname[t]);
			owed = 1;
		} else if (ret == 1) {
			CHECK(cqe.user_data == 1000 + ci && cqe.res == (long long)total &&
			      (cqe.flags & STABLESEND_CQE_SENT),
			      "%s: cqe user_data %llu res %lld flags %#x, expected res %zu",
			      tname[t], (unsigned long long)cqe.user_data,
			      (long long)cqe.res, cqe.flags, total);
			CHECK(!!(cqe.flags & STABLESEND_CQE_COPIED) == copies,
			      "%s: cqe flags %#x: COPIED %s expected", tname[t], cqe.flags,
			      copies ? "" : "not");
		}
	} else {
		int stalled;

		ret = send_wd(dev, &r, 60, &stalled);
		CHECK(!stalled, "%s: SEND made no progress for 60 s (returned %ld after the watchdog signal)",
		      tname[t], ret);
		CHECK(ret == (long)total, "%s: SEND returned %ld, expected %zu",
		      tname[t], ret, total);
	}
	pthread_join(th, NULL);
	ss_counters(dev, &c1);
	CHECK(c1.copied - c0.copied == (uint64_t)copies,
	      "%s: COUNTERS.copied went %llu -> %llu", tname[t],
	      (unsigned long long)c0.copied, (unsigned long long)c1.copied);
	CHECK(rx.got == total, "%s: received %zu of %zu bytes (%s)", tname[t],
	      rx.got, total, rx.err ? strerror(rx.err) : "EOF");
	for (i = 0; i < rx.got; i++)
		if (rx.buf[i] != want[i])
			break;
	CHECK(i == rx.got, "%s: received byte %zu is %#x, expected %#x", tname[t], i,
	      i < rx.got ? rx.buf[i] : 0, i < rx.got ? want[i] : 0);
	printf("%-4s %-4s %-6s len %7zu off %5zu head %5zu tail %5zu: %zu bytes %s\n",
	       failures == f0 ? "ok" : "FAIL", tname[t], async ? "SUBMIT" : "SEND",
	       tc->len, tc->off, tc->head, tc->tail, rx.got,
	       failures == f0 ? "intact" : "WRONG");
	free(head);
	free(tail);
	free(want);
	free(rx.buf);
	return owed ? 2 : failures != f0;
}

static void run_transport(int dev, int file, enum transport t)
{
	struct timeval tv = { .tv_sec = 60 };
	unsigned int ci, async, n = 0;
	int snd, rcv, ret = 0;
	char b;

	switch (t) {
	case T_TCP4:
		tcp_pair(AF_INET, &snd, &rcv);
		break;
	case T_TCP6:
		tcp_pair(AF_INET6, &snd, &rcv);
		break;
	case T_UNIX:
		unix_pair(&snd, &rcv);
		break;
	case T_KTLS:
		tcp_pair(AF_INET, &snd, &rcv);
		/*
		 * ENOENT here means tls.ko or gcm(aes) is missing: the guest
		 * has no modprobe, the harness loads tls, gcm, ghash-generic
		 * and ctr where they exist.  A missing kTLS is a failure, not
		 * a skip, or this part could never fail.
		 */
		REQUIRE(ktls_setup(snd, TLS_TX) == 0, "kTLS TX on the sender");
		REQUIRE(ktls_setup(rcv, TLS_RX) == 0, "kTLS RX on the receiver");
		break;
	case T_VETH:
		veth_pair(&snd, &rcv);
		break;
	default:
		return;
	}
	setsockopt(rcv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		for (async = 0; async < 2; async++) {
			ret = transfer(dev, file, snd, rcv, t, &cases[ci], async, n++);
			if (ret)
				goto out;	/* the stream is out of step now */
		}
	}
	/* Nothing else on the wire: EOF right after the last case. */
	close(snd);
	snd = -1;
	CHECK(read(rcv, &b, 1) == 0, "%s: bytes after the last case", tname[t]);
out:
	if (snd >= 0)
		close(snd);
	close(rcv);
	if (ret == 2) {
		/* A stuck request completes once its socket is gone; collect it. */
		struct stablesend_cqe cqe;

		if (ss_reap(dev, &cqe, 1, 10000) == 1)
			printf("     %s: the stuck request completed after close: user_data %llu res %lld\n",
			       tname[t], (unsigned long long)cqe.user_data, (long long)cqe.res);
	}
}

int main(void)
{
	enum transport t;
	int dev, file;
	size_t i;
	unsigned char *b;

	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm_setup();
	if (access(STABLESEND_DEVICE, F_OK))
		return SKIP;
	signal(SIGPIPE, SIG_IGN);
	dev = ss_dev();
	REQUIRE(ss_setup(dev, -1, 64 << 20) == 0, "SETUP");
	b = malloc(FILE_SIZE);
	REQUIRE(b, "malloc");
	for (i = 0; i < FILE_SIZE; i++)
		b[i] = pat(i, 0);
	file = temp_file(0, 0);
	write_full(file, b, FILE_SIZE, 0);
	free(b);

	for (t = 0; t < T_NR; t++)
		run_transport(dev, file, t);

	{
		struct stablesend_counters c;

		ss_counters(dev, &c);
		CHECK(c.cqes_pending == 0 && c.failed == 0,
		      "at the end: cqes_pending %llu failed %llu",
		      (unsigned long long)c.cqes_pending, (unsigned long long)c.failed);
	}
	/* Pages nobody waits for come back at the latest once the fd is closed. */
	close(dev);
	CHECK(ss_drained(10), "pages still in flight");
	close(file);
	return test_result();
}
