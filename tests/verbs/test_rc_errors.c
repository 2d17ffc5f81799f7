/* SPDX-License-Identifier: MIT */
/*
 * RC error paths, as the requester and the responder see them: remote access errors (bad rkey,
 * out of bounds, missing rights) leave the target untouched, complete the failing WR with
 * REM_ACCESS_ERR, flush the rest and take both QPs to ERR; a bad local key is a local
 * protection error; RNR retries run out (or succeed once a receive is posted); a vanished peer
 * exhausts retry_cnt; a receive buffer too small is a local length error at the receiver and a
 * remote invalid request at the sender. The counters must tell the same story.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#define GUARD 0xee
#define BUFSZ (256u << 10)

static struct vu_dev dev;
static struct vu_buf lb, rb;

static void reset_bufs(void)
{
	memset(lb.p, GUARD, lb.len);
	memset(rb.p, GUARD, rb.len);
}

#define CHECK_GUARD(buf, len) check_guard(buf, len, __LINE__)
static void check_guard(const uint8_t *buf, size_t len, int line)
{
	long at = vu_check_byte(buf, len, GUARD);

	if (at >= 0)
		SR_FAIL("line %d: byte %ld of %zu changed to 0x%02x", line, at, len, buf[at]);
}

/* The next completion has this wr_id and status. */
#define EXPECT_WC(cq, id, st) expect_wc(cq, id, st, __LINE__)
static struct ibv_wc expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st, int line)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	if (!vu_wait(cq, &wc, 5000)) {
		SR_FAIL("line %d: no completion (wanted wr_id %llu status %s)", line,
			(unsigned long long)wr_id, ibv_wc_status_str(st));
		return wc;
	}
	if (wc.wr_id != wr_id || wc.status != st)
		SR_FAIL("line %d: wanted wr_id %llu status %s, got %s", line,
			(unsigned long long)wr_id, ibv_wc_status_str(st), vu_wc_str(&wc));
	return wc;
}

#define EXPECT_NONE(cq) expect_none(cq, __LINE__)
static void expect_none(struct ibv_cq *cq, int line)
{
	struct ibv_wc wc;
	int n = vu_drain(cq, &wc, 1, 30);

	if (n)
		SR_FAIL("line %d: %d unexpected completion(s), first %s", line, n, vu_wc_str(&wc));
}

/* Counter deltas: snapshot, then the change since. */
struct snap {
	const char *names[12];
	int64_t v[12];
};
static void snap_take(struct snap *s)
{
	for (int i = 0; s->names[i]; i++)
		s->v[i] = vu_stat(s->names[i]);
}
static int64_t snap_delta(const struct snap *s, const char *name)
{
	for (int i = 0; s->names[i]; i++)
		if (!strcmp(s->names[i], name))
			return vu_stat(name) - s->v[i];
	return -1;
}

/* Next async event within ms, acked; returns its type or -1. */
static int async_event(int ms, void **element)
{
	struct pollfd pfd = { .fd = dev.ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;
	int type;

	if (poll(&pfd, 1, ms) != 1)
		return -1;
	if (ibv_get_async_event(dev.ctx, &ev))
		return -1;
	type = ev.event_type;
	if (element)
		*element = ev.element.qp;
	ibv_ack_async_event(&ev);
	return type;
}

/* Drops whatever async events are queued (acked). */
static void async_drain(void)
{
	while (async_event(0, NULL) >= 0)
		;
}

/* A WRITE the responder must refuse: the failing WR gets REM_ACCESS_ERR, the WRs behind it are
 * flushed, the target is untouched, both QPs end in ERR, the responder's receive WQE flushes and
 * it raises a QP access error event. */
static void refused_write(const char *what, uint64_t raddr, uint32_t rkey, uint32_t len,
			  struct vu_buf *target)
{
	struct vu_pair p;
	struct snap s = { { "access_naks_sent", "naks_rcvd", NULL } };
	void *elem = NULL;
	int ev;

	printf("refused WRITE: %s\n", what);
	REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
	reset_bufs();
	memset(target->p, GUARD, target->len);
	async_drain();
	snap_take(&s);
	vu_fill(lb.p, len, 1);
	CHECK_EQ(vu_post_recv(p.qp[1], 1, rb.mr, rb.p, 64), 0);
	CHECK_EQ(vu_post_rdma(p.qp[0], 10, IBV_WR_RDMA_WRITE, lb.mr, lb.p, len, raddr, rkey, 0), 0);
	/* Behind it, WRs that would each succeed on their own. */
	CHECK_EQ(vu_post_rdma(p.qp[0], 11, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 100,
			      (uintptr_t)rb.p + 1000, rb.mr->rkey, 0), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 12, IBV_WR_SEND, lb.mr, lb.p, 10, 0, 0), 0);
	CHECK_EQ(vu_post_rdma(p.qp[0], 13, IBV_WR_RDMA_READ, lb.mr, lb.p + 8192, 100,
			      (uintptr_t)rb.p + 2000, rb.mr->rkey, 0), 0);
	EXPECT_WC(p.scq[0], 10, IBV_WC_REM_ACCESS_ERR);
	EXPECT_WC(p.scq[0], 11, IBV_WC_WR_FLUSH_ERR);
	EXPECT_WC(p.scq[0], 12, IBV_WC_WR_FLUSH_ERR);
	EXPECT_WC(p.scq[0], 13, IBV_WC_WR_FLUSH_ERR);
	EXPECT_NONE(p.scq[0]);
	EXPECT_WC(p.rcq[1], 1, IBV_WC_WR_FLUSH_ERR);
	CHECK_GUARD(target->p, target->len);
	CHECK_GUARD(rb.p, rb.len);
	CHECK_GUARD(lb.p + 8192, 100);	/* the flushed READ brought nothing */
	CHECK_EQ(vu_qp_state(p.qp[0]), IBV_QPS_ERR);
	CHECK_EQ(vu_qp_state(p.qp[1]), IBV_QPS_ERR);
	ev = async_event(1000, &elem);
	CHECK_EQ(ev, IBV_EVENT_QP_ACCESS_ERR);
	CHECK(elem == p.qp[1]);
	CHECK_EQ(snap_delta(&s, "access_naks_sent"), 1);
	CHECK_EQ(snap_delta(&s, "naks_rcvd"), 1);
	/* Posting to a QP in ERR completes with a flush. */
	CHECK_EQ(vu_post_send(p.qp[0], 14, IBV_WR_SEND, lb.mr, lb.p, 10, 0, 0), 0);
	EXPECT_WC(p.scq[0], 14, IBV_WC_WR_FLUSH_ERR);
	vu_pair_destroy(&p);
}

static void test_remote_access(void)
{
	struct vu_buf ro, wo;

	/* Wrong tag, right index: a stale or guessed key. */
	refused_write("wrong rkey", (uintptr_t)rb.p, rb.mr->rkey ^ 0x5a, 4000, &rb);
	/* Out of bounds: past the end, straddling the end, before the start. */
	refused_write("VA past the end", (uintptr_t)rb.p + rb.len, rb.mr->rkey, 1, &rb);
	refused_write("VA straddling the end", (uintptr_t)rb.p + rb.len - 10, rb.mr->rkey, 3000, &rb);
	refused_write("VA before the start", (uintptr_t)rb.p - 8, rb.mr->rkey, 100, &rb);
	refused_write("VA + length wrapping 2^64", UINT64_MAX - 15, rb.mr->rkey, 100, &rb);

	/* An MR without REMOTE_WRITE (but with REMOTE_READ, so it has an rkey). */
	REQUIRE(vu_buf_alloc(&dev, &ro, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) == 0);
	CHECK(ro.mr->rkey != 0);
	refused_write("MR without REMOTE_WRITE", (uintptr_t)ro.p, ro.mr->rkey, 100, &ro);

	/* READ from an MR without REMOTE_READ. */
	REQUIRE(vu_buf_alloc(&dev, &wo, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0);
	{
		struct vu_pair p;

		printf("refused READ: MR without REMOTE_READ\n");
		REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
		reset_bufs();
		async_drain();
		vu_fill(wo.p, 8192, 2);
		CHECK_EQ(vu_post_rdma(p.qp[0], 20, IBV_WR_RDMA_READ, lb.mr, lb.p, 4000,
				      (uintptr_t)wo.p, wo.mr->rkey, 0), 0);
		CHECK_EQ(vu_post_rdma(p.qp[0], 21, IBV_WR_RDMA_READ, lb.mr, lb.p, 4000,
				      (uintptr_t)rb.p, rb.mr->rkey, 0), 0);
		EXPECT_WC(p.scq[0], 20, IBV_WC_REM_ACCESS_ERR);
		EXPECT_WC(p.scq[0], 21, IBV_WC_WR_FLUSH_ERR);
		CHECK_GUARD(lb.p, lb.len);
		CHECK_EQ(vu_check(wo.p, 8192, 2), -1);
		CHECK_EQ(vu_qp_state(p.qp[0]), IBV_QPS_ERR);
		CHECK_EQ(vu_qp_state(p.qp[1]), IBV_QPS_ERR);
		CHECK_EQ(async_event(1000, NULL), IBV_EVENT_QP_ACCESS_ERR);
		vu_pair_destroy(&p);
	}

	/* An ATOMIC on an MR without REMOTE_ATOMIC. */
	{
		struct vu_pair p;

		printf("refused ATOMIC: MR without REMOTE_ATOMIC\n");
		REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
		reset_bufs();
		async_drain();
		*(uint64_t *)wo.p = 7;
		CHECK_EQ(vu_post_atomic(p.qp[0], 22, IBV_WR_ATOMIC_FETCH_AND_ADD, lb.mr, lb.p,
					(uintptr_t)wo.p, wo.mr->rkey, 1, 0, 0), 0);
		EXPECT_WC(p.scq[0], 22, IBV_WC_REM_ACCESS_ERR);
		CHECK_EQ(*(uint64_t *)wo.p, 7);
		CHECK_GUARD(lb.p, 8);
		CHECK_EQ(async_event(1000, NULL), IBV_EVENT_QP_ACCESS_ERR);
		vu_pair_destroy(&p);
	}
	vu_buf_free(&ro);
	vu_buf_free(&wo);
}

/* A bad local key: local protection error, nothing leaves, the QP goes to ERR (the peer not). */
/* A WRITE of several packets (wr_id id) and behind it, in the same post, a WRITE of len2 bytes
 * with a bad lkey, on a QP with timeout 0: no timer and no tail-loss probe, so only a packet
 * that asks for an ACK can complete the first. SUCCESS, then LOC_PROT_ERR. */
static void write_then_bad_no_timer(uint64_t id, uint32_t len2, int fill)
{
	const uint32_t len = 3 * 1024 + 100;
	struct vu_conn_cfg c;
	struct vu_pair p;

	vu_conn_cfg_default(&c);
	c.timeout = 0;
	REQUIRE(vu_pair_create(&dev, NULL, &c, &p) == 0);
	reset_bufs();
	memset(lb.p, fill, len);
	CHECK_EQ(vu_post_write_then_bad_lkey2(p.qp[0], id, lb.mr, lb.p, len, len2,
					      (uintptr_t)rb.p, rb.mr->rkey), 0);
	EXPECT_WC(p.scq[0], id, IBV_WC_SUCCESS);
	EXPECT_WC(p.scq[0], id + 1, IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(memcmp(rb.p, lb.p, len), 0);
	CHECK_GUARD(rb.p + len, 8192 - len);
	vu_pair_destroy(&p);
}

static void test_local_prot(void)
{
	struct vu_pair p;
	struct vu_buf nolw;

	printf("local protection errors\n");
	REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
	reset_bufs();
	CHECK_EQ(vu_post_recv(p.qp[1], 30, rb.mr, rb.p, 4096), 0);
	{
		struct ibv_send_wr wr, *bad;
		struct ibv_sge sge = { (uintptr_t)lb.p, 100, lb.mr->lkey ^ 0x33 };

		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 31;
		wr.opcode = IBV_WR_SEND;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), 0);
	}
	CHECK_EQ(vu_post_send(p.qp[0], 32, IBV_WR_SEND, lb.mr, lb.p, 100, 0, 0), 0);
	EXPECT_WC(p.scq[0], 31, IBV_WC_LOC_PROT_ERR);
	EXPECT_WC(p.scq[0], 32, IBV_WC_WR_FLUSH_ERR);
	EXPECT_NONE(p.rcq[1]);	/* nothing arrived */
	CHECK_GUARD(rb.p, 4096);
	CHECK_EQ(vu_qp_state(p.qp[0]), IBV_QPS_ERR);
	CHECK_EQ(vu_qp_state(p.qp[1]), IBV_QPS_RTS);
	vu_pair_destroy(&p);

	/* An SGE that runs past its MR. */
	REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
	CHECK_EQ(vu_post_rdma(p.qp[0], 33, IBV_WR_RDMA_WRITE, lb.mr, lb.p + lb.len - 10, 20,
			      (uintptr_t)rb.p, rb.mr->rkey, 0), 0);
	EXPECT_WC(p.scq[0], 33, IBV_WC_LOC_PROT_ERR);
	CHECK_GUARD(rb.p, 4096);
	vu_pair_destroy(&p);

	/* A good WRITE, then in the same post a WRITE with a bad key: the first is executed and
	 * completes (its packets must still get it an ACK, though the requester stops at the
	 * second), the second fails locally. */
	REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
	reset_bufs();
	memset(lb.p, 0x5a, 64);
	CHECK_EQ(vu_post_write_then_bad_lkey(p.qp[0], 34, lb.mr, lb.p, 64, (uintptr_t)rb.p,
					     rb.mr->rkey), 0);
	EXPECT_WC(p.scq[0], 34, IBV_WC_SUCCESS);
	EXPECT_WC(p.scq[0], 35, IBV_WC_LOC_PROT_ERR);
	CHECK_EQ(memcmp(rb.p, lb.p, 64), 0);
	CHECK_GUARD(rb.p + 64, 4096 - 64);
	vu_pair_destroy(&p);

	/* The same with a good WRITE of several packets: its LAST, with a WQE behind it, asks
	 * for no ACK of its own (req.c, more_follows); the pass that then stops at the bad key
	 * must still get it one. Then with a bad WRITE of one packet: that packet (the last
	 * WQE's) would ask, so the debt must outlive its failed gather (a reviewer's case: no
	 * completion at all). */
	write_then_bad_no_timer(36, 3 * 1024 + 100, 0x6b);
	write_then_bad_no_timer(38, 64, 0x6c);

	/* A READ into memory registered without LOCAL_WRITE. */
	REQUIRE(vu_buf_alloc(&dev, &nolw, 8192, IBV_ACCESS_REMOTE_READ) == 0);
	memset(nolw.p, GUARD, 8192);
	REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
	vu_fill(rb.p, 4000, 3);
	CHECK_EQ(vu_post_rdma(p.qp[0], 34, IBV_WR_RDMA_READ, nolw.mr, nolw.p, 4000,
			      (uintptr_t)rb.p, rb.mr->rkey, 0), 0);
	EXPECT_WC(p.scq[0], 34, IBV_WC_LOC_PROT_ERR);
	CHECK_GUARD(nolw.p, 8192);
	CHECK_EQ(vu_qp_state(p.qp[0]), IBV_QPS_ERR);
	vu_pair_destroy(&p);
	vu_buf_free(&nolw);
}

/* No receive posted: RNR NAKs until rnr_retry runs out. */
static void test_rnr_exceeded(int rnr_retry)
{
	struct vu_conn_cfg c;
	struct vu_pair p;
	struct snap s = { { "rnr_naks_sent", "rnr_naks_rcvd", "rnr_retry_exceeded", "tail_probes",
			    "fast_retransmits", NULL } };
	int64_t probes;
	uint64_t t0, ms;

	printf("RNR retry exceeded, rnr_retry %d\n", rnr_retry);
	vu_conn_cfg_default(&c);
	c.rnr_retry = (uint8_t)rnr_retry;
	c.min_rnr_timer = 20;	/* 10.24 ms (IBA table 45) */
	REQUIRE(vu_pair_create(&dev, NULL, &c, &p) == 0);
	reset_bufs();
	snap_take(&s);
	t0 = vu_now_ms();
	CHECK_EQ(vu_post_send(p.qp[0], 40, IBV_WR_SEND, lb.mr, lb.p, 100, 0, 0), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 41, IBV_WR_SEND, lb.mr, lb.p, 100, 0, 0), 0);
	EXPECT_WC(p.scq[0], 40, IBV_WC_RNR_RETRY_EXC_ERR);
	ms = vu_now_ms() - t0;
	EXPECT_WC(p.scq[0], 41, IBV_WC_WR_FLUSH_ERR);
	/* rnr_retry waits of at least 10.24 ms each before giving up. */
	CHECK(ms >= (uint64_t)rnr_retry * 10);
	CHECK(ms < 2000);
	/* A probe resent while an RNR NAK was slow to come (a loaded machine) draws one more
	 * RNR NAK, which the requester takes for what it is: no retry used (test_rc_retransmit,
	 * rnr_duplicate). */
	probes = snap_delta(&s, "tail_probes") + snap_delta(&s, "fast_retransmits");
	CHECK_EQ(snap_delta(&s, "rnr_naks_sent"), rnr_retry + 1 + probes);
	CHECK(snap_delta(&s, "rnr_naks_rcvd") >= rnr_retry + 1);
	CHECK_EQ(snap_delta(&s, "rnr_retry_exceeded"), 1);
	CHECK_EQ(vu_qp_state(p.qp[0]), IBV_QPS_ERR);
	/* RNR is not an error of the responder. */
	CHECK_EQ(vu_qp_state(p.qp[1]), IBV_QPS_RTS);
	vu_pair_destroy(&p);
}

/* rnr_retry 7 retries forever: a receive posted 100 ms later is taken. */
static void test_rnr_infinite(void)
{
	struct vu_conn_cfg c;
	struct vu_pair p;
	struct ibv_wc wc;
	struct snap s = { { "rnr_naks_rcvd", NULL } };

	printf("RNR retry forever, receive posted late\n");
	vu_conn_cfg_default(&c);
	c.rnr_retry = 7;
	c.min_rnr_timer = 12;	/* 0.64 ms */
	REQUIRE(vu_pair_create(&dev, NULL, &c, &p) == 0);
	reset_bufs();
	snap_take(&s);
	vu_fill(lb.p, 5000, 4);
	CHECK_EQ(vu_post_send(p.qp[0], 50, IBV_WR_SEND, lb.mr, lb.p, 5000, 0, 0), 0);
	CHECK_EQ(vu_drain(p.scq[0], &wc, 1, 100), 0);
	CHECK(snap_delta(&s, "rnr_naks_rcvd") >= 2);
	CHECK_EQ(vu_post_recv(p.qp[1], 51, rb.mr, rb.p, 8192), 0);
	EXPECT_WC(p.scq[0], 50, IBV_WC_SUCCESS);
	wc = EXPECT_WC(p.rcq[1], 51, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 5000);
	CHECK_EQ(vu_check(rb.p, 5000, 4), -1);
	CHECK_GUARD(rb.p + 5000, 3192);
	CHECK_EQ(vu_qp_state(p.qp[0]), IBV_QPS_RTS);
	vu_pair_destroy(&p);
}

/* Retries without an answer: RETRY_EXC_ERR after retry_cnt + 1 timeouts, the rest flushed. */
static void test_vanished(bool destroy)
{
	struct vu_conn_cfg c;
	struct vu_pair p;
	struct snap s = { { "retry_timeouts", "retry_exceeded", "drop_qpn", "drop_qp_gone", NULL } };
	struct ibv_qp *q0;
	uint64_t t0, ms;

	printf("peer %s\n", destroy ? "destroyed" : "QPN that does not exist");
	vu_conn_cfg_default(&c);
	c.timeout = 10;		/* 4.2 ms */
	c.retry_cnt = 2;
	REQUIRE(vu_pair_create_reset(&dev, NULL, &p) == 0);
	if (destroy) {
		REQUIRE(vu_pair_connect(&p, &c) == 0);
		CHECK_EQ(ibv_destroy_qp(p.qp[1]), 0);
		p.qp[1] = NULL;
	} else {
		/* A QP number nobody has: the destroyed QP's, one that was never handed out. */
		uint32_t ghost = p.qp[1]->qp_num;

		CHECK_EQ(ibv_destroy_qp(p.qp[1]), 0);
		p.qp[1] = NULL;
		REQUIRE(vu_qp_connect(p.qp[0], &c, &dev.gid, ghost) == 0);
	}
	q0 = p.qp[0];
	reset_bufs();
	snap_take(&s);
	t0 = vu_now_ms();
	CHECK_EQ(vu_post_rdma(q0, 60, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 3000, (uintptr_t)rb.p,
			      rb.mr->rkey, 0), 0);
	CHECK_EQ(vu_post_send(q0, 61, IBV_WR_SEND, lb.mr, lb.p, 10, 0, 0), 0);
	CHECK_EQ(vu_post_rdma(q0, 62, IBV_WR_RDMA_READ, lb.mr, lb.p, 10, (uintptr_t)rb.p,
			      rb.mr->rkey, 0), 0);
	EXPECT_WC(p.scq[0], 60, IBV_WC_RETRY_EXC_ERR);
	ms = vu_now_ms() - t0;
	EXPECT_WC(p.scq[0], 61, IBV_WC_WR_FLUSH_ERR);
	EXPECT_WC(p.scq[0], 62, IBV_WC_WR_FLUSH_ERR);
	EXPECT_NONE(p.scq[0]);
	CHECK_EQ(vu_qp_state(q0), IBV_QPS_ERR);
	/* Three local ACK timeouts of >= 4.2 ms: the first and two retries. */
	CHECK(ms >= 12);
	CHECK(ms < 3000);
	CHECK_EQ(snap_delta(&s, "retry_timeouts"), 3);
	CHECK_EQ(snap_delta(&s, "retry_exceeded"), 1);
	/* The QPN was destroyed here a moment ago: counted apart from strays. */
	CHECK(snap_delta(&s, "drop_qp_gone") >= 3);
	CHECK_EQ(snap_delta(&s, "drop_qpn"), 0);
	CHECK_GUARD(rb.p, rb.len);
	vu_pair_destroy(&p);
}

/* A SEND longer than the receive buffer. */
static void test_recv_too_small(uint32_t rlen, uint32_t slen)
{
	struct vu_pair p;
	struct snap s = { { "inv_req_naks_sent", NULL } };

	printf("receive of %u bytes, SEND of %u\n", rlen, slen);
	REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
	reset_bufs();
	async_drain();
	snap_take(&s);
	vu_fill(lb.p, slen, 5);
	CHECK_EQ(vu_post_recv(p.qp[1], 70, rb.mr, rb.p, rlen), 0);
	CHECK_EQ(vu_post_recv(p.qp[1], 71, rb.mr, rb.p + 65536, 65536), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 72, IBV_WR_SEND, lb.mr, lb.p, slen, 0, 0), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 73, IBV_WR_SEND, lb.mr, lb.p, 10, 0, 0), 0);
	EXPECT_WC(p.rcq[1], 70, IBV_WC_LOC_LEN_ERR);
	EXPECT_WC(p.rcq[1], 71, IBV_WC_WR_FLUSH_ERR);
	EXPECT_WC(p.scq[0], 72, IBV_WC_REM_INV_REQ_ERR);
	EXPECT_WC(p.scq[0], 73, IBV_WC_WR_FLUSH_ERR);
	/* Nothing beyond the receive buffer was written. */
	CHECK_GUARD(rb.p + rlen, 65536 - rlen);
	CHECK_GUARD(rb.p + 65536, 65536);
	CHECK_EQ(vu_qp_state(p.qp[0]), IBV_QPS_ERR);
	CHECK_EQ(vu_qp_state(p.qp[1]), IBV_QPS_ERR);
	CHECK_EQ(snap_delta(&s, "inv_req_naks_sent"), 1);
	CHECK_EQ(async_event(1000, NULL), IBV_EVENT_QP_REQ_ERR);
	vu_pair_destroy(&p);
}

int main(void)
{
	sr_test_timeout(120);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, BUFSZ, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rb, BUFSZ, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_stat("tx_packets") >= 0);	/* the counter file is readable */
	{
		int fl = fcntl(dev.ctx->async_fd, F_GETFL);

		REQUIRE(fcntl(dev.ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
	}

	test_remote_access();
	test_local_prot();
	test_rnr_exceeded(1);
	test_rnr_exceeded(2);
	test_rnr_infinite();
	test_vanished(true);
	test_vanished(false);
	test_recv_too_small(100, 200);
	test_recv_too_small(1500, 3000);	/* the second packet overflows */

	async_drain();
	vu_buf_free(&lb);
	vu_buf_free(&rb);
	vu_close(&dev);
	return sr_test_done("test_rc_errors");
}
