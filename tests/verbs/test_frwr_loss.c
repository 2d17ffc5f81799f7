/* SPDX-License-Identifier: MIT */
/*
 * Fast-register / invalidate cycles under packet loss, duplication and reordering
 * (SOFTRDMA_FAULT drop=0.05,dup=0.02,reorder=0.05, set before the device opens, so every packet
 * of both QPs can be lost), proving that no packet ever lands through a stale key and that
 * retransmissions use the map that was valid when they were first sent.
 *
 * Side 1 (T) owns two fast-registration MRs over pages scattered in memory; side 0 (I) is its
 * peer. Each cycle:
 *   T  maps a page set under a new key of MR A and, in one unfenced batch, posts REG_MR(A), a
 *      SEND telling I the key, then twice: REG_MR(B, new key) on another page set holding a
 *      known pattern, a SEND gathered from that key, LOCAL_INV of it. The LOCAL_INVs execute
 *      right behind their SENDs, so a lost SEND packet is resent after its key was invalidated
 *      -- and, for the first, after the next generation was registered on other pages: the
 *      resent bytes must still come from the old map (I checks every byte; map_replays counts).
 *   I  WRITEs a pattern through A's key, then SEND with invalidate of that key, then an ATOMIC
 *      WRITE and a FLUSH of a word of T's (so that these, too, are lost, resent and answered
 *      again from the responder resources, never executed twice).
 *   T  sees the invalidated key in its completion, checks the pattern, and paints the pages
 *      with a sentinel. Before a page set is mapped again, T checks that the sentinel is intact:
 *      nothing (a late duplicate, a retransmission) landed after the invalidation.
 *   Every fourth cycle an attacker pair of the same PD writes through the key just invalidated
 *   and through an older one: refused (REM_ACCESS_ERR, or RETRY_EXC_ERR when the NAK is lost),
 *   sentinel intact, and key_stale counts it.
 *
 * 1000 cycles (200 in sanitizer builds), or 60 s, whichever comes first. SR_FAULT_SEED sets the
 * fault seed.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <errno.h>
#include <softrdma/softrdma.h>

#define PG 4096u
#define SETPG 3u			/* pages per map */
#define SETLEN (SETPG * PG)
#define NSETA 8				/* page sets of MR A (remote key) */
#define NSETB 8				/* page sets of MR B (local key) */
#define CYCLES (SR_SANITIZED ? 200 : 1000)
#define BUDGET_MS 60000

struct info {
	uint32_t key;
	uint32_t cycle;
	uint64_t iova;
};

static struct vu_dev dev;
static struct vu_buf ta, tb;		/* T: pages of MR A's and MR B's maps (unregistered) */
static struct vu_buf tr;		/* T: receive buffers */
static struct vu_buf ib;		/* I: WRITE source and receive buffers */
static unsigned perm_a[NSETA * SETPG], perm_b[NSETB * SETPG];
static uint8_t sentinel[NSETA];

static uint8_t *page_a(unsigned set, unsigned j) { return ta.p + (size_t)perm_a[set * SETPG + j] * PG; }
static uint8_t *page_b(unsigned set, unsigned j) { return tb.p + (size_t)perm_b[set * SETPG + j] * PG; }

static void shuffle(unsigned *v, unsigned n, uint64_t *rng)
{
	for (unsigned i = 0; i < n; i++)
		v[i] = i;
	for (unsigned i = n - 1; i > 0; i--) {
		unsigned j = (unsigned)(vu_rand(rng) % (i + 1)), t = v[i];

		v[i] = v[j];
		v[j] = t;
	}
}

#define WAIT(cq, id, st) wait_wc(cq, id, st, __LINE__)
static struct ibv_wc wait_wc(struct ibv_cq *cq, uint64_t id, int st, int line)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	if (!vu_wait(cq, &wc, 20000)) {
		SR_FAIL("line %d: no completion (wr_id %llu)", line, (unsigned long long)id);
		exit(1);
	}
	if (wc.wr_id != id || (int)wc.status != st) {
		SR_FAIL("line %d: expected wr_id %llu status %d, got %s", line,
			(unsigned long long)id, st, vu_wc_str(&wc));
		exit(1);
	}
	return wc;
}

static uint32_t map_set(struct ibv_mr *mr, uint8_t *(*page)(unsigned, unsigned), unsigned set)
{
	struct ibv_sge sg[SETPG];
	uint32_t key = softrdma_update_fast_reg_key(mr, (uint8_t)(ibv_inc_rkey(mr->rkey) & 0xff));

	for (unsigned j = 0; j < SETPG; j++) {
		sg[j].addr = (uintptr_t)page(set, j);
		sg[j].length = PG;
		sg[j].lkey = 0;
	}
	REQUIRE(softrdma_map_mr_sg(mr, sg, SETPG, PG) == SETPG);
	return key;
}

/* The set's pages, in map order, hold pattern seed (fill) / are checked against it. */
static void set_pattern(uint8_t *(*page)(unsigned, unsigned), unsigned set, uint32_t seed,
			bool fill, const char *what, unsigned cycle)
{
	static uint8_t want[SETLEN];

	vu_fill(want, SETLEN, seed);
	for (unsigned j = 0; j < SETPG; j++) {
		if (fill)
			memcpy(page(set, j), want + j * PG, PG);
		else if (memcmp(page(set, j), want + j * PG, PG))
			SR_FAIL("cycle %u: %s: page %u of set %u does not hold the pattern", cycle, what,
				j, set);
	}
}

static void check_sentinel(unsigned set, unsigned cycle, const char *when)
{
	for (unsigned j = 0; j < SETPG; j++) {
		long at = vu_check_byte(page_a(set, j), PG, sentinel[set]);

		if (at >= 0) {
			SR_FAIL("cycle %u: %s: byte %ld of page %u of set %u changed after its key "
				"was invalidated (0x%02x, sentinel 0x%02x)", cycle, when, at, j, set,
				page_a(set, j)[at], sentinel[set]);
			return;
		}
	}
}

static void make_pair(struct vu_pair *p, bool attacker)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.max_send_wr = 32;
	q.max_recv_wr = 16;
	q.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
			   IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV |
			   IBV_QP_EX_WITH_ATOMIC_WRITE | SOFTRDMA_QP_EX_WITH_FLUSH;
	vu_conn_cfg_default(&c);
	c.access |= SOFTRDMA_ACCESS_FLUSH_GLOBAL;
	/* Loss is repaired by NAKs and fast retransmissions long before the IBA timeout; 268 ms
	 * and 7 retries tolerate a peer starved of CPU on a loaded machine. The attacker needs
	 * no such patience: its NAK may be lost, and then it only has to give up. */
	c.timeout = attacker ? 12 : 16;
	c.retry_cnt = attacker ? 2 : 7;
	REQUIRE(vu_pair_create(&dev, &q, &c, p) == 0);
}

/* The attacker writes through a dead key: refused, nothing lands. */
static void attack(uint32_t key, uint64_t iova, unsigned set, unsigned cycle)
{
	struct vu_pair a;
	struct ibv_wc wc;

	make_pair(&a, true);
	vu_fill(ib.p + 6 * SETLEN, 256, 7);
	CHECK_EQ(vu_post_rdma(a.qp[0], 1, IBV_WR_RDMA_WRITE, ib.mr, ib.p + 6 * SETLEN, 256, iova,
			      key, IBV_SEND_SIGNALED), 0);
	if (!vu_wait(a.scq[0], &wc, 20000))
		SR_FAIL("cycle %u: attacker: no completion", cycle);
	else if (wc.status != IBV_WC_REM_ACCESS_ERR && wc.status != IBV_WC_RETRY_EXC_ERR)
		SR_FAIL("cycle %u: attacker WRITE through dead key 0x%x: %s", cycle, key,
			vu_wc_str(&wc));
	vu_pair_destroy(&a);
	check_sentinel(set, cycle, "after an attack");
}

int main(void)
{
	const char *seed_env = getenv("SR_FAULT_SEED");
	char faults[128];
	struct vu_pair p;
	struct ibv_mr *mra, *mrb, *wmr;
	uint64_t rng = 20240601, t0;
	unsigned cycle, prev_set = 0;
	uint32_t prev_key = 0, prev_prev_key = 0;
	uint64_t prev_iova = 0;
	const unsigned rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

	sr_test_timeout(240);
	snprintf(faults, sizeof(faults), "drop=0.05,dup=0.02,reorder=0.05,seed=%s",
		 seed_env ? seed_env : "5");
	setenv("SOFTRDMA_FAULT", faults, 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &ta, NSETA * SETLEN, 0) == 0);
	REQUIRE(vu_buf_alloc(&dev, &tb, NSETB * SETLEN, 0) == 0);
	REQUIRE(vu_buf_alloc(&dev, &tr, 4 * PG, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &ib, 8 * SETLEN, VU_ACCESS_ALL) == 0);
	shuffle(perm_a, NSETA * SETPG, &rng);
	shuffle(perm_b, NSETB * SETPG, &rng);
	memset(ta.p, 0x5c, ta.len);
	memset(sentinel, 0x5c, sizeof(sentinel));
	mra = softrdma_alloc_mr(dev.pd, SETPG);
	mrb = softrdma_alloc_mr(dev.pd, SETPG);
	/* T's word for ATOMIC WRITE and FLUSH. */
	wmr = ibv_reg_mr(dev.pd, tr.p + 2 * PG, PG, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						     SOFTRDMA_ACCESS_FLUSH_GLOBAL);
	REQUIRE(mra && mrb && wmr);
	make_pair(&p, false);
	struct ibv_qp_ex *xt = ibv_qp_to_qp_ex(p.qp[1]), *xi = ibv_qp_to_qp_ex(p.qp[0]);

	REQUIRE(xt && xi);
	printf("faults %s, %u cycles of 1 remote and 2 local generations\n", faults, CYCLES);
	t0 = vu_now_ms();
	for (cycle = 0; cycle < CYCLES; cycle++) {
		unsigned set = cycle % NSETA, b1 = (2 * cycle) % NSETB, b2 = (2 * cycle + 1) % NSETB;
		uint32_t ka, kb1, kb2;
		struct info in;
		struct ibv_wc wc;

		if (vu_now_ms() - t0 > BUDGET_MS) {
			printf("time budget reached after %u cycles\n", cycle);
			break;
		}
		/* T: the set must be as it was left when its last key died. */
		check_sentinel(set, cycle, "before mapping again");
		ka = map_set(mra, page_a, set);
		in.key = ka;
		in.cycle = cycle;
		in.iova = (uintptr_t)mra->addr;
		set_pattern(page_b, b1, 1000 + 2 * cycle, true, "", cycle);
		set_pattern(page_b, b2, 1001 + 2 * cycle, true, "", cycle);
		kb1 = map_set(mrb, page_b, b1);
		uint64_t iova_b1 = (uintptr_t)mrb->addr;
		kb2 = map_set(mrb, page_b, b2);
		uint64_t iova_b2 = (uintptr_t)mrb->addr;

		/* I: receive buffers for the three SENDs; T: one for the SEND with invalidate. */
		for (int i = 0; i < 3; i++)
			CHECK_EQ(vu_post_recv(p.qp[0], 100 + i, ib.mr, ib.p + (size_t)i * SETLEN,
					      SETLEN), 0);
		CHECK_EQ(vu_post_recv(p.qp[1], 200, tr.mr, tr.p, 64), 0);

		ibv_wr_start(xt);
		xt->wr_flags = IBV_SEND_SIGNALED;
		xt->wr_id = 1;
		softrdma_wr_reg_mr(xt, mra, ka, rw);
		xt->wr_id = 2;
		ibv_wr_send(xt);
		ibv_wr_set_inline_data(xt, &in, sizeof(in));
		xt->wr_id = 3;
		softrdma_wr_reg_mr(xt, mrb, kb1, IBV_ACCESS_LOCAL_WRITE);
		xt->wr_id = 4;
		ibv_wr_send(xt);
		ibv_wr_set_sge(xt, kb1, iova_b1, SETLEN);
		xt->wr_id = 5;
		ibv_wr_local_inv(xt, kb1);
		xt->wr_id = 6;
		softrdma_wr_reg_mr(xt, mrb, kb2, IBV_ACCESS_LOCAL_WRITE);
		xt->wr_id = 7;
		ibv_wr_send(xt);
		ibv_wr_set_sge(xt, kb2, iova_b2, SETLEN);
		xt->wr_id = 8;
		ibv_wr_local_inv(xt, kb2);
		CHECK_EQ(ibv_wr_complete(xt), 0);

		/* I: the key, then both gathered messages, byte for byte. */
		wc = WAIT(p.rcq[0], 100, IBV_WC_SUCCESS);
		REQUIRE(wc.byte_len == sizeof(in));
		memcpy(&in, ib.p, sizeof(in));
		CHECK_EQ(in.cycle, cycle);
		wc = WAIT(p.rcq[0], 101, IBV_WC_SUCCESS);
		CHECK_EQ(wc.byte_len, SETLEN);
		if (vu_check(ib.p + SETLEN, SETLEN, 1000 + 2 * cycle) != -1)
			SR_FAIL("cycle %u: first gathered SEND is not generation 0x%x's pages", cycle, kb1);
		wc = WAIT(p.rcq[0], 102, IBV_WC_SUCCESS);
		CHECK_EQ(wc.byte_len, SETLEN);
		if (vu_check(ib.p + 2 * SETLEN, SETLEN, 1001 + 2 * cycle) != -1)
			SR_FAIL("cycle %u: second gathered SEND is not generation 0x%x's pages", cycle,
				kb2);

		/* I: WRITE through the remote key, then SEND with invalidate of it. */
		vu_fill(ib.p + 4 * SETLEN, SETLEN, 5000 + cycle);
		ibv_wr_start(xi);
		xi->wr_flags = IBV_SEND_SIGNALED;
		xi->wr_id = 11;
		ibv_wr_rdma_write(xi, in.key, in.iova);
		ibv_wr_set_sge(xi, ib.mr->lkey, (uintptr_t)ib.p + 4 * SETLEN, SETLEN);
		xi->wr_id = 12;
		ibv_wr_send_inv(xi, in.key);
		ibv_wr_set_sge(xi, ib.mr->lkey, (uintptr_t)ib.p + 5 * SETLEN, 8);
		uint64_t word = 0x0101010101010101ull * (cycle % 255 + 1);

		xi->wr_id = 13;
		ibv_wr_atomic_write(xi, wmr->rkey, (uintptr_t)tr.p + 2 * PG + 64, &word);
		xi->wr_id = 14;
		softrdma_wr_flush(xi, wmr->rkey, (uintptr_t)tr.p + 2 * PG + 64, 8,
				  SOFTRDMA_FLUSH_GLOBAL, SOFTRDMA_FLUSH_RANGE);
		CHECK_EQ(ibv_wr_complete(xi), 0);

		/* T: the key died with the data in place. */
		wc = WAIT(p.rcq[1], 200, IBV_WC_SUCCESS);
		CHECK(wc.wc_flags & IBV_WC_WITH_INV);
		CHECK_EQ(wc.invalidated_rkey, ka);
		set_pattern(page_a, set, 5000 + cycle, false, "remote WRITE", cycle);
		sentinel[set] = (uint8_t)(0x80 | (cycle & 0x7f));
		for (unsigned j = 0; j < SETPG; j++)
			memset(page_a(set, j), sentinel[set], PG);
		for (uint64_t id = 1; id <= 8; id++)
			WAIT(p.scq[1], id, IBV_WC_SUCCESS);
		WAIT(p.scq[0], 11, IBV_WC_SUCCESS);
		WAIT(p.scq[0], 12, IBV_WC_SUCCESS);
		WAIT(p.scq[0], 13, IBV_WC_SUCCESS);
		WAIT(p.scq[0], 14, IBV_WC_SUCCESS);
		if (*(volatile uint64_t *)(tr.p + 2 * PG + 64) != word)
			SR_FAIL("cycle %u: ATOMIC WRITE + FLUSH did not leave the word written", cycle);

		if (cycle % 4 == 3) {
			attack(ka, in.iova, set, cycle);
			if (prev_prev_key)
				attack(prev_prev_key, prev_iova, prev_set, cycle);
		}
		prev_prev_key = prev_key;
		prev_key = ka;
		prev_iova = in.iova;
		prev_set = set;
		if (sr_test_failures)
			break;
	}
	/* Whatever still arrives late must not land either. */
	vu_drain(p.rcq[1], NULL, 0, 200);
	for (unsigned s = 0; s < NSETA; s++)
		check_sentinel(s, cycle, "at the end");
	printf("%u cycles in %llu ms: retransmits %lld, map_replays %lld, key_stale %lld, "
	       "fault_drop %lld, fault_dup %lld\n", cycle,
	       (unsigned long long)(vu_now_ms() - t0), (long long)vu_stat("retransmits"),
	       (long long)vu_stat("map_replays"), (long long)vu_stat("key_stale"),
	       (long long)vu_stat("fault_drop"), (long long)vu_stat("fault_dup"));
	CHECK(cycle >= 20);
	CHECK(vu_stat("fault_drop") > 0);
	CHECK(vu_stat("map_replays") > 0);	/* retransmissions used invalidated maps */
	CHECK(vu_stat("key_stale") > 0);	/* the attacks were refused as stale keys */
	vu_pair_destroy(&p);
	CHECK_EQ(ibv_dereg_mr(mra), 0);
	CHECK_EQ(ibv_dereg_mr(mrb), 0);
	CHECK_EQ(ibv_dereg_mr(wmr), 0);
	vu_buf_free(&ta);
	vu_buf_free(&tb);
	vu_buf_free(&tr);
	vu_buf_free(&ib);
	vu_close(&dev);
	return sr_test_done("test_frwr_loss");
}
