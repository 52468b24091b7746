// SPDX-License-Identifier: GPL-2.0
/*
 * Completion records are bounded: an open holds at most 65536 records,
 * queued unread or owed to requests in flight.  Requests of one byte go to
 * a peer that reads them all while nobody reads the records: exactly
 * 65536 are accepted, the next SUBMIT fails with ENOBUFS and takes
 * nothing; a request asking for RELEASED as well needs two records; each
 * record read makes room for one more.  SEND queues no SENT record, so it
 * still works at the bound.  After a refusal poll() says POLLIN and not
 * POLLOUT at the bound, and POLLOUT once a record is free (two after a
 * request with RELEASED was refused); a thread blocked in poll() for
 * POLLOUT wakes when a record is read.  Not on the debug kernel (90 s there).
 * test-timeout: 240
 */
#include "stress.h"
#include <pthread.h>

#define CQ_MAX	65536
#define BATCH	512

static int peer;
static volatile size_t got;

static void *drain(void *arg)
{
	char buf[65536];
	ssize_t n;

	(void)arg;
	while ((n = read(peer, buf, sizeof(buf))) > 0)
		got += n;
	return NULL;
}

int main(void)
{
	static struct stablesend_req reqs[BATCH];
	struct stablesend_counters k;
	struct stablesend_cqe cqe[2];
	int dev = ss_dev(), file = temp_file(4096, 'r'), sock, n, i;
	long accepted = 0;
	pthread_t t;
	struct poller p;
	double t0, w;

	if (ss_debug_kernel()) {
		/* tests/skips.allow: 65,536 submissions take 90 s there. */
		printf("debug kernel: not run (the stock kernels run it)\n");
		return SKIP;
	}
	unix_pair(&sock, &peer);
	REQUIRE(pthread_create(&t, NULL, drain, NULL) == 0, "reader thread");
	REQUIRE(ss_setup(dev, -1, 0) == 0, "SETUP");
	for (i = 0; i < BATCH; i++)
		reqs[i] = ss_req(file, sock, i % 4096, 1, i);

	t0 = now_s();
	while (accepted < CQ_MAX) {
		n = ss_submit(dev, reqs, CQ_MAX - accepted < BATCH ?
			      CQ_MAX - accepted : BATCH);
		if (n <= 0) {
			CHECK(0, "SUBMIT after %ld accepted: %d (%s)", accepted, n,
			      strerror(errno));
			break;
		}
		accepted += n;
	}
	printf("%ld one-byte requests accepted in %.1f s\n", accepted, now_s() - t0);
	CHECK(ss_submit(dev, reqs, 1) == -1 && errno == ENOBUFS,
	      "SUBMIT at %d records: %s, want ENOBUFS", CQ_MAX, strerror(errno));
	CHECK(ss_submit(dev, reqs, BATCH) == -1 && errno == ENOBUFS,
	      "batch SUBMIT at %d records: %s, want ENOBUFS", CQ_MAX, strerror(errno));
	/* Until they are read, SENT records of completed requests count. */
	for (i = 0; i < 100; i++) {
		ss_counters(dev, &k);
		if (k.completed == CQ_MAX)
			break;
		usleep(50000);
	}
	CHECK(k.submitted == CQ_MAX && k.completed == CQ_MAX &&
	      k.cqes_pending == CQ_MAX, "submitted %llu completed %llu pending %llu",
	      (unsigned long long)k.submitted, (unsigned long long)k.completed,
	      (unsigned long long)k.cqes_pending);
	CHECK(ss_submit(dev, reqs, 1) == -1 && errno == ENOBUFS,
	      "SUBMIT with %d records unread: %s, want ENOBUFS", CQ_MAX,
	      strerror(errno));
	/* Memory is free, records are not: no POLLOUT (it would spin). */
	CHECK(poll_now(dev, POLLIN | POLLOUT) == POLLIN,
	      "poll at %d records unread: %#x, want POLLIN alone", CQ_MAX,
	      poll_now(dev, POLLIN | POLLOUT));

	/* SEND queues no SENT record: not bounded by them. */
	CHECK(ss_send(dev, &reqs[0]) == 1, "SEND at the bound: %s", strerror(errno));

	/* One record read: room for one request, not for one with RELEASED. */
	CHECK(ss_reap(dev, cqe, 1, 1000) == 1 && cqe[0].res == 1, "read one record");
	reqs[1].flags = STABLESEND_REQ_NOTIFY_RELEASE;
	CHECK(ss_submit(dev, &reqs[1], 1) == -1 && errno == ENOBUFS,
	      "RELEASED request with one record free: %s, want ENOBUFS",
	      strerror(errno));
	CHECK(!(poll_now(dev, POLLOUT) & POLLOUT),
	      "POLLOUT with one record free after a RELEASED request was refused");
	reqs[1].flags = 0;
	CHECK(ss_submit(dev, &reqs[1], 1) == 1, "one request after one record read: %s",
	      strerror(errno));
	CHECK(ss_submit(dev, &reqs[2], 1) == -1 && errno == ENOBUFS,
	      "the 65537th: %s, want ENOBUFS", strerror(errno));

	/* A poller waiting for one record wakes when one is read. */
	poller_start(&p, dev);
	t0 = now_s();
	CHECK(ss_reap(dev, cqe, 1, 1000) == 1, "read one record");
	w = poller_woken(&p, t0);
	printf("a poller woken %.3f s after a record was read\n", w);
	CHECK(w >= 0 && w < 1, "a poller: revents %#x %.2f s after a record was read",
	      p.revents, p.woke - t0);

	/* Two free: the RELEASED one fits. */
	CHECK(ss_reap(dev, cqe, 1, 1000) == 1, "read a second record");
	reqs[3].flags = STABLESEND_REQ_NOTIFY_RELEASE;
	CHECK(ss_submit(dev, &reqs[3], 1) == 1, "RELEASED request with two records free: %s",
	      strerror(errno));
	ss_counters(dev, &k);
	/* The SEND counts as submitted. */
	CHECK(k.submitted == CQ_MAX + 3, "submitted %llu, want %d",
	      (unsigned long long)k.submitted, CQ_MAX + 3);

	/* Everything reaches the peer; closing frees every record. */
	for (i = 0; i < 100 && got < CQ_MAX + 3; i++)
		usleep(50000);
	CHECK(got == CQ_MAX + 3, "peer got %zu bytes, want %d", got, CQ_MAX + 3);
	close(dev);
	shutdown(sock, SHUT_WR);
	pthread_join(t, NULL);
	close(sock);
	close(peer);
	close(file);
	CHECK(ss_drained(10), "module holds nothing after close");
	return test_result();
}
