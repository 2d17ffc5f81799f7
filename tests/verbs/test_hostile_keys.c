/* SPDX-License-Identifier: MIT */
/*
 * A hostile peer (a raw UDP socket, tests/common/rawpeer.c) against keys, lengths, alignment and
 * QP states, each case beside a positive control that shows the same request does land when
 * it is allowed (so that a refusal means the check, not a broken setup):
 *
 *   - guessed rkeys: random 32-bit guesses, and every tag of a known key index (how many
 *     guesses one success costs: the 8 tag bits), and how the tags of one index are spread
 *     over re-registrations;
 *   - READs with huge lengths, ATOMICs at misaligned addresses;
 *   - stale keys: an MR's after ibv_dereg_mr, a type 2 window's after LOCAL_INV;
 *   - requests to QPs in RESET, RTR, SQD and ERR, to a destroyed QPN and to the old QPN of a
 *     recycled QP index; a READ from a stranger.
 *
 * Each case asserts the IBA outcome (drop and count, NAK of the right class, the victim QP to
 * ERR) and that no byte of the target changed that the request was not allowed to change.
 * The tables are made small (SOFTRDMA_MAX_QP, SOFTRDMA_MAX_MR = 16) so that indexes recycle.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <stdlib.h>

#define GUARD 0xee
#define TSIZE (64u * 1024)
#define FAKE_QPN 0x00beef
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)
#define ACK_OK (SR_AETH_ACK | SR_AETH_ACK_UNLIMITED)
#define NAK_ACC (SR_AETH_NAK | SR_NAK_REM_ACCESS_ERR)
#define NAK_INV (SR_AETH_NAK | SR_NAK_INVALID_REQ)
#define ALL_REMOTE (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define SR_MAX_QP_TEST 16	/* SOFTRDMA_MAX_QP: QPN = tag << 4 | index */
#define SR_MAX_MR_TEST 16	/* SOFTRDMA_MAX_MR: key = index << 8 | tag */

static struct vu_dev dev;
static struct vu_buf tgt;
static struct rawpeer rp;
static struct ibv_cq *vcq, *pcq;	/* the victims' CQ; an always-empty one to poll */

static void pump(int ms)
{
	rp_pump(pcq, ms);
}

static int64_t stat_delta(const char *name, int64_t base, int64_t want, int ms)
{
	uint64_t end = vu_now_ms() + (uint64_t)ms;
	int64_t d;

	for (;;) {
		d = vu_stat(name) - base;
		if (d >= want || vu_now_ms() >= end)
			return d;
		pump(1);
	}
}

#define EXPECT_STAT(name, base, n) expect_stat(name, base, n, __LINE__)
static void expect_stat(const char *name, int64_t base, int64_t n, int line)
{
	int64_t d = stat_delta(name, base, n, 2000);

	if (d != n)
		SR_FAIL("line %d: counter %s went up by %lld, expected %lld", line, name, (long long)d,
			(long long)n);
}

/* Every byte of the target is GUARD except [off, off + len) (len 0: all of it). */
#define CHECK_TARGET_BUT(off, len) check_target_but(off, len, __LINE__)
static void check_target_but(size_t off, size_t len, int line)
{
	for (size_t i = 0; i < TSIZE; i++) {
		if (i >= off && i < off + len)
			continue;
		if (tgt.p[i] != GUARD) {
			SR_FAIL("line %d: target byte %zu changed to 0x%02x", line, i, tgt.p[i]);
			return;
		}
	}
}
#define CHECK_TARGET() CHECK_TARGET_BUT(0, 0)

static void victim_connect(struct ibv_qp *qp, uint32_t rq_psn)
{
	struct vu_conn_cfg c;

	vu_conn_cfg_raw(&c, 0, rq_psn);
	c.access = ALL_REMOTE;
	REQUIRE(vu_qp_connect(qp, &c, &rp.gid, FAKE_QPN) == 0);
}

static struct ibv_qp *victim_new(void)
{
	struct vu_qp_cfg q;
	struct ibv_qp *qp;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	qp = vu_qp_create(&dev, vcq, vcq, &q);
	REQUIRE(qp);
	return qp;
}

static struct ibv_qp *victim(uint32_t rq_psn)
{
	struct ibv_qp *qp = victim_new();

	victim_connect(qp, rq_psn);
	return qp;
}

/* Back to RESET and connected again (the QPN stays): a fresh victim at the cost of 4 modifies. */
static void victim_again(struct ibv_qp *qp, uint32_t rq_psn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
	victim_connect(qp, rq_psn);
}

/* Discards what reached the raw socket so far (after letting the engine run ms). */
static void drain_replies(int ms)
{
	uint8_t buf[4096];

	pump(ms);
	while (rp_recv(&rp, buf, sizeof(buf), NULL, 0) > 0)
		;
}

static void destroy_victim(struct ibv_qp *qp)
{
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	drain_replies(10);
}

static int send_write(struct rawpeer *r, uint32_t qpn, uint32_t psn, uint64_t va, uint32_t rkey,
		      const void *data, uint32_t len)
{
	uint8_t hdr[64];
	size_t hlen = rp_hdr_write(hdr, OPC(WRITE_ONLY), qpn, psn, true, va, rkey, len);

	return rp_send(r, hdr, hlen, data, len, 0);
}

static int send_read(struct rawpeer *r, uint32_t qpn, uint32_t psn, uint64_t va, uint32_t rkey,
		     uint32_t len)
{
	uint8_t hdr[64];
	size_t hlen = rp_hdr_write(hdr, OPC(READ_REQ), qpn, psn, true, va, rkey, len);

	return rp_send(r, hdr, hlen, NULL, 0, 0);
}

static int send_atomic(uint8_t op, uint32_t qpn, uint32_t psn, uint64_t va, uint32_t rkey,
		       uint64_t swap_add, uint64_t compare)
{
	uint8_t hdr[64];
	const struct sr_opcode_info *oi = &sr_opcode[op];

	memset(hdr, 0, sizeof(hdr));
	sr_bth_build((struct sr_bth *)hdr, op, false, false, 0, SR_DEFAULT_PKEY, qpn, true, psn);
	sr_atmeth_build((struct sr_atmeth *)(hdr + oi->offset[SR_H_ATMETH]), va, rkey, swap_add,
			compare);
	return rp_send(&rp, hdr, oi->length, NULL, 0, 0);
}

/* The next packet from the stack within 2 s (0: none). */
static int next_reply(struct sr_pkt *pkt, uint8_t *buf, size_t cap)
{
	return rp_recv_polling(&rp, pcq, buf, cap, pkt, 2000);
}

static uint8_t syndrome(const struct sr_pkt *pkt)
{
	return (pkt->mask & SR_M_AETH) ? sr_aeth_syndrome(sr_pkt_h(pkt, SR_H_AETH)) : 0xff;
}

/* The next reply is an ACK (opcode ACK) with this syndrome and PSN. */
#define EXPECT_AETH(syn, psn) expect_aeth(syn, psn, __LINE__)
static bool expect_aeth(uint8_t syn, uint32_t psn, int line)
{
	uint8_t buf[4096];
	struct sr_pkt pkt;

	if (next_reply(&pkt, buf, sizeof(buf)) <= 0) {
		SR_FAIL("line %d: no reply (wanted syndrome 0x%02x PSN %u)", line, syn, psn);
		return false;
	}
	if (pkt.opcode != OPC(ACK) || syndrome(&pkt) != syn || pkt.psn != psn) {
		SR_FAIL("line %d: got %s syndrome 0x%02x PSN %u, wanted ACK syndrome 0x%02x PSN %u",
			line, sr_opcode_name(pkt.opcode), syndrome(&pkt), pkt.psn, syn, psn);
		return false;
	}
	return true;
}

static void expect_no_reply(int ms)
{
	uint8_t buf[4096];
	struct sr_pkt pkt;

	pump(ms);
	if (rp_recv(&rp, buf, sizeof(buf), &pkt, 0) > 0)
		SR_FAIL("unexpected reply %s PSN %u", sr_opcode_name(pkt.opcode), pkt.psn);
}

/* ---- guessed rkeys ------------------------------------------------------------------------- */
/*
 * One guess: a WRITE of 8 bytes at the target's start with key `key`. Returns true when it
 * was accepted (ACK, and the bytes landed), false when it was NAKed as a remote access error
 * (and nothing changed). The victim is in ERR after a refusal (IBA 9.9.3.1.2): reconnected.
 */
static bool guess(struct ibv_qp *v, uint32_t key)
{
	static const uint8_t data[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	uint8_t buf[4096];
	struct sr_pkt pkt;
	bool ok;

	REQUIRE(send_write(&rp, v->qp_num, 0, (uintptr_t)tgt.p, key, data, 8) == 0);
	if (next_reply(&pkt, buf, sizeof(buf)) <= 0 || pkt.opcode != OPC(ACK)) {
		SR_FAIL("guess 0x%08x: no ACK/NAK", key);
		return false;
	}
	ok = syndrome(&pkt) == ACK_OK;
	if (!ok && syndrome(&pkt) != NAK_ACC)
		SR_FAIL("guess 0x%08x: syndrome 0x%02x", key, syndrome(&pkt));
	if (ok) {
		CHECK(memcmp(tgt.p, data, 8) == 0);
		memset(tgt.p, GUARD, 8);
	}
	CHECK_TARGET();
	victim_again(v, 0);
	return ok;
}

static void test_guessed_keys(void)
{
	struct ibv_qp *v = victim(0);
	uint32_t key = tgt.mr->rkey, index = key >> 8;
	uint64_t rng = 0x6b657973;
	int random_ok = 0, tag_ok = 0, right_tag = -1;
	const int nrandom = 1000;

	/* Uniform 32-bit guesses (the true key excluded): success would be a hole in the check. */
	for (int i = 0; i < nrandom; i++) {
		uint32_t g = (uint32_t)vu_rand(&rng);

		if (g == key)
			continue;
		random_ok += guess(v, g);
	}
	/* The index known (a peer that saw an earlier key of this slot): every tag. */
	for (unsigned tag = 0; tag < 256; tag++) {
		if (guess(v, index << 8 | tag)) {
			tag_ok++;
			right_tag = (int)tag;
		}
	}
	printf("guessed rkeys: %d of %d random 32-bit guesses accepted; with the index known, %d of "
	       "256 tags (the true one: %s)\n", random_ok, nrandom, tag_ok,
	       right_tag == (int)(key & 0xff) ? "yes" : "no");
	CHECK_EQ(random_ok, 0);
	CHECK_EQ(tag_ok, 1);
	CHECK_EQ(right_tag, (int)(key & 0xff));
	destroy_victim(v);

	/*
	 * The tags of one index over re-registrations: random (getrandom), not a sequence a peer
	 * could follow. With MAX_MR 16 an index comes back every 15 registrations or so; 2048
	 * registrations give 2048 tags. Uniform bytes: every value about 8 times (a value 30
	 * times or more has probability < 1e-9), next tag = previous + 1 about 1 time in 256.
	 */
	{
		unsigned count[256] = { 0 }, seq = 0, n = 0, maxc = 0, prev_tag[SR_MAX_MR_TEST] = { 0 };
		bool seen[SR_MAX_MR_TEST] = { false };

		for (int i = 0; i < 2048; i++) {
			struct ibv_mr *mr = ibv_reg_mr(dev.pd, tgt.p, 4096, IBV_ACCESS_REMOTE_READ);
			unsigned idx, tag;

			REQUIRE(mr);
			idx = mr->rkey >> 8;
			tag = mr->rkey & 0xff;
			REQUIRE(idx < SR_MAX_MR_TEST);
			count[tag]++;
			if (seen[idx] && tag == ((prev_tag[idx] + 1) & 0xff))
				seq++;
			seen[idx] = true;
			prev_tag[idx] = tag;
			n++;
			CHECK_EQ(ibv_dereg_mr(mr), 0);
		}
		for (int t = 0; t < 256; t++)
			maxc = count[t] > maxc ? count[t] : maxc;
		printf("rkey tags: %u registrations, most frequent tag %u times, %u successors of the "
		       "previous tag of the same index\n", n, maxc, seq);
		CHECK(maxc < 30);
		CHECK(seq < 40);
	}
}

/* ---- huge READs, misaligned ATOMICs -------------------------------------------------------- */
static void test_lengths_alignment(void)
{
	static const uint32_t huge[] = { TSIZE + 1, 0x7fffffff, 0x80000000, 0xffffffff };
	uint8_t buf[4096];
	struct sr_pkt pkt;
	struct ibv_qp *v = victim(0);
	int64_t b, b2;
	struct ibv_port_attr pa;

	printf("huge READ lengths, misaligned ATOMICs\n");
	REQUIRE(ibv_query_port(dev.ctx, 1, &pa) == 0);
	CHECK_EQ(pa.max_msg_sz, 1u << 31);
	/* The control: 64 bytes read back as they are. */
	vu_fill(tgt.p + 256, 64, 5);
	REQUIRE(send_read(&rp, v->qp_num, 0, (uintptr_t)tgt.p + 256, tgt.mr->rkey, 64) == 0);
	if (next_reply(&pkt, buf, sizeof(buf)) > 0) {
		CHECK_EQ(pkt.opcode, OPC(READ_RESP_ONLY));
		CHECK_EQ(pkt.paylen, 64);
		CHECK_EQ(vu_check(sr_pkt_payload(&pkt), 64, 5), -1);
	} else {
		SR_FAIL("no READ response");
	}
	memset(tgt.p + 256, GUARD, 64);
	destroy_victim(v);

	for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
		v = victim(0);
		b = vu_stat("access_naks_sent");
		b2 = vu_stat("inv_req_naks_sent");
		REQUIRE(send_read(&rp, v->qp_num, 0, (uintptr_t)tgt.p, tgt.mr->rkey, huge[i]) == 0);
		/* Past the MR: a remote access error (IBA 9.7.5.1.3); longer than the largest
		 * message (the port's max_msg_sz, 2^31): an invalid request, as rxe answers.
		 * Never a response. */
		if (huge[i] > pa.max_msg_sz) {
			EXPECT_AETH(NAK_INV, 0);
			EXPECT_STAT("inv_req_naks_sent", b2, 1);
		} else {
			EXPECT_AETH(NAK_ACC, 0);
			EXPECT_STAT("access_naks_sent", b, 1);
		}
		CHECK_EQ(vu_qp_state(v), IBV_QPS_ERR);
		expect_no_reply(5);
		destroy_victim(v);
	}

	/* ATOMICs: the control (aligned FETCH_ADD), then misaligned CMP_SWAP and FETCH_ADD. */
	v = victim(0);
	memset(tgt.p + 512, 0, 8);
	REQUIRE(send_atomic(OPC(FETCH_ADD), v->qp_num, 0, (uintptr_t)tgt.p + 512, tgt.mr->rkey, 5,
			    0) == 0);
	if (next_reply(&pkt, buf, sizeof(buf)) > 0) {
		uint64_t now;

		CHECK_EQ(pkt.opcode, OPC(ATOMIC_ACK));
		memcpy(&now, tgt.p + 512, 8);
		CHECK_EQ(now, 5);
	} else {
		SR_FAIL("no ATOMIC ACK");
	}
	memset(tgt.p + 512, GUARD, 8);
	destroy_victim(v);
	for (unsigned off = 1; off < 8; off += 3) {
		for (int op = 0; op < 2; op++) {
			v = victim(0);
			b = vu_stat("inv_req_naks_sent");
			REQUIRE(send_atomic(op ? OPC(CMP_SWAP) : OPC(FETCH_ADD), v->qp_num, 0,
					    (uintptr_t)tgt.p + 512 + off, tgt.mr->rkey, 1,
					    0xeeeeeeeeeeeeeeeeull) == 0);
			/* IBA 9.4.5: not naturally aligned: an invalid request. */
			EXPECT_AETH(NAK_INV, 0);
			EXPECT_STAT("inv_req_naks_sent", b, 1);
			CHECK_EQ(vu_qp_state(v), IBV_QPS_ERR);
			destroy_victim(v);
		}
	}
	CHECK_TARGET();
}

/* Binds the type 2 window mw to [tgt + 4096, + 4096) of base for QP v (remote write); returns
 * its new rkey. */
static uint32_t bind_type2(struct ibv_qp *v, struct ibv_mw *mw, struct ibv_mr *base, uint64_t id)
{
	struct ibv_send_wr wr, *bad;
	uint32_t rkey = ibv_inc_rkey(mw->rkey);

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = base;
	wr.bind_mw.bind_info.addr = (uintptr_t)tgt.p + 4096;
	wr.bind_mw.bind_info.length = 4096;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	REQUIRE(ibv_post_send(v, &wr, &bad) == 0);
	vu_expect_wc(vcq, id, IBV_WC_SUCCESS, IBV_WC_BIND_MW, 2000, __LINE__);
	return rkey;	/* (a bind by post leaves mw->rkey to the application, as rdma-core) */
}

/* ---- stale keys ------------------------------------------------------------------------------ */
static void test_stale_keys(void)
{
	uint8_t data[32];
	struct ibv_qp *v = victim(0);
	struct ibv_mr *mr;
	uint32_t stale;
	int64_t b;

	printf("stale keys after deregistration and invalidation\n");
	vu_fill(data, sizeof(data), 7);
	/* An MR: its key works, then it is deregistered and the same WRITE is refused. */
	mr = ibv_reg_mr(dev.pd, tgt.p, TSIZE, (int)VU_ACCESS_ALL);
	REQUIRE(mr);
	stale = mr->rkey;
	REQUIRE(send_write(&rp, v->qp_num, 0, (uintptr_t)tgt.p + 1024, stale, data, 32) == 0);
	EXPECT_AETH(ACK_OK, 0);
	CHECK_EQ(vu_check(tgt.p + 1024, 32, 7), -1);
	memset(tgt.p + 1024, GUARD, 32);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	b = vu_stat("access_naks_sent");
	REQUIRE(send_write(&rp, v->qp_num, 1, (uintptr_t)tgt.p + 1024, stale, data, 32) == 0);
	EXPECT_AETH(NAK_ACC, 1);
	EXPECT_STAT("access_naks_sent", b, 1);
	CHECK_TARGET();
	victim_again(v, 0);

	/* A type 2 window bound by the victim QP: it works, then LOCAL_INV, then it is refused. */
	{
		struct ibv_mr *base = ibv_reg_mr(dev.pd, tgt.p, TSIZE,
						 (int)(VU_ACCESS_ALL | IBV_ACCESS_MW_BIND));
		struct ibv_mw *mw = ibv_alloc_mw(dev.pd, IBV_MW_TYPE_2);
		struct ibv_send_wr wr, *bad;
		uint32_t rkey;

		REQUIRE(base && mw);
		/* Bound, the window takes a WRITE; invalidated, the same WRITE is refused. */
		rkey = bind_type2(v, mw, base, 11);
		REQUIRE(send_write(&rp, v->qp_num, 0, (uintptr_t)tgt.p + 4096, rkey, data, 32) == 0);
		EXPECT_AETH(ACK_OK, 0);
		CHECK_EQ(vu_check(tgt.p + 4096, 32, 7), -1);
		memset(tgt.p + 4096, GUARD, 32);
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 12;
		wr.opcode = IBV_WR_LOCAL_INV;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.invalidate_rkey = rkey;
		REQUIRE(ibv_post_send(v, &wr, &bad) == 0);
		vu_expect_wc(vcq, 12, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV, 2000, __LINE__);
		b = vu_stat("access_naks_sent");
		REQUIRE(send_write(&rp, v->qp_num, 1, (uintptr_t)tgt.p + 4096, rkey, data, 32) == 0);
		EXPECT_AETH(NAK_ACC, 1);
		EXPECT_STAT("access_naks_sent", b, 1);
		CHECK_TARGET();
		victim_again(v, 0);
		/* Bound again (a new key): outside the window, through its key, refused, although
		 * the MR under it covers those bytes. */
		rkey = bind_type2(v, mw, base, 13);
		b = vu_stat("access_naks_sent");
		REQUIRE(send_write(&rp, v->qp_num, 0, (uintptr_t)tgt.p + 8192, rkey, data, 32) == 0);
		EXPECT_AETH(NAK_ACC, 0);
		EXPECT_STAT("access_naks_sent", b, 1);
		CHECK_TARGET();
		destroy_victim(v);
		CHECK_EQ(ibv_dealloc_mw(mw), 0);
		CHECK_EQ(ibv_dereg_mr(base), 0);
	}
}

/* ---- QP states, destroyed and recycled QPNs, strangers -------------------------------------- */
static void test_qp_states(void)
{
	uint8_t data[32];
	struct ibv_qp *v;
	struct ibv_qp_attr a;
	int64_t b;

	printf("QPs in RESET, RTR, SQD, ERR; destroyed and recycled QPNs; a stranger's READ\n");
	vu_fill(data, sizeof(data), 8);

	/* RESET (created, never modified) and ERR: dropped and counted, no reply. */
	v = victim_new();
	b = vu_stat("drop_qp_state");
	REQUIRE(send_write(&rp, v->qp_num, 0, (uintptr_t)tgt.p, tgt.mr->rkey, data, 32) == 0);
	EXPECT_STAT("drop_qp_state", b, 1);
	victim_connect(v, 0);
	a.qp_state = IBV_QPS_ERR;
	REQUIRE(ibv_modify_qp(v, &a, IBV_QP_STATE) == 0);
	b = vu_stat("drop_qp_state");
	REQUIRE(send_write(&rp, v->qp_num, 0, (uintptr_t)tgt.p, tgt.mr->rkey, data, 32) == 0);
	EXPECT_STAT("drop_qp_state", b, 1);
	expect_no_reply(10);
	CHECK_TARGET();
	destroy_victim(v);

	/* RTR and SQD receive (IBA 10.3.1: the receive side works from RTR on; SQD drains the
	 * send queue only): the WRITE lands and is acknowledged. */
	for (int sqd = 0; sqd < 2; sqd++) {
		struct vu_conn_cfg c;

		v = victim_new();
		vu_conn_cfg_default(&c);
		c.access = ALL_REMOTE;
		REQUIRE(vu_qp_to_init(v, &c) == 0);
		REQUIRE(vu_qp_to_rtr(v, &c, &rp.gid, FAKE_QPN) == 0);
		if (sqd) {
			REQUIRE(vu_qp_to_rts(v, &c) == 0);
			a.qp_state = IBV_QPS_SQD;
			REQUIRE(ibv_modify_qp(v, &a, IBV_QP_STATE) == 0);
		}
		REQUIRE(send_write(&rp, v->qp_num, 0, (uintptr_t)tgt.p + 2048, tgt.mr->rkey, data,
				   32) == 0);
		EXPECT_AETH(ACK_OK, 0);
		CHECK_EQ(vu_check(tgt.p + 2048, 32, 8), -1);
		memset(tgt.p + 2048, GUARD, 32);
		CHECK_TARGET();
		CHECK_EQ(vu_qp_state(v), sqd ? IBV_QPS_SQD : IBV_QPS_RTR);
		destroy_victim(v);
	}

	/* A destroyed QPN: dropped as a QP gone (a peer's last word), no reply. */
	v = victim(0);
	uint32_t old = v->qp_num;

	destroy_victim(v);
	b = vu_stat("drop_qp_gone");
	REQUIRE(send_write(&rp, old, 0, (uintptr_t)tgt.p, tgt.mr->rkey, data, 32) == 0);
	EXPECT_STAT("drop_qp_gone", b, 1);
	expect_no_reply(10);
	CHECK_TARGET();

	/* The index recycled (MAX_QP 16: it comes back within 16 creations) under a new tag: the
	 * old QPN does not reach the new QP, the new one works. */
	{
		struct ibv_qp *made[20];
		int n = 0, hit = -1;
		uint32_t mask = SR_MAX_QP_TEST - 1;

		while (n < 20 && hit < 0) {
			made[n] = victim(0);
			if ((made[n]->qp_num & mask) == (old & mask))
				hit = n;
			n++;
		}
		REQUIRE(hit >= 0);
		v = made[hit];
		CHECK(v->qp_num != old);
		int64_t bq = vu_stat("drop_qpn"), bg = vu_stat("drop_qp_gone");

		REQUIRE(send_write(&rp, old, 0, (uintptr_t)tgt.p, tgt.mr->rkey, data, 32) == 0);
		CHECK_EQ(stat_delta("drop_qpn", bq, 1, 1000) + stat_delta("drop_qp_gone", bg, 1, 0), 1);
		expect_no_reply(10);
		CHECK_TARGET();
		CHECK_EQ(vu_qp_state(v), IBV_QPS_RTS);
		REQUIRE(send_write(&rp, v->qp_num, 0, (uintptr_t)tgt.p + 3072, tgt.mr->rkey, data,
				   32) == 0);
		EXPECT_AETH(ACK_OK, 0);
		CHECK_EQ(vu_check(tgt.p + 3072, 32, 8), -1);
		memset(tgt.p + 3072, GUARD, 32);
		for (int i = 0; i < n; i++)
			destroy_victim(made[i]);
	}

	/* A READ from a stranger (same host, another port): dropped, nothing read back. */
	{
		struct rawpeer stranger;
		uint8_t buf[4096];

		v = victim(0);
		REQUIRE(rp_open(&stranger, &dev.gid) == 0);
		b = vu_stat("drop_src");
		REQUIRE(send_read(&stranger, v->qp_num, 0, (uintptr_t)tgt.p, tgt.mr->rkey, 64) == 0);
		EXPECT_STAT("drop_src", b, 1);
		pump(10);
		CHECK_EQ(rp_recv(&stranger, buf, sizeof(buf), NULL, 0), 0);
		expect_no_reply(5);
		CHECK_EQ(vu_qp_state(v), IBV_QPS_RTS);
		rp_close(&stranger);
		destroy_victim(v);
	}
	CHECK_TARGET();
}

int main(void)
{
	/* Small tables, so that key and QP indexes come back within a few creations. */
	setenv("SOFTRDMA_MAX_QP", "16", 1);
	setenv("SOFTRDMA_MAX_MR", "16", 1);
	sr_test_timeout(240);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_stat("rx_packets") >= 0);
	REQUIRE(vu_buf_alloc(&dev, &tgt, TSIZE, VU_ACCESS_ALL) == 0);
	memset(tgt.p, GUARD, TSIZE);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	vcq = ibv_create_cq(dev.ctx, 256, NULL, NULL, 0);
	pcq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	REQUIRE(vcq && pcq);

	test_guessed_keys();
	test_lengths_alignment();
	test_stale_keys();
	test_qp_states();

	CHECK_EQ(ibv_destroy_cq(pcq), 0);
	CHECK_EQ(ibv_destroy_cq(vcq), 0);
	rp_close(&rp);
	vu_buf_free(&tgt);
	vu_close(&dev);
	return sr_test_done("test_hostile_keys");
}
