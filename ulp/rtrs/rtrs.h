/* SPDX-License-Identifier: MIT */
/*
 * rtrs.h: the public API of softrdma's user-space RTRS (RDMA transport for block IO),
 * speaking the Linux kernel's RTRS 2.0 wire protocol (rtrs-proto.h, docs/rtrs.md).
 *
 * The library uses only public verbs and rdma_cm (<infiniband/verbs.h>, <rdma/rdma_cma.h>) and
 * links only -libverbs -lrdmacm: it runs on softrdma and on rdma-core with real hardware.
 *
 * Threads: each client session and each server context owns its threads: by default one per
 * completion channel (one per device its paths use), which polls the CQs and sleeps in
 * ibv_get_cq_event, and one for the CM events and timers; with $RTRS_EVENT_SLEEP=poll a single
 * event thread does both (docs/rtrs.md, "Sleeping in ibv_get_cq_event"). Callbacks run on these
 * threads (a client's conf also in rtrs_clt_poll's caller), a server's never two at once.
 * A client's may run at the same time on different threads: conf callbacks of requests
 * completed or failed over by the CM thread (a path going down, its heartbeats' timer, a
 * request that found no path) beside those of the channel's thread or of rtrs_clt_poll's
 * caller, and link_ev beside a conf. link_ev calls themselves never overlap and come in the
 * order of the events (DISCONNECTED, then RECONNECTED), except that an event a link_ev causes
 * itself (rtrs_clt_remove_path in it) is given inside that call. Callbacks must not block for
 * long (a link_ev must not wait for a request's conf: the next link_ev, and the thread taking
 * it, wait for it to return). They may call any function of this
 * header except rtrs_clt_close() / rtrs_srv_close() on their own object.
 * rtrs_clt_request(), rtrs_srv_resp_rdma() and the stats functions may be called from any thread.
 *
 * Errors: functions returning int return 0 or a positive errno value; functions returning a
 * pointer return NULL and set errno. Completion callbacks get 0 or a positive errno value.
 *
 * Semantics: at least once. A request in flight on a path that fails is re-issued on another
 * path; a WRITE may therefore reach the server twice (as with the kernel's RTRS). A request
 * fails (callback with an errno) only when no path can carry it within opts.fail_timeout_ms.
 *
 * Stability: this API is versioned by RTRS_API_VERSION; option structs carry their size in
 * their first member so fields can be appended compatibly. Always call *_opts_init() first.
 */
#ifndef SOFTRDMA_RTRS_H
#define SOFTRDMA_RTRS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RTRS_API_VERSION 1

/* Directions of a request (values as the kernel's READ = 0, WRITE = 1). */
enum rtrs_dir {
	RTRS_READ = 0,	/* the server fills the client's scatter list */
	RTRS_WRITE = 1,	/* the client's scatter list is carried to the server */
};

/* Multipath policies of a client session (the kernel's mp_policy names). */
enum rtrs_mp_policy {
	RTRS_MP_ROUND_ROBIN = 0,
	RTRS_MP_MIN_INFLIGHT = 1,	/* default */
	RTRS_MP_MIN_LATENCY = 2,	/* lowest heartbeat round trip */
};

/* State of one path, as shown by the counters. */
enum rtrs_path_state {
	RTRS_PATH_CONNECTING = 0,
	RTRS_PATH_CONNECTED = 1,
	RTRS_PATH_RECONNECTING = 2,	/* failed; waiting for the reconnect delay */
	RTRS_PATH_DEAD = 3,		/* reconnect attempts used up, or removed */
	RTRS_PATH_CLOSED = 4,
};

/* One path: "HOST:PORT", "[V6ADDR]:PORT" or "HOST" (port RTRS_DEFAULT_PORT). src may be NULL
 * (the route decides). */
struct rtrs_path_addr {
	const char *src;
	const char *dst;
};

#define RTRS_DEFAULT_PORT 1234

/* Per-path counters (client and server). */
struct rtrs_path_stats {
	char sessname[64];
	char src[64];		/* local address:port */
	char dst[64];		/* remote address:port */
	int state;		/* enum rtrs_path_state */
	uint32_t inflight;	/* requests in flight now */
	uint64_t reqs_read, reqs_write;
	uint64_t bytes_read, bytes_write;
	uint64_t failovers;	/* client: requests re-issued from this path onto another */
	uint64_t reconnects;	/* successful reconnects of this path */
	uint64_t reconnect_attempts;
	uint64_t hb_sent, hb_missed_total;
	uint32_t hb_rtt_us;	/* last heartbeat round trip (0 before the first) */
	uint32_t hb_missed;	/* heartbeats missed in a row now */
	uint32_t hb_rtt_min_us;	/* client: the smallest heartbeat round trip (0 before the first) */
	uint64_t errors;	/* requests answered with an error */
	uint64_t bad_msgs;	/* server: malformed requests (each closed the path) */
	uint64_t rkey_renewals;	/* always_invalidate: server chunk rkeys renewed */
};

/* ------------------------------------------------------------------------------------------ */
/* Client                                                                                       */

struct rtrs_clt;

/* Session events given to opts.link_ev. */
enum rtrs_clt_link_ev {
	RTRS_CLT_LINK_EV_RECONNECTED = 0,	/* a path is up again after all were down */
	RTRS_CLT_LINK_EV_DISCONNECTED = 1,	/* every path is down */
};

struct rtrs_clt_opts {
	size_t size;			/* sizeof(struct rtrs_clt_opts), set by rtrs_clt_opts_init */
	enum rtrs_mp_policy policy;	/* RTRS_MP_MIN_INFLIGHT */
	unsigned int io_cons;		/* IO connections per path, besides the service one: 1 */
	unsigned int hb_interval_ms;	/* 5000 */
	unsigned int hb_missed_max;	/* 5 */
	unsigned int reconnect_delay_ms;	/* 1000 (a random jitter of up to half is added) */
	int max_reconnect_attempts;	/* -1 = forever (default) */
	unsigned int connect_timeout_ms;	/* rtrs_clt_open waits this long for a path: 10000 */
	unsigned int fail_timeout_ms;	/* a request no path can take fails after this: 30000 */
	unsigned int max_segments;	/* longest scatter list accepted: 128 */
	const char *stats_dir;		/* counters file directory; NULL = $RTRS_STATS_DIR or none */
	void (*link_ev)(void *priv, enum rtrs_clt_link_ev ev);	/* may be NULL */
	void *priv;
	int poll_us;			/* the session's thread polls its CQs this long after the
					 * last completion before it sleeps on the completion
					 * channel: RTRS_POLL_US_DEFAULT (or $RTRS_POLL_US);
					 * 0 = sleep at once, -1 = busy-poll, never sleep */
	unsigned int poll_inflight_max;	/* with poll_us > 0: it polls on after a completion
					 * only while at most this many requests are in flight,
					 * and with more sleeps after each pass (the next answer
					 * wakes it): for callers whose submitting threads need
					 * the CPUs (nbdkit's workers on 2 cores); 0 = no limit
					 * (default) */
};

#define RTRS_POLL_US_DEFAULT 50

void rtrs_clt_opts_init(struct rtrs_clt_opts *opts);

/*
 * Opens a session named sessname (at most 255 bytes) with n paths. Returns once at least one
 * path is connected (the others keep connecting in the background), or NULL with errno after
 * opts->connect_timeout_ms (ETIMEDOUT, ECONNREFUSED, ...). opts may be NULL (defaults).
 */
struct rtrs_clt *rtrs_clt_open(const char *sessname, const struct rtrs_path_addr *paths,
			       size_t n, const struct rtrs_clt_opts *opts);

/* Fails every request not yet answered with ECONNABORTED (callbacks run before it returns),
 * disconnects every path, frees the session. As with free(): no other call on the session may
 * run beside it or come after it (a rtrs_clt_request() or rtrs_clt_poll() still returning in
 * another thread may touch the session after the free); the caller ends its submitters
 * first, as the kernel's RTRS users stop their queues before rtrs_clt_close(). */
void rtrs_clt_close(struct rtrs_clt *clt);

/* What the server granted (from CON_RSP and INFO_RSP). */
struct rtrs_attrs {
	uint32_t queue_depth;	/* permits: most requests in flight at once */
	uint32_t max_io_size;	/* most data bytes of one request (chunk size - max_hdr_size) */
	uint32_t max_hdr_size;	/* most user header bytes of one request */
	uint32_t chunk_size;	/* server chunk size */
	uint32_t max_segments;	/* longest scatter list */
	char sessname[256];
};
int rtrs_clt_query(struct rtrs_clt *clt, struct rtrs_attrs *attrs);

/* Completion of one request: errno_ 0 = done (for a READ the scatter list is filled),
 * otherwise the server's errno (EIO, ...) or a transport error (ECONNABORTED, ETIMEDOUT). */
typedef void (*rtrs_conf_fn)(void *priv, int errno_);

/* Flags of rtrs_clt_request. */
#define RTRS_REQ_NOWAIT 1u	/* no free permit: return EAGAIN instead of waiting for one */
#define RTRS_REQ_POLL 2u	/* the caller waits for conf with rtrs_clt_poll (below): the
				 * session's thread is not woken for this request */

/*
 * Submits one request: the user header usr[0..usr_len) (at most max_hdr_size) is carried to
 * the server in both directions; for a WRITE the data is sg[0..sg_cnt) (total at most
 * max_io_size), for a READ the server's data lands in sg. The buffers must stay valid until
 * conf runs. Takes a permit (waits for one unless RTRS_REQ_NOWAIT). Returns 0 when conf will be
 * called exactly once, or an errno (EINVAL, EMSGSIZE, EAGAIN, ENOTCONN after close) and conf is
 * not called. Any thread.
 */
int rtrs_clt_request(struct rtrs_clt *clt, enum rtrs_dir dir, rtrs_conf_fn conf, void *priv,
		     const void *usr, size_t usr_len, const struct iovec *sg, unsigned int sg_cnt,
		     unsigned int flags);

/*
 * Waits for a request by polling the session's CQs in the calling thread, until done(arg) is
 * nonzero (0) or budget_us have passed (ETIMEDOUT); the completions it takes are called back as
 * the session's thread would (any request's conf, from this thread). No thread hand-off: at
 * queue depth 1 the answer is taken by the thread that waits for it (with softrdma the poll
 * receives the packets itself). EBUSY at once, having done nothing, when another thread
 * polls, more than one request is in flight (the session's thread serves those), or
 * budget_us is 0. After EBUSY or ETIMEDOUT the caller waits as without this call: the
 * session's thread then takes the completions. done is called with no lock held, or under
 * the session's lock: it must not call into RTRS.
 */
int rtrs_clt_poll(struct rtrs_clt *clt, int (*done)(void *arg), void *arg, unsigned int budget_us);

/*
 * Registers the caller's memory [addr, addr + len) with every path of the session (and with
 * paths that connect later), so that requests whose scatter list lies in it go without a copy:
 * a WRITE's data is sent from it (the NIC gathers the pieces, at most the device's send SGEs
 * less one; more pieces are copied), a READ of one piece lands in it (through a memory window
 * the server invalidates, when the server has always_invalidate). Other requests are copied
 * through the session's own buffers, as without it. While a WRITE from registered memory is
 * in flight, its data must not change (a fail-over sends it again from there).
 * addr NULL with len SIZE_MAX registers all of the process's memory, with implicit On-Demand
 * Paging (ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...)), for callers that do not
 * own their buffers (nbdkit's are allocated per request): requests of 16 KiB or more that no
 * other region holds then go without the copy too (smaller ones copy: softrdma faults an ODP
 * range in per message, which costs what a copy of 8 KiB does). A device without implicit
 * ODP refuses it (the errno of ibv_reg_mr). Unregistered with rtrs_clt_unreg_buf(clt, NULL).
 * Returns 0, EINVAL, EEXIST (addr already registered), ENOSPC (16 regions per session) or the
 * errno of ibv_reg_mr. Any thread.
 */
int rtrs_clt_reg_buf(struct rtrs_clt *clt, void *addr, size_t len);
/* Unregisters the region registered at addr: 0, ENOENT, or EBUSY while a request not yet
 * completed uses it. */
int rtrs_clt_unreg_buf(struct rtrs_clt *clt, void *addr);

/* Adds a path (connects in the background); EEXIST if it is there, EINVAL for a bad address. */
int rtrs_clt_add_path(struct rtrs_clt *clt, const struct rtrs_path_addr *path);
/* Removes a path (its requests in flight move to another path); ENOENT, or EBUSY when it is
 * the last connected path. Matches on dst (and src when given). */
int rtrs_clt_remove_path(struct rtrs_clt *clt, const struct rtrs_path_addr *path);
/* Changes the multipath policy at run time. EINVAL for an unknown one. */
int rtrs_clt_set_policy(struct rtrs_clt *clt, enum rtrs_mp_policy policy);

/* Copies the counters of up to max paths; returns the number of paths (may exceed max). */
int rtrs_clt_path_stats(struct rtrs_clt *clt, struct rtrs_path_stats *out, int max);

/* ------------------------------------------------------------------------------------------ */
/* Server                                                                                       */

struct rtrs_srv_ctx;	/* a listening server */
struct rtrs_srv_sess;	/* one client session (all its paths) */
struct rtrs_srv_op;	/* one request, until rtrs_srv_resp_rdma() */

enum rtrs_srv_link_ev {
	RTRS_SRV_LINK_EV_CONNECTED = 0,		/* first path of a session is up */
	RTRS_SRV_LINK_EV_DISCONNECTED = 1,	/* last path of a session went away */
};

struct rtrs_srv_ops {
	/*
	 * One request. dir RTRS_WRITE: data[0..datalen) is what the client wrote.
	 * dir RTRS_READ: data[0..datalen) is the buffer to fill (datalen = what the client asked
	 * for). usr[0..usrlen) is the user header. Both stay valid until the answer.
	 * Return 0 and answer later with rtrs_srv_resp_rdma(op, errno) exactly once (any thread),
	 * or return a positive errno: the library answers with it at once (op is then dead).
	 */
	int (*rdma_ev)(struct rtrs_srv_sess *sess, void *sess_priv, struct rtrs_srv_op *op,
		       enum rtrs_dir dir, void *data, size_t datalen, const void *usr,
		       size_t usrlen);
	/*
	 * Session up (CONNECTED: set the session's private pointer with rtrs_srv_set_sess_priv;
	 * a nonzero return refuses the session) or down (DISCONNECTED: every op of the session has
	 * been answered or is dead: rtrs_srv_resp_rdma on it is then a no-op).
	 */
	int (*link_ev)(struct rtrs_srv_sess *sess, enum rtrs_srv_link_ev ev, void *ctx_priv);
};

struct rtrs_srv_opts {
	size_t size;			/* sizeof(struct rtrs_srv_opts) */
	uint32_t chunk_size;		/* 128 KiB; power of two, >= 8 KiB */
	uint32_t queue_depth;		/* 512 chunks per session; 1..65535 */
	uint32_t max_hdr_size;		/* user header limit sent in CON_RSP: 4096 */
	int always_invalidate;		/* 1 (default): each chunk is reachable through a
					 * type 1 memory window whose key is invalidated
					 * when an IO arrives and renewed with the answer;
					 * clients register each READ buffer in a window
					 * the server invalidates (docs/rtrs.md). 0: one
					 * key for all chunks, as the kernel's
					 * always_invalidate=0 */
	unsigned int hb_interval_ms;	/* 5000 */
	unsigned int hb_missed_max;	/* 5 */
	const char *stats_dir;		/* as the client's */
	void *priv;			/* ctx_priv of link_ev */
	int poll_us;			/* as the client's: RTRS_POLL_US_DEFAULT */
};

void rtrs_srv_opts_init(struct rtrs_srv_opts *opts);

/* Listens on n addresses ("HOST:PORT", "[V6]:PORT", ":PORT" or "HOST"), each a possible path.
 * Returns NULL with errno (EADDRINUSE, EINVAL, ...). */
struct rtrs_srv_ctx *rtrs_srv_open(const struct rtrs_srv_ops *ops, const char *const *addrs,
				   size_t n, const struct rtrs_srv_opts *opts);
/* Closes every session (link_ev DISCONNECTED for each), stops listening, frees. */
void rtrs_srv_close(struct rtrs_srv_ctx *ctx);

/* Answers a request (any thread). errno_ 0 = success; otherwise sent to the client (0..511).
 * For a READ the data buffer given to rdma_ev is sent first. Returns 0, or EINVAL for an op
 * already answered, ENOTCONN if the path went away (the client re-issues it elsewhere). */
int rtrs_srv_resp_rdma(struct rtrs_srv_op *op, int errno_);

void rtrs_srv_set_sess_priv(struct rtrs_srv_sess *sess, void *priv);
const char *rtrs_srv_get_sess_name(struct rtrs_srv_sess *sess);
uint32_t rtrs_srv_get_queue_depth(struct rtrs_srv_sess *sess);
/* The session an op belongs to. */
struct rtrs_srv_sess *rtrs_srv_op_sess(struct rtrs_srv_op *op);

/* Counters of every path of every session; returns the number of paths (may exceed max). */
int rtrs_srv_path_stats(struct rtrs_srv_ctx *ctx, struct rtrs_path_stats *out, int max);

#ifdef __cplusplus
}
#endif
#endif
