// SPDX-License-Identifier: GPL-2.0
/*
 * Bad input: every malformed request, bad fd, bad pointer, bad length and
 * bad flag gets the errno uapi/linux/stablesend.h documents, through
 * STABLESEND_IOC_SUBMIT (a batch of one: -1/errno) and STABLESEND_IOC_SEND,
 * and leaves nothing behind: no request accepted, no byte on the wire, no
 * completion, no snapshot memory (COUNTERS, module stats).
 *
 * Then the cases that are not plain refusals: batch semantics (a bad third
 * request ends the batch at 2, the good ones complete), the memory limit
 * (EMSGSIZE for a request larger than the limit, EAGAIN on a non-blocking
 * fd at the limit and success again once memory is released), SETUP,
 * CANCEL, unknown ioctls and read(2), and files that shrink: truncated
 * after the request was built (short result, nothing past the new end of
 * file on the wire) and truncated concurrently by a thread (results never
 * longer than asked, every payload a prefix of the file's pattern; the one
 * exception is whole pages of zeros that tmpfs itself returns to a read
 * racing with truncate-then-rewrite, which a pread(2) control run after it
 * must show too, or the test fails: see classify() and pread_control()).
 *
 * "./badinput trunc" runs only the concurrent truncation case.
 *
 * test-timeout: 300
 * compat32: yes
 */
#include "watchdog.h"
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/un.h>

#define V_SUBMIT	1
#define V_SEND		2
#define V_BOTH		(V_SUBMIT | V_SEND)
#define MAX_LFS		((uint64_t)LLONG_MAX)	/* MAX_LFS_FILESIZE, 64-bit */

static int unexpected_async;	/* bad requests SUBMIT accepted anyway */
static long unexpected_bytes;	/* bytes those and SEND sent anyway */

static void fill_pat(unsigned char *b, uint64_t off, size_t n, unsigned int seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		b[i] = pat(off + i, seed);
}

/* A file of @size pattern bytes at @path (kept, so it can be reopened). */
static int pat_file(const char *path, size_t size, unsigned int seed)
{
	unsigned char *b = malloc(size);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	REQUIRE(fd >= 0 && b, "create %s", path);
	fill_pat(b, 0, size, seed);
	write_full(fd, b, size, 0);
	free(b);
	return fd;
}

/* --- SEND with a watchdog ---------------------------------------------------- */

/* --- a thread that reads a socket until EOF -------------------------------- */

struct collector {
	int fd;
	int discard;		/* count only */
	unsigned char *buf;
	size_t len, cap;
	int err;
	pthread_t th;
};

static void *collect_fn(void *p)
{
	struct collector *c = p;
	unsigned char tmp[65536];

	for (;;) {
		ssize_t r;

		if (!c->discard && c->cap - c->len < sizeof(tmp)) {
			c->cap = c->cap * 2 + sizeof(tmp);
			c->buf = realloc(c->buf, c->cap);
			if (!c->buf) {
				c->err = ENOMEM;
				break;
			}
		}
		r = read(c->fd, c->discard ? tmp : c->buf + c->len, sizeof(tmp));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			c->err = errno;
		if (r <= 0)
			break;
		c->len += r;
	}
	return NULL;
}

static void collect_start(struct collector *c, int fd, int discard)
{
	struct timeval tv = { .tv_sec = 60 };

	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->discard = discard;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	REQUIRE(pthread_create(&c->th, NULL, collect_fn, c) == 0, "pthread_create");
}

/* Close the sending end first: the collector then sees EOF. */
static void collect_end(struct collector *c)
{
	pthread_join(c->th, NULL);
	CHECK(!c->err, "receiver: read failed with %s", strerror(c->err));
}

/* --- the refusals ---------------------------------------------------------- */

static const char *ename(int e)
{
	const char *n = strerrorname_np(e);

	return n ? n : "?";
}

static void expect(const char *via, const char *name, long ret, int err, int want)
{
	errno = err;
	CHECK(ret == -1 && err == want, "%s %s: returned %ld errno %s, expected -1 %s",
	      via, name, ret, ret == -1 ? ename(err) : "-", ename(want));
	if (ret == -1 && err == want)
		printf("ok   %-6s %-46s %s\n", via, name, ename(want));
}

/* Evaluates the call before reading errno (argument order is unspecified). */
#define EXPECT(via, name, call, want) do {				\
	long ret_ = (call);						\
	int err_ = errno;						\
	expect(via, name, ret_, err_, want);				\
} while (0)

static void bad(int dev, const char *name, struct stablesend_req r, int want,
		int via)
{
	struct stablesend_req copy;
	long ret;
	int err;

	if (via & V_SUBMIT) {
		copy = r;
		ret = ss_submit(dev, &copy, 1);
		err = errno;
		expect("SUBMIT", name, ret, err, want);
		if (ret > 0)
			unexpected_async += ret;
	}
	if (via & V_SEND) {
		copy = r;
		ret = ss_send(dev, &copy);
		err = errno;
		expect("SEND", name, ret, err, want);
		if (ret > 0)
			unexpected_bytes += ret;
	}
}

static int closed_fd(void)
{
	int fd = dup(0);

	REQUIRE(fd >= 0, "dup");
	close(fd);
	return fd;
}

/* An address with nothing mapped at it. */
static void *unmapped(void)
{
	void *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	REQUIRE(p != MAP_FAILED, "mmap");
	munmap(p, 4096);
	return p;
}

/* A mapped page immediately followed by an unmapped one. */
static char *page_before_hole(void)
{
	char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	REQUIRE(p != MAP_FAILED, "mmap");
	munmap(p + 4096, 4096);
	memset(p, 'x', 4096);
	return p;
}

static int sock_of(int family, int type)
{
	int fd = socket(family, type | SOCK_CLOEXEC, 0);

	REQUIRE(fd >= 0, "socket(%d, %d)", family, type);
	return fd;
}

static void refusals(int dev, int file, const char *path, int sock)
{
	static unsigned char big[STABLESEND_HDTR_MAX + 4096];
	struct stablesend_req r, base = ss_req(file, sock, 0, 100, 1);
	char *edge = page_before_hole();
	void *hole = unmapped();
	int fd, fd2, p[2], sv[2];
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);

	/* fds that are not open */
	r = base; r.file_fd = closed_fd();
	bad(dev, "file_fd closed", r, EBADF, V_BOTH);
	r = base; r.file_fd = -1;
	bad(dev, "file_fd -1", r, EBADF, V_BOTH);
	r = base; r.sock_fd = closed_fd();
	bad(dev, "sock_fd closed", r, EBADF, V_BOTH);
	r = base; r.sock_fd = -1;
	bad(dev, "sock_fd -1", r, EBADF, V_BOTH);

	/* not regular files */
	REQUIRE(pipe2(p, O_CLOEXEC) == 0, "pipe");
	r = base; r.file_fd = p[0];
	bad(dev, "pipe (read end) as file", r, EINVAL, V_BOTH);
	fd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	REQUIRE(fd >= 0, "open /tmp");
	r = base; r.file_fd = fd;
	bad(dev, "directory as file", r, EINVAL, V_BOTH);
	close(fd);
	r = base; r.file_fd = sock;
	bad(dev, "socket as file", r, EINVAL, V_BOTH);
	fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	REQUIRE(fd >= 0, "open /dev/zero");
	r = base; r.file_fd = fd;
	bad(dev, "/dev/zero as file", r, EINVAL, V_BOTH);
	close(fd);

	/* files not open for reading */
	fd = open(path, O_WRONLY | O_CLOEXEC);
	REQUIRE(fd >= 0, "open O_WRONLY");
	r = base; r.file_fd = fd;
	bad(dev, "write-only file", r, EBADF, V_BOTH);
	close(fd);
	fd = open(path, O_PATH | O_CLOEXEC);
	REQUIRE(fd >= 0, "open O_PATH");
	r = base; r.file_fd = fd;
	bad(dev, "O_PATH file", r, EBADF, V_BOTH);
	close(fd);

	/* not sockets */
	r = base; r.sock_fd = file;
	bad(dev, "regular file as socket", r, ENOTSOCK, V_BOTH);
	r = base; r.sock_fd = p[1];
	bad(dev, "pipe as socket", r, ENOTSOCK, V_BOTH);
	r = base; r.sock_fd = dev;
	bad(dev, "the device fd as socket", r, ENOTSOCK, V_BOTH);
	close(p[0]);
	close(p[1]);

	/* sockets not connected */
	fd = sock_of(AF_INET, SOCK_STREAM);
	r = base; r.sock_fd = fd;
	bad(dev, "unconnected TCP socket", r, ENOTCONN, V_BOTH);
	close(fd);
	fd = sock_of(AF_INET6, SOCK_STREAM);
	r = base; r.sock_fd = fd;
	bad(dev, "unconnected TCP6 socket", r, ENOTCONN, V_BOTH);
	close(fd);
	fd = sock_of(AF_INET, SOCK_STREAM);
	REQUIRE(bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
		listen(fd, 4) == 0, "listen");
	r = base; r.sock_fd = fd;
	bad(dev, "listening TCP socket", r, ENOTCONN, V_BOTH);
	fd2 = sock_of(AF_UNIX, SOCK_STREAM);
	r = base; r.sock_fd = fd2;
	bad(dev, "unconnected AF_UNIX stream socket", r, ENOTCONN, V_BOTH);
	close(fd2);
	{
		struct sockaddr_un sun = { .sun_family = AF_UNIX };

		/* abstract name */
		snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1,
			 "stablesend-badinput-%d", getpid());
		fd2 = sock_of(AF_UNIX, SOCK_STREAM);
		REQUIRE(bind(fd2, (struct sockaddr *)&sun, sizeof(sun)) == 0 &&
			listen(fd2, 4) == 0, "unix listen");
		r = base; r.sock_fd = fd2;
		bad(dev, "listening AF_UNIX stream socket", r, ENOTCONN, V_BOTH);
		close(fd2);
	}

	/* socket types we do not send on */
	fd2 = sock_of(AF_INET, SOCK_DGRAM);
	r = base; r.sock_fd = fd2;
	bad(dev, "UDP socket", r, EOPNOTSUPP, V_BOTH);
	REQUIRE(getsockname(fd, (struct sockaddr *)&sin, &sl) == 0, "getsockname");
	REQUIRE(connect(fd2, (struct sockaddr *)&sin, sizeof(sin)) == 0, "udp connect");
	bad(dev, "connected UDP socket", r, EOPNOTSUPP, V_BOTH);
	close(fd2);
	close(fd);
	fd2 = sock_of(AF_INET6, SOCK_DGRAM);
	r = base; r.sock_fd = fd2;
	bad(dev, "UDP6 socket", r, EOPNOTSUPP, V_BOTH);
	close(fd2);
	REQUIRE(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
	r = base; r.sock_fd = sv[0];
	bad(dev, "AF_UNIX SOCK_DGRAM (connected pair)", r, EOPNOTSUPP, V_BOTH);
	close(sv[0]);
	close(sv[1]);
	REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
	r = base; r.sock_fd = sv[0];
	bad(dev, "AF_UNIX SOCK_SEQPACKET (connected pair)", r, EOPNOTSUPP, V_BOTH);
	close(sv[0]);
	close(sv[1]);

	/* shut down for writing */
	tcp_pair(AF_INET, &fd, &fd2);
	REQUIRE(shutdown(fd, SHUT_WR) == 0, "shutdown");
	r = base; r.sock_fd = fd;
	bad(dev, "TCP socket after shutdown(SHUT_WR)", r, EPIPE, V_BOTH);
	close(fd);
	close(fd2);
	unix_pair(&fd, &fd2);
	REQUIRE(shutdown(fd, SHUT_WR) == 0, "shutdown");
	r = base; r.sock_fd = fd;
	bad(dev, "AF_UNIX stream after shutdown(SHUT_WR)", r, EPIPE, V_BOTH);
	close(fd);
	close(fd2);

	/* offsets and lengths (the file has 10000 bytes) */
	r = base; r.offset = 10000;
	bad(dev, "offset at EOF", r, ENODATA, V_BOTH);
	r = base; r.offset = 20000;
	bad(dev, "offset past EOF", r, ENODATA, V_BOTH);
	r = base; r.offset = 10000; r.head = (uintptr_t)big; r.head_len = 10;
	bad(dev, "offset at EOF, with a header", r, ENODATA, V_BOTH);
	r = base; r.offset = UINT64_MAX - 1; r.len = 10;
	bad(dev, "offset UINT64_MAX-1 len 10 (overflow)", r, EINVAL, V_BOTH);
	r = base; r.offset = MAX_LFS + 1; r.len = 1;
	bad(dev, "offset MAX_LFS_FILESIZE+1", r, EINVAL, V_BOTH);
	r = base; r.offset = MAX_LFS - 5; r.len = 10;
	bad(dev, "offset+len past MAX_LFS_FILESIZE", r, EINVAL, V_BOTH);
	r = base; r.offset = 100; r.len = UINT64_MAX;
	bad(dev, "len UINT64_MAX", r, EINVAL, V_BOTH);
	/* the boundary itself is valid: the file is just too short */
	r = base; r.offset = MAX_LFS - 10; r.len = 10;
	bad(dev, "offset+len == MAX_LFS_FILESIZE (past EOF)", r, ENODATA, V_BOTH);
	r = base; r.len = 0;
	bad(dev, "zero length, no header or trailer", r, EINVAL, V_BOTH);
	r = base; r.head = (uintptr_t)big; r.head_len = STABLESEND_HDTR_MAX + 1;
	bad(dev, "head_len HDTR_MAX+1", r, EINVAL, V_BOTH);
	r = base; r.tail = (uintptr_t)big; r.tail_len = STABLESEND_HDTR_MAX + 1;
	bad(dev, "tail_len HDTR_MAX+1", r, EINVAL, V_BOTH);
	r = base; r.head = (uintptr_t)big; r.head_len = UINT32_MAX;
	bad(dev, "head_len UINT32_MAX", r, EINVAL, V_BOTH);

	/* reserved fields and flags */
	r = base; r.reserved = 1;
	bad(dev, "reserved != 0", r, EINVAL, V_BOTH);
	r = base; r.flags = 1U << 3;
	bad(dev, "unknown flag 1<<3", r, EINVAL, V_BOTH);
	r = base; r.flags = 1U << 31 | STABLESEND_REQ_MORE;
	bad(dev, "unknown flag 1<<31", r, EINVAL, V_BOTH);

	/* bad header and trailer pointers */
	r = base; r.head = (uintptr_t)hole; r.head_len = 10;
	bad(dev, "header pointer unmapped", r, EFAULT, V_BOTH);
	r = base; r.head = 0; r.head_len = 10;
	bad(dev, "header pointer NULL, head_len 10", r, EFAULT, V_BOTH);
	r = base; r.head = (uintptr_t)(edge + 4096 - 50); r.head_len = 100;
	bad(dev, "header running into an unmapped page", r, EFAULT, V_BOTH);
	r = base; r.tail = (uintptr_t)hole; r.tail_len = 10;
	bad(dev, "trailer pointer unmapped", r, EFAULT, V_BOTH);
	r = base; r.tail = 0; r.tail_len = 1;
	bad(dev, "trailer pointer NULL, tail_len 1", r, EFAULT, V_BOTH);
	r = base; r.head = (uintptr_t)big; r.head_len = 5000; r.tail = (uintptr_t)hole;
	r.tail_len = STABLESEND_HDTR_MAX;
	bad(dev, "valid header, trailer unmapped", r, EFAULT, V_BOTH);
	r = base; r.len = 0; r.head = 0xffffffffffff0000ULL; r.head_len = 16;
	bad(dev, "header pointer in kernel space", r, EFAULT, V_BOTH);
	munmap(edge, 4096);
}

/* The submission structure itself, and ioctl arguments that are bad pointers. */
static void bad_submit(int dev, int file, int sock)
{
	struct stablesend_req r[2] = { ss_req(file, sock, 0, 100, 1),
				       ss_req(file, sock, 0, 100, 1) };
	struct stablesend_submit s0 = {
		.reqs = (uintptr_t)r, .nr = 1, .entry_size = sizeof(r[0]),
	}, s;
	void *hole = unmapped();
	struct stablesend_counters cnt;
	uint64_t ud = 5;

	s = s0; s.flags = 1;
	EXPECT("SUBMIT", "submit flags != 0", ioctl(dev, STABLESEND_IOC_SUBMIT, &s), EINVAL);
	s = s0; s.reserved = 1;
	EXPECT("SUBMIT", "submit reserved != 0", ioctl(dev, STABLESEND_IOC_SUBMIT, &s), EINVAL);
	s = s0; s.entry_size = sizeof(r[0]) - 8;
	EXPECT("SUBMIT", "entry_size too small", ioctl(dev, STABLESEND_IOC_SUBMIT, &s), EINVAL);
	s = s0; s.entry_size = sizeof(r[0]) + 8;
	EXPECT("SUBMIT", "entry_size too large", ioctl(dev, STABLESEND_IOC_SUBMIT, &s), EINVAL);
	s = s0; s.entry_size = 0;
	EXPECT("SUBMIT", "entry_size 0", ioctl(dev, STABLESEND_IOC_SUBMIT, &s), EINVAL);
	s = s0; s.nr = 0;
	EXPECT("SUBMIT", "nr 0", ioctl(dev, STABLESEND_IOC_SUBMIT, &s), EINVAL);
	s = s0; s.nr = STABLESEND_SUBMIT_MAX + 1;
	EXPECT("SUBMIT", "nr SUBMIT_MAX+1", ioctl(dev, STABLESEND_IOC_SUBMIT, &s), EINVAL);
	s = s0; s.nr = UINT32_MAX;
	EXPECT("SUBMIT", "nr UINT32_MAX", ioctl(dev, STABLESEND_IOC_SUBMIT, &s), EINVAL);
	s = s0; s.reqs = (uintptr_t)hole;
	EXPECT("SUBMIT", "reqs pointer unmapped", ioctl(dev, STABLESEND_IOC_SUBMIT, &s), EFAULT);
	s = s0; s.reqs = 0;
	EXPECT("SUBMIT", "reqs pointer NULL", ioctl(dev, STABLESEND_IOC_SUBMIT, &s), EFAULT);
	s = s0; s.reqs = (uintptr_t)hole; s.nr = STABLESEND_SUBMIT_MAX;
	EXPECT("SUBMIT", "reqs pointer unmapped, nr SUBMIT_MAX", ioctl(dev, STABLESEND_IOC_SUBMIT, &s), EFAULT);

	EXPECT("SUBMIT", "ioctl arg unmapped", ioctl(dev, STABLESEND_IOC_SUBMIT, hole), EFAULT);
	EXPECT("SUBMIT", "ioctl arg NULL", ioctl(dev, STABLESEND_IOC_SUBMIT, NULL), EFAULT);
	EXPECT("SEND", "ioctl arg unmapped", ioctl(dev, STABLESEND_IOC_SEND, hole), EFAULT);
	EXPECT("SEND", "ioctl arg NULL", ioctl(dev, STABLESEND_IOC_SEND, NULL), EFAULT);
	EXPECT("SETUP", "ioctl arg unmapped", ioctl(dev, STABLESEND_IOC_SETUP, hole), EFAULT);
	EXPECT("CANCEL", "ioctl arg unmapped", ioctl(dev, STABLESEND_IOC_CANCEL, hole), EFAULT);
	EXPECT("COUNT", "ioctl arg unmapped", ioctl(dev, STABLESEND_IOC_COUNTERS, hole), EFAULT);

	EXPECT("CANCEL", "unknown user_data", ioctl(dev, STABLESEND_IOC_CANCEL, &ud), ENOENT);
	EXPECT("ioctl", "unknown command _IO(0xB5, 0x55)", ioctl(dev, _IO(STABLESEND_IOC_MAGIC, 0x55)), ENOTTY);
	EXPECT("ioctl", "SUBMIT number with the wrong size", ioctl(dev, _IOW(STABLESEND_IOC_MAGIC, 1, __u32), &s0), ENOTTY);
	EXPECT("ioctl", "TCGETS", ioctl(dev, 0x5401, &cnt), ENOTTY);
}

static void bad_read(int dev)
{
	char buf[sizeof(struct stablesend_cqe)];
	int nb = open(STABLESEND_DEVICE, O_RDWR | O_NONBLOCK | O_CLOEXEC);

	EXPECT("read", "buffer of 1 byte", read(dev, buf, 1), EINVAL);
	EXPECT("read", "buffer one byte short of a record", read(dev, buf, sizeof(buf) - 1), EINVAL);
	EXPECT("read", "buffer of 0 bytes", read(dev, buf, 0), EINVAL);
	REQUIRE(nb >= 0, "open O_NONBLOCK");
	EXPECT("read", "empty queue, O_NONBLOCK", read(nb, buf, sizeof(buf)), EAGAIN);
	close(nb);
}

/* --- SETUP --------------------------------------------------------------------- */

static long setup_with(int dev, struct stablesend_setup *s)
{
	return ioctl(dev, STABLESEND_IOC_SETUP, s);
}

static void setup_cases(int file, int sock, long *sink_expect)
{
	struct stablesend_setup s0 = { .eventfd = -1 }, s;
	long long max_limit = -1, in_force;
	struct stablesend_req r;
	struct stablesend_counters c;
	struct stablesend_cqe cqe;
	char buf[64] = "";
	int dev, efd;
	FILE *f;

	f = fopen("/sys/module/stablesend/parameters/max_limit", "re");
	REQUIRE(f && fgets(buf, sizeof(buf), f), "read max_limit");
	fclose(f);
	max_limit = strtoll(buf, NULL, 10);
	REQUIRE(max_limit > 0, "max_limit %s", buf);
	/* Without CAP_SYS_RESOURCE an open's limit is cut to user_limit. */
	f = fopen("/sys/module/stablesend/parameters/user_limit", "re");
	REQUIRE(f && fgets(buf, sizeof(buf), f), "read user_limit");
	fclose(f);
	in_force = max_limit;
	if (geteuid() && strtoll(buf, NULL, 10) < max_limit)
		in_force = strtoll(buf, NULL, 10);

	dev = ss_dev();
	s = s0;
	CHECK(setup_with(dev, &s) == 0, "first SETUP");
	CHECK(s.abi_version == STABLESEND_ABI_VERSION, "abi_version %u", s.abi_version);
	CHECK((s.features & (STABLESEND_FEAT_SUBMIT | STABLESEND_FEAT_SEND)) ==
	      (STABLESEND_FEAT_SUBMIT | STABLESEND_FEAT_SEND), "features %#llx",
	      (unsigned long long)s.features);
	CHECK(s.mem_limit > 0, "mem_limit out %llu", (unsigned long long)s.mem_limit);
	s = s0;
	EXPECT("SETUP", "twice", setup_with(dev, &s), EBUSY);
	close(dev);

	/* Refused setups do not count: a good one afterwards works. */
	dev = ss_dev();
	s = s0; s.flags = 1;
	EXPECT("SETUP", "flags != 0", setup_with(dev, &s), EINVAL);
	s = s0; s.reserved0 = 1;
	EXPECT("SETUP", "reserved0 != 0", setup_with(dev, &s), EINVAL);
	s = s0; s.reserved[3] = 1;
	EXPECT("SETUP", "reserved[3] != 0", setup_with(dev, &s), EINVAL);
	s = s0; s.eventfd = closed_fd();
	EXPECT("SETUP", "eventfd not open", setup_with(dev, &s), EBADF);
	s = s0; s.eventfd = file;
	EXPECT("SETUP", "eventfd is a regular file", setup_with(dev, &s), EINVAL);
	s = s0; s.eventfd = sock;
	EXPECT("SETUP", "eventfd is a socket", setup_with(dev, &s), EINVAL);
	s = s0; s.mem_limit = (uint64_t)max_limit + 1;
	EXPECT("SETUP", "mem_limit max_limit+1", setup_with(dev, &s), EINVAL);
	s = s0; s.mem_limit = UINT64_MAX;
	EXPECT("SETUP", "mem_limit UINT64_MAX", setup_with(dev, &s), EINVAL);
	s = s0; s.mem_limit = 1;
	EXPECT("SETUP", "mem_limit 1 (below a page)", setup_with(dev, &s), EINVAL);
	s = s0; s.mem_limit = sysconf(_SC_PAGESIZE) - 1;
	EXPECT("SETUP", "mem_limit a page - 1", setup_with(dev, &s), EINVAL);
	/* Past INT_MAX even when max_limit allows it: a result must fit. */
	if (!geteuid()) {
		CHECK(write_str("/sys/module/stablesend/parameters/max_limit",
				"8589934592") == 0, "max_limit = 8 GiB");
		s = s0; s.mem_limit = (uint64_t)INT_MAX + 1;
		EXPECT("SETUP", "mem_limit INT_MAX + 1, max_limit 8 GiB",
		       setup_with(dev, &s), EINVAL);
		s = s0; s.mem_limit = 8ULL << 30;
		EXPECT("SETUP", "mem_limit 8 GiB = max_limit", setup_with(dev, &s), EINVAL);
		efd = ss_dev();
		s = s0; s.mem_limit = INT_MAX;
		CHECK(setup_with(efd, &s) == 0 && s.mem_limit == INT_MAX,
		      "SETUP mem_limit INT_MAX as root: limit in force %llu",
		      (unsigned long long)s.mem_limit);
		close(efd);
		snprintf(buf, sizeof(buf), "%lld", max_limit);
		CHECK(write_str("/sys/module/stablesend/parameters/max_limit", buf) == 0,
		      "max_limit back to %s", buf);
	}
	efd = eventfd(0, EFD_CLOEXEC);
	REQUIRE(efd >= 0, "eventfd");
	s = s0; s.eventfd = efd; s.mem_limit = (uint64_t)max_limit;
	CHECK(setup_with(dev, &s) == 0, "SETUP with mem_limit == max_limit after refused ones");
	CHECK(s.mem_limit == (uint64_t)in_force, "limit in force %llu, want %lld",
	      (unsigned long long)s.mem_limit, in_force);
	close(efd);
	close(dev);

	/* After a submission (a fresh open each). */
	dev = ss_dev();
	r = ss_req(file, sock, 0, 100, 77);
	CHECK(ss_submit(dev, &r, 1) == 1, "good submit");
	*sink_expect += 100;
	s = s0;
	EXPECT("SETUP", "after a SUBMIT", setup_with(dev, &s), EBUSY);
	CHECK(ss_reap(dev, &cqe, 1, 10000) == 1 && cqe.res == 100 &&
	      cqe.user_data == 77, "completion of the good submit: res %lld",
	      (long long)cqe.res);
	close(dev);
	dev = ss_dev();
	r = ss_req(file, sock, 0, 100, 78);
	CHECK(ss_send(dev, &r) == 100, "good SEND");
	*sink_expect += 100;
	s = s0;
	EXPECT("SETUP", "after a SEND", setup_with(dev, &s), EBUSY);
	/* stablesend.4: a SEND counts as accepted and finished. */
	ss_counters(dev, &c);
	CHECK(c.submitted == 1 && c.completed == 1 && !c.failed,
	      "counters after a SEND: submitted %llu completed %llu failed %llu",
	      (unsigned long long)c.submitted, (unsigned long long)c.completed,
	      (unsigned long long)c.failed);
	close(dev);
	/* stablesend.4: one that then fails counts too. */
	dev = ss_dev();
	r = ss_req(file, -1, 0, 100, 79);
	EXPECT("SEND", "bad socket fd, before SETUP", ss_send(dev, &r), EBADF);
	s = s0;
	EXPECT("SETUP", "after a failed SEND", setup_with(dev, &s), EBUSY);
	close(dev);
}

/* --- the memory limit ------------------------------------------------------ */

static void emsgsize(int file3m, int sock, long *sink_expect)
{
	struct stablesend_counters c;
	struct stablesend_req r;
	struct stablesend_cqe cqe;
	static char head[16];
	int dev = ss_dev();

	CHECK(ss_setup(dev, -1, 1 << 20) == 0, "SETUP 1 MiB");
	r = ss_req(file3m, sock, 0, 2 << 20, 1);
	bad(dev, "2 MiB request, 1 MiB limit", r, EMSGSIZE, V_BOTH);
	r = ss_req(file3m, sock, 4096, 1 << 20, 1);
	r.head = (uintptr_t)head; r.head_len = 1;
	bad(dev, "1 MiB + 1 byte header, 1 MiB limit", r, EMSGSIZE, V_BOTH);
	r = ss_req(file3m, sock, 0, UINT32_MAX, 1);
	bad(dev, "len 4 GiB (3 MiB file), 1 MiB limit", r, EMSGSIZE, V_BOTH);
	ss_counters(dev, &c);
	CHECK(c.submitted == 0 && c.mem_in_use == 0 && c.mem_peak == 0,
	      "after EMSGSIZE: submitted %llu mem_in_use %llu mem_peak %llu",
	      (unsigned long long)c.submitted, (unsigned long long)c.mem_in_use,
	      (unsigned long long)c.mem_peak);
	/* Exactly the limit fits; RELEASED says its pages are back. */
	r = ss_req(file3m, sock, 0, 1 << 20, 9);
	r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
	CHECK(ss_submit(dev, &r, 1) == 1, "1 MiB request, 1 MiB limit");
	*sink_expect += 1 << 20;
	CHECK(ss_reap(dev, &cqe, 1, 20000) == 1 && cqe.res == 1 << 20 &&
	      cqe.flags & STABLESEND_CQE_SENT,
	      "1 MiB at the limit: res %lld", (long long)cqe.res);
	CHECK(ss_reap(dev, &cqe, 1, 20000) == 1 && cqe.flags & STABLESEND_CQE_RELEASED,
	      "1 MiB at the limit: no RELEASED record");
	printf("ok   1 MiB request fits a 1 MiB limit\n");
	ss_counters(dev, &c);
	CHECK(c.mem_in_use == 0 && c.cqes_pending == 0 && c.mem_peak == 1 << 20,
	      "limit open: mem_in_use %llu cqes_pending %llu mem_peak %llu",
	      (unsigned long long)c.mem_in_use, (unsigned long long)c.cqes_pending,
	      (unsigned long long)c.mem_peak);
	close(dev);
}

static void small_pair(int *c, int *s)
{
	int v = 4096;

	tcp_pair(AF_INET, c, s);
	setsockopt(*c, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	setsockopt(*s, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

/* O_NONBLOCK open at its limit: EAGAIN, then success once memory is back. */
static void nonblock_limit(int file) /* at least 64 KiB */
{
	enum { CHUNK = 65536, MAXN = 64 };
	int dev = open(STABLESEND_DEVICE, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	unsigned char *got = malloc((MAXN + 1) * CHUNK), *want = malloc(CHUNK);
	struct stablesend_cqe cqe[MAXN];
	struct stablesend_counters c;
	struct stablesend_req r;
	int sc, ss, n = 0, i, ret = 0, err = 0;
	double end;
	size_t got_n;

	REQUIRE(dev >= 0 && got && want, "open O_NONBLOCK");
	CHECK(ss_setup(dev, -1, 1 << 20) == 0, "SETUP 1 MiB");
	small_pair(&sc, &ss);
	{
		struct timeval tv = { .tv_sec = 30 };

		setsockopt(ss, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	for (i = 0; i < MAXN; i++) {
		r = ss_req(file, sc, 0, CHUNK, 100 + i);
		ret = ss_submit(dev, &r, 1);
		err = errno;
		if (ret != 1)
			break;
		n++;
	}
	errno = err;
	CHECK(ret == -1 && err == EAGAIN,
	      "non-blocking at the limit: submit %d returned %d, expected -1 EAGAIN",
	      n, ret);
	CHECK(n >= 1 && n <= (1 << 20) / CHUNK, "%d requests accepted under 1 MiB", n);
	ss_counters(dev, &c);
	printf("     at the limit: %d accepted, completed %llu failed %llu mem_in_use %llu peak %llu cqes %llu\n",
	       n, (unsigned long long)c.completed, (unsigned long long)c.failed,
	       (unsigned long long)c.mem_in_use, (unsigned long long)c.mem_peak,
	       (unsigned long long)c.cqes_pending);
	CHECK(c.mem_in_use <= 1 << 20 && c.mem_peak <= 1 << 20 && c.submitted == (uint64_t)n,
	      "at the limit: mem_in_use %llu mem_peak %llu submitted %llu",
	      (unsigned long long)c.mem_in_use, (unsigned long long)c.mem_peak,
	      (unsigned long long)c.submitted);
	if (ret == -1 && err == EAGAIN)
		printf("ok   SUBMIT O_NONBLOCK at the limit after %d x 64 KiB         EAGAIN\n", n);
	r = ss_req(file, sc, 0, CHUNK, 999);
	EXPECT("SEND", "O_NONBLOCK at the limit", ss_send(dev, &r), EAGAIN);

	/* The peer reads: completions, memory comes back, submit works again. */
	got_n = read_full(ss, got, (size_t)n * CHUNK);
	CHECK(got_n == (size_t)n * CHUNK, "peer got %zu of %d x 64 KiB", got_n, n);
	fill_pat(want, 0, CHUNK, 0);
	for (i = 0; i < n && (size_t)(i + 1) * CHUNK <= got_n; i++)
		if (memcmp(got + (size_t)i * CHUNK, want, CHUNK)) {
			CHECK(0, "request %d payload", i);
			break;
		}
	CHECK(ss_reap(dev, cqe, n, 10000) == n, "%d completions", n);
	for (i = 0; i < n; i++)
		if (cqe[i].res != CHUNK || cqe[i].user_data != (uint64_t)(100 + i)) {
			CHECK(0, "cqe %d: user_data %llu res %lld", i,
			      (unsigned long long)cqe[i].user_data, (long long)cqe[i].res);
			break;
		}
	end = now_s() + 10;
	r = ss_req(file, sc, 0, CHUNK, 500);
	while ((ret = ss_submit(dev, &r, 1)) != 1 && errno == EAGAIN && now_s() < end)
		usleep(10000);
	CHECK(ret == 1, "submit once the peer read everything");
	if (ret == 1) {
		printf("ok   SUBMIT O_NONBLOCK succeeds again after the peer read\n");
		CHECK(read_full(ss, got, CHUNK) == CHUNK && !memcmp(got, want, CHUNK),
		      "payload after the limit");
		CHECK(ss_reap(dev, cqe, 1, 10000) == 1 && cqe[0].res == CHUNK,
		      "completion after the limit");
	}
	ss_counters(dev, &c);
	CHECK(c.cqes_pending == 0, "non-blocking open: cqes_pending %llu",
	      (unsigned long long)c.cqes_pending);
	close(sc);
	close(ss);
	/* Pages nobody waits for come back at the latest once the fd is closed. */
	close(dev);
	CHECK(ss_drained(10), "pages in flight after the non-blocking case");
	free(got);
	free(want);
}

/* --- batches --------------------------------------------------------------- */

static void batch(int dev, int file)
{
	static const char h0[] = "HEAD-0:", t3[] = ":TAIL-3";
	struct stablesend_req r[5];
	struct stablesend_cqe cqe[4];
	struct collector col;
	unsigned char *want = malloc(20000);
	char *edge = page_before_hole();
	struct stablesend_req *at_edge;
	size_t wn = 0;
	int sc, ss, ret;

	REQUIRE(want, "malloc");
	tcp_pair(AF_INET, &sc, &ss);
	collect_start(&col, ss, 0);
	r[0] = ss_req(file, sc, 0, 3000, 10);
	r[0].head = (uintptr_t)h0; r[0].head_len = strlen(h0);
	r[1] = ss_req(file, sc, 5000, 2000, 11);
	r[2] = ss_req(closed_fd(), sc, 0, 100, 12);
	r[3] = ss_req(file, sc, 9000, 4000, 13);	/* 1000 bytes: short file */
	r[3].tail = (uintptr_t)t3; r[3].tail_len = strlen(t3);
	ret = ss_submit(dev, r, 4);
	CHECK(ret == 2, "batch with a bad 3rd request returned %d, expected 2", ret);
	CHECK(ss_reap(dev, cqe, 2, 10000) == 2, "2 completions");
	CHECK(cqe[0].user_data == 10 && cqe[0].res == 3000 + (long)strlen(h0) &&
	      cqe[0].flags & STABLESEND_CQE_SENT, "cqe 0: %llu %lld %#x",
	      (unsigned long long)cqe[0].user_data, (long long)cqe[0].res, cqe[0].flags);
	CHECK(cqe[1].user_data == 11 && cqe[1].res == 2000 &&
	      cqe[1].flags & STABLESEND_CQE_SENT, "cqe 1: %llu %lld %#x",
	      (unsigned long long)cqe[1].user_data, (long long)cqe[1].res, cqe[1].flags);
	memcpy(want + wn, h0, strlen(h0)); wn += strlen(h0);
	fill_pat(want + wn, 0, 3000, 0); wn += 3000;
	fill_pat(want + wn, 5000, 2000, 0); wn += 2000;
	if (ret == 2)
		printf("ok   SUBMIT batch of 4, 3rd bad: 2 accepted and completed\n");
	/* The rest, resubmitted: the bad one is reported again. */
	EXPECT("SUBMIT", "rest of the batch (bad one first)", ss_submit(dev, r + 2, 2), EBADF);
	CHECK(ss_submit(dev, r + 3, 1) == 1, "last one alone");
	CHECK(ss_reap(dev, cqe, 1, 10000) == 1 && cqe[0].user_data == 13 &&
	      cqe[0].res == 1000 + (long)strlen(t3), "cqe 3: %lld (short file)",
	      (long long)cqe[0].res);
	fill_pat(want + wn, 9000, 1000, 0); wn += 1000;
	memcpy(want + wn, t3, strlen(t3)); wn += strlen(t3);

	/* The second entry of the array is unmapped: 1 accepted. */
	at_edge = (struct stablesend_req *)(edge + 4096 - sizeof(*at_edge));
	*at_edge = ss_req(file, sc, 100, 500, 14);
	ret = ss_submit(dev, at_edge, 2);
	CHECK(ret == 1, "batch whose 2nd entry is unmapped returned %d, expected 1", ret);
	if (ret == 1)
		printf("ok   SUBMIT batch of 2, 2nd entry unmapped: 1 accepted\n");
	CHECK(ss_reap(dev, cqe, 1, 10000) == 1 && cqe[0].user_data == 14 &&
	      cqe[0].res == 500, "cqe 4: %lld", (long long)cqe[0].res);
	fill_pat(want + wn, 100, 500, 0); wn += 500;
	EXPECT("SUBMIT", "batch starting at the unmapped entry", ss_submit(dev, at_edge + 1, 1), EFAULT);
	munmap(edge, 4096);

	close(sc);
	collect_end(&col);
	CHECK(col.len == wn && !memcmp(col.buf, want, wn),
	      "batch stream: received %zu bytes, expected %zu (or content differs)",
	      col.len, wn);
	close(ss);
	free(col.buf);
	free(want);
}

/*
 * A read whose buffer ends in an unmapped page returns the records it
 * could copy; those it could not stay queued, in order, and still count
 * as the user's; a read with no room mapped at all fails with EFAULT and
 * loses none.
 */
static void read_put_back(int dev, int file)
{
	const size_t rec = sizeof(struct stablesend_cqe);
	struct stablesend_cqe *edge_cqe, cqe[4];
	struct stablesend_req r[3];
	struct stablesend_counters c = { 0 };
	char *edge = page_before_hole();
	long long rec0;
	int sc, ss, i, fl;
	ssize_t n;

	tcp_pair(AF_INET, &sc, &ss);
	for (i = 0; i < 3; i++)
		r[i] = ss_req(file, sc, i * 100, 100, 30 + i);
	REQUIRE(ss_submit(dev, r, 3) == 3, "3 requests");
	for (i = 0; i < 1000 && c.cqes_pending < 3; i++) {
		ss_counters(dev, &c);
		usleep(10000);
	}
	REQUIRE(c.cqes_pending == 3, "3 records pending (%llu)",
		(unsigned long long)c.cqes_pending);
	rec0 = fdinfo_num(getpid(), dev, "stablesend-user-records");
	/* A record lost would make a blocking read wait for good. */
	fl = fcntl(dev, F_GETFL);
	REQUIRE(!fcntl(dev, F_SETFL, fl | O_NONBLOCK), "O_NONBLOCK");

	edge_cqe = (struct stablesend_cqe *)(edge + 4096 - rec);
	n = read(dev, edge_cqe, 3 * rec);
	CHECK(n == (ssize_t)rec && edge_cqe->user_data == 30,
	      "read of 3 records into a buffer with room mapped for 1: %zd bytes, user_data %llu",
	      n, n > 0 ? (unsigned long long)edge_cqe->user_data : 0ULL);
	EXPECT("read", "buffer wholly unmapped, 2 records queued",
	       read(dev, edge + 4096, 2 * rec), EFAULT);
	ss_counters(dev, &c);
	CHECK(c.cqes_pending == 2 &&
	      fdinfo_num(getpid(), dev, "stablesend-user-records") == rec0 - 1,
	      "after 1 read and 1 EFAULT: %llu records pending (want 2), the user's count %lld (want %lld)",
	      (unsigned long long)c.cqes_pending,
	      fdinfo_num(getpid(), dev, "stablesend-user-records"), rec0 - 1);
	n = read(dev, cqe, 4 * rec);
	CHECK(n == (ssize_t)(2 * rec) && cqe[0].user_data == 31 &&
	      cqe[1].user_data == 32 && cqe[0].res == 100 && cqe[1].res == 100,
	      "the records put back: %zd bytes, user_data %llu, %llu (want 2 records, 31 then 32)",
	      n, (unsigned long long)cqe[0].user_data,
	      (unsigned long long)cqe[1].user_data);
	CHECK(fdinfo_num(getpid(), dev, "stablesend-user-records") == rec0 - 3,
	      "the user's records after all were read: %lld, want %lld",
	      fdinfo_num(getpid(), dev, "stablesend-user-records"), rec0 - 3);
	fcntl(dev, F_SETFL, fl);
	munmap(edge, 4096);
	close(sc);
	close(ss);
}

/* --- files that shrink ----------------------------------------------------- */

static void truncated_before_submit(int dev)
{
	static const char head[] = "<<HEAD>>", tail[] = "<<TAIL>>";
	const size_t big = 1 << 20, small = 300001, off = 1000;
	struct stablesend_cqe cqe;
	struct collector col;
	unsigned char *want = malloc(big + 64);
	size_t wn = 0, expect_res = strlen(head) + (small - off) + strlen(tail);
	struct stablesend_req r;
	int mode, file, sc, ss;
	long ret;

	REQUIRE(want, "malloc");
	for (mode = 0; mode < 2; mode++) {
		file = pat_file("/tmp/ss-badinput-trunc", big, 1);
		unlink("/tmp/ss-badinput-trunc");
		tcp_pair(AF_INET, &sc, &ss);
		collect_start(&col, ss, 0);
		r = ss_req(file, sc, off, big - off, 20);
		r.head = (uintptr_t)head; r.head_len = strlen(head);
		r.tail = (uintptr_t)tail; r.tail_len = strlen(tail);
		/* The request is built for 1 MiB; the file shrinks before the call. */
		REQUIRE(ftruncate(file, small) == 0, "ftruncate");
		if (mode == 0) {
			ret = ss_submit(dev, &r, 1);
			CHECK(ret == 1, "submit after truncation: %ld", ret);
			CHECK(ss_reap(dev, &cqe, 1, 10000) == 1, "completion");
			ret = cqe.res;
		} else {
			int stalled;

			ret = send_wd(dev, &r, 60, &stalled);
			CHECK(!stalled, "SEND made no progress for 60 s");
		}
		CHECK(ret == (long)expect_res,
		      "%s: file truncated to %zu before the call: result %ld, expected %zu",
		      mode ? "SEND" : "SUBMIT", small, ret, expect_res);
		/* A request starting past the new end of file: nothing at all. */
		r.offset = small + 10;
		r.len = 100;
		if (mode == 0)
			EXPECT("SUBMIT", "offset past the truncated EOF",
			       ss_submit(dev, &r, 1), ENODATA);
		else
			EXPECT("SEND", "offset past the truncated EOF",
			       ss_send(dev, &r), ENODATA);
		close(sc);
		collect_end(&col);
		wn = 0;
		memcpy(want, head, strlen(head)); wn += strlen(head);
		fill_pat(want + wn, off, small - off, 1); wn += small - off;
		memcpy(want + wn, tail, strlen(tail)); wn += strlen(tail);
		CHECK(col.len == wn, "%s: received %zu bytes, expected %zu",
		      mode ? "SEND" : "SUBMIT", col.len, wn);
		CHECK(col.len >= wn && !memcmp(col.buf, want, wn),
		      "%s: received bytes differ from head + file up to EOF + tail",
		      mode ? "SEND" : "SUBMIT");
		if (ret == (long)expect_res && col.len == wn && !memcmp(col.buf, want, wn))
			printf("ok   %-6s file truncated before the call: short result, nothing past EOF\n",
			       mode ? "SEND" : "SUBMIT");
		free(col.buf);
		close(ss);
		close(file);
	}
	free(want);
}

static struct {
	int file;
	int stop;	/* __atomic */
	unsigned char *pattern;
	size_t big, small;
	long rounds;
} tr;

static void *truncator(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&tr.stop, __ATOMIC_RELAXED)) {
		REQUIRE(ftruncate(tr.file, tr.small) == 0, "ftruncate");
		write_full(tr.file, tr.pattern, tr.big, 0);
		tr.rounds++;
	}
	return NULL;
}

/*
 * Is @got (@n bytes read at file offset @off) a copy of the pattern?
 * 0: yes.  1: except for whole pages of zeros past tr.small: a read racing
 * with truncate-then-rewrite on tmpfs finds a page missing (truncated, not
 * rewritten yet), then sees i_size grown past it and copies a hole
 * (shmem_file_read_iter; pread(2) does the same, see pread_control()).
 * -1: anything else; *@first gets the first bad byte.
 */
static int classify(const unsigned char *got, uint64_t off, size_t n,
		    long long *first, long long *zero_pages)
{
	size_t i = 0;
	int holes = 0;

	*first = -1;
	while (i < n) {
		uint64_t fo = off + i, pg = fo & ~4095ULL;
		size_t in_pg = (pg + 4096 - fo) < n - i ? (pg + 4096 - fo) : n - i;
		size_t j;

		if (!memcmp(got + i, tr.pattern + fo, in_pg)) {
			i += in_pg;
			continue;
		}
		for (j = 0; j < in_pg && !got[i + j]; j++)
			;
		if (j < in_pg || pg < tr.small) {
			for (j = 0; got[i + j] == tr.pattern[fo + j]; j++)
				;
			*first = (long long)(i + j);
			return -1;
		}
		holes = 1;
		(*zero_pages)++;
		i += in_pg;
	}
	return holes;
}

#define NTRUNC 200
#define HDR 16

/*
 * The same race through pread(2): how often the filesystem itself shows
 * holes.  1.5 s; when @want_holes (stablesend's payloads had hole pages),
 * on until pread(2) has shown one too, for up to 15 s: holes are accepted
 * only when the filesystem shows them to pread(2) as well.  Returns the
 * hole pages pread(2) saw.
 */
static long long pread_control(int want_holes)
{
	unsigned char *buf = malloc(tr.big);
	long reads = 0, short_reads = 0, bad = 0;
	long long zero_pages = 0, first;
	pthread_t th;
	double end;

	REQUIRE(buf, "malloc");
	__atomic_store_n(&tr.stop, 0, __ATOMIC_RELAXED);
	tr.rounds = 0;
	REQUIRE(pthread_create(&th, NULL, truncator, NULL) == 0, "pthread_create");
	for (end = now_s() + 1.5; now_s() < end || (want_holes && !zero_pages &&
						  now_s() < end + 13.5); reads++) {
		uint64_t off = ((uint64_t)reads * 40961 + 7) % (tr.big - 1);
		size_t len = 1 + ((uint64_t)reads * 123457) % 400000;
		ssize_t r = pread(tr.file, buf, len, off);

		if (r < 0)
			break;
		short_reads += (size_t)r < len;
		if (classify(buf, off, r, &first, &zero_pages) < 0)
			bad++;
	}
	__atomic_store_n(&tr.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	printf("     pread control: %ld reads (%ld short), %lld hole pages of zeros, %ld other mismatches, %ld truncate rounds\n",
	       reads, short_reads, zero_pages, bad, tr.rounds);
	CHECK(!bad, "pread control: %ld reads are not a prefix of the pattern", bad);
	free(buf);
	return zero_pages;
}

static void truncated_concurrently(int dev)
{
	struct {
		uint64_t off, len;
		int accepted;
		long long res;
	} q[NTRUNC];
	struct stablesend_cqe cqe[NTRUNC];
	char head[NTRUNC][HDR], tail[NTRUNC][HDR];
	struct collector col;
	pthread_t th;
	int i, n = 0, enodata = 0, shorter = 0, sc, ss, bad_payload = 0;
	long long zero_pages = 0;
	size_t pos = 0;
	double t0;

	tr.big = 1 << 20;
	tr.small = 256 << 10;	/* page aligned: truncation drops whole pages */
	tr.pattern = malloc(tr.big);
	REQUIRE(tr.pattern, "malloc");
	fill_pat(tr.pattern, 0, tr.big, 2);
	tr.file = pat_file("/tmp/ss-badinput-race", tr.big, 2);
	unlink("/tmp/ss-badinput-race");
	__atomic_store_n(&tr.stop, 0, __ATOMIC_RELAXED);
	tr.rounds = 0;
	tcp_pair(AF_INET, &sc, &ss);
	collect_start(&col, ss, 0);
	REQUIRE(pthread_create(&th, NULL, truncator, NULL) == 0, "pthread_create");
	t0 = now_s();
	for (i = 0; i < NTRUNC; i++) {
		struct stablesend_req r;
		int ret;

		q[i].off = ((uint64_t)i * 40961 + 7) % (tr.big - 1);
		q[i].len = 1 + ((uint64_t)i * 123457) % 400000;
		snprintf(head[i], HDR, "[req %05d head", i);
		snprintf(tail[i], HDR, "req %05d tail]", i);
		r = ss_req(tr.file, sc, q[i].off, q[i].len, 1000 + i);
		r.head = (uintptr_t)head[i]; r.head_len = HDR;
		r.tail = (uintptr_t)tail[i]; r.tail_len = HDR;
		/* Spread the submissions over many truncate/rewrite rounds. */
		usleep(1000 + (i * 7919) % 3000);
		ret = ss_submit(dev, &r, 1);
		q[i].accepted = ret == 1;
		if (ret == 1) {
			n++;
			continue;
		}
		/* Only a request starting past the smallest size may find no data. */
		CHECK(errno == ENODATA && q[i].off >= tr.small,
		      "request %d (offset %llu) refused", i,
		      (unsigned long long)q[i].off);
		enodata++;
	}
	CHECK(ss_reap(dev, cqe, n, 20000) == n, "%d completions", n);
	__atomic_store_n(&tr.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	printf("     %d requests submitted in %.2f s, %ld truncate rounds\n", NTRUNC,
	       now_s() - t0, tr.rounds);
	CHECK(tr.rounds > 10, "the truncating thread hardly ran (%ld rounds)", tr.rounds);
	close(sc);
	collect_end(&col);

	for (i = 0; i < n; i++) {
		int k = (int)(cqe[i].user_data - 1000);

		CHECK(k >= 0 && k < NTRUNC && q[k].accepted, "cqe user_data %llu",
		      (unsigned long long)cqe[i].user_data);
		if (k >= 0 && k < NTRUNC)
			q[k].res = cqe[i].res;
	}
	for (i = 0; i < NTRUNC; i++) {
		long long flen, min_flen, max_flen, first;
		int c;

		if (!q[i].accepted)
			continue;
		flen = q[i].res - 2 * HDR;
		max_flen = (long long)(q[i].len < tr.big - q[i].off ? q[i].len
								   : tr.big - q[i].off);
		min_flen = q[i].off >= tr.small ? 0 :
			   (long long)(q[i].len < tr.small - q[i].off ? q[i].len
								   : tr.small - q[i].off);
		CHECK(flen >= min_flen && flen <= max_flen,
		      "request %d off %llu len %llu: result %lld, file bytes %lld not in [%lld, %lld]",
		      i, (unsigned long long)q[i].off, (unsigned long long)q[i].len,
		      q[i].res, flen, min_flen, max_flen);
		if (flen < 0 || flen > max_flen)
			break;	/* the stream cannot be parsed any further */
		if ((uint64_t)flen < q[i].len)
			shorter++;
		if (pos + q[i].res > col.len) {
			CHECK(0, "stream ends at %zu inside request %d", col.len, i);
			break;
		}
		CHECK(!memcmp(col.buf + pos, head[i], HDR) &&
		      !memcmp(col.buf + pos + HDR + flen, tail[i], HDR),
		      "request %d: header or trailer not where the result says", i);
		c = classify(col.buf + pos + HDR, q[i].off, flen, &first, &zero_pages);
		if (c < 0) {
			CHECK(0, "request %d off %llu len %llu res %lld: file byte %lld (offset %llu) is %#x, the pattern has %#x",
			      i, (unsigned long long)q[i].off, (unsigned long long)q[i].len,
			      q[i].res, first, (unsigned long long)(q[i].off + first),
			      col.buf[pos + HDR + first], tr.pattern[q[i].off + first]);
			if (++bad_payload > 5)
				break;
		}
		pos += q[i].res;
	}
	CHECK(pos == col.len, "received %zu bytes, the completions account for %zu",
	      col.len, pos);
	printf("%s   concurrent truncation: %d accepted, %d ENODATA, %d short, %lld hole pages of zeros\n",
	       pos == col.len && !bad_payload ? "ok" : "FAIL", n, enodata, shorter,
	       zero_pages);
	CHECK(pread_control(zero_pages > 0) > 0 || !zero_pages,
	      "stablesend sent %lld hole pages of zeros, pread(2) racing the same truncations saw none",
	      zero_pages);
	close(ss);
	close(tr.file);
	free(col.buf);
	free(tr.pattern);
}

int main(int argc, char **argv)
{
	const char *only = argc > 1 ? argv[1] : NULL;
	const char *path = "/tmp/ss-badinput-file";
	long long req0 = ss_stat("requests"), bytes0 = ss_stat("bytes_sent");
	struct stablesend_counters c;
	struct collector sink;
	long sink_expect = 0;
	int dev, file, file3m, sc, ss;

	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm_setup();
	if (access(STABLESEND_DEVICE, F_OK))
		return SKIP;
	dev = ss_dev();
	REQUIRE(ss_setup(dev, -1, 0) == 0, "SETUP");
	file = pat_file(path, 10000, 0);
	file3m = pat_file("/tmp/ss-badinput-3m", 3 << 20, 0);
	unlink("/tmp/ss-badinput-3m");
	tcp_pair(AF_INET, &sc, &ss);
	collect_start(&sink, ss, 1);

	if (only && strcmp(only, "trunc"))
		goto rest;
	if (only)
		goto trunc;
	refusals(dev, file, path, sc);
	bad_submit(dev, file, sc);
	bad_read(dev);

	/* Nothing refused may have left a trace. */
	ss_counters(dev, &c);
	CHECK(c.submitted == (uint64_t)unexpected_async && c.mem_in_use == 0 &&
	      c.cqes_pending == (uint64_t)unexpected_async && c.completed == 0,
	      "after the refusals: submitted %llu completed %llu mem_in_use %llu cqes_pending %llu",
	      (unsigned long long)c.submitted, (unsigned long long)c.completed,
	      (unsigned long long)c.mem_in_use, (unsigned long long)c.cqes_pending);
	CHECK(ss_stat("requests") == req0 && ss_stat("bytes_sent") == bytes0,
	      "module stats moved: requests %lld -> %lld, bytes_sent %lld -> %lld",
	      req0, ss_stat("requests"), bytes0, ss_stat("bytes_sent"));
	CHECK(!unexpected_bytes && !unexpected_async,
	      "refused requests were accepted anyway: %d async, %ld bytes by SEND",
	      unexpected_async, unexpected_bytes);
	if (unexpected_async) {
		struct stablesend_cqe cqe[64];

		ss_reap(dev, cqe, unexpected_async < 64 ? unexpected_async : 64, 5000);
	}

	setup_cases(file, sc, &sink_expect);
	emsgsize(file3m, sc, &sink_expect);
	nonblock_limit(file3m);
	batch(dev, file);
	read_put_back(dev, file);
	truncated_before_submit(dev);
trunc:
	truncated_concurrently(dev);
rest:

	close(sc);
	collect_end(&sink);
	if (!unexpected_async && !unexpected_bytes)
		CHECK(sink.len == (size_t)sink_expect,
		      "the shared peer received %zu bytes, expected %ld", sink.len,
		      sink_expect);
	close(ss);

	ss_counters(dev, &c);
	CHECK(c.cqes_pending == 0, "at the end: cqes_pending %llu",
	      (unsigned long long)c.cqes_pending);
	printf("end: submitted %llu completed %llu failed %llu mem_peak %llu\n",
	       (unsigned long long)c.submitted, (unsigned long long)c.completed,
	       (unsigned long long)c.failed, (unsigned long long)c.mem_peak);
	/* Pages nobody waits for come back at the latest once the fd is closed. */
	close(dev);
	CHECK(ss_drained(10), "pages still in flight at the end");
	close(file);
	close(file3m);
	unlink(path);
	return test_result();
}
