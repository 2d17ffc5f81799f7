/* SPDX-License-Identifier: MIT */
/*
 * Large segments (docs/cm.md): two RC QPs that rdma_cm connects on loopback, each created with
 * rdma_create_qp, agree on 61440-byte packets. A 1 MiB + 12 byte RDMA WRITE, a 700001-byte RDMA
 * READ and a 200003-byte SEND arrive intact, and the WRITE takes a few dozen packets, not the
 * 257 of 4096-byte ones. The same program run again with SOFTRDMA_SEG_MAX=0 (re-executed) sees
 * the path MTU: at least 257 packets for the WRITE, the same data checks.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "sr_test.h"
#include "cm_util.h"
#include "verbs_util.h"

#define WLEN ((1u << 20) + 12)
#define RLEN 700001u
#define SLEN 200003u

static struct rdma_event_channel *ch;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct rdma_cm_event *expect(enum rdma_cm_event_type type)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	REQUIRE(poll(&p, 1, 3000) == 1);
	REQUIRE(rdma_get_cm_event(ch, &ev) == 0);
	if (ev->event != type) {
		SR_FAIL("got %s, expected %s", rdma_event_str(ev->event), rdma_event_str(type));
		exit(1);
	}
	return ev;
}

static void fill(uint8_t *b, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed + i * 7 + (i >> 12));
}

static void wait_wc(struct ibv_cq *cq, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	int n = 0;
	double t0 = now_s();

	while (n == 0 && now_s() - t0 < 10)
		n = ibv_poll_cq(cq, 1, &wc);
	REQUIRE(n == 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, op);
}

int main(int argc, char **argv)
{
	bool noseg = argc > 1 && !strcmp(argv[1], "--no-seg");

	/* The test counts packets: the WRITE must take the wire, not the direct path. */
	setenv("SOFTRDMA_DIRECT", "0", 1);
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct rdma_cm_id *listen, *c, *s;
	struct rdma_cm_event *ev;
	struct rdma_conn_param p = { .responder_resources = 2, .initiator_depth = 2,
				     .retry_count = 7, .rnr_retry_count = 7 };
	uint8_t *cbuf = malloc(WLEN), *sbuf = malloc(WLEN), *want = malloc(WLEN);
	int64_t tx0, tx;

	sr_test_timeout(60);
	REQUIRE(cbuf && sbuf && want);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ch = rdma_create_event_channel();
	REQUIRE(ch);
	REQUIRE(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(listen, (struct sockaddr *)&a) == 0);
	REQUIRE(rdma_listen(listen, 4) == 0);
	a.sin_port = rdma_get_src_port(listen);

	REQUIRE(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(c, NULL, (struct sockaddr *)&a, 2000) == 0);
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
	REQUIRE(rdma_resolve_route(c, 2000) == 0);
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
	cm_make_qp(c, IBV_QPT_RC);
	REQUIRE(rdma_connect(c, &p) == 0);
	ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	s = ev->id;
	rdma_ack_cm_event(ev);
	cm_make_qp(s, IBV_QPT_RC);
	REQUIRE(rdma_accept(s, &p) == 0);
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));

	unsigned acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *cmr = ibv_reg_mr(c->pd, cbuf, WLEN, acc), *smr = ibv_reg_mr(s->pd, sbuf, WLEN, acc);

	REQUIRE(cmr && smr);

	/* RDMA WRITE client -> server */
	fill(cbuf, WLEN, 1);
	memset(sbuf, 0, WLEN);
	struct ibv_sge sg = { (uintptr_t)cbuf, WLEN, cmr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sg, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { (uintptr_t)sbuf, smr->rkey } }, *bad;

	tx0 = vu_stat("tx_packets");
	REQUIRE(ibv_post_send(c->qp, &wr, &bad) == 0);
	wait_wc(c->send_cq, IBV_WC_RDMA_WRITE);
	tx = vu_stat("tx_packets") - tx0;	/* the WRITE's packets and the server's ACKs */
	CHECK(!memcmp(sbuf, cbuf, WLEN));
	if (noseg)
		CHECK(tx >= 257);
	else
		CHECK(tx >= 18 && tx < 64);
	printf("%s: a %u-byte RDMA WRITE took %lld packets (with the ACKs)\n",
	       noseg ? "path MTU" : "large segments", WLEN, (long long)tx);

	/* RDMA READ client <- server */
	fill(sbuf, RLEN, 2);
	memcpy(want, sbuf, RLEN);
	memset(cbuf, 0, WLEN);
	sg.length = RLEN;
	wr.opcode = IBV_WR_RDMA_READ;
	REQUIRE(ibv_post_send(c->qp, &wr, &bad) == 0);
	wait_wc(c->send_cq, IBV_WC_RDMA_READ);
	CHECK(!memcmp(cbuf, want, RLEN));
	CHECK(cbuf[RLEN] == 0);

	/* SEND server -> client */
	fill(sbuf, SLEN, 3);
	memset(cbuf, 0, WLEN);
	struct ibv_sge rsg = { (uintptr_t)cbuf, WLEN, cmr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 3, .sg_list = &rsg, .num_sge = 1 }, *rbad;
	struct ibv_sge ssg = { (uintptr_t)sbuf, SLEN, smr->lkey };
	struct ibv_send_wr swr = { .wr_id = 4, .sg_list = &ssg, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };

	REQUIRE(ibv_post_recv(c->qp, &rwr, &rbad) == 0);
	REQUIRE(ibv_post_send(s->qp, &swr, &bad) == 0);
	wait_wc(c->recv_cq, IBV_WC_RECV);
	wait_wc(s->send_cq, IBV_WC_SEND);
	CHECK(!memcmp(cbuf, sbuf, SLEN));

	REQUIRE(rdma_disconnect(c) == 0);
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED));
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED));
	ibv_dereg_mr(cmr);
	ibv_dereg_mr(smr);
	rdma_destroy_qp(c);
	rdma_destroy_qp(s);
	rdma_destroy_id(c);
	rdma_destroy_id(s);
	rdma_destroy_id(listen);
	rdma_destroy_event_channel(ch);
	free(cbuf);
	free(sbuf);
	free(want);

	if (!noseg) {
		/* Again with no large segments offered: the path MTU. */
		pid_t pid = fork();

		REQUIRE(pid >= 0);
		if (pid == 0) {
			setenv("SOFTRDMA_SEG_MAX", "0", 1);
			execl("/proc/self/exe", argv[0], "--no-seg", (char *)NULL);
			_exit(127);
		}
		int st;

		REQUIRE(waitpid(pid, &st, 0) == pid);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	return sr_test_done(noseg ? "test_cm_seg (path MTU)" : "test_cm_seg");
}
