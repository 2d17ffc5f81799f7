/* SPDX-License-Identifier: MIT */
/*
 * Queue pairs: creation, the IBA state machine (IBA 10.3.1, figure 112), attribute checking,
 * flushing, posting.
 *
 * ibv_modify_qp checks everything first and changes nothing until every check passed, so a
 * refused modify leaves the QP exactly as it was (STYLE: check, then change). Which attributes a
 * transition requires and allows, per QP type, is the table below (the same facts as IBA table
 * 91 and the Linux kernel's qp_state_table).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/log.h"
#include "core/param.h"
#include "core/post.h"
#include "wire/mad.h"
#include "wire/psn.h"

uint8_t sr_random8(void);

/* ---- the transition table ------------------------------------------------------------------ */
enum { T_RC, T_UC, T_UD, T_XI, T_XT, T_NTYPES };	/* XI/XT: XRC_SEND/XRC_RECV */

struct qp_trans {
	bool valid;
	int req[T_NTYPES];
	int opt[T_NTYPES];
};

#define P(x) IBV_QP_##x
static const struct qp_trans qp_table[IBV_QPS_ERR + 1][IBV_QPS_ERR + 1] = {
	[IBV_QPS_RESET] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_INIT] = { .valid = true,
			.req = { [T_RC] = P(PKEY_INDEX) | P(PORT) | P(ACCESS_FLAGS),
				 [T_UC] = P(PKEY_INDEX) | P(PORT) | P(ACCESS_FLAGS),
				 [T_UD] = P(PKEY_INDEX) | P(PORT) | P(QKEY),
				 [T_XI] = P(PKEY_INDEX) | P(PORT) | P(ACCESS_FLAGS),
				 [T_XT] = P(PKEY_INDEX) | P(PORT) | P(ACCESS_FLAGS) } },
	},
	[IBV_QPS_INIT] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
		[IBV_QPS_INIT] = { .valid = true,
			.opt = { [T_RC] = P(PKEY_INDEX) | P(PORT) | P(ACCESS_FLAGS),
				 [T_UC] = P(PKEY_INDEX) | P(PORT) | P(ACCESS_FLAGS),
				 [T_UD] = P(PKEY_INDEX) | P(PORT) | P(QKEY),
				 [T_XI] = P(PKEY_INDEX) | P(PORT) | P(ACCESS_FLAGS),
				 [T_XT] = P(PKEY_INDEX) | P(PORT) | P(ACCESS_FLAGS) } },
		[IBV_QPS_RTR] = { .valid = true,
			.req = { [T_RC] = P(AV) | P(PATH_MTU) | P(DEST_QPN) | P(RQ_PSN) |
					  P(MAX_DEST_RD_ATOMIC) | P(MIN_RNR_TIMER),
				 [T_UC] = P(AV) | P(PATH_MTU) | P(DEST_QPN) | P(RQ_PSN),
				 [T_XI] = P(AV) | P(PATH_MTU) | P(DEST_QPN) | P(RQ_PSN),
				 [T_XT] = P(AV) | P(PATH_MTU) | P(DEST_QPN) | P(RQ_PSN) |
					  P(MAX_DEST_RD_ATOMIC) | P(MIN_RNR_TIMER) },
			.opt = { [T_RC] = P(ALT_PATH) | P(ACCESS_FLAGS) | P(PKEY_INDEX),
				 [T_UC] = P(ALT_PATH) | P(ACCESS_FLAGS) | P(PKEY_INDEX),
				 [T_UD] = P(PKEY_INDEX) | P(QKEY),
				 [T_XI] = P(ALT_PATH) | P(ACCESS_FLAGS) | P(PKEY_INDEX),
				 [T_XT] = P(ALT_PATH) | P(ACCESS_FLAGS) | P(PKEY_INDEX) } },
	},
	[IBV_QPS_RTR] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
		[IBV_QPS_RTS] = { .valid = true,
			.req = { [T_RC] = P(TIMEOUT) | P(RETRY_CNT) | P(RNR_RETRY) | P(SQ_PSN) |
					  P(MAX_QP_RD_ATOMIC),
				 [T_UC] = P(SQ_PSN),
				 [T_UD] = P(SQ_PSN),
				 [T_XI] = P(TIMEOUT) | P(RETRY_CNT) | P(RNR_RETRY) | P(SQ_PSN) |
					  P(MAX_QP_RD_ATOMIC),
				 [T_XT] = P(TIMEOUT) | P(SQ_PSN) },
			.opt = { [T_RC] = P(CUR_STATE) | P(ALT_PATH) | P(ACCESS_FLAGS) |
					  P(MIN_RNR_TIMER) | P(PATH_MIG_STATE),
				 [T_UC] = P(CUR_STATE) | P(ALT_PATH) | P(ACCESS_FLAGS) |
					  P(PATH_MIG_STATE),
				 [T_UD] = P(CUR_STATE) | P(QKEY),
				 [T_XI] = P(CUR_STATE) | P(ALT_PATH) | P(ACCESS_FLAGS) |
					  P(PATH_MIG_STATE),
				 [T_XT] = P(CUR_STATE) | P(ALT_PATH) | P(ACCESS_FLAGS) |
					  P(MIN_RNR_TIMER) | P(PATH_MIG_STATE) } },
	},
	[IBV_QPS_RTS] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
		[IBV_QPS_RTS] = { .valid = true,
			.opt = { [T_RC] = P(CUR_STATE) | P(ACCESS_FLAGS) | P(ALT_PATH) |
					  P(PATH_MIG_STATE) | P(MIN_RNR_TIMER),
				 [T_UC] = P(CUR_STATE) | P(ACCESS_FLAGS) | P(ALT_PATH) |
					  P(PATH_MIG_STATE),
				 [T_UD] = P(CUR_STATE) | P(QKEY),
				 [T_XI] = P(CUR_STATE) | P(ACCESS_FLAGS) | P(ALT_PATH) |
					  P(PATH_MIG_STATE),
				 [T_XT] = P(CUR_STATE) | P(ACCESS_FLAGS) | P(ALT_PATH) |
					  P(PATH_MIG_STATE) | P(MIN_RNR_TIMER) } },
		[IBV_QPS_SQD] = { .valid = true,
			.opt = { [T_RC] = P(EN_SQD_ASYNC_NOTIFY), [T_UC] = P(EN_SQD_ASYNC_NOTIFY),
				 [T_UD] = P(EN_SQD_ASYNC_NOTIFY), [T_XI] = P(EN_SQD_ASYNC_NOTIFY),
				 [T_XT] = P(EN_SQD_ASYNC_NOTIFY) } },
	},
	[IBV_QPS_SQD] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
		[IBV_QPS_RTS] = { .valid = true,
			.opt = { [T_RC] = P(CUR_STATE) | P(ALT_PATH) | P(ACCESS_FLAGS) |
					  P(MIN_RNR_TIMER) | P(PATH_MIG_STATE),
				 [T_UC] = P(CUR_STATE) | P(ALT_PATH) | P(ACCESS_FLAGS) |
					  P(PATH_MIG_STATE),
				 [T_UD] = P(CUR_STATE) | P(QKEY),
				 [T_XI] = P(CUR_STATE) | P(ALT_PATH) | P(ACCESS_FLAGS) |
					  P(PATH_MIG_STATE),
				 [T_XT] = P(CUR_STATE) | P(ALT_PATH) | P(ACCESS_FLAGS) |
					  P(MIN_RNR_TIMER) | P(PATH_MIG_STATE) } },
		[IBV_QPS_SQD] = { .valid = true,
			.opt = { [T_RC] = P(PORT) | P(AV) | P(TIMEOUT) | P(RETRY_CNT) | P(RNR_RETRY) |
					  P(MAX_QP_RD_ATOMIC) | P(MAX_DEST_RD_ATOMIC) | P(ALT_PATH) |
					  P(ACCESS_FLAGS) | P(PKEY_INDEX) | P(MIN_RNR_TIMER) |
					  P(PATH_MIG_STATE),
				 [T_UC] = P(AV) | P(ALT_PATH) | P(ACCESS_FLAGS) | P(PKEY_INDEX) |
					  P(PATH_MIG_STATE),
				 [T_UD] = P(PKEY_INDEX) | P(QKEY),
				 [T_XI] = P(PORT) | P(AV) | P(TIMEOUT) | P(RETRY_CNT) | P(RNR_RETRY) |
					  P(MAX_QP_RD_ATOMIC) | P(ALT_PATH) | P(ACCESS_FLAGS) |
					  P(PKEY_INDEX) | P(PATH_MIG_STATE),
				 [T_XT] = P(PORT) | P(AV) | P(TIMEOUT) | P(MAX_DEST_RD_ATOMIC) |
					  P(ALT_PATH) | P(ACCESS_FLAGS) | P(PKEY_INDEX) |
					  P(MIN_RNR_TIMER) | P(PATH_MIG_STATE) } },
	},
	[IBV_QPS_SQE] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
		[IBV_QPS_RTS] = { .valid = true,
			.opt = { [T_UC] = P(CUR_STATE) | P(ACCESS_FLAGS),
				 [T_UD] = P(CUR_STATE) | P(QKEY) } },
	},
	[IBV_QPS_ERR] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
	},
};
#undef P

static int type_index(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC:
		return T_RC;
	case IBV_QPT_UC:
		return T_UC;
	case IBV_QPT_XRC_SEND:
		return T_XI;
	case IBV_QPT_XRC_RECV:
		return T_XT;
	default:
		return T_UD;
	}
}

static bool transition_ok(enum ibv_qp_state cur, enum ibv_qp_state next, enum ibv_qp_type type,
			  int mask)
{
	const struct qp_trans *t;
	int req, opt;

	if (cur > IBV_QPS_ERR || next > IBV_QPS_ERR)
		return false;
	if ((mask & IBV_QP_CUR_STATE) && cur != IBV_QPS_RTR && cur != IBV_QPS_RTS &&
	    cur != IBV_QPS_SQD && cur != IBV_QPS_SQE)
		return false;
	t = &qp_table[cur][next];
	if (!t->valid)
		return false;
	req = t->req[type_index(type)];
	opt = t->opt[type_index(type)];
	if ((mask & req) != req)
		return false;
	return !(mask & ~(req | opt | IBV_QP_STATE));
}

/* ---- lifecycle ------------------------------------------------------------------------------- */
void sr_qp_put(struct sr_qp *qp)
{
	atomic_fetch_sub(&qp->refs, 1);
}

/* The tombstone of a QP being destroyed (sr_table_retire): QPN 0, which no lookup matches
 * (QPN 0 would be index 0, never used). */
static struct sr_qp qp_dying;

struct sr_qp *sr_qp_lookup(struct sr_nic *nic, uint32_t qpn)
{
	struct sr_table *t = &nic->qps;
	struct sr_qp *qp;

	pthread_mutex_lock(&t->lock);
	qp = qpn == SR_GSI_QPN ? nic->gsi : t->slot[qpn & (t->size - 1)];
	if (qp && sr_qpn(qp) == qpn)
		sr_qp_ref(qp);
	else
		qp = NULL;
	pthread_mutex_unlock(&t->lock);
	return qp;
}

struct sr_qp *sr_qp_enter(struct sr_nic *nic, uint32_t qpn)
{
	struct sr_table *t = &nic->qps;
	uint32_t i = qpn & (t->size - 1);
	struct sr_qp *qp;

	if (qpn == SR_GSI_QPN)
		return NULL;
	qp = sr_table_enter(t, i);
	if (qp && __atomic_load_n(&qp->qpx.qp_base.qp_num, __ATOMIC_ACQUIRE) == qpn)
		return qp;
	sr_table_leave(t, i);
	return NULL;
}

void sr_qp_leave(struct sr_qp *qp)
{
	sr_table_leave(&qp->nic->qps, qp->qpx.qp_base.handle);
}

static int sq_init(struct sr_sq *sq, const struct ibv_qp_cap *cap)
{
	uint32_t n = 2;

	while (n < cap->max_send_wr)
		n <<= 1;
	sq->mask = n - 1;
	sq->max_wr = cap->max_send_wr;
	sq->max_sge = cap->max_send_sge ? cap->max_send_sge : 1;
	/* As rxe: a send WQE has room for its SGEs anyway, so inline data up to their size is
	 * always accepted (rdma_xclient posts 16 bytes inline on a QP that asked for none). */
	sq->max_inline = cap->max_inline_data;
	if (sq->max_inline < sq->max_sge * sizeof(struct ibv_sge))
		sq->max_inline = sq->max_sge * (uint32_t)sizeof(struct ibv_sge);
	if (sq->max_inline > SR_MAX_INLINE)
		sq->max_inline = SR_MAX_INLINE;	/* (a request above it was refused before) */
	sq->wqe = calloc(n, sizeof(*sq->wqe));
	sq->sges = calloc((size_t)n * sq->max_sge, sizeof(*sq->sges));
	sq->inline_buf = sq->max_inline ? malloc((size_t)n * sq->max_inline) : NULL;
	if (!sq->wqe || !sq->sges || (sq->max_inline && !sq->inline_buf))
		return -ENOMEM;
	return 0;
}

static void sq_free(struct sr_sq *sq)
{
	free(sq->wqe);
	free(sq->sges);
	free(sq->inline_buf);
}

int sr_qp_create(struct sr_pd *pd, struct ibv_qp_init_attr *ia, struct sr_qp **out)
{
	return sr_qp_create_ex(pd, NULL, ia, out);
}

/*
 * XRC_SEND (pd, send CQ; no receive side) and XRC_RECV (xrcd only: no SQ, RQ, CQs or PD of
 * its own; each message uses the PD and CQ of the XRC SRQ its XRCETH names) besides RC/UC/UD.
 */
int sr_qp_create_ex(struct sr_pd *pd, struct sr_xrcd *xrcd, struct ibv_qp_init_attr *ia,
		    struct sr_qp **out)
{
	bool xsend = ia->qp_type == IBV_QPT_XRC_SEND, xrecv = ia->qp_type == IBV_QPT_XRC_RECV;
	struct sr_ctx *ctx = xrecv ? (xrcd ? xrcd->ctx : NULL) : (pd ? pd->ctx : NULL);
	struct ibv_qp_cap *cap = &ia->cap;
	struct sr_nic *nic;
	struct sr_qp *qp;
	int ret, idx;

	if (ia->qp_type != IBV_QPT_RC && ia->qp_type != IBV_QPT_UC && ia->qp_type != IBV_QPT_UD &&
	    !xsend && !xrecv)
		return -EOPNOTSUPP;
	if (!ctx)
		return -EINVAL;
	nic = ctx->nic;
	if (xrecv) {
		/* The target has no queues of its own (the kernel ignores these too). */
		pd = NULL;
		ia->send_cq = ia->recv_cq = NULL;
		ia->srq = NULL;
		memset(cap, 0, sizeof(*cap));
	} else if (xsend) {
		if (!ia->send_cq || ia->srq)
			return -EINVAL;
		ia->recv_cq = NULL;
		cap->max_recv_wr = cap->max_recv_sge = 0;
	} else if (!ia->send_cq || !ia->recv_cq) {
		return -EINVAL;
	}
	if (cap->max_send_wr > SR_MAX_QP_WR || cap->max_send_sge > SR_MAX_SGE ||
	    cap->max_inline_data > SR_MAX_INLINE ||
	    (!ia->srq && (cap->max_recv_wr > SR_MAX_QP_WR || cap->max_recv_sge > SR_MAX_SGE)))
		return -EINVAL;
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return -ENOMEM;
	if (!cap->max_send_wr)
		cap->max_send_wr = 1;
	ret = sq_init(&qp->sq, cap);
	if (!ret && !ia->srq && !xsend && !xrecv)
		ret = sr_rq_init(&qp->rq, cap->max_recv_wr ? cap->max_recv_wr : 1, cap->max_recv_sge);
	if (ret)
		goto fail;
	qp->resp.rwqe = calloc(1, sizeof(struct sr_rwqe) +
				  (xrecv ? SR_MAX_SGE : ia->srq ? sr_srq(ia->srq)->rq.max_sge
								: qp->rq.max_sge) *
					  sizeof(struct ibv_sge));
	if (!qp->resp.rwqe) {
		ret = -ENOMEM;
		goto fail;
	}
	qp->ctx = ctx;
	qp->nic = nic;
	qp->xrcd = xrecv ? xrcd : NULL;
	qp->type = ia->qp_type;
	qp->state = IBV_QPS_RESET;
	qp->pd = pd;
	qp->scq = sr_cq(ia->send_cq);
	qp->rcq = sr_cq(ia->recv_cq);
	qp->srq = ia->srq ? sr_srq(ia->srq) : NULL;
	qp->sig_all = ia->sq_sig_all;
	pthread_mutex_init(&qp->lock, NULL);
	atomic_store(&qp->refs, 1);

	/* QPN = random tag above the table index: a packet for a destroyed QP whose index was
	 * reused misses. 0, 1 (SMI/GSI) and 0xffffff (multicast) are never handed out. */
	idx = sr_table_add(&nic->qps, qp);
	if (idx < 0) {
		ret = -ENOMEM;
		goto fail;
	}
	uint32_t bits = (uint32_t)__builtin_ctz(nic->qps.size);
	uint32_t qpn;

	do {
		uint32_t tag = ((uint32_t)sr_random8() << 8 | sr_random8()) & ((1u << (24 - bits)) - 1);

		qpn = (tag << bits) | (uint32_t)idx;
	} while (qpn <= 1 || qpn == 0xffffff);

	struct ibv_qp *b = &qp->qpx.qp_base;

	b->context = &ctx->vctx.context;
	b->qp_context = ia->qp_context;
	b->pd = pd ? &pd->ibpd : NULL;
	b->send_cq = ia->send_cq;
	b->recv_cq = ia->recv_cq;
	b->srq = ia->srq;
	b->handle = (uint32_t)idx;
	b->qp_num = qpn;
	b->state = IBV_QPS_RESET;
	b->qp_type = ia->qp_type;
	pthread_mutex_init(&b->mutex, NULL);
	pthread_cond_init(&b->cond, NULL);

	/* What ibv_create_qp(3) reports back: what we really have. */
	cap->max_send_sge = qp->sq.max_sge;
	cap->max_inline_data = qp->sq.max_inline;
	if (xrecv) {
		memset(cap, 0, sizeof(*cap));
	} else if (!ia->srq) {
		cap->max_recv_wr = qp->rq.max_wr;
		cap->max_recv_sge = qp->rq.max_sge;
	} else {
		cap->max_recv_wr = 0;
		cap->max_recv_sge = 0;
	}
	qp->attr.cap = *cap;
	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.path_mtu = IBV_MTU_1024;
	qp->attr.port_num = 1;
	qp->attr.max_rd_atomic = 1;
	qp->attr.max_dest_rd_atomic = 1;

	if (pd)
		atomic_fetch_add(&pd->users, 1);
	if (qp->scq)
		atomic_fetch_add(&qp->scq->users, 1);
	if (qp->rcq)
		atomic_fetch_add(&qp->rcq->users, 1);
	if (qp->xrcd)
		atomic_fetch_add(&qp->xrcd->users, 1);
	if (qp->srq)
		atomic_fetch_add(&qp->srq->users, 1);
	/* Publish the number last: the table slot is visible to the receive path already, but
	 * sr_qp_lookup() only matches once qp_num is set. */
	__atomic_store_n(&b->qp_num, qpn, __ATOMIC_RELEASE);
	*out = qp;
	return 0;
fail:
	sq_free(&qp->sq);
	sr_rq_free(&qp->rq);
	free(qp->resp.rwqe);
	free(qp);
	return ret;
}

/*
 * Takes qp off the timer list. The list's reference is dropped only by whoever removes the
 * entry: ibv_destroy_qp (no qp lock) and the progress thread (qp lock held, after it saw the
 * flag set) may both get here for one entry, and the flag each read outside timer_lock cannot
 * tell them apart. Both dropping it freed the QP under the thread's own reference (ASan,
 * test_qp_churn, 2026-11-28).
 */
void sr_timer_disarm(struct sr_qp *qp)
{
	struct sr_nic *nic = qp->nic;
	bool found = false;

	pthread_mutex_lock(&nic->timer_lock);
	for (uint32_t j = 0; j < nic->ntimer; j++) {
		if (nic->timer_qps[j] == qp) {
			nic->timer_qps[j] = nic->timer_qps[--nic->ntimer];
			found = true;
			break;
		}
	}
	qp->on_timer_list = false;
	qp->timer_idle_since = 0;
	pthread_mutex_unlock(&nic->timer_lock);
	if (found)
		sr_qp_put(qp);	/* the list's reference */
}

/*
 * After one side of a connection has destroyed its QP, the other may still send to it: the
 * last ACK again on a path that showed loss (sr_resp_final_ack), a tail-loss probe whose ACK
 * was on its way, SRQ ping-pongs' sends beyond the count. Those are dropped as any packet for
 * a QP that does not exist is, but counted apart, so that drop_qpn keeps meaning a packet
 * that never had a QP here (misdirected or forged).
 */
void sr_qp_gone_note(struct sr_nic *nic, uint32_t qpn)
{
	unsigned i = atomic_fetch_add_explicit(&nic->gone_next, 1, memory_order_relaxed);
	uint64_t ms = sr_now_ns() / 1000000;

	atomic_store_explicit(&nic->gone[i % SR_GONE_QPS], ms << 24 | (qpn & 0xffffff),
			      memory_order_relaxed);
}

bool sr_qp_gone_recently(struct sr_nic *nic, uint32_t qpn)
{
	uint64_t ms = sr_now_ns() / 1000000;

	for (unsigned i = 0; i < SR_GONE_QPS; i++) {
		uint64_t v = atomic_load_explicit(&nic->gone[i], memory_order_relaxed);

		if (v && (v & 0xffffff) == (qpn & 0xffffff) && ms - (v >> 24) < SR_GONE_MS)
			return true;
	}
	return false;
}

int sr_qp_make_gsi(struct sr_qp *qp)
{
	struct sr_nic *nic = qp->nic;
	int ret = 0;

	if (qp->type != IBV_QPT_UD || qp->state != IBV_QPS_RESET)
		return -EINVAL;
	pthread_mutex_lock(&nic->qps.lock);
	if (nic->gsi) {
		ret = -EBUSY;
	} else {
		/* The table slot keeps the QP for the engine's own walks; lookups of QPN 1 go
		 * through nic->gsi, so the random number it had no longer finds it. */
		nic->gsi = qp;
		__atomic_store_n(&qp->qpx.qp_base.qp_num, SR_GSI_QPN, __ATOMIC_RELEASE);
		qp->attr.qkey = SR_GSI_QKEY;
	}
	pthread_mutex_unlock(&nic->qps.lock);
	return ret;
}

/* Its completions still in its CQs go, as ConnectX providers clean the CQs of a QP moved to
 * RESET or destroyed (kernel rxe leaves them): a consumer that frees a QP's receive buffers
 * with the QP must not poll completions naming them later (libfabric's ofi_rxm reposted such a
 * buffer on its freed endpoint and crashed). Receive completions of a QP on an SRQ stay: their
 * WQEs came from the SRQ and cannot go back to it. */
static void purge_cqes(struct sr_qp *qp)
{
	bool own_rq = !qp->srq && qp->type != IBV_QPT_XRC_RECV;

	if (qp->scq)
		sr_cq_purge_qp(qp->scq, qp->qpx.qp_base.qp_num, own_rq && qp->rcq == qp->scq);
	if (qp->rcq && qp->rcq != qp->scq && own_rq)
		sr_cq_purge_qp(qp->rcq, qp->qpx.qp_base.qp_num, true);
}

int sr_qp_destroy(struct sr_qp *qp)
{
	struct ibv_qp *b = &qp->qpx.qp_base;

	/* ibv_open_qp handles are this same object: the last one destroys it. */
	if (atomic_load(&qp->xrc_opens) > 0) {
		atomic_fetch_sub(&qp->xrc_opens, 1);
		return 0;
	}
	pthread_mutex_lock(&qp->lock);
	sr_direct_qp_withdraw(qp);	/* while the index is still ours */
	pthread_mutex_unlock(&qp->lock);
	sr_qp_gone_note(qp->nic, sr_qpn(qp));
	pthread_mutex_lock(&qp->nic->qps.lock);
	if (qp->nic->gsi == qp) {
		qp->nic->gsi = NULL;
		/* Packets reach it as QP 1, not by its own number: a peer's last MADs (a DREP,
		 * a DREQ sent again) that come after it are gone too, not strays. */
		sr_qp_gone_note(qp->nic, SR_GSI_QPN);
	}
	pthread_mutex_unlock(&qp->nic->qps.lock);
	sr_table_retire(&qp->nic->qps, b->handle, &qp_dying);
	pthread_mutex_lock(&qp->lock);
	qp->nic->engine->qp_final_ack(qp);
	qp->state = IBV_QPS_RESET;	/* the engine ignores it from now on */
	qp->rexmit_at = 0;
	pthread_mutex_unlock(&qp->lock);
	sr_timer_disarm(qp);
	qp->nic->engine->qp_detach_mcast(qp);	/* as the kernel's uverbs does on destroy */
	/* Wait for packets (sr_qp_enter), timers and coalesced ACKs that still hold it. */
	sr_table_drain(&qp->nic->qps, b->handle);
	sr_table_free_index(&qp->nic->qps, b->handle);
	qp->nic->engine->qp_leave_acks(qp);
	while (atomic_load(&qp->refs) > 1)
		sched_yield();
	purge_cqes(qp);
	sr_async_event_purge(qp->ctx, qp);
	pthread_mutex_lock(&b->mutex);
	while (b->events_completed != qp->async_events_delivered)
		pthread_cond_wait(&b->cond, &b->mutex);
	pthread_mutex_unlock(&b->mutex);

	qp->nic->engine->qp_reset(qp);	/* XRC_RECV: drops its SRQ binding */
	if (qp->pd)
		atomic_fetch_sub(&qp->pd->users, 1);
	if (qp->scq)
		atomic_fetch_sub(&qp->scq->users, 1);
	if (qp->rcq)
		atomic_fetch_sub(&qp->rcq->users, 1);
	if (qp->xrcd)
		atomic_fetch_sub(&qp->xrcd->users, 1);
	if (qp->srq)
		atomic_fetch_sub(&qp->srq->users, 1);		/* frees what the responder kept (before res goes) */
	sq_free(&qp->sq);
	sr_rq_free(&qp->rq);
	free(qp->resp.rwqe);
	free(qp->resp.res);
	free(qp);
	return 0;
}

/* ---- flushing and error states ---------------------------------------------------------- */
static enum ibv_wc_opcode send_wc_opcode(uint32_t op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return IBV_WC_FETCH_ADD;
	case IBV_WR_LOCAL_INV:
		return IBV_WC_LOCAL_INV;
	case IBV_WR_BIND_MW:
		return IBV_WC_BIND_MW;
	case IBV_WR_ATOMIC_WRITE:
		return IBV_WC_ATOMIC_WRITE;
	case SR_WR_FLUSH:
		return (enum ibv_wc_opcode)SR_WC_FLUSH;
	case SR_WR_REG_MR:
		return SR_WC_REG_MR;
	default:
		return IBV_WC_SEND;	/* SEND, SEND_WITH_IMM, SEND_WITH_INV */
	}
}

void sr_comp_wqe(struct sr_qp *qp, struct sr_swqe *wqe, enum ibv_wc_status status)
{
	if (status != IBV_WC_SUCCESS || qp->sig_all || (wqe->flags & IBV_SEND_SIGNALED)) {
		struct ibv_wc wc = {
			.wr_id = wqe->wr_id,
			.status = status,
			.opcode = send_wc_opcode(wqe->opcode),
			.byte_len = wqe->length,
			.qp_num = sr_qpn(qp),
		};

		sr_cq_post(qp->scq, &wc, false);
	}
	if (wqe->state >= SR_WQE_SENDING && sr_op_is_rd_atomic(wqe->opcode)) {
		qp->req.rd_atomic--;
		if (wqe->opcode == IBV_WR_RDMA_READ && sr_rd_mid_valid(wqe))
			qp->req.rd_extra--;	/* (failed with two requests outstanding) */
	}
	if (wqe->opcode == IBV_WR_LOCAL_INV && wqe->u.inv.held) {
		/* Everything before it has completed: no retransmission needs the map now. */
		sr_key_inval_done(qp, wqe->imm);
		wqe->u.inv.held = false;
	}
	qp->sq.tail++;
}

static void flush_sq(struct sr_qp *qp)
{
	while (qp->sq.tail != qp->sq.head)
		sr_comp_wqe(qp, sr_sq_at(&qp->sq, qp->sq.tail), IBV_WC_WR_FLUSH_ERR);
	qp->req.idx = qp->sq.tail;
	qp->req.offset = 0;
	qp->req.rd_atomic = 0;
	qp->req.rd_extra = 0;
	qp->rexmit_at = 0;
}

static void flush_rwqe(struct sr_qp *qp, const struct sr_rwqe *w)
{
	struct ibv_wc wc = {
		.wr_id = w->wr_id,
		.status = IBV_WC_WR_FLUSH_ERR,
		.opcode = IBV_WC_RECV,
		.qp_num = sr_qpn(qp),
	};

	sr_cq_post(qp->rcq, &wc, false);
}

void sr_qp_flush(struct sr_qp *qp)
{
	flush_sq(qp);
	if (qp->state != IBV_QPS_ERR)
		return;
	if (qp->resp.have_rwqe) {
		flush_rwqe(qp, qp->resp.rwqe);
		qp->resp.have_rwqe = false;
	}
	sr_xrc_unbind(qp);
	if (!qp->srq && qp->rq.buf) {
		while (qp->rq.tail != qp->rq.head) {
			flush_rwqe(qp, sr_rq_at(&qp->rq, qp->rq.tail));
			qp->rq.tail++;
		}
	}
}

static void set_state(struct sr_qp *qp, enum ibv_qp_state s)
{
	qp->state = s;
	qp->attr.qp_state = s;
	qp->attr.cur_qp_state = s;
	qp->qpx.qp_base.state = s;
	sr_direct_qp_publish(qp);
}

void sr_qp_to_error(struct sr_qp *qp)
{
	if (qp->state == IBV_QPS_ERR || qp->state == IBV_QPS_RESET)
		return;
	qp->nic->engine->qp_ack_now(qp);	/* what was executed was acknowledged, as on a NIC */
	set_state(qp, IBV_QPS_ERR);
	sr_qp_flush(qp);
	/* An SRQ consumer learns that no more WQEs will be taken by this QP (IBA 11.6.3.4). */
	if (qp->srq && qp->type != IBV_QPT_XRC_RECV)
		sr_async_event(qp->ctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp);
}

void sr_qp_to_sqe(struct sr_qp *qp)
{
	if (sr_qp_reliable(qp)) {
		sr_qp_to_error(qp);
		return;
	}
	set_state(qp, IBV_QPS_SQE);
	flush_sq(qp);
}

/* ---- modify / query ---------------------------------------------------------------------- */
static int check_attrs(struct sr_qp *qp, const struct ibv_qp_attr *a, int mask, struct sr_addr *peer)
{
	struct sr_nic *nic = qp->nic;

	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		return -EINVAL;
	if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0)
		return -EINVAL;
	if ((mask & IBV_QP_ACCESS_FLAGS) &&
	    (a->qp_access_flags & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
					      IBV_ACCESS_MW_BIND | SR_ACCESS_FLUSH_GLOBAL |
					      SR_ACCESS_FLUSH_PERSISTENT |
					      /* as kernel rxe: accepted (the MR says whether it is
					       * on-demand; every MR here may be) */
					      IBV_ACCESS_ON_DEMAND)))
		return -EINVAL;
	if ((mask & IBV_QP_PATH_MTU) &&
	    (a->path_mtu < IBV_MTU_256 || a->path_mtu > nic->active_mtu))
		return -EINVAL;
	if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
		return -EINVAL;
	if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
		return -EINVAL;
	if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
		return -EINVAL;
	if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
		return -EINVAL;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > SR_MAX_RD_ATOMIC)
		return -EINVAL;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > SR_MAX_RD_ATOMIC)
		return -EINVAL;
	if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff)
		return -EINVAL;
	if ((mask & IBV_QP_AV) && sr_ah_resolve(nic, &a->ah_attr, peer))
		return -EINVAL;
	if ((mask & IBV_QP_STATE) && a->qp_state == IBV_QPS_SQE)
		return -EINVAL;	/* only the QP itself goes to SQE */
	return 0;
}

static uint64_t timeout_ns(uint8_t t)
{
	uint64_t ns;

	if (!t)
		return 0;	/* infinite (IBA 9.7.6.1.3) */
	ns = 4096ull << t;	/* 4.096 us * 2^t */
	return ns < 1000000 ? 1000000 : ns;	/* at least 1 ms: a timer is a lower bound */
}

int sr_qp_set_seg(struct sr_qp *qp, uint32_t bytes)
{
	int ret = 0;

	pthread_mutex_lock(&qp->lock);
	if (bytes && (bytes % 4096 || bytes > qp->nic->seg_max))
		ret = -EINVAL;
	else if (qp->type != IBV_QPT_RC || (qp->state != IBV_QPS_RESET && qp->state != IBV_QPS_INIT))
		ret = -EINVAL;
	else
		qp->seg = bytes;
	pthread_mutex_unlock(&qp->lock);
	return ret;
}



int sr_qp_modify(struct sr_qp *qp, struct ibv_qp_attr *a, int mask)
{
	enum ibv_qp_state cur, next;
	struct sr_addr peer;
	struct sr_res *res = NULL;
	int ret;

	/* As the kernel's uverbs (modify_qp_mask): attributes of the half an XRC QP does not
	 * have are ignored, so RC-style masks work on XRC QPs (perftest -c XRC sends them). */
	if (qp->type == IBV_QPT_XRC_SEND)
		mask &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	else if (qp->type == IBV_QPT_XRC_RECV)
		mask &= ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
	pthread_mutex_lock(&qp->lock);
	cur = qp->state;
	if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) {
		ret = -EINVAL;
		goto out;
	}
	next = (mask & IBV_QP_STATE) ? a->qp_state : cur;
	if (!transition_ok(cur, next, qp->type, mask)) {
		ret = -EINVAL;
		goto out;
	}
	ret = check_attrs(qp, a, mask, &peer);
	if (ret)
		goto out;
	if (sr_qpn(qp) == SR_GSI_QPN && (mask & IBV_QP_QKEY) && a->qkey != SR_GSI_QKEY) {
		ret = -EINVAL;	/* QP1's Q_Key is 0x80010000 (IBA 13.5.3.1) */
		goto out;
	}
	if (next == IBV_QPS_RTS && cur == IBV_QPS_SQD && qp->sq_draining) {
		ret = -EINVAL;	/* SQD -> RTS only once drained (IBA 10.3.1.x) */
		goto out;
	}
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) || (cur == IBV_QPS_INIT && next == IBV_QPS_RTR)) {
		uint32_t n = (mask & IBV_QP_MAX_DEST_RD_ATOMIC) ? a->max_dest_rd_atomic
							       : qp->attr.max_dest_rd_atomic;

		res = calloc(n ? n : 1, sizeof(*res));
		if (!res) {
			ret = -ENOMEM;
			goto out;
		}
	}

	/* Every check passed: apply. */
	if (mask & IBV_QP_ACCESS_FLAGS)
		qp->attr.qp_access_flags = a->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		qp->attr.pkey_index = a->pkey_index;
	if (mask & IBV_QP_PORT)
		qp->attr.port_num = a->port_num;
	if (mask & IBV_QP_QKEY)
		qp->attr.qkey = a->qkey;
	if (mask & IBV_QP_AV) {
		qp->attr.ah_attr = a->ah_attr;
		qp->peer = peer;
		qp->direct_skip_ns = 0;
	}
	if (mask & IBV_QP_ALT_PATH) {
		qp->attr.alt_ah_attr = a->alt_ah_attr;
		qp->attr.alt_pkey_index = a->alt_pkey_index;
		qp->attr.alt_port_num = a->alt_port_num;
		qp->attr.alt_timeout = a->alt_timeout;
	}
	if (mask & IBV_QP_PATH_MIG_STATE)
		qp->attr.path_mig_state = a->path_mig_state;
	if (mask & IBV_QP_PATH_MTU) {
		qp->attr.path_mtu = a->path_mtu;
		qp->mtu = sr_mtu_bytes(a->path_mtu);
		if (a->path_mtu == IBV_MTU_4096 && qp->seg)
			qp->mtu = qp->seg;
	}
	if (mask & IBV_QP_TIMEOUT) {
		qp->attr.timeout = a->timeout;
		qp->timeout_ns = timeout_ns(a->timeout);
	}
	if (mask & IBV_QP_RETRY_CNT) {
		qp->attr.retry_cnt = a->retry_cnt;
		qp->comp.retry_left = a->retry_cnt;
	}
	if (mask & IBV_QP_RNR_RETRY) {
		qp->attr.rnr_retry = a->rnr_retry;
		qp->comp.rnr_left = a->rnr_retry;
	}
	if (mask & IBV_QP_MIN_RNR_TIMER)
		qp->attr.min_rnr_timer = a->min_rnr_timer;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->attr.max_rd_atomic = a->max_rd_atomic ? a->max_rd_atomic : 1;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		qp->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
	if (res) {
		free(qp->resp.res);
		qp->resp.res = res;
		qp->resp.nres = qp->attr.max_dest_rd_atomic ? qp->attr.max_dest_rd_atomic : 1;
		qp->resp.res_next = 0;
	}
	if (mask & IBV_QP_DEST_QPN)
		qp->attr.dest_qp_num = a->dest_qp_num;
	if (mask & (IBV_QP_AV | IBV_QP_DEST_QPN))
		sr_qp_peer_forget(qp);	/* another peer */
	if (mask & IBV_QP_RQ_PSN) {
		qp->attr.rq_psn = a->rq_psn & SR_PSN_MASK;
		qp->resp.epsn = qp->attr.rq_psn;
	}
	if (mask & IBV_QP_SQ_PSN) {
		qp->attr.sq_psn = a->sq_psn & SR_PSN_MASK;
		qp->req.psn = qp->attr.sq_psn;
		qp->req.high_psn = qp->attr.sq_psn;
		qp->comp.psn = qp->attr.sq_psn;
		qp->req.ask_end = qp->attr.sq_psn;
		qp->req.cwnd = 0;	/* re-initialised from comp.psn at first use */
	}
	if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY)
		qp->sqd_notify = a->en_sqd_async_notify;

	if (next != cur) {
		switch (next) {
		case IBV_QPS_RESET:
			qp->nic->engine->qp_ack_now(qp);
			set_state(qp, next);
			qp->nic->engine->qp_reset(qp);
			qp->seg = 0;
			purge_cqes(qp);
			break;
		case IBV_QPS_RTR:
			if (qp->type == IBV_QPT_UD)
				qp->mtu = sr_mtu_bytes(qp->nic->active_mtu);
			set_state(qp, next);
			break;
		case IBV_QPS_RTS:
			set_state(qp, next);
			qp->sq_draining = false;
			qp->comp.last_progress = sr_now_ns();
			qp->nic->engine->qp_rts(qp);
			break;
		case IBV_QPS_SQD:
			set_state(qp, next);
			qp->sq_draining = qp->sq.tail != qp->sq.head;
			qp->attr.sq_draining = qp->sq_draining;
			if (!qp->sq_draining && qp->sqd_notify)
				sr_async_event(qp->ctx, IBV_EVENT_SQ_DRAINED, qp);
			break;
		case IBV_QPS_ERR:
			sr_qp_to_error(qp);
			break;
		default:
			set_state(qp, next);
			break;
		}
	}
	sr_direct_qp_publish(qp);	/* access flags, destination */
	ret = 0;
out:
	pthread_mutex_unlock(&qp->lock);
	return ret;
}

int sr_qp_query(struct sr_qp *qp, struct ibv_qp_attr *a, struct ibv_qp_init_attr *ia)
{
	pthread_mutex_lock(&qp->lock);
	*a = qp->attr;
	a->qp_state = qp->state;
	a->cur_qp_state = qp->state;
	a->en_sqd_async_notify = qp->sqd_notify;
	a->sq_draining = qp->state == IBV_QPS_SQD && qp->sq_draining;
	memset(ia, 0, sizeof(*ia));
	ia->qp_context = qp->qpx.qp_base.qp_context;
	ia->send_cq = qp->qpx.qp_base.send_cq;
	ia->recv_cq = qp->qpx.qp_base.recv_cq;
	ia->srq = qp->qpx.qp_base.srq;
	ia->cap = qp->attr.cap;
	ia->qp_type = qp->type;
	ia->sq_sig_all = qp->sig_all;
	pthread_mutex_unlock(&qp->lock);
	return 0;
}
