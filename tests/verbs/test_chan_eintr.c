/*
 * A signal ends a blocking ibv_get_cq_event with EINTR, as rdma-core's read() of the channel
 * fd does (qperf ends a test with SIGALRM), also when it comes while the sleeper is receiving
 * datagrams itself (core/cq.c, param chan_rx): here a flood of SENDs to another QP keeps it
 * receiving when the timer fires. A lost signal would leave it asleep until a rescue SEND
 * to its own QP one second later. The signal must be handled in the sleeping thread (the
 * flood thread blocks it, as the library's own threads do) and the caller's signal mask must
 * be what it was when the call returns.
 *
 * On a loaded machine this thread can lose the CPU between arming the 30 ms timer and
 * entering the call for longer than that: the signal then comes before the call, which
 * rightly sleeps until the rescue, and the round read as a lost signal. A round whose signal
 * came before the call (the handler sees `waiting` unset) is void and run again; a signal
 * that comes at any time after entry still has to end the call. A rescue SEND sent to a call
 * that had already ended with EINTR (this thread not scheduled for a second after it) leaves
 * an event on the channel: it is taken, so that the next round does not return at once.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/time.h>
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#define QPN_A 0x00bee1
#define QPN_B 0x00bee2
#define NRECV 256
#define ROUNDS 20

static struct vu_dev dev;
static struct vu_buf rbuf_a, rbuf_b;
static struct rawpeer rp;
static struct ibv_qp *qp_a, *qp_b;
static uint32_t psn_a, psn_b;
static atomic_int fired, returned, rescued, waiting, early;
static pthread_t main_thread;
static atomic_int handled_elsewhere;

static void on_alarm(int sig)
{
	(void)sig;
	if (!pthread_equal(pthread_self(), main_thread))
		atomic_store(&handled_elsewhere, 1);
	if (!atomic_load(&waiting))
		atomic_store(&early, 1);
	atomic_store(&fired, 1);
}

static void *flood(void *arg)
{
	uint8_t buf[256];
	struct sr_pkt pkt;

	(void)arg;
	while (!atomic_load(&fired)) {
		rp_send_small(&rp, qp_b->qp_num, &psn_b);
		while (rp_recv(&rp, buf, sizeof(buf), &pkt, 0) > 0)
			;
	}
	for (int i = 0; i < 100 && !atomic_load(&returned); i++)
		usleep(10000);
	if (!atomic_load(&returned)) {
		atomic_store(&rescued, 1);
		rp_send_small(&rp, qp_a->qp_num, &psn_a);	/* wake it with a real event */
	}
	return NULL;
}

int main(void)
{
	struct sigaction sa = { .sa_handler = on_alarm };	/* no SA_RESTART */
	struct ibv_comp_channel *ch_a;
	struct ibv_cq *cq_a, *cq_b;
	sigset_t alrm, cur;
	int lost = 0, eintr = 0, other = 0, voided = 0;

	/* No sr_test_timeout: SIGALRM is the test's (ctest's TIMEOUT bounds it). */
	main_thread = pthread_self();
	sigaction(SIGALRM, &sa, NULL);
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf_a, NRECV * 64, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf_b, NRECV * 64, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	ch_a = ibv_create_comp_channel(dev.ctx);
	REQUIRE(ch_a);
	cq_a = ibv_create_cq(dev.ctx, NRECV, NULL, ch_a, 0);
	cq_b = ibv_create_cq(dev.ctx, 4096, NULL, NULL, 0);
	REQUIRE(cq_a && cq_b);
	qp_a = vu_qp_to_peer(&dev, cq_a, NULL, &rp.gid, QPN_A, &rbuf_a, NRECV, 64);
	qp_b = vu_qp_to_peer(&dev, cq_b, NULL, &rp.gid, QPN_B, &rbuf_b, NRECV, 64);
	REQUIRE(qp_a && qp_b);

	for (int r = 0; r < ROUNDS; r++) {
		struct itimerval it = { .it_value = { 0, 30000 } };
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		pthread_t t;
		int ret, err;

		atomic_store(&fired, 0);
		atomic_store(&returned, 0);
		atomic_store(&rescued, 0);
		atomic_store(&waiting, 0);
		atomic_store(&early, 0);
		REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
		/* The flood thread is born with SIGALRM blocked. */
		pthread_sigmask(SIG_BLOCK, &alrm, NULL);
		REQUIRE(pthread_create(&t, NULL, flood, NULL) == 0);
		pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
		setitimer(ITIMER_REAL, &it, NULL);
		atomic_store(&waiting, 1);
		ret = ibv_get_cq_event(ch_a, &ev_cq, &ev_ctx);
		err = errno;
		atomic_store(&returned, 1);
		atomic_store(&waiting, 0);
		pthread_sigmask(SIG_BLOCK, NULL, &cur);
		CHECK(!sigismember(&cur, SIGALRM) && !sigismember(&cur, SIGINT) &&
		      !sigismember(&cur, SIGTERM));
		pthread_join(t, NULL);
		if (ret == 0 || atomic_load(&rescued)) {
			/* A completion's event: taken, the receive WQE reposted. After EINTR too
			 * when the rescue went out anyway (this thread not scheduled for a second
			 * after the signal): its event is on its way and would end the next round. */
			struct ibv_wc wc;

			if (ret != 0)
				CHECK_EQ(ibv_get_cq_event(ch_a, &ev_cq, &ev_ctx), 0);
			ibv_ack_cq_events(ev_cq, 1);
			vu_wait(cq_a, &wc, 2000);
			vu_post_recv(qp_a, 0, rbuf_a.mr, rbuf_a.p, 64);
		}
		if (atomic_load(&early)) {
			/* The signal came before the call: nothing said about the call. */
			printf("round %d: the signal came before the call (this thread not scheduled "
			       "for 30 ms): void, run again\n", r);
			if (++voided > ROUNDS)
				REQUIRE(!"most rounds void: the machine is too loaded");
			r--;
			continue;
		}
		if (ret == -1 && err == EINTR)
			eintr++;
		else if (atomic_load(&rescued))
			lost++;
		else
			other++;
	}
	printf("rounds %d: EINTR %d, signal lost (woken only by a rescue SEND 1 s later) %d, "
	       "other %d, void (signal before the call) %d; rx_chan_datagrams %lld\n", ROUNDS,
	       eintr, lost, other, voided,
	       (long long)vu_stat("rx_chan_datagrams"));
	CHECK_EQ(lost, 0);
	CHECK_EQ(eintr, ROUNDS);
	CHECK_EQ(atomic_load(&handled_elsewhere), 0);
	return sr_test_done("test_chan_eintr");
}
