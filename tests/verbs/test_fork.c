/* SPDX-License-Identifier: MIT */
/*
 * fork() by a process that holds an open device (docs/architecture.md, Memory: Fork). The
 * child inherits copies of the parent's verbs objects, which it must not use, but no progress
 * thread; it may open devices of its own, and those must work:
 * - the child opens the device again and gets a context of its own, on a soft NIC of its own
 *   (another address or port than the parent's), whose progress thread runs;
 * - an RC pair inside the child moves SENDs and an RDMA WRITE and READ;
 * - an RC connection between the child's QP and a QP of the parent (two processes on
 *   loopback) carries SENDs both ways and a WRITE into the parent's memory that the parent
 *   never polls for (the parent's progress thread must do it);
 * - the parent's own pair still works after the fork.
 * Everything is bounded: the child has its own alarm, the parent waits for it with a timeout.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"

#define LEN 8192

static struct vu_dev pdev;

/* A SEND, a WRITE and a READ over a connected pair of this process. */
static int pair_traffic(struct vu_dev *d)
{
	struct vu_qp_cfg q;
	struct vu_pair p;
	struct vu_buf a, b;
	int bad = 0;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	if (vu_buf_alloc(d, &a, LEN, VU_ACCESS_ALL) || vu_buf_alloc(d, &b, LEN, VU_ACCESS_ALL) ||
	    vu_pair_create(d, &q, NULL, &p))
		return 10;
	vu_fill(a.p, LEN, 1);
	CHECK_EQ(vu_post_recv(p.qp[1], 1, b.mr, b.p, LEN), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 2, IBV_WR_SEND, a.mr, a.p, LEN, 0, IBV_SEND_SIGNALED), 0);
	vu_expect_wc(p.scq[0], 2, IBV_WC_SUCCESS, IBV_WC_SEND, 5000, __LINE__);
	vu_expect_wc(p.rcq[1], 1, IBV_WC_SUCCESS, IBV_WC_RECV, 5000, __LINE__);
	bad |= vu_check(b.p, LEN, 1) != -1;
	vu_fill(a.p, LEN, 2);
	CHECK_EQ(vu_post_rdma(p.qp[0], 3, IBV_WR_RDMA_WRITE, a.mr, a.p, LEN, (uintptr_t)b.p,
			      b.mr->rkey, IBV_SEND_SIGNALED), 0);
	vu_expect_wc(p.scq[0], 3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 5000, __LINE__);
	bad |= vu_check(b.p, LEN, 2) != -1;
	vu_fill(b.p, LEN, 3);
	CHECK_EQ(vu_post_rdma(p.qp[0], 4, IBV_WR_RDMA_READ, a.mr, a.p, LEN, (uintptr_t)b.p,
			      b.mr->rkey, IBV_SEND_SIGNALED), 0);
	vu_expect_wc(p.scq[0], 4, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 5000, __LINE__);
	bad |= vu_check(a.p, LEN, 3) != -1;
	CHECK(!bad);
	vu_pair_destroy(&p);
	vu_buf_free(&a);
	vu_buf_free(&b);
	return bad;
}

/* One QP with its own CQ, connected to a peer described by an endpoint. */
struct side {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct vu_buf buf;
	struct vu_endpoint me;
};

static int side_make(struct vu_dev *d, struct side *s, uint32_t psn)
{
	struct vu_qp_cfg q;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	s->cq = ibv_create_cq(d->ctx, 64, NULL, NULL, 0);
	s->qp = s->cq ? vu_qp_create(d, s->cq, s->cq, &q) : NULL;
	if (!s->qp || vu_buf_alloc(d, &s->buf, LEN, VU_ACCESS_ALL))
		return -1;
	memset(&s->me, 0, sizeof(s->me));
	s->me.gid = d->gid;
	s->me.qpn = s->qp->qp_num;
	s->me.psn = psn;
	s->me.addr = (uintptr_t)s->buf.p;
	s->me.rkey = s->buf.mr->rkey;
	s->me.len = LEN;
	return 0;
}

static void side_free(struct side *s)
{
	if (s->qp)
		ibv_destroy_qp(s->qp);
	if (s->cq)
		ibv_destroy_cq(s->cq);
	vu_buf_free(&s->buf);
}

static int side_connect(struct side *s, const struct vu_endpoint *peer)
{
	struct vu_conn_cfg c;

	vu_conn_cfg_default(&c);
	c.sq_psn = s->me.psn;
	c.rq_psn = peer->psn;
	return vu_qp_connect(s->qp, &c, &peer->gid, peer->qpn);
}

static int child_run(int sock, struct vu_dev *d, struct side *s);

/* The child ends with _exit: what the parent's progress threads held (their per-thread buffers)
 * is unreachable in a child that has no such threads, and the leak checker would report it at
 * exit() although it is the parent's, not a leak of the child. */
static int child(int sock, void *arg)
{
	struct vu_dev d;
	struct side s;
	int rc;

	(void)arg;
	memset(&s, 0, sizeof(s));
	rc = child_run(sock, &d, &s);
	side_free(&s);
	if (d.ctx)
		vu_close(&d);
	if (!rc && sr_test_failures)
		rc = 1;
	close(sock);
	_exit(rc);
}

static int child_run(int sock, struct vu_dev *dp, struct side *sp)
{
#define d (*dp)
#define s (*sp)
	struct vu_endpoint peer;
	struct ibv_wc wc;
	char go;

	memset(dp, 0, sizeof(*dp));
	/* The inherited context is the parent's: a new open is the child's own. */
	if (vu_open(&d))
		return 2;
	CHECK(d.ctx != pdev.ctx);
	CHECK(memcmp(&d.gid, &pdev.gid, sizeof(d.gid)) != 0);
	if (pair_traffic(&d))
		return 3;

	/* With the parent. */
	if (side_make(&d, &s, 300))
		return 4;
	if (vu_sock_send(sock, &s.me, sizeof(s.me)) || vu_sock_recv(sock, &peer, sizeof(peer)))
		return 5;
	if (side_connect(&s, &peer))
		return 6;
	CHECK_EQ(vu_post_recv(s.qp, 10, s.buf.mr, s.buf.p, LEN), 0);
	if (vu_sock_send(sock, "R", 1) || vu_sock_recv(sock, &go, 1))
		return 7;
	/* A WRITE into the parent's buffer (it does not poll), then a SEND. */
	vu_fill(s.buf.p, LEN, 20);
	CHECK_EQ(vu_post_rdma(s.qp, 11, IBV_WR_RDMA_WRITE, s.buf.mr, s.buf.p, LEN, peer.addr,
			      peer.rkey, IBV_SEND_SIGNALED), 0);
	CHECK_EQ(vu_wait(s.cq, &wc, 10000), 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	if (vu_sock_send(sock, "W", 1))
		return 8;
	/* The parent's SEND to us. */
	CHECK_EQ(vu_wait(s.cq, &wc, 10000), 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 10);
	CHECK(vu_check(s.buf.p, 64, 21) == -1);
	return 0;
#undef d
#undef s
}

int main(void)
{
	struct vu_child c;
	struct vu_endpoint peer;
	struct side s;
	char ch;
	int st;

	sr_test_timeout(120);
	REQUIRE(vu_open(&pdev) == 0);
	CHECK_EQ(pair_traffic(&pdev), 0);	/* the parent's device is open and busy */
	REQUIRE(side_make(&pdev, &s, 500) == 0);

	REQUIRE(vu_fork(&c, child, NULL, 40) == 0);
	if (vu_sock_recv(c.sock, &peer, sizeof(peer)) == 0 &&
	    vu_sock_send(c.sock, &s.me, sizeof(s.me)) == 0 && side_connect(&s, &peer) == 0 &&
	    vu_sock_recv(c.sock, &ch, 1) == 0 && vu_sock_send(c.sock, "G", 1) == 0 &&
	    vu_sock_recv(c.sock, &ch, 1) == 0) {
		/* The child's WRITE landed without this process polling. */
		CHECK(vu_check(s.buf.p, LEN, 20) == -1);
		vu_fill(s.buf.p, 64, 21);
		CHECK_EQ(vu_post_send(s.qp, 12, IBV_WR_SEND, s.buf.mr, s.buf.p, 64, 0,
				      IBV_SEND_SIGNALED), 0);
		vu_expect_wc(s.cq, 12, IBV_WC_SUCCESS, IBV_WC_SEND, 10000, __LINE__);
	} else {
		SR_FAIL("the exchange with the child broke off");
	}
	st = vu_child_wait(&c, 60);
	CHECK_EQ(st, 0);
	/* The parent still works. */
	CHECK_EQ(pair_traffic(&pdev), 0);
	side_free(&s);
	vu_close(&pdev);
	return sr_test_done("test_fork");
}
