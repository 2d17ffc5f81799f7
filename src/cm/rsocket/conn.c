/* SPDX-License-Identifier: MIT */
/*
 * Stream connections: rbind, rlisten, raccept, rconnect on rdma_cm (RDMA_PS_TCP), the CM
 * events that move an rsocket through its states, and the teardown.
 *
 *   active:   INIT/BOUND -rconnect-> RESOLVING -ROUTE_RESOLVED-> CONNECTING -ESTABLISHED->
 *             CONNECTED;  REJECTED/UNREACHABLE/errors -> FAILED (so_error)
 *   passive:  LISTENING; raccept makes a new rsocket: ACCEPTING -ESTABLISHED-> CONNECTED
 *   both:     CONNECTED -DISCONNECTED (or a transport error)-> DISCONNECTED
 *
 * The receive ring of each side travels in the connection's private data (proto.h): in the
 * REQ from the active side, in the REP from the passive side. A request without valid rsocket
 * private data (another protocol, another version) is rejected.
 */
#include <stdlib.h>
#include <string.h>

#include "cm/rsocket/rs.h"

static void set_failed(struct rsock *rs, int err)
{
	rs_dbg(rs, "%s -> FAILED (%s)", rs_state_name(rs->state), strerror(err));
	rs->state = RS_FAILED;
	rs->so_error = err;
}

static void set_disconnected(struct rsock *rs, int err)
{
	if (rs->state == RS_DISCONNECTED)
		return;
	rs_dbg(rs, "%s -> DISCONNECTED", rs_state_name(rs->state));
	rs->state = RS_DISCONNECTED;
	if (err && !rs->so_error)
		rs->so_error = err;
}

/* The errno a failed connection attempt reports, from the CM event that ended it. */
static int event_errno(const struct rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_REJECTED:
		return ECONNREFUSED;
	case RDMA_CM_EVENT_UNREACHABLE:
		return ev->status < 0 ? -ev->status : ETIMEDOUT;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return ev->status < 0 ? -ev->status : EHOSTUNREACH;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return ENODEV;
	default:
		return ev->status < 0 ? -ev->status : ECONNRESET;
	}
}

/* ---- bind, listen ------------------------------------------------------------------------------ */
int rs_stream_bind(struct rsock *rs, const struct sockaddr *a, socklen_t len)
{
	if (!a || len < sizeof(sa_family_t))
		return -EINVAL;
	if (a->sa_family != AF_INET && a->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	if (len < rs_sa_len(a))
		return -EINVAL;
	if (rs->state != RS_INIT)
		return -EINVAL;	/* bind(2): already bound */
	if (rdma_bind_addr(rs->id, (struct sockaddr *)a))
		return errno == ENODEV ? -EADDRNOTAVAIL : -errno;
	rs->state = RS_BOUND;
	return 0;
}

int rs_stream_listen(struct rsock *rs, int backlog)
{
	if (rs->state == RS_LISTENING) {
		rs->backlog = backlog;
		return 0;
	}
	if (rs->state == RS_INIT) {
		struct sockaddr_storage any;
		int ret;

		memset(&any, 0, sizeof(any));
		any.ss_family = (sa_family_t)rs->domain;
		ret = rs_stream_bind(rs, (struct sockaddr *)&any, rs_sa_len((struct sockaddr *)&any));
		if (ret)
			return ret;
	}
	if (rs->state != RS_BOUND)
		return -EINVAL;
	if (rdma_listen(rs->id, backlog > 0 ? backlog : 128))
		return -errno;
	rs->backlog = backlog;
	rs->state = RS_LISTENING;
	rs_dbg(rs, "listening");
	return 0;
}

/* ---- CM events ---------------------------------------------------------------------------------- */
static void on_connect_request(struct rsock *rs, struct rdma_cm_event *ev, bool *destroy)
{
	struct rs_accept *a;
	struct rs_conn c;
	const struct rdma_conn_param *p = &ev->param.conn;

	if (rs_conn_decode(&c, p->private_data, p->private_data_len)) {
		rs_warn(rs, "connection request without rsocket private data (version %u wanted): "
			"rejected", RS_PROTO_VERSION);
		rdma_reject(ev->id, NULL, 0);
		*destroy = true;
		return;
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		rdma_reject(ev->id, NULL, 0);
		*destroy = true;
		return;
	}
	a->id = ev->id;
	a->conn = c;
	*rs->acceptq_tail = a;
	rs->acceptq_tail = &a->next;
	rs->nqueued++;
}

static void on_route_resolved(struct rsock *rs)
{
	struct rdma_conn_param p;
	struct rs_conn c;
	uint8_t pdata[RS_CONN_LEN];
	int ret;

	ret = rs_stream_alloc(rs);
	if (ret) {
		set_failed(rs, -ret);
		return;
	}
	rs_conn_local(rs, &c);
	rs_conn_encode(&c, pdata);
	memset(&p, 0, sizeof(p));
	p.private_data = pdata;
	p.private_data_len = RS_CONN_LEN;
	p.retry_count = 7;
	p.rnr_retry_count = 7;	/* an overrun slot is retried, never an error */
	if (rdma_connect(rs->id, &p)) {
		set_failed(rs, errno);
		return;
	}
	rs->state = RS_CONNECTING;
}

static void on_established(struct rsock *rs, struct rdma_cm_event *ev)
{
	if (rs->state == RS_CONNECTING) {
		struct rs_conn c;

		if (rs_conn_decode(&c, ev->param.conn.private_data, ev->param.conn.private_data_len)) {
			rs_warn(rs, "the peer's answer has no rsocket private data (version %u)",
				RS_PROTO_VERSION);
			rdma_disconnect(rs->id);
			set_failed(rs, EPROTO);
			return;
		}
		rs_stream_peer(rs, &c);
	}
	if (rs->state == RS_CONNECTING || rs->state == RS_ACCEPTING) {
		rs->state = RS_CONNECTED;
		rs_dbg(rs, "connected");
	}
}

static void handle(struct rsock *rs, struct rdma_cm_event *ev, bool *destroy)
{
	rs_dbg(rs, "%s (status %d) in %s", rdma_event_str(ev->event), ev->status,
	       rs_state_name(rs->state));
	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		if (rs->state == RS_LISTENING && !rs->closed) {
			on_connect_request(rs, ev, destroy);
		} else {
			rdma_reject(ev->id, NULL, 0);
			*destroy = true;
		}
		break;
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rs->state == RS_RESOLVING && rdma_resolve_route(rs->id, 2000))
			set_failed(rs, errno);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (rs->state == RS_RESOLVING)
			on_route_resolved(rs);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		on_established(rs, ev);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (rs->state == RS_CONNECTING)
			set_failed(rs, ECONNRESET);
		else if (rs->state == RS_CONNECTED || rs->state == RS_ACCEPTING)
			set_disconnected(rs, 0);
		break;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
	case RDMA_CM_EVENT_ADDR_CHANGE:
		break;
	default:
		/* Every failure: REJECTED, UNREACHABLE, CONNECT_ERROR, ADDR/ROUTE_ERROR, ... */
		if (rs->state == RS_RESOLVING || rs->state == RS_CONNECTING)
			set_failed(rs, event_errno(ev));
		else if (rs->state == RS_CONNECTED || rs->state == RS_ACCEPTING)
			set_disconnected(rs, event_errno(ev));
		break;
	}
}

int rs_cm_drain(struct rsock *rs)
{
	struct rdma_cm_event *ev;
	int n = 0;

	rs->cm_pending = false;
	while (!rdma_get_cm_event(rs->ch, &ev)) {
		struct rdma_cm_id *id = ev->id;
		bool destroy = false;

		n++;
		if (rs->type == SOCK_STREAM)
			handle(rs, ev, &destroy);
		rdma_ack_cm_event(ev);
		if (destroy)
			rdma_destroy_id(id);
	}
	return n;
}

/* ---- accept ------------------------------------------------------------------------------------ */
static int accept_one(struct rsock *ls, struct rs_accept *a, struct rsock **out)
{
	struct rdma_conn_param p;
	struct rs_conn c;
	uint8_t pdata[RS_CONN_LEN];
	struct rsock *rs;
	int ret;

	rs = rs_alloc(ls->domain, SOCK_STREAM, ls);
	if (!rs)
		return -errno;
	/* The new connection's events come to its own channel: its fd is the new number. */
	if (rdma_migrate_id(a->id, rs->ch)) {
		ret = -errno;
		goto fail;
	}
	rs->id = a->id;
	rs->id->context = rs;
	ret = rs_stream_alloc(rs);
	if (ret)
		goto fail;
	rs_stream_peer(rs, &a->conn);
	rs_conn_local(rs, &c);
	rs_conn_encode(&c, pdata);
	memset(&p, 0, sizeof(p));
	p.private_data = pdata;
	p.private_data_len = RS_CONN_LEN;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	if (rdma_accept(rs->id, &p)) {
		ret = -errno;
		goto fail;
	}
	rs->state = RS_ACCEPTING;
	ret = rs_insert(rs);
	if (ret)
		goto fail;
	*out = rs;
	return 0;
fail:
	rdma_reject(a->id, NULL, 0);	/* EINVAL, harmless, once accepted */
	rs->id = a->id;
	rs_free(rs);
	return ret;
}

int rs_stream_accept(struct rsock *ls, struct sockaddr *addr, socklen_t *len)
{
	struct rs_accept *a;
	struct rsock *rs = NULL;
	int ret, tmo = rs_timeo_ms(&ls->rcvtimeo);

	if (ls->state != RS_LISTENING)
		return -EINVAL;
	for (;;) {
		rs_cm_drain(ls);
		if (ls->acceptq)
			break;
		if (ls->fd_flags & O_NONBLOCK)
			return -EAGAIN;
		if (rs_wait(ls, tmo) == -ETIMEDOUT)
			return -EAGAIN;
	}
	a = ls->acceptq;
	ls->acceptq = a->next;
	if (!ls->acceptq)
		ls->acceptq_tail = &ls->acceptq;
	ls->nqueued--;
	ret = accept_one(ls, a, &rs);
	free(a);
	if (ret)
		return ret;
	if (addr && len)
		rs_copy_addr(addr, len, rdma_get_peer_addr(rs->id));
	rs_dbg(rs, "accepted on listener %d", ls->fd);
	return rs->fd;
}

/* ---- connect -------------------------------------------------------------------------------------- */
int rs_stream_connect(struct rsock *rs, const struct sockaddr *a, socklen_t len)
{
	int ret;

	switch (rs->state) {
	case RS_INIT:
	case RS_BOUND:
		break;
	case RS_RESOLVING:
	case RS_CONNECTING:
		return -EALREADY;
	case RS_CONNECTED:
	case RS_ACCEPTING:
	case RS_DISCONNECTED:
		return -EISCONN;
	case RS_FAILED:
		return rs->so_error ? -rs->so_error : -ECONNABORTED;
	default:
		return -EINVAL;
	}
	if (!a || len < sizeof(sa_family_t) || len < rs_sa_len(a))
		return -EINVAL;
	if (a->sa_family != AF_INET && a->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	rs->state = RS_RESOLVING;
	if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)a, 2000)) {
		ret = errno;
		rs->state = RS_INIT;
		return -ret;
	}
	ret = rs_wait_connected(rs, rs->fd_flags & O_NONBLOCK);
	return ret == -EAGAIN ? -EINPROGRESS : ret;
}

/* ---- teardown --------------------------------------------------------------------------------------- */
void rs_stream_destroy(struct rsock *rs)
{
	struct rs_stream *st = &rs->st;

	while (rs->acceptq) {
		struct rs_accept *a = rs->acceptq;

		rs->acceptq = a->next;
		rdma_reject(a->id, NULL, 0);
		rdma_destroy_id(a->id);
		free(a);
	}
	if (rs->id && rs->qp &&
	    (rs->state == RS_CONNECTED || rs->state == RS_ACCEPTING || rs->state == RS_CONNECTING))
		rdma_disconnect(rs->id);
	if (rs->qp) {
		rdma_destroy_qp(rs->id);
		rs->qp = NULL;
	}
	rs_iomap_free(rs);
	if (rs->cq)
		ibv_destroy_cq(rs->cq);
	if (rs->cch)
		ibv_destroy_comp_channel(rs->cch);
	if (st->rmr)
		ibv_dereg_mr(st->rmr);
	if (st->smr)
		ibv_dereg_mr(st->smr);
	if (st->slot_mr)
		ibv_dereg_mr(st->slot_mr);
	free(st->rbuf);
	free(st->sbuf);
	free(st->slots);
	free(st->wr_bytes);
	free(st->pmaps);
	memset(st, 0, sizeof(*st));
	rs->cq = NULL;
	rs->cch = NULL;
}

/* ---- the stream's rs_ops ------------------------------------------------------------------------- */
static int stream_progress(struct rsock *rs)
{
	int n = rs_cq_drain(rs);

	/* A connected socket reads its event channel only when it may hold something: the
	 * channel fd woke a sleeper, or the QP was flushed (a disconnection). */
	if (rs->cm_pending || (rs->state != RS_CONNECTED && rs->state != RS_DISCONNECTED &&
			       rs->state != RS_INIT && rs->state != RS_BOUND))
		n += rs_cm_drain(rs);
	return n;
}

static short stream_revents(struct rsock *rs, short events)
{
	struct rs_stream *st = &rs->st;
	short r = 0;

	switch (rs->state) {
	case RS_LISTENING:
		if (rs->acceptq)
			r = POLLIN;
		break;
	case RS_ACCEPTING:
	case RS_CONNECTED:
	case RS_DISCONNECTED: {
		/* As a TCP socket: the peer's EOF is POLLIN (and POLLRDHUP); POLLHUP only once the
		 * connection is gone and nothing is left to read, so that a caller treating
		 * POLLHUP as the end still reads every byte first. */
		bool data = st->r_tail != st->r_head && !rs->shut_rd;
		bool gone = rs->state == RS_DISCONNECTED || st->qp_err;

		if (data || rs->peer_eof || rs->shut_rd || gone)
			r |= POLLIN;
		if (rs->peer_eof || gone)
			r |= POLLRDHUP;
		if (!gone && rs_stream_can_send(rs))
			r |= POLLOUT;
		if (gone && !data)
			r |= POLLHUP;
		if (rs->so_error)
			r |= POLLERR;
		break;
	}
	case RS_FAILED:
		r = POLLIN | POLLOUT | POLLERR;
		break;
	default:
		break;
	}
	return r & (events | POLLHUP | POLLERR);
}

const struct rs_ops rs_stream_ops = {
	.progress = stream_progress,
	.cm_drain = rs_cm_drain,
	.revents = stream_revents,
	.destroy = rs_stream_destroy,
};
