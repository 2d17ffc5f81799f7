/* SPDX-License-Identifier: MIT */
/*
 * Hostile CM input, sent from a raw UDP socket of the test to a live listener: truncated
 * datagrams, wrong magic, another version, unknown types, private data longer than its type
 * allows, a REQ naming another host's GID, a replayed REQ, messages for connections that do
 * not exist. Every one is dropped or rejected and counted (softrdma stat, cm_*); none crashes
 * the listener, none creates a connection (no CONNECT_REQUEST but for the one valid REQ, and
 * that one only once); a real connection works afterwards.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "sr_test.h"
#include "verbs_util.h"

/* The protocol's encoder, compiled in: the test speaks the real wire format. */
#include "../../src/cm/proto.c"

static struct rdma_event_channel *ch;
static int raw;
static struct sockaddr_in lsn;

static void send_raw(const void *b, size_t n)
{
	sendto(raw, b, n, 0, (struct sockaddr *)&lsn, sizeof(lsn));
}

static int send_msg(const struct cm_msg *m)
{
	uint8_t b[CM_MSG_MAX];
	int n = cm_msg_encode(m, b, sizeof(b));

	if (n > 0)
		send_raw(b, (size_t)n);
	return n;
}

/* Events that arrive within ms, each acked; returns how many were CONNECT_REQUESTs. */
static int drain(int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	int reqs = 0;

	while (poll(&p, 1, ms) == 1) {
		struct rdma_cm_event *ev;

		if (rdma_get_cm_event(ch, &ev))
			break;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct rdma_cm_id *id = ev->id;

			reqs++;
			rdma_ack_cm_event(ev);
			rdma_reject(id, NULL, 0);
			rdma_destroy_id(id);
		} else {
			rdma_ack_cm_event(ev);
		}
	}
	return reqs;
}

static struct cm_msg base_req(uint16_t port)
{
	struct cm_msg m = { .type = CM_MSG_REQ, .src_id = 0x1234567, .ps = RDMA_PS_TCP,
			    .src_port = 40000, .dst_port = port, .qpn = 0x123, .psn = 7,
			    .mtu = IBV_MTU_1024, .retry_count = 7, .rnr_retry_count = 7 };

	m.gid.raw[10] = m.gid.raw[11] = 0xff;
	m.gid.raw[12] = 127;
	m.gid.raw[15] = 1;
	return m;
}

int main(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct rdma_cm_id *listen;
	uint8_t buf[CM_MSG_MAX];
	int64_t malformed0, unknown0, rejects0;

	sr_test_timeout(60);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ch = rdma_create_event_channel();
	REQUIRE(ch);
	REQUIRE(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(listen, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_listen(listen, 8) == 0);
	lsn = a;
	lsn.sin_port = rdma_get_src_port(listen);
	uint16_t port = ntohs(lsn.sin_port);

	raw = socket(AF_INET, SOCK_DGRAM, 0);
	REQUIRE(raw >= 0);
	malformed0 = vu_stat("cm_drop_malformed");
	unknown0 = vu_stat("cm_drop_unknown");
	rejects0 = vu_stat("cm_rejects_sent");
	REQUIRE(malformed0 >= 0 && unknown0 >= 0 && rejects0 >= 0);

	/* 1. Malformed: 6 datagrams, each dropped and counted. */
	struct cm_msg m = base_req(port);
	int n = cm_msg_encode(&m, buf, sizeof(buf));

	REQUIRE(n > 0);
	send_raw(buf, 10);				/* truncated */
	send_raw(buf, (size_t)n - 1);			/* length disagrees with the header */
	buf[0] = 'X';
	send_raw(buf, (size_t)n);			/* wrong magic */
	buf[0] = 'S';
	buf[2] = 9;
	send_raw(buf, (size_t)n);			/* another version */
	buf[2] = CM_PROTO_VERSION;
	buf[3] = 99;
	send_raw(buf, (size_t)n);			/* unknown type */
	buf[3] = CM_MSG_REQ;
	buf[18] = 100;					/* 100 bytes of private data in a REQ */
	uint8_t big[CM_MSG_MAX + 100];

	memcpy(big, buf, (size_t)n);
	memset(big + n, 0xab, 100);
	send_raw(big, (size_t)n + 100);
	CHECK_EQ(drain(300), 0);
	CHECK_EQ(vu_stat("cm_drop_malformed") - malformed0, 6);

	/* 2. A REQ naming another host's GID: rejected, no connection. */
	m = base_req(port);
	m.gid.raw[12] = 10;	/* ::ffff:10.0.0.1, not where this datagram comes from */
	m.gid.raw[15] = 1;
	send_msg(&m);
	CHECK_EQ(drain(300), 0);
	CHECK_EQ(vu_stat("cm_rejects_sent") - rejects0, 1);
	struct pollfd rp = { .fd = raw, .events = POLLIN };

	CHECK(poll(&rp, 1, 1000) == 1);	/* the REJ came back */
	n = (int)recv(raw, buf, sizeof(buf), 0);
	struct cm_msg r;

	CHECK(n > 0 && cm_msg_decode(&r, buf, (size_t)n) == 0 && r.type == CM_MSG_REJ &&
	      r.dst_id == m.src_id);

	/* 3. A valid REQ sent three times: one CONNECT_REQUEST. */
	m = base_req(port);
	m.src_id = 0x7654321;
	send_msg(&m);
	send_msg(&m);
	send_msg(&m);
	CHECK_EQ(drain(500), 1);

	/* 4. Messages for connections that do not exist: ignored, counted. */
	int64_t u1 = vu_stat("cm_drop_unknown");
	uint8_t types[] = { CM_MSG_REP, CM_MSG_RTU, CM_MSG_DREQ, CM_MSG_DREP, CM_MSG_PROBE };

	for (size_t i = 0; i < sizeof(types); i++) {
		struct cm_msg x = base_req(port);

		x.type = types[i];
		x.dst_id = 0xdeadbeef;
		x.src_id = 0x1111;
		send_msg(&x);
	}
	CHECK_EQ(drain(300), 0);
	CHECK_EQ(vu_stat("cm_drop_unknown") - u1, 5);

	/* 5. The listener still works: a real connection from another id. */
	struct rdma_cm_id *c;
	struct rdma_cm_event *ev;
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	REQUIRE(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(c, NULL, (struct sockaddr *)&lsn, 2000) == 0);
	REQUIRE(poll(&p, 1, 2000) == 1 && rdma_get_cm_event(ch, &ev) == 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_resolve_route(c, 2000) == 0);
	REQUIRE(poll(&p, 1, 2000) == 1 && rdma_get_cm_event(ch, &ev) == 0);
	rdma_ack_cm_event(ev);
	struct rdma_conn_param cp = { .retry_count = 7 };

	REQUIRE(rdma_connect(c, &cp) == 0);
	REQUIRE(poll(&p, 1, 2000) == 1 && rdma_get_cm_event(ch, &ev) == 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *s = ev->id;

	rdma_ack_cm_event(ev);
	REQUIRE(rdma_accept(s, NULL) == 0);
	/* No QP on the client id: CONNECT_RESPONSE, then rdma_establish() sends the RTU that
	 * establishes the server side (rdma_establish(3)). */
	REQUIRE(poll(&p, 1, 2000) == 1 && rdma_get_cm_event(ch, &ev) == 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(ev->id == c);
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_establish(c) == 0);
	REQUIRE(poll(&p, 1, 2000) == 1 && rdma_get_cm_event(ch, &ev) == 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->id == s);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(c);
	rdma_destroy_id(s);
	drain(200);
	rdma_destroy_id(listen);
	rdma_destroy_event_channel(ch);
	close(raw);
	return sr_test_done("test_cm_hostile");
}
