// SPDX-License-Identifier: MIT
/*
 * stablesend_sendfile_hdtr(): header, file range and trailer arrive in
 * that order with nothing between; the result counts all three; *offset or
 * the file position advances by the file bytes only.  Covered: AF_UNIX and
 * TCP, NULL offset, a range past end of file, at end of file and count 0
 * (header and trailer only), header or trailer alone, the largest header,
 * argument errors, pipes and files as outputs, a non-blocking socket
 * finished call by call with the documented resume rule, and stability
 * (the file rewritten right after the call).  Without the module this
 * checks the copy path; with it, the module path.
 */
#include <poll.h>
#include <sys/stat.h>

#include <stablesend.h>

#include "common.h"

#define FILE_SIZE	300007
#define SEED		5

static int data_fd;
static unsigned char head[STABLESEND_HDTR_MAX + 1], tail[STABLESEND_HDTR_MAX];

/* The bytes expected: head_len of head, file [off, off+flen), tail_len. */
static void check_stream(const char *what, const unsigned char *got,
			 size_t len, size_t head_len, off_t off, size_t flen,
			 size_t tail_len)
{
	size_t i, want = head_len + flen + tail_len;

	CHECK(len == want, "%s: received %zu bytes, want %zu", what, len, want);
	if (len != want)
		return;
	for (i = 0; i < head_len; i++)
		if (got[i] != head[i])
			break;
	CHECK(i == head_len, "%s: header wrong at %zu", what, i);
	for (i = 0; i < flen; i++)
		if (got[head_len + i] != pat(off + i, SEED))
			break;
	CHECK(i == flen, "%s: file byte %zu wrong", what, i);
	for (i = 0; i < tail_len; i++)
		if (got[head_len + flen + i] != tail[i])
			break;
	CHECK(i == tail_len, "%s: trailer wrong at %zu", what, i);
}

/*
 * One call on a blocking stream socket (drained by a sink): result, offset
 * and bytes.  start < 0: NULL offset from file position -start - 1.
 */
static void one(const char *what, int family, long long start, size_t count,
		size_t head_len, size_t tail_len, size_t want_flen)
{
	int fds[2], in = reopen(data_fd, O_RDONLY);
	off_t off = start, *offp = &off;
	struct sink s;
	ssize_t n;

	if (stream_pair(family, fds)) {
		printf("%s: family %d unavailable, skipped\n", what, family);
		close(in);
		return;
	}
	if (start < 0) {
		off = -start - 1;
		lseek(in, off, SEEK_SET);
		offp = NULL;
	}
	sink_start(&s, fds[1]);
	n = stablesend_sendfile_hdtr(fds[0], in, offp, count,
				     head_len ? head : NULL, head_len,
				     tail_len ? tail : NULL, tail_len, 0);
	CHECK(n == (ssize_t)(head_len + want_flen + tail_len),
	      "%s: returned %zd (%s), want %zu", what, n,
	      n < 0 ? strerror(errno) : "", head_len + want_flen + tail_len);
	if (offp) {
		CHECK(off == start + (off_t)want_flen, "%s: offset %lld",
		      what, (long long)off);
		CHECK(lseek(in, 0, SEEK_CUR) == 0, "%s: position moved", what);
	} else {
		CHECK(lseek(in, 0, SEEK_CUR) == -start - 1 + (off_t)want_flen,
		      "%s: position %lld", what,
		      (long long)lseek(in, 0, SEEK_CUR));
	}
	close(fds[0]);
	sink_finish(&s);
	check_stream(what, s.buf, s.len, head_len,
		     start < 0 ? -start - 1 : start, want_flen, tail_len);
	free(s.buf);
	close(in);
}

static const struct hcase {
	const char *name;
	long long start;	/* < 0: NULL offset, position -start - 1 */
	size_t count, head_len, tail_len;
	size_t flen;		/* file bytes expected */
} hcases[] = {
	{ "head+file+tail",		1000, 200000, 100, 50, 200000 },
	{ "unaligned",			4095, 65538, 1, 3, 65538 },
	{ "NULL offset",		-8, 5000, 77, 33, 5000 },
	{ "range past EOF",		FILE_SIZE - 10, 1000, 100, 50, 10 },
	{ "NULL offset past EOF",	-(FILE_SIZE - 9), 1000, 9, 5, 10 },
	{ "at EOF",			FILE_SIZE, 1000, 100, 50, 0 },
	{ "past EOF",			FILE_SIZE + 4096, 1000, 100, 50, 0 },
	{ "count 0",			10, 0, 100, 50, 0 },
	{ "header only",		10, 3000, 100, 0, 3000 },
	{ "trailer only",		10, 3000, 0, 100, 3000 },
	{ "largest header and trailer",	1, 70000, STABLESEND_HDTR_MAX,
					STABLESEND_HDTR_MAX, 70000 },
	{ "no header, no trailer",	5, 7000, 0, 0, 7000 },
};

static void basics(void)
{
	static const struct { int family; const char *name; } fams[] = {
		{ AF_UNIX, "unix" }, { AF_INET, "tcp4" },
	};
	unsigned int i, j;
	char what[128];

	for (i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
		for (j = 0; j < sizeof(hcases) / sizeof(hcases[0]); j++) {
			const struct hcase *c = &hcases[j];

			snprintf(what, sizeof(what), "%s %s", fams[i].name,
				 c->name);
			one(what, fams[i].family, c->start, c->count,
			    c->head_len, c->tail_len, c->flen);
		}
	}
}

static void errors(void)
{
	int fds[2], in = reopen(data_fd, O_RDONLY), wo;
	off_t off = 0;

	stream_pair(AF_UNIX, fds);
	CHECK_ERRNO(stablesend_sendfile_hdtr(fds[0], in, &off, 10, head, 1,
					     NULL, 0, 1U << 5), EINVAL);
	CHECK_ERRNO(stablesend_sendfile_hdtr(fds[0], in, &off, 10, head,
					     STABLESEND_HDTR_MAX + 1, NULL, 0,
					     0), EINVAL);
	CHECK_ERRNO(stablesend_sendfile_hdtr(fds[0], in, &off, 10, NULL, 0,
					     tail, STABLESEND_HDTR_MAX + 1,
					     0), EINVAL);
	CHECK_ERRNO(stablesend_sendfile_hdtr(fds[0], in, &off, 10, NULL, 5,
					     NULL, 0, 0), EFAULT);
	CHECK_ERRNO(stablesend_sendfile_hdtr(fds[0], in, &off, 10, NULL, 0,
					     NULL, 5, 0), EFAULT);
	/* sendfile(2)'s errors, before any byte goes out */
	CHECK_ERRNO(stablesend_sendfile_hdtr(fds[0], -1, &off, 10, head, 5,
					     NULL, 0, 0), EBADF);
	CHECK_ERRNO(stablesend_sendfile_hdtr(-1, in, &off, 10, head, 5,
					     NULL, 0, 0), EBADF);
	wo = reopen(data_fd, O_WRONLY);
	CHECK_ERRNO(stablesend_sendfile_hdtr(fds[0], wo, &off, 10, head, 5,
					     NULL, 0, 0), EBADF);
	close(wo);
	off = -1;
	CHECK_ERRNO(stablesend_sendfile_hdtr(fds[0], in, &off, 10, head, 5,
					     NULL, 0, 0), EINVAL);
	off = 0;
	CHECK_ERRNO(stablesend_sendfile_hdtr(fds[0], in, &off, -1UL, head, 5,
					     NULL, 0, 0), EINVAL);
	/* MORE alone, nothing to send: 0 */
	CHECK_RET(stablesend_sendfile_hdtr(fds[0], in, &off, 0, NULL, 0, NULL,
					   0, STABLESEND_REQ_MORE), 0);
	/* nothing at all: stablesend_sendfile()'s count 0 */
	CHECK_RET(stablesend_sendfile_hdtr(fds[0], in, &off, 0, NULL, 0, NULL,
					   0, 0), 0);
	CHECK(off == 0, "offset moved by calls that sent nothing");
	close(fds[0]);
	close(fds[1]);
	close(in);
}

/* A TCP call with STABLESEND_REQ_MORE: the bytes still arrive whole. */
static void more_flag(void)
{
	int fds[2], in = reopen(data_fd, O_RDONLY);
	off_t off = 3;
	struct sink s;
	ssize_t n;

	if (stream_pair(AF_INET, fds)) {
		close(in);
		return;
	}
	sink_start(&s, fds[1]);
	n = stablesend_sendfile_hdtr(fds[0], in, &off, 1000, head, 10, tail,
				     20, STABLESEND_REQ_MORE);
	CHECK(n == 1030, "MORE: %zd", n);
	close(fds[0]);
	sink_finish(&s);
	check_stream("MORE", s.buf, s.len, 10, 3, 1000, 20);
	free(s.buf);
	close(in);
}

/* Pipes and regular files take header, file and trailer too. */
static void other_outputs(void)
{
	int in = reopen(data_fd, O_RDONLY), p[2], out;
	unsigned char buf[4000];
	off_t off = 50;
	ssize_t n;

	if (pipe2(p, O_CLOEXEC))
		DIE("pipe");
	n = stablesend_sendfile_hdtr(p[1], in, &off, 2000, head, 100, tail,
				     200, 0);
	CHECK(n == 2300 && off == 2050, "pipe: %zd, offset %lld", n,
	      (long long)off);
	close(p[1]);
	n = read(p[0], buf, sizeof(buf));
	check_stream("pipe", buf, n > 0 ? n : 0, 100, 50, 2000, 200);
	close(p[0]);

	out = tmpfile_fd(0, 0);
	off = 50;
	n = stablesend_sendfile_hdtr(out, in, &off, 2000, head, 100, tail,
				     200, 0);
	CHECK(n == 2300 && off == 2050, "file: %zd", n);
	n = pread(out, buf, sizeof(buf), 0);
	check_stream("file", buf, n > 0 ? n : 0, 100, 50, 2000, 200);
	close(out);
	close(in);
}

/*
 * The copy path sends a header, and a trailer sent alone (as the header
 * of a call without file bytes), with its own send(): larger than a
 * non-blocking socket nobody reads can take, it is cut, the call returns
 * the part that fit and the offset stays.  (The module hands all parts
 * to the socket as one request, which AF_UNIX takes whole here; whether
 * a part gets cut while a reader drains the socket, below, is timing.)
 */
static void cut_framing(void)
{
	const size_t len = 20000;
	int i, in = reopen(data_fd, O_RDONLY);

	for (i = 0; i < 2; i++) {
		const unsigned char *part = i ? tail : head;
		const char *what = i ? "trailer" : "header";
		size_t count = i ? 0 : 1000;
		int fds[2], copy;
		off_t off = 7;
		ssize_t n;

		stream_pair(AF_UNIX, fds);
		fcntl(fds[0], F_SETFL, O_NONBLOCK);
		setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &(int){ 4096 }, sizeof(int));
		n = stablesend_sendfile_hdtr(fds[0], in, &off, count, part, len,
					     NULL, 0, 0);
		copy = stablesend_sendfile_path() == STABLESEND_PATH_COPY;
		CHECK(n > 0 && (size_t)n <= len + count &&
		      off == 7 + (n > (ssize_t)len ? n - (ssize_t)len : 0),
		      "%s of %zu bytes to a socket nobody reads: %zd, offset %lld",
		      what, len, n, (long long)off);
		if (copy)
			CHECK((size_t)n < len, "copy path: a %zu-byte %s to a full socket took %zd",
			      len, what, n);
		if (n > 0) {
			unsigned char *got = malloc(n);
			ssize_t r = recv(fds[1], got, n, MSG_WAITALL);
			size_t h = (size_t)n < len ? (size_t)n : len;

			CHECK(r == n && !memcmp(got, part, h), "%s: the peer got %zd bytes",
			      what, r);
			free(got);
		}
		close(fds[0]);
		close(fds[1]);
	}
	close(in);
}

/*
 * A non-blocking socket nobody reads: calls take what fits, then EAGAIN
 * with the offset unchanged.  Then a reader starts and the rest is sent
 * call by call with the resume rule of the man page: the peer gets the
 * exact stream.
 */
static void nonblocking(void)
{
	const size_t hlen = 20000, tlen = 15000, count = 200000;
	const off_t start = 12345;
	size_t hleft = hlen, left = count, tleft = tlen;
	int fds[2], in = reopen(data_fd, O_RDONLY), calls = 0, eagain = 0;
	int hsplit = 0, tsplit = 0;	/* calls that sent part of either */
	const unsigned char *h = head, *t = tail;
	off_t off = start;
	struct sink s;
	int reading = 0;

	stream_pair(AF_UNIX, fds);
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	/* Small, so that header, file and trailer each take several calls. */
	setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &(int){ 4096 }, sizeof(int));
	while (hleft || left || tleft) {
		off_t before = off;
		ssize_t n, hs, fs, ts;

		if (left && before >= FILE_SIZE)
			left = 0;	/* not reached: the file is long enough */
		/* Once header and range are done, the trailer is the header. */
		if (!hleft && !left)
			n = stablesend_sendfile_hdtr(fds[0], in, &off, 0, t,
						     tleft, NULL, 0, 0);
		else
			n = stablesend_sendfile_hdtr(fds[0], in, &off, left,
						     h, hleft, t, tleft, 0);
		calls++;
		if (n < 0) {
			CHECK(errno == EAGAIN, "errno %s", strerror(errno));
			CHECK(off == before, "offset moved on EAGAIN");
			if (errno != EAGAIN)
				break;
			eagain++;
			if (!reading) {
				sink_start(&s, fds[1]);
				reading = 1;
			}
			poll(&(struct pollfd){ .fd = fds[0], .events = POLLOUT },
			     1, 1000);
			continue;
		}
		CHECK(n > 0, "returned 0 with bytes left");
		if (n <= 0)
			break;
		fs = off - before;
		if (!hleft && !left) {
			CHECK(fs == 0 && (size_t)n <= tleft, "trailer call: %zd",
			      n);
			tsplit += (size_t)n < tleft;
			t += n;
			tleft -= n;
			continue;
		}
		hs = (size_t)n < hleft ? n : (ssize_t)hleft;
		ts = n - hs - fs;
		CHECK(fs >= 0 && (size_t)fs <= left && ts >= 0 &&
		      (size_t)ts <= tleft && (!fs || hs == (ssize_t)hleft) &&
		      (!ts || (size_t)fs == left),
		      "call %d: %zd = %zd + %zd + %zd", calls, n, hs, fs, ts);
		if (t_failed)
			break;
		hsplit += hs && (size_t)hs < hleft;
		tsplit += ts && (size_t)ts < tleft;
		h += hs;
		hleft -= hs;
		left -= fs;
		t += ts;
		tleft -= ts;
	}
	CHECK(eagain > 0, "the socket never filled");
	close(fds[0]);
	if (!reading)
		sink_start(&s, fds[1]);
	sink_finish(&s);
	check_stream("non-blocking", s.buf, s.len, hlen, start, count, tlen);
	printf("non-blocking: %d calls, %d EAGAIN, header split %d times, "
	       "trailer %d times\n", calls, eagain, hsplit, tsplit);
	free(s.buf);
	close(in);
}

/* Rewritten right after the call: the peer still gets the old bytes. */
static void stable(void)
{
	static unsigned char a[65536], b[65536], got[65536 + 200];
	int fds[2], fd = tmpfile_fd(0, 0);
	size_t len = 0, i, bad = 0;
	off_t off = 0;
	ssize_t n;

	memset(a, 'A', sizeof(a));
	memset(b, 'B', sizeof(b));
	if (pwrite(fd, a, sizeof(a), 0) != sizeof(a))
		DIE("pwrite");
	stream_pair(AF_UNIX, fds);
	n = stablesend_sendfile_hdtr(fds[0], fd, &off, sizeof(a), head, 100,
				     tail, 100, 0);
	CHECK(n == (ssize_t)sizeof(a) + 200, "stable: %zd", n);
	if (pwrite(fd, b, sizeof(b), 0) != sizeof(b))
		DIE("pwrite");
	close(fds[0]);
	while ((n = read(fds[1], got + len, sizeof(got) - len)) > 0)
		len += n;
	CHECK(len == sizeof(got), "stable: received %zu", len);
	for (i = 100; i < len - 100; i++)
		bad += got[i] != 'A';
	CHECK(!bad, "stable: %zu bytes changed after return", bad);
	close(fds[1]);
	close(fd);
}

int main(void)
{
	static const char *const paths[] = { "none", "module", "copy" };
	size_t i;

	for (i = 0; i < sizeof(head); i++)
		head[i] = 'h' + i % 7;
	for (i = 0; i < sizeof(tail); i++)
		tail[i] = 'T' - i % 5;
	data_fd = tmpfile_fd(FILE_SIZE, SEED);
	basics();
	errors();
	more_flag();
	other_outputs();
	cut_framing();
	nonblocking();
	stable();
	printf("path used: %s\n", paths[stablesend_sendfile_path()]);
	return t_result();
}
