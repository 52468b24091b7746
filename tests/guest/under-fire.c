// SPDX-License-Identifier: GPL-2.0
/*
 * Under fire: writer threads keep rewriting generation-stamped blocks of
 * the file while requests are submitted.  Every byte of block b carries
 * the low byte of the generation that wrote it.  For each request the
 * submitter records, per block, the last generation completed just before
 * the call (lo) and the last one started just after it returned (hi); a
 * received byte is valid only if it belongs to a generation in [lo, hi].
 * A byte from after the call returned (or from nowhere) is a violation.
 *
 * Requests mix synchronous and asynchronous submission, unaligned ranges
 * and several sockets; the receivers check every byte as it arrives.  A
 * short control run with sendfile(2) must show violations, or the check
 * could not fail.
 */
#include "common.h"
#include <pthread.h>
#include <stdatomic.h>
#include <sys/sendfile.h>

#define BLK		4096
#define NBLK		256
#define NWRITERS	2
#define NSOCK		3
#define MAXBLK		6		/* blocks a request may touch */
#define NREQ_DEFAULT	3334		/* per socket: 10002 requests */

struct rec {
	uint64_t off, len;
	uint32_t lo[MAXBLK], hi[MAXBLK];
	atomic_int ready;
};

static int file;
static _Atomic uint32_t started[NBLK], done[NBLK];
static atomic_int stop;
static long nreq;
static struct rec *recs[NSOCK];
static atomic_long violations, checked_bytes;

static void *writer(void *arg)
{
	long id = (long)arg;
	unsigned char buf[BLK];
	unsigned int seed = id * 77 + 1;

	while (!atomic_load(&stop)) {
		unsigned int b = rand_r(&seed) % NBLK;
		uint32_t g;

		if (b % NWRITERS != id)
			continue;
		g = atomic_load(&started[b]) + 1;
		atomic_store(&started[b], g);
		memset(buf, g & 0xff, BLK);
		write_full(file, buf, BLK, (off_t)b * BLK);
		atomic_store(&done[b], g);
		if (rand_r(&seed) % 4 == 0)
			sched_yield();
	}
	return NULL;
}

static int valid(unsigned char v, uint32_t lo, uint32_t hi)
{
	uint32_t g;

	if (hi - lo >= 255)
		return 1;	/* window covers every byte value: no verdict */
	for (g = lo; g != hi + 1; g++)
		if ((g & 0xff) == v)
			return 1;
	return 0;
}

struct rx {
	int sock, idx;
};

static void *receiver(void *arg)
{
	struct rx *rx = arg;
	unsigned char *buf = malloc(MAXBLK * BLK);
	long i;

	for (i = 0; i < nreq; i++) {
		struct rec *r = &recs[rx->idx][i];
		uint64_t k;

		while (!atomic_load(&r->ready))
			usleep(100);
		if (read_full(rx->sock, buf, r->len) != r->len) {
			fprintf(stderr, "socket %d: stream ended at request %ld\n",
				rx->idx, i);
			atomic_fetch_add(&violations, 1);
			break;
		}
		for (k = 0; k < r->len; k++) {
			uint64_t pos = r->off + k;
			unsigned int bi = pos / BLK - r->off / BLK;

			if (!valid(buf[k], r->lo[bi], r->hi[bi])) {
				if (atomic_fetch_add(&violations, 1) < 5)
					fprintf(stderr,
						"socket %d req %ld byte %llu: gen byte %u outside [%u, %u]\n",
						rx->idx, i,
						(unsigned long long)pos, buf[k],
						r->lo[bi], r->hi[bi]);
			}
		}
		atomic_fetch_add(&checked_bytes, r->len);
	}
	free(buf);
	return NULL;
}

/* One run of @n requests per socket; returns the number of violations. */
static long run(long n, int use_sendfile)
{
	pthread_t w[NWRITERS], rt[NSOCK];
	struct rx rx[NSOCK];
	int dev, c[NSOCK], s[NSOCK], k;
	unsigned int seed = 12345;
	long i, reaped = 0, outstanding = 0;
	struct stablesend_cqe cqe[64];
	unsigned char zero[BLK] = { 0 };
	double t0;

	nreq = n;
	for (i = 0; i < NBLK; i++) {
		atomic_store(&started[i], 0);
		atomic_store(&done[i], 0);
	}
	atomic_store(&stop, 0);
	atomic_store(&violations, 0);
	atomic_store(&checked_bytes, 0);
	file = temp_file(0, 0);
	for (i = 0; i < NBLK; i++)
		write_full(file, zero, BLK, i * BLK);
	dev = ss_dev();
	REQUIRE(ss_setup(dev, -1, 16 << 20) == 0, "SETUP");
	for (k = 0; k < NSOCK; k++) {
		tcp_pair(k == 1 ? AF_INET6 : AF_INET, &c[k], &s[k]);
		recs[k] = calloc(nreq, sizeof(struct rec));
		REQUIRE(recs[k], "calloc");
		rx[k] = (struct rx){ .sock = s[k], .idx = k };
		pthread_create(&rt[k], NULL, receiver, &rx[k]);
	}
	for (i = 0; i < NWRITERS; i++)
		pthread_create(&w[i], NULL, writer, (void *)i);

	t0 = now_s();
	for (i = 0; i < nreq; i++) {
		for (k = 0; k < NSOCK; k++) {
			struct rec *r = &recs[k][i];
			struct stablesend_req q;
			uint64_t b0, nb, j;
			long ret;

			nb = 1 + rand_r(&seed) % (MAXBLK - 1);
			b0 = rand_r(&seed) % (NBLK - nb);
			r->off = b0 * BLK + rand_r(&seed) % BLK;
			r->len = 1 + rand_r(&seed) % ((nb - 1) * BLK + 1);
			nb = (r->off + r->len - 1) / BLK - r->off / BLK + 1;
			for (j = 0; j < nb; j++)
				r->lo[j] = atomic_load(&done[r->off / BLK + j]);
			q = ss_req(file, c[k], r->off, r->len, k);
			if (use_sendfile) {
				off_t o = r->off;

				ret = sendfile(c[k], file, &o, r->len);
				CHECK(ret == (long)r->len, "sendfile %ld", ret);
			} else if (i % 4 == 0) {
				ret = ss_send(dev, &q);
				CHECK(ret == (long)r->len, "SEND %ld", ret);
			} else {
				ret = ss_submit(dev, &q, 1);
				CHECK(ret == 1, "SUBMIT %ld", ret);
				outstanding++;
			}
			for (j = 0; j < nb; j++)
				r->hi[j] = atomic_load(&started[r->off / BLK + j]);
			atomic_store(&r->ready, 1);
		}
		/* Keep memory bounded: reap what has completed. */
		while (outstanding > 256 || (i == nreq - 1 && outstanding)) {
			int n = ss_reap(dev, cqe, 64, 10000), j2;

			if (n <= 0)
				break;
			for (j2 = 0; j2 < n; j2++)
				if (cqe[j2].res <= 0)
					CHECK(0, "async result %lld",
					      (long long)cqe[j2].res);
			outstanding -= n;
			reaped += n;
		}
		if (failures)
			break;
	}
	for (k = 0; k < NSOCK; k++)
		pthread_join(rt[k], NULL);
	atomic_store(&stop, 1);
	for (i = 0; i < NWRITERS; i++)
		pthread_join(w[i], NULL);

	printf("%s: %ld requests on %d sockets, %ld bytes checked, %ld violations, %.1f s\n",
	       use_sendfile ? "sendfile control" : "stablesend",
	       nreq * NSOCK, NSOCK, atomic_load(&checked_bytes),
	       atomic_load(&violations), now_s() - t0);
	CHECK(outstanding == 0, "%ld completions missing", outstanding);
	close(dev);
	close(file);
	for (k = 0; k < NSOCK; k++) {
		close(c[k]);
		close(s[k]);
		free(recs[k]);
	}
	return atomic_load(&violations);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : NREQ_DEFAULT;

	CHECK(run(n, 0) == 0, "stability violated");
	CHECK(ss_drained(20), "pages still in flight");
	CHECK(run(n / 4 + 1, 1) > 0, "the sendfile control showed no violation");
	return test_result();
}
