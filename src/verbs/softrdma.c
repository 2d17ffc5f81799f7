/* SPDX-License-Identifier: MIT */
/*
 * softrdma's own verbs (include/softrdma/softrdma.h), exported under version node SOFTRDMA_1.0:
 * fast registration. (softrdma_wr_reg_mr and softrdma_wr_flush live with the other ibv_wr_*
 * operations, in qp_ex.c.)
 */
#include <softrdma/softrdma.h>

#include "verbs/verbs.h"

/* The constants the engine uses must be the ones the header publishes. */
_Static_assert(SOFTRDMA_ACCESS_FLUSH_GLOBAL == SR_ACCESS_FLUSH_GLOBAL, "flush access");
_Static_assert(SOFTRDMA_ACCESS_FLUSH_PERSISTENT == SR_ACCESS_FLUSH_PERSISTENT, "flush access");
_Static_assert(SOFTRDMA_FLUSH_GLOBAL == SR_FLUSH_GLOBAL, "placement type");
_Static_assert(SOFTRDMA_FLUSH_PERSISTENT == SR_FLUSH_PERSISTENT, "placement type");
_Static_assert(SOFTRDMA_FLUSH_RANGE == SR_FLUSH_RANGE && SOFTRDMA_FLUSH_MR == SR_FLUSH_MR, "level");
_Static_assert(SOFTRDMA_WR_FLUSH == SR_WR_FLUSH && SOFTRDMA_WC_FLUSH == SR_WC_FLUSH, "flush op");
_Static_assert(SOFTRDMA_WR_REG_MR == SR_WR_REG_MR && SOFTRDMA_WC_REG_MR == SR_WC_REG_MR, "reg op");
_Static_assert(SOFTRDMA_VENDOR_ID == SR_VENDOR_ID, "vendor id");

struct ibv_mr *softrdma_alloc_mr(struct ibv_pd *pd, uint32_t max_num_pages)
{
	struct sr_mr *mr;
	int ret;

	if (!pd)
		return sr_null(-EINVAL);
	ret = sr_frmr_alloc(sr_pd(pd), max_num_pages, &mr);
	return ret ? sr_null(ret) : &mr->ibmr;
}

uint32_t softrdma_update_fast_reg_key(struct ibv_mr *mr, uint8_t key)
{
	sr_frmr_update_key(sr_mr(mr), key);
	return mr->rkey;
}

int softrdma_map_mr_sg(struct ibv_mr *mr, const struct ibv_sge *sg, int sg_nents,
		       unsigned int page_size)
{
	int ret = mr ? sr_frmr_map(sr_mr(mr), sg, sg_nents, page_size) : -EINVAL;

	if (ret < 0) {
		errno = -ret;
		return -1;
	}
	return ret;
}
