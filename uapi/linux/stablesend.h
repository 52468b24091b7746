/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * stablesend: stable, single-copy file-to-socket transmission.
 *
 * splice() and sendfile() hand page-cache pages to the network by
 * reference, so a write to the file after the call returned can still
 * change the bytes on the wire.  /dev/stablesend copies the requested
 * range once, at submission, into pages the module owns (the snapshot)
 * and hands those pages to the socket by reference.  Every byte sent is
 * the file's content at some instant between the submitting call's entry
 * and its return, as with pread(2).
 *
 * Every structure uses fixed-size fields with identical layout on 32-bit
 * and 64-bit, so compat_ioctl is a pass-through.  Reserved fields and
 * unknown flags must be zero, or the call fails with EINVAL.
 *
 * STABLESEND_IOC_SETUP (struct stablesend_setup, read/write)
 *	Configure this open of the device, once, before the first submission
 *	(EBUSY afterwards).  Optional: a context that is never set up uses no
 *	eventfd and the module's default memory limit.  Returns the features
 *	so that callers can probe at run time.
 *
 * STABLESEND_IOC_SUBMIT (struct stablesend_submit, write)
 *	Asynchronous submission of an array of requests.  Each request is
 *	validated, snapshotted and queued on its socket before the next one is
 *	looked at.  Returns the number accepted (>= 1), or -1 with errno set
 *	when the first one failed; a later failure ends the batch early and
 *	is reported again when the rest is resubmitted.  Each accepted request
 *	produces exactly one completion with STABLESEND_CQE_SENT set, and one
 *	more with STABLESEND_CQE_RELEASED if it asked for it.
 *	The bytes are handed to the socket by the submitting thread: what the
 *	socket takes at once during the call, the rest from task work queued
 *	on that thread when the socket has space (it runs when the thread
 *	returns to user space or sleeps interruptibly, and like io_uring's can
 *	end such a sleep early: epoll_wait(2) and calls with a timeout may
 *	fail with EINTR, restartable calls restart).  When the thread exits
 *	another thread of its process takes over; when the whole process is
 *	gone the requests end where they are (-ECANCELED when nothing was
 *	sent, else the bytes sent), within seconds also on a socket that
 *	stays full.
 *
 * STABLESEND_IOC_SEND (struct stablesend_req, write)
 *	Synchronous submission of one request, sent by the caller as
 *	sendfile(2) would send it: returns the number of bytes the socket took
 *	(header + file bytes + trailer), or -1 with errno when it took none.
 *	It waits for requests queued before it on the socket (sending those
 *	of the calling process that are not another thread's SEND), then, on
 *	a blocking socket, until every
 *	byte is in the socket, as send(2) waits: SO_SNDTIMEO ends the wait
 *	(a short count, or EAGAIN), a signal before the first byte gives EINTR
 *	(or a restart under SA_RESTART) and after it a short count; SIGKILL
 *	ends it.  On a non-blocking socket it sends what the socket takes now:
 *	a short count, or EAGAIN (also when other requests are queued ahead;
 *	on TCP, without a copy, whenever poll(2) reports neither POLLOUT nor
 *	an error, where sendfile(2) may still take a few bytes; AF_UNIX, whose
 *	poll(2) is stricter than its send, is tried as sendfile(2) would be).
 *	On a non-blocking socket it snapshots no more bytes than its send buffer
 *	(SO_SNDBUF), about the most it takes at once (TCP may take a little
 *	more, so a count can be below what sendfile(2) sends): a request
 *	larger than that is cut after its header and as many file bytes as
 *	fit, and its trailer is left for a later call; the memory limits
 *	(EMSGSIZE) apply to what is left.  An O_APPEND socket fails with
 *	EINVAL, as with sendfile(2) (STABLESEND_FEAT_SEND_SOCKFLAGS).
 *	It waits for snapshot memory as the device fd says (above), memory
 *	that other sockets' stalled peers may hold for good; on a
 *	non-blocking socket with STABLESEND_REQ_NOWAIT (STABLESEND_FEAT_NOWAIT)
 *	it never does: it snapshots no more than the whole chunks of
 *	16 pages (64 KiB with 4 KiB pages) free now, when at least one
 *	is (a short count, the socket maybe still writable), and when the
 *	request does not fit what is free fails with ENOSPC if nothing is on
 *	the socket's queue (EAGAIN if something is, as above: a request that
 *	has not returned from its own submission yet is not on it), so that
 *	the caller can send those bytes another way at once
 *	(stablesend_sendfile() sends a copy).  ENOSPC is true when the call
 *	returns; a request queued after it goes before the caller's own
 *	send(2).  Neither refusal nor that short count arms an EPOLLOUT of
 *	the device fd: wait on the socket.  The flag means nothing elsewhere
 *	(SUBMIT, io_uring, a blocking socket).
 *	The bytes reported are exactly those the peer gets; the rest of the
 *	snapshot is dropped.  The device fd's O_NONBLOCK only affects waiting
 *	for memory.  No SENT completion is queued for it; a RELEASED one is if
 *	STABLESEND_REQ_NOTIFY_RELEASE is set and the call returned bytes (a
 *	SEND that fails is as if never made: no completion at all).  A
 *	STABLESEND_IOC_CANCEL from another thread that takes the request
 *	before it started makes the call fail with ECANCELED.  Memory
 *	limits above INT_MAX are refused so a result always fits.
 *
 * STABLESEND_IOC_CANCEL (__u64 user_data, write)
 *	Cancel every request of this open with that user_data that has not
 *	started transmitting; each completes with -ECANCELED.  Returns the
 *	number cancelled, or -1 with ENOENT when there was none.
 *
 * STABLESEND_IOC_COUNTERS (struct stablesend_counters, read)
 *	This open's counters.
 *
 * read(2) on the device fd returns whole struct stablesend_cqe records
 * (EINVAL for a buffer smaller than one record), blocking unless the fd is
 * non-blocking (EAGAIN).  poll(2) reports EPOLLIN while completions are
 * queued and EPOLLOUT while enough snapshot memory is free under the
 * open's limit and under the user's (module parameter user_limit, all
 * opens of the user who opened the device together): 64 KiB (or the
 * whole limit, when smaller), and after a request of this open (any
 * thread's, any io_uring command's, also one with STABLESEND_URING_F_WAIT
 * that io_uring then retries) was refused for memory, as much as it needs,
 * until a request of this open gets its memory (a refused size over a
 * limit lowered since is not waited for); and after a request of this
 * open was refused its completion records (ENOBUFS, below), only once as
 * many as it needed (one, or two for a SUBMIT with NOTIFY_RELEASE) are
 * free under both of their bounds, until a request of this open gets its
 * records.  The fd has one wait queue, so
 * select(2), poll(2), epoll(7), io_uring's IORING_OP_POLL_ADD and aio's
 * IOCB_CMD_POLL all work.  A wake-up that carries EPOLLOUT is sent only
 * when the amount EPOLLOUT waits for (above) was seen free (another open
 * of the user's, or a request racing the look, may take it first: a
 * resubmission can still be refused), and, as for a socket's write space,
 * once after each time a poll for EPOLLOUT or a refused request found it
 * missing.  So with edge-triggered epoll or a multishot POLL_ADD, wait
 * for EPOLLOUT only after a submission failed with EAGAIN or ENOBUFS or
 * returned a short count; a successful submission does not re-arm it.  The
 * eventfd, if any, is signalled once per completion record, just after
 * the record is queued: a reader may see a record before its count.
 *
 * io_uring (STABLESEND_FEAT_URING): an IORING_OP_URING_CMD on the device fd
 * (a fixed file or not) with cmd_op STABLESEND_URING_CMD_SEND and a
 * struct stablesend_uring_cmd at the start of the SQE's command area (it
 * fits a ring of ordinary 64-byte SQEs; IORING_SETUP_SQE128 rings work
 * too) submits one request, as one entry of STABLESEND_IOC_SUBMIT would,
 * under this open's memory limit and its user's.  The struct
 * stablesend_req it points to is copied when io_uring issues the command.
 *	Snapshot: taken while io_uring issues the command, which for an
 *	ordinary submission is inside the io_uring_enter(2) call that
 *	submits it, as with SUBMIT: once that call returns, later writes to
 *	the file do not reach the wire.  By default the command never waits
 *	for memory and never asks io_uring to retry it from a worker: with
 *	the limit reached its CQE carries -EAGAIN (poll the device fd for
 *	EPOLLOUT, also with IORING_OP_POLL_ADD, and submit it again).  With
 *	STABLESEND_URING_F_WAIT in the command area's flags, a command that
 *	finds the limit reached asks io_uring to issue it again from its
 *	worker (io-wq), which reads the struct stablesend_req again and
 *	waits for memory there as a blocking SUBMIT would (chunk by chunk);
 *	the snapshot is then taken in that worker, and the command is
 *	queued on its socket only then: commands submitted after it may go
 *	out before it (keep one such command per socket in flight, or
 *	wait for its CQE, where order matters), and STABLESEND_IOC_CANCEL
 *	does not see it while it waits.  With IOSQE_ASYNC, behind
 *	a link, or on an IORING_SETUP_SQPOLL ring, io_uring also issues it
 *	later from its own threads.  In those cases the CQE is the first
 *	sign the snapshot is taken, and the struct stablesend_req must stay
 *	valid until the CQE.  Behind a link, the io_uring of some kernels
 *	(6.12; not 6.1 or 7.3) also reads the command's SQE only when it
 *	issues it, after io_uring_enter(2) returned: an application that
 *	has reused that SQ entry by then gets the request the entry holds
 *	at that time.  IOSQE_ASYNC on the command makes io_uring copy the
 *	SQE at submission on every kernel.
 *	Credentials: the issuing task's, as io_uring sets them (the SQE's
 *	personality; the ring creator's for SQPOLL).
 *	Completion: one CQE whose res is the SENT result (bytes sent, or
 *	-errno from the table below: the same as SUBMIT); with
 *	STABLESEND_REQ_NOTIFY_RELEASE it is posted only once the network
 *	stack has also released the pages (io_uring lets a command post one
 *	CQE only, so there is no separate notification).  No record is
 *	queued on the device fd and its eventfd is not signalled.
 *	Cancellation: STABLESEND_IOC_CANCEL on the device fd cancels it by
 *	its stablesend user_data once it is queued (io_uring's
 *	IORING_OP_ASYNC_CANCEL reaches a command only while it is in
 *	io_uring's worker before it is queued: not started yet, or waiting
 *	for memory, it completes with -ECANCELED; while the worker takes the
 *	snapshot it may still complete normally).  When io_uring
 *	cancels its requests (the ring
 *	is closed, also by the process's exit; the submitting process
 *	execs), the commands end at once where they are: the CQE carries
 *	-ECANCELED when nothing was sent, else the bytes sent so far, and a
 *	pending RELEASED wait is cut short.  Closing the device fd does not
 *	end them (the ring holds the file).  The bytes are sent by the
 *	submitting thread, or by another thread of its process (never by
 *	io_uring's own threads), as for SUBMIT: a thread that exits leaves
 *	its commands to the others (from 6.7 on, unless io_uring then still
 *	tracks a request of that thread on an io_uring fd: io_uring cancels
 *	the thread's commands too).
 *	Errors before any snapshot (bad cmd_op, a bad command area,
 *	registered buffers) give -EINVAL or -EOPNOTSUPP in the CQE; a
 *	request pointer that faults, -EFAULT.
 *
 * Errors of a submission (returned by the ioctl):
 *	EBADF	file_fd or sock_fd is not open, or the file is not open for
 *		reading (write-only and O_PATH fds); SETUP: eventfd is
 *		neither -1 nor open.
 *	EINVAL	the file is not a regular file; a reserved field or unknown flag
 *		is set; the request carries no byte at all; offset + len
 *		overflows or exceeds the largest file offset; head_len or
 *		tail_len exceeds STABLESEND_HDTR_MAX; entry_size is wrong;
 *		SEND: the socket is O_APPEND, as sendfile(2) refuses it.
 *		SETUP: a mem_limit below one page or above max_limit (or
 *		INT_MAX); an eventfd that is not an eventfd.
 *	ENOTSOCK sock_fd is not a socket.
 *	EOPNOTSUPP the socket is not TCP (IPv4/IPv6, optionally with the kTLS
 *		ULP) or AF_UNIX stream.
 *	ENOTCONN the socket is not connected (including listening sockets).
 *	EPIPE	the socket is shut down for writing.
 *	ENODATA	offset is at or past end of file.
 *	EMSGSIZE the request's memory is larger than this open's memory
 *		limit, or than user_limit (without CAP_SYS_RESOURCE); for a
 *		SEND on a non-blocking socket, once cut to its send buffer.
 *		Its memory: header, file bytes and trailer, in 64 KiB chunks,
 *		the last one rounded up to a power of two of pages (a 100 KiB
 *		request takes 128 KiB).
 *	EAGAIN	non-blocking fd and the open's or the user's memory limit
 *		is reached now (the user's: unless CAP_SYS_RESOURCE).
 *		SEND with STABLESEND_REQ_NOWAIT on a non-blocking socket,
 *		any device fd: the same with requests queued on the socket.
 *	ENOSPC	(SEND with STABLESEND_REQ_NOWAIT on a non-blocking socket)
 *		not enough snapshot memory free now, nothing queued on the
 *		socket.
 *	EINTR	a signal arrived while waiting for memory.
 *	ENOBUFS	the request's completion records (one, two with
 *		NOTIFY_RELEASE, none for SEND without it) would take this
 *		open past 65536 unread or owed to requests in flight, or all
 *		opens of the user who opened the device together past
 *		user_records of them (module
 *		parameter, default 262144, at least 2; unless
 *		CAP_SYS_RESOURCE): read some first, on whichever of the
 *		user's opens holds them.  It never waits; EPOLLOUT (above)
 *		comes once the records are free.  SEND: also when the socket
 *		could not allocate a buffer, as send(2) reports it (an
 *		asynchronous request retries after a short wait instead).
 *	ECANCELED (SEND only) cancelled by STABLESEND_IOC_CANCEL first.
 *	EFAULT	a user pointer (request array, header, trailer) is bad.
 *	ENOMEM	the module could not allocate snapshot pages.
 *	EIO	reading the file failed, also after part of the range was
 *		read: nothing is sent (but for a SEND without a trailer,
 *		which sends the bytes read before the failure and returns
 *		the bytes sent, as sendfile(2) does: the next call fails).
 *		A read that fails otherwise gives its own errno the same
 *		way (e.g. EACCES or EPERM from an LSM or a fanotify
 *		permission event).
 *	(SEND only) any error of send(2) on the socket when it took no
 *		byte: EPIPE, ECONNRESET, ETIMEDOUT, EACCES or EPERM from an
 *		LSM, EAGAIN after SO_SNDTIMEO, EINTR, ...
 *
 * Results in completions: bytes sent, or -EPIPE/-ECONNRESET (peer gone),
 * -ECANCELED (cancelled, or the device fd was closed first), -ENOMEM, or
 * whatever other error the socket's sendmsg returned (e.g. -ENOBUFS when
 * the kernel ran out of memory for socket buffers).  An error result does
 * not mean no byte went out: the stream is then broken, as with send(2).
 * A file that shrank before the copy gives a short result: no byte past
 * the end of file at submission is ever sent.
 */
#ifndef _UAPI_LINUX_STABLESEND_H
#define _UAPI_LINUX_STABLESEND_H

#include <linux/const.h>
#include <linux/ioctl.h>
#include <linux/types.h>

#define STABLESEND_ABI_VERSION		1
#define STABLESEND_DEVICE		"/dev/stablesend"

/* Largest header or trailer, in bytes. */
#define STABLESEND_HDTR_MAX		65536

/* Features (struct stablesend_setup.features). */
#define STABLESEND_FEAT_SUBMIT		_BITULL(0) /* async SUBMIT, read/poll */
#define STABLESEND_FEAT_SEND		_BITULL(1) /* synchronous SEND */
#define STABLESEND_FEAT_HDTR		_BITULL(2) /* header and trailer */
#define STABLESEND_FEAT_CANCEL		_BITULL(3)
#define STABLESEND_FEAT_RELEASE		_BITULL(4) /* RELEASED completions */
#define STABLESEND_FEAT_TCP		_BITULL(5) /* TCP over IPv4 and IPv6 */
#define STABLESEND_FEAT_UNIX		_BITULL(6) /* AF_UNIX stream */
#define STABLESEND_FEAT_KTLS		_BITULL(7) /* TCP with the kTLS ULP */
#define STABLESEND_FEAT_SPLICE_PAGES	_BITULL(8) /* by-reference handoff */
#define STABLESEND_FEAT_URING		_BITULL(9) /* io_uring command */
/* SEND refuses O_APPEND sockets and caps a non-blocking one's snapshot */
#define STABLESEND_FEAT_SEND_SOCKFLAGS	_BITULL(10)
#define STABLESEND_FEAT_NOWAIT		_BITULL(11) /* STABLESEND_REQ_NOWAIT */

/**
 * struct stablesend_setup - configure one open of the device
 * @eventfd:	in: eventfd signalled once per completion record, or -1
 * @flags:	in: must be zero
 * @mem_limit:	in: bytes of snapshot memory this open may hold, 0 for the
 *		module default (parameter default_limit); larger than the
 *		parameter max_limit fails with EINVAL; above user_limit it is
 *		cut to user_limit (without CAP_SYS_RESOURCE).  out: the limit
 *		in force.
 * @features:	out: STABLESEND_FEAT_* supported by this module and kernel
 * @abi_version: out: STABLESEND_ABI_VERSION of the module
 * @reserved0:	must be zero
 * @reserved:	must be zero
 */
struct stablesend_setup {
	__s32 eventfd;
	__u32 flags;
	__u64 mem_limit;
	__u64 features;
	__u32 abi_version;
	__u32 reserved0;
	__u64 reserved[4];
};

/* Request flags (struct stablesend_req.flags). */
#define STABLESEND_REQ_NOTIFY_RELEASE	_BITUL(0) /* RELEASED completion */
#define STABLESEND_REQ_MORE		_BITUL(1) /* MSG_MORE on the last byte */
/* SEND, non-blocking socket: never wait for memory (ENOSPC), see above */
#define STABLESEND_REQ_NOWAIT		_BITUL(2)
#define STABLESEND_REQ_FLAGS		(STABLESEND_REQ_NOTIFY_RELEASE | \
					 STABLESEND_REQ_MORE | \
					 STABLESEND_REQ_NOWAIT)

/**
 * struct stablesend_req - one range of a file to send, with optional framing
 * @file_fd:	regular file open for reading
 * @sock_fd:	connected TCP (IPv4/IPv6, kTLS allowed) or AF_UNIX stream socket
 * @offset:	file offset of the first byte
 * @len:	bytes of the file to send; fewer if the file is shorter
 * @head:	user pointer to @head_len bytes sent before the file bytes
 * @tail:	user pointer to @tail_len bytes sent after the file bytes
 * @head_len:	at most STABLESEND_HDTR_MAX
 * @tail_len:	at most STABLESEND_HDTR_MAX
 * @user_data:	returned in this request's completions
 * @flags:	STABLESEND_REQ_*
 * @reserved:	must be zero
 */
struct stablesend_req {
	__s32 file_fd;
	__s32 sock_fd;
	__u64 offset;
	__u64 len;
	__u64 head;
	__u64 tail;
	__u32 head_len;
	__u32 tail_len;
	__u64 user_data;
	__u32 flags;
	__u32 reserved;
};

/**
 * struct stablesend_submit - argument of STABLESEND_IOC_SUBMIT
 * @reqs:	user pointer to an array of @nr struct stablesend_req
 * @nr:		number of requests, at least 1 and at most 1024
 * @entry_size:	sizeof(struct stablesend_req)
 * @flags:	must be zero
 * @reserved:	must be zero
 */
struct stablesend_submit {
	__u64 reqs;
	__u32 nr;
	__u32 entry_size;
	__u32 flags;
	__u32 reserved;
};

#define STABLESEND_SUBMIT_MAX		1024

/* Completion flags (struct stablesend_cqe.flags). */
#define STABLESEND_CQE_SENT		_BITUL(0) /* transmission finished */
#define STABLESEND_CQE_RELEASED		_BITUL(1) /* all pages freed */
#define STABLESEND_CQE_COPIED		_BITUL(2) /* the path copied the data */

/**
 * struct stablesend_cqe - one completion record, as read(2) returns it
 * @user_data:	the request's user_data
 * @res:	with SENT: bytes sent (header + file + trailer) or -errno;
 *		with RELEASED: 0
 * @flags:	STABLESEND_CQE_*
 * @reserved:	zero
 */
struct stablesend_cqe {
	__u64 user_data;
	__s64 res;
	__u32 flags;
	__u32 reserved;
};

/**
 * struct stablesend_counters - per-open counters
 * @submitted:	requests accepted (SENDs and io_uring commands too)
 * @completed:	accepted requests finished (a SEND's result counts)
 * @failed:	finished with a negative result
 * @cancelled:	requests cancelled
 * @bytes_sent:	bytes handed to sockets
 * @mem_in_use:	snapshot bytes held now (queued or in flight)
 * @mem_limit:	the memory limit in force
 * @mem_peak:	highest @mem_in_use seen
 * @cqes_pending: completion records not read yet
 * @copied:	requests whose path copied the data again (e.g. kTLS)
 * @reserved:	zero
 */
struct stablesend_counters {
	__u64 submitted;
	__u64 completed;
	__u64 failed;
	__u64 cancelled;
	__u64 bytes_sent;
	__u64 mem_in_use;
	__u64 mem_limit;
	__u64 mem_peak;
	__u64 cqes_pending;
	__u64 copied;
	__u64 reserved[6];
};

/**
 * struct stablesend_uring_cmd - the command area of an io_uring SQE
 * @req:	user pointer to one struct stablesend_req
 * @flags:	0 or STABLESEND_URING_F_WAIT
 * @reserved:	must be zero
 */
struct stablesend_uring_cmd {
	__u64 req;
	__u32 flags;
	__u32 reserved;
};

#define STABLESEND_IOC_MAGIC		0xB5
#define STABLESEND_IOC_SETUP	_IOWR(STABLESEND_IOC_MAGIC, 0, struct stablesend_setup)
#define STABLESEND_IOC_SUBMIT	_IOW(STABLESEND_IOC_MAGIC, 1, struct stablesend_submit)
#define STABLESEND_IOC_SEND	_IOW(STABLESEND_IOC_MAGIC, 2, struct stablesend_req)
#define STABLESEND_IOC_CANCEL	_IOW(STABLESEND_IOC_MAGIC, 3, __u64)
#define STABLESEND_IOC_COUNTERS	_IOR(STABLESEND_IOC_MAGIC, 4, struct stablesend_counters)

/*
 * struct stablesend_uring_cmd flags: at the memory limit, wait for memory
 * in io_uring's worker instead of completing with -EAGAIN (see above).
 */
#define STABLESEND_URING_F_WAIT		_BITUL(0)

/* io_uring cmd_op of a request (IORING_OP_URING_CMD on the device fd). */
#define STABLESEND_URING_CMD_SEND _IOW(STABLESEND_IOC_MAGIC, 0x40, struct stablesend_uring_cmd)

#endif /* _UAPI_LINUX_STABLESEND_H */
