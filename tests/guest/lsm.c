// SPDX-License-Identifier: GPL-2.0
/*
 * LSM hooks see the submitter (issue 13).  A process confined by an
 * AppArmor profile that denies TCP ("deny network inet stream") sends
 * nothing through stablesend that sendfile(2) would refuse it (see below
 * for 6.1):
 * - plain send(2) on a TCP socket it holds is refused (the profile works,
 *   so this test can fail);
 * - a synchronous SEND on such a socket fails with send(2)'s errno, and
 *   the receiver gets no byte;
 * - an asynchronous SUBMIT completes with that error, and no byte arrives;
 * - a SUBMIT queued behind a request the same process made before it was
 *   confined (1 MiB, more than the socket holds) fails once the receiver
 *   drains the socket and task work sends on: the receiver gets exactly
 *   the earlier request's bytes, which go out with the credentials of
 *   their own submission;
 * - an unconfined process sends through stablesend on an identical socket
 *   (the refusals are the LSM's, nothing else).
 * The sockets and the device are opened while unconfined (an unconfined
 * task may change to any profile; the profile could not create them).
 * "Refused" is judged against sendfile(2) on the same kind of socket: up to
 * 6.4 pages reach TCP through ->sendpage (the module's kernel_sendpage(),
 * sendfile's splice), which no LSM hook sees, so there stablesend must go
 * through exactly when sendfile(2) does; from 6.5 both are sendmsg with
 * MSG_SPLICE_PAGES and sendfile(2) must be refused.
 * AppArmor must be active (Debian's kernels enable it); the debug kernel is
 * built without CONFIG_SECURITY (tests/harness/debug-kernel) and skips.
 * The profile is compiled and loaded by the host's apparmor_parser.
 * host-bins: /sbin/apparmor_parser
 */
#include "common.h"
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/wait.h>

#define PARSER		"/sbin/apparmor_parser"
#define PROFILE		"stablesend-lsm"
#define AA		"/sys/kernel/security/apparmor"
#define FILE_LEN	(2 << 20)
#define LEN		32768		/* SEND, SUBMIT, control, sendfile: fits */
#define QLEN		(1 << 20)	/* queued: more than the socket holds */

static const char profile[] =
	"profile " PROFILE " {\n"
	"  file,\n"
	"  capability,\n"
	"  signal,\n"
	"  ptrace,\n"
	"  network,\n"
	"  deny network inet stream,\n"
	"  deny network inet6 stream,\n"
	"}\n";

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 13 + (i >> 12) + 5);
}

/*
 * Mount securityfs if init did not; 1 when AppArmor is active with
 * network mediation, 0 when this kernel has no AppArmor at all.
 */
static int apparmor_active(void)
{
	char buf[256];

	if (access("/sys/module/apparmor", F_OK))
		return 0;
	if (access(AA, F_OK) &&
	    mount("securityfs", "/sys/kernel/security", "securityfs", 0, NULL) &&
	    errno != EBUSY)
		REQUIRE(0, "mount securityfs on /sys/kernel/security");
	REQUIRE(!read_str("/sys/module/apparmor/parameters/enabled", buf, sizeof(buf)) &&
		buf[0] == 'Y', "AppArmor is built in but not enabled (enabled: %s)", buf);
	REQUIRE(!read_str("/sys/kernel/security/lsm", buf, sizeof(buf)) &&
		strstr(buf, "apparmor"), "active LSMs: %s, no apparmor", buf);
	REQUIRE(access(AA "/features/network_v8", F_OK) == 0,
		"AppArmor without network mediation (no %s/features/network_v8)", AA);
	printf("LSMs: %s\n", buf);
	return 1;
}

static void load_profile(void)
{
	const char *path = "/tmp/" PROFILE ".profile";
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), st;
	pid_t pid;

	REQUIRE(fd >= 0, "%s", path);
	write_full(fd, profile, strlen(profile), 0);
	close(fd);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		/*
		 * -r: load or replace; -K: no cache.  Policy without an abi
		 * rule is compiled for an old feature set without network
		 * mediation unless told the running kernel's.
		 */
		execl(PARSER, PARSER, "--config-file=/dev/null", "-r", "-K",
		      "--policy-features", AA "/features",
		      path, (char *)NULL);
		_exit(127);
	}
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	REQUIRE(WIFEXITED(st) && !WEXITSTATUS(st), "%s -r %s: status 0x%x", PARSER,
		path, st);
	printf("profile %s loaded:\n%s", PROFILE, profile);
}

static void confine(void)
{
	const char *cmd = "changeprofile " PROFILE, *p = "/proc/self/attr/apparmor/current";
	char buf[128];

	if (access(p, F_OK))
		p = "/proc/self/attr/current";	/* before 5.8 */
	REQUIRE(!write_str(p, cmd), "write '%s' to %s", cmd, p);
	REQUIRE(!read_str(p, buf, sizeof(buf)) && !strncmp(buf, PROFILE " ", strlen(PROFILE) + 1),
		"after changeprofile %s reads '%s'", p, buf);
	printf("confined: %s\n", buf);
}

/* A connected TCP pair over IPv4 loopback with small buffers both ways. */
static void small_tcp_pair(int *client, int *server)
{
	struct sockaddr_in sin;
	int l = small_window_listener(16384, 1, &sin), v = 16384;

	*client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(*client >= 0, "socket");
	REQUIRE(!setsockopt(*client, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)), "SO_SNDBUF");
	REQUIRE(!connect(*client, (struct sockaddr *)&sin, sizeof(sin)), "connect");
	*server = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	REQUIRE(*server >= 0, "accept");
	close(l);
}

/*
 * Read @fd until EOF (at most @timeout_s between two reads); the bytes
 * must be the file's from @off on.  Returns the count.
 */
static size_t drain(int fd, const char *what, uint64_t off, int timeout_s)
{
	unsigned char *buf = malloc(256 << 10);
	size_t got = 0, i;
	int bad = 0;

	REQUIRE(buf, "malloc");
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, timeout_s * 1000) != 1) {
			fprintf(stderr, "%s: no EOF within %d s, after %zu bytes\n", what,
				timeout_s, got);
			break;
		}
		n = read(fd, buf, 256 << 10);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		i = pattern_mismatch(buf, n, off + got, pat);
		if (i < (size_t)n && !bad++)
			fprintf(stderr, "%s: byte %zu of the stream is wrong\n", what, got + i);
		got += n;
	}
	CHECK(!bad, "%s: wrong bytes", what);
	free(buf);
	return got;
}

/*
 * From 6.5 on sendfile(2) to a socket is sendmsg(MSG_SPLICE_PAGES), which
 * the LSM sees; before, ->sendpage, which it does not.
 */
static int splice_is_sendmsg(void)
{
	struct utsname u;
	int maj = 0, min = 0;

	REQUIRE(!uname(&u) && sscanf(u.release, "%d.%d", &maj, &min) == 2, "uname");
	return maj > 6 || (maj == 6 && min >= 5);
}

/* Sockets: client (the sender's) and server (the receiver's) ends. */
enum { S_SEND, S_SENDFILE, S_SYNC, S_ASYNC, S_QUEUED, S_NR };
static const char *const sname[S_NR] = {
	"send(2)", "sendfile(2)", "SEND", "SUBMIT", "SUBMIT queued behind a full socket",
};

/* What the confined child tells the parent. */
struct verdict {
	int refused;		/* sendfile(2) was refused: stablesend must be too */
	int err;		/* send(2)'s errno */
};

/*
 * The confined part: @c are the client ends, @file the payload, @go a
 * pipe the parent waits on before draining the queued socket, @out where
 * the verdict goes.  Returns the exit status.
 */
static int confined(const int *c, int file, int go, int out)
{
	struct stablesend_cqe cqe[2];
	struct stablesend_req r[1];
	struct verdict v = { 0 };
	int dev = ss_dev(), n, expect_refused;
	off_t off = 0;
	long ret;
	ssize_t sf;
	char b = 'x';

	REQUIRE(ss_setup(dev, -1, 16 << 20) == 0, "SETUP");

	/* Unconfined still: 1 MiB that cannot go out before the receiver reads. */
	r[0] = ss_req(file, c[S_QUEUED], 0, QLEN, 1);
	REQUIRE(ss_submit(dev, r, 1) == 1, "SUBMIT of 1 MiB");
	usleep(200000);
	REQUIRE(ss_reap_intr(dev, cqe, 1, 0) == 0,
		"the 1 MiB request completed (res %lld) before the receiver read: nothing is queued",
		(long long)cqe[0].res);

	confine();

	/* 1. The profile refuses send(2). */
	errno = 0;
	ret = send(c[S_SEND], &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	REQUIRE(ret < 0 && (errno == EACCES || errno == EPERM),
		"send(2) of the confined process returned %ld: the profile does not refuse it",
		ret);
	v.err = errno;
	printf("send(2): %s, as the profile says\n", strerror(v.err));

	/* The reference: sendfile(2), which hands over page references too. */
	errno = 0;
	sf = sendfile(c[S_SENDFILE], file, &off, LEN);
	CHECK(sf == LEN || (sf < 0 && errno == v.err),
	      "sendfile(2) returned %zd, want %d or send(2)'s %s", sf, LEN,
	      strerror(v.err));
	v.refused = sf < 0;
	printf("sendfile(2): %s\n", sf < 0 ? strerror(errno) : "sent, no LSM hook on its path");
	CHECK(v.refused || !splice_is_sendmsg(),
	      "sendfile(2) of the confined process was not refused on a kernel from 6.5 on");
	expect_refused = v.refused;

	/* 2. A synchronous SEND. */
	r[0] = ss_req(file, c[S_SYNC], 0, LEN, 2);
	errno = 0;
	ret = ss_send(dev, &r[0]);
	if (expect_refused)
		CHECK(ret == -1 && errno == v.err,
		      "SEND of the confined process returned %ld, want -1 %s as send(2)",
		      ret, strerror(v.err));
	else
		CHECK(ret == LEN, "SEND returned %ld, want %d as sendfile(2)", ret, LEN);
	printf("SEND: %ld%s%s\n", ret, ret < 0 ? " " : "", ret < 0 ? strerror(errno) : "");

	/* 3. An asynchronous SUBMIT on a socket with room. */
	r[0] = ss_req(file, c[S_ASYNC], 0, LEN, 3);
	CHECK(ss_submit(dev, r, 1) == 1, "SUBMIT");
	n = ss_reap_intr(dev, cqe, 1, 10000 * ss_debug_scale(4));
	CHECK(n == 1 && cqe[0].user_data == 3, "SUBMIT: %d completions", n);
	if (n == 1)
		CHECK(cqe[0].res == (expect_refused ? -v.err : LEN),
		      "SUBMIT of the confined process completed with %lld, want %d",
		      (long long)cqe[0].res, expect_refused ? -v.err : LEN);
	printf("SUBMIT: completion %lld\n", n ? (long long)cqe[0].res : 0LL);

	/*
	 * 4. A SUBMIT queued behind the unconfined 1 MiB: it goes (or not)
	 * from task work once the parent drains the socket.
	 */
	r[0] = ss_req(file, c[S_QUEUED], QLEN, LEN, 4);
	CHECK(ss_submit(dev, r, 1) == 1, "SUBMIT behind the 1 MiB");
	CHECK(ss_reap_intr(dev, cqe, 1, 0) == 0, "a queued request completed before the receiver read");
	REQUIRE(write(out, &v, sizeof(v)) == sizeof(v), "verdict");
	REQUIRE(write(go, &b, 1) == 1, "go");
	n = ss_reap_intr(dev, cqe, 2, 20000 * ss_debug_scale(4));
	CHECK(n == 2 && cqe[0].user_data == 1 && cqe[1].user_data == 4,
	      "queued: %d completions", n);
	if (n == 2) {
		CHECK(cqe[0].res == QLEN,
		      "the 1 MiB submitted before the profile change completed with %lld, want %d (credentials of its own submission)",
		      (long long)cqe[0].res, QLEN);
		CHECK(cqe[1].res == (expect_refused ? -v.err : LEN),
		      "the SUBMIT queued by the confined process completed with %lld, want %d",
		      (long long)cqe[1].res, expect_refused ? -v.err : LEN);
	}
	printf("queued: completions %lld, %lld\n", n > 0 ? (long long)cqe[0].res : 0LL,
	       n > 1 ? (long long)cqe[1].res : 0LL);
	close(dev);
	return test_result();
}

/* The unconfined control: SEND and SUBMIT through stablesend on TCP. */
static void control(int file)
{
	struct stablesend_req r[1];
	struct stablesend_cqe cqe;
	int dev = ss_dev(), a, b;
	size_t got;
	long ret;

	REQUIRE(ss_setup(dev, -1, 16 << 20) == 0, "SETUP");
	tcp_pair(AF_INET, &a, &b);
	r[0] = ss_req(file, a, 0, LEN, 5);
	ret = ss_send(dev, &r[0]);
	CHECK(ret == LEN, "control: SEND of the unconfined process returned %ld", ret);
	r[0] = ss_req(file, a, LEN, LEN, 6);
	CHECK(ss_submit(dev, r, 1) == 1, "control: SUBMIT");
	CHECK(ss_reap(dev, &cqe, 1, 10000) == 1 && cqe.res == LEN,
	      "control: SUBMIT of the unconfined process completed with %lld",
	      (long long)cqe.res);
	close(a);
	got = drain(b, "control", 0, 10);
	CHECK(got == 2 * LEN, "control: received %zu bytes, want %d", got, 2 * LEN);
	printf("control (unconfined): SEND %ld, SUBMIT %lld, received %zu bytes\n", ret,
	       (long long)cqe.res, got);
	close(b);
	close(dev);
}

int main(void)
{
	int c[S_NR], s[S_NR], go[2], out[2], file, i, st;
	size_t got[S_NR], want[S_NR];
	struct verdict v;
	pid_t pid;
	char b;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (geteuid()) {
		printf("loading an AppArmor profile needs root\n");
		return SKIP;
	}
	if (!apparmor_active()) {
		REQUIRE(ss_debug_kernel(), "this kernel has no AppArmor (no /sys/module/apparmor)");
		printf("no AppArmor in this kernel (the debug kernel has no CONFIG_SECURITY)\n");
		return SKIP;
	}
	if (access(PARSER, X_OK)) {
		printf("%s is not in the initramfs (host package apparmor?)\n", PARSER);
		return SKIP;
	}
	load_profile();

	file = file_with_pattern(FILE_LEN, pat);
	for (i = 0; i < S_NR; i++) {
		if (i == S_QUEUED)
			small_tcp_pair(&c[i], &s[i]);
		else
			tcp_pair(AF_INET, &c[i], &s[i]);
	}
	REQUIRE(pipe2(go, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0, "pipe");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		failures = 0;
		_exit(confined(c, file, go[1], out[1]));
	}
	close(go[1]);
	close(out[1]);
	for (i = 0; i < S_NR; i++)
		close(c[i]);

	/* The confined child's queued request waits for this read. */
	if (read(go[0], &b, 1) != 1)
		fprintf(stderr, "the confined child ended before its queued SUBMIT\n");
	got[S_QUEUED] = drain(s[S_QUEUED], sname[S_QUEUED], 0, 30);
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "confined child: status 0x%x", st);
	REQUIRE(read(out[0], &v, sizeof(v)) == sizeof(v), "the child's verdict");
	for (i = 0; i < S_NR; i++)
		if (i != S_QUEUED)
			got[i] = drain(s[i], sname[i], 0, 10);

	/* What the receivers may get: nothing the confined process may not send. */
	want[S_SEND] = 0;
	want[S_SENDFILE] = v.refused ? 0 : LEN;
	want[S_SYNC] = want[S_ASYNC] = v.refused ? 0 : LEN;
	want[S_QUEUED] = QLEN + (v.refused ? 0 : LEN);
	for (i = 0; i < S_NR; i++) {
		CHECK(got[i] == want[i],
		      "%s: the receiver got %zu bytes, want %zu%s", sname[i], got[i],
		      want[i], v.refused && got[i] > want[i] ?
		      ": bytes the confined process may not send went out" : "");
		printf("%s: receiver got %zu bytes (want %zu)\n", sname[i], got[i], want[i]);
		close(s[i]);
	}
	if (!v.refused)
		printf("this kernel's ->sendpage path has no LSM hook: stablesend went through as sendfile(2) did\n");

	control(file);
	CHECK(ss_drained(10), "requests_in_flight %lld bytes_in_flight %lld",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	CHECK(write_str(AA "/.remove", PROFILE) == 0, "remove profile %s", PROFILE);
	return test_result();
}
