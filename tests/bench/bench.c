// SPDX-License-Identifier: GPL-2.0
/*
 * bench: stablesend side by side with every way Linux sends a file
 * (design.md section 7, issues 4 and 19).
 *
 * Guest mode (default): one run, every method interleaved
 *	for transport: for run: for size: for method (rotated per run)
 * so that drift hits all methods alike.  A forked receiver drains each
 * connection in its own process (in another network namespace for veth)
 * and checks what it gets against the file (every byte of the untimed
 * warm-up cells, a 4 KiB window in every 64 KiB of the timed ones).
 * Setup (buffers, rings, registrations, device opens) happens before a
 * cell's clock starts; a cell ends when the receiver has every byte and
 * the method's memory is reusable again.  CPU time comes from one
 * SCHED_IDLE soaker thread per CPU: busy = wall - what the soakers got.
 * One CSV row per cell goes to stdout, prefixed with "@csv ".
 *
 * Report mode (host or guest): bench --report FILE.csv [--plot DIR]
 * prints medians, ratios and the issues' targets, and writes gnuplot data.
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
#include "bench.h"

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

/* The file's content: the 8-byte word at offset o holds o ^ PATTERN. */
#define PATTERN 0x5354424c53454e44ULL

/* ------------------------------------------------------------------ */
/* methods, transports, sizes                                          */

enum { M_PREAD, M_SENDFILE, M_SPLICE, M_ZC, M_URING, M_SAMBA, M_SS_SYNC,
       M_SS_ASYNC, M_SS_URING, NMETH };
static const char *const mname[NMETH] = {
	"pread+send", "sendfile", "splice", "pread+zerocopy", "io_uring",
	"samba-path", "stablesend-sync", "stablesend-async", "stablesend-uring",
};

const char *const tname[NTRANS] = { "tcp-lo", "tcp-veth", "unix" };

#define NSIZES 4
static const u64 sizes[NSIZES] = { 4 * KiB, 64 * KiB, 1 * MiB, 8 * MiB };
static const char *const szname[NSIZES] = { "4KiB", "64KiB", "1MiB", "8MiB" };

void die(const char *fmt, ...)
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

double now_s(void)
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
	unsigned int depth;	/* requests in flight, every pipelined method */
	u64 budget;		/* bytes per cell, requests of 64 KiB and up */
	u64 budget_small;	/* bytes per cell, 4 KiB requests */
	u64 file_size;
	u64 limit;		/* stablesend memory limit, 0: the module default */
	int uring_wait;		/* stablesend-uring: STABLESEND_URING_F_WAIT */
	int host;		/* on the host: no module expected, kernel "host:" */
	int soak;		/* CPU time from soakers (else /proc/stat) */
	int match_memory;	/* stablesend's limit depth x size, as the peers' buffers */
	const char *file_dir;	/* where the file lives (tmpfs in the guests) */
} opt = {
	.file_dir = "/tmp",
	.soak = 1,
	.runs = 3,
	.depth = 8,
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
static long ncpus;

/*
 * Busy CPU time, system-wide, in ns: one soaker thread per CPU, pinned,
 * SCHED_IDLE, spinning; a CPU's busy time is the wall time its soaker did
 * not get.  That counts every kernel worker, softirq and interrupt at the
 * resolution of the scheduler's clock, where /proc/stat's idle time comes
 * in 10 ms units.  The soaker is not quite invisible: CFS gives a
 * SCHED_IDLE task a weight of 3 against 1024 for a normal one, so busy time
 * reads up to 0.3% low, and a wake-up preempts the soaker instead of
 * leaving idle.  Each run measures both ends: busy time during 1 s of
 * sleep (should be about 0: soakers drifting from the wall clock, or
 * interrupts counted as idle, would show here) and the soakers' share
 * under full load (soak_leak()).
 */
struct soaker {
	pthread_t th;
	clockid_t clk;
	volatile int ready;
};

static struct soaker *soakers;

static u64 clock_ns(clockid_t clk)
{
	struct timespec ts;

	if (clock_gettime(clk, &ts))
		die("clock_gettime");
	return (u64)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void *soak(void *arg)
{
	struct soaker *s = arg;
	struct sched_param sp = { 0 };
	volatile unsigned long spin = 0;

	if (sched_setscheduler(0, SCHED_IDLE, &sp))
		die("sched_setscheduler(SCHED_IDLE)");
	if (pthread_getcpuclockid(pthread_self(), &s->clk))
		die("pthread_getcpuclockid");
	s->ready = 1;
	for (;;)
		spin++;
	return NULL;
}

/* A thread running FN(ARG) on CPU only. */
static void start_pinned(pthread_t *th, long cpu, void *(*fn)(void *), void *arg)
{
	pthread_attr_t at;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_attr_init(&at);
	pthread_attr_setaffinity_np(&at, sizeof(set), &set);
	if (pthread_create(th, &at, fn, arg))
		die("pthread_create");
	pthread_attr_destroy(&at);
}

static void soakers_start(void)
{
	long i;

	soakers = calloc(ncpus, sizeof(*soakers));
	if (!soakers)
		die("calloc");
	for (i = 0; i < ncpus; i++) {
		start_pinned(&soakers[i].th, i, soak, &soakers[i]);
		while (!soakers[i].ready)
			usleep(1000);
	}
}

/*
 * Busy ns of all CPUs together at time T_NS (CLOCK_MONOTONIC), from some
 * origin: only differences count.  Without soakers (--soak 0, for perf
 * profiles) from /proc/stat's idle and iowait, in 10 ms units.
 */
static double busy_ns(u64 t_ns)
{
	double idle = 0;
	long i;

	if (!soakers) {
		u64 v[5] = { 0 };
		char line[512];
		FILE *f = fopen("/proc/stat", "re");

		if (!f || !fgets(line, sizeof(line), f))
			die("/proc/stat");
		fclose(f);
		sscanf(line, "cpu %llu %llu %llu %llu %llu", &v[0], &v[1],
		       &v[2], &v[3], &v[4]);
		idle = (double)(v[3] + v[4]) * 1e9 / clk_tck;
	} else {
		for (i = 0; i < ncpus; i++)
			idle += clock_ns(soakers[i].clk);
	}
	return (double)t_ns * ncpus - idle;
}

/*
 * What the soakers get while every CPU also runs a normal spinning thread
 * (1 s): the share of busy time busy_ns() misses at full load.
 */
static void *spin_for(void *arg)
{
	double end = now_s() + *(double *)arg;
	volatile unsigned long spin = 0;

	while (now_s() < end)
		spin++;
	return NULL;
}

/* Busy share of the CPUs while this process sleeps 1 s. */
static double soak_idle(void)
{
	u64 t0 = clock_ns(CLOCK_MONOTONIC), t1;
	double b0 = busy_ns(t0);

	usleep(1000000);
	t1 = clock_ns(CLOCK_MONOTONIC);
	return (busy_ns(t1) - b0) / ((double)(t1 - t0) * ncpus);
}

static double soak_leak(void)
{
	pthread_t *th = calloc(ncpus, sizeof(*th));
	double len = 1, b0, b1;
	u64 t0, t1;
	long i;

	t0 = clock_ns(CLOCK_MONOTONIC);
	b0 = busy_ns(t0);
	for (i = 0; i < ncpus; i++)
		start_pinned(&th[i], i, spin_for, &len);
	for (i = 0; i < ncpus; i++)
		pthread_join(th[i], NULL);
	t1 = clock_ns(CLOCK_MONOTONIC);
	b1 = busy_ns(t1);
	free(th);
	return 1 - (b1 - b0) / ((double)(t1 - t0) * ncpus);
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

static struct conn *cur_conn;	/* the cell's, for the stall reports */

/* The sending socket's queues, for a report when something stalls. */
void sock_report(const char *why)
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

/*
 * Checking what the receiver gets.  Every request is one block of SIZE
 * bytes on the stream (in any order): its first word names its file offset
 * (a multiple of SIZE inside the file), every following word must be the
 * file's at that offset.  A full check (the untimed warm-up cells) copies
 * and checks every byte and returns the sum of the blocks' offsets, which
 * the sender compares with the offsets it sent.  A sampled check (the
 * timed cells) copies and checks the first 4 KiB of every 64 KiB of the
 * stream and discards the rest unread (MSG_TRUNC; AF_UNIX has no such
 * thing for streams, so there everything is copied, and checked in the
 * same windows): the same work for every method, 1/16 of the bytes.
 */
#define RX_WINDOW	(4 * KiB)
#define RX_STRIDE	(64 * KiB)

struct rx_cell {
	u64 bytes, size;
	unsigned int full, pad;
};

struct rx_ack {
	u64 got, t_last_ns, off_sum, blocks, checked;
	u64 bad, bad_pos, bad_got, bad_want;
};

struct rx {
	u64 size;
	u64 block;	/* the block cur_off belongs to, +1 (0: none) */
	u64 cur_off;	/* its file offset, or ~0 when it is not a valid one */
	unsigned char carry[8];
	struct rx_ack a;
};

static void rx_bad(struct rx *x, u64 q, u64 got, u64 want)
{
	if (!x->a.bad++) {
		x->a.bad_pos = q;
		x->a.bad_got = got;
		x->a.bad_want = want;
	}
}

/* The word W at stream position Q (a multiple of 8) of the cell. */
static void rx_word(struct rx *x, u64 q, u64 w)
{
	u64 k = q / x->size, r = q % x->size, o = w ^ PATTERN;

	x->a.checked += 8;
	if (x->block != k + 1) {
		x->block = k + 1;
		x->cur_off = o - r;
		if (o < r || x->cur_off % x->size ||
		    x->cur_off + x->size > opt.file_size) {
			x->cur_off = ~0ULL;
			rx_bad(x, q, w, ~0ULL);
		} else if (!r) {
			x->a.off_sum += x->cur_off;
			x->a.blocks++;
		}
		return;
	}
	if (x->cur_off != ~0ULL && w != ((x->cur_off + r) ^ PATTERN))
		rx_bad(x, q, w, (x->cur_off + r) ^ PATTERN);
}

/* N bytes at stream position POS of the cell. */
static void rx_bytes(struct rx *x, u64 pos, const unsigned char *p, size_t n)
{
	while (n) {
		u64 w, r = pos % x->size;

		/* The rest of a block whose offset is known: one compare a word. */
		if (!(pos & 7) && n >= 8 && x->block == pos / x->size + 1 &&
		    x->cur_off != ~0ULL) {
			u64 want = x->cur_off + r, j, words;

			words = (n < x->size - r ? n : x->size - r) / 8;
			for (j = 0; j < words; j++) {
				memcpy(&w, p + 8 * j, 8);
				if (w != ((want + 8 * j) ^ PATTERN))
					rx_bad(x, pos + 8 * j, w,
					       (want + 8 * j) ^ PATTERN);
			}
			x->a.checked += 8 * words;
			pos += 8 * words;
			p += 8 * words;
			n -= 8 * words;
			continue;
		}
		if (!(pos & 7) && n >= 8) {
			memcpy(&w, p, 8);
			rx_word(x, pos, w);
			pos += 8;
			p += 8;
			n -= 8;
			continue;
		}
		x->carry[pos & 7] = *p++;
		n--;
		if (!(++pos & 7)) {
			memcpy(&w, x->carry, 8);
			rx_word(x, pos - 8, w);
		}
	}
}

static void receiver(int ctl, int tr, int data)
{
	unsigned char *buf = malloc(RCV_BUF);

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
		struct rx_cell rc;
		struct rx x;
		u64 pos = 0;
		ssize_t r = read(ctl, &rc, sizeof(rc));

		if (r == 0)
			exit(0);
		if (r != sizeof(rc) || !rc.size)
			die("receiver: control");
		memset(&x, 0, sizeof(x));
		x.size = rc.size;
		while (pos < rc.bytes) {
			int win = rc.full || pos % RX_STRIDE < RX_WINDOW;
			u64 want = rc.full ? RCV_BUF :
				   win ? RX_WINDOW - pos % RX_STRIDE :
					 RX_STRIDE - pos % RX_STRIDE;

			if (want > rc.bytes - pos)
				want = rc.bytes - pos;
			if (want > RCV_BUF)
				want = RCV_BUF;
			r = recv(data, buf, want,
				 win || tr == T_UNIX ? 0 : MSG_TRUNC);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				die("receiver: recv at %llu of %llu", pos, rc.bytes);
			if (win)
				rx_bytes(&x, pos, buf, r);
			pos += r;
		}
		x.a.got = pos;
		x.a.t_last_ns = clock_ns(CLOCK_MONOTONIC);
		write_exact(ctl, &x.a, sizeof(x.a), "ctl");
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
		/* As servers set it (nginx on keep-alive connections): no Nagle wait. */
		if (setsockopt(c->sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
			die("TCP_NODELAY");
	}
}

static void conn_close(struct conn *c)
{
	int st;

	close(c->sock);
	close(c->ctl);	/* EOF: the receiver exits */
	waitpid(c->pid, &st, 0);
}

/* Announce a cell (before sending: the receiver drains meanwhile). */
static void conn_expect(struct conn *c, u64 bytes, u64 size, int full)
{
	struct rx_cell rc = { .bytes = bytes, .size = size, .full = full };

	c->target += bytes;
	write_exact(c->ctl, &rc, sizeof(rc), "ctl");
}

/*
 * The receiver has every byte of the cell: its report, checked against
 * what the cell sent (the offsets it took, for a full check).
 */
static void conn_wait(struct conn *c, const struct cell *cl, int full,
		      struct rx_ack *a)
{
	read_exact(c->ctl, a, sizeof(*a), "ack");
	if (a->bad) {
		errno = 0;
		die("%s %s %s: the receiver got wrong bytes: %llu bad words, the first at byte %llu of the cell: %#llx, want %#llx",
		    tname[c->tr], mname[cl->method], szname[cl->si], a->bad,
		    a->bad_pos, a->bad_got, a->bad_want);
	}
	/*
	 * Every block's first word was read: always in a full check, and in
	 * a sampled one when blocks are whole windows' multiples (64 KiB and
	 * up: each block starts a window).  Then the blocks are exactly the
	 * requests sent, none twice or stale from an earlier one.
	 */
	if ((full || cl->size % RX_STRIDE == 0) &&
	    (a->blocks != cl->off_n || a->off_sum != cl->off_sum)) {
		errno = 0;
		die("%s %s %s: the receiver got %llu requests (offsets summing to %llu), the cell sent %llu (%llu)",
		    tname[c->tr], mname[cl->method], szname[cl->si], a->blocks,
		    a->off_sum, cl->off_n, cl->off_sum);
	}
}

/* ------------------------------------------------------------------ */
/* cells                                                               */

int file_fd;
static int have_ss, ss_feat_ok, ss_uring_ok;
static u64 ss_default_limit;	/* the module's */
int have_uring;

u64 cell_off(struct cell *cl)
{
	u64 off = cl->next_off;

	cl->next_off += cl->size;
	if (cl->next_off + cl->size > opt.file_size)
		cl->next_off = 0;
	cl->off_sum += off;
	cl->off_n++;
	return off;
}

void cell_unoff(struct cell *cl, u64 off)
{
	cl->off_sum -= off;
	cl->off_n--;
}

static void sample_outq(struct cell *cl, u64 i)
{
	int q;

	if (i & 15)	/* the ioctl's cost spread thin, the same at every size */
		return;
	if (!ioctl(cl->c->sock, SIOCOUTQ, &q) && (u64)q > cl->peak)
		cl->peak = q;
	cl->peak_valid = 1;
}

void *big_alloc(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED)
		die("mmap %zu", n);
	memset(p, 1, n);
	return p;
}

/* A method's buffer memory: one mapping, its length in front. */
struct mem {
	size_t len;
	char *p;
};

static struct mem *mem_new(size_t len)
{
	struct mem *m = malloc(sizeof(*m));

	if (!m)
		die("malloc");
	m->len = len;
	m->p = big_alloc(len);
	return m;
}

static void mem_fini(void *state)
{
	struct mem *m = state;

	munmap(m->p, m->len);
	free(m);
}

static void m_pread_prep(struct cell *cl)
{
	if (!*cl->state)
		*cl->state = mem_new(cl->size);
}

/* pread + send: two copies, the baseline of a stable send. */
static void m_pread(struct cell *cl)
{
	char *buf = ((struct mem *)*cl->state)->p;
	u64 i;

	for (i = 0; i < cl->nreq; i++) {
		pread_exact(file_fd, buf, cl->size, cell_off(cl));
		send_exact(cl->c->sock, buf, cl->size, 0);
		sample_outq(cl, i);
	}
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

struct spl {
	int p[2];
	size_t sz;
};

static void m_splice_prep(struct cell *cl)
{
	struct spl *sp;
	int sz = 1 << 20;

	if (*cl->state)
		return;
	sp = malloc(sizeof(*sp));
	if (!sp || pipe2(sp->p, O_CLOEXEC))
		die("pipe");
	while (fcntl(sp->p[1], F_SETPIPE_SZ, sz) < 0 && sz > 65536)
		sz /= 2;
	sp->sz = fcntl(sp->p[1], F_GETPIPE_SZ);
	*cl->state = sp;
}

static void m_splice_fini(void *state)
{
	struct spl *sp = state;

	close(sp->p[0]);
	close(sp->p[1]);
	free(sp);
}

/* file -> pipe (1 MiB) -> socket. */
static void m_splice(struct cell *cl)
{
	struct spl *sp = *cl->state;
	u64 i;

	for (i = 0; i < cl->nreq; i++) {
		loff_t off = cell_off(cl);
		u64 left = cl->size;

		while (left) {
			size_t chunk = left < sp->sz ? left : sp->sz;
			ssize_t in = splice(file_fd, &off, sp->p[1], NULL,
					    chunk, SPLICE_F_MOVE);

			if (in <= 0)
				die("splice in");
			left -= in;
			while (in) {
				ssize_t o = splice(sp->p[0], NULL,
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

/* pread + send(MSG_ZEROCOPY), completions drained from the error queue. */
#define ZC_IDS 4096
struct zc {
	struct cell *cl;
	unsigned int k;			/* slots: the depth */
	u64 size;			/* of a slot */
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

static void m_zc_prep(struct cell *cl)
{
	struct zc *z = *cl->state;

	if (!z) {
		z = calloc(1, sizeof(*z));
		if (!z)
			die("calloc");
		z->k = cl->depth;
		z->size = cl->size;
		z->mem = big_alloc((size_t)z->k * cl->size);
		z->pending = calloc(z->k, sizeof(*z->pending));
		*cl->state = z;
	}
	z->cl = cl;
	z->sending = -1;
}

static void m_zc_fini(void *state)
{
	struct zc *z = state;

	munmap(z->mem, (size_t)z->k * z->size);
	free(z->pending);
	free(z);
}

/*
 * Below 16 KiB a MSG_ZEROCOPY user sends without the flag: the kernel's
 * own advice (Documentation/networking/msg_zerocopy.rst: "generally only
 * effective at writes over around 10 KB"), and what this peer does.
 */
#define ZC_MIN (16 * KiB)

static void m_zc(struct cell *cl)
{
	struct zc *z = *cl->state;
	int flags = cl->size >= ZC_MIN ? MSG_ZEROCOPY : 0;
	unsigned int s;
	u64 i;

	cl->variant = flags ? "msg_zerocopy" : "send (below 16 KiB)";

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
					 flags | MSG_NOSIGNAL);

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
			if (!flags) {
				sample_outq(cl, i);
				continue;
			}
			z->id_slot[cl->c->zc_next++ % ZC_IDS] = s;
			z->pending[s]++;
			z->npending++;
		}
		z->sending = -1;
		if (!z->pending[s])
			z->held -= cl->size;
		if (z->held > cl->peak)
			cl->peak = z->held;
		if (flags)
			zc_reap(z, 0);
	}
	while (z->held)
		zc_reap(z, 1);
	cl->peak_valid = 1;
}

#ifdef HAVE_LIBURING
int uring_init(struct io_uring *ring, unsigned int entries, int defer)
{
	struct io_uring_params p = { 0 };
	int ret = -EINVAL;

	if (defer) {
		p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
		ret = io_uring_queue_init_params(entries, ring, &p);
	}
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

	if (uring_init(&ring, 8, 1))
		return;
	p = io_uring_get_probe_ring(&ring);
	if (p && io_uring_opcode_supported(p, IORING_OP_SEND_ZC) &&
	    io_uring_opcode_supported(p, IORING_OP_SENDMSG_ZC) &&
	    io_uring_opcode_supported(p, IORING_OP_SEND) &&
	    io_uring_opcode_supported(p, IORING_OP_READ) &&
	    io_uring_opcode_supported(p, IORING_OP_READ_FIXED))
		have_uring = 1;
	if (p)
		io_uring_free_probe(p);
	io_uring_queue_exit(&ring);
}
#endif

/*
 * stablesend: one open per (transport, size, method), kept for the whole
 * transport, under the module's default memory limit (--limit to set
 * one): what its users get.  The pipelined methods keep cl->depth requests
 * unanswered (SENT not yet reaped), as the zero-copy peers keep cl->depth
 * buffers; a request's pages stay reserved after SENT until the stack lets
 * go of them, so stablesend may hold more memory than depth x size: the
 * peak column shows how much.
 */
struct ss {
	int fd;
	u64 limit;
	unsigned long long seen_cancelled;
#ifdef HAVE_LIBURING
	struct io_uring ring;
	int have_ring;
#endif
	struct stablesend_req *reqs;	/* the ring's: one per request */
	u64 *retry;			/* requests to submit again */
	u64 nreqs;
};

static int methods_pipelined(int m);

/* An open of the device with LIMIT (0: the default); *IN_FORCE: what it got. */
static int ss_open(u64 limit, u64 *in_force)
{
	struct stablesend_setup s = { .eventfd = -1, .mem_limit = limit };
	int fd = open(STABLESEND_DEVICE, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		die("open %s", STABLESEND_DEVICE);
	if (ioctl(fd, STABLESEND_IOC_SETUP, &s))
		die("STABLESEND_IOC_SETUP (limit %llu)", limit);
	if (in_force)
		*in_force = s.mem_limit;
	return fd;
}

static void ss_prep(struct cell *cl)
{
	struct ss *ss = *cl->state;

	if (!ss) {
		ss = calloc(1, sizeof(*ss));
		if (!ss)
			die("calloc");
		ss->fd = ss_open(opt.limit ? opt.limit :
				 opt.match_memory && methods_pipelined(cl->method) ?
				 (u64)cl->depth * cl->size : 0, &ss->limit);
		*cl->state = ss;
	}
#ifdef HAVE_LIBURING
	if (cl->method == M_SS_URING) {
		if (!ss->have_ring) {
			if (uring_init(&ss->ring, 2 * cl->depth, 1))
				die("io_uring for stablesend-uring");
			ss->have_ring = 1;
		}
		/* io_uring's worker may read a request late: one each. */
		if (ss->nreqs < cl->nreq) {
			free(ss->reqs);
			free(ss->retry);
			ss->reqs = calloc(cl->nreq, sizeof(*ss->reqs));
			ss->retry = calloc(cl->nreq, sizeof(*ss->retry));
			if (!ss->reqs || !ss->retry)
				die("calloc");
			ss->nreqs = cl->nreq;
		}
	}
#endif
}

static void ss_fini(void *state)
{
	struct ss *ss = state;

#ifdef HAVE_LIBURING
	if (ss->have_ring)
		io_uring_queue_exit(&ss->ring);
#endif
	close(ss->fd);
	free(ss->reqs);
	free(ss->retry);
	free(ss);
}

/*
 * Peak from the open's counters.  A request cancelled and restarted (a
 * "signal" such as io_uring's TIF_NOTIFY_SIGNAL task work interrupts a
 * synchronous wait) counts as failed and cancelled: noted, not fatal.
 */
static struct stablesend_counters ss_counters(struct cell *cl, struct ss *ss)
{
	struct stablesend_counters c;

	if (ioctl(ss->fd, STABLESEND_IOC_COUNTERS, &c))
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
	if (c.cancelled > ss->seen_cancelled) {
		fprintf(stderr, "  note: %s %s: %llu request(s) cancelled by an interrupted wait and resubmitted\n",
			mname[cl->method], szname[cl->si],
			c.cancelled - ss->seen_cancelled);
		ss->seen_cancelled = c.cancelled;
	}
	return c;
}

/*
 * The end of a stablesend cell: the last request asked for RELEASED, and
 * its record (CQE) is in, so its pages are back.  Pages of earlier
 * requests are mostly back by then too (a socket releases them in order);
 * any that are not are said, not waited for: the module kicks receive
 * processing only for pages someone waits for (README: release on quiet
 * connections), and the next cell's submissions are what would.
 */
static void ss_drained(struct cell *cl, struct ss *ss)
{
	u64 left = ss_counters(cl, ss).mem_in_use;

	if (left)
		fprintf(stderr, "  note: %s %s: %llu bytes of earlier requests still out at the last RELEASED\n",
			mname[cl->method], szname[cl->si], left);
}

/* Read completion records; the count of SENT ones.  *released: RELEASED seen. */
static unsigned int ss_reap_some(int fd, int block, struct cell *cl,
				 int *released)
{
	struct stablesend_cqe cqe[256];
	unsigned int n, i, sent = 0;
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
	for (i = 0; i < n; i++) {
		if (cqe[i].flags & STABLESEND_CQE_RELEASED) {
			*released = 1;
			continue;
		}
		if (cqe[i].res != (long long)cl->size)
			die("stablesend completion res %lld", (long long)cqe[i].res);
		sent++;
	}
	return sent;
}

static void m_ss_sync(struct cell *cl)
{
	struct ss *ss = *cl->state;
	int released = 0;
	u64 i;

	for (i = 0; i < cl->nreq; i++) {
		struct stablesend_req r = {
			.file_fd = file_fd, .sock_fd = cl->c->sock,
			.offset = cell_off(cl), .len = cl->size, .user_data = i,
		};

		if (i == cl->nreq - 1)
			r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
		while (r.len) {
			long n = ioctl(ss->fd, STABLESEND_IOC_SEND, &r);

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
	cl->t_sent = now_s();
	while (!released)
		ss_reap_some(ss->fd, 1, cl, &released);
	ss_drained(cl, ss);
}

#define SS_BATCH_MAX 64

/* Requests per submission: half the depth, 1 to SS_BATCH_MAX. */
static unsigned int ss_batch(u64 depth)
{
	u64 b = depth / 2 ? depth / 2 : 1;

	return b > SS_BATCH_MAX ? SS_BATCH_MAX : b;
}

/* Batched submissions, cl->depth requests in flight, completions by read/poll. */
static void m_ss_async(struct cell *cl)
{
	struct stablesend_req reqs[SS_BATCH_MAX];
	struct stablesend_submit sub = {
		.reqs = (uintptr_t)reqs, .entry_size = sizeof(reqs[0]),
	};
	struct ss *ss = *cl->state;
	u64 depth = cl->depth, issued = 0, inflight = 0;
	unsigned int batch = ss_batch(depth);
	int released = 0;

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
				if (issued + j == cl->nreq - 1)
					reqs[j].flags = STABLESEND_REQ_NOTIFY_RELEASE;
			}
			sub.nr = n;
			do
				k = ioctl(ss->fd, STABLESEND_IOC_SUBMIT, &sub);
			while (k < 0 && errno == EINTR);
			if (k <= 0)
				die("STABLESEND_IOC_SUBMIT");
			if ((u64)k < n) {
				/* give back the offsets of what was refused */
				cl->next_off = reqs[k].offset;
				for (j = k; j < n; j++)
					cell_unoff(cl, reqs[j].offset);
			}
			issued += k;
			inflight += k;
			inflight -= ss_reap_some(ss->fd, 0, cl, &released);
		} else {
			inflight -= ss_reap_some(ss->fd, 1, cl, &released);
		}
	}
	cl->t_sent = now_s();
	while (!released)
		ss_reap_some(ss->fd, 1, cl, &released);
	ss_drained(cl, ss);
}

#ifdef HAVE_LIBURING
/*
 * stablesend on the application's own ring (stablesend_prep_uring()), the
 * way an io_uring server writes it: cl->depth requests in flight, a batch
 * of SQEs per io_uring_submit_and_wait(), CQEs reaped as they come.  After
 * a CQE that says EAGAIN (the memory limit) the loop waits for POLLOUT on
 * the device (once the refused request fits, or 100 ms) and submits that request again.
 * --uring-wait 1 sets STABLESEND_URING_F_WAIT instead: a command at the
 * memory limit waits for memory in io_uring's worker.  Either way a
 * request that met the limit may go out after later ones.  The last
 * request asks for RELEASED, so its CQE comes when its pages are back; the
 * ring has no separate SENT for it, so this method has no SENT-only figure.
 */
static void m_ss_uring(struct cell *cl)
{
	struct ss *ss = *cl->state;
	u64 depth = cl->depth, issued = 0, inflight = 0, nretry = 0, next = 0;
	unsigned int batch = ss_batch(depth);
	int full = 0, ret;

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
			poll(&(struct pollfd){ .fd = ss->fd, .events = POLLOUT }, 1, 100);
			full = 0;
		}
		for (j = 0; j < n; j++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ss->ring);
			int fresh = !nretry;
			u64 idx = fresh ? next++ : ss->retry[--nretry];
			struct stablesend_req *q = &ss->reqs[idx];

			if (fresh) {
				stablesend_prep_req(q, file_fd, cl->c->sock,
						    cell_off(cl), cl->size, idx);
				if (idx == cl->nreq - 1)
					q->flags = STABLESEND_REQ_NOTIFY_RELEASE;
			}
			stablesend_prep_uring(sqe, ss->fd, q);
			if (opt.uring_wait)
				((struct stablesend_uring_cmd *)sqe->cmd)->flags =
					STABLESEND_URING_F_WAIT;
			sqe->user_data = idx;
		}
		issued += n;
		inflight += n;
		ret = io_uring_submit_and_wait(&ss->ring, n ? 0 : 1);
		if (ret < 0 && ret != -EINTR) {
			errno = -ret;
			die("io_uring_submit_and_wait");
		}
		io_uring_for_each_cqe(&ss->ring, head, cqe) {
			seen++;
			inflight--;
			if (cqe->res == -EAGAIN) {
				/* At the memory limit: again once memory is free. */
				ss->retry[nretry++] = cqe->user_data;
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
		io_uring_cq_advance(&ss->ring, seen);
	}
	ss_drained(cl, ss);
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
	struct diag_arg a = { .fd = ss_open(0, NULL), .r = r };
	double t0, t1, in_call = 0, min_call = 1e9, lag = 0, qt = 0, maxlag = 0;
	struct cell dc = { .c = c, .method = sync ? M_SS_SYNC : M_SS_ASYNC,
			   .si = si, .size = size };
	struct stablesend_counters cnt;
	struct rx_ack ack;
	pthread_t th;

	a.expect = nreq * (sync ? 1 : 2);
	if (pthread_create(&th, NULL, diag_reaper, &a))
		die("pthread_create");
	conn_expect(c, nreq * size, size, 0);
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

		dc.off_sum += off;
		dc.off_n++;
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
	conn_wait(c, &dc, 0, &ack);
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

/*
 * The methods.  Pipelined ones keep opt.depth requests in flight; the
 * others one at a time (a call that returns when its bytes are in the
 * socket).
 */
struct method {
	void (*prep)(struct cell *cl);
	void (*run)(struct cell *cl);
	void (*fini)(void *state);
	int pipelined;
};

static const struct method methods[NMETH] = {
	[M_PREAD] = { m_pread_prep, m_pread, mem_fini, 0 },
	[M_SENDFILE] = { NULL, m_sendfile, NULL, 0 },
	[M_SPLICE] = { m_splice_prep, m_splice, m_splice_fini, 0 },
	[M_ZC] = { m_zc_prep, m_zc, m_zc_fini, 1 },
#ifdef HAVE_LIBURING
	[M_URING] = { uring_prep, uring_run, uring_fini, 1 },
	[M_SAMBA] = { samba_prep, samba_run, uring_fini, 1 },
#endif
	[M_SS_SYNC] = { ss_prep, m_ss_sync, ss_fini, 0 },
	[M_SS_ASYNC] = { ss_prep, m_ss_async, ss_fini, 1 },
#ifdef HAVE_LIBURING
	[M_SS_URING] = { ss_prep, m_ss_uring, ss_fini, 1 },
#endif
};

static int methods_pipelined(int m)
{
	return methods[m].pipelined;
}

/* Each method's state per size, kept for one transport. */
static void *mstate[NMETH][NSIZES];

static const char *method_na(int m, int tr)
{
	switch (m) {
	case M_ZC:
		if (tr == T_UNIX)
			return "AF_UNIX has no MSG_ZEROCOPY";
		break;
	case M_URING:
	case M_SAMBA:
#ifndef HAVE_LIBURING
		return "built without liburing";
#else
		return uring_na(tr);
#endif
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
				 "/sys/module/stablesend/stats/%s", stats[i]);
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

static u64 max_u64(u64 a, u64 b)
{
	return a > b ? a : b;
}

double bench_trial(struct cell *cl, void (*fn)(struct cell *), u64 nreq)
{
	struct cell t = *cl;
	struct rx_ack a;
	u64 t0, t1;

	t.nreq = nreq;
	t.off_sum = t.off_n = 0;
	conn_expect(cl->c, nreq * cl->size, cl->size, 0);
	t0 = clock_ns(CLOCK_MONOTONIC);
	fn(&t);
	t1 = clock_ns(CLOCK_MONOTONIC);
	conn_wait(cl->c, &t, 0, &a);
	cl->next_off = t.next_off;
	return nreq * cl->size * 1e9 / (max_u64(t1, a.t_last_ns) - t0);
}

/*
 * Run one cell.  The method's prep() (buffers, rings, device opens) runs
 * before the clock starts; the clock stops when the receiver has the last
 * byte and the method returned (its memory reusable), whichever is later.
 * A warm-up cell (untimed, a quarter of the budget) checks every byte.
 */
static void run_cell(struct conn *c, int m, int si, int run, int warm)
{
	static u64 offs[NMETH][NSIZES];
	struct cell cl = {
		.c = c, .method = m, .si = si, .size = sizes[si],
		.depth = methods[m].pipelined ? opt.depth : 1,
		.state = &mstate[m][si],
	};
	u64 budget = sizes[si] < 64 * KiB ? opt.budget_small : opt.budget;
	u64 t0, t_ret, t1, t_read, bytes;
	double b0, b1, r0, r1, sys, snd, thr, sent = NAN;
	char variant[64], *p;
	struct rx_ack a;

	if (warm)
		budget = budget / 4 > 16 * MiB ? 16 * MiB : budget / 4;
	/* Every buffer of a pipelined method used twice, at least. */
	cl.nreq = budget / cl.size;
	if (cl.nreq < 2 * (u64)cl.depth)
		cl.nreq = 2 * (u64)cl.depth;
	if (cl.nreq < 2)
		cl.nreq = 2;
	bytes = cl.nreq * cl.size;
	cl.next_off = offs[m][si];
	if (m == M_ZC && !c->zc_ok)
		die("SO_ZEROCOPY refused on %s", tname[c->tr]);

	cur_conn = c;
	if (methods[m].prep)
		methods[m].prep(&cl);
	cl.off_sum = cl.off_n = 0;	/* trials in prep() were checked apart */
	r0 = proc_cpu_ns(c->pid);
	conn_expect(c, bytes, cl.size, warm);
	t0 = clock_ns(CLOCK_MONOTONIC);
	b0 = busy_ns(t0);
	methods[m].run(&cl);
	t_ret = clock_ns(CLOCK_MONOTONIC);
	conn_wait(c, &cl, warm, &a);
	t_read = clock_ns(CLOCK_MONOTONIC);
	b1 = busy_ns(t_read);
	r1 = proc_cpu_ns(c->pid);
	offs[m][si] = cl.next_off;
	cells_done++;
	if (warm)
		return;

	t1 = max_u64(t_ret, a.t_last_ns);
	thr = bytes * 1e9 / (t1 - t0);
	if (cl.t_sent > 0)
		sent = bytes * 1e9 /
		       (max_u64((u64)(cl.t_sent * 1e9), a.t_last_ns) - t0);
	sys = (b1 - b0) / bytes;
	snd = (b1 - b0 - (r1 - r0)) / bytes;
	if (snd < 0)
		snd = 0;
	fprintf(stderr, "  %-8s %-6s %-17s run %d: %9.1f MB/s", tname[c->tr],
		szname[si], mname[m], run, thr / 1e6);
	if (!isnan(sent))
		fprintf(stderr, " (at SENT %.1f)", sent / 1e6);
	fprintf(stderr, "  sys %.3f ns/B  sender %.3f ns/B  peak %lluK%s%s%s\n",
		sys, snd, cl.peak_valid ? cl.peak / 1024 : 0,
		cl.copied ? "  (copied)" : "", cl.variant ? "  " : "",
		cl.variant ? cl.variant : "");
	snprintf(variant, sizeof(variant), "%s", cl.variant ? cl.variant : "");
	for (p = variant; *p; p++)	/* a CSV field */
		if (*p == ',')
			*p = '+';
	printf("@csv %s,%ld,%s,%llu,%s,%s,%u,%d,%.0f,", kernel, ncpus,
	       tname[c->tr], cl.size, mname[m], variant, cl.depth, run, thr);
	if (!isnan(sent))
		printf("%.0f", sent);
	printf(",%.4f,%.4f,", sys, snd);
	if (cl.peak_valid)
		printf("%llu", cl.peak);
	printf(",%llu\n", a.checked);
	fflush(stdout);
}

/*
 * Copy speeds, for the one-copy bound: the kernel's (read(2) of the cached
 * file into a buffer: copy_to_user) and user space's memcpy, which an
 * emulator may run at a very different speed.
 */
static void copy_speeds(void)
{
	size_t n = 32 * MiB;
	char *a = big_alloc(n), *b = big_alloc(n);
	double best = 1e9, kbest = 1e9;
	int i;

	for (i = 0; i < 5; i++) {
		double t = now_s();

		memcpy(i & 1 ? a : b, i & 1 ? b : a, n);
		t = now_s() - t;
		if (t < best)
			best = t;
		t = now_s();
		pread_exact(file_fd, a, n, 0);
		t = now_s() - t;
		if (t < kbest)
			kbest = t;
	}
	/* keep the copies observable */
	if (a[n / 2] == 42 || b[n / 2] == 42)
		fprintf(stderr, ".");
	fprintf(stderr, "copy: kernel (read of a cached file) %.1f MB/s, user-space memcpy %.1f MB/s\n",
		n / kbest / 1e6, n / best / 1e6);
	printf("@csv %s,%ld,-,%zu,kernel-copy,,,1,%.0f,,,,,\n", kernel, ncpus, n,
	       n / kbest);
	printf("@csv %s,%ld,-,%zu,memcpy,,,1,%.0f,,,,,\n", kernel, ncpus, n,
	       n / best);
	munmap(a, n);
	munmap(b, n);
}

/*
 * The module's own copy speed: SUBMITs of 1 MiB requests to an AF_UNIX
 * socket whose buffer is already full, so that each call only takes its
 * snapshot and queues it; 8 per round, the requests cancelled after each
 * round (their pages go back to the open's pool), best of the 5 rounds
 * after the first.
 */
static void module_copy_speed(void)
{
	double best = 1e9;
	char junk[65536];
	int sv[2], round, fd;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		die("socketpair");
	if (fcntl(sv[0], F_SETFL, O_NONBLOCK))
		die("fcntl");
	/* Full down to the last byte: no request may start to go out. */
	memset(junk, 0, sizeof(junk));
	for (round = sizeof(junk); round; round /= 2)
		while (write(sv[0], junk, round) > 0)
			;
	fd = ss_open(0, NULL);
	for (round = 0; round < 6; round++) {
		double t = now_s();
		int i;

		for (i = 0; i < 8; i++) {
			struct stablesend_req q = {
				.file_fd = file_fd, .sock_fd = sv[0],
				.offset = i * MiB, .len = MiB, .user_data = 1,
			};
			struct stablesend_submit sub = {
				.reqs = (uintptr_t)&q, .nr = 1,
				.entry_size = sizeof(q),
			};

			if (ioctl(fd, STABLESEND_IOC_SUBMIT, &sub) != 1)
				die("module copy: SUBMIT");
		}
		t = now_s() - t;
		if (round && t < best)	/* the first filled the pool */
			best = t;
		/*
		 * 6.1's AF_UNIX sendpage appends to the peer's last skb even
		 * with the buffer full: the very first request may start (it
		 * stays stuck, and the later ones queue behind it).
		 */
		i = ioctl(fd, STABLESEND_IOC_CANCEL, &(unsigned long long){ 1 });
		if (i != 8 && (round || i != 7)) {
			errno = i < 0 ? errno : 0;
			die("module copy: CANCEL took %d of 8 requests (one started to go out?)", i);
		}
	}
	close(fd);
	close(sv[0]);
	close(sv[1]);
	fprintf(stderr, "copy: the module's (SUBMIT to a full socket) %.1f MB/s\n",
		8 * MiB / best / 1e6);
	printf("@csv %s,%ld,-,%llu,module-copy,,,1,%.0f,,,,,\n", kernel, ncpus,
	       8 * MiB, 8 * MiB / best);
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
"usage: bench [--quick] [--runs N] [--depth N] [--budget BYTES] [--budget-small BYTES]\n"
"             [--transports tcp-lo,tcp-veth,unix] [--methods LIST] [--sizes 4KiB,...]\n"
"             [--file-size BYTES] [--limit BYTES] [--diag RUNS] [--uring-wait 0|1]\n"
"             [--host 1] [--soak 0] [--match-memory 1] [--file-dir DIR]\n"
"       bench --report FILE.csv... [--plot DIR] [--summary FILE]\n");
	exit(2);
}

/*
 * The methods in an order of their own per cell row, the same every time
 * for the same SEED: every method follows a different one from row to
 * row, so whatever a cell leaves behind on the shared connection is not
 * always met by the same method.
 */
static void shuffle(int *order, unsigned int seed)
{
	unsigned int x = seed * 2654435761u + 12345, i, j;
	int t;

	for (i = 0; i < NMETH; i++)
		order[i] = i;
	for (i = NMETH - 1; i > 0; i--) {
		x = x * 1103515245u + 12345;
		j = (x >> 16) % (i + 1);
		t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
}

/* The file: in tmpfs, every word its own offset ^ PATTERN, read once (cached). */
static void make_file(void)
{
	char name[PATH_MAX];
	size_t chunk = 1 * MiB;
	u64 *buf = malloc(chunk), off;
	int fd;

	snprintf(name, sizeof(name), "%s/bench-file-XXXXXX", opt.file_dir);
	fd = mkstemp(name);

	if (fd < 0 || !buf)
		die("mkstemp in %s", opt.file_dir);
	for (off = 0; off < opt.file_size; off += chunk) {
		size_t j;

		for (j = 0; j < chunk / 8; j++)
			buf[j] = (off + 8 * j) ^ PATTERN;
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

int main(int argc, char **argv)
{
	struct utsname u;
	int i, tr, run, si, mi, quick = 0;

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
		else if (!strcmp(a, "--depth"))
			opt.depth = atoi(v);
		else if (!strcmp(a, "--budget"))
			opt.budget = parse_size(v);
		else if (!strcmp(a, "--budget-small"))
			opt.budget_small = parse_size(v);
		else if (!strcmp(a, "--file-size"))
			opt.file_size = parse_size(v);
		else if (!strcmp(a, "--uring-wait"))
			opt.uring_wait = atoi(v);
		else if (!strcmp(a, "--host"))
			opt.host = atoi(v);
		else if (!strcmp(a, "--soak"))
			opt.soak = atoi(v);
		else if (!strcmp(a, "--match-memory"))
			opt.match_memory = atoi(v);
		else if (!strcmp(a, "--file-dir"))
			opt.file_dir = v;
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
	if (opt.depth < 1 || opt.depth > 256) {
		fprintf(stderr, "bench: --depth must be 1 to 256\n");
		usage();
	}
	if (opt.file_size < 2 * sizes[NSIZES - 1])
		opt.file_size = 2 * sizes[NSIZES - 1];
	opt.file_size &= ~(MiB - 1);
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	clk_tck = sysconf(_SC_CLK_TCK);
	ncpus = sysconf(_SC_NPROCESSORS_ONLN);
	uname(&u);
	snprintf(kernel, sizeof(kernel), "%s%s", opt.host ? "host:" : "",
		 u.release);
	make_file();

	{
		int fd = open(STABLESEND_DEVICE, O_RDWR | O_CLOEXEC);
		struct stablesend_setup s = { .eventfd = -1 };

		if (fd >= 0) {
			have_ss = 1;
			if (ioctl(fd, STABLESEND_IOC_SETUP, &s))
				die("STABLESEND_IOC_SETUP");
			ss_default_limit = s.mem_limit;
			ss_feat_ok = (s.features & STABLESEND_FEAT_SUBMIT) &&
				     (s.features & STABLESEND_FEAT_SEND);
			ss_uring_ok = !!(s.features & STABLESEND_FEAT_URING);
			close(fd);
		}
	}
#ifdef HAVE_LIBURING
	probe_uring();
#endif
	if (opt.soak)
		soakers_start();
	fprintf(stderr, "bench: kernel %s, %ld CPUs, file %llu MiB, %d run(s), %llu MiB per cell (%llu MiB at 4 KiB), depth %u, stablesend %s default limit %llu\n",
		kernel, ncpus, opt.file_size / MiB, opt.runs, opt.budget / MiB,
		opt.budget_small / MiB, opt.depth,
		have_ss ? "present," : "absent,", ss_default_limit);
	{
		pthread_t th;

		if (pthread_create(&th, NULL, stall_watchdog, NULL))
			die("pthread_create");
	}
	printf("@csv kernel,cpus,transport,size,method,variant,depth,run,throughput_Bps,sent_throughput_Bps,sys_cpu_ns_per_byte,sender_cpu_ns_per_byte,peak_inflight_bytes,checked_bytes\n");
	if (soakers) {
		double leak = soak_leak(), idle = soak_idle();

		fprintf(stderr, "CPU time: soakers get %.2f%% of the CPUs under full load (busy time reads that much low); %.2f%% busy while idle\n",
			100 * leak, 100 * idle);
		printf("@csv %s,%ld,-,0,soak-leak,,,1,,,%.5f,,,\n", kernel, ncpus,
		       leak);
		printf("@csv %s,%ld,-,0,soak-idle,,,1,,,%.5f,,,\n", kernel, ncpus,
		       idle);
	}
	copy_speeds();
	if (have_ss && ss_feat_ok)
		module_copy_speed();
	if (have_ss)
		printf("@csv %s,%ld,-,0,mem_limit,,,1,,,,,%llu,\n", kernel, ncpus,
		       ss_default_limit);

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
				int order[NMETH];

				shuffle(order, run * NSIZES + si);
				for (i = 0; i < NMETH; i++) {
					int m = order[i];

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
		for (mi = 0; mi < NMETH; mi++)
			for (si = 0; si < NSIZES; si++)
				if (mstate[mi][si]) {
					methods[mi].fini(mstate[mi][si]);
					mstate[mi][si] = NULL;
				}
	}
	fprintf(stderr, "bench: done\n");
	return 0;
}
