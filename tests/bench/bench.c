// SPDX-License-Identifier: GPL-2.0
/*
 * bench: stablesend side by side with every way Linux sends a file
 * (design.md section 7, issue 4).
 *
 * Guest mode (default): one run, every method interleaved
 *	for transport: for run: for size: for method (rotated per run)
 * so that drift hits all methods alike.  A forked receiver drains each
 * connection in its own process (in another network namespace for veth)
 * so that its CPU time can be subtracted from the system-wide figure.
 * One CSV row per cell goes to stdout, prefixed with "@csv ".
 *
 * Report mode (host or guest): bench --report FILE.csv [--plot DIR]
 * prints medians, ratios and the issue's targets, and writes gnuplot data.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/errqueue.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <linux/veth.h>
#include <math.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/stablesend.h>
#ifdef HAVE_LIBURING
#include <liburing.h>
#include <stablesend.h>		/* stablesend_prep_uring(), inline */
#endif

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif
#ifndef SO_EE_ORIGIN_ZEROCOPY
#define SO_EE_ORIGIN_ZEROCOPY 5
#endif
#ifndef SO_EE_CODE_ZEROCOPY_COPIED
#define SO_EE_CODE_ZEROCOPY_COPIED 1
#endif

#define KiB 1024ULL
#define MiB (1024ULL * 1024)

typedef unsigned long long u64;

/* ------------------------------------------------------------------ */
/* methods, transports, sizes                                          */

enum { M_PREAD, M_SENDFILE, M_SPLICE, M_ZC, M_URING, M_SS_SYNC, M_SS_ASYNC,
       M_SS_URING, NMETH };
static const char *const mname[NMETH] = {
	"pread+send", "sendfile", "splice", "pread+zerocopy", "io_uring-zc",
	"stablesend-sync", "stablesend-async", "stablesend-uring",
};

enum { T_LO, T_VETH, T_UNIX, NTRANS };
static const char *const tname[NTRANS] = { "tcp-lo", "tcp-veth", "unix" };

#define NSIZES 4
static const u64 sizes[NSIZES] = { 4 * KiB, 64 * KiB, 1 * MiB, 8 * MiB };
static const char *const szname[NSIZES] = { "4KiB", "64KiB", "1MiB", "8MiB" };

static void die(const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "bench: ");
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (errno %d %s)\n", e, strerror(e));
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static u64 parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	switch (*end) {
	case 'k': case 'K': v *= KiB; break;
	case 'm': case 'M': v *= MiB; break;
	case 'g': case 'G': v *= 1024 * MiB; break;
	}
	return (u64)v;
}

/* ------------------------------------------------------------------ */
/* options                                                             */

static struct {
	int trans[NTRANS];
	int meth[NMETH];
	int size[NSIZES];
	int runs;
	u64 budget;		/* bytes per cell, requests of 64 KiB and up */
	u64 budget_small;	/* bytes per cell, 4 KiB requests */
	u64 file_size;
	u64 limit;		/* stablesend memory limit, 0: module default */
	int uring_release;	/* stablesend-uring: CQEs at RELEASED, depth by memory */
	int uring_wait;		/* stablesend-uring: STABLESEND_URING_F_WAIT */
	int verbose;
} opt = {
	.runs = 3,
	.budget = 64 * MiB,
	.budget_small = 8 * MiB,
	.file_size = 64 * MiB,
};

/* ------------------------------------------------------------------ */
/* small I/O helpers                                                   */

static void read_exact(int fd, void *buf, size_t n, const char *what)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, (char *)buf + got, n - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (!r)
				errno = EPIPE;
			die("read %s", what);
		}
		got += r;
	}
}

static void write_exact(int fd, const void *buf, size_t n, const char *what)
{
	size_t done = 0;

	while (done < n) {
		ssize_t w = write(fd, (const char *)buf + done, n - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("write %s", what);
		done += w;
	}
}

static void pread_exact(int fd, void *buf, size_t n, off_t off)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = pread(fd, (char *)buf + got, n - got, off + got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die("pread");
		got += r;
	}
}

static void send_exact(int fd, const void *buf, size_t n, int flags)
{
	size_t done = 0;

	while (done < n) {
		ssize_t w = send(fd, (const char *)buf + done, n - done,
				 flags | MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("send");
		done += w;
	}
}

/* ------------------------------------------------------------------ */
/* CPU accounting                                                      */

static long clk_tck;

/*
 * System-wide busy CPU time in ns: CPUs x elapsed time minus the idle and
 * iowait deltas of /proc/stat.  With NOHZ (every Debian kernel) the idle
 * figures come from the exact idle accounting in the clock's time base,
 * the same base as the receiver's schedstat; the busy fields (user, system,
 * ...) are sampled at each tick, which under an emulator that loses ticks
 * would not match.  Busy time includes every kernel worker and interrupt.
 */
static long ncpus;

static double sys_busy_ns(double t)
{
	u64 v[10] = { 0 };
	char line[512];
	FILE *f = fopen("/proc/stat", "re");

	if (!f || !fgets(line, sizeof(line), f))
		die("/proc/stat");
	fclose(f);
	sscanf(line, "cpu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
	       &v[3], &v[4]);
	return t * 1e9 * ncpus - (double)(v[3] + v[4]) * 1e9 / clk_tck;
}

/* A process's own CPU time in ns: schedstat when present, else stat. */
static double proc_cpu_ns(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
	f = fopen(path, "re");
	if (f) {
		unsigned long long ns;
		int ok = fscanf(f, "%llu", &ns) == 1;

		fclose(f);
		if (ok)
			return ns;
	}
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f || !fgets(buf, sizeof(buf), f))
		die("%s", path);
	fclose(f);
	p = strrchr(buf, ')');
	/* fields after ")": state(3) ... utime(14) stime(15) */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
			 &ut, &st) != 2)
		die("parse %s", path);
	return (double)(ut + st) * 1e9 / clk_tck;
}

/* ------------------------------------------------------------------ */
/* rtnetlink: just enough for a veth pair across two namespaces         */

struct nlbuf {
	struct nlmsghdr n;
	char space[1024];
};

static struct rtattr *rta_add(struct nlmsghdr *n, int type, const void *data,
			      int len)
{
	struct rtattr *rta = (void *)((char *)n + NLMSG_ALIGN(n->nlmsg_len));

	rta->rta_type = type;
	rta->rta_len = RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(rta), data, len);
	n->nlmsg_len = NLMSG_ALIGN(n->nlmsg_len) + RTA_ALIGN(rta->rta_len);
	return rta;
}

static void rta_end(struct nlmsghdr *n, struct rtattr *nest)
{
	nest->rta_len = (char *)n + n->nlmsg_len - (char *)nest;
}

static void nl_talk(struct nlmsghdr *n, const char *what)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	char buf[4096];
	struct nlmsghdr *h = (void *)buf;
	ssize_t r;
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);

	if (fd < 0)
		die("netlink socket");
	n->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
	n->nlmsg_seq = 1;
	if (sendto(fd, n, n->nlmsg_len, 0, (void *)&sa, sizeof(sa)) < 0)
		die("netlink send (%s)", what);
	r = recv(fd, buf, sizeof(buf), 0);
	close(fd);
	if (r < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) ||
	    h->nlmsg_type != NLMSG_ERROR)
		die("netlink reply (%s)", what);
	if (((struct nlmsgerr *)NLMSG_DATA(h))->error) {
		errno = -((struct nlmsgerr *)NLMSG_DATA(h))->error;
		die("netlink %s", what);
	}
}

/* veth pair NAME <-> PEER, the peer created in the namespace of PEER_PID. */
static void veth_create(const char *name, const char *peer, pid_t peer_pid)
{
	struct nlbuf req = { 0 };
	struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC };
	struct rtattr *li, *data, *pe;
	__u32 pid = peer_pid;

	req.n.nlmsg_len = NLMSG_LENGTH(sizeof(ifi));
	req.n.nlmsg_type = RTM_NEWLINK;
	req.n.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
	memcpy(NLMSG_DATA(&req.n), &ifi, sizeof(ifi));
	rta_add(&req.n, IFLA_IFNAME, name, strlen(name) + 1);
	li = rta_add(&req.n, IFLA_LINKINFO, NULL, 0);
	rta_add(&req.n, IFLA_INFO_KIND, "veth", 4);
	data = rta_add(&req.n, IFLA_INFO_DATA, NULL, 0);
	pe = rta_add(&req.n, VETH_INFO_PEER, &ifi, sizeof(ifi));
	rta_add(&req.n, IFLA_IFNAME, peer, strlen(peer) + 1);
	rta_add(&req.n, IFLA_NET_NS_PID, &pid, sizeof(pid));
	rta_end(&req.n, pe);
	rta_end(&req.n, data);
	rta_end(&req.n, li);
	nl_talk(&req.n, "create veth");
}

/* Give IFNAME the IPv4 address ADDR/24 and bring it up. */
static void if_setup(const char *ifname, const char *addr)
{
	unsigned int idx = if_nametoindex(ifname);
	struct nlbuf req = { 0 };
	struct ifaddrmsg ifa = { .ifa_family = AF_INET, .ifa_prefixlen = 24 };
	struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC };
	struct in_addr a;

	if (!idx)
		die("no interface %s", ifname);
	inet_pton(AF_INET, addr, &a);
	ifa.ifa_index = idx;
	req.n.nlmsg_len = NLMSG_LENGTH(sizeof(ifa));
	req.n.nlmsg_type = RTM_NEWADDR;
	req.n.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
	memcpy(NLMSG_DATA(&req.n), &ifa, sizeof(ifa));
	rta_add(&req.n, IFA_LOCAL, &a, sizeof(a));
	rta_add(&req.n, IFA_ADDRESS, &a, sizeof(a));
	nl_talk(&req.n, "add address");

	memset(&req, 0, sizeof(req));
	ifi.ifi_index = idx;
	ifi.ifi_flags = IFF_UP;
	ifi.ifi_change = IFF_UP;
	req.n.nlmsg_len = NLMSG_LENGTH(sizeof(ifi));
	req.n.nlmsg_type = RTM_NEWLINK;
	memcpy(NLMSG_DATA(&req.n), &ifi, sizeof(ifi));
	nl_talk(&req.n, "link up");
}

/* ------------------------------------------------------------------ */
/* receiver: drains in its own process                                 */

#define VETH_LOCAL	"10.213.0.1"
#define VETH_PEER	"10.213.0.2"
#define RCV_BUF		(1 * MiB)

struct conn {
	int tr;
	int sock;	/* sender's end */
	int ctl;	/* control: u64 cumulative target out, u64 ack in */
	pid_t pid;	/* receiver */
	u64 target;	/* cumulative bytes the receiver must get */
	unsigned int zc_next;	/* MSG_ZEROCOPY notification id counter */
	int zc_ok;
};

static struct conn *cur_conn;	/* the cell's, for the stall reports */

/* The sending socket's queues, for a report when something stalls. */
static void sock_report(const char *why)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	int outq = -1, notsent = -1;

	if (!cur_conn)
		return;
	ioctl(cur_conn->sock, SIOCOUTQ, &outq);
	ioctl(cur_conn->sock, SIOCOUTQNSD, &notsent);
	fprintf(stderr, "bench: %s: socket %s: %d bytes queued, %d not sent",
		why, tname[cur_conn->tr], outq, notsent);
	memset(&ti, 0, sizeof(ti));
	if (cur_conn->tr != T_UNIX &&
	    !getsockopt(cur_conn->sock, IPPROTO_TCP, TCP_INFO, &ti, &len))
		fprintf(stderr, "; tcp state %u, unacked %u, cwnd %u, retransmits %u, probes %u, backoff %u",
			ti.tcpi_state, ti.tcpi_unacked, ti.tcpi_snd_cwnd,
			ti.tcpi_retransmits, ti.tcpi_probes, ti.tcpi_backoff);
	fprintf(stderr, "\n");
}

static void receiver(int ctl, int tr, int data)
{
	char *buf = malloc(RCV_BUF);
	int flags = tr == T_UNIX ? 0 : MSG_TRUNC;
	u64 got = 0, target;

	if (!buf)
		die("malloc");
	memset(buf, 0, RCV_BUF);
	if (tr != T_UNIX) {
		struct sockaddr_in sa = { .sin_family = AF_INET };
		socklen_t len = sizeof(sa);
		char c;
		int l;

		if (tr == T_VETH) {
			if (unshare(CLONE_NEWNET))
				die("unshare(CLONE_NEWNET)");
			write_exact(ctl, "u", 1, "ctl");
			read_exact(ctl, &c, 1, "ctl");	/* veth exists */
			if_setup("ssb1", VETH_PEER);
			inet_pton(AF_INET, VETH_PEER, &sa.sin_addr);
		} else {
			sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		}
		/* after unshare(): a socket belongs to the namespace it was made in */
		l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (l < 0 || bind(l, (void *)&sa, sizeof(sa)) || listen(l, 1) ||
		    getsockname(l, (void *)&sa, &len))
			die("listen");
		write_exact(ctl, &sa.sin_port, sizeof(sa.sin_port), "ctl");
		data = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		if (data < 0)
			die("accept");
		close(l);
	}
	for (;;) {
		ssize_t r = read(ctl, &target, sizeof(target));

		if (r == 0)
			exit(0);
		if (r != sizeof(target))
			die("receiver: control");
		while (got < target) {
			size_t want = target - got < RCV_BUF ? target - got : RCV_BUF;

			r = recv(data, buf, want, flags);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				die("receiver: recv at %llu of %llu", got, target);
			got += r;
		}
		write_exact(ctl, &got, sizeof(got), "ctl");
	}
}

static void conn_open(struct conn *c, int tr)
{
	int sv[2], us[2] = { -1, -1 };
	in_port_t port;
	char ch;

	memset(c, 0, sizeof(*c));
	c->tr = tr;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		die("socketpair");
	if (tr == T_UNIX &&
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, us))
		die("socketpair");
	c->pid = fork();
	if (c->pid < 0)
		die("fork");
	if (!c->pid) {
		close(sv[0]);
		if (us[0] >= 0)
			close(us[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		receiver(sv[1], tr, us[1]);
		exit(0);
	}
	close(sv[1]);
	c->ctl = sv[0];
	if (tr == T_UNIX) {
		close(us[1]);
		c->sock = us[0];
		return;
	}
	if (tr == T_VETH) {
		read_exact(c->ctl, &ch, 1, "ctl");	/* child unshared */
		veth_create("ssb0", "ssb1", c->pid);
		write_exact(c->ctl, "v", 1, "ctl");
		if_setup("ssb0", VETH_LOCAL);
	}
	read_exact(c->ctl, &port, sizeof(port), "ctl");
	{
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = port };
		int one = 1, tries;

		inet_pton(AF_INET, tr == T_VETH ? VETH_PEER : "127.0.0.1",
			  &sa.sin_addr);
		for (tries = 0;; tries++) {
			c->sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (c->sock < 0)
				die("socket");
			if (!connect(c->sock, (void *)&sa, sizeof(sa)))
				break;
			if (tries > 50)
				die("connect to %s", tname[tr]);
			close(c->sock);
			usleep(100000);
		}
		c->zc_ok = !setsockopt(c->sock, SOL_SOCKET, SO_ZEROCOPY, &one,
				       sizeof(one));
	}
}

static void conn_close(struct conn *c)
{
	int st;

	close(c->sock);
	close(c->ctl);	/* EOF: the receiver exits */
	waitpid(c->pid, &st, 0);
}

/* Announce the bytes a cell will send (before sending: it drains meanwhile). */
static void conn_expect(struct conn *c, u64 bytes)
{
	c->target += bytes;
	write_exact(c->ctl, &c->target, sizeof(c->target), "ctl");
}

static void conn_wait(struct conn *c)
{
	u64 got;

	read_exact(c->ctl, &got, sizeof(got), "ack");
	if (got != c->target)
		die("receiver got %llu, expected %llu", got, c->target);
}

/* ------------------------------------------------------------------ */
/* cells                                                               */

static int file_fd;
static int have_ss, ss_feat_ok, ss_uring_ok;
static u64 ss_limit;	/* in force */
static int have_uring;

struct cell {
	struct conn *c;
	int method;
	int si;
	u64 size;
	u64 nreq;
	u64 next_off;	/* file offset of the next request */
	u64 peak;	/* bytes in flight, highest seen */
	int peak_valid;
	int copied;	/* zerocopy paths: the kernel reported a copy */
	const char *na;	/* not applicable: why */
};

static u64 cell_off(struct cell *cl)
{
	u64 off = cl->next_off;

	cl->next_off += cl->size;
	if (cl->next_off + cl->size > opt.file_size)
		cl->next_off = 0;
	return off;
}

static void sample_outq(struct cell *cl, u64 i)
{
	int q;

	if (cl->size < 64 * KiB && (i & 63))
		return;
	if (!ioctl(cl->c->sock, SIOCOUTQ, &q) && (u64)q > cl->peak)
		cl->peak = q;
	cl->peak_valid = 1;
}

static void *big_alloc(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED)
		die("mmap %zu", n);
	memset(p, 1, n);
	return p;
}

/* pread + send: two copies, the baseline of a stable send. */
static void m_pread(struct cell *cl)
{
	char *buf = big_alloc(cl->size);
	u64 i;

	for (i = 0; i < cl->nreq; i++) {
		pread_exact(file_fd, buf, cl->size, cell_off(cl));
		send_exact(cl->c->sock, buf, cl->size, 0);
		sample_outq(cl, i);
	}
	munmap(buf, cl->size);
}

static void m_sendfile(struct cell *cl)
{
	u64 i;

	for (i = 0; i < cl->nreq; i++) {
		off_t off = cell_off(cl);
		u64 left = cl->size;

		while (left) {
			ssize_t n = sendfile(cl->c->sock, file_fd, &off, left);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				die("sendfile");
			left -= n;
		}
		sample_outq(cl, i);
	}
}

static int splice_pipe[2] = { -1, -1 };
static size_t splice_pipe_sz;

static void m_splice(struct cell *cl)
{
	u64 i;

	if (splice_pipe[0] < 0) {
		int sz = 1 << 20;

		if (pipe2(splice_pipe, O_CLOEXEC))
			die("pipe");
		while (fcntl(splice_pipe[1], F_SETPIPE_SZ, sz) < 0 && sz > 65536)
			sz /= 2;
		splice_pipe_sz = fcntl(splice_pipe[1], F_GETPIPE_SZ);
	}
	for (i = 0; i < cl->nreq; i++) {
		loff_t off = cell_off(cl);
		u64 left = cl->size;

		while (left) {
			size_t chunk = left < splice_pipe_sz ? left : splice_pipe_sz;
			ssize_t in = splice(file_fd, &off, splice_pipe[1], NULL,
					    chunk, SPLICE_F_MOVE);

			if (in <= 0)
				die("splice in");
			left -= in;
			while (in) {
				ssize_t o = splice(splice_pipe[0], NULL,
						   cl->c->sock, NULL, in,
						   SPLICE_F_MOVE |
						   (left ? SPLICE_F_MORE : 0));

				if (o < 0 && errno == EINTR)
					continue;
				if (o <= 0)
					die("splice out");
				in -= o;
			}
		}
		sample_outq(cl, i);
	}
}

/* Slots of user memory for the zero-copy peers: as many as 16 MiB holds. */
static unsigned int nslots(u64 size)
{
	u64 lim = ss_limit ? ss_limit : 16 * MiB;
	u64 k = lim / size;

	return k < 2 ? 2 : k > 64 ? 64 : k;
}

/* pread + send(MSG_ZEROCOPY), completions drained from the error queue. */
#define ZC_IDS 4096
struct zc {
	struct cell *cl;
	unsigned int k;
	char *mem;
	unsigned int *pending;		/* per slot: send calls not completed */
	unsigned short id_slot[ZC_IDS];
	u64 held;			/* bytes in slots not completed or being sent */
	unsigned int npending;		/* send calls not completed, all slots */
	int sending;			/* the slot being sent, or -1 */
	unsigned int last_lo, last_hi;	/* the last completion range */
};

static void zc_reap(struct zc *z, int block)
{
	for (;;) {
		char control[128];
		struct msghdr msg = { .msg_control = control,
				      .msg_controllen = sizeof(control) };
		struct cmsghdr *cm;
		ssize_t r = recvmsg(z->cl->c->sock, &msg, MSG_ERRQUEUE);

		if (r < 0 && errno == EAGAIN) {
			struct pollfd p = { .fd = z->cl->c->sock, .events = 0 };

			if (!block)
				return;
			if (poll(&p, 1, 10000) <= 0) {
				sock_report("zerocopy");
				fprintf(stderr, "bench: zerocopy: %u sends, last completion %u..%u, %llu bytes held\n",
					z->cl->c->zc_next, z->last_lo, z->last_hi,
					(unsigned long long)z->held);
				die("zerocopy: no completion in 10 s");
			}
			block = 0;	/* something came: drain it, then return */
			continue;
		}
		if (r < 0)
			die("recvmsg(MSG_ERRQUEUE)");
		for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
			struct sock_extended_err *ee = (void *)CMSG_DATA(cm);
			unsigned int id;

			if (ee->ee_origin != SO_EE_ORIGIN_ZEROCOPY)
				continue;
			if (ee->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
				z->cl->copied = 1;
			z->last_lo = ee->ee_info;
			z->last_hi = ee->ee_data;
			block = 0;	/* one came: drain the rest, then return */
			for (id = ee->ee_info;; id++) {
				unsigned int s = z->id_slot[id % ZC_IDS];

				if (!z->pending[s])
					die("zerocopy: stray completion %u", id);
				/* the slot is free once sent and completed */
				if (!--z->pending[s] && (int)s != z->sending)
					z->held -= z->cl->size;
				z->npending--;
				if (id == ee->ee_data)
					break;
			}
		}
	}
}

static void m_zc(struct cell *cl)
{
	struct zc *z = calloc(1, sizeof(*z));
	unsigned int s;
	u64 i;

	z->cl = cl;
	z->k = nslots(cl->size);
	z->mem = big_alloc(z->k * cl->size);
	z->pending = calloc(z->k, sizeof(*z->pending));
	z->sending = -1;
	for (i = 0; i < cl->nreq; i++) {
		double enobufs_since = 0;
		char *buf;
		size_t done = 0;

		s = i % z->k;
		while (z->pending[s])
			zc_reap(z, 1);
		buf = z->mem + s * cl->size;
		pread_exact(file_fd, buf, cl->size, cell_off(cl));
		z->held += cl->size;
		z->sending = s;
		while (done < cl->size) {
			ssize_t w = send(cl->c->sock, buf + done, cl->size - done,
					 MSG_ZEROCOPY | MSG_NOSIGNAL);

			if (w < 0 && errno == ENOBUFS && !z->npending) {
				/*
				 * Option memory or pinned pages not back yet
				 * with no completion to wait for: retry, for
				 * 10 s at most.
				 */
				if (!enobufs_since) {
					enobufs_since = now_s();
				} else if (now_s() - enobufs_since > 10) {
					sock_report("zerocopy");
					die("send(MSG_ZEROCOPY): ENOBUFS for 10 s");
				}
				usleep(1000);
				continue;
			}
			if (w < 0 && (errno == ENOBUFS || errno == EINTR)) {
				zc_reap(z, errno == ENOBUFS);
				continue;
			}
			if (w <= 0)
				die("send(MSG_ZEROCOPY)");
			done += w;
			z->id_slot[cl->c->zc_next++ % ZC_IDS] = s;
			z->pending[s]++;
			z->npending++;
		}
		z->sending = -1;
		if (!z->pending[s])
			z->held -= cl->size;
		if (z->held > cl->peak)
			cl->peak = z->held;
		zc_reap(z, 0);
	}
	while (z->held)
		zc_reap(z, 1);
	cl->peak_valid = 1;
	munmap(z->mem, z->k * cl->size);
	free(z->pending);
	free(z);
}

#ifdef HAVE_LIBURING
/*
 * io_uring: registered buffers and files, READ_FIXED -> SEND_ZC pairs
 * linked in one chain per submission (so sends stay in order on the
 * socket), a new chain as soon as the previous one's sends are done while
 * earlier buffers wait for their notifications.
 */
enum { U_READ = 1, U_SEND = 2 };

static int uring_init(struct io_uring *ring, unsigned int entries)
{
	struct io_uring_params p = { 0 };
	int ret;

	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	ret = io_uring_queue_init_params(entries, ring, &p);
	if (ret == -EINVAL) {
		memset(&p, 0, sizeof(p));
		ret = io_uring_queue_init_params(entries, ring, &p);
	}
	return ret;
}

static void probe_uring(void)
{
	struct io_uring_probe *p;
	struct io_uring ring;

	if (uring_init(&ring, 8))
		return;
	p = io_uring_get_probe_ring(&ring);
	if (p && io_uring_opcode_supported(p, IORING_OP_SEND_ZC) &&
	    io_uring_opcode_supported(p, IORING_OP_READ_FIXED))
		have_uring = 1;
	if (p)
		io_uring_free_probe(p);
	io_uring_queue_exit(&ring);
}

static void m_uring(struct cell *cl)
{
	unsigned int k = nslots(cl->size), s, next = 0, chain = 0, reads_done = 0;
	struct io_uring ring;
	struct iovec *iov = calloc(k, sizeof(*iov));
	char *busy = calloc(k, 1);
	char *mem = big_alloc(k * cl->size);
	int fds[2] = { file_fd, cl->c->sock };
	u64 issued = 0, done = 0, held = 0;
	int ret;

	if (uring_init(&ring, 4 * k))
		die("io_uring_queue_init");
	for (s = 0; s < k; s++) {
		iov[s].iov_base = mem + s * cl->size;
		iov[s].iov_len = cl->size;
	}
	ret = io_uring_register_buffers(&ring, iov, k);
	if (ret) {
		errno = -ret;
		die("io_uring_register_buffers");
	}
	ret = io_uring_register_files(&ring, fds, 2);
	if (ret) {
		errno = -ret;
		die("io_uring_register_files");
	}
	while (done < cl->nreq || held) {
		struct io_uring_cqe *cqe;
		unsigned int head, seen = 0;

		if (!chain && issued < cl->nreq && !busy[next]) {
			/* one linked chain over the free slots, in order */
			while (issued < cl->nreq && !busy[next]) {
				struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
				u64 off = cell_off(cl);

				io_uring_prep_read_fixed(sqe, 0, iov[next].iov_base,
							 cl->size, off, next);
				sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_LINK;
				sqe->user_data = (u64)next << 8 | U_READ;
				sqe = io_uring_get_sqe(&ring);
				io_uring_prep_send_zc_fixed(sqe, 1, iov[next].iov_base,
							    cl->size, MSG_WAITALL,
							    0, next);
				sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_LINK;
				sqe->user_data = (u64)next << 8 | U_SEND;
				busy[next] = 1;
				held += cl->size;
				chain++;
				issued++;
				next = (next + 1) % k;
				if (chain * 2 + 2 > 4 * k)
					break;
			}
			if (held > cl->peak)
				cl->peak = held;
			/* the last SQE ends the chain */
			ring.sq.sqes[(ring.sq.sqe_tail - 1) & *ring.sq.kring_mask].flags &=
				~IOSQE_IO_LINK;
			/*
			 * Wait for the whole chain at once: with DEFER_TASKRUN
			 * linked requests only advance while we wait in the
			 * kernel, so waiting for one CQE would cost a system
			 * call per link.
			 */
			ret = io_uring_submit_and_wait(&ring, 2 * chain);
		} else {
			ret = io_uring_wait_cqe_nr(&ring, &cqe,
						   chain ? 2 * chain - reads_done : 1);
		}
		if (ret < 0 && ret != -EINTR) {
			errno = -ret;
			die("io_uring submit/wait");
		}
		io_uring_for_each_cqe(&ring, head, cqe) {
			unsigned int slot = cqe->user_data >> 8;

			seen++;
			if (cqe->flags & IORING_CQE_F_NOTIF) {
				busy[slot] = 0;
				held -= cl->size;
				continue;
			}
			if ((cqe->user_data & 0xff) == U_READ) {
				reads_done++;
				if (cqe->res != (int)cl->size) {
					errno = cqe->res < 0 ? -cqe->res : EIO;
					die("io_uring READ_FIXED res %d", cqe->res);
				}
				continue;
			}
			if (cqe->res != (int)cl->size) {
				errno = cqe->res < 0 ? -cqe->res : EIO;
				die("io_uring SEND_ZC res %d", cqe->res);
			}
			chain--;
			reads_done--;
			done++;
			if (!(cqe->flags & IORING_CQE_F_MORE)) {
				busy[slot] = 0;
				held -= cl->size;
			}
		}
		io_uring_cq_advance(&ring, seen);
	}
	cl->peak_valid = 1;
	io_uring_queue_exit(&ring);
	munmap(mem, k * cl->size);
	free(iov);
	free(busy);
}
#endif

/* stablesend: one open per (transport, size, mode), kept for the whole transport. */
static int ss_fds[NSIZES][3];

/* Which of a size's opens: SEND, SUBMIT or the ring. */
static int ss_slot(int method)
{
	return method == M_SS_SYNC ? 0 : method == M_SS_ASYNC ? 1 : 2;
}

static int ss_open_ctx(void)
{
	struct stablesend_setup s = { .eventfd = -1, .mem_limit = opt.limit };
	int fd = open(STABLESEND_DEVICE, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		die("open %s", STABLESEND_DEVICE);
	if (ioctl(fd, STABLESEND_IOC_SETUP, &s))
		die("STABLESEND_IOC_SETUP");
	ss_limit = s.mem_limit;
	return fd;
}

static int ss_ctx(struct cell *cl)
{
	int *fd = &ss_fds[cl->si][ss_slot(cl->method)];

	if (*fd < 0)
		*fd = ss_open_ctx();
	return *fd;
}

/*
 * Peak from the open's counters.  A request cancelled and restarted (a
 * "signal" such as io_uring's TIF_NOTIFY_SIGNAL task work interrupts a
 * synchronous wait) counts as failed and cancelled: noted, not fatal.
 */
static void ss_peak(struct cell *cl, int fd)
{
	static unsigned long long seen_cancelled[NSIZES][3];
	unsigned long long *sc = &seen_cancelled[cl->si][ss_slot(cl->method)];
	struct stablesend_counters c;

	if (ioctl(fd, STABLESEND_IOC_COUNTERS, &c))
		die("STABLESEND_IOC_COUNTERS");
	cl->peak = c.mem_peak;
	cl->peak_valid = 1;
	if (c.copied)
		cl->copied = 1;
	if (c.failed > c.cancelled) {
		errno = 0;
		die("stablesend %s %s: %llu of %llu requests failed (cancelled %llu, bytes %llu)",
		    mname[cl->method], szname[cl->si], c.failed, c.submitted,
		    c.cancelled, c.bytes_sent);
	}
	if (c.cancelled > *sc) {
		fprintf(stderr, "  note: %s %s: %llu request(s) cancelled by an interrupted wait and resubmitted\n",
			mname[cl->method], szname[cl->si], c.cancelled - *sc);
		*sc = c.cancelled;
	}
}

static void m_ss_sync(struct cell *cl)
{
	int fd = ss_ctx(cl);
	u64 i;

	for (i = 0; i < cl->nreq; i++) {
		struct stablesend_req r = {
			.file_fd = file_fd, .sock_fd = cl->c->sock,
			.offset = cell_off(cl), .len = cl->size, .user_data = i,
		};

		while (r.len) {
			long n = ioctl(fd, STABLESEND_IOC_SEND, &r);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0 || (u64)n > r.len)
				die("STABLESEND_IOC_SEND returned %ld", n);
			if ((u64)n < r.len)	/* interrupted after it started */
				fprintf(stderr, "  note: STABLESEND_IOC_SEND short: %ld of %llu\n",
					n, (u64)r.len);
			r.offset += n;
			r.len -= n;
		}
	}
	ss_peak(cl, fd);
}

#define SS_BATCH_MAX 64

static unsigned int ss_reap_some(int fd, int block, struct cell *cl)
{
	struct stablesend_cqe cqe[256];
	unsigned int n, i;
	ssize_t r;

	if (!block) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, 0) <= 0)
			return 0;
	}
	do
		r = read(fd, cqe, sizeof(cqe));
	while (r < 0 && errno == EINTR);
	if (r < 0)
		die("read completions");
	n = r / sizeof(cqe[0]);
	for (i = 0; i < n; i++)
		if (cqe[i].res != (long long)cl->size)
			die("stablesend completion res %lld", (long long)cqe[i].res);
	return n;
}

/* Batched submissions, several requests in flight, completions by read/poll. */
/*
 * Requests a pipelined stablesend cell keeps in flight: twice what the
 * limit holds (4 to 256), or with @by_memory (a completion means the
 * memory is back) what it holds (1 to 256).
 */
static u64 ss_depth(const struct cell *cl, int by_memory)
{
	u64 depth = (by_memory ? 1 : 2) * ss_limit / cl->size;

	if (depth < (by_memory ? 1 : 4))
		depth = by_memory ? 1 : 4;
	return depth > 256 ? 256 : depth;
}

/* Requests per submission: half the depth, 1 to SS_BATCH_MAX. */
static unsigned int ss_batch(u64 depth)
{
	u64 b = depth / 2 ? depth / 2 : 1;

	return b > SS_BATCH_MAX ? SS_BATCH_MAX : b;
}

static void m_ss_async(struct cell *cl)
{
	struct stablesend_req reqs[SS_BATCH_MAX];
	struct stablesend_submit sub = {
		.reqs = (uintptr_t)reqs, .entry_size = sizeof(reqs[0]),
	};
	int fd = ss_ctx(cl);
	u64 depth = ss_depth(cl, 0), issued = 0, inflight = 0;
	unsigned int batch = ss_batch(depth);

	while (issued < cl->nreq || inflight) {
		u64 n = cl->nreq - issued;

		if (n > batch)
			n = batch;
		if (n > depth - inflight)
			n = depth - inflight;
		if (n) {
			unsigned int j;
			int k;

			for (j = 0; j < n; j++) {
				memset(&reqs[j], 0, sizeof(reqs[j]));
				reqs[j].file_fd = file_fd;
				reqs[j].sock_fd = cl->c->sock;
				reqs[j].offset = cell_off(cl);
				reqs[j].len = cl->size;
				reqs[j].user_data = issued + j;
			}
			sub.nr = n;
			do
				k = ioctl(fd, STABLESEND_IOC_SUBMIT, &sub);
			while (k < 0 && errno == EINTR);
			if (k <= 0)
				die("STABLESEND_IOC_SUBMIT");
			if ((u64)k < n) {
				/* give back the offsets of what was refused */
				cl->next_off = reqs[k].offset;
			}
			issued += k;
			inflight += k;
			inflight -= ss_reap_some(fd, 0, cl);
		} else {
			inflight -= ss_reap_some(fd, 1, cl);
		}
	}
	ss_peak(cl, fd);
}

#ifdef HAVE_LIBURING
/*
 * stablesend on the application's own ring (stablesend_prep_uring()), the
 * way an io_uring server writes it: as many requests in flight as
 * stablesend-async keeps, a batch of SQEs per io_uring_submit(), CQEs
 * reaped as they come.  After a CQE that says EAGAIN the loop waits for
 * POLLOUT on the device (64 KiB free, or 100 ms) and submits it again.
 * --uring-wait 1 sets STABLESEND_URING_F_WAIT instead: a command at the
 * memory limit waits for memory in io_uring's worker.  Either way a
 * request that met the limit may go out after later ones (every request
 * of a cell carries the same bytes).
 */
static void m_ss_uring(struct cell *cl)
{
	int fd = ss_ctx(cl);
	u64 depth = ss_depth(cl, opt.uring_release), issued = 0, inflight = 0;
	unsigned int batch = ss_batch(depth);
	struct stablesend_req *reqs;
	struct io_uring ring;
	int full = 0, ret;

	/* io_uring's worker reads a waiting command's request late: one each. */
	reqs = calloc(cl->nreq, sizeof(*reqs));
	if (!reqs || uring_init(&ring, 2 * depth))
		die("io_uring for stablesend-uring");
	while (issued < cl->nreq || inflight) {
		struct io_uring_cqe *cqe;
		unsigned int head, seen = 0, j;
		u64 n = cl->nreq - issued;

		if (n > batch)
			n = batch;
		if (n > depth - inflight)
			n = depth - inflight;
		if (full) {
			/* As documented: POLLOUT on the device once 64 KiB are free. */
			poll(&(struct pollfd){ .fd = fd, .events = POLLOUT }, 1, 100);
			full = 0;
		}
		/* Read when io_uring issues them (in its worker, if they wait). */
		for (j = 0; j < n; j++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

			struct stablesend_req *q = &reqs[issued + j];

			stablesend_prep_req(q, file_fd, cl->c->sock, cell_off(cl),
					    cl->size, issued + j);
			if (opt.uring_release)
				q->flags = STABLESEND_REQ_NOTIFY_RELEASE;
			stablesend_prep_uring(sqe, fd, q);
			if (opt.uring_wait)
				((struct stablesend_uring_cmd *)sqe->cmd)->flags =
					STABLESEND_URING_F_WAIT;
			sqe->user_data = issued + j;
		}
		issued += n;
		inflight += n;
		ret = io_uring_submit_and_wait(&ring, n ? 0 : 1);
		if (ret < 0 && ret != -EINTR) {
			errno = -ret;
			die("io_uring_submit_and_wait");
		}
		full = 0;
		io_uring_for_each_cqe(&ring, head, cqe) {
			seen++;
			inflight--;
			if (cqe->res == -EAGAIN) {
				/* At the memory limit: again once memory is free. */
				issued--;
				full = 1;
				continue;
			}
			if (cqe->res != (int)cl->size) {
				errno = cqe->res < 0 ? -cqe->res : EIO;
				die("stablesend-uring: request %llu of %llu (%llu in flight): CQE res %d",
				    (u64)cqe->user_data, cl->nreq, inflight, cqe->res);
			}
		}
		io_uring_cq_advance(&ring, seen);
	}
	io_uring_queue_exit(&ring);
	free(reqs);
	ss_peak(cl, fd);
}
#endif

/*
 * --diag: where does a stablesend request spend its time?  One request per
 * call, timestamps around each call, and a thread that blocks in read() to
 * timestamp SENT and RELEASED records as they are posted.
 */
struct diag_rec {
	double t0, t1, sent, rel;
};

struct diag_arg {
	int fd;
	volatile int done;
	u64 expect;
	struct diag_rec *r;
};

static void *diag_reaper(void *p)
{
	struct diag_arg *a = p;
	u64 got = 0;

	while (got < a->expect) {
		struct stablesend_cqe cqe[64];
		ssize_t n = read(a->fd, cqe, sizeof(cqe));
		double t = now_s();
		int i;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("diag read");
		for (i = 0; i < n / (ssize_t)sizeof(cqe[0]); i++, got++) {
			if (cqe[i].flags & STABLESEND_CQE_RELEASED)
				a->r[cqe[i].user_data].rel = t;
			else
				a->r[cqe[i].user_data].sent = t;
		}
	}
	a->done = 1;
	return NULL;
}

static void diag(struct conn *c, int si, int sync)
{
	u64 size = sizes[si], budget = size < 64 * KiB ? opt.budget_small : opt.budget;
	u64 nreq = budget / size < 4 ? 4 : budget / size, i, off = 0;
	struct diag_rec *r = calloc(nreq, sizeof(*r));
	struct diag_arg a = { .fd = ss_open_ctx(), .r = r };
	double t0, t1, in_call = 0, min_call = 1e9, lag = 0, qt = 0, maxlag = 0;
	struct stablesend_counters cnt;
	pthread_t th;

	a.expect = nreq * (sync ? 1 : 2);
	if (pthread_create(&th, NULL, diag_reaper, &a))
		die("pthread_create");
	conn_expect(c, nreq * size);
	t0 = now_s();
	for (i = 0; i < nreq; i++) {
		struct stablesend_req q = {
			.file_fd = file_fd, .sock_fd = c->sock, .offset = off,
			.len = size, .user_data = i,
			.flags = STABLESEND_REQ_NOTIFY_RELEASE,
		};
		struct stablesend_submit sub = {
			.reqs = (uintptr_t)&q, .nr = 1, .entry_size = sizeof(q),
		};
		long ret;

		off = off + 2 * size > opt.file_size ? 0 : off + size;
		r[i].t0 = now_s();
		do
			ret = sync ? ioctl(a.fd, STABLESEND_IOC_SEND, &q)
				   : ioctl(a.fd, STABLESEND_IOC_SUBMIT, &sub);
		while (ret < 0 && errno == EINTR);
		r[i].t1 = now_s();
		if (ret != (sync ? (long)size : 1))
			die("diag: request returned %ld", ret);
	}
	conn_wait(c);
	t1 = now_s();
	for (i = 0; !a.done && i < 5000; i++)
		usleep(1000);
	if (!a.done)
		die("diag: RELEASED records missing after 5 s");
	pthread_join(th, NULL);
	if (ioctl(a.fd, STABLESEND_IOC_COUNTERS, &cnt))
		die("COUNTERS");
	for (i = 0; i < nreq; i++) {
		double call = r[i].t1 - r[i].t0;
		double from = sync ? r[i].t1 : r[i].sent;

		in_call += call;
		if (call < min_call)
			min_call = call;
		if (!sync)
			qt += r[i].sent - r[i].t1;
		lag += r[i].rel - from;
		if (r[i].rel - from > maxlag)
			maxlag = r[i].rel - from;
	}
	fprintf(stderr, "  diag %-8s %-6s %-5s: %7.1f MB/s; in the %s call %4.0f%% of the time (mean %.2f ms, fastest %.2f ms = %.0f MB/s); ",
		tname[c->tr], szname[si], sync ? "sync" : "async",
		nreq * size / (t1 - t0) / 1e6, sync ? "SEND" : "SUBMIT",
		100 * in_call / (t1 - t0), 1e3 * in_call / nreq, 1e3 * min_call,
		size / min_call / 1e6);
	if (!sync)
		fprintf(stderr, "queued->SENT %.2f ms; ", 1e3 * qt / nreq);
	fprintf(stderr, "%s->RELEASED mean %.2f ms, max %.2f ms; peak %llu KiB\n",
		sync ? "return" : "SENT", 1e3 * lag / nreq, 1e3 * maxlag,
		cnt.mem_peak / 1024);
	close(a.fd);
	free(r);
}

typedef void (*method_fn)(struct cell *);
static const method_fn mfn[NMETH] = {
	m_pread, m_sendfile, m_splice, m_zc,
#ifdef HAVE_LIBURING
	m_uring,
#else
	NULL,
#endif
	m_ss_sync, m_ss_async,
#ifdef HAVE_LIBURING
	m_ss_uring,
#else
	NULL,
#endif
};

static const char *method_na(int m, int tr)
{
	switch (m) {
	case M_ZC:
		if (tr == T_UNIX)
			return "AF_UNIX has no MSG_ZEROCOPY";
		break;
	case M_URING:
#ifndef HAVE_LIBURING
		return "built without liburing";
#endif
		if (!have_uring)
			return "kernel lacks io_uring SEND_ZC/READ_FIXED (or io_uring disabled)";
		if (tr == T_UNIX)
			return "AF_UNIX has no SEND_ZC";
		break;
	case M_SS_SYNC:
	case M_SS_ASYNC:
		if (!have_ss)
			return "no " STABLESEND_DEVICE;
		if (!ss_feat_ok)
			return "module lacks SEND/SUBMIT";
		break;
	case M_SS_URING:
#ifndef HAVE_LIBURING
		return "built without liburing";
#endif
		if (!have_ss)
			return "no " STABLESEND_DEVICE;
		if (!ss_uring_ok)
			return "module lacks STABLESEND_FEAT_URING";
		break;
	}
	return NULL;
}

static char kernel[128];
static int diag_mode;
static volatile unsigned long cells_done;

/*
 * No cell for 120 s (the slowest takes seconds): show the stablesend
 * counters and the blocked tasks (sysrq w, on the console), then fail,
 * instead of idling until the harness's timeout.
 */
static void *stall_watchdog(void *arg)
{
	static const char *const stats[] = {
		"requests_in_flight", "bytes_in_flight", "pool_bytes",
	};
	unsigned long seen = cells_done;
	unsigned int i, idle = 0;
	FILE *f;

	(void)arg;
	for (;; sleep(5)) {
		if (seen != cells_done) {
			seen = cells_done;
			idle = 0;
			continue;
		}
		if ((idle += 5) < 120)
			continue;
		for (i = 0; i < sizeof(stats) / sizeof(stats[0]); i++) {
			char path[128], val[64] = "?";

			snprintf(path, sizeof(path),
				 "/sys/class/misc/stablesend/stats/%s", stats[i]);
			f = fopen(path, "r");
			if (f) {
				if (!fgets(val, sizeof(val), f))
					strcpy(val, "?");
				fclose(f);
			}
			fprintf(stderr, "bench: stalled: %s %s", stats[i], val);
		}
		sock_report("stalled");
		f = fopen("/proc/sysrq-trigger", "w");
		if (f) {
			fputs("w", f);
			fclose(f);
		}
		errno = 0;
		die("no cell finished in 120 s (blocked tasks on the console)");
	}
	return NULL;
}

/* Run one cell: bytes to the receiver, timed from first send to the ack. */
static void run_cell(struct conn *c, int m, int si, int run, int warm)
{
	static u64 offs[NMETH][NSIZES];
	struct cell cl = {
		.c = c, .method = m, .si = si, .size = sizes[si],
	};
	u64 budget = sizes[si] < 64 * KiB ? opt.budget_small : opt.budget;
	double t0, t1, s0, s1, r0, r1, sys, snd;

	if (warm)
		budget = budget / 4 > 16 * MiB ? 16 * MiB : budget / 4;
	cl.nreq = budget / cl.size;
	if (cl.nreq < 2)
		cl.nreq = 2;
	cl.next_off = offs[m][si];
	if (m == M_ZC && !c->zc_ok)
		die("SO_ZEROCOPY refused on %s", tname[c->tr]);

	cur_conn = c;
	conn_expect(c, cl.nreq * cl.size);
	r0 = proc_cpu_ns(c->pid);
	t0 = now_s();
	s0 = sys_busy_ns(t0);
	mfn[m](&cl);
	conn_wait(c);
	t1 = now_s();
	s1 = sys_busy_ns(t1);
	r1 = proc_cpu_ns(c->pid);
	offs[m][si] = cl.next_off;
	cells_done++;
	if (warm)
		return;

	sys = (s1 - s0) / (cl.nreq * cl.size);
	snd = (s1 - s0 - (r1 - r0)) / (cl.nreq * cl.size);
	if (snd < 0)
		snd = 0;
	fprintf(stderr, "  %-8s %-6s %-17s run %d: %9.1f MB/s  sys %.3f ns/B  sender %.3f ns/B  peak %lluK%s\n",
		tname[c->tr], szname[si], mname[m], run,
		cl.nreq * cl.size / (t1 - t0) / 1e6, sys, snd,
		cl.peak_valid ? cl.peak / 1024 : 0, cl.copied ? "  (copied)" : "");
	printf("@csv %s,%s,%llu,%s,%d,%.0f,%.4f,%.4f,", kernel, tname[c->tr],
	       cl.size, mname[m], run, cl.nreq * cl.size / (t1 - t0), sys, snd);
	if (cl.peak_valid)
		printf("%llu", cl.peak);
	printf("\n");
	fflush(stdout);
}

static void memcpy_bw(void)
{
	size_t n = 32 * MiB;
	char *a = big_alloc(n), *b = big_alloc(n);
	double best = 1e9;
	int i;

	for (i = 0; i < 5; i++) {
		double t = now_s();

		memcpy(i & 1 ? a : b, i & 1 ? b : a, n);
		t = now_s() - t;
		if (t < best)
			best = t;
	}
	/* keep the copies observable */
	if (a[n / 2] == 42)
		fprintf(stderr, ".");
	fprintf(stderr, "memcpy: %.1f MB/s (one-copy ceiling)\n", n / best / 1e6);
	printf("@csv %s,-,%zu,memcpy,1,%.0f,,,\n", kernel, n, n / best);
	munmap(a, n);
	munmap(b, n);
}

static int parse_list(const char *arg, const char *const *names, int n,
		      int *sel)
{
	char *s = strdup(arg), *tok, *save;

	memset(sel, 0, n * sizeof(*sel));
	for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int i, found = 0;

		for (i = 0; i < n; i++)
			if (!strcmp(tok, names[i]) ||
			    (names == tname && !strcmp(tok, names[i] + 4)))
				sel[i] = found = 1;
		if (!found) {
			fprintf(stderr, "bench: unknown '%s'\n", tok);
			return -1;
		}
	}
	free(s);
	return 0;
}

int report(int argc, char **argv);

static void usage(void)
{
	fprintf(stderr,
"usage: bench [--quick] [--runs N] [--budget BYTES] [--budget-small BYTES]\n"
"             [--transports tcp-lo,tcp-veth,unix] [--methods LIST] [--sizes 4KiB,...]\n"
"             [--file-size BYTES] [--limit BYTES] [--diag RUNS]\n"
"             [--uring-wait 0|1] [--uring-release 0|1]\n"
"       bench --report FILE.csv... [--plot DIR]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct utsname u;
	int i, tr, run, si, mi, quick = 0;
	char name[] = "/tmp/bench-file-XXXXXX";

	if (argc > 1 && !strcmp(argv[1], "--report"))
		return report(argc - 2, argv + 2);
	for (i = 0; i < NTRANS; i++)
		opt.trans[i] = 1;
	for (i = 0; i < NMETH; i++)
		opt.meth[i] = 1;
	for (i = 0; i < NSIZES; i++)
		opt.size[i] = 1;
	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--quick"))
			quick = 1;
	if (quick) {
		/* one run, loopback only, half the bytes; options below override */
		opt.runs = 1;
		opt.budget /= 2;
		opt.budget_small /= 2;
		opt.trans[T_VETH] = opt.trans[T_UNIX] = 0;
	}
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--quick"))
			continue;
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--runs"))
			opt.runs = atoi(v);
		else if (!strcmp(a, "--budget"))
			opt.budget = parse_size(v);
		else if (!strcmp(a, "--budget-small"))
			opt.budget_small = parse_size(v);
		else if (!strcmp(a, "--file-size"))
			opt.file_size = parse_size(v);
		else if (!strcmp(a, "--uring-release"))
			opt.uring_release = atoi(v);
		else if (!strcmp(a, "--uring-wait"))
			opt.uring_wait = atoi(v);
		else if (!strcmp(a, "--diag"))
			diag_mode = atoi(v);
		else if (!strcmp(a, "--limit"))
			opt.limit = parse_size(v);
		else if (!strcmp(a, "--transports")) {
			if (parse_list(v, tname, NTRANS, opt.trans))
				usage();
		} else if (!strcmp(a, "--methods")) {
			if (parse_list(v, mname, NMETH, opt.meth))
				usage();
		} else if (!strcmp(a, "--sizes")) {
			if (parse_list(v, szname, NSIZES, opt.size))
				usage();
		} else
			usage();
	}
	if (opt.file_size < 2 * sizes[NSIZES - 1])
		opt.file_size = 2 * sizes[NSIZES - 1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	clk_tck = sysconf(_SC_CLK_TCK);
	ncpus = sysconf(_SC_NPROCESSORS_ONLN);
	uname(&u);
	snprintf(kernel, sizeof(kernel), "%s", u.release);

	/* the file: in tmpfs, written then read once, so in the page cache */
	{
		size_t chunk = 1 * MiB;
		char *buf = malloc(chunk);
		u64 off;
		int fd = mkstemp(name);

		if (fd < 0 || !buf)
			die("mkstemp");
		for (off = 0; off < opt.file_size; off += chunk) {
			size_t j;

			for (j = 0; j < chunk; j += 64)
				buf[j] = (char)((off >> 20) + j);
			if (pwrite(fd, buf, chunk, off) != (ssize_t)chunk)
				die("pwrite");
		}
		for (off = 0; off < opt.file_size; off += chunk)
			pread_exact(fd, buf, chunk, off);
		free(buf);
		close(fd);
		file_fd = open(name, O_RDONLY | O_CLOEXEC);
		unlink(name);
		if (file_fd < 0)
			die("open %s", name);
	}

	{
		int fd = open(STABLESEND_DEVICE, O_RDWR | O_CLOEXEC);
		struct stablesend_setup s = { .eventfd = -1, .mem_limit = opt.limit };

		if (fd >= 0) {
			have_ss = 1;
			if (ioctl(fd, STABLESEND_IOC_SETUP, &s))
				die("STABLESEND_IOC_SETUP (limit %llu)", opt.limit);
			ss_limit = s.mem_limit;
			ss_feat_ok = (s.features & STABLESEND_FEAT_SUBMIT) &&
				     (s.features & STABLESEND_FEAT_SEND);
			ss_uring_ok = !!(s.features & STABLESEND_FEAT_URING);
			close(fd);
		}
	}
#ifdef HAVE_LIBURING
	probe_uring();
#endif
	fprintf(stderr, "bench: kernel %s, %ld CPUs, file %llu MiB, %d run(s), %llu MiB per cell (%llu MiB at 4 KiB), stablesend %s limit %llu\n",
		kernel, sysconf(_SC_NPROCESSORS_ONLN), opt.file_size / MiB,
		opt.runs, opt.budget / MiB, opt.budget_small / MiB,
		have_ss ? "present," : "absent,", ss_limit);
	{
		pthread_t th;

		if (pthread_create(&th, NULL, stall_watchdog, NULL))
			die("pthread_create");
	}
	printf("@csv kernel,transport,size,method,run,throughput_Bps,sys_cpu_ns_per_byte,sender_cpu_ns_per_byte,peak_inflight_bytes\n");
	memcpy_bw();
	if (have_ss)
		printf("@csv %s,-,0,mem_limit,1,,,,%llu\n", kernel, ss_limit);

	for (tr = 0; diag_mode && have_ss && tr < NTRANS; tr++) {
		struct conn c;

		if (!opt.trans[tr])
			continue;
		conn_open(&c, tr);
		run_cell(&c, M_SENDFILE, 2, 0, 1);
		for (run = 1; run <= diag_mode; run++)
			for (si = 0; si < NSIZES; si++)
				if (opt.size[si]) {
					diag(&c, si, 0);
					diag(&c, si, 1);
				}
		conn_close(&c);
	}
	for (tr = 0; !diag_mode && tr < NTRANS; tr++) {
		struct conn c;
		int warmed[NMETH][NSIZES] = { { 0 } };

		if (!opt.trans[tr])
			continue;
		for (si = 0; si < NSIZES; si++)
			for (i = 0; i < 3; i++)
				ss_fds[si][i] = -1;
		conn_open(&c, tr);
		for (mi = 0; mi < NMETH; mi++) {
			const char *why = method_na(mi, tr);

			if (opt.meth[mi] && why)
				fprintf(stderr, "  %-8s %-17s n/a: %s\n", tname[tr],
					mname[mi], why);
		}
		/* warm the connection itself (window, buffers) */
		run_cell(&c, M_SENDFILE, 2, 0, 1);
		for (run = 1; run <= opt.runs; run++) {
			for (si = 0; si < NSIZES; si++) {
				if (!opt.size[si])
					continue;
				for (i = 0; i < NMETH; i++) {
					int m = (i + run - 1) % NMETH;

					if (!opt.meth[m] || method_na(m, tr))
						continue;
					if (!warmed[m][si]) {
						run_cell(&c, m, si, run, 1);
						warmed[m][si] = 1;
					}
					run_cell(&c, m, si, run, 0);
				}
			}
		}
		conn_close(&c);
		for (si = 0; si < NSIZES; si++)
			for (i = 0; i < 3; i++)
				if (ss_fds[si][i] >= 0)
					close(ss_fds[si][i]);
	}
	if (splice_pipe[0] >= 0) {
		close(splice_pipe[0]);
		close(splice_pipe[1]);
	}
	fprintf(stderr, "bench: done\n");
	return 0;
}
