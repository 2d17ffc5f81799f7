/* SPDX-License-Identifier: MIT */
/*
 * The tail-loss probe waits its delay after the last packet sent for the first time, not only
 * after the last progress (src/transport/comp.c sr_qp_timers, req.c comp.last_new), driven
 * packet by packet against a raw UDP peer of this test (tests/common/rawpeer.c).
 *
 * The bug it guards against, seen with UCX's rendezvous by RDMA WRITE between two network
 * namespaces: a small WRITE leaves, then the rest of the message (a million bytes) goes out a
 * few hundred microseconds later, before the small one is acknowledged. Counted from the small
 * one, the probe fired while the large one's packets had just been sent, and the ACK of the
 * small one, already on its way, then answered the probe: "that packet alone acknowledged,
 * more outstanding" reads as "the rest is lost", and the requester resent the whole message
 * (comp.c repair_answered). A tail just sent is not a lost tail: the probe now counts from the
 * last new packet, as TCP arms its probe timeout at each new transmission.
 *
 * The peer never acknowledges the two WRITEs, so the probe comes; what is asserted is when,
 * by the kernel's receive timestamps of the packets at the peer (the raw socket is on this
 * host): at least SR_TLP_MIN_US after the large WRITE's last packet. A timer never fires
 * early, so a loaded machine can only make the gap longer. The large WRITE is posted 250 us
 * before the probe would come if counted from the small one: that delay (the probe's, plus
 * the progress thread's lateness here) is measured first, on a small WRITE alone. A run whose
 * large WRITE came after the probe anyway proves nothing and is run again.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define MTU 1024
#define FAKE_QPN 0x00cafe
#define RVA 0x100000000ull
#define RKEY 0x2468
#define SR_TLP_MIN_US 500	/* comp.c tlp_ns: the probe's smallest delay */
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf lb;
static struct rawpeer rp;
static struct ibv_cq *cq;
static struct ibv_qp *qp;

/* The next packet from the QP, with its receive time (ns, CLOCK_REALTIME); false if none. */
static bool next_pkt(struct sr_pkt *pkt, uint64_t *at_ns, int ms)
{
	static uint8_t buf[4096];
	struct timespec ts;

	if (rp_recv(&rp, buf, sizeof(buf), pkt, ms) <= 0)
		return false;
	REQUIRE(ioctl(rp.fd, SIOCGSTAMPNS, &ts) == 0);
	*at_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	return true;
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

static void new_qp(uint32_t sq_psn)
{
	struct vu_conn_cfg c;

	vu_conn_cfg_raw(&c, sq_psn, 0);
	c.timeout = 14;	/* 67 ms: the probe (0.5 ms) and the fast go-back-N (10 ms) come first */
	qp = vu_qp_connect_raw(&dev, cq, NULL, &c, &rp.gid, FAKE_QPN);
}

static void end_qp(void)
{
	struct sr_pkt pkt;
	uint64_t t;

	if (qp)
		CHECK_EQ(ibv_destroy_qp(qp), 0);
	qp = NULL;
	while (next_pkt(&pkt, &t, 50))
		;	/* probes and go-back-N of an unfinished case */
}

/* 0: passed, 1: inconclusive (run again), -1: failed. */
static int one_run(uint32_t P)
{
	struct sr_pkt pkt;
	uint64_t t_small, t_last = 0, t_probe, d_ns;
	uint32_t want;

	int64_t samples = vu_stat("rtt_samples");

	new_qp(P);
	/* A first WRITE, acknowledged at once: a round-trip sample (tens of us), so the probe
	 * delay is its floor of 0.5 ms. */
	CHECK_EQ(vu_post_rdma(qp, 1, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 1, RVA, RKEY, 0), 0);
	if (!next_pkt(&pkt, &t_small, 2000) || pkt.opcode != OPC(WRITE_ONLY) || pkt.psn != P) {
		SR_FAIL("no first WRITE (PSN %u)", P);
		return -1;
	}
	ack(P);
	if (!wait_done(1))
		return -1;
	if (vu_stat("rtt_samples") == samples) {
		printf("no round-trip sample (the ACK came after a probe): again\n");
		return 1;
	}

	/* Calibration: a small WRITE alone, not acknowledged until its probe comes, D after it
	 * (the probe delay plus the progress thread's lateness on this machine). The probe
	 * resends it, so no round-trip sample is taken (Karn): the delay stays the same. */
	CHECK_EQ(vu_post_rdma(qp, 2, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 1, RVA, RKEY, 0), 0);
	if (!next_pkt(&pkt, &t_small, 2000) || pkt.opcode != OPC(WRITE_ONLY) || pkt.psn != P + 1 ||
	    !next_pkt(&pkt, &t_probe, 2000) || pkt.opcode != OPC(WRITE_ONLY) || pkt.psn != P + 1) {
		SR_FAIL("no small WRITE (PSN %u) and its probe", P + 1);
		return -1;
	}
	d_ns = t_probe - t_small;
	ack(P + 1);
	if (!wait_done(2))
		return -1;
	while (next_pkt(&pkt, &t_probe, 5))
		;	/* a second probe sent before the ACK was taken */

	/* The small WRITE, then D - 250 us later the large one (3 packets: sent at once, since
	 * it fills whole packets, engine/post.c post_deferred). Neither is acknowledged. Counted
	 * from the small one, the probe would come about 250 us after the large one. */
	P++;
	CHECK_EQ(vu_post_rdma(qp, 2, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 1, RVA, RKEY, 0), 0);
	if (!next_pkt(&pkt, &t_small, 2000) || pkt.opcode != OPC(WRITE_ONLY) || pkt.psn != P + 1) {
		SR_FAIL("no small WRITE (PSN %u)", P + 1);
		return -1;
	}
	if (d_ns > 250000)
		usleep((useconds_t)((d_ns - 250000) / 1000));
	CHECK_EQ(vu_post_rdma(qp, 3, IBV_WR_RDMA_WRITE, lb.mr, lb.p + MTU, 3 * MTU, RVA + MTU,
			      RKEY, 0), 0);
	want = P + 2;
	for (;;) {
		if (!next_pkt(&pkt, &t_probe, 2000)) {
			SR_FAIL("no packet after PSN %u", want - 1);
			return -1;
		}
		if (pkt.psn == P + 1 && pkt.opcode == OPC(WRITE_ONLY))
			break;	/* the probe: the small WRITE again */
		if (pkt.psn != want || want > P + 4) {
			SR_FAIL("got %s PSN %u, wanted PSN %u or the probe of PSN %u",
				sr_opcode_name(pkt.opcode), pkt.psn, want, P + 1);
			return -1;
		}
		t_last = t_probe;
		want++;
	}
	if (want != P + 5) {
		printf("the probe came %.0f us after the small WRITE, before the large one was "
		       "sent (this thread slept too long): again\n", (t_probe - t_small) / 1e3);
		return 1;
	}
	printf("probe delay measured alone %.0f us; large WRITE %.0f us after the small one, probe "
	       "%.0f us after the large one\n", d_ns / 1e3, (t_last - t_small) / 1e3,
	       (t_probe - t_last) / 1e3);
	if (t_probe - t_last < (SR_TLP_MIN_US - 20) * 1000ull) {
		SR_FAIL("the tail-loss probe came %.0f us after the last new packet, wanted at "
			"least %d us", (t_probe - t_last) / 1e3, SR_TLP_MIN_US);
		return -1;
	}
	/* Now the peer acknowledges everything; both complete. */
	ack(P + 4);
	if (!wait_done(2) || !wait_done(3))
		return -1;
	return 0;
}

int main(void)
{
	int r = 1;

	sr_test_timeout(60);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 8 * MTU, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	{
		struct timespec ts;	/* the first SIOCGSTAMPNS turns receive timestamps on */

		(void)ioctl(rp.fd, SIOCGSTAMPNS, &ts);
	}
	cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq);
	vu_fill(lb.p, 8 * MTU, 7);

	printf("a tail-loss probe waits its delay after the last new packet\n");
	/* A run is inconclusive, not failed, when this thread or the raw peer slept too long
	 * (the sanitizer build at a load average of 16 had five in a row); each takes a few
	 * tenths of a second, so twenty stay well inside the timeout. */
	for (int i = 0; i < 20 && r == 1; i++) {
		r = one_run(1000 + 100 * (uint32_t)i);
		end_qp();
	}
	if (r == 1)
		SR_FAIL("twenty runs in a row were inconclusive (the machine is too loaded)");

	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_tlp_after_send");
}
