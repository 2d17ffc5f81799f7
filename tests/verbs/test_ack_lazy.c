/* SPDX-License-Identifier: MIT */
/*
 * Message ends that do not ask for an ACK (parameter ack_lazy; src/transport/req.c,
 * ack_lazy_ok, and resp.c, ack_unasked).
 *
 * Toward a softrdma peer (its packets carry the mark, BTH resv6), the last packet of an
 * unsignaled SEND or WRITE, posted after a poll of the send CQ, does not ask for an ACK while
 * fewer than ack_lazy packets went since the last one that asked and that one asked less than
 * ack_defer_us ago. A signaled WQE, or one posted right behind another without a poll between
 * (a stream), asks. A responder acknowledges a marked peer's message end that did not ask with
 * its next ACK, at once when its QP leaves RTS, or alone 2 x ack_defer_us after it.
 *
 * Cases 1-2 play the peer with a raw UDP socket (tests/common/rawpeer.c) and watch the AckReq
 * bits and the ACKs packet by packet; case 3 is a ping-pong of unsignaled SENDs between two
 * QPs of this process: every message arrives, the signaled ones complete, and far fewer ACKs
 * than messages are sent. Run again under loss (ctest verbs/test_ack_lazy.loss,
 * SOFTRDMA_FAULT=drop=...): case 3 alone, and a lost message end that did not ask is
 * repaired (the peer's probe, or the NAK of the gap), every message in order.
 *
 * ack_defer_us is 1 s here and ack_lazy 4, so the time bounds are far from any scheduling
 * delay; counts are asserted, not times (an ask that a stall of a second made due is
 * tolerated and said).
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <linux/sockios.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>

#define FAKE_QPN 0x00a1a1
#define RVA 0x300000000ull
#define RKEY 0x9abc
#define P0 900u			/* the QP's first request PSN */
#define DEFER_MS 1000
#define LAZY 4
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf lb, tgt;
static struct rawpeer rp;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static uint32_t rpsn;		/* the raw peer's next request PSN */

static struct ibv_qp *connect_raw(void)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct ibv_qp *p;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.sq_sig_all = 0;
	vu_conn_cfg_raw(&c, P0, 0);
	c.timeout = 0;	/* no timers: every packet is one the case provokes */
	p = vu_qp_connect_raw(&dev, cq, &q, &c, &rp.gid, FAKE_QPN);
	rpsn = 0;
	return p;
}

/* The raw peer writes one byte into tgt, marked as softrdma's, asking for an ACK or not. */
static struct timespec t_write;
static void peer_write(bool ackreq)
{
	clock_gettime(CLOCK_REALTIME, &t_write);
	REQUIRE(rp_send_write_byte(&rp, qp->qp_num, rpsn, ackreq, SR_BTH_SR_MARK,
				   (uint64_t)(uintptr_t)tgt.p + rpsn % 64, tgt.mr->rkey) == 0);
	rpsn++;
}

/* The raw peer's ACK of the QP's packets up to psn, marked as a softrdma peer's are (an
 * unmarked packet would make the QP take its peer for another stack); returns once the QP has
 * taken it (counter acks_rcvd): a message end asks while an ACK is still to come. */
static void peer_ack(uint32_t psn)
{
	uint8_t hdr[64];
	size_t hlen = rp_hdr_ack(hdr, qp->qp_num, psn, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0);
	int64_t before = vu_stat("acks_rcvd");
	uint64_t t0 = vu_now_ms();

	hdr[4] |= SR_BTH_SR_MARK;
	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
	while (vu_stat("acks_rcvd") <= before && vu_now_ms() - t0 < 5000)
		vu_sleep_ms(1);	/* (the progress thread takes it; a poll would reap the CQE) */
	CHECK(vu_stat("acks_rcvd") > before);
}

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The next packet from the QP: an ACK of psn. */
static bool expect_ack(uint32_t psn, int ms, int line)
{
	uint8_t buf[4096];
	struct sr_pkt pkt;

	if (rp_recv(&rp, buf, sizeof(buf), &pkt, ms) <= 0) {
		SR_FAIL("line %d: no ACK of PSN %u within %d ms", line, psn, ms);
		return false;
	}
	if (pkt.opcode != OPC(ACK) || pkt.psn != psn) {
		SR_FAIL("line %d: got %s PSN %u, wanted the ACK of PSN %u", line,
			sr_opcode_name(pkt.opcode), pkt.psn, psn);
		return false;
	}
	return true;
}

/* The next packet from the QP is its WRITE ONLY of PSN psn; returns its AckReq bit (-1: none,
 * or another packet). */
static int next_write(uint32_t psn, int line)
{
	uint8_t buf[4096];
	struct sr_pkt pkt;

	if (rp_recv(&rp, buf, sizeof(buf), &pkt, 2000) <= 0) {
		SR_FAIL("line %d: no packet (wanted WRITE ONLY PSN %u)", line, psn);
		return -1;
	}
	if (pkt.opcode != OPC(WRITE_ONLY) || pkt.psn != psn) {
		SR_FAIL("line %d: got %s PSN %u, wanted WRITE ONLY PSN %u", line,
			sr_opcode_name(pkt.opcode), pkt.psn, psn);
		return -1;
	}
	return pkt.ackreq;
}

static int post_write(int i, unsigned flags)
{
	lb.p[i % 64] = (uint8_t)i;
	return vu_post_rdma(qp, (uint64_t)i, IBV_WR_RDMA_WRITE, lb.mr, lb.p + i % 64, 1,
			    RVA + (uint64_t)i, RKEY, flags);
}

/* One poll of the send CQ (what an application that reaps its completions does). */
static void poll_once(void)
{
	struct ibv_wc wc;

	CHECK(ibv_poll_cq(cq, 1, &wc) >= 0);
}

/*
 * Case 1, the requester. Before any packet of the peer, every message end asks (it is not
 * known to be softrdma). After one: unsignaled WRITEs posted one by one ask every LAZY-th
 * packet; a signaled one asks; one posted behind another with no poll between asks; and a WQE
 * posted while only packets that did not ask are in flight leaves at once (post_batch holds a
 * WQE only behind an ACK that is coming). The peer acknowledges each packet that asks, and the
 * case waits until the QP took that ACK: one still to come makes the next message end ask.
 */
static void requester(void)
{
	uint32_t psn = P0;
	double t_ask;
	int i = 1, since = 0, r;

	printf("unsignaled message ends toward a softrdma peer ask every %d packets\n", LAZY);
	qp = connect_raw();
	/* Not known as softrdma yet: asks. */
	CHECK_EQ(post_write(i++, 0), 0);
	CHECK_EQ(next_write(psn, __LINE__), 1);
	peer_ack(psn++);
	/* The peer's marked WRITE (asking): now it is. */
	peer_write(true);
	if (!expect_ack(rpsn - 1, 2000, __LINE__))
		goto out;
	t_ask = 0;
	for (int k = 0; k < 3 * LAZY; k++, i++, psn++) {
		poll_once();
		CHECK_EQ(post_write(i, 0), 0);
		r = next_write(psn, __LINE__);
		if (r < 0)
			goto out;
		/* The first asks (none has within ack_defer_us), then every LAZY-th. */
		bool want = k == 0 || since + 1 >= LAZY;

		if (r && !want && now_ms() - t_ask >= DEFER_MS * 0.9) {
			printf("  PSN %u asked: the last ask was %.0f ms ago (a stall)\n", psn,
			       now_ms() - t_ask);
			want = true;
		}
		if (r != want)
			SR_FAIL("WRITE %d (PSN %u): AckReq %d, wanted %d", i, psn, r, want);
		if (r) {
			since = 0;
			t_ask = now_ms();
			/* Covers every earlier one. */
			peer_ack(psn);
		} else {
			since++;
		}
	}
	/* A signaled one asks. */
	poll_once();
	CHECK_EQ(post_write(i, IBV_SEND_SIGNALED), 0);
	CHECK_EQ(next_write(psn, __LINE__), 1);
	peer_ack(psn);
	vu_expect_wc(cq, (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2000, __LINE__);
	i++, psn++;
	/* One that does not ask, then one posted right behind it (no poll between): it leaves
	 * at once (no ACK is coming to release it) and asks (a stream). */
	poll_once();
	CHECK_EQ(post_write(i++, 0), 0);
	CHECK_EQ(next_write(psn++, __LINE__), 0);
	CHECK_EQ(post_write(i++, 0), 0);
	CHECK_EQ(next_write(psn, __LINE__), 1);
out:
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	rp_drain(&rp);
}

/* When the packet just read was sent, in ms after the peer's last write: the kernel's receive
 * timestamp (the raw socket is on this host). */
static double sent_after_ms(void)
{
	struct timespec at;

	REQUIRE(ioctl(rp.fd, SIOCGSTAMPNS, &at) == 0);
	return (at.tv_sec - t_write.tv_sec) * 1e3 + (at.tv_nsec - t_write.tv_nsec) / 1e6;
}

/*
 * Case 2, the responder. A marked peer's message end that does not ask is not acknowledged at
 * once; the next ACK covers it; alone, it is acknowledged 2 x ack_defer_us later; leaving RTS
 * sends it at once.
 */
static void responder(void)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	double after;

	printf("a message end that did not ask is acknowledged later, by the next ACK\n");
	qp = connect_raw();
	peer_write(false);
	if (!rp_expect_quiet(&rp, DEFER_MS / 4, "nothing: no ACK asked for", __LINE__))
		goto out;
	peer_write(true);
	if (!expect_ack(rpsn - 1, 2000, __LINE__))
		goto out;
	/* Alone: 2 x ack_defer_us after it (the progress thread looks every 4 x ack_defer_us
	 * at most, the receive path when it is due). */
	peer_write(false);
	if (!expect_ack(rpsn - 1, 2 * DEFER_MS + 4 * DEFER_MS + 5000, __LINE__))
		goto out;
	after = sent_after_ms();
	printf("  the ACK of the unasked WRITE left %.0f ms after it\n", after);
	if (after < 2 * DEFER_MS - 1)
		SR_FAIL("the ACK of an unasked WRITE left %.0f ms after it, before 2 x "
			"ack_defer_us", after);
	/* Leaving RTS sends it at once. */
	peer_write(false);
	if (!rp_expect_quiet(&rp, DEFER_MS / 4, "nothing: no ACK asked for", __LINE__))
		goto out;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	expect_ack(rpsn - 1, DEFER_MS / 2, __LINE__);
out:
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	rp_drain(&rp);
}

/*
 * Case 3: a ping-pong of unsignaled 8-byte SENDs between two QPs of this process, as UCX's
 * rc_verbs makes it (one in SIG signaled, the send CQ polled between posts). Every message
 * arrives, in order and intact; every signaled one completes; and far fewer ACKs leave than
 * messages (one in LAZY asks).
 */
#define TURNS 1000
#define SIG 64

static void pingpong(bool lossy)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct vu_pair p;
	struct vu_buf rb[2], sb[2];
	int64_t acks0 = vu_stat("acks_sent"), skip0 = vu_stat("ackreq_skipped");
	int64_t acks, skipped;
	int sent[2] = { 0, 0 }, sigs[2] = { 0, 0 };

	printf("a ping-pong of %d unsignaled SENDs each way, one in %d signaled\n", TURNS, SIG);
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.sq_sig_all = 0;
	q.max_send_wr = 128;
	q.max_recv_wr = 128;
	vu_conn_cfg_default(&c);
	REQUIRE(vu_pair_create(&dev, &q, &c, &p) == 0);
	for (int s = 0; s < 2; s++) {
		REQUIRE(vu_buf_alloc(&dev, &rb[s], 8 * 128, VU_ACCESS_ALL) == 0);
		REQUIRE(vu_buf_alloc(&dev, &sb[s], 8, VU_ACCESS_ALL) == 0);
		for (int k = 0; k < 128; k++)
			REQUIRE(vu_post_recv(p.qp[s], (uint64_t)k, rb[s].mr, rb[s].p + 8 * k, 8) == 0);
	}
	/* Side s sends message n (its n-th), side !s receives it and answers with its own. */
	for (int n = 0; n < 2 * TURNS; n++) {
		int s = n & 1, r = !s;
		struct ibv_wc wc;
		uint64_t v = ((uint64_t)s << 32) | (uint64_t)sent[s];
		unsigned flags = (sent[s] + 1) % SIG ? 0 : IBV_SEND_SIGNALED;
		int got;

		/* Reap the send CQ first, as UCX does between posts. */
		while ((got = ibv_poll_cq(p.scq[s], 1, &wc)) > 0) {
			if (wc.status != IBV_WC_SUCCESS)
				SR_FAIL("side %d: send completion %s", s, vu_wc_str(&wc));
			sigs[s]++;
		}
		memcpy(sb[s].p, &v, 8);
		if (vu_post_send(p.qp[s], (uint64_t)sent[s], IBV_WR_SEND, sb[s].mr, sb[s].p, 8, 0,
				 flags | IBV_SEND_INLINE)) {
			SR_FAIL("side %d: post of message %d failed", s, sent[s]);
			break;
		}
		sent[s]++;
		if (vu_wait(p.rcq[r], &wc, 5000) != 1) {
			SR_FAIL("side %d: message %d did not arrive", r, sent[s] - 1);
			break;
		}
		uint64_t k = wc.wr_id, got_v;

		memcpy(&got_v, rb[r].p + 8 * k, 8);
		if (wc.status != IBV_WC_SUCCESS || wc.byte_len != 8 || got_v != v) {
			SR_FAIL("side %d: message %d: %s, value %#llx, wanted %#llx", r,
				sent[s] - 1, vu_wc_str(&wc), (unsigned long long)got_v,
				(unsigned long long)v);
			break;
		}
		CHECK_EQ(vu_post_recv(p.qp[r], k, rb[r].mr, rb[r].p + 8 * k, 8), 0);
	}
	/* Every signaled SEND completes (its ACK covers the unsignaled ones before it). */
	for (int s = 0; s < 2; s++) {
		struct ibv_wc wc;

		while (sigs[s] < sent[s] / SIG && vu_wait(p.scq[s], &wc, 5000) == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				SR_FAIL("side %d: send completion %s", s, vu_wc_str(&wc));
			sigs[s]++;
		}
		if (sigs[s] != sent[s] / SIG)
			SR_FAIL("side %d: %d signaled SENDs completed, wanted %d", s, sigs[s],
				sent[s] / SIG);
	}
	acks = vu_stat("acks_sent") - acks0;
	skipped = vu_stat("ackreq_skipped") - skip0;
	printf("  %d messages, %lld ACKs sent, %lld message ends did not ask\n",
	       sent[0] + sent[1], (long long)acks, (long long)skipped);
	/* One in LAZY asks (more after a stall of ack_defer_us); every message asked, and was
	 * acknowledged, before ack_lazy. Under loss every probe and repair asks too, and each
	 * duplicate is acknowledged again: only what skipped is asserted there. */
	if (!lossy && acks * 2 > sent[0] + sent[1])
		SR_FAIL("%lld ACKs for %d messages: more than one per two", (long long)acks,
			sent[0] + sent[1]);
	if (skipped * 2 < sent[0] + sent[1])
		SR_FAIL("%lld of %d message ends did not ask: fewer than half", (long long)skipped,
			sent[0] + sent[1]);
	vu_pair_destroy(&p);
	for (int s = 0; s < 2; s++) {
		vu_buf_free(&rb[s]);
		vu_buf_free(&sb[s]);
	}
}

int main(void)
{
	char v[16];
	bool lossy = getenv("SOFTRDMA_FAULT") && *getenv("SOFTRDMA_FAULT");

	sr_test_timeout(120);
	snprintf(v, sizeof(v), "%d", DEFER_MS * 1000);
	setenv("SOFTRDMA_ACK_DEFER_US", v, 1);
	snprintf(v, sizeof(v), "%d", LAZY);
	setenv("SOFTRDMA_ACK_LAZY", v, 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &tgt, 4096, VU_ACCESS_ALL) == 0);
	cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq);
	if (!lossy) {
		REQUIRE(rp_open(&rp, &dev.gid) == 0);
		{
			/* The first SIOCGSTAMPNS turns on receive timestamps */
			struct timespec ts;

			(void)ioctl(rp.fd, SIOCGSTAMPNS, &ts);
		}
		requester();
		responder();
		rp_close(&rp);
	}
	pingpong(lossy);
	if (lossy) {
		int64_t probes = vu_stat("tail_probes"), naks = vu_stat("seq_naks_rcvd");

		printf("  under loss: %lld tail-loss probes, %lld sequence NAKs\n",
		       (long long)probes, (long long)naks);
		CHECK(probes + naks > 0);
	}
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	vu_buf_free(&tgt);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_ack_lazy");
}
