/* SPDX-License-Identifier: MIT */
/*
 * softrdma's own verbs: what rdma-core 44's <infiniband/verbs.h> (Debian 12) cannot express.
 *
 *  - Fast registration (the kernel's ib_alloc_mr / ib_map_mr_sg / IB_WR_REG_MR, which user
 *    space verbs never had): an MR of up to N pages and no memory, a page list mapped under a
 *    new key, a REG_MR work request that makes that key valid, LOCAL_INV or a peer's SEND with
 *    invalidate that ends it. Each key generation keeps its own map (docs/memory.md), so a
 *    retransmission after an invalidation or a re-registration is judged against the map that
 *    was valid when it was first sent.
 *  - FLUSH (IBA memory placement extensions; newer rdma-core's ibv_wr_flush): make what was
 *    written to a remote MR globally visible, or durable, and the MR access flags it needs.
 *  - The constants newer rdma-core gives these (same values where it has them).
 *
 * ATOMIC WRITE needs nothing here: rdma-core 44 has IBV_WR_ATOMIC_WRITE and
 * ibv_wr_atomic_write(). Memory windows are plain verbs (ibv_alloc_mw, ibv_bind_mw,
 * IBV_WR_BIND_MW, IBV_WR_LOCAL_INV, IBV_WR_SEND_WITH_INV).
 *
 * The functions are exported by softrdma's libibverbs.so.1 under the version node SOFTRDMA_1.0
 * (rdma-core's library does not have them): link with -L<softrdma>/lib -libverbs, or look them
 * up with dlsym() when the same binary must also run on rdma-core. A device is softrdma's when
 * ibv_query_device() reports vendor_id SOFTRDMA_VENDOR_ID. Errors follow rdma-core: pointer
 * calls return NULL and set errno, int calls return -1 and set errno (softrdma_map_mr_sg) or a
 * positive errno; ibv_wr_* calls report theirs at ibv_wr_complete(). What softrdma does not
 * implement is EOPNOTSUPP.
 *
 * The whole story, with examples: docs/memory.md.
 */
#ifndef SOFTRDMA_SOFTRDMA_H
#define SOFTRDMA_SOFTRDMA_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SOFTRDMA_VENDOR_ID 0x534452	/* ibv_device_attr.vendor_id of a softrdma device */

/* ---- MR access flags (ibv_reg_mr, ibv_modify_qp's qp_access_flags, softrdma_wr_reg_mr) ------
 * Newer rdma-core's IBV_ACCESS_FLUSH_GLOBAL / _PERSISTENT. A FLUSH of a placement type needs
 * the flag on the target MR and on the target QP (as rxe). PERSISTENT is granted only over a
 * shared file mapping (mmap MAP_SHARED of a file): elsewhere ibv_reg_mr fails with EINVAL, since
 * nothing could make the data durable. */
#define SOFTRDMA_ACCESS_FLUSH_GLOBAL (1 << 8)
#define SOFTRDMA_ACCESS_FLUSH_PERSISTENT (1 << 9)

/* ---- ibv_query_device_ex: device_cap_flags_ex bits (newer rdma-core's names in comments) ---- */
#define SOFTRDMA_DEVICE_FLUSH_GLOBAL (1ULL << 38)	/* IBV_DEVICE_FLUSH_GLOBAL */
#define SOFTRDMA_DEVICE_FLUSH_PERSISTENT (1ULL << 39)	/* IBV_DEVICE_FLUSH_PERSISTENT */
#define SOFTRDMA_DEVICE_ATOMIC_WRITE (1ULL << 40)	/* IBV_DEVICE_ATOMIC_WRITE */

/* ---- opcodes --------------------------------------------------------------------------------
 * FLUSH takes the values newer rdma-core gives IBV_WR_FLUSH / IBV_WC_FLUSH /
 * IBV_QP_EX_WITH_FLUSH. REG_MR takes the driver-private opcode, as mlx5dv's own work requests
 * do: its completion has opcode SOFTRDMA_WC_REG_MR. */
#define SOFTRDMA_WR_FLUSH ((enum ibv_wr_opcode)14)
#define SOFTRDMA_WC_FLUSH ((enum ibv_wc_opcode)8)
#define SOFTRDMA_QP_EX_WITH_FLUSH (1ULL << 11)
#define SOFTRDMA_WR_REG_MR IBV_WR_DRIVER1
#define SOFTRDMA_WC_REG_MR IBV_WC_DRIVER1

/* FLUSH placement types (bits: both may be asked at once) and selectivity levels. */
enum softrdma_placement_type {
	SOFTRDMA_FLUSH_GLOBAL = 1U << 0,	/* visible to every reader of the target memory */
	SOFTRDMA_FLUSH_PERSISTENT = 1U << 1,	/* durable: msync(MS_SYNC) of a file-backed MR */
};
enum softrdma_selectivity_level {
	SOFTRDMA_FLUSH_RANGE = 0,		/* [remote_addr, remote_addr + len) */
	SOFTRDMA_FLUSH_MR,			/* all of the memory the rkey names */
};

/* ---- fast registration ----------------------------------------------------------------------
 * softrdma_alloc_mr: an MR of the PD able to map up to max_num_pages pages, with no memory yet
 * (addr NULL, length 0). lkey == rkey. Free it with ibv_dereg_mr.
 *
 * softrdma_update_fast_reg_key: sets the 8-bit key (tag) of the MR's lkey and rkey, as the
 * kernel's ib_update_fast_reg_key; returns the new key. The usual next key is
 * ibv_inc_rkey(mr->rkey) & 0xff.
 *
 * softrdma_map_mr_sg: builds the page list of a new map for the key the MR carries now (its
 * state is FREE: nothing can use it until a REG_MR names that key). sg is a scatter list of this
 * process's memory (lkey ignored); as with the kernel's ib_map_mr_sg, the mapped range has no
 * holes: every element but the first starts on a page boundary, every element but the last ends
 * on one. page_size is a power of two, 4 KiB to 1 GiB. The map's iova (the address peers and
 * SGEs use) is sg[0].addr, its length the sum of the lengths mapped; mr->addr and mr->length
 * show them. Returns how many elements were mapped (mapping stops at the first one that breaks
 * the rule or exceeds max_num_pages), or -1 with errno: EINVAL (nothing mapped, bad page size),
 * EBUSY (every map slot is in use: a VALID map of this key, or parameter frmr_maps generations
 * alive; complete a LOCAL_INV, or pick a new key), ENOMEM.
 *
 * Registration is a work request, executed in send queue order: softrdma_wr_reg_mr() (ibv_wr_*
 * API) or ibv_post_send() of a WR filled by softrdma_wr_set_reg_mr(). key must carry the MR's
 * index (only the tag differs) and name a FREE map; access: IBV_ACCESS_LOCAL_WRITE,
 * _REMOTE_READ, _REMOTE_WRITE, _REMOTE_ATOMIC, SOFTRDMA_ACCESS_FLUSH_GLOBAL (remote write and
 * atomic need local write). Completes with opcode SOFTRDMA_WC_REG_MR; a REG_MR the map does not
 * allow completes with IBV_WC_LOC_QP_OP_ERR. Invalidation: IBV_WR_LOCAL_INV
 * (ibv_wr_local_inv) with the key, or the peer's IBV_WR_SEND_WITH_INV.
 */
struct ibv_mr *softrdma_alloc_mr(struct ibv_pd *pd, uint32_t max_num_pages);
uint32_t softrdma_update_fast_reg_key(struct ibv_mr *mr, uint8_t key);
int softrdma_map_mr_sg(struct ibv_mr *mr, const struct ibv_sge *sg, int sg_nents,
		       unsigned int page_size);
void softrdma_wr_reg_mr(struct ibv_qp_ex *qp, struct ibv_mr *mr, uint32_t key,
			unsigned int access);

/* A REG_MR for ibv_post_send: ibv_send_wr has no fields of its own for it, so it travels in
 * bind_mw (mw NULL, rkey = the key, bind_info.mr = the MR, bind_info.mw_access_flags = the
 * access). Set wr_id, send_flags, next yourself. */
static inline void softrdma_wr_set_reg_mr(struct ibv_send_wr *wr, struct ibv_mr *mr, uint32_t key,
					  unsigned int access)
{
	wr->opcode = SOFTRDMA_WR_REG_MR;
	wr->sg_list = NULL;
	wr->num_sge = 0;
	wr->bind_mw.mw = NULL;
	wr->bind_mw.rkey = key;
	wr->bind_mw.bind_info.mr = mr;
	wr->bind_mw.bind_info.addr = 0;
	wr->bind_mw.bind_info.length = 0;
	wr->bind_mw.bind_info.mw_access_flags = access;
}

/* ---- FLUSH ----------------------------------------------------------------------------------
 * softrdma_wr_flush: newer rdma-core's ibv_wr_flush (same arguments, same meaning), for a QP
 * created with send_ops_flags (ibv_qp_to_qp_ex). RC only. Everything the QP wrote before it
 * (in send queue order) is covered: the FLUSH completes (opcode SOFTRDMA_WC_FLUSH) once the
 * target has made it globally visible, or durable: for SOFTRDMA_FLUSH_PERSISTENT the target
 * msyncs the range of its file-backed MR (MS_SYNC) before it answers, so the data survives the
 * target process being killed right after. level SOFTRDMA_FLUSH_MR ignores remote_addr and len.
 * Rights: the target MR and QP need SOFTRDMA_ACCESS_FLUSH_GLOBAL / _PERSISTENT for each
 * placement type asked (else IBV_WC_REM_ACCESS_ERR / IBV_WC_REM_INV_REQ_ERR). Counts against
 * max_rd_atomic, as a READ. Not available through ibv_post_send (EOPNOTSUPP).
 */
void softrdma_wr_flush(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, size_t len,
		       uint8_t type, uint8_t level);

#ifdef __cplusplus
}
#endif

#endif /* SOFTRDMA_SOFTRDMA_H */
