/* SPDX-License-Identifier: GPL-2.0 */
/*
 * bench.h: what bench.c (the driver, the receiver, the plain peers and
 * stablesend) shares with the io_uring peers in uring-peers.c.
 *
 * A method is three functions (struct method in bench.c):
 *	prep(cl)	untimed, before every cell: allocate what the method
 *			keeps (buffers, rings, registrations) in *cl->state on
 *			the first call; later calls reuse it
 *	run(cl)		timed: send cl->nreq requests of cl->size bytes, each
 *			at the file offset cell_off(cl) hands out, keeping up
 *			to cl->depth requests in flight; return only when every
 *			buffer the method used is reusable (zero-copy
 *			notifications in, RELEASED for stablesend)
 *	fini(state)	untimed, at the end of a transport: free it all
 * Every request's bytes must be contiguous on the socket (the receiver
 * checks each request as one block); requests may reach the socket in any
 * order.  A method that gives up on a request it took an offset for hands
 * the offset back with cell_unoff().
 */
#ifndef BENCH_H
#define BENCH_H

#include <stddef.h>
#include <sys/types.h>

#define KiB 1024ULL
#define MiB (1024ULL * 1024)

typedef unsigned long long u64;

enum { T_LO, T_VETH, T_UNIX, NTRANS };
extern const char *const tname[NTRANS];

struct conn {
	int tr;
	int sock;	/* sender's end */
	int ctl;	/* control socket to the receiver */
	pid_t pid;	/* receiver */
	u64 target;	/* cumulative bytes the receiver must get */
	unsigned int zc_next;	/* MSG_ZEROCOPY notification id counter */
	int zc_ok;
};

struct cell {
	struct conn *c;
	int method;
	int si;
	u64 size;
	u64 nreq;
	unsigned int depth;	/* requests in flight, pipelined methods */
	void **state;		/* the method's, kept for the transport */
	const char *variant;	/* the variant the method ran, reported */
	u64 next_off;		/* file offset of the next request */
	u64 off_sum, off_n;	/* offsets handed out and not given back */
	u64 peak;		/* bytes in flight, highest seen */
	int peak_valid;
	int copied;		/* zero-copy paths: the kernel reported a copy */
	double t_sent;		/* stablesend: last SENT reaped (s), else 0 */
};

extern int file_fd;

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
double now_s(void);
void *big_alloc(size_t n);
u64 cell_off(struct cell *cl);
void cell_unoff(struct cell *cl, u64 off);
void sock_report(const char *why);

/*
 * Run FN as an untimed trial cell of NREQ requests on CL's connection
 * (same size, depth and state); returns its throughput in bytes/s.  For
 * a prep() that picks the faster of its variants.
 */
double bench_trial(struct cell *cl, void (*fn)(struct cell *), u64 nreq);

#ifdef HAVE_LIBURING
struct io_uring;
/* A ring with SINGLE_ISSUER|DEFER_TASKRUN when DEFER and the kernel has them. */
int uring_init(struct io_uring *ring, unsigned int entries, int defer);
extern int have_uring;		/* READ_FIXED, SEND, SEND_ZC, SENDMSG_ZC */

/* uring-peers.c */
const char *uring_na(int tr);
void uring_prep(struct cell *cl);
void uring_run(struct cell *cl);
void samba_prep(struct cell *cl);
void samba_run(struct cell *cl);
void uring_fini(void *state);
#endif

#endif
