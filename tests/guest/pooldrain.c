// SPDX-License-Identifier: GPL-2.0
/*
 * Closing the device fd frees the open's idle pooled pages at once, even
 * while a peer still holds pages of another of its requests; those go when
 * the peer lets go of them.  (The pool used to live as long as the last
 * request: one stalled peer kept every idle page of the open.)
 */
#include "common.h"

#define IDLE	(8 << 20)
#define HELD	(1 << 20)

int main(void)
{
	int dev = ss_dev(), file = temp_file(IDLE, 'p'), c, s, a, b;
	long long pool, held, after = -1;
	struct stablesend_req r;
	char *buf = malloc(IDLE);
	struct stablesend_cqe cqe;
	double t;

	REQUIRE(buf, "malloc");
	REQUIRE(ss_setup(dev, -1, 16 << 20) == 0, "SETUP");
	REQUIRE(ss_stat("pool_bytes") == 0, "pool_bytes not 0 at the start");

	/* 8 MiB sent and received whole: its pages go back to the pool. */
	tcp_pair(AF_INET, &c, &s);
	r = ss_req(file, c, 0, IDLE, 1);
	r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
	REQUIRE(ss_submit(dev, &r, 1) == 1, "submit");
	CHECK(read_full(s, buf, IDLE) == IDLE, "read 8 MiB");
	CHECK(ss_reap(dev, &cqe, 1, 10000) == 1 && cqe.flags & STABLESEND_CQE_SENT,
	      "SENT");
	CHECK(ss_reap(dev, &cqe, 1, 10000) == 1 &&
	      cqe.flags & STABLESEND_CQE_RELEASED, "RELEASED");

	/* 1 MiB to a peer that does not read: some of it stays in its queue. */
	unix_pair(&a, &b);
	r = ss_req(file, a, 0, HELD, 2);
	REQUIRE(ss_submit(dev, &r, 1) == 1, "submit to the stalled peer");
	usleep(100000);
	pool = ss_stat("pool_bytes");
	held = ss_stat("bytes_in_flight");
	printf("before close: pool_bytes %lld, bytes_in_flight %lld\n", pool, held);
	CHECK(pool >= IDLE, "the pool was to hold the idle 8 MiB: %lld", pool);

	close(dev);
	for (t = now_s() + 5; now_s() < t; usleep(10000)) {
		after = ss_stat("pool_bytes");
		if (after <= HELD)
			break;
	}
	printf("after close: pool_bytes %lld (the stalled request holds %lld)\n",
	       after, held);
	CHECK(after <= HELD,
	      "closing kept %lld bytes of pool while a peer held %d", after, HELD);

	close(b);	/* the peer lets go */
	close(a);
	close(c);
	close(s);
	CHECK(ss_drained(10), "pages in flight");
	CHECK(ss_stat_wait("pool_bytes", 0, 10) == 0, "pool_bytes not back to 0");
	free(buf);
	return test_result();
}
