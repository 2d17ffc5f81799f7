/* SPDX-License-Identifier: MIT */
/*
 * The send window's gate (src/transport/req.c, window_gated), watched packet by packet:
 * the RC QP's path points at a raw UDP socket of this test (tests/common/rawpeer.c), which reads
 * every request packet and answers with hand-made ACKs.
 *
 * The rule: when the window is full, an ACK that frees fewer than an eighth of it sends nothing
 * new; once an eighth is free, the waiting WQEs leave together, up to the window's end. A
 * message begun goes on at once (the gate is at a new WQE only), and a QP with nothing in
 * flight is never gated. SOFTRDMA_MAX_INFLIGHT=32: the window is 32 packets and opens in steps
 * of 4. SOFTRDMA_POST_BATCH=1: every post runs the requester (no post batching in the way).
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <stdlib.h>

#define MTU 1024
#define FAKE_QPN 0x00beef
#define RVA 0x100000000ull
#define RKEY 0x4321
#define WIN 32
#define STEP (WIN / 8)
#define P0 700u

static struct vu_dev dev;
static struct vu_buf lb;
static struct rawpeer rp;
static struct ibv_qp *qp;
static struct ibv_cq *cq;

#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

/* The next packet is opcode op with this PSN and len bytes of payload. */
#define EXPECT_PKT(op, psn, len) expect_pkt(OPC(op), psn, len, __LINE__)
static bool expect_pkt(uint8_t op, uint32_t psn, uint32_t len, int line)
{
	uint8_t buf[4096];
	struct sr_pkt pkt;

	if (rp_recv(&rp, buf, sizeof(buf), &pkt, 2000) <= 0) {
		SR_FAIL("line %d: no packet (wanted %s PSN %u)", line, sr_opcode_name(op), psn);
		return false;
	}
	if (pkt.opcode != op || pkt.psn != psn || pkt.paylen != len) {
		SR_FAIL("line %d: got %s PSN %u (%u bytes), wanted %s PSN %u (%u bytes)", line,
			sr_opcode_name(pkt.opcode), pkt.psn, pkt.paylen, sr_opcode_name(op), psn,
			len);
		return false;
	}
	return true;
}

/* Messages first..last, one byte each, one packet each, from PSN psn on. */
static bool expect_smalls(int first, int last, uint32_t psn, int line)
{
	for (int i = first; i <= last; i++)
		if (!expect_pkt(OPC(WRITE_ONLY), psn + (uint32_t)(i - first), 1, line))
			return false;
	return true;
}

#define EXPECT_QUIET(ms) \
	rp_expect_quiet(&rp, ms, "nothing while less than an eighth of the window is free", __LINE__)

static void ack(uint32_t psn)
{
	REQUIRE(rp_send_ack(&rp, qp->qp_num, psn, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED) == 0);
}

/* Message i: one byte from its own byte of lb, to RVA + i. */
static int post(int i)
{
	lb.p[i] = (uint8_t)i;
	return vu_post_rdma(qp, (uint64_t)i, IBV_WR_RDMA_WRITE, lb.mr, lb.p + i, 1,
			    RVA + (uint64_t)i, RKEY, 0);
}

/* n completions, in order, wr_id first .. first + n - 1, successful. */
static void expect_done(int first, int n)
{
	for (int i = first; i < first + n; i++)
		if (vu_expect_wc(cq, (uint64_t)i, IBV_WC_SUCCESS, -1, 2000, __LINE__).status !=
		    IBV_WC_SUCCESS)
			return;
}

static void connect_qp(void)
{
	struct vu_conn_cfg c;

	vu_conn_cfg_default(&c);
	c.sq_psn = P0;
	c.rq_psn = 0;
	c.timeout = 0;	/* no retransmission timer: every packet below is one the test asked for */
	qp = vu_qp_to_peer(&dev, cq, &c, &rp.gid, FAKE_QPN, NULL, 0, 0);
	REQUIRE(qp);
}

/* A full window opens by ACKs of a packet or two: nothing leaves until STEP packets are free,
 * then STEP leave together. */
static void opens_in_steps(void)
{
	printf("a full window sends again once an eighth of it (%d packets) is free\n", STEP);
	connect_qp();
	for (int i = 1; i <= WIN + 2 * STEP; i++)
		CHECK_EQ(post(i), 0);
	if (!expect_smalls(1, WIN, P0, __LINE__) || !EXPECT_QUIET(100))
		return;
	/* One packet free, then STEP - 1: still nothing. */
	ack(P0);
	expect_done(1, 1);
	if (!EXPECT_QUIET(150))
		return;
	ack(P0 + STEP - 2);
	expect_done(2, STEP - 2);
	if (!EXPECT_QUIET(150))
		return;
	/* STEP free: STEP messages leave, and the window is full again. */
	ack(P0 + STEP - 1);
	expect_done(STEP, 1);
	if (!expect_smalls(WIN + 1, WIN + STEP, P0 + WIN, __LINE__) || !EXPECT_QUIET(100))
		return;
	/* Everything acknowledged: the rest leaves. */
	ack(P0 + WIN + STEP - 1);
	expect_done(STEP + 1, WIN);
	if (!expect_smalls(WIN + STEP + 1, WIN + 2 * STEP, P0 + WIN + STEP, __LINE__))
		return;
	ack(P0 + WIN + 2 * STEP - 1);
	expect_done(WIN + STEP + 1, STEP);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
}

/* A message the window cut goes on as soon as a packet is free: the gate is only at a new WQE. */
static void message_begun_goes_on(void)
{
	printf("a message begun goes on as the window frees packet by packet\n");
	connect_qp();
	for (int i = 1; i <= WIN - 1; i++)
		CHECK_EQ(post(i), 0);
	memset(lb.p + 1024, 0x5a, 3 * MTU);
	CHECK_EQ(vu_post_rdma(qp, WIN, IBV_WR_RDMA_WRITE, lb.mr, lb.p + 1024, 3 * MTU, RVA + 1024,
			      RKEY, 0), 0);
	CHECK_EQ(post(WIN + 1), 0);
	if (!expect_smalls(1, WIN - 1, P0, __LINE__) ||
	    !EXPECT_PKT(WRITE_FIRST, P0 + WIN - 1, MTU) || !EXPECT_QUIET(100))
		return;
	ack(P0);
	expect_done(1, 1);
	if (!EXPECT_PKT(WRITE_MIDDLE, P0 + WIN, MTU) || !EXPECT_QUIET(100))
		return;
	ack(P0 + 1);
	expect_done(2, 1);
	/* The LAST, then the next message waits for STEP free packets. */
	if (!EXPECT_PKT(WRITE_LAST, P0 + WIN + 1, MTU) || !EXPECT_QUIET(150))
		return;
	ack(P0 + WIN + 1);
	expect_done(3, WIN - 2);
	if (!expect_smalls(WIN + 1, WIN + 1, P0 + WIN + 2, __LINE__))
		return;
	ack(P0 + WIN + 2);
	expect_done(WIN + 1, 1);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
}

int main(void)
{
	char v[16];

	sr_test_timeout(60);
	snprintf(v, sizeof(v), "%d", WIN);
	setenv("SOFTRDMA_MAX_INFLIGHT", v, 1);
	setenv("SOFTRDMA_POST_BATCH", "1", 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 8192, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 128, NULL, NULL, 0);
	REQUIRE(cq);

	opens_in_steps();
	message_begun_goes_on();

	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_window_gate");
}
