/* SPDX-License-Identifier: MIT */
/*
 * Karn's rule for the RC requester's round-trip samples, and the responder's answer to a repair
 * when the next packet is missing too; both driven packet by packet by a scripted peer (a raw
 * UDP socket of this test, tests/common/rawpeer.c).
 *
 * The requester samples the round trip on one packet per flight (the first that asks for an
 * ACK), from its send to the ACK that covers it. ACKs are cumulative: when a packet before the
 * sampled one is lost, the peer acknowledges the sampled one only once the resent copy has
 * filled the gap, and that sample measures the repair, not the path. Under 20 % loss such
 * samples made SRTT grow to milliseconds on loopback and every timer wait as long (the chaos
 * figures, docs/reliability.md). So a sample is given up when a packet at or before it is sent
 * again (counter rtt_karn_discards), and still taken when the loss comes after it.
 *
 * What is asserted are counts (rtt_samples, rtt_karn_discards), not times: the QPs have no
 * timer (timeout 0), so nothing is sent but what the script provokes. The peer holds its answer
 * to the repair for HOLD_MS, so that a sample taken across it would also show in the sum
 * (printed, not asserted).
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <stdlib.h>
#include <unistd.h>

#define MTU 1024
#define FAKE_QPN 0x00beef
#define RVA 0x100000000ull
#define RKEY 0x1234
#define HOLD_MS 200
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf lb;
static struct rawpeer rp;
static struct ibv_cq *cq;
static struct ibv_qp *qp;

/* The next packet from the QP is (op, psn), asking for an ACK when `ackreq`. */
#define EXPECT_PKT(op, psn) expect_pkt(op, psn, false, __LINE__)
#define EXPECT_REPAIR(op, psn) expect_pkt(op, psn, true, __LINE__)
static bool expect_pkt(uint8_t op, uint32_t psn, bool ackreq, int line)
{
	uint8_t buf[4096];
	struct sr_pkt pkt;
	int n = rp_recv(&rp, buf, sizeof(buf), &pkt, 2000);

	if (n <= 0) {
		SR_FAIL("line %d: no packet (wanted %s PSN %u)", line, sr_opcode_name(op), psn);
		return false;
	}
	if (pkt.opcode != op || pkt.psn != psn || (ackreq && !pkt.ackreq)) {
		SR_FAIL("line %d: got %s PSN %u%s, wanted %s PSN %u%s", line,
			sr_opcode_name(pkt.opcode), pkt.psn, pkt.ackreq ? " (AckReq)" : "",
			sr_opcode_name(op), psn, ackreq ? " asking for an ACK" : "");
		return false;
	}
	return true;
}

static void answer(uint32_t psn, uint8_t syndrome)
{
	uint8_t hdr[64];
	size_t hlen = rp_hdr_ack(hdr, qp->qp_num, psn, syndrome, 0);

	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
}

static void expect_done(uint64_t wr_id, int line)
{
	struct ibv_wc wc;

	if (!vu_wait(cq, &wc, 2000) || wc.wr_id != wr_id || wc.status != IBV_WC_SUCCESS)
		SR_FAIL("line %d: WRITE %llu did not complete: %s", line,
			(unsigned long long)wr_id, vu_wc_str(&wc));
}

/* A WRITE of 8 packets from PSN p, all read by the peer. */
static bool write8(uint64_t wr_id, uint32_t p)
{
	bool ok;

	CHECK_EQ(vu_post_rdma(qp, wr_id, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 8 * MTU, RVA, RKEY, 0), 0);
	ok = EXPECT_PKT(OPC(WRITE_FIRST), p);
	for (uint32_t i = 1; ok && i < 7; i++)
		ok = EXPECT_PKT(OPC(WRITE_MIDDLE), p + i);
	return ok && EXPECT_PKT(OPC(WRITE_LAST), p + 7);
}

struct snap {
	int64_t samples, sample_us, discards;
};

static void snap(struct snap *s)
{
	s->samples = vu_stat("rtt_samples");
	s->sample_us = vu_stat("rtt_sample_us");
	s->discards = vu_stat("rtt_karn_discards");
}

/* A new RC QP toward the raw peer sending from PSN sq_psn, expecting rq_psn; a window of 8. */
static void new_qp(uint32_t sq_psn, uint32_t rq_psn)
{
	struct vu_conn_cfg c;

	vu_conn_cfg_raw(&c, sq_psn, rq_psn);
	c.timeout = 0;	/* no timer: no probe, no fast retransmission, only the script */
	qp = vu_qp_connect_raw(&dev, cq, NULL, &c, &rp.gid, FAKE_QPN);
}

static void end_qp(void)
{
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	while (rp_recv(&rp, lb.p + 8 * MTU, 4096, NULL, 20) > 0)
		;
}

/* Each flight on a QP of its own: after a loss the window shrinks (req.c sr_cwnd_loss), and
 * the flights here are whole windows of 8. */
static void requester(void)
{
	const uint32_t P = 100;
	struct snap s0, s1, s2, s3;

	vu_fill(lb.p, 8 * MTU, 3);
	new_qp(P, 0);

	/* A clean flight: one sample. */
	printf("WRITE of 8 packets, acknowledged: one round-trip sample\n");
	snap(&s0);
	if (!write8(1, P))
		goto out;
	answer(P + 7, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	expect_done(1, __LINE__);
	snap(&s1);
	CHECK_EQ(s1.samples - s0.samples, 1);
	CHECK_EQ(s1.discards - s0.discards, 0);

	/* The third packet lost, before the sampled one (the first asking for an ACK, the fourth
	 * with a window of 8): NAK, the packet resent alone, answered HOLD_MS later by the ACK
	 * of the whole WRITE. That ACK covers a packet sent twice: no sample. */
	printf("WRITE of 8 packets, its third lost, repaired %d ms later: no sample (Karn)\n",
	       HOLD_MS);
	end_qp();
	new_qp(P + 8, 0);
	if (!write8(2, P + 8))
		goto out;
	answer(P + 8 + 2, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
	if (!EXPECT_REPAIR(OPC(WRITE_MIDDLE), P + 8 + 2))
		goto out;
	usleep(HOLD_MS * 1000);
	answer(P + 8 + 7, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	expect_done(2, __LINE__);
	snap(&s2);
	CHECK_EQ(s2.samples - s1.samples, 0);
	CHECK_EQ(s2.discards - s1.discards, 1);

	/* The sixth packet lost, after the sampled one: the NAK acknowledges the sampled packet,
	 * and the sample is taken then; the repair that follows does not touch it. */
	printf("WRITE of 8 packets, its sixth lost: sampled by the NAK\n");
	end_qp();
	new_qp(P + 16, 0);
	if (!write8(3, P + 16))
		goto out;
	answer(P + 16 + 5, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
	if (!EXPECT_REPAIR(OPC(WRITE_MIDDLE), P + 16 + 5))
		goto out;
	answer(P + 16 + 7, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	expect_done(3, __LINE__);
	snap(&s3);
	CHECK_EQ(s3.samples - s2.samples, 1);
	CHECK_EQ(s3.discards - s2.discards, 0);
	printf("samples %lld, %lld us in all (a sample across the %d ms hold would be more)\n",
	       (long long)(s3.samples - s0.samples), (long long)(s3.sample_us - s0.sample_us),
	       HOLD_MS);
out:
	end_qp();
}

/*
 * The responder: two packets lost in a row. The repair of the first fills the first gap, but
 * the packets kept after the second (resp.c, ooo_keep) cannot run yet: the answer is a NAK of
 * the second, not an ACK of the first alone -- from which a softrdma requester would conclude
 * that the peer keeps nothing after a gap and fall back to go-back-N for good (comp.c,
 * repair_answered).
 */
static bool expect_answer(uint32_t psn, uint8_t syndrome, int line)
{
	uint8_t buf[256];
	struct sr_pkt pkt;

	if (rp_recv(&rp, buf, sizeof(buf), &pkt, 2000) <= 0) {
		SR_FAIL("line %d: no answer (wanted syndrome 0x%02x PSN %u)", line, syndrome, psn);
		return false;
	}
	if (pkt.opcode != OPC(ACK) || pkt.psn != psn ||
	    sr_aeth_syndrome(sr_pkt_h(&pkt, SR_H_AETH)) != syndrome) {
		SR_FAIL("line %d: got %s PSN %u syndrome 0x%02x, wanted syndrome 0x%02x PSN %u",
			line, sr_opcode_name(pkt.opcode), pkt.psn,
			pkt.opcode == OPC(ACK) ? sr_aeth_syndrome(sr_pkt_h(&pkt, SR_H_AETH)) : 0,
			syndrome, psn);
		return false;
	}
	return true;
}

static void send_write_pkt(uint32_t k, uint32_t p, bool ackreq, const uint8_t *data,
			   uint32_t rkey)
{
	static const uint8_t ops[5] = { OPC(WRITE_FIRST), OPC(WRITE_MIDDLE), OPC(WRITE_MIDDLE),
					OPC(WRITE_MIDDLE), OPC(WRITE_LAST) };
	uint8_t hdr[64];
	size_t hlen = rp_hdr_write(hdr, ops[k], qp->qp_num, p + k, ackreq,
				   (uintptr_t)lb.p + 16 * MTU, rkey, 5 * MTU);

	REQUIRE(rp_send(&rp, hdr, hlen, data + k * MTU, MTU, 0) == 0);
}

static void responder(void)
{
	const uint32_t P = 7000;
	uint8_t data[5 * MTU];
	bool ok;

	printf("responder: WRITE of 5 packets, the 2nd and 3rd lost; repairs answered by NAKs\n");
	new_qp(0, P);
	vu_fill(data, sizeof(data), 9);
	memset(lb.p + 16 * MTU, 0, 5 * MTU);

	send_write_pkt(0, P, false, data, lb.mr->rkey);
	send_write_pkt(3, P, false, data, lb.mr->rkey);		/* P+1, P+2 lost */
	send_write_pkt(4, P, true, data, lb.mr->rkey);
	ok = expect_answer(P + 1, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR, __LINE__);
	if (ok) {
		send_write_pkt(1, P, true, data, lb.mr->rkey);	/* the repair of P+1 */
		ok = expect_answer(P + 2, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR, __LINE__);
	}
	if (ok) {
		send_write_pkt(2, P, true, data, lb.mr->rkey);	/* the repair of P+2 */
		ok = expect_answer(P + 4, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, __LINE__);
	}
	if (ok)
		CHECK_EQ(memcmp(lb.p + 16 * MTU, data, sizeof(data)), 0);
	end_qp();
}

int main(void)
{
	sr_test_timeout(60);
	setenv("SOFTRDMA_MAX_INFLIGHT", "8", 1);
	setenv("SOFTRDMA_POST_BATCH", "1", 1);
	setenv("SOFTRDMA_REPAIR", "1", 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 65536, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq);

	requester();
	responder();

	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_rtt_karn");
}
