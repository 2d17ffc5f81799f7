/* SPDX-License-Identifier: MIT */
/*
 * The progress thread does not run ahead of an application that polls its CQ (engine/nic.c,
 * backlog_pause_us).
 *
 * When receive completions pile up in a CQ whose consumer polls it (nobody sleeps on its
 * channel) while that consumer is not running, the thread stops receiving once SR_CQ_BACKLOG
 * (32) of them wait: the rest stays in the socket, and the application, when it polls the CQ
 * empty, receives it itself. Otherwise the application would find hundreds of completions made
 * long before, in one burst, and measure an impossible rate (perftest's UD receiver reported
 * 100 GB/s on loopback). The pause is bounded: a consumer that does not come back within
 * backlog_pause_us gets everything received anyway.
 *
 * A raw UDP socket of this test (tests/common/rawpeer.c) sends 200 UD SENDs to a UD QP whose
 * application sleeps. Each case runs in a child process with its own backlog_pause_us:
 *   - 2 s: after the thread has paused, the CQ holds at least 32 and at most 64 (one receive
 *     batch more) completions; polling then collects all 200, in order;
 *   - 20 ms: after 300 ms without polling, all 200 are in the CQ already, and the expired
 *     pause is counted.
 * A pause is for a consumer that is not running: one that polled the CQ within
 * backlog_idle_us only has a deep queue, and the thread goes on receiving for it.
 *   - idle 10 s, the CQ polled (empty) just before 100 sends: no pause, all 100 are in the
 *     CQ without the application polling again;
 *   - the same with 200 sends: a pause once 128 (SR_CQ_BACKLOG_DEEP) wait, however recent
 *     the poll: the CQ then holds 128..160;
 *   - idle 1 ms (the default), the CQ polled 50 ms before the sends: the pause as above.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <unistd.h>

#define NMSG 200
#define MSG 64
#define QKEY 0x11111111u

static int64_t wait_stat(const char *name, int64_t want, int ms)
{
	uint64_t end = vu_now_ms() + (uint64_t)ms;
	int64_t v;

	while ((v = vu_stat(name)) < want && vu_now_ms() < end)
		vu_sleep_ms(1);
	return v;
}

enum mode { COMES_BACK, EXPIRES, RECENT_POLL, RECENT_DEEP, OLD_POLL };

static int run(int sock, void *arg)
{
	enum mode mode = *(enum mode *)arg;
	bool expire = mode == EXPIRES;
	int nmsg = mode == RECENT_POLL ? 100 : NMSG;
	struct vu_dev dev;
	struct vu_buf rb;
	struct rawpeer rp;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct ibv_wc wc[NMSG + 8];
	uint8_t hdr[64], msg[MSG];
	int n, got;

	(void)sock;
	setenv("SOFTRDMA_BACKLOG_PAUSE_US", expire ? "20000" : "2000000", 1);
	if (mode == RECENT_POLL || mode == RECENT_DEEP)
		setenv("SOFTRDMA_BACKLOG_IDLE_US", "10000000", 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rb, NMSG * (MSG + 40), VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 1024, NULL, NULL, 0);
	REQUIRE(cq);
	vu_qp_cfg_default(&q, IBV_QPT_UD);
	q.max_recv_wr = NMSG;
	vu_conn_cfg_default(&c);
	c.qkey = QKEY;
	qp = vu_qp_create(&dev, cq, cq, &q);
	REQUIRE(qp);
	REQUIRE(vu_qp_connect(qp, &c, NULL, 0) == 0);
	for (int i = 0; i < NMSG; i++)
		REQUIRE(vu_post_recv(qp, (uint64_t)i, rb.mr, rb.p + i * (MSG + 40), MSG + 40) == 0);

	if (mode == RECENT_POLL || mode == RECENT_DEEP || mode == OLD_POLL) {
		CHECK_EQ(ibv_poll_cq(cq, 1, wc), 0);	/* the consumer has polled (empty) */
		if (mode == OLD_POLL)
			vu_sleep_ms(50);
	}
	for (int i = 0; i < nmsg; i++) {
		uint8_t op = SR_OPC(SR_TR_UD, SR_OP_SEND_ONLY);
		size_t hlen = sr_opcode[op].length;

		memset(hdr, 0, sizeof(hdr));
		sr_bth_build((struct sr_bth *)hdr, op, false, false, 0, SR_DEFAULT_PKEY, qp->qp_num,
			     false, (uint32_t)i);
		sr_deth_build((struct sr_deth *)(hdr + sr_opcode[op].offset[SR_H_DETH]), QKEY, 0x42);
		memset(msg, i, sizeof(msg));
		REQUIRE(rp_send(&rp, hdr, hlen, msg, sizeof(msg), 0) == 0);
	}

	if (mode == RECENT_POLL) {
		/* Polled a moment ago: the thread takes everything, with no pause. */
		CHECK(wait_stat("rx_packets", nmsg, 5000) >= nmsg);
		vu_sleep_ms(20);
		CHECK_EQ(vu_stat("rx_pauses"), 0);
		n = ibv_poll_cq(cq, NMSG + 8, wc);
		CHECK_EQ(n, nmsg);
		got = n > 0 ? n : 0;
	} else if (mode == RECENT_DEEP) {
		/* Polled a moment ago, but 128 wait: the thread pauses all the same. */
		CHECK(wait_stat("rx_pauses", 1, 5000) >= 1);
		vu_sleep_ms(20);
		n = ibv_poll_cq(cq, NMSG + 8, wc);
		if (n < 128 || n > 160)
			SR_FAIL("after the pause the CQ held %d completions, wanted 128..160", n);
		got = n > 0 ? n : 0;
		got += vu_poll(cq, wc + got, NMSG - got, 5000);
	} else if (!expire) {
		/* The thread receives a batch or two, sees the backlog and leaves the rest. */
		CHECK(wait_stat("rx_pauses", 1, 5000) >= 1);
		vu_sleep_ms(20);
		n = ibv_poll_cq(cq, NMSG + 8, wc);
		if (n < 32 || n > 64)
			SR_FAIL("after the pause the CQ held %d completions, wanted 32..64", n);
		CHECK_EQ(vu_stat("rx_pause_expired"), 0);
		/* Polling takes the rest: the application receives it itself. */
		got = n > 0 ? n : 0;
		got += vu_poll(cq, wc + got, NMSG - got, 5000);
	} else {
		/* Nobody polls: once the pause expires the thread receives everything. */
		vu_sleep_ms(300);
		CHECK(vu_stat("rx_pause_expired") >= 1);
		n = ibv_poll_cq(cq, NMSG + 8, wc);
		CHECK_EQ(n, NMSG);
		got = n > 0 ? n : 0;
	}
	CHECK_EQ(got, nmsg);
	for (int i = 0; i < got; i++) {
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != (uint64_t)i ||
		    wc[i].byte_len != MSG + 40 || rb.p[i * (MSG + 40) + 40] != (uint8_t)i) {
			SR_FAIL("completion %d: %s", i, vu_wc_str(&wc[i]));
			break;
		}
	}
	CHECK_EQ(vu_stat("drop_no_rwqe"), 0);

	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&rb);
	vu_close(&dev);
	return 0;
}

int main(void)
{
	struct vu_child ch;

	static enum mode modes[] = { COMES_BACK, EXPIRES, RECENT_POLL, RECENT_DEEP, OLD_POLL };
	static const char *const what[] = {
		"backlog pause, the application comes back", "backlog pause expires",
		"no pause for a consumer that polled within backlog_idle_us",
		"backlog pause at 128 for a consumer that polled within backlog_idle_us",
		"backlog pause, the consumer polled 50 ms before",
	};

	sr_test_timeout(150);
	for (int i = 0; i < 5; i++) {
		printf("%s\n", what[i]);
		REQUIRE(vu_fork(&ch, run, &modes[i], 30) == 0);
		CHECK_EQ(vu_child_wait(&ch, 40), 0);
	}
	return sr_test_done("test_rx_backlog");
}
