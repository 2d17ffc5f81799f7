/* SPDX-License-Identifier: MIT */
/*
 * The memory operations on the wire, played by a raw peer (tests/common/rawpeer.c) against a
 * live RC QP, so that duplicates and orderings are exact rather than left to fault injection:
 *  - ATOMIC WRITE is answered by an empty RDMA READ response; its duplicate gets the same
 *    answer and is not executed again, even after a later WRITE changed the word;
 *  - FLUSH likewise, and its duplicate;
 *  - malformed ones (FLUSH without a placement type or with an unknown selectivity, ATOMIC
 *    WRITE of 4 bytes or misaligned) are NAKed as invalid requests and touch nothing;
 *  - SEND with invalidate of a key nothing can invalidate is NAKed and fails the receive;
 *  - the responder's half of the seed-004 rule: a READ executed before a SEND with invalidate
 *    of its fast-registration key is replayed on a duplicate through the map it was executed
 *    with (map_replays counts it), while a new READ with that key gets a remote access error;
 *  - a READ replayed after its MR was deregistered gets a remote access error NAK for the piece
 *    it resumes at (before, the responder sent nothing and the requester timed out).
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <softrdma/softrdma.h>

#define GUARD 0xee
#define PEER_QPN 0x00f00d
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf tgt;
static struct ibv_mr *fmr;	/* tgt, with FLUSH_GLOBAL too */
static struct rawpeer rp;
static struct ibv_cq *vcq;
static struct ibv_cq *idle;	/* never gets a completion: polling it drives the receive path */

static void pump(int ms)
{
	rp_pump(idle, ms);
}

/* The next packet from the QP, parsed into *pkt (buf holds it); false on a timeout. */
static bool next_pkt(uint8_t *buf, size_t cap, struct sr_pkt *pkt)
{
	return rp_recv_polling(&rp, idle, buf, cap, pkt, 2000) > 0;
}

#define EXPECT(op, syn, psn, paylen) expect(OPC(op), syn, psn, paylen, __LINE__)
static void expect(uint8_t op, uint8_t syn, uint32_t psn, uint32_t paylen, int line)
{
	uint8_t buf[2048];
	struct sr_pkt pkt;

	if (!next_pkt(buf, sizeof(buf), &pkt)) {
		SR_FAIL("line %d: no %s PSN %u", line, sr_opcode_name(op), psn);
		return;
	}
	uint8_t got = (pkt.mask & SR_M_AETH) ? sr_aeth_syndrome(sr_pkt_h(&pkt, SR_H_AETH)) : 0;

	if (pkt.opcode != op || got != syn || pkt.psn != psn || pkt.paylen != paylen)
		SR_FAIL("line %d: got %s syn 0x%02x PSN %u len %u, wanted %s syn 0x%02x PSN %u len %u",
			line, sr_opcode_name(pkt.opcode), got, pkt.psn, pkt.paylen,
			sr_opcode_name(op), syn, psn, paylen);
}

static void expect_silence(void)
{
	uint8_t buf[2048];
	struct sr_pkt pkt;

	pump(20);
	if (rp_recv(&rp, buf, sizeof(buf), &pkt, 0) > 0)
		SR_FAIL("unexpected %s PSN %u", sr_opcode_name(pkt.opcode), pkt.psn);
}

static struct ibv_qp *victim(unsigned access, uint32_t rq_psn, uint64_t send_ops)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.send_ops_flags = send_ops;
	vu_conn_cfg_raw(&c, 0, rq_psn);
	c.access = access;
	return vu_qp_connect_raw(&dev, vcq, &q, &c, &rp.gid, PEER_QPN);
}

static void send_aw(uint32_t qpn, uint32_t psn, uint64_t va, uint32_t rkey, const void *v,
		    uint32_t len)
{
	uint8_t hdr[64];
	size_t hlen = rp_hdr_write(hdr, OPC(ATOMIC_WRITE), qpn, psn, true, va, rkey, len);

	REQUIRE(rp_send(&rp, hdr, hlen, v, len, 0) == 0);
}

static void send_flush(uint32_t qpn, uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len,
		       unsigned sel, unsigned plt)
{
	uint8_t hdr[64];
	size_t hlen = rp_hdr_write(hdr, OPC(FLUSH), qpn, psn, true, va, rkey, len);

	sr_feth_build((struct sr_feth *)(hdr + sr_opcode[OPC(FLUSH)].offset[SR_H_FETH]), sel, plt);
	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
}

static void test_atomic_write_replay(void)
{
	const uint8_t ack = SR_AETH_ACK | SR_AETH_ACK_UNLIMITED;
	struct ibv_qp *v = victim(IBV_ACCESS_REMOTE_WRITE | SOFTRDMA_ACCESS_FLUSH_GLOBAL, 0, 0);
	uint64_t *word = (uint64_t *)(tgt.p + 64), a = 0xaaaaaaaaaaaaaaaaull, b = 0x5555555555555555ull;
	uint8_t hdr[64];
	int64_t dup0;

	send_aw(v->qp_num, 0, (uintptr_t)word, fmr->rkey, &a, 8);
	EXPECT(READ_RESP_ONLY, ack, 0, 0);
	CHECK_EQ(*word, a);
	/* A WRITE over it. */
	size_t hlen = rp_hdr_write(hdr, OPC(WRITE_ONLY), v->qp_num, 1, true, (uintptr_t)word,
				   fmr->rkey, 8);

	REQUIRE(rp_send(&rp, hdr, hlen, &b, 8, 0) == 0);
	EXPECT(ACK, ack, 1, 0);
	CHECK_EQ(*word, b);
	/* The ATOMIC WRITE again (its answer was "lost"): answered, not executed. */
	dup0 = vu_stat("dup_requests");
	send_aw(v->qp_num, 0, (uintptr_t)word, fmr->rkey, &a, 8);
	EXPECT(READ_RESP_ONLY, ack, 0, 0);
	CHECK_EQ(*word, b);
	CHECK_EQ(vu_stat("dup_requests") - dup0, 1);
	/* FLUSH, and its duplicate. */
	send_flush(v->qp_num, 2, (uintptr_t)tgt.p, fmr->rkey, 4096, SOFTRDMA_FLUSH_RANGE, SOFTRDMA_FLUSH_GLOBAL);
	EXPECT(READ_RESP_ONLY, ack, 2, 0);
	send_flush(v->qp_num, 2, (uintptr_t)tgt.p, fmr->rkey, 4096, SOFTRDMA_FLUSH_RANGE, SOFTRDMA_FLUSH_GLOBAL);
	EXPECT(READ_RESP_ONLY, ack, 2, 0);
	send_flush(v->qp_num, 3, 0, fmr->rkey, 0, SOFTRDMA_FLUSH_MR, SOFTRDMA_FLUSH_GLOBAL);
	EXPECT(READ_RESP_ONLY, ack, 3, 0);
	expect_silence();
	CHECK_EQ(ibv_destroy_qp(v), 0);
}

static void test_malformed(void)
{
	const uint8_t inv = SR_AETH_NAK | SR_NAK_INVALID_REQ;
	const unsigned acc = IBV_ACCESS_REMOTE_WRITE | SOFTRDMA_ACCESS_FLUSH_GLOBAL;
	uint64_t a = 0x1111111111111111ull;
	struct ibv_qp *v;

	memset(tgt.p, GUARD, tgt.len);
	v = victim(acc, 0, 0);
	send_flush(v->qp_num, 0, (uintptr_t)tgt.p, fmr->rkey, 64, SOFTRDMA_FLUSH_RANGE, 0);
	EXPECT(ACK, inv, 0, 0);
	CHECK_EQ(ibv_destroy_qp(v), 0);
	v = victim(acc, 0, 0);
	send_flush(v->qp_num, 0, (uintptr_t)tgt.p, fmr->rkey, 64, 2, SOFTRDMA_FLUSH_GLOBAL);
	EXPECT(ACK, inv, 0, 0);
	CHECK_EQ(ibv_destroy_qp(v), 0);
	v = victim(acc, 0, 0);
	send_aw(v->qp_num, 0, (uintptr_t)tgt.p, fmr->rkey, &a, 4);
	EXPECT(ACK, inv, 0, 0);
	CHECK_EQ(ibv_destroy_qp(v), 0);
	v = victim(acc, 0, 0);
	send_aw(v->qp_num, 0, (uintptr_t)tgt.p + 4, fmr->rkey, &a, 8);
	EXPECT(ACK, inv, 0, 0);
	CHECK_EQ(ibv_destroy_qp(v), 0);
	CHECK_EQ(vu_check_byte(tgt.p, tgt.len, GUARD), -1);
	/* SEND with invalidate of an ordinary MR's key. */
	v = victim(acc, 0, 0);
	CHECK_EQ(vu_post_recv(v, 7, tgt.mr, tgt.p, 64), 0);
	{
		uint8_t hdr[64];
		size_t hlen = rp_hdr_send(hdr, OPC(SEND_ONLY_INV), v->qp_num, 0, true);
		struct ibv_wc wc;

		sr_ieth_build((struct sr_ieth *)(hdr + sr_opcode[OPC(SEND_ONLY_INV)].offset[SR_H_IETH]),
			      tgt.mr->rkey);
		REQUIRE(rp_send(&rp, hdr, hlen, &a, 8, 0) == 0);
		EXPECT(ACK, inv, 0, 0);
		CHECK_EQ(vu_wait(vcq, &wc, 2000), 1);
		CHECK_EQ(wc.wr_id, 7);
		CHECK_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
	}
	CHECK_EQ(ibv_destroy_qp(v), 0);
}

/* The responder judges a READ replay by the PSN of the READ, against the map it was executed
 * with, although a SEND with invalidate of that key came in between. */
static void test_read_replay_after_invalidate(void)
{
	const uint8_t ack = SR_AETH_ACK | SR_AETH_ACK_UNLIMITED;
	struct ibv_mr *mr = softrdma_alloc_mr(dev.pd, 2);
	struct ibv_qp *v = victim(IBV_ACCESS_REMOTE_READ, 10, IBV_QP_EX_WITH_SEND);
	struct ibv_sge sg = { .addr = (uintptr_t)tgt.p + 8192, .length = 2048 };
	uint8_t hdr[64], buf[2048];
	struct sr_pkt pkt;
	struct ibv_wc wc;
	uint32_t key;
	int64_t replays0;

	REQUIRE(mr);
	vu_fill(tgt.p + 8192, 2048, 61);
	key = softrdma_update_fast_reg_key(mr, 0x42);
	CHECK_EQ(softrdma_map_mr_sg(mr, &sg, 1, 4096), 1);
	{
		struct ibv_qp_ex *x = ibv_qp_to_qp_ex(v);

		REQUIRE(x);
		ibv_wr_start(x);
		x->wr_id = 1;
		x->wr_flags = IBV_SEND_SIGNALED;
		softrdma_wr_reg_mr(x, mr, key, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
		CHECK_EQ(ibv_wr_complete(x), 0);
		CHECK_EQ(vu_wait(vcq, &wc, 2000), 1);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	}
	/* READ of 2048 bytes at PSN 10: responses 10 and 11 (MTU 1024). */
	size_t hlen = rp_hdr_write(hdr, OPC(READ_REQ), v->qp_num, 10, true, sg.addr, key, 2048);

	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
	EXPECT(READ_RESP_FIRST, ack, 10, 1024);
	EXPECT(READ_RESP_LAST, ack, 11, 1024);
	/* SEND with invalidate at PSN 12. */
	CHECK_EQ(vu_post_recv(v, 2, tgt.mr, tgt.p, 64), 0);
	hlen = rp_hdr_send(hdr, OPC(SEND_ONLY_INV), v->qp_num, 12, true);
	sr_ieth_build((struct sr_ieth *)(hdr + sr_opcode[OPC(SEND_ONLY_INV)].offset[SR_H_IETH]), key);
	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
	EXPECT(ACK, ack, 12, 0);
	CHECK_EQ(vu_wait(vcq, &wc, 2000), 1);
	CHECK_EQ(wc.wr_id, 2);
	CHECK(wc.wc_flags & IBV_WC_WITH_INV);
	CHECK_EQ(wc.invalidated_rkey, key);
	/* The READ again (its responses were "lost"): replayed from the old map. */
	replays0 = vu_stat("map_replays");
	hlen = rp_hdr_write(hdr, OPC(READ_REQ), v->qp_num, 10, true, sg.addr, key, 2048);
	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
	for (uint32_t i = 0; i < 2; i++) {
		if (!next_pkt(buf, sizeof(buf), &pkt)) {
			SR_FAIL("no replayed response %u", i);
			break;
		}
		CHECK_EQ(pkt.psn, 10 + i);
		CHECK_EQ(pkt.paylen, 1024);
		if (pkt.paylen == 1024 && memcmp(sr_pkt_payload(&pkt), tgt.p + 8192 + i * 1024, 1024))
			SR_FAIL("replayed response %u is not the READ's data", i);
	}
	CHECK(vu_stat("map_replays") - replays0 >= 2);
	/* A new READ with that key: dead. */
	hlen = rp_hdr_write(hdr, OPC(READ_REQ), v->qp_num, 13, true, sg.addr, key, 64);
	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
	EXPECT(ACK, SR_AETH_NAK | SR_NAK_REM_ACCESS_ERR, 13, 0);
	CHECK_EQ(ibv_destroy_qp(v), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
}

/* A duplicate READ whose MR is gone: NAKed (remote access error) at the PSN it resumes at. */
static void test_read_replay_after_dereg(void)
{
	const uint8_t ack = SR_AETH_ACK | SR_AETH_ACK_UNLIMITED;
	struct ibv_qp *v = victim(IBV_ACCESS_REMOTE_READ, 20, 0);
	struct ibv_mr *mr = ibv_reg_mr(dev.pd, tgt.p + 16384, 2048, IBV_ACCESS_REMOTE_READ);
	uint64_t va = (uintptr_t)tgt.p + 16384;
	uint8_t hdr[64];
	uint32_t rkey;
	size_t hlen;
	int64_t naks0;

	REQUIRE(mr);
	rkey = mr->rkey;
	/* READ of 2048 bytes at PSN 20: responses 20 and 21 (MTU 1024). */
	hlen = rp_hdr_write(hdr, OPC(READ_REQ), v->qp_num, 20, true, va, rkey, 2048);
	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
	EXPECT(READ_RESP_FIRST, ack, 20, 1024);
	EXPECT(READ_RESP_LAST, ack, 21, 1024);
	naks0 = vu_stat("access_naks_sent");
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	/* The requester lost the second response and asks again from there. */
	hlen = rp_hdr_write(hdr, OPC(READ_REQ), v->qp_num, 21, true, va + 1024, rkey, 1024);
	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
	EXPECT(ACK, SR_AETH_NAK | SR_NAK_REM_ACCESS_ERR, 21, 0);
	CHECK_EQ(vu_stat("access_naks_sent") - naks0, 1);
	CHECK_EQ(vu_qp_state(v), IBV_QPS_ERR);
	expect_silence();
	CHECK_EQ(ibv_destroy_qp(v), 0);
}

int main(void)
{
	sr_test_timeout(60);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &tgt, 1u << 16, VU_ACCESS_ALL) == 0);
	fmr = ibv_reg_mr(dev.pd, tgt.p, tgt.len, (int)(VU_ACCESS_ALL | SOFTRDMA_ACCESS_FLUSH_GLOBAL));
	REQUIRE(fmr);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	vcq = ibv_create_cq(dev.ctx, 256, NULL, NULL, 0);
	idle = ibv_create_cq(dev.ctx, 4, NULL, NULL, 0);
	REQUIRE(vcq && idle);
	test_atomic_write_replay();
	test_malformed();
	test_read_replay_after_invalidate();
	test_read_replay_after_dereg();
	rp_close(&rp);
	ibv_destroy_cq(vcq);
	ibv_destroy_cq(idle);
	ibv_dereg_mr(fmr);
	vu_buf_free(&tgt);
	vu_close(&dev);
	return sr_test_done("test_memory_wire");
}
