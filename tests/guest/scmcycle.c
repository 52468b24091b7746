// SPDX-License-Identifier: GPL-2.0
/*
 * A process passes its device fd and the peer end of its socket to that
 * very socket (SCM_RIGHTS) while a request is parked on it, then closes
 * everything and exits.  Nothing but the request then keeps the socket
 * open, and the socket keeps the fds in flight in it: the device fd,
 * whose close would end the request, and the peer, which will never read.
 * The request must still end once its process is gone, and everything
 * come back: the open, its pages, the requests in flight.  Twice: the
 * process exits with exit_group(2) and is reaped at once, and it ends by
 * its last thread's exit(2) and stays a zombie until after the checks.
 *
 * compat32: yes
 */
#include "common.h"
#include <sys/syscall.h>
#include <sys/wait.h>

#define LEN	(1 << 20)

/* The child: the cycle, then exit. */
static int make_cycle(int file)
{
	union {
		char b[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} cb;
	int dev = ss_dev(), u, v, fds[2];
	struct stablesend_req r;
	char x = 'x';
	struct iovec iov = { &x, 1 };
	struct msghdr m = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cb.b, .msg_controllen = sizeof(cb.b),
	};
	struct cmsghdr *cm;

	unix_pair(&u, &v);
	r = ss_req(file, u, 0, LEN, 1);
	if (ss_submit(dev, &r, 1) != 1)
		return 2;
	/* The socket took what it holds; the rest is parked. */
	if (ss_stat_wait("requests_in_flight", 1, 10) < 1)
		return 3;
	fds[0] = dev;
	fds[1] = v;
	cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	if (sendmsg(v, &m, 0) != 1)
		return 4;
	return 0;	/* exit closes dev, u and v */
}

static void cycle(int file, int zombie)
{
	const char *how = zombie ? "its last thread exited, not reaped" : "exited";
	long long base = ss_contexts_baseline(), contexts;
	int status;
	double t0;
	pid_t pid;

	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		int ret = make_cycle(file);

		if (zombie && !ret)
			syscall(SYS_exit, 0);	/* this thread only: no group exit */
		_exit(ret);
	}
	if (zombie) {
		for (t0 = now_s(); proc_state(pid) != 'Z' && now_s() < t0 + 20;)
			usleep(10000);
		REQUIRE(proc_state(pid) == 'Z', "the child is not a zombie: %c", proc_state(pid));
	} else {
		REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
		REQUIRE(WIFEXITED(status) && !WEXITSTATUS(status), "the child: %#x", status);
	}
	t0 = now_s();
	contexts = ss_stat_wait("contexts", base, 20 * ss_debug_scale(4));
	CHECK(contexts == base,
	      "%s: %.0f s later the open is still there (%lld opens, %lld requests in flight)",
	      how, now_s() - t0, contexts, ss_stat("requests_in_flight"));
	CHECK(ss_drained(5 * ss_debug_scale(4)), "%s: pages still in flight: %lld requests",
	      how, ss_stat("requests_in_flight"));
	CHECK(ss_stat_wait("pool_bytes", 0, 5 * ss_debug_scale(4)) == 0,
	      "%s: the module still owns %lld bytes of pages", how, ss_stat("pool_bytes"));
	printf("device fd and socket passed to the socket itself, process %s: all back after %.1f s\n",
	       how, now_s() - t0);
	if (zombie) {
		REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
		CHECK(WIFEXITED(status) && !WEXITSTATUS(status), "the child: %#x", status);
	}
}

int main(void)
{
	int file = temp_file(LEN, 's');

	cycle(file, 0);
	cycle(file, 1);
	close(file);
	return test_result();
}
