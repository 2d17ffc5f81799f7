/* SPDX-License-Identifier: MIT */
/*
 * PSNs are 24 bits and wrap from 0xffffff to 0 (IBA 9.7.1). RC and UC transfers whose packet
 * sequence crosses the wrap -- multi-packet WRITEs and SENDs, READs whose responses cross it,
 * atomics on either side of it -- deliver every byte; and RC still does so when packets are
 * lost, duplicated and reordered around the wrap (a forked child with fault injection), which
 * exercises retransmission and duplicate detection across the boundary.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <endian.h>
#include <stdlib.h>

#define BUFSZ (1u << 20)

static struct vu_dev dev;
static struct vu_buf lb, rb;

#define WAIT_OK(cq, id) wait_ok(cq, id, __LINE__)
static struct ibv_wc wait_ok(struct ibv_cq *cq, uint64_t wr_id, int line)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	if (!vu_wait(cq, &wc, 10000))
		SR_FAIL("line %d: no completion for wr_id %llu", line, (unsigned long long)wr_id);
	else if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id)
		SR_FAIL("line %d: wanted wr_id %llu success, got %s", line,
			(unsigned long long)wr_id, vu_wc_str(&wc));
	return wc;
}

#define CHECK_PAT(p, len, seed) check_pat(p, len, seed, __LINE__)
static void check_pat(const void *p, size_t len, uint32_t seed, int line)
{
	long at = vu_check(p, len, seed);

	if (at >= 0)
		SR_FAIL("line %d: byte %ld of %zu wrong", line, at, len);
}

/* Many messages from qp[from] to qp[1 - from], each a different size, the sequence crossing the
 * PSN wrap; every message's bytes checked. */
static void rc_traffic(struct vu_pair *p, int from, uint32_t seed0)
{
	struct ibv_qp *s = p->qp[from], *r = p->qp[1 - from];
	struct ibv_cq *scq = p->scq[from], *rcq = p->rcq[1 - from];
	static const uint32_t sizes[] = { 1, 1024, 1025, 4096 * 3 + 5, 65536, 100000, 7, 20000 };
	struct ibv_wc wc;

	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t n = sizes[i], seed = seed0 + i;

		/* WRITE */
		vu_fill(lb.p, n, seed);
		memset(rb.p, 0, n + 16);
		CHECK_EQ(vu_post_rdma(s, 1, IBV_WR_RDMA_WRITE, lb.mr, lb.p, n, (uintptr_t)rb.p,
				      rb.mr->rkey, 0), 0);
		WAIT_OK(scq, 1);
		CHECK_PAT(rb.p, n, seed);
		CHECK_EQ(vu_check_byte(rb.p + n, 16, 0), -1);

		/* SEND (with immediate data) */
		memset(rb.p + 200000, 0, n + 16);
		CHECK_EQ(vu_post_recv(r, 2, rb.mr, rb.p + 200000, 200000), 0);
		CHECK_EQ(vu_post_send(s, 3, IBV_WR_SEND_WITH_IMM, lb.mr, lb.p, n, seed, 0), 0);
		wc = WAIT_OK(rcq, 2);
		CHECK_EQ(wc.byte_len, n);
		CHECK_EQ(be32toh(wc.imm_data), seed);
		WAIT_OK(scq, 3);
		CHECK_PAT(rb.p + 200000, n, seed);

		/* READ back what the WRITE put there */
		memset(lb.p + 400000, 0, n + 16);
		CHECK_EQ(vu_post_rdma(s, 4, IBV_WR_RDMA_READ, lb.mr, lb.p + 400000, n,
				      (uintptr_t)rb.p, rb.mr->rkey, 0), 0);
		wc = WAIT_OK(scq, 4);
		CHECK_EQ(wc.byte_len, n);
		CHECK_PAT(lb.p + 400000, n, seed);
		CHECK_EQ(vu_check_byte(lb.p + 400000 + n, 16, 0), -1);
	}

	/* A burst: many WRs in flight at once, straddling the wrap as a group. */
	vu_fill(rb.p + 600000, 64 * 4096, seed0 + 100);
	*(uint64_t *)(rb.p + 900000) = 0;
	for (int i = 0; i < 32; i++) {
		CHECK_EQ(vu_post_rdma(s, 100 + i, IBV_WR_RDMA_READ, lb.mr, lb.p + i * 4096, 4096,
				      (uintptr_t)rb.p + 600000 + i * 4096, rb.mr->rkey, 0), 0);
		CHECK_EQ(vu_post_atomic(s, 200 + i, IBV_WR_ATOMIC_FETCH_AND_ADD, lb.mr,
					lb.p + 300000 + i * 8, (uintptr_t)rb.p + 900000, rb.mr->rkey,
					1, 0, 0), 0);
	}
	for (int i = 0; i < 32; i++) {
		WAIT_OK(scq, 100 + i);
		WAIT_OK(scq, 200 + i);
	}
	CHECK_PAT(lb.p, 32 * 4096, seed0 + 100);
	/* Executed once each, in order: FETCH_ADD i saw i. */
	for (int i = 0; i < 32; i++)
		CHECK_EQ(*(uint64_t *)(lb.p + 300000 + i * 8), i);
	CHECK_EQ(*(uint64_t *)(rb.p + 900000), 32);
}

/* The PSN the QP will use next, as ibv_query_qp reports the initial one (a sanity check that the
 * pair really starts near the top). */
static uint32_t sq_psn(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	CHECK_EQ(ibv_query_qp(qp, &a, IBV_QP_SQ_PSN, &ia), 0);
	return a.sq_psn;
}

static void test_rc(enum ibv_mtu mtu, uint32_t psn0, uint32_t psn1)
{
	struct vu_conn_cfg c;
	struct vu_pair p;

	printf("RC, MTU %u, PSNs 0x%06x / 0x%06x\n", 128u << mtu, psn0, psn1);
	vu_conn_cfg_default(&c);
	c.mtu = mtu;
	c.sq_psn = psn0;
	c.rq_psn = psn1;
	REQUIRE(vu_pair_create(&dev, NULL, &c, &p) == 0);
	CHECK_EQ(sq_psn(p.qp[0]), psn0);
	CHECK_EQ(sq_psn(p.qp[1]), psn1);
	rc_traffic(&p, 0, 1);
	rc_traffic(&p, 1, 50);
	/* ... and once more each way, now well past the wrap. */
	rc_traffic(&p, 0, 70);
	CHECK_EQ(vu_qp_state(p.qp[0]), IBV_QPS_RTS);
	CHECK_EQ(vu_qp_state(p.qp[1]), IBV_QPS_RTS);
	vu_pair_destroy(&p);
}

static void test_uc(uint32_t psn)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct vu_pair p;
	struct ibv_wc wc;
	static const uint32_t sizes[] = { 1, 1024, 3000, 65536, 100000, 0, 5000 };

	printf("UC, MTU 1024, PSN 0x%06x\n", psn);
	vu_qp_cfg_default(&q, IBV_QPT_UC);
	vu_conn_cfg_default(&c);
	c.sq_psn = psn;
	c.rq_psn = psn;
	REQUIRE(vu_pair_create(&dev, &q, &c, &p) == 0);
	for (int round = 0; round < 3; round++) {
		for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			uint32_t n = sizes[i], seed = 300 + round * 10 + i;

			vu_fill(lb.p, n, seed);
			memset(rb.p, 0, n + 16);
			CHECK_EQ(vu_post_recv(p.qp[1], 10, NULL, NULL, 0), 0);
			CHECK_EQ(vu_post_write_imm(p.qp[0], 11, lb.mr, lb.p, n, (uintptr_t)rb.p,
						   rb.mr->rkey, seed, 0), 0);
			WAIT_OK(p.scq[0], 11);
			wc = WAIT_OK(p.rcq[1], 10);
			CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
			CHECK_EQ(wc.byte_len, n);
			CHECK_EQ(be32toh(wc.imm_data), seed);
			CHECK_PAT(rb.p, n, seed);
			CHECK_EQ(vu_check_byte(rb.p + n, 16, 0), -1);

			memset(rb.p + 200000, 0, n + 16);
			CHECK_EQ(vu_post_recv(p.qp[1], 12, rb.mr, rb.p + 200000, 200000), 0);
			CHECK_EQ(vu_post_send(p.qp[0], 13, IBV_WR_SEND, lb.mr, lb.p, n, 0, 0), 0);
			WAIT_OK(p.scq[0], 13);
			wc = WAIT_OK(p.rcq[1], 12);
			CHECK_EQ(wc.byte_len, n);
			CHECK_PAT(rb.p + 200000, n, seed);
		}
	}
	CHECK_EQ(vu_qp_state(p.qp[0]), IBV_QPS_RTS);
	vu_pair_destroy(&p);
}

/* In a child with fault injection: RC across the wrap with loss, duplicates and reordering. */
static int lossy_child(int sock, void *arg)
{
	(void)sock;
	(void)arg;
	setenv("SOFTRDMA_FAULT", "drop=0.03,dup=0.02,reorder=0.03,seed=7", 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, BUFSZ, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rb, BUFSZ, VU_ACCESS_ALL) == 0);
	printf("lossy: ");
	test_rc(IBV_MTU_1024, 0xfffe00, 0xffff80);
	{
		int64_t drops = vu_stat("fault_drop"), rexmit = vu_stat("retransmits");

		printf("lossy: fault_drop %lld retransmits %lld dup_requests %lld\n",
		       (long long)drops, (long long)rexmit, (long long)vu_stat("dup_requests"));
		CHECK(drops > 0);
		CHECK(rexmit > 0);
	}
	vu_buf_free(&lb);
	vu_buf_free(&rb);
	vu_close(&dev);
	return sr_test_failures ? 1 : 0;
}

int main(void)
{
	struct vu_child child;

	sr_test_timeout(200);
	/* Fork first: the child must make its first verbs call with its own environment. */
	REQUIRE(vu_fork(&child, lossy_child, NULL, 150) == 0);

	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, BUFSZ, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rb, BUFSZ, VU_ACCESS_ALL) == 0);

	test_rc(IBV_MTU_1024, 0xfffff0, 0xffffc0);
	test_rc(IBV_MTU_4096 <= dev.active_mtu ? IBV_MTU_4096 : dev.active_mtu, 0xffffff, 0xfffffe);
	test_rc(IBV_MTU_256, 0xfff000, 0x000000);
	test_uc(0xfffff8);
	test_uc(0xffffff);

	vu_buf_free(&lb);
	vu_buf_free(&rb);
	vu_close(&dev);
	CHECK_EQ(vu_child_wait(&child, 180), 0);
	return sr_test_done("test_psn_wrap");
}
