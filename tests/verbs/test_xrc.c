/* SPDX-License-Identifier: MIT */
/*
 * XRC in one process: domains (private, by inode: the same inode gives the same domain, O_EXCL,
 * no O_CREAT), two XRC SRQs with their numbers and CQs, an XRC_SEND QP connected to an XRC_RECV
 * QP, SENDs routed to each SRQ by number (multi-packet, with immediate, through ibv_wr_* and
 * ibv_wr_set_xrc_srqn), RDMA WRITE and READ through XRC, the SRQ limit event of an XRC SRQ,
 * ibv_open_qp, bad arguments (EINVAL / EOPNOTSUPP / EBUSY), and last an SRQ number that is not
 * in the domain: NAK invalid request, both QPs in ERR (IBA 9.9.3.1).
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#define BUFSZ (64u << 10)

static struct vu_dev dev;
static struct vu_buf sb, rb;

#define WAIT_WC(cq, id, st) vu_expect_wc(cq, id, st, -1, 5000, __LINE__)

static int xsend(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode op, uint32_t srqn, void *addr,
		 uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t imm)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = sb.mr->lkey };
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.opcode = op;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htobe32(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	wr.qp_type.xrc.remote_srqn = srqn;
	return ibv_post_send(qp, &wr, &bad);
}

static int async_event(int ms, enum ibv_event_type *type, void **element)
{
	struct ibv_async_event ev;
	struct pollfd pfd = { .fd = dev.ctx->async_fd, .events = POLLIN };
	uint64_t end = vu_now_ms() + (uint64_t)ms;

	for (;;) {
		if (ibv_get_async_event(dev.ctx, &ev) == 0) {
			*type = ev.event_type;
			*element = ev.element.qp;
			ibv_ack_async_event(&ev);
			if (*type == IBV_EVENT_COMM_EST)
				continue;	/* the target's first packet in RTR */
			return 0;
		}
		if (vu_now_ms() >= end)
			return -1;
		poll(&pfd, 1, 10);
	}
}

static struct ibv_srq *xrc_srq(struct ibv_xrcd *x, struct ibv_cq *cq, uint32_t max_wr)
{
	struct ibv_srq_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.attr.max_wr = max_wr;
	a.attr.max_sge = 2;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
		      IBV_SRQ_INIT_ATTR_CQ;
	a.srq_type = IBV_SRQT_XRC;
	a.pd = dev.pd;
	a.xrcd = x;
	a.cq = cq;
	return ibv_create_srq_ex(dev.ctx, &a);
}

static void test_xrcd(void)
{
	struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
						    IBV_XRCD_INIT_ATTR_OFLAGS,
					.fd = -1 };
	struct ibv_xrcd *x1, *x2, *x3;
	char path[] = "/tmp/sr_xrc_XXXXXX";
	int fd = mkstemp(path);
	struct ibv_device_attr da;

	REQUIRE(ibv_query_device(dev.ctx, &da) == 0);
	CHECK(da.device_cap_flags & IBV_DEVICE_XRC);

	x1 = ibv_open_xrcd(dev.ctx, &a);
	REQUIRE(x1);
	CHECK_EQ(ibv_close_xrcd(x1), 0);

	a.comp_mask = IBV_XRCD_INIT_ATTR_FD;	/* oflags missing */
	errno = 0;
	CHECK(!ibv_open_xrcd(dev.ctx, &a) && errno == EINVAL);
	a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;

	REQUIRE(fd >= 0);
	a.fd = fd;
	a.oflags = 0;	/* no such domain and no O_CREAT */
	errno = 0;
	CHECK(!ibv_open_xrcd(dev.ctx, &a) && errno == EINVAL);
	a.oflags = O_CREAT;
	x1 = ibv_open_xrcd(dev.ctx, &a);
	REQUIRE(x1);
	{
		int fd2 = open(path, O_RDONLY);	/* the same inode through another fd */

		a.fd = fd2;
		a.oflags = 0;
		x2 = ibv_open_xrcd(dev.ctx, &a);
		CHECK(x2 == x1);
		a.oflags = O_CREAT | O_EXCL;
		errno = 0;
		x3 = ibv_open_xrcd(dev.ctx, &a);
		CHECK(!x3 && errno == EEXIST);
		close(fd2);
	}
	CHECK_EQ(ibv_close_xrcd(x2), 0);
	CHECK_EQ(ibv_close_xrcd(x1), 0);
	close(fd);
	unlink(path);
}

static void to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = VU_ACCESS_ALL };

	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS), 0);
}

static void test_xrc(void)
{
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
						     IBV_XRCD_INIT_ATTR_OFLAGS,
					 .fd = -1 };
	struct ibv_xrcd *xrcd = ibv_open_xrcd(dev.ctx, &xa), *other = ibv_open_xrcd(dev.ctx, &xa);
	struct ibv_cq *scq = ibv_create_cq(dev.ctx, 256, NULL, NULL, 0);
	struct ibv_cq *cqa = ibv_create_cq(dev.ctx, 256, NULL, NULL, 0);
	struct ibv_cq *cqb = ibv_create_cq(dev.ctx, 256, NULL, NULL, 0);
	struct ibv_srq *srqa, *srqb, *srqo, *basic;
	uint32_t na = 0, nb = 0, no = 0, n;
	struct ibv_qp *sqp, *rqp, *oqp;
	struct ibv_qp_init_attr_ex qa;
	struct ibv_qp_open_attr oa;
	struct ibv_qp_attr at;
	struct ibv_wc wc;

	REQUIRE(xrcd && other && scq && cqa && cqb);
	srqa = xrc_srq(xrcd, cqa, 16);
	srqb = xrc_srq(xrcd, cqb, 16);
	srqo = xrc_srq(other, cqb, 4);	/* an XRC SRQ of another domain */
	REQUIRE(srqa && srqb && srqo);
	CHECK_EQ(ibv_get_srq_num(srqa, &na), 0);
	CHECK_EQ(ibv_get_srq_num(srqb, &nb), 0);
	CHECK_EQ(ibv_get_srq_num(srqo, &no), 0);
	CHECK(na && nb && na != nb && no != na && no != nb);
	{
		struct ibv_srq_init_attr ba = { .attr = { .max_wr = 4, .max_sge = 1 } };

		basic = ibv_create_srq(dev.pd, &ba);
		REQUIRE(basic);
		CHECK_EQ(ibv_get_srq_num(basic, &n), EINVAL);
		CHECK_EQ(ibv_destroy_srq(basic), 0);
	}
	{
		struct ibv_srq_init_attr_ex a;

		memset(&a, 0, sizeof(a));
		a.attr.max_wr = 4;
		a.attr.max_sge = 1;
		a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD;
		a.srq_type = IBV_SRQT_XRC;
		a.pd = dev.pd;
		a.xrcd = xrcd;	/* no CQ */
		errno = 0;
		CHECK(!ibv_create_srq_ex(dev.ctx, &a) && errno == EINVAL);
		a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TM;
		a.srq_type = IBV_SRQT_TM;
		errno = 0;
		CHECK(!ibv_create_srq_ex(dev.ctx, &a) && errno == EOPNOTSUPP);
	}
	CHECK_EQ(ibv_close_xrcd(xrcd), EBUSY);	/* its SRQs are alive */

	/* The initiator: PD and send CQ; the target: the domain only. */
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_XRC_SEND;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qa.pd = dev.pd;
	qa.send_cq = scq;
	qa.cap.max_send_wr = 32;
	qa.cap.max_send_sge = 2;
	qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_WRITE;
	sqp = ibv_create_qp_ex(dev.ctx, &qa);
	REQUIRE(sqp);
	CHECK_EQ(qa.cap.max_recv_wr, 0);
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_XRC_RECV;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD;	/* no XRCD */
	qa.pd = dev.pd;
	errno = 0;
	CHECK(!ibv_create_qp_ex(dev.ctx, &qa) && errno == EINVAL);
	qa.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	qa.xrcd = xrcd;
	rqp = ibv_create_qp_ex(dev.ctx, &qa);
	REQUIRE(rqp);

	/* IBA state machine, XRC_TGT column: RTR needs MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER. */
	to_init(sqp);
	to_init(rqp);
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = sqp->qp_num;
	at.rq_psn = 100;
	at.max_dest_rd_atomic = 4;
	at.min_rnr_timer = 1;
	vu_ah_attr(&at.ah_attr, &dev.gid);
	CHECK_EQ(ibv_modify_qp(rqp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN),
		 EINVAL);
	CHECK_EQ(ibv_modify_qp(rqp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
		 0);
	at.dest_qp_num = rqp->qp_num;
	at.rq_psn = 7;
	/* XRC_INI: no RQ_PSN is an error; the responder's attributes are ignored (as the
	 * kernel's uverbs modify_qp_mask does), so an RC-style mask works. */
	CHECK_EQ(ibv_modify_qp(sqp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						 IBV_QP_DEST_QPN),
		 EINVAL);
	CHECK_EQ(ibv_modify_qp(sqp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
		 0);
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.sq_psn = 100;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.max_rd_atomic = 4;
	CHECK_EQ(ibv_modify_qp(sqp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
						 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						 IBV_QP_MAX_QP_RD_ATOMIC),
		 0);
	CHECK_EQ(vu_qp_state(sqp), IBV_QPS_RTS);
	CHECK_EQ(vu_qp_state(rqp), IBV_QPS_RTR);

	/* ibv_open_qp: the target by number, in its domain only. */
	memset(&oa, 0, sizeof(oa));
	oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	oa.qp_num = rqp->qp_num;
	oa.xrcd = xrcd;
	oa.qp_type = IBV_QPT_XRC_RECV;
	oqp = ibv_open_qp(dev.ctx, &oa);
	REQUIRE(oqp);
	CHECK_EQ(oqp->qp_num, rqp->qp_num);
	oa.xrcd = other;
	errno = 0;
	CHECK(!ibv_open_qp(dev.ctx, &oa) && errno == EINVAL);
	oa.xrcd = xrcd;
	oa.qp_num = sqp->qp_num;	/* not a target */
	errno = 0;
	CHECK(!ibv_open_qp(dev.ctx, &oa) && errno == EINVAL);
	CHECK_EQ(ibv_destroy_qp(oqp), 0);	/* one handle gone: the QP lives on */

	/* Receives go to XRC SRQs only; an XRC target sends nothing. */
	{
		struct ibv_recv_wr rw = { .wr_id = 1 }, *rbad;

		CHECK_EQ(ibv_post_recv(rqp, &rw, &rbad), EINVAL);
		CHECK_EQ(ibv_post_recv(sqp, &rw, &rbad), EINVAL);
		CHECK_EQ(xsend(rqp, 1, IBV_WR_SEND, na, sb.p, 4, 0, 0, 0), EINVAL);
	}

	/* SENDs routed by SRQ number; each completes on its SRQ's CQ. */
	vu_fill(sb.p, BUFSZ, 11);
	CHECK_EQ(vu_post_srq_recv(srqa, 101, rb.mr, rb.p, 8192), 0);
	CHECK_EQ(vu_post_srq_recv(srqb, 201, rb.mr, rb.p + 8192, 8192), 0);
	CHECK_EQ(xsend(sqp, 1, IBV_WR_SEND, na, sb.p, 3000, 0, 0, 0), 0);
	CHECK_EQ(xsend(sqp, 2, IBV_WR_SEND_WITH_IMM, nb, sb.p + 3000, 100, 0, 0, 0xabcd), 0);
	WAIT_WC(scq, 1, IBV_WC_SUCCESS);
	WAIT_WC(scq, 2, IBV_WC_SUCCESS);
	wc = WAIT_WC(cqa, 101, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 3000);
	CHECK_EQ(wc.opcode, IBV_WC_RECV);
	CHECK_EQ(wc.qp_num, rqp->qp_num);
	CHECK_EQ(memcmp(rb.p, sb.p, 3000), 0);
	wc = WAIT_WC(cqb, 201, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 100);
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
	CHECK_EQ(be32toh(wc.imm_data), 0xabcd);
	CHECK_EQ(memcmp(rb.p + 8192, sb.p + 3000, 100), 0);
	CHECK_EQ(vu_poll(cqa, &wc, 1, 50), 0);	/* nothing crossed over */
	CHECK_EQ(vu_poll(cqb, &wc, 1, 50), 0);

	/* RDMA WRITE and READ through XRC: rkeys are checked against the SRQ's PD. */
	CHECK_EQ(xsend(sqp, 3, IBV_WR_RDMA_WRITE, na, sb.p + 4096, 5000,
		       (uintptr_t)rb.p + 20000, rb.mr->rkey, 0), 0);
	WAIT_WC(scq, 3, IBV_WC_SUCCESS);
	CHECK_EQ(memcmp(rb.p + 20000, sb.p + 4096, 5000), 0);
	memset(sb.p + 40000, 0, 5000);
	CHECK_EQ(xsend(sqp, 4, IBV_WR_RDMA_READ, nb, sb.p + 40000, 5000,
		       (uintptr_t)rb.p + 20000, rb.mr->rkey, 0), 0);
	wc = WAIT_WC(scq, 4, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
	CHECK_EQ(memcmp(sb.p + 40000, sb.p + 4096, 5000), 0);

	/* ibv_wr_* with ibv_wr_set_xrc_srqn. */
	{
		struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(sqp);

		REQUIRE(qx);
		CHECK_EQ(vu_post_srq_recv(srqb, 202, rb.mr, rb.p + 30000, 4096), 0);
		ibv_wr_start(qx);
		qx->wr_id = 5;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(qx);
		ibv_wr_set_xrc_srqn(qx, nb);
		ibv_wr_set_sge(qx, sb.mr->lkey, (uintptr_t)sb.p + 100, 1500);
		CHECK_EQ(ibv_wr_complete(qx), 0);
		WAIT_WC(scq, 5, IBV_WC_SUCCESS);
		wc = WAIT_WC(cqb, 202, IBV_WC_SUCCESS);
		CHECK_EQ(wc.byte_len, 1500);
		CHECK_EQ(memcmp(rb.p + 30000, sb.p + 100, 1500), 0);
	}

	/* The SRQ limit event of an XRC SRQ. */
	{
		struct ibv_srq_attr sa = { .srq_limit = 2 };
		enum ibv_event_type type;
		void *el;

		for (int i = 0; i < 2; i++)
			CHECK_EQ(vu_post_srq_recv(srqa, 300 + i, rb.mr, rb.p + 40000 + i * 1024, 1024), 0);
		CHECK_EQ(ibv_modify_srq(srqa, &sa, IBV_SRQ_LIMIT), 0);
		CHECK_EQ(xsend(sqp, 6, IBV_WR_SEND, na, sb.p, 10, 0, 0, 0), 0);
		WAIT_WC(scq, 6, IBV_WC_SUCCESS);
		WAIT_WC(cqa, 300, IBV_WC_SUCCESS);
		CHECK_EQ(async_event(2000, &type, &el), 0);
		CHECK_EQ(type, IBV_EVENT_SRQ_LIMIT_REACHED);
		CHECK(el == srqa);
	}

	/* A SEND to an SRQ of another domain: NAK invalid request, both QPs to ERR. */
	{
		int64_t naks = vu_stat("inv_req_naks_sent");
		enum ibv_event_type type;
		void *el;

		CHECK_EQ(xsend(sqp, 7, IBV_WR_SEND, no, sb.p, 10, 0, 0, 0), 0);
		WAIT_WC(scq, 7, IBV_WC_REM_INV_REQ_ERR);
		CHECK_EQ(vu_stat("inv_req_naks_sent"), naks + 1);
		CHECK_EQ(vu_qp_state(sqp), IBV_QPS_ERR);
		CHECK_EQ(vu_qp_state(rqp), IBV_QPS_ERR);
		CHECK_EQ(async_event(2000, &type, &el), 0);
		CHECK_EQ(type, IBV_EVENT_QP_REQ_ERR);
		CHECK(el == rqp);
		/* The receive posted on srqa stays there (the SRQ is not the QP's). */
		CHECK_EQ(vu_poll(cqa, &wc, 1, 50), 0);
	}

	CHECK_EQ(ibv_destroy_qp(sqp), 0);
	CHECK_EQ(ibv_destroy_qp(rqp), 0);
	CHECK_EQ(ibv_destroy_srq(srqa), 0);
	CHECK_EQ(ibv_destroy_srq(srqb), 0);
	CHECK_EQ(ibv_destroy_srq(srqo), 0);
	CHECK_EQ(ibv_close_xrcd(xrcd), 0);
	CHECK_EQ(ibv_close_xrcd(other), 0);
	CHECK_EQ(ibv_destroy_cq(cqa), 0);
	CHECK_EQ(ibv_destroy_cq(cqb), 0);
	CHECK_EQ(ibv_destroy_cq(scq), 0);
}

int main(void)
{
	sr_test_timeout(60);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &sb, BUFSZ, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rb, BUFSZ, VU_ACCESS_ALL) == 0);
	{
		int fl = fcntl(dev.ctx->async_fd, F_GETFL);

		REQUIRE(fcntl(dev.ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
	}
	test_xrcd();
	test_xrc();
	vu_buf_free(&sb);
	vu_buf_free(&rb);
	vu_close(&dev);
	return sr_test_done("test_xrc");
}
