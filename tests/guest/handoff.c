// SPDX-License-Identifier: GPL-2.0
/*
 * What happens to requests whose submitter goes away (uapi: SUBMIT):
 * - the submitting thread exits: another thread of its process sends the
 *   rest, the receiver sees the same process (SCM_CREDENTIALS pid), every
 *   byte arrives and SENT reports them all;
 * - the submitting process execs: the request goes on in the new program,
 *   sent with the credentials of the submission (the program switched to
 *   nobody before exec: the receiver still sees uid 0);
 * - the whole process exits while another process holds the device fd:
 *   the request ends where it is: SENT with exactly the bytes the receiver
 *   got (or -ECANCELED when none), never more.
 * - a SEND of another thread waits behind such a request: it sends it, then
 *   its own, once the peer reads.
 * Each request is larger than the socket holds, so its tail is sent after
 * the submitter has gone.
 */
#include "common.h"
#include <grp.h>
#include <pthread.h>
#include <sys/wait.h>

#define LEN	(1 << 20)

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 7 + 3);
}

/*
 * Read until @want bytes (or EOF); checks content and that every message
 * carries @pid and @uid.  Returns the bytes read.
 */
static size_t receive(int s, size_t want, pid_t pid, uid_t uid, const char *what)
{
	unsigned char *buf = malloc(want + 1);
	size_t got = 0;
	int bad = 0, msgs = 0;

	REQUIRE(buf, "malloc");
	while (got < want) {
		union {
			char b[CMSG_SPACE(sizeof(struct ucred))];
			struct cmsghdr align;
		} cb;
		struct iovec iov = { buf + got, want + 1 - got };
		struct msghdr m = {
			.msg_iov = &iov, .msg_iovlen = 1,
			.msg_control = cb.b, .msg_controllen = sizeof(cb.b),
		};
		struct pollfd p = { .fd = s, .events = POLLIN };
		struct cmsghdr *cm;
		struct ucred *uc = NULL;
		ssize_t n;

		if (poll(&p, 1, 10000) != 1)
			break;
		n = recvmsg(s, &m, 0);
		if (n <= 0)
			break;
		for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
			if (cm->cmsg_level == SOL_SOCKET &&
			    cm->cmsg_type == SCM_CREDENTIALS)
				uc = (struct ucred *)CMSG_DATA(cm);
		if (!uc || uc->pid != pid || uc->uid != uid) {
			if (!bad++)
				fprintf(stderr, "%s: message %d: pid %d uid %d\n",
					what, msgs, uc ? uc->pid : -1,
					uc ? (int)uc->uid : -1);
		}
		CHECK(pattern_mismatch(buf + got, n, got, pat) == (size_t)n,
		      "%s: wrong bytes at %zu", what, got);
		got += n;
		msgs++;
	}
	CHECK(!bad, "%s: %d of %d messages without pid %d uid %d", what, bad,
	      msgs, pid, uid);
	printf("%s: %zu bytes in %d messages, %d not from pid %d uid %d\n",
	       what, got, msgs, bad, pid, uid);
	free(buf);
	return got;
}

static int passcred_pair(int *snd, int *rcv)
{
	int one = 1, v = 65536;

	unix_pair(snd, rcv);
	REQUIRE(setsockopt(*rcv, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) == 0,
		"SO_PASSCRED");
	setsockopt(*snd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	return 0;
}

struct job {
	int dev;
	struct stablesend_req r;
	int ret;
};

static void *submit_and_exit(void *arg)
{
	struct job *j = arg;

	j->ret = ss_submit(j->dev, &j->r, 1);
	return NULL;	/* the thread exits with its request queued */
}

static void thread_exits(int file)
{
	struct stablesend_cqe cqe = { 0 };
	struct job j = { .dev = ss_dev() };
	pthread_t t;
	int snd, rcv;

	passcred_pair(&snd, &rcv);
	j.r = ss_req(file, snd, 0, LEN, 1);
	REQUIRE(pthread_create(&t, NULL, submit_and_exit, &j) == 0, "thread");
	pthread_join(t, NULL);
	CHECK(j.ret == 1, "SUBMIT from the thread: %d", j.ret);
	CHECK(ss_reap(j.dev, &cqe, 1, 0) == 0, "SENT before the receiver read");
	CHECK(receive(rcv, LEN, getpid(), getuid(), "thread exited") == LEN,
	      "thread exited: not every byte arrived");
	CHECK(ss_reap(j.dev, &cqe, 1, 10000) == 1 && cqe.res == LEN,
	      "thread exited: SENT %lld, want %d", (long long)cqe.res, LEN);
	close(snd);
	close(rcv);
	close(j.dev);
}

static void on_alarm(int sig)
{
	(void)sig;
}

/*
 * A thread's request heads a full socket and the thread exits; another
 * thread's SEND on that socket waits for it: it sends that request, then
 * its own, as soon as the peer (another process: no thread of ours but
 * the SEND caller is left to run task work) reads.
 */
static void send_behind_exited(int file)
{
	struct sigaction sa = { .sa_handler = on_alarm };	/* no SA_RESTART */
	struct stablesend_cqe cqe = { 0 };
	struct job j = { .dev = ss_dev() };
	struct stablesend_req r;
	int snd, rcv, status;
	pthread_t t;
	pid_t pid;
	double t0;
	long res;

	passcred_pair(&snd, &rcv);
	j.r = ss_req(file, snd, 0, LEN, 1);
	REQUIRE(pthread_create(&t, NULL, submit_and_exit, &j) == 0, "thread");
	pthread_join(t, NULL);
	CHECK(j.ret == 1, "SUBMIT from the thread: %d", j.ret);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		unsigned char *buf = malloc(LEN + 4096);
		size_t got;

		usleep(1000000);
		got = buf ? read_full(rcv, buf, LEN + 4096) : 0;
		_exit(!(got == LEN + 4096 && pattern_mismatch(buf, LEN, 0, pat) == LEN &&
			pattern_mismatch(buf + LEN, 4096, 0, pat) == 4096));
	}
	sigaction(SIGALRM, &sa, NULL);
	alarm(20);
	t0 = now_s();
	r = ss_req(file, snd, 0, 4096, 2);
	res = ss_send(j.dev, &r);
	alarm(0);
	CHECK(res == 4096, "SEND behind the exited thread's request: %ld (%s) after %.1f s",
	      res, res < 0 ? strerror(errno) : "", now_s() - t0);
	REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && !WEXITSTATUS(status),
	      "the peer did not get both requests' bytes, in order (%#x)", status);
	CHECK(ss_reap(j.dev, &cqe, 1, 10000) == 1 && cqe.res == LEN,
	      "the exited thread's request: SENT %lld, want %d", (long long)cqe.res, LEN);
	printf("SEND behind an exited thread's request: returned after %.1f s (the peer read after 1 s)\n",
	       now_s() - t0);
	close(snd);
	close(rcv);
	close(j.dev);
}

/* The exec'd program: wait for the parent (its requests go on meanwhile). */
static int exec_child(void)
{
	char c;

	return read(0, &c, 1) < 0;
}

static void execs(int file)
{
	int dev = ss_dev(), snd, rcv, go[2];
	struct stablesend_cqe cqe = { 0 };
	pid_t pid;
	int st;

	passcred_pair(&snd, &rcv);
	REQUIRE(pipe2(go, O_CLOEXEC) == 0, "pipe");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		struct stablesend_req r = ss_req(file, snd, 0, LEN, 2);
		int flags = fcntl(dev, F_GETFD);

		fcntl(dev, F_SETFD, flags & ~FD_CLOEXEC);
		if (ss_submit(dev, &r, 1) != 1)
			_exit(2);
		dup2(go[0], 0);
		/* Not allowed to become root again, and then a new program. */
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(3);
		execl("/proc/self/exe", "handoff", "--exec-child", (char *)NULL);
		_exit(4);
	}
	close(go[0]);
	/* The tail goes out from the new program, still with uid 0. */
	usleep(200000);
	CHECK(receive(rcv, LEN, pid, 0, "process exec'd") == LEN,
	      "exec: not every byte arrived");
	CHECK(ss_reap(dev, &cqe, 1, 10000) == 1 && cqe.res == LEN,
	      "exec: SENT %lld, want %d", (long long)cqe.res, LEN);
	close(go[1]);
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exec child: status %#x", st);
	close(snd);
	close(rcv);
	close(dev);
}

static void process_exits(int file)
{
	int dev = ss_dev(), snd, rcv;
	struct stablesend_cqe cqe = { 0 };
	size_t got;
	pid_t pid;
	int st;

	passcred_pair(&snd, &rcv);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		struct stablesend_req r = ss_req(file, snd, 0, LEN, 3);

		_exit(ss_submit(dev, &r, 1) == 1 ? 0 : 2);
	}
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "submitter: status %#x", st);
	/* We still hold the device fd: the request is not cancelled by a close. */
	close(snd);
	got = receive(rcv, LEN, pid, 0, "process exited");
	CHECK(ss_reap(dev, &cqe, 1, 10000) == 1, "process exited: no SENT");
	CHECK(cqe.user_data == 3 && got < LEN &&
	      (cqe.res == (long long)got || (!got && cqe.res == -ECANCELED)),
	      "process exited: SENT %lld, receiver got %zu of %d", (long long)cqe.res,
	      got, LEN);
	printf("process exited: SENT %lld, the receiver got %zu bytes\n",
	       (long long)cqe.res, got);
	close(rcv);
	close(dev);
}

int main(int argc, char **argv)
{
	int file;

	if (argc > 1 && !strcmp(argv[1], "--exec-child"))
		return exec_child();
	file = file_with_pattern(LEN, pat);
	thread_exits(file);
	send_behind_exited(file);
	execs(file);
	process_exits(file);
	close(file);
	CHECK(ss_drained(10), "pages in flight");
	return test_result();
}
