/* SPDX-License-Identifier: MIT */
/*
 * A loopback bind while every device sits on an interface address (SOFTRDMA_NETDEV): the
 * kernel's rdma_cm binds a loopback address to the first device with an active port, and
 * libfabric binds each interface's address through rdma_bind_addr, 127.0.0.1 included. So
 * rdma_bind_addr(127.0.0.1) succeeds on the interface's device, and a connection made over
 * loopback (CM messages from 127.0.0.1, the GIDs naming the interface's address) carries a SEND.
 *
 * The interface: as root, a veth pair in a network namespace of the test's own (unshare), so
 * nothing outside changes; otherwise the first interface up with an IPv4 address that is not
 * loopback; with neither, the test is skipped (77).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "sr_test.h"

static struct rdma_event_channel *ch;

/* The next event, which must be `type` (any id); NULL on timeout or another event. */
static struct rdma_cm_event *expect(enum rdma_cm_event_type type, int timeout_ms)
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

static struct sockaddr_in ip4(const char *ip, uint16_t port_be)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = port_be };

	REQUIRE(inet_pton(AF_INET, ip, &a.sin_addr) == 1);
	return a;
}

static struct rdma_cm_id *client(const char *ip, uint16_t port_be)
{
	struct sockaddr_in dst = ip4(ip, port_be);
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;

	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	ev = expect(RDMA_CM_EVENT_ADDR_RESOLVED, 2000);
	REQUIRE(ev);
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_resolve_route(id, 2000) == 0);
	ev = expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 2000);
	REQUIRE(ev);
	rdma_ack_cm_event(ev);
	return id;
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 8, .max_recv_wr = 8,
					       .max_send_sge = 1, .max_recv_sge = 1 } };

	REQUIRE(rdma_create_qp(id, NULL, &a) == 0);
}

/* A client connects to `ip`:port, the listener's side accepts; a SEND crosses. Both ids are
 * destroyed again. With `late`, that bound id is made to listen only after the client's
 * rdma_connect (qperf's order: the port goes to the peer, then rdma_listen). */
static void connect_and_send(const char *ip, uint16_t port_be, struct rdma_cm_id *late)
{
	struct rdma_conn_param p = { .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_id *c = client(ip, port_be), *s;
	struct rdma_cm_event *ev;
	char sbuf[64] = "through the bound port", rbuf[64] = "";
	struct ibv_mr *smr, *rmr;
	struct ibv_wc wc;

	make_qp(c);
	REQUIRE(rdma_connect(c, &p) == 0);
	if (late) {
		usleep(20000);	/* the REQ is there before the listener */
		REQUIRE(rdma_listen(late, 4) == 0);
		CHECK_EQ(rdma_get_src_port(late), port_be);
	}
	ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 3000);
	REQUIRE(ev);
	s = ev->id;
	rdma_ack_cm_event(ev);
	make_qp(s);
	rmr = rdma_reg_msgs(s, rbuf, sizeof(rbuf));
	REQUIRE(rmr);
	REQUIRE(rdma_post_recv(s, NULL, rbuf, sizeof(rbuf), rmr) == 0);
	REQUIRE(rdma_accept(s, &p) == 0);
	for (int k = 0; k < 2; k++) {
		ev = expect(RDMA_CM_EVENT_ESTABLISHED, 3000);
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

/* An interface for the device: its name in `ifname`, its IPv4 address in `ip`. */
static bool pick_netdev(char *ifname, char *ip)
{
	struct ifaddrs *ifs, *i;

	if (geteuid() == 0 && unshare(CLONE_NEWNET) == 0 &&
	    system("ip link add srlb0 type veth peer name srlb1 && "
		   "ip addr add 10.77.0.1/24 dev srlb0 && ip link set srlb0 up && "
		   "ip link set srlb1 up && ip link set lo up") == 0) {
		strcpy(ifname, "srlb0");
		strcpy(ip, "10.77.0.1");
		return true;
	}
	if (getifaddrs(&ifs))
		return false;
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
		    (i->ifa_flags & IFF_LOOPBACK))
			continue;
		snprintf(ifname, IF_NAMESIZE, "%s", i->ifa_name);
		inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip, INET_ADDRSTRLEN);
		freeifaddrs(ifs);
		return true;
	}
	freeifaddrs(ifs);
	return false;
}

int main(void)
{
	char ifname[IF_NAMESIZE + 1], ip[INET_ADDRSTRLEN];
	struct sockaddr_in lo = ip4("127.0.0.1", 0), own;
	struct rdma_cm_id *l, *l2;
	union ibv_gid gid;

	sr_test_timeout(60);
	if (!pick_netdev(ifname, ip)) {
		printf("SKIP: no network interface but loopback\n");
		return 77;
	}
	printf("device on %s (%s)\n", ifname, ip);
	setenv("SOFTRDMA_NETDEV", ifname, 1);
	ch = rdma_create_event_channel();
	REQUIRE(ch);

	/* The bind succeeds, on the interface's device. */
	REQUIRE(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0);
	if (rdma_bind_addr(l, (struct sockaddr *)&lo)) {
		SR_FAIL("rdma_bind_addr(127.0.0.1) with the device on %s: %s", ifname, strerror(errno));
		return sr_test_done("test_cm_netdev");
	}
	REQUIRE(l->verbs);
	REQUIRE(ibv_query_gid(l->verbs, 1, 0, &gid) == 0);
	own = ip4(ip, 0);
	CHECK(!memcmp(&gid.raw[12], &own.sin_addr, 4));
	REQUIRE(rdma_listen(l, 4) == 0);
	/* A connection over loopback: the REQ comes from 127.0.0.1 and names the interface's
	 * address, which is this host's own. */
	connect_and_send("127.0.0.1", rdma_get_src_port(l), NULL);

	/* The interface's own address still binds, to the same device; so does 127.0.0.2. */
	REQUIRE(rdma_create_id(ch, &l2, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(l2, (struct sockaddr *)&own) == 0);
	CHECK(l2->verbs == l->verbs);
	rdma_destroy_id(l2);
	REQUIRE(rdma_create_id(ch, &l2, NULL, RDMA_PS_TCP) == 0);
	own = ip4("127.0.0.2", 0);
	CHECK(rdma_bind_addr(l2, (struct sockaddr *)&own) == 0);
	rdma_destroy_id(l2);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
	return sr_test_done("test_cm_netdev");
}
