/* SPDX-License-Identifier: MIT */
/*
 * librdmacm for softrdma: internal definitions (docs/cm.md).
 *
 * The connection manager runs in the application's process on top of the public verbs API
 * only (it never reaches into the engine). Its messages travel over UDP between the CM
 * sockets of the two processes: the passive side's socket is bound to the address the
 * application listens on (rdma_bind_addr + rdma_listen), the active side sends from one
 * process-wide socket. Everything about the messages themselves is in proto.c/proto.h, behind
 * one boundary, so that a later step can speak the IB CM MADs (REQ/REP/RTU/DREQ/DREP/REJ on
 * QP1) instead.
 *
 * One process-wide lock (cm.lock) guards every CM object: the CM is not on any data path.
 */
#ifndef SR_CM_CM_H
#define SR_CM_CM_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "cm/ibcm/ibcm.h"
#include "cm/proto.h"

#define CM_EXPORT __attribute__((visibility("default")))

/* ---- devices ------------------------------------------------------------------------------ */
struct cm_dev {
	struct ibv_context *ctx;	/* opened once per process, shared by every id (as rdma-core) */
	struct sockaddr_storage ip;	/* the device's IP address (from its GID), port 0 */
	union ibv_gid gid;		/* the GID naming its UDP port: its table's last */
	uint8_t gid_index;		/* gid's index: the sgid_index of the CM's address vectors */
	enum ibv_mtu mtu;
	uint32_t seg;			/* large segment the NIC offers a softrdma peer (0: none) */
	bool loopback;			/* its address is in 127.0.0.0/8 or ::1 */
	struct ibv_pd *pd;		/* default PD for rdma_create_qp(id, NULL, ...) */
	struct ibv_xrcd *xrcd;		/* the device's XRC domain for XRC ids (as rdma-core: one
					 * per device, private, opened on first use) */
	struct ibcm_agent *agent;	/* its QP1, when the IB CM is on the wire (ibcm/drive.c) */
};

int cm_devices_init(void);
/* The device serving local address `a` (0.0.0.0 / :: : the first device), or NULL. */
struct cm_dev *cm_dev_for_local(const struct sockaddr *a);
/* The device to reach `dst`, and the local source address to use, or -errno. */
int cm_dev_for_dst(const struct sockaddr *dst, struct cm_dev **dev, struct sockaddr_storage *src);
struct cm_dev *cm_dev_by_ctx(struct ibv_context *ctx);
/* The device's default PD (allocated on first use, kept for the process): an id's `pd` once
 * the id has a device, as librdmacm sets it when it binds the id to a device. */
struct ibv_pd *cm_dev_pd(struct cm_dev *d);
bool cm_gid_matches(const union ibv_gid *gid, const struct sockaddr *from);
/* Is a (port aside) a loopback address or one of this host's (network namespace's)? */
bool cm_addr_on_host(const struct sockaddr *a);
extern struct cm_dev *cm_devs;
extern int cm_ndevs;

/* ---- event channels ------------------------------------------------------------------------ */
struct cm_event {
	struct rdma_cm_event ev;		/* first: the application sees this */
	struct cm_event *next;
	uint8_t pdata[CM_PDATA_MAX];		/* the private data ev.param points into */
};

struct cm_channel {
	struct rdma_event_channel ch;		/* fd: an eventfd in semaphore mode */
	struct cm_event *head, *tail;		/* queued, not yet delivered */
	bool sync;				/* private channel of a synchronous id */
	bool destroyed;				/* rdma_destroy_event_channel was called */
	struct cm_channel *grave_next;		/* kept after destruction (see api.c) */
};

void cm_chan_push(struct cm_channel *ch, struct cm_event *e);	/* cm.lock held */
void cm_chan_clear(struct cm_channel *ch);			/* queue just became empty */

/* ---- ids ----------------------------------------------------------------------------------- */
enum cm_state {
	CM_IDLE,
	CM_BOUND,
	CM_ADDR_RESOLVED,
	CM_ROUTE_RESOLVED,
	CM_LISTEN,
	CM_REQ_SENT,		/* active: REQ (or SIDR REQ) out, waiting for REP/REJ */
	CM_REP_RCVD,		/* active, no QP on the id: CONNECT_RESPONSE given, rdma_establish next */
	CM_REQ_RCVD,		/* passive child: CONNECT_REQUEST given, accept/reject next */
	CM_REP_SENT,		/* passive: accepted, waiting for RTU */
	CM_ESTABLISHED,
	CM_DREQ_SENT,
	CM_DISCONNECTED,
	CM_DESTROYING,
};

struct cm_sock;

struct cm_id {
	struct rdma_cm_id id;			/* first: the application sees this */
	struct cm_channel *chan;
	bool own_chan;				/* chan is this id's private (synchronous) channel */
	enum cm_state state;
	struct cm_dev *dev;
	struct cm_id *listener;			/* passive child: the listening id */
	struct cm_sock *lsock;			/* listening id: its socket */
	int backlog, pending;			/* listening: requests not yet accepted/rejected */
	uint32_t local_id, remote_id;		/* communication ids (ours, the peer's) */
	struct sockaddr_storage peer_cm;	/* where the peer's CM messages go */
	struct cm_sock *sock;			/* the socket we send from */
	bool sock_ref;				/* we hold a reference on it (passive child) */
	/* negotiated connection data */
	union ibv_gid peer_gid;
	uint32_t peer_qpn, peer_psn, my_psn, my_qpn;
	bool my_psn_set;	/* my_psn chosen (cm_my_psn) */
	enum ibv_mtu path_mtu;
	uint32_t seg;				/* large segment: offered (REQ), agreed (REP); 0: none */
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count;
	uint8_t flow_control, srq;
	uint32_t qkey;				/* UD */
	/* retransmission of our last request (REQ, REP, DREQ, SIDR REQ) */
	uint8_t txbuf[CM_MSG_MAX];
	size_t txlen;
	int tries;
	uint64_t next_tx;
	/* liveness (established) */
	uint64_t last_heard, next_probe;
	/* options */
	uint8_t tos, ack_timeout;
	bool reuseaddr, afonly, tos_set;
	/* events handed to the application and not acked yet */
	int events_out;
	pthread_cond_t cond;
	/* ECE */
	uint32_t ece_vendor, ece_options;
	/* rdma_create_ep on a passive id: QPs for the requests rdma_get_request returns */
	struct ibv_qp_init_attr *ep_qp_attr;
	struct ibv_pd *ep_pd;
	/* CQs (and their channels) the library made, by who owns them: the QP (rdma_create_qp)
	 * or the XRC SRQ (rdma_create_srq on an XRC id) */
	uint8_t own_cqs;
#define CM_OWN_QP_SCQ 1
#define CM_OWN_QP_RCQ 2
#define CM_OWN_SRQ_CQ 4
	/* The IB CM on the wire (SOFTRDMA_CM_WIRE=ibcm, ibcm/drive.c): the connection's IB CM
	 * state machine and the address vector to the peer's QP1. remote_id and peer_cm stay
	 * the private protocol's (0 / unused) on such an id. */
	bool ibcm;
	struct ibcm_conn ib;
	struct ibv_ah *ib_ah;
	/* A destination on this host: before the REQ (SIDR_REQ), a QP1 QUERY to the port's
	 * listener finds its process's QP1 (cm_ibcm_resolved); rdma_connect's private data and
	 * SRQ flag wait here for it. */
	bool ib_resolving, ib_srq;
	/* Liveness of a softrdma peer's process (drive.c, "probe"): its MADs carry softrdma's
	 * GRH marker; Get(ClassPortInfo) to its QP1 at once and every second once established,
	 * answered at once; 5 s without an answer end the connection. */
	bool peer_sr;
	uint64_t ib_heard_ms, ib_probe_ms;
	/* Port and CM redirects followed since rdma_connect (REJ reason 24, SIDR_REP status 4:
	 * drive.c, "redirect"), and the GIDs the REQ went to, to refuse a loop. */
	uint8_t ib_redirects;
#define CM_IBCM_MAX_REDIRECTS 3
	union ibv_gid ib_visited[CM_IBCM_MAX_REDIRECTS + 1];
	uint8_t ib_pdata_len;
	uint8_t ib_pdata[CM_PDATA_MAX];
	unsigned guard_slot;			/* 1 + its slot in the guardian's table (guard.c) */
	struct cm_id *next;			/* every id of the process */
};

static inline struct cm_id *cm_id(struct rdma_cm_id *id)
{
	return (struct cm_id *)id;
}

/* ---- the CM machinery (cm.c) ------------------------------------------------------------------ */
struct cm_global {
	pthread_mutex_t lock;
	bool started;
	pthread_t thread;
	int epfd, evfd;
	struct cm_sock *socks;			/* listeners and the shared active sockets */
	struct cm_id *ids;
	uint32_t next_local_id;
	uint16_t next_port;
	/* Time-wait: connections a listener's side has ended (rejected or destroyed). A REQ that
	 * repeats one of them (a retransmission or a replay arriving late) is answered with a
	 * stale-connection REJ instead of becoming a second CONNECT_REQUEST. A ring: the oldest
	 * entry is reused first. */
	struct cm_timewait {
		struct sockaddr_storage peer;
		uint32_t remote_id;
		uint64_t until_ms;
	} tw[64];
	unsigned tw_next;
	/* What the CM thread and the private protocol (cm.c) have the IB CM do: ibcm/drive.c
	 * installs it when the library is loaded, so that cm.c calls nothing of the drive by
	 * name (docs/architecture.md, "Layers"). */
	const struct cm_ibcm_hooks *ibcm;
};

struct cm_sock;
struct cm_ibcm_hooks {
	/* A device's QP1 completion event (true when `ptr` was one; drained). */
	bool (*event)(void *ptr);
	/* The IB CM's retransmission and time-wait timers; ms to the next. */
	uint64_t (*timers)(void);
	/* A QP1 QUERY (cm_ibcm_query_dev below) and the REPLY to an id's own (cm_ibcm_resolved). */
	struct cm_dev *(*query_dev)(const struct cm_sock *s, const struct sockaddr *to,
				    uint16_t ps, uint16_t port);
	void (*resolved)(struct cm_id *id, const union ibv_gid *gid);
	/* A QP1 REPLY that names no id (true when it answered a QUERY of the redirect: a REQ
	 * for a port another process of this host listens on), and an ICMP error for a
	 * datagram sent to dst (the redirect's QUERY found nobody there). */
	bool (*redirect_reply)(const struct sockaddr *from, const struct cm_msg *m);
	void (*redirect_unreachable)(const struct sockaddr *dst);
};
extern struct cm_global cm;

#define CM_TIMEWAIT_MS 10000
/* Remembers a passive-side connection that ended (cm.lock held). */
void cm_timewait_add(const struct sockaddr *peer, uint32_t remote_id);

int cm_start(void);			/* starts the thread (cm.lock held) */
/* One datagram, from `from`, as if the CM thread had received it on the CM socket of id `via`
 * (a listening id's, else the one it sends from): exactly what the thread does with each
 * datagram it reads (decode, then the state machines), without the socket. For the fuzz
 * harness (fuzz/fuzz_cm_state.c); takes cm.lock. 0, or -ENOTCONN when the id has no socket. */
int cm_rx_datagram(struct rdma_cm_id *via, const struct sockaddr *from, const uint8_t *buf,
		   size_t len);
/* Counts a CM event in softrdma's counters (softrdma stat), when running on softrdma. */
void cm_count(const char *counter);
void cm_kick(void);
uint64_t cm_now_ms(void);
void cm_post_event(struct cm_id *id, enum rdma_cm_event_type type, int status,
		   const struct cm_msg *m);
void cm_post_ud_event(struct cm_id *id, enum rdma_cm_event_type type, int status,
		      const struct rdma_ud_param *ud);
bool cm_is_mcast(const struct sockaddr *a);
/* Sends m from id's socket to the peer (cm.lock held); remembers it for retransmission when
 * `retrans` is set. */
int cm_send(struct cm_id *id, const struct cm_msg *m, bool retrans);
/* Sends m to `to` from the process-wide active socket of its family (no id behind it). */
int cm_send_to(const struct sockaddr *to, const struct cm_msg *m);
struct cm_sock *cm_listen_sock(const struct sockaddr *a, bool reuse, int *err);
void cm_sock_put(struct cm_sock *s);
void cm_sock_get(struct cm_sock *s);
/* Its listening id is being destroyed (a REQ soon after is left for the next listener). */
void cm_sock_unlisten(struct cm_sock *s);
struct cm_sock *cm_active_sock(int family);
uint16_t cm_sock_port(const struct cm_sock *s);	/* network order */
struct cm_id *cm_id_alloc(struct cm_channel *ch, void *context, enum rdma_port_space ps,
			  enum ibv_qp_type qpt);
uint32_t cm_new_local_id(void);
/* Gives the id its route's one path record (allocated once, freed with the id): sgid the
 * device's GID, dgid the peer's GID when given, else its IP as a GID, and the path MTU; as
 * rdma_resolve_route on an active side, and on a passive connected (not UD) side at the
 * connection request (the REQ's GID, the negotiated MTU), as the kernel's rdma_cm. */
void cm_fill_path(struct cm_id *id, const union ibv_gid *dgid, enum ibv_mtu mtu);
uint32_t cm_my_psn(struct cm_id *id);	/* the starting send PSN, chosen once (id.c) */
uint32_t cm_rand32(void);		/* getrandom, or a clock-based value without it (id.c) */
/* An address's port, network order (rdma_get_src_port/rdma_get_dst_port without the call). */
static inline uint16_t cm_sa_port(const struct sockaddr *a)
{
	return a->sa_family == AF_INET ? ((const struct sockaddr_in *)a)->sin_port
				       : ((const struct sockaddr_in6 *)a)->sin6_port;
}

/* A REQ for this listening port is left unanswered for now (its listener was just replaced,
 * or it is bound and not listening yet: see on_req in cm.c). cm.lock held. */
bool cm_port_held(uint16_t port_be, uint16_t ps);

/* ---- the IB CM on the wire (ibcm/drive.c) -------------------------------------------------
 * With cm_wire=ibcm (the default), RC, UC and XRC connections (REQ..RTU) and the UD ids of
 * RDMA_PS_UDP (SIDR_REQ/SIDR_REP) are set up with CM MADs on QP1 (the kernel's rdma_cm's
 * protocol) instead of the private UDP protocol. A listener takes both. Every call with
 * cm.lock held. */
bool cm_ibcm_on(void);				/* the parameter says ibcm (not private) */
bool cm_ibcm_for(const struct cm_id *id);	/* on, and id is a connected (non-UD) one */
int cm_ibcm_open(void);				/* QP1 on every device (once) */
/* The IB CM's retransmission and time-wait timers, cm.lock held; ms to the next. The CM thread
 * runs it as cm.ibcm->timers; fuzz/fuzz_ibcm_state.c calls it directly. */
uint64_t cm_ibcm_timers(void);
struct ibcm_rx;
/* One CM MAD received on d's QP1 (decoded, with its sender's GID and an AH to answer it):
 * cm_ibcm_event's per-MAD path into the state machines, cm.lock held. A new connection takes
 * rx->ah (sets it NULL); the caller destroys what is left. fuzz/fuzz_ibcm_state.c calls it. */
void cm_ibcm_rx(struct cm_dev *d, struct ibcm_rx *rx);
/* Added to the IB CM's clock (ns): 0, except in fuzz/fuzz_ibcm_state.c, which moves time
 * forward to drive the retransmission and time-wait timers (only ever forward). */
extern uint64_t cm_ibcm_clock_skew_ns;
int cm_ibcm_connect(struct cm_id *id, struct rdma_conn_param *p);
int cm_ibcm_accept(struct cm_id *id, struct rdma_conn_param *p);
int cm_ibcm_accept_ud(struct cm_id *id, struct rdma_conn_param *p);	/* SIDR_REP */
int cm_ibcm_reject(struct cm_id *id, const void *pdata, uint8_t len, uint16_t reason);
int cm_ibcm_establish(struct cm_id *id);
int cm_ibcm_disconnect(struct cm_id *id);
void cm_ibcm_destroy(struct cm_id *id);		/* rdma_destroy_id: tell the peer, free the AV */
/* The QP1 REPLY to an id's QUERY: gid is the listener's QP1; sends the REQ (SIDR_REQ). */
void cm_ibcm_resolved(struct cm_id *id, const union ibv_gid *gid);
/* A QP1 QUERY on listening socket s, for port space ps and port (host order), received at
 * address `to`: the device whose QP1 takes that listener's REQs, or NULL (not speaking the IB
 * CM, or no such listener). cm.lock held. */
struct cm_dev *cm_ibcm_query_dev(const struct cm_sock *s, const struct sockaddr *to, uint16_t ps,
				 uint16_t port);
/* A listening socket of this process takes rdma_cm port `port_be` at address dst. */
bool cm_local_listener(const struct sockaddr *dst, uint16_t port_be);

/* The guardian (guard.c, guard.h): the DREQs of the IB CM connections that are up, sent by
 * another process when this one ends however it ends. cm_guard_sync follows cm.ids (the CM
 * thread, through cm_ibcm_timers); cm_guard_drop forgets an id (rdma_destroy_id). */
void cm_guard_sync(void);
void cm_guard_drop(struct cm_id *id);

/* QP automation (qp.c). */
int cm_qp_to_init(struct cm_id *id, struct ibv_qp *qp);
int cm_qp_to_rtr_rts(struct cm_id *id, bool rts);
void cm_qp_to_err(struct cm_id *id);
int cm_fill_qp_attr(struct cm_id *id, struct ibv_qp_attr *a, int *mask);
/* The QP type the connection is for: the id's QP's, else the id's (XRC_SEND/XRC_RECV ids come
 * from rdma_create_ep, or from an XRC REQ on the passive side). */
static inline enum ibv_qp_type cm_qpt(const struct cm_id *id)
{
	return id->id.qp ? id->id.qp->qp_type : id->id.qp_type;
}

/* rdma_connect's parameters as the id keeps them: responder resources and initiator depth
 * clamped to 128, retry and RNR retry counts to 7 (3-bit fields in the CM messages). Both
 * wires use it, the private protocol (api.c) and the IB CM (ibcm/drive.c). */
static inline void cm_take_conn_param(struct cm_id *id, const struct rdma_conn_param *p)
{
	id->responder_resources = p->responder_resources > 128 ? 128 : p->responder_resources;
	id->initiator_depth = p->initiator_depth > 128 ? 128 : p->initiator_depth;
	id->retry_count = p->retry_count > 7 ? 7 : p->retry_count;
	id->rnr_retry_count = p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count;
	id->flow_control = p->flow_control;
}

#endif /* SR_CM_CM_H */
