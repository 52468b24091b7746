/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the host tests: result macros, pattern files, socket
 * pairs and a receiver thread.  Each test exits 0 (pass), 1 (fail) or
 * 77 (skip).
 */
#ifndef STABLESEND_TEST_COMMON_H
#define STABLESEND_TEST_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define T_PASS	0
#define T_FAIL	1
#define T_SKIP	77

static int t_failed __attribute__((unused));

#define CHECK(cond, fmt, ...) do {					\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: %s: " fmt "\n", __FILE__,	\
			__LINE__, #cond, ##__VA_ARGS__);		\
		t_failed++;						\
	}								\
} while (0)

/* expr must be -1 with errno == err (functions setting errno). */
#define CHECK_ERRNO(expr, err) do {					\
	long _r;							\
	errno = 0;							\
	_r = (long)(expr);						\
	CHECK(_r == -1 && errno == (err), "got %ld errno %d (%s), "	\
	      "want -1 errno %d (%s)", _r, errno, strerror(errno),	\
	      (err), strerror(err));					\
} while (0)

/* expr must be NULL with errno == err. */
#define CHECK_NULL_ERRNO(expr, err) do {				\
	void *_p;							\
	errno = 0;							\
	_p = (void *)(expr);						\
	CHECK(!_p && errno == (err), "got %p errno %d (%s), want NULL "	\
	      "errno %d (%s)", _p, errno, strerror(errno), (err),	\
	      strerror(err));						\
} while (0)

/* expr must return -err (functions returning -errno). */
#define CHECK_NEG(expr, err) do {					\
	long _r = (long)(expr);						\
	CHECK(_r == -(err), "got %ld, want %d (-%s)", _r, -(err),	\
	      strerror(err));						\
} while (0)

/* expr must return want. */
#define CHECK_RET(expr, want) do {					\
	long _r = (long)(expr);						\
	CHECK(_r == (want), "got %ld, want %ld", _r, (long)(want));	\
} while (0)

#define DIE(fmt, ...) do {						\
	fprintf(stderr, "%s:%d: setup: " fmt ": %s\n", __FILE__,	\
		__LINE__, ##__VA_ARGS__, strerror(errno));		\
	exit(T_FAIL);							\
} while (0)

static inline int t_result(void)
{
	return t_failed ? T_FAIL : T_PASS;
}

/* Deterministic, non-periodic byte pattern. */
static inline unsigned char pat(unsigned long long i, unsigned int seed)
{
	unsigned long long x = (i + 1) * 0x9e3779b97f4a7c15ULL ^ seed;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 32;
	return x;
}

/* An unlinked temporary file of size bytes, O_RDWR. */
static inline int tmpfile_fd(size_t size, unsigned int seed)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char path[4096];
	unsigned char buf[8192];
	size_t off = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/stablesend-test.XXXXXX", dir);
	fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0)
		DIE("mkostemp %s", path);
	unlink(path);
	while (off < size) {
		size_t n = size - off < sizeof(buf) ? size - off : sizeof(buf);
		size_t i;

		for (i = 0; i < n; i++)
			buf[i] = pat(off + i, seed);
		if (pwrite(fd, buf, n, off) != (ssize_t)n)
			DIE("pwrite");
		off += n;
	}
	return fd;
}

/* Reopen fd (a file) with other flags, through /proc/self/fd. */
static inline int reopen(int fd, int flags)
{
	char path[64];
	int nfd;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	nfd = open(path, flags | O_CLOEXEC);
	if (nfd < 0)
		DIE("reopen %s", path);
	return nfd;
}

/*
 * A connected stream pair: fds[0] sends, fds[1] receives.  family is
 * AF_UNIX, AF_INET or AF_INET6 (loopback).  Returns -1 if the family is
 * unavailable here (no IPv6).
 */
static inline int stream_pair(int family, int fds[2])
{
	struct sockaddr_storage ss;
	socklen_t len;
	int l, c, a;

	if (family == AF_UNIX) {
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds))
			DIE("socketpair");
		return 0;
	}

	memset(&ss, 0, sizeof(ss));
	if (family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

		sin->sin_family = AF_INET;
		sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		len = sizeof(*sin);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_addr = in6addr_loopback;
		len = sizeof(*sin6);
	}
	l = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return -1;
	if (bind(l, (struct sockaddr *)&ss, len) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&ss, &len)) {
		close(l);
		return -1;
	}
	c = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c < 0)
		DIE("socket");
	if (connect(c, (struct sockaddr *)&ss, len))
		DIE("connect");
	a = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	if (a < 0)
		DIE("accept");
	close(l);
	fds[0] = c;
	fds[1] = a;
	return 0;
}

/* A thread that reads fd to EOF into a buffer. */
struct sink {
	int fd;
	pthread_t thread;
	unsigned char *buf;
	size_t len, cap;
	int err;
};

static inline void *sink_main(void *arg)
{
	struct sink *s = arg;

	for (;;) {
		ssize_t n;

		if (s->cap - s->len < 65536) {
			s->cap = s->cap ? s->cap * 2 : 1 << 20;
			s->buf = realloc(s->buf, s->cap);
			if (!s->buf) {
				s->err = ENOMEM;
				break;
			}
		}
		n = read(s->fd, s->buf + s->len, s->cap - s->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			s->err = errno;
			break;
		}
		if (n == 0)
			break;
		s->len += n;
	}
	return NULL;
}

static inline void sink_start(struct sink *s, int fd)
{
	memset(s, 0, sizeof(*s));
	s->fd = fd;
	errno = pthread_create(&s->thread, NULL, sink_main, s);
	if (errno)
		DIE("pthread_create");
}

/* Join; closes the read fd.  The writer must have closed its end. */
static inline void sink_finish(struct sink *s)
{
	errno = pthread_join(s->thread, NULL);
	if (errno)
		DIE("pthread_join");
	close(s->fd);
	if (s->err) {
		errno = s->err;
		DIE("sink read");
	}
}

/*
 * What a sendfile-like call wrote: the bytes reader @rd got (its sink @s
 * is finished), or with no reader (@rd < 0: the output was @file) all of
 * @file, read back; @file is closed then.  *@data is malloc'd.
 */
static inline void output_collect(int rd, struct sink *s, int file,
				  unsigned char **data, size_t *len)
{
	struct stat st;

	if (rd >= 0) {
		sink_finish(s);
		*data = s->buf;
		*len = s->len;
		return;
	}
	if (fstat(file, &st))
		DIE("fstat");
	*len = st.st_size;
	*data = malloc(*len + 1);
	if (!*data || pread(file, *data, *len, 0) != (ssize_t)*len)
		DIE("read back");
	close(file);
}

#endif /* STABLESEND_TEST_COMMON_H */
