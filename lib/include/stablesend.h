/* SPDX-License-Identifier: MIT */
/*
 * libstablesend: stable, single-copy file-to-socket transmission.
 *
 * The library is a thin layer over /dev/stablesend (see
 * <linux/stablesend.h> for the kernel ABI):
 *
 *  - stablesend_sendfile() is a drop-in for sendfile(2) that is stable: the
 *    bytes sent are the file's content during the call, never a later
 *    write's.  It uses the module when present and pread(2)+send(2)
 *    otherwise.
 *    stablesend_sendfile_hdtr() sends a header and a trailer around the
 *    file bytes in the same call.
 *
 *  - stablesend_open() / _submit() / _reap() / _cancel() / _close() drive
 *    one asynchronous context (one open of the device).
 *
 *  - stablesend_prep_uring() fills an io_uring SQE that submits a request
 *    on the application's own ring (STABLESEND_FEAT_URING): its CQE is
 *    the completion.
 *
 * Requests and completions are the kernel's own structures:
 * struct stablesend_req, struct stablesend_cqe and struct
 * stablesend_counters come from <linux/stablesend.h> unchanged, so a
 * submission is passed to the kernel without conversion.  The header and
 * trailer of a request are user pointers stored in __u64 fields; use
 * stablesend_prep_req() and stablesend_prep_hdtr() to fill them.
 *
 * Functions that return int report errors as -errno (errno is left
 * alone); stablesend_sendfile() and stablesend_open() follow their libc
 * counterparts and set errno.
 *
 * ABI (lib/README.md): those three structures are frozen at their sizes,
 * checked below; new members take reserved space.  Compile with
 * `pkg-config --cflags libstablesend`: <linux/stablesend.h> is installed
 * under the library's own include folder.
 */
#ifndef STABLESEND_H
#define STABLESEND_H

#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <linux/io_uring.h>
#include <linux/stablesend.h>

/* stablesend_sendfile() takes a 64-bit off_t, on every architecture. */
#if !defined(__LP64__) && (!defined(_FILE_OFFSET_BITS) || _FILE_OFFSET_BITS != 64)
#error "libstablesend needs a 64-bit off_t: compile with -D_FILE_OFFSET_BITS=64"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The version of this header: PACKAGE_VERSION in dkms.conf (the library
 * does not build when they differ).  STABLESEND_CHECK_VERSION(major, minor)
 * is true when this header is at least major.minor; at run time,
 * stablesend_check_version() asks the same of the library that runs.
 */
#define STABLESEND_VERSION_MAJOR	0
#define STABLESEND_VERSION_MINOR	1
#define STABLESEND_VERSION_PATCH	0
#define STABLESEND_CHECK_VERSION(major, minor) \
	(STABLESEND_VERSION_MAJOR > (major) || \
	 (STABLESEND_VERSION_MAJOR == (major) && \
	  STABLESEND_VERSION_MINOR >= (minor)))

/*
 * Frozen sizes: the library passes arrays of these to the kernel and
 * copies these sizes into the caller's memory, so a program built against
 * an older header must keep working with a newer library.  A change to
 * <linux/stablesend.h> that resizes one fails here, in the library's build
 * and in every program's.
 */
#define STABLESEND_REQ_SIZE		64
#define STABLESEND_CQE_SIZE		24
#define STABLESEND_COUNTERS_SIZE	128
typedef char stablesend_req_size_is_frozen
	[sizeof(struct stablesend_req) == STABLESEND_REQ_SIZE ? 1 : -1];
typedef char stablesend_cqe_size_is_frozen
	[sizeof(struct stablesend_cqe) == STABLESEND_CQE_SIZE ? 1 : -1];
typedef char stablesend_counters_size_is_frozen
	[sizeof(struct stablesend_counters) == STABLESEND_COUNTERS_SIZE ? 1 : -1];

/* stablesend_open() flags. */
#define STABLESEND_OPEN_NONBLOCK	(1U << 0) /* EAGAIN instead of waiting */
#define STABLESEND_OPEN_FLAGS		(STABLESEND_OPEN_NONBLOCK)

/* stablesend_sendfile_path() results. */
#define STABLESEND_PATH_NONE		0 /* no call has moved data yet */
#define STABLESEND_PATH_MODULE		1 /* /dev/stablesend */
#define STABLESEND_PATH_COPY		2 /* pread(2) + send(2)/write(2) */

/* Environment variable: "1" makes a missing module an error (ENODEV). */
#define STABLESEND_ENV_REQUIRE_MODULE	"STABLESEND_REQUIRE_MODULE"

struct stablesend;

ssize_t stablesend_sendfile(int out_fd, int in_fd, off_t *offset, size_t count);
ssize_t stablesend_sendfile_hdtr(int out_fd, int in_fd, off_t *offset,
				 size_t count, const void *head,
				 size_t head_len, const void *tail,
				 size_t tail_len, unsigned int flags);
int stablesend_sendfile_path(void);

struct stablesend *stablesend_open(int eventfd, unsigned int flags);
struct stablesend *stablesend_open_limit(int eventfd, unsigned int flags,
					 uint64_t mem_limit);
void stablesend_close(struct stablesend *ss);
int stablesend_fd(struct stablesend *ss);

int stablesend_submit(struct stablesend *ss,
		      const struct stablesend_req *reqs, unsigned int n);
int stablesend_reap(struct stablesend *ss, struct stablesend_cqe *cqes,
		    unsigned int max, int timeout_ms);
int stablesend_cancel(struct stablesend *ss, __u64 user_data);

int stablesend_counters(struct stablesend *ss, struct stablesend_counters *c);
__u64 stablesend_features(struct stablesend *ss);
__u64 stablesend_mem_limit(struct stablesend *ss);
unsigned int stablesend_abi_version(struct stablesend *ss);
const char *stablesend_feature_name(__u64 feature);

const char *stablesend_version(void);
int stablesend_check_version(int major, int minor);

/*
 * Fill in a request: the whole structure is cleared first, so reserved
 * fields are zero and there is no header, trailer or flag.
 */
static inline void stablesend_prep_req(struct stablesend_req *req,
				       int file_fd, int sock_fd, __u64 offset,
				       __u64 len, __u64 user_data)
{
	memset(req, 0, sizeof(*req));
	req->file_fd = file_fd;
	req->sock_fd = sock_fd;
	req->offset = offset;
	req->len = len;
	req->user_data = user_data;
}

/* Attach header and trailer bytes (NULL/0 for none); copied at submission. */
static inline void stablesend_prep_hdtr(struct stablesend_req *req,
					const void *head, __u32 head_len,
					const void *tail, __u32 tail_len)
{
	req->head = (__u64)(uintptr_t)head;
	req->head_len = head_len;
	req->tail = (__u64)(uintptr_t)tail;
	req->tail_len = tail_len;
}

/*
 * Fill io_uring SQE @sqe (liburing's io_uring_get_sqe(), or a raw ring of
 * 64- or 128-byte SQEs) with a request on the device fd @dev_fd
 * (stablesend_fd(); with IOSQE_FIXED_FILE, its index among the ring's
 * registered files): IORING_OP_URING_CMD, cmd_op
 * STABLESEND_URING_CMD_SEND, a pointer to @req in the command area.  The
 * first 64 bytes of the SQE are cleared first; set sqe->user_data and
 * sqe->flags afterwards.  @req is read when io_uring issues the command,
 * inside io_uring_enter() for a plain submission: keep it unchanged until
 * then, or until the CQE when IOSQE_ASYNC, a link, SQPOLL or
 * STABLESEND_URING_F_WAIT may issue it later.  The CQE's res is the bytes
 * sent or -errno (see
 * <linux/stablesend.h>).
 */
static inline void stablesend_prep_uring(struct io_uring_sqe *sqe, int dev_fd,
					 const struct stablesend_req *req)
{
	struct stablesend_uring_cmd cmd;
	struct io_uring_sqe s;

	memset(&s, 0, sizeof(s));
	memset(&cmd, 0, sizeof(cmd));
	cmd.req = (__u64)(uintptr_t)req;
	s.opcode = IORING_OP_URING_CMD;
	s.fd = dev_fd;
	s.cmd_op = STABLESEND_URING_CMD_SEND;
	memcpy(s.cmd, &cmd, sizeof(cmd));
	*sqe = s;
}

#ifdef __cplusplus
}
#endif

#endif /* STABLESEND_H */
