// SPDX-License-Identifier: GPL-2.0
/*
 * The module kicks receive processing (module/rxkick.c) only for pages
 * someone waits for, that a kick can bring back, and at a bounded rate
 * per user:
 * (a) pages of an open that stays open, held by a peer that does not
 *     read, with no RELEASED asked and nobody waiting for memory: no kick
 *     in 3 s (kicks could not bring them back anyway);
 * (b) the same with RELEASED asked: still no kick in 4 s, as the sending
 *     socket holds the pages itself, its bytes unacknowledged;
 * (c) RELEASED asked of bytes the peer acknowledged but never reads (they
 *     sit in its receive queue, which a kick does not know from a defer
 *     list): kicked for, at least once and at most 15 times in 4 s
 *     (doubling gaps up to a second), and the open's fdinfo counts them
 *     for its user;
 * (d) while (c)'s pages stay out, another user (nobody) whose RELEASED
 *     pages wait on a CPU's socket buffer defer list (submitter on CPU 0,
 *     receiver reading everything on CPU 1, as in quiet.c) gets its
 *     RELEASED records as if alone: the first user's stall must not
 *     stretch the second user's gaps (median of 5 rounds under 0.3 s);
 * (e) a user whose RELEASED stalls come and go (every 50 ms a new
 *     connection as in (c), then reset) for 3 s: each new socket is due
 *     a kick a tick into its stall, but the user gets at most 8 a second:
 *     at most 32 in the 3 s;
 * (f) an io_uring command asking for its pages back (NOTIFY_RELEASE) as in
 *     (c): kicked for while its ring waits; once the ring is closed
 *     (io_uring cancels the command and posts its CQE) nobody waits for
 *     those pages any more: no kick in 3 s.
 * test-timeout: 120
 */
#include "uring.h"
#include <stablesend.h>
#include <grp.h>
#include <linux/sockios.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define NOBODY	65534
#define CHUNK	(64 << 10)
/* Fits a receive buffer of the defaults: acknowledged at once. */
#define ACKED	(32 << 10)
#define ROUNDS	5

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	REQUIRE(sched_setaffinity(0, sizeof(set), &set) == 0, "pin to CPU %d", cpu);
}

/* sleep(3) and the like end early when task work runs: sleep it all. */
static void nap(double secs)
{
	double end = now_s() + secs;

	while (now_s() < end)
		usleep((useconds_t)((end - now_s()) * 1e6) + 1);
}

static long long user_kicks(int dev)
{
	return fdinfo_num(getpid(), dev, "stablesend-user-rx-kicks");
}

/* A request the peer never reads: its pages stay out. */
static void stall(int dev, int file, int *c, int *s, uint32_t flags, uint64_t ud)
{
	struct stablesend_req r;

	tcp_pair(AF_INET, c, s);
	set_rcvbuf_small(*s);
	r = ss_req(file, *c, 0, 1 << 20, ud);
	r.flags = flags;
	REQUIRE(ss_submit(dev, &r, 1) == 1, "SUBMIT");
}

/*
 * A request of @len bytes that the peer acknowledges (they fit its receive
 * buffer) but never reads: its pages stay in the peer's receive queue,
 * with nothing unacknowledged on our side.
 */
static void stall_acked(struct stablesend_req r, int *c, int *s, int dev)
{
	double t;
	int outq = -1;

	tcp_pair(AF_INET, c, s);
	r.sock_fd = *c;
	REQUIRE(ss_submit(dev, &r, 1) == 1, "SUBMIT");
	for (t = now_s(); now_s() - t < 5; usleep(1000))
		if (ioctl(*c, SIOCOUTQ, &outq) == 0 && outq == 0)
			break;
	REQUIRE(outq == 0, "%d bytes still unacknowledged after 5 s", outq);
}

static int rx_sock;

static void *receiver(void *arg)
{
	static char buf[CHUNK];

	(void)arg;
	pin(1);
	while (read(rx_sock, buf, sizeof(buf)) > 0)
		;
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* (c), as nobody: RELEASED of 4 x 64 KiB on a quiet connection, 5 rounds. */
static int other_user(int file)
{
	double took[ROUNDS], t;
	struct stablesend_req r[4];
	struct stablesend_cqe cqe[8];
	int dev, c, s, round, i, n;
	pthread_t rt;

	REQUIRE(setgroups(0, NULL) == 0 && setgid(NOBODY) == 0 && setuid(NOBODY) == 0,
		"become nobody");
	prctl(PR_SET_DUMPABLE, 1);	/* our own /proc/self/fdinfo */
	pin(0);
	dev = ss_dev();
	REQUIRE(ss_setup(dev, -1, 4 << 20) == 0, "SETUP");
	tcp_pair(AF_INET, &c, &s);
	rx_sock = s;
	REQUIRE(pthread_create(&rt, NULL, receiver, NULL) == 0, "pthread_create");
	for (round = 0; round < ROUNDS; round++) {
		int released = 0;

		for (i = 0; i < 4; i++) {
			r[i] = ss_req(file, c, (uint64_t)i * CHUNK, CHUNK, round * 4 + i);
			r[i].flags = STABLESEND_REQ_NOTIFY_RELEASE;
		}
		t = now_s();
		REQUIRE(ss_submit(dev, r, 4) == 4, "SUBMIT");
		while (released < 4 && now_s() - t < 10) {
			n = ss_reap_intr(dev, cqe, 8, 10000);
			for (i = 0; i < n; i++)
				released += !!(cqe[i].flags & STABLESEND_CQE_RELEASED);
		}
		took[round] = now_s() - t;
		CHECK(released == 4, "nobody: %d RELEASED of 4 within 10 s", released);
		printf("nobody, round %d: RELEASED of 4 x 64 KiB after %.3f s\n", round + 1,
		       took[round]);
		usleep(100000);
	}
	qsort(took, ROUNDS, sizeof(took[0]), cmp_double);
	CHECK(took[ROUNDS / 2] < 0.3 * ss_debug_scale(3),
	      "nobody's RELEASED records took %.3f s (median of %d) while root's pages were stalled",
	      took[ROUNDS / 2], ROUNDS);
	printf("nobody: user-rx-kicks %lld; median %.3f s\n", user_kicks(dev), took[ROUNDS / 2]);
	shutdown(c, SHUT_WR);
	pthread_join(rt, NULL);
	close(c);
	close(s);
	close(dev);
	return test_result();
}

int main(void)
{
	int dev, file, c1, s1, c2, s2, st, n;
	struct stablesend_cqe cqe[16];
	long long k0, k1, k2, uk, uk0;
	struct stablesend_req r;
	double t;
	pid_t pid;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		printf("SKIP: needs two CPUs\n");
		return SKIP;
	}
	file = temp_file(1 << 20, 'k');
	CHECK(ss_drained(10), "an earlier test's pages are still out");
	dev = ss_dev();
	REQUIRE(ss_setup(dev, -1, 8 << 20) == 0, "SETUP");

	/* (a) */
	stall(dev, file, &c1, &s1, 0, 1);
	nap(0.5);
	/* Deltas: the user (root) may have kicks of an earlier test's pages. */
	k0 = ss_stat("rx_kicks");
	uk0 = user_kicks(dev);
	nap(3);
	k1 = ss_stat("rx_kicks");
	CHECK(k1 == k0, "%lld kicks in 3 s for pages nobody waits for", k1 - k0);
	printf("(a) pages out, nobody waiting: %lld kicks in 3 s\n", k1 - k0);

	/* (b) */
	stall(dev, file, &c2, &s2, STABLESEND_REQ_NOTIFY_RELEASE, 2);
	nap(4);
	k2 = ss_stat("rx_kicks");
	CHECK(k2 == k1, "%lld kicks in 4 s for pages the socket still holds (RELEASED asked)",
	      k2 - k1);
	printf("(b) RELEASED asked, bytes unacknowledged: %lld kicks in 4 s\n", k2 - k1);
	close(c2);
	close(s2);

	/* (c) */
	k1 = ss_stat("rx_kicks");
	r = ss_req(file, 0, 0, ACKED, 3);
	r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
	stall_acked(r, &c2, &s2, dev);
	nap(4);
	k2 = ss_stat("rx_kicks");
	uk = user_kicks(dev) - uk0;
	CHECK(k2 - k1 >= 1 && k2 - k1 <= 15,
	      "%lld kicks in 4 s for a RELEASED that cannot come, want 1 to 15", k2 - k1);
	CHECK(uk >= 1 && uk <= k2 - k0, "fdinfo: user-rx-kicks %lld (module-wide %lld)", uk,
	      k2 - k0);
	printf("(c) RELEASED asked, bytes acknowledged, never read: %lld kicks in 4 s; fdinfo user-rx-kicks %lld\n",
	       k2 - k1, uk);

	/* (d) */
	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		failures = 0;
		_exit(other_user(file));
	}
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody's part: status 0x%x", st);

	/* (e) */
	k0 = ss_stat("rx_kicks");
	t = now_s();
	for (n = 0; now_s() - t < 3; n++) {
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };
		int c, s;

		r = ss_req(file, 0, 0, ACKED, 100 + n);
		r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
		stall_acked(r, &c, &s, dev);
		nap(0.05);
		setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(c);
		close(s);
		while (ss_reap(dev, cqe, 16, 0) > 0)
			;
	}
	t = now_s() - t;
	k1 = ss_stat("rx_kicks");
	CHECK(k1 - k0 >= 1 && k1 - k0 <= 8 * t + 8, "%lld kicks in %.1f s for one user's %d stalls",
	      k1 - k0, t, n);
	printf("(e) %d stalls that come and go in %.1f s: %lld kicks\n", n, t, k1 - k0);

	/* (f) */
	close(c2);
	close(s2);
	{
		struct ring ring;
		int c, s;

		REQUIRE(ring_init(&ring, 4, 0) == 0, "io_uring_setup");
		tcp_pair(AF_INET, &c, &s);
		r = ss_req(file, c, 0, ACKED, 7);
		r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
		stablesend_prep_uring(ring_sqe(&ring), dev, &r);
		REQUIRE(ring_submit(&ring, 0) == 1, "io_uring_enter");
		nap(0.5);
		k0 = ss_stat("rx_kicks");
		nap(1.5);
		k1 = ss_stat("rx_kicks");
		CHECK(k1 > k0, "no kick in 1.5 s while the ring waits for the command's pages");
		uk = k1 - k0;
		ring_exit(&ring);
		nap(0.5);
		k1 = ss_stat("rx_kicks");
		nap(3);
		k2 = ss_stat("rx_kicks");
		CHECK(k2 == k1, "%lld kicks in 3 s after the ring closed", k2 - k1);
		printf("(f) io_uring command: %lld kicks in 1.5 s while its ring waits, %lld in 3 s after the ring closed\n",
		       uk, k2 - k1);
		close(c);
		close(s);
	}

	close(c1);
	close(s1);
	close(dev);
	close(file);
	CHECK(ss_drained(10), "pages still out after every fd was closed");
	return test_result();
}
