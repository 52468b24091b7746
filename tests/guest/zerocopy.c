// SPDX-License-Identifier: GPL-2.0
/*
 * No second copy: the snapshot pages themselves must travel in the socket
 * buffers.  Observable from user space through RELEASED: on a local path
 * (loopback TCP, AF_UNIX, veth into another namespace) the receiver's
 * queue holds the very pages, so
 * while the peer has not read, RELEASED must not come; once it reads, it
 * must.  A path that copied would let go of the pages at once.  And
 * COPIED must be clear on those paths.
 */
#include "netns.h"

static int released(int dev, uint64_t id, int wait_ms)
{
	struct stablesend_cqe cqe[4];
	double end = now_s() + wait_ms / 1000.0;
	int n, i;

	do {
		n = ss_reap(dev, cqe, 4, 20);
		for (i = 0; i < n; i++) {
			if (cqe[i].user_data != id)
				continue;
			if (cqe[i].flags & STABLESEND_CQE_RELEASED)
				return 1;
			CHECK(cqe[i].res > 0 &&
			      !(cqe[i].flags & STABLESEND_CQE_COPIED),
			      "SENT res %lld flags %#x", (long long)cqe[i].res,
			      cqe[i].flags);
		}
		poke_cpus();
	} while (now_s() < end);
	return 0;
}

static void path(const char *name, int c, int s)
{
	size_t len = 48 << 10;	/* fits the receive queue without reading */
	int dev = ss_dev(), file = temp_file(len, 'q');
	struct stablesend_req r = ss_req(file, c, 0, len, 5);
	char *buf = malloc(len);
	int before = failures;

	r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
	CHECK(ss_submit(dev, &r, 1) == 1, "%s: submit", name);
	CHECK(!released(dev, 5, 500),
	      "%s: pages released while the peer had not read: they were copied",
	      name);
	CHECK(read_full(s, buf, len) == len && buf[len - 1] == 'q',
	      "%s: payload", name);
	CHECK(released(dev, 5, 5000), "%s: no RELEASED after the peer read",
	      name);
	printf("%-12s %s\n", name, failures == before ?
	       "pages held by the receiver until it read: by reference" :
	       "FAILED");
	free(buf);
	close(file);
	close(dev);
	close(c);
	close(s);
}

int main(void)
{
	int c, s;

	tcp_pair(AF_INET, &c, &s);
	path("tcp4", c, s);
	tcp_pair(AF_INET6, &c, &s);
	path("tcp6", c, s);
	unix_pair(&c, &s);
	path("unix", c, s);
	veth_pair(&c, &s);
	path("tcp-veth", c, s);
	CHECK(ss_drained(10), "pages in flight");
	return test_result();
}
