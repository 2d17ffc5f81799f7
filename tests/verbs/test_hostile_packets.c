/* SPDX-License-Identifier: MIT */
/*
 * Hostile input from the network, sent from a raw UDP socket of this test (tests/common/
 * rawpeer.c builds packets with src/wire, valid ICRC included) at the device and at live QPs:
 * garbage, truncated headers, invalid opcodes, a bad transport version, a bad pad count, a bad
 * ICRC, an unknown QPN, a wrong P_Key, a transport that does not match the QP, a QP not ready,
 * a stranger's source address, valid WRITEs with a wrong rkey / out of bounds / without rights,
 * PSNs far outside the window, and a burst of random mutations. Every one is dropped (or NAKed,
 * where IBA says so), counted under its reason, and never touches memory; afterwards the stack
 * still carries a normal transfer.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <errno.h>

#define GUARD 0xee
#define TSIZE (1u << 20)
#define FAKE_QPN 0x00beef
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf tgt, lb;
static struct vu_pair pair;		/* a normal connection, to prove the stack still works */
static struct rawpeer rp;
static struct ibv_cq *vcq;		/* the victims' CQ */

/* Lets the engine process what arrived (an application polling a CQ drains the socket). */
static void pump(int ms)
{
	rp_pump(pair.rcq[0], ms);
}

/* Waits up to ms for counter `name` to be at least base + want; returns the delta. */
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

#define EXPECT_DROP(name, base, n) expect_drop(name, base, n, __LINE__)
static void expect_drop(const char *name, int64_t base, int64_t n, int line)
{
	int64_t d = stat_delta(name, base, n, 2000);

	if (d != n)
		SR_FAIL("line %d: counter %s went up by %lld, expected %lld", line, name, (long long)d,
			(long long)n);
}

#define CHECK_TARGET() check_target(__LINE__)
static void check_target(int line)
{
	long at = vu_check_byte(tgt.p, tgt.len, GUARD);

	if (at >= 0)
		SR_FAIL("line %d: target byte %ld changed to 0x%02x", line, at, tgt.p[at]);
}

/* An RC QP whose peer is our raw socket: it takes requests from us (PSN rq_psn first). */
/* An RC QP connected to the raw peer, path MTU mtu (0: the default). */
static struct ibv_qp *victim_mtu(unsigned access, uint32_t rq_psn, enum ibv_mtu mtu)
{
	struct vu_conn_cfg c;

	vu_conn_cfg_raw(&c, 0, rq_psn);
	c.access = access;
	if (mtu)
		c.mtu = mtu;
	return vu_qp_connect_raw(&dev, vcq, NULL, &c, &rp.gid, FAKE_QPN);
}

static struct ibv_qp *victim(unsigned access, uint32_t rq_psn)
{
	return victim_mtu(access, rq_psn, 0);
}

/* A whole RC WRITE_ONLY to qpn with a valid ICRC; returns what rp_send returned. */
static int send_write(struct rawpeer *r, uint32_t qpn, uint32_t psn, uint64_t va, uint32_t rkey,
		      const void *data, uint32_t len, uint32_t icrc_xor)
{
	uint8_t hdr[64];
	size_t hlen = rp_hdr_write(hdr, OPC(WRITE_ONLY), qpn, psn, true, va, rkey, len);

	return rp_send(r, hdr, hlen, data, len, icrc_xor);
}

/* The next packet from the stack to our raw socket, within 2 s (the engine pumped meanwhile):
 * rp_recv's answer (0: none came). */
static int next_pkt(uint8_t *buf, size_t cap, struct sr_pkt *pkt)
{
	return rp_recv_polling(&rp, pair.rcq[0], buf, cap, pkt, 2000);
}

/* The next packet from the stack to our raw socket is an ACK/NAK with this syndrome and PSN. */
#define EXPECT_AETH(syn, psn) expect_aeth(syn, psn, __LINE__)
static void expect_aeth(uint8_t syn, uint32_t psn, int line)
{
	uint8_t buf[256];
	struct sr_pkt pkt;
	int n = next_pkt(buf, sizeof(buf), &pkt);

	if (n <= 0) {
		SR_FAIL("line %d: no ACK/NAK (wanted syndrome 0x%02x PSN %u)", line, syn, psn);
		return;
	}
	if (pkt.opcode != OPC(ACK) ||
	    sr_aeth_syndrome(sr_pkt_h(&pkt, SR_H_AETH)) != syn || pkt.psn != psn)
		SR_FAIL("line %d: got %s syndrome 0x%02x PSN %u, wanted ACK syndrome 0x%02x PSN %u",
			line, sr_opcode_name(pkt.opcode),
			(pkt.mask & SR_M_AETH) ? sr_aeth_syndrome(sr_pkt_h(&pkt, SR_H_AETH)) : 0,
			pkt.psn, syn, psn);
}

static void expect_no_reply(int ms)
{
	uint8_t buf[256];
	struct sr_pkt pkt;

	pump(ms);
	if (rp_recv(&rp, buf, sizeof(buf), &pkt, 0) > 0)
		SR_FAIL("unexpected reply %s PSN %u", sr_opcode_name(pkt.opcode), pkt.psn);
}

/* ---- malformed: dropped by the parser ------------------------------------------------------ */
static void test_malformed(struct ibv_qp *v)
{
	uint8_t pkt[512], hdr[64], data[64];
	int64_t b;
	size_t hlen;

	printf("malformed packets\n");
	memset(data, 0x5a, sizeof(data));

	/* Garbage shorter than BTH + ICRC, including an empty datagram. */
	b = vu_stat("drop_short");
	for (size_t n = 0; n < 16; n++) {
		memset(pkt, 0xa5, n);
		REQUIRE(rp_send_raw(&rp, pkt, n) == 0);
	}
	/* A WRITE_ONLY cut inside its RETH (headers need 28 bytes + ICRC). */
	hlen = rp_hdr_write(hdr, OPC(WRITE_ONLY), v->qp_num, 0, true, (uintptr_t)tgt.p,
			    tgt.mr->rkey, 8);
	memcpy(pkt, hdr, hlen);
	for (size_t n = 16; n < hlen + SR_ICRC_LEN; n += 4) {
		sr_st_le32(pkt + n - 4, rp_icrc(&rp, pkt, n));
		REQUIRE(rp_send_raw(&rp, pkt, n) == 0);
	}
	EXPECT_DROP("drop_short", b, 16 + (int64_t)((hlen + SR_ICRC_LEN - 16 + 3) / 4));

	/* Opcodes no RoCEv2 packet may carry: reserved, RD, and the CNP (counted, dropped). */
	static const uint8_t bad_ops[] = { 0x15, 0x18, 0x1f, 0x40, 0x45, 0x7f, 0xc0, 0xe0, 0xff };
	b = vu_stat("drop_opcode");
	for (size_t i = 0; i < sizeof(bad_ops); i++) {
		memset(pkt, 0, 64);
		sr_bth_build((struct sr_bth *)pkt, bad_ops[i], false, false, 0, SR_DEFAULT_PKEY,
			     v->qp_num, true, 0);
		REQUIRE(rp_send(&rp, pkt, SR_BTH_LEN, data, 16, 0) == 0);
	}
	memset(pkt, 0, 64);
	sr_bth_build((struct sr_bth *)pkt, SR_OPCODE_CNP, false, false, 0, SR_DEFAULT_PKEY,
		     v->qp_num, false, 0);
	REQUIRE(rp_send(&rp, pkt, SR_BTH_LEN + 16, NULL, 0, 0) == 0);
	EXPECT_DROP("drop_opcode", b, (int64_t)sizeof(bad_ops) + 1);

	/* Transport version 1..15. */
	b = vu_stat("drop_tver");
	for (unsigned t = 1; t < 16; t++) {
		hlen = rp_hdr_write(hdr, OPC(WRITE_ONLY), v->qp_num, 0, true, (uintptr_t)tgt.p,
				    tgt.mr->rkey, 8);
		hdr[1] |= (uint8_t)t;
		REQUIRE(rp_send(&rp, hdr, hlen, data, 8, 0) == 0);
	}
	EXPECT_DROP("drop_tver", b, 15);

	/* Pad count larger than the payload; pad on an opcode without payload. */
	b = vu_stat("drop_pad");
	{
		size_t len;

		hlen = rp_hdr_write(hdr, OPC(WRITE_ONLY), v->qp_num, 0, true, (uintptr_t)tgt.p,
				    tgt.mr->rkey, 0);
		/* Pad 3 with nothing between the headers and the ICRC (built by hand: rp_send
		 * derives the pad from the payload). */
		memcpy(pkt, hdr, hlen);
		pkt[1] = (uint8_t)(3 << SR_BTH_PAD_SHIFT);
		len = hlen + SR_ICRC_LEN;
		sr_st_le32(pkt + len - 4, rp_icrc(&rp, pkt, len));
		REQUIRE(rp_send_raw(&rp, pkt, len) == 0);
		/* An ACK (no payload) with 4 stray bytes and pad 0. */
		hlen = rp_hdr_ack(hdr, v->qp_num, 0, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0);
		memcpy(pkt, hdr, hlen);
		memset(pkt + hlen, 0, 4);
		len = hlen + 4 + SR_ICRC_LEN;
		sr_st_le32(pkt + len - 4, rp_icrc(&rp, pkt, len));
		REQUIRE(rp_send_raw(&rp, pkt, len) == 0);
	}
	EXPECT_DROP("drop_pad", b, 2);

	/* A bad ICRC: one flipped bit, anywhere in the check value. */
	b = vu_stat("drop_icrc");
	for (int bit = 0; bit < 32; bit += 5)
		REQUIRE(send_write(&rp, v->qp_num, 0, (uintptr_t)tgt.p, tgt.mr->rkey, data, 32,
				   1u << bit) == 0);
	EXPECT_DROP("drop_icrc", b, 7);

	/*
	 * An ICRC that matches only with another IPv4 ID: recovered for a sender that numbers
	 * its IDs (Linux rxe), but from a sender marked as softrdma only for the IDs it uses,
	 * 0..63 (the pieces of a GSO batch): any other ID is how a corrupted packet looks to
	 * the recovery (src/net/udp.c, sr_net_icrc_match). To a QPN nobody has: the packets
	 * that pass the ICRC check are counted as drop_qpn, and nothing else happens.
	 */
	{
		static const struct { bool mark; uint16_t id; bool pass; } c[] = {
			{ true, 1000, false }, { true, 63, true }, { true, 64, false },
			{ false, 1000, true },
		};
		int64_t bq = vu_stat("drop_qpn"), br = vu_stat("rx_id_recovered");
		int64_t bf = vu_stat("rx_id_refused");
		int pass = 0;
		size_t len;

		b = vu_stat("drop_icrc");
		hlen = rp_hdr_write(hdr, OPC(WRITE_ONLY), 0xabcdef, 0, true, (uintptr_t)tgt.p,
				    tgt.mr->rkey, 32);
		memcpy(pkt, hdr, hlen);
		memcpy(pkt + hlen, data, 32);
		len = hlen + 32 + SR_ICRC_LEN;
		for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
			pkt[4] = (uint8_t)(c[i].mark ? pkt[4] | SR_BTH_SR_MARK
						     : pkt[4] & ~SR_BTH_SR_MARK);
			sr_st_le32(pkt + len - 4, rp_icrc_id(&rp, pkt, len, c[i].id));
			REQUIRE(rp_send_raw(&rp, pkt, len) == 0);
			pass += c[i].pass;
		}
		EXPECT_DROP("drop_icrc", b, 2);
		EXPECT_DROP("drop_qpn", bq, pass);
		EXPECT_DROP("rx_id_recovered", br, pass);
		EXPECT_DROP("rx_id_refused", bf < 0 ? 0 : bf, 2);
	}
	expect_no_reply(20);
	CHECK_TARGET();
	CHECK_EQ(vu_qp_state(v), IBV_QPS_RTS);
}

/* ---- well-formed, but not for this stack or this QP ------------------------------------------ */
static void test_misdirected(struct ibv_qp *v)
{
	uint8_t data[64], hdr[64];
	int64_t b;
	size_t hlen;
	struct rawpeer stranger;

	printf("misdirected packets\n");
	memset(data, 0x5a, sizeof(data));

	/* No such QP (never handed out: QPN 0xffffff is multicast, 1 is the GSI QP). */
	b = vu_stat("drop_qpn");
	REQUIRE(send_write(&rp, 0x00dead, 0, (uintptr_t)tgt.p, tgt.mr->rkey, data, 8, 0) == 0);
	REQUIRE(send_write(&rp, v->qp_num ^ 0x800000, 0, (uintptr_t)tgt.p, tgt.mr->rkey, data, 8,
			   0) == 0);
	REQUIRE(send_write(&rp, 1, 0, (uintptr_t)tgt.p, tgt.mr->rkey, data, 8, 0) == 0);
	EXPECT_DROP("drop_qpn", b, 3);

	/* A P_Key that is not the port's (0x7fff matches: only the low 15 bits count). */
	b = vu_stat("drop_pkey");
	hlen = rp_hdr_write(hdr, OPC(WRITE_ONLY), v->qp_num, 0, true, (uintptr_t)tgt.p,
			    tgt.mr->rkey, 8);
	sr_st_be16(hdr + 2, 0x1234);
	REQUIRE(rp_send(&rp, hdr, hlen, data, 8, 0) == 0);
	EXPECT_DROP("drop_pkey", b, 1);

	/* A UC and a UD opcode at an RC QP. */
	b = vu_stat("drop_qp_type");
	hlen = rp_hdr_write(hdr, SR_OPC(SR_TR_UC, SR_OP_WRITE_ONLY), v->qp_num, 0, false,
			    (uintptr_t)tgt.p, tgt.mr->rkey, 8);
	REQUIRE(rp_send(&rp, hdr, hlen, data, 8, 0) == 0);
	{
		uint8_t op = SR_OPC(SR_TR_UD, SR_OP_SEND_ONLY);
		const struct sr_opcode_info *oi = &sr_opcode[op];

		memset(hdr, 0, sizeof(hdr));
		sr_bth_build((struct sr_bth *)hdr, op, false, false, 0, SR_DEFAULT_PKEY, v->qp_num,
			     false, 0);
		sr_deth_build((struct sr_deth *)(hdr + oi->offset[SR_H_DETH]), 0x11111111, 5);
		REQUIRE(rp_send(&rp, hdr, oi->length, data, 8, 0) == 0);
	}
	EXPECT_DROP("drop_qp_type", b, 2);

	/* From an address that is not the QP's peer. */
	REQUIRE(rp_open(&stranger, &dev.gid) == 0);
	b = vu_stat("drop_src");
	REQUIRE(send_write(&stranger, v->qp_num, 0, (uintptr_t)tgt.p, tgt.mr->rkey, data, 8, 0) == 0);
	EXPECT_DROP("drop_src", b, 1);
	rp_close(&stranger);

	/* At a QP that is not ready (INIT). */
	{
		struct vu_qp_cfg q;
		struct vu_conn_cfg c;
		struct ibv_qp *init;

		vu_qp_cfg_default(&q, IBV_QPT_RC);
		vu_conn_cfg_default(&c);
		init = vu_qp_create(&dev, vcq, vcq, &q);
		REQUIRE(init);
		REQUIRE(vu_qp_to_init(init, &c) == 0);
		b = vu_stat("drop_qp_state");
		REQUIRE(send_write(&rp, init->qp_num, 0, (uintptr_t)tgt.p, tgt.mr->rkey, data, 8,
				   0) == 0);
		EXPECT_DROP("drop_qp_state", b, 1);
		CHECK_EQ(ibv_destroy_qp(init), 0);
	}
	expect_no_reply(20);
	CHECK_TARGET();
	CHECK_EQ(vu_qp_state(v), IBV_QPS_RTS);
}

/* ---- well-formed requests the QP must refuse --------------------------------------------- */
/* Destroys a victim QP, then discards what it sent on the way out (a responder that saw loss
 * repeats its last ACK when destroyed: see sr_resp_final_ack). Those ACKs leave from
 * ibv_destroy_qp itself, so everything queued is read at least once after it, however late
 * this thread runs again: reading one packet a turn for 20 ms left them to the next case
 * when this thread lost the CPU for 20 ms (the next case's first reply was this victim's ACK
 * of PSN 0x700000, in both variants, beside two busy loops at load 11-13). */
static void destroy_victim(struct ibv_qp *v)
{
	uint8_t buf[256];
	struct sr_pkt pkt;
	uint64_t end;

	CHECK_EQ(ibv_destroy_qp(v), 0);
	end = vu_now_ms() + 20;
	do {
		pump(1);
		while (rp_recv(&rp, buf, sizeof(buf), &pkt, 0) > 0)
			;
	} while (vu_now_ms() < end);
}

static void refused(const char *what, unsigned access, uint64_t va, uint32_t rkey,
		    uint8_t want_syn)
{
	uint8_t data[256];
	int64_t b = vu_stat(want_syn == (SR_AETH_NAK | SR_NAK_REM_ACCESS_ERR) ? "access_naks_sent"
										: "inv_req_naks_sent");
	struct ibv_qp *v = victim(access, 100);

	printf("refused WRITE: %s\n", what);
	memset(data, 0x5a, sizeof(data));
	REQUIRE(send_write(&rp, v->qp_num, 100, va, rkey, data, sizeof(data), 0) == 0);
	EXPECT_AETH(want_syn, 100);
	CHECK_EQ(stat_delta(want_syn == (SR_AETH_NAK | SR_NAK_REM_ACCESS_ERR) ? "access_naks_sent"
									     : "inv_req_naks_sent",
			    b, 1, 1000), 1);
	/* The QP is in ERR now (IBA 9.9.3.1.x): what follows is dropped, even a valid request. */
	CHECK_EQ(vu_qp_state(v), IBV_QPS_ERR);
	b = vu_stat("drop_qp_state");
	REQUIRE(send_write(&rp, v->qp_num, 101, (uintptr_t)tgt.p, tgt.mr->rkey, data, 16, 0) == 0);
	EXPECT_DROP("drop_qp_state", b, 1);
	expect_no_reply(10);
	CHECK_TARGET();
	destroy_victim(v);
}

static void test_refused(void)
{
	const unsigned all = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			     IBV_ACCESS_REMOTE_ATOMIC;
	const uint8_t acc = SR_AETH_NAK | SR_NAK_REM_ACCESS_ERR;

	refused("wrong rkey", all, (uintptr_t)tgt.p, tgt.mr->rkey ^ 0x77, acc);
	refused("rkey 0", all, (uintptr_t)tgt.p, 0, acc);
	refused("VA past the end", all, (uintptr_t)tgt.p + TSIZE - 100, tgt.mr->rkey, acc);
	refused("VA before the start", all, (uintptr_t)tgt.p - 4096, tgt.mr->rkey, acc);
	refused("VA + length wrapping 2^64", all, UINT64_MAX - 100, tgt.mr->rkey, acc);
	/* The QP does not grant remote write: an invalid request (IBA 9.7.5.1.x / C9-36). */
	refused("QP without REMOTE_WRITE", IBV_ACCESS_REMOTE_READ, (uintptr_t)tgt.p, tgt.mr->rkey,
		SR_AETH_NAK | SR_NAK_INVALID_REQ);
	/* Another PD's key. */
	{
		struct ibv_pd *pd2 = ibv_alloc_pd(dev.ctx);
		struct ibv_mr *mr2;

		REQUIRE(pd2);
		mr2 = ibv_reg_mr(pd2, tgt.p, TSIZE, (int)VU_ACCESS_ALL);
		REQUIRE(mr2);
		refused("rkey of another PD", all, (uintptr_t)tgt.p, mr2->rkey, acc);
		CHECK_EQ(ibv_dereg_mr(mr2), 0);
		CHECK_EQ(ibv_dealloc_pd(pd2), 0);
	}
}

/* ---- PSNs far out of the window ----------------------------------------------------------- */
static void test_psn_window(void)
{
	const uint32_t E = 0x700000;	/* the victim's expected PSN */
	uint8_t data[128];
	int64_t b_psn, b_dup, b_seq;
	struct ibv_qp *v = victim(IBV_ACCESS_REMOTE_WRITE, E);

	printf("PSNs outside the window\n");
	memset(data, 0x5a, sizeof(data));
	/* Far ahead (but in the "later" half of the PSN space): one sequence NAK, then silence. */
	b_psn = vu_stat("drop_psn");
	b_seq = vu_stat("seq_naks_sent");
	REQUIRE(send_write(&rp, v->qp_num, (E + 0x400000) & 0xffffff, (uintptr_t)tgt.p,
			   tgt.mr->rkey, data, 64, 0) == 0);
	EXPECT_AETH(SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR, E);
	REQUIRE(send_write(&rp, v->qp_num, (E + 0x7fffff) & 0xffffff, (uintptr_t)tgt.p,
			   tgt.mr->rkey, data, 64, 0) == 0);
	/* Just past what the responder keeps after a gap (ooo_window, at most 256): dropped. */
	REQUIRE(send_write(&rp, v->qp_num, (E + 0x100) & 0xffffff, (uintptr_t)tgt.p, tgt.mr->rkey,
			   data, 64, 0) == 0);
	EXPECT_DROP("drop_psn", b_psn, 3);
	CHECK_EQ(vu_stat("seq_naks_sent") - b_seq, 1);
	expect_no_reply(10);
	/* Far behind: a duplicate of something long gone -- nothing executes, it is re-ACKed. */
	b_dup = vu_stat("dup_requests");
	REQUIRE(send_write(&rp, v->qp_num, (E - 0x400000) & 0xffffff, (uintptr_t)tgt.p,
			   tgt.mr->rkey, data, 64, 0) == 0);
	REQUIRE(send_write(&rp, v->qp_num, (E - 1) & 0xffffff, (uintptr_t)tgt.p, tgt.mr->rkey,
			   data, 64, 0) == 0);
	EXPECT_DROP("dup_requests", b_dup, 2);
	{
		/* Each asked for an ACK: the answer names the last PSN executed, E - 1. */
		EXPECT_AETH(SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, (E - 1) & 0xffffff);
		EXPECT_AETH(SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, (E - 1) & 0xffffff);
	}
	CHECK_TARGET();
	CHECK_EQ(vu_qp_state(v), IBV_QPS_RTS);

	/* The expected PSN is still welcome: this one lands, and is acknowledged. */
	vu_fill(data, sizeof(data), 9);
	REQUIRE(send_write(&rp, v->qp_num, E, (uintptr_t)tgt.p + 4096, tgt.mr->rkey, data,
			   sizeof(data), 0) == 0);
	EXPECT_AETH(SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, E);
	CHECK_EQ(vu_check(tgt.p + 4096, sizeof(data), 9), -1);
	memset(tgt.p + 4096, GUARD, sizeof(data));
	CHECK_TARGET();
	destroy_victim(v);
}

/* ---- requests after a gap: kept, then run in order once it is filled ------------------------ */
/* Reads replies until an ACK/NAK with this syndrome and PSN; every earlier one must be a plain
 * ACK for a PSN in [lo, psn). */
static void expect_aeth_after_acks(uint8_t syn, uint32_t psn, uint32_t lo, int line)
{
	uint8_t buf[256];
	struct sr_pkt pkt;
	uint64_t end = vu_now_ms() + 2000;

	while (vu_now_ms() < end) {
		pump(1);
		if (rp_recv(&rp, buf, sizeof(buf), &pkt, 0) <= 0)
			continue;
		uint8_t got = (pkt.mask & SR_M_AETH) ? sr_aeth_syndrome(sr_pkt_h(&pkt, SR_H_AETH))
						     : 0;

		if (pkt.opcode == OPC(ACK) && got == syn && pkt.psn == psn)
			return;
		if (pkt.opcode != OPC(ACK) || got != (SR_AETH_ACK | SR_AETH_ACK_UNLIMITED) ||
		    ((pkt.psn - lo) & 0xffffff) >= ((psn - lo) & 0xffffff)) {
			SR_FAIL("line %d: got %s syndrome 0x%02x PSN %u before syndrome 0x%02x PSN %u",
				line, sr_opcode_name(pkt.opcode), got, pkt.psn, syn, psn);
			return;
		}
	}
	SR_FAIL("line %d: no ACK/NAK syndrome 0x%02x PSN %u", line, syn, psn);
}

static void test_out_of_order(void)
{
	const uint32_t E = 0xfffffe;	/* the gap straddles the PSN wrap */
	const uint32_t ACK_OK = SR_AETH_ACK | SR_AETH_ACK_UNLIMITED;
	uint8_t data[64];
	int64_t b_kept, b_run, b_seq;
	struct ibv_qp *v = victim(IBV_ACCESS_REMOTE_WRITE, E);

	printf("requests after a gap: kept, run once it is filled\n");
	b_kept = vu_stat("ooo_kept");
	b_run = vu_stat("ooo_run");
	b_seq = vu_stat("seq_naks_sent");
	vu_fill(data, sizeof(data), 2);
	REQUIRE(send_write(&rp, v->qp_num, (E + 2) & 0xffffff, (uintptr_t)tgt.p, tgt.mr->rkey,
			   data, sizeof(data), 0) == 0);
	EXPECT_AETH(SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR, E);
	vu_fill(data, sizeof(data), 1);
	REQUIRE(send_write(&rp, v->qp_num, (E + 1) & 0xffffff, (uintptr_t)tgt.p + 1024,
			   tgt.mr->rkey, data, sizeof(data), 0) == 0);
	EXPECT_DROP("ooo_kept", b_kept, 2);
	expect_no_reply(10);			/* one NAK per gap */
	CHECK_EQ(vu_stat("seq_naks_sent") - b_seq, 1);
	CHECK_TARGET();				/* nothing ran yet */
	vu_fill(data, sizeof(data), 0);
	REQUIRE(send_write(&rp, v->qp_num, E, (uintptr_t)tgt.p + 2048, tgt.mr->rkey, data,
			   sizeof(data), 0) == 0);
	expect_aeth_after_acks(ACK_OK, (E + 2) & 0xffffff, E, __LINE__);
	EXPECT_DROP("ooo_run", b_run, 2);
	CHECK_EQ(vu_check(tgt.p + 2048, sizeof(data), 0), -1);
	CHECK_EQ(vu_check(tgt.p + 1024, sizeof(data), 1), -1);
	CHECK_EQ(vu_check(tgt.p, sizeof(data), 2), -1);
	memset(tgt.p, GUARD, 4096);
	CHECK_TARGET();
	/* A resend of a kept request is now a duplicate: re-ACKed, not run again. */
	REQUIRE(send_write(&rp, v->qp_num, (E + 1) & 0xffffff, (uintptr_t)tgt.p + 1024,
			   tgt.mr->rkey, data, sizeof(data), 0) == 0);
	EXPECT_AETH(ACK_OK, (E + 2) & 0xffffff);
	CHECK_TARGET();
	destroy_victim(v);

	/* A kept request is checked when it runs, not when it is kept: a bad rkey is refused then
	 * (access NAK, QP in error), and only the good request before it touched memory. */
	v = victim(IBV_ACCESS_REMOTE_WRITE, 0x100);
	vu_fill(data, sizeof(data), 3);
	REQUIRE(send_write(&rp, v->qp_num, 0x101, (uintptr_t)tgt.p, tgt.mr->rkey ^ 0x5500, data,
			   sizeof(data), 0) == 0);
	EXPECT_AETH(SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR, 0x100);
	REQUIRE(send_write(&rp, v->qp_num, 0x100, (uintptr_t)tgt.p + 1024, tgt.mr->rkey, data,
			   sizeof(data), 0) == 0);
	expect_aeth_after_acks(SR_AETH_NAK | SR_NAK_REM_ACCESS_ERR, 0x101, 0x100, __LINE__);
	CHECK_EQ(vu_check(tgt.p + 1024, sizeof(data), 3), -1);
	memset(tgt.p + 1024, GUARD, sizeof(data));
	CHECK_TARGET();
	CHECK_EQ(vu_qp_state(v), IBV_QPS_ERR);
	destroy_victim(v);
}

/* ---- the even cut of a WRITE (docs/cm.md): what a responder that offers it takes ----------- */
/* The next ACK or NAK from the stack: its AETH type (SR_AETH_ACK / SR_AETH_NAK | code) and PSN. */
static bool next_aeth(uint8_t *type, uint32_t *psn)
{
	static uint8_t buf[256];
	struct sr_pkt pkt;
	int n = next_pkt(buf, sizeof(buf), &pkt);

	if (n <= 0 || pkt.opcode != OPC(ACK))
		return false;
	*type = sr_aeth_syndrome(sr_pkt_h(&pkt, SR_H_AETH));
	if ((*type & SR_AETH_TYPE_MASK) == SR_AETH_ACK)
		*type = SR_AETH_ACK;
	*psn = pkt.psn;
	return true;
}

/* A WRITE of lens[0..n-1] bytes of data packets (FIRST, MIDDLEs, LAST; RETH length rlen) from a
 * raw peer marked as a softrdma NIC of `units` 4 KiB units of segment (0: none), to a fresh
 * victim with path MTU mtu; returns the victim's answer (its AETH type) and checks where the
 * data went: all of it when the answer is an ACK, none past the first packet's otherwise. */
static uint8_t even_write_at(const char *what, const uint32_t *lens, int n, uint32_t rlen,
			     enum ibv_mtu mtu, uint8_t units)
{
	static uint8_t data[4 * 8208];
	struct ibv_qp *v;
	uint8_t hdr[64], type = 0xff;
	uint32_t off = 0, psn = 0;
	struct vu_buf eb;

	printf("even cut: %s\n", what);
	REQUIRE(vu_buf_alloc(&dev, &eb, 2 * sizeof(data), VU_ACCESS_ALL) == 0);
	memset(eb.p, GUARD, eb.len);
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 1);
	v = victim_mtu(IBV_ACCESS_REMOTE_WRITE, 0, mtu);
	for (int i = 0; i < n; i++) {
		uint8_t op = n == 1 ? OPC(WRITE_ONLY) : !i ? OPC(WRITE_FIRST)
					: i == n - 1 ? OPC(WRITE_LAST) : OPC(WRITE_MIDDLE);
		size_t hlen = rp_hdr_write(hdr, op, v->qp_num, (uint32_t)i, i == n - 1,
					   (uintptr_t)eb.p, eb.mr->rkey, rlen);

		hdr[4] |= SR_BTH_SR_MARK | units;	/* softrdma */
		REQUIRE(off + lens[i] <= sizeof(data));
		REQUIRE(rp_send(&rp, hdr, hlen, data + off, lens[i], 0) == 0);
		off += lens[i];
	}
	if (!next_aeth(&type, &psn))
		SR_FAIL("%s: no ACK or NAK", what);
	else if (type == SR_AETH_ACK)
		CHECK_EQ(psn, (uint32_t)n - 1);
	if (type == SR_AETH_ACK) {
		CHECK_EQ(memcmp(eb.p, data, off), 0);
		CHECK_EQ(vu_check_byte(eb.p + off, eb.len - off, GUARD), -1);
	} else {
		CHECK_EQ(vu_check_byte(eb.p + lens[0], eb.len - lens[0], GUARD), -1);
	}
	destroy_victim(v);
	vu_buf_free(&eb);
	return type;
}

/* ... marked as a NIC of 8 KiB segments, to a victim with a 4096-byte path MTU. */
static uint8_t even_write(const char *what, const uint32_t *lens, int n, uint32_t rlen)
{
	return even_write_at(what, lens, n, rlen, IBV_MTU_4096, 2);
}

/* ... marked with no large segment, to a victim with a 1024-byte path MTU: the even cut at the
 * path MTU (SR_BTH_SR_EVENMTU), P at most 1040 and more than half of it. */
static uint8_t even_write_1k(const char *what, const uint32_t *lens, int n, uint32_t rlen)
{
	return even_write_at(what, lens, n, rlen, IBV_MTU_1024, 0);
}

static void test_even_cut(void)
{
	const uint8_t inv = SR_AETH_NAK | SR_NAK_INVALID_REQ;
	int64_t b = vu_stat("inv_req_naks_sent");

	/* Taken: 16 KiB as 8184 + 8200; 64 KiB's shape (8178 + 8194 ..., padded alike). */
	CHECK_EQ(even_write("16 KiB, 8184 + 8200", (const uint32_t[]){ 8184, 8200 }, 2, 16384),
		 SR_AETH_ACK);
	CHECK_EQ(even_write("8178 + 2 x 8194 + 8190", (const uint32_t[]){ 8178, 8194, 8194, 8190 },
			    4, 8178 + 2 * 8194 + 8190),
		 SR_AETH_ACK);
	/* Refused: a MIDDLE that is not the FIRST's payload + 16; a LAST longer than that; a LAST
	 * that leaves bytes of the RETH's length missing. */
	CHECK_EQ(even_write("MIDDLE of 8204 after a FIRST of 8184",
			    (const uint32_t[]){ 8184, 8204, 8200 }, 3, 8184 + 8204 + 8200),
		 inv);
	CHECK_EQ(even_write("LAST of 8204 after a FIRST of 8184", (const uint32_t[]){ 8184, 8204 },
			    2, 8184 + 8204),
		 inv);
	CHECK_EQ(even_write("LAST short of the RETH's length", (const uint32_t[]){ 8184, 8100 }, 2,
			    16384),
		 inv);
	/* At the path MTU, taken: 4 KiB as 1012 + 3 x 1028; 1000 + 1016 + a shorter LAST. */
	CHECK_EQ(even_write_1k("MTU 1024: 4 KiB, 1012 + 3 x 1028",
			       (const uint32_t[]){ 1012, 1028, 1028, 1028 }, 4, 4096),
		 SR_AETH_ACK);
	CHECK_EQ(even_write_1k("MTU 1024: 1000 + 1016 + 990", (const uint32_t[]){ 1000, 1016, 990 },
			       3, 3006),
		 SR_AETH_ACK);
	/* Refused: a P not above half the path MTU + 16; a MIDDLE above the FIRST's payload + 16;
	 * a LAST above it; a FIRST above the path MTU (no large segment offered). */
	CHECK_EQ(even_write_1k("MTU 1024: FIRST of 500 (P 516)", (const uint32_t[]){ 500, 516, 516 },
			       3, 1532),
		 inv);
	CHECK_EQ(even_write_1k("MTU 1024: MIDDLE of 1028 after a FIRST of 1000",
			       (const uint32_t[]){ 1000, 1028, 1000 }, 3, 3028),
		 inv);
	CHECK_EQ(even_write_1k("MTU 1024: LAST of 1020 after a FIRST of 1000",
			       (const uint32_t[]){ 1000, 1020 }, 2, 2020),
		 inv);
	CHECK_EQ(even_write_1k("MTU 1024: FIRST of 1028", (const uint32_t[]){ 1028, 1028 }, 2, 2056),
		 inv);
	CHECK_EQ(vu_stat("inv_req_naks_sent") - b, 7);
	CHECK_TARGET();
}

/* ---- a READ's offer, in BTH byte 4, which the ICRC leaves out (docs/cm.md) ---------------- */
/* The raw peer, marked as a softrdma NIC, asks QP v for len bytes of tgt in large segments
 * (SR_BTH_SR_RDSEG) at PSN psn, with byte4 as its BTH byte 4; true when the responses come cut
 * at seg, their bytes tgt's. A NAK or anything else fails, naming `what`. */
static bool read_offer(struct ibv_qp *v, const char *what, uint32_t psn, uint8_t byte4,
		       uint32_t len, uint32_t seg)
{
	static uint8_t buf[65536 + 256];
	uint8_t hdr[64];
	size_t hlen = rp_hdr_write(hdr, OPC(READ_REQ), v->qp_num, psn, true, (uintptr_t)tgt.p,
				   tgt.mr->rkey, len);
	uint32_t off = 0;

	hdr[4] = byte4;
	sr_bth_set_sr_rdseg((struct sr_bth *)hdr);
	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
	for (uint32_t k = 0; off < len; k++) {
		uint32_t want = len - off < seg ? len - off : seg;
		struct sr_pkt pkt;
		int n = next_pkt(buf, sizeof(buf), &pkt);

		if (n <= 0 || !(pkt.mask & SR_M_READ) || !(pkt.mask & SR_M_RESP) ||
		    pkt.psn != psn + k || pkt.paylen != want) {
			SR_FAIL("%s: response %u: %s PSN %u syndrome 0x%02x, %u bytes; wanted a "
				"READ response, PSN %u, %u bytes", what, k,
				n > 0 ? sr_opcode_name(pkt.opcode) : "none", n > 0 ? pkt.psn : 0,
				n > 0 && (pkt.mask & SR_M_AETH)
					? sr_aeth_syndrome(sr_pkt_h(&pkt, SR_H_AETH))
					: 0,
				n > 0 ? pkt.paylen : 0, psn + k, want);
			return false;
		}
		CHECK_EQ(memcmp(sr_pkt_payload(&pkt), tgt.p + off, want), 0);
		off += want;
	}
	return true;
}

/*
 * A READ request's offer (mark and units) is not covered by the ICRC, so a bit flipped on the
 * way arrives. The responder cuts its responses by the offer it holds for the peer, heard in
 * its earlier packets: a single odd one (units 0 or 1, another size, the mark gone) is counted
 * and changes nothing, where it used to have the READ refused (INVALID_REQ, the QP dead) or cut
 * at a size the requester does not count by. Two packets in a row do change it. A peer whose
 * offer is too small from the first packet on is still refused.
 */
static void test_read_offer(void)
{
	const uint8_t mark8k = SR_BTH_SR_MARK | 2, mark12k = SR_BTH_SR_MARK | 3;
	int64_t kept = vu_stat("offer_kept"), inv = vu_stat("inv_req_naks_sent");
	struct ibv_qp *v;
	uint32_t psn = 0;

	printf("a READ's offer flipped on the way\n");
	for (uint32_t i = 0; i < 32768; i++)
		tgt.p[i] = (uint8_t)(i * 13 + 5);
	v = victim_mtu(IBV_ACCESS_REMOTE_READ, 0, IBV_MTU_4096);
	if (!read_offer(v, "8 KiB segments", psn, mark8k, 16384, 8192))
		goto out;
	psn += 2;
	const struct {
		const char *what;
		uint8_t byte4;
	} odd[] = {
		{ "units 0", SR_BTH_SR_MARK },
		{ "units 1", SR_BTH_SR_MARK | 1 },
		{ "units 3 (12 KiB)", mark12k },
		{ "the mark cleared", 2 },
		{ "no mark, no units", 0 },
	};
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		/* Each after one of the held offer: one odd packet at a time. */
		if (!read_offer(v, odd[i].what, psn, odd[i].byte4, 16384, 8192) ||
		    !read_offer(v, "8 KiB again", psn + 2, mark8k, 16384, 8192))
			goto out;
		psn += 4;
	}
	CHECK_EQ(vu_stat("offer_kept") - kept, 5);
	/* A new offer in two packets in a row is taken from the second. */
	if (!read_offer(v, "12 KiB, once", psn, mark12k, 16384, 8192) ||
	    !read_offer(v, "12 KiB, twice", psn + 2, mark12k, 16384, 12288))
		goto out;
	psn += 4;
	CHECK_EQ(vu_stat("offer_kept") - kept, 6);
	CHECK_EQ(vu_stat("inv_req_naks_sent") - inv, 0);
	CHECK_EQ(vu_qp_state(v), IBV_QPS_RTS);
out:
	destroy_victim(v);
	/* Units 1 from the first packet on: no segment above the path MTU to cut at. */
	v = victim_mtu(IBV_ACCESS_REMOTE_READ, 0, IBV_MTU_4096);
	{
		uint8_t hdr[64];
		size_t hlen = rp_hdr_write(hdr, OPC(READ_REQ), v->qp_num, 0, true,
					   (uintptr_t)tgt.p, tgt.mr->rkey, 16384);

		hdr[4] = SR_BTH_SR_MARK | 1;
		sr_bth_set_sr_rdseg((struct sr_bth *)hdr);
		REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
		EXPECT_AETH(SR_AETH_NAK | SR_NAK_INVALID_REQ, 0);
	}
	destroy_victim(v);
	memset(tgt.p, GUARD, 32768);
}

/* ---- random mutations ---------------------------------------------------------------------- */
static void test_fuzz(void)
{
	/* The fuzzed QPs grant no remote rights: nothing they accept may touch memory. A QP that
	 * a mutation drove to ERR is replaced every 50 packets. */
	struct ibv_qp *v = NULL;
	uint8_t base[128], pkt[256], hdr[64];
	uint64_t rng = 0x5eed;
	size_t hlen = 0;
	const int n = 5000;
	int64_t rx0 = vu_stat("rx_packets");

	printf("%d random mutations\n", n);
	for (int i = 0; i < n; i++) {
		size_t len;
		int flips = 1 + (int)(vu_rand(&rng) % 4);

		if (i % 50 == 0) {
			if (v)
				destroy_victim(v);
			v = victim(0, 0);
			hlen = rp_hdr_write(hdr, OPC(WRITE_ONLY), v->qp_num, 0, true,
					    (uintptr_t)tgt.p, tgt.mr->rkey, 64);
			memcpy(base, hdr, hlen);
			memset(base + hlen, 0x5a, 64);
		}
		len = hlen + 64 + SR_ICRC_LEN;
		memcpy(pkt, base, hlen + 64);
		for (int f = 0; f < flips; f++)
			pkt[vu_rand(&rng) % (hlen + 64)] ^= (uint8_t)(1 + vu_rand(&rng) % 255);
		if (vu_rand(&rng) % 4 == 0)
			len = vu_rand(&rng) % (hlen + 64 + SR_ICRC_LEN + 1);
		/* Mostly keep the BTH's QPN: the mutations must reach a QP to be interesting. */
		if (vu_rand(&rng) % 8 && len >= 8)
			sr_st_be32(pkt + 4, (uint32_t)pkt[4] << 24 | v->qp_num);
		if (len >= SR_ICRC_LEN && vu_rand(&rng) % 8)
			sr_st_le32(pkt + len - 4, rp_icrc(&rp, pkt, len));
		REQUIRE(rp_send_raw(&rp, pkt, len) == 0);
		if (i % 64 == 63)
			pump(1);	/* do not overrun the socket buffer */
	}
	CHECK(stat_delta("rx_packets", rx0, n, 5000) >= n);
	pump(20);
	CHECK_TARGET();
	{
		/* Drain what the victims said back (NAKs, ACKs): nothing to check, only that the
		 * stack did not fall over. */
		uint8_t buf[256];

		while (rp_recv(&rp, buf, sizeof(buf), NULL, 0) != 0)
			;
	}
	destroy_victim(v);
}

/* ---- the stack still works ----------------------------------------------------------------- */
static void test_still_works(void)
{
	struct ibv_wc wc;

	printf("normal transfer afterwards\n");
	vu_fill(lb.p, 100000, 3);
	memset(tgt.p, 0, 200000);
	CHECK_EQ(vu_post_recv(pair.qp[1], 1, tgt.mr, tgt.p + 100000, 100000), 0);
	CHECK_EQ(vu_post_rdma(pair.qp[0], 2, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 100000,
			      (uintptr_t)tgt.p, tgt.mr->rkey, 0), 0);
	CHECK_EQ(vu_post_send(pair.qp[0], 3, IBV_WR_SEND, lb.mr, lb.p, 100000, 0, 0), 0);
	for (int i = 0; i < 2; i++) {
		CHECK(vu_wait(pair.scq[0], &wc, 5000));
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	}
	CHECK(vu_wait(pair.rcq[1], &wc, 5000));
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.byte_len, 100000);
	CHECK_EQ(vu_check(tgt.p, 100000, 3), -1);
	CHECK_EQ(vu_check(tgt.p + 100000, 100000, 3), -1);
	memset(lb.p, 0, 100000);
	CHECK_EQ(vu_post_rdma(pair.qp[0], 4, IBV_WR_RDMA_READ, lb.mr, lb.p, 100000,
			      (uintptr_t)tgt.p, tgt.mr->rkey, 0), 0);
	CHECK(vu_wait(pair.scq[0], &wc, 5000));
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(vu_check(lb.p, 100000, 3), -1);
	CHECK_EQ(vu_qp_state(pair.qp[0]), IBV_QPS_RTS);
	CHECK_EQ(vu_qp_state(pair.qp[1]), IBV_QPS_RTS);
}

int main(void)
{
	struct ibv_qp *v;

	sr_test_timeout(120);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_stat("rx_packets") >= 0);	/* the counter file is readable */
	REQUIRE(vu_buf_alloc(&dev, &tgt, TSIZE, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, TSIZE, VU_ACCESS_ALL) == 0);
	memset(tgt.p, GUARD, TSIZE);
	REQUIRE(vu_pair_create(&dev, NULL, NULL, &pair) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	vcq = ibv_create_cq(dev.ctx, 256, NULL, NULL, 0);
	REQUIRE(vcq);

	v = victim(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 0);
	test_malformed(v);
	test_misdirected(v);
	destroy_victim(v);
	test_refused();
	test_psn_window();
	test_out_of_order();
	test_even_cut();
	test_read_offer();
	test_fuzz();
	test_still_works();

	printf("drops: short %lld opcode %lld tver %lld pad %lld icrc %lld qpn %lld pkey %lld "
	       "qp_type %lld qp_state %lld src %lld psn %lld; NAKs: access %lld inv_req %lld "
	       "seq %lld\n", (long long)vu_stat("drop_short"), (long long)vu_stat("drop_opcode"),
	       (long long)vu_stat("drop_tver"), (long long)vu_stat("drop_pad"),
	       (long long)vu_stat("drop_icrc"), (long long)vu_stat("drop_qpn"),
	       (long long)vu_stat("drop_pkey"), (long long)vu_stat("drop_qp_type"),
	       (long long)vu_stat("drop_qp_state"), (long long)vu_stat("drop_src"),
	       (long long)vu_stat("drop_psn"), (long long)vu_stat("access_naks_sent"),
	       (long long)vu_stat("inv_req_naks_sent"), (long long)vu_stat("seq_naks_sent"));

	CHECK_EQ(ibv_destroy_cq(vcq), 0);
	rp_close(&rp);
	vu_pair_destroy(&pair);
	vu_buf_free(&tgt);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_hostile_packets");
}
