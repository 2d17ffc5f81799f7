/* SPDX-License-Identifier: MIT */
/*
 * Verbs behaviour that programs written for rdma-core and its providers rely on (qperf,
 * pyverbs's tests, UCX), each as rdma-core's library and the kernel's rxe or ConnectX behave:
 * - ibv_get_cq_event and ibv_get_async_event return -1 with EINTR when a signal interrupts
 *   them, as rdma-core's read() of the channel fd does (qperf ends a test with SIGALRM while
 *   it sleeps there; it hung until its peer's 5 s timeout instead).
 * - IBV_ACCESS_ON_DEMAND in a QP's qp_access_flags is accepted, as kernel rxe does (mlx5
 *   ignores it); pyverbs's ODP tests set it at INIT.
 * - ibv_rereg_mr with IBV_REREG_MR_CHANGE_ACCESS (or CHANGE_PD) keeps the MR's keys, as rxe
 *   does, so the rkey a peer holds stays valid; the new rights apply to it at once.
 * - moving a QP to RESET, or destroying it, removes its completions still waiting in its CQs,
 *   as ConnectX providers do (pyverbs's tests reuse a QP after RESET and expect no stale
 *   completion; libfabric's ofi_rxm frees a destroyed QP's receive buffers),
 *   and leaves the other QPs' completions in a shared CQ in their order.
 * - a context's cmd_fd is an open fd (pyverbs dups it to try ibv_import_device; with -1 its
 *   shared-PD test errored instead of skipping), and importing a context, PD or MR fails
 *   with EOPNOTSUPP (pyverbs then skips).
 * - atomic_cap is IBV_ATOMIC_HCA (as rxe and ConnectX report; UCX uses atomics only then),
 *   while the atomics stay atomic against the target's own CPU atomics (docs/architecture.md,
 *   Atomics).
 * - a UD receive reports the RoCE packet type in wc.sl as ConnectX does (0xA: RoCEv2 over
 *   IPv4; 0x9 over IPv6), with the IPv4 header in the last 20 bytes of the 40-byte GRH area:
 *   UCX's ud_verbs rebuilds the destination GID from them (sl & 7 == 2: ::ffff: + the last
 *   4 bytes) and drops every datagram whose GID is not the device's.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"

static struct vu_dev dev;
static volatile sig_atomic_t alarms;
static pthread_t main_thread;

static void on_usr1(int sig)
{
	(void)sig;
	alarms++;
}

/* Sends SIGUSR1 to the main thread 100 ms from now. */
static void *kick(void *arg)
{
	(void)arg;
	usleep(100000);
	pthread_kill(main_thread, SIGUSR1);
	return NULL;
}

static void kick_later(void)
{
	pthread_t t;

	REQUIRE(pthread_create(&t, NULL, kick, NULL) == 0);
	pthread_detach(t);
}

/* A signal without SA_RESTART interrupts both waits. */
static void test_eintr(void)
{
	struct sigaction sa = { .sa_handler = on_usr1 }, old;
	struct ibv_comp_channel *cc = ibv_create_comp_channel(dev.ctx);
	struct ibv_cq *cq, *got = NULL;
	struct ibv_async_event ae;
	void *cctx;
	uint64_t t0;
	int ret;

	REQUIRE(cc);
	cq = ibv_create_cq(dev.ctx, 16, NULL, cc, 0);
	REQUIRE(cq);
	REQUIRE(ibv_req_notify_cq(cq, 0) == 0);
	sigemptyset(&sa.sa_mask);
	REQUIRE(sigaction(SIGUSR1, &sa, &old) == 0);
	main_thread = pthread_self();

	t0 = vu_now_ms();
	kick_later();
	errno = 0;
	ret = ibv_get_cq_event(cc, &got, &cctx);	/* nothing will complete */
	CHECK_EQ(ret, -1);
	CHECK_EQ(errno, EINTR);
	CHECK_EQ(alarms, 1);
	CHECK(vu_now_ms() - t0 < 5000);

	t0 = vu_now_ms();
	kick_later();
	errno = 0;
	ret = ibv_get_async_event(dev.ctx, &ae);	/* no async event either */
	CHECK_EQ(ret, -1);
	CHECK_EQ(errno, EINTR);
	CHECK_EQ(alarms, 2);
	CHECK(vu_now_ms() - t0 < 5000);

	sigaction(SIGUSR1, &old, NULL);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_EQ(ibv_destroy_comp_channel(cc), 0);
}

/* IBV_ACCESS_ON_DEMAND in qp_access_flags: INIT accepts it, the QP works. */
static void test_qp_access_odp(void)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct vu_pair p;
	struct vu_buf a, b;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	vu_conn_cfg_default(&c);
	c.access |= IBV_ACCESS_ON_DEMAND;
	REQUIRE(vu_buf_alloc(&dev, &a, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &b, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_pair_create_reset(&dev, &q, &p) == 0);
	CHECK_EQ(vu_pair_connect(&p, &c), 0);
	CHECK_EQ(ibv_query_qp(p.qp[1], &qa, IBV_QP_ACCESS_FLAGS, &ia), 0);
	CHECK(qa.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
	if (vu_qp_state(p.qp[0]) == IBV_QPS_RTS) {
		memset(a.p, 0x5a, 4096);
		CHECK_EQ(vu_post_rdma(p.qp[0], 1, IBV_WR_RDMA_WRITE, a.mr, a.p, 4096,
				      (uintptr_t)b.p, b.mr->rkey, IBV_SEND_SIGNALED), 0);
		vu_expect_wc(p.scq[0], 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 5000, __LINE__);
		CHECK(!memcmp(a.p, b.p, 4096));
	}
	vu_pair_destroy(&p);
	vu_buf_free(&a);
	vu_buf_free(&b);
}

/* Rereg of the access keeps lkey and rkey; a peer's WRITE with the old rkey lands, and once
 * remote write is withdrawn, the same rkey is refused (remote access error). */
static void test_rereg_keeps_keys(void)
{
	struct vu_qp_cfg q;
	struct vu_pair p;
	struct vu_buf a, b;
	uint32_t lkey, rkey;
	struct ibv_pd *pd2;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	REQUIRE(vu_buf_alloc(&dev, &a, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &b, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_pair_create(&dev, &q, NULL, &p) == 0);
	lkey = b.mr->lkey;
	rkey = b.mr->rkey;
	CHECK(rkey != 0);

	/* Same rights again (pyverbs's test), then other remote rights: keys unchanged. */
	CHECK_EQ(ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, VU_ACCESS_ALL), 0);
	CHECK_EQ(b.mr->lkey, lkey);
	CHECK_EQ(b.mr->rkey, rkey);
	CHECK_EQ(ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE), 0);
	CHECK_EQ(b.mr->lkey, lkey);
	CHECK_EQ(b.mr->rkey, rkey);
	memset(a.p, 0x3c, 4096);
	CHECK_EQ(vu_post_rdma(p.qp[0], 1, IBV_WR_RDMA_WRITE, a.mr, a.p, 4096, (uintptr_t)b.p, rkey,
			      IBV_SEND_SIGNALED), 0);
	vu_expect_wc(p.scq[0], 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 5000, __LINE__);
	CHECK(!memcmp(a.p, b.p, 4096));

	/* An MR without remote rights has the same rkey as lkey (as rxe): a peer that learnt it
	 * before a rereg granted remote write writes with it afterwards (pyverbs's
	 * test_mr_rereg_access); before that, the rights refuse it. */
	{
		struct vu_buf l;
		uint32_t lk;

		REQUIRE(vu_buf_alloc(&dev, &l, 4096, IBV_ACCESS_LOCAL_WRITE) == 0);
		lk = l.mr->lkey;
		CHECK_EQ(l.mr->rkey, lk);
		CHECK_EQ(ibv_rereg_mr(l.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE), 0);
		CHECK_EQ(l.mr->lkey, lk);
		CHECK_EQ(l.mr->rkey, lk);
		CHECK_EQ(vu_post_rdma(p.qp[0], 5, IBV_WR_RDMA_WRITE, a.mr, a.p, 4096,
				      (uintptr_t)l.p, lk, IBV_SEND_SIGNALED), 0);
		vu_expect_wc(p.scq[0], 5, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 5000, __LINE__);
		CHECK(!memcmp(a.p, l.p, 4096));
		vu_buf_free(&l);
	}

	/* A PD change keeps them too. */
	pd2 = ibv_alloc_pd(dev.ctx);
	REQUIRE(pd2);
	CHECK_EQ(ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0), 0);
	CHECK_EQ(b.mr->lkey, lkey);
	CHECK_EQ(b.mr->rkey, rkey);
	CHECK_EQ(ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_PD, dev.pd, NULL, 0, 0), 0);

	/* Remote write withdrawn: the same rkey no longer writes. */
	CHECK_EQ(ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ), 0);
	CHECK_EQ(b.mr->lkey, lkey);
	CHECK_EQ(vu_post_rdma(p.qp[0], 2, IBV_WR_RDMA_WRITE, a.mr, a.p, 64, (uintptr_t)b.p, rkey,
			      IBV_SEND_SIGNALED), 0);
	vu_expect_wc(p.scq[0], 2, IBV_WC_REM_ACCESS_ERR, -1, 5000, __LINE__);

	vu_pair_destroy(&p);
	vu_buf_free(&a);
	vu_buf_free(&b);
	CHECK_EQ(ibv_dealloc_pd(pd2), 0);
}

/* Two RC QPs on one CQ (send and receive): A with n receives (wr_id 100 + i), B with one (200),
 * both moved to ERR, B first, so the CQ holds B's flush, then A's. */
static void two_flushed_qps(struct ibv_cq *cq, struct vu_buf *b, struct vu_conn_cfg *c, int n,
			    struct ibv_qp **qa, struct ibv_qp **qb)
{
	struct vu_qp_cfg q;
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	*qa = vu_qp_create(&dev, cq, cq, &q);
	*qb = vu_qp_create(&dev, cq, cq, &q);
	REQUIRE(*qa && *qb);
	CHECK_EQ(vu_qp_to_init(*qa, c), 0);
	CHECK_EQ(vu_qp_to_init(*qb, c), 0);
	for (int i = 0; i < n; i++)
		CHECK_EQ(vu_post_recv(*qa, 100 + i, b->mr, b->p, 64), 0);
	CHECK_EQ(vu_post_recv(*qb, 200, b->mr, b->p, 64), 0);
	CHECK_EQ(ibv_modify_qp(*qb, &at, IBV_QP_STATE), 0);
	CHECK_EQ(ibv_modify_qp(*qa, &at, IBV_QP_STATE), 0);
}

/* What the CQ holds now: exactly n flushed completions of qp, with these wr_ids in order. */
static void expect_flushed(struct ibv_cq *cq, struct ibv_qp *qp, const uint64_t *ids, int n)
{
	struct ibv_wc wc[16];
	int got = vu_drain(cq, wc, 16, 50);

	CHECK_EQ(got, n);
	for (int i = 0; i < got && i < 16; i++) {
		CHECK_EQ(wc[i].qp_num, qp->qp_num);
		CHECK_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
	}
	for (int i = 0; got == n && i < n; i++)
		CHECK_EQ(wc[i].wr_id, ids[i]);
}

/* Two QPs on one CQ (send and receive), both flushed into it; RESET of one removes exactly
 * its completions. */
static void test_reset_cleans_cq(void)
{
	struct vu_conn_cfg c;
	struct ibv_cq *cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qa, *qb;
	struct ibv_qp_attr at = { 0 };
	struct vu_buf b;
	struct ibv_wc wc[16];
	int n;

	REQUIRE(cq);
	REQUIRE(vu_buf_alloc(&dev, &b, 4096, VU_ACCESS_ALL) == 0);
	vu_conn_cfg_default(&c);
	two_flushed_qps(cq, &b, &c, 3, &qa, &qb);
	CHECK_EQ(vu_post_recv(qb, 201, b.mr, b.p, 64), 0);	/* flushed at once in ERR */
	CHECK_EQ(vu_post_send(qa, 300, IBV_WR_SEND, b.mr, b.p, 64, 0, IBV_SEND_SIGNALED), 0);
	CHECK_EQ(vu_post_send(qb, 400, IBV_WR_SEND, b.mr, b.p, 64, 0, IBV_SEND_SIGNALED), 0);

	at.qp_state = IBV_QPS_RESET;
	CHECK_EQ(ibv_modify_qp(qa, &at, IBV_QP_STATE), 0);
	expect_flushed(cq, qb, (const uint64_t[]){ 200, 201, 400 }, 3);
	/* The QP is reusable from RESET, with nothing stale. */
	CHECK_EQ(vu_qp_to_init(qa, &c), 0);
	CHECK_EQ(vu_post_recv(qa, 500, b.mr, b.p, 64), 0);
	at.qp_state = IBV_QPS_ERR;
	CHECK_EQ(ibv_modify_qp(qa, &at, IBV_QP_STATE), 0);
	n = vu_drain(cq, wc, 16, 50);
	CHECK_EQ(n, 1);
	CHECK_EQ(wc[0].wr_id, 500);

	CHECK_EQ(ibv_destroy_qp(qa), 0);
	CHECK_EQ(ibv_destroy_qp(qb), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	vu_buf_free(&b);
}

/* Destroying a QP removes its completions still waiting in a shared CQ, as ConnectX providers
 * do: libfabric's ofi_rxm frees an endpoint's receive buffers with its QP and crashed on the
 * flushed completions it polled afterwards. The other QP's stay, in order. */
static void test_destroy_cleans_cq(void)
{
	struct vu_conn_cfg c;
	struct ibv_cq *cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qa, *qb;
	struct vu_buf b;

	REQUIRE(cq);
	REQUIRE(vu_buf_alloc(&dev, &b, 4096, VU_ACCESS_ALL) == 0);
	vu_conn_cfg_default(&c);
	two_flushed_qps(cq, &b, &c, 4, &qa, &qb);
	CHECK_EQ(vu_post_send(qa, 300, IBV_WR_SEND, b.mr, b.p, 64, 0, IBV_SEND_SIGNALED), 0);
	CHECK_EQ(vu_post_send(qb, 400, IBV_WR_SEND, b.mr, b.p, 64, 0, IBV_SEND_SIGNALED), 0);

	CHECK_EQ(ibv_destroy_qp(qa), 0);
	expect_flushed(cq, qb, (const uint64_t[]){ 200, 400 }, 2);
	CHECK_EQ(ibv_destroy_qp(qb), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	vu_buf_free(&b);
}

/* cmd_fd: open, close-on-exec, dup-able; imports are EOPNOTSUPP. */
static void test_cmd_fd_import(void)
{
	int fd = dev.ctx->cmd_fd, d, fl;
	struct ibv_context *ic;
	struct ibv_pd *ipd;
	struct ibv_mr *imr;

	CHECK(fd >= 0);
	fl = fcntl(fd, F_GETFD);
	CHECK(fl >= 0 && (fl & FD_CLOEXEC));
	CHECK(fd != dev.ctx->async_fd);
	d = dup(fd);
	CHECK(d >= 0);
	errno = 0;
	ic = ibv_import_device(d);
	CHECK(!ic);
	CHECK_EQ(errno, EOPNOTSUPP);
	errno = 0;
	ipd = ibv_import_pd(dev.ctx, dev.pd->handle);
	CHECK(!ipd);
	CHECK_EQ(errno, EOPNOTSUPP);
	errno = 0;
	imr = ibv_import_mr(dev.pd, 1);
	CHECK(!imr);
	CHECK_EQ(errno, EOPNOTSUPP);
	if (d >= 0)
		close(d);
}

static uint64_t *race_word;
static volatile int race_go;

static void *cpu_adder(void *arg)
{
	(void)arg;
	while (!race_go)
		;
	for (int i = 0; i < 100000; i++)
		__atomic_fetch_add(race_word, 1000000, __ATOMIC_SEQ_CST);
	return NULL;
}

/* The report, and FETCH_ADD / CMP_SWAP racing with the target's CPU atomics. */
static void test_atomics(void)
{
	struct ibv_device_attr da;
	struct ibv_device_attr_ex dx;
	struct vu_qp_cfg q;
	struct vu_pair p;
	struct vu_buf a, b;
	pthread_t t;
	uint64_t *res;
	const int n = 320;

	CHECK_EQ(ibv_query_device(dev.ctx, &da), 0);
	CHECK_EQ(da.atomic_cap, IBV_ATOMIC_HCA);
	CHECK_EQ(ibv_query_device_ex(dev.ctx, NULL, &dx), 0);
	CHECK_EQ(dx.orig_attr.atomic_cap, IBV_ATOMIC_HCA);
	CHECK(da.max_qp_rd_atom > 0);

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	REQUIRE(vu_buf_alloc(&dev, &a, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &b, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_pair_create(&dev, &q, NULL, &p) == 0);
	res = (uint64_t *)a.p;
	race_word = (uint64_t *)b.p;
	REQUIRE(pthread_create(&t, NULL, cpu_adder, NULL) == 0);
	race_go = 1;
	for (int i = 0; i < n; i += 16) {
		for (int k = 0; k < 16; k++)
			CHECK_EQ(vu_post_atomic(p.qp[0], (uint64_t)(i + k), IBV_WR_ATOMIC_FETCH_AND_ADD,
						a.mr, &res[k], (uintptr_t)race_word, b.mr->rkey, 1, 0,
						IBV_SEND_SIGNALED), 0);
		for (int k = 0; k < 16; k++)
			vu_expect_wc(p.scq[0], (uint64_t)(i + k), IBV_WC_SUCCESS,
				     IBV_WC_FETCH_ADD, 5000, __LINE__);
	}
	pthread_join(t, NULL);
	CHECK_EQ(*race_word, 100000ull * 1000000 + (uint64_t)n);
	/* CMP_SWAP: the old value comes back, the new one lands. */
	CHECK_EQ(vu_post_atomic(p.qp[0], 999, IBV_WR_ATOMIC_CMP_AND_SWP, a.mr, &res[0],
				(uintptr_t)race_word, b.mr->rkey, *race_word, 42, IBV_SEND_SIGNALED), 0);
	vu_expect_wc(p.scq[0], 999, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP, 5000, __LINE__);
	CHECK_EQ(res[0], 100000ull * 1000000 + (uint64_t)n);
	CHECK_EQ(*race_word, 42);
	vu_pair_destroy(&p);
	vu_buf_free(&a);
	vu_buf_free(&b);
}

/* A UD datagram as UCX 1.13's ud_verbs filters it. */
static void test_ud_roce_convention(void)
{
	struct vu_qp_cfg q;
	struct vu_pair p;
	struct vu_buf a, b;
	struct ibv_ah_attr aa;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	union ibv_gid g0, dgid;
	const uint8_t *grh, *ip;
	bool v4;

	REQUIRE(ibv_query_gid(dev.ctx, 1, 0, &g0) == 0);
	v4 = !memcmp(g0.raw, "\0\0\0\0\0\0\0\0", 8) && g0.raw[10] == 0xff && g0.raw[11] == 0xff;
	vu_qp_cfg_default(&q, IBV_QPT_UD);
	REQUIRE(vu_buf_alloc(&dev, &a, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &b, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_pair_create(&dev, &q, NULL, &p) == 0);
	vu_ah_attr(&aa, &dev.gid);
	ah = ibv_create_ah(dev.pd, &aa);
	REQUIRE(ah);
	memset(b.p, 0xee, 4096);
	vu_fill(a.p, 256, 9);
	CHECK_EQ(vu_post_recv(p.qp[1], 1, b.mr, b.p, 40 + 1024), 0);
	CHECK_EQ(vu_post_ud(p.qp[0], 2, ah, p.qp[1]->qp_num, 0x11111111, a.mr, a.p, 256,
			    IBV_SEND_SIGNALED), 0);
	vu_expect_wc(p.scq[0], 2, IBV_WC_SUCCESS, IBV_WC_SEND, 5000, __LINE__);
	wc = vu_expect_wc(p.rcq[1], 1, IBV_WC_SUCCESS, IBV_WC_RECV, 5000, __LINE__);
	CHECK(wc.wc_flags & IBV_WC_GRH);
	CHECK_EQ(wc.byte_len, 40 + 256);
	CHECK_EQ(wc.src_qp, p.qp[0]->qp_num);
	CHECK_EQ(wc.sl, v4 ? 0xa : 0x9);
	grh = b.p;
	if (v4) {
		/* The IPv4 header fills bytes 20..39: version 4, IHL 5, UDP, both addresses. */
		ip = grh + 20;
		CHECK_EQ(ip[0], 0x45);
		CHECK_EQ(ip[9], 17);
		CHECK(!memcmp(ip + 12, &dev.gid.raw[12], 4));	/* source: the sender */
		CHECK(!memcmp(ip + 16, &g0.raw[12], 4));	/* destination: us */
		/* UCX: sl & 7 == 2, so the destination GID is ::ffff: + the last 4 bytes. */
		CHECK_EQ(wc.sl & 7, 2);
		memset(&dgid, 0, sizeof(dgid));
		dgid.raw[10] = dgid.raw[11] = 0xff;
		memcpy(&dgid.raw[12], grh + 36, 4);
		CHECK(!memcmp(&dgid, &g0, sizeof(dgid)));
	} else {
		CHECK_EQ(grh[0] >> 4, 6);
		CHECK(!memcmp(grh + 24, &g0, 16));
	}
	CHECK(vu_check(b.p + 40, 256, 9) == -1);
	CHECK_EQ(ibv_destroy_ah(ah), 0);
	vu_pair_destroy(&p);
	vu_buf_free(&a);
	vu_buf_free(&b);
}

int main(void)
{
	sr_test_timeout(60);
	REQUIRE(vu_open(&dev) == 0);
	test_eintr();
	test_qp_access_odp();
	test_rereg_keeps_keys();
	test_reset_cleans_cq();
	test_destroy_cleans_cq();
	test_cmd_fd_import();
	test_atomics();
	test_ud_roce_convention();
	vu_close(&dev);
	return sr_test_done("test_compat");
}
