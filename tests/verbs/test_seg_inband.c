/* SPDX-License-Identifier: MIT */
/*
 * In-band large segments (docs/cm.md, "Large segments"): on an RC connection with a 4096-byte
 * path MTU that rdma_cm did not set up, a softrdma requester sends SEND/WRITE packets of the
 * size its peer offers in the BTH reserved bits, once it has seen one of its packets.
 *  - the first 1 MiB SEND, before any packet of the peer was seen, goes at 4096 bytes per
 *    packet; the next ones at the loopback segment (61440: 18 packets), data intact;
 *  - the same for WRITE (with the same-host direct path off, so that WRITE takes packets);
 *  - a READ asks for its responses in the same segments (BTH resv7 bit, SR_BTH_SR_RDSEG) and
 *    gets them: 18 packets of responses, data intact (UCX's rendezvous is a READ); a READ of
 *    a side that has not seen the peer's offer yet still takes the path MTU;
 *  - a path MTU of 1024 gets no large segments;
 *  - with SOFTRDMA_SEG_INBAND=0 (a forked child) nothing changes size;
 *  - at 8 KiB segments, WRITEs cut with a FIRST short by its RETH, or evenly (fshort below);
 *  - at a path MTU of 1024, WRITEs cut evenly at the path MTU (even_mtu below);
 *  - a large segment WRITE into a fast-registration MR whose pages are scattered (each
 *    61440-byte packet lands in 16 pieces) lands page by page where the map says.
 * Loss, duplication and reordering of large packets are covered by test_fault_integrity and
 * test_pingpong_fault, which now run with them.
 */
#include <stdlib.h>
#include <unistd.h>

#include <softrdma/softrdma.h>

#include "sr_test.h"
#include "verbs_util.h"

#define WAIT_WC(cq, id, st, op) vu_expect_wc(cq, id, st, op, 10000, __LINE__)
#define MLEN (1u << 20)

static struct vu_dev dev;

/* Packets this process sent for one 1 MiB operation (and its ACKs: a few). */
static int64_t one_op(struct vu_pair *p, struct vu_buf *a, struct vu_buf *b, enum ibv_wr_opcode op,
		      uint32_t seed)
{
	int64_t t0 = vu_stat("tx_packets");

	vu_fill(a->p, MLEN, seed);
	memset(b->p, 0, MLEN);
	if (op == IBV_WR_SEND) {
		CHECK_EQ(vu_post_recv(p->qp[1], 1, b->mr, b->p, MLEN), 0);
		CHECK_EQ(vu_post_send(p->qp[0], 2, IBV_WR_SEND, a->mr, a->p, MLEN, 0,
				      IBV_SEND_SIGNALED), 0);
		WAIT_WC(p->rcq[1], 1, IBV_WC_SUCCESS, IBV_WC_RECV);
		WAIT_WC(p->scq[0], 2, IBV_WC_SUCCESS, IBV_WC_SEND);
		CHECK_EQ(vu_check(b->p, MLEN, seed), -1);
	} else if (op == IBV_WR_RDMA_WRITE) {
		CHECK_EQ(vu_post_rdma(p->qp[0], 3, op, a->mr, a->p, MLEN, (uintptr_t)b->p,
				      b->mr->rkey, IBV_SEND_SIGNALED), 0);
		WAIT_WC(p->scq[0], 3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
		CHECK_EQ(vu_check(b->p, MLEN, seed), -1);
	} else {
		/* READ: b (side 0's) gets a (side 1's memory). */
		CHECK_EQ(vu_post_rdma(p->qp[0], 4, op, b->mr, b->p, MLEN, (uintptr_t)a->p,
				      a->mr->rkey, IBV_SEND_SIGNALED), 0);
		WAIT_WC(p->scq[0], 4, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
		CHECK_EQ(vu_check(b->p, MLEN, seed), -1);
	}
	return vu_stat("tx_packets") - t0;
}

static void pair(struct vu_pair *p, enum ibv_mtu mtu)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	vu_conn_cfg_default(&c);
	c.mtu = mtu;
	REQUIRE(vu_pair_create(&dev, &q, &c, p) == 0);
}

/* 60 pages mapped in reverse order under a fast-registration key; one WRITE of all of them. */
#define FPG 60u
static void test_frmr(void)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct vu_pair p;
	struct vu_buf src, pages, a, b;
	struct ibv_sge sg[FPG];
	struct ibv_mr *fr;
	uint32_t key;
	int64_t n;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	vu_conn_cfg_default(&c);
	c.mtu = IBV_MTU_4096;
	REQUIRE(vu_pair_create(&dev, &q, &c, &p) == 0);
	REQUIRE(vu_buf_alloc(&dev, &src, FPG * 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &pages, FPG * 4096, 0) == 0);
	REQUIRE(vu_buf_alloc(&dev, &a, MLEN, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &b, MLEN, VU_ACCESS_ALL) == 0);
	one_op(&p, &a, &b, IBV_WR_SEND, 9);	/* the peers hear from each other */

	fr = softrdma_alloc_mr(dev.pd, FPG);
	REQUIRE(fr);
	key = softrdma_update_fast_reg_key(fr, (uint8_t)(ibv_inc_rkey(fr->rkey) & 0xff));
	for (unsigned i = 0; i < FPG; i++) {
		sg[i].addr = (uintptr_t)pages.p + (size_t)(FPG - 1 - i) * 4096;
		sg[i].length = 4096;
		sg[i].lkey = 0;
	}
	CHECK_EQ(softrdma_map_mr_sg(fr, sg, FPG, 4096), FPG);
	{
		struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.qp[1]);

		ibv_wr_start(x);
		x->wr_id = 20;
		x->wr_flags = IBV_SEND_SIGNALED;
		softrdma_wr_reg_mr(x, fr, key, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		CHECK_EQ(ibv_wr_complete(x), 0);
		WAIT_WC(p.scq[1], 20, IBV_WC_SUCCESS, SOFTRDMA_WC_REG_MR);
	}
	vu_fill(src.p, FPG * 4096, 21);
	n = vu_stat("tx_packets");
	CHECK_EQ(vu_post_rdma(p.qp[0], 21, IBV_WR_RDMA_WRITE, src.mr, src.p, FPG * 4096,
			      fr->addr ? (uintptr_t)fr->addr : (uintptr_t)sg[0].addr, key,
			      IBV_SEND_SIGNALED), 0);
	WAIT_WC(p.scq[0], 21, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	n = vu_stat("tx_packets") - n;
	printf("240 KiB WRITE into a scattered fast-registration map: %lld packets\n",
	       (long long)n);
	CHECK(n < 10);
	for (unsigned i = 0; i < FPG; i++)
		CHECK_EQ(memcmp(pages.p + (size_t)(FPG - 1 - i) * 4096, src.p + (size_t)i * 4096,
				4096), 0);
	vu_pair_destroy(&p);
}

/*
 * A WRITE of len bytes (a to b); returns how this process cut it, after checking every byte
 * arrived and nothing past it: CUT_FSHORT (tx_write_fshort), CUT_EVEN (tx_write_even), or 0.
 */
#define CUT_FSHORT 1
#define CUT_EVEN 2
static int64_t write_len(struct vu_pair *p, struct vu_buf *a, struct vu_buf *b, uint32_t len,
			 uint32_t seed)
{
	int64_t f = vu_stat("tx_write_fshort"), e = vu_stat("tx_write_even");

	vu_fill(a->p, len, seed);
	memset(b->p, 0, MLEN);
	CHECK_EQ(vu_post_rdma(p->qp[0], 30, IBV_WR_RDMA_WRITE, a->mr, a->p, len, (uintptr_t)b->p,
			      b->mr->rkey, IBV_SEND_SIGNALED), 0);
	WAIT_WC(p->scq[0], 30, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(vu_check(b->p, len, seed), -1);
	CHECK(((uint8_t *)b->p)[len] == 0);	/* nothing past the end */
	return (vu_stat("tx_write_fshort") - f) * CUT_FSHORT + (vu_stat("tx_write_even") - e) * CUT_EVEN;
}

/*
 * Four WRITEs of len bytes posted in one list (one requester pass), each to its own place in
 * b; returns the GSO sends they took, after checking every byte.
 */
static int64_t write_list(struct vu_pair *p, struct vu_buf *a, struct vu_buf *b, uint32_t len,
			  uint32_t seed)
{
	struct ibv_send_wr wr[4], *bad;
	struct ibv_sge sge[4];
	int64_t g = vu_stat("tx_gso_sends");

	vu_fill(a->p, 4 * len, seed);
	memset(b->p, 0, MLEN);
	memset(wr, 0, sizeof(wr));
	for (int i = 0; i < 4; i++) {
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)a->p + (size_t)i * len, .length = len,
					   .lkey = a->mr->lkey };
		wr[i].wr_id = 40 + i;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_WR_RDMA_WRITE;
		wr[i].send_flags = IBV_SEND_SIGNALED;
		wr[i].wr.rdma.remote_addr = (uintptr_t)b->p + (size_t)i * len;
		wr[i].wr.rdma.rkey = b->mr->rkey;
		wr[i].next = i < 3 ? &wr[i + 1] : NULL;
	}
	CHECK_EQ(ibv_post_send(p->qp[0], wr, &bad), 0);
	for (int i = 0; i < 4; i++)
		WAIT_WC(p->scq[0], 40 + i, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	g = vu_stat("tx_gso_sends") - g;
	CHECK_EQ(vu_check(b->p, 4 * len, seed), -1);
	CHECK(((uint8_t *)b->p)[4 * len] == 0);
	return g;
}

/* A forked child's device and its two buffers of MLEN bytes; non-zero on failure. */
static int child_open(struct vu_buf *a, struct vu_buf *b)
{
	return vu_open(&dev) || vu_buf_alloc(&dev, a, MLEN, VU_ACCESS_ALL) ||
	       vu_buf_alloc(&dev, b, MLEN, VU_ACCESS_ALL);
}

/* How often this process's send windows were cut (a loss, real or seen by a late timer). */
static int64_t windows_cut(void)
{
	return vu_stat("cwnd_restarts") + vu_stat("cwnd_cuts") + vu_stat("cwnd_halvings");
}

/*
 * Segments of 8192 bytes (seg_max, as between two namespaces with MTU 9000). Between two
 * peers of this version:
 *  - a WRITE whose length + 16 splits into equal packets of at most 8208 bytes (16 KiB:
 *    8184 + 8200; 32 KiB: 8180 + 3 x 8196; 64 KiB: 8178 + 7 x 8194, every packet padded to
 *    8196), is cut evenly: every datagram one size,
 *    and four such WRITEs in one list leave as one GSO send of seven packets and one packet alone
 *    where each WRITE took a send of its own;
 *  - a WRITE whose length + 16 does not split so is cut the same with a shorter LAST, the part
 *    rounded up to 4 (64 KiB + 4: 8180 + 6 x 8196 + 8184; 256 KiB: 8180 + 30 x 8196 + 8084,
 *    five GSO sends where a whole-segment FIRST took six), every packet but the LAST one
 *    datagram size;
 *  - a WRITE whose part would make its FIRST a whole multiple of 4 KiB (16 KiB + 16), of more
 *    than two segments and at most two GSO sends once cut (14 packets of 8208 bytes), has a
 *    FIRST short by its RETH instead, so every packet but the LAST is one datagram size.
 * arg "nofshort": the responder says neither (seg_fshort=0, as a softrdma before both) and
 * is sent FIRST packets of a whole segment; "noeven": it takes the short FIRST but not the
 * even cut (seg_even=0, as a softrdma before it).
 */
static int fshort(int sock, void *arg)
{
	bool off = arg && !strcmp(arg, "nofshort"), noeven = arg && !strcmp(arg, "noeven");
	struct vu_buf a, b;
	struct vu_pair p;
	int64_t f, n, g;

	(void)sock;
	setenv("SOFTRDMA_SEG_MAX", "8192", 1);
	if (off)
		setenv("SOFTRDMA_SEG_FSHORT", "0", 1);
	if (noeven)
		setenv("SOFTRDMA_SEG_EVEN", "0", 1);
	if (child_open(&a, &b))
		return 2;
	pair(&p, IBV_MTU_4096);
	one_op(&p, &a, &b, IBV_WR_SEND, 11);	/* the peers hear from each other */
	n = vu_stat("tx_packets");
	g = vu_stat("tx_gso_sends");
	f = write_len(&p, &a, &b, 4 * 8192, 12);
	n = vu_stat("tx_packets") - n;
	g = vu_stat("tx_gso_sends") - g;
	printf("%s: 32 KiB WRITE: cut %lld, %lld packets (with ACKs), %lld GSO sends\n",
	       arg ? (char *)arg : "all on", (long long)f, (long long)n, (long long)g);
	CHECK_EQ(f, off ? 0 : noeven ? CUT_FSHORT : CUT_EVEN);
	CHECK_EQ(g, off ? 2 : 1);
	CHECK(n >= (noeven ? 5 : 4) && n < (noeven ? 8 : 7));
	g = write_list(&p, &a, &b, 4 * 4096, 20);
	printf("%s: four 16 KiB WRITEs in one list: %lld GSO sends\n",
	       arg ? (char *)arg : "all on", (long long)g);
	CHECK(off || noeven ? g >= 4 : g == 1);	/* 7 + 1 packets: a send, a lone packet */
	if (!off && !noeven) {
		CHECK_EQ(write_len(&p, &a, &b, 2 * 8192, 13), CUT_EVEN);	/* 8184 + 8200 */
		CHECK_EQ(write_len(&p, &a, &b, 3 * 4096, 21), CUT_EVEN);	/* 6136 + 6152 */
		CHECK_EQ(write_len(&p, &a, &b, 2 * 8192 + 16, 22), CUT_FSHORT); /* not 8192 + 8208 */
		CHECK_EQ(write_len(&p, &a, &b, 8192 + 8, 23), 0);	/* 4092 + 4108: below the MTU */
		CHECK_EQ(write_len(&p, &a, &b, 2 * 8192 + 4, 14), CUT_EVEN);	/* 8186 + 8202 */
		CHECK_EQ(write_len(&p, &a, &b, 65536, 15), CUT_EVEN);	/* 8178 + 7 x 8194 */
		/* 8180 + 6 x 8196 + 8184: eight packets (nine with a short FIRST) */
		CHECK_EQ(write_len(&p, &a, &b, 65536 + 4, 25), CUT_EVEN);
		CHECK_EQ(write_len(&p, &a, &b, 3 * 8192 - 1, 26), CUT_EVEN);	/* 8181 + 2 x 8197 */
		CHECK_EQ(write_len(&p, &a, &b, 14 * 8192 - 16, 16), CUT_EVEN);	/* 8176 + 13 x 8192 */
		CHECK_EQ(write_len(&p, &a, &b, 14 * 8192, 17), CUT_EVEN);	/* 8180 + 12 x 8196 + 8156 */
		CHECK_EQ(write_len(&p, &a, &b, MLEN - 8, 18), CUT_EVEN);	/* ... + 7692 */
		CHECK_EQ(write_len(&p, &a, &b, 32 * 8196 - 16, 24), CUT_EVEN);	/* long, even */
		/* five sends (7, 7, 7, 7 and 3 + the LAST) when the whole WRITE leaves in one
		 * pass: unless a loss (a spurious timeout on a loaded machine) cut the window
		 * earlier, or a packet of it was resent */
		int64_t cut = windows_cut(), rt = vu_stat("retransmits");

		g = vu_stat("tx_gso_sends");
		CHECK_EQ(write_len(&p, &a, &b, 32 * 8192, 27), CUT_EVEN);	/* ... + 8084 */
		g = vu_stat("tx_gso_sends") - g;
		rt = vu_stat("retransmits") - rt;
		printf("all on: 256 KiB WRITE: %lld GSO sends (window cuts before %lld, resent %lld)\n",
		       (long long)g, (long long)cut, (long long)rt);
		if (!cut && !rt)
			CHECK_EQ(g, 5);
	} else if (noeven) {
		CHECK_EQ(write_len(&p, &a, &b, 2 * 8192, 13), 0);
		CHECK_EQ(write_len(&p, &a, &b, 65536, 15), CUT_FSHORT);
	} else {
		CHECK_EQ(write_len(&p, &a, &b, 65536, 19), 0);
	}
	vu_pair_destroy(&p);
	return !sr_test_failures ? 0 : 3;
}

/*
 * A path MTU of 1024 (a network of MTU 1500), no large segment. Between two peers of this
 * version a WRITE of more than one packet is cut evenly at the path MTU (SR_BTH_SR_EVENMTU):
 * 4 KiB as 1012 + 3 x 1028, 2 KiB as 1016 + 1032, 4098 bytes as 1016 + 2 x 1032 + 1018, and
 * four 4 KiB WRITEs in one list leave in one GSO send (16 packets of one datagram size), where
 * IBA's cut (a FIRST 16 bytes longer than the rest) took at least one send per WRITE; a WRITE
 * whose FIRST would carry exactly the path MTU (2064 bytes: 1024 + 1040; 1 MiB - 1 KiB, whose part
 * rounds up to 1040) keeps IBA's cut. A WRITE in one GSO send whose length + 16 does not split
 * into its n packets takes up to n / 2 more where they split it (3 KiB: 4 x 772, 756 in the
 * FIRST; 12 KiB: 16 x 769), so four such WRITEs in one list leave in one GSO send too.
 * arg "off": SOFTRDMA_SEG_EVEN_MTU=0 (neither offered nor sent): IBA's cut throughout.
 */
static int even_mtu(int sock, void *arg)
{
	bool off = arg && !strcmp(arg, "off");
	int64_t e = off ? 0 : CUT_EVEN, g;
	struct vu_buf a, b;
	struct vu_pair p;

	(void)sock;
	if (off)
		setenv("SOFTRDMA_SEG_EVEN_MTU", "0", 1);
	if (child_open(&a, &b))
		return 2;
	pair(&p, IBV_MTU_1024);
	one_op(&p, &a, &b, IBV_WR_SEND, 31);	/* the peers hear from each other */
	CHECK_EQ(write_len(&p, &a, &b, 4096, 32), e);		/* 1012 + 3 x 1028 */
	CHECK_EQ(write_len(&p, &a, &b, 1024, 33), 0);		/* one packet */
	CHECK_EQ(write_len(&p, &a, &b, 2048, 34), e);		/* 1016 + 1032 */
	CHECK_EQ(write_len(&p, &a, &b, 2064, 35), 0);		/* not 1024 + 1040 */
	CHECK_EQ(write_len(&p, &a, &b, 4098, 36), e);		/* 1016 + 2 x 1032 + 1018 */
	CHECK_EQ(write_len(&p, &a, &b, 3 * 1024 + 1, 37), e);	/* 1016 + 1032 + 1025 */
	CHECK_EQ(write_len(&p, &a, &b, 3 * 1024, 41), e);	/* 756 + 3 x 772 */
	CHECK_EQ(write_len(&p, &a, &b, 12 * 1024, 42), e);	/* 753 + 15 x 769 */
	CHECK_EQ(write_len(&p, &a, &b, 65536, 38), e);		/* 1012 + 62 x 1028 + 788 */
	CHECK_EQ(write_len(&p, &a, &b, MLEN - 1024, 40), 0);	/* its P would be 1040 */
	/* one send unless a spurious timeout on a loaded machine cut the window or resent */
	for (uint32_t len = 3072; len <= 4096; len += 1024) {
		int64_t cut = -windows_cut(), rt = -vu_stat("retransmits");

		g = write_list(&p, &a, &b, len, 39);
		cut += windows_cut();
		rt += vu_stat("retransmits");
		printf("%s: four %u-byte WRITEs in one list at path MTU 1024: %lld GSO sends "
		       "(window cuts %lld, resent %lld)\n",
		       off ? "seg_even_mtu=0" : "all on", len, (long long)g, (long long)cut,
		       (long long)rt);
		if (off)
			CHECK(g >= 4);
		else if (!cut && !rt)
			CHECK_EQ(g, 1);
	}
	vu_pair_destroy(&p);
	return !sr_test_failures ? 0 : 3;
}

static int no_inband(int sock, void *arg)
{
	struct vu_buf a, b;
	struct vu_pair p;
	int64_t n1, n2;

	(void)arg;
	setenv("SOFTRDMA_SEG_INBAND", "0", 1);
	if (child_open(&a, &b))
		return 2;
	pair(&p, IBV_MTU_4096);
	n1 = one_op(&p, &a, &b, IBV_WR_SEND, 5);
	n2 = one_op(&p, &a, &b, IBV_WR_SEND, 6);
	printf("seg_inband=0: 1 MiB SENDs took %lld and %lld packets\n", (long long)n1,
	       (long long)n2);
	vu_pair_destroy(&p);
	(void)sock;
	return n1 >= 256 && n2 >= 256 && !sr_test_failures ? 0 : 3;
}

int main(void)
{
	struct vu_child ch, ch2, ch3, ch4, ch5, ch6;
	struct vu_buf a, b;
	struct vu_pair p;
	int64_t n;

	sr_test_timeout(120);
	setenv("SOFTRDMA_DIRECT", "0", 1);	/* WRITE and READ over packets */
	REQUIRE(vu_fork(&ch, no_inband, NULL, 60) == 0);
	REQUIRE(vu_fork(&ch2, fshort, NULL, 60) == 0);
	REQUIRE(vu_fork(&ch3, fshort, "nofshort", 60) == 0);
	REQUIRE(vu_fork(&ch4, fshort, "noeven", 60) == 0);
	REQUIRE(vu_fork(&ch5, even_mtu, NULL, 60) == 0);
	REQUIRE(vu_fork(&ch6, even_mtu, "off", 60) == 0);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &a, MLEN, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &b, MLEN, VU_ACCESS_ALL) == 0);

	pair(&p, IBV_MTU_4096);
	n = one_op(&p, &a, &b, IBV_WR_SEND, 1);
	printf("first 1 MiB SEND: %lld packets\n", (long long)n);
	CHECK(n >= 256);	/* nothing of the peer seen yet: the path MTU */
	n = one_op(&p, &a, &b, IBV_WR_SEND, 2);
	printf("second 1 MiB SEND: %lld packets\n", (long long)n);
	CHECK(n >= 18 && n < 40);	/* 61440-byte segments (loopback) */
	n = one_op(&p, &a, &b, IBV_WR_RDMA_WRITE, 3);
	printf("1 MiB WRITE: %lld packets\n", (long long)n);
	CHECK(n >= 18 && n < 40);
	n = one_op(&p, &a, &b, IBV_WR_RDMA_READ, 4);
	printf("1 MiB READ: %lld packets (request, responses in large segments)\n", (long long)n);
	CHECK(n >= 18 && n < 40);
	vu_pair_destroy(&p);

	/* A new pair: its first operation is a READ, before either side saw the other. */
	pair(&p, IBV_MTU_4096);
	n = one_op(&p, &a, &b, IBV_WR_RDMA_READ, 5);
	printf("first 1 MiB READ: %lld packets (responses at the path MTU)\n", (long long)n);
	CHECK(n >= 256);
	n = one_op(&p, &a, &b, IBV_WR_RDMA_READ, 6);
	printf("second 1 MiB READ: %lld packets\n", (long long)n);
	CHECK(n >= 18 && n < 40);
	vu_pair_destroy(&p);

	pair(&p, IBV_MTU_1024);
	one_op(&p, &a, &b, IBV_WR_SEND, 7);
	n = one_op(&p, &a, &b, IBV_WR_SEND, 8);
	printf("path MTU 1024: 1 MiB SEND took %lld packets\n", (long long)n);
	CHECK(n >= 1024);
	vu_pair_destroy(&p);

	test_frmr();
	CHECK_EQ(vu_child_wait(&ch, 60), 0);
	CHECK_EQ(vu_child_wait(&ch2, 60), 0);
	CHECK_EQ(vu_child_wait(&ch3, 60), 0);
	CHECK_EQ(vu_child_wait(&ch4, 60), 0);
	CHECK_EQ(vu_child_wait(&ch5, 60), 0);
	CHECK_EQ(vu_child_wait(&ch6, 60), 0);
	return sr_test_done("test_seg_inband");
}
