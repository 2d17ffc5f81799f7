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
#include "cm_util.h"

static struct rdma_event_channel *ch;

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
	struct sockaddr_in lo = cm_ip4("127.0.0.1", 0), own;
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
	own = cm_ip4(ip, 0);
	CHECK(!memcmp(&gid.raw[12], &own.sin_addr, 4));
	REQUIRE(rdma_listen(l, 4) == 0);
	/* A connection over loopback: the REQ comes from 127.0.0.1 and names the interface's
	 * address, which is this host's own. */
	cm_connect_and_send(ch, "127.0.0.1", rdma_get_src_port(l), NULL);

	/* The interface's own address still binds, to the same device; so does 127.0.0.2. */
	REQUIRE(rdma_create_id(ch, &l2, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(l2, (struct sockaddr *)&own) == 0);
	CHECK(l2->verbs == l->verbs);
	rdma_destroy_id(l2);
	REQUIRE(rdma_create_id(ch, &l2, NULL, RDMA_PS_TCP) == 0);
	own = cm_ip4("127.0.0.2", 0);
	CHECK(rdma_bind_addr(l2, (struct sockaddr *)&own) == 0);
	rdma_destroy_id(l2);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
	return sr_test_done("test_cm_netdev");
}
