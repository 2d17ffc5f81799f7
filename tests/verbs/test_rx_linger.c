/* SPDX-License-Identifier: MIT */
/*
 * The progress thread's linger backs off when it finds nothing (param rx_linger_us,
 * engine/nic.c linger_next).
 *
 * After a drain that took packets, while no application polls, the progress thread keeps
 * receiving until the socket has been empty for rx_linger_us (30 us). A linger that took
 * nothing was a spin for nothing, one a sender sharing the CPU pays for (two ib_write_bw pairs
 * on 2 cores moved 0.8x of one pair); so after lingers in a row that took nothing the next
 * drains go without one (1, 3, 7, then 15 each time), and a linger that takes anything
 * ends that.
 *
 * A raw UDP peer (tests/common/rawpeer.c) writes one byte at a time into an MR through an RC
 * QP that this test never polls for (a WRITE makes no responder completion): so the progress
 * thread receives every packet. The linger is LINGER_US here (30 us by default): on a loaded
 * machine (CI) the peer's sending thread is preempted for longer than 30 us now and then,
 * and a dense stream's lingers missed as often as the back-off is there to notice.
 * 1. Sparse: SPARSE WRITEs GAP_US apart (well beyond the linger). Each drain takes one packet
 *    and the linger after it finds nothing, so most drains skip the linger: rx_linger_skips
 *    grows by at least half of SPARSE (the back-off gives SPARSE - 5 for 40; the old rule
 *    none), and every byte lands.
 * 2. Dense: bursts of BURST WRITEs sent back to back until a linger takes a packet
 *    (rx_linger_takes grows): the back-off of part 1 ends once packets come within the
 *    linger. For DENSE_S seconds at most; every byte lands.
 */
#include <stdlib.h>
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#define FAKE_QPN 0x00c1c1
#define LINGER_US "300"
#define SPARSE 40
#define GAP_US 5000
#define BURST 500
#define DENSE_S 10

static struct vu_dev dev;
static struct vu_buf tgt;
static struct rawpeer rp;
static struct ibv_qp *qp;
static uint32_t rpsn;	/* the peer's next request PSN */

/* One byte, the PSN's low byte, at tgt + psn % 4096; an ACK asked for when ackreq. */
static void peer_write(bool ackreq)
{
	REQUIRE(rp_send_write_byte(&rp, qp->qp_num, rpsn, ackreq, SR_BTH_SR_MARK,
				   (uint64_t)(uintptr_t)tgt.p + rpsn % 4096, tgt.mr->rkey) == 0);
	rpsn++;
}

/* The last n WRITEs' bytes are all in place within 5 s (the progress thread places them). */
static bool landed(uint32_t n)
{
	uint64_t end = vu_now_ms() + 5000;

	for (;;) {
		uint32_t bad = 0;

		for (uint32_t psn = rpsn - n; psn != rpsn; psn++)
			bad += tgt.p[psn % 4096] != (uint8_t)psn;
		if (!bad)
			return true;
		if (vu_now_ms() > end) {
			SR_FAIL("%u of the last %u bytes written did not land within 5 s", bad, n);
			return false;
		}
		vu_sleep_ms(1);
	}
}

int main(void)
{
	struct vu_conn_cfg c;
	struct ibv_cq *cq;
	int64_t skips0, skips, takes0, takes = 0;
	uint64_t dense_end;
	int bursts;

	sr_test_timeout(120);
	setenv("SOFTRDMA_RX_LINGER_US", LINGER_US, 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &tgt, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq);
	vu_conn_cfg_raw(&c, 100, 0);
	qp = vu_qp_connect_raw(&dev, cq, NULL, &c, &rp.gid, FAKE_QPN);

	/* 1. Sparse. */
	skips0 = vu_stat("rx_linger_skips");
	REQUIRE(skips0 >= 0);
	for (int i = 0; i < SPARSE; i++) {
		peer_write(true);
		usleep(GAP_US);
		rp_drain(&rp);
	}
	CHECK(landed(SPARSE));
	skips = vu_stat("rx_linger_skips") - skips0;
	printf("sparse: %d WRITEs %d us apart, %lld drains skipped the linger\n", SPARSE, GAP_US,
	       (long long)skips);
	CHECK(skips >= SPARSE / 2);

	/* 2. Dense. */
	takes0 = vu_stat("rx_linger_takes");
	dense_end = vu_now_ms() + DENSE_S * 1000;
	for (bursts = 1;; bursts++) {
		for (int i = 0; i < BURST; i++)
			peer_write(i == BURST - 1);
		CHECK(landed(BURST));
		rp_drain(&rp);
		takes = vu_stat("rx_linger_takes") - takes0;
		if (takes > 0 || vu_now_ms() >= dense_end)
			break;
	}
	printf("dense: a linger took packets again after %d burst(s) of %d (%lld receives)\n",
	       bursts, BURST, (long long)takes);
	CHECK(takes > 0);

	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&tgt);
	vu_close(&dev);
	return sr_test_done("test_rx_linger");
}
