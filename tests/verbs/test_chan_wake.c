/* SPDX-License-Identifier: MIT */
/*
 * A consumer asleep on a completion channel is woken by the datagram itself (parameter
 * chan_rx, core/cq.c "completion channel"), and a datagram never hangs anybody.
 *
 * The peer is a raw UDP socket of this test (tests/common/rawpeer.c) sending SENDs to two RC
 * QPs, A and B, whose receive CQs are on channels A and B.
 *
 * 1. Woken by the datagram: ROUNDS times, the test arms CQ A and sleeps in a blocking
 *    ibv_get_cq_event; a second thread sends the SEND 2 ms after the test said it sleeps. The
 *    sleeper, not the progress thread, takes most of them: rx_chan_datagrams counts at least
 *    half the rounds and rx_thread_wakes (a datagram woke the thread) at most half. Before
 *    the change every round woke the thread and no consumer received (no such counter).
 * 2. A datagram for another channel: a thread sleeps in ibv_get_cq_event on A; a SEND to B
 *    (CQ B armed) makes B's event within 2 s while A's sleeper goes on sleeping, and a SEND to A
 *    then wakes it within 2 s.
 * 3. Nobody waiting: a SEND to A with CQ A armed makes A's fd readable within 2 s (the progress
 *    thread received it: the last sleeper's registration must not keep it from the thread).
 * 4. The channel's fd is readable for events only: SENDs to B while the test poll()s A's fd
 *    (A having slept on the socket before) never make it readable.
 * 5. O_NONBLOCK set by fcntl after creation: ibv_get_cq_event returns EAGAIN at once, with
 *    SENDs for B arriving too, and A's event comes through poll() and a non-blocking get.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#define QPN_A 0x00bee1
#define QPN_B 0x00bee2
#define ROUNDS 100
#define NRECV 256

static struct vu_dev dev;
static struct vu_buf rbuf_a, rbuf_b;
static struct rawpeer rp;
static struct ibv_qp *qp_a, *qp_b;
static uint32_t psn_a, psn_b;
static pthread_mutex_t send_lock = PTHREAD_MUTEX_INITIALIZER;

/* Two threads send: one at a time on the raw peer. */
static void send_to(struct ibv_qp *qp, uint32_t *psn)
{
	pthread_mutex_lock(&send_lock);
	REQUIRE(rp_send_small(&rp, qp->qp_num, psn) == 0);
	pthread_mutex_unlock(&send_lock);
}
static atomic_int asleep, stop, sleeper_done;
static struct ibv_comp_channel *ch_a, *ch_b;
static struct ibv_cq *cq_a, *cq_b;

/* The ACKs the QPs send back: read and dropped (the socket must not fill). */
static void expect_recv(struct ibv_cq *cq)
{
	struct ibv_wc wc;

	REQUIRE(vu_wait(cq, &wc, 2000) == 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV);
}

/* Part 1's sender: a SEND to A 2 ms after the test said it sleeps. */
static void *sender(void *arg)
{
	(void)arg;
	for (int r = 0; r < ROUNDS && !atomic_load(&stop); r++) {
		while (!atomic_load(&asleep) && !atomic_load(&stop))
			usleep(100);
		atomic_store(&asleep, 0);
		usleep(2000);
		send_to(qp_a, &psn_a);
	}
	return NULL;
}

/* Part 2's sleeper: one blocking ibv_get_cq_event on A. */
static void *sleeper(void *arg)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	(void)arg;
	if (ibv_get_cq_event(ch_a, &ev_cq, &ev_ctx) == 0) {
		CHECK(ev_cq == cq_a);
		ibv_ack_cq_events(ev_cq, 1);
		atomic_store(&sleeper_done, 1);
	} else {
		atomic_store(&sleeper_done, -1);
	}
	return NULL;
}

static bool readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void get_event(struct ibv_comp_channel *ch, struct ibv_cq *want)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0);
	CHECK(ev_cq == want);
	ibv_ack_cq_events(ev_cq, 1);
}

int main(void)
{
	pthread_t t;
	int64_t chan0, wake0, chan1, wake1;

	sr_test_timeout(120);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf_a, NRECV * 64, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf_b, NRECV * 64, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	ch_a = ibv_create_comp_channel(dev.ctx);
	ch_b = ibv_create_comp_channel(dev.ctx);
	REQUIRE(ch_a && ch_b);
	cq_a = ibv_create_cq(dev.ctx, NRECV, NULL, ch_a, 0);
	cq_b = ibv_create_cq(dev.ctx, NRECV, NULL, ch_b, 0);
	REQUIRE(cq_a && cq_b);
	qp_a = vu_qp_to_peer(&dev, cq_a, NULL, &rp.gid, QPN_A, &rbuf_a, NRECV, 64);
	qp_b = vu_qp_to_peer(&dev, cq_b, NULL, &rp.gid, QPN_B, &rbuf_b, NRECV, 64);
	REQUIRE(qp_a && qp_b);

	/* 1. Woken by the datagram. */
	chan0 = vu_stat("rx_chan_datagrams");
	wake0 = vu_stat("rx_thread_wakes");
	REQUIRE(pthread_create(&t, NULL, sender, NULL) == 0);
	for (int r = 0; r < ROUNDS; r++) {
		REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
		atomic_store(&asleep, 1);
		get_event(ch_a, cq_a);
		expect_recv(cq_a);
		rp_drain(&rp);
	}
	pthread_join(t, NULL);
	chan1 = vu_stat("rx_chan_datagrams");
	wake1 = vu_stat("rx_thread_wakes");
	printf("part 1: %d rounds: rx_chan_datagrams %lld, rx_thread_wakes %lld\n", ROUNDS,
	       (long long)(chan1 - chan0), (long long)(wake1 - wake0));
	CHECK(chan0 >= 0 && chan1 - chan0 >= ROUNDS / 2);
	CHECK(wake1 - wake0 <= ROUNDS / 2);

	/* 2. A datagram for another channel never hangs a consumer, nor wakes A's. */
	REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
	REQUIRE(ibv_req_notify_cq(cq_b, 0) == 0);
	REQUIRE(pthread_create(&t, NULL, sleeper, NULL) == 0);
	usleep(20000);
	send_to(qp_b, &psn_b);
	CHECK(readable(ch_b->fd, 2000));
	get_event(ch_b, cq_b);
	expect_recv(cq_b);
	usleep(20000);
	CHECK_EQ(atomic_load(&sleeper_done), 0);
	send_to(qp_a, &psn_a);
	for (int i = 0; i < 200 && !atomic_load(&sleeper_done); i++)
		usleep(10000);
	CHECK_EQ(atomic_load(&sleeper_done), 1);
	pthread_join(t, NULL);
	expect_recv(cq_a);
	rp_drain(&rp);

	/* 3. Nobody waiting: the progress thread receives. */
	REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
	send_to(qp_a, &psn_a);
	CHECK(readable(ch_a->fd, 2000));
	get_event(ch_a, cq_a);
	expect_recv(cq_a);
	rp_drain(&rp);

	/* 4. A's fd polled while datagrams for B come: readable means an event. */
	REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
	for (int i = 0; i < 20; i++) {
		REQUIRE(ibv_req_notify_cq(cq_b, 0) == 0);
		send_to(qp_b, &psn_b);
		if (readable(ch_a->fd, 5)) {
			SR_FAIL("round %d: A's blocking fd readable with no event for A", i);
			break;
		}
		CHECK(readable(ch_b->fd, 2000));
		get_event(ch_b, cq_b);
		expect_recv(cq_b);
		rp_drain(&rp);
	}
	send_to(qp_a, &psn_a);
	CHECK(readable(ch_a->fd, 2000));
	get_event(ch_a, cq_a);
	expect_recv(cq_a);

	/* 5. O_NONBLOCK set after creation. */
	REQUIRE(fcntl(ch_a->fd, F_SETFL, fcntl(ch_a->fd, F_GETFL) | O_NONBLOCK) == 0);
	{
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		uint64_t t0;
		int got = 0;

		REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
		CHECK_EQ(ibv_get_cq_event(ch_a, &ev_cq, &ev_ctx), -1);
		CHECK_EQ(errno, EAGAIN);
		for (int i = 0; i < 10; i++) {
			REQUIRE(ibv_req_notify_cq(cq_b, 0) == 0);
			send_to(qp_b, &psn_b);
			CHECK(!readable(ch_a->fd, 5));
			CHECK_EQ(ibv_get_cq_event(ch_a, &ev_cq, &ev_ctx), -1);
			CHECK_EQ(errno, EAGAIN);
			CHECK(readable(ch_b->fd, 2000));
			get_event(ch_b, cq_b);
			expect_recv(cq_b);
			rp_drain(&rp);
		}
		send_to(qp_a, &psn_a);
		t0 = vu_now_ms();
		while (!got && vu_now_ms() - t0 < 2000) {
			if (!readable(ch_a->fd, 100))
				continue;
			if (ibv_get_cq_event(ch_a, &ev_cq, &ev_ctx) == 0) {
				CHECK(ev_cq == cq_a);
				ibv_ack_cq_events(ev_cq, 1);
				got = 1;
			} else {
				CHECK_EQ(errno, EAGAIN);
			}
		}
		CHECK(got);
		expect_recv(cq_a);
	}

	CHECK_EQ(ibv_destroy_qp(qp_a), 0);
	CHECK_EQ(ibv_destroy_qp(qp_b), 0);
	CHECK_EQ(ibv_destroy_cq(cq_a), 0);
	CHECK_EQ(ibv_destroy_cq(cq_b), 0);
	CHECK_EQ(ibv_destroy_comp_channel(ch_a), 0);
	CHECK_EQ(ibv_destroy_comp_channel(ch_b), 0);
	rp_close(&rp);
	vu_buf_free(&rbuf_a);
	vu_buf_free(&rbuf_b);
	vu_close(&dev);
	return sr_test_done("test_chan_wake");
}
