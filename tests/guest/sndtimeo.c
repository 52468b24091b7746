// SPDX-License-Identifier: GPL-2.0
/*
 * SEND honours the socket's SO_SNDTIMEO, like sendfile(2) (issue 13).  A
 * blocking TCP socket with SO_SNDTIMEO 300 ms whose peer does not read:
 * - a SEND of 4 MiB (far more than fits) returns within 2 s with the bytes
 *   the socket took, a count below the request;
 * - then, the socket full, SEND returns -1 EAGAIN after waiting the timeout
 *   (at least 0.2 s, at most 2 s), or a small count if acknowledgements made
 *   room meanwhile; again until EAGAIN;
 * - the peer, draining afterwards, receives exactly the bytes reported, in
 *   order, with the file's content, and nothing more.
 * Calls are given 5 s; then the peer drains to let a blocked call return.
 * compat32: yes
 */
#include "common.h"
#include <pthread.h>

#define REQ_LEN		(4 << 20)
#define FILE_LEN	(8 << 20)
#define LIMIT		2.0	/* s: what a call may take */
#define GIVE_UP		5.0	/* s: then the peer drains */

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 5 + (i >> 13) + 9);
}

struct call {
	int dev;
	struct stablesend_req r;
	long ret;
	int err;
	int done;		/* __atomic */
};

static void *do_send(void *arg)
{
	struct call *k = arg;

	k->ret = ss_send(k->dev, &k->r);
	k->err = errno;
	__atomic_store_n(&k->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static unsigned char *rx;
static size_t rx_len;

static void rx_some(int s, int ms)
{
	struct pollfd p = { .fd = s, .events = POLLIN };
	ssize_t n;

	if (poll(&p, 1, ms) != 1)
		return;
	n = recv(s, rx + rx_len, FILE_LEN + 1 - rx_len, MSG_DONTWAIT);
	if (n > 0)
		rx_len += n;
}

/* SEND @len bytes at @off; the seconds it took, or -1 if the peer had to drain. */
static double timed_send(struct call *k, int s, uint64_t off, size_t len)
{
	double t0 = now_s(), took;
	pthread_t t;

	k->r.offset = off;
	k->r.len = len;
	k->done = 0;
	pthread_create(&t, NULL, do_send, k);
	while (!__atomic_load_n(&k->done, __ATOMIC_ACQUIRE) && now_s() - t0 < GIVE_UP)
		usleep(2000);
	took = now_s() - t0;
	if (!__atomic_load_n(&k->done, __ATOMIC_ACQUIRE)) {
		CHECK(0, "SEND of %zu bytes with SO_SNDTIMEO 300 ms, peer not reading: still blocked after %.1f s",
		      len, took);
		while (!__atomic_load_n(&k->done, __ATOMIC_ACQUIRE))
			rx_some(s, 10);
		fprintf(stderr, "it returned %ld (errno %d) once the peer read %zu bytes\n",
			k->ret, k->err, rx_len);
		took = -1;
	}
	pthread_join(t, NULL);
	return took;
}

int main(void)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = 300000 };
	struct call k = { 0 };
	int file, c, s, v = 64 << 10, i, eagain = 0;
	size_t sent = 0, j;
	double took;

	setvbuf(stdout, NULL, _IOLBF, 0);
	rx = malloc(FILE_LEN + 1);
	REQUIRE(rx, "malloc");
	file = file_with_pattern(FILE_LEN, pat);
	k.dev = ss_dev();
	REQUIRE(ss_setup(k.dev, -1, 32 << 20) == 0, "SETUP");
	tcp_pair(AF_INET, &c, &s);
	REQUIRE(setsockopt(c, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) == 0, "SO_SNDBUF");
	REQUIRE(setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0, "SO_SNDTIMEO");
	k.r = ss_req(file, c, 0, 0, 1);

	/* More than fits: a partial count after the timeout. */
	took = timed_send(&k, s, 0, REQ_LEN);
	if (took >= 0) {
		CHECK(took < LIMIT, "SEND of 4 MiB took %.2f s", took);
		CHECK(k.ret > 0 && k.ret < REQ_LEN,
		      "SEND of 4 MiB with the peer not reading: %ld (errno %d), want a partial count",
		      k.ret, k.err);
		printf("SEND of %d bytes: %ld (errno %d) in %.3f s\n", REQ_LEN, k.ret,
		       k.ret < 0 ? k.err : 0, took);
	}
	if (k.ret > 0)
		sent += k.ret;

	/* Full now: EAGAIN after the timeout (small counts if room appeared). */
	for (i = 0; took >= 0 && i < 20 && sent + REQ_LEN <= FILE_LEN; i++) {
		took = timed_send(&k, s, sent, REQ_LEN);
		if (took < 0) {
			if (k.ret > 0)
				sent += k.ret;
			break;
		}
		CHECK(took < LIMIT, "SEND on a full socket took %.2f s", took);
		if (k.ret < 0) {
			CHECK(k.err == EAGAIN, "SEND on a full socket: errno %d, want EAGAIN",
			      k.err);
			CHECK(took >= 0.2,
			      "SEND on a full socket gave EAGAIN after %.3f s, before SO_SNDTIMEO (0.3 s)",
			      took);
			printf("SEND on the full socket: EAGAIN after %.3f s\n", took);
			eagain = 1;
			break;
		}
		CHECK(k.ret < REQ_LEN, "SEND on a full socket: %ld bytes", k.ret);
		printf("SEND on the full socket: %ld bytes in %.3f s\n", k.ret, took);
		sent += k.ret;
	}
	CHECK(eagain || took < 0, "no EAGAIN from SEND on a full socket with SO_SNDTIMEO");

	usleep(300000);
	shutdown(c, SHUT_WR);
	for (;;) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 10000) != 1)
			break;
		n = recv(s, rx + rx_len, FILE_LEN + 1 - rx_len, 0);
		if (n <= 0)
			break;
		rx_len += n;
	}
	CHECK(rx_len == sent, "the peer received %zu bytes, SEND reported %zu", rx_len, sent);
	j = pattern_mismatch(rx, rx_len, 0, pat);
	CHECK(j == rx_len, "received byte %zu differs from the file", j);
	printf("reported %zu bytes, the peer received %zu\n", sent, rx_len);
	close(c);
	close(s);
	close(k.dev);
	close(file);
	free(rx);
	CHECK(ss_drained(10), "requests_in_flight %lld bytes_in_flight %lld",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	return test_result();
}
