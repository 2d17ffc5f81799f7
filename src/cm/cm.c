/* SPDX-License-Identifier: MIT */
/*
 * The CM machinery: the per-process CM thread, its sockets, timers and the state machines
 * driven by incoming messages (docs/cm.md).
 *
 * Sockets: a listening id binds a UDP socket to the address and port it listens on; active
 * ids send from one shared socket per address family. Every CM socket sets IP_RECVERR, so the
 * ICMP port-unreachable that answers a datagram sent to a port nobody listens on (or to a
 * process that died) comes back as an error naming the destination: that is how "no listener"
 * becomes REJECTED and a dead peer DISCONNECTED promptly.
 *
 * Timers: REQ, REP and DREQ are retransmitted until answered; an established connection is
 * probed every second and declared gone after 5 s of silence.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>

#include "cm/cm.h"
#include "cm/sys.h"
#include "core/fd.h"
#include "core/sig.h"

struct cm_sock {
	int fd, family, refs;
	bool listener;
	uint64_t unlisten_ms;		/* when its last listening id went away (0: never) */
	struct sockaddr_storage addr;
	struct cm_sock *next;
};

#define CM_RETRY_MS 250		/* REQ/REP/DREQ retransmission interval */
#define CM_REQ_TRIES 12		/* 3 s: then UNREACHABLE */
#define CM_REP_TRIES 12		/* then CONNECT_ERROR */
#define CM_DREQ_TRIES 4		/* then DISCONNECTED anyway */
#define CM_RELISTEN_MS 2000	/* REQs to a port whose listener just went: unanswered (less
				 * than the requester's retries, CM_REQ_TRIES: it gets the REJ) */
#define CM_PROBE_MS 1000
#define CM_DEAD_MS 5000

void sr_priv_stat_add(struct ibv_context *ctx, const char *name, uint64_t n) __attribute__((weak));

void cm_count(const char *counter)
{
	if (sr_priv_stat_add && cm_ndevs)
		sr_priv_stat_add(cm_devs[0].ctx, counter, 1);
}

void cm_kick(void)
{
	uint64_t one = 1;

	if (cm.started)
		(void)!write(cm.evfd, &one, sizeof(one));
}

static socklen_t sa_len(const struct sockaddr *a)
{
	return a->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* Same IP and port (v4-mapped IPv6 equals its IPv4). */
static bool sa_eq(const struct sockaddr *a, const struct sockaddr *b)
{
	struct sockaddr_in x, y;
	const struct sockaddr *p[2] = { a, b };
	struct sockaddr_in *o[2] = { &x, &y };

	for (int i = 0; i < 2; i++) {
		if (p[i]->sa_family == AF_INET6 &&
		    IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)p[i])->sin6_addr)) {
			const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)p[i];

			memset(o[i], 0, sizeof(*o[i]));
			o[i]->sin_family = AF_INET;
			o[i]->sin_port = s6->sin6_port;
			memcpy(&o[i]->sin_addr, &s6->sin6_addr.s6_addr[12], 4);
			p[i] = (const struct sockaddr *)o[i];
		}
	}
	if (p[0]->sa_family != p[1]->sa_family)
		return false;
	if (p[0]->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)p[0], *t = (const void *)p[1];

		return s->sin_port == t->sin_port && s->sin_addr.s_addr == t->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *s = (const void *)p[0], *t = (const void *)p[1];

	return s->sin6_port == t->sin6_port && !memcmp(&s->sin6_addr, &t->sin6_addr, 16);
}

/* ---- sockets ------------------------------------------------------------------------------ */
static struct cm_sock *sock_new(int family, const struct sockaddr *bind_to, bool listener, int *err)
{
	struct cm_sock *s = calloc(1, sizeof(*s));
	struct epoll_event ev = { .events = EPOLLIN };
	int one = 1;

	if (!s) {
		*err = -ENOMEM;
		return NULL;
	}
	s->fd = sr_fd_high(sys_socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (s->fd < 0) {
		*err = -errno;
		free(s);
		return NULL;
	}
	s->family = family;
	s->listener = listener;
	if (family == AF_INET) {
		sys_setsockopt(s->fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one));
		sys_setsockopt(s->fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
	} else {
		sys_setsockopt(s->fd, IPPROTO_IPV6, IPV6_RECVERR, &one, sizeof(one));
		sys_setsockopt(s->fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one));
	}
	if (sys_bind(s->fd, bind_to, sa_len(bind_to))) {
		*err = -errno;
		sys_close(s->fd);
		free(s);
		return NULL;
	}
	socklen_t l = sizeof(s->addr);

	sys_getsockname(s->fd, (struct sockaddr *)&s->addr, &l);
	ev.data.ptr = s;
	epoll_ctl(cm.epfd, EPOLL_CTL_ADD, s->fd, &ev);
	s->refs = 1;
	s->next = cm.socks;
	cm.socks = s;
	return s;
}

void cm_sock_put(struct cm_sock *s)
{
	if (!s || --s->refs)
		return;
	for (struct cm_sock **p = &cm.socks; *p; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			break;
		}
	}
	epoll_ctl(cm.epfd, EPOLL_CTL_DEL, s->fd, NULL);
	sys_close(s->fd);
	free(s);
}

void cm_sock_get(struct cm_sock *s)
{
	if (s)
		s->refs++;
}

void cm_sock_unlisten(struct cm_sock *s)
{
	if (s)
		s->unlisten_ms = cm_now_ms();
}

uint16_t cm_sock_port(const struct cm_sock *s)
{
	return s->addr.ss_family == AF_INET ? ((const struct sockaddr_in *)&s->addr)->sin_port
					    : ((const struct sockaddr_in6 *)&s->addr)->sin6_port;
}

struct cm_sock *cm_active_sock(int family)
{
	struct sockaddr_storage any;
	int err;

	for (struct cm_sock *s = cm.socks; s; s = s->next)
		if (!s->listener && s->family == family)
			return s;
	memset(&any, 0, sizeof(any));
	any.ss_family = (sa_family_t)family;
	return sock_new(family, (struct sockaddr *)&any, false, &err);
}

struct cm_sock *cm_listen_sock(const struct sockaddr *a, bool reuse, int *err)
{
	struct cm_sock *s;

	for (s = cm.socks; s; s = s->next) {
		if (s->listener && sa_eq((struct sockaddr *)&s->addr, a)) {
			s->refs++;
			return s;
		}
	}
	(void)reuse;
	return sock_new(a->sa_family, a, true, err);
}

/* ---- events ---------------------------------------------------------------------------------- */
/*
 * A channel's fd is an eventfd used as a level flag: non-zero exactly while the queue holds an
 * event, set and cleared under cm.lock on those transitions. (A count per event would go
 * stale when rdma_destroy_id withdraws events: poll() would say readable and the read block.)
 */
void cm_chan_push(struct cm_channel *ch, struct cm_event *e)
{
	uint64_t one = 1;
	bool was_empty = !ch->head;

	e->next = NULL;
	if (ch->tail)
		ch->tail->next = e;
	else
		ch->head = e;
	ch->tail = e;
	if (was_empty)
		(void)!write(ch->ch.fd, &one, sizeof(one));
}

/* Only on a transition from non-empty to empty: the flag is set, so this never blocks. */
void cm_chan_clear(struct cm_channel *ch)
{
	uint64_t v;

	(void)!read(ch->ch.fd, &v, sizeof(v));
}

void cm_post_event(struct cm_id *id, enum rdma_cm_event_type type, int status,
		   const struct cm_msg *m)
{
	struct cm_event *e = calloc(1, sizeof(*e));

	if (!e)
		return;	/* nothing sensible to do without memory; the peer's retries may help */
	e->ev.id = &id->id;
	e->ev.event = type;
	e->ev.status = status;
	if (type == RDMA_CM_EVENT_CONNECT_REQUEST)
		e->ev.listen_id = &id->listener->id;
	if (m && m->pdata_len)
		memcpy(e->pdata, m->pdata, m->pdata_len);
	if (id->id.qp_type == IBV_QPT_UD || id->id.ps == RDMA_PS_UDP) {
		struct rdma_ud_param *u = &e->ev.param.ud;

		u->private_data = m && m->pdata_len ? e->pdata : NULL;
		u->private_data_len = m ? m->pdata_len : 0;
		if (m && (m->type == CM_MSG_SIDR_REP || m->type == CM_MSG_SIDR_REQ)) {
			u->qp_num = m->qpn;
			u->qkey = m->qkey;
			u->ah_attr.is_global = 1;
			u->ah_attr.port_num = 1;
			u->ah_attr.grh.dgid = m->gid;
			u->ah_attr.grh.sgid_index = id->dev ? id->dev->gid_index : 0;
			u->ah_attr.grh.hop_limit = 64;
		}
	} else {
		struct rdma_conn_param *c = &e->ev.param.conn;

		c->private_data = m && m->pdata_len ? e->pdata : NULL;
		c->private_data_len = m ? m->pdata_len : 0;
		if (m && (m->type == CM_MSG_REQ || m->type == CM_MSG_REP)) {
			/* From this side's point of view (the kernel's rdma_cm swaps them too). */
			c->responder_resources = m->initiator_depth;
			c->initiator_depth = m->responder_resources;
			c->flow_control = m->flow_control;
			c->retry_count = m->retry_count;
			c->rnr_retry_count = m->rnr_retry_count;
			c->srq = m->srq;
			c->qp_num = m->qpn;
		}
	}
	cm_chan_push(id->chan, e);
}

void cm_post_ud_event(struct cm_id *id, enum rdma_cm_event_type type, int status,
		      const struct rdma_ud_param *ud)
{
	struct cm_event *e = calloc(1, sizeof(*e));

	if (!e)
		return;
	e->ev.id = &id->id;
	e->ev.event = type;
	e->ev.status = status;
	e->ev.param.ud = *ud;
	cm_chan_push(id->chan, e);
}

/* ---- sending ------------------------------------------------------------------------------- */
int cm_send(struct cm_id *id, const struct cm_msg *m, bool retrans)
{
	uint8_t buf[CM_MSG_MAX];
	int len = cm_msg_encode(m, buf, sizeof(buf));

	if (len < 0)
		return len;
	if (retrans) {
		memcpy(id->txbuf, buf, (size_t)len);
		id->txlen = (size_t)len;
		id->tries = 1;
		id->next_tx = cm_now_ms() + CM_RETRY_MS;
		cm_kick();
	}
	if (!id->sock)
		return -ENOTCONN;
	if (sys_sendto(id->sock->fd, buf, (size_t)len, MSG_DONTWAIT, (struct sockaddr *)&id->peer_cm,
		       sa_len((struct sockaddr *)&id->peer_cm)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

int cm_send_to(const struct sockaddr *to, const struct cm_msg *m)
{
	struct cm_sock *s = cm_active_sock(to->sa_family);
	uint8_t buf[CM_MSG_MAX];
	int len = cm_msg_encode(m, buf, sizeof(buf));

	if (len < 0)
		return len;
	if (!s)
		return -ENOMEM;
	if (sys_sendto(s->fd, buf, (size_t)len, MSG_DONTWAIT, to, sa_len(to)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

/* A reply to a datagram that reached socket s from `from` (no id behind it). */
static void reply_raw(struct cm_sock *s, const struct sockaddr *from, const struct cm_msg *m)
{
	uint8_t buf[CM_MSG_MAX];
	int len = cm_msg_encode(m, buf, sizeof(buf));

	if (len > 0)
		sys_sendto(s->fd, buf, (size_t)len, MSG_DONTWAIT, from, sa_len(from));
}

static void reject_unknown(struct cm_sock *s, const struct sockaddr *from, const struct cm_msg *in,
			   uint16_t reason)
{
	struct cm_msg r = { .type = in->type == CM_MSG_SIDR_REQ ? CM_MSG_SIDR_REP : CM_MSG_REJ,
			    .dst_id = in->src_id, .ps = in->ps, .src_port = in->dst_port,
			    .dst_port = in->src_port, .reason = reason, .mtu = IBV_MTU_1024,
			    .status = CM_SIDR_NO_SERVICE };

	reply_raw(s, from, &r);
	cm_count("cm_rejects_sent");
}

/* ---- the state machines --------------------------------------------------------------------- */
static struct cm_id *find_by_local(uint32_t local_id)
{
	for (struct cm_id *i = cm.ids; i; i = i->next)
		if (i->local_id == local_id && i->state != CM_DESTROYING &&
		    (!i->ibcm || i->ib_resolving))
			return i;
	return NULL;
}

static struct cm_id *find_listener(struct cm_sock *s, uint16_t port, uint16_t ps)
{
	for (struct cm_id *i = cm.ids; i; i = i->next)
		if (i->state == CM_LISTEN && i->lsock == s && i->id.ps == ps &&
		    cm_sa_port(&i->id.route.addr.src_addr) == htons(port))
			return i;
	return NULL;
}

static void set_port(struct sockaddr *a, uint16_t port)
{
	if (a->sa_family == AF_INET)
		((struct sockaddr_in *)a)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)a)->sin6_port = htons(port);
}

void cm_timewait_add(const struct sockaddr *peer, uint32_t remote_id)
{
	struct cm_timewait *t = &cm.tw[cm.tw_next++ % (sizeof(cm.tw) / sizeof(cm.tw[0]))];

	memset(&t->peer, 0, sizeof(t->peer));
	memcpy(&t->peer, peer, sa_len(peer));
	t->remote_id = remote_id;
	t->until_ms = cm_now_ms() + CM_TIMEWAIT_MS;
}

static bool in_timewait(const struct sockaddr *from, uint32_t remote_id)
{
	uint64_t now = cm_now_ms();

	for (size_t i = 0; i < sizeof(cm.tw) / sizeof(cm.tw[0]); i++) {
		const struct cm_timewait *t = &cm.tw[i];

		if (t->until_ms > now && t->remote_id == remote_id &&
		    sa_eq((const struct sockaddr *)&t->peer, from))
			return true;
	}
	return false;
}

static bool ip_any(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

bool cm_local_listener(const struct sockaddr *dst, uint16_t port_be)
{
	struct sockaddr_storage d;

	memcpy(&d, dst, sa_len(dst));
	set_port((struct sockaddr *)&d, ntohs(port_be));
	for (struct cm_sock *s = cm.socks; s; s = s->next)
		if (s->listener && cm_sock_port(s) == port_be &&
		    (ip_any((struct sockaddr *)&s->addr) ||
		     sa_eq((struct sockaddr *)&s->addr, (struct sockaddr *)&d)))
			return true;
	return false;
}

bool cm_port_held(uint16_t port_be, uint16_t ps)
{
	for (struct cm_sock *s = cm.socks; s; s = s->next) {
		if (!s->listener || cm_sock_port(s) != port_be)
			continue;
		if (s->unlisten_ms && cm_now_ms() - s->unlisten_ms < CM_RELISTEN_MS)
			return true;
		for (struct cm_id *i = cm.ids; i; i = i->next)
			if (i->state == CM_BOUND && i->lsock == s && i->id.ps == ps)
				return true;
	}
	return false;
}

static void on_req(struct cm_sock *s, const struct sockaddr *from, const struct sockaddr *to,
		   const struct cm_msg *m)
{
	struct cm_id *l = find_listener(s, m->dst_port, m->ps), *c;

	/* A retransmitted REQ: the child exists already; repeat our answer if we gave one. */
	for (c = cm.ids; c; c = c->next) {
		if (c->listener && c->remote_id == m->src_id && sa_eq((struct sockaddr *)&c->peer_cm, from)) {
			if (c->state == CM_REP_SENT && c->txlen)
				sys_sendto(s->fd, c->txbuf, c->txlen, MSG_DONTWAIT, from, sa_len(from));
			return;
		}
	}
	if (in_timewait(from, m->src_id)) {
		cm_count("cm_drop_unknown");	/* a late copy of a REQ we answered and ended */
		reject_unknown(s, from, m, CM_REJ_STALE_CONN);
		return;
	}
	if (!l) {
		/*
		 * Nobody listens on this port. Right after a listener on it was destroyed while
		 * its connections live on (the socket is still open for them), another listener
		 * often follows on the same port: perftest -R replaces its control listener with
		 * the data one a second later (it sleeps in between), and the client's REQ races
		 * with that rdma_listen. Such a REQ is left unanswered for a while, as a busy CM
		 * would: the requester retransmits it (CM_RETRY_MS) and finds the new listener.
		 * Later, or on a port that never had a listener, the answer is the IB CM's
		 * immediate REJ (invalid service ID).
		 */
		if (s->unlisten_ms && cm_now_ms() - s->unlisten_ms < CM_RELISTEN_MS) {
			cm_count("cm_req_held");
			return;
		}
		/* Likewise for a port bound by rdma_bind_addr (port 0) but not listened on yet:
		 * qperf sends the bound port to its peer, then calls rdma_listen, and the peer's
		 * REQ may come first. Its retransmission finds the listener. */
		for (struct cm_id *i = cm.ids; i; i = i->next) {
			if (i->state == CM_BOUND && i->lsock == s) {
				cm_count("cm_req_held");
				return;
			}
		}
		reject_unknown(s, from, m, CM_REJ_INVALID_SERVICE_ID);
		return;
	}
	if (!cm_gid_matches(&m->gid, from)) {
		/* A REQ naming someone else's GID: never connect a QP there. */
		reject_unknown(s, from, m, CM_REJ_CONSUMER_DEFINED);
		return;
	}
	if (l->pending >= l->backlog)
		return;	/* full backlog: the requester retries, as with the IB CM */
	/* The new id's QP type follows the request, as the kernel's rdma_cm: a REQ from an
	 * XRC_SEND QP is for an XRC_RECV one (the IB CM's XRC transport), others are for the
	 * listener's type. */
	c = cm_id_alloc(l->chan, l->id.context, l->id.ps,
			m->qp_type == IBV_QPT_XRC_SEND ? IBV_QPT_XRC_RECV
			: l->id.qp_type == IBV_QPT_XRC_RECV ? IBV_QPT_RC : l->id.qp_type);
	if (!c)
		return;
	c->listener = l;
	c->state = CM_REQ_RCVD;
	c->remote_id = m->src_id;
	c->sock = s;
	c->sock_ref = true;
	s->refs++;
	memcpy(&c->peer_cm, from, sa_len(from));
	c->dev = cm_dev_for_local(to);
	if (!c->dev)
		c->dev = l->dev ? l->dev : cm_dev_for_local((struct sockaddr *)&l->id.route.addr.src_addr);
	c->id.verbs = c->dev ? c->dev->ctx : NULL;
	c->id.pd = c->dev ? cm_dev_pd(c->dev) : NULL;
	c->id.port_num = 1;
	memcpy(&c->id.route.addr.src_addr, to, sa_len(to));
	set_port(&c->id.route.addr.src_addr, m->dst_port);
	memcpy(&c->id.route.addr.dst_addr, from, sa_len(from));
	set_port(&c->id.route.addr.dst_addr, m->src_port);
	c->peer_gid = m->gid;
	c->peer_qpn = m->qpn;
	c->peer_psn = m->psn;
	c->path_mtu = c->dev && c->dev->mtu < m->mtu ? c->dev->mtu : (enum ibv_mtu)m->mtu;
	if (c->dev && m->type == CM_MSG_REQ)	/* a UD id (SIDR) has no path, as the kernel's */
		cm_fill_path(c, &c->peer_gid, c->path_mtu);
	c->seg = m->seg4k * 4096u;	/* the requester's offer; rdma_accept settles it */
	c->responder_resources = m->initiator_depth;
	c->initiator_depth = m->responder_resources;
	c->retry_count = m->retry_count;
	c->rnr_retry_count = m->rnr_retry_count;
	c->flow_control = m->flow_control;
	c->srq = m->srq;
	c->qkey = m->qkey;
	c->ece_vendor = m->ece_vendor;
	c->ece_options = m->ece_options;
	c->last_heard = cm_now_ms();
	l->pending++;
	cm_post_event(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0, m);
}

static void established(struct cm_id *id, const struct cm_msg *m)
{
	id->state = CM_ESTABLISHED;
	id->txlen = 0;
	id->last_heard = cm_now_ms();
	id->next_probe = id->last_heard + CM_PROBE_MS;
	cm_post_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, m);
}

static void on_rep(struct cm_id *id, const struct cm_msg *m)
{
	struct cm_msg rtu = { .type = CM_MSG_RTU, .src_id = id->local_id, .dst_id = m->src_id,
			      .ps = id->id.ps, .src_port = ntohs(cm_sa_port(&id->id.route.addr.src_addr)),
			      .dst_port = ntohs(cm_sa_port(&id->id.route.addr.dst_addr)) };

	if (id->state == CM_ESTABLISHED) {
		cm_send(id, &rtu, false);	/* our RTU was lost: the peer repeats its REP */
		return;
	}
	if (id->state != CM_REQ_SENT)
		return;
	if (!cm_gid_matches(&m->gid, (struct sockaddr *)&id->peer_cm)) {
		cm_count("cm_drop_unknown");	/* a REP naming another host's GID: ignored */
		return;
	}
	id->remote_id = m->src_id;
	id->peer_gid = m->gid;
	id->peer_qpn = m->qpn;
	id->peer_psn = m->psn;
	if (m->mtu < id->path_mtu)
		id->path_mtu = (enum ibv_mtu)m->mtu;
	/* The segment both sides use: never more than we offered (a REP that says more is
	 * ignored on that point; the responder then drops the peer's longer packets). */
	if (m->seg4k * 4096u > id->seg) {
		cm_count("cm_drop_malformed");
		id->seg = 0;
	} else {
		id->seg = m->seg4k * 4096u;
	}
	/* Our initiator depth is bounded by what the responder offers, and the reverse. */
	if (m->responder_resources < id->initiator_depth)
		id->initiator_depth = m->responder_resources;
	id->ece_vendor = m->ece_vendor;
	id->ece_options = m->ece_options;
	id->txlen = 0;
	/* An XRC_SEND QP needs an XRC_RECV QP at the other end: a responder that answered with
	 * another kind (or a peer that does not say: an older softrdma) cannot take its sends. */
	if ((cm_qpt(id) == IBV_QPT_XRC_SEND) != (m->qp_type == IBV_QPT_XRC_RECV)) {
		struct cm_msg rej = { .type = CM_MSG_REJ, .src_id = id->local_id,
				      .dst_id = m->src_id, .ps = id->id.ps,
				      .reason = CM_REJ_INVALID_TRANSPORT };

		cm_count("cm_rejects_sent");
		cm_send(id, &rej, false);
		cm_qp_to_err(id);
		id->state = CM_DISCONNECTED;
		cm_post_event(id, RDMA_CM_EVENT_REJECTED, CM_REJ_INVALID_TRANSPORT, NULL);
		return;
	}
	if (!id->id.qp) {
		/* The application drives its own QP: it calls rdma_establish() after RTR/RTS. */
		id->state = CM_REP_RCVD;
		cm_post_event(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, m);
		return;
	}
	if (cm_qp_to_rtr_rts(id, true)) {
		struct cm_msg rej = { .type = CM_MSG_REJ, .src_id = id->local_id,
				      .dst_id = m->src_id, .ps = id->id.ps,
				      .reason = CM_REJ_CONSUMER_DEFINED };

		cm_send(id, &rej, false);
		cm_qp_to_err(id);
		id->state = CM_DISCONNECTED;
		cm_post_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -EINVAL, NULL);
		return;
	}
	cm_send(id, &rtu, false);
	established(id, m);
}

/* The connection is over: DISCONNECTED for the consumer. The QP is moved to ERR (flushed)
 * unless the peer asked for the end (its DREQ): then, as with the kernel's rdma_cm, it stays
 * as it is until the consumer's own rdma_disconnect (or the QP's destruction), so work that is
 * still completing, and receives nobody will fill, are not flushed under the consumer. */
static void disconnected(struct cm_id *id, bool flush)
{
	if (id->state == CM_DISCONNECTED)
		return;
	if (flush)
		cm_qp_to_err(id);
	id->state = CM_DISCONNECTED;
	id->txlen = 0;
	cm_post_event(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL);
}

static void on_msg(struct cm_sock *s, const struct sockaddr *from, const struct sockaddr *to,
		   const uint8_t *buf, size_t len)
{
	struct cm_msg m;
	struct cm_id *id;

	cm_count("cm_msgs_rcvd");
	if (cm_msg_decode(&m, buf, len)) {
		cm_count("cm_drop_malformed");	/* not ours, other version, malformed */
		return;
	}
	if (m.type == CM_MSG_REQ || m.type == CM_MSG_SIDR_REQ) {
		if (s->listener && !m.dst_id)
			on_req(s, from, to, &m);
		return;
	}
	if (m.type == CM_MSG_QP1_QUERY) {
		/* Another process of this host connecting over the IB CM asks where the QP1 of
		 * this port's listener is (cm_ibcm_connect): its device's GID. Only on this host:
		 * the asker sends it to a loopback or local address only. */
		struct cm_dev *d = s->listener ? cm.ibcm->query_dev(s, to, m.ps, m.dst_port) : NULL;

		if (d) {
			struct cm_msg r = { .type = CM_MSG_QP1_REPLY, .dst_id = m.src_id, .ps = m.ps,
					    .src_port = m.dst_port, .gid = d->gid };

			reply_raw(s, from, &r);
		} else {
			cm_count("cm_drop_unknown");
		}
		return;
	}
	if (m.type == CM_MSG_QP1_REPLY && cm.ibcm->redirect_reply(from, &m))
		return;	/* the answer to a redirect's QUERY (ibcm/drive.c) */
	id = find_by_local(m.dst_id);
	/* Only the peer this id talks to may move it: a stray or forged message does nothing. */
	if (!id || !sa_eq((struct sockaddr *)&id->peer_cm, from) ||
	    (id->remote_id && m.src_id && m.type != CM_MSG_REP && m.type != CM_MSG_SIDR_REP &&
	     id->remote_id != m.src_id)) {
		cm_count("cm_drop_unknown");
		if (m.type == CM_MSG_PROBE) {
			/* The peer believes in a connection we do not have: end it. */
			struct cm_msg d = { .type = CM_MSG_DREQ, .dst_id = m.src_id, .ps = m.ps };

			reply_raw(s, from, &d);
		}
		return;
	}
	id->last_heard = cm_now_ms();
	switch (m.type) {
	case CM_MSG_REP:
		on_rep(id, &m);
		break;
	case CM_MSG_SIDR_REP:
		if (id->state != CM_REQ_SENT)
			break;
		id->txlen = 0;
		id->remote_id = m.src_id;
		if (m.status == CM_SIDR_OK) {
			id->state = CM_ESTABLISHED;
			cm_post_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &m);
		} else {
			id->state = CM_DISCONNECTED;
			cm_post_event(id, RDMA_CM_EVENT_UNREACHABLE, m.status, &m);
		}
		break;
	case CM_MSG_RTU:
		if (id->state == CM_REP_SENT)
			established(id, &m);
		break;
	case CM_MSG_REJ:
		if (id->state == CM_REQ_SENT || id->state == CM_REP_SENT) {
			cm_qp_to_err(id);
			id->state = CM_DISCONNECTED;
			id->txlen = 0;
			cm_post_event(id, RDMA_CM_EVENT_REJECTED, m.reason, &m);
		}
		break;
	case CM_MSG_DREQ: {
		struct cm_msg drep = { .type = CM_MSG_DREP, .src_id = id->local_id,
				       .dst_id = m.src_id, .ps = id->id.ps };

		cm_send(id, &drep, false);
		if (id->state == CM_ESTABLISHED || id->state == CM_DREQ_SENT ||
		    id->state == CM_REP_SENT)
			disconnected(id, false);
		break;
	}
	case CM_MSG_DREP:
		if (id->state == CM_DREQ_SENT)
			disconnected(id, true);
		break;
	case CM_MSG_QP1_REPLY:
		/* Its GID must be one of this host's addresses (cm_gid_matches). */
		if (id->ib_resolving && id->state == CM_REQ_SENT && cm_gid_matches(&m.gid, from)) {
			id->txlen = 0;
			cm.ibcm->resolved(id, &m.gid);
		}
		break;
	case CM_MSG_PROBE: {
		struct cm_msg ack = { .type = CM_MSG_PROBE_ACK, .src_id = id->local_id,
				      .dst_id = m.src_id, .ps = id->id.ps };

		cm_send(id, &ack, false);
		break;
	}
	default:
		break;
	}
}

int cm_rx_datagram(struct rdma_cm_id *via, const struct sockaddr *from, const uint8_t *buf,
		   size_t len)
{
	struct cm_id *id = (struct cm_id *)via;
	struct cm_sock *s;

	pthread_mutex_lock(&cm.lock);
	s = id->lsock ? id->lsock : id->sock;
	if (s)
		on_msg(s, from, (struct sockaddr *)&s->addr, buf, len);
	pthread_mutex_unlock(&cm.lock);
	return s ? 0 : -ENOTCONN;
}

/* An ICMP error for a datagram we sent to `dst`: nobody is there (any more). */
static void on_unreachable(const struct sockaddr *dst)
{
	cm.ibcm->redirect_unreachable(dst);
	for (struct cm_id *id = cm.ids; id; id = id->next) {
		if ((id->ibcm && !id->ib_resolving) || !sa_eq((struct sockaddr *)&id->peer_cm, dst))
			continue;
		switch (id->state) {
		case CM_REQ_SENT:
			id->state = CM_DISCONNECTED;
			id->txlen = 0;
			cm_qp_to_err(id);
			cm_post_event(id, RDMA_CM_EVENT_REJECTED, CM_REJ_INVALID_SERVICE_ID, NULL);
			break;
		case CM_ESTABLISHED:
		case CM_DREQ_SENT:
		case CM_REP_SENT:
			disconnected(id, true);
			break;
		default:
			break;
		}
	}
}

static void sock_drain(struct cm_sock *s)
{
	for (;;) {
		uint8_t buf[CM_MSG_MAX + 64], ctrl[256];
		struct sockaddr_storage from, to;
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr mh = { .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = &iov,
				     .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof(ctrl) };
		ssize_t n = sys_recvmsg(s->fd, &mh, MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			/* Errors (ECONNREFUSED...) are read from the error queue below. */
		} else {
			memcpy(&to, &s->addr, sizeof(to));
			for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
				if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
					struct in_pktinfo pi;

					memcpy(&pi, CMSG_DATA(c), sizeof(pi));
					((struct sockaddr_in *)&to)->sin_addr = pi.ipi_addr;
				} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
					struct in6_pktinfo pi;

					memcpy(&pi, CMSG_DATA(c), sizeof(pi));
					((struct sockaddr_in6 *)&to)->sin6_addr = pi.ipi6_addr;
				}
			}
			on_msg(s, (struct sockaddr *)&from, (struct sockaddr *)&to, buf, (size_t)n);
			continue;
		}
		/* The error queue: one entry per ICMP error, naming the original destination. */
		mh.msg_namelen = sizeof(from);
		mh.msg_controllen = sizeof(ctrl);
		n = sys_recvmsg(s->fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT);
		if (n < 0)
			break;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR) ||
			    (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR)) {
				struct sock_extended_err ee;

				memcpy(&ee, CMSG_DATA(c), sizeof(ee));
				if (ee.ee_errno == ECONNREFUSED || ee.ee_errno == EHOSTUNREACH ||
				    ee.ee_errno == ENETUNREACH)
					on_unreachable((struct sockaddr *)&from);
			}
		}
	}
}

/* ---- timers ---------------------------------------------------------------------------------- */
static uint64_t run_timers(void)
{
	uint64_t now = cm_now_ms(), next = now + 60000;

	for (struct cm_id *id = cm.ids; id; id = id->next) {
		if (id->txlen && id->next_tx) {
			int max = id->state == CM_REQ_SENT ? CM_REQ_TRIES
				: id->state == CM_REP_SENT ? CM_REP_TRIES : CM_DREQ_TRIES;

			if (now >= id->next_tx) {
				if (id->tries >= max) {
					cm_count("cm_timeouts");
					id->txlen = 0;
					cm_qp_to_err(id);
					if (id->state == CM_REQ_SENT) {
						id->state = CM_DISCONNECTED;
						cm_post_event(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL);
					} else if (id->state == CM_REP_SENT) {
						id->state = CM_DISCONNECTED;
						cm_post_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -ETIMEDOUT, NULL);
					} else if (id->state == CM_DREQ_SENT) {
						disconnected(id, true);
					}
					continue;
				}
				if (id->sock)
					sys_sendto(id->sock->fd, id->txbuf, id->txlen, MSG_DONTWAIT,
						   (struct sockaddr *)&id->peer_cm,
						   sa_len((struct sockaddr *)&id->peer_cm));
				id->tries++;
				id->next_tx = now + CM_RETRY_MS;
			}
			if (id->next_tx < next)
				next = id->next_tx;
		}
		if (id->state == CM_ESTABLISHED && id->id.ps != RDMA_PS_UDP && !id->ibcm) {
			if (now - id->last_heard > CM_DEAD_MS) {
				cm_count("cm_timeouts");
				disconnected(id, true);
				continue;
			}
			if (now >= id->next_probe) {
				struct cm_msg p = { .type = CM_MSG_PROBE, .src_id = id->local_id,
						    .dst_id = id->remote_id, .ps = id->id.ps };

				cm_send(id, &p, false);
				id->next_probe = now + CM_PROBE_MS;
			}
			if (id->next_probe < next)
				next = id->next_probe;
		}
	}
	return next > now ? next - now : 0;
}

static void *cm_thread(void *arg)
{
	struct epoll_event ev[16];
	int timeout = 0;

	(void)arg;
	for (;;) {
		int n = epoll_wait(cm.epfd, ev, 16, timeout);

		pthread_mutex_lock(&cm.lock);
		for (int i = 0; i < n; i++) {
			if (!ev[i].data.ptr) {
				uint64_t v;

				(void)!read(cm.evfd, &v, sizeof(v));
				continue;
			}
			if (cm.ibcm->event(ev[i].data.ptr))
				continue;	/* CM MADs on a device's QP1 */
			/* The socket may have been closed meanwhile by another event's handling. */
			for (struct cm_sock *s = cm.socks; s; s = s->next) {
				if (s == ev[i].data.ptr) {
					sock_drain(s);
					break;
				}
			}
		}
		timeout = (int)run_timers();
		uint64_t ib_ms = cm.ibcm->timers();

		if (ib_ms < (uint64_t)timeout)
			timeout = (int)ib_ms;
		pthread_mutex_unlock(&cm.lock);
	}
	return NULL;
}

/*
 * The child of a fork has no CM thread, and the CM's sockets and devices are the parent's
 * (docs/architecture.md, fork): it starts afresh. Its copies of the CM's fds are closed, and
 * the ids, sockets, devices and time-wait entries inherited are forgotten, not freed (the
 * child must not use the parent's ids); its next CM call starts a thread, opens the devices
 * (soft NICs of its own) and draws new random communication ids and ports, so that the
 * parent's and the child's never collide.
 */
static void cm_atfork_child(void)
{
	pthread_mutex_init(&cm.lock, NULL);
	for (struct cm_sock *s = cm.socks; s; s = s->next)
		if (s->fd >= 0)
			sys_close(s->fd);
	if (cm.started) {
		close(cm.epfd);
		close(cm.evfd);
	}
	cm.started = false;
	cm.epfd = cm.evfd = -1;
	cm.socks = NULL;
	cm.ids = NULL;
	cm.next_local_id = 0;
	cm.next_port = 0;
	memset(cm.tw, 0, sizeof(cm.tw));
	cm.tw_next = 0;
	cm_devs = NULL;
	cm_ndevs = 0;
}

static void __attribute__((constructor)) cm_fork_hook(void)
{
	pthread_atfork(NULL, NULL, cm_atfork_child);
}

int cm_start(void)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	pthread_attr_t at;
	int ret;

	if (cm.started)
		return 0;
	cm.epfd = sr_fd_high(epoll_create1(EPOLL_CLOEXEC));
	cm.evfd = sr_fd_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (cm.epfd < 0 || cm.evfd < 0)
		return -errno;
	epoll_ctl(cm.epfd, EPOLL_CTL_ADD, cm.evfd, &ev);
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	ret = sr_thread_create(&cm.thread, &at, cm_thread, NULL);	/* core/sig.h */
	pthread_attr_destroy(&at);
	if (ret)
		return -ret;
	cm.started = true;
	return 0;
}
