/* SPDX-License-Identifier: MIT */
/*
 * The watch grows (parameter rx_watch_max_us, docs/architecture.md "The soft NIC and its
 * threads"): while every look of the progress thread finds nothing to do (the application in
 * its polling loop, or an empty socket), the looks come less and less often, up to
 * rx_watch_max_us apart. An MPI rank polls for as long as it runs, and the thread woke every
 * rx_watch_us (5,000 times a second by default) for nothing.
 *
 * Here rx_watch_us is 20 ms and rx_watch_max_us 320 ms (SOFTRDMA_RX_WATCH_MAX_US=20000 in the
 * environment gives the fixed watch of before, and fails). Long, so that a loaded machine
 * does not end the watch: a look that finds the application has not polled for rx_watch_us
 * re-arms the socket, and the thread then sleeps until a datagram comes (fewer wake-ups, with
 * either watch). A SEND from the raw peer (tests/common/rawpeer.c) wakes the thread between
 * two polls of the test, so the thread starts watching; over the next 1.2 s of polling a
 * fixed watch wakes the thread about 60 times (counter thread_wakes), a grown one about 10.
 * Then the test stops polling and the peer sends another SEND: the thread must still take it
 * (a grown watch only looks less often), within 2 s.
 */
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#define FAKE_QPN 0x00beef
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf rbuf;
static struct rawpeer rp;

static void send_one(struct ibv_qp *qp, uint32_t psn)
{
	uint8_t hdr[64], msg[16];
	size_t hlen = rp_hdr_send(hdr, OPC(SEND_ONLY), qp->qp_num, psn, true);

	memset(msg, (int)psn, sizeof(msg));
	REQUIRE(rp_send(&rp, hdr, hlen, msg, sizeof(msg), 0) == 0);
}

/* Polls cq in a tight loop for ms milliseconds; returns the completions found. */
static int spin_poll(struct ibv_cq *cq, int ms)
{
	uint64_t end = vu_now_ms() + (uint64_t)ms;
	struct ibv_wc wc;
	int got = 0;

	while (vu_now_ms() < end) {
		int n = ibv_poll_cq(cq, 1, &wc);

		REQUIRE(n >= 0);
		if (n) {
			CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			CHECK_EQ(wc.opcode, IBV_WC_RECV);
			got++;
		}
	}
	return got;
}

int main(void)
{
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_wc wc;
	int64_t w0, w1, app0, rx0;
	uint64_t t0;
	int got;

	sr_test_timeout(120);
	/* Before the first verbs call: parameters are read once. */
	setenv("SOFTRDMA_RX_WATCH_US", "20000", 1);
	setenv("SOFTRDMA_RX_WATCH_MAX_US", "320000", 0);	/* 20000: the watch before */
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf, 4 * 64, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	REQUIRE(cq);
	qp = vu_qp_to_peer(&dev, cq, NULL, &rp.gid, FAKE_QPN, &rbuf, 4, 64);
	REQUIRE(qp);

	/* A datagram that comes between two polls wakes the thread, which takes it and, the
	 * application having polled a moment ago, starts watching. */
	got = spin_poll(cq, 20);
	send_one(qp, 0);
	usleep(5000);
	got += spin_poll(cq, 100);
	CHECK_EQ(got, 1);

	w0 = vu_stat("thread_wakes");
	got = spin_poll(cq, 1200);
	w1 = vu_stat("thread_wakes");
	CHECK_EQ(got, 0);
	printf("thread wake-ups in 1.2 s of polling: %lld (a fixed watch of 20 ms: ~60; %lld before)\n",
	       (long long)(w1 - w0), (long long)w0);
	CHECK(w1 - w0 < 30);

	/* The application stops polling: a packet still reaches its CQ, by the thread. */
	app0 = vu_stat("rx_app_datagrams");
	rx0 = vu_stat("rx_packets");
	send_one(qp, 1);
	t0 = vu_now_ms();
	while (vu_stat("rx_packets") == rx0 && vu_now_ms() - t0 < 5000)
		usleep(500);
	printf("taken by the thread after %llu ms\n", (unsigned long long)(vu_now_ms() - t0));
	CHECK(vu_stat("rx_packets") > rx0);
	if (vu_now_ms() - t0 >= 2000)
		SR_FAIL("the packet waited %llu ms for the thread",
			(unsigned long long)(vu_now_ms() - t0));
	REQUIRE(vu_wait(cq, &wc, 2000) == 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 1);
	CHECK_EQ(vu_stat("rx_app_datagrams"), app0);

	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&rbuf);
	vu_close(&dev);
	return sr_test_done("test_rx_watch_grow");
}
