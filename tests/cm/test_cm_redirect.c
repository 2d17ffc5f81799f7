/* SPDX-License-Identifier: MIT */
/*
 * A hostile port and CM redirect (REJ reason 24, docs/cm.md "Several processes on one
 * address"): what an rdma_cm requester over the IB CM follows and what it refuses. Two child
 * processes sit on one fixed address (SOFTRDMA_ADDR, a 127/8 address of this test's own): the
 * first owns UDP 4791 there and plays the listener of port P (its UDP socket answers the
 * requester's QP1 QUERY with its QP1's GID, docs/cm.md "Loopback"), the second's device is on
 * another UDP port. Both answer REQs on their QP1 (src/cm/ibcm/agent.c) with scripted REJs.
 * The parent connects to P with rdma_connect, once per case:
 *
 *   bad QP       RedirectQP 2                          refused: REJECTED, status 24
 *   bad Q_Key    RedirectQ_Key 0x1234                  refused
 *   elsewhere    RedirectGID of another address        refused
 *   itself       RedirectGID the GID the REQ went to   refused (a loop)
 *   short        72 bytes right, reject info length 40 refused
 *   loop         a valid redirect to the second child, whose REJ 24 points back at the
 *                first: followed once (the second child gets the REQ), then refused
 *   follow       a valid redirect to the second child, then a stale REJ 24 from the first
 *                (to yet another port): the stale one is ignored, and the second child's
 *                own REJ (consumer defined, 28) is what the application sees
 *
 * The parent's counters (cm_redirects_followed / _refused) and the REQs each child saw are
 * checked too. Runs with SOFTRDMA_CM_WIRE=ibcm (set here).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "sr_test.h"
#include "verbs_util.h"

/* The private datagram codec (the QP1 QUERY / REPLY) and the MAD agent, compiled in. */
#include "../../src/cm/proto.c"
#include "../../src/cm/ibcm/agent.c"

enum { C_BAD_QP, C_BAD_QKEY, C_ELSEWHERE, C_ITSELF, C_SHORT, C_LOOP, C_FOLLOW, C_CASES };
static const char *const case_name[C_CASES] = {
	"bad QP", "bad Q_Key", "elsewhere", "itself", "short", "loop", "follow",
};

static struct sockaddr_in addr;		/* the children's address, port P */
static union ibv_gid gid1, gid2;	/* the children's QP1 GIDs */

/* A REJ of a REQ (MessageRejected REQ), answering `req`, with reason and a ClassPortInfo
 * redirecting to `to` (REJ 24), spoiled as `how` says. */
static void rej(struct ibcm_agent *a, struct ibv_ah *ah, const struct sr_cm_mad *req,
		uint16_t reason, const union ibv_gid *to, int how)
{
	struct sr_class_port_info c = {
		.base_version = 1, .class_version = 2, .resp_time_value = 16,
		.redirect_pkey = SR_DEFAULT_PKEY, .redirect_qp = SR_GSI_QPN,
		.redirect_qkey = SR_GSI_QKEY,
	};
	struct sr_cm_mad m;

	memset(&m, 0, sizeof(m));
	m.hdr = req->hdr;
	m.hdr.attr_id = SR_CM_ATTR_REJ;
	m.rej.local_comm_id = 0x5151;
	m.rej.remote_comm_id = req->req.local_comm_id;
	m.rej.msg_rejected = SR_CM_MSG_REQ;
	m.rej.reason = reason;
	if (reason == SR_CM_REJ_PORT_CM_REDIRECT) {
		memcpy(c.redirect_gid, to->raw, 16);
		if (how == C_BAD_QP)
			c.redirect_qp = 2;
		if (how == C_BAD_QKEY)
			c.redirect_qkey = 0x1234;
		m.rej.ari_len = how == C_SHORT ? 40 : SR_CLASS_PORT_INFO_LEN;
		sr_class_port_info_encode(&c, m.rej.ari);
	}
	CHECK_EQ(ibcm_agent_send(a, ah, &m), 0);
}

/* ---- the children ---------------------------------------------------------------------------- */
struct child_arg {
	int role;	/* 1: owns 4791, the listener's socket; 2: the other process */
};

/* One child: its QP1 answers REQs by script (the case is the parent's REQ number, told over
 * the socketpair before each connect); the first also answers QP1 QUERYs on port P. At the
 * end it sends the number of distinct REQs it saw per case. */
static int child(int sock, void *argp)
{
	const struct child_arg *arg = argp;
	struct vu_dev dev;
	struct ibcm_agent a;
	int lsock = -1, cas = -1;
	uint32_t last_comm = 0;
	uint8_t seen[C_CASES] = { 0 };
	char ip[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
	setenv("SOFTRDMA_ADDR", ip, 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(ibcm_agent_open(&a, dev.ctx) == 0);
	if (arg->role == 1) {
		lsock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		REQUIRE(lsock >= 0);
		REQUIRE(bind(lsock, (struct sockaddr *)&addr, sizeof(addr)) == 0);
	}
	REQUIRE(vu_sock_send(sock, &dev.gid, sizeof(dev.gid)) == 0);
	if (arg->role == 1)	/* the second child's, once it is there (it forks after us) */
		REQUIRE(vu_sock_recv(sock, &gid2, sizeof(gid2)) == 0);
	for (;;) {
		struct pollfd p[2] = { { .fd = sock, .events = POLLIN }, { .fd = lsock, .events = POLLIN } };
		struct ibcm_rx rx;
		int8_t c;

		if (poll(p, 2, 0) > 0) {
			if (p[0].revents) {
				if (vu_sock_recv(sock, &c, 1) || c < 0)
					break;	/* the parent is done */
				cas = c;
			}
			if (p[1].revents & POLLIN) {
				/* The requester's QUERY: where is the QP1 of port P's listener? */
				uint8_t b[CM_MSG_MAX];
				struct sockaddr_in from;
				socklen_t fl = sizeof(from);
				ssize_t n = recvfrom(lsock, b, sizeof(b), 0, (struct sockaddr *)&from, &fl);
				struct cm_msg q, r;

				if (n > 0 && !cm_msg_decode(&q, b, (size_t)n) && q.type == CM_MSG_QP1_QUERY) {
					memset(&r, 0, sizeof(r));
					r.type = CM_MSG_QP1_REPLY;
					r.dst_id = q.src_id;
					r.ps = q.ps;
					r.src_port = q.dst_port;
					r.gid = dev.gid;
					n = cm_msg_encode(&r, b, sizeof(b));
					REQUIRE(n > 0);
					sendto(lsock, b, (size_t)n, 0, (struct sockaddr *)&from, fl);
				}
			}
		}
		if (ibcm_agent_recv(&a, &rx, 10) != 1)
			continue;
		if (rx.mad.hdr.attr_id == SR_CM_ATTR_REQ && cas >= 0 && cas < C_CASES) {
			bool fresh = rx.mad.req.local_comm_id != last_comm || !seen[cas];

			if (fresh)
				seen[cas]++;
			last_comm = rx.mad.req.local_comm_id;
			if (arg->role == 2) {
				/* loop: back to the first child; follow: the consumer's own REJ */
				if (fresh && cas == C_FOLLOW)
					usleep(150000);	/* the first child's stale REJ comes first */
				rej(&a, rx.ah, &rx.mad,
				    cas == C_LOOP ? SR_CM_REJ_PORT_CM_REDIRECT : SR_CM_REJ_CONSUMER_DEFINED,
				    &gid1, cas);
			} else {
				union ibv_gid to = gid2;

				if (cas == C_ELSEWHERE)
					to.raw[15] ^= 1;	/* another address */
				if (cas == C_ITSELF)
					to = dev.gid;
				rej(&a, rx.ah, &rx.mad, SR_CM_REJ_PORT_CM_REDIRECT, &to, cas);
				if (cas == C_FOLLOW && fresh) {
					/* a stale answer of this hop, once the requester moved on */
					usleep(50000);
					to.raw[8] ^= 0x40;	/* another port */
					rej(&a, rx.ah, &rx.mad, SR_CM_REJ_PORT_CM_REDIRECT, &to, cas);
				}
			}
		}
		if (rx.ah)
			ibv_destroy_ah(rx.ah);
	}
	REQUIRE(vu_sock_send(sock, seen, sizeof(seen)) == 0);
	ibcm_agent_close(&a);
	if (lsock >= 0)
		close(lsock);
	vu_close(&dev);
	return sr_test_failures ? 1 : 0;
}

/* The second child forks once the parent has the first one's GID (its copy of gid1); the
 * first child is sent the second's GID over its socketpair. */
static struct child_arg arg1 = { 1 }, arg2 = { 2 };

/* ---- the parent -------------------------------------------------------------------------------- */
static struct rdma_event_channel *ch;

/* A counter of this process's device (0 before the device has its counter file). */
static int64_t counter(const char *name)
{
	int64_t v = vu_stat(name);

	return v < 0 ? 0 : v;
}

static struct rdma_cm_event *next_event(int timeout_ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&p, 1, timeout_ms) != 1)
		return NULL;
	REQUIRE(rdma_get_cm_event(ch, &ev) == 0);
	return ev;
}

/* rdma_connect to the children's address, port P; the event it ends with, and its status. */
static enum rdma_cm_event_type connect_once(int *status)
{
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC, .cap = { .max_send_wr = 4,
				       .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 3, .rnr_retry_count = 3 };
	enum rdma_cm_event_type t = RDMA_CM_EVENT_CONNECT_ERROR;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;

	*status = 0;
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&addr, 2000) == 0);
	ev = next_event(5000);
	REQUIRE(ev && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_resolve_route(id, 2000) == 0);
	ev = next_event(5000);
	REQUIRE(ev && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_create_qp(id, NULL, &qa) == 0);
	REQUIRE(rdma_connect(id, &cp) == 0);
	ev = next_event(15000);
	if (ev) {
		t = ev->event;
		*status = ev->status;
		rdma_ack_cm_event(ev);
	} else {
		SR_FAIL("no event within 15 s of rdma_connect");
	}
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	return t;
}

int main(void)
{
	struct vu_child c1, c2;
	uint8_t seen1[C_CASES], seen2[C_CASES];
	int64_t followed0, refused0;
	int8_t end = -1;

	sr_test_timeout(180);
	setenv("SOFTRDMA_CM_WIRE", "ibcm", 1);
	/* An address of 127/8 of this test's own (the children's devices and the listener). */
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(0x7f5b0000u | ((uint32_t)getpid() % 250u + 1u) << 8 | 61u);
	addr.sin_port = htons((uint16_t)(20000 + getpid() % 20000));

	REQUIRE(vu_fork(&c1, child, &arg1, 150) == 0);
	REQUIRE(vu_sock_recv(c1.sock, &gid1, sizeof(gid1)) == 0);
	REQUIRE(vu_fork(&c2, child, &arg2, 150) == 0);
	REQUIRE(vu_sock_recv(c2.sock, &gid2, sizeof(gid2)) == 0);
	REQUIRE(vu_sock_send(c1.sock, &gid2, sizeof(gid2)) == 0);
	CHECK(!memcmp(gid1.raw + 10, "\xff\xff", 2) && !memcmp(gid1.raw + 8, "\0\0", 2));
	CHECK(!memcmp(gid1.raw + 12, gid2.raw + 12, 4));	/* one address */
	CHECK(memcmp(gid2.raw + 8, "\0\0", 2) != 0);		/* the second on another port */
	printf("children: QP1s at GIDs ...%02x%02x:ffff:%d.%d.%d.%d and ...%02x%02x:ffff:same\n",
	       gid1.raw[8], gid1.raw[9], gid1.raw[12], gid1.raw[13], gid1.raw[14], gid1.raw[15],
	       gid2.raw[8], gid2.raw[9]);

	ch = rdma_create_event_channel();
	REQUIRE(ch);
	followed0 = counter("cm_redirects_followed");
	refused0 = counter("cm_redirects_refused");
	for (int8_t k = 0; k < C_CASES; k++) {
		int status;
		enum rdma_cm_event_type t;
		int64_t f0 = counter("cm_redirects_followed"), r0 = counter("cm_redirects_refused");

		REQUIRE(vu_sock_send(c1.sock, &k, 1) == 0);
		REQUIRE(vu_sock_send(c2.sock, &k, 1) == 0);
		usleep(20000);	/* the children have read the case */
		t = connect_once(&status);
		printf("%-10s %s, status %d; redirects followed %lld, refused %lld\n", case_name[k],
		       rdma_event_str(t), status,
		       (long long)(counter("cm_redirects_followed") - f0),
		       (long long)(counter("cm_redirects_refused") - r0));
		CHECK_EQ(t, RDMA_CM_EVENT_REJECTED);
		if (k == C_FOLLOW) {
			CHECK_EQ(status, SR_CM_REJ_CONSUMER_DEFINED);	/* the second child's */
			CHECK_EQ(counter("cm_redirects_followed") - f0, 1);
			CHECK_EQ(counter("cm_redirects_refused") - r0, 0);
		} else {
			CHECK_EQ(status, SR_CM_REJ_PORT_CM_REDIRECT);
			CHECK_EQ(counter("cm_redirects_followed") - f0, (k == C_LOOP ? 1 : 0));
			CHECK_EQ(counter("cm_redirects_refused") - r0, 1);
		}
	}
	CHECK_EQ(counter("cm_redirects_followed") - followed0, 2);
	CHECK_EQ(counter("cm_redirects_refused") - refused0, C_CASES - 1);

	REQUIRE(vu_sock_send(c1.sock, &end, 1) == 0);
	REQUIRE(vu_sock_send(c2.sock, &end, 1) == 0);
	REQUIRE(vu_sock_recv(c1.sock, seen1, sizeof(seen1)) == 0);
	REQUIRE(vu_sock_recv(c2.sock, seen2, sizeof(seen2)) == 0);
	for (int k = 0; k < C_CASES; k++) {
		/* every REQ went to the first child once; only the followed ones to the second */
		CHECK_EQ(seen1[k], 1);
		CHECK_EQ(seen2[k], k == C_LOOP || k == C_FOLLOW ? 1 : 0);
	}
	CHECK_EQ(vu_child_wait(&c1, 30), 0);
	CHECK_EQ(vu_child_wait(&c2, 30), 0);
	rdma_destroy_event_channel(ch);
	return sr_test_done("test_cm_redirect");
}
