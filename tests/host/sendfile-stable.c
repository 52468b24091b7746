// SPDX-License-Identifier: MIT
/*
 * stablesend_sendfile() is stable: what the receiver gets is the file as it
 * was during the call, even if the file is rewritten right after return.
 *
 * 1. Seed scenario: file holds A, send it, overwrite with B, only then
 *    read the receiving end: it must hold A.  sendfile(2) run the same way
 *    is the control (on kernels that hand page-cache pages to the socket
 *    by reference it shows B; informational only).
 * 2. Under fire: a writer thread keeps rewriting the file with generation
 *    stamped bytes while calls are made; every received byte's generation
 *    must lie between the last generation completed before the call and
 *    the last one started before its return.
 */
#include <stdint.h>
#include <sys/sendfile.h>
#include <time.h>

#include <stablesend.h>

#include "common.h"

#define SEED_SIZE	(64 * 1024)	/* fits the socket buffers unread */
#define FIRE_FILE	(256 * 1024)
#define FIRE_CALLS	2000
#define FIRE_MAX	(32 * 1024)

typedef ssize_t (*sendfile_fn)(int, int, off_t *, size_t);

static ssize_t real_sendfile(int out, int in, off_t *off, size_t count)
{
	return sendfile(out, in, off, count);
}

/* Returns the number of bytes of the output that are not A. */
static long seed_run(int family, sendfile_fn fn, const char *what)
{
	static unsigned char a[SEED_SIZE], b[SEED_SIZE], got[SEED_SIZE + 1];
	int fds[2], fd;
	size_t len = 0;
	off_t off = 0;
	ssize_t n;
	long diff = 0;
	size_t i;

	memset(a, 'A', sizeof(a));
	memset(b, 'B', sizeof(b));
	if (stream_pair(family, fds))
		return -1;
	fd = tmpfile_fd(0, 0);
	if (pwrite(fd, a, sizeof(a), 0) != sizeof(a))
		DIE("pwrite A");

	while (off < SEED_SIZE) {
		n = fn(fds[0], fd, &off, SEED_SIZE - off);
		if (n <= 0)
			DIE("%s: %zd", what, n);
	}
	/* The call returned: rewrite the file in place, then receive. */
	if (pwrite(fd, b, sizeof(b), 0) != sizeof(b))
		DIE("pwrite B");
	close(fds[0]);
	while ((n = read(fds[1], got + len, sizeof(got) - len)) > 0)
		len += n;
	if (n < 0)
		DIE("read");
	close(fds[1]);
	close(fd);

	if (len != SEED_SIZE) {
		fprintf(stderr, "%s: received %zu of %d bytes\n", what, len,
			SEED_SIZE);
		return SEED_SIZE;
	}
	for (i = 0; i < len; i++)
		diff += got[i] != 'A';
	return diff;
}

static void seed(void)
{
	static const struct { int family; const char *name; } fams[] = {
		{ AF_UNIX, "unix" }, { AF_INET, "tcp4" }, { AF_INET6, "tcp6" },
	};
	unsigned int i;

	for (i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
		long bad = seed_run(fams[i].family, stablesend_sendfile,
				    "stablesend");
		long ctl;

		if (bad < 0) {
			printf("seed %s: unavailable, skipped\n", fams[i].name);
			continue;
		}
		CHECK(bad == 0, "seed %s: %ld bytes changed after return",
		      fams[i].name, bad);
		ctl = seed_run(fams[i].family, real_sendfile, "sendfile");
		printf("seed %s: stablesend %s (%ld bytes of B); control "
		       "sendfile(2) shows %ld bytes of B%s\n", fams[i].name,
		       bad ? "UNSTABLE" : "stable", bad, ctl,
		       ctl ? " (unstable, as expected)" : "");
	}
}

/* Under fire. */
static int fire_fd;
static unsigned int gen_started, gen_done;	/* atomics */
static volatile int fire_stop;

static void *writer(void *arg)
{
	static unsigned char buf[FIRE_FILE];
	unsigned int g;

	(void)arg;
	for (g = 1; !fire_stop; g++) {
		__atomic_store_n(&gen_started, g, __ATOMIC_SEQ_CST);
		memset(buf, g & 0xff, sizeof(buf));
		/* Several writes: pread() may see any mix of them. */
		for (size_t o = 0; o < FIRE_FILE; o += 16384)
			if (pwrite(fire_fd, buf, 16384, o) != 16384)
				DIE("pwrite");
		__atomic_store_n(&gen_done, g, __ATOMIC_SEQ_CST);
	}
	return NULL;
}

struct call {
	unsigned int lo, hi;
	size_t len;
};

static void fire(void)
{
	static struct call calls[FIRE_CALLS];
	unsigned long long violations = 0, checked = 0, skipped = 0;
	int fds[2], sz = 4 << 20;
	unsigned int i, seed = 1;
	pthread_t wt;
	struct sink s;
	size_t pos = 0;

	fire_fd = tmpfile_fd(FIRE_FILE, 0);
	if (stream_pair(AF_UNIX, fds))
		DIE("socketpair");
	setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	sink_start(&s, fds[1]);
	errno = pthread_create(&wt, NULL, writer, NULL);
	if (errno)
		DIE("pthread_create");
	while (!__atomic_load_n(&gen_done, __ATOMIC_SEQ_CST))
		sched_yield();

	for (i = 0; i < FIRE_CALLS; i++) {
		off_t off, start;
		size_t len;
		ssize_t n;

		seed = seed * 1103515245 + 12345;
		len = 1 + (seed >> 8) % FIRE_MAX;
		start = (seed >> 3) % (FIRE_FILE - len);
		off = start;
		calls[i].lo = __atomic_load_n(&gen_done, __ATOMIC_SEQ_CST);
		n = stablesend_sendfile(fds[0], fire_fd, &off, len);
		calls[i].hi = __atomic_load_n(&gen_started, __ATOMIC_SEQ_CST);
		if (n < 0)
			DIE("stablesend_sendfile");
		CHECK(off == start + n, "offset not advanced");
		calls[i].len = n;
	}
	fire_stop = 1;
	pthread_join(wt, NULL);
	close(fds[0]);
	sink_finish(&s);

	for (i = 0; i < FIRE_CALLS; i++) {
		unsigned int span = calls[i].hi - calls[i].lo;
		size_t j;

		if (pos + calls[i].len > s.len)
			break;
		if (span >= 255) {	/* byte stamps would wrap */
			skipped++;
			pos += calls[i].len;
			continue;
		}
		for (j = 0; j < calls[i].len; j++) {
			unsigned int d = (s.buf[pos + j] - calls[i].lo) & 0xff;

			violations += d > span;
		}
		checked += calls[i].len;
		pos += calls[i].len;
	}
	CHECK(pos == s.len, "received %zu bytes, sent %zu", s.len, pos);
	CHECK(violations == 0, "%llu bytes outside their call's generations",
	      violations);
	CHECK(checked > 0, "nothing checked");
	printf("under fire: %u calls, %llu bytes checked, %llu calls "
	       "skipped, %llu violations, %u generations written\n",
	       FIRE_CALLS, checked, skipped, violations, gen_done);
	free(s.buf);
	close(fire_fd);
}

int main(void)
{
	seed();
	fire();
	printf("path used: %s\n", stablesend_sendfile_path() ==
	       STABLESEND_PATH_MODULE ? "module" : "copy");
	return t_result();
}
