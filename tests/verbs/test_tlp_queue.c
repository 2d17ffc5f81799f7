/* SPDX-License-Identifier: MIT */
/*
 * A queue that grows on the return path must not make the requester resend what arrived
 * (src/transport/comp.c: the late-ACK rule of repair_answered and its rtt_bound). Driven against a raw UDP peer of this test (tests/common/rawpeer.c)
 * that loses nothing and answers in order, each ACK later than the one before, as ACKs do that
 * wait in a shaper's queue behind the data of earlier answers.
 *
 * The case it models, seen through a 1 Gbit/s shaper (bench/rtrs.sh netns-link, RTRS READ of
 * 128 KiB at depth 32): the client's small requests are acknowledged behind up to 32 answers
 * of 128 KiB (milliseconds), its round trip was sampled while the queue was empty, the
 * tail-loss probe fired long before the ACK came, Karn's rule then gave up every sample that
 * would have shown the longer round trip (so the estimate never moved), and each late ACK of
 * a probed packet read as the probe's answer, "the rest is lost": a go-back-N of every request
 * outstanding. 1,090-1,233 resends per 1000 requests, every one a duplicate at the server.
 *
 * Here: WRITEs of one packet, 16 outstanding, on a QP whose round trip is set to 2 ms as if
 * measured (sr_priv_qp_set_rtt: the timers fire when the test means them to, whatever the
 * machine's load), with the fast go-back-N's floor at 1 s (what is tested is the tail-loss
 * probe and what its late ACK starts). The peer answers each packet DELAY(i) after it
 * arrived, growing from 20 ms to 100 ms over the first RAMP packets and staying there, never
 * sooner than the ACK before it (a queue is FIFO); a packet it has seen already is answered
 * with an ACK of the newest PSN it has, queued the same way. Nothing is lost: every packet
 * sent twice is spurious, and they are counted. The old engine resent four or five per WRITE
 * (930-1,221 packets for 240, after 161-196 probes: each probe's late ACK started a go-back-N
 * of every WRITE outstanding, and no sample survived a probe); now 189-513 (25-78 probes).
 * The bound is a count, not a time: fewer than three resent packets per WRITE.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"
#include "wire/psn.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MTU 1024
#define FAKE_QPN 0x00cafe
#define RVA 0x100000000ull
#define RKEY 0x1357
#define DEPTH 16
#define RTT_NS 2000000ull	/* the round trip the QP starts from */
#define MIN_US 20000
#define RAMP 32		/* packets over which the delay grows to MAX_US */
#define MAX_US 100000
#define TOTAL 240
#define QLEN 4096
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf lb;
static struct rawpeer rp;
static struct ibv_cq *cq;
static struct ibv_qp *qp;

static struct {
	uint64_t at;	/* us */
	uint32_t psn;
} q[QLEN];
static unsigned qh, qt;
static uint64_t last_at;

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* The ACK of psn leaves at now + delay, never before the one queued before it. */
static void queue_ack(uint32_t psn, uint64_t delay)
{
	uint64_t at = now_us() + delay;

	if (at < last_at)
		at = last_at;
	last_at = at;
	REQUIRE(qt - qh < QLEN);
	q[qt % QLEN].at = at;
	q[qt % QLEN].psn = psn;
	qt++;
}

static void send_due(void)
{
	uint64_t t = now_us();

	while (qh != qt && q[qh % QLEN].at <= t) {
		REQUIRE(rp_send_ack(&rp, qp->qp_num, q[qh % QLEN].psn,
				    SR_AETH_ACK | SR_AETH_ACK_UNLIMITED) == 0);
		qh++;
	}
}

static uint64_t delay_of(uint32_t k)	/* k: the packet's index from the first */
{
	if (k >= RAMP)
		return MAX_US;
	return MIN_US + (uint64_t)(MAX_US - MIN_US) * k / RAMP;
}

int sr_priv_qp_set_rtt(struct ibv_qp *qp, uint64_t srtt_ns, uint64_t rttvar_ns);

int main(void)
{
	struct vu_qp_cfg qc;
	struct vu_conn_cfg c;
	const uint32_t P0 = 9000;
	uint32_t next = P0;	/* the next new PSN the peer expects */
	unsigned posted = 0, done = 0, resent = 0;
	uint64_t t_end;
	int64_t probes0, bounds0;

	sr_test_timeout(120);
	/* The fast go-back-N out of the way (1 s, as TCP's RTO floor of 200 ms keeps it out of a
	 * round trip's way): what is tested is the probe and what its late ACK starts. */
	setenv("SOFTRDMA_RTO_MIN_US", "1000000", 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, MTU, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 2 * DEPTH, NULL, NULL, 0);
	REQUIRE(cq);
	vu_fill(lb.p, MTU, 3);
	vu_qp_cfg_default(&qc, IBV_QPT_RC);
	qc.max_send_wr = 2 * DEPTH;
	vu_conn_cfg_raw(&c, P0, 0);
	c.timeout = 18;	/* 1.07 s: the IBA timer stays out of the way */
	qp = vu_qp_connect_raw(&dev, cq, &qc, &c, &rp.gid, FAKE_QPN);
	REQUIRE(sr_priv_qp_set_rtt(qp, RTT_NS, RTT_NS / 4) == 0);

	probes0 = vu_stat("tail_probes");
	bounds0 = vu_stat("rtt_bounds");
	t_end = now_us() + 60 * 1000000ull;	/* (it takes about 2 s) */
	while (done < TOTAL && now_us() < t_end) {
		static uint8_t buf[4096];
		struct ibv_wc wc[DEPTH];
		struct sr_pkt pkt;
		int n, wait = 1;

		while (posted < TOTAL && posted - done < DEPTH) {
			REQUIRE(vu_post_rdma(qp, posted, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 64,
					     RVA, RKEY, 0) == 0);
			posted++;
		}
		if (qh != qt) {
			uint64_t t = now_us();

			wait = q[qh % QLEN].at <= t ? 0 : (int)((q[qh % QLEN].at - t + 999) / 1000);
			if (wait > 1)
				wait = 1;
		}
		if (rp_recv(&rp, buf, sizeof(buf), &pkt, wait) > 0 &&
		    pkt.opcode == OPC(WRITE_ONLY)) {
			uint32_t k = pkt.psn - P0;	/* no wrap: PSNs from 9000 */

			if (pkt.psn == next) {
				next++;
				queue_ack(pkt.psn, delay_of(k));
			} else if (sr_psn_lt(pkt.psn, next)) {
				resent++;
				queue_ack(next - 1, delay_of(k));
			} else {
				SR_FAIL("PSN %u beyond the expected %u (nothing is lost here)",
					pkt.psn, next);
				break;
			}
		}
		send_due();
		n = ibv_poll_cq(cq, DEPTH, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				SR_FAIL("WRITE %llu: %s", (unsigned long long)wc[i].wr_id,
					ibv_wc_status_str(wc[i].status));
				goto out;
			}
			done++;
		}
	}
	printf("%u of %u WRITEs done; %u packets resent; tail-loss probes %lld, fast go-back-Ns "
	       "%lld, local ACK timeouts %lld, round-trip bounds %lld, samples %lld (mean %lld us)\n",
	       done, TOTAL, resent,
	       (long long)(vu_stat("tail_probes") - probes0), (long long)vu_stat("fast_retransmits"),
	       (long long)vu_stat("retry_timeouts"), (long long)(vu_stat("rtt_bounds") - bounds0),
	       (long long)vu_stat("rtt_samples"),
	       (long long)(vu_stat("rtt_samples") ? vu_stat("rtt_sample_us") / vu_stat("rtt_samples")
						  : 0));
	CHECK_EQ(done, TOTAL);
	CHECK(resent < 3 * TOTAL);
out:
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_tlp_queue");
}
