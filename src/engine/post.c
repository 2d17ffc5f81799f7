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
#include "core/param.h"
#include "core/post.h"
#include "engine/engine.h"
#include "net/net.h"
#include "transport/transport.h"
#include "wire/psn.h"

/* Which work request opcode a QP type takes (IBA 10.8.2; as rxe's wr opcode table). */
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
	case IBV_WR_LOCAL_INV:
	case IBV_WR_BIND_MW:
	case SR_WR_REG_MR:
		return type == IBV_QPT_RC || type == IBV_QPT_UC;
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;
	case IBV_WR_SEND_WITH_INV:	/* no UC opcode for it (IBA 9.2, table 38) */
	case IBV_WR_ATOMIC_WRITE:
	case SR_WR_FLUSH:
		return type == IBV_QPT_RC;
	default:
		return false;	/* TSO (raw packet QPs), unknown */
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
		return -EINVAL;
	if (sr_op_is_local(w->opcode) || w->opcode == SR_WR_FLUSH) {
		/* No data of their own: their arguments are in w->u (or imm for LOCAL_INV). */
		w->num_sge = 0;
		w->inl = false;
		w->length = 0;
	} else if (w->opcode == IBV_WR_ATOMIC_WRITE && w->u.aw.have_value) {
		w->num_sge = 0;
		w->inl = false;
		w->length = 8;
	} else if (!w->inl) {
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
	case IBV_WR_ATOMIC_WRITE:
		/* Exactly 8 bytes, to an 8-byte aligned remote address. */
		if (w->length != 8 || (w->raddr & 7))
			return -EINVAL;
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
	if (qp->scq) {
		/* Posted in a stream, with no poll of the send CQ since the previous post: a small
		 * WRITE then takes packets rather than the direct path (req.c, direct_stream_min). */
		uint32_t polls = atomic_load_explicit(&qp->scq->polls, memory_order_relaxed);

		w->in_stream = qp->posted && polls == qp->post_polls;
		qp->post_polls = polls;
		qp->posted = true;
	}
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

int sr_swqe_bind(struct sr_qp *qp, struct sr_swqe *w, struct ibv_mw *ibmw, uint32_t rkey,
		 const struct ibv_mw_bind_info *b, bool type1)
{
	const unsigned ok = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
	struct sr_mw *mw = ibmw ? sr_mw(ibmw) : NULL;

	if (!mw || !b || mw->nic != qp->nic)
		return -EINVAL;
	/* A work request binds type 2 windows; type 1 ones are bound by ibv_bind_mw (as
	 * ibv_post_send(3) says and providers enforce). */
	if ((ibmw->type == IBV_MW_TYPE_1) != type1)
		return -EINVAL;
	if ((rkey >> 8) != mw->index)
		return -EINVAL;	/* only the tag may change (ibv_inc_rkey) */
	/* Zero-based: never for type 1 (IBA o10-36.2.2); type 2 ones are not implemented. */
	if (b->mw_access_flags & IBV_ACCESS_ZERO_BASED)
		return type1 ? -EINVAL : -EOPNOTSUPP;
	if (b->mw_access_flags & ~ok)
		return -EINVAL;
	if (b->mr && (sr_mr(b->mr)->nic != qp->nic))
		return -EINVAL;
	if (b->mr && sr_mr(b->mr)->fr)
		return -EOPNOTSUPP;	/* windows on fast-registration MRs: not implemented */
	if (!b->mr && (b->addr || b->length))
		return -EINVAL;
	w->u.bind.mw_index = mw->index;
	w->u.bind.mw_serial = mw->k.serial;
	w->u.bind.mr_index = b->mr ? sr_mr(b->mr)->index : 0;
	w->u.bind.mr_serial = b->mr ? sr_mr(b->mr)->k.serial : 0;
	w->u.bind.addr = b->addr;
	w->u.bind.length = b->mr ? b->length : 0;
	w->u.bind.rkey = rkey;
	w->u.bind.access = b->mw_access_flags;
	return 0;
}

int sr_swqe_reg(struct sr_qp *qp, struct sr_swqe *w, struct ibv_mr *ibmr, uint32_t key,
		unsigned access)
{
	struct sr_mr *mr = ibmr ? sr_mr(ibmr) : NULL;
	int ret;

	if (!mr || !mr->fr || mr->nic != qp->nic || (key >> 8) != mr->index)
		return -EINVAL;
	ret = sr_frmr_check_reg_access(access);
	if (ret)
		return ret;
	w->u.reg.mr_index = mr->index;
	w->u.reg.mr_serial = mr->k.serial;
	w->u.reg.key = key;
	w->u.reg.access = access;
	return 0;
}

int sr_swqe_flush(struct sr_swqe *w, uint32_t rkey, uint64_t raddr, size_t len, uint8_t type,
		  uint8_t level)
{
	if (!type || (type & ~(SR_FLUSH_GLOBAL | SR_FLUSH_PERSISTENT)) || level > SR_FLUSH_MR)
		return -EINVAL;
	if (level == SR_FLUSH_RANGE && len > UINT32_MAX)
		return -EINVAL;	/* the RETH says how much in 32 bits */
	w->rkey = rkey;
	w->raddr = raddr;
	w->u.flush.length = level == SR_FLUSH_RANGE ? len : 0;
	w->u.flush.type = type;
	w->u.flush.level = level;
	return 0;
}

/*
 * Zeroes a WQE (192 bytes) with 16-byte stores. A memset of it compiled to `rep stos`, whose
 * start-up cost (some 30 cycles) made it one of the larger pieces of a small post's user time
 * (bench/README.md, "8 B busy-poll"). The loop is unrolled at -O2 and is not turned back into
 * a memset call (checked in the assembly of RelWithDebInfo, GCC 12).
 */
typedef uint64_t sr_zero16 __attribute__((vector_size(16), aligned(8), may_alias));
_Static_assert(sizeof(struct sr_swqe) % sizeof(sr_zero16) == 0, "sr_swqe: 16-byte multiple");

static inline void swqe_clear(struct sr_swqe *w)
{
	sr_zero16 *p = (sr_zero16 *)(void *)w;

#pragma GCC unroll 16
	for (size_t i = 0; i < sizeof(*w) / sizeof(*p); i++)
		p[i] = (sr_zero16){ 0, 0 };
}

static int fill_wqe(struct sr_qp *qp, uint32_t slot, struct ibv_send_wr *wr)
{
	struct sr_swqe *w = sr_sq_at(&qp->sq, slot);
	int ret;

	swqe_clear(w);
	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;
	w->flags = wr->send_flags;
	if (wr->num_sge < 0)
		return -EINVAL;
	if (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		w->imm = wr->imm_data;
	if (wr->opcode == IBV_WR_SEND_WITH_INV || wr->opcode == IBV_WR_LOCAL_INV)
		w->imm = wr->invalidate_rkey;
	if (!opcode_ok(qp->type, wr->opcode))
		return -EINVAL;
	switch ((uint32_t)wr->opcode) {
	case IBV_WR_BIND_MW:
		ret = sr_swqe_bind(qp, w, wr->bind_mw.mw, wr->bind_mw.rkey, &wr->bind_mw.bind_info,
				   false);
		if (ret)
			return ret;
		return sr_swqe_finish(qp, slot);
	case SR_WR_REG_MR:
		/* softrdma_wr_set_reg_mr() (softrdma.h) puts the MR, key and access there. */
		ret = sr_swqe_reg(qp, w, wr->bind_mw.bind_info.mr, wr->bind_mw.rkey,
				  wr->bind_mw.bind_info.mw_access_flags);
		if (ret)
			return ret;
		return sr_swqe_finish(qp, slot);
	case IBV_WR_LOCAL_INV:
		return sr_swqe_finish(qp, slot);
	case SR_WR_FLUSH:
		return -EOPNOTSUPP;	/* no ibv_send_wr fields for it: softrdma_wr_flush() */
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_WRITE:
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

	if (inl && wr->opcode == IBV_WR_ATOMIC_WRITE) {
		/* The 8 bytes are taken now, whatever max_inline_data is. */
		size_t total = 0;

		for (int i = 0; i < wr->num_sge; i++)
			total += wr->sg_list[i].length;
		if (total != 8)
			return -EINVAL;
		for (int i = 0, at = 0; i < wr->num_sge; at += (int)wr->sg_list[i].length, i++)
			memcpy((uint8_t *)&w->u.aw.value + at,
			       (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
		w->u.aw.have_value = true;
	} else if (inl) {
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

int sr_qp_post_bind_mw(struct sr_qp *qp, struct sr_mw *mw, const struct ibv_mw_bind *b)
{
	uint32_t rkey = ibv_inc_rkey(mw->ibmw.rkey);
	struct sr_swqe *w;
	int ret;

	pthread_mutex_lock(&qp->lock);
	ret = sr_post_state_ok(qp);
	if (!ret && qp->sq.head - qp->sq.tail >= qp->sq.max_wr)
		ret = -ENOMEM;
	if (ret)
		goto out;
	w = sr_sq_at(&qp->sq, qp->sq.head);
	swqe_clear(w);
	w->wr_id = b->wr_id;
	w->opcode = IBV_WR_BIND_MW;
	w->flags = b->send_flags;
	ret = sr_swqe_bind(qp, w, &mw->ibmw, rkey, &b->bind_info, true);
	if (!ret)
		ret = sr_swqe_finish(qp, qp->sq.head);
	if (ret)
		goto out;
	qp->sq.head++;
	/* ibv_bind_mw(3): the window's rkey is the new one from now on (an error completion
	 * leaves the application to undo it, as with rdma-core's providers). */
	mw->ibmw.rkey = rkey;
	sr_sq_posted(qp, false);
out:
	pthread_mutex_unlock(&qp->lock);
	return ret;
}

/*
 * Posting behind work in flight (parameter post_batch). On an RC QP whose oldest WQE waits for
 * its acknowledgement, a new WQE would only queue behind packets already on their way; the
 * requester then leaves it in the send queue until post_batch of them wait, or until the
 * acknowledgement comes (the completer runs the requester after every ACK, READ response and
 * ATOMIC ACK, and the timers after a loss). They then leave together, as one GSO send when
 * they have one size (udp.c): perftest's 64-byte ib_write_bw posts 128 WRs in a row. A QP
 * with nothing in flight sends at once, so a ping-pong waits for nothing; that is also the
 * only case the same-host direct path takes, so it is untouched. Nor does one whose packets in
 * flight all skipped their AckReq (req.c, ack_lazy_ok): no ACK is coming soon to release the
 * WQEs, and a ping-pong of unsignaled SENDs would wait for the peer's bound on the unasked
 * (2 x ack_defer_us) at every turn. Nagle's algorithm, for WQEs,
 * and like Nagle's it holds only what is smaller than a packet: a SEND or WRITE that fills at
 * least one whole segment (sr_req_seg) leaves at once, with the small ones before it. Its
 * packets are full whatever follows, and GSO already sends them together. UCX's rendezvous by
 * WRITE posts a head of under 4 KiB (to align the rest) and then the rest of the message: held
 * behind the head until its ACK, the rest waited a round trip and a wake-up of the progress
 * thread that took the ACK, for every message (bench/README.md, UCX_RNDV_SCHEME=put_zcopy).
 */
static bool fills_a_packet(struct sr_qp *qp, struct sr_swqe *w)
{
	switch (w->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return w->length >= sr_req_seg(qp, w);
	default:
		return false;
	}
}

/*
 * Does WQE i leave at once? One smaller than a packet never does. One of more than
 * post_batch_pkts packets always does. One of one full packet up to that many waits like a
 * small one when the WQE before it fills a packet too and two of its packets fit one GSO send:
 * a stream of one-packet messages (perftest's 8 KiB ib_write_bw over 8 KiB segments), whose
 * ONLY packets, all of one size, then leave several to a GSO send and draw one ACK per
 * receive batch, where each left alone and drew an ACK of its own (1.5-2.4 packets per ACK, a
 * sendmsg per packet: 8 KiB streamed at half the rate of 4 KiB, bench/README.md); and a stream
 * of WRITEs of a few packets on a network of MTU 1500, each of which took a sendmsg of its own
 * (2 KiB streamed at a quarter of the rate of 1 KiB). Behind a small head (UCX's rendezvous)
 * it still leaves at once, and so does a packet too large to share a send (a 64 KiB segment on
 * loopback, where leaving at once can also mean the direct path). WQE i - 1 is there:
 * i >= req.idx and, with a WQE in flight, req.idx > sq.tail.
 */
static bool leaves_at_once(struct sr_qp *qp, uint32_t i)
{
	struct sr_swqe *w = sr_sq_at(&qp->sq, i);
	uint32_t seg;

	if (!fills_a_packet(qp, w))
		return false;
	seg = sr_req_seg(qp, w);
	return w->length > (uint64_t)seg * (uint64_t)sr_params()->post_batch_pkts ||
	       2 * ((size_t)seg + 128) > SR_NET_GSO_BYTES ||
	       !fills_a_packet(qp, sr_sq_at(&qp->sq, i - 1));
}

static bool post_deferred(struct sr_qp *qp)
{
	long batch = sr_params()->post_batch;

	if (!(batch > 1 && qp->state == IBV_QPS_RTS &&
	      (qp->type == IBV_QPT_RC || qp->type == IBV_QPT_XRC_SEND) &&
	      qp->sq.tail != qp->req.idx && sr_psn_gt(qp->req.ask_end, qp->comp.psn) &&
	      !qp->req.stalled && !qp->req.rnr_until &&
	      qp->sq.head - qp->req.idx < (uint32_t)batch))
		return false;
	for (uint32_t i = qp->req.idx; i != qp->sq.head; i++)
		if (leaves_at_once(qp, i))
			return false;
	return true;
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
	sr_sq_posted(qp, true);
out:
	pthread_mutex_unlock(&qp->lock);
	return ret;
}

/*
 * After a post (qp->lock held); may_wait: the WQEs may wait behind work in flight
 * (post_deferred). A deferred ACK for the peer (resp.c, sr_resp_answer) rides in the first
 * request packet the requester sends now when it can (resp.c, sr_resp_ride), else goes in the
 * same batch, after it: shorter, it can end their GSO send, so the two reach the peer in one
 * datagram, which processes the ACK first (udp.c, sr_net_rx_fd).
 */
void sr_sq_posted(struct sr_qp *qp, bool may_wait)
{
	sr_net_batch_begin();
	if (qp->type == IBV_QPT_RC)
		sr_resp_ride_arm(qp);
	if (!may_wait || !post_deferred(qp)) {
		/* The pass's clock read waits until its packets left (req.c, req_now). */
		qp->req.stamp_late = true;
		sr_sq_kick(qp);
		qp->req.stamp_late = false;
	}
	if (qp->type == IBV_QPT_RC)
		sr_resp_answer(qp);
	sr_net_batch_end();
	if (qp->req.stamp_due)
		sr_req_stamp(qp);
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
