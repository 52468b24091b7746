// SPDX-License-Identifier: GPL-2.0
/*
 * The design not taken, measured on the paths the module serves:
 * MSG_ZEROCOPY (the msg_ubuf mechanism of io_uring's SEND_ZC) reports for
 * every send whether the kernel copied after all
 * (SO_EE_CODE_ZEROCOPY_COPIED).  Locally delivered skbs are copied
 * (loopback, veth into a container: skb_orphan_frags_rx); a NIC with
 * scatter-gather (virtio-net on a tap) sends the pages.  stablesend's plain page references are
 * not copied on any of the three (the zerocopy test proves it), which is
 * why the module hands pages over with MSG_SPLICE_PAGES/sendpage.  If a
 * kernel stops copying here, this test fails and the choice is worth
 * measuring again.
 */
#include "netns.h"
#include <linux/errqueue.h>
#include <pthread.h>

#define CHUNK (64 << 10)
#define COUNT 32

struct reader {
	int fd;
	size_t got;
};

static void *reader(void *arg)
{
	struct reader *r = arg;
	char *buf = malloc((size_t)COUNT * CHUNK);

	r->got = read_full(r->fd, buf, (size_t)COUNT * CHUNK);
	free(buf);
	return NULL;
}

/* Reap zero-copy notifications until sends 0..@calls-1 are covered. */
static int reap(int fd, unsigned int calls, unsigned int *copied)
{
	unsigned int done = 0;
	double end = now_s() + 10;

	*copied = 0;
	while (done < calls && now_s() < end) {
		char control[128];
		struct msghdr msg = {
			.msg_control = control,
			.msg_controllen = sizeof(control),
		};
		struct sock_extended_err *ee;
		struct cmsghdr *cm;

		if (recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
			struct pollfd p = { .fd = fd };

			if (errno != EAGAIN)
				return -1;
			poll(&p, 1, 10);
			poke_cpus();
			continue;
		}
		for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
			ee = (struct sock_extended_err *)CMSG_DATA(cm);
			if (ee->ee_origin != SO_EE_ORIGIN_ZEROCOPY)
				continue;
			done += ee->ee_data - ee->ee_info + 1;
			if (ee->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
				*copied += ee->ee_data - ee->ee_info + 1;
		}
	}
	return done == calls ? 0 : -1;
}

static void zc_path(const char *name, int c, int s, int expect_copy)
{
	char *buf = aligned_alloc(4096, CHUNK);
	struct reader r = { .fd = s };
	unsigned int calls = 0, copied;
	pthread_t t;
	int one = 1, i;

	memset(buf, 'z', CHUNK);
	REQUIRE(setsockopt(c, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) == 0,
		"SO_ZEROCOPY");
	REQUIRE(pthread_create(&t, NULL, reader, &r) == 0, "pthread_create");
	for (i = 0; i < COUNT; i++) {
		size_t off = 0;

		while (off < CHUNK) {
			ssize_t n = send(c, buf + off, CHUNK - off, MSG_ZEROCOPY);

			REQUIRE(n > 0, "%s: send(MSG_ZEROCOPY)", name);
			off += n;
			calls++;
		}
	}
	pthread_join(t, NULL);
	CHECK(r.got == (size_t)COUNT * CHUNK, "%s: received %zu", name, r.got);
	CHECK(reap(c, calls, &copied) == 0, "%s: notifications for %u sends",
	      name, calls);
	printf("%-12s MSG_ZEROCOPY: %u of %u sends copied by the kernel\n",
	       name, copied, calls);
	if (expect_copy)
		CHECK(copied == calls, "%s: expected the local path to copy", name);
	else
		CHECK(copied == 0, "%s: expected the NIC to take the pages", name);
	free(buf);
	close(c);
	close(s);
}

int main(void)
{
	char here[IFNAMSIZ], peer[IFNAMSIZ];
	int c, s, ns;

	tcp_pair(AF_INET, &c, &s);
	zc_path("tcp4", c, s, 1);
	veth_pair(&c, &s);
	zc_path("tcp-veth", c, s, 1);
	if (nic_pair(&c, &s, &ns, here, peer)) {
		/* Even a NIC without offloads (STABLESEND_NIC=hub) reports no copy. */
		zc_path("tcp-virtio", c, s, 0);
		close(ns);
	} else {
		/* The harness always gives the guest two virtio-net NICs. */
		CHECK(0, "no two virtio-net NICs: the real driver's path is untested");
	}
	return test_result();
}
