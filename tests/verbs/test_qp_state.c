/* SPDX-License-Identifier: MIT */
/*
 * The QP state machine through ibv_modify_qp (IBA 10.3.1, and the transition table of the Linux
 * kernel's ib_modify_qp_is_ok that rdma-core providers follow): every illegal transition and
 * every wrong attribute set is EINVAL and leaves the QP exactly as it was; the legal paths work,
 * including SQD and back, ERR and RESET from everywhere, and a QP reset is usable again. Posting
 * follows the state. Object verbs answer bad arguments with rdma-core's errnos.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#define NSTATES (IBV_QPS_ERR + 1)

static struct vu_dev dev;
static struct vu_buf lb, rb;
static struct ibv_cq *cq;	/* one CQ for everything here */

static const char *const state_name[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

/* Legal transitions for RC (the kernel's qp_state_table). ->SQE only the QP itself makes;
 * RESET->ERR is not in the table either (the kernel and every rdma-core provider refuse it). */
static const bool legal_rc[NSTATES][NSTATES] = {
	[IBV_QPS_RESET] = { [IBV_QPS_RESET] = 1, [IBV_QPS_INIT] = 1 },
	[IBV_QPS_INIT] = { [IBV_QPS_RESET] = 1, [IBV_QPS_INIT] = 1, [IBV_QPS_RTR] = 1,
			   [IBV_QPS_ERR] = 1 },
	[IBV_QPS_RTR] = { [IBV_QPS_RESET] = 1, [IBV_QPS_RTS] = 1, [IBV_QPS_ERR] = 1 },
	[IBV_QPS_RTS] = { [IBV_QPS_RESET] = 1, [IBV_QPS_RTS] = 1, [IBV_QPS_SQD] = 1,
			  [IBV_QPS_ERR] = 1 },
	[IBV_QPS_SQD] = { [IBV_QPS_RESET] = 1, [IBV_QPS_RTS] = 1, [IBV_QPS_SQD] = 1,
			  [IBV_QPS_ERR] = 1 },
	[IBV_QPS_SQE] = { [IBV_QPS_RESET] = 1, [IBV_QPS_RTS] = 1, [IBV_QPS_ERR] = 1 },
	[IBV_QPS_ERR] = { [IBV_QPS_RESET] = 1, [IBV_QPS_ERR] = 1 },
};

/* Attributes each forward transition requires (RC). */
#define REQ_INIT (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define REQ_RTR (IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | \
		 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define REQ_RTS (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | \
		 IBV_QP_MAX_QP_RD_ATOMIC)

/* A full attribute set, with values different from what vu_conn_cfg_default gives. */
static void other_attrs(struct ibv_qp_attr *a, enum ibv_qp_state next, uint32_t dqpn)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = next;
	a->pkey_index = 0;
	a->port_num = 1;
	a->qp_access_flags = IBV_ACCESS_REMOTE_READ;
	a->path_mtu = IBV_MTU_512;
	a->dest_qp_num = dqpn ^ 0x10;
	a->rq_psn = 0x123456;
	a->max_dest_rd_atomic = 3;
	a->min_rnr_timer = 9;
	vu_ah_attr(&a->ah_attr, &dev.gid);
	a->timeout = 3;
	a->retry_cnt = 1;
	a->rnr_retry = 1;
	a->sq_psn = 0x654321;
	a->max_rd_atomic = 2;
	a->qkey = 0x2222;
}

static int mask_for(enum ibv_qp_state next)
{
	switch (next) {
	case IBV_QPS_INIT:
		return IBV_QP_STATE | REQ_INIT;
	case IBV_QPS_RTR:
		return IBV_QP_STATE | REQ_RTR;
	case IBV_QPS_RTS:
		return IBV_QP_STATE | REQ_RTS;
	default:
		return IBV_QP_STATE;
	}
}

/* What a legal transition requires (and is given): the forward steps need their attributes. */
static int req_mask(enum ibv_qp_state cur, enum ibv_qp_state next)
{
	if ((cur == IBV_QPS_RESET && next == IBV_QPS_INIT) ||
	    (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) ||
	    (cur == IBV_QPS_RTR && next == IBV_QPS_RTS))
		return mask_for(next);
	return IBV_QP_STATE;
}

/* The attributes a refused modify must not have changed. */
struct qp_view {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
};
static void view(struct ibv_qp *qp, struct qp_view *v)
{
	memset(v, 0, sizeof(*v));
	CHECK_EQ(ibv_query_qp(qp, &v->a, 0x1fffff, &v->ia), 0);
}
#define SAME_VIEW(x, y) same_view(x, y, __LINE__)
static void same_view(const struct qp_view *x, const struct qp_view *y, int line)
{
	const struct ibv_qp_attr *a = &x->a, *b = &y->a;
#define F(f)                                                                              \
	if (a->f != b->f)                                                                 \
		SR_FAIL("line %d: %s changed: %lld -> %lld", line, #f, (long long)a->f,   \
			(long long)b->f)
	F(qp_state); F(cur_qp_state); F(path_mtu); F(qkey); F(rq_psn); F(sq_psn);
	F(dest_qp_num); F(qp_access_flags); F(pkey_index); F(port_num); F(max_rd_atomic);
	F(max_dest_rd_atomic); F(min_rnr_timer); F(timeout); F(retry_cnt); F(rnr_retry);
	F(cap.max_send_wr); F(cap.max_recv_wr); F(cap.max_send_sge); F(cap.max_inline_data);
#undef F
	if (memcmp(a->ah_attr.grh.dgid.raw, b->ah_attr.grh.dgid.raw, 16))
		SR_FAIL("line %d: ah_attr.dgid changed", line);
}

/* Makes an RC QP (partner: a second one, only for its QPN) and drives it to state s. */
static struct ibv_qp *qp_in(enum ibv_qp_state s, struct ibv_qp *partner)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct ibv_qp *qp;
	struct ibv_qp_attr a;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	vu_conn_cfg_default(&c);
	qp = vu_qp_create(&dev, cq, cq, &q);
	REQUIRE(qp);
	if (s == IBV_QPS_RESET)
		return qp;
	REQUIRE(vu_qp_to_init(qp, &c) == 0);
	if (s == IBV_QPS_INIT)
		return qp;
	REQUIRE(vu_qp_to_rtr(qp, &c, &dev.gid, partner->qp_num) == 0);
	if (s == IBV_QPS_RTR)
		return qp;
	REQUIRE(vu_qp_to_rts(qp, &c) == 0);
	if (s == IBV_QPS_RTS)
		return qp;
	memset(&a, 0, sizeof(a));
	a.qp_state = s;
	REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
	REQUIRE(vu_qp_state(qp) == (int)s);
	return qp;
}

static void drain_cq(void)
{
	struct ibv_wc wc[16];

	while (ibv_poll_cq(cq, 16, wc) > 0)
		;
}

/* ---- the transition table ------------------------------------------------------------------ */
static void test_transitions(void)
{
	struct ibv_qp *partner = qp_in(IBV_QPS_RESET, NULL);
	static const enum ibv_qp_state reachable[] = { IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
						       IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR };

	for (size_t i = 0; i < sizeof(reachable) / sizeof(reachable[0]); i++) {
		enum ibv_qp_state cur = reachable[i];

		for (int next = 0; next < NSTATES; next++) {
			struct ibv_qp *qp = qp_in(cur, partner);
			struct ibv_qp_attr a;
			struct qp_view before, after;
			int ret;

			view(qp, &before);
			other_attrs(&a, (enum ibv_qp_state)next, partner->qp_num);
			if (legal_rc[cur][next]) {
				ret = ibv_modify_qp(qp, &a, req_mask(cur, (enum ibv_qp_state)next));
				if (ret)
					SR_FAIL("%s -> %s refused (%d)", state_name[cur],
						state_name[next], ret);
				CHECK_EQ(vu_qp_state(qp), next);
			} else {
				/* Refused with the attributes the target state needs, too. */
				ret = ibv_modify_qp(qp, &a, mask_for((enum ibv_qp_state)next));
				if (ret != EINVAL)
					SR_FAIL("%s -> %s: got %d, expected EINVAL",
						state_name[cur], state_name[next], ret);
				view(qp, &after);
				SAME_VIEW(&before, &after);
				/* The bare state change is refused as well. */
				ret = ibv_modify_qp(qp, &a, IBV_QP_STATE);
				if (ret != EINVAL)
					SR_FAIL("%s -> %s (state only): got %d, expected EINVAL",
						state_name[cur], state_name[next], ret);
				view(qp, &after);
				SAME_VIEW(&before, &after);
			}
			CHECK_EQ(ibv_destroy_qp(qp), 0);
		}
	}
	CHECK_EQ(ibv_destroy_qp(partner), 0);
	drain_cq();
}

/* ---- attribute sets ------------------------------------------------------------------------- */
static void refused(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, const char *what)
{
	struct qp_view before, after;
	int ret;

	view(qp, &before);
	ret = ibv_modify_qp(qp, a, mask);
	if (ret != EINVAL)
		SR_FAIL("%s: got %d, expected EINVAL", what, ret);
	view(qp, &after);
	SAME_VIEW(&before, &after);
}

static void test_masks(void)
{
	struct ibv_qp *partner = qp_in(IBV_QPS_RESET, NULL);
	struct ibv_qp_attr a;
	struct ibv_qp *qp;
	char what[128];

	/* Each required attribute left out, in turn. */
	static const struct {
		enum ibv_qp_state from, to;
		int req;
	} steps[] = {
		{ IBV_QPS_RESET, IBV_QPS_INIT, REQ_INIT },
		{ IBV_QPS_INIT, IBV_QPS_RTR, REQ_RTR },
		{ IBV_QPS_RTR, IBV_QPS_RTS, REQ_RTS },
	};
	for (size_t s = 0; s < 3; s++) {
		for (int bit = 0; bit < 31; bit++) {
			int m = 1 << bit;

			if (!(steps[s].req & m))
				continue;
			qp = qp_in(steps[s].from, partner);
			other_attrs(&a, steps[s].to, partner->qp_num);
			snprintf(what, sizeof(what), "%s -> %s without mask bit 0x%x",
				 state_name[steps[s].from], state_name[steps[s].to], m);
			refused(qp, &a, (IBV_QP_STATE | steps[s].req) & ~m, what);
			CHECK_EQ(ibv_destroy_qp(qp), 0);
		}
	}

	/* Attributes the transition does not allow. */
	static const struct {
		enum ibv_qp_state from, to;
		int extra;
		const char *name;
	} extras[] = {
		{ IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_SQ_PSN, "SQ_PSN" },
		{ IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_DEST_QPN, "DEST_QPN" },
		{ IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_QKEY, "QKEY on RC" },
		{ IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_CUR_STATE, "CUR_STATE" },
		{ IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_SQ_PSN, "SQ_PSN" },
		{ IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_TIMEOUT, "TIMEOUT" },
		{ IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC" },
		{ IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_DEST_QPN, "DEST_QPN" },
		{ IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_RQ_PSN, "RQ_PSN" },
		{ IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_PATH_MTU, "PATH_MTU" },
		{ IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_AV, "AV" },
		{ IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_SQ_PSN, "SQ_PSN" },
		{ IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_DEST_QPN, "DEST_QPN" },
		{ IBV_QPS_RTS, IBV_QPS_SQD, IBV_QP_TIMEOUT, "TIMEOUT" },
		{ IBV_QPS_ERR, IBV_QPS_RESET, IBV_QP_SQ_PSN, "SQ_PSN" },
	};
	for (size_t i = 0; i < sizeof(extras) / sizeof(extras[0]); i++) {
		qp = qp_in(extras[i].from, partner);
		other_attrs(&a, extras[i].to, partner->qp_num);
		snprintf(what, sizeof(what), "%s -> %s with %s", state_name[extras[i].from],
			 state_name[extras[i].to], extras[i].name);
		a.cur_qp_state = extras[i].from;
		refused(qp, &a, mask_for(extras[i].to) | extras[i].extra, what);
		CHECK_EQ(ibv_destroy_qp(qp), 0);
	}

	/* Values out of range. */
	static const struct {
		enum ibv_qp_state from, to;
		const char *name;
	} bad[] = {
		{ IBV_QPS_RESET, IBV_QPS_INIT, "port 2" },
		{ IBV_QPS_RESET, IBV_QPS_INIT, "pkey index 1" },
		{ IBV_QPS_INIT, IBV_QPS_RTR, "path MTU above the port's" },
		{ IBV_QPS_INIT, IBV_QPS_RTR, "dest QPN above 2^24" },
		{ IBV_QPS_INIT, IBV_QPS_RTR, "min RNR timer 32" },
		{ IBV_QPS_INIT, IBV_QPS_RTR, "all-zero GID" },
		{ IBV_QPS_RTR, IBV_QPS_RTS, "timeout 32" },
		{ IBV_QPS_RTR, IBV_QPS_RTS, "retry count 8" },
		{ IBV_QPS_RTR, IBV_QPS_RTS, "RNR retry 8" },
		{ IBV_QPS_RTS, IBV_QPS_RTS, "cur_qp_state not the current state" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int mask;

		qp = qp_in(bad[i].from, partner);
		other_attrs(&a, bad[i].to, partner->qp_num);
		mask = mask_for(bad[i].to);
		switch (i) {
		case 0: a.port_num = 2; break;
		case 1: a.pkey_index = 1; break;
		case 2: a.path_mtu = (enum ibv_mtu)(dev.active_mtu + 1); break;
		case 3: a.dest_qp_num = 1u << 24; break;
		case 4: a.min_rnr_timer = 32; break;
		case 5: memset(&a.ah_attr.grh.dgid, 0, 16); break;
		case 6: a.timeout = 32; break;
		case 7: a.retry_cnt = 8; break;
		case 8: a.rnr_retry = 8; break;
		case 9: a.cur_qp_state = IBV_QPS_SQD; mask |= IBV_QP_CUR_STATE; break;
		}
		snprintf(what, sizeof(what), "%s -> %s with %s", state_name[bad[i].from],
			 state_name[bad[i].to], bad[i].name);
		refused(qp, &a, mask, what);
		CHECK_EQ(ibv_destroy_qp(qp), 0);
	}

	/* UD: Q_Key required at INIT, access flags not allowed. */
	{
		struct vu_qp_cfg q;

		vu_qp_cfg_default(&q, IBV_QPT_UD);
		qp = vu_qp_create(&dev, cq, cq, &q);
		REQUIRE(qp);
		other_attrs(&a, IBV_QPS_INIT, 0);
		refused(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT, "UD INIT without QKEY");
		refused(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
				       IBV_QP_ACCESS_FLAGS, "UD INIT with ACCESS_FLAGS");
		CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						       IBV_QP_QKEY), 0);
		refused(qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU, "UD RTR with PATH_MTU");
		CHECK_EQ(ibv_destroy_qp(qp), 0);
	}
	CHECK_EQ(ibv_destroy_qp(partner), 0);
	drain_cq();
}

/* ---- paths through the machine with traffic ------------------------------------------------ */
/* One WRITE and one SEND from qp[0] to qp[1]; the data checked. */
static void transfer(struct vu_pair *p, uint32_t seed, int line)
{
	struct ibv_wc w;

	vu_fill(lb.p, 3000, seed);
	memset(rb.p, 0, 8192);
	CHECK_EQ(vu_post_recv(p->qp[1], 900 + seed, rb.mr, rb.p + 4096, 4096), 0);
	CHECK_EQ(vu_post_rdma(p->qp[0], 1, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 3000, (uintptr_t)rb.p,
			      rb.mr->rkey, 0), 0);
	CHECK_EQ(vu_post_send(p->qp[0], 2, IBV_WR_SEND, lb.mr, lb.p, 3000, 0, 0), 0);
	memset(&w, 0, sizeof(w));
	if (!vu_wait(p->scq[0], &w, 5000) || w.status != IBV_WC_SUCCESS || w.wr_id != 1)
		SR_FAIL("line %d: WRITE: %s", line, vu_wc_str(&w));
	if (!vu_wait(p->scq[0], &w, 5000) || w.status != IBV_WC_SUCCESS || w.wr_id != 2)
		SR_FAIL("line %d: SEND: %s", line, vu_wc_str(&w));
	if (!vu_wait(p->rcq[1], &w, 5000) || w.status != IBV_WC_SUCCESS ||
	    w.wr_id != 900 + seed || w.byte_len != 3000)
		SR_FAIL("line %d: RECV: %s", line, vu_wc_str(&w));
	if (vu_check(rb.p, 3000, seed) != -1 || vu_check(rb.p + 4096, 3000, seed) != -1)
		SR_FAIL("line %d: data did not arrive intact", line);
}

static int modify_state(struct ibv_qp *qp, enum ibv_qp_state s)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = s;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static void test_sqd(void)
{
	struct vu_pair p;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;
	struct pollfd pfd = { .fd = dev.ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;

	REQUIRE(vu_pair_create(&dev, NULL, NULL, &p) == 0);
	transfer(&p, 1, __LINE__);

	/* RTS -> SQD with the drained notification: the SQ is empty, so at once. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_SQD;
	a.en_sqd_async_notify = 1;
	CHECK_EQ(ibv_modify_qp(p.qp[0], &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
	CHECK_EQ(vu_qp_state(p.qp[0]), IBV_QPS_SQD);
	CHECK_EQ(poll(&pfd, 1, 1000), 1);
	if (ibv_get_async_event(dev.ctx, &ev) == 0) {
		CHECK_EQ(ev.event_type, IBV_EVENT_SQ_DRAINED);
		CHECK(ev.element.qp == p.qp[0]);
		ibv_ack_async_event(&ev);
	} else {
		SR_FAIL("no SQ drained event");
	}
	CHECK_EQ(ibv_query_qp(p.qp[0], &a, IBV_QP_STATE, &ia), 0);
	CHECK_EQ(a.sq_draining, 0);

	/* Posted in SQD: queued, not started. */
	vu_fill(lb.p, 2000, 2);
	memset(rb.p + 20000, 0, 2000);
	CHECK_EQ(vu_post_rdma(p.qp[0], 3, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 2000,
			      (uintptr_t)rb.p + 20000, rb.mr->rkey, 0), 0);
	CHECK_EQ(vu_drain(p.scq[0], &wc, 1, 50), 0);
	CHECK_EQ(vu_check_byte(rb.p + 20000, 2000, 0), -1);
	/* SQD -> SQD may change path attributes (here: the timeout). */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_SQD;
	a.timeout = 15;
	CHECK_EQ(ibv_modify_qp(p.qp[0], &a, IBV_QP_STATE | IBV_QP_TIMEOUT), 0);
	/* SQD -> RTS: the queued WRITE goes. */
	CHECK_EQ(modify_state(p.qp[0], IBV_QPS_RTS), 0);
	CHECK(vu_wait(p.scq[0], &wc, 5000));
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 3);
	CHECK_EQ(vu_check(rb.p + 20000, 2000, 2), -1);
	CHECK_EQ(ibv_query_qp(p.qp[0], &a, IBV_QP_TIMEOUT, &ia), 0);
	CHECK_EQ(a.timeout, 15);
	transfer(&p, 3, __LINE__);
	vu_pair_destroy(&p);
}

/* ERR from every state that has it; what was posted flushes. */
static void test_to_err(void)
{
	static const enum ibv_qp_state from[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
						  IBV_QPS_SQD, IBV_QPS_ERR };
	struct ibv_qp *partner = qp_in(IBV_QPS_RESET, NULL);

	for (size_t i = 0; i < sizeof(from) / sizeof(from[0]); i++) {
		struct ibv_qp *qp = qp_in(from[i], partner);
		struct ibv_wc wc;

		drain_cq();
		CHECK_EQ(vu_post_recv(qp, 77, rb.mr, rb.p, 64), 0);
		CHECK_EQ(modify_state(qp, IBV_QPS_ERR), 0);
		CHECK_EQ(vu_qp_state(qp), IBV_QPS_ERR);
		if (!vu_wait(cq, &wc, 1000) || wc.wr_id != 77 || wc.status != IBV_WC_WR_FLUSH_ERR)
			SR_FAIL("%s -> ERR: receive WQE not flushed", state_name[from[i]]);
		CHECK_EQ(vu_drain(cq, &wc, 1, 10), 0);
		/* In ERR every post completes with a flush, send and receive alike. */
		CHECK_EQ(vu_post_send(qp, 78, IBV_WR_SEND, lb.mr, lb.p, 10, 0, 0), 0);
		CHECK(vu_wait(cq, &wc, 1000));
		CHECK_EQ(wc.wr_id, 78);
		CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
		CHECK_EQ(vu_post_recv(qp, 79, rb.mr, rb.p, 64), 0);
		CHECK(vu_wait(cq, &wc, 1000));
		CHECK_EQ(wc.wr_id, 79);
		CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
		CHECK_EQ(ibv_destroy_qp(qp), 0);
	}
	CHECK_EQ(ibv_destroy_qp(partner), 0);
	drain_cq();
}

/* RESET from every state; the pair connects again and moves data. */
static void test_reset_and_reuse(void)
{
	static const enum ibv_qp_state from[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
						  IBV_QPS_SQD, IBV_QPS_ERR };
	struct vu_pair p;
	struct vu_conn_cfg c;

	vu_conn_cfg_default(&c);
	REQUIRE(vu_pair_create_reset(&dev, NULL, &p) == 0);
	for (size_t i = 0; i < sizeof(from) / sizeof(from[0]); i++) {
		struct ibv_wc wc;

		REQUIRE(vu_pair_connect(&p, &c) == 0);
		transfer(&p, 10 + (uint32_t)i, __LINE__);
		/* Leave something behind: a receive WQE and (for RTS) a WR in flight to a peer
		 * that goes away. RESET discards WQEs without completing them. */
		CHECK_EQ(vu_post_recv(p.qp[1], 500, rb.mr, rb.p, 64), 0);
		for (int side = 0; side < 2; side++) {
			struct ibv_qp *qp = p.qp[side];

			switch (from[i]) {
			case IBV_QPS_INIT:
			case IBV_QPS_RTR:
				CHECK_EQ(modify_state(qp, IBV_QPS_RESET), 0);
				REQUIRE(vu_qp_to_init(qp, &c) == 0);
				if (from[i] == IBV_QPS_RTR)
					REQUIRE(vu_qp_to_rtr(qp, &c, &dev.gid,
							     p.qp[1 - side]->qp_num) == 0);
				break;
			case IBV_QPS_SQD:
				CHECK_EQ(modify_state(qp, IBV_QPS_SQD), 0);
				break;
			case IBV_QPS_ERR:
				CHECK_EQ(modify_state(qp, IBV_QPS_ERR), 0);
				break;
			default:
				break;
			}
			CHECK_EQ(vu_qp_state(qp), from[i]);
		}
		if (from[i] == IBV_QPS_ERR) {
			CHECK(vu_wait(p.rcq[1], &wc, 1000));
			CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
		}
		for (int side = 0; side < 2; side++) {
			CHECK_EQ(modify_state(p.qp[side], IBV_QPS_RESET), 0);
			CHECK_EQ(vu_qp_state(p.qp[side]), IBV_QPS_RESET);
		}
		/* Nothing completes for what RESET discarded. */
		CHECK_EQ(vu_drain(p.rcq[1], &wc, 1, 10), 0);
		CHECK_EQ(vu_drain(p.scq[0], &wc, 1, 1), 0);
	}
	/* And once more with new PSNs after the last reset. */
	c.sq_psn = 0xabcdef;
	c.rq_psn = 0x123;
	REQUIRE(vu_pair_connect(&p, &c) == 0);
	transfer(&p, 30, __LINE__);
	vu_pair_destroy(&p);
}

static void test_post_by_state(void)
{
	struct ibv_qp *partner = qp_in(IBV_QPS_RESET, NULL);
	static const enum ibv_qp_state no_send[] = { IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR };

	for (size_t i = 0; i < 3; i++) {
		struct ibv_qp *qp = qp_in(no_send[i], partner);
		struct ibv_send_wr wr, *bad = NULL;
		struct ibv_sge sge = { (uintptr_t)lb.p, 10, lb.mr->lkey };
		struct ibv_wc wc;

		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 1;
		wr.opcode = IBV_WR_SEND;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		if (ibv_post_send(qp, &wr, &bad) != EINVAL)
			SR_FAIL("post_send in %s not EINVAL", state_name[no_send[i]]);
		CHECK(bad == &wr);
		if (no_send[i] == IBV_QPS_RESET) {
			struct ibv_recv_wr rwr, *rbad = NULL;

			memset(&rwr, 0, sizeof(rwr));
			rwr.sg_list = &sge;
			rwr.num_sge = 1;
			CHECK_EQ(ibv_post_recv(qp, &rwr, &rbad), EINVAL);
			CHECK(rbad == &rwr);
		} else {
			CHECK_EQ(vu_post_recv(qp, 2, lb.mr, lb.p, 10), 0);
		}
		CHECK_EQ(vu_drain(cq, &wc, 1, 10), 0);
		CHECK_EQ(ibv_destroy_qp(qp), 0);
	}
	CHECK_EQ(ibv_destroy_qp(partner), 0);
}

/* ---- errnos of the object verbs ------------------------------------------------------------ */
static void test_errnos(void)
{
	struct ibv_device_attr da;
	struct ibv_qp_init_attr ia;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *c2;
	struct ibv_qp *qp;
	struct ibv_comp_channel *ch;
	struct ibv_srq *srq;
	struct ibv_srq_init_attr sa;

	CHECK_EQ(ibv_query_device(dev.ctx, &da), 0);

	/* create_qp with capabilities beyond the device's. */
	static const char *const what[] = { "max_send_sge", "max_recv_sge", "max_send_wr",
					    "max_recv_wr", "max_inline_data" };
	for (int i = 0; i < 5; i++) {
		memset(&ia, 0, sizeof(ia));
		ia.qp_type = IBV_QPT_RC;
		ia.send_cq = cq;
		ia.recv_cq = cq;
		ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
		ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
		switch (i) {
		case 0: ia.cap.max_send_sge = (uint32_t)da.max_sge + 1; break;
		case 1: ia.cap.max_recv_sge = (uint32_t)da.max_sge + 1; break;
		case 2: ia.cap.max_send_wr = (uint32_t)da.max_qp_wr + 1; break;
		case 3: ia.cap.max_recv_wr = (uint32_t)da.max_qp_wr + 1; break;
		case 4: ia.cap.max_inline_data = 1u << 20; break;
		}
		errno = 0;
		qp = ibv_create_qp(dev.pd, &ia);
		if (qp || errno != EINVAL)
			SR_FAIL("create_qp with %s too big: %p errno %d, expected EINVAL", what[i],
				(void *)qp, errno);
		if (qp)
			ibv_destroy_qp(qp);
	}
	/* No CQs: EINVAL. */
	memset(&ia, 0, sizeof(ia));
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 1;
	errno = 0;
	CHECK(ibv_create_qp(dev.pd, &ia) == NULL);
	CHECK_EQ(errno, EINVAL);

	/* A PD with an MR (then with a QP, an AH) cannot go. */
	pd = ibv_alloc_pd(dev.ctx);
	REQUIRE(pd);
	mr = ibv_reg_mr(pd, lb.p, 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr);
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	memset(&ia, 0, sizeof(ia));
	ia.qp_type = IBV_QPT_RC;
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &ia);
	REQUIRE(qp);
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	/* A CQ a QP uses cannot go either. */
	c2 = ibv_create_cq(dev.ctx, 4, NULL, NULL, 0);
	REQUIRE(c2);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	ia.send_cq = c2;
	qp = ibv_create_qp(pd, &ia);
	REQUIRE(qp);
	CHECK_EQ(ibv_destroy_cq(c2), EBUSY);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(c2), 0);
	{
		struct ibv_ah_attr ah;
		struct ibv_ah *h;

		vu_ah_attr(&ah, &dev.gid);
		h = ibv_create_ah(pd, &ah);
		REQUIRE(h);
		CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
		CHECK_EQ(ibv_destroy_ah(h), 0);
	}
	CHECK_EQ(ibv_dealloc_pd(pd), 0);

	/* An SRQ a QP uses; a channel a CQ uses. */
	memset(&sa, 0, sizeof(sa));
	sa.attr.max_wr = 4;
	sa.attr.max_sge = 1;
	srq = ibv_create_srq(dev.pd, &sa);
	REQUIRE(srq);
	memset(&ia, 0, sizeof(ia));
	ia.qp_type = IBV_QPT_RC;
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.srq = srq;
	ia.cap.max_send_wr = 1;
	ia.cap.max_send_sge = 1;
	qp = ibv_create_qp(dev.pd, &ia);
	REQUIRE(qp);
	CHECK_EQ(ibv_destroy_srq(srq), EBUSY);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_srq(srq), 0);
	ch = ibv_create_comp_channel(dev.ctx);
	REQUIRE(ch);
	c2 = ibv_create_cq(dev.ctx, 4, NULL, ch, 0);
	REQUIRE(c2);
	CHECK_EQ(ibv_destroy_comp_channel(ch), EBUSY);
	CHECK_EQ(ibv_destroy_cq(c2), 0);
	CHECK_EQ(ibv_destroy_comp_channel(ch), 0);

	/* reg_mr: remote write or atomic needs local write (IBA 10.6.3.1). */
	errno = 0;
	mr = ibv_reg_mr(dev.pd, lb.p, 4096, IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr == NULL);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	mr = ibv_reg_mr(dev.pd, lb.p, 4096, IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ);
	CHECK(mr == NULL);
	CHECK_EQ(errno, EINVAL);
	mr = ibv_reg_mr(dev.pd, lb.p, 4096, IBV_ACCESS_REMOTE_READ);	/* fine alone */
	CHECK(mr != NULL);
	if (mr)
		CHECK_EQ(ibv_dereg_mr(mr), 0);
	/* CQ sizes. */
	errno = 0;
	CHECK(ibv_create_cq(dev.ctx, 0, NULL, NULL, 0) == NULL);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	CHECK(ibv_create_cq(dev.ctx, da.max_cqe + 1, NULL, NULL, 0) == NULL);
	CHECK_EQ(errno, EINVAL);
}

int main(void)
{
	sr_test_timeout(120);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 65536, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rb, 65536, VU_ACCESS_ALL) == 0);
	cq = ibv_create_cq(dev.ctx, 4096, NULL, NULL, 0);
	REQUIRE(cq);
	{
		int fl = fcntl(dev.ctx->async_fd, F_GETFL);

		REQUIRE(fcntl(dev.ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
	}

	test_transitions();
	test_masks();
	test_sqd();
	test_to_err();
	test_reset_and_reuse();
	test_post_by_state();
	test_errnos();

	CHECK_EQ(ibv_destroy_cq(cq), 0);
	vu_buf_free(&lb);
	vu_buf_free(&rb);
	vu_close(&dev);
	return sr_test_done("test_qp_state");
}
