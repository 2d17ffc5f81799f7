/* SPDX-License-Identifier: MIT */
/*
 * An RC responder acknowledges a message before the completion that wakes a consumer sleeping
 * on the CQ's completion channel becomes visible.
 *
 * On a NIC the ACK leaves as the packet is processed, before the application can see the CQE,
 * so the peer always sees the ACK of its message before any answer to it. perftest's
 * ib_send_lat -e depends on it: it waits for "any event" on a channel shared by its send and
 * receive CQs, then polls one CQ once; if the answer arrives before the ACK, it polls the send
 * CQ in vain, reads an uninitialised work completion and stops, or leaves the completion in a
 * CQ of one entry, which then overruns. softrdma coalesces ACKs to one per receive batch, sent
 * after the batch: the woken consumer could answer before that.
 *
 * The peer here is a raw UDP socket of this test (tests/common/rawpeer.c). Each round it sends
 * one SEND asking for an ACK and, in the same burst, 31 WRITEs of 4 KiB that do not: the
 * progress thread receives them in one batch. The test thread sleeps in ibv_get_cq_event; the
 * moment it wakes, the ACK of the SEND must already be waiting at the raw socket. And the ACK
 * is not repeated at the end of the batch: exactly one ACK per round.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#define FAKE_QPN 0x00cafe
#define ROUNDS 20
#define BURST 31
#define WSIZE 4096
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf tgt, rbuf;
static struct rawpeer rp;

int main(void)
{
	struct ibv_comp_channel *chan;
	struct ibv_cq *cq, *ev_cq;
	struct ibv_qp *qp;
	struct vu_conn_cfg c;
	uint8_t hdr[64], msg[16], buf[WSIZE + 128];
	struct sr_pkt pkt;
	struct ibv_wc wc;
	uint32_t psn = 0;
	void *ev_ctx;
	int64_t acks0;

	sr_test_timeout(120);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &tgt, (BURST + 1) * WSIZE, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf, ROUNDS * 64, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	chan = ibv_create_comp_channel(dev.ctx);
	REQUIRE(chan);
	cq = ibv_create_cq(dev.ctx, 64, NULL, chan, 0);
	REQUIRE(cq);

	vu_conn_cfg_default(&c);
	c.mtu = IBV_MTU_4096;
	qp = vu_qp_to_peer(&dev, cq, &c, &rp.gid, FAKE_QPN, &rbuf, ROUNDS, 64);
	REQUIRE(qp);
	acks0 = vu_stat("acks_sent");
	memset(msg, 0x5a, sizeof(msg));
	vu_fill(buf, WSIZE, 1);

	for (int r = 0; r < ROUNDS; r++) {
		size_t hlen;
		int n;

		REQUIRE(ibv_req_notify_cq(cq, 0) == 0);
		hlen = rp_hdr_send(hdr, OPC(SEND_ONLY), qp->qp_num, psn, true);
		REQUIRE(rp_send(&rp, hdr, hlen, msg, sizeof(msg), 0) == 0);
		for (uint32_t k = 1; k <= BURST; k++) {
			hlen = rp_hdr_write(hdr, OPC(WRITE_ONLY), qp->qp_num, (psn + k) & 0xffffff,
					    false, (uintptr_t)tgt.p + k * WSIZE, tgt.mr->rkey,
					    WSIZE);
			REQUIRE(rp_send(&rp, hdr, hlen, buf, WSIZE, 0) == 0);
		}

		REQUIRE(ibv_get_cq_event(chan, &ev_cq, &ev_ctx) == 0);
		/* Woken: the ACK must be there already (a timeout of 0: no waiting). */
		n = rp_recv(&rp, buf + WSIZE, 128, &pkt, 0);
		if (n <= 0) {
			SR_FAIL("round %d: woken by the completion of PSN %u, but no ACK had been "
				"sent yet", r, psn);
		} else if (pkt.opcode != OPC(ACK) || pkt.psn != psn ||
			   sr_aeth_syndrome(sr_pkt_h(&pkt, SR_H_AETH)) !=
				   (SR_AETH_ACK | SR_AETH_ACK_UNLIMITED)) {
			SR_FAIL("round %d: first reply %s PSN %u, wanted the ACK of PSN %u", r,
				sr_opcode_name(pkt.opcode), pkt.psn, psn);
		} else {
			/* The MSN counts every message executed: this round's SEND is message r * 32 + 1. */
			CHECK_EQ(sr_aeth_msn(sr_pkt_h(&pkt, SR_H_AETH)), (uint32_t)(r * (BURST + 1) + 1));
		}
		ibv_ack_cq_events(ev_cq, 1);
		CHECK(ev_cq == cq);
		REQUIRE(vu_wait(cq, &wc, 2000) == 1);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(wc.opcode, IBV_WC_RECV);
		CHECK_EQ(wc.wr_id, (uint64_t)r);
		CHECK_EQ(wc.byte_len, sizeof(msg));
		psn = (psn + BURST + 1) & 0xffffff;
	}
	/* Every WRITE landed, and nothing else was answered: no second ACK for any SEND. */
	vu_drain(cq, &wc, 1, 100);
	CHECK_EQ(vu_check(tgt.p + WSIZE, WSIZE, 1), -1);
	CHECK_EQ(vu_check(tgt.p + BURST * WSIZE, WSIZE, 1), -1);
	CHECK(rp_recv(&rp, buf, sizeof(buf), &pkt, 50) == 0);
	CHECK_EQ(vu_stat("acks_sent") - acks0, ROUNDS);

	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_EQ(ibv_destroy_comp_channel(chan), 0);
	rp_close(&rp);
	vu_buf_free(&tgt);
	vu_buf_free(&rbuf);
	vu_close(&dev);
	return sr_test_done("test_ack_order");
}
