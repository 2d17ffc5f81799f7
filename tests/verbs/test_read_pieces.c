/* SPDX-License-Identifier: MIT */
/*
 * An RDMA READ larger than the send window is asked for in pieces (req.c).
 *
 * READ responses are neither acknowledged nor flow controlled: a responder answers a READ at
 * once and in full. A requester that asked for 8 MiB in one request had 2048 packets poured
 * into its socket, lost most of them, and asked again for the rest, which poured again:
 * ib_read_bw -s 8388608 ended in IBV_WC_RETRY_EXC_ERR. So a READ is asked for in pieces of at
 * most the send window (max_inflight packets here), each an ordinary READ request for the next
 * bytes at the next PSNs; a retry asks for the rest of its own piece only (the responder sees a
 * duplicate of that piece). The next piece goes once half the window is free (read_overlap),
 * while the piece before is still answered, when the responder has a slot for a second
 * request (max_rd_atomic); with max_rd_atomic 1, only after the last response.
 *
 * The peer is a raw UDP socket of this test (tests/common/rawpeer.c) playing the responder:
 * it reads each READ request, checks its PSN, address and length, and answers with hand-made
 * READ responses. SOFTRDMA_MAX_INFLIGHT=32 and a 1024-byte MTU: a READ of 101 packets
 * (102500 bytes) goes, one request at a time, as pieces of 32, 32, 32 and 5 packets; after a
 * lost response, as pieces of the smaller window. Two at a time: 32, then 16 after the 16th
 * response, then 16 more after the first piece's last response, and so on. Last, a READ of 256
 * packets between two QPs of this process, answered by softrdma's own responder.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <stdlib.h>

#define MTU 1024
#define WIN 32
#define FAKE_QPN 0x00beef
#define RVA 0x7f0000001000ull
#define RKEY 0x4321
#define LEN (100 * MTU + 100)		/* 101 packets */
#define PSN0 0x00fffff0u		/* the pieces cross the 24-bit PSN wrap */

static struct vu_dev dev;
static struct vu_buf lb;
static struct rawpeer rp;
static struct ibv_qp *qp;
static struct ibv_cq *cq;
static uint8_t remote[LEN];		/* what the responder's memory holds */
static uint32_t msn;
static uint32_t next_psn = PSN0;	/* the PSN the next READ starts at */

static uint32_t psn_add(uint32_t p, uint32_t n)
{
	return (p + n) & 0xffffff;
}

/* The next packet must be a READ request for PSN psn, bytes [off, off + *len) of the remote
 * buffer; *len 0: any length, returned in *len. */
#define EXPECT_READ(psn, off, len) expect_read(psn, off, len, __LINE__)
static bool expect_read(uint32_t psn, uint32_t off, uint32_t *len, int line)
{
	uint8_t buf[256];
	struct sr_pkt pkt;
	int n = rp_recv(&rp, buf, sizeof(buf), &pkt, 2000);

	if (n <= 0) {
		SR_FAIL("line %d: no READ request (wanted PSN %u)", line, psn);
		return false;
	}
	if (pkt.opcode != SR_OPC(SR_TR_RC, SR_OP_READ_REQ) || pkt.psn != psn) {
		SR_FAIL("line %d: got %s PSN %u, wanted a READ request PSN %u", line,
			sr_opcode_name(pkt.opcode), pkt.psn, psn);
		return false;
	}
	struct sr_reth *r = sr_pkt_h(&pkt, SR_H_RETH);

	if (sr_reth_va(r) != RVA + off || (*len && sr_reth_len(r) != *len) ||
	    sr_reth_rkey(r) != RKEY) {
		SR_FAIL("line %d: READ PSN %u asks for va +%llu len %u rkey 0x%x, wanted +%u len %u",
			line, psn, (unsigned long long)(sr_reth_va(r) - RVA), sr_reth_len(r),
			sr_reth_rkey(r), off, *len);
		return false;
	}
	*len = sr_reth_len(r);
	return true;
}

#define EXPECT_QUIET(ms) expect_quiet(ms, __LINE__)
static void expect_quiet(int ms, int line)
{
	uint8_t buf[256];
	struct sr_pkt pkt;

	if (rp_recv(&rp, buf, sizeof(buf), &pkt, ms) > 0)
		SR_FAIL("line %d: unexpected %s PSN %u", line, sr_opcode_name(pkt.opcode), pkt.psn);
}

/* Responses from .. to - 1 of a READ request at psn for bytes [off, off + len). */
static void part(uint32_t psn, uint32_t off, uint32_t len, uint32_t from, uint32_t to)
{
	REQUIRE(rp_send_read_resp_part(&rp, qp->qp_num, psn, remote + off, len, MTU, from, to,
				       ++msn) == 0);
}

/* Response packet k (0-based) of a READ request at psn for bytes [off, off + len); skip: a
 * packet index not to send (a loss), or -1. */
static void respond(uint32_t psn, uint32_t off, uint32_t len, int skip)
{
	REQUIRE(rp_send_read_resp(&rp, qp->qp_num, psn, remote + off, len, MTU, skip, ++msn) == 0);
}

static uint32_t pkts(uint32_t len)
{
	return (len + MTU - 1) / MTU;
}

static void run(bool lose)
{
	struct ibv_wc wc;
	uint32_t psn = next_psn, off = 0;

	memset(lb.p, 0, LEN);
	REQUIRE(vu_post_rdma(qp, 7, IBV_WR_RDMA_READ, lb.mr, lb.p, LEN, RVA, RKEY,
			     IBV_SEND_SIGNALED) == 0);
	for (int piece = 0; off < LEN; piece++) {
		uint32_t full = LEN - off < WIN * MTU ? LEN - off : WIN * MTU, len, rest;

		/* Pieces of the window (after a loss the window shrinks, to no fewer than 16
		 * packets), whole packets but for the READ's end. */
		len = lose && piece > 1 ? 0 : full;
		if (!EXPECT_READ(psn, off, &len))
			return;
		if (len > full || (len < full && (len < 16 * MTU || len % MTU))) {
			SR_FAIL("piece %d: %u bytes asked for (window %u)", piece, len, full);
			return;
		}
		/* Nothing more until this piece is answered: the window is full of it. */
		EXPECT_QUIET(30);
		if (!lose && len == full && len > WIN / 2 * MTU) {
			/* Half answered, half the window free: still nothing, max_rd_atomic is 1. */
			part(psn, off, len, 0, WIN / 2);
			EXPECT_QUIET(30);
			part(psn, off, len, WIN / 2, WIN);
		} else if (lose && piece == 1) {
			/* Response 10 of the second piece is lost: the requester asks again for the
			 * rest of this piece, not of the READ. */
			respond(psn, off, len, 10);
			rest = len - 10 * MTU;
			if (!EXPECT_READ(psn_add(psn, 10), off + 10 * MTU, &rest))
				return;
			respond(psn_add(psn, 10), off + 10 * MTU, rest, -1);
		} else {
			respond(psn, off, len, -1);
		}
		psn = psn_add(psn, pkts(len));
		off += len;
	}
	next_psn = psn;
	REQUIRE(vu_wait(cq, &wc, 2000) == 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
	CHECK_EQ(wc.byte_len, LEN);
	CHECK(!memcmp(lb.p, remote, LEN));
	EXPECT_QUIET(30);
}

/* Answers every READ request from psn (bytes from off) in full, whatever its length, until
 * the READ's end: each must start where the one before ended. */
static bool serve(uint32_t psn, uint32_t off)
{
	while (off < LEN) {
		uint32_t len = 0;

		if (!EXPECT_READ(psn, off, &len))
			return false;
		if (!len || off + len > LEN || (off + len < LEN && (len < 16 * MTU || len % MTU))) {
			SR_FAIL("%u bytes asked for at +%u", len, off);
			return false;
		}
		respond(psn, off, len, -1);
		psn = psn_add(psn, pkts(len));
		off += len;
	}
	next_psn = psn;
	return true;
}

/* max_rd_atomic 16: the next piece goes once half the window is free, and a retry asks for the
 * rest of its own piece, then for the piece after it again. */
static void run_overlap(void)
{
	const uint32_t half = WIN / 2;
	uint32_t p0 = next_psn, len, rest;
	struct ibv_wc wc;

	memset(lb.p, 0, LEN);
	REQUIRE(vu_post_rdma(qp, 8, IBV_WR_RDMA_READ, lb.mr, lb.p, LEN, RVA, RKEY,
			     IBV_SEND_SIGNALED) == 0);
	len = WIN * MTU;
	if (!EXPECT_READ(p0, 0, &len))
		return;
	EXPECT_QUIET(30);
	part(p0, 0, WIN * MTU, 0, half - 1);	/* one short of half the window free */
	EXPECT_QUIET(30);
	part(p0, 0, WIN * MTU, half - 1, half);
	len = half * MTU;			/* asked while the first piece is answered */
	if (!EXPECT_READ(psn_add(p0, WIN), WIN * MTU, &len))
		return;
	part(p0, 0, WIN * MTU, half, WIN);	/* its last response: its slot is free */
	len = half * MTU;
	if (!EXPECT_READ(psn_add(p0, WIN + half), (WIN + half) * MTU, &len))
		return;
	EXPECT_QUIET(30);			/* two outstanding, the window full */

	/* A LAST response where neither request ends (at the second piece's first PSN): dropped
	 * and counted, nothing asked again, nothing completed. */
	int64_t unexpected = vu_stat("drop_unexpected");

	part(psn_add(p0, WIN - 1), (WIN - 1) * MTU, 2 * MTU, 1, 2);
	EXPECT_QUIET(30);
	CHECK_EQ(vu_stat("drop_unexpected") - unexpected, 1);
	CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);

	/* Response 10 of the second piece is lost: the rest of that piece, then the third again
	 * (two duplicates, each of one request the responder knows). */
	respond(psn_add(p0, WIN), WIN * MTU, half * MTU, 10);
	rest = (half - 10) * MTU;
	if (!EXPECT_READ(psn_add(p0, WIN + 10), (WIN + 10) * MTU, &rest))
		return;
	len = half * MTU;
	if (!EXPECT_READ(psn_add(p0, WIN + half), (WIN + half) * MTU, &len))
		return;
	respond(psn_add(p0, WIN + 10), (WIN + 10) * MTU, rest, -1);
	respond(psn_add(p0, WIN + half), (WIN + half) * MTU, half * MTU, -1);
	/* The rest in pieces of the window the loss left. */
	if (!serve(psn_add(p0, 2 * WIN), 2 * WIN * MTU))
		return;
	REQUIRE(vu_wait(cq, &wc, 2000) == 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 8);
	CHECK_EQ(wc.byte_len, LEN);
	CHECK(!memcmp(lb.p, remote, LEN));
	EXPECT_QUIET(30);
}

/* The same through softrdma's own responder (two QPs of this process, by packets): a READ of
 * 256 packets through the window of 32, data checked, and some of its requests sent while the
 * piece before was answered (tx_read_overlap). */
static void run_pair(void)
{
	const uint32_t len = 256 * MTU;
	struct vu_conn_cfg c;
	struct vu_buf src, dst;
	struct vu_pair p;
	struct ibv_wc wc;
	int64_t overlap = vu_stat("tx_read_overlap");

	REQUIRE(vu_buf_alloc(&dev, &src, len, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &dst, len, VU_ACCESS_ALL) == 0);
	vu_fill(src.p, len, 5);
	memset(dst.p, 0, len);
	vu_conn_cfg_default(&c);
	c.mtu = IBV_MTU_1024;
	REQUIRE(vu_pair_create(&dev, NULL, &c, &p) == 0);
	REQUIRE(vu_post_rdma(p.qp[0], 9, IBV_WR_RDMA_READ, dst.mr, dst.p, len, (uintptr_t)src.p,
			     src.mr->rkey, IBV_SEND_SIGNALED) == 0);
	REQUIRE(vu_wait(p.scq[0], &wc, 5000) == 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 9);
	CHECK(!memcmp(dst.p, src.p, len));
	CHECK(vu_stat("tx_read_overlap") > overlap);
	vu_pair_destroy(&p);
	vu_buf_free(&src);
	vu_buf_free(&dst);
}

int main(void)
{
	struct vu_conn_cfg c;

	sr_test_timeout(60);
	setenv("SOFTRDMA_MAX_INFLIGHT", "32", 1);
	setenv("SOFTRDMA_RTO_MIN_US", "1000000", 1);	/* no fast retransmission while we wait */
	setenv("SOFTRDMA_DIRECT", "0", 1);	/* run_pair: packets, not the same-host path */
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, LEN, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	vu_fill(remote, LEN, 11);
	cq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	REQUIRE(cq);
	vu_conn_cfg_raw(&c, PSN0, 0);
	c.mtu = IBV_MTU_1024;
	c.timeout = 20;		/* 4.3 s: no timeout retry while this test takes its time */
	c.max_rd_atomic = 1;
	qp = vu_qp_connect_raw(&dev, cq, NULL, &c, &rp.gid, FAKE_QPN);

	printf("a READ of 101 packets through a window of 32, max_rd_atomic 1\n");
	run(false);
	printf("... with a response lost in the second piece\n");
	run(true);
	CHECK_EQ(ibv_destroy_qp(qp), 0);

	printf("the same READ, max_rd_atomic 16: two requests outstanding\n");
	c.max_rd_atomic = 16;
	next_psn = PSN0;
	qp = vu_qp_connect_raw(&dev, cq, NULL, &c, &rp.gid, FAKE_QPN);
	run_overlap();
	CHECK_EQ(ibv_destroy_qp(qp), 0);

	printf("a READ of 256 packets through softrdma's responder\n");
	run_pair();
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_read_pieces");
}
