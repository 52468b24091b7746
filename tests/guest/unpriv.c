// SPDX-License-Identifier: GPL-2.0
/*
 * Unprivileged use.  As user and group nobody (65534, no supplementary
 * groups, checked unable to become root again):
 * - /dev/stablesend (mode 0666) opens and sends;
 * - the per-open limit holds: SETUP above the max_limit parameter is
 *   refused (EINVAL, as uapi/linux/stablesend.h documents), max_limit
 *   itself is taken; a request above the limit gets EMSGSIZE and a
 *   non-blocking open at its limit EAGAIN;
 * - fds are the capabilities: a root-only file cannot be opened, its
 *   O_PATH fd (which needs no read permission) is refused with EBADF, a
 *   write-only fd too; the same file's read fd passed over SCM_RIGHTS by
 *   root sends its bytes;
 * - the module parameters cannot be written, the stats can be read.
 *
 * Then the existing tests that need no root (on the debug kernel only
 * those that are not slow; their 64-bit builds: the module's compat_ioctl
 * is compat_ptr_ioctl, so a 32-bit nobody runs the code a 64-bit nobody
 * and a 32-bit root already ran) run as nobody with
 * STABLESEND_UNPRIV=1 in their environment; their output is part of this
 * test's, and one that fails or skips as nobody fails it.  sockets needs a
 * network namespace and veth: it runs as root of a user and network
 * namespace that nobody made (the container case).  The others need real
 * root for a setup step: memcg a cgroup, seed SO_SNDBUFFORCE beyond
 * wmem_max (it hangs without), zerocopy the virtio NICs of the init netns.
 *
 * test-timeout: 600
 */
#include "common.h"
#include <grp.h>
#include <net/if.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define NOBODY		65534
#define PARAMS		"/sys/module/stablesend/parameters"
#define SECRET		"only root may read this\n"

/* NAME@userns: in a new user + network namespace, as its root (a container). */
static const char *const tests[] = {
	"badinput", "completions", "faults", "sync-signal", "under-fire", "uring",
	"sockets@userns",
};

static void drop_root(void)
{
	uid_t r, e, s;
	gid_t rg, eg, sg;

	REQUIRE(setgroups(0, NULL) == 0, "setgroups");
	REQUIRE(setgid(NOBODY) == 0, "setgid");
	REQUIRE(setuid(NOBODY) == 0, "setuid");
	REQUIRE(getresuid(&r, &e, &s) == 0 && r == NOBODY && e == NOBODY &&
		s == NOBODY, "uids %d %d %d", (int)r, (int)e, (int)s);
	REQUIRE(getresgid(&rg, &eg, &sg) == 0 && rg == NOBODY && eg == NOBODY &&
		sg == NOBODY && getgroups(0, NULL) == 0, "gids");
	REQUIRE(setuid(0) == -1 && errno == EPERM, "setuid(0) worked again");
	REQUIRE(setgid(0) == -1 && errno == EPERM, "setgid(0) worked again");
	REQUIRE(open("/proc/1/environ", O_RDONLY) < 0, "PID 1's environ opens");
}

static long long param(const char *name)
{
	char path[128], buf[32] = "";
	FILE *f;

	snprintf(path, sizeof(path), PARAMS "/%s", name);
	f = fopen(path, "re");
	if (!f || !fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	if (f)
		fclose(f);
	return buf[0] ? strtoll(buf, NULL, 10) : -1;
}

/* Send @file's first @len bytes through @dev to a unix pair; the result. */
static long send_file(int dev, int file, char *out, size_t len)
{
	struct stablesend_req r;
	int a, b;
	long ret;

	unix_pair(&a, &b);
	r = ss_req(file, a, 0, len, 1);
	ret = ss_send(dev, &r);
	if (ret > 0)
		CHECK(read_full(b, out, ret) == (size_t)ret, "read back");
	close(a);
	close(b);
	return ret;
}

static void check_limits(void)
{
	struct stablesend_setup s = { .eventfd = -1 };
	long long max = param("max_limit"), def = param("default_limit");
	long long user = param("user_limit"), in_force = max;
	struct stablesend_counters c;
	struct stablesend_req r;
	int dev, file, a, b, n;

	CHECK(max > 0 && def > 0, "parameters readable: max_limit %lld default_limit %lld",
	      max, def);
	dev = ss_dev();
	s.mem_limit = max + 1;
	CHECK(ioctl(dev, STABLESEND_IOC_SETUP, &s) == -1 && errno == EINVAL,
	      "SETUP mem_limit max_limit + 1 (%lld) accepted: limit in force %llu",
	      max + 1, (unsigned long long)s.mem_limit);
	/* Cut to the user's bound: nobody has no CAP_SYS_RESOURCE. */
	CHECK(user > 0, "user_limit readable: %lld", user);
	if (user > 0 && user < max)
		in_force = user;
	s.mem_limit = max;
	CHECK(ioctl(dev, STABLESEND_IOC_SETUP, &s) == 0 && s.mem_limit == (uint64_t)in_force,
	      "SETUP mem_limit max_limit %lld: limit in force %llu, want %lld", max,
	      (unsigned long long)s.mem_limit, in_force);
	close(dev);

	/* 1 MiB limit: 2 MiB is EMSGSIZE, a full non-blocking open EAGAIN. */
	dev = open(STABLESEND_DEVICE, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	REQUIRE(dev >= 0, "open");
	REQUIRE(ss_setup(dev, -1, 1 << 20) == 0, "SETUP 1 MiB");
	file = temp_file(2 << 20, 'u');
	tcp_pair(AF_INET, &a, &b);
	set_rcvbuf_small(b);
	r = ss_req(file, a, 0, 2 << 20, 1);
	CHECK(ss_submit(dev, &r, 1) == -1 && errno == EMSGSIZE, "2 MiB over a 1 MiB limit");
	r.len = 256 << 10;
	for (n = 0; n < 64 && ss_submit(dev, &r, 1) == 1; n++)
		;
	CHECK(n >= 1 && n < 64 && errno == EAGAIN,
	      "256 KiB requests under a 1 MiB limit: %d accepted, then errno %d", n, errno);
	ss_counters(dev, &c);
	CHECK(c.mem_in_use <= 1 << 20 && c.mem_limit == 1 << 20,
	      "mem_in_use %llu mem_limit %llu", (unsigned long long)c.mem_in_use,
	      (unsigned long long)c.mem_limit);
	printf("limits: max_limit %lld + 1 refused (EINVAL), max_limit taken; "
	       "1 MiB open: 2 MiB EMSGSIZE, %d x 256 KiB then EAGAIN, mem_in_use %llu\n",
	       max, n, (unsigned long long)c.mem_in_use);
	close(dev);
	close(a);
	close(b);
	close(file);
}

/* As nobody: what a root-only file and its fds allow; @passed from root. */
static void check_files(const char *secret, int passed)
{
	char out[64] = "", name[] = "/tmp/ss-unpriv-XXXXXX";
	int dev = ss_dev(), fd;
	long ret;

	CHECK(open(secret, O_RDONLY) == -1 && errno == EACCES, "root-only file opened");
	fd = open(secret, O_PATH | O_CLOEXEC);
	CHECK(fd >= 0, "O_PATH open of %s", secret);
	if (fd >= 0) {
		ret = send_file(dev, fd, out, sizeof(SECRET) - 1);
		CHECK(ret == -1 && errno == EBADF,
		      "O_PATH fd of a root-only file: %ld errno %d, got \"%.*s\"",
		      ret, errno, ret > 0 ? (int)ret : 0, out);
		close(fd);
	}
	fd = mkstemp(name);
	REQUIRE(fd >= 0, "mkstemp");
	write_full(fd, "x", 1, 0);
	close(fd);
	fd = open(name, O_WRONLY | O_CLOEXEC);
	REQUIRE(fd >= 0, "open O_WRONLY");
	CHECK(send_file(dev, fd, out, 1) == -1 && errno == EBADF, "write-only fd");
	close(fd);
	unlink(name);

	memset(out, 0, sizeof(out));
	ret = send_file(dev, passed, out, sizeof(SECRET) - 1);
	CHECK(ret == sizeof(SECRET) - 1 && !memcmp(out, SECRET, ret),
	      "fd passed by root: %ld \"%s\"", ret, out);
	printf("files: root-only file EACCES, its O_PATH fd EBADF, write-only fd EBADF, "
	       "root's fd over SCM_RIGHTS sent %ld bytes\n", ret);
	close(dev);
}

static void check_sysfs(void)
{
	static const char *const p[] = { "default_limit", "max_limit" };
	const char *stats = "/sys/module/stablesend/stats";
	char path[128];
	unsigned int i;

	for (i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
		snprintf(path, sizeof(path), PARAMS "/%s", p[i]);
		CHECK(access(path, F_OK) == 0, "%s missing", path);
		CHECK(open(path, O_WRONLY) == -1 && errno == EACCES,
		      "%s writable by nobody", path);
	}
	CHECK(ss_stat("contexts") >= 0 && ss_stat("bytes_in_flight") >= 0,
	      "stats in %s not readable", stats);
	snprintf(path, sizeof(path), "%s/contexts", stats);
	CHECK(open(path, O_WRONLY) == -1, "%s writable", path);
	printf("sysfs: parameters not writable (EACCES), stats readable (contexts %lld)\n",
	       ss_stat("contexts"));
}

/* Receive one fd over SCM_RIGHTS. */
static int recv_fd(int sock)
{
	char c, cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &c, 1 };
	struct msghdr m = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *cm;
	int fd = -1;

	if (recvmsg(sock, &m, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	cm = CMSG_FIRSTHDR(&m);
	if (cm && cm->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
	return fd;
}

static void send_fd(int sock, int fd)
{
	char c = 0, cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { &c, 1 };
	struct msghdr m = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(fd));
	REQUIRE(sendmsg(sock, &m, 0) == 1, "sendmsg SCM_RIGHTS");
}

/* Wait for @pid at most @secs; its exit status, or -1 (killed). */
static int wait_for(pid_t pid, int secs)
{
	double end = now_s() + secs;
	int st;

	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (now_s() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			fprintf(stderr, "killed after %d s\n", secs);
			return -1;
		}
		usleep(50000);
	}
	if (WIFSIGNALED(st)) {
		fprintf(stderr, "killed by signal %d\n", WTERMSIG(st));
		return -1;
	}
	return WEXITSTATUS(st);
}

static void write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	REQUIRE(fd >= 0 && write(fd, s, strlen(s)) == (ssize_t)strlen(s), "write %s", path);
	close(fd);
}

/*
 * As nobody: a new user namespace whose root is nobody outside, and a new
 * network namespace it owns, with lo up.  Exits 77 when unprivileged user
 * namespaces are off.
 */
static void enter_userns(void)
{
	struct ifreq ifr = { .ifr_name = "lo" };
	int fd;

	/* setuid() made us non-dumpable: /proc/self would stay root's. */
	prctl(PR_SET_DUMPABLE, 1);
	if (unshare(CLONE_NEWUSER | CLONE_NEWNET)) {
		printf("unshare(CLONE_NEWUSER | CLONE_NEWNET) as nobody: %s\n",
		       strerror(errno));
		_exit(SKIP);
	}
	write_file("/proc/self/setgroups", "deny");
	write_file("/proc/self/uid_map", "0 65534 1");
	write_file("/proc/self/gid_map", "0 65534 1");
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	REQUIRE(fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0, "lo flags");
	ifr.ifr_flags |= IFF_UP;
	REQUIRE(ioctl(fd, SIOCSIFFLAGS, &ifr) == 0, "lo up");
	close(fd);
}

/* Run /tests/NAME[@userns] as nobody; counts its verdict. */
static void run_as_nobody(const char *arg, int *ran)
{
	char path[256], name[128], *at;
	int st, userns;
	pid_t pid;

	snprintf(name, sizeof(name), "%s", arg);
	at = strchr(name, '@');
	userns = at && !strcmp(at, "@userns");
	if (at)
		*at = 0;
	snprintf(path, sizeof(path), "%s%s", strchr(name, '/') ? "" : "/tests/", name);
	if (access(path, X_OK))
		return;
	printf("@@ %s as nobody%s\n", name,
	       userns ? ", root of its own user and network namespace" : "");
	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		drop_root();
		if (userns)
			enter_userns();
		setenv("STABLESEND_UNPRIV", "1", 1);
		execl(path, path, (char *)NULL);
		_exit(126);
	}
	st = wait_for(pid, 300);
	printf("@@ %s as nobody: %s (exit %d)\n", name,
	       st == 0 ? "PASS" : st == SKIP ? "SKIP" : "FAIL", st);
	/* A skip as nobody is not a pass: nothing was tested as nobody. */
	CHECK(st == 0, "%s as nobody: %s (exit status %d)", name,
	      st == SKIP ? "skipped" : "failed", st);
	(*ran)++;
}

int main(int argc, char **argv)
{
	char secret[] = "/tmp/ss-secret-XXXXXX";
	struct stat stt;
	int sv[2], fd, ran = 0, st;
	unsigned int i;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (geteuid()) {
		printf("must start as root to drop to nobody\n");
		return SKIP;
	}
	REQUIRE(stat(STABLESEND_DEVICE, &stt) == 0, "stat " STABLESEND_DEVICE);
	CHECK(S_ISCHR(stt.st_mode) && (stt.st_mode & 0777) == 0666,
	      STABLESEND_DEVICE " mode %o", stt.st_mode & 0777);

	/* A file only root may read, and its read fd for the child. */
	fd = mkstemp(secret);
	REQUIRE(fd >= 0 && fchmod(fd, 0600) == 0, "mkstemp");
	write_full(fd, SECRET, sizeof(SECRET) - 1, 0);
	close(fd);
	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		close(sv[0]);
		drop_root();
		printf("nobody: uid/gid %d/%d, no groups, setuid(0) EPERM\n", NOBODY, NOBODY);
		fd = recv_fd(sv[1]);
		CHECK(fd >= 0, "no fd over SCM_RIGHTS");
		check_limits();
		check_files(secret, fd);
		check_sysfs();
		_exit(test_result());
	}
	close(sv[1]);
	fd = open(secret, O_RDONLY | O_CLOEXEC);
	REQUIRE(fd >= 0, "open %s", secret);
	send_fd(sv[0], fd);
	close(fd);
	close(sv[0]);
	st = wait_for(pid, 120);
	CHECK(st == 0, "unprivileged checks: exit status %d", st);
	unlink(secret);
	CHECK(ss_drained(10), "requests_in_flight %lld bytes_in_flight %lld",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));

	/* "unpriv TEST..." runs those instead ("unpriv -" none). */
	for (i = 1; i < (unsigned int)argc; i++)
		if (strcmp(argv[i], "-"))
			run_as_nobody(argv[i], &ran);
	for (i = 0; argc == 1 && i < sizeof(tests) / sizeof(tests[0]); i++) {
		/* The debug kernel already ran the slow ones as root. */
		if (ss_debug_scale(2) > 1 && (!strcmp(tests[i], "badinput") ||
					      !strcmp(tests[i], "faults") ||
					      !strcmp(tests[i], "under-fire")))
			continue;
		run_as_nobody(tests[i], &ran);
	}
	printf("%d tests run as nobody\n", ran);
	CHECK(ran > 0 || argc > 1, "no test found in /tests");
	return test_result();
}
