/* SPDX-License-Identifier: MIT */
/*
 * XRC through librdmacm's synchronous endpoint calls, the way rdma_xserver/rdma_xclient -c x
 * use them, server and client in one process (the server in a thread): rdma_getaddrinfo with
 * RDMA_PS_IB and IBV_QPT_XRC_RECV/IBV_QPT_XRC_SEND, rdma_create_ep, rdma_get_request (which
 * makes the XRC_RECV QP), rdma_create_srq (an XRC SRQ whose CQ is the id's recv_cq), the SRQ
 * number in the accept's private data, read back by the client from id->event (kept there
 * after rdma_connect), a SEND naming it, rdma_get_recv_comp/rdma_get_send_comp, and
 * rdma_destroy_ep releasing everything (the sanitizer build checks for leaks).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "sr_test.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static uint16_t srv_port;	/* network order; 0 until the server listens */
static bool srv_failed, cli_done;
static uint8_t got[64];

static void srv_ready(uint16_t port, bool failed)
{
	pthread_mutex_lock(&lock);
	srv_port = port;
	srv_failed = failed;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
}

static void *server(void *arg)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_IB,
				       .ai_qp_type = IBV_QPT_XRC_RECV }, *res;
	struct ibv_qp_init_attr qa = { .cap = { .max_recv_wr = 1, .max_recv_sge = 1 } };
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 1, .max_sge = 1 } };
	struct rdma_cm_id *l, *id;
	struct rdma_conn_param p = { 0 };
	struct ibv_wc wc;
	struct ibv_mr *mr;
	uint32_t srqn, srqn_be;

	(void)arg;
	REQUIRE(rdma_getaddrinfo("127.0.0.1", "0", &hints, &res) == 0);
	CHECK_EQ(res->ai_port_space, RDMA_PS_IB);
	CHECK_EQ(res->ai_qp_type, IBV_QPT_XRC_RECV);
	REQUIRE(rdma_create_ep(&l, res, NULL, &qa) == 0);
	rdma_freeaddrinfo(res);
	REQUIRE(rdma_listen(l, 0) == 0);
	srv_ready(rdma_get_src_port(l), false);

	REQUIRE(rdma_get_request(l, &id) == 0);
	CHECK_EQ(id->qp_type, IBV_QPT_XRC_RECV);
	REQUIRE(id->qp);
	CHECK_EQ(id->qp->qp_type, IBV_QPT_XRC_RECV);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST);
	REQUIRE(rdma_create_srq(id, NULL, &sa) == 0);
	REQUIRE(id->srq && id->recv_cq && id->recv_cq_channel);
	REQUIRE(ibv_get_srq_num(id->srq, &srqn) == 0);
	mr = rdma_reg_msgs(id, got, sizeof(got));
	REQUIRE(mr);
	REQUIRE(rdma_post_recv(id, NULL, got, sizeof(got), mr) == 0);	/* to the SRQ */
	srqn_be = htonl(srqn);
	p.private_data = &srqn_be;
	p.private_data_len = sizeof(srqn_be);
	REQUIRE(rdma_accept(id, &p) == 0);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED);
	CHECK_EQ(rdma_get_recv_comp(id, &wc), 1);	/* blocks on the SRQ CQ's channel */
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 16);
	/* Not before the client has its send completion: a DREQ moves its QP to ERR, and one
	 * that overtook the ACK would flush the send. */
	pthread_mutex_lock(&lock);
	while (!cli_done)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(l);
	return NULL;
}

int main(void)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_IB, .ai_qp_type = IBV_QPT_XRC_SEND },
			     *res;
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 1, .max_send_sge = 1 },
				       .sq_sig_all = 1 };
	uint8_t msg[16];
	struct rdma_cm_id *id;
	struct ibv_send_wr wr = { 0 }, *bad;
	struct ibv_sge sge;
	struct ibv_wc wc;
	struct ibv_mr *mr;
	pthread_t th;
	char port[8];
	uint32_t srqn;

	sr_test_timeout(30);
	REQUIRE(pthread_create(&th, NULL, server, NULL) == 0);
	pthread_mutex_lock(&lock);
	while (!srv_port && !srv_failed)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	REQUIRE(!srv_failed);
	snprintf(port, sizeof(port), "%u", ntohs(srv_port));

	REQUIRE(rdma_getaddrinfo("127.0.0.1", port, &hints, &res) == 0);
	REQUIRE(rdma_create_ep(&id, res, NULL, &qa) == 0);
	rdma_freeaddrinfo(res);
	REQUIRE(id->qp);
	CHECK_EQ(id->qp->qp_type, IBV_QPT_XRC_SEND);
	CHECK(id->send_cq && id->send_cq_channel && !id->recv_cq);
	for (unsigned i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(0x40 + i);
	mr = rdma_reg_msgs(id, msg, sizeof(msg));
	REQUIRE(mr);
	REQUIRE(rdma_connect(id, NULL) == 0);
	REQUIRE(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED);
	REQUIRE(id->event->param.conn.private_data_len >= 4);
	memcpy(&srqn, id->event->param.conn.private_data, 4);
	srqn = ntohl(srqn);

	sge.addr = (uintptr_t)msg;
	sge.length = sizeof(msg);
	sge.lkey = mr->lkey;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.qp_type.xrc.remote_srqn = srqn;
	REQUIRE(ibv_post_send(id->qp, &wr, &bad) == 0);
	CHECK_EQ(rdma_get_send_comp(id, &wc), 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	pthread_mutex_lock(&lock);
	cli_done = true;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);

	pthread_join(th, NULL);
	CHECK(!memcmp(got, msg, sizeof(msg)));
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	return sr_test_done("test_cm_ep_xrc");
}
