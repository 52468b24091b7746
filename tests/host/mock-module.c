// SPDX-License-Identifier: MIT
/*
 * The library's module-facing code, against a mock of /dev/stablesend.
 *
 * Linked with libstablesend.a, this program defines ioctl() itself, so the
 * library's ioctls on the "device" land here.  The device is a pipe
 * (reached through /proc/self/fd, so the library opens it like a device
 * node): the mock writes completion records into it, and the library
 * read()s and poll()s them as it would the real device.  SEND really
 * sends (pread + send) so receivers can check the bytes.
 *
 * Checked: SETUP arguments and results, SUBMIT batching and partial
 * acceptance, reap (records, timeouts, EINTR), cancel, counters, and
 * stablesend_sendfile()'s use of SEND: request fields, length caps,
 * ENODATA, EMSGSIZE, fallback on ENOTSOCK, EINTR, non-blocking sockets,
 * file position and *offset updates; stablesend_sendfile_hdtr()'s SEND
 * (header and trailer in the request, the trailer held back when the range
 * is cut, header and trailer alone at end of file, the copy path when the
 * module lacks STABLESEND_FEAT_HDTR, going on after a NOWAIT SEND cut
 * short on a non-blocking socket); device init failures and
 * STABLESEND_REQUIRE_MODULE in child processes.
 */
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>

#include <stablesend.h>

#include "common.h"

extern const char *ss_device_path;	/* libstablesend.a internal */

#define MOCK_LIMIT	(1 << 20)

static struct {
	ino_t ino;		/* the pipe standing in for the device */
	int wfd;		/* its write end: completions go there */
	int setup_calls;
	int setup_err;		/* SETUP fails with this */
	__u64 features;
	struct stablesend_setup setup;	/* last SETUP as received */
	int accept_left;	/* SUBMIT accepts at most this many more */
	unsigned int batches[16], nbatches;
	int send_calls;
	int send_err;		/* next SEND fails with this */
	__u64 emsgsize_above;	/* SEND fails with EMSGSIZE above this */
	int sent_ok;		/* a SEND went since the test cleared it */
	int emsgsize_late;	/* EMSGSIZEs after that */
	long long nowait_free;	/* >= 0: memory a NOWAIT SEND finds free */
	long long nowait_refill; /* > 0: nowait_free at each NOWAIT SEND */
	long long truncate_to;	/* >= 0: the next SEND truncates the file */
	struct stablesend_req last_send;
	__u64 cancel_arg;
} mock = {
	.features = STABLESEND_FEAT_SUBMIT | STABLESEND_FEAT_SEND |
		    STABLESEND_FEAT_HDTR | STABLESEND_FEAT_TCP |
		    STABLESEND_FEAT_UNIX,
	.accept_left = 1 << 30,
	.emsgsize_above = ~0ULL,
	.nowait_free = -1,
	.truncate_to = -1,
};

static int is_mock(int fd)
{
	struct stat st;

	return !fstat(fd, &st) && S_ISFIFO(st.st_mode) &&
	       st.st_ino == mock.ino;
}

static int fail(int err)
{
	errno = err;
	return -1;
}

/* Send len bytes as the module would; 0 when the socket took them all. */
static int mock_put(int sock, const void *p, size_t len, __u64 *done)
{
	while (len) {
		ssize_t w = send(sock, p, len, MSG_NOSIGNAL);

		if (w < 0)
			return *done ? 1 : -1;
		*done += w;
		if ((size_t)w < len)
			return 1;
		len -= w;
		p = (const char *)p + w;
	}
	return 0;
}

static int mock_send(struct stablesend_req *r)
{
	static char buf[65536];
	__u64 done = 0, flen, tail_len = r->tail_len;
	struct stat st;
	int ret, fl;

	mock.send_calls++;
	mock.last_send = *r;
	if (mock.send_err) {
		int err = mock.send_err;

		mock.send_err = 0;
		return fail(err);
	}
	if (fstat(r->sock_fd, &st))
		return -1;
	if (!S_ISSOCK(st.st_mode))
		return fail(ENOTSOCK);
	if (mock.truncate_to >= 0) {	/* a writer, just before the read */
		if (ftruncate(r->file_fd, mock.truncate_to))
			DIE("ftruncate");
		mock.truncate_to = -1;
	}
	if (fstat(r->file_fd, &st))
		return -1;
	if (!r->len && !r->head_len && !r->tail_len)
		return fail(EINVAL);
	if (r->head_len > STABLESEND_HDTR_MAX ||
	    r->tail_len > STABLESEND_HDTR_MAX)
		return fail(EINVAL);
	if (r->len && r->offset >= (__u64)st.st_size)
		return fail(ENODATA);
	if (r->len + r->head_len + r->tail_len > mock.emsgsize_above) {
		mock.emsgsize_late += mock.sent_ok;
		return fail(EMSGSIZE);
	}
	if (r->len + r->head_len + r->tail_len > MOCK_LIMIT)
		return fail(EMSGSIZE);
	flen = r->len && (__u64)st.st_size - r->offset < r->len ?
	       (__u64)st.st_size - r->offset : r->len;
	/*
	 * As the module: STABLESEND_REQ_NOWAIT on a non-blocking socket takes
	 * the memory free (ENOSPC with none), a cut request losing its trailer.
	 */
	if ((mock.nowait_free >= 0 || mock.nowait_refill > 0) &&
	    (r->flags & STABLESEND_REQ_NOWAIT) &&
	    (fcntl(r->sock_fd, F_GETFL) & O_NONBLOCK)) {
		__u64 room, keep;

		if (mock.nowait_refill > 0)
			mock.nowait_free = mock.nowait_refill;
		room = mock.nowait_free;

		if (!room)
			return fail(ENOSPC);
		if (r->head_len + flen + tail_len > room) {
			keep = room > r->head_len ? room - r->head_len : 0;
			if (keep > flen)
				keep = flen;
			if (r->head_len || keep) {
				flen = keep;
				tail_len = 0;
			}
		}
	}
	/*
	 * As the module: a non-blocking socket takes what it has room for.
	 * It reads O_DIRECT files at any alignment; so does the mock, without.
	 */
	fl = fcntl(r->file_fd, F_GETFL);
	if (fl >= 0 && (fl & O_DIRECT))
		fcntl(r->file_fd, F_SETFL, fl & ~O_DIRECT);
	ret = mock_put(r->sock_fd, (void *)(uintptr_t)r->head, r->head_len,
		       &done);
	while (!ret && flen) {
		size_t want = flen < sizeof(buf) ? flen : sizeof(buf);
		ssize_t n = pread(r->file_fd, buf, want,
				  r->offset + done - r->head_len);

		if (n <= 0)
			break;
		ret = mock_put(r->sock_fd, buf, n, &done);
		flen -= n;
	}
	if (fl >= 0 && (fl & O_DIRECT))
		fcntl(r->file_fd, F_SETFL, fl);
	if (!ret)
		ret = mock_put(r->sock_fd, (void *)(uintptr_t)r->tail,
			       tail_len, &done);
	if (ret >= 0)
		mock.sent_ok = 1;
	if (ret >= 0 && mock.nowait_free > 0)	/* held until released */
		mock.nowait_free -= (long long)done < mock.nowait_free ?
				    (long long)done : mock.nowait_free;
	return ret < 0 ? -1 : (int)done;
}

static int mock_submit(struct stablesend_submit *s)
{
	const struct stablesend_req *r = (void *)(uintptr_t)s->reqs;
	unsigned int i, n;

	if (s->entry_size != sizeof(*r) || !s->nr ||
	    s->nr > STABLESEND_SUBMIT_MAX || s->flags || s->reserved)
		return fail(EINVAL);
	if (mock.nbatches < 16)
		mock.batches[mock.nbatches++] = s->nr;
	if (!mock.accept_left)
		return fail(EAGAIN);
	n = s->nr < (unsigned int)mock.accept_left ?
	    s->nr : (unsigned int)mock.accept_left;
	mock.accept_left -= n;
	for (i = 0; i < n; i++) {
		struct stablesend_cqe cqe = {
			.user_data = r[i].user_data,
			.res = r[i].len,
			.flags = STABLESEND_CQE_SENT,
		};

		if (write(mock.wfd, &cqe, sizeof(cqe)) != sizeof(cqe))
			DIE("mock cqe");
	}
	return n;
}

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!is_mock(fd))
		return syscall(SYS_ioctl, fd, req, arg);

	switch (req) {
	case STABLESEND_IOC_SETUP: {
		struct stablesend_setup *su = arg;

		mock.setup_calls++;
		mock.setup = *su;
		if (mock.setup_err)
			return fail(mock.setup_err);
		su->features = mock.features;
		su->abi_version = STABLESEND_ABI_VERSION;
		if (!su->mem_limit)
			su->mem_limit = MOCK_LIMIT;
		return 0;
	}
	case STABLESEND_IOC_SUBMIT:
		return mock_submit(arg);
	case STABLESEND_IOC_SEND:
		return mock_send(arg);
	case STABLESEND_IOC_CANCEL:
		mock.cancel_arg = *(__u64 *)arg;
		return mock.cancel_arg == 42 ? 3 : fail(ENOENT);
	case STABLESEND_IOC_COUNTERS: {
		struct stablesend_counters *c = arg;

		memset(c, 0, sizeof(*c));
		c->submitted = 7;
		c->bytes_sent = 12345;
		c->mem_limit = MOCK_LIMIT;
		return 0;
	}
	}
	return fail(ENOTTY);
}

static void mock_init(void)
{
	static char path[64];
	struct stat st;
	int p[2];

	if (pipe2(p, O_CLOEXEC | O_NONBLOCK))
		DIE("pipe");
	/* Room for every completion this test queues. */
	fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
	if (fstat(p[0], &st))
		DIE("fstat");
	mock.ino = st.st_ino;
	mock.wfd = p[1];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", p[0]);
	ss_device_path = path;
}

static void test_context(void)
{
	struct stablesend_req reqs[2500];
	struct stablesend_cqe cqes[64];
	struct stablesend_counters c;
	struct stablesend *ss;
	struct timespec t0, t1;
	unsigned int i;
	int efd = 9999, ret;

	CHECK(stablesend_open(-1, 1U << 7) == NULL && errno == EINVAL,
	      "unknown open flag");

	/* eventfd is only passed through: the mock does not look at it */
	ss = stablesend_open_limit(efd, 0, 4096 * 1024);
	CHECK(ss != NULL, "open: %s", strerror(errno));
	if (!ss)
		return;
	CHECK(mock.setup.eventfd == efd && mock.setup.mem_limit == 4 << 20 &&
	      !mock.setup.flags && !mock.setup.reserved0 &&
	      !mock.setup.reserved[0] && !mock.setup.reserved[3],
	      "SETUP as sent: eventfd %d limit %llu", mock.setup.eventfd,
	      (unsigned long long)mock.setup.mem_limit);
	CHECK(stablesend_features(ss) == mock.features, "features");
	CHECK(stablesend_abi_version(ss) == STABLESEND_ABI_VERSION, "abi");
	CHECK(stablesend_mem_limit(ss) == 4 << 20, "limit");
	CHECK(stablesend_fd(ss) >= 0 &&
	      !(fcntl(stablesend_fd(ss), F_GETFL) & O_NONBLOCK), "blocking");
	CHECK(fcntl(stablesend_fd(ss), F_GETFD) & FD_CLOEXEC, "cloexec");

	/* submit: batching, partial acceptance */
	for (i = 0; i < 2500; i++) {
		stablesend_prep_req(&reqs[i], 3, 4, i * 10, 100 + i, i);
		CHECK(!reqs[i].head && !reqs[i].flags && !reqs[i].reserved,
		      "prep clears");
	}
	stablesend_prep_hdtr(&reqs[0], "hd", 2, NULL, 0);
	CHECK(reqs[0].head && reqs[0].head_len == 2 && !reqs[0].tail,
	      "prep_hdtr");
	CHECK_RET(stablesend_submit(ss, reqs, 0), 0);
	CHECK_NEG(stablesend_submit(ss, NULL, 1), EFAULT);
	mock.nbatches = 0;
	ret = stablesend_submit(ss, reqs, 2500);
	CHECK(ret == 2500, "submit 2500: %d", ret);
	CHECK(mock.nbatches == 3 && mock.batches[0] == 1024 &&
	      mock.batches[1] == 1024 && mock.batches[2] == 452,
	      "batches %u: %u %u %u", mock.nbatches, mock.batches[0],
	      mock.batches[1], mock.batches[2]);

	/* reap them all, in order */
	for (i = 0; i < 2500; ) {
		int n = stablesend_reap(ss, cqes, 64, 1000), j;

		CHECK(n > 0, "reap: %d", n);
		if (n <= 0)
			break;
		for (j = 0; j < n; j++, i++)
			CHECK(cqes[j].user_data == i &&
			      cqes[j].res == 100 + i &&
			      cqes[j].flags == STABLESEND_CQE_SENT,
			      "cqe %u: %llu %lld", i,
			      (unsigned long long)cqes[j].user_data,
			      (long long)cqes[j].res);
	}
	CHECK_RET(stablesend_reap(ss, cqes, 64, 0), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK_RET(stablesend_reap(ss, cqes, 64, 100), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK((t1.tv_sec - t0.tv_sec) * 1000 +
	      (t1.tv_nsec - t0.tv_nsec) / 1000000 >= 90, "timeout too short");
	CHECK_NEG(stablesend_reap(ss, cqes, 0, 0), EINVAL);
	CHECK_NEG(stablesend_reap(ss, NULL, 1, 0), EINVAL);

	/* second batch fails: the first batch's count is the result */
	mock.accept_left = 1024;
	mock.nbatches = 0;
	CHECK_RET(stablesend_submit(ss, reqs, 2500), 1024);
	CHECK(mock.nbatches == 2, "stopped after the failing batch");
	/* partial batch: stop there */
	mock.accept_left = 476;
	mock.nbatches = 0;
	CHECK_RET(stablesend_submit(ss, reqs, 2500), 476);
	CHECK(mock.nbatches == 1, "stopped after a short batch");
	/* first batch fails: -errno */
	mock.accept_left = 0;
	CHECK_NEG(stablesend_submit(ss, reqs, 10), EAGAIN);
	mock.accept_left = 1 << 30;
	while (stablesend_reap(ss, cqes, 64, 0) > 0)
		;

	CHECK_RET(stablesend_cancel(ss, 42), 3);
	CHECK_NEG(stablesend_cancel(ss, 43), ENOENT);
	CHECK(mock.cancel_arg == 43, "cancel arg");
	CHECK(stablesend_counters(ss, &c) == 0 && c.submitted == 7 &&
	      c.bytes_sent == 12345, "counters");
	CHECK_NEG(stablesend_counters(ss, NULL), EINVAL);
	stablesend_close(ss);

	ss = stablesend_open(-1, STABLESEND_OPEN_NONBLOCK);
	CHECK(ss && (fcntl(stablesend_fd(ss), F_GETFL) & O_NONBLOCK),
	      "NONBLOCK opens non-blocking");
	CHECK(mock.setup.eventfd == -1 && mock.setup.mem_limit == 0,
	      "open() asks for the default limit");
	CHECK(stablesend_mem_limit(ss) == MOCK_LIMIT, "default limit");
	stablesend_close(ss);
}

static void on_alarm(int sig)
{
	(void)sig;
}

static void test_reap_eintr(void)
{
	struct sigaction sa = { .sa_handler = on_alarm };	/* no SA_RESTART */
	struct itimerval it = { .it_value = { .tv_usec = 50000 } };
	struct stablesend_cqe cqe;
	struct stablesend *ss;

	ss = stablesend_open(-1, 0);
	if (!ss)
		DIE("open");
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	CHECK_NEG(stablesend_reap(ss, &cqe, 1, -1), EINTR);
	stablesend_close(ss);
	signal(SIGALRM, SIG_DFL);
}

/* A receiving socket pair whose far end is drained by a sink thread. */
struct conn {
	int fd;
	struct sink sink;
};

static void conn_open(struct conn *c)
{
	int fds[2];

	stream_pair(AF_UNIX, fds);
	c->fd = fds[0];
	sink_start(&c->sink, fds[1]);
}

static size_t conn_close(struct conn *c, off_t start)
{
	size_t i;

	close(c->fd);
	sink_finish(&c->sink);
	for (i = 0; i < c->sink.len; i++)
		if (c->sink.buf[i] != pat(start + i, 3))
			break;
	CHECK(i == c->sink.len, "received bytes wrong at %zu", i);
	free(c->sink.buf);
	return c->sink.len;
}

/* Whether @fd is writable now (or poll() fails: not known to be full). */
static int writable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };

	return poll(&p, 1, 0) != 0;
}

/* Close the sending end of a pair, *@s what the peer then got. */
static void drain_pair(int fds[2], struct sink *s)
{
	sink_start(s, fds[1]);
	close(fds[0]);
	sink_finish(s);
	close(fds[1]);
}

static void test_sendfile(void)
{
	const size_t size = 3 * MOCK_LIMIT + 777;
	int fd = tmpfile_fd(size, 3);
	struct conn c;
	off_t off;
	ssize_t n;
	int out;

	/* one SEND, capped at a quarter of the limit */
	conn_open(&c);
	off = 5;
	mock.send_calls = 0;
	n = stablesend_sendfile(c.fd, fd, &off, size);
	CHECK(n == MOCK_LIMIT / 4, "capped to limit/4: %zd", n);
	CHECK(off == 5 + n, "offset advanced: %lld", (long long)off);
	CHECK(mock.send_calls == 1, "one SEND: %d", mock.send_calls);
	CHECK(mock.last_send.file_fd == fd && mock.last_send.sock_fd == c.fd &&
	      mock.last_send.offset == 5 &&
	      mock.last_send.len == MOCK_LIMIT / 4 && !mock.last_send.head &&
	      !mock.last_send.tail && !mock.last_send.head_len &&
	      !mock.last_send.flags && !mock.last_send.reserved,
	      "SEND request fields");
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_MODULE, "path");
	CHECK(lseek(fd, 0, SEEK_CUR) == 0, "position untouched");
	CHECK(conn_close(&c, 5) == (size_t)n, "received");

	/* NULL offset: the file position is used and advanced */
	conn_open(&c);
	lseek(fd, 100, SEEK_SET);
	n = stablesend_sendfile(c.fd, fd, NULL, 1000);
	CHECK(n == 1000 && lseek(fd, 0, SEEK_CUR) == 1100,
	      "position: %zd %lld", n, (long long)lseek(fd, 0, SEEK_CUR));
	conn_close(&c, 100);

	/* short file; at and past EOF (ENODATA) give 0 */
	conn_open(&c);
	off = size - 10;
	CHECK(stablesend_sendfile(c.fd, fd, &off, 1000) == 10, "short");
	CHECK(off == (off_t)size, "offset at EOF");
	mock.send_calls = 0;
	CHECK(stablesend_sendfile(c.fd, fd, &off, 1000) == 0, "at EOF");
	off = size + 4096;
	CHECK(stablesend_sendfile(c.fd, fd, &off, 1000) == 0, "past EOF");
	CHECK(off == (off_t)size + 4096, "offset unchanged");
	CHECK(mock.send_calls == 2, "EOF asked of the module");
	conn_close(&c, size - 10);

	/* count 0: no SEND */
	conn_open(&c);
	off = 0;
	mock.send_calls = 0;
	CHECK(stablesend_sendfile(c.fd, fd, &off, 0) == 0 && !mock.send_calls,
	      "count 0");
	CHECK_ERRNO(stablesend_sendfile(c.fd, -1, &off, 0), EBADF);

	/* range checks happen before the length is capped */
	{
		off_t big = 0x7fffffffffffffffLL - 5;

		mock.send_calls = 0;
		CHECK_ERRNO(stablesend_sendfile(c.fd, fd, &big, 10), EINVAL);
		big = -1;
		CHECK_ERRNO(stablesend_sendfile(c.fd, fd, &big, 10), EINVAL);
		CHECK_ERRNO(stablesend_sendfile(c.fd, fd, &off, -1UL), EINVAL);
		CHECK(!mock.send_calls, "bad ranges reached the module");
	}

	/* EMSGSIZE: halve and retry */
	mock.emsgsize_above = 10000;
	mock.send_calls = 0;
	n = stablesend_sendfile(c.fd, fd, &off, 100000);
	CHECK(n > 0 && n <= 10000 && mock.send_calls > 1,
	      "EMSGSIZE: %zd after %d SENDs", n, mock.send_calls);
	mock.emsgsize_above = ~0ULL;

	/* errors pass through; EINTR leaves the offset alone */
	mock.send_err = EINTR;
	{
		off_t before = off;

		CHECK_ERRNO(stablesend_sendfile(c.fd, fd, &off, 100), EINTR);
		CHECK(off == before, "offset after EINTR");
	}
	mock.send_err = EPIPE;
	CHECK_ERRNO(stablesend_sendfile(c.fd, fd, &off, 100), EPIPE);
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_MODULE,
	      "failed calls leave the path alone");
	conn_close(&c, 0);

	/* non-blocking socket without room: EAGAIN, the offset unchanged */
	{
		int fds[2];
		static const char junk[4096];

		stream_pair(AF_UNIX, fds);
		fcntl(fds[0], F_SETFL, O_NONBLOCK);
		while (write(fds[0], junk, sizeof(junk)) > 0)
			;
		while (write(fds[0], junk, 1) > 0)
			;
		mock.send_calls = 0;
		off = 0;
		CHECK_ERRNO(stablesend_sendfile(fds[0], fd, &off, 100), EAGAIN);
		CHECK(!off, "offset moved by a call that sent nothing");
		close(fds[0]);
		close(fds[1]);
	}
	/*
	 * non-blocking with room: a SEND of at most one send buffer, then
	 * more until the socket refuses, as sendfile(2) returns short only
	 * with the socket full (an edge-triggered poller waits for room)
	 */
	{
		struct sink s;
		int fds[2], sndbuf;
		socklen_t sl = sizeof(sndbuf);

		stream_pair(AF_UNIX, fds);
		fcntl(fds[0], F_SETFL, O_NONBLOCK);
		getsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl);
		off = 0;
		mock.send_calls = 0;
		n = stablesend_sendfile(fds[0], fd, &off, size);
		CHECK(n > 0 && n <= sndbuf && off == n && mock.send_calls >= 2 &&
		      !writable(fds[0]),
		      "non-blocking: %zd (sndbuf %d) in %d SENDs, the socket %s",
		      n, sndbuf, mock.send_calls,
		      writable(fds[0]) ? "still writable" : "full");
		drain_pair(fds, &s);
		free(s.buf);
	}

	/* not a socket: ENOTSOCK from the module, then the copy path */
	out = tmpfile_fd(0, 0);
	off = 1;
	n = stablesend_sendfile(out, fd, &off, 5000);
	CHECK(n == 5000 && off == 5001, "file out: %zd", n);
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_COPY, "copied");
	{
		unsigned char buf[5000];
		size_t i;

		CHECK(pread(out, buf, sizeof(buf), 0) == 5000, "read back");
		for (i = 0; i < sizeof(buf); i++)
			if (buf[i] != pat(1 + i, 3))
				break;
		CHECK(i == sizeof(buf), "file out bytes wrong at %zu", i);
	}
	setenv(STABLESEND_ENV_REQUIRE_MODULE, "1", 1);
	CHECK_ERRNO(stablesend_sendfile(out, fd, &off, 5000), ENOTSOCK);
	unsetenv(STABLESEND_ENV_REQUIRE_MODULE);
	close(out);
	close(fd);
}

/* conn_close() for header + file [start, start + flen) + trailer. */
static void conn_close_hdtr(struct conn *c, const char *head, size_t hlen,
			    off_t start, size_t flen, const char *tail,
			    size_t tlen, const char *what)
{
	const unsigned char *b;
	size_t i;

	close(c->fd);
	sink_finish(&c->sink);
	b = c->sink.buf;
	CHECK(c->sink.len == hlen + flen + tlen, "%s: received %zu, want %zu",
	      what, c->sink.len, hlen + flen + tlen);
	if (c->sink.len == hlen + flen + tlen) {
		CHECK(!memcmp(b, head, hlen), "%s: header", what);
		for (i = 0; i < flen; i++)
			if (b[hlen + i] != pat(start + i, 3))
				break;
		CHECK(i == flen, "%s: file byte %zu wrong", what, i);
		CHECK(!memcmp(b + hlen + flen, tail, tlen), "%s: trailer",
		      what);
	}
	free(c->sink.buf);
}

static void test_hdtr(void)
{
	static const char hd[] = "HEADER:", tl[] = ":TRAILER";
	const size_t hl = sizeof(hd) - 1, tl_len = sizeof(tl) - 1;
	const size_t size = 3 * MOCK_LIMIT + 777;
	int fd = tmpfile_fd(size, 3), out;
	struct conn c;
	off_t off;
	ssize_t n;

	/* one SEND with header and trailer in the request */
	conn_open(&c);
	off = 5;
	mock.send_calls = 0;
	n = stablesend_sendfile_hdtr(c.fd, fd, &off, 10000, hd, hl, tl, tl_len,
				     0);
	CHECK(n == (ssize_t)(hl + 10000 + tl_len), "hdtr: %zd", n);
	CHECK(off == 10005, "hdtr offset: %lld", (long long)off);
	CHECK(mock.send_calls == 1, "hdtr: %d SENDs", mock.send_calls);
	CHECK(mock.last_send.head == (uintptr_t)hd &&
	      mock.last_send.head_len == hl &&
	      mock.last_send.tail == (uintptr_t)tl &&
	      mock.last_send.tail_len == tl_len &&
	      mock.last_send.offset == 5 && mock.last_send.len == 10000 &&
	      !mock.last_send.flags && !mock.last_send.reserved &&
	      mock.last_send.file_fd == fd && mock.last_send.sock_fd == c.fd,
	      "hdtr SEND request fields");
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_MODULE, "path");
	CHECK(lseek(fd, 0, SEEK_CUR) == 0, "position untouched");
	conn_close_hdtr(&c, hd, hl, 5, 10000, tl, tl_len, "hdtr");

	/* NULL offset, MORE */
	conn_open(&c);
	lseek(fd, 100, SEEK_SET);
	n = stablesend_sendfile_hdtr(c.fd, fd, NULL, 1000, hd, hl, NULL, 0,
				     STABLESEND_REQ_MORE);
	CHECK(n == (ssize_t)hl + 1000 && lseek(fd, 0, SEEK_CUR) == 1100,
	      "hdtr position: %zd", n);
	CHECK(mock.last_send.flags == STABLESEND_REQ_MORE && !mock.last_send.tail,
	      "MORE passed on");
	lseek(fd, 0, SEEK_SET);
	conn_close_hdtr(&c, hd, hl, 100, 1000, "", 0, "hdtr pos");

	/* a range over the budget is cut and the trailer held back */
	conn_open(&c);
	off = 0;
	n = stablesend_sendfile_hdtr(c.fd, fd, &off, size, hd, hl, tl, tl_len,
				     0);
	CHECK(mock.last_send.len == MOCK_LIMIT / 4 - hl - tl_len &&
	      !mock.last_send.tail_len && !mock.last_send.tail &&
	      mock.last_send.head_len == hl, "cut: len %llu tail %u",
	      (unsigned long long)mock.last_send.len, mock.last_send.tail_len);
	CHECK(n == (ssize_t)(hl + mock.last_send.len) &&
	      off == (off_t)mock.last_send.len, "cut: %zd, offset %lld", n,
	      (long long)off);
	conn_close_hdtr(&c, hd, hl, 0, mock.last_send.len, "", 0, "cut");

	/* the range ends at end of file: the trailer follows it */
	conn_open(&c);
	off = size - 10;
	n = stablesend_sendfile_hdtr(c.fd, fd, &off, 1000, hd, hl, tl, tl_len,
				     0);
	CHECK(n == (ssize_t)(hl + 10 + tl_len) && off == (off_t)size,
	      "to EOF: %zd", n);
	CHECK(mock.last_send.len == 10 && mock.last_send.tail_len == tl_len,
	      "to EOF: request");
	conn_close_hdtr(&c, hd, hl, size - 10, 10, tl, tl_len, "to EOF");

	/* at end of file: header and trailer only, no ENODATA */
	conn_open(&c);
	off = size + 5;
	mock.send_calls = 0;
	n = stablesend_sendfile_hdtr(c.fd, fd, &off, 1000, hd, hl, tl, tl_len,
				     0);
	CHECK(n == (ssize_t)(hl + tl_len) && off == (off_t)size + 5,
	      "past EOF: %zd", n);
	CHECK(mock.send_calls == 1 && !mock.last_send.len, "past EOF: len %llu",
	      (unsigned long long)mock.last_send.len);
	conn_close_hdtr(&c, hd, hl, 0, 0, tl, tl_len, "past EOF");
	/* the file shrank under us: ENODATA, then header and trailer only */
	conn_open(&c);
	off = 0;
	mock.send_calls = 0;
	mock.send_err = ENODATA;
	n = stablesend_sendfile_hdtr(c.fd, fd, &off, 1000, hd, hl, tl, tl_len,
				     0);
	CHECK(n == (ssize_t)(hl + tl_len) && !off && mock.send_calls == 2 &&
	      !mock.last_send.len, "ENODATA: %zd after %d SENDs", n,
	      mock.send_calls);
	conn_close_hdtr(&c, hd, hl, 0, 0, tl, tl_len, "ENODATA");
	/* count 0 */
	conn_open(&c);
	n = stablesend_sendfile_hdtr(c.fd, fd, &off, 0, hd, hl, tl, tl_len, 0);
	CHECK(n == (ssize_t)(hl + tl_len) && !off && !mock.last_send.len,
	      "count 0: %zd", n);
	conn_close_hdtr(&c, hd, hl, 0, 0, tl, tl_len, "count 0");

	/* EMSGSIZE: the range halves and the trailer waits */
	conn_open(&c);
	off = 0;
	mock.emsgsize_above = 10000;
	mock.send_calls = 0;
	n = stablesend_sendfile_hdtr(c.fd, fd, &off, 100000, hd, hl, tl,
				     tl_len, 0);
	CHECK(n > (ssize_t)hl && n <= 10000 && mock.send_calls > 1 &&
	      !mock.last_send.tail_len && off == n - (ssize_t)hl,
	      "EMSGSIZE: %zd after %d SENDs", n, mock.send_calls);
	mock.emsgsize_above = ~0ULL;
	conn_close_hdtr(&c, hd, hl, 0, off, "", 0, "EMSGSIZE");

	/* non-blocking socket without room, then with a little */
	{
		static const char junk[4096];
		int fds[2];

		stream_pair(AF_UNIX, fds);
		fcntl(fds[0], F_SETFL, O_NONBLOCK);
		while (write(fds[0], junk, sizeof(junk)) > 0)
			;
		while (write(fds[0], junk, 1) > 0)
			;
		off = 0;
		CHECK_ERRNO(stablesend_sendfile_hdtr(fds[0], fd, &off, 100, hd,
						     hl, tl, tl_len, 0), EAGAIN);
		CHECK(!off, "offset moved on EAGAIN");
		close(fds[0]);
		close(fds[1]);
	}

	/* other errors pass through */
	conn_open(&c);
	mock.send_err = EPIPE;
	off = 0;
	CHECK_ERRNO(stablesend_sendfile_hdtr(c.fd, fd, &off, 100, hd, hl, NULL,
					     0, 0), EPIPE);
	CHECK(!off, "offset after EPIPE");
	conn_close_hdtr(&c, "", 0, 0, 0, "", 0, "EPIPE");

	/* not a socket: the copy path, without asking the module */
	out = tmpfile_fd(0, 0);
	off = 1;
	mock.send_calls = 0;
	n = stablesend_sendfile_hdtr(out, fd, &off, 5000, hd, hl, tl, tl_len,
				     0);
	CHECK(n == (ssize_t)(hl + 5000 + tl_len) && off == 5001 &&
	      !mock.send_calls, "file out: %zd, %d SENDs", n, mock.send_calls);
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_COPY, "copied");
	setenv(STABLESEND_ENV_REQUIRE_MODULE, "1", 1);
	CHECK_ERRNO(stablesend_sendfile_hdtr(out, fd, &off, 5000, hd, hl, tl,
					     tl_len, 0), ENOTSOCK);
	unsetenv(STABLESEND_ENV_REQUIRE_MODULE);
	close(out);
	close(fd);
}

/* Device init variants, each in a fresh child (the device is per process). */
static int child(void (*fn)(void))
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	int status;

	if (pid < 0)
		DIE("fork");
	if (!pid) {
		t_failed = 0;
		fn();
		exit(t_result());
	}
	if (waitpid(pid, &status, 0) < 0)
		DIE("waitpid");
	return WIFEXITED(status) ? WEXITSTATUS(status) : T_FAIL;
}

static ssize_t small_send(void)
{
	int fd = tmpfile_fd(100, 3), fds[2];
	char buf[100];
	off_t off = 0;
	ssize_t n;

	stream_pair(AF_UNIX, fds);
	n = stablesend_sendfile(fds[0], fd, &off, 100);
	if (n == 100)
		CHECK(read(fds[1], buf, 100) == 100, "received");
	close(fds[0]);
	close(fds[1]);
	close(fd);
	return n;
}

static void no_send_feature(void)
{
	mock.features = STABLESEND_FEAT_SUBMIT;
	mock.send_calls = 0;
	CHECK(small_send() == 100, "falls back");
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_COPY, "copy");
	CHECK(!mock.send_calls, "no SEND");
	setenv(STABLESEND_ENV_REQUIRE_MODULE, "1", 1);
	CHECK_ERRNO(small_send(), ENODEV);
	CHECK(mock.setup_calls == 1, "decided once");
}

/* A module without STABLESEND_FEAT_HDTR: header and trailer are copied. */
static void no_hdtr_feature(void)
{
	int fd = tmpfile_fd(100, 3), fds[2];
	char buf[110];
	off_t off = 0;

	mock.features &= ~STABLESEND_FEAT_HDTR;
	mock.send_calls = 0;
	stream_pair(AF_UNIX, fds);
	CHECK(stablesend_sendfile_hdtr(fds[0], fd, &off, 100, "head!", 5,
				       "tail!", 5, 0) == 110, "falls back");
	CHECK(read(fds[1], buf, sizeof(buf)) == 110 &&
	      !memcmp(buf, "head!", 5) && buf[5] == (char)pat(0, 3) &&
	      !memcmp(buf + 105, "tail!", 5), "received");
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_COPY, "copy");
	CHECK(!mock.send_calls, "no SEND");
	CHECK(small_send() == 100 && mock.send_calls == 1,
	      "plain sends still use the module");
	setenv(STABLESEND_ENV_REQUIRE_MODULE, "1", 1);
	CHECK_ERRNO(stablesend_sendfile_hdtr(fds[0], fd, &off, 100, "head!", 5,
					     NULL, 0, 0), EOPNOTSUPP);
	close(fds[0]);
	close(fds[1]);
	close(fd);
}

/*
 * STABLESEND_REQ_NOWAIT with 50000 bytes of memory free (held once
 * taken), over a non-blocking TCP pair with room for it all (without root,
 * TCP grows the send buffer towards tcp_wmem).
 */
static void nowait_50000(int fds[2])
{
	int big = 2 << 20;

	mock.features |= STABLESEND_FEAT_NOWAIT;
	mock.nowait_free = 50000;
	mock.send_calls = 0;
	stream_pair(AF_INET, fds);
	setsockopt(fds[0], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
}

/*
 * STABLESEND_REQ_NOWAIT: on a non-blocking socket a SEND cut short by the
 * memory free, then ENOSPC.  stablesend_sendfile_hdtr() must go on (the
 * rest as a copy) until the socket is full or all is sent, as a short
 * count with room left would leave an edge-triggered poller waiting.
 */
static void nowait_hdtr(void)
{
	static const char hd[] = "HEAD", tl[] = "TAIL";
	const size_t len = 200000, total = 4 + len + 4;
	int fd = tmpfile_fd(len, 3), fds[2];
	struct sink s;
	off_t off = 0;
	ssize_t n;
	size_t i;

	nowait_50000(fds);
	n = stablesend_sendfile_hdtr(fds[0], fd, &off, len, hd, 4, tl, 4, 0);
	CHECK(n > 50000 && (n == (ssize_t)total || !writable(fds[0])),
	      "hdtr with 50000 bytes of memory free: %zd of %zu, the socket %s",
	      n, total, writable(fds[0]) ? "still writable" : "full");
	CHECK(mock.send_calls == 2 &&
	      stablesend_sendfile_path() == STABLESEND_PATH_COPY,
	      "one SEND cut short, one ENOSPC, then a copy: %d SENDs, path %d",
	      mock.send_calls, stablesend_sendfile_path());
	CHECK(n > 4 && off == (n - 4 < (ssize_t)len ? n - 4 : (off_t)len),
	      "offset %lld after %zd bytes", (long long)off, n);
	drain_pair(fds, &s);
	for (i = 0; i < s.len && n > 0; i++) {
		unsigned char want = i < 4 ? hd[i] : i < 4 + len ?
				     pat(i - 4, 3) : tl[i - 4 - len];

		if (s.buf[i] != want)
			break;
	}
	CHECK(n > 0 && s.len == (size_t)n && i == s.len,
	      "received %zu of %zd bytes, wrong at %zu", s.len, n, i);
	free(s.buf);
	close(fd);
}

/* hdtr over a non-blocking TCP pair; returns the result, *got the bytes. */
static ssize_t hdtr_nb(int fd, off_t *off, size_t count, unsigned char **got,
		       size_t *got_len)
{
	struct sink s;
	int fds[2];
	ssize_t n;

	stream_pair(AF_INET, fds);
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	n = stablesend_sendfile_hdtr(fds[0], fd, off, count, "HEAD", 4, "TAIL",
				     4, 0);
	drain_pair(fds, &s);
	*got = s.buf;
	*got_len = s.len;
	return n;
}

/* Whether @b is "HEAD", @flen bytes of pattern 3 from 0, "TAIL". */
static int hdtr_bytes(const unsigned char *b, size_t len, size_t flen)
{
	size_t i;

	if (len != 4 + flen + 4 || memcmp(b, "HEAD", 4) ||
	    memcmp(b + 4 + flen, "TAIL", 4))
		return 0;
	for (i = 0; i < flen; i++)
		if (b[4 + i] != pat(i, 3))
			return 0;
	return 1;
}

/*
 * hdtr on a non-blocking socket going on through the module: with 300
 * bytes free at each SEND, four SENDs carry header, 1000 file bytes and
 * trailer (the trailer once, with the last file bytes); with header and
 * file exactly free, the trailer goes alone in a second SEND; a file cut
 * to 500 bytes just before the read gives header, 500 bytes, trailer,
 * and the offset at 500 (the bytes after the file's are its trailer's).
 */
static void nowait_hdtr_module(void)
{
	int fd = tmpfile_fd(1000, 3);
	unsigned char *b;
	size_t len;
	off_t off = 0;
	ssize_t n;

	mock.features |= STABLESEND_FEAT_NOWAIT;
	mock.nowait_refill = 300;
	mock.send_calls = 0;
	n = hdtr_nb(fd, &off, 1000, &b, &len);
	CHECK(n == 1008 && off == 1000 && hdtr_bytes(b, len, 1000) &&
	      mock.send_calls == 4 &&
	      stablesend_sendfile_path() == STABLESEND_PATH_MODULE,
	      "300 free per SEND: %zd, offset %lld, %zu bytes %s, %d SENDs",
	      n, (long long)off, len, hdtr_bytes(b, len, 1000) ? "right" :
	      "wrong", mock.send_calls);
	free(b);

	mock.nowait_refill = 1004;
	mock.send_calls = 0;
	off = 0;
	n = hdtr_nb(fd, &off, 1000, &b, &len);
	CHECK(n == 1008 && off == 1000 && hdtr_bytes(b, len, 1000) &&
	      mock.send_calls == 2,
	      "header and file free: %zd, offset %lld, %zu bytes %s, %d SENDs",
	      n, (long long)off, len, hdtr_bytes(b, len, 1000) ? "right" :
	      "wrong", mock.send_calls);
	free(b);

	mock.nowait_refill = 1 << 20;
	mock.truncate_to = 500;
	off = 0;
	n = hdtr_nb(fd, &off, 1000, &b, &len);
	CHECK(n == 508 && off == 500 && hdtr_bytes(b, len, 500),
	      "file cut to 500: %zd, offset %lld, %zu bytes %s", n,
	      (long long)off, len, hdtr_bytes(b, len, 500) ? "right" : "wrong");
	free(b);
	close(fd);

	/* What EMSGSIZE taught the first SEND, the later ones keep. */
	fd = tmpfile_fd(40000, 3);
	mock.emsgsize_above = 10000;
	mock.sent_ok = 0;
	mock.emsgsize_late = 0;
	mock.send_calls = 0;
	off = 0;
	n = hdtr_nb(fd, &off, 40000, &b, &len);
	CHECK(n == 40008 && off == 40000 && hdtr_bytes(b, len, 40000) &&
	      !mock.emsgsize_late,
	      "EMSGSIZE above 10000: %zd, offset %lld, %zu bytes %s, %d SENDs, %d EMSGSIZE after one went",
	      n, (long long)off, len, hdtr_bytes(b, len, 40000) ? "right" :
	      "wrong", mock.send_calls, mock.emsgsize_late);
	mock.emsgsize_above = ~0ULL;
	free(b);
	close(fd);
}

/*
 * An O_DIRECT input on a non-blocking socket whose SEND found memory for
 * 50000 bytes, then none (ENOSPC): the copy path cannot read O_DIRECT
 * (aligned buffers), so stablesend_sendfile() asks again without
 * STABLESEND_REQ_NOWAIT, waiting for memory, and the rest goes through
 * the module too.
 */
static void nowait_direct(void)
{
	const size_t len = 200000;
	int fd = tmpfile_fd(len, 4), fds[2];
	struct sink s;
	off_t off = 0;
	ssize_t n;
	size_t i;

	CHECK(!fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_DIRECT),
	      "O_DIRECT on a file under $TMPDIR (or /tmp): %s",
	      strerror(errno));
	nowait_50000(fds);
	n = stablesend_sendfile(fds[0], fd, &off, len);
	CHECK(n > 50000 && (n == (ssize_t)len || !writable(fds[0])) &&
	      off == n, "O_DIRECT, 50000 bytes free: %zd of %zu, offset %lld, the socket %s",
	      n, len, (long long)off,
	      writable(fds[0]) ? "still writable" : "full");
	CHECK(mock.send_calls >= 3 && !(mock.last_send.flags &
					STABLESEND_REQ_NOWAIT) &&
	      stablesend_sendfile_path() == STABLESEND_PATH_MODULE,
	      "a short SEND, ENOSPC, then SENDs without NOWAIT: %d SENDs, last flags %#x, path %d",
	      mock.send_calls, mock.last_send.flags,
	      stablesend_sendfile_path());
	drain_pair(fds, &s);
	for (i = 0; i < s.len && s.buf[i] == pat(i, 4); i++)
		;
	CHECK(n > 0 && s.len == (size_t)n && i == s.len,
	      "received %zu of %zd bytes, wrong at %zu", s.len, n, i);
	free(s.buf);
	close(fd);
}

static void setup_enotty(void)
{
	mock.setup_err = ENOTTY;
	CHECK(small_send() == 100, "falls back");
	CHECK(small_send() == 100, "falls back");
	CHECK(mock.setup_calls == 1, "decided once: %d", mock.setup_calls);
	setenv(STABLESEND_ENV_REQUIRE_MODULE, "1", 1);
	CHECK_ERRNO(small_send(), ENODEV);
}

static void setup_transient(void)
{
	mock.setup_err = EMFILE;
	CHECK(small_send() == 100, "copies while the device cannot open");
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_COPY, "copy");
	mock.setup_err = 0;
	CHECK(small_send() == 100, "module once it can");
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_MODULE, "module");
	CHECK(mock.setup_calls == 2, "retried: %d", mock.setup_calls);
}

static void setup_transient_required(void)
{
	mock.setup_err = EMFILE;
	setenv(STABLESEND_ENV_REQUIRE_MODULE, "1", 1);
	CHECK_ERRNO(small_send(), EMFILE);
}

/* After fork(), the child keeps using the parent's device fd. */
static void after_fork(void)
{
	int calls = mock.setup_calls;

	CHECK(small_send() == 100, "child sends");
	CHECK(stablesend_sendfile_path() == STABLESEND_PATH_MODULE, "module");
	CHECK(mock.setup_calls == calls, "no second open");
}

int main(void)
{
	mock_init();
	CHECK(child(no_send_feature) == 0, "no_send_feature");
	CHECK(child(no_hdtr_feature) == 0, "no_hdtr_feature");
	CHECK(child(nowait_hdtr) == 0, "nowait_hdtr");
	CHECK(child(nowait_hdtr_module) == 0, "nowait_hdtr_module");
	CHECK(child(nowait_direct) == 0, "nowait_direct");
	CHECK(child(setup_enotty) == 0, "setup_enotty");
	CHECK(child(setup_transient) == 0, "setup_transient");
	CHECK(child(setup_transient_required) == 0, "setup_transient_required");
	test_context();
	test_reap_eintr();
	test_sendfile();
	test_hdtr();
	CHECK(child(after_fork) == 0, "after_fork");
	return t_result();
}
