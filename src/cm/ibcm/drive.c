/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm's connected ids over the IB CM (param cm_wire, ibcm by default; docs/cm.md): the drive that
 * puts the IB CM state machine (ibcm.c) between librdmacm's calls and the device's QP1
 * (agent.c), with the rdma_cm mapping of rdma.c, as the kernel's rdma_cm runs its ib_cm.
 *
 *   rdma_connect    -> REQ (service ID 0x0000000001 PS PORT, rdma_cm's header, user data)
 *   REQ received    -> a new id on the listener, RDMA_CM_EVENT_CONNECT_REQUEST
 *   rdma_accept     -> QP to RTR/RTS, REP;  REP received -> QP to RTR/RTS, RTU, ESTABLISHED
 *   RTU received    -> ESTABLISHED (passive)
 *   rdma_reject     -> REJ (consumer defined, 28, with the private data) -> REJECTED
 *   rdma_disconnect -> QP to ERR, DREQ; DREP -> DISCONNECTED. A DREQ received is answered
 *                      with a DREP at once and gives DISCONNECTED; the QP is left as it is
 *                      (the kernel's rdma_cm moves it to ERR only in rdma_disconnect)
 *   no answer       -> the state machine's retransmissions, then UNREACHABLE (-ETIMEDOUT)
 *   UD ids (RDMA_PS_UDP): SIDR_REQ -> CONNECT_REQUEST; rdma_accept/reject -> SIDR_REP ->
 *                      ESTABLISHED (QPN, Q_Key) or UNREACHABLE (its status)
 *
 * PSNs follow the kernel's ib_cm: the starting PSN of a REQ or REP is the PSN its sender's QP
 * expects to receive; the receiver sends from it.
 *
 * Every function runs with cm.lock held (the CM thread's, or an rdma_* call's).
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <time.h>

#include "cm/cm.h"
#include "cm/ibcm/agent.h"
#include "cm/ibcm/rdma.h"

/* The CM response timeout we announce (4.096 us x 2^16, about 268 ms: softrdma answers at
 * once) and the retries: a REQ nobody answers ends in UNREACHABLE after about 4.6 s (the
 * kernel's 20 and 15 take over a minute). The peer's own values govern its side. */
#define IBCM_RESP_TIMEOUT 16
#define IBCM_MAX_RETRIES 15

static int mode = -1;

/* The IB CM is the default (param cm_wire); SOFTRDMA_CM_WIRE=private keeps softrdma's own
 * protocol (cm.c, proto.c) for what still needs it (docs/cm.md). */
bool cm_ibcm_on(void)
{
	if (mode < 0) {
		const char *v = getenv("SOFTRDMA_CM_WIRE");

		mode = !(v && !strcmp(v, "private"));
	}
	return mode == 1;
}

bool cm_ibcm_for(const struct cm_id *id)
{
	if (!cm_ibcm_on() || id->id.ps == RDMA_PS_IPOIB)
		return false;
	/* UD ids of RDMA_PS_UDP: SIDR_REQ / SIDR_REP; connected ones: REQ .. RTU */
	return id->id.ps == RDMA_PS_UDP || cm_qpt(id) != IBV_QPT_UD;
}

static bool sidr(const struct cm_id *id)
{
	return id->id.ps == RDMA_PS_UDP;
}

uint64_t cm_ibcm_clock_skew_ns;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + cm_ibcm_clock_skew_ns;
}

static uint32_t rand32(void)
{
	uint32_t v;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)now_ns() * 2654435761u;
	return v;
}

/* Transaction IDs: a random high half per process, the communication ID in the low one. */
static uint64_t new_tid(uint32_t local_id)
{
	static uint32_t hi;

	if (!hi)
		hi = rand32() | 1;
	return ((uint64_t)hi << 32) | local_id;
}

/* Same IP address (the port a softrdma GID may name aside). */
static bool gid_ip_eq(const uint8_t *a, const uint8_t *b)
{
	static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	bool a4 = !memcmp(a, v4, 8) && a[10] == 0xff && a[11] == 0xff;
	bool b4 = !memcmp(b, v4, 8) && b[10] == 0xff && b[11] == 0xff;

	if (a4 || b4)
		return a4 && b4 && !memcmp(a + 12, b + 12, 4);
	return !memcmp(a, b, 16);
}

/* ---- QP1 of each device --------------------------------------------------------------------- */
int cm_ibcm_open(void)
{
	for (int i = 0; i < cm_ndevs; i++) {
		struct cm_dev *d = &cm_devs[i];
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = d };
		int ret;

		if (d->agent)
			continue;
		d->agent = calloc(1, sizeof(*d->agent));
		if (!d->agent)
			return -ENOMEM;
		ret = ibcm_agent_open(d->agent, d->ctx);
		if (ret) {
			free(d->agent);
			d->agent = NULL;
			return ret;
		}
		/* The CM thread sleeps on the receive CQ's completion channel with its sockets. */
		fcntl(d->agent->ch->fd, F_SETFL, fcntl(d->agent->ch->fd, F_GETFL) | O_NONBLOCK);
		if (epoll_ctl(cm.epfd, EPOLL_CTL_ADD, d->agent->ch->fd, &ev))
			return -errno;
	}
	return 0;
}

static void send_mad(struct cm_dev *d, struct ibv_ah *ah, const struct sr_cm_mad *m)
{
	if (!d || !d->agent || !ah)
		return;
	if (ibcm_agent_send(d->agent, ah, m))
		cm_count("cm_mad_send_errors");
	else
		cm_count("cm_mads_sent");
}

/* A REJ answering a MAD that has no connection here (the kernel's cm_issue_rej). */
static void reject_raw(struct cm_dev *d, struct ibv_ah *ah, const struct sr_cm_mad *in,
		       uint32_t my_id, uint32_t their_id, uint8_t msg, uint16_t reason)
{
	struct sr_cm_mad m;

	memset(&m, 0, sizeof(m));
	m.hdr = in->hdr;
	m.hdr.method = SR_MAD_METHOD_SEND;
	m.hdr.attr_id = SR_CM_ATTR_REJ;
	m.hdr.status = 0;
	m.rej.local_comm_id = my_id;
	m.rej.remote_comm_id = their_id;
	m.rej.msg_rejected = msg;
	m.rej.reason = reason;
	cm_count("cm_rejects_sent");
	send_mad(d, ah, &m);
}

/* Passive connections that ended (rejected or destroyed): a late copy of their REQ is
 * answered with a stale-connection REJ rather than becoming a new CONNECT_REQUEST. */
static struct {
	uint32_t remote_id;
	uint8_t gid[16];
	uint64_t until_ns;
} tw[64];
static unsigned tw_next;

static void timewait_add(const struct cm_id *id)
{
	unsigned i = tw_next++ % (sizeof(tw) / sizeof(tw[0]));

	tw[i].remote_id = id->ib.remote_id;
	memcpy(tw[i].gid, id->peer_gid.raw, 16);
	tw[i].until_ns = now_ns() + 10000000000ull;
}

static bool in_timewait(uint32_t remote_id, const uint8_t *gid)
{
	uint64_t now = now_ns();

	for (size_t i = 0; i < sizeof(tw) / sizeof(tw[0]); i++)
		if (tw[i].until_ns > now && tw[i].remote_id == remote_id &&
		    gid_ip_eq(tw[i].gid, gid))
			return true;
	return false;
}

/* ---- events ------------------------------------------------------------------------------------ */
static void event(struct cm_id *id, enum rdma_cm_event_type type, int status,
		  const struct cm_msg *m)
{
	cm_post_event(id, type, status, m);
}

static void msg_pdata(struct cm_msg *m, uint8_t type, const uint8_t *pdata, size_t len)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->pdata_len = (uint8_t)len;
	memcpy(m->pdata, pdata, len);
}

static void ended(struct cm_id *id, enum rdma_cm_event_type type, int status,
		  const struct cm_msg *m, bool qp_err)
{
	if (qp_err)
		cm_qp_to_err(id);
	id->state = CM_DISCONNECTED;
	event(id, type, status, m);
}

/* What the state machine says to do: send, and tell the consumer. */
static void handle(struct cm_id *id, const struct ibcm_out *out, const struct sr_cm_mad *in)
{
	struct cm_msg m;
	struct ibcm_out o2;

	if (out->send)
		send_mad(id->dev, id->ib_ah, &out->mad);
	switch (out->event) {
	case IBCM_EV_REP: {
		struct ibcm_rdma_conn r;

		if (id->state != CM_REQ_SENT || !in)
			break;
		ibcm_rdma_rep_parse(&in->rep, &r);
		id->peer_qpn = r.qpn;
		id->my_psn = r.psn;	/* the PSN the responder expects: we send from it */
		id->my_psn_set = true;
		/* Our RDMA reads are bounded by its responder resources, its by our offer. */
		if (r.responder_resources < id->initiator_depth)
			id->initiator_depth = r.responder_resources;
		if (r.initiator_depth < id->responder_resources)
			id->responder_resources = r.initiator_depth;
		id->rnr_retry_count = r.rnr_retry_count;
		msg_pdata(&m, CM_MSG_REP, r.pdata, SR_CM_REP_PDATA);
		m.qpn = r.qpn;
		m.responder_resources = r.responder_resources;
		m.initiator_depth = r.initiator_depth;
		m.rnr_retry_count = r.rnr_retry_count;
		m.srq = r.srq;
		m.retry_count = id->retry_count;
		if (!id->id.qp) {
			/* The application moves its own QP, then calls rdma_establish (the RTU). */
			id->state = CM_REP_RCVD;
			event(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &m);
			break;
		}
		if (cm_qp_to_rtr_rts(id, true)) {
			if (!ibcm_send_rej(&id->ib, SR_CM_REJ_CONSUMER_DEFINED, NULL, 0, now_ns(), &o2))
				send_mad(id->dev, id->ib_ah, &o2.mad);
			ended(id, RDMA_CM_EVENT_CONNECT_ERROR, -EINVAL, NULL, true);
			break;
		}
		if (!ibcm_send_rtu(&id->ib, NULL, now_ns(), &o2))
			send_mad(id->dev, id->ib_ah, &o2.mad);
		id->state = CM_ESTABLISHED;
		event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &m);
		break;
	}
	case IBCM_EV_ESTABLISHED:
		if (id->state != CM_REP_SENT)
			break;
		id->state = CM_ESTABLISHED;
		msg_pdata(&m, CM_MSG_RTU, in->rtu.pdata, SR_CM_RTU_PDATA);
		event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &m);
		break;
	case IBCM_EV_REJ:
		if (id->state != CM_REQ_SENT && id->state != CM_REP_SENT && id->state != CM_REP_RCVD)
			break;
		cm_count("cm_rejects_rcvd");
		msg_pdata(&m, CM_MSG_REJ, out->mad.rej.pdata, SR_CM_REJ_PDATA);
		ended(id, RDMA_CM_EVENT_REJECTED, out->reason, &m, true);
		break;
	case IBCM_EV_TIMEOUT:
		cm_count("cm_timeouts");
		if (id->state == CM_REQ_SENT || id->state == CM_REP_SENT)
			ended(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL, true);
		break;
	case IBCM_EV_DREQ:
		/* Answered at once; the QP stays as it is until the application's rdma_disconnect
		 * (as the kernel's rdma_cm). */
		if (!ibcm_send_drep(&id->ib, NULL, now_ns(), &o2))
			send_mad(id->dev, id->ib_ah, &o2.mad);
		if (id->state == CM_ESTABLISHED || id->state == CM_REP_SENT ||
		    id->state == CM_DREQ_SENT)
			ended(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, false);
		break;
	case IBCM_EV_DISCONNECTED:
		if (id->state == CM_DREQ_SENT || id->state == CM_ESTABLISHED)
			ended(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, false);
		break;
	default:
		break;
	}
}

/* ---- port and CM redirect: several processes on one address (docs/cm.md) -------------------
 *
 * Only one process of an address owns UDP 4791 there; a later one's device takes another UDP
 * port and names it in its GID (docs/gid.md). A REQ (SIDR_REQ) sent to the address's RoCEv2
 * GID reaches the owner's QP1 whoever listens on its port. When the owner has no listener for
 * it, it asks the processes of its own address, as a requester on this host does (the QP1
 * QUERY to the rdma_cm port, where the listening process's CM socket is bound): a process
 * listening there answers with the GID of its QP1, and the owner answers the REQ with the IB
 * CM's port and CM redirect, REJ reason 24 with a ClassPortInfo naming that GID's QP1 (IBA
 * 12.6.7.2; a SIDR_REQ: SIDR_REP status 4 with the same ClassPortInfo, 12.11.2). A softrdma
 * requester sends its REQ again there (below, "following a redirect"). Nobody on the port (the
 * QUERY's ICMP port unreachable), a reply naming this QP1 or another address, or no reply
 * within REDIR_WAIT_NS: REJ reason 8 (SIDR_REP status 1), as before. Only requesters that can
 * follow are redirected: a softrdma device sends from its own port (below 49152), a kernel or
 * NIC requester from a flow-entropy port (49152 and up) and could not reach another UDP port
 * anyway: it gets REJ 8 at once, as it always did.
 */
#define REDIR_SLOTS 16
#define REDIR_WAIT_NS 3000000000ull

static struct redir {
	bool used, sidr;
	struct cm_dev *d;
	struct ibv_ah *ah;		/* to the requester's QP1 */
	struct sr_cm_mad req;		/* what is being answered (its header: the TID) */
	union ibv_gid sgid;		/* the requester */
	uint32_t qid;			/* the QUERY's communication ID */
	struct sockaddr_storage to;	/* where the QUERY went: this address, the rdma_cm port */
	uint16_t ps, port;
	uint64_t until_ns;
} redir[REDIR_SLOTS];

static void sidr_rep_raw(struct cm_dev *d, struct ibv_ah *ah, const struct sr_cm_mad *in,
			 uint8_t status);
static bool redirect_follow(struct cm_id *id, const struct ibcm_rx *rx, uint8_t len,
			    const uint8_t *info);

static uint32_t req_their_id(const struct sr_cm_mad *m)
{
	return m->hdr.attr_id == SR_CM_ATTR_SIDR_REQ ? m->sidr_req.request_id
						     : m->req.local_comm_id;
}

static void redir_free(struct redir *r)
{
	if (r->ah)
		ibv_destroy_ah(r->ah);
	memset(r, 0, sizeof(*r));
}

/* The answer when there is nowhere to redirect to: what a REQ without a listener gets. */
static void redir_refuse(struct redir *r)
{
	if (r->sidr) {
		sidr_rep_raw(r->d, r->ah, &r->req, SR_CM_SIDR_UNSUPPORTED);
	} else {
		reject_raw(r->d, r->ah, &r->req, 0, r->req.req.local_comm_id, SR_CM_MSG_REQ,
			   SR_CM_REJ_INVALID_SERVICE_ID);
	}
	redir_free(r);
}

static void redir_answer(struct redir *r, const union ibv_gid *gid)
{
	struct sr_class_port_info cpi = {
		.base_version = SR_MAD_BASE_VERSION, .class_version = SR_MAD_CM_CLASS_VERSION,
		.resp_time_value = IBCM_RESP_TIMEOUT, .redirect_lid = 0,
		.redirect_pkey = SR_DEFAULT_PKEY, .redirect_qp = SR_GSI_QPN,
		.redirect_qkey = SR_GSI_QKEY,
	};
	struct sr_cm_mad m;

	memcpy(cpi.redirect_gid, gid->raw, 16);
	memset(&m, 0, sizeof(m));
	m.hdr = r->req.hdr;
	m.hdr.method = SR_MAD_METHOD_SEND;
	m.hdr.status = 0;
	if (r->sidr) {
		m.hdr.attr_id = SR_CM_ATTR_SIDR_REP;
		m.sidr_rep.request_id = r->req.sidr_req.request_id;
		m.sidr_rep.service_id = r->req.sidr_req.service_id;
		m.sidr_rep.status = SR_CM_SIDR_REDIRECT;
		m.sidr_rep.info_len = SR_CLASS_PORT_INFO_LEN;
		sr_class_port_info_encode(&cpi, m.sidr_rep.info);
	} else {
		m.hdr.attr_id = SR_CM_ATTR_REJ;
		m.rej.remote_comm_id = r->req.req.local_comm_id;
		m.rej.msg_rejected = SR_CM_MSG_REQ;
		m.rej.reason = SR_CM_REJ_PORT_CM_REDIRECT;
		m.rej.ari_len = SR_CLASS_PORT_INFO_LEN;
		sr_class_port_info_encode(&cpi, m.rej.ari);
	}
	cm_count("cm_redirects_sent");
	send_mad(r->d, r->ah, &m);
	redir_free(r);
}

static void redir_query(struct redir *r)
{
	struct cm_msg q = { .type = CM_MSG_QP1_QUERY, .src_id = r->qid, .ps = r->ps,
			    .dst_port = r->port };

	cm_count("cm_qp1_queries");
	cm_send_to((struct sockaddr *)&r->to, &q);	/* lost: the REQ's retransmission asks again */
}

/* A REQ (SIDR_REQ) for port space ps and port (host order) that no listener of this process
 * takes: true when the redirect looks after it (a QUERY is out, or was for an earlier copy),
 * false when the caller rejects it as before. */
static bool redirect_start(struct cm_dev *d, struct ibcm_rx *rx, uint16_t ps, uint16_t port)
{
	uint32_t their = req_their_id(&rx->mad);
	struct redir *r = NULL;

	if (!rx->sport || rx->sport >= 49152 || d->ip.ss_family != AF_INET || !port)
		return false;	/* a requester that cannot follow (kernel, NIC), or IPv6 */
	for (int i = 0; i < REDIR_SLOTS; i++) {
		struct redir *o = &redir[i];

		if (o->used && o->req.hdr.attr_id == rx->mad.hdr.attr_id &&
		    req_their_id(&o->req) == their && !memcmp(o->sgid.raw, rx->sgid.raw, 16)) {
			redir_query(o);	/* a retransmission: ask again (the first may be lost) */
			return true;
		}
		if (!o->used && !r)
			r = o;
	}
	if (!r) {
		cm_count("cm_req_held");	/* every slot busy: the requester retries */
		return true;
	}
	r->used = true;
	r->sidr = rx->mad.hdr.attr_id == SR_CM_ATTR_SIDR_REQ;
	r->d = d;
	r->ah = rx->ah;
	rx->ah = NULL;
	r->req = rx->mad;
	r->sgid = rx->sgid;
	r->qid = cm_new_local_id();
	r->ps = ps;
	r->port = port;
	memcpy(&r->to, &d->ip, sizeof(r->to));
	((struct sockaddr_in *)&r->to)->sin_port = htons(port);
	r->until_ns = now_ns() + REDIR_WAIT_NS;
	redir_query(r);
	cm_kick();	/* the CM thread's timer now has a deadline */
	return true;
}

static bool sa_same(const struct sockaddr *a, const struct sockaddr *b)
{
	const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

	return a->sa_family == AF_INET && b->sa_family == AF_INET && x->sin_port == y->sin_port &&
	       x->sin_addr.s_addr == y->sin_addr.s_addr;
}

/* cm.ibcm->redirect_reply: a QP1 REPLY on the active socket that no id asked for. */
static bool redirect_reply(const struct sockaddr *from, const struct cm_msg *m)
{
	for (int i = 0; i < REDIR_SLOTS; i++) {
		struct redir *r = &redir[i];

		if (!r->used || r->qid != m->dst_id)
			continue;
		if (!sa_same(from, (struct sockaddr *)&r->to)) {
			cm_count("cm_drop_unknown");	/* not the port asked: ignored */
			return true;
		}
		/* The listener's QP1: on this device's address, and not this QP1 (the port's
		 * listener is this process's, of another port space, or gone). */
		if (!gid_ip_eq(m->gid.raw, r->d->gid.raw) || !memcmp(m->gid.raw, r->d->gid.raw, 16))
			redir_refuse(r);
		else
			redir_answer(r, &m->gid);
		return true;
	}
	return false;
}

/* cm.ibcm->redirect_unreachable: nobody on the port a QUERY went to. */
static void redirect_unreachable(const struct sockaddr *dst)
{
	for (int i = 0; i < REDIR_SLOTS; i++)
		if (redir[i].used && sa_same(dst, (struct sockaddr *)&redir[i].to))
			redir_refuse(&redir[i]);
}

/* QUERYs unanswered for REDIR_WAIT_NS (a process there that speaks the private protocol, or
 * is not rdma_cm at all): refused. The next deadline, or UINT64_MAX. */
static uint64_t redirect_timers(uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (int i = 0; i < REDIR_SLOTS; i++) {
		if (!redir[i].used)
			continue;
		if (now >= redir[i].until_ns)
			redir_refuse(&redir[i]);
		else if (redir[i].until_ns < next)
			next = redir[i].until_ns;
	}
	return next;
}

/* ---- received MADs ------------------------------------------------------------------------------ */
static struct cm_id *find_listener(struct cm_dev *d, uint16_t ps, uint16_t port)
{
	for (struct cm_id *i = cm.ids; i; i = i->next)
		if (i->state == CM_LISTEN && i->id.ps == ps &&
		    cm_sa_port(&i->id.route.addr.src_addr) == htons(port) && (!i->dev || i->dev == d))
			return i;
	return NULL;
}

/*
 * A child id of listener l for a request that came in on device d: it speaks the IB CM, answers
 * through the request's address handle (taken from rx), and holds the listener's socket (its
 * port stays reserved while its connections live, cm.c). Shared by REQ and SIDR_REQ.
 */
static void child_init(struct cm_id *c, struct cm_id *l, struct cm_dev *d, struct ibcm_rx *rx)
{
	c->ibcm = true;
	ibcm_init(&c->ib, c->local_id);
	c->ib_ah = rx->ah;
	rx->ah = NULL;	/* the connection keeps it: every answer goes there */
	c->listener = l;
	c->state = CM_REQ_RCVD;
	c->sock = l->lsock;
	c->sock_ref = l->lsock != NULL;
	cm_sock_get(l->lsock);
	c->dev = d;
	c->id.verbs = d->ctx;
	c->id.pd = cm_dev_pd(d);
	c->id.port_num = 1;
}

static void on_req(struct cm_dev *d, struct ibcm_rx *rx)
{
	const struct sr_cm_mad *mad = &rx->mad;
	const struct sr_cm_req *r = &mad->req;
	struct ibcm_rdma_conn p;
	struct ibcm_out out;
	struct cm_id *l, *c;
	struct cm_msg m;
	uint64_t now = now_ns();

	/* A retransmitted REQ: its connection exists; the state machine repeats our answer. */
	for (c = cm.ids; c; c = c->next) {
		if (c->ibcm && c->listener && c->state != CM_DESTROYING &&
		    c->ib.remote_id == r->local_comm_id && gid_ip_eq(c->peer_gid.raw, rx->sgid.raw)) {
			if (c->ib.state == IBCM_IDLE) {
				cm_count("cm_drop_unknown");
				return;
			}
			ibcm_recv(&c->ib, mad, now, &out);
			if (out.send)
				send_mad(c->dev, c->ib_ah, &out.mad);
			return;
		}
	}
	if (in_timewait(r->local_comm_id, rx->sgid.raw)) {
		reject_raw(d, rx->ah, mad, 0, r->local_comm_id, SR_CM_MSG_REQ, SR_CM_REJ_STALE_CONN);
		return;
	}
	if (ibcm_rdma_req_parse(r, &p)) {
		cm_count("cm_drop_malformed");	/* not rdma_cm's service ID or header */
		reject_raw(d, rx->ah, mad, 0, r->local_comm_id, SR_CM_MSG_REQ,
			   SR_CM_REJ_INVALID_SERVICE_ID);
		return;
	}
	/* Never connect a QP to a GID its requester does not own (cm.c's rule). */
	if (!gid_ip_eq(r->primary.local_gid, rx->sgid.raw)) {
		reject_raw(d, rx->ah, mad, 0, r->local_comm_id, SR_CM_MSG_REQ, SR_CM_REJ_INVALID_GID);
		return;
	}
	int why = ibcm_rdma_req_check(&p);

	if (why) {
		cm_count("cm_drop_malformed");
		reject_raw(d, rx->ah, mad, 0, r->local_comm_id, SR_CM_MSG_REQ, (uint16_t)why);
		return;
	}
	uint16_t port = (uint16_t)r->service_id;

	l = find_listener(d, p.ps, port);
	if (!l) {
		if (cm_port_held(htons(port), p.ps)) {
			cm_count("cm_req_held");	/* its retransmission may find the listener */
			return;
		}
		if (redirect_start(d, rx, p.ps, port))
			return;	/* another process of this address may listen there */
		reject_raw(d, rx->ah, mad, 0, r->local_comm_id, SR_CM_MSG_REQ,
			   SR_CM_REJ_INVALID_SERVICE_ID);
		return;
	}
	if (l->pending >= l->backlog)
		return;	/* full backlog: the requester retries */
	c = cm_id_alloc(l->chan, l->id.context, l->id.ps,
			p.qp_type == IBV_QPT_XRC_RECV ? IBV_QPT_XRC_RECV
			: l->id.qp_type == IBV_QPT_XRC_RECV ? IBV_QPT_RC : l->id.qp_type);
	if (!c)
		return;
	child_init(c, l, d, rx);
	if (p.src.ss_family) {
		memcpy(&c->id.route.addr.src_addr, &p.dst, sizeof(struct sockaddr_in6));
		memcpy(&c->id.route.addr.dst_addr, &p.src, sizeof(struct sockaddr_in6));
		memcpy(&c->peer_cm, &p.src, sizeof(struct sockaddr_in6));
	} else {
		/* RDMA_PS_IB: no rdma_cm header; the addresses are the device's and the peer's */
		memcpy(&c->id.route.addr.src_addr, &d->ip, sizeof(struct sockaddr_in6));
		((struct sockaddr_in *)&c->id.route.addr.src_addr)->sin_port = htons(port);
	}
	memcpy(c->peer_gid.raw, r->primary.local_gid, 16);
	c->peer_sr = rx->softrdma;
	c->peer_qpn = p.qpn;
	c->my_psn = p.psn;		/* the PSN the requester expects: we send from it */
	c->my_psn_set = true;
	c->peer_psn = rand32() & 0xffffff;	/* ours to receive from, named in the REP */
	c->path_mtu = d->mtu < p.mtu ? d->mtu : (enum ibv_mtu)p.mtu;
	cm_fill_path(c, &c->peer_gid, c->path_mtu);
	c->seg = 0;
	c->responder_resources = p.initiator_depth;
	c->initiator_depth = p.responder_resources;
	c->retry_count = p.retry_count;
	c->rnr_retry_count = p.rnr_retry_count;
	c->flow_control = r->e2e_flow_control;
	c->srq = p.srq;
	ibcm_recv(&c->ib, mad, now, &out);
	l->pending++;
	msg_pdata(&m, CM_MSG_REQ, p.pdata, p.pdata_len);
	m.qpn = p.qpn;
	m.responder_resources = p.responder_resources;
	m.initiator_depth = p.initiator_depth;
	m.retry_count = p.retry_count;
	m.rnr_retry_count = p.rnr_retry_count;
	m.flow_control = r->e2e_flow_control;
	m.srq = p.srq;
	cm_count("cm_reqs_rcvd");
	event(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &m);
}

/* ---- SIDR (IBA 12.11): UD ids of RDMA_PS_UDP -------------------------------------------------- */
static void sidr_rep_raw(struct cm_dev *d, struct ibv_ah *ah, const struct sr_cm_mad *in,
			 uint8_t status)
{
	struct sr_cm_mad r;

	memset(&r, 0, sizeof(r));
	r.hdr = in->hdr;
	r.hdr.method = SR_MAD_METHOD_SEND;	/* whatever the request's said (12.6.1) */
	r.hdr.status = 0;
	r.hdr.attr_id = SR_CM_ATTR_SIDR_REP;
	r.sidr_rep.request_id = in->sidr_req.request_id;
	r.sidr_rep.service_id = in->sidr_req.service_id;
	r.sidr_rep.status = status;
	send_mad(d, ah, &r);
}

static void on_sidr_req(struct cm_dev *d, struct ibcm_rx *rx)
{
	const struct sr_cm_mad *mad = &rx->mad;
	struct ibcm_rdma_conn p;
	struct cm_id *l, *c;
	struct cm_msg m;

	/* A retransmission: the id made for its first copy answers (or will). */
	for (c = cm.ids; c; c = c->next) {
		if (c->ibcm && sidr(c) && c->listener && c->state != CM_DESTROYING &&
		    c->ib.remote_id == mad->sidr_req.request_id &&
		    gid_ip_eq(c->peer_gid.raw, rx->sgid.raw)) {
			if (c->ib.have_last)
				send_mad(c->dev, c->ib_ah, &c->ib.last);
			return;
		}
	}
	if (ibcm_rdma_sidr_req_parse(&mad->sidr_req, &p)) {
		cm_count("cm_drop_malformed");
		sidr_rep_raw(d, rx->ah, mad, SR_CM_SIDR_UNSUPPORTED);
		return;
	}
	uint16_t port = (uint16_t)mad->sidr_req.service_id;

	l = find_listener(d, p.ps, port);
	if (!l || l->id.ps != RDMA_PS_UDP) {
		if (!l && cm_port_held(htons(port), p.ps)) {
			cm_count("cm_req_held");
			return;
		}
		if (!l && redirect_start(d, rx, p.ps, port))
			return;
		sidr_rep_raw(d, rx->ah, mad, SR_CM_SIDR_UNSUPPORTED);
		return;
	}
	if (l->pending >= l->backlog)
		return;
	c = cm_id_alloc(l->chan, l->id.context, l->id.ps, l->id.qp_type);
	if (!c)
		return;
	child_init(c, l, d, rx);
	c->ib.remote_id = mad->sidr_req.request_id;
	c->ib.tid = mad->hdr.tid;
	memcpy(&c->id.route.addr.src_addr, &p.dst, sizeof(struct sockaddr_in6));
	memcpy(&c->id.route.addr.dst_addr, &p.src, sizeof(struct sockaddr_in6));
	memcpy(&c->peer_cm, &p.src, sizeof(struct sockaddr_in6));
	c->peer_gid = rx->sgid;
	c->path_mtu = d->mtu;
	c->qkey = RDMA_UDP_QKEY;
	l->pending++;
	msg_pdata(&m, CM_MSG_SIDR_REQ, p.pdata, p.pdata_len);
	m.gid = rx->sgid;
	m.qkey = RDMA_UDP_QKEY;
	cm_count("cm_reqs_rcvd");
	event(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &m);
}

static void on_sidr_rep(struct cm_dev *d, struct ibcm_rx *rx)
{
	const struct sr_cm_sidr_rep *r = &rx->mad.sidr_rep;
	struct ibcm_rdma_conn p;
	struct cm_msg m;
	struct cm_id *id = NULL;

	for (struct cm_id *i = cm.ids; i; i = i->next)
		if (i->ibcm && sidr(i) && i->dev == d && i->local_id == r->request_id &&
		    i->state == CM_REQ_SENT && gid_ip_eq(i->peer_gid.raw, rx->sgid.raw) &&
		    (!i->ib_redirects || !memcmp(i->peer_gid.raw, rx->sgid.raw, 16)))
			id = i;
	if (!id) {
		cm_count("cm_drop_unknown");
		return;
	}
	if (r->status == SR_CM_SIDR_REDIRECT && redirect_follow(id, rx, r->info_len, r->info))
		return;
	ibcm_rdma_sidr_rep_parse(r, &p);
	id->ib.deadline = 0;
	msg_pdata(&m, CM_MSG_SIDR_REP, p.pdata, p.pdata_len);
	m.gid = id->peer_gid;
	m.qpn = p.qpn;
	m.qkey = p.qkey;
	if (p.sidr_status == SR_CM_SIDR_SUCCESS) {
		id->peer_qpn = p.qpn;
		id->state = CM_ESTABLISHED;
		event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &m);
	} else {
		cm_count("cm_rejects_rcvd");
		id->state = CM_DISCONNECTED;
		/* as the kernel's rdma_cm: UNREACHABLE, the SIDR status as the event's status */
		event(id, RDMA_CM_EVENT_UNREACHABLE, p.sidr_status, &m);
	}
}

/* The communication ID a MAD names as the receiver's. */
static uint32_t mad_remote_id(const struct sr_cm_mad *m)
{
	switch (m->hdr.attr_id) {
	case SR_CM_ATTR_MRA: return m->mra.remote_comm_id;
	case SR_CM_ATTR_REJ: return m->rej.remote_comm_id;
	case SR_CM_ATTR_REP: return m->rep.remote_comm_id;
	case SR_CM_ATTR_RTU: return m->rtu.remote_comm_id;
	case SR_CM_ATTR_DREQ: return m->dreq.remote_comm_id;
	case SR_CM_ATTR_DREP: return m->drep.remote_comm_id;
	default: return 0;
	}
}

/*
 * Liveness between softrdma processes. The kernel's rdma_cm sends a DREQ for every connection
 * of a process that dies (its ids live in the kernel); a softrdma process's ids die with it,
 * and a SIGKILLed one sends nothing, so its peer would wait forever on a receive. So an
 * established connection whose peer is a softrdma NIC (softrdma's GRH marker on its MADs)
 * sends the peer's QP1 a Get(ClassPortInfo) of the CM class every second (IBA 13.4.8.1: every
 * class answers it, so this is a standard management ping, not a private message; a kernel
 * peer, never probed, would answer it too), the TID naming the connection; the peer's CM
 * answers with GetResp at once. 5 s without an answer end the connection as the private
 * protocol's probe does: QP to ERR, DISCONNECTED. (Not "armed by a first answer": a peer
 * SIGKILLed before it answered one, under load, was then never noticed.)
 */
#define IBCM_PROBE_MS 1000
#define IBCM_DEAD_MS 5000

static void class_port_info(struct cm_dev *d, struct ibv_ah *ah, uint8_t method, uint64_t tid)
{
	struct sr_mad_hdr h = {
		.base_version = SR_MAD_BASE_VERSION, .mgmt_class = SR_MAD_CLASS_CM,
		.class_version = SR_MAD_CM_CLASS_VERSION, .method = method, .tid = tid,
		.attr_id = SR_CM_ATTR_CLASS_PORT_INFO,
	};
	uint8_t mad[SR_MAD_LEN] = { 0 };

	sr_mad_hdr_encode(&h, mad);
	if (method & SR_MAD_METHOD_RESP) {
		/* ClassPortInfo: BaseVersion, ClassVersion, CapabilityMask 0, then
		 * CapabilityMask2 (27 bits) 0 and RespTimeValue (5 bits); no redirection, no traps */
		mad[SR_MAD_HDR_LEN] = SR_MAD_BASE_VERSION;
		mad[SR_MAD_HDR_LEN + 1] = SR_MAD_CM_CLASS_VERSION;
		mad[SR_MAD_HDR_LEN + 7] = IBCM_RESP_TIMEOUT;
	}
	if (!d || !d->agent || !ah || ibcm_agent_send_raw(d->agent, ah, mad))
		cm_count("cm_mad_send_errors");
	else
		cm_count("cm_mads_sent");
}

static void on_class_port_info(struct cm_dev *d, struct ibcm_rx *rx)
{
	const struct sr_mad_hdr *h = &rx->mad.hdr;

	if (h->method == SR_MAD_METHOD_GET) {
		class_port_info(d, rx->ah, SR_MAD_METHOD_GET | SR_MAD_METHOD_RESP, h->tid);
		return;
	}
	if (h->method != (SR_MAD_METHOD_GET | SR_MAD_METHOD_RESP))
		return;
	for (struct cm_id *i = cm.ids; i; i = i->next) {
		if (i->ibcm && i->dev == d && i->local_id == (uint32_t)h->tid &&
		    i->state == CM_ESTABLISHED && gid_ip_eq(i->peer_gid.raw, rx->sgid.raw)) {
			i->ib_heard_ms = now_ns() / 1000000;
			return;
		}
	}
	cm_count("cm_drop_unknown");
}

/* An established connection to a softrdma peer: probe, or end it; the next time (ns). */
static uint64_t probe(struct cm_id *id, uint64_t now)
{
	uint64_t ms = now / 1000000;

	if (!id->ib_probe_ms) {
		id->ib_probe_ms = ms;	/* the first probe at once */
		id->ib_heard_ms = ms;
	}
	if (ms - id->ib_heard_ms > IBCM_DEAD_MS) {
		cm_count("cm_timeouts");
		ended(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, true);
		return UINT64_MAX;
	}
	if (ms >= id->ib_probe_ms) {
		class_port_info(id->dev, id->ib_ah, SR_MAD_METHOD_GET, new_tid(id->local_id));
		id->ib_probe_ms = ms + IBCM_PROBE_MS;
	}
	return id->ib_probe_ms * 1000000;
}

/* ---- following a redirect (REJ reason 24, SIDR_REP status 4) ---------------------------------
 * A requester whose REQ (SIDR_REQ) reached another process's QP1 than the listener's (above,
 * "port and CM redirect") is told where the listener's QP1 is, and sends its REQ again there
 * (a new comm exchange: fresh state, address handle and starting PSN); the application sees
 * only the outcome of that one. Before it is followed, every field that says where to go is
 * checked, so that a peer can move a requester only to another UDP port of the address it
 * asked for, never in a circle: the reject info is a whole ClassPortInfo (72 bytes), base
 * version 1 and class version 2; RedirectQP is QP1, RedirectQ_Key the GSI Q_Key, RedirectP_Key
 * the default partition, RedirectLID 0 or 0xffff (no LIDs on RoCE); RedirectGID an IPv4 GID of
 * the same address as the REQ's destination that the REQ has not been sent to yet; the REJ
 * came from exactly the GID the REQ went to (not a late answer of an earlier one); at most
 * CM_IBCM_MAX_REDIRECTS per rdma_connect. The path fields (TC, SL, flow label), the capability
 * masks, RespTimeValue and the Trap* fields say nothing of where to go and are not used. A
 * redirect that fails a check is refused (cm_redirects_refused): the REJ is the consumer's
 * (REJECTED, status 24; a SIDR_REP: UNREACHABLE, status 4).
 */
static int req_send(struct cm_id *id);
static int sidr_send(struct cm_id *id);

static bool redirect_ok(const struct cm_id *id, const struct ibcm_rx *rx, uint8_t len,
			const struct sr_class_port_info *c)
{
	if (len != SR_CLASS_PORT_INFO_LEN || id->ib_redirects >= CM_IBCM_MAX_REDIRECTS ||
	    memcmp(rx->sgid.raw, id->peer_gid.raw, 16))
		return false;
	if (c->base_version != SR_MAD_BASE_VERSION || c->class_version != SR_MAD_CM_CLASS_VERSION ||
	    c->redirect_qp != SR_GSI_QPN || c->redirect_qkey != SR_GSI_QKEY ||
	    c->redirect_pkey != SR_DEFAULT_PKEY ||
	    (c->redirect_lid != 0 && c->redirect_lid != 0xffff))
		return false;
	/* gid_ip_eq: both IPv4 GIDs (the port form included) of one address, or one IPv6 GID */
	if (!gid_ip_eq(c->redirect_gid, id->peer_gid.raw) ||
	    (c->redirect_gid[10] != 0xff || c->redirect_gid[11] != 0xff))
		return false;
	if (!memcmp(c->redirect_gid, id->peer_gid.raw, 16))
		return false;
	for (int i = 0; i < id->ib_redirects; i++)
		if (!memcmp(c->redirect_gid, id->ib_visited[i].raw, 16))
			return false;
	return true;
}

/* true when the redirect was followed (or ended the id: the new REQ could not be sent) */
static bool redirect_follow(struct cm_id *id, const struct ibcm_rx *rx, uint8_t len,
			    const uint8_t *info)
{
	struct sr_class_port_info c;
	int ret;

	sr_class_port_info_decode(&c, info);
	if (!redirect_ok(id, rx, len, &c)) {
		cm_count("cm_redirects_refused");
		return false;
	}
	id->ib_visited[id->ib_redirects++] = id->peer_gid;	/* where the REQ went */
	memcpy(id->peer_gid.raw, c.redirect_gid, 16);
	cm_count("cm_redirects_followed");
	ret = sidr(id) ? sidr_send(id) : req_send(id);
	if (ret) {
		ibcm_init(&id->ib, id->local_id);	/* nothing waits for an answer */
		id->state = CM_DISCONNECTED;
		event(id, RDMA_CM_EVENT_UNREACHABLE, ret, NULL);
	}
	return true;
}

void cm_ibcm_rx(struct cm_dev *d, struct ibcm_rx *rx)
{
	const struct sr_cm_mad *m = &rx->mad;
	struct ibcm_out out;
	struct cm_id *id = NULL;
	uint32_t rid;

	cm_count("cm_mads_rcvd");
	switch (m->hdr.attr_id) {
	case SR_CM_ATTR_REQ:
		on_req(d, rx);
		return;
	case SR_CM_ATTR_SIDR_REQ:
		on_sidr_req(d, rx);
		return;
	case SR_CM_ATTR_SIDR_REP:
		on_sidr_rep(d, rx);
		return;
	case SR_CM_ATTR_CLASS_PORT_INFO:
		on_class_port_info(d, rx);
		return;
	default:
		break;
	}
	rid = mad_remote_id(m);
	for (struct cm_id *i = cm.ids; i; i = i->next) {
		if (i->ibcm && i->dev == d && i->local_id == rid && i->state != CM_DESTROYING) {
			id = i;
			break;
		}
	}
	/* Only the peer this connection talks to may move it (once redirected, exactly the QP1
	 * it was sent to: a late MAD of the one before is not its peer's). */
	if (id && (!gid_ip_eq(id->peer_gid.raw, rx->sgid.raw) ||
		   (id->ib_redirects && memcmp(id->peer_gid.raw, rx->sgid.raw, 16))))
		id = NULL;
	if (!id) {
		cm_count("cm_drop_unknown");
		if (m->hdr.attr_id == SR_CM_ATTR_DREQ) {
			/* A DREQ for a connection gone here: a DREP lets the peer finish (12.9.8) */
			struct sr_cm_mad r;

			memset(&r, 0, sizeof(r));
			r.hdr = m->hdr;
			r.hdr.method = SR_MAD_METHOD_SEND;	/* whatever the DREQ's said */
			r.hdr.status = 0;
			r.hdr.attr_id = SR_CM_ATTR_DREP;
			r.drep.local_comm_id = rid;
			r.drep.remote_comm_id = m->dreq.local_comm_id;
			send_mad(d, rx->ah, &r);
		}
		return;
	}
	if (rx->softrdma)
		id->peer_sr = true;	/* its QP1 answers the liveness probe */
	if (m->hdr.attr_id == SR_CM_ATTR_REJ && m->rej.reason == SR_CM_REJ_PORT_CM_REDIRECT &&
	    m->rej.msg_rejected == SR_CM_MSG_REQ && !id->listener && id->state == CM_REQ_SENT &&
	    (id->ib.state == IBCM_REQ_SENT || id->ib.state == IBCM_MRA_REQ_RCVD) &&
	    redirect_follow(id, rx, m->rej.ari_len, m->rej.ari))
		return;
	ibcm_recv(&id->ib, m, now_ns(), &out);
	if (out.dropped)
		cm_count("cm_drop_unknown");
	handle(id, &out, m);
}

static bool cm_ibcm_event(void *ptr)
{
	struct cm_dev *d = NULL;
	struct ibv_cq *cq;
	void *cq_ctx;
	struct ibcm_rx rx;

	for (int i = 0; i < cm_ndevs; i++)
		if (ptr == &cm_devs[i])
			d = &cm_devs[i];
	if (!d || !d->agent)
		return false;
	while (!ibv_get_cq_event(d->agent->ch, &cq, &cq_ctx))
		ibv_ack_cq_events(cq, 1);
	for (;;) {
		int n;

		while ((n = ibcm_agent_recv(d->agent, &rx, 0)) == 1) {
			cm_ibcm_rx(d, &rx);
			if (rx.ah)
				ibv_destroy_ah(rx.ah);
		}
		/* Re-arm, then look once more: a MAD that came in between is not left behind. */
		ibv_req_notify_cq(d->agent->rcq, 0);
		n = ibcm_agent_recv(d->agent, &rx, 0);
		if (n != 1)
			break;
		cm_ibcm_rx(d, &rx);
		if (rx.ah)
			ibv_destroy_ah(rx.ah);
	}
	return true;
}

uint64_t cm_ibcm_timers(void)
{
	uint64_t now = now_ns(), next = UINT64_MAX;

	for (struct cm_id *id = cm.ids; id; id = id->next) {
		struct ibcm_out out;

		if (id->ibcm && id->state == CM_ESTABLISHED && id->peer_sr && !sidr(id)) {
			uint64_t t = probe(id, now);

			if (t < next)
				next = t;
		}
		if (!id->ibcm || id->state == CM_DESTROYING || !id->ib.deadline)
			continue;
		if (sidr(id)) {
			/* a SIDR_REQ unanswered: sent again, then UNREACHABLE (12.11.2) */
			if (now >= id->ib.deadline) {
				if (id->state != CM_REQ_SENT) {
					id->ib.deadline = 0;
				} else if (id->ib.retries--) {
					send_mad(id->dev, id->ib_ah, &id->ib.last);
					id->ib.deadline = now + id->ib.wait_ns;
				} else {
					id->ib.deadline = 0;
					cm_count("cm_timeouts");
					id->state = CM_DISCONNECTED;
					event(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL);
				}
			}
			if (id->ib.deadline && id->ib.deadline < next)
				next = id->ib.deadline;
			continue;
		}
		if (now >= id->ib.deadline) {
			ibcm_timer(&id->ib, now, &out);
			handle(id, &out, NULL);
		}
		if (id->ib.deadline && id->ib.deadline < next)
			next = id->ib.deadline;
	}
	uint64_t t = redirect_timers(now);

	if (t < next)
		next = t;
	/* the guardian's table follows the connections (guard.c) */
	cm_guard_sync();
	if (next == UINT64_MAX)
		return 60000;
	return next <= now ? 0 : (next - now + 999999) / 1000000;
}

/* ---- the consumer's calls ---------------------------------------------------------------------- */
/* The GID of the peer's QP1 for an rdma_cm destination: a local device's own when the address
 * is one of this process's devices' (loopback included: the kernel's rdma_cm also loops a
 * loopback destination back to the local device), else the standard RoCEv2 GID of the
 * address (port 4791). */
static void dst_gid(const struct cm_id *id, union ibv_gid *g)
{
	const struct sockaddr *dst = &id->id.route.addr.dst_addr;
	bool loop = false;

	memset(g, 0, sizeof(*g));
	if (dst->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)dst;

		g->raw[10] = g->raw[11] = 0xff;
		memcpy(&g->raw[12], &s->sin_addr, 4);
		loop = (ntohl(s->sin_addr.s_addr) >> 24) == 127;
	} else {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)dst;

		memcpy(g->raw, &s6->sin6_addr, 16);
		loop = IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr) ||
		       (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && s6->sin6_addr.s6_addr[12] == 127);
	}
	if (loop && id->dev) {
		*g = id->dev->gid;
		return;
	}
	for (int i = 0; i < cm_ndevs; i++) {
		if (gid_ip_eq(cm_devs[i].gid.raw, g->raw)) {
			*g = cm_devs[i].gid;	/* its own GID: the port it may name included */
			return;
		}
	}
}

static uint64_t ca_guid(struct cm_dev *d)
{
	return be64toh(ibv_get_device_guid(d->ctx->device));
}

/* An active id starts speaking the IB CM: a fresh address handle to the peer's GID through the
 * device's QP1 agent (every MAD of the exchange goes there) and a fresh CM state. */
static int active_start(struct cm_id *id)
{
	if (id->ib_ah)
		ibv_destroy_ah(id->ib_ah);
	id->ib_ah = ibcm_agent_ah(id->dev->agent, &id->peer_gid);
	if (!id->ib_ah)
		return errno ? -errno : -ENOMEM;
	id->ibcm = true;
	ibcm_init(&id->ib, id->local_id);
	return 0;
}

/* The SIDR_REQ of a UD id, to id->peer_gid's QP1, with rdma_connect's private data. */
static int sidr_send(struct cm_id *id)
{
	struct ibcm_rdma_conn c;
	struct sr_cm_mad m;
	int ret;

	ibcm_rdma_defaults(&c);
	c.ps = (uint16_t)id->id.ps;
	memcpy(&c.src, &id->id.route.addr.src_addr, sizeof(struct sockaddr_in6));
	memcpy(&c.dst, &id->id.route.addr.dst_addr, sizeof(struct sockaddr_in6));
	c.pdata = id->ib_pdata;
	c.pdata_len = id->ib_pdata_len;
	memset(&m, 0, sizeof(m));
	ret = ibcm_rdma_sidr_req_build(&m.sidr_req, &c);
	if (ret)
		return ret;
	m.sidr_req.request_id = id->local_id;
	m.hdr = (struct sr_mad_hdr){
		.base_version = SR_MAD_BASE_VERSION, .mgmt_class = SR_MAD_CLASS_CM,
		.class_version = SR_MAD_CM_CLASS_VERSION, .method = SR_MAD_METHOD_SEND,
		.tid = new_tid(id->local_id), .attr_id = SR_CM_ATTR_SIDR_REQ,
	};
	ret = active_start(id);
	if (ret)
		return ret;
	id->ib.last = m;
	id->ib.have_last = true;
	id->ib.retries = IBCM_MAX_RETRIES;
	id->ib.wait_ns = ibcm_timeout_ns(IBCM_RESP_TIMEOUT) + 2 * 4096ull * (1u << 12);
	id->ib.deadline = now_ns() + id->ib.wait_ns;
	id->state = CM_REQ_SENT;
	send_mad(id->dev, id->ib_ah, &m);
	cm_kick();
	return 0;
}

/* rdma_accept / rdma_reject of a SIDR_REQ: the SIDR_REP (success with the UD QP's number and
 * Q_Key, or "rejected"), repeated to a retransmitted SIDR_REQ. */
static int sidr_answer(struct cm_id *id, uint8_t status, uint32_t qpn, const void *pdata,
		       uint8_t len)
{
	struct ibcm_rdma_conn c;
	struct sr_cm_mad m;
	int ret;

	ibcm_rdma_defaults(&c);
	c.sidr_status = status;
	c.qpn = qpn;
	c.qkey = id->qkey ? id->qkey : RDMA_UDP_QKEY;
	c.pdata = pdata;
	c.pdata_len = len;
	memset(&m, 0, sizeof(m));
	ret = ibcm_rdma_sidr_rep_build(&m.sidr_rep,
				       ibcm_rdma_service_id((uint16_t)id->id.ps,
							    ntohs(cm_sa_port(&id->id.route.addr.src_addr))),
				       &c);
	if (ret)
		return ret;
	m.sidr_rep.request_id = id->ib.remote_id;
	m.hdr = (struct sr_mad_hdr){
		.base_version = SR_MAD_BASE_VERSION, .mgmt_class = SR_MAD_CLASS_CM,
		.class_version = SR_MAD_CM_CLASS_VERSION, .method = SR_MAD_METHOD_SEND,
		.tid = id->ib.tid, .attr_id = SR_CM_ATTR_SIDR_REP,
	};
	id->ib.last = m;
	id->ib.have_last = true;
	send_mad(id->dev, id->ib_ah, &m);
	return 0;
}

int cm_ibcm_accept_ud(struct cm_id *id, struct rdma_conn_param *p)
{
	int ret;

	if (p && p->private_data_len > SR_CM_SIDR_REP_PDATA)
		return -EINVAL;
	ret = sidr_answer(id, SR_CM_SIDR_SUCCESS,
			  id->id.qp ? id->id.qp->qp_num : p ? p->qp_num : 0,
			  p ? p->private_data : NULL, p ? p->private_data_len : 0);
	if (!ret)
		id->state = CM_ESTABLISHED;
	return ret;
}

/* The REQ of a connected id, to id->peer_gid's QP1 (cm_ibcm_connect took the parameters). */
static int req_send(struct cm_id *id)
{
	struct ibcm_rdma_conn c;
	struct sr_cm_req req;
	struct ibcm_out out;
	int ret;

	id->peer_psn = rand32() & 0xffffff;	/* we receive from it; the REQ names it */
	ibcm_rdma_defaults(&c);
	c.ps = (uint16_t)id->id.ps;
	memcpy(&c.src, &id->id.route.addr.src_addr, sizeof(struct sockaddr_in6));
	memcpy(&c.dst, &id->id.route.addr.dst_addr, sizeof(struct sockaddr_in6));
	c.sgid = id->dev->gid;
	c.dgid = id->peer_gid;
	c.qp_type = cm_qpt(id);
	c.qpn = id->my_qpn;
	c.psn = id->peer_psn;
	c.responder_resources = id->responder_resources;
	c.initiator_depth = id->initiator_depth;
	c.retry_count = id->retry_count;
	c.rnr_retry_count = id->rnr_retry_count;
	c.mtu = (uint8_t)id->path_mtu;
	c.srq = id->id.srq != NULL || id->ib_srq;
	c.ca_guid = ca_guid(id->dev);
	c.remote_cm_response_timeout = IBCM_RESP_TIMEOUT;
	c.local_cm_response_timeout = IBCM_RESP_TIMEOUT;
	c.max_cm_retries = IBCM_MAX_RETRIES;
	c.traffic_class = id->tos;
	if (id->ack_timeout)
		c.local_ack_timeout = id->ack_timeout;
	c.pdata = id->ib_pdata;
	c.pdata_len = id->ib_pdata_len;
	ret = ibcm_rdma_req_build(&req, &c);
	if (ret)
		return ret;
	req.e2e_flow_control = id->flow_control;
	ret = active_start(id);
	if (ret)
		return ret;
	ret = ibcm_send_req(&id->ib, &req, new_tid(id->local_id), now_ns(), &out);
	if (ret)
		return ret;
	id->state = CM_REQ_SENT;
	handle(id, &out, NULL);
	cm_kick();	/* the CM thread's timer now has a deadline */
	return 0;
}

/*
 * Where the peer's QP1 is. A destination elsewhere: its address as a RoCEv2 GID (dst_gid),
 * as the kernel's rdma_cm resolves it. A destination on this host (a loopback address, or
 * one of the host's own) may be served by another process's soft device, on another
 * 127.x.y.z or another UDP port (docs/gid.md): unless this process listens there itself, a
 * QP1 QUERY to the listener's rdma_cm port (its CM socket, as the private protocol reaches
 * it) asks that process for its QP1's GID, and the REQ goes once the REPLY is in
 * (cm_ibcm_resolved). The QUERY is retransmitted as the private protocol's REQ; nobody on
 * the port (ICMP port unreachable) ends in REJECTED (invalid service ID), no answer in
 * UNREACHABLE. Never sent off this host: kernel peers see only MADs.
 */
static int query_start(struct cm_id *id)
{
	const struct sockaddr *dst = &id->id.route.addr.dst_addr;
	struct cm_msg q = { .type = CM_MSG_QP1_QUERY, .src_id = id->local_id,
			    .ps = (uint16_t)id->id.ps,
			    .dst_port = ntohs(cm_sa_port(&id->id.route.addr.dst_addr)) };

	id->sock = cm_active_sock(dst->sa_family);
	if (!id->sock)
		return -ENOMEM;
	memset(&id->peer_cm, 0, sizeof(id->peer_cm));
	memcpy(&id->peer_cm, dst,
	       dst->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
	id->ibcm = true;
	ibcm_init(&id->ib, id->local_id);
	id->ib_resolving = true;
	id->state = CM_REQ_SENT;
	cm_count("cm_qp1_queries");
	cm_send(id, &q, true);	/* a send error is a lost datagram: retransmitted */
	return 0;
}

void cm_ibcm_resolved(struct cm_id *id, const union ibv_gid *gid)
{
	int ret;

	id->ib_resolving = false;
	id->peer_gid = *gid;
	ret = sidr(id) ? sidr_send(id) : req_send(id);
	if (ret) {
		id->state = CM_DISCONNECTED;
		event(id, RDMA_CM_EVENT_UNREACHABLE, ret, NULL);
	}
}

struct cm_dev *cm_ibcm_query_dev(const struct cm_sock *s, const struct sockaddr *to, uint16_t ps,
				 uint16_t port)
{
	if (!cm_ibcm_on() || cm_ibcm_open())
		return NULL;
	for (struct cm_id *i = cm.ids; i; i = i->next)
		if (i->lsock == s && i->id.ps == ps && cm_sa_port(&i->id.route.addr.src_addr) == htons(port) &&
		    (i->state == CM_LISTEN || i->state == CM_BOUND) && i->dev)
			return i->dev;
	/* no such listener (yet, or any more): the REQ itself gets the IB CM's answer */
	return cm_dev_for_local(to);
}

int cm_ibcm_connect(struct cm_id *id, struct rdma_conn_param *p)
{
	const struct sockaddr *dst = &id->id.route.addr.dst_addr;
	int ret = cm_ibcm_open();

	if (ret)
		return ret;
	if (!id->dev || !id->dev->agent)
		return -ENODEV;
	if (!sidr(id)) {
		id->my_qpn = id->id.qp ? id->id.qp->qp_num : p ? p->qp_num : 0;
		if (p)
			cm_take_conn_param(id, p);
		id->seg = 0;	/* large segments are the private protocol's; in-band offers work */
	}
	/* rdma_connect checked the length against the message's limit (at most 216) */
	id->ib_pdata_len = p && p->private_data ? p->private_data_len : 0;
	if (id->ib_pdata_len)
		memcpy(id->ib_pdata, p->private_data, id->ib_pdata_len);
	id->ib_srq = p && p->srq;
	id->ib_redirects = 0;
	if (cm_addr_on_host(dst) && !cm_local_listener(dst, cm_sa_port(dst)))
		return query_start(id);
	dst_gid(id, &id->peer_gid);
	return sidr(id) ? sidr_send(id) : req_send(id);
}

int cm_ibcm_accept(struct cm_id *id, struct rdma_conn_param *p)
{
	struct ibcm_rdma_conn c;
	struct sr_cm_rep rep;
	struct ibcm_out out;
	uint8_t rnr = 7;
	int ret;

	if (p) {
		if (p->private_data_len > SR_CM_REP_PDATA)
			return -EINVAL;
		/* What the passive side grants: no more than the requester asked for. */
		if (p->responder_resources < id->responder_resources)
			id->responder_resources = p->responder_resources;
		if (p->initiator_depth < id->initiator_depth)
			id->initiator_depth = p->initiator_depth;
		rnr = p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count;	/* the requester's */
	}
	id->my_qpn = id->id.qp ? id->id.qp->qp_num : p ? p->qp_num : 0;
	ret = id->id.qp ? cm_qp_to_rtr_rts(id, true) : 0;
	if (ret)
		return ret;
	ibcm_rdma_defaults(&c);
	c.qpn = id->my_qpn;
	c.psn = id->peer_psn;
	c.responder_resources = id->responder_resources;
	c.initiator_depth = id->initiator_depth;
	c.rnr_retry_count = rnr;
	c.srq = id->id.srq != NULL || (p && p->srq);
	c.ca_guid = ca_guid(id->dev);
	c.pdata = p ? p->private_data : NULL;
	c.pdata_len = p ? p->private_data_len : 0;
	ret = ibcm_rdma_rep_build(&rep, &c);
	if (ret)
		return ret;
	rep.e2e_flow_control = id->flow_control;
	ret = ibcm_send_rep(&id->ib, &rep, now_ns(), &out);
	if (ret)
		return ret;
	id->state = CM_REP_SENT;
	handle(id, &out, NULL);
	cm_kick();
	return 0;
}

int cm_ibcm_reject(struct cm_id *id, const void *pdata, uint8_t len, uint16_t reason)
{
	struct ibcm_out out;
	int ret;

	if (sidr(id)) {
		if (len > SR_CM_SIDR_REP_PDATA)
			return -EINVAL;
		return sidr_answer(id, SR_CM_SIDR_REJECT, 0, pdata, len);
	}
	if (len > SR_CM_REJ_PDATA)
		return -EINVAL;
	ret = ibcm_send_rej(&id->ib, reason, pdata, len, now_ns(), &out);
	if (ret)
		return ret;
	handle(id, &out, NULL);
	return 0;
}

int cm_ibcm_establish(struct cm_id *id)
{
	struct ibcm_out out;
	int ret = ibcm_send_rtu(&id->ib, NULL, now_ns(), &out);

	if (ret)
		return ret;
	handle(id, &out, NULL);
	id->state = CM_ESTABLISHED;
	return 0;
}

int cm_ibcm_disconnect(struct cm_id *id)
{
	struct ibcm_out out;

	switch (id->state) {
	case CM_ESTABLISHED:
	case CM_REP_SENT:
	case CM_REP_RCVD:
		cm_qp_to_err(id);
		if (ibcm_send_dreq(&id->ib, NULL, now_ns(), &out)) {
			/* no DREQ from this state (REP received, no RTU sent): a REJ ends it */
			if (!ibcm_send_rej(&id->ib, SR_CM_REJ_CONSUMER_DEFINED, NULL, 0, now_ns(),
					   &out))
				handle(id, &out, NULL);
			ended(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, false);
			return 0;
		}
		id->state = CM_DREQ_SENT;
		handle(id, &out, NULL);
		cm_kick();
		return 0;
	case CM_DISCONNECTED:
		/* The peer's DREQ came first (answered then): the QP leaves now, as the kernel's
		 * rdma_disconnect moves it to ERR. */
		cm_qp_to_err(id);
		return 0;
	case CM_DREQ_SENT:
		return 0;
	default:
		return -EINVAL;
	}
}

void cm_ibcm_destroy(struct cm_id *id)
{
	struct ibcm_out out;
	uint64_t now = now_ns();

	cm_guard_drop(id);	/* its DREQ (if any) goes now, from here */

	if (sidr(id)) {
		/* SIDR leaves nothing to tear down; a request not answered yet is rejected */
		if (id->state == CM_REQ_RCVD) {
			sidr_answer(id, SR_CM_SIDR_REJECT, 0, NULL, 0);
			if (id->listener)
				id->listener->pending--;
		}
		goto out;
	}
	switch (id->state) {
	case CM_ESTABLISHED:
	case CM_REP_SENT:
		if (!ibcm_send_dreq(&id->ib, NULL, now, &out))	/* tell the peer, as the kernel */
			handle(id, &out, NULL);
		break;
	case CM_REP_RCVD:
	case CM_REQ_RCVD:
		if (!ibcm_send_rej(&id->ib, SR_CM_REJ_CONSUMER_DEFINED, NULL, 0, now, &out))
			handle(id, &out, NULL);
		if (id->state == CM_REQ_RCVD && id->listener)
			id->listener->pending--;
		break;
	case CM_REQ_SENT:
		/* The REQ is withdrawn: a REJ (reason Timeout, as the kernel's ib_cm sends when
		 * an id in REQ_SENT is destroyed) keeps the peer from waiting on its REP. */
		if (id->ib.have_last)
			reject_raw(id->dev, id->ib_ah, &id->ib.last, id->local_id, 0, SR_CM_MSG_REQ,
				   SR_CM_REJ_TIMEOUT);
		break;
	default:
		break;
	}
	if (id->listener && id->ib.remote_id)
		timewait_add(id);
out:
	id->ib.deadline = 0;
	if (id->ib_ah)
		ibv_destroy_ah(id->ib_ah);
	id->ib_ah = NULL;
}

/* ---- what cm.c has the IB CM do (cm.h: struct cm_ibcm_hooks) ------------------------------- */
static const struct cm_ibcm_hooks ibcm_hooks = {
	.event = cm_ibcm_event,
	.timers = cm_ibcm_timers,
	.query_dev = cm_ibcm_query_dev,
	.resolved = cm_ibcm_resolved,
	.redirect_reply = redirect_reply,
	.redirect_unreachable = redirect_unreachable,
};

__attribute__((constructor)) static void ibcm_hooks_install(void)
{
	cm.ibcm = &ibcm_hooks;
}
