/* SPDX-License-Identifier: GPL-2.0 */
/*
 * stablesend: internal interfaces.
 *
 * Data path: device.c (the fd) -> submit.c (validate, snapshot, queue) ->
 * snapshot.c (the one copy, into pages memory.c hands out and bounds) ->
 * transmit.c (per-socket FIFO, pages handed over by reference in the
 * submitter's context) -> completion.c (SENT/RELEASED records, page
 * release tracking, pages back to memory.c).
 */
#ifndef _SS_H
#define _SS_H

#include <linux/atomic.h>
#include <linux/bvec.h>
#include <linux/gfp.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/list_bl.h>
#include <linux/mutex.h>
#include <linux/refcount.h>
#include <linux/spinlock.h>
#include <linux/task_work.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/stablesend.h>

/* Pool chunks are compound pages of up to this order (64 KiB with 4K pages). */
#define SS_CHUNK_ORDER		4
#define SS_CHUNK_SIZE		(PAGE_SIZE << SS_CHUNK_ORDER)
/* Chunks of a request whose bvec array needs no allocation of its own. */
#define SS_BVEC_INLINE		4

/*
 * Everything a caller makes us allocate is charged to its memory cgroup and
 * fails with ENOMEM (quietly: the caller gets the errno) at memory.max
 * instead of invoking the OOM killer.
 */
#define SS_GFP		(GFP_KERNEL_ACCOUNT | __GFP_RETRY_MAYFAIL | __GFP_NOWARN)

/* Unread completion records one open may accumulate before submit refuses. */
#define SS_CQ_MAX		65536
/* ... and all opens of one user together, by default (user_records). */
#define SS_USER_RECORDS		262144	/* 4 * SS_CQ_MAX */

extern struct workqueue_struct *stablesend_wq;
extern unsigned long stablesend_default_limit;
extern unsigned long stablesend_max_limit;
extern unsigned long stablesend_user_limit;
extern unsigned int stablesend_user_records;

/* Module-wide counters, one file each under /sys/module/stablesend/stats/. */
enum ss_stat {
	SS_REQUESTS,		/* accepted */
	SS_BYTES_SENT,
	SS_ERRORS,		/* completions with a negative result */
	SS_COPIED,		/* requests whose protocol copied the pages */
	SS_REQUESTS_IN_FLIGHT,	/* accepted, pages not yet released */
	SS_BYTES_IN_FLIGHT,	/* pool bytes those requests hold */
	SS_POOL_BYTES,		/* every page the module owns */
	SS_POOL_IDLE_BYTES,	/* of which idle on a pool */
	SS_ORDER0_FALLBACKS,	/* high-order allocations that failed */
	SS_CONTEXTS,		/* opens not yet freed */
	SS_RX_KICKS,		/* ss_rx_kick() calls */
	SS_REAP_CHECKS,		/* looks the reaper took at a request's pages */
	SS_NR_STATS
};

extern atomic64_t stablesend_stats[SS_NR_STATS];

struct ss_cqe_node {
	struct list_head node;
	struct stablesend_cqe cqe;
};

/* One open of /dev/stablesend. */
struct ss_ctx {
	struct kref ref;	/* the fd, and each request */
	spinlock_t lock;	/* everything below */
	struct list_head queued;	/* requests still on a socket FIFO */
	struct list_head cq;		/* struct ss_cqe_node, oldest first */
	/* Both counted for the user too: ss_user_records_charge(). */
	unsigned int cq_nr;		/* records on @cq */
	unsigned int cq_reserved;	/* records owed by live requests */
	wait_queue_head_t cq_wait;	/* read and poll */
	wait_queue_head_t mem_wait;	/* submitters waiting for memory */
	struct eventfd_ctx *evfd;
	bool setup_done;	/* SETUP called, or a request submitted */
	bool closed;		/* fd released: no records any more */
	struct mutex reserve_lock;	/* one piecemeal reservation at a time */
	struct ss_user *user;		/* who opened it (memory.c) */
	struct list_head idle_node;	/* on user->idle while @pool has pages */
	struct list_head poll_node;	/* on user->pollers while waiting for room */
	struct list_head lru_node;	/* on ss_idle_lru with @idle_node */
	struct mem_cgroup *memcg;	/* the opener's: charged for its pages */
	int nid;			/* the node its pages come from */
	struct list_head inflight;	/* its requests on a group, until closed */
	bool unbounded;			/* opener had CAP_SYS_RESOURCE */
	struct work_struct free_work;	/* the last reference is gone */
	u64 mem_limit;
	u64 mem_used;		/* bytes reserved by live requests */
	unsigned long room_want;	/* need of the last request refused memory */
	unsigned int records_want;	/* records of the last request refused them */
	u64 pooled;		/* bytes of free pages on @pool */
	struct list_head pool[SS_CHUNK_ORDER + 1];	/* by order, page->lru */
	struct stablesend_counters stats;
};

enum ss_req_state {
	SS_REQ_QUEUED,		/* on the FIFO, nothing sent: cancellable */
	SS_REQ_STARTED,		/* some bytes may have gone */
	SS_REQ_DONE,		/* off the FIFO */
};

struct ss_sock;
struct ss_group;

/* ss_req.tw_flags */
#define SS_REQ_TW_PENDING	0	/* @tw or @orphan queued */

struct ss_req {
	refcount_t ref;		/* the pipeline, and a synchronous waiter */
	struct ss_ctx *ctx;
	struct ss_sock *sock;		/* referenced while on its FIFO */
	struct task_struct *task;	/* the submitter: it sends the bytes */
	struct pid *tgid;		/* its process, which takes over at its exit */
	const struct cred *cred;	/* its credentials at submission */
	struct callback_head tw;	/* send on, in @task's context */
	struct work_struct orphan;	/* @task exited: end the request */
	unsigned long tw_flags;
	struct list_head fifo;		/* on sock->fifo, under sock->lock */
	struct list_head ctx_node;	/* on ctx->queued, under ctx->lock */
	struct list_head inflight;	/* on group->reqs, once sent */
	struct list_head ctx_inflight;	/* on ctx->inflight, while on a group */
	enum ss_req_state state;	/* under sock->lock */
	bool abort;		/* stop after what was sent (set under sock->lock) */
	bool sync;		/* STABLESEND_IOC_SEND: sent by its caller, no SENT record */
	bool sock_nonblock;	/* SEND: the socket's O_NONBLOCK at submission */
	bool copied;		/* the protocol copies (kTLS, no SG) */
	bool piecemeal;		/* holds ctx->reserve_lock, reserving per chunk */
	struct ss_sender *sender;	/* a SEND's, until its snapshot is taken */
	struct io_uring_cmd *ucmd;	/* an io_uring command's, until its CQE */
	struct io_uring_cmd *cqe_cmd;	/* its CQE decided, not posted yet */
	s32 cqe_res;			/* that CQE's result */
	struct callback_head cqe_tw;	/* posts it in the command's task */
	bool ring;		/* an io_uring command's: no records */
	bool finished;		/* off the FIFO: under ss_inflight_lock */
	bool wants_pages;	/* counted in group->released: the same */
	bool tcp;		/* sent on TCP: @start_seq and @end_seq are set */
	struct ss_group *group;	/* its socket's, once sent: under ss_inflight_lock */
	u64 user_data;
	u32 flags;		/* STABLESEND_REQ_* */
	u32 end_seq;		/* TCP's write_seq after its last sendmsg so far */
	size_t total;		/* bytes to send */
	size_t sent;		/* bytes the socket accepted */
	s64 res;		/* final result, once DONE */
	u64 need;		/* pool bytes for the whole request */
	u64 charged;		/* bytes reserved in ctx->mem_used */
	u64 user_charged;	/* bytes charged to the open's user */
	u64 cap;		/* bytes of the pages filled in so far */
	u64 freed_bytes;	/* data bytes of the pages given back */
	unsigned int cq_charged;	/* records reserved in ctx->cq_reserved */
	u32 start_seq;		/* TCP's write_seq before its first byte */
	struct ss_cqe_node *cqe_sent;
	struct ss_cqe_node *cqe_released;
	unsigned int nr_pages;	/* pool pages (bvec entries) */
	unsigned int nr_freed;	/* of which given back, oldest first */
	unsigned int nr_send;	/* bvec entries carrying data */
	unsigned int bvec_cap;	/* entries @bvec has room for */
	struct bio_vec *bvec;	/* @bvec_inline, or allocated */
	struct bio_vec bvec_inline[SS_BVEC_INLINE];
};

/*
 * A task inside a SEND (transmit.c).  It leaves the registry while it
 * waits for memory, which its own queued requests may hold: their task
 * work must interrupt that wait.
 */
struct ss_sender {
	struct hlist_bl_node node;
	struct task_struct *task;
	bool in;		/* on the registry */
};

/* device.c */
int ss_device_init(void);
void ss_device_exit(void);

/* submit.c */
long ss_submit(struct ss_ctx *ctx, struct file *dev,
	       const struct stablesend_submit __user *arg);
long ss_send_sync(struct ss_ctx *ctx, struct file *dev,
		  const struct stablesend_req __user *arg);
struct io_uring_cmd;
struct ss_req *ss_submit_uring(struct ss_ctx *ctx,
			       const struct stablesend_req *ur,
			       struct io_uring_cmd *ucmd, bool nonblock);

/* uring.c */
#ifdef CONFIG_IO_URING
int ss_uring_cmd(struct io_uring_cmd *cmd, unsigned int issue_flags);
void ss_uring_mark(struct io_uring_cmd *cmd);
void ss_uring_queued(struct ss_req *req);
void ss_uring_complete(struct ss_req *req, s64 res);
#else
static inline void ss_uring_mark(struct io_uring_cmd *cmd)
{
}

static inline void ss_uring_queued(struct ss_req *req)
{
}

static inline void ss_uring_complete(struct ss_req *req, s64 res)
{
}
#endif

/* snapshot.c */
struct ss_sender;
void ss_req_free_bvec(struct ss_req *req);
struct ss_req *ss_req_alloc(struct ss_ctx *ctx, u64 total,
			    struct ss_sender *sender, u32 flags, bool nonblock,
			    struct io_uring_cmd *ucmd);
int ss_snapshot(struct ss_req *req, const struct stablesend_req *ur,
		struct file *file, u64 flen);
void ss_req_unlock(struct ss_req *req);
unsigned int ss_req_idle_pages(const struct ss_req *req, bool finished);

/* memory.c */
int ss_memory_init(void);
void ss_memory_exit(void);
struct ss_ctx *ss_ctx_alloc(void);
void ss_ctx_dealloc(struct ss_ctx *ctx);
int ss_user_attach(struct ss_ctx *ctx);
void ss_user_detach(struct ss_ctx *ctx);
int ss_user_reserve(struct ss_ctx *ctx, u64 need, bool nonblock,
		    struct ss_sender *sender);
bool ss_user_records_charge(struct ss_ctx *ctx, unsigned int nr);
void ss_user_records_uncharge(struct ss_ctx *ctx, unsigned int nr);
bool ss_room(struct ss_ctx *ctx);
u64 ss_mem_free_now(struct ss_ctx *ctx);
void ss_room_refused(struct ss_ctx *ctx, u64 need);
void ss_records_refused(struct ss_ctx *ctx, unsigned int nr);
void ss_records_got(struct ss_ctx *ctx);
void ss_room_got(struct ss_ctx *ctx);
bool ss_room_poll(struct ss_ctx *ctx);
void ss_room_unpoll(struct ss_ctx *ctx);
int ss_reserve(struct ss_ctx *ctx, u64 need, bool nonblock,
	       struct ss_sender *sender);
struct page *ss_get_page(struct ss_ctx *ctx, unsigned int order);
u64 ss_req_free_pages(struct ss_req *req, unsigned int end);
void ss_pool_drain(struct ss_ctx *ctx);
struct seq_file;
void ss_user_show_fdinfo(struct seq_file *m, struct ss_ctx *ctx);
void ss_user_waits(struct ss_ctx *ctx, int delta);
void ss_user_starved(struct ss_ctx *ctx);
bool ss_user_wants_pages(const struct ss_ctx *ctx);
/* Kicks one user's pages may cause in a second: at most that many at once. */
#define SS_USER_KICKS		8
#define SS_KICK_TICKS		DIV_ROUND_UP(HZ, SS_USER_KICKS)
bool ss_user_kick_take(struct ss_ctx *ctx, unsigned long now);

/* transmit.c */
int ss_sock_check(struct socket *sock, bool *copies);
int ss_enqueue(struct ss_req *req, struct socket *sock);
bool ss_sock_idle(struct socket *sock);
void ss_submit_send(struct ss_req *req);
int ss_sender_enter(struct ss_sender *s);
void ss_sender_leave(struct ss_sender *s);
int ss_sender_pause(struct ss_sender *s);
long ss_sync_send(struct ss_req *req);
bool ss_cancel_req(struct ss_req *req);
bool ss_abort_req(struct ss_req *req);
void ss_req_orphan(struct work_struct *work);
void ss_sock_put(struct ss_sock *ss);
struct ss_group *ss_sock_group(struct ss_sock *ss);

/* completion.c */
void ss_req_finish(struct ss_req *req, s64 res);
void ss_req_put(struct ss_req *req);
void ss_ctx_release(struct kref *ref);
void ss_reaper_stop(void);
void ss_reaper_init(void);
/* Through ss_user_waits() and ss_user_starved(), which count per user too. */
void ss_reaper_wait(int delta);
void ss_reaper_eagain(void);
struct sock;
struct ss_group *ss_group_get(struct sock *sk);
void ss_group_sock_gone(struct ss_group *g);
void ss_inflight_add(struct ss_req *req, struct ss_group *g);
void ss_inflight_unwant(struct ss_req *req);
void ss_inflight_closed(struct ss_ctx *ctx);
int ss_rx_kick_init(void);
void ss_rx_kick_exit(void);
void ss_rx_kick(void);
void ss_reaper_kicked(void);
bool ss_rx_kick_enabled(void);

static inline void ss_ctx_put(struct ss_ctx *ctx)
{
	kref_put(&ctx->ref, ss_ctx_release);
}

/*
 * Whether @nr more completion records fit the open's bound, unread and
 * owed counted.  Under ctx->lock to reserve them, without it for poll().
 */
static inline bool ss_cq_fits(const struct ss_ctx *ctx, unsigned int nr)
{
	return READ_ONCE(ctx->cq_nr) + READ_ONCE(ctx->cq_reserved) + nr <=
	       SS_CQ_MAX;
}

/* Bytes free under @limit with @used taken; none over a lowered limit. */
static inline u64 ss_free_under(u64 used, u64 limit)
{
	return used < limit ? limit - used : 0;
}

#endif /* _SS_H */
