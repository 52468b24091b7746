// SPDX-License-Identifier: GPL-2.0
/*
 * stablesend_sendfile() and stablesend_sendfile_hdtr() on the module path:
 * the host tests sendfile-compare (the sendfile(2) contract, call for call
 * against the kernel's own; it fails a socket call the module did not
 * send), sendfile-stable (the snapshot under fire) and sendfile-hdtr
 * (header, range and trailer), which on a host without the module only
 * see the copy path, built here against libstablesend.a and run with the
 * module loaded.  sendfile-stable runs a second time with
 * STABLESEND_REQUIRE_MODULE=1 (no fallback allowed; the other two also
 * send to files and pipes, which only the copy path takes).  The last
 * call of sendfile-stable and sendfile-hdtr, to a socket, must have taken
 * the module path; a skip is a failure.  sendfile-compare also reads a
 * RAM disk (brd), which the library must send as a copy.
 * test-timeout: 600
 */
#define _GNU_SOURCE
#include <sys/wait.h>

#define main compare_main
#include "../host/sendfile-compare.c"
#undef main

#define real_sendfile stable_real_sendfile
#define main stable_main
#include "../host/sendfile-stable.c"
#undef main
#undef real_sendfile

#undef FILE_SIZE
#define main hdtr_main
#include "../host/sendfile-hdtr.c"
#undef main

static const struct {
	const char *name;
	int (*fn)(void);
	int require;	/* also run with STABLESEND_REQUIRE_MODULE=1 */
	int path;	/* its last call went to a socket: the module's */
} subs[] = {
	{ "sendfile-compare", compare_main, 0, 0 },
	{ "sendfile-stable", stable_main, 1, 1 },
	{ "sendfile-hdtr", hdtr_main, 0, 1 },
};

/* One sub-test in a child of its own: fresh library state, its own env. */
static int run(unsigned int i, int require)
{
	pid_t pid;
	int st;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid) {
		int rc;

		if (require)
			setenv(STABLESEND_ENV_REQUIRE_MODULE, "1", 1);
		else
			unsetenv(STABLESEND_ENV_REQUIRE_MODULE);
		/* The harness stages and loads brd where the kernel has it. */
		blk_required = !access("/lib/modules/kernel/brd.ko", F_OK);
		rc = subs[i].fn();
		if (rc == T_SKIP)
			printf("FAIL: %s skipped although the module is loaded\n",
			       subs[i].name);
		if (subs[i].path &&
		    stablesend_sendfile_path() != STABLESEND_PATH_MODULE) {
			printf("FAIL: %s: the last call took path %d, not the module\n",
			       subs[i].name, stablesend_sendfile_path());
			rc = T_FAIL;
		}
		fflush(stdout);
		_exit(rc == T_PASS ? 0 : 1);
	}
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) && !WEXITSTATUS(st) ? 0 : -1;
}

int main(void)
{
	unsigned int i;
	int require, failed = 0;

	for (i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
		for (require = 0; require <= subs[i].require; require++) {
			int bad = run(i, require);

			printf("%s %s%s\n", bad ? "FAIL" : "ok", subs[i].name,
			       require ? " (STABLESEND_REQUIRE_MODULE=1)" : "");
			failed |= bad;
		}
	}
	return failed ? T_FAIL : T_PASS;
}
