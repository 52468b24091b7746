// SPDX-License-Identifier: GPL-2.0
/*
 * SEND is killable, like sendfile(2) (issue 13): a process blocked in a
 * synchronous STABLESEND_IOC_SEND is reaped within 1 s of SIGKILL, and the
 * module's requests drain afterwards:
 * 1. TCP, blocking socket, the peer never reads (SEND waits for room);
 * 2. kTLS (TLS 1.2 AES-GCM-128 TX), blocking socket, the peer never reads,
 *    and another process blocked in a plain send() on the same socket: it
 *    holds the socket's kTLS tx_lock, which sendmsg takes interruptibly
 *    (6.12: mutex_lock_interruptible), so SEND, whoever does its sendmsg,
 *    waits behind it.  A plain send() there is killable; SEND must be too.
 *    Where the kernel's own send() is not killable there (6.1 takes
 *    tx_lock with mutex_lock()), this case is skipped: it is measured
 *    first, with a plain send() in the place of SEND.
 */
#include "common.h"
#include <signal.h>
#include <sys/wait.h>

#define REAP_LIMIT	1.0	/* s */

/* Wait for @pid at most @secs: the seconds it took, or -1 if still running. */
static double reap(pid_t pid, double secs, int *status)
{
	double t0 = now_s();

	while (waitpid(pid, status, WNOHANG) == 0) {
		if (now_s() - t0 > secs)
			return -1;
		usleep(5000);
	}
	return now_s() - t0;
}

/* Child: SEND @len bytes of @file on @sock; exits 0 if it ever returns. */
static pid_t fork_send(int dev, int file, int sock, size_t len)
{
	pid_t pid = fork();

	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		struct stablesend_req r = ss_req(file, sock, 0, len, 1);
		long ret = ss_send(dev, &r);

		fprintf(stderr, "child: SEND returned %ld (errno %d)\n", ret, errno);
		_exit(0);
	}
	return pid;
}

/* Child: a plain blocking send() of @len bytes on @sock. */
static pid_t fork_plain_send(int sock, size_t len)
{
	pid_t pid = fork();

	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		char *b = calloc(1, len);
		ssize_t n = b ? send(sock, b, len, MSG_NOSIGNAL) : -1;

		fprintf(stderr, "child: send() returned %zd (errno %d)\n", n, errno);
		_exit(0);
	}
	return pid;
}

/* SIGKILL @pid, which must still be running; true if reaped in time. */
static int kill_and_reap(pid_t pid, const char *what)
{
	int st;
	double took;

	if (waitpid(pid, &st, WNOHANG) == pid) {
		CHECK(0, "%s: returned before it was killed (status 0x%x)", what, st);
		return 1;
	}
	kill(pid, SIGKILL);
	took = reap(pid, REAP_LIMIT, &st);
	if (took < 0)
		return 0;
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	      "%s: status 0x%x, want killed by SIGKILL", what, st);
	printf("%s: reaped %.3f s after SIGKILL\n", what, took);
	return 1;
}

/* Reap @pid after the blockage was removed; fail if even that hangs. */
static void reap_late(pid_t pid, const char *what)
{
	double t0 = now_s(), took;
	int st;

	took = reap(pid, 20, &st);
	CHECK(took >= 0, "%s: not reaped 20 s after the peer went away", what);
	if (took >= 0)
		fprintf(stderr, "%s: reaped %.2f s after the peer went away\n", what,
			now_s() - t0);
}

static void plain_tcp(int dev, int file)
{
	const char *what = "SEND on TCP, peer not reading";
	int c, s;
	pid_t pid;

	tcp_pair(AF_INET, &c, &s);
	set_rcvbuf_small(s);
	pid = fork_send(dev, file, c, 8 << 20);
	usleep(500000);
	if (!kill_and_reap(pid, what)) {
		CHECK(0, "%s: not reaped %.1f s after SIGKILL", what, REAP_LIMIT);
		close(s);	/* the peer goes: the send fails */
		reap_late(pid, what);
	}
	close(c);
	close(s);
}

static void ktls(int dev, int file)
{
	const char *what = "SEND on kTLS behind a blocked send()";
	const char *cal = "plain send() on kTLS behind a blocked send()";
	int c, s, st, skip = 0;
	pid_t holder, plain, pid;

	tcp_pair(AF_INET, &c, &s);
	set_rcvbuf_small(s);
	if (ktls_setup(c, TLS_TX)) {
		CHECK(0, "kTLS TX: the harness loads tls and gcm(aes)");
		goto out;
	}
	/* Blocks in sk_stream_wait_memory() holding tx_lock. */
	holder = fork_plain_send(c, 16 << 20);
	usleep(500000);
	REQUIRE(waitpid(holder, &st, WNOHANG) == 0, "the 16 MiB send() returned");

	/* Is the kernel's own send() killable behind it? */
	plain = fork_plain_send(c, 4096);
	usleep(300000);
	if (!kill_and_reap(plain, cal)) {
		printf("%s: not reaped %.1f s after SIGKILL: this kernel's send() is not killable there, %s not checked\n",
		       cal, REAP_LIMIT, what);
		skip = 1;
	}

	if (!skip) {
		pid = fork_send(dev, file, c, 64 << 10);
		usleep(500000);
		if (!kill_and_reap(pid, what)) {
			CHECK(0, "%s: not reaped %.1f s after SIGKILL (a plain send() was)",
			      what, REAP_LIMIT);
			kill(holder, SIGKILL);
			close(s);
			reap_late(pid, what);
		}
	}
	kill(holder, SIGKILL);
	close(s);
	s = -1;
	reap_late(holder, "the blocked 16 MiB send()");
	if (skip)
		reap_late(plain, cal);
out:
	close(c);
	if (s >= 0)
		close(s);
}

int main(void)
{
	int dev = ss_dev(), file = temp_file(8 << 20, 'k');

	setvbuf(stdout, NULL, _IOLBF, 0);
	REQUIRE(ss_setup(dev, -1, 32 << 20) == 0, "SETUP");
	plain_tcp(dev, file);
	ktls(dev, file);
	close(dev);
	close(file);
	CHECK(ss_drained(10), "after the kills: requests_in_flight %lld bytes_in_flight %lld",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	return test_result();
}
