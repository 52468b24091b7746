// SPDX-License-Identifier: GPL-2.0
/*
 * A signal during STABLESEND_IOC_SEND behaves like sendfile(2):
 * - the request had started: it stops where it is and the call returns
 *   the bytes the socket took, exactly those bytes reach the peer, in order;
 * - the request had not started (queued behind another on a stalled
 *   socket): EINTR, and none of its bytes are ever sent;
 * - the request had not started and another thread cancelled it:
 *   ECANCELED (never the kernel-internal ERESTARTSYS).
 * Each SEND asks for RELEASED: the one that sent bytes gets that record,
 * the two that failed get none (a failed SEND is as if never made).
 * Without SA_RESTART, so the interruption is visible.
 * compat32: yes
 */
#include "common.h"
#include <pthread.h>
#include <signal.h>

static void on_sig(int sig)
{
	(void)sig;
}

struct job {
	int dev;
	struct stablesend_req r;
	long ret;
	int err;
};

static void *do_send(void *arg)
{
	struct job *j = arg;

	j->ret = ss_send(j->dev, &j->r);
	j->err = errno;
	return NULL;
}

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 13 + 5);
}

/* Interrupt a SEND blocked on a peer that does not read; returns its job. */
static void interrupt(struct job *j)
{
	pthread_t t;

	pthread_create(&t, NULL, do_send, j);
	usleep(500000);
	pthread_kill(t, SIGUSR1);
	pthread_join(t, NULL);
}

int main(void)
{
	size_t len = 8 << 20, got, i;
	struct sigaction sa = { .sa_handler = on_sig };	/* no SA_RESTART */
	unsigned char *buf = malloc(len);
	struct stablesend_cqe cqe;
	struct job j = { 0 };
	int file = file_with_pattern(len, pat), c, s, v;

	sigaction(SIGUSR1, &sa, NULL);
	j.dev = ss_dev();
	REQUIRE(ss_setup(j.dev, -1, 32 << 20) == 0, "SETUP");

	/* Started: a short count, and exactly those bytes on the wire. */
	tcp_pair(AF_INET, &c, &s);
	set_rcvbuf_small(s);
	v = 16384;
	setsockopt(c, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	j.r = ss_req(file, c, 0, len, 1);
	j.r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
	interrupt(&j);
	CHECK(j.ret > 0 && j.ret < (long)len,
	      "started SEND returned %ld (errno %d), want a short count", j.ret,
	      j.err);
	shutdown(c, SHUT_WR);
	got = read_full(s, buf, len);
	CHECK(j.ret > 0 && got == (size_t)j.ret,
	      "peer got %zu bytes, SEND said %ld", got, j.ret);
	i = pattern_mismatch(buf, got, 0, pat);
	CHECK(i == got, "byte %zu wrong", i);
	printf("started: SEND returned %ld of %zu bytes, peer got exactly those\n",
	       j.ret, len);
	close(c);
	close(s);
	memset(&cqe, 0, sizeof(cqe));
	CHECK(ss_reap(j.dev, &cqe, 1, 5000) == 1 && cqe.user_data == 1 &&
	      cqe.flags == STABLESEND_CQE_RELEASED && !cqe.res,
	      "started SEND: record %llu flags %#x res %lld, want its RELEASED",
	      (unsigned long long)cqe.user_data, cqe.flags, (long long)cqe.res);

	/* Not started: EINTR, and none of its bytes are sent. */
	tcp_pair(AF_INET, &c, &s);
	set_rcvbuf_small(s);
	setsockopt(c, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	len = 128 << 10;	/* stalls a 4 KiB window; small: tiny windows drain slowly */
	j.r = ss_req(file, c, 0, len, 2);	/* stalls the socket */
	CHECK(ss_submit(j.dev, &j.r, 1) == 1, "submit");
	j.r = ss_req(file, c, 0, 4096, 3);
	j.r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
	j.r.head = (uintptr_t)"NEVER";
	j.r.head_len = 5;
	interrupt(&j);
	CHECK(j.ret == -1 && j.err == EINTR, "queued SEND: %ld errno %d", j.ret,
	      j.err);
	got = 0;
	memset(&cqe, 0, sizeof(cqe));
	while (ss_reap(j.dev, &cqe, 1, 0) == 0 || cqe.user_data != 2) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		ssize_t n;

		if (cqe.user_data) {
			CHECK(0, "record for request %llu (flags %#x) while the stalled one drains",
			      (unsigned long long)cqe.user_data, cqe.flags);
			memset(&cqe, 0, sizeof(cqe));
			continue;
		}
		if (poll(&p, 1, 5000) != 1)
			break;
		n = read(s, buf, len);
		if (n <= 0)
			break;
		got += n;
	}
	fprintf(stderr, "read %zu before the stalled request completed\n", got);
	CHECK(cqe.user_data == 2 && cqe.res == (long long)len,
	      "stalled request: %llu res %lld", (unsigned long long)cqe.user_data,
	      (long long)cqe.res);
	shutdown(c, SHUT_WR);
	got += read_full(s, buf, len + 1);
	CHECK(got == len, "peer got %zu bytes, want only the first request's %zu",
	      got, len);
	printf("queued: SEND failed with EINTR, none of its bytes were sent\n");
	close(c);
	close(s);

	/* Not started, cancelled by CANCEL from another thread: ECANCELED. */
	unix_pair(&c, &s);
	j.r = ss_req(file, c, 0, 1 << 20, 4);	/* stalls: the peer never reads */
	CHECK(ss_submit(j.dev, &j.r, 1) == 1, "submit");
	j.r = ss_req(file, c, 0, 4096, 5);
	j.r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
	{
		pthread_t t;
		int n;

		pthread_create(&t, NULL, do_send, &j);
		usleep(300000);
		n = ioctl(j.dev, STABLESEND_IOC_CANCEL, &(__u64){ 5 });
		pthread_join(t, NULL);
		CHECK(n == 1, "CANCEL of the waiting SEND returned %d", n);
		CHECK(j.ret == -1 && j.err == ECANCELED,
		      "SEND cancelled by CANCEL: %ld errno %d, want ECANCELED",
		      j.ret, j.err);
	}
	printf("queued: SEND taken back by CANCEL failed with ECANCELED\n");
	close(c);
	close(s);
	/* The stalled request ends with its peer; nothing for SENDs 3 and 5. */
	for (v = 0;;) {
		memset(&cqe, 0, sizeof(cqe));
		if (ss_reap(j.dev, &cqe, 1, 1000) != 1)
			break;
		if (cqe.user_data == 4 && cqe.flags & STABLESEND_CQE_SENT)
			continue;
		CHECK(0, "record for request %llu flags %#x res %lld: only request 4's SENT is owed",
		      (unsigned long long)cqe.user_data, cqe.flags, (long long)cqe.res);
		v++;
	}
	if (!v)
		printf("failed SENDs: no RELEASED record\n");
	close(j.dev);
	close(file);
	free(buf);
	CHECK(ss_drained(10), "pages in flight");
	return test_result();
}
