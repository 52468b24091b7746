// SPDX-License-Identifier: GPL-2.0
/*
 * Completions: exactly one SENT record per request with its result and
 * user_data, RELEASED records when asked (and only then), the eventfd
 * counting every record, poll waking, 64 framed requests in flight on one
 * socket arriving in order and intact, synchronous sends queueing no
 * record, and a stalled peer on one socket not delaying another.
 * compat32: yes
 */
#include "common.h"
#include <pthread.h>
#include <sys/eventfd.h>

#define NREQ 64

static unsigned char pat(size_t pos)
{
	return (unsigned char)(pos * 7 + pos / 251);
}

struct frame {
	char head[32], tail[32];
	size_t off, len;
};

static void framed_in_order(void)
{
	static struct frame fr[NREQ];
	struct stablesend_req reqs[NREQ];
	struct stablesend_cqe cqe[2 * NREQ];
	struct stablesend_counters cnt;
	size_t fsize = 1 << 20, expect = 0, pos = 0, i;
	int efd, dev, file, c, s, n, sent = 0, released = 0;
	unsigned char *a = malloc(fsize), *stream;
	char seen[NREQ] = { 0 }, rel[NREQ] = { 0 };
	struct pollfd p;
	uint64_t ev = 0;

	for (i = 0; i < fsize; i++)
		a[i] = pat(i);
	file = temp_file(0, 0);
	write_full(file, a, fsize, 0);
	efd = eventfd(0, EFD_CLOEXEC);
	dev = ss_dev();
	REQUIRE(ss_setup(dev, efd, 32 << 20) == 0, "SETUP");
	tcp_pair(AF_INET, &c, &s);

	/* Nothing queued yet: poll must not report input. */
	p = (struct pollfd){ .fd = dev, .events = POLLIN | POLLOUT };
	CHECK(poll(&p, 1, 0) == 1 && p.revents == POLLOUT, "idle poll %#x",
	      p.revents);

	for (i = 0; i < NREQ; i++) {
		fr[i].off = (i * 7919) % (fsize - 70000);
		fr[i].len = 1 + (i * 104729) % 65536;
		snprintf(fr[i].head, sizeof(fr[i].head), "HDR%zu:", i);
		snprintf(fr[i].tail, sizeof(fr[i].tail), ":TRL%zu\n", i);
		reqs[i] = ss_req(file, c, fr[i].off, fr[i].len, 1000 + i);
		reqs[i].head = (uintptr_t)fr[i].head;
		reqs[i].head_len = strlen(fr[i].head);
		reqs[i].tail = (uintptr_t)fr[i].tail;
		reqs[i].tail_len = strlen(fr[i].tail);
		reqs[i].flags = STABLESEND_REQ_NOTIFY_RELEASE;
		expect += reqs[i].head_len + fr[i].len + reqs[i].tail_len;
	}
	n = ss_submit(dev, reqs, NREQ);
	CHECK(n == NREQ, "submit accepted %d", n);

	/* Receive everything and check framing and order. */
	stream = malloc(expect);
	REQUIRE(stream, "malloc");
	CHECK(read_full(s, stream, expect) == expect, "short stream");
	for (i = 0; i < NREQ; i++) {
		size_t hl = strlen(fr[i].head), tl = strlen(fr[i].tail);

		if (memcmp(stream + pos, fr[i].head, hl) ||
		    memcmp(stream + pos + hl, a + fr[i].off, fr[i].len) ||
		    memcmp(stream + pos + hl + fr[i].len, fr[i].tail, tl)) {
			CHECK(0, "frame %zu corrupt or out of order", i);
			break;
		}
		pos += hl + fr[i].len + tl;
	}

	/* Every request: one SENT, one RELEASED (pages free once read). */
	for (i = 0; i < 200 && (sent < NREQ || released < NREQ); i++) {
		int k, got = ss_reap(dev, cqe, 2 * NREQ - sent - released, 50);

		for (k = 0; k < got; k++) {
			unsigned int id = cqe[k].user_data - 1000;

			if (id >= NREQ) {
				CHECK(0, "unknown user_data %llu",
				      (unsigned long long)cqe[k].user_data);
				continue;
			}
			if (cqe[k].flags & STABLESEND_CQE_SENT) {
				size_t want = strlen(fr[id].head) + fr[id].len +
					      strlen(fr[id].tail);

				CHECK(!seen[id]++, "second SENT for %u", id);
				CHECK(cqe[k].res == (long long)want,
				      "req %u res %lld want %zu", id,
				      (long long)cqe[k].res, want);
				CHECK(!(cqe[k].flags & STABLESEND_CQE_COPIED),
				      "loopback TCP copied");
				sent++;
			} else if (cqe[k].flags & STABLESEND_CQE_RELEASED) {
				CHECK(seen[id], "RELEASED before SENT for %u", id);
				CHECK(!rel[id]++, "second RELEASED for %u", id);
				CHECK(cqe[k].res == 0, "RELEASED res");
				released++;
			} else {
				CHECK(0, "record without SENT/RELEASED");
			}
		}
	}
	CHECK(sent == NREQ && released == NREQ, "sent %d released %d", sent,
	      released);
	ev = efd_count(efd, 2 * NREQ, 5);
	CHECK(ev == 2 * NREQ, "eventfd counted %llu, want %d",
	      (unsigned long long)ev, 2 * NREQ);
	ss_counters(dev, &cnt);
	CHECK(cnt.submitted == NREQ && cnt.completed == NREQ && !cnt.failed &&
	      cnt.bytes_sent == expect && cnt.cqes_pending == 0 &&
	      cnt.mem_in_use == 0 && cnt.mem_peak > 0,
	      "counters sub %llu comp %llu fail %llu bytes %llu pend %llu mem %llu",
	      (unsigned long long)cnt.submitted,
	      (unsigned long long)cnt.completed,
	      (unsigned long long)cnt.failed,
	      (unsigned long long)cnt.bytes_sent,
	      (unsigned long long)cnt.cqes_pending,
	      (unsigned long long)cnt.mem_in_use);
	printf("64 framed requests: %zu bytes in order, %d SENT, %d RELEASED\n",
	       expect, sent, released);
	free(stream);
	close(dev);
	close(efd);
	close(c);
	close(s);
	close(file);
	free(a);
}

struct waiter {
	int dev;
	double woke;
};

static void *poll_waiter(void *arg)
{
	struct waiter *w = arg;
	struct pollfd p = { .fd = w->dev, .events = POLLIN };

	if (poll(&p, 1, 10000) == 1 && (p.revents & POLLIN))
		w->woke = now_s();
	return NULL;
}

/* poll() sleeping before the completion must wake for it. */
static void poll_wakes(void)
{
	struct waiter w = { .dev = ss_dev() };
	int file = temp_file(4096, 'x'), c, s;
	struct stablesend_req r;
	struct stablesend_cqe cqe;
	pthread_t t;
	char buf[4096];
	double t0;

	tcp_pair(AF_INET, &c, &s);
	pthread_create(&t, NULL, poll_waiter, &w);
	usleep(200000);
	t0 = now_s();
	r = ss_req(file, c, 0, 4096, 7);
	CHECK(ss_submit(w.dev, &r, 1) == 1, "submit");
	pthread_join(t, NULL);
	CHECK(w.woke >= t0, "poll did not wake");
	CHECK(ss_reap(w.dev, &cqe, 1, 1000) == 1 && cqe.user_data == 7 &&
	      cqe.res == 4096 && cqe.flags == STABLESEND_CQE_SENT,
	      "cqe %lld %#x", (long long)cqe.res, cqe.flags);
	CHECK(read_full(s, buf, 4096) == 4096 && buf[0] == 'x' &&
	      buf[4095] == 'x', "payload");
	printf("poll woke for the completion\n");
	close(w.dev);
	close(c);
	close(s);
	close(file);
}

/* Synchronous: the result is the return value, nothing is queued. */
static void sync_no_record(void)
{
	struct stablesend_counters cnt;
	int dev = ss_dev(), file = temp_file(100000, 'y'), c, s;
	struct stablesend_req r;
	char *buf = malloc(100010);
	long n;

	tcp_pair(AF_INET, &c, &s);
	r = ss_req(file, c, 0, 100000, 9);
	r.head = (uintptr_t)"head";
	r.head_len = 4;
	n = ss_send(dev, &r);
	CHECK(n == 100004, "SEND returned %ld", n);
	CHECK(read_full(s, buf, 100004) == 100004 && !memcmp(buf, "head", 4) &&
	      buf[4] == 'y' && buf[100003] == 'y', "payload");
	ss_counters(dev, &cnt);
	CHECK(cnt.cqes_pending == 0 && cnt.completed == 1, "pending %llu",
	      (unsigned long long)cnt.cqes_pending);
	printf("synchronous SEND: %ld bytes, no record\n", n);
	free(buf);
	close(dev);
	close(c);
	close(s);
	close(file);
}

/* A peer that never reads stalls its own socket only. */
static void stalled_peer_isolated(void)
{
	int dev = ss_dev(), file = temp_file(8 << 20, 'z');
	int c1, s1, c2, s2, i, got, done2 = 0, done1 = 0;
	struct stablesend_req r;
	struct stablesend_cqe cqe[8];
	char *buf = malloc(1 << 20);
	double end;

	REQUIRE(ss_setup(dev, -1, 64 << 20) == 0, "SETUP");
	tcp_pair(AF_INET, &c1, &s1);
	tcp_pair(AF_INET, &c2, &s2);
	set_rcvbuf_small(s1);
	r = ss_req(file, c1, 0, 8 << 20, 1);
	CHECK(ss_submit(dev, &r, 1) == 1, "submit stalled");
	r = ss_req(file, c1, 0, 4096, 2);	/* queued behind it */
	CHECK(ss_submit(dev, &r, 1) == 1, "submit queued");
	for (i = 0; i < 4; i++) {
		r = ss_req(file, c2, i * 4096, 1 << 20, 10 + i);
		CHECK(ss_submit(dev, &r, 1) == 1, "submit other");
	}
	end = now_s() + 20;
	while (done2 < 4 && now_s() < end) {
		struct pollfd p = { .fd = s2, .events = POLLIN };

		/*
		 * Poll: the last bytes can arrive before their request's
		 * record is queued, and a read() then would wait for good.
		 */
		if (poll(&p, 1, 1000) < 0 ||
		    (p.revents && read(s2, buf, 1 << 20) <= 0))
			break;
		got = ss_reap(dev, cqe, 8, 0);
		for (i = 0; i < got; i++) {
			if (cqe[i].user_data >= 10)
				done2 += cqe[i].res == 1 << 20;
			else
				done1++;
		}
	}
	CHECK(done2 == 4, "other socket completed %d of 4", done2);
	CHECK(done1 == 0, "stalled socket completed %d", done1);
	printf("stalled peer: other socket's 4 requests completed, stalled ones pending\n");
	close(dev);	/* aborts the stalled request, cancels the one behind */
	close(c1);
	close(s1);
	close(c2);
	close(s2);
	close(file);
	free(buf);
}

int main(void)
{
	framed_in_order();
	poll_wakes();
	sync_no_record();
	stalled_peer_isolated();
	CHECK(ss_drained(20), "pages still in flight: %lld requests",
	      ss_stat("requests_in_flight"));
	return test_result();
}
