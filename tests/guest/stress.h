/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared by failinject, races and load: pattern files, the time budget
 * (smaller on a debug kernel), and the end-of-test check that the module
 * holds nothing any more.
 */
#ifndef STABLESEND_TEST_STRESS_H
#define STABLESEND_TEST_STRESS_H

#include "watchdog.h"

/* A file of @size bytes of pattern @seed (byte i is pat(i, seed)). */
static inline int pattern_file(size_t size, unsigned int seed)
{
	size_t chunk = 1 << 20, pos, i;
	unsigned char *b = malloc(chunk);
	int fd = temp_file(0, 0);

	REQUIRE(b, "malloc");
	for (pos = 0; pos < size; pos += chunk) {
		size_t n = size - pos < chunk ? size - pos : chunk;

		for (i = 0; i < n; i++)
			b[i] = pat(pos + i, seed);
		write_full(fd, b, n, pos);
	}
	free(b);
	return fd;
}

/* Index of the first byte of @b that is not pattern @seed from @pos, or @n. */
static inline size_t pattern_check(const unsigned char *b, size_t n,
				   uint64_t pos, unsigned int seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i] != pat(pos + i, seed))
			break;
	return i;
}

static inline double budget_s(double stock)
{
	const char *e = getenv("STABLESEND_STRESS_SECONDS");

	if (e && atof(e) > 0)
		return atof(e);
	return stock / ss_debug_scale(3);	/* a debug kernel is slower */
}

/*
 * Wait until the module holds no request and no page, and the number of
 * contexts is back to @contexts; false (with the values printed) on timeout.
 */
static inline int module_idle(long long contexts, double timeout_s)
{
	double end = now_s() + timeout_s;

	for (;;) {
		long long r = ss_stat("requests_in_flight");
		long long b = ss_stat("bytes_in_flight");
		long long p = ss_stat("pool_bytes");
		long long c = ss_stat("contexts");

		if (!r && !b && !p && c == contexts)
			return 1;
		if (now_s() > end) {
			fprintf(stderr, "not idle: requests_in_flight %lld bytes_in_flight %lld "
				"pool_bytes %lld contexts %lld (expected %lld)\n",
				r, b, p, c, contexts);
			return 0;
		}
		usleep(20000);
	}
}

/*
 * Start of a stress test: line-buffered output, SKIP without the device,
 * no SIGPIPE, nothing in flight from earlier tests.  Returns the contexts
 * that are not this test's (ss_contexts_baseline), for module_idle() at
 * the end.
 */
static inline long long stress_begin(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (access(STABLESEND_DEVICE, F_OK))
		exit(SKIP);
	signal(SIGPIPE, SIG_IGN);
	CHECK(ss_drained(10), "pages in flight before the test");
	return ss_contexts_baseline();
}

/* A uniformly random 64-bit value from @seed (xorshift64*). */
static inline uint64_t rnd(uint64_t *seed)
{
	uint64_t x = *seed;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*seed = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Roughly log-uniform in [1, max]. */
static inline uint64_t rnd_size(uint64_t *seed, uint64_t max)
{
	uint64_t bits = 1 + rnd(seed) % 21, v = 1 + rnd(seed) % (1ULL << bits);

	return v > max ? max : v;
}

#endif
