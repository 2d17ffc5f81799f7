/* SPDX-License-Identifier: MIT */
/*
 * Datagram rsockets over UD (RDMA_PS_UDP).
 *
 * A bound datagram rsocket listens on its address with an rdma_cm id of RDMA_PS_UDP, so that
 * peers can resolve it: a sender that knows only an IP address and port sends a SIDR request
 * there (rdma_connect on a UDP id), and the socket answers with its UD QP number (rdma_accept).
 * The result (GID, QPN, Q_Key, address handle) is kept per destination address.
 *
 * Every datagram carries a header (proto.h) naming the sender's socket address and its GID
 * and QPN: the receiver reports that address to rrecvfrom and keeps it as a destination, so an
 * answer needs no resolution. The largest datagram is the path MTU less the header; larger
 * ones fail with EMSGSIZE. As with UDP, a datagram may be lost (a receiver without a free
 * receive buffer drops it); nothing is retransmitted.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "cm/rsocket/rs.h"

#define RS_RESOLVE_MS 5000

struct rs_dest {
	struct rs_dest *next;
	struct sockaddr_storage addr;		/* the peer's socket address */
	struct sockaddr_storage src;		/* ours, as we name it in our header */
	union ibv_gid gid;
	uint32_t qpn, qkey;
	struct ibv_ah *ah;
};

struct rs_dgram {
	uint32_t mtu;				/* largest UD message, header included */
	uint32_t rslot;				/* GRH + mtu */
	uint8_t *rbufs, *sbufs;
	struct ibv_mr *rmr, *smr;
	uint32_t *rq_slot, *rq_len;		/* received, not read yet: a FIFO */
	uint32_t rq_head, rq_tail;
	uint32_t *sfree, nfree;
	union ibv_gid gid;
	struct rs_dest *dests, *conn;
	/* the resolution in progress (one at a time) */
	struct rdma_cm_id *rid;
	bool rdone;
	int rerr;
	struct rdma_ud_param rud;
};

static bool sa_same(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

	return x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, 16);
}

static bool sa_is_any(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

/* ---- setup --------------------------------------------------------------------------------- */
static int post_recv(struct rsock *rs, uint32_t slot)
{
	struct rs_dgram *dg = rs->dg;
	struct ibv_sge sge = { .addr = (uintptr_t)(dg->rbufs + (size_t)slot * dg->rslot),
			       .length = dg->rslot, .lkey = dg->rmr->lkey };
	struct ibv_recv_wr wr = { .wr_id = RS_WRID_RECV | slot, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return ibv_post_recv(rs->qp, &wr, &bad);
}

static int qp_ready(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = RDMA_UDP_QKEY };
	int ret;

	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	if (ret)
		return ret;
	a.qp_state = IBV_QPS_RTR;
	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	if (ret)
		return ret;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static int dg_setup(struct rsock *rs)
{
	struct ibv_context *ctx = rs->id->verbs ? rs->id->verbs : rs_default_ctx();
	struct ibv_qp_init_attr qa;
	struct ibv_port_attr pa;
	struct rs_dgram *dg;
	int ret;

	if (!ctx)
		return -ENODEV;
	dg = rs->dg = calloc(1, sizeof(*dg));
	if (!dg)
		return -ENOMEM;
	rs->pd = rs_pd(ctx);
	/* The GID naming the device's UDP port (the table's last, docs/gid.md). */
	if (!rs->pd || ibv_query_port(ctx, 1, &pa) || !pa.gid_tbl_len ||
	    ibv_query_gid(ctx, 1, pa.gid_tbl_len - 1, &dg->gid))
		return -ENODEV;
	dg->mtu = 128u << pa.active_mtu;	/* IBV_MTU_256 = 1 */
	dg->rslot = RS_GRH_LEN + dg->mtu;
	rs->cch = ibv_create_comp_channel(ctx);
	if (!rs->cch)
		return -errno;
	rs_set_fd_nonblock(rs->cch->fd);
	rs->cq = ibv_create_cq(ctx, RS_DG_NRECV + RS_DG_NSEND + 8, rs, rs->cch, 0);
	dg->rbufs = calloc(RS_DG_NRECV, dg->rslot);
	dg->sbufs = calloc(RS_DG_NSEND, dg->mtu);
	dg->rq_slot = calloc(RS_DG_NRECV, sizeof(uint32_t));
	dg->rq_len = calloc(RS_DG_NRECV, sizeof(uint32_t));
	dg->sfree = calloc(RS_DG_NSEND, sizeof(uint32_t));
	if (!rs->cq || !dg->rbufs || !dg->sbufs || !dg->rq_slot || !dg->rq_len || !dg->sfree)
		return -ENOMEM;
	dg->rmr = ibv_reg_mr(rs->pd, dg->rbufs, (size_t)RS_DG_NRECV * dg->rslot,
			     IBV_ACCESS_LOCAL_WRITE);
	dg->smr = ibv_reg_mr(rs->pd, dg->sbufs, (size_t)RS_DG_NSEND * dg->mtu, 0);
	if (!dg->rmr || !dg->smr)
		return errno ? -errno : -ENOMEM;
	memset(&qa, 0, sizeof(qa));
	qa.qp_context = rs;
	qa.send_cq = rs->cq;
	qa.recv_cq = rs->cq;
	qa.qp_type = IBV_QPT_UD;
	qa.sq_sig_all = 1;
	qa.cap.max_send_wr = RS_DG_NSEND;
	qa.cap.max_recv_wr = RS_DG_NRECV;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	rs->qp = ibv_create_qp(rs->pd, &qa);
	if (!rs->qp)
		return -errno;
	ret = qp_ready(rs->qp);
	if (ret)
		return -ret;
	for (uint32_t i = 0; i < RS_DG_NRECV; i++) {
		ret = post_recv(rs, i);
		if (ret)
			return -ret;
	}
	for (uint32_t i = 0; i < RS_DG_NSEND; i++)
		dg->sfree[dg->nfree++] = i;
	rs->state = RS_DGRAM;
	ret = rs_svc_add(rs);
	if (ret)
		return ret;
	rs->svc = true;
	return 0;
}

int rs_dg_bind(struct rsock *rs, const struct sockaddr *a, socklen_t len)
{
	int ret;

	if (!a || len < sizeof(sa_family_t))
		return -EINVAL;
	if (a->sa_family != AF_INET && a->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	if (len < rs_sa_len(a) || rs->state != RS_INIT)
		return -EINVAL;
	if (rdma_bind_addr(rs->id, (struct sockaddr *)a))
		return errno == ENODEV ? -EADDRNOTAVAIL : -errno;
	/* Listening makes the address resolvable: peers' SIDR requests come here. */
	if (rdma_listen(rs->id, 128))
		return -errno;
	ret = dg_setup(rs);
	if (ret)
		rs_warn(rs, "datagram setup: %s", strerror(-ret));
	return ret;
}

static int autobind(struct rsock *rs)
{
	struct sockaddr_storage any;

	if (rs->state == RS_DGRAM)
		return 0;
	memset(&any, 0, sizeof(any));
	any.ss_family = (sa_family_t)rs->domain;
	return rs_dg_bind(rs, (struct sockaddr *)&any, rs_sa_len((struct sockaddr *)&any));
}

/* ---- destinations ------------------------------------------------------------------------------ */
/* Our address as the peer at `to` sees it: the bound one, or the source the routing picks. */
static void source_for(struct rsock *rs, const struct sockaddr *to, struct sockaddr_storage *src)
{
	const struct sockaddr *local = rdma_get_local_addr(rs->id);
	socklen_t l = sizeof(*src);
	uint16_t port = rdma_get_src_port(rs->id);
	int fd;

	memcpy(src, local, rs_sa_len(local));
	if (!sa_is_any(local))
		return;
	fd = sys_socket(to->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (!sys_connect(fd, to, rs_sa_len(to)) && !sys_getsockname(fd, (struct sockaddr *)src, &l)) {
		if (src->ss_family == AF_INET)
			((struct sockaddr_in *)src)->sin_port = port;
		else
			((struct sockaddr_in6 *)src)->sin6_port = port;
	}
	sys_close(fd);
}

static struct rs_dest *find_dest(struct rs_dgram *dg, const struct sockaddr *a)
{
	for (struct rs_dest *d = dg->dests; d; d = d->next)
		if (sa_same((struct sockaddr *)&d->addr, a))
			return d;
	return NULL;
}

/* Records (or refreshes) the endpoint behind socket address a. */
static struct rs_dest *learn(struct rsock *rs, const struct sockaddr *a, const union ibv_gid *gid,
			     uint32_t qpn, uint32_t qkey)
{
	struct rs_dgram *dg = rs->dg;
	struct rs_dest *d = find_dest(dg, a);
	struct ibv_ah_attr aa;

	if (d && d->qpn == qpn && !memcmp(&d->gid, gid, sizeof(*gid)))
		return d;
	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d)
			return NULL;
		memcpy(&d->addr, a, rs_sa_len(a));
		source_for(rs, a, &d->src);
		d->next = dg->dests;
		dg->dests = d;
	}
	if (d->ah)
		ibv_destroy_ah(d->ah);
	memset(&aa, 0, sizeof(aa));
	aa.is_global = 1;
	aa.port_num = 1;
	aa.grh.dgid = *gid;
	aa.grh.hop_limit = 64;
	d->ah = ibv_create_ah(rs->pd, &aa);
	d->gid = *gid;
	d->qpn = qpn;
	d->qkey = qkey;
	return d->ah ? d : NULL;
}

static void on_resolve_event(struct rsock *rs, struct rdma_cm_event *ev)
{
	struct rs_dgram *dg = rs->dg;
	struct rdma_conn_param p;

	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(ev->id, RS_RESOLVE_MS))
			dg->rerr = errno;
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		memset(&p, 0, sizeof(p));
		p.qp_num = rs->qp->qp_num;
		if (rdma_connect(ev->id, &p))
			dg->rerr = errno;
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		dg->rud = ev->param.ud;
		dg->rdone = true;
		break;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_UNREACHABLE:
		dg->rerr = ev->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : EHOSTUNREACH;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		dg->rerr = ev->status < 0 ? -ev->status : EHOSTUNREACH;
		break;
	default:
		break;
	}
}

static int rs_dg_cm_drain(struct rsock *rs)
{
	struct rdma_cm_event *ev;
	int n = 0;

	rs->cm_pending = false;
	while (!rdma_get_cm_event(rs->ch, &ev)) {
		struct rdma_cm_id *id = ev->id;
		bool destroy = false;

		n++;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			/* Someone resolves us: answer with our QP. */
			struct rdma_conn_param p = { .qp_num = rs->qp ? rs->qp->qp_num : 0 };

			if (rs->qp && !rs->closed)
				rdma_accept(id, &p);
			else
				rdma_reject(id, NULL, 0);
			destroy = true;
		} else if (rs->dg && id == rs->dg->rid) {
			on_resolve_event(rs, ev);
		}
		rdma_ack_cm_event(ev);
		if (destroy)
			rdma_destroy_id(id);
	}
	return n;
}

/* Finds or resolves the destination at `to` (blocking, bounded). */
static int get_dest(struct rsock *rs, const struct sockaddr *to, socklen_t tolen,
		    struct rs_dest **out)
{
	struct rs_dgram *dg = rs->dg;
	uint64_t deadline;
	int ret = 0;

	if (tolen < sizeof(sa_family_t) || (to->sa_family != AF_INET && to->sa_family != AF_INET6) ||
	    tolen < rs_sa_len(to))
		return -EINVAL;
	*out = find_dest(dg, to);
	if (*out)
		return 0;
	if (rdma_create_id(rs->ch, &dg->rid, NULL, RDMA_PS_UDP))
		return -errno;
	dg->rdone = false;
	dg->rerr = 0;
	if (rdma_resolve_addr(dg->rid, NULL, (struct sockaddr *)to, RS_RESOLVE_MS)) {
		ret = -errno;
		goto out;
	}
	deadline = rs_now_us() + RS_RESOLVE_MS * 1000ull;
	while (!dg->rdone && !dg->rerr) {
		uint64_t now = rs_now_us();

		if (rs_dg_cm_drain(rs))
			continue;
		if (now >= deadline) {
			ret = -EHOSTUNREACH;
			goto out;
		}
		/* Short sleeps: the service thread may take the answer off the channel. */
		rs_wait(rs, 2);
	}
	if (dg->rerr) {
		ret = -dg->rerr;
		goto out;
	}
	*out = learn(rs, to, &dg->rud.ah_attr.grh.dgid, dg->rud.qp_num, dg->rud.qkey);
	if (!*out)
		ret = -ENOMEM;
out:
	rdma_destroy_id(dg->rid);
	dg->rid = NULL;
	return ret;
}

int rs_dg_connect(struct rsock *rs, const struct sockaddr *a, socklen_t len)
{
	struct rs_dest *d;
	int ret;

	if (a && len >= sizeof(sa_family_t) && a->sa_family == AF_UNSPEC) {
		if (rs->dg)
			rs->dg->conn = NULL;	/* connect(AF_UNSPEC): dissolve the association */
		return 0;
	}
	ret = autobind(rs);
	if (ret)
		return ret;
	ret = get_dest(rs, a, len, &d);
	if (ret)
		return ret;
	rs->dg->conn = d;
	return 0;
}

int rs_dg_getpeername(struct rsock *rs, struct sockaddr *a, socklen_t *len)
{
	if (!rs->dg || !rs->dg->conn)
		return -ENOTCONN;
	rs_copy_addr(a, len, (struct sockaddr *)&rs->dg->conn->addr);
	return 0;
}

/* ---- the data path ---------------------------------------------------------------------------- */
static int rs_dg_drain(struct rsock *rs)
{
	struct rs_dgram *dg = rs->dg;
	struct ibv_wc wc[32];
	int n, total = 0;

	if (!dg || !rs->cq)
		return 0;
	do {
		n = ibv_poll_cq(rs->cq, 32, wc);
		for (int i = 0; i < n; i++) {
			uint32_t slot = (uint32_t)wc[i].wr_id;

			if (!(wc[i].wr_id & RS_WRID_RECV)) {
				dg->sfree[dg->nfree++] = slot;
				continue;
			}
			if (wc[i].status != IBV_WC_SUCCESS)
				continue;	/* flushed: the socket is going away */
			if (wc[i].byte_len < RS_GRH_LEN + RS_DG_HDR_LEN || rs->shut_rd) {
				post_recv(rs, slot);
				continue;
			}
			dg->rq_slot[dg->rq_tail % RS_DG_NRECV] = slot;
			dg->rq_len[dg->rq_tail % RS_DG_NRECV] = wc[i].byte_len - RS_GRH_LEN;
			dg->rq_tail++;
		}
		total += n > 0 ? n : 0;
	} while (n == 32);
	return total;
}

ssize_t rs_dg_sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags,
		    const struct sockaddr *to, socklen_t tolen)
{
	size_t len = rs_iov_len(iov, iovcnt);
	struct rs_dgram *dg;
	struct rs_dest *d;
	struct rs_dg_hdr h;
	struct ibv_sge sge;
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	uint32_t slot;
	uint8_t *p;
	int ret, tmo = rs_timeo_ms(&rs->sndtimeo);

	if (rs->shut_wr)
		return -EPIPE;
	ret = autobind(rs);
	if (ret)
		return ret;
	dg = rs->dg;
	if (to) {
		ret = get_dest(rs, to, tolen, &d);
		if (ret)
			return ret;
	} else if (!(d = dg->conn)) {
		return -EDESTADDRREQ;
	}
	if (len + RS_DG_HDR_LEN > dg->mtu)
		return -EMSGSIZE;
	while (!dg->nfree) {
		if (rs_progress(rs))
			continue;
		if (rs_nonblock(rs, flags)) {
			rs_yield();
			return -EAGAIN;
		}
		if (rs_wait(rs, tmo) == -ETIMEDOUT)
			return -EAGAIN;
	}
	slot = dg->sfree[--dg->nfree];
	p = dg->sbufs + (size_t)slot * dg->mtu;
	memset(&h, 0, sizeof(h));
	h.src = d->src;
	h.qpn = rs->qp->qp_num;
	h.gid = dg->gid;
	rs_dg_hdr_encode(&h, p);
	rs_iov_gather(p + RS_DG_HDR_LEN, iov, iovcnt, 0, len);
	sge = (struct ibv_sge){ .addr = (uintptr_t)p, .length = (uint32_t)(len + RS_DG_HDR_LEN),
				.lkey = dg->smr->lkey };
	wr.wr_id = slot;
	wr.wr.ud.ah = d->ah;
	wr.wr.ud.remote_qpn = d->qpn;
	wr.wr.ud.remote_qkey = d->qkey ? d->qkey : RDMA_UDP_QKEY;
	ret = ibv_post_send(rs->qp, &wr, &bad);
	if (ret) {
		dg->sfree[dg->nfree++] = slot;
		return -ret;
	}
	return (ssize_t)len;
}

ssize_t rs_dg_recvv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags,
		    struct sockaddr *from, socklen_t *fromlen)
{
	size_t total = rs_iov_len(iov, iovcnt);
	int ret, tmo = rs_timeo_ms(&rs->rcvtimeo);
	struct rs_dgram *dg;

	ret = autobind(rs);
	if (ret)
		return ret;
	dg = rs->dg;
	for (;;) {
		if (dg->rq_head != dg->rq_tail) {
			uint32_t slot = dg->rq_slot[dg->rq_head % RS_DG_NRECV];
			uint32_t len = dg->rq_len[dg->rq_head % RS_DG_NRECV];
			uint8_t *p = dg->rbufs + (size_t)slot * dg->rslot + RS_GRH_LEN;
			struct rs_dg_hdr h;
			size_t n;

			if (rs_dg_hdr_decode(&h, p, len)) {
				dg->rq_head++;
				post_recv(rs, slot);
				continue;	/* not ours: dropped */
			}
			learn(rs, (struct sockaddr *)&h.src, &h.gid, h.qpn, RDMA_UDP_QKEY);
			n = len - RS_DG_HDR_LEN;
			if (n > total)
				n = total;	/* the rest of the datagram is discarded, as UDP */
			rs_iov_scatter(iov, iovcnt, 0, p + RS_DG_HDR_LEN, n);
			if (from && fromlen)
				rs_copy_addr(from, fromlen, (struct sockaddr *)&h.src);
			if (!(flags & MSG_PEEK)) {
				dg->rq_head++;
				post_recv(rs, slot);
			}
			return (ssize_t)n;
		}
		if (rs_progress(rs))
			continue;
		if (rs->shut_rd)
			return 0;
		if (rs_nonblock(rs, flags)) {
			rs_yield();
			return -EAGAIN;
		}
		if (rs_wait(rs, tmo) == -ETIMEDOUT)
			return -EAGAIN;
	}
}

static short rs_dg_revents(struct rsock *rs, short events)
{
	struct rs_dgram *dg = rs->dg;
	short r = POLLOUT;

	if (dg) {
		r = dg->nfree ? POLLOUT : 0;
		if (dg->rq_head != dg->rq_tail || rs->shut_rd)
			r |= POLLIN;
	}
	return r & events;
}

static void rs_dg_destroy(struct rsock *rs)
{
	struct rs_dgram *dg = rs->dg;

	if (rs->svc)
		rs_svc_del(rs);
	rs->svc = false;
	if (rs->qp)
		ibv_destroy_qp(rs->qp);
	rs->qp = NULL;
	if (dg) {
		while (dg->dests) {
			struct rs_dest *d = dg->dests;

			dg->dests = d->next;
			if (d->ah)
				ibv_destroy_ah(d->ah);
			free(d);
		}
		if (dg->rmr)
			ibv_dereg_mr(dg->rmr);
		if (dg->smr)
			ibv_dereg_mr(dg->smr);
		free(dg->rbufs);
		free(dg->sbufs);
		free(dg->rq_slot);
		free(dg->rq_len);
		free(dg->sfree);
		free(dg);
		rs->dg = NULL;
	}
	if (rs->cq)
		ibv_destroy_cq(rs->cq);
	if (rs->cch)
		ibv_destroy_comp_channel(rs->cch);
	rs->cq = NULL;
	rs->cch = NULL;
}

/* ---- the datagram socket's rs_ops ------------------------------------------------------------------ */
static int dg_progress(struct rsock *rs)
{
	/* A datagram socket's event channel only carries peers' resolution requests, which the
	 * service thread answers (svc.c): polling it here cost a system call per look (udpong
	 * polls in a loop), so only a channel that woke a sleeper is read. */
	return rs_dg_drain(rs) + (rs->cm_pending ? rs_dg_cm_drain(rs) : 0);
}

const struct rs_ops rs_dg_ops = {
	.progress = dg_progress,
	.cm_drain = rs_dg_cm_drain,
	.revents = rs_dg_revents,
	.destroy = rs_dg_destroy,
};
