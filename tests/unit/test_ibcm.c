// SPDX-License-Identifier: MIT
/*
 * The IB CM connection state machine (src/cm/ibcm/ibcm.c), two ends joined by a wire that
 * encodes every MAD to its 256 bytes and decodes it again (src/wire/mad.c), with a clock the
 * test moves: the whole life of a connection (REQ, REP, RTU, DREQ, DREP, TIMEWAIT), lost REQ
 * (retransmitted byte-exact, then REJ Timeout after Max CM Retries), MRA (no retransmission
 * within its service timeout, a duplicate REQ answered with the MRA), lost REP and lost RTU
 * (answered again), REJ with private data, wrong IDs dropped, crossed DREQs, an unanswered
 * DREQ, and calls the state does not allow (EINVAL, nothing changed).
 */
#include <errno.h>
#include <string.h>

#include "cm/ibcm/ibcm.h"
#include "sr_test.h"

#define MS 1000000ull

static uint64_t now = 1000 * MS;

/* Through the wire: encode, decode, and the bytes must come back the same. */
static struct sr_cm_mad wire(const struct ibcm_out *o)
{
	uint8_t b[SR_MAD_LEN], again[SR_MAD_LEN];
	struct sr_cm_mad m;

	REQUIRE(o->send);
	REQUIRE(sr_cm_mad_encode(&o->mad, b) == 0);
	REQUIRE(sr_cm_mad_decode(&m, b, sizeof(b)) == 0);
	REQUIRE(sr_cm_mad_encode(&m, again) == 0);
	CHECK(!memcmp(b, again, sizeof(b)));
	return m;
}

static void req_params(struct sr_cm_req *r)
{
	memset(r, 0, sizeof(*r));
	r->service_id = sr_cm_service_id(0x0106, 7174);
	r->local_qpn = 0x17;
	r->starting_psn = 0x2fe935;
	r->remote_cm_response_timeout = 20;	/* ~4.3 s, as the kernel's rdma_cm */
	r->local_cm_response_timeout = 20;
	r->max_cm_retries = 3;
	r->retry_count = 7;
	r->rnr_retry_count = 7;
	r->pkey = SR_DEFAULT_PKEY;
	r->path_mtu = 3;
}

static void rep_params(struct sr_cm_rep *r)
{
	memset(r, 0, sizeof(*r));
	r->local_qpn = 0x21;
	r->starting_psn = 0x9f7039;
	r->rnr_retry_count = 7;
}

/* Active a (ID 0x1e58b42d) and passive b (0x1d58b42d), up to ESTABLISHED on both sides. */
static void connect(struct ibcm_conn *a, struct ibcm_conn *b)
{
	struct ibcm_out o, p;
	struct sr_cm_req req;
	struct sr_cm_rep rep;
	struct sr_cm_mad m;

	ibcm_init(a, 0x1e58b42d);
	ibcm_init(b, 0x1d58b42d);
	req_params(&req);
	CHECK_EQ(ibcm_send_req(a, &req, 0x42ull << 32 | 0x1e58b42d, now, &o), 0);
	CHECK_EQ(a->state, IBCM_REQ_SENT);
	m = wire(&o);
	CHECK_EQ(m.hdr.attr_id, SR_CM_ATTR_REQ);
	CHECK_EQ(m.req.local_comm_id, 0x1e58b42d);
	CHECK_EQ(ibcm_recv(b, &m, now, &p), 0);
	CHECK_EQ(p.event, IBCM_EV_REQ);
	CHECK_EQ(b->state, IBCM_REQ_RCVD);
	CHECK_EQ(b->remote_qpn, 0x17);
	rep_params(&rep);
	CHECK_EQ(ibcm_send_rep(b, &rep, now, &p), 0);
	CHECK_EQ(b->state, IBCM_REP_SENT);
	m = wire(&p);
	CHECK_EQ(m.hdr.tid, 0x42ull << 32 | 0x1e58b42d);	/* one transaction: the REQ's */
	CHECK_EQ(m.rep.remote_comm_id, 0x1e58b42d);
	CHECK_EQ(ibcm_recv(a, &m, now, &o), 0);
	CHECK_EQ(o.event, IBCM_EV_REP);
	CHECK_EQ(a->state, IBCM_REP_RCVD);
	CHECK_EQ(a->remote_qpn, 0x21);
	CHECK_EQ(a->deadline, 0);
	CHECK_EQ(ibcm_send_rtu(a, NULL, now, &o), 0);
	CHECK_EQ(a->state, IBCM_ESTABLISHED);
	m = wire(&o);
	CHECK_EQ(ibcm_recv(b, &m, now, &p), 0);
	CHECK_EQ(p.event, IBCM_EV_ESTABLISHED);
	CHECK_EQ(b->state, IBCM_ESTABLISHED);
	CHECK_EQ(b->deadline, 0);
}

static void test_life(void)
{
	struct ibcm_conn a, b;
	struct ibcm_out o, p;
	struct sr_cm_mad m;
	uint8_t pd[SR_CM_DREQ_PDATA] = { 0x5a };

	printf("a connection's life\n");
	connect(&a, &b);
	CHECK_EQ(ibcm_send_dreq(&b, pd, now, &p), 0);
	CHECK_EQ(b.state, IBCM_DREQ_SENT);
	m = wire(&p);
	CHECK_EQ(m.dreq.remote_qpn, 0x17);		/* the QP being disconnected: a's */
	CHECK_EQ(m.dreq.pdata[0], 0x5a);
	CHECK_EQ(ibcm_recv(&a, &m, now, &o), 0);
	CHECK_EQ(o.event, IBCM_EV_DREQ);
	CHECK_EQ(a.state, IBCM_DREQ_RCVD);
	CHECK_EQ(ibcm_send_drep(&a, NULL, now, &o), 0);
	CHECK_EQ(a.state, IBCM_TIMEWAIT);
	m = wire(&o);
	CHECK_EQ(ibcm_recv(&b, &m, now, &p), 0);
	CHECK_EQ(p.event, IBCM_EV_DISCONNECTED);
	CHECK_EQ(b.state, IBCM_TIMEWAIT);
	/* our DREP lost: the repeated DREQ in TIMEWAIT gets another DREP */
	{
		struct sr_cm_mad dreq = m;

		memset(&dreq, 0, sizeof(dreq));
		dreq.hdr = m.hdr;
		dreq.hdr.attr_id = SR_CM_ATTR_DREQ;
		dreq.dreq.local_comm_id = b.local_id;
		dreq.dreq.remote_comm_id = a.local_id;
		CHECK_EQ(ibcm_recv(&a, &dreq, now, &o), 0);
		CHECK(o.send);
		CHECK_EQ(o.mad.hdr.attr_id, SR_CM_ATTR_DREP);
		CHECK_EQ(o.event, IBCM_EV_NONE);
	}
	/* TIMEWAIT ends with the timer */
	a.timewait_ns = 0;
	ibcm_timer(&a, now + 10, &o);
	CHECK_EQ(o.event, IBCM_EV_NONE);
	CHECK_EQ(a.state, IBCM_TIMEWAIT);
	ibcm_timer(&a, a.deadline, &o);
	CHECK_EQ(o.event, IBCM_EV_TIMEWAIT_EXIT);
	CHECK_EQ(a.state, IBCM_IDLE);
}

static void test_lost_req(void)
{
	struct ibcm_conn a;
	struct ibcm_out o;
	struct sr_cm_req req;
	uint8_t first[SR_MAD_LEN], again[SR_MAD_LEN];
	uint64_t wait;

	printf("lost REQs: retransmitted, then REJ Timeout\n");
	ibcm_init(&a, 7);
	req_params(&req);
	CHECK_EQ(ibcm_send_req(&a, &req, 99, now, &o), 0);
	REQUIRE(sr_cm_mad_encode(&o.mad, first) == 0);
	wait = a.deadline - now;
	/* remote CM response timeout 20: 4.096 us * 2^20 = 4.29 s, plus the packet lifetimes */
	CHECK(wait > ibcm_timeout_ns(20));
	CHECK_EQ(ibcm_timeout_ns(20), 4294967296ull);
	ibcm_timer(&a, a.deadline - 1, &o);
	CHECK(!o.send);
	for (int i = 0; i < 3; i++) {
		uint64_t t = a.deadline;

		ibcm_timer(&a, t, &o);
		CHECK(o.send);
		REQUIRE(sr_cm_mad_encode(&o.mad, again) == 0);
		CHECK(!memcmp(first, again, SR_MAD_LEN));
		CHECK_EQ(a.state, IBCM_REQ_SENT);
		CHECK_EQ(a.deadline, t + wait);
	}
	ibcm_timer(&a, a.deadline, &o);
	CHECK_EQ(o.event, IBCM_EV_TIMEOUT);
	CHECK(o.send);
	CHECK_EQ(o.mad.hdr.attr_id, SR_CM_ATTR_REJ);
	CHECK_EQ(o.mad.rej.reason, SR_CM_REJ_TIMEOUT);
	CHECK_EQ(o.mad.rej.msg_rejected, SR_CM_MSG_REQ);
	CHECK_EQ(a.state, IBCM_IDLE);
	CHECK_EQ(a.deadline, 0);
}

static void test_mra_and_duplicates(void)
{
	struct ibcm_conn a, b;
	struct ibcm_out o, p;
	struct sr_cm_req req;
	struct sr_cm_rep rep;
	struct sr_cm_mad reqm, mra, repm, rtu;

	printf("MRA, lost REP, lost RTU\n");
	ibcm_init(&a, 0x100);
	ibcm_init(&b, 0x200);
	req_params(&req);
	CHECK_EQ(ibcm_send_req(&a, &req, 5, now, &o), 0);
	reqm = wire(&o);
	CHECK_EQ(ibcm_recv(&b, &reqm, now, &p), 0);
	/* b needs time: MRA with service timeout 24 (~68.7 s) */
	CHECK_EQ(ibcm_send_mra(&b, 24, now, &p), 0);
	CHECK_EQ(b.state, IBCM_MRA_REQ_SENT);
	mra = wire(&p);
	CHECK_EQ(mra.mra.msg_mraed, SR_CM_MSG_REQ);
	CHECK_EQ(ibcm_recv(&a, &mra, now, &o), 0);
	CHECK_EQ(a.state, IBCM_MRA_REQ_RCVD);
	CHECK(a.deadline >= now + ibcm_timeout_ns(24));
	ibcm_timer(&a, now + ibcm_timeout_ns(20) + 100 * MS, &o);
	CHECK(!o.send);		/* no retransmission while the MRA holds */
	/* the REQ again (say a retransmission crossed the MRA): b answers with the MRA */
	CHECK_EQ(ibcm_recv(&b, &reqm, now, &p), 0);
	CHECK(p.send);
	CHECK_EQ(p.mad.hdr.attr_id, SR_CM_ATTR_MRA);
	/* the REP, and it is lost: a's duplicate REQ... a is in MRA_REQ_RCVD, it does not resend;
	 * b's own timer resends the REP */
	rep_params(&rep);
	CHECK_EQ(ibcm_send_rep(&b, &rep, now, &p), 0);
	repm = wire(&p);
	ibcm_timer(&b, b.deadline, &p);
	CHECK(p.send);
	CHECK_EQ(p.mad.hdr.attr_id, SR_CM_ATTR_REP);
	/* a duplicate REQ reaching b in REP_SENT is answered with the REP */
	CHECK_EQ(ibcm_recv(&b, &reqm, now, &p), 0);
	CHECK(p.send);
	CHECK_EQ(p.mad.hdr.attr_id, SR_CM_ATTR_REP);
	CHECK_EQ(ibcm_recv(&a, &repm, now, &o), 0);
	CHECK_EQ(o.event, IBCM_EV_REP);
	CHECK_EQ(ibcm_send_rtu(&a, NULL, now, &o), 0);
	rtu = wire(&o);
	/* the RTU lost: b's REP again reaches a in ESTABLISHED, which repeats the RTU */
	CHECK_EQ(ibcm_recv(&a, &repm, now, &o), 0);
	CHECK(o.send);
	CHECK_EQ(o.mad.hdr.attr_id, SR_CM_ATTR_RTU);
	CHECK_EQ(o.event, IBCM_EV_NONE);
	CHECK_EQ(ibcm_recv(&b, &rtu, now, &p), 0);
	CHECK_EQ(p.event, IBCM_EV_ESTABLISHED);
	/* a second RTU changes nothing */
	CHECK_EQ(ibcm_recv(&b, &rtu, now, &p), 0);
	CHECK(p.dropped);
	CHECK_EQ(b.state, IBCM_ESTABLISHED);
}

static void test_rej(void)
{
	struct ibcm_conn a, b;
	struct ibcm_out o, p;
	struct sr_cm_req req;
	struct sr_cm_mad m;
	static const uint8_t pd[] = "no thanks";

	printf("REJ\n");
	ibcm_init(&a, 0x300);
	ibcm_init(&b, 0x400);
	req_params(&req);
	CHECK_EQ(ibcm_send_req(&a, &req, 6, now, &o), 0);
	m = wire(&o);
	CHECK_EQ(ibcm_recv(&b, &m, now, &p), 0);
	CHECK_EQ(ibcm_send_rej(&b, SR_CM_REJ_CONSUMER_DEFINED, pd, sizeof(pd), now, &p), 0);
	CHECK_EQ(b.state, IBCM_IDLE);
	m = wire(&p);
	CHECK_EQ(ibcm_recv(&a, &m, now, &o), 0);
	CHECK_EQ(o.event, IBCM_EV_REJ);
	CHECK_EQ(o.reason, SR_CM_REJ_CONSUMER_DEFINED);
	CHECK(!memcmp(o.mad.rej.pdata, pd, sizeof(pd)));
	CHECK_EQ(a.state, IBCM_IDLE);
	CHECK_EQ(a.deadline, 0);
	/* too much private data */
	ibcm_init(&b, 0x401);
	CHECK_EQ(ibcm_recv(&b, &(struct sr_cm_mad){ .hdr.attr_id = SR_CM_ATTR_REQ }, now, &p), 0);
	CHECK_EQ(ibcm_send_rej(&b, 28, pd, SR_CM_REJ_PDATA + 1, now, &p), -EINVAL);
	CHECK_EQ(b.state, IBCM_REQ_RCVD);
}

static void test_wrong_ids_and_states(void)
{
	struct ibcm_conn a, b;
	struct ibcm_out o;
	struct sr_cm_req req;
	struct sr_cm_mad m;

	printf("wrong IDs and states\n");
	connect(&a, &b);
	/* an RTU naming another connection */
	memset(&m, 0, sizeof(m));
	m.hdr.attr_id = SR_CM_ATTR_DREQ;
	m.dreq.local_comm_id = b.local_id;
	m.dreq.remote_comm_id = a.local_id + 1;
	CHECK_EQ(ibcm_recv(&a, &m, now, &o), 0);
	CHECK(o.dropped);
	m.dreq.remote_comm_id = a.local_id;
	m.dreq.local_comm_id = b.local_id + 1;
	CHECK_EQ(ibcm_recv(&a, &m, now, &o), 0);
	CHECK(o.dropped);
	CHECK_EQ(a.state, IBCM_ESTABLISHED);
	/* a DREP nobody asked for, an MRA after the fact, LAP */
	m.hdr.attr_id = SR_CM_ATTR_DREP;
	m.drep.local_comm_id = b.local_id;
	m.drep.remote_comm_id = a.local_id;
	CHECK_EQ(ibcm_recv(&a, &m, now, &o), 0);
	CHECK(o.dropped);
	m.hdr.attr_id = SR_CM_ATTR_LAP;
	CHECK_EQ(ibcm_recv(&a, &m, now, &o), 0);
	CHECK(o.dropped);
	CHECK_EQ(a.state, IBCM_ESTABLISHED);
	/* calls the state does not allow */
	req_params(&req);
	CHECK_EQ(ibcm_send_req(&a, &req, 1, now, &o), -EINVAL);
	CHECK_EQ(ibcm_send_rtu(&a, NULL, now, &o), -EINVAL);
	CHECK_EQ(ibcm_send_drep(&a, NULL, now, &o), -EINVAL);
	CHECK_EQ(ibcm_send_mra(&a, 10, now, &o), -EINVAL);
	CHECK_EQ(ibcm_send_rej(&a, 28, NULL, 0, now, &o), -EINVAL);
	CHECK(!o.send);
	CHECK_EQ(a.state, IBCM_ESTABLISHED);
}

static void test_dreq_crossed_and_lost(void)
{
	struct ibcm_conn a, b;
	struct ibcm_out o, p;
	struct sr_cm_mad da, db;

	printf("crossed DREQs, unanswered DREQ\n");
	connect(&a, &b);
	CHECK_EQ(ibcm_send_dreq(&a, NULL, now, &o), 0);
	CHECK_EQ(ibcm_send_dreq(&b, NULL, now, &p), 0);
	da = wire(&o);
	db = wire(&p);
	CHECK_EQ(ibcm_recv(&a, &db, now, &o), 0);
	CHECK_EQ(o.event, IBCM_EV_DISCONNECTED);
	CHECK_EQ(o.mad.hdr.attr_id, SR_CM_ATTR_DREP);
	CHECK_EQ(a.state, IBCM_TIMEWAIT);
	CHECK_EQ(ibcm_recv(&b, &da, now, &p), 0);
	CHECK_EQ(p.event, IBCM_EV_DISCONNECTED);
	CHECK_EQ(b.state, IBCM_TIMEWAIT);

	connect(&a, &b);
	CHECK_EQ(ibcm_send_dreq(&a, NULL, now, &o), 0);
	for (int i = 0; i < 3; i++) {
		ibcm_timer(&a, a.deadline, &o);
		CHECK(o.send);
		CHECK_EQ(o.mad.hdr.attr_id, SR_CM_ATTR_DREQ);
	}
	ibcm_timer(&a, a.deadline, &o);
	CHECK(!o.send);
	CHECK_EQ(o.event, IBCM_EV_DISCONNECTED);
	CHECK_EQ(a.state, IBCM_TIMEWAIT);
}

static void test_rep_timeout(void)
{
	struct ibcm_conn a, b;
	struct ibcm_out o, p;
	struct sr_cm_req req;
	struct sr_cm_rep rep;
	struct sr_cm_mad m;

	printf("REP unanswered: REJ Timeout, TIMEWAIT\n");
	ibcm_init(&a, 0x500);
	ibcm_init(&b, 0x600);
	req_params(&req);
	req.local_cm_response_timeout = 10;	/* the requester answers within ~4.2 ms */
	CHECK_EQ(ibcm_send_req(&a, &req, 8, now, &o), 0);
	m = wire(&o);
	CHECK_EQ(ibcm_recv(&b, &m, now, &p), 0);
	rep_params(&rep);
	CHECK_EQ(ibcm_send_rep(&b, &rep, now, &p), 0);
	CHECK(b.deadline - now >= ibcm_timeout_ns(10));
	CHECK(b.deadline - now < ibcm_timeout_ns(20));
	for (int i = 0; i < 3; i++) {
		ibcm_timer(&b, b.deadline, &p);
		CHECK_EQ(p.mad.hdr.attr_id, SR_CM_ATTR_REP);
	}
	ibcm_timer(&b, b.deadline, &p);
	CHECK_EQ(p.event, IBCM_EV_TIMEOUT);
	CHECK_EQ(p.mad.hdr.attr_id, SR_CM_ATTR_REJ);
	CHECK_EQ(p.mad.rej.msg_rejected, SR_CM_MSG_REP);
	CHECK_EQ(b.state, IBCM_TIMEWAIT);
	m = wire(&p);
	CHECK_EQ(ibcm_recv(&a, &m, now, &o), 0);
	CHECK_EQ(o.event, IBCM_EV_REJ);
	CHECK_EQ(o.reason, SR_CM_REJ_TIMEOUT);
}

int main(void)
{
	sr_test_timeout(30);
	test_life();
	test_lost_req();
	test_mra_and_duplicates();
	test_rej();
	test_wrong_ids_and_states();
	test_dreq_crossed_and_lost();
	test_rep_timeout();
	return sr_test_done("test_ibcm");
}
