// SPDX-License-Identifier: GPL-2.0
/*
 * The seed scenario (shared/seeds/001): the file holds A, a send is made,
 * the file is overwritten with B right after the call returns, and only
 * then does the receiver read.  stablesend (synchronous and asynchronous)
 * must deliver A.  sendfile(2) and splice(2) through a pipe hand page-cache
 * pages over by reference and must show B in every run: that proves the
 * harness sees the instability it exists to prevent wherever it can occur.
 *
 * Sizes from 1 byte to 8 MiB, aligned and unaligned offsets, TCP over IPv4
 * loopback.  Socket buffers are forced large so every byte is still queued
 * when the overwrite lands.
 * compat32: yes
 */
#include "common.h"
#include <sys/sendfile.h>

enum method { M_SYNC, M_ASYNC, M_SENDFILE, M_SPLICE, M_NR };
static const char *const method_name[M_NR] = {
	"stablesend-sync", "stablesend-async", "sendfile", "splice",
};

static unsigned char pattern(size_t pos, int gen)
{
	unsigned char a = (unsigned char)(pos * 131 + pos / 4096 * 7 + 1);

	return gen == 0 ? a : (unsigned char)~a;
}

static void fill(unsigned char *buf, size_t off, size_t n, int gen)
{
	size_t i;

	for (i = 0; i < n; i++)
		buf[i] = pattern(off + i, gen);
}

static void big_buffers(int fd)
{
	int v = 64 << 20;

	/* root in the guest: beyond rmem_max/wmem_max */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v));
}

static long do_send(enum method m, int dev, int file, int sock, off_t off,
		    size_t len)
{
	struct stablesend_req r = ss_req(file, sock, off, len, 42);
	long total = 0;
	int p[2];

	switch (m) {
	case M_SYNC:
		return ss_send(dev, &r);
	case M_ASYNC:
		if (ss_submit(dev, &r, 1) != 1)
			return -1;
		/* Overwrite happens now; the completion is checked later. */
		return (long)len;
	case M_SENDFILE:
		while ((size_t)total < len) {
			ssize_t n = sendfile(sock, file, &off, len - total);

			if (n <= 0)
				return -1;
			total += n;
		}
		return total;
	case M_SPLICE:
		REQUIRE(pipe(p) == 0, "pipe");
		fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
		while ((size_t)total < len) {
			ssize_t n = splice(file, &off, p[1], NULL, len - total, 0);
			ssize_t m2 = 0;

			if (n <= 0)
				return -1;
			while (m2 < n) {
				ssize_t k = splice(p[0], NULL, sock, NULL, n - m2, 0);

				if (k <= 0)
					return -1;
				m2 += k;
			}
			total += n;
		}
		close(p[0]);
		close(p[1]);
		return total;
	default:
		return -1;
	}
}

/* Returns the number of received bytes that are B (the overwrite), or -1. */
static long run_one(enum method m, int dev, size_t off, size_t len)
{
	size_t fsize = off + len + 4096;
	unsigned char *a = malloc(fsize), *got = malloc(len);
	int file, c, s;
	long ret, changed = 0;
	size_t i, n;

	REQUIRE(a && got, "malloc");
	fill(a, 0, fsize, 0);
	file = temp_file(0, 0);
	write_full(file, a, fsize, 0);
	tcp_pair(AF_INET, &c, &s);
	big_buffers(c);
	big_buffers(s);

	ret = do_send(m, dev, file, c, off, len);
	/* Right after the call returns: overwrite every byte with B. */
	fill(a, 0, fsize, 1);
	write_full(file, a, fsize, 0);
	if (ret != (long)len) {
		fprintf(stderr, "%s off %zu len %zu: send returned %ld\n",
			method_name[m], off, len, ret);
		failures++;
		changed = -1;
		goto out;
	}
	if (m == M_ASYNC) {
		struct stablesend_cqe cqe;

		n = read_full(s, got, len);
		CHECK(ss_reap(dev, &cqe, 1, 10000) == 1, "no completion");
		CHECK(cqe.res == (long long)len && cqe.user_data == 42 &&
		      (cqe.flags & STABLESEND_CQE_SENT),
		      "cqe res %lld flags %#x", (long long)cqe.res, cqe.flags);
	} else {
		n = read_full(s, got, len);
	}
	CHECK(n == len, "%s: received %zu of %zu bytes", method_name[m], n, len);
	for (i = 0; i < n; i++) {
		if (got[i] == pattern(off + i, 1))
			changed++;
		else if (got[i] != pattern(off + i, 0))
			break;
	}
	CHECK(i == n, "%s: byte %zu is neither A nor B", method_name[m], i);
out:
	close(c);
	close(s);
	close(file);
	free(a);
	free(got);
	return changed;
}

int main(void)
{
	static const size_t sizes[] = { 1, 4095, 4096, 65536 + 3, 1 << 20,
					8 << 20 };
	static const size_t offs[] = { 0, 1, 4093 };
	int dev = ss_dev();
	unsigned int si, oi;
	enum method m;

	REQUIRE(ss_setup(dev, -1, 64 << 20) == 0, "SETUP");
	for (m = 0; m < M_NR; m++) {
		long unstable_runs = 0, runs = 0;

		for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
			for (oi = 0; oi < sizeof(offs) / sizeof(offs[0]); oi++) {
				long changed = run_one(m, dev, offs[oi], sizes[si]);

				runs++;
				if (changed > 0)
					unstable_runs++;
				if (m <= M_ASYNC)
					CHECK(changed == 0,
					      "%s off %zu len %zu: %ld bytes of the overwrite were sent",
					      method_name[m], offs[oi], sizes[si], changed);
			}
		}
		printf("%-17s %ld/%ld runs saw the overwrite\n", method_name[m],
		       unstable_runs, runs);
		/*
		 * The controls must be caught out, or this test proves
		 * nothing: in every run, since the socket buffers hold the
		 * whole range and the receiver reads only after the
		 * overwrite, so pages sent by reference always carry B.
		 */
		if (m >= M_SENDFILE)
			CHECK(unstable_runs == runs,
			      "%s showed the overwrite in %ld of %ld runs: the test could miss it",
			      method_name[m], unstable_runs, runs);
	}
	close(dev);
	CHECK(ss_drained(10), "pages still in flight");
	return test_result();
}
