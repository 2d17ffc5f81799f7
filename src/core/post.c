/* SPDX-License-Identifier: MIT */
/*
 * Posting work requests. A send WR is copied into the SQ ring (its SGE list, and its data when
 * inline), so the application may reuse or free its ibv_send_wr at once; then the requester is
 * run inline on the posting thread (no hand-off to the progress thread: that is what keeps
 * latency low). Errors are the ones rdma-core providers return: EINVAL for a malformed WR or a
 * QP that cannot send yet, ENOMEM for a full queue, EOPNOTSUPP for an operation softrdma does
 * not implement yet.
 */
#include <errno.h>
#include <string.h>

#include "core/core.h"
#include "core/post.h"

static bool opcode_ok(enum ibv_qp_type type, uint32_t op)
{
	if (type == IBV_QPT_XRC_RECV)
		return false;	/* an XRC target has no send queue */
	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return true;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_XRC_SEND;
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;
	default:
		return false;
	}
}

static bool opcode_known(uint32_t op)
{
	switch (op) {
	case IBV_WR_LOCAL_INV:
	case IBV_WR_BIND_MW:
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_TSO:
	case IBV_WR_DRIVER1:
	case IBV_WR_ATOMIC_WRITE:
		return true;
	default:
		return false;
	}
}

int sr_post_state_ok(struct sr_qp *qp)
{
	switch (qp->state) {
	case IBV_QPS_RTS:
	case IBV_QPS_SQD:
	case IBV_QPS_SQE:
	case IBV_QPS_ERR:
		return 0;	/* SQD queues; SQE and ERR flush (IBA 10.8.3.x) */
	default:
		return -EINVAL;
	}
}

int sr_swqe_finish(struct sr_qp *qp, uint32_t slot)
{
	struct sr_swqe *w = sr_sq_at(&qp->sq, slot);
	struct ibv_sge *sge = sr_sq_sges(&qp->sq, slot);
	uint64_t len = 0;

	if (!opcode_ok(qp->type, w->opcode))
		return opcode_known(w->opcode) && w->opcode != IBV_WR_TSO ? -EOPNOTSUPP : -EINVAL;
	if (!w->inl) {
		if (w->num_sge > qp->sq.max_sge)
			return -EINVAL;
		for (uint32_t i = 0; i < w->num_sge; i++)
			len += sge[i].length;
		if (len > SR_MAX_MSG_SIZE)
			return -EINVAL;
		w->length = (uint32_t)len;
	}
	switch (w->opcode) {
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		/* 8 bytes at an 8-byte aligned remote address (IBA 9.4.5 / rxe's post check) */
		if (w->length < 8 || (w->raddr & 7) || w->inl)
			return -EINVAL;
		w->length = 8;
		break;
	case IBV_WR_RDMA_READ:
		if (w->inl)
			return -EINVAL;
		break;
	default:
		break;
	}
	if (qp->type == IBV_QPT_UD && (w->length > qp->mtu || !w->ud_dst.family))
		return -EINVAL;
	w->state = SR_WQE_POSTED;
	return 0;
}

int sr_swqe_inline(struct sr_qp *qp, uint32_t slot, const struct ibv_sge *sg, size_t n,
		   const struct ibv_data_buf *bufs)
{
	struct sr_swqe *w = sr_sq_at(&qp->sq, slot);
	uint8_t *dst = sr_sq_inline(&qp->sq, slot);
	size_t total = 0;

	for (size_t i = 0; i < n; i++) {
		size_t l = sg ? sg[i].length : bufs[i].length;
		const void *src = sg ? (const void *)(uintptr_t)sg[i].addr : bufs[i].addr;

		if (total + l > qp->sq.max_inline)
			return -EINVAL;
		memcpy(dst + total, src, l);
		total += l;
	}
	w->inl = true;
	w->length = (uint32_t)total;
	w->num_sge = 0;
	return 0;
}

static int fill_wqe(struct sr_qp *qp, uint32_t slot, struct ibv_send_wr *wr)
{
	struct sr_swqe *w = sr_sq_at(&qp->sq, slot);
	int ret;

	memset(w, 0, sizeof(*w));
	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;
	w->flags = wr->send_flags;
	if (wr->num_sge < 0)
		return -EINVAL;
	if (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		w->imm = wr->imm_data;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		w->raddr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		w->raddr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
		break;
	default:
		break;
	}
	if (qp->type == IBV_QPT_UD) {
		if (!wr->wr.ud.ah)
			return -EINVAL;
		w->ud_dst = sr_ah(wr->wr.ud.ah)->dst;
		w->ud_qpn = wr->wr.ud.remote_qpn & 0xffffff;
		w->ud_qkey = wr->wr.ud.remote_qkey;
	}
	if (qp->type == IBV_QPT_XRC_SEND)
		w->xrc_srqn = wr->qp_type.xrc.remote_srqn & 0xffffff;
	bool inl = (wr->send_flags & IBV_SEND_INLINE) &&
		   wr->opcode != IBV_WR_RDMA_READ && wr->opcode != IBV_WR_ATOMIC_CMP_AND_SWP &&
		   wr->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD;

	if (inl) {
		ret = sr_swqe_inline(qp, slot, wr->sg_list, (size_t)wr->num_sge, NULL);
		if (ret)
			return ret;
	} else {
		if ((uint32_t)wr->num_sge > qp->sq.max_sge)
			return -EINVAL;
		w->num_sge = (uint32_t)wr->num_sge;
		if (wr->num_sge)
			memcpy(sr_sq_sges(&qp->sq, slot), wr->sg_list,
			       (size_t)wr->num_sge * sizeof(struct ibv_sge));
	}
	return sr_swqe_finish(qp, slot);
}

int sr_qp_post_send(struct sr_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	int ret = 0;

	pthread_mutex_lock(&qp->lock);
	ret = sr_post_state_ok(qp);
	if (ret) {
		*bad = wr;
		goto out;
	}
	for (; wr; wr = wr->next) {
		if (qp->sq.head - qp->sq.tail >= qp->sq.max_wr) {
			ret = -ENOMEM;
			*bad = wr;
			break;
		}
		ret = fill_wqe(qp, qp->sq.head, wr);
		if (ret) {
			*bad = wr;
			break;
		}
		qp->sq.head++;
	}
	sr_sq_kick(qp);
out:
	pthread_mutex_unlock(&qp->lock);
	return ret;
}

void sr_sq_kick(struct sr_qp *qp)
{
	if (qp->state == IBV_QPS_ERR || qp->state == IBV_QPS_SQE)
		sr_qp_flush(qp);
	else
		sr_req_progress(qp);
}

int sr_qp_post_recv(struct sr_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int ret;

	if (qp->srq || qp->type == IBV_QPT_XRC_SEND || qp->type == IBV_QPT_XRC_RECV) {
		*bad = wr;
		return -EINVAL;	/* receives go to the (XRC) SRQ */
	}
	pthread_mutex_lock(&qp->lock);
	if (qp->state == IBV_QPS_RESET) {
		*bad = wr;
		ret = -EINVAL;
	} else {
		ret = sr_rq_post(&qp->rq, wr, bad);
		if (qp->state == IBV_QPS_ERR)
			sr_qp_flush(qp);
	}
	pthread_mutex_unlock(&qp->lock);
	return ret;
}
