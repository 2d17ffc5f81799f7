/* SPDX-License-Identifier: MIT */
/* Shared steps of the rdma_cm tests (cm_util.h). */
#include "cm_util.h"

#include <arpa/inet.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_verbs.h>

#include "sr_test.h"

struct rdma_cm_event *cm_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type,
				int timeout_ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&p, 1, timeout_ms) != 1) {
		SR_FAIL("no event within %d ms (expected %s)", timeout_ms, rdma_event_str(type));
		return NULL;
	}
	REQUIRE(rdma_get_cm_event(ch, &ev) == 0);
	if (ev->event != type) {
		SR_FAIL("got %s (status %d), expected %s", rdma_event_str(ev->event), ev->status,
			rdma_event_str(type));
		rdma_ack_cm_event(ev);
		return NULL;
	}
	return ev;
}

struct sockaddr_in cm_ip4(const char *ip, uint16_t port_be)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = port_be };

	REQUIRE(inet_pton(AF_INET, ip, &a.sin_addr) == 1);
	return a;
}

struct rdma_cm_id *cm_client(struct rdma_event_channel *ch, enum rdma_port_space ps,
			     const char *ip, uint16_t port_be)
{
	struct sockaddr_in dst = cm_ip4(ip, port_be);
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;

	REQUIRE(rdma_create_id(ch, &id, NULL, ps) == 0);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 2000);
	REQUIRE(ev);
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_resolve_route(id, 2000) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 2000);
	REQUIRE(ev);
	rdma_ack_cm_event(ev);
	return id;
}

void cm_make_qp(struct rdma_cm_id *id, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = { .qp_type = t,
				      .cap = { .max_send_wr = 8, .max_recv_wr = 8,
					       .max_send_sge = 1, .max_recv_sge = 1 } };

	REQUIRE(rdma_create_qp(id, NULL, &a) == 0);
}

struct rdma_cm_id *cm_connect_accept(struct rdma_event_channel *ch, struct rdma_cm_id *c,
				     enum ibv_qp_type t, struct rdma_conn_param *p,
				     int req_timeout_ms)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_id *s;

	REQUIRE(rdma_connect(c, p) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, req_timeout_ms);
	REQUIRE(ev);
	s = ev->id;
	rdma_ack_cm_event(ev);
	cm_make_qp(s, t);
	REQUIRE(rdma_accept(s, p) == 0);
	return s;
}

void cm_connect_and_send(struct rdma_event_channel *ch, const char *ip, uint16_t port_be,
			 struct rdma_cm_id *late)
{
	struct rdma_conn_param p = { .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_id *c = cm_client(ch, RDMA_PS_TCP, ip, port_be), *s;
	struct rdma_cm_event *ev;
	char sbuf[64] = "through the bound port", rbuf[64] = "";
	struct ibv_mr *smr, *rmr;
	struct ibv_wc wc;

	/* Resolved: the device's default PD, shared with the listener's side (one device). */
	CHECK(c->pd && c->pd->context == c->verbs);
	cm_make_qp(c, IBV_QPT_RC);
	CHECK(c->qp->pd == c->pd);
	REQUIRE(rdma_connect(c, &p) == 0);
	if (late) {
		usleep(20000);	/* the REQ is there before the listener */
		REQUIRE(rdma_listen(late, 4) == 0);
		CHECK_EQ(rdma_get_src_port(late), port_be);
	}
	ev = cm_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 3000);
	REQUIRE(ev);
	s = ev->id;
	rdma_ack_cm_event(ev);
	CHECK(s->pd && s->pd->context == s->verbs);
	CHECK(s->pd == c->pd);
	{
		/* An AH on it (pyverbs's UD rdma_cm test does this before any QP exists). */
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
		struct ibv_ah *ah;

		REQUIRE(ibv_query_gid(s->verbs, 1, 0, &aa.grh.dgid) == 0);
		ah = s->pd ? ibv_create_ah(s->pd, &aa) : NULL;
		CHECK(ah);
		if (ah)
			ibv_destroy_ah(ah);
	}
	cm_make_qp(s, IBV_QPT_RC);
	rmr = rdma_reg_msgs(s, rbuf, sizeof(rbuf));
	REQUIRE(rmr);
	REQUIRE(rdma_post_recv(s, NULL, rbuf, sizeof(rbuf), rmr) == 0);
	REQUIRE(rdma_accept(s, &p) == 0);
	for (int k = 0; k < 2; k++) {
		ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
		REQUIRE(ev);
		rdma_ack_cm_event(ev);
	}
	smr = rdma_reg_msgs(c, sbuf, sizeof(sbuf));
	REQUIRE(smr);
	REQUIRE(rdma_post_send(c, NULL, sbuf, sizeof(sbuf), smr, IBV_SEND_SIGNALED) == 0);
	CHECK_EQ(rdma_get_send_comp(c, &wc), 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(rdma_get_recv_comp(s, &wc), 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK(!strcmp(rbuf, sbuf));
	rdma_dereg_mr(smr);
	rdma_dereg_mr(rmr);
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	rdma_destroy_id(c);
	rdma_destroy_id(s);
}
