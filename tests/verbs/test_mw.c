/* SPDX-License-Identifier: MIT */
/*
 * Memory windows through the public verbs, between two QPs of one process (side 0 the
 * requester, side 1 owns the target memory and its windows):
 *  - the device reports windows of both types, and max_mw;
 *  - type 1: ibv_bind_mw gives the window the next key tag (ibv_inc_rkey); remote access
 *    through it is bounded by the window's range and rights, not the MR's; the old key, an
 *    unbound window and a window of another PD fail with IBV_WC_REM_ACCESS_ERR and nothing is
 *    written; an MR without IBV_ACCESS_MW_BIND refuses the bind (IBV_WC_MW_BIND_ERR); an MR
 *    with a bound window cannot be deregistered;
 *  - type 2: IBV_WR_BIND_MW (ibv_post_send and ibv_wr_bind_mw) binds it to the posting QP only:
 *    another QP of the PD cannot use it; a second bind while bound is refused; LOCAL_INV and a
 *    peer's SEND with invalidate return it to Free -- the receiver's completion carries
 *    IBV_WC_WITH_INV and the key -- and a remote write through the invalidated window fails
 *    with IBV_WC_REM_ACCESS_ERR and writes nothing; a new key brings it back;
 *  - a SEND with invalidate of a key that cannot be invalidated (an ordinary MR) fails both
 *    ends with IBV_WC_REM_INV_REQ_ERR.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <errno.h>

#define GUARD 0xee
#define BUFSZ (64u << 10)
#define WIN_OFF 8192u		/* the window: [rb + WIN_OFF, + WIN_LEN) */
#define WIN_LEN 8192u

static struct vu_dev dev;
static struct vu_buf lb, rb;	/* rb: registered with MW_BIND and every right */

#define WAIT_WC(cq, id, st, op) vu_expect_wc(cq, id, st, op, 5000, __LINE__)

static void make_pair(struct vu_pair *p, uint64_t send_ops)
{
	struct vu_qp_cfg q;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.send_ops_flags = send_ops;
	REQUIRE(vu_pair_create(&dev, &q, NULL, p) == 0);
}

static int post_bind2(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mw *mw, uint32_t rkey,
		      struct ibv_mr *mr, uint64_t addr, uint64_t len, unsigned access)
{
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = access;
	return ibv_post_send(qp, &wr, &bad);
}

static int post_inv(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, uint32_t rkey,
		    struct ibv_mr *mr, void *addr, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = mr ? mr->lkey : 0 };
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.invalidate_rkey = rkey;
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	return ibv_post_send(qp, &wr, &bad);
}

/* A remote WRITE of 64 bytes at va through rkey from a fresh pair's side 0 fails with a
 * remote access error and writes nothing. */
#define EXPECT_REFUSED(p, va, rkey) expect_refused(p, va, rkey, __LINE__)
static void expect_refused(struct vu_pair *p, uint8_t *va, uint32_t rkey, int line)
{
	uint8_t before[64];

	memcpy(before, va, sizeof(before));
	vu_fill(lb.p, 64, 99);
	CHECK_EQ(vu_post_rdma(p->qp[0], 900, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 64, (uintptr_t)va,
			      rkey, IBV_SEND_SIGNALED), 0);
	vu_expect_wc(p->scq[0], 900, IBV_WC_REM_ACCESS_ERR, -1, 5000, line);
	if (memcmp(before, va, sizeof(before)))
		SR_FAIL("line %d: a refused WRITE changed the target", line);
}

/* ---- capabilities -------------------------------------------------------------------------- */
static void test_caps(void)
{
	struct ibv_device_attr a;
	struct ibv_device_attr_ex ax;

	CHECK_EQ(ibv_query_device(dev.ctx, &a), 0);
	CHECK(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	CHECK(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A);
	CHECK(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
	CHECK(a.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS);
	CHECK(a.max_mw > 0);
	CHECK_EQ(ibv_query_device_ex(dev.ctx, NULL, &ax), 0);
	CHECK(ax.device_cap_flags_ex & IBV_DEVICE_MEM_WINDOW);
	CHECK_EQ(ax.orig_attr.max_mw, a.max_mw);
}

static void test_alloc(void)
{
	struct ibv_mw *m1 = ibv_alloc_mw(dev.pd, IBV_MW_TYPE_1);
	struct ibv_mw *m2 = ibv_alloc_mw(dev.pd, IBV_MW_TYPE_2);

	REQUIRE(m1 && m2);
	CHECK_EQ(m1->type, IBV_MW_TYPE_1);
	CHECK_EQ(m2->type, IBV_MW_TYPE_2);
	CHECK(m1->pd == dev.pd && m1->context == dev.ctx);
	CHECK(m1->rkey >> 8 != 0 && m1->rkey >> 8 != m2->rkey >> 8);
	errno = 0;
	CHECK(ibv_alloc_mw(dev.pd, (enum ibv_mw_type)3) == NULL);
	CHECK_EQ(errno, EINVAL);
	/* ibv_inc_rkey: the 8-bit tag advances, wrapping, and the index stays. */
	CHECK_EQ(ibv_inc_rkey(0x123456ff), 0x12345600);
	CHECK_EQ(ibv_inc_rkey(0x12345601), 0x12345602);
	/* A PD with windows is in use. */
	CHECK_EQ(ibv_dealloc_pd(dev.pd), EBUSY);
	CHECK_EQ(ibv_dealloc_mw(m1), 0);
	CHECK_EQ(ibv_dealloc_mw(m2), 0);
}

/* ---- type 1 ---------------------------------------------------------------------------------- */
static int bind1(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t wr_id, struct ibv_mr *mr,
		 uint64_t addr, uint64_t len, unsigned access)
{
	struct ibv_mw_bind b = {
		.wr_id = wr_id,
		.send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = addr, .length = len, .mw_access_flags = access },
	};

	return ibv_bind_mw(qp, mw, &b);
}

static void test_type1(void)
{
	struct vu_pair p;
	struct ibv_mw *mw = ibv_alloc_mw(dev.pd, IBV_MW_TYPE_1);
	uint8_t *win = rb.p + WIN_OFF;
	uint32_t k0, k1;

	REQUIRE(mw);
	make_pair(&p, 0);
	memset(rb.p, GUARD, rb.len);
	k0 = mw->rkey;
	/* Never bound: no access. */
	EXPECT_REFUSED(&p, win, k0);
	vu_pair_destroy(&p);

	make_pair(&p, 0);
	CHECK_EQ(bind1(p.qp[1], mw, 1, rb.mr, (uintptr_t)win, WIN_LEN,
		       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ), 0);
	k1 = mw->rkey;
	CHECK_EQ(k1, ibv_inc_rkey(k0));	/* ibv_bind_mw takes the next tag */
	WAIT_WC(p.scq[1], 1, IBV_WC_SUCCESS, IBV_WC_BIND_MW);

	/* Inside the window: lands. */
	vu_fill(lb.p, 3000, 7);
	CHECK_EQ(vu_post_rdma(p.qp[0], 2, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 3000,
			      (uintptr_t)win + 100, k1, IBV_SEND_SIGNALED), 0);
	WAIT_WC(p.scq[0], 2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(vu_check(win + 100, 3000, 7), -1);
	CHECK_EQ(vu_check_byte(win, 100, GUARD), -1);
	/* READ back through the window. */
	memset(lb.p, 0, 3000);
	CHECK_EQ(vu_post_rdma(p.qp[0], 3, IBV_WR_RDMA_READ, lb.mr, lb.p, 3000,
			      (uintptr_t)win + 100, k1, IBV_SEND_SIGNALED), 0);
	WAIT_WC(p.scq[0], 3, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	CHECK_EQ(vu_check(lb.p, 3000, 7), -1);
	/* Through any other QP of the PD too (type 1). */
	{
		struct vu_pair q;

		make_pair(&q, 0);
		vu_fill(lb.p, 64, 8);
		CHECK_EQ(vu_post_rdma(q.qp[0], 4, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 64,
				      (uintptr_t)win, k1, IBV_SEND_SIGNALED), 0);
		WAIT_WC(q.scq[0], 4, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
		CHECK_EQ(vu_check(win, 64, 8), -1);
		vu_pair_destroy(&q);
	}
	/* The window is bound: its MR stays. */
	CHECK_EQ(ibv_dereg_mr(rb.mr), EBUSY);
	vu_pair_destroy(&p);

	/* Past the window's end (inside the MR): refused. */
	make_pair(&p, 0);
	EXPECT_REFUSED(&p, win + WIN_LEN - 32, k1);
	vu_pair_destroy(&p);
	make_pair(&p, 0);
	EXPECT_REFUSED(&p, win - 64, k1);
	vu_pair_destroy(&p);
	/* The MR's rkey still reaches the whole MR; the window's key does not grant atomics
	 * although the MR does: the window's rights, not the MR's. */
	make_pair(&p, 0);
	CHECK_EQ(vu_post_atomic(p.qp[0], 5, IBV_WR_ATOMIC_FETCH_AND_ADD, lb.mr, lb.p,
				(uintptr_t)win, k1, 1, 0, IBV_SEND_SIGNALED), 0);
	WAIT_WC(p.scq[0], 5, IBV_WC_REM_ACCESS_ERR, -1);
	vu_pair_destroy(&p);

	/* Rebind read-only: the old key is stale, writes through the new one are refused. */
	make_pair(&p, 0);
	CHECK_EQ(bind1(p.qp[1], mw, 6, rb.mr, (uintptr_t)win, WIN_LEN, IBV_ACCESS_REMOTE_READ), 0);
	WAIT_WC(p.scq[1], 6, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	CHECK_EQ(mw->rkey, ibv_inc_rkey(k1));
	int64_t stale0 = vu_stat("key_stale");

	EXPECT_REFUSED(&p, win, k1);
	CHECK(vu_stat("key_stale") > stale0);
	vu_pair_destroy(&p);
	make_pair(&p, 0);
	EXPECT_REFUSED(&p, win, mw->rkey);
	vu_pair_destroy(&p);

	/* Unbind (length 0): nothing passes any more; the MR can go again. */
	make_pair(&p, 0);
	CHECK_EQ(bind1(p.qp[1], mw, 7, NULL, 0, 0, 0), 0);
	WAIT_WC(p.scq[1], 7, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	EXPECT_REFUSED(&p, win, mw->rkey);
	vu_pair_destroy(&p);

	/* IBV_WR_BIND_MW is for type 2 windows; ibv_bind_mw for type 1 only. */
	make_pair(&p, 0);
	CHECK_EQ(post_bind2(p.qp[1], 8, mw, ibv_inc_rkey(mw->rkey), rb.mr, (uintptr_t)win, 64,
			    IBV_ACCESS_REMOTE_READ), EINVAL);
	/* Zero-based windows are not implemented. */
	CHECK_EQ(bind1(p.qp[1], mw, 9, rb.mr, 0, 64, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED),
		 EINVAL);
	vu_pair_destroy(&p);
	CHECK_EQ(ibv_dealloc_mw(mw), 0);
}

static void test_type1_refusals(void)
{
	struct vu_pair p;
	struct ibv_mw *mw = ibv_alloc_mw(dev.pd, IBV_MW_TYPE_1);
	struct ibv_mr *nobind = ibv_reg_mr(dev.pd, rb.p, rb.len, (int)VU_ACCESS_ALL);
	struct ibv_mr *ro = ibv_reg_mr(dev.pd, rb.p, rb.len,
				       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
	struct ibv_pd *pd2 = ibv_alloc_pd(dev.ctx);

	REQUIRE(mw && nobind && ro && pd2);
	/* An MR without IBV_ACCESS_MW_BIND (C10-73): the bind completes in error. */
	make_pair(&p, 0);
	CHECK_EQ(bind1(p.qp[1], mw, 1, nobind, (uintptr_t)rb.p, 64, IBV_ACCESS_REMOTE_READ), 0);
	WAIT_WC(p.scq[1], 1, IBV_WC_MW_BIND_ERR, -1);
	CHECK_EQ(vu_qp_state(p.qp[1]), IBV_QPS_ERR);
	vu_pair_destroy(&p);
	/* A writable window on an MR without local write (C10-74). */
	make_pair(&p, 0);
	CHECK_EQ(bind1(p.qp[1], mw, 2, ro, (uintptr_t)rb.p, 64, IBV_ACCESS_REMOTE_WRITE), 0);
	WAIT_WC(p.scq[1], 2, IBV_WC_MW_BIND_ERR, -1);
	vu_pair_destroy(&p);
	/* A window outside its MR (C10-75). */
	make_pair(&p, 0);
	CHECK_EQ(bind1(p.qp[1], mw, 3, rb.mr, (uintptr_t)rb.p + rb.len - 32, 64,
		       IBV_ACCESS_REMOTE_READ), 0);
	WAIT_WC(p.scq[1], 3, IBV_WC_MW_BIND_ERR, -1);
	vu_pair_destroy(&p);
	/* An MR of another PD: refused before anything is posted (rdma-core's ibv_bind_mw). */
	{
		struct ibv_mr *other = ibv_reg_mr(pd2, rb.p, 4096,
						  (int)(VU_ACCESS_ALL | IBV_ACCESS_MW_BIND));

		REQUIRE(other);
		make_pair(&p, 0);
		CHECK_EQ(bind1(p.qp[1], mw, 4, other, (uintptr_t)rb.p, 64, IBV_ACCESS_REMOTE_READ),
			 EPERM);
		vu_pair_destroy(&p);
		CHECK_EQ(ibv_dereg_mr(other), 0);
	}
	CHECK_EQ(ibv_dealloc_mw(mw), 0);
	CHECK_EQ(ibv_dereg_mr(nobind), 0);
	CHECK_EQ(ibv_dereg_mr(ro), 0);
	CHECK_EQ(ibv_dealloc_pd(pd2), 0);
}

/* ---- type 2 ---------------------------------------------------------------------------------- */
static void test_type2_local_inv(void)
{
	struct vu_pair p;
	struct ibv_mw *mw = ibv_alloc_mw(dev.pd, IBV_MW_TYPE_2);
	uint8_t *win = rb.p + WIN_OFF;
	uint32_t key;

	REQUIRE(mw);
	memset(rb.p, GUARD, rb.len);
	make_pair(&p, 0);
	key = ibv_inc_rkey(mw->rkey);
	/* Type 2 and ibv_bind_mw: refused by rdma-core's inline wrapper. */
	{
		struct ibv_mw_bind b = { .wr_id = 1, .bind_info = { .mr = rb.mr, .addr = (uintptr_t)win,
								    .length = 64 } };

		CHECK_EQ(ibv_bind_mw(p.qp[1], mw, &b), EINVAL);
	}
	/* Another index in the new key: refused at post. */
	CHECK_EQ(post_bind2(p.qp[1], 1, mw, key + 0x100, rb.mr, (uintptr_t)win, WIN_LEN,
			    IBV_ACCESS_REMOTE_WRITE), EINVAL);
	/* Bound by side 1 (the QP the peer's requests arrive on). */
	CHECK_EQ(post_bind2(p.qp[1], 2, mw, key, rb.mr, (uintptr_t)win, WIN_LEN,
			    IBV_ACCESS_REMOTE_WRITE), 0);
	WAIT_WC(p.scq[1], 2, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	vu_fill(lb.p, WIN_LEN, 11);
	CHECK_EQ(vu_post_rdma(p.qp[0], 3, IBV_WR_RDMA_WRITE, lb.mr, lb.p, WIN_LEN, (uintptr_t)win,
			      key, IBV_SEND_SIGNALED), 0);
	WAIT_WC(p.scq[0], 3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(vu_check(win, WIN_LEN, 11), -1);
	CHECK_EQ(vu_check_byte(rb.p, WIN_OFF, GUARD), -1);

	/* Another QP of the same PD may not use it (type 2: bound to its QP). */
	{
		struct vu_pair q;

		make_pair(&q, 0);
		EXPECT_REFUSED(&q, win, key);
		vu_pair_destroy(&q);
	}
	/* Bound already: a second bind is refused (o10-37.2.30) and the QP goes to ERR. */
	{
		struct vu_pair q;

		make_pair(&q, 0);
		CHECK_EQ(post_bind2(q.qp[1], 4, mw, ibv_inc_rkey(key), rb.mr, (uintptr_t)win, 64,
				    IBV_ACCESS_REMOTE_WRITE), 0);
		WAIT_WC(q.scq[1], 4, IBV_WC_MW_BIND_ERR, -1);
		vu_pair_destroy(&q);
	}
	/* LOCAL_INV with the wrong key: refused. */
	{
		struct vu_pair q;

		make_pair(&q, 0);
		CHECK_EQ(post_inv(q.qp[1], 5, IBV_WR_LOCAL_INV, ibv_inc_rkey(key), NULL, NULL, 0), 0);
		WAIT_WC(q.scq[1], 5, IBV_WC_LOC_QP_OP_ERR, -1);
		vu_pair_destroy(&q);
	}
	/* The window still works; LOCAL_INV (from any QP of the PD) frees it. */
	memset(win, GUARD, WIN_LEN);
	CHECK_EQ(post_inv(p.qp[1], 6, IBV_WR_LOCAL_INV, key, NULL, NULL, 0), 0);
	WAIT_WC(p.scq[1], 6, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	/* A remote write through the invalidated window: REM_ACCESS_ERR, nothing written. */
	EXPECT_REFUSED(&p, win, key);
	CHECK_EQ(vu_check_byte(win, WIN_LEN, GUARD), -1);
	vu_pair_destroy(&p);

	/* Rebound with a new key: the old one stays dead. */
	make_pair(&p, 0);
	CHECK_EQ(post_bind2(p.qp[1], 7, mw, ibv_inc_rkey(key), rb.mr, (uintptr_t)win, WIN_LEN,
			    IBV_ACCESS_REMOTE_WRITE), 0);
	WAIT_WC(p.scq[1], 7, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	EXPECT_REFUSED(&p, win, key);
	vu_pair_destroy(&p);
	/* A type 2 window bound to no memory is refused (o10-37.2.40). */
	make_pair(&p, 0);
	CHECK_EQ(post_inv(p.qp[1], 8, IBV_WR_LOCAL_INV, ibv_inc_rkey(key), NULL, NULL, 0), 0);
	WAIT_WC(p.scq[1], 8, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	CHECK_EQ(post_bind2(p.qp[1], 9, mw, ibv_inc_rkey(ibv_inc_rkey(key)), rb.mr,
			    (uintptr_t)win, 0, IBV_ACCESS_REMOTE_WRITE), 0);
	WAIT_WC(p.scq[1], 9, IBV_WC_MW_BIND_ERR, -1);
	vu_pair_destroy(&p);
	CHECK_EQ(ibv_dealloc_mw(mw), 0);
}

static void test_type2_send_inv(void)
{
	struct vu_pair p;
	struct ibv_mw *mw = ibv_alloc_mw(dev.pd, IBV_MW_TYPE_2);
	uint8_t *win = rb.p + WIN_OFF;
	uint32_t key;
	struct ibv_wc wc;

	REQUIRE(mw);
	memset(rb.p, GUARD, rb.len);
	make_pair(&p, 0);
	key = ibv_inc_rkey(mw->rkey);
	CHECK_EQ(post_bind2(p.qp[1], 1, mw, key, rb.mr, (uintptr_t)win, WIN_LEN,
			    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ), 0);
	WAIT_WC(p.scq[1], 1, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	/* WRITE through the window, then SEND with invalidate: the data is there, the receiver
	 * learns which key died, and the window is Free. */
	vu_fill(lb.p, 5000, 21);
	CHECK_EQ(vu_post_rdma(p.qp[0], 2, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 5000, (uintptr_t)win,
			      key, IBV_SEND_SIGNALED), 0);
	CHECK_EQ(vu_post_recv(p.qp[1], 3, rb.mr, rb.p, 256), 0);
	vu_fill(lb.p + 8192, 100, 22);
	CHECK_EQ(post_inv(p.qp[0], 4, IBV_WR_SEND_WITH_INV, key, lb.mr, lb.p + 8192, 100), 0);
	WAIT_WC(p.scq[0], 2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	WAIT_WC(p.scq[0], 4, IBV_WC_SUCCESS, IBV_WC_SEND);
	wc = WAIT_WC(p.rcq[1], 3, IBV_WC_SUCCESS, IBV_WC_RECV);
	CHECK(wc.wc_flags & IBV_WC_WITH_INV);
	CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM));
	CHECK_EQ(wc.invalidated_rkey, key);
	CHECK_EQ(wc.byte_len, 100);
	CHECK_EQ(vu_check(rb.p, 100, 22), -1);
	CHECK_EQ(vu_check(win, 5000, 21), -1);
	memset(win, GUARD, WIN_LEN);
	EXPECT_REFUSED(&p, win, key);
	CHECK_EQ(vu_check_byte(win, WIN_LEN, GUARD), -1);
	vu_pair_destroy(&p);

	/* The ibv_wr_* API: bind, use, SEND with invalidate; the extended CQ reads the key. */
	{
		struct vu_qp_cfg q;
		struct ibv_cq_init_attr_ex cx = {
			.cqe = 64,
			.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM,
		};
		struct ibv_cq_ex *rcq = ibv_create_cq_ex(dev.ctx, &cx);
		struct ibv_qp_ex *x0, *x1;
		struct ibv_poll_cq_attr pa = { 0 };
		uint64_t t0;
		int ret;

		REQUIRE(rcq);
		vu_qp_cfg_default(&q, IBV_QPT_RC);
		q.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
				   IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
				   IBV_QP_EX_WITH_SEND_WITH_INV;
		REQUIRE(vu_pair_create_reset(&dev, &q, &p) == 0);
		/* side 1 receives into the extended CQ */
		ibv_destroy_qp(p.qp[1]);
		p.qp[1] = vu_qp_create(&dev, p.scq[1], ibv_cq_ex_to_cq(rcq), &q);
		REQUIRE(p.qp[1]);
		REQUIRE(vu_pair_connect(&p, NULL) == 0);
		x0 = ibv_qp_to_qp_ex(p.qp[0]);
		x1 = ibv_qp_to_qp_ex(p.qp[1]);
		REQUIRE(x0 && x1);
		key = ibv_inc_rkey(key);
		struct ibv_mw_bind_info bi = { .mr = rb.mr, .addr = (uintptr_t)win, .length = WIN_LEN,
					       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE };

		ibv_wr_start(x1);
		x1->wr_id = 10;
		x1->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_bind_mw(x1, mw, key, &bi);
		CHECK_EQ(ibv_wr_complete(x1), 0);
		WAIT_WC(p.scq[1], 10, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
		CHECK_EQ(vu_post_recv(p.qp[1], 11, rb.mr, rb.p, 256), 0);
		vu_fill(lb.p, 512, 23);
		ibv_wr_start(x0);
		x0->wr_id = 12;
		x0->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(x0, key, (uintptr_t)win);
		ibv_wr_set_sge(x0, lb.mr->lkey, (uintptr_t)lb.p, 512);
		x0->wr_id = 13;
		ibv_wr_send_inv(x0, key);
		ibv_wr_set_sge(x0, lb.mr->lkey, (uintptr_t)lb.p, 8);
		CHECK_EQ(ibv_wr_complete(x0), 0);
		WAIT_WC(p.scq[0], 12, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
		WAIT_WC(p.scq[0], 13, IBV_WC_SUCCESS, IBV_WC_SEND);
		t0 = vu_now_ms();
		while ((ret = ibv_start_poll(rcq, &pa)) == ENOENT && vu_now_ms() - t0 < 5000)
			;
		CHECK_EQ(ret, 0);
		if (!ret) {
			CHECK_EQ(rcq->wr_id, 11);
			CHECK_EQ(rcq->status, IBV_WC_SUCCESS);
			CHECK(ibv_wc_read_wc_flags(rcq) & IBV_WC_WITH_INV);
			CHECK_EQ(ibv_wc_read_invalidated_rkey(rcq), key);
			ibv_end_poll(rcq);
		}
		CHECK_EQ(vu_check(win, 512, 23), -1);
		/* ibv_wr_local_inv on an already Free window is harmless. */
		ibv_wr_start(x1);
		x1->wr_id = 14;
		x1->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_local_inv(x1, key);
		CHECK_EQ(ibv_wr_complete(x1), 0);
		WAIT_WC(p.scq[1], 14, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
		/* A type 1 window in ibv_wr_bind_mw: the batch fails. */
		{
			struct ibv_mw *t1 = ibv_alloc_mw(dev.pd, IBV_MW_TYPE_1);

			REQUIRE(t1);
			ibv_wr_start(x1);
			ibv_wr_bind_mw(x1, t1, ibv_inc_rkey(t1->rkey), &bi);
			CHECK_EQ(ibv_wr_complete(x1), EINVAL);
			CHECK_EQ(ibv_dealloc_mw(t1), 0);
		}
		vu_pair_destroy(&p);
		CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(rcq)), 0);
	}
	CHECK_EQ(ibv_dealloc_mw(mw), 0);
}

/* A SEND with invalidate naming an ordinary MR (never invalidatable): both ends fail. */
static void test_send_inv_refused(void)
{
	struct vu_pair p;

	make_pair(&p, 0);
	CHECK_EQ(vu_post_recv(p.qp[1], 1, rb.mr, rb.p, 256), 0);
	CHECK_EQ(post_inv(p.qp[0], 2, IBV_WR_SEND_WITH_INV, rb.mr->rkey, lb.mr, lb.p, 16), 0);
	WAIT_WC(p.rcq[1], 1, IBV_WC_REM_INV_REQ_ERR, -1);
	WAIT_WC(p.scq[0], 2, IBV_WC_REM_INV_REQ_ERR, -1);
	vu_pair_destroy(&p);
	/* UC has no SEND with invalidate (IBA table 38). */
	{
		struct vu_qp_cfg q;

		vu_qp_cfg_default(&q, IBV_QPT_UC);
		REQUIRE(vu_pair_create(&dev, &q, NULL, &p) == 0);
		CHECK_EQ(post_inv(p.qp[0], 3, IBV_WR_SEND_WITH_INV, 0x100, lb.mr, lb.p, 16), EINVAL);
		vu_pair_destroy(&p);
	}
}

int main(void)
{
	sr_test_timeout(120);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, BUFSZ, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rb, BUFSZ, VU_ACCESS_ALL | IBV_ACCESS_MW_BIND) == 0);
	test_caps();
	test_alloc();
	test_type1();
	test_type1_refusals();
	test_type2_local_inv();
	test_type2_send_inv();
	test_send_inv_refused();
	vu_buf_free(&lb);
	vu_buf_free(&rb);
	vu_close(&dev);
	return sr_test_done("test_mw");
}
