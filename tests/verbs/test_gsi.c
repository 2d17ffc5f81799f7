// SPDX-License-Identifier: MIT
/*
 * QP1, the GSI QP (issue interop:, item 1), through the door softrdma's librdmacm uses
 * (sr_priv_create_gsi_qp):
 *  - it is QP number 1, one per device (EBUSY), UD only, and keeps the GSI Q_Key 0x80010000
 *    (IBA 13.5.3.1): another Q_Key is EINVAL;
 *  - a CM MAD (a REQ from src/wire/mad.c) sent from QP1 to QP1 arrives whole after a GRH, from
 *    source QP 1;
 *  - an ordinary UD QP cannot reach QP1: the Q_Key with the high bit set in its work request
 *    makes it send its own Q_Key (IBA 10.2.5), which QP1 drops and counts (drop_qkey); QP1 can
 *    send to an ordinary UD QP;
 *  - after QP1 is destroyed packets to QP 1 are dropped, and a new QP1 can be made;
 *  - two processes on one host, zero configuration: each has its QP1; a REQ to the other's
 *    QP1 is answered by a REP to the sender's QP1 (addressed from the completion and GRH).
 * With SOFTRDMA_PCAP set, tests/integration/test_gsi_tshark.sh decodes the capture with tshark.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <errno.h>
#include <string.h>

#include "wire/mad.h"

struct ibv_qp *sr_priv_create_gsi_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia);

#define GRH 40
#define UQKEY 0x11111111
#define WAIT_WC(cq, id, st) vu_expect_wc(cq, id, st, -1, 5000, __LINE__)


/* A send and a receive completing on one CQ, in either order: both must succeed; returns the
 * receive's completion. */
static struct ibv_wc send_recv_wc(struct ibv_cq *cq, uint64_t send_id, uint64_t recv_id, int line)
{
	struct ibv_wc wc[2], r = { 0 };
	bool got_send = false, got_recv = false;

	for (int i = 0; i < 2; i++) {
		if (!vu_wait(cq, &wc[i], 5000)) {
			SR_FAIL("line %d: completion %d of 2 missing", line, i + 1);
			break;
		}
		if (wc[i].status != IBV_WC_SUCCESS)
			SR_FAIL("line %d: %s", line, vu_wc_str(&wc[i]));
		if (wc[i].wr_id == send_id && !got_send) {
			got_send = true;
		} else if (wc[i].wr_id == recv_id && !got_recv) {
			got_recv = true;
			r = wc[i];
		} else {
			SR_FAIL("line %d: unexpected %s", line, vu_wc_str(&wc[i]));
		}
	}
	return r;
}
#define SEND_RECV(cq, s, r) send_recv_wc(cq, s, r, __LINE__)


/* Counter `name` (or the sum of two) once it reached want, or what it is after 5 s. */
static int64_t stat_sum(const char *a, const char *b)
{
	return vu_stat(a) + (b ? vu_stat(b) : 0);
}

static int64_t wait_stat(const char *a, const char *b, int64_t want)
{
	uint64_t end = vu_now_ms() + 5000;
	int64_t v;

	while ((v = stat_sum(a, b)) < want && vu_now_ms() < end)
		vu_sleep_ms(2);
	return v;
}

static struct vu_dev dev;
static struct vu_buf buf;

struct gsi_ep {
	union ibv_gid gid;
};

static struct ibv_qp *gsi_create(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 1,
	};
	struct ibv_qp *qp = sr_priv_create_gsi_qp(dev.pd, &ia);
	struct vu_conn_cfg c;

	if (!qp)
		return NULL;
	vu_conn_cfg_default(&c);
	c.qkey = SR_GSI_QKEY;
	REQUIRE(vu_qp_connect(qp, &c, NULL, 0) == 0);
	return qp;
}

/* A REQ as the kernel's rdma_cm would send it for this QP (fields of the rxe captures). */
static void make_req(uint8_t *mad, uint32_t comm_id, uint32_t qpn, const union ibv_gid *sgid,
		     const union ibv_gid *dgid)
{
	struct sr_cm_mad m;

	memset(&m, 0, sizeof(m));
	m.hdr = (struct sr_mad_hdr){ SR_MAD_BASE_VERSION, SR_MAD_CLASS_CM, SR_MAD_CM_CLASS_VERSION,
				     SR_MAD_METHOD_SEND, 0, 0, 0x42ull << 32 | comm_id,
				     SR_CM_ATTR_REQ, 0 };
	m.req.local_comm_id = comm_id;
	m.req.service_id = sr_cm_service_id(0x0106, 7174);
	m.req.local_qpn = qpn;
	m.req.responder_resources = 1;
	m.req.initiator_depth = 1;
	m.req.remote_cm_response_timeout = 20;
	m.req.starting_psn = 0x2fe935;
	m.req.local_cm_response_timeout = 20;
	m.req.retry_count = 7;
	m.req.pkey = SR_DEFAULT_PKEY;
	m.req.path_mtu = IBV_MTU_1024;
	m.req.rnr_retry_count = 7;
	m.req.max_cm_retries = 15;
	m.req.primary.local_lid = m.req.primary.remote_lid = 0xffff;
	memcpy(m.req.primary.local_gid, sgid->raw, 16);
	memcpy(m.req.primary.remote_gid, dgid->raw, 16);
	m.req.primary.hop_limit = 64;
	m.req.primary.local_ack_timeout = 19;
	REQUIRE(sr_cm_mad_encode(&m, mad) == 0);
}

static void test_one_process(void)
{
	struct ibv_cq *cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	struct ibv_qp *gsi, *qp;
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				       .cap = { 4, 4, 1, 1, 0 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = UQKEY };
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct ibv_ah_attr aa;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	struct sr_cm_mad m;
	uint8_t *mad = buf.p, *rx = buf.p + 4096;
	int64_t drops;

	printf("QP1 in one process\n");
	REQUIRE(cq);
	/* Not UD, or a second one: refused. */
	ia.qp_type = IBV_QPT_RC;
	errno = 0;
	CHECK(!sr_priv_create_gsi_qp(dev.pd, &ia));
	CHECK_EQ(errno, EINVAL);
	ia.qp_type = IBV_QPT_UD;
	qp = sr_priv_create_gsi_qp(dev.pd, &ia);
	REQUIRE(qp);
	CHECK_EQ(qp->qp_num, SR_GSI_QPN);
	errno = 0;
	CHECK(!sr_priv_create_gsi_qp(dev.pd, &ia));
	CHECK_EQ(errno, EBUSY);
	/* Its Q_Key is the GSI's. */
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
		 EINVAL);
	a.qkey = SR_GSI_QKEY;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
		 0);
	CHECK_EQ(ibv_destroy_qp(qp), 0);

	gsi = gsi_create(cq);
	REQUIRE(gsi);
	CHECK_EQ(gsi->qp_num, 1);
	vu_qp_cfg_default(&q, IBV_QPT_UD);
	vu_conn_cfg_default(&c);
	c.qkey = UQKEY;
	qp = vu_qp_create(&dev, cq, cq, &q);
	REQUIRE(qp);
	REQUIRE(vu_qp_connect(qp, &c, NULL, 0) == 0);
	vu_ah_attr(&aa, &dev.gid);
	ah = ibv_create_ah(dev.pd, &aa);
	REQUIRE(ah);

	/* QP1 to QP1: a REQ, whole, from QP 1. */
	make_req(mad, 0x1e58b42d, qp->qp_num, &dev.gid, &dev.gid);
	memset(rx, 0xcc, GRH + SR_MAD_LEN);
	CHECK_EQ(vu_post_recv(gsi, 1, buf.mr, rx, GRH + SR_MAD_LEN), 0);
	CHECK_EQ(vu_post_ud(gsi, 2, ah, SR_GSI_QPN, SR_GSI_QKEY, buf.mr, mad, SR_MAD_LEN, 0), 0);
	wc = SEND_RECV(cq, 2, 1);
	CHECK_EQ(wc.byte_len, GRH + SR_MAD_LEN);
	CHECK_EQ(wc.src_qp, SR_GSI_QPN);
	CHECK_EQ(wc.qp_num, SR_GSI_QPN);
	CHECK(!memcmp(rx + GRH, mad, SR_MAD_LEN));
	CHECK_EQ(sr_cm_mad_decode(&m, rx + GRH, wc.byte_len - GRH), 0);
	CHECK_EQ(m.hdr.attr_id, SR_CM_ATTR_REQ);
	CHECK_EQ(m.req.local_qpn, qp->qp_num);

	/* An ordinary UD QP naming the GSI Q_Key sends its own (IBA 10.2.5): QP1 drops it. */
	drops = vu_stat("drop_qkey");
	CHECK_EQ(vu_post_recv(gsi, 3, buf.mr, rx, GRH + SR_MAD_LEN), 0);
	CHECK_EQ(vu_post_ud(qp, 4, ah, SR_GSI_QPN, SR_GSI_QKEY, buf.mr, mad, SR_MAD_LEN, 0), 0);
	WAIT_WC(cq, 4, IBV_WC_SUCCESS);
	CHECK_EQ(wait_stat("drop_qkey", NULL, drops + 1) - drops, 1);
	CHECK_EQ(vu_drain(cq, &wc, 1, 20), 0);
	/* ... and with any other Q_Key too. */
	CHECK_EQ(vu_post_ud(qp, 5, ah, SR_GSI_QPN, UQKEY, buf.mr, mad, SR_MAD_LEN, 0), 0);
	WAIT_WC(cq, 5, IBV_WC_SUCCESS);
	CHECK_EQ(wait_stat("drop_qkey", NULL, drops + 2) - drops, 2);
	CHECK_EQ(vu_drain(cq, &wc, 1, 20), 0);

	/* QP1 to an ordinary UD QP (its Q_Key named): arrives from QP 1. */
	CHECK_EQ(vu_post_recv(qp, 6, buf.mr, rx + 1024, GRH + SR_MAD_LEN), 0);
	CHECK_EQ(vu_post_ud(gsi, 7, ah, qp->qp_num, UQKEY, buf.mr, mad, SR_MAD_LEN, 0), 0);
	wc = SEND_RECV(cq, 7, 6);
	CHECK_EQ(wc.src_qp, SR_GSI_QPN);
	CHECK(!memcmp(rx + 1024 + GRH, mad, SR_MAD_LEN));

	/* Gone: packets to QP 1 are dropped; then a new QP1 works. */
	CHECK_EQ(ibv_destroy_qp(gsi), 0);
	drops = stat_sum("drop_qpn", "drop_qp_gone");
	CHECK_EQ(vu_post_ud(qp, 8, ah, SR_GSI_QPN, UQKEY, buf.mr, mad, SR_MAD_LEN, 0), 0);
	WAIT_WC(cq, 8, IBV_WC_SUCCESS);
	CHECK_EQ(wait_stat("drop_qpn", "drop_qp_gone", drops + 1) - drops, 1);
	CHECK_EQ(vu_drain(cq, &wc, 1, 20), 0);
	gsi = gsi_create(cq);
	REQUIRE(gsi);
	CHECK_EQ(vu_post_recv(gsi, 9, buf.mr, rx, GRH + SR_MAD_LEN), 0);
	CHECK_EQ(vu_post_ud(gsi, 10, ah, SR_GSI_QPN, SR_GSI_QKEY, buf.mr, mad, SR_MAD_LEN, 0), 0);
	wc = SEND_RECV(cq, 10, 9);
	CHECK_EQ(wc.src_qp, SR_GSI_QPN);

	CHECK_EQ(ibv_destroy_ah(ah), 0);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_qp(gsi), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
}

/* The other process: its own QP1 answers a REQ with a REP to the sender's QP1. */
static int child(int sock, void *arg)
{
	struct ibv_cq *cq;
	struct ibv_qp *gsi;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	struct sr_cm_mad m, rep;
	struct gsi_ep me;
	uint8_t *rx, *tx, ok;

	(void)arg;
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &buf, 8192, VU_ACCESS_ALL) == 0);
	rx = buf.p;
	tx = buf.p + 4096;
	cq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	REQUIRE(cq);
	gsi = gsi_create(cq);
	REQUIRE(gsi);
	CHECK_EQ(vu_post_recv(gsi, 1, buf.mr, rx, GRH + SR_MAD_LEN), 0);
	me.gid = dev.gid;
	REQUIRE(vu_sock_send(sock, &me, sizeof(me)) == 0);
	wc = WAIT_WC(cq, 1, IBV_WC_SUCCESS);
	CHECK_EQ(wc.src_qp, SR_GSI_QPN);
	CHECK_EQ(sr_cm_mad_decode(&m, rx + GRH, wc.byte_len - GRH), 0);
	CHECK_EQ(m.hdr.attr_id, SR_CM_ATTR_REQ);
	CHECK(!memcmp(m.req.primary.remote_gid, dev.gid.raw, 16));
	/* REP: same transaction, comm IDs swapped in */
	memset(&rep, 0, sizeof(rep));
	rep.hdr = m.hdr;
	rep.hdr.attr_id = SR_CM_ATTR_REP;
	rep.rep.local_comm_id = 0x1d58b42d;
	rep.rep.remote_comm_id = m.req.local_comm_id;
	rep.rep.local_qpn = 0x17;
	rep.rep.starting_psn = 0x9f7039;
	rep.rep.responder_resources = rep.rep.initiator_depth = 1;
	rep.rep.target_ack_delay = 15;
	rep.rep.rnr_retry_count = 7;
	REQUIRE(sr_cm_mad_encode(&rep, tx) == 0);
	ah = ibv_create_ah_from_wc(dev.pd, &wc, (struct ibv_grh *)rx, 1);
	REQUIRE(ah);
	CHECK_EQ(vu_post_ud(gsi, 2, ah, wc.src_qp, SR_GSI_QKEY, buf.mr, tx, SR_MAD_LEN, 0), 0);
	WAIT_WC(cq, 2, IBV_WC_SUCCESS);
	ok = 0;
	vu_sock_recv(sock, &ok, 1);	/* the parent got it: now we may go */
	CHECK(ok);
	ibv_destroy_ah(ah);
	ibv_destroy_qp(gsi);
	ibv_destroy_cq(cq);
	vu_buf_free(&buf);
	vu_close(&dev);
	return sr_test_failures ? 1 : 0;
}

static void test_two_processes(struct vu_child *ch)
{
	struct ibv_cq *cq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	struct ibv_qp *gsi;
	struct ibv_ah_attr aa;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	struct sr_cm_mad m;
	struct gsi_ep peer;
	uint8_t *rx = buf.p, *tx = buf.p + 4096, ok;

	printf("QP1 of two processes on one host\n");
	REQUIRE(cq);
	gsi = gsi_create(cq);
	REQUIRE(gsi);
	REQUIRE(vu_sock_recv(ch->sock, &peer, sizeof(peer)) == 0);
	CHECK(memcmp(peer.gid.raw, dev.gid.raw, 16) != 0);
	CHECK_EQ(vu_post_recv(gsi, 1, buf.mr, rx, GRH + SR_MAD_LEN), 0);
	make_req(tx, 0x1e58b42d, 0x17, &dev.gid, &peer.gid);
	vu_ah_attr(&aa, &peer.gid);
	ah = ibv_create_ah(dev.pd, &aa);
	REQUIRE(ah);
	CHECK_EQ(vu_post_ud(gsi, 2, ah, SR_GSI_QPN, SR_GSI_QKEY, buf.mr, tx, SR_MAD_LEN, 0), 0);
	wc = SEND_RECV(cq, 2, 1);
	CHECK_EQ(wc.src_qp, SR_GSI_QPN);
	CHECK_EQ(sr_cm_mad_decode(&m, rx + GRH, wc.byte_len - GRH), 0);
	CHECK_EQ(m.hdr.attr_id, SR_CM_ATTR_REP);
	CHECK_EQ(m.hdr.tid, 0x42ull << 32 | 0x1e58b42d);
	CHECK_EQ(m.rep.remote_comm_id, 0x1e58b42d);
	CHECK_EQ(m.rep.starting_psn, 0x9f7039);
	ok = sr_test_failures == 0;
	CHECK_EQ(vu_sock_send(ch->sock, &ok, 1), 0);
	CHECK_EQ(ibv_destroy_ah(ah), 0);
	CHECK_EQ(ibv_destroy_qp(gsi), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
}

int main(void)
{
	struct vu_child ch;

	sr_test_timeout(120);
	REQUIRE(vu_fork(&ch, child, NULL, 60) == 0);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &buf, 8192, VU_ACCESS_ALL) == 0);
	test_one_process();
	test_two_processes(&ch);
	CHECK_EQ(vu_child_wait(&ch, 60), 0);
	vu_buf_free(&buf);
	vu_close(&dev);
	return sr_test_done("test_gsi");
}
