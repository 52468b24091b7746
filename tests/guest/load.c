// SPDX-License-Identifier: GPL-2.0
/*
 * Load: NPROC processes, each with one open of the device limited to
 * LIMIT bytes of snapshot memory and NSOCK sockets (TCP over IPv4 and
 * IPv6 loopback, AF_UNIX), submit requests of 1 B to 1 MiB, some framed
 * by a header and trailer, some synchronous, some asking for a RELEASED
 * record, for a fixed time.  A reader per socket checks every byte of the
 * stream against the requests in submission order; a reaper checks that
 * each asynchronous request gets exactly one SENT record with its full
 * size, and one RELEASED record exactly when it asked.  Meanwhile each
 * open's COUNTERS must keep mem_in_use and mem_peak within its limit, and
 * the module's bytes_in_flight and pool_bytes (every page it owns) within
 * the sum of the limits.  At the end
 * every count is back to zero.
 *
 * test-timeout: 400
 */
#include "stress.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define NPROC		4
#define NSOCK		8
#define LIMIT		(2ULL << 20)
#define FSIZE		(8ULL << 20)
#define FSEED		7
#define MAXREQ		(1 << 18)	/* per process */
#define RING		1024		/* per socket */
#define NHDTR		32		/* header/trailer patterns */
#define HDTR_MAX	4096

struct desc {
	uint64_t seq, off, flen;
	uint32_t hlen, tlen;
};

struct sockst {
	int snd, rcv, type;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct desc ring[RING];
	unsigned int head, tail;	/* reader takes at head */
	int done;
	uint64_t verified;
};

struct reqst {
	int32_t total;
	uint8_t sync, want_rel;
	_Atomic uint8_t sent, rel;
};

/* Shared with the parent (MAP_SHARED). */
struct result {
	uint64_t requests, sync, bytes, peak, limit, cqes;
	int failures;
};

static const char *const tname[] = { "tcp4", "tcp6", "unix" };
static unsigned char *fcopy;
static unsigned char hdtr[2][NHDTR][HDTR_MAX];
static int dev, file, me;
static struct sockst socks[NSOCK];
static struct reqst *reqs;
static atomic_ulong nseq, nsync, nbytes, ncqes;
static atomic_int stop, submitters_done;
static double t_end;

static unsigned char expect_byte(const struct desc *d, uint64_t i)
{
	if (i < d->hlen)
		return hdtr[0][d->seq % NHDTR][i];
	i -= d->hlen;
	if (i < d->flen)
		return fcopy[d->off + i];
	return hdtr[1][d->seq % NHDTR][i - d->flen];
}

/* Compare @n received bytes with bytes @pos.. of request @d. */
static size_t check_bytes(const struct desc *d, uint64_t pos,
			  const unsigned char *b, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint64_t p = pos + i;

		if (p >= d->hlen && p - d->hlen < d->flen) {
			size_t k = d->flen - (p - d->hlen);

			if (k > n - i)
				k = n - i;
			if (memcmp(b + i, fcopy + d->off + (p - d->hlen), k)) {
				while (b[i] == expect_byte(d, pos + i))
					i++;
				return i;
			}
			i += k;
			continue;
		}
		if (b[i] != expect_byte(d, p))
			return i;
		i++;
	}
	return n;
}

static void *reader(void *arg)
{
	struct sockst *s = arg;
	struct timeval tv = { .tv_sec = 60 };
	static const size_t bufsz = 65536;
	unsigned char *buf = malloc(bufsz);

	REQUIRE(buf, "malloc");
	setsockopt(s->rcv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (;;) {
		struct desc d;
		uint64_t total, pos = 0;

		pthread_mutex_lock(&s->mu);
		while (s->head == s->tail && !s->done)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->head == s->tail) {
			pthread_mutex_unlock(&s->mu);
			break;
		}
		d = s->ring[s->head % RING];
		pthread_mutex_unlock(&s->mu);
		total = d.hlen + d.flen + d.tlen;
		while (pos < total) {
			size_t want = total - pos < bufsz ? total - pos : bufsz;
			ssize_t r = read(s->rcv, buf, want);
			size_t ok;

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				CHECK(0, "%s socket: read %zd at byte %llu of request %llu (%llu bytes)",
				      tname[s->type], r, (unsigned long long)pos,
				      (unsigned long long)d.seq, (unsigned long long)total);
				atomic_store(&stop, 1);
				goto out;
			}
			ok = check_bytes(&d, pos, buf, r);
			if (ok != (size_t)r) {
				CHECK(0, "%s socket: request %llu byte %llu of %llu is %#x, expected %#x",
				      tname[s->type], (unsigned long long)d.seq,
				      (unsigned long long)(pos + ok), (unsigned long long)total,
				      buf[ok], expect_byte(&d, pos + ok));
				atomic_store(&stop, 1);
				goto out;
			}
			pos += r;
		}
		s->verified += total;
		pthread_mutex_lock(&s->mu);
		s->head++;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
out:
	free(buf);
	return NULL;
}

static void push_desc(struct sockst *s, const struct desc *d)
{
	pthread_mutex_lock(&s->mu);
	while (s->tail - s->head >= RING)
		pthread_cond_wait(&s->cv, &s->mu);
	s->ring[s->tail++ % RING] = *d;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* A random request on socket @k; its descriptor goes on the socket's ring. */
static void make_req(uint64_t *rs, int k, int sync, struct stablesend_req *r)
{
	uint64_t seq = atomic_fetch_add(&nseq, 1);
	struct desc d = { .seq = seq };
	struct reqst *q = &reqs[seq];
	int kind = rnd(rs) % 8;

	d.flen = rnd_size(rs, 1 << 20);
	if (kind == 0)
		d.flen = 0;		/* framing only */
	if (kind <= 2) {
		d.hlen = 1 + rnd(rs) % HDTR_MAX;
		d.tlen = rnd(rs) % 2 ? 1 + rnd(rs) % HDTR_MAX : 0;
	}
	d.off = d.flen ? rnd(rs) % (FSIZE - d.flen + 1) : 0;
	*r = ss_req(file, socks[k].snd, d.off, d.flen, seq);
	r->head = (uintptr_t)hdtr[0][seq % NHDTR];
	r->head_len = d.hlen;
	r->tail = (uintptr_t)hdtr[1][seq % NHDTR];
	r->tail_len = d.tlen;
	if (rnd(rs) % 3 == 0)
		r->flags |= STABLESEND_REQ_NOTIFY_RELEASE;
	q->total = d.hlen + d.flen + d.tlen;
	q->sync = sync;
	q->want_rel = !!(r->flags & STABLESEND_REQ_NOTIFY_RELEASE);
	push_desc(&socks[k], &d);
}

/* Submitter @id owns sockets id, id + 2, ...: one FIFO order per socket. */
static void *submitter(void *arg)
{
	long id = (long)arg;
	uint64_t rs = 0x9e3779b97f4a7c15ULL * (me * 2 + id + 1);
	struct stablesend_req batch[8];

	while (!atomic_load(&stop) && now_s() < t_end &&
	       atomic_load(&nseq) < MAXREQ - 16) {
		int n = 1 + rnd(&rs) % 8, i, done = 0;

		if (id == 1 && rnd(&rs) % 4 == 0) {
			int k = 1 + 2 * (rnd(&rs) % (NSOCK / 2));
			long ret;

			make_req(&rs, k, 1, &batch[0]);
			ret = ss_send(dev, &batch[0]);
			CHECK(ret == reqs[batch[0].user_data].total,
			      "SEND of %d bytes on %s returned %ld",
			      reqs[batch[0].user_data].total, tname[socks[k].type], ret);
			if (ret > 0) {
				atomic_fetch_add(&nbytes, ret);
				atomic_fetch_add(&nsync, 1);
			}
			continue;
		}
		for (i = 0; i < n; i++)
			make_req(&rs, id + 2 * (rnd(&rs) % (NSOCK / 2)), 0, &batch[i]);
		while (done < n) {
			int r = ss_submit(dev, batch + done, n - done);

			if (r <= 0) {
				CHECK(0, "SUBMIT of %d requests returned %d", n - done, r);
				atomic_store(&stop, 1);
				break;
			}
			done += r;
		}
		for (i = 0; i < done; i++)
			atomic_fetch_add(&nbytes, reqs[batch[i].user_data].total);
	}
	atomic_fetch_add(&submitters_done, 1);
	return NULL;
}

static void on_cqe(const struct stablesend_cqe *c)
{
	struct reqst *q;

	atomic_fetch_add(&ncqes, 1);
	if (c->user_data >= atomic_load(&nseq)) {
		CHECK(0, "record for request %llu, never submitted",
		      (unsigned long long)c->user_data);
		return;
	}
	q = &reqs[c->user_data];
	if (c->flags & STABLESEND_CQE_SENT) {
		CHECK(!q->sync, "SENT record for synchronous request %llu",
		      (unsigned long long)c->user_data);
		CHECK(c->res == q->total, "request %llu: result %lld, expected %d",
		      (unsigned long long)c->user_data, (long long)c->res, q->total);
		CHECK(atomic_fetch_add(&q->sent, 1) == 0, "request %llu: second SENT record",
		      (unsigned long long)c->user_data);
	} else if (c->flags & STABLESEND_CQE_RELEASED) {
		CHECK(q->want_rel && c->res == 0, "request %llu: RELEASED record (asked %d, res %lld)",
		      (unsigned long long)c->user_data, q->want_rel, (long long)c->res);
		CHECK(atomic_fetch_add(&q->rel, 1) == 0, "request %llu: second RELEASED record",
		      (unsigned long long)c->user_data);
	} else {
		CHECK(0, "record with flags %#x", c->flags);
	}
}

/* Read records until every request has what it is owed (bounded by t_end + 60 s). */
static void *reaper(void *arg)
{
	struct stablesend_cqe c[64];
	uint64_t checked = 0;

	(void)arg;
	for (;;) {
		struct pollfd p = { .fd = dev, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 100) > 0) {
			r = read(dev, c, sizeof(c));
			CHECK(r > 0 && r % sizeof(c[0]) == 0, "read of records returned %zd", r);
			for (ssize_t i = 0; i < r / (ssize_t)sizeof(c[0]); i++)
				on_cqe(&c[i]);
			continue;
		}
		if (atomic_load(&submitters_done) < 2)
			continue;
		/* Everything submitted: done once every request is settled. */
		while (checked < atomic_load(&nseq)) {
			struct reqst *q = &reqs[checked];

			if ((!q->sync && !q->sent) || (q->want_rel && !q->rel))
				break;
			checked++;
		}
		if (checked == atomic_load(&nseq) || now_s() > t_end + 60)
			break;
	}
	return NULL;
}

static void *monitor(void *arg)
{
	struct result *res = arg;

	while (!atomic_load(&stop)) {
		struct stablesend_counters c;

		ss_counters(dev, &c);
		CHECK(c.mem_in_use <= c.mem_limit && c.mem_peak <= c.mem_limit,
		      "open %d: mem_in_use %llu peak %llu over the limit %llu", me,
		      (unsigned long long)c.mem_in_use, (unsigned long long)c.mem_peak,
		      (unsigned long long)c.mem_limit);
		res->peak = c.mem_peak;
		usleep(2000);
	}
	return NULL;
}

static int child(struct result *res)
{
	pthread_t rd[NSOCK], sub[2], rp, mon;
	struct stablesend_counters c;
	uint64_t verified = 0;
	int k;

	reqs = calloc(MAXREQ, sizeof(*reqs));
	REQUIRE(reqs, "calloc");
	dev = ss_dev();
	REQUIRE(ss_setup(dev, -1, LIMIT) == 0, "SETUP with a %llu-byte limit", LIMIT);
	for (k = 0; k < NSOCK; k++) {
		struct sockst *s = &socks[k];

		s->type = (k + me) % 3;
		if (s->type == 2)
			unix_pair(&s->snd, &s->rcv);
		else
			tcp_pair(s->type ? AF_INET6 : AF_INET, &s->snd, &s->rcv);
		pthread_mutex_init(&s->mu, NULL);
		pthread_cond_init(&s->cv, NULL);
		pthread_create(&rd[k], NULL, reader, s);
	}
	pthread_create(&rp, NULL, reaper, NULL);
	pthread_create(&mon, NULL, monitor, res);
	pthread_create(&sub[0], NULL, submitter, (void *)0L);
	pthread_create(&sub[1], NULL, submitter, (void *)1L);
	pthread_join(sub[0], NULL);
	pthread_join(sub[1], NULL);
	for (k = 0; k < NSOCK; k++) {
		pthread_mutex_lock(&socks[k].mu);
		socks[k].done = 1;
		pthread_cond_broadcast(&socks[k].cv);
		pthread_mutex_unlock(&socks[k].mu);
	}
	for (k = 0; k < NSOCK; k++) {
		pthread_join(rd[k], NULL);
		verified += socks[k].verified;
	}
	pthread_join(rp, NULL);
	atomic_store(&stop, 1);
	pthread_join(mon, NULL);

	for (uint64_t i = 0; i < atomic_load(&nseq); i++) {
		struct reqst *q = &reqs[i];

		if ((!q->sync && q->sent != 1) || q->rel != q->want_rel) {
			CHECK(0, "request %llu (%d bytes%s): %d SENT, %d RELEASED records (asked %d)",
			      (unsigned long long)i, q->total, q->sync ? ", sync" : "",
			      q->sent, q->rel, q->want_rel);
			break;
		}
	}
	CHECK(verified == atomic_load(&nbytes), "peers verified %llu bytes of %llu sent",
	      (unsigned long long)verified, (unsigned long long)atomic_load(&nbytes));
	/*
	 * Requests that did not ask for RELEASED may still hold pages, and
	 * nobody waits for them while the fd is open: the parent checks that
	 * they come back once this process is gone.
	 */
	ss_counters(dev, &c);
	CHECK(c.submitted == atomic_load(&nseq) && c.completed == c.submitted &&
	      !c.failed && c.bytes_sent == atomic_load(&nbytes) && !c.cqes_pending,
	      "open %d counters: submitted %llu completed %llu failed %llu bytes %llu mem %llu pending %llu",
	      me, (unsigned long long)c.submitted, (unsigned long long)c.completed,
	      (unsigned long long)c.failed, (unsigned long long)c.bytes_sent,
	      (unsigned long long)c.mem_in_use, (unsigned long long)c.cqes_pending);
	CHECK(c.mem_peak > LIMIT / 2, "open %d: peak %llu, the limit was never approached",
	      me, (unsigned long long)c.mem_peak);
	res->requests = atomic_load(&nseq);
	res->sync = atomic_load(&nsync);
	res->bytes = atomic_load(&nbytes);
	res->peak = c.mem_peak;
	res->limit = c.mem_limit;
	res->cqes = atomic_load(&ncqes);
	for (k = 0; k < NSOCK; k++) {
		close(socks[k].snd);
		close(socks[k].rcv);
	}
	close(dev);
	res->failures = failures;
	return failures ? 1 : 0;
}

int main(void)
{
	struct result *res;
	long long ctx0, bif, bif_max = 0, pool, pool_max = 0;
	double t0, budget = budget_s(35);
	pid_t pid[NPROC];
	int i, running = NPROC, f;
	uint64_t tot_req = 0, tot_sync = 0, tot_bytes = 0, tot_cqes = 0;

	ctx0 = stress_begin();
	res = mmap(NULL, NPROC * sizeof(*res), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	REQUIRE(res != MAP_FAILED, "mmap");
	file = pattern_file(FSIZE, FSEED);
	fcopy = malloc(FSIZE);
	REQUIRE(fcopy && pread(file, fcopy, FSIZE, 0) == (ssize_t)FSIZE, "read file");
	for (i = 0; i < NHDTR; i++)
		for (f = 0; f < HDTR_MAX; f++) {
			hdtr[0][i][f] = pat(f, 100 + i);
			hdtr[1][i][f] = pat(f, 200 + i);
		}

	t0 = now_s();
	t_end = t0 + budget;
	for (i = 0; i < NPROC; i++) {
		pid[i] = fork();
		REQUIRE(pid[i] >= 0, "fork");
		if (!pid[i]) {
			me = i;
			alarm(budget + 240);	/* a hang kills the child: the test fails */
			_exit(child(&res[i]));
		}
	}
	while (running) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);

		if (p > 0) {
			running--;
			CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d: status %#x", p, st);
			continue;
		}
		bif = ss_stat("bytes_in_flight");
		CHECK(bif <= (long long)(NPROC * LIMIT), "bytes_in_flight %lld over %d limits",
		      bif, NPROC);
		bif_max = bif > bif_max ? bif : bif_max;
		pool = ss_stat("pool_bytes");
		CHECK(pool <= (long long)(NPROC * LIMIT), "pool_bytes %lld over %d limits",
		      pool, NPROC);
		pool_max = pool > pool_max ? pool : pool_max;
		usleep(5000);
	}
	for (i = 0; i < NPROC; i++) {
		printf("open %d: %llu requests (%llu sync), %llu bytes, %llu records, peak %llu of %llu\n",
		       i, (unsigned long long)res[i].requests, (unsigned long long)res[i].sync,
		       (unsigned long long)res[i].bytes, (unsigned long long)res[i].cqes,
		       (unsigned long long)res[i].peak, (unsigned long long)res[i].limit);
		tot_req += res[i].requests;
		tot_sync += res[i].sync;
		tot_bytes += res[i].bytes;
		tot_cqes += res[i].cqes;
	}
	printf("load: %d processes x %d sockets, %llu requests (%llu sync), %llu bytes, "
	       "%llu records in %.1f s; peak bytes_in_flight %lld, pool_bytes %lld (limits %llu)\n",
	       NPROC, NSOCK, (unsigned long long)tot_req, (unsigned long long)tot_sync,
	       (unsigned long long)tot_bytes, (unsigned long long)tot_cqes, now_s() - t0,
	       bif_max, pool_max, (unsigned long long)(NPROC * LIMIT));
	CHECK(tot_req > 0 && tot_bytes > 0, "nothing was sent");
	CHECK(module_idle(ctx0, 30), "the module still holds memory after the load");
	return test_result();
}
