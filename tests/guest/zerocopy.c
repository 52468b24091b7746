// SPDX-License-Identifier: GPL-2.0
/*
 * No second copy: the snapshot pages themselves must travel in the socket
 * buffers.  Observable from user space through RELEASED: on a local path
 * (loopback TCP, AF_UNIX, veth into another namespace) the receiver's
 * queue holds the very pages, so
 * while the peer has not read, RELEASED must not come; once it reads, it
 * must.  A path that copied would let go of the pages at once.  And
 * COPIED must be clear on those paths.  Over a real driver (virtio-net)
 * TCP's retransmit queue holds them until the peer ACKs; COPIED is clear
 * when the NIC has scatter-gather, set when it has none (turned off with
 * ETHTOOL_SSG) and segmentation must copy them into each packet.
 * compat32: yes
 */
#include "netns.h"

static int released(int dev, uint64_t id, int wait_ms, int copied)
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
			      !(cqe[i].flags & STABLESEND_CQE_COPIED) == !copied,
			      "SENT res %lld flags %#x, COPIED expected %d",
			      (long long)cqe[i].res, cqe[i].flags, copied);
		}
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
	CHECK(!released(dev, 5, 500, 0),
	      "%s: pages released while the peer had not read: they were copied",
	      name);
	CHECK(read_full(s, buf, len) == len && buf[len - 1] == 'q',
	      "%s: payload", name);
	CHECK(released(dev, 5, 5000, 0), "%s: no RELEASED after the peer read",
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

/*
 * A real NIC: the receiver gets its own copy from the device, so RELEASED
 * needs no read, only the ACK (TCP keeps the sent pages for retransmission)
 * and the driver's transmit completion.  With the peer's link down nothing
 * is ACKed: if TCP had copied the bytes, our pages would be free at once.
 * A NIC without scatter-gather (@copies) makes segmentation copy the
 * pages into each packet: SENT says COPIED, and TCP's retransmit queue
 * still holds the pages until the ACK.
 */
static void nic_phase(const char *name, int file, size_t len, int c, int s,
		      int ns, const char *peer, int copies)
{
	int dev = ss_dev(), before = failures;
	struct stablesend_req r = ss_req(file, c, 0, len, 7);
	struct stablesend_counters k;
	char *buf = malloc(2 * len);
	double t;

	r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
	CHECK(ss_submit(dev, &r, 1) == 1, "%s: submit", name);
	t = now_s();
	CHECK(released(dev, 7, 10000, copies),
	      "%s: no RELEASED although the peer's NIC received it all", name);
	printf("%-12s RELEASED %.0f ms after submission, peer not reading\n",
	       name, (now_s() - t) * 1000);

	CHECK(if_set_in(ns, peer, 0) == 0, "link down %s", peer);
	r.user_data = 8;
	CHECK(ss_submit(dev, &r, 1) == 1, "%s: submit with the link down", name);
	CHECK(!released(dev, 8, 1000, copies),
	      "%s: pages released with nothing ACKed: TCP copied them", name);
	CHECK(if_set_in(ns, peer, 1) == 0, "link up %s", peer);
	CHECK(read_full(s, buf, 2 * len) == 2 * len && buf[0] == 'v' &&
	      buf[2 * len - 1] == 'v', "%s: payload", name);
	CHECK(released(dev, 8, 10000, copies), "%s: no RELEASED after the ACK", name);
	ss_counters(dev, &k);
	CHECK(k.copied == (copies ? 2 : 0), "%s: %llu requests COPIED, want %d",
	      name, (unsigned long long)k.copied, copies ? 2 : 0);
	printf("%-12s %s\n", name, failures != before ? "FAILED" : copies ?
	       "no scatter-gather: segmentation copied (COPIED), pages held until ACKed" :
	       "pages held by TCP until ACKed, then released: by reference");
	free(buf);
	close(dev);
}

static void nic_path(void)
{
	size_t len = 48 << 10;
	int file = temp_file(len, 'v'), c, s, ns;
	char here[IFNAMSIZ], peer[IFNAMSIZ];

	if (!nic_pair(&c, &s, &ns, here, peer)) {
		printf("%-12s no two virtio-net NICs in this guest\n", "tcp-virtio");
		/* The harness always gives the guest two virtio-net NICs. */
		CHECK(0, "no two virtio-net NICs: the real driver's path is untested");
		close(file);
		return;
	}
	if (!nic_offloads()) {
		/* STABLESEND_NIC=hub: no offloads at all, so only the copy. */
		printf("%-12s QEMU hub (STABLESEND_NIC=hub): the NIC has no scatter-gather\n",
		       "tcp-virtio");
		nic_phase("tcp-virtio", file, len, c, s, ns, peer, 1);
		goto out;
	}
	nic_phase("tcp-virtio", file, len, c, s, ns, peer, 0);
	close(c);
	close(s);
	/* The same NIC without scatter-gather, on a new connection. */
	CHECK(nic_set_sg(here, 0) == 0, "ETHTOOL_SSG off on %s: %s", here,
	      strerror(errno));
	ns_tcp_connect(ns, "10.198.0.2", &c, &s);
	nic_phase("tcp-virtio-nosg", file, len, c, s, ns, peer, 1);
	CHECK(nic_set_sg(here, 1) == 0, "ETHTOOL_SSG on %s", here);
out:
	close(c);
	close(s);
	close(ns);
	close(file);
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
	nic_path();
	CHECK(ss_drained(10), "pages in flight");
	return test_result();
}
