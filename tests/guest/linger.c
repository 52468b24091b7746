// SPDX-License-Identifier: GPL-2.0
/*
 * A SO_LINGER close never blocks a kernel thread.  A TCP socket with
 * SO_LINGER {1, 30} whose peer keeps a zero window (never reads, tiny
 * SO_RCVBUF) gets an asynchronous request larger than fits; a child closes
 * the socket fd, then the device fd.  Whoever drops the last reference to
 * the socket file then lingers in tcp_close() for up to 30 s: that may be
 * the user's own task (the child), never a kernel thread (say the shared
 * delayed_fput work, which would hold up every other deferred fput in the
 * system).  For 3 s after the closes every kernel thread's stack
 * (/proc/PID/stack of PF_KTHREAD tasks and kworkers) is sampled: tcp_close
 * (or __fput seen twice) in one fails the test.  Then the peer is closed,
 * which ends the linger, and everything must drain.
 */
#include "common.h"
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#define PF_KTHREAD	0x00200000
#define REQ_LEN		(4 << 20)

/* A loopback pair whose server side has a tiny receive buffer from the start. */
static void small_window_pair(int *client, int *server)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	int l = small_window_listener(4096, 1, &sin), v;

	*client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(*client >= 0, "socket");
	v = 32768;
	setsockopt(*client, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	REQUIRE(connect(*client, (struct sockaddr *)&sin, len) == 0, "connect");
	*server = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	REQUIRE(*server >= 0, "accept");
	close(l);
}

/* comm and flags of task @pid: 0, or -1 when gone. */
static int task_info(const char *pid, char *comm, size_t n, unsigned long *flags)
{
	char path[300], buf[1024], *p, *e;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	if (read_text(path, buf, sizeof(buf)))
		return -1;
	p = strchr(buf, '(');
	e = strrchr(buf, ')');
	if (!p || !e)
		return -1;
	snprintf(comm, n, "%.*s", (int)(e - p - 1), p + 1);
	/* After ") ": state ppid pgrp session tty_nr tpgid flags */
	if (sscanf(e + 2, "%*c %*d %*d %*d %*d %*d %lu", flags) != 1)
		return -1;
	return 0;
}

struct hits {
	int tcp_close, fput;
};

/* One pass over every kernel thread's stack. */
static void sample(struct hits *h, int verbose)
{
	static char stack[8192];
	struct dirent *d;
	DIR *dir = opendir("/proc");

	if (!dir)
		return;
	while ((d = readdir(dir))) {
		char comm[64], path[300];
		unsigned long flags;
		int tc, fp;

		if (d->d_name[0] < '0' || d->d_name[0] > '9')
			continue;
		if (task_info(d->d_name, comm, sizeof(comm), &flags))
			continue;
		if (!(flags & PF_KTHREAD) && strncmp(comm, "kworker", 7))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stack", d->d_name);
		if (read_text(path, stack, sizeof(stack)))
			continue;
		tc = !!strstr(stack, "tcp_close");
		fp = !!strstr(stack, "__fput");
		if (!tc && !fp)
			continue;
		h->tcp_close += tc;
		h->fput += fp;
		if (verbose)
			printf("kernel thread %s (%s) blocked in %s:\n%s", d->d_name,
			       comm, tc ? "tcp_close" : "__fput", stack);
	}
	closedir(dir);
}

/* The child: submit, then close the socket and the device; may linger. */
static void child(int dev, int file, int snd, int go)
{
	struct stablesend_req r = ss_req(file, snd, 0, REQ_LEN, 1);
	char b;
	int ret;

	ret = ss_submit(dev, &r, 1);
	if (ret != 1) {
		fprintf(stderr, "SUBMIT returned %d: %s\n", ret, strerror(errno));
		_exit(2);
	}
	/* Let it start: the request heads its FIFO with the socket full. */
	usleep(500000);
	if (read(go, &b, 1) != 1)
		_exit(3);
	close(snd);
	close(dev);
	_exit(0);
}

int main(void)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 30 };
	struct hits h = { 0 };
	long long ctx0 = ss_contexts_baseline();
	int dev, file, snd, rcv, go[2], st, samples = 0, first = 1;
	double end, t0;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (access("/proc/self/stack", R_OK)) {
		printf("/proc/PID/stack not readable: cannot see kernel stacks\n");
		return SKIP;
	}
	file = temp_file(REQ_LEN, 'L');
	small_window_pair(&snd, &rcv);
	REQUIRE(setsockopt(snd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0,
		"SO_LINGER");
	dev = ss_dev();
	REQUIRE(pipe2(go, O_CLOEXEC) == 0, "pipe");

	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		close(go[1]);
		close(rcv);
		child(dev, file, snd, go[0]);
	}
	close(go[0]);
	close(snd);
	close(dev);
	/* Before the closes: no kernel thread sits in tcp_close already. */
	sample(&h, 0);
	if (h.tcp_close)
		printf("note: a kernel thread was in tcp_close before the closes\n");
	memset(&h, 0, sizeof(h));
	REQUIRE(write(go[1], "g", 1) == 1, "write");
	close(go[1]);

	t0 = now_s();
	end = t0 + 3;
	while (now_s() < end) {
		struct hits s = { 0 };

		sample(&s, first);
		if (s.tcp_close || s.fput)
			first = 0;
		h.tcp_close += s.tcp_close;
		h.fput += s.fput;
		samples++;
		usleep(50000);
	}
	printf("%d samples of every kernel thread's stack in 3 s after the closes: tcp_close %d times, __fput %d times\n",
	       samples, h.tcp_close, h.fput);
	if (waitpid(pid, &st, WNOHANG) != pid)
		st = -1;
	printf("the child (which closed the socket and device fds) %s\n",
	       st == -1 ? "is still lingering in close, as allowed" : "has exited");
	CHECK(!h.tcp_close, "a kernel thread lingered in tcp_close for the user's socket");
	CHECK(h.fput < 2, "a kernel thread sat in __fput in %d samples", h.fput);

	/* End the linger: the peer goes away (unread data: a reset). */
	close(rcv);
	if (st == -1) {
		end = now_s() + 40;
		while (waitpid(pid, &st, WNOHANG) == 0 && now_s() < end)
			usleep(50000);
		if (now_s() >= end) {
			CHECK(0, "the child is still in close 40 s after the peer closed");
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
		}
	}
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	printf("the child ended %.1f s after the closes\n", now_s() - t0);
	CHECK(ss_drained(35), "still %lld requests, %lld bytes in flight",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	CHECK(ss_stat_wait("contexts", ctx0, 35) == ctx0, "contexts %lld, expected %lld",
	      ss_stat("contexts"), ctx0);
	close(file);
	return test_result();
}
