/* SPDX-License-Identifier: MIT */
/*
 * The progress thread's watch (parameter rx_watch_us, docs/architecture.md "The soft NIC and
 * its threads") never keeps a packet from a consumer that sleeps on a completion channel.
 *
 * While an application polls its CQs, the thread leaves the socket unarmed and looks for
 * packets only every rx_watch_us. An application that then arms its CQ and sleeps on the
 * channel's fd with poll() (as rsockets and QEMU do, rather than in ibv_get_cq_event) is not
 * seen to stop polling: ibv_req_notify_cq must end the watch (the thread re-arms the socket),
 * or the next packet waits for the watch's next look. Here the watch is 3 s long, so a packet
 * left waiting shows as a sleep past 1.5 s.
 *
 * The peer is a raw UDP socket of this test (tests/common/rawpeer.c) sending SENDs to an RC QP.
 * Each round: the test polls its CQ every millisecond for 5 ms, and a SEND arrives 2 ms after
 * its last poll (the thread, woken by it, takes it and starts watching: counter
 * rx_watch_takes); 20 ms more of polling, then the CQ is armed, the next SEND goes out and the
 * test sleeps in poll() on the channel's fd. Twice with poll(), once with ibv_get_cq_event (which tells softrdma that the
 * application sleeps).
 */
#include <poll.h>
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#define FAKE_QPN 0x00beef
#define ROUNDS 3
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

/* Polls cq every millisecond for ms milliseconds, counting what it finds in *got. */
static void poll_for(struct ibv_cq *cq, int ms, int *got)
{
	uint64_t end = vu_now_ms() + (uint64_t)ms;
	struct ibv_wc wc;

	while (vu_now_ms() < end) {
		int n = ibv_poll_cq(cq, 1, &wc);

		REQUIRE(n >= 0);
		if (n) {
			CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			CHECK_EQ(wc.opcode, IBV_WC_RECV);
			(*got)++;
		}
		usleep(1000);
	}
}

int main(void)
{
	struct ibv_comp_channel *chan;
	struct ibv_cq *cq, *ev_cq;
	struct ibv_qp *qp;
	struct ibv_wc wc;
	uint8_t buf[256];
	struct sr_pkt pkt;
	uint32_t psn = 0;
	void *ev_ctx;

	sr_test_timeout(120);
	/* Before the first verbs call: parameters are read once. */
	setenv("SOFTRDMA_RX_WATCH_US", "3000000", 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf, 2 * ROUNDS * 64, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	chan = ibv_create_comp_channel(dev.ctx);
	REQUIRE(chan);
	cq = ibv_create_cq(dev.ctx, 16, NULL, chan, 0);
	REQUIRE(cq);
	qp = vu_qp_to_peer(&dev, cq, NULL, &rp.gid, FAKE_QPN, &rbuf, 2 * ROUNDS, 64);
	REQUIRE(qp);

	for (int r = 0; r < ROUNDS; r++) {
		bool get_event = r == ROUNDS - 1;
		struct pollfd pfd = { .fd = chan->fd, .events = POLLIN };
		uint64_t t0, ms;
		int got = 0, n;

		printf("round %d: poll, then sleep in %s\n", r,
		       get_event ? "ibv_get_cq_event" : "poll() on the channel's fd");
		poll_for(cq, 5, &got);
		send_one(qp, psn);
		psn = (psn + 1) & 0xffffff;
		usleep(2000);
		poll_for(cq, 20, &got);
		CHECK_EQ(got, 1);

		REQUIRE(ibv_req_notify_cq(cq, 0) == 0);
		t0 = vu_now_ms();
		send_one(qp, psn);
		psn = (psn + 1) & 0xffffff;
		if (get_event) {
			n = ibv_get_cq_event(chan, &ev_cq, &ev_ctx) == 0;
		} else {
			n = poll(&pfd, 1, 2500) == 1;
			if (n)
				REQUIRE(ibv_get_cq_event(chan, &ev_cq, &ev_ctx) == 0);
		}
		ms = vu_now_ms() - t0;
		CHECK(n);
		if (!n)
			continue;
		ibv_ack_cq_events(ev_cq, 1);
		if (ms >= 1500)
			SR_FAIL("round %d: the completion came after %llu ms: the packet waited for "
				"the watch", r, (unsigned long long)ms);
		REQUIRE(vu_wait(cq, &wc, 2000) == 1);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(wc.wr_id, (uint64_t)(2 * r + 1));
		/* Both SENDs acknowledged. */
		while (rp_recv(&rp, buf, sizeof(buf), &pkt, 0) > 0)
			;
	}
	/* The thread did watch (else this test shows nothing). */
	CHECK(vu_stat("rx_watch_takes") > 0);

	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_EQ(ibv_destroy_comp_channel(chan), 0);
	rp_close(&rp);
	vu_buf_free(&rbuf);
	vu_close(&dev);
	return sr_test_done("test_rx_watch");
}
