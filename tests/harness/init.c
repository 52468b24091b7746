// SPDX-License-Identifier: GPL-2.0
/*
 * init: PID 1 of the stablesend test guest.
 *
 * One function per step, as in WireGuard's qemu/init.c: mount the
 * pseudo filesystems, open the host channels, bring up lo, load the
 * kernel's own modules and ours, then either run every test in /tests or
 * one command, and power off.
 *
 * Channels (the host starts QEMU with three serial ports):
 *   ttyS0  kernel console (the host keeps it as console.log)
 *   ttyS1  verdicts, one per line: "RUN <name> <timeout>",
 *          "PASS|FAIL|SKIP <name> [reason]", "EXIT <status>", "DONE"
 *   ttyS2  output of the tests (framed by "@@@ begin|end <name>" lines,
 *          then "@@@ time <name> <seconds> s")
 *          or of the command (raw)
 *
 * Configuration, written by the host into the initramfs:
 *   /etc/harness/mode     "tests", "cmd" or "probe"
 *   /etc/harness/modules  kernel modules to load, in order (paths)
 *   /etc/harness/tests    "<name> <timeout seconds>" per line, in order
 *   /etc/harness/cmd      shell command line (mode cmd), run in /host
 *   /etc/harness/timeout  its timeout in seconds (mode cmd)
 *   /lib/modules/stablesend.ko  loaded last when present, as the test
 *          "module-load"
 *
 * On the debug kernel (its command line sets STABLESEND_TIMEOUT_SCALE and
 * STABLESEND_DEBUG_KERNEL, which reach us and the tests as environment
 * variables) timeouts are scaled and a last test, "kmemleak", makes
 * kmemleak scan and fails on any unreferenced object.  Every boot that
 * runs tests ends with "settle": 5 s of quiet, then a last kernel log scan.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define MARKER "stablesend-harness: begin "

static int results = -1, output = -1;

/*
 * Kernel log lines that fail a test even when it exited 0.  Lockdep's
 * reports start with "WARNING: <what>" (circular locking, inconsistent
 * lock state, bad unlock balance, suspicious RCU usage...) but are
 * pr_warn(), not WARN(): they do not panic, and once lockdep has reported
 * it switches itself off, saying so.
 */
static const char *const splats[] = {
	"WARNING:", "BUG:", "Oops", "refcount_t", "leak", "KASAN", "UBSAN",
	"Call Trace", "possible circular locking", "inconsistent lock state",
	"possible recursive locking", "lock held when returning",
	"bad unlock balance", "held lock freed", "suspicious RCU usage",
	"unsafe locking scenario", "lockdep is turned off", "DEBUG_LOCKS_WARN_ON",
	"kmemleak",
};

/*
 * The debug kernel (tests/harness/debug-kernel) puts
 * STABLESEND_TIMEOUT_SCALE=N on its command line; the kernel hands it to
 * us (and the tests) as an environment variable.  Every test timeout is
 * multiplied by it.
 */
static int timeout_scale(void)
{
	const char *s = getenv("STABLESEND_TIMEOUT_SCALE");
	int n = s ? atoi(s) : 1;

	return n > 0 && n < 100 ? n : 1;
}

static void report(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(results, line, n) < 0)
		perror("write ttyS1");
}

static void poweroff(void)
{
	sync();
	reboot(RB_POWER_OFF);
	for (;;)
		pause();
}

static void die(const char *what)
{
	fprintf(stderr, "init: %s: %s\n", what, strerror(errno));
	poweroff();
}

static void mount_filesystems(void)
{
	static const struct { const char *src, *dst, *type; } fs[] = {
		{ "proc", "/proc", "proc" },
		{ "sysfs", "/sys", "sysfs" },
		{ "devtmpfs", "/dev", "devtmpfs" },
		{ "debugfs", "/sys/kernel/debug", "debugfs" },
		{ "tmpfs", "/tmp", "tmpfs" },
		{ "tmpfs", "/run", "tmpfs" },
		{ "cgroup2", "/sys/fs/cgroup", "cgroup2" },
	};
	unsigned int i;

	for (i = 0; i < sizeof(fs) / sizeof(fs[0]); i++) {
		mkdir(fs[i].dst, 0755);
		if (mount(fs[i].src, fs[i].dst, fs[i].type, 0, NULL) &&
		    errno != EBUSY)
			die(fs[i].dst);
	}
	mkdir("/dev/shm", 01777);
	mount("tmpfs", "/dev/shm", "tmpfs", 0, NULL);
	mkdir("/dev/pts", 0755);
	mount("devpts", "/dev/pts", "devpts", 0, "ptmxmode=0666");
}

/* Raw mode: no \n -> \r\n, no echo, bytes pass untouched. */
static int open_channel(const char *path)
{
	struct termios t;
	int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		die(path);
	if (!tcgetattr(fd, &t)) {
		cfmakeraw(&t);
		tcsetattr(fd, TCSANOW, &t);
	}
	return fd;
}

static void open_channels(void)
{
	results = open_channel("/dev/ttyS1");
	output = open_channel("/dev/ttyS2");
	/* The console stays the kernel's; our own messages go there too. */
	int con = open("/dev/console", O_RDWR | O_NOCTTY);

	if (con >= 0) {
		dup2(con, 1);
		dup2(con, 2);
		if (con > 2)
			close(con);
	}
	setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin", 1);
	setenv("HOME", "/tmp", 1);
	setenv("TERM", "dumb", 1);
}

static void bring_up_lo(void)
{
	struct ifreq ifr = { .ifr_name = "lo" };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr))
		die("lo");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr))
		die("lo up");
	close(fd);
}

/* One TCP connection over loopback in @family; errors are ignored. */
static void loopback_connect(int family)
{
	struct sockaddr_storage ss = { .ss_family = family };
	socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in) :
					    sizeof(struct sockaddr_in6);
	int l, c = -1, a = -1;

	if (family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else
		((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
	l = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return;
	if (!bind(l, (struct sockaddr *)&ss, len) && !listen(l, 1) &&
	    !getsockname(l, (struct sockaddr *)&ss, &len)) {
		c = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c >= 0 && !connect(c, (struct sockaddr *)&ss, len))
			a = accept(l, NULL, NULL);
	}
	if (a >= 0)
		close(a);
	if (c >= 0)
		close(c);
	close(l);
}

/*
 * The first TCP connections of a boot flip static keys: the
 * net_get_random_once() of secure_tcp_seq_and_ts_off() and of its IPv6
 * twin is switched off by deferred work, which patches kernel text through
 * int3.  Under TCG another vCPU running that code can trap on the int3
 * after the patching is over (QEMU and cross-modifying code), and the
 * kernel oopses in secure_tcp_seq_and_ts_off() in the middle of the first
 * test that connects.  Connect here, with nothing else running, and give
 * the work time to run: a death here comes before BOOT, and the host boots
 * once more.
 */
static void warm_up_network(void)
{
	loopback_connect(AF_INET);
	loopback_connect(AF_INET6);
	usleep(300 * 1000);
}

static int load_module(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return -1;
	ret = syscall(SYS_finit_module, fd, "", 0);
	if (ret && errno == EEXIST)
		ret = 0;
	close(fd);
	return ret;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void reap_orphans(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/* Copy a (small, /proc) file to the output channel. */
static void cat_to_output(const char *path)
{
	char buf[4096];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		if (write(output, buf, n) < 0)
			break;
	close(fd);
}

/* @path's first @size - 1 bytes, NUL-terminated; its length, or -1. */
static int read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), n;

	buf[0] = 0;
	if (fd < 0)
		return -1;
	n = read(fd, buf, size - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return n;
}

/*
 * Where a timed-out test hangs: the kernel stack of every thread of every
 * process in its session, before it is killed.
 */
static void dump_stacks(pid_t sid)
{
	DIR *proc = opendir("/proc"), *task;
	struct dirent *p, *t;
	char path[600], stat[512], *end;
	int s;

	while (proc && (p = readdir(proc))) {
		snprintf(path, sizeof(path), "/proc/%s/stat", p->d_name);
		if (read_small(path, stat, sizeof(stat)) < 0)
			continue;
		end = strrchr(stat, ')');
		/* ") state ppid pgrp session" */
		if (!end || sscanf(end + 1, " %*c %*d %*d %d", &s) != 1 || s != sid)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/task", p->d_name);
		task = opendir(path);
		while (task && (t = readdir(task))) {
			if (t->d_name[0] == '.')
				continue;
			dprintf(output, "--- harness: timeout, kernel stack of %.*s) task %s\n",
				(int)(end - stat), stat, t->d_name);
			snprintf(path, sizeof(path), "/proc/%s/task/%s/stack",
				 p->d_name, t->d_name);
			cat_to_output(path);
		}
		if (task)
			closedir(task);
	}
	if (proc)
		closedir(proc);
}

/*
 * And what the module and the network stack hold: stablesend's counters,
 * every TCP socket's queues, and any task (a kworker sending, say) whose
 * kernel stack is in the module.
 */
static void dump_module_state(void)
{
	static const char *const stats = "/sys/module/stablesend/stats";
	DIR *d = opendir(stats);
	struct dirent *e;
	char path[600], val[32], stack[4096];
	int n;

	dprintf(output, "--- harness: timeout, stablesend stats:");
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", stats, e->d_name);
		n = read_small(path, val, sizeof(val));
		val[n > 0 ? n - 1 : 0] = 0;	/* drops the newline */
		dprintf(output, " %s %s", e->d_name, val);
	}
	if (d)
		closedir(d);
	dprintf(output, "\n--- harness: timeout, /proc/net/tcp and tcp6:\n");
	cat_to_output("/proc/net/tcp");
	cat_to_output("/proc/net/tcp6");
	d = opendir("/proc");
	while (d && (e = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/%s/stack", e->d_name);
		if (read_small(path, stack, sizeof(stack)) > 0 &&
		    strstr(stack, "[stablesend]"))
			dprintf(output, "--- harness: timeout, in the module: task %s\n%s",
				e->d_name, stack);
	}
	if (d)
		closedir(d);
}

/* 1 when pid exited before deadline (its wait status in *status). */
static int wait_until(pid_t pid, int pidfd, double deadline, int *status)
{
	for (;;) {
		struct pollfd p = { .fd = pidfd, .events = POLLIN };
		double left = deadline - now();

		if (waitpid(pid, status, WNOHANG) == pid)
			return 1;
		if (left <= 0)
			return 0;
		if (pidfd < 0 || poll(&p, 1, left * 1000 + 1) < 0)
			usleep(100000);
	}
}

/*
 * Run argv in its own session with stdout/stderr on the output channel;
 * kill its whole process group after timeout seconds.  Returns the wait
 * status, or -1 on timeout.  A test stuck in the kernel past SIGKILL is
 * left behind so that the next tests still run.
 */
static int run_with_timeout(char *const argv[], const char *cwd, int timeout)
{
	int status = 0, pidfd;
	pid_t pid;

	pid = fork();
	if (pid < 0)
		die("fork");
	if (!pid) {
		int null = open("/dev/null", O_RDONLY);

		setsid();
		dup2(null, 0);
		dup2(output, 1);
		dup2(output, 2);
		if (chdir(cwd))
			perror(cwd);
		signal(SIGPIPE, SIG_DFL);
		execv(argv[0], argv);
		perror(argv[0]);
		_exit(127);
	}
	pidfd = syscall(SYS_pidfd_open, pid, 0);
	if (!wait_until(pid, pidfd, now() + timeout, &status)) {
		dump_stacks(pid);
		dump_module_state();
		kill(-pid, SIGKILL);
		if (!wait_until(pid, pidfd, now() + 10, &status))
			dprintf(output, "--- harness: pid %d survived SIGKILL for 10 s\n", pid);
		status = -1;
	}
	if (pidfd >= 0)
		close(pidfd);
	kill(-pid, SIGKILL); /* whatever the test left running */
	reap_orphans();
	return status;
}

/* Position a /dev/kmsg reader at the end, then log the marker. */
static int kmsg_mark(const char *name)
{
	int rd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	int wr = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);

	if (rd >= 0)
		lseek(rd, 0, SEEK_END);
	if (wr >= 0) {
		char line[300];
		int n = snprintf(line, sizeof(line), MARKER "%s\n", name);

		/* One write() per record: dprintf() gets EINVAL here. */
		if (write(wr, line, n) < 0)
			perror("/dev/kmsg");
		close(wr);
	}
	return rd;
}

/* First splat line logged since the marker, copied into hit. */
static int kmsg_scan(int rd, char *hit, size_t len)
{
	char rec[8192];
	ssize_t n;
	int found = 0;

	if (rd < 0)
		return 0;
	usleep(100000); /* let late reports (RCU, workqueues) land */
	for (;;) {
		char *msg;
		unsigned int i;

		n = read(rd, rec, sizeof(rec) - 1);
		if (n < 0 && errno == EPIPE)
			continue; /* overwritten records: keep reading */
		if (n <= 0)
			break;
		rec[n] = 0;
		msg = strchr(rec, ';');
		msg = msg ? msg + 1 : rec;
		msg[strcspn(msg, "\n")] = 0;
		if (!strncmp(msg, MARKER, strlen(MARKER)))
			continue;
		for (i = 0; i < sizeof(splats) / sizeof(splats[0]); i++) {
			if (!found && strstr(msg, splats[i])) {
				snprintf(hit, len, "%.200s", msg);
				found = 1;
			}
		}
	}
	close(rd);
	return found;
}

/*
 * The kernel's own modules (veth, tls and their dependencies) in order,
 * then ours: the test "module-load", failed by an insmod error or by a
 * kernel log splat while it loads.
 */
static void load_modules(void)
{
	const char *ours = "/lib/modules/stablesend.ko";
	FILE *f = fopen("/etc/harness/modules", "re");
	char path[512], hit[300];
	int rd, err = 0, splat;

	while (f && fgets(path, sizeof(path), f)) {
		path[strcspn(path, "\n")] = 0;
		if (path[0] && load_module(path)) {
			report("FAIL module-load insmod %s: %s", path,
			       strerror(errno));
			err = 1;
			break;
		}
	}
	if (f)
		fclose(f);
	if (err || access(ours, F_OK))
		return;
	report("RUN module-load %d", 60 * timeout_scale());
	rd = kmsg_mark("module-load");
	err = load_module(ours) ? errno : 0;
	splat = kmsg_scan(rd, hit, sizeof(hit));
	if (err)
		report("FAIL module-load insmod stablesend.ko: %s", strerror(err));
	else if (splat)
		report("FAIL module-load kernel log: %s", hit);
	else
		report("PASS module-load");
}

static void run_test(const char *name, int timeout)
{
	char path[300], hit[300];
	char *argv[] = { path, NULL };
	int status, rd, splat;
	double t = now();

	snprintf(path, sizeof(path), "/tests/%s", name);
	report("RUN %s %d", name, timeout);
	dprintf(output, "@@@ begin %s\n", name);
	rd = kmsg_mark(name);
	status = run_with_timeout(argv, "/tmp", timeout);
	dprintf(output, "\n@@@ end %s\n@@@ time %s %.1f s\n", name, name, now() - t);
	splat = kmsg_scan(rd, hit, sizeof(hit));

	if (status == -1)
		report("FAIL %s timeout after %d s", name, timeout);
	else if (WIFSIGNALED(status))
		report("FAIL %s killed by signal %d", name, WTERMSIG(status));
	else if (splat)
		report("FAIL %s kernel log: %s", name, hit);
	else if (WEXITSTATUS(status) == 77)
		report("SKIP %s", name);
	else if (WEXITSTATUS(status))
		report("FAIL %s exit status %d", name, WEXITSTATUS(status));
	else
		report("PASS %s", name);
}

static void run_tests(void)
{
	FILE *f = fopen("/etc/harness/tests", "re");
	char name[256];
	int timeout;

	while (f && fscanf(f, "%255s %d", name, &timeout) == 2)
		run_test(name, timeout * timeout_scale());
	if (f)
		fclose(f);
}

/*
 * Debug kernel: after the last test (zz-rmmod has unloaded our module),
 * make kmemleak scan twice -- it reports an object only when it is older
 * than 5 s and its checksum did not change since the previous scan -- and
 * fail "kmemleak" on any report; the report goes to the output channel.
 */
#define KMEMLEAK "/sys/kernel/debug/kmemleak"

static int kmemleak_scan(void)
{
	int fd = open(KMEMLEAK, O_WRONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return -1;
	ret = write(fd, "scan", 4) == 4 ? 0 : -1;
	close(fd);
	return ret;
}

static void check_kmemleak(void)
{
	char buf[4096], first[200] = "", hit[300];
	int fd, rd, i, err = 0, objects = 0, splat;
	ssize_t n;
	double t = now();

	if (access(KMEMLEAK, F_OK))
		return;
	report("RUN kmemleak %d", 120 * timeout_scale());
	dprintf(output, "@@@ begin kmemleak\n");
	rd = kmsg_mark("kmemleak");
	for (i = 0; i < 2 && !err; i++) {
		sleep(6);
		err = kmemleak_scan() ? errno : 0;
	}
	fd = open(KMEMLEAK, O_RDONLY | O_CLOEXEC);
	while (!err && fd >= 0 && (n = read(fd, buf, sizeof(buf) - 1)) > 0) {
		char *p = buf;

		buf[n] = 0;
		if (write(output, buf, n) < 0)
			break;
		while ((p = strstr(p, "unreferenced object"))) {
			p += strlen("unreferenced object");
			p += *p == ' ';
			if (!objects++)
				snprintf(first, sizeof(first), "%.*s",
					 (int)strcspn(p, ":\n"), p);
		}
	}
	if (fd >= 0)
		close(fd);
	dprintf(output, "\n--- harness: kmemleak scans took %.1f s\n@@@ end kmemleak\n",
		now() - t);
	splat = kmsg_scan(rd, hit, sizeof(hit));
	if (err)
		report("FAIL kmemleak cannot scan: %s (kmemleak disabled?)",
		       strerror(err));
	else if (objects)
		report("FAIL kmemleak %d unreferenced object%s, first %s",
		       objects, objects > 1 ? "s" : "", first);
	else if (splat)
		report("FAIL kmemleak kernel log: %s", hit);
	else
		report("PASS kmemleak");
}

static void run_command(void)
{
	char *argv[] = { "/bin/sh", "/etc/harness/cmd", NULL };
	FILE *f = fopen("/etc/harness/timeout", "re");
	int timeout = 600, status;

	if (f) {
		if (fscanf(f, "%d", &timeout) != 1)
			timeout = 600;
		fclose(f);
	}
	report("RUN cmd %d", timeout);
	status = run_with_timeout(argv, "/host", timeout);
	if (status == -1)
		report("EXIT 124 timeout after %d s", timeout);
	else if (WIFSIGNALED(status))
		report("EXIT %d killed by signal %d", 128 + WTERMSIG(status),
		       WTERMSIG(status));
	else
		report("EXIT %d", WEXITSTATUS(status));
}

static void read_mode(char *mode, size_t len)
{
	FILE *f = fopen("/etc/harness/mode", "re");

	snprintf(mode, len, "tests");
	if (f) {
		if (fgets(mode, len, f))
			mode[strcspn(mode, "\n")] = 0;
		fclose(f);
	}
}

/*
 * After the last test (and kmemleak): a quiet spell, then one more look
 * at the kernel log, as a verdict of its own.  Deferred work (the
 * module's reaper and kicks, socket and FIFO frees) can splat after the
 * last test's verdict; with panic_on_warn the guest then dies while
 * "settle" runs, which the harness fails too.
 */
#define SETTLE_S	5

static void check_settle(void)
{
	char hit[300];
	int rd;

	report("RUN settle %d", SETTLE_S + 10);
	rd = kmsg_mark("settle");
	sleep(SETTLE_S);
	if (kmsg_scan(rd, hit, sizeof(hit)))
		report("FAIL settle kernel log: %s", hit);
	else
		report("PASS settle");
}

int main(void)
{
	char mode[32];

	mount_filesystems();
	open_channels();
	read_mode(mode, sizeof(mode));
	if (strcmp(mode, "probe")) {
		bring_up_lo();
		warm_up_network();
	}
	report("BOOT");
	if (strcmp(mode, "probe")) {
		load_modules();
		if (!strcmp(mode, "cmd")) {
			run_command();
		} else {
			run_tests();
			check_kmemleak();
			check_settle();
		}
	}
	report("DONE");
	poweroff();
	return 0;
}
