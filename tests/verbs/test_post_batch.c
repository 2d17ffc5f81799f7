/* SPDX-License-Identifier: MIT */
/*
 * Post batching (param post_batch, src/engine/post.c post_deferred), watched packet by packet: the
 * RC QP's path points at a raw UDP socket of this test (tests/common/rawpeer.c), which reads every
 * request packet and answers with hand-made ACKs.
 *
 * The rule: a QP with nothing in flight sends a posted WQE at once. A WQE posted while an older
 * one waits for its ACK stays in the SQ until the ACK comes or post_batch WQEs wait; a QP that
 * leaves RTS flushes the held WQEs like any other. Only what is smaller than one packet waits,
 * and a message of exactly one packet behind another of at least one (a stream of one-packet
 * messages), or of a few packets (param post_batch_pkts, 4) behind such a one: a SEND or WRITE
 * that fills more, or a whole packet behind a small one, leaves at once, with the held ones
 * before it. post_batch is 4 here (32 by default), so a few posts reach the threshold.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <stdlib.h>

#define MTU 1024
#define FAKE_QPN 0x00beef
#define RVA 0x100000000ull
#define RKEY 0x4321
#define BATCH 4
#define P0 500u

static struct vu_dev dev;
static struct vu_buf lb;
static struct rawpeer rp;
static struct ibv_qp *qp;
static struct ibv_cq *cq;

#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

/* The next packet is an RDMA WRITE ONLY with this PSN, carrying message i (one byte, i). */
#define EXPECT_WRITE(psn, i) expect_write(psn, i, __LINE__)
static bool expect_write(uint32_t psn, int i, int line)
{
	uint8_t buf[4096];
	struct sr_pkt pkt;

	if (rp_recv(&rp, buf, sizeof(buf), &pkt, 2000) <= 0) {
		SR_FAIL("line %d: no packet (wanted WRITE ONLY PSN %u)", line, psn);
		return false;
	}
	if (pkt.opcode != OPC(WRITE_ONLY) || pkt.psn != psn || pkt.paylen != 1 ||
	    ((const uint8_t *)sr_pkt_payload(&pkt))[0] != (uint8_t)i) {
		SR_FAIL("line %d: got %s PSN %u (%u bytes), wanted WRITE ONLY PSN %u of message %d",
			line, sr_opcode_name(pkt.opcode), pkt.psn, pkt.paylen, psn, i);
		return false;
	}
	return true;
}

/* Nothing is sent for ms: the posted WQEs are held. */
#define EXPECT_HELD(ms) \
	rp_expect_quiet(&rp, ms, "nothing while an older WQE waits for its ACK", __LINE__)

static void ack(uint32_t psn)
{
	REQUIRE(rp_send_ack(&rp, qp->qp_num, psn, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED) == 0);
}

/* Message i: one byte of value i, from its own byte of lb, to RVA + i. */
static int post(int i)
{
	lb.p[i] = (uint8_t)i;
	return vu_post_rdma(qp, (uint64_t)i, IBV_WR_RDMA_WRITE, lb.mr, lb.p + i, 1,
			    RVA + (uint64_t)i, RKEY, 0);
}

/* n completions, in order, wr_id first .. first + n - 1, with this status. */
static void expect_done(int first, int n, enum ibv_wc_status st)
{
	for (int i = first; i < first + n; i++)
		if (vu_expect_wc(cq, (uint64_t)i, st, -1, 2000, __LINE__).status != st)
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

/* A new QP; message 1 leaves at once (nothing in flight), 2 and 3 wait behind it. */
static bool one_sent_two_held(void)
{
	connect_qp();
	CHECK_EQ(post(1), 0);
	if (!EXPECT_WRITE(P0, 1))
		return false;
	CHECK_EQ(post(2), 0);
	CHECK_EQ(post(3), 0);
	return EXPECT_HELD(150);
}

/* Held behind an ACK, then released by it; held until BATCH wait, then sent together. */
static void held_until_ack_or_batch(void)
{
	printf("a WQE behind one in flight waits for its ACK, or for %d to wait\n", BATCH);
	if (!one_sent_two_held())
		return;
	/* 1's ACK sends both (the completer runs the requester). */
	ack(P0);
	expect_done(1, 1, IBV_WC_SUCCESS);
	if (!EXPECT_WRITE(P0 + 1, 2) || !EXPECT_WRITE(P0 + 2, 3))
		return;
	/* 2 and 3 in flight: 4, 5, 6 wait; the 4th waiting WQE (7) sends all four. */
	for (int i = 4; i <= 6; i++)
		CHECK_EQ(post(i), 0);
	if (!EXPECT_HELD(150))
		return;
	CHECK_EQ(post(7), 0);
	for (int i = 4; i <= 7; i++)
		if (!EXPECT_WRITE(P0 + (uint32_t)i - 1, i))
			return;
	/* One coalesced ACK completes all six. */
	ack(P0 + 6);
	expect_done(2, 6, IBV_WC_SUCCESS);
	/* Nothing in flight again: no wait. */
	CHECK_EQ(post(8), 0);
	if (!EXPECT_WRITE(P0 + 7, 8))
		return;
	ack(P0 + 7);
	expect_done(8, 1, IBV_WC_SUCCESS);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
}

/* The next packet is opcode op with this PSN and len bytes of payload. */
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

/* The next packets are one WRITE of n > 1 full packets (FIRST, MIDDLEs, LAST) from PSN psn. */
static bool expect_write_pkts(uint32_t psn, uint32_t n, int line)
{
	for (uint32_t k = 0; k < n; k++)
		if (!expect_pkt(!k ? OPC(WRITE_FIRST) : k == n - 1 ? OPC(WRITE_LAST) : OPC(WRITE_MIDDLE),
				psn + k, MTU, line))
			return false;
	return true;
}

/* As Nagle's algorithm holds only segments smaller than a packet: a WRITE that fills whole
 * packets leaves at once, behind the small ones held before it, with no ACK (UCX's
 * rendezvous by WRITE posts a small head, then the rest of the message). */
static void full_packet_not_held(void)
{
	printf("a WQE of at least one full packet is not held, nor what waits before it\n");
	if (!one_sent_two_held())
		return;
	memset(lb.p + 2048, 0x5a, 2 * MTU);
	CHECK_EQ(vu_post_rdma(qp, 4, IBV_WR_RDMA_WRITE, lb.mr, lb.p + 2048, 2 * MTU, RVA + 2048,
			      RKEY, 0), 0);
	if (!EXPECT_WRITE(P0 + 1, 2) || !EXPECT_WRITE(P0 + 2, 3) ||
	    !expect_write_pkts(P0 + 3, 2, __LINE__))
		return;
	/* A small one behind the big one in flight is held again. */
	CHECK_EQ(post(5), 0);
	if (!EXPECT_HELD(150))
		return;
	ack(P0 + 4);
	expect_done(1, 4, IBV_WC_SUCCESS);
	if (!EXPECT_WRITE(P0 + 5, 5))
		return;
	ack(P0 + 5);
	expect_done(5, 1, IBV_WC_SUCCESS);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
}

/* Message i: n full packets (n x MTU bytes) from lb + 2048, to RVA + 2048. */
static int post_pkts(int i, uint32_t n)
{
	memset(lb.p + 2048, i, n * MTU);
	return vu_post_rdma(qp, (uint64_t)i, IBV_WR_RDMA_WRITE, lb.mr, lb.p + 2048, n * MTU,
			    RVA + 2048, RKEY, 0);
}

static int post_full(int i)
{
	return post_pkts(i, 1);
}

/* A new QP with message 1, one full packet, in flight (it left at once: nothing was). */
static bool one_full_in_flight(void)
{
	connect_qp();
	CHECK_EQ(post_full(1), 0);
	return expect_pkt(OPC(WRITE_ONLY), P0, MTU, __LINE__);
}

/* A stream of one-packet messages is held like small ones (its ONLY packets then leave
 * together, one GSO send); one packet behind a small head is not (UCX's rendezvous). */
static void one_packet_stream(void)
{
	printf("a WQE of exactly one packet waits behind one of at least a packet, not behind a "
	       "small one\n");
	if (!one_full_in_flight())
		return;
	CHECK_EQ(post_full(2), 0);
	CHECK_EQ(post_full(3), 0);
	if (!EXPECT_HELD(150))
		return;
	ack(P0);
	expect_done(1, 1, IBV_WC_SUCCESS);
	if (!expect_pkt(OPC(WRITE_ONLY), P0 + 1, MTU, __LINE__) ||
	    !expect_pkt(OPC(WRITE_ONLY), P0 + 2, MTU, __LINE__))
		return;
	ack(P0 + 2);
	expect_done(2, 2, IBV_WC_SUCCESS);
	/* Nothing in flight: the small one leaves; the full one behind it is not held. */
	CHECK_EQ(post(4), 0);
	if (!EXPECT_WRITE(P0 + 3, 4))
		return;
	CHECK_EQ(post_full(5), 0);
	if (!expect_pkt(OPC(WRITE_ONLY), P0 + 4, MTU, __LINE__))
		return;
	ack(P0 + 4);
	expect_done(4, 2, IBV_WC_SUCCESS);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
}

/* A WRITE of a few whole packets (at most post_batch_pkts) waits behind one of at least a
 * packet, as a one-packet one does (a stream of 4 KiB WRITEs on a network of MTU 1500); one of
 * more leaves at once, with it. */
static void few_packet_stream(void)
{
	printf("a WQE of up to post_batch_pkts packets waits behind one of at least a packet; "
	       "one of more does not\n");
	if (!one_full_in_flight())
		return;
	CHECK_EQ(post_pkts(2, 4), 0);
	if (!EXPECT_HELD(150))
		return;
	CHECK_EQ(post_pkts(3, 5), 0);
	if (!expect_write_pkts(P0 + 1, 4, __LINE__) || !expect_write_pkts(P0 + 5, 5, __LINE__))
		return;
	ack(P0 + 9);
	expect_done(1, 3, IBV_WC_SUCCESS);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
}

/* Held WQEs are WQEs like any other: a QP moved to ERR flushes them, in order, after the one in
 * flight. */
static void held_then_flushed(void)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	printf("held WQEs are flushed when the QP goes to ERR\n");
	if (!one_sent_two_held())
		return;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	expect_done(1, 3, IBV_WC_WR_FLUSH_ERR);
	if (!EXPECT_HELD(100))
		return;
	CHECK_EQ(ibv_destroy_qp(qp), 0);
}

int main(void)
{
	char v[16];

	sr_test_timeout(60);
	snprintf(v, sizeof(v), "%d", BATCH);
	setenv("SOFTRDMA_POST_BATCH", v, 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 8192, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq);

	held_until_ack_or_batch();
	held_then_flushed();
	full_packet_not_held();
	one_packet_stream();
	few_packet_stream();

	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_post_batch");
}
