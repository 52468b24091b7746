// SPDX-License-Identifier: GPL-2.0
/*
 * Under fire: writer threads keep rewriting stamped blocks of the file
 * while requests are submitted.  Block b written by generation g is 512
 * 8-byte stamps, each b and g as two little-endian 32-bit words.  For each
 * request the submitter records, per block, the last generation completed
 * just before the call (lo) and the last one started just after it
 * returned (hi).  Every whole stamp received must name its own block and a
 * generation in [lo, hi]: a byte from after the call returned, from
 * another block or offset, or from nowhere is a violation.  The bytes of
 * a stamp the range cuts are checked alone: block bytes exactly, a
 * generation byte against that byte of every generation in [lo, hi] (a
 * window of 256 or more generations allows every value: such bytes are
 * counted as unchecked, and must stay under 1% of the bytes).
 *
 * Requests mix synchronous and asynchronous submission, unaligned ranges
 * and several sockets; the receivers check every byte as it arrives.  A
 * second run submits every request as an io_uring command, one SQE per
 * socket in each io_uring_enter() (lo before, hi after it).  A short
 * control run with sendfile(2) must show violations, or the check could
 * not fail.
 * test-timeout: 300
 */
#include "uring.h"
#include <pthread.h>
#include <stablesend.h>
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
static atomic_long violations, checked_bytes, unchecked_bytes;

/* Block b as generation g writes it. */
static void stamp(unsigned char *buf, uint32_t b, uint32_t g)
{
	unsigned int i;

	for (i = 0; i < BLK; i += 8) {
		memcpy(buf + i, &b, 4);
		memcpy(buf + i + 4, &g, 4);
	}
}

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
		stamp(buf, b, g);
		write_full(file, buf, BLK, (off_t)b * BLK);
		atomic_store(&done[b], g);
		if (rand_r(&seed) % 4 == 0)
			sched_yield();
	}
	return NULL;
}

/*
 * Is buf[0..n), received for file offset pos (n <= 8, within one stamp),
 * what block pos / BLK held in some generation of [lo, hi]?  *unchecked
 * counts generation bytes that no window could reject.
 */
static int valid(const unsigned char *buf, uint64_t pos, unsigned int n,
		 uint32_t lo, uint32_t hi, long *unchecked)
{
	uint32_t b = pos / BLK, g, w;
	unsigned int i, at = pos % 8, k;

	if (at == 0 && n == 8) {	/* a whole stamp: exact */
		memcpy(&w, buf, 4);
		memcpy(&g, buf + 4, 4);
		return w == b && g - lo <= hi - lo;
	}
	for (i = 0; i < n; i++, at++) {
		if (at < 4) {
			if (buf[i] != ((b >> (8 * at)) & 0xff))
				return 0;
			continue;
		}
		k = 8 * (at - 4);
		if (hi - lo >= 255 && k == 0) {
			(*unchecked)++;
			continue;
		}
		for (g = lo; g != hi + 1; g++)
			if (((g >> k) & 0xff) == buf[i])
				break;
		if (g == hi + 1)
			return 0;
	}
	return 1;
}

struct rx {
	int sock, idx;
};

static void *receiver(void *arg)
{
	struct rx *rx = arg;
	unsigned char *buf = malloc(MAXBLK * BLK);
	long i, unchecked = 0;
	uint64_t n;

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
		for (k = 0; k < r->len; k += n) {
			uint64_t pos = r->off + k;
			unsigned int bi = pos / BLK - r->off / BLK;

			/* Up to the end of this stamp or of the range. */
			n = 8 - pos % 8;
			if (n > r->len - k)
				n = r->len - k;
			if (!valid(buf + k, pos, n, r->lo[bi], r->hi[bi], &unchecked)) {
				if (atomic_fetch_add(&violations, 1) < 5)
					fprintf(stderr,
						"socket %d req %ld offset %llu: %u bytes not block %llu of a generation in [%u, %u]\n",
						rx->idx, i, (unsigned long long)pos, (unsigned int)n,
						(unsigned long long)(pos / BLK),
						r->lo[bi], r->hi[bi]);
			}
		}
		atomic_fetch_add(&checked_bytes, r->len);
	}
	atomic_fetch_add(&unchecked_bytes, unchecked);
	free(buf);
	return NULL;
}

enum mode { DEVICE, URING, SENDFILE };
static const char *const mode_name[] = { "stablesend", "stablesend io_uring", "sendfile control" };

/* One run of @n requests per socket; returns the number of violations. */
static long run(long n, enum mode mode)
{
	struct stablesend_req q[NSOCK];
	struct io_uring_cqe ucqe;
	struct ring ring;
	pthread_t w[NWRITERS], rt[NSOCK];
	struct rx rx[NSOCK];
	int dev, c[NSOCK], s[NSOCK], k;
	unsigned int seed = 12345;
	long i, reaped = 0, outstanding = 0;
	struct stablesend_cqe cqe[64];
	unsigned char blk[BLK];
	double t0;

	nreq = n;
	for (i = 0; i < NBLK; i++) {
		atomic_store(&started[i], 0);
		atomic_store(&done[i], 0);
	}
	atomic_store(&stop, 0);
	atomic_store(&violations, 0);
	atomic_store(&checked_bytes, 0);
	atomic_store(&unchecked_bytes, 0);
	file = temp_file(0, 0);
	for (i = 0; i < NBLK; i++) {
		stamp(blk, i, 0);
		write_full(file, blk, BLK, i * BLK);
	}
	dev = ss_dev();
	/* The ring never waits for memory: room for what the sockets hold. */
	REQUIRE(ss_setup(dev, -1, (mode == URING ? 64 : 16) << 20) == 0, "SETUP");
	if (mode == URING)
		REQUIRE(!ring_init(&ring, 512, 0), "io_uring_setup");
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
			uint64_t b0, nb, j;
			long ret;

			nb = 1 + rand_r(&seed) % (MAXBLK - 1);
			b0 = rand_r(&seed) % (NBLK - nb);
			r->off = b0 * BLK + rand_r(&seed) % BLK;
			r->len = 1 + rand_r(&seed) % ((nb - 1) * BLK + 1);
			nb = (r->off + r->len - 1) / BLK - r->off / BLK + 1;
			for (j = 0; j < nb; j++)
				r->lo[j] = atomic_load(&done[r->off / BLK + j]);
			q[k] = ss_req(file, c[k], r->off, r->len, k);
			if (mode == URING) {
				struct io_uring_sqe *sqe = ring_sqe(&ring);

				REQUIRE(sqe, "SQ ring full");
				stablesend_prep_uring(sqe, dev, &q[k]);
				sqe->user_data = k;
				outstanding++;
				continue;	/* one io_uring_enter() for the sockets */
			}
			if (mode == SENDFILE) {
				off_t o = r->off;

				ret = sendfile(c[k], file, &o, r->len);
				CHECK(ret == (long)r->len, "sendfile %ld", ret);
			} else if (i % 4 == 0) {
				ret = ss_send(dev, &q[k]);
				CHECK(ret == (long)r->len, "SEND %ld", ret);
			} else {
				ret = ss_submit(dev, &q[k], 1);
				CHECK(ret == 1, "SUBMIT %ld", ret);
				outstanding++;
			}
			for (j = 0; j < nb; j++)
				r->hi[j] = atomic_load(&started[r->off / BLK + j]);
			atomic_store(&r->ready, 1);
		}
		if (mode == URING) {
			int ret = ring_submit(&ring, 0);

			CHECK(ret == NSOCK, "io_uring_enter submitted %d of %d", ret, NSOCK);
			for (k = 0; k < NSOCK; k++) {
				struct rec *r = &recs[k][i];
				uint64_t j, nb = (r->off + r->len - 1) / BLK - r->off / BLK + 1;

				for (j = 0; j < nb; j++)
					r->hi[j] = atomic_load(&started[r->off / BLK + j]);
				atomic_store(&r->ready, 1);
			}
			/* Keep memory bounded: reap what has completed. */
			while (outstanding &&
			       !ring_wait(&ring, &ucqe,
					  outstanding > 128 || i == nreq - 1 ? 10000 : 0)) {
				CHECK(ucqe.res > 0, "io_uring result %d", ucqe.res);
				outstanding--;
				reaped++;
				if (ucqe.res <= 0)
					break;
			}
		}
		/* Keep memory bounded: reap what has completed. */
		while (mode == DEVICE && (outstanding > 256 || (i == nreq - 1 && outstanding))) {
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

	printf("%s: %ld requests on %d sockets, %ld bytes checked (%ld generation bytes no window could reject), %ld violations, %.1f s\n",
	       mode_name[mode],
	       nreq * NSOCK, NSOCK, atomic_load(&checked_bytes),
	       atomic_load(&unchecked_bytes), atomic_load(&violations), now_s() - t0);
	CHECK(atomic_load(&unchecked_bytes) * 100 <= atomic_load(&checked_bytes),
	      "%ld of %ld bytes unchecked: the windows are too wide to judge",
	      atomic_load(&unchecked_bytes), atomic_load(&checked_bytes));
	CHECK(outstanding == 0, "%ld completions missing", outstanding);
	if (mode == URING)
		ring_exit(&ring);
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
	/* KASAN's kernel: a third of the requests (the stock kernels run all). */
	long m = argc > 1 ? n : n / ss_debug_scale(3);

	CHECK(run(m, DEVICE) == 0, "stability violated");
	CHECK(ss_drained(20), "pages still in flight");
	CHECK(run(m, URING) == 0, "stability violated through io_uring");
	CHECK(ss_drained(20), "pages still in flight");
	CHECK(run(n / 4 + 1, SENDFILE) > 0, "the sendfile control showed no violation");
	return test_result();
}
