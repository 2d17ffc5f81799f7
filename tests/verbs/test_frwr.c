/* SPDX-License-Identifier: MIT */
/*
 * Fast registration (include/softrdma/softrdma.h) between two QPs of one process:
 *  - softrdma_alloc_mr, softrdma_update_fast_reg_key, softrdma_map_mr_sg and its rules (page
 *    size, pages in order with no holes, max pages, EBUSY when every generation is in use);
 *  - a map of scattered pages (out of order in memory) registered by REG_MR (ibv_wr_* and
 *    ibv_post_send): remote WRITE and READ across page boundaries land in the right pages, and
 *    the key gathers locally too;
 *  - the seed-004 states: REG_MR only of a FREE map of that key; LOCAL_INV and a peer's SEND
 *    with invalidate end a generation (refused afterwards, nothing written); a READ posted
 *    before a LOCAL_INV of its sink (unfenced) still lands, through the map that was valid at
 *    its PSN, even when the next generation is already registered on other pages -- while a
 *    READ or SEND posted after the LOCAL_INV fails with IBV_WC_LOC_PROT_ERR.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <errno.h>
#include <softrdma/softrdma.h>

#define GUARD 0xee
#define PG 4096u
#define NPG 16u

static struct vu_dev dev;
static struct vu_buf lb;	/* the requester's ordinary memory */
static struct vu_buf pages;	/* NPG pages of unregistered memory the maps use */

#define WAIT_WC(cq, id, st, op) vu_expect_wc(cq, id, st, op, 5000, __LINE__)

static uint8_t *pg(unsigned i)
{
	return pages.p + (size_t)i * PG;
}

static const uint64_t ops_all = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
				IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_LOCAL_INV |
				IBV_QP_EX_WITH_SEND_WITH_INV;

static void make_pair(struct vu_pair *p)
{
	struct vu_qp_cfg q;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.send_ops_flags = ops_all;
	REQUIRE(vu_pair_create(&dev, &q, NULL, p) == 0);
}

/* Maps pages idx[0..n) (whole pages) under a new key of mr; returns the key. */
static uint32_t map_pages(struct ibv_mr *mr, const unsigned *idx, int n)
{
	struct ibv_sge sg[NPG];
	uint32_t key = softrdma_update_fast_reg_key(mr, (uint8_t)(ibv_inc_rkey(mr->rkey) & 0xff));

	for (int i = 0; i < n; i++) {
		sg[i].addr = (uintptr_t)pg(idx[i]);
		sg[i].length = PG;
		sg[i].lkey = 0;
	}
	CHECK_EQ(softrdma_map_mr_sg(mr, sg, n, PG), n);
	return key;
}

static int wr_reg(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr, uint32_t key,
		  unsigned access)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);

	ibv_wr_start(x);
	x->wr_id = wr_id;
	x->wr_flags = IBV_SEND_SIGNALED;
	softrdma_wr_reg_mr(x, mr, key, access);
	return ibv_wr_complete(x);
}

static int wr_local_inv(struct ibv_qp *qp, uint64_t wr_id, uint32_t key)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);

	ibv_wr_start(x);
	x->wr_id = wr_id;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(x, key);
	return ibv_wr_complete(x);
}

/* Expected contents of a byte range of the iova space of a map of pages idx[]. */
static void check_mapped(const unsigned *idx, uint64_t off, uint32_t len, uint32_t seed, int line)
{
	uint8_t *want = malloc(off + len);

	REQUIRE(want);
	vu_fill(want, off + len, seed);
	for (uint64_t i = off; i < off + len; i++) {
		uint8_t got = pg(idx[i / PG])[i % PG];

		if (got != want[i]) {
			SR_FAIL("line %d: iova offset %llu (page %u) is 0x%02x, expected 0x%02x", line,
				(unsigned long long)i, idx[i / PG], got, want[i]);
			break;
		}
	}
	free(want);
}

/* p[0, len) holds the vu_fill(seed) pattern from its offset off. */
static void check_pat(const uint8_t *p, uint64_t off, uint32_t len, uint32_t seed, int line)
{
	uint8_t *want = malloc(off + len);

	REQUIRE(want);
	vu_fill(want, off + len, seed);
	if (memcmp(p, want + off, len))
		SR_FAIL("line %d: %u bytes differ from pattern %u at offset %llu", line, len, seed,
			(unsigned long long)off);
	free(want);
}

/* ---- allocation and mapping rules ------------------------------------------------------------ */
static void test_alloc_and_map(void)
{
	struct ibv_mr *mr;
	struct ibv_sge sg[4];
	uint32_t key;

	errno = 0;
	CHECK(softrdma_alloc_mr(dev.pd, 0) == NULL);
	CHECK_EQ(errno, EINVAL);
	mr = softrdma_alloc_mr(dev.pd, 4);
	REQUIRE(mr);
	CHECK_EQ(mr->lkey, mr->rkey);
	CHECK(mr->addr == NULL && mr->length == 0);
	CHECK(mr->pd == dev.pd);
	/* Not an ordinary MR: rereg refuses it. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE));
	key = softrdma_update_fast_reg_key(mr, 0x5a);
	CHECK_EQ(key, (mr->lkey & ~0xffu) | 0x5a);
	CHECK_EQ(mr->rkey, key);
	CHECK_EQ(mr->lkey, key);

	/* A scatter list whose first element starts mid-page and whose last ends mid-page. */
	sg[0].addr = (uintptr_t)pg(5) + 1000;
	sg[0].length = PG - 1000;
	sg[1].addr = (uintptr_t)pg(2);
	sg[1].length = PG;
	sg[2].addr = (uintptr_t)pg(7);
	sg[2].length = 100;
	CHECK_EQ(softrdma_map_mr_sg(mr, sg, 3, PG), 3);
	CHECK(mr->addr == (void *)(uintptr_t)sg[0].addr);
	CHECK_EQ(mr->length, PG - 1000 + PG + 100);
	/* A hole: the second element does not start on a page boundary: one element mapped. */
	softrdma_update_fast_reg_key(mr, 0x5b);
	sg[1].addr = (uintptr_t)pg(2) + 8;
	CHECK_EQ(softrdma_map_mr_sg(mr, sg, 3, PG), 1);
	/* Too many pages for the MR (4): mapping stops before the element that does not fit. */
	softrdma_update_fast_reg_key(mr, 0x5c);
	sg[0].addr = (uintptr_t)pg(0);
	sg[0].length = 3 * PG;
	sg[1].addr = (uintptr_t)pg(8);
	sg[1].length = 2 * PG;
	CHECK_EQ(softrdma_map_mr_sg(mr, sg, 2, PG), 1);
	/* Bad page sizes, nothing mapped. */
	errno = 0;
	CHECK_EQ(softrdma_map_mr_sg(mr, sg, 1, 1000), -1);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	CHECK_EQ(softrdma_map_mr_sg(mr, sg, 1, 2048), -1);
	CHECK_EQ(errno, EINVAL);
	sg[0].length = 0;
	CHECK_EQ(softrdma_map_mr_sg(mr, sg, 1, PG), -1);
	/* Three generations mapped (0x5a, 0x5b, 0x5c): one more fits (frmr_maps is 4), then
	 * every slot is in use. */
	sg[0].length = PG;
	softrdma_update_fast_reg_key(mr, 0x5d);
	CHECK_EQ(softrdma_map_mr_sg(mr, sg, 1, PG), 1);
	softrdma_update_fast_reg_key(mr, 0x5e);
	errno = 0;
	CHECK_EQ(softrdma_map_mr_sg(mr, sg, 1, PG), -1);
	CHECK_EQ(errno, EBUSY);
	/* Re-mapping a FREE generation replaces it. */
	softrdma_update_fast_reg_key(mr, 0x5d);
	CHECK_EQ(softrdma_map_mr_sg(mr, sg, 1, PG), 1);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
}

/* ---- REG_MR, remote and local use, invalidation ---------------------------------------------- */
static void test_register_and_use(void)
{
	static const unsigned idx[3] = { 5, 2, 7 };	/* scattered, out of order */
	struct vu_pair p;
	struct ibv_mr *mr = softrdma_alloc_mr(dev.pd, 8);
	const unsigned rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	uint64_t iova;
	uint32_t key;

	REQUIRE(mr);
	memset(pages.p, GUARD, pages.len);
	make_pair(&p);
	key = map_pages(mr, idx, 3);
	iova = (uintptr_t)mr->addr;
	CHECK_EQ(iova, (uintptr_t)pg(5));
	/* FREE: nothing passes yet. */
	CHECK_EQ(vu_post_rdma(p.qp[0], 1, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 64, iova, key,
			      IBV_SEND_SIGNALED), 0);
	WAIT_WC(p.scq[0], 1, IBV_WC_REM_ACCESS_ERR, -1);
	CHECK_EQ(vu_check_byte(pages.p, pages.len, GUARD), -1);
	vu_pair_destroy(&p);

	/* Registered by side 1: a WRITE across both page boundaries lands in pages 5, 2, 7. */
	make_pair(&p);
	CHECK_EQ(wr_reg(p.qp[1], 2, mr, key, rw), 0);
	WAIT_WC(p.scq[1], 2, IBV_WC_SUCCESS, SOFTRDMA_WC_REG_MR);
	vu_fill(lb.p, 3 * PG, 31);
	CHECK_EQ(vu_post_rdma(p.qp[0], 3, IBV_WR_RDMA_WRITE, lb.mr, lb.p + 1000, 10000,
			      iova + 1000, key, IBV_SEND_SIGNALED), 0);
	WAIT_WC(p.scq[0], 3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	check_mapped(idx, 1000, 10000, 31, __LINE__);
	CHECK_EQ(vu_check_byte(pg(5), 1000, GUARD), -1);
	CHECK_EQ(vu_check_byte(pg(0), 2 * PG, GUARD), -1);	/* pages 0, 1 */
	CHECK_EQ(vu_check_byte(pg(3), 2 * PG, GUARD), -1);	/* pages 3, 4 */
	/* READ it back across the boundaries. */
	memset(lb.p, 0, 3 * PG);
	CHECK_EQ(vu_post_rdma(p.qp[0], 4, IBV_WR_RDMA_READ, lb.mr, lb.p + 1000, 10000, iova + 1000,
			      key, IBV_SEND_SIGNALED), 0);
	WAIT_WC(p.scq[0], 4, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	check_pat(lb.p + 1000, 1000, 10000, 31, __LINE__);
	/* Out of the map: refused. */
	{
		struct vu_pair q;

		make_pair(&q);
		CHECK_EQ(vu_post_rdma(q.qp[0], 5, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 64,
				      iova + 3 * PG - 32, key, IBV_SEND_SIGNALED), 0);
		WAIT_WC(q.scq[0], 5, IBV_WC_REM_ACCESS_ERR, -1);
		vu_pair_destroy(&q);
	}
	/* The key gathers locally too: side 1 SENDs 9000 bytes from it. */
	{
		uint8_t *rx = lb.p + 4 * PG;

		CHECK_EQ(vu_post_recv(p.qp[0], 6, lb.mr, rx, 3 * PG), 0);
		struct ibv_sge sge = { .addr = iova, .length = 9000, .lkey = key };
		struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr *bad;

		CHECK_EQ(ibv_post_send(p.qp[1], &wr, &bad), 0);
		WAIT_WC(p.scq[1], 7, IBV_WC_SUCCESS, IBV_WC_SEND);
		WAIT_WC(p.rcq[0], 6, IBV_WC_SUCCESS, IBV_WC_RECV);
		CHECK_EQ(vu_check_byte(rx, 1000, GUARD), -1);	/* the map's first 1000 bytes */
		check_pat(rx + 1000, 1000, 8000, 31, __LINE__);
	}
	/* REG_MR again of the same (VALID) key: refused. */
	{
		struct vu_pair q;

		make_pair(&q);
		CHECK_EQ(wr_reg(q.qp[1], 8, mr, key, rw), 0);
		WAIT_WC(q.scq[1], 8, IBV_WC_LOC_QP_OP_ERR, -1);
		vu_pair_destroy(&q);
	}
	/* LOCAL_INV: the key is dead, nothing lands. */
	CHECK_EQ(wr_local_inv(p.qp[1], 9, key), 0);
	WAIT_WC(p.scq[1], 9, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	memset(pages.p, GUARD, pages.len);
	CHECK_EQ(vu_post_rdma(p.qp[0], 10, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 64, iova, key,
			      IBV_SEND_SIGNALED), 0);
	WAIT_WC(p.scq[0], 10, IBV_WC_REM_ACCESS_ERR, -1);
	CHECK_EQ(vu_check_byte(pages.p, pages.len, GUARD), -1);
	vu_pair_destroy(&p);

	/* Rights and arguments of REG_MR. */
	make_pair(&p);
	key = map_pages(mr, idx, 1);
	CHECK_EQ(wr_reg(p.qp[1], 11, mr, key, IBV_ACCESS_REMOTE_WRITE), EINVAL);
	CHECK_EQ(wr_reg(p.qp[1], 12, mr, key, IBV_ACCESS_LOCAL_WRITE |
						SOFTRDMA_ACCESS_FLUSH_PERSISTENT), EOPNOTSUPP);
	CHECK_EQ(wr_reg(p.qp[1], 13, mr, key + 0x100, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	CHECK_EQ(wr_reg(p.qp[1], 14, lb.mr, lb.mr->lkey, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	/* A REG_MR of a key with no map: refused at execution. */
	CHECK_EQ(wr_reg(p.qp[1], 15, mr, ibv_inc_rkey(key), IBV_ACCESS_LOCAL_WRITE), 0);
	WAIT_WC(p.scq[1], 15, IBV_WC_LOC_QP_OP_ERR, -1);
	vu_pair_destroy(&p);

	/* ibv_post_send with softrdma_wr_set_reg_mr, and a peer's SEND with invalidate. */
	make_pair(&p);
	{
		struct ibv_send_wr wr, *bad;
		struct ibv_wc wc;

		memset(&wr, 0, sizeof(wr));
		softrdma_wr_set_reg_mr(&wr, mr, key, rw);
		wr.wr_id = 16;
		wr.send_flags = IBV_SEND_SIGNALED;
		CHECK_EQ(ibv_post_send(p.qp[1], &wr, &bad), 0);
		WAIT_WC(p.scq[1], 16, IBV_WC_SUCCESS, SOFTRDMA_WC_REG_MR);
		CHECK_EQ(vu_post_recv(p.qp[1], 17, lb.mr, lb.p + 8 * PG, 64), 0);
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 18;
		wr.opcode = IBV_WR_SEND_WITH_INV;
		wr.invalidate_rkey = key;
		wr.send_flags = IBV_SEND_SIGNALED;
		CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), 0);
		WAIT_WC(p.scq[0], 18, IBV_WC_SUCCESS, IBV_WC_SEND);
		wc = WAIT_WC(p.rcq[1], 17, IBV_WC_SUCCESS, IBV_WC_RECV);
		CHECK(wc.wc_flags & IBV_WC_WITH_INV);
		CHECK_EQ(wc.invalidated_rkey, key);
		CHECK_EQ(vu_post_rdma(p.qp[0], 19, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 64, iova, key,
				      IBV_SEND_SIGNALED), 0);
		WAIT_WC(p.scq[0], 19, IBV_WC_REM_ACCESS_ERR, -1);
	}
	vu_pair_destroy(&p);
	/* FLUSH is not a work request of ibv_post_send. */
	make_pair(&p);
	{
		struct ibv_send_wr wr = { .wr_id = 20, .opcode = SOFTRDMA_WR_FLUSH }, *bad;

		CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), EOPNOTSUPP);
	}
	vu_pair_destroy(&p);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
}

/*
 * The seed's case, made deterministic: a READ into an FRMR sink, then -- unfenced -- the
 * LOCAL_INV of that sink and the REG_MR of the next generation on other pages. The LOCAL_INV
 * executes as soon as the READ request is sent, so every response arrives after it: each is
 * judged against the map that was valid at the READ's PSN, and lands in the old pages.
 */
static void test_judged_at_psn(void)
{
	static const unsigned old_idx[4] = { 9, 1, 12, 4 }, new_idx[4] = { 0, 3, 6, 8 };
	struct vu_pair p;
	struct ibv_mr *mr = softrdma_alloc_mr(dev.pd, 8);
	const unsigned lw = IBV_ACCESS_LOCAL_WRITE;
	uint32_t k1, k2;
	uint64_t iova1;
	int64_t replays0;

	REQUIRE(mr);
	memset(pages.p, GUARD, pages.len);
	make_pair(&p);
	k1 = map_pages(mr, old_idx, 4);
	iova1 = (uintptr_t)mr->addr;
	k2 = map_pages(mr, new_idx, 4);
	vu_fill(lb.p, 4 * PG, 41);	/* the READ's source, on side 1 */
	replays0 = vu_stat("map_replays");
	{
		struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.qp[0]);

		ibv_wr_start(x);
		x->wr_flags = IBV_SEND_SIGNALED;
		x->wr_id = 1;
		softrdma_wr_reg_mr(x, mr, k1, lw);
		x->wr_id = 2;
		ibv_wr_rdma_read(x, lb.mr->rkey, (uintptr_t)lb.p);
		ibv_wr_set_sge(x, k1, iova1, 4 * PG);
		x->wr_id = 3;
		ibv_wr_local_inv(x, k1);
		x->wr_id = 4;
		softrdma_wr_reg_mr(x, mr, k2, lw);
		CHECK_EQ(ibv_wr_complete(x), 0);
	}
	WAIT_WC(p.scq[0], 1, IBV_WC_SUCCESS, SOFTRDMA_WC_REG_MR);
	WAIT_WC(p.scq[0], 2, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	WAIT_WC(p.scq[0], 3, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	WAIT_WC(p.scq[0], 4, IBV_WC_SUCCESS, SOFTRDMA_WC_REG_MR);
	check_mapped(old_idx, 0, 4 * PG, 41, __LINE__);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(vu_check_byte(pg(new_idx[i]), PG, GUARD), -1);
	CHECK(vu_stat("map_replays") - replays0 >= 4);	/* every response packet (MTU 1024) */

	/* After the LOCAL_INV: the old key is dead for new work. */
	{
		struct ibv_sge sge = { .addr = iova1, .length = 64, .lkey = k1 };
		struct ibv_send_wr wr = { .wr_id = 6, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_READ,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;

		wr.wr.rdma.remote_addr = (uintptr_t)lb.p;
		wr.wr.rdma.rkey = lb.mr->rkey;
		CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), 0);
		WAIT_WC(p.scq[0], 6, IBV_WC_LOC_PROT_ERR, -1);
	}
	vu_pair_destroy(&p);
	/* The new generation works; a SEND from the dead one fails locally. */
	make_pair(&p);
	{
		struct ibv_sge sge = { .addr = (uintptr_t)pg(new_idx[0]), .length = 64, .lkey = k2 };
		struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;

		CHECK_EQ(vu_post_recv(p.qp[1], 8, lb.mr, lb.p, 64), 0);
		CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), 0);
		WAIT_WC(p.scq[0], 7, IBV_WC_SUCCESS, IBV_WC_SEND);
		WAIT_WC(p.rcq[1], 8, IBV_WC_SUCCESS, IBV_WC_RECV);
		sge.lkey = k1;
		sge.addr = iova1;
		wr.wr_id = 9;
		CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), 0);
		WAIT_WC(p.scq[0], 9, IBV_WC_LOC_PROT_ERR, -1);
	}
	vu_pair_destroy(&p);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
}

int main(void)
{
	sr_test_timeout(120);
	/* Retransmissions and replays judged per key generation happen on the wire: no
	 * same-host direct path (docs/direct.md). */
	setenv("SOFTRDMA_DIRECT", "0", 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 16 * PG, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &pages, NPG * PG, 0) == 0);
	test_alloc_and_map();
	test_register_and_use();
	test_judged_at_psn();
	vu_buf_free(&lb);
	vu_buf_free(&pages);
	vu_close(&dev);
	return sr_test_done("test_frwr");
}
