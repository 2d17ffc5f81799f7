/* SPDX-License-Identifier: MIT */
/*
 * The lock-free key lookup (sr_mem_get, docs/architecture.md "Locks") against registration
 * churn, in one process:
 *
 *   - while a second thread registers and deregisters MRs (indexes freed and handed out again)
 *     and re-registers one of its own (its slot out of service and back), SENDs and RDMA WRITEs
 *     between a connected pair, through MRs that stay, all complete and land their bytes;
 *   - a WRITE through the rkey of an MR deregistered meanwhile fails with a remote access error
 *     and leaves the old memory untouched, as does a SEND into a receive WQE whose MR is gone
 *     (a local protection error at the receiver);
 *   - the MR that WRITEs in flight target is deregistered under them: once ibv_dereg_mr has
 *     returned, nothing lands in its memory any more (a marker written right after it stays),
 *     every WRITE completes (succeeded, refused or flushed) and nothing hangs.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define MSG 256
#define ROUNDS (SR_SANITIZED ? 1000 : 5000)

static struct vu_dev dev;
static atomic_bool stop;
static atomic_long churned;

static void *churn(void *arg)
{
	struct vu_buf keep, b[4];
	long n = 0;

	(void)arg;
	if (vu_buf_alloc(&dev, &keep, 4096, VU_ACCESS_ALL))
		return (void *)1;
	for (int i = 0; i < 4; i++)
		if (vu_buf_alloc(&dev, &b[i], 4096, 0))
			return (void *)1;
	while (!atomic_load(&stop)) {
		struct ibv_mr *mr[4];

		for (int i = 0; i < 4; i++) {
			mr[i] = ibv_reg_mr(dev.pd, b[i].p, 4096, VU_ACCESS_ALL);
			if (!mr[i])
				return (void *)1;
		}
		for (int i = 0; i < 4; i++)
			if (ibv_dereg_mr(mr[i]))
				return (void *)1;
		if (ibv_rereg_mr(keep.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				 n & 1 ? VU_ACCESS_ALL : IBV_ACCESS_LOCAL_WRITE))
			return (void *)1;
		n++;
	}
	atomic_store(&churned, n);
	vu_buf_free(&keep);
	for (int i = 0; i < 4; i++)
		vu_buf_free(&b[i]);
	return NULL;
}

static void traffic_under_churn(struct vu_pair *p, struct vu_buf *src, struct vu_buf *dst)
{
	pthread_t t;
	void *ret = NULL;
	struct ibv_wc wc;

	REQUIRE(pthread_create(&t, NULL, churn, NULL) == 0);
	for (int r = 0; r < ROUNDS; r++) {
		uint32_t seed = (uint32_t)r * 2654435761u;

		vu_fill(src->p, MSG, seed);
		REQUIRE(vu_post_recv(p->qp[1], 100 + r, dst->mr, dst->p, MSG) == 0);
		REQUIRE(vu_post_send(p->qp[0], r, IBV_WR_SEND, src->mr, src->p, MSG, 0,
				     IBV_SEND_SIGNALED) == 0);
		vu_expect_wc(p->scq[0], r, IBV_WC_SUCCESS, IBV_WC_SEND, 5000, __LINE__);
		vu_expect_wc(p->rcq[1], 100 + r, IBV_WC_SUCCESS, IBV_WC_RECV, 5000, __LINE__);
		CHECK_EQ(vu_check(dst->p, MSG, seed), -1);
		vu_fill(src->p + MSG, MSG, seed + 1);
		REQUIRE(vu_post_rdma(p->qp[0], r, IBV_WR_RDMA_WRITE, src->mr, src->p + MSG, MSG,
				     (uintptr_t)dst->p + MSG, dst->mr->rkey,
				     IBV_SEND_SIGNALED) == 0);
		wc = vu_expect_wc(p->scq[0], r, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 5000, __LINE__);
		(void)wc;
		CHECK_EQ(vu_check(dst->p + MSG, MSG, seed + 1), -1);
	}
	atomic_store(&stop, true);
	REQUIRE(pthread_join(t, &ret) == 0);
	CHECK(ret == NULL);
	CHECK(atomic_load(&churned) > 0);
}

static void stale_rkey_refused(struct vu_buf *src)
{
	struct vu_pair p;
	struct vu_buf gone;
	uint32_t rkey;

	REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
	REQUIRE(vu_buf_alloc(&dev, &gone, 4096, VU_ACCESS_ALL) == 0);
	rkey = gone.mr->rkey;
	REQUIRE(ibv_dereg_mr(gone.mr) == 0);
	gone.mr = NULL;
	vu_fill(src->p, MSG, 7);
	REQUIRE(vu_post_rdma(p.qp[0], 1, IBV_WR_RDMA_WRITE, src->mr, src->p, MSG,
			     (uintptr_t)gone.p, rkey, IBV_SEND_SIGNALED) == 0);
	vu_expect_wc(p.scq[0], 1, IBV_WC_REM_ACCESS_ERR, -1, 5000, __LINE__);
	CHECK_EQ(vu_check_byte(gone.p, 4096, 0), -1);
	vu_pair_destroy(&p);
	vu_buf_free(&gone);
}

static void stale_recv_mr_refused(struct vu_buf *src)
{
	struct vu_pair p;
	struct vu_buf gone;
	struct ibv_mr *mr;

	REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
	REQUIRE(vu_buf_alloc(&dev, &gone, 4096, VU_ACCESS_ALL) == 0);
	mr = gone.mr;
	REQUIRE(vu_post_recv(p.qp[1], 2, mr, gone.p, MSG) == 0);
	REQUIRE(ibv_dereg_mr(mr) == 0);
	gone.mr = NULL;
	vu_fill(src->p, MSG, 9);
	REQUIRE(vu_post_send(p.qp[0], 1, IBV_WR_SEND, src->mr, src->p, MSG, 0,
			     IBV_SEND_SIGNALED) == 0);
	vu_expect_wc(p.rcq[1], 2, IBV_WC_LOC_PROT_ERR, -1, 5000, __LINE__);
	CHECK_EQ(vu_check_byte(gone.p, 4096, 0), -1);
	vu_pair_destroy(&p);
	vu_buf_free(&gone);
}

/* WRITEs in flight into dst while dst's MR is deregistered; fresh pair each round, as the
 * first refused WRITE moves the QP to the error state. */
#define DEREG_ROUNDS (SR_SANITIZED ? 20 : 60)
#define DEREG_INFLIGHT 8
#define DEREG_LEN 4096

static void dereg_under_writes(struct vu_buf *src)
{
	int refused = 0, landed = 0;

	for (int r = 0; r < DEREG_ROUNDS; r++) {
		struct vu_pair p;
		struct vu_buf dst;
		struct ibv_wc wc[DEREG_INFLIGHT];
		int got;

		REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
		REQUIRE(vu_buf_alloc(&dev, &dst, DEREG_INFLIGHT * DEREG_LEN, VU_ACCESS_ALL) == 0);
		memset(src->p, 0xa5, DEREG_LEN);
		for (int i = 0; i < DEREG_INFLIGHT; i++)
			REQUIRE(vu_post_rdma(p.qp[0], (uint64_t)i, IBV_WR_RDMA_WRITE, src->mr,
					     src->p, DEREG_LEN,
					     (uintptr_t)dst.p + (uint64_t)i * DEREG_LEN,
					     dst.mr->rkey, IBV_SEND_SIGNALED) == 0);
		/* A varying head start, so the dereg meets the stream at different points. */
		for (volatile int spin = 0; spin < (r % 8) * 2000; spin++)
			;
		REQUIRE(ibv_dereg_mr(dst.mr) == 0);
		dst.mr = NULL;
		memset(dst.p, 0x3c, DEREG_INFLIGHT * DEREG_LEN);
		got = vu_poll(p.scq[0], wc, DEREG_INFLIGHT, 5000);
		CHECK_EQ(got, DEREG_INFLIGHT);
		for (int i = 0; i < got; i++) {
			if (wc[i].status == IBV_WC_SUCCESS)
				landed++;
			else
				refused++;
			CHECK(wc[i].status == IBV_WC_SUCCESS ||
			      wc[i].status == IBV_WC_REM_ACCESS_ERR ||
			      wc[i].status == IBV_WC_WR_FLUSH_ERR);
		}
		/* Let late packets (resends included) reach the responder before looking. */
		vu_drain(p.rcq[1], wc, DEREG_INFLIGHT, 20);
		CHECK_EQ(vu_check_byte(dst.p, DEREG_INFLIGHT * DEREG_LEN, 0x3c), -1);
		vu_pair_destroy(&p);
		vu_buf_free(&dst);
	}
	printf("# dereg under writes: %d WRITEs landed before, %d refused or flushed\n", landed,
	       refused);
	CHECK(refused > 0);
}

int main(void)
{
	struct vu_pair p;
	struct vu_buf src, dst;

	sr_test_timeout(120);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &src, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &dst, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);

	traffic_under_churn(&p, &src, &dst);
	vu_pair_destroy(&p);
	stale_rkey_refused(&src);
	stale_recv_mr_refused(&src);
	dereg_under_writes(&src);

	vu_buf_free(&dst);
	vu_buf_free(&src);
	vu_close(&dev);
	return sr_test_done("test_key_churn");
}
