// SPDX-License-Identifier: GPL-2.0
/*
 * Structured fuzzer for /dev/stablesend.  The run is cut into chunks of
 * CHUNK_ITERS iterations; each chunk is a forked worker (two at a time)
 * with its own files, sockets of every kind, pipes, eventfds, device fds
 * and bad memory, a thread draining the peers (pausing and resetting them
 * at random) and a chaos thread that closes, dup2()s and shuts down the
 * fds the main thread submits with, closes and reopens device fds while
 * an ioctl runs on them, cancels the SEND in progress, toggles O_NONBLOCK
 * and truncates the file.  The main thread issues SETUP, SUBMIT, SEND,
 * CANCEL, COUNTERS, ioctl numbers around the 0xB5 magic, read, poll,
 * write and mmap, with random and boundary values and pointers (NULL,
 * unmapped, read-only, PROT_NONE, straddling a mapped/unmapped boundary,
 * kernel addresses), all through raw syscalls.  Every 25th chunk also
 * floods one open with 40 batches of 1024 requests and reads nothing.
 *
 * Checked: every device call returns a result in range or an errno that
 * uapi/linux/stablesend.h documents for it (else the input is printed);
 * completion records carry a submitted user_data, valid flags and a
 * documented result; no worker dies or hangs; after the last worker
 * exited, requests_in_flight, bytes_in_flight and pool_bytes drain to 0
 * and no context is left; the fuzzer's own fds and threads are as before.
 *
 * Usage: fuzz [SEED [ITERATIONS]]    (or SS_FUZZ_SEED, SS_FUZZ_ITERS)
 *        SS_FUZZ_CHUNK=N fuzz SEED   runs chunk N only (reproduce a failure)
 * The chaos thread runs against the clock, so a chunk replays the same
 * sequence of calls but not the same interleaving.
 *
 * test-timeout: 240
 */
#include "common.h"
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <dirent.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

/* make fuzz raises this (10x the make check budget). */
#define FUZZ_SCALE	1
#define DEFAULT_ITERS	(50000 * FUZZ_SCALE)	/* 40-100 s under TCG */
#define MAX_SECS	(150 * FUZZ_SCALE)	/* stop there; under 90% of DEFAULT_ITERS fails */
#define CHUNK_ITERS	400
#define NWORKERS	2
#define CHUNK_TIMEOUT	90	/* seconds: a worker running longer hangs */
#define ERRMAX		600
#define PG		4096UL

enum op {
	OP_SETUP, OP_SUBMIT, OP_SEND, OP_CANCEL, OP_COUNTERS, OP_RANDCMD,
	OP_READ, OP_POLL, OP_WRITE, OP_MMAP, OP_OTHERFD, OP_REOPEN, OP_FLOOD,
	NOPS
};
static const char *const op_name[NOPS] = {
	"setup", "submit", "send", "cancel", "counters", "random-cmd", "read",
	"poll", "write", "mmap", "ioctl-other-fd", "reopen", "flood",
};

/* Shared between the parent and the workers (MAP_SHARED). */
struct shared {
	long iters, calls[NOPS], errs[NOPS][ERRMAX], ok[NOPS];
	long accepted, cqes, cqe_res[4], sigpipes, failures, hangs;
	long bad[NOPS], bad_cqes;	/* violations by call, by record */
};
static struct shared *sh;

static uint64_t seed;
static long chunk;
static __thread int cur_op = -1;		/* the call being checked, for the tally */

/* --- random numbers ------------------------------------------------------ */

struct rng { uint64_t s; };

static uint64_t rnd(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t below(struct rng *r, uint64_t n)
{
	return n ? rnd(r) % n : 0;
}

static int chance(struct rng *r, int one_in)
{
	return below(r, one_in) == 0;
}

static uint64_t boundary(struct rng *r)
{
	static const uint64_t v[] = {
		0, 1, 2, 7, 4095, 4096, 4097, 65535, 65536, 65537,
		INT_MAX, (uint64_t)INT_MAX + 1, UINT_MAX, (uint64_t)UINT_MAX + 1,
		LLONG_MAX, (uint64_t)LLONG_MAX + 1, (uint64_t)LLONG_MAX - 4095,
		~0ULL, ~0ULL - 1, 1ULL << 62, 1ULL << 32, 16 << 20,
	};

	return v[below(r, sizeof(v) / sizeof(v[0]))];
}

/* Mostly small, sometimes a boundary, sometimes anything. */
static uint64_t fuzz_u64(struct rng *r, uint64_t small)
{
	switch (below(r, 8)) {
	case 0:
		return boundary(r);
	case 1:
		return rnd(r);
	default:
		return below(r, small);
	}
}

/* --- the worker's world -------------------------------------------------- */

#define NDEV	3
enum {
	K_DEV, K_FILE_RW, K_FILE_RO, K_FILE_WO, K_FILE_PATH, K_FILE_EMPTY,
	K_MEMFD, K_DIR, K_PIPE_R, K_PIPE_W, K_EVENTFD, K_EPOLL, K_DEVNULL,
	K_TCP4, K_TCP6, K_UNIX, K_UNIX_SLOW, K_TCP_LISTEN, K_TCP_UNCONN,
	K_UDP, K_UNIX_DGRAM, K_SEQPACKET, K_TCP_SHUT, K_CLOSED, NKINDS
};
static const char *const kind_name[NKINDS] = {
	"dev", "file-rw", "file-ro", "file-wo", "file-opath", "file-empty",
	"memfd", "dir", "pipe-r", "pipe-w", "eventfd", "epoll", "devnull",
	"tcp4", "tcp6", "unix", "unix-slow", "tcp-listen", "tcp-unconnected",
	"udp", "unix-dgram", "seqpacket", "tcp-shut", "closed",
};

/* keep: a copy of fd the chaos thread restores it from; peer: peers[] index */
struct slot { int fd, kind, keep, peer; };
static struct slot slots[NDEV + NKINDS];
static int nslots;
static int peers[8], npeers;
static volatile int paused[8];
static volatile int stop, hold, held;	/* hold: chaos, stand still */
static volatile uint64_t send_ud;	/* user_data of the SEND in progress */
static int file_fd;			/* the data file, for the chaos thread */
static uint64_t file_size;
static unsigned char *good;		/* 2 * HDTR_MAX + pages of pattern */
static unsigned char *bad;		/* RW | NONE | unmapped | RO pages */
static pthread_mutex_t ud_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *ud_set;		/* every user_data submitted */
#define UD_SET	(1 << 18)
static uint64_t ud_next;
static timer_t timer;

static void ud_add(uint64_t v)
{
	uint64_t h = (v * 0x9e3779b97f4a7c15ULL) >> 46, key = v + 1;

	pthread_mutex_lock(&ud_lock);
	while (ud_set[h] && ud_set[h] != key)
		h = (h + 1) & (UD_SET - 1);
	ud_set[h] = key;	/* never full: fewer than UD_SET / 2 per chunk */
	pthread_mutex_unlock(&ud_lock);
}

static int ud_has(uint64_t v)
{
	uint64_t h = (v * 0x9e3779b97f4a7c15ULL) >> 46, key = v + 1;
	int found;

	pthread_mutex_lock(&ud_lock);
	while (ud_set[h] && ud_set[h] != key)
		h = (h + 1) & (UD_SET - 1);
	found = ud_set[h] == key;
	pthread_mutex_unlock(&ud_lock);
	return found;
}

/* Report a violation; true when printed (the first 30 are). */
static int fail(long iter, const char *fmt, ...)
{
	va_list ap;

	if (cur_op >= 0)
		__atomic_fetch_add(&sh->bad[cur_op], 1, __ATOMIC_RELAXED);
	if (__atomic_fetch_add(&sh->failures, 1, __ATOMIC_RELAXED) >= 30)
		return 0;
	printf("FAIL seed %llu chunk %ld iter %ld: ", (unsigned long long)seed,
	       chunk, iter);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return 1;
}

static void add_slot(int fd, int kind)
{
	REQUIRE(fd >= 0, "creating a %s fd", kind_name[kind]);
	slots[nslots].fd = fd;
	slots[nslots].peer = -1;
	slots[nslots++].kind = kind;
}

static void add_peer(int s)
{
	slots[nslots - 1].peer = npeers;
	peers[npeers++] = s;
}

static int listener(int family, int type, struct sockaddr_storage *ss,
		    socklen_t *len)
{
	int l = socket(family, type | SOCK_CLOEXEC, 0);

	memset(ss, 0, sizeof(*ss));
	ss->ss_family = family;
	*len = family == AF_INET ? sizeof(struct sockaddr_in)
				 : sizeof(struct sockaddr_in6);
	if (family == AF_INET)
		((struct sockaddr_in *)ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else
		((struct sockaddr_in6 *)ss)->sin6_addr = in6addr_loopback;
	REQUIRE(l >= 0 && bind(l, (struct sockaddr *)ss, *len) == 0 &&
		getsockname(l, (struct sockaddr *)ss, len) == 0, "listener");
	return l;
}

static void make_world(struct rng *r)
{
	char path[64];
	unsigned char *b;
	struct sockaddr_storage ss;
	socklen_t len;
	int i, p[2], a, s, sv[2], v = 4096;

	for (i = 0; i < NDEV; i++)
		add_slot(i && chance(r, 3) ? dup(slots[0].fd) :
			 open(STABLESEND_DEVICE, O_RDWR | O_CLOEXEC), K_DEV);
	snprintf(path, sizeof(path), "/tmp/fuzz-%d", getpid());
	file_size = 1 + below(r, 512 << 10);
	b = malloc(file_size);
	REQUIRE(b, "malloc");
	for (i = 0; i < (int)file_size; i++)
		b[i] = i * 131 + 1;
	file_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	add_slot(file_fd, K_FILE_RW);
	write_full(file_fd, b, file_size, 0);
	add_slot(open(path, O_RDONLY | O_CLOEXEC), K_FILE_RO);
	add_slot(open(path, O_WRONLY | O_CLOEXEC), K_FILE_WO);
	add_slot(open(path, O_PATH | O_CLOEXEC), K_FILE_PATH);
	unlink(path);
	add_slot(temp_file(0, 0), K_FILE_EMPTY);
	add_slot(memfd_create("fuzz", MFD_CLOEXEC), K_MEMFD);
	write_full(slots[nslots - 1].fd, b, file_size < 65536 ? file_size : 65536, 0);
	free(b);
	add_slot(open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC), K_DIR);
	REQUIRE(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0, "pipe");
	add_slot(p[0], K_PIPE_R);
	add_slot(p[1], K_PIPE_W);
	add_slot(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), K_EVENTFD);
	add_slot(epoll_create1(EPOLL_CLOEXEC), K_EPOLL);
	add_slot(open("/dev/null", O_RDWR | O_CLOEXEC), K_DEVNULL);
	tcp_pair(AF_INET, &a, &s);
	setsockopt(a, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	add_slot(a, K_TCP4);
	add_peer(s);
	tcp_pair(AF_INET6, &a, &s);
	add_slot(a, K_TCP6);
	add_peer(s);
	unix_pair(&a, &s);
	add_slot(a, K_UNIX);
	add_peer(s);
	unix_pair(&a, &s);
	set_rcvbuf_small(s);
	add_slot(a, K_UNIX_SLOW);
	add_peer(s);
	paused[npeers - 1] = 1;
	a = listener(AF_INET, SOCK_STREAM, &ss, &len);
	REQUIRE(listen(a, 4) == 0, "listen");
	add_slot(a, K_TCP_LISTEN);
	add_slot(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), K_TCP_UNCONN);
	a = listener(AF_INET, SOCK_DGRAM, &ss, &len);
	REQUIRE(connect(a, (struct sockaddr *)&ss, len) == 0, "udp connect");
	add_slot(a, K_UDP);
	REQUIRE(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) == 0, "dgram");
	add_slot(sv[0], K_UNIX_DGRAM);
	add_peer(sv[1]);
	REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0, "seqpacket");
	add_slot(sv[0], K_SEQPACKET);
	add_peer(sv[1]);
	tcp_pair(AF_INET, &a, &s);
	shutdown(a, SHUT_WR);
	add_slot(a, K_TCP_SHUT);
	add_peer(s);
	a = dup(0);
	close(a);
	slots[nslots].fd = a;		/* a closed fd number */
	slots[nslots].peer = -1;
	slots[nslots++].kind = K_CLOSED;
	for (i = NDEV; i < nslots; i++)
		slots[i].keep = slots[i].kind == K_CLOSED ? -1 :
			fcntl(slots[i].fd, F_DUPFD_CLOEXEC, 600 + i);
}

/*
 * Pointers: mostly good, sometimes bad in every way we know.  Those into
 * the bad pages stay inside them: the memory below is our threads' stacks
 * and descriptors, and a read() given a "straddling" buffer that starts
 * there really writes records into it (seed 1796339674 chunk 94 did).
 */
static uint64_t bad_ptr(struct rng *r, size_t size, int output)
{
	size = size < 1 ? 1 : size > PG ? PG : size;
	switch (below(r, 10)) {
	case 0:
		return 0;
	case 1:
		return (uint64_t)(bad + PG);	/* PROT_NONE */
	case 2:
		return (uint64_t)(bad + 2 * PG + below(r, PG));	/* unmapped */
	case 3:
		return (uint64_t)(bad + PG - below(r, size));	/* straddles */
	case 4:
		return output ? (uint64_t)(bad + 3 * PG) : 1;	/* read-only */
	case 5:
		return 0xffffffff81000000ULL + below(r, 1 << 20);	/* kernel text */
	case 6:
		return 0xffff888000000000ULL;	/* direct map */
	case 7:
		return 0x8000000000000000ULL;	/* non-canonical */
	case 8:
		return ~0ULL - below(r, 64);
	default:
		return (uint64_t)(bad + 3 * PG - below(r, size));	/* RO tail */
	}
}

static struct slot *slot_of(int kind)
{
	int i;

	for (i = 0; i < nslots; i++)
		if (slots[i].kind == kind)
			return &slots[i];
	return NULL;
}

static int slot_fd(int kind)
{
	return slot_of(kind)->fd;
}

static int pick_fd(struct rng *r, int want)
{
	switch (below(r, 12)) {
	case 0:
		return -1;
	case 1:
		return (int)boundary(r);
	case 2:
		return 1 << 20;
	case 3:
	case 4:
	case 5:
		return slot_fd(want);
	default:
		return slots[below(r, nslots)].fd;
	}
}

static int dev_fd(struct rng *r)
{
	return slots[below(r, NDEV)].fd;
}

/* A valid request, then none to three fields made wild. */
static void fill_req(struct rng *r, struct stablesend_req *q, int sync)
{
	static const int socks[] = { K_TCP4, K_TCP6, K_UNIX, K_UNIX, K_UNIX_SLOW };
	int m;

	memset(q, 0, sizeof(*q));
	q->file_fd = slot_fd(chance(r, 4) ? K_MEMFD : K_FILE_RO);
	q->sock_fd = slot_fd(socks[below(r, 5)]);
	q->offset = below(r, file_size / 2);
	q->len = below(r, sync ? 16384 : 65536);
	if (chance(r, 3)) {
		q->head_len = below(r, 300);
		q->head = (uint64_t)(good + below(r, 65536));
	}
	if (chance(r, 4)) {
		q->tail_len = below(r, 300);
		q->tail = (uint64_t)(good + below(r, 65536));
	}
	q->user_data = ud_next++;
	q->flags = below(r, 4);
	for (m = chance(r, 2) ? 0 : 1 + below(r, 3); m > 0; m--) {
		switch (below(r, 14)) {
		case 0:
			q->file_fd = pick_fd(r, K_FILE_RW);
			break;
		case 1:
			q->sock_fd = pick_fd(r, K_TCP4);
			break;
		case 2:
			q->offset = fuzz_u64(r, file_size * 2);
			break;
		case 3:
			q->len = fuzz_u64(r, 1 << 20);
			break;
		case 4:
			q->head_len = fuzz_u64(r, 70000);
			q->head = (uint64_t)good;
			break;
		case 5:
			q->head = bad_ptr(r, q->head_len, 0);
			break;
		case 6:
			q->tail_len = fuzz_u64(r, 70000);
			q->tail = (uint64_t)(good + below(r, 65536));
			break;
		case 7:
			q->tail = bad_ptr(r, q->tail_len, 0);
			break;
		case 8:
			q->tail = rnd(r);	/* no length */
			break;
		case 9:
			q->user_data = boundary(r);
			break;
		case 10:
			q->flags = chance(r, 2) ? rnd(r) : 1U << below(r, 32);
			break;
		case 11:
			q->reserved = chance(r, 2) ? rnd(r) : 1;
			break;
		case 12:
			q->len = 0;
			q->head_len = 0;
			q->tail_len = 0;
			break;
		default:
			q->offset = file_size - below(r, 2);
			break;
		}
	}
	ud_add(q->user_data);
}

/* --- errno checks -------------------------------------------------------- */

static const int submit_errs[] = { EBADF, EINVAL, ENOTSOCK, EOPNOTSUPP,
	ENOTCONN, EPIPE, ENODATA, EMSGSIZE, EAGAIN, EINTR, ENOBUFS, EFAULT,
	ENOMEM, EIO, 0 };
static const int send_errs[] = { EBADF, EINVAL, ENOTSOCK, EOPNOTSUPP,
	ENOTCONN, EPIPE, ECONNRESET, ENODATA, EMSGSIZE, EAGAIN, EINTR, ENOBUFS,
	ECANCELED, EFAULT, ENOMEM, EIO, 0 };
static const int setup_errs[] = { EBADF, EINVAL, EBUSY, EFAULT, 0 };
static const int cancel_errs[] = { EBADF, ENOENT, EFAULT, 0 };
static const int counters_errs[] = { EBADF, EFAULT, 0 };
static const int ioctl_errs[] = { EBADF, ENOTTY, 0 };
static const int read_errs[] = { EBADF, EINVAL, EAGAIN, EINTR, EFAULT, 0 };
static const int write_errs[] = { EBADF, EINVAL, 0 };
static const int mmap_errs[] = { EBADF, ENODEV, EINVAL, EACCES, ENOMEM,
	EOVERFLOW, 0 };

/* Count the outcome; true when errno is one of @allowed (or @ret >= 0). */
static int account(enum op op, long ret, int err, const int *allowed)
{
	__atomic_fetch_add(&sh->calls[op], 1, __ATOMIC_RELAXED);
	if (ret >= 0) {
		__atomic_fetch_add(&sh->ok[op], 1, __ATOMIC_RELAXED);
		return 1;
	}
	__atomic_fetch_add(&sh->errs[op][err < ERRMAX ? err : ERRMAX - 1], 1,
			   __ATOMIC_RELAXED);
	for (; allowed && *allowed; allowed++)
		if (*allowed == err)
			return 1;
	return !allowed;
}

static void print_req(const char *what, const struct stablesend_req *q)
{
	printf("  %s: file_fd %d sock_fd %d offset %llu len %llu head %#llx/%u tail %#llx/%u user_data %#llx flags %#x reserved %#x\n",
	       what, q->file_fd, q->sock_fd, (unsigned long long)q->offset,
	       (unsigned long long)q->len, (unsigned long long)q->head,
	       q->head_len, (unsigned long long)q->tail, q->tail_len,
	       (unsigned long long)q->user_data, q->flags, q->reserved);
}

static void arm(struct rng *r)
{
	/* Repeating: a signal before the call blocks must not be the last. */
	struct itimerspec it = { .it_value.tv_nsec = chance(r, 4) ?
		1000 + below(r, 1000000) : 20000000,
		.it_interval.tv_nsec = 20000000 };

	timer_settime(timer, 0, &it, NULL);
}

static void arm2s(void)
{
	struct itimerspec it = { .it_value.tv_sec = 2,
		.it_interval.tv_nsec = 50000000 };

	timer_settime(timer, 0, &it, NULL);
}

static void disarm(void)
{
	struct itimerspec it = { 0 };

	timer_settime(timer, 0, &it, NULL);
}

static long sys_ioctl(int fd, unsigned long cmd, uint64_t arg, int *err)
{
	long ret = syscall(SYS_ioctl, fd, cmd, arg);

	*err = ret < 0 ? errno : 0;
	return ret;
}

static void check_cqe(long iter, const struct stablesend_cqe *c)
{
	int sent = c->flags & STABLESEND_CQE_SENT;
	int rel = c->flags & STABLESEND_CQE_RELEASED;
	int op = cur_op;

	cur_op = -1;
	__atomic_fetch_add(&sh->cqes, 1, __ATOMIC_RELAXED);
	if (!ud_has(c->user_data) && ++sh->bad_cqes)
		fail(iter, "completion with a user_data never submitted: %#llx res %lld flags %#x",
		     (unsigned long long)c->user_data, (long long)c->res, c->flags);
	if (!!sent == !!rel || (c->flags & ~7U) || c->reserved ||
	    (rel && c->res) ||
	    (sent && c->res < 0 && c->res != -EPIPE && c->res != -ECONNRESET &&
	     c->res != -ECANCELED && c->res != -ENOMEM)) {
		__atomic_fetch_add(&sh->bad_cqes, 1, __ATOMIC_RELAXED);
		fail(iter, "bad completion: user_data %#llx res %lld flags %#x reserved %#x",
		     (unsigned long long)c->user_data, (long long)c->res,
		     c->flags, c->reserved);
	}
	cur_op = op;
	if (sent)
		__atomic_fetch_add(&sh->cqe_res[c->res >= 0 ? 0 :
			c->res == -ECANCELED ? 1 : c->res == -ENOMEM ? 3 : 2],
			1, __ATOMIC_RELAXED);
}

/* --- one iteration ------------------------------------------------------- */

static struct stablesend_req reqs[STABLESEND_SUBMIT_MAX + 8];
static unsigned char outbuf[65536];

static void do_submit(struct rng *r, long iter)
{
	struct stablesend_submit s = { .entry_size = sizeof(reqs[0]) };
	struct stablesend_req *arr = reqs;
	uint64_t sarg = (uint64_t)&s;
	int i, err, n, straddle = 0;
	long ret;

	n = chance(r, 10) ? (int)fuzz_u64(r, STABLESEND_SUBMIT_MAX + 2) :
		1 + (int)below(r, 8);
	for (i = 0; i < n && i < STABLESEND_SUBMIT_MAX + 8; i++)
		fill_req(r, &reqs[i], 0);
	s.nr = n;
	if (chance(r, 15)) {
		/* Array ending in the PROT_NONE page: the batch stops short. */
		straddle = 1 + below(r, 3);
		arr = (struct stablesend_req *)(bad + PG) - straddle;
		memcpy(arr, reqs, straddle * sizeof(*arr));
	}
	s.reqs = chance(r, 20) ? bad_ptr(r, n * sizeof(*arr), 0) : (uint64_t)arr;
	if (chance(r, 20))
		s.entry_size = fuzz_u64(r, 128);
	if (chance(r, 30))
		s.flags = rnd(r);
	if (chance(r, 30))
		s.reserved = rnd(r);
	if (chance(r, 25))
		sarg = bad_ptr(r, sizeof(s), 0);
	i = dev_fd(r);
	if (chance(r, 2))
		arm(r);
	ret = sys_ioctl(i, STABLESEND_IOC_SUBMIT, sarg, &err);
	disarm();
	if (ret > 0)
		__atomic_fetch_add(&sh->accepted, ret, __ATOMIC_RELAXED);
	if (!account(OP_SUBMIT, ret, err, submit_errs) || ret == 0 ||
	    ret > (long)s.nr || (straddle && ret > straddle)) {
		if (!fail(iter, "SUBMIT fd %d nr %u entry_size %u flags %#x reserved %#x reqs %#llx arg %#llx: ret %ld errno %d (%s)",
		     i, s.nr, s.entry_size, s.flags, s.reserved,
		     (unsigned long long)s.reqs, (unsigned long long)sarg, ret,
		     err, strerror(err)))
			return;
		for (i = 0; i < n && i < 4; i++)
			print_req("req", &reqs[i]);
	}
}

static void do_send(struct rng *r, long iter)
{
	struct stablesend_req q;
	uint64_t arg = (uint64_t)&q, max;
	int fd, err;
	long ret;

	fill_req(r, &q, 1);
	if (chance(r, 20))
		arg = bad_ptr(r, sizeof(q), 0);
	fd = dev_fd(r);
	send_ud = q.user_data;
	arm(r);
	ret = sys_ioctl(fd, STABLESEND_IOC_SEND, arg, &err);
	disarm();
	send_ud = ~0ULL;
	max = (uint64_t)q.head_len + q.tail_len + (q.len < file_size ? q.len : file_size);
	if (!account(OP_SEND, ret, err, send_errs) ||
	    (ret >= 0 && (uint64_t)ret > max)) {
		if (fail(iter, "SEND fd %d arg %#llx: ret %ld errno %d (%s)", fd,
			 (unsigned long long)arg, ret, err, strerror(err)))
			print_req("req", &q);
	}
}

static void do_setup(struct rng *r, long iter)
{
	static const uint64_t limits[] = { 0, 1, 4095, 4096, 8192, 1 << 20,
		16 << 20, 64 << 20, 256 << 20, (256 << 20) + 1, INT_MAX,
		(uint64_t)INT_MAX + 1, ~0ULL };
	struct stablesend_setup s = { .eventfd = -1 };
	uint64_t arg = (uint64_t)&s;
	int fd, err;
	long ret;

	if (chance(r, 2))
		s.eventfd = pick_fd(r, K_EVENTFD);
	s.mem_limit = limits[below(r, chance(r, 3) ? 13 : 6)];
	if (chance(r, 15))
		s.flags = rnd(r);
	if (chance(r, 15))
		s.reserved0 = rnd(r);
	if (chance(r, 15))
		s.reserved[below(r, 4)] = rnd(r);
	if (chance(r, 15))
		s.features = rnd(r);	/* out-only: ignored */
	if (chance(r, 8))
		arg = bad_ptr(r, sizeof(s), 1);
	fd = dev_fd(r);
	ret = sys_ioctl(fd, STABLESEND_IOC_SETUP, arg, &err);
	if (!account(OP_SETUP, ret, err, setup_errs) || ret > 0 ||
	    (ret == 0 && arg == (uint64_t)&s &&
	     (s.abi_version != STABLESEND_ABI_VERSION || !s.mem_limit)))
		fail(iter, "SETUP fd %d eventfd %d mem_limit %#llx flags %#x reserved0 %#x arg %#llx: ret %ld errno %d (%s)",
		     fd, s.eventfd, (unsigned long long)s.mem_limit, s.flags,
		     s.reserved0, (unsigned long long)arg, ret, err, strerror(err));
}

static void do_cancel(struct rng *r, long iter)
{
	uint64_t ud = chance(r, 4) ? boundary(r) : ud_next - below(r, 50);
	uint64_t arg = chance(r, 10) ? bad_ptr(r, 8, 0) : (uint64_t)&ud;
	int fd = dev_fd(r), err;
	long ret = sys_ioctl(fd, STABLESEND_IOC_CANCEL, arg, &err);

	if (!account(OP_CANCEL, ret, err, cancel_errs) || ret == 0)
		fail(iter, "CANCEL fd %d user_data %#llx arg %#llx: ret %ld errno %d (%s)",
		     fd, (unsigned long long)ud, (unsigned long long)arg, ret,
		     err, strerror(err));
}

static void do_counters(struct rng *r, long iter)
{
	struct stablesend_counters c;
	uint64_t arg = chance(r, 5) ? bad_ptr(r, sizeof(c), 1) : (uint64_t)&c;
	int fd = dev_fd(r), err;
	long ret;

	memset(&c, 0xa5, sizeof(c));
	ret = sys_ioctl(fd, STABLESEND_IOC_COUNTERS, arg, &err);
	if (!account(OP_COUNTERS, ret, err, counters_errs) || ret > 0 ||
	    (ret == 0 && arg == (uint64_t)&c &&
	     (c.completed > c.submitted || c.mem_in_use > c.mem_limit ||
	      c.reserved[0] || c.reserved[5])))
		fail(iter, "COUNTERS fd %d arg %#llx: ret %ld errno %d (%s) submitted %llu completed %llu mem %llu/%llu",
		     fd, (unsigned long long)arg, ret, err, strerror(err),
		     (unsigned long long)c.submitted, (unsigned long long)c.completed,
		     (unsigned long long)c.mem_in_use, (unsigned long long)c.mem_limit);
}

static int real_cmd(unsigned long cmd)
{
	return cmd == STABLESEND_IOC_SETUP || cmd == STABLESEND_IOC_SUBMIT ||
	       cmd == STABLESEND_IOC_SEND || cmd == STABLESEND_IOC_CANCEL ||
	       cmd == STABLESEND_IOC_COUNTERS;
}

static void do_randcmd(struct rng *r, long iter)
{
	unsigned long cmd, dir = below(r, 4), size = below(r, 5) ? below(r, 128) : below(r, 1 << 14);
	unsigned long type = chance(r, 4) ? 0xB4 + below(r, 3) : 0xB5;
	uint64_t arg = chance(r, 3) ? bad_ptr(r, size, dir & 2) : (uint64_t)outbuf;
	int fd = dev_fd(r), err;
	long ret;

	cmd = _IOC(dir, type, chance(r, 2) ? below(r, 8) : below(r, 256), size);
	if (real_cmd(cmd))
		return;
	memset(outbuf, 0, 256);
	ret = sys_ioctl(fd, cmd, arg, &err);
	if (!account(OP_RANDCMD, ret, err, ioctl_errs))
		fail(iter, "ioctl fd %d cmd %#lx arg %#llx: ret %ld errno %d (%s)",
		     fd, cmd, (unsigned long long)arg, ret, err, strerror(err));
}

static void do_read(struct rng *r, long iter)
{
	size_t n = chance(r, 4) ? fuzz_u64(r, 200) : 24 * (1 + below(r, 64));
	uint64_t buf = chance(r, 6) ? bad_ptr(r, n, 1) : (uint64_t)outbuf;
	int fd = dev_fd(r), err;
	long ret, i;

	if (buf == (uint64_t)outbuf && n > sizeof(outbuf))
		n = sizeof(outbuf);
	arm(r);
	ret = syscall(SYS_read, fd, buf, n);
	err = errno;
	disarm();
	if (!account(OP_READ, ret, err, read_errs) ||
	    (ret >= 0 && (ret % 24 || (size_t)ret > n || !ret)))
		fail(iter, "read fd %d buf %#llx count %zu: ret %ld errno %d (%s)",
		     fd, (unsigned long long)buf, n, ret, err, strerror(err));
	if (ret > 0 && buf == (uint64_t)outbuf)
		for (i = 0; i < ret / 24; i++)
			check_cqe(iter, (struct stablesend_cqe *)outbuf + i);
}

static void do_flood(long iter)
{
	struct stablesend_submit s = { .reqs = (uint64_t)reqs, .nr = 1024,
		.entry_size = sizeof(reqs[0]) };
	int i, k, fd, err;
	long ret = 0;

	/* Its own context: no fd number changes under it meanwhile. */
	hold = 1;
	while (!held)
		usleep(1000);
	fd = open(STABLESEND_DEVICE, O_RDWR | O_CLOEXEC);
	paused[slot_of(K_UNIX)->peer] = 0;

	/* Many more completion records than anyone reads. */
	for (k = 0; k < 40 && !stop; k++) {
		for (i = 0; i < 1024; i++) {
			reqs[i] = ss_req(slot_fd(K_FILE_RO), slot_fd(K_UNIX), 0, 0,
					 ud_next++);
			reqs[i].head = (uint64_t)good;
			reqs[i].head_len = 1;
			reqs[i].flags = STABLESEND_REQ_NOTIFY_RELEASE;
			ud_add(reqs[i].user_data);
		}
		arm2s();
		ret = sys_ioctl(fd, STABLESEND_IOC_SUBMIT, (uint64_t)&s, &err);
		disarm();
		if (ret > 0)
			__atomic_fetch_add(&sh->accepted, ret, __ATOMIC_RELAXED);
		if (!account(OP_FLOOD, ret, err, submit_errs))
			fail(iter, "SUBMIT flood batch %d of 1024 one-byte requests: ret %ld errno %d (%s)",
			     k, ret, err, strerror(err));
		if (ret < 1024)
			break;
	}
	close(fd);
	held = 0;
	hold = 0;
}

static const unsigned char op_weight[NOPS] = {
	[OP_SETUP] = 8, [OP_SUBMIT] = 32, [OP_SEND] = 12, [OP_CANCEL] = 6,
	[OP_COUNTERS] = 4, [OP_RANDCMD] = 10, [OP_READ] = 13, [OP_POLL] = 5,
	[OP_WRITE] = 2, [OP_MMAP] = 2, [OP_OTHERFD] = 6,
};

static void step(struct rng *r, long iter)
{
	static const unsigned long cmds[] = { STABLESEND_IOC_SETUP,
		STABLESEND_IOC_SUBMIT, STABLESEND_IOC_SEND,
		STABLESEND_IOC_CANCEL, STABLESEND_IOC_COUNTERS };
	int fd, err, op = below(r, 100);
	struct pollfd p;
	long ret;
	void *m;

	for (cur_op = 0; op >= op_weight[cur_op]; cur_op++)
		op -= op_weight[cur_op];
	switch (cur_op) {
	case OP_SETUP:
		do_setup(r, iter);
		break;
	case OP_SUBMIT:
		do_submit(r, iter);
		break;
	case OP_SEND:
		do_send(r, iter);
		break;
	case OP_CANCEL:
		do_cancel(r, iter);
		break;
	case OP_COUNTERS:
		do_counters(r, iter);
		break;
	case OP_RANDCMD:
		do_randcmd(r, iter);
		break;
	case OP_READ:
		do_read(r, iter);
		break;
	case OP_POLL:
		p.fd = dev_fd(r);
		p.events = chance(r, 2) ? POLLIN | POLLOUT : (short)rnd(r);
		ret = poll(&p, 1, chance(r, 2) ? 0 : below(r, 5));
		account(OP_POLL, ret, errno, NULL);
		break;
	case OP_WRITE:
		fd = dev_fd(r);
		ret = syscall(SYS_write, fd, chance(r, 2) ? (uint64_t)outbuf :
			      bad_ptr(r, 64, 0), below(r, 100));
		err = errno;
		if (!account(OP_WRITE, ret, err, write_errs) || ret >= 0)
			fail(iter, "write on fd %d: ret %ld errno %d", fd, ret, err);
		break;
	case OP_MMAP:
		fd = dev_fd(r);
		m = mmap(NULL, chance(r, 4) ? 0 : PG * (1 + below(r, 4)),
			 PROT_READ | (chance(r, 2) ? PROT_WRITE : 0),
			 chance(r, 2) ? MAP_SHARED : MAP_PRIVATE, fd, below(r, 3) * PG);
		err = errno;
		if (!account(OP_MMAP, m == MAP_FAILED ? -1 : 0, err, mmap_errs) ||
		    m != MAP_FAILED)
			fail(iter, "mmap of fd %d: %p errno %d", fd, m, err);
		break;
	default:
		/* Our ioctls on other files: not ours to check, must not crash. */
		memset(outbuf, 0, 4096);
		fd = slots[NDEV + below(r, nslots - NDEV)].fd;
		ret = sys_ioctl(fd, cmds[below(r, 5)], (uint64_t)outbuf, &err);
		account(OP_OTHERFD, ret, err, NULL);
		break;
	}
	cur_op = -1;
}

/* --- helper threads ------------------------------------------------------ */

static int renewable(const struct slot *s)
{
	return s->kind == K_TCP4 || s->kind == K_TCP6 || s->kind == K_UNIX;
}

static void *drain_fn(void *arg)
{
	struct rng r = { seed ^ chunk ^ 0xd1a1 };
	struct pollfd p[8];
	static char buf[65536];
	double next_rst = now_s() + 1;
	int i, n;

	(void)arg;
	while (!stop) {
		for (i = n = 0; i < npeers; i++) {
			if (peers[i] < 0 || paused[i])
				continue;
			p[n].fd = peers[i];
			p[n++].events = POLLIN;
		}
		if (poll(p, n, 5) <= 0 && n)
			continue;
		for (i = 0; i < n; i++)
			if (p[i].revents)
				while (recv(p[i].fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
					;
		if (now_s() > next_rst) {
			/* A peer that resets the connection (chaos renews it). */
			struct linger l = { 1, 0 };
			struct slot *s = &slots[NDEV + below(&r, nslots - NDEV)];

			next_rst = now_s() + 0.5 + below(&r, 1000) / 1000.0;
			i = renewable(s) ? __atomic_exchange_n(&peers[s->peer], -1,
							       __ATOMIC_SEQ_CST) : -1;
			if (i >= 0) {
				setsockopt(i, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
				close(i);
			}
		}
	}
	return NULL;
}

/* A fresh connection behind a slot whose socket was shut down. */
static void renew(struct slot *s)
{
	int a, p, old;

	if (s->kind == K_UNIX)
		unix_pair(&a, &p);
	else
		tcp_pair(s->kind == K_TCP4 ? AF_INET : AF_INET6, &a, &p);
	old = __atomic_exchange_n(&peers[s->peer], p, __ATOMIC_SEQ_CST);
	if (old >= 0)
		close(old);
	dup2(a, s->keep);
	dup2(a, s->fd);
	close(a);
}

static void *chaos_fn(void *arg)
{
	struct rng r = { seed ^ chunk ^ 0xc4a05 };
	struct slot *s;
	uint64_t ud;
	int fd, x;

	(void)arg;
	while (!stop) {
		if (hold) {
			held = 1;
			usleep(1000);
			continue;
		}
		usleep(below(&r, 5000));
		s = &slots[NDEV + below(&r, nslots - NDEV)];
		switch (below(&r, 11)) {
		case 0:		/* close a file or socket for a moment */
		case 1:		/* or put another object behind its number */
			if (s->kind == K_CLOSED)
				break;
			if (below(&r, 2))
				close(s->fd);
			else
				dup2(slots[below(&r, nslots)].fd, s->fd);
			usleep(below(&r, 3000));
			dup2(s->keep, s->fd);
			break;
		case 2:		/* shut a socket down mid-flight, then renew it */
			if (!renewable(s))
				break;
			if (peers[s->peer] >= 0) {
				if (!chance(&r, 4))
					break;
				shutdown(s->fd, below(&r, 3));
				usleep(below(&r, 20000));
			}
			renew(s);
			break;
		case 3:		/* close a device fd, maybe mid-ioctl */
		case 9:
			fd = slots[below(&r, NDEV)].fd;
			if (chance(&r, 2)) {
				dup2(slots[below(&r, NDEV)].fd, fd);
				break;
			}
			close(fd);
			usleep(below(&r, 2000));
			x = open(STABLESEND_DEVICE, O_RDWR | O_CLOEXEC |
				 (chance(&r, 3) ? O_NONBLOCK : 0));
			account(OP_REOPEN, x, errno, NULL);
			if (x >= 0 && x != fd) {
				dup2(x, fd);
				close(x);
			}
			break;
		case 4:
		case 5:		/* cancel the SEND in progress, or a SUBMIT's */
			ud = chance(&r, 2) ? send_ud : ud_next - 1 - below(&r, 4);
			syscall(SYS_ioctl, slots[below(&r, NDEV)].fd,
				STABLESEND_IOC_CANCEL, &ud);
			break;
		case 6:
			fd = slots[below(&r, NDEV)].fd;
			x = fcntl(fd, F_GETFL);
			if (x >= 0)
				fcntl(fd, F_SETFL, x ^ O_NONBLOCK);
			break;
		case 7:
			x = below(&r, npeers);
			paused[x] = !paused[x];
			break;
		case 8:
			if (chance(&r, 4)) {
				x = below(&r, file_size + 1);
				if (ftruncate(file_fd, x) == 0)
					ftruncate(file_fd, file_size);
			}
			break;
		default:
			break;
		}
	}
	return NULL;
}

/* --- a chunk: one worker process ----------------------------------------- */

static void on_signal(int sig)
{
	if (sig == SIGPIPE)
		__atomic_fetch_add(&sh->sigpipes, 1, __ATOMIC_RELAXED);
}

static void run_chunk(long iters)
{
	struct rng r = { seed * 1000003 + chunk };
	struct sigaction sa = { .sa_handler = on_signal };	/* no SA_RESTART */
	struct sigevent sev = { .sigev_notify = SIGEV_THREAD_ID,
				.sigev_signo = SIGALRM };
	struct stablesend_cqe c[64];
	pthread_t chaos, drain;
	sigset_t set;
	long i, n;
	int k;

	sigaction(SIGALRM, &sa, NULL);
	sigaction(SIGPIPE, &sa, NULL);
	sev._sigev_un._tid = syscall(SYS_gettid);
	REQUIRE(timer_create(CLOCK_MONOTONIC, &sev, &timer) == 0, "timer_create");
	ud_set = calloc(UD_SET, sizeof(*ud_set));
	good = malloc(2 * STABLESEND_HDTR_MAX + 2 * PG);
	bad = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(ud_set && good && bad != MAP_FAILED, "memory");
	memset(good, 'h', 2 * STABLESEND_HDTR_MAX + 2 * PG);
	mprotect(bad + PG, PG, PROT_NONE);
	munmap(bad + 2 * PG, PG);
	mprotect(bad + 3 * PG, PG, PROT_READ);
	ud_next = (uint64_t)chunk << 32;
	make_world(&r);

	sigemptyset(&set);
	sigaddset(&set, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	REQUIRE(pthread_create(&chaos, NULL, chaos_fn, NULL) == 0, "thread");
	REQUIRE(pthread_create(&drain, NULL, drain_fn, NULL) == 0, "thread");
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);

	for (i = 0; i < iters; i++) {
		if (chunk % 25 == 1 && i == iters / 2) {
			cur_op = OP_FLOOD;
			do_flood(i);
			cur_op = -1;
		} else {
			step(&r, i);
		}
		__atomic_fetch_add(&sh->iters, 1, __ATOMIC_RELAXED);
	}
	stop = 1;
	pthread_join(chaos, NULL);
	pthread_join(drain, NULL);
	/* What is left in the queues must be well-formed too. */
	for (k = 0; k < NDEV; k++) {
		fcntl(slots[k].fd, F_SETFL, O_NONBLOCK);
		while ((n = read(slots[k].fd, c, sizeof(c))) > 0)
			for (i = 0; i < n / 24; i++)
				check_cqe(iters, &c[i]);
	}
}

/* --- the parent ---------------------------------------------------------- */

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void dump_stacks(pid_t pid)
{
	char path[300], buf[4096];
	DIR *d;
	struct dirent *e;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stack", pid, e->d_name);
		fd = open(path, O_RDONLY);
		n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (n > 0) {
			buf[n] = 0;
			printf("  task %s:\n%s", e->d_name, buf);
		}
		if (fd >= 0)
			close(fd);
	}
	if (d)
		closedir(d);
}

static void report(double secs)
{
	static const char *const res_name[4] = { "bytes", "-ECANCELED",
		"-EPIPE/-ECONNRESET", "-ENOMEM" };
	int op, e;

	printf("seed %llu: %ld iterations in %.1f s (%.0f/s), %ld requests accepted, %ld completions read, %ld SIGPIPE\n",
	       (unsigned long long)seed, sh->iters, secs, sh->iters / secs,
	       sh->accepted, sh->cqes, sh->sigpipes);
	if (sh->bad_cqes)
		printf("%ld bad completion records\n", sh->bad_cqes);
	printf("SENT results:");
	for (e = 0; e < 4; e++)
		printf(" %s %ld", res_name[e], sh->cqe_res[e]);
	printf("\n");
	for (op = 0; op < NOPS; op++) {
		printf("%-15s %7ld calls, %6ld ok", op_name[op], sh->calls[op],
		       sh->ok[op]);
		if (sh->bad[op])
			printf(", %ld VIOLATIONS", sh->bad[op]);
		for (e = 0; e < ERRMAX; e++)
			if (sh->errs[op][e])
				printf(", %s %ld", e == 512 ? "ERESTARTSYS" :
				       strerrorname_np(e) ? strerrorname_np(e) : "?",
				       sh->errs[op][e]);
		printf("\n");
	}
}

int main(int argc, char **argv)
{
	const char *s_seed = argc > 1 ? argv[1] : getenv("SS_FUZZ_SEED");
	const char *s_iters = argc > 2 ? argv[2] : getenv("SS_FUZZ_ITERS");
	const char *s_chunk = getenv("SS_FUZZ_CHUNK");
	pid_t pids[NWORKERS] = { 0 };
	const char *s_scale = getenv("STABLESEND_TIMEOUT_SCALE"); /* debug kernel */
	int tscale = s_scale && atoi(s_scale) > 0 ? atoi(s_scale) : 1;
	double start[NWORKERS], t0 = now_s(), end;
	long iters, nchunks, next, chunks[NWORKERS], c0 = 0;
	int fds0, threads0, i, running = 0, st;
	static const char *const stats[] = { "requests_in_flight",
		"bytes_in_flight", "pool_bytes", "contexts" };

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (access(STABLESEND_DEVICE, R_OK | W_OK)) {
		printf("no %s\n", STABLESEND_DEVICE);
		return SKIP;
	}
	seed = s_seed ? strtoull(s_seed, NULL, 0) : (uint64_t)time(NULL) ^ getpid();
	iters = s_iters ? strtol(s_iters, NULL, 0) :
		DEFAULT_ITERS / ss_debug_scale(8);	/* KASAN: 8x slower */
	nchunks = (iters + CHUNK_ITERS - 1) / CHUNK_ITERS;
	if (s_chunk) {
		c0 = strtol(s_chunk, NULL, 0);
		nchunks = c0 + 1;
	}
	printf("seed %llu, %ld iterations in chunks of %d, %d workers (reproduce: SS_FUZZ_SEED=%llu ./fuzz, or SS_FUZZ_CHUNK=N for chunk N only)\n",
	       (unsigned long long)seed, iters, CHUNK_ITERS, NWORKERS,
	       (unsigned long long)seed);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	REQUIRE(sh != MAP_FAILED, "mmap");
	fds0 = count_dir("/proc/self/fd");
	threads0 = count_dir("/proc/self/task");
	end = t0 + MAX_SECS * tscale;

	for (next = c0; next < nchunks || running;) {
		for (i = 0; i < NWORKERS; i++) {
			if (pids[i] && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
				pids[i] = 0;
				running--;
				if (!WIFEXITED(st) || WEXITSTATUS(st)) {
					chunk = chunks[i];
					fail(-1, "worker %s %d", WIFEXITED(st) ?
					     "exited with" : "killed by signal",
					     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
				}
			}
			if (pids[i] && now_s() - start[i] > CHUNK_TIMEOUT * tscale) {
				chunk = chunks[i];
				fail(-1, "worker hangs after %d s; its kernel stacks:",
				     CHUNK_TIMEOUT * tscale);
				sh->hangs++;
				dump_stacks(pids[i]);
				kill(pids[i], SIGKILL);
				start[i] = now_s() + 3600;
			}
			if (!pids[i] && next < nchunks && now_s() < end) {
				chunks[i] = next;
				start[i] = now_s();
				pids[i] = fork();
				REQUIRE(pids[i] >= 0, "fork");
				if (!pids[i]) {
					chunk = next;
					run_chunk(next == nchunks - 1 && !s_chunk ?
						  iters - next * CHUNK_ITERS : CHUNK_ITERS);
					_exit(0);
				}
				running++;
				next++;
			}
		}
		if (next < nchunks && now_s() >= end && !running) {
			printf("time cap of %d s reached after %ld of %ld chunks\n",
			       MAX_SECS * tscale, next - c0, nchunks - c0);
			break;
		}
		usleep(20000);
	}
	report(now_s() - t0);

	CHECK(ss_drained(30), "module still holds requests: in flight %lld, bytes %lld",
	      ss_stat("requests_in_flight"), ss_stat("bytes_in_flight"));
	for (end = now_s() + 30; now_s() < end;) {
		if (!ss_stat("pool_bytes") && !ss_stat("contexts"))
			break;
		usleep(20000);
	}
	for (i = 0; i < 4; i++) {
		long long v = ss_stat(stats[i]);

		printf("%s %lld\n", stats[i], v);
		CHECK(v == 0, "%s is %lld after every fd was closed", stats[i], v);
	}
	CHECK(count_dir("/proc/self/fd") == fds0, "fds: %d before, %d after",
	      fds0, count_dir("/proc/self/fd"));
	CHECK(count_dir("/proc/self/task") == threads0, "threads: %d, %d",
	      threads0, count_dir("/proc/self/task"));
	CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD, "a worker is left");
	CHECK(sh->failures == 0, "%ld invariant violation(s), %ld hang(s) (seed %llu)",
	      sh->failures, sh->hangs, (unsigned long long)seed);
	CHECK(sh->iters > 0 && sh->calls[OP_SUBMIT] > 0, "nothing ran");
	/* A cap that cuts the budget short must not pass as a full run. */
	CHECK(s_chunk || sh->iters * 10 >= iters * 9,
	      "ran %ld of %ld iterations, under 90%% of the budget (time cap %d s)",
	      (long)sh->iters, iters, MAX_SECS * tscale);
	return test_result();
}
