/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm connection semantics, client and server in one process (the loopback case):
 * private data at exactly the IBTA limits and one byte over (REQ 56 for RDMA_PS_TCP, REP 196,
 * REJ 148, SIDR REQ 180, SIDR REP 136), delivered intact; responder resources and initiator
 * depth negotiated down on both QPs; a SEND over the connection; rdma_disconnect giving
 * DISCONNECTED on both sides, its own QP in ERR and the peer's left alone until the peer's
 * rdma_disconnect (the kernel's behaviour); rdma_reject with private data; no listener
 * giving REJECTED (status 8) promptly; a listener replaced by another on the same port; XRC
 * (an XRC_SEND QP connected to an XRC_RECV QP, a SEND to the XRC SRQ named in the REP).
 *
 * By default (cm_wire=ibcm) all of it goes through CM MADs on the device's QP1 (the loopback
 * device talks to itself), the RC case without one private CM datagram; a DREQ leaves the
 * receiver's QP as it is until its own rdma_disconnect, as the kernel's rdma_cm. Run again
 * with SOFTRDMA_CM_WIRE=private (cm/test_cm_conn.private): the same over softrdma's own
 * protocol, without one MAD.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "sr_test.h"
#include "verbs_util.h"
#include "cm_util.h"

static struct rdma_event_channel *ch;
static bool ibcm;	/* the IB CM on QP1 (the default), unless SOFTRDMA_CM_WIRE=private */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fill(uint8_t *b, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed + i * 7);
}

static bool same(const void *a, const uint8_t *expect_buf, size_t n)
{
	return a && !memcmp(a, expect_buf, n);
}

static struct sockaddr_in loop_addr(uint16_t port_be)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = port_be };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static int qp_state(struct ibv_qp *qp, struct ibv_qp_attr *a)
{
	struct ibv_qp_init_attr ia;

	memset(a, 0, sizeof(*a));
	if (ibv_query_qp(qp, a, IBV_QP_STATE, &ia))
		return -1;
	return a->qp_state;
}

/* rdma_disconnect(c): DISCONNECTED on both sides. As with the kernel's rdma_cm, c's QP is in
 * ERR and s's is left as it was (the peer's DREQ does not flush it: a receive still posted
 * there stays posted) until s disconnects too. */
static void disconnect_both(struct rdma_cm_id *c, struct rdma_cm_id *s)
{
	struct rdma_cm_event *ev;
	struct ibv_qp_attr qa;
	struct ibv_wc wc;

	REQUIRE(rdma_disconnect(c) == 0);
	for (int k = 0; k < 2; k++) {
		ev = cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED, 3000);
		if (ev)
			rdma_ack_cm_event(ev);
	}
	CHECK_EQ(qp_state(c->qp, &qa), IBV_QPS_ERR);
	/* Both wires: the kernel's rdma_cm, the DREQ's receiver keeps its QP until it disconnects. */
	CHECK_EQ(qp_state(s->qp, &qa), IBV_QPS_RTS);
	CHECK_EQ(ibv_poll_cq(s->recv_cq, 1, &wc), 0);	/* nothing flushed */
	CHECK_EQ(rdma_disconnect(s), 0);
	CHECK_EQ(qp_state(s->qp, &qa), IBV_QPS_ERR);
}

static void test_rc(struct rdma_cm_id *listen, uint16_t port)
{
	uint8_t req[57], rep[197], msg[1024], got[1024];
	struct rdma_conn_param p = { .responder_resources = 4, .initiator_depth = 2,
				     .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_id *c = cm_client(ch, RDMA_PS_TCP, "127.0.0.1", port), *s;
	struct rdma_cm_event *ev;
	struct ibv_qp_attr qa;
	struct ibv_mr *cmr, *smr;
	int64_t msgs0 = vu_stat("cm_msgs_rcvd"), mads0 = vu_stat("cm_mads_rcvd");

	cm_make_qp(c, IBV_QPT_RC);
	fill(req, sizeof(req), 1);
	p.private_data = req;
	p.private_data_len = 57;
	CHECK(rdma_connect(c, &p) == -1 && errno == EINVAL);	/* one byte over the REQ limit */
	p.private_data_len = 56;
	REQUIRE(rdma_connect(c, &p) == 0);

	ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 2000);
	REQUIRE(ev);
	s = ev->id;
	CHECK(ev->listen_id == listen);
	CHECK(ev->param.conn.private_data_len >= 56);
	CHECK(same(ev->param.conn.private_data, req, 56));
	/* From the server's point of view: what the client offers and asks, swapped. */
	CHECK_EQ(ev->param.conn.responder_resources, 2);
	CHECK_EQ(ev->param.conn.initiator_depth, 4);
	rdma_ack_cm_event(ev);

	cm_make_qp(s, IBV_QPT_RC);
	fill(rep, sizeof(rep), 2);
	struct rdma_conn_param a = { .private_data = rep, .private_data_len = 197,
				     .responder_resources = 1, .initiator_depth = 8,
				     .rnr_retry_count = 7 };

	CHECK(rdma_accept(s, &a) == -1 && errno == EINVAL);	/* over the REP limit */
	a.private_data_len = 196;
	REQUIRE(rdma_accept(s, &a) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 2000);
	REQUIRE(ev);
	CHECK(ev->id == c);
	CHECK(ev->param.conn.private_data_len >= 196);
	CHECK(same(ev->param.conn.private_data, rep, 196));
	rdma_ack_cm_event(ev);
	ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 2000);
	REQUIRE(ev);
	CHECK(ev->id == s);
	rdma_ack_cm_event(ev);

	/* Negotiated down: the client may have 1 READ/ATOMIC outstanding (the server grants 1
	 * responder resource), the server 2 (what the client offered... its initiator depth
	 * is min(8, client's 4 responder resources) = 4), and the responders accordingly. */
	struct ibv_qp_init_attr ia;

	REQUIRE(ibv_query_qp(c->qp, &qa, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &ia) == 0);
	CHECK_EQ(qa.qp_state, IBV_QPS_RTS);
	CHECK_EQ(qa.max_rd_atomic, 1);
	CHECK_EQ(qa.max_dest_rd_atomic, 4);
	REQUIRE(ibv_query_qp(s->qp, &qa, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &ia) == 0);
	CHECK_EQ(qa.qp_state, IBV_QPS_RTS);
	CHECK_EQ(qa.max_rd_atomic, 4);
	CHECK_EQ(qa.max_dest_rd_atomic, 1);

	/* A SEND over the connection. */
	fill(msg, sizeof(msg), 3);
	memset(got, 0, sizeof(got));
	cmr = ibv_reg_mr(c->pd, msg, sizeof(msg), IBV_ACCESS_LOCAL_WRITE);
	smr = ibv_reg_mr(s->pd, got, sizeof(got), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(cmr && smr);
	struct ibv_sge rs = { (uintptr_t)got, sizeof(got), smr->lkey }, ss = { (uintptr_t)msg, sizeof(msg), cmr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *brw;
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED }, *bsw;

	REQUIRE(ibv_post_recv(s->qp, &rwr, &brw) == 0);
	REQUIRE(ibv_post_send(c->qp, &swr, &bsw) == 0);
	struct ibv_wc wc;
	int n = 0;
	double t0 = now_s();

	while (n == 0 && now_s() - t0 < 5)
		n = ibv_poll_cq(s->recv_cq, 1, &wc);
	CHECK_EQ(n, 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK(!memcmp(got, msg, sizeof(msg)));
	for (n = 0, t0 = now_s(); n == 0 && now_s() - t0 < 5;)
		n = ibv_poll_cq(c->send_cq, 1, &wc);
	CHECK_EQ(n, 1);

	/* rdma_disconnect: DISCONNECTED on both sides; a receive s still has posted is flushed
	 * by s's own rdma_disconnect, not by c's DREQ. */
	rwr.wr_id = 3;
	REQUIRE(ibv_post_recv(s->qp, &rwr, &brw) == 0);
	disconnect_both(c, s);
	if (ibcm) {
		/* REQ, REP, RTU, DREQ, DREP: MADs on QP1, no private CM datagram */
		CHECK_EQ(vu_stat("cm_msgs_rcvd") - msgs0, 0);
		CHECK(vu_stat("cm_mads_rcvd") - mads0 >= 5);
	} else {
		CHECK_EQ(vu_stat("cm_mads_rcvd") - mads0, 0);
	}
	for (n = 0, t0 = now_s(); n == 0 && now_s() - t0 < 5;)
		n = ibv_poll_cq(s->recv_cq, 1, &wc);
	CHECK_EQ(n, 1);
	CHECK_EQ(wc.wr_id, 3);
	CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
	ibv_dereg_mr(cmr);
	ibv_dereg_mr(smr);
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	rdma_destroy_id(c);
	rdma_destroy_id(s);
}

static void test_reject(uint16_t port)
{
	uint8_t rej[149];
	struct rdma_conn_param p = { .retry_count = 7 };
	struct rdma_cm_id *c = cm_client(ch, RDMA_PS_TCP, "127.0.0.1", port);
	struct rdma_cm_event *ev;
	double t0;

	cm_make_qp(c, IBV_QPT_RC);
	REQUIRE(rdma_connect(c, &p) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 2000);
	REQUIRE(ev);
	struct rdma_cm_id *s = ev->id;

	rdma_ack_cm_event(ev);
	fill(rej, sizeof(rej), 4);
	CHECK(rdma_reject(s, rej, 149) == -1 && errno == EINVAL);	/* over the REJ limit */
	REQUIRE(rdma_reject(s, rej, 148) == 0);
	t0 = now_s();
	ev = cm_expect(ch, RDMA_CM_EVENT_REJECTED, 2000);
	REQUIRE(ev);
	CHECK_EQ(ev->status, 28);	/* IB_CM_REJ_CONSUMER_DEFINED */
	CHECK(ev->param.conn.private_data_len >= 148);
	CHECK(same(ev->param.conn.private_data, rej, 148));
	CHECK(now_s() - t0 < 1);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(s);
}

/* A listener destroyed while a connection request waits in its channel, not taken: the
 * request is rejected at once (consumer defined, as the kernel's rdma_cm destroys such an id
 * with a REJ); before, the requester heard nothing until its REQ timed out. */
static void test_listener_gone(void)
{
	struct rdma_event_channel *lch = rdma_create_event_channel();
	struct sockaddr_in a = loop_addr(0);
	struct rdma_conn_param p = { .retry_count = 7 };
	struct rdma_cm_id *l, *c;
	struct rdma_cm_event *ev;
	struct pollfd pf;
	double t0;

	REQUIRE(lch);
	REQUIRE(rdma_create_id(lch, &l, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(l, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_listen(l, 1) == 0);
	c = cm_client(ch, RDMA_PS_TCP, "127.0.0.1", rdma_get_src_port(l));
	cm_make_qp(c, IBV_QPT_RC);
	REQUIRE(rdma_connect(c, &p) == 0);
	pf = (struct pollfd){ .fd = lch->fd, .events = POLLIN };
	REQUIRE(poll(&pf, 1, 2000) == 1);	/* the CONNECT_REQUEST is queued, not taken */
	t0 = now_s();
	CHECK_EQ(rdma_destroy_id(l), 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_REJECTED, 2000);
	if (ev) {
		CHECK(ev->id == c);
		CHECK_EQ(ev->status, 28);	/* IB_CM_REJ_CONSUMER_DEFINED */
		rdma_ack_cm_event(ev);
	}
	CHECK(ev != NULL);
	CHECK(now_s() - t0 < 1);
	rdma_destroy_event_channel(lch);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
}

static void test_no_listener(void)
{
	struct rdma_conn_param p = { .retry_count = 7 };
	struct rdma_cm_id *c;
	struct rdma_cm_event *ev;
	double t0;

	/* A port nobody listens on: take one that was just free. */
	struct rdma_cm_id *tmp;
	struct sockaddr_in a = loop_addr(0);

	REQUIRE(rdma_create_id(ch, &tmp, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(tmp, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_listen(tmp, 1) == 0);
	uint16_t dead = rdma_get_src_port(tmp);

	rdma_destroy_id(tmp);
	c = cm_client(ch, RDMA_PS_TCP, "127.0.0.1", dead);
	cm_make_qp(c, IBV_QPT_RC);
	t0 = now_s();
	REQUIRE(rdma_connect(c, &p) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_REJECTED, 2000);
	if (ev) {
		CHECK_EQ(ev->status, 8);	/* IB_CM_REJ_INVALID_SERVICE_ID */
		rdma_ack_cm_event(ev);
	}
	CHECK(now_s() - t0 < 1);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
}

/* Connects c (a client id with a QP) through a listener, accepts on the server side; returns
 * the server's id. */
static struct rdma_cm_id *connect_accept(struct rdma_cm_id *c, int req_timeout_ms)
{
	struct rdma_conn_param p = { .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *s = cm_connect_accept(ch, c, IBV_QPT_RC, &p, req_timeout_ms);

	for (int k = 0; k < 2; k++) {
		ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 2000);
		REQUIRE(ev);
		rdma_ack_cm_event(ev);
	}
	return s;
}

static void drop_conn(struct rdma_cm_id *id)
{
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

/*
 * A listener replaced by another on the same port while its connections live on (perftest -R
 * does this between its control and data connections): a REQ that arrives in between is not
 * rejected but left for the requester to retransmit, and the new listener gets it. With no new
 * listener, the REQ is rejected (status 8) once the port has had no listener for 2 s.
 */
static void test_relisten(void)
{
	struct sockaddr_in a = loop_addr(0);
	struct rdma_cm_id *l1, *l2, *c1, *c2, *c3, *s1, *s2;
	struct rdma_conn_param p = { .retry_count = 7 };
	struct rdma_cm_event *ev;
	struct pollfd pf = { .fd = ch->fd, .events = POLLIN };
	uint16_t port;
	double t0;

	REQUIRE(rdma_create_id(ch, &l1, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(l1, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_listen(l1, 1) == 0);
	port = rdma_get_src_port(l1);
	c1 = cm_client(ch, RDMA_PS_TCP, "127.0.0.1", port);
	cm_make_qp(c1, IBV_QPT_RC);
	s1 = connect_accept(c1, 2000);
	rdma_destroy_id(l1);	/* s1 lives on, and with it the port's CM socket */

	/* The next REQ finds no listener yet: no REJECTED (nor anything else) at once. */
	c2 = cm_client(ch, RDMA_PS_TCP, "127.0.0.1", port);
	cm_make_qp(c2, IBV_QPT_RC);
	REQUIRE(rdma_connect(c2, &p) == 0);
	CHECK_EQ(poll(&pf, 1, 100), 0);
	a = loop_addr(port);
	REQUIRE(rdma_create_id(ch, &l2, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(l2, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_listen(l2, 1) == 0);
	/* The retransmitted REQ reaches the new listener. */
	ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 2000);
	REQUIRE(ev);
	CHECK(ev->listen_id == l2);
	s2 = ev->id;
	rdma_ack_cm_event(ev);
	cm_make_qp(s2, IBV_QPT_RC);
	REQUIRE(rdma_accept(s2, &p) == 0);
	for (int k = 0; k < 2; k++) {
		ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 2000);
		REQUIRE(ev);
		rdma_ack_cm_event(ev);
	}
	rdma_destroy_id(l2);

	/* No listener follows: rejected, at the first retransmission after 2 s. */
	c3 = cm_client(ch, RDMA_PS_TCP, "127.0.0.1", port);
	cm_make_qp(c3, IBV_QPT_RC);
	t0 = now_s();
	REQUIRE(rdma_connect(c3, &p) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_REJECTED, 4000);
	if (ev) {
		CHECK_EQ(ev->status, 8);	/* IB_CM_REJ_INVALID_SERVICE_ID */
		CHECK(ev->id == c3);
		rdma_ack_cm_event(ev);
	}
	/* At the first retransmission (2 s), not a later one (4 s and after): the sanitizer
	 * build at a load average of 16 took 3.1 s, so the bound sits just below the second. */
	CHECK(now_s() - t0 >= 1.9);
	CHECK(now_s() - t0 < 3.9);
	drop_conn(c3);
	/* Tear down: DISCONNECTED events for the two live connections. */
	rdma_disconnect(c1);
	rdma_disconnect(c2);
	for (int k = 0; k < 4; k++) {
		ev = cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED, 3000);
		if (ev)
			rdma_ack_cm_event(ev);
	}
	drop_conn(c1);
	drop_conn(s1);
	drop_conn(c2);
	drop_conn(s2);
}

static void test_ud(void)
{
	uint8_t req[181], rep[137];
	struct sockaddr_in a = loop_addr(0);
	struct rdma_cm_id *l, *c, *s;
	struct rdma_cm_event *ev;

	REQUIRE(rdma_create_id(ch, &l, NULL, RDMA_PS_UDP) == 0);
	REQUIRE(rdma_bind_addr(l, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_listen(l, 4) == 0);
	c = cm_client(ch, RDMA_PS_UDP, "127.0.0.1", rdma_get_src_port(l));
	cm_make_qp(c, IBV_QPT_UD);
	fill(req, sizeof(req), 5);
	struct rdma_conn_param p = { .private_data = req, .private_data_len = 181 };

	CHECK(rdma_connect(c, &p) == -1 && errno == EINVAL);	/* over the SIDR REQ limit */
	p.private_data_len = 180;
	REQUIRE(rdma_connect(c, &p) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 2000);
	REQUIRE(ev);
	s = ev->id;
	CHECK(ev->param.ud.private_data_len >= 180);
	CHECK(same(ev->param.ud.private_data, req, 180));
	rdma_ack_cm_event(ev);
	cm_make_qp(s, IBV_QPT_UD);
	fill(rep, sizeof(rep), 6);
	struct rdma_conn_param ap = { .private_data = rep, .private_data_len = 137 };

	CHECK(rdma_accept(s, &ap) == -1 && errno == EINVAL);	/* over the SIDR REP limit */
	ap.private_data_len = 136;
	REQUIRE(rdma_accept(s, &ap) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 2000);
	REQUIRE(ev);
	CHECK(ev->param.ud.private_data_len >= 136);
	CHECK(same(ev->param.ud.private_data, rep, 136));
	CHECK_EQ(ev->param.ud.qp_num, s->qp->qp_num);
	CHECK_EQ(ev->param.ud.qkey, RDMA_UDP_QKEY);
	CHECK(ev->param.ud.ah_attr.is_global);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	rdma_destroy_id(c);
	rdma_destroy_id(s);
	rdma_destroy_id(l);
}

/* One completion on cq, waiting on its completion channel (no busy polling); 1, or 0 after
 * timeout_ms. */
static int wait_comp(struct ibv_cq *cq, struct ibv_comp_channel *cc, struct ibv_wc *wc,
		     int timeout_ms)
{
	struct pollfd p = { .fd = cc->fd, .events = POLLIN };
	double t0 = now_s();

	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n)
			return n;
		REQUIRE(ibv_req_notify_cq(cq, 0) == 0);
		n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
		int left = timeout_ms - (int)((now_s() - t0) * 1000);

		if (left <= 0 || poll(&p, 1, left) != 1)
			return 0;
		struct ibv_cq *ecq;
		void *ectx;

		REQUIRE(ibv_get_cq_event(cc, &ecq, &ectx) == 0);
		ibv_ack_cq_events(ecq, 1);
	}
}

/*
 * XRC over the CM (RDMA_PS_IB): the REQ of an XRC_SEND QP makes the passive id an XRC_RECV one;
 * rdma_create_srq on it makes an XRC SRQ (the device's XRC domain, a CQ as the id's recv_cq)
 * and rdma_create_qp an XRC_RECV QP; the SRQ number travels in the REP's private data; a SEND
 * naming it completes on the SRQ's CQ. The wrong kinds: an RC QP accepting an XRC REQ and an
 * XRC_RECV QP connecting both fail with EINVAL, and the requester is rejected.
 */
/* c (an XRC_SEND QP) connects; the request is taken and arrives on an XRC_RECV id. */
static struct rdma_cm_id *xrc_request(struct rdma_cm_id *c)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_id *s;

	REQUIRE(rdma_connect(c, NULL) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 2000);
	REQUIRE(ev);
	s = ev->id;
	rdma_ack_cm_event(ev);
	CHECK_EQ(s->qp_type, IBV_QPT_XRC_RECV);
	return s;
}

static void test_xrc(void)
{
	struct sockaddr_in a = loop_addr(0);
	struct rdma_cm_id *l, *c, *s, *bad;
	struct rdma_cm_event *ev;
	struct ibv_qp_attr qa;
	uint8_t msg[200], got[256];
	uint32_t srqn, srqn_be;
	struct ibv_wc wc;

	REQUIRE(rdma_create_id(ch, &l, NULL, RDMA_PS_IB) == 0);
	REQUIRE(rdma_bind_addr(l, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_listen(l, 4) == 0);

	/* An XRC_RECV QP cannot start a connection. */
	bad = cm_client(ch, RDMA_PS_IB, "127.0.0.1", rdma_get_src_port(l));
	cm_make_qp(bad, IBV_QPT_XRC_RECV);
	CHECK(bad->qp && bad->qp->qp_type == IBV_QPT_XRC_RECV);
	CHECK(!bad->send_cq && !bad->recv_cq);	/* no queues of its own */
	CHECK(rdma_connect(bad, NULL) == -1 && errno == EINVAL);
	rdma_destroy_qp(bad);

	/* An XRC REQ answered by an RC QP: EINVAL; the application rejects. */
	cm_make_qp(bad, IBV_QPT_XRC_SEND);
	CHECK(bad->send_cq && !bad->recv_cq);	/* no receive side */
	s = xrc_request(bad);
	cm_make_qp(s, IBV_QPT_RC);
	CHECK(rdma_accept(s, NULL) == -1 && errno == EINVAL);
	REQUIRE(rdma_reject(s, NULL, 0) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_REJECTED, 2000);
	if (ev) {
		CHECK(ev->id == bad);
		rdma_ack_cm_event(ev);
	}
	drop_conn(s);
	drop_conn(bad);

	/* The real thing. */
	c = cm_client(ch, RDMA_PS_IB, "127.0.0.1", rdma_get_src_port(l));
	cm_make_qp(c, IBV_QPT_XRC_SEND);
	s = xrc_request(c);

	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };

	REQUIRE(rdma_create_srq(s, NULL, &sa) == 0);
	REQUIRE(s->srq && s->recv_cq && s->recv_cq_channel);
	REQUIRE(ibv_get_srq_num(s->srq, &srqn) == 0);
	cm_make_qp(s, IBV_QPT_XRC_RECV);
	CHECK(s->qp->qp_type == IBV_QPT_XRC_RECV);

	struct ibv_mr *smr = ibv_reg_mr(s->pd, got, sizeof(got), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *cmr = ibv_reg_mr(c->pd, msg, sizeof(msg), IBV_ACCESS_LOCAL_WRITE);

	REQUIRE(smr && cmr);
	struct ibv_sge rs = { (uintptr_t)got, sizeof(got), smr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *brw;

	memset(got, 0, sizeof(got));
	REQUIRE(ibv_post_srq_recv(s->srq, &rwr, &brw) == 0);
	srqn_be = htonl(srqn);
	struct rdma_conn_param p = { .private_data = &srqn_be, .private_data_len = 4 };

	REQUIRE(rdma_accept(s, &p) == 0);
	uint32_t peer_srqn = 0;

	for (int k = 0; k < 2; k++) {
		ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 2000);
		REQUIRE(ev);
		if (ev->id == c) {
			REQUIRE(ev->param.conn.private_data_len >= 4);
			memcpy(&peer_srqn, ev->param.conn.private_data, 4);
			peer_srqn = ntohl(peer_srqn);
		}
		rdma_ack_cm_event(ev);
	}
	CHECK_EQ(peer_srqn, srqn);
	CHECK_EQ(qp_state(c->qp, &qa), IBV_QPS_RTS);
	CHECK_EQ(qp_state(s->qp, &qa), IBV_QPS_RTS);

	fill(msg, sizeof(msg), 9);
	struct ibv_sge ss = { (uintptr_t)msg, sizeof(msg), cmr->lkey };
	struct ibv_send_wr swr = { .wr_id = 8, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED }, *bsw;

	swr.qp_type.xrc.remote_srqn = peer_srqn;
	REQUIRE(ibv_post_send(c->qp, &swr, &bsw) == 0);
	CHECK_EQ(wait_comp(s->recv_cq, s->recv_cq_channel, &wc, 5000), 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 7);
	CHECK_EQ(wc.byte_len, sizeof(msg));
	CHECK(!memcmp(got, msg, sizeof(msg)));
	CHECK_EQ(wait_comp(c->send_cq, c->send_cq_channel, &wc, 5000), 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 8);

	disconnect_both(c, s);
	ibv_dereg_mr(cmr);
	ibv_dereg_mr(smr);
	rdma_destroy_qp(s);
	rdma_destroy_srq(s);
	CHECK(!s->srq && !s->recv_cq && !s->recv_cq_channel);
	drop_conn(s);
	drop_conn(c);
	rdma_destroy_id(l);
}

int main(void)
{
	struct sockaddr_in a = loop_addr(0);
	struct rdma_cm_id *listen;

	sr_test_timeout(60);
	ibcm = !(getenv("SOFTRDMA_CM_WIRE") && !strcmp(getenv("SOFTRDMA_CM_WIRE"), "private"));
	ch = rdma_create_event_channel();
	REQUIRE(ch);
	REQUIRE(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(listen, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_listen(listen, 8) == 0);
	REQUIRE(rdma_get_src_port(listen) != 0);
	test_rc(listen, rdma_get_src_port(listen));
	test_reject(rdma_get_src_port(listen));
	test_no_listener();
	test_listener_gone();
	test_relisten();
	test_ud();
	test_xrc();
	rdma_destroy_id(listen);
	rdma_destroy_event_channel(ch);
	return sr_test_done("test_cm_conn");
}
