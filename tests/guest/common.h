/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared helpers for the in-guest tests: each test is one static binary,
 * exit 0 pass, 1 fail, 77 skip (the runner adds the timeout and the dmesg
 * check).  Everything here talks to the raw ioctl ABI so the tests see
 * exactly what the kernel does.
 */
#ifndef STABLESEND_TEST_COMMON_H
#define STABLESEND_TEST_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <linux/stablesend.h>
#include <linux/tls.h>

#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif

#define SKIP 77

static int failures;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__,	\
			__LINE__, #cond);				\
		fprintf(stderr, __VA_ARGS__);				\
		fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
		failures++;						\
	}								\
} while (0)

#define REQUIRE(cond, ...) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: REQUIRE(%s) failed: ", __FILE__, \
			__LINE__, #cond);				\
		fprintf(stderr, __VA_ARGS__);				\
		fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
		exit(1);						\
	}								\
} while (0)

static inline int test_result(void)
{
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * The debug kernel (tests/run-matrix -k debug: KASAN, lockdep, kmemleak,
 * debug_pagealloc under TCG) runs tests several times slower; the harness
 * sets STABLESEND_DEBUG_KERNEL=1 there (and scales every timeout by
 * STABLESEND_TIMEOUT_SCALE).  ss_debug_scale(N) is N there and 1
 * elsewhere: divide a test's amount of work by it.
 */
static inline int ss_debug_kernel(void)
{
	struct utsname u;

	if (getenv("STABLESEND_DEBUG_KERNEL"))
		return 1;
	/* Run by hand, outside the harness. */
	if (!uname(&u) && (strstr(u.release, "debug") || strstr(u.version, "debug")))
		return 1;
	return access("/sys/kernel/debug/kmemleak", F_OK) == 0 ||
	       access("/proc/sys/kernel/prove_locking", F_OK) == 0 ||
	       access("/sys/kernel/debug/kasan", F_OK) == 0;
}

static inline int ss_debug_scale(int factor)
{
	return ss_debug_kernel() ? factor : 1;
}

static inline int ss_dev(void)
{
	int fd = open(STABLESEND_DEVICE, O_RDWR | O_CLOEXEC);

	REQUIRE(fd >= 0, "open %s", STABLESEND_DEVICE);
	return fd;
}

static inline int ss_setup(int dev, int efd, uint64_t limit)
{
	struct stablesend_setup s = { .eventfd = efd, .mem_limit = limit };

	return ioctl(dev, STABLESEND_IOC_SETUP, &s);
}

static inline struct stablesend_req ss_req(int file, int sock, uint64_t off,
					   uint64_t len, uint64_t user_data)
{
	struct stablesend_req r = {
		.file_fd = file, .sock_fd = sock, .offset = off, .len = len,
		.user_data = user_data,
	};

	return r;
}

static inline int ss_submit(int dev, struct stablesend_req *reqs, unsigned int n)
{
	struct stablesend_submit s = {
		.reqs = (uintptr_t)reqs, .nr = n,
		.entry_size = sizeof(*reqs),
	};

	return ioctl(dev, STABLESEND_IOC_SUBMIT, &s);
}

static inline long ss_send(int dev, struct stablesend_req *r)
{
	return ioctl(dev, STABLESEND_IOC_SEND, r);
}

/* Read exactly @n completion records, waiting at most @timeout_ms for each. */
static inline int ss_reap(int dev, struct stablesend_cqe *cqe, int n,
			  int timeout_ms)
{
	int got = 0;

	while (got < n) {
		struct pollfd p = { .fd = dev, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, timeout_ms) <= 0)
			break;
		r = read(dev, cqe + got, (n - got) * sizeof(*cqe));
		if (r < 0)
			break;
		got += r / sizeof(*cqe);
	}
	return got;
}

/*
 * ss_reap(), but a poll() or read() cut short by EINTR waits on: task work
 * queued on this thread to send the rest of its requests may interrupt it.
 */
static inline int ss_reap_intr(int dev, struct stablesend_cqe *cqe, int n,
			       int timeout_ms)
{
	double end = now_s() + timeout_ms / 1000.0;
	int got = 0;

	while (got < n) {
		struct pollfd p = { .fd = dev, .events = POLLIN };
		int left = (int)((end - now_s()) * 1000), r;

		r = poll(&p, 1, left > 0 ? left : 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		r = read(dev, cqe + got, (n - got) * sizeof(*cqe));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		got += r / sizeof(*cqe);
	}
	return got;
}

static inline void ss_counters(int dev, struct stablesend_counters *c)
{
	REQUIRE(ioctl(dev, STABLESEND_IOC_COUNTERS, c) == 0, "COUNTERS");
}

/* Write @val to a sysfs/procfs/cgroup file: 0, or -1 if not all of it went. */
static inline int write_str(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ok;

	if (fd < 0)
		return -1;
	ok = write(fd, val, strlen(val)) == (ssize_t)strlen(val);
	close(fd);
	return ok ? 0 : -1;
}

/* Read at most @n - 1 bytes of such a file into @buf, NUL-terminated: 0 or -1. */
static inline int read_text(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	if (fd < 0)
		return -1;
	r = read(fd, buf, n - 1);
	close(fd);
	if (r < 0)
		return -1;
	buf[r] = 0;
	return 0;
}

/* The number after "KEY<sep>" at the start of a line of @text, or -1. */
static inline long long text_key_num(const char *text, const char *key, char sep)
{
	size_t klen = strlen(key);
	const char *p;

	for (p = text; p; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (!strncmp(p, key, klen) && p[klen] == sep)
			return strtoll(p + klen + 1, NULL, 10);
	}
	return -1;
}

/* The number after "KEY:" in an fdinfo file, or -1 when it has none. */
static inline long long fdinfo_num(pid_t pid, int fd, const char *key)
{
	char path[64], text[4096];

	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%d", (int)pid, fd);
	if (read_text(path, text, sizeof(text)) < 0)
		return -1;
	return text_key_num(text, key, ':');
}

/* Read such a file's first line (at most @n - 1 bytes) into @buf: 0 or -1. */
static inline int read_str(const char *path, char *buf, size_t n)
{
	if (read_text(path, buf, n))
		return -1;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

/* The state in a /proc .../stat file ('R', 'S', 'D', 'Z'...), 0 if unknown. */
static inline char stat_state(const char *path)
{
	char buf[512], *e;

	if (read_str(path, buf, sizeof(buf)))
		return 0;
	e = strrchr(buf, ')');
	return e && e[1] == ' ' ? e[2] : 0;
}

/* State of thread @tid of this process, 0 if unknown. */
static inline char thread_state(pid_t tid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	return stat_state(path);
}

/* State of process @pid ('Z': a zombie), 0 if unknown. */
static inline char proc_state(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return stat_state(path);
}

/* What poll() reports for @events on @fd now, without waiting. */
static inline short poll_now(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };

	return poll(&p, 1, 0) == 1 ? p.revents : 0;
}

/* A thread blocked in poll() for POLLOUT on one fd, for up to 10 s. */
struct poller {
	int fd;
	pthread_t thread;
	volatile pid_t tid;	/* its thread id, once running */
	short revents;		/* what its poll() returned */
	double woke;		/* when it returned (now_s()) */
};

static inline void *poller_fn(void *arg)
{
	struct poller *p = arg;
	struct pollfd pfd = { .fd = p->fd, .events = POLLOUT };

	p->tid = syscall(SYS_gettid);
	p->revents = poll(&pfd, 1, 10000) == 1 ? pfd.revents : 0;
	p->woke = now_s();
	return NULL;
}

/* Start one on @fd; back once it sleeps (or not within 5 s). */
static inline void poller_start(struct poller *p, int fd)
{
	memset(p, 0, sizeof(*p));
	p->fd = fd;
	REQUIRE(!pthread_create(&p->thread, NULL, poller_fn, p), "poller thread");
	for (int i = 0; i < 500 && (!p->tid || thread_state(p->tid) != 'S'); i++)
		usleep(10000);
	usleep(200000);	/* asleep in poll() by now, not on its way */
}

/*
 * Wait for the poller: how long after @since it returned with POLLOUT
 * alone, or -1 if it returned otherwise or before @since.
 */
static inline double poller_woken(struct poller *p, double since)
{
	pthread_join(p->thread, NULL);
	if (p->revents != POLLOUT || p->woke < since)
		return -1;
	return p->woke - since;
}

/* Module-wide counter from /sys/module/stablesend/stats/. */
static inline long long ss_stat(const char *name)
{
	char path[128], buf[64];
	long long v = -1;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/sys/module/stablesend/stats/%s", name);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n > 0) {
		buf[n] = 0;
		v = strtoll(buf, NULL, 10);
	}
	return v;
}

static inline void tcp_pair(int family, int *client, int *server);

/*
 * Run a little loopback traffic on every CPU.  Since 6.1 a socket buffer
 * freed on another CPU than the one that allocated it may wait on that
 * CPU's defer list until it next runs network receive processing
 * (skb_attempt_defer_free); on an idle guest that can be forever.  The
 * module kicks the CPUs for its own pages (module/rxkick.c, tested by
 * quiet.c), so only waits for the kernel's own notifications use this.
 */
static inline void poke_cpus(void)
{
	long cpu, ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t old, one;

	sched_getaffinity(0, sizeof(old), &old);
	for (cpu = 0; cpu < ncpu; cpu++) {
		char b = 0;
		int c, s;

		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		if (sched_setaffinity(0, sizeof(one), &one))
			continue;
		tcp_pair(AF_INET, &c, &s);
		if (write(c, &b, 1) == 1 && read(s, &b, 1) == 1 &&
		    write(s, &b, 1) == 1 && read(c, &b, 1) == 1)
			b = 0;
		close(c);
		close(s);
	}
	sched_setaffinity(0, sizeof(old), &old);
}

/* Wait until the module holds no request's pages; false on timeout. */
static inline int ss_drained(double timeout_s)
{
	double end = now_s() + timeout_s;

	while (now_s() < end) {
		if (ss_stat("requests_in_flight") == 0 &&
		    ss_stat("bytes_in_flight") == 0)
			return 1;
		usleep(10000);
	}
	return 0;
}

/* Wait up to @timeout_s for module statistic @name to read @want; its last value. */
static inline long long ss_stat_wait(const char *name, long long want,
				     double timeout_s)
{
	double end = now_s() + timeout_s;

	while (ss_stat(name) != want && now_s() < end)
		usleep(10000);
	return ss_stat(name);
}

/*
 * The contexts that are not this test's: 0 unless another process holds
 * the device open.  An earlier test's open goes a little after its last
 * request stops counting as in flight (its pool is freed first; tens of ms
 * on the debug kernel), so wait a while for 0 before taking the count.
 */
static inline long long ss_contexts_baseline(void)
{
	return ss_stat_wait("contexts", 0, 5);
}

/*
 * Sum of eventfd @efd's counts until it reaches @want (@timeout_s at most),
 * and what comes in 100 ms more, to catch a surplus; efd_read() is one
 * count, or 0 when none comes within @wait_ms.  A count lands just after its
 * completion record is queued, so it can trail a record already reaped.
 */
static inline uint64_t efd_read(int efd, int wait_ms)
{
	struct pollfd p = { .fd = efd, .events = POLLIN };
	uint64_t v;

	if (poll(&p, 1, wait_ms) == 1 && read(efd, &v, sizeof(v)) == sizeof(v))
		return v;
	return 0;
}

static inline uint64_t efd_count(int efd, uint64_t want, double timeout_s)
{
	double end = now_s() + timeout_s;
	uint64_t sum = 0;

	while (sum < want && now_s() < end)
		sum += efd_read(efd, 100);
	return sum + efd_read(efd, 100);
}

/* A connected TCP pair over loopback (@family AF_INET or AF_INET6). */
static inline void tcp_pair(int family, int *client, int *server)
{
	struct sockaddr_storage ss = { .ss_family = family };
	socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in)
					  : sizeof(struct sockaddr_in6);
	int l = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	REQUIRE(l >= 0, "socket");
	if (family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else
		((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
	REQUIRE(bind(l, (struct sockaddr *)&ss, len) == 0, "bind");
	REQUIRE(listen(l, 8) == 0, "listen");
	REQUIRE(getsockname(l, (struct sockaddr *)&ss, &len) == 0, "getsockname");
	*client = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(*client >= 0, "socket");
	REQUIRE(connect(*client, (struct sockaddr *)&ss, len) == 0, "connect");
	*server = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	REQUIRE(*server >= 0, "accept");
	close(l);
}

/* SO_SNDBUFFORCE (root: past wmem_max) of @bytes, which the kernel doubles. */
static inline void sndbuf_force(int fd, int bytes)
{
	REQUIRE(!setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes,
			    sizeof(bytes)), "SO_SNDBUFFORCE %d", bytes);
}

/*
 * A TCP listener on an IPv4 loopback port (its address in @sin) whose
 * accepted sockets have SO_RCVBUF @rcvbuf from the start: set before
 * listen(), so the window they announce is small from the handshake on.
 */
static inline int small_window_listener(int rcvbuf, int backlog,
					struct sockaddr_in *sin)
{
	socklen_t len = sizeof(*sin);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	REQUIRE(l >= 0, "socket");
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	REQUIRE(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) == 0,
		"SO_RCVBUF");
	REQUIRE(bind(l, (struct sockaddr *)sin, len) == 0 && listen(l, backlog) == 0 &&
		getsockname(l, (struct sockaddr *)sin, &len) == 0, "listen");
	return l;
}

/*
 * Software kTLS on TCP socket @fd: TLS 1.2 AES-GCM-128 with a fixed key,
 * IV and salt (record sequence 0), for @dir TLS_TX or TLS_RX; 0 or -1.
 */
static inline int ktls_setup(int fd, int dir)
{
	struct tls12_crypto_info_aes_gcm_128 ci;

	memset(&ci, 0, sizeof(ci));
	ci.info.version = TLS_1_2_VERSION;
	ci.info.cipher_type = TLS_CIPHER_AES_GCM_128;
	memset(ci.key, 0x5a, sizeof(ci.key));
	memset(ci.iv, 0x21, sizeof(ci.iv));
	memset(ci.salt, 0x7e, sizeof(ci.salt));
	if (setsockopt(fd, SOL_TCP, TCP_ULP, "tls", sizeof("tls")))
		return -1;
	return setsockopt(fd, SOL_TLS, dir, &ci, sizeof(ci));
}

static inline void unix_pair(int *a, int *b)
{
	int sv[2];

	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0,
		"socketpair");
	*a = sv[0];
	*b = sv[1];
}

/*
 * Read @n bytes, or until EOF or an error; short when nothing arrives for
 * 60 s (x4 on the debug kernel), saying so, where a test would hang.
 */
static inline size_t read_full(int fd, void *buf, size_t n)
{
	int wait_s = 60 * ss_debug_scale(4);
	size_t got = 0;

	while (got < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, wait_s * 1000) == 0) {
			fprintf(stderr, "read_full: nothing on fd %d for %d s after %zu of %zu bytes; module: %lld requests, %lld bytes in flight\n",
				fd, wait_s, got, n, ss_stat("requests_in_flight"),
				ss_stat("bytes_in_flight"));
			break;
		}
		r = read(fd, (char *)buf + got, n - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += r;
	}
	return got;
}

static inline void write_full(int fd, const void *buf, size_t n, off_t off)
{
	size_t done = 0;

	while (done < n) {
		ssize_t w = pwrite(fd, (const char *)buf + done, n - done,
				   off + done);

		REQUIRE(w > 0, "pwrite");
		done += w;
	}
}

/* A temporary file of @size bytes filled with @byte; returns an O_RDWR fd. */
static inline int temp_file(size_t size, int byte)
{
	char name[] = "/tmp/stablesend-XXXXXX";
	int fd = mkstemp(name);
	char *buf;

	REQUIRE(fd >= 0, "mkstemp");
	unlink(name);
	buf = malloc(size ? size : 1);
	REQUIRE(buf, "malloc");
	memset(buf, byte, size);
	write_full(fd, buf, size, 0);
	free(buf);
	return fd;
}

/*
 * A temporary file of @len bytes whose byte i is @byte_at(i) (a test's
 * payload pattern); returns an O_RDWR fd.
 */
static inline int file_with_pattern(size_t len, unsigned char (*byte_at)(size_t))
{
	unsigned char *b = malloc(len);
	int fd = temp_file(0, 0);
	size_t i;

	REQUIRE(b, "malloc");
	for (i = 0; i < len; i++)
		b[i] = byte_at(i);
	write_full(fd, b, len, 0);
	free(b);
	return fd;
}

/*
 * Index of the first of the @n bytes of @b that is not @byte_at(@pos + i),
 * i.e. that differs from the file_with_pattern() from offset @pos; @n if none.
 */
static inline size_t pattern_mismatch(const unsigned char *b, size_t n,
				      size_t pos, unsigned char (*byte_at)(size_t))
{
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i] != byte_at(pos + i))
			break;
	return i;
}

/* How many of the @n bytes at @b, from the first, are @byte. */
static inline size_t bytes_of(const unsigned char *b, size_t n, int byte)
{
	size_t i;

	for (i = 0; i < n && b[i] == byte; i++)
		;
	return i;
}

static inline void set_rcvbuf_small(int fd)
{
	int v = 4096;

	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

#endif
