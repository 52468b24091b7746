// SPDX-License-Identifier: GPL-2.0
/*
 * uring-peers.c: the io_uring peers of the bench, each written the way its
 * users would write it (bench.h documents the prep/run/fini contract).
 *
 * "io_uring": registered buffers (one slot of cl->size bytes per request
 * in flight, cl->depth slots) and registered files (the file, the socket);
 * READ_FIXED into every free slot, then a send per request.  The send op
 * and the ring flags are chosen by measurement in prep():
 *	send	IORING_OP_SEND, copying: the slot is free at its CQE
 *	send_zc	IORING_OP_SEND_ZC from the registered buffer: the slot is
 *		free at its notification CQE (IORING_CQE_F_NOTIF)
 *	defer	IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN
 *	plain	neither
 *
 * "samba": Samba's stable path: IORING_OP_READ (no registered buffer, no
 * registered file) into a buffer per request, then IORING_OP_SENDMSG_ZC
 * with a one-element iovec on the (unregistered) socket; a buffer is
 * free at its notification.  Below 16 KiB IORING_OP_SENDMSG (copying),
 * as the other zero-copy peer does.  Ring flags chosen by measurement as above
 * (Samba's vfs_io_uring sets up a plain ring, 128 entries, and reads with
 * a one-iovec READV, as good as READ here).
 *
 * Both run the same engine (up_run()):
 *
 * Overlap.  Request i uses slot i % depth.  A READ is submitted for a
 * request as soon as its slot is free, whatever the sends are doing, so up
 * to depth - (slots being sent or awaiting notification) reads run ahead
 * of the socket.  In a submission the sends come first: a read of a
 * page-cache file is copied inline, in the submitting system call, except
 * from tmpfs (no FMODE_NOWAIT), where io_uring hands every read to an
 * io-wq worker thread.  (Capping the reads a submission carries, or how
 * far reads run ahead of the sends, so that a send waiting for the socket
 * goes on between reads, measured no faster on the test host, 10-15%
 * slower in one A/B at depth 8, 1 and 8 MiB: not done.)
 *
 * Order.  Two sends in flight on one TCP socket may interleave: a send
 * that meets a full socket buffer queues what fits and waits for poll to
 * send the rest (MSG_WAITALL), and a later send issued meanwhile would put
 * its bytes in between.  So sends go out in chains: every request whose
 * read is done and whose predecessors are all sent or in the chain, in
 * request order, linked with IOSQE_IO_LINK (io_uring starts a link only
 * when the previous one completed, i.e. all its bytes are queued on the
 * socket) and MSG_WAITALL (a short send is retried by io_uring itself;
 * a send that still ends short, or an error, fails the rest of the chain
 * with -ECANCELED and the cell dies).  A new chain is submitted only when
 * the previous one's last send completed; the reads keep going meanwhile.
 * Requests reach the socket in request order, each contiguous, so the
 * k-th block on the socket carries the k-th offset cell_off() handed out.
 *
 * Waiting.  The loop waits in io_uring_enter (io_uring_submit_and_wait for
 * one CQE) whenever no CQE is ready: with DEFER_TASKRUN completions, link
 * continuations and notifications only run while the task waits there,
 * and one wait runs all the task work queued (the local work loop repeats
 * until its list is empty), so a chain that never blocks on the socket
 * completes in one system call.
 *
 * Setup (rings, registrations, buffers, the trials) is all in prep(); run()
 * only submits and reaps.  run() returns when every send and every
 * notification is in: all buffers reusable.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "bench.h"

#ifdef HAVE_LIBURING
#include <liburing.h>

/* 6.2+: a notification's res says whether the kernel copied after all. */
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)
#endif

/*
 * A trial: at least TRIAL_MIN_REQ requests and TRIAL_BYTES, and 2 x depth
 * requests so that every slot is used twice (a trial that never reuses a
 * slot never waits for a zero-copy notification, and zero copy looks far
 * better than it is: 8 MiB, depth 4, 4-request trials put SEND_ZC ahead
 * of SEND, 64 MiB cells then ran it at half SEND's rate), but at most
 * TRIAL_MAX_BYTES (a bench cell's budget: a cell moving that much reuses
 * no more than the trial does).  Run once per round; a variant's score is
 * the median of its rounds: on the 2-CPU host cells of one method and size
 * vary by 2x and more from run to run, in both directions (4 KiB cells of
 * every method flip between ~150 and ~600 MB/s; zero-copy cells at 8 MiB
 * now and then run at twice their median), and a best-of score picked
 * the variant with the luckiest run.  A variant is not tried again once
 * a trial of it took TRIAL_LONG seconds: long enough not to need a second
 * look, and zero copy at 4 KiB on tcp-lo runs at ~1 MB/s.
 */
#ifndef TRIAL_BYTES
#define TRIAL_BYTES	(4 * MiB)
#endif
#define TRIAL_MAX_BYTES	(64 * MiB)
#define TRIAL_MIN_REQ	4
#ifndef TRIAL_ROUNDS
#define TRIAL_ROUNDS	3
#endif
#define TRIAL_LONG	0.5

enum { K_URING, K_SAMBA };
/*
 * Below this size the samba peer sends with SENDMSG, copying, as
 * pread+zerocopy drops MSG_ZEROCOPY (the kernel's advice: zero copy pays
 * from about 10 KB); SENDMSG_ZC at 4 KiB on loopback waits for delayed
 * ACKs and ran at 1-4 MB/s.
 */
#define SAMBA_ZC_MIN	(16 * 1024)
enum { OP_SEND, OP_SEND_ZC, OP_SENDMSG_ZC, OP_SENDMSG };
enum { S_FREE, S_READING, S_READY, S_SENDING, S_NOTIF };
enum { U_READ = 1, U_SEND = 2 };
/* registered file indices, io_uring method */
enum { F_FILE, F_SOCK };

struct up_slot {
	char *buf;
	int state;
	int notif_early;	/* notification reaped before the send's CQE */
	struct iovec iov;	/* samba: SENDMSG_ZC's one-element iovec */
	struct msghdr msg;
};

struct up_var {
	const char *name;
	int op;			/* OP_* */
	int defer;
	int up;			/* ring set up */
	int sock;		/* the socket registered (io_uring method) */
	double trial[TRIAL_ROUNDS];	/* bytes/s */
	int ntrial;
	int settled;		/* no more trials */
	double bps;		/* the score: the trials' median */
	struct io_uring ring;
};

#define NVAR 4

struct up_state {
	int kind;		/* K_* */
	int tr;
	u64 size;
	unsigned int depth;
	char *mem;
	size_t mem_len;
	struct up_slot *slot;
	struct up_var v[NVAR];
	int nv;
	int cur;		/* the variant run() runs */
	unsigned int zc_flags;	/* IORING_SEND_ZC_REPORT_USAGE when the kernel has it */
};

static void die_res(int res, const char *what, u64 arg)
{
	errno = res < 0 ? -res : EIO;
	die("%s %llu: CQE res %d", what, arg, res);
}

/*
 * IORING_SEND_ZC_REPORT_USAGE (6.2): 6.1's prep refuses it with EINVAL.
 * Probed on an AF_UNIX socket, where a kernel that knows the flag fails
 * the send itself with EOPNOTSUPP (no zero copy on AF_UNIX) instead.
 */
static unsigned int probe_zc_report(void)
{
	static int known = -1;
	struct io_uring ring;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	int sv[2], ret;
	char c = 0;

	if (known >= 0)
		return known ? IORING_SEND_ZC_REPORT_USAGE : 0;
	known = 0;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		die("socketpair");
	if (!uring_init(&ring, 4, 0)) {
		sqe = io_uring_get_sqe(&ring);
		io_uring_prep_send_zc(sqe, sv[0], &c, 1, 0,
				      IORING_SEND_ZC_REPORT_USAGE);
		sqe->user_data = 1;
		do
			ret = io_uring_submit_and_wait(&ring, 1);
		while (ret == -EINTR);
		/* the send's CQE: 6.1 fails the prep, posts no notification */
		if (ret >= 0 && !io_uring_peek_cqe(&ring, &cqe)) {
			known = cqe->res != -EINVAL;
			io_uring_cqe_seen(&ring, cqe);
		}
		io_uring_queue_exit(&ring);
	}
	close(sv[0]);
	close(sv[1]);
	return known ? IORING_SEND_ZC_REPORT_USAGE : 0;
}

const char *uring_na(int tr)
{
	if (!have_uring)
		return "kernel lacks io_uring READ_FIXED/SEND/SEND_ZC/SENDMSG_ZC (or io_uring disabled)";
	if (tr == T_UNIX)
		return "AF_UNIX has no io_uring SEND_ZC/SENDMSG_ZC (plain SEND would do, but one verdict covers both io_uring peers)";
	return NULL;
}

static void up_ring_down(struct up_var *v)
{
	if (v->up)
		io_uring_queue_exit(&v->ring);	/* unregisters too */
	v->up = 0;
}

/* The ring of variant V, with buffers and files registered for K_URING. */
static int up_ring_up(struct up_state *st, struct up_var *v, int sock)
{
	/*
	 * SQ: a read and a send per slot at most; CQ (twice the SQ): a
	 * read's, a send's and a notification's CQE per slot at most
	 */
	unsigned int entries = 2 * st->depth < 8 ? 8 : 2 * st->depth;
	int ret = uring_init(&v->ring, entries, v->defer);

	if (ret) {
		errno = ret < 0 ? -ret : EINVAL;
		die("io_uring_queue_init (%u entries)", entries);
	}
	v->up = 1;
	if (v->defer && !(v->ring.flags & IORING_SETUP_DEFER_TASKRUN)) {
		/* the kernel refused the flags: the same as the plain variant */
		up_ring_down(v);
		return 0;
	}
	if (st->kind == K_URING) {
		struct iovec *iov = calloc(st->depth, sizeof(*iov));
		int fds[2];
		unsigned int i;

		if (!iov)
			die("calloc");
		for (i = 0; i < st->depth; i++) {
			iov[i].iov_base = st->slot[i].buf;
			iov[i].iov_len = st->size;
		}
		ret = io_uring_register_buffers(&v->ring, iov, st->depth);
		free(iov);
		if (ret) {
			errno = -ret;
			die("io_uring_register_buffers (%u x %llu bytes)",
			    st->depth, st->size);
		}
		fds[F_FILE] = file_fd;
		fds[F_SOCK] = sock;
		ret = io_uring_register_files(&v->ring, fds, 2);
		if (ret) {
			errno = -ret;
			die("io_uring_register_files");
		}
		v->sock = sock;
	}
	return 1;
}

static void up_free(struct up_state *st)
{
	int i;

	for (i = 0; i < st->nv; i++)
		up_ring_down(&st->v[i]);
	if (st->mem)
		munmap(st->mem, st->mem_len);
	free(st->slot);
	free(st);
}

void uring_fini(void *state)
{
	if (state)
		up_free(state);
}

static void up_run(struct cell *cl);

/*
 * The state lives as long as the transport, and so does its socket; should
 * a later prep() come with another socket, it replaces the registered one
 * (untimed; run() dies on a socket prep() did not register).
 */
static void up_files(struct up_var *v, int sock)
{
	int ret = io_uring_register_files_update(&v->ring, F_SOCK, &sock, 1);

	if (ret != 1) {
		errno = ret < 0 ? -ret : EIO;
		die("io_uring_register_files_update (socket)");
	}
	v->sock = sock;
}

static struct up_state *up_new(struct cell *cl, int kind)
{
	struct up_state *st = calloc(1, sizeof(*st));
	unsigned int i;

	if (!st)
		die("calloc");
	st->kind = kind;
	st->tr = cl->c->tr;
	st->size = cl->size;
	st->depth = cl->depth ? cl->depth : 1;
	st->mem_len = st->depth * cl->size;
	st->mem = big_alloc(st->mem_len);
	st->slot = calloc(st->depth, sizeof(*st->slot));
	if (!st->slot)
		die("calloc");
	for (i = 0; i < st->depth; i++) {
		struct up_slot *s = &st->slot[i];

		s->buf = st->mem + i * cl->size;
		s->iov.iov_base = s->buf;
		s->iov.iov_len = cl->size;
		s->msg.msg_iov = &s->iov;
		s->msg.msg_iovlen = 1;
	}
	if (kind == K_URING) {
		/* SEND: AF_UNIX would take it; the zero-copy ones not */
		st->v[st->nv++] = (struct up_var){ .name = "send,plain", .op = OP_SEND };
		st->v[st->nv++] = (struct up_var){ .name = "send,defer", .op = OP_SEND, .defer = 1 };
		if (st->tr != T_UNIX) {
			st->v[st->nv++] = (struct up_var){ .name = "send_zc,plain", .op = OP_SEND_ZC };
			st->v[st->nv++] = (struct up_var){ .name = "send_zc,defer", .op = OP_SEND_ZC, .defer = 1 };
		}
	} else if (cl->size < SAMBA_ZC_MIN) {
		/* Below the zero-copy threshold, as pread+zerocopy does. */
		st->v[st->nv++] = (struct up_var){ .name = "sendmsg,plain", .op = OP_SENDMSG };
		st->v[st->nv++] = (struct up_var){ .name = "sendmsg,defer", .op = OP_SENDMSG, .defer = 1 };
	} else {
		st->v[st->nv++] = (struct up_var){ .name = "sendmsg_zc,plain", .op = OP_SENDMSG_ZC };
		st->v[st->nv++] = (struct up_var){ .name = "sendmsg_zc,defer", .op = OP_SENDMSG_ZC, .defer = 1 };
	}
	st->zc_flags = probe_zc_report();
	return st;
}

static double median(double *x, int n)
{
	int i, j;

	for (i = 1; i < n; i++)	/* n <= TRIAL_ROUNDS: insertion sort */
		for (j = i; j > 0 && x[j] < x[j - 1]; j--) {
			double t = x[j];

			x[j] = x[j - 1];
			x[j - 1] = t;
		}
	return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

/*
 * Set up every variant, run each as an untimed trial (TRIAL_ROUNDS rounds,
 * the order rotated per round so that drift hits all alike), keep the
 * fastest and free the others.
 */
static void up_pick(struct cell *cl, struct up_state *st)
{
	u64 nreq = 2 * (u64)st->depth;
	int i, r, n = 0, best = -1;

	if (nreq > TRIAL_MAX_BYTES / cl->size)
		nreq = TRIAL_MAX_BYTES / cl->size;
	if (nreq < TRIAL_BYTES / cl->size)
		nreq = TRIAL_BYTES / cl->size;
	if (nreq < TRIAL_MIN_REQ)
		nreq = TRIAL_MIN_REQ;
	for (i = 0; i < st->nv; i++)
		n += up_ring_up(st, &st->v[i], cl->c->sock);
	if (!n)
		die("io_uring: no variant could be set up");
	/*
	 * Every slot once, unscored: the first use of the slots is slow (on
	 * the PVM test host a cell that used 8 fresh 8 MiB slots ran at a
	 * fifth of the speed, 1.3 ns/B more sender CPU), and that should not
	 * count against whichever variant runs first.
	 */
	for (i = 0; !st->v[i].up; i++)
		;
	st->cur = i;
	bench_trial(cl, up_run, st->depth);
	for (r = 0; r < TRIAL_ROUNDS; r++)
		for (i = 0; i < st->nv; i++) {
			int k = (i + r) % st->nv;
			struct up_var *v = &st->v[k];
			double bps;

			if (!v->up || v->settled)
				continue;
			st->cur = k;
			bps = bench_trial(cl, up_run, nreq);
			v->trial[v->ntrial++] = bps;
			if (nreq * cl->size >= TRIAL_LONG * bps)
				v->settled = 1;
		}
	for (i = 0; i < st->nv; i++) {
		if (!st->v[i].up)
			continue;
		st->v[i].bps = median(st->v[i].trial, st->v[i].ntrial);
		if (best < 0 || st->v[i].bps > st->v[best].bps)
			best = i;
	}
	/* the trials, for the log: what was measured, what was picked */
	fprintf(stderr, "  %-8s %s %llu KiB depth %u, trials of %llu x %llu KiB, MB/s:",
		tname[st->tr], st->kind == K_URING ? "io_uring" : "samba",
		cl->size / KiB, st->depth, nreq, cl->size / KiB);
	for (i = 0; i < st->nv; i++) {
		if (!st->v[i].up)
			continue;
		fprintf(stderr, " %s %.0f (", st->v[i].name, st->v[i].bps / 1e6);
		for (r = 0; r < st->v[i].ntrial; r++)
			fprintf(stderr, "%s%.0f", r ? " " : "", st->v[i].trial[r] / 1e6);
		fprintf(stderr, ")");
	}
	fprintf(stderr, "; picked %s\n", st->v[best].name);
	for (i = 0; i < st->nv; i++)
		if (i != best)
			up_ring_down(&st->v[i]);
	st->cur = best;
}

static void up_prep(struct cell *cl, int kind)
{
	struct up_state *st = *cl->state;

	if (st && (st->kind != kind || st->size != cl->size ||
		   st->depth != (cl->depth ? cl->depth : 1) ||
		   st->tr != cl->c->tr)) {
		/* another cell shape on this state: start over */
		up_free(st);
		*cl->state = st = NULL;
	}
	if (!st) {
		*cl->state = st = up_new(cl, kind);
		up_pick(cl, st);
	}
	if (kind == K_URING && st->v[st->cur].sock != cl->c->sock)
		up_files(&st->v[st->cur], cl->c->sock);
	cl->variant = st->v[st->cur].name;
}

void uring_prep(struct cell *cl)
{
	up_prep(cl, K_URING);
}

void samba_prep(struct cell *cl)
{
	up_prep(cl, K_SAMBA);
}

static inline struct io_uring_sqe *up_sqe(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe)
		die("io_uring: submission queue full");
	return sqe;
}

/* The slot of request i is free again. */
static inline void up_slot_free(struct up_slot *s, unsigned int *busy)
{
	s->state = S_FREE;
	s->notif_early = 0;
	(*busy)--;
}

static void up_run(struct cell *cl)
{
	struct up_state *st = *cl->state;
	struct up_var *v;
	struct io_uring *ring;
	unsigned int depth, busy = 0, chain = 0, pending = 0;
	u64 rd = 0;	/* requests whose read is submitted */
	u64 sq = 0;	/* requests whose send is submitted */
	u64 sent = 0;	/* requests whose send completed */
	u64 size = cl->size;
	int fixed;

	if (!st || st->size != cl->size || st->depth != (cl->depth ? cl->depth : 1))
		die("io_uring peer: run() without a matching prep()");
	v = &st->v[st->cur];
	if (!v->up)
		die("io_uring peer: variant %s not set up", v->name);
	if (st->kind == K_URING && v->sock != cl->c->sock)
		die("io_uring peer: socket %d not registered (prep() ran for %d)",
		    cl->c->sock, v->sock);
	ring = &v->ring;
	depth = st->depth;
	fixed = st->kind == K_URING;
	cl->variant = v->name;

	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned int head, seen = 0;
		int ret;

		/* sends: the next chain, once the previous one is done */
		if (!chain) {
			struct io_uring_sqe *sqe = NULL;

			while (sq < rd && st->slot[sq % depth].state == S_READY) {
				unsigned int i = sq % depth;
				struct up_slot *s = &st->slot[i];

				sqe = up_sqe(ring);
				switch (v->op) {
				case OP_SEND:
					io_uring_prep_send(sqe, F_SOCK, s->buf, size,
							   MSG_WAITALL);
					sqe->flags |= IOSQE_FIXED_FILE;
					break;
				case OP_SEND_ZC:
					io_uring_prep_send_zc_fixed(sqe, F_SOCK, s->buf,
								    size, MSG_WAITALL,
								    st->zc_flags, i);
					sqe->flags |= IOSQE_FIXED_FILE;
					break;
				case OP_SENDMSG:
					io_uring_prep_sendmsg(sqe, cl->c->sock,
							      &s->msg, MSG_WAITALL);
					break;
				default:
					io_uring_prep_sendmsg_zc(sqe, cl->c->sock,
								 &s->msg, MSG_WAITALL);
					sqe->ioprio |= st->zc_flags;
					break;
				}
				sqe->flags |= IOSQE_IO_LINK;
				sqe->user_data = (u64)i << 2 | U_SEND;
				s->state = S_SENDING;
				chain++;
				sq++;
				pending++;
			}
			if (sqe)
				sqe->flags &= ~IOSQE_IO_LINK;	/* ends the chain */
		}

		/*
		 * reads: into every free slot, in request order, behind the
		 * sends (a page-cache read is copied inline when submitted:
		 * the sends go first)
		 */
		while (rd < cl->nreq) {
			struct up_slot *s = &st->slot[rd % depth];
			struct io_uring_sqe *sqe;
			u64 off;

			if (s->state != S_FREE)
				break;
			off = cell_off(cl);
			sqe = up_sqe(ring);
			if (fixed) {
				io_uring_prep_read_fixed(sqe, F_FILE, s->buf, size,
							 off, rd % depth);
				sqe->flags |= IOSQE_FIXED_FILE;
			} else {
				io_uring_prep_read(sqe, file_fd, s->buf, size, off);
			}
			sqe->user_data = (rd % depth) << 2 | U_READ;
			s->state = S_READING;
			busy++;
			rd++;
			pending++;
		}
		if ((u64)busy * size > cl->peak)
			cl->peak = (u64)busy * size;

		if (sent == cl->nreq && !busy)
			break;

		/* submit; wait in the kernel unless CQEs are there to reap */
		if (pending || !io_uring_cq_ready(ring)) {
			do
				ret = io_uring_submit_and_wait(ring,
						io_uring_cq_ready(ring) ? 0 : 1);
			while (ret == -EINTR);
			if (ret < 0) {
				errno = -ret;
				die("io_uring_submit_and_wait (%s, %llu of %llu sent)",
				    v->name, sent, cl->nreq);
			}
			pending = 0;
		}

		io_uring_for_each_cqe(ring, head, cqe) {
			unsigned int i = cqe->user_data >> 2;
			struct up_slot *s;

			seen++;
			if (i >= depth)
				die("io_uring: stray CQE %llu", (u64)cqe->user_data);
			s = &st->slot[i];
			if (cqe->flags & IORING_CQE_F_NOTIF) {
				/* the kernel is done with the slot's pages */
				if ((unsigned int)cqe->res & IORING_NOTIF_USAGE_ZC_COPIED)
					cl->copied = 1;
				if (s->state == S_NOTIF)
					up_slot_free(s, &busy);
				else if (s->state == S_SENDING)
					s->notif_early = 1;
				else
					die("io_uring: notification for slot %u in state %d",
					    i, s->state);
				continue;
			}
			if ((cqe->user_data & 3) == U_READ) {
				if (cqe->res != (int)size)
					die_res(cqe->res, fixed ? "io_uring READ_FIXED, slot"
						: "io_uring READ, slot", i);
				s->state = S_READY;
				continue;
			}
			if (cqe->res != (int)size) {
				if (cqe->res == -ECANCELED)
					die_res(cqe->res, "io_uring send chain broken (an earlier send failed or was short), slot", i);
				die_res(cqe->res, v->op == OP_SEND ? "io_uring SEND (short or failed), slot" :
					v->op == OP_SEND_ZC ? "io_uring SEND_ZC (short or failed), slot" :
					v->op == OP_SENDMSG ? "io_uring SENDMSG (short or failed), slot" :
					"io_uring SENDMSG_ZC (short or failed), slot", i);
			}
			chain--;
			sent++;
			if (v->op != OP_SEND && v->op != OP_SENDMSG &&
			    (cqe->flags & IORING_CQE_F_MORE) &&
			    !s->notif_early)
				s->state = S_NOTIF;
			else
				up_slot_free(s, &busy);
		}
		io_uring_cq_advance(ring, seen);
	}
	cl->peak_valid = 1;
}

void uring_run(struct cell *cl)
{
	up_run(cl);
}

void samba_run(struct cell *cl)
{
	up_run(cl);
}

#endif /* HAVE_LIBURING */
