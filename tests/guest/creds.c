// SPDX-License-Identifier: GPL-2.0
/*
 * Bytes are sent in the submitter's name (issue 13).  An AF_UNIX stream
 * receiver with SO_PASSCRED (and SO_PASSPIDFD where the kernel has it, 6.5+)
 * gets SCM_CREDENTIALS with every message; every message carrying
 * stablesend bytes must name the submitting process: pid getpid(), uid
 * getuid(), gid getgid() (and a pidfd of that process), whether the bytes
 * went out
 * - through a synchronous SEND that fits,
 * - through a SUBMIT that fits,
 * - through SUBMITs queued behind a full socket, which go out later, after
 *   the receiver starts reading (the submitter then waits in poll()),
 * - through a SEND larger than the socket holds, whose rest goes out while
 *   another thread reads.
 * Once as root, once in a child as nobody (uid/gid 65534, no groups): a
 * kernel-attested uid 0 seen there would be a forged credential.
 * compat32: yes
 */
#include "common.h"
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD	76
#endif
#ifndef SCM_PIDFD
#define SCM_PIDFD	0x04	/* include/linux/socket.h */
#endif

#define NOBODY		65534
#define FILE_LEN	(4 << 20)

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 7 + (i >> 11) + 1);
}

/* The pid a pidfd refers to (its fdinfo "Pid:" line), or -1. */
static long pidfd_pid(int pidfd)
{
	return (long)fdinfo_num(getpid(), pidfd, "Pid");
}

struct rx {
	int sock;
	int pidfd_on;		/* SO_PASSPIDFD took */
	const char *what;
	size_t want;		/* bytes expected */
	uint64_t off;		/* their file offset */
	/* results */
	size_t got;
	int msgs, bad, nocred, badpidfd, badbytes;
	struct ucred first_bad;
	long first_bad_pidfd;
};

/* Receive rx->want bytes, checking the credentials of every message. */
static void *receive(void *arg)
{
	struct rx *rx = arg;
	unsigned char *buf = malloc(256 << 10);
	pid_t me = getpid();

	REQUIRE(buf, "malloc");
	rx->first_bad_pidfd = -2;
	while (rx->got < rx->want) {
		union {
			char b[CMSG_SPACE(sizeof(struct ucred)) +
			       CMSG_SPACE(sizeof(int)) + 64];
			struct cmsghdr align;
		} cb;
		size_t room = rx->want - rx->got;
		struct iovec iov = { buf, room < (256 << 10) ? room : (256 << 10) };
		struct msghdr m = {
			.msg_iov = &iov, .msg_iovlen = 1,
			.msg_control = cb.b, .msg_controllen = sizeof(cb.b),
		};
		struct pollfd p = { .fd = rx->sock, .events = POLLIN };
		struct ucred *uc = NULL;
		struct cmsghdr *cm;
		long pfpid = -2;
		ssize_t n, i;
		int pr;

		pr = poll(&p, 1, 10000);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr != 1) {
			fprintf(stderr, "%s: nothing to read for 10 s after %zu of %zu bytes\n",
				rx->what, rx->got, rx->want);
			break;
		}
		n = recvmsg(rx->sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			fprintf(stderr, "%s: recvmsg %zd after %zu bytes: %s\n",
				rx->what, n, rx->got, strerror(errno));
			break;
		}
		for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
			if (cm->cmsg_level != SOL_SOCKET)
				continue;
			if (cm->cmsg_type == SCM_CREDENTIALS)
				uc = (struct ucred *)CMSG_DATA(cm);
			if (cm->cmsg_type == SCM_PIDFD) {
				int fd;

				memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
				pfpid = pidfd_pid(fd);
				close(fd);
			}
		}
		rx->msgs++;
		if (!uc) {
			rx->nocred++;
		} else if (uc->pid != me || uc->uid != getuid() ||
			   uc->gid != getgid()) {
			if (!rx->bad)
				rx->first_bad = *uc;
			rx->bad++;
		}
		if (rx->pidfd_on && pfpid != me) {
			if (!rx->badpidfd)
				rx->first_bad_pidfd = pfpid;
			rx->badpidfd++;
		}
		i = pattern_mismatch(buf, n, rx->off + rx->got, pat);
		if (i < n && !rx->badbytes++)
			fprintf(stderr, "%s: byte %zu of the stream is wrong\n",
				rx->what, rx->got + i);
		rx->got += n;
	}
	free(buf);
	return NULL;
}

static void report(struct rx *rx, const char *who)
{
	uid_t uid = getuid();
	gid_t gid = getgid();

	CHECK(rx->got == rx->want, "%s (%s): received %zu of %zu bytes", rx->what,
	      who, rx->got, rx->want);
	CHECK(!rx->badbytes, "%s (%s): wrong bytes", rx->what, who);
	CHECK(!rx->nocred, "%s (%s): %d of %d messages without SCM_CREDENTIALS",
	      rx->what, who, rx->nocred, rx->msgs);
	CHECK(!rx->bad,
	      "%s (%s): %d of %d messages with SCM_CREDENTIALS pid %d uid %u gid %u, want the submitter's pid %d uid %u gid %u",
	      rx->what, who, rx->bad, rx->msgs, (int)rx->first_bad.pid,
	      (unsigned int)rx->first_bad.uid, (unsigned int)rx->first_bad.gid,
	      (int)getpid(), (unsigned int)uid, (unsigned int)gid);
	CHECK(!rx->badpidfd,
	      "%s (%s): %d of %d messages with an SCM_PIDFD of pid %ld (-2: none, -1: unreadable), want %d",
	      rx->what, who, rx->badpidfd, rx->msgs, rx->first_bad_pidfd,
	      (int)getpid());
	printf("%s (%s): %zu bytes in %d messages, %d with other credentials%s\n",
	       rx->what, who, rx->got, rx->msgs, rx->bad + rx->nocred,
	       rx->pidfd_on ? ", pidfds checked" : "");
}

/* A fresh @rx for @want bytes of the file from @off, arriving on @sock. */
static void rx_init(struct rx *rx, int sock, int pidfd_on, const char *what,
		    size_t want, uint64_t off)
{
	memset(rx, 0, sizeof(*rx));
	rx->sock = sock;
	rx->pidfd_on = pidfd_on;
	rx->what = what;
	rx->want = want;
	rx->off = off;
}

static void run(const char *who)
{
	struct rx rx;
	struct stablesend_req r[2];
	struct stablesend_cqe cqe[2];
	int dev = ss_dev(), file = file_with_pattern(FILE_LEN, pat), a, b, one = 1;
	int pidfd_on;
	uint64_t off = 0;
	pthread_t t;
	long ret;
	int n;

	REQUIRE(ss_setup(dev, -1, 16 << 20) == 0, "SETUP");
	unix_pair(&a, &b);
	REQUIRE(setsockopt(b, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) == 0,
		"SO_PASSCRED");
	pidfd_on = setsockopt(b, SOL_SOCKET, SO_PASSPIDFD, &one, sizeof(one)) == 0;
	if (!pidfd_on) {
		CHECK(errno == ENOPROTOOPT, "SO_PASSPIDFD");
		printf("SO_PASSPIDFD: %s, pidfds not checked\n", strerror(errno));
	}

	/* 1. A synchronous SEND that fits. */
	r[0] = ss_req(file, a, off, 100000, 1);
	ret = ss_send(dev, &r[0]);
	CHECK(ret == 100000, "SEND returned %ld", ret);
	rx_init(&rx, b, pidfd_on, "SEND", ret > 0 ? ret : 0, off);
	receive(&rx);
	report(&rx, who);
	off += rx.want;

	/* 2. A SUBMIT that fits. */
	r[0] = ss_req(file, a, off, 100000, 2);
	CHECK(ss_submit(dev, r, 1) == 1, "SUBMIT");
	n = ss_reap_intr(dev, cqe, 1, 10000);
	CHECK(n == 1 && cqe[0].res == 100000, "SUBMIT completion: %d, res %lld",
	      n, n ? (long long)cqe[0].res : 0LL);
	rx_init(&rx, b, pidfd_on, "SUBMIT", 100000, off);
	receive(&rx);
	report(&rx, who);
	off += rx.want;

	/*
	 * 3. Two SUBMITs that cannot go out now (1 MiB: more than an AF_UNIX
	 * socket holds, the receiver not reading); read after a while.
	 */
	r[0] = ss_req(file, a, off, 1 << 20, 3);
	r[1] = ss_req(file, a, off + (1 << 20), 64 << 10, 4);
	CHECK(ss_submit(dev, r, 2) == 2, "SUBMIT of two");
	usleep(200000);
	CHECK(ss_reap_intr(dev, cqe, 1, 0) == 0, "1 MiB request SENT before the receiver read");
	rx_init(&rx, b, pidfd_on, "SUBMIT queued behind a full socket",
		(1 << 20) + (64 << 10), off);
	receive(&rx);
	n = ss_reap_intr(dev, cqe, 2, 10000);
	CHECK(n == 2 && cqe[0].res == 1 << 20 && cqe[1].res == 64 << 10,
	      "queued completions: %d, res %lld %lld", n,
	      n > 0 ? (long long)cqe[0].res : 0LL, n > 1 ? (long long)cqe[1].res : 0LL);
	report(&rx, who);
	off += rx.want;

	/* 4. A SEND larger than the socket holds; another thread reads. */
	rx_init(&rx, b, pidfd_on, "SEND larger than the socket holds",
		1 << 20, off);
	pthread_create(&t, NULL, receive, &rx);
	r[0] = ss_req(file, a, off, 1 << 20, 5);
	ret = ss_send(dev, &r[0]);
	CHECK(ret == 1 << 20, "SEND of 1 MiB returned %ld", ret);
	pthread_join(t, NULL);
	report(&rx, who);

	close(a);
	close(b);
	close(dev);
	close(file);
}

int main(void)
{
	pid_t pid;
	int st;

	setvbuf(stdout, NULL, _IOLBF, 0);
	run(geteuid() ? "unprivileged caller" : "root");
	if (geteuid()) {
		printf("not root: the nobody pass is skipped\n");
		return test_result();
	}
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		failures = 0;	/* the root pass's are the parent's */
		REQUIRE(setgroups(0, NULL) == 0, "setgroups");
		REQUIRE(setgid(NOBODY) == 0, "setgid");
		REQUIRE(setuid(NOBODY) == 0, "setuid");
		/* setuid() made us non-dumpable: /proc/self/fdinfo would be root's. */
		prctl(PR_SET_DUMPABLE, 1);
		run("nobody");
		_exit(test_result());
	}
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody pass: status 0x%x", st);
	CHECK(ss_drained(10), "requests_in_flight %lld bytes_in_flight %lld",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	return test_result();
}
