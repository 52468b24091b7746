// SPDX-License-Identifier: GPL-2.0
/*
 * A file whose read fails part way: a request with a trailer, and every
 * SUBMIT, fails with EIO and sends nothing, header and trailer included:
 * it is not taken for a file that ends there (a trailer after the bytes
 * read would go out in the place of the file's missing rest, and a short
 * SENT record would look like end of file).  A SEND without a trailer
 * (bare, or with a header only) sends the bytes before the failure and
 * returns the bytes sent, as sendfile(2) does; the next SEND, from the
 * failing byte, gets EIO.
 *
 * The failing read: a memfd (shmem) of three pages whose middle page is
 * poisoned (madvise(MADV_HWPOISON), root, in a child that the poisoning
 * kills): shmem keeps the page and its reads fail with EIO, after
 * returning the page before it (checked with pread(2) first).  A range that ends before the poisoned page is still
 * sent whole.
 *
 * compat32: yes
 */
#include "common.h"
#include <stablesend.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#ifndef MADV_HWPOISON
#define MADV_HWPOISON	100
#endif

#define PAGE	4096
#define HDTR	"0123456789"

/* Bytes @fd has to read within @ms (0 when none). */
static size_t pending(int fd, int ms, unsigned char *buf, size_t n)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t got;

	if (poll(&p, 1, ms) != 1)
		return 0;
	got = recv(fd, buf, n, MSG_DONTWAIT);
	return got > 0 ? (size_t)got : 0;
}

static struct stablesend_req framed(int file, int sock, uint64_t len, int hdtr)
{
	struct stablesend_req r = ss_req(file, sock, 0, len, 7);

	if (hdtr)
		stablesend_prep_hdtr(&r, HDTR, sizeof(HDTR) - 1, HDTR,
				     sizeof(HDTR) - 1);
	return r;
}

int main(void)
{
	static unsigned char buf[4 * PAGE];
	struct stablesend_counters c0, c1;
	int dev = ss_dev(), file, a, b, hdtr, status;
	struct stablesend_req r;
	unsigned char *map;
	ssize_t n;
	pid_t pid;
	long res;

	file = memfd_create("readerror", 0);
	REQUIRE(file >= 0, "memfd_create: %s", strerror(errno));
	memset(buf, 'f', 3 * PAGE);
	write_full(file, buf, 3 * PAGE, 0);
	/* In a child: who maps a dirty page that is poisoned gets SIGBUS. */
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		map = mmap(NULL, 3 * PAGE, PROT_READ, MAP_SHARED, file, 0);
		if (map == MAP_FAILED || map[PAGE] != 'f')
			_exit(2);
		if (madvise(map + PAGE, PAGE, MADV_HWPOISON)) {
			fprintf(stderr, "madvise(MADV_HWPOISON): %s (the kernel needs CONFIG_MEMORY_FAILURE)\n",
				strerror(errno));
			_exit(3);
		}
		_exit(0);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	REQUIRE((WIFEXITED(status) && !WEXITSTATUS(status)) ||
		(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS),
		"the child that poisons the page: status %#x", status);
	n = pread(file, buf, 3 * PAGE, 0);
	REQUIRE(n == PAGE, "pread of the three pages: %zd, want %d (the first)", n, PAGE);
	n = pread(file, buf, PAGE, PAGE);
	REQUIRE(n < 0 && errno == EIO, "pread of the poisoned page: %zd (%s), want EIO",
		n, n < 0 ? strerror(errno) : "no error");

	ss_counters(dev, &c0);
	unix_pair(&a, &b);
	for (hdtr = 0; hdtr < 2; hdtr++) {
		const char *what = hdtr ? "with header and trailer" : "bare";
		size_t got;

		r = framed(file, a, 3 * PAGE, hdtr);
		errno = 0;
		res = ss_send(dev, &r);
		if (hdtr) {
			CHECK(res < 0 && errno == EIO, "SEND %s: %ld (%s), want EIO", what,
			      res, strerror(errno));
		} else {
			/* As sendfile(2): the bytes before the failure, then EIO. */
			CHECK(res == PAGE, "SEND %s: %ld (%s), want the %d bytes before the failure",
			      what, res, res < 0 ? strerror(errno) : "", PAGE);
			got = read_full(b, buf, res > 0 ? (size_t)res : 0);
			CHECK(got == PAGE && bytes_of(buf, got, 'f') == got,
			      "%s: the peer got %zu bytes, want the first page", what, got);
			r = ss_req(file, a, PAGE, 2 * PAGE, 7);
			errno = 0;
			res = ss_send(dev, &r);
			CHECK(res < 0 && errno == EIO, "SEND %s from the failing page: %ld (%s), want EIO",
			      what, res, strerror(errno));
			/* A header but no trailer: the header and the first page. */
			r = ss_req(file, a, 0, 3 * PAGE, 7);
			stablesend_prep_hdtr(&r, HDTR, sizeof(HDTR) - 1, NULL, 0);
			res = ss_send(dev, &r);
			CHECK(res == PAGE + (long)sizeof(HDTR) - 1,
			      "SEND with a header only: %ld (%s), want the header and the first page",
			      res, res < 0 ? strerror(errno) : "");
			got = read_full(b, buf, res > 0 ? (size_t)res : 0);
			CHECK(got == PAGE + sizeof(HDTR) - 1 && !memcmp(buf, HDTR, sizeof(HDTR) - 1) &&
			      bytes_of(buf + sizeof(HDTR) - 1, PAGE, 'f') == PAGE,
			      "header only: the peer got %zu bytes, want the header and the first page",
			      got);
		}
		r = framed(file, a, 3 * PAGE, hdtr);
		errno = 0;
		res = ss_submit(dev, &r, 1);
		CHECK(res < 0 && errno == EIO, "SUBMIT %s: %ld (%s), want EIO", what, res,
		      strerror(errno));
		got = pending(b, 300, buf, sizeof(buf));
		CHECK(got == 0, "%s: the peer got %zu bytes of failed requests", what, got);
		/* What ends before the poisoned page goes out whole. */
		r = framed(file, a, PAGE, hdtr);
		res = ss_send(dev, &r);
		CHECK(res == PAGE + (hdtr ? 2 * (long)sizeof(HDTR) - 2 : 0),
		      "SEND %s of the first page: %ld", what, res);
		got = read_full(b, buf, res > 0 ? (size_t)res : 0);
		CHECK(got == (size_t)(res > 0 ? res : 0) &&
		      (!hdtr || (!memcmp(buf, HDTR, sizeof(HDTR) - 1) &&
				 !memcmp(buf + got - (sizeof(HDTR) - 1), HDTR,
					 sizeof(HDTR) - 1))),
		      "%s: the first page's framing", what);
	}
	ss_counters(dev, &c1);
	CHECK(c1.submitted == c0.submitted + 4,
	      "%llu requests accepted, want 4: the bare and the header-only SEND's, the first page's 2",
	      (unsigned long long)(c1.submitted - c0.submitted));
	close(a);
	close(b);
	close(file);
	close(dev);
	CHECK(ss_drained(10 * ss_debug_scale(4)), "pages still in flight: %lld requests",
	      ss_stat("requests_in_flight"));
	printf("a read failing after the first page: bare SEND the first page, then EIO; "
	       "with a trailer and SUBMIT EIO, nothing sent; the first page alone whole\n");
	return test_result();
}
