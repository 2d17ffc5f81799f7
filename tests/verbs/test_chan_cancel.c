/*
 * A thread cancelled (deferred pthread_cancel, as rping cancels its CQ thread) while it sleeps
 * in ibv_get_cq_event, or while it polls a CQ, must not take the NIC down with it: the sleeper
 * also receives datagrams (core/cq.c, param chan_rx) and a poll receives too (poll_rx), with the
 * NIC's receive lock held (the sleeper disables cancellation; the poll reaches no cancellation
 * point under the lock: the receive, the sends and a channel's flag write are raw system calls,
 * engine/nic.c sr_nic_poll_at). Datagrams for another QP flow meanwhile; after each cancel a SEND to the first QP
 * must still complete. The channel destroyed at the end must be freed (a sleeper cancelled in
 * its wait has left it: no leak under LeakSanitizer).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "sr_test.h"
#if SR_SANITIZED
#include <sanitizer/asan_interface.h>
#endif
#include "verbs_util.h"
#include "rawpeer.h"

#define QPN_A 0x00bee1
#define QPN_B 0x00bee2
#define NRECV 256
#define ROUNDS 80

static struct vu_dev dev;
static struct vu_buf rbuf_a, rbuf_b;
static struct rawpeer rp;
static struct ibv_qp *qp_a, *qp_b;
static uint32_t psn_a, psn_b;
static atomic_int stop, bev, bwc;
static struct ibv_comp_channel *ch_a, *ch_b;
static struct ibv_cq *cq_a, *cq_b, *cq_c;

/* SENDs to B, whose events and completions it takes itself (B's channel is non-blocking). */
static void *flood(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		struct ibv_wc wc;
		struct pollfd p = { .fd = ch_b->fd, .events = POLLIN };

		ibv_req_notify_cq(cq_b, 0);
		rp_send_small(&rp, qp_b->qp_num, &psn_b);
		poll(&p, 1, 100);
		while (ibv_get_cq_event(ch_b, &ev_cq, &ev_ctx) == 0)
			ibv_ack_cq_events(ev_cq, 1), bev++;
		while (ibv_poll_cq(cq_b, 1, &wc) > 0 && ++bwc)
			vu_post_recv(qp_b, 0, rbuf_b.mr, rbuf_b.p, 64);
		rp_drain(&rp);
	}
	return NULL;
}

/*
 * Cancellation unwinds the thread's frames without ASan seeing it (glibc's internal longjmp),
 * so their stack redzones stay poisoned and the thread's own exit trips over them (a false
 * stack-buffer-underflow in ASan's thread teardown): unpoisoned here, as ASan does for a
 * longjmp. Nothing of the library's behaviour is changed.
 */
static void cancelled(void *arg)
{
	(void)arg;
#if SR_SANITIZED
	__asan_handle_no_return();
#endif
}

/* Sleeps in ibv_get_cq_event on A's channel until cancelled. */
static void *waiter(void *arg)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	pthread_cleanup_push(cancelled, arg);
	for (;;)
		if (ibv_get_cq_event(ch_a, &ev_cq, &ev_ctx) == 0)
			ibv_ack_cq_events(ev_cq, 1);
	pthread_cleanup_pop(0);
	return NULL;
}

/* Polls an empty CQ (receiving the NIC's datagrams) until cancelled at its own testcancel. */
static void *poller(void *arg)
{
	struct ibv_wc wc;

	pthread_cleanup_push(cancelled, arg);
	for (;;) {
		ibv_poll_cq(cq_c, 1, &wc);
		pthread_testcancel();
	}
	pthread_cleanup_pop(0);
	return NULL;
}

static int join_within(pthread_t t, int seconds)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += seconds;
	return pthread_timedjoin_np(t, NULL, &ts);
}

/* Rounds of: start fn and the flood, cancel fn, then a SEND to A must complete. */
static int rounds(void *(*fn)(void *), const char *what)
{
	int r;

	for (r = 0; r < ROUNDS; r++) {
		pthread_t t, f;
		struct ibv_wc wc;

		atomic_store(&stop, 0);
		REQUIRE(pthread_create(&t, NULL, fn, NULL) == 0);
		REQUIRE(pthread_create(&f, NULL, flood, NULL) == 0);
		usleep(20000 + (r % 7) * 1000);
		pthread_cancel(t);
		pthread_join(t, NULL);
		atomic_store(&stop, 1);
		if (join_within(f, 5)) {
			SR_FAIL("%s, round %d: the flood thread is stuck after the cancel (a lock "
				"died with the cancelled thread?)", what, r);
			break;
		}
		usleep(10000);
		while (ibv_poll_cq(cq_b, 1, &wc) > 0)
			vu_post_recv(qp_b, 0, rbuf_b.mr, rbuf_b.p, 64);
		rp_drain(&rp);
		rp_send_small(&rp, qp_a->qp_num, &psn_a);
		if (vu_wait(cq_a, &wc, 3000) != 1) {
			SR_FAIL("%s, round %d: after the cancel a SEND to A never completes (the "
				"NIC's receive lock died with the thread?)", what, r);
			break;
		}
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		vu_post_recv(qp_a, 0, rbuf_a.mr, rbuf_a.p, 64);
	}
	printf("%s: %d of %d rounds survived\n", what, r, ROUNDS);
	fflush(stdout);
	return r;
}

int main(int argc, char **argv)
{
	/* "poll": the polling rounds alone. */
	bool poll_only = argc > 1 && !strcmp(argv[1], "poll");

	sr_test_timeout(200);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf_a, NRECV * 64, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf_b, NRECV * 64, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	ch_a = ibv_create_comp_channel(dev.ctx);
	REQUIRE(ch_a);
	cq_a = ibv_create_cq(dev.ctx, NRECV, NULL, ch_a, 0);
	ch_b = ibv_create_comp_channel(dev.ctx);
	REQUIRE(ch_b && fcntl(ch_b->fd, F_SETFL, O_NONBLOCK) == 0);
	cq_b = ibv_create_cq(dev.ctx, 4096, NULL, ch_b, 0);
	cq_c = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	REQUIRE(cq_a && cq_b && cq_c);
	qp_a = vu_qp_to_peer(&dev, cq_a, NULL, &rp.gid, QPN_A, &rbuf_a, NRECV, 64);
	qp_b = vu_qp_to_peer(&dev, cq_b, NULL, &rp.gid, QPN_B, &rbuf_b, NRECV, 64);
	REQUIRE(qp_a && qp_b);

	if (poll_only || rounds(waiter, "cancelled in ibv_get_cq_event") == ROUNDS)
		CHECK_EQ(rounds(poller, "cancelled while polling a CQ"), ROUNDS);
	printf("B events %d, B completions %d, rx_chan_datagrams %lld, rx_app_datagrams %lld\n",
	       atomic_load(&bev), atomic_load(&bwc), (long long)vu_stat("rx_chan_datagrams"),
	       (long long)vu_stat("rx_app_datagrams"));
	if (!sr_test_failures) {
		CHECK_EQ(ibv_destroy_qp(qp_a), 0);
		CHECK_EQ(ibv_destroy_qp(qp_b), 0);
		CHECK_EQ(ibv_destroy_cq(cq_a), 0);
		CHECK_EQ(ibv_destroy_cq(cq_b), 0);
		CHECK_EQ(ibv_destroy_cq(cq_c), 0);
		CHECK_EQ(ibv_destroy_comp_channel(ch_a), 0);
		CHECK_EQ(ibv_destroy_comp_channel(ch_b), 0);
	}
	return sr_test_done("test_chan_cancel");
}
