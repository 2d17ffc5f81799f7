/* SPDX-License-Identifier: MIT */
/*
 * Every RC operation through the public verbs, between two QPs of one process, checking the
 * bytes that arrived (and the bytes around them that must not change), not only the statuses:
 * WRITE, WRITE_WITH_IMM, READ, SEND, SEND_WITH_IMM, both atomics; scatter/gather on both ends;
 * inline data; zero-length messages; messages of many MTUs; unsignaled WRs; a fence after a
 * READ; max_rd_atomic 1 with many READs outstanding; the ibv_wr_* API and the extended CQ.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <endian.h>
#include <errno.h>

#define GUARD 0xee		/* bytes that must stay as they were */
#define BIG ((1u << 20) + 17)	/* 1 MiB + 17: many MTUs, and a short last packet */
#define BUFSZ (2u << 20)

static struct vu_dev dev;
static struct vu_buf lb, rb;	/* local (requester) and remote (responder) memory */

/* One completion, successful, with this wr_id and opcode; the caller's line in the message. */
#define WAIT_OK(cq, id, op) wait_ok(cq, id, op, __LINE__)
static struct ibv_wc wait_ok(struct ibv_cq *cq, uint64_t wr_id, int opcode, int line)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	if (!vu_wait(cq, &wc, 5000)) {
		SR_FAIL("line %d: no completion for wr_id %llu", line, (unsigned long long)wr_id);
		wc.status = IBV_WC_GENERAL_ERR;
		return wc;
	}
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id || (int)wc.opcode != opcode)
		SR_FAIL("line %d: expected wr_id %llu opcode %d success, got %s", line,
			(unsigned long long)wr_id, opcode, vu_wc_str(&wc));
	return wc;
}

/* Nothing more arrives on cq for a while. */
#define EXPECT_NONE(cq) expect_none(cq, __LINE__)
static void expect_none(struct ibv_cq *cq, int line)
{
	struct ibv_wc wc;
	int n = vu_drain(cq, &wc, 1, 30);

	if (n)
		SR_FAIL("line %d: %d unexpected completion(s), first %s", line, n, vu_wc_str(&wc));
}

/* buf[off, off + len) holds vu_fill(seed) bytes starting at pattern offset poff. */
#define CHECK_DATA(buf, len, seed, poff) check_data(buf, len, seed, poff, __LINE__)
static void check_data(const uint8_t *buf, size_t len, uint32_t seed, size_t poff, int line)
{
	static uint8_t *want;
	static size_t wantlen;

	if (wantlen < poff + len) {
		free(want);
		wantlen = poff + len;
		want = malloc(wantlen);
		REQUIRE(want);
	}
	vu_fill(want, poff + len, seed);
	for (size_t i = 0; i < len; i++)
		if (buf[i] != want[poff + i]) {
			SR_FAIL("line %d: byte %zu of %zu is 0x%02x, expected 0x%02x", line, i, len,
				buf[i], want[poff + i]);
			return;
		}
}

#define CHECK_GUARD(buf, len) check_guard(buf, len, __LINE__)
static void check_guard(const uint8_t *buf, size_t len, int line)
{
	long at = vu_check_byte(buf, len, GUARD);

	if (at >= 0)
		SR_FAIL("line %d: guard byte %ld of %zu changed to 0x%02x", line, at, len, buf[at]);
}

static void reset_bufs(void)
{
	memset(lb.p, GUARD, lb.len);
	memset(rb.p, GUARD, rb.len);
}

static void make_pair(struct vu_pair *p, enum ibv_mtu mtu)
{
	struct vu_conn_cfg c;

	vu_conn_cfg_default(&c);
	c.mtu = mtu;
	REQUIRE(vu_pair_create(&dev, NULL, &c, p) == 0);
}

/* ---- the basic operations ---------------------------------------------------------------- */
static void test_write(void)
{
	struct vu_pair p;
	struct ibv_wc wc;

	make_pair(&p, IBV_MTU_1024);
	reset_bufs();
	vu_fill(lb.p + 123, 5000, 1);
	CHECK_EQ(vu_post_rdma(p.qp[0], 11, IBV_WR_RDMA_WRITE, lb.mr, lb.p + 123, 5000,
			      (uintptr_t)rb.p + 77, rb.mr->rkey, IBV_SEND_SIGNALED), 0);
	wc = WAIT_OK(p.scq[0], 11, IBV_WC_RDMA_WRITE);
	CHECK_EQ(wc.qp_num, p.qp[0]->qp_num);
	CHECK_DATA(rb.p + 77, 5000, 1, 0);
	CHECK_GUARD(rb.p, 77);
	CHECK_GUARD(rb.p + 77 + 5000, 4096);
	EXPECT_NONE(p.rcq[1]);	/* a plain WRITE consumes no receive WQE and completes nothing */
	vu_pair_destroy(&p);
}

static void test_write_imm(void)
{
	struct vu_pair p;
	struct ibv_wc wc;
	uint8_t rq[64];

	make_pair(&p, IBV_MTU_1024);
	reset_bufs();
	memset(rq, GUARD, sizeof(rq));
	vu_fill(lb.p, 3000, 2);
	/* The receive WQE is consumed but its buffer is not written. */
	CHECK_EQ(vu_post_recv(p.qp[1], 21, NULL, NULL, 0), 0);
	CHECK_EQ(vu_post_write_imm(p.qp[0], 22, lb.mr, lb.p, 3000, (uintptr_t)rb.p + 5,
				   rb.mr->rkey, 0x12345678, 0), 0);
	wc = WAIT_OK(p.rcq[1], 21, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(wc.byte_len, 3000);
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
	CHECK_EQ(be32toh(wc.imm_data), 0x12345678);
	CHECK_EQ(wc.qp_num, p.qp[1]->qp_num);
	CHECK_EQ(wc.src_qp, p.qp[0]->qp_num);
	WAIT_OK(p.scq[0], 22, IBV_WC_RDMA_WRITE);
	CHECK_DATA(rb.p + 5, 3000, 2, 0);
	CHECK_GUARD(rb.p, 5);
	CHECK_GUARD(rb.p + 3005, 1000);
	vu_pair_destroy(&p);
}

static void test_read(void)
{
	struct vu_pair p;
	struct ibv_wc wc;

	make_pair(&p, IBV_MTU_1024);
	reset_bufs();
	vu_fill(rb.p + 999, 7000, 3);
	CHECK_EQ(vu_post_rdma(p.qp[0], 31, IBV_WR_RDMA_READ, lb.mr, lb.p + 1, 7000,
			      (uintptr_t)rb.p + 999, rb.mr->rkey, 0), 0);
	wc = WAIT_OK(p.scq[0], 31, IBV_WC_RDMA_READ);
	CHECK_EQ(wc.byte_len, 7000);
	CHECK_DATA(lb.p + 1, 7000, 3, 0);
	CHECK_GUARD(lb.p, 1);
	CHECK_GUARD(lb.p + 7001, 4096);
	vu_pair_destroy(&p);
}

static void test_send(bool imm)
{
	struct vu_pair p;
	struct ibv_wc wc;

	make_pair(&p, IBV_MTU_1024);
	reset_bufs();
	vu_fill(lb.p, 4000, 4);
	CHECK_EQ(vu_post_recv(p.qp[1], 41, rb.mr, rb.p, 8192), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 42, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, lb.mr, lb.p,
			      4000, 0xcafef00d, 0), 0);
	wc = WAIT_OK(p.rcq[1], 41, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 4000);
	CHECK_EQ(wc.qp_num, p.qp[1]->qp_num);
	CHECK_EQ(wc.src_qp, p.qp[0]->qp_num);
	if (imm) {
		CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
		CHECK_EQ(be32toh(wc.imm_data), 0xcafef00d);
	} else {
		CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM));
	}
	wc = WAIT_OK(p.scq[0], 42, IBV_WC_SEND);
	CHECK_DATA(rb.p, 4000, 4, 0);
	CHECK_GUARD(rb.p + 4000, 4192);
	vu_pair_destroy(&p);
}

static void test_atomics(void)
{
	struct vu_pair p;
	struct ibv_wc wc;
	uint64_t *target = (uint64_t *)(rb.p + 64), *res = (uint64_t *)(lb.p + 8);

	make_pair(&p, IBV_MTU_1024);
	reset_bufs();
	*target = 100;

	/* Compare matches: swapped, the original comes back. */
	*res = 0;
	CHECK_EQ(vu_post_atomic(p.qp[0], 51, IBV_WR_ATOMIC_CMP_AND_SWP, lb.mr, res,
				(uintptr_t)target, rb.mr->rkey, 100, 200, 0), 0);
	wc = WAIT_OK(p.scq[0], 51, IBV_WC_COMP_SWAP);
	CHECK_EQ(wc.byte_len, 8);
	CHECK_EQ(*res, 100);
	CHECK_EQ(*target, 200);

	/* Compare fails: memory unchanged, the current value comes back. */
	*res = 0;
	CHECK_EQ(vu_post_atomic(p.qp[0], 52, IBV_WR_ATOMIC_CMP_AND_SWP, lb.mr, res,
				(uintptr_t)target, rb.mr->rkey, 100, 300, 0), 0);
	WAIT_OK(p.scq[0], 52, IBV_WC_COMP_SWAP);
	CHECK_EQ(*res, 200);
	CHECK_EQ(*target, 200);

	/* Fetch and add, then one that wraps around 2^64. */
	CHECK_EQ(vu_post_atomic(p.qp[0], 53, IBV_WR_ATOMIC_FETCH_AND_ADD, lb.mr, res,
				(uintptr_t)target, rb.mr->rkey, 5, 0, 0), 0);
	wc = WAIT_OK(p.scq[0], 53, IBV_WC_FETCH_ADD);
	CHECK_EQ(wc.byte_len, 8);
	CHECK_EQ(*res, 200);
	CHECK_EQ(*target, 205);
	*target = UINT64_MAX - 1;
	CHECK_EQ(vu_post_atomic(p.qp[0], 54, IBV_WR_ATOMIC_FETCH_AND_ADD, lb.mr, res,
				(uintptr_t)target, rb.mr->rkey, 3, 0, 0), 0);
	WAIT_OK(p.scq[0], 54, IBV_WC_FETCH_ADD);
	CHECK_EQ(*res, UINT64_MAX - 1);
	CHECK_EQ(*target, 1);
	/* Full 64-bit values, no truncation or byte swap on the way. */
	*target = 0x0123456789abcdefull;
	CHECK_EQ(vu_post_atomic(p.qp[0], 55, IBV_WR_ATOMIC_CMP_AND_SWP, lb.mr, res,
				(uintptr_t)target, rb.mr->rkey, 0x0123456789abcdefull,
				0xfedcba9876543210ull, 0), 0);
	WAIT_OK(p.scq[0], 55, IBV_WC_COMP_SWAP);
	CHECK_EQ(*res, 0x0123456789abcdefull);
	CHECK_EQ(*target, 0xfedcba9876543210ull);
	CHECK_GUARD(rb.p, 64);
	CHECK_GUARD(rb.p + 72, 64);
	CHECK_GUARD(lb.p, 8);
	CHECK_GUARD(lb.p + 16, 64);
	vu_pair_destroy(&p);
}

/* ---- scatter/gather ------------------------------------------------------------------------ */
static void test_sge(void)
{
	struct vu_pair p;
	struct ibv_wc wc;
	struct ibv_send_wr wr, *bad;
	struct ibv_recv_wr rwr, *rbad;
	/* Three gather pieces from scattered spots of lb: 100 + 1 + 2900 = 3001 bytes. */
	static const uint32_t g_off[3] = { 10, 5000, 9000 }, g_len[3] = { 100, 1, 2900 };
	/* Four scatter pieces at rb: 7 + 1500 + 1000 + 2000 (more room than needed). */
	static const uint32_t s_off[4] = { 3, 20000, 30001, 40000 }, s_len[4] = { 7, 1500, 1000, 2000 };
	struct ibv_sge g[3], s[4];
	uint8_t msg[3001];
	size_t pos = 0;

	make_pair(&p, IBV_MTU_1024);
	reset_bufs();
	vu_fill(msg, sizeof(msg), 5);
	for (int i = 0; i < 3; i++) {
		memcpy(lb.p + g_off[i], msg + pos, g_len[i]);
		pos += g_len[i];
		g[i] = (struct ibv_sge){ (uintptr_t)lb.p + g_off[i], g_len[i], lb.mr->lkey };
	}
	for (int i = 0; i < 4; i++)
		s[i] = (struct ibv_sge){ (uintptr_t)rb.p + s_off[i], s_len[i], rb.mr->lkey };

	/* SEND 3 SGEs into a receive of 4 SGEs. */
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 61;
	rwr.sg_list = s;
	rwr.num_sge = 4;
	CHECK_EQ(ibv_post_recv(p.qp[1], &rwr, &rbad), 0);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 62;
	wr.opcode = IBV_WR_SEND;
	wr.sg_list = g;
	wr.num_sge = 3;
	CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), 0);
	wc = WAIT_OK(p.rcq[1], 61, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 3001);
	WAIT_OK(p.scq[0], 62, IBV_WC_SEND);
	/* 7 | 1500 | 1000 | 494 of the 2000 */
	pos = 0;
	for (int i = 0; i < 4; i++) {
		size_t n = s_len[i] < sizeof(msg) - pos ? s_len[i] : sizeof(msg) - pos;

		CHECK_DATA(rb.p + s_off[i], n, 5, pos);
		pos += n;
		CHECK_GUARD(rb.p + s_off[i] + n, s_len[i] - n + 8);
		CHECK_GUARD(rb.p + s_off[i] - 3, 3);
	}
	CHECK_EQ(pos, 3001);

	/* WRITE gathers the same 3 SGEs to one contiguous remote range. */
	reset_bufs();
	pos = 0;
	for (int i = 0; i < 3; i++) {
		memcpy(lb.p + g_off[i], msg + pos, g_len[i]);
		pos += g_len[i];
	}
	wr.wr_id = 63;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)rb.p + 100000;
	wr.wr.rdma.rkey = rb.mr->rkey;
	CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), 0);
	WAIT_OK(p.scq[0], 63, IBV_WC_RDMA_WRITE);
	CHECK_DATA(rb.p + 100000, 3001, 5, 0);
	CHECK_GUARD(rb.p + 103001, 64);

	/* READ scatters one remote range into 4 local SGEs (uneven: 7, 1500, 1000, 494). */
	reset_bufs();
	vu_fill(rb.p + 200000, 3001, 6);
	for (int i = 0; i < 4; i++)
		s[i] = (struct ibv_sge){ (uintptr_t)lb.p + s_off[i], i == 3 ? 494 : s_len[i],
					 lb.mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 64;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.sg_list = s;
	wr.num_sge = 4;
	wr.wr.rdma.remote_addr = (uintptr_t)rb.p + 200000;
	wr.wr.rdma.rkey = rb.mr->rkey;
	CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), 0);
	wc = WAIT_OK(p.scq[0], 64, IBV_WC_RDMA_READ);
	CHECK_EQ(wc.byte_len, 3001);
	pos = 0;
	for (int i = 0; i < 4; i++) {
		CHECK_DATA(lb.p + s_off[i], s[i].length, 6, pos);
		CHECK_GUARD(lb.p + s_off[i] + s[i].length, 16);
		pos += s[i].length;
	}
	vu_pair_destroy(&p);
}

/* ---- inline --------------------------------------------------------------------------------- */
static void test_inline(void)
{
	struct vu_pair p;
	struct ibv_wc wc;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge[2];
	uint8_t data[200], data2[50];	/* not registered: inline needs no key */

	make_pair(&p, IBV_MTU_1024);
	reset_bufs();
	vu_fill(data, sizeof(data), 7);
	vu_fill(data2, sizeof(data2), 8);
	CHECK_EQ(vu_post_recv(p.qp[1], 71, rb.mr, rb.p, 4096), 0);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 72;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_INLINE;
	sge[0] = (struct ibv_sge){ (uintptr_t)data, sizeof(data), 0 };
	sge[1] = (struct ibv_sge){ (uintptr_t)data2, sizeof(data2), 0 };
	wr.sg_list = sge;
	wr.num_sge = 2;
	CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), 0);
	/* The data sent is the data at post time. */
	memset(data, 0x5a, sizeof(data));
	memset(data2, 0x5a, sizeof(data2));
	wc = WAIT_OK(p.rcq[1], 71, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 250);
	WAIT_OK(p.scq[0], 72, IBV_WC_SEND);
	CHECK_DATA(rb.p, 200, 7, 0);
	CHECK_DATA(rb.p + 200, 50, 8, 0);
	CHECK_GUARD(rb.p + 250, 100);

	/* Inline WRITE, likewise. */
	vu_fill(data, sizeof(data), 9);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 73;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_INLINE;
	sge[0] = (struct ibv_sge){ (uintptr_t)data, sizeof(data), 0 };
	wr.sg_list = sge;
	wr.num_sge = 1;
	wr.wr.rdma.remote_addr = (uintptr_t)rb.p + 8000;
	wr.wr.rdma.rkey = rb.mr->rkey;
	CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), 0);
	memset(data, 0x5a, sizeof(data));
	WAIT_OK(p.scq[0], 73, IBV_WC_RDMA_WRITE);
	CHECK_DATA(rb.p + 8000, 200, 9, 0);
	CHECK_GUARD(rb.p + 8200, 100);

	/* More than max_inline_data: refused at post time, nothing sent. */
	{
		static uint8_t big[4096];
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;

		CHECK_EQ(ibv_query_qp(p.qp[0], &a, IBV_QP_CAP, &ia), 0);
		CHECK(a.cap.max_inline_data >= 250);
		sge[0] = (struct ibv_sge){ (uintptr_t)big, a.cap.max_inline_data + 1, 0 };
		wr.wr_id = 74;
		CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), EINVAL);
		CHECK(bad == &wr);
		EXPECT_NONE(p.scq[0]);
	}
	vu_pair_destroy(&p);
}

/* ---- zero-length ---------------------------------------------------------------------------- */
static void test_zero_length(void)
{
	struct vu_pair p;
	struct ibv_wc wc;

	make_pair(&p, IBV_MTU_1024);
	reset_bufs();
	CHECK_EQ(vu_post_recv(p.qp[1], 81, rb.mr, rb.p, 64), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 82, IBV_WR_SEND, NULL, NULL, 0, 0, 0), 0);
	wc = WAIT_OK(p.rcq[1], 81, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 0);
	WAIT_OK(p.scq[0], 82, IBV_WC_SEND);
	/* With an SGE of length 0, too. */
	CHECK_EQ(vu_post_recv(p.qp[1], 83, rb.mr, rb.p, 64), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 84, IBV_WR_SEND_WITH_IMM, lb.mr, lb.p, 0, 77, 0), 0);
	wc = WAIT_OK(p.rcq[1], 83, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 0);
	CHECK_EQ(be32toh(wc.imm_data), 77);
	WAIT_OK(p.scq[0], 84, IBV_WC_SEND);

	CHECK_EQ(vu_post_rdma(p.qp[0], 85, IBV_WR_RDMA_WRITE, NULL, NULL, 0, (uintptr_t)rb.p,
			      rb.mr->rkey, 0), 0);
	WAIT_OK(p.scq[0], 85, IBV_WC_RDMA_WRITE);
	CHECK_EQ(vu_post_rdma(p.qp[0], 86, IBV_WR_RDMA_READ, NULL, NULL, 0, (uintptr_t)rb.p,
			      rb.mr->rkey, 0), 0);
	wc = WAIT_OK(p.scq[0], 86, IBV_WC_RDMA_READ);
	CHECK_EQ(wc.byte_len, 0);
	CHECK_EQ(vu_post_recv(p.qp[1], 87, NULL, NULL, 0), 0);
	CHECK_EQ(vu_post_write_imm(p.qp[0], 88, NULL, NULL, 0, (uintptr_t)rb.p, rb.mr->rkey, 5,
				   0), 0);
	wc = WAIT_OK(p.rcq[1], 87, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(wc.byte_len, 0);
	CHECK_EQ(be32toh(wc.imm_data), 5);
	WAIT_OK(p.scq[0], 88, IBV_WC_RDMA_WRITE);
	CHECK_GUARD(rb.p, 8192);
	CHECK_GUARD(lb.p, 8192);
	/* The QPs are still fine. */
	CHECK_EQ(vu_qp_state(p.qp[0]), IBV_QPS_RTS);
	CHECK_EQ(vu_qp_state(p.qp[1]), IBV_QPS_RTS);
	vu_pair_destroy(&p);
}

/* ---- many MTUs -------------------------------------------------------------------------------- */
static void test_big(enum ibv_mtu mtu)
{
	struct vu_pair p;
	struct ibv_wc wc;
	const uint32_t n = BIG;

	if (mtu > dev.active_mtu) {
		printf("note: port MTU %d < %d, big transfer skipped\n", dev.active_mtu, mtu);
		return;
	}
	make_pair(&p, mtu);
	reset_bufs();
	vu_fill(lb.p, n, 10 + mtu);
	CHECK_EQ(vu_post_rdma(p.qp[0], 91, IBV_WR_RDMA_WRITE, lb.mr, lb.p, n, (uintptr_t)rb.p + 3,
			      rb.mr->rkey, 0), 0);
	WAIT_OK(p.scq[0], 91, IBV_WC_RDMA_WRITE);
	CHECK_DATA(rb.p + 3, n, 10 + mtu, 0);
	CHECK_GUARD(rb.p, 3);
	CHECK_GUARD(rb.p + 3 + n, 64);

	/* READ it back elsewhere. */
	memset(lb.p, GUARD, lb.len);
	CHECK_EQ(vu_post_rdma(p.qp[0], 92, IBV_WR_RDMA_READ, lb.mr, lb.p + 5, n,
			      (uintptr_t)rb.p + 3, rb.mr->rkey, 0), 0);
	wc = WAIT_OK(p.scq[0], 92, IBV_WC_RDMA_READ);
	CHECK_EQ(wc.byte_len, n);
	CHECK_DATA(lb.p + 5, n, 10 + mtu, 0);
	CHECK_GUARD(lb.p + 5 + n, 64);

	/* SEND it. */
	memset(rb.p, GUARD, rb.len);
	CHECK_EQ(vu_post_recv(p.qp[1], 93, rb.mr, rb.p, BUFSZ), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 94, IBV_WR_SEND, lb.mr, lb.p + 5, n, 0, 0), 0);
	wc = WAIT_OK(p.rcq[1], 93, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, n);
	WAIT_OK(p.scq[0], 94, IBV_WC_SEND);
	CHECK_DATA(rb.p, n, 10 + mtu, 0);
	CHECK_GUARD(rb.p + n, 64);
	vu_pair_destroy(&p);
}

/* ---- unsignaled ------------------------------------------------------------------------------- */
static void test_unsignaled(void)
{
	struct vu_qp_cfg q;
	struct vu_pair p;
	struct ibv_wc wc[4];
	int n;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.sq_sig_all = 0;
	REQUIRE(vu_pair_create(&dev, &q, NULL, &p) == 0);
	reset_bufs();
	vu_fill(lb.p, 10 * 1000, 11);
	for (int i = 0; i < 10; i++) {
		bool sig = i == 5 || i == 9;

		CHECK_EQ(vu_post_rdma(p.qp[0], 100 + i, IBV_WR_RDMA_WRITE, lb.mr, lb.p + i * 1000,
				      1000, (uintptr_t)rb.p + i * 1000, rb.mr->rkey,
				      sig ? IBV_SEND_SIGNALED : 0), 0);
	}
	n = vu_poll(p.scq[0], wc, 2, 5000);
	CHECK_EQ(n, 2);
	if (n == 2) {
		CHECK_EQ(wc[0].wr_id, 105);
		CHECK_EQ(wc[1].wr_id, 109);
		CHECK_EQ(wc[0].status, IBV_WC_SUCCESS);
		CHECK_EQ(wc[1].status, IBV_WC_SUCCESS);
	}
	EXPECT_NONE(p.scq[0]);
	CHECK_DATA(rb.p, 10 * 1000, 11, 0);
	/* The queue really was freed by the signaled completions: fill it again, twice over. */
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 63; i++)
			CHECK_EQ(vu_post_rdma(p.qp[0], 200 + i, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 8,
					      (uintptr_t)rb.p, rb.mr->rkey,
					      i == 62 ? IBV_SEND_SIGNALED : 0), 0);
		n = vu_poll(p.scq[0], wc, 1, 5000);
		CHECK_EQ(n, 1);
		if (n == 1)
			CHECK_EQ(wc[0].wr_id, 262);
	}
	vu_pair_destroy(&p);
}

/* ---- fence ---------------------------------------------------------------------------------- */
static void test_fence(void)
{
	struct vu_pair p;
	struct ibv_wc wc;

	make_pair(&p, IBV_MTU_1024);
	reset_bufs();
	/* READ remote data into L, then a fenced SEND and a fenced WRITE from L: they must carry
	 * what the READ brought, so they may not gather L before the READ completed. */
	vu_fill(rb.p + 500000, 60000, 12);
	memset(lb.p, 0, 60000);
	CHECK_EQ(vu_post_recv(p.qp[1], 110, rb.mr, rb.p, 65536), 0);
	CHECK_EQ(vu_post_rdma(p.qp[0], 111, IBV_WR_RDMA_READ, lb.mr, lb.p, 60000,
			      (uintptr_t)rb.p + 500000, rb.mr->rkey, 0), 0);
	CHECK_EQ(vu_post_send(p.qp[0], 112, IBV_WR_SEND, lb.mr, lb.p, 60000, 0, IBV_SEND_FENCE), 0);
	CHECK_EQ(vu_post_rdma(p.qp[0], 113, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 60000,
			      (uintptr_t)rb.p + 700000, rb.mr->rkey, IBV_SEND_FENCE), 0);
	WAIT_OK(p.scq[0], 111, IBV_WC_RDMA_READ);
	WAIT_OK(p.scq[0], 112, IBV_WC_SEND);
	WAIT_OK(p.scq[0], 113, IBV_WC_RDMA_WRITE);
	wc = WAIT_OK(p.rcq[1], 110, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 60000);
	CHECK_DATA(lb.p, 60000, 12, 0);
	CHECK_DATA(rb.p, 60000, 12, 0);
	CHECK_DATA(rb.p + 700000, 60000, 12, 0);

	/* An ATOMIC's result buffer, used by a fenced WRITE. */
	*(uint64_t *)(rb.p + 900000) = 0x1122334455667788ull;
	*(uint64_t *)lb.p = 0;
	CHECK_EQ(vu_post_atomic(p.qp[0], 114, IBV_WR_ATOMIC_FETCH_AND_ADD, lb.mr, lb.p,
				(uintptr_t)rb.p + 900000, rb.mr->rkey, 1, 0, 0), 0);
	CHECK_EQ(vu_post_rdma(p.qp[0], 115, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 8,
			      (uintptr_t)rb.p + 900008, rb.mr->rkey, IBV_SEND_FENCE), 0);
	WAIT_OK(p.scq[0], 114, IBV_WC_FETCH_ADD);
	WAIT_OK(p.scq[0], 115, IBV_WC_RDMA_WRITE);
	CHECK_EQ(*(uint64_t *)(rb.p + 900008), 0x1122334455667788ull);
	CHECK_EQ(*(uint64_t *)(rb.p + 900000), 0x1122334455667789ull);
	vu_pair_destroy(&p);
}

/* ---- max_rd_atomic 1 ------------------------------------------------------------------------- */
static void test_rd_atomic_one(void)
{
	struct vu_conn_cfg c;
	struct vu_pair p;
	static const uint32_t len[8] = { 1, 4096, 100, 10000, 0, 1025, 65536, 3 };
	uint32_t off = 0, loff[8];
	uint64_t *ctr = (uint64_t *)(rb.p + BUFSZ - 64);

	vu_conn_cfg_default(&c);
	c.max_rd_atomic = 1;
	c.max_dest_rd_atomic = 1;
	REQUIRE(vu_pair_create(&dev, NULL, &c, &p) == 0);
	reset_bufs();
	*ctr = 0;
	vu_fill(rb.p, 200000, 13);
	/* 8 READs and 8 FETCH_ADDs interleaved, all posted at once: only one may be outstanding,
	 * the rest queue behind it, and every one completes in order with the right data. */
	for (int i = 0; i < 8; i++) {
		loff[i] = off;
		CHECK_EQ(vu_post_rdma(p.qp[0], 120 + i, IBV_WR_RDMA_READ, lb.mr, lb.p + off, len[i],
				      (uintptr_t)rb.p + off, rb.mr->rkey, 0), 0);
		CHECK_EQ(vu_post_atomic(p.qp[0], 140 + i, IBV_WR_ATOMIC_FETCH_AND_ADD, lb.mr,
					lb.p + 1500000 + i * 8, (uintptr_t)ctr, rb.mr->rkey, 1, 0,
					0), 0);
		off += len[i] + 7;
	}
	for (int i = 0; i < 8; i++) {
		struct ibv_wc wc = WAIT_OK(p.scq[0], 120 + i, IBV_WC_RDMA_READ);

		CHECK_EQ(wc.byte_len, len[i]);
		WAIT_OK(p.scq[0], 140 + i, IBV_WC_FETCH_ADD);
		CHECK_DATA(lb.p + loff[i], len[i], 13, loff[i]);
		CHECK_EQ(*(uint64_t *)(lb.p + 1500000 + i * 8), i);
		CHECK_GUARD(lb.p + loff[i] + len[i], 7);
	}
	CHECK_EQ(*ctr, 8);
	vu_pair_destroy(&p);
}

/* ---- ibv_wr_* ---------------------------------------------------------------------------------- */
static void test_wr_api(void)
{
	struct vu_qp_cfg q;
	struct vu_pair p;
	struct ibv_qp_ex *qx;
	struct ibv_wc wc;
	struct ibv_sge sl[2];
	uint8_t inl[100];
	uint64_t *ctr = (uint64_t *)(rb.p + 600000);

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			   IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			   IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			   IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	q.sq_sig_all = 0;
	REQUIRE(vu_pair_create(&dev, &q, NULL, &p) == 0);
	qx = ibv_qp_to_qp_ex(p.qp[0]);
	REQUIRE(qx != NULL);
	reset_bufs();
	vu_fill(lb.p, 20000, 14);
	vu_fill(rb.p + 300000, 5000, 15);
	vu_fill(inl, sizeof(inl), 16);
	*ctr = 40;

	CHECK_EQ(vu_post_recv(p.qp[1], 150, rb.mr, rb.p + 400000, 8192), 0);
	CHECK_EQ(vu_post_recv(p.qp[1], 151, rb.mr, rb.p + 410000, 8192), 0);
	CHECK_EQ(vu_post_recv(p.qp[1], 152, NULL, NULL, 0), 0);

	ibv_wr_start(qx);
	qx->wr_id = 160;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, rb.mr->rkey, (uintptr_t)rb.p + 100);
	ibv_wr_set_sge(qx, lb.mr->lkey, (uintptr_t)lb.p, 3000);

	qx->wr_id = 161;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	sl[0] = (struct ibv_sge){ (uintptr_t)lb.p + 3000, 1000, lb.mr->lkey };
	sl[1] = (struct ibv_sge){ (uintptr_t)lb.p + 4000, 2500, lb.mr->lkey };
	ibv_wr_set_sge_list(qx, 2, sl);

	qx->wr_id = 162;
	qx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send_imm(qx, htobe32(0xabcdef01));
	ibv_wr_set_inline_data(qx, inl, sizeof(inl));

	qx->wr_id = 163;
	qx->wr_flags = 0;	/* unsignaled: no completion */
	ibv_wr_rdma_write_imm(qx, rb.mr->rkey, (uintptr_t)rb.p + 50000, htobe32(99));
	ibv_wr_set_sge(qx, lb.mr->lkey, (uintptr_t)lb.p + 10000, 2000);

	qx->wr_id = 164;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(qx, rb.mr->rkey, (uintptr_t)rb.p + 300000);
	ibv_wr_set_sge(qx, lb.mr->lkey, (uintptr_t)lb.p + 100000, 5000);

	qx->wr_id = 165;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(qx, rb.mr->rkey, (uintptr_t)ctr, 2);
	ibv_wr_set_sge(qx, lb.mr->lkey, (uintptr_t)lb.p + 200000, 8);

	qx->wr_id = 166;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_cmp_swp(qx, rb.mr->rkey, (uintptr_t)ctr, 42, 1000);
	ibv_wr_set_sge(qx, lb.mr->lkey, (uintptr_t)lb.p + 200008, 8);
	/* The inline buffer may change once set. */
	memset(inl, 0, sizeof(inl));
	CHECK_EQ(ibv_wr_complete(qx), 0);

	WAIT_OK(p.scq[0], 160, IBV_WC_RDMA_WRITE);
	WAIT_OK(p.scq[0], 161, IBV_WC_SEND);
	WAIT_OK(p.scq[0], 162, IBV_WC_SEND);
	WAIT_OK(p.scq[0], 164, IBV_WC_RDMA_READ);
	WAIT_OK(p.scq[0], 165, IBV_WC_FETCH_ADD);
	WAIT_OK(p.scq[0], 166, IBV_WC_COMP_SWAP);
	EXPECT_NONE(p.scq[0]);
	wc = WAIT_OK(p.rcq[1], 150, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 3500);
	wc = WAIT_OK(p.rcq[1], 151, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 100);
	CHECK_EQ(be32toh(wc.imm_data), 0xabcdef01);
	wc = WAIT_OK(p.rcq[1], 152, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK_EQ(wc.byte_len, 2000);
	CHECK_EQ(be32toh(wc.imm_data), 99);

	CHECK_DATA(rb.p + 100, 3000, 14, 0);
	CHECK_DATA(rb.p + 400000, 3500, 14, 3000);
	CHECK_DATA(rb.p + 410000, 100, 16, 0);
	CHECK_DATA(rb.p + 50000, 2000, 14, 10000);
	CHECK_DATA(lb.p + 100000, 5000, 15, 0);
	CHECK_EQ(*(uint64_t *)(lb.p + 200000), 40);
	CHECK_EQ(*(uint64_t *)(lb.p + 200008), 42);
	CHECK_EQ(*ctr, 1000);

	/* ibv_wr_abort: nothing of the batch is posted. */
	memset(rb.p + 800000, GUARD, 4096);
	ibv_wr_start(qx);
	qx->wr_id = 170;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, rb.mr->rkey, (uintptr_t)rb.p + 800000);
	ibv_wr_set_sge(qx, lb.mr->lkey, (uintptr_t)lb.p, 4096);
	qx->wr_id = 171;
	ibv_wr_rdma_write(qx, rb.mr->rkey, (uintptr_t)rb.p + 800000);
	ibv_wr_set_sge(qx, lb.mr->lkey, (uintptr_t)lb.p, 4096);
	ibv_wr_abort(qx);
	EXPECT_NONE(p.scq[0]);
	CHECK_GUARD(rb.p + 800000, 4096);

	/* ... and the next batch is the next thing that completes. */
	ibv_wr_start(qx);
	qx->wr_id = 172;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, rb.mr->rkey, (uintptr_t)rb.p + 810000);
	ibv_wr_set_sge(qx, lb.mr->lkey, (uintptr_t)lb.p, 100);
	CHECK_EQ(ibv_wr_complete(qx), 0);
	WAIT_OK(p.scq[0], 172, IBV_WC_RDMA_WRITE);
	EXPECT_NONE(p.scq[0]);
	CHECK_GUARD(rb.p + 800000, 4096);
	CHECK_DATA(rb.p + 810000, 100, 14, 0);

	/* A QP made without send_ops_flags has no ibv_wr_* API. */
	{
		struct vu_pair p2;

		REQUIRE(vu_pair_create(&dev, NULL, NULL, &p2) == 0);
		CHECK(ibv_qp_to_qp_ex(p2.qp[0]) == NULL);
		vu_pair_destroy(&p2);
	}
	vu_pair_destroy(&p);
}

/* ---- extended CQ -------------------------------------------------------------------------------- */
static void test_cq_ex(void)
{
	struct ibv_cq_init_attr_ex ca;
	struct ibv_cq_ex *cqx;
	struct ibv_cq *scq0, *scq1, *rcq0;
	struct ibv_qp *qp[2];
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct ibv_poll_cq_attr pa = { 0 };
	struct {
		uint64_t wr_id;
		int opcode;
		uint32_t len, imm, qpn;
		unsigned flags;
	} got[8];
	int n = 0, ret;
	uint64_t deadline;

	memset(&ca, 0, sizeof(ca));
	ca.cqe = 64;
	ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM;
	cqx = ibv_create_cq_ex(dev.ctx, &ca);
	REQUIRE(cqx != NULL);
	scq0 = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	scq1 = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	rcq0 = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(scq0 && scq1 && rcq0);
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	vu_conn_cfg_default(&c);
	qp[0] = vu_qp_create(&dev, scq0, rcq0, &q);
	qp[1] = vu_qp_create(&dev, scq1, ibv_cq_ex_to_cq(cqx), &q);
	REQUIRE(qp[0] && qp[1]);
	REQUIRE(vu_qp_connect(qp[0], &c, &dev.gid, qp[1]->qp_num) == 0);
	REQUIRE(vu_qp_connect(qp[1], &c, &dev.gid, qp[0]->qp_num) == 0);

	/* start_poll on an empty CQ: ENOENT (and no end_poll). */
	CHECK_EQ(ibv_start_poll(cqx, &pa), ENOENT);

	reset_bufs();
	vu_fill(lb.p, 3000, 17);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(vu_post_recv(qp[1], 180 + i, rb.mr, rb.p + i * 4096, 4096), 0);
	CHECK_EQ(vu_post_send(qp[0], 190, IBV_WR_SEND_WITH_IMM, lb.mr, lb.p, 1000, 0x1001, 0), 0);
	CHECK_EQ(vu_post_send(qp[0], 191, IBV_WR_SEND, lb.mr, lb.p + 1000, 1500, 0, 0), 0);
	CHECK_EQ(vu_post_write_imm(qp[0], 192, lb.mr, lb.p, 3000, (uintptr_t)rb.p + 20000,
				   rb.mr->rkey, 0x3003, 0), 0);
	deadline = vu_now_ms() + 5000;
	while (n < 3 && vu_now_ms() < deadline) {
		ret = ibv_start_poll(cqx, &pa);
		if (ret == ENOENT)
			continue;
		CHECK_EQ(ret, 0);
		if (ret)
			break;
		do {
			got[n].wr_id = cqx->wr_id;
			CHECK_EQ(cqx->status, IBV_WC_SUCCESS);
			got[n].opcode = ibv_wc_read_opcode(cqx);
			got[n].len = ibv_wc_read_byte_len(cqx);
			got[n].flags = ibv_wc_read_wc_flags(cqx);
			got[n].imm = (got[n].flags & IBV_WC_WITH_IMM)
					     ? be32toh(ibv_wc_read_imm_data(cqx)) : 0;
			got[n].qpn = ibv_wc_read_qp_num(cqx);
			n++;
		} while (n < 8 && ibv_next_poll(cqx) == 0);
		ibv_end_poll(cqx);
	}
	CHECK_EQ(n, 3);
	if (n == 3) {
		CHECK_EQ(got[0].wr_id, 180);
		CHECK_EQ(got[0].opcode, IBV_WC_RECV);
		CHECK_EQ(got[0].len, 1000);
		CHECK_EQ(got[0].imm, 0x1001);
		CHECK_EQ(got[0].qpn, qp[1]->qp_num);
		CHECK_EQ(got[1].wr_id, 181);
		CHECK_EQ(got[1].opcode, IBV_WC_RECV);
		CHECK_EQ(got[1].len, 1500);
		CHECK(!(got[1].flags & IBV_WC_WITH_IMM));
		CHECK_EQ(got[2].wr_id, 182);
		CHECK_EQ(got[2].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
		CHECK_EQ(got[2].len, 3000);
		CHECK_EQ(got[2].imm, 0x3003);
		CHECK(got[2].flags & IBV_WC_WITH_IMM);
		CHECK_EQ(got[2].qpn, qp[1]->qp_num);
	}
	CHECK_DATA(rb.p, 1000, 17, 0);
	CHECK_DATA(rb.p + 4096, 1500, 17, 1000);
	CHECK_DATA(rb.p + 20000, 3000, 17, 0);
	for (int i = 0; i < 3; i++) {
		struct ibv_wc wc;

		CHECK(vu_wait(scq0, &wc, 5000));
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	}
	CHECK_EQ(ibv_start_poll(cqx, &pa), ENOENT);
	CHECK_EQ(ibv_destroy_qp(qp[0]), 0);
	CHECK_EQ(ibv_destroy_qp(qp[1]), 0);
	CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
	CHECK_EQ(ibv_destroy_cq(scq0), 0);
	CHECK_EQ(ibv_destroy_cq(scq1), 0);
	CHECK_EQ(ibv_destroy_cq(rcq0), 0);
}

int main(void)
{
	sr_test_timeout(120);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, BUFSZ, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rb, BUFSZ, VU_ACCESS_ALL) == 0);

	test_write();
	test_write_imm();
	test_read();
	test_send(false);
	test_send(true);
	test_atomics();
	test_sge();
	test_inline();
	test_zero_length();
	test_big(IBV_MTU_1024);
	test_big(IBV_MTU_4096);
	test_unsignaled();
	test_fence();
	test_rd_atomic_one();
	test_wr_api();
	test_cq_ex();

	vu_buf_free(&lb);
	vu_buf_free(&rb);
	vu_close(&dev);
	return sr_test_done("test_rc_ops");
}
