// SPDX-License-Identifier: GPL-2.0
/*
 * Memory pressure: snapshot pages are charged to the memory cgroup of the
 * process that opened the device (and submits, here), and a cgroup at memory.max makes submissions fail with ENOMEM
 * (the module allocates with __GFP_RETRY_MAYFAIL / __GFP_NORETRY) instead
 * of waking the OOM killer.
 *
 * A child moves into a cgroup v2 child group and submits 1 MiB requests
 * to a TCP socket whose peer does not read, with a per-open limit
 * (64 MiB) far above memory.max (its baseline + 8 MiB).  The parent,
 * outside the cgroup, measures after each submission: memory.current must
 * rise with the module's bytes_in_flight, and once memory.max is reached
 * the submission fails with ENOMEM, memory.events counts no oom_kill, the
 * child and a bystander outside the cgroup live.  Then the peer drains:
 * every accepted request completes whole, the counters go back to 0 and
 * memory.current falls back once the device is closed.  A second round
 * sets memory.max below one request: SUBMIT and SEND fail with ENOMEM,
 * the open keeps none of the pages they had (idle pages its cgroup's
 * reclaim cannot take), and a smaller request still goes through.
 *
 * The sockets and the file are made by the parent before the fork, so
 * their memory is charged outside the cgroup: what the cgroup gains is
 * the module's own allocations.  The child only makes system calls that
 * allocate nothing charged (ioctl, read, nanosleep) while at the limit;
 * it talks to the parent through a shared page the parent touched first.
 *
 * test-timeout: 180
 */
#include "common.h"
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define CG_ROOT		"/sys/fs/cgroup"
#define MIB		(1 << 20)
#define REQ		MIB
#define DEV_LIMIT	(64ULL * MIB)
#define MAX_REQS	40		/* < DEV_LIMIT / REQ: never waits */

enum { CMD_NONE, CMD_SUBMIT, CMD_SEND, CMD_REAP, CMD_COUNTERS, CMD_CLOSE, CMD_EXIT };

/* Parent and child, lock step: the parent sets cmd, the child answers. */
struct shared {
	atomic_int cmd;
	atomic_int done;	/* sequence number of the last command done */
	int seq;
	uint64_t len;
	long ret;
	int err;
	int reaped;
	int bad_cqes;
	struct stablesend_counters c;
};

static struct shared *sh;
static char cg[128];

static long long cg_read(const char *file, const char *key)
{
	char path[256], buf[1024];

	snprintf(path, sizeof(path), "%s/%s", cg, file);
	if (read_text(path, buf, sizeof(buf)) < 0 || !buf[0])
		return -1;
	return key ? text_key_num(buf, key, ' ') : strtoll(buf, NULL, 10);
}

static int cg_write(const char *file, long long v)
{
	char path[256], buf[32];

	snprintf(path, sizeof(path), "%s/%s", cg, file);
	if (v < 0)
		snprintf(buf, sizeof(buf), "max");
	else
		snprintf(buf, sizeof(buf), "%lld", v);
	return write_str(path, buf);
}

/* The child: runs the parent's commands on one device fd. */
static void child(int file, int sock)
{
	struct stablesend_cqe cqe[8];
	int dev, seq = 0;

	dev = open(STABLESEND_DEVICE, O_RDWR | O_CLOEXEC);
	if (dev < 0 || ss_setup(dev, -1, DEV_LIMIT))
		_exit(2);
	for (;;) {
		struct stablesend_req r = ss_req(file, sock, 0, 0, 0);
		int cmd;

		atomic_store(&sh->done, seq);
		while ((cmd = atomic_load(&sh->cmd)) == CMD_NONE ||
		       sh->seq == seq)
			usleep(1000);
		seq = sh->seq;
		r.len = sh->len;
		r.user_data = sh->len;	/* the result a whole send gives */
		errno = 0;
		switch (cmd) {
		case CMD_SUBMIT:
			sh->ret = ss_submit(dev, &r, 1);
			break;
		case CMD_SEND:
			sh->ret = ss_send(dev, &r);
			break;
		case CMD_REAP:
			sh->ret = ss_reap(dev, cqe, 1, 20000);
			if (sh->ret == 1) {
				sh->reaped++;
				if (cqe[0].res != (long long)cqe[0].user_data)
					sh->bad_cqes++;
			}
			break;
		case CMD_COUNTERS:
			break;
		case CMD_CLOSE:
			sh->ret = close(dev);
			break;
		case CMD_EXIT:
			_exit(0);
		}
		sh->err = errno;
		if (cmd != CMD_CLOSE)
			ioctl(dev, STABLESEND_IOC_COUNTERS, &sh->c);
		atomic_store(&sh->cmd, CMD_NONE);
	}
}

/* Send one command to the child and wait for it (false: the child died). */
static int cmd(pid_t pid, int c, uint64_t len)
{
	double end = now_s() + 60;
	int next = sh->seq + 1;

	sh->len = len;
	sh->seq = next;
	atomic_store(&sh->cmd, c);
	while (atomic_load(&sh->done) != next || atomic_load(&sh->cmd) != CMD_NONE) {
		if (waitpid(pid, NULL, WNOHANG) == pid || now_s() > end)
			return 0;
		usleep(1000);
	}
	return 1;
}

static void child_done(pid_t pid)
{
	int st = -1;

	sh->seq++;
	atomic_store(&sh->cmd, CMD_EXIT);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st),
	      "child status %#x", st);
}

static int alive(pid_t pid)
{
	return waitpid(pid, NULL, WNOHANG) == 0;
}

/* Fork the child into the cgroup; returns its pid once it has set up. */
static pid_t start_child(int file, int sock)
{
	char path[256];
	pid_t pid;

	memset(sh, 0, sizeof(*sh));
	atomic_store(&sh->done, -1);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
		if (write_str(path, "0"))
			_exit(3);
		child(file, sock);
	}
	while (atomic_load(&sh->done) != 0) {
		REQUIRE(alive(pid), "child died setting up");
		usleep(1000);
	}
	usleep(100000);
	return pid;
}

/* A fresh child cgroup @name: memory.events counts from zero. */
static void cg_make(const char *name)
{
	snprintf(cg, sizeof(cg), CG_ROOT "/stablesend-%s-%d", name, getpid());
	REQUIRE(mkdir(cg, 0755) == 0, "mkdir %s", cg);
	cg_write("memory.swap.max", 0);	/* no swap in the guest anyway */
}

static void cg_remove(void)
{
	int i;

	/* The dead child's cgroup goes once its pages are uncharged. */
	for (i = 0; i < 100 && rmdir(cg) && errno == EBUSY; i++)
		usleep(20000);
	if (access(cg, F_OK) == 0)
		fprintf(stderr, "rmdir %s: %s\n", cg, strerror(errno));
}

static void round_pressure(int file, int sock, int peer, pid_t bystander)
{
	long long base, cur = 0, flight = 0, max, d, pool, total = 0;
	int i, accepted = 0, err = 0, first_fail = -1;
	struct pollfd p = { .fd = peer, .events = POLLIN };
	size_t got;
	char *buf;
	pid_t pid;
	ssize_t n;

	cg_make("pressure");
	pid = start_child(file, sock);
	base = cg_read("memory.current", NULL);
	max = base + 8 * MIB;
	REQUIRE(cg_write("memory.max", max) == 0, "memory.max = %lld", max);
	printf("pressure: baseline memory.current %lld, memory.max %lld (+8 MiB), "
	       "per-open limit %llu MiB, requests of %d KiB\n",
	       base, max, DEV_LIMIT / MIB, REQ >> 10);
	for (i = 0; i < MAX_REQS; i++) {
		if (!cmd(pid, CMD_SUBMIT, REQ)) {
			printf("  submit %2d: the submitter died\n", i);
			break;
		}
		cur = cg_read("memory.current", NULL);
		flight = ss_stat("bytes_in_flight");
		printf("  submit %2d: ret %ld errno %-7s memory.current +%6lld KiB, "
		       "bytes_in_flight %6lld KiB, mem_in_use %6llu KiB, pool %lld KiB\n",
		       i, sh->ret, sh->ret < 0 ? strerror(sh->err) : "-",
		       (cur - base) >> 10, flight >> 10,
		       (unsigned long long)sh->c.mem_in_use >> 10,
		       ss_stat("pool_bytes") >> 10);
		if (sh->ret != 1) {
			err = sh->err;
			first_fail = i;
			break;
		}
		accepted++;
		total += REQ;
		/* Charged to the cgroup: at least the pages in flight. */
		d = cur - base;
		CHECK(d >= flight * 9 / 10 && d <= ss_stat("pool_bytes") + 2 * MIB,
		      "submit %d: memory.current +%lld, bytes_in_flight %lld", i,
		      d, flight);
		CHECK(flight == (long long)sh->c.mem_in_use,
		      "bytes_in_flight %lld, COUNTERS.mem_in_use %llu", flight,
		      (unsigned long long)sh->c.mem_in_use);
	}
	CHECK(alive(pid), "the submitter was killed (memory.events oom_kill %lld)",
	      cg_read("memory.events", "oom_kill"));
	CHECK(first_fail > 0 && err == ENOMEM,
	      "at memory.max: first failure at request %d errno %d (%s), want ENOMEM",
	      first_fail, err, strerror(err));
	/* More submissions at the limit: ENOMEM again (or room was found), no OOM. */
	for (i = 0; i < 4 && alive(pid); i++) {
		uint64_t len = i % 2 ? 4096 : REQ;

		if (!cmd(pid, CMD_SUBMIT, len)) {
			printf("  at the limit, %llu bytes: the submitter died\n",
			       (unsigned long long)len);
			break;
		}
		printf("  at the limit, %llu bytes: ret %ld errno %s\n",
		       (unsigned long long)len, sh->ret,
		       sh->ret < 0 ? strerror(sh->err) : "-");
		if (sh->ret == 1) {
			accepted++;
			total += len;
		} else {
			CHECK(sh->err == ENOMEM, "at the limit: errno %s", strerror(sh->err));
		}
	}
	printf("memory.events: max %lld oom %lld oom_kill %lld; accepted %d; "
	       "memory.current +%lld KiB, bytes_in_flight %lld KiB\n",
	       cg_read("memory.events", "max"), cg_read("memory.events", "oom"),
	       cg_read("memory.events", "oom_kill"), accepted,
	       (cg_read("memory.current", NULL) - base) >> 10,
	       ss_stat("bytes_in_flight") >> 10);
	CHECK(cg_read("memory.events", "oom_kill") == 0, "oom_kill %lld",
	      cg_read("memory.events", "oom_kill"));
	CHECK(cg_read("memory.events", "max") > 0,
	      "memory.events max 0: the cgroup never reached memory.max");
	CHECK(alive(pid), "the submitter died");
	CHECK(kill(bystander, 0) == 0 && waitpid(bystander, NULL, WNOHANG) == 0,
	      "the bystander outside the cgroup died");
	if (!alive(pid)) {
		cg_remove();
		return;
	}

	/* The peer drains: every accepted request completes in full. */
	buf = malloc(MIB);
	REQUIRE(buf, "malloc");
	got = 0;
	while (poll(&p, 1, 2000) == 1 && (n = read(peer, buf, MIB)) > 0)
		got += n;
	for (i = 0; i < accepted; i++)
		if (!cmd(pid, CMD_REAP, 0) || sh->ret != 1)
			break;
	CHECK(sh->reaped == accepted && !sh->bad_cqes,
	      "reaped %d of %d completions, %d with a wrong result", sh->reaped,
	      accepted, sh->bad_cqes);
	CHECK(cmd(pid, CMD_COUNTERS, 0) &&
	      sh->c.completed == (uint64_t)accepted && sh->c.failed == 0,
	      "after the drain: completed %llu failed %llu",
	      (unsigned long long)sh->c.completed, (unsigned long long)sh->c.failed);
	CHECK(got == (size_t)total, "peer read %zu bytes, %lld accepted", got, total);
	cur = cg_read("memory.current", NULL);
	pool = ss_stat("pool_bytes");
	CHECK(cur - base >= pool * 9 / 10, "memory.current +%lld, pool %lld",
	      cur - base, pool);
	CHECK(cmd(pid, CMD_CLOSE, 0) && sh->ret == 0, "close the device");
	/* Pages nobody waits for come back at the latest once the fd is closed. */
	CHECK(ss_drained(10), "requests_in_flight %lld bytes_in_flight %lld",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	for (i = 0; i < 100 && cg_read("memory.current", NULL) > base + MIB; i++)
		usleep(20000);
	/* Until the close, the open's pool keeps the pages (and their charge). */
	printf("drained: peer read %zu bytes, %d completions; memory.current +%lld KiB "
	       "before the device is closed (pool %lld KiB), +%lld KiB after\n", got,
	       sh->reaped, (cur - base) >> 10, pool >> 10,
	       (cg_read("memory.current", NULL) - base) >> 10);
	CHECK(cg_read("memory.current", NULL) <= base + MIB,
	      "memory.current %lld after close, baseline %lld",
	      cg_read("memory.current", NULL), base);
	child_done(pid);
	free(buf);
	cg_remove();
}

static void round_tiny(int file, int sock, int peer)
{
	long long base, max, pool;
	char buf[64 << 10];
	pid_t pid;

	cg_make("tiny");
	pid = start_child(file, sock);
	base = cg_read("memory.current", NULL);
	max = base + 512 * 1024;
	REQUIRE(cg_write("memory.max", max) == 0, "memory.max = %lld", max);
	CHECK(cmd(pid, CMD_SUBMIT, 4 * MIB) && sh->ret == -1 && sh->err == ENOMEM,
	      "4 MiB SUBMIT under memory.max = baseline + 512 KiB: %ld errno %s",
	      sh->ret, strerror(sh->err));
	printf("tiny: memory.max = baseline + 512 KiB: SUBMIT of 4 MiB %ld errno %s, ",
	       sh->ret, strerror(sh->err));
	CHECK(cmd(pid, CMD_SEND, 4 * MIB) && sh->ret == -1 && sh->err == ENOMEM,
	      "4 MiB SEND: %ld errno %s", sh->ret, strerror(sh->err));
	printf("SEND %ld errno %s, ", sh->ret, strerror(sh->err));
	CHECK(sh->c.submitted == 0 && sh->c.mem_in_use == 0,
	      "after ENOMEM: submitted %llu mem_in_use %llu",
	      (unsigned long long)sh->c.submitted,
	      (unsigned long long)sh->c.mem_in_use);
	/*
	 * The cgroup was full: the open keeps none of the pages those requests
	 * had (its reclaim could not take them), or nothing else fits.
	 */
	pool = ss_stat("pool_bytes");
	CHECK(pool == 0,
	      "after ENOMEM the open still holds %lld bytes of idle pages in the full cgroup",
	      pool);
	printf("pool after ENOMEM %lld bytes, ", pool);
	/*
	 * A request that fits still goes through (once more after 0.2 s: other
	 * CPUs give back the charges they cache for the cgroup asynchronously).
	 */
	if (cmd(pid, CMD_SEND, sizeof(buf)) && sh->ret == -1 && sh->err == ENOMEM) {
		printf("64 KiB SEND -1 ENOMEM, again after 0.2 s: ");
		usleep(200000);
		cmd(pid, CMD_SEND, sizeof(buf));
	}
	CHECK(sh->ret == (long)sizeof(buf), "64 KiB SEND: %ld errno %s", sh->ret,
	      strerror(sh->err));
	printf("64 KiB SEND %ld; oom_kill %lld\n", sh->ret,
	       cg_read("memory.events", "oom_kill"));
	CHECK(read_full(peer, buf, sizeof(buf)) == sizeof(buf), "peer read");
	CHECK(cg_read("memory.events", "oom_kill") == 0, "oom_kill %lld",
	      cg_read("memory.events", "oom_kill"));
	CHECK(alive(pid), "the submitter died");
	if (alive(pid)) {
		cmd(pid, CMD_CLOSE, 0);
		child_done(pid);
	}
	cg_remove();
}

int main(void)
{
	int file, sock, peer, fd, big = 16 << 20;
	char ctl[256] = "";
	pid_t bystander;
	ssize_t n = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getenv("STABLESEND_UNPRIV") || geteuid()) {
		printf("needs root to create a cgroup\n");
		return SKIP;
	}
	fd = open(CG_ROOT "/cgroup.controllers", O_RDONLY);
	if (fd >= 0) {
		n = read(fd, ctl, sizeof(ctl) - 1);
		ctl[n > 0 ? n : 0] = 0;
		close(fd);
	}
	if (fd < 0 || !strstr(ctl, "memory")) {
		printf("no cgroup2 memory controller at " CG_ROOT "\n");
		return SKIP;
	}
	REQUIRE(write_str(CG_ROOT "/cgroup.subtree_control", "+memory") == 0,
		"+memory in " CG_ROOT "/cgroup.subtree_control");
	REQUIRE(ss_drained(10), "module not idle at the start");

	sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	REQUIRE(sh != MAP_FAILED, "mmap");
	memset(sh, 0, 4096);	/* charged here, outside the cgroup */
	file = temp_file(4 * MIB, 'm');

	/* A bystander outside the cgroup, holding some memory of its own. */
	bystander = fork();
	REQUIRE(bystander >= 0, "fork");
	if (!bystander) {
		char *p = malloc(big);

		if (p)
			memset(p, 1, big);
		pause();
		_exit(0);
	}

	tcp_pair(AF_INET, &sock, &peer);
	round_pressure(file, sock, peer, bystander);
	close(sock);
	close(peer);

	tcp_pair(AF_INET, &sock, &peer);
	round_tiny(file, sock, peer);
	close(sock);
	close(peer);

	CHECK(ss_drained(10), "requests_in_flight %lld bytes_in_flight %lld at the end",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	kill(bystander, SIGKILL);
	waitpid(bystander, NULL, 0);
	return test_result();
}
