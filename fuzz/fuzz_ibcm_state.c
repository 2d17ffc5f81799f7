/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: IB CM MADs into the IB CM's state machines as librdmacm runs them with
 * SOFTRDMA_CM_WIRE=ibcm (src/cm/ibcm/drive.c over ibcm.c and rdma.c), not just the codec.
 * librdmacm's sources are linked in with the verbs face and the engine. A listening id of
 * RDMA_PS_TCP and one of RDMA_PS_UDP (SIDR) on 127.0.0.1 live for the whole run; the input
 * makes active ids (rdma_connect: REQ_SENT; rdma_connect of a UD id: a SIDR_REQ), children
 * (from its REQs and SIDR_REQs), accepts, rejects, disconnects, establishes and destroys them,
 * and moves time forward. MADs reach the ids through cm_ibcm_rx, the CM thread's own per-MAD
 * path (cm_ibcm_event), with the sender's GID and an address handle to answer it, as the MAD
 * agent gives them.
 *
 * The peer is the device itself: the CM's device QP1 is taken out of the CM thread's epoll set,
 * so what the CM sends (to its own GID: rdma_cm loops a loopback destination back to the local
 * device) waits in QP1's receive queue, where the harness can deliver it back (a real loopback
 * conversation: REQ, REP, RTU, DREQ, DREP, retransmissions, REJs), mutated or not, or drop it.
 * A stranger is another address of 127.0.0.0/8, whose answers go to a socket of the harness.
 *
 * Input: records, each [op][a][b] (and for op 0 a MAD body):
 *   op % 8 == 0, 1  a MAD from the input: attribute (a % 13: REQ, MRA, REJ, REP, RTU, DREQ,
 *                   DREP, SIDR_REQ, SIDR_REP, LAP, APR, ClassPortInfo, 0x0000), control b, then
 *                   [len][len bytes] of the message body (zero-padded to 232), or with b & 0x01
 *                   the whole MAD from its header. b: 0x02 receiver's comm ID := the target's;
 *                   0x04 sender's comm ID := the one the target knows the peer by (and TID); 0x08
 *                   from the stranger; 0x10..0x30 target (newest active id, newest child, UD
 *                   active id, newest UD child); 0x40 a valid rdma_cm REQ / SIDR_REQ for the
 *                   listener (service ID, rdma_cm header, the sender's GID, RC; with 0x02,
 *                   for the port after the listener's, where nobody listens); 0x80 with
 *                   softrdma's GRH marker and a softrdma device's UDP source port (a softrdma
 *                   peer: its connections are probed with Get(ClassPortInfo) once
 *                   established, and ended when the answers stop; its REQ or SIDR_REQ for a
 *                   port no listener here takes waits for the redirect's QP1 QUERY to the
 *                   device's address). A REJ reason 24 / SIDR_REP status 4 from the input
 *                   moves an active id on to the GID its ClassPortInfo names, if it passes
 *                   the requester's checks (docs/cm.md: port and CM redirect).
 *   2               the next MAD the CM sent (from QP1), as it is, or with byte b ^= a (a != 0)
 *   3               drop the next MAD the CM sent (lost)
 *   4               time moves forward by (b + 1) << (a % 26) ns; the IB CM's timers run
 *   5, 6, 7         an application call, a % 8: connect a new active id (up to 4); accept a
 *                   child (b: which, private data length b >> 3 * 8, over 196 refused); reject
 *                   a child; disconnect; rdma_establish; destroy an id; connect a UD id (SIDR);
 *                   accept or reject a UD child
 * Every event is taken and acknowledged after each record; at the end every id but the two
 * listeners is destroyed and QP1 is emptied.
 *
 * What counts as a crash besides ASan/UBSan, a hang (libFuzzer -timeout) and a leak:
 *  - an id in a state the IBA forbids (12.9): an IB CM state out of range; a state that waits
 *    for an answer or the time-wait (REQ_SENT, REP_SENT, DREQ_SENT, MRA_REQ_RCVD,
 *    MRA_REP_RCVD, TIMEWAIT) with no timer armed; retries left above Max CM Retries; an rdma_cm
 *    state that disagrees with the IB CM's (ESTABLISHED but not ESTABLISHED; REQ_SENT but not
 *    REQ_SENT / MRA_REQ_RCVD; REQ_RCVD but not REQ_RCVD / MRA_REQ_SENT; REP_SENT but not
 *    REP_SENT / MRA_REP_RCVD; REP_RCVD but not REP_RCVD / MRA_REP_SENT; DREQ_SENT but not
 *    DREQ_SENT); two live ids with one communication ID;
 *  - a listener whose count of pending requests is not the number of its children still
 *    waiting for accept / reject (a count that drifts fills the backlog for good, or lets it
 *    overflow);
 *  - a MAD the CM sent that does not decode as a CM MAD, or with a method its attribute does
 *    not use (Send; Get / GetResp for ClassPortInfo);
 *  - an active id redirected (REJ 24, SIDR_REP status 4) more than CM_IBCM_MAX_REDIRECTS
 *    times, to another IP address than its destination's, or back to a GID its REQ went to;
 *  - an rdma_* call that crashes or an rdma_destroy_id that fails.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "cm/cm.h"
#include "cm/ibcm/agent.h"

#define MAX_ACTIVE 4
#define MAX_CHILDREN 32
#define QUEUE 64

static struct rdma_event_channel *ch;
static struct rdma_cm_id *listener, *ulistener;
static struct sockaddr_in laddr, uladdr;	/* the listeners' addresses */
static struct cm_dev *dev;
static struct ibcm_agent *agent;
static union ibv_gid peer_gid, stranger_gid;
static int sink_fd = -1;			/* the stranger's QP1: what is sent there */

static struct rdma_cm_id *active[MAX_ACTIVE], *uactive;
static int nactive;
static struct rdma_cm_id *children[MAX_CHILDREN], *uchildren[MAX_CHILDREN];
static int nchildren, nuchildren;

/* What the CM sent to itself, in order (the harness's view of QP1). */
static struct sr_cm_mad queue[QUEUE];
static bool queue_sr[QUEUE];	/* it came with softrdma's GRH marker */
static int qhead, qlen;

static bool verbose;	/* FUZZ_VERBOSE=1: what each record did, the ids' states after it */

static void die(const char *what)
{
	fprintf(stderr, "fuzz_ibcm_state: %s (errno %d)\n", what, errno);
	abort();
}

static void forbidden(const struct cm_id *id, const char *what)
{
	fprintf(stderr, "fuzz_ibcm_state: id 0x%x (rdma_cm state %d, IB CM %s, deadline %llu): %s\n",
		id->local_id, id->state, ibcm_state_name(id->ib.state),
		(unsigned long long)id->ib.deadline, what);
	abort();
}

/* ---- QP1 --------------------------------------------------------------------------------------- */
/* Moves what reached QP1 into the queue; waits up to wait_ms for the first one. */
static void pump(int wait_ms)
{
	struct ibcm_rx rx;
	int n;

	while ((n = ibcm_agent_recv(agent, &rx, wait_ms)) == 1) {
		wait_ms = 0;
		if (rx.ah)
			ibv_destroy_ah(rx.ah);
		/* Send for every CM message; Get / GetResp of ClassPortInfo: the liveness probe */
		if (rx.mad.hdr.attr_id == SR_CM_ATTR_CLASS_PORT_INFO
			    ? rx.mad.hdr.method != SR_MAD_METHOD_GET &&
				      rx.mad.hdr.method != (SR_MAD_METHOD_GET | SR_MAD_METHOD_RESP)
			    : rx.mad.hdr.method != SR_MAD_METHOD_SEND)
			die("the CM sent a MAD with a method its attribute does not use");
		if (qlen < QUEUE) {
			queue_sr[(qhead + qlen) % QUEUE] = rx.softrdma;
			queue[(qhead + qlen++) % QUEUE] = rx.mad;
		}
	}
	if (n < 0)
		die("ibcm_agent_recv");
	if (agent->dropped)
		die("the CM sent something that is not a CM MAD");
}

static bool queue_pop(struct sr_cm_mad *m, bool *sr)
{
	if (!qlen)
		pump(5);
	if (!qlen)
		return false;
	*sr = queue_sr[qhead];
	*m = queue[qhead];
	qhead = (qhead + 1) % QUEUE;
	qlen--;
	return true;
}

/* ---- events ------------------------------------------------------------------------------------ */
static void drain_events(void)
{
	struct rdma_cm_event *ev;

	while (rdma_get_cm_event(ch, &ev) == 0) {
		if (verbose)
			fprintf(stderr, "  event %s on id 0x%x, status %d\n", rdma_event_str(ev->event),
				cm_id(ev->id)->local_id, ev->status);
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			bool ud = ev->listen_id == ulistener;
			struct rdma_cm_id **v = ud ? uchildren : children;
			int *n = ud ? &nuchildren : &nchildren;

			if (*n < MAX_CHILDREN) {
				v[(*n)++] = ev->id;
			} else {
				rdma_ack_cm_event(ev);
				rdma_reject(ev->id, NULL, 0);
				if (rdma_destroy_id(ev->id))
					die("rdma_destroy_id (a child over the harness's limit)");
				continue;
			}
		}
		rdma_ack_cm_event(ev);
	}
}

static bool wait_event(enum rdma_cm_event_type want)
{
	for (int i = 0; i < 300; i++) {
		struct rdma_cm_event *ev;
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };

		while (rdma_get_cm_event(ch, &ev) == 0) {
			enum rdma_cm_event_type t = ev->event;

			rdma_ack_cm_event(ev);
			if (t == want)
				return true;
		}
		poll(&p, 1, 10);
	}
	return false;
}

/* ---- what the IBA allows -------------------------------------------------------------------- */
static bool waits(enum ibcm_state s)
{
	return s == IBCM_REQ_SENT || s == IBCM_REP_SENT || s == IBCM_DREQ_SENT ||
	       s == IBCM_MRA_REQ_RCVD || s == IBCM_MRA_REP_RCVD || s == IBCM_TIMEWAIT;
}

static void dump(void)
{
	pthread_mutex_lock(&cm.lock);
	for (struct cm_id *id = cm.ids; id; id = id->next)
		fprintf(stderr, "  id 0x%x ps 0x%x: rdma_cm state %d, IB CM %s (remote 0x%x), "
			"deadline %s, pending %d\n", id->local_id, id->id.ps, id->state,
			ibcm_state_name(id->ib.state), id->ib.remote_id,
			id->ib.deadline ? "armed" : "none", id->pending);
	fprintf(stderr, "  QP1 holds %d MADs\n", qlen);
	pthread_mutex_unlock(&cm.lock);
}

static void check_ids(void)
{
	pthread_mutex_lock(&cm.lock);
	for (struct cm_id *id = cm.ids; id; id = id->next) {
		enum ibcm_state s = id->ib.state;

		if (id->state == CM_DESTROYING)
			continue;
		for (struct cm_id *o = id->next; o; o = o->next)
			if (o->state != CM_DESTROYING && o->local_id == id->local_id)
				forbidden(id, "two live ids with one communication ID");
		if (id->state == CM_LISTEN) {
			int waiting = 0;

			for (struct cm_id *c = cm.ids; c; c = c->next)
				waiting += c->listener == id && c->state == CM_REQ_RCVD;
			if (waiting != id->pending) {
				fprintf(stderr, "fuzz_ibcm_state: pending %d, children waiting %d\n",
					id->pending, waiting);
				forbidden(id, "a listener's pending count is not its waiting children");
			}
			continue;
		}
		if (id->ib_redirects) {
			/* A redirect moves a requester only to another port of the address it
			 * asked for, never back to a GID its REQ already went to, and at most
			 * CM_IBCM_MAX_REDIRECTS times (docs/cm.md, port and CM redirect). */
			if (id->ib_redirects > CM_IBCM_MAX_REDIRECTS)
				forbidden(id, "more redirects followed than CM_IBCM_MAX_REDIRECTS");
			for (int i = 0; i < id->ib_redirects; i++) {
				const uint8_t *g = id->ib_visited[i].raw;

				if (memcmp(g + 12, id->peer_gid.raw + 12, 4) ||
				    g[10] != 0xff || g[11] != 0xff || id->peer_gid.raw[10] != 0xff ||
				    id->peer_gid.raw[11] != 0xff)
					forbidden(id, "redirected to another address");
				if (!memcmp(g, id->peer_gid.raw, 16))
					forbidden(id, "redirected back to a GID its REQ went to");
				for (int j = 0; j < i; j++)
					if (!memcmp(g, id->ib_visited[j].raw, 16))
						forbidden(id, "redirected in a circle");
			}
		}
		if (!id->ibcm || id->id.ps == RDMA_PS_UDP)
			continue;	/* SIDR ids do not run the connection state machine */
		if ((unsigned)s > IBCM_TIMEWAIT)
			forbidden(id, "IB CM state out of range");
		if (waits(s) && !id->ib.deadline)
			forbidden(id, "waits for an answer or the time-wait with no timer");
		if (id->ib.retries > id->ib.max_retries)
			forbidden(id, "more retries left than Max CM Retries");
		switch (id->state) {
		case CM_ESTABLISHED:
			if (s != IBCM_ESTABLISHED)
				forbidden(id, "rdma_cm ESTABLISHED, the IB CM not");
			break;
		case CM_REQ_SENT:
			/* (or still asking another process of this host for its QP1's GID) */
			if (s != IBCM_REQ_SENT && s != IBCM_MRA_REQ_RCVD &&
			    !(id->ib_resolving && s == IBCM_IDLE))
				forbidden(id, "rdma_cm REQ_SENT, the IB CM not waiting for a REP");
			break;
		case CM_REQ_RCVD:
			if (s != IBCM_REQ_RCVD && s != IBCM_MRA_REQ_SENT)
				forbidden(id, "rdma_cm REQ_RCVD, the IB CM not holding a REQ");
			break;
		case CM_REP_SENT:
			if (s != IBCM_REP_SENT && s != IBCM_MRA_REP_RCVD)
				forbidden(id, "rdma_cm REP_SENT, the IB CM not waiting for an RTU");
			break;
		case CM_REP_RCVD:
			if (s != IBCM_REP_RCVD && s != IBCM_MRA_REP_SENT)
				forbidden(id, "rdma_cm REP_RCVD, the IB CM not holding a REP");
			break;
		case CM_DREQ_SENT:
			if (s != IBCM_DREQ_SENT)
				forbidden(id, "rdma_cm DREQ_SENT, the IB CM not waiting for a DREP");
			break;
		default:
			break;
		}
	}
	pthread_mutex_unlock(&cm.lock);
}

/* ---- setup ------------------------------------------------------------------------------------- */
static void listen_on(struct rdma_cm_id **l, struct sockaddr_in *a, enum rdma_port_space ps)
{
	struct sockaddr_in any = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	if (rdma_create_id(ch, l, NULL, ps) || rdma_bind_addr(*l, (struct sockaddr *)&any) ||
	    rdma_listen(*l, 8))
		die("listener");
	*a = any;
	a->sin_port = rdma_get_src_port(*l);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sockaddr_in s = { .sin_family = AF_INET };
	socklen_t sl = sizeof(s);

	(void)argc;
	(void)argv;
	verbose = getenv("FUZZ_VERBOSE") && atoi(getenv("FUZZ_VERBOSE"));
	setenv("SOFTRDMA_CM_WIRE", "ibcm", 1);
	setenv("SOFTRDMA_DIRECT", "0", 1);
	setenv("SOFTRDMA_LOG", "error", 1);
	setenv("SOFTRDMA_STATS_DIR", "/tmp", 0);
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	listen_on(&listener, &laddr, RDMA_PS_TCP);
	listen_on(&ulistener, &uladdr, RDMA_PS_UDP);

	pthread_mutex_lock(&cm.lock);
	if (cm_ndevs < 1 || cm_ibcm_open())
		die("no device, or no QP1 agent on it");
	dev = &cm_devs[0];
	agent = dev->agent;
	/* QP1 is the harness's from now on: the CM thread no longer reads it. */
	epoll_ctl(cm.epfd, EPOLL_CTL_DEL, agent->ch->fd, NULL);
	peer_gid = dev->gid;
	pthread_mutex_unlock(&cm.lock);

	/* The stranger: another address of 127/8 (not the device's), a port of the harness. */
	s.sin_addr.s_addr = htonl(0x7f000000u | (0x5au << 16) | 0x0207u);
	if (!memcmp(&s.sin_addr, &peer_gid.raw[12], 4))
		s.sin_addr.s_addr ^= htonl(0x00010000);
	sink_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sink_fd < 0 || bind(sink_fd, (struct sockaddr *)&s, sizeof(s)) ||
	    getsockname(sink_fd, (struct sockaddr *)&s, &sl))
		die("the stranger's socket");
	memset(&stranger_gid, 0, sizeof(stranger_gid));
	stranger_gid.raw[8] = (uint8_t)(ntohs(s.sin_port) >> 8);	/* docs/gid.md: the port form */
	stranger_gid.raw[9] = (uint8_t)ntohs(s.sin_port);
	stranger_gid.raw[10] = stranger_gid.raw[11] = 0xff;
	memcpy(&stranger_gid.raw[12], &s.sin_addr, 4);
	return 0;
}

/* ---- MADs -------------------------------------------------------------------------------------- */
static void deliver(const struct sr_cm_mad *m, bool stranger, bool softrdma)
{
	struct ibcm_rx rx;

	memset(&rx, 0, sizeof(rx));
	rx.mad = *m;
	rx.softrdma = softrdma;
	rx.sgid = stranger ? stranger_gid : peer_gid;
	/* a softrdma sender's own UDP port (the GID's port form, else 4791), as the GRH marker
	 * gives it: such a requester is redirected to another process of the address */
	if (softrdma) {
		uint16_t port = (uint16_t)(rx.sgid.raw[8] << 8 | rx.sgid.raw[9]);

		rx.sport = port ? port : 4791;
	}
	rx.src_qp = SR_GSI_QPN;
	rx.ah = ibcm_agent_ah(agent, &rx.sgid);
	if (!rx.ah)
		die("ibcm_agent_ah");
	if (verbose)
		fprintf(stderr, "  deliver %s from the %s\n", sr_cm_attr_name(m->hdr.attr_id),
			stranger ? "stranger" : "peer");
	pthread_mutex_lock(&cm.lock);
	cm_ibcm_rx(dev, &rx);
	pthread_mutex_unlock(&cm.lock);
	if (rx.ah)
		ibv_destroy_ah(rx.ah);
}

static struct cm_id *target(int t)
{
	switch (t) {
	case 0: return nactive ? cm_id(active[nactive - 1]) : NULL;
	case 1: return nchildren ? cm_id(children[nchildren - 1]) : NULL;
	case 2: return uactive ? cm_id(uactive) : NULL;
	default: return nuchildren ? cm_id(uchildren[nuchildren - 1]) : NULL;
	}
}

/* rdma_cm's REQ / SIDR_REQ for a listener of port space ps at *to, from the sender's gid. */
static void rdma_request(struct sr_cm_mad *m, uint16_t ps, const struct sockaddr_in *to,
			 const union ibv_gid *from)
{
	struct sr_cma_hdr h = { .version = 0, .ip_version = 4, .port = 40000 };
	uint8_t *pdata = m->hdr.attr_id == SR_CM_ATTR_REQ ? m->req.pdata : m->sidr_req.pdata;
	uint64_t sid = sr_cm_service_id(ps, ntohs(to->sin_port));

	memcpy(&h.src_addr[12], &from->raw[12], 4);
	memcpy(&h.dst_addr[12], &to->sin_addr, 4);
	sr_cma_hdr_encode(&h, pdata);
	if (m->hdr.attr_id == SR_CM_ATTR_REQ) {
		m->req.service_id = sid;
		memcpy(m->req.primary.local_gid, from->raw, 16);
		if (m->req.transport_service_type > SR_CM_TST_UC)
			m->req.transport_service_type = SR_CM_TST_RC;
	} else {
		m->sidr_req.service_id = sid;
	}
}

static const uint16_t attrs[] = {
	SR_CM_ATTR_REQ, SR_CM_ATTR_MRA, SR_CM_ATTR_REJ, SR_CM_ATTR_REP, SR_CM_ATTR_RTU,
	SR_CM_ATTR_DREQ, SR_CM_ATTR_DREP, SR_CM_ATTR_SIDR_REQ, SR_CM_ATTR_SIDR_REP,
	SR_CM_ATTR_LAP, SR_CM_ATTR_APR, SR_CM_ATTR_CLASS_PORT_INFO, 0,
};

/* A MAD from the input: the body (or the whole MAD) and the fix-ups of ctl. */
static void input_mad(uint8_t a, uint8_t ctl, const uint8_t *body, size_t len)
{
	uint8_t buf[SR_MAD_LEN];
	struct sr_cm_mad m;
	struct sr_mad_hdr h = {
		.base_version = SR_MAD_BASE_VERSION, .mgmt_class = SR_MAD_CLASS_CM,
		.class_version = SR_MAD_CM_CLASS_VERSION, .method = SR_MAD_METHOD_SEND,
		.tid = 0x42db4581eull, .attr_id = attrs[a % (sizeof(attrs) / sizeof(attrs[0]))],
	};
	struct cm_id *t;
	uint32_t *rid = NULL, *lid = NULL;

	memset(buf, 0, sizeof(buf));
	if (ctl & 0x01) {
		memcpy(buf, body, len < SR_MAD_LEN ? len : SR_MAD_LEN);
	} else {
		sr_mad_hdr_encode(&h, buf);
		memcpy(buf + SR_MAD_HDR_LEN, body, len < SR_MAD_DATA_LEN ? len : SR_MAD_DATA_LEN);
	}
	/* What the agent hands on: only MADs that decode, and ClassPortInfo (its header only);
	 * fuzz_mad covers the rest. */
	switch (sr_cm_mad_decode(&m, buf, sizeof(buf))) {
	case 0:
		break;
	case SR_MAD_EATTR:
		if (m.hdr.attr_id == SR_CM_ATTR_CLASS_PORT_INFO)
			break;
		return;
	default:
		return;
	}
	pthread_mutex_lock(&cm.lock);
	t = target((ctl >> 4) & 3);
	switch (m.hdr.attr_id) {
	case SR_CM_ATTR_REQ: lid = &m.req.local_comm_id; break;
	case SR_CM_ATTR_MRA: rid = &m.mra.remote_comm_id; lid = &m.mra.local_comm_id; break;
	case SR_CM_ATTR_REJ: rid = &m.rej.remote_comm_id; lid = &m.rej.local_comm_id; break;
	case SR_CM_ATTR_REP: rid = &m.rep.remote_comm_id; lid = &m.rep.local_comm_id; break;
	case SR_CM_ATTR_RTU: rid = &m.rtu.remote_comm_id; lid = &m.rtu.local_comm_id; break;
	case SR_CM_ATTR_DREQ: rid = &m.dreq.remote_comm_id; lid = &m.dreq.local_comm_id; break;
	case SR_CM_ATTR_DREP: rid = &m.drep.remote_comm_id; lid = &m.drep.local_comm_id; break;
	case SR_CM_ATTR_SIDR_REQ: lid = &m.sidr_req.request_id; break;
	case SR_CM_ATTR_SIDR_REP: rid = &m.sidr_rep.request_id; break;
	default: break;
	}
	if (t && (ctl & 0x02) && rid)
		*rid = t->local_id;
	if (t && (ctl & 0x04)) {
		if (lid)
			*lid = t->ib.remote_id;
		m.hdr.tid = t->ib.tid;
		if (m.hdr.attr_id == SR_CM_ATTR_DREQ)
			m.dreq.remote_qpn = t->my_qpn;
	}
	pthread_mutex_unlock(&cm.lock);
	if (ctl & 0x40) {
		/* with 0x02 (which names no receiver's ID in a REQ or SIDR_REQ): for the port
		 * after the listener's, which no listener here takes (the redirect's QUERY) */
		struct sockaddr_in to = m.hdr.attr_id == SR_CM_ATTR_REQ ? laddr : uladdr;

		if (ctl & 0x02)
			to.sin_port = htons((uint16_t)(ntohs(to.sin_port) + 1));
		if (m.hdr.attr_id == SR_CM_ATTR_REQ)
			rdma_request(&m, RDMA_PS_TCP, &to, (ctl & 0x08) ? &stranger_gid : &peer_gid);
		else if (m.hdr.attr_id == SR_CM_ATTR_SIDR_REQ)
			rdma_request(&m, RDMA_PS_UDP, &to, (ctl & 0x08) ? &stranger_gid : &peer_gid);
	}
	deliver(&m, ctl & 0x08, ctl & 0x80);
}

/* The next MAD the CM sent, back to it (b ^= a at byte b, when a != 0). */
static void loop_back(uint8_t a, uint8_t b)
{
	struct sr_cm_mad m;
	bool sr;

	if (!queue_pop(&m, &sr))
		return;
	if (a) {
		uint8_t buf[SR_MAD_LEN];
		int rc;

		if (m.hdr.attr_id == SR_CM_ATTR_CLASS_PORT_INFO) {
			memset(buf, 0, sizeof(buf));
			sr_mad_hdr_encode(&m.hdr, buf);
		} else if (sr_cm_mad_encode(&m, buf)) {
			die("a MAD the CM sent does not encode");
		}
		buf[b] ^= a;
		rc = sr_cm_mad_decode(&m, buf, sizeof(buf));
		if (rc && !(rc == SR_MAD_EATTR && m.hdr.attr_id == SR_CM_ATTR_CLASS_PORT_INFO))
			return;
	}
	deliver(&m, false, sr);
}

/* ---- the application ----------------------------------------------------------------------- */
static void connect_new(bool ud)
{
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 7, .rnr_retry_count = 7, .qp_num = 0x123,
				     .private_data = "hello", .private_data_len = 5 };
	struct rdma_cm_id *id;

	if (ud ? uactive != NULL : nactive >= MAX_ACTIVE)
		return;
	if (rdma_create_id(ch, &id, NULL, ud ? RDMA_PS_UDP : RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)(ud ? &uladdr : &laddr), 1000) ||
	    !wait_event(RDMA_CM_EVENT_ADDR_RESOLVED) || rdma_resolve_route(id, 1000) ||
	    !wait_event(RDMA_CM_EVENT_ROUTE_RESOLVED))
		die("address or route resolution");
	if (rdma_connect(id, &p))
		die("rdma_connect");
	if (ud)
		uactive = id;
	else
		active[nactive++] = id;
}

static struct rdma_cm_id *pick(uint8_t b, bool with_children)
{
	int n = nactive + (with_children ? nchildren : 0);

	if (!n)
		return NULL;
	b %= (uint8_t)n;
	return b < nactive ? active[b] : children[b - nactive];
}

static void forget(struct rdma_cm_id *id)
{
	for (int i = 0; i < nactive; i++)
		if (active[i] == id)
			active[i] = active[--nactive];
	for (int i = 0; i < nchildren; i++)
		if (children[i] == id)
			children[i] = children[--nchildren];
	for (int i = 0; i < nuchildren; i++)
		if (uchildren[i] == id)
			uchildren[i] = uchildren[--nuchildren];
	if (uactive == id)
		uactive = NULL;
}

static void app(uint8_t a, uint8_t b)
{
	static const uint8_t pdata[256] = { 1, 2, 3 };
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1,
				     .rnr_retry_count = 7, .qp_num = 0x4242, .private_data = pdata };
	struct rdma_cm_id *id;

	drain_events();
	switch (a % 8) {
	case 0:
		connect_new(false);
		break;
	case 1:
		if (nchildren) {
			p.private_data_len = (uint8_t)((b >> 3) * 8);	/* over 196: refused */
			rdma_accept(children[b % nchildren], &p);
		}
		break;
	case 2:
		if (nchildren)
			rdma_reject(children[b % nchildren], pdata, b & 0x3f);
		break;
	case 3:
		if ((id = pick(b, true)))
			rdma_disconnect(id);
		break;
	case 4:
		if (nactive)
			rdma_establish(active[b % nactive]);
		break;
	case 5:
		id = (b & 0x80) && uactive ? uactive
		     : (b & 0x40) && nuchildren ? uchildren[b % nuchildren] : pick(b, true);
		if (id) {
			drain_events();
			forget(id);
			if (rdma_destroy_id(id))
				die("rdma_destroy_id");
		}
		break;
	case 6:
		connect_new(true);
		break;
	case 7:
		if (nuchildren) {
			p.private_data_len = b & 0x7f;
			if (b & 0x80)
				rdma_accept(uchildren[b % nuchildren], &p);
			else
				rdma_reject(uchildren[b % nuchildren], pdata, b & 0x3f);
		}
		break;
	}
}

static void tick(uint8_t a, uint8_t b)
{
	pthread_mutex_lock(&cm.lock);
	cm_ibcm_clock_skew_ns += (uint64_t)(b + 1) << (a % 26);
	cm_ibcm_timers();
	pthread_mutex_unlock(&cm.lock);
}

static void teardown(void)
{
	drain_events();
	while (nactive || nchildren || nuchildren || uactive) {
		struct rdma_cm_id *id = nactive ? active[0] : nchildren ? children[0]
				       : nuchildren ? uchildren[0] : uactive;

		forget(id);
		if (rdma_destroy_id(id))
			die("rdma_destroy_id");
		drain_events();
	}
	check_ids();
	if (cm_id(listener)->pending || cm_id(ulistener)->pending)
		die("a listener holds pending requests with no child left");
	pthread_mutex_lock(&cm.lock);
	for (struct cm_id *i = cm.ids; i; i = i->next)
		if (i != cm_id(listener) && i != cm_id(ulistener) && i->state != CM_DESTROYING)
			forbidden(i, "an id left after every id was destroyed");
	pthread_mutex_unlock(&cm.lock);
	/* What the teardown sent (DREQs, REJs) and anything still in flight. */
	pump(2);
	qhead = qlen = 0;
	/* The next input starts after every time-wait of this one (the IB CM's, and drive.c's
	 * 10 s memory of ended passive connections): inputs do not depend on each other. */
	pthread_mutex_lock(&cm.lock);
	cm_ibcm_clock_skew_ns += 11000000000ull;
	pthread_mutex_unlock(&cm.lock);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	for (int steps = 0; n >= 3 && steps < 48; steps++) {
		uint8_t op = d[0], a = d[1], b = d[2];

		d += 3;
		n -= 3;
		if (verbose)
			fprintf(stderr, "record %d: op %d a %d b 0x%02x\n", steps, op % 8, a, b);
		switch (op % 8) {
		case 0:
		case 1: {
			size_t l = n ? d[0] : 0;

			if (n)
				d++, n--;
			if (l > n)
				l = n;
			input_mad(a, b, d, l);
			d += l;
			n -= l;
			break;
		}
		case 2:
			loop_back(a, b);
			break;
		case 3: {
			struct sr_cm_mad m;
			bool sr;

			queue_pop(&m, &sr);
			break;
		}
		case 4:
			tick(a, b);
			break;
		default:
			app(a, b);
			break;
		}
		pump(0);
		drain_events();
		if (verbose)
			dump();
		check_ids();
	}
	teardown();
	return 0;
}
