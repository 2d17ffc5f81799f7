/* SPDX-License-Identifier: MIT */
/*
 * Internal to src/verbs: the exported functions turn the engine's 0/-errno into rdma-core's
 * conventions (int verbs return a positive errno; pointer verbs return NULL and set errno).
 */
#ifndef SR_VERBS_VERBS_H
#define SR_VERBS_VERBS_H

#include <errno.h>

#include "core/core.h"
#include "core/post.h"
#include "engine/engine.h"

static inline int sr_ret(int ret)
{
	return ret < 0 ? -ret : ret;
}

static inline void *sr_null(int ret)
{
	errno = ret < 0 ? -ret : ret;
	return NULL;
}

/* Context ops tables (context.c) and per-object op setup. */
void sr_cq_ex_init(struct sr_cq *cq);		/* cq.c */
void sr_qp_ex_init(struct sr_qp *qp, uint64_t send_ops);	/* qp_ex.c */
int sr_v_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sr_v_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int sr_v_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sr_v_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int sr_v_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
struct ibv_cq_ex *sr_v_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *sr_v_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
struct ibv_xrcd *sr_v_open_xrcd(struct ibv_context *c, struct ibv_xrcd_init_attr *attr);
int sr_v_close_xrcd(struct ibv_xrcd *xrcd);
struct ibv_srq *sr_v_create_srq_ex(struct ibv_context *c, struct ibv_srq_init_attr_ex *a);
int sr_v_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);
struct ibv_qp *sr_v_open_qp(struct ibv_context *c, struct ibv_qp_open_attr *a);
struct ibv_mw *sr_v_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int sr_v_dealloc_mw(struct ibv_mw *mw);
int sr_v_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b);

/* The device attributes, shared by ibv_query_device and query_device_ex. */
void sr_fill_device_attr(struct sr_ctx *ctx, struct ibv_device_attr *a);

#endif /* SR_VERBS_VERBS_H */
