/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm behaviour that middleware (qperf, libfabric, pyverbs) relies on, as the kernel's
 * rdma_cm and rdma-core's librdmacm behave, client and server in one process on loopback:
 * - rdma_bind_addr with port 0 picks the port at bind time: rdma_get_src_port returns it before
 *   rdma_listen, the port is held (nobody else can bind it), and rdma_listen keeps it
 *   (qperf -cm1 sends the bound port to its peer before it listens), and a REQ that arrives
 *   between the bind and rdma_listen reaches the listener (its retransmission does).
 * - an id's pd is the device's default PD from the moment the id has a device (bound to an
 *   address, resolved, or created by a CONNECT_REQUEST), as librdmacm sets it, and
 *   rdma_create_qp(id, NULL, ...) uses it; a wildcard bind leaves it NULL. pyverbs creates an
 *   AH on id->pd before any QP.
 * - rdma_getaddrinfo with neither node nor service takes the hints alone (their flags, types
 *   and addresses), as librdmacm does; with no hints either it is EINVAL.
 * - a child forked while the CM runs (its thread, sockets, devices open, a listener) starts a
 *   CM of its own: it listens, connects and sends on loopback (pyverbs's rdma_cm tests fork
 *   their sides from a process that has the device open).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "sr_test.h"
#include "cm_util.h"

static struct rdma_event_channel *ch;

/* Port 0: picked by rdma_bind_addr, held, kept by rdma_listen, and connections reach it. */
static void test_bind_port0(void)
{
	struct sockaddr_in a = cm_ip4("127.0.0.1", 0), any = cm_ip4("0.0.0.0", 0), u;
	struct rdma_cm_id *l, *w;
	uint16_t port;
	int fd;

	REQUIRE(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(l, (struct sockaddr *)&a) == 0);
	port = rdma_get_src_port(l);
	CHECK(port != 0);
	CHECK_EQ(((struct sockaddr_in *)rdma_get_local_addr(l))->sin_port, port);
	CHECK(l->verbs && l->pd && l->pd->context == l->verbs);
	/* Held: an ordinary UDP socket cannot take it (the CM speaks UDP on it). */
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	REQUIRE(fd >= 0);
	u = cm_ip4("127.0.0.1", port);
	CHECK(port == 0 || bind(fd, (struct sockaddr *)&u, sizeof(u)) != 0);
	close(fd);
	REQUIRE(rdma_listen(l, 4) == 0);
	CHECK_EQ(rdma_get_src_port(l), port);
	if (port)
		cm_connect_and_send(ch, "127.0.0.1", port, NULL);

	/* A wildcard bind too. */
	REQUIRE(rdma_create_id(ch, &w, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(w, (struct sockaddr *)&any) == 0);
	CHECK(!w->verbs && !w->pd);	/* no device yet */
	port = rdma_get_src_port(w);
	CHECK(port != 0);
	CHECK(port != rdma_get_src_port(l));
	if (port)
		cm_connect_and_send(ch, "127.0.0.1", port, w);	/* rdma_listen(w) comes late */
	rdma_destroy_id(w);
	rdma_destroy_id(l);
}

/* rdma_getaddrinfo(NULL, NULL, hints): the hints describe the result. */
static void test_getaddrinfo_hints(void)
{
	struct sockaddr_in src = cm_ip4("127.0.0.1", htons(0)), dst = cm_ip4("127.0.0.1", htons(7471));
	struct rdma_addrinfo h = { .ai_flags = RAI_PASSIVE, .ai_family = AF_INET,
				   .ai_qp_type = IBV_QPT_RC, .ai_port_space = RDMA_PS_TCP,
				   .ai_src_len = sizeof(src), .ai_src_addr = (struct sockaddr *)&src },
			      *r = NULL;
	struct rdma_cm_id *ep;

	errno = 0;
	CHECK_EQ(rdma_getaddrinfo(NULL, NULL, NULL, &r), -1);
	CHECK_EQ(errno, EINVAL);
	if (rdma_getaddrinfo(NULL, NULL, &h, &r)) {
		SR_FAIL("rdma_getaddrinfo(NULL, NULL, hints): %s", strerror(errno));
		return;
	}
	REQUIRE(r);
	CHECK_EQ(r->ai_flags, RAI_PASSIVE);
	CHECK_EQ(r->ai_family, AF_INET);
	CHECK_EQ(r->ai_qp_type, IBV_QPT_RC);
	CHECK_EQ(r->ai_port_space, RDMA_PS_TCP);
	CHECK_EQ(r->ai_src_len, sizeof(src));
	CHECK(r->ai_src_addr && r->ai_src_addr != (struct sockaddr *)&src &&
	      !memcmp(r->ai_src_addr, &src, sizeof(src)));
	CHECK(!r->ai_dst_addr && !r->ai_dst_len);
	/* A passive endpoint from it. */
	if (rdma_create_ep(&ep, r, NULL, NULL) == 0) {
		CHECK_EQ(rdma_listen(ep, 1), 0);
		CHECK(rdma_get_src_port(ep) != 0);
		rdma_destroy_ep(ep);
	} else {
		SR_FAIL("rdma_create_ep: %s", strerror(errno));
	}
	rdma_freeaddrinfo(r);

	/* Active: the destination comes from the hints too. */
	h.ai_flags = 0;
	h.ai_src_len = 0;
	h.ai_src_addr = NULL;
	h.ai_dst_len = sizeof(dst);
	h.ai_dst_addr = (struct sockaddr *)&dst;
	REQUIRE(rdma_getaddrinfo(NULL, NULL, &h, &r) == 0);
	CHECK_EQ(r->ai_dst_len, sizeof(dst));
	CHECK(r->ai_dst_addr && !memcmp(r->ai_dst_addr, &dst, sizeof(dst)));
	CHECK(!r->ai_src_addr && !r->ai_src_len);
	rdma_freeaddrinfo(r);
}

/* Fork with the CM running (a listener of the parent's still open); the child does a
 * connection of its own, bounded by its alarm; the parent's CM still works afterwards. */
static void test_fork(void)
{
	struct sockaddr_in a = cm_ip4("127.0.0.1", 0);
	struct rdma_cm_id *pl;
	pid_t pid;
	int st = -1;

	REQUIRE(rdma_create_id(ch, &pl, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(pl, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_listen(pl, 4) == 0);
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct rdma_cm_id *l;

		alarm(20);
		sr_test_failures = 0;
		ch = rdma_create_event_channel();
		REQUIRE(ch);
		REQUIRE(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0);
		REQUIRE(rdma_bind_addr(l, (struct sockaddr *)&a) == 0);
		REQUIRE(rdma_listen(l, 4) == 0);
		CHECK(l->verbs != pl->verbs);	/* a device context of its own */
		cm_connect_and_send(ch, "127.0.0.1", rdma_get_src_port(l), NULL);
		rdma_destroy_id(l);
		_exit(sr_test_failures ? 1 : 0);
	}
	for (int i = 0; i < 300 && waitpid(pid, &st, WNOHANG) == 0; i++)
		usleep(100000);
	if (waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* The parent's listener still takes connections. */
	cm_connect_and_send(ch, "127.0.0.1", rdma_get_src_port(pl), NULL);
	rdma_destroy_id(pl);
}

int main(void)
{
	sr_test_timeout(60);
	ch = rdma_create_event_channel();
	REQUIRE(ch);
	test_bind_port0();
	test_getaddrinfo_hints();
	test_fork();
	rdma_destroy_event_channel(ch);
	return sr_test_done("test_cm_compat");
}
