/* SPDX-License-Identifier: MIT */
/* Object verbs: PD, MR, completion channel, CQ, SRQ, QP, AH, multicast. */
#include <stdlib.h>
#include <string.h>

#include "core/param.h"
#include "verbs/verbs.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

/* ---- PD ------------------------------------------------------------------------------------ */
struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	struct sr_pd *pd = calloc(1, sizeof(*pd));

	if (!pd)
		return sr_null(-ENOMEM);
	pd->ctx = sr_ctx(c);
	pd->ibpd.context = c;
	return &pd->ibpd;
}

int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	struct sr_pd *pd = sr_pd(ibpd);

	if (atomic_load(&pd->users))
		return EBUSY;
	free(pd);
	return 0;
}

/* ---- MR ------------------------------------------------------------------------------------ */
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	struct sr_mr *mr;
	int ret = sr_mr_reg(sr_pd(pd), addr, length, iova, access, &mr);

	return ret ? sr_null(ret) : &mr->ibmr;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
			       int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
		 int access)
{
	int ret = sr_mr_rereg(sr_mr(mr), flags, pd ? sr_pd(pd) : NULL, addr, length,
			      (unsigned)access);

	/* ibv_rereg_mr(3): an ibv_rereg_mr_err_code, the old MR staying valid on input errors. */
	return ret ? IBV_REREG_MR_ERR_INPUT : 0;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	return sr_ret(sr_mr_dereg(sr_mr(mr)));
}

/* ---- MW: reached through the context ops (ibv_alloc_mw & co. are inline in verbs.h) ------- */
struct ibv_mw *sr_v_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct sr_mw *mw;
	int ret = sr_mw_alloc(sr_pd(pd), type, &mw);

	return ret ? sr_null(ret) : &mw->ibmw;
}

int sr_v_dealloc_mw(struct ibv_mw *mw)
{
	return sr_ret(sr_mw_dealloc(sr_mw(mw)));
}

/* ibv_bind_mw: type 1 only (the inline wrapper checked the type, MR and PD). */
int sr_v_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	return sr_ret(sr_qp_post_bind_mw(sr_qp(qp), sr_mw(mw), b));
}

/* ---- completion channel ---------------------------------------------------------------------- */
struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	struct sr_channel *ch;
	int ret = sr_channel_create(sr_ctx(c), &ch);

	return ret ? sr_null(ret) : &ch->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	return sr_ret(sr_channel_destroy((struct sr_channel *)ch));
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	struct sr_channel *chan = (struct sr_channel *)ch;
	struct sr_cq *c;
	int ret;

	/* The application is about to sleep: the progress thread receives for it meanwhile,
	 * unless it is woken by the datagrams itself (core/cq.c): then the thread, watching a
	 * polling application with the socket unarmed, need not be kicked (its next look takes
	 * what a consumer that stopped waiting left). */
	sr_nic_app_idle(sr_ctx(ch->context)->nic, !sr_channel_watches_rx(chan));
	ret = sr_channel_get(chan, &c);

	if (ret) {
		errno = -ret;
		return -1;
	}
	*cq = (struct ibv_cq *)&c->ibcq;
	*cq_context = c->ibcq.cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* ---- CQ ------------------------------------------------------------------------------------ */
int sr_v_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct sr_cq *cq = sr_cq(ibcq);
	int got;

	if (n <= 0)
		return 0;
	uint64_t now = sr_now_ns();	/* one clock read for the CQ and the socket */

	got = sr_cq_poll_at(cq, n, wc, now);
	/* Nothing yet: receive what is waiting on the socket ourselves rather than wait for the
	 * progress thread to wake (the latency of a thread hand-off is most of a round trip). */
	if (!got && sr_params()->poll_rx && sr_nic_poll_at(cq->ctx->nic, now) > 0)
		got = sr_cq_poll_at(cq, n, wc, now);
	return got;
}

int sr_v_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return sr_ret(sr_cq_arm(sr_cq(cq), solicited_only));
}

static struct sr_cq *cq_new(struct ibv_context *c, int cqe, struct ibv_comp_channel *ch,
			    void *cq_context, int *err)
{
	struct sr_cq *cq;

	if (ch && ch->context != c) {
		*err = -EINVAL;
		return NULL;
	}
	*err = sr_cq_create(sr_ctx(c), cqe, (struct sr_channel *)ch, &cq);
	if (*err)
		return NULL;
	cq->ibcq.cq_context = cq_context;
	sr_cq_ex_init(cq);
	return cq;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
			     struct ibv_comp_channel *ch, int comp_vector)
{
	struct sr_cq *cq;
	int err;

	if (comp_vector < 0 || comp_vector >= c->num_comp_vectors)
		return sr_null(-EINVAL);
	cq = cq_new(c, cqe, ch, cq_context, &err);
	return cq ? (struct ibv_cq *)&cq->ibcq : sr_null(err);
}

#define SR_WC_EX_SUPPORTED                                                                  \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |            \
	 IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |                 \
	 IBV_WC_EX_WITH_DLID_PATH_BITS)

struct ibv_cq_ex *sr_v_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *attr)
{
	struct sr_cq *cq;
	int err;

	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
		return sr_null(-EINVAL);
	/* Completion timestamps, VLAN, flow tags, tag matching: no clock, no such hardware. */
	if (attr->wc_flags & ~(uint64_t)SR_WC_EX_SUPPORTED)
		return sr_null(-EOPNOTSUPP);
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (attr->flags & ~(uint32_t)(IBV_CREATE_CQ_ATTR_SINGLE_THREADED |
				       IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)))
		return sr_null(-EOPNOTSUPP);
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && attr->parent_domain)
		return sr_null(-EOPNOTSUPP);
	if (attr->comp_vector >= (uint32_t)c->num_comp_vectors)
		return sr_null(-EINVAL);
	cq = cq_new(c, (int)attr->cqe, attr->channel, attr->cq_context, &err);
	if (!cq)
		return sr_null(err);
	cq->wc_flags_ex = attr->wc_flags;
	return &cq->ibcq;
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	return sr_ret(sr_cq_resize(sr_cq(cq), cqe));
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	return sr_ret(sr_cq_destroy(sr_cq(cq)));
}

/* Extended CQ polling: each call takes one completion out under the CQ lock; the reads look at
 * the copy. start_poll does not hold the lock across calls, so nothing leaks if an application
 * forgets end_poll after an error. */
static inline struct sr_cq *cqx(struct ibv_cq_ex *c)
{
	return (struct sr_cq *)c;
}

static int cqx_next(struct ibv_cq_ex *c)
{
	struct sr_cq *cq = cqx(c);

	if (sr_cq_poll(cq, 1, &cq->cur) != 1)
		return ENOENT;
	c->wr_id = cq->cur.wr_id;
	c->status = cq->cur.status;
	return 0;
}

static int cqx_start(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
	if (attr && attr->comp_mask)
		return EINVAL;
	if (!cqx_next(c))
		return 0;
	if (sr_params()->poll_rx && sr_nic_poll(cqx(c)->ctx->nic) > 0)
		return cqx_next(c);
	return ENOENT;
}

static void cqx_end(struct ibv_cq_ex *c)
{
}

static enum ibv_wc_opcode cqx_opcode(struct ibv_cq_ex *c) { return cqx(c)->cur.opcode; }
static uint32_t cqx_vendor_err(struct ibv_cq_ex *c) { return cqx(c)->cur.vendor_err; }
static uint32_t cqx_byte_len(struct ibv_cq_ex *c) { return cqx(c)->cur.byte_len; }
static __be32 cqx_imm(struct ibv_cq_ex *c) { return cqx(c)->cur.imm_data; }
static uint32_t cqx_qp_num(struct ibv_cq_ex *c) { return cqx(c)->cur.qp_num; }
static uint32_t cqx_src_qp(struct ibv_cq_ex *c) { return cqx(c)->cur.src_qp; }
static unsigned int cqx_wc_flags(struct ibv_cq_ex *c) { return cqx(c)->cur.wc_flags; }
static uint32_t cqx_slid(struct ibv_cq_ex *c) { return cqx(c)->cur.slid; }
static uint8_t cqx_sl(struct ibv_cq_ex *c) { return cqx(c)->cur.sl; }
static uint8_t cqx_dlid_path_bits(struct ibv_cq_ex *c) { return cqx(c)->cur.dlid_path_bits; }
static uint64_t cqx_zero64(struct ibv_cq_ex *c) { return 0; }
static uint16_t cqx_zero16(struct ibv_cq_ex *c) { return 0; }
static uint32_t cqx_zero32(struct ibv_cq_ex *c) { return 0; }
static void cqx_tm_info(struct ibv_cq_ex *c, struct ibv_wc_tm_info *tm) { memset(tm, 0, sizeof(*tm)); }

void sr_cq_ex_init(struct sr_cq *cq)
{
	struct ibv_cq_ex *c = &cq->ibcq;

	c->start_poll = cqx_start;
	c->next_poll = cqx_next;
	c->end_poll = cqx_end;
	c->read_opcode = cqx_opcode;
	c->read_vendor_err = cqx_vendor_err;
	c->read_byte_len = cqx_byte_len;
	c->read_imm_data = cqx_imm;
	c->read_qp_num = cqx_qp_num;
	c->read_src_qp = cqx_src_qp;
	c->read_wc_flags = cqx_wc_flags;
	c->read_slid = cqx_slid;
	c->read_sl = cqx_sl;
	c->read_dlid_path_bits = cqx_dlid_path_bits;
	c->read_completion_ts = cqx_zero64;
	c->read_completion_wallclock_ns = cqx_zero64;
	c->read_cvlan = cqx_zero16;
	c->read_flow_tag = cqx_zero32;
	c->read_tm_info = cqx_tm_info;
}

/* ---- SRQ ------------------------------------------------------------------------------------- */
struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct sr_srq *srq;
	int ret = sr_srq_create(sr_pd(pd), attr, &srq);

	return ret ? sr_null(ret) : &srq->ibsrq;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	return sr_ret(sr_srq_modify(sr_srq(srq), attr, mask));
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	return sr_ret(sr_srq_query(sr_srq(srq), attr));
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	return sr_ret(sr_srq_destroy(sr_srq(srq)));
}

int sr_v_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return sr_ret(sr_srq_post(sr_srq(srq), wr, bad));
}

/* ---- XRC: domains, XRC SRQs, opening a target QP (core/xrc.c) ------------------------------ */
struct ibv_xrcd *sr_v_open_xrcd(struct ibv_context *c, struct ibv_xrcd_init_attr *attr)
{
	struct sr_xrcd *x;
	int ret = sr_xrcd_open(sr_ctx(c), attr, &x);

	return ret ? sr_null(ret) : &x->ibxrcd;
}

int sr_v_close_xrcd(struct ibv_xrcd *xrcd)
{
	return sr_ret(sr_xrcd_close(sr_xrcd(xrcd)));
}

struct ibv_srq *sr_v_create_srq_ex(struct ibv_context *c, struct ibv_srq_init_attr_ex *a)
{
	uint32_t mask = a->comp_mask;
	enum ibv_srq_type type = (mask & IBV_SRQ_INIT_ATTR_TYPE) ? a->srq_type : IBV_SRQT_BASIC;
	struct ibv_srq_init_attr ia = { .srq_context = a->srq_context, .attr = a->attr };
	struct sr_srq *srq;
	int ret;

	if (mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_RESERVED - 1))
		return sr_null(-EINVAL);
	if (type == IBV_SRQT_TM || (mask & IBV_SRQ_INIT_ATTR_TM))
		return sr_null(-EOPNOTSUPP);	/* tag matching */
	if (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC)
		return sr_null(-EINVAL);
	if (!(mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd || a->pd->context != c)
		return sr_null(-EINVAL);
	if (type == IBV_SRQT_XRC) {
		if (!(mask & IBV_SRQ_INIT_ATTR_XRCD) || !a->xrcd || a->xrcd->context != c ||
		    !(mask & IBV_SRQ_INIT_ATTR_CQ) || !a->cq || a->cq->context != c)
			return sr_null(-EINVAL);
		ret = sr_xrc_srq_create(sr_pd(a->pd), sr_xrcd(a->xrcd), sr_cq(a->cq), &ia, &srq);
	} else {
		ret = sr_srq_create(sr_pd(a->pd), &ia, &srq);
	}
	if (ret)
		return sr_null(ret);
	a->attr = ia.attr;
	return &srq->ibsrq;
}

int sr_v_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num)
{
	struct sr_srq *s = sr_srq(srq);

	if (!s->xrcd)
		return EINVAL;	/* only an XRC SRQ has a number a peer can name */
	*srq_num = s->srqn;
	return 0;
}

/*
 * Another handle on an XRC_RECV QP of the domain. softrdma returns the QP object itself with
 * one more reference (ibv_destroy_qp drops one; the last destroys it); qp_context stays the
 * creator's.
 */
struct ibv_qp *sr_v_open_qp(struct ibv_context *c, struct ibv_qp_open_attr *a)
{
	uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	struct sr_qp *qp;

	if ((a->comp_mask & need) != need ||
	    (a->comp_mask & ~(uint32_t)(IBV_QP_OPEN_ATTR_RESERVED - 1)) || !a->xrcd ||
	    a->xrcd->context != c)
		return sr_null(-EINVAL);
	if (a->qp_type != IBV_QPT_XRC_RECV)
		return sr_null(-EINVAL);
	qp = sr_qp_lookup(sr_ctx(c)->nic, a->qp_num);
	if (!qp)
		return sr_null(-EINVAL);
	if (qp->type != IBV_QPT_XRC_RECV || qp->xrcd != sr_xrcd(a->xrcd)) {
		sr_qp_put(qp);
		return sr_null(-EINVAL);
	}
	atomic_fetch_add(&qp->xrc_opens, 1);
	sr_qp_put(qp);
	return &qp->qpx.qp_base;
}

/* ---- QP ------------------------------------------------------------------------------------- */
struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
	struct sr_qp *qp;
	int ret;

	if (ia->srq && sr_srq(ia->srq)->pd->ctx != sr_pd(pd)->ctx)
		return sr_null(-EINVAL);
	ret = sr_qp_create(sr_pd(pd), ia, &qp);
	if (ret)
		return sr_null(ret);
	sr_qp_ex_init(qp, 0);
	return &qp->qpx.qp_base;
}

#define SR_QP_INIT_SUPPORTED (IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | \
			      IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_XRCD)
/* IBV_QP_EX_WITH_FLUSH (1 << 11) of newer rdma-core, SOFTRDMA_QP_EX_WITH_FLUSH in softrdma.h. */
#define SR_QP_EX_WITH_FLUSH (1ull << 11)
#define SR_SEND_OPS_SUPPORTED                                                             \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |                          \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |           \
	 IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV |  \
	 IBV_QP_EX_WITH_ATOMIC_WRITE | SR_QP_EX_WITH_FLUSH)

struct ibv_qp *sr_v_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *ax)
{
	struct ibv_qp_init_attr ia;
	struct sr_qp *qp;
	int ret;

	bool xrecv = ax->qp_type == IBV_QPT_XRC_RECV;

	if (xrecv ? !(ax->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !ax->xrcd || ax->xrcd->context != c
		  : !(ax->comp_mask & IBV_QP_INIT_ATTR_PD) || !ax->pd)
		return sr_null(-EINVAL);
	if (ax->comp_mask & ~(uint32_t)SR_QP_INIT_SUPPORTED)
		return sr_null(-EOPNOTSUPP);	/* TSO, RSS, ... */
	if ((ax->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && ax->create_flags)
		return sr_null(-EOPNOTSUPP);
	if ((ax->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
	    (ax->send_ops_flags & ~(uint64_t)SR_SEND_OPS_SUPPORTED))
		return sr_null(-EOPNOTSUPP);
	memset(&ia, 0, sizeof(ia));
	ia.qp_context = ax->qp_context;
	ia.send_cq = ax->send_cq;
	ia.recv_cq = ax->recv_cq;
	ia.srq = ax->srq;
	ia.cap = ax->cap;
	ia.qp_type = ax->qp_type;
	ia.sq_sig_all = ax->sq_sig_all;
	ret = sr_qp_create_ex(xrecv ? NULL : sr_pd(ax->pd), xrecv ? sr_xrcd(ax->xrcd) : NULL, &ia,
			      &qp);
	if (ret)
		return sr_null(ret);
	ax->cap = ia.cap;
	sr_qp_ex_init(qp, (ax->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? ax->send_ops_flags : 0);
	return &qp->qpx.qp_base;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct sr_qp *q = sr_qp(qp);

	/* Only a QP created with send_ops_flags has the ibv_wr_* API (ibv_qp_to_qp_ex(3)). */
	if (!q->has_wr_api)
		return NULL;
	return &q->qpx;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	return sr_ret(sr_qp_modify(sr_qp(qp), attr, mask));
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
		 struct ibv_qp_init_attr *ia)
{
	return sr_ret(sr_qp_query(sr_qp(qp), attr, ia));
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	return sr_ret(sr_qp_destroy(sr_qp(qp)));
}

int sr_v_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return sr_ret(sr_qp_post_send(sr_qp(qp), wr, bad));
}

int sr_v_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return sr_ret(sr_qp_post_recv(sr_qp(qp), wr, bad));
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	/* Packets of a message are placed in PSN order, one after the other: once the last
	 * byte is visible, so is every byte before it. rdma-core 44 defines no flags. */
	return flags ? 0 : 1;
}

/* ---- AH --------------------------------------------------------------------------------------- */
struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct sr_ah *ah = calloc(1, sizeof(*ah));
	int ret;

	if (!ah)
		return sr_null(-ENOMEM);
	ret = sr_ah_resolve(sr_pd(pd)->ctx->nic, attr, &ah->dst);
	if (ret) {
		free(ah);
		return sr_null(ret);
	}
	ah->pd = sr_pd(pd);
	ah->attr = *attr;
	ah->ibah.context = pd->context;
	ah->ibah.pd = pd;
	atomic_fetch_add(&ah->pd->users, 1);
	return &ah->ibah;
}

int ibv_destroy_ah(struct ibv_ah *ibah)
{
	struct sr_ah *ah = sr_ah(ibah);

	atomic_fetch_sub(&ah->pd->users, 1);
	free(ah);
	return 0;
}

/*
 * Address vector to answer a UD datagram (IBA 11.4.1.1 / ibv_init_ah_from_wc(3)): the sender
 * is the GRH's source. On IPv4 the GRH's last 20 bytes are the IPv4 header; softrdma's own
 * receive path also left the sender's UDP port in its first bytes ("SR" + port, resp.c).
 */
int ibv_init_ah_from_wc(struct ibv_context *c, uint8_t port, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *ah)
{
	const uint8_t *g = (const uint8_t *)grh;
	struct sr_addr src;

	if (port != 1 || !(wc->wc_flags & IBV_WC_GRH) || !grh)
		return -1;
	memset(&src, 0, sizeof(src));
	if ((g[20] >> 4) == 4) {
		src.family = AF_INET;
		memcpy(&src.v4, g + 20 + 12, 4);
		src.port = (g[0] == 'S' && g[1] == 'R') ? (uint16_t)(g[2] << 8 | g[3]) : 4791;
		/* A source port in 49152-65535 is a standard RoCEv2 sender's flow entropy (kernel
		 * rxe, NICs), not where it listens: it is answered at 4791. softrdma devices send
		 * from their own port, always below 49152 (docs/gid.md). */
		if (src.port >= 49152)
			src.port = 4791;
	} else {
		src.family = AF_INET6;
		memcpy(&src.v6, g + 8, 16);
		src.port = 4791;
	}
	memset(ah, 0, sizeof(*ah));
	ah->is_global = 1;
	ah->port_num = 1;
	ah->dlid = wc->slid;	/* as rdma-core: the sender's LID, its port off 4791 (docs/gid.md) */
	ah->sl = wc->sl;
	/* The reply leaves from this device's own port: the GID naming it, the table's last. */
	ah->grh.sgid_index = (uint8_t)(sr_gid_table_len(&sr_ctx(c)->nic->addr) - 1);
	ah->grh.hop_limit = 64;
	sr_gid_from_addr(&ah->grh.dgid, &src);
	return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
				     uint8_t port)
{
	struct ibv_ah_attr attr;

	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &attr))
		return sr_null(-EINVAL);
	return ibv_create_ah(pd, &attr);
}

/* ---- multicast: IP multicast groups (engine/mcast.c) --------------------------------------------- */
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return sr_ret(sr_mcast_attach(sr_qp(qp), gid));
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return sr_ret(sr_mcast_detach(sr_qp(qp), gid));
}
