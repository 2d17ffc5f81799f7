/* SPDX-License-Identifier: MIT */
/* Posting and object entry points used by the verbs face (src/verbs). All return 0/-errno. */
#ifndef SR_CORE_POST_H
#define SR_CORE_POST_H

#include "core/core.h"

/* post.c */
int sr_post_state_ok(struct sr_qp *qp);
/* Validates the WQE in slot (filled by the caller); computes its length. */
int sr_swqe_finish(struct sr_qp *qp, uint32_t slot);
/* Copies inline data (from sges or bufs) into slot's inline buffer. */
int sr_swqe_inline(struct sr_qp *qp, uint32_t slot, const struct ibv_sge *sg, size_t n,
		   const struct ibv_data_buf *bufs);
/* The arguments of BIND_MW (type1: from ibv_bind_mw), REG_MR and FLUSH into w->u; 0 or -errno
 * (EINVAL, EOPNOTSUPP for what softrdma does not implement). */
int sr_swqe_bind(struct sr_qp *qp, struct sr_swqe *w, struct ibv_mw *mw, uint32_t rkey,
		 const struct ibv_mw_bind_info *b, bool type1);
int sr_swqe_reg(struct sr_qp *qp, struct sr_swqe *w, struct ibv_mr *mr, uint32_t key,
		unsigned access);
int sr_swqe_flush(struct sr_swqe *w, uint32_t rkey, uint64_t raddr, size_t len, uint8_t type,
		  uint8_t level);
int sr_qp_post_send(struct sr_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sr_qp_post_recv(struct sr_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* After new WQEs: send (or flush in ERR/SQE); qp lock held. */
void sr_sq_kick(struct sr_qp *qp);
/* After a post (qp->lock held): a deferred ACK, then the requester (may_wait: post_batch). */
void sr_sq_posted(struct sr_qp *qp, bool may_wait);

/* qp.c */
int sr_qp_create(struct sr_pd *pd, struct ibv_qp_init_attr *ia, struct sr_qp **out);
int sr_qp_create_ex(struct sr_pd *pd, struct sr_xrcd *xrcd, struct ibv_qp_init_attr *ia,
		    struct sr_qp **out);
int sr_qp_modify(struct sr_qp *qp, struct ibv_qp_attr *a, int mask);
int sr_qp_query(struct sr_qp *qp, struct ibv_qp_attr *a, struct ibv_qp_init_attr *ia);
int sr_qp_destroy(struct sr_qp *qp);
/* Makes a new UD QP (still in RESET) this NIC's GSI QP: QP number 1, Q_Key 0x80010000 (IBA
 * 13.5.3.1), receiving the MADs sent to QP1 on the device's port. 0, -EINVAL (not a new UD QP)
 * or -EBUSY (the NIC has one). */
int sr_qp_make_gsi(struct sr_qp *qp);
/* The large segment agreed with a softrdma peer (0: none), for the next move to RTR with path
 * MTU 4096; -EINVAL if not a multiple of 4096 the NIC offers, or not an RC QP before RTR. */
int sr_qp_set_seg(struct sr_qp *qp, uint32_t bytes);

/* mr.c */
uint8_t sr_random8(void);
int sr_mr_check_access(unsigned access);
int sr_mr_reg(struct sr_pd *pd, void *addr, size_t length, uint64_t iova, unsigned access,
	      struct sr_mr **out);
int sr_mr_dereg(struct sr_mr *mr);
int sr_mr_rereg(struct sr_mr *mr, int flags, struct sr_pd *pd, void *addr, size_t length,
		unsigned access);
/* ibv_advise_mr (ODP prefetch); a positive errno. */
int sr_mr_advise(struct sr_pd *pd, int advice, uint32_t flags, const struct ibv_sge *sge,
		 uint32_t num_sge);
/* Fast registration: an MR of up to max_pages pages and no memory yet; a new map for the
 * key tag the MR's keys carry now (count of SGEs mapped, or -errno); the keys' tag. */
int sr_frmr_alloc(struct sr_pd *pd, uint32_t max_pages, struct sr_mr **out);
int sr_frmr_map(struct sr_mr *mr, const struct ibv_sge *sg, int nents, unsigned page_size);
void sr_frmr_update_key(struct sr_mr *mr, uint8_t key);
/* Rights a REG_MR may grant: 0, -EINVAL, -EOPNOTSUPP. */
int sr_frmr_check_reg_access(unsigned access);

/* mw.c */
int sr_mw_alloc(struct sr_pd *pd, enum ibv_mw_type type, struct sr_mw **out);
int sr_mw_dealloc(struct sr_mw *mw);
/* ibv_bind_mw (type 1): queues the bind on qp; mw->ibmw.rkey becomes the new key. */
int sr_qp_post_bind_mw(struct sr_qp *qp, struct sr_mw *mw, const struct ibv_mw_bind *b);

/* cq.c */
int sr_channel_create(struct sr_ctx *ctx, struct sr_channel **out);
int sr_channel_destroy(struct sr_channel *ch);
int sr_channel_get(struct sr_channel *ch, struct sr_cq **out);
int sr_cq_create(struct sr_ctx *ctx, int cqe, struct sr_channel *ch, struct sr_cq **out);
int sr_cq_destroy(struct sr_cq *cq);
int sr_cq_resize(struct sr_cq *cq, int cqe);
int sr_cq_arm(struct sr_cq *cq, int solicited_only);
int sr_async_event_get(struct sr_ctx *ctx, struct ibv_async_event *out);

/* rq.c */
int sr_srq_create(struct sr_pd *pd, struct ibv_srq_init_attr *attr, struct sr_srq **out);
int sr_srq_modify(struct sr_srq *srq, struct ibv_srq_attr *attr, int mask);
int sr_srq_query(struct sr_srq *srq, struct ibv_srq_attr *attr);
int sr_srq_destroy(struct sr_srq *srq);
int sr_srq_post(struct sr_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
bool sr_srq_take(struct sr_srq *srq, struct sr_rwqe *dst);

#endif /* SR_CORE_POST_H */
