/* SPDX-License-Identifier: MIT */
/*
 * The soft NIC's objects. Each verbs object embeds the rdma-core struct the application sees
 * (first member, so the application's pointer converts back with a cast), plus the state the
 * engine needs. One lock per object; the order is
 *
 *     nic->rx_lock  ->  qp->lock  ->  srq->lock  ->  cq->lock  ->  channel lock / ctx->ev_lock
 *
 * and table locks are leaves. Inside the stack functions return 0 or a negative errno; the
 * verbs face (src/verbs) turns that into rdma-core's conventions.
 */
#ifndef SR_CORE_CORE_H
#define SR_CORE_CORE_H

#include <net/if.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "core/addr.h"
#include "wire/psn.h"
#include "core/stats.h"

struct sr_nic;
struct sr_qp;
struct sr_swqe;
struct sr_fault;
struct sr_pcap;

#define SR_VENDOR_ID 0x534452		/* "SDR": not an IEEE OUI; this is a soft device */
#define SR_VENDOR_PART_ID 0x0001
#define SR_MAX_SGE 32
#define SR_MAX_INLINE 1024
#define SR_MAX_QP_WR 16384
#define SR_MAX_RD_ATOMIC 128
#define SR_MAX_MSG_SIZE (1u << 31)
#define SR_MAX_DEVICES 8
#define SR_MAX_MCAST 256

static inline uint64_t sr_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * One clock read for the steps of an application's drain of one datagram (sr_nic_poll_at after
 * an empty drain: a ping-pong's next message, its ACK riding in front): the progress the ACK
 * brings (its RTT sample, transport/comp.c), the due time of the ACK deferred for the message
 * (transport/resp.c) and the end of the poll are one moment to within that datagram. A
 * clock_gettime costs 45-100 ns on the VMs measured, and the receive read the clock three times.
 * sr_drain_clock: 0 outside such a drain (every caller reads the clock); SR_CLOCK_UNREAD inside
 * one until its first reader; then that reading.
 */
#define SR_CLOCK_UNREAD 1
/* Thread-local variables stay in the default (global-dynamic) model, a __tls_get_addr call per
 * function's first access: tried 2026-11-29, initial-exec for this one and net/udp.c's batch
 * pointer (16 bytes) gained ~1 % of a busy ping-pong, and UCX and pyverbs, which load this
 * library by dlopen, then failed with "cannot allocate memory in static TLS block". */
extern __thread uint64_t sr_drain_clock;

static inline uint64_t sr_drain_now_ns(void)
{
	if (!sr_drain_clock)
		return sr_now_ns();
	if (sr_drain_clock == SR_CLOCK_UNREAD)
		sr_drain_clock = sr_now_ns();
	return sr_drain_clock;
}

/* ---- index tables: keys and QP numbers are an index plus random tag bits ----------------- */
struct sr_table {
	pthread_mutex_t lock;
	void **slot;
	_Atomic uint32_t *busy;	/* per index: lock-free readers in progress (sr_table_enter) */
	uint32_t size;		/* power of two */
	uint32_t next_free_hint;
	uint32_t count;
};
int sr_table_init(struct sr_table *t, uint32_t size);
void sr_table_destroy(struct sr_table *t);
/* Inserts obj at a free index (never 0); returns the index or -ENOMEM. */
int sr_table_add(struct sr_table *t, void *obj);
/* The same with t->lock held (the caller publishes more state under the same lock). */
int sr_table_add_locked(struct sr_table *t, void *obj);
/*
 * Lock-free lookups (the receive path's QPN and the access check's key): a reader raises
 * busy[index], then reads the slot, and holds busy[index] instead of a reference for as long
 * as it uses the object; whoever empties a slot waits with sr_table_drain, after emptying it,
 * until busy[index] is 0 before the object may go. Dekker: each side writes its own word, then
 * reads the other's, both sequentially consistent, so a reader either sees the slot emptied
 * or is waited for. Slots are written with atomic stores (release, seq_cst when emptied).
 */
static inline void *sr_table_enter(struct sr_table *t, uint32_t index)
{
	atomic_fetch_add(&t->busy[index], 1);
	return __atomic_load_n(&t->slot[index], __ATOMIC_SEQ_CST);
}
static inline void sr_table_leave(struct sr_table *t, uint32_t index)
{
	atomic_fetch_sub_explicit(&t->busy[index], 1, memory_order_release);
}
/* Slot index emptied (or made a tombstone) by this caller: waits until no reader holds it. */
void sr_table_drain(struct sr_table *t, uint32_t index);
/* Removing an object the lock-free lookups may hold: sr_table_retire puts a tombstone (an
 * object no lookup accepts) in its slot, so the index cannot be handed out while
 * sr_table_drain waits (a new owner's readers would keep busy[index] up and the drain would
 * wait on them); sr_table_free_index then frees the index. */
void sr_table_retire(struct sr_table *t, uint32_t index, void *tomb);
void sr_table_free_index(struct sr_table *t, uint32_t index);

/* ---- device and soft NIC ------------------------------------------------------------------ */
struct sr_device {
	struct ibv_device ibdev;	/* first; rdma-core's verbs_device puts its ops pointer next */
	const void *verbs_ops;		/* never libmlx5's or libefa's ops: they see a foreign device */
	int index;			/* softrdma<index> */
	char netdev[IF_NAMESIZE];	/* bound interface, "" for loopback / explicit address */
	pthread_mutex_t lock;
	struct sr_nic *nic;		/* created at the first open, shared by every context */
	int nic_users;
};

#define SR_GONE_QPS 256
#define SR_GONE_MS 10000

struct sr_nic {
	struct sr_device *dev;
	struct sr_addr addr;		/* bound local IP and UDP port */
	bool addr_auto;			/* zero configuration: any loopback address will do */
	union ibv_gid gid;		/* its own GID, naming its port (GID index 1 when sr_addr_lid) */
	__be64 guid;
	unsigned ifmtu;			/* interface MTU */
	enum ibv_mtu active_mtu;
	uint32_t seg_max;		/* large segments offered to softrdma peers (0: none) */
	uint8_t bth_mark;		/* BTH byte 4 bits of every packet sent (SR_BTH_SR_MARK) */
	int fd;				/* the UDP socket */
	int epfd, evfd;			/* progress thread: epoll set, wake-up eventfd */
	pthread_t thread;
	_Atomic bool stop;
	struct sr_stats stats;
	struct sr_fault *fault;
	struct sr_pcap *pcap;
	bool icrc_check;
	bool icrc_id_strict;
	bool gso;			/* batches leave as one UDP GSO send (udp.c) */
	bool gro;			/* the socket takes coalesced datagrams (UDP_GRO) */
	uint32_t max_inflight, ack_every;
	uint32_t ack_lazy;		/* param ack_lazy (0: off, also when ack_defer_us is 0) */
	bool ack_ride;			/* param ack_ride: deferred ACKs ride in requests, offered */

	struct sr_table qps;		/* by QPN index */
	struct sr_qp *gsi;		/* QP1, the GSI QP (under qps.lock): sr_qp_make_gsi */
	struct sr_table keys;		/* MRs (and MWs) by key index */

	pthread_mutex_t rx_lock;	/* one receiver at a time: thread or polling application */
	_Atomic uint64_t app_poll_ns;	/* when an application last polled for packets (0: never) */
	_Atomic int cq_backlog;		/* CQs holding SR_CQ_BACKLOG+ completions nobody polled yet */
	_Atomic int cq_notify;		/* CQs armed for an event on a channel (ibv_req_notify_cq) */
	_Atomic uint64_t cq_arm_ns;	/* when a CQ with a channel was last armed */
	_Atomic bool rx_watching;	/* the progress thread watches a polling application */
	_Atomic bool backlog_off;	/* a backlog outlasted the pause: no pause until one is polled */
	_Atomic bool rx_paused;		/* the progress thread leaves the socket to the application */
	_Atomic int chan_waits;		/* channels whose blocking waits watch the socket (wfd):
					 * the thread's registration is then exclusive (nic.c) */
	_Atomic uint64_t rx_empty_ns;	/* when an application's drain last found nothing */
	_Atomic uint64_t app_poll_end_ns; /* when an application's last poll returned */
	_Atomic uint64_t app_spin_ns;	/* since when it has polled in a tight loop for nothing */
	bool app_rx_empty;		/* an application's last drain found nothing (rx_lock) */
	struct sr_rxring *rx;
	struct sr_qp *ack_list;		/* QPs with a coalesced ACK to send after this batch, or
					 * a deferred one (rx_lock) */
	_Atomic uint64_t ack_due;	/* earliest deferred ACK's deadline (0: none) */
	_Atomic uint64_t unasked_due;	/* earliest ACK of unasked message ends (resp.c,
					 * ack_unasked): the thread looks for it at its usual
					 * cadence, not every ack_defer_us (0: none) */
	_Atomic uint64_t ack_deferred_ns;	/* when an ACK was last deferred */
	_Atomic uint64_t wake_at;	/* when the progress thread wakes at the latest */
	_Atomic uint64_t watch_slack_ns;	/* a watch that grew (rx_watch_max_us): how long
					 * the thread may sleep past a deferred ACK's look */

	/* Multicast groups with attached QPs (mcast.c): one UDP socket per group. */
	pthread_mutex_t mcast_lock;
	struct sr_mcast *mcast;

	pthread_mutex_t timer_lock;
	struct sr_qp **timer_qps;	/* QPs with an armed timer */
	uint32_t ntimer, timer_cap;
	_Atomic bool sleeping;		/* progress thread waits with no timeout */
	/* QPs destroyed lately, (ms << 24) | QPN each (sr_qp_gone_note): a packet for one of
	 * them is a peer's last word, not a stray (counter drop_qp_gone, not drop_qpn). */
	_Atomic uint64_t gone[SR_GONE_QPS];
	_Atomic unsigned gone_next;
	struct sr_direct *direct;	/* same-host direct path (core/direct.c, transport/direct.c) */
	const struct sr_engine_hooks *engine;	/* installed by the engine (above) */
};

/* The NIC's doorbell (core/nic.c): wakes whoever serves the NIC (the engine's progress
 * thread). Any layer rings it; it calls nothing. */
void sr_nic_kick(struct sr_nic *nic);
/* ibv_get_device_guid's value (core/nic.c). */
__be64 sr_device_guid(const struct sr_device *d);
/* Registers qp for timer service (qp lock held); wakes the thread if it sleeps. */
void sr_timer_arm(struct sr_qp *qp);
/* Off the timer list; the list's reference dropped by whoever removes the entry (core/qp.c). */
void sr_timer_disarm(struct sr_qp *qp);


/* ---- context and asynchronous events ------------------------------------------------------ */
struct sr_async_ev {
	struct ibv_async_event ev;
};

struct sr_ctx {
	struct verbs_context vctx;	/* ends with the ibv_context */
	struct sr_device *dev;
	struct sr_nic *nic;
	pthread_mutex_t ev_lock;
	struct sr_async_ev *evq;
	uint32_t ev_head, ev_tail, ev_cap;
};

static inline struct sr_ctx *sr_ctx(struct ibv_context *c)
{
	return (struct sr_ctx *)((char *)c - offsetof(struct verbs_context, context));
}
/* Queues an affiliated/unaffiliated event for ibv_get_async_event. */
void sr_async_event(struct sr_ctx *ctx, enum ibv_event_type type, void *element);
/* Removes queued, undelivered events about element (before it is destroyed). */
void sr_async_event_purge(struct sr_ctx *ctx, void *element);
/* Whether an asynchronous event's element is a QP. */
bool sr_event_is_qp(enum ibv_event_type t);
/* ibv_event_type_str's text (cq.c). */
const char *sr_event_type_str(enum ibv_event_type event);

/* ---- PD, MR, MW --------------------------------------------------------------------------- */
struct sr_pd {
	struct ibv_pd ibpd;
	struct sr_ctx *ctx;
	_Atomic int users;		/* MRs, MWs, QPs, SRQs, AHs using it */
};
static inline struct sr_pd *sr_pd(struct ibv_pd *p) { return (struct sr_pd *)p; }

/*
 * MRs and MWs share the NIC's key table: a key is index << 8 | tag, and the slot at the index
 * holds the object's sr_kobj, which says what it is. A work request that names an object (the
 * MR of a REG_MR, the MW and MR of a bind) keeps (index, serial) rather than a pointer: if the
 * application frees the object before the request executes, the serial no longer matches.
 * Every piece of key state that the datapath reads and the verbs change (fast-registration
 * maps, window bindings) is guarded by nic->keys.lock, a leaf lock (mr.c, mw.c).
 */
enum sr_kobj_type { SR_KOBJ_MR = 1, SR_KOBJ_MW = 2 };
struct sr_kobj {
	uint8_t type;
	uint64_t serial;		/* unique in the process, never reused */
};
uint64_t sr_kobj_serial(void);
/* What a key slot holds while its object is being deregistered or changed (rereg): neither an
 * MR nor an MW to a lookup, and the index is not handed out again meanwhile. */
extern struct sr_kobj sr_kobj_dying;

/*
 * Fast registration (softrdma_alloc_mr, include/softrdma/softrdma.h), after the multi-map
 * design of ../shared/seeds/004: each key generation (the 8-bit tag) has its own map.
 *   FREE     built by softrdma_map_mr_sg, not usable until a REG_MR work request names its key
 *   VALID    registered: accesses with its key pass (within its range and rights)
 *   INVALID  invalidated (LOCAL_INV executed by the requester, or a SEND with invalidate
 *            executed by the responder). New accesses fail; the map's contents are kept, so a
 *            retransmission of what was sent (requester) or a replay of what was executed
 *            (responder) before the invalidation, on the invalidating QP, is judged against
 *            the map that was valid at its PSN. A LOCAL_INV holds its map until it completes
 *            (every earlier WQE of that SQ has completed: nothing can be retransmitted any
 *            more); only then may softrdma_map_mr_sg reuse the slot for a new generation.
 */
enum sr_map_state { SR_MAP_UNUSED = 0, SR_MAP_FREE, SR_MAP_VALID, SR_MAP_INVALID };
struct sr_frmap {
	uint8_t state;			/* enum sr_map_state */
	uint8_t key;			/* the generation: the tag of its l/rkey */
	bool held;			/* INVALID by a LOCAL_INV not completed yet */
	bool inval_resp;		/* invalidated by the responder (inval_psn: request PSN) */
	uint32_t inval_qpn, inval_psn;	/* where and at which PSN it was invalidated */
	unsigned access;		/* from the REG_MR */
	uint64_t iova, length;
	uint32_t page_shift;
	uint32_t first_off;		/* offset of iova in pages[0] */
	uint32_t npages;
	uint64_t seq;			/* creation order (the oldest free slot is reused first) */
	uint8_t **pages;		/* max_pages page addresses in this process */
};
struct sr_frmr {
	uint32_t max_pages;
	uint32_t nmaps;
	uint64_t seq;
	struct sr_frmap map[];
};

struct sr_mr {
	struct ibv_mr ibmr;
	struct sr_kobj k;
	struct sr_pd *pd;
	struct sr_nic *nic;
	uint32_t index;			/* accesses in progress: nic->keys.busy[index] */
	uint64_t iova;			/* address peers and SGEs use for byte 0 */
	uint8_t *base;			/* where byte 0 is in this process */
	uint64_t length;
	unsigned access;
	bool pinned;
	bool odp;			/* IBV_ACCESS_ON_DEMAND: never pinned; pages checked per access */
	uint32_t mw_bound;		/* windows bound to it (keys lock): dereg refused meanwhile */
	struct sr_frmr *fr;		/* fast-registration MR: its maps; NULL for ibv_reg_mr */
};
static inline struct sr_mr *sr_mr(struct ibv_mr *m) { return (struct sr_mr *)m; }

/* Memory windows (mw.c). Type 1: bound with ibv_bind_mw, used through any QP of its PD.
 * Type 2: bound by a BIND_MW work request, used (and remotely invalidated) only through the
 * QP that bound it, invalidated by LOCAL_INV or SEND with invalidate (IBA 10.6.7). */
struct sr_mw {
	struct ibv_mw ibmw;
	struct sr_kobj k;
	struct sr_pd *pd;
	struct sr_nic *nic;
	uint32_t index;
	/* Under nic->keys.lock: */
	uint32_t key;			/* current rkey (ibmw.rkey is the application's copy) */
	bool bound;			/* IBA: Valid (bound) or Free */
	uint32_t qpn;			/* type 2: the QP it is bound to */
	struct sr_mr *mr;		/* bound to (mr->mw_bound counts it) */
	uint64_t addr, length;
	unsigned access;
};
static inline struct sr_mw *sr_mw(struct ibv_mw *m) { return (struct sr_mw *)m; }

/* Result of an access check: an IBA-level reason, mapped to NAK codes / WC statuses. */
enum sr_access_err {
	SR_ACC_OK = 0,
	SR_ACC_BAD_KEY,		/* no such key, stale tag, invalidated, other PD or QP */
	SR_ACC_RIGHTS,		/* the MR or window does not grant the access */
	SR_ACC_BOUNDS,		/* outside the MR or window */
};

/* Who asks for an access, and where it stands in PSN order (fast-registration maps judge a
 * retransmission by the PSN it was first sent at). */
enum sr_psn_space {
	SR_SPACE_NOW = 0,	/* a new execution: judged by the current state only */
	SR_SPACE_REQ,		/* requester: a WQE's gather or scatter, psn = its first PSN */
	SR_SPACE_RESP,		/* responder: a request packet (or the request a replay repeats) */
};
struct sr_acc {
	struct sr_pd *pd;
	uint32_t qpn;		/* the QP it is for (0: none) */
	uint32_t psn;
	uint8_t space;		/* enum sr_psn_space */
	bool remote;		/* an rkey from the wire (else an lkey from an SGE) */
};

/*
 * The one check every access passes: key (index and tag), kind (MR, fast-reg map, window),
 * state, PD (and QP for a type 2 window), rights, bounds. On success returns a referenced MR
 * (a window's: the MR it is bound to); release with sr_mr_put(). When iov is not NULL, the
 * process memory of [va, va + len) is stored there: one piece for an MR or a window, one per
 * page crossed for a fast-registration MR (at most max_iov, else SR_ACC_BOUNDS).
 */
struct sr_mr *sr_mem_get(struct sr_nic *nic, const struct sr_acc *a, uint32_t key, uint64_t va,
			 uint64_t len, unsigned access, struct iovec *iov, int max_iov, int *niov,
			 enum sr_access_err *err);
void sr_mr_put(struct sr_mr *mr);
/* FLUSH (resp.c): checks like sr_mem_get (whole: the key's whole range, va and len ignored)
 * and makes the range globally visible, or durable (msync MS_SYNC) when `persist`.
 * 0 or an sr_access_err; -EIO when msync failed. */
int sr_mem_flush(struct sr_nic *nic, const struct sr_acc *a, uint32_t key, uint64_t va,
		 uint64_t len, bool whole, unsigned access, bool persist, enum sr_access_err *err);

#define SR_FRMR_MAX_PAGES (1u << 20)	/* pages of one fast-registration map */
#define SR_FRMR_MAX_MAPS 16		/* key generations alive at once per MR (param frmr_maps) */

/* Key table helpers (keys lock held): the object at index with this serial, or NULL. */
struct sr_mr *sr_mr_find(struct sr_nic *nic, uint32_t index, uint64_t serial);
struct sr_mw *sr_kobj_mw(struct sr_kobj *o);
/* Local operations, executed by the requester under the QP lock (mr.c, mw.c): 0 or the
 * ibv_wc_status the WQE completes with. */
int sr_mw_bind_exec(struct sr_qp *qp, struct sr_swqe *w);
int sr_frmr_reg_exec(struct sr_qp *qp, struct sr_swqe *w);
/* Invalidates the fast-registration map or type 2 window named by key: LOCAL_INV (requester,
 * psn = the next PSN it will send) or SEND with invalidate (`remote`: responder, psn = the
 * request's). *held: a map is held until sr_key_inval_done() (the LOCAL_INV completed).
 * 0, or -EINVAL when the key names nothing that this QP may invalidate. */
int sr_key_invalidate(struct sr_qp *qp, uint32_t key, bool remote, uint32_t psn, bool *held);
void sr_key_inval_done(struct sr_qp *qp, uint32_t key);
int sr_mw_invalidate_locked(struct sr_qp *qp, struct sr_mw *mw, uint32_t key, bool remote);

/* ---- CQ and completion channel ----------------------------------------------------------- */
struct sr_channel {
	struct ibv_comp_channel ch;	/* context, fd (an eventfd), refcnt */
	pthread_mutex_t lock;
	struct sr_cq **q;		/* CQs with a pending event, FIFO */
	uint32_t head, tail, cap;
	int wfd;			/* blocking waits: epoll {ch.fd, the NIC's socket}, or -1 */
	int wsock;			/* the socket fd registered in wfd (-1: none) */
	int waiters;			/* threads asleep in ibv_get_cq_event (lock) */
	bool dead;			/* destroyed while waiters slept: the last one frees it */
};

struct sr_cq {
	struct ibv_cq_ex ibcq;		/* struct ibv_cq is its prefix */
	struct sr_ctx *ctx;
	pthread_mutex_t lock;
	struct ibv_wc *ring;
	uint32_t mask, head, tail;	/* head: next to write; tail: next to read (counters) */
	uint32_t capacity;
	uint8_t armed;			/* 0, SR_CQ_ARM_ANY, SR_CQ_ARM_SOLICITED */
	bool overflowed;
	bool in_backlog;		/* counted in nic->cq_backlog */
	struct sr_channel *chan;
	_Atomic int users;		/* QPs using it */
	uint32_t comp_events_delivered;
	uint32_t async_events_delivered;
	uint64_t wc_flags_ex;		/* create_cq_ex: which fields the app reads */
	struct ibv_wc cur;		/* extended polling: the current completion */
	bool ex_polling;
	_Atomic uint32_t polls;		/* sr_cq_poll calls (written under lock), read by posts
					 * without it (sr_swqe_finish) */
	_Atomic uint64_t poll_ns;	/* the last sr_cq_poll (0: never), read by sr_cq_post */
};
#define SR_CQ_ARM_ANY 1
#define SR_CQ_ARM_SOLICITED 2
/* Unpolled completions in a CQ nobody sleeps on that make the progress thread pause
 * (engine/nic.c), once its consumer has not polled it for backlog_idle_us. */
#define SR_CQ_BACKLOG 32
/* ... and that make it pause whenever its consumer last polled. */
#define SR_CQ_BACKLOG_DEEP 128
static inline struct sr_cq *sr_cq(struct ibv_cq *c) { return (struct sr_cq *)c; }

/* Adds a completion; raises the channel event when armed. Never blocks on a full CQ. */
void sr_cq_post(struct sr_cq *cq, const struct ibv_wc *wc, bool solicited);
int sr_cq_poll(struct sr_cq *cq, int n, struct ibv_wc *wc);
int sr_cq_poll_at(struct sr_cq *cq, int n, struct ibv_wc *wc, uint64_t now);
/* Would a successful completion posted now raise the channel event (a consumer sleeps on it)? */
bool sr_cq_would_notify(struct sr_cq *cq, bool solicited);
int sr_cq_count(struct sr_cq *cq);
/* Removes the completions of QP qpn that wait in cq (a QP moved to RESET, as ConnectX
 * providers clean its CQs): its send completions, and its receive completions when `recv`. */
void sr_cq_purge_qp(struct sr_cq *cq, uint32_t qpn, bool recv);

/* ---- receive queues (QP RQ or SRQ) -------------------------------------------------------- */
struct sr_rwqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t length;		/* sum of the SGE lengths */
	struct ibv_sge sge[];
};

struct sr_rq {
	uint8_t *buf;
	uint32_t stride;		/* bytes per WQE */
	uint32_t mask, head, tail;	/* head: next to post; tail: next to consume (counters) */
	uint32_t max_wr;
	uint32_t max_sge;
};
int sr_rq_init(struct sr_rq *rq, uint32_t max_wr, uint32_t max_sge);
void sr_rq_free(struct sr_rq *rq);
static inline struct sr_rwqe *sr_rq_at(struct sr_rq *rq, uint32_t i)
{
	return (struct sr_rwqe *)(rq->buf + (size_t)(i & rq->mask) * rq->stride);
}
static inline uint32_t sr_rq_count(const struct sr_rq *rq) { return rq->head - rq->tail; }
/* Validates and copies a chain of receive WRs in; -errno with *bad set on the first failure. */
int sr_rq_post(struct sr_rq *rq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

struct sr_srq {
	struct ibv_srq ibsrq;
	struct sr_ctx *ctx;
	struct sr_pd *pd;
	pthread_mutex_t lock;
	struct sr_rq rq;
	uint32_t limit;			/* 0: not armed */
	_Atomic int users;
	uint32_t async_events_delivered;
	/* XRC SRQ (xrc.c): number, domain, completion queue; NULL xrcd: a basic SRQ. */
	struct sr_xrcd *xrcd;
	struct sr_cq *cq;
	uint32_t srqn;
	int xrefs;			/* XRC_RECV QPs bound to it now (xrcd->lock) */
	struct sr_srq *xnext;		/* in xrcd->srqs */
};
static inline struct sr_srq *sr_srq(struct ibv_srq *s) { return (struct sr_srq *)s; }

/* ---- XRC domain (xrc.c) ------------------------------------------------------------------ */
struct sr_xrcd {
	struct ibv_xrcd ibxrcd;
	struct sr_ctx *ctx;
	pthread_mutex_t lock;		/* srqs, xrefs: a leaf below srq->lock */
	struct sr_srq *srqs;		/* its XRC SRQs */
	_Atomic int users;		/* XRC SRQs and XRC_RECV QPs */
	int opens;			/* ibv_open_xrcd calls not closed (xrcd_list_lock) */
	bool by_inode;			/* opened with a file: shared by inode within the process */
	dev_t fdev;
	ino_t ino;
	struct sr_xrcd *next;
};
static inline struct sr_xrcd *sr_xrcd(struct ibv_xrcd *x) { return (struct sr_xrcd *)x; }
int sr_xrcd_open(struct sr_ctx *ctx, const struct ibv_xrcd_init_attr *attr, struct sr_xrcd **out);
int sr_xrcd_close(struct sr_xrcd *xrcd);
int sr_xrc_srq_create(struct sr_pd *pd, struct sr_xrcd *xrcd, struct sr_cq *cq,
		      struct ibv_srq_init_attr *attr, struct sr_srq **out);
/* Unlinks an XRC SRQ before sr_srq_destroy; -EBUSY while a QP is bound to it. */
int sr_xrc_srq_unlink(struct sr_srq *srq);
/* The XRC SRQ numbered srqn in xrcd, bound (xrefs + 1), or NULL. */
struct sr_srq *sr_xrc_srq_get(struct sr_xrcd *xrcd, uint32_t srqn);
void sr_xrc_srq_put(struct sr_srq *srq);

/* ---- address handle ---------------------------------------------------------------------- */
struct sr_ah {
	struct ibv_ah ibah;
	struct sr_pd *pd;
	struct ibv_ah_attr attr;
	struct sr_addr dst;
};
static inline struct sr_ah *sr_ah(struct ibv_ah *a) { return (struct sr_ah *)a; }
/* Validates an ibv_ah_attr against the port and resolves its destination. */
int sr_ah_resolve(struct sr_nic *nic, const struct ibv_ah_attr *attr, struct sr_addr *dst);

/* ---- send queue ---------------------------------------------------------------------------- */
enum sr_wqe_state {
	SR_WQE_POSTED,			/* nothing sent yet (or rewound to its start) */
	SR_WQE_SENDING,			/* PSNs assigned, some packets sent */
	SR_WQE_SENT,			/* every packet sent; waiting for the response */
};

struct sr_swqe {
	uint64_t wr_id;
	uint32_t opcode;		/* enum ibv_wr_opcode */
	uint32_t flags;			/* enum ibv_send_flags */
	uint32_t imm;			/* immediate data (network order) or the rkey to invalidate */
	uint32_t length;		/* message bytes */
	uint32_t num_sge;
	bool inl;			/* payload copied into the inline buffer */
	bool in_stream;			/* posted with no poll of the send CQ since the QP's
					 * previous post (sr_swqe_finish; direct path) */
	bool dplaced;			/* WRITE with immediate: the data is in place already (the
					 * same-host direct path); one packet, no payload (req.c) */
	uint8_t state;
	uint8_t status;			/* a local error found while sending (enum ibv_wc_status) */
	uint64_t raddr;
	uint32_t rkey;
	uint64_t compare_add, swap;
	struct sr_addr ud_dst;		/* UD: destination resolved from the AH at post time */
	uint32_t ud_qpn, ud_qkey;
	uint32_t xrc_srqn;		/* XRC_SEND: the remote XRC SRQ (XRCETH) */
	uint32_t first_psn, last_psn;	/* valid once state >= SENDING */
	uint32_t npkts;
	union {				/* the arguments of the operations that need more */
		struct {		/* IBV_WR_BIND_MW (and ibv_bind_mw) */
			uint32_t mw_index, mr_index;	/* mr_index 0: unbind (type 1) */
			uint64_t mw_serial, mr_serial;
			uint64_t addr, length;
			uint32_t rkey;			/* the window's new rkey */
			unsigned access;
		} bind;
		struct {		/* SR_WR_REG_MR (softrdma_wr_reg_mr) */
			uint32_t mr_index;
			uint64_t mr_serial;
			uint32_t key;
			unsigned access;
		} reg;
		struct {		/* IBV_WR_LOCAL_INV (the rkey is in imm) */
			bool held;			/* it holds a map until it completes */
		} inv;
		struct {		/* SR_WR_FLUSH */
			uint64_t length;
			uint8_t type, level;
		} flush;
		struct {		/* IBV_WR_ATOMIC_WRITE */
			uint64_t value;
			bool have_value;		/* value given (wr API, inline), else the SGE */
		} aw;
	} u;
	uint32_t rd_end_psn;		/* READ: last PSN of the READ request last issued (req.c) */
	uint32_t rd_mid_psn;		/* READ: last PSN of the request before it while both are
					 * outstanding (req.c, read_overlap), else first_psn - 1 */
	uint32_t seg;			/* payload per packet, fixed when it starts (req.c) */
	uint32_t seg_cut;		/* the FIRST carries seg - seg_cut (a WRITE's RETH) */
	uint64_t start_ns;		/* ns its first packet was first sent (req.c) */
};

/* A READ's rd_mid_psn holds a PSN (the end of a request outstanding beside its last one). */
static inline bool sr_rd_mid_valid(const struct sr_swqe *w)
{
	return !sr_psn_lt(w->rd_mid_psn, w->first_psn);
}

/* Work request opcodes of softrdma's own API (include/softrdma/softrdma.h): REG_MR takes the
 * driver-private opcode (as mlx5dv does), FLUSH the value newer rdma-core gives IBV_WR_FLUSH. */
#define SR_WR_REG_MR IBV_WR_DRIVER1
#define SR_WR_FLUSH 14
#define SR_WC_REG_MR IBV_WC_DRIVER1
#define SR_WC_FLUSH 8
/* Access flags newer rdma-core defines (IBV_ACCESS_FLUSH_*), same values. */
#define SR_ACCESS_FLUSH_GLOBAL (1u << 8)
#define SR_ACCESS_FLUSH_PERSISTENT (1u << 9)
/* sr_mem_get only: the caller faulted this range of an ODP MR in for the same message already
 * (its first packet checked the whole message), so no MADV_POPULATE per packet. */
#define SR_ACCESS_FAULTED (1u << 30)
#define SR_FLUSH_GLOBAL 1u		/* placement types (FETH), bits */
#define SR_FLUSH_PERSISTENT 2u
#define SR_FLUSH_RANGE 0u		/* selectivity levels */
#define SR_FLUSH_MR 1u

/* Operations that wait for a response of their own and count against max_rd_atomic (IBA
 * 9.5.9): READ, the atomics, and -- as in rxe -- ATOMIC WRITE and FLUSH, which are answered by
 * an empty RDMA READ response and replayed, never re-executed, on a duplicate. */
static inline bool sr_op_is_rd_atomic(uint32_t op)
{
	return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP ||
	       op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_WRITE || op == SR_WR_FLUSH;
}

/* One request packet, whatever the length (no payload beyond one MTU). */
static inline bool sr_op_is_one_pkt(uint32_t op)
{
	return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD ||
	       op == IBV_WR_ATOMIC_WRITE || op == SR_WR_FLUSH;
}

/* Operations the requester executes itself, without a packet (IBA 10.8.2: local). */
static inline bool sr_op_is_local(uint32_t op)
{
	return op == IBV_WR_LOCAL_INV || op == IBV_WR_BIND_MW || op == SR_WR_REG_MR;
}

struct sr_sq {
	struct sr_swqe *wqe;
	uint32_t mask, head, tail;	/* head: next to post; tail: oldest not completed */
	uint32_t max_wr, max_sge, max_inline;
	struct ibv_sge *sges;
	uint8_t *inline_buf;
};
static inline struct sr_swqe *sr_sq_at(struct sr_sq *sq, uint32_t i) { return &sq->wqe[i & sq->mask]; }
static inline struct ibv_sge *sr_sq_sges(struct sr_sq *sq, uint32_t i)
{
	return &sq->sges[(size_t)(i & sq->mask) * sq->max_sge];
}
static inline uint8_t *sr_sq_inline(struct sr_sq *sq, uint32_t i)
{
	return &sq->inline_buf[(size_t)(i & sq->mask) * sq->max_inline];
}

/* ---- the queue pair ---------------------------------------------------------------------- */
struct sr_req {			/* requester: turns WQEs into request packets (req.c) */
	uint32_t psn;			/* next PSN to send */
	uint32_t idx;			/* SQ counter of the WQE being sent */
	uint32_t offset;		/* bytes of that WQE already sent */
	uint32_t rd_atomic;		/* READ/ATOMIC WQEs sent and not completed */
	uint32_t rd_extra;		/* READ requests outstanding beside their WQE's last one
					 * (rd_mid_psn valid): they hold a responder slot too */
	uint64_t rnr_until;		/* no request packet before this time (RNR wait), ns */
	uint32_t since_ackreq;		/* packets sent since the last AckReq */
	uint32_t high_psn;		/* one past the highest PSN ever sent */
	bool stalled;			/* a WQE hit a local error: send nothing more */
	/* Send window (RC): AIMD on loss, like TCP Reno without fast recovery. Go-back-N resends
	 * everything after a lost packet, so a window that shrinks under loss is what keeps a
	 * lossy link from drowning in retransmissions. */
	uint32_t cwnd, ssthresh, ca_acc;
	uint32_t recover_psn;		/* losses before this PSN belong to the last reduction */
	uint32_t cwnd_psn;		/* comp.psn when the window last grew */
	bool force_ackreq;		/* the packet being built asks for an ACK (a repair) */
	bool ackreq_owed;		/* a WRITE ended without AckReq, the next WQE right behind
					 * it, and no packet has asked since (req.c, more_follows) */
	bool win_shut;			/* the window stopped the last pass (req.c, window_gated) */
	/* Message ends that do not ask (param ack_lazy, req.c ack_lazy_ok). */
	uint32_t ask_end;		/* one past the PSN of the last packet that asked for an
					 * ACK: one is coming while comp.psn is below it */
	uint64_t ask_ns;		/* when a message end that could have skipped last asked */
	/* A post's pass reads the clock after its packets left (post.c sr_sq_posted, req.c
	 * sr_req_stamp): while stamp_late, the times of the pass's first packet (its WQE's
	 * start_ns, rtt_t0, last_progress, last_new) are written as SR_STAMP_LATE and stamp_due
	 * is set; stamp_idx: that WQE. */
	bool stamp_late, stamp_due;
	uint32_t stamp_idx;
};
#define SR_STAMP_LATE UINT64_MAX

struct sr_comp {		/* completer: consumes responses, completes WQEs (comp.c) */
	uint32_t psn;			/* oldest PSN not yet acknowledged */
	uint32_t retry_left;		/* retries left without forward progress */
	uint32_t rnr_left;		/* RNR retries left (7 = infinite) */
	uint64_t last_progress;		/* ns of the last forward progress (retransmit timer base) */
	uint64_t last_probe;		/* ns of the last fast (uncounted) retransmission */
	uint32_t backoff;		/* timeouts in a row without progress (timer doubling) */
	bool nak_rewound;		/* a rewind is under way (NAKs adding nothing ignored) */
	/* Selective repair (comp.c): after a NAK only the missing packet is resent, when the peer
	 * keeps what followed it. peer_keeps: 0 not known yet, 1 it does, -1 it does not (then
	 * go-back-N). */
	int8_t peer_keeps;
	bool repairing;			/* repair_psn resent alone, its answer not seen yet */
	bool repair_nak;		/* ... because of a NAK (not a tail-loss probe) */
	uint32_t repair_psn;
	uint64_t tlp_at;		/* ns of the last single-packet resend (repair or probe) */
	uint64_t last_new;		/* ns a packet was last sent for the first time: a
					 * tail-loss probe waits its delay from it too */
	uint32_t tlp_count;		/* tail-loss probes since the last progress */
	/* RTT, sampled on packets that asked for an ACK and were not retransmitted (Karn), as
	 * TCP's (RFC 6298): smoothed round trip and its mean deviation; 0: no sample yet. */
	uint64_t srtt_ns;
	uint64_t rttvar_ns;
	uint64_t rtt_min_ns;		/* the smallest sample: the path without a queue (0: none) */
	uint64_t tlp0_ns;		/* probe delay before the first sample (doubles per probe) */
	uint64_t probe_age_ns;		/* the probed packet's WQE: its first send to the probe */
	uint64_t rtt_t0;
	uint32_t rtt_psn;
	bool rtt_valid;
};

struct sr_res {			/* responder resource: a READ or ATOMIC to replay on duplicates */
	uint8_t type;			/* 0 free, SR_RES_READ, SR_RES_ATOMIC */
	uint32_t first_psn, last_psn;
	uint64_t va;
	uint32_t rkey;
	uint32_t length;
	uint32_t seg;			/* READ: payload of each response (path MTU or large) */
	uint64_t orig;			/* ATOMIC: the value returned */
	uint8_t status;			/* ATOMIC: the AETH syndrome it was answered with */
};
#define SR_RES_READ 1
#define SR_RES_ATOMIC 2
#define SR_RES_EMPTY 3		/* ATOMIC WRITE, FLUSH: answered by an empty READ response */

struct sr_resp {		/* responder: executes requests, sends responses (resp.c) */
	uint32_t epsn;			/* expected PSN */
	uint32_t msn;
	bool nak_sent;			/* silently drop out-of-sequence packets until epsn (C9-...) */
	bool comm_est;			/* COMM_EST raised */
	bool lossy;			/* has NAKed a gap: the path loses packets */
	bool in_send;			/* a multi-packet SEND is in progress */
	bool in_write;			/* a multi-packet WRITE is in progress */
	bool uc_drop;			/* UC: drop the rest of a broken message */
	bool have_rwqe;			/* rwqe holds a receive WQE taken from the RQ/SRQ */
	uint32_t recv_off;		/* bytes of the SEND received so far */
	uint64_t wva;			/* WRITE in progress: next VA, key, bytes left */
	uint32_t wrkey;
	uint32_t wleft;
	uint32_t wlen;			/* WRITE total length (for WRITE_WITH_IMM byte_len) */
	uint32_t seg;			/* payload of each packet of the SEND/WRITE in progress */
	struct sr_rwqe *rwqe;		/* owned copy; max_sge entries */
	struct sr_res *res;		/* max_dest_rd_atomic entries */
	uint32_t nres, res_next;
	struct sr_ooo *ooo;		/* out-of-sequence requests kept after a gap (resp.c) */
	bool ack_pending;		/* a coalesced ACK to send at the end of the batch */
	bool acked_now;			/* the packet being executed was acknowledged already */
	bool on_ack_list;		/* linked in nic->ack_list (separate: a response sent
					 * meanwhile clears ack_pending, not the link) */
	uint32_t ack_psn;
	struct sr_qp *ack_next;
	/* ACKs that wait for the application's answer (parameter ack_defer_us, resp.c). */
	bool answered;			/* a send was posted since the last message came in */
	uint8_t pp_score[2];		/* messages of a class in a row the application
					 * answered: [0] completes a receive WQE (SEND, WRITE
					 * with immediate), [1] does not (WRITE, ...) */
	uint8_t last_class;		/* class of the last message that came in */
	uint8_t cur_class;		/* class of the message being executed */
	uint8_t ack_class;		/* class of the message of ack_psn */
	uint64_t ack_due;		/* a deferred ACK leaves with the next post or at this time */
	bool ride_armed;		/* a post's pass: its first request packet may carry the
					 * deferred ACK (sr_resp_ride) */
	/* The pending ACK is owed only to message ends that did not ask (param ack_lazy): it
	 * leaves with any other ACK or response, or alone at unasked_due. */
	bool ack_unasked;
	uint64_t unasked_due;		/* 0 until the batch's flush sets it */
};

struct sr_qp {
	struct ibv_qp_ex qpx;		/* struct ibv_qp is its first member */
	struct sr_ctx *ctx;
	struct sr_nic *nic;
	_Atomic int refs;		/* 1 from the table; +1 per packet in progress */
	pthread_mutex_t lock;
	enum ibv_qp_type type;
	enum ibv_qp_state state;
	struct sr_pd *pd;
	struct sr_cq *scq, *rcq;
	struct sr_srq *srq;
	bool sig_all;
	bool posted;			/* a WQE was posted: post_polls means something */
	uint32_t post_polls;		/* scq->polls at the previous post */
	struct ibv_qp_attr attr;	/* as last modified: what ibv_query_qp reports */
	struct sr_addr peer;		/* RC/UC: the destination from attr.ah_attr */
	uint64_t direct_skip_ns;	/* the same-host direct path had no table of the peer to
					 * use: not asked again before this (CLOCK_MONOTONIC_COARSE,
					 * transport/direct.c); 0 after a new peer */
	uint32_t mtu;			/* path MTU in bytes (or the agreed large segment) */
	uint32_t seg;			/* large segment agreed with a softrdma peer (0: none) */
	uint32_t peer_seg;		/* in-band offer seen in the peer's packets (BTH resv6) */
	bool peer_sr;			/* the peer's packets carry softrdma's mark (BTH resv6) */
	bool peer_heard;		/* ... both taken from a packet of this peer (recv.c
					 * hear_offer: a change needs two packets in a row) */
	uint8_t peer_odd;		/* 0x80 | the mark and units of the last packet that
					 * differed from them (0: none) */
	bool peer_fshort;		/* ... and SR_BTH_SR_FSHORT: a WRITE's FIRST may be short */
	bool peer_even;			/* ... and SR_BTH_SR_EVEN: a WRITE may be cut evenly */
	bool peer_even_mtu;		/* ... and SR_BTH_SR_EVENMTU: evenly at the path MTU too */
	bool peer_ride;			/* ... and its responses offer SR_BTH_SR_ACKRIDE: it takes an
					 * ACK riding in a request */
	uint64_t timeout_ns;		/* local ACK timeout (0: infinite) */
	struct sr_sq sq;
	struct sr_rq rq;
	struct sr_req req;
	struct sr_comp comp;
	struct sr_resp resp;
	uint64_t rexmit_at;		/* ns; 0 = not armed */
	bool on_timer_list;
	uint64_t timer_idle_since;	/* ns: on the list with nothing armed since (0: armed) */
	uint64_t timer_busy_since;	/* ns: the thread found its lock taken since (0: not) */
	bool sqd_notify;		/* raise SQ_DRAINED when the SQ drains in SQD */
	bool sq_draining;
	uint32_t async_events_delivered;
	/* ibv_wr_* batch (qp_ex): WQEs built since ibv_wr_start, posted at ibv_wr_complete */
	uint32_t wr_start_head;
	uint32_t wr_count;
	int wr_err;			/* positive errno */
	bool has_wr_api;		/* created with send_ops_flags: ibv_qp_to_qp_ex() works */
	/* XRC_RECV: its domain; srq/pd/rcq above name the XRC SRQ the current message uses
	 * (bound from the XRCETH, resp.c). xrc_opens: ibv_open_qp handles (the same object). */
	struct sr_xrcd *xrcd;
	_Atomic int xrc_opens;
};
static inline struct sr_qp *sr_qp(struct ibv_qp *q) { return (struct sr_qp *)q; }

/* Forgets what the QP heard from its peer (the in-band offer and the flags of its packets), for
 * a new peer (AV or DQPN) or a reset: each is heard anew from the next packet (recv.c). */
static inline void sr_qp_peer_forget(struct sr_qp *qp)
{
	qp->peer_seg = 0;
	qp->peer_sr = false;
	qp->peer_heard = false;
	qp->peer_odd = 0;
	qp->peer_fshort = false;
	qp->peer_even = false;
	qp->peer_even_mtu = false;
	qp->peer_ride = false;
}
static inline uint32_t sr_qpn(const struct sr_qp *qp) { return qp->qpx.qp_base.qp_num; }
/* A QP of this NIC is destroyed; was this QPN one destroyed in the last SR_GONE_MS? */
void sr_qp_gone_note(struct sr_nic *nic, uint32_t qpn);
bool sr_qp_gone_recently(struct sr_nic *nic, uint32_t qpn);
/* RC and both XRC halves: acknowledged, retransmitted, IBA 9.7. */
static inline bool sr_qp_reliable(const struct sr_qp *qp)
{
	return qp->type == IBV_QPT_RC || qp->type == IBV_QPT_XRC_SEND ||
	       qp->type == IBV_QPT_XRC_RECV;
}
/* XRC_RECV: drops its binding to an XRC SRQ (qp lock held). */
void sr_xrc_unbind(struct sr_qp *qp);

static inline void sr_qp_ref(struct sr_qp *qp) { atomic_fetch_add(&qp->refs, 1); }
void sr_qp_put(struct sr_qp *qp);
/* Referenced QP by number, or NULL. */
struct sr_qp *sr_qp_lookup(struct sr_nic *nic, uint32_t qpn);
/* The same without the table lock or a reference, for the receive path: the QP stays until
 * sr_qp_leave (sr_table_enter; ibv_destroy_qp drains). NULL for QPN 1 too: look that up. */
struct sr_qp *sr_qp_enter(struct sr_nic *nic, uint32_t qpn);
void sr_qp_leave(struct sr_qp *qp);

/* State changes the engine makes on its own (errors); qp lock held. */
void sr_qp_to_error(struct sr_qp *qp);
void sr_qp_to_sqe(struct sr_qp *qp);
/* Flushes what must be flushed in ERR (and SQE for the SQ); qp lock held. */
void sr_qp_flush(struct sr_qp *qp);

/* Completes the oldest SQ WQE with status (comp.c); qp lock held. */
void sr_comp_wqe(struct sr_qp *qp, struct sr_swqe *wqe, enum ibv_wc_status status);

/* While the application polls (it sends due ACKs itself), the progress thread looks for
 * deferred ACKs every this many ack_defer_us (nic_thread); and it keeps looking this long after
 * the last deferral. */
#define SR_ACK_LOOK_POLLING 4
#define SR_ACK_LOOK_KEEP_NS 10000000ull
/* How long after its due the thread may look for a deferred ACK while the application polls:
 * SR_ACK_LOOK_POLLING times ack_defer_us, or the grown watch's interval when longer (the
 * application sends what is due itself; nic->watch_slack_ns, written by the thread alone). */
static inline uint64_t sr_ack_look_ns(struct sr_nic *nic, uint64_t defer_ns)
{
	uint64_t slack = atomic_load_explicit(&nic->watch_slack_ns, memory_order_relaxed);
	uint64_t look = SR_ACK_LOOK_POLLING * defer_ns;

	return slack > look ? slack : look;
}
/* ---- same-host direct path: the exported table (core/direct.c, docs/direct.md) ----------- */
struct sr_direct;
/* Exports this NIC's key and QP table (after sr_net_open: faults and pcap turn it off). */
void sr_direct_open(struct sr_nic *nic);
void sr_direct_close(struct sr_nic *nic);
/* Key entries: publish and withdraw under nic->keys.lock; then, unlocked, wait until no peer
 * copies through the withdrawn key any more. */
void sr_direct_mr_publish(struct sr_mr *mr);
void sr_direct_mr_withdraw(struct sr_mr *mr);
void sr_direct_mr_wait(struct sr_mr *mr);
/* A memory window's entry after a bind, unbind, invalidation or dealloc (nic->keys.lock held):
 * old_key (nonzero: the window had a live key) is cleared and its peers' copies drained first,
 * then the window's current binding is published. */
void sr_direct_mw_update(struct sr_mw *mw, uint32_t old_key);
/* The QP's entry, from its current state and attributes (qp lock held). */
void sr_direct_qp_publish(struct sr_qp *qp);
void sr_direct_qp_withdraw(struct sr_qp *qp);	/* before its index is freed */
/* ---- what core tells the engine (docs/architecture.md, "Layers") ------------------------- */
/*
 * core calls nothing above it. Where a change to an object must reach the transport at once,
 * under the lock the change holds (a QP moved to RTS sends what its SQ holds), core calls
 * through this one table, which the engine (src/engine/nic.c) installs in every NIC it
 * creates; the receive loop of src/net hands packets on through it too. Wake-ups need no
 * hook: sr_nic_kick rings the NIC's doorbell.
 */
struct sr_pkt;
struct sr_engine_hooks {
	/* src/net: a packet that passed the receive loop's checks, from this NIC's socket ... */
	void (*rcv)(struct sr_nic *nic, struct sr_pkt *pkt, const struct sr_addr *src);
	/* ... or for QPN 0xffffff from multicast group socket fd. */
	void (*mcast_rcv)(struct sr_nic *nic, int fd, struct sr_pkt *pkt, const struct sr_addr *src);
	/* core/qp.c, qp lock held: moved to RTS (send what the SQ holds); */
	void (*qp_rts)(struct sr_qp *qp);
	/* leaving for ERR or RESET: an ACK the responder still holds leaves now; */
	void (*qp_ack_now)(struct sr_qp *qp);
	/* moved to RESET, or destroyed (no lock then): drop the transport's state; */
	void (*qp_reset)(struct sr_qp *qp);
	/* being destroyed: repeat the last ACK where the path lost packets; */
	void (*qp_final_ack)(struct sr_qp *qp);
	/* destroyed (no lock): leave the responder's ACK list, whose reference it still holds. */
	void (*qp_leave_acks)(struct sr_qp *qp);
	/* core/qp.c, no lock: destroyed: leave every multicast group (as uverbs does). */
	void (*qp_detach_mcast)(struct sr_qp *qp);
	/* core/cq.c: a completion channel's consumer takes what waits on the socket itself
	 * (receive lock taken, or tried when !wait); returns the datagrams taken. */
	int (*chan_rx)(struct sr_nic *nic, bool wait);
};

/* Path MTU enum <-> bytes. */
static inline uint32_t sr_mtu_bytes(enum ibv_mtu m) { return 128u << m; }

#endif /* SR_CORE_CORE_H */
