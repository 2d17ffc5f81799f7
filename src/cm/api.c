/* SPDX-License-Identifier: MIT */
/*
 * The exported rdma_* calls: ids, event channels, address and route resolution, connection
 * setup and teardown (docs/cm.md). Errors follow librdmacm: -1 with errno set (pointer calls:
 * NULL with errno). An id created without an event channel is synchronous: each call waits for
 * its outcome on a private channel, as rdma_cma(7) describes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cm/cm.h"
#include "cm/sys.h"

static int fail(int err)
{
	errno = err < 0 ? -err : err;
	return -1;
}

static socklen_t sa_len(const struct sockaddr *a)
{
	return a->sa_family == AF_INET ? sizeof(struct sockaddr_in)
	       : a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : 0;
}

static void sa_set_port(struct sockaddr *a, uint16_t port_be)
{
	if (a->sa_family == AF_INET)
		((struct sockaddr_in *)a)->sin_port = port_be;
	else
		((struct sockaddr_in6 *)a)->sin6_port = port_be;
}

static uint16_t ephemeral_port(void)
{
	if (!cm.next_port)
		cm.next_port = (uint16_t)(32768 + cm_rand32() % 28000);
	if (++cm.next_port < 32768)
		cm.next_port = 32768;
	return cm.next_port;
}

/* ---- event channels --------------------------------------------------------------------------- */
static struct cm_channel *chan_new(bool sync)
{
	struct cm_channel *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	/* A level flag, not a count: readable exactly while the queue holds an event (cm.c). */
	c->ch.fd = eventfd(0, EFD_CLOEXEC);
	if (c->ch.fd < 0) {
		free(c);
		return NULL;
	}
	c->sync = sync;
	return c;
}

CM_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cm_channel *c = chan_new(false);

	return c ? &c->ch : NULL;
}

/*
 * Destroyed channels are kept (their events freed), never returned to malloc: programs such as
 * rping destroy the channel while their own CM thread may still be about to call
 * rdma_get_cm_event on it. That call then waits for good, as a read() already blocked on
 * rdma-core's closed channel fd does, instead of reading freed memory.
 * A channel is a few dozen bytes and programs make few of them.
 */
static struct cm_channel *chan_graveyard;

CM_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct cm_channel *c = (struct cm_channel *)channel;
	int fd;

	pthread_mutex_lock(&cm.lock);
	while (c->head) {
		struct cm_event *e = c->head;

		c->head = e->next;
		free(e);
	}
	c->tail = NULL;
	c->destroyed = true;
	fd = c->ch.fd;
	c->ch.fd = -1;
	c->grave_next = chan_graveyard;
	chan_graveyard = c;
	pthread_mutex_unlock(&cm.lock);
	close(fd);
}

CM_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cm_channel *c = (struct cm_channel *)channel;

	for (;;) {
		struct cm_event *e;

		pthread_mutex_lock(&cm.lock);
		if (c->destroyed) {
			/* As a read() already waiting on rdma-core's channel fd when it is closed:
			 * the caller waits for good (its process is tearing the channel down). */
			pthread_mutex_unlock(&cm.lock);
			for (;;)
				poll(NULL, 0, -1);
		}
		e = c->head;
		if (e) {
			c->head = e->next;
			if (!c->head) {
				c->tail = NULL;
				cm_chan_clear(c);
			}
			cm_id(e->ev.id)->events_out++;
			if (e->ev.listen_id)
				cm_id(e->ev.listen_id)->events_out++;
		}
		pthread_mutex_unlock(&cm.lock);
		if (e) {
			*event = &e->ev;
			return 0;
		}
		/* Nothing queued: EAGAIN on a non-blocking channel, else wait until there is. */
		if (fcntl(c->ch.fd, F_GETFL) & O_NONBLOCK) {
			errno = EAGAIN;
			return -1;
		}
		struct pollfd p = { .fd = c->ch.fd, .events = POLLIN };

		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return -1;
	}
}

CM_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct cm_event *e = (struct cm_event *)event;

	if (!event)
		return fail(EINVAL);
	pthread_mutex_lock(&cm.lock);
	cm_id(e->ev.id)->events_out--;
	pthread_cond_broadcast(&cm_id(e->ev.id)->cond);
	if (e->ev.listen_id) {
		cm_id(e->ev.listen_id)->events_out--;
		pthread_cond_broadcast(&cm_id(e->ev.listen_id)->cond);
	}
	pthread_mutex_unlock(&cm.lock);
	free(e);
	return 0;
}

/* Synchronous ids: wait on the private channel for the outcome of the call just made. As
 * librdmacm, the event stays in id->event until the id's next synchronous call (or its
 * destruction) acks it: rdma_xclient reads the private data of the REP from the ESTABLISHED
 * event after rdma_connect(). */
static int sync_wait(struct cm_id *id, enum rdma_cm_event_type ok)
{
	struct rdma_cm_event *ev = id->id.event;
	int ret;

	if (ev) {
		id->id.event = NULL;
		rdma_ack_cm_event(ev);
	}
	if (rdma_get_cm_event(&id->chan->ch, &ev))
		return -1;
	if (ev->event == ok) {
		ret = 0;
	} else {
		int st = ev->status;

		errno = st < 0 ? -st : st ? ECONNREFUSED : EINVAL;
		if (ev->event == RDMA_CM_EVENT_REJECTED)
			errno = ECONNREFUSED;
		else if (ev->event == RDMA_CM_EVENT_UNREACHABLE)
			errno = ETIMEDOUT;
		ret = -1;
	}
	id->id.event = ev;
	return ret;
}

/* ---- ids --------------------------------------------------------------------------------------- */
static enum ibv_qp_type ps_qp_type(enum rdma_port_space ps)
{
	return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
}

CM_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **out,
			     void *context, enum rdma_port_space ps)
{
	struct cm_channel *ch = channel ? (struct cm_channel *)channel : NULL;
	struct cm_id *id;
	int ret;

	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB)
		return fail(EINVAL);
	pthread_mutex_lock(&cm.lock);
	ret = cm_start();
	if (!ret)
		ret = cm_devices_init();
	if (ret) {
		pthread_mutex_unlock(&cm.lock);
		return fail(ret);
	}
	if (!ch && !(ch = chan_new(true))) {
		pthread_mutex_unlock(&cm.lock);
		return fail(ENOMEM);
	}
	id = cm_id_alloc(ch, context, ps, ps_qp_type(ps));
	if (id)
		id->own_chan = !channel;
	pthread_mutex_unlock(&cm.lock);
	if (!id)
		return fail(ENOMEM);
	*out = &id->id;
	return 0;
}

static void unlink_id(struct cm_id *id)
{
	for (struct cm_id **p = &cm.ids; *p; p = &(*p)->next) {
		if (*p == id) {
			*p = id->next;
			break;
		}
	}
}

/* Withdraws events about id not yet delivered (their fd counts make readers look again). */
static void purge_events(struct cm_id *id)
{
	struct cm_channel *c = id->chan;
	struct cm_event **p = &c->head, *last = NULL;
	bool had = c->head != NULL;

	while (*p) {
		struct cm_event *e = *p;

		if (e->ev.id == &id->id || e->ev.listen_id == &id->id) {
			*p = e->next;
			free(e);
		} else {
			last = e;
			p = &e->next;
		}
	}
	c->tail = last;
	if (had && !c->head)
		cm_chan_clear(c);
}

CM_EXPORT int rdma_destroy_id(struct rdma_cm_id *cid)
{
	struct cm_id *id = cm_id(cid);
	struct cm_msg m = { .src_id = id->local_id, .dst_id = id->remote_id, .ps = cid->ps };
	bool was_listening;

	pthread_mutex_lock(&cm.lock);
	was_listening = id->state == CM_LISTEN;
	if (id->ibcm)
		cm_ibcm_destroy(id);	/* DREQ or REJ as a MAD; the peer's QP1 address freed */
	else switch (id->state) {
	case CM_ESTABLISHED:
	case CM_REP_SENT:
	case CM_REP_RCVD:
		m.type = CM_MSG_DREQ;	/* going away: tell the peer (as the kernel's CM does) */
		cm_send(id, &m, false);
		break;
	case CM_REQ_RCVD:
		m.type = CM_MSG_REJ;
		m.reason = CM_REJ_CONSUMER_DEFINED;
		cm_send(id, &m, false);
		if (id->listener)
			id->listener->pending--;
		break;
	default:
		break;
	}
	if (id->remote_id && id->peer_cm.ss_family)
		cm_timewait_add((struct sockaddr *)&id->peer_cm, id->remote_id);
	id->state = CM_DESTROYING;
	id->txlen = 0;
	if (cid->event) {
		/* rdma_get_request() kept the CONNECT_REQUEST event here, a synchronous call its
		 * outcome. */
		struct rdma_cm_event *ev = cid->event;

		cid->event = NULL;
		pthread_mutex_unlock(&cm.lock);
		rdma_ack_cm_event(ev);
		pthread_mutex_lock(&cm.lock);
	}
	/* A listener's connection requests not taken yet (their CONNECT_REQUEST still queued):
	 * their ids were never the application's, so they go with it, each rejected as its
	 * destruction does (the kernel's rdma_cm destroys them so, with a consumer-defined REJ);
	 * left alone, the requester heard nothing until its REQ timed out. */
	struct rdma_cm_id **orphans = NULL;
	size_t norphans = 0;

	if (was_listening) {
		for (struct cm_event *e = id->chan->head; e; e = e->next)
			if (e->ev.listen_id == &id->id && e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST)
				norphans++;
		orphans = norphans ? calloc(norphans, sizeof(*orphans)) : NULL;
		norphans = 0;
		for (struct cm_event *e = id->chan->head; orphans && e; e = e->next)
			if (e->ev.listen_id == &id->id && e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST)
				orphans[norphans++] = e->ev.id;
	}
	purge_events(id);
	for (struct cm_id *i = cm.ids; i; i = i->next)
		if (i->listener == id)
			i->listener = NULL;
	/* As librdmacm: wait until every event handed out about this id has been acked. */
	while (id->events_out > 0)
		pthread_cond_wait(&id->cond, &cm.lock);
	unlink_id(id);
	if (id->lsock && was_listening)
		cm_sock_unlisten(id->lsock);
	cm_sock_put(id->lsock);
	if (id->sock_ref)
		cm_sock_put(id->sock);
	pthread_mutex_unlock(&cm.lock);
	if (id->own_chan) {
		close(id->chan->ch.fd);
		free(id->chan);
	}
	free(cid->route.path_rec);
	free(id);
	for (size_t k = 0; k < norphans; k++)
		rdma_destroy_id(orphans[k]);
	free(orphans);
	return 0;
}

/* ---- addresses ---------------------------------------------------------------------------------- */
static int bind_locked(struct cm_id *id, const struct sockaddr *a)
{
	struct sockaddr_storage ss;
	struct cm_dev *dev;

	if (!a || !sa_len(a))
		return -EAFNOSUPPORT;
	if (id->state != CM_IDLE)
		return -EINVAL;
	dev = cm_dev_for_local(a);
	if (!dev)
		return -ENODEV;	/* not an address of an RDMA device (rdma_bind_addr(3)) */
	/* Port 0 stays 0 here: rdma_bind_addr, rdma_listen or rdma_resolve_addr picks it. */
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, a, sa_len(a));
	memcpy(&id->id.route.addr.src_addr, &ss, sa_len(a));
	/* A wildcard bind leaves the device open (rdma_cm: verbs is NULL until it is known). */
	bool any = (a->sa_family == AF_INET && ((struct sockaddr_in *)a)->sin_addr.s_addr == 0) ||
		   (a->sa_family == AF_INET6 &&
		    IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)a)->sin6_addr));

	id->dev = any ? NULL : dev;
	id->id.verbs = any ? NULL : dev->ctx;
	id->id.pd = any ? NULL : cm_dev_pd(dev);
	id->id.port_num = any ? 0 : 1;
	id->state = CM_BOUND;
	return 0;
}

CM_EXPORT int rdma_bind_addr(struct rdma_cm_id *cid, struct sockaddr *addr)
{
	int ret;

	pthread_mutex_lock(&cm.lock);
	ret = bind_locked(cm_id(cid), addr);
	if (!ret && !cm_sa_port(&cid->route.addr.src_addr)) {
		/* Port 0: the port is picked now, as the kernel's rdma_cm does at bind time
		 * (rdma_get_src_port returns it before rdma_listen; qperf sends it to its peer).
		 * The socket rdma_listen would bind is bound here and holds the port. */
		struct cm_id *id = cm_id(cid);

		id->lsock = cm_listen_sock(&cid->route.addr.src_addr, id->reuseaddr, &ret);
		if (id->lsock)
			sa_set_port(&cid->route.addr.src_addr, cm_sock_port(id->lsock));
		else
			id->state = CM_IDLE;
	}
	pthread_mutex_unlock(&cm.lock);
	return ret ? fail(ret) : 0;
}

CM_EXPORT int rdma_resolve_addr(struct rdma_cm_id *cid, struct sockaddr *src, struct sockaddr *dst,
				int timeout_ms)
{
	struct cm_id *id = cm_id(cid);
	struct sockaddr_storage from;
	struct cm_dev *dev = NULL;
	int ret = 0, status;

	if (!dst || !sa_len(dst))
		return fail(EAFNOSUPPORT);
	pthread_mutex_lock(&cm.lock);
	if (src && id->state == CM_IDLE)
		ret = bind_locked(id, src);
	if (!ret && id->state != CM_IDLE && id->state != CM_BOUND && id->state != CM_ADDR_RESOLVED)
		ret = -EINVAL;
	if (ret) {
		pthread_mutex_unlock(&cm.lock);
		return fail(ret);
	}
	status = cm_dev_for_dst(dst, &dev, &from);
	if (!status && cm_is_mcast(dst) && id->dev) {
		dev = id->dev;	/* bound explicitly: the group is joined on that device */
		memcpy(&from, &cid->route.addr.src_addr, sa_len(&cid->route.addr.src_addr));
	}
	memcpy(&cid->route.addr.dst_addr, dst, sa_len(dst));
	if (!status) {
		uint16_t port = id->state == CM_BOUND ? cm_sa_port(&cid->route.addr.src_addr) : 0;

		if (id->state != CM_BOUND || (!id->dev && src))
			memcpy(&cid->route.addr.src_addr, &from, sa_len((struct sockaddr *)&from));
		sa_set_port(&cid->route.addr.src_addr, port ? port : htons(ephemeral_port()));
		if (id->dev != dev || !cid->pd)
			cid->pd = cm_dev_pd(dev);
		id->dev = dev;
		cid->verbs = dev->ctx;
		cid->port_num = 1;
		id->path_mtu = dev->mtu;
		id->state = CM_ADDR_RESOLVED;
		cm_post_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL);
	} else {
		cm_post_event(id, RDMA_CM_EVENT_ADDR_ERROR, status, NULL);
	}
	pthread_mutex_unlock(&cm.lock);
	(void)timeout_ms;
	if (id->chan->sync)
		return sync_wait(id, RDMA_CM_EVENT_ADDR_RESOLVED);
	return 0;
}

CM_EXPORT int rdma_resolve_route(struct rdma_cm_id *cid, int timeout_ms)
{
	struct cm_id *id = cm_id(cid);

	pthread_mutex_lock(&cm.lock);
	if (id->state != CM_ADDR_RESOLVED && id->state != CM_ROUTE_RESOLVED) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	cm_fill_path(id, NULL, id->dev->mtu);
	id->state = CM_ROUTE_RESOLVED;
	cm_post_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL);
	pthread_mutex_unlock(&cm.lock);
	(void)timeout_ms;
	if (id->chan->sync)
		return sync_wait(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
	return 0;
}

/* ---- passive side -------------------------------------------------------------------------------- */
CM_EXPORT int rdma_listen(struct rdma_cm_id *cid, int backlog)
{
	struct cm_id *id = cm_id(cid);
	struct sockaddr *a = &cid->route.addr.src_addr;
	int err = 0;

	pthread_mutex_lock(&cm.lock);
	if (id->state == CM_IDLE) {
		struct sockaddr_in any = { .sin_family = AF_INET };

		err = bind_locked(id, (struct sockaddr *)&any);
	}
	if (!err && id->state != CM_BOUND)
		err = -EINVAL;
	if (!err && cm_ibcm_on())
		err = cm_ibcm_open();	/* REQs come as MADs to QP1 too */
	if (!err) {
		if (!id->lsock)	/* else rdma_bind_addr bound it (port 0) */
			id->lsock = cm_listen_sock(a, id->reuseaddr, &err);
		if (id->lsock) {
			/* Port 0: the socket's own port is the one we listen on. */
			sa_set_port(a, cm_sock_port(id->lsock));
			id->state = CM_LISTEN;
			id->backlog = backlog > 0 ? backlog : 1024;
		}
	}
	pthread_mutex_unlock(&cm.lock);
	return err ? fail(err) : 0;
}

static int accept_ud(struct cm_id *id, struct rdma_conn_param *p)
{
	struct cm_msg m = { .type = CM_MSG_SIDR_REP, .src_id = id->local_id, .dst_id = id->remote_id,
			    .ps = id->id.ps, .status = CM_SIDR_OK, .mtu = (uint8_t)id->path_mtu };

	m.gid = id->dev->gid;
	m.qpn = id->id.qp ? id->id.qp->qp_num : p ? p->qp_num : 0;
	m.qkey = id->qkey ? id->qkey : RDMA_UDP_QKEY;
	m.src_port = ntohs(rdma_get_src_port(&id->id));
	m.dst_port = ntohs(rdma_get_dst_port(&id->id));
	if (p && p->private_data_len) {
		if (p->private_data_len > cm_pdata_max(CM_MSG_SIDR_REP, id->id.ps))
			return -EINVAL;
		m.pdata_len = p->private_data_len;
		memcpy(m.pdata, p->private_data, m.pdata_len);
	}
	id->state = CM_ESTABLISHED;
	return cm_send(id, &m, false);
}

/* rdma_accept: the request no longer waits (the id left REQ_RCVD); cm.lock held. */
static void accept_answered(struct cm_id *id)
{
	if (id->listener && id->state != CM_REQ_RCVD)
		id->listener->pending--;
}

CM_EXPORT int rdma_accept(struct rdma_cm_id *cid, struct rdma_conn_param *p)
{
	struct cm_id *id = cm_id(cid);
	struct cm_msg m = { .type = CM_MSG_REP };
	int ret;

	pthread_mutex_lock(&cm.lock);
	if (id->state != CM_REQ_RCVD) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	/* An XRC REQ (from an XRC_SEND QP; the id is then an XRC_RECV one) is answered by an
	 * XRC_RECV QP, any other by a QP that is not one: a QP of the wrong kind would connect but
	 * never carry a message. */
	if (cid->ps != RDMA_PS_UDP && cid->qp &&
	    (cid->qp->qp_type == IBV_QPT_XRC_RECV) != (cid->qp_type == IBV_QPT_XRC_RECV)) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	/* The listener's count of requests waiting goes down once the request is answered: an
	 * accept refused (private data too long, a QP that cannot move) leaves it waiting, for
	 * another accept, a reject or rdma_destroy_id (found by fuzz/fuzz_ibcm_state). */
	if (cid->ps == RDMA_PS_UDP) {
		ret = id->ibcm ? cm_ibcm_accept_ud(id, p) : accept_ud(id, p);
		accept_answered(id);
		pthread_mutex_unlock(&cm.lock);
		return ret ? fail(ret) : 0;
	}
	if (id->ibcm) {
		ret = cm_ibcm_accept(id, p);	/* a REP on QP1 */
		accept_answered(id);
		pthread_mutex_unlock(&cm.lock);
		if (ret)
			return fail(ret);
		return id->chan->sync ? sync_wait(id, RDMA_CM_EVENT_ESTABLISHED) : 0;
	}
	/* What the passive side grants: no more than the requester asked for. */
	if (p) {
		if (p->responder_resources < id->responder_resources)
			id->responder_resources = p->responder_resources;
		if (p->initiator_depth < id->initiator_depth)
			id->initiator_depth = p->initiator_depth;
		id->rnr_retry_count = p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count;
		if (p->private_data_len > cm_pdata_max(CM_MSG_REP, cid->ps)) {
			pthread_mutex_unlock(&cm.lock);
			return fail(EINVAL);
		}
	}
	cm_my_psn(id);
	id->my_qpn = cid->qp ? cid->qp->qp_num : p ? p->qp_num : 0;
	/* Large segments: the smaller of the two offers, when both made one (docs/cm.md). */
	if (id->seg > id->dev->seg)
		id->seg = id->dev->seg;
	if (!cid->qp || cid->qp->qp_type != IBV_QPT_RC || id->path_mtu != IBV_MTU_4096 ||
	    id->seg < 8192)
		id->seg = 0;
	ret = cid->qp ? cm_qp_to_rtr_rts(id, true) : 0;
	if (ret) {
		pthread_mutex_unlock(&cm.lock);
		return fail(ret);
	}
	m.src_id = id->local_id;
	m.dst_id = id->remote_id;
	m.ps = cid->ps;
	m.src_port = ntohs(rdma_get_src_port(cid));
	m.dst_port = ntohs(rdma_get_dst_port(cid));
	m.gid = id->dev->gid;
	m.qpn = id->my_qpn;
	m.psn = id->my_psn;
	m.mtu = (uint8_t)id->path_mtu;
	m.seg4k = (uint8_t)(id->seg / 4096);
	/* Swapped to the requester's point of view. */
	m.responder_resources = id->responder_resources;
	m.initiator_depth = id->initiator_depth;
	m.retry_count = id->retry_count;
	m.rnr_retry_count = id->rnr_retry_count;
	m.srq = cid->srq != NULL;
	m.qp_type = (uint8_t)cm_qpt(id);
	m.ece_vendor = id->ece_vendor;
	m.ece_options = id->ece_options;
	if (p && p->private_data_len) {
		m.pdata_len = p->private_data_len;
		memcpy(m.pdata, p->private_data, m.pdata_len);
	}
	id->state = CM_REP_SENT;
	accept_answered(id);
	ret = cm_send(id, &m, true);
	pthread_mutex_unlock(&cm.lock);
	if (ret)
		return fail(ret);
	if (id->chan->sync)
		return sync_wait(id, RDMA_CM_EVENT_ESTABLISHED);
	return 0;
}

static int reject(struct rdma_cm_id *cid, const void *pdata, uint8_t len, uint16_t reason)
{
	struct cm_id *id = cm_id(cid);
	struct cm_msg m = { .src_id = id->local_id, .dst_id = id->remote_id, .ps = cid->ps,
			    .reason = reason };
	int ret;

	pthread_mutex_lock(&cm.lock);
	if (id->state != CM_REQ_RCVD) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	if (id->ibcm) {
		ret = cm_ibcm_reject(id, pdata, len, reason);	/* a REJ on QP1 */
		if (!ret) {
			cm_count("cm_rejects_sent");
			if (id->listener)
				id->listener->pending--;
			id->state = CM_DISCONNECTED;
		}
		pthread_mutex_unlock(&cm.lock);
		return ret ? fail(ret) : 0;
	}
	if (cid->ps == RDMA_PS_UDP) {
		m.type = CM_MSG_SIDR_REP;
		m.status = CM_SIDR_REJECT;
		m.mtu = IBV_MTU_1024;
	} else {
		m.type = CM_MSG_REJ;
	}
	if (len > cm_pdata_max(m.type, cid->ps)) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	m.pdata_len = len;
	if (len)
		memcpy(m.pdata, pdata, len);
	cm_count("cm_rejects_sent");
	if (id->listener)
		id->listener->pending--;
	id->state = CM_DISCONNECTED;
	ret = cm_send(id, &m, false);
	pthread_mutex_unlock(&cm.lock);
	return ret ? fail(ret) : 0;
}

CM_EXPORT int rdma_reject(struct rdma_cm_id *cid, const void *pdata, uint8_t len)
{
	return reject(cid, pdata, len, CM_REJ_CONSUMER_DEFINED);
}

CM_EXPORT int rdma_reject_ece(struct rdma_cm_id *cid, const void *pdata, uint8_t len)
{
	return reject(cid, pdata, len, 35 /* IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED */);
}

/* ---- active side ---------------------------------------------------------------------------------- */
CM_EXPORT int rdma_connect(struct rdma_cm_id *cid, struct rdma_conn_param *p)
{
	struct cm_id *id = cm_id(cid);
	struct cm_msg m = { 0 };
	int ret;

	pthread_mutex_lock(&cm.lock);
	if (id->state != CM_ROUTE_RESOLVED && id->state != CM_ADDR_RESOLVED) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	m.type = cid->ps == RDMA_PS_UDP ? CM_MSG_SIDR_REQ : CM_MSG_REQ;
	/* An XRC_RECV QP (the target) only answers: it never starts a connection. */
	if ((p && p->private_data_len > cm_pdata_max(m.type, cid->ps)) ||
	    cm_qpt(id) == IBV_QPT_XRC_RECV) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	if (cm_ibcm_for(id)) {
		ret = cm_ibcm_connect(id, p);	/* a REQ to the peer's QP1 */
		pthread_mutex_unlock(&cm.lock);
		if (ret)
			return fail(ret);
		return id->chan->sync ? sync_wait(id, RDMA_CM_EVENT_ESTABLISHED) : 0;
	}
	id->my_psn = cm_rand32() & 0xffffff;
	id->my_psn_set = true;
	id->my_qpn = cid->qp ? cid->qp->qp_num : p ? p->qp_num : 0;
	if (p) {
		cm_take_conn_param(id, p);
		m.pdata_len = p->private_data_len;
		if (m.pdata_len)
			memcpy(m.pdata, p->private_data, m.pdata_len);
	}
	memcpy(&id->peer_cm, &cid->route.addr.dst_addr, sa_len(&cid->route.addr.dst_addr));
	id->sock = cm_active_sock(cid->route.addr.dst_addr.sa_family);
	m.src_id = id->local_id;
	m.ps = cid->ps;
	m.src_port = ntohs(rdma_get_src_port(cid));
	m.dst_port = ntohs(rdma_get_dst_port(cid));
	m.gid = id->dev->gid;
	m.qpn = id->my_qpn;
	m.psn = id->my_psn;
	m.qkey = id->qkey ? id->qkey : RDMA_UDP_QKEY;
	m.mtu = (uint8_t)id->path_mtu;
	/* Large segments are offered for an RC QP the CM drives itself (it then sets them before
	 * RTR); an application that moves its own QP gets the path MTU. */
	id->seg = cid->qp && cid->qp->qp_type == IBV_QPT_RC && id->path_mtu == IBV_MTU_4096
		? id->dev->seg : 0;
	m.seg4k = (uint8_t)(id->seg / 4096 > 255 ? 255 : id->seg / 4096);
	m.responder_resources = id->responder_resources;
	m.initiator_depth = id->initiator_depth;
	m.retry_count = id->retry_count;
	m.rnr_retry_count = id->rnr_retry_count;
	m.flow_control = id->flow_control;
	m.srq = cid->srq != NULL || (p && p->srq);
	m.qp_type = (uint8_t)cm_qpt(id);
	m.ece_vendor = id->ece_vendor;
	m.ece_options = id->ece_options;
	id->state = CM_REQ_SENT;
	ret = id->sock ? cm_send(id, &m, true) : -ENOMEM;
	pthread_mutex_unlock(&cm.lock);
	if (ret)
		return fail(ret);
	if (id->chan->sync)
		return sync_wait(id, RDMA_CM_EVENT_ESTABLISHED);
	return 0;
}

CM_EXPORT int rdma_establish(struct rdma_cm_id *cid)
{
	struct cm_id *id = cm_id(cid);
	struct cm_msg m = { .type = CM_MSG_RTU };
	int ret;

	pthread_mutex_lock(&cm.lock);
	if (id->state != CM_REP_RCVD) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	if (id->ibcm) {
		ret = cm_ibcm_establish(id);	/* the RTU */
		pthread_mutex_unlock(&cm.lock);
		return ret ? fail(ret) : 0;
	}
	m.src_id = id->local_id;
	m.dst_id = id->remote_id;
	m.ps = cid->ps;
	ret = cm_send(id, &m, false);
	id->state = CM_ESTABLISHED;
	id->last_heard = cm_now_ms();
	id->next_probe = id->last_heard + 1000;
	pthread_mutex_unlock(&cm.lock);
	return ret ? fail(ret) : 0;
}

CM_EXPORT int rdma_disconnect(struct rdma_cm_id *cid)
{
	struct cm_id *id = cm_id(cid);
	struct cm_msg m = { .type = CM_MSG_DREQ };
	int ret = 0;

	pthread_mutex_lock(&cm.lock);
	if (id->ibcm) {
		ret = cm_ibcm_disconnect(id);	/* DREQ (or nothing: the peer's came first) */
		pthread_mutex_unlock(&cm.lock);
		return ret ? fail(ret) : 0;
	}
	switch (id->state) {
	case CM_ESTABLISHED:
	case CM_REP_SENT:
	case CM_REP_RCVD:
		cm_qp_to_err(id);
		m.src_id = id->local_id;
		m.dst_id = id->remote_id;
		m.ps = cid->ps;
		id->state = CM_DREQ_SENT;
		ret = cm_send(id, &m, true);
		break;
	case CM_DISCONNECTED:
		/* The peer's DREQ ended it and left the QP alone (cm.c, disconnected): the
		 * consumer's own disconnect moves it to ERR, as the kernel's rdma_cm does. */
		cm_qp_to_err(id);
		break;
	case CM_DREQ_SENT:
		break;	/* already going: nothing more to do */
	default:
		ret = -EINVAL;
		break;
	}
	pthread_mutex_unlock(&cm.lock);
	return ret ? fail(ret) : 0;
}

CM_EXPORT int rdma_notify(struct rdma_cm_id *cid, enum ibv_event_type event)
{
	/* The CM learns of establishment from its own RTU; nothing to do (rdma_notify(3)). */
	return 0;
}

CM_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *cid, struct ibv_qp_attr *attr, int *mask)
{
	int ret;

	pthread_mutex_lock(&cm.lock);
	ret = cm_fill_qp_attr(cm_id(cid), attr, mask);
	pthread_mutex_unlock(&cm.lock);
	return ret ? fail(ret) : 0;
}

CM_EXPORT int rdma_migrate_id(struct rdma_cm_id *cid, struct rdma_event_channel *channel)
{
	struct cm_id *id = cm_id(cid);
	struct cm_channel *to = channel ? (struct cm_channel *)channel : chan_new(true);
	struct cm_channel *from;

	if (!to)
		return fail(ENOMEM);
	pthread_mutex_lock(&cm.lock);
	from = id->chan;
	bool had = from->head != NULL;

	/* Undelivered events about the id follow it to its new channel. */
	for (struct cm_event **p = &from->head; *p;) {
		struct cm_event *e = *p;

		if (e->ev.id == cid) {
			*p = e->next;
			cm_chan_push(to, e);
		} else {
			p = &e->next;
		}
	}
	from->tail = NULL;
	for (struct cm_event *e = from->head; e; e = e->next)
		from->tail = e;
	if (had && !from->head)
		cm_chan_clear(from);
	bool free_from = id->own_chan;

	id->chan = to;
	id->own_chan = !channel;
	cid->channel = to->sync ? NULL : &to->ch;
	pthread_mutex_unlock(&cm.lock);
	/* Only a channel the id owned goes with it; a listener's channel stays the listener's. */
	if (free_from) {
		close(from->ch.fd);
		free(from);
	}
	return 0;
}

CM_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *cid)
{
	return cm_sa_port(&cid->route.addr.src_addr);
}

CM_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *cid)
{
	return cm_sa_port(&cid->route.addr.dst_addr);
}

/* ---- options and ECE ----------------------------------------------------------------------------- */
CM_EXPORT int rdma_set_option(struct rdma_cm_id *cid, int level, int optname, void *optval,
			      size_t optlen)
{
	struct cm_id *id = cm_id(cid);

	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				return fail(EINVAL);
			id->tos = *(uint8_t *)optval;
			id->tos_set = true;
			return 0;
		case RDMA_OPTION_ID_REUSEADDR:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			id->reuseaddr = *(int *)optval != 0;
			return 0;
		case RDMA_OPTION_ID_AFONLY:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			id->afonly = *(int *)optval != 0;
			return 0;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t) || *(uint8_t *)optval > 31)
				return fail(EINVAL);
			id->ack_timeout = *(uint8_t *)optval;
			return 0;
		}
	}
	/* RDMA_OPTION_IB_PATH: there are no IB path records to set on a RoCE port. */
	return fail(ENOSYS);
}

CM_EXPORT int rdma_set_local_ece(struct rdma_cm_id *cid, struct ibv_ece *ece)
{
	if (!ece)
		return fail(EINVAL);
	pthread_mutex_lock(&cm.lock);
	cm_id(cid)->ece_vendor = ece->vendor_id;
	cm_id(cid)->ece_options = ece->options;
	pthread_mutex_unlock(&cm.lock);
	return 0;
}

CM_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *cid, struct ibv_ece *ece)
{
	if (!ece)
		return fail(EINVAL);
	pthread_mutex_lock(&cm.lock);
	ece->vendor_id = cm_id(cid)->ece_vendor;
	ece->options = cm_id(cid)->ece_options;
	ece->comp_mask = 0;
	pthread_mutex_unlock(&cm.lock);
	return 0;
}

/* ---- devices ----------------------------------------------------------------------------------- */
CM_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **list;

	pthread_mutex_lock(&cm.lock);
	if (cm_devices_init()) {
		pthread_mutex_unlock(&cm.lock);
		if (num_devices)
			*num_devices = 0;
		return calloc(1, sizeof(*list));
	}
	list = calloc((size_t)cm_ndevs + 1, sizeof(*list));
	for (int i = 0; list && i < cm_ndevs; i++)
		list[i] = cm_devs[i].ctx;
	if (num_devices)
		*num_devices = list ? cm_ndevs : 0;
	pthread_mutex_unlock(&cm.lock);
	if (!list)
		errno = ENOMEM;
	return list;
}

CM_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

CM_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	switch (event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
	case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
	case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
	case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
	case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
	case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
	case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
	case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
	case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
	case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
	case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
	case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
	case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
	case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
	case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
	case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
	default: return "UNKNOWN EVENT";
	}
}
