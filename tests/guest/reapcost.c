// SPDX-License-Identifier: GPL-2.0
/*
 * Release tracking costs what moves, not what is parked (issue 14).  1,
 * 1,000 and 50,000 one-byte requests parked on AF_UNIX sockets whose
 * peers never read (up to 100 sockets, requests spread over them; those
 * the socket holds are sent, the rest wait on the FIFO) stay there for
 * 10 s while this process sleeps.  Over those 10 s the machine's CPU time
 * (/proc/stat, everything but idle and iowait) and the module's looks at
 * page counts (stats/reap_checks) must not grow with the count: 50,000
 * parked requests may cost at most 2% of one CPU more than one, and the
 * reaper at most 4 looks a second per socket.
 * Then the peers read everything: every request completes, every page
 * comes back.
 * (The module used to walk every queued request every tick.)
 * On the debug kernel (KASAN, kmemleak: each request costs several times
 * more to make and reap) the largest count is 10,000, to keep the tier's
 * time down; the bounds are the same.
 * test-timeout: 300
 */
#include "common.h"
#include <sys/resource.h>

#define MAX_SOCKS	100
#define WINDOW_S	10

static long long busy_ticks(void)
{
	unsigned long long v[10] = { 0 };
	char buf[512];

	if (read_text("/proc/stat", buf, sizeof(buf)) ||
	    sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu",
		   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
		return -1;
	/* user nice system [idle] [iowait] irq softirq steal */
	return v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
}

struct cost {
	double cpu;		/* CPUs busy, on average */
	double checks;		/* reap_checks a second */
	long long held;		/* requests whose bytes the sockets hold */
};

static struct cost park(int n, int file)
{
	int nsock = n < MAX_SOCKS ? n : MAX_SOCKS, a[MAX_SOCKS], b[MAX_SOCKS];
	struct stablesend_req *r = calloc(n, sizeof(*r));
	long hz = sysconf(_SC_CLK_TCK), ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct stablesend_cqe *cqe = calloc(n, sizeof(*cqe));
	int dev = ss_dev(), i, done, got;
	long long t0, c0, sent0 = ss_stat("bytes_sent");
	struct cost c = { 0 };
	static char buf[1 << 16];

	REQUIRE(r && cqe, "calloc");
	REQUIRE(ss_setup(dev, -1, 256 << 20) == 0, "SETUP 256 MiB");
	for (i = 0; i < nsock; i++)
		unix_pair(&a[i], &b[i]);
	for (i = 0; i < n; i++) {
		r[i] = ss_req(file, a[i % nsock], i, 1, i);
	}
	for (done = 0; done < n; done += got) {
		got = ss_submit(dev, r + done, n - done > 1024 ? 1024 : n - done);
		REQUIRE(got > 0, "submit %d of %d", done, n);
	}
	c.held = ss_stat("bytes_sent") - sent0;
	/* Let the reaper settle on what does not move. */
	sleep(2);
	t0 = busy_ticks();
	c0 = ss_stat("reap_checks");
	sleep(WINDOW_S);
	c.cpu = (double)(busy_ticks() - t0) / hz / WINDOW_S;
	c.checks = c0 < 0 ? -1 : (double)(ss_stat("reap_checks") - c0) / WINDOW_S;
	printf("  %6d parked (%lld in the sockets): %.3f CPUs busy, %.0f reap checks/s (%d CPUs)\n",
	       n, c.held, c.cpu, c.checks, (int)ncpu);

	/* Everything drains: every SENT record comes, every page back. */
	for (i = 0; i < nsock; i++) {
		int fl = fcntl(b[i], F_GETFL);

		fcntl(b[i], F_SETFL, fl | O_NONBLOCK);
	}
	t0 = (long long)now_s();
	for (done = 0; done < n && now_s() < t0 + 60;) {
		for (i = 0; i < nsock; i++)
			while (read(b[i], buf, sizeof(buf)) > 0)
				;
		got = ss_reap(dev, cqe, n - done, 100);
		if (got > 0)
			done += got;
	}
	CHECK(done == n, "%d of %d SENT records after the peers read", done, n);
	CHECK(ss_stat_wait("requests_in_flight", 0, 20) == 0,
	      "requests_in_flight %lld after the peers read", ss_stat("requests_in_flight"));
	for (i = 0; i < nsock; i++) {
		close(a[i]);
		close(b[i]);
	}
	close(dev);
	free(r);
	free(cqe);
	return c;
}

int main(void)
{
	const int counts[] = { 1, 1000, 50000 / ss_debug_scale(5) };
	struct rlimit rl = { 4096, 4096 };
	int file = temp_file(1 << 16, 'r');
	struct cost c[3];
	unsigned int i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	setrlimit(RLIMIT_NOFILE, &rl);
	for (i = 0; i < 3; i++)
		c[i] = park(counts[i], file);
	CHECK(c[2].cpu - c[0].cpu < 0.02,
	      "%d parked requests cost %.3f CPUs, one %.3f: the cost grows with the count",
	      counts[2], c[2].cpu, c[0].cpu);
	CHECK(c[2].checks >= 0 && c[2].checks <= 4.0 * MAX_SOCKS,
	      "%.0f reap checks/s for %lld requests on %d sockets",
	      c[2].checks, c[2].held, MAX_SOCKS);
	CHECK(ss_stat_wait("pool_bytes", 0, 20) == 0, "pool_bytes %lld at the end",
	      ss_stat("pool_bytes"));
	return test_result();
}
