/* SPDX-License-Identifier: MIT */
/*
 * Which packets of a stream of RC WRITEs ask for an ACK (src/transport/req.c, write_follows),
 * watched packet by packet: the QP's path points at a raw UDP socket of this test
 * (tests/common/rawpeer.c), which reads every request packet and answers with hand-made ACKs.
 *
 * The rule: a message's last packet asks for its ACK unless it is a plain RDMA WRITE that
 * another fresh, unfenced plain WRITE follows in the same pass of the requester, with room in
 * the window for that one's first packet. Every `every` packets one asks anyway (ack_every, or
 * half the window when that is smaller). So the last packet sent before the requester stops
 * (an empty queue, a full window, a fence, another kind of WQE next) always asks, and a
 * stream of small WRITEs is acknowledged every `every` packets instead of every message.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <stdlib.h>

#define FAKE_QPN 0x00cafe
#define RVA 0x100000000ull
#define RKEY 0x1234
#define P0 1000u
#define MAXN 16

static struct vu_dev dev;
static struct vu_buf lb;
static struct rawpeer rp;
static struct ibv_qp *qp;
static struct ibv_cq *cq;

#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

/* The next packet has this opcode and PSN, and asks for an ACK exactly when `ackreq`. */
#define EXPECT(op, psn, ackreq) expect_pkt(OPC(op), psn, ackreq, __LINE__)
static bool expect_pkt(uint8_t op, uint32_t psn, bool ackreq, int line)
{
	uint8_t buf[4096];
	struct sr_pkt pkt;

	if (rp_recv(&rp, buf, sizeof(buf), &pkt, 2000) <= 0) {
		SR_FAIL("line %d: no packet (wanted %s PSN %u)", line, sr_opcode_name(op), psn);
		return false;
	}
	if (pkt.opcode != op || pkt.psn != psn || pkt.ackreq != ackreq) {
		SR_FAIL("line %d: got %s PSN %u%s, wanted %s PSN %u%s", line,
			sr_opcode_name(pkt.opcode), pkt.psn, pkt.ackreq ? " (AckReq)" : "",
			sr_opcode_name(op), psn, ackreq ? " (AckReq)" : " without AckReq");
		return false;
	}
	return true;
}

static void ack(uint32_t psn)
{
	uint8_t hdr[64];
	size_t hlen = rp_hdr_ack(hdr, qp->qp_num, psn, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0);

	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
}

/* n completions, in order, wr_id first .. first + n - 1, all successful. */
static void expect_done(int first, int n)
{
	struct ibv_wc wc;

	for (int i = first; i < first + n; i++)
		if (!vu_wait(cq, &wc, 2000) || wc.wr_id != (uint64_t)i ||
		    wc.status != IBV_WC_SUCCESS) {
			SR_FAIL("WQE %d: %s, wanted success", i, vu_wc_str(&wc));
			return;
		}
}

/* Posts WQEs first .. first + n - 1 in one call (one pass of the requester): one byte each,
 * to RVA + i; op[k] the opcode of the k-th, flags[k] its send flags (NULL: none). */
static void post_chain(int first, int n, const enum ibv_wr_opcode *op, const unsigned *flags)
{
	struct ibv_send_wr wr[MAXN], *bad;
	struct ibv_sge sge[MAXN];

	REQUIRE(n <= MAXN);
	memset(wr, 0, sizeof(wr));
	for (int k = 0; k < n; k++) {
		int i = first + k;

		lb.p[i] = (uint8_t)i;
		sge[k] = (struct ibv_sge){ (uintptr_t)(lb.p + i), 1, lb.mr->lkey };
		wr[k].wr_id = (uint64_t)i;
		wr[k].sg_list = &sge[k];
		wr[k].num_sge = 1;
		wr[k].opcode = op ? op[k] : IBV_WR_RDMA_WRITE;
		wr[k].send_flags = IBV_SEND_SIGNALED | (flags ? flags[k] : 0);
		wr[k].wr.rdma.remote_addr = RVA + (uint64_t)i;
		wr[k].wr.rdma.rkey = RKEY;
		wr[k].next = k + 1 < n ? &wr[k + 1] : NULL;
	}
	CHECK_EQ(ibv_post_send(qp, wr, &bad), 0);
}

static void connect_qp(void)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	vu_conn_cfg_default(&c);
	c.sq_psn = P0;
	c.rq_psn = 0;
	c.timeout = 0;	/* no retransmission timer: every packet below is one the test asked for */
	qp = vu_qp_create(&dev, cq, cq, &q);
	REQUIRE(qp);
	REQUIRE(vu_qp_connect(qp, &c, &rp.gid, FAKE_QPN) == 0);
}

/* ack_every 4, window 64: six WRITEs in one post ask at the 4th (count) and the 6th (last). */
static void stream_asks_every_n(void)
{
	static const bool want[6] = { false, false, false, true, false, true };

	printf("a stream of WRITEs asks for an ACK every 4 packets and at its end\n");
	connect_qp();
	post_chain(1, 6, NULL, NULL);
	for (int k = 0; k < 6; k++)
		if (!EXPECT(WRITE_ONLY, P0 + (uint32_t)k, want[k]))
			return;
	if (!rp_expect_quiet(&rp, 100, "nothing after the stream", __LINE__))
		return;
	ack(P0 + 5);	/* one cumulative ACK completes all six */
	expect_done(1, 6);
	/* A lone WRITE afterwards asks for its ACK. */
	post_chain(7, 1, NULL, NULL);
	if (!EXPECT(WRITE_ONLY, P0 + 6, true))
		return;
	ack(P0 + 6);
	expect_done(7, 1);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
}

/* Only a plain, unfenced WRITE next lets a WRITE's ACK wait. */
static void other_kinds_next_ask(void)
{
	static const enum ibv_wr_opcode op[4] = { IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
						  IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE };
	static const unsigned fl[4] = { 0, 0, 0, IBV_SEND_FENCE };

	printf("a WRITE followed by a WRITE with immediate or a fenced WRITE asks\n");
	connect_qp();
	post_chain(1, 4, op, fl);
	if (!EXPECT(WRITE_ONLY, P0, true) || !EXPECT(WRITE_ONLY_IMM, P0 + 1, true) ||
	    !EXPECT(WRITE_ONLY, P0 + 2, true) || !EXPECT(WRITE_ONLY, P0 + 3, true))
		return;
	ack(P0 + 3);
	expect_done(1, 4);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
}

int main(void)
{
	sr_test_timeout(60);
	setenv("SOFTRDMA_ACK_EVERY", "4", 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq);

	stream_asks_every_n();
	other_kinds_next_ask();

	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_ack_coalesce");
}
