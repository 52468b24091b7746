// SPDX-License-Identifier: GPL-2.0
/*
 * A memory cgroup that runs out of memory takes back the idle pool pages
 * of its own opens, as it reclaims its page cache: a process is never
 * OOM-killed in a cgroup whose memory sits idle in the module.  And it
 * takes only its own: an open of another cgroup keeps its pool.
 *
 * Two children, each in a cgroup v2 group of its own (A and B, no swap),
 * open the device and SEND 12 MiB over TCP to the parent, which reads it
 * all: the pages come back to their opens' pools (fdinfo
 * stablesend-mem-pooled; P bytes, most of them).  Then A's memory.max is
 * set to its memory.current plus 4 MiB and child A touches 4 MiB + P/2 of
 * anonymous memory, which fits only if A's reclaim frees at least P/2 of
 * its idle pool, the only thing in A it can take.  A must live
 * (memory.events: no oom_kill), its pool must have shrunk by that much
 * (give or take pages that came back late and the cgroup's charge stock),
 * B's must be whole.
 * A's open still sends afterwards.
 *
 * An open's pages are its opener's cgroup's: child C opens the device in
 * cgroup C, moves to B and then sends; C's memory.current holds its pool,
 * B's does not grow by it.  Once all close, nothing is pooled.
 *
 * (Before, the shrinker ran for global pressure only: A was OOM-killed.)
 *
 * test-timeout: 120
 */
#include "common.h"
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define CG_ROOT		"/sys/fs/cgroup"
#define MIB		(1 << 20)
#define POOL		(12 * MIB)
#define HEADROOM	(4 * MIB)
/*
 * memory.current counts the cgroup's per-CPU charge stock too (up to 64
 * pages a CPU), which the child's memory may use without any reclaim.
 */
#define STOCK		MIB

enum { CMD_NONE, CMD_EAT, CMD_SEND, CMD_EXIT };

/* One child's; the parent sets cmd, the child answers in done. */
struct shared {
	atomic_int cmd;
	atomic_int done;	/* the last command done, -1 before setup */
	int dev;		/* the child's device fd, for fdinfo */
	long eat;		/* bytes CMD_EAT touches */
	long sent;		/* its first SEND's result */
	long ret;
	int err;
};

struct kid {
	const char *name;
	char cg[128];
	const char *move_to;	/* a cgroup the child moves to once it opened */
	struct shared *sh;
	pid_t pid;
	int sock, peer;
};

static long long cg_read(struct kid *k, const char *file, const char *key)
{
	char path[256], buf[1024];

	snprintf(path, sizeof(path), "%s/%s", k->cg, file);
	if (read_text(path, buf, sizeof(buf)) < 0)
		return -1;
	return key ? text_key_num(buf, key, ' ') : strtoll(buf, NULL, 10);
}

static int cg_write(struct kid *k, const char *file, long long v)
{
	char path[256], buf[32];

	snprintf(path, sizeof(path), "%s/%s", k->cg, file);
	snprintf(buf, sizeof(buf), "%lld", v);
	return write_str(path, buf);
}

/* The child: one open, its SEND, then the parent's commands. */
static void child(struct kid *k, int file)
{
	struct shared *sh = k->sh;
	struct stablesend_req r;
	char path[256];
	int cmd, seq = 0;
	char *mem;

	snprintf(path, sizeof(path), "%s/cgroup.procs", k->cg);
	if (write_str(path, "0"))
		_exit(3);
	sh->dev = open(STABLESEND_DEVICE, O_RDWR | O_CLOEXEC);
	if (sh->dev < 0 || ss_setup(sh->dev, -1, 16 * MIB))
		_exit(2);
	if (k->move_to) {
		snprintf(path, sizeof(path), "%s/cgroup.procs", k->move_to);
		if (write_str(path, "0"))
			_exit(5);
	}
	r = ss_req(file, k->sock, 0, POOL, 1);
	sh->sent = ss_send(sh->dev, &r);
	for (;;) {
		atomic_store(&sh->done, seq);
		while ((cmd = atomic_load(&sh->cmd)) == CMD_NONE)
			usleep(1000);
		errno = 0;
		switch (cmd) {
		case CMD_EAT:
			mem = mmap(NULL, sh->eat, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (mem == MAP_FAILED)
				_exit(4);
			memset(mem, 0x5a, sh->eat);
			sh->ret = 0;
			break;
		case CMD_SEND:
			r = ss_req(file, k->sock, 0, MIB, 2);
			sh->ret = ss_send(sh->dev, &r);
			break;
		case CMD_EXIT:
			_exit(0);
		}
		sh->err = errno;
		seq++;
		atomic_store(&sh->cmd, CMD_NONE);
	}
}

static int alive(pid_t pid)
{
	return waitpid(pid, NULL, WNOHANG) == 0;
}

/* Run @c in the child; 0 if it died or took more than 30 s. */
static int command(struct kid *k, int c)
{
	int want = atomic_load(&k->sh->done) + 1;
	double end = now_s() + 30;

	atomic_store(&k->sh->cmd, c);
	while (atomic_load(&k->sh->done) != want) {
		if (!alive(k->pid) || now_s() > end)
			return 0;
		usleep(1000);
	}
	return 1;
}

static long long pooled(struct kid *k)
{
	return fdinfo_num(k->pid, k->sh->dev, "stablesend-mem-pooled");
}

/*
 * Make @k's cgroup, fork it in, read its SEND; returns what it pooled.
 * Pages the stack still holds (the CPU that sent them has not run its
 * receive processing since) stay out until it does: nobody waits for them.
 */
static long long start(struct kid *k, int file, void *buf)
{
	long long p = -1, last;
	double end;

	snprintf(k->cg, sizeof(k->cg), CG_ROOT "/stablesend-reclaim-%s-%d",
		 k->name, getpid());
	REQUIRE(mkdir(k->cg, 0755) == 0, "mkdir %s", k->cg);
	cg_write(k, "memory.swap.max", 0);
	k->sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	REQUIRE(k->sh != MAP_FAILED, "mmap");
	memset(k->sh, 0, 4096);	/* charged here, outside the cgroup */
	atomic_store(&k->sh->done, -1);
	tcp_pair(AF_INET, &k->sock, &k->peer);
	k->pid = fork();
	REQUIRE(k->pid >= 0, "fork");
	if (!k->pid)
		child(k, file);
	REQUIRE(read_full(k->peer, buf, POOL) == POOL, "%s: read the SEND", k->name);
	for (end = now_s() + 20; atomic_load(&k->sh->done) != 0; usleep(1000))
		REQUIRE(alive(k->pid) && now_s() < end, "%s: child setup", k->name);
	REQUIRE(k->sh->sent == POOL, "%s: SEND gave %ld", k->name, k->sh->sent);
	/* Until nothing came back for a second. */
	for (end = now_s() + 10; now_s() < end; ) {
		last = p;
		usleep(1000000);
		p = pooled(k);
		if (p == last || p == POOL)
			break;
	}
	printf("%s: pooled %lld of %d, memory.current %lld\n", k->name, p, POOL,
	       cg_read(k, "memory.current", NULL));
	REQUIRE(p >= POOL / 2, "%s: pooled %lld of %d", k->name, p, POOL);
	return p;
}

static void finish(struct kid *k)
{
	int st = -1, i;

	if (alive(k->pid)) {
		atomic_store(&k->sh->cmd, CMD_EXIT);
		CHECK(waitpid(k->pid, &st, 0) == k->pid && WIFEXITED(st) &&
		      !WEXITSTATUS(st), "%s: child status %#x", k->name, st);
	}
	close(k->sock);
	close(k->peer);
	for (i = 0; i < 100 && rmdir(k->cg) && errno == EBUSY; i++)
		usleep(20000);
}

int main(void)
{
	struct kid a = { .name = "A" }, b = { .name = "B" }, c = { .name = "C" };
	long long pa, pb, pc, p0, cur, ooms, bcur;
	char ctl[256] = "", *buf;
	int file, ok;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getenv("STABLESEND_UNPRIV") || geteuid()) {
		printf("needs root to create a cgroup\n");
		return SKIP;
	}
	if (read_text(CG_ROOT "/cgroup.controllers", ctl, sizeof(ctl)) < 0 ||
	    !strstr(ctl, "memory")) {
		printf("no cgroup2 memory controller at " CG_ROOT "\n");
		return SKIP;
	}
	REQUIRE(write_str(CG_ROOT "/cgroup.subtree_control", "+memory") == 0,
		"+memory in " CG_ROOT "/cgroup.subtree_control");
	REQUIRE(ss_drained(10), "module not idle at the start");
	REQUIRE(ss_stat_wait("pool_bytes", 0, 10) == 0, "pool_bytes not 0 at the start");
	buf = malloc(POOL);
	REQUIRE(buf, "malloc");
	file = temp_file(POOL, 'r');	/* its page cache charged out here */

	p0 = start(&a, file, buf);
	pb = start(&b, file, buf);

	/*
	 * Fits only if A's reclaim takes half the pool (and what came back
	 * to it meanwhile).
	 */
	a.sh->eat = HEADROOM + p0 / 2;
	cur = cg_read(&a, "memory.current", NULL);
	REQUIRE(cg_write(&a, "memory.max", cur + HEADROOM) == 0, "memory.max");
	ok = command(&a, CMD_EAT);
	ooms = cg_read(&a, "memory.events", "oom_kill");
	printf("A: memory.max %lld, touched %ld KiB: %s, oom_kill %lld\n",
	       cur + HEADROOM, a.sh->eat >> 10, ok ? "lived" : "died", ooms);
	CHECK(ok && ooms == 0,
	      "A was OOM-killed (oom_kill %lld) with its idle pool in the cgroup",
	      ooms);
	if (ok) {
		pa = pooled(&a);
		printf("A: pooled %lld after, memory.current %lld; B: pooled %lld, was %lld\n",
		       pa, cg_read(&a, "memory.current", NULL), pooled(&b), pb);
		CHECK(pa <= p0 - p0 / 2 + (POOL - p0) + STOCK,
		      "A's pool kept %lld bytes while its cgroup needed them", pa);
		CHECK(command(&a, CMD_SEND) && a.sh->ret == MIB,
		      "A's SEND afterwards: %ld (%s)", a.sh->ret, strerror(a.sh->err));
		CHECK(read_full(a.peer, buf, MIB) == MIB, "read A's second SEND");
	}
	CHECK(pooled(&b) >= pb, "B's pool went from %lld to %lld: another cgroup's reclaim took it",
	      pb, pooled(&b));

	bcur = cg_read(&b, "memory.current", NULL);
	c.move_to = b.cg;
	pc = start(&c, file, buf);
	printf("C (in B now): memory.current %lld; B's grew by %lld\n",
	       cg_read(&c, "memory.current", NULL),
	       cg_read(&b, "memory.current", NULL) - bcur);
	CHECK(cg_read(&c, "memory.current", NULL) >= pc,
	      "C's pool of %lld is not charged to C, where the device was opened",
	      pc);
	CHECK(cg_read(&b, "memory.current", NULL) - bcur < pc / 2,
	      "B's memory.current grew by %lld with C's pool of %lld",
	      cg_read(&b, "memory.current", NULL) - bcur, pc);

	finish(&a);
	finish(&c);	/* out of B, so that B can go */
	finish(&b);
	CHECK(ss_drained(10), "pages in flight at the end");
	CHECK(ss_stat_wait("pool_bytes", 0, 10) == 0, "pool_bytes not back to 0");
	free(buf);
	return test_result();
}
