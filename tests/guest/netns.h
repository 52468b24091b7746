/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A veth pair into a second network namespace, by rtnetlink (busybox's ip
 * cannot create veth pairs): the container case for the in-guest tests.
 * The addresses exist only inside the test guest.
 */
#ifndef STABLESEND_TEST_NETNS_H
#define STABLESEND_TEST_NETNS_H

#include "common.h"
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>

static inline struct rtattr *nl_add(struct nlmsghdr *n, int type, const void *data,
			     int len)
{
	struct rtattr *rta = (struct rtattr *)((char *)n + NLMSG_ALIGN(n->nlmsg_len));

	rta->rta_type = type;
	rta->rta_len = RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(rta), data, len);
	n->nlmsg_len = NLMSG_ALIGN(n->nlmsg_len) + RTA_ALIGN(rta->rta_len);
	return rta;
}

static inline void nl_end(struct nlmsghdr *n, struct rtattr *nest)
{
	nest->rta_len = (char *)n + n->nlmsg_len - (char *)nest;
}

/* ip link add @a type veth peer name @b netns @peer_ns */
static inline int veth_create(const char *a, const char *b, int peer_ns)
{
	static char msg[1024] __attribute__((aligned(4)));
	struct nlmsghdr *n = (struct nlmsghdr *)msg;
	struct ifinfomsg *ifi = NLMSG_DATA(n);
	struct {
		struct nlmsghdr n;
		struct nlmsgerr e;
		char buf[512];
	} ack;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	struct rtattr *linkinfo, *data, *peer;
	int fd, ret = -1;
	__u32 nsfd = peer_ns;

	memset(msg, 0, sizeof(msg));
	n->nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	n->nlmsg_type = RTM_NEWLINK;
	n->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
	n->nlmsg_seq = 1;
	ifi->ifi_family = AF_UNSPEC;
	nl_add(n, IFLA_IFNAME, a, strlen(a) + 1);
	linkinfo = nl_add(n, IFLA_LINKINFO, NULL, 0);
	nl_add(n, IFLA_INFO_KIND, "veth", 5);
	data = nl_add(n, IFLA_INFO_DATA, NULL, 0);
	peer = nl_add(n, VETH_INFO_PEER, NULL, 0);
	n->nlmsg_len += sizeof(struct ifinfomsg);	/* the peer's, zeroed */
	nl_add(n, IFLA_IFNAME, b, strlen(b) + 1);
	nl_add(n, IFLA_NET_NS_FD, &nsfd, sizeof(nsfd));
	nl_end(n, peer);
	nl_end(n, data);
	nl_end(n, linkinfo);

	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		return -1;
	if (sendto(fd, msg, n->nlmsg_len, 0, (struct sockaddr *)&kernel,
		   sizeof(kernel)) == (ssize_t)n->nlmsg_len &&
	    recv(fd, &ack, sizeof(ack), 0) >= (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) &&
	    ack.n.nlmsg_type == NLMSG_ERROR) {
		ret = ack.e.error;
		if (ret)
			errno = -ret;
	}
	close(fd);
	return ret;
}

/* ip addr add @addr/24 dev @name (unless NULL); ip link set @name up */
static inline int if_up(const char *name, const char *addr)
{
	struct ifreq ifr;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ret = -1;

	if (fd < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
	if (addr) {
		sin->sin_family = AF_INET;
		inet_pton(AF_INET, addr, &sin->sin_addr);
		if (ioctl(fd, SIOCSIFADDR, &ifr))
			goto out;
		inet_pton(AF_INET, "255.255.255.0", &sin->sin_addr);
		if (ioctl(fd, SIOCSIFNETMASK, &ifr))
			goto out;
	}
	if (ioctl(fd, SIOCGIFFLAGS, &ifr))
		goto out;
	ifr.ifr_flags |= IFF_UP;
	ret = ioctl(fd, SIOCSIFFLAGS, &ifr);
out:
	close(fd);
	return ret;
}

/*
 * A TCP connection from this namespace (*@client) to a listener in a new
 * network namespace (*@server), over a veth pair: 10.199.0.1 here,
 * 10.199.0.2 there.
 */
static inline void veth_pair(int *client, int *server)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(5001) };
	char a[IFNAMSIZ], b[IFNAMSIZ];
	int orig, ns, l, i;

	snprintf(a, sizeof(a), "ssv%d", getpid() % 100000);
	snprintf(b, sizeof(b), "ssp%d", getpid() % 100000);
	orig = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	REQUIRE(orig >= 0, "open /proc/self/ns/net");
	REQUIRE(unshare(CLONE_NEWNET) == 0, "unshare(CLONE_NEWNET)");
	ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	REQUIRE(ns >= 0, "open the new netns");
	REQUIRE(if_up("lo", NULL) == 0, "lo up in the new netns");
	REQUIRE(setns(orig, CLONE_NEWNET) == 0, "setns back");

	REQUIRE(veth_create(a, b, ns) == 0, "RTM_NEWLINK veth %s/%s", a, b);
	REQUIRE(if_up(a, "10.199.0.1") == 0, "configure %s", a);
	REQUIRE(setns(ns, CLONE_NEWNET) == 0, "setns into the new netns");
	REQUIRE(if_up(b, "10.199.0.2") == 0, "configure %s", b);
	/* Sockets stay in the namespace they were created in. */
	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(l >= 0, "socket");
	inet_pton(AF_INET, "10.199.0.2", &sin.sin_addr);
	REQUIRE(bind(l, (struct sockaddr *)&sin, sizeof(sin)) == 0 && listen(l, 1) == 0,
		"listen on 10.199.0.2");
	REQUIRE(setns(orig, CLONE_NEWNET) == 0, "setns back");
	close(orig);
	close(ns);

	*client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(*client >= 0, "socket");
	for (i = 0; connect(*client, (struct sockaddr *)&sin, sizeof(sin)); i++) {
		REQUIRE(i < 50, "connect to 10.199.0.2 over veth");
		usleep(100000);
	}
	*server = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	REQUIRE(*server >= 0, "accept");
	close(l);
	printf("veth: %s (here, 10.199.0.1) <-> %s (other netns, 10.199.0.2)\n", a, b);
}

#endif
