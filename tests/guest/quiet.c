// SPDX-License-Identifier: GPL-2.0
/*
 * Quiet connections: pages come back, RELEASED records arrive and waiting
 * submissions get their memory with no other traffic anywhere.
 *
 * Since 6.1 a socket buffer freed on another CPU than the one that
 * allocated it may wait on that CPU's defer list until the CPU next runs
 * network receive processing, which on an idle machine can be never.  Over
 * loopback the receiver frees the buffers holding the module's pages, so
 * the module has to kick the CPUs itself (module/rxkick.c).  Here every
 * buffer takes that path: the submitter, which sends its own bytes, runs
 * on CPU 0 and the receiver on CPU 1.  Nothing in this test pokes the
 * network.  A negative control first turns the kicks off (module
 * parameter rx_kick=0): the last request's pages then stay out, and come
 * back once the kicks are on again.  Before all that, a closed open's
 * pages come back although another open's request, whose pages nobody
 * waits for, is ahead of them on the connection.
 * test-timeout: 90
 */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#define KICK	"/sys/module/stablesend/parameters/rx_kick"
#define REQ_LEN	(64 << 10)
#define NREQ	4
#define LIMIT	(NREQ * REQ_LEN)

static void kicks_on(void)
{
	write_str(KICK, "Y");
}

static void on_alarm(int sig)
{
	static const char msg[] = "blocking SEND still waiting for memory after 20 s\n";

	(void)sig;
	kicks_on();
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(2);
	_exit(1);
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	REQUIRE(sched_setaffinity(0, sizeof(set), &set) == 0, "pin to CPU %d", cpu);
}

static const unsigned char *file_bytes;
static int rx_sock;
static volatile int rx_bad;

/* What the five phases below send, in order: [offset, length). */
static const size_t segs[][2] = {
	{ 0, LIMIT }, { 0, LIMIT }, { LIMIT, LIMIT }, { REQ_LEN, LIMIT },
	{ 0, LIMIT },
};

/* The receiver, on CPU 1: reads and checks everything, as it arrives. */
static void *receiver(void *arg)
{
	unsigned char *buf = malloc(LIMIT);
	size_t i;

	(void)arg;
	pin(1);
	if (!buf)
		return (void *)1;
	for (i = 0; i < sizeof(segs) / sizeof(segs[0]); i++) {
		if (read_full(rx_sock, buf, segs[i][1]) != segs[i][1] ||
		    memcmp(buf, file_bytes + segs[i][0], segs[i][1]))
			rx_bad = 1;
	}
	free(buf);
	return NULL;
}

/* The receiver of closed_behind(), on CPU 1: two requests' bytes. */
static void *drain(void *arg)
{
	unsigned char *buf = malloc(2 * REQ_LEN);

	(void)arg;
	pin(1);
	if (!buf || read_full(rx_sock, buf, 2 * REQ_LEN) != 2 * REQ_LEN ||
	    memcmp(buf, file_bytes, 2 * REQ_LEN))
		rx_bad = 1;
	free(buf);
	return NULL;
}

/*
 * A closed open's pages behind another open's: open B submits on the
 * connection after open A (@dev), whose request is first and whose pages
 * nobody waits for.  Once B is closed the module waits for B's pages, and
 * kicks for them although A's are ahead of them.
 */
static void closed_behind(int dev, int file, int c)
{
	struct stablesend_req ra = ss_req(file, c, 0, REQ_LEN, 200);
	struct stablesend_req rb = ss_req(file, c, REQ_LEN, REQ_LEN, 201);
	struct stablesend_cqe cqe[2];
	int dev2 = ss_dev();
	long long ctxs;
	pthread_t rt;
	double t;

	REQUIRE(ss_submit(dev, &ra, 1) == 1, "SUBMIT on open A");
	REQUIRE(ss_submit(dev2, &rb, 1) == 1, "SUBMIT on open B");
	/* Read once both are in the socket: every skb waits on CPU 0's list. */
	REQUIRE(pthread_create(&rt, NULL, drain, NULL) == 0, "pthread_create");
	REQUIRE(pthread_join(rt, NULL) == 0, "pthread_join");
	CHECK(!rx_bad, "received bytes differ from the file (two opens)");
	CHECK(ss_reap_intr(dev, cqe, 1, 10000) == 1 && cqe[0].res == REQ_LEN,
	      "open A's SENT");
	CHECK(ss_reap_intr(dev2, cqe, 1, 10000) == 1 && cqe[0].res == REQ_LEN,
	      "open B's SENT");
	ctxs = ss_stat("contexts");
	close(dev2);
	t = now_s();
	while (ss_stat("contexts") >= ctxs && now_s() < t + 10)
		usleep(10000);
	CHECK(ss_stat("contexts") < ctxs,
	      "the pages of a closed open behind another open's request still out 10 s after the close");
	printf("closed open behind another open's request: its pages back %.3f s after the close\n",
	       now_s() - t);
}

/* Add up the SENT and RELEASED records among @got. */
static void count(const struct stablesend_cqe *cqe, int got, int *sent,
		  int *released)
{
	for (int i = 0; i < got; i++) {
		if (cqe[i].flags & STABLESEND_CQE_RELEASED)
			(*released)++;
		else if (cqe[i].flags & STABLESEND_CQE_SENT &&
			 cqe[i].res == REQ_LEN)
			(*sent)++;
	}
}

int main(void)
{
	struct stablesend_req reqs[NREQ], one;
	struct stablesend_cqe cqe[2 * NREQ];
	size_t fsize = 2 * LIMIT, i;
	int dev, file, c, s, sent = 0, released = 0;
	pthread_t rt;
	long long kicks;
	unsigned char *a;
	double t;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		printf("SKIP: needs two CPUs\n");
		return SKIP;
	}
	if (geteuid() != 0 || access(KICK, W_OK)) {
		printf("SKIP: needs root and %s\n", KICK);
		return SKIP;
	}
	atexit(kicks_on);
	pin(0);

	a = malloc(fsize);
	REQUIRE(a, "malloc");
	for (i = 0; i < fsize; i++)
		a[i] = (unsigned char)(i * 13 + i / 509);
	file = temp_file(0, 0);
	write_full(file, a, fsize, 0);
	dev = ss_dev();
	REQUIRE(ss_setup(dev, -1, LIMIT) == 0, "SETUP");
	tcp_pair(AF_INET, &c, &s);
	file_bytes = a;
	rx_sock = s;
	/* First, while nobody waits: an EAGAIN counts as waiting for a second. */
	usleep(1100 * 1000);
	closed_behind(dev, file, c);
	kicks = ss_stat("rx_kicks");
	REQUIRE(pthread_create(&rt, NULL, receiver, NULL) == 0, "pthread_create");

	/* Every page of the open in flight, each request asking for RELEASED. */
	for (i = 0; i < NREQ; i++) {
		reqs[i] = ss_req(file, c, i * REQ_LEN, REQ_LEN, i);
		reqs[i].flags = STABLESEND_REQ_NOTIFY_RELEASE;
	}

	/* Negative control: without the kicks the last pages stay out. */
	REQUIRE(write_str(KICK, "N") == 0, "rx_kick=0");
	REQUIRE(ss_submit(dev, reqs, NREQ) == NREQ, "SUBMIT");
	count(cqe, ss_reap_intr(dev, cqe, 2 * NREQ, 3000), &sent, &released);
	printf("kicks off: %d SENT, %d RELEASED of %d after 3 s\n", sent,
	       released, NREQ);
	CHECK(sent == NREQ && released < NREQ,
	      "kicks off: %d SENT and %d RELEASED of %d (control: the last should stay out)",
	      sent, released, NREQ);
	REQUIRE(write_str(KICK, "Y") == 0, "rx_kick=1");
	t = now_s();
	count(cqe, ss_reap_intr(dev, cqe, NREQ - released, 10000), &sent, &released);
	CHECK(released == NREQ, "kicks on again: %d RELEASED of %d within 10 s",
	      released, NREQ);
	printf("kicks on again: the rest RELEASED after %.3f s\n", now_s() - t);

	/* With the kicks. */
	sent = released = 0;
	REQUIRE(ss_submit(dev, reqs, NREQ) == NREQ, "SUBMIT");
	t = now_s();
	count(cqe, ss_reap_intr(dev, cqe, 2 * NREQ, 10000), &sent, &released);
	CHECK(sent == NREQ && released == NREQ,
	      "%d SENT and %d RELEASED of %d each within 10 s", sent, released,
	      NREQ);
	printf("RELEASED records after %.3f s\n", now_s() - t);

	/* The open's memory is all back: a blocking send must not wait. */
	one = ss_req(file, c, LIMIT, LIMIT, 99);
	signal(SIGALRM, on_alarm);
	alarm(20);
	REQUIRE(ss_send(dev, &one) == LIMIT, "SEND of the whole limit");

	/* Again: this one needs the pages of the last one back. */
	one = ss_req(file, c, REQ_LEN, LIMIT, 100);
	t = now_s();
	REQUIRE(ss_send(dev, &one) == LIMIT, "SEND waiting for memory");
	alarm(0);
	printf("blocking SEND got its memory after %.3f s\n", now_s() - t);

	/*
	 * A non-blocking submitter that finds the memory still out (the last
	 * SEND's pages) polls for it: POLLOUT must come, kicked for.
	 */
	REQUIRE(fcntl(dev, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	one = ss_req(file, c, 0, LIMIT, 101);
	t = now_s();
	if (ss_submit(dev, &one, 1) == 1) {
		printf("non-blocking submitter: the memory was back already\n");
	} else {
		int ok = 0;

		CHECK(errno == EAGAIN, "non-blocking SUBMIT: %s", strerror(errno));
		/* POLLOUT once the refused request fits: the whole limit. */
		while (!ok && now_s() < t + 10) {
			struct pollfd p = { .fd = dev, .events = POLLOUT };

			if (poll(&p, 1, 10000) != 1 || !(p.revents & POLLOUT))
				continue;
			/* POLLOUT says the refused request fits now. */
			ok = ss_submit(dev, &one, 1) == 1;
			REQUIRE(ok, "SUBMIT after POLLOUT: %s", strerror(errno));
		}
		CHECK(ok, "non-blocking submitter: the limit not free within 10 s");
		printf("non-blocking submitter: EAGAIN, then POLLOUT and the whole limit after %.3f s\n",
		       now_s() - t);
	}
	CHECK(ss_reap_intr(dev, cqe, 1, 10000) == 1 && cqe[0].res == LIMIT,
	      "non-blocking submitter's SENT");
	REQUIRE(pthread_join(rt, NULL) == 0, "pthread_join");
	CHECK(!rx_bad, "received bytes differ from the file");
	printf("rx_kicks: %lld\n", ss_stat("rx_kicks") - kicks);

	/*
	 * Nobody waits for the last SEND's pages while the fd is open; once
	 * it is closed the module does, and they come back all the same.
	 */
	close(dev);
	CHECK(ss_drained(10), "pages still in flight 10 s after the close");
	close(c);
	close(s);
	return test_result();
}
