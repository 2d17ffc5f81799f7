/* SPDX-License-Identifier: MIT */
/*
 * The IB CM's connection state machine (IBA vol 1, 12.9), one connection at a time, pure: no
 * I/O, no clock, no locks. The caller feeds it what it sends and receives (decoded CM MADs,
 * src/wire/mad.h) and the time; it answers with what to put on the wire (a new MAD, or a
 * retransmission of the last one) and what to tell the consumer. The states and transitions
 * are the IBA's (12.9, the active and passive sides' figures), in the kernel's names:
 *
 *   active:  IDLE -REQ-> REQ_SENT [-MRA-> MRA_REQ_RCVD] -REP-> REP_RCVD [send MRA: MRA_REP_SENT]
 *            -RTU-> ESTABLISHED
 *   passive: IDLE -REQ-> REQ_RCVD [send MRA: MRA_REQ_SENT] -REP-> REP_SENT [-MRA-> MRA_REP_RCVD]
 *            -RTU-> ESTABLISHED
 *   both:    ESTABLISHED -DREQ-> DREQ_SENT -DREP-> TIMEWAIT -timer-> IDLE
 *            ESTABLISHED <-DREQ- DREQ_RCVD -DREP-> TIMEWAIT
 *
 * librdmacm drives it with SOFTRDMA_CM_WIRE=ibcm (drive.c, docs/cm.md).
 */
#ifndef SR_CM_IBCM_H
#define SR_CM_IBCM_H

#include <stdbool.h>
#include <stdint.h>

#include "wire/mad.h"

enum ibcm_state {
	IBCM_IDLE,
	IBCM_REQ_SENT,
	IBCM_REQ_RCVD,
	IBCM_MRA_REQ_SENT,
	IBCM_MRA_REQ_RCVD,
	IBCM_REP_SENT,
	IBCM_REP_RCVD,
	IBCM_MRA_REP_SENT,
	IBCM_MRA_REP_RCVD,
	IBCM_ESTABLISHED,
	IBCM_DREQ_SENT,
	IBCM_DREQ_RCVD,
	IBCM_TIMEWAIT,
};

/* What the consumer (rdma_cm) is told. */
enum ibcm_event {
	IBCM_EV_NONE,
	IBCM_EV_REQ,		/* passive: a connection request (RDMA_CM_EVENT_CONNECT_REQUEST) */
	IBCM_EV_REP,		/* active: the reply (CONNECT_RESPONSE / ESTABLISHED after RTU) */
	IBCM_EV_ESTABLISHED,	/* passive: the RTU came (RDMA_CM_EVENT_ESTABLISHED) */
	IBCM_EV_REJ,		/* rejected by the peer: out->reason, private data in out->mad */
	IBCM_EV_TIMEOUT,	/* REQ or REP unanswered after every retry (UNREACHABLE) */
	IBCM_EV_DREQ,		/* the peer disconnects (DISCONNECTED); answer with ibcm_send_drep */
	IBCM_EV_DISCONNECTED,	/* our DREQ answered, crossed, or unanswered (DISCONNECTED) */
	IBCM_EV_TIMEWAIT_EXIT,	/* the connection's IDs and QP may be reused */
};

struct ibcm_out {
	bool send;		/* put `mad` on the wire (new, or a retransmission) */
	struct sr_cm_mad mad;	/* what to send; for IBCM_EV_REJ, the REJ received */
	enum ibcm_event event;
	uint16_t reason;	/* IBCM_EV_REJ: the peer's reason; IBCM_EV_TIMEOUT: SR_CM_REJ_TIMEOUT */
	bool dropped;		/* the MAD was ignored (wrong state, IDs, or a stale duplicate) */
};

struct ibcm_conn {
	enum ibcm_state state;
	uint32_t local_id, remote_id;	/* communication IDs (remote: 0 until learned) */
	uint64_t tid;			/* the REQ's transaction ID, used for the whole exchange */
	uint32_t remote_qpn;		/* from the REQ or REP: a DREQ names it (12.6.10) */
	/* Timing, in ns. pkt_life: one way across the fabric; the caller sets it (and timewait)
	 * before the first call; defaults apply when 0. */
	uint64_t pkt_life_ns, timewait_ns;
	uint8_t max_retries;		/* the REQ's Max CM Retries */
	uint8_t retries;		/* left for the message awaiting its answer */
	uint8_t peer_resp_timeout;	/* the peer's CM response timeout (5-bit exponent) */
	uint64_t wait_ns;		/* how long to wait for the answer to `last` */
	uint64_t deadline;		/* 0: no timer */
	struct sr_cm_mad last;		/* the last MAD sent: retransmitted, or repeated to a
					 * duplicate of what it answered */
	bool have_last;
};

/* 4.096 us * 2^t (the CM's timeout encoding, IBA 12.6.5 table 106: CM response timeouts). */
uint64_t ibcm_timeout_ns(uint8_t t);
const char *ibcm_state_name(enum ibcm_state s);

void ibcm_init(struct ibcm_conn *c, uint32_t local_id);
/*
 * What the consumer sends. Each returns 0 and fills *out (the MAD to send, with the IDs and
 * TID filled in from the connection), or -EINVAL when the state does not allow it (then
 * nothing changes).
 */
int ibcm_send_req(struct ibcm_conn *c, const struct sr_cm_req *req, uint64_t tid, uint64_t now,
		  struct ibcm_out *out);
int ibcm_send_rep(struct ibcm_conn *c, const struct sr_cm_rep *rep, uint64_t now,
		  struct ibcm_out *out);
int ibcm_send_rtu(struct ibcm_conn *c, const uint8_t *pdata, uint64_t now, struct ibcm_out *out);
int ibcm_send_mra(struct ibcm_conn *c, uint8_t service_timeout, uint64_t now,
		  struct ibcm_out *out);
int ibcm_send_rej(struct ibcm_conn *c, uint16_t reason, const uint8_t *pdata, size_t len,
		  uint64_t now, struct ibcm_out *out);
int ibcm_send_dreq(struct ibcm_conn *c, const uint8_t *pdata, uint64_t now, struct ibcm_out *out);
int ibcm_send_drep(struct ibcm_conn *c, const uint8_t *pdata, uint64_t now, struct ibcm_out *out);
/* A received CM MAD for this connection (the caller found it by the remote comm ID of the
 * MAD, or created the connection for a new REQ). Always 0; out->dropped when ignored. */
int ibcm_recv(struct ibcm_conn *c, const struct sr_cm_mad *m, uint64_t now, struct ibcm_out *out);
/* The timer: call when now >= c->deadline (a no-op before). */
void ibcm_timer(struct ibcm_conn *c, uint64_t now, struct ibcm_out *out);

#endif /* SR_CM_IBCM_H */
