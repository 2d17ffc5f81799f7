/* SPDX-License-Identifier: MIT */
/*
 * Entry points for softrdma's own librdmacm (version node SOFTRDMA_PRIVATE_1): not an API for
 * applications, and librdmacm reaches them through weak references so it does not depend on
 * them.
 */
#include <errno.h>
#include <string.h>

#include "verbs/verbs.h"

/* Adds n to the counter called `name` (src/core/stats.h) of ctx's soft NIC. */
void sr_priv_stat_add(struct ibv_context *ctx, const char *name, uint64_t n);
void sr_priv_stat_add(struct ibv_context *ctx, const char *name, uint64_t n)
{
	if (!ctx || !name)
		return;
	for (int k = 0; k < SR_STAT_MAX; k++) {
		if (!strcmp(sr_stat_name[k], name)) {
			sr_stat_add(&sr_ctx(ctx)->nic->stats, (enum sr_stat)k, n);
			return;
		}
	}
}

/* The largest packet payload this context's NIC offers a softrdma peer (0: none). */
uint32_t sr_priv_seg_offer(struct ibv_context *ctx);
uint32_t sr_priv_seg_offer(struct ibv_context *ctx)
{
	return ctx ? sr_ctx(ctx)->nic->seg_max : 0;
}

/* The large segment agreed with the peer for an RC QP not yet in RTR; 0 or -errno. */
int sr_priv_qp_set_seg(struct ibv_qp *qp, uint32_t bytes);
int sr_priv_qp_set_seg(struct ibv_qp *qp, uint32_t bytes)
{
	return qp ? sr_qp_set_seg(sr_qp(qp), bytes) : -EINVAL;
}
