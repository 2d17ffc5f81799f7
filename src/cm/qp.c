/* SPDX-License-Identifier: MIT */
/*
 * The QP attributes a connection implies (rdma_init_qp_attr), and the transitions the CM makes
 * itself for an id that owns its QP (rdma_create_qp): INIT at creation, RTR and RTS when the
 * connection is made, ERR when it ends -- as rdma-core's librdmacm does.
 */
#include <errno.h>
#include <string.h>

#include "cm/cm.h"

/* The local ACK timeout: 14 (67 ms) like the kernel's rdma_cm, unless set by
 * RDMA_OPTION_ID_ACK_TIMEOUT. */
#define CM_DEFAULT_TIMEOUT 14

int sr_priv_qp_set_seg(struct ibv_qp *qp, uint32_t bytes) __attribute__((weak));

int cm_fill_qp_attr(struct cm_id *id, struct ibv_qp_attr *a, int *mask)
{
	enum ibv_qp_type t = cm_qpt(id);
	bool ud = t == IBV_QPT_UD || id->id.ps == RDMA_PS_UDP;
	/* What each connected type takes (the IB CM's attributes, IBA 11.2.4.2 / kernel ib_cm):
	 * the responder's RTR attributes for the types that answer requests (RC, XRC_RECV), the
	 * requester's RTS attributes for the types that send them (RC, XRC_SEND). */
	bool responder = t == IBV_QPT_RC || t == IBV_QPT_XRC_RECV;
	bool requester = t == IBV_QPT_RC || t == IBV_QPT_XRC_SEND;

	switch (a->qp_state) {
	case IBV_QPS_INIT:
		a->port_num = 1;
		a->pkey_index = 0;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		if (ud) {
			a->qkey = id->qkey ? id->qkey : RDMA_UDP_QKEY;
			*mask |= IBV_QP_QKEY;
		} else {
			/* What the IB CM grants: remote writes always, reads and atomics when the
			 * connection has responder resources. */
			a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
			if (id->responder_resources)
				a->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
			*mask |= IBV_QP_ACCESS_FLAGS;
		}
		return 0;
	case IBV_QPS_RTR:
		*mask = IBV_QP_STATE;
		if (ud)
			return 0;
		if (id->state != CM_REQ_RCVD && id->state != CM_REP_RCVD &&
		    id->state != CM_REQ_SENT && id->state != CM_REP_SENT &&
		    id->state != CM_ESTABLISHED)
			return -EINVAL;	/* no peer known yet */
		memset(&a->ah_attr, 0, sizeof(a->ah_attr));
		a->ah_attr.is_global = 1;
		a->ah_attr.port_num = 1;
		a->ah_attr.grh.dgid = id->peer_gid;
		/* The GID the CM gave the peer (route.path_rec->sgid): the one naming the port. */
		a->ah_attr.grh.sgid_index = id->dev ? id->dev->gid_index : 0;
		a->ah_attr.grh.hop_limit = 64;
		a->ah_attr.grh.traffic_class = id->tos;
		a->path_mtu = id->path_mtu;
		a->dest_qp_num = id->peer_qpn;
		a->rq_psn = id->peer_psn;
		/* Access flags again, as the IB CM does at RTR: the responder resources are only
		 * known once the connection is negotiated, after the QP reached INIT. */
		a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		if (id->responder_resources)
			a->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		*mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			 IBV_QP_ACCESS_FLAGS;
		if (responder) {
			a->max_dest_rd_atomic = id->responder_resources;
			a->min_rnr_timer = 12;	/* 0.64 ms, the kernel rdma_cm's default */
			*mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
		return 0;
	case IBV_QPS_RTS:
		a->sq_psn = cm_my_psn(id);
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		if (ud)
			return 0;
		if (t == IBV_QPT_UC)
			return 0;
		a->timeout = id->ack_timeout ? id->ack_timeout : CM_DEFAULT_TIMEOUT;
		*mask |= IBV_QP_TIMEOUT;
		if (requester) {
			a->retry_cnt = id->retry_count;
			a->rnr_retry = id->rnr_retry_count;
			a->max_rd_atomic = id->initiator_depth;
			*mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		}
		return 0;
	default:
		return -EINVAL;
	}
}

static int modify(struct cm_id *id, enum ibv_qp_state s)
{
	struct ibv_qp_attr a;
	int mask, ret;

	memset(&a, 0, sizeof(a));
	a.qp_state = s;
	ret = cm_fill_qp_attr(id, &a, &mask);
	if (ret)
		return ret;
	ret = ibv_modify_qp(id->id.qp, &a, mask);
	return ret ? -ret : 0;
}

int cm_qp_to_init(struct cm_id *id, struct ibv_qp *qp)
{
	struct ibv_qp *saved = id->id.qp;
	int ret;

	id->id.qp = qp;
	ret = modify(id, IBV_QPS_INIT);
	/* A UD QP is ready at once: RTR and RTS need nothing from a peer. */
	if (!ret && qp->qp_type == IBV_QPT_UD) {
		ret = modify(id, IBV_QPS_RTR);
		if (!ret)
			ret = modify(id, IBV_QPS_RTS);
	}
	if (ret)
		id->id.qp = saved;
	return ret;
}

int cm_qp_to_rtr_rts(struct cm_id *id, bool rts)
{
	int ret;

	if (!id->id.qp || id->id.qp->qp_type == IBV_QPT_UD)
		return 0;
	/* The large segment agreed with the peer, if any: the QP uses it from RTR on. */
	if (sr_priv_qp_set_seg && id->id.qp->qp_type == IBV_QPT_RC)
		sr_priv_qp_set_seg(id->id.qp, id->seg);
	ret = modify(id, IBV_QPS_RTR);
	if (!ret && rts)
		ret = modify(id, IBV_QPS_RTS);
	return ret;
}

void cm_qp_to_err(struct cm_id *id)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (id->id.qp)
		ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE);
}
