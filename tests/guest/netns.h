/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A veth pair into a second network namespace, by rtnetlink (busybox's ip
 * cannot create veth pairs): the container case for the in-guest tests.
 * The addresses exist only inside the test guest.
 */
#ifndef STABLESEND_TEST_NETNS_H
#define STABLESEND_TEST_NETNS_H

#include "common.h"
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/sockios.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <dirent.h>
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

/* Send one request; the kernel's ack: 0, or -1 with errno set. */
static inline int nl_talk(struct nlmsghdr *n)
{
	struct {
		struct nlmsghdr n;
		struct nlmsgerr e;
		char buf[512];
	} ack;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	int fd, ret = -1;

	n->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
	n->nlmsg_seq = 1;
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		return -1;
	if (sendto(fd, n, n->nlmsg_len, 0, (struct sockaddr *)&kernel,
		   sizeof(kernel)) == (ssize_t)n->nlmsg_len &&
	    recv(fd, &ack, sizeof(ack), 0) >= (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) &&
	    ack.n.nlmsg_type == NLMSG_ERROR) {
		ret = ack.e.error;
		if (ret) {
			errno = -ret;
			ret = -1;
		}
	}
	close(fd);
	return ret;
}

/* ip link add @a type veth peer name @b netns @peer_ns */
static inline int veth_create(const char *a, const char *b, int peer_ns)
{
	static char msg[1024] __attribute__((aligned(4)));
	struct nlmsghdr *n = (struct nlmsghdr *)msg;
	struct ifinfomsg *ifi = NLMSG_DATA(n);
	struct rtattr *linkinfo, *data, *peer;
	__u32 nsfd = peer_ns;

	memset(msg, 0, sizeof(msg));
	n->nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	n->nlmsg_type = RTM_NEWLINK;
	n->nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
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
	return nl_talk(n);
}

/* ip link set @name netns @ns */
static inline int link_set_ns(const char *name, int ns)
{
	static char msg[256] __attribute__((aligned(4)));
	struct nlmsghdr *n = (struct nlmsghdr *)msg;
	struct ifinfomsg *ifi = NLMSG_DATA(n);
	__u32 nsfd = ns;

	memset(msg, 0, sizeof(msg));
	n->nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	n->nlmsg_type = RTM_NEWLINK;
	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = if_nametoindex(name);
	if (!ifi->ifi_index)
		return -1;
	nl_add(n, IFLA_NET_NS_FD, &nsfd, sizeof(nsfd));
	return nl_talk(n);
}

/* ip addr add @addr/24 dev @name (unless NULL); ip link set @name up|down */
static inline int if_set(const char *name, const char *addr, int up)
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
	if (up)
		ifr.ifr_flags |= IFF_UP;
	else
		ifr.ifr_flags &= ~IFF_UP;
	ret = ioctl(fd, SIOCSIFFLAGS, &ifr);
out:
	close(fd);
	return ret;
}

static inline int if_up(const char *name, const char *addr)
{
	return if_set(name, addr, 1);
}

/* A new network namespace with lo up (we stay where we are): its fd. */
static inline int netns_new(void)
{
	int orig, ns;

	orig = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	REQUIRE(orig >= 0, "open /proc/self/ns/net");
	REQUIRE(unshare(CLONE_NEWNET) == 0, "unshare(CLONE_NEWNET)");
	ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	REQUIRE(ns >= 0, "open the new netns");
	REQUIRE(if_up("lo", NULL) == 0, "lo up in the new netns");
	REQUIRE(setns(orig, CLONE_NEWNET) == 0, "setns back");
	close(orig);
	return ns;
}

/* ip netns exec @ns ip link set @name up|down */
static inline int if_set_in(int ns, const char *name, int up)
{
	int orig = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), ret;

	REQUIRE(orig >= 0 && setns(ns, CLONE_NEWNET) == 0, "setns");
	ret = if_set(name, NULL, up);
	REQUIRE(setns(orig, CLONE_NEWNET) == 0, "setns back");
	close(orig);
	return ret;
}

/*
 * A TCP connection from this namespace (*@client) to a listener in
 * namespace @ns (*@server): interface @a here gets @net.1, @b (already in
 * @ns) gets @net.2.
 */
/*
 * A TCP connection from here to @there (port 5001), whose listener lives
 * in the namespace @ns: *@client here, *@server there.
 */
static inline void ns_tcp_connect(int ns, const char *there, int *client,
				  int *server)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(5001) };
	int orig, l, i;

	orig = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	REQUIRE(orig >= 0, "open /proc/self/ns/net");
	REQUIRE(setns(ns, CLONE_NEWNET) == 0, "setns into the new netns");
	/* Sockets stay in the namespace they were created in. */
	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(l >= 0, "socket");
	REQUIRE(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &(int){ 1 }, sizeof(int)) == 0,
		"SO_REUSEADDR");
	inet_pton(AF_INET, there, &sin.sin_addr);
	REQUIRE(bind(l, (struct sockaddr *)&sin, sizeof(sin)) == 0 && listen(l, 1) == 0,
		"listen on %s", there);
	REQUIRE(setns(orig, CLONE_NEWNET) == 0, "setns back");
	close(orig);

	*client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(*client >= 0, "socket");
	for (i = 0; connect(*client, (struct sockaddr *)&sin, sizeof(sin)); i++) {
		REQUIRE(i < 50, "connect to %s", there);
		usleep(100000);
	}
	*server = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	REQUIRE(*server >= 0, "accept");
	close(l);
}

/* Addresses @net.1 on @a (here) and @net.2 on @b (in @ns), connected. */
static inline void ns_tcp_pair(int ns, const char *a, const char *b,
			       const char *net, int *client, int *server)
{
	char here[32], there[32];
	int orig;

	snprintf(here, sizeof(here), "%s.1", net);
	snprintf(there, sizeof(there), "%s.2", net);
	REQUIRE(if_up(a, here) == 0, "configure %s", a);
	orig = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	REQUIRE(orig >= 0, "open /proc/self/ns/net");
	REQUIRE(setns(ns, CLONE_NEWNET) == 0, "setns into the new netns");
	REQUIRE(if_up(b, there) == 0, "configure %s", b);
	REQUIRE(setns(orig, CLONE_NEWNET) == 0, "setns back");
	close(orig);
	ns_tcp_connect(ns, there, client, server);
	printf("%s (here, %s) <-> %s (other netns, %s)\n", a, here, b, there);
}

/* TCP over a veth pair into a new namespace: the container case. */
static inline void veth_pair(int *client, int *server)
{
	char a[IFNAMSIZ], b[IFNAMSIZ];
	int ns = netns_new();

	snprintf(a, sizeof(a), "ssv%d", getpid() % 100000);
	snprintf(b, sizeof(b), "ssp%d", getpid() % 100000);
	REQUIRE(veth_create(a, b, ns) == 0, "RTM_NEWLINK veth %s/%s", a, b);
	ns_tcp_pair(ns, a, b, "10.199.0", client, server);
	close(ns);
}

/*
 * The first two NICs bound to virtio_net (the harness joins them on a
 * bridge of taps, or with a QEMU hub) into @names; how many were found (waits up to 5 s for two).
 */
static inline int virtio_nics(char names[2][IFNAMSIZ])
{
	char link[256], path[300];
	struct dirent *d;
	double end = now_s() + 5;
	int n;
	DIR *dir;

	do {
		n = 0;
		dir = opendir("/sys/class/net");
		if (!dir)
			return 0;
		while ((d = readdir(dir)) && n < 2) {
			ssize_t l;

			snprintf(path, sizeof(path), "/sys/class/net/%s/device/driver",
				 d->d_name);
			l = readlink(path, link, sizeof(link) - 1);
			if (l < 0)
				continue;
			link[l] = 0;
			if (!strcmp(strrchr(link, '/') ?: link, "/virtio_net"))
				snprintf(names[n++], IFNAMSIZ, "%.*s", IFNAMSIZ - 1, d->d_name);
		}
		closedir(dir);
		if (n == 2)
			break;
		usleep(100000);
	} while (now_s() < end);
	if (n == 2 && strcmp(names[0], names[1]) > 0) {
		char t[IFNAMSIZ];

		memcpy(t, names[0], IFNAMSIZ);
		memcpy(names[0], names[1], IFNAMSIZ);
		memcpy(names[1], t, IFNAMSIZ);
	}
	return n;
}

/*
 * The harness backs the NICs with taps (virtio-net offers scatter-gather
 * and checksum offload, as real NICs do), or with a QEMU hub (no offloads:
 * the stack must copy to transmit) only when STABLESEND_NIC=hub asks.
 */
static inline int nic_offloads(void)
{
	char line[1024] = "";
	FILE *f = fopen("/proc/cmdline", "re");

	if (f) {
		if (!fgets(line, sizeof(line), f))
			line[0] = 0;
		fclose(f);
	}
	return !strstr(line, "ss_nic=hub");
}

/* Scatter-gather on or off (SIOCETHTOOL, ETHTOOL_SSG): 0 or -1. */
static inline int nic_set_sg(const char *name, int on)
{
	struct ethtool_value ev = { .cmd = ETHTOOL_SSG, .data = !!on };
	struct ifreq ifr = { .ifr_data = (void *)&ev };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ret;

	if (fd < 0)
		return -1;
	snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
	ret = ioctl(fd, SIOCETHTOOL, &ifr);
	close(fd);
	return ret;
}

/*
 * TCP over a real driver's transmit path: the first virtio-net NIC here
 * (named in @here_if), the second moved into a new namespace (*@ns, to
 * take its link down; named in @peer_if), addresses 10.198.0.1 and .2.
 * Returns 0 when the guest has no two virtio-net NICs.
 */
static inline int nic_pair(int *client, int *server, int *ns, char *here_if,
			   char *peer_if)
{
	char nic[2][IFNAMSIZ];

	if (virtio_nics(nic) < 2)
		return 0;
	*ns = netns_new();
	REQUIRE(link_set_ns(nic[1], *ns) == 0, "ip link set %s netns", nic[1]);
	ns_tcp_pair(*ns, nic[0], nic[1], "10.198.0", client, server);
	snprintf(here_if, IFNAMSIZ, "%s", nic[0]);
	snprintf(peer_if, IFNAMSIZ, "%s", nic[1]);
	return 1;
}

#endif
