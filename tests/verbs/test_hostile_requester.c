/* SPDX-License-Identifier: MIT */
/*
 * A hostile responder: an RC QP whose path points at a raw UDP socket of this test
 * (tests/common/rawpeer.c), which reads the QP's requests and answers with forged responses:
 *
 *   - ghost ACKs and NAKs for PSNs never sent, and old ones (dropped, counted, nothing
 *     completes), then the real ACK (the WR completes);
 *   - every NAK code: the four IBA codes fail the WR with their status and flush the rest
 *     (the QP goes to ERR); each of the 27 reserved codes is ignored and counted;
 *   - an implied NAK (an ACK past a READ whose response never came): the READ does not
 *     complete without its data, and the WR behind it completes only after it;
 *   - READ responses with a far-future or an old PSN (dropped) and one longer than the READ
 *     (refused: not one byte past the READ's buffer is written);
 *   - a flood of 2,000 duplicate ACKs and NAKs once nothing is outstanding: dropped, nothing
 *     sent, nothing completed, and the QP still works.
 *
 * The QPs have timeout 0 (no local ACK timer, no tail-loss probe): only the forged packets
 * move them, so every reply and completion is the answer to one of them.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#define FAKE_QPN 0x00abcd
#define RVA 0x100000000ull
#define RKEY 0x1234
#define GUARD 0xee
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)
#define ACK_OK (SR_AETH_ACK | SR_AETH_ACK_UNLIMITED)

static struct vu_dev dev;
static struct vu_buf lb;
static struct rawpeer rp;
static struct ibv_cq *cq;
static struct ibv_qp *qp;

static struct ibv_qp *make_qp(uint32_t sq_psn)
{
	struct vu_conn_cfg c;

	vu_conn_cfg_raw(&c, sq_psn, 0);
	c.timeout = 0;		/* no timer: nothing is resent unless a packet asks for it */
	c.retry_cnt = 7;
	return vu_qp_connect_raw(&dev, cq, NULL, &c, &rp.gid, FAKE_QPN);
}

static void end_qp(void)
{
	struct ibv_wc wc;
	uint8_t buf[4096];

	CHECK_EQ(ibv_destroy_qp(qp), 0);
	while (rp_recv(&rp, buf, sizeof(buf), NULL, 20) > 0)
		;
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
}

/* The next request packet: opcode and PSN as wanted. */
#define EXPECT_PKT(op, psn) expect_pkt(op, psn, __LINE__)
static void expect_pkt(uint8_t op, uint32_t psn, int line)
{
	uint8_t buf[4096];
	struct sr_pkt pkt;

	if (rp_recv(&rp, buf, sizeof(buf), &pkt, 2000) <= 0) {
		SR_FAIL("line %d: no packet (wanted %s PSN %u)", line, sr_opcode_name(op), psn);
		return;
	}
	if (pkt.opcode != op || pkt.psn != psn)
		SR_FAIL("line %d: got %s PSN %u, wanted %s PSN %u", line, sr_opcode_name(pkt.opcode),
			pkt.psn, sr_opcode_name(op), psn);
}

static void ack(uint32_t psn, uint8_t syndrome)
{
	REQUIRE(rp_send_ack(&rp, qp->qp_num, psn, syndrome) == 0);
}

static void read_resp(uint32_t psn, const void *data, uint32_t len)
{
	REQUIRE(rp_send_read_resp(&rp, qp->qp_num, psn & 0xffffff, data, len, 4096, -1, 0) == 0);
}

/* Polls the CQ for ms: no completion may come. */
#define EXPECT_NO_WC(ms) expect_no_wc(ms, __LINE__)
static void expect_no_wc(int ms, int line)
{
	struct ibv_wc wc;

	if (vu_poll(cq, &wc, 1, ms) > 0)
		SR_FAIL("line %d: unexpected completion %s", line, vu_wc_str(&wc));
}

static int64_t stat_delta(const char *name, int64_t base, int64_t want, int ms)
{
	uint64_t end = vu_now_ms() + (uint64_t)ms;
	struct ibv_wc wc;
	int64_t d;

	for (;;) {
		d = vu_stat(name) - base;
		if (d >= want || vu_now_ms() >= end)
			return d;
		if (ibv_poll_cq(cq, 1, &wc) > 0)
			SR_FAIL("unexpected completion %s", vu_wc_str(&wc));
	}
}

#define EXPECT_STAT(name, base, n) \
	do { \
		int64_t d_ = stat_delta(name, base, n, 2000); \
		if (d_ != (n)) \
			SR_FAIL("line %d: counter %s went up by %lld, expected %lld", __LINE__, name, \
				(long long)d_, (long long)(n)); \
	} while (0)

static void test_ghosts_and_flood(void)
{
	const uint32_t P = 0x100;
	int64_t b;
	uint8_t buf[4096];

	printf("ghost and old ACKs/NAKs, then a duplicate flood\n");
	qp = make_qp(P);
	vu_fill(lb.p, 3000, 1);
	CHECK_EQ(vu_post_rdma(qp, 1, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 3000, RVA, RKEY,
			      IBV_SEND_SIGNALED), 0);
	EXPECT_PKT(OPC(WRITE_FIRST), P);
	EXPECT_PKT(OPC(WRITE_MIDDLE), P + 1);
	EXPECT_PKT(OPC(WRITE_LAST), P + 2);
	/* Never sent (far and near future), long acknowledged (old): dropped, nothing completes. */
	b = vu_stat("drop_psn");
	ack(P + 100, ACK_OK);
	ack(P + 3, ACK_OK);
	ack(P - 5, ACK_OK);
	ack(P + 0x400000, ACK_OK);
	ack(P + 50, SR_AETH_NAK | SR_NAK_INVALID_REQ);
	ack(P + 3, SR_AETH_NAK | SR_NAK_REM_ACCESS_ERR);
	ack(P - 1, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
	EXPECT_STAT("drop_psn", b, 7);
	EXPECT_NO_WC(20);
	CHECK_EQ(vu_qp_state(qp), IBV_QPS_RTS);
	CHECK(rp_recv(&rp, buf, sizeof(buf), NULL, 10) == 0);	/* nothing resent */
	/* The real ACK. */
	ack(P + 2, ACK_OK);
	vu_expect_wc(cq, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2000, __LINE__);

	/* Nothing outstanding: 1000 copies of that ACK and 1000 NAKs for the WRITE's PSNs. */
	b = vu_stat("drop_psn");
	for (int i = 0; i < 1000; i++) {
		ack(P + 2, ACK_OK);
		ack(P + (uint32_t)(i % 3), SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
		if (i % 64 == 63)
			vu_poll(cq, NULL, 0, 1);	/* let the engine keep up (socket buffer) */
	}
	EXPECT_STAT("drop_psn", b, 2000);
	EXPECT_NO_WC(10);
	CHECK(rp_recv(&rp, buf, sizeof(buf), NULL, 20) == 0);	/* no retransmission */
	CHECK_EQ(vu_qp_state(qp), IBV_QPS_RTS);
	/* The QP still works. */
	CHECK_EQ(vu_post_rdma(qp, 2, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 64, RVA, RKEY,
			      IBV_SEND_SIGNALED), 0);
	EXPECT_PKT(OPC(WRITE_ONLY), P + 3);
	ack(P + 3, ACK_OK);
	vu_expect_wc(cq, 2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2000, __LINE__);
	end_qp();
}

static void test_nak_codes(void)
{
	static const struct { uint8_t code; enum ibv_wc_status status; } iba[] = {
		{ SR_NAK_INVALID_REQ, IBV_WC_REM_INV_REQ_ERR },
		{ SR_NAK_REM_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR },
		{ SR_NAK_REM_OP_ERR, IBV_WC_REM_OP_ERR },
		{ SR_NAK_INVALID_RD_REQ, IBV_WC_REM_INV_RD_REQ_ERR },
	};
	const uint32_t S = 0x200;
	int64_t b;

	printf("every NAK code\n");
	for (size_t i = 0; i < sizeof(iba) / sizeof(iba[0]); i++) {
		qp = make_qp(S);
		CHECK_EQ(vu_post_rdma(qp, 10, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 64, RVA, RKEY,
				      IBV_SEND_SIGNALED), 0);
		CHECK_EQ(vu_post_rdma(qp, 11, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 64, RVA, RKEY,
				      IBV_SEND_SIGNALED), 0);
		EXPECT_PKT(OPC(WRITE_ONLY), S);
		b = vu_stat("naks_rcvd");
		ack(S, SR_AETH_NAK | iba[i].code);
		vu_expect_wc(cq, 10, iba[i].status, -1, 2000, __LINE__);
		vu_expect_wc(cq, 11, IBV_WC_WR_FLUSH_ERR, -1, 2000, __LINE__);
		CHECK_EQ(vu_stat("naks_rcvd") - b, 1);
		CHECK_EQ(vu_qp_state(qp), IBV_QPS_ERR);
		end_qp();
	}
	/* Reserved codes (5..31): ignored and counted; the real ACK still completes the WR. */
	qp = make_qp(S);
	CHECK_EQ(vu_post_rdma(qp, 12, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 64, RVA, RKEY,
			      IBV_SEND_SIGNALED), 0);
	EXPECT_PKT(OPC(WRITE_ONLY), S);
	b = vu_stat("drop_unexpected");
	for (uint8_t code = 5; code < 32; code++)
		ack(S, SR_AETH_NAK | code);
	EXPECT_STAT("drop_unexpected", b, 27);
	EXPECT_NO_WC(10);
	CHECK_EQ(vu_qp_state(qp), IBV_QPS_RTS);
	ack(S, ACK_OK);
	vu_expect_wc(cq, 12, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2000, __LINE__);
	end_qp();
}

static void test_read_responses(void)
{
	const uint32_t R = 0xfffffe;	/* across the PSN wrap */
	uint8_t data[256];
	int64_t b;
	struct ibv_wc wc;

	printf("implied NAK; READ responses with forged PSNs and lengths\n");
	/* An ACK past the READ (its response lost): the READ is asked again, it and the SEND
	 * behind it complete only once its data came, in order. */
	qp = make_qp(R);
	memset(lb.p, GUARD, 4096);
	vu_fill(data, sizeof(data), 4);
	CHECK_EQ(vu_post_rdma(qp, 20, IBV_WR_RDMA_READ, lb.mr, lb.p, 64, RVA, RKEY,
			      IBV_SEND_SIGNALED), 0);
	EXPECT_PKT(OPC(READ_REQ), R);
	CHECK_EQ(vu_post_send(qp, 21, IBV_WR_SEND, lb.mr, lb.p + 2048, 16, 0, IBV_SEND_SIGNALED),
		 0);
	ack(R + 1, ACK_OK);		/* covers the SEND's PSN, not yet sent (ghost) */
	ack(R, ACK_OK);			/* the READ's own PSN, no data: implied NAK */
	EXPECT_PKT(OPC(READ_REQ), R);	/* asked again */
	EXPECT_NO_WC(20);
	CHECK_EQ(vu_check_byte(lb.p, 64, GUARD), -1);

	/* Responses with a PSN far ahead or behind: dropped, nothing written. */
	b = vu_stat("drop_psn");
	read_resp(R + 0x400000, data, 64);
	read_resp(R - 1, data, 64);
	EXPECT_STAT("drop_psn", b, 2);
	CHECK_EQ(vu_check_byte(lb.p, 4096, GUARD), -1);
	/* The real one: the READ, then the SEND it held back. */
	read_resp(R, data, 64);
	vu_expect_wc(cq, 20, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 2000, __LINE__);
	CHECK_EQ(vu_check(lb.p, 64, 4), -1);
	CHECK_EQ(vu_check_byte(lb.p + 64, 2048 - 64, GUARD), -1);
	EXPECT_PKT(OPC(SEND_ONLY), (R + 1) & 0xffffff);
	ack(R + 1, ACK_OK);
	vu_expect_wc(cq, 21, IBV_WC_SUCCESS, IBV_WC_SEND, 2000, __LINE__);
	end_qp();

	/* A response longer than the READ: not one byte lands past the READ's 64. */
	qp = make_qp(0x300);
	memset(lb.p, GUARD, 4096);
	CHECK_EQ(vu_post_rdma(qp, 22, IBV_WR_RDMA_READ, lb.mr, lb.p, 64, RVA, RKEY,
			      IBV_SEND_SIGNALED), 0);
	EXPECT_PKT(OPC(READ_REQ), 0x300);
	read_resp(0x300, data, 256);
	if (vu_poll(cq, &wc, 1, 100) == 1) {
		printf("  a 256-byte response to a 64-byte READ: %s\n", vu_wc_str(&wc));
		CHECK(wc.status != IBV_WC_SUCCESS);
	} else {
		printf("  a 256-byte response to a 64-byte READ: dropped (no completion)\n");
	}
	CHECK_EQ(vu_check_byte(lb.p + 64, 4096 - 64, GUARD), -1);
	end_qp();
}

int main(void)
{
	sr_test_timeout(120);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_stat("rx_packets") >= 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 1 << 16, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 256, NULL, NULL, 0);
	REQUIRE(cq);

	test_ghosts_and_flood();
	test_nak_codes();
	test_read_responses();

	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_hostile_requester");
}
