// SPDX-License-Identifier: GPL-2.0
/*
 * Memory comes back page by page: a request's pages return to the open as
 * soon as the receiver has drained them, not when the whole request has
 * been read, and a request that does not fit reserves and copies chunk by
 * chunk as memory comes back.  So with a 1 MiB limit and 384 KiB of it
 * drained, a 768 KiB request waits holding all that came back (the whole
 * limit is in use), and gets through while most of a 960 KiB one is still
 * unread; and a signal ends such a half-reserved submission leaving
 * nothing behind.
 * test-timeout: 90
 */
#include "stress.h"

#define LIMIT	(1 << 20)
#define A_LEN	(960 << 10)
#define B_LEN	(768 << 10)

struct reader {
	int fd;
	volatile size_t allow;	/* read up to this many bytes, then wait */
	size_t got;
	unsigned int bad;
};

static void *reader(void *arg)
{
	struct reader *r = arg;
	unsigned char buf[16384];

	for (;;) {
		size_t want = r->allow - r->got;
		ssize_t n;
		size_t i;

		if (!want) {
			usleep(1000);
			continue;
		}
		n = read(r->fd, buf, want < sizeof(buf) ? want : sizeof(buf));
		if (n <= 0)
			return NULL;
		/* A and B from file offset 0; C (if it wrongly got in) is not. */
		for (i = 0; i < (size_t)n; i++) {
			size_t pos = r->got + i;

			if (pos >= A_LEN + B_LEN)
				r->bad++;
			else if (buf[i] != pat(pos < A_LEN ? pos : pos - A_LEN, 3))
				r->bad++;
		}
		r->got += n;
	}
}

struct submitter {
	int dev;
	struct stablesend_req req;
	int ret, err;
	volatile int done;
};

static void *submitter(void *arg)
{
	struct submitter *s = arg;

	s->ret = ss_submit(s->dev, &s->req, 1);
	s->err = errno;
	s->done = 1;
	return NULL;
}

static int wait_done(struct submitter *s, double secs)
{
	double end = now_s() + secs;

	while (!s->done && now_s() < end)
		usleep(10000);
	return s->done;
}

int main(void)
{
	struct reader rd = { 0 };
	struct submitter sb = { 0 };
	struct stablesend_counters c;
	struct stablesend_req a;
	struct stablesend_cqe cqe[4];
	pthread_t rt, st;
	int dev = ss_dev(), file = pattern_file(A_LEN, 3), cl, sv, fl;
	double t;

	alarm_setup();
	REQUIRE(ss_setup(dev, -1, LIMIT) == 0, "SETUP 1 MiB");
	tcp_pair(AF_INET, &cl, &sv);
	/* Small buffers: A cannot all be in the socket while the reader waits. */
	setsockopt(sv, SOL_SOCKET, SO_RCVBUF, &(int){ 65536 }, sizeof(int));
	setsockopt(cl, SOL_SOCKET, SO_SNDBUF, &(int){ 65536 }, sizeof(int));
	rd.fd = sv;
	REQUIRE(pthread_create(&rt, NULL, reader, &rd) == 0, "reader");

	/*
	 * A fills most of the limit; the reader drains 5 of its 15 chunks
	 * and they come back (but maybe the 5th, in an skb the reader has
	 * not finished): 320 or 384 KiB free, B needs 768.  B must take what
	 * is free and copy it (chunk by chunk), not wait for 768 KiB free at
	 * once.  (Started while A's pages come back, B may take some, then
	 * wait for a quarter of the limit with less than that free.)
	 */
	a = ss_req(file, cl, 0, A_LEN, 1);
	CHECK(ss_submit(dev, &a, 1) == 1, "submit A");
	rd.allow = 5 * 65536;
	sb.req = ss_req(file, cl, 0, B_LEN, 2);
	/* Refused without waiting: the module now wants A's pages back. */
	fl = fcntl(dev, F_GETFL);
	REQUIRE(fl >= 0 && fcntl(dev, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
	CHECK(ss_submit(dev, &sb.req, 1) == -1 && errno == EAGAIN,
	      "B (768 KiB) non-blocking with at most 384 KiB free: %s",
	      strerror(errno));
	REQUIRE(fcntl(dev, F_SETFL, fl) == 0, "blocking again");
	for (t = now_s() + 10; now_s() < t; usleep(20000)) {
		ss_counters(dev, &c);
		if (c.mem_in_use <= A_LEN - rd.allow + 65536)
			break;
	}
	REQUIRE(c.mem_in_use <= A_LEN - rd.allow + 65536,
		"4 of A's 5 drained chunks back: in use %llu, read %zu",
		(unsigned long long)c.mem_in_use, rd.got);
	usleep(500000);		/* the 5th, if the reader's skb ended with it */
	ss_counters(dev, &c);
	printf("A's drained chunks back: in use %llu of %d\n",
	       (unsigned long long)c.mem_in_use, LIMIT);
	sb.dev = dev;
	REQUIRE(pthread_create(&st, NULL, submitter, &sb) == 0, "submitter");
	for (t = now_s() + 10; now_s() < t; usleep(20000)) {
		ss_counters(dev, &c);
		if (rd.got == rd.allow && c.mem_in_use == LIMIT)
			break;
	}
	printf("B waiting with %zu of A's %d bytes read: in use %llu of %d\n",
	       rd.got, A_LEN, (unsigned long long)c.mem_in_use, LIMIT);
	CHECK(!sb.done, "B (768 KiB) accepted with at most 384 KiB free");
	CHECK(c.mem_in_use == LIMIT,
	      "B waits holding less than all that is free: not chunk by "
	      "chunk (in use %llu)", (unsigned long long)c.mem_in_use);

	/* The reader drains 13 of A's 15 chunks: B gets in before A ends. */
	rd.allow = 13 * 65536;
	if (!wait_done(&sb, 10)) {
		CHECK(0, "B (768 KiB) not accepted while 832 KiB of A were "
		      "drained: pages come back only with the whole request?");
		return test_result();	/* B would wait forever */
	}
	CHECK(sb.ret == 1, "B: ret %d errno %d", sb.ret, sb.err);
	ss_counters(dev, &c);
	printf("B accepted with %zu of A's %d bytes read; in use %llu, peak %llu\n",
	       rd.got, A_LEN, (unsigned long long)c.mem_in_use,
	       (unsigned long long)c.mem_peak);
	CHECK(rd.got < A_LEN, "the reader was to leave A unfinished");
	CHECK(c.mem_peak <= LIMIT, "peak %llu over the limit",
	      (unsigned long long)c.mem_peak);
	pthread_join(st, NULL);

	/*
	 * C (768 KiB) while A's tail and all of B are unread: it must reserve
	 * piecemeal and wait; a signal ends that wait with nothing queued.
	 */
	sb.done = 0;
	sb.req = ss_req(file, cl, 0, B_LEN, 3);
	{
		sigset_t set;
		struct stablesend_counters before;

		ss_counters(dev, &before);
		sigemptyset(&set);
		sigaddset(&set, SIGALRM);
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
		alarm(2);
		sb.ret = ss_submit(dev, &sb.req, 1);
		sb.err = errno;
		alarm(0);
		pthread_sigmask(SIG_BLOCK, &set, NULL);
		CHECK(sb.ret == -1 && sb.err == EINTR,
		      "C at the limit, interrupted: ret %d errno %d, expected EINTR "
		      "(in use before %llu, %zu bytes read)", sb.ret, sb.err,
		      (unsigned long long)before.mem_in_use, rd.got);
		ss_counters(dev, &c);
		CHECK(c.submitted == before.submitted &&
		      c.mem_in_use <= before.mem_in_use,
		      "interrupted C left something: submitted %llu->%llu, in use %llu->%llu",
		      (unsigned long long)before.submitted,
		      (unsigned long long)c.submitted,
		      (unsigned long long)before.mem_in_use,
		      (unsigned long long)c.mem_in_use);
	}

	/* Let everything through: A then B, intact. */
	rd.allow = 3 * A_LEN;	/* everything there is */
	CHECK(ss_reap(dev, cqe, 2, 10000) == 2 && cqe[0].user_data == 1 &&
	      cqe[0].res == A_LEN && cqe[1].user_data == 2 &&
	      cqe[1].res == B_LEN, "SENT for A and B");
	for (t = now_s() + 10; rd.got < A_LEN + B_LEN && now_s() < t;)
		usleep(10000);
	usleep(200000);	/* and nothing more */
	CHECK(rd.got == A_LEN + B_LEN && !rd.bad, "received %zu bytes, %u wrong",
	      rd.got, rd.bad);
	close(cl);
	close(sv);
	close(dev);
	close(file);
	CHECK(ss_drained(10), "pages in flight after close");
	return test_result();
}
