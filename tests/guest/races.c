// SPDX-License-Identifier: GPL-2.0
/*
 * Races: first two threads submit and cancel the same user_data on one
 * open; then NPROC processes, each with threads that at the same time submit
 * (SUBMIT batches and synchronous SEND), cancel recent requests, reap
 * records (poll + read), close the device fd under the others (dup2 of a
 * fresh open over it), shut down, reset, close and dup2 over the sockets,
 * and truncate the shared file; one more process keeps starting children
 * that submit to a stalled socket and are killed with SIGKILL.  Runs for a
 * fixed time; every wait is bounded.
 *
 * Checks: every record read belongs to a request submitted on that open,
 * no request gets two SENT or two RELEASED records, a rejected request
 * gets none, results are bytes (at most the request's size) or a
 * documented -errno; on the open that is never closed during the run
 * every accepted request gets exactly one SENT record (and RELEASED when
 * asked) once the peers are gone, and as many -ECANCELED results as
 * CANCEL reported; at the end the module holds nothing.
 *
 * test-timeout: 300
 */
#include "stress.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#define NPROC		3
#define NSOCK		4
#define FSIZE		(4 << 20)
#define MAXREQ		(1 << 17)	/* per submitting thread */
#define T_ASYNC		0
#define T_SYNC		1

/* accepted: 0 rejected (no record allowed), 1 queued (records owed) */
struct reqst {
	uint8_t churn, async, want_rel, accepted;
	uint32_t total;
	int32_t ret;		/* SEND: bytes, or -errno */
	_Atomic uint8_t sent, rel;
};

static int file, sdev, cdev;		/* stable open; churned open (a slot) */
static _Atomic int snd[NSOCK];
static int rcv[NSOCK];
static pthread_mutex_t rcv_mu = PTHREAD_MUTEX_INITIALIZER;
static struct reqst *reqs[2];
static atomic_uint nreq[2];
static atomic_int stop;
static atomic_long stable_cancelled, stable_ecanceled, nrecords, ncancel, nchurn;
static atomic_long accepted_n, rejected_n;
static int me;

static const int peer_errs[] = { EPIPE, ECONNRESET, ECANCELED, ENOMEM, 0 };
static const int submit_errs[] = {
	EBADF, EINVAL, ENOTSOCK, EOPNOTSUPP, ENOTCONN, EPIPE, ENODATA, EAGAIN,
	ENOMEM, ENOBUFS, EINTR, ECONNRESET, 0
};
/* SEND also fails with ECANCELED when a CANCEL of its user_data wins. */
static const int send_errs[] = {
	EBADF, EINVAL, ENOTSOCK, EOPNOTSUPP, ENOTCONN, EPIPE, ENODATA, EAGAIN,
	ENOMEM, ENOBUFS, EINTR, ECONNRESET, ECANCELED, 0
};

static int in_set(int e, const int *set)
{
	for (; *set; set++)
		if (e == *set)
			return 1;
	return 0;
}

static void new_pair(int k, int *s, int *r)
{
	int type = (k + me) % 3;

	if (type == 2)
		unix_pair(s, r);
	else
		tcp_pair(type ? AF_INET6 : AF_INET, s, r);
	fcntl(*r, F_SETFL, O_NONBLOCK);
}

static int new_dev(void)
{
	int d = ss_dev();

	REQUIRE(ss_setup(d, -1, 4 << 20) == 0, "SETUP");
	fcntl(d, F_SETFL, O_NONBLOCK);
	return d;
}

static void rand_req(uint64_t *rs, struct stablesend_req *r, int t, uint32_t seq,
		     int churn, int async)
{
	static const char hdtr[512] = "header and trailer bytes";
	struct reqst *q = &reqs[t][seq];
	uint64_t len = rnd_size(rs, 512 << 10);

	*r = ss_req(file, atomic_load(&snd[rnd(rs) % NSOCK]), rnd(rs) % FSIZE, len,
		    (uint64_t)t << 32 | seq);
	if (rnd(rs) % 4 == 0) {
		r->head = r->tail = (uintptr_t)hdtr;
		r->head_len = rnd(rs) % sizeof(hdtr);
		r->tail_len = rnd(rs) % sizeof(hdtr);
	}
	if (rnd(rs) % 3 == 0)
		r->flags = STABLESEND_REQ_NOTIFY_RELEASE;
	q->churn = churn;
	q->async = async;
	q->want_rel = !!r->flags;
	q->total = r->head_len + r->len + r->tail_len;
}

static void *submit_async(void *arg)
{
	uint64_t rs = 0x1234567ULL + me * 7919;
	struct stablesend_req r[4];

	(void)arg;
	while (!atomic_load(&stop) && atomic_load(&nreq[T_ASYNC]) < MAXREQ - 8) {
		int n = 1 + rnd(&rs) % 4, churn = rnd(&rs) % 2, i, ret, err = 0;
		uint32_t base = atomic_load(&nreq[T_ASYNC]);

		for (i = 0; i < n; i++)
			rand_req(&rs, &r[i], T_ASYNC, base + i, churn, 1);
		atomic_store(&nreq[T_ASYNC], base + n);	/* before the call: records may come at once */
		ret = ss_submit(churn ? cdev : sdev, r, n);
		if (ret < 0) {
			err = errno;
			CHECK(in_set(err, submit_errs), "SUBMIT: unexpected errno");
			ret = 0;
		}
		CHECK(ret <= n, "SUBMIT of %d returned %d", n, ret);
		for (i = 0; i < ret; i++)
			reqs[T_ASYNC][base + i].accepted = 1;
		atomic_fetch_add(&accepted_n, ret);
		atomic_fetch_add(&rejected_n, n - ret);
		if (err == EAGAIN)
			usleep(1000);
	}
	return NULL;
}

static void *submit_sync(void *arg)
{
	uint64_t rs = 0x7654321ULL + me * 104729;
	struct stablesend_req r;

	(void)arg;
	while (!atomic_load(&stop) && atomic_load(&nreq[T_SYNC]) < MAXREQ - 1) {
		uint32_t seq = atomic_load(&nreq[T_SYNC]);
		int churn = rnd(&rs) % 2, stalled;
		long ret;

		rand_req(&rs, &r, T_SYNC, seq, churn, 0);
		atomic_store(&nreq[T_SYNC], seq + 1);
		ret = send_wd(churn ? cdev : sdev, &r, 2, &stalled);
		if (ret < 0) {
			CHECK(in_set(errno, send_errs), "SEND: unexpected errno");
			if (errno == EAGAIN)
				usleep(1000);
		} else {
			CHECK(ret > 0 && ret <= reqs[T_SYNC][seq].total,
			      "SEND of at most %u bytes returned %ld", reqs[T_SYNC][seq].total, ret);
		}
		/*
		 * A SEND that sent nothing is as if never made: whatever the
		 * errno (watchdog EINTR, CANCEL, a peer error), no RELEASED
		 * record may come.  One that sent bytes owes it when asked.
		 */
		reqs[T_SYNC][seq].ret = ret < 0 ? -errno : (int32_t)ret;
		reqs[T_SYNC][seq].accepted = ret > 0;
	}
	return NULL;
}

static void *canceller(void *arg)
{
	uint64_t rs = 0xabcdefULL + me;

	(void)arg;
	while (!atomic_load(&stop)) {
		uint32_t n = atomic_load(&nreq[T_ASYNC]);
		uint64_t ud = n ? n - 1 - rnd(&rs) % (n < 8 ? n : 8) : 0;
		int churn = rnd(&rs) % 2;
		int ret = ioctl(churn ? cdev : sdev, STABLESEND_IOC_CANCEL, &ud);

		if (ret < 0)
			CHECK(errno == ENOENT, "CANCEL: unexpected errno");
		else if (!churn)
			atomic_fetch_add(&stable_cancelled, ret);
		if (ret > 0)
			atomic_fetch_add(&ncancel, ret);
		usleep(rnd(&rs) % 3000);
	}
	return NULL;
}

static void on_cqe(const struct stablesend_cqe *c, int from_churn)
{
	uint32_t t = c->user_data >> 32, seq = (uint32_t)c->user_data;
	struct reqst *q;

	atomic_fetch_add(&nrecords, 1);
	if (t > 1 || seq >= atomic_load(&nreq[t])) {
		CHECK(0, "record for request %#llx, never submitted",
		      (unsigned long long)c->user_data);
		return;
	}
	q = &reqs[t][seq];
	CHECK(q->churn == from_churn, "record for request %#llx read from the %s open",
	      (unsigned long long)c->user_data, from_churn ? "churned" : "stable");
	if (c->flags & STABLESEND_CQE_SENT) {
		CHECK(q->async, "SENT record of synchronous request %u", seq);
		CHECK((c->res > 0 && c->res <= q->total) ||
		      (c->res < 0 && in_set(-c->res, peer_errs)),
		      "request %#llx: result %lld (size %u)",
		      (unsigned long long)c->user_data, (long long)c->res, q->total);
		CHECK(atomic_fetch_add(&q->sent, 1) == 0, "request %#llx: second SENT record",
		      (unsigned long long)c->user_data);
		if (!from_churn && c->res == -ECANCELED)
			atomic_fetch_add(&stable_ecanceled, 1);
	} else if (c->flags & STABLESEND_CQE_RELEASED) {
		CHECK(q->want_rel && !c->res, "request %#llx: RELEASED record not asked for",
		      (unsigned long long)c->user_data);
		CHECK(atomic_fetch_add(&q->rel, 1) == 0, "request %#llx: second RELEASED record",
		      (unsigned long long)c->user_data);
	} else {
		CHECK(0, "record with flags %#x", c->flags);
	}
}

/* Read what is there on both opens; waits at most @ms. */
static int reap_once(int ms)
{
	struct pollfd p[2] = { { .fd = sdev, .events = POLLIN },
			       { .fd = cdev, .events = POLLIN } };
	struct stablesend_cqe c[32];
	int i, got = 0;

	if (poll(p, 2, ms) <= 0)
		return 0;
	for (i = 0; i < 2; i++) {
		ssize_t r = read(i ? cdev : sdev, c, sizeof(c)), k;

		if (r < 0) {
			CHECK(errno == EAGAIN, "read of records");
			continue;
		}
		CHECK(r % sizeof(c[0]) == 0, "read returned %zd", r);
		for (k = 0; k < r / (ssize_t)sizeof(c[0]); k++)
			on_cqe(&c[k], i);
		got += r / sizeof(c[0]);
	}
	return got;
}

static void *reaper(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop))
		reap_once(50);
	return NULL;
}

static void *drainer(void *arg)
{
	static char buf[65536];
	int k;

	(void)arg;
	while (!atomic_load(&stop)) {
		pthread_mutex_lock(&rcv_mu);
		for (k = 0; k < NSOCK; k++)
			while (rcv[k] >= 0 && read(rcv[k], buf, sizeof(buf)) > 0)
				;
		pthread_mutex_unlock(&rcv_mu);
		usleep(500);
	}
	return NULL;
}

static void reset_close(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

static void *churner(void *arg)
{
	uint64_t rs = 0x55aa55aaULL + me * 31;

	(void)arg;
	while (!atomic_load(&stop)) {
		int k = rnd(&rs) % NSOCK, s, r, d;

		atomic_fetch_add(&nchurn, 1);
		switch (rnd(&rs) % 10) {
		case 0:		/* close the device fd under the others */
			d = new_dev();
			REQUIRE(dup2(d, cdev) == cdev, "dup2 device");
			close(d);
			break;
		case 1:
			shutdown(atomic_load(&snd[k]), SHUT_WR);
			break;
		case 2:
			shutdown(atomic_load(&snd[k]), SHUT_RDWR);
			break;
		case 3:		/* the peer stops reading */
			pthread_mutex_lock(&rcv_mu);
			shutdown(rcv[k], SHUT_RD);
			pthread_mutex_unlock(&rcv_mu);
			break;
		case 4:		/* the peer goes away: reset, or plain close */
		case 5:
			pthread_mutex_lock(&rcv_mu);
			if (rcv[k] >= 0 && rnd(&rs) % 2)
				reset_close(rcv[k]);
			else if (rcv[k] >= 0)
				close(rcv[k]);
			rcv[k] = -1;
			pthread_mutex_unlock(&rcv_mu);
			break;
		case 6:		/* a fresh pair over the old socket fd */
		case 7:
			new_pair(k, &s, &r);
			REQUIRE(dup2(s, atomic_load(&snd[k])) >= 0, "dup2 socket");
			close(s);
			goto new_peer;
		case 8:		/* close the socket fd; a new one gets some number */
			new_pair(k, &s, &r);
			close(atomic_exchange(&snd[k], s));
new_peer:
			pthread_mutex_lock(&rcv_mu);
			if (rcv[k] >= 0)
				close(rcv[k]);
			rcv[k] = r;
			pthread_mutex_unlock(&rcv_mu);
			break;
		case 9:		/* truncate (to zeros when it grows back) */
			REQUIRE(ftruncate(file, rnd(&rs) % 2 ? 0 : rnd(&rs) % FSIZE) == 0 &&
				ftruncate(file, FSIZE) == 0, "ftruncate");
			break;
		}
		usleep(2000 + rnd(&rs) % 8000);
	}
	return NULL;
}

static int worker(double budget)
{
	void *(*fn[])(void *) = { submit_async, submit_sync, canceller, reaper,
				  drainer, churner };
	pthread_t th[6];
	struct stablesend_counters c;
	double end;
	long owed = 0, missing = 0;
	int k, t;
	uint32_t i;

	alarm_setup();
	for (t = 0; t < 2; t++) {
		reqs[t] = calloc(MAXREQ, sizeof(*reqs[t]));
		REQUIRE(reqs[t], "calloc");
	}
	sdev = new_dev();
	cdev = new_dev();
	for (k = 0; k < NSOCK; k++) {
		int s;

		new_pair(k, &s, &rcv[k]);
		atomic_store(&snd[k], s);
	}
	for (t = 0; t < 6; t++)
		pthread_create(&th[t], NULL, fn[t], NULL);
	usleep(budget * 1e6);
	atomic_store(&stop, 1);
	for (t = 0; t < 6; t++)
		pthread_join(th[t], NULL);

	/* Peers gone: what is still queued on the stable open fails now. */
	for (k = 0; k < NSOCK; k++) {
		if (rcv[k] >= 0)
			reset_close(rcv[k]);
		close(atomic_load(&snd[k]));
	}
	end = now_s() + 30;
	do {
		owed = 0;
		for (t = 0; t < 2; t++)
			for (i = 0; i < atomic_load(&nreq[t]); i++) {
				struct reqst *q = &reqs[t][i];

				if (!q->churn && q->accepted == 1 &&
				    ((q->async && !q->sent) || (q->want_rel && !q->rel)))
					owed++;
			}
		if (owed)
			reap_once(100);
	} while (owed && now_s() < end);
	CHECK(!owed, "stable open: %ld records still owed after 30 s", owed);
	for (t = 0, k = 0; t < 2 && owed; t++)
		for (i = 0; i < atomic_load(&nreq[t]) && k < 5; i++) {
			struct reqst *q = &reqs[t][i];

			if (q->churn || q->accepted != 1 ||
			    !((q->async && !q->sent) || (q->want_rel && !q->rel)))
				continue;
			k++;
			fprintf(stderr, "  owed: %s request %u of %u bytes, SEND %d, records: SENT %d RELEASED %d (asked %d)\n",
				q->async ? "SUBMIT" : "SEND", i, q->total, q->ret,
				q->sent, q->rel, q->want_rel);
		}
	for (t = 0; t < 2; t++)
		for (i = 0; i < atomic_load(&nreq[t]); i++) {
			struct reqst *q = &reqs[t][i];

			if (!q->accepted && (q->sent || q->rel))
				missing++;
		}
	CHECK(!missing, "%ld rejected requests got records", missing);
	CHECK(stable_ecanceled == stable_cancelled,
	      "stable open: CANCEL reported %ld, %ld -ECANCELED records",
	      (long)stable_cancelled, (long)stable_ecanceled);
	ss_counters(sdev, &c);
	/* cancelled also counts synchronous requests a signal took back */
	CHECK(c.completed == c.submitted && !c.cqes_pending && c.cancelled >= (uint64_t)stable_cancelled,
	      "stable open: submitted %llu completed %llu cancelled %llu pending %llu",
	      (unsigned long long)c.submitted, (unsigned long long)c.completed,
	      (unsigned long long)c.cancelled, (unsigned long long)c.cqes_pending);
	printf("process %d: %u async + %u sync requests, %ld accepted, %ld rejected, "
	       "%ld cancelled, %ld records, %ld churn actions; stable open %llu submitted\n",
	       me, atomic_load(&nreq[T_ASYNC]), atomic_load(&nreq[T_SYNC]),
	       (long)accepted_n, (long)rejected_n, (long)ncancel, (long)nrecords,
	       (long)nchurn, (unsigned long long)c.submitted);
	close(sdev);
	close(cdev);
	return failures ? 1 : 0;
}

/*
 * The narrowest race first: one thread submits one-byte requests that all
 * carry the same user_data while another cancels that user_data, so a
 * CANCEL keeps landing while a SUBMIT is between queueing the request on
 * the open and queueing it on its socket.
 */
static atomic_long hammer_submitted, hammer_cancelled;

static void *hammer_cancel(void *arg)
{
	uint64_t ud = 7;

	while (!atomic_load(&stop)) {
		int ret = ioctl(sdev, STABLESEND_IOC_CANCEL, &ud);

		CHECK(ret > 0 || errno == ENOENT, "CANCEL during SUBMIT");
		if (ret > 0)
			atomic_fetch_add(&hammer_cancelled, ret);
	}
	return NULL;
}

static void hammer(double secs)
{
	struct stablesend_req r;
	struct stablesend_cqe c[64];
	struct stablesend_counters cnt;
	pthread_t th;
	double end = now_s() + secs;
	long sent = 0, cancelled = 0, got = 0;
	char buf[4096];
	int s, q, ret;

	sdev = new_dev();
	unix_pair(&s, &q);
	fcntl(q, F_SETFL, O_NONBLOCK);
	r = ss_req(file, s, 0, 1, 7);
	pthread_create(&th, NULL, hammer_cancel, NULL);
	while (now_s() < end) {
		ret = ss_submit(sdev, &r, 1);
		CHECK(ret == 1 || errno == EAGAIN, "SUBMIT during CANCEL");
		if (ret == 1)
			atomic_fetch_add(&hammer_submitted, 1);
		while (read(q, buf, sizeof(buf)) > 0)
			;
		while ((ret = read(sdev, c, sizeof(c))) > 0)
			for (int i = 0; i < ret / (int)sizeof(c[0]); i++, got++) {
				cancelled += c[i].res == -ECANCELED;
				sent += c[i].res == 1;
			}
	}
	atomic_store(&stop, 1);
	pthread_join(th, NULL);
	atomic_store(&stop, 0);
	while (got < hammer_submitted && (ret = ss_reap(sdev, c, 1, 5000)) == 1) {
		cancelled += c[0].res == -ECANCELED;
		sent += c[0].res == 1;
		got++;
	}
	ss_counters(sdev, &cnt);
	CHECK(got == hammer_submitted && sent + cancelled == got &&
	      cancelled == hammer_cancelled && cnt.cancelled == (uint64_t)cancelled,
	      "submit vs cancel: %ld submitted, %ld records (%ld sent, %ld cancelled), "
	      "CANCEL reported %ld", (long)hammer_submitted, got, sent, cancelled,
	      (long)hammer_cancelled);
	printf("submit vs cancel of the same user_data: %ld requests, %ld cancelled\n",
	       (long)hammer_submitted, cancelled);
	close(s);
	close(q);
	close(sdev);
}

/* Children that submit to a stalled socket and die by SIGKILL. */
static int killer(double budget)
{
	double end = now_s() + budget;
	int kills = 0;

	while (now_s() < end) {
		pid_t p = fork();

		REQUIRE(p >= 0, "fork");
		if (!p) {
			struct stablesend_req r[8];
			int d = ss_dev(), s, q, i;

			unix_pair(&s, &q);
			set_rcvbuf_small(q);
			for (i = 0; i < 8; i++)
				r[i] = ss_req(file, s, i << 16, 256 << 10, i);
			for (;;)
				ss_submit(d, r, 8);
		}
		usleep(1000 + (kills % 20) * 1000);
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
		kills++;
	}
	printf("killer: %d processes killed with requests in flight\n", kills);
	return 0;
}

int main(void)
{
	double budget = budget_s(30), t0 = now_s();
	pid_t pid[NPROC + 1];
	long long ctx0;
	int i, st;

	ctx0 = stress_begin();
	file = pattern_file(FSIZE, 3);
	hammer(budget / 10);
	for (i = 0; i <= NPROC; i++) {
		pid[i] = fork();
		REQUIRE(pid[i] >= 0, "fork");
		if (!pid[i]) {
			me = i;
			_exit(i < NPROC ? worker(budget) : killer(budget));
		}
	}
	/* Bounded: a process still running 120 s after the budget is hung. */
	for (i = 0; i <= NPROC; i++) {
		while (waitpid(pid[i], &st, WNOHANG) == 0) {
			if (now_s() > t0 + budget + 120) {
				CHECK(0, "process %d hung; killed", i);
				kill(pid[i], SIGKILL);
			}
			usleep(100000);
		}
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d: status %#x", i, st);
	}
	CHECK(module_idle(ctx0, 30), "the module still holds memory after the races");
	printf("races: %d processes for %.1f s\n", NPROC + 1, now_s() - t0);
	return test_result();
}
