/* SPDX-License-Identifier: MIT */
/* The objects' entry points used by the verbs face (src/verbs) and the engine. All return
 * 0/-errno. Posting is the engine's: engine/engine.h. */
#ifndef SR_CORE_POST_H
#define SR_CORE_POST_H

#include "core/core.h"

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

/* cq.c */
int sr_channel_create(struct sr_ctx *ctx, struct sr_channel **out);
int sr_channel_destroy(struct sr_channel *ch);
int sr_channel_get(struct sr_channel *ch, struct sr_cq **out);
bool sr_channel_watches_rx(struct sr_channel *ch);
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
