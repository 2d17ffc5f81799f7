/*
 * A completion channel without CQs destroyed while a thread sleeps in ibv_get_cq_event on it:
 * the destroy succeeds, the sleeper returns -1 with EBADF within a bounded time (rdma-core's
 * would sleep on forever) and touches nothing freed, datagrams that come meanwhile included
 * (the sleeper also watches the NIC's socket, core/cq.c), and the NIC still works after.
 * Under ASan a use after free is an error of its own.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#define QPN_A 0x00bee1
#define NRECV 64
#define SLEEPERS 3

static struct vu_dev dev;
static struct vu_buf rbuf_a;
static struct rawpeer rp;
static struct ibv_qp *qp_a;
static uint32_t psn_a;
static struct ibv_comp_channel *ch_c;
static atomic_int in_get, done;
static int rets[SLEEPERS], errs[SLEEPERS];

static void *sleeper(void *arg)
{
	int i = (int)(intptr_t)arg;
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	atomic_fetch_add(&in_get, 1);
	rets[i] = ibv_get_cq_event(ch_c, &ev_cq, &ev_ctx);
	errs[i] = errno;
	atomic_fetch_add(&done, 1);
	return NULL;
}

int main(void)
{
	struct ibv_comp_channel *ch_a;
	struct ibv_cq *cq_a;
	pthread_t t[SLEEPERS];
	struct ibv_wc wc;
	uint8_t buf[256];
	struct sr_pkt pkt;

	sr_test_timeout(100);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf_a, NRECV * 64, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	ch_a = ibv_create_comp_channel(dev.ctx);
	ch_c = ibv_create_comp_channel(dev.ctx);
	REQUIRE(ch_a && ch_c);
	cq_a = ibv_create_cq(dev.ctx, NRECV, NULL, ch_a, 0);
	REQUIRE(cq_a);
	qp_a = vu_qp_to_peer(&dev, cq_a, NULL, &rp.gid, QPN_A, &rbuf_a, NRECV, 64);
	REQUIRE(qp_a);

	for (int i = 0; i < SLEEPERS; i++)
		REQUIRE(pthread_create(&t[i], NULL, sleeper, (void *)(intptr_t)i) == 0);
	while (atomic_load(&in_get) < SLEEPERS)
		usleep(1000);
	usleep(100000);		/* asleep by now */
	CHECK_EQ(atomic_load(&done), 0);
	CHECK_EQ(ibv_destroy_comp_channel(ch_c), 0);
	/* Datagrams for A: they may wake a sleeper through the socket. */
	for (int i = 0; i < 8; i++) {
		rp_send_small(&rp, qp_a->qp_num, &psn_a);
		usleep(5000);
	}
	for (int i = 0; i < 300 && atomic_load(&done) < SLEEPERS; i++)
		usleep(10000);
	if (atomic_load(&done) < SLEEPERS) {
		SR_FAIL("%d of %d sleepers still asleep 3 s after the channel's destroy",
			SLEEPERS - atomic_load(&done), SLEEPERS);
		return sr_test_done("test_chan_destroy_wait");
	}
	for (int i = 0; i < SLEEPERS; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ(rets[i], -1);
		CHECK_EQ(errs[i], EBADF);
	}
	/* The NIC works: the SENDs to A completed. */
	for (int i = 0; i < 8; i++)
		CHECK_EQ(vu_wait(cq_a, &wc, 3000), 1);
	while (rp_recv(&rp, buf, sizeof(buf), &pkt, 0) > 0)
		;
	CHECK_EQ(ibv_destroy_qp(qp_a), 0);
	CHECK_EQ(ibv_destroy_cq(cq_a), 0);
	CHECK_EQ(ibv_destroy_comp_channel(ch_a), 0);
	return sr_test_done("test_chan_destroy_wait");
}
