/* SPDX-License-Identifier: MIT */
/*
 * An ACK that comes sooner after a tail-loss probe than the path's shortest round trip answers
 * the probed packet's first copy, not the probe, and says nothing about the packets after it
 * (src/transport/comp.c repair_answered). Driven packet by packet against a raw UDP peer of
 * this test (tests/common/rawpeer.c).
 *
 * The bug it guards against, seen through a shaped link (bench/rtrs.sh --link-mbit: tc tbf
 * between two namespaces): behind the shaper's queue the ACKs come late, the probe fires, and
 * the next ACK of the queue -- covering just the probed packet -- read as "that packet alone
 * acknowledged, more outstanding: the rest is lost", so the whole window was resent, every
 * copy a duplicate at the peer.
 *
 * The peer here answers each packet 100 ms late until the QP has that as its round trip (the
 * first flights are probed before any sample; Karn's rule keeps their answers out), then
 * leaves a 4-packet WRITE unacknowledged until the probe comes and at once acknowledges the
 * probed packet only. Nothing of the WRITE may be resent in the next 15 ms (the next probe
 * is 2 round trips away, the fast retransmission further): the old rule resent the three
 * others at once. Then it acknowledges everything and the WRITE completes.
 *
 * Nothing here may depend on when this test or the progress thread gets the CPU. The fast
 * go-back-N's floor (rto_min_us) is 1 s, as in test_tlp_queue: with the learned round trip
 * alone it came one round trip (100 ms) after the probe, and a timer pass or a test thread
 * late by that much on a loaded machine saw the go-back-N (its three resends, no early ACK)
 * instead of the probe's early ACK (1 of the first 2 runs beside two busy loops). What is
 * tested is the probe and what its early ACK starts, not that timer. And a probe of an
 * earlier flight can leave after the test drained them and before its ACK landed: packets
 * of PSNs already acknowledged are skipped (next_new), they are no part of the WRITE.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MTU 1024
#define FAKE_QPN 0x00cafe
#define RVA 0x100000000ull
#define RKEY 0x2468
#define DELAY_MS 100	/* far above a loaded machine's scheduling delays: the early ACK must stay early */
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf lb;
static struct rawpeer rp;
static struct ibv_cq *cq;
static struct ibv_qp *qp;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static bool next_pkt(struct sr_pkt *pkt, int ms)
{
	static uint8_t buf[4096];

	return rp_recv(&rp, buf, sizeof(buf), pkt, ms) > 0;
}

/* The next packet of PSN `psn` or later within ms (a late probe of an acknowledged PSN, below
 * `psn`, is skipped; no wrap: PSNs from 5000). */
static bool next_new(struct sr_pkt *pkt, uint32_t psn, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	do {
		if (!next_pkt(pkt, (int)(end - now_ms())))
			return false;
		if (pkt->psn >= psn)
			return true;
		printf("skipped a late copy of acknowledged PSN %u\n", pkt->psn);
	} while (now_ms() < end);
	return false;
}

static void ack(uint32_t psn)
{
	REQUIRE(rp_send_ack(&rp, qp->qp_num, psn, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED) == 0);
}

static bool wait_done(uint64_t wr_id)
{
	struct ibv_wc wc;

	if (!vu_wait(cq, &wc, 2000) || wc.wr_id != wr_id || wc.status != IBV_WC_SUCCESS) {
		SR_FAIL("WRITE %llu: %s", (unsigned long long)wr_id, vu_wc_str(&wc));
		return false;
	}
	return true;
}

int main(void)
{
	struct vu_conn_cfg c;
	struct sr_pkt pkt;
	uint32_t P = 5000, F;
	int resent = 0, flights;

	sr_test_timeout(60);
	/* The fast go-back-N out of the way (see the top): 1 s, below the local ACK timeout. */
	setenv("SOFTRDMA_RTO_MIN_US", "1000000", 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 8 * MTU, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq);
	vu_fill(lb.p, 8 * MTU, 7);
	vu_conn_cfg_raw(&c, P, 0);
	c.timeout = 18;	/* 1.07 s: the IBA timer stays out of the way */
	qp = vu_qp_connect_raw(&dev, cq, NULL, &c, &rp.gid, FAKE_QPN);

	/* Round trips of DELAY_MS until one is sampled (the probes before the first sample
	 * double their delay per probe, so after a few flights one is answered unprobed). */
	printf("the QP learns a %d ms round trip\n", DELAY_MS);
	for (flights = 0; flights < 16 && vu_stat("rtt_samples") <= 0; flights++, P++) {
		CHECK_EQ(vu_post_rdma(qp, 1, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 1, RVA, RKEY, 0), 0);
		if (!next_new(&pkt, P, 2000) || pkt.psn != P) {
			SR_FAIL("no WRITE of PSN %u", P);
			goto out;
		}
		usleep(DELAY_MS * 1000);
		while (next_pkt(&pkt, 0))
			;	/* its probes */
		ack(P);
		if (!wait_done(1))
			goto out;
	}
	REQUIRE(vu_stat("rtt_samples") > 0);
	printf("sampled after %d flights\n", flights);

	/* A WRITE of four packets, none acknowledged until its probe comes. */
	int64_t early = vu_stat("probe_acks_early");

	F = P;
	CHECK_EQ(vu_post_rdma(qp, 2, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 4 * MTU, RVA, RKEY, 0), 0);
	for (uint32_t i = 0; i < 4; i++) {
		if (!next_new(&pkt, F, 2000) || pkt.psn != F + i) {
			SR_FAIL("no packet %u of the WRITE", i);
			goto out;
		}
	}
	if (!next_pkt(&pkt, 2000) || pkt.psn != F) {
		SR_FAIL("no tail-loss probe of PSN %u (got %s)", F, pkt.psn != F ? "another" : "none");
		goto out;
	}
	/* The first copy's ACK, late (what a queue delivers just after the probe left). */
	ack(F);
	uint64_t t0 = now_ms();

	while (now_ms() - t0 < 15) {
		if (!next_pkt(&pkt, 1))
			continue;
		if (pkt.psn > F && pkt.psn <= F + 3)	/* no wrap: PSNs from 5000 */
			resent++;
	}
	printf("resent within 15 ms of the early ACK: %d packet(s); probe_acks_early +%lld\n",
	       resent, (long long)(vu_stat("probe_acks_early") - early));
	CHECK_EQ(resent, 0);
	CHECK(vu_stat("probe_acks_early") > early);
	ack(F + 3);
	wait_done(2);
out:
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_tlp_early_ack");
}
