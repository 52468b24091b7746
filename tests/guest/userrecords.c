// SPDX-License-Identifier: GPL-2.0
/*
 * Completion records are bounded per user, not only per open (module
 * parameter user_records).  One-byte requests with RELEASED to a peer
 * that reads at once give their pages back at once, so user_limit never
 * holds them, while their two records each stay until read.  With
 * user_records lowered to 1000 by root:
 * - nobody's 4 opens, in turn, take exactly 1000 records together (250
 *   each, far under an open's 65,536: no per-open count explains it),
 *   then each of them gets ENOBUFS, for a request of two records and of
 *   one, also once all 1000 are queued unread; a SEND (no SENT record)
 *   still goes; fdinfo shows the user's 1000; nobody cannot change the
 *   parameter;
 * - meanwhile uid 65533 takes 800 records and reads all of them; root
 *   with CAP_SYS_RESOURCE goes beyond the bound (1500 on one open), root
 *   without it is held to 1000;
 * - at the bound no refused open polls POLLOUT (memory is free: without
 *   the records in poll() an event loop would spin on ENOBUFS), while an
 *   open refused nothing does (its SEND takes no record, and goes); a
 *   thread blocked in poll() for POLLOUT on one open is woken by 10
 *   records read on another, which let exactly 5 requests in there; an
 *   edge-triggered epoll armed before that open's refusal fires when 2
 *   records are read on another; with one record free the open whose
 *   RELEASED request (two) was refused polls no POLLOUT while one whose
 *   last refusal was for one record does, and the second record gives
 *   the first its POLLOUT too;
 * - once nobody's opens are closed its count is 0 (seen from a fifth open
 *   that stays, so that the user's count is not simply made anew), and
 *   one fresh open takes the whole 1000 again;
 * - writing 1 is refused (a RELEASED request takes two records); writing
 *   0 brings the default (262144) back; the value at the start is
 *   restored, also when the test fails.
 * (Before the bound, each open of one user could hold 65,536 records,
 * 4 MiB of kernel memory, however many opens it made.)
 */
#include "common.h"
#include "users.h"
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/capability.h>

#define PARAM		"/sys/module/stablesend/parameters/user_records"
#define BOUND		1000
#define DEFAULT_BOUND	262144
#define NOPENS		4
#define NOBODY		65534

static long long was = -1;	/* user_records at the start */
static pid_t main_pid;
#define OTHER		65533

static long long param(void)
{
	char buf[64];

	return read_str(PARAM, buf, sizeof(buf)) ? -1 : strtoll(buf, NULL, 10);
}

/* The peer: reads everything at once, until EOF. */
static void *reader(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[4096];

	while (read(fd, buf, sizeof(buf)) > 0)
		;
	return NULL;
}

/* A socket whose peer a thread of ours drains. */
static int drained_socket(void)
{
	pthread_t t;
	int a, b;

	unix_pair(&a, &b);
	REQUIRE(!pthread_create(&t, NULL, reader, (void *)(intptr_t)b),
		"reader thread");
	pthread_detach(t);
	return a;
}

/*
 * One-byte RELEASED requests (two records each) on the opens @dev[0..@n)
 * in turn, until one is refused or @max records are taken.  Returns the
 * records taken; the refusal's errno in *@err, 0 if none was refused.
 */
static int fill(const int *dev, int n, int sock, int file, int max, int *err)
{
	struct stablesend_req r = ss_req(file, sock, 0, 1, 0);
	int taken = 0;

	r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
	*err = 0;
	while (taken + 2 <= max) {
		r.user_data = taken;
		if (ss_submit(dev[(taken / 2) % n], &r, 1) != 1) {
			*err = errno;
			break;
		}
		taken += 2;
	}
	return taken;
}

/* Records queued unread on the opens @dev[0..@n). */
static long long pending(const int *dev, int n)
{
	struct stablesend_counters c;
	long long sum = 0;

	for (int i = 0; i < n; i++) {
		ss_counters(dev[i], &c);
		sum += c.cqes_pending;
	}
	return sum;
}

/* Wait up to 10 s for @want records queued on @dev[0..@n); the last count. */
static long long pending_wait(const int *dev, int n, long long want)
{
	long long got = pending(dev, n);

	for (int i = 0; i < 1000 && got != want; i++) {
		usleep(10000);
		got = pending(dev, n);
	}
	return got;
}

/* The user's records in the fdinfo of @dev, waiting up to 5 s for @want. */
static long long user_records_wait(int dev, long long want)
{
	long long got = fdinfo_num(getpid(), dev, "stablesend-user-records");

	for (int i = 0; i < 500 && got != want; i++) {
		usleep(10000);
		got = fdinfo_num(getpid(), dev, "stablesend-user-records");
	}
	return got;
}

/* Every open of @dev[0..@n) refuses a request of 2 records and one of 1. */
static void all_refuse(const int *dev, int n, int sock, int file,
		       const char *when)
{
	struct stablesend_req r = ss_req(file, sock, 0, 1, 7);
	int ret;

	for (int i = 0; i < n; i++) {
		r.flags = STABLESEND_REQ_NOTIFY_RELEASE;
		ret = ss_submit(dev[i], &r, 1);
		CHECK(ret == -1 && errno == ENOBUFS,
		      "open %d, %s: a RELEASED request %s, want ENOBUFS", i,
		      when, ret == 1 ? "accepted" : strerror(errno));
		r.flags = 0;
		ret = ss_submit(dev[i], &r, 1);
		CHECK(ret == -1 && errno == ENOBUFS,
		      "open %d, %s: a one-record request %s, want ENOBUFS", i,
		      when, ret == 1 ? "accepted" : strerror(errno));
	}
}

/* No open of @dev[0..@n) polls POLLOUT. */
static void none_writable(const int *dev, int n, const char *when)
{
	for (int i = 0; i < n; i++)
		CHECK(!(poll_now(dev[i], POLLOUT) & POLLOUT),
		      "open %d, %s: POLLOUT, but a request gets ENOBUFS", i, when);
}

/* Child @pid must exit 0 within 60 s; one that does not is killed. */
static void child_ok(pid_t pid, const char *what)
{
	int st = 0;

	for (int i = 0; i < 600; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			break;
		if (i == 599) {
			kill(pid, SIGKILL);
			REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
		}
		usleep(100000);
	}
	CHECK(WIFEXITED(st) && !WEXITSTATUS(st), "%s: %s %d", what,
	      WIFSIGNALED(st) ? "killed by signal" : "exit status",
	      WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

/*
 * As nobody: fill the bound over NOPENS opens, tell the parent (@done),
 * wait for its word (@go), then read some, close everything, start over.
 */
static void nobody_opens(int file, int done, int go)
{
	struct stablesend_cqe cqe[10];
	int dev[NOPENS], sock, taken, err, n, keep;
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLET };
	struct poller p;
	struct stablesend_req r;
	double t0, w;
	int ep;
	char c;

	become(NOBODY);
	CHECK(write_str(PARAM, "5") && param() == BOUND,
	      "nobody wrote user_records: now %lld", param());
	sock = drained_socket();
	for (int i = 0; i < NOPENS; i++)
		dev[i] = ss_dev();

	taken = fill(dev, NOPENS, sock, file, 4 * BOUND, &err);
	printf("nobody, %d opens: %d records taken (%d each), then %s\n",
	       NOPENS, taken, taken / NOPENS, err ? strerror(err) : "none refused");
	CHECK(taken == BOUND && err == ENOBUFS,
	      "%d opens of nobody took %d records under user_records %d (then %s)",
	      NOPENS, taken, BOUND, err ? strerror(err) : "none refused");
	CHECK(fdinfo_num(getpid(), dev[0], "stablesend-user-records") == taken,
	      "fdinfo: the user's records %lld, %d taken",
	      fdinfo_num(getpid(), dev[0], "stablesend-user-records"), taken);
	CHECK(fdinfo_num(getpid(), dev[3], "stablesend-user-records-limit") == BOUND,
	      "fdinfo: the user's records limit %lld",
	      fdinfo_num(getpid(), dev[3], "stablesend-user-records-limit"));
	all_refuse(dev, NOPENS, sock, file, "records owed");
	/* Every RELEASED comes: 1000 records queued, none read. */
	CHECK(pending_wait(dev, NOPENS, taken) == taken,
	      "records queued on nobody's opens: %lld of %d",
	      pending(dev, NOPENS), taken);
	all_refuse(dev, NOPENS, sock, file, "records unread");
	none_writable(dev, NOPENS, "records unread");
	/* SEND queues no SENT record: not held by the bound. */
	r = ss_req(file, sock, 0, 1, 8);
	CHECK(ss_send(dev[2], &r) == 1, "SEND at the user's bound: %s",
	      strerror(errno));
	if (write(done, "f", 1) != 1 || read(go, &c, 1) != 1)
		_exit(94);

	/* 10 records read on one open wake a poller of another. */
	poller_start(&p, dev[2]);
	t0 = now_s();
	CHECK(ss_reap(dev[1], cqe, 10, 1000) == 10, "read 10 records");
	w = poller_woken(&p, t0);
	printf("nobody: a poller of one open woken %.3f s after 10 records were read on another\n",
	       w);
	CHECK(w >= 0 && w < 1,
	      "a poller of open 2: revents %#x %.2f s after 10 records read on open 1",
	      p.revents, p.woke - t0);
	/*
	 * They make room for 5 requests there.  An edge-triggered epoll armed
	 * before, while there was room (the wake-up took the open off its
	 * user's list), fires again only because the refusal of the sixth
	 * put the open back on it.
	 */
	ep = epoll_create1(EPOLL_CLOEXEC);
	REQUIRE(ep >= 0 && !epoll_ctl(ep, EPOLL_CTL_ADD, dev[2], &ev), "epoll");
	CHECK(epoll_wait(ep, &ev, 1, 0) == 1 && ev.events == EPOLLOUT,
	      "edge-triggered epoll armed with room: no EPOLLOUT");
	n = fill(&dev[2], 1, sock, file, 4 * BOUND, &err) / 2;
	printf("nobody: 10 records read on one open, %d requests taken on another, then %s\n",
	       n, err ? strerror(err) : "none refused");
	CHECK(n == 5 && err == ENOBUFS,
	      "10 records read on open 1: open 2 took %d requests of 2 records, then %s",
	      n, err ? strerror(err) : "none refused");
	CHECK(epoll_wait(ep, &ev, 1, 0) == 0,
	      "edge-triggered epoll: an event at the bound (%#x)", ev.events);
	t0 = now_s();
	CHECK(ss_reap(dev[1], cqe, 2, 1000) == 2, "read 2 records");
	n = epoll_wait(ep, &ev, 1, 1000);
	printf("nobody: an edge-triggered epoll of open 2 fired %.3f s after 2 records were read on open 1 (%d, %#x)\n",
	       now_s() - t0, n, n == 1 ? ev.events : 0);
	CHECK(n == 1 && ev.events == EPOLLOUT,
	      "edge-triggered epoll after ENOBUFS: nothing within 1 s of 2 records read on another open");
	close(ep);
	CHECK(fill(&dev[2], 1, sock, file, 4 * BOUND, &err) == 2 &&
	      err == ENOBUFS, "open 2 with two records free: %s",
	      strerror(err));
	none_writable(dev, NOPENS, "at the bound again");
	/* An open refused nothing has room: SEND takes no record. */
	keep = ss_dev();
	CHECK(poll_now(keep, POLLOUT) == POLLOUT,
	      "a fresh open polls no POLLOUT at the user's records bound");
	r = ss_req(file, sock, 0, 1, 9);
	CHECK(ss_send(keep, &r) == 1, "SEND on a fresh open at the bound: %s",
	      strerror(errno));
	close(keep);
	/* One free: open 2 was refused two, open 3 one (all_refuse()). */
	CHECK(ss_reap(dev[1], cqe, 1, 1000) == 1, "read 1 record");
	CHECK(!(poll_now(dev[2], POLLOUT) & POLLOUT),
	      "open 2 polls POLLOUT with one record free, refused two");
	CHECK(poll_now(dev[3], POLLOUT) == POLLOUT,
	      "open 3 polls no POLLOUT with one record free, refused one");
	CHECK(ss_reap(dev[1], cqe, 1, 1000) == 1, "read 1 more record");
	CHECK(poll_now(dev[2], POLLOUT) == POLLOUT,
	      "open 2 polls no POLLOUT with two records free");
	CHECK(fill(&dev[2], 1, sock, file, 2, &err) == 2 && !err,
	      "open 2 with two records free: %s", strerror(err));
	CHECK(pending_wait(dev, NOPENS, BOUND) == BOUND,
	      "records queued on nobody's opens: %lld of %d",
	      pending(dev, NOPENS), BOUND);

	/*
	 * All closed: nothing counted (seen from an open made before, with
	 * no records, which keeps the user's count alive), and one open
	 * takes the whole bound.
	 */
	keep = ss_dev();
	for (int i = 0; i < NOPENS; i++)
		close(dev[i]);
	CHECK(user_records_wait(keep, 0) == 0,
	      "fdinfo: the user's records %lld with its other opens closed",
	      fdinfo_num(getpid(), keep, "stablesend-user-records"));
	dev[0] = ss_dev();
	close(keep);
	CHECK(user_records_wait(dev[0], 0) == 0,
	      "fdinfo: the user's records %lld with its opens closed",
	      fdinfo_num(getpid(), dev[0], "stablesend-user-records"));
	taken = fill(dev, 1, sock, file, 4 * BOUND, &err);
	printf("nobody, its opens closed: one open takes %d records, then %s\n",
	       taken, err ? strerror(err) : "none refused");
	CHECK(taken == BOUND && err == ENOBUFS,
	      "after close, a fresh open took %d records (then %s), want %d",
	      taken, err ? strerror(err) : "none refused", BOUND);
	close(dev[0]);
	close(sock);
	_exit(test_result());
}

/* As @uid: @want records on one open (CAP_SYS_RESOURCE dropped if @drop). */
static pid_t other(int file, uid_t uid, int drop, int want)
{
	pid_t pid = fork();

	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		struct stablesend_cqe *cqe = calloc(want, sizeof(*cqe));
		int dev, sock, taken, err, sent = 0, released = 0, got;

		REQUIRE(cqe, "calloc");
		if (uid)
			become(uid);
		if (drop && drop_sys_resource())
			_exit(95);
		sock = drained_socket();
		dev = ss_dev();
		taken = fill(&dev, 1, sock, file, want, &err);
		printf("uid %d%s: %d records taken, then %s\n", (int)uid,
		       drop ? " without CAP_SYS_RESOURCE" :
		       uid ? "" : " with CAP_SYS_RESOURCE",
		       taken, err ? strerror(err) : "none refused");
		if (drop) {
			CHECK(taken == BOUND && err == ENOBUFS,
			      "uid %d without CAP_SYS_RESOURCE took %d records (then %s), want %d",
			      (int)uid, taken, err ? strerror(err) : "none refused",
			      BOUND);
			_exit(test_result());
		}
		CHECK(taken == want && !err, "uid %d took %d of %d records: %s",
		      (int)uid, taken, want, strerror(err));
		got = ss_reap(dev, cqe, taken, 10000);
		for (int i = 0; i < got; i++) {
			sent += cqe[i].flags & STABLESEND_CQE_SENT && cqe[i].res == 1;
			released += !!(cqe[i].flags & STABLESEND_CQE_RELEASED);
		}
		CHECK(got == taken && sent == taken / 2 && released == taken / 2,
		      "uid %d read %d records (%d SENT of 1 byte, %d RELEASED) of %d",
		      (int)uid, got, sent, released, taken);
		_exit(test_result());
	}
	return pid;
}

/* However the test ends, user_records goes back to what it was. */
static void restore(void)
{
	char val[32];

	if (was > 0 && getpid() == main_pid && param() != was) {
		snprintf(val, sizeof(val), "%lld", was);
		write_str(PARAM, val);
	}
}

int main(void)
{
	long long now;
	int file = temp_file(4096, 'r'), done[2], go[2];
	char val[32], c;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	was = param();
	main_pid = getpid();
	atexit(restore);
	printf("user_records %lld at the start\n", was);
	REQUIRE(was > 0, "user_records missing or not positive");
	REQUIRE(!pipe(done) && !pipe(go), "pipes");
	snprintf(val, sizeof(val), "%d", BOUND);
	REQUIRE(!write_str(PARAM, val), "set user_records to %d", BOUND);

	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(done[0]);
		close(go[1]);
		nobody_opens(file, done[1], go[0]);
	}
	close(done[1]);
	close(go[0]);
	if (read(done[0], &c, 1) == 1) {
		/* nobody holds its 1000: other users go on. */
		child_ok(other(file, OTHER, 0, 800), "uid 65533 beside nobody");
		child_ok(other(file, 0, 0, 1500), "root with CAP_SYS_RESOURCE");
		child_ok(other(file, 0, 1, 4 * BOUND), "root without CAP_SYS_RESOURCE");
		CHECK(write(go[1], "g", 1) == 1, "tell nobody");
	} else {
		CHECK(0, "nobody did not fill its records");
	}
	child_ok(pid, "nobody's opens under user_records");
	close(done[0]);
	close(go[1]);

	/* 1 would refuse every RELEASED request (two records) for good. */
	CHECK(write_str(PARAM, "1") && param() == BOUND,
	      "user_records 1 accepted (now %lld)", param());
	/* Writing 0 brings the default back; the value at the start is restored. */
	REQUIRE(!write_str(PARAM, "0"), "set user_records to 0");
	now = param();
	CHECK(now == DEFAULT_BOUND, "user_records after writing 0: %lld, want %d",
	      now, DEFAULT_BOUND);
	snprintf(val, sizeof(val), "%lld", was);
	REQUIRE(!write_str(PARAM, val), "restore user_records");
	CHECK(param() == was, "user_records %lld, at the start %lld", param(), was);
	CHECK(ss_drained(10), "module holds nothing at the end");
	close(file);
	return test_result();
}
