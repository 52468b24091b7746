// SPDX-License-Identifier: GPL-2.0
/*
 * An admin sees which processes use the module and what each holds:
 * /proc/PID/fdinfo/FD of a device fd shows what that open submitted and
 * sent, the memory it holds and its limit, and the user it counts against;
 * `stablesend status` lists every open with its process, and once each
 * user with what all its opens hold (memory, records).  The tool's own
 * source is built into this test (its main() renamed), so what is checked
 * is the code that ships.
 */
#include "common.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define main stablesend_tool_main
#include "tools/stablesend.c"
#undef main

#define LEN	(64 * 1024)
#define LIMIT	(4 << 20)

/* One open with a request whose pages a peer that never reads holds. */
static int open_and_park(int file, int *peer)
{
	int dev = ss_dev(), a;
	struct stablesend_req r;

	if (ss_setup(dev, -1, LIMIT))
		return -1;
	unix_pair(&a, peer);
	r = ss_req(file, a, 0, LEN, 1);
	if (ss_submit(dev, &r, 1) != 1)
		return -1;
	return dev;
}

/* `stablesend status` in a child of ours, its output in @out. */
static int run_status(char *out, size_t n)
{
	char tmpl[] = "/tmp/fdinfo-status.XXXXXX";
	int fd = mkstemp(tmpl), st;
	pid_t pid;

	if (fd < 0)
		return -1;
	unlink(tmpl);
	pid = fork();
	if (!pid) {
		char *argv[] = { "stablesend", "status", NULL };

		int rc;

		dup2(fd, 1);
		rc = stablesend_tool_main(2, argv);
		fflush(stdout);
		_exit(rc ? 1 : 0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st))
		return -1;
	n = pread(fd, out, n - 1, 0);
	close(fd);
	if ((ssize_t)n < 0)
		return -1;
	out[n] = '\0';
	return 0;
}

/* The status line of @pid's fd @fd: its fields, or 0 if not listed. */
static int status_line(const char *out, pid_t pid, int fd, char *uid,
		       long long *submitted, long long *inuse,
		       long long *records)
{
	const char *p;

	for (p = out; p; p = strchr(p, '\n')) {
		char comm[64];
		int lpid, lfd;

		if (*p == '\n')
			p++;
		if (sscanf(p, " %d %63s %d %15s %lld %*s %*s %*s %lld %*s %*s %lld",
			   &lpid, comm, &lfd, uid, submitted, inuse,
			   records) == 7 &&
		    lpid == pid && lfd == fd)
			return 1;
	}
	return 0;
}

/* The users-table line of @uid: its memory and records, or 0 if not listed. */
static int user_line(const char *out, const char *uid, long long *held,
		     long long *records)
{
	const char *p = strstr(out, "\nusers of those opens");

	for (; p; p = strchr(p, '\n')) {
		char luid[16];

		if (*p == '\n')
			p++;
		if (sscanf(p, " %15s %lld %lld", luid, held, records) == 3 &&
		    !strcmp(luid, uid))
			return 1;
	}
	return 0;
}

int main(void)
{
	int file = temp_file(1 << 20, 'f'), dev, peer, sync[2], back[2];
	long long submitted, inuse, held, records;
	char out[16384], uid[16];
	int cfd = -1, st;
	pid_t child;

	dev = open_and_park(file, &peer);
	REQUIRE(dev >= 0, "submit to a peer that does not read");
	CHECK(fdinfo_num(getpid(), dev, "stablesend-submitted") == 1,
	      "fdinfo: submitted is 1");
	CHECK(fdinfo_num(getpid(), dev, "stablesend-bytes-sent") == LEN,
	      "fdinfo: bytes-sent is %d", LEN);
	CHECK(fdinfo_num(getpid(), dev, "stablesend-mem-in-use") >= LEN,
	      "fdinfo: mem-in-use covers the parked request");
	CHECK(fdinfo_num(getpid(), dev, "stablesend-mem-limit") == LIMIT,
	      "fdinfo: mem-limit is the SETUP limit");
	CHECK(fdinfo_num(getpid(), dev, "stablesend-user") == 0,
	      "fdinfo: user is root");
	CHECK(fdinfo_num(getpid(), dev, "stablesend-user-held") >= LEN,
	      "fdinfo: the user holds the parked request");

	/* Another user's open, in another process. */
	REQUIRE(pipe(sync) == 0 && pipe(back) == 0, "pipe");
	child = fork();
	REQUIRE(child >= 0, "fork");
	if (!child) {
		int fd, p;
		char c;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
			_exit(2);
		fd = open_and_park(file, &p);
		if (write(sync[1], &fd, sizeof(fd)) != sizeof(fd))
			_exit(3);
		/* Until the parent has looked. */
		_exit(read(back[0], &c, 1) == 1 ? 0 : 4);
	}
	REQUIRE(read(sync[0], &cfd, sizeof(cfd)) == sizeof(cfd) && cfd >= 0,
		"the child as nobody submitted");
	CHECK(fdinfo_num(child, cfd, "stablesend-user") == 65534,
	      "fdinfo: the child's open counts against nobody (65534)");
	CHECK(fdinfo_num(child, cfd, "stablesend-submitted") == 1,
	      "fdinfo: the child's open submitted 1");
	CHECK(fdinfo_num(child, cfd, "stablesend-mem-in-use") >= LEN,
	      "fdinfo: the child's open holds its request");

	REQUIRE(run_status(out, sizeof(out)) == 0, "stablesend status");
	printf("%s", out);
	CHECK(status_line(out, getpid(), dev, uid, &submitted, &inuse, &records) &&
	      !strcmp(uid, "0") && submitted == 1 && inuse >= LEN,
	      "status lists our open (uid 0, 1 submitted, memory in use)");
	CHECK(status_line(out, child, cfd, uid, &submitted, &inuse, &records) &&
	      !strcmp(uid, "65534") && submitted == 1 && inuse >= LEN &&
	      records == 1,
	      "status lists the child's open (uid 65534, its SENT record unread)");
	/* nobody's one open: its one request's memory and its SENT record. */
	CHECK(user_line(out, "65534", &held, &records) && held >= LEN &&
	      records == fdinfo_num(child, cfd, "stablesend-user-records") &&
	      records == 1,
	      "status lists user 65534 once, holding its request and 1 record");
	CHECK(user_line(out, "0", &held, &records) && held >= LEN &&
	      records >= 1, "status lists user 0");

	/* The child exits: its open is gone from the list. */
	REQUIRE(write(back[1], "x", 1) == 1, "release the child");
	REQUIRE(waitpid(child, &st, 0) == child, "waitpid");
	CHECK(WIFEXITED(st) && !WEXITSTATUS(st), "child exit status %d", st);
	REQUIRE(run_status(out, sizeof(out)) == 0, "stablesend status again");
	CHECK(!status_line(out, child, cfd, uid, &submitted, &inuse, &records),
	      "status no longer lists the exited child");
	CHECK(status_line(out, getpid(), dev, uid, &submitted, &inuse, &records),
	      "status still lists our open");

	close(peer);
	close(dev);
	CHECK(ss_drained(10), "everything returned after close");
	return test_result();
}
