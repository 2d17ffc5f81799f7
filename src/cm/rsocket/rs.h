/* SPDX-License-Identifier: MIT */
/*
 * rsockets: internal definitions (docs/rsocket.md).
 *
 * An rsocket is built on the public rdma_cm and verbs API of this library only. Its number is
 * the fd of its own rdma_cm event channel (an eventfd the library owns), as in rdma-core: it
 * never collides with the application's fds, and rpoll/rselect wait on it next to ordinary fds.
 *
 * Files, one job each, each calling only the ones listed after it (tools/layers.py --check
 * finds no circle among them; docs/architecture.md, "Layers"):
 *   io.c      the exported calls that dispatch by socket type: rsocket, rclose, rbind, rlisten,
 *             raccept, rconnect, rshutdown, rgetpeername, send and receive (both types)
 *   iomap.c   riomap/riounmap/riowrite
 *   conn.c    stream connection setup and teardown: rbind/rlisten/raccept/rconnect, CM events;
 *             the stream's rs_ops
 *   stream.c  the stream data path: completions, credits, send/receive, shutdown, IO maps' state
 *   dgram.c   datagram sockets over UD; their rs_ops
 *   svc.c     the service thread (answers datagram address resolution in the background)
 *   poll.c    waiting: rs_wait, rs_wait_connected, rpoll, rselect
 *   sock.c    the table of rsockets, options, rfcntl, rgetsockname, logging, time, PDs
 *   iov.c     iovec copies
 *   proto.c   the wire formats
 * What differs by socket type and is needed below the type's own file (progress, what poll(2)
 * would say, the event channel, destruction) goes through the socket's rs_ops, which io.c
 * sets when it creates the socket (an accepted socket takes its listener's).
 *
 * Locking: a table lock guards the fd -> rsocket map and the reference counts; each rsocket
 * has one mutex guarding all of its state. A blocking call drops the mutex only while it
 * sleeps in poll(2). Lock order: an rsocket's mutex, then the table lock (never the reverse).
 *
 * Every system call on a file descriptor that the application could also own goes through raw
 * syscalls (sys.h, rs_sys_*): librspreload.so interposes the libc socket calls.
 */
#ifndef SR_RSOCKET_RS_H
#define SR_RSOCKET_RS_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "cm/rsocket/proto.h"
#include "cm/sys.h"

#define RS_EXPORT __attribute__((visibility("default")))

/* ---- defaults and limits ------------------------------------------------------------------ */
#define RS_DEF_BUF (1024u << 10)		/* receive ring and send buffer */
#define RS_MIN_BUF (4u << 10)
#define RS_MAX_BUF (64u << 20)
#define RS_DEF_SQ 256
#define RS_DEF_RQ 256			/* message credits granted to the peer */
#define RS_MIN_QP 16
#define RS_MAX_QP 4096
#define RS_DEF_INLINE 64
#define RS_MAX_INLINE 512
#define RS_CTRL_EXTRA 8			/* receive slots beyond the credits, for CREDIT messages */
#define RS_MAX_XFER (256u << 10)	/* largest data write */
#define RS_DEF_POLL_US 10		/* busy polling before sleeping */
#define RS_SPIN_MAX_MS 2			/* rpoll polls (yielding) through timeouts this short */
#define RS_WAKE_MS 1000			/* longest single sleep (guards against lost wake-ups) */
#define RS_LINGER_MS 10000		/* rclose waits this long for unsent data at most */
#define RS_DG_NRECV 256
#define RS_DG_NSEND 64

/* ---- logging (SOFTRDMA_LOG=error|warn|info|debug, as the engine) ---------------------------- */
enum rs_log_level { RS_LOG_ERROR, RS_LOG_WARN, RS_LOG_INFO, RS_LOG_DEBUG };
extern int rs_log_level;
void rs_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define rs_dbg(rs, fmt, ...) \
	do { if (rs_log_level >= RS_LOG_DEBUG) \
		rs_log(RS_LOG_DEBUG, "rsocket %d: " fmt, (rs)->fd, ##__VA_ARGS__); } while (0)
#define rs_warn(rs, fmt, ...) \
	do { if (rs_log_level >= RS_LOG_WARN) \
		rs_log(RS_LOG_WARN, "rsocket %d: " fmt, (rs)->fd, ##__VA_ARGS__); } while (0)

/* ---- states --------------------------------------------------------------------------------- */
#define RS_STATES(X)							\
	X(INIT)		/* created */					\
	X(BOUND)	/* rbind done */				\
	X(LISTENING)							\
	X(RESOLVING)	/* active: address and route being resolved */	\
	X(CONNECTING)	/* active: REQ sent, waiting for ESTABLISHED */	\
	X(ACCEPTING)	/* passive: REP sent, waiting for ESTABLISHED */\
	X(CONNECTED)							\
	X(DISCONNECTED)	/* gone; what was received stays readable */	\
	X(FAILED)	/* connecting failed, so_error says why */	\
	X(DGRAM)	/* a datagram socket with its QP */

enum rs_state {
#define RS_STATE_ENUM(s) RS_##s,
	RS_STATES(RS_STATE_ENUM)
#undef RS_STATE_ENUM
};
const char *rs_state_name(enum rs_state s);

/* ---- stream data path -------------------------------------------------------------------------- */
#define RS_WRID_RECV (1ull << 63)

struct rs_pmap {			/* a mapping the peer announced (riowrite target) */
	uint64_t offset, addr, len;
	uint32_t rkey;
	bool used;
};

struct rs_lmap {			/* a buffer riomap()ed here */
	struct rs_lmap *next;
	void *buf;
	size_t len;
	uint64_t offset;
	struct ibv_mr *mr;
	bool remote;			/* PROT_WRITE: announced to the peer */
};

struct rs_stream {
	/* our receive ring; the peer writes into it */
	uint8_t *rbuf;
	uint32_t rsize;
	struct ibv_mr *rmr;
	uint64_t r_tail;		/* bytes landed */
	uint64_t r_head;		/* bytes the application took */
	uint64_t r_head_told;		/* r_head in our last CREDIT */
	/* receive slots (one per receive WR) */
	uint8_t *slots;
	struct ibv_mr *slot_mr;
	uint32_t nslots, credits;	/* credits: what we granted the peer (nslots - extra) */
	uint32_t r_msgs, r_msgs_told;	/* slots consumed and posted again / in our last CREDIT */
	/* the peer's receive ring */
	uint64_t p_addr;
	uint32_t p_rkey, p_size, p_credits;
	uint16_t p_iomap_size;
	uint64_t s_tail;		/* bytes written into the peer's ring */
	uint64_t s_freed;		/* bytes the peer says its application took */
	uint32_t s_msgs, s_msgs_acked;	/* messages consuming the peer's slots: sent / released */
	/* send buffer */
	uint8_t *sbuf;
	uint32_t ssize;
	struct ibv_mr *smr;
	uint64_t sb_head, sb_tail;	/* bytes taken / given back */
	/* send queue: one record per posted WR, indexed by wr_id mod sq_depth */
	uint32_t *wr_bytes;
	uint32_t sq_depth;
	uint64_t wr_next, wr_done;
	uint64_t wr_ok;			/* WRs before this one completed successfully */
	uint64_t data_end;		/* one past the last WR carrying data (rs_post_write) */
	uint32_t unsig_wrs, unsig_bytes;
	bool credit_due;		/* a CREDIT waits for room in the send queue */
	bool qp_err;			/* the QP left RTS (flushed or failed): nothing more moves */
	/* IO maps */
	struct rs_pmap *pmaps;		/* iomap_size entries */
	struct rs_lmap *lmaps;
	int nremote;			/* remote lmaps, limited by p_iomap_size */
};

/* ---- the rsocket ------------------------------------------------------------------------------- */
struct rs_accept {			/* a connection request waiting for raccept */
	struct rs_accept *next;
	struct rdma_cm_id *id;
	struct rs_conn conn;
};

struct rs_dgram;
struct rsock;

/* What differs by socket type (conn.c: rs_stream_ops; dgram.c: rs_dg_ops). Lock held. */
struct rs_ops {
	/* Handles what is pending (completions, CM events); returns how many things happened. */
	int (*progress)(struct rsock *rs);
	/* Handles what waits on the event channel; returns the number of events. */
	int (*cm_drain)(struct rsock *rs);
	/* What poll(2) would report for rs now (progress was just made). */
	short (*revents)(struct rsock *rs, short events);
	/* Releases the type's resources (rs_free, the last reference). */
	void (*destroy)(struct rsock *rs);
};
extern const struct rs_ops rs_stream_ops, rs_dg_ops;

struct rsock {
	const struct rs_ops *ops;
	int fd;				/* the number: ch->fd */
	int type, domain;
	pthread_mutex_t lock;
	int refs;			/* table lock */
	bool closed;
	enum rs_state state;
	int so_error;			/* pending error (SO_ERROR), positive errno */
	int fd_flags;			/* O_NONBLOCK */
	bool shut_rd, shut_wr;		/* local shutdown */
	bool peer_eof;			/* the peer shut down its sending side */
	bool eof_sent;			/* our SHUTDOWN is posted (after shut_wr, when it could be) */
	bool cm_pending;		/* the event channel may hold events */
	bool svc;			/* watched by the service thread */
	/* options */
	uint32_t sndbuf, rcvbuf, sqsize, rqsize, inline_size;
	uint16_t iomap_size;
	bool reuseaddr, nodelay, keepalive, v6only, oobinline;
	struct linger linger;
	int keepidle, keepintvl, keepcnt, tos;
	struct timeval rcvtimeo, sndtimeo;
	/* rdma_cm */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rs_accept *acceptq, **acceptq_tail;
	int backlog, nqueued;
	/* verbs */
	struct ibv_pd *pd;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	bool cq_armed;
	struct rs_stream st;
	struct rs_dgram *dg;
};

/* ---- sock.c -------------------------------------------------------------------------------------- */
/* The rsocket with number fd, referenced; NULL with errno EBADF. */
struct rsock *rs_get(int fd);
void rs_put(struct rsock *rs);
/* A new rsocket on a new event channel (not yet in the table). */
struct rsock *rs_alloc(int domain, int type, const struct rsock *inherit);
int rs_insert(struct rsock *rs);
void rs_remove(struct rsock *rs);	/* from the table (rclose) */
void rs_free(struct rsock *rs);
struct ibv_pd *rs_pd(struct ibv_context *ctx);
struct ibv_context *rs_default_ctx(void);
int rs_set_fd_nonblock(int fd);
uint64_t rs_now_us(void);
extern unsigned rs_poll_us;

static inline int rs_err(int err)
{
	errno = err < 0 ? -err : err;
	return -1;
}

static inline bool rs_nonblock(const struct rsock *rs, int flags)
{
	return (rs->fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

static inline socklen_t rs_sa_len(const struct sockaddr *a)
{
	return a->sa_family == AF_INET ? sizeof(struct sockaddr_in)
	       : a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : 0;
}

/* Copies a socket address out as getsockname(2) does (truncating, reporting the full length). */
void rs_copy_addr(struct sockaddr *dst, socklen_t *dlen, const struct sockaddr *src);

/* ---- conn.c ------------------------------------------------------------------------------------- */
int rs_stream_bind(struct rsock *rs, const struct sockaddr *a, socklen_t len);
int rs_stream_listen(struct rsock *rs, int backlog);
int rs_stream_accept(struct rsock *rs, struct sockaddr *a, socklen_t *len);
int rs_stream_connect(struct rsock *rs, const struct sockaddr *a, socklen_t len);
int rs_cm_drain(struct rsock *rs);	/* the stream's rs_ops cm_drain */
void rs_stream_destroy(struct rsock *rs);

/* ---- stream.c -------------------------------------------------------------------------------- */
int rs_stream_alloc(struct rsock *rs);
int rs_stream_post_recvs(struct rsock *rs);
void rs_conn_local(const struct rsock *rs, struct rs_conn *c);
void rs_stream_peer(struct rsock *rs, const struct rs_conn *c);
int rs_cq_drain(struct rsock *rs);
ssize_t rs_stream_sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags);
ssize_t rs_stream_recvv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags);
int rs_stream_shutdown(struct rsock *rs, int how, bool wait);
bool rs_stream_can_send(struct rsock *rs);
bool rs_stream_sends_done(const struct rsock *rs);
/* Data was posted that no successful completion (the peer's acknowledgement) covers. */
bool rs_stream_unacked(const struct rsock *rs);
int rs_post_ctrl(struct rsock *rs, const struct rs_ctrl *c, bool signaled);
/* Room for one data write of at most `want` bytes, from the peer's view and ours. */
uint32_t rs_send_room(struct rsock *rs, size_t want, bool need_credit);
int rs_post_write(struct rsock *rs, const struct iovec *iov, int iovcnt, size_t off, uint32_t n,
		  uint64_t raddr, uint32_t rkey, bool imm);

/* An IO map the peer announced (a receive completion); the IO maps of a stream, freed. */
void rs_iomap_recv(struct rsock *rs, const struct rs_ctrl *c);
void rs_iomap_free(struct rsock *rs);

/* ---- dgram.c ------------------------------------------------------------------------------------- */
int rs_dg_bind(struct rsock *rs, const struct sockaddr *a, socklen_t len);
int rs_dg_connect(struct rsock *rs, const struct sockaddr *a, socklen_t len);
ssize_t rs_dg_sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags,
		    const struct sockaddr *to, socklen_t tolen);
ssize_t rs_dg_recvv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags,
		    struct sockaddr *from, socklen_t *fromlen);
int rs_dg_getpeername(struct rsock *rs, struct sockaddr *a, socklen_t *len);

/* ---- svc.c ------------------------------------------------------------------------------------------ */
int rs_svc_add(struct rsock *rs);
void rs_svc_del(struct rsock *rs);

/* ---- poll.c ----------------------------------------------------------------------------------------- */
/* Handles what is pending (CM events, completions); returns how many things happened. */
static inline int rs_progress(struct rsock *rs)
{
	return rs->ops->progress(rs);
}
/* Waits (blocking socket) or reports -EAGAIN (non-blocking) until the connection is made. */
int rs_wait_connected(struct rsock *rs, bool nb);
/* Sleeps until something may have changed (lock held; dropped while asleep). timeout_ms < 0:
 * no limit. 0, or -ETIMEDOUT. */
int rs_wait(struct rsock *rs, int timeout_ms);
/* What poll(2) would report for rs now (lock held; progress made first). */
short rs_revents(struct rsock *rs, short events);
/* A non-blocking call found nothing to do: give the CPU away once (see poll.c). */
void rs_yield(void);
/* The timeout a blocking call on rs waits (SO_RCVTIMEO/SO_SNDTIMEO), in ms, or -1. */
int rs_timeo_ms(const struct timeval *tv);

/* ---- iovec helpers (iov.c) ---------------------------------------------------------------------------- */
size_t rs_iov_len(const struct iovec *iov, int iovcnt);
/* Copies n bytes starting at byte `off` of the iovec into dst. */
void rs_iov_gather(void *dst, const struct iovec *iov, int iovcnt, size_t off, size_t n);
/* Copies n bytes of src into the iovec starting at byte `off`. */
void rs_iov_scatter(const struct iovec *iov, int iovcnt, size_t off, const void *src, size_t n);

#endif /* SR_RSOCKET_RS_H */
