// SPDX-License-Identifier: MIT
/*
 * libstablesend-preload.so: stable sendfile(2) for unmodified programs.
 *
 * LD_PRELOADed, it defines sendfile() and sendfile64() (the same call on
 * LP64: off_t is 64 bits, and the kernel's sendfile there is sendfile64).
 * A call from a regular file to a TCP or AF_UNIX stream socket goes
 * through libstablesend's own objects, linked in; anything else goes to
 * the next definition, libc's, found with dlsym(RTLD_NEXT).  With the
 * module, every call but an O_DIRECT input's is first one SEND, and what
 * the module refuses passes through (ENOTSOCK; EOPNOTSUPP but for a TCP
 * or AF_UNIX stream socket, which takes the copy path; EINVAL for an input
 * that is not a regular file): few checks of our own on the common path.
 * Without it, the descriptors are looked at here and stable calls take
 * stablesend_sendfile()'s copy path, pread(2) + send(2): libstablesend
 * never calls sendfile(), so there is no recursion.
 *
 * Environment, read once when the library is loaded:
 *	STABLESEND_PRELOAD_DISABLE=1	pass every call through
 *	STABLESEND_PRELOAD_MIN=N	pass calls of fewer than N bytes through
 *	STABLESEND_PRELOAD_LOG=1|/path	one line per process, on its first
 *					call, naming the path calls take
 * and libstablesend's STABLESEND_REQUIRE_MODULE.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/internal.h"

/*
 * Where off_t is 32 bits, sendfile() takes a 32-bit offset and fails
 * with EOVERFLOW past 2 GiB: it would need a wrapper of its own.
 */
#if !defined(__LP64__)
#error "libstablesend-preload is built for LP64 targets only"
#endif

#define ENV_DISABLE	"STABLESEND_PRELOAD_DISABLE"
#define ENV_MIN		"STABLESEND_PRELOAD_MIN"
#define ENV_LOG		"STABLESEND_PRELOAD_LOG"

#define PFX		"libstablesend-preload"

/* Not in a header: <sys/sendfile.h> renames sendfile under LFS. */
ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count);
ssize_t sendfile64(int out_fd, int in_fd, off_t *offset, size_t count);

typedef ssize_t (*sendfile_fn)(int, int, off_t *, size_t);

static struct {
	int disable;
	size_t min;
	const char *log;	/* NULL, "" for stderr, or a path */
} cfg;

/*
 * The log file's path, copied: servers such as nginx write their process
 * title over the environment strings getenv() points into.
 */
static char log_path[PATH_MAX];

static sendfile_fn next_sendfile, next_sendfile64;
static pid_t logged_pid;	/* the process that printed the line */

/* One line to stderr, or to the log file; errno is left alone. */
static void say(const char *path, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void say(const char *path, const char *fmt, ...)
{
	int err = errno, fd = 2;
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		goto out;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (path && *path) {
		fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC |
			  O_NOCTTY, 0644);
		if (fd < 0)
			fd = 2;
	}
	/* One write(2): lines of several processes do not mix. */
	if (write(fd, line, n) < 0) {
		/* nowhere to report it */
	}
	if (fd != 2)
		close(fd);
out:
	errno = err;
}

/* "0" or "1", as STABLESEND_REQUIRE_MODULE; other values are ignored. */
static int env_flag(const char *name)
{
	const char *s = getenv(name);

	if (!s || !*s || !strcmp(s, "0"))
		return 0;
	if (!strcmp(s, "1"))
		return 1;
	say(NULL, PFX ": ignoring %s=%s: not 0 or 1", name, s);
	return 0;
}

/* A decimal byte count, nothing else: "", "1k", "-1", " 5" are ignored. */
static size_t env_size(const char *name)
{
	const char *s = getenv(name);
	unsigned long long v;
	char *end;

	if (!s)
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end || errno || v > SIZE_MAX) {
		say(NULL, PFX ": ignoring %s=%s: not a decimal byte count",
		    name, s);
		return 0;
	}
	return v;
}

__attribute__((constructor))
static void preload_init(void)
{
	const char *log = getenv(ENV_LOG);
	int err = errno;

	cfg.disable = env_flag(ENV_DISABLE);
	cfg.min = env_size(ENV_MIN);
	if (log && !strcmp(log, "1"))
		cfg.log = "";
	else if (log && log[0] == '/' && strlen(log) < sizeof(log_path))
		cfg.log = strcpy(log_path, log);
	else if (log && *log && strcmp(log, "0"))
		say(NULL, PFX ": ignoring %s=%s: not 0, 1 or an absolute path (shorter than PATH_MAX)",
		    ENV_LOG, log);
	errno = err;
}

/*
 * The line of STABLESEND_PRELOAD_LOG, once per process (a child of fork()
 * prints its own), on the first call, before the call.
 */
static void log_once(void)
{
	pid_t me = getpid();
	char min[64] = "";
	int path, why;

	if (__atomic_exchange_n(&logged_pid, me, __ATOMIC_RELAXED) == me)
		return;
	if (cfg.min)
		snprintf(min, sizeof(min), ", calls under %zu bytes pass through",
			 cfg.min);
	if (cfg.disable) {
		say(cfg.log, PFX "[%d] %s: path=pass-through (" ENV_DISABLE
		    "=1: sendfile(2) unchanged)", (int)me,
		    program_invocation_short_name);
		return;
	}
	path = ss_sendfile_probe(&why);
	if (path == STABLESEND_PATH_MODULE)
		say(cfg.log, PFX "[%d] %s: path=module (stable sendfile to "
		    "stream sockets through " STABLESEND_DEVICE "%s)", (int)me,
		    program_invocation_short_name, min);
	else if (path == STABLESEND_PATH_COPY)
		say(cfg.log, PFX "[%d] %s: path=copy (stable sendfile to "
		    "stream sockets by pread+send: module unavailable: %s%s)",
		    (int)me, program_invocation_short_name,
		    why ? strerror(why) : "no synchronous SEND", min);
	else
		say(cfg.log, PFX "[%d] %s: path=none (" STABLESEND_ENV_REQUIRE_MODULE
		    "=1 and the module is unavailable: sendfile to stream "
		    "sockets fails: %s%s)", (int)me,
		    program_invocation_short_name, strerror(why), min);
}

/*
 * Without the module: does the call go to stablesend_sendfile()'s copy
 * path?  errno may change.
 */
static int stable_route(int out_fd, int in_fd)
{
	struct stat st;
	int fl;

	if (fstat(in_fd, &st) || !S_ISREG(st.st_mode))
		return 0;
	/*
	 * The copy path cannot pread() O_DIRECT files into its buffer, and
	 * sendfile(2) copies them already (copy_splice_read()): stable.
	 */
	fl = fcntl(in_fd, F_GETFL);
	if (fl < 0 || (fl & O_DIRECT))
		return 0;
	return ss_stable_socket(out_fd);
}

static sendfile_fn next(sendfile_fn *fn, const char *name)
{
	sendfile_fn f = __atomic_load_n(fn, __ATOMIC_ACQUIRE);

	if (!f) {
		f = (sendfile_fn)dlsym(RTLD_NEXT, name);
		__atomic_store_n(fn, f, __ATOMIC_RELEASE);
	}
	return f;
}

static ssize_t preload_sendfile(sendfile_fn *fn, const char *name,
				int out_fd, int in_fd, off_t *offset,
				size_t count)
{
	int err = errno, stable;
	sendfile_fn f;

	if (cfg.log)
		log_once();
	if (!cfg.disable && count >= cfg.min) {
		/* One SEND: the module tells what it does not take. */
		ssize_t ret = ss_sendfile_preload(out_fd, in_fd, offset, count);

		if (ret != SS_DECLINED && ret != SS_UNDECIDED)
			return ret;
		stable = ret == SS_UNDECIDED && stable_route(out_fd, in_fd);
		errno = err;
		if (stable)
			return stablesend_sendfile(out_fd, in_fd, offset, count);
	}
	f = next(fn, name);
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	return f(out_fd, in_fd, offset, count);
}

ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	return preload_sendfile(&next_sendfile, "sendfile", out_fd, in_fd,
				offset, count);
}

ssize_t sendfile64(int out_fd, int in_fd, off_t *offset, size_t count)
{
	return preload_sendfile(&next_sendfile64, "sendfile64", out_fd, in_fd,
				offset, count);
}
