/* SPDX-License-Identifier: MIT */
/*
 * The RC requester's go-back-N, driven packet by packet by a scripted peer: the QP's path points
 * at a raw UDP socket of this test (tests/common/rawpeer.c), which reads every request packet
 * the QP sends and answers with hand-made ACKs and NAKs. Each resent packet must carry the PSN,
 * opcode and payload of the original: a retransmission is the same packet again (IBA 9.7.5.1.x).
 *
 * SOFTRDMA_MAX_INFLIGHT=8 keeps the send window small and predictable: 8 packets at first, 6
 * after a loss.
 *
 * The requester's timers are off (IBA timeout 0) except where a case is about them; such a case
 * sets the QP's round trip (sr_priv_qp_set_rtt) and the fast go-back-N's floor (rto_min_us) so
 * that its timers fire hundreds of milliseconds apart (SLOW_RTT_NS, SLOW_RTO_US): the order the
 * scripted peer sees is the timers' order, not the scheduler's (on a loaded 2-core machine a
 * thread can wait tens of milliseconds to run; with a 0.5 ms probe and a 10 ms go-back-N this
 * test failed beside CPU-heavy tests).
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define MTU 1024
#define FAKE_QPN 0x00abcd
#define RVA 0x100000000ull
#define RKEY 0x1234
/* The timed case's pace (comp.c): tail-loss probes 2 x SLOW_RTT_NS after the flight and after
 * each other, the fast go-back-N SLOW_RTO_US after the flight, the IBA timeout (SLOW_TIMEOUT:
 * 4.096 us x 2^20, 4.3 s) far behind. */
#define SLOW_RTT_NS 200000000ull
#define SLOW_RTO_US "1600000"
#define SLOW_TIMEOUT 20

/* softrdma's private entry point for tests (src/verbs/softrdma_private.c). */
int sr_priv_qp_set_rtt(struct ibv_qp *qp, uint64_t srtt_ns, uint64_t rttvar_ns);

static struct vu_dev dev;
static struct vu_buf lb;
static struct rawpeer rp;

struct got {
	uint8_t opcode;
	uint32_t psn;
	uint32_t paylen;
	uint8_t payload[MTU];
	uint64_t va;
	uint32_t rlen;		/* the RETH's length */
	bool ackreq;
};

/* The next request packet the QP sends (within ms); false when none comes. */
static bool next_pkt(struct got *g, int ms)
{
	uint8_t buf[4096];
	struct sr_pkt pkt;
	int n = rp_recv(&rp, buf, sizeof(buf), &pkt, ms);

	if (n <= 0)
		return false;
	g->opcode = pkt.opcode;
	g->psn = pkt.psn;
	g->paylen = pkt.paylen;
	memcpy(g->payload, sr_pkt_payload(&pkt), pkt.paylen < MTU ? pkt.paylen : MTU);
	g->va = (pkt.mask & SR_M_RETH) ? sr_reth_va(sr_pkt_h(&pkt, SR_H_RETH)) : 0;
	g->rlen = (pkt.mask & SR_M_RETH) ? sr_reth_len(sr_pkt_h(&pkt, SR_H_RETH)) : 0;
	g->ackreq = pkt.ackreq;
	return true;
}

/* The next packet is (opcode, psn) and carries bytes [off, off + len) of the message at msg.
 * EXPECT_REPAIR: and it asks for an ACK (a packet resent alone after a NAK). */
#define EXPECT_PKT(op, psn, msg, off, len) expect_pkt(op, psn, msg, off, len, false, __LINE__)
#define EXPECT_REPAIR(op, psn, msg, off, len) expect_pkt(op, psn, msg, off, len, true, __LINE__)
static bool expect_pkt(uint8_t op, uint32_t psn, const uint8_t *msg, uint32_t off, uint32_t len,
		       bool ackreq, int line)
{
	struct got g;

	if (!next_pkt(&g, 2000)) {
		SR_FAIL("line %d: no packet (wanted %s PSN %u)", line, sr_opcode_name(op), psn);
		return false;
	}
	if (g.opcode != op || g.psn != psn) {
		SR_FAIL("line %d: got %s PSN %u, wanted %s PSN %u", line, sr_opcode_name(g.opcode),
			g.psn, sr_opcode_name(op), psn);
		return false;
	}
	if (g.paylen != len || (len && memcmp(g.payload, msg + off, len))) {
		SR_FAIL("line %d: %s PSN %u carries %u bytes, not bytes %u..%u of its message", line,
			sr_opcode_name(op), psn, g.paylen, off, off + len);
		return false;
	}
	if (ackreq && !g.ackreq) {
		SR_FAIL("line %d: %s PSN %u does not ask for an ACK", line, sr_opcode_name(op), psn);
		return false;
	}
	return true;
}

#define EXPECT_QUIET(ms) expect_quiet(ms, __LINE__)
static void expect_quiet(int ms, int line)
{
	struct got g;

	if (next_pkt(&g, ms))
		SR_FAIL("line %d: unexpected %s PSN %u", line, sr_opcode_name(g.opcode), g.psn);
}

static struct ibv_qp *qp;
static struct ibv_cq *cq;

static void ack(uint32_t psn, uint8_t syndrome)
{
	REQUIRE(rp_send_ack(&rp, qp->qp_num, psn, syndrome) == 0);
}

/* An RC QP connected to the raw peer; rnr_retry 7: retry RNR NAKs forever. */
static struct ibv_qp *make_qp(uint32_t sq_psn, uint8_t timeout, uint8_t rnr_retry)
{
	struct vu_conn_cfg c;

	vu_conn_cfg_raw(&c, sq_psn, 0);
	c.rnr_retry = rnr_retry;
	c.timeout = timeout;
	return vu_qp_connect_raw(&dev, cq, NULL, &c, &rp.gid, FAKE_QPN);
}

static void drain_raw(void)
{
	struct got g;

	while (next_pkt(&g, 20))
		;
}

#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

/* The next completion is wr_id's, successful (what: the WR, for the message). */
#define EXPECT_DONE(wr_id, what) expect_done(wr_id, what, __LINE__)
static void expect_done(uint64_t wr_id, const char *what, int line)
{
	struct ibv_wc wc;

	if (!vu_wait(cq, &wc, 2000) || wc.wr_id != wr_id || wc.status != IBV_WC_SUCCESS)
		SR_FAIL("line %d: %s did not complete: %s", line, what, vu_wc_str(&wc));
}

/* Destroys the QP, then drops what it left on the raw socket and in the CQ. */
static void end_qp(void)
{
	struct ibv_wc wc;

	CHECK_EQ(ibv_destroy_qp(qp), 0);
	drain_raw();
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
}

/*
 * Two messages A (6 packets) and B (2 packets) all sent; then the requester goes back to A's
 * start (a fast retransmission after a delayed ACK, or a stale NAK) and resends 4 packets (the
 * window after a loss); then the delayed ACK arrives for B's FIRST packet. What is missing is
 * B's LAST packet alone, with its own PSN.
 */
static void ack_covers_next_wqe(bool send, bool by_nak)
{
	const uint32_t P = 1000;
	const uint8_t first = send ? OPC(SEND_FIRST) : OPC(WRITE_FIRST);
	const uint8_t middle = send ? OPC(SEND_MIDDLE) : OPC(WRITE_MIDDLE);
	const uint8_t last = send ? OPC(SEND_LAST) : OPC(WRITE_LAST);
	const uint8_t *a = lb.p, *b = lb.p + 6 * MTU;
	bool ok = true;

	printf("%s A (6 packets), B (2 packets); back to A by %s; ACK for B's first packet\n",
	       send ? "SEND" : "WRITE", by_nak ? "a stale NAK" : "a fast retransmission");
	qp = make_qp(P, by_nak ? 0 : SLOW_TIMEOUT, 7);	/* 0: no timer (only the NAK rewinds) */
	vu_fill(lb.p, 8 * MTU, 1);
	/* The requester's fast go-back-N runs only once it has a round trip (before, the IBA
	 * timeout alone, as TCP's initial RTO; comp.c probe_ns): one as if measured, 200 ms, so
	 * the probes come 400 ms apart and the go-back-N at 1.6 s (rto_min_us, main). */
	if (!by_nak)
		CHECK_EQ(sr_priv_qp_set_rtt(qp, SLOW_RTT_NS, SLOW_RTT_NS / 100), 0);
	{
		/* One post for both: the first flight then leaves under one hold of the QP lock,
		 * and no tail-loss probe can come between A and B when this thread is preempted
		 * (ctest runs tests two at a time on 2 cores; with the 500 us probe of a QP without
		 * a round trip it happened). */
		struct ibv_sge sa = { (uintptr_t)a, 6 * MTU, lb.mr->lkey };
		struct ibv_sge sb = { (uintptr_t)b, 2 * MTU, lb.mr->lkey };
		struct ibv_send_wr wb = { .wr_id = 2, .sg_list = &sb, .num_sge = 1 };
		struct ibv_send_wr wa = { .wr_id = 1, .next = &wb, .sg_list = &sa, .num_sge = 1 };
		struct ibv_send_wr *bad;

		wa.opcode = wb.opcode = send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
		if (!send) {
			wa.wr.rdma.remote_addr = RVA;
			wb.wr.rdma.remote_addr = RVA + 8192;
			wa.wr.rdma.rkey = wb.wr.rdma.rkey = RKEY;
		}
		CHECK_EQ(ibv_post_send(qp, &wa, &bad), 0);
	}
	/* The first flight: all 8 packets (window 8). */
	ok = ok && EXPECT_PKT(first, P, a, 0, MTU);
	for (uint32_t i = 1; ok && i < 5; i++)
		ok = EXPECT_PKT(middle, P + i, a, i * MTU, MTU);
	ok = ok && EXPECT_PKT(last, P + 5, a, 5 * MTU, MTU);
	ok = ok && EXPECT_PKT(first, P + 6, b, 0, MTU);
	ok = ok && EXPECT_PKT(last, P + 7, b, MTU, MTU);
	if (!ok)
		goto out;
	if (by_nak) {
		/* The NAK: A's FIRST alone, then (the peer acknowledges only that one: it keeps
		 * nothing after a gap) go-back-N from P + 1 with the window now 6 (three
		 * quarters), up to B's FIRST. */
		ack(P, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
		ok = EXPECT_REPAIR(first, P, a, 0, MTU);
		EXPECT_QUIET(20);
		ack(P, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
		for (uint32_t i = 1; ok && i < 5; i++)
			ok = EXPECT_PKT(middle, P + i, a, i * MTU, MTU);
		ok = ok && EXPECT_PKT(last, P + 5, a, 5 * MTU, MTU);
		ok = ok && EXPECT_PKT(first, P + 6, b, 0, MTU);
	} else {
		/* No answer: two tail-loss probes (A's FIRST alone, after 2 RTTs and again),
		 * which the peer loses; then the fast retransmission goes back to A's start with
		 * the window now 6 (three quarters: the round trip is the path's smallest, no
		 * queue), A alone. */
		ok = EXPECT_REPAIR(first, P, a, 0, MTU);
		ok = ok && EXPECT_REPAIR(first, P, a, 0, MTU);
		ok = ok && EXPECT_PKT(first, P, a, 0, MTU);
		for (uint32_t i = 1; ok && i < 5; i++)
			ok = EXPECT_PKT(middle, P + i, a, i * MTU, MTU);
		ok = ok && EXPECT_PKT(last, P + 5, a, 5 * MTU, MTU);
	}
	if (!ok)
		goto out;
	/* The ACK of the first flight, up to B's FIRST: A is done, B's LAST is missing. */
	ack(P + 6, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	EXPECT_DONE(1, "A");
	ok = EXPECT_PKT(last, P + 7, b, MTU, MTU);
	if (!ok)
		goto out;
	ack(P + 7, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	EXPECT_DONE(2, "B");
	EXPECT_QUIET(30);
out:
	end_qp();
}

/* A NAK (sequence error) in the middle of a message: go back to exactly that packet, as a
 * MIDDLE/LAST with its own payload, and go on from there. */
static void nak_mid_message(void)
{
	const uint32_t P = 0xfffffc;	/* and across the PSN wrap */
	const uint8_t *a = lb.p;
	bool ok;

	printf("WRITE of 6 packets, NAK for its 4th (PSN wrap inside)\n");
	qp = make_qp(P, 0, 7);
	vu_fill(lb.p, 6 * MTU, 2);
	CHECK_EQ(vu_post_rdma(qp, 3, IBV_WR_RDMA_WRITE, lb.mr, a, 6 * MTU, RVA, RKEY, 0), 0);
	ok = EXPECT_PKT(OPC(WRITE_FIRST), P, a, 0, MTU);
	for (uint32_t i = 1; ok && i < 5; i++)
		ok = EXPECT_PKT(OPC(WRITE_MIDDLE), (P + i) & 0xffffff, a, i * MTU, MTU);
	ok = ok && EXPECT_PKT(OPC(WRITE_LAST), (P + 5) & 0xffffff, a, 5 * MTU, MTU);
	if (!ok)
		goto out;
	/* Packets P..P+2 arrived, P+3 did not: P+3 is resent alone, asking for an ACK. */
	ack((P + 3) & 0xffffff, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
	ok = EXPECT_REPAIR(OPC(WRITE_MIDDLE), (P + 3) & 0xffffff, a, 3 * MTU, MTU);
	if (!ok)
		goto out;
	/* A duplicate of the NAK changes nothing (the repair is under way). */
	ack((P + 3) & 0xffffff, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
	EXPECT_QUIET(20);
	/* The peer acknowledges P+3 alone: it dropped P+4 and P+5 (IBA go-back-N). They are
	 * resent, each as itself. */
	ack((P + 3) & 0xffffff, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	ok = EXPECT_PKT(OPC(WRITE_MIDDLE), (P + 4) & 0xffffff, a, 4 * MTU, MTU);
	ok = ok && EXPECT_PKT(OPC(WRITE_LAST), (P + 5) & 0xffffff, a, 5 * MTU, MTU);
	if (!ok)
		goto out;
	/* A NAK for a PSN already acknowledged is stale: nothing happens. */
	ack((P + 3) & 0xffffff, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
	EXPECT_QUIET(20);
	ack((P + 5) & 0xffffff, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	EXPECT_DONE(3, "WRITE");
	/* An ACK for a PSN never sent is ignored. */
	ack((P + 100) & 0xffffff, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	EXPECT_QUIET(20);
	CHECK_EQ(vu_qp_state(qp), IBV_QPS_RTS);
	/* The QP has learnt that this peer keeps nothing after a gap: the next NAK means
	 * go-back-N at once (Q = P + 6). */
	CHECK_EQ(vu_post_rdma(qp, 4, IBV_WR_RDMA_WRITE, lb.mr, a, 4 * MTU, RVA, RKEY, 0), 0);
	ok = EXPECT_PKT(OPC(WRITE_FIRST), (P + 6) & 0xffffff, a, 0, MTU);
	for (uint32_t i = 1; ok && i < 3; i++)
		ok = EXPECT_PKT(OPC(WRITE_MIDDLE), (P + 6 + i) & 0xffffff, a, i * MTU, MTU);
	ok = ok && EXPECT_PKT(OPC(WRITE_LAST), (P + 9) & 0xffffff, a, 3 * MTU, MTU);
	if (!ok)
		goto out;
	ack((P + 7) & 0xffffff, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
	ok = EXPECT_PKT(OPC(WRITE_MIDDLE), (P + 7) & 0xffffff, a, 1 * MTU, MTU);
	ok = ok && EXPECT_PKT(OPC(WRITE_MIDDLE), (P + 8) & 0xffffff, a, 2 * MTU, MTU);
	ok = ok && EXPECT_PKT(OPC(WRITE_LAST), (P + 9) & 0xffffff, a, 3 * MTU, MTU);
	if (!ok)
		goto out;
	ack((P + 9) & 0xffffff, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	EXPECT_DONE(4, "second WRITE");
out:
	end_qp();
}

/*
 * A peer that keeps the packets after a gap (as softrdma's responder does): each NAK gets the
 * missing packet alone, and the answer to it acknowledges what the peer kept -- or NAKs the
 * next gap.
 */
static void repair_keeper(void)
{
	const uint32_t P = 500, Q = P + 8;
	const uint8_t *a = lb.p;
	bool ok;

	printf("WRITE of 8 packets, two holes repaired one packet each; then another WRITE\n");
	qp = make_qp(P, 0, 7);
	vu_fill(lb.p, 8 * MTU, 4);
	CHECK_EQ(vu_post_rdma(qp, 5, IBV_WR_RDMA_WRITE, lb.mr, a, 8 * MTU, RVA, RKEY, 0), 0);
	ok = EXPECT_PKT(OPC(WRITE_FIRST), P, a, 0, MTU);
	for (uint32_t i = 1; ok && i < 7; i++)
		ok = EXPECT_PKT(OPC(WRITE_MIDDLE), P + i, a, i * MTU, MTU);
	ok = ok && EXPECT_PKT(OPC(WRITE_LAST), P + 7, a, 7 * MTU, MTU);
	if (!ok)
		goto out;
	ack(P + 2, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);		/* P+2 and P+5 lost */
	ok = EXPECT_REPAIR(OPC(WRITE_MIDDLE), P + 2, a, 2 * MTU, MTU);
	if (!ok)
		goto out;
	EXPECT_QUIET(20);
	ack(P + 5, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);		/* had P+3, P+4: next hole */
	ok = EXPECT_REPAIR(OPC(WRITE_MIDDLE), P + 5, a, 5 * MTU, MTU);
	if (!ok)
		goto out;
	EXPECT_QUIET(20);
	ack(P + 7, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);	/* had the rest */
	EXPECT_DONE(5, "WRITE");

	/* The next loss of a message: one packet again. */
	CHECK_EQ(vu_post_rdma(qp, 6, IBV_WR_RDMA_WRITE, lb.mr, a, 4 * MTU, RVA, RKEY, 0), 0);
	ok = EXPECT_PKT(OPC(WRITE_FIRST), Q, a, 0, MTU);
	for (uint32_t i = 1; ok && i < 3; i++)
		ok = EXPECT_PKT(OPC(WRITE_MIDDLE), Q + i, a, i * MTU, MTU);
	ok = ok && EXPECT_PKT(OPC(WRITE_LAST), Q + 3, a, 3 * MTU, MTU);
	if (!ok)
		goto out;
	ack(Q, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
	ok = EXPECT_REPAIR(OPC(WRITE_FIRST), Q, a, 0, MTU);
	if (!ok)
		goto out;
	EXPECT_QUIET(20);
	ack(Q + 3, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	EXPECT_DONE(6, "second WRITE");
	EXPECT_QUIET(20);
out:
	end_qp();
}

/* The next packet is a READ request at psn for [RVA + off, + len). */
#define EXPECT_READ(psn, off, len) expect_read(psn, off, len, __LINE__)
static bool expect_read(uint32_t psn, uint32_t off, uint32_t len, int line)
{
	struct got g;

	if (!next_pkt(&g, 2000)) {
		SR_FAIL("line %d: no packet (wanted a READ request PSN %u)", line, psn);
		return false;
	}
	if (g.opcode != OPC(READ_REQ) || g.psn != psn || g.va != RVA + off || g.rlen != len) {
		SR_FAIL("line %d: got %s PSN %u va +%llu len %u, wanted a READ request PSN %u va +%u "
			"len %u", line, sr_opcode_name(g.opcode), g.psn,
			(unsigned long long)(g.va - RVA), g.rlen, psn, off, len);
		return false;
	}
	return true;
}

/* The responses to a READ request at psn for bytes [off, off + len) of remote. */
static void read_respond(const uint8_t *remote, uint32_t psn, uint32_t off, uint32_t len)
{
	REQUIRE(rp_send_read_resp(&rp, qp->qp_num, psn, remote + off, len, MTU, -1, 0) == 0);
}

/*
 * A WRITE (7 packets), then a READ of 20 packets, asked for as a piece of 16 (the window has
 * room for 1, a piece is never smaller than 16). A NAK for the WRITE's first packet; the peer
 * acknowledges that packet alone (it keeps nothing after a gap), so the requester goes back
 * and resends the rest of the WRITE, and stops at the READ: the window (6 after the loss) is
 * full. Then the responses to the READ's first piece arrive -- they acknowledge the WRITE too.
 * The requester, left behind them, must ask for the READ's next piece at once. It used to
 * stand still: at the READ's first PSN, behind every response of the piece, the window looked
 * full; and with the oldest WQE rewound to its start, the retransmission timer (none here:
 * timeout 0) saw nothing outstanding. test_fault_integrity stalled on it about once in 25 runs.
 */
static void read_behind_resend(void)
{
	const uint32_t P = 2000;
	static uint8_t remote[20 * MTU];
	uint8_t *a = lb.p, *r = lb.p + 32768;
	bool ok;

	printf("WRITE (7 packets), READ (20); the WRITE resent, the READ's first piece answered\n");
	qp = make_qp(P, 0, 7);
	vu_fill(a, 7 * MTU, 5);
	vu_fill(remote, sizeof(remote), 6);
	memset(r, 0, sizeof(remote));
	{
		struct ibv_sge sa = { (uintptr_t)a, 7 * MTU, lb.mr->lkey };
		struct ibv_sge sr = { (uintptr_t)r, sizeof(remote), lb.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sr, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_READ };
		struct ibv_send_wr wa = { .wr_id = 1, .next = &wr, .sg_list = &sa, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE };
		struct ibv_send_wr *bad;

		wa.wr.rdma.remote_addr = RVA + 65536;
		wa.wr.rdma.rkey = RKEY;
		wr.wr.rdma.remote_addr = RVA;
		wr.wr.rdma.rkey = RKEY;
		CHECK_EQ(ibv_post_send(qp, &wa, &bad), 0);
	}
	ok = EXPECT_PKT(OPC(WRITE_FIRST), P, a, 0, MTU);
	for (uint32_t i = 1; ok && i < 6; i++)
		ok = EXPECT_PKT(OPC(WRITE_MIDDLE), P + i, a, i * MTU, MTU);
	ok = ok && EXPECT_PKT(OPC(WRITE_LAST), P + 6, a, 6 * MTU, MTU);
	ok = ok && EXPECT_READ(P + 7, 0, 16 * MTU);
	if (!ok)
		goto out;
	ack(P, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
	ok = EXPECT_REPAIR(OPC(WRITE_FIRST), P, a, 0, MTU);
	EXPECT_QUIET(20);
	ack(P, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	for (uint32_t i = 1; ok && i < 6; i++)
		ok = EXPECT_PKT(OPC(WRITE_MIDDLE), P + i, a, i * MTU, MTU);
	ok = ok && EXPECT_PKT(OPC(WRITE_LAST), P + 6, a, 6 * MTU, MTU);
	if (!ok)
		goto out;
	EXPECT_QUIET(20);	/* not the READ: the window is full */
	read_respond(remote, P + 7, 0, 16 * MTU);
	EXPECT_DONE(1, "the WRITE");
	if (!EXPECT_READ(P + 23, 16 * MTU, 4 * MTU))
		goto out;
	read_respond(remote, P + 23, 16 * MTU, 4 * MTU);
	EXPECT_DONE(2, "the READ");
	CHECK(!memcmp(r, remote, sizeof(remote)));
	EXPECT_QUIET(30);
out:
	end_qp();
}

/*
 * NAKs that arrive while a rewind is under way and acknowledge nothing new are ignored. A
 * WRITE A (2 packets), a CMP_SWAP, a WRITE B (4 packets). The peer NAKs B's second packet: it
 * has everything before, so A completes; the CMP_SWAP's response is missing, and comp.psn may
 * not pass it, so the requester goes back to the CMP_SWAP. Then 8 more NAKs, later in B, that
 * the peer sent before the resent packets reached it (a responder that keeps what follows a
 * gap NAKs each gap of a flight in turn). They must not start another go-back-N each, nor
 * count against retry_cnt (7): they used to, and exhausted it in milliseconds
 * (test_fault_integrity, CMP_SWAP or READ failing with IBV_WC_RETRY_EXC_ERR early in a run).
 */
static void stale_naks_behind_atomic(void)
{
	const uint32_t P = 3000;
	uint8_t *a = lb.p, *b = lb.p + 2 * MTU;
	uint64_t *res = (uint64_t *)(lb.p + 8 * MTU);
	int64_t ignored0 = vu_stat("seq_naks_ignored");
	bool ok;

	printf("WRITE (2 packets), CMP_SWAP, WRITE (4); NAK past the CMP_SWAP, then 8 stale NAKs\n");
	qp = make_qp(P, 0, 7);
	vu_fill(a, 6 * MTU, 7);
	*res = 0;
	{
		struct ibv_sge sa = { (uintptr_t)a, 2 * MTU, lb.mr->lkey };
		struct ibv_sge sc = { (uintptr_t)res, 8, lb.mr->lkey };
		struct ibv_sge sb = { (uintptr_t)b, 4 * MTU, lb.mr->lkey };
		struct ibv_send_wr wb = { .wr_id = 3, .sg_list = &sb, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE };
		struct ibv_send_wr wc_ = { .wr_id = 2, .next = &wb, .sg_list = &sc, .num_sge = 1,
					   .opcode = IBV_WR_ATOMIC_CMP_AND_SWP };
		struct ibv_send_wr wa = { .wr_id = 1, .next = &wc_, .sg_list = &sa, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE };
		struct ibv_send_wr *bad;

		wa.wr.rdma.remote_addr = RVA;
		wa.wr.rdma.rkey = RKEY;
		wb.wr.rdma.remote_addr = RVA + 8192;
		wb.wr.rdma.rkey = RKEY;
		wc_.wr.atomic.remote_addr = RVA + 65536;
		wc_.wr.atomic.rkey = RKEY;
		wc_.wr.atomic.compare_add = 1;
		wc_.wr.atomic.swap = 2;
		CHECK_EQ(ibv_post_send(qp, &wa, &bad), 0);
	}
	ok = EXPECT_PKT(OPC(WRITE_FIRST), P, a, 0, MTU);
	ok = ok && EXPECT_PKT(OPC(WRITE_LAST), P + 1, a, MTU, MTU);
	for (int pass = 0; ok && pass < 2; pass++) {
		/* The CMP_SWAP and B: sent, then sent again from the CMP_SWAP after the NAK. */
		ok = EXPECT_PKT(OPC(CMP_SWAP), P + 2, NULL, 0, 0);
		ok = ok && EXPECT_PKT(OPC(WRITE_FIRST), P + 3, b, 0, MTU);
		ok = ok && EXPECT_PKT(OPC(WRITE_MIDDLE), P + 4, b, MTU, MTU);
		ok = ok && EXPECT_PKT(OPC(WRITE_MIDDLE), P + 5, b, 2 * MTU, MTU);
		ok = ok && EXPECT_PKT(OPC(WRITE_LAST), P + 6, b, 3 * MTU, MTU);
		if (ok && pass == 0) {
			ack(P + 4, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
			EXPECT_DONE(1, "A");
		}
	}
	if (!ok)
		goto out;
	for (int i = 0; i < 8; i++)
		ack(P + 5 + (i & 1), SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
	EXPECT_QUIET(50);
	CHECK_EQ(vu_stat("seq_naks_ignored") - ignored0, 8);
	{
		/* The CMP_SWAP's response (the peer replays it for the resent request), then the
		 * ACK of B. */
		uint8_t hdr[64];
		uint8_t op = OPC(ATOMIC_ACK);
		const struct sr_opcode_info *oi = &sr_opcode[op];

		memset(hdr, 0, sizeof(hdr));
		sr_bth_build((struct sr_bth *)hdr, op, false, false, 0, SR_DEFAULT_PKEY, qp->qp_num,
			     false, P + 2);
		sr_aeth_build((struct sr_aeth *)(hdr + oi->offset[SR_H_AETH]),
			      SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0);
		sr_atmack_build((struct sr_atmack *)(hdr + oi->offset[SR_H_ATMACK]), 0x1234);
		REQUIRE(rp_send(&rp, hdr, oi->length, NULL, 0, 0) == 0);
	}
	ack(P + 6, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	EXPECT_DONE(2, "the CMP_SWAP");
	CHECK_EQ(*res, 0x1234);
	EXPECT_DONE(3, "B");
	CHECK_EQ(vu_qp_state(qp), IBV_QPS_RTS);
	EXPECT_QUIET(30);
out:
	end_qp();
}

/* RNR NAK: the same packet again after the RNR timer, not before. */
static void rnr_resend(void)
{
	const uint32_t P = 77;
	uint64_t t0;
	bool ok;

	printf("SEND, RNR NAK, resent after the timer\n");
	qp = make_qp(P, 0, 7);
	vu_fill(lb.p, 100, 3);
	CHECK_EQ(vu_post_send(qp, 4, IBV_WR_SEND, lb.mr, lb.p, 100, 0, 0), 0);
	ok = EXPECT_PKT(OPC(SEND_ONLY), P, lb.p, 0, 100);
	if (!ok)
		goto out;
	t0 = vu_now_ms();
	ack(P, SR_AETH_RNR_NAK | 20);	/* 10.24 ms */
	ok = EXPECT_PKT(OPC(SEND_ONLY), P, lb.p, 0, 100);
	if (ok && vu_now_ms() - t0 < 10)
		SR_FAIL("resent %llu ms after an RNR NAK asking for 10.24 ms",
			(unsigned long long)(vu_now_ms() - t0));
	ack(P, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	EXPECT_DONE(4, "SEND");
out:
	end_qp();
}

/*
 * A second RNR NAK for the same PSN during the RNR wait answers a copy sent before the wait
 * (a tail-loss probe's, when the first NAK came late): it must not use one of rnr_retry's
 * retries. With rnr_retry 1, counting it would fail the SEND with RNR_RETRY_EXC_ERR at once.
 */
static void rnr_duplicate(void)
{
	const uint32_t P = 91;
	bool ok;

	printf("SEND, RNR NAK, the same RNR NAK again during the wait (rnr_retry 1)\n");
	qp = make_qp(P, 0, 1);
	vu_fill(lb.p, 100, 4);
	CHECK_EQ(vu_post_send(qp, 5, IBV_WR_SEND, lb.mr, lb.p, 100, 0, 0), 0);
	ok = EXPECT_PKT(OPC(SEND_ONLY), P, lb.p, 0, 100);
	if (!ok)
		goto out;
	/* 491.52 ms (IBA table 45's longest but one): the second NAK must come during the
	 * wait, and this thread may lose the CPU for tens of milliseconds between the two. */
	ack(P, SR_AETH_RNR_NAK | 31);
	usleep(2000);
	ack(P, SR_AETH_RNR_NAK | 31);
	ok = EXPECT_PKT(OPC(SEND_ONLY), P, lb.p, 0, 100);
	ack(P, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	if (ok)
		EXPECT_DONE(5, "SEND");
	CHECK_EQ(vu_stat("rnr_retry_exceeded"), 0);
out:
	end_qp();
}

int main(void)
{
	sr_test_timeout(60);
	setenv("SOFTRDMA_MAX_INFLIGHT", "8", 1);
	/* Only QPs with a timer have a fast go-back-N: the timed case's alone (above). */
	setenv("SOFTRDMA_RTO_MIN_US", SLOW_RTO_US, 1);
	/* Every post sends at once: the flights below are exact (post_batch would hold a WQE
	 * posted behind one in flight until its ACK). */
	setenv("SOFTRDMA_POST_BATCH", "1", 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 65536, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq);

	nak_mid_message();
	repair_keeper();
	rnr_resend();
	rnr_duplicate();
	ack_covers_next_wqe(false, false);
	ack_covers_next_wqe(false, true);
	ack_covers_next_wqe(true, true);
	read_behind_resend();
	stale_naks_behind_atomic();

	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_rc_retransmit");
}
