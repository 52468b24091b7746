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
#include <net/inet_connection_sock.h>
#include <net/sock.h>

#ifdef HAVE_KERNEL_SENDPAGE
/*
 * Send what @msg's ITER_SOURCE bvec iterator holds, by reference.  Plain
 * TCP takes each bvec entry (a compound page of up to 64 KiB) in one call,
 * which it keeps as one frag; the other protocols get one page at a time.
 * Same contract as sock_sendmsg() with MSG_SPLICE_PAGES: bytes accepted, or
 * a negative errno when nothing was.
 */
int stablesend_sendmsg(struct socket *sock, struct msghdr *msg)
{
	struct iov_iter *it = &msg->msg_iter;
	int flags = msg->msg_flags & ~MSG_SPLICE_PAGES;
	struct sock *sk = sock->sk;
	/* Plain TCP: no upper layer protocol (kTLS) between us and TCP. */
	bool tcp = sk_is_tcp(sk) && !READ_ONCE(inet_csk(sk)->icsk_ulp_ops);
	int sent = 0;

	while (iov_iter_count(it)) {
		const struct bio_vec *bv = it->bvec;
		size_t off = bv->bv_offset + it->iov_offset;
		size_t len = min(bv->bv_len - it->iov_offset, iov_iter_count(it));
		struct page *page = bv->bv_page;
		int f = flags;
		int ret;

		if (!tcp) {
			page += off / PAGE_SIZE;
			off = offset_in_page(off);
			len = min(len, PAGE_SIZE - off);
		}

		/*
		 * Between calls, plain TCP gets MSG_SENDPAGE_NOTLAST (as
		 * sendfile does), or every page is pushed as its own small
		 * segment (6.1 over veth: 0.17x sendfile).  TCP pushes before
		 * it gives up for lack of space, so nothing stays corked.
		 * kTLS and the rest get neither that nor MSG_MORE: when kTLS
		 * runs out of memory mid-call it returns with its records
		 * corked in TCP, and nothing would ever push them (a 6.1 kTLS
		 * request stalled for good).
		 */
		if (len < iov_iter_count(it)) {
			f &= ~MSG_MORE;
			if (tcp)
				f |= MSG_SENDPAGE_NOTLAST;
		}
		ret = kernel_sendpage(sock, page, off, len, f);
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
