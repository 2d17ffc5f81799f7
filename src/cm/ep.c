/* SPDX-License-Identifier: MIT */
/*
 * The convenience layer of librdmacm: QPs and SRQs on an id, rdma_getaddrinfo, and the
 * synchronous endpoint calls used by rdma_server/rdma_client (rdma_create_ep, rdma_get_request),
 * written against this library's own calls and the public verbs.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "cm/cm.h"

static int fail(int err)
{
	errno = err < 0 ? -err : err;
	return -1;
}

static struct ibv_pd *default_pd(struct cm_id *id)
{
	return id->dev ? cm_dev_pd(id->dev) : NULL;
}

/* The device's XRC domain (XRC_RECV QPs and XRC SRQs of ids): one per device, private (fd
 * -1), opened on first use and kept for the process, as rdma-core's librdmacm does. */
static struct ibv_xrcd *default_xrcd(struct cm_id *id)
{
	struct ibv_xrcd *x;

	if (!id->dev)
		return NULL;
	pthread_mutex_lock(&cm.lock);
	if (!id->dev->xrcd) {
		struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
							     IBV_XRCD_INIT_ATTR_OFLAGS,
						.fd = -1, .oflags = O_CREAT };

		id->dev->xrcd = ibv_open_xrcd(id->dev->ctx, &a);
	}
	x = id->dev->xrcd;
	pthread_mutex_unlock(&cm.lock);
	return x;
}

/* ---- QPs and SRQs ---------------------------------------------------------------------------- */
/* Destroys the CQs and channels of `which` (CM_OWN_*) the library made for the id. */
static void destroy_cqs(struct rdma_cm_id *cid, uint8_t which)
{
	struct cm_id *id = cm_id(cid);

	which &= id->own_cqs;
	if (which & CM_OWN_QP_SCQ) {
		ibv_destroy_cq(cid->send_cq);
		ibv_destroy_comp_channel(cid->send_cq_channel);
		cid->send_cq = NULL;
		cid->send_cq_channel = NULL;
	}
	if (which & (CM_OWN_QP_RCQ | CM_OWN_SRQ_CQ)) {
		ibv_destroy_cq(cid->recv_cq);
		ibv_destroy_comp_channel(cid->recv_cq_channel);
		cid->recv_cq = NULL;
		cid->recv_cq_channel = NULL;
	}
	id->own_cqs &= (uint8_t)~which;
}

/* A CQ with its own completion channel (the rdma_verbs.h helpers rdma_get_send_comp and
 * rdma_get_recv_comp wait on them). */
static int make_cq(struct rdma_cm_id *cid, uint32_t size, struct ibv_cq **cq,
		   struct ibv_comp_channel **ch)
{
	*ch = ibv_create_comp_channel(cid->verbs);
	*cq = *ch ? ibv_create_cq(cid->verbs, (int)(size ? size : 1), cid, *ch, 0) : NULL;
	if (*cq)
		return 0;
	if (*ch)
		ibv_destroy_comp_channel(*ch);
	*ch = NULL;
	return -ENOMEM;
}

/* As librdmacm: a QP created without CQs gets its own, each with a completion channel. An
 * XRC_SEND QP has no receive side, an XRC_RECV QP no queues at all (its messages complete on
 * the CQ of the XRC SRQ they name). */
static int make_cqs(struct rdma_cm_id *cid, struct ibv_qp_init_attr_ex *a)
{
	struct cm_id *id = cm_id(cid);

	if (a->qp_type == IBV_QPT_XRC_RECV)
		return 0;
	if (!a->send_cq) {
		if (make_cq(cid, a->cap.max_send_wr, &cid->send_cq, &cid->send_cq_channel))
			goto fail;
		id->own_cqs |= CM_OWN_QP_SCQ;
		a->send_cq = cid->send_cq;
	}
	if (!a->recv_cq && a->qp_type != IBV_QPT_XRC_SEND) {
		if (make_cq(cid, a->cap.max_recv_wr, &cid->recv_cq, &cid->recv_cq_channel))
			goto fail;
		id->own_cqs |= CM_OWN_QP_RCQ;
		a->recv_cq = cid->recv_cq;
	}
	return 0;
fail:
	destroy_cqs(cid, CM_OWN_QP_SCQ | CM_OWN_QP_RCQ);
	return -ENOMEM;
}

CM_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *cid, struct ibv_qp_init_attr_ex *a)
{
	struct cm_id *id = cm_id(cid);
	struct ibv_qp *qp;
	int ret;

	if (!cid->verbs)
		return fail(EINVAL);	/* rdma_create_qp(3): the id must be bound to a device */
	if (cid->qp)
		return fail(EINVAL);	/* one QP per id */
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd) {
		a->pd = cid->pd ? cid->pd : default_pd(id);
		a->comp_mask |= IBV_QP_INIT_ATTR_PD;
	}
	if (!a->pd || a->pd->context != cid->verbs)
		return fail(EINVAL);
	if (a->qp_type == IBV_QPT_XRC_RECV &&
	    (!(a->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !a->xrcd)) {
		a->xrcd = default_xrcd(id);
		if (!a->xrcd)
			return -1;
		a->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
	}
	ret = make_cqs(cid, a);
	if (ret)
		return fail(ret);
	if (!a->srq && cid->srq && a->qp_type != IBV_QPT_XRC_RECV && a->qp_type != IBV_QPT_XRC_SEND)
		a->srq = cid->srq;
	qp = ibv_create_qp_ex(cid->verbs, a);
	if (!qp) {
		ret = errno;
		destroy_cqs(cid, CM_OWN_QP_SCQ | CM_OWN_QP_RCQ);
		return fail(ret);
	}
	pthread_mutex_lock(&cm.lock);
	ret = cm_qp_to_init(id, qp);
	if (!ret) {
		cid->qp = qp;
		cid->pd = a->pd;
	}
	pthread_mutex_unlock(&cm.lock);
	if (ret) {
		ibv_destroy_qp(qp);
		destroy_cqs(cid, CM_OWN_QP_SCQ | CM_OWN_QP_RCQ);
		return fail(ret);
	}
	return 0;
}

CM_EXPORT int rdma_create_qp(struct rdma_cm_id *cid, struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	struct ibv_qp_init_attr_ex ax;
	int ret;

	memset(&ax, 0, sizeof(ax));
	memcpy(&ax, a, sizeof(*a));
	ax.comp_mask = IBV_QP_INIT_ATTR_PD;
	ax.pd = pd;
	if (!ax.qp_type)
		ax.qp_type = cid->qp_type;
	ret = rdma_create_qp_ex(cid, &ax);
	if (!ret) {
		a->cap = ax.cap;
		a->send_cq = ax.send_cq;
		a->recv_cq = ax.recv_cq;
	}
	return ret;
}

/*
 * The QP leaves the id under cm.lock before it is destroyed: the CM thread, which holds the
 * lock while it handles a message, may be moving the id's QP (a DREQ puts it in the error
 * state, cm_qp_to_err). Destroyed first and detached after, the QP was freed under the CM
 * thread's feet: cmtime's client, destroying 200 QPs while the server's DREQs came in, died
 * of a SIGSEGV in sr_qp_modify about once in 60 runs between namespaces.
 */
CM_EXPORT void rdma_destroy_qp(struct rdma_cm_id *cid)
{
	struct ibv_qp *qp;

	pthread_mutex_lock(&cm.lock);
	qp = cid->qp;
	cid->qp = NULL;
	pthread_mutex_unlock(&cm.lock);
	if (!qp)
		return;
	ibv_destroy_qp(qp);
	destroy_cqs(cid, CM_OWN_QP_SCQ | CM_OWN_QP_RCQ);
}

/*
 * A plain SRQ, or on an XRC id (or with srq_type IBV_SRQT_XRC) an XRC SRQ: in the device's
 * XRC domain unless one is given, completing on a CQ the library makes unless one is given --
 * the id's recv_cq, so that rdma_get_recv_comp() waits for its receives (as librdmacm).
 */
#define CM_SRQ_MASK (IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | \
		     IBV_SRQ_INIT_ATTR_CQ)

CM_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *cid, struct ibv_srq_init_attr_ex *a)
{
	struct cm_id *id = cm_id(cid);
	bool made_cq = false;
	struct ibv_srq *srq;
	int ret;

	if (!cid->verbs || !a)
		return fail(EINVAL);
	if (cid->srq)
		return fail(EINVAL);	/* one SRQ per id */
	if (a->comp_mask & ~(uint32_t)CM_SRQ_MASK)
		return fail(EOPNOTSUPP);	/* tag matching */
	if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type != IBV_SRQT_BASIC &&
	    a->srq_type != IBV_SRQT_XRC)
		return fail(EOPNOTSUPP);
	if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd) {
		a->pd = cid->pd ? cid->pd : default_pd(id);
		a->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (!a->pd || a->pd->context != cid->verbs)
		return fail(EINVAL);
	if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type == IBV_SRQT_XRC) {
		if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !a->xrcd) {
			a->xrcd = default_xrcd(id);
			if (!a->xrcd)
				return -1;
			a->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD;
		}
		if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !a->cq) {
			if (!cid->recv_cq) {
				ret = make_cq(cid, a->attr.max_wr, &cid->recv_cq, &cid->recv_cq_channel);
				if (ret)
					return fail(ret);
				id->own_cqs |= CM_OWN_SRQ_CQ;
				made_cq = true;
			}
			a->cq = cid->recv_cq;
			a->comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
		}
		srq = ibv_create_srq_ex(cid->verbs, a);
	} else {
		struct ibv_srq_init_attr sa = { .srq_context = a->srq_context, .attr = a->attr };

		srq = ibv_create_srq(a->pd, &sa);
		if (srq)
			a->attr = sa.attr;
	}
	if (!srq) {
		ret = errno;
		if (made_cq)
			destroy_cqs(cid, CM_OWN_SRQ_CQ);
		return fail(ret);
	}
	cid->srq = srq;
	cid->pd = a->pd;
	return 0;
}

CM_EXPORT int rdma_create_srq(struct rdma_cm_id *cid, struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	struct ibv_srq_init_attr_ex ax;
	int ret;

	memset(&ax, 0, sizeof(ax));
	ax.srq_context = a->srq_context;
	ax.attr = a->attr;
	ax.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
	ax.srq_type = cid->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
	ax.pd = pd;
	ret = rdma_create_srq_ex(cid, &ax);
	if (!ret)
		a->attr = ax.attr;
	return ret;
}

CM_EXPORT void rdma_destroy_srq(struct rdma_cm_id *cid)
{
	if (cid->srq)
		ibv_destroy_srq(cid->srq);
	cid->srq = NULL;
	destroy_cqs(cid, CM_OWN_SRQ_CQ);
}

/* ---- rdma_getaddrinfo ------------------------------------------------------------------------ */
static struct sockaddr *dup_addr(const struct sockaddr *a, socklen_t len)
{
	struct sockaddr *c = a ? malloc(len) : NULL;

	if (c)
		memcpy(c, a, len);
	return c;
}

CM_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
			       const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct addrinfo h = { .ai_socktype = SOCK_STREAM }, *ai;
	struct rdma_addrinfo *r;
	int flags = hints ? hints->ai_flags : 0, ret;

	if (!node && !service) {
		/* As librdmacm: the hints alone describe the result (their addresses copied). */
		if (!hints)
			return fail(EINVAL);
		r = calloc(1, sizeof(*r));
		if (!r)
			return fail(ENOMEM);
		r->ai_flags = hints->ai_flags;
		r->ai_family = hints->ai_family;
		r->ai_qp_type = hints->ai_qp_type;
		r->ai_port_space = hints->ai_port_space;
		if ((hints->ai_dst_len && !(r->ai_dst_addr = dup_addr(hints->ai_dst_addr,
								       hints->ai_dst_len))) ||
		    (hints->ai_src_len && !(r->ai_src_addr = dup_addr(hints->ai_src_addr,
								       hints->ai_src_len)))) {
			rdma_freeaddrinfo(r);
			return fail(ENOMEM);
		}
		r->ai_dst_len = r->ai_dst_addr ? hints->ai_dst_len : 0;
		r->ai_src_len = r->ai_src_addr ? hints->ai_src_len : 0;
		*res = r;
		return 0;
	}
	if (flags & RAI_PASSIVE)
		h.ai_flags |= AI_PASSIVE;
	if (flags & RAI_NUMERICHOST)
		h.ai_flags |= AI_NUMERICHOST;
	if (hints && (hints->ai_flags & RAI_FAMILY))
		h.ai_family = hints->ai_family;
	else if (hints)
		h.ai_family = hints->ai_family;
	ret = getaddrinfo(node, service, &h, &ai);
	if (ret) {
		errno = ret == EAI_SYSTEM ? errno : ret == EAI_MEMORY ? ENOMEM : ENOENT;
		return ret;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		freeaddrinfo(ai);
		return fail(ENOMEM);
	}
	r->ai_flags = flags;
	r->ai_family = ai->ai_family;
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space
			   : r->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
	struct sockaddr *copy = malloc(ai->ai_addrlen);

	if (!copy) {
		freeaddrinfo(ai);
		free(r);
		return fail(ENOMEM);
	}
	memcpy(copy, ai->ai_addr, ai->ai_addrlen);
	if (flags & RAI_PASSIVE) {
		r->ai_src_addr = copy;
		r->ai_src_len = ai->ai_addrlen;
	} else {
		r->ai_dst_addr = copy;
		r->ai_dst_len = ai->ai_addrlen;
		if (hints && hints->ai_src_addr && hints->ai_src_len) {
			r->ai_src_addr = malloc(hints->ai_src_len);
			if (r->ai_src_addr) {
				memcpy(r->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
				r->ai_src_len = hints->ai_src_len;
			}
		}
	}
	if (node && ai->ai_canonname)
		r->ai_dst_canonname = strdup(ai->ai_canonname);
	freeaddrinfo(ai);
	*res = r;
	return 0;
}

CM_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = n;
	}
}

/* ---- endpoints --------------------------------------------------------------------------------- */
CM_EXPORT int rdma_create_ep(struct rdma_cm_id **out, struct rdma_addrinfo *res, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cid;
	int ret;

	if (!out || !res)
		return fail(EINVAL);
	if (rdma_create_id(NULL, &cid, NULL, (enum rdma_port_space)res->ai_port_space))
		return -1;
	cid->qp_type = (enum ibv_qp_type)res->ai_qp_type;
	if (res->ai_flags & RAI_PASSIVE) {
		ret = rdma_bind_addr(cid, res->ai_src_addr);
		if (ret)
			goto fail;
		if (qp_init_attr) {
			/* Kept for the requests rdma_get_request() will return. */
			struct cm_id *id = cm_id(cid);

			id->ep_qp_attr = malloc(sizeof(*qp_init_attr));
			if (!id->ep_qp_attr) {
				errno = ENOMEM;
				goto fail;
			}
			*id->ep_qp_attr = *qp_init_attr;
			if (res->ai_qp_type)
				id->ep_qp_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
			id->ep_pd = pd;
		}
	} else {
		ret = rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000);
		if (!ret)
			ret = rdma_resolve_route(cid, 2000);
		if (!ret && qp_init_attr) {
			/* As librdmacm: the QP is of the type rdma_getaddrinfo gave. */
			if (res->ai_qp_type)
				qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
			ret = rdma_create_qp(cid, pd, qp_init_attr);
		}
		if (ret)
			goto fail;
	}
	*out = cid;
	return 0;
fail:
	ret = errno;
	rdma_destroy_id(cid);
	errno = ret;
	return -1;
}

CM_EXPORT void rdma_destroy_ep(struct rdma_cm_id *cid)
{
	struct cm_id *id = cm_id(cid);

	if (cid->qp)
		rdma_destroy_qp(cid);
	if (cid->srq)
		rdma_destroy_srq(cid);
	free(id->ep_qp_attr);
	id->ep_qp_attr = NULL;
	rdma_destroy_id(cid);
}

CM_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **out)
{
	struct cm_id *l = cm_id(listen);
	struct rdma_cm_event *ev;
	int ret;

	if (!l->chan->sync)
		return fail(EINVAL);	/* only on a synchronous (rdma_create_ep) listener */
	for (;;) {
		if (rdma_get_cm_event(&l->chan->ch, &ev))
			return -1;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		rdma_ack_cm_event(ev);	/* nothing else concerns a listener */
	}
	struct rdma_cm_id *cid = ev->id;

	/* The new id is synchronous too; its CONNECT_REQUEST event waits in cid->event until
	 * rdma_accept/rdma_reject/rdma_destroy_ep. */
	rdma_migrate_id(cid, NULL);
	cid->event = ev;
	if (l->ep_qp_attr) {
		struct ibv_qp_init_attr a = *l->ep_qp_attr;

		ret = rdma_create_qp(cid, l->ep_pd, &a);
		if (ret) {
			ret = errno;
			rdma_reject(cid, NULL, 0);
			rdma_destroy_id(cid);
			return fail(ret);
		}
	}
	*out = cid;
	return 0;
}

/* ---- multicast -------------------------------------------------------------------------------
 * A group address names the IP multicast group; its MGID is the RoCEv2 GID of that address
 * (::ffff:239.x.y.z). The id's QP is attached to it (the engine joins the IP group), and the
 * MULTICAST_JOIN event carries the address vector to send to it, as librdmacm's does: QPN
 * 0xffffff, the UD Q_Key, and the user's context as private data.
 */
static void mgid_of(const struct sockaddr *a, union ibv_gid *g)
{
	memset(g, 0, sizeof(*g));
	if (a->sa_family == AF_INET) {
		g->raw[10] = g->raw[11] = 0xff;
		memcpy(&g->raw[12], &((const struct sockaddr_in *)a)->sin_addr, 4);
	} else {
		memcpy(g->raw, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
	}
}

static int join(struct rdma_cm_id *cid, struct sockaddr *addr, void *context, bool send_only)
{
	struct cm_id *id = cm_id(cid);
	struct rdma_ud_param ud;
	union ibv_gid mgid;
	int ret;

	if (!addr || !cm_is_mcast(addr))
		return fail(EINVAL);
	if (!cid->verbs)
		return fail(EINVAL);	/* rdma_join_multicast(3): resolve or bind first */
	mgid_of(addr, &mgid);
	if (cid->qp && !send_only) {
		ret = ibv_attach_mcast(cid->qp, &mgid, 0);
		if (ret)
			return fail(ret);
	}
	memset(&ud, 0, sizeof(ud));
	ud.private_data = context;
	ud.ah_attr.is_global = 1;
	ud.ah_attr.port_num = 1;
	ud.ah_attr.grh.dgid = mgid;
	ud.ah_attr.grh.sgid_index = id->dev ? id->dev->gid_index : 0;
	ud.ah_attr.grh.hop_limit = 16;
	ud.qp_num = 0xffffff;
	ud.qkey = id->qkey ? id->qkey : RDMA_UDP_QKEY;
	pthread_mutex_lock(&cm.lock);
	cm_post_ud_event(id, RDMA_CM_EVENT_MULTICAST_JOIN, 0, &ud);
	pthread_mutex_unlock(&cm.lock);
	return 0;
}

CM_EXPORT int rdma_join_multicast(struct rdma_cm_id *cid, struct sockaddr *addr, void *context)
{
	return join(cid, addr, context, false);
}

CM_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *cid, struct rdma_cm_join_mc_attr_ex *a,
				     void *context)
{
	if (!a || !(a->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) ||
	    (a->comp_mask & ~(uint32_t)(RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS)))
		return fail(EINVAL);
	bool send_only = (a->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) &&
			 a->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;

	if ((a->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) &&
	    a->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && !send_only)
		return fail(EINVAL);
	return join(cid, a->addr, context, send_only);
}

CM_EXPORT int rdma_leave_multicast(struct rdma_cm_id *cid, struct sockaddr *addr)
{
	union ibv_gid mgid;
	int ret;

	if (!addr || !cm_is_mcast(addr))
		return fail(EINVAL);
	mgid_of(addr, &mgid);
	if (!cid->qp)
		return 0;
	ret = ibv_detach_mcast(cid->qp, &mgid, 0);
	return ret ? fail(ret == EINVAL ? EADDRNOTAVAIL : ret) : 0;
}
