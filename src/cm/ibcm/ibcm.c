/* SPDX-License-Identifier: MIT */
/*
 * The IB CM connection state machine (layout of the states in ibcm.h). Each rule names the
 * IBA clause it follows: 12.9 is the CM state machine; 12.6.5-12.6.11 the messages (REQ, MRA,
 * REJ, REP, RTU, DREQ, DREP) whose fields say how long to wait and how often to retry.
 */
#include <errno.h>
#include <string.h>

#include "cm/ibcm/ibcm.h"

#define DEFAULT_PKT_LIFE_NS 4096ull * (1u << 12)	/* about 16.8 ms: loopback to a LAN */
#define DEFAULT_TIMEWAIT_NS 1000000000ull

uint64_t ibcm_timeout_ns(uint8_t t)
{
	/* 12.6.5 (REQ, CM response timeouts) and 12.6.6 (MRA service timeout): 4.096 us * 2^t,
	 * a 5-bit exponent */
	return 4096ull << (t & 0x1f);
}

const char *ibcm_state_name(enum ibcm_state s)
{
	static const char *const n[] = {
		"IDLE", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT", "MRA_REQ_RCVD", "REP_SENT",
		"REP_RCVD", "MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED", "DREQ_SENT",
		"DREQ_RCVD", "TIMEWAIT",
	};

	return (unsigned)s < sizeof(n) / sizeof(n[0]) ? n[s] : "?";
}

void ibcm_init(struct ibcm_conn *c, uint32_t local_id)
{
	memset(c, 0, sizeof(*c));
	c->state = IBCM_IDLE;
	c->local_id = local_id;
}

static uint64_t pkt_life(const struct ibcm_conn *c)
{
	return c->pkt_life_ns ? c->pkt_life_ns : DEFAULT_PKT_LIFE_NS;
}

static void out_clear(struct ibcm_out *out)
{
	memset(out, 0, sizeof(*out));
}

static void hdr_fill(struct ibcm_conn *c, struct sr_cm_mad *m, uint16_t attr)
{
	m->hdr = (struct sr_mad_hdr){
		.base_version = SR_MAD_BASE_VERSION, .mgmt_class = SR_MAD_CLASS_CM,
		.class_version = SR_MAD_CM_CLASS_VERSION, .method = SR_MAD_METHOD_SEND,
		.tid = c->tid, .attr_id = attr,
	};
}

/* Sends m, remembered as the last MAD; with wait_ns, arms the retransmission timer. */
static void emit(struct ibcm_conn *c, const struct sr_cm_mad *m, uint64_t wait_ns, uint64_t now,
		 struct ibcm_out *out)
{
	c->last = *m;
	c->have_last = true;
	c->wait_ns = wait_ns;
	c->deadline = wait_ns ? now + wait_ns : 0;
	out->send = true;
	out->mad = *m;
}

static void resend_last(struct ibcm_conn *c, struct ibcm_out *out)
{
	if (c->have_last) {
		out->send = true;
		out->mad = c->last;
	}
}

static void enter_timewait(struct ibcm_conn *c, uint64_t now)
{
	c->state = IBCM_TIMEWAIT;
	c->deadline = now + (c->timewait_ns ? c->timewait_ns : DEFAULT_TIMEWAIT_NS);
}

int ibcm_send_req(struct ibcm_conn *c, const struct sr_cm_req *req, uint64_t tid, uint64_t now,
		  struct ibcm_out *out)
{
	struct sr_cm_mad m;

	out_clear(out);
	if (c->state != IBCM_IDLE)
		return -EINVAL;
	memset(&m, 0, sizeof(m));
	c->tid = tid;
	hdr_fill(c, &m, SR_CM_ATTR_REQ);
	m.req = *req;
	m.req.local_comm_id = c->local_id;
	c->max_retries = req->max_cm_retries;
	c->retries = req->max_cm_retries;
	/* 12.6.5: the passive side answers within its Remote CM Response Timeout; the REQ and
	 * its answer each cross the fabric once */
	c->state = IBCM_REQ_SENT;
	emit(c, &m, ibcm_timeout_ns(req->remote_cm_response_timeout) + 2 * pkt_life(c), now, out);
	return 0;
}

int ibcm_send_rep(struct ibcm_conn *c, const struct sr_cm_rep *rep, uint64_t now,
		  struct ibcm_out *out)
{
	struct sr_cm_mad m;

	out_clear(out);
	/* 12.9: a REP answers a REQ received (REQ_RCVD), or one we sent an MRA for */
	if (c->state != IBCM_REQ_RCVD && c->state != IBCM_MRA_REQ_SENT)
		return -EINVAL;
	memset(&m, 0, sizeof(m));
	hdr_fill(c, &m, SR_CM_ATTR_REP);
	m.rep = *rep;
	m.rep.local_comm_id = c->local_id;
	m.rep.remote_comm_id = c->remote_id;
	c->retries = c->max_retries;
	c->state = IBCM_REP_SENT;
	/* 12.6.5: the active side answers a REP within its Local CM Response Timeout (the REQ's) */
	emit(c, &m, ibcm_timeout_ns(c->peer_resp_timeout) + 2 * pkt_life(c), now, out);
	return 0;
}

int ibcm_send_rtu(struct ibcm_conn *c, const uint8_t *pdata, uint64_t now, struct ibcm_out *out)
{
	struct sr_cm_mad m;

	out_clear(out);
	if (c->state != IBCM_REP_RCVD && c->state != IBCM_MRA_REP_SENT)
		return -EINVAL;
	memset(&m, 0, sizeof(m));
	hdr_fill(c, &m, SR_CM_ATTR_RTU);
	m.rtu.local_comm_id = c->local_id;
	m.rtu.remote_comm_id = c->remote_id;
	if (pdata)
		memcpy(m.rtu.pdata, pdata, sizeof(m.rtu.pdata));
	/* 12.9: the RTU is not answered; a duplicate REP (our RTU lost) gets it again */
	c->state = IBCM_ESTABLISHED;
	emit(c, &m, 0, now, out);
	return 0;
}

int ibcm_send_mra(struct ibcm_conn *c, uint8_t service_timeout, uint64_t now,
		  struct ibcm_out *out)
{
	struct sr_cm_mad m;

	out_clear(out);
	memset(&m, 0, sizeof(m));
	hdr_fill(c, &m, SR_CM_ATTR_MRA);
	m.mra.local_comm_id = c->local_id;
	m.mra.remote_comm_id = c->remote_id;
	m.mra.service_timeout = service_timeout & 0x1f;
	/* 12.6.6, 12.9: an MRA acknowledges a REQ (REQ_RCVD) or a REP (REP_RCVD) that will take
	 * longer than the sender's timeout to answer */
	if (c->state == IBCM_REQ_RCVD) {
		m.mra.msg_mraed = SR_CM_MSG_REQ;
		c->state = IBCM_MRA_REQ_SENT;
	} else if (c->state == IBCM_REP_RCVD) {
		m.mra.msg_mraed = SR_CM_MSG_REP;
		c->state = IBCM_MRA_REP_SENT;
	} else {
		return -EINVAL;
	}
	emit(c, &m, 0, now, out);
	return 0;
}

int ibcm_send_rej(struct ibcm_conn *c, uint16_t reason, const uint8_t *pdata, size_t len,
		  uint64_t now, struct ibcm_out *out)
{
	struct sr_cm_mad m;
	bool after_rep;

	out_clear(out);
	if (len > SR_CM_REJ_PDATA)
		return -EINVAL;
	memset(&m, 0, sizeof(m));
	hdr_fill(c, &m, SR_CM_ATTR_REJ);
	m.rej.local_comm_id = c->local_id;
	m.rej.remote_comm_id = c->remote_id;
	m.rej.reason = reason;
	if (len)
		memcpy(m.rej.pdata, pdata, len);
	switch (c->state) {
	case IBCM_REQ_RCVD:
	case IBCM_MRA_REQ_SENT:
		m.rej.msg_rejected = SR_CM_MSG_REQ;
		after_rep = false;
		break;
	case IBCM_REP_RCVD:
	case IBCM_MRA_REP_SENT:
		m.rej.msg_rejected = SR_CM_MSG_REP;
		after_rep = true;
		break;
	default:
		return -EINVAL;
	}
	emit(c, &m, 0, now, out);
	/* 12.9: rejecting a REQ leaves no connection (IDLE); rejecting a REP, the peer's QP was
	 * set up: the IDs wait out TIMEWAIT before reuse */
	if (after_rep)
		enter_timewait(c, now);
	else
		c->state = IBCM_IDLE;
	return 0;
}

int ibcm_send_dreq(struct ibcm_conn *c, const uint8_t *pdata, uint64_t now, struct ibcm_out *out)
{
	struct sr_cm_mad m;

	out_clear(out);
	/* 12.9: DREQ from ESTABLISHED (the passive side may also be in REP_SENT or MRA_REP_RCVD
	 * when its RTU was lost: the consumer already uses the connection) */
	if (c->state != IBCM_ESTABLISHED && c->state != IBCM_REP_SENT &&
	    c->state != IBCM_MRA_REP_RCVD)
		return -EINVAL;
	memset(&m, 0, sizeof(m));
	hdr_fill(c, &m, SR_CM_ATTR_DREQ);
	m.dreq.local_comm_id = c->local_id;
	m.dreq.remote_comm_id = c->remote_id;
	m.dreq.remote_qpn = c->remote_qpn;	/* 12.6.10: the QP being disconnected, remote's */
	if (pdata)
		memcpy(m.dreq.pdata, pdata, sizeof(m.dreq.pdata));
	c->retries = c->max_retries;
	c->state = IBCM_DREQ_SENT;
	emit(c, &m, ibcm_timeout_ns(c->peer_resp_timeout) + 2 * pkt_life(c), now, out);
	return 0;
}

static void make_drep(struct ibcm_conn *c, const uint8_t *pdata, struct sr_cm_mad *m)
{
	memset(m, 0, sizeof(*m));
	hdr_fill(c, m, SR_CM_ATTR_DREP);
	m->drep.local_comm_id = c->local_id;
	m->drep.remote_comm_id = c->remote_id;
	if (pdata)
		memcpy(m->drep.pdata, pdata, sizeof(m->drep.pdata));
}

int ibcm_send_drep(struct ibcm_conn *c, const uint8_t *pdata, uint64_t now, struct ibcm_out *out)
{
	struct sr_cm_mad m;

	out_clear(out);
	if (c->state != IBCM_DREQ_RCVD)
		return -EINVAL;
	make_drep(c, pdata, &m);
	emit(c, &m, 0, now, out);
	enter_timewait(c, now);		/* 12.9: DREQ_RCVD -DREP-> TIMEWAIT */
	return 0;
}

/* The IDs a MAD names: local (the sender's) and remote (ours). */
static void mad_ids(const struct sr_cm_mad *m, uint32_t *local, uint32_t *remote)
{
	*local = *remote = 0;
	switch (m->hdr.attr_id) {
	case SR_CM_ATTR_REQ: *local = m->req.local_comm_id; break;
	case SR_CM_ATTR_MRA: *local = m->mra.local_comm_id; *remote = m->mra.remote_comm_id; break;
	case SR_CM_ATTR_REJ: *local = m->rej.local_comm_id; *remote = m->rej.remote_comm_id; break;
	case SR_CM_ATTR_REP: *local = m->rep.local_comm_id; *remote = m->rep.remote_comm_id; break;
	case SR_CM_ATTR_RTU: *local = m->rtu.local_comm_id; *remote = m->rtu.remote_comm_id; break;
	case SR_CM_ATTR_DREQ:
		*local = m->dreq.local_comm_id;
		*remote = m->dreq.remote_comm_id;
		break;
	case SR_CM_ATTR_DREP:
		*local = m->drep.local_comm_id;
		*remote = m->drep.remote_comm_id;
		break;
	default: break;
	}
}

static void recv_req(struct ibcm_conn *c, const struct sr_cm_req *r, uint64_t tid,
		     struct ibcm_out *out)
{
	if (c->state == IBCM_IDLE) {
		/* 12.9: IDLE -REQ-> REQ_RCVD; the consumer accepts (REP), rejects or delays (MRA) */
		c->remote_id = r->local_comm_id;
		c->remote_qpn = r->local_qpn;
		c->tid = tid;
		c->max_retries = r->max_cm_retries;
		c->peer_resp_timeout = r->local_cm_response_timeout;
		c->state = IBCM_REQ_RCVD;
		out->event = IBCM_EV_REQ;
		return;
	}
	if (r->local_comm_id != c->remote_id) {
		out->dropped = true;
		return;
	}
	/* 12.9: a duplicate REQ (our answer was lost, or is late) is answered again with what we
	 * sent for it: the MRA, or the REP; while the consumer decides, it is ignored */
	switch (c->state) {
	case IBCM_MRA_REQ_SENT:
	case IBCM_REP_SENT:
	case IBCM_MRA_REP_RCVD:
		resend_last(c, out);
		break;
	default:
		out->dropped = true;
		break;
	}
}

int ibcm_recv(struct ibcm_conn *c, const struct sr_cm_mad *m, uint64_t now, struct ibcm_out *out)
{
	uint32_t local, remote;

	out_clear(out);
	if (m->hdr.attr_id == SR_CM_ATTR_REQ) {
		recv_req(c, &m->req, m->hdr.tid, out);
		return 0;
	}
	mad_ids(m, &local, &remote);
	/* Every later message names our ID as its remote one, and (once we know it) the peer's
	 * as its local one (12.6.6-12.6.11). A REJ of a REQ (a timeout, an invalid service ID)
	 * may come before the peer had an ID for us to know. */
	if (remote != c->local_id ||
	    (c->remote_id && local != c->remote_id &&
	     !(m->hdr.attr_id == SR_CM_ATTR_REJ && c->state == IBCM_REQ_SENT))) {
		out->dropped = true;
		return 0;
	}
	switch (m->hdr.attr_id) {
	case SR_CM_ATTR_MRA:
		/* 12.6.6, 12.9: an MRA stops retransmission; the answer may take the MRA's
		 * service timeout more */
		if (c->state == IBCM_REQ_SENT && m->mra.msg_mraed == SR_CM_MSG_REQ) {
			c->state = IBCM_MRA_REQ_RCVD;
		} else if (c->state == IBCM_REP_SENT && m->mra.msg_mraed == SR_CM_MSG_REP) {
			c->state = IBCM_MRA_REP_RCVD;
		} else {
			out->dropped = true;
			return 0;
		}
		c->deadline = now + ibcm_timeout_ns(m->mra.service_timeout) + 2 * pkt_life(c);
		break;
	case SR_CM_ATTR_REP:
		if (c->state == IBCM_REQ_SENT || c->state == IBCM_MRA_REQ_RCVD) {
			/* 12.9: REQ_SENT / MRA_REQ_RCVD -REP-> REP_RCVD; the consumer sends the RTU
			 * (or an MRA, or a REJ) */
			c->remote_id = m->rep.local_comm_id;
			c->remote_qpn = m->rep.local_qpn;
			c->deadline = 0;
			c->state = IBCM_REP_RCVD;
			out->event = IBCM_EV_REP;
		} else if (c->state == IBCM_MRA_REP_SENT || c->state == IBCM_ESTABLISHED) {
			/* 12.9: a duplicate REP: our MRA or RTU was lost; send it again */
			resend_last(c, out);
		} else {
			out->dropped = true;
		}
		break;
	case SR_CM_ATTR_RTU:
		if (c->state == IBCM_REP_SENT || c->state == IBCM_MRA_REP_RCVD) {
			c->deadline = 0;
			c->state = IBCM_ESTABLISHED;	/* 12.9: REP_SENT -RTU-> ESTABLISHED */
			out->event = IBCM_EV_ESTABLISHED;
		} else {
			out->dropped = true;
		}
		break;
	case SR_CM_ATTR_REJ:
		switch (c->state) {
		case IBCM_REQ_SENT:
		case IBCM_MRA_REQ_RCVD:
			c->state = IBCM_IDLE;	/* 12.9: the REQ rejected: no connection */
			c->deadline = 0;
			break;
		case IBCM_REP_SENT:
		case IBCM_MRA_REP_RCVD:
		case IBCM_REP_RCVD:
		case IBCM_MRA_REP_SENT:
			enter_timewait(c, now);	/* 12.9: after a REP: TIMEWAIT */
			break;
		default:
			out->dropped = true;
			return 0;
		}
		out->event = IBCM_EV_REJ;
		out->reason = m->rej.reason;
		out->mad = *m;
		break;
	case SR_CM_ATTR_DREQ:
		switch (c->state) {
		case IBCM_REP_SENT:
		case IBCM_MRA_REP_RCVD:	/* our RTU never came but the peer uses the QP */
		case IBCM_ESTABLISHED:
			c->deadline = 0;
			c->state = IBCM_DREQ_RCVD;	/* 12.9: ESTABLISHED -DREQ-> DREQ_RCVD */
			out->event = IBCM_EV_DREQ;
			break;
		case IBCM_DREQ_SENT: {
			/* 12.9: DREQs crossed: answer theirs, and ours counts as answered */
			struct sr_cm_mad d;

			make_drep(c, NULL, &d);
			emit(c, &d, 0, now, out);
			enter_timewait(c, now);
			out->event = IBCM_EV_DISCONNECTED;
			break;
		}
		case IBCM_TIMEWAIT: {
			/* 12.9: a repeated DREQ (our DREP lost) gets a DREP again */
			struct sr_cm_mad d;

			make_drep(c, NULL, &d);
			out->send = true;
			out->mad = d;
			break;
		}
		default:
			out->dropped = true;
			break;
		}
		break;
	case SR_CM_ATTR_DREP:
		if (c->state == IBCM_DREQ_SENT) {
			enter_timewait(c, now);	/* 12.9: DREQ_SENT -DREP-> TIMEWAIT */
			out->event = IBCM_EV_DISCONNECTED;
		} else {
			out->dropped = true;
		}
		break;
	default:
		/* LAP, APR, SIDR: not this state machine's (LAP/APR are refused by the caller) */
		out->dropped = true;
		break;
	}
	return 0;
}

void ibcm_timer(struct ibcm_conn *c, uint64_t now, struct ibcm_out *out)
{
	out_clear(out);
	if (!c->deadline || now < c->deadline)
		return;
	c->deadline = 0;
	switch (c->state) {
	case IBCM_REQ_SENT:
	case IBCM_REP_SENT:
	case IBCM_DREQ_SENT:
		if (c->retries > 0) {
			/* 12.6.5 Max CM Retries: the unanswered message is sent again */
			c->retries--;
			resend_last(c, out);
			c->deadline = now + c->wait_ns;
			return;
		}
		break;
	case IBCM_MRA_REQ_RCVD:
	case IBCM_MRA_REP_RCVD:
		/* the MRA's service timeout passed without the answer: as a last retry lost */
		break;
	case IBCM_TIMEWAIT:
		c->state = IBCM_IDLE;	/* 12.9: TIMEWAIT -timer-> IDLE */
		out->event = IBCM_EV_TIMEWAIT_EXIT;
		return;
	default:
		return;
	}
	if (c->state == IBCM_DREQ_SENT) {
		/* 12.9: a DREQ never answered still ends the connection */
		enter_timewait(c, now);
		out->event = IBCM_EV_DISCONNECTED;
		return;
	}
	/* 12.9, 12.6.7: REQ or REP unanswered after every retry: tell the peer (REJ, reason
	 * Timeout) and the consumer */
	{
		struct sr_cm_mad m;
		bool after_rep = c->state == IBCM_REP_SENT || c->state == IBCM_MRA_REP_RCVD;

		memset(&m, 0, sizeof(m));
		hdr_fill(c, &m, SR_CM_ATTR_REJ);
		m.rej.local_comm_id = c->local_id;
		m.rej.remote_comm_id = c->remote_id;
		m.rej.msg_rejected = after_rep ? SR_CM_MSG_REP : SR_CM_MSG_REQ;
		m.rej.reason = SR_CM_REJ_TIMEOUT;
		emit(c, &m, 0, now, out);
		out->event = IBCM_EV_TIMEOUT;
		out->reason = SR_CM_REJ_TIMEOUT;
		if (after_rep)
			enter_timewait(c, now);
		else
			c->state = IBCM_IDLE;
	}
}
