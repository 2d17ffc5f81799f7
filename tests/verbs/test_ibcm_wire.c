// SPDX-License-Identifier: MIT
/*
 * The IB CM between two softrdma processes of one host, on the wire: each opens its device's
 * QP1 through the CM's MAD agent (src/cm/ibcm/agent.c) and runs the connection state machine
 * (src/cm/ibcm/ibcm.c) over it. The parent connects (REQ), the child accepts (REP), the parent
 * confirms (RTU), then disconnects (DREQ/DREP): both ends must go through ESTABLISHED to
 * TIMEWAIT, with the IDs, QPNs and PSNs each side sent arriving intact, from source QP 1.
 * Lost messages are retransmitted by the state machine's timer (the loop calls it): CTest runs
 * this again with 20 % of packets dropped (verbs/test_ibcm_wire.lossy). Also: a second agent
 * on one device is EBUSY. (Not yet what librdmacm uses: docs/cm.md.)
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "cm/ibcm/agent.h"
#include "cm/ibcm/ibcm.h"

static struct vu_dev dev;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sends what the state machine put out (to ah). */
static void out_send(struct ibcm_agent *a, struct ibv_ah *ah, const struct ibcm_out *o)
{
	if (o->send)
		CHECK_EQ(ibcm_agent_send(a, ah, &o->mad), 0);
}

/*
 * Runs c until `want` is reported: receives (answering with what the state machine says) and
 * fires its timer. Returns the event, or IBCM_EV_NONE after 10 s. *reply_ah: the AH of the
 * last sender (kept for the consumer's own answers).
 */
static int resent;	/* timer retransmissions (a lossy run has some) */

static enum ibcm_event run_until2(struct ibcm_agent *a, struct ibcm_conn *c, struct ibv_ah **ah,
				  enum ibcm_event want, enum ibcm_event also,
				  struct sr_cm_mad *last)
{
	uint64_t end = now_ns() + 10000000000ull;

	while (now_ns() < end) {
		struct ibcm_rx rx;
		struct ibcm_out o;
		int n = ibcm_agent_recv(a, &rx, 20);

		REQUIRE(n >= 0);
		if (n == 1) {
			CHECK_EQ(rx.src_qp, SR_GSI_QPN);
			if (*ah)
				ibv_destroy_ah(*ah);
			*ah = rx.ah;
			ibcm_recv(c, &rx.mad, now_ns(), &o);
			out_send(a, *ah, &o);
			if (o.event == want || (also && o.event == also)) {
				*last = rx.mad;
				return o.event;
			}
			CHECK_EQ(o.event, IBCM_EV_NONE);
		}
		if (c->deadline && now_ns() >= c->deadline) {
			struct ibcm_out o;

			ibcm_timer(c, now_ns(), &o);
			out_send(a, *ah, &o);
			resent += o.send;
			if (o.event == want)
				return want;
			CHECK_EQ(o.event, IBCM_EV_NONE);
		}
	}
	return IBCM_EV_NONE;
}

static enum ibcm_event run_until(struct ibcm_agent *a, struct ibcm_conn *c, struct ibv_ah **ah,
				 enum ibcm_event want, struct sr_cm_mad *last)
{
	return run_until2(a, c, ah, want, IBCM_EV_NONE, last);
}

static void req_params(struct sr_cm_req *r)
{
	memset(r, 0, sizeof(*r));
	r->service_id = sr_cm_service_id(0x0106, 7174);
	r->local_qpn = 0x123456;
	r->starting_psn = 0xabcdef;
	r->remote_cm_response_timeout = 16;	/* 268 ms */
	r->local_cm_response_timeout = 16;
	r->max_cm_retries = 15;
	r->retry_count = 7;
	r->rnr_retry_count = 7;
	r->pkey = SR_DEFAULT_PKEY;
	r->path_mtu = IBV_MTU_1024;
}

static int child(int sock, void *arg)
{
	struct ibcm_agent a;
	struct ibcm_conn c;
	struct ibcm_out o;
	struct ibv_ah *ah = NULL;
	struct sr_cm_mad m;
	struct sr_cm_rep rep;
	enum ibcm_event ev;
	uint8_t ok = 0;

	(void)arg;
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(ibcm_agent_open(&a, dev.ctx) == 0);
	REQUIRE(vu_sock_send(sock, &dev.gid, sizeof(dev.gid)) == 0);
	ibcm_init(&c, 0x2222);
	c.pkt_life_ns = 1000000;
	c.timewait_ns = 10000000;
	REQUIRE(run_until(&a, &c, &ah, IBCM_EV_REQ, &m) == IBCM_EV_REQ);
	CHECK_EQ(m.req.local_comm_id, 0x1111);
	CHECK_EQ(m.req.local_qpn, 0x123456);
	CHECK_EQ(m.req.starting_psn, 0xabcdef);
	CHECK_EQ(c.state, IBCM_REQ_RCVD);
	memset(&rep, 0, sizeof(rep));
	rep.local_qpn = 0x654321;
	rep.starting_psn = 0xfedcba;
	rep.rnr_retry_count = 7;
	strcpy((char *)rep.pdata, "accepted");
	CHECK_EQ(ibcm_send_rep(&c, &rep, now_ns(), &o), 0);
	out_send(&a, ah, &o);
	/* the RTU, or (RTU lost, the parent already disconnecting) its DREQ: IBA 12.9 takes a
	 * DREQ in REP_SENT as the connection's use and end */
	ev = run_until2(&a, &c, &ah, IBCM_EV_ESTABLISHED, IBCM_EV_DREQ, &m);
	REQUIRE(ev == IBCM_EV_ESTABLISHED || ev == IBCM_EV_DREQ);
	if (ev == IBCM_EV_ESTABLISHED) {
		CHECK_EQ(c.state, IBCM_ESTABLISHED);
		REQUIRE(run_until(&a, &c, &ah, IBCM_EV_DREQ, &m) == IBCM_EV_DREQ);
	}
	CHECK_EQ(m.dreq.remote_qpn, 0x654321);
	CHECK_EQ(ibcm_send_drep(&c, NULL, now_ns(), &o), 0);
	out_send(&a, ah, &o);
	CHECK_EQ(c.state, IBCM_TIMEWAIT);
	/* stay a while in TIMEWAIT: a repeated DREQ (our DREP lost) is answered again */
	ok = sr_test_failures == 0;
	vu_sock_send(sock, &ok, 1);
	for (int i = 0; i < 50; i++) {
		struct ibcm_rx rx;

		if (ibcm_agent_recv(&a, &rx, 20) == 1) {
			ibcm_recv(&c, &rx.mad, now_ns(), &o);
			out_send(&a, rx.ah, &o);
			ibv_destroy_ah(rx.ah);
		}
	}
	vu_sock_recv(sock, &ok, 1);	/* the parent is done: our QP1 may go */
	if (ah)
		ibv_destroy_ah(ah);
	ibcm_agent_close(&a);
	vu_close(&dev);
	return sr_test_failures ? 1 : 0;
}

int main(void)
{
	struct vu_child ch;
	struct ibcm_agent a, b;
	struct ibcm_conn c;
	struct ibcm_out o;
	struct ibv_ah *ah;
	struct sr_cm_req req;
	struct sr_cm_mad m;
	union ibv_gid peer;
	uint8_t ok = 0;

	sr_test_timeout(120);
	REQUIRE(vu_fork(&ch, child, NULL, 60) == 0);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(ibcm_agent_open(&a, dev.ctx) == 0);
	CHECK_EQ(a.qp->qp_num, SR_GSI_QPN);
	CHECK_EQ(ibcm_agent_open(&b, dev.ctx), -EBUSY);
	REQUIRE(vu_sock_recv(ch.sock, &peer, sizeof(peer)) == 0);
	CHECK(memcmp(&peer, &dev.gid, sizeof(peer)) != 0);

	printf("REQ, REP, RTU between the QP1s of two processes\n");
	ah = ibcm_agent_ah(&a, &peer);
	REQUIRE(ah);
	ibcm_init(&c, 0x1111);
	c.pkt_life_ns = 1000000;
	c.timewait_ns = 10000000;
	req_params(&req);
	CHECK_EQ(ibcm_send_req(&c, &req, 0x77ull << 32 | 0x1111, now_ns(), &o), 0);
	out_send(&a, ah, &o);
	REQUIRE(run_until(&a, &c, &ah, IBCM_EV_REP, &m) == IBCM_EV_REP);
	CHECK_EQ(m.hdr.tid, 0x77ull << 32 | 0x1111);
	CHECK_EQ(m.rep.remote_comm_id, 0x1111);
	CHECK_EQ(m.rep.local_comm_id, 0x2222);
	CHECK_EQ(m.rep.local_qpn, 0x654321);
	CHECK(!strcmp((const char *)m.rep.pdata, "accepted"));
	CHECK_EQ(ibcm_send_rtu(&c, NULL, now_ns(), &o), 0);
	out_send(&a, ah, &o);
	CHECK_EQ(c.state, IBCM_ESTABLISHED);

	printf("DREQ, DREP\n");
	CHECK_EQ(ibcm_send_dreq(&c, NULL, now_ns(), &o), 0);
	out_send(&a, ah, &o);
	REQUIRE(run_until(&a, &c, &ah, IBCM_EV_DISCONNECTED, &m) == IBCM_EV_DISCONNECTED);
	CHECK_EQ(c.state, IBCM_TIMEWAIT);
	CHECK_EQ(a.dropped, 0);
	CHECK_EQ(vu_sock_recv(ch.sock, &ok, 1), 0);
	CHECK(ok);
	vu_sock_send(ch.sock, &ok, 1);
	CHECK_EQ(vu_child_wait(&ch, 60), 0);
	printf("retransmitted by the parent's timer: %d\n", resent);
	ibv_destroy_ah(ah);
	ibcm_agent_close(&a);
	vu_close(&dev);
	return sr_test_done("test_ibcm_wire");
}
