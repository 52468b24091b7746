// SPDX-License-Identifier: GPL-2.0
/*
 * sendmsg returning EAGAIN while poll says writable is not a busy loop.
 * TCP under its hard memory limit (tcp_mem lowered below what is allocated,
 * a non-reading "ballast" connection keeps the count up) with a locked
 * SO_SNDBUF: sk_wmem_schedule() fails while the socket is far under its
 * send buffer, so tcp_sendmsg() says EAGAIN and tcp_poll() says POLLOUT.
 * The test shows that state with send() first, then submits an
 * asynchronous request to the same socket (whose peer has a zero window)
 * and measures the kernel's CPU time for 3 s: more than half of one CPU
 * while nothing is sent fails (issue 13: retry after a short delay, as
 * sk_stream_wait_memory does, never requeue at once).  tcp_mem is restored
 * at the end, on every exit path.
 */
#include "common.h"
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <linux/sockios.h>

#define TCP_MEM		"/proc/sys/net/ipv4/tcp_mem"
#define PF_KTHREAD	0x00200000
#define REQ_LEN		(1 << 20)
#define MEASURE_S	3

static char saved_mem[128];

static void restore_mem(void)
{
	if (saved_mem[0] && write_str(TCP_MEM, saved_mem) == 0)
		saved_mem[0] = 0;
}

static void on_alarm(int sig)
{
	static const char msg[] = "sendagain: time limit reached\n";

	(void)sig;
	restore_mem();
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

/* TCP's memory in pages, as /proc/net/sockstat says; -1 if unknown. */
static long tcp_pages(void)
{
	char line[256];
	long mem = -1;
	FILE *f = fopen("/proc/net/sockstat", "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, " mem ");

		if (!strncmp(line, "TCP:", 4) && p)
			mem = strtol(p + 5, NULL, 10);
	}
	fclose(f);
	return mem;
}

/* Kernel time (system + irq + softirq) of all CPUs, in clock ticks. */
static unsigned long long cpu_kernel_ticks(void)
{
	unsigned long long v[7] = { 0 };
	FILE *f = fopen("/proc/stat", "re");

	if (!f)
		return 0;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
		   &v[3], &v[4], &v[5], &v[6]) != 7)
		v[2] = v[5] = v[6] = 0;
	fclose(f);
	return v[2] + v[5] + v[6];
}

/* utime + stime of task @pid (a string); @kthread gets whether it is one. */
static unsigned long long task_ticks(const char *pid, int *kthread)
{
	char path[300], buf[1024], *e;
	unsigned long long ut = 0, st = 0;
	unsigned long flags = 0;
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	e = strrchr(buf, ')');
	if (!e)
		return 0;
	/* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
	if (sscanf(e + 2, "%*c %*d %*d %*d %*d %*d %lu %*u %*u %*u %*u %llu %llu",
		   &flags, &ut, &st) != 3)
		return 0;
	*kthread = !!(flags & PF_KTHREAD) || strstr(buf, "(kworker");
	return ut + st;
}

/* Sum of utime + stime of every kernel thread, in clock ticks. */
static unsigned long long kthread_ticks(void)
{
	unsigned long long sum = 0;
	struct dirent *d;
	DIR *dir = opendir("/proc");

	if (!dir)
		return 0;
	while ((d = readdir(dir))) {
		unsigned long long t;
		int kt = 0;

		if (d->d_name[0] < '0' || d->d_name[0] > '9')
			continue;
		t = task_ticks(d->d_name, &kt);
		if (kt)
			sum += t;
	}
	closedir(dir);
	return sum;
}

static int sock_q(int fd, unsigned long req)
{
	int v = -1;

	ioctl(fd, req, &v);
	return v;
}

static volatile int rx_stop;

static void *rx_fn(void *p)
{
	static char buf[64 << 10];
	int fd = *(int *)p;

	while (!rx_stop) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		if (poll(&pfd, 1, 100) == 1 && read(fd, buf, sizeof(buf)) <= 0)
			break;
	}
	return NULL;
}

int main(void)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	long long ctx0 = ss_contexts_baseline();
	unsigned long long k0, k1, t0, t1, self0, self1, base;
	long hz = sysconf(_SC_CLK_TCK), pages;
	int l, c, s, bc, bs, v, dev, file, i, eagain = 0, kt;
	struct stablesend_req r;
	struct stablesend_cqe cqe;
	struct pollfd pfd;
	static char junk[64 << 10];
	int outq0, outq1, inq0, inq1;
	double busy, kbusy, el;
	pthread_t th;
	char self[16];

	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(self, sizeof(self), "%d", (int)getpid());
	if (read_str(TCP_MEM, saved_mem, sizeof(saved_mem)) ||
	    access(TCP_MEM, W_OK)) {
		saved_mem[0] = 0;
		printf("cannot write %s (needs root)\n", TCP_MEM);
		return SKIP;
	}
	atexit(restore_mem);
	signal(SIGALRM, on_alarm);
	alarm(100);
	file = temp_file(REQ_LEN, 'M');

	/* Ballast: a few MiB that TCP holds for a peer that never reads. */
	tcp_pair(AF_INET, &bc, &bs);
	fcntl(bc, F_SETFL, O_NONBLOCK);
	for (i = 0; i < 128; i++)
		if (send(bc, junk, sizeof(junk), MSG_NOSIGNAL) <= 0)
			break;

	/* The socket under test: locked SO_SNDBUF, a peer with a zero window. */
	l = small_window_listener(4096, 1, &sin);
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(c >= 0, "socket");
	v = 1 << 20;
	REQUIRE(setsockopt(c, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) == 0, "SO_SNDBUF");
	REQUIRE(connect(c, (struct sockaddr *)&sin, len) == 0, "connect");
	s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	REQUIRE(s >= 0, "accept");
	close(l);

	pages = tcp_pages();
	printf("tcp_mem was \"%s\"; TCP holds %ld pages (ballast %d KiB queued)\n",
	       saved_mem, pages, i * 64);
	REQUIRE(write_str(TCP_MEM, "1 1 1") == 0, "write %s", TCP_MEM);
	pages = tcp_pages();
	if (pages <= 1) {
		printf("TCP holds %ld pages: not above tcp_mem 1, cannot make memory pressure\n",
		       pages);
		restore_mem();
		return SKIP;
	}

	/* The state: send() says EAGAIN while poll() says POLLOUT. */
	for (i = 0; i < 64; i++) {
		ssize_t n = send(c, junk, sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0 && errno == EAGAIN) {
			eagain = 1;
			break;
		}
		REQUIRE(n > 0, "send under memory pressure");
		usleep(20000);
	}
	pfd.fd = c;
	pfd.events = POLLOUT;
	v = poll(&pfd, 1, 0);
	printf("under tcp_mem 1 1 1: send() %s, poll() %s; SIOCOUTQ %d, peer SIOCINQ %d\n",
	       eagain ? "EAGAIN" : "never EAGAIN",
	       v == 1 && (pfd.revents & POLLOUT) ? "POLLOUT" : "not writable",
	       sock_q(c, SIOCOUTQ), sock_q(s, SIOCINQ));
	if (!eagain || v != 1 || !(pfd.revents & POLLOUT)) {
		printf("could not make send() fail with EAGAIN while poll() says writable\n");
		restore_mem();
		return SKIP;
	}

	/* The system's kernel time without the request, for comparison. */
	k0 = cpu_kernel_ticks();
	usleep(1000000);
	base = cpu_kernel_ticks() - k0;

	dev = ss_dev();
	r = ss_req(file, c, 0, REQ_LEN, 7);
	REQUIRE(ss_submit(dev, &r, 1) == 1, "SUBMIT");
	usleep(300000);
	outq0 = sock_q(c, SIOCOUTQ);
	inq0 = sock_q(s, SIOCINQ);
	k0 = cpu_kernel_ticks();
	t0 = kthread_ticks();
	self0 = task_ticks(self, &kt);
	/* Time-based: work queued on this thread may cut a sleep short. */
	el = now_s();
	while (now_s() - el < MEASURE_S)
		usleep(100000);
	el = now_s() - el;
	k1 = cpu_kernel_ticks();
	t1 = kthread_ticks();
	self1 = task_ticks(self, &kt);
	outq1 = sock_q(c, SIOCOUTQ);
	inq1 = sock_q(s, SIOCINQ);
	pfd.revents = 0;
	v = poll(&pfd, 1, 0);
	busy = (double)(k1 - k0) / hz / el;
	kbusy = (double)(t1 - t0) / hz / el;
	printf("%d s with the request queued: kernel time %.0f%% of one CPU (idle before: %.0f%%), kernel threads %.0f%%, this process %.0f%%; SIOCOUTQ %d -> %d, peer SIOCINQ %d -> %d, poll %s\n",
	       MEASURE_S, busy * 100, (double)base / hz * 100, kbusy * 100,
	       (double)(self1 - self0) / hz / el * 100, outq0, outq1, inq0,
	       inq1, v == 1 && (pfd.revents & POLLOUT) ? "POLLOUT" : "not writable");
	CHECK(busy <= 0.5, "the kernel was busy %.0f%% of one CPU for %d s while the socket took nothing",
	      busy * 100, MEASURE_S);

	/* Back to normal: the peer reads, the request completes. */
	restore_mem();
	alarm(100);
	REQUIRE(pthread_create(&th, NULL, rx_fn, &s) == 0, "pthread_create");
	v = ss_reap(dev, &cqe, 1, 60000);
	CHECK(v == 1 && cqe.user_data == 7 && cqe.res == REQ_LEN,
	      "completion: got %d, res %lld", v, v == 1 ? (long long)cqe.res : 0LL);
	close(dev);
	close(c);
	CHECK(ss_drained(30), "still %lld requests, %lld bytes in flight",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	rx_stop = 1;
	pthread_join(th, NULL);
	close(s);
	close(bc);
	close(bs);
	CHECK(ss_stat_wait("contexts", ctx0, 10) == ctx0, "contexts %lld, expected %lld",
	      ss_stat("contexts"), ctx0);
	close(file);
	return test_result();
}
