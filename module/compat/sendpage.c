// SPDX-License-Identifier: GPL-2.0
/*
 * Page handoff for kernels whose protocols take pages by reference only
 * through ->sendpage (before 6.5, where MSG_SPLICE_PAGES replaced it).
 */
#include <linux/bvec.h>
#include <linux/minmax.h>
#include <linux/net.h>
#include <linux/socket.h>
#include <linux/uio.h>

#ifdef HAVE_KERNEL_SENDPAGE
/*
 * Send what @msg's ITER_SOURCE bvec iterator holds, one page at a time, by
 * reference.  Same contract as sock_sendmsg() with MSG_SPLICE_PAGES: bytes
 * accepted, or a negative errno when nothing was.
 */
int stablesend_sendmsg(struct socket *sock, struct msghdr *msg)
{
	struct iov_iter *it = &msg->msg_iter;
	int flags = msg->msg_flags & ~MSG_SPLICE_PAGES;
	int sent = 0;

	while (iov_iter_count(it)) {
		const struct bio_vec *bv = it->bvec;
		size_t off = bv->bv_offset + it->iov_offset;
		size_t len = min3(bv->bv_len - it->iov_offset,
				  PAGE_SIZE - offset_in_page(off),
				  iov_iter_count(it));
		int f = flags;
		int ret;

		/*
		 * No MSG_MORE/MSG_SENDPAGE_NOTLAST between pages: when kTLS
		 * runs out of memory mid-call it returns with its records
		 * corked in TCP, and nothing would ever push them (a 6.1 kTLS
		 * request stalled for good).  Autocorking still coalesces.
		 */
		if (len < iov_iter_count(it))
			f &= ~MSG_MORE;
		ret = kernel_sendpage(sock, bv->bv_page + off / PAGE_SIZE,
				      offset_in_page(off), len, f);
		if (ret <= 0)
			return sent ? sent : ret;
		iov_iter_advance(it, ret);
		sent += ret;
		if (ret < len)
			break;
	}
	return sent;
}
#endif
