/* SPDX-License-Identifier: MIT */
/*
 * The GID index rdma_cm reports on a device off UDP 4791 (docs/gid.md, "The LID carries the
 * port"): this test holds 4791 on a 127/8 address of its own with a plain socket, as another
 * process would, then uses rdma_cm there (SOFTRDMA_ADDR), so the device takes another port and
 * has two GIDs: 0 the address, 1 the GID naming its port, which the CM sends its peers
 * (route.path_rec->sgid). Wherever the CM fills an address vector, its sgid_index is 1, the
 * GID it really uses:
 *
 *   RC      rdma_init_qp_attr at RTR, and ibv_query_qp of both connected QPs; the GID it
 *           names is the peer's dgid and the active side's route.path_rec->sgid; the
 *           passive side's path record names its own GID and the peer's
 *   UD      the ESTABLISHED event's ah_attr (SIDR REP)
 *   mcast   the MULTICAST_JOIN event's ah_attr
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "cm_util.h"
#include "sr_test.h"

static struct rdma_event_channel *ch;
static char ip[INET_ADDRSTRLEN];

/* The GID at index i of the id's device. */
static union ibv_gid gid_at(struct rdma_cm_id *id, int i)
{
	union ibv_gid g;

	memset(&g, 0, sizeof(g));
	CHECK_EQ(ibv_query_gid(id->verbs, 1, i, &g), 0);
	return g;
}

/* The sgid_index a connected QP reports, and that of the RTR attributes rdma_cm gives it; the
 * GID at that index and the QP's dgid are returned. */
static void check_qp(struct rdma_cm_id *id, const char *who, union ibv_gid *sgid,
		     union ibv_gid *dgid)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int mask = 0;

	printf("%s\n", who);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	CHECK_EQ(rdma_init_qp_attr(id, &a, &mask), 0);
	CHECK(mask & IBV_QP_AV);
	CHECK_EQ(a.ah_attr.grh.sgid_index, 1);
	memset(&a, 0, sizeof(a));
	CHECK_EQ(ibv_query_qp(id->qp, &a, IBV_QP_AV, &ia), 0);
	CHECK_EQ(a.ah_attr.grh.sgid_index, 1);
	*sgid = gid_at(id, a.ah_attr.grh.sgid_index);
	*dgid = a.ah_attr.grh.dgid;
}

/* A listener on ip (port space ps), a client connected to it with a QP of type t, the
 * accepted id returned; *l and *c are the listener and the client. */
static struct rdma_cm_id *pair(enum rdma_port_space ps, enum ibv_qp_type t,
			       struct rdma_conn_param *p, struct rdma_cm_id **l,
			       struct rdma_cm_id **c)
{
	struct sockaddr_in a = cm_ip4(ip, 0);

	REQUIRE(rdma_create_id(ch, l, NULL, ps) == 0);
	REQUIRE(rdma_bind_addr(*l, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_listen(*l, 4) == 0);
	*c = cm_client(ch, ps, ip, rdma_get_src_port(*l));
	cm_make_qp(*c, t);
	return cm_connect_accept(ch, *c, t, p, 5000);
}

static void unpair(struct rdma_cm_id *l, struct rdma_cm_id *c, struct rdma_cm_id *s)
{
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	rdma_destroy_id(c);
	rdma_destroy_id(s);
	rdma_destroy_id(l);
}

static void test_rc(void)
{
	struct rdma_conn_param p = { .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_id *l, *c, *s = pair(RDMA_PS_TCP, IBV_QPT_RC, &p, &l, &c);
	struct rdma_cm_event *ev;
	union ibv_gid csgid, cdgid, ssgid, sdgid;

	for (int k = 0; k < 2; k++) {
		ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 5000);
		REQUIRE(ev);
		rdma_ack_cm_event(ev);
	}
	check_qp(c, "RC: the active side", &csgid, &cdgid);
	check_qp(s, "RC: the passive side", &ssgid, &sdgid);
	/* The GID each side's index names is the one the CM gave the other: the peer's dgid,
	 * and on the active side its route's sgid. */
	CHECK(!memcmp(&csgid, &sdgid, 16));
	CHECK(!memcmp(&ssgid, &cdgid, 16));
	REQUIRE(c->route.path_rec);
	CHECK(!memcmp(&csgid, &c->route.path_rec->sgid, 16));
	/* The passive side has its path record too (the kernel's rdma_cm builds it from the
	 * REQ): its own GID, and the peer's, the one its QP sends to. */
	printf("RC: the passive side's route\n");
	CHECK_EQ(s->route.num_paths, 1);
	REQUIRE(s->route.path_rec);
	CHECK(!memcmp(&ssgid, &s->route.path_rec->sgid, 16));
	CHECK(!memcmp(&sdgid, &s->route.path_rec->dgid, 16));
	unpair(l, c, s);
}

static void test_ud(void)
{
	struct rdma_conn_param p = { 0 };
	struct rdma_cm_id *l, *c, *s;
	struct rdma_cm_event *ev;

	printf("UD: the SIDR REP's address vector\n");
	s = pair(RDMA_PS_UDP, IBV_QPT_UD, &p, &l, &c);
	CHECK_EQ(s->route.num_paths, 0);	/* a UD id has no path, as the kernel's */
	CHECK(!s->route.path_rec);
	ev = cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, 5000);
	REQUIRE(ev);
	CHECK(ev->param.ud.ah_attr.is_global);
	CHECK_EQ(ev->param.ud.ah_attr.grh.sgid_index, 1);
	rdma_ack_cm_event(ev);
	unpair(l, c, s);
}

static void test_mcast(void)
{
	struct sockaddr_in a = cm_ip4(ip, 0), m = cm_ip4("239.1.2.3", 0);
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;

	printf("multicast: the join's address vector\n");
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0);
	REQUIRE(rdma_bind_addr(id, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_join_multicast(id, (struct sockaddr *)&m, NULL) == 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN, 5000);
	REQUIRE(ev);
	CHECK_EQ(ev->param.ud.ah_attr.grh.sgid_index, 1);
	rdma_ack_cm_event(ev);
	CHECK_EQ(rdma_leave_multicast(id, (struct sockaddr *)&m), 0);
	rdma_destroy_id(id);
}

int main(void)
{
	struct sockaddr_in own = { .sin_family = AF_INET, .sin_port = htons(4791) };
	struct ibv_port_attr pa;
	struct rdma_cm_id *probe;
	uint8_t r[2];
	int owner = -1;

	sr_test_timeout(120);
	/* An address of 127/8 of this test's own whose 4791 is another process's. */
	for (int i = 0; i < 20 && owner < 0; i++) {
		if (getrandom(r, sizeof(r), 0) != sizeof(r))
			r[0] = (uint8_t)(getpid() + i), r[1] = (uint8_t)(getpid() >> 8);
		own.sin_addr.s_addr = htonl(0x7f000000u | 0x5d0000u | (uint32_t)r[0] << 8 |
					    (uint32_t)(1 + r[1] % 254));
		owner = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		REQUIRE(owner >= 0);
		if (bind(owner, (struct sockaddr *)&own, sizeof(own))) {
			close(owner);
			owner = -1;
		}
	}
	REQUIRE(owner >= 0);
	inet_ntop(AF_INET, &own.sin_addr, ip, sizeof(ip));
	setenv("SOFTRDMA_ADDR", ip, 1);
	ch = rdma_create_event_channel();
	REQUIRE(ch);

	/* The device took another port: two GIDs. */
	{
		struct sockaddr_in a = cm_ip4(ip, 0);

		REQUIRE(rdma_create_id(ch, &probe, NULL, RDMA_PS_TCP) == 0);
		REQUIRE(rdma_bind_addr(probe, (struct sockaddr *)&a) == 0);
		REQUIRE(probe->verbs);
		REQUIRE(ibv_query_port(probe->verbs, 1, &pa) == 0);
		printf("device on %s, LID (its UDP port) %u, %d GIDs\n", ip, pa.lid, pa.gid_tbl_len);
		REQUIRE(pa.gid_tbl_len == 2);
		rdma_destroy_id(probe);
	}
	test_rc();
	test_ud();
	test_mcast();
	rdma_destroy_event_channel(ch);
	close(owner);
	return sr_test_done("test_cm_sgid_index");
}
