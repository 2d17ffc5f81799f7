/* SPDX-License-Identifier: MIT */
/*
 * The other QP types and the event machinery: UC SEND and WRITE_WITH_IMM (a message too long
 * for its receive buffer breaks only that message); UD datagrams with their GRH (the IPv4 header
 * of the sender in bytes 20..39) and an AH made from the completion answering the sender, also
 * across two processes; an SRQ shared by two QPs and its limit event on the async fd; completion
 * channels with poll(), solicited-only notification; a CQ overrun raising IBV_EVENT_CQ_ERR while
 * the completions already queued stay intact.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#define BUFSZ (1u << 20)
#define QKEY 0x11111111

static struct vu_dev dev;
static struct vu_buf lb, rb;

#define WAIT_WC(cq, id, st) vu_expect_wc(cq, id, st, -1, 5000, __LINE__)

#define CHECK_PAT(p, len, seed) check_pat(p, len, seed, __LINE__)
static void check_pat(const void *p, size_t len, uint32_t seed, int line)
{
	long at = vu_check(p, len, seed);

	if (at >= 0)
		SR_FAIL("line %d: byte %ld of %zu wrong", line, at, len);
}

/* Is fd readable within ms? */
static bool readable(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, ms) == 1 && (pfd.revents & POLLIN);
}

/* Next async event (acked), -1 when none comes within ms. */
static int async_event(int ms, void **element)
{
	struct ibv_async_event ev;
	int type;

	if (!readable(dev.ctx->async_fd, ms) || ibv_get_async_event(dev.ctx, &ev))
		return -1;
	type = ev.event_type;
	if (element)
		*element = ev.element.qp;	/* the union's pointers share one slot */
	ibv_ack_async_event(&ev);
	return type;
}

static void async_drain(void)
{
	while (async_event(0, NULL) >= 0)
		;
}

/* ---- UC -------------------------------------------------------------------------------------- */
static void test_uc(void)
{
	struct vu_qp_cfg q;
	struct vu_pair p;
	struct ibv_wc wc;

	printf("UC\n");
	vu_qp_cfg_default(&q, IBV_QPT_UC);
	REQUIRE(vu_pair_create(&dev, &q, NULL, &p) == 0);
	vu_fill(lb.p, 10000, 1);
	memset(rb.p, 0, 65536);

	CHECK_EQ(vu_post_recv(p.qp[1], 1, rb.mr, rb.p, 16384), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 2, IBV_WR_SEND, lb.mr, lb.p, 10000, 0, 0), 0);
	WAIT_WC(p.scq[0], 2, IBV_WC_SUCCESS);
	wc = WAIT_WC(p.rcq[1], 1, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 10000);
	CHECK_PAT(rb.p, 10000, 1);

	CHECK_EQ(vu_post_recv(p.qp[1], 3, NULL, NULL, 0), 0);
	CHECK_EQ(vu_post_write_imm(p.qp[0], 4, lb.mr, lb.p, 5000, (uintptr_t)rb.p + 20000,
				   rb.mr->rkey, 0xfeed, 0), 0);
	WAIT_WC(p.scq[0], 4, IBV_WC_SUCCESS);
	wc = WAIT_WC(p.rcq[1], 3, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(wc.byte_len, 5000);
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
	CHECK_EQ(be32toh(wc.imm_data), 0xfeed);
	CHECK_PAT(rb.p + 20000, 5000, 1);

	/* Too long for the receive buffer: that receive fails with a length error, the sender
	 * knows nothing (UC has no responses), and the next message gets through. */
	memset(rb.p, 0, 65536);
	CHECK_EQ(vu_post_recv(p.qp[1], 5, rb.mr, rb.p, 1000), 0);
	CHECK_EQ(vu_post_recv(p.qp[1], 6, rb.mr, rb.p + 4096, 4096), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 7, IBV_WR_SEND, lb.mr, lb.p, 3000, 0, 0), 0);
	WAIT_WC(p.scq[0], 7, IBV_WC_SUCCESS);
	WAIT_WC(p.rcq[1], 5, IBV_WC_LOC_LEN_ERR);
	CHECK_EQ(vu_check_byte(rb.p + 1000, 3096, 0), -1);
	vu_fill(lb.p, 2000, 2);
	CHECK_EQ(vu_post_send(p.qp[0], 8, IBV_WR_SEND, lb.mr, lb.p, 2000, 0, 0), 0);
	WAIT_WC(p.scq[0], 8, IBV_WC_SUCCESS);
	wc = WAIT_WC(p.rcq[1], 6, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 2000);
	CHECK_PAT(rb.p + 4096, 2000, 2);
	CHECK_EQ(vu_qp_state(p.qp[1]), IBV_QPS_RTS);

	/* READ and atomics are not UC operations. */
	{
		struct ibv_send_wr wr, *bad;
		struct ibv_sge sge = { (uintptr_t)lb.p, 8, lb.mr->lkey };

		memset(&wr, 0, sizeof(wr));
		wr.opcode = IBV_WR_RDMA_READ;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.wr.rdma.remote_addr = (uintptr_t)rb.p;
		wr.wr.rdma.rkey = rb.mr->rkey;
		CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), EINVAL);
		wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), EINVAL);
	}
	vu_pair_destroy(&p);
}

/* ---- UD -------------------------------------------------------------------------------------- */
/* The GRH of a UD receive: for IPv4 the last 20 bytes are the sender's IPv4 header. */
static void check_grh(const uint8_t *grh, const union ibv_gid *src, const union ibv_gid *dst,
		      uint32_t paylen, int line)
{
	const uint8_t *ip = grh + 20;
	bool v4 = !memcmp(src->raw, "\0\0\0\0\0\0\0\0", 8) && src->raw[10] == 0xff &&
		  src->raw[11] == 0xff;

	if (!v4) {
		/* IPv6: the GRH is the IPv6 header itself. */
		if ((grh[0] >> 4) != 6 || memcmp(grh + 8, src->raw, 16) ||
		    memcmp(grh + 24, dst->raw, 16))
			SR_FAIL("line %d: IPv6 GRH wrong", line);
		return;
	}
	if (ip[0] != 0x45)
		SR_FAIL("line %d: GRH byte 20 is 0x%02x, not an IPv4 header (0x45)", line, ip[0]);
	if (ip[9] != 17)
		SR_FAIL("line %d: IPv4 protocol %u, not UDP", line, ip[9]);
	if (memcmp(ip + 12, src->raw + 12, 4))
		SR_FAIL("line %d: IPv4 source %u.%u.%u.%u is not the sender's", line, ip[12], ip[13],
			ip[14], ip[15]);
	if (memcmp(ip + 16, dst->raw + 12, 4))
		SR_FAIL("line %d: IPv4 destination %u.%u.%u.%u is not ours", line, ip[16], ip[17],
			ip[18], ip[19]);
	/* IP + UDP + BTH + DETH + payload + ICRC */
	if (((uint32_t)ip[2] << 8 | ip[3]) != 20 + 8 + 12 + 8 + paylen + 4)
		SR_FAIL("line %d: IPv4 total length %u for a %u-byte payload", line,
			(unsigned)ip[2] << 8 | ip[3], paylen);
}

static void test_ud(void)
{
	struct vu_qp_cfg q;
	struct vu_pair p;
	struct ibv_ah_attr aa, back;
	struct ibv_ah *ah, *reply;
	struct ibv_wc wc;
	const uint32_t n = 900;
	int64_t qkey_drops;

	printf("UD\n");
	vu_qp_cfg_default(&q, IBV_QPT_UD);
	REQUIRE(vu_pair_create(&dev, &q, NULL, &p) == 0);
	vu_ah_attr(&aa, &dev.gid);
	ah = ibv_create_ah(dev.pd, &aa);
	REQUIRE(ah);
	vu_fill(lb.p, n, 3);
	memset(rb.p, 0xcc, 8192);

	CHECK_EQ(vu_post_recv(p.qp[1], 1, rb.mr, rb.p, 40 + 2048), 0);
	CHECK_EQ(vu_post_ud(p.qp[0], 2, ah, p.qp[1]->qp_num, QKEY, lb.mr, lb.p, n, 0), 0);
	WAIT_WC(p.scq[0], 2, IBV_WC_SUCCESS);
	wc = WAIT_WC(p.rcq[1], 1, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 40 + n);
	CHECK(wc.wc_flags & IBV_WC_GRH);
	CHECK_EQ(wc.src_qp, p.qp[0]->qp_num);
	check_grh(rb.p, &dev.gid, &dev.gid, n, __LINE__);
	CHECK_PAT(rb.p + 40, n, 3);
	CHECK_EQ(vu_check_byte(rb.p + 40 + n, 100, 0xcc), -1);

	/* Answer the sender with an AH made from the completion. */
	CHECK_EQ(ibv_init_ah_from_wc(dev.ctx, 1, &wc, (struct ibv_grh *)rb.p, &back), 0);
	CHECK(back.is_global);
	CHECK(!memcmp(back.grh.dgid.raw, dev.gid.raw, 16));
	reply = ibv_create_ah_from_wc(dev.pd, &wc, (struct ibv_grh *)rb.p, 1);
	REQUIRE(reply);
	vu_fill(lb.p + 4096, 100, 4);
	CHECK_EQ(vu_post_recv(p.qp[0], 3, rb.mr, rb.p + 16384, 40 + 2048), 0);
	CHECK_EQ(vu_post_ud(p.qp[1], 4, reply, wc.src_qp, QKEY, lb.mr, lb.p + 4096, 100, 0), 0);
	WAIT_WC(p.scq[1], 4, IBV_WC_SUCCESS);
	wc = WAIT_WC(p.rcq[0], 3, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 140);
	CHECK_EQ(wc.src_qp, p.qp[1]->qp_num);
	CHECK_PAT(rb.p + 16384 + 40, 100, 4);

	/* A wrong Q_Key is dropped and counted; nothing completes. */
	qkey_drops = vu_stat("drop_qkey");
	CHECK_EQ(vu_post_recv(p.qp[1], 5, rb.mr, rb.p, 40 + 2048), 0);
	CHECK_EQ(vu_post_ud(p.qp[0], 6, ah, p.qp[1]->qp_num, QKEY + 1, lb.mr, lb.p, 10, 0), 0);
	WAIT_WC(p.scq[0], 6, IBV_WC_SUCCESS);
	CHECK_EQ(vu_drain(p.rcq[1], &wc, 1, 50), 0);
	CHECK_EQ(vu_stat("drop_qkey") - qkey_drops, 1);
	/* ... and the receive is still there for the next datagram. */
	CHECK_EQ(vu_post_ud(p.qp[0], 7, ah, p.qp[1]->qp_num, QKEY, lb.mr, lb.p, 10, 0), 0);
	WAIT_WC(p.scq[0], 7, IBV_WC_SUCCESS);
	wc = WAIT_WC(p.rcq[1], 5, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 50);

	/* A datagram larger than the receive buffer: local length error. */
	CHECK_EQ(vu_post_recv(p.qp[1], 8, rb.mr, rb.p, 40 + 100), 0);
	CHECK_EQ(vu_post_ud(p.qp[0], 9, ah, p.qp[1]->qp_num, QKEY, lb.mr, lb.p, 500, 0), 0);
	WAIT_WC(p.scq[0], 9, IBV_WC_SUCCESS);
	WAIT_WC(p.rcq[1], 8, IBV_WC_LOC_LEN_ERR);

	/* A datagram larger than the MTU cannot be posted. */
	{
		struct vu_buf big;

		REQUIRE(vu_buf_alloc(&dev, &big, 8192, IBV_ACCESS_LOCAL_WRITE) == 0);
		CHECK_EQ(vu_post_ud(p.qp[0], 10, ah, p.qp[1]->qp_num, QKEY, big.mr, big.p,
				    (128u << dev.active_mtu) + 1, 0), EINVAL);
		vu_buf_free(&big);
	}
	CHECK_EQ(vu_qp_state(p.qp[1]), IBV_QPS_RTS);
	CHECK_EQ(ibv_destroy_ah(reply), 0);
	CHECK_EQ(ibv_destroy_ah(ah), 0);
	vu_pair_destroy(&p);
}

/* UD between two processes: the child sends, the parent answers through an AH made from the
 * completion (the child's device may be at another address or port). */
struct ud_ep {
	union ibv_gid gid;
	uint32_t qpn;
};

static int ud_child(int sock, void *arg)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_ah_attr aa;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	struct ud_ep me, peer;
	uint8_t ok;

	(void)arg;
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 65536, VU_ACCESS_ALL) == 0);
	cq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	REQUIRE(cq);
	vu_qp_cfg_default(&q, IBV_QPT_UD);
	vu_conn_cfg_default(&c);
	qp = vu_qp_create(&dev, cq, cq, &q);
	REQUIRE(qp);
	REQUIRE(vu_qp_connect(qp, &c, NULL, 0) == 0);
	CHECK_EQ(vu_post_recv(qp, 1, lb.mr, lb.p + 8192, 40 + 1024), 0);
	me.gid = dev.gid;
	me.qpn = qp->qp_num;
	REQUIRE(vu_sock_send(sock, &me, sizeof(me)) == 0);
	REQUIRE(vu_sock_recv(sock, &peer, sizeof(peer)) == 0);
	vu_ah_attr(&aa, &peer.gid);
	ah = ibv_create_ah(dev.pd, &aa);
	REQUIRE(ah);
	vu_fill(lb.p, 500, 5);
	CHECK_EQ(vu_post_ud(qp, 2, ah, peer.qpn, QKEY, lb.mr, lb.p, 500, 0), 0);
	/* Two completions: our send and the answer. */
	for (int i = 0; i < 2; i++) {
		CHECK(vu_wait(cq, &wc, 5000));
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		if (wc.wr_id == 1) {
			CHECK_EQ(wc.byte_len, 40 + 300);
			CHECK_EQ(wc.src_qp, peer.qpn);
			check_grh(lb.p + 8192, &peer.gid, &dev.gid, 300, __LINE__);
			CHECK_PAT(lb.p + 8192 + 40, 300, 6);
		}
	}
	ok = sr_test_failures == 0;
	vu_sock_send(sock, &ok, 1);
	ibv_destroy_ah(ah);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	vu_buf_free(&lb);
	vu_close(&dev);
	return ok ? 0 : 1;
}

static void test_ud_two_processes(struct vu_child *child)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	struct ud_ep me, peer;
	uint8_t ok = 0;

	printf("UD between two processes\n");
	cq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	REQUIRE(cq);
	vu_qp_cfg_default(&q, IBV_QPT_UD);
	vu_conn_cfg_default(&c);
	qp = vu_qp_create(&dev, cq, cq, &q);
	REQUIRE(qp);
	REQUIRE(vu_qp_connect(qp, &c, NULL, 0) == 0);
	memset(rb.p, 0, 4096);
	CHECK_EQ(vu_post_recv(qp, 1, rb.mr, rb.p, 40 + 1024), 0);
	me.gid = dev.gid;
	me.qpn = qp->qp_num;
	REQUIRE(vu_sock_recv(child->sock, &peer, sizeof(peer)) == 0);
	REQUIRE(vu_sock_send(child->sock, &me, sizeof(me)) == 0);
	wc = WAIT_WC(cq, 1, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 540);
	CHECK_EQ(wc.src_qp, peer.qpn);
	check_grh(rb.p, &peer.gid, &dev.gid, 500, __LINE__);
	CHECK_PAT(rb.p + 40, 500, 5);
	ah = ibv_create_ah_from_wc(dev.pd, &wc, (struct ibv_grh *)rb.p, 1);
	REQUIRE(ah);
	vu_fill(lb.p, 300, 6);
	CHECK_EQ(vu_post_ud(qp, 2, ah, wc.src_qp, QKEY, lb.mr, lb.p, 300, 0), 0);
	WAIT_WC(cq, 2, IBV_WC_SUCCESS);
	CHECK_EQ(vu_sock_recv(child->sock, &ok, 1), 0);
	CHECK(ok);
	CHECK_EQ(ibv_destroy_ah(ah), 0);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
}

/* ---- SRQ -------------------------------------------------------------------------------------- */
static void test_srq(void)
{
	struct ibv_srq_init_attr sa;
	struct ibv_srq_attr attr;
	struct ibv_srq *srq;
	struct vu_qp_cfg q, qs;
	struct vu_conn_cfg c;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *snd[2], *rcv[2];
	struct ibv_wc wc;
	void *elem;
	int seen[2] = { 0, 0 };

	printf("SRQ\n");
	memset(&sa, 0, sizeof(sa));
	sa.attr.max_wr = 16;
	sa.attr.max_sge = 2;
	srq = ibv_create_srq(dev.pd, &sa);
	REQUIRE(srq);
	CHECK_EQ(ibv_query_srq(srq, &attr), 0);
	CHECK(attr.max_wr >= 16);
	CHECK_EQ(attr.srq_limit, 0);
	scq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	rcq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(scq && rcq);
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	qs = q;
	qs.srq = srq;
	vu_conn_cfg_default(&c);
	for (int i = 0; i < 2; i++) {
		snd[i] = vu_qp_create(&dev, scq, scq, &q);
		rcv[i] = vu_qp_create(&dev, scq, rcq, &qs);
		REQUIRE(snd[i] && rcv[i]);
		REQUIRE(vu_qp_connect(snd[i], &c, &dev.gid, rcv[i]->qp_num) == 0);
		REQUIRE(vu_qp_connect(rcv[i], &c, &dev.gid, snd[i]->qp_num) == 0);
	}
	/* A QP on an SRQ has no receive queue of its own. */
	CHECK(vu_post_recv(rcv[0], 99, rb.mr, rb.p, 64) != 0);

	async_drain();
	for (int i = 0; i < 8; i++)
		CHECK_EQ(vu_post_srq_recv(srq, 100 + i, rb.mr, rb.p + i * 8192, 8192), 0);
	/* Arm the limit at 4: nothing yet (8 queued). */
	attr.srq_limit = 4;
	CHECK_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), 0);
	CHECK_EQ(ibv_query_srq(srq, &attr), 0);
	CHECK_EQ(attr.srq_limit, 4);
	CHECK(!readable(dev.ctx->async_fd, 0));

	/* Messages from both senders, alternating, take the WQEs in order. */
	vu_fill(lb.p, 6 * 5000, 7);
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(vu_post_send(snd[i & 1], 200 + i, IBV_WR_SEND, lb.mr, lb.p + i * 5000,
				      4000 + i, 0, 0), 0);
		WAIT_WC(scq, 200 + i, IBV_WC_SUCCESS);
		wc = WAIT_WC(rcq, 100 + i, IBV_WC_SUCCESS);
		CHECK_EQ(wc.byte_len, 4000 + i);
		CHECK_EQ(wc.qp_num, rcv[i & 1]->qp_num);
		seen[i & 1]++;
		/* 4 left: not below the limit yet. */
	}
	{
		/* Each message's bytes, against the pattern at its source offset. */
		uint8_t *want = malloc(6 * 5000);

		REQUIRE(want);
		vu_fill(want, 6 * 5000, 7);
		for (int i = 0; i < 4; i++)
			CHECK(!memcmp(rb.p + i * 8192, want + i * 5000, 4000 + i));
		free(want);
	}
	CHECK(!readable(dev.ctx->async_fd, 20));
	/* The fifth takes the queue to 3 < 4: SRQ limit reached, the fd becomes readable. */
	CHECK_EQ(vu_post_send(snd[0], 204, IBV_WR_SEND, lb.mr, lb.p, 100, 0, 0), 0);
	WAIT_WC(scq, 204, IBV_WC_SUCCESS);
	WAIT_WC(rcq, 104, IBV_WC_SUCCESS);
	CHECK(readable(dev.ctx->async_fd, 1000));
	elem = NULL;
	CHECK_EQ(async_event(0, &elem), IBV_EVENT_SRQ_LIMIT_REACHED);
	CHECK(elem == srq);
	/* Disarmed by the event. */
	CHECK_EQ(ibv_query_srq(srq, &attr), 0);
	CHECK_EQ(attr.srq_limit, 0);
	CHECK_EQ(vu_post_send(snd[1], 205, IBV_WR_SEND, lb.mr, lb.p, 100, 0, 0), 0);
	WAIT_WC(scq, 205, IBV_WC_SUCCESS);
	wc = WAIT_WC(rcq, 105, IBV_WC_SUCCESS);
	CHECK_EQ(wc.qp_num, rcv[1]->qp_num);
	CHECK(!readable(dev.ctx->async_fd, 20));
	/* A limit at or above max_wr is refused. */
	attr.srq_limit = 100000;
	CHECK_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), EINVAL);

	/* A QP of an SRQ that goes to ERR says its last WQE was reached. */
	{
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

		CHECK_EQ(ibv_modify_qp(rcv[0], &a, IBV_QP_STATE), 0);
		elem = NULL;
		CHECK_EQ(async_event(1000, &elem), IBV_EVENT_QP_LAST_WQE_REACHED);
		CHECK(elem == rcv[0]);
	}
	/* The SRQ lives on for the other QP: the WQEs left are still there. */
	CHECK_EQ(vu_post_send(snd[1], 206, IBV_WR_SEND, lb.mr, lb.p, 100, 0, 0), 0);
	WAIT_WC(scq, 206, IBV_WC_SUCCESS);
	WAIT_WC(rcq, 106, IBV_WC_SUCCESS);

	async_drain();
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(ibv_destroy_qp(snd[i]), 0);
		CHECK_EQ(ibv_destroy_qp(rcv[i]), 0);
	}
	CHECK_EQ(ibv_destroy_srq(srq), 0);
	CHECK_EQ(ibv_destroy_cq(scq), 0);
	CHECK_EQ(ibv_destroy_cq(rcq), 0);
}

/* ---- completion channels ---------------------------------------------------------------------- */
static void test_channel(void)
{
	struct ibv_comp_channel *ch;
	struct ibv_cq *scq, *rcq, *evcq;
	struct ibv_qp *qp[2];
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct ibv_wc wc;
	void *ctxp;
	int cookie_s, cookie_r;

	printf("completion channel\n");
	ch = ibv_create_comp_channel(dev.ctx);
	REQUIRE(ch);
	{
		int fl = fcntl(ch->fd, F_GETFL);

		REQUIRE(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0);
	}
	scq = ibv_create_cq(dev.ctx, 64, &cookie_s, ch, 0);
	rcq = ibv_create_cq(dev.ctx, 64, &cookie_r, ch, 0);
	REQUIRE(scq && rcq);
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	vu_conn_cfg_default(&c);
	qp[0] = vu_qp_create(&dev, scq, rcq, &q);
	qp[1] = vu_qp_create(&dev, scq, rcq, &q);
	REQUIRE(qp[0] && qp[1]);
	REQUIRE(vu_qp_connect(qp[0], &c, &dev.gid, qp[1]->qp_num) == 0);
	REQUIRE(vu_qp_connect(qp[1], &c, &dev.gid, qp[0]->qp_num) == 0);

	/* Not armed: completions raise no event. */
	CHECK_EQ(vu_post_rdma(qp[0], 1, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 100, (uintptr_t)rb.p,
			      rb.mr->rkey, 0), 0);
	WAIT_WC(scq, 1, IBV_WC_SUCCESS);
	CHECK(!readable(ch->fd, 20));

	/* Armed: one event, poll() sees the fd readable, the event names the CQ. */
	CHECK_EQ(ibv_req_notify_cq(scq, 0), 0);
	CHECK(!readable(ch->fd, 0));
	vu_fill(lb.p, 100, 8);
	CHECK_EQ(vu_post_rdma(qp[0], 2, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 100, (uintptr_t)rb.p,
			      rb.mr->rkey, 0), 0);
	CHECK(readable(ch->fd, 2000));
	evcq = NULL;
	CHECK_EQ(ibv_get_cq_event(ch, &evcq, &ctxp), 0);
	CHECK(evcq == scq);
	CHECK(ctxp == &cookie_s);
	ibv_ack_cq_events(evcq, 1);
	WAIT_WC(scq, 2, IBV_WC_SUCCESS);
	CHECK_PAT(rb.p, 100, 8);
	/* One event per arming: another completion, no new event. */
	CHECK_EQ(vu_post_rdma(qp[0], 3, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 100, (uintptr_t)rb.p,
			      rb.mr->rkey, 0), 0);
	WAIT_WC(scq, 3, IBV_WC_SUCCESS);
	CHECK(!readable(ch->fd, 20));
	errno = 0;
	CHECK_EQ(ibv_get_cq_event(ch, &evcq, &ctxp), -1);
	CHECK_EQ(errno, EAGAIN);

	/* Solicited only: an ordinary SEND completes without an event, a solicited one raises it. */
	CHECK_EQ(ibv_req_notify_cq(rcq, 1), 0);
	CHECK_EQ(vu_post_recv(qp[1], 10, rb.mr, rb.p, 4096), 0);
	CHECK_EQ(vu_post_recv(qp[1], 11, rb.mr, rb.p + 4096, 4096), 0);
	CHECK_EQ(vu_post_send(qp[0], 12, IBV_WR_SEND, lb.mr, lb.p, 50, 0, 0), 0);
	WAIT_WC(scq, 12, IBV_WC_SUCCESS);
	WAIT_WC(rcq, 10, IBV_WC_SUCCESS);
	CHECK(!readable(ch->fd, 30));
	CHECK_EQ(vu_post_send(qp[0], 13, IBV_WR_SEND_WITH_IMM, lb.mr, lb.p, 60, 42,
			      IBV_SEND_SOLICITED), 0);
	CHECK(readable(ch->fd, 2000));
	evcq = NULL;
	CHECK_EQ(ibv_get_cq_event(ch, &evcq, &ctxp), 0);
	CHECK(evcq == rcq);
	CHECK(ctxp == &cookie_r);
	ibv_ack_cq_events(evcq, 1);
	wc = WAIT_WC(rcq, 11, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 60);
	WAIT_WC(scq, 13, IBV_WC_SUCCESS);

	/* A blocking wait: ibv_get_cq_event sleeps until the completion comes (the progress thread
	 * must deliver it: this thread is not polling). */
	{
		int fl = fcntl(ch->fd, F_GETFL);

		REQUIRE(fcntl(ch->fd, F_SETFL, fl & ~O_NONBLOCK) == 0);
	}
	CHECK_EQ(ibv_req_notify_cq(rcq, 0), 0);
	CHECK_EQ(vu_post_recv(qp[1], 14, rb.mr, rb.p, 4096), 0);
	CHECK_EQ(vu_post_send(qp[0], 15, IBV_WR_SEND, lb.mr, lb.p, 70, 0, 0), 0);
	evcq = NULL;
	CHECK_EQ(ibv_get_cq_event(ch, &evcq, &ctxp), 0);
	CHECK(evcq == rcq);
	ibv_ack_cq_events(evcq, 1);
	WAIT_WC(rcq, 14, IBV_WC_SUCCESS);
	WAIT_WC(scq, 15, IBV_WC_SUCCESS);

	CHECK_EQ(ibv_destroy_qp(qp[0]), 0);
	CHECK_EQ(ibv_destroy_qp(qp[1]), 0);
	CHECK_EQ(ibv_destroy_cq(scq), 0);
	CHECK_EQ(ibv_destroy_cq(rcq), 0);
	CHECK_EQ(ibv_destroy_comp_channel(ch), 0);
}

/* ---- CQ overrun ------------------------------------------------------------------------------ */
static void test_cq_overflow(void)
{
	struct vu_qp_cfg q;
	struct vu_pair p;
	struct ibv_wc wc[8];
	void *elem = NULL;
	int64_t lost = vu_stat("cq_overflow");
	int n;

	printf("CQ overrun\n");
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.cqe = 4;
	REQUIRE(vu_pair_create(&dev, &q, NULL, &p) == 0);
	async_drain();
	vu_fill(lb.p, 10 * 64, 9);
	for (int i = 0; i < 10; i++)
		CHECK_EQ(vu_post_rdma(p.qp[0], 50 + i, IBV_WR_RDMA_WRITE, lb.mr, lb.p + i * 64, 64,
				      (uintptr_t)rb.p + i * 64, rb.mr->rkey, 0), 0);
	/* Let all ten complete without polling. */
	CHECK(readable(dev.ctx->async_fd, 2000));
	CHECK_EQ(async_event(0, &elem), IBV_EVENT_CQ_ERR);
	CHECK(elem == p.scq[0]);
	vu_sleep_ms(50);
	CHECK(vu_stat("cq_overflow") - lost >= 1);
	/* What was queued before the overrun is intact: the first completions, in order. */
	n = ibv_poll_cq(p.scq[0], 8, wc);
	CHECK(n >= 1 && n <= p.scq[0]->cqe);
	for (int i = 0; i < n; i++) {
		CHECK_EQ(wc[i].wr_id, 50 + i);
		CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].opcode, IBV_WC_RDMA_WRITE);
		CHECK_EQ(wc[i].qp_num, p.qp[0]->qp_num);
	}
	CHECK_PAT(rb.p, 10 * 64, 9);	/* the data itself all landed */
	vu_pair_destroy(&p);
}

int main(void)
{
	struct vu_child child;

	sr_test_timeout(120);
	/* Fork first: the child opens its own device. */
	REQUIRE(vu_fork(&child, ud_child, NULL, 60) == 0);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, BUFSZ, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rb, BUFSZ, VU_ACCESS_ALL) == 0);
	{
		int fl = fcntl(dev.ctx->async_fd, F_GETFL);

		REQUIRE(fcntl(dev.ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
	}

	test_ud_two_processes(&child);
	CHECK_EQ(vu_child_wait(&child, 60), 0);
	test_uc();
	test_ud();
	test_srq();
	test_channel();
	test_cq_overflow();

	async_drain();
	vu_buf_free(&lb);
	vu_buf_free(&rb);
	vu_close(&dev);
	return sr_test_done("test_uc_ud_srq");
}
