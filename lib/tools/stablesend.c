// SPDX-License-Identifier: MIT
/*
 * stablesend - send a file range to host:port, show the module's status.
 *
 *   stablesend send FILE HOST:PORT [--offset N] [--length N]
 *   stablesend status
 *
 * Exit status: 0 success, 1 error, 2 usage.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stablesend.h>

/* Where the module publishes global state; each is optional. */
#define SYS_PARAMS	"/sys/module/stablesend/parameters"
#define SYS_STATS	"/sys/module/stablesend/stats"
#define DEBUGFS_DIR	"/sys/kernel/debug/stablesend"

static const char *prog = "stablesend";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s send FILE HOST:PORT [--offset N] [--length N]\n"
		"       %s status\n"
		"       %s --version | --help\n"
		"HOST may be a name, an IPv4 address or [IPv6]; N takes a\n"
		"K, M or G suffix (powers of 1024).\n",
		prog, prog, prog);
}

static int usage_error(const char *msg)
{
	fprintf(stderr, "%s: %s\n", prog, msg);
	usage(stderr);
	return 2;
}

/* Parse a byte count: decimal, 0x hex, optional K/M/G suffix. */
static int parse_size(const char *s, unsigned long long *out)
{
	unsigned long long v, mul = 1;
	char *end;

	if (!*s || *s == '-')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno)
		return -1;
	switch (*end) {
	case 'k': case 'K': mul = 1ULL << 10; end++; break;
	case 'm': case 'M': mul = 1ULL << 20; end++; break;
	case 'g': case 'G': mul = 1ULL << 30; end++; break;
	}
	if (*end || (v && mul > ~0ULL / v))
		return -1;
	*out = v * mul;
	return 0;
}

/* Split "host:port", "[v6]:port"; modifies s. */
static int split_hostport(char *s, char **host, char **port)
{
	char *colon;

	if (*s == '[') {
		char *close = strchr(s, ']');

		if (!close || close[1] != ':')
			return -1;
		*close = '\0';
		*host = s + 1;
		*port = close + 2;
	} else {
		colon = strrchr(s, ':');
		if (!colon || strchr(s, ':') != colon)
			return -1;	/* IPv6 needs brackets */
		*colon = '\0';
		*host = s;
		*port = colon + 1;
	}
	return **host && **port ? 0 : -1;
}

static int connect_to(const char *host, const char *port)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
	};
	struct addrinfo *res, *ai;
	int fd = -1, err, saved = 0;

	err = getaddrinfo(host, port, &hints, &res);
	if (err) {
		fprintf(stderr, "%s: %s:%s: %s\n", prog, host, port,
			gai_strerror(err));
		return -1;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
			break;
		saved = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		fprintf(stderr, "%s: connect to %s port %s: %s\n", prog, host,
			port, strerror(saved));
	return fd;
}

static int cmd_send(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "offset", required_argument, NULL, 'o' },
		{ "length", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long long offset = 0, length = 0, sent = 0;
	int have_length = 0, fd, sock, c, ret = 1;
	char *host, *port;
	const char *path;
	struct stat st;
	off_t off;

	optind = 1;
	while ((c = getopt_long(argc, argv, "o:l:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			if (parse_size(optarg, &offset))
				return usage_error("bad --offset");
			break;
		case 'l':
			if (parse_size(optarg, &length))
				return usage_error("bad --length");
			have_length = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 2)
		return usage_error("send needs FILE and HOST:PORT");
	path = argv[optind];
	if (split_hostport(argv[optind + 1], &host, &port))
		return usage_error("expected HOST:PORT or [IPV6]:PORT");
	if (offset > (unsigned long long)INT64_MAX)
		return usage_error("--offset too large");

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
		return 1;
	}
	if (fstat(fd, &st) < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
		goto out_file;
	}
	if (!have_length)
		length = (unsigned long long)st.st_size > offset ?
			 st.st_size - offset : 0;

	sock = connect_to(host, port);
	if (sock < 0)
		goto out_file;

	off = offset;
	while (sent < length) {
		unsigned long long left = length - sent;
		ssize_t n;

		n = stablesend_sendfile(sock, fd, &off,
					left > SSIZE_MAX ? SSIZE_MAX : left);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "%s: send %s: %s\n", prog, path,
				strerror(errno));
			goto out_sock;
		}
		if (n == 0) {
			fprintf(stderr, "%s: %s: end of file after %llu bytes\n",
				prog, path, sent);
			break;
		}
		sent += n;
	}
	switch (stablesend_sendfile_path()) {
	case STABLESEND_PATH_MODULE:
		printf("sent %llu bytes via module (%s)\n", sent,
		       STABLESEND_DEVICE);
		break;
	case STABLESEND_PATH_COPY:
		printf("sent %llu bytes via fallback (pread+send)\n", sent);
		break;
	default:
		printf("sent %llu bytes\n", sent);
	}
	ret = sent == length ? 0 : 1;
out_sock:
	if (close(sock) < 0 && !ret) {
		fprintf(stderr, "%s: close: %s\n", prog, strerror(errno));
		ret = 1;
	}
out_file:
	close(fd);
	return ret;
}

/* Print "name value" for every readable file of dir, or that it is absent. */
static void print_dir(const char *title, const char *dir)
{
	struct dirent *de;
	int printed = 0;
	DIR *d;

	d = opendir(dir);
	if (!d) {
		printf("%s: %s not present\n", title, dir);
		return;
	}
	printf("%s (%s):\n", title, dir);
	while ((de = readdir(d))) {
		char path[4096], buf[256];
		ssize_t n;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n < 0)
			continue;
		buf[n] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		printf("  %-24s %s\n", de->d_name, buf);
		printed++;
	}
	closedir(d);
	if (!printed)
		printf("  (nothing readable)\n");
}

/* Value of "KEY:\tVALUE" in an fdinfo text, or "-". */
static void fdinfo_field(const char *text, const char *key, char *out,
			 size_t size)
{
	size_t klen = strlen(key);
	const char *p = text;

	snprintf(out, size, "-");
	while (p && *p) {
		if (!strncmp(p, key, klen) && p[klen] == ':') {
			p += klen + 1;
			p += strspn(p, " \t");
			snprintf(out, size, "%.*s", (int)strcspn(p, "\n"), p);
			return;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
}

/* What one user holds over all its opens: the same in each open's fdinfo. */
static const char *const user_keys[] = {
	"stablesend-user", "stablesend-user-held", "stablesend-user-records",
	"stablesend-user-rx-kicks",
};

#define MAX_USERS	64

static struct {
	char val[sizeof(user_keys) / sizeof(user_keys[0])][32];
} users[MAX_USERS];
static unsigned int nr_users, users_left_out;

/* The user of the open whose fdinfo is @text, unless already listed. */
static void note_user(const char *text)
{
	char uid[32];
	unsigned int i;

	fdinfo_field(text, user_keys[0], uid, sizeof(uid));
	for (i = 0; i < nr_users; i++)
		if (!strcmp(users[i].val[0], uid))
			return;
	if (nr_users == MAX_USERS) {
		users_left_out++;
		return;
	}
	for (i = 0; i < sizeof(user_keys) / sizeof(user_keys[0]); i++)
		fdinfo_field(text, user_keys[i], users[nr_users].val[i],
			     sizeof(users[nr_users].val[i]));
	nr_users++;
}

/* One open of the device by @pid, fd @fd: its line of the table. */
static void print_open(const char *pid, const char *fd)
{
	static const char *const keys[] = {
		"stablesend-user", "stablesend-submitted",
		"stablesend-completed", "stablesend-failed",
		"stablesend-bytes-sent", "stablesend-mem-in-use",
		"stablesend-mem-pooled", "stablesend-mem-limit",
		"stablesend-records-pending",
	};
	char path[PATH_MAX], comm[64] = "?", text[4096], val[32];
	ssize_t n;
	size_t i;
	int f;

	snprintf(path, sizeof(path), "/proc/%s/comm", pid);
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f >= 0) {
		n = read(f, comm, sizeof(comm) - 1);
		comm[n > 0 ? n : 0] = '\0';
		comm[strcspn(comm, "\n")] = '\0';
		close(f);
	}
	snprintf(path, sizeof(path), "/proc/%s/fdinfo/%s", pid, fd);
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return;
	n = read(f, text, sizeof(text) - 1);
	close(f);
	if (n <= 0)
		return;
	text[n] = '\0';
	printf("  %7s %-15s %4s", pid, comm, fd);
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		fdinfo_field(text, keys[i], val, sizeof(val));
		printf(i ? " %12s" : " %6s", val);
	}
	printf("\n");
	note_user(text);
}

/*
 * Every open of the device in the processes we may look at (all of them
 * for root): what each holds, from /proc/PID/fdinfo; then what each of
 * their users holds over all its opens (user_limit and user_records bound
 * those: module parameters).
 */
static void print_opens(void)
{
	struct dirent *p, *f;
	struct stat dev, st;
	int seen = 0;
	DIR *proc, *fds;

	if (stat(STABLESEND_DEVICE, &dev) || !S_ISCHR(dev.st_mode))
		return;
	proc = opendir("/proc");
	if (!proc)
		return;
	printf("opens (/proc/PID/fdinfo%s):\n",
	       geteuid() ? "; run as root to see every process" : "");
	printf("  %7s %-15s %4s %6s %12s %12s %12s %12s %12s %12s %12s %12s\n",
	       "PID", "COMMAND", "FD", "UID", "SUBMITTED", "COMPLETED",
	       "FAILED", "BYTES_SENT", "MEM_IN_USE", "MEM_POOLED",
	       "MEM_LIMIT", "RECORDS");
	while ((p = readdir(proc))) {
		char path[PATH_MAX];

		if (p->d_name[strspn(p->d_name, "0123456789")] ||
		    atoi(p->d_name) == getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%s/fd", p->d_name);
		fds = opendir(path);
		if (!fds)
			continue;
		while ((f = readdir(fds))) {
			if (f->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "/proc/%s/fd/%s",
				 p->d_name, f->d_name);
			if (stat(path, &st) || !S_ISCHR(st.st_mode) ||
			    st.st_rdev != dev.st_rdev)
				continue;
			print_open(p->d_name, f->d_name);
			seen++;
		}
		closedir(fds);
	}
	closedir(proc);
	if (!seen) {
		printf("  (none)\n");
		return;
	}
	printf("users of those opens (all their opens together):\n");
	printf("  %6s %12s %12s %12s\n", "UID", "MEM_HELD", "RECORDS",
	       "RX_KICKS");
	for (unsigned int i = 0; i < nr_users; i++)
		printf("  %6s %12s %12s %12s\n", users[i].val[0],
		       users[i].val[1], users[i].val[2], users[i].val[3]);
	if (users_left_out)
		printf("  (%u more opens of other users not shown)\n",
		       users_left_out);
}

static int cmd_status(int argc, char **argv)
{
	struct stablesend_counters c;
	struct stablesend *ss;
	__u64 feat;
	int i, err;

	(void)argv;
	if (argc != 1)
		return usage_error("status takes no arguments");

	printf("library: libstablesend %s, ABI %d\n", stablesend_version(),
	       STABLESEND_ABI_VERSION);
	ss = stablesend_open(-1, 0);
	if (!ss) {
		err = errno;
		if (err == ENOENT || err == ENODEV || err == ENXIO) {
			printf("module: not loaded (%s: %s); "
			       "stablesend_sendfile falls back to pread+send\n",
			       STABLESEND_DEVICE, strerror(err));
			if (getenv(STABLESEND_ENV_REQUIRE_MODULE) &&
			    !strcmp(getenv(STABLESEND_ENV_REQUIRE_MODULE), "1")) {
				fprintf(stderr, "%s: %s=1 and no module\n",
					prog, STABLESEND_ENV_REQUIRE_MODULE);
				return 1;
			}
			return 0;
		}
		fprintf(stderr, "%s: %s: %s\n", prog, STABLESEND_DEVICE,
			strerror(err));
		return 1;
	}

	printf("module: loaded, ABI %u\n", stablesend_abi_version(ss));
	feat = stablesend_features(ss);
	printf("features: 0x%llx", (unsigned long long)feat);
	for (i = 0; i < 64; i++) {
		const char *name;

		if (!(feat & (1ULL << i)))
			continue;
		name = stablesend_feature_name(1ULL << i);
		if (name)
			printf(" %s", name);
		else
			printf(" bit%d", i);
	}
	printf("\nmemory limit: %llu bytes\n",
	       (unsigned long long)stablesend_mem_limit(ss));

	err = stablesend_counters(ss, &c);
	if (err) {
		fprintf(stderr, "%s: counters: %s\n", prog, strerror(-err));
		stablesend_close(ss);
		return 1;
	}
	printf("this open: submitted %llu completed %llu failed %llu "
	       "cancelled %llu bytes_sent %llu mem_in_use %llu mem_peak %llu "
	       "cqes_pending %llu copied %llu\n",
	       (unsigned long long)c.submitted, (unsigned long long)c.completed,
	       (unsigned long long)c.failed, (unsigned long long)c.cancelled,
	       (unsigned long long)c.bytes_sent,
	       (unsigned long long)c.mem_in_use,
	       (unsigned long long)c.mem_peak,
	       (unsigned long long)c.cqes_pending,
	       (unsigned long long)c.copied);
	stablesend_close(ss);

	print_opens();
	print_dir("module parameters", SYS_PARAMS);
	print_dir("global counters", SYS_STATS);
	print_dir("debugfs", DEBUGFS_DIR);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("stablesend %s\n", stablesend_version());
		return 0;
	}
	if (!strcmp(argv[1], "send"))
		return cmd_send(argc - 1, argv + 1);
	if (!strcmp(argv[1], "status"))
		return cmd_status(argc - 1, argv + 1);
	return usage_error("unknown command");
}
