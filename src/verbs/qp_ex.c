/* SPDX-License-Identifier: MIT */
/*
 * The ibv_wr_* API (ibv_wr_post(3)). ibv_wr_start takes the QP lock; each ibv_wr_<op> opens a
 * new WQE in place in the SQ ring after the ones already built; the setters fill it;
 * ibv_wr_complete validates every WQE of the batch and posts them all, or none (returning the
 * first error), and releases the lock. ibv_wr_abort drops the batch.
 */
#include <string.h>

#include "verbs/verbs.h"

static inline struct sr_qp *qx(struct ibv_qp_ex *q)
{
	return (struct sr_qp *)q;
}

/* The WQE being built (the last one opened), or NULL. */
static struct sr_swqe *cur(struct sr_qp *qp, uint32_t *slot)
{
	if (qp->wr_count == 0)
		return NULL;
	*slot = qp->wr_start_head + qp->wr_count - 1;
	return sr_sq_at(&qp->sq, *slot);
}

static struct sr_swqe *open_wqe(struct ibv_qp_ex *q, uint32_t opcode)
{
	struct sr_qp *qp = qx(q);
	uint32_t slot = qp->wr_start_head + qp->wr_count;
	struct sr_swqe *w;

	if (qp->wr_err)
		return NULL;
	if (slot - qp->sq.tail >= qp->sq.max_wr) {
		qp->wr_err = ENOMEM;
		return NULL;
	}
	w = sr_sq_at(&qp->sq, slot);
	memset(w, 0, sizeof(*w));
	w->wr_id = q->wr_id;
	w->flags = q->wr_flags;
	w->opcode = opcode;
	qp->wr_count++;
	return w;
}

static void wr_start(struct ibv_qp_ex *q)
{
	struct sr_qp *qp = qx(q);

	pthread_mutex_lock(&qp->lock);
	qp->wr_start_head = qp->sq.head;
	qp->wr_count = 0;
	qp->wr_err = 0;
}

static int wr_complete(struct ibv_qp_ex *q)
{
	struct sr_qp *qp = qx(q);
	int ret = qp->wr_err;

	if (!ret)
		ret = -sr_post_state_ok(qp);
	for (uint32_t i = 0; !ret && i < qp->wr_count; i++)
		ret = -sr_swqe_finish(qp, qp->wr_start_head + i);
	if (!ret) {
		qp->sq.head = qp->wr_start_head + qp->wr_count;
		sr_sq_posted(qp, false);
	}
	qp->wr_count = 0;
	pthread_mutex_unlock(&qp->lock);
	return ret;
}

static void wr_abort(struct ibv_qp_ex *q)
{
	struct sr_qp *qp = qx(q);

	qp->wr_count = 0;
	pthread_mutex_unlock(&qp->lock);
}

static void wr_send(struct ibv_qp_ex *q)
{
	open_wqe(q, IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	struct sr_swqe *w = open_wqe(q, IBV_WR_SEND_WITH_IMM);

	if (w)
		w->imm = imm;
}

static void wr_rdma(struct ibv_qp_ex *q, uint32_t op, uint32_t rkey, uint64_t raddr, __be32 imm)
{
	struct sr_swqe *w = open_wqe(q, op);

	if (w) {
		w->rkey = rkey;
		w->raddr = raddr;
		w->imm = imm;
	}
}

static void wr_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr)
{
	wr_rdma(q, IBV_WR_RDMA_WRITE, rkey, raddr, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, __be32 imm)
{
	wr_rdma(q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, raddr, imm);
}

static void wr_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr)
{
	wr_rdma(q, IBV_WR_RDMA_READ, rkey, raddr, 0);
}

static void wr_atomic(struct ibv_qp_ex *q, uint32_t op, uint32_t rkey, uint64_t raddr,
		      uint64_t compare_add, uint64_t swap)
{
	struct sr_swqe *w = open_wqe(q, op);

	if (w) {
		w->rkey = rkey;
		w->raddr = raddr;
		w->compare_add = compare_add;
		w->swap = swap;
	}
}

static void wr_cas(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, uint64_t compare,
		   uint64_t swap)
{
	wr_atomic(q, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, raddr, compare, swap);
}

static void wr_faa(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, uint64_t add)
{
	wr_atomic(q, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, raddr, add, 0);
}

/* An operation softrdma does not implement: the batch fails with EOPNOTSUPP. */
static void wr_unsupported(struct ibv_qp_ex *q)
{
	if (!qx(q)->wr_err)
		qx(q)->wr_err = EOPNOTSUPP;
}

static void wr_fail(struct ibv_qp_ex *q, int ret)
{
	if (ret && !qx(q)->wr_err)
		qx(q)->wr_err = ret < 0 ? -ret : ret;
}

static void wr_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey,
		       const struct ibv_mw_bind_info *b)
{
	struct sr_swqe *w = open_wqe(q, IBV_WR_BIND_MW);

	if (w)
		wr_fail(q, sr_swqe_bind(qx(q), w, mw, rkey, b, false));
}

static void wr_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct sr_swqe *w = open_wqe(q, IBV_WR_LOCAL_INV);

	if (w)
		w->imm = rkey;
}

static void wr_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct sr_swqe *w = open_wqe(q, IBV_WR_SEND_WITH_INV);

	if (w)
		w->imm = rkey;
}

static void wr_send_tso(struct ibv_qp_ex *q, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	wr_unsupported(q);
}

static void wr_atomic_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr,
			    const void *atomic_wr)
{
	struct sr_swqe *w = open_wqe(q, IBV_WR_ATOMIC_WRITE);

	if (!w)
		return;
	if (!atomic_wr) {
		wr_fail(q, EINVAL);
		return;
	}
	w->rkey = rkey;
	w->raddr = raddr;
	memcpy(&w->u.aw.value, atomic_wr, 8);	/* ibv_wr_atomic_write(3): 8 bytes, taken now */
	w->u.aw.have_value = true;
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *q, uint32_t srqn)
{
	struct sr_qp *qp = qx(q);
	uint32_t slot;
	struct sr_swqe *w = cur(qp, &slot);

	if (!w)
		return;
	if (qp->type != IBV_QPT_XRC_SEND) {
		qp->wr_err = EINVAL;
		return;
	}
	w->xrc_srqn = srqn & 0xffffff;
}

/* softrdma's own ibv_wr_* operations (include/softrdma/softrdma.h, version SOFTRDMA_1.0). */
void softrdma_wr_reg_mr(struct ibv_qp_ex *q, struct ibv_mr *mr, uint32_t key, unsigned int access);
void softrdma_wr_reg_mr(struct ibv_qp_ex *q, struct ibv_mr *mr, uint32_t key, unsigned int access)
{
	struct sr_swqe *w = open_wqe(q, SR_WR_REG_MR);

	if (w)
		wr_fail(q, sr_swqe_reg(qx(q), w, mr, key, access));
}

void softrdma_wr_flush(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, size_t len,
		       uint8_t type, uint8_t level);
void softrdma_wr_flush(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, size_t len,
		       uint8_t type, uint8_t level)
{
	struct sr_swqe *w = open_wqe(q, SR_WR_FLUSH);

	if (w)
		wr_fail(q, sr_swqe_flush(w, rkey, raddr, len, type, level));
}

static void wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct sr_qp *qp = qx(q);
	uint32_t slot;
	struct sr_swqe *w = cur(qp, &slot);

	if (!w)
		return;
	struct ibv_sge *s = sr_sq_sges(&qp->sq, slot);

	s->lkey = lkey;
	s->addr = addr;
	s->length = length;
	w->num_sge = 1;
	w->inl = false;
}

static void wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *list)
{
	struct sr_qp *qp = qx(q);
	uint32_t slot;
	struct sr_swqe *w = cur(qp, &slot);

	if (!w)
		return;
	if (n > qp->sq.max_sge) {
		qp->wr_err = EINVAL;
		return;
	}
	memcpy(sr_sq_sges(&qp->sq, slot), list, n * sizeof(*list));
	w->num_sge = (uint32_t)n;
	w->inl = false;
}

static void wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t length)
{
	struct sr_qp *qp = qx(q);
	struct ibv_data_buf b = { .addr = addr, .length = length };
	uint32_t slot;

	if (cur(qp, &slot) && sr_swqe_inline(qp, slot, NULL, 1, &b) && !qp->wr_err)
		qp->wr_err = EINVAL;
}

static void wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *b)
{
	struct sr_qp *qp = qx(q);
	uint32_t slot;

	if (cur(qp, &slot) && sr_swqe_inline(qp, slot, NULL, n, b) && !qp->wr_err)
		qp->wr_err = EINVAL;
}

static void wr_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t remote_qpn,
			   uint32_t remote_qkey)
{
	struct sr_qp *qp = qx(q);
	uint32_t slot;
	struct sr_swqe *w = cur(qp, &slot);

	if (!w)
		return;
	if (!ah) {
		qp->wr_err = EINVAL;
		return;
	}
	w->ud_dst = sr_ah(ah)->dst;
	w->ud_qpn = remote_qpn & 0xffffff;
	w->ud_qkey = remote_qkey;
}

void sr_qp_ex_init(struct sr_qp *qp, uint64_t send_ops)
{
	struct ibv_qp_ex *q = &qp->qpx;

	qp->has_wr_api = send_ops != 0;
	q->wr_start = wr_start;
	q->wr_complete = wr_complete;
	q->wr_abort = wr_abort;
	q->wr_send = wr_send;
	q->wr_send_imm = wr_send_imm;
	q->wr_rdma_write = wr_rdma_write;
	q->wr_rdma_write_imm = wr_rdma_write_imm;
	q->wr_rdma_read = wr_rdma_read;
	q->wr_atomic_cmp_swp = wr_cas;
	q->wr_atomic_fetch_add = wr_faa;
	q->wr_bind_mw = wr_bind_mw;
	q->wr_local_inv = wr_local_inv;
	q->wr_send_inv = wr_send_inv;
	q->wr_send_tso = wr_send_tso;
	q->wr_atomic_write = wr_atomic_write;
	q->wr_set_sge = wr_set_sge;
	q->wr_set_sge_list = wr_set_sge_list;
	q->wr_set_inline_data = wr_set_inline_data;
	q->wr_set_inline_data_list = wr_set_inline_data_list;
	q->wr_set_ud_addr = wr_set_ud_addr;
	q->wr_set_xrc_srqn = wr_set_xrc_srqn;
}
